#include "transports/ws.h"

#include <mbedtls/base64.h>
#include <mbedtls/sha1.h>
#include <stdlib.h>
#include <string.h>
#include <wslay/wslay.h>

#include "core/base/log.h"
#include "transports/http1/http1.h"

/* Owner: its channel (ch->ws), made by tg_ws_start() and freed by tg_ws_free() from
 * tg_channel_unref(); a free while one of our functions is on the stack waits for it (busy). */
struct tg_ws {
    struct tg_conn *conn; /* NULL once the connection is gone */
    wslay_event_context_ptr ctx;
    tg_ws_message_cb on_message;
    tg_ws_closed_cb on_closed;
    void *ud;
    uint64_t ping_ms;
    int awaiting_pong;
    int closed; /* on_closed ran */
    int in_recv;
    int lingering; /* our close frame is out; reading and dropping until the peer closes */
    /* wslay's context holds about 8.6 KiB of fixed buffers, more than the rest of an idle
     * session: it exists only while there is work (a frame to read or write, a fragmented
     * message under way, a close in progress). wslay is only ever given whole frames, so when
     * it is freed no half-read frame goes with it. */
    size_t max_msg;
    size_t feedable;  /* bytes of whole frames at the head of conn->in that wslay may read */
    int in_fragment;  /* a fragmented data message has begun and not ended */
    int closing;      /* a close frame was sent or received: keep the context to the end */
    int oversized;    /* a frame over max_msg: feed it as it comes, wslay refuses it (1009) */
    int busy;         /* a function of ours is on the stack: tg_ws_free() waits for it */
    int partial_seen; /* at the last tick, part of a frame was waiting for the rest */
    int free_pending;
};

static const struct wslay_event_callbacks ws_callbacks;
static void ws_destroy(struct tg_ws *ws);

static void ensure_ctx(struct tg_ws *ws)
{
    if (ws->ctx != NULL)
        return;
    if (wslay_event_context_server_init(&ws->ctx, &ws_callbacks, ws) != 0)
        abort();
    wslay_event_config_set_max_recv_msg_length(ws->ctx, ws->max_msg);
}

/* Free the context when it holds nothing: no fragment under way, nothing queued, no close. */
static void maybe_release(struct tg_ws *ws)
{
    if (ws->ctx == NULL || ws->in_fragment || ws->closing || ws->lingering || ws->in_recv || ws->oversized ||
        ws->free_pending)
        return;
    if (ws->conn == NULL || ws->conn->in.len != 0)
        return;
    if (wslay_event_want_write(ws->ctx) || wslay_event_get_queued_msg_length(ws->ctx) != 0 ||
        wslay_event_get_close_received(ws->ctx) || wslay_event_get_close_sent(ws->ctx))
        return;
    wslay_event_context_free(ws->ctx);
    ws->ctx = NULL;
}

/* Leave one of our functions: release the context if idle, or finish a free that waited. */
static void leave(struct tg_ws *ws)
{
    if (--ws->busy > 0)
        return;
    if (ws->free_pending) {
        ws_destroy(ws);
        return;
    }
    maybe_release(ws);
}

/* How many bytes of whole frames start conn->in; tracks fragmented messages on the way. */
static size_t whole_frames(struct tg_ws *ws, const unsigned char *p, size_t n)
{
    size_t off = 0;
    while (n - off >= 2) {
        const unsigned char *f = p + off;
        uint64_t len = f[1] & 0x7f;
        size_t hdr = 2;
        if (len == 126) {
            if (n - off < 4)
                break;
            len = (uint64_t)f[2] << 8 | f[3];
            hdr = 4;
        } else if (len == 127) {
            if (n - off < 10)
                break;
            len = 0;
            for (int i = 0; i < 8; i++)
                len = len << 8 | f[2 + i];
            hdr = 10;
        }
        if (f[1] & 0x80)
            hdr += 4;
        if (len > ws->max_msg) {
            ws->oversized = 1; /* wslay sees it and closes with 1009 */
            return n;
        }
        if (n - off < hdr + len)
            break;
        int fin = f[0] & 0x80, opcode = f[0] & 0x0f;
        if (opcode < 8) /* data and continuation frames; control frames never fragment */
            ws->in_fragment = !fin;
        if (opcode == 8)
            ws->closing = 1;
        off += hdr + (size_t)len;
    }
    return off;
}

