#include "core/wire/msg.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/json.h"
#include "core/mcp/listen.h"

void tg_msg_dispose(struct tg_msg *m)
{
    cJSON_Delete(m->root);
    m->root = NULL;
    tg_xfree(m->id_raw);
    m->id_raw = NULL;
    m->method = NULL;
}

static int cmp_nocase(const void *a, const void *b)
{
    return strcasecmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* Keys that differ only in ASCII case ("name" and "Name") are refused in client messages: a
 * server whose decoder matches keys without regard to case (Go's encoding/json does) could read
 * a different member than the one tollgate decided on. */
static int has_case_twins(const cJSON *item)
{
    for (const cJSON *c = item->child; c; c = c->next)
        if (has_case_twins(c))
            return 1;
    if (!cJSON_IsObject(item) || item->child == NULL || item->child->next == NULL)
        return 0;
    size_t n = 0;
    for (const cJSON *c = item->child; c; c = c->next)
        n++;
    if (n <= 12) {
        /* twins have first bytes equal once 0x20 is set (ASCII case), so only those pairs are
         * compared whole */
        for (const cJSON *a = item->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (((a->string[0] ^ b->string[0]) & ~0x20) == 0 && strcasecmp(a->string, b->string) == 0)
                    return 1;
        return 0;
    }
    const cJSON **v = malloc(n * sizeof(*v));
    if (v == NULL)
        return 1; /* fail closed */
    size_t i = 0;
    for (const cJSON *c = item->child; c; c = c->next)
        v[i++] = c;
    qsort(v, n, sizeof(*v), cmp_nocase);
    int twins = 0;
    for (i = 1; i < n && !twins; i++)
        twins = strcasecmp(v[i - 1]->string, v[i]->string) == 0;
    free(v);
    return twins;
}

static int decode_shape(const char *p, size_t n, int max_depth, struct tg_msg *m, const char **why, int *twins);

/* Key k is "jsonrpc", "id", a or b (whose first letters are fa and fb): a switch on the first
 * letter, then one compare (this runs for every member of every message). */
static int member_of(const char *k, char fa, const char *a, char fb, const char *b)
{
    if (k[0] == 'j')
        return strcmp(k, "jsonrpc") == 0;
    if (k[0] == 'i')
        return k[1] == 'd' && k[2] == '\0';
    if (k[0] == fa)
        return strcmp(k, a) == 0;
    return k[0] == fb && strcmp(k, b) == 0;
}

int tg_msg_decode(const char *p, size_t n, int max_depth, struct tg_msg *m, const char **why)
{
    int twins = -1; /* the parser looked for them in objects of up to 12 keys (tg_json_doc) */
    int r = decode_shape(p, n, max_depth, m, why, &twins);
    if (r == 0 && (twins > 0 || (twins < 0 && has_case_twins(m->root)))) {
        *why = "object keys that differ only in case are not accepted";
        return TG_RPC_INVALID_REQUEST;
    }
    return r;
}

static int decode_shape(const char *p, size_t n, int max_depth, struct tg_msg *m, const char **why, int *twins)
{
    memset(m, 0, sizeof(*m));
    struct tg_json_doc doc;
    const char *err = NULL;
    size_t off = 0;
    if (tg_json_parse(p, n, max_depth, 1, &doc, &err, &off) != 0) {
        *why = err;
        return TG_RPC_PARSE_ERROR;
    }
    m->root = doc.root;
    *twins = doc.case_twins;
    cJSON *root = doc.root;
    if (!cJSON_IsObject(root)) {
        *why = "a JSON-RPC message must be an object";
        return TG_RPC_INVALID_REQUEST;
    }

    cJSON *id = tg_json_get(root, "id");
    if (id != NULL && (cJSON_IsString(id) || cJSON_IsNumber(id))) {
        m->id_raw = tg_slice_dup(doc.id_raw);
        m->id_len = doc.id_raw.len;
        m->src = p;
        m->src_len = n;
        m->src_id_off = (size_t)(doc.id_raw.ptr - p);
        if (doc.params_meta.len > 0) {
            m->src_meta_off = (size_t)(doc.params_meta.ptr - p);
            m->src_meta_len = doc.params_meta.len;
        }
    }
    cJSON *ver = tg_json_get(root, "jsonrpc");
    if (!cJSON_IsString(ver) || strcmp(ver->valuestring, "2.0") != 0) {
        *why = "\"jsonrpc\" must be \"2.0\"";
        return TG_RPC_INVALID_REQUEST;
    }
    if (id != NULL && !cJSON_IsString(id) && !cJSON_IsNumber(id) && !cJSON_IsNull(id)) {
        *why = "\"id\" must be a string or a number";
        return TG_RPC_INVALID_REQUEST;
    }
    if (cJSON_IsNumber(id) && (strchr(id->valuestring, '.') || strchr(id->valuestring, 'e') ||
                               strchr(id->valuestring, 'E'))) {
        *why = "a numeric \"id\" must be an integer";
        return TG_RPC_INVALID_REQUEST;
    }
    cJSON *method = tg_json_get(root, "method");
    cJSON *result = tg_json_get(root, "result");
    cJSON *error = tg_json_get(root, "error");
    if (method != NULL) {
        if (!cJSON_IsString(method) || method->valuestring[0] == '\0') {
            *why = "\"method\" must be a non-empty string";
            return TG_RPC_INVALID_REQUEST;
        }
        if (result != NULL || error != NULL) {
            *why = "a request must not carry \"result\" or \"error\"";
            return TG_RPC_INVALID_REQUEST;
        }
        cJSON *params = tg_json_get(root, "params");
        if (params != NULL && !cJSON_IsObject(params) && !cJSON_IsArray(params)) {
            *why = "\"params\" must be an object or an array";
            return TG_RPC_INVALID_REQUEST;
        }
        for (cJSON *c = root->child; c; c = c->next)
            if (!member_of(c->string, 'm', "method", 'p', "params")) {
                *why = "unexpected member in a JSON-RPC request";
                return TG_RPC_INVALID_REQUEST;
            }
        m->method = method->valuestring;
        m->mid = tg_msg_method_id(m->method);
        if (id == NULL) {
            m->kind = TG_MSG_NOTIFICATION;
        } else if (cJSON_IsNull(id)) {
            *why = "a request \"id\" must not be null";
            return TG_RPC_INVALID_REQUEST;
        } else {
            m->kind = TG_MSG_REQUEST;
        }
        return 0;
    }
    if ((result == NULL) == (error == NULL)) {
        *why = "a message needs \"method\", or exactly one of \"result\" and \"error\"";
        return TG_RPC_INVALID_REQUEST;
    }
    if (id == NULL) {
        *why = "a response needs an \"id\"";
        return TG_RPC_INVALID_REQUEST;
    }
    if (error != NULL) {
        cJSON *code = tg_json_get(error, "code");
        cJSON *msg = tg_json_get(error, "message");
        if (!cJSON_IsObject(error) || !cJSON_IsNumber(code) || !cJSON_IsString(msg)) {
            *why = "\"error\" needs a numeric \"code\" and a string \"message\"";
            return TG_RPC_INVALID_REQUEST;
        }
    }
    for (cJSON *c = root->child; c; c = c->next)
        if (!member_of(c->string, 'r', "result", 'e', "error")) {
            *why = "unexpected member in a JSON-RPC response";
            return TG_RPC_INVALID_REQUEST;
        }
    m->kind = TG_MSG_RESPONSE;
    return 0;
}

void tg_msg_write_with_id(struct tg_buf *out, struct tg_msg *m, uint64_t gid)
{
    /* Written member by member so the original order is kept and only the id changes. */
    tg_buf_append(out, "{", 1);
    for (cJSON *c = m->root->child; c; c = c->next) {
        tg_json_write_string(out, c->string, strlen(c->string));
        tg_buf_append(out, ":", 1);
        if (strcmp(c->string, "id") == 0)
            tg_buf_append_u64(out, gid);
        else
            tg_json_write(out, c);
        if (c->next)
            tg_buf_append(out, ",", 1);
    }
    tg_buf_append(out, "}", 1);
}

/* Requests and notifications a client may send, from the MCP specification
 * (2024-11-05 through 2025-11-25). A request method sent as a notification (no id),
 * or the other way round, is not standard: "tools/call" without an id must not slip
 * through as a notification. Anything else is refused unless a policy names it. */
static const char *const standard_requests[] = {
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tasks/get",
    "tasks/result",
    "tasks/list",
    "tasks/cancel",
    NULL,
};

static const char *const standard_notifications[] = {
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
    "notifications/tasks/status",
    NULL,
};

static const struct {
    const char *name;
    enum tg_method id;
} method_ids[] = {
    {"initialize", TG_M_INITIALIZE},
    {"ping", TG_M_PING},
    {"tools/call", TG_M_TOOLS_CALL},
    {"tools/list", TG_M_TOOLS_LIST},
    {"resources/read", TG_M_RESOURCES_READ},
    {"prompts/get", TG_M_PROMPTS_GET},
    {"resources/subscribe", TG_M_RESOURCES_SUBSCRIBE},
    {"resources/unsubscribe", TG_M_RESOURCES_UNSUBSCRIBE},
    {"logging/setLevel", TG_M_LOGGING_SET_LEVEL},
    {TG_MCP_LISTEN_METHOD, TG_M_LISTEN},
    {"notifications/initialized", TG_M_INITIALIZED},
    {"notifications/cancelled", TG_M_CANCELLED},
    {"notifications/roots/list_changed", TG_M_ROOTS_LIST_CHANGED},
};

enum tg_method tg_msg_method_id(const char *method)
{
    if (method == NULL)
        return TG_M_OTHER;
    for (size_t i = 0; i < sizeof(method_ids) / sizeof(method_ids[0]); i++)
        if (method[0] == method_ids[i].name[0] && strcmp(method, method_ids[i].name) == 0)
            return method_ids[i].id;
    return TG_M_OTHER;
}

int tg_msg_is_standard(const struct tg_msg *m, enum tg_msg_kind kind)
{
    /* every named method but subscriptions/listen is standard, as what it is named for */
    if (m->mid != TG_M_OTHER && m->mid != TG_M_LISTEN)
        return (m->mid >= TG_M_INITIALIZED) == (kind == TG_MSG_NOTIFICATION);
    return tg_msg_is_standard_client_method(m->method, kind);
}

int tg_msg_is_standard_client_method(const char *method, enum tg_msg_kind kind)
{
    const char *const *list = kind == TG_MSG_NOTIFICATION ? standard_notifications : standard_requests;
    for (int i = 0; list[i]; i++)
        if (method[0] == list[i][0] && strcmp(method, list[i]) == 0) /* the first byte: no call for most */
            return 1;
    return 0;
}

void tg_rpc_error(struct tg_buf *out, const char *id_raw, size_t id_len, int code, const char *message,
                  const char *data_json)
{
    tg_buf_appends(out, "{\"jsonrpc\":\"2.0\",\"id\":");
    if (id_raw)
        tg_buf_append(out, id_raw, id_len);
    else
        tg_buf_appends(out, "null");
    tg_buf_appendf(out, ",\"error\":{\"code\":%d,\"message\":", code);
    tg_json_write_string(out, message, strlen(message));
    if (data_json) {
        tg_buf_appends(out, ",\"data\":");
        tg_buf_appends(out, data_json);
    }
    tg_buf_appends(out, "}}");
}

void tg_msg_splice_id(struct tg_buf *out, const char *in, size_t n, size_t id_off, size_t id_old, const char *id,
                      size_t id_len)
{
    tg_buf_append(out, in, id_off);
    tg_buf_append(out, id, id_len);
    tg_buf_append(out, in + id_off + id_old, n - id_off - id_old);
}

int tg_msg_splice_id_cut(struct tg_buf *out, const char *in, size_t n, size_t id_off, size_t id_old, const char *id,
                         size_t id_len, size_t cut_off, size_t cut_len)
{
    if (id_off > n || id_old > n - id_off || cut_off > n || cut_len > n - cut_off ||
        (id_off < cut_off + cut_len && cut_off < id_off + id_old))
        return -1;
    if (id_off < cut_off) {
        tg_buf_append(out, in, id_off);
        tg_buf_append(out, id, id_len);
        tg_buf_append(out, in + id_off + id_old, cut_off - id_off - id_old);
        tg_buf_append(out, in + cut_off + cut_len, n - cut_off - cut_len);
    } else {
        tg_buf_append(out, in, cut_off);
        tg_buf_append(out, in + cut_off + cut_len, id_off - cut_off - cut_len);
        tg_buf_append(out, id, id_len);
        tg_buf_append(out, in + id_off + id_old, n - id_off - id_old);
    }
    return 0;
}
