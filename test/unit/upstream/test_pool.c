/* upstream/pool/pool.c: the keep-alive pool, run on a real uv loop against a
 * small HTTP/1.1 server living in the same loop (127.0.0.1, ephemeral port).
 *
 * The server echoes each request body as the response body, so a response
 * that reached the wrong request is noticed, and counts accepted TCP
 * connections, so pooling is measured rather than assumed. Every case ends by
 * closing the upstream and the server and running the loop until no handle is
 * left; uv_loop_close() must then succeed (nothing left open) and LSan checks
 * that nothing leaked. A watchdog timer bounds every wait. */
#include "test/unit/unit.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <netdb.h>
#include <llhttp.h>
#include <strings.h>
#include <uv.h>

#include "core/conf/conf.h"
#include "core/base/metrics.h"
#include "upstream/pool/pool.h"

/* ---- the test server ---------------------------------------------------------------- */

enum srv_mode {
    SRV_KEEPALIVE,      /* Content-Length, keep-alive */
    SRV_CLOSE,          /* "Connection: close", then closes */
    SRV_CLOSE_QUIETLY,  /* keep-alive headers, but closes right after each response */
    SRV_CHUNKED,        /* Transfer-Encoding: chunked, second half of the chunks a few ms later */
    SRV_SILENT,         /* reads requests, never answers */
    SRV_FIRST_ONLY,     /* answers the first request it sees, then goes silent */
    SRV_EOF_BODY,       /* no Content-Length: the body ends when the server closes */
    SRV_MALFORMED,      /* not an HTTP response */
};

struct srv {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int port;
    enum srv_mode mode;
    int accepted;   /* TCP connections accepted */
    int requests;   /* complete requests parsed */
    int answered;
    int eofs;       /* connections the client closed */
    size_t chunk;   /* chunk size in SRV_CHUNKED */
    int status;     /* final status (200) */
    const char *ctype;
    int interim;    /* send "100 Continue" before the response */
    int garbage;    /* send bytes nobody asked for right after the response */
    const char *trailer; /* SRV_CHUNKED: trailer fields after the last chunk */
    uint64_t delay_ms; /* SRV_KEEPALIVE: answer this long after the request */
    int hold;       /* SRV_KEEPALIVE: answers wait (in order, per connection) for srv_release() */
    int quiet_after; /* SRV_KEEPALIVE: after this many answers in all, close without a word */
    int reads;      /* reads that brought bytes */
    int served_by[256]; /* connection number (1-based, in accept order) of each request */
    struct tg_list conns;
    char last_method[16], last_url[64], last_host[128], last_x_test[64], last_accept[128];
};

struct sconn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    struct srv *srv;
    llhttp_t parser;
    struct tg_buf body, later;
    char hname[64];
    size_t hname_len;
    int in_value;
    char *hdst;
    size_t hcap, *hlen;
    char url[64], host[128], x_test[64], accept[128];
    size_t url_len, host_len, x_test_len, accept_len;
    struct tg_list link;
    int closing;
    int ending; /* a write that closes after it is queued: nothing more is written */
    int handles;
    int number; /* accept order, from 1 */
};

struct swrite {
    uv_write_t req;
    struct sconn *c;
    int close_after;
    char data[];
};

static void sc_close(struct sconn *c);

static void on_sc_closed(uv_handle_t *h)
{
    struct sconn *c = h->data;
    if (--c->handles > 0)
        return;
    tg_list_unlink(&c->link);
    tg_buf_dispose(&c->body);
    tg_buf_dispose(&c->later);
    free(c);
}

static void sc_close(struct sconn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_sc_closed);
    uv_close((uv_handle_t *)&c->timer, on_sc_closed);
}

static void on_swrite(uv_write_t *req, int status)
{
    struct swrite *w = tg_container_of(req, struct swrite, req);
    if (w->close_after)
        sc_close(w->c);
    free(w);
}

static void sc_write(struct sconn *c, const char *p, size_t n, int close_after)
{
    if (c->closing || c->ending)
        return;
    c->ending = close_after;
    struct swrite *w = malloc(sizeof(*w) + n);
    assert_non_null(w);
    w->c = c;
    w->close_after = close_after;
    memcpy(w->data, p, n);
    uv_buf_t b = uv_buf_init(w->data, (unsigned)n);
    if (uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_swrite) != 0) {
        free(w);
        sc_close(c);
    }
}

static void on_sc_timer(uv_timer_t *t)
{
    struct sconn *c = t->data;
    sc_write(c, c->later.base, c->later.len, 0);
    c->later.len = 0;
}

static void chunk_into(struct tg_buf *out, const char *p, size_t n)
{
    tg_buf_appendf(out, "%zx\r\n", n);
    tg_buf_append(out, p, n);
    tg_buf_appends(out, "\r\n");
}

static void respond(struct sconn *c)
{
    struct srv *s = c->srv;
    struct tg_buf r;
    tg_buf_init(&r);
    const char *body = c->body.base ? c->body.base : "";
    size_t n = c->body.len;
    switch (s->mode) {
    case SRV_SILENT:
        return;
    case SRV_FIRST_ONLY:
        if (s->answered > 0)
            return;
        /* fall through */
    case SRV_KEEPALIVE:
    case SRV_CLOSE:
    case SRV_CLOSE_QUIETLY:
        if (s->interim)
            tg_buf_appends(&r, "HTTP/1.1 100 Continue\r\n\r\n");
        tg_buf_appendf(&r, "HTTP/1.1 %d X\r\nContent-Type: %s\r\nMcp-Session-Id: sess-%d\r\n%s"
                           "Content-Length: %zu\r\n\r\n",
                       s->status, s->ctype, s->answered + 1, s->mode == SRV_CLOSE ? "Connection: close\r\n" : "", n);
        tg_buf_append(&r, body, n);
        if (s->garbage)
            tg_buf_appends(&r, "HTTP/1.1 200 OK\r\n");
        s->answered++;
        if (s->hold && s->mode == SRV_KEEPALIVE) {
            tg_buf_append(&c->later, r.base, r.len);
            break;
        }
        if (s->delay_ms && s->mode == SRV_KEEPALIVE) {
            c->later.len = 0;
            tg_buf_append(&c->later, r.base, r.len);
            uv_timer_start(&c->timer, on_sc_timer, s->delay_ms, 0);
            break;
        }
        sc_write(c, r.base, r.len,
                 s->mode == SRV_CLOSE || s->mode == SRV_CLOSE_QUIETLY || s->answered == s->quiet_after);
        break;
    case SRV_EOF_BODY:
        tg_buf_appends(&r, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n");
        tg_buf_append(&r, body, n);
        s->answered++;
        sc_write(c, r.base, r.len, 1);
        break;
    case SRV_MALFORMED:
        tg_buf_appends(&r, "HTTP/1.1 2OO OK\r\n\r\n");
        sc_write(c, r.base, r.len, 0);
        break;
    case SRV_CHUNKED: {
        tg_buf_appends(&r, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
        size_t half = n / 2, i = 0;
        for (; i < half; i += s->chunk)
            chunk_into(&r, body + i, (i + s->chunk <= half ? s->chunk : half - i));
        c->later.len = 0;
        for (i = half; i < n; i += s->chunk)
            chunk_into(&c->later, body + i, (i + s->chunk <= n ? s->chunk : n - i));
        tg_buf_appends(&c->later, "0\r\n");
        if (s->trailer)
            tg_buf_appends(&c->later, s->trailer);
        tg_buf_appends(&c->later, "\r\n");
        s->answered++;
        sc_write(c, r.base, r.len, 0);
        uv_timer_start(&c->timer, on_sc_timer, 3, 0);
        break;
    }
    }
    tg_buf_dispose(&r);
}

static struct sconn *sconn_of(llhttp_t *p) { return p->data; }

static int on_s_message_begin(llhttp_t *p)
{
    struct sconn *c = sconn_of(p);
    c->body.len = 0;
    c->url_len = c->host_len = c->x_test_len = c->accept_len = 0;
    c->in_value = 0;
    c->hname_len = 0;
    return 0;
}

static void bounded_append(char *dst, size_t cap, size_t *len, const char *at, size_t n)
{
    size_t k = n < cap - 1 - *len ? n : cap - 1 - *len;
    memcpy(dst + *len, at, k);
    *len += k;
    dst[*len] = '\0';
}

static int on_s_url(llhttp_t *p, const char *at, size_t n)
{
    struct sconn *c = sconn_of(p);
    bounded_append(c->url, sizeof(c->url), &c->url_len, at, n);
    return 0;
}

static int on_s_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct sconn *c = sconn_of(p);
    if (c->in_value) {
        c->in_value = 0;
        c->hname_len = 0;
    }
    bounded_append(c->hname, sizeof(c->hname), &c->hname_len, at, n);
    return 0;
}

static int on_s_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct sconn *c = sconn_of(p);
    if (!c->in_value) {
        c->in_value = 1;
        c->hdst = NULL;
        if (strcasecmp(c->hname, "host") == 0) {
            c->hdst = c->host, c->hcap = sizeof(c->host), c->hlen = &c->host_len;
        } else if (strcasecmp(c->hname, "x-test") == 0) {
            c->hdst = c->x_test, c->hcap = sizeof(c->x_test), c->hlen = &c->x_test_len;
        } else if (strcasecmp(c->hname, "accept") == 0) {
            c->hdst = c->accept, c->hcap = sizeof(c->accept), c->hlen = &c->accept_len;
        }
        if (c->hdst)
            *c->hlen = 0;
    }
    if (c->hdst)
        bounded_append(c->hdst, c->hcap, c->hlen, at, n);
    return 0;
}

