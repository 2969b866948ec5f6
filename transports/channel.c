#include "core/router_int.h"


void tg_router_channel_counts(struct tg_server *srv, size_t *sse, size_t *ws);

static void channel_open_upstream_stream(struct tg_server *srv, struct tg_channel *ch);

static int end_stream_one(struct tg_session *s, void *arg);

void tg_router_end_streams(struct tg_server *srv);

/* One JSON-RPC message to the client of a channel session. */
void channel_send(struct tg_channel *ch, const char *p, size_t n)
{
    if (!ch->open || ch->conn == NULL)
        return;
    ch->last_write_ms = uv_now(ch->srv->loop);
    if (ch->kind == CH_WS) {
        tg_ws_send_text(ch->ws, p, n);
        return;
    }
    struct tg_buf b;
    tg_buf_init(&b);
    if (tg_buf_try_reserve(&b, n + 32, 0) != 0)
        abort();
    tg_buf_appends(&b, "event: message\n");
    size_t st = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || p[i] == '\n' || p[i] == '\r') {
            tg_buf_appends(&b, "data: ");
            tg_buf_append(&b, p + st, i - st);
            tg_buf_append(&b, "\n", 1);
            st = i + 1;
        }
    tg_buf_append(&b, "\n", 1);
    tg_http_stream_write(ch->conn, b.base, b.len);
    tg_buf_dispose(&b);
    ch->srv->metrics.sse_events_relayed++;
}

size_t channel_pending(const struct tg_channel *ch)
{
    if (!ch->open || ch->conn == NULL)
        return 0;
    return ch->kind == CH_WS ? tg_ws_pending(ch->ws) : ch->conn->out_pending;
}

void tg_router_channel_counts(struct tg_server *srv, size_t *sse, size_t *ws)
{
    *sse = *ws = 0;
    for (struct tg_list *l = srv->channels.next; l != &srv->channels; l = l->next) {
        struct tg_channel *ch = tg_container_of(l, struct tg_channel, link);
        if (ch->open)
            (*(ch->kind == CH_WS ? ws : sse))++;
    }
}

/* ---- channels: legacy HTTP+SSE and WebSocket clients ---------------------------------- */

/* The raw value of a query parameter (no percent-decoding: session ids and tokens are plain). */
struct tg_slice query_param(struct tg_slice q, const char *name)
{
    size_t nl = strlen(name);
    size_t i = (q.len > 0 && q.ptr[0] == '?') ? 1 : 0;
    while (i < q.len) {
        size_t e = i;
        while (e < q.len && q.ptr[e] != '&')
            e++;
        if (e - i > nl && memcmp(q.ptr + i, name, nl) == 0 && q.ptr[i + nl] == '=')
            return tg_slice_of(q.ptr + i + nl + 1, e - i - nl - 1);
        i = e + 1;
    }
    return TG_SLICE_NULL;
}

void channel_unref(struct tg_channel *ch)
{
    if (--ch->refcnt > 0)
        return;
    tg_list_unlink(&ch->link);
    if (ch->sess->channel == ch)
        ch->sess->channel = NULL;
    tg_session_unref(ch->sess);
    tg_ws_free(ch->ws);
    free(ch);
}

struct tg_channel *channel_new(struct tg_server *srv, struct tg_session *s, enum channel_kind kind,
                                      struct tg_conn *c)
{
    struct tg_channel *ch = tg_xcalloc(1, sizeof(*ch));
    ch->srv = srv;
    ch->sess = tg_session_ref(s);
    ch->kind = kind;
    ch->conn = c;
    ch->refcnt = 1; /* the client connection's */
    ch->open = 1;
    ch->last_write_ms = uv_now(srv->loop);
    tg_list_insert_tail(&srv->channels, &ch->link);
    s->channel = ch;
    return ch;
}

