/* Explaining a decision (policy/explain.h). The verdict is always tg_policy_decide_call()'s, and
 * so is where it came from: the decision records the step that gave the verdict (the entry, the
 * rule or limit, the condition that did not hold) and this file prints it. So the explanation
 * can never disagree with the decision: there is one walk over the rules, decide.c's. */
#include "policy/explain.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/history_rules.h"
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
    return s == SCOPE_SESSION ? "session" : s == SCOPE_GLOBAL ? "global" : s == SCOPE_SUBJECT ? "subject" : "grant";
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
    if (c->hist != NULL) {
        tg__describe_history_cond(c, out, n);
        return;
    }
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

/* Say where the decision came from, from the step it recorded (tg__policy_decide_traced). */
static void locate(const struct tg__trace *tr, const cJSON *args, struct tg_policy_explain *e)
{
    const char *name = tr->entry != NULL ? tr->entry->name : NULL;
    switch (tr->at) {
    case TG_TRACE_HIDE: snprintf(e->where, sizeof(e->where), "hide"); return;
    case TG_TRACE_DEFAULT: snprintf(e->where, sizeof(e->where), "default"); return;
    case TG_TRACE_ACTION: snprintf(e->where, sizeof(e->where), "tools.%s.action", name); return;
    case TG_TRACE_RULE:
        snprintf(e->where, sizeof(e->where), "tools.%s.rules[%d]", name, tr->index);
        if (tr->cond >= 0) {
            e->cond = tr->cond;
            describe_cond(&tr->entry->rules[tr->index].conds[tr->cond], args, e->cond_text, sizeof(e->cond_text));
        }
        return;
    case TG_TRACE_COUNTER: snprintf(e->where, sizeof(e->where), "tools.%s.rules[%d]", name, tr->index); return;
    case TG_TRACE_INCREMENT:
        snprintf(e->where, sizeof(e->where), "tools.%s.rules[%d].state.increment_from", name, tr->index);
        return;
    case TG_TRACE_LIMIT: snprintf(e->where, sizeof(e->where), "tools.%s.limits[%d]", name, tr->index); return;
    case TG_TRACE_BRAKE: snprintf(e->where, sizeof(e->where), "tools.%s.brake", name); return;
    case TG_TRACE_ALLOWED:
        if (name != NULL)
            snprintf(e->where, sizeof(e->where), "tools.%s", name);
        else
            snprintf(e->where, sizeof(e->where), "default");
        return;
    }
}

void tg_policy_explain_call(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who,
                            const char *tool, const cJSON *args, int64_t now_ms, struct tg_policy_explain *e)
{
    struct tg__trace tr;
    tg__policy_decide_traced(p, c, who, tool, args, now_ms, &e->d, &tr);
    e->hidden = !tg_policy_tool_visible(p, tool);
    e->where[0] = e->cond_text[0] = '\0';
    e->cond = -1;
    locate(&tr, args, e);
}