static int on_s_body(llhttp_t *p, const char *at, size_t n)
{
    tg_buf_append(&sconn_of(p)->body, at, n);
    return 0;
}

static int on_s_message_complete(llhttp_t *p)
{
    struct sconn *c = sconn_of(p);
    struct srv *s = c->srv;
    if (s->requests < 256)
        s->served_by[s->requests] = c->number;
    s->requests++;
    snprintf(s->last_method, sizeof(s->last_method), "%s", llhttp_method_name((llhttp_method_t)llhttp_get_method(p)));
    snprintf(s->last_url, sizeof(s->last_url), "%s", c->url);
    snprintf(s->last_host, sizeof(s->last_host), "%s", c->host);
    snprintf(s->last_x_test, sizeof(s->last_x_test), "%s", c->x_test);
    snprintf(s->last_accept, sizeof(s->last_accept), "%s", c->accept);
    respond(c);
    /* A server that ends the connection processes nothing after (RFC 9112 §9.6). */
    return s->mode == SRV_CLOSE ? HPE_PAUSED : 0;
}

static llhttp_settings_t srv_settings;

static void on_s_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char scratch[65536];
    *buf = uv_buf_init(scratch, sizeof(scratch));
}

static void on_s_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
    struct sconn *c = st->data;
    if (nread == 0)
        return;
    if (nread < 0) {
        c->srv->eofs++;
        sc_close(c);
        return;
    }
    c->srv->reads++;
    llhttp_errno_t e = llhttp_execute(&c->parser, buf->base, (size_t)nread);
    if (e == HPE_PAUSED)
        uv_read_stop(st); /* SRV_CLOSE: the answer's write closes it */
    else if (e != HPE_OK)
        sc_close(c);
}

/* SRV_KEEPALIVE with hold: every held answer goes out now. */
static void srv_release(struct srv *s)
{
    for (struct tg_list *l = s->conns.next; l != &s->conns; l = l->next) {
        struct sconn *c = tg_container_of(l, struct sconn, link);
        if (c->later.len > 0)
            sc_write(c, c->later.base, c->later.len, 0);
        c->later.len = 0;
    }
}

static void on_s_connection(uv_stream_t *l, int status)
{
    struct srv *s = l->data;
    assert_int_equal(status, 0);
    struct sconn *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->srv = s;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->handles = 2;
    tg_buf_init(&c->body);
    tg_buf_init(&c->later);
    tg_list_insert_tail(&s->conns, &c->link);
    llhttp_init(&c->parser, HTTP_REQUEST, &srv_settings);
    c->parser.data = c;
    assert_int_equal(uv_accept(l, (uv_stream_t *)&c->tcp), 0);
    s->accepted++;
    c->number = s->accepted;
    uv_read_start((uv_stream_t *)&c->tcp, on_s_alloc, on_s_read);
}

static void srv_start(struct srv *s, uv_loop_t *loop, enum srv_mode mode)
{
    memset(s, 0, sizeof(*s));
    llhttp_settings_init(&srv_settings);
    srv_settings.on_message_begin = on_s_message_begin;
    srv_settings.on_url = on_s_url;
    srv_settings.on_header_field = on_s_header_field;
    srv_settings.on_header_value = on_s_header_value;
    srv_settings.on_body = on_s_body;
    srv_settings.on_message_complete = on_s_message_complete;
    s->loop = loop;
    s->mode = mode;
    s->chunk = 7;
    s->status = 200;
    s->ctype = "application/json";
    tg_list_init(&s->conns);
    struct sockaddr_in a;
    assert_int_equal(uv_ip4_addr("127.0.0.1", 0, &a), 0);
    assert_int_equal(uv_tcp_init(loop, &s->listener), 0);
    s->listener.data = s;
    assert_int_equal(uv_tcp_bind(&s->listener, (const struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&s->listener, 128, on_s_connection), 0);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    assert_int_equal(uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len), 0);
    s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    assert_true(s->port > 0);
}

static void srv_close(struct srv *s)
{
    if (!uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, NULL);
    for (struct tg_list *l = s->conns.next; l != &s->conns;) {
        struct tg_list *next = l->next;
        sc_close(tg_container_of(l, struct sconn, link));
        l = next;
    }
}

/* ---- the client side ---------------------------------------------------------------- */

#define MAXCALLS 80

struct fixture;

struct call {
    struct fixture *f;
    int idx;
    struct tg_upreq *r;
    int started, done, heads, err, status;
    int sent_at_done; /* tg_upreq_sent() in on_done */
    struct tg_buf body;
    char sent[160];
    size_t sent_len;
    char ctype[64], sid[64];
    char done_ctype[64], done_sid[64]; /* the same, read again when the call is done */
    char why[128]; /* tg_upreq_error() in on_done, or "" */
    uint64_t timeout_ms;
    uint64_t t_start, t_done;
};

struct fixture {
    uv_loop_t loop;
    struct srv srv;
    char authority[64];
    struct tg_header hdr;
    struct tg_upstream_conf uc;
    struct tg_metrics m;
    struct tg_upstream *u;
    uv_timer_t watchdog;
    int timed_out;
    int walk_count;
    int ndone;
    int chain_to;        /* on_done of call i starts call i + 1 while i + 1 < chain_to */
    uint64_t chain_timeout_ms;
    void (*after_done)(struct call *c); /* extra hook run at the end of on_done */
    size_t body_pad;     /* bytes of padding in each request body */
    struct call calls[MAXCALLS];
};

static void on_head(struct tg_upreq *r, int status, void *ud)
{
    struct call *c = ud;
    assert_ptr_equal(r, c->r);
    assert_int_equal(c->done, 0);
    c->heads++;
    c->status = status;
    assert_int_equal(tg_upreq_status(r), status);
    struct tg_slice ct = tg_upreq_content_type(r), sid = tg_upreq_session_id(r);
    snprintf(c->ctype, sizeof(c->ctype), "%.*s", (int)ct.len, ct.ptr);
    snprintf(c->sid, sizeof(c->sid), "%.*s", (int)sid.len, sid.ptr);
}

