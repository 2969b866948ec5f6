#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/wire/http_fast.h"
#include "core/base/log.h"
#include "upstream/pool/internal.h"

/* The part of the requests uv_try_write() did not take, copied, made by conn_write(). Owner:
 * libuv until on_write_done(), which frees it. */
struct upwrite {
    uv_write_t req;
    char *base;
};

static void on_conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

/* ---- the request ----------------------------------------------------------- */

/* 1 if the header lines in extra set name (a grant's upstream_headers, an exchanged token): the
 * caller's line then replaces the upstream's own of that name. */
static int sets_header(const char *extra, const char *name)
{
    size_t n = strlen(name);
    for (const char *l = extra; *l;) {
        if (strncasecmp(l, name, n) == 0 && l[n] == ':')
            return 1;
        const char *nl = strchr(l, '\n');
        if (nl == NULL)
            break;
        l = nl + 1;
    }
    return 0;
}

void tg__upreq_format(struct tg_upreq *r, const char *method, const char *target, const char *extra_headers,
                      const char *body, size_t len)
{
    const struct tg_upstream_conf *uc = r->up->uc;
    tg_buf_init(&r->out);
    if (tg_buf_try_reserve(&r->out, len + 512, 0) != 0)
        abort();
    /* Appends, not printf: this runs for every call. */
    tg_buf_appends(&r->out, method);
    tg_buf_append(&r->out, " ", 1);
    tg_buf_appends(&r->out, target ? target : uc->path);
    tg_buf_append(&r->out, " HTTP/1.1\r\nHost: ", 17);
    tg_buf_appends(&r->out, uc->authority);
    tg_buf_append(&r->out, "\r\n", 2);
    for (size_t i = 0; i < uc->nheaders; i++) {
        if (extra_headers != NULL && sets_header(extra_headers, uc->headers[i].name))
            continue;
        tg_buf_appends(&r->out, uc->headers[i].name);
        tg_buf_append(&r->out, ": ", 2);
        tg_buf_appends(&r->out, uc->headers[i].value);
        tg_buf_append(&r->out, "\r\n", 2);
    }
    if (extra_headers)
        tg_buf_appends(&r->out, extra_headers);
    if (body != NULL) {
        tg_buf_append(&r->out, "Content-Length: ", 16);
        tg_buf_append_u64(&r->out, len);
        tg_buf_append(&r->out, "\r\n\r\n", 4);
        tg_buf_append(&r->out, body, len);
    } else {
        tg_buf_appends(&r->out, "\r\n");
    }
}

/* ---- response parsing ------------------------------------------------------ */

static struct tg_upconn *pconn(llhttp_t *p) { return p->data; }

/* An upstream's response head is at most this long (nothing of it is kept but a few headers; the
 * cap is so that a head that never ends fails now rather than at call_timeout_ms). */
#define UPSTREAM_HEAD_MAX 65536

static int head_bytes(llhttp_t *p, struct tg_upconn *c, size_t n)
{
    c->head_len += n;
    if (c->head_len <= UPSTREAM_HEAD_MAX)
        return 0;
    llhttp_set_error_reason(p, "upstream response head over 64 KiB");
    return -1;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct tg_upconn *c = pconn(p);
    if (head_bytes(p, c, n) != 0)
        return -1;
    if (c->in_value) {
        c->in_value = 0;
        c->hname_len = 0;
    }
    size_t room = sizeof(c->hname) - c->hname_len;
    size_t k = n < room ? n : room;
    memcpy(c->hname + c->hname_len, at, k);
    c->hname_len += k;
    if (n > k)
        c->hname_len = sizeof(c->hname); /* too long to be one we care about */
    return 0;
}

/* Which kept header a name is: 1 content-type, 2 mcp-session-id, 3 cache-control and 4
 * location (only when the request keeps them: tg_upreq_keep_meta), 0 another. */