/* The client went away: the session ends with it (upstream session too). */
void channel_gone(struct tg_channel *ch)
{
    if (!ch->open)
        return;
    ch->open = 0;
    ch->conn = NULL;
    struct tg_session *s = ch->sess;
    struct tg_server *srv = ch->srv;
    /* Calls still waiting for a human are withdrawn: nobody is there for their answer. */
    for (struct tg_list *l = s->calls.next; l != &s->calls;) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        l = l->next;
        if (k->parked)
            approval_finish(k, 0, "client", "cancelled");
    }
    if (s->live) {
        delete_upstream_session(srv, s);
        end_get_stream(s);
        end_session_calls(s);
        tg_session_remove(srv->sessions, s);
    }
    channel_unref(ch);
}

void on_channel_conn_abort(struct tg_conn *c, void *ex) { channel_gone(ex); }

/* The gateway ends a channel (shutdown, upstream gone): close the client's side, then the session. */
void channel_end(struct tg_channel *ch, uint16_t ws_code, const char *why)
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
    ch->refcnt++;
    tg_http_stream_end(c);
    channel_gone(ch);
    channel_unref(ch);
}

void on_channel_drain(struct tg_conn *c, void *ex)
{
    struct tg_channel *ch = ex;
    link_pause(ch->sess, 0);
    for (struct tg_list *l = ch->sess->calls.next; l != &ch->sess->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->up)
            tg_upreq_resume(k->up);
    }
}

/* The upstream's GET stream, so that a channel session hears what the server says on its own. */
static void channel_open_upstream_stream(struct tg_server *srv, struct tg_channel *ch)
{
    struct tg_session *s = ch->sess;
    const struct tg_upstream_conf *uc = tg_upstream_conf(srv->upstreams[s->upstream]);
    if (uc->init_local || uc->transport != TG_UP_STREAMABLE || s->get_stream != NULL || !ch->open)
        return;
    struct tg_call *k = call_new(srv, s, NULL, KIND_GET);
    k->channel = ch;
    ch->refcnt++;
    s->get_stream = k;
    call_send(k, "GET", NULL, 0, 1, 0);
}

