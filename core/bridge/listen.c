/* subscriptions/listen for 2026 clients of a 2025 upstream: the grant's upstream session has
 * one GET stream, the gateway's, and every listen of that session takes from it the list
 * changes it asked for, tagged with its own id. The acknowledgement is the gateway's: what was
 * asked for and the upstream declared (listChanged); its resourceSubscriptions (those the policy
 * lets the grant read) are subscribed to on the upstream session with resources/subscribe, and
 * resources/updated goes to the listens that asked for that URI. The session keeps its
 * subscriptions when a listen ends (the fan-out filters).
 *
 * A listen is a call that never goes upstream: it ends when its client goes (or the session
 * does), and it counts toward limits.listens_per_grant and inflight_per_session. */
#include "core/call/sink.h"
#include "core/bridge/listen.h"

#include <stdlib.h>
#include <string.h>

#include "core/call/call.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/era.h"
#include "core/mcp/listen.h"
#include "core/call/session.h"
#include "policy/policy.h"
#include "upstream/pool/pool.h"

#define LISTEN_TOOLS 0x1u
#define LISTEN_PROMPTS 0x2u
#define LISTEN_RESOURCES 0x4u
#define LISTEN_UPDATED 0x8u /* notifications/resources/updated, for the URIs in listen_uris */

/* The GET stream's sink: it hands what the upstream says to the session's listens. Owner: the
 * GET call, through release. */
struct fan_sink {
    struct tg_sink sink;
    struct tg_session *s; /* reference */
};

static unsigned kind_of(const char *method)
{
    if (strcmp(method, "notifications/tools/list_changed") == 0)
        return LISTEN_TOOLS;
    if (strcmp(method, "notifications/prompts/list_changed") == 0)
        return LISTEN_PROMPTS;
    if (strcmp(method, "notifications/resources/list_changed") == 0)
        return LISTEN_RESOURCES;
    if (strcmp(method, "notifications/resources/updated") == 0)
        return LISTEN_UPDATED;
    return 0;
}

/* 1 if the JSON array text list holds the JSON string s (both as cJSON prints them). */
static int in_list(const char *list, const char *s)
{
    cJSON *l = cJSON_Parse(list);
    int found = 0;
    for (cJSON *u = l != NULL ? l->child : NULL; u != NULL && !found; u = u->next) {
        char *p = cJSON_PrintUnformatted(u);
        found = p != NULL && strcmp(p, s) == 0;
        free(p);
    }
    cJSON_Delete(l);
    return found;
}


static void subscribe_upstream(struct tg_session *s, const cJSON *uri)
{
    struct tg_server *srv = s->srv;
    if ((size_t)s->upstream >= srv->nupstreams)
        return;
    struct tg_call *k = tg_call_new(srv, s, &tg_sink_discard, KIND_REQUEST);
    s->inflight++;
    k->era = TG_ERA_2025;
    k->method = tg_xstrdup("resources/subscribe");
    k->client_id = tg_xstrdup("0");
    k->client_id_len = 1;
    k->gid = ++srv->next_gid;
    k->gid_len = (size_t)snprintf(k->gid_str, sizeof(k->gid_str), "%llu", (unsigned long long)k->gid);
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(&b, k->gid_str, k->gid_len);
    tg_buf_appends(&b, ",\"method\":\"resources/subscribe\",\"params\":{\"uri\":");
    tg_json_write(&b, uri);
    tg_buf_appends(&b, "}}");
    tg_call_send(k, b.base, b.len, (uint64_t)tg_upstream_conf(k->uprt)->call_timeout_ms);
    tg_buf_dispose(&b);
}

static void fan_message(struct tg_sink *sk, struct tg_call *gk, const char *p, size_t n)
{
    (void)gk;
    struct fan_sink *fs = (struct fan_sink *)sk;
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 64, 1, &doc, NULL, NULL) != 0)
        return;
    cJSON *method = tg_json_get(doc.root, "method");
    unsigned kind = cJSON_IsString(method) && tg_json_get(doc.root, "id") == NULL
                        ? kind_of(method->valuestring)
                        : 0;
    cJSON *uri = tg_json_get(tg_json_get(doc.root, "params"), "uri");
    char *want = NULL; /* "\"URI\"" as it is written in a listen's list */
    if (kind == LISTEN_UPDATED && cJSON_IsString(uri))
        want = cJSON_PrintUnformatted(uri);
    cJSON_Delete(doc.root);
    if (kind == 0 || (kind == LISTEN_UPDATED && want == NULL)) {
        free(want);
        return; /* only list changes and updates travel to listens (server requests were refused) */
    }
    struct tg_buf out;
    tg_buf_init(&out);
    for (struct tg_list *l = fs->s->calls.next; l != &fs->s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->closed || !k->is_listen || !(k->listen_mask & kind) || k->sink == NULL || k->client_id == NULL)
            continue;
        if (kind == LISTEN_UPDATED && (k->listen_uris == NULL || !in_list(k->listen_uris, want)))
            continue;
        out.len = 0;
        if (tg_mcp_listen_message(&out, p, n, k->client_id, k->client_id_len, k->policy))
            k->sink->ops->message(k->sink, k, out.base, out.len);
    }
    tg_buf_dispose(&out);
    free(want);
}

