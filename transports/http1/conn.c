#include "transports/http1/http1.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/log.h"
#include "core/wire/msg.h"
#include "transports/http1/internal.h"
#include "core/wire/tls.h"

/* ---- forward declarations ---------------------------------------------- */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_handle_closed(uv_handle_t *h);
static void process_input(struct tg_conn *c);

/* A uv_shutdown in flight, made by shutdown_now(). Owner: libuv until on_shutdown(), which
 * frees it. */
struct shutdown_req {
    uv_shutdown_t req;
    struct tg_conn *conn;
};

const char *tg_conn_phase_str(enum tg_conn_phase s)
{
    switch (s) {
    case TG_CONN_HANDSHAKE: return "handshake";
    case TG_CONN_IDLE: return "idle";
    case TG_CONN_READING: return "reading";
    case TG_CONN_DISPATCHING: return "dispatching";
    case TG_CONN_STREAMING: return "streaming";
    case TG_CONN_UPGRADED: return "upgraded";
    case TG_CONN_CLOSING: return "closing";
    case TG_CONN_CLOSED: return "closed";
    }
    return "?";
}

/* ---- llhttp callbacks ---------------------------------------------------- */

static struct tg_conn *conn_of(llhttp_t *p) { return p->data; }

void tg__http_req_reset(struct tg_http_req *r)
{
    r->head.len = 0;
    r->url_off = r->url_len = 0;
    r->nheaders = 0;
    r->last_was_value = 0;
    r->body.len = 0;
    r->keep_alive = 0;
    r->too_many_headers = 0;
    r->method = 0;
    r->http_minor = 0;
    r->upgrade = 0;
    r->in_trailers = 0;
    r->trailer_bytes = 0;
    r->head_flags = 0;
}

/* A request begins (llhttp's first byte of it, or the fast path's whole of it): its state, not
 * yet its phase. */
static void request_begin(struct tg_conn *c)
{
    tg__http_scratch_take(c);
    tg__http_req_reset(c->req);
    c->req_complete = 0;
    c->reject_status = 0;
    struct tg_http_scratch *x = tg_http_scratch_of(c);
    x->log_start_ms = uv_now(c->env->loop);
    x->log_status = 0;
    x->log_bytes = 0;
}

/* llhttp's first byte of a request: READING, under limits.header_timeout_ms. */
static int on_message_begin(llhttp_t *p)
{
    struct tg_conn *c = conn_of(p);
    request_begin(c);
    tg__http_set_phase(c, TG_CONN_READING);
    return 0;
}

static int head_append(struct tg_conn *c, const char *at, size_t n)
{
    size_t cap = (size_t)c->env->limits->header_bytes;
    if (tg_buf_try_append(&c->req->head, at, n, cap) != 0) {
        c->env->metrics->limit_header_bytes++;
        return -1;
    }
    return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n)
{
    struct tg_conn *c = conn_of(p);
    if (c->req->url_len == 0)
        c->req->url_off = (uint32_t)c->req->head.len;
    if (head_append(c, at, n) != 0) {
        c->reject_status = 414;
        return -1;
    }
    c->req->url_len += (uint32_t)n;
    return 0;
}

/* A chunked body's trailer section (RFC 9110 §6.5): llhttp hands its fields to the header
 * callbacks after the body. They are never headers: authentication, the session, Origin, keep-alive
 * and every other decision read the head only (§6.5.1 lets a recipient discard them), so they are
 * counted and dropped. Head and trailers share limits.header_bytes, so a trailer section cannot be
 * longer than a head may be. */