static int header_kind(const struct tg_upreq *r, const char *name, size_t n)
{
    if (n == 12 && tg_token_eq_lower(name, "content-type", 12))
        return 1;
    if (n == 14 && tg_token_eq_lower(name, "mcp-session-id", 14))
        return 2;
    if (r->meta != NULL && n == 13 && tg_token_eq_lower(name, "cache-control", 13))
        return 3;
    if (r->meta != NULL && n == 8 && tg_token_eq_lower(name, "location", 8))
        return 4;
    return 0;
}

/* Where a kept header's value goes (its length and room), or NULL for one not kept. */
static char *header_slot(struct tg_upreq *r, int kind, size_t **len, size_t *cap)
{
    switch (kind) {
    case 1: *len = &r->ctype_len; *cap = sizeof(r->ctype); return r->ctype;
    case 2: *len = &r->sid_len; *cap = sizeof(r->sid); return r->sid;
    case 3: *len = &r->meta->cc_len; *cap = sizeof(r->meta->cc); return r->meta->cc;
    case 4: *len = &r->meta->loc_len; *cap = sizeof(r->meta->loc); return r->meta->loc;
    default: return NULL;
    }
}

static int on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct tg_upconn *c = pconn(p);
    struct tg_upreq *r = c->req;
    if (r == NULL || head_bytes(p, c, n) != 0)
        return -1;
    /* The final head is over (on_headers_complete set the status): this is a chunked body's
     * trailer field. It never sets Content-Type or Mcp-Session-Id (RFC 9110 §6.5.1); it is
     * counted in the head's 64 KiB and dropped. */
    if (r->status >= 200)
        return 0;
    if (!c->in_value) {
        c->in_value = 1;
        c->hkind = header_kind(r, c->hname, c->hname_len);
        size_t *len;
        size_t cap;
        if (header_slot(r, c->hkind, &len, &cap) != NULL)
            *len = 0;
    }
    size_t *len;
    size_t cap;
    char *dst = header_slot(r, c->hkind, &len, &cap);
    if (dst != NULL) {
        if (*len + n >= cap) {
            llhttp_set_error_reason(p, "upstream header too long");
            return -1;
        }
        memcpy(dst + *len, at, n);
        *len += n;
    }
    return 0;
}

/* The final head is known: its owner hears of it (an orphan's answer is read and dropped). An
 * event stream keeps later requests off the connection. */
static void deliver_head(struct tg_upconn *c, struct tg_upreq *r)
{
    c->stream_head = r->ctype_len >= 17 && tg_token_eq_lower(r->ctype, "text/event-stream", 17);
    if (!r->orphan)
        r->cbs->on_head(r, r->status, r->ud);
}

static int on_headers_complete(llhttp_t *p)
{
    struct tg_upconn *c = pconn(p);
    struct tg_upreq *r = c->req;
    if (r == NULL)
        return -1;
    r->status = p->status_code;
    if (r->status == 101)
        return -1; /* no upgrade was asked for: a malformed answer (its bytes are no body) */
    if (r->status >= 100 && r->status < 200)
        return 1; /* interim response, which has no body whatever it says: llhttp goes on to the final one */
    deliver_head(c, r);
    if (c->req != r)
        return -1;
    return r->status == 204 || r->status == 304 ? 1 : 0; /* no content, whatever the headers say */
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    struct tg_upconn *c = pconn(p);
    struct tg_upreq *r = c->req;
    if (r == NULL)
        return -1;
    if (!r->orphan)
        r->cbs->on_data(r, at, n, r->ud);
    return c->req != r ? -1 : 0;
}

static int on_message_complete(llhttp_t *p)
{
    struct tg_upconn *c = pconn(p);
    if (c->req == NULL)
        return -1;
    if (c->req->status >= 100 && c->req->status < 200)
        return 0;
    c->complete = 1;
    return HPE_PAUSED;
}

