/*
 * stream_client — tg-bench-streams: how many streamed MCP messages per second
 * reach a client, through one of the three client transports.
 *
 * Each of --conns sessions does initialize, notifications/initialized, then
 * calls the tool "stream" of tg-bench-upstream (fast_upstream.c) again and
 * again, one call at a time; every call is answered by --events
 * notifications/progress and then the result. Every JSON-RPC message that
 * arrives during the measured window (after --warmup seconds, for --duration
 * seconds) is counted: progress notifications and results alike.
 *
 *   --mode post   Streamable HTTP: POST URL, the answer is text/event-stream
 *                 (works against tollgate's /NAME/mcp, nginx in front of the
 *                 upstream, and the upstream itself)
 *   --mode sse    legacy HTTP+SSE (2024-11-05): GET URL (/NAME/sse), follow the
 *                 "endpoint" event, POST messages there on a second keep-alive
 *                 connection; every answer is a "message" event on the GET stream
 *   --mode ws     WebSocket (/NAME/ws, subprotocol mcp): one message per text frame
 *
 *   --mode call   Streamable HTTP: POST URL a tools/call of the tool "echo" (the
 *                 call of test/bench/call.lua), answered with JSON or SSE; with
 *                 --proto 2026-07-28 (or later) it is a stateless request: no
 *                 initialize, no session, headers Mcp-Method and Mcp-Name, and
 *                 params._meta with the version and client capabilities, and the
 *                 result must say "resultType":"complete"
 *
 * Every call is checked: exactly --events progress notifications (none in call
 * mode), then a result (not an error) carrying the call's id. Any failure
 * (connect, HTTP status, JSON-RPC error, a wrong count, a closed stream) prints
 * "ERROR ..." and exits 1.
 *
 * --calls N makes the workload fixed instead of timed (test/perf/callgrind.sh
 * counts the gateway's instructions over it): every session is set up first,
 * then exactly N calls are made one at a time in all, in turn on the --conns
 * sessions (call k on session k mod conns), and the client exits when the last
 * one is answered. Nothing then depends on the clock: --duration and --warmup
 * are ignored, and every message received is counted.
 *
 * Prints one line:
 *   RESULT mode=.. conns=.. seconds=.. messages=.. messages_per_s=.. calls=.. bytes=.. mib_per_s=..
 *          events_per_call=.. all_messages=..   (all_messages: warmup included)
 *
 * Credentials (test/bench/auth.sh, the cost of authentication):
 *   --authorization VALUE   every POST carries "Authorization: VALUE" ("Bearer TOKEN" for a
 *                           static token or a JWT, "DPoP JWT")
 *   --dpop-key PEM          (call and post modes) every POST also carries a fresh DPoP proof (RFC 9449), ES256,
 *                           signed per request with this P-256 private key, as a DPoP client
 *                           does: htm, htu, iat now, a jti never used before, and ath, the hash
 *                           of the token in --authorization (built with mbedtls when found)
 *   --dpop-htu URL          the htu proofs name (default: the request's http:// URL)
 *
 * One libuv loop, llhttp for HTTP framing, no JSON library: it must stay much
 * cheaper than the proxies it measures. Plain HTTP only (loopback benchmark).
 */
#define _GNU_SOURCE

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "llhttp.h"

#ifdef BENCH_HAVE_MBEDTLS
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/sha256.h>
#endif

#define READ_SIZE 65536u

enum mode { M_POST, M_SSE, M_WS, M_CALL };
enum phase { P_START, P_INIT, P_INITIALIZED, P_CALL };
enum role { R_MAIN, R_POST };

struct buf {
    char *base;
    size_t len, cap, off; /* off: bytes already consumed from the front */
};

struct stream;

/* One TCP connection speaking HTTP/1.1 (then WebSocket after an upgrade). */
struct hconn {
    uv_tcp_t tcp;
    uv_connect_t connect;
    llhttp_t parser;
    struct stream *st;
    enum role role;
    int connected;
    int upgraded;
    int status;
    int is_sse;       /* the current response is text/event-stream */
    char hname[64];
    size_t hname_len;
    char hval[512];
    size_t hval_len;
    struct buf body;  /* a JSON response body */
    struct buf sse;   /* SSE bytes not yet split into events */
    struct buf ws;    /* WebSocket bytes not yet split into frames */
    struct buf wsmsg; /* a fragmented WebSocket message */
    char *rbuf;
};

struct stream {
    int idx;
    enum phase phase;
    struct hconn main, post;
    char sid[256];       /* Mcp-Session-Id (post mode) */
    char endpoint[1024]; /* where to POST (sse mode) */
    unsigned long id;    /* id of the request in flight */
    unsigned long progress;
    int got_result;
    /* sse mode: POSTs wait for the previous one's answer */
    char *postq[4];
    int npostq;
    int post_busy;
};