static void on_data(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct call *c = ud;
    assert_int_equal(c->done, 0);
    assert_int_equal(c->heads, 1);
    tg_buf_append(&c->body, p, n);
}

static void start_call(struct fixture *f, int i, uint64_t timeout_ms);

static void on_done(struct tg_upreq *r, int err, void *ud)
{
    struct call *c = ud;
    struct fixture *f = c->f;
    assert_ptr_equal(r, c->r);
    c->done++;
    c->err = err;
    c->sent_at_done = tg_upreq_sent(r);
    c->t_done = uv_now(&f->loop);
    struct tg_slice ct = tg_upreq_content_type(r), sid = tg_upreq_session_id(r);
    snprintf(c->done_ctype, sizeof(c->done_ctype), "%.*s", (int)ct.len, ct.ptr);
    snprintf(c->done_sid, sizeof(c->done_sid), "%.*s", (int)sid.len, sid.ptr);
    const char *why = tg_upreq_error(r);
    snprintf(c->why, sizeof(c->why), "%s", why ? why : "");
    if (err == 0)
        assert_null(why);
    assert_true(tg_upreq_elapsed_ms(r) >= 0);
    f->ndone++;
    if (c->idx + 1 < f->chain_to)
        start_call(f, c->idx + 1, f->chain_timeout_ms);
    if (f->after_done)
        f->after_done(c);
}

static const struct tg_upreq_cbs cbs = {on_head, on_data, on_done};

static void start_call(struct fixture *f, int i, uint64_t timeout_ms)
{
    assert_true(i < MAXCALLS);
    struct call *c = &f->calls[i];
    assert_int_equal(c->started, 0);
    c->f = f;
    c->idx = i;
    c->started = 1;
    c->timeout_ms = timeout_ms;
    c->t_start = uv_now(&f->loop);
    int n = snprintf(c->sent, sizeof(c->sent), "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"ping\",\"params\":{\"p\":\"", i);
    for (size_t k = 0; k < f->body_pad && (size_t)n < sizeof(c->sent) - 8; k++)
        c->sent[n++] = (char)('a' + (i + (int)k) % 26);
    n += snprintf(c->sent + n, sizeof(c->sent) - (size_t)n, "\"}}");
    c->sent_len = (size_t)n;
    c->r = tg_upreq_start(f->u, "POST", "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n",
                          c->sent, c->sent_len, 0, timeout_ms, &cbs, c);
    assert_non_null(c->r);
}

static void on_watchdog(uv_timer_t *t)
{
    struct fixture *f = t->data;
    f->timed_out = 1;
    uv_stop(&f->loop);
}

static void fixture_init(struct fixture *f, enum srv_mode mode, int pool_size, int queue_max)
{
    memset(f, 0, sizeof(*f));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    srv_start(&f->srv, &f->loop, mode);
    snprintf(f->authority, sizeof(f->authority), "127.0.0.1:%d", f->srv.port);
    f->hdr.name = "X-Test";
    f->hdr.value = "configured";
    f->uc.name = "test";
    f->uc.url = "http://127.0.0.1/mcp";
    f->uc.host = "127.0.0.1";
    f->uc.port = f->srv.port;
    f->uc.path = "/mcp";
    f->uc.authority = f->authority;
    f->uc.headers = &f->hdr;
    f->uc.nheaders = 1;
    f->uc.pool_size = pool_size;
    f->uc.queue_max = queue_max;
    f->uc.connect_timeout_ms = 1000;
    f->uc.call_timeout_ms = 1000;
    f->uc.pool_idle_timeout_ms = 30000;
    f->uc.queue_timeout_ms = 1000;
    uv_timer_init(&f->loop, &f->watchdog);
    f->watchdog.data = f;
    for (int i = 0; i < MAXCALLS; i++)
        tg_buf_init(&f->calls[i].body);
}

static void upstream_new(struct fixture *f)
{
    f->u = tg_upstream_new(&f->loop, NULL, &f->uc, &f->m);
    assert_non_null(f->u);
    assert_ptr_equal(tg_upstream_conf(f->u), &f->uc);
    assert_int_equal(tg_upstream_reachable(f->u), 1);
}

/* Runs the loop until `target` calls have finished, at most max_ms. */
static void run_until_done(struct fixture *f, int target, uint64_t max_ms)
{
    f->timed_out = 0;
    uv_timer_start(&f->watchdog, on_watchdog, max_ms, 0);
    while (f->ndone < target && !f->timed_out)
        uv_run(&f->loop, UV_RUN_ONCE);
    uv_timer_stop(&f->watchdog);
    if (f->ndone < target)
        fail_msg("only %d of %d calls finished within %llu ms", f->ndone, target, (unsigned long long)max_ms);
}