int tg_ws_accept_key(struct tg_slice key, char out[32])
{
    /* The key is base64 of 16 bytes: 24 characters. */
    if (key.len != 24)
        return TG_EINVAL;
    unsigned char raw[20];
    size_t olen = 0;
    if (mbedtls_base64_decode(raw, sizeof(raw), &olen, (const unsigned char *)key.ptr, key.len) != 0 || olen != 16)
        return TG_EINVAL;
    static const char guid[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
    char buf[64];
    memcpy(buf, key.ptr, 24);
    memcpy(buf + 24, guid, 36);
    unsigned char sha[20];
    mbedtls_sha1_ret((const unsigned char *)buf, 60, sha);
    if (mbedtls_base64_encode((unsigned char *)out, 32, &olen, sha, 20) != 0)
        return TG_EINVAL;
    out[olen] = '\0';
    return 0;
}

static ssize_t ws_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *ud)
{
    struct tg_ws *ws = ud;
    struct tg_conn *c = ws->conn;
    size_t avail = c == NULL ? 0 : ws->oversized ? c->in.len : ws->feedable;
    if (avail > (c ? c->in.len : 0))
        avail = c ? c->in.len : 0;
    if (avail == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    size_t n = len < avail ? len : avail;
    memcpy(buf, c->in.base, n);
    tg_buf_consume(&c->in, n);
    if (!ws->oversized)
        ws->feedable -= n;
    return (ssize_t)n;
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *ud)
{
    struct tg_ws *ws = ud;
    if (ws->conn == NULL || ws->conn->phase >= TG_CONN_CLOSING) {
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    tg_http_raw_write(ws->conn, (const char *)data, len);
    return (ssize_t)len;
}

static void ws_on_msg(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg, void *ud)
{
    struct tg_ws *ws = ud;
    switch (arg->opcode) {
    case WSLAY_TEXT_FRAME:
        if (ws->on_message && !ws->closed)
            ws->on_message(ws->ud, (const char *)arg->msg, arg->msg_length);
        break;
    case WSLAY_BINARY_FRAME:
        /* Reading goes on so that the peer's answering close frame ends the connection at once. */
        ws->closing = 1;
        wslay_event_queue_close(ctx, WSLAY_CODE_UNSUPPORTED_DATA, (const uint8_t *)"binary frames are not accepted",
                                30);
        break;
    case WSLAY_PONG:
        ws->awaiting_pong = 0;
        break;
    default: break; /* close and ping are answered by wslay */
    }
}

static void finish(struct tg_ws *ws)
{
    if (ws->closed)
        return;
    ws->closed = 1;
    if (ws->on_closed)
        ws->on_closed(ws->ud);
}

/* Write what wslay has queued; close the connection once both close frames went by. */
static void pump(struct tg_ws *ws)
{
    struct tg_conn *c = ws->conn;
    if (c == NULL || ws->ctx == NULL)
        return;
    if (wslay_event_want_write(ws->ctx) && wslay_event_send(ws->ctx) != 0) {
        tg_conn_close(c, "WebSocket send failed");
        return;
    }
    if (!wslay_event_want_read(ws->ctx) && !wslay_event_want_write(ws->ctx) && !ws->lingering) {
        if (wslay_event_get_close_received(ws->ctx)) {
            tg_http_close_after_writes(c);
        } else {
            /* We closed first (1003, 1009, shutdown): give the peer time to read our close frame
             * and answer it, dropping what it still sends, instead of resetting the connection
             * under it. */
            ws->lingering = 1;
            tg_http_upgraded_timer(c, 2000);
        }
    }
}

/* Unmask n bytes in place (the key's byte i goes with payload byte i mod 4); nonzero when one
 * of them is outside ASCII. XOR twice restores the frame, for wslay. */
static int unmask_ascii(unsigned char *d, size_t n, const unsigned char key[4])
{
    uint64_t k8, high = 0;
    uint32_t k4;
    memcpy(&k4, key, 4);
    k8 = (uint64_t)k4 << 32 | k4;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, d + i, 8);
        w ^= k8;
        high |= w;
        memcpy(d + i, &w, 8);
    }
    for (; i < n; i++) {
        d[i] ^= key[i & 3];
        high |= d[i];
    }
    return (high & 0x8080808080808080ull) != 0;
}

