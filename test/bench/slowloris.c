/*
 * slowloris — tg-bench-slowloris: holds N slow clients open against a gateway, each sending one
 * byte of a request it never finishes every --interval-ms, for test/bench/slowloris.sh.
 *
 *   --mode http   POST /PATH HTTP/1.1 ... (a Streamable HTTP request head, one byte at a time)
 *   --mode sse    GET /PATH (legacy HTTP+SSE: the head of the stream request, one byte at a time)
 *   --mode ws     GET /PATH with Upgrade: websocket sent whole; once the 101 is read, a masked
 *                 text frame of 125 bytes, one byte at a time (the frame never completes)
 *
 * The clients connect in batches (the listen backlog is finite), then the bytes are spread
 * evenly over the interval. Whatever the gateway sends is read and dropped; a client the
 * gateway closed is counted and not replaced. Stops after --duration seconds (or SIGTERM) and
 * prints one line:
 *   SLOW mode=.. wanted=.. connected=.. upgraded=.. alive=.. closed=.. bytes_sent=.. seconds=..
 * and, once every client is connected (upgraded for ws), "READY n" on stdout so a script can
 * start measuring.
 *
 * Plain poll-free POSIX sockets: each tick visits a slice of the clients with non-blocking
 * send/recv, which is cheap enough for 10,000 of them and a byte every few seconds each.
 */
#define _GNU_SOURCE

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

enum mode { MODE_HTTP, MODE_SSE, MODE_WS };

struct client {
    int fd;          /* -1 once closed */
    int upgraded;    /* ws: the 101 was read */
    size_t sent;     /* bytes of the slow part sent */
    char head[512];  /* ws: the handshake answer read so far */
    size_t head_len;
};

static volatile sig_atomic_t stop_flag;
static void on_term(int sig) { (void)sig; stop_flag = 1; }

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void usage(void)
{
    fprintf(stderr, "usage: tg-bench-slowloris --port P [--host 127.0.0.1] --mode http|sse|ws --path /x/mcp\n"
                    "       [--conns 10000] [--interval-ms 5000] [--duration 30]\n");
    exit(2);
}

static int connect_one(const struct sockaddr_in *sa)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    /* Blocking connect: on loopback it returns once the handshake is in the backlog. */
    if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

