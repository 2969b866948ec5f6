#include "transports/streamable.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/gate/dispatch.h"
#include "core/gate/stateless.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/era.h"
#include "core/mcp/legacy.h"
#include "core/mcp/listen.h"
#include "core/mcp/modern.h"
#include "core/mcp/schemas.h"
#include "core/wire/msg.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "transports/batch.h"
#include "transports/cred_watch.h"
#include "transports/http1/http1.h"
#include "transports/replay.h"
#include "transports/respond.h"
#include "core/wire/sse.h"

/* ---- the sink ------------------------------------------------------------------------ */

static void on_client_abort(struct tg_conn *c, void *ex);
static void on_client_drain(struct tg_conn *c, void *ex);
static void write_event(struct tg_http_sink *hs, const char *p, size_t n, int joined);

static void hook(struct tg_http_sink *hs, struct tg_conn *c)
{
    hs->conn = c;
    c->exchange = hs;
    c->on_abort = on_client_abort;
    c->on_drain = on_client_drain;
}

static void unhook(struct tg_http_sink *hs)
{
    struct tg_conn *c = hs->conn;
    hs->conn = NULL;
    if (c != NULL && c->exchange == hs) {
        c->exchange = NULL;
        c->on_abort = NULL;
        c->on_drain = NULL;
    }
}

/* A client that lost a resumable stream may come back with Last-Event-ID: the call goes on,
 * its events kept in the replay buffer. Otherwise the call is let go. */
static void on_client_abort(struct tg_conn *c, void *ex)
{
    struct tg_http_sink *hs = ex;
    hs->conn = NULL;
    if (hs->call == NULL)
        return;
    if (hs->replay != NULL && tg_call_running(hs->call)) {
        hs->replay->detached_at = uv_now(hs->srv->loop);
        return;
    }
    tg_call_client_gone(hs->call);
}

static void on_client_drain(struct tg_conn *c, void *ex)
{
    struct tg_http_sink *hs = ex;
    if (hs->call != NULL)
        tg_call_client_drained(hs->call);
}

static void session_header(const struct tg_http_sink *hs, char *hdr, size_t sz)
{
    hdr[0] = '\0';
    if (hs->is_init && hs->sess->live)
        snprintf(hdr, sz, "Mcp-Session-Id: %s\r\n", hs->sess->id_str);
}

/* The credential of the request that opened this stream ended (a reload no longer takes it, or its
 * JWT expired): the stream ends cleanly, a 2026 listen with its result as the era ends one, and the
 * call behind it is let go as when its client leaves. */
static void on_cred_end(void *ud, const char *why)
{
    struct tg_http_sink *hs = ud;
    struct tg_conn *c = hs->conn;
    tg_log(TG_LOG_INFO, "stream ended with its credential", "session=%s grant=%s why=\"%s\"", hs->sess->id_str,
           hs->sess->grant, why);
    if (c != NULL && hs->streaming) {
        size_t idn;
        const char *id = hs->modern && hs->call != NULL && tg_call_is_listen(hs->call)
                             ? tg_call_client_id(hs->call, &idn) : NULL;
        if (id != NULL) {
            struct tg_buf b;
            tg_buf_init(&b);
            tg_mcp_listen_complete(&b, id, idn);
            write_event(hs, b.base, b.len, 0);
            tg_buf_dispose(&b);
        }
        unhook(hs);
        tg_http_stream_end(c);
    }
    if (hs->call != NULL)
        tg_call_client_gone(hs->call);
}

/* The client stream begins: give it ids (and prime 2025-11-25 clients to reconnect). */
static void on_sink_stream(struct tg_sink *sk, struct tg_call *k)
{
    struct tg_http_sink *hs = (struct tg_http_sink *)sk;
    if (hs->streaming || hs->conn == NULL)
        return;
    hs->streaming = 1;
    hs->watch = tg_cred_watch_of_request(hs->srv, hs->conn, hs->sess->grant, &hs->hint, on_cred_end, hs);
    char hdr[96];
    session_header(hs, hdr, sizeof(hdr));
    if (hs->modern) {
        /* 2026-07-28: one request's stream, no ids and no resumption. */
        tg_http_stream_begin(hs->conn, 200, "X-Accel-Buffering: no\r\n", "text/event-stream");
        if (k != NULL && tg_call_is_listen(k)) {
            hs->last_write_ms = uv_now(hs->srv->loop);
            tg_list_insert_tail(&hs->srv->listens, &hs->listen_node); /* kept alive by the tick */
        }
        return;
    }
    tg_http_stream_begin(hs->conn, 200, hdr, "text/event-stream");
    hs->replay = tg_replay_new(hs->srv, hs->sess, hs);
    if (strcmp(hs->sess->proto, "2025-11-25") == 0) {
        char prime[64];
        int pn = snprintf(prime, sizeof(prime), "id: %llx-0\nretry: 1000\ndata:\n\n",
                          (unsigned long long)hs->replay->id);
        tg_http_stream_write(hs->conn, prime, (size_t)pn);
    }
}

