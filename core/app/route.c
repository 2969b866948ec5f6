#include "core/app/server.h"
#include "core/app/route.h"
#include "core/app/keys.h"
#include "core/base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/call/call.h"
#include "core/gate/dispatch.h"
#include "core/call/approvals.h"
#include "core/call/exchange.h"
#include "core/call/gateway.h"
#include "core/base/log.h"
#include "core/base/sha256.h"
#include "core/bridge/input.h"
#include "core/bridge/stateless.h"
#include "core/wire/msg.h"
#include "core/app/oauth_meta.h"
#include "core/app/dpop_gate.h"
#include "core/call/session.h"
#include "policy/auth.h"
#include "policy/policy.h"
#include "transports/channel.h"
#include "transports/cred_watch.h"
#include "transports/http1/http1.h"
#include "core/mcp/legacy.h"
#include "transports/legacy_sse.h"
#include "transports/respond.h"
#include "core/wire/tls.h"
#include "core/wire/http_fast.h"
#include "transports/streamable.h"
#include "transports/ws_channel.h"
#include "upstream/pool/pool.h"

/* ---- origin ----------------------------------------------------------------- */

int tg_route_origin_allowed(const struct tg_listener_conf *lc, struct tg_slice o)
{
    if (o.ptr == NULL)
        return 1; /* non-browser clients send no Origin */
    if (lc && lc->any_origin)
        return 1;
    if (lc)
        for (size_t i = 0; i < lc->norigins; i++)
            if (tg_slice_eq(o, tg_slice_cstr(lc->origins[i])))
                return 1;
    const char *p = o.ptr;
    size_t n = o.len;
    size_t skip = 0;
    if (n > 7 && strncasecmp(p, "http://", 7) == 0)
        skip = 7;
    else if (n > 8 && strncasecmp(p, "https://", 8) == 0)
        skip = 8;
    else
        return 0;
    p += skip;
    n -= skip;
    size_t hl;
    if (n > 0 && p[0] == '[') {
        const char *e = memchr(p, ']', n);
        if (e == NULL)
            return 0;
        hl = (size_t)(e - p) + 1;
    } else {
        hl = 0;
        while (hl < n && p[hl] != ':' && p[hl] != '/')
            hl++;
    }
    struct tg_slice host = tg_slice_of(p, hl);
    /* What follows the host may only be a port. */
    size_t i = hl;
    if (i < n) {
        if (p[i] != ':' || i + 1 == n)
            return 0;
        for (i++; i < n; i++)
            if (p[i] < '0' || p[i] > '9')
                return 0;
    }
    return tg_slice_eq_nocase(host, "localhost") || tg_slice_eq(host, TG_SLICE("127.0.0.1")) ||
           tg_slice_eq(host, TG_SLICE("[::1]"));
}

/* ---- the table ------------------------------------------------------------------ */

static const struct {
    const char *name;
    enum tg_endpoint ep;
} endpoints[] = {{"mcp", TG_EP_MCP}, {"sse", TG_EP_SSE}, {"messages", TG_EP_MESSAGES}, {"ws", TG_EP_WS}};

enum tg_endpoint tg_route_match(const struct tg_conf *conf, struct tg_slice path, int *upstream)
{
    *upstream = -1;
    for (size_t e = 0; e < sizeof(endpoints) / sizeof(endpoints[0]); e++) {
        size_t el = strlen(endpoints[e].name);
        if (path.len == el + 1 && path.ptr[0] == '/' && memcmp(path.ptr + 1, endpoints[e].name, el) == 0) {
            *upstream = conf->default_upstream;
            return endpoints[e].ep;
        }
        if (path.len >= el + 3 && path.ptr[0] == '/' && path.ptr[path.len - el - 1] == '/' &&
            memcmp(path.ptr + path.len - el, endpoints[e].name, el) == 0) {
            if (tg_conf_find_upstream(conf, tg_slice_of(path.ptr + 1, path.len - el - 2), upstream) == NULL)
                *upstream = -1;
            return endpoints[e].ep;
        }
    }
    return TG_EP_NONE;
}

