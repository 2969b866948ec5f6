/* The MCP 2026-07-28 header checks against a body (core/mcp/era.c): tg_mcp_classify,
 * tg_mcp_header_value, tg_mcp_check_headers, tg_mcp_tool_headers_valid,
 * tg_mcp_check_param_headers, tg_mcp_upstream_headers and tg_mcp_param_headers_build.
 *
 * Input: a header block ("Name: value" lines up to the first blank line), then a JSON-RPC body
 * up to the next blank line, then optionally a tool's inputSchema (JSON) to the end:
 *
 *   MCP-Protocol-Version: 2026-07-28
 *   Mcp-Method: tools/call
 *   Mcp-Name: echo
 *   Mcp-Param-Region: eu
 *
 *   {"jsonrpc":"2.0","id":1,"method":"tools/call","params":{...}}
 *
 *   {"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}
 *
 * An input with a header line that llhttp would refuse (a control byte other than HTAB) stops
 * after the split: the gateway never checks such a request.
 * Properties:
 *   every header value: tg_mcp_header_value takes it exactly when the decoder here does, and
 *   makes the same bytes of it;
 *   a 2026 request that tg_mcp_check_headers accepts has exactly one MCP-Protocol-Version,
 *   Mcp-Method and (for tools/call, prompts/get, resources/read) Mcp-Name, whose values, decoded
 *   here independently (OWS trimmed, printable ASCII, strict canonical =?base64?...?=), equal
 *   _meta's version, method and params.name/uri; no Mcp-Name for other methods;
 *   the headers tg_mcp_upstream_headers rebuilds from that body pass tg_mcp_check_headers;
 *   with a valid schema (tg_mcp_tool_headers_valid), Mcp-Param-* headers that
 *   tg_mcp_check_param_headers accepts state each marked argument (present and not null) once,
 *   and none for an absent or null one (checked here independently), and the headers
 *   tg_mcp_param_headers_build forwards pass tg_mcp_check_param_headers again;
 *   tg_mcp_param_headers_build takes any arguments (a 2025 client's are not header-checked).
 * Any input: no crash, no leak, no undefined behaviour.
 *
 * Its first gateway finding, fixed: build_param() in core/mcp/era.c cast a number argument to
 * long long before knowing it fits ((long long)1e300 is undefined behaviour); the inputs are
 * in regress/headers2026. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/json.h"
#include "core/mcp/era.h"
#include "core/wire/msg.h"

#define DEPTH 64
#define MAXH 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct hdrs {
    struct tg_mcp_header h[MAXH];
    size_t n;
};

/* Offset of the first blank line in p (a line that is empty or only "\r"), *next past it;
 * n (and *next = n) if none. */
static size_t blank_line(const char *p, size_t n, size_t *next)
{
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\n')
            continue;
        size_t j = i + 1;
        if (j < n && p[j] == '\r')
            j++;
        if (j < n && p[j] == '\n') {
            *next = j + 1;
            return i;
        }
    }
    *next = n;
    return n;
}

/* 1 if a header line could come from llhttp (strict, as transports/http1/conn.c runs it): no
 * control byte but HTAB, and no DEL. Other lines make the request fail before any check. */
static int wire_ok(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)p[i] < 0x20 && p[i] != '\t') || p[i] == 0x7f)
            return 0;
    return 1;
}

/* Header lines "Name: value" (or "Name:value"; a line without ':' is a name with an empty
 * value), each ended by "\n" or "\r\n". The value keeps its whitespace: trimming is the
 * decoder's job. Returns -1 for a line llhttp would refuse (see wire_ok). */
