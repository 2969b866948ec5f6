/* transports/ws.c, byte for byte, on a real upgraded tg_conn (see harness.h): the
 * handler answers GET /ws with tg_ws_accept_key() + tg_http_upgrade() and hands the
 * connection to tg_ws_start(); the client writes masked frames (RFC 6455 §5.3) and checks
 * the exact unmasked frames that come back. The frames of RFC 6455 §5.7 are used as they
 * are printed there. */
#include "test/unit/transports/harness.h"

#include "transports/ws.h"

struct tw {
    struct tg_ws *ws;
    size_t max_msg;
    int echo;
    int nmsgs;
    struct tg_buf msgs; /* every message, each followed by '|' */
    int closed;
};

static struct tw *tw_of(struct hh *h) { return h->ud; }

static void on_ws_message(void *ud, const char *p, size_t n)
{
    struct hh *h = ud;
    struct tw *t = tw_of(h);
    t->nmsgs++;
    tg_buf_append(&t->msgs, p, n);
    tg_buf_append(&t->msgs, "|", 1);
    if (t->echo)
        tg_ws_send_text(t->ws, p, n);
}

static void on_ws_closed(void *ud)
{
    struct hh *h = ud;
    tw_of(h)->closed++;
}

static void handler(struct hh *h, struct tg_conn *c)
{
    struct tw *t = tw_of(h);
    char accept[32];
    assert_int_equal(tg_ws_accept_key(tg_http_req_header(c->req, "sec-websocket-key"), accept), 0);
    char extra[160];
    snprintf(extra, sizeof(extra), "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n", accept);
    tg_http_upgrade(c, extra);
    t->ws = tg_ws_start(c, t->max_msg, 0, on_ws_message, on_ws_closed, h);
}

#define HANDSHAKE                                                                                                     \
    "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"                                    \
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
/* RFC 6455 §1.3: the accept value for the sample nonce. */
#define SWITCHING                                                                                                     \
    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"                               \
    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
/* RFC 6455 §5.7: a masked text "Hello" and a masked ping "Hello". */
#define MASKED_HELLO "\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"
#define MASKED_PING_HELLO "\x89\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"

static const uint8_t mask_key[4] = {0x37, 0xfa, 0x21, 0x3d};

/* A client frame (always masked); returns its length. */
static size_t client_frame(uint8_t *out, int fin, int opcode, const void *payload, size_t n)
{
    size_t o = 0;
    out[o++] = (uint8_t)((fin ? 0x80 : 0) | opcode);
    if (n < 126) {
        out[o++] = (uint8_t)(0x80 | n);
    } else {
        out[o++] = 0x80 | 126;
        out[o++] = (uint8_t)(n >> 8);
        out[o++] = (uint8_t)(n & 0xff);
    }
    memcpy(out + o, mask_key, 4);
    o += 4;
    for (size_t i = 0; i < n; i++)
        out[o++] = ((const uint8_t *)payload)[i] ^ mask_key[i % 4];
    return o;
}

static void send_frame(struct hh *h, int fin, int opcode, const void *payload, size_t n)
{
    uint8_t f[1024];
    assert_true(n + 8 <= sizeof(f));
    hh_send(h, f, client_frame(f, fin, opcode, payload, n));
}

static void send_close(struct hh *h, uint16_t code)
{
    uint8_t payload[2] = {(uint8_t)(code >> 8), (uint8_t)(code & 0xff)};
    send_frame(h, 1, 0x8, payload, 2);
}

/* The server's close frame with `code` (no reason), the client's answer with the same code, and
 * the connection's end (on_closed once). */
static void close_answered(struct hh *h, uint16_t code)
{
    const char want[4] = {'\x88', '\x02', (char)(code >> 8), (char)(code & 0xff)};
    HH_EXPECT_N(h, want, 4);
    send_close(h, code);
    HH_EXPECT_EOF(h);
    HH_RUN_UNTIL(h, tw_of(h)->closed == 1);
}