static void fan_release(struct tg_sink *sk, struct tg_call *k)
{
    (void)k;
    struct fan_sink *fs = (struct fan_sink *)sk;
    tg_session_unref(fs->s);
    free(fs);
}

static const struct tg_sink_ops fan_ops = {
    .message = fan_message,
    .answer = tg_sink_nop_answer,
    TG_SINK_NO_STREAM,
    TG_SINK_NO_CLIENT,
    .release = fan_release,
};

static int wants(const cJSON *notifications, const char *key, const cJSON *caps, const char *what)
{
    return cJSON_IsTrue(tg_json_get(notifications, key)) &&
           cJSON_IsTrue(tg_json_get(tg_json_get(caps, what), "listChanged"));
}

void tg_bridge_listen_local(struct tg_call *k, const cJSON *params, const char *up_caps)
{
    struct tg_session *s = k->sess;
    cJSON *caps = up_caps != NULL ? cJSON_Parse(up_caps) : NULL;
    const cJSON *want = tg_json_get(params, "notifications");
    k->listen_mask = (wants(want, "toolsListChanged", caps, "tools") ? LISTEN_TOOLS : 0) |
                     (wants(want, "promptsListChanged", caps, "prompts") ? LISTEN_PROMPTS : 0) |
                     (wants(want, "resourcesListChanged", caps, "resources") ? LISTEN_RESOURCES : 0);
    /* Resources (the policy let through already): subscribed to on the upstream session, at most
     * 64 per listen; the session keeps them (updates go only to the listens that asked). */
    const cJSON *subs = tg_json_get(want, "resourceSubscriptions");
    int can = cJSON_IsTrue(tg_json_get(tg_json_get(caps, "resources"), "subscribe"));
    cJSON *taken = cJSON_CreateArray();
    for (const cJSON *u = can && cJSON_IsArray(subs) ? subs->child : NULL; u != NULL; u = u->next) {
        if (!cJSON_IsString(u) || cJSON_GetArraySize(taken) >= 64)
            continue;
        cJSON_AddItemToArray(taken, cJSON_Duplicate(u, 0));
        subscribe_upstream(s, u);
    }
    if (taken->child != NULL)
        k->listen_mask |= LISTEN_UPDATED;
    char *taken_json = cJSON_PrintUnformatted(taken);
    cJSON_Delete(taken);
    free(k->listen_uris);
    k->listen_uris = taken_json;
    cJSON_Delete(caps);
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{"
                       "\"notifications\":{");
    tg_buf_appendf(&b, "\"toolsListChanged\":%s,\"promptsListChanged\":%s,\"resourcesListChanged\":%s,"
                       "\"resourceSubscriptions\":%s},\"_meta\":{\"" TG_MCP_META_SUBSCRIPTION "\":",
                   k->listen_mask & LISTEN_TOOLS ? "true" : "false", k->listen_mask & LISTEN_PROMPTS ? "true" : "false",
                   k->listen_mask & LISTEN_RESOURCES ? "true" : "false", k->listen_uris ? k->listen_uris : "[]");
    tg_buf_append(&b, k->client_id, k->client_id_len);
    tg_buf_appends(&b, "}}}");
    k->sink->ops->stream(k->sink, k);
    k->sink->ops->message(k->sink, k, b.base, b.len);
    tg_buf_dispose(&b);
    if (k->listen_mask != 0 && s->get_stream == NULL && s->live) {
        /* The session's GET stream, which every listen of it shares. */
        struct fan_sink *fs = tg_xcalloc(1, sizeof(*fs));
        fs->sink.ops = &fan_ops;
        fs->sink.flags = TG_SINK_STATELESS; /* server requests refused, notifications through */
        fs->s = tg_session_ref(s);
        struct tg_call *g = tg_call_new(k->srv, s, &fs->sink, KIND_GET);
        s->get_stream = g;
        tg_call_send(g, NULL, 0, 0);
    }
}