/* Where an event is framed when the stream keeps none for replay (limits.replay_bytes 0), or
 * when it has no replay buffer: one buffer for the process (one loop, one thread), so an event
 * costs no allocation. A big event does not leave its memory behind. */
static struct tg_buf event_scratch;

/* joined: the event may share its HTTP chunk with its neighbours (tg_http_stream_write_joined):
 * a server message (a notification or a server request) is, an answer never is. */
static void write_event(struct tg_http_sink *hs, const char *p, size_t n, int joined)
{
    struct tg_replay *r = hs->replay;
    if (hs->conn == NULL && r == NULL)
        return;
    struct tg_buf *b = &event_scratch;
    struct tg_slice ev;
    if (r != NULL) {
        ev = tg_replay_message(r, p, n, b); /* kept for a resuming client, and written from there */
    } else {
        b->len = 0;
        tg_sse_write_message(b, NULL, 0, p, n);
        ev = tg_slice_of(b->base, b->len);
    }
    if (hs->conn != NULL && joined)
        tg_http_stream_write_joined(hs->conn, ev.ptr, ev.len);
    else if (hs->conn != NULL)
        tg_http_stream_write(hs->conn, ev.ptr, ev.len);
    hs->last_write_ms = uv_now(hs->srv->loop);
    if (b->cap > 65536)
        tg_buf_dispose(b);
    hs->srv->metrics.sse_events_relayed++;
}

/* What the server says on the way: the answer becomes a stream if it was not one yet. */
static void on_sink_message(struct tg_sink *sk, struct tg_call *k, const char *p, size_t n)
{
    struct tg_http_sink *hs = (struct tg_http_sink *)sk;
    if (!hs->streaming) {
        if (hs->conn == NULL)
            return;
        on_sink_stream(sk, k);
    }
    write_event(hs, p, n, 1); /* a server message, never an answer (which comes to on_sink_answer) */
}

/* An answer given to a client that is slow to read it: the session's message-stream upstream
 * stays paused until that connection drains (or closes). */
static void on_answer_drained(struct tg_conn *c, void *ud)
{
    struct tg_session *s = ud;
    tg_call_session_stall(s, -1);
    tg_session_unref(s);
}

static void on_sink_answer(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p,
                           size_t n)
{
    struct tg_http_sink *hs = (struct tg_http_sink *)sk;
    if (hs->streaming) {
        if (n > 0)
            write_event(hs, p, n, 0);
        return;
    }
    struct tg_conn *c = hs->conn;
    if (c == NULL)
        return;
    char hdr[400];
    const char *h = extra;
    if (status == 200 && hs->is_init && hs->sess->live) {
        session_header(hs, hdr, sizeof(hdr));
        if (extra != NULL)
            tg_strlcpy(hdr + strlen(hdr), extra, sizeof(hdr) - strlen(hdr));
        h = hdr;
    }
    unhook(hs); /* the exchange is complete: the connection may go on to its next request */
    struct tg_buf own;
    if (n > 0 && tg_call_take_answer(k, p, n, &own))
        tg_http_respond_owned(c, status, h, "application/json", &own);
    else
        tg_http_respond(c, status, h, n > 0 ? "application/json" : NULL, n > 0 ? p : "", n);
    if (c->phase < TG_CONN_CLOSING && c->on_watch == NULL && tg_conn_output_high(c)) {
        tg_call_session_stall(hs->sess, +1);
        c->watch_ud = tg_session_ref(hs->sess);
        c->on_watch = on_answer_drained;
    }
}

static void on_sink_bare(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p,
                         size_t n)
{
    if (!((struct tg_http_sink *)sk)->streaming)
        on_sink_answer(sk, k, status, extra, p, n);
}

