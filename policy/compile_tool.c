/* Compiling one entry of a policy's "tools" (either shape: hosted action, reason and limits;
 * Intercept rules with conditions, state and rate_limit), and the helpers that the whole
 * compiler shares: errors, windows, the policy's counter table, argument paths. */
#include "policy/compile_tool.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/history_rules.h"
#include "policy/policy.h"
#include "policy/regex.h"

#define DEFAULT_APPROVAL_MS (300 * 1000)

static const char *const op_names[] = {"eq", "neq", "in", "not_in", "lt", "lte", "gt", "gte", "regex", "contains",
                                       "exists", NULL};

/* ---- scopes -------------------------------------------------------------------- */

/* A counter's "scope": whose calls share it. "grant" (the default) counts a grant's calls
 * together, "subject" each user inside it apart (its credential's subject: the JWT's subject
 * claim; a static token or a certificate is its grant's one subject), "session" each session,
 * "global" every caller. 0, or -1 for anything else. */
static int parse_scope(const cJSON *v, enum scope *out)
{
    static const struct {
        const char *name;
        enum scope scope;
    } names[] = {{"grant", SCOPE_GRANT}, {"subject", SCOPE_SUBJECT}, {"session", SCOPE_SESSION}, {"global", SCOPE_GLOBAL}};
    for (size_t i = 0; cJSON_IsString(v) && i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(v->valuestring, names[i].name) == 0) {
            *out = names[i].scope;
            return 0;
        }
    return -1;
}

/* ---- windows ------------------------------------------------------------------- */

/* "second|minute|hour|day" or a positive number of seconds (number or numeric string). */
static int64_t parse_window(const cJSON *w, int allow_seconds, int allow_units)
{
    if (cJSON_IsString(w)) {
        const char *s = w->valuestring;
        if (allow_seconds && strcmp(s, "second") == 0)
            return 1000;
        if (strcmp(s, "minute") == 0)
            return 60000;
        if (strcmp(s, "hour") == 0)
            return 3600000;
        if (strcmp(s, "day") == 0)
            return 86400000;
        if (!allow_seconds)
            return -1;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno != 0 || end == s || v <= 0)
            return -1;
        long long mult = 1;
        if (!allow_units && *end != '\0')
            return -1;
        if (*end == 's' && end[1] == '\0')
            mult = 1;
        else if (*end == 'm' && end[1] == '\0')
            mult = 60;
        else if (*end == 'h' && end[1] == '\0')
            mult = 3600;
        else if (*end == 'd' && end[1] == '\0')
            mult = 86400;
        else if (*end != '\0')
            return -1;
        if (v > 31536000LL / mult)
            return -1;
        return v * mult * 1000;
    }
    if (allow_seconds && cJSON_IsNumber(w)) {
        double d = w->valuedouble;
        if (d > 0 && d <= 31536000.0)
            return (int64_t)(d * 1000);
    }
    return -1;
}

void tg__policy_window_label(int64_t ms, char *out, size_t n)
{
    if (ms == 1000)
        snprintf(out, n, "second");
    else if (ms == 60000)
        snprintf(out, n, "minute");
    else if (ms == 3600000)
        snprintf(out, n, "hour");
    else if (ms == 86400000)
        snprintf(out, n, "day");
    else if (ms % 1000 == 0)
        snprintf(out, n, "%lld seconds", (long long)(ms / 1000));
    else
        snprintf(out, n, "%.3f seconds", (double)ms / 1000.0);
}

int tg__find_counter(struct tg_policy *p, const char *key)
{
    for (int i = 0; i < p->ncounters; i++)
        if (strcmp(p->counters[i].key, key) == 0)
            return i;
    return -1;
}

static int add_counter(struct tg_policy *p, struct pcounter *pc)
{
    p->counters = tg_xrealloc(p->counters, (size_t)(p->ncounters + 1) * sizeof(*p->counters));
    p->counters[p->ncounters] = *pc;
    return p->ncounters++;
}

/* ---- paths ------------------------------------------------------------------ */

