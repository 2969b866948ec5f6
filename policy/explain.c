/* Explaining a decision (policy/explain.h). The verdict is always tg_policy_decide_call()'s;
 * this file finds where in the compiled policy it came from. To name the condition that did not
 * hold it asks the real evaluator again, on a probe: a shallow copy of the policy whose only
 * entry is the deciding rule cut to its first k conditions, decided without reserving. The first
 * k whose probe is refused is the condition. So the explanation can never disagree with the
 * decision about what a condition means: there is one evaluator. */
#include "policy/explain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/policy_int.h"

static const char *const op_names[] = {"eq", "neq", "in", "not_in", "lt", "lte", "gt", "gte", "regex", "contains",
                                       "exists"};

const char *tg_policy_verdict_str(enum tg_verdict v)
{
    switch (v) {
    case TG_VERDICT_ALLOW: return "allow";
    case TG_VERDICT_DENY: return "deny";
    case TG_VERDICT_LIMITED: return "limited";
    case TG_VERDICT_APPROVE: return "approve";
    }
    return "?";
}

static const struct ptool *find_tool(const struct tg_policy *p, const char *name)
{
    for (int i = 0; i < p->ntools; i++)
        if (strcmp(p->tools[i].name, name) == 0)
            return &p->tools[i];
    return NULL;
}

static const char *scope_str(enum scope s)
{
    return s == SCOPE_SESSION ? "session" : s == SCOPE_GLOBAL ? "global" : "grant";
}

/* Does rule r of the policy hold for this call? Returns the index of the first condition that
 * does not, or -1 if all hold. See the comment at the top of the file. */
static int failed_condition(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who,
                            const char *tool, const cJSON *args, int64_t now_ms, const struct rule *r)
{
    for (int k = 0; k < r->nconds; k++) {
        struct rule cut = *r;
        cut.deny = 0;
        cut.nconds = k + 1;
        cut.counter = -1;
        struct ptool only;
        memset(&only, 0, sizeof(only));
        only.name = (char *)"*";
        only.action = TA_ALLOW;
        only.rules = &cut;
        only.nrules = 1;
        struct tg_policy probe = *p; /* shares the counters table and the regex context; never freed */
        probe.default_deny = 0;
        probe.hide_all = 0;
        probe.nhide = 0;
        probe.tools = NULL;
        probe.ntools = 0;
        probe.wildcard = &only;
        struct tg_decision *d = malloc(sizeof(*d));
        if (d == NULL)
            return -1;
        tg_policy_decide_continuation(&probe, c, who, tool, args, now_ms, d);
        int refused = d->verdict != TG_VERDICT_ALLOW;
        free(d);
        if (refused)
            return k;
    }
    return -1;
}

static const cJSON *resolve(const cJSON *cur, char **path, int n)
{
    for (int i = 0; i < n && cur != NULL; i++) {
        if (cJSON_IsObject(cur)) {
            cur = tg_json_get(cur, path[i]);
        } else if (cJSON_IsArray(cur)) {
            char *end;
            long k = strtol(path[i], &end, 10);
            if (*end != '\0' || end == path[i] || k < 0)
                return NULL;
            cur = cJSON_GetArrayItem(cur, (int)k);
        } else {
            return NULL;
        }
    }
    return cur;
}

/* "PATH OP VALUE (the call has X)" for a condition. */
static void describe_cond(const struct cond *c, const cJSON *args, char *out, size_t n)
{
    struct tg_buf b;
    tg_buf_init(&b);
    if (c->is_state) {
        tg_buf_appendf(&b, "state.%s", c->npath > 0 ? c->path[0] + 2 : "?");
    } else {
        tg_buf_appendf(&b, "args");
        for (int i = 0; i < c->npath; i++)
            tg_buf_appendf(&b, ".%s", c->path[i]);
    }
    char *v = c->value ? cJSON_PrintUnformatted(c->value) : NULL;
    tg_buf_appendf(&b, " %s %s", op_names[c->op], v ? v : "?");
    free(v);
    if (!c->is_state) {
        const cJSON *a = resolve(args, c->path, c->npath);
        char *s = a ? cJSON_PrintUnformatted(a) : NULL;
        if (s == NULL)
            tg_buf_appendf(&b, " (the call has no such argument)");
        else
            tg_buf_appendf(&b, " (the call has %.200s%s)", s, strlen(s) > 200 ? "..." : "");
        free(s);
    }
    snprintf(out, n, "%.*s", (int)b.len, b.base ? b.base : "");
    tg_buf_dispose(&b);
}

static void set_where(struct tg_policy_explain *e, const char *fmt, const char *tool, int i)
{
    snprintf(e->where, sizeof(e->where), fmt, tool, i);
}

