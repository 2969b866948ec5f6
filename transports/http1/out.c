/* The HTTP/1.1 write path: answers with Content-Length, chunked streams, the cork that
 * gathers a stream's writes for one write(2) per loop iteration, TLS encryption on the way
 * out, raw writes on upgraded connections, and the output accounting behind the high-water
 * mark. The connection itself (reading, parsing, phase, deferred work) is in conn.c. */
#include "transports/http1/internal.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/log.h"
#include "core/wire/msg.h"
#include "core/wire/tls.h"

/* A uv_write in flight with the bytes it writes, made by tg__http_send_wire(). Owner: libuv
 * until on_write(), which frees both. */
struct write_req {
    uv_write_t req;
    struct tg_conn *conn;
    char *base;
    size_t len;
};

const char *tg_http_status_text(int status)
{
    switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 303: return "See Other";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    }
    return "Unknown";
}

/* log.access: the exchange that ends now, one line. The path goes without its query string
 * (?access_token=… on /ws, sessionId on /messages), and nothing of a credential is logged. */
void tg__http_access_line_write(struct tg_conn *c, int status)
{
    struct tg_http_scratch *x = tg_http_scratch_of(c);
    if (x == NULL || x->log_start_ms == 0)
        return;
    struct tg_slice url = tg_slice_of(c->req->head.base ? c->req->head.base + c->req->url_off : "", c->req->url_len);
    const char *q = memchr(url.ptr, '?', url.len);
    if (q != NULL)
        url.len = (size_t)(q - url.ptr);
    char path[300], sess[64];
    tg_log(TG_LOG_INFO, "request", "conn=%llu peer=%s method=%s path=%s status=%d bytes=%llu ms=%llu grant=%s subject=%s "
           "session=%s upstream=%s",
           (unsigned long long)c->id, tg_conn_peer(c), llhttp_method_name((llhttp_method_t)c->req->method),
           tg_log_esc(path, sizeof(path), url), status, (unsigned long long)x->log_bytes,
           (unsigned long long)(uv_now(c->env->loop) - x->log_start_ms), x->log_grant[0] ? x->log_grant : "-",
           x->log_subject[0] ? x->log_subject : "-",
           tg_log_esc(sess, sizeof(sess), tg_slice_cstr(x->log_session[0] ? x->log_session : "-")),
           x->log_upstream[0] ? x->log_upstream : "-");
    x->log_start_ms = 0;
}

/* ---- writing ------------------------------------------------------------------ */

/* Every byte queued to a client counts toward its connection's mark and the process's total. */
static void out_add(struct tg_conn *c, size_t n)
{
    c->out_pending += n;
    c->env->metrics->output_buffered += n;
}

void tg__http_out_sub(struct tg_conn *c, size_t n)
{
    c->out_pending -= n;
    c->env->metrics->output_buffered -= n;
}

int tg_conn_output_high(const struct tg_conn *c)
{
    const struct tg_limits *l = c->env->limits;
    if (c->out_pending > (size_t)l->output_high_water)
        return 1;
    /* The total counts only against connections that hold some of it, so a quiet one is served. */
    return c->out_pending > 0 && c->env->metrics->output_buffered > (size_t)l->output_total_bytes;
}

int tg__http_out_drained(const struct tg_conn *c)
{
    const struct tg_limits *l = c->env->limits;
    return c->out_pending < (size_t)l->output_high_water / 2 &&
           (c->out_pending == 0 || c->env->metrics->output_buffered <= (size_t)l->output_total_bytes / 2);
}

/* A watcher of this connection's backlog (see on_watch in the header): called once it drains. */
static void watch_check(struct tg_conn *c)
{
    if (c->on_watch && tg__http_out_drained(c)) {
        tg_conn_cb w = c->on_watch;
        c->on_watch = NULL;
        w(c, c->watch_ud);
    }
}

/* The ciphertext queued to the socket is over the mark (the plaintext waiting does not count
 * here: it is what the pump turns into ciphertext). */
static int wire_high(const struct tg_conn *c)
{
    return c->out_pending - tg__http_tls_waiting(c) > (size_t)c->env->limits->output_high_water;
}