static void on_sink_end(struct tg_sink *sk, struct tg_call *k)
{
    struct tg_http_sink *hs = (struct tg_http_sink *)sk;
    if (!hs->streaming || hs->conn == NULL)
        return;
    struct tg_conn *c = hs->conn;
    unhook(hs);
    tg_http_stream_end(c);
}

/* A client primed to resume (2025-11-25 sessions get an id and a retry first) is told the
 * same as the upstream told us: its stream ends here with the retry time, and it comes back
 * with GET and Last-Event-ID to the replay buffer while the call goes on. Older clients cannot
 * resume: their stream stays open and everything is relayed on it. */
static void on_sink_poll(struct tg_sink *sk, struct tg_call *k, long retry_ms)
{
    struct tg_http_sink *hs = (struct tg_http_sink *)sk;
    if (hs->conn == NULL || hs->replay == NULL || strcmp(hs->sess->proto, "2025-11-25") != 0)
        return;
    char rb[40];
    int rn = snprintf(rb, sizeof(rb), "retry: %ld\n\n", retry_ms);
    struct tg_conn *c = hs->conn;
    tg_http_stream_write(c, rb, (size_t)rn);
    unhook(hs);
    hs->replay->detached_at = uv_now(hs->srv->loop);
    tg_http_stream_end(c);
}

static int on_sink_high(const struct tg_sink *sk)
{
    const struct tg_http_sink *hs = (const struct tg_http_sink *)sk;
    return hs->conn != NULL && tg_conn_output_high(hs->conn);
}

static int on_sink_listening(const struct tg_sink *sk)
{
    const struct tg_http_sink *hs = (const struct tg_http_sink *)sk;
    return hs->conn != NULL || hs->replay != NULL;
}

static int on_sink_connected(const struct tg_sink *sk) { return ((const struct tg_http_sink *)sk)->conn != NULL; }

static void on_sink_bind(struct tg_sink *sk, struct tg_call *k) { ((struct tg_http_sink *)sk)->call = k; }

/* Released sinks are kept for the next exchanges (one per request otherwise costs a malloc and
 * a free on the hot path); at most SINK_CACHE of them, the rest are freed. */
#ifdef __SANITIZE_ADDRESS__
#define SINK_CACHE 0 /* under ASan a released sink is freed at once, so a use after release shows */
#else
#define SINK_CACHE 64
#endif
static struct tg_http_sink *sink_cache[SINK_CACHE + 1];
static size_t nsink_cache;

static void on_sink_release(struct tg_sink *sk, struct tg_call *k)
{
    struct tg_http_sink *hs = (struct tg_http_sink *)sk;
    unhook(hs);
    tg_cred_watch_free(hs->watch);
    if (tg_list_linked(&hs->listen_node))
        tg_list_unlink(&hs->listen_node);
    if (hs->replay != NULL)
        tg_replay_end(hs->replay);
    tg_session_unref(hs->sess);
    if ((int)nsink_cache < SINK_CACHE)
        sink_cache[nsink_cache++] = hs;
    else
        free(hs);
}

static const struct tg_sink_ops http_sink_ops = {
    .message = on_sink_message,
    .answer = on_sink_answer,
    .bare = on_sink_bare,
    .stream = on_sink_stream,
    .end = on_sink_end,
    .poll = on_sink_poll,
    .high = on_sink_high,
    .listening = on_sink_listening,
    .connected = on_sink_connected,
    .release = on_sink_release,
    .bind = on_sink_bind,
    .cred = tg_streamable_sink_cred,
};

static struct tg_http_sink *http_sink_new(const struct tg_exchange *x, struct tg_session *s, struct tg_conn *c,
                                          int is_init)
{
    struct tg_http_sink *hs;
    if (nsink_cache > 0) {
        hs = sink_cache[--nsink_cache];
        memset(hs, 0, sizeof(*hs));
    } else {
        hs = tg_xcalloc(1, sizeof(*hs));
    }
    hs->sink.ops = &http_sink_ops;
    hs->srv = x->srv;
    tg_cred_hint_of(x, &hs->hint); /* for a stream: its JWT is not verified again */
    hs->sess = tg_session_ref(s);
    hs->is_init = is_init;
    if (is_init)
        hs->sink.flags = TG_SINK_NEW_SESSION;
    hook(hs, c);
    return hs;
}

