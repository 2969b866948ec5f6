/* A fake environment for transports/http1: a real loop, a listener on 127.0.0.1 (ephemeral
 * port) whose connections are tg_conns, and one plain client socket the test writes raw
 * bytes into and reads the exact answer bytes from.
 *
 * The harness does what the server does around the transport: it owns the struct
 * tg_http_env, runs tg_http_run_pending() and tg_http_flush_corked() after each round of
 * I/O and before polling (a check and a prepare handle, an idle handle while work waits),
 * and sends each complete request to the test's handler. in_run_pending is 1 exactly while
 * tg_http_run_pending() is on the stack, so a test can tell where a callback came from.
 *
 * Waiting is always "run the loop until a condition holds", bounded by a watchdog timer:
 * no sleep. Teardown closes everything and requires uv_loop_close() to succeed, and LSan
 * checks that nothing leaked. */
#ifndef TG_TEST_TRANSPORTS_HARNESS_H
#define TG_TEST_TRANSPORTS_HARNESS_H

#include "test/unit/unit.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "core/conf/conf.h"
#include "core/base/log.h"
#include "core/base/metrics.h"
#include "transports/http1/http1.h"

struct hh;
typedef void (*hh_handler)(struct hh *h, struct tg_conn *c);

/* One test's world. Owner: the test case (hh_new / hh_free). */
struct hh {
    uv_loop_t loop;
    struct tg_limits limits;
    struct tg_metrics metrics;
    int draining;
    struct tg_http_env env;
    struct tg_http_listener hl;
    uv_tcp_t listen;
    int port;
    uv_check_t check;
    uv_prepare_t prepare;
    uv_idle_t idle;
    uv_timer_t watchdog;
    int timed_out;
    int in_run_pending;
    /* the client side */
    int fd;
    uv_poll_t poll;
    int polling;
    struct tg_buf got; /* bytes received and not yet checked */
    int eof;           /* the server closed (FIN or reset) */
    /* the server side */
    struct tg_conn *conn; /* the last connection accepted, until it is freed */
    int accepted, gone, requests;
    hh_handler handler;
    void *ud; /* the test's */
};

static inline void hh_on_idle(uv_idle_t *i) { (void)i; }

/* What the server's flush_all does for the transport, once per round. */
static inline void hh_flush(struct hh *h)
{
    h->in_run_pending = 1;
    tg_http_run_pending(&h->env);
    h->in_run_pending = 0;
    tg_http_flush_corked(&h->env);
    if (!tg_list_empty(&h->env.conn_pending))
        uv_idle_start(&h->idle, hh_on_idle); /* work waits for the next round: poll must not block */
    else
        uv_idle_stop(&h->idle);
}
static inline void hh_on_check(uv_check_t *c) { hh_flush(c->data); }
static inline void hh_on_prepare(uv_prepare_t *p) { hh_flush(p->data); }
static inline void hh_on_watchdog(uv_timer_t *t) { ((struct hh *)t->data)->timed_out = 1; }

static inline void hh_on_request(struct tg_http_env *env, struct tg_conn *c)
{
    struct hh *h = env->ud;
    h->requests++;
    if (h->handler)
        h->handler(h, c);
}

static inline void hh_on_conn_gone(struct tg_http_env *env, struct tg_conn *c)
{
    struct hh *h = env->ud;
    h->gone++;
    if (h->conn == c)
        h->conn = NULL;
}

static inline void hh_on_connection(uv_stream_t *s, int status)
{
    struct hh *h = s->data;
    assert_int_equal(status, 0);
    size_t before = h->env.nconns;
    tg_http1_accept(&h->env, &h->hl, s);
    h->accepted++;
    if (h->env.nconns > before)
        h->conn = tg_container_of(h->env.conns.prev, struct tg_conn, node);
}

