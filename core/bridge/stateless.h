/* The bridge between the eras: stateless (2026-07-28) requests served by upstream sessions.
 *
 * A 2026 client has no session, but a 2025 upstream wants one: the gateway keeps one upstream
 * session per (grant, upstream), made on the grant's first stateless request. For an upstream
 * whose initialize is forwarded, the gateway sends its own initialize and
 * notifications/initialized, and the requests that arrive meanwhile wait (counted against
 * limits.inflight_per_session) until the upstream session is ready, then pass the policy gate
 * in the order they came. server/discover is answered with what the upstream's initialize
 * declared. Nothing waits inside a callback: the waiters run from the loop
 * (tg_bridge_run_pending). */
#ifndef TG_MCP_BRIDGE_H
#define TG_MCP_BRIDGE_H

#include "core/call/exchange.h"

struct tg_msg;
struct tg_server;

/* The grant's stateless session on x's upstream: made on the first such request, made again
 * once it expired or ended. 0 (x->sess set), or the HTTP status of the refusal (503 draining,
 * 429 the grant's session cap). */
int tg_bridge_session(struct tg_exchange *x);
/* Serve stateless request m (x->sess from tg_bridge_session) through sk: at once when the
 * upstream session is ready, else once it is. Takes the sink, and m's contents (m is left
 * empty: disposing it is a no-op). */
void tg_bridge_dispatch(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m);
/* Run the waiters whose upstream session became ready or failed (the loop's flush). */
void tg_bridge_run_pending(struct tg_server *srv);
/* An upstream's probe ended: the requests waiting for its era go on (from the loop). */
void tg_bridge_wake(struct tg_server *srv);
/* 1 while bridges wait for the next round. */
int tg_bridge_pending(struct tg_server *srv);
/* Shutdown: waiters are answered -32004, the stateless sessions' references dropped. */
void tg_bridge_dispose(struct tg_server *srv);

#endif
