/* The one place that wires a client request through sessions (and, later,
 * policy) to an upstream and back. Transports call tg_router_handle() with a
 * complete HTTP request; the router answers through the transport's respond
 * and stream functions. */
#ifndef TG_ROUTER_H
#define TG_ROUTER_H

#include "core/server.h"
#include "transports/http1.h"

struct tg_session;

void tg_router_handle(struct tg_server *srv, struct tg_conn *c);
void tg_router_admin(struct tg_server *srv, struct tg_conn *c);
/* Periodic (every second): expire approvals, idle sessions, stale counters. */
void tg_router_tick(struct tg_server *srv, int sessions_too);
/* Drop a session now (its upstream went away in a reload). */
void tg_router_drop_session(struct tg_server *srv, struct tg_session *s);
/* Release the calls closed during this loop iteration (the server calls it with no handler
 * on the stack). */
void tg_router_run_pending(struct tg_server *srv);
/* End every GET stream (drain/shutdown). */
void tg_router_end_streams(struct tg_server *srv);
/* Open channel sessions by transport (metrics). */
void tg_router_channel_counts(struct tg_server *srv, size_t *sse, size_t *ws);
/* Drop every replay buffer (shutdown). */
void tg_router_free_streams(struct tg_server *srv);
/* In-flight upstream calls (for draining). */
size_t tg_router_inflight(struct tg_server *srv);

#define TG_PROTO_LATEST "2025-11-25"
int tg_proto_supported(struct tg_slice v);

#endif
