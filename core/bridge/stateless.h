/* The bridge between the eras: stateless (2026-07-28) requests served by upstream sessions.
 *
 * A 2026 client has no session, but a 2025 upstream wants one: the gateway keeps one upstream
 * session per (grant, upstream), made on the grant's first stateless request. For an upstream
 * whose initialize is forwarded, the gateway sends its own initialize and
 * notifications/initialized, and the requests that arrive meanwhile wait (counted against
 * limits.inflight_per_session) until the upstream session is ready, then pass the policy gate
 * in the order they came. server/discover is answered with what the upstream's initialize
 * declared. Nothing waits inside a callback: the waiters run from the loop
 * (tg_bridge_run_pending). The gateway's own initialize is a call the bridge makes itself
 * (tg_call_new), not a trip through the gate. */
#ifndef TG_BRIDGE_STATELESS_H
#define TG_BRIDGE_STATELESS_H

#include "core/call/exchange.h"

struct tg_msg;
struct tg_server;

/* The gate asks (core/gate/dispatch.c: tg_stateless_request); the bridge admits or parks.
 *
 * The grant's stateless session on x's upstream, if one is live: 1 (x->sess set), else 0. */
int tg_bridge_find(struct tg_exchange *x);
/* x->sess, a session the gate just opened for x's grant and upstream, becomes that grant's
 * stateless session (a table slot whose session ended is reused). */
void tg_bridge_adopt(struct tg_exchange *x);
/* The gate's continuation for a request that waited for its upstream session: why NULL, the
 * gate decides m now (x->up_modern and x->up_caps say what the upstream session speaks); else
 * the gate refuses m with why (-32004). Either way it takes the sink; m is disposed after. */
typedef void (*tg_bridge_go_cb)(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const char *why);
enum tg_bridge_admission {
    TG_BRIDGE_READY,    /* the gate decides m now (x->up_modern and x->up_caps set) */
    TG_BRIDGE_ANSWERED, /* the bridge answered m (server/discover) and let the sink go */
    TG_BRIDGE_PARKED,   /* m waits for the upstream session; go runs from the loop (the sink and
                         * m's contents are taken: m is left empty, disposing it is a no-op) */
    TG_BRIDGE_FULL,     /* too many wait (limits.inflight_per_session; counted): the gate refuses */
};
/* Stateless request m on x->sess (from tg_bridge_find or _adopt), through sk. */
enum tg_bridge_admission tg_bridge_admit(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m,
                                         tg_bridge_go_cb go);
/* Run the waiters whose upstream session became ready or failed (the loop's flush). */
void tg_bridge_run_pending(struct tg_server *srv);
/* An upstream's probe ended: the requests waiting for its era go on (from the loop). */
void tg_bridge_wake(struct tg_server *srv);
/* 1 while bridges wait for the next round. */
int tg_bridge_pending(struct tg_server *srv);
/* Shutdown: waiters are answered -32004, the stateless sessions' references dropped. */
void tg_bridge_dispose(struct tg_server *srv);

#endif
