#include "core/router_int.h"


static void replay_free(struct tg_replay *r);

static void replay_write(struct tg_replay *r, struct tg_conn *c, uint64_t after_seq);

void tg_router_free_streams(struct tg_server *srv);

/* Write one SSE "message" event; data lines must not contain raw newlines. */
static void replay_free(struct tg_replay *r)
{
    tg_buf_dispose(&r->gen[0]);
    tg_buf_dispose(&r->gen[1]);
    tg_list_unlink(&r->slink);
    tg_list_unlink(&r->glink);
    tg_session_unref(r->sess);
    free(r);
}

/* A call's client stream just began: give it ids (and prime 2025-11-25 clients to reconnect). */
void stream_open(struct tg_call *k)
{
    struct tg_server *srv = k->srv;
    struct tg_session *s = k->sess;
    if (k->conn == NULL || k->replay != NULL)
        return;
    /* Keep a bounded number of streams per session: the oldest ended ones go first. */
    size_t n = 0;
    for (struct tg_list *l = s->streams.next; l != &s->streams; l = l->next)
        n++;
    for (struct tg_list *l = s->streams.next; n >= REPLAY_MAX_PER_SESSION && l != &s->streams;) {
        struct tg_replay *o = tg_container_of(l, struct tg_replay, slink);
        l = l->next;
        if (o->live == NULL) {
            replay_free(o);
            n--;
        }
    }
    struct tg_replay *r = tg_xcalloc(1, sizeof(*r));
    r->srv = srv;
    r->sess = tg_session_ref(s);
    r->id = ++srv->next_stream_id;
    r->live = k;
    r->last_write_ms = now_ms(srv);
    tg_list_insert_tail(&s->streams, &r->slink);
    tg_list_insert_tail(&srv->streams, &r->glink);
    k->replay = r;
    if (strcmp(s->proto, "2025-11-25") == 0) {
        char prime[64];
        int pn = snprintf(prime, sizeof(prime), "id: %llx-0\nretry: 1000\ndata:\n\n", (unsigned long long)r->id);
        tg_http_stream_write(k->conn, prime, (size_t)pn);
    }
}

void sse_write_message(struct tg_call *k, const char *p, size_t n)
{
    struct tg_replay *r = k->replay;
    if (k->conn == NULL && r == NULL)
        return;
    struct tg_buf b;
    tg_buf_init(&b);
    if (tg_buf_try_reserve(&b, n + 64, 0) != 0)
        abort();
    if (r != NULL) {
        tg_buf_append(&b, "id: ", 4);
        tg_buf_append_hex(&b, r->id);
        tg_buf_append(&b, "-", 1);
        tg_buf_append_u64(&b, ++r->next_seq);
        tg_buf_append(&b, "\n", 1);
    }
    tg_buf_append(&b, "event: message\n", 15);
    /* One data line per line of the message (compact JSON has none: one line, one copy). */
    size_t st = 0;
    for (;;) {
        const char *nl = memchr(p + st, '\n', n - st);
        const char *cr = memchr(p + st, '\r', n - st);
        const char *e = nl && (!cr || nl < cr) ? nl : cr;
        size_t stop = e ? (size_t)(e - p) : n;
        tg_buf_append(&b, "data: ", 6);
        tg_buf_append(&b, p + st, stop - st);
        tg_buf_append(&b, "\n", 1);
        if (e == NULL)
            break;
        st = stop + 1;
    }
    tg_buf_append(&b, "\n", 1);
    if (r != NULL) {
        /* Keep it for a resuming client; the oldest go when the buffer is full. */
        size_t half = (size_t)k->srv->conf->limits.replay_bytes / 2;
        if (r->gen[r->cur].len > half) {
            r->cur ^= 1;
            r->gen[r->cur].len = 0;
            if (r->gen[r->cur].cap > 2 * half + 65536)
                tg_buf_dispose(&r->gen[r->cur]);
        }
        if (half > 0)
            tg_buf_append(&r->gen[r->cur], b.base, b.len);
        r->last_write_ms = now_ms(k->srv);
    }
    if (k->conn)
        tg_http_stream_write(k->conn, b.base, b.len);
    tg_buf_dispose(&b);
    k->srv->metrics.sse_events_relayed++;
    if (k->conn && tg_conn_output_high(k->conn) && k->up) {
        k->srv->metrics.limit_output++;
        tg_upreq_pause(k->up);
    }
}

/* Write the kept events whose sequence number is above after_seq (oldest generation first).
 * Each kept event starts with "id: HEX-SEQ\n" and ends with a blank line. */