/* One message (or array) from a channel client. Returns the HTTP status for a POST /messages. */
int channel_message(struct tg_server *srv, struct tg_channel *ch, const char *body, size_t blen)
{
    struct tg_session *s = ch->sess;
    const struct tg_grant_conf *g = tg_conf_find_grant(srv->conf, s->grant);
    if (!s->live || g == NULL || (size_t)s->upstream >= srv->conf->nupstreams) {
        struct tg_buf e;
        tg_buf_init(&e);
        tg_rpc_error(&e, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        channel_send(ch, e.base, e.len);
        tg_buf_dispose(&e);
        return 404;
    }
    struct route rt = {s->upstream, &srv->conf->upstreams[s->upstream]};
    const struct tg_limits *lim = &srv->conf->limits;
    s->last_active_ms = now_ms(srv);
    size_t i = 0;
    while (i < blen && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    struct tg_batch *b = tg_xcalloc(1, sizeof(*b));
    b->srv = srv;
    b->pending = 1;
    b->channel = ch;
    ch->refcnt++;
    tg_buf_init(&b->out);
    int status = 202;
    if (i < blen && body[i] == '[') {
        struct tg_json_doc doc;
        const char *why = NULL;
        if (tg_json_parse(body, blen, lim->json_depth, 1, &doc, &why, NULL) != 0) {
            char msg[160];
            snprintf(msg, sizeof(msg), "Parse error: %s", why);
            b->single = 1;
            batch_add_error(b, NULL, 0, TG_RPC_PARSE_ERROR, msg, NULL);
            status = 400;
        } else if (strcmp(s->proto, "2025-03-26") != 0 || cJSON_GetArraySize(doc.root) == 0 ||
                   cJSON_GetArraySize(doc.root) > lim->inflight_per_session) {
            b->single = 1;
            batch_add_error(b, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Invalid Request: batches are only accepted for protocol 2025-03-26, non-empty and "
                            "within limits.inflight_per_session",
                            NULL);
            status = 400;
        } else {
            struct tg_buf el;
            tg_buf_init(&el);
            for (cJSON *e = doc.root->child; e; e = e->next) {
                el.len = 0;
                tg_json_write(&el, e);
                struct tg_msg m;
                int code = tg_msg_decode(el.base, el.len, lim->json_depth, &m, &why);
                if (code != 0)
                    batch_add_error(b, m.id_raw, m.id_len, code, why, NULL);
                else if (m.kind == TG_MSG_REQUEST && strcmp(m.method, "initialize") == 0)
                    batch_add_error(b, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                                    "Invalid Request: initialize cannot be batched", NULL);
                else
                    dispatch_message(srv, NULL, b, &rt, g, s, &m);
                tg_msg_dispose(&m);
            }
            tg_buf_dispose(&el);
        }
        cJSON_Delete(doc.root);
        batch_done_one(b);
        return status;
    }
    b->single = 1;
    struct tg_msg m;
    const char *why = NULL;
    int code = tg_msg_decode(body, blen, lim->json_depth, &m, &why);
    if (code != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: %s", code == TG_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request", why);
        batch_add_error(b, m.id_raw, m.id_len, code, msg, NULL);
        status = 400;
    } else if (m.kind == TG_MSG_REQUEST && strcmp(m.method, "initialize") == 0) {
        if (s->initialized || s->init_pending) {
            batch_add_error(b, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                            "Invalid Request: this session is already initialized", NULL);
        } else if (rt.uc->init_local) {
            struct tg_buf out;
            tg_buf_init(&out);
            local_init_result(s, &m, rt.uc, &out);
            batch_add(b, out.base, out.len);
            tg_buf_dispose(&out);
        } else {
            s->init_pending = 1;
            dispatch_message(srv, NULL, b, &rt, g, s, &m);
        }
    } else {
        int initialized = m.kind == TG_MSG_NOTIFICATION && strcmp(m.method, "notifications/initialized") == 0;
        dispatch_message(srv, NULL, b, &rt, g, s, &m);
        if (initialized)
            channel_open_upstream_stream(srv, ch);
    }
    tg_msg_dispose(&m);
    batch_done_one(b);
    return status;
}

struct tg_session *new_channel_session(struct tg_server *srv, struct tg_conn *c, struct route *rt,
                                              const struct tg_grant_conf *g)
{
    if (srv->draining) {
        respond_rpc(c, 503, NULL, NULL, 0, TG_RPC_UPSTREAM, "gateway is shutting down", NULL);
        return NULL;
    }
    size_t cap = (size_t)(g->max_sessions > 0 ? g->max_sessions : srv->conf->limits.sessions_per_grant);
    if (tg_session_count_for_grant(srv->sessions, g->name) >= cap) {
        srv->metrics.limit_sessions++;
        respond_rpc(c, 429, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Too many sessions for this grant (limits.sessions_per_grant)", NULL);
        return NULL;
    }
    struct tg_session *s = tg_session_create(srv->sessions, g->name, rt->upstream);
    s->srv = srv;
    s->last_active_ms = now_ms(srv);
    srv->metrics.sessions_created++;
    return s;
}

/* Keepalive comments on idle legacy SSE streams, so proxies and clients keep them open. */
void channels_keepalive(struct tg_server *srv)
{
    uint64_t now = uv_now(srv->loop);
    for (struct tg_list *l = srv->channels.next; l != &srv->channels; l = l->next) {
        struct tg_channel *ch = tg_container_of(l, struct tg_channel, link);
        if (ch->kind == CH_SSE && ch->open && ch->conn &&
            now - ch->last_write_ms >= (uint64_t)srv->conf->limits.sse_keepalive_ms) {
            tg_http_stream_write(ch->conn, ": keepalive\n\n", 13);
            ch->last_write_ms = now;
        }
    }
}

static int end_stream_one(struct tg_session *s, void *arg)
{
    (void)arg;
    end_get_stream(s);
    return 0;
}

void tg_router_end_streams(struct tg_server *srv)
{
    tg_session_sweep(srv->sessions, end_stream_one, srv);
    /* Channel clients are told the gateway is going away. */
    struct tg_list *l = srv->channels.next;
    while (l != &srv->channels) {
        struct tg_channel *ch = tg_container_of(l, struct tg_channel, link);
        l = l->next;
        if (!ch->open || ch->conn == NULL)
            continue;
        channel_end(ch, 1001, "gateway shutting down");
    }
}