/* Runs the loop until cond holds, at most max_ms. */
#define RUN_UNTIL(f, cond, max_ms)                                                                           \
    do {                                                                                                     \
        (f)->timed_out = 0;                                                                                  \
        uv_timer_start(&(f)->watchdog, on_watchdog, (max_ms), 0);                                            \
        while (!(cond) && !(f)->timed_out)                                                                   \
            uv_run(&(f)->loop, UV_RUN_ONCE);                                                                 \
        uv_timer_stop(&(f)->watchdog);                                                                       \
        if (!(cond))                                                                                         \
            fail_msg("%s: still false after %d ms", #cond, (int)(max_ms));                                   \
    } while (0)

/* Runs the loop for ms milliseconds. */
static void run_for(struct fixture *f, uint64_t ms)
{
    f->timed_out = 0;
    uv_timer_start(&f->watchdog, on_watchdog, ms, 0);
    while (!f->timed_out)
        uv_run(&f->loop, UV_RUN_ONCE);
}

static void count_handle(uv_handle_t *h, void *arg)
{
    struct fixture *f = arg;
    if (h != (uv_handle_t *)&f->watchdog)
        f->walk_count++;
}

/* Handles still in the loop (closing ones included) besides the watchdog. */
static int other_handles(struct fixture *f)
{
    f->walk_count = 0;
    uv_walk(&f->loop, count_handle, f);
    return f->walk_count;
}

static void describe_handle(uv_handle_t *h, void *arg)
{
    struct fixture *f = arg;
    if (h != (uv_handle_t *)&f->watchdog)
        print_error("left open: %s handle %p (active %d, closing %d)\n", uv_handle_type_name(h->type), (void *)h,
                    uv_is_active(h), uv_is_closing(h));
}

/* Closes the upstream (if still open) and the server, and runs the loop until nothing is left. */
static void fixture_finish(struct fixture *f)
{
    if (f->u != NULL)
        tg_upstream_close(f->u);
    f->u = NULL;
    srv_close(&f->srv);
    int pending = 1;
    f->timed_out = 0;
    uv_timer_start(&f->watchdog, on_watchdog, 2000, 0);
    while ((pending = other_handles(f)) > 0 && !f->timed_out)
        uv_run(&f->loop, UV_RUN_ONCE);
    if (pending > 0) {
        uv_walk(&f->loop, describe_handle, f);
        fail_msg("%d handles still open 2 s after tg_upstream_close", pending);
    }
    uv_close((uv_handle_t *)&f->watchdog, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    for (int i = 0; i < MAXCALLS; i++) {
        if (f->calls[i].started && f->calls[i].done != 1)
            fail_msg("call %d: on_done ran %d times", i, f->calls[i].done);
        tg_buf_dispose(&f->calls[i].body);
    }
}

static void expect_echo(struct fixture *f, int i)
{
    struct call *c = &f->calls[i];
    if (c->err != 0)
        fail_msg("call %d: on_done err %d (%s)", i, c->err, c->err > -4000 ? uv_strerror(c->err) : "tollgate");
    assert_int_equal(c->done, 1);
    assert_int_equal(c->heads, 1);
    assert_int_equal(c->status, 200);
    assert_string_equal(c->ctype, "application/json");
    if (c->body.len != c->sent_len || memcmp(c->body.base, c->sent, c->sent_len) != 0)
        fail_msg("call %d: body \"%.*s\" is not the echo of \"%s\"", i, (int)c->body.len, c->body.base ? c->body.base : "",
                 c->sent);
}

/* ---- cases ----------------------------------------------------------------------------- */

static void sequential_then_concurrent_share_two_connections(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 2, 20);
    upstream_new(f);
    /* 50 sequential calls: each starts from the previous one's on_done. */
    f->chain_to = 50;
    f->chain_timeout_ms = 2000;
    start_call(f, 0, 2000);
    run_until_done(f, 50, 4000);
    for (int i = 0; i < 50; i++)
        expect_echo(f, i);
    assert_int_equal(f->srv.requests, 50);
    assert_int_equal(f->srv.accepted, 1);
    /* What the server saw of the request. */
    assert_string_equal(f->srv.last_method, "POST");
    assert_string_equal(f->srv.last_url, "/mcp");
    assert_string_equal(f->srv.last_host, f->authority);
    assert_string_equal(f->srv.last_x_test, "configured");
    assert_string_equal(f->srv.last_accept, "application/json, text/event-stream");
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 1);
    assert_int_equal(idle, 1);
    assert_int_equal(queued, 0);
    assert_int_equal(dedicated, 0);

    /* 20 at once: two connections, the rest queued and served in turn. */
    f->chain_to = 0;
    for (int i = 50; i < 70; i++)
        start_call(f, i, 2000);
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 2);
    assert_int_equal(idle, 0);
    assert_int_equal(queued, 18);
    run_until_done(f, 70, 4000);
    for (int i = 50; i < 70; i++)
        expect_echo(f, i);
    assert_int_equal(f->srv.requests, 70);
    if (f->srv.accepted > 2)
        fail_msg("the server saw %d connections for a pool of 2", f->srv.accepted);
    assert_int_equal(f->srv.accepted, 2);
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 2);
    assert_int_equal(idle, 2);
    assert_int_equal(queued, 0);
    assert_int_equal(f->m.upstream_calls, 70);
    assert_int_equal(f->m.upstream_errors, 0);
    assert_int_equal(f->m.upstream_connects, 2);
    assert_int_equal(f->m.lat_count, 70);
    assert_string_equal(f->calls[0].sid, "sess-1");
    /* With two idle connections, sequential calls keep using the most recently used one
     * (so the other can age out of the pool). */
    f->chain_to = 80;
    start_call(f, 70, 2000);
    run_until_done(f, 80, 4000);
    for (int i = 70; i < 80; i++)
        expect_echo(f, i);
    for (int i = 71; i < 80; i++)
        if (f->srv.served_by[i] != f->srv.served_by[70])
            fail_msg("sequential call %d went to connection %d, call 70 to %d", i, f->srv.served_by[i],
                     f->srv.served_by[70]);
    fixture_finish(f);
    /* Closing the pool closed both connections at the server too. */
    free(f);
}

static void queue_full_gives_elimit(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 2, 1);
    upstream_new(f);
    for (int i = 0; i < 5; i++)
        start_call(f, i, 2000);
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 2);
    assert_int_equal(queued, 1);
    /* No callback runs inside tg_upreq_start. */
    assert_int_equal(f->ndone, 0);
    run_until_done(f, 5, 4000);
    int ok = 0, limited = 0;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(f->calls[i].done, 1);
        if (f->calls[i].err == 0) {
            expect_echo(f, i);
            ok++;
        } else if (f->calls[i].err == TG_ELIMIT) {
            assert_int_equal(f->calls[i].heads, 0);
            assert_int_equal(f->calls[i].body.len, 0);
            limited++;
        } else {
            fail_msg("call %d: err %d, expected 0 or TG_ELIMIT", i, f->calls[i].err);
        }
    }
    /* Two on connections, one queued; the last two found the queue full. */
    assert_int_equal(ok, 3);
    assert_int_equal(limited, 2);
    assert_int_equal(f->calls[3].err, TG_ELIMIT);
    assert_int_equal(f->calls[4].err, TG_ELIMIT);
    assert_int_equal(f->srv.requests, 3);
    assert_int_equal(f->m.upstream_errors, 2);
    fixture_finish(f);
    free(f);
}

static void queue_deadline_gives_elimit(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_SILENT, 1, 5);
    f->uc.queue_timeout_ms = 100;
    upstream_new(f);
    start_call(f, 0, 0); /* holds the only connection, never answered, no call timeout */
    start_call(f, 1, 5000);
    run_until_done(f, 1, 3000);
    assert_int_equal(f->calls[1].done, 1);
    assert_int_equal(f->calls[1].err, TG_ELIMIT);
    assert_int_equal(f->calls[0].done, 0);
    uint64_t waited = f->calls[1].t_done - f->calls[1].t_start;
    if (waited < 90 || waited > 2000)
        fail_msg("queued call failed after %llu ms, queue_timeout_ms is 100", (unsigned long long)waited);
    assert_int_equal(f->m.upstream_queue_timeouts, 1);
    /* Closing the pool ends the call still on the connection. */
    tg_upstream_close(f->u);
    f->u = NULL;
    assert_int_equal(f->calls[0].done, 1);
    assert_int_equal(f->calls[0].err, TG_ECLOSED);
    fixture_finish(f);
    free(f);
}

static void silent_server_times_out(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_SILENT, 2, 10);
    upstream_new(f);
    start_call(f, 0, 150);
    run_until_done(f, 1, 3000);
    assert_int_equal(f->calls[0].err, TG_ETIMEDOUT);
    assert_int_equal(f->calls[0].heads, 0);
    uint64_t waited = f->calls[0].t_done - f->calls[0].t_start;
    if (waited < 140 || waited > 2000)
        fail_msg("timed out after %llu ms, call timeout 150 ms", (unsigned long long)waited);
    assert_int_equal(f->srv.requests, 1); /* it was sent */
    assert_int_equal(f->m.upstream_timeouts, 1);
    /* The connection with half an exchange on it is not reused. */
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 0);
    RUN_UNTIL(f, f->srv.eofs == 1, 2000);
    fixture_finish(f);
    free(f);
}

/* A call that gets an idle pooled connection must still be bounded by its call timeout. */
static void call_timeout_on_reused_connection(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_FIRST_ONLY, 1, 10);
    upstream_new(f);
    start_call(f, 0, 1000);
    run_until_done(f, 1, 3000);
    expect_echo(f, 0);
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(idle, 1);
    start_call(f, 1, 150); /* reuses the idle connection; the server will not answer */
    f->timed_out = 0;
    uv_timer_start(&f->watchdog, on_watchdog, 1500, 0);
    while (f->ndone < 2 && !f->timed_out)
        uv_run(&f->loop, UV_RUN_ONCE);
    uv_timer_stop(&f->watchdog);
    assert_int_equal(f->srv.accepted, 1);
    assert_int_equal(f->srv.requests, 2);
    if (f->calls[1].done == 0) {
        /* Leave the loop in a state fixture_finish can clean up. */
        fixture_finish(f);
        free(f);
        fail_msg("call with a 150 ms timeout on a reused connection had not finished after 1500 ms");
    }
    assert_int_equal(f->calls[1].err, TG_ETIMEDOUT);
    assert_int_equal(f->m.upstream_timeouts, 1);
    fixture_finish(f);
    free(f);
}

/* The pool's idle timer is armed lazily (once per idle spell that finds it stopped, not once per
 * call): a connection still closes a whole pool_idle_timeout_ms after it last went idle, not
 * after the first time, and never while a call has it. */
