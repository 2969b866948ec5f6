#include <llhttp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/log.h"
#include "upstream/stdio.h"
#include "upstream/pool.h"

enum upconn_state {
    UC_RESOLVING,  /* waiting for uv_getaddrinfo; req may be attached */
    UC_CONNECTING, /* uv_tcp_connect in progress; connect timer armed */
    UC_IDLE,       /* in up->idle; idle timer armed; no req */
    UC_BUSY,       /* req attached; request written, response being read */
    UC_CLOSING,    /* uv_close requested */
};

struct tg_upconn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_req;
    uv_getaddrinfo_t gai;
    struct tg_upstream *up;
    struct tg_list link; /* up->idle or up->busy */
    enum upconn_state state;
    int dedicated;
    int reused; /* completed at least one exchange: a stale keep-alive close is possible */
    int resolving;
    int handles;
    llhttp_t parser;
    struct tg_upreq *req;
    char hname[32];
    size_t hname_len;
    int hkind; /* 1 content-type, 2 mcp-session-id, 0 other */
    int in_value;
    int complete;
    uint64_t id;
};

/* One upstream's runtime. Owner: refcounted. The server holds one reference while the
 * upstream is in its conf; each call and legacy SSE link of a session holds one. It is freed by
 * maybe_free() once no reference, connection or request is left, so an upstream a reload
 * removed lives until its last call ends. It holds a reference on the conf its uc points into. */
struct tg_upstream {
    uv_loop_t *loop;
    const struct tg_upstream_conf *uc;
    struct tg_conf *conf; /* reference: uc points into it */
    int refcnt;
    struct tg_metrics *metrics;
    struct sockaddr_storage addr;
    int addr_literal;
    struct tg_list idle, busy, queue;
    size_t npooled, nidle, nqueued, ndedicated;
    int closing;
    size_t open_conns;
    size_t open_reqs; /* requests not yet released: the upstream is freed only when both are 0 */
    uint64_t next_conn_id;
    int last_connect_failed;
    struct tg_child *warm[64]; /* stdio: children started ahead of need */
    int nwarm;
    char scratch[65536];
};

struct tg_upreq {
    struct tg_upstream *up;
    struct tg_upconn *conn;
    const struct tg_upreq_cbs *cbs;
    void *ud;
    struct tg_buf out;
    uv_timer_t timer;
    struct tg_list qlink;
    int queued;
    int dedicated;
    int done;
    int retried;
    int got_bytes;
    int paused;
    int pending_err;
    int sent; /* bytes of the request may have reached the upstream */
    int status;
    uint64_t timeout_ms;
    uint64_t start_ns;
    char ctype[128];
    size_t ctype_len;
    char sid[256];
    size_t sid_len;
};

struct upwrite {
    uv_write_t req;
    char *base;
};

static void conn_close(struct tg_upconn *c);
static void finish_later(struct tg_upreq *r, int err);
static void maybe_free(struct tg_upstream *u);
static void conn_new(struct tg_upstream *u, struct tg_upreq *r, int dedicated);
static void acquire(struct tg_upreq *r);
static void finish(struct tg_upreq *r, int err);
static void serve_queue(struct tg_upstream *u);
static void on_conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

/* ---- response parsing ------------------------------------------------------ */

static struct tg_upconn *pconn(llhttp_t *p) { return p->data; }

static int on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct tg_upconn *c = pconn(p);
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

static int on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct tg_upconn *c = pconn(p);
    struct tg_upreq *r = c->req;
    if (r == NULL)
        return -1;
    if (!c->in_value) {
        c->in_value = 1;
        c->hkind = 0;
        if (c->hname_len == 12 && strncasecmp(c->hname, "content-type", 12) == 0) {
            c->hkind = 1;
            r->ctype_len = 0;
        } else if (c->hname_len == 14 && strncasecmp(c->hname, "mcp-session-id", 14) == 0) {
            c->hkind = 2;
            r->sid_len = 0;
        }
    }
    char *dst = c->hkind == 1 ? r->ctype : c->hkind == 2 ? r->sid : NULL;
    size_t *len = c->hkind == 1 ? &r->ctype_len : &r->sid_len;
    size_t cap = c->hkind == 1 ? sizeof(r->ctype) : sizeof(r->sid);
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

