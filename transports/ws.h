/* WebSocket (RFC 6455) on an upgraded client connection, through wslay's event API.
 *
 * The HTTP handshake is tg_ws_accept_key() + tg_http_upgrade(); then
 * tg_ws_start() takes the connection over: bytes read are handed to wslay
 * through a recv callback over the connection's input buffer (returning
 * WSLAY_ERR_WOULDBLOCK when it runs dry, as h2o does on its loop), and frames
 * to send go out through the connection's write path. Each complete text
 * message is delivered to on_message; a binary message closes with 1003, a
 * message over max_msg with 1009. Pings are answered by wslay; the gateway
 * pings an idle peer every ping_ms and closes one that stopped answering.
 *
 * Ownership: the tg_ws belongs to the connection's exchange (its channel,
 * transports/channel.c) and is freed with tg_ws_free() after on_closed, which runs once. */
#ifndef TG_WS_H
#define TG_WS_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"

struct tg_conn;
struct tg_ws;

typedef void (*tg_ws_message_cb)(void *ud, const char *p, size_t n);
typedef void (*tg_ws_closed_cb)(void *ud);

/* Sec-WebSocket-Accept for a Sec-WebSocket-Key (out: 29 bytes with NUL). TG_EINVAL for a bad key. */
int tg_ws_accept_key(struct tg_slice key, char out[32]);

struct tg_ws *tg_ws_start(struct tg_conn *c, size_t max_msg, uint64_t ping_ms, tg_ws_message_cb on_message,
                          tg_ws_closed_cb on_closed, void *ud);
void tg_ws_send_text(struct tg_ws *ws, const char *p, size_t n);
/* Start the closing handshake (then the connection closes). */
void tg_ws_close(struct tg_ws *ws, uint16_t code, const char *reason);
void tg_ws_free(struct tg_ws *ws);
/* Bytes queued to the peer but not yet written (for backpressure). */
size_t tg_ws_pending(const struct tg_ws *ws);

#endif
