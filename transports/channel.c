#include "transports/channel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/call.h"
#include "core/call/sink.h"
#include "core/gate/dispatch.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/legacy.h"
#include "core/wire/msg.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "transports/batch.h"
#include "policy/auth.h"
#include "transports/cred_watch.h"
#include "transports/http1/http1.h"
#include "transports/respond.h"
#include "transports/ws.h"
#include "core/wire/sse.h"

/* One framing buffer for the process (one loop, one thread): no allocation per message. */
static struct tg_buf frame_scratch;

void tg_channels_dispose(void) { tg_buf_dispose(&frame_scratch); }

void tg_channel_send(struct tg_channel *ch, const char *p, size_t n)
{
    if (!ch->open || ch->conn == NULL)
        return;
    ch->last_write_ms = uv_now(ch->sess->srv->loop);
    if (ch->kind == CH_WS) {
        tg_ws_send_text(ch->ws, p, n);
        return;
    }
    struct tg_buf *b = &frame_scratch;
    b->len = 0;
    tg_sse_write_message(b, NULL, 0, p, n);
    tg_http_stream_write(ch->conn, b->base, b->len);
    if (b->cap > 65536)
        tg_buf_dispose(b);
    ch->sess->srv->metrics.sse_events_relayed++;
}

int tg_channel_high(const struct tg_channel *ch)
{
    if (!ch->open || ch->conn == NULL)
        return 0;
    size_t pending = ch->kind == CH_WS ? tg_ws_pending(ch->ws) : ch->conn->out_pending;
    return pending > (size_t)ch->sess->srv->conf->limits.output_high_water;
}

void tg_channels_count(struct tg_server *srv, size_t *sse, size_t *ws)
{
    *sse = *ws = 0;
    for (struct tg_list *l = srv->channels.next; l != &srv->channels; l = l->next) {
        struct tg_channel *ch = tg_container_of(l, struct tg_channel, node);
        if (ch->open)
            (*(ch->kind == CH_WS ? ws : sse))++;
    }
}

struct tg_channel *tg_channel_ref(struct tg_channel *ch)
{
    ch->refcnt++;
    return ch;
}

void tg_channel_unref(struct tg_channel *ch)
{
    if (--ch->refcnt > 0)
        return;
    tg_list_unlink(&ch->node);
    if (ch->sess->channel == &ch->sink)
        ch->sess->channel = NULL;
    tg_session_unref(ch->sess);
    tg_ws_free(ch->ws);
    tg_cred_watch_free(ch->watch);
    free(ch->scopes);
    free(ch->resource_metadata);
    free(ch);
}

/* ---- the sink: the session's stream call and its server messages --------------------- */

static void on_sink_message(struct tg_sink *sk, struct tg_call *k, const char *p, size_t n)
{
    tg_channel_send((struct tg_channel *)sk, p, n);
}

static void on_sink_answer(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p,
                           size_t n)
{
    if (n > 0)
        tg_channel_send((struct tg_channel *)sk, p, n);
}


static int on_sink_high(const struct tg_sink *sk) { return tg_channel_high((const struct tg_channel *)sk); }
static int on_sink_listening(const struct tg_sink *sk) { return ((const struct tg_channel *)sk)->open; }

static void on_sink_close(struct tg_sink *sk, uint16_t ws_code, const char *why)
{
    tg_channel_end((struct tg_channel *)sk, ws_code, why);
}

static void on_sink_release(struct tg_sink *sk, struct tg_call *k) { tg_channel_unref((struct tg_channel *)sk); }

static int on_sink_cred(const struct tg_sink *sk, struct tg_auth_cred *out)
{
    const struct tg_auth_cred *c = tg_cred_watch_cred(((const struct tg_channel *)sk)->watch);
    if (c != NULL)
        *out = *c;
    return c != NULL;
}

static const struct tg_sink_ops channel_sink_ops = {
    .message = on_sink_message,
    .answer = on_sink_answer,
    TG_SINK_NO_STREAM, /* only an HTTP exchange shows a status */
    .high = on_sink_high,
    .listening = on_sink_listening,
    .close = on_sink_close,
    .release = on_sink_release,
    .cred = on_sink_cred,
};

/* The credential that opened the channel ended: a legacy SSE session is remembered, so that a
 * POST /messages for it hears why (401) rather than that it is unknown. */
static void on_cred_end(void *ud, const char *why)
{
    struct tg_channel *ch = ud;
    if (!ch->open || ch->conn == NULL)
        return;
    tg_log(TG_LOG_INFO, "channel ended with its credential", "session=%s grant=%s why=\"%s\"", ch->sess->id_str,
           ch->sess->grant, why);
    if (ch->kind == CH_SSE)
        tg_cred_ended_note(ch->sess->srv, ch->sess->id_str, ch->sess->grant, why);
    tg_channel_end(ch, 1008, why);
}

