/* transports/channel.c, legacy_sse.c, ws_channel.c: the long-lived channel of a legacy HTTP+SSE
 * or WebSocket client, driven with hand-made requests over real connections
 * (test/unit/transports/edge.h) into a fake upstream kind. The SSE stream is read on a second
 * client socket (struct peer) while the client POSTs to /messages on the harness's own.
 * Checked: the endpoint event, /messages' refusals, answers and errors as "message" events,
 * one initialize per session, batches only for 2025-03-26, the server's stream opened after
 * notifications/initialized, keepalives, the gateway ending a channel, the client leaving,
 * backpressure (tg_channel_high, and the drain that resumes the session); the WebSocket
 * handshake's refusals, one message per text frame both ways, and the close. */
#include "test/unit/transports/edge.h"

#include "core/wire/http_fast.h"
#include "transports/ws.h"

#define CALL(id, tool)                                                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"tools/call\",\"params\":{\"name\":\"" tool "\","            \
    "\"arguments\":{\"x\":1}}}"
#define INITIALIZED "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"
#define INIT(version)                                                                                              \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"" version "\","   \
    "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"

/* ---- tg_http_fast_query_param (core/wire/http_fast.c, read by legacy_sse.c) -------------- */

static void query_param(void **state)
{
    static const struct {
        const char *q, *name, *want; /* want NULL: absent */
    } cases[] = {
        {"?sessionId=abc", "sessionId", "abc"},
        {"sessionId=abc", "sessionId", "abc"},
        {"?a=1&sessionId=abc&b=2", "sessionId", "abc"},
        {"?sessionId=", "sessionId", ""},
        {"?sessionId=a%20b", "sessionId", "a%20b"}, /* not decoded */
        {"?sessionId=x&sessionId=y", "sessionId", "x"},
        {"?xsessionId=abc", "sessionId", NULL},
        {"?sessionIdx=abc", "sessionId", NULL},
        {"?sessionid=abc", "sessionId", NULL},
        {"?sessionId", "sessionId", NULL},
        {"?", "sessionId", NULL},
        {"", "sessionId", NULL},
        {"?&&sessionId=z&", "sessionId", "z"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tg_slice v = tg_http_fast_query_param(tg_slice_cstr(cases[i].q), cases[i].name);
        if (cases[i].want == NULL ? v.ptr != NULL : (v.ptr == NULL || !tg_slice_eq(v, tg_slice_cstr(cases[i].want))))
            fail_msg("%s in \"%s\": got %s%.*s, expected %s", cases[i].name, cases[i].q, v.ptr ? "" : "(none)",
                     (int)v.len, v.ptr ? v.ptr : "", cases[i].want ? cases[i].want : "(none)");
    }
    /* A slice: bytes past its end are not read. */
    struct tg_slice v = tg_http_fast_query_param(tg_slice_of("?sessionId=abcdef", 14), "sessionId");
    assert_true(tg_slice_eq(v, TG_SLICE("abc")));
}

/* ---- a second client: the stream ------------------------------------------------------------ */

/* Owner: the test case (peer_open / peer_close). */
struct peer {
    struct edge *t;
    int fd;
    uv_poll_t poll;
    int polling, reading;
    struct tg_buf got;
    int eof;
};

static void on_peer_readable(uv_poll_t *p, int status, int events)
{
    struct peer *c = p->data;
    for (;;) {
        char buf[16384];
        ssize_t n = recv(c->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) {
            tg_buf_append(&c->got, buf, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        c->eof = 1;
        uv_poll_stop(p);
        c->reading = 0;
        return;
    }
}

static void peer_read(struct peer *c, int on)
{
    c->reading = on;
    if (on)
        uv_poll_start(&c->poll, UV_READABLE, on_peer_readable);
    else
        uv_poll_stop(&c->poll);
}

/* Connect and send a request (a whole one: "GET PATH HTTP/1.1\r\n...\r\n\r\n"). */
static void peer_open(struct peer *c, struct edge *t, const char *request)
{
    memset(c, 0, sizeof(*c));
    c->t = t;
    tg_buf_init(&c->got);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(c->fd >= 0);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", t->h->port, &a);
    assert_int_equal(connect(c->fd, (const struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(uv_poll_init(&t->h->loop, &c->poll, c->fd), 0);
    c->poll.data = c;
    c->polling = 1;
    peer_read(c, 1);
    int want = t->h->accepted + 1;
    HH_RUN_UNTIL(t->h, t->h->accepted == want);
    assert_int_equal(send(c->fd, request, strlen(request), MSG_NOSIGNAL), (ssize_t)strlen(request));
}

static void on_peer_closed(uv_handle_t *u) { ((struct peer *)u->data)->polling = 0; }

static void peer_close(struct peer *c)
{
    if (c->polling) {
        uv_close((uv_handle_t *)&c->poll, on_peer_closed);
        while (c->polling)
            uv_run(&c->t->h->loop, UV_RUN_NOWAIT);
    }
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    tg_buf_dispose(&c->got);
}

static int peer_has(const struct peer *c, const char *s)
{
    return c->got.len > 0 && memmem(c->got.base, c->got.len, s, strlen(s)) != NULL;
}
#define PEER_WAIT(c, s) HH_RUN_UNTIL((c)->t->h, peer_has((c), (s)) || (c)->eof)
#define PEER_EXPECT(c, s)                                                                                          \
    do {                                                                                                           \
        PEER_WAIT(c, s);                                                                                           \
        if (!peer_has((c), (s)))                                                                                   \
            fail_msg("the stream has no \"%s\"; it has:\n%.*s", (s), (int)(c)->got.len, (c)->got.base);           \
    } while (0)

/* ---- legacy HTTP+SSE ------------------------------------------------------------------------ */

/* A legacy SSE session of upstream side ("/side") or main (""): its stream open on c, its
 * session returned, the endpoint event checked. */
static struct tg_session *sse_open(struct edge *t, struct peer *c, const char *prefix)
{
    size_t before = tg_session_table_count(t->srv->sessions);
    char req[256];
    snprintf(req, sizeof(req), "GET %s/sse?tok=1 HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n", prefix);
    peer_open(c, t, req);
    PEER_EXPECT(c, "\n\n");
    assert_int_equal(tg_session_table_count(t->srv->sessions), before + 1);
    assert_true(peer_has(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                            "Transfer-Encoding: chunked\r\n\r\n"));
    const char *e = memmem(c->got.base, c->got.len, "event: endpoint\ndata: ", 22);
    assert_non_null(e);
    char want[128];
    snprintf(want, sizeof(want), "%s/messages?sessionId=", prefix);
    assert_memory_equal(e + 22, want, strlen(want));
    char sid[64];
    const char *id = e + 22 + strlen(want);
    size_t n = 0;
    while (id[n] != '\n' && n < sizeof(sid) - 1) {
        sid[n] = id[n];
        n++;
    }
    sid[n] = '\0';
    struct tg_session *s = tg_session_find(t->srv->sessions, tg_slice_cstr(sid));
    assert_non_null(s);
    assert_non_null(s->channel);
    c->got.len = 0;
    return s;
}

/* POST body to s's /messages (prefix: "/side" or ""); the answer's status line is returned. */
static const char *sse_post(struct edge *t, const char *prefix, const struct tg_session *s, const char *body)
{
    char target[128];
    snprintf(target, sizeof(target), "%s/messages?sessionId=%s", prefix, s->id_str);
    edge_clear(t);
    edge_request(t, "POST", target, "Content-Type: application/json\r\n", body);
    return edge_answer(t);
}

#define ACCEPTED "HTTP/1.1 202 Accepted\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 8\r\n\r\nAccepted"

static void sse_open_refusals(void **state)
{
    struct edge *t = edge_new();
    edge_request(t, "GET", "/sse", NULL, NULL);
    EDGE_EXPECT_RPC(t, 406, NULL, TG_RPC_INVALID_REQUEST, "Not Acceptable: Accept must list text/event-stream");
    t->srv->draining = 1;
    edge_request(t, "GET", "/sse", "Accept: text/*\r\n", NULL);
    EDGE_EXPECT_RPC(t, 503, NULL, TG_RPC_UPSTREAM, "gateway is shutting down");
    t->srv->draining = 0;
    assert_int_equal(tg_session_table_count(t->srv->sessions), 0);
    edge_free(t);
}

static void sse_messages_refusals(void **state)
{
    struct edge *t = edge_new();
    struct peer c;
    struct tg_session *s = sse_open(t, &c, "/side");
    char target[128];
    snprintf(target, sizeof(target), "/side/messages?sessionId=%s", s->id_str);
    edge_request(t, "POST", target, "Content-Type: text/plain\r\n", INITIALIZED);
    EDGE_EXPECT_RPC(t, 415, NULL, TG_RPC_INVALID_REQUEST, "Unsupported Media Type: Content-Type must be application/json");
    edge_request(t, "POST", "/side/messages?x=1", "Content-Type: application/json\r\n", INITIALIZED);
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST, "Bad Request: sessionId is required");
    edge_request(t, "POST", "/side/messages?sessionId=nope", "Content-Type: application/json\r\n", INITIALIZED);
    EDGE_EXPECT_RPC(t, 404, NULL, TG_RPC_INVALID_REQUEST, "Session not found");
    /* The session is side's: not found at main's endpoint. */
    snprintf(target, sizeof(target), "/messages?sessionId=%s", s->id_str);
    edge_request(t, "POST", target, "Content-Type: application/json\r\n", INITIALIZED);
    EDGE_EXPECT_RPC(t, 404, NULL, TG_RPC_INVALID_REQUEST, "Session not found");
    /* A Streamable HTTP session has no channel to post to. */
    struct tg_session *plain = edge_session(t, 1, "2025-06-18");
    snprintf(target, sizeof(target), "/side/messages?sessionId=%s", plain->id_str);
    edge_request(t, "POST", target, "Content-Type: application/json\r\n", INITIALIZED);
    EDGE_EXPECT_RPC(t, 404, NULL, TG_RPC_INVALID_REQUEST, "Session not found");
    assert_int_equal(c.got.len, 0); /* nothing on the stream */
    assert_int_equal(fake.nsend, 0);
    peer_close(&c);
    edge_free(t);
}

/* The credential that opened the stream no longer holds (here: the grant is no longer anonymous,
 * as a reload would make it): the next message is refused with 401 and never dispatched, the
 * stream ends, and a later POST for the session hears why (401, not 404). */
static void sse_message_after_its_credential_ended(void **state)
{
    struct edge *t = edge_new();
    struct peer c;
    struct tg_session *s = sse_open(t, &c, "");
    char target[128];
    snprintf(target, sizeof(target), "/messages?sessionId=%s", s->id_str);
    struct tg_grant_conf *g = (struct tg_grant_conf *)tg_conf_find_grant(t->srv->conf, "alice");
    g->anonymous = 0;
    t->srv->conf->serial++; /* what a reload brings: another conf */
    for (int i = 0; i < 2; i++) {
        edge_request(t, "POST", target, "Content-Type: application/json\r\n", INIT("2025-06-18"));
        const char *a = edge_answer(t);
        assert_non_null(strstr(a, "HTTP/1.1 401 Unauthorized\r\n"));
        assert_non_null(strstr(a, "\r\nWWW-Authenticate: Bearer realm=\"tollgate\", error=\"invalid_token\", "
                                  "error_description=\"credential no longer valid\"\r\n"));
        assert_non_null(strstr(a, "\"message\":\"Unauthorized: the credential that opened this stream ended "
                                  "(credential no longer valid); open a new one\""));
    }
    assert_int_equal(fake.nsend, 0); /* never forwarded */
    PEER_EXPECT(&c, "0\r\n\r\n");  /* the stream ended */
    assert_int_equal(tg_session_table_count(t->srv->sessions), 0);
    g->anonymous = 1;
    peer_close(&c);
    edge_free(t);
}

/* side answers initialize itself: the POST is 202, the answer an event on the stream. */
static void sse_messages_answered_on_stream(void **state)
{
    struct edge *t = edge_new();
    struct peer c;
    struct tg_session *s = sse_open(t, &c, "/side");
    assert_string_equal(sse_post(t, "/side", s, INIT("2025-03-26")), ACCEPTED);
    PEER_EXPECT(&c, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-03-26\"");
    assert_int_equal(s->initialized, 1);
    c.got.len = 0;
    assert_string_equal(sse_post(t, "/side", s, INIT("2025-03-26")), ACCEPTED);
    PEER_EXPECT(&c, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32600,\"message\":"
                    "\"Invalid Request: this session is already initialized\"}}\n\n");
    c.got.len = 0;
    /* A malformed message: 400, and the error on the stream. */
    const char *a = sse_post(t, "/side", s, "{");
    assert_non_null(strstr(a, "HTTP/1.1 400 Bad Request\r\n"));
    assert_non_null(strstr(a, "\"Bad Request: the message was refused (see the stream)\""));
    PEER_EXPECT(&c, "data: {\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":"
                    "\"Parse error: expected object key\"}}\n\n");
    c.got.len = 0;
    /* A batch (2025-03-26): the answers as one array event. */
    assert_string_equal(sse_post(t, "/side", s, "[{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"ping\"},7]"), ACCEPTED);
    PEER_EXPECT(&c, "data: [");
    PEER_EXPECT(&c, "]\n\n");
    assert_true(peer_has(&c, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":"
                             "\"Invalid Request: a JSON-RPC message must be an object\"}}"));
    c.got.len = 0;
    /* Too many elements (limits.inflight_per_session = 3). */
    a = sse_post(t, "/side", s, "[1,2,3,4]");
    assert_non_null(strstr(a, "HTTP/1.1 400 Bad Request\r\n"));
    PEER_EXPECT(&c, "\"Invalid Request: batches are only accepted for protocol 2025-03-26, non-empty and within "
                    "limits.inflight_per_session\"}}\n\n");
    peer_close(&c);
    edge_free(t);
}

/* main forwards: the answer comes as an event when the upstream answers; after
 * notifications/initialized the channel opens the upstream's stream of server messages, whose
 * messages are events too. */
static void sse_forwarded(void **state)
{
    struct edge *t = edge_new();
    struct peer c;
    struct tg_session *s = sse_open(t, &c, "");
    t->srv->next_gid = 59;
    assert_string_equal(sse_post(t, "", s, INIT("2025-06-18")), ACCEPTED);
    assert_int_equal(fake.nsend, 1);
    assert_int_equal(s->init_pending, 1);
    /* A second initialize while the first is on its way is refused as well. */
    assert_string_equal(sse_post(t, "", s, INIT("2025-06-18")), ACCEPTED);
    PEER_EXPECT(&c, "\"Invalid Request: this session is already initialized\"");
    c.got.len = 0;
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":60,\"result\":{\"protocolVersion\":\"2025-06-18\"}}");
    PEER_EXPECT(&c, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-06-18\"}}\n\n");
    c.got.len = 0;
    assert_string_equal(sse_post(t, "", s, INITIALIZED), ACCEPTED);
    assert_int_equal(fake.nsend, 3);
    assert_non_null(strstr(fake.sent.base, "\"id\":60,\"method\":\"initialize\""));
    assert_non_null(strstr(fake.sent.base, "}}}\n" INITIALIZED "\n(stream)\n"));
    assert_non_null(s->get_stream);
    struct tg_call *listen = fake.last;
    /* A server message on the session's stream reaches the client as an event. */
    const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}";
    tg_call_upstream_message(listen, note, strlen(note), NULL);
    PEER_EXPECT(&c, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n");
    /* The client leaves: the session ends with it, the upstream session too. */
    size_t n = 0, w = 0;
    tg_channels_count(t->srv, &n, &w);
    assert_int_equal(n, 1);
    assert_int_equal(w, 0);
    int cancelled = fake.ncancel;
    peer_close(&c);
    HH_RUN_UNTIL(t->h, tg_session_table_count(t->srv->sessions) == 0);
    assert_int_equal(fake.nclose, 1);
    tg_channels_count(t->srv, &n, &w);
    assert_int_equal(n, 0);
    /* The calls still open upstream (the stream, the unanswered notification) were let go. */
    assert_true(fake.ncancel > cancelled);
    assert_true(tg_list_empty(&t->srv->channels));
    edge_free(t);
}

/* Keepalive comments on an idle stream; the gateway ends a channel: the stream's last chunk,
 * and the session goes. */
static void sse_keepalive_and_end(void **state)
{
    struct edge *t = edge_new();
    struct peer c;
    struct tg_session *s = sse_open(t, &c, "/side");
    int ka = t->srv->conf->limits.sse_keepalive_ms;
    tg_channels_keepalive(t->srv);
    hh_spin(t->h, 5);
    assert_int_equal(c.got.len, 0); /* not idle long enough */
    t->srv->conf->limits.sse_keepalive_ms = 0;
    tg_channels_keepalive(t->srv);
    PEER_EXPECT(&c, ": keepalive\n\n");
    t->srv->conf->limits.sse_keepalive_ms = ka;
    c.got.len = 0;
    s->inflight = 1; /* busy: only idle channels end first */
    tg_channels_end(t->srv, 1);
    hh_spin(t->h, 5);
    assert_int_equal(c.got.len, 0);
    s->inflight = 0;
    tg_channels_end(t->srv, 1);
    PEER_EXPECT(&c, "0\r\n\r\n");
    assert_int_equal(tg_session_table_count(t->srv->sessions), 0);
    peer_close(&c);
    edge_free(t);
}

/* A client that stops reading: the channel says it is behind once its connection's queue passes
 * limits.output_high_water, and the session hears of the drain when it reads again. */
static void sse_backpressure(void **state)
{
    struct edge *t = edge_new();
    struct peer c;
    struct tg_session *s = sse_open(t, &c, "/side");
    struct tg_channel *ch = (struct tg_channel *)s->channel;
    t->srv->conf->limits.output_high_water = 65536;
    peer_read(&c, 0);
    struct tg_buf big;
    tg_buf_init(&big);
    tg_buf_appends(&big, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"");
    while (big.len < 60000)
        tg_buf_appends(&big, "0123456789abcdef");
    tg_buf_appends(&big, "\"}}");
    int sent = 0;
    assert_int_equal(tg_channel_high(ch), 0);
    while (!tg_channel_high(ch) && sent < 2000) { /* the kernel's buffers fill first */
        tg_channel_send(ch, big.base, big.len);
        sent++;
        hh_spin(t->h, 1);
    }
    assert_int_equal(tg_channel_high(ch), 1);
    assert_int_equal(ch->sink.ops->high(&ch->sink), 1);
    /* The client reads again: the queue drains. */
    peer_read(&c, 1);
    HH_RUN_UNTIL(t->h, !tg_channel_high(ch) && c.got.len >= (size_t)sent * big.len);
    tg_buf_dispose(&big);
    peer_close(&c);
    HH_RUN_UNTIL(t->h, tg_session_table_count(t->srv->sessions) == 0);
    edge_free(t);
}

/* ---- WebSocket ------------------------------------------------------------------------------ */

#define WS_KEY "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
#define WS_UP "Upgrade: websocket\r\nConnection: Upgrade\r\n"
/* A refused handshake: the request says close as well, so that the answer ends with EOF. */
#define WS_UP_CLOSE "Upgrade: websocket\r\nConnection: close, Upgrade\r\n"
#define ws_refused(t, hdr) edge_send((t), "GET", "/ws", (hdr), NULL, 1)

static void ws_handshake_refusals(void **state)
{
    struct edge *t = edge_new();
    edge_request(t, "GET", "/ws", NULL, NULL);
    {
        struct tg_buf body;
        tg_buf_init(&body);
        tg_rpc_error(&body, NULL, 0, TG_RPC_INVALID_REQUEST, "Upgrade Required: /ws is a WebSocket endpoint", NULL);
        tg_buf_append(&body, "", 1);
        EDGE_EXPECT_JSON(t, 426, "Upgrade: websocket\r\n", body.base);
        tg_buf_dispose(&body);
    }
    ws_refused(t, WS_UP_CLOSE "Sec-WebSocket-Version: 12\r\n" WS_KEY "Sec-WebSocket-Protocol: mcp\r\n");
    {
        struct tg_buf body;
        tg_buf_init(&body);
        tg_rpc_error(&body, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: Sec-WebSocket-Version 13 is required", NULL);
        tg_buf_append(&body, "", 1);
        EDGE_EXPECT_JSON(t, 400, "Sec-WebSocket-Version: 13\r\n", body.base);
        tg_buf_dispose(&body);
    }
    ws_refused(t, WS_UP_CLOSE "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: short\r\nSec-WebSocket-Protocol: mcp\r\n");
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST, "Bad Request: invalid Sec-WebSocket-Key");
    static const char *const protos[] = {"", "Sec-WebSocket-Protocol: chat\r\n", "Sec-WebSocket-Protocol: mcpx\r\n"};
    for (size_t i = 0; i < sizeof(protos) / sizeof(protos[0]); i++) {
        char hdr[256];
        snprintf(hdr, sizeof(hdr), WS_UP_CLOSE "Sec-WebSocket-Version: 13\r\n" WS_KEY "%s", protos[i]);
        ws_refused(t, hdr);
        EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST, "Bad Request: the WebSocket subprotocol \"mcp\" is required");
    }
    assert_int_equal(tg_session_table_count(t->srv->sessions), 0);
    edge_free(t);
}

static const uint8_t mask_key[4] = {0x11, 0x22, 0x33, 0x44};

/* A masked client frame (text: opcode 1, close: 8). */
static void ws_send(struct edge *t, int opcode, const char *p, size_t n)
{
    uint8_t f[4096];
    size_t o = 0;
    assert_true(n + 8 <= sizeof(f));
    f[o++] = (uint8_t)(0x80 | opcode);
    if (n < 126) {
        f[o++] = (uint8_t)(0x80 | n);
    } else {
        f[o++] = 0x80 | 126;
        f[o++] = (uint8_t)(n >> 8);
        f[o++] = (uint8_t)(n & 0xff);
    }
    memcpy(f + o, mask_key, 4);
    o += 4;
    for (size_t i = 0; i < n; i++)
        f[o++] = (uint8_t)p[i] ^ mask_key[i % 4];
    hh_send(t->h, f, o);
}

/* The server's next frame must be a text frame holding exactly want (servers do not mask). */
static void ws_expect_text(struct edge *t, const char *want, const char *file, int line)
{
    size_t n = strlen(want);
    uint8_t head[4];
    size_t hl = 0;
    head[hl++] = 0x81;
    if (n < 126) {
        head[hl++] = (uint8_t)n;
    } else {
        head[hl++] = 126;
        head[hl++] = (uint8_t)(n >> 8);
        head[hl++] = (uint8_t)(n & 0xff);
    }
    hh_expect_bytes(t->h, head, hl, file, line);
    hh_expect_bytes(t->h, want, n, file, line);
}
#define WS_EXPECT_TEXT(t, want) ws_expect_text((t), (want), __FILE__, __LINE__)

static struct tg_session *ws_open(struct edge *t, const char *target)
{
    edge_send(t, "GET", target,
              WS_UP "Sec-WebSocket-Version: 13\r\n" WS_KEY "Sec-WebSocket-Protocol: chat, mcp\r\n", NULL, 1);
    HH_EXPECT(t->h, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\nSec-WebSocket-Protocol: mcp\r\n\r\n");
    assert_int_equal(tg_session_table_count(t->srv->sessions), 1);
    struct tg_session *s = NULL;
    for (struct tg_list *l = t->srv->channels.next; l != &t->srv->channels; l = l->next)
        s = tg_container_of(l, struct tg_channel, node)->sess;
    assert_non_null(s);
    return s;
}

static void ws_messages(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = ws_open(t, "/ws");
    size_t n, w;
    tg_channels_count(t->srv, &n, &w);
    assert_int_equal(w, 1);
    assert_int_equal(n, 0);
    t->srv->next_gid = 69;
    ws_send(t, 1, INIT("2025-06-18"), strlen(INIT("2025-06-18")));
    HH_RUN_UNTIL(t->h, fake.nsend == 1);
    assert_string_equal(fake.last_body.base, "{\"jsonrpc\":\"2.0\",\"id\":70,\"method\":\"initialize\",\"params\":"
                                             "{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},\"clientInfo\":"
                                             "{\"name\":\"t\",\"version\":\"1\"}}}");
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":70,\"result\":{\"protocolVersion\":\"2025-06-18\"}}");
    WS_EXPECT_TEXT(t, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-06-18\"}}");
    assert_int_equal(s->initialized, 1);
    ws_send(t, 1, "{", 1);
    WS_EXPECT_TEXT(t, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":"
                      "\"Parse error: expected object key\"}}");
    /* A batch on a 2025-06-18 session: refused as one error. */
    ws_send(t, 1, "[" CALL("2", "echo") "]", strlen("[" CALL("2", "echo") "]"));
    WS_EXPECT_TEXT(t, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Invalid Request: "
                      "batches are only accepted for protocol 2025-03-26, non-empty and within "
                      "limits.inflight_per_session\"}}");
    /* A tool call: an answer of more than 125 bytes takes the 16-bit length form. */
    ws_send(t, 1, CALL("\"c\"", "echo"), strlen(CALL("\"c\"", "echo")));
    HH_RUN_UNTIL(t->h, fake.nsend == 2);
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":71,\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
                           "\"0123456789012345678901234567890123456789012345678901234567890123456789\"}]}}");
    WS_EXPECT_TEXT(t, "{\"jsonrpc\":\"2.0\",\"id\":\"c\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":"
                      "\"0123456789012345678901234567890123456789012345678901234567890123456789\"}]}}");
    /* The client closes: the close is answered and the session ends. */
    ws_send(t, 8, "\x03\xe8", 2);
    HH_EXPECT_N(t->h, "\x88\x02\x03\xe8", 4);
    HH_RUN_UNTIL(t->h, tg_session_table_count(t->srv->sessions) == 0);
    assert_true(tg_list_empty(&t->srv->channels));
    edge_free(t);
}

/* The gateway ends a WebSocket channel with a close frame (the session ends when the close
 * handshake does). */
static void ws_end(void **state)
{
    struct edge *t = edge_new();
    ws_open(t, "/side/ws");
    tg_channels_end(t->srv, 0);
    const char reason[] = "gateway shutting down";
    uint8_t want[4 + sizeof(reason) - 1] = {0x88, (uint8_t)(2 + sizeof(reason) - 1), 0x03, 0xe9};
    memcpy(want + 4, reason, sizeof(reason) - 1);
    HH_EXPECT_N(t->h, want, sizeof(want));
    assert_int_equal(tg_session_table_count(t->srv->sessions), 1);
    ws_send(t, 8, "\x03\xe9", 2);
    HH_RUN_UNTIL(t->h, tg_session_table_count(t->srv->sessions) == 0);
    edge_free(t);
}

/* A WebSocket client that stops reading: the channel is behind once the frames queued for it
 * pass limits.output_high_water (tg_ws_pending), and catches up when it reads again. */
static void ws_backpressure(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = ws_open(t, "/side/ws");
    struct tg_channel *ch = (struct tg_channel *)s->channel;
    t->srv->conf->limits.output_high_water = 65536;
    uv_poll_stop(&t->h->poll);
    char big[30000];
    memset(big, 'x', sizeof(big));
    int sent = 0;
    assert_int_equal(tg_channel_high(ch), 0);
    while (!tg_channel_high(ch) && sent < 2000) {
        tg_channel_send(ch, big, sizeof(big));
        sent++;
        hh_spin(t->h, 1);
    }
    assert_int_equal(tg_channel_high(ch), 1);
    assert_true(tg_ws_pending(ch->ws) > 65536);
    uv_poll_start(&t->h->poll, UV_READABLE, hh_on_readable);
    HH_RUN_UNTIL(t->h, !tg_channel_high(ch) && t->h->got.len >= (size_t)sent * (sizeof(big) + 4));
    assert_int_equal(t->h->got.len, (size_t)sent * (sizeof(big) + 4)); /* 0x81, 126, 2 length bytes */
    edge_free(t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(query_param),
        cmocka_unit_test(sse_open_refusals),
        cmocka_unit_test(sse_messages_refusals),
        cmocka_unit_test(sse_messages_answered_on_stream),
        cmocka_unit_test(sse_message_after_its_credential_ended),
        cmocka_unit_test(sse_forwarded),
        cmocka_unit_test(sse_keepalive_and_end),
        cmocka_unit_test(sse_backpressure),
        cmocka_unit_test(ws_handshake_refusals),
        cmocka_unit_test(ws_messages),
        cmocka_unit_test(ws_end),
        cmocka_unit_test(ws_backpressure),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
