/* Policy decisions for resources and prompts, and the scopes a call needs ("scopes" of a tool
 * entry, of "*", of resource and prompt patterns). Resources and prompts: their glob lists
 * (deny first, then allow, then the group's default, else the policy's). Without a group, the
 * policy's default decides: a deny-by-default policy shows and reads nothing it does not name.
 * Resource URIs are decided in their normal form (policy/uri.h); one that cannot be normalised
 * is denied. */
#include "policy/policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "policy/policy_int.h"
#include "policy/uri.h"

static void deny(struct tg_decision *d, const char *rule)
{
    d->verdict = TG_VERDICT_DENY;
    snprintf(d->rule, sizeof(d->rule), "%s", rule);
}

/* A deny pattern's "*" crosses "/" whatever the group: a deny never matches less than it
 * did when "*" crossed "/" everywhere. */
static void decide_glob(const struct tg_policy *p, const struct globset *g, const char *what, const char *kind,
                        const char *group, int star_stops, struct tg_decision *d)
{
    memset(d, 0, sizeof(*d));
    d->verdict = TG_VERDICT_ALLOW;
    if (!g->present) {
        if (p->default_deny) {
            deny(d, "(default deny)");
            snprintf(d->message, sizeof(d->message),
                     "%s \"%.200s\" is not permitted by policy (no \"%s\" rules; the policy's default is deny)", kind,
                     what, group);
        }
        return;
    }
    for (int i = 0; i < g->ndeny; i++)
        if (tg__glob_match(g->deny[i], what, 0)) {
            deny(d, g->deny[i]);
            if (g->reason)
                snprintf(d->message, sizeof(d->message), "%s", g->reason);
            else
                snprintf(d->message, sizeof(d->message), "%s \"%.200s\" is denied by policy", kind, what);
            return;
        }
    for (int i = 0; i < g->nallow; i++)
        if (tg__glob_match(g->allow[i], what, star_stops))
            return;
    if (g->has_default ? g->default_deny : p->default_deny) {
        deny(d, "(default deny)");
        if (g->reason)
            snprintf(d->message, sizeof(d->message), "%s", g->reason);
        else
            snprintf(d->message, sizeof(d->message), "%s \"%.200s\" is not permitted by policy", kind, what);
    }
}

void tg_policy_decide_resource(const struct tg_policy *p, const char *uri, struct tg_decision *d)
{
    size_t n = strlen(uri);
    char small[512], *norm = n < sizeof(small) ? small : malloc(n + 1);
    const char *why = "cannot be normalised";
    if (norm == NULL || tg_uri_normalize(uri, n, norm, &why) < 0) {
        memset(d, 0, sizeof(*d));
        deny(d, "(uri)");
        snprintf(d->message, sizeof(d->message), "Resource URI \"%.200s\" is refused: it %s", uri, why);
    } else {
        decide_glob(p, &p->resources, norm, "Resource", "resources", 1, d);
    }
    if (norm != small)
        free(norm);
}

void tg_policy_decide_prompt(const struct tg_policy *p, const char *name, struct tg_decision *d)
{
    if (strlen(name) > TG_URI_MAX) { /* the same bound on matching work as for a URI */
        memset(d, 0, sizeof(*d));
        deny(d, "(name)");
        snprintf(d->message, sizeof(d->message), "Prompt name \"%.200s...\" is refused: it is longer than 8192 bytes",
                 name);
        return;
    }
    decide_glob(p, &p->prompts, name, "Prompt", "prompts", 0, d);
}

/* Every glob of the group's "scopes" that matches adds its scopes. A "*" crosses "/" here, as in
 * a deny: a requirement never covers less than its pattern could be read to say. */
static int scopes_of(const struct globset *g, const char *what, const char *have, char *need, size_t n)
{
    need[0] = '\0';
    int lacks = 0;
    for (int i = 0; i < g->nscoped; i++)
        if (tg__glob_match(g->scoped[i].glob, what, 0))
            lacks |= tg__scopes_need(g->scoped[i].scopes, have, need, n);
    return lacks;
}

int tg_policy_scopes_resource(const struct tg_policy *p, const char *uri, const char *have, char *need, size_t n)
{
    need[0] = '\0';
    if (p->resources.nscoped == 0)
        return 0;
    size_t len = strlen(uri);
    char *norm = tg_xmalloc(len + 1);
    const char *why;
    /* A URI that cannot be normalised is denied by the decision. */
    int lacks = tg_uri_normalize(uri, len, norm, &why) >= 0 && scopes_of(&p->resources, norm, have, need, n);
    free(norm);
    return lacks;
}

int tg_policy_scopes_prompt(const struct tg_policy *p, const char *name, const char *have, char *need, size_t n)
{
    need[0] = '\0';
    if (strlen(name) > TG_URI_MAX)
        return 0; /* denied by the decision */
    return scopes_of(&p->prompts, name, have, need, n);
}

int tg_policy_scopes_tool(const struct tg_policy *p, const char *tool, const char *have, char *need, size_t n)
{
    need[0] = '\0';
    if (!tg_policy_tool_visible(p, tool))
        return 0; /* refused whatever the token holds: the decision says why */
    const struct ptool *t = tg__find_tool(p, tool);
    int lacks = 0;
    if (t != NULL && t->scopes != NULL)
        lacks |= tg__scopes_need(t->scopes, have, need, n);
    if (p->wildcard != NULL && p->wildcard->scopes != NULL)
        lacks |= tg__scopes_need(p->wildcard->scopes, have, need, n);
    return lacks;
}

void tg_policy_scopes_all(const struct tg_policy *p, char *out, size_t n)
{
    for (int i = 0; i <= p->ntools; i++) {
        const struct ptool *t = i < p->ntools ? &p->tools[i] : p->wildcard;
        if (t != NULL && t->scopes != NULL)
            (void)tg__scopes_need(t->scopes, "", out, n);
    }
    const struct globset *gs[2] = {&p->resources, &p->prompts};
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < gs[k]->nscoped; i++)
            (void)tg__scopes_need(gs[k]->scoped[i].scopes, "", out, n);
}

/* A tool's own tags (policy.h). */
int tg_policy_tool_tags(const struct tg_policy *p, const char *tool, const char *const **tags)
{
    const struct ptool *t = tg__find_tool(p, tool);
    if (t == NULL) {
        *tags = NULL;
        return 0;
    }
    *tags = (const char *const *)t->tags;
    return t->ntags;
}