/* Output fell: resume whoever waits for it. */
static void drained(struct tg_conn *c)
{
    if (c->phase < TG_CONN_CLOSING && tg__http_tls_waiting(c) > 0 && !wire_high(c))
        tg__http_tls_pump(c);
    if (c->phase >= TG_CONN_CLOSING || !tg__http_out_drained(c))
        return;
    if (c->on_drain)
        c->on_drain(c, c->exchange);
    if (c->wait_drain && c->phase < TG_CONN_CLOSING) {
        c->wait_drain = 0;
        tg__http_pend(c, TG_PEND_INPUT);
    }
    if (c->phase == TG_CONN_UPGRADED && c->read_stopped && c->up != NULL && c->up->data != NULL) {
        /* an upgraded protocol paused its reads on this mark: let it see its input again */
        tg__http_pend(c, TG_PEND_INPUT);
    }
    watch_check(c);
}

static void on_write(uv_write_t *req, int status)
{
    struct write_req *w = tg_container_of(req, struct write_req, req);
    struct tg_conn *c = w->conn;
    tg__http_out_sub(c, w->len);
    free(w->base);
    free(w);
    if (status < 0) {
        if (c->phase < TG_CONN_CLOSING)
            tg_conn_close(c, "write failed");
        return;
    }
    drained(c);
}

static void send_now(struct tg_conn *c, struct tg_buf *b);

/* The least room a full cork makes when a small write finds it full: a burst is on its way. */
#define STREAM_CORK (8u << 10)

/* Room for a stream's head (status line, session id, cache and chunked headers), reserved with
 * the room the last cork held, so that the burst behind it needs no realloc. */
#define STREAM_HEAD_ROOM 512u

/* The largest first room a cork takes from the last one's size. */
#define CORK_LAST_MAX (128u << 10)

/* The cork with room for n more bytes. The first write of an iteration takes room for as much
 * as the connection's last cork held: a stream relaying bursts gets one allocation per burst,
 * not a realloc (and a copy of everything gathered) each time it doubles, while a stream of
 * lone events keeps taking what one needs. A write that finds the cork full makes room for a
 * burst, so the ones after it are only copied. */
static struct tg_buf *cork_room(struct tg_conn *c, size_t n)
{
    struct tg_buf *k = &c->cork;
    size_t want = n;
    if (k->cap == 0)
        want = n > c->cork_last ? n : c->cork_last;
    else if (k->cap - k->len < n && n < STREAM_CORK)
        want = STREAM_CORK;
    if (tg_buf_try_reserve(k, want, 0) != 0)
        abort();
    return k;
}

/* Bytes were added to the cork: count them as output, and have it written at the end of this
 * loop iteration. */
static void cork_grew(struct tg_conn *c)
{
    out_add(c, c->cork.len - c->out_pending_corked);
    c->out_pending_corked = c->cork.len;
    if (!tg_list_linked(&c->cork_node))
        tg_list_insert_tail(&c->env->corked, &c->cork_node);
}

/* A chunked stream's joined writes (tg_http_stream_write_joined) of one loop iteration, one after
 * another, go out as one chunk, not one chunk per event: its size is not known until the cork is
 * written or another write comes, so the chunk starts with room for CHUNK_DIGITS hex digits and
 * they are filled in, with leading zeros (RFC 9112 7.1: chunk-size is 1*HEXDIG), when the chunk
 * closes. The client parses one chunk header per burst, as it does behind nginx, instead of one
 * per event. */
#define CHUNK_DIGITS 6
#define CHUNK_HEAD (CHUNK_DIGITS + 2)
#define CHUNK_MAX (((size_t)1 << (4 * CHUNK_DIGITS)) - 1)
#define CHUNK_HEAD_TEXT "000000\r\n"
_Static_assert(sizeof(CHUNK_HEAD_TEXT) - 1 == CHUNK_HEAD, "the placeholder has CHUNK_DIGITS digits");

/* Write the open chunk's size into its head and end it. Before anything else joins the cork,
 * and before the cork is written. */