static void idle_timeout_counts_from_last_use(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    f->uc.pool_idle_timeout_ms = 300;
    upstream_new(f);
    start_call(f, 0, 1000);
    run_until_done(f, 1, 3000);
    run_for(f, 200);
    start_call(f, 1, 1000); /* the same connection, 200 ms into its idle timeout */
    run_until_done(f, 2, 3000);
    assert_int_equal(f->srv.accepted, 1);
    uint64_t last_idle = f->calls[1].t_done;
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 1);
    RUN_UNTIL(f, (tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated), total == 0), 3000);
    uint64_t closed = uv_now(&f->loop);
    if (closed - last_idle < 290)
        fail_msg("closed %llu ms after it last went idle, before its 300 ms", (unsigned long long)(closed - last_idle));
    fixture_finish(f);
    free(f);
}

static void idle_timer_spares_a_busy_connection(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_FIRST_ONLY, 1, 10);
    f->uc.pool_idle_timeout_ms = 100;
    upstream_new(f);
    start_call(f, 0, 1000);
    run_until_done(f, 1, 3000);
    expect_echo(f, 0);
    start_call(f, 1, 600); /* on the idle connection, whose idle timer is still armed: no answer */
    run_until_done(f, 2, 3000);
    /* the idle timer fired while the call had the connection: it stayed, and the call ended by
     * its own timeout */
    assert_int_equal(f->calls[1].err, TG_ETIMEDOUT);
    assert_int_equal(f->srv.accepted, 1);
    fixture_finish(f);
    free(f);
}

static void queued_call_timeout_after_dequeue(void **state)
{
    /* Pool of 1: call 0 is answered (first request), call 1 waits in the queue, gets the
     * connection back, and the server stays silent: call 1 must time out. */
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_FIRST_ONLY, 1, 10);
    upstream_new(f);
    start_call(f, 0, 1000);
    start_call(f, 1, 200);
    f->timed_out = 0;
    uv_timer_start(&f->watchdog, on_watchdog, 1500, 0);
    while (f->ndone < 2 && !f->timed_out)
        uv_run(&f->loop, UV_RUN_ONCE);
    uv_timer_stop(&f->watchdog);
    int done = f->calls[1].done;
    int err = f->calls[1].err;
    expect_echo(f, 0);
    fixture_finish(f);
    free(f);
    if (!done)
        fail_msg("queued call with a 200 ms timeout had not finished after 1500 ms");
    assert_int_equal(err, TG_ETIMEDOUT);
}

static void connection_close_server(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_CLOSE, 2, 10);
    upstream_new(f);
    f->chain_to = 10;
    f->chain_timeout_ms = 2000;
    start_call(f, 0, 2000);
    run_until_done(f, 10, 4000);
    for (int i = 0; i < 10; i++)
        expect_echo(f, i);
    assert_int_equal(f->srv.accepted, 10); /* one connection per call */
    /* Concurrent too. */
    f->chain_to = 0;
    for (int i = 10; i < 16; i++)
        start_call(f, i, 2000);
    run_until_done(f, 16, 4000);
    for (int i = 10; i < 16; i++)
        expect_echo(f, i);
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(idle, 0);
    fixture_finish(f);
    free(f);
}

static void server_closes_without_saying(void **state)
{
    /* Keep-alive headers, then the server closes: the next call, started from on_done,
     * may be written to the dying connection; it must be retried on a fresh one. */
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_CLOSE_QUIETLY, 1, 10);
    upstream_new(f);
    f->chain_to = 10;
    f->chain_timeout_ms = 2000;
    start_call(f, 0, 2000);
    run_until_done(f, 10, 4000);
    for (int i = 0; i < 10; i++)
        expect_echo(f, i);
    assert_int_equal(f->srv.answered, 10);
    fixture_finish(f);
    free(f);
}

static void chunked_body_intact(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_CHUNKED, 2, 10);
    f->body_pad = 100;
    upstream_new(f);
    for (int i = 0; i < 4; i++)
        start_call(f, i, 2000);
    run_until_done(f, 4, 4000);
    for (int i = 0; i < 4; i++)
        expect_echo(f, i);
    /* Chunked responses keep the connection. */
    f->chain_to = 10;
    f->chain_timeout_ms = 2000;
    start_call(f, 4, 2000);
    run_until_done(f, 10, 4000);
    for (int i = 4; i < 10; i++)
        expect_echo(f, i);
    assert_int_equal(f->srv.accepted, 2);
    /* One byte per chunk. */
    f->srv.chunk = 1;
    f->chain_to = 0;
    start_call(f, 10, 2000);
    run_until_done(f, 11, 4000);
    expect_echo(f, 10);
    fixture_finish(f);
    free(f);
}

/* Trailer fields after a chunked body are not headers (RFC 9110 §6.5.1): an upstream's
 * Mcp-Session-Id or Content-Type in the trailer section neither sets nor replaces what the head
 * said. A trailer section over the 64 KiB the head may have fails the call. */
static void chunked_trailers_are_not_headers(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_CHUNKED, 1, 10);
    f->srv.trailer = "Mcp-Session-Id: trailer-sid\r\nContent-Type: text/event-stream\r\n";
    upstream_new(f);
    start_call(f, 0, 2000);
    run_until_done(f, 1, 4000);
    expect_echo(f, 0);
    assert_string_equal(f->calls[0].done_ctype, "application/json");
    assert_string_equal(f->calls[0].done_sid, "");
    /* Too long: refused, as a head that long would be. */
    struct tg_buf big;
    tg_buf_init(&big);
    for (int i = 0; i < 1100; i++)
        tg_buf_appendf(&big, "X-Pad-%04d: %050d\r\n", i, 0);
    tg_buf_append(&big, "", 1);
    f->srv.trailer = big.base;
    start_call(f, 1, 2000);
    run_until_done(f, 2, 4000);
    assert_int_not_equal(f->calls[1].err, 0);
    fixture_finish(f);
    tg_buf_dispose(&big);
    free(f);
}

static void large_body_across_reads(void **state)
{
    /* Bigger than the 64 KiB read buffer: delivered in pieces, intact and in order. */
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    upstream_new(f);
    size_t n = 300000;
    char *big = malloc(n);
    const char *head = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"";
    memcpy(big, head, strlen(head));
    for (size_t i = strlen(head); i < n - 3; i++)
        big[i] = (char)('a' + i % 26);
    memcpy(big + n - 3, "\"}", 2);
    big[n - 1] = '\n';
    struct call *c = &f->calls[0];
    c->f = f;
    c->started = 1;
    c->r = tg_upreq_start(f->u, "POST", NULL, big, n, 0, 3000, &cbs, c);
    run_until_done(f, 1, 4000);
    assert_int_equal(c->err, 0);
    assert_int_equal(c->body.len, n);
    assert_memory_equal(c->body.base, big, n);
    free(big);
    fixture_finish(f);
    free(f);
}

static void connect_refused(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 2, 10);
    /* A port that was free a moment ago: bind, read it, close. */
    uv_tcp_t probe;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_init(&f->loop, &probe);
    assert_int_equal(uv_tcp_bind(&probe, (const struct sockaddr *)&a, 0), 0);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&probe, (struct sockaddr *)&ss, &len);
    uv_close((uv_handle_t *)&probe, NULL);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    f->uc.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    upstream_new(f);
    start_call(f, 0, 2000);
    start_call(f, 1, 2000);
    run_until_done(f, 2, 3000);
    for (int i = 0; i < 2; i++) {
        if (f->calls[i].err >= 0)
            fail_msg("call %d: err %d, expected a connect error", i, f->calls[i].err);
        assert_int_equal(f->calls[i].heads, 0);
    }
    assert_int_equal(f->calls[0].err, UV_ECONNREFUSED);
    assert_int_equal(tg_upstream_reachable(f->u), 0);
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 0);
    fixture_finish(f);
    free(f);
}