#define CONN_FLAGS (F_CONNECTION_KEEP_ALIVE | F_CONNECTION_CLOSE | F_CONNECTION_UPGRADE | F_UPGRADE)
static int trailer_bytes(struct tg_conn *c, size_t n)
{
    struct tg_http_req *r = c->req;
    r->trailer_bytes += n;
    if (r->head.len + r->trailer_bytes > (size_t)c->env->limits->header_bytes) {
        c->env->metrics->limit_header_bytes++;
        c->reject_status = 431;
        return -1;
    }
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct tg_conn *c = conn_of(p);
    struct tg_http_req *r = c->req;
    if (r->in_trailers)
        return trailer_bytes(c, n);
    if (r->nheaders == 0 || r->last_was_value) {
        if (r->nheaders == TG_HTTP_MAX_HEADERS) {
            c->reject_status = 431;
            return -1;
        }
        struct tg_http_header *h = &r->headers[r->nheaders++];
        h->name_off = (uint32_t)r->head.len;
        h->name_len = 0;
        h->value_off = 0;
        h->value_len = 0;
        r->last_was_value = 0;
    }
    if (head_append(c, at, n) != 0) {
        c->reject_status = 431;
        return -1;
    }
    r->headers[r->nheaders - 1].name_len += (uint32_t)n;
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct tg_conn *c = conn_of(p);
    struct tg_http_req *r = c->req;
    if (r->in_trailers)
        return trailer_bytes(c, n);
    if (r->nheaders == 0)
        return 0;
    struct tg_http_header *h = &r->headers[r->nheaders - 1];
    if (!r->last_was_value) {
        h->value_off = (uint32_t)r->head.len;
        r->last_was_value = 1;
    }
    if (head_append(c, at, n) != 0) {
        c->reject_status = 431;
        return -1;
    }
    h->value_len += (uint32_t)n;
    return 0;
}

static int on_headers_complete(llhttp_t *p)
{
    struct tg_conn *c = conn_of(p);
    c->req->method = p->method;
    c->req->in_trailers = 1; /* any field from here on is a trailer */
    c->req->head_flags = p->flags & CONN_FLAGS;
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > (uint64_t)c->env->limits->body_bytes) {
        c->env->metrics->limit_body_bytes++;
        c->reject_status = 413;
        return -1;
    }
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    struct tg_conn *c = conn_of(p);
    if (tg_buf_try_append(&c->req->body, at, n, (size_t)c->env->limits->body_bytes) != 0) {
        c->env->metrics->limit_body_bytes++;
        c->reject_status = 413;
        return -1;
    }
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    struct tg_conn *c = conn_of(p);
    /* llhttp reads a trailer's Connection as a head's: the head's flags stand (keep-alive, llhttp's state) */
    p->flags = (uint16_t)((p->flags & ~CONN_FLAGS) | c->req->head_flags);
    c->req->keep_alive = llhttp_should_keep_alive(p);
    c->req->http_minor = p->http_minor;
    c->req->upgrade = p->upgrade;
    c->req_complete = 1;
    return HPE_PAUSED;
}