static void replay_write(struct tg_replay *r, struct tg_conn *c, uint64_t after_seq)
{
    for (int g = 0; g < 2; g++) {
        struct tg_buf *b = &r->gen[g == 0 ? r->cur ^ 1 : r->cur];
        size_t off = 0;
        while (off < b->len) {
            const char *ev = b->base + off;
            const char *end = memmem(ev, b->len - off, "\n\n", 2);
            size_t n = end ? (size_t)(end - ev) + 2 : b->len - off;
            const char *dash = memchr(ev, '-', n);
            uint64_t seq = dash ? strtoull(dash + 1, NULL, 10) : 0;
            if (seq > after_seq)
                tg_http_stream_write(c, ev, n);
            off += n;
        }
    }
}

/* Give a live stream's call a (new) client connection and replay what it missed. */
void attach_stream(struct tg_call *k, struct tg_conn *c, uint64_t after_seq)
{
    struct tg_replay *r = k ? k->replay : NULL;
    tg_http_stream_begin(c, 200, NULL, "text/event-stream");
    if (r != NULL)
        replay_write(r, c, after_seq);
    k->conn = c;
    if (r != NULL)
        r->detached_at = 0;
    c->exchange = k;
    c->on_abort = on_client_abort;
    c->on_drain = on_client_drain;
    if (k->up)
        tg_upreq_resume(k->up);
}

/* GET with Last-Event-ID: "STREAM-SEQ" names a stream of this session and the last event seen. */
void resume_stream(struct tg_server *srv, struct tg_conn *c, struct tg_session *s, struct tg_slice last)
{
    char buf[64];
    if (last.len == 0 || last.len >= sizeof(buf)) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: malformed Last-Event-ID", NULL);
        return;
    }
    memcpy(buf, last.ptr, last.len);
    buf[last.len] = '\0';
    /* Exactly HEX "-" DECIMAL, as we write them: no blanks, signs, prefixes or empty parts. */
    char *dash = strchr(buf, '-');
    int ok = dash != NULL && dash != buf && dash[1] != '\0' && dash - buf <= 16 && strlen(dash + 1) <= 19;
    for (char *q = buf; ok && q < dash; q++)
        ok = (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f');
    for (char *q = dash ? dash + 1 : buf; ok && *q; q++)
        ok = *q >= '0' && *q <= '9';
    unsigned long long sid = ok ? strtoull(buf, NULL, 16) : 0;
    unsigned long long seq = ok ? strtoull(dash + 1, NULL, 10) : 0;
    if (!ok) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: malformed Last-Event-ID", NULL);
        return;
    }
    for (struct tg_list *l = s->streams.next; l != &s->streams; l = l->next) {
        struct tg_replay *r = tg_container_of(l, struct tg_replay, slink);
        if (r->id != sid)
            continue;
        if (r->live != NULL && r->live->conn != NULL) {
            respond_rpc(c, 409, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Conflict: this stream has a client", NULL);
            return;
        }
        if (r->live != NULL) {
            attach_stream(r->live, c, seq);
            return;
        }
        /* The stream ended while the client was away: replay the rest, then end it. */
        tg_http_stream_begin(c, 200, NULL, "text/event-stream");
        replay_write(r, c, seq);
        tg_http_stream_end(c);
        return;
    }
    respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                "Not Found: this stream cannot be resumed (unknown or expired)", NULL);
}

/* Keepalive comments on idle client streams; streams that ended long ago, and GET streams
 * whose client never came back, are let go. */
void streams_tick(struct tg_server *srv)
{
    uint64_t now = now_ms(srv);
    uint64_t ka = (uint64_t)srv->conf->limits.sse_keepalive_ms;
    struct tg_list *l = srv->streams.next;
    while (l != &srv->streams) {
        struct tg_replay *r = tg_container_of(l, struct tg_replay, glink);
        l = l->next;
        struct tg_call *k = r->live;
        if (k == NULL) {
            if (now - r->ended_at >= REPLAY_KEEP_MS)
                replay_free(r);
            continue;
        }
        if (k->conn != NULL && now - r->last_write_ms >= ka) {
            tg_http_stream_write(k->conn, ": keepalive\n\n", 13);
            r->last_write_ms = now;
        } else if (k->conn == NULL && r->detached_at != 0 && now - r->detached_at >= REPLAY_KEEP_MS &&
                   k->kind == KIND_GET) {
            abandon(k);
            call_free(k);
        }
    }
}

void tg_router_free_streams(struct tg_server *srv)
{
    abort_waiting(srv);
    while (!tg_list_empty(&srv->streams)) {
        struct tg_replay *r = tg_container_of(srv->streams.next, struct tg_replay, glink);
        if (r->live != NULL)
            r->live->replay = NULL;
        replay_free(r);
    }
}