static struct {
    enum mode mode;
    char host[256];
    int port;
    char path[1024];
    int conns;
    double duration, warmup;
    unsigned long events;
    unsigned long pad;
    const char *proto;
    int measuring;
    uint64_t t0, t1;
    unsigned long long messages, calls, bytes;
    unsigned long long all_messages; /* warmup included */
    uv_loop_t *loop;
    struct stream *streams;
    unsigned long fixed_calls; /* --calls: the fixed workload, 0 = timed */
    int modern;                /* call mode with a 2026-07-28 or later --proto: stateless */
    const char *authorization; /* --authorization: the header's value, or NULL */
    const char *dpop_key;      /* --dpop-key: a PEM P-256 private key, or NULL */
    char dpop_htu[1400];       /* what proofs name as htu */
    int ready;                 /* sessions set up (fixed workload) */
    unsigned long done_calls;  /* calls answered (fixed workload) */
} g;

/* Streamable HTTP: every message is a POST to --url. */
static int posting(void) { return g.mode == M_POST || g.mode == M_CALL; }

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ERROR ", stdout);
    vfprintf(stdout, fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
    _exit(1);
}

/* ---- buffers ---------------------------------------------------------------- */

static void buf_append(struct buf *b, const void *p, size_t n)
{
    if (b->off > 0 && b->off == b->len) {
        b->off = b->len = 0;
    }
    if (b->cap - b->len < n) {
        if (b->off > 0) { /* compact first */
            memmove(b->base, b->base + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->len < n)
            cap *= 2;
        if (cap != b->cap) {
            char *q = realloc(b->base, cap);
            if (q == NULL)
                die("out of memory");
            b->base = q;
            b->cap = cap;
        }
    }
    memcpy(b->base + b->len, p, n);
    b->len += n;
}

static void buf_reset(struct buf *b) { b->len = b->off = 0; }

/* ---- writes ----------------------------------------------------------------- */

struct wreq {
    uv_write_t req;
    char data[];
};

static void on_write(uv_write_t *req, int status)
{
    free(req);
    if (status < 0 && status != UV_ECANCELED)
        die("write: %s", uv_strerror(status));
}

static void send_bytes(struct hconn *h, const char *p, size_t n)
{
    struct wreq *w = malloc(sizeof *w + n);
    if (w == NULL)
        die("out of memory");
    memcpy(w->data, p, n);
    uv_buf_t b = uv_buf_init(w->data, (unsigned int)n);
    int rc = uv_write(&w->req, (uv_stream_t *)&h->tcp, &b, 1, on_write);
    if (rc != 0)
        die("write: %s", uv_strerror(rc));
}

/* ---- credentials ------------------------------------------------------------- */

static size_t b64url(const unsigned char *in, size_t n, char *out)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        unsigned long v = (unsigned long)in[i] << 16 | (unsigned long)in[i + 1] << 8 | in[i + 2];
        out[o++] = al[v >> 18 & 63], out[o++] = al[v >> 12 & 63], out[o++] = al[v >> 6 & 63], out[o++] = al[v & 63];
    }
    if (n - i == 1) {
        unsigned long v = (unsigned long)in[i] << 16;
        out[o++] = al[v >> 18 & 63], out[o++] = al[v >> 12 & 63];
    } else if (n - i == 2) {
        unsigned long v = (unsigned long)in[i] << 16 | (unsigned long)in[i + 1] << 8;
        out[o++] = al[v >> 18 & 63], out[o++] = al[v >> 12 & 63], out[o++] = al[v >> 6 & 63];
    }
    out[o] = '\0';
    return o;
}

#ifdef BENCH_HAVE_MBEDTLS
static struct {
    mbedtls_pk_context pk;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    char header_b64[400]; /* {"typ":"dpop+jwt","alg":"ES256","jwk":{...}}, encoded once */
    char ath[48];
    unsigned long long n; /* proofs made: each jti is "PID-N" */
} dp;

static void dpop_init(void)
{
    mbedtls_pk_init(&dp.pk);
    mbedtls_entropy_init(&dp.entropy);
    mbedtls_ctr_drbg_init(&dp.drbg);
    if (mbedtls_ctr_drbg_seed(&dp.drbg, mbedtls_entropy_func, &dp.entropy, (const unsigned char *)"dpop", 4) != 0)
        die("dpop: no random numbers");
    if (mbedtls_pk_parse_keyfile(&dp.pk, g.dpop_key, NULL) != 0 || !mbedtls_pk_can_do(&dp.pk, MBEDTLS_PK_ECKEY) ||
        mbedtls_pk_ec(dp.pk)->grp.id != MBEDTLS_ECP_DP_SECP256R1)
        die("dpop: %s is not a P-256 private key (PEM)", g.dpop_key);
    const mbedtls_ecp_keypair *ec = mbedtls_pk_ec(dp.pk);
    unsigned char x[32], y[32];
    char xs[48], ys[48], hdr[300];
    mbedtls_mpi_write_binary(&ec->Q.X, x, 32);
    mbedtls_mpi_write_binary(&ec->Q.Y, y, 32);
    b64url(x, 32, xs);
    b64url(y, 32, ys);
    int n = snprintf(hdr, sizeof hdr,
                     "{\"typ\":\"dpop+jwt\",\"alg\":\"ES256\",\"jwk\":{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"%s\","
                     "\"y\":\"%s\"}}",
                     xs, ys);
    b64url((const unsigned char *)hdr, (size_t)n, dp.header_b64);
    const char *tok = g.authorization ? strchr(g.authorization, ' ') : NULL;
    if (tok == NULL)
        die("--dpop-key needs --authorization \"DPoP TOKEN\"");
    unsigned char h[32];
    mbedtls_sha256_ret((const unsigned char *)tok + 1, strlen(tok + 1), h, 0);
    b64url(h, 32, dp.ath);
}