static void idle_connection_expires(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 2, 10);
    f->uc.pool_idle_timeout_ms = 60;
    upstream_new(f);
    start_call(f, 0, 2000);
    run_until_done(f, 1, 3000);
    expect_echo(f, 0);
    RUN_UNTIL(f, f->srv.eofs == 1, 2000); /* the pool closed it after 60 ms idle */
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 0);
    assert_int_equal(idle, 0);
    assert_int_equal(f->srv.eofs, 1);
    start_call(f, 1, 2000);
    run_until_done(f, 2, 3000);
    expect_echo(f, 1);
    assert_int_equal(f->srv.accepted, 2);
    fixture_finish(f);
    free(f);
}

static void cancel_in_flight_and_queued(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_SILENT, 1, 10);
    upstream_new(f);
    start_call(f, 0, 0);
    start_call(f, 1, 0);
    start_call(f, 2, 0);
    RUN_UNTIL(f, f->srv.requests == 1, 2000); /* call 0 is on the wire */
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(queued, 2);
    tg_upreq_cancel(f->calls[1].r); /* queued */
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(queued, 1);
    tg_upreq_cancel(f->calls[0].r); /* in flight: its connection is closed, call 2 gets a new one */
    RUN_UNTIL(f, f->srv.requests == 2, 2000);
    assert_int_equal(f->srv.accepted, 2);
    assert_int_equal(f->ndone, 0); /* cancelled calls get no on_done */
    f->calls[0].started = f->calls[1].started = 0;
    tg_upstream_close(f->u); /* call 2 is still in flight */
    f->u = NULL;
    assert_int_equal(f->calls[2].done, 1);
    assert_int_equal(f->calls[2].err, TG_ECLOSED);
    fixture_finish(f);
    free(f);
}

static void close_with_calls_everywhere(void **state)
{
    /* Calls connecting, in flight and queued when the pool is closed: each gets on_done(TG_ECLOSED) once. */
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_SILENT, 2, 10);
    upstream_new(f);
    start_call(f, 0, 0);
    start_call(f, 1, 0);
    RUN_UNTIL(f, f->srv.requests == 2, 2000);
    for (int i = 2; i < 6; i++)
        start_call(f, i, 0);
    tg_upstream_close(f->u);
    f->u = NULL;
    for (int i = 0; i < 6; i++) {
        assert_int_equal(f->calls[i].done, 1);
        assert_int_equal(f->calls[i].err, TG_ECLOSED);
    }
    fixture_finish(f);
    /* Closing a pool with nothing in it frees it at once. */
    fixture_init(f, SRV_SILENT, 2, 10);
    upstream_new(f);
    fixture_finish(f);
    free(f);
}

static void body_ends_at_close(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_EOF_BODY, 2, 10);
    upstream_new(f);
    f->chain_to = 3;
    f->chain_timeout_ms = 2000;
    start_call(f, 0, 2000);
    run_until_done(f, 3, 3000);
    for (int i = 0; i < 3; i++)
        expect_echo(f, i);
    assert_int_equal(f->srv.accepted, 3);
    fixture_finish(f);
    free(f);
}

static void interim_response_and_error_status(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    f->srv.interim = 1;
    upstream_new(f);
    start_call(f, 0, 2000);
    run_until_done(f, 1, 3000);
    expect_echo(f, 0); /* on_head once, for the final 200 */
    /* An HTTP error status is a complete exchange; the body is delivered and the connection kept. */
    f->srv.interim = 0;
    f->srv.status = 500;
    f->srv.ctype = "text/plain";
    start_call(f, 1, 2000);
    run_until_done(f, 2, 3000);
    assert_int_equal(f->calls[1].err, 0);
    assert_int_equal(f->calls[1].status, 500);
    assert_string_equal(f->calls[1].ctype, "text/plain");
    assert_int_equal(f->calls[1].body.len, f->calls[1].sent_len);
    assert_int_equal(f->srv.accepted, 1);
    fixture_finish(f);
    free(f);
}

static void unsolicited_bytes_after_response(void **state)
{
    /* Bytes after a complete response: the call succeeds, the connection is not reused. */
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    f->srv.garbage = 1;
    upstream_new(f);
    start_call(f, 0, 2000);
    run_until_done(f, 1, 3000);
    expect_echo(f, 0);
    f->srv.garbage = 0;
    start_call(f, 1, 2000);
    run_until_done(f, 2, 3000);
    expect_echo(f, 1);
    assert_int_equal(f->srv.accepted, 2);
    fixture_finish(f);
    free(f);
}

static void malformed_response(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_MALFORMED, 1, 10);
    upstream_new(f);
    start_call(f, 0, 2000);
    run_until_done(f, 1, 3000);
    assert_int_equal(f->calls[0].err, TG_EINVAL);
    assert_int_equal(f->calls[0].heads, 0);
    assert_true(strlen(f->calls[0].why) > 0); /* llhttp's reason, for the owner to tell */
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 0);
    fixture_finish(f);
    free(f);
}

static void on_head_pause(struct tg_upreq *r, int status, void *ud)
{
    on_head(r, status, ud);
    tg_upreq_pause(r);
}

static const struct tg_upreq_cbs pause_cbs = {on_head_pause, on_data, on_done};

static void pause_and_resume(void **state)
{
    /* Chunked: the second half comes a few ms after the head. Paused in on_head, it is not read. */
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_CHUNKED, 1, 10);
    f->body_pad = 100;
    upstream_new(f);
    struct call *c = &f->calls[0];
    c->f = f;
    c->started = 1;
    c->sent_len = (size_t)snprintf(c->sent, sizeof(c->sent), "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"%0100d\"}", 0);
    c->r = tg_upreq_start(f->u, "POST", NULL, c->sent, c->sent_len, 0, 2000, &pause_cbs, c);
    tg_upreq_pause(c->r); /* before it has a connection: harmless, and pausing twice too */
    tg_upreq_resume(c->r);
    RUN_UNTIL(f, c->heads == 1, 2000);
    run_for(f, 60); /* the rest of the body is sent 3 ms after the head */
    assert_int_equal(c->heads, 1);
    assert_int_equal(c->done, 0);
    assert_true(c->body.len < c->sent_len);
    tg_upreq_touch(c->r);
    tg_upreq_resume(c->r);
    tg_upreq_resume(c->r);
    run_until_done(f, 1, 3000);
    expect_echo(f, 0);
    fixture_finish(f);
    free(f);
}

static void dedicated_connection(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 0);
    upstream_new(f);
    start_call(f, 0, 0); /* takes the only pooled connection */
    struct call *c = &f->calls[1];
    c->f = f;
    c->idx = 1;
    c->started = 1;
    c->r = tg_upreq_start(f->u, "GET", "Accept: text/event-stream\r\n", NULL, 0, 1, 2000, &cbs, c);
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 1);
    assert_int_equal(dedicated, 1);
    assert_int_equal(queued, 0);
    run_until_done(f, 2, 3000);
    expect_echo(f, 0);
    assert_int_equal(c->err, 0);
    assert_int_equal(c->status, 200);
    assert_int_equal(c->body.len, 0);
    assert_int_equal(f->srv.accepted, 2);
    RUN_UNTIL(f, f->srv.eofs == 1, 2000);
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(dedicated, 0); /* a dedicated connection is not pooled afterwards */
    assert_int_equal(total, 1);
    assert_int_equal(idle, 1);
    assert_int_equal(f->srv.eofs, 1);
    fixture_finish(f);
    free(f);
}

static void on_data_cancel(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct call *c = ud;
    on_data(r, p, n, ud);
    c->f->ndone++; /* counts as finished for run_until_done */
    c->started = 0;
    tg_upreq_cancel(r);
}