static void close_chunk(struct tg_conn *c)
{
    if (c->chunk_open == 0)
        return;
    struct tg_buf *k = &c->cork;
    char *head = k->base + c->chunk_open - 1;
    size_t n = k->len - (c->chunk_open - 1) - CHUNK_HEAD;
    c->chunk_open = 0;
    for (int i = CHUNK_DIGITS - 1; i >= 0; i--, n >>= 4)
        head[i] = "0123456789abcdef"[n & 15];
    tg_buf_append(k, "\r\n", 2);
    cork_grew(c);
}

/* Takes the storage of b (which is left empty): plaintext, encrypted first on a TLS connection.
 * Streams (SSE answers, upgraded connections) are corked: what they write during one loop
 * iteration is gathered and written once at its end, so a burst of relayed events costs one
 * write(2) (and one TLS pass) instead of one per event. */
void tg__http_send_owned(struct tg_conn *c, struct tg_buf *b)
{
    if (c->phase >= TG_CONN_CLOSING || b->len == 0) {
        tg_buf_dispose(b);
        return;
    }
    tg__http_log_sent(c, b->len);
    if (c->phase == TG_CONN_STREAMING || c->phase == TG_CONN_UPGRADED) {
        close_chunk(c);
        if (c->cork.len == 0 && c->cork.cap == 0) {
            c->cork = *b; /* take the buffer as it is: no copy for the first write of a burst */
            tg_buf_init(b);
        } else {
            tg_buf_append(&c->cork, b->base, b->len);
            tg_buf_dispose(b);
        }
        cork_grew(c);
        return;
    }
    if (c->cork.len > 0)
        tg__http_flush_cork(c); /* keep the order */
    send_now(c, b);
}

/* Write what the cork gathered. No callback runs here: this is called inside respond and
 * close paths too. */
void tg__http_flush_cork(struct tg_conn *c)
{
    close_chunk(c);
    tg_list_unlink(&c->cork_node);
    if (c->cork.len == 0)
        return;
    struct tg_buf b = c->cork;
    tg_buf_init(&c->cork);
    c->cork_last = b.len < CORK_LAST_MAX ? (uint32_t)b.len : CORK_LAST_MAX;
    if (b.cap - b.len > (16u << 10) && b.cap / 2 > b.len) {
        /* A burst smaller than the last: the room it did not use is not held while the write
         * waits on a slow client (only the bytes count against the output limits). */
        char *q = realloc(b.base, b.len);
        if (q != NULL) {
            b.base = q;
            b.cap = b.len;
        }
    }
    tg__http_out_sub(c, c->out_pending_corked);
    c->out_pending_corked = 0;
    send_now(c, &b);
}

void tg_http_flush(struct tg_conn *c)
{
    tg__http_flush_cork(c);
    /* A direct write that took everything completes no write request: say "drained" here, or
     * an upstream paused while this was corked would never be resumed. */
    drained(c);
}

void tg_http_flush_corked(struct tg_http_env *env)
{
    while (!tg_list_empty(&env->corked))
        tg_http_flush(tg_container_of(env->corked.next, struct tg_conn, cork_node));
}

/* Encrypting is the one step of a big answer to a TLS client that costs real CPU (and a wire copy
 * of it): past one slice, the plaintext waits in tls_plain (counted as output) and goes a slice
 * per round of the loop while the connection is under its mark, so other clients are served
 * between slices. */
#define TLS_SLICE (256u << 10)

void tg__http_tls_backlog_free(struct tg_conn *c)
{
    if (c->tls_plain == NULL)
        return;
    tg_buf_dispose(&c->tls_plain->buf);
    free(c->tls_plain);
    c->tls_plain = NULL;
}

void tg__http_tls_pump(struct tg_conn *c)
{
    for (int i = 0; i < 4 && c->phase < TG_CONN_CLOSING && tg__http_tls_waiting(c) > 0; i++) {
        if (wire_high(c))
            return; /* drained() pumps again */
        size_t n = tg__http_tls_waiting(c);
        if (n > TLS_SLICE)
            n = TLS_SLICE;
        struct tg_buf wire;
        tg_buf_init(&wire);
        int r = tg_tls_write(c->tls, c->tls_plain->buf.base + c->tls_plain->off, n, &wire);
        c->tls_plain->off += n;
        tg__http_out_sub(c, n);
        if (r != 0) {
            tg_buf_dispose(&wire);
            tg_conn_close(c, "TLS write failed");
            return;
        }
        tg__http_send_wire(c, &wire);
    }
    if (c->phase >= TG_CONN_CLOSING)
        return;
    if (tg__http_tls_waiting(c) > 0) {
        if (!wire_high(c))
            tg__http_pend(c, TG_PEND_TLS); /* the next round, after other connections' work */
        return;
    }
    tg__http_tls_backlog_free(c);
}