int tg_route_ready(struct tg_server *srv)
{
    for (size_t i = 0; i < srv->nupstreams; i++)
        if (tg_upstream_reachable(srv->upstreams[i]))
            return 1;
    return 0;
}

void tg_route_readyz(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_buf why;
    tg_buf_init(&why);
    int keys = tg_keys_ready(srv->conf, &why);
    if (tg_route_ready(srv) && !srv->draining && keys) {
        tg_respond_json(c, 200, "{\"status\":\"ready\"}");
    } else if (keys) {
        tg_respond_json(c, 503, "{\"status\":\"not ready\"}");
    } else {
        /* An issuer without keys yet: its tokens get 401, so say which and why. */
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_appends(&b, "{\"status\":\"not ready\",\"reason\":");
        tg_json_write_string(&b, why.base, why.len);
        tg_buf_appends(&b, "}");
        tg_buf_append(&b, "", 1);
        tg_respond_json(c, 503, b.base);
        tg_buf_dispose(&b);
    }
    tg_buf_dispose(&why);
}

/* 401, with where to find the authorization servers when JWT issuers are configured. */
/* The grant whose tls_subject names this connection's verified client certificate (mTLS): its
 * whole subject as mbedtls prints it, or its CN when tls_subject has no '='. */
/* The grant the client certificate names (its subject in dn, cn), or NULL. */
static const struct tg_grant_conf *cert_grant(const struct tg_conf *conf, const struct tg_conn *c, char *dn,
                                              size_t dn_sz, char *cn, size_t cn_sz)
{
    if (c->tls == NULL || !tg_tls_peer_subject(c->tls, dn, dn_sz, cn, cn_sz))
        return NULL;
    return tg_auth_cert_grant(conf, dn, cn);
}

static void unauthorized(struct tg_server *srv, struct tg_conn *c, const char *metadata, enum tg_auth_result ar,
                         const char *why)
{
    struct tg_buf hdr;
    tg_buf_init(&hdr);
    tg_buf_appends(&hdr, "WWW-Authenticate: Bearer realm=\"tollgate\"");
    if (metadata != NULL)
        tg_buf_appendf(&hdr, ", resource_metadata=\"%s\"", metadata);
    if (ar == TG_AUTH_INVALID)
        tg_buf_appendf(&hdr, ", error=\"invalid_token\", error_description=\"%s\"", why ? why : "invalid token");
    tg_buf_appends(&hdr, "\r\n");
    tg_buf_append(&hdr, "", 1);
    tg_log(TG_LOG_INFO, "unauthorized", "conn=%llu peer=%s reason=\"%s\"", (unsigned long long)c->id, tg_conn_peer(c),
           why ? why : (ar == TG_AUTH_MISSING ? "missing" : "invalid"));
    tg_respond_rpc(c, 401, hdr.base, NULL, 0, TG_RPC_INVALID_REQUEST,
                        "Unauthorized: a valid bearer token is required", NULL);
    tg_buf_dispose(&hdr);
}

/* ---- a 2025 session another member of the cluster made --------------------------------- */

/* A request that names a sealed session this gateway does not have waits for its record.
 * Owner: the fetch, until on_shared_record ran (the record comes even if the client went). */
struct session_wait {
    struct tg_http_wait w;
    struct tg_server *srv;
    char sid[TG_SESSION_ID_LEN + 1];
    char grant[128];
    char upstream[128];
    char subject[TG_SUBJECT_MAX]; /* who asks, and as tg_principal_sha256() in hex: a record binds it */
    char owner[65];
    uint64_t tag; /* tg_principal_tag() of who asks: the adopted session's, once its owner matched */
    uint64_t serial; /* and the conf serial with who->jwt under it */
    int jwt;
};

