#include "core/mcp/era.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <mbedtls/base64.h>

#include "core/base/json.h"
#include "core/wire/msg.h"

static const char *const modern_versions[] = {TG_MCP_MODERN_VERSION, NULL};

int tg_mcp_modern_version_supported(const char *v)
{
    for (int i = 0; v != NULL && modern_versions[i]; i++)
        if (strcmp(v, modern_versions[i]) == 0)
            return 1;
    return 0;
}

void tg_mcp_unsupported_version_data(struct tg_buf *out, const char *requested)
{
    tg_buf_appends(out, "{\"supported\":[");
    for (int i = 0; modern_versions[i]; i++) {
        if (i)
            tg_buf_append(out, ",", 1);
        tg_json_write_string(out, modern_versions[i], strlen(modern_versions[i]));
    }
    tg_buf_appends(out, "],\"requested\":");
    if (requested)
        tg_json_write_string(out, requested, strlen(requested));
    else
        tg_buf_appends(out, "null");
    tg_buf_append(out, "}", 2);
}

static int refuse(struct tg_mcp_refusal *why, int code, int status, const char *msg)
{
    if (why != NULL) {
        why->code = code;
        why->status = status;
        snprintf(why->message, sizeof(why->message), "%s", msg);
    }
    return -1;
}

int tg_mcp_classify(const cJSON *root, struct tg_mcp_claim *out, struct tg_mcp_refusal *why)
{
    memset(out, 0, sizeof(*out));
    out->era = TG_ERA_2025;
    const cJSON *params = tg_json_get(root, "params");
    const cJSON *meta = cJSON_IsObject(params) ? tg_json_get(params, "_meta") : NULL;
    const cJSON *v = cJSON_IsObject(meta) ? tg_json_get(meta, TG_MCP_META_VERSION) : NULL;
    if (v == NULL)
        return 0; /* no modern claim: the 2025 rules apply */
    if (!cJSON_IsString(v))
        return refuse(why, TG_RPC_INVALID_PARAMS, 400,
                      "Invalid params: _meta[\"" TG_MCP_META_VERSION "\"] must be a string");
    const cJSON *caps = tg_json_get(meta, TG_MCP_META_CAPS);
    if (!cJSON_IsObject(caps))
        return refuse(why, TG_RPC_INVALID_PARAMS, 400,
                      "Invalid params: a 2026-07-28 request needs _meta[\"" TG_MCP_META_CAPS "\"] (an object)");
    out->era = TG_ERA_2026;
    out->version = v->valuestring;
    out->caps = caps;
    return 0;
}

/* ---- header values ----------------------------------------------------------------------- */

static int is_ows(char c) { return c == ' ' || c == '\t'; }

/* tg_mcp_header_value without the copy of a value that is not base64: *d is then the trimmed
 * bytes of raw, else the decoded bytes in out. */
static int header_value_view(struct tg_slice raw, struct tg_buf *out, struct tg_slice *d)
{
    const char *p = raw.ptr;
    size_t n = raw.len;
    while (n > 0 && is_ows(p[0]))
        p++, n--;
    while (n > 0 && is_ows(p[n - 1]))
        n--;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c > 0x7e)
            return -1; /* control characters and non-ASCII travel base64-encoded */
    }
    out->len = 0;
    if (n >= 11 && memcmp(p, "=?base64?", 9) == 0 && memcmp(p + n - 2, "?=", 2) == 0) {
        const unsigned char *b = (const unsigned char *)p + 9;
        size_t bn = n - 11, olen = 0;
        if (mbedtls_base64_decode(NULL, 0, &olen, b, bn) == MBEDTLS_ERR_BASE64_INVALID_CHARACTER)
            return -1;
        if (tg_buf_try_reserve(out, olen + 1, 0) != 0)
            return -1;
        if (mbedtls_base64_decode((unsigned char *)out->base, olen + 1, &olen, b, bn) != 0)
            return -1;
        out->len = olen;
        /* Only the canonical encoding: mbedtls also takes stray '=' and spaces, and one value
         * must not be writable several ways. */
        size_t elen = 0;
        mbedtls_base64_encode(NULL, 0, &elen, (const unsigned char *)out->base, olen);
        unsigned char *again = tg_xmalloc(elen + 1);
        int canonical = mbedtls_base64_encode(again, elen + 1, &elen, (const unsigned char *)out->base, olen) == 0 &&
                        elen == bn && memcmp(again, b, bn) == 0;
        free(again);
        *d = tg_slice_of(out->base, out->len);
        return canonical ? 0 : -1;
    }
    *d = tg_slice_of(p, n);
    return 0;
}

