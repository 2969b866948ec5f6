/* The gate every client message passes (core/gate/dispatch.c): standard methods only, the policy's
 * decision (allow, deny, limit, approve), then a call to the upstream or an answer made here.
 *
 * Transports call these with a context and a sink (core/call/exchange.h). tg_dispatch_message()
 * takes over the sink reference: the answer comes through it (perhaps before it returns, as
 * for a refusal) and it is released exactly once. */
#ifndef TG_DISPATCH_H
#define TG_DISPATCH_H

#include "core/call/exchange.h"
#include "core/call/sink.h"
#include "core/base/json.h"

struct tg_msg;
struct tg_server;
struct tg_session;

/* One decoded message of a live session. */
void tg_dispatch_message(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m);
/* Open the session's stream of server messages on sk (a GET stream, or a channel's). Returns
 * 0, or -1 when this upstream needs none for a channel (its messages come on the session's
 * link); sk is then not taken. */
int tg_dispatch_listen(struct tg_exchange *x, struct tg_sink *sk, int for_channel);
/* A new session for x's grant and route: 0 (x->sess set), or the HTTP status of the refusal:
 * 503 (draining) or 429 (the grant's session cap; metrics counted). */
int tg_dispatch_session_open(struct tg_exchange *x);
/* A 2025 session belongs to the subject that made it (x->who at tg_dispatch_session_open): 1 if
 * x speaks for that subject, 0 if another user of the grant (or another issuer) does. */
int tg_dispatch_session_owner(const struct tg_exchange *x, const struct tg_session *s);
/* Who inside the grant x speaks for: x->who's subject; else (a channel's message) the subject
 * that opened its session; else the grant's name. */
const char *tg_dispatch_subject(const struct tg_exchange *x);
/* The issuer of that subject's JWT, or "" (none: a static token, a certificate, the grant). */
const char *tg_dispatch_issuer(const struct tg_exchange *x);
/* A session was used (a cluster renews its shared record), or is ready (initialize answered
 * by the gateway itself: a cluster shares it). Nothing without a cluster. */
void tg_dispatch_session_used(struct tg_server *srv, struct tg_session *s);
void tg_dispatch_session_ready(struct tg_server *srv, struct tg_session *s);


/* The session ends: TG_END_DELETE for a client's DELETE, TG_END_CLIENT_GONE when a channel's
 * client left (parked calls are withdrawn too). The upstream session is ended, the GET stream
 * and calls in flight are let go (audited as client_gone), and the session is removed. */
enum tg_end_how { TG_END_DELETE, TG_END_CLIENT_GONE, TG_END_ELSEWHERE /* a cluster member's client deleted it */ };
void tg_dispatch_end_session(struct tg_server *srv, struct tg_session *s, enum tg_end_how how);
/* A reload removed s's upstream: calls waiting on its link fail, its channel is told (1012), and
 * the session ends (core/gate/session_end.c, with tg_dispatch_end_session). */
void tg_dispatch_upstream_removed(struct tg_server *srv, struct tg_session *s);
/* The session's GET stream call, if any: its sink (for a client taking it over), else NULL. */
struct tg_sink *tg_dispatch_get_stream_sink(struct tg_session *s);
/* tg_mcp_check_param_headers() (core/mcp/era.h) of a 2026 tools/call of tool against the schema
 * its client saw: the upstream's, without the arguments the grant's policy binds (core/gate/bind.c). */
struct tg_mcp_header;
struct tg_mcp_refusal;
int tg_gate_bind_check_params(const struct tg_exchange *x, const struct tg_mcp_header *h, size_t nh,
                              const cJSON *schema, const char *tool, const cJSON *args, struct tg_mcp_refusal *why);

#endif
