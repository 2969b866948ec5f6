/* A client transport that carries every message of one session on one long-lived stream:
 * legacy HTTP+SSE (transports/legacy_sse.c: replies as "message" events) or WebSocket
 * (transports/ws_channel.c: one text frame each).
 *
 * Owner: refcounted. The client connection holds one reference until it goes; every message
 * in flight (a batch) and the session's stream call hold one each; the last unref frees it.
 * The channel is the session's long-lived sink (s->channel). */
#ifndef TG_CHANNEL_H
#define TG_CHANNEL_H

#include <stdint.h>

#include "core/base/buf.h"
#include "core/call/exchange.h"

struct tg_conn;
struct tg_server;
struct tg_session;
struct tg_ws;
struct tg_auth_cred;
struct tg_cred_watch;

enum channel_kind { CH_SSE, CH_WS };

/* Owner: refcounted (see the top of this file). tg_channel_new() gives the client connection its
 * reference, and the last tg_channel_unref() frees the channel and its tg_ws; s->channel only
 * points at it. */
struct tg_channel {
    struct tg_sink sink;     /* first: the session's stream call and server messages use it */
    struct tg_session *sess; /* reference (its srv is the server) */
    struct tg_conn *conn;    /* NULL once the client has gone */
    struct tg_ws *ws;        /* CH_WS: owned, freed with the channel */
    int refcnt;
    uint8_t kind;            /* enum channel_kind (one byte: this is per idle session) */
    uint8_t open;
    uint64_t last_write_ms;
    struct tg_list node;     /* srv->channels */
    struct tg_cred_watch *watch; /* owned: the credential that opened it (ends it), or NULL */
    char *scopes;                 /* owned: the opening credential's scopes, or NULL (none) */
    char *resource_metadata;      /* owned: the route's RFC 9728 metadata URL, or NULL */
};

/* A channel for session s on connection c (the connection's reference), authenticated by cred
 * (copied; NULL = never re-checked). It ends with its credential (transports/cred_watch.h): a
 * reload that no longer takes it, a JWT's exp (WebSocket close 1008, a legacy SSE stream ends). */
struct tg_channel *tg_channel_new(struct tg_server *srv, struct tg_session *s, enum channel_kind kind,
                                  struct tg_conn *c, const struct tg_auth_cred *cred);
/* Keep what the opening request x says the channel's messages may do (its scopes) and where
 * its route's metadata is: a WebSocket's frames carry no credential of their own. */
void tg_channel_keep_scopes(struct tg_channel *ch, const struct tg_exchange *x);
struct tg_channel *tg_channel_ref(struct tg_channel *ch);
void tg_channel_unref(struct tg_channel *ch);
/* One JSON-RPC message to the client. */
void tg_channel_send(struct tg_channel *ch, const char *p, size_t n);
/* 1 while the client's queued output is over limits.output_high_water. */
int tg_channel_high(const struct tg_channel *ch);
/* The client went away: the session ends with it (upstream session too). */
void tg_channel_gone(struct tg_channel *ch);
/* The gateway ends the channel (shutdown, upstream gone): the client's side closes, then the session. */
void tg_channel_end(struct tg_channel *ch, uint16_t ws_code, const char *why);
/* One message (or array) from the client. Returns the HTTP status for a POST /messages: 401 when
 * the credential that opened the channel ended (the message is refused, never forwarded, and the
 * channel ends). via: the request that carried it (a legacy SSE POST /messages: its credential's
 * scopes count), or NULL (a WebSocket frame: the channel's). */
int tg_channel_message(struct tg_channel *ch, const struct tg_exchange *via, const char *body, size_t blen);
/* A new session for a channel client (503/429 answered on c when refused: NULL). */
struct tg_session *tg_channel_session_new(struct tg_exchange *x, struct tg_conn *c);
void tg_channel_on_conn_abort(struct tg_conn *c, void *ex);
void tg_channel_on_drain(struct tg_conn *c, void *ex);
/* Keepalive comments on idle legacy SSE streams (the tick). */
void tg_channels_keepalive(struct tg_server *srv);
/* Shutdown: every channel's client is told the gateway is going away (idle_only: only those
 * whose session has no call in flight, so a drain lets their answers through first). */
void tg_channels_end(struct tg_server *srv, int idle_only);
/* The process's framing buffer goes (after the loop stopped). */
void tg_channels_dispose(void);
void tg_channels_count(struct tg_server *srv, size_t *sse, size_t *ws);

#endif