int tg_mcp_header_value(struct tg_slice raw, struct tg_buf *out)
{
    struct tg_slice d;
    int rc = header_value_view(raw, out, &d);
    if (rc == 0 && out->len == 0 && d.len > 0)
        tg_buf_append(out, d.ptr, d.len); /* not base64: a copy of the trimmed bytes */
    return rc;
}

int tg_mcp_header_matches(struct tg_slice d, const cJSON *v)
{
    if (cJSON_IsString(v))
        return strlen(v->valuestring) == d.len && memcmp(v->valuestring, d.ptr, d.len) == 0;
    if (cJSON_IsBool(v))
        return tg_slice_eq(d, cJSON_IsTrue(v) ? TG_SLICE("true") : TG_SLICE("false"));
    if (cJSON_IsNumber(v)) {
        double x = v->valuedouble;
        if (!isfinite(x) || x != floor(x) || fabs(x) > 9007199254740992.0)
            return 0; /* x-mcp-header is for integers, not numbers */
        char buf[32];
        size_t i = 0;
        if (d.len == 0 || d.len >= sizeof(buf))
            return 0;
        for (; i < d.len; i++) {
            char c = d.ptr[i];
            if (!((c >= '0' && c <= '9') || (i == 0 && c == '-')))
                return 0;
            buf[i] = c;
        }
        buf[i] = '\0';
        char *end = NULL;
        double y = strtod(buf, &end);
        return end == buf + i && y == x; /* compared as numbers: "007" states 7 */
    }
    return 0;
}

/* ---- the standard headers ---------------------------------------------------------------- */

/* The one value of header name: 0 and *v; 1 if absent; -1 if given twice. (Two values joined
 * with a comma by some proxy are one value that does not equal the body's: the comparison
 * refuses them, while a URI that really has a comma still matches.) */
static int one_header(const struct tg_mcp_header *h, size_t nh, const char *name, struct tg_slice *v)
{
    int found = 0;
    for (size_t i = 0; i < nh; i++) {
        if (!tg_slice_eq_nocase(h[i].name, name))
            continue;
        if (found++)
            return -1;
        *v = h[i].value;
    }
    return found ? 0 : 1;
}

static int mismatch(struct tg_mcp_refusal *why, const char *header, const char *what)
{
    char msg[200];
    snprintf(msg, sizeof(msg), "Header mismatch: %s %s", header, what);
    return refuse(why, TG_RPC_HEADER_MISMATCH, 400, msg);
}

/* Header name against a body value (body_value, or the string body_str when body_value is NULL). */
static int check_one(const struct tg_mcp_header *h, size_t nh, const char *name, const cJSON *body_value,
                     const char *body_str, struct tg_buf *scratch, struct tg_mcp_refusal *why)
{
    struct tg_slice raw;
    int r = one_header(h, nh, name, &raw);
    if (r > 0)
        return mismatch(why, name, "is missing");
    if (r < 0)
        return mismatch(why, name, "is given more than once");
    struct tg_slice d;
    if (header_value_view(raw, scratch, &d) != 0)
        return mismatch(why, name, "is not a valid header value");
    if (body_value != NULL ? !tg_mcp_header_matches(d, body_value) : !tg_slice_eq(d, tg_slice_cstr(body_str)))
        return mismatch(why, name, "does not match the body");
    return 0;
}