static void on_shared_record(void *ud, int found, const struct tg_shared_session_rec *rec, const char *why)
{
    struct session_wait *w = ud;
    struct tg_conn *c = tg_http_wait_stop(&w->w);
    struct tg_server *srv = w->srv;
    if (c == NULL) {
        free(w);
        return;
    }
    int u = -1;
    tg_conf_find_upstream(srv->conf, tg_slice_cstr(w->upstream), &u);
    if (found < 0) {
        char msg[200];
        snprintf(msg, sizeof(msg), "Session lookup failed: %s", why ? why : "Redis is unavailable");
        tg_respond_rpc(c, 503, NULL, NULL, 0, TG_RPC_UPSTREAM, msg, NULL);
        free(w);
        return;
    }
    struct tg_session *s = NULL;
    const struct tg_grant_conf *g = tg_conf_find_grant(srv->conf, w->grant);
    size_t cap = g == NULL ? 0 : (size_t)(g->max_sessions > 0 ? g->max_sessions : srv->conf->limits.sessions_per_grant);
    int match = found == 1 && u >= 0 && strcmp(rec->grant, w->grant) == 0 && strcmp(rec->upstream, w->upstream) == 0 &&
                rec->owner != NULL && strlen(rec->owner) == 64 &&
                tg_ct_equal((const uint8_t *)rec->owner, (const uint8_t *)w->owner, 64); /* another user's: 404 */
    if (match && g != NULL && tg_session_find(srv->sessions, tg_slice_cstr(w->sid)) == NULL &&
        tg_session_count_for_grant(srv->sessions, w->grant) >= cap) {
        /* Adopted sessions count toward the grant's cap here as made ones do. */
        srv->metrics.limit_sessions++;
        tg_respond_rpc(c, 429, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Too many sessions for this grant on this instance (limits.sessions_per_grant)", NULL);
        free(w);
        return;
    }
    if (match && tg_session_find(srv->sessions, tg_slice_cstr(w->sid)) == NULL) {
        s = tg_session_adopt(srv->sessions, tg_slice_cstr(w->sid), w->grant, u);
        if (s != NULL) {
            s->srv = srv;
            s->last_active_ms = s->shared_touch_ms = uv_now(srv->loop);
            s->shared = 1;
            s->initialized = 1;
            tg_session_set_subject(s, w->subject);
            tg_hex_decode(w->owner, 64, s->subject_sha256);
            s->subject_tag = w->tag; /* its owner asked (match): later requests skip the SHA-256 */
            s->subject_serial = w->serial, s->subject_jwt = w->jwt;
            /* a member wrote its session's version: one the gateway knows, or "" */
            const char *known = rec->proto != NULL ? tg_mcp_version_known(tg_slice_cstr(rec->proto)) : NULL;
            s->proto = known != NULL ? known : "";
            s->up_session = rec->up_session ? tg_xstrdup(rec->up_session) : NULL;
            if (rec->up_modern) {
                s->up_modern = 1;
                s->u.client_caps = rec->client_caps ? tg_xstrdup(rec->client_caps) : NULL;
                s->log_level = (unsigned char)rec->log_level;
            }
            srv->metrics.sessions_adopted++;
            tg_log(TG_LOG_DEBUG, "shared session adopted", "session=%s grant=%s from=%s", s->id_str, w->grant,
                   rec->instance ? rec->instance : "-");
        }
    }
    int here = tg_session_find(srv->sessions, tg_slice_cstr(w->sid)) != NULL;
    free(w);
    if (!here) {
        tg_respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        return;
    }
    tg_route_handle(srv, c); /* the session is here now */
}

/* 1 if the request waits for a shared session's record (a sealed id this gateway does not have). */
static int wait_for_shared_session(struct tg_server *srv, struct tg_conn *c, const struct tg_principal *who,
                                   int upstream)
{
    const struct tg_grant_conf *g = who->grant;
    struct tg_slice sid = tg_http_req_header(c->req, "mcp-session-id");
    if (sid.ptr == NULL || sid.len != TG_SESSION_ID_LEN || tg_session_find(srv->sessions, sid) != NULL ||
        !tg_session_id_sealed(srv->sessions, sid))
        return 0; /* here, absent, or forged: the transport answers as it always does */
    struct session_wait *w = tg_xcalloc(1, sizeof(*w));
    w->srv = srv;
    memcpy(w->sid, sid.ptr, sid.len);
    tg_strlcpy(w->grant, g->name, sizeof(w->grant));
    tg_strlcpy(w->upstream, srv->conf->upstreams[upstream].name, sizeof(w->upstream));
    tg_strlcpy(w->subject, who->subject, sizeof(w->subject));
    uint8_t d[32];
    tg_principal_sha256(srv->conf, who, d);
    tg_hex_encode(d, 32, w->owner);
    w->tag = tg_principal_tag(srv->conf, who);
    w->serial = srv->conf->serial, w->jwt = who->jwt;
    tg_http_wait_start(&w->w, c);
    srv->store.ops->session_fetch(srv->store.ud, w->sid, on_shared_record, w);
    return 1;
}

void tg_route_handle(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_http_req *req = c->req;
    struct tg_slice url = tg_http_req_url(req);
    size_t q = 0;
    while (q < url.len && url.ptr[q] != '?')
        q++;
    struct tg_slice path = tg_slice_of(url.ptr, q);
    struct tg_slice query = tg_slice_of(url.ptr + q, url.len - q);
    if (tg_slice_eq(path, TG_SLICE("/healthz"))) {
        tg_respond_json(c, 200, "{\"status\":\"ok\"}");
        return;
    }
    if (tg_slice_eq(path, TG_SLICE("/readyz"))) {
        tg_route_readyz(srv, c);
        return;
    }
    if (tg_slice_starts_with(path, "/.well-known/oauth-protected-resource") &&
        (path.len == 37 || path.ptr[37] == '/')) {
        tg_oauth_meta_handle(srv, c, tg_slice_of(path.ptr + 37, path.len - 37));
        return;
    }
    int upstream;
    enum tg_endpoint ep = tg_route_match(srv->conf, path, &upstream);
    if (ep == TG_EP_NONE || upstream < 0) {
        tg_respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Not Found: no MCP endpoint at this path",
                            NULL);
        return;
    }
    if (tg_http_req_header_count(req, "origin") > 1 ||
        !tg_route_origin_allowed(c->listener->lc, tg_http_req_header(req, "origin"))) {
        char esc[128];
        tg_log(TG_LOG_INFO, "foreign origin refused", "conn=%llu peer=%s origin=%s", (unsigned long long)c->id,
               tg_conn_peer(c), tg_log_esc(esc, sizeof(esc), tg_http_req_header(req, "origin")));
        tg_respond_rpc(c, 403, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Forbidden: Origin not allowed", NULL);
        return;
    }
    if (tg_http_req_header_count(req, "authorization") > 1) {
        tg_respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Bad Request: more than one Authorization header", NULL);
        return;
    }
    /* The route's RFC 8707 resource (a JWT's aud may name it when public_url says what it is:
     * never a URL made of the request's Host) and its RFC 9728 metadata URL. */
    struct tg_buf rbuf;
    size_t blen = 0;
    char resource[1024], metadata[1100];
    resource[0] = metadata[0] = '\0';
    if (srv->conf->njwt > 0) {
        tg_buf_init(&rbuf);
        tg_oauth_meta_resource(srv, c, path, &rbuf, &blen);
        if (rbuf.len < sizeof(resource)) {
            memcpy(resource, rbuf.base, rbuf.len);
            resource[rbuf.len] = '\0';
            snprintf(metadata, sizeof(metadata), "%.*s/.well-known/oauth-protected-resource%s", (int)blen, rbuf.base,
                     resource + blen);
        }
        tg_buf_dispose(&rbuf);
    }
    struct tg_principal who;
    who.resource = srv->conf->public_url != NULL && resource[0] ? resource : NULL;
    const char *why = NULL;
    struct tg_slice authz = tg_http_req_header(req, "authorization");
    char qauth[4200];
    if (authz.ptr == NULL && ep == TG_EP_WS) {
        /* Browsers cannot set headers on a WebSocket: ?access_token=TOKEN stands in for
         * "Authorization: Bearer TOKEN" on /ws only. */
        struct tg_slice tok = tg_http_fast_query_param(query, "access_token");
        if (tok.ptr != NULL && tok.len > 0 && tok.len < sizeof(qauth) - 8) {
            int n = snprintf(qauth, sizeof(qauth), "Bearer %.*s", (int)tok.len, tok.ptr);
            authz = tg_slice_of(qauth, (size_t)n);
        }
    }
    char dn[512], cn[256];
    const struct tg_grant_conf *cg = cert_grant(srv->conf, c, dn, sizeof(dn), cn, sizeof(cn));
    enum tg_auth_result ar = TG_AUTH_OK;
    if (cg != NULL && authz.ptr == NULL) {
        tg_principal_of_grant(cg, &who); /* the client certificate is the credential */
    } else {
        ar = tg_auth_grant_memo(srv->conf, authz, wall_ms() / 1000, &c->auth_memo, &who, &why);
        if (ar == TG_AUTH_OK && cg != NULL && who.grant != cg) {
            ar = TG_AUTH_INVALID; /* two credentials, two grants: neither is believed */
            why = "the bearer token and the client certificate name different grants";
        }
    }
    if (ar != TG_AUTH_OK && why == tg_auth_keys_refetching) {
        if (tg_keys_park(tg_app_of(srv)->keys, c))
            return; /* routed again when the issuer's keys are fetched again */
        why = "unknown key";
    }
    if (ar != TG_AUTH_OK) {
        unauthorized(srv, c, metadata[0] ? metadata : NULL, ar, why);
        return;
    }
    if (tg_dpop_gate(srv, c, path, &who, authz))
        return; /* 401: a DPoP-bound token without its proof, or DPoP where the issuer has none */
    const struct tg_grant_conf *g = who.grant;
    if (c->env->access_log && c->req != NULL) { /* who, for the access line (copies: a reload may free the conf) */
        struct tg_http_scratch *x = tg_http_scratch_of(c);
        tg_strlcpy(x->log_grant, g->name, sizeof(x->log_grant));
        tg_strlcpy(x->log_subject, who.subject, sizeof(x->log_subject));
        tg_strlcpy(x->log_upstream, srv->conf->upstreams[upstream].name, sizeof(x->log_upstream));
        struct tg_slice sid = tg_http_req_header(req, "mcp-session-id");
        if (sid.len > 0 && sid.len < sizeof(x->log_session)) {
            memcpy(x->log_session, sid.ptr, sid.len);
            x->log_session[sid.len] = '\0';
        }
    }
    struct tg_exchange x = {0};
    x.srv = srv;
    x.era = TG_ERA_2025;
    x.grant = g;
    x.who = &who;
    x.scopes = who.scopes;
    x.resource_metadata = metadata[0] ? metadata : NULL;
    struct tg_slice jwt;
    int by_dpop;
    if (who.jwt > 0 && tg_auth_token(authz, &jwt, &by_dpop) == 0) { /* for a token exchange, this request only */
        x.subject_token = jwt.ptr;
        x.subject_token_len = jwt.len;
    }
    x.upstream = upstream;
    x.uc = &srv->conf->upstreams[upstream];
    struct tg_auth_cred cred; /* a channel's credential: re-checked at reload, ends it at a JWT's exp */
    switch (ep) {
    case TG_EP_SSE:
    case TG_EP_WS:
        tg_auth_cred_of(srv->conf, authz, wall_ms() / 1000, g, cg != NULL ? dn : NULL, cn, who.resource, &cred);
        x.cred = &cred;
        if (req->method != HTTP_GET)
            tg_http_respond(c, 405, "Allow: GET\r\n", NULL, "", 0);
        else if (ep == TG_EP_SSE)
            tg_legacy_sse_open(&x, c);
        else
            tg_ws_channel_open(&x, c);
        return;
    case TG_EP_MESSAGES:
        if (req->method != HTTP_POST)
            tg_http_respond(c, 405, "Allow: POST\r\n", NULL, "", 0);
        else
            tg_legacy_sse_messages(&x, c, query);
        return;
    default:
        break;
    }
    if (tg_app_of(srv)->cluster != NULL && (req->method == HTTP_POST || req->method == HTTP_GET || req->method == HTTP_DELETE) &&
        wait_for_shared_session(srv, c, &who, upstream))
        return; /* routed again when Redis answers */
    switch (req->method) {
    case HTTP_POST: tg_streamable_post(&x, c); return;
    case HTTP_GET: tg_streamable_get(&x, c); return;
    case HTTP_DELETE: tg_streamable_delete(&x, c); return;
    default:
        tg_http_respond(c, 405, "Allow: GET, POST, DELETE\r\n", "application/json",
                        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Method Not Allowed\"}}",
                        strlen("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Method Not Allowed\"}}"));
        return;
    }
}

/* ---- the server's entry points ------------------------------------------------------ */

static int sweep_one(struct tg_session *s, void *arg)
{
    struct tg_server *srv = arg;
    uint64_t idle = now_ms(srv) - s->last_active_ms;
    if (s->inflight == 0 && s->get_stream == NULL && s->channel == NULL &&
        idle > (uint64_t)srv->conf->limits.session_idle_timeout_ms) {
        srv->metrics.sessions_expired++;
        tg_log(TG_LOG_DEBUG, "session expired", "session=%s grant=%s", s->id_str, s->grant);
        return 1;
    }
    return 0;
}

void tg_route_tick(struct tg_server *srv, int sessions_too)
{
    tg_approvals_expire(srv);
    tg_counters_sweep(srv->counters, wall_ms(), 65536);
    tg_channels_keepalive(srv);
    tg_streamable_tick(srv);
    tg_call_expire_awaiting(srv);
    if (sessions_too)
        tg_session_sweep(srv->sessions, sweep_one, srv);
}

int tg_route_run_pending(struct tg_server *srv)
{
    tg_bridge_run_pending(srv); /* stateless requests whose upstream session is ready */
    tg_call_run_pending(srv);
    return tg_bridge_pending(srv);
}

static int end_stream_one(struct tg_session *s, void *arg)
{
    (void)arg;
    tg_call_end_get_stream(s);
    return 0;
}

void tg_route_end_streams(struct tg_server *srv)
{
    tg_session_sweep(srv->sessions, end_stream_one, srv);
    tg_channels_end(srv, 1); /* channel clients are told the gateway is going away, once idle */
}

static int end_calls_one(struct tg_session *s, void *arg)
{
    (void)arg;
    tg_call_end_session_calls(s);
    return 0;
}

void tg_route_end_calls(struct tg_server *srv) { tg_session_sweep(srv->sessions, end_calls_one, NULL); }


void tg_route_free_streams(struct tg_server *srv)
{
    tg_call_abort_waiting(srv);
    tg_approvals_abort(srv);
    tg_streamable_free_streams(srv);
    tg_bridge_input_dispose(srv);
    tg_bridge_dispose(srv); /* before the session table goes */
}

void tg_route_dispose(struct tg_server *srv)
{
    tg_streamable_dispose();
    tg_channels_dispose();
    tg_cred_watches_dispose(srv);
}

