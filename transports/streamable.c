#include "core/router_int.h"


static void answer_local_init(struct tg_server *srv, struct tg_conn *c, struct tg_session *s, struct tg_msg *m,
                              const struct tg_upstream_conf *uc);

static int accept_ok(struct tg_slice accept, int need_json, int need_sse);

static void handle_batch(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g,
                         const char *body, size_t blen);
static struct tg_session *require_session(struct tg_server *srv, struct tg_conn *c, struct route *rt,
                                          const struct tg_grant_conf *g);

static void answer_local_init(struct tg_server *srv, struct tg_conn *c, struct tg_session *s, struct tg_msg *m,
                              const struct tg_upstream_conf *uc)
{
    struct tg_buf b;
    tg_buf_init(&b);
    local_init_result(s, m, uc, &b);
    char hdr[96];
    snprintf(hdr, sizeof(hdr), "Mcp-Session-Id: %s\r\n", s->id_str);
    tg_http_respond(c, 200, hdr, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

static int accept_ok(struct tg_slice accept, int need_json, int need_sse)
{
    if (accept.ptr == NULL)
        return 0;
    int any = tg_slice_has_token(accept, "*/*");
    int json = any || tg_slice_has_token(accept, "application/json") || tg_slice_has_token(accept, "application/*");
    int sse = any || tg_slice_has_token(accept, "text/event-stream") || tg_slice_has_token(accept, "text/*");
    return (!need_json || json) && (!need_sse || sse);
}

/* A JSON-RPC batch: only for sessions that negotiated 2025-03-26 (later versions removed
 * batching), never with initialize, and every element decided on its own. */
static void handle_batch(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g,
                         const char *body, size_t blen)
{
    const struct tg_limits *lim = &srv->conf->limits;
    struct tg_json_doc doc;
    const char *why = NULL;
    if (tg_json_parse(body, blen, lim->json_depth, 1, &doc, &why, NULL) != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Parse error: %s", why);
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_PARSE_ERROR, msg, NULL);
        return;
    }
    struct tg_slice sid = tg_http_req_header(&c->req, "mcp-session-id");
    struct tg_session *s = sid.ptr ? tg_session_find(srv->sessions, sid) : NULL;
    if (sid.ptr == NULL) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Bad Request: a batch needs Mcp-Session-Id (initialize cannot be batched)", NULL);
        cJSON_Delete(doc.root);
        return;
    }
    if (s == NULL || strcmp(s->grant, g->name) != 0 || s->upstream != rt->upstream) {
        respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        cJSON_Delete(doc.root);
        return;
    }
    if (strcmp(s->proto, "2025-03-26") != 0) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "Invalid Request: JSON-RPC batches are only accepted for protocol 2025-03-26; this session uses %s",
                 s->proto[0] ? s->proto : "an unknown version");
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
        cJSON_Delete(doc.root);
        return;
    }
    int n = cJSON_GetArraySize(doc.root);
    if (n == 0 || n > lim->inflight_per_session) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    n == 0 ? "Invalid Request: empty batch"
                           : "Invalid Request: more batch elements than limits.inflight_per_session",
                    NULL);
        cJSON_Delete(doc.root);
        return;
    }
    s->last_active_ms = now_ms(srv);
    struct tg_batch *b = tg_xcalloc(1, sizeof(*b));
    b->srv = srv;
    b->conn = c;
    b->pending = 1; /* held by this loop until every element is dispatched */
    tg_buf_init(&b->out);
    c->exchange = b;
    c->on_abort = on_batch_abort;
    c->on_drain = NULL;
    struct tg_buf el;
    tg_buf_init(&el);
    for (cJSON *e = doc.root->child; e; e = e->next) {
        /* Each element goes through the same strict decoder as a single message. */
        el.len = 0;
        tg_json_write(&el, e);
        struct tg_msg m;
        int code = tg_msg_decode(el.base, el.len, lim->json_depth, &m, &why);
        if (code != 0) {
            char msg[160];
            snprintf(msg, sizeof(msg), "%s: %s", code == TG_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request", why);
            batch_add_error(b, m.id_raw, m.id_len, code, msg, NULL);
        } else if (m.kind == TG_MSG_REQUEST && strcmp(m.method, "initialize") == 0) {
            batch_add_error(b, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST, "Invalid Request: initialize cannot be batched",
                            NULL);
        } else {
            dispatch_message(srv, NULL, b, rt, g, s, &m);
        }
        tg_msg_dispose(&m);
    }
    tg_buf_dispose(&el);
    cJSON_Delete(doc.root);
    batch_done_one(b);
}

/* A GET that opens an event stream must accept one; otherwise 406. */
int accepts_sse(struct tg_conn *c)
{
    if (accept_ok(tg_http_req_header(&c->req, "accept"), 0, 1))
        return 1;
    respond_rpc(c, 406, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Not Acceptable: Accept must list text/event-stream",
                NULL);
    return 0;
}