/* Find the entry that made the decision; mirrors the order of decide_call() in decide.c. */
static void locate(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who, const char *tool,
                   const cJSON *args, int64_t now_ms, struct tg_policy_explain *e)
{
    const struct tg_decision *d = &e->d;
    if (strcmp(d->rule, "(hidden)") == 0) {
        snprintf(e->where, sizeof(e->where), "hide");
        return;
    }
    if (strcmp(d->rule, "(default deny)") == 0) {
        snprintf(e->where, sizeof(e->where), "default");
        return;
    }
    const struct ptool *t = find_tool(p, tool);
    const struct ptool *sets[2] = {t, p->wildcard};
    /* Refused before any counter was taken: a denying entry, or a rule whose conditions fail. */
    for (int s = 0; s < 2 && d->verdict != TG_VERDICT_ALLOW && d->verdict != TG_VERDICT_APPROVE; s++) {
        const struct ptool *pt = sets[s];
        if (pt == NULL)
            continue;
        if (pt->action == TA_DENY) {
            set_where(e, "tools.%s.action", pt->name, 0);
            return;
        }
        for (int i = 0; i < pt->nrules; i++) {
            const struct rule *r = &pt->rules[i];
            if (r->deny) {
                set_where(e, "tools.%s.rules[%d]", pt->name, i);
                return;
            }
            int k = failed_condition(p, c, who, tool, args, now_ms, r);
            if (k >= 0) {
                set_where(e, "tools.%s.rules[%d]", pt->name, i);
                e->cond = k;
                describe_cond(&r->conds[k], args, e->cond_text, sizeof(e->cond_text));
                return;
            }
        }
    }
    /* Refused while taking counters: the counter it names, or a bad increment_from. */
    for (int s = 0; s < 2 && (d->verdict == TG_VERDICT_LIMITED || d->verdict == TG_VERDICT_DENY); s++) {
        const struct ptool *pt = sets[s];
        if (pt == NULL)
            continue;
        for (int i = 0; i < pt->nrules; i++) {
            const struct rule *r = &pt->rules[i];
            if (r->counter < 0)
                continue;
            const char *key = p->counters[r->counter].key + 2;
            if (d->verdict == TG_VERDICT_LIMITED && strcmp(key, d->counter) == 0 && strcmp(r->name, d->rule) == 0) {
                set_where(e, "tools.%s.rules[%d]", pt->name, i);
                return;
            }
            if (d->verdict == TG_VERDICT_DENY && r->nincr > 0 && strcmp(r->name, d->rule) == 0) {
                set_where(e, "tools.%s.rules[%d].state.increment_from", pt->name, i);
                return;
            }
        }
        for (int i = 0; i < pt->nlimits; i++)
            if (pt->limits[i] >= 0 && strcmp(p->counters[pt->limits[i]].key + 2, d->counter) == 0) {
                set_where(e, "tools.%s.limits[%d]", pt->name, i);
                return;
            }
    }
    if (d->verdict == TG_VERDICT_APPROVE && t != NULL) {
        set_where(e, "tools.%s.action", t->name, 0);
        return;
    }
    if (d->verdict == TG_VERDICT_ALLOW) {
        if (t != NULL)
            set_where(e, "tools.%s", t->name, 0);
        else if (p->wildcard != NULL)
            set_where(e, "tools.%s", "*", 0);
        else
            snprintf(e->where, sizeof(e->where), "default");
        return;
    }
    snprintf(e->where, sizeof(e->where), "%s", d->rule); /* not found: say what the decision said */
}

void tg_policy_explain_call(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who,
                            const char *tool, const cJSON *args, int64_t now_ms, struct tg_policy_explain *e)
{
    tg_policy_decide_call(p, c, who, tool, args, now_ms, &e->d);
    e->hidden = !tg_policy_tool_visible(p, tool);
    e->where[0] = e->cond_text[0] = '\0';
    e->cond = -1;
    /* The probes read the store as the decision left it: a rule judged before the reservations
     * reads state the same way, as no reservation happens on a refusal before them. */
    locate(p, c, who, tool, args, now_ms, e);
}

static void tool_counters(const struct tg_policy *p, const struct ptool *pt, struct tg_buf *out)
{
    char w[32];
    for (int i = 0; i < pt->nlimits; i++) {
        if (pt->limits[i] < 0)
            continue;
        const struct pcounter *pc = &p->counters[pt->limits[i]];
        tg__policy_window_label(pc->window_ms, w, sizeof(w));
        tg_buf_appendf(out, "  %s: token bucket, scope %s, capacity %.0f, refills %.0f per %s, takes 1 per call "
                            "(tools.%s.limits[%d])\n",
                       pc->key + 2, scope_str(pc->scope), pc->capacity, pc->capacity, w, pt->name, i);
    }
    for (int i = 0; i < pt->nrules; i++) {
        const struct rule *r = &pt->rules[i];
        if (r->counter >= 0) {
            const struct pcounter *pc = &p->counters[r->counter];
            tg__policy_window_label(pc->window_ms, w, sizeof(w));
            tg_buf_appendf(out, "  %s: fixed window of a %s, scope %s, ", pc->key + 2, w, scope_str(pc->scope));
            if (r->nincr > 0)
                tg_buf_appendf(out, "adds %s per call", r->incr_from);
            else
                tg_buf_appendf(out, "adds %g per call", r->increment);
            if (r->limit_op != TG_LIMIT_NONE)
                tg_buf_appendf(out, ", allowed while the total stays %s %g", r->limit_op == TG_LIMIT_LT ? "<" : "<=",
                               r->limit);
            else
                tg_buf_appendf(out, ", no limit of its own");
            tg_buf_appendf(out, " (tools.%s.rules[%d], rule \"%s\")\n", pt->name, i, r->name);
        }
        /* State that this rule reads but another rule counts. */
        for (int k = 0; k < r->nconds; k++) {
            const struct cond *cd = &r->conds[k];
            if (!cd->is_state || cd->counter < 0 || cd->counter == r->counter)
                continue;
            const struct pcounter *pc = &p->counters[cd->counter];
            tg__policy_window_label(pc->window_ms, w, sizeof(w));
            tg_buf_appendf(out, "  %s: fixed window of a %s, scope %s, read by tools.%s.rules[%d].conditions[%d]\n",
                           pc->key + 2, w, scope_str(pc->scope), pt->name, i, k);
        }
    }
}

void tg_policy_explain_counters(const struct tg_policy *p, const char *tool, struct tg_buf *out)
{
    const struct ptool *t = find_tool(p, tool);
    if (t != NULL)
        tool_counters(p, t, out);
    if (p->wildcard != NULL && (t != NULL || !p->default_deny))
        tool_counters(p, p->wildcard, out);
}