static const llhttp_settings_t resp_settings = {
    .on_header_field = on_header_field,
    .on_header_value = on_header_value,
    .on_headers_complete = on_headers_complete,
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

/* ---- connections --------------------------------------------------------------- */

/* r's failure in words, for its owner (tg_upreq_error). */
static void req_why(struct tg_upreq *r, const char *why)
{
    if (r != NULL && why != NULL)
        snprintf(r->why, sizeof(r->why), "%s", why);
}

static void on_write_done(uv_write_t *req, int status)
{
    struct upwrite *w = tg_container_of(req, struct upwrite, req);
    tg_xfree(w->base);
    tg_xfree(w);
    (void)status; /* a failed write shows up as a read error or EOF on the same connection */
}

/* Bytes to the socket in one system call: what uv_try_write() takes now (no request object, no
 * extra epoll_ctl), the rest copied and queued behind it. Returns 0 or a libuv error (then
 * nothing was written). */
static int conn_write(struct tg_upconn *c, const uv_buf_t *bufs, unsigned nbufs)
{
    size_t len = 0, off = 0;
    for (unsigned i = 0; i < nbufs; i++)
        len += bufs[i].len;
    int n = uv_try_write((uv_stream_t *)&c->tcp, bufs, nbufs);
    if (n > 0)
        off = (size_t)n;
    if (off < len && (n >= 0 || n == UV_EAGAIN)) {
        struct upwrite *w = tg_xmalloc(sizeof(*w));
        w->base = tg_xmalloc(len - off);
        size_t at = 0, skip = off;
        for (unsigned i = 0; i < nbufs; i++) {
            size_t k = bufs[i].len;
            if (skip >= k) {
                skip -= k;
                continue;
            }
            memcpy(w->base + at, bufs[i].base + skip, k - skip);
            at += k - skip;
            skip = 0;
        }
        uv_buf_t b = uv_buf_init(w->base, (unsigned)(len - off));
        n = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write_done);
        if (n != 0) {
            free(w->base);
            free(w);
        }
    }
    return n < 0 && n != UV_EAGAIN ? n : 0;
}

/* Records the TLS layer produced (handshake, alerts, application data), to the socket. */
static int conn_write_records(struct tg_upconn *c, struct tg_buf *out)
{
    uv_buf_t b = uv_buf_init(out->base, (unsigned)out->len);
    int n = out->len ? conn_write(c, &b, 1) : 0;
    tg_buf_dispose(out);
    return n;
}

int tg__upconn_write(struct tg_upconn *c, const uv_buf_t *bufs, unsigned n)
{
    if (c->tls == NULL)
        return conn_write(c, bufs, n);
    struct tg_buf enc;
    tg_buf_init(&enc);
    int rc = 0;
    for (unsigned i = 0; i < n && rc == 0; i++)
        rc = tg_tls_write(c->tls, bufs[i].base, bufs[i].len, &enc) == 0 ? 0 : UV_EPROTO;
    int w = conn_write_records(c, &enc);
    return rc != 0 ? rc : w;
}

void tg__upconn_begin_answer(struct tg_upconn *c)
{
    struct tg_upreq *r = c->req;
    c->complete = 0;
    r->status = 0; /* no final head yet: on_header_value reads headers, not trailers */
    c->in_value = 0;
    c->hname_len = 0;
    c->head_len = 0;
    c->stream_head = 0;
    llhttp_init(&c->parser, HTTP_RESPONSE, &resp_settings);
    c->parser.data = c;
    if (c->state == UC_BUSY && r->sent) {
        if (r->paused)
            uv_read_stop((uv_stream_t *)&c->tcp);
        else
            tg__upconn_read_start(c);
    }
}

static void on_conn_closed(uv_handle_t *h)
{
    struct tg_upconn *c = h->data;
    if (--c->handles > 0)
        return;
    struct tg_upstream *u = c->up;
    tg_tls_free(c->tls);
    if (c->tls_conf != NULL)
        tg_conf_unref(c->tls_conf);
    tg_buf_dispose(&c->plain);
    free(c);
    u->open_conns--;
    tg__upstream_maybe_free(u);
}

void tg__upconn_close(struct tg_upconn *c) { tg__upconn_close_with(c, TG_ECLOSED, TG_RETRY_UNSENT, 0); }