/* Give a live stream a (new) client connection and replay what it missed. */
static void attach(struct tg_http_sink *hs, struct tg_conn *c, uint64_t after_seq)
{
    tg_http_stream_begin(c, 200, NULL, "text/event-stream");
    if (hs->replay != NULL) {
        tg_replay_write(hs->replay, c, after_seq);
        hs->replay->detached_at = 0;
    }
    hook(hs, c);
    tg_cred_watch_free(hs->watch); /* the request that takes it over brings its own credential */
    hs->watch = tg_cred_watch_of_request(hs->srv, c, hs->sess->grant, NULL, on_cred_end, hs);
    if (hs->call != NULL)
        tg_call_client_drained(hs->call); /* reading the upstream again */
}

/* ---- POST ------------------------------------------------------------------------------ */

static int accept_ok(struct tg_slice accept, int need_json, int need_sse)
{
    if (accept.ptr == NULL)
        return 0;
    /* what MCP clients send, as they send it, is not taken apart */
    if (tg_slice_eq(accept, TG_SLICE("application/json, text/event-stream")) ||
        tg_slice_eq(accept, TG_SLICE("text/event-stream, application/json")))
        return 1;
    /* one pass over the media ranges (this runs for every POST) */
    int json = 0, sse = 0;
    struct tg_slice t;
    for (size_t i = 0; tg_slice_next_token(accept, &i, &t);) {
        if (tg_slice_eq_nocase(t, "*/*"))
            json = sse = 1;
        else if (tg_slice_eq_nocase(t, "application/json") || tg_slice_eq_nocase(t, "application/*"))
            json = 1;
        else if (tg_slice_eq_nocase(t, "text/event-stream") || tg_slice_eq_nocase(t, "text/*"))
            sse = 1;
    }
    return (!need_json || json) && (!need_sse || sse);
}

int tg_streamable_accepts_sse(struct tg_conn *c)
{
    if (accept_ok(tg_http_req_header(c->req, "accept"), 0, 1))
        return 1;
    tg_respond_rpc(c, 406, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                        "Not Acceptable: Accept must list text/event-stream", NULL);
    return 0;
}

/* The session is this client's: its grant, route and maker (another user of the grant gets 404). */
static int session_matches(const struct tg_session *s, const struct tg_exchange *x)
{
    return s != NULL && strcmp(s->grant, x->grant->name) == 0 && s->upstream == x->upstream &&
           tg_dispatch_session_owner(x, s);
}

/* A JSON-RPC batch: only for sessions that negotiated 2025-03-26 (later versions removed
 * batching), never with initialize, and every element decided on its own. */
static void handle_batch(struct tg_exchange *x, struct tg_conn *c, const char *body, size_t blen)
{
    struct tg_server *srv = x->srv;
    const struct tg_limits *lim = &srv->conf->limits;
    struct tg_json_doc doc;
    const char *why = NULL;
    if (tg_json_parse(body, blen, lim->json_depth, 1, &doc, &why, NULL) != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Parse error: %s", why);
        tg_respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_PARSE_ERROR, msg, NULL);
        return;
    }
    struct tg_slice sid = tg_http_req_header(c->req, "mcp-session-id");
    struct tg_session *s = sid.ptr ? tg_session_find(srv->sessions, sid) : NULL;
    const char *refusal = NULL;
    int status = 400;
    char msg[200];
    int n = cJSON_GetArraySize(doc.root);
    if (sid.ptr == NULL) {
        refusal = "Bad Request: a batch needs Mcp-Session-Id (initialize cannot be batched)";
    } else if (!session_matches(s, x)) {
        refusal = "Session not found", status = 404;
    } else if (!tg_mcp_batch_allowed(s->proto)) {
        snprintf(msg, sizeof(msg),
                 "Invalid Request: JSON-RPC batches are only accepted for protocol 2025-03-26; this session uses %s",
                 s->proto[0] ? s->proto : "an unknown version");
        refusal = msg;
    } else if (n == 0 || n > lim->inflight_per_session) {
        refusal = n == 0 ? "Invalid Request: empty batch"
                         : "Invalid Request: more batch elements than limits.inflight_per_session";
    }
    if (refusal != NULL) {
        tg_respond_rpc(c, status, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, refusal, NULL);
        cJSON_Delete(doc.root);
        return;
    }
    s->last_active_ms = uv_now(srv->loop);
    x->sess = s;
    tg_strlcpy(x->proto, s->proto, sizeof(x->proto));
    struct tg_batch *b = tg_batch_new(srv, c, NULL, 0);
    tg_batch_run(b, x, doc.root, lim->json_depth);
    cJSON_Delete(doc.root);
    tg_batch_done(b);
}

