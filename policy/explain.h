/* Explaining a policy decision: what `tollgate policy explain` and `tollgate policy test` print.
 *
 * Pure, like the rest of policy/: no I/O, the clock and the counter store are parameters. The
 * decision itself is always tg_policy_decide_call()'s (this module never decides on its own);
 * what it adds is where in the policy file the decision came from, which condition of the
 * deciding rule did not hold, and the counters a call of the tool takes or reads. */
#ifndef TG_POLICY_EXPLAIN_H
#define TG_POLICY_EXPLAIN_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "core/base/buf.h"
#include "policy/policy.h"

/* One explained tools/call. Value type in caller storage (it embeds a struct tg_decision, a few
 * KiB), filled by tg_policy_explain_call(). */
struct tg_policy_explain {
    struct tg_decision d; /* the decision, exactly as tg_policy_decide_call() made it */
    int hidden;           /* tools/list would not show the tool to callers under this policy */
    char where[320];      /* what decided, as a path in the file: "tools.deploy.rules[0]", "tools.x.limits[1]",
                           * "tools.x.action", "hide", "default" (default allow or deny), "tools.x" or "tools.*"
                           * (allowed by an entry whose rules all held) */
    int cond;             /* the condition of that rule that did not hold (conditions[cond]), or -1 */
    char cond_text[480];  /* that condition and what the call had: "args.env not_in [\"prod\"] (the call has \"prod\")" */
};

/* Decide a tools/call with tg_policy_decide_call() on store c (so it reserves there: give it a
 * scratch store to leave real counters alone) and explain it into e. args may be NULL. */
void tg_policy_explain_call(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who,
                            const char *tool, const cJSON *args, int64_t now_ms, struct tg_policy_explain *e);

/* Append one line per counter a call of tool takes or reads (the tool's own entry, then "*"),
 * each "  NAME: KIND, scope SCOPE, ... (PATH)\n" with capacity and refill for a token bucket,
 * window, increment and limit for a fixed window. Appends nothing when there is none. */
void tg_policy_explain_counters(const struct tg_policy *p, const char *tool, struct tg_buf *out);

/* Remember an earlier call of tool (args may be NULL) at at_ms in store c as the gateway would
 * have, had the policy allowed it: so explain and test can predict a decision that depends on
 * history (`--after`, a case's "history"). Nothing when the policy does not record. */
void tg_policy_history_add_call(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who,
                                const char *tool, const cJSON *args, int64_t at_ms);

/* Earlier calls given as data (`policy explain --after`, a test case's "history"), remembered
 * oldest first as tg_policy_history_add_call() does, each at now_ms - ago. list is a list whose
 * items are "TOOL" or "TOOL:AGO" strings, or maps {tool | resource | prompt: NAME, args: {...},
 * ago: AGO}; AGO is "30s", "5m", "1h", "1d" or a number of seconds (0 to 1 day; default 1 s).
 * With c NULL, only checked. 0, or -1 with why (n bytes) naming the item at fault. */
int tg_policy_history_add_list(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who,
                               const cJSON *list, int64_t now_ms, char *why, size_t n);

/* "allow", "deny", "limited" or "approve". */
const char *tg_policy_verdict_str(enum tg_verdict v);

#endif