/* Whole final text frames from the start of conn->in, handed to on_message without wslay: its
 * context costs a dozen allocations to make and free, and a request is one such frame. Taken
 * only while wslay holds nothing (no context: no fragment, no close, nothing queued) and only
 * frames wslay would accept as they are: FIN, no RSV bit, opcode text, masked, a length in its
 * shortest form within max_msg, and ASCII (no UTF-8 to validate). Anything else stops here and
 * goes to wslay, which checks it and answers it as before. The payloads stay in conn->in while
 * on_message runs (nothing consumes input inside it); returns the bytes taken. */
static size_t direct_frames(struct tg_ws *ws, struct tg_conn *c)
{
    unsigned char *p = (unsigned char *)c->in.base;
    size_t n = ws->feedable, off = 0;
    while (ws->ctx == NULL && !ws->closing && !ws->closed && ws->conn == c && c->phase < TG_CONN_CLOSING &&
           n - off >= 6) {
        unsigned char *f = p + off;
        if (f[0] != 0x81 || (f[1] & 0x80) == 0)
            break;
        size_t len = f[1] & 0x7f, hdr = 6;
        if (len == 126) {
            if (n - off < 8)
                break;
            len = (size_t)f[2] << 8 | f[3];
            hdr = 8;
            if (len < 126)
                break;
        } else if (len == 127) {
            break; /* 64 KiB and over: wslay's */
        }
        if (len > ws->max_msg || n - off - hdr < len)
            break;
        if (unmask_ascii(f + hdr, len, f + hdr - 4)) {
            unmask_ascii(f + hdr, len, f + hdr - 4); /* masked again: wslay reads it whole */
            break;
        }
        off += hdr + len;
        if (ws->on_message)
            ws->on_message(ws->ud, (const char *)f + hdr, len);
    }
    return off;
}

static void on_data(struct tg_conn *c, void *ud)
{
    struct tg_ws *ws = ud;
    if (ws->lingering) {
        c->in.len = 0;
        return;
    }
    if (tg_conn_output_high(c)) {
        /* A peer that sends (pings, requests) and reads nothing: what we would answer counts
         * toward the mark, so stop reading until it drains (http1 resumes us then). */
        tg_http_read_pause(c);
        return;
    }
    ws->feedable = whole_frames(ws, (const unsigned char *)c->in.base, c->in.len);
    if (ws->feedable == 0 && !ws->oversized)
        return; /* not a whole frame yet: wait for more */
    ws->busy++;
    if (!ws->oversized) {
        size_t used = direct_frames(ws, c);
        if (used > 0 && ws->conn != NULL) {
            tg_buf_consume(&c->in, used);
            ws->feedable -= used;
        }
    }
    if (ws->conn != NULL && c->phase < TG_CONN_CLOSING && (ws->feedable > 0 || ws->oversized)) {
        ensure_ctx(ws);
        ws->in_recv = 1;
        int r = wslay_event_recv(ws->ctx);
        ws->in_recv = 0;
        if (ws->conn != NULL) {
            if (r != 0)
                tg_conn_close(c, "WebSocket protocol error");
            else
                pump(ws);
        }
    }
    leave(ws);
}

static void on_tick(struct tg_conn *c, void *ud)
{
    struct tg_ws *ws = ud;
    if (ws->lingering) {
        tg_http_close_after_writes(c);
        return;
    }
    if (ws->awaiting_pong) {
        tg_log(TG_LOG_INFO, "WebSocket peer stopped answering pings", "conn=%llu", (unsigned long long)c->id);
        tg_conn_close(c, "ping timeout");
        return;
    }
    /* Part of a frame at two ticks in a row: a peer dribbling a frame (slowloris after the
     * upgrade) answers pings but is not let to hold the connection for ever. */
    if (c->in.len > 0 && ws->partial_seen) {
        tg_log(TG_LOG_INFO, "WebSocket frame not completed in time", "conn=%llu buffered=%zu", (unsigned long long)c->id,
               c->in.len);
        tg_conn_close(c, "frame timeout");
        return;
    }
    ws->partial_seen = c->in.len > 0;
    struct wslay_event_msg msg = {WSLAY_PING, (const uint8_t *)"tg", 2};
    ws->busy++;
    ensure_ctx(ws);
    wslay_event_queue_msg(ws->ctx, &msg);
    ws->awaiting_pong = 1;
    tg_http_upgraded_timer(c, ws->ping_ms);
    pump(ws);
    leave(ws);
}