/* The params member Mcp-Name states for a method, or NULL: the tasks extension's methods name
 * their task (SEP-2663). */
static const char *name_key(const char *m)
{
    if (strcmp(m, "tools/call") == 0 || strcmp(m, "prompts/get") == 0)
        return "name";
    if (strcmp(m, "tasks/get") == 0 || strcmp(m, "tasks/update") == 0 || strcmp(m, "tasks/cancel") == 0)
        return "taskId";
    return strcmp(m, "resources/read") == 0 ? "uri" : NULL;
}

int tg_mcp_check_headers(const struct tg_mcp_header *h, size_t nh, const cJSON *root,
                         const struct tg_mcp_claim *claim, struct tg_mcp_refusal *why)
{
    struct tg_buf scratch;
    tg_buf_init(&scratch);
    int rc = -1;
    const cJSON *method = tg_json_get(root, "method");
    const cJSON *params = tg_json_get(root, "params");
    if (check_one(h, nh, "mcp-protocol-version", NULL, claim->version ? claim->version : "", &scratch, why) != 0)
        goto out;
    if (!cJSON_IsString(method)) {
        refuse(why, TG_RPC_INVALID_REQUEST, 400, "Invalid Request: method must be a string");
        goto out;
    }
    if (check_one(h, nh, "mcp-method", method, NULL, &scratch, why) != 0)
        goto out;
    const char *m = method->valuestring;
    const char *key = name_key(m);
    struct tg_slice raw;
    if (key != NULL) {
        const cJSON *name = cJSON_IsObject(params) ? tg_json_get(params, key) : NULL;
        if (!cJSON_IsString(name)) {
            char msg[120];
            snprintf(msg, sizeof(msg), "Invalid params: %s needs params.%s (a string)", m, key);
            refuse(why, TG_RPC_INVALID_PARAMS, 400, msg);
            goto out;
        }
        if (check_one(h, nh, "mcp-name", name, NULL, &scratch, why) != 0)
            goto out;
    } else if (one_header(h, nh, "mcp-name", &raw) != 1) {
        mismatch(why, "Mcp-Name", "is given for a method that names nothing");
        goto out;
    }
    rc = 0;
out:
    tg_buf_dispose(&scratch);
    return rc;
}

/* ---- x-mcp-header ------------------------------------------------------------------------ */

static int is_token_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c);
}

/* Each marked property of schema (recursing through "properties" only) to fn; stops at the
 * first fn that returns non-zero. */
/* How deep a schema is followed; a mark deeper than this makes the tool invalid (it could not
 * be checked). */
#define MAX_SCHEMA_DEPTH 32

typedef int (*marked_cb)(const char *header, const cJSON *prop, const cJSON *args, void *ud);

static int walk(const cJSON *schema, const cJSON *args, marked_cb fn, void *ud, int depth)
{
    const cJSON *props = tg_json_get(schema, "properties");
    if (!cJSON_IsObject(props) || depth > MAX_SCHEMA_DEPTH)
        return 0;
    for (const cJSON *p = props->child; p; p = p->next) {
        const cJSON *arg = cJSON_IsObject(args) ? tg_json_get(args, p->string) : NULL;
        const cJSON *mark = tg_json_get(p, "x-mcp-header");
        if (mark != NULL) {
            int r = fn(cJSON_IsString(mark) ? mark->valuestring : NULL, p, arg, ud);
            if (r != 0)
                return r;
        }
        int r = walk(p, arg, fn, ud, depth + 1);
        if (r != 0)
            return r;
    }
    return 0;
}

/* 1 if an annotation sits where "properties" alone does not reach (items, *Of, not,
 * if/then/else, $ref, or below any of them). on_path: node was reached from the root through
 * "properties" maps only. */