static int split_headers(const char *p, size_t n, struct hdrs *out)
{
    out->n = 0;
    size_t i = 0;
    while (i < n && out->n < MAXH) {
        size_t e = i;
        while (e < n && p[e] != '\n')
            e++;
        size_t le = e;
        if (le > i && p[le - 1] == '\r')
            le--;
        if (le > i && !wire_ok(p + i, le - i))
            return -1;
        if (le > i) {
            const char *colon = memchr(p + i, ':', le - i);
            struct tg_mcp_header *h = &out->h[out->n++];
            if (colon == NULL) {
                h->name = tg_slice_of(p + i, le - i);
                h->value = tg_slice_of(p + le, 0);
            } else {
                h->name = tg_slice_of(p + i, (size_t)(colon - (p + i)));
                h->value = tg_slice_of(colon + 1, (size_t)(p + le - colon - 1));
            }
        }
        i = e + 1;
    }
    return 0;
}

/* The lines the gateway writes ("Name: value\r\n"): every line must have ": " and end in CRLF,
 * with no CR or LF inside. */
static void split_written(const struct tg_buf *b, struct hdrs *out)
{
    out->n = 0;
    size_t i = 0;
    while (i < b->len) {
        const char *p = b->base + i;
        const char *nl = memchr(p, '\n', b->len - i);
        if (nl == NULL || nl == p || nl[-1] != '\r')
            abort(); /* a line the gateway writes always ends in CRLF */
        size_t len = (size_t)(nl - p) - 1;
        const char *colon = memchr(p, ':', len);
        if (colon == NULL || colon + 1 >= p + len + 1 || memchr(p, '\r', len) != NULL)
            abort();
        if (out->n == MAXH)
            abort(); /* the harness never gives more than MAXH, and the gateway adds at most 3 */
        struct tg_mcp_header *h = &out->h[out->n++];
        h->name = tg_slice_of(p, (size_t)(colon - p));
        h->value = tg_slice_of(colon + 1, (size_t)(p + len - colon - 1));
        i += len + 2;
    }
}

static int eq_nocase(struct tg_slice a, const char *s)
{
    return a.len == strlen(s) && strncasecmp(a.ptr, s, a.len) == 0;
}

/* The one header called name: its index, -1 if absent, -2 if more than one. */
static int find_one(const struct hdrs *h, const char *name)
{
    int at = -1;
    for (size_t i = 0; i < h->n; i++)
        if (eq_nocase(h->h[i].name, name)) {
            if (at >= 0)
                return -2;
            at = (int)i;
        }
    return at;
}

static int b64_index(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* An independent decoder of a header value (the spec's rule, written from it, not from era.c):
 * trim SP/HT, printable ASCII only, and =?base64?B?= with B the canonical padded encoding
 * (length a multiple of 4, '=' only as the last one or two, unused bits zero). out has room
 * for raw.len bytes. Returns the decoded length, or -1. */
static long decode(struct tg_slice raw, unsigned char *out)
{
    const char *p = raw.ptr;
    size_t n = raw.len;
    while (n && (p[0] == ' ' || p[0] == '\t'))
        p++, n--;
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] > 0x7e)
            return -1;
    if (!(n >= 11 && memcmp(p, "=?base64?", 9) == 0 && memcmp(p + n - 2, "?=", 2) == 0)) {
        memcpy(out, p, n);
        return (long)n;
    }
    const unsigned char *b = (const unsigned char *)p + 9;
    size_t bn = n - 11, o = 0;
    if (bn % 4 != 0)
        return -1;
    for (size_t i = 0; i < bn; i += 4) {
        int last = i + 4 == bn;
        int pad = (b[i + 3] == '=') + (b[i + 2] == '=' && b[i + 3] == '=');
        if (pad && !last)
            return -1;
        int v[4];
        for (int k = 0; k < 4 - pad; k++)
            if ((v[k] = b64_index(b[i + k])) < 0)
                return -1;
        if (pad == 0 && (b[i + 2] == '=' || b[i + 3] == '='))
            return -1;
        out[o++] = (unsigned char)(v[0] << 2 | v[1] >> 4);
        if (pad == 2) {
            if (v[1] & 0x0f)
                return -1; /* not canonical */
            continue;
        }
        out[o++] = (unsigned char)((v[1] & 0x0f) << 4 | v[2] >> 2);
        if (pad == 1) {
            if (v[2] & 0x03)
                return -1;
            continue;
        }
        out[o++] = (unsigned char)((v[2] & 0x03) << 6 | v[3]);
    }
    return (long)o;
}

