#include "core/mcp/modern.h"

#include <stdio.h>
#include <string.h>

#include "core/conf/conf.h"
#include "core/base/json.h"
#include "core/mcp/era.h"

static const char *const removed[] = {
    "initialize", "notifications/initialized", "ping", "logging/setLevel", "resources/subscribe",
    "resources/unsubscribe", "notifications/roots/list_changed", "notifications/elicitation/complete", NULL,
};

int tg_mcp_removed_method(const char *method)
{
    for (int i = 0; removed[i]; i++)
        if (method[0] == removed[i][0] && strcmp(method, removed[i]) == 0)
            return 1;
    return 0;
}

/* The capabilities a 2026 client is told of: what the upstream declared (caps, JSON) for the
 * features the gateway relays; listChanged and subscribe only where listen is relayed (listen),
 * as the upstream declared them; never logging (logging/setLevel is gone). NULL: the gateway's
 * own (a local initialize). */
static void write_caps(struct tg_buf *out, const char *caps, int listen)
{
    static const char *const relayed[] = {"tools", "resources", "prompts", "completions", NULL};
    cJSON *c = caps != NULL ? cJSON_Parse(caps) : NULL;
    tg_buf_appends(out, "{");
    int n = 0;
    for (int i = 0; relayed[i]; i++) {
        if (c != NULL ? tg_json_get(c, relayed[i]) == NULL : i == 3)
            continue;
        tg_buf_appends(out, n++ ? ",\"" : "\"");
        tg_buf_appends(out, relayed[i]);
        const cJSON *f = c != NULL ? tg_json_get(c, relayed[i]) : NULL;
        int lc = listen && cJSON_IsTrue(tg_json_get(f, "listChanged"));
        int sub = listen > 1 && cJSON_IsTrue(tg_json_get(f, "subscribe"));
        if (i == 3)
            tg_buf_appends(out, "\":{}");
        else
            tg_buf_appendf(out, "\":{\"listChanged\":%s%s}", lc ? "true" : "false",
                           i == 1 ? (sub ? ",\"subscribe\":true" : ",\"subscribe\":false") : "");
    }
    /* The gateway's own: a call parked for approval is a task for a client that declared the
     * extension (core/call/approvals_modes.h), polled with tasks/get (core/gate/tasks.c). */
    tg_buf_appends(out, n ? ",\"extensions\":{\"io.modelcontextprotocol/tasks\":{}}}"
                          : "\"extensions\":{\"io.modelcontextprotocol/tasks\":{}}}");
    cJSON_Delete(c);
}