static int marked_off_path(const cJSON *node, int on_path, int depth)
{
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
        return 0;
    if (depth > MAX_SCHEMA_DEPTH)
        return 1; /* too deep to judge, or to check: the tool is dropped */
    if (cJSON_IsObject(node) && !on_path && tg_json_get(node, "x-mcp-header") != NULL)
        return 1;
    for (const cJSON *c = node->child; c; c = c->next) {
        int props = on_path && cJSON_IsObject(node) && c->string != NULL && strcmp(c->string, "properties") == 0 &&
                    cJSON_IsObject(c);
        if (props) {
            for (const cJSON *p = c->child; p; p = p->next)
                if (marked_off_path(p, 1, depth + 1))
                    return 1;
        } else if (marked_off_path(c, 0, depth + 1)) {
            return 1;
        }
    }
    return 0;
}

struct valid_ctx {
    char seen[64][64];
    int nseen;
};

static int check_mark(const char *header, const cJSON *prop, const cJSON *args, void *ud)
{
    struct valid_ctx *v = ud;
    const cJSON *type = tg_json_get(prop, "type");
    if (header == NULL || header[0] == '\0' || strlen(header) >= sizeof(v->seen[0]) || !cJSON_IsString(type))
        return 1;
    if (strcmp(type->valuestring, "string") != 0 && strcmp(type->valuestring, "integer") != 0 &&
        strcmp(type->valuestring, "boolean") != 0)
        return 1; /* never on number, object or array */
    for (const char *c = header; *c; c++)
        if (!is_token_char(*c))
            return 1;
    for (int i = 0; i < v->nseen; i++)
        if (strcasecmp(v->seen[i], header) == 0)
            return 1;
    if (v->nseen == 64)
        return 1;
    snprintf(v->seen[v->nseen++], sizeof(v->seen[0]), "%s", header);
    return 0;
}

int tg_mcp_tool_headers_valid(const cJSON *input_schema)
{
    if (input_schema == NULL)
        return 1;
    struct valid_ctx v;
    v.nseen = 0;
    if (tg_json_get(input_schema, "x-mcp-header") != NULL)
        return 0; /* on the schema itself: no property carries it */
    /* The root is on the path (its own annotation was refused above). */
    if (marked_off_path(input_schema, 1, 0))
        return 0;
    return walk(input_schema, NULL, check_mark, &v, 0) == 0;
}

struct param_ctx {
    const struct tg_mcp_header *h;
    size_t nh;
    struct tg_buf scratch;
    struct tg_mcp_refusal *why;
};

static int check_param(const char *header, const cJSON *prop, const cJSON *arg, void *ud)
{
    struct param_ctx *pc = ud;
    if (header == NULL)
        return 0; /* an invalid annotation: the tool is dropped from tools/list, not checked here */
    char name[96];
    snprintf(name, sizeof(name), "mcp-param-%s", header);
    struct tg_slice raw;
    int r = one_header(pc->h, pc->nh, name, &raw);
    int present = arg != NULL && !cJSON_IsNull(arg);
    if (!present)
        return r == 1 ? 0 : mismatch(pc->why, name, "is given for an argument the body does not have");
    return check_one(pc->h, pc->nh, name, arg, NULL, &pc->scratch, pc->why) != 0;
}

int tg_mcp_check_param_headers(const struct tg_mcp_header *h, size_t nh, const cJSON *input_schema,
                               const cJSON *arguments, struct tg_mcp_refusal *why)
{
    struct param_ctx pc = {h, nh, {0}, why};
    tg_buf_init(&pc.scratch);
    int r = walk(input_schema, arguments, check_param, &pc, 0);
    tg_buf_dispose(&pc.scratch);
    return r != 0 ? -1 : 0;
}

