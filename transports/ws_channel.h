/* WebSocket clients: GET /NAME/ws with subprotocol "mcp", one session per connection, one
 * JSON-RPC message per text frame. */
#ifndef TG_WS_CHANNEL_H
#define TG_WS_CHANNEL_H

struct tg_conn;
struct tg_exchange;

void tg_ws_channel_open(struct tg_exchange *x, struct tg_conn *c);

#endif