static void on_gone(struct tg_conn *c, void *ud)
{
    struct tg_ws *ws = ud;
    ws->conn = NULL;
    finish(ws);
}

static const struct wslay_event_callbacks ws_callbacks = {ws_recv, ws_send, NULL, NULL, NULL, NULL, ws_on_msg};

struct tg_ws *tg_ws_start(struct tg_conn *c, size_t max_msg, uint64_t ping_ms, tg_ws_message_cb on_message,
                          tg_ws_closed_cb on_closed, void *ud)
{
    struct tg_ws *ws = tg_xcalloc(1, sizeof(*ws));
    ws->conn = c;
    ws->on_message = on_message;
    ws->on_closed = on_closed;
    ws->ud = ud;
    ws->ping_ms = ping_ms;
    ws->max_msg = max_msg;
    tg_http_take_over(c, on_data, on_tick, on_gone, ws); /* (bytes that came with the handshake follow from the loop) */
    if (ping_ms)
        tg_http_upgraded_timer(c, ping_ms);
    return ws;
}

/* A server's text frame is a header and the bytes (unmasked, RFC 6455 5.2): written here
 * straight into the connection's cork when wslay holds nothing to send before it, so a relayed
 * stream needs no wslay context, and none is made and freed per message. */
static int send_direct(struct tg_ws *ws, const char *p, size_t n)
{
    if (ws->closing || ws->lingering || ws->conn->phase >= TG_CONN_CLOSING)
        return 0;
    if (ws->ctx != NULL && (wslay_event_want_write(ws->ctx) || wslay_event_get_close_sent(ws->ctx) ||
                            wslay_event_get_queued_msg_length(ws->ctx) != 0))
        return 0;
    unsigned char h[10];
    size_t hn;
    h[0] = 0x80 | WSLAY_TEXT_FRAME; /* FIN, one frame */
    if (n < 126) {
        h[1] = (unsigned char)n;
        hn = 2;
    } else if (n <= 0xffff) {
        h[1] = 126;
        h[2] = (unsigned char)(n >> 8);
        h[3] = (unsigned char)n;
        hn = 4;
    } else {
        h[1] = 127;
        for (int i = 0; i < 8; i++)
            h[2 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
        hn = 10;
    }
    tg_http_raw_write2(ws->conn, (const char *)h, hn, p, n);
    return 1;
}

void tg_ws_send_text(struct tg_ws *ws, const char *p, size_t n)
{
    if (ws->conn == NULL || ws->closed)
        return;
    if (send_direct(ws, p, n))
        return;
    struct wslay_event_msg msg = {WSLAY_TEXT_FRAME, (const uint8_t *)p, n};
    ws->busy++;
    ensure_ctx(ws);
    if (wslay_event_queue_msg(ws->ctx, &msg) == 0 && !ws->in_recv)
        pump(ws);
    leave(ws);
}

void tg_ws_close(struct tg_ws *ws, uint16_t code, const char *reason)
{
    if (ws->conn == NULL)
        return;
    ws->busy++;
    ensure_ctx(ws);
    ws->closing = 1;
    wslay_event_queue_close(ws->ctx, code, (const uint8_t *)reason, reason ? strlen(reason) : 0);
    if (!ws->in_recv)
        pump(ws);
    leave(ws);
}

size_t tg_ws_pending(const struct tg_ws *ws)
{
    return (ws->conn ? ws->conn->out_pending : 0) + (ws->ctx ? wslay_event_get_queued_msg_length(ws->ctx) : 0);
}

static void ws_destroy(struct tg_ws *ws)
{
    if (ws->ctx != NULL)
        wslay_event_context_free(ws->ctx);
    free(ws);
}

void tg_ws_free(struct tg_ws *ws)
{
    if (ws == NULL)
        return;
    if (ws->conn != NULL)
        tg_http_take_over(ws->conn, NULL, NULL, NULL, NULL);
    ws->conn = NULL;
    if (ws->busy > 0) {
        ws->free_pending = 1; /* one of our functions is on the stack: it frees on the way out */
        return;
    }
    ws_destroy(ws);
}