void tg__upconn_close_with(struct tg_upconn *c, int err, enum tg_retry retry, int later)
{
    if (c->state == UC_CLOSING)
        return;
    struct tg_upstream *u = c->up;
    if (c->state == UC_IDLE)
        u->nidle--;
    c->state = UC_CLOSING;
    tg_list_unlink(&c->link);
    if (c->dedicated)
        u->ndedicated--;
    else
        u->npooled--;
    if (c->resolving)
        uv_cancel((uv_req_t *)&c->gai);
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
    uv_close((uv_handle_t *)&c->flush, on_conn_closed);
    tg__upconn_fail_all(c, err, retry, later);
    if (!u->closing)
        tg__upstream_serve_queue(u); /* a pool slot is free again */
}

static void on_conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct tg_upconn *c = h->data;
    *buf = uv_buf_init(c->up->scratch, sizeof(c->up->scratch));
}

/* r's answer (c's first) is whole: r is finished and the next answer on c is read. keep 0: the
 * server ends the connection after it, and the requests behind r were not processed (RFC 9112
 * §9.6): tried again elsewhere. more: bytes follow the answer that no request on c asked for. */
static void answered(struct tg_upconn *c, struct tg_upreq *r, int keep, int more)
{
    tg__upconn_advance(c);
    if (!keep)
        tg__upconn_close_with(c, TG_ECLOSED, TG_RETRY_CLOSED, 0);
    else if (c->nreqs == 0 && more)
        tg__upconn_close(c);
    else if (c->nreqs == 0)
        tg__upconn_to_idle(c);
    else
        c->reused = 0; /* the server is alive on it: a close now is no stale keep-alive's */
    if (keep && c->nreqs > 0 && !tg_list_empty(&c->up->queue))
        tg__upstream_serve_queue(c->up); /* room on c for one more */
    if (r->orphan)
        tg__upreq_release(r);
    else
        tg__upreq_finish(r, 0);
}

/* A header the request keeps (content-type, mcp-session-id): 0, or -1 when it does not fit,
 * which llhttp's reading refuses too (on_header_value). A later one replaces an earlier one. */
static int keep_header(char *dst, size_t *len, size_t cap, const char *v, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(dst, v, n);
    *len = n;
    return 0;
}

/* The first bytes of an answer, when they begin with all of it in the shape core/wire/http_fast.h
 * reads: handed to the request as llhttp's callbacks hand one (on_head, on_data, finished), and
 * the answer's length; 0 leaves them to llhttp, unread. */
static size_t take_fast(struct tg_upconn *c, const char *p, size_t n)
{
    struct tg_upreq *r = c->req;
    struct tg_http_header h[24]; /* more headers than that: llhttp reads the answer */
    struct tg_http_fast f;
    if (!tg_http_fast_response(p, n, h, (int)(sizeof(h) / sizeof(h[0])), &f) || f.head_len > UPSTREAM_HEAD_MAX)
        return 0;
    size_t ctype_len = r->ctype_len, sid_len = r->sid_len;
    for (int i = 0; i < f.nheaders; i++) {
        const char *name = p + h[i].name_off, *v = p + h[i].value_off;
        int kind = header_kind(r, name, h[i].name_len);
        size_t *len, cap;
        char *dst = header_slot(r, kind, &len, &cap);
        if (kind == 1)
            len = &ctype_len;
        else if (kind == 2)
            len = &sid_len;
        if (dst != NULL && keep_header(dst, len, cap, v, h[i].value_len) != 0)
            return 0;
    }
    size_t used = f.head_len + (size_t)f.body_len;
    r->ctype_len = ctype_len;
    r->sid_len = sid_len;
    r->status = f.status;
    deliver_head(c, r);
    if (c->req == r && f.body_len > 0 && !r->orphan)
        r->cbs->on_data(r, p + f.head_len, (size_t)f.body_len, r->ud);
    if (c->state == UC_CLOSING || c->req != r)
        return used; /* closed from a callback (r with it) */
    c->complete = 1;
    answered(c, r, f.keep_alive, used < n);
    return used;
}