/* 1 if header index i decodes to exactly the string s. */
static int states_string(const struct hdrs *h, int i, const char *s)
{
    struct tg_slice raw = h->h[i].value;
    unsigned char *d = malloc(raw.len + 1);
    long n = decode(raw, d);
    int ok = n >= 0 && (size_t)n == strlen(s) && memcmp(d, s, (size_t)n) == 0;
    free(d);
    return ok;
}

/* 1 if header index i states argument v: a string byte for byte, a boolean as true/false, an
 * integer (|v| <= 2^53) as optionally signed decimal digits of the same value. */
static int states_value(const struct hdrs *h, int i, const cJSON *v)
{
    if (cJSON_IsString(v))
        return states_string(h, i, v->valuestring);
    if (cJSON_IsBool(v))
        return states_string(h, i, cJSON_IsTrue(v) ? "true" : "false");
    if (!cJSON_IsNumber(v))
        return 0;
    double x = v->valuedouble;
    if (!isfinite(x) || x != floor(x) || fabs(x) > 9007199254740992.0)
        return 0;
    struct tg_slice raw = h->h[i].value;
    unsigned char *d = malloc(raw.len + 1);
    long n = decode(raw, d);
    int ok = n > 0;
    double y = 0;
    size_t k = 0;
    int neg = ok && d[0] == '-';
    for (k = neg; ok && k < (size_t)n; k++) {
        if (d[k] < '0' || d[k] > '9')
            ok = 0;
        else
            y = y * 10 + (d[k] - '0');
    }
    if ((size_t)n == (size_t)neg)
        ok = 0;
    free(d);
    /* Digits past 2^53 may round; such a header is rare enough to skip rather than misjudge. */
    return ok && (y > 9007199254740992.0 || (neg ? -y : y) == x);
}

static const char *name_key(const char *m)
{
    if (strcmp(m, "tools/call") == 0 || strcmp(m, "prompts/get") == 0)
        return "name";
    return strcmp(m, "resources/read") == 0 ? "uri" : NULL;
}

static void recheck_standard(const struct hdrs *h, const cJSON *root, const struct tg_mcp_claim *claim)
{
    int i = find_one(h, "mcp-protocol-version");
    if (i < 0 || claim->version == NULL || !states_string(h, i, claim->version))
        abort();
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(root, "method");
    if (!cJSON_IsString(method))
        abort();
    i = find_one(h, "mcp-method");
    if (i < 0 || !states_string(h, i, method->valuestring))
        abort();
    const char *key = name_key(method->valuestring);
    i = find_one(h, "mcp-name");
    if (key == NULL) {
        if (i != -1)
            abort(); /* a method that names nothing takes no Mcp-Name */
        return;
    }
    const cJSON *params = cJSON_GetObjectItemCaseSensitive(root, "params");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, key);
    if (!cJSON_IsString(name) || i < 0 || !states_string(h, i, name->valuestring))
        abort();
}

/* Every property reached through "properties" with a string x-mcp-header: its header is there
 * once and states the argument when the argument is present and not null, else absent. */
static void recheck_params(const struct hdrs *h, const cJSON *schema, const cJSON *args, int depth)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(schema, "properties");
    if (!cJSON_IsObject(props) || depth > 32)
        return;
    for (const cJSON *p = props->child; p != NULL; p = p->next) {
        const cJSON *arg = cJSON_IsObject(args) ? cJSON_GetObjectItemCaseSensitive(args, p->string) : NULL;
        const cJSON *mark = cJSON_GetObjectItemCaseSensitive(p, "x-mcp-header");
        if (cJSON_IsString(mark)) {
            char name[128];
            snprintf(name, sizeof(name), "mcp-param-%s", mark->valuestring);
            int i = find_one(h, name);
            if (arg == NULL || cJSON_IsNull(arg)) {
                if (i != -1)
                    abort();
            } else if (i < 0 || !states_value(h, i, arg)) {
                abort();
            }
        }
        recheck_params(h, p, arg, depth + 1);
    }
}