static int on_headers_complete(llhttp_t *p)
{
    struct tg_upconn *c = pconn(p);
    struct tg_upreq *r = c->req;
    if (r == NULL)
        return -1;
    r->status = p->status_code;
    if (r->status >= 100 && r->status < 200)
        return 0; /* interim response: llhttp goes on to the final one */
    r->cbs->on_head(r, r->status, r->ud);
    return c->req == NULL ? -1 : 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    struct tg_upconn *c = pconn(p);
    struct tg_upreq *r = c->req;
    if (r == NULL)
        return -1;
    r->cbs->on_data(r, at, n, r->ud);
    return c->req == NULL ? -1 : 0;
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

static void on_idle_timer(uv_timer_t *t)
{
    struct tg_upconn *c = t->data;
    conn_close(c);
}

static void on_write_done(uv_write_t *req, int status)
{
    struct upwrite *w = tg_container_of(req, struct upwrite, req);
    free(w->base);
    free(w);
    (void)status; /* a failed write shows up as a read error or EOF on the same connection */
}

static void conn_send(struct tg_upconn *c)
{
    struct tg_upreq *r = c->req;
    c->complete = 0;
    c->in_value = 0;
    c->hname_len = 0;
    llhttp_init(&c->parser, HTTP_RESPONSE, &resp_settings);
    c->parser.data = c;
    /* Try a direct write first (no request object, no extra epoll_ctl); queue what is left. */
    size_t off = 0;
    uv_buf_t b = uv_buf_init(r->out.base, (unsigned)r->out.len);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n > 0)
        off = (size_t)n;
    if (off < r->out.len && (n >= 0 || n == UV_EAGAIN)) {
        struct upwrite *w = tg_xmalloc(sizeof(*w));
        w->base = tg_xmalloc(r->out.len - off);
        memcpy(w->base, r->out.base + off, r->out.len - off);
        b = uv_buf_init(w->base, (unsigned)(r->out.len - off));
        n = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write_done);
        if (n != 0) {
            free(w->base);
            free(w);
        }
    }
    if (n < 0 && n != UV_EAGAIN) {
        c->req = NULL;
        r->conn = NULL;
        conn_close(c);
        finish_later(r, TG_ECLOSED); /* conn_send runs inside tg_upreq_start too */
        return;
    }
    r->sent = 1;
    if (!r->paused)
        uv_read_start((uv_stream_t *)&c->tcp, on_conn_alloc, on_conn_read);
}

static void attach(struct tg_upconn *c, struct tg_upreq *r)
{
    c->req = r;
    r->conn = c;
    c->state = UC_BUSY;
    tg_list_unlink(&c->link);
    tg_list_insert_tail(&c->up->busy, &c->link);
    uv_timer_stop(&c->timer);
    conn_send(c);
}

static void conn_to_idle(struct tg_upconn *c)
{
    struct tg_upstream *u = c->up;
    c->req = NULL;
    c->reused = 1;
    if (u->closing || c->dedicated) {
        conn_close(c);
        return;
    }
    c->state = UC_IDLE;
    tg_list_unlink(&c->link);
    tg_list_insert_tail(&u->idle, &c->link);
    u->nidle++;
    /* Keep reading while idle so that a server-side close is noticed at once. */
    uv_read_start((uv_stream_t *)&c->tcp, on_conn_alloc, on_conn_read);
    uv_timer_start(&c->timer, on_idle_timer, (uint64_t)u->uc->pool_idle_timeout_ms, 0);
    serve_queue(u);
}