static int split_path(const char *s, char ***out)
{
    int n = 0;
    char **v = NULL;
    const char *p = s;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0) {
            for (int i = 0; i < n; i++)
                free(v[i]);
            free(v);
            return -1;
        }
        v = tg_xrealloc(v, (size_t)(n + 1) * sizeof(*v));
        v[n++] = tg_slice_dup(tg_slice_of(p, len));
        p += len;
        if (*p == '.')
            p++;
        if (dot && *p == '\0') {
            for (int i = 0; i < n; i++)
                free(v[i]);
            free(v);
            return -1;
        }
    }
    *out = v;
    return n;
}

/* ---- compile ------------------------------------------------------------------ */

static int op_of(const char *s)
{
    for (int i = 0; op_names[i]; i++)
        if (strcmp(s, op_names[i]) == 0)
            return i;
    return -1;
}

static void compile_cond(struct tg__cctx *cx, const cJSON *c, const char *path, const char *scope, struct cond *out)
{
    memset(out, 0, sizeof(*out));
    out->counter = -1;
    if (!cJSON_IsObject(c)) {
        tg__perr(cx, path, "a condition must be an object {path, op, value}");
        return;
    }
    if (tg_json_get(c, "history") != NULL) { /* {history: {...}, op, value}: policy/compile_history.c */
        tg__compile_history_cond(cx, c, path, out);
        return;
    }
    static const char *const known[] = {"path", "op", "value", NULL};
    tg__check_keys(cx, c, path, known);
    const cJSON *jp = tg_json_get(c, "path");
    const cJSON *jo = tg_json_get(c, "op");
    const cJSON *jv = tg_json_get(c, "value");
    char sub[600];
    snprintf(sub, sizeof(sub), "%s.path", path);
    if (!cJSON_IsString(jp)) {
        tg__perr(cx, sub, "must be a string");
        return;
    }
    const char *ps = jp->valuestring;
    if (strncmp(ps, "args.", 5) == 0) {
        out->npath = split_path(ps + 5, &out->path);
        if (out->npath <= 0) {
            tg__perr(cx, sub, "\"%s\" is not a valid args path", ps);
            out->npath = 0;
        }
    } else if (strncmp(ps, "state.", 6) == 0) {
        out->is_state = 1;
        const char *rest = ps + 6;
        const char *dot = strrchr(rest, '.');
        if (dot == NULL || dot == rest || dot[1] == '\0') {
            tg__perr(cx, sub, "\"%s\" must be state.<tool or _global>.<counter>", ps);
        } else {
            char key[300];
            snprintf(key, sizeof(key), "S:%s", rest);
            out->counter = tg__find_counter(cx->p, key); /* resolved again after all rules are compiled */
            out->path = tg_xcalloc(1, sizeof(char *));
            out->path[0] = tg_xstrdup(key);
            out->npath = 1;
        }
    } else {
        tg__perr(cx, sub, "path must start with \"args.\" or \"state.\", got \"%s\"", ps);
    }
    snprintf(sub, sizeof(sub), "%s.op", path);
    int op = cJSON_IsString(jo) ? op_of(jo->valuestring) : -1;
    if (op < 0) {
        tg__perr(cx, sub, "unknown operator \"%s\" (eq neq in not_in lt lte gt gte regex contains exists)",
             cJSON_IsString(jo) ? jo->valuestring : "?");
        return;
    }
    out->op = (enum cop)op;
    snprintf(sub, sizeof(sub), "%s.value", path);
    if (jv == NULL) {
        tg__perr(cx, sub, "is required");
        return;
    }
    switch (out->op) {
    case OP_NEQ:
        /* neq holds only for a scalar that differs (see eval_op): a list or a map as the value
         * would make the rule deny every list and map and let every scalar through. */
        if (cJSON_IsArray(jv) || cJSON_IsObject(jv))
            tg__perr(cx, sub, "operator \"neq\" compares a string, number, boolean or null; a list or map cannot be its value");
        break;
    case OP_IN:
    case OP_NOT_IN:
        if (!cJSON_IsArray(jv)) {
            tg__perr(cx, sub, "operator \"%s\" requires a list value", op_names[op]);
            break;
        }
        if (out->op == OP_NOT_IN) {
            int k = 0;
            for (const cJSON *e = jv->child; e; e = e->next, k++)
                if (cJSON_IsArray(e) || cJSON_IsObject(e)) {
                    char ep[640];
                    snprintf(ep, sizeof(ep), "%s[%d]", sub, k);
                    tg__perr(cx, ep, "operator \"not_in\" compares a string, number, boolean or null; a list or map cannot be in its list");
                }
        }
        break;
    case OP_LT:
    case OP_LTE:
    case OP_GT:
    case OP_GTE:
        if (!cJSON_IsNumber(jv))
            tg__perr(cx, sub, "operator \"%s\" requires a numeric value", op_names[op]);
        else
            out->num = jv->valuedouble;
        break;
    case OP_EXISTS:
        if (!cJSON_IsBool(jv))
            tg__perr(cx, sub, "operator \"exists\" requires a boolean value");
        break;
    case OP_REGEX:
        if (!cJSON_IsString(jv)) {
            tg__perr(cx, sub, "regex value must be a string");
        } else {
            char why[360];
            if (tg_regex_compile(jv->valuestring, &cx->p->rx, &out->re, why, sizeof(why)) != 0)
                tg__perr(cx, sub, "%s", why);
        }
        break;
    default: break;
    }
    out->value = cJSON_Duplicate(jv, 1);
    (void)scope;
}