/* Appends "DPoP: <proof>\r\n" for a request with method htm to out (room for 1024 bytes). */
static void dpop_header(const char *htm, char *out, size_t outsz)
{
    char claims[1600], input[2400];
    int n = snprintf(claims, sizeof claims,
                     "{\"htm\":\"%s\",\"htu\":\"%s\",\"iat\":%lld,\"jti\":\"%d-%llu\",\"ath\":\"%s\"}", htm,
                     g.dpop_htu, (long long)time(NULL), (int)getpid(), ++dp.n, dp.ath);
    size_t hl = strlen(dp.header_b64);
    memcpy(input, dp.header_b64, hl);
    input[hl] = '.';
    size_t il = hl + 1 + b64url((const unsigned char *)claims, (size_t)n, input + hl + 1);
    unsigned char hash[32], sig[64];
    mbedtls_sha256_ret((const unsigned char *)input, il, hash, 0);
    mbedtls_mpi r, s;
    mbedtls_mpi_init(&r);
    mbedtls_mpi_init(&s);
    mbedtls_ecp_keypair *ec = mbedtls_pk_ec(dp.pk);
    if (mbedtls_ecdsa_sign(&ec->grp, &r, &s, &ec->d, hash, 32, mbedtls_ctr_drbg_random, &dp.drbg) != 0 ||
        mbedtls_mpi_write_binary(&r, sig, 32) != 0 || mbedtls_mpi_write_binary(&s, sig + 32, 32) != 0)
        die("dpop: signing failed");
    mbedtls_mpi_free(&r);
    mbedtls_mpi_free(&s);
    char sigs[100];
    b64url(sig, 64, sigs);
    size_t used = strlen(out);
    int w = snprintf(out + used, outsz - used, "DPoP: %.*s.%s\r\n", (int)il, input, sigs);
    if (w < 0 || (size_t)w >= outsz - used)
        die("dpop: proof too long");
}
#else
static void dpop_init(void) { die("--dpop-key: this tg-bench-streams was built without mbedtls"); }
static void dpop_header(const char *htm, char *out, size_t outsz) { (void)htm, (void)out, (void)outsz; }
#endif

/* The credential lines of one request (method htm): Authorization, and a proof with --dpop-key. */
static void credentials(const char *htm, char *out, size_t outsz)
{
    out[0] = '\0';
    if (g.authorization)
        snprintf(out, outsz, "Authorization: %s\r\n", g.authorization);
    if (g.dpop_key)
        dpop_header(htm, out, outsz);
}

static void send_post(struct hconn *h, const char *path, const char *sid, const char *proto, const char *extra,
                      const char *body)
{
    char head[2048 + 4096], cred[4096];
    credentials("POST", cred, sizeof cred);
    size_t bl = strlen(body);
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\n"
                     "Host: %s:%d\r\n"
                     "Content-Type: application/json\r\n"
                     "Accept: application/json, text/event-stream\r\n"
                     "%s%s%s"
                     "%s%s%s"
                     "%s%s"
                     "Content-Length: %zu\r\n\r\n",
                     path, g.host, g.port, sid && *sid ? "Mcp-Session-Id: " : "", sid && *sid ? sid : "",
                     sid && *sid ? "\r\n" : "", proto ? "MCP-Protocol-Version: " : "", proto ? proto : "",
                     proto ? "\r\n" : "", extra ? extra : "", cred, bl);
    if (n < 0 || (size_t)n >= sizeof head)
        die("request head too long");
    struct buf b = {0};
    buf_append(&b, head, (size_t)n);
    buf_append(&b, body, bl);
    send_bytes(h, b.base, b.len);
    free(b.base);
}

static void ws_send_text(struct hconn *h, const char *p, size_t n)
{
    unsigned char hdr[14];
    size_t hl = 0;
    hdr[hl++] = 0x81; /* FIN, text */
    if (n < 126) {
        hdr[hl++] = (unsigned char)(0x80 | n);
    } else if (n < 65536) {
        hdr[hl++] = 0x80 | 126;
        hdr[hl++] = (unsigned char)(n >> 8);
        hdr[hl++] = (unsigned char)n;
    } else {
        hdr[hl++] = 0x80 | 127;
        for (int i = 7; i >= 0; i--)
            hdr[hl++] = (unsigned char)((uint64_t)n >> (8 * i));
    }
    static const unsigned char key[4] = {0x37, 0xfa, 0x21, 0x3d};
    memcpy(hdr + hl, key, 4);
    hl += 4;
    struct buf b = {0};
    buf_append(&b, hdr, hl);
    buf_append(&b, p, n);
    for (size_t i = 0; i < n; i++)
        b.base[hl + i] ^= (char)key[i & 3];
    send_bytes(h, b.base, b.len);
    free(b.base);
}