static const struct tg_upreq_cbs cancel_cbs = {on_head, on_data_cancel, on_done};

static void on_data_close(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct call *c = ud;
    on_data(r, p, n, ud);
    if (c->f->u) {
        tg_upstream_close(c->f->u);
        c->f->u = NULL;
    }
}

static const struct tg_upreq_cbs close_cbs = {on_head, on_data_close, on_done};

static void cancel_or_close_from_callbacks(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_CHUNKED, 1, 10);
    f->body_pad = 50;
    upstream_new(f);
    struct call *c = &f->calls[0];
    c->f = f;
    c->started = 1;
    c->r = tg_upreq_start(f->u, "POST", NULL, "{\"a\":\"0123456789\"}", 18, 0, 2000, &cancel_cbs, c);
    run_until_done(f, 1, 3000);
    assert_int_equal(c->done, 0);
    run_for(f, 20);
    size_t total, idle, queued, dedicated;
    tg_upstream_stats(f->u, &total, &idle, &queued, &dedicated);
    assert_int_equal(total, 0); /* half a response cannot be skipped: the connection was closed */
    /* The pool still works. */
    start_call(f, 1, 2000);
    run_until_done(f, 2, 3000);
    expect_echo(f, 1);
    /* Closing the whole pool from on_data: that call ends with TG_ECLOSED, once. */
    c = &f->calls[2];
    c->f = f;
    c->idx = 2;
    c->started = 1;
    c->r = tg_upreq_start(f->u, "POST", NULL, "{\"a\":\"0123456789\"}", 18, 0, 2000, &close_cbs, c);
    run_until_done(f, 3, 3000);
    assert_null(f->u);
    assert_int_equal(c->done, 1);
    assert_int_equal(c->err, TG_ECLOSED);
    fixture_finish(f);
    free(f);
}

static void host_name_is_resolved(void **state)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo("localhost", "80", &hints, &res) != 0 || res == NULL || res->ai_family != AF_INET) {
        if (res)
            freeaddrinfo(res);
        skip(); /* the server below listens on 127.0.0.1 only */
    }
    freeaddrinfo(res);
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 2, 10);
    f->uc.host = "localhost";
    snprintf(f->authority, sizeof(f->authority), "localhost:%d", f->srv.port);
    upstream_new(f);
    start_call(f, 0, 2000);
    start_call(f, 1, 2000);
    run_until_done(f, 2, 3000);
    expect_echo(f, 0);
    expect_echo(f, 1);
    assert_string_equal(f->srv.last_host, f->authority);
    /* A name that does not resolve fails the call, not the process. */
    fixture_finish(f);
    fixture_init(f, SRV_KEEPALIVE, 2, 10);
    f->uc.host = "no-such-host.invalid";
    upstream_new(f);
    start_call(f, 0, 2000);
    run_until_done(f, 1, 3000);
    if (f->calls[0].err >= 0)
        fail_msg("unresolvable host: err %d", f->calls[0].err);
    fixture_finish(f);
    free(f);
}

static void pause_before_connected(void **state)
{
    /* Paused before it has a connection: the request is sent, the answer is not read. */
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    upstream_new(f);
    start_call(f, 0, 2000);
    tg_upreq_pause(f->calls[0].r);
    RUN_UNTIL(f, f->srv.requests == 1, 2000);
    run_for(f, 60); /* the answer is there to read */
    assert_int_equal(f->calls[0].heads, 0);
    assert_int_equal(f->calls[0].done, 0);
    tg_upreq_resume(f->calls[0].r);
    run_until_done(f, 1, 3000);
    expect_echo(f, 0);
    fixture_finish(f);
    free(f);
}

static void queue_deadline_stops_once_dequeued(void **state)
{
    /* Call 1 (no call timeout) waits 100 ms in the queue, then takes 100 ms more on the
     * connection: the 150 ms queue deadline no longer applies once it left the queue. */
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    f->srv.delay_ms = 100;
    f->uc.queue_timeout_ms = 150;
    upstream_new(f);
    start_call(f, 0, 2000);
    start_call(f, 1, 0);
    run_until_done(f, 2, 3000);
    expect_echo(f, 0);
    expect_echo(f, 1);
    assert_true(f->calls[1].t_done - f->calls[1].t_start >= 150);
    assert_int_equal(f->m.upstream_queue_timeouts, 0);
    fixture_finish(f);
    free(f);
}

/* In on_done (so in the poll phase), start two calls on a pool of one with no queue
 * (the second is refused with a deferred TG_ELIMIT), then close the pool. */
static void close_from_on_done(struct call *c)
{
    struct fixture *f = c->f;
    if (c->idx != 0)
        return;
    f->after_done = NULL;
    start_call(f, 1, 2000);
    start_call(f, 2, 2000);
    tg_upstream_close(f->u);
    f->u = NULL;
}

/* A call refused with a deferred error (queue full: a 0 ms timer) is pending when the pool
 * is closed from a poll-phase callback. The upstream must outlive that timer (it used to
 * be freed first: heap-use-after-free in finish()), and the call gets on_done once. */
static void close_with_deferred_error_pending(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 0);
    upstream_new(f);
    f->after_done = close_from_on_done;
    start_call(f, 0, 2000);
    run_until_done(f, 3, 3000);
    expect_echo(f, 0);
    assert_int_equal(f->calls[1].err, TG_ECLOSED);
    assert_int_not_equal(f->calls[2].err, 0);
    fixture_finish(f);
    free(f);
}

/* A connect that fails inside tg_upreq_start (here EMFILE: no descriptor left for the socket)
 * is reported from the loop, never inside the start call: the caller may still be setting up
 * the object it passed as ud, and a callback freeing it there was a use-after-free. The request
 * never reached the upstream, and says so. */
static int sent_seen = -1;
static void after_done_note_sent(struct call *c) { sent_seen = tg_upreq_sent(c->r); }

static void sync_connect_failure_reported_later(void **state)
{
    (void)state;
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 2, 10);
    upstream_new(f);
    f->after_done = after_done_note_sent;
    struct rlimit old;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
    int probe = open("/dev/null", O_RDONLY);
    assert_true(probe >= 0);
    close(probe);
    struct rlimit low = old;
    low.rlim_cur = (rlim_t)probe; /* the next descriptor would be number `probe`: refused */
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    start_call(f, 0, 0);
    int done_inside_start = f->calls[0].done;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
    assert_int_equal(done_inside_start, 0);
    run_until_done(f, 1, 2000);
    assert_int_equal(f->calls[0].done, 1);
    assert_int_equal(f->calls[0].err, UV_EMFILE);
    assert_int_equal(sent_seen, 0);
    assert_int_equal(f->srv.requests, 0);
    /* The pool is usable again once descriptors are. */
    f->after_done = NULL;
    start_call(f, 1, 0);
    run_until_done(f, 2, 2000);
    assert_int_equal(f->calls[1].err, 0);
    fixture_finish(f);
    free(f);
}

/* A reload that removes an upstream retires it: calls in flight finish on their connection,
 * nothing new starts, and the memory goes only after the last holder lets go. */
static void retire_lets_calls_in_flight_finish(void **state)
{
    (void)state;
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    f->srv.delay_ms = 50;
    upstream_new(f);
    start_call(f, 0, 0);
    RUN_UNTIL(f, f->srv.requests == 1, 2000);
    start_call(f, 1, 0); /* queued behind it: never sent */
    struct tg_upstream *held = tg_upstream_ref(f->u);
    tg_upstream_retire(f->u);
    f->u = NULL;
    assert_int_equal(f->calls[1].done, 0); /* not inside retire either */
    run_until_done(f, 2, 2000);
    assert_int_equal(f->calls[0].err, 0);
    assert_int_equal(f->calls[1].err, TG_ECLOSED);
    assert_int_equal(f->srv.requests, 1);
    assert_ptr_equal(tg_upstream_conf(held), &f->uc); /* still valid while held */
    tg_upstream_unref(held);
    fixture_finish(f);
    free(f);
}

