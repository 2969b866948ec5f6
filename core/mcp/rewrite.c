#include "core/mcp/rewrite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/wire/msg.h"
#include "policy/pins.h"
#include "policy/bind.h"
#include "policy/policy.h"

static int filter_list(const struct tg_mcp_answer *a, const char *p, size_t n, struct tg_buf *out);

static const struct {
    const char *method, *member, *key;
} LISTS[] = {
    [TG_MCP_LIST_TOOLS] = {"tools/list", "tools", "name"},
    [TG_MCP_LIST_RESOURCES] = {"resources/list", "resources", "uri"},
    [TG_MCP_LIST_TEMPLATES] = {"resources/templates/list", "resourceTemplates", "uriTemplate"},
    [TG_MCP_LIST_PROMPTS] = {"prompts/list", "prompts", "name"},
};

int tg_mcp_list_kind(const char *method)
{
    for (int i = 0; i < (int)(sizeof(LISTS) / sizeof(LISTS[0])); i++)
        if (strcmp(method, LISTS[i].method) == 0)
            return i;
    return -1;
}

int tg_mcp_method_maybe_update(struct tg_slice method_raw)
{
    /* The token as written: the name in quotes, or a spelling with escapes, which is longer
     * (an escape takes two bytes or more for one character). A shorter token is another
     * method, and most relayed messages (notifications/progress) are decided by the length. */
    static const char upd[] = "\"notifications/resources/updated\"";
    if (method_raw.len < sizeof(upd) - 1)
        return 0;
    if (method_raw.len == sizeof(upd) - 1)
        return memcmp(method_raw.ptr, upd, sizeof(upd) - 1) == 0;
    return memchr(method_raw.ptr, '\\', method_raw.len) != NULL;
}

/* Does the grant see this entry of a list? */
static int visible(const struct tg_policy *pol, int kind, const char *v)
{
    if (kind == TG_MCP_LIST_TOOLS)
        return tg_policy_tool_visible(pol, v);
    struct tg_decision d;
    if (kind == TG_MCP_LIST_PROMPTS)
        tg_policy_decide_prompt(pol, v, &d);
    else
        tg_policy_decide_resource(pol, v, &d); /* a template is decided as the URI it is written as */
    return d.verdict == TG_VERDICT_ALLOW;
}

/* A canonical form of a request id: "n" + digits, or "s" + the decoded string. */
char *tg_mcp_id_key(const char *raw, size_t n)
{
    if (raw == NULL)
        return NULL;
    if (n > 0 && raw[0] == '"') {
        struct tg_json_doc d;
        if (tg_json_parse(raw, n, 2, 1, &d, NULL, NULL) != 0 || !cJSON_IsString(d.root)) {
            cJSON_Delete(d.root);
            return NULL;
        }
        size_t l = strlen(d.root->valuestring);
        char *k = tg_xmalloc(l + 2);
        k[0] = 's';
        memcpy(k + 1, d.root->valuestring, l + 1);
        cJSON_Delete(d.root);
        return k;
    }
    char *k = tg_xmalloc(n + 2);
    k[0] = 'n';
    memcpy(k + 1, raw, n);
    k[n + 1] = '\0';
    return k;
}

/* error.data for -32004, NUL-terminated (it is passed on as a C string). */
void tg_mcp_upstream_data(struct tg_buf *b, const char *upstream)
{
    tg_buf_appends(b, "{\"upstream\":");
    tg_json_write_string(b, upstream, strlen(upstream));
    tg_buf_append(b, "}", 2);
}

/* A list for this grant: drop the tools its policy hides or denies, the resources, templates
 * and prompts it may not use. The page's nextCursor is the upstream's and stays valid, so
 * pagination keeps working. */
static int filter_list(const struct tg_mcp_answer *a, const char *p, size_t n, struct tg_buf *out)
{
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 1000, 1, &doc, NULL, NULL) != 0)
        return 0;
    int kind = a->list_kind;
    cJSON *res = tg_json_get(doc.root, "result");
    cJSON *items = tg_json_get(res, LISTS[kind].member);
    if (!cJSON_IsObject(res) || !cJSON_IsArray(items)) {
        cJSON_Delete(doc.root);
        return 0;
    }
    {
        cJSON *t = items->child;
        while (t) {
            cJSON *next = t->next;
            cJSON *v = tg_json_get(t, LISTS[kind].key);
            /* Pins first: every pinned tool listed is learnt, whether this grant sees it or not. */
            if (!cJSON_IsString(v) ||
                (a->pins != NULL && !tg_pins_admit_listed(a->pins_seen, a->pins, a->upstream, a->tools_filter, t)) ||
                !visible(a->tools_filter, kind, v->valuestring))
                cJSON_Delete(cJSON_DetachItemViaPointer(items, t));
            else if (kind == TG_MCP_LIST_TOOLS) /* arguments the policy binds: the model never sees them */
                tg_policy_bind_schema(a->tools_filter, v->valuestring, tg_json_get(t, "inputSchema"));
            t = next;
        }
    }
    char *raw = tg_xmalloc(a->client_id_len + 1);
    memcpy(raw, a->client_id, a->client_id_len);
    raw[a->client_id_len] = '\0';
    cJSON *id = cJSON_CreateRaw(raw);
    free(raw);
    cJSON_ReplaceItemInObjectCaseSensitive(doc.root, "id", id);
    tg_json_write(out, doc.root);
    cJSON_Delete(doc.root);
    return 1;
}

