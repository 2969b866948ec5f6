/* End to end: the whole gateway (core/app/server.c and everything under it: routing, Origin and
 * authentication, /mcp in both protocol eras, legacy /sse + /messages, the /ws handshake and
 * WebSocket sessions, batches, policy decisions, local initialize, the admin listener) on a real
 * libuv loop, with the fuzz input as the bytes of one client connection over loopback TCP,
 * accepted by the server's own listener. Each input gets a fresh server (tg_server_init, start,
 * drain, dispose) from one configuration written at start-up: a client listener and the admin
 * listener on ephemeral ports, an anonymous grant, upstream "a" (initialize = "local", the
 * default) and upstream "b" (2026-07-28), both at 127.0.0.1:9 where nothing listens, so a
 * forwarded call fails quickly without leaving the machine.
 *
 * Input: byte 0 picks
 *   bits 0-5: 0 = the rest at once, else chunks of that many bytes (each taken in before the next)
 *   bit 6: connect to the admin listener (token "t") instead of the client one
 *   bit 7: the client half-closes after its last byte (instead of a reset at the end)
 * then the bytes of the connection, where "@SID@" stands for the session id the gateway gave
 * last (ids are random) and "@SYNC@" for nothing; what comes before either is sent and
 * answered first.
 *
 * Properties: no crash, leak or undefined behaviour; the drain that ends each input finishes
 * (the loop runs dry: a handle left open is a hang, a libFuzzer timeout) and uv_loop_close()
 * succeeds; the output accounting returns to zero. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "core/base/log.h"
#include "core/app/server.h"
#include "transports/http1/http1.h"

#include "loopback.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A violated property or a failed set-up step: say which before aborting (a bare abort() is
 * only "deadly signal" in libFuzzer's fork mode). */
#define FAIL(why)                                                                                                     \
    do {                                                                                                              \
        fprintf(stderr, "fuzz_e2e:%d: %s\n", __LINE__, why);                                                          \
        abort();                                                                                                      \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define POLICY                                                                                                        \
    "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{"                                                             \
    "\"echo\":{\"action\":\"allow\"},"                                                                                \
    "\"rm\":{\"action\":\"deny\",\"reason\":\"no\"},"                                                                 \
    "\"once\":{\"limits\":[{\"counter\":\"once_rate\",\"window\":\"day\",\"max\":1}]},"                               \
    "\"deploy\":{\"action\":\"approve\",\"approval_timeout\":30}"                                                     \
    "}}"

/* %s: the directory, twice. sha256("t") is the admin token's. The audit log is written (to
 * /dev/null: a file would grow with every input). */
#define CONF                                                                                                          \
    "log = { level = \"error\"; file = \"/dev/null\"; };\n"                                                           \
    "listen = ( { address = \"127.0.0.1\"; port = 0; origins = [ \"https://app.example\" ]; } );\n"                   \
    "admin = { address = \"127.0.0.1\"; port = 0;\n"                                                                  \
    "  token_sha256 = \"e3b98a4da31a127d4bde6e43033f66ba274cab0eb7eb1c70ec41402bf6273dd8\"; };\n"                    \
    "limits = { header_bytes = 4096; body_bytes = 16384; inflight_per_session = 4; approvals_max = 2;\n"              \
    "  drain_timeout_ms = 0; sessions_per_grant = 8; replay_bytes = 4096; };\n"                                       \
    "audit = { file = \"/dev/null\"; };\n"                                                                         \
    "grants = ( { name = \"anon\"; anonymous = true; } );\n"                                                          \
    "upstreams = (\n"                                                                                                 \
    "  { name = \"a\"; url = \"http://127.0.0.1:9/mcp\"; default = true; initialize = \"local\";\n"                  \
    "    policy = \"%s/policy.json\"; connect_timeout_ms = 1000; call_timeout_ms = 1000; },\n"                       \
    "  { name = \"b\"; url = \"http://127.0.0.1:9/mcp\"; protocol = \"2026\"; policy = \"%s/policy.json\";\n"        \
    "    deny_server_requests = [ \"sampling/createMessage\" ]; }\n"                                                  \
    ");\n"

/* The process's: the configuration (one reference, kept to the end) and its directory. */
static struct {
    char dir[256];
    struct tg_conf *conf;
} g;

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL || fwrite(text, 1, strlen(text), f) != strlen(text) || fclose(f) != 0)
        FAIL("cannot write the configuration");
}

