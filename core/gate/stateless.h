/* Stateless (2026-07-28) requests enter the gate here (core/gate/stateless.c), from the edge
 * (transports/streamable.c); the bridge says whether the grant's upstream session is ready. */
#ifndef TG_GATE_STATELESS_H
#define TG_GATE_STATELESS_H

#include "core/gate/dispatch.h"

/* The grant's stateless session on x's upstream, made on its first such request (the bridge
 * keeps it): 0 (x->sess set), or the HTTP status of the refusal, as tg_dispatch_session_open. */
int tg_stateless_session(struct tg_exchange *x);
/* Stateless request m (x->sess from tg_stateless_session) through sk: decided at once
 * when the bridge admits it, else once its upstream session is ready. Takes the sink, and m's
 * contents if it has to wait (m is left empty: disposing it is a no-op). */
void tg_stateless_request(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m);

#endif