static void on_conn_closed(uv_handle_t *h)
{
    struct tg_upconn *c = h->data;
    if (--c->handles > 0)
        return;
    struct tg_upstream *u = c->up;
    free(c);
    u->open_conns--;
    maybe_free(u);
}

static void conn_close(struct tg_upconn *c)
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
    struct tg_upreq *r = c->req;
    c->req = NULL;
    if (r != NULL)
        r->conn = NULL;
    if (c->resolving)
        uv_cancel((uv_req_t *)&c->gai);
    uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_closed);
    if (r != NULL && !r->done)
        finish(r, TG_ECLOSED);
    if (!u->closing)
        serve_queue(u); /* a pool slot is free again */
}

static void on_conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct tg_upconn *c = h->data;
    *buf = uv_buf_init(c->up->scratch, sizeof(c->up->scratch));
}

static void on_conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    struct tg_upconn *c = s->data;
    struct tg_upstream *u = c->up;
    struct tg_upreq *r = c->req;
    if (nread == 0)
        return;
    if (c->state == UC_IDLE) {
        /* Bytes or EOF on an idle connection: the server closed it or misbehaves. */
        conn_close(c);
        return;
    }
    if (r == NULL) {
        conn_close(c);
        return;
    }
    if (nread < 0) {
        if (r->got_bytes && llhttp_finish(&c->parser) == HPE_OK && c->complete == 0 && r->status >= 200) {
            /* body delimited by the close: llhttp_finish ran on_message_complete */
        }
        if (c->complete) {
            c->req = NULL;
            r->conn = NULL;
            conn_close(c);
            finish(r, 0);
            return;
        }
        if (!r->got_bytes && c->reused && !r->retried && !u->closing) {
            /* A pooled connection the server had closed while idle: try once more on a fresh one. */
            c->req = NULL;
            r->conn = NULL;
            r->retried = 1;
            conn_close(c);
            acquire(r);
            return;
        }
        c->req = NULL;
        r->conn = NULL;
        conn_close(c);
        finish(r, TG_ECLOSED);
        return;
    }
    r->got_bytes = 1;
    llhttp_errno_t e = llhttp_execute(&c->parser, buf->base, (size_t)nread);
    if (c->state == UC_CLOSING)
        return;
    r = c->req;
    if (r == NULL) { /* cancelled from a callback */
        conn_close(c);
        return;
    }
    if (e == HPE_PAUSED && c->complete) {
        const char *pos = llhttp_get_error_pos(&c->parser);
        int extra = pos != NULL && pos < buf->base + nread;
        int keep = llhttp_should_keep_alive(&c->parser) && !extra;
        c->req = NULL;
        r->conn = NULL;
        if (keep)
            conn_to_idle(c);
        else
            conn_close(c);
        finish(r, 0);
        return;
    }
    if (e != HPE_OK) {
        char esc[128];
        tg_log(TG_LOG_WARN, "malformed upstream response", "upstream=%s error=%s", u->uc->name,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(llhttp_get_error_reason(&c->parser))));
        c->req = NULL;
        r->conn = NULL;
        conn_close(c);
        finish(r, TG_EINVAL);
    }
}

