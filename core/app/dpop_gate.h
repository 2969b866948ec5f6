/* DPoP at the door (core/app/dpop_gate.c): after a request's credential named its principal, the
 * issuer's jwt[].dpop and the request's DPoP proof (policy/auth.h tg_auth_dpop, policy/dpop.h)
 * decide whether it goes on. Every request on a client endpoint passes here: Streamable HTTP, the
 * legacy SSE GET and its /messages posts, and the WebSocket upgrade (whose proof names the http(s)
 * URL of the upgrade request, method GET). */
#ifndef TG_DPOP_GATE_H
#define TG_DPOP_GATE_H

#include "core/base/buf.h"

struct tg_conn;
struct tg_server;
struct tg_principal;

/* 0: the request may go on. 1: it was refused with 401 and
 * WWW-Authenticate: DPoP error="invalid_token" or "invalid_dpop_proof", error_description and algs;
 * nothing of it is forwarded. path: the request's path (no query); authz: the Authorization value. */
int tg_dpop_gate(struct tg_server *srv, struct tg_conn *c, struct tg_slice path, const struct tg_principal *who,
                 struct tg_slice authz);

#endif