static void send_now(struct tg_conn *c, struct tg_buf *b)
{
    if (c->phase >= TG_CONN_CLOSING || b->len == 0) {
        tg_buf_dispose(b);
        return;
    }
    struct tg_buf wire;
    if (c->tls != NULL && (b->len > TLS_SLICE || tg__http_tls_waiting(c) > 0)) {
        out_add(c, b->len);
        if (c->tls_plain == NULL) {
            c->tls_plain = tg_xmalloc(sizeof(*c->tls_plain));
            c->tls_plain->buf = *b; /* take it as it is */
            c->tls_plain->off = 0;
            tg_buf_init(b);
        } else {
            tg_buf_append(&c->tls_plain->buf, b->base, b->len); /* behind what waits: the order holds */
            tg_buf_dispose(b);
        }
        tg__http_tls_pump(c);
        return;
    }
    if (c->tls != NULL) {
        tg_buf_init(&wire);
        if (tg_tls_write(c->tls, b->base, b->len, &wire) != 0) {
            tg_buf_dispose(b);
            tg_buf_dispose(&wire);
            tg_conn_close(c, "TLS write failed");
            return;
        }
        tg_buf_dispose(b);
    } else {
        wire = *b;
        tg_buf_init(b);
    }
    tg__http_send_wire(c, &wire);
}

/* Queue wire[off..] (taking its storage) behind what is queued already. */
static void queue_wire(struct tg_conn *c, struct tg_buf *wire, size_t off)
{
    struct write_req *w = tg_xmalloc(sizeof(*w));
    w->conn = c;
    w->len = wire->len - off;
    w->base = tg_buf_release(wire);
    uv_buf_t ub = uv_buf_init(w->base + off, (unsigned)w->len);
    out_add(c, w->len);
    int r = uv_write(&w->req, (uv_stream_t *)&c->tcp, &ub, 1, on_write);
    if (r != 0) {
        tg__http_out_sub(c, w->len);
        free(w->base);
        free(w);
        tg_conn_close(c, "write failed");
    }
}

/* A plain-TCP answer whose body is big: the head and the body go out with one writev, and what
 * the socket does not take now stays in the body's own storage. A 50 MiB answer is not copied
 * again on its way out (the copy and its page faults held the loop for tens of ms). */
static void send_head_body(struct tg_conn *c, struct tg_buf *head, struct tg_buf *body)
{
    size_t off = 0;
    if (c->out_pending == 0) {
        uv_buf_t ub[2] = {uv_buf_init(head->base, (unsigned)head->len), uv_buf_init(body->base, (unsigned)body->len)};
        int n = uv_try_write((uv_stream_t *)&c->tcp, ub, 2);
        if (n < 0 && n != UV_EAGAIN) {
            tg_buf_dispose(head);
            tg_buf_dispose(body);
            tg_conn_close(c, "write failed");
            return;
        }
        off = n > 0 ? (size_t)n : 0;
    }
    size_t head_len = head->len;
    if (off < head_len)
        queue_wire(c, head, off);
    tg_buf_dispose(head);
    off = off > head_len ? off - head_len : 0;
    if (c->phase < TG_CONN_CLOSING && off < body->len)
        queue_wire(c, body, off);
    tg_buf_dispose(body);
}