/* The connection ended (EOF or an error) while requests were on it. */
static void conn_ended(struct tg_upconn *c)
{
    struct tg_upreq *r = c->req;
    if (r->got_bytes && llhttp_finish(&c->parser) == HPE_OK && c->complete == 0 && r->status >= 200) {
        /* body delimited by the close: llhttp_finish ran on_message_complete */
    }
    if (c->complete) {
        answered(c, r, 0, 0); /* those behind it were not processed */
        return;
    }
    /* A pooled connection the server had closed while idle: what was sent is tried once more on a
     * fresh one (the first answer had not begun). */
    int stale = !r->got_bytes && c->reused;
    tg__upconn_close_with(c, TG_ECLOSED, stale ? TG_RETRY_STALE : TG_RETRY_UNSENT, 0);
}

/* What the connection read (plaintext), or its end (nread < 0). Several answers may be in one
 * read (pipelining): each goes to its request, in order. */
static void conn_bytes(struct tg_upconn *c, ssize_t nread, const uv_buf_t *buf)
{
    struct tg_upstream *u = c->up;
    if (c->state == UC_IDLE || c->req == NULL) {
        /* Bytes or EOF on an idle connection: the server closed it or misbehaves. */
        tg__upconn_close(c);
        return;
    }
    if (nread < 0) {
        conn_ended(c);
        return;
    }
    const char *p = buf->base;
    size_t n = (size_t)nread;
    while (n > 0 && c->state == UC_BUSY) {
        struct tg_upreq *r = c->req;
        if (r == NULL || !r->sent) {
            tg__upconn_close(c); /* an answer before its request was written */
            return;
        }
        if (!r->got_bytes) { /* the answer begins */
            r->got_bytes = 1;
            size_t used = take_fast(c, p, n);
            if (used > 0) {
                p += used;
                n -= used;
                continue;
            }
        }
        llhttp_errno_t e = llhttp_execute(&c->parser, p, n);
        if (c->state == UC_CLOSING)
            return;
        if (c->req != r) { /* taken off from a callback */
            tg__upconn_close(c);
            return;
        }
        if (e == HPE_PAUSED && c->complete) {
            const char *pos = llhttp_get_error_pos(&c->parser);
            size_t used = pos != NULL && pos >= p && pos <= p + n ? (size_t)(pos - p) : n;
            p += used;
            n -= used;
            answered(c, r, llhttp_should_keep_alive(&c->parser), n > 0);
            continue;
        }
        if (e != HPE_OK) {
            char esc[128];
            tg_log(TG_LOG_WARN, "malformed upstream response", "upstream=%s error=%s", u->uc->name,
                   tg_log_esc(esc, sizeof(esc), tg_slice_cstr(llhttp_get_error_reason(&c->parser))));
            req_why(r, llhttp_get_error_reason(&c->parser));
            tg__upconn_advance(c);
            tg__upconn_close(c);
            if (r->orphan)
                tg__upreq_release(r);
            else
                tg__upreq_finish(r, TG_EINVAL);
        }
        return;
    }
}

static void connection_ready(struct tg_upconn *c);
static void connect_failed(struct tg_upconn *c, int err, int later);

static void tls_failed(struct tg_upconn *c, const char *why)
{
    char esc[256];
    tg_log(TG_LOG_WARN, "upstream TLS handshake failed", "upstream=%s host=%s reason=%s", c->up->uc->name,
           c->up->uc->tls_server_name ? c->up->uc->tls_server_name : c->up->uc->host,
           tg_log_esc(esc, sizeof(esc), tg_slice_cstr(why)));
    req_why(c->req, why != NULL && why[0] != '\0' ? why : "the answer is not TLS");
    tg__upstream_reach_failed(c->up);
    connect_failed(c, TG_EINVAL, 0); /* nothing of the request was sent */
}