static void compile_rule(struct tg__cctx *cx, const cJSON *r, const char *path, const char *tool, struct rule *out)
{
    memset(out, 0, sizeof(*out));
    out->counter = -1;
    if (!cJSON_IsObject(r)) {
        tg__perr(cx, path, "a rule must be an object");
        return;
    }
    static const char *const known[] = {"name", "action", "conditions", "on_deny", "state", "rate_limit", "when", NULL};
    tg__check_keys(cx, r, path, known);
    if (tg_json_get(r, "when") != NULL)
        tg__compile_when(cx, tg_json_get(r, "when"), path, &out->when);
    char sub[600];
    const cJSON *jn = tg_json_get(r, "name");
    if (!cJSON_IsString(jn) || jn->valuestring[0] == '\0') {
        snprintf(sub, sizeof(sub), "%s.name", path);
        tg__perr(cx, sub, "rule must have a name");
        out->name = tg_xstrdup("?");
    } else {
        out->name = tg_xstrdup(jn->valuestring);
    }
    const cJSON *ja = tg_json_get(r, "action");
    const char *action = "evaluate";
    if (ja != NULL) {
        if (!cJSON_IsString(ja) || (strcmp(ja->valuestring, "evaluate") && strcmp(ja->valuestring, "deny"))) {
            snprintf(sub, sizeof(sub), "%s.action", path);
            tg__perr(cx, sub, "action must be \"evaluate\" or \"deny\", got \"%s\"",
                 cJSON_IsString(ja) ? ja->valuestring : "?");
        } else {
            action = ja->valuestring;
        }
    }
    out->deny = strcmp(action, "deny") == 0;
    const cJSON *jd = tg_json_get(r, "on_deny");
    if (jd != NULL) {
        if (!cJSON_IsString(jd)) {
            snprintf(sub, sizeof(sub), "%s.on_deny", path);
            tg__perr(cx, sub, "must be a string");
        } else {
            out->on_deny = tg_xstrdup(jd->valuestring);
        }
    }
    const char *scope = strcmp(tool, "*") == 0 ? "_global" : tool;
    const cJSON *jc = tg_json_get(r, "conditions");
    const cJSON *js = tg_json_get(r, "state");
    const cJSON *jr = tg_json_get(r, "rate_limit");
    if (jr != NULL) {
        snprintf(sub, sizeof(sub), "%s.rate_limit", path);
        if (jc != NULL || js != NULL) {
            tg__perr(cx, sub, "rate_limit cannot be combined with conditions or state");
            return;
        }
        if (out->deny) {
            tg__perr(cx, sub, "rate_limit cannot be used with action \"deny\"");
            return;
        }
        const char *s = cJSON_IsString(jr) ? jr->valuestring : "";
        const char *slash = strchr(s, '/');
        char *end = NULL;
        long count = slash ? strtol(s, &end, 10) : 0;
        if (!slash || end != slash || count <= 0 || s == slash) {
            tg__perr(cx, sub, "rate_limit must be \"N/window\" with a positive integer N, got \"%s\"", s);
            return;
        }
        cJSON *w = cJSON_CreateString(slash + 1);
        int64_t wms = parse_window(w, 0, 0);
        cJSON_Delete(w);
        if (wms < 0) {
            tg__perr(cx, sub, "rate_limit window must be \"minute\", \"hour\", or \"day\", got \"%s\"", slash + 1);
            return;
        }
        char key[300];
        snprintf(key, sizeof(key), "S:%s._rate_%s", scope, slash + 1);
        if (tg__find_counter(cx->p, key) >= 0) {
            tg__perr(cx, sub, "duplicate state counter \"_rate_%s\"", slash + 1);
            return;
        }
        char label[160];
        snprintf(label, sizeof(label), "%ld calls per %s", count, slash + 1);
        struct pcounter pc = {tg_xstrdup(key), tg_xstrdup(label), CK_WINDOW, SCOPE_GRANT, 0, wms, 0, NULL, 0};
        out->counter = add_counter(cx->p, &pc);
        out->increment = 1;
        out->limit = (double)count;
        out->limit_op = TG_LIMIT_LTE;
        out->conds = tg_xcalloc(1, sizeof(*out->conds));
        out->nconds = 1;
        out->conds[0].is_state = 1;
        out->conds[0].counter = out->counter;
        out->conds[0].op = OP_LTE;
        out->conds[0].num = (double)count;
        out->conds[0].value = cJSON_CreateNumber((double)count);
        out->conds[0].path = tg_xcalloc(1, sizeof(char *));
        out->conds[0].path[0] = tg_xstrdup(key);
        out->conds[0].npath = 1;
        if (out->on_deny == NULL) {
            char m[200];
            snprintf(m, sizeof(m), "Rate limit of %ld per %s reached. Try again later.", count, slash + 1);
            out->on_deny = tg_xstrdup(m);
        }
        return;
    }
    if (js != NULL) {
        snprintf(sub, sizeof(sub), "%s.state", path);
        if (!cJSON_IsObject(js)) {
            tg__perr(cx, sub, "must be an object {counter, window, increment, increment_from}");
        } else {
            static const char *const sknown[] = {"counter", "window", "increment", "increment_from", "scope", NULL};
            tg__check_keys(cx, js, sub, sknown);
            const cJSON *cn = tg_json_get(js, "counter");
            const cJSON *cw = tg_json_get(js, "window");
            const cJSON *ci = tg_json_get(js, "increment");
            const cJSON *cf = tg_json_get(js, "increment_from");
            const cJSON *cs = tg_json_get(js, "scope");
            char s2[600];
            int64_t wms = parse_window(cw, 0, 0);
            snprintf(s2, sizeof(s2), "%s.counter", sub);
            if (!cJSON_IsString(cn) || cn->valuestring[0] == '\0')
                tg__perr(cx, s2, "counter must not be empty");
            snprintf(s2, sizeof(s2), "%s.window", sub);
            if (wms < 0)
                tg__perr(cx, s2, "window must be \"minute\", \"hour\", or \"day\", got \"%s\"",
                     cJSON_IsString(cw) ? cw->valuestring : "?");
            out->increment = 1;
            if (ci != NULL) {
                snprintf(s2, sizeof(s2), "%s.increment", sub);
                if (!cJSON_IsNumber(ci) || !(ci->valuedouble >= 0) || !isfinite(ci->valuedouble))
                    tg__perr(cx, s2, "must be a non-negative number");
                else if (ci->valuedouble != 0)
                    out->increment = ci->valuedouble;
            }
            if (cf != NULL) {
                snprintf(s2, sizeof(s2), "%s.increment_from", sub);
                if (!cJSON_IsString(cf) || strncmp(cf->valuestring, "args.", 5) != 0 ||
                    (out->nincr = split_path(cf->valuestring + 5, &out->incr_path)) <= 0) {
                    tg__perr(cx, s2, "increment_from must start with \"args.\", got \"%s\"",
                         cJSON_IsString(cf) ? cf->valuestring : "?");
                    out->nincr = 0;
                } else {
                    out->incr_from = tg_xstrdup(cf->valuestring);
                }
            }
            enum scope sc = SCOPE_GRANT;
            if (cs != NULL && parse_scope(cs, &sc) != 0) {
                snprintf(s2, sizeof(s2), "%s.scope", sub);
                tg__perr(cx, s2, "must be grant, subject, session or global");
            }
            if (cJSON_IsString(cn) && cn->valuestring[0] && wms > 0) {
                char key[300];
                snprintf(key, sizeof(key), "S:%s.%s", scope, cn->valuestring);
                if (tg__find_counter(cx->p, key) >= 0) {
                    snprintf(s2, sizeof(s2), "%s.counter", sub);
                    tg__perr(cx, s2, "duplicate state counter \"%s\"", cn->valuestring);
                } else {
                    char label[160];
                    tg__policy_window_label(wms, label, sizeof(label));
                    char lab2[200];
                    snprintf(lab2, sizeof(lab2), "%s per %s", cn->valuestring, label);
                    struct pcounter pc = {tg_xstrdup(key), tg_xstrdup(lab2), CK_WINDOW, sc, 0, wms, 0, NULL, 0};
                    out->counter = add_counter(cx->p, &pc);
                }
            }
        }
    }
    if (jc != NULL) {
        snprintf(sub, sizeof(sub), "%s.conditions", path);
        if (!cJSON_IsArray(jc)) {
            tg__perr(cx, sub, "must be a list");
        } else {
            if (out->deny && cJSON_GetArraySize(jc) > 0)
                tg__perr(cx, sub, "deny rules must not have conditions");
            out->nconds = cJSON_GetArraySize(jc);
            out->conds = tg_xcalloc((size_t)(out->nconds ? out->nconds : 1), sizeof(*out->conds));
            int i = 0;
            for (const cJSON *c = jc->child; c; c = c->next, i++) {
                char cp[600];
                snprintf(cp, sizeof(cp), "%s[%d]", sub, i);
                compile_cond(cx, c, cp, scope, &out->conds[i]);
            }
        }
    }
    if (!out->deny && out->nconds == 0) {
        snprintf(sub, sizeof(sub), "%s.conditions", path);
        tg__perr(cx, sub, "evaluate rules must have at least one condition");
    }
    /* The limit that a reservation enforces: an lt/lte condition on the rule's own counter, taken
     * as written: the value after the call must satisfy it (lte 5 takes the total to 5, lt 1 to
     * anything below 1). With whole amounts that is Intercept's int64(v) and int64(v) - 1; with
     * fractional ones nothing is rounded. Of several such conditions the tightest holds. */
    if (out->counter >= 0) {
        const char *own = cx->p->counters[out->counter].key;
        for (int i = 0; i < out->nconds; i++) {
            struct cond *c = &out->conds[i];
            if (!c->is_state || c->npath != 1 || strcmp(c->path[0], own) != 0 || !cJSON_IsNumber(c->value) ||
                (c->op != OP_LTE && c->op != OP_LT))
                continue;
            double v = c->value->valuedouble;
            enum tg_limit_op op = c->op == OP_LT ? TG_LIMIT_LT : TG_LIMIT_LTE;
            if (out->limit_op == TG_LIMIT_NONE || v < out->limit || (v == out->limit && op == TG_LIMIT_LT)) {
                out->limit = v;
                out->limit_op = op;
            }
        }
    }
}