static void remove_dir(void)
{
    static const char *const names[] = {"policy.json", "tollgate.conf"};
    char path[400];
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", g.dir, names[i]);
        unlink(path);
    }
    rmdir(g.dir);
    tg_conf_unref(g.conf);
    g.conf = NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    tg_log_setup(TG_LOG_ERROR, TG_LOG_LOGFMT, "/dev/null");
    const char *base = getenv("TMPDIR");
    snprintf(g.dir, sizeof(g.dir), "%s/tg-fuzz-e2e-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(g.dir) == NULL)
        FAIL("mkdtemp failed");
    write_file(g.dir, "policy.json", POLICY);
    char conf[4096];
    snprintf(conf, sizeof(conf), CONF, g.dir, g.dir);
    write_file(g.dir, "tollgate.conf", conf);
    char path[400];
    snprintf(path, sizeof(path), "%s/tollgate.conf", g.dir);
    struct tg_buf err;
    tg_buf_init(&err);
    g.conf = tg_conf_load(path, &err);
    if (g.conf == NULL) {
        fprintf(stderr, "fuzz_e2e: configuration refused:\n%.*s\n", (int)err.len, err.base);
        FAIL("the configuration was refused");
    }
    tg_buf_dispose(&err);
    atexit(remove_dir);
    return 0;
}

/* ---- the client -------------------------------------------------------------------------- */

/* One input's client. Owner: LLVMFuzzerTestOneInput (on its stack). */
struct client {
    int fd;
    struct tg_buf got;
    int eof;
};

static void client_recv(struct client *cl)
{
    for (;;) {
        char buf[16384];
        ssize_t r = recv(cl->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0) {
            tg_buf_append(&cl->got, buf, (size_t)r);
            continue;
        }
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        cl->eof = 1;
        return;
    }
}

static int unsent(int fd)
{
    int v = 0;
    return fd >= 0 && ioctl(fd, SIOCOUTQNSD, &v) == 0 ? v : 0;
}

/* Wait until neither the client nor any server connection holds bytes it has not sent (see
 * test/fuzz/net.h: loopback has then handed them over). */
static void sync_wire(struct tg_server *srv, struct client *cl)
{
    for (int i = 0; i < 100000; i++) {
        int left = unsent(cl->fd);
        for (struct tg_list *l = tg_app_of(srv)->http.conns.next; l != &tg_app_of(srv)->http.conns && left == 0; l = l->next) {
            struct tg_conn *c = tg_container_of(l, struct tg_conn, node);
            int fd = -1;
            if (c->phase < TG_CONN_CLOSING && uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0)
                left = unsent(fd);
        }
        if (left == 0)
            return;
        client_recv(cl);
        sched_yield();
    }
}

/* Rounds of the loop until two in a row change nothing: no counter moves (every request,
 * answer, call, connection and limit is counted in srv->metrics) and no byte arrives. */
static void settle(struct tg_server *srv, struct client *cl)
{
    int quiet = 0;
    for (int i = 0; i < 2000 && quiet < 2; i++) {
        struct tg_metrics before;
        memcpy(&before, &srv->metrics, sizeof(before)); /* padding too: memcmp compares it */
        size_t got = cl->got.len;
        int eof = cl->eof;
        sync_wire(srv, cl);
        uv_run(srv->loop, UV_RUN_NOWAIT);
        sync_wire(srv, cl);
        client_recv(cl);
        /* The loop's own counters move with every iteration: they are not the gateway doing anything. */
        before.loop_iterations = srv->metrics.loop_iterations;
        before.loop_busy_max_ns = srv->metrics.loop_busy_max_ns;
        before.loop_stalls = srv->metrics.loop_stalls;
        int same = memcmp(&before, &srv->metrics, sizeof(before)) == 0 && got == cl->got.len && eof == cl->eof;
        quiet = same ? quiet + 1 : 0;
    }
}

static void client_send(struct tg_server *srv, struct client *cl, const uint8_t *p, size_t len)
{
    while (len > 0 && !cl->eof) {
        ssize_t w = send(cl->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            p += w;
            len -= (size_t)w;
        } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            break; /* reset by the server */
        }
        settle(srv, cl);
    }
    settle(srv, cl);
}

/* The session id the gateway gave this client last: an Mcp-Session-Id header, or the
 * sessionId= of a legacy SSE endpoint event. Session ids are random, so an input names the
 * current one "@SID@" (see send_input). */