struct tg_channel *tg_channel_new(struct tg_server *srv, struct tg_session *s, enum channel_kind kind,
                                  struct tg_conn *c, const struct tg_auth_cred *cred)
{
    struct tg_channel *ch = tg_xcalloc(1, sizeof(*ch));
    ch->sink.ops = &channel_sink_ops;
    ch->sess = tg_session_ref(s);
    ch->kind = kind;
    ch->conn = c;
    ch->refcnt = 1; /* the client connection's */
    ch->open = 1;
    ch->last_write_ms = uv_now(srv->loop);
    tg_list_insert_tail(&srv->channels, &ch->node);
    s->channel = &ch->sink;
    if (cred != NULL)
        ch->watch = tg_cred_watch_new(srv, cred, on_cred_end, ch);
    return ch;
}

void tg_channel_keep_scopes(struct tg_channel *ch, const struct tg_exchange *x)
{
    ch->scopes = x->scopes != NULL ? tg_xstrdup(x->scopes) : NULL;
    ch->resource_metadata = x->resource_metadata != NULL ? tg_xstrdup(x->resource_metadata) : NULL;
}

void tg_channel_gone(struct tg_channel *ch)
{
    if (!ch->open)
        return;
    ch->open = 0;
    tg_cred_watch_free(ch->watch); /* nothing to end any more */
    ch->watch = NULL;
    ch->conn = NULL;
    struct tg_session *s = ch->sess;
    if (s->live)
        tg_dispatch_end_session(ch->sess->srv, s, TG_END_CLIENT_GONE);
    tg_channel_unref(ch);
}

void tg_channel_on_conn_abort(struct tg_conn *c, void *ex) { tg_channel_gone(ex); }

void tg_channel_end(struct tg_channel *ch, uint16_t ws_code, const char *why)
{
    if (!ch->open || ch->conn == NULL)
        return;
    if (ch->kind == CH_WS) {
        tg_ws_close(ch->ws, ws_code, why); /* the session ends when the close handshake does */
        return;
    }
    struct tg_conn *c = ch->conn;
    c->exchange = NULL; /* ending the stream must not look like the client leaving: we say it */
    c->on_abort = NULL;
    c->on_drain = NULL;
    tg_http_stream_end(c);
    tg_channel_gone(ch); /* drops the connection's reference: ch may be gone now */
}