static void ws_send_control(struct hconn *h, unsigned char op, const char *p, size_t n)
{
    unsigned char f[2 + 4 + 125];
    if (n > 125)
        n = 125;
    f[0] = (unsigned char)(0x80 | op);
    f[1] = (unsigned char)(0x80 | n);
    memset(f + 2, 0, 4); /* a zero mask leaves the payload as it is */
    memcpy(f + 6, p, n);
    send_bytes(h, (const char *)f, 6 + n);
}

/* ---- MCP messages ------------------------------------------------------------- */

static void post_message(struct stream *st, const char *body);

/* Sends one JSON-RPC message over the stream's transport. */
static void send_message(struct stream *st, const char *body)
{
    switch (g.mode) {
    case M_POST:
    case M_CALL:
        send_post(&st->main, g.path, st->sid, st->phase == P_INIT ? NULL : g.proto,
                  g.modern ? "Mcp-Method: tools/call\r\nMcp-Name: echo\r\n" : NULL, body);
        break;
    case M_SSE:
        post_message(st, body);
        break;
    case M_WS:
        ws_send_text(&st->main, body, strlen(body));
        break;
    }
}

static void send_initialize(struct stream *st)
{
    char body[512];
    st->phase = P_INIT;
    st->id = 1;
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"%s\","
             "\"capabilities\":{},\"clientInfo\":{\"name\":\"tg-bench-streams\",\"version\":\"1\"}}}",
             g.proto);
    send_message(st, body);
}

static void send_call(struct stream *st)
{
    char body[512];
    st->phase = P_CALL;
    st->id++;
    st->progress = 0;
    st->got_result = 0;
    if (g.mode == M_CALL) {
        /* test/bench/call.lua's call */
        if (g.modern)
            snprintf(body, sizeof body,
                     "{\"jsonrpc\":\"2.0\",\"id\":%lu,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
                     "\"arguments\":{\"text\":\"hello\"},\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":"
                     "\"%s\",\"io.modelcontextprotocol/clientCapabilities\":{}}}}",
                     st->id, g.proto);
        else
            snprintf(body, sizeof body,
                     "{\"jsonrpc\":\"2.0\",\"id\":%lu,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
                     "\"arguments\":{\"text\":\"hello\"}}}",
                     st->id);
        send_message(st, body);
        return;
    }
    snprintf(body, sizeof body,
             "{\"jsonrpc\":\"2.0\",\"id\":%lu,\"method\":\"tools/call\",\"params\":{\"name\":\"stream\","
             "\"arguments\":{\"events\":%lu,\"pad\":%lu},\"_meta\":{\"progressToken\":\"s%d-%lu\"}}}",
             st->id, g.events, g.pad, st->idx, st->id);
    send_message(st, body);
}