static void on_connect_timeout(uv_timer_t *t)
{
    struct tg_upconn *c = t->data;
    tg_log(TG_LOG_WARN, "upstream connect timed out", "upstream=%s timeout_ms=%d", c->up->uc->name,
           c->up->uc->connect_timeout_ms);
    c->up->last_connect_failed = 1;
    struct tg_upreq *r = c->req;
    c->req = NULL;
    if (r) {
        r->conn = NULL;
        conn_close(c);
        finish(r, TG_ETIMEDOUT);
    } else {
        conn_close(c);
    }
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
        u->last_connect_failed = 1;
        struct tg_upreq *r = c->req;
        c->req = NULL;
        if (r)
            r->conn = NULL;
        conn_close(c);
        if (r)
            finish(r, status);
        return;
    }
    if (u->last_connect_failed)
        tg_log(TG_LOG_INFO, "upstream reachable again", "upstream=%s", u->uc->name);
    u->last_connect_failed = 0;
    u->metrics->upstream_connects++;
    uv_timer_stop(&c->timer);
    uv_tcp_nodelay(&c->tcp, 1);
    struct tg_upreq *r = c->req;
    if (r == NULL) {
        conn_to_idle(c);
        return;
    }
    c->state = UC_BUSY;
    conn_send(c);
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
        c->up->last_connect_failed = 1;
        struct tg_upreq *r = c->req;
        c->req = NULL;
        if (r)
            r->conn = NULL;
        conn_close(c);
        if (r)
            finish_later(r, e);
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
            struct tg_upreq *r = c->req;
            c->req = NULL;
            if (r)
                r->conn = NULL;
            conn_close(c);
            if (r)
                finish(r, status < 0 ? status : TG_EINVAL);
        }
        return;
    }
    start_connect(c, res->ai_addr);
    uv_freeaddrinfo(res);
}

/* A new connection, carrying r (or NULL) once connected. */
static void conn_new(struct tg_upstream *u, struct tg_upreq *r, int dedicated)
{
    struct tg_upconn *c = tg_xcalloc(1, sizeof(*c));
    c->up = u;
    c->id = ++u->next_conn_id;
    c->dedicated = dedicated;
    uv_tcp_init(u->loop, &c->tcp);
    uv_timer_init(u->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->gai.data = c;
    c->handles = 2;
    u->open_conns++;
    tg_list_init(&c->link);
    tg_list_insert_tail(&u->busy, &c->link);
    if (dedicated)
        u->ndedicated++;
    else
        u->npooled++;
    c->req = r;
    if (r)
        r->conn = c;
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
        c->req = NULL;
        if (r)
            r->conn = NULL;
        conn_close(c);
        if (r)
            finish_later(r, TG_EINVAL);
    }
}

/* ---- requests ------------------------------------------------------------------- */

static void on_req_timer_closed(uv_handle_t *h)
{
    struct tg_upreq *r = h->data;
    struct tg_upstream *u = r->up;
    tg_buf_dispose(&r->out);
    free(r);
    u->open_reqs--;
    maybe_free(u);
}

static void req_release(struct tg_upreq *r)
{
    uv_close((uv_handle_t *)&r->timer, on_req_timer_closed);
}

/* Mark r done and take it off its queue or connection (a half-read response cannot be skipped
 * on a shared connection: that connection is closed). Returns 0 if r was already done. */
static void req_unhook(struct tg_upreq *r)
{
    if (r->queued) {
        tg_list_unlink(&r->qlink);
        r->queued = 0;
        r->up->nqueued--;
    }
    if (r->conn != NULL) {
        struct tg_upconn *c = r->conn;
        c->req = NULL;
        r->conn = NULL;
        conn_close(c);
    }
}

static int req_detach(struct tg_upreq *r)
{
    if (r->done)
        return 0;
    r->done = 1;
    uv_timer_stop(&r->timer);
    req_unhook(r);
    return 1;
}

static void finish(struct tg_upreq *r, int err)
{
    if (!req_detach(r))
        return;
    if (err != 0) {
        r->up->metrics->upstream_errors++;
        if (err == TG_ETIMEDOUT)
            r->up->metrics->upstream_timeouts++;
    }
    tg_metrics_observe_latency(r->up->metrics, tg_upreq_elapsed_ms(r));
    r->cbs->on_done(r, err, r->ud);
    req_release(r);
}