const llhttp_settings_t tg__http_parser_settings = {
    .on_message_begin = on_message_begin,
    .on_url = on_url,
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- request accessors ------------------------------------------------------ */

struct tg_slice tg_http_req_url(const struct tg_http_req *r)
{
    return tg_slice_of(r->head.base + r->url_off, r->url_len);
}

#ifndef NDEBUG
/* What tg_token_eq_lower() needs of the name looked up: lowercase letters, digits and '-'. */
static int lower_name(const char *name, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9') || name[i] == '-'))
            return 0;
    return 1;
}
#endif

/* Header h is named name[0..n) (lowercase), in any case. */
static int header_named(const struct tg_http_req *r, const struct tg_http_header *h, const char *name, size_t n)
{
    assert(lower_name(name, n));
    return h->name_len == n && n > 0 && tg_token_eq_lower(r->head.base + h->name_off, name, n);
}

struct tg_slice tg_http_req_header_n(const struct tg_http_req *r, const char *name, size_t n)
{
    for (int i = 0; i < r->nheaders; i++) {
        const struct tg_http_header *h = &r->headers[i];
        if (header_named(r, h, name, n)) {
            struct tg_slice v = tg_slice_of(r->head.base + h->value_off, h->value_len);
            if (h->value_len == 0)
                v.ptr = ""; /* present but empty is not absent */
            while (v.len && (v.ptr[v.len - 1] == ' ' || v.ptr[v.len - 1] == '\t'))
                v.len--;
            return v;
        }
    }
    return TG_SLICE_NULL;
}

int tg_http_req_header_count_n(const struct tg_http_req *r, const char *name, size_t n)
{
    int count = 0;
    for (int i = 0; i < r->nheaders; i++)
        count += header_named(r, &r->headers[i], name, n);
    return count;
}

void tg__http_pend(struct tg_conn *c, unsigned what)
{
    c->pend |= what;
    if (!tg_list_linked(&c->pend_node))
        tg_list_insert_tail(&c->env->conn_pending, &c->pend_node);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    struct shutdown_req *s = tg_container_of(req, struct shutdown_req, req);
    struct tg_conn *c = s->conn;
    free(s);
    if (!uv_is_closing((uv_handle_t *)&c->tcp)) {
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
    }
}

/* The connection is closing: tell whoever uses it (an upgraded protocol, the handler's
 * exchange), so that nothing refers to it afterwards. Runs from tg_http_run_pending only. */
static void tell_closing(struct tg_conn *c)
{
    if (c->on_watch) {
        tg_conn_cb w = c->on_watch;
        c->on_watch = NULL;
        w(c, c->watch_ud);
    }
    if (c->up != NULL) {
        struct tg_conn_upgraded up = *c->up;
        free(c->up);
        c->up = NULL;
        if (up.gone)
            up.gone(c, up.ud);
    }
    tg_conn_cb abort_cb = c->on_abort;
    void *ex = c->exchange;
    c->exchange = NULL;
    c->on_abort = NULL;
    c->on_drain = NULL;
    if (ex && abort_cb)
        abort_cb(c, ex);
}

/* Mark the connection closing: no reads, no writes, no timer from now on. */
static void mark_closing(struct tg_conn *c, unsigned how)
{
    if (c->phase == TG_CONN_DISPATCHING || c->phase == TG_CONN_STREAMING || c->phase == TG_CONN_READING)
        tg__http_access_line(c, tg__http_status_sent(c, 499)); /* nginx's "client closed the request" */
    tg_list_unlink(&c->cork_node);
    if (c->out_pending_corked) { /* never written: it no longer counts */
        tg__http_out_sub(c, c->out_pending_corked);
        c->out_pending_corked = 0;
    }
    tg_buf_dispose(&c->cork);
    c->chunk_open = 0;
    size_t waiting = tg__http_tls_waiting(c);
    if (waiting > 0) /* never encrypted: it no longer counts either */
        tg__http_out_sub(c, waiting);
    tg__http_tls_backlog_free(c);
    uv_read_stop((uv_stream_t *)&c->tcp);
    tg__http_set_phase(c, TG_CONN_CLOSING);
    c->pend &= ~TG_PEND_INPUT;
    tg__http_pend(c, how);
}

static void close_handles(struct tg_conn *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
}

/* Close after everything queued has been written (uv_shutdown waits for pending writes). */
static void close_graceful(struct tg_conn *c)
{
    if (c->phase >= TG_CONN_CLOSING)
        return;
    tg__http_flush_cork(c);
    if (c->phase >= TG_CONN_CLOSING)
        return; /* the flush failed and closed it */
    if (c->tls != NULL) {
        struct tg_buf b;
        tg_buf_init(&b);
        size_t n = tg__http_tls_waiting(c);
        if (n > 0) {
            /* The answer still waiting for encryption goes before close_notify, all of it now. */
            int r = tg_tls_write(c->tls, c->tls_plain->buf.base + c->tls_plain->off, n, &b);
            tg__http_out_sub(c, n);
            tg__http_tls_backlog_free(c);
            if (r != 0) {
                tg_buf_dispose(&b);
                tg_conn_close(c, "TLS write failed");
                return;
            }
            tg__http_send_wire(c, &b);
            if (c->phase >= TG_CONN_CLOSING)
                return;
        }
        if (tg_tls_close_notify(c->tls, &b) == 0 && b.len)
            tg__http_send_wire(c, &b);
        tg_buf_dispose(&b);
        if (c->phase >= TG_CONN_CLOSING)
            return;
    }
    mark_closing(c, TG_PEND_SHUTDOWN);
}

static void shutdown_now(struct tg_conn *c)
{
    struct shutdown_req *s = tg_xmalloc(sizeof(*s));
    s->conn = c;
    if (uv_shutdown(&s->req, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        free(s);
        close_handles(c);
    }
}

static void process_input(struct tg_conn *c);

void tg_http_run_pending(struct tg_http_env *env)
{
    struct tg_list round;
    tg_list_init(&round);
    tg_list_splice_tail(&round, &env->conn_pending); /* what was queued before this round */
    while (!tg_list_empty(&round)) {
        struct tg_conn *c = tg_container_of(round.next, struct tg_conn, pend_node);
        tg_list_unlink(&c->pend_node);
        unsigned what = c->pend;
        c->pend = 0;
        if (what & TG_PEND_HANDSHAKE)
            env->handshakes_waiting--;
        if (what & (TG_PEND_CLOSE | TG_PEND_SHUTDOWN)) {
            tell_closing(c);
            if ((what & TG_PEND_CLOSE) || uv_is_closing((uv_handle_t *)&c->tcp))
                close_handles(c);
            else
                shutdown_now(c);
            continue;
        }
        if ((what & TG_PEND_HANDSHAKE) && c->phase == TG_CONN_HANDSHAKE && tg__http_tls_resume(c) == 0)
            what |= TG_PEND_INPUT; /* established: what came after the handshake is parsed now */
        if ((what & TG_PEND_TLS) && c->phase < TG_CONN_CLOSING)
            tg__http_tls_pump(c);
        if ((what & TG_PEND_INPUT) && c->phase < TG_CONN_CLOSING && !c->in_process) {
            if (c->read_stopped && !tg_conn_output_high(c) && c->in.len < tg__http_input_ceiling(c)) {
                c->read_stopped = 0;
                uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
            }
            process_input(c);
        }
    }
}

/* The current request is answered: get ready for the next one. Pipelined bytes are parsed
 * from the loop (tg_http_run_pending), never inside the answer that ended this request. */
void tg__http_finish_request(struct tg_conn *c)
{
    tg__http_access_line(c, tg__http_status_sent(c, 0));
    c->exchange = NULL;
    c->on_abort = NULL;
    c->on_drain = NULL;
    if (c->phase >= TG_CONN_CLOSING)
        return;
    if (c->close_after || !c->req->keep_alive || *c->env->draining) {
        close_graceful(c);
        return;
    }
    /* Idle connections keep no request buffers (a session costs memory only while it works). */
    tg__http_scratch_give(c); /* with the parser: the next request's scratch brings a fresh one */
    c->req_complete = 0;
    tg__http_set_phase(c, TG_CONN_IDLE);
    if (c->in.len > 0 || c->read_stopped)
        tg__http_pend(c, TG_PEND_INPUT);
    else
        tg_buf_dispose(&c->in); /* empty */
}

/* ---- upgrades ------------------------------------------------------------------ */

void tg_http_upgrade(struct tg_conn *c, const char *extra)
{
    if (c->phase >= TG_CONN_CLOSING)
        return;
    tg__http_access_line(c, 101);
    c->env->metrics->http_status[1]++;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "HTTP/1.1 101 Switching Protocols\r\n");
    if (extra)
        tg_buf_appends(&b, extra);
    tg_buf_appends(&b, "\r\n");
    tg__http_send_owned(c, &b);
    c->close_after = 0;
    c->exchange = NULL;
    c->on_abort = NULL;
    c->on_drain = NULL;
    tg__http_scratch_give(c);
    tg__http_set_phase(c, TG_CONN_UPGRADED);
    if (c->read_stopped) {
        c->read_stopped = 0;
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    }
}

void tg_http_take_over(struct tg_conn *c, tg_conn_cb on_data, tg_conn_cb on_tick, tg_conn_cb on_gone, void *ud)
{
    if (on_data == NULL && on_tick == NULL && on_gone == NULL) {
        free(c->up); /* detached */
        c->up = NULL;
    } else {
        if (c->up == NULL)
            c->up = tg_xmalloc(sizeof(*c->up));
        *c->up = (struct tg_conn_upgraded){.data = on_data, .tick = on_tick, .gone = on_gone, .ud = ud};
    }
    /* Bytes that came with the handshake go to the new protocol from the loop, never inside
     * this call: its caller has not finished setting up (fuzz_e2e: a WebSocket frame in the
     * upgrade's packet was answered before the channel had its tg_ws, a NULL dereference). */
    if (c->in.len > 0)
        tg__http_pend(c, TG_PEND_INPUT);
}

void tg_http_read_pause(struct tg_conn *c)
{
    if (c->read_stopped || c->phase >= TG_CONN_CLOSING)
        return;
    c->env->metrics->limit_output++;
    c->read_stopped = 1;
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (tg__http_out_drained(c)) /* it drained already: nothing else would resume us */
        tg__http_pend(c, TG_PEND_INPUT);
}

void tg_http_close_after_writes(struct tg_conn *c) { close_graceful(c); }

/* ---- reading ------------------------------------------------------------------ */

size_t tg__http_input_ceiling(struct tg_conn *c)
{
    const struct tg_limits *l = c->env->limits;
    return (size_t)l->header_bytes + (size_t)l->body_bytes + 65536;
}

/* Every read lands in one scratch buffer shared by all connections (one loop, and a read is
 * handled before the next starts); only what a connection keeps is copied to its own buffer.
 * An idle connection so holds no read buffer at all. */
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct tg_conn *c = h->data;
    *buf = uv_buf_init(c->env->scratch, sizeof(c->env->scratch));
}