static void send_initialized(struct stream *st)
{
    st->phase = P_INITIALIZED;
    send_message(st, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
}

static void print_result(void);

/* A session is set up: timed, it starts calling; with a fixed workload, the first call waits
 * until every session is set up. */
static void session_ready(struct stream *st)
{
    if (g.fixed_calls == 0) {
        send_call(st);
        return;
    }
    st->phase = P_CALL;
    if (++g.ready == g.conns)
        send_call(&g.streams[0]);
}

/* The answer to the request in flight has fully arrived (and its stream ended, in post mode). */
static void request_over(struct stream *st)
{
    if (st->phase == P_INIT) {
        if (!st->got_result)
            die("stream %d: initialize got no result", st->idx);
        send_initialized(st);
        if (!posting()) /* a 202 for the notification comes only in post mode */
            session_ready(st);
        return;
    }
    if (st->phase == P_INITIALIZED) {
        session_ready(st);
        return;
    }
    if (!st->got_result)
        die("stream %d: call %lu ended without a result (after %lu progress notifications)", st->idx, st->id,
            st->progress);
    if (st->progress != g.events)
        die("stream %d: call %lu: %lu progress notifications, expected %lu", st->idx, st->id, st->progress,
            g.events);
    if (g.measuring)
        g.calls++;
    if (g.fixed_calls == 0) {
        send_call(st);
        return;
    }
    if (++g.done_calls == g.fixed_calls)
        print_result();
    send_call(&g.streams[g.done_calls % (unsigned long)g.conns]);
}

/* One JSON-RPC message from the server. */
static void on_message(struct stream *st, const char *p, size_t n)
{
    g.all_messages++;
    if (g.measuring)
        g.messages++;
    if (memmem(p, n, "\"notifications/progress\"", 24) != NULL) {
        if (st->phase != P_CALL)
            die("stream %d: progress outside a call", st->idx);
        st->progress++;
        return;
    }
    if (memmem(p, n, "\"method\"", 8) != NULL)
        return; /* another notification or a server request: not expected, but not ours to judge */
    if (memmem(p, n, "\"error\"", 7) != NULL)
        die("stream %d: JSON-RPC error: %.*s", st->idx, (int)(n > 400 ? 400 : n), p);
    char want[40];
    int wl = snprintf(want, sizeof want, "\"id\":%lu", st->id);
    const char *at = memmem(p, n, want, (size_t)wl);
    if (at == NULL || (at + wl < p + n && at[wl] >= '0' && at[wl] <= '9'))
        die("stream %d: unexpected message (waiting for id %lu): %.*s", st->idx, st->id, (int)(n > 400 ? 400 : n),
            p);
    if (g.modern && st->phase == P_CALL && memmem(p, n, "\"resultType\":\"complete\"", 23) == NULL)
        die("stream %d: a 2026 result without \"resultType\":\"complete\": %.*s", st->idx, (int)(n > 400 ? 400 : n), p);
    st->got_result = 1;
    if (!posting())
        request_over(st); /* on a message stream the answer is the end of the request */
}

/* ---- SSE ----------------------------------------------------------------------- */

static void on_event(struct hconn *h, const char *ev, size_t evn, const char *data, size_t dn)
{
    struct stream *st = h->st;
    if (dn == 0)
        return; /* priming event, or a comment-only block */
    if (g.mode == M_SSE && evn == 8 && memcmp(ev, "endpoint", 8) == 0) {
        const char *p = data;
        size_t n = dn;
        if (n > 7 && (memcmp(p, "http://", 7) == 0 || memcmp(p, "https:/", 7) == 0)) {
            const char *s = memchr(p + 8, '/', n - 8);
            if (s == NULL)
                die("bad endpoint event");
            n -= (size_t)(s - p);
            p = s;
        }
        if (n >= sizeof st->endpoint)
            die("endpoint too long");
        memcpy(st->endpoint, p, n);
        st->endpoint[n] = '\0';
        send_initialize(st);
        return;
    }
    if (evn != 0 && !(evn == 7 && memcmp(ev, "message", 7) == 0))
        return;
    on_message(st, data, dn);
}

/* Splits SSE bytes into events ("\n\n"-terminated blocks of "field: value" lines). */
static void sse_feed(struct hconn *h, const char *p, size_t n)
{
    struct buf *b = &h->sse;
    buf_append(b, p, n);
    static struct buf joined;
    for (;;) {
        char *start = b->base + b->off;
        size_t avail = b->len - b->off;
        char *end = memmem(start, avail, "\n\n", 2);
        if (end == NULL)
            break;
        const char *ev = NULL, *data = NULL;
        size_t evn = 0, dn = 0;
        int ndata = 0;
        buf_reset(&joined);
        for (char *l = start; l < end;) {
            char *nl = memchr(l, '\n', (size_t)(end - l));
            char *le = nl ? nl : end;
            size_t ll = (size_t)(le - l);
            if (ll > 0 && l[ll - 1] == '\r')
                ll--;
            if (ll >= 5 && memcmp(l, "data:", 5) == 0) {
                const char *v = l + 5;
                size_t vn = ll - 5;
                if (vn > 0 && *v == ' ')
                    v++, vn--;
                if (ndata == 0) {
                    data = v;
                    dn = vn;
                } else {
                    if (ndata == 1)
                        buf_append(&joined, data, dn);
                    buf_append(&joined, "\n", 1);
                    buf_append(&joined, v, vn);
                }
                ndata++;
            } else if (ll >= 6 && memcmp(l, "event:", 6) == 0) {
                ev = l + 6;
                evn = ll - 6;
                if (evn > 0 && *ev == ' ')
                    ev++, evn--;
            }
            l = le + 1;
        }
        b->off += (size_t)(end + 2 - start);
        if (ndata > 1) {
            data = joined.base;
            dn = joined.len;
        }
        on_event(h, ev ? ev : "", evn, data ? data : "", dn);
    }
}

/* ---- WebSocket ----------------------------------------------------------------- */

static void ws_feed(struct hconn *h, const char *p, size_t n)
{
    struct buf *b = &h->ws;
    buf_append(b, p, n);
    for (;;) {
        const unsigned char *f = (const unsigned char *)b->base + b->off;
        size_t avail = b->len - b->off;
        if (avail < 2)
            break;
        int fin = f[0] & 0x80, op = f[0] & 0x0f;
        uint64_t len = f[1] & 0x7f;
        size_t hl = 2;
        if (f[1] & 0x80)
            die("stream %d: the server masked a frame", h->st->idx);
        if (len == 126) {
            if (avail < 4)
                break;
            len = ((uint64_t)f[2] << 8) | f[3];
            hl = 4;
        } else if (len == 127) {
            if (avail < 10)
                break;
            len = 0;
            for (int i = 2; i < 10; i++)
                len = (len << 8) | f[i];
            hl = 10;
        }
        if (avail < hl + len)
            break;
        const char *pl = (const char *)f + hl;
        size_t pn = (size_t)len;
        b->off += hl + pn;
        switch (op) {
        case 0x1:
        case 0x0:
            if (fin && op == 0x1 && h->wsmsg.len == 0) {
                on_message(h->st, pl, pn);
            } else {
                buf_append(&h->wsmsg, pl, pn);
                if (fin) {
                    on_message(h->st, h->wsmsg.base, h->wsmsg.len);
                    buf_reset(&h->wsmsg);
                }
            }
            break;
        case 0x8:
            die("stream %d: the server closed the WebSocket (code %d)", h->st->idx,
                pn >= 2 ? ((unsigned char)pl[0] << 8) | (unsigned char)pl[1] : 0);
        case 0x9:
            ws_send_control(h, 0xA, pl, pn);
            break;
        case 0xA:
            break;
        default:
            die("stream %d: unexpected WebSocket opcode %d", h->st->idx, op);
        }
    }
}

/* ---- HTTP responses ------------------------------------------------------------- */

static int on_message_begin(llhttp_t *p)
{
    struct hconn *h = p->data;
    h->status = 0;
    h->is_sse = 0;
    h->hname_len = h->hval_len = 0;
    buf_reset(&h->body);
    buf_reset(&h->sse);
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct hconn *h = p->data;
    size_t k = n < sizeof h->hname - 1 - h->hname_len ? n : sizeof h->hname - 1 - h->hname_len;
    memcpy(h->hname + h->hname_len, at, k);
    h->hname_len += k;
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct hconn *h = p->data;
    size_t k = n < sizeof h->hval - 1 - h->hval_len ? n : sizeof h->hval - 1 - h->hval_len;
    memcpy(h->hval + h->hval_len, at, k);
    h->hval_len += k;
    return 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    struct hconn *h = p->data;
    h->hname[h->hname_len] = '\0';
    h->hval[h->hval_len] = '\0';
    if (strcasecmp(h->hname, "content-type") == 0 && strstr(h->hval, "text/event-stream") != NULL)
        h->is_sse = 1;
    else if (strcasecmp(h->hname, "mcp-session-id") == 0 && h->st->sid[0] == '\0') {
        if (h->hval_len >= sizeof h->st->sid)
            die("Mcp-Session-Id too long");
        memcpy(h->st->sid, h->hval, h->hval_len + 1);
    }
    h->hname_len = h->hval_len = 0;
    return 0;
}

static int on_headers_complete(llhttp_t *p)
{
    struct hconn *h = p->data;
    struct stream *st = h->st;
    h->status = p->status_code;
    if (h->role == R_POST) {
        if (h->status != 202 && h->status != 200)
            die("stream %d: POST to %s: HTTP %d", st->idx, st->endpoint, h->status);
        return 0;
    }
    if (g.mode == M_WS) {
        if (h->status != 101)
            die("stream %d: WebSocket handshake: HTTP %d", st->idx, h->status);
        return 0;
    }
    if (g.mode == M_SSE) {
        if (h->status != 200 || !h->is_sse)
            die("stream %d: GET %s: HTTP %d%s", st->idx, g.path, h->status,
                h->is_sse ? "" : " (not text/event-stream)");
        return 0;
    }
    /* post mode */
    if (st->phase == P_INITIALIZED) {
        if (h->status != 202 && h->status != 200)
            die("stream %d: notifications/initialized: HTTP %d", st->idx, h->status);
    } else if (h->status != 200) {
        die("stream %d: POST %s (%s): HTTP %d", st->idx, g.path, st->phase == P_INIT ? "initialize" : "tools/call",
            h->status);
    } else if (st->phase == P_CALL && !h->is_sse && g.mode == M_POST) {
        die("stream %d: tools/call was answered with JSON, not an SSE stream", st->idx);
    }
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    struct hconn *h = p->data;
    if (h->role == R_POST)
        return 0;
    if (h->is_sse)
        sse_feed(h, at, n);
    else if (posting() && h->st->phase != P_INITIALIZED)
        buf_append(&h->body, at, n);
    return 0;
}

static void post_next(struct stream *st);

static int on_message_complete(llhttp_t *p)
{
    struct hconn *h = p->data;
    struct stream *st = h->st;
    if (h->role == R_POST) {
        st->post_busy = 0;
        post_next(st);
        return 0;
    }
    if (g.mode == M_WS)
        return 0; /* the upgrade: frames follow */
    if (g.mode == M_SSE)
        die("stream %d: the GET stream ended", st->idx);
    if (!h->is_sse && h->body.len > 0)
        on_message(st, h->body.base + h->body.off, h->body.len - h->body.off);
    request_over(st);
    return 0;
}

static llhttp_settings_t settings;

/* ---- connections ------------------------------------------------------------------ */

static void on_alloc(uv_handle_t *hd, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    struct hconn *h = hd->data;
    if (h->rbuf == NULL && (h->rbuf = malloc(READ_SIZE)) == NULL)
        die("out of memory");
    *b = uv_buf_init(h->rbuf, READ_SIZE);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct hconn *h = s->data;
    if (nread == 0)
        return;
    if (nread < 0)
        die("stream %d: connection %s: %s", h->st->idx, h->role == R_POST ? "(POST)" : "",
            uv_strerror((int)nread));
    if (g.measuring)
        g.bytes += (unsigned long long)nread;
    const char *p = b->base;
    size_t n = (size_t)nread;
    if (h->upgraded) {
        ws_feed(h, p, n);
        return;
    }
    llhttp_errno_t err = llhttp_execute(&h->parser, p, n);
    if (err == HPE_PAUSED_UPGRADE && g.mode == M_WS && h->role == R_MAIN) {
        h->upgraded = 1;
        const char *pos = llhttp_get_error_pos(&h->parser);
        send_initialize(h->st);
        if (pos != NULL && pos < p + n)
            ws_feed(h, pos, (size_t)(p + n - pos));
        return;
    }
    if (err != HPE_OK)
        die("stream %d: bad HTTP from the server: %s (%s)", h->st->idx, llhttp_errno_name(err),
            llhttp_get_error_reason(&h->parser));
}

static void on_connect(uv_connect_t *req, int status)
{
    struct hconn *h = req->data;
    struct stream *st = h->st;
    if (status < 0)
        die("stream %d: connect to %s:%d: %s", st->idx, g.host, g.port, uv_strerror(status));
    h->connected = 1;
    uv_tcp_nodelay(&h->tcp, 1);
    int rc = uv_read_start((uv_stream_t *)&h->tcp, on_alloc, on_read);
    if (rc != 0)
        die("read_start: %s", uv_strerror(rc));
    if (h->role == R_POST) {
        post_next(st);
        return;
    }
    char head[2048];
    int n = 0;
    switch (g.mode) {
    case M_CALL:
        if (g.modern) { /* stateless: nothing to set up */
            session_ready(st);
            return;
        }
        send_initialize(st);
        return;
    case M_POST:
        send_initialize(st);
        return;
    case M_SSE:
        n = snprintf(head, sizeof head,
                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n\r\n",
                     g.path, g.host, g.port);
        break;
    case M_WS:
        n = snprintf(head, sizeof head,
                     "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Protocol: mcp\r\n\r\n",
                     g.path, g.host, g.port);
        break;
    }
    send_bytes(h, head, (size_t)n);
}

static void conn_start(struct stream *st, struct hconn *h, enum role role)
{
    h->st = st;
    h->role = role;
    llhttp_init(&h->parser, HTTP_RESPONSE, &settings);
    h->parser.data = h;
    uv_tcp_init(g.loop, &h->tcp);
    h->tcp.data = h;
    h->connect.data = h;
    struct sockaddr_in addr;
    if (uv_ip4_addr(g.host, g.port, &addr) != 0)
        die("bad address %s", g.host);
    int rc = uv_tcp_connect(&h->connect, &h->tcp, (const struct sockaddr *)&addr, on_connect);
    if (rc != 0)
        die("connect: %s", uv_strerror(rc));
}

/* sse mode: POSTs go out one at a time on the second connection. */
static void post_next(struct stream *st)
{
    if (st->post_busy || st->npostq == 0 || !st->post.connected)
        return;
    char *body = st->postq[0];
    memmove(st->postq, st->postq + 1, (size_t)(st->npostq - 1) * sizeof(char *));
    st->npostq--;
    st->post_busy = 1;
    send_post(&st->post, st->endpoint, NULL, NULL, NULL, body);
    free(body);
}

static void post_message(struct stream *st, const char *body)
{
    if (st->npostq == (int)(sizeof st->postq / sizeof st->postq[0]))
        die("stream %d: too many POSTs queued", st->idx);
    st->postq[st->npostq++] = strdup(body);
    if (st->post.tcp.type != UV_TCP)
        conn_start(st, &st->post, R_POST);
    else
        post_next(st);
}

/* ---- timing ------------------------------------------------------------------------- */

static void print_result(void)
{
    static const char *const names[] = {[M_POST] = "post", [M_SSE] = "sse", [M_WS] = "ws", [M_CALL] = "call"};
    g.t1 = uv_hrtime();
    g.measuring = 0;
    double secs = (double)(g.t1 - g.t0) / 1e9;
    printf("RESULT mode=%s conns=%d seconds=%.3f messages=%llu messages_per_s=%.1f calls=%llu bytes=%llu "
           "mib_per_s=%.2f events_per_call=%lu all_messages=%llu\n",
           names[g.mode], g.conns, secs, g.messages, (double)g.messages / secs, g.calls, g.bytes,
           (double)g.bytes / secs / 1048576.0, g.events + 1, g.all_messages);
    fflush(stdout);
    _exit(g.messages > 0 ? 0 : 1);
}

static void on_end(uv_timer_t *t)
{
    (void)t;
    print_result();
}

static void on_warm(uv_timer_t *t)
{
    g.measuring = 1;
    g.t0 = uv_hrtime();
    uv_timer_start(t, on_end, (uint64_t)(g.duration * 1000), 0);
}

static void usage(void)
{
    fprintf(stderr, "usage: tg-bench-streams --mode post|sse|ws|call --url http://127.0.0.1:PORT/PATH\n"
                    "       [--conns 8] [--duration 10] [--warmup 2] [--events 1000] [--pad 0] "
                    "[--proto 2025-06-18] [--calls N]\n"
                    "       [--authorization VALUE] [--dpop-key PEM] [--dpop-htu URL]\n");
    exit(2);
}

static void parse_url(const char *u)
{
    if (strncmp(u, "http://", 7) != 0)
        die("only http:// URLs: %s", u);
    const char *h = u + 7;
    const char *slash = strchr(h, '/');
    const char *colon = memchr(h, ':', slash ? (size_t)(slash - h) : strlen(h));
    if (colon == NULL)
        die("the URL needs a port: %s", u);
    snprintf(g.host, sizeof g.host, "%.*s", (int)(colon - h), h);
    g.port = atoi(colon + 1);
    snprintf(g.path, sizeof g.path, "%s", slash ? slash : "/");
}

int main(int argc, char **argv)
{
    const char *url = NULL, *mode = NULL;
    g.conns = 8;
    g.duration = 10;
    g.warmup = 2;
    g.events = 1000;
    g.proto = "2025-06-18";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            usage();
        if (strcmp(a, "--mode") == 0)
            mode = v;
        else if (strcmp(a, "--url") == 0)
            url = v;
        else if (strcmp(a, "--conns") == 0)
            g.conns = atoi(v);
        else if (strcmp(a, "--duration") == 0)
            g.duration = atof(v);
        else if (strcmp(a, "--warmup") == 0)
            g.warmup = atof(v);
        else if (strcmp(a, "--events") == 0)
            g.events = strtoul(v, NULL, 10);
        else if (strcmp(a, "--pad") == 0)
            g.pad = strtoul(v, NULL, 10);
        else if (strcmp(a, "--proto") == 0)
            g.proto = v;
        else if (strcmp(a, "--calls") == 0)
            g.fixed_calls = strtoul(v, NULL, 10);
        else if (strcmp(a, "--authorization") == 0)
            g.authorization = v;
        else if (strcmp(a, "--dpop-key") == 0)
            g.dpop_key = v;
        else if (strcmp(a, "--dpop-htu") == 0)
            snprintf(g.dpop_htu, sizeof g.dpop_htu, "%s", v);
        else
            usage();
        i++;
    }
    if (url == NULL || mode == NULL || g.conns < 1 || g.duration <= 0 || g.warmup < 0)
        usage();
    if (strcmp(mode, "post") == 0)
        g.mode = M_POST;
    else if (strcmp(mode, "sse") == 0)
        g.mode = M_SSE;
    else if (strcmp(mode, "ws") == 0)
        g.mode = M_WS;
    else if (strcmp(mode, "call") == 0)
        g.mode = M_CALL;
    else
        usage();
    if (g.mode == M_CALL) {
        g.events = 0; /* an echo call is answered without progress notifications */
        g.modern = strcmp(g.proto, "2026-07-28") >= 0;
    }
    parse_url(url);
    if (g.dpop_htu[0] == '\0')
        snprintf(g.dpop_htu, sizeof g.dpop_htu, "http://%.255s:%d%.1023s", g.host, g.port, g.path);
    if (g.dpop_key) {
        if (g.mode != M_CALL && g.mode != M_POST)
            die("--dpop-key: only with --mode call or post");
        dpop_init();
    }
    signal(SIGPIPE, SIG_IGN);

    llhttp_settings_init(&settings);
    settings.on_message_begin = on_message_begin;
    settings.on_header_field = on_header_field;
    settings.on_header_value = on_header_value;
    settings.on_header_value_complete = on_header_value_complete;
    settings.on_headers_complete = on_headers_complete;
    settings.on_body = on_body;
    settings.on_message_complete = on_message_complete;

    g.loop = uv_default_loop();
    g.streams = calloc((size_t)g.conns, sizeof *g.streams);
    if (g.streams == NULL)
        die("out of memory");
    for (int i = 0; i < g.conns; i++) {
        g.streams[i].idx = i;
        conn_start(&g.streams[i], &g.streams[i].main, R_MAIN);
    }
    uv_timer_t timer;
    if (g.fixed_calls > 0) {
        g.measuring = 1;
        g.t0 = uv_hrtime();
    } else {
        uv_timer_init(g.loop, &timer);
        uv_timer_start(&timer, on_warm, (uint64_t)(g.warmup * 1000), 0);
    }
    uv_run(g.loop, UV_RUN_DEFAULT);
    return 1;
}