/* ---- pipelining (upstreams[].pool.pipeline) ----------------------------------------------- */

/* Calls started in one loop iteration ride one kept-alive connection and leave in one write: the
 * server gets them in one read and each answer reaches its own call. Without pipelining the
 * same calls open a second connection. */
static void pipelined_calls_go_out_together(void **state)
{
    for (int depth = 1; depth <= 8; depth += 7) {
        struct fixture *f = malloc(sizeof(*f));
        fixture_init(f, SRV_KEEPALIVE, 2, 10);
        f->uc.pool_pipeline = depth;
        upstream_new(f);
        start_call(f, 0, 2000);
        run_until_done(f, 1, 2000);
        int reads = f->srv.reads;
        for (int i = 1; i <= 8; i++)
            start_call(f, i, 2000);
        run_until_done(f, 9, 4000);
        for (int i = 0; i <= 8; i++)
            expect_echo(f, i);
        if (depth == 8) {
            assert_int_equal(f->srv.accepted, 1);
            assert_int_equal(f->srv.reads - reads, 1);
            assert_int_equal(f->m.upstream_pipelined, 7); /* the batch's first took the idle connection */
            assert_int_equal(f->m.upstream_writes, 2);
        } else {
            assert_int_equal(f->srv.accepted, 2);
            assert_true(f->srv.reads - reads >= 2);
            assert_int_equal(f->m.upstream_pipelined, 0);
            assert_int_equal(f->m.upstream_writes, 9);
        }
        fixture_finish(f);
        free(f);
    }
}

/* A call taken off before it was written never reaches the server; one taken off after is read
 * and dropped, and the connection stays in the pool; the calls around both get their own answers. */
static void pipelined_cancel_written_and_unwritten(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    f->uc.pool_pipeline = 4;
    f->srv.hold = 1;
    upstream_new(f);
    start_call(f, 0, 2000);
    start_call(f, 1, 2000);
    start_call(f, 2, 2000);
    tg_upreq_cancel(f->calls[1].r); /* not written yet */
    f->calls[1].started = 0;
    RUN_UNTIL(f, f->srv.requests == 2, 2000);
    start_call(f, 3, 2000);
    RUN_UNTIL(f, f->srv.requests == 3, 2000);
    tg_upreq_cancel(f->calls[3].r); /* written: its answer is on its way */
    f->calls[3].started = 0;
    srv_release(&f->srv);
    run_until_done(f, 2, 2000);
    expect_echo(f, 0);
    expect_echo(f, 2);
    f->srv.hold = 0;
    start_call(f, 4, 2000);
    run_until_done(f, 3, 2000);
    expect_echo(f, 4);
    assert_int_equal(f->srv.accepted, 1); /* the orphan's answer was read off: no new connection */
    assert_int_equal(f->srv.requests, 4);
    fixture_finish(f);
    free(f);
}

/* The connection dies with written calls on it: each ends with TG_ECLOSED, none is sent again,
 * and each says it may have run. */
static void pipelined_connection_lost(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    f->uc.pool_pipeline = 4;
    f->srv.hold = 1;
    upstream_new(f);
    for (int i = 0; i < 3; i++)
        start_call(f, i, 2000);
    RUN_UNTIL(f, f->srv.requests == 3, 2000);
    sc_close(tg_container_of(f->srv.conns.next, struct sconn, link));
    run_until_done(f, 3, 2000);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f->calls[i].err, TG_ECLOSED);
        assert_int_equal(f->calls[i].sent_at_done, 1);
    }
    assert_int_equal(f->srv.requests, 3);
    assert_int_equal(f->srv.accepted, 1);
    fixture_finish(f);
    free(f);
}

/* The server ends the connection after its first answer ("Connection: close") and processes
 * nothing after: the calls behind it are sent again, each until it is answered. */
static void pipelined_server_close_sends_the_rest_again(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_CLOSE, 1, 10);
    f->uc.pool_pipeline = 4;
    upstream_new(f);
    for (int i = 0; i < 4; i++)
        start_call(f, i, 2000);
    run_until_done(f, 4, 4000);
    for (int i = 0; i < 4; i++)
        expect_echo(f, i);
    assert_int_equal(f->srv.requests, 4); /* each processed once */
    fixture_finish(f);
    free(f);
}

/* A kept-alive connection: the server answers the first of four pipelined calls with keep-alive
 * headers, then closes without a word, having read (and perhaps run) the other three. It was not
 * a connection the server had closed while idle (it answered one): the three end with
 * TG_ECLOSED, saying they may have run, and are not written a second time. */
static void pipelined_quiet_close_is_not_retried(void **state)
{
    struct fixture *f = malloc(sizeof(*f));
    fixture_init(f, SRV_KEEPALIVE, 1, 10);
    f->uc.pool_pipeline = 4;
    f->srv.quiet_after = 2;
    upstream_new(f);
    start_call(f, 0, 2000);
    run_until_done(f, 1, 2000); /* the connection goes back to the pool */
    for (int i = 1; i < 5; i++)
        start_call(f, i, 2000);
    run_until_done(f, 5, 4000);
    expect_echo(f, 0);
    expect_echo(f, 1);
    for (int i = 2; i < 5; i++) {
        assert_int_equal(f->calls[i].err, TG_ECLOSED);
        assert_int_equal(f->calls[i].sent_at_done, 1);
    }
    assert_int_equal(f->srv.requests, 5); /* the server read all five; none came twice */
    assert_int_equal(f->srv.accepted, 1);
    fixture_finish(f);
    free(f);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sequential_then_concurrent_share_two_connections),
        cmocka_unit_test(queue_full_gives_elimit),
        cmocka_unit_test(idle_timeout_counts_from_last_use),
        cmocka_unit_test(idle_timer_spares_a_busy_connection),
        cmocka_unit_test(queue_deadline_gives_elimit),
        cmocka_unit_test(silent_server_times_out),
        cmocka_unit_test(call_timeout_on_reused_connection),
        cmocka_unit_test(queued_call_timeout_after_dequeue),
        cmocka_unit_test(connection_close_server),
        cmocka_unit_test(server_closes_without_saying),
        cmocka_unit_test(chunked_body_intact),
        cmocka_unit_test(chunked_trailers_are_not_headers),
        cmocka_unit_test(large_body_across_reads),
        cmocka_unit_test(connect_refused),
        cmocka_unit_test(idle_connection_expires),
        cmocka_unit_test(cancel_in_flight_and_queued),
        cmocka_unit_test(close_with_calls_everywhere),
        cmocka_unit_test(body_ends_at_close),
        cmocka_unit_test(interim_response_and_error_status),
        cmocka_unit_test(unsolicited_bytes_after_response),
        cmocka_unit_test(malformed_response),
        cmocka_unit_test(pause_and_resume),
        cmocka_unit_test(dedicated_connection),
        cmocka_unit_test(cancel_or_close_from_callbacks),
        cmocka_unit_test(host_name_is_resolved),
        cmocka_unit_test(pause_before_connected),
        cmocka_unit_test(queue_deadline_stops_once_dequeued),
        cmocka_unit_test(close_with_deferred_error_pending),
        cmocka_unit_test(sync_connect_failure_reported_later),
        cmocka_unit_test(retire_lets_calls_in_flight_finish),
        cmocka_unit_test(pipelined_calls_go_out_together),
        cmocka_unit_test(pipelined_cancel_written_and_unwritten),
        cmocka_unit_test(pipelined_connection_lost),
        cmocka_unit_test(pipelined_server_close_sends_the_rest_again),
        cmocka_unit_test(pipelined_quiet_close_is_not_retried),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