static struct hh *setup(size_t max_msg)
{
    struct hh *h = hh_new(handler);
    struct tw *t = tg_xcalloc(1, sizeof(*t));
    t->max_msg = max_msg;
    tg_buf_init(&t->msgs);
    h->ud = t;
    hh_connect(h);
    return h;
}

static struct hh *setup_upgraded(size_t max_msg)
{
    struct hh *h = setup(max_msg);
    HH_SEND(h, HANDSHAKE);
    HH_EXPECT(h, SWITCHING);
    assert_non_null(tw_of(h)->ws);
    assert_non_null(h->conn);
    assert_int_equal(h->conn->phase, TG_CONN_UPGRADED);
    return h;
}

static void teardown(struct hh *h)
{
    struct tw *t = h->ud;
    hh_free(h);
    assert_true(t->ws == NULL || t->closed == 1); /* on_closed runs once, when the connection goes */
    tg_ws_free(t->ws);
    tg_buf_dispose(&t->msgs);
    free(t);
}

static void assert_msgs(struct hh *h, const char *want)
{
    struct tw *t = tw_of(h);
    char a[2048];
    if (t->msgs.len != strlen(want) || memcmp(t->msgs.base, want, t->msgs.len) != 0)
        fail_msg("messages \"%s\", expected \"%s\"", hh_show(t->msgs.base, t->msgs.len, a, sizeof(a)), want);
}

/* ---- cases ----------------------------------------------------------------------------- */

static void text_frames_in_and_out(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    HH_SEND(h, MASKED_HELLO);
    HH_RUN_UNTIL(h, t->nmsgs == 1);
    assert_msgs(h, "Hello|");
    /* Server frames are never masked (RFC 6455 §5.1). */
    tg_ws_send_text(t->ws, "Hello", 5);
    HH_EXPECT(h, "\x81\x05Hello");
    /* 126..65535 bytes: the 16-bit length form. */
    char big[200];
    memset(big, 'z', sizeof(big));
    tg_ws_send_text(t->ws, big, sizeof(big));
    HH_EXPECT(h, "\x81\x7e\x00\xc8");
    HH_EXPECT_N(h, big, sizeof(big));
    /* The answer to a message, sent from inside on_message, follows it. */
    t->echo = 1;
    send_frame(h, 1, 0x1, "{\"id\":1}", 8);
    HH_EXPECT(h, "\x81\x08{\"id\":1}");
    assert_msgs(h, "Hello|{\"id\":1}|");
    HH_EXPECT_QUIET(h);
    teardown(h);
}

static void frame_in_the_handshake_segment(void **state)
{
    /* Bytes after the Upgrade head belong to the WebSocket: tg_ws_start() reads them. */
    struct hh *h = setup(1024);
    HH_SEND(h, HANDSHAKE MASKED_HELLO);
    HH_EXPECT(h, SWITCHING);
    HH_RUN_UNTIL(h, tw_of(h)->nmsgs == 1);
    assert_msgs(h, "Hello|");
    teardown(h);
}

static void ping_answered_with_pong(void **state)
{
    struct hh *h = setup_upgraded(1024);
    HH_SEND(h, MASKED_PING_HELLO);
    HH_EXPECT(h, "\x8a\x05Hello"); /* the ping's payload, unmasked */
    /* An empty ping. */
    send_frame(h, 1, 0x9, "", 0);
    HH_EXPECT(h, "\x8a\x00");
    assert_int_equal(tw_of(h)->nmsgs, 0);
    HH_EXPECT_QUIET(h);
    teardown(h);
}

static void binary_closes_1003(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    send_frame(h, 1, 0x2, "\x01\x02\x03", 3);
    HH_EXPECT(h, "\x88\x20\x03\xeb" "binary frames are not accepted");
    assert_int_equal(t->nmsgs, 0);
    /* The client answers the close: the connection ends. */
    send_close(h, 1003);
    HH_EXPECT_EOF(h);
    HH_RUN_UNTIL(h, t->closed == 1);
    teardown(h);
}