static void on_req_timer(uv_timer_t *t)
{
    struct tg_upreq *r = t->data;
    if (r->pending_err) {
        finish(r, r->pending_err);
        return;
    }
    if (r->queued) {
        r->up->metrics->upstream_queue_timeouts++;
        tg_log(TG_LOG_WARN, "upstream queue deadline passed", "upstream=%s queue_timeout_ms=%d", r->up->uc->name,
               r->up->uc->queue_timeout_ms);
        finish(r, TG_ELIMIT);
        return;
    }
    tg_log(TG_LOG_WARN, "upstream call timed out", "upstream=%s timeout_ms=%llu", r->up->uc->name,
           (unsigned long long)r->timeout_ms);
    finish(r, TG_ETIMEDOUT);
}

static void fail_later(struct tg_upreq *r, int err)
{
    r->pending_err = err;
    uv_timer_start(&r->timer, on_req_timer, 0, 0);
}

/* A failure found inside a call from the owner (tg_upreq_start, a pool change): r leaves its
 * queue or connection now, and on_done comes from the loop, after that call has returned. */
static void finish_later(struct tg_upreq *r, int err)
{
    if (r->done || r->pending_err)
        return;
    req_unhook(r);
    fail_later(r, err);
}

static void serve_queue(struct tg_upstream *u)
{
    while (!tg_list_empty(&u->queue)) {
        struct tg_upreq *r = tg_container_of(u->queue.next, struct tg_upreq, qlink);
        if (u->nidle == 0 && u->npooled >= (size_t)u->uc->pool_size)
            return;
        tg_list_unlink(&r->qlink);
        r->queued = 0;
        u->nqueued--;
        if (r->timeout_ms)
            uv_timer_start(&r->timer, on_req_timer, r->timeout_ms, 0);
        else
            uv_timer_stop(&r->timer);
        acquire(r);
    }
}

static void acquire(struct tg_upreq *r)
{
    struct tg_upstream *u = r->up;
    if (u->closing) {
        fail_later(r, TG_ECLOSED);
        return;
    }
    if (r->dedicated) {
        conn_new(u, r, 1);
        return;
    }
    if (!tg_list_empty(&u->idle)) {
        /* Most recently used first: the others age out of the pool. */
        struct tg_upconn *c = tg_container_of(u->idle.prev, struct tg_upconn, link);
        u->nidle--;
        attach(c, r);
        return;
    }
    if (u->npooled < (size_t)u->uc->pool_size) {
        conn_new(u, r, 0);
        return;
    }
    if (u->nqueued >= (size_t)u->uc->queue_max) {
        tg_log(TG_LOG_WARN, "upstream queue full", "upstream=%s queue=%d", u->uc->name, u->uc->queue_max);
        fail_later(r, TG_ELIMIT);
        return;
    }
    r->queued = 1;
    u->nqueued++;
    tg_list_insert_tail(&u->queue, &r->qlink);
    uv_timer_start(&r->timer, on_req_timer, (uint64_t)u->uc->queue_timeout_ms, 0);
}

struct tg_upreq *tg_upreq_start(struct tg_upstream *u, const char *method, const char *extra_headers,
                                const char *body, size_t len, int dedicated, uint64_t timeout_ms,
                                const struct tg_upreq_cbs *cbs, void *ud)
{
    return tg_upreq_start_to(u, method, NULL, extra_headers, body, len, dedicated, timeout_ms, cbs, ud);
}