static void tool_counters(const struct tg_policy *p, const struct ptool *pt, struct tg_buf *out)
{
    char w[32];
    if (pt->brake != NULL) {
        tg__hist_duration(pt->brake->within_ms, w, sizeof(w));
        tg_buf_appendf(out, "  brake: more than %d calls with the same arguments within %s", pt->brake->repeats, w);
        if (pt->brake->cycle)
            tg_buf_appendf(out, ", or a loop of up to %d calls", pt->brake->cycle);
        tg_buf_appendf(out, ", checked before any counter (tools.%s.brake)\n", pt->name);
    }
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
        for (int k = 0; k < r->nconds; k++) /* history the rule reads (its count is not a counter) */
            if (r->conds[k].hist != NULL) {
                char text[480];
                tg__describe_history_cond(&r->conds[k], text, sizeof(text));
                tg_buf_appendf(out, "  history: %s, read by tools.%s.rules[%d].conditions[%d]\n", text, pt->name, i, k);
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

/* ---- earlier calls as data ------------------------------------------------------------------ */

/* "30s", "5m", "1h", "1d", "90" or a number: seconds ago, 0 to 1 day; -1 otherwise. */
static int64_t ago_ms(const cJSON *j, const char *s)
{
    if (j != NULL && cJSON_IsNumber(j))
        return isfinite(j->valuedouble) && j->valuedouble >= 0 && j->valuedouble <= 86400
                   ? (int64_t)llround(j->valuedouble * 1000) : -1;
    if (j != NULL)
        s = cJSON_IsString(j) ? j->valuestring : "";
    if (*s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    long long mult = *end == '\0' || *end == 's' ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600 : *end == 'd' ? 86400 : 0;
    if (errno != 0 || mult == 0 || (*end != '\0' && end[1] != '\0') || v > 86400 || v * mult > 86400)
        return -1;
    return v * mult * 1000;
}

struct earlier {
    int kind; /* 0 tool, 1 resource, 2 prompt */
    char name[256];
    const cJSON *args;
    int64_t ago;
};

static int parse_earlier(const cJSON *e, struct earlier *out, char *why, size_t n, int i)
{
    memset(out, 0, sizeof(*out));
    out->ago = 1000;
    if (cJSON_IsString(e)) {
        snprintf(out->name, sizeof(out->name), "%s", e->valuestring);
        char *colon = strrchr(out->name, ':');
        if (colon != NULL && ago_ms(NULL, colon + 1) >= 0) {
            out->ago = ago_ms(NULL, colon + 1);
            *colon = '\0';
        }
    } else if (cJSON_IsObject(e)) {
        static const char *const kinds[] = {"tool", "resource", "prompt"};
        int found = 0;
        for (const cJSON *k = e->child; k != NULL; k = k->next) {
            int known = strcmp(k->string, "args") == 0 || strcmp(k->string, "ago") == 0;
            for (int m = 0; m < 3; m++)
                if (strcmp(k->string, kinds[m]) == 0 && cJSON_IsString(k)) {
                    out->kind = m;
                    snprintf(out->name, sizeof(out->name), "%s", k->valuestring);
                    known = 1;
                    found++;
                }
            if (!known) {
                snprintf(why, n, "history[%d].%s: unknown field (tool, resource, prompt, args, ago)", i, k->string);
                return -1;
            }
        }
        if (found != 1) {
            snprintf(why, n, "history[%d]: name one tool, resource or prompt (a string)", i);
            return -1;
        }
        out->args = tg_json_get(e, "args");
        if (out->args != NULL && (out->kind != 0 || !cJSON_IsObject(out->args))) {
            snprintf(why, n, "history[%d].args: must be a map, and only with tool", i);
            return -1;
        }
        const cJSON *a = tg_json_get(e, "ago");
        if (a != NULL && (out->ago = ago_ms(a, NULL)) < 0) {
            snprintf(why, n, "history[%d].ago: must be \"30s\", \"5m\", \"1h\", \"1d\" or seconds, at most a day", i);
            return -1;
        }
    } else {
        snprintf(why, n, "history[%d]: must be \"TOOL\", \"TOOL:AGO\" or a map {tool, args, ago}", i);
        return -1;
    }
    if (out->name[0] == '\0') {
        snprintf(why, n, "history[%d]: the name is empty", i);
        return -1;
    }
    return 0;
}

int tg_policy_history_add_list(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who,
                               const cJSON *list, int64_t now_ms, char *why, size_t n)
{
    if (!cJSON_IsArray(list)) {
        snprintf(why, n, "history: must be a list of earlier calls");
        return -1;
    }
    int len = cJSON_GetArraySize(list);
    if (len > 4096) {
        snprintf(why, n, "history: at most 4096 earlier calls");
        return -1;
    }
    struct earlier *v = tg_xcalloc((size_t)(len ? len : 1), sizeof(*v));
    int i = 0, rc = 0;
    for (const cJSON *e = list->child; e != NULL && rc == 0; e = e->next, i++)
        rc = parse_earlier(e, &v[i], why, n, i);
    for (int done = 0; rc == 0 && c != NULL && done < len; done++) { /* the oldest first, in order given */
        int k = -1;
        for (int m = 0; m < len; m++)
            if (v[m].ago >= 0 && (k < 0 || v[m].ago > v[k].ago))
                k = m;
        if (v[k].kind == 0)
            tg_policy_history_add_call(p, c, who, v[k].name, v[k].args, now_ms - v[k].ago);
        else
            tg_policy_record_read(p, c, who, v[k].kind == 2, v[k].name, now_ms - v[k].ago);
        v[k].ago = -1;
    }
    free(v);
    return rc;
}