void tg_mcp_header_value_write(struct tg_buf *out, const char *v, size_t n)
{
    int plain = n == 0 || (v[0] != ' ' && v[0] != '\t' && v[n - 1] != ' ' && v[n - 1] != '\t');
    for (size_t i = 0; plain && i < n; i++)
        if ((unsigned char)v[i] < 0x20 || (unsigned char)v[i] > 0x7e)
            plain = 0;
    if (plain && n >= 9 && memcmp(v, "=?base64?", 9) == 0)
        plain = 0;
    if (plain) {
        tg_buf_append(out, v, n);
        return;
    }
    size_t olen = 0;
    mbedtls_base64_encode(NULL, 0, &olen, (const unsigned char *)v, n);
    unsigned char *b = tg_xmalloc(olen + 1);
    if (mbedtls_base64_encode(b, olen + 1, &olen, (const unsigned char *)v, n) == 0) {
        tg_buf_appends(out, "=?base64?");
        tg_buf_append(out, b, olen);
        tg_buf_appends(out, "?=");
    }
    free(b);
}

void tg_mcp_upstream_headers(struct tg_buf *out, const cJSON *root, const char *version, const char *extra)
{
    const cJSON *method = tg_json_get(root, "method");
    const cJSON *params = tg_json_get(root, "params");
    tg_buf_appends(out, "MCP-Protocol-Version: ");
    tg_mcp_header_value_write(out, version, strlen(version));
    tg_buf_appends(out, "\r\n");
    if (cJSON_IsString(method)) {
        const char *m = method->valuestring;
        tg_buf_appends(out, "Mcp-Method: ");
        tg_mcp_header_value_write(out, m, strlen(m));
        tg_buf_appends(out, "\r\n");
        const char *key = name_key(m);
        const cJSON *name = key != NULL ? tg_json_get(params, key) : NULL;
        if (cJSON_IsString(name)) {
            tg_buf_appends(out, "Mcp-Name: ");
            tg_mcp_header_value_write(out, name->valuestring, strlen(name->valuestring));
            tg_buf_appends(out, "\r\n");
        }
    }
    if (extra != NULL)
        tg_buf_appends(out, extra);
    tg_buf_append(out, "", 1);
    out->len--;
}

/* Delete member key of o; 1 if there was one. */
static int drop(cJSON *o, const char *key)
{
    cJSON *it = cJSON_DetachItemFromObjectCaseSensitive(o, key);
    cJSON_Delete(it);
    return it != NULL;
}

int tg_mcp_strip_claim(cJSON *root)
{
    cJSON *params = tg_json_get(root, "params");
    cJSON *meta = tg_json_get(params, "_meta");
    if (!cJSON_IsObject(meta))
        return 0;
    int n = drop(meta, TG_MCP_META_VERSION);
    n |= drop(meta, TG_MCP_META_CAPS);
    n |= drop(meta, "io.modelcontextprotocol/clientInfo");
    n |= drop(meta, "io.modelcontextprotocol/logLevel");
    if (meta->child == NULL)
        n |= drop(params, "_meta");
    return n;
}

struct build_ctx {
    struct tg_buf *out;
    char marked[64][64];
    int nmarked;
};

static int build_param(const char *header, const cJSON *prop, const cJSON *arg, void *ud)
{
    (void)prop;
    struct build_ctx *bc = ud;
    if (header == NULL || strlen(header) >= sizeof(bc->marked[0]) || bc->nmarked == 64)
        return 0;
    snprintf(bc->marked[bc->nmarked++], sizeof(bc->marked[0]), "%s", header);
    if (arg == NULL || cJSON_IsNull(arg))
        return 0; /* absent or null: no header */
    char num[32];
    const char *v = NULL;
    if (cJSON_IsString(arg))
        v = arg->valuestring;
    else if (cJSON_IsBool(arg))
        v = cJSON_IsTrue(arg) ? "true" : "false";
    else if (cJSON_IsNumber(arg) && fabs(arg->valuedouble) <= 9007199254740992.0 &&
             arg->valuedouble == (double)(long long)arg->valuedouble)
        /* (the range first, as tg_mcp_header_matches has it: a cast out of range is undefined) */
        snprintf(num, sizeof(num), "%lld", (long long)arg->valuedouble), v = num;
    if (v == NULL)
        return 0; /* not a value a header can state: the upstream sees only the body */
    tg_buf_appends(bc->out, "Mcp-Param-");
    tg_buf_appends(bc->out, header);
    tg_buf_appends(bc->out, ": ");
    tg_mcp_header_value_write(bc->out, v, strlen(v));
    tg_buf_appends(bc->out, "\r\n");
    return 0;
}