static inline void hh_on_readable(uv_poll_t *p, int status, int events)
{
    struct hh *h = p->data;
    for (;;) {
        char buf[16384];
        ssize_t n = recv(h->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            tg_buf_append(&h->got, buf, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        h->eof = 1; /* 0: FIN; < 0: reset */
        uv_poll_stop(p);
        return;
    }
}

/* Run the loop until cond holds; fail after ms. */
#define HH_RUN_UNTIL_MS(h, cond, ms)                                                                                  \
    do {                                                                                                              \
        (h)->timed_out = 0;                                                                                           \
        uv_timer_start(&(h)->watchdog, hh_on_watchdog, (ms), 0);                                                      \
        while (!(cond) && !(h)->timed_out)                                                                            \
            uv_run(&(h)->loop, UV_RUN_ONCE);                                                                          \
        uv_timer_stop(&(h)->watchdog);                                                                                \
        if (!(cond))                                                                                                  \
            fail_msg("%s:%d: timed out waiting for %s (received so far: %zu bytes%s)", __FILE__, __LINE__, #cond,    \
                     (h)->got.len, (h)->eof ? ", then EOF" : "");                                                    \
    } while (0)
#define HH_RUN_UNTIL(h, cond) HH_RUN_UNTIL_MS(h, cond, 5000)

/* A few rounds of the loop that wait for nothing: for checking that something does NOT happen
 * (bytes already sent over loopback are readable at once, so each round sees them). */
static inline void hh_spin(struct hh *h, int rounds)
{
    for (int i = 0; i < rounds; i++)
        uv_run(&h->loop, UV_RUN_NOWAIT);
}

static inline void hh_default_limits(struct tg_limits *l)
{
    memset(l, 0, sizeof(*l));
    l->max_connections = 100;
    l->header_bytes = 8192;
    l->body_bytes = 65536;
    l->header_timeout_ms = 5000;
    l->idle_timeout_ms = 30000;
    l->output_high_water = 1 << 20;
    l->output_total_bytes = 64 << 20;
}

/* Set limits (h->limits) before hh_connect: the header timeout is armed at accept. */
static inline struct hh *hh_new(hh_handler handler)
{
    struct hh *h = tg_xcalloc(1, sizeof(*h));
    assert_int_equal(uv_loop_init(&h->loop), 0);
    hh_default_limits(&h->limits);
    tg_http_env_init(&h->env, &h->loop, &h->limits, &h->metrics, &h->draining);
    h->env.on_request = hh_on_request;
    h->env.conn_gone = hh_on_conn_gone;
    h->env.ud = h;
    h->handler = handler;
    h->fd = -1;
    tg_buf_init(&h->got);
    assert_int_equal(uv_tcp_init(&h->loop, &h->listen), 0);
    h->listen.data = h;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_bind(&h->listen, (const struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&h->listen, 16, hh_on_connection), 0);
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    assert_int_equal(uv_tcp_getsockname(&h->listen, (struct sockaddr *)&ss, &len), 0);
    h->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    h->hl.port = h->port;
    uv_check_init(&h->loop, &h->check);
    h->check.data = h;
    uv_check_start(&h->check, hh_on_check);
    uv_unref((uv_handle_t *)&h->check);
    uv_prepare_init(&h->loop, &h->prepare);
    h->prepare.data = h;
    uv_prepare_start(&h->prepare, hh_on_prepare);
    uv_unref((uv_handle_t *)&h->prepare);
    uv_idle_init(&h->loop, &h->idle);
    uv_unref((uv_handle_t *)&h->idle);
    uv_timer_init(&h->loop, &h->watchdog);
    h->watchdog.data = h;
    return h;
}

/* Connect the client and wait until the server side has its tg_conn. */
static inline void hh_connect(struct hh *h)
{
    h->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(h->fd >= 0);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", h->port, &a);
    /* The listen backlog completes the handshake: a blocking connect returns before accept. */
    assert_int_equal(connect(h->fd, (const struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(uv_poll_init(&h->loop, &h->poll, h->fd), 0);
    h->poll.data = h;
    h->polling = 1;
    h->eof = 0;
    uv_poll_start(&h->poll, UV_READABLE, hh_on_readable);
    int want = h->accepted + 1;
    HH_RUN_UNTIL(h, h->accepted == want);
}

static inline void hh_send(struct hh *h, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(h->fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        assert_true(w > 0);
        c += w;
        n -= (size_t)w;
    }
}
#define HH_SEND(h, lit) hh_send((h), (lit), sizeof(lit) - 1)

/* Printable form of bytes for failure messages. */
static inline const char *hh_show(const char *p, size_t n, char *out, size_t outsz)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 5 < outsz; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\r') {
            out[o++] = '\\';
            out[o++] = 'r';
        } else if (ch == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
            out[o++] = (char)ch;
        } else {
            o += (size_t)snprintf(out + o, outsz - o, "\\x%02x", ch);
        }
    }
    out[o] = '\0';
    return out;
}

/* Wait for n more bytes from the server; they must be exactly want. They are consumed. */
static inline void hh_expect_bytes(struct hh *h, const void *want, size_t n, const char *file, int line)
{
    HH_RUN_UNTIL(h, h->got.len >= n || h->eof);
    if (h->got.len < n || memcmp(h->got.base, want, n) != 0) {
        char a[4096], b[4096];
        fail_msg("%s:%d: the server sent\n  \"%s\"%s\nexpected\n  \"%s\"", file, line,
                 hh_show(h->got.base, h->got.len < n ? h->got.len : n, a, sizeof(a)), h->eof ? " (then EOF)" : "",
                 hh_show(want, n, b, sizeof(b)));
    }
    tg_buf_consume(&h->got, n);
}
#define HH_EXPECT(h, lit) hh_expect_bytes((h), (lit), sizeof(lit) - 1, __FILE__, __LINE__)
#define HH_EXPECT_N(h, p, n) hh_expect_bytes((h), (p), (n), __FILE__, __LINE__)

/* The server closes the connection with nothing more sent. */
static inline void hh_expect_eof(struct hh *h, const char *file, int line)
{
    HH_RUN_UNTIL(h, h->eof);
    if (h->got.len != 0) {
        char a[4096];
        fail_msg("%s:%d: %zu unexpected bytes before EOF: \"%s\"", file, line, h->got.len,
                 hh_show(h->got.base, h->got.len, a, sizeof(a)));
    }
}
#define HH_EXPECT_EOF(h) hh_expect_eof((h), __FILE__, __LINE__)

/* Nothing more arrives (and the connection stays open) over a few rounds. */
static inline void hh_expect_quiet(struct hh *h, const char *file, int line)
{
    hh_spin(h, 10);
    if (h->got.len != 0 || h->eof) {
        char a[4096];
        fail_msg("%s:%d: expected silence, got \"%s\"%s", file, line, hh_show(h->got.base, h->got.len, a, sizeof(a)),
                 h->eof ? " (then EOF)" : "");
    }
}
#define HH_EXPECT_QUIET(h) hh_expect_quiet((h), __FILE__, __LINE__)

static inline void hh_on_handle_describe(uv_handle_t *u, void *arg)
{
    (void)arg;
    print_error("left open: %s handle %p (active %d, closing %d)\n", uv_handle_type_name(u->type), (void *)u,
                uv_is_active(u), uv_is_closing(u));
}

/* Close the client, every connection and the harness's handles; the loop must end empty. */
static inline void hh_free(struct hh *h)
{
    if (h->polling) {
        uv_close((uv_handle_t *)&h->poll, NULL);
        h->polling = 0;
    }
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
    for (struct tg_list *l = h->env.conns.next, *next; l != &h->env.conns; l = next) {
        next = l->next;
        tg_conn_close_now(tg_container_of(l, struct tg_conn, node), "test over");
    }
    HH_RUN_UNTIL(h, h->gone == h->accepted && h->env.nconns == 0);
    uv_close((uv_handle_t *)&h->listen, NULL);
    uv_close((uv_handle_t *)&h->check, NULL);
    uv_close((uv_handle_t *)&h->prepare, NULL);
    uv_close((uv_handle_t *)&h->idle, NULL);
    uv_close((uv_handle_t *)&h->watchdog, NULL);
    tg_http_env_close(&h->env);
    uv_run(&h->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&h->loop) != 0) {
        uv_walk(&h->loop, hh_on_handle_describe, NULL);
        fail_msg("handles left open after the test");
    }
    assert_int_equal(h->metrics.output_buffered, 0);
    tg_http_env_dispose(&h->env);
    tg_buf_dispose(&h->got);
    free(h);
}

#endif
