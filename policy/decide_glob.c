/* Policy decisions for resources/read and prompts/get: a policy's "resources" and "prompts"
 * glob lists (deny first, then allow, then the list's default). */
#include "policy/policy.h"

#include <stdio.h>
#include <string.h>

#include "policy/policy_int.h"

static void deny(struct tg_decision *d, const char *rule)
{
    d->verdict = TG_VERDICT_DENY;
    snprintf(d->rule, sizeof(d->rule), "%s", rule);
}

/* '*' matches any run of characters; everything else literally. */
static int glob_match(const char *pat, const char *s)
{
    const char *star = NULL, *ss = NULL;
    while (*s) {
        if (*pat == '*') {
            star = pat++;
            ss = s;
        } else if (*pat == *s) {
            pat++;
            s++;
        } else if (star) {
            pat = star + 1;
            s = ++ss;
        } else {
            return 0;
        }
    }
    while (*pat == '*')
        pat++;
    return *pat == '\0';
}

static void decide_glob(const struct globset *g, const char *what, const char *kind, struct tg_decision *d)
{
    memset(d, 0, sizeof(*d));
    d->verdict = TG_VERDICT_ALLOW;
    if (!g->present)
        return;
    for (int i = 0; i < g->ndeny; i++)
        if (glob_match(g->deny[i], what)) {
            deny(d, g->deny[i]);
            if (g->reason)
                snprintf(d->message, sizeof(d->message), "%s", g->reason);
            else
                snprintf(d->message, sizeof(d->message), "%s \"%s\" is denied by policy", kind, what);
            return;
        }
    for (int i = 0; i < g->nallow; i++)
        if (glob_match(g->allow[i], what))
            return;
    if (g->default_deny) {
        deny(d, "(default deny)");
        if (g->reason)
            snprintf(d->message, sizeof(d->message), "%s", g->reason);
        else
            snprintf(d->message, sizeof(d->message), "%s \"%s\" is not permitted by policy", kind, what);
    }
}

void tg_policy_decide_resource(const struct tg_policy *p, const char *uri, struct tg_decision *d)
{
    decide_glob(&p->resources, uri, "Resource", d);
}

void tg_policy_decide_prompt(const struct tg_policy *p, const char *name, struct tg_decision *d)
{
    decide_glob(&p->prompts, name, "Prompt", d);
}
