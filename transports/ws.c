#include "transports/ws.h"

#include <mbedtls/base64.h>
#include <mbedtls/sha1.h>
#include <stdlib.h>
#include <string.h>
#include <wslay/wslay.h>

#include "core/log.h"
#include "transports/http1.h"

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
};

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
    if (c == NULL || c->in.len == 0) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    size_t n = len < c->in.len ? len : c->in.len;
    memcpy(buf, c->in.base, n);
    tg_buf_consume(&c->in, n);
    return (ssize_t)n;
}

static ssize_t ws_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *ud)
{
    struct tg_ws *ws = ud;
    if (ws->conn == NULL || ws->conn->state >= TG_CONN_CLOSING) {
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
    if (c == NULL)
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

static void on_data(struct tg_conn *c, void *ud)
{
    struct tg_ws *ws = ud;
    if (ws->lingering) {
        c->in.len = 0;
        return;
    }
    ws->in_recv = 1;
    int r = wslay_event_recv(ws->ctx);
    ws->in_recv = 0;
    if (ws->conn == NULL)
        return;
    if (r != 0) {
        tg_conn_close(c, "WebSocket protocol error");
        return;
    }
    pump(ws);
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
    struct wslay_event_msg msg = {WSLAY_PING, (const uint8_t *)"tg", 2};
    wslay_event_queue_msg(ws->ctx, &msg);
    ws->awaiting_pong = 1;
    pump(ws);
    tg_http_upgraded_timer(c, ws->ping_ms);
}

static void on_gone(struct tg_conn *c, void *ud)
{
    struct tg_ws *ws = ud;
    ws->conn = NULL;
    finish(ws);
}

struct tg_ws *tg_ws_start(struct tg_conn *c, size_t max_msg, uint64_t ping_ms, tg_ws_message_cb on_message,
                          tg_ws_closed_cb on_closed, void *ud)
{
    struct tg_ws *ws = tg_xcalloc(1, sizeof(*ws));
    ws->conn = c;
    ws->on_message = on_message;
    ws->on_closed = on_closed;
    ws->ud = ud;
    ws->ping_ms = ping_ms;
    static const struct wslay_event_callbacks cbs = {ws_recv, ws_send, NULL, NULL, NULL, NULL, ws_on_msg};
    if (wslay_event_context_server_init(&ws->ctx, &cbs, ws) != 0)
        abort();
    wslay_event_config_set_max_recv_msg_length(ws->ctx, max_msg);
    tg_http_take_over(c, on_data, on_tick, on_gone, ws);
    if (ping_ms)
        tg_http_upgraded_timer(c, ping_ms);
    if (c->in.len > 0)
        on_data(c, ws); /* bytes that came with the handshake */
    return ws;
}

void tg_ws_send_text(struct tg_ws *ws, const char *p, size_t n)
{
    if (ws->conn == NULL || ws->closed)
        return;
    struct wslay_event_msg msg = {WSLAY_TEXT_FRAME, (const uint8_t *)p, n};
    if (wslay_event_queue_msg(ws->ctx, &msg) != 0)
        return;
    if (!ws->in_recv)
        pump(ws);
}

void tg_ws_close(struct tg_ws *ws, uint16_t code, const char *reason)
{
    if (ws->conn == NULL)
        return;
    wslay_event_queue_close(ws->ctx, code, (const uint8_t *)reason, reason ? strlen(reason) : 0);
    if (!ws->in_recv)
        pump(ws);
}

size_t tg_ws_pending(const struct tg_ws *ws)
{
    return (ws->conn ? ws->conn->out_pending : 0) + wslay_event_get_queued_msg_length(ws->ctx);
}

void tg_ws_free(struct tg_ws *ws)
{
    if (ws == NULL)
        return;
    if (ws->conn != NULL)
        tg_http_take_over(ws->conn, NULL, NULL, NULL, NULL);
    wslay_event_context_free(ws->ctx);
    free(ws);
}