void tg_channel_on_drain(struct tg_conn *c, void *ex)
{
    struct tg_channel *ch = ex;
    tg_call_session_drained(ch->sess);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

int tg_channel_message(struct tg_channel *ch, const struct tg_exchange *via, const char *body, size_t blen)
{
    struct tg_server *srv = ch->sess->srv;
    struct tg_session *s = ch->sess;
    /* Authorized against the credential's state now: after a reload that took it or past a JWT's
     * exp nothing more goes through, even before the client has seen the channel close. */
    const char *ended = ch->watch != NULL && ch->open ? tg_cred_watch_check(ch->watch, srv->conf) : NULL;
    if (ended != NULL) {
        tg_log(TG_LOG_INFO, "message refused: the credential that opened its channel ended", "session=%s why=\"%s\"",
               s->id_str, ended);
        return 401;
    }
    const struct tg_grant_conf *g = tg_conf_find_grant(srv->conf, s->grant);
    if (!s->live || g == NULL || (size_t)s->upstream >= srv->conf->nupstreams) {
        struct tg_buf e;
        tg_buf_init(&e);
        tg_rpc_error(&e, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        tg_channel_send(ch, e.base, e.len);
        tg_buf_dispose(&e);
        return 404;
    }
    struct tg_exchange x = {0};
    x.srv = srv;
    x.era = TG_ERA_2025;
    snprintf(x.proto, sizeof(x.proto), "%s", s->proto);
    x.grant = g; /* x.who stays NULL: the gate counts and audits the opener, the session's subject */
    x.upstream = s->upstream;
    x.uc = &srv->conf->upstreams[s->upstream];
    x.sess = s;
    x.scopes = via != NULL ? via->scopes : ch->scopes;
    x.resource_metadata = via != NULL ? via->resource_metadata : ch->resource_metadata;
    const struct tg_limits *lim = &srv->conf->limits;
    s->last_active_ms = uv_now(srv->loop);
    size_t i = 0;
    while (i < blen && is_space(body[i]))
        i++;
    int status = 202;
    if (i < blen && body[i] == '[') {
        struct tg_json_doc doc;
        const char *why = NULL;
        if (tg_json_parse(body, blen, lim->json_depth, 1, &doc, &why, NULL) != 0) {
            char msg[160];
            snprintf(msg, sizeof(msg), "Parse error: %s", why);
            struct tg_batch *b = tg_batch_new(srv, NULL, &tg_channel_ref(ch)->sink, 1);
            tg_batch_add_error(b, NULL, 0, TG_RPC_PARSE_ERROR, msg, NULL);
            tg_batch_done(b);
            return 400;
        }
        if (!tg_mcp_batch_allowed(s->proto) || cJSON_GetArraySize(doc.root) == 0 ||
            cJSON_GetArraySize(doc.root) > lim->inflight_per_session) {
            struct tg_batch *b = tg_batch_new(srv, NULL, &tg_channel_ref(ch)->sink, 1);
            tg_batch_add_error(b, NULL, 0, TG_RPC_INVALID_REQUEST,
                               "Invalid Request: batches are only accepted for protocol 2025-03-26, non-empty and "
                               "within limits.inflight_per_session",
                               NULL);
            tg_batch_done(b);
            cJSON_Delete(doc.root);
            return 400;
        }
        struct tg_batch *b = tg_batch_new(srv, NULL, &tg_channel_ref(ch)->sink, 0);
        tg_batch_run(b, &x, doc.root, lim->json_depth);
        cJSON_Delete(doc.root);
        tg_batch_done(b);
        return status;
    }
    struct tg_batch *b = tg_batch_new(srv, NULL, &tg_channel_ref(ch)->sink, 1);
    struct tg_msg m;
    const char *why = NULL;
    int code = tg_msg_decode(body, blen, lim->json_depth, &m, &why);
    if (code != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: %s", code == TG_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request", why);
        tg_batch_add_error(b, m.id_raw, m.id_len, code, msg, NULL);
        status = 400;
    } else if (m.kind == TG_MSG_REQUEST && m.mid == TG_M_INITIALIZE) {
        if (s->initialized || s->init_pending) {
            tg_batch_add_error(b, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                               "Invalid Request: this session is already initialized", NULL);
        } else if (x.uc->init_local) {
            struct tg_buf out;
            tg_buf_init(&out);
            tg_mcp_local_init(s, &m, x.uc, &out);
            tg_batch_add(b, out.base, out.len);
            tg_buf_dispose(&out);
        } else {
            s->init_pending = 1;
            tg_dispatch_message(&x, tg_batch_element(b), &m);
        }
    } else {
        int initialized = m.kind == TG_MSG_NOTIFICATION && m.mid == TG_M_INITIALIZED;
        tg_dispatch_message(&x, tg_batch_element(b), &m);
        /* The upstream's stream of server messages, so that the session hears what the server
         * says on its own. */
        if (initialized && ch->open && s->get_stream == NULL) {
            tg_channel_ref(ch); /* the stream call's */
            if (tg_dispatch_listen(&x, &ch->sink, 1) != 0)
                tg_channel_unref(ch);
        }
    }
    tg_msg_dispose(&m);
    tg_batch_done(b);
    return status;
}

struct tg_session *tg_channel_session_new(struct tg_exchange *x, struct tg_conn *c)
{
    int st = tg_dispatch_session_open(x);
    if (st == 503)
        tg_respond_rpc(c, 503, NULL, NULL, 0, TG_RPC_UPSTREAM, "gateway is shutting down", NULL);
    else if (st != 0)
        tg_respond_rpc(c, 429, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Too many sessions for this grant (limits.sessions_per_grant)", NULL);
    return st == 0 ? x->sess : NULL;
}

void tg_channels_keepalive(struct tg_server *srv)
{
    uint64_t now = uv_now(srv->loop);
    for (struct tg_list *l = srv->channels.next; l != &srv->channels; l = l->next) {
        struct tg_channel *ch = tg_container_of(l, struct tg_channel, node);
        if (ch->kind == CH_SSE && ch->open && ch->conn &&
            now - ch->last_write_ms >= (uint64_t)srv->conf->limits.sse_keepalive_ms) {
            tg_http_stream_write(ch->conn, ": keepalive\n\n", 13);
            ch->last_write_ms = now;
        }
    }
}

void tg_channels_end(struct tg_server *srv, int idle_only)
{
    struct tg_list *l = srv->channels.next;
    while (l != &srv->channels) {
        struct tg_channel *ch = tg_container_of(l, struct tg_channel, node);
        l = l->next;
        if (!ch->open || ch->conn == NULL || (idle_only && ch->sess != NULL && ch->sess->inflight > 0))
            continue;
        tg_channel_end(ch, 1001, "gateway shutting down");
    }
}
