/* upstream/fetch.c: one exchange on a real uv loop against a tiny server in the same loop
 * (127.0.0.1, ephemeral port) that answers every connection with one canned reply (or never):
 * the body and Cache-Control reach the callback, a redirect is a failure naming its Location, a
 * body past max_bytes fails with TG_ELIMIT, silence fails at timeout_ms, cancel means no callback,
 * and a URL that cannot be used is refused inside tg_fetch_start without a callback. Every case
 * runs the loop until no handle is left, so uv_loop_close() proves nothing stayed open. */
#include "test/unit/unit.h"

#include <unistd.h>
#include <uv.h>

#include "core/base/buf.h"
#include "upstream/fetch.h"

struct srv {
    uv_tcp_t listener;
    int port;
    const char *reply; /* NULL: read forever, answer nothing */
    size_t reply_len;
    int requests;
    char last[4096];
};

struct sconn {
    uv_tcp_t tcp;
    struct srv *s;
    char buf[4096];
    size_t len;
    int answered;
};

static void on_sconn_closed(uv_handle_t *h) { free(h->data); }

static void on_swrite(uv_write_t *w, int status)
{
    struct sconn *c = w->data;
    free(w);
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_sconn_closed);
}

static void on_salloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    struct sconn *c = h->data;
    *b = uv_buf_init(c->buf + c->len, (unsigned)(sizeof(c->buf) - c->len - 1));
}

static void on_sread(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    struct sconn *c = st->data;
    if (n < 0) {
        if (!uv_is_closing((uv_handle_t *)&c->tcp))
            uv_close((uv_handle_t *)&c->tcp, on_sconn_closed);
        return;
    }
    c->len += (size_t)n;
    c->buf[c->len] = '\0';
    if (c->answered || strstr(c->buf, "\r\n\r\n") == NULL)
        return;
    c->answered = 1;
    c->s->requests++;
    snprintf(c->s->last, sizeof(c->s->last), "%s", c->buf);
    if (c->s->reply == NULL)
        return;
    uv_write_t *w = malloc(sizeof(*w));
    w->data = c;
    uv_buf_t out = uv_buf_init((char *)c->s->reply, (unsigned)c->s->reply_len);
    uv_write(w, st, &out, 1, on_swrite);
}

static struct sconn *silent_conn;

static void on_sconn(uv_stream_t *l, int status)
{
    struct srv *s = l->data;
    struct sconn *c = calloc(1, sizeof(*c));
    c->s = s;
    uv_tcp_init(l->loop, &c->tcp);
    c->tcp.data = c;
    uv_accept(l, (uv_stream_t *)&c->tcp);
    uv_read_start((uv_stream_t *)&c->tcp, on_salloc, on_sread);
    if (s->reply == NULL)
        silent_conn = c;
}

static void srv_start(uv_loop_t *loop, struct srv *s, const char *reply, size_t len)
{
    memset(s, 0, sizeof(*s));
    s->reply = reply;
    s->reply_len = len;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_bind(&s->listener, (const struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&s->listener, 8, on_sconn), 0);
    struct sockaddr_storage ss;
    int sl = sizeof(ss);
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &sl);
    s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

struct got {
    int called;
    int err, status;
    char why[512], body[256], cc[128];
    size_t len;
    int has_cc;
};

static void on_fetched(void *ud, const struct tg_fetch_result *r)
{
    struct got *g = ud;
    g->called++;
    g->err = r->err;
    g->status = r->status;
    snprintf(g->why, sizeof(g->why), "%s", r->why ? r->why : "");
    g->len = r->len;
    snprintf(g->body, sizeof(g->body), "%.*s", (int)(r->len < 255 ? r->len : 255), r->body);
    g->has_cc = r->cache_control != NULL;
    snprintf(g->cc, sizeof(g->cc), "%s", r->cache_control ? r->cache_control : "");
}

static void close_walk(uv_handle_t *h, void *arg)
{
    if (!uv_is_closing(h))
        uv_close(h, h->data == arg ? NULL : on_sconn_closed);
}

