/* Methods no standard or policy allows (core/gate/nonstandard.c), for core/gate/dispatch.c. */
#ifndef TG_GATE_NONSTANDARD_H
#define TG_GATE_NONSTANDARD_H

struct tg_exchange;
struct tg_sink;
struct tg_msg;

/* Refuse m (a request or notification of a method neither MCP nor the policy names): counted,
 * logged and audited; a notification gets 202, a 2026-07-28 request 404/-32601, a 2025 request
 * -32001 saying a policy must allow it by name. Releases sk. subject: the caller, for the audit. */
void tg_gate_refuse_nonstandard(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const char *subject);

#endif