static void headers(const struct hdrs *h, const cJSON *root, const cJSON *schema)
{
    struct tg_mcp_claim claim;
    struct tg_mcp_refusal why;
    if (tg_mcp_classify(root, &claim, &why) != 0) {
        if (why.code != TG_RPC_INVALID_PARAMS || why.status != 400)
            abort();
        return;
    }
    if (claim.era != TG_ERA_2026) {
        if (claim.version != NULL || claim.caps != NULL)
            abort();
        return;
    }
    if (claim.version == NULL || !cJSON_IsObject(claim.caps))
        abort();
    int accepted = tg_mcp_check_headers(h->h, h->n, root, &claim, &why) == 0;
    if (!accepted && why.status != 400)
        abort();
    if (accepted) {
        recheck_standard(h, root, &claim);
        struct tg_buf up;
        tg_buf_init(&up);
        tg_mcp_upstream_headers(&up, root, claim.version, NULL);
        struct hdrs again;
        split_written(&up, &again);
        if (tg_mcp_check_headers(again.h, again.n, root, &claim, &why) != 0)
            abort(); /* what the gateway sends upstream, it would itself accept */
        recheck_standard(&again, root, &claim);
        tg_buf_dispose(&up);
    }
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(root, "method");
    if (schema == NULL || !cJSON_IsString(method) || strcmp(method->valuestring, "tools/call") != 0 ||
        !tg_mcp_tool_headers_valid(schema))
        return;
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "params"), "arguments");
    struct tg_buf fwd;
    tg_buf_init(&fwd);
    /* Built for any arguments: a 2025 client's request bridged to a 2026 upstream is built
     * without a check first (core/bridge/input.c). */
    int checked = tg_mcp_check_param_headers(h->h, h->n, schema, args, &why) == 0;
    tg_mcp_param_headers_build(&fwd, h->h, h->n, schema, args);
    if (checked) {
        recheck_params(h, schema, args, 0);
        struct hdrs again;
        split_written(&fwd, &again);
        if (tg_mcp_check_param_headers(again.h, again.n, schema, args, &why) != 0)
            abort(); /* the forwarded Mcp-Param-* headers agree with the body they go with */
        recheck_params(&again, schema, args, 0);
    } else if (why.code != TG_RPC_HEADER_MISMATCH || why.status != 400) {
        abort();
    }
    tg_buf_dispose(&fwd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    size_t body_at, schema_at;
    size_t hend = blank_line(p, size, &body_at);
    size_t bend = body_at + blank_line(p + body_at, size - body_at, &schema_at);
    schema_at += body_at;
    struct hdrs h;
    if (split_headers(p, hend, &h) != 0)
        return 0;

    /* Every header value alone: the decoder never reads past its slice, and agrees with the
     * independent one on what it takes and what it makes of it. */
    for (size_t i = 0; i < h.n; i++) {
        struct tg_buf d;
        tg_buf_init(&d);
        unsigned char *mine = malloc(h.h[i].value.len + 1);
        long n = decode(h.h[i].value, mine);
        int r = tg_mcp_header_value(h.h[i].value, &d);
        if ((r == 0) != (n >= 0) || (r == 0 && (d.len != (size_t)n || (n && memcmp(d.base, mine, (size_t)n) != 0))))
            abort();
        free(mine);
        tg_buf_dispose(&d);
    }

    struct tg_json_doc body, schema;
    if (tg_json_parse(p + body_at, bend - body_at, DEPTH, 1, &body, NULL, NULL) != 0)
        return 0;
    schema.root = NULL;
    if (schema_at < size && tg_json_parse(p + schema_at, size - schema_at, DEPTH, 1, &schema, NULL, NULL) != 0)
        schema.root = NULL;
    headers(&h, body.root, schema.root);
    cJSON_Delete(schema.root);
    cJSON_Delete(body.root);
    return 0;
}