static void answer_local_init(struct tg_conn *c, struct tg_session *s, struct tg_msg *m,
                              const struct tg_upstream_conf *uc)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_mcp_local_init(s, m, uc, &b);
    tg_dispatch_session_ready(s->srv, s);
    char hdr[96];
    snprintf(hdr, sizeof(hdr), "Mcp-Session-Id: %s\r\n", s->id_str);
    tg_http_respond(c, 200, hdr, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

/* The session a POST names, or an answered refusal (NULL). */
static struct tg_session *post_session(struct tg_exchange *x, struct tg_conn *c, struct tg_msg *m)
{
    struct tg_slice sid = tg_http_req_header(c->req, "mcp-session-id");
    if (m->kind == TG_MSG_REQUEST && m->mid == TG_M_INITIALIZE) {
        if (sid.ptr != NULL) {
            tg_respond_rpc(c, 400, NULL, m->id_raw, m->id_len, TG_RPC_INVALID_REQUEST,
                                "Bad Request: initialize must not carry Mcp-Session-Id", NULL);
            return NULL;
        }
        int st = tg_dispatch_session_open(x);
        if (st == 503)
            tg_respond_rpc(c, 503, NULL, m->id_raw, m->id_len, TG_RPC_UPSTREAM, "gateway is shutting down",
                                NULL);
        else if (st != 0)
            tg_respond_rpc(c, 429, NULL, m->id_raw, m->id_len, TG_RPC_INVALID_REQUEST,
                                "Too many sessions for this grant (limits.sessions_per_grant); end one with DELETE",
                                NULL);
        return st == 0 ? x->sess : NULL;
    }
    if (sid.ptr == NULL) {
        tg_respond_rpc(c, 400, NULL, m->id_raw, m->id_len, TG_RPC_INVALID_REQUEST,
                            "Bad Request: Mcp-Session-Id header is required", NULL);
        return NULL;
    }
    struct tg_session *s = tg_session_find(x->srv->sessions, sid);
    if (!session_matches(s, x)) {
        tg_respond_rpc(c, 404, NULL, m->id_raw, m->id_len, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        return NULL;
    }
    s->last_active_ms = uv_now(x->srv->loop);
    tg_dispatch_session_used(x->srv, s);
    return s;
}

/* A request of the 2026-07-28 era. The body's claim and every Mcp-* header are checked first (a
 * header never talks past the body: -32020). Then it is served statelessly: removed methods
 * 404, answers to server requests 400, anything else through the bridge (core/bridge/stateless.c)
 * on the grant's stateless session, which answers server/discover and passes the rest through
 * the policy gate, with the answer made a 2026 result. Returns 1 if m was such a request. */
static int handle_modern(struct tg_exchange *x, struct tg_conn *c, struct tg_msg *m)
{
    struct tg_mcp_claim claim;
    struct tg_mcp_refusal why;
    if (tg_mcp_classify(m->root, &claim, &why) != 0) {
        tg_respond_rpc(c, why.status, NULL, m->id_raw, m->id_len, why.code, why.message, NULL);
        return 1;
    }
    if (claim.era != TG_ERA_2026) {
        struct tg_slice pv = tg_http_req_header(c->req, "mcp-protocol-version");
        char v[32];
        if (pv.ptr != NULL && pv.len < sizeof(v)) {
            memcpy(v, pv.ptr, pv.len);
            v[pv.len] = '\0';
            if (tg_mcp_modern_version_supported(v) && m->mid == TG_M_INITIALIZE) {
                tg_respond_rpc(c, 400, NULL, m->id_raw, m->id_len, TG_RPC_HEADER_MISMATCH,
                                    "Header mismatch: initialize is a 2025 request, sent with a 2026-07-28 MCP-Protocol-Version",
                                    NULL);
                return 1;
            }
            if (tg_mcp_modern_version_supported(v)) {
                /* A modern header over a body that makes no claim: the body decides, and it is
                 * incomplete. */
                tg_respond_rpc(c, 400, NULL, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                                    "Invalid params: a 2026-07-28 request needs _meta io.modelcontextprotocol/protocolVersion",
                                    NULL);
                return 1;
            }
        }
        return 0;
    }
    struct tg_mcp_header h[TG_HTTP_MAX_HEADERS];
    size_t nh = 0;
    const struct tg_http_req *req = c->req;
    for (int i = 0; i < req->nheaders; i++) {
        const struct tg_http_header *hd = &req->headers[i];
        struct tg_slice name = tg_slice_of(req->head.base + hd->name_off, hd->name_len);
        /* "mcp-" in any case, without a call for each header (x | 0x20 is m, c or p only for
         * those letters in either case) */
        if (name.len >= 4 && (name.ptr[0] | 0x20) == 'm' && (name.ptr[1] | 0x20) == 'c' &&
            (name.ptr[2] | 0x20) == 'p' && name.ptr[3] == '-') {
            h[nh].name = name;
            h[nh].value = tg_slice_of(req->head.base + hd->value_off, hd->value_len);
            nh++;
        }
    }
    if (tg_mcp_check_headers(h, nh, m->root, &claim, &why) != 0) {
        char esc[96];
        tg_log(TG_LOG_INFO, "2026-07-28 request refused: headers disagree with the body", "grant=%s upstream=%s why=%s",
               x->grant->name, x->uc->name, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(why.message)));
        tg_respond_rpc(c, why.status, NULL, m->id_raw, m->id_len, why.code, why.message, NULL);
        return 1;
    }
    const char *method = m->method;
    /* Mcp-Param-*: checked against the arguments for the properties the tool marks (as far as a
     * tools/list through the gateway showed its schema), rebuilt from the body for the upstream;
     * the ones the gateway does not recognise go as they came. */
    const cJSON *params = tg_json_get(m->root, "params");
    const cJSON *tool = tg_json_get(params, "name");
    const cJSON *schema = m->kind == TG_MSG_REQUEST && m->mid == TG_M_TOOLS_CALL && cJSON_IsString(tool) &&
                                  x->srv->schemas != NULL
                              ? tg_mcp_schemas_find(x->srv->schemas, x->uc->name, tool->valuestring)
                              : NULL;
    const cJSON *args = tg_json_get(params, "arguments");
    if (schema != NULL && tg_gate_bind_check_params(x, h, nh, schema, tool->valuestring, args, &why) != 0) {
        char esc[96];
        tg_log(TG_LOG_INFO, "2026-07-28 request refused: Mcp-Param headers disagree with the arguments",
               "grant=%s upstream=%s why=%s", x->grant->name, x->uc->name,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(why.message)));
        tg_respond_rpc(c, why.status, NULL, m->id_raw, m->id_len, why.code, why.message, NULL);
        return 1;
    }
    if (!tg_mcp_modern_version_supported(claim.version)) {
        struct tg_buf d;
        tg_buf_init(&d);
        tg_buf_appends(&d, "{\"supported\":");
        tg_buf_appends(&d, "[\"" TG_MCP_MODERN_VERSION "\"]"); /* what server/discover lists */
        tg_buf_appends(&d, ",\"requested\":");
        tg_json_write_string(&d, claim.version, strlen(claim.version));
        tg_buf_append(&d, "}", 2);
        char msg[160];
        snprintf(msg, sizeof(msg), "Unsupported protocol version %.40s for this upstream: see error.data.supported",
                 claim.version);
        tg_respond_rpc(c, 400, NULL, m->id_raw, m->id_len, TG_RPC_UNSUPPORTED_VERSION, msg, d.base);
        tg_buf_dispose(&d);
        return 1;
    }
    if (m->kind == TG_MSG_RESPONSE) {
        tg_respond_rpc(c, 400, NULL, m->id_raw, m->id_len, TG_RPC_INVALID_REQUEST,
                            "Invalid Request: 2026-07-28 has no server-to-client requests to answer", NULL);
        return 1;
    }
    if (tg_mcp_removed_method(method)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Method not found: %.80s was removed in 2026-07-28", method);
        tg_respond_rpc(c, 404, NULL, m->id_raw, m->id_len, TG_RPC_METHOD_NOT_FOUND, msg, NULL);
        return 1;
    }
    int st = tg_stateless_session(x);
    if (st != 0) {
        tg_respond_rpc(c, st, NULL, m->id_raw, m->id_len, st == 503 ? TG_RPC_UPSTREAM : TG_RPC_INVALID_REQUEST,
                            st == 503 ? "gateway is shutting down" : "Too many sessions for this grant (limits.sessions_per_grant)", NULL);
        return 1;
    }
    x->era = TG_ERA_2026;
    x->client_caps = tg_mcp_client_caps(claim.caps);
    tg_strlcpy(x->proto, claim.version, sizeof(x->proto));
    struct tg_http_sink *hs = http_sink_new(x, x->sess, c, 0);
    hs->modern = 1;
    hs->sink.flags |= TG_SINK_STATELESS; /* no server-to-client requests in this era */
    struct tg_buf fwd;
    tg_buf_init(&fwd);
    tg_mcp_param_headers_build(&fwd, h, nh, schema, args);
    x->fwd_headers = fwd.len > 0 ? fwd.base : NULL;
    tg_stateless_request(x, &hs->sink, m); /* copies what it keeps */
    x->fwd_headers = NULL;
    tg_buf_dispose(&fwd);
    return 1;
}