static void reply_parse_error(struct tg_conn *c, llhttp_errno_t err)
{
    int status = 400;
    const char *msg = "Bad Request: malformed HTTP";
    int code = c->reject_status;
    struct tg_http_scratch *x = tg_http_scratch_of(c);
    const char *reason = code ? "limit" : x != NULL ? llhttp_get_error_reason(&x->parser) : NULL;
    if (code) {
        status = code;
        msg = code == 413 ? "Content too large" : code == 414 ? "URI too long" : "Request header fields too large";
    }
    char esc[160];
    tg_log(TG_LOG_INFO, "bad request", "conn=%llu peer=%s status=%d reason=%s", (unsigned long long)c->id, tg_conn_peer(c),
           status, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(reason ? reason : llhttp_errno_name(err))));
    c->close_after = 1;
    c->req->keep_alive = 0;
    tg__http_set_phase(c, TG_CONN_DISPATCHING);
    tg_http_respond_rpc_error(c, status, NULL, TG_RPC_INVALID_REQUEST, msg);
}

static void process_input_loop(struct tg_conn *c);

static void process_input(struct tg_conn *c)
{
    if (c->phase == TG_CONN_UPGRADED) {
        if (c->up != NULL && c->up->data)
            c->up->data(c, c->up->ud);
        return;
    }
    c->in_process = 1;
    process_input_loop(c);
    c->in_process = 0;
}

