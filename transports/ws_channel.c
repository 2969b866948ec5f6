#include "transports/ws_channel.h"

#include <stdio.h>

#include "core/call/exchange.h"
#include "core/base/log.h"
#include "core/wire/msg.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "transports/channel.h"
#include "transports/http1/http1.h"
#include "transports/respond.h"
#include "transports/ws.h"

static void on_ws_message(void *ud, const char *p, size_t n)
{
    struct tg_channel *ch = ud;
    tg_channel_ref(ch);
    tg_channel_message(ch, NULL, p, n);
    tg_channel_unref(ch);
}

static void on_ws_closed(void *ud) { tg_channel_gone(ud); }

void tg_ws_channel_open(struct tg_exchange *x, struct tg_conn *c)
{
    struct tg_http_req *req = c->req;
    struct tg_slice up = tg_http_req_header(req, "upgrade");
    struct tg_slice conn = tg_http_req_header(req, "connection");
    struct tg_slice ver = tg_http_req_header(req, "sec-websocket-version");
    struct tg_slice key = tg_http_req_header(req, "sec-websocket-key");
    struct tg_slice proto = tg_http_req_header(req, "sec-websocket-protocol");
    char accept[32];
    if (up.ptr == NULL || !tg_slice_eq_nocase(up, "websocket") || !tg_slice_has_token(conn, "upgrade") ||
        !c->req->upgrade) {
        tg_respond_rpc(c, 426, "Upgrade: websocket\r\n", NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Upgrade Required: /ws is a WebSocket endpoint", NULL);
        return;
    }
    if (!tg_slice_eq(ver, TG_SLICE("13"))) {
        tg_respond_rpc(c, 400, "Sec-WebSocket-Version: 13\r\n", NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Bad Request: Sec-WebSocket-Version 13 is required", NULL);
        return;
    }
    if (tg_ws_accept_key(key, accept) != 0) {
        tg_respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: invalid Sec-WebSocket-Key",
                            NULL);
        return;
    }
    if (proto.ptr == NULL || !tg_slice_has_token(proto, "mcp")) {
        tg_respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Bad Request: the WebSocket subprotocol \"mcp\" is required", NULL);
        return;
    }
    struct tg_session *s = tg_channel_session_new(x, c);
    if (s == NULL)
        return;
    struct tg_channel *ch = tg_channel_new(x->srv, s, CH_WS, c, x->cred);
    tg_channel_keep_scopes(ch, x);
    char hdr[200];
    snprintf(hdr, sizeof(hdr),
             "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: mcp\r\n",
             accept);
    tg_http_upgrade(c, hdr);
    c->exchange = ch;
    c->on_drain = tg_channel_on_drain;
    ch->ws = tg_ws_start(c, (size_t)x->srv->conf->limits.body_bytes, (uint64_t)x->srv->conf->limits.ws_ping_ms,
                         on_ws_message, on_ws_closed, ch);
    tg_log(TG_LOG_DEBUG, "WebSocket session opened", "session=%s grant=%s", s->id_str, x->grant->name);
}
