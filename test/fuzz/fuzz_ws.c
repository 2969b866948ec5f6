/* WebSocket frames as the gateway reads them (transports/ws.c over wslay, on an upgraded
 * transports/http1/conn.c connection): frames of any opcode, fragmentation, masking, control
 * frames, close codes, lengths over the message limit, and bytes that came with the handshake.
 * The bytes go in over a real loopback TCP connection (see net.h). The handshake is the
 * accept-key check and tg_http_upgrade() as transports/ws_channel.c makes them (the rest of
 * ws_channel, which needs a session, is fuzz_e2e's).
 *
 * Input: byte 0 picks
 *   bits 0-1: the message limit: 125, 1024, 65536 or 16 bytes
 *   bit 2: each text message is echoed back
 *   bit 3: the input carries its own handshake (else a valid one is sent first)
 *   bit 4: the gateway sends a text message at once, and pings after the input (its timer)
 *   bit 5: a message that starts with 'c' makes the gateway close (1001)
 *   bits 6-7: the rest is sent all at once, or in chunks of 1, 7 or 64 bytes
 * then the bytes of the connection (a client's frames are masked; unmasked ones are errors).
 *
 * Properties:
 *   every message handed over is at most the limit, and none after on_closed;
 *   on_closed runs once, and has run by the time the connection is freed;
 *   the gateway's frames (after its 101) are well formed: unmasked, no RSV bits, a known
 *   opcode, control frames final with at most 125 bytes, a close payload empty or a code;
 *   echoes come back as the same text; no crash, leak or undefined behaviour. */
#include "test/fuzz/net.h"

#include <stdio.h>

#include "transports/ws.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define HANDSHAKE                                                                                                     \
    "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"                                    \
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mcp\r\n\r\n"

/* One input's state. Owner: LLVMFuzzerTestOneInput (static, reset per input). */
static struct {
    uint8_t mode;
    size_t max_msg;
    struct tg_ws *ws;
    struct tg_conn *conn; /* the upgraded connection, while it lives */
    int closed;           /* on_closed ran (count) */
    int messages;
    struct tg_buf echoed; /* what we asked the gateway to send, in order */
} st;

static void on_message(void *ud, const char *p, size_t n)
{
    (void)ud;
    if (n > st.max_msg || st.closed)
        abort();
    st.messages++;
    if (st.ws == NULL) {
        /* tg_ws_start() is still on the stack (bytes that came with the handshake), so there is
         * no tg_ws to answer with yet. transports/ws_channel.c answers through ch->ws, which is
         * NULL at this point: see the report of this target (a gateway bug, not handled here). */
        return;
    }
    if ((st.mode & 0x20) && n > 0 && p[0] == 'c') {
        tg_ws_close(st.ws, 1001, "going away");
        return;
    }
    if (st.mode & 0x04) {
        tg_buf_append(&st.echoed, p, n);
        tg_ws_send_text(st.ws, p, n);
    }
}

static void on_closed(void *ud)
{
    (void)ud;
    st.closed++;
    if (st.closed > 1)
        abort();
}

static void handler(struct fnet *n, struct tg_conn *c)
{
    (void)n;
    char accept[32];
    if (!tg_http_scratch_of(c)->parser.upgrade || tg_ws_accept_key(tg_http_req_header(c->req, "sec-websocket-key"), accept) != 0) {
        tg_http_respond(c, 426, "Upgrade: websocket\r\n", "text/plain", "upgrade", 7);
        return;
    }
    if (st.ws != NULL) { /* a second handshake on the same connection cannot happen: it was upgraded */
        abort();
    }
    char extra[200];
    snprintf(extra, sizeof(extra),
             "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: mcp\r\n",
             accept);
    tg_http_upgrade(c, extra);
    st.conn = c;
    st.ws = tg_ws_start(c, st.max_msg, 0, on_message, on_closed, NULL);
    if (st.mode & 0x10) {
        tg_buf_append(&st.echoed, "hi", 2);
        tg_ws_send_text(st.ws, "hi", 2);
    }
}

/* The gateway's frames after its 101: well formed; text frames carry, in order, what we asked it
 * to send (a message the gateway sends is one frame: wslay does not fragment what it sends). */
