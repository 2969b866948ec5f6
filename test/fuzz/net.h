/* What the network fuzz targets (fuzz_http1.c, fuzz_ws.c) share: a real libuv loop with a
 * listener on 127.0.0.1 (ephemeral port) whose connections are real tg_conns
 * (tg_http1_accept), and one client socket per input through which the fuzz bytes go, in
 * chunks, as a client would send them. The harness does what core/app/server.c does around the
 * transport: tg_http_run_pending() and tg_http_flush_corked() after each round of I/O and
 * before polling, and each complete request goes to the target's handler.
 *
 * The client socket closes with SO_LINGER 0 (a reset): neither side keeps a TIME_WAIT entry,
 * so millions of connections do not use up the ephemeral ports.
 *
 * Both sides send without Nagle (a small chunk would otherwise wait for the peer's delayed ACK),
 * and each round first waits until neither side holds unsent bytes (SIOCOUTQNSD): loopback then
 * has handed everything either side wrote to the other, and "run until idle" is "run rounds of
 * the loop until one makes no progress". Every input ends
 * with the connection closed and freed; the loop lives for the whole process. */
#ifndef TG_TEST_FUZZ_NET_H
#define TG_TEST_FUZZ_NET_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "core/conf/conf.h"
#include "core/base/log.h"
#include "core/base/metrics.h"
#include "transports/http1/http1.h"

#include "loopback.h"

struct fnet;
typedef void (*fnet_handler)(struct fnet *n, struct tg_conn *c);

/* The process's world. Owner: the target (static storage), made once by fnet_get(). */
struct fnet {
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
    fnet_handler handler;
    /* per input */
    int fd;                 /* the client socket */
    struct tg_conn *conn;   /* the server side, until it is freed */
    int accepted, gone;     /* since the process began */
    unsigned long progress; /* bumped by anything that happens: requests, bytes, closes */
    struct tg_buf got;      /* bytes the client received */
    int eof;
};

static void fnet_on_idle(uv_idle_t *i) { (void)i; }

static void fnet_flush(struct fnet *n)
{
    tg_http_run_pending(&n->env);
    tg_http_flush_corked(&n->env);
    if (!tg_list_empty(&n->env.conn_pending))
        uv_idle_start(&n->idle, fnet_on_idle);
    else
        uv_idle_stop(&n->idle);
}
static void fnet_on_check(uv_check_t *c) { fnet_flush(c->data); }
static void fnet_on_prepare(uv_prepare_t *p) { fnet_flush(p->data); }

static void fnet_on_request(struct tg_http_env *env, struct tg_conn *c)
{
    struct fnet *n = env->ud;
    n->progress++;
    n->handler(n, c);
}

static void fnet_on_conn_gone(struct tg_http_env *env, struct tg_conn *c)
{
    struct fnet *n = env->ud;
    n->gone++;
    n->progress++;
    if (n->conn == c)
        n->conn = NULL;
}

static void fnet_on_connection(uv_stream_t *s, int status)
{
    struct fnet *n = s->data;
    if (status != 0)
        abort();
    size_t before = n->env.nconns;
    tg_http1_accept(&n->env, &n->hl, s);
    n->accepted++;
    if (n->env.nconns > before)
        n->conn = tg_container_of(n->env.conns.prev, struct tg_conn, node);
}

static void fnet_default_limits(struct tg_limits *l)
{
    memset(l, 0, sizeof(*l));
    l->max_connections = 100;
    l->header_bytes = 8192;
    l->body_bytes = 65536;
    l->header_timeout_ms = 60000; /* no timer fires within an input */
    l->idle_timeout_ms = 60000;
    l->output_high_water = 1 << 20;
    l->output_total_bytes = 64 << 20;
}