void tg_streamable_post(struct tg_exchange *x, struct tg_conn *c)
{
    struct tg_server *srv = x->srv;
    struct tg_http_req *req = c->req;
    struct tg_slice ct = tg_http_req_header(req, "content-type");
    if (ct.ptr == NULL || !tg_slice_has_token(ct, "application/json") ||
        tg_http_req_header_count(req, "content-type") != 1) {
        tg_respond_rpc(c, 415, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Unsupported Media Type: Content-Type must be application/json", NULL);
        return;
    }
    if (!accept_ok(tg_http_req_header(req, "accept"), 1, 1)) {
        tg_respond_rpc(c, 406, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Not Acceptable: Accept must list application/json and text/event-stream", NULL);
        return;
    }
    const char *body = req->body.base ? req->body.base : "";
    size_t blen = req->body.len;
    size_t i = 0;
    while (i < blen && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    if (i < blen && body[i] == '[') {
        handle_batch(x, c, body, blen);
        return;
    }
    struct tg_msg m;
    const char *why = NULL;
    int code = tg_msg_decode(body, blen, srv->conf->limits.json_depth, &m, &why);
    if (code != 0) {
        srv->metrics.limit_json++;
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: %s", code == TG_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request", why);
        tg_respond_rpc(c, 400, NULL, m.id_raw, m.id_len, code, msg, NULL);
        tg_msg_dispose(&m);
        return;
    }
    if (handle_modern(x, c, &m)) {
        tg_msg_dispose(&m);
        return;
    }
    struct tg_slice pv = tg_http_req_header(req, "mcp-protocol-version");
    if (pv.ptr != NULL && !tg_mcp_version_supported(pv)) {
        tg_respond_rpc(c, 400, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                            "Bad Request: unsupported MCP-Protocol-Version", NULL);
        tg_msg_dispose(&m);
        return;
    }
    struct tg_session *s = post_session(x, c, &m);
    if (s == NULL) {
        tg_msg_dispose(&m);
        return;
    }
    int is_init = m.kind == TG_MSG_REQUEST && m.mid == TG_M_INITIALIZE;
    if (is_init && x->uc->init_local) {
        answer_local_init(c, s, &m, x->uc);
        tg_msg_dispose(&m);
        return;
    }
    x->sess = s;
    /* The version this request speaks: its header, else what the session negotiated. */
    if (pv.ptr != NULL && pv.len < sizeof(x->proto)) {
        memcpy(x->proto, pv.ptr, pv.len);
        x->proto[pv.len] = '\0';
    } else {
        tg_strlcpy(x->proto, s->proto, sizeof(x->proto));
    }
    struct tg_http_sink *hs = http_sink_new(x, s, c, is_init);
    tg_dispatch_message(x, &hs->sink, &m);
    tg_msg_dispose(&m);
    if (req->body.cap > 65536) /* dispatched: a call that waits (parked for approval) does not pin it as well */
        tg_buf_dispose(&req->body);
}

/* ---- GET and DELETE --------------------------------------------------------------------- */

static struct tg_session *require_session(struct tg_exchange *x, struct tg_conn *c)
{
    struct tg_slice sid = tg_http_req_header(c->req, "mcp-session-id");
    if (sid.ptr == NULL) {
        tg_respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Bad Request: Mcp-Session-Id header is required", NULL);
        return NULL;
    }
    struct tg_session *s = tg_session_find(x->srv->sessions, sid);
    if (!session_matches(s, x)) {
        tg_respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        return NULL;
    }
    struct tg_slice pv = tg_http_req_header(c->req, "mcp-protocol-version");
    if (pv.ptr != NULL && !tg_mcp_version_supported(pv)) {
        tg_respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Bad Request: unsupported MCP-Protocol-Version", NULL);
        return NULL;
    }
    s->last_active_ms = uv_now(x->srv->loop);
    tg_dispatch_session_used(x->srv, s);
    x->sess = s;
    tg_strlcpy(x->proto, s->proto, sizeof(x->proto));
    return s;
}

/* GET with Last-Event-ID: "STREAM-SEQ" names a stream of this session and the last event seen. */
static void resume_stream(struct tg_conn *c, struct tg_session *s, struct tg_slice last)
{
    uint64_t sid, seq;
    if (tg_replay_parse_id(last, &sid, &seq) != 0) {
        tg_respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: malformed Last-Event-ID", NULL);
        return;
    }
    for (struct tg_list *l = s->streams.next; l != &s->streams; l = l->next) {
        struct tg_replay *r = tg_container_of(l, struct tg_replay, snode);
        if (r->id != sid)
            continue;
        if (r->live != NULL && r->live->conn != NULL) {
            tg_respond_rpc(c, 409, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Conflict: this stream has a client",
                                NULL);
            return;
        }
        if (r->live != NULL) {
            attach(r->live, c, seq);
            return;
        }
        /* The stream ended while the client was away: replay the rest, then end it. */
        tg_http_stream_begin(c, 200, NULL, "text/event-stream");
        tg_replay_write(r, c, seq);
        tg_http_stream_end(c);
        return;
    }
    tg_respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                        "Not Found: this stream cannot be resumed (unknown or expired)", NULL);
}

void tg_streamable_get(struct tg_exchange *x, struct tg_conn *c)
{
    if (!tg_streamable_accepts_sse(c))
        return;
    struct tg_session *s = require_session(x, c);
    if (s == NULL)
        return;
    if (x->uc->init_local) {
        tg_http_respond(c, 405, "Allow: POST, DELETE\r\n", NULL, "", 0);
        return;
    }
    struct tg_slice last = tg_http_req_header(c->req, "last-event-id");
    if (last.ptr != NULL) {
        resume_stream(c, s, last);
        return;
    }
    struct tg_sink *gs = tg_dispatch_get_stream_sink(s);
    if (s->get_stream != NULL) {
        struct tg_http_sink *hs = gs != NULL && gs->ops == &http_sink_ops ? (struct tg_http_sink *)gs : NULL;
        if (hs != NULL && hs->conn == NULL && hs->replay != NULL) {
            /* The GET stream lost its client without Last-Event-ID: the new one takes it over. */
            attach(hs, c, 0);
            return;
        }
        tg_respond_rpc(c, 409, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Conflict: this session already has a GET stream", NULL);
        return;
    }
    struct tg_http_sink *hs = http_sink_new(x, s, c, 0);
    hs->get = 1;
    tg_dispatch_listen(x, &hs->sink, 0);
}

void tg_streamable_delete(struct tg_exchange *x, struct tg_conn *c)
{
    struct tg_session *s = require_session(x, c);
    if (s == NULL)
        return;
    tg_log(TG_LOG_DEBUG, "session deleted", "session=%s grant=%s", s->id_str, s->grant);
    tg_dispatch_end_session(x->srv, s, TG_END_DELETE);
    tg_http_respond(c, 200, NULL, NULL, "", 0);
}

void tg_streamable_dispose(void)
{
    tg_buf_dispose(&event_scratch);
    while (nsink_cache > 0)
        free(sink_cache[--nsink_cache]);
}

void tg_streamable_free_streams(struct tg_server *srv)
{
    for (struct tg_list *l = srv->streams.next; l != &srv->streams; l = l->next) {
        struct tg_replay *r = tg_container_of(l, struct tg_replay, gnode);
        if (r->live != NULL)
            r->live->replay = NULL;
    }
    tg_replay_free_all(srv);
}
