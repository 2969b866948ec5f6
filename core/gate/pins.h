/* Pinned tool definitions at the gate (policy/pins.h): a tools/call of a tool whose definition,
 * as the upstream last listed it, is not the pinned one, or that the gateway has not seen
 * listed since it started or since the upstream said its tools changed, is denied before
 * anything is counted (-32001, error.data.rule "pin"). */
#ifndef TG_GATE_PINS_H
#define TG_GATE_PINS_H

struct tg_exchange;
struct tg_policy;
struct tg_decision;

/* Call this only when x->uc->pins is set (a conf without pins pays nothing). 1: refused, with
 * dec filled (DENY, rule "pin", the reason the model reads); 0: the policy decides. */
int tg_gate_pins_refused(const struct tg_exchange *x, const struct tg_policy *pol, const char *tool,
                         struct tg_decision *dec);

#endif