/* Rewrite an upstream message for the client: our id back to the client's, byte for byte.
 * Returns 1 if the message was the answer to this call. out receives the bytes to send. */
int tg_mcp_restore_id(const struct tg_mcp_answer *a, const char *p, size_t n, const struct tg_json_doc *pre,
                      struct tg_buf *out, int *valid, int *is_error, struct tg_slice *server_request_id)
{
    struct tg_json_doc doc;
    *valid = 0;
    *is_error = 0;
    if (server_request_id)
        *server_request_id = TG_SLICE_NULL;
    if (pre != NULL) {
        doc = *pre; /* the caller parsed this answer already: once is enough */
    } else if (tg_json_parse(p, n, 1000, 0, &doc, NULL, NULL) != 0) {
        return 0;
    }
    *valid = 1;
    if (a->is_request && doc.id_raw.len == a->gid_len && memcmp(doc.id_raw.ptr, a->gid, a->gid_len) == 0 &&
        doc.method_raw.len == 0) {
        *is_error = doc.error_raw.len > 0;
        if (a->tools_filter != NULL && !*is_error) {
            if (filter_list(a, p, n, out))
                return 1;
            /* An answer that cannot be filtered is never relayed: it could show hidden tools,
             * resources or prompts. */
            char esc[120], msg[120];
            tg_log(TG_LOG_WARN, "upstream list answer cannot be filtered; refused", "method=%s upstream=%s body=%s",
                   LISTS[a->list_kind].method, a->upstream, tg_log_esc(esc, sizeof(esc), tg_slice_of(p, n)));
            struct tg_buf d;
            tg_buf_init(&d);
            tg_mcp_upstream_data(&d, a->upstream);
            out->len = 0;
            snprintf(msg, sizeof(msg), "upstream sent a %s answer the gateway cannot filter", LISTS[a->list_kind].method);
            tg_rpc_error(out, a->client_id, a->client_id_len, TG_RPC_UPSTREAM, msg, d.base);
            tg_buf_dispose(&d);
            *is_error = 1;
            return 1;
        }
        size_t off = (size_t)(doc.id_raw.ptr - p), old = doc.id_raw.len;
        if (a->result_at != NULL && doc.result_raw.len > 0) {
            /* out is p with the id's bytes replaced: what follows the id moves by the difference */
            size_t r = (size_t)(doc.result_raw.ptr - p);
            a->result_at[0] = r >= off + old ? r - old + a->client_id_len : r;
            a->result_at[1] = doc.result_raw.len;
        }
        if (a->own != NULL && a->own->base == p && a->own->len == n && out->len == 0) {
            /* In place: only the tail after the id moves (within memory already touched). */
            struct tg_buf *b = a->own;
            if (a->client_id_len > old && tg_buf_try_reserve(b, a->client_id_len - old, 0) != 0) {
                tg_msg_splice_id(out, p, n, off, old, a->client_id, a->client_id_len);
                return 1;
            }
            memmove(b->base + off + a->client_id_len, b->base + off + old, n - off - old);
            memcpy(b->base + off, a->client_id, a->client_id_len);
            b->len = n - old + a->client_id_len;
            tg_buf_dispose(out);
            *out = *b;
            tg_buf_init(b);
            return 1;
        }
        tg_msg_splice_id(out, p, n, off, old, a->client_id, a->client_id_len);
        return 1;
    }
    if (server_request_id && doc.method_raw.len > 0 && doc.id_raw.len > 0)
        *server_request_id = doc.id_raw;
    if (a->maybe_update != NULL)
        *a->maybe_update = doc.method_raw.len > 0 && doc.id_raw.len == 0 && tg_mcp_method_maybe_update(doc.method_raw);
    /* An answer to another call (another gateway id, or one never issued) is nobody's here:
     * out stays empty, so that it cannot reach this client as a message on the way. Nor can
     * a batch: the gateway sends none, and its members would pass undecided. */
    if ((doc.method_raw.len > 0 || doc.id_raw.len == 0) && tg_mcp_is_object(p, n))
        *valid = 2;
    return 0;
}

int tg_mcp_is_object(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
        i++;
    return i < n && p[i] == '{';
}

char *tg_mcp_id_key_string(const char *v)
{
    size_t l = strlen(v);
    char *k = tg_xmalloc(l + 2);
    k[0] = 's';
    memcpy(k + 1, v, l + 1);
    return k;
}

char *tg_mcp_id_key_number(const cJSON *n)
{
    if (!cJSON_IsNumber(n) || n->valuestring == NULL)
        return NULL;
    size_t l = strlen(n->valuestring);
    char *k = tg_xmalloc(l + 2);
    k[0] = 'n';
    memcpy(k + 1, n->valuestring, l + 1);
    return k;
}

/* notifications/cancelled names the client's request id: point it at ours, or drop it. */