static struct tg_slice last_sid(const struct client *cl)
{
    struct tg_slice best = TG_SLICE_NULL;
    if (cl->got.len == 0)
        return best;
    const char *end = cl->got.base + cl->got.len;
    for (const char *p = cl->got.base; p != NULL && p < end; p++) {
        size_t left = (size_t)(end - p), skip = 0;
        if (left > 16 && strncasecmp(p, "mcp-session-id: ", 16) == 0)
            skip = 16;
        else if (left > 10 && memcmp(p, "sessionId=", 10) == 0)
            skip = 10;
        if (skip == 0)
            continue;
        const char *v = p + skip, *e = v;
        while (e < end && *e != '\r' && *e != '\n' && *e != '&' && *e != '"' && *e != ' ')
            e++;
        best = tg_slice_of(v, (size_t)(e - v));
        p = e - 1;
    }
    return best;
}

static void send_chunked(struct tg_server *srv, struct client *cl, const uint8_t *p, size_t len, size_t chunk)
{
    if (chunk == 0)
        chunk = len;
    for (size_t off = 0; off < len; off += chunk)
        client_send(srv, cl, p + off, len - off < chunk ? len - off : chunk);
}

/* The first marker in p[0..len): its offset (len if none) and length (5 "@SID@", 6 "@SYNC@"). */
static size_t find_marker(const uint8_t *p, size_t len, size_t *mlen)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != '@')
            continue;
        if (len - i >= 5 && memcmp(p + i, "@SID@", 5) == 0) {
            *mlen = 5;
            return i;
        }
        if (len - i >= 6 && memcmp(p + i, "@SYNC@", 6) == 0) {
            *mlen = 6;
            return i;
        }
    }
    *mlen = 0;
    return len;
}

/* The input's bytes, with each "@SID@" replaced by the session id the gateway has given by then
 * and each "@SYNC@" by nothing (what comes before either is sent and answered first). */
static void send_input(struct tg_server *srv, struct client *cl, const uint8_t *p, size_t len, size_t chunk)
{
    while (len > 0) {
        size_t mlen, n = find_marker(p, len, &mlen);
        send_chunked(srv, cl, p, n, chunk);
        if (mlen == 5) {
            struct tg_slice sid = last_sid(cl);
            char copy[128];
            if (sid.len > sizeof(copy))
                sid.len = sizeof(copy);
            if (sid.len) {
                memcpy(copy, sid.ptr, sid.len); /* cl->got may move while it is sent */
                send_chunked(srv, cl, (const uint8_t *)copy, sid.len, chunk);
            }
        }
        p += n + mlen;
        len -= n + mlen;
    }
}

/* ---- one input ----------------------------------------------------------------------------- */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;

    uv_loop_t loop;
    if (uv_loop_init(&loop) != 0)
        FAIL("uv_loop_init failed");
    struct tg_app *app = tg_xcalloc(1, sizeof(*app));
    struct tg_server *srv = &app->srv;
    if (tg_server_init(app, &loop, g.conf) != 0)
        FAIL("tg_server_init failed");
    /* main() makes these; the drain closes them. They are never started here. */
    uv_signal_t *sigs[] = {&app->sigterm, &app->sigint, &app->sighup, &app->sigusr1};
    for (size_t i = 0; i < 4; i++)
        uv_signal_init(&loop, sigs[i]);
    if (tg_server_start(app) != 0)
        FAIL("tg_server_start failed");
    int port = (mode & 0x40) ? app->admin.http.port : app->listeners[0].http.port;

    struct client cl = {.fd = -1};
    tg_buf_init(&cl.got);
    int e = floop_connect(&cl.fd, port);
    if (e != 0) {
        fprintf(stderr, "connect: %s\n", strerror(e));
        FAIL("connect failed");
    }
    for (int i = 0; srv->metrics.conns_accepted == 0; i++) {
        if (i == 100000)
            FAIL("the server did not accept the connection");
        uv_run(&loop, UV_RUN_NOWAIT);
    }

    send_input(srv, &cl, data, size, mode & 0x3f);
    if (mode & 0x80) {
        shutdown(cl.fd, SHUT_WR);
        settle(srv, &cl);
    }
    if (getenv("TG_FUZZ_VERBOSE") != NULL)
        fprintf(stderr, "requests=%llu got=%zu eof=%d:\n%.*s\n", (unsigned long long)srv->metrics.http_requests,
                cl.got.len, cl.eof, (int)(cl.got.len < 2000 ? cl.got.len : 2000), cl.got.base ? cl.got.base : "");
    close(cl.fd);
    tg_buf_dispose(&cl.got);

    tg_server_drain(srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    tg_server_dispose(app);
    if (srv->metrics.output_buffered != 0)
        FAIL("output accounting did not return to zero");
    free(app);
    if (uv_loop_close(&loop) != 0)
        FAIL("a handle outlived the drain");
    return 0;
}
