/* The one place that wires a client request through sessions (and, later,
 * policy) to an upstream and back. Transports call tg_router_handle() with a
 * complete HTTP request; the router answers through the transport's respond
 * and stream functions. */
#ifndef TG_ROUTER_H
#define TG_ROUTER_H

#include "core/server.h"
#include "transports/http1.h"

void tg_router_handle(struct tg_server *srv, struct tg_conn *c);
void tg_router_admin(struct tg_server *srv, struct tg_conn *c);
/* Periodic: expire idle sessions. */
void tg_router_sweep(struct tg_server *srv);
/* End every GET stream (drain/shutdown). */
void tg_router_end_streams(struct tg_server *srv);
/* In-flight upstream calls (for draining). */
size_t tg_router_inflight(struct tg_server *srv);

#define TG_PROTO_LATEST "2025-11-25"
int tg_proto_supported(struct tg_slice v);

#endif
