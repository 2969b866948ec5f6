/* Stateless (2026-07-28) requests enter the gate here: the edge (transports/streamable.c) has
 * checked the request's claim; the bridge (core/bridge/stateless.c) says whether the grant's
 * upstream session is ready, and the gate decides. A request that has to wait for that session
 * comes back through one continuation, on_admitted, from the loop. */
#include "core/gate/stateless.h"

#include <stdio.h>

#include "core/bridge/stateless.h"
#include "core/call/gateway.h"
#include "core/wire/msg.h"

int tg_stateless_session(struct tg_exchange *x)
{
    if (tg_bridge_find(x))
        return 0;
    x->era = TG_ERA_2026; /* the session is the grant's, shared by its users: bound to no subject */
    int st = tg_dispatch_session_open(x);
    if (st == 0)
        tg_bridge_adopt(x);
    return st;
}

/* A request the bridge parked: its upstream session is ready (why NULL) or failed. */
static void on_admitted(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const char *why)
{
    if (why != NULL)
        tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_UPSTREAM, why, NULL);
    else
        tg_dispatch_message(x, sk, m);
}

void tg_stateless_request(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m)
{
    switch (tg_bridge_admit(x, sk, m, on_admitted)) {
    case TG_BRIDGE_READY:
        tg_dispatch_message(x, sk, m);
        break;
    case TG_BRIDGE_FULL:
        tg_sink_refuse(sk, 429, m->id_raw, m->id_len, TG_RPC_UPSTREAM,
                           "Too many calls in flight for this grant (limits.inflight_per_session)", NULL);
        break;
    case TG_BRIDGE_ANSWERED:
    case TG_BRIDGE_PARKED:
        break;
    }
}
