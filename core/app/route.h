/* The route table (core/app/route.c): which applet or client transport answers a request on a
 * client listener, after the Origin check and authentication; and the entry points the server
 * drives once per second and at shutdown.
 *
 * Paths: /healthz, /readyz, /.well-known/oauth-protected-resource[/P], and /ENDPOINT (the
 * default upstream) or /NAME/ENDPOINT with ENDPOINT one of mcp (Streamable HTTP), sse and
 * messages (legacy HTTP+SSE), ws (WebSocket). */
#ifndef TG_ROUTER_H
#define TG_ROUTER_H

#include <stddef.h>

#include "core/base/buf.h"

struct tg_conn;
struct tg_conf;
struct tg_listener_conf;
struct tg_server;
struct tg_session;

enum tg_endpoint { TG_EP_NONE = -1, TG_EP_MCP, TG_EP_SSE, TG_EP_MESSAGES, TG_EP_WS };

/* The endpoint and upstream a path names: the endpoint (TG_EP_NONE if the path names none),
 * and *upstream the index of its upstream (-1 if unknown or no default). */
enum tg_endpoint tg_route_match(const struct tg_conf *conf, struct tg_slice path, int *upstream);
/* 1 if a request with this Origin header (ptr NULL: none) may use the listener. */
int tg_route_origin_allowed(const struct tg_listener_conf *lc, struct tg_slice origin);

void tg_route_handle(struct tg_server *srv, struct tg_conn *c);
/* 1 if some upstream was reachable lately. */
int tg_route_ready(struct tg_server *srv);
/* Answer /readyz: 200, or 503 with the reason when an issuer's keys are not fetched yet. */
void tg_route_readyz(struct tg_server *srv, struct tg_conn *c);
/* Periodic (every second): expire approvals, idle sessions, stale counters. */
void tg_route_tick(struct tg_server *srv, int sessions_too);
/* Release the calls closed during this loop iteration (the server calls it with no handler
 * on the stack). */
int tg_route_run_pending(struct tg_server *srv); /* 1: more waits for the next round */
/* End every GET stream, and every channel with no call in flight (drain). */
void tg_route_end_streams(struct tg_server *srv);
/* Every call still running gets its error answer now (the drain's deadline). */
void tg_route_end_calls(struct tg_server *srv);
/* Answer what still waits and drop every replay buffer (shutdown). */
void tg_route_free_streams(struct tg_server *srv);
/* The last of the request path's memory (caches), once the loop has stopped. */
void tg_route_dispose(struct tg_server *srv);

#endif