static void compile_limits(struct tg__cctx *cx, const cJSON *jl, const char *path, const char *tool, struct ptool *t)
{
    if (!cJSON_IsArray(jl)) {
        tg__perr(cx, path, "must be a list of {counter, window, max, scope}");
        return;
    }
    t->nlimits = cJSON_GetArraySize(jl);
    t->limits = tg_xcalloc((size_t)(t->nlimits ? t->nlimits : 1), sizeof(int));
    int i = 0;
    for (const cJSON *l = jl->child; l; l = l->next, i++) {
        char lp[600], sub[360];
        snprintf(lp, sizeof(lp), "%s[%d]", path, i);
        t->limits[i] = -1;
        if (!cJSON_IsObject(l)) {
            tg__perr(cx, lp, "must be an object {counter, window, max, scope}");
            continue;
        }
        static const char *const known[] = {"counter", "window", "max", "scope", NULL};
        tg__check_keys(cx, l, lp, known);
        const cJSON *cn = tg_json_get(l, "counter");
        const cJSON *cw = tg_json_get(l, "window");
        const cJSON *cm = tg_json_get(l, "max");
        const cJSON *cs = tg_json_get(l, "scope");
        int ok = 1;
        char cname[200];
        if (cn == NULL) {
            snprintf(cname, sizeof(cname), "%s_limit_%d", tool, i);
        } else if (!cJSON_IsString(cn) || cn->valuestring[0] == '\0' || strlen(cn->valuestring) >= 150) {
            snprintf(sub, sizeof(sub), "%s.counter", lp);
            tg__perr(cx, sub, "must be a non-empty string");
            ok = 0;
        } else {
            snprintf(cname, sizeof(cname), "%s", cn->valuestring);
        }
        int64_t wms = parse_window(cw, 1, 0);
        if (wms < 0) {
            snprintf(sub, sizeof(sub), "%s.window", lp);
            tg__perr(cx, sub, "must be second, minute, hour, day or a number of seconds (1..31536000)");
            ok = 0;
        }
        if (!cJSON_IsNumber(cm) || cm->valuedouble < 1 || cm->valuedouble > 1e12 ||
            cm->valuedouble != floor(cm->valuedouble)) {
            snprintf(sub, sizeof(sub), "%s.max", lp);
            tg__perr(cx, sub, "must be a positive integer");
            ok = 0;
        }
        enum scope sc = SCOPE_GRANT;
        if (cs != NULL && parse_scope(cs, &sc) != 0) {
            snprintf(sub, sizeof(sub), "%s.scope", lp);
            tg__perr(cx, sub, "must be grant, subject, session or global");
            ok = 0;
        }
        if (!ok)
            continue;
        char key[220];
        snprintf(key, sizeof(key), "L:%s", cname);
        int existing = tg__find_counter(cx->p, key);
        double max = cm->valuedouble;
        if (existing >= 0) {
            struct pcounter *pc = &cx->p->counters[existing];
            if (pc->capacity != max || pc->window_ms != wms || pc->scope != sc) {
                snprintf(sub, sizeof(sub), "%s.counter", lp);
                tg__perr(cx, sub, "counter \"%s\" is defined elsewhere with a different max, window or scope", cname);
                continue;
            }
            t->limits[i] = existing;
            continue;
        }
        char wl[64], label[200];
        tg__policy_window_label(wms, wl, sizeof(wl));
        snprintf(label, sizeof(label), "%.0f calls per %s", max, wl);
        struct pcounter pc = {tg_xstrdup(key), tg_xstrdup(label), CK_BUCKET, sc, max, wms, 0, NULL, 0};
        t->limits[i] = add_counter(cx->p, &pc);
    }
}

