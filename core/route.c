#include "core/router_int.h"



static int origin_allowed(const struct tg_listen_conf *lc, struct tg_slice o);

void tg_router_handle(struct tg_server *srv, struct tg_conn *c);

static int sweep_one(struct tg_session *s, void *arg);

void tg_router_tick(struct tg_server *srv, int sessions_too);

/* ---- origin ----------------------------------------------------------------- */

static int origin_allowed(const struct tg_listen_conf *lc, struct tg_slice o)
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

/* ---- entry ----------------------------------------------------------------------- */

void respond_json(struct tg_conn *c, int status, const char *json)
{
    tg_http_respond(c, status, NULL, "application/json", json, strlen(json));
}

int readyz(struct tg_server *srv)
{
    for (size_t i = 0; i < srv->nupstreams; i++)
        if (tg_upstream_reachable(srv->upstreams[i]))
            return 1;
    return 0;
}

/* The base URL clients use: public_url, or the scheme and Host of this request when the Host is a plain
 * host[:port] (anything else falls back to the listener's address, so a peer cannot inject text). */
void base_url(struct tg_server *srv, struct tg_conn *c, struct tg_buf *out)
{
    if (srv->conf->public_url) {
        size_t n = strlen(srv->conf->public_url);
        while (n > 0 && srv->conf->public_url[n - 1] == '/')
            n--;
        tg_buf_append(out, srv->conf->public_url, n);
        return;
    }
    tg_buf_appends(out, c->listener->tls ? "https://" : "http://");
    struct tg_slice host = tg_http_req_header(&c->req, "host");
    int ok = host.ptr != NULL && host.len > 0 && host.len < 256;
    for (size_t i = 0; ok && i < host.len; i++) {
        char ch = host.ptr[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
             ch == '-' || ch == ':' || ch == '[' || ch == ']';
    }
    if (ok)
        tg_buf_append(out, host.ptr, host.len);
    else
        tg_buf_appendf(out, "%s:%d", c->listener->lc ? c->listener->lc->address : "127.0.0.1", c->listener->port);
}

void tg_router_handle(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_http_req *req = &c->req;
    struct tg_slice url = tg_http_req_url(req);
    size_t q = 0;
    while (q < url.len && url.ptr[q] != '?')
        q++;
    struct tg_slice path = tg_slice_of(url.ptr, q);
    if (tg_slice_eq(path, TG_SLICE("/healthz"))) {
        respond_json(c, 200, "{\"status\":\"ok\"}");
        return;
    }
    if (tg_slice_eq(path, TG_SLICE("/readyz"))) {
        if (readyz(srv) && !srv->draining)
            respond_json(c, 200, "{\"status\":\"ready\"}");
        else
            respond_json(c, 503, "{\"status\":\"not ready\"}");
        return;
    }
    if (tg_slice_starts_with(path, "/.well-known/oauth-protected-resource") &&
        (path.len == 37 || path.ptr[37] == '/')) {
        protected_resource_metadata(srv, c, tg_slice_of(path.ptr + 37, path.len - 37));
        return;
    }
    struct route rt = {-1, NULL};
    /* /ENDPOINT for the default upstream, or /NAME/ENDPOINT; ENDPOINT is mcp, sse, messages or ws. */
    static const char *const endpoints[] = {"mcp", "sse", "messages", "ws", NULL};
    int endpoint = -1;
    for (int e = 0; endpoints[e] && endpoint < 0; e++) {
        size_t el = strlen(endpoints[e]);
        if (path.len == el + 1 && path.ptr[0] == '/' && memcmp(path.ptr + 1, endpoints[e], el) == 0) {
            endpoint = e;
            if (srv->conf->default_upstream >= 0) {
                rt.upstream = srv->conf->default_upstream;
                rt.uc = &srv->conf->upstreams[rt.upstream];
            }
        } else if (path.len >= el + 3 && path.ptr[0] == '/' && path.ptr[path.len - el - 1] == '/' &&
                   memcmp(path.ptr + path.len - el, endpoints[e], el) == 0) {
            endpoint = e;
            rt.uc = tg_conf_find_upstream(srv->conf, tg_slice_of(path.ptr + 1, path.len - el - 2), &rt.upstream);
        }
    }
    if (rt.uc == NULL) {
        respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Not Found: no MCP endpoint at this path", NULL);
        return;
    }
    if (tg_http_req_header_count(req, "origin") > 1 ||
        !origin_allowed(c->listener->lc, tg_http_req_header(req, "origin"))) {
        char esc[128];
        tg_log(TG_LOG_INFO, "foreign origin refused", "conn=%llu peer=%s origin=%s", (unsigned long long)c->id,
               c->peer, tg_log_esc(esc, sizeof(esc), tg_http_req_header(req, "origin")));
        respond_rpc(c, 403, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Forbidden: Origin not allowed", NULL);
        return;
    }
    if (tg_http_req_header_count(req, "authorization") > 1) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: more than one Authorization header",
                    NULL);
        return;
    }
    const struct tg_grant_conf *g = NULL;
    const char *why = NULL;
    struct tg_slice authz = tg_http_req_header(req, "authorization");
    char qauth[4200];
    if (authz.ptr == NULL && endpoint == 3) {
        /* Browsers cannot set headers on a WebSocket: ?access_token=TOKEN stands in for
         * "Authorization: Bearer TOKEN" on /ws only. */
        struct tg_slice tok = query_param(tg_slice_of(url.ptr + q, url.len - q), "access_token");
        if (tok.ptr != NULL && tok.len > 0 && tok.len < sizeof(qauth) - 8) {
            int n = snprintf(qauth, sizeof(qauth), "Bearer %.*s", (int)tok.len, tok.ptr);
            authz = tg_slice_of(qauth, (size_t)n);
        }
    }
    enum tg_auth_result ar = tg_auth_grant(srv->conf, authz, wall_ms() / 1000, &g, &why);
    if (ar != TG_AUTH_OK) {
        struct tg_buf hdr;
        tg_buf_init(&hdr);
        tg_buf_appends(&hdr, "WWW-Authenticate: Bearer realm=\"tollgate\"");
        if (srv->conf->njwt > 0) {
            tg_buf_appends(&hdr, ", resource_metadata=\"");
            base_url(srv, c, &hdr);
            tg_buf_appends(&hdr, "/.well-known/oauth-protected-resource");
            tg_buf_append(&hdr, path.ptr, path.len);
            tg_buf_appends(&hdr, "\"");
        }
        if (ar == TG_AUTH_INVALID)
            tg_buf_appendf(&hdr, ", error=\"invalid_token\", error_description=\"%s\"", why ? why : "invalid token");
        tg_buf_appends(&hdr, "\r\n");
        tg_buf_append(&hdr, "", 1);
        tg_log(TG_LOG_INFO, "unauthorized", "conn=%llu peer=%s reason=\"%s\"", (unsigned long long)c->id, c->peer,
               why ? why : (ar == TG_AUTH_MISSING ? "missing" : "invalid"));
        respond_rpc(c, 401, hdr.base, NULL, 0, TG_RPC_INVALID_REQUEST, "Unauthorized: a valid bearer token is required",
                    NULL);
        tg_buf_dispose(&hdr);
        return;
    }
    if (endpoint == 1 || endpoint == 3) {
        if (req->method != HTTP_GET) {
            tg_http_respond(c, 405, "Allow: GET\r\n", NULL, "", 0);
            return;
        }
        if (endpoint == 1)
            open_sse_channel(srv, c, &rt, g);
        else
            open_ws_channel(srv, c, &rt, g);
        return;
    }
    if (endpoint == 2) {
        if (req->method != HTTP_POST) {
            tg_http_respond(c, 405, "Allow: POST\r\n", NULL, "", 0);
            return;
        }
        handle_messages(srv, c, &rt, g, tg_slice_of(url.ptr + q, url.len - q));
        return;
    }
    switch (req->method) {
    case HTTP_POST: handle_post(srv, c, &rt, g); return;
    case HTTP_GET: handle_get(srv, c, &rt, g); return;
    case HTTP_DELETE: handle_delete(srv, c, &rt, g); return;
    default:
        tg_http_respond(c, 405, "Allow: GET, POST, DELETE\r\n", "application/json",
                        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Method Not Allowed\"}}",
                        strlen("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Method Not Allowed\"}}"));
        return;
    }
}

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

void tg_router_tick(struct tg_server *srv, int sessions_too)
{
    uint64_t now = now_ms(srv);
    while (!tg_list_empty(&srv->approvals)) {
        struct tg_call *k = tg_container_of(srv->approvals.next, struct tg_call, alink);
        /* Oldest first, but timeouts differ per tool: scan the whole list when the head is not due. */
        if (k->approval_deadline > now)
            break;
        approval_finish(k, 0, NULL, "timeout");
    }
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals;) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        l = l->next;
        if (k->approval_deadline <= now)
            approval_finish(k, 0, NULL, "timeout");
    }
    tg_counters_sweep(srv->counters, wall_ms(), 65536);
    channels_keepalive(srv);
    streams_tick(srv);
    struct tg_list *al = srv->awaiting.next;
    while (al != &srv->awaiting) {
        struct tg_call *k = tg_container_of(al, struct tg_call, alink);
        al = al->next;
        if (k->deadline <= now) {
            char why[160];
            snprintf(why, sizeof(why), "upstream %s timed out", up_name(k));
            stream_fail(k, why, 0); /* it may have run */
        }
    }
    if (sessions_too)
        tg_session_sweep(srv->sessions, sweep_one, srv);
}