static void oversize_closes_1009(void **state)
{
    struct hh *h = setup_upgraded(64);
    struct tw *t = tw_of(h);
    char big[100];
    memset(big, 'x', sizeof(big));
    send_frame(h, 1, 0x1, big, sizeof(big));
    /* 1009 Message Too Big. wslay stops reading after it, so ws.c lingers: it drops what the
     * peer still sends (this answering close too) and closes when its 2 s linger timer fires. */
    close_answered(h, 1009);
    assert_int_equal(t->nmsgs, 0);
    teardown(h);
}

static void oversize_by_fragments_closes_1009(void **state)
{
    /* Each fragment fits; the message does not. */
    struct hh *h = setup_upgraded(64);
    struct tw *t = tw_of(h);
    char part[40];
    memset(part, 'y', sizeof(part));
    send_frame(h, 0, 0x1, part, sizeof(part));
    send_frame(h, 1, 0x0, part, sizeof(part));
    HH_EXPECT(h, "\x88\x02\x03\xf1");
    assert_int_equal(t->nmsgs, 0);
    /* A peer that just leaves ends the linger at once. */
    shutdown(h->fd, SHUT_WR);
    HH_EXPECT_EOF(h);
    HH_RUN_UNTIL(h, t->closed == 1);
    teardown(h);
}

static void fragmented_message_reassembled(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    /* RFC 6455 §5.7: "Hel" (text, not final), then "lo" (continuation, final); here masked,
     * with a ping between the fragments (control frames may interleave, §5.4), and each
     * frame split across two writes. */
    uint8_t f[64];
    size_t n = client_frame(f, 0, 0x1, "Hel", 3);
    hh_send(h, f, 3);
    hh_spin(h, 3);
    hh_send(h, f + 3, n - 3);
    hh_spin(h, 3);
    assert_int_equal(t->nmsgs, 0);
    HH_SEND(h, MASKED_PING_HELLO);
    HH_EXPECT(h, "\x8a\x05Hello");
    assert_int_equal(t->nmsgs, 0);
    n = client_frame(f, 1, 0x0, "lo", 2);
    hh_send(h, f, 1);
    hh_spin(h, 3);
    assert_int_equal(t->nmsgs, 0);
    hh_send(h, f + 1, n - 1);
    HH_RUN_UNTIL(h, t->nmsgs == 1);
    assert_msgs(h, "Hello|");
    /* And a whole message after it. */
    send_frame(h, 1, 0x1, "again", 5);
    HH_RUN_UNTIL(h, t->nmsgs == 2);
    assert_msgs(h, "Hello|again|");
    teardown(h);
}

static void client_close_echoed(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    send_close(h, 1000);
    HH_EXPECT(h, "\x88\x02\x03\xe8"); /* the same code back */
    HH_EXPECT_EOF(h);
    HH_RUN_UNTIL(h, t->closed == 1);
    /* Sending after the close writes nothing and does not crash. */
    tg_ws_send_text(t->ws, "late", 4);
    HH_RUN_UNTIL(h, h->gone == 1);
    teardown(h);
}

static void server_close_handshake(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    tg_ws_close(t->ws, 1001, "going away");
    HH_EXPECT(h, "\x88\x0c\x03\xe9going away");
    send_close(h, 1001);
    HH_EXPECT_EOF(h);
    HH_RUN_UNTIL(h, t->closed == 1);
    teardown(h);
}

/* Several whole frames in one read: text frames are read without wslay (ws.c direct_frames), a
 * ping between them goes to wslay, and the answers leave in order. An empty text frame is a
 * message too, and a frame split over two reads waits for its end. */