/* Reads and drops what the gateway sent; returns -1 when it closed the connection. */
static int drain(struct client *c, enum mode m)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
        if (n > 0) {
            if (m == MODE_WS && !c->upgraded) {
                size_t k = (size_t)n;
                if (k > sizeof(c->head) - 1 - c->head_len)
                    k = sizeof(c->head) - 1 - c->head_len;
                memcpy(c->head + c->head_len, buf, k);
                c->head_len += k;
                c->head[c->head_len] = 0;
                if (strstr(c->head, "\r\n\r\n") != NULL) {
                    if (strncmp(c->head, "HTTP/1.1 101", 12) != 0)
                        return -1;
                    c->upgraded = 1;
                }
            }
            continue;
        }
        if (n == 0)
            return -1;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        if (errno == EINTR)
            continue;
        return -1;
    }
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *path = NULL;
    int port = 0, conns = 10000, interval_ms = 5000, duration = 30;
    enum mode m = MODE_HTTP;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            usage();
        if (!strcmp(a, "--host"))
            host = v;
        else if (!strcmp(a, "--port"))
            port = atoi(v);
        else if (!strcmp(a, "--path"))
            path = v;
        else if (!strcmp(a, "--conns"))
            conns = atoi(v);
        else if (!strcmp(a, "--interval-ms"))
            interval_ms = atoi(v);
        else if (!strcmp(a, "--duration"))
            duration = atoi(v);
        else if (!strcmp(a, "--mode"))
            m = !strcmp(v, "http") ? MODE_HTTP : !strcmp(v, "sse") ? MODE_SSE : !strcmp(v, "ws") ? MODE_WS : (usage(), MODE_HTTP);
        else
            usage();
        i++;
    }
    if (port <= 0 || path == NULL || conns <= 0 || interval_ms <= 0 || duration <= 0)
        usage();
    signal(SIGPIPE, SIG_IGN);
    signal(SIGTERM, on_term);
    signal(SIGINT, on_term);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)conns + 64) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    /* The slow part each client dribbles, and what ws sends whole first. */
    char slow[1024], hello[1024];
    size_t slow_len, hello_len = 0;
    if (m == MODE_WS) {
        hello_len = (size_t)snprintf(hello, sizeof(hello),
                                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                                     "Sec-WebSocket-Protocol: mcp\r\n\r\n",
                                     path, host, port);
        /* FIN + text, masked, 125-byte payload: 6 bytes of header, then the payload. */
        unsigned char f[6 + 125] = {0x81, 0x80 | 125, 1, 2, 3, 4};
        for (size_t i = 6; i < sizeof(f); i++)
            f[i] = (unsigned char)('x' ^ f[2 + (i - 6) % 4]);
        memcpy(slow, f, sizeof(f));
        slow_len = sizeof(f);
    } else {
        slow_len = (size_t)snprintf(slow, sizeof(slow),
                                    m == MODE_HTTP
                                        ? "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                                          "Accept: application/json, text/event-stream\r\nX-Slow: %0400d\r\n\r\n"
                                        : "GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: text/event-stream\r\nX-Slow: %0400d\r\n\r\n",
                                    path, host, port, 0);
    }

    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        usage();
    struct client *cl = calloc((size_t)conns, sizeof(*cl));
    if (cl == NULL)
        return 1;
    double t0 = now_s();
    int connected = 0;
    for (int i = 0; i < conns && !stop_flag; i++) {
        cl[i].fd = connect_one(&sa);
        if (cl[i].fd < 0) {
            fprintf(stderr, "slowloris: connect %d failed: %s\n", i, strerror(errno));
            for (int j = i; j < conns; j++)
                cl[j].fd = -1;
            break;
        }
        connected++;
        if (hello_len && send(cl[i].fd, hello, hello_len, 0) != (ssize_t)hello_len) {
            close(cl[i].fd);
            cl[i].fd = -1;
        }
        /* The first byte at once, so every client is a started request before measuring. */
        if (m != MODE_WS && cl[i].fd >= 0 && send(cl[i].fd, slow, 1, 0) == 1)
            cl[i].sent = 1;
        if (i % 256 == 255) {
            /* Let the gateway accept the batch (backlog), and read its answers. */
            for (int j = i - 255; j <= i; j++)
                if (cl[j].fd >= 0 && drain(&cl[j], m) < 0) {
                    close(cl[j].fd);
                    cl[j].fd = -1;
                }
        }
    }
    /* ws: wait (bounded) for every 101 before the measuring starts. */
    int upgraded = 0;
    for (double until = now_s() + 30; m == MODE_WS && !stop_flag && now_s() < until;) {
        upgraded = 0;
        int open = 0;
        for (int i = 0; i < conns; i++) {
            if (cl[i].fd < 0)
                continue;
            if (drain(&cl[i], m) < 0) {
                close(cl[i].fd);
                cl[i].fd = -1;
                continue;
            }
            open++;
            upgraded += cl[i].upgraded;
        }
        if (upgraded == open)
            break;
        usleep(20000);
    }
    int alive = 0;
    for (int i = 0; i < conns; i++)
        alive += cl[i].fd >= 0;
    printf("READY %d\n", alive);
    fflush(stdout);
    fprintf(stderr, "slowloris: %d of %d clients connected and started in %.1f s\n", alive, conns, now_s() - t0);

    /* Every tick visits 1/slices of the clients, so each gets a byte once per interval. */
    const int tick_ms = 10;
    int slices = interval_ms / tick_ms > 0 ? interval_ms / tick_ms : 1;
    long long bytes = 0;
    double end = now_s() + duration;
    for (long long tick = 0; !stop_flag && now_s() < end; tick++) {
        int s = (int)(tick % slices);
        for (int i = s; i < conns; i += slices) {
            struct client *c = &cl[i];
            if (c->fd < 0)
                continue;
            if (drain(c, m) < 0) {
                close(c->fd);
                c->fd = -1;
                continue;
            }
            /* Never the last byte: the request must stay unfinished. */
            if (c->sent + 1 < slow_len && send(c->fd, slow + c->sent, 1, 0) == 1) {
                c->sent++;
                bytes++;
            }
        }
        usleep((useconds_t)tick_ms * 1000);
    }
    alive = 0;
    for (int i = 0; i < conns; i++) {
        if (cl[i].fd >= 0 && drain(&cl[i], m) == 0)
            alive++;
        if (cl[i].fd >= 0)
            close(cl[i].fd);
    }
    printf("SLOW mode=%s wanted=%d connected=%d upgraded=%d alive=%d closed=%d bytes_sent=%lld seconds=%.1f\n",
           m == MODE_HTTP ? "http" : m == MODE_SSE ? "sse" : "ws", conns, connected, upgraded, alive, connected - alive,
           bytes, now_s() - t0);
    free(cl);
    return 0;
}