struct tg_upreq *tg_upreq_start_to(struct tg_upstream *u, const char *method, const char *target,
                                   const char *extra_headers, const char *body, size_t len, int dedicated,
                                   uint64_t timeout_ms, const struct tg_upreq_cbs *cbs, void *ud)
{
    const struct tg_upstream_conf *uc = u->uc;
    struct tg_upreq *r = tg_xcalloc(1, sizeof(*r));
    r->up = u;
    u->open_reqs++;
    r->cbs = cbs;
    r->ud = ud;
    r->dedicated = dedicated;
    r->timeout_ms = timeout_ms;
    r->start_ns = uv_hrtime();
    tg_list_init(&r->qlink);
    uv_timer_init(u->loop, &r->timer);
    r->timer.data = r;
    tg_buf_init(&r->out);
    if (tg_buf_try_reserve(&r->out, len + 512, 0) != 0)
        abort();
    tg_buf_appendf(&r->out, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, target ? target : uc->path, uc->authority);
    for (size_t i = 0; i < uc->nheaders; i++)
        tg_buf_appendf(&r->out, "%s: %s\r\n", uc->headers[i].name, uc->headers[i].value);
    if (extra_headers)
        tg_buf_appends(&r->out, extra_headers);
    if (body != NULL) {
        tg_buf_appendf(&r->out, "Content-Length: %zu\r\n\r\n", len);
        tg_buf_append(&r->out, body, len);
    } else {
        tg_buf_appends(&r->out, "\r\n");
    }
    u->metrics->upstream_calls++;
    if (timeout_ms)
        uv_timer_start(&r->timer, on_req_timer, timeout_ms, 0);
    acquire(r);
    return r;
}

void tg_upreq_cancel(struct tg_upreq *r)
{
    if (req_detach(r))
        req_release(r);
}

void tg_upreq_pause(struct tg_upreq *r)
{
    if (r->paused)
        return;
    r->paused = 1;
    if (r->conn && r->conn->state == UC_BUSY)
        uv_read_stop((uv_stream_t *)&r->conn->tcp);
}

void tg_upreq_resume(struct tg_upreq *r)
{
    if (!r->paused)
        return;
    r->paused = 0;
    if (r->conn && r->conn->state == UC_BUSY)
        uv_read_start((uv_stream_t *)&r->conn->tcp, on_conn_alloc, on_conn_read);
}

void tg_upreq_touch(struct tg_upreq *r)
{
    if (!r->done && !r->queued && !r->pending_err && r->timeout_ms)
        uv_timer_start(&r->timer, on_req_timer, r->timeout_ms, 0);
}

struct tg_slice tg_upreq_content_type(const struct tg_upreq *r) { return tg_slice_of(r->ctype, r->ctype_len); }
struct tg_slice tg_upreq_session_id(const struct tg_upreq *r) { return tg_slice_of(r->sid, r->sid_len); }
int tg_upreq_status(const struct tg_upreq *r) { return r->status; }
int tg_upreq_sent(const struct tg_upreq *r) { return r->sent; }
double tg_upreq_elapsed_ms(const struct tg_upreq *r) { return (double)(uv_hrtime() - r->start_ns) / 1e6; }

/* ---- upstream ---------------------------------------------------------------------- */

/* Warm children sit in fixed slots (a child's exit callback clears its own slot). */
static void on_warm_exit(void *ud, int64_t status, int sig)
{
    struct tg_child **slot = ud;
    *slot = NULL;
}

static void fill_warm(struct tg_upstream *u)
{
    if (u->uc->transport != TG_UP_STDIO || u->closing)
        return;
    int want = u->uc->warm < 64 ? u->uc->warm : 64;
    int have = 0;
    for (int i = 0; i < 64; i++)
        have += u->warm[i] != NULL;
    for (int i = 0; i < 64 && have < want; i++) {
        if (u->warm[i] != NULL)
            continue;
        int err = 0;
        struct tg_child *c = tg_child_spawn(u->loop, u->uc, (size_t)65536 * 1024, NULL, on_warm_exit, &u->warm[i], &err);
        if (c == NULL) {
            u->last_connect_failed = 1;
            return;
        }
        u->warm[i] = c;
        have++;
    }
    u->nwarm = have;
}

struct tg_child *tg_upstream_take_child(struct tg_upstream *u, void (*on_message)(void *, const char *, size_t),
                                        void (*on_exit)(void *, int64_t, int), void *ud, int *err)
{
    struct tg_child *c = NULL;
    for (int i = 0; i < 64 && c == NULL; i++) {
        if (u->warm[i] != NULL && tg_child_alive(u->warm[i])) {
            c = u->warm[i];
            u->warm[i] = NULL;
        }
    }
    if (c != NULL) {
        tg_child_bind(c, on_message, on_exit, ud);
    } else {
        c = tg_child_spawn(u->loop, u->uc, (size_t)65536 * 1024, on_message, on_exit, ud, err);
        u->last_connect_failed = c == NULL;
    }
    fill_warm(u);
    return c;
}

