/* What a request reads besides tools (core/gate/reads.c), for core/gate/dispatch.c: resources,
 * prompts and completions, decided under the session's policy. */
#ifndef TG_GATE_READS_H
#define TG_GATE_READS_H

#include <cjson/cJSON.h>

struct tg_exchange;
struct tg_msg;
struct tg_policy;
struct tg_decision;

/* resources/read, resources/subscribe or resources/unsubscribe m: params.uri in its normal form
 * (policy/uri.h), written so into the request (m is marked edited, so that the upstream reads
 * the URI the policy decides), and decided. 1: *d decided (a URI that cannot be normalised is
 * denied); 0: an unsubscribe, which needs no decision (*uri is its normal form); -1: params.uri
 * is not a string (*bad says so). */
int tg_reads_decide_uri(struct tg_msg *m, cJSON *params, const struct tg_policy *pol, struct tg_decision *d,
                        cJSON **uri, const char **bad);
/* Decide a request that reads something other than a tool: resources/read and subscribe (the
 * URI normalised first; unsubscribe is only normalised), prompts/get, completion/complete. 1:
 * *dec (a tg_call_decision_new) and *what (what it names, borrowed from m) are set; -1: the
 * params are not valid (*bad says why); 0: not decided here, *list is the enum tg_mcp_list of
 * a resources, templates or prompts list to filter, else -1. */
int tg_reads_decide(struct tg_msg *m, cJSON *params, const struct tg_policy *pol, struct tg_decision **dec,
                    const char **what, int *list, const char **bad);

/* An allowed resources/read or prompts/get (what: its URI or name, d: its decision) goes into
 * the history of x's caller, subject (and issuer, "" none) as the gate names them (policy.h
 * tg_policy_record_read), so that history conditions can count it; anything else, or a refused
 * read, is not remembered. */
void tg_reads_record(struct tg_exchange *x, const struct tg_policy *pol, const struct tg_msg *m, const char *what,
                     const struct tg_decision *d, const char *subject, const char *issuer);

#endif