void handle_post(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
{
    struct tg_http_req *req = &c->req;
    const struct tg_limits *lim = &srv->conf->limits;
    struct tg_slice ct = tg_http_req_header(req, "content-type");
    if (ct.ptr == NULL || !tg_slice_has_token(ct, "application/json") ||
        tg_http_req_header_count(req, "content-type") != 1) {
        respond_rpc(c, 415, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Unsupported Media Type: Content-Type must be application/json", NULL);
        return;
    }
    if (!accept_ok(tg_http_req_header(req, "accept"), 1, 1)) {
        respond_rpc(c, 406, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Not Acceptable: Accept must list application/json and text/event-stream", NULL);
        return;
    }
    const char *body = req->body.base ? req->body.base : "";
    size_t blen = req->body.len;
    size_t i = 0;
    while (i < blen && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    if (i < blen && body[i] == '[') {
        handle_batch(srv, c, rt, g, body, blen);
        return;
    }
    struct tg_msg m;
    const char *why = NULL;
    int code = tg_msg_decode(body, blen, lim->json_depth, &m, &why);
    if (code != 0) {
        srv->metrics.limit_json++;
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: %s", code == TG_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request", why);
        respond_rpc(c, 400, NULL, m.id_raw, m.id_len, code, msg, NULL);
        tg_msg_dispose(&m);
        return;
    }
    struct tg_slice pv = tg_http_req_header(req, "mcp-protocol-version");
    if (pv.ptr != NULL && !tg_proto_supported(pv)) {
        respond_rpc(c, 400, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                    "Bad Request: unsupported MCP-Protocol-Version", NULL);
        tg_msg_dispose(&m);
        return;
    }
    struct tg_slice sid = tg_http_req_header(req, "mcp-session-id");
    int is_init = m.kind == TG_MSG_REQUEST && strcmp(m.method, "initialize") == 0;
    struct tg_session *s = NULL;
    if (is_init) {
        if (sid.ptr != NULL) {
            respond_rpc(c, 400, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                        "Bad Request: initialize must not carry Mcp-Session-Id", NULL);
            tg_msg_dispose(&m);
            return;
        }
        if (srv->draining) {
            respond_rpc(c, 503, NULL, m.id_raw, m.id_len, TG_RPC_UPSTREAM, "gateway is shutting down", NULL);
            tg_msg_dispose(&m);
            return;
        }
        size_t cap = (size_t)(g->max_sessions > 0 ? g->max_sessions : lim->sessions_per_grant);
        if (tg_session_count_for_grant(srv->sessions, g->name) >= cap) {
            srv->metrics.limit_sessions++;
            respond_rpc(c, 429, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                        "Too many sessions for this grant (limits.sessions_per_grant); end one with DELETE", NULL);
            tg_msg_dispose(&m);
            return;
        }
        s = tg_session_create(srv->sessions, g->name, rt->upstream);
        s->srv = srv;
        s->last_active_ms = now_ms(srv);
        srv->metrics.sessions_created++;
        if (rt->uc->init_local) {
            answer_local_init(srv, c, s, &m, rt->uc);
            tg_msg_dispose(&m);
            return;
        }
    } else {
        if (sid.ptr == NULL) {
            respond_rpc(c, 400, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                        "Bad Request: Mcp-Session-Id header is required", NULL);
            tg_msg_dispose(&m);
            return;
        }
        s = tg_session_find(srv->sessions, sid);
        if (s == NULL || strcmp(s->grant, g->name) != 0 || s->upstream != rt->upstream) {
            respond_rpc(c, 404, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
            tg_msg_dispose(&m);
            return;
        }
        s->last_active_ms = now_ms(srv);
    }
    dispatch_message(srv, c, NULL, rt, g, s, &m);
    tg_msg_dispose(&m);
}
static struct tg_session *require_session(struct tg_server *srv, struct tg_conn *c, struct route *rt,
                                          const struct tg_grant_conf *g)
{
    struct tg_slice sid = tg_http_req_header(&c->req, "mcp-session-id");
    if (sid.ptr == NULL) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: Mcp-Session-Id header is required",
                    NULL);
        return NULL;
    }
    struct tg_session *s = tg_session_find(srv->sessions, sid);
    if (s == NULL || strcmp(s->grant, g->name) != 0 || s->upstream != rt->upstream) {
        respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        return NULL;
    }
    struct tg_slice pv = tg_http_req_header(&c->req, "mcp-protocol-version");
    if (pv.ptr != NULL && !tg_proto_supported(pv)) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: unsupported MCP-Protocol-Version",
                    NULL);
        return NULL;
    }
    s->last_active_ms = now_ms(srv);
    return s;
}

void handle_get(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
{
    if (!accepts_sse(c))
        return;
    struct tg_session *s = require_session(srv, c, rt, g);
    if (s == NULL)
        return;
    if (rt->uc->init_local) {
        tg_http_respond(c, 405, "Allow: POST, DELETE\r\n", NULL, "", 0);
        return;
    }
    struct tg_slice last = tg_http_req_header(&c->req, "last-event-id");
    if (last.ptr != NULL) {
        resume_stream(srv, c, s, last);
        return;
    }
    if (s->get_stream != NULL) {
        struct tg_call *gk = s->get_stream;
        if (gk->conn == NULL && gk->replay != NULL) {
            /* The GET stream lost its client without Last-Event-ID: the new one takes it over. */
            attach_stream(gk, c, 0);
            return;
        }
        respond_rpc(c, 409, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Conflict: this session already has a GET stream",
                    NULL);
        return;
    }
    struct tg_call *k = call_new(srv, s, c, KIND_GET);
    s->get_stream = k;
    call_send(k, "GET", NULL, 0, 1, 0);
}

void handle_delete(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
{
    struct tg_session *s = require_session(srv, c, rt, g);
    if (s == NULL)
        return;
    delete_upstream_session(srv, s);
    end_get_stream(s);
    end_session_calls(s);
    tg_log(TG_LOG_DEBUG, "session deleted", "session=%s grant=%s", s->id_str, s->grant);
    tg_session_remove(srv->sessions, s);
    tg_http_respond(c, 200, NULL, NULL, "", 0);
}