struct tg_upstream *tg_upstream_new(uv_loop_t *loop, struct tg_conf *conf, const struct tg_upstream_conf *uc,
                                    struct tg_metrics *m)
{
    struct tg_upstream *u = tg_xcalloc(1, sizeof(*u));
    u->loop = loop;
    u->uc = uc;
    u->conf = conf ? tg_conf_ref(conf) : NULL;
    u->refcnt = 1;
    u->metrics = m;
    tg_list_init(&u->idle);
    tg_list_init(&u->busy);
    tg_list_init(&u->queue);
    if (uc->host != NULL && (uv_ip4_addr(uc->host, uc->port, (struct sockaddr_in *)&u->addr) == 0 ||
                             uv_ip6_addr(uc->host, uc->port, (struct sockaddr_in6 *)&u->addr) == 0))
        u->addr_literal = 1;
    fill_warm(u);
    return u;
}

static void maybe_free(struct tg_upstream *u)
{
    if (u->refcnt > 0 || u->open_conns > 0 || u->open_reqs > 0)
        return;
    if (u->conf)
        tg_conf_unref(u->conf);
    free(u);
}

struct tg_upstream *tg_upstream_ref(struct tg_upstream *u)
{
    u->refcnt++;
    return u;
}

void tg_upstream_unref(struct tg_upstream *u)
{
    if (u == NULL)
        return;
    u->refcnt--;
    maybe_free(u);
}

static void stop_new_work(struct tg_upstream *u)
{
    u->closing = 1;
    for (int i = 0; i < 64; i++) {
        tg_child_kill(u->warm[i]);
        u->warm[i] = NULL;
    }
    u->nwarm = 0;
    while (!tg_list_empty(&u->idle))
        conn_close(tg_container_of(u->idle.next, struct tg_upconn, link));
}

void tg_upstream_close(struct tg_upstream *u)
{
    stop_new_work(u);
    while (!tg_list_empty(&u->queue)) {
        struct tg_upreq *r = tg_container_of(u->queue.next, struct tg_upreq, qlink);
        finish(r, TG_ECLOSED);
    }
    u->refcnt++; /* conn_close may release the last request: free only at the end */
    while (!tg_list_empty(&u->busy))
        conn_close(tg_container_of(u->busy.next, struct tg_upconn, link));
    u->refcnt -= 2; /* the one just taken and the owner's */
    maybe_free(u);
}

void tg_upstream_retire(struct tg_upstream *u)
{
    stop_new_work(u);
    /* Queued requests were never sent and no new connection will be made for them. */
    while (!tg_list_empty(&u->queue))
        finish_later(tg_container_of(u->queue.next, struct tg_upreq, qlink), TG_ECLOSED);
    tg_upstream_unref(u);
}

const struct tg_upstream_conf *tg_upstream_conf(const struct tg_upstream *u) { return u->uc; }

void tg_upstream_set_conf(struct tg_upstream *u, struct tg_conf *conf, const struct tg_upstream_conf *uc)
{
    if (conf)
        tg_conf_ref(conf);
    if (u->conf)
        tg_conf_unref(u->conf);
    u->conf = conf;
    u->uc = uc;
    serve_queue(u); /* a larger pool may take queued calls now */
}

void tg_upstream_stats(const struct tg_upstream *u, size_t *total, size_t *idle, size_t *queued, size_t *dedicated)
{
    *total = u->npooled;
    *idle = u->nidle;
    *queued = u->nqueued;
    *dedicated = u->ndedicated;
}

int tg_upstream_reachable(const struct tg_upstream *u) { return !u->last_connect_failed; }