static void frames_in_one_read_keep_their_order(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    t->echo = 1;
    uint8_t f[256];
    size_t n = client_frame(f, 1, 0x1, "A", 1);
    n += client_frame(f + n, 1, 0x1, "BB", 2);
    memcpy(f + n, MASKED_PING_HELLO, sizeof(MASKED_PING_HELLO) - 1);
    n += sizeof(MASKED_PING_HELLO) - 1;
    n += client_frame(f + n, 1, 0x1, "", 0);
    n += client_frame(f + n, 1, 0x1, "CCC", 3);
    hh_send(h, f, n);
    HH_EXPECT(h, "\x81\x01" "A" "\x81\x02" "BB" "\x8a\x05Hello" "\x81\x00" "\x81\x03" "CCC");
    assert_msgs(h, "A|BB||CCC|");
    n = client_frame(f, 1, 0x1, "split", 5);
    hh_send(h, f, 4);
    hh_spin(h, 3);
    assert_int_equal(t->nmsgs, 4);
    hh_send(h, f + 4, n - 4);
    HH_EXPECT(h, "\x81\x05split");
    assert_msgs(h, "A|BB||CCC|split|");
    /* 126 bytes and over: the 16-bit length form. */
    char big[300];
    memset(big, 'q', sizeof(big));
    send_frame(h, 1, 0x1, big, sizeof(big));
    HH_EXPECT(h, "\x81\x7e\x01\x2c");
    HH_EXPECT_N(h, big, sizeof(big));
    assert_int_equal(t->nmsgs, 6);
    HH_EXPECT_QUIET(h);
    teardown(h);
}

/* Text outside ASCII is wslay's to check: valid UTF-8 arrives as sent, invalid UTF-8 closes with
 * 1007 and is not delivered. */
static void utf8_checked_invalid_closes_1007(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    send_frame(h, 1, 0x1, "h\xc3\xa9llo", 6);
    HH_RUN_UNTIL(h, t->nmsgs == 1);
    assert_msgs(h, "h\xc3\xa9llo|");
    send_frame(h, 1, 0x1, "ok\xff", 3);
    close_answered(h, 1007); /* Invalid frame payload data */
    assert_int_equal(t->nmsgs, 1);
    teardown(h);
}

/* Frames the direct path must not take: unmasked, or with an RSV bit, close with 1002 (wslay's
 * answer); a length not in its shortest form is refused and the connection ends. None is
 * delivered. */
static void unmasked_closes_1002(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    /* A masked frame (key 0) after it is not read either: not as a message of its own, and not
     * as the unmasked frame's missing key and payload. */
    hh_send(h, "\x81\x02hi\x81\x82\0\0\0\0ok", 12);
    close_answered(h, 1002); /* Protocol error */
    assert_int_equal(t->nmsgs, 0);
    teardown(h);
}

static void rsv_bit_closes_1002(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    uint8_t f[32];
    size_t n = client_frame(f, 1, 0x1, "hi", 2);
    f[0] |= 0x40; /* RSV1, with no extension agreed */
    hh_send(h, f, n);
    close_answered(h, 1002);
    assert_int_equal(t->nmsgs, 0);
    teardown(h);
}

static void long_length_form_for_short_payload_refused(void **state)
{
    struct hh *h = setup_upgraded(1024);
    struct tw *t = tw_of(h);
    uint8_t f[32] = {0x81, 0x80 | 126, 0x00, 0x02};
    memcpy(f + 4, mask_key, 4);
    f[8] = 'h' ^ mask_key[0];
    f[9] = 'i' ^ mask_key[1];
    hh_send(h, f, 10);
    HH_RUN_UNTIL(h, t->closed == 1);
    assert_int_equal(t->nmsgs, 0);
    teardown(h);
}

int main(int argc, char **argv)
{
    tg_log_setup(TG_LOG_WARN, TG_LOG_LOGFMT, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(text_frames_in_and_out),
        cmocka_unit_test(frame_in_the_handshake_segment),
        cmocka_unit_test(ping_answered_with_pong),
        cmocka_unit_test(binary_closes_1003),
        cmocka_unit_test(oversize_closes_1009),
        cmocka_unit_test(oversize_by_fragments_closes_1009),
        cmocka_unit_test(fragmented_message_reassembled),
        cmocka_unit_test(client_close_echoed),
        cmocka_unit_test(server_close_handshake),
        cmocka_unit_test(frames_in_one_read_keep_their_order),
        cmocka_unit_test(utf8_checked_invalid_closes_1007),
        cmocka_unit_test(unmasked_closes_1002),
        cmocka_unit_test(rsv_bit_closes_1002),
        cmocka_unit_test(long_length_form_for_short_payload_refused),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