int tg_policy_approval_mode(const char *s)
{
    static const char *const names[] = {"hold", "retry", "task"};
    for (int i = 0; i < 3; i++)
        if (strcmp(s, names[i]) == 0)
            return TG_APPROVAL_HOLD + i;
    return -1;
}

void tg__compile_tool(struct tg__cctx *cx, const char *name, const cJSON *jt, struct ptool *t)
{
    memset(t, 0, sizeof(*t));
    t->name = tg_xstrdup(name);
    t->approval_ms = DEFAULT_APPROVAL_MS;
    char path[600];
    snprintf(path, sizeof(path), "tools.%s", name);
    if (!cJSON_IsObject(jt)) {
        tg__perr(cx, path, "must be an object");
        return;
    }
    static const char *const known[] = {"rules", "action", "reason", "limits", "approval_timeout", "approval_mode",
                                        "scopes", "tags", "set", "forbid", "strict", "brake", NULL};
    tg__check_keys(cx, jt, path, known);
    tg__compile_bind(cx, jt, path, t);
    if (tg_json_get(jt, "brake") != NULL)
        tg__compile_brake(cx, tg_json_get(jt, "brake"), path, name, &t->brake);
    char sub[600];
    const cJSON *jtags = tg_json_get(jt, "tags");
    if (jtags != NULL) {
        snprintf(sub, sizeof(sub), "%s.tags", path);
        if (strcmp(name, "*") == 0)
            tg__perr(cx, sub, "tags say what one tool does; put them on the tool's own entry");
        else
            tg__compile_tags(cx, jtags, sub, &t->tags, &t->ntags);
    }
    const cJSON *js = tg_json_get(jt, "scopes");
    if (js != NULL) {
        snprintf(sub, sizeof(sub), "%s.scopes", path);
        tg__compile_scopes(cx, js, sub, &t->scopes);
    }
    const cJSON *ja = tg_json_get(jt, "action");
    if (ja != NULL) {
        snprintf(sub, sizeof(sub), "%s.action", path);
        if (cJSON_IsString(ja) && strcmp(ja->valuestring, "allow") == 0)
            t->action = TA_ALLOW;
        else if (cJSON_IsString(ja) && strcmp(ja->valuestring, "deny") == 0)
            t->action = TA_DENY;
        else if (cJSON_IsString(ja) && strcmp(ja->valuestring, "approve") == 0)
            t->action = TA_APPROVE;
        else
            tg__perr(cx, sub, "must be allow, deny or approve");
        if (strcmp(name, "*") == 0 && t->action == TA_APPROVE)
            tg__perr(cx, sub, "approve is per tool; \"*\" cannot require approval");
    }
    const cJSON *jr = tg_json_get(jt, "reason");
    if (jr != NULL) {
        if (cJSON_IsString(jr))
            t->reason = tg_xstrdup(jr->valuestring);
        else {
            snprintf(sub, sizeof(sub), "%s.reason", path);
            tg__perr(cx, sub, "must be a string");
        }
    }
    const cJSON *jat = tg_json_get(jt, "approval_timeout");
    if (jat != NULL) {
        snprintf(sub, sizeof(sub), "%s.approval_timeout", path);
        int64_t ms = parse_window(jat, 1, 1);
        if (ms <= 0)
            tg__perr(cx, sub, "must be a number of seconds or second|minute|hour|day");
        else
            t->approval_ms = (int)(ms > 86400000 ? 86400000 : ms);
    }
    const cJSON *jm = tg_json_get(jt, "approval_mode");
    if (jm != NULL) {
        snprintf(sub, sizeof(sub), "%s.approval_mode", path);
        int mode = cJSON_IsString(jm) ? tg_policy_approval_mode(jm->valuestring) : -1;
        if (mode < 0)
            tg__perr(cx, sub, "must be hold, retry or task");
        else
            t->approval_mode = mode;
    }
    const cJSON *jl = tg_json_get(jt, "limits");
    if (jl != NULL) {
        snprintf(sub, sizeof(sub), "%s.limits", path);
        compile_limits(cx, jl, sub, name, t);
    }
    const cJSON *jrules = tg_json_get(jt, "rules");
    if (jrules != NULL) {
        snprintf(sub, sizeof(sub), "%s.rules", path);
        if (!cJSON_IsArray(jrules) && !cJSON_IsNull(jrules)) {
            tg__perr(cx, sub, "must be a list");
        } else if (cJSON_IsArray(jrules)) {
            t->nrules = cJSON_GetArraySize(jrules);
            t->rules = tg_xcalloc((size_t)(t->nrules ? t->nrules : 1), sizeof(*t->rules));
            int i = 0;
            for (const cJSON *r = jrules->child; r; r = r->next, i++) {
                char rp[600];
                snprintf(rp, sizeof(rp), "%s[%d]", sub, i);
                compile_rule(cx, r, rp, name, &t->rules[i]);
                if (t->rules[i].deny && t->rules[i].when == NULL)
                    t->unconditional_deny = 1;
            }
        }
    }
}

static void free_path(char **path, int n, void *idx)
{
    for (int m = 0; m < n; m++)
        free(path[m]);
    free(path);
    free(idx);
}

void tg__free_tool(struct ptool *t)
{
    free(t->name);
    free(t->reason);
    free(t->limits);
    for (int i = 0; i < t->nrules; i++) {
        struct rule *r = &t->rules[i];
        for (int k = 0; k < r->nconds; k++) {
            struct cond *c = &r->conds[k];
            free_path(c->path, c->npath, c->path_idx);
            cJSON_Delete(c->value);
            tg_regex_free(c->re);
            tg__free_hcond(c->hist);
        }
        tg__free_hwhen(r->when);
        free(r->conds);
        free_path(r->incr_path, r->nincr, r->incr_idx);
        free(r->incr_from);
        free(r->name);
        free(r->on_deny);
    }
    free(t->rules);
    free(t->reach);
    free(t->scopes);
    tg__free_tags(t->tags, t->ntags);
    tg__free_brake(t->brake);
    free(t->tagh);
    tg__free_bind(t);
}