/* The request at the start of c->in read by the fast path (core/wire/http_fast.h) and stored as llhttp's
 * callbacks store one: its length, or 0 to leave it to llhttp (whose on_message_begin resets
 * whatever this stored). A request over a limit is left to llhttp too, which refuses it. The
 * connection stays IDLE meanwhile: a request read whole goes to DISPATCHING at once, so no
 * header deadline is armed for it (and one read in part gets its deadline from llhttp). */
static size_t take_fast(struct tg_conn *c)
{
    const struct tg_limits *lim = c->env->limits;
    struct tg_http_fast f;
    request_begin(c);
    struct tg_http_req *r = c->req;
    if (!tg_http_fast_request(c->in.base, c->in.len, r->headers, TG_HTTP_MAX_HEADERS, &f) ||
        f.body_len > (uint64_t)lim->body_bytes ||
        tg_buf_try_append(&r->head, c->in.base, f.head_len, (size_t)lim->header_bytes) != 0 ||
        tg_buf_try_append(&r->body, c->in.base + f.head_len, (size_t)f.body_len, (size_t)lim->body_bytes) != 0)
        return 0;
    r->method = f.method;
    r->url_off = f.url_off;
    r->url_len = f.url_len;
    r->nheaders = f.nheaders;
    r->keep_alive = f.keep_alive;
    r->http_minor = 1;
    c->req_complete = 1;
    return f.head_len + (size_t)f.body_len;
}