/* ---- a 2025 session's GET stream on a 2026-07-28-only upstream --------------------------- */

static const char *lists_changes(const cJSON *caps, const char *what)
{
    return cJSON_IsTrue(tg_json_get(tg_json_get(caps, what), "listChanged"))
               ? "true"
               : "false";
}

void tg_bridge_listen_upstream(struct tg_call *k, const char *uris)
{
    struct tg_server *srv = k->srv;
    struct tg_session *s = k->sess;
    k->is_listen = 1;
    k->gid = ++srv->next_gid;
    k->gid_len = (size_t)snprintf(k->gid_str, sizeof(k->gid_str), "%llu", (unsigned long long)k->gid);
    free(k->listen_uris);
    k->listen_uris = uris != NULL ? tg_xstrdup(uris) : NULL;
    const char *d = (size_t)s->upstream < srv->nupstreams ? tg_upstream_discover(srv->upstreams[s->upstream]) : NULL;
    cJSON *disc = d != NULL ? cJSON_Parse(d) : NULL;
    cJSON *caps = tg_json_get(disc, "capabilities");
    struct tg_buf b, h;
    tg_buf_init(&b);
    tg_buf_init(&h);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(&b, k->gid_str, k->gid_len);
    tg_buf_appendf(&b, ",\"method\":\"" TG_MCP_LISTEN_METHOD "\",\"params\":{\"notifications\":{"
                       "\"toolsListChanged\":%s,\"promptsListChanged\":%s,\"resourcesListChanged\":%s,"
                       "\"resourceSubscriptions\":%s}}}",
                   lists_changes(caps, "tools"), lists_changes(caps, "prompts"), lists_changes(caps, "resources"),
                   uris != NULL ? uris : "[]");
    cJSON_Delete(disc);
    cJSON *root = cJSON_Parse(b.base);
    tg_mcp_add_claim(root, s->up_modern ? s->u.client_caps : NULL, 0); /* no logs on a listen */
    tg_mcp_upstream_headers(&h, root, TG_MCP_MODERN_VERSION, NULL);
    free(k->up_headers);
    k->up_headers = h.base;
    b.len = 0;
    tg_json_write(&b, root);
    cJSON_Delete(root);
    tg_call_send(k, b.base, b.len, 0);
    tg_buf_dispose(&b);
}

int tg_bridge_listen_resubscribe(struct tg_session *s, const char *uri, int add)
{
    /* The session keeps the list: a subscription made before the client opens its GET stream (or
     * while it has none) is asked for by the listen that stream makes. */
    cJSON *list = s->listen_uris != NULL ? cJSON_Parse(s->listen_uris) : cJSON_CreateArray();
    int at = -1, i = 0;
    for (cJSON *u = list != NULL ? list->child : NULL; u != NULL; u = u->next, i++)
        if (cJSON_IsString(u) && strcmp(u->valuestring, uri) == 0)
            at = i;
    if (list == NULL)
        return -1;
    if ((add && at >= 0) || (!add && at < 0)) {
        cJSON_Delete(list);
        return 0; /* no change */
    }
    if (add && cJSON_GetArraySize(list) >= TG_LISTEN_URIS_MAX) {
        cJSON_Delete(list);
        return -1; /* full: the session holds what its client asked for, within bounds */
    }
    if (add)
        cJSON_AddItemToArray(list, cJSON_CreateString(uri));
    else
        cJSON_DeleteItemFromArray(list, at);
    char *uris = cJSON_PrintUnformatted(list);
    cJSON_Delete(list);
    if (uris == NULL)
        return -1;
    if (strlen(uris) > TG_LISTEN_URIS_BYTES) {
        free(uris);
        return -1; /* the list as sent upstream would pass the bound */
    }
    free(s->listen_uris);
    s->listen_uris = uris;
    struct tg_call *g = s->get_stream;
    if (g == NULL || g->closed || !g->is_listen || g->sink == NULL)
        return 0; /* no stream listens now: the next one asks for the list */
    /* The stream's client moves to a new listen with the new list; the old one ends. */
    struct tg_sink *sk = g->sink;
    g->sink = NULL;
    struct tg_call *n = tg_call_new(g->srv, s, sk, KIND_GET);
    n->policy = tg_policy_ref(g->policy);
    s->get_stream = n;
    tg_call_close(g);
    s->get_stream = n;
    tg_bridge_listen_upstream(n, s->listen_uris);
    return 0;
}