void tg_mcp_param_headers_build(struct tg_buf *out, const struct tg_mcp_header *h, size_t nh, const cJSON *input_schema,
                                const cJSON *arguments)
{
    struct build_ctx bc;
    bc.out = out;
    bc.nmarked = 0;
    if (input_schema != NULL)
        walk(input_schema, arguments, build_param, &bc, 0);
    for (size_t i = 0; i < nh; i++) {
        struct tg_slice n = h[i].name;
        if (n.len <= 10 || strncasecmp(n.ptr, "mcp-param-", 10) != 0)
            continue;
        int known = 0;
        for (int j = 0; j < bc.nmarked && !known; j++)
            known = strlen(bc.marked[j]) == n.len - 10 && strncasecmp(bc.marked[j], n.ptr + 10, n.len - 10) == 0;
        if (known)
            continue; /* rebuilt above from the body, never copied */
        tg_buf_append(out, n.ptr, n.len);
        tg_buf_appends(out, ": ");
        tg_buf_append(out, h[i].value.ptr, h[i].value.len);
        tg_buf_appends(out, "\r\n");
    }
    if (out->len > 0) { /* nothing: nothing allocated (the common case: no Mcp-Param-* at all) */
        tg_buf_append(out, "", 1);
        out->len--;
    }
}

static const char *const log_levels[] = {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency", NULL};

unsigned tg_mcp_log_level(const char *name)
{
    for (unsigned i = 0; name != NULL && log_levels[i]; i++)
        if (strcmp(log_levels[i], name) == 0)
            return i + 1;
    return 0;
}

const char *tg_mcp_log_level_name(unsigned level) { return level >= 1 && level <= 8 ? log_levels[level - 1] : NULL; }

void tg_mcp_add_claim(cJSON *root, const char *caps, unsigned log_level)
{
    cJSON *params = tg_json_get(root, "params");
    if (!cJSON_IsObject(params)) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "params");
        params = cJSON_AddObjectToObject(root, "params");
    }
    cJSON *meta = tg_json_get(params, "_meta");
    if (!cJSON_IsObject(meta)) {
        cJSON_DeleteItemFromObjectCaseSensitive(params, "_meta");
        meta = cJSON_AddObjectToObject(params, "_meta");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(meta, TG_MCP_META_VERSION);
    cJSON_DeleteItemFromObjectCaseSensitive(meta, TG_MCP_META_CAPS);
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "io.modelcontextprotocol/clientInfo");
    cJSON_AddStringToObject(meta, TG_MCP_META_VERSION, TG_MCP_MODERN_VERSION);
    cJSON *c = caps != NULL ? cJSON_Parse(caps) : NULL;
    cJSON_AddItemToObject(meta, TG_MCP_META_CAPS, cJSON_IsObject(c) ? c : cJSON_CreateObject());
    if (c != NULL && !cJSON_IsObject(c))
        cJSON_Delete(c);
    cJSON *info = cJSON_AddObjectToObject(meta, "io.modelcontextprotocol/clientInfo");
    cJSON_AddStringToObject(info, "name", "tollgate");
    cJSON_AddStringToObject(info, "version", TG_VERSION);
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "io.modelcontextprotocol/logLevel");
    if (tg_mcp_log_level_name(log_level) != NULL)
        cJSON_AddStringToObject(meta, "io.modelcontextprotocol/logLevel", tg_mcp_log_level_name(log_level));
}