/* Run one fetch of http://127.0.0.1:PORT/jwks against reply; the loop runs until nothing is left. */
static void run_one(const char *reply, size_t max_bytes, uint64_t timeout_ms, struct got *g, struct srv *s)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    srv_start(&loop, s, reply, reply ? strlen(reply) : 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/jwks?x=1", s->port);
    struct tg_fetch_opts o = {.method = "GET", .url = url, .headers = "Accept: application/json\r\n",
                              .max_bytes = max_bytes, .timeout_ms = timeout_ms};
    const char *why = NULL;
    memset(g, 0, sizeof(*g));
    struct tg_fetch *f = tg_fetch_start(&loop, &o, on_fetched, g, &why);
    assert_non_null(f);
    assert_int_equal(g->called, 0); /* never inside */
    while (g->called == 0)
        uv_run(&loop, UV_RUN_ONCE);
    silent_conn = NULL;
    uv_close((uv_handle_t *)&s->listener, NULL);
    uv_walk(&loop, close_walk, s);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void test_ok_with_cache_control(void **st)
{
    struct got g;
    struct srv s;
    run_one("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nCache-Control: public, max-age=120\r\n"
            "Content-Length: 11\r\n\r\n{\"keys\":[]}",
            1024, 5000, &g, &s);
    assert_int_equal(g.called, 1);
    assert_int_equal(g.err, 0);
    assert_int_equal(g.status, 200);
    assert_string_equal(g.body, "{\"keys\":[]}");
    assert_string_equal(g.cc, "public, max-age=120");
    assert_non_null(strstr(s.last, "GET /jwks?x=1 HTTP/1.1\r\n"));
    assert_non_null(strstr(s.last, "Accept: application/json\r\n"));
}

static void test_status_is_the_callers(void **st)
{
    struct got g;
    struct srv s;
    run_one("HTTP/1.1 404 Not Found\r\nConnection: close\r\n\r\nnope", 1024, 5000, &g, &s);
    assert_int_equal(g.err, 0);
    assert_int_equal(g.status, 404);
    assert_int_equal(g.has_cc, 0);
    assert_string_equal(g.body, "nope");
}

static void test_redirect_refused(void **st)
{
    struct got g;
    struct srv s;
    run_one("HTTP/1.1 302 Found\r\nLocation: https://elsewhere.example/keys\r\nContent-Length: 0\r\n\r\n", 1024,
            5000, &g, &s);
    assert_int_equal(g.called, 1);
    assert_int_not_equal(g.err, 0);
    assert_non_null(strstr(g.why, "redirect (302) to https://elsewhere.example/keys refused"));
}

static void test_body_cap(void **st)
{
    struct got g;
    struct srv s;
    run_one("HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n0123456789012345678901234567890123456789", 16, 5000,
            &g, &s);
    assert_int_equal(g.err, TG_ELIMIT);
    assert_non_null(strstr(g.why, "over 16 bytes"));
}

static void test_timeout(void **st)
{
    struct got g;
    struct srv s;
    run_one(NULL, 1024, 100, &g, &s);
    assert_int_equal(g.err, TG_ETIMEDOUT);
    assert_string_equal(g.why, "timed out");
    assert_int_equal(s.requests, 1);
}

static void test_bad_urls(void **st)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct got g = {0};
    const char *bad[] = {"ftp://x/", "https://", "http://[::1/x", "https://h:99999/"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct tg_fetch_opts o = {.method = "GET", .url = bad[i], .max_bytes = 10, .timeout_ms = 100};
        const char *why = NULL;
        assert_null(tg_fetch_start(&loop, &o, on_fetched, &g, &why));
        assert_non_null(why);
    }
    struct tg_fetch_opts o = {.method = "GET", .url = "https://127.0.0.1:1/", .ca_file = "/nonexistent/ca.pem",
                              .max_bytes = 10, .timeout_ms = 100};
    const char *why = NULL;
    assert_null(tg_fetch_start(&loop, &o, on_fetched, &g, &why));
    assert_non_null(why);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(g.called, 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* https://: the CA bundle is read off the loop; one that does not parse fails through the
 * callback, and a cancel while it is being read means no callback at all. */
static void test_ca_off_the_loop(void **st)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    char ca[] = "/tmp/tg-fetch-ca-XXXXXX";
    int fd = mkstemp(ca);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "not a certificate\n", 18), 18);
    close(fd);
    struct tg_fetch_opts o = {.method = "GET", .url = "https://127.0.0.1:1/", .ca_file = ca, .max_bytes = 10,
                              .timeout_ms = 1000};
    struct got g = {0};
    const char *why = NULL;
    assert_non_null(tg_fetch_start(&loop, &o, on_fetched, &g, &why));
    assert_int_equal(g.called, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(g.called, 1);
    assert_int_equal(g.err, TG_EINVAL);
    assert_non_null(strstr(g.why, "CA: "));
    memset(&g, 0, sizeof(g));
    struct tg_fetch *f = tg_fetch_start(&loop, &o, on_fetched, &g, &why);
    tg_fetch_cancel(f);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(g.called, 0);
    assert_int_equal(uv_loop_close(&loop), 0);
    unlink(ca);
}

static void test_cancel_no_callback(void **st)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct srv s;
    srv_start(&loop, &s, NULL, 0);
    char url[64];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/", s.port);
    struct tg_fetch_opts o = {.method = "POST", .url = url, .body = "a=b", .body_len = 3, .max_bytes = 10,
                              .timeout_ms = 5000};
    struct got g = {0};
    const char *why = NULL;
    struct tg_fetch *f = tg_fetch_start(&loop, &o, on_fetched, &g, &why);
    while (s.requests == 0)
        uv_run(&loop, UV_RUN_ONCE);
    assert_non_null(strstr(s.last, "POST / HTTP/1.1\r\n"));
    tg_fetch_cancel(f);
    uv_close((uv_handle_t *)&s.listener, NULL);
    uv_walk(&loop, close_walk, &s);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(g.called, 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_with_cache_control), cmocka_unit_test(test_status_is_the_callers),
        cmocka_unit_test(test_redirect_refused),      cmocka_unit_test(test_body_cap),
        cmocka_unit_test(test_timeout),               cmocka_unit_test(test_bad_urls),
        cmocka_unit_test(test_cancel_no_callback),    cmocka_unit_test(test_ca_off_the_loop),
    };
    return tg_unit_run("upstream/fetch", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