/* A whole request is in c->req: to the handler. */
static void request_ready(struct tg_conn *c)
{
    tg__http_set_phase(c, TG_CONN_DISPATCHING);
    c->env->metrics->http_requests++;
    if (c->over_limit) {
        c->close_after = 1;
        c->req->keep_alive = 0;
        tg_http_respond_rpc_error(c, 503, "Retry-After: 1\r\n", TG_RPC_UPSTREAM,
                                  "Service Unavailable: the gateway is at limits.max_connections; retry");
        return;
    }
    /* The handler may answer now or later; if it took the connection over (an upgrade), the
     * bytes that followed are its. The next request is parsed from the loop. */
    c->env->on_request(c->env, c);
}

static void process_input_loop(struct tg_conn *c)
{
    while (c->phase == TG_CONN_IDLE || c->phase == TG_CONN_READING) {
        if (c->in.len == 0)
            return;
        if (c->phase == TG_CONN_IDLE && tg_conn_output_high(c)) {
            /* A client that sends requests and reads no answers: the next one waits until the
             * answers it has not read drain below the mark (drained() resumes it). */
            c->wait_drain = 1;
            c->env->metrics->limit_output++;
            break;
        }
        if (c->phase == TG_CONN_IDLE && tg_http_fast_maybe(c->in.base, c->in.len)) {
            size_t used = take_fast(c);
            if (used > 0) {
                tg_buf_consume(&c->in, used);
                request_ready(c);
                return;
            }
        }
        tg__http_scratch_take(c); /* the parser lives in it (a request's first byte is here) */
        llhttp_t *parser = &tg_http_scratch_of(c)->parser;
        llhttp_errno_t err = llhttp_execute(parser, c->in.base, c->in.len);
        if (err == HPE_OK) {
            c->in.len = 0;
            return;
        }
        if (err == HPE_PAUSED || err == HPE_PAUSED_UPGRADE) {
            const char *pos = llhttp_get_error_pos(parser);
            size_t used = pos ? (size_t)(pos - c->in.base) : c->in.len;
            tg_buf_consume(&c->in, used);
            if (!c->req_complete) {
                reply_parse_error(c, err);
                return;
            }
            if (c->req->upgrade) {
                /* The bytes after an Upgrade head belong to another protocol: this connection ends here. */
                c->close_after = 1;
                c->req->keep_alive = 0;
            }
            request_ready(c);
            return;
        }
        reply_parse_error(c, err);
        return;
    }
    /* Dispatching, streaming or waiting for a drain: keep bytes for later, but not without bound. */
    if ((c->in.len >= tg__http_input_ceiling(c) || c->wait_drain) && !c->read_stopped && c->phase < TG_CONN_CLOSING) {
        c->read_stopped = 1;
        uv_read_stop((uv_stream_t *)&c->tcp);
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct tg_conn *c = s->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        c->eof = 1;
        if (nread == UV_ENOBUFS)
            c->env->metrics->limit_body_bytes++;
        tg_conn_close(c, nread == UV_EOF ? "peer closed" : uv_strerror((int)nread));
        return;
    }
    if (c->tls != NULL) {
        if (tg__http_tls_input(c, buf->base, (size_t)nread) != 0)
            return;
    } else if (tg_buf_try_append(&c->in, buf->base, (size_t)nread, tg__http_input_ceiling(c)) != 0) {
        c->env->metrics->limit_body_bytes++;
        tg_conn_close(c, "input limit");
        return;
    }
    process_input(c);
    if (c->in.len == 0 && c->in.cap > 4096 && c->phase < TG_CONN_CLOSING)
        tg_buf_dispose(&c->in);
}

/* ---- closing -------------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
    struct tg_conn *c = h->data;
    c->phase = TG_CONN_CLOSED;
    tg_list_unlink(&c->pend_node);
    tg_list_unlink(&c->due_node);
    if (tg_list_linked(&c->node)) { /* not linked when uv_accept failed */
        tg_list_unlink(&c->node);
        c->env->nconns--;
    }
    if (c->env->conn_gone)
        c->env->conn_gone(c->env, c);
    tg_tls_free(c->tls);
    tg_buf_dispose(&c->in);
    tg__http_scratch_give(c);
    tg__http_tls_backlog_free(c);
    free(c->up);
    tg_buf_dispose(&c->cork);
    free(c);
}

