#include "core/mcp/listen.h"

#include <string.h>

#include "core/base/json.h"
#include "policy/policy.h"
#include "policy/uri.h"

static int readable(const struct tg_policy *pol, const char *uri)
{
    struct tg_decision d;
    memset(&d, 0, sizeof(d));
    tg_policy_decide_resource(pol, uri, &d);
    return d.verdict == TG_VERDICT_ALLOW;
}

/* Keep only the URIs of notifications.resourceSubscriptions the grant may read, each in its
 * normal form (policy/uri.h): the form that was decided is the one subscribed to. Anything but a
 * list there is dropped whole: nothing in it was decided. */
static void filter_subscriptions(cJSON *notifications, const struct tg_policy *pol)
{
    cJSON *subs = tg_json_get(notifications, "resourceSubscriptions");
    if (subs != NULL && !cJSON_IsArray(subs)) {
        cJSON_Delete(cJSON_DetachItemViaPointer(notifications, subs));
        return;
    }
    if (subs == NULL)
        return;
    for (cJSON *u = subs->child, *next; u != NULL; u = next) {
        next = u->next;
        if (!cJSON_IsString(u) || !readable(pol, u->valuestring)) {
            cJSON_Delete(cJSON_DetachItemViaPointer(subs, u));
            continue;
        }
        size_t n = strlen(u->valuestring);
        char *norm = tg_xmalloc(n + 1);
        const char *why;
        long w = tg_uri_normalize(u->valuestring, n, norm, &why);
        if (w >= 0 && ((size_t)w != n || memcmp(norm, u->valuestring, n) != 0))
            cJSON_ReplaceItemViaPointer(subs, u, cJSON_CreateString(norm));
        tg_xfree(norm);
    }
}

/* A notifications/resources/updated (the whole of it p[0..n), its params) the grant may read: its
 * URI is a string the policy allows, and no "\u0000" in p ends the decoded URI early (what
 * follows it was never decided). */
static int update_readable(const char *p, size_t n, const cJSON *params, const struct tg_policy *pol)
{
    cJSON *uri = tg_json_get(params, "uri");
    return cJSON_IsString(uri) && readable(pol, uri->valuestring) && memmem(p, n, "\\u0000", 6) == NULL;
}

void tg_mcp_listen_filter_request(cJSON *params, const struct tg_policy *pol)
{
    filter_subscriptions(tg_json_get(params, "notifications"), pol);
}

int tg_mcp_listen_message(struct tg_buf *out, const char *p, size_t n, const char *id, size_t idn,
                          const struct tg_policy *pol)
{
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 64, 1, &doc, NULL, NULL) != 0)
        return 0;
    int keep = 0;
    cJSON *method = tg_json_get(doc.root, "method");
    cJSON *params = tg_json_get(doc.root, "params");
    if (!cJSON_IsString(method) || tg_json_get(doc.root, "id") != NULL)
        goto out; /* only notifications travel on a listen stream (its answer is the call's) */
    const char *m = method->valuestring;
    if (strcmp(m, "notifications/progress") == 0 || strcmp(m, "notifications/message") == 0)
        goto out;
    if (id == NULL && strcmp(m, "notifications/subscriptions/acknowledged") == 0)
        goto out; /* a 2025 client's GET stream: no listen to acknowledge */
    if (strcmp(m, "notifications/subscriptions/acknowledged") == 0) {
        filter_subscriptions(tg_json_get(params, "notifications"), pol);
    } else if (strcmp(m, "notifications/resources/updated") == 0 && !update_readable(p, n, params, pol)) {
        goto out;
    }
    if (id == NULL) {
        tg_json_write(out, doc.root); /* a 2025 client's GET stream: as the upstream said it */
        keep = 1;
        goto out;
    }
    if (!cJSON_IsObject(params)) {
        params = cJSON_CreateObject();
        cJSON_AddItemToObject(doc.root, "params", params);
    }
    cJSON *meta = tg_json_get(params, "_meta");
    if (!cJSON_IsObject(meta)) {
        cJSON_DeleteItemFromObjectCaseSensitive(params, "_meta");
        meta = cJSON_AddObjectToObject(params, "_meta");
    }
    cJSON *sid = cJSON_ParseWithLength(id, idn);
    if (sid == NULL)
        goto out;
    cJSON_DeleteItemFromObjectCaseSensitive(meta, TG_MCP_META_SUBSCRIPTION);
    cJSON_AddItemToObject(meta, TG_MCP_META_SUBSCRIPTION, sid); /* the client's id, not the gateway's */
    tg_json_write(out, doc.root);
    keep = 1;
out:
    cJSON_Delete(doc.root);
    return keep;
}

int tg_mcp_relay_allowed(const char *p, size_t n, const struct tg_policy *pol)
{
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 64, 1, &doc, NULL, NULL) != 0)
        return 0; /* nothing a client could read either */
    int ok = 1;
    cJSON *method = tg_json_get(doc.root, "method");
    if (cJSON_IsString(method) && strcmp(method->valuestring, "notifications/resources/updated") == 0)
        ok = update_readable(p, n, tg_json_get(doc.root, "params"), pol);
    cJSON_Delete(doc.root);
    return ok;
}

void tg_mcp_listen_complete(struct tg_buf *out, const char *id, size_t idn)
{
    if (id == NULL)
        id = "null", idn = 4;
    tg_buf_appends(out, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(out, id, idn);
    tg_buf_appends(out, ",\"result\":{\"resultType\":\"complete\",\"_meta\":{\"" TG_MCP_META_SUBSCRIPTION "\":");
    tg_buf_append(out, id, idn);
    tg_buf_appends(out, "}}}");
}