void tg_mcp_discover_result(struct tg_buf *out, const char *id, size_t id_len, const struct tg_upstream_conf *uc,
                            const char *caps, int listen)
{
    tg_buf_appends(out, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(out, id, id_len);
    tg_buf_appends(out, ",\"result\":{\"resultType\":\"complete\",\"supportedVersions\":[\"" TG_MCP_MODERN_VERSION
                        "\"],\"capabilities\":");
    write_caps(out, caps, listen);
    tg_buf_appends(out, ",\"ttlMs\":0,\"cacheScope\":\"private\",\"_meta\":{"
                        "\"io.modelcontextprotocol/serverInfo\":{\"name\":");
    char name[96];
    snprintf(name, sizeof(name), "tollgate/%s", uc->name);
    tg_json_write_string(out, name, strlen(name));
    tg_buf_appends(out, ",\"version\":\"" TG_VERSION "\"}}}}");
}

static int cacheable(const char *method)
{
    static const char *const m[] = {"tools/list", "prompts/list", "resources/list", "resources/templates/list",
                                    "resources/read", NULL};
    for (int i = 0; m[i]; i++)
        if (method[0] == m[i][0] && strcmp(method, m[i]) == 0)
            return 1;
    return 0;
}

/* memmem(p, n, "\"resultType\"", 12) != NULL, by its rare 'T' (memchr runs a word at a time). */
static int has_result_type_key(const char *p, size_t n)
{
    static const char key[] = "\"resultType\"";
    const char *end = p + n;
    for (const char *t = n >= 12 ? p + 7 : end; t + 5 <= end && (t = memchr(t, 'T', (size_t)(end - t))) != NULL; t++)
        if (t + 5 <= end && memcmp(t - 7, key, 12) == 0)
            return 1;
    return 0;
}

/* memmem(p, n, "\\u", 2) != NULL, by the backslash. */
static int has_unicode_escape(const char *p, size_t n)
{
    const char *end = p + n;
    for (const char *t = p; t < end && (t = memchr(t, '\\', (size_t)(end - t))) != NULL; t++)
        if (t + 1 < end && t[1] == 'u')
            return 1;
    return 0;
}

int tg_mcp_modern_result(struct tg_buf *answer, const char *method, struct tg_mcp_mrtr *mt, struct tg_mcp_mrtr_call *c,
                         int64_t now_ms, char *why, size_t whysz)
{
    return tg_mcp_modern_result_at(answer, 0, 0, method, mt, c, now_ms, why, whysz);
}

int tg_mcp_modern_result_at(struct tg_buf *answer, size_t result_off, size_t result_len, const char *method,
                            struct tg_mcp_mrtr *mt, struct tg_mcp_mrtr_call *c, int64_t now_ms, char *why, size_t whysz)
{
    int rc = 0;
    struct tg_json_doc doc;
    if ((method == NULL || !cacheable(method)) && !has_result_type_key(answer->base, answer->len) &&
        !has_unicode_escape(answer->base, answer->len)) {
        /* The common case, a result with no resultType at all (a 2025 upstream's): "complete" goes
         * in front of its members without building a tree. Only \u escapes could spell the key
         * otherwise: an answer with any takes the slow path below. Where the result is may be
         * known already (result_len > 0: the caller parsed the upstream's answer, and only the id
         * changed since). */
        struct tg_slice result;
        if (result_len > 0 && result_off < answer->len && result_len <= answer->len - result_off) {
            result = tg_slice_of(answer->base + result_off, result_len);
        } else {
            if (tg_json_parse(answer->base, answer->len, 1000, 0, &doc, NULL, NULL) != 0)
                return 0;
            result = doc.result_raw;
        }
        if (result.len < 2)
            return 0;
        size_t at = (size_t)(result.ptr - answer->base) + 1;
        const char *rest = result.ptr + 1;
        while (*rest == ' ' || *rest == '\t' || *rest == '\r' || *rest == '\n')
            rest++;
        const char *ins = *rest == '}' ? "\"resultType\":\"complete\"" : "\"resultType\":\"complete\",";
        size_t in = strlen(ins);
        tg_buf_append(answer, ins, in); /* room */
        memmove(answer->base + at + in, answer->base + at, answer->len - in - at);
        memcpy(answer->base + at, ins, in);
        return 0;
    }
    if (tg_json_parse(answer->base, answer->len, 1000, 1, &doc, NULL, NULL) != 0)
        return 0;
    cJSON *res = tg_json_get(doc.root, "result");
    if (cJSON_IsObject(res)) {
        cJSON *tools = method != NULL && strcmp(method, "tools/list") == 0
                           ? tg_json_get(res, "tools") : NULL;
        /* A 2026 client must drop a tool whose x-mcp-header annotations are invalid: it never
         * sees one here. */
        for (cJSON *t = cJSON_IsArray(tools) ? tools->child : NULL, *next; t != NULL; t = next) {
            next = t->next;
            if (!tg_mcp_tool_headers_valid(tg_json_get(t, "inputSchema")))
                cJSON_Delete(cJSON_DetachItemViaPointer(tools, t));
        }
        if (c != NULL)
            rc = tg_mcp_mrtr_result(mt, res, c, now_ms, why, whysz);
        else if (tg_json_get(res, "resultType") != NULL &&
                 !cJSON_IsString(tg_json_get(res, "resultType")))
            rc = -1, snprintf(why, whysz, "the upstream's resultType is not a string");
        else if (cJSON_IsString(tg_json_get(res, "resultType")) &&
                 strcmp(tg_json_get(res, "resultType")->valuestring, "complete") != 0)
            rc = -1, snprintf(why, whysz, "the upstream asked for input on %.60s, which cannot take any", method);
        if (tg_json_get(res, "resultType") == NULL)
            cJSON_AddStringToObject(res, "resultType", "complete");
        if (method != NULL && cacheable(method)) {
            cJSON_DeleteItemFromObjectCaseSensitive(res, "ttlMs");
            cJSON_DeleteItemFromObjectCaseSensitive(res, "cacheScope");
            cJSON_AddNumberToObject(res, "ttlMs", 0);
            cJSON_AddStringToObject(res, "cacheScope", "private");
        }
        answer->len = 0;
        tg_json_write(answer, doc.root);
    }
    cJSON_Delete(doc.root);
    return rc;
}