static void on_conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct tg_upconn *c = s->data;
    if (nread == 0)
        return;
    if (c->tls == NULL) {
        conn_bytes(c, nread, buf);
        return;
    }
    if (nread < 0) {
        if (c->state == UC_HANDSHAKE)
            tls_failed(c, "the upstream closed the connection");
        else
            conn_bytes(c, nread, buf);
        return;
    }
    int was_up = tg_tls_established(c->tls);
    struct tg_buf out;
    tg_buf_init(&out);
    c->plain.len = 0;
    int rc = tg_tls_feed(c->tls, buf->base, (size_t)nread, &c->plain, sizeof(c->up->scratch) * 2, &out);
    if (conn_write_records(c, &out) != 0 && rc == 0)
        rc = TG_ECLOSED;
    if (rc == TG_EINVAL || rc == TG_ELIMIT) {
        if (!was_up && !tg_tls_established(c->tls)) {
            tls_failed(c, tg_tls_last_error(c->tls));
            return;
        }
        char esc[256];
        tg_log(TG_LOG_WARN, "upstream TLS error", "upstream=%s reason=%s", c->up->uc->name,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(tg_tls_last_error(c->tls))));
        struct tg_upreq *r = c->req;
        req_why(r, tg_tls_last_error(c->tls));
        if (r != NULL)
            tg__upconn_advance(c);
        tg__upconn_close(c); /* the requests behind r: TG_ECLOSED */
        if (r != NULL && r->orphan)
            tg__upreq_release(r);
        else if (r != NULL)
            tg__upreq_finish(r, TG_EINVAL);
        return;
    }
    if (!was_up && tg_tls_established(c->tls))
        connection_ready(c);
    if (c->state != UC_CLOSING && c->plain.len > 0) {
        uv_buf_t p = uv_buf_init(c->plain.base, (unsigned)c->plain.len);
        conn_bytes(c, (ssize_t)c->plain.len, &p);
    }
    if (c->state != UC_CLOSING && rc == TG_ECLOSED)
        conn_bytes(c, UV_EOF, NULL);
}

void tg__upconn_read_start(struct tg_upconn *c)
{
    uv_read_start((uv_stream_t *)&c->tcp, on_conn_alloc, on_conn_read);
}

/* The connection failed before it carried its request: the request is taken off it and ends with
 * err, now or (later, when this runs inside tg_upreq_start) from the loop. */
static void connect_failed(struct tg_upconn *c, int err, int later)
{
    tg__upconn_close_with(c, err, TG_RETRY_NONE, later); /* never written: they end with err */
}

static void on_connect_timeout(uv_timer_t *t)
{
    struct tg_upconn *c = t->data;
    tg_log(TG_LOG_WARN, c->state == UC_HANDSHAKE ? "upstream TLS handshake timed out" : "upstream connect timed out",
           "upstream=%s timeout_ms=%d", c->up->uc->name, c->up->uc->connect_timeout_ms);
    tg__upstream_reach_failed(c->up);
    connect_failed(c, TG_ETIMEDOUT, 0);
}