static void check_frames(const struct fnet *n)
{
    if (n->got.len == 0)
        return;
    const char *end = memmem(n->got.base, n->got.len, "\r\n\r\n", 4);
    if (end == NULL || memcmp(n->got.base, "HTTP/1.1 101 ", 13) != 0)
        return; /* no upgrade (refused handshake): http1's properties are fuzz_http1's */
    const unsigned char *p = (const unsigned char *)end + 4;
    size_t len = n->got.len - (size_t)((const char *)p - n->got.base);
    size_t off = 0, texts = 0;
    while (len - off >= 2) {
        const unsigned char *f = p + off;
        int fin = f[0] & 0x80, rsv = f[0] & 0x70, op = f[0] & 0x0f;
        if (f[1] & 0x80)
            abort(); /* a server never masks */
        uint64_t plen = f[1] & 0x7f;
        size_t hdr = 2;
        if (plen == 126) {
            if (len - off < 4)
                break;
            plen = (uint64_t)f[2] << 8 | f[3];
            hdr = 4;
        } else if (plen == 127) {
            if (len - off < 10)
                break;
            plen = 0;
            for (int i = 0; i < 8; i++)
                plen = plen << 8 | f[2 + i];
            hdr = 10;
        }
        if (rsv || !(op <= 2 || (op >= 8 && op <= 10)))
            abort();
        if (op >= 8 && (!fin || plen > 125))
            abort();
        if (op == 8 && plen == 1)
            abort(); /* a close payload is empty or starts with a 2-byte code */
        if (len - off < hdr + plen)
            break; /* the connection ended mid-frame */
        const unsigned char *pl = f + hdr;
        if (op == 8 && plen >= 2) {
            unsigned code = (unsigned)pl[0] << 8 | pl[1];
            if (code < 1000 || code == 1004 || code == 1005 || code == 1006 || (code > 1014 && code < 3000) ||
                code > 4999)
                abort();
        }
        if (op == 1) {
            if (!fin || texts + plen > st.echoed.len || (plen && memcmp(st.echoed.base + texts, pl, plen) != 0))
                abort();
            texts += plen;
        }
        if (op == 2 || op == 0)
            abort(); /* the gateway sends only text */
        off += hdr + (size_t)plen;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fnet *n = fnet_get(handler);
    if (size == 0)
        return 0;
    static const size_t limits[4] = {125, 1024, 65536, 16};
    st.mode = data[0];
    st.max_msg = limits[st.mode & 3];
    st.ws = NULL;
    st.conn = NULL;
    st.closed = 0;
    st.messages = 0;
    tg_buf_init(&st.echoed);
    data++;
    size--;
    fnet_default_limits(&n->limits);
    n->draining = 0;
    fnet_connect(n);
    if (!(st.mode & 0x08))
        fnet_send(n, (const uint8_t *)HANDSHAKE, sizeof(HANDSHAKE) - 1);
    static const size_t chunks[4] = {0, 1, 7, 64};
    size_t chunk = chunks[st.mode >> 6];
    if (chunk == 0)
        chunk = size;
    for (size_t off = 0; off < size; off += chunk)
        fnet_send(n, data + off, size - off < chunk ? size - off : chunk);
    if ((st.mode & 0x10) && n->conn != NULL && n->conn->phase == TG_CONN_UPGRADED && n->conn->up != NULL && n->conn->up->tick != NULL) {
        /* The ping timer, fired by hand: a ping goes out; the second tick finds no pong. */
        n->conn->up->tick(n->conn, n->conn->up->ud);
        fnet_settle(n);
        if (n->conn != NULL && n->conn->phase == TG_CONN_UPGRADED && n->conn->up != NULL && n->conn->up->tick != NULL)
            n->conn->up->tick(n->conn, n->conn->up->ud);
        fnet_settle(n);
    }
    check_frames(n);
    if (getenv("TG_FUZZ_VERBOSE") != NULL)
        fprintf(stderr, "upgraded=%d messages=%d got=%zu eof=%d\n", st.ws != NULL, st.messages, n->got.len, n->eof);
    fnet_close(n);
    if (st.ws != NULL) {
        if (st.closed != 1)
            abort(); /* the connection is gone: on_closed must have run */
        tg_ws_free(st.ws);
        st.ws = NULL;
    }
    tg_buf_dispose(&st.echoed);
    return 0;
}