/* Takes the storage of wire: bytes that go to the socket as they are. */
void tg__http_send_wire(struct tg_conn *c, struct tg_buf *wire_in)
{
    struct tg_buf wire = *wire_in;
    tg_buf_init(wire_in);
    if (c->phase >= TG_CONN_CLOSING || wire.len == 0) {
        tg_buf_dispose(&wire);
        return;
    }
    /* Write at once when nothing is queued: most answers fit in the socket buffer, and this
     * skips a write request, its allocation and libuv's epoll_ctl after each queued write. */
    size_t off = 0;
    if (c->out_pending == 0) {
        uv_buf_t ub = uv_buf_init(wire.base, (unsigned)wire.len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &ub, 1);
        if (n < 0 && n != UV_EAGAIN) {
            tg_buf_dispose(&wire);
            tg_conn_close(c, "write failed");
            return;
        }
        if (n > 0)
            off = (size_t)n;
        if (off == wire.len) {
            tg_buf_dispose(&wire);
            return;
        }
    }
    queue_wire(c, &wire, off);
}

static void append_head(struct tg_conn *c, struct tg_buf *b, int status, const char *extra, const char *ctype)
{
    if (c->req != NULL)
        tg_http_scratch_of(c)->log_status = status;
    /* Appends, not printf: this runs for every answer. */
    tg_buf_append(b, "HTTP/1.1 ", 9);
    tg_buf_append_u64(b, (uint64_t)(status < 0 ? 0 : status));
    tg_buf_append(b, " ", 1);
    tg_buf_appends(b, tg_http_status_text(status));
    tg_buf_append(b, "\r\n", 2);
    if (ctype) {
        tg_buf_append(b, "Content-Type: ", 14);
        tg_buf_appends(b, ctype);
        tg_buf_append(b, "\r\n", 2);
    }
    if (extra)
        tg_buf_appends(b, extra);
    if (c->close_after || !c->req->keep_alive || *c->env->draining)
        tg_buf_appends(b, "Connection: close\r\n");
    else if (c->req->http_minor == 0)
        tg_buf_appends(b, "Connection: keep-alive\r\n");
}

void tg_http_respond(struct tg_conn *c, int status, const char *extra, const char *ctype, const char *body, size_t len)
{
    if (c->phase >= TG_CONN_CLOSING)
        return;
    struct tg_metrics *m = c->env->metrics;
    if (status >= 100 && status < 600)
        m->http_status[status / 100]++;
    struct tg_buf b;
    tg_buf_init(&b);
    if (tg_buf_try_reserve(&b, len + 256, 0) != 0)
        abort();
    append_head(c, &b, status, extra, ctype);
    tg_buf_append(&b, "Content-Length: ", 16);
    tg_buf_append_u64(&b, len);
    tg_buf_append(&b, "\r\n\r\n", 4);
    if (c->req->method != HTTP_HEAD) /* a HEAD answer has the length of the body, not the body */
        tg_buf_append(&b, body, len);
    tg__http_send_owned(c, &b);
    tg__http_finish_request(c);
}

void tg_http_respond_owned(struct tg_conn *c, int status, const char *extra, const char *ctype, struct tg_buf *body)
{
    if (body->len < 65536 || c->req->method == HTTP_HEAD || c->cork.len > 0 || c->phase >= TG_CONN_CLOSING) {
        tg_http_respond(c, status, extra, ctype, body->base ? body->base : "", body->len);
        tg_buf_dispose(body);
        return;
    }
    struct tg_metrics *m = c->env->metrics;
    if (status >= 100 && status < 600)
        m->http_status[status / 100]++;
    struct tg_buf head;
    tg_buf_init(&head);
    append_head(c, &head, status, extra, ctype);
    tg_buf_append(&head, "Content-Length: ", 16);
    tg_buf_append_u64(&head, body->len);
    tg_buf_append(&head, "\r\n\r\n", 4);
    tg__http_log_sent(c, head.len + body->len);
    if (c->tls == NULL) {
        send_head_body(c, &head, body);
    } else {
        send_now(c, &head); /* then the body joins tls_plain as it is, to be encrypted in slices */
        send_now(c, body);
    }
    tg__http_finish_request(c);
}

