#include "core/router_int.h"


static void on_ws_message(void *ud, const char *p, size_t n);

static void on_ws_closed(void *ud);

static void on_ws_message(void *ud, const char *p, size_t n)
{
    struct tg_channel *ch = ud;
    ch->refcnt++;
    channel_message(ch->srv, ch, p, n);
    channel_unref(ch);
}

static void on_ws_closed(void *ud) { channel_gone(ud); }

/* GET /NAME/ws: WebSocket, subprotocol "mcp", one session per connection. */
void open_ws_channel(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
{
    struct tg_http_req *req = &c->req;
    struct tg_slice up = tg_http_req_header(req, "upgrade");
    struct tg_slice conn = tg_http_req_header(req, "connection");
    struct tg_slice ver = tg_http_req_header(req, "sec-websocket-version");
    struct tg_slice key = tg_http_req_header(req, "sec-websocket-key");
    struct tg_slice proto = tg_http_req_header(req, "sec-websocket-protocol");
    char accept[32];
    if (up.ptr == NULL || !tg_slice_eq_nocase(up, "websocket") || !tg_slice_has_token(conn, "upgrade") ||
        !c->parser.upgrade) {
        respond_rpc(c, 426, "Upgrade: websocket\r\n", NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Upgrade Required: /ws is a WebSocket endpoint", NULL);
        return;
    }
    if (!tg_slice_eq(ver, TG_SLICE("13"))) {
        respond_rpc(c, 400, "Sec-WebSocket-Version: 13\r\n", NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Bad Request: Sec-WebSocket-Version 13 is required", NULL);
        return;
    }
    if (tg_ws_accept_key(key, accept) != 0) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: invalid Sec-WebSocket-Key", NULL);
        return;
    }
    if (proto.ptr == NULL || !tg_slice_has_token(proto, "mcp")) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Bad Request: the WebSocket subprotocol \"mcp\" is required", NULL);
        return;
    }
    struct tg_session *s = new_channel_session(srv, c, rt, g);
    if (s == NULL)
        return;
    struct tg_channel *ch = channel_new(srv, s, CH_WS, c);
    char hdr[200];
    snprintf(hdr, sizeof(hdr),
             "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: mcp\r\n",
             accept);
    tg_http_upgrade(c, hdr);
    c->exchange = ch;
    c->on_drain = on_channel_drain;
    ch->ws = tg_ws_start(c, (size_t)srv->conf->limits.body_bytes, 30000, on_ws_message, on_ws_closed, ch);
    tg_log(TG_LOG_DEBUG, "WebSocket session opened", "session=%s grant=%s", s->id_str, g->name);
}