static struct fnet *fnet_get(fnet_handler handler)
{
    static struct fnet *n;
    if (n != NULL)
        return n;
    tg_log_setup(TG_LOG_ERROR, TG_LOG_LOGFMT, "/dev/null"); /* quiet: peers misbehave on purpose */
    n = tg_xcalloc(1, sizeof(*n));
    if (uv_loop_init(&n->loop) != 0)
        abort();
    fnet_default_limits(&n->limits);
    tg_http_env_init(&n->env, &n->loop, &n->limits, &n->metrics, &n->draining);
    n->env.on_request = fnet_on_request;
    n->env.conn_gone = fnet_on_conn_gone;
    n->env.ud = n;
    n->handler = handler;
    n->fd = -1;
    tg_buf_init(&n->got);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_init(&n->loop, &n->listen);
    n->listen.data = n;
    if (uv_tcp_bind(&n->listen, (const struct sockaddr *)&a, 0) != 0 ||
        uv_listen((uv_stream_t *)&n->listen, 16, fnet_on_connection) != 0)
        abort();
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uv_tcp_getsockname(&n->listen, (struct sockaddr *)&ss, &len);
    n->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    n->hl.port = n->port;
    uv_check_init(&n->loop, &n->check);
    n->check.data = n;
    uv_check_start(&n->check, fnet_on_check);
    uv_unref((uv_handle_t *)&n->check);
    uv_prepare_init(&n->loop, &n->prepare);
    n->prepare.data = n;
    uv_prepare_start(&n->prepare, fnet_on_prepare);
    uv_unref((uv_handle_t *)&n->prepare);
    uv_idle_init(&n->loop, &n->idle);
    uv_unref((uv_handle_t *)&n->idle);
    return n;
}

/* Read what the server sent so far (the client never blocks). */
static void fnet_recv(struct fnet *n)
{
    for (;;) {
        char buf[16384];
        ssize_t r = recv(n->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0) {
            tg_buf_append(&n->got, buf, (size_t)r);
            n->progress++;
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (!n->eof)
            n->progress++;
        n->eof = 1; /* 0: FIN; < 0: reset */
        return;
    }
}

static int fnet_outq(int fd)
{
    int v = 0;
    return fd >= 0 && ioctl(fd, SIOCOUTQNSD, &v) == 0 ? v : 0;
}

/* Wait until neither side holds bytes it has not sent. */
static void fnet_sync(struct fnet *n)
{
    for (int i = 0;; i++) {
        int sfd = -1;
        if (n->conn != NULL && n->conn->phase < TG_CONN_CLOSING)
            uv_fileno((uv_handle_t *)&n->conn->tcp, &sfd);
        if (fnet_outq(n->fd) == 0 && fnet_outq(sfd) == 0)
            return;
        if (i == 100000)
            return; /* a receive window stays full (a reader that stopped): nothing more will come */
        fnet_recv(n); /* a full client window holds the server's queue */
        sched_yield();
    }
}

/* Rounds of the loop (and of the client's reading) until one changes nothing. */
static void fnet_settle(struct fnet *n)
{
    for (int i = 0; i < 10000; i++) {
        unsigned long before = n->progress;
        fnet_sync(n);
        uv_run(&n->loop, UV_RUN_NOWAIT);
        fnet_sync(n);
        fnet_recv(n);
        if (n->progress == before && tg_list_empty(&n->env.conn_pending))
            return;
    }
}

/* A new client connection, with its server side accepted. */
static void fnet_connect(struct fnet *n)
{
    int e = floop_connect(&n->fd, n->port);
    if (e != 0) {
        fprintf(stderr, "fnet_connect: %s\n", strerror(e));
        abort();
    }
    n->got.len = 0;
    n->eof = 0;
    int want = n->accepted + 1;
    for (int i = 0; n->accepted < want; i++) {
        if (i == 100000)
            abort();
        uv_run(&n->loop, UV_RUN_NOWAIT);
    }
}

/* Send p[0..len) as the client, then let the server take it in. */
static void fnet_send(struct fnet *n, const uint8_t *p, size_t len)
{
    while (len > 0 && !n->eof) {
        ssize_t w = send(n->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            break; /* the server reset the connection */
        }
        fnet_settle(n);
    }
    fnet_settle(n);
}

/* Close the client (a reset) and every server connection, and wait until they are freed. */
static void fnet_close(struct fnet *n)
{
    close(n->fd);
    n->fd = -1;
    for (struct tg_list *l = n->env.conns.next, *next; l != &n->env.conns; l = next) {
        next = l->next;
        tg_conn_close_now(tg_container_of(l, struct tg_conn, node), "input over");
    }
    for (int i = 0; n->gone != n->accepted || n->env.nconns != 0 || !tg_list_empty(&n->env.conn_pending); i++) {
        if (i == 100000)
            abort(); /* a connection that never finishes closing */
        uv_run(&n->loop, UV_RUN_NOWAIT);
    }
    if (n->metrics.output_buffered != 0)
        abort(); /* every byte counted as queued was written or dropped */
}

#endif