void tg_http_respond_rpc_error(struct tg_conn *c, int status, const char *extra, int code, const char *msg)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_rpc_error(&b, NULL, 0, code, msg, NULL);
    tg_http_respond(c, status, extra, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

void tg_http_stream_begin(struct tg_conn *c, int status, const char *extra, const char *ctype)
{
    if (c->phase >= TG_CONN_CLOSING)
        return;
    if (c->req->http_minor == 0)
        c->close_after = 1; /* HTTP/1.0 has no chunked encoding: the stream ends with the connection */
    c->env->metrics->http_status[status / 100]++;
    /* The head goes into the cork, like the stream's events: the first burst (an upstream's SSE
     * answer often comes in one read) leaves with it in one write at the end of this iteration
     * (the loop's check and prepare phases write every cork), not in a write of its own. */
    tg__http_set_phase(c, TG_CONN_STREAMING);
    close_chunk(c);
    struct tg_buf *k = cork_room(c, STREAM_HEAD_ROOM);
    size_t before = k->len;
    append_head(c, k, status, extra, ctype);
    tg_buf_appends(k, "Cache-Control: no-cache\r\n");
    if (c->req->http_minor != 0)
        tg_buf_appends(k, "Transfer-Encoding: chunked\r\n");
    tg_buf_appends(k, "\r\n");
    tg__http_log_sent(c, k->len - before);
    cork_grew(c);
}

static void stream_write(struct tg_conn *c, const char *p, size_t n, int joined)
{
    if (c->phase != TG_CONN_STREAMING || n == 0)
        return;
    /* Straight into the cork, chunk framing and all: no buffer per event. */
    tg__http_log_sent(c, n);
    if (c->req->http_minor == 0) { /* HTTP/1.0: the stream is the bytes, to the close */
        tg_buf_append(cork_room(c, n), p, n);
        cork_grew(c);
        return;
    }
    if (c->chunk_open != 0 && (!joined || c->cork.len - (c->chunk_open - 1) - CHUNK_HEAD + n > CHUNK_MAX))
        close_chunk(c);
    struct tg_buf *k = cork_room(c, n + 2 * CHUNK_HEAD + 2);
    if (!joined || n > CHUNK_MAX) { /* a chunk of its own */
        tg_buf_append_hex(k, n);
        tg_buf_append(k, "\r\n", 2);
        tg_buf_append(k, p, n);
        tg_buf_append(k, "\r\n", 2);
        cork_grew(c);
        return;
    }
    if (c->chunk_open == 0) {
        c->chunk_open = k->len + 1;
        tg_buf_append(k, CHUNK_HEAD_TEXT, CHUNK_HEAD);
    }
    tg_buf_append(k, p, n);
    cork_grew(c);
}

void tg_http_stream_write(struct tg_conn *c, const char *p, size_t n) { stream_write(c, p, n, 0); }
void tg_http_stream_write_joined(struct tg_conn *c, const char *p, size_t n) { stream_write(c, p, n, 1); }

void tg_http_stream_end(struct tg_conn *c)
{
    if (c->phase != TG_CONN_STREAMING)
        return;
    if (c->req->http_minor != 0) {
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_append(&b, "0\r\n\r\n", 5);
        tg__http_send_owned(c, &b);
    }
    tg__http_finish_request(c);
}

void tg_http_raw_write(struct tg_conn *c, const char *p, size_t n) { tg_http_raw_write2(c, NULL, 0, p, n); }

void tg_http_raw_write2(struct tg_conn *c, const char *head, size_t hn, const char *p, size_t n)
{
    if (c->phase != TG_CONN_UPGRADED) {
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_append(&b, head, hn);
        tg_buf_append(&b, p, n);
        tg__http_send_owned(c, &b);
        return;
    }
    if (hn + n == 0)
        return;
    tg__http_log_sent(c, hn + n);
    struct tg_buf *k = cork_room(c, hn + n);
    tg_buf_append(k, head, hn);
    tg_buf_append(k, p, n);
    cork_grew(c);
}

void tg_conn_peer_ip(const struct tg_conn *c, char out[48])
{
    out[0] = '\0';
    if (c->peer.family != 0 && uv_inet_ntop(c->peer.family == 4 ? AF_INET : AF_INET6, c->peer.ip, out, 48) != 0)
        out[0] = '\0';
}

const char *tg_conn_peer(const struct tg_conn *c)
{
    static _Thread_local char s[56];
    char ip[48];
    tg_conn_peer_ip(c, ip);
    if (c->peer.family == 0)
        s[0] = '\0';
    else
        snprintf(s, sizeof(s), "%s:%d", ip, c->peer.port);
    return s;
}