void tg_conn_close(struct tg_conn *c, const char *why)
{
    if (c->phase >= TG_CONN_CLOSING)
        return;
    tg_log(TG_LOG_DEBUG, "connection closed", "conn=%llu state=%s reason=\"%s\"", (unsigned long long)c->id,
           tg_conn_phase_str(c->phase), why);
    mark_closing(c, TG_PEND_CLOSE);
}

void tg_conn_close_now(struct tg_conn *c, const char *why)
{
    if (c->phase < TG_CONN_CLOSING) {
        tg_conn_close(c, why);
        return;
    }
    if (c->pend & TG_PEND_SHUTDOWN) { /* not started yet: make it abrupt */
        c->pend = (c->pend & ~TG_PEND_SHUTDOWN) | TG_PEND_CLOSE;
        return;
    }
    if (c->pend & TG_PEND_CLOSE)
        return;
    /* A graceful close waits on uv_shutdown, which waits for a reader that may never come. */
    close_handles(c);
}

/* ---- environment and accept (last, as in h2o) ------------------------------------ */

void tg_http_env_init(struct tg_http_env *env, uv_loop_t *loop, const struct tg_limits *limits,
                      struct tg_metrics *metrics, const int *draining)
{
    memset(env, 0, sizeof(*env));
    env->loop = loop;
    env->limits = limits;
    env->metrics = metrics;
    env->draining = draining;
    tg_list_init(&env->conns);
    tg_list_init(&env->corked);
    tg_list_init(&env->conn_pending);
    tg__http_timer_init(env);
}

void tg_http1_accept(struct tg_http_env *env, const struct tg_http_listener *l, uv_stream_t *listener_handle)
{
    struct tg_conn *c = tg_xcalloc(1, sizeof(*c));
    c->env = env;
    c->listener = l;
    c->id = ++env->next_conn_id;
    uv_tcp_init(env->loop, &c->tcp);
    c->tcp.data = c;
    tg_list_init(&c->node);
    tg_list_init(&c->due_node);
    tg_list_init(&c->cork_node);
    tg_list_init(&c->pend_node);
    if (uv_accept(listener_handle, (uv_stream_t *)&c->tcp) != 0) {
        c->phase = TG_CONN_CLOSING;
        uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
        return;
    }
    tg_list_insert_tail(&env->conns, &c->node);
    env->nconns++;
    env->metrics->conns_accepted++;
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
            memcpy(c->peer.ip, &a->sin_addr, 4);
            c->peer.port = ntohs(a->sin_port);
            c->peer.family = 4;
        } else {
            const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
            memcpy(c->peer.ip, &a->sin6_addr, 16);
            c->peer.port = ntohs(a->sin6_port);
            c->peer.family = 6;
        }
    }
    if (!l->is_admin && env->nconns > (size_t)env->limits->max_connections) {
        env->metrics->conns_rejected++;
        tg_log(TG_LOG_WARN, "connection limit reached", "conn=%llu peer=%s limit=%d", (unsigned long long)c->id,
               tg_conn_peer(c), env->limits->max_connections);
        /* A clean 503 for its first request, on a plain connection and while the overflow is
         * small (each waits at most limits.header_timeout_ms); past that, or over TLS (no
         * handshake for a refusal), the connection is closed at once. */
        if (l->tls != NULL || env->nconns > (size_t)env->limits->max_connections + 64) {
            tg_conn_close(c, "connection limit");
            return;
        }
        c->over_limit = 1;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (l->tls != NULL) {
        c->tls = tg_tls_new(l->tls);
        if (c->tls == NULL) {
            tg_conn_close(c, "TLS setup failed");
            return;
        }
        c->phase = TG_CONN_HANDSHAKE;
        tg__http_arm(c, (uint64_t)env->limits->tls_handshake_timeout_ms);
    } else {
        c->phase = TG_CONN_IDLE;
        tg__http_arm(c, (uint64_t)env->limits->header_timeout_ms);
    }
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}