static void on_connected(uv_connect_t *req, int status)
{
    struct tg_upconn *c = req->data;
    if (c->state == UC_CLOSING)
        return;
    struct tg_upstream *u = c->up;
    if (status < 0) {
        if (!u->last_connect_failed)
            tg_log(TG_LOG_WARN, "upstream connect failed", "upstream=%s error=\"%s\"", u->uc->name,
                   uv_strerror(status));
        tg__upstream_reach_failed(u);
        connect_failed(c, status, 0);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    if (u->uc->tls) {
        /* The request waits for the handshake: a certificate that fails sends nothing. */
        c->tls = tg_tls_client_new(u->uc->tls_ctx, u->uc->tls_server_name ? u->uc->tls_server_name : u->uc->host);
        c->tls_conf = u->conf ? tg_conf_ref(u->conf) : NULL;
        if (c->tls == NULL) {
            tls_failed(c, "out of memory");
            return;
        }
        c->state = UC_HANDSHAKE;
        struct tg_buf out;
        tg_buf_init(&out);
        int rc = tg_tls_feed(c->tls, NULL, 0, &c->plain, 0, &out);
        if (conn_write_records(c, &out) != 0 || rc != 0) {
            tls_failed(c, rc != 0 ? tg_tls_last_error(c->tls) : "cannot write");
            return;
        }
        uv_read_start((uv_stream_t *)&c->tcp, on_conn_alloc, on_conn_read);
        return;
    }
    connection_ready(c);
}

/* Connected (and through the TLS handshake): carry the request, or wait in the pool. */
static void connection_ready(struct tg_upconn *c)
{
    struct tg_upstream *u = c->up;
    tg__upstream_reached(u);
    u->metrics->upstream_connects++;
    uv_timer_stop(&c->timer);
    if (c->req == NULL) {
        tg__upconn_to_idle(c);
        return;
    }
    c->state = UC_BUSY;
    if (tg__upconn_flush(c) != 0)
        tg__upconn_close(c);
}

static void start_connect(struct tg_upconn *c, const struct sockaddr *sa)
{
    c->state = UC_CONNECTING;
    c->connect_req.data = c;
    uv_timer_start(&c->timer, on_connect_timeout, (uint64_t)c->up->uc->connect_timeout_ms, 0);
    int e = uv_tcp_connect(&c->connect_req, &c->tcp, sa, on_connected);
    if (e != 0) {
        /* EMFILE and the like fail here, inside tg_upreq_start: the caller hears of it later. */
        tg_log(TG_LOG_WARN, "upstream connect failed", "upstream=%s error=\"%s\"", c->up->uc->name, uv_strerror(e));
        tg__upstream_reach_failed(c->up);
        connect_failed(c, e, 1); /* inside tg_upreq_start: the caller hears of it from the loop */
    }
}

static void on_resolved(uv_getaddrinfo_t *g, int status, struct addrinfo *res)
{
    struct tg_upconn *c = g->data;
    c->resolving = 0;
    if (c->state == UC_CLOSING || status < 0 || res == NULL) {
        if (res)
            uv_freeaddrinfo(res);
        if (c->state != UC_CLOSING) {
            tg_log(TG_LOG_WARN, "upstream name resolution failed", "upstream=%s host=%s error=\"%s\"",
                   c->up->uc->name, c->up->uc->host, uv_strerror(status));
            tg__upstream_reach_failed(c->up);
            tg__upconn_close_with(c, status < 0 ? status : TG_EINVAL, TG_RETRY_NONE, 0);
        }
        return;
    }
    start_connect(c, res->ai_addr);
    uv_freeaddrinfo(res);
}

/* A new connection, carrying r (or NULL) once connected. */
void tg__upconn_new(struct tg_upstream *u, struct tg_upreq *r, int dedicated)
{
    struct tg_upconn *c = tg_xcalloc(1, sizeof(*c));
    c->up = u;
    c->id = ++u->next_conn_id;
    c->dedicated = dedicated;
    uv_tcp_init(u->loop, &c->tcp);
    uv_timer_init(u->loop, &c->timer);
    uv_prepare_init(u->loop, &c->flush);
    c->tcp.data = c;
    c->timer.data = c;
    c->flush.data = c;
    c->gai.data = c;
    c->handles = 3;
    u->open_conns++;
    tg_list_init(&c->link);
    tg_list_init(&c->reqs);
    tg_list_init(&c->corked);
    tg_list_insert_tail(&u->busy, &c->link);
    if (dedicated)
        u->ndedicated++;
    else
        u->npooled++;
    if (r)
        tg__upconn_push(c, r); /* written once connected */
    if (u->addr_literal) {
        start_connect(c, (const struct sockaddr *)&u->addr);
        return;
    }
    c->state = UC_RESOLVING;
    c->resolving = 1;
    char port[8];
    snprintf(port, sizeof(port), "%d", u->uc->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    if (uv_getaddrinfo(u->loop, &c->gai, on_resolved, u->uc->host, port, &hints) != 0) {
        c->resolving = 0;
        tg__upconn_close_with(c, TG_EINVAL, TG_RETRY_NONE, 1);
    }
}
