/* Arguments the model cannot choose (policy/bind.h), at the gate: a tools/call's arguments bound
 * to its caller before anything else reads them, so that the policy decides, the audit logs, an
 * approver sees and the upstream receives the final arguments, on every transport and era. */
#ifndef TG_GATE_BIND_H
#define TG_GATE_BIND_H

struct tg_exchange;
struct tg_msg;
struct tg_policy;
struct tg_decision;
struct tg_session;

/* Bind tools/call m of subject (tg_dispatch_subject) under pol (a request whose params are not a tools/call's is left for the gate
 * to refuse). NULL: it may go on (its tree rewritten when something was bound, and a 2026
 * request's Mcp-Param-* lines rebuilt from it); else the deny to answer it with (rule "set" or
 * "forbid"; tg_call_decision_new()'d: the caller owns it). */
struct tg_decision *tg_gate_bind(struct tg_exchange *x, const struct tg_policy *pol, struct tg_msg *m,
                                 const char *subject);
/* A 2025 session made by x: keep the claims of its maker's JWT that pol binds arguments to (its
 * channel's requests carry no token). */
void tg_gate_bind_session(const struct tg_exchange *x, const struct tg_policy *pol, struct tg_session *s);

#endif
