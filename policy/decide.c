/* Policy decisions over a compiled struct tg_policy: tools/call (with its counter
 * reservations and their refund), tools/list visibility and non-standard methods. resources/read
 * and prompts/get: policy/decide_resource.c. */
#include "policy/policy.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "policy/counters.h"
#include "policy/history_rules.h"
#include "policy/policy_int.h"
#include "policy/regex.h"

static const char *scope_label(enum scope s)
{
    return s == SCOPE_SESSION   ? "for this session"
           : s == SCOPE_GLOBAL  ? "across all callers"
           : s == SCOPE_SUBJECT ? "for this user"
                                : "for this grant";
}

/* cJSON's type tests (cJSON_IsString and the rest), the same tests inlined: in the library each
 * is a call through the PLT, and a decision makes dozens. */
static inline int j_type(const cJSON *v, int t) { return v != NULL && (v->type & 0xFF) == t; }
static inline int j_str(const cJSON *v) { return j_type(v, cJSON_String); }
static inline int j_num(const cJSON *v) { return j_type(v, cJSON_Number); }
static inline int j_true(const cJSON *v) { return j_type(v, cJSON_True); }
static inline int j_null(const cJSON *v) { return j_type(v, cJSON_NULL); }
static inline int j_arr(const cJSON *v) { return j_type(v, cJSON_Array); }
static inline int j_obj(const cJSON *v) { return j_type(v, cJSON_Object); }
static inline int j_bool(const cJSON *v) { return v != NULL && (v->type & (cJSON_True | cJSON_False)) != 0; }

/* An argument by its path. idx[i] is path[i] as a list index, worked out when the policy was
 * compiled (tg__finish_tool: -1 if path[i] is not one); NULL to work it out here. */
static const cJSON *resolve_args(const cJSON *args, char **path, const long *idx, int n)
{
    const cJSON *cur = args;
    for (int i = 0; i < n && cur != NULL; i++) {
        if (j_obj(cur)) {
            cur = tg_json_get(cur, path[i]);
        } else if (j_arr(cur)) {
            long k = idx != NULL ? idx[i] : tg__path_index(path[i]);
            if (k < 0)
                return NULL;
            cur = cJSON_GetArrayItem(cur, (int)k);
        } else {
            return NULL;
        }
    }
    return cur;
}

/* ---- decisions ----------------------------------------------------------------- */

static const struct ptool *find_tool(const struct tg_policy *p, const char *name)
{
    if (p->tools == NULL || p->ntools == 0) /* a policy of "*" alone */
        return NULL;
    if (p->tool_slots != NULL) {
        uint32_t h = tg__tool_hash(name);
        for (uint32_t k = h & p->tool_mask; p->tool_slots[k].idx1 != 0; k = (k + 1) & p->tool_mask) {
            const struct tool_slot *sl = &p->tool_slots[k];
            if (sl->hash == h && strcmp(name, p->tools[sl->idx1 - 1].name) == 0)
                return &p->tools[sl->idx1 - 1];
        }
        return NULL;
    }
    int lo = 0, hi = p->ntools - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(name, p->tools[mid].name);
        if (c == 0)
            return &p->tools[mid];
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

const struct ptool *tg__find_tool(const struct tg_policy *p, const char *name) { return find_tool(p, name); }

static int is_hidden(const struct tg_policy *p, const char *tool)
{
    if (p->hide_all)
        return 1;
    for (int i = 0; i < p->nhide; i++)
        if (p->hide[i][0] == tool[0] && strcmp(p->hide[i], tool) == 0)
            return 1;
    return 0;
}

int tg_policy_tool_visible(const struct tg_policy *p, const char *tool)
{
    if (is_hidden(p, tool))
        return 0;
    const struct ptool *t = find_tool(p, tool);
    if (t == NULL && p->default_deny)
        return 0;
    if (t != NULL && (t->action == TA_DENY || t->unconditional_deny))
        return 0;
    if (p->wildcard && (p->wildcard->action == TA_DENY || p->wildcard->unconditional_deny))
        return 0;
    return 1;
}

int tg_policy_method_allowed(const struct tg_policy *p, const char *method)
{
    for (int i = 0; i < p->nmethods; i++)
        if (strcmp(p->methods[i], method) == 0)
            return 1;
    return 0;
}

/* policy_side: a number written in the policy prints every digit when it is an integer, as
 * Intercept's YAML loader reads it as an int; an argument is a float64 as JSON decodes it. */
static int scalar_str(const cJSON *v, char *buf, size_t n, const char **out, int policy_side)
{
    if (j_str(v)) {
        *out = v->valuestring;
        return 1;
    }
    if (j_bool(v)) {
        *out = j_true(v) ? "true" : "false";
        return 1;
    }
    if (j_null(v)) {
        *out = "<nil>";
        return 1;
    }
    if (j_num(v)) {
        double d = v->valuedouble;
        if (policy_side && d == floor(d) && fabs(d) < 9.2e18)
            snprintf(buf, n, "%lld", (long long)d);
        else
            tg__go_float(d, buf, n);
        *out = buf;
        return 1;
    }
    return 0;
}

static int val_eq(const cJSON *a, const cJSON *b)
{
    if (j_num(a) && j_num(b))
        return a->valuedouble == b->valuedouble;
    if (j_str(a) && j_str(b)) /* what scalar_str gives both, without its buffers */
        return strcmp(a->valuestring, b->valuestring) == 0;
    char ba[64], bb[64];
    const char *sa, *sb;
    if (scalar_str(a, ba, sizeof(ba), &sa, 0) && scalar_str(b, bb, sizeof(bb), &sb, 1))
        return strcmp(sa, sb) == 0;
    return cJSON_Compare(a, b, 1); /* lists and maps: structural equality */
}

/* What the deny-list operators (neq, not_in) can say "differs" about. A list or a map is not
 * "some other value": ["production"] or {"env": "production"} must not pass env not_in
 * ["production"], and null is an absent value (exists treats it so). */
static int is_scalar(const cJSON *v) { return j_str(v) || j_num(v) || j_bool(v); }

/* 1 the condition holds, 0 it does not, -1 no answer (a regex that hit a limit). Every operator
 * fails closed: a value of a type it does not compare makes the condition false, and anything
 * but 1 denies the call (conditions are requirements; there is no operator that lets a call
 * through because a condition failed, so "no answer" can only deny). */
static int eval_op(const struct cond *c, const cJSON *actual, double state_value, int is_state)
{
    cJSON tmp;
    if (is_state) {
        /* A counter against a number, as a state condition mostly is: no stand-in value. */
        switch (c->op) {
        case OP_LT: return state_value < c->num;
        case OP_LTE: return state_value <= c->num;
        case OP_GT: return state_value > c->num;
        case OP_GTE: return state_value >= c->num;
        default: break;
        }
        memset(&tmp, 0, sizeof(tmp));
        tmp.type = cJSON_Number;
        tmp.valuedouble = state_value;
        actual = &tmp;
    }
    switch (c->op) {
    case OP_EQ: return val_eq(actual, c->value);
    case OP_NEQ: return is_scalar(actual) && !val_eq(actual, c->value);
    case OP_IN:
    case OP_NOT_IN: {
        if (c->op == OP_NOT_IN && !is_scalar(actual))
            return 0;
        int found = 0;
        for (const cJSON *e = c->value->child; e && !found; e = e->next)
            found = val_eq(actual, e);
        return c->op == OP_IN ? found : !found;
    }
    case OP_LT: return j_num(actual) && actual->valuedouble < c->num;
    case OP_LTE: return j_num(actual) && actual->valuedouble <= c->num;
    case OP_GT: return j_num(actual) && actual->valuedouble > c->num;
    case OP_GTE: return j_num(actual) && actual->valuedouble >= c->num;
    case OP_REGEX: return (j_str(actual) && c->re != NULL) ? tg_regex_match(c->re, actual->valuestring) : 0;
    case OP_CONTAINS:
        if (j_str(actual))
            return j_str(c->value) && strstr(actual->valuestring, c->value->valuestring) != NULL;
        if (j_arr(actual)) {
            for (const cJSON *e = actual->child; e; e = e->next)
                if (val_eq(e, c->value))
                    return 1;
        }
        return 0;
    case OP_EXISTS: return 0; /* handled by the caller */
    }
    return 0;
}

/* What one decision works out once and reuses: the lengths of the caller's names, and the
 * hashes of the counters it has reached (a state condition and its reservation name the same
 * counter). On the stack of decide_call(). */
#define MEMO_MAX 16
struct dctx {
    const struct tg_policy *p;
    struct tg_counters *cs;
    int64_t now_ms;
    const char *up, *grant, *session, *subject, *issuer;
    size_t uplen, grantlen, sesslen, subjlen, isslen; /* SIZE_MAX: not measured yet */
    int private_keys; /* the store's keys are tg_keyhash, not tg_counters_hash */
    uint64_t up_gen;  /* the upmemo gen that means this caller's upstream; 0: not looked up yet,
                       * UINT64_MAX: an upstream too long to remember */
    int nmemo;
    struct { int idx; uint64_t h1, h2; } memo[MEMO_MAX];
    struct tg__hctx *hx; /* the policy records (policy/decide_history.c), else NULL */
};

/* Record the step that decided, when asked to (tr not NULL). tr is a parameter, never kept in
 * struct dctx (which escapes into calls, so a field would be loaded again at every step): the
 * gateway's entry points pass a constant NULL, and with decide_call() inlined into each the
 * compiler drops the recording from them (reserve_rules and reserve_limits are cloned for it). */
static inline void trace(struct tg__trace *tr, enum tg__trace_at at, const struct ptool *entry, int index, int cond)
{
    if (tr != NULL) {
        tr->at = at;
        tr->entry = entry;
        tr->index = index;
        tr->cond = cond;
    }
}

static void dctx_init(struct dctx *x, const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                      int64_t now_ms)
{
    x->p = p;
    x->cs = cs;
    x->now_ms = now_ms;
    x->up = who->upstream ? who->upstream : "";
    x->grant = who->grant ? who->grant : "";
    x->session = who->session ? who->session : "";
    x->subject = who->subject ? who->subject : x->grant; /* no subject named: the grant's own */
    x->issuer = who->issuer ? who->issuer : "";
    x->uplen = x->grantlen = x->sesslen = x->subjlen = x->isslen = SIZE_MAX;
    x->private_keys = tg_counters_private_keys(cs);
    x->up_gen = 0;
    x->nmemo = 0;
}

static size_t lazy_len(const char *s, size_t *len) { return *len != SIZE_MAX ? *len : (*len = strlen(s)); }

/* The keymemo gen under which this caller's upstream is remembered: looked up once per decision
 * (one comparison of names, not one per counter). UINT64_MAX: not remembered. */
static uint64_t up_gen(struct dctx *x)
{
    if (x->up_gen != 0)
        return x->up_gen;
    struct upmemo *u = x->p->upmemo;
    size_t uplen = lazy_len(x->up, &x->uplen);
    if (u == NULL || uplen > sizeof(u->up)) {
        x->up_gen = UINT64_MAX;
    } else {
        if (u->gen == 0 || u->len != uplen || memcmp(u->up, x->up, uplen) != 0) {
            u->gen++; /* every remembered prefix was of another upstream */
            u->len = uplen;
            memcpy(u->up, x->up, uplen);
        }
        x->up_gen = u->gen;
    }
    return x->up_gen;
}

/* The private key of a counter for this caller (tg_keyhash): the parts upstream, key, scope letter,
 * identity (and for a subject's counter, its issuer and the subject). The state after the first
 * three is remembered per counter, as for the other derivation. */
static void private_key(struct dctx *x, const struct pcounter *pc, struct keymemo *m, char scope, const char *id,
                        size_t idlen, uint64_t *h1, uint64_t *h2)
{
    uint64_t gen = up_gen(x);
    struct tg_keyhash h;
    if (m != NULL && m->priv_gen == gen) {
        h = m->priv;
    } else {
        tg_keyhash_begin(&h);
        tg_keyhash_part(&h, x->up, lazy_len(x->up, &x->uplen));
        tg_keyhash_part(&h, pc->key, pc->keylen);
        tg_keyhash_part(&h, &scope, 1);
        if (m != NULL && gen != UINT64_MAX) {
            m->priv_gen = gen;
            m->priv = h;
        }
    }
    tg_keyhash_part(&h, id, idlen);
    if (pc->scope == SCOPE_SUBJECT) {
        tg_keyhash_part(&h, x->issuer, lazy_len(x->issuer, &x->isslen));
        tg_keyhash_part(&h, x->subject, lazy_len(x->subject, &x->subjlen));
    }
    tg_keyhash_end(&h, h1, h2);
}

/* The key of a counter for this caller: the hash of "upstream\x1fkey\x1fscope\x1fid" (upstream,
 * counter, and the scope's identity), hashed in its parts rather than formatted; or its private
 * key when the store takes those. */
static void counter_hash(struct dctx *x, int idx, uint64_t *h1, uint64_t *h2)
{
    for (int i = 0; i < x->nmemo; i++)
        if (x->memo[i].idx == idx) {
            *h1 = x->memo[i].h1;
            *h2 = x->memo[i].h2;
            return;
        }
    const struct pcounter *pc = &x->p->counters[idx];
    static const char sep_s[] = "\x1fs\x1f", sep_g[] = "\x1fg\x1f", sep_all[] = "\x1f*\x1f", sep_u[] = "\x1fu\x1f";
    const char *sep, *id;
    size_t idlen, subjlen = 0, isslen = 0;
    /* a subject's identity: the grant's length (4 bytes, little-endian), the grant, the issuer's
     * length, the issuer, the subject: no two (grant, issuer, subject) read the same */
    unsigned char lens[8]; /* the grant's length, the issuer's */
    if (pc->scope == SCOPE_SUBJECT) {
        sep = sep_u;
        id = x->grant;
        idlen = lazy_len(x->grant, &x->grantlen);
        subjlen = lazy_len(x->subject, &x->subjlen);
        isslen = lazy_len(x->issuer, &x->isslen);
        for (int b = 0; b < 8; b++)
            lens[b] = (unsigned char)((uint64_t)(b < 4 ? idlen : isslen) >> (8 * (b & 3)));
    } else if (pc->scope == SCOPE_SESSION) {
        sep = sep_s;
        id = x->session;
        idlen = lazy_len(x->session, &x->sesslen);
    } else if (pc->scope == SCOPE_GLOBAL) {
        sep = sep_all;
        id = "";
        idlen = 0;
    } else {
        sep = sep_g;
        id = x->grant;
        idlen = lazy_len(x->grant, &x->grantlen);
    }
    struct keymemo *m = x->p->keymemo != NULL ? &x->p->keymemo[idx] : NULL;
    if (x->private_keys) {
        private_key(x, pc, m, sep[1], id, idlen, h1, h2);
        goto remember;
    }
    size_t uplen = lazy_len(x->up, &x->uplen);
    size_t total = idlen + (pc->scope == SCOPE_SUBJECT ? 8 + isslen + subjlen : 0); /* bytes after the prefix */
    uint64_t gen = up_gen(x);
    struct tg_counters_hasher h;
    if (m != NULL && m->gen == gen && m->idlen == total) {
        h = m->h;
    } else {
        tg_counters_hash_begin(&h, uplen + 1 + pc->keylen + 3 + total);
        tg_counters_hash_feed(&h, x->up, uplen);
        tg_counters_hash_feed(&h, "\x1f", 1);
        tg_counters_hash_feed(&h, pc->key, pc->keylen);
        tg_counters_hash_feed(&h, sep, 3);
        if (m != NULL && gen != UINT64_MAX) {
            m->gen = gen;
            m->idlen = total;
            m->h = h;
        }
    }
    if (pc->scope == SCOPE_SUBJECT)
        tg_counters_hash_feed(&h, (const char *)lens, 4);
    tg_counters_hash_feed(&h, id, idlen);
    if (pc->scope == SCOPE_SUBJECT) {
        tg_counters_hash_feed(&h, (const char *)lens + 4, 4);
        tg_counters_hash_feed(&h, x->issuer, isslen);
        tg_counters_hash_feed(&h, x->subject, subjlen);
    }
    tg_counters_hash_end(&h, h1, h2);
remember:
    if (x->nmemo < MEMO_MAX) {
        x->memo[x->nmemo].idx = idx;
        x->memo[x->nmemo].h1 = *h1;
        x->memo[x->nmemo].h2 = *h2;
        x->nmemo++;
    }
}

static int64_t window_start(int64_t now_ms, int64_t window_ms) { return now_ms - (now_ms % window_ms); }

static double state_value(struct dctx *x, int idx)
{
    const struct pcounter *pc = &x->p->counters[idx];
    uint64_t h1, h2;
    counter_hash(x, idx, &h1, &h2);
    return tg_window_get(x->cs, h1, h2, window_start(x->now_ms, pc->window_ms));
}

/* set_decision(d, v, rule, "%s", msg) without the formatter. */
static void set_decision_str(struct tg_decision *d, enum tg_verdict v, const char *rule, const char *msg)
{
    d->verdict = v;
    tg_strlcpy(d->rule, rule, sizeof(d->rule));
    tg_strlcpy(d->message, msg, sizeof(d->message));
}

/* set_decision(d, v, rule, "PRE%sPOST", s) without the formatter: what snprintf would write
 * into message, truncation included. The verdicts a hostile caller can ask for by the thousand
 * (an unlisted or hidden tool, a rule its arguments fail) take this way. */
static void set_decision_around(struct tg_decision *d, enum tg_verdict v, const char *rule, const char *pre,
                                const char *s, const char *post)
{
    d->verdict = v;
    tg_strlcpy(d->rule, rule, sizeof(d->rule));
    const char *piece[3] = {pre, s, post};
    size_t len[3] = {strlen(pre), strlen(s), strlen(post)};
    tg__cat_cut(d->message, sizeof(d->message) - 1, piece, len, 3);
}

static void set_decision(struct tg_decision *d, enum tg_verdict v, const char *rule, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_decision(struct tg_decision *d, enum tg_verdict v, const char *rule, const char *fmt, ...)
{
    d->verdict = v;
    tg_strlcpy(d->rule, rule, sizeof(d->rule));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->message, sizeof(d->message), fmt, ap);
    va_end(ap);
}

/* Evaluate the conditions of one rule; returns the failing condition index or -1. Only a
 * condition that evaluated to true holds: eval_op's -1 (a regex that hit a limit) fails it like
 * a plain false, and *unanswered says which it was. A failing state condition leaves the value
 * it read in *state_read: the refusal reports that value, never a second read (a store that
 * answers later, a cluster's, would then see the reservations of an earlier pass). */
static int eval_rule(struct dctx *x, const struct rule *r, const cJSON *args, int *unanswered, double *state_read)
{
    *unanswered = 0;
    for (int i = 0; i < r->nconds; i++) {
        const struct cond *c = &r->conds[i];
        int ok;
        if (c->is_state) {
            if (c->counter < 0) { /* never defined, or a history condition (decide_history.c) */
                if (c->hist == NULL || !tg__hist_cond(x->hx, c))
                    return i;
                continue;
            }
            double v = state_value(x, c->counter);
            ok = c->op == OP_EXISTS ? j_true(c->value) : eval_op(c, NULL, v, 1);
            *state_read = v;
        } else {
            const cJSON *a = resolve_args(args, c->path, c->path_idx, c->npath);
            if (c->op == OP_EXISTS)
                ok = (a != NULL && !j_null(a)) == j_true(c->value);
            else
                ok = a != NULL ? eval_op(c, a, 0, 0) : 0;
        }
        if (ok != 1) {
            *unanswered = ok < 0;
            return i;
        }
    }
    return -1;
}

static void give_back(struct tg_counters *c, const struct tg_decision *d)
{
    for (int i = d->nres - 1; i >= 0; i--) {
        const struct tg_reservation *r = &d->res[i];
        if (r->kind == CK_BUCKET)
            tg_bucket_give(c, r->h1, r->h2, r->capacity, r->amount);
        else
            tg_window_sub(c, r->h1, r->h2, r->window_start, r->amount);
    }
}

static void refund_all(struct tg_counters *c, struct tg_decision *d)
{
    give_back(c, d);
    d->nres = 0;
}

void tg_policy_refund(struct tg_counters *c, const struct tg_decision *d, int64_t now_ms)
{
    (void)now_ms;
    give_back(c, d); /* d is the caller's: read, not reset (it used to be copied whole for that) */
}

static const char *type_name(const cJSON *v)
{
    return j_str(v) ? "a string" : j_bool(v) ? "a boolean" : j_null(v) ? "null"
         : j_arr(v)  ? "a list" : j_obj(v) ? "a map" : "not a value";
}

/* The amount an increment_from argument counts, as the call carries it: no rounding to an integer
 * (Intercept's int64() counts 0.9 as 0, so eight charges of 0.9 pass a cap of 5, and -0.5 as 0,
 * so it passes a negative check). Fails closed, with the reason in why, on anything that is not
 * a finite number >= 0: a negative amount would give budget back, and 1e400 (which the JSON
 * decoder turns into infinity) cannot be counted. The value is judged as sent; the message
 * quotes the number's own digits when the decoder kept them. */
static int amount_of(const cJSON *a, double *amount, char *why, size_t n)
{
    if (a == NULL) {
        snprintf(why, n, "is missing");
        return 0;
    }
    if (!j_num(a)) {
        snprintf(why, n, "is %s, not a number", type_name(a));
        return 0;
    }
    double v = a->valuedouble;
    char num[48];
    if (a->valuestring != NULL)
        snprintf(num, sizeof(num), "%.40s", a->valuestring);
    else
        snprintf(num, sizeof(num), "%.17g", v);
    if (!isfinite(v)) {
        snprintf(why, n, "is %s, not a finite number", num);
        return 0;
    }
    if (v < 0) {
        snprintf(why, n, "is %s: a negative amount cannot count", num);
        return 0;
    }
    *amount = v == 0 ? 0 : v; /* -0 counts as 0 */
    return 1;
}

/* Intercept stateful rules of one entry (the tool's or "*"): reserve each counter within its
 * limit; on a refusal every reservation of the decision goes back (all or nothing). */
static int reserve_rules(struct dctx *x, const char *tool, const struct ptool *pt, const cJSON *args,
                         struct tg_decision *d, struct tg__trace *tr)
{
    const struct tg_policy *p = x->p;
    struct tg_counters *cs = x->cs;
    int64_t now_ms = x->now_ms;
    for (int i = 0; i < pt->nrules; i++) {
        const struct rule *r = &pt->rules[i];
        if (r->counter < 0)
            continue;
        double amount = r->increment;
        if (r->nincr > 0) {
            const cJSON *a = resolve_args(args, r->incr_path, r->incr_idx, r->nincr);
            char why[120];
            if (!amount_of(a, &amount, why, sizeof(why))) {
                refund_all(cs, d);
                trace(tr, TG_TRACE_INCREMENT, pt, i, -1);
                set_decision(d, TG_VERDICT_DENY, r->name, "%s: %s, which counts toward \"%s\", %s", tool,
                             r->incr_from, r->name, why);
                return -1;
            }
        }
        /* A counter whose rule sets no limit on it is still counted (Intercept: a state block
         * increments on every allowed call), for other rules' conditions that read it; it
         * skipped counting, so such a condition always read 0 and never limited anything. */
        const struct pcounter *pc = &p->counters[r->counter];
        uint64_t h1, h2;
        counter_hash(x, r->counter, &h1, &h2);
        int64_t ws = window_start(now_ms, pc->window_ms);
        double nowv;
        if (!tg_window_add(cs, h1, h2, ws, pc->window_ms, amount, r->limit, r->limit_op, &nowv)) {
            refund_all(cs, d);
            trace(tr, TG_TRACE_COUNTER, pt, i, -1);
            tg__note_clear(d);
            tg__note_counter(d, pc, nowv);
            uint64_t retry = (uint64_t)(ws + pc->window_ms - now_ms);
            tg__note_window_limit(d, retry, r->limit, r->limit_op, nowv);
            tg_strlcpy(d->counter, pc->key + 2, sizeof(d->counter));
            set_decision(d, TG_VERDICT_LIMITED, r->name, "%s; retry in %llu s", r->on_deny ? r->on_deny : r->name,
                         (unsigned long long)((retry + 999) / 1000));
            return -1;
        }
        if (d->nres < TG_MAX_RESERVATIONS) {
            struct tg_reservation *rv = &d->res[d->nres++];
            rv->h1 = h1;
            rv->h2 = h2;
            rv->kind = CK_WINDOW;
            rv->amount = amount;
            rv->window_start = ws;
        }
        tg__note_counter(d, pc, nowv);
    }
    return 0;
}

static int reserve_limits(struct dctx *x, const char *tool, const struct ptool *pt, struct tg_decision *d,
                          struct tg__trace *tr)
{
    const struct tg_policy *p = x->p;
    struct tg_counters *cs = x->cs;
    int64_t now_ms = x->now_ms;
    for (int i = 0; i < pt->nlimits; i++) {
        if (pt->limits[i] < 0)
            continue;
        const struct pcounter *pc = &p->counters[pt->limits[i]];
        uint64_t h1, h2, retry;
        double left;
        counter_hash(x, pt->limits[i], &h1, &h2);
        /* The audit record shows the calls the bucket allows now: its whole tokens. A bucket
         * just emptied reports 0, not the 5.6e-7 of a token that 2 ms of refill bring back. */
        if (!tg_bucket_take(cs, h1, h2, pc->capacity, pc->window_ms, 1, now_ms, &left, &retry)) {
            refund_all(cs, d);
            trace(tr, TG_TRACE_LIMIT, pt, i, -1);
            tg__note_clear(d);
            tg__note_counter(d, pc, floor(left));
            tg__note_limit(d, retry, pc->capacity, left);
            tg_strlcpy(d->counter, pc->key + 2, sizeof(d->counter));
            set_decision(d, TG_VERDICT_LIMITED, pc->key + 2, "%s is limited to %s %s; retry in %llu s", tool,
                         pc->label, scope_label(pc->scope), (unsigned long long)((retry + 999) / 1000));
            return -1;
        }
        if (d->nres < TG_MAX_RESERVATIONS) {
            struct tg_reservation *rv = &d->res[d->nres++];
            rv->h1 = h1;
            rv->h2 = h2;
            rv->kind = CK_BUCKET;
            rv->amount = 1;
            rv->capacity = pc->capacity;
        }
        tg__note_counter(d, pc, floor(left));
    }
    return 0;
}

/* Hash every counter this call can reach (ptool.reach, in the order the decision reaches them),
 * and tell the store about each (tg_counters_prefetch): the hashes are remembered for the
 * decision, and the store's lookups overlap instead of missing the cache one after another. */
static void prefetch_counters(struct dctx *x, const struct ptool *t, const struct ptool *wild)
{
    uint64_t h1, h2;
    const struct ptool *sets[2] = {t, wild};
    for (int s = 0; s < 2; s++) {
        const struct ptool *pt = sets[s];
        if (pt == NULL)
            continue;
        for (int i = 0; i < pt->nreach; i++) {
            counter_hash(x, pt->reach[i], &h1, &h2);
            tg_counters_prefetch(x->cs, h1, h2);
        }
        if (pt->reach_stops)
            return;
    }
}

/* Inlined into each entry point, so that the two the gateway calls, which pass no trace, carry
 * no trace code at all: the recording is compiled only into tg__policy_decide_traced(). */
static inline __attribute__((always_inline)) void decide_call(const struct tg_policy *p, struct tg_counters *cs,
                                                              const struct tg_caller *who, const char *tool,
                                                              const cJSON *args, int64_t now_ms, int reserve,
                                                              struct tg_decision *d, struct tg__trace *tr)
{
    /* Field by field: the reservation array is large and only its first nres entries are read. */
    d->verdict = TG_VERDICT_ALLOW;
    d->rule[0] = d->message[0] = d->counter[0] = '\0';
    tg__note_clear(d);
    d->retry_after_ms = 0;
    d->approval_timeout_ms = d->nres = d->by_history = d->limit_known = 0;
    d->approval_mode = TG_APPROVAL_AUTO;
    d->history_json[0] = '\0';
    struct dctx x;
    struct tg__hctx hx;
    dctx_init(&x, p, cs, who, now_ms);
    if (is_hidden(p, tool)) {
        trace(tr, TG_TRACE_HIDE, NULL, 0, -1);
        set_decision_around(d, TG_VERDICT_DENY, "(hidden)", "Tool \"", tool, "\" is hidden by policy");
        return;
    }
    const struct ptool *t = find_tool(p, tool);
    if (t == NULL && p->default_deny) {
        trace(tr, TG_TRACE_DEFAULT, NULL, 0, -1);
        set_decision_around(d, TG_VERDICT_DENY, "(default deny)", "Tool \"", tool, "\" is not permitted by policy");
        return;
    }
    const struct ptool *sets[2] = {t, p->wildcard};
    if (tg_counters_prefetches(cs))
        prefetch_counters(&x, t, p->wildcard);
    const struct ptool *bo = NULL; /* history: brakes first, spending nothing (decide_history.c) */
    if (p->records) {
        tg__hist_begin(x.hx = &hx, p, cs, who, tool, t, args, now_ms, !reserve);
        if (reserve && tg__hist_brake(&hx, p->wildcard, d, &bo)) {
            trace(tr, TG_TRACE_BRAKE, bo, 0, -1);
            return;
        }
    }
    for (int s = 0; s < 2; s++) {
        const struct ptool *pt = sets[s];
        if (pt == NULL)
            continue;
        if (pt->action == TA_DENY) {
            trace(tr, TG_TRACE_ACTION, pt, 0, -1);
            if (pt->reason)
                set_decision_str(d, TG_VERDICT_DENY, pt->name, pt->reason);
            else
                set_decision_around(d, TG_VERDICT_DENY, pt->name, "Tool \"", tool, "\" is denied by policy");
            return;
        }
        for (int i = 0; i < pt->nrules; i++) {
            const struct rule *r = &pt->rules[i];
            if (r->gate) { /* deny, or "when" (decide_history.c): one test for a plain rule */
                if (r->when != NULL && !tg__hist_when(r->when, tool, t))
                    continue;
                if (r->deny) {
                    trace(tr, TG_TRACE_RULE, pt, i, -1);
                    if (r->on_deny)
                        set_decision_str(d, TG_VERDICT_DENY, r->name, r->on_deny);
                    else
                        set_decision_around(d, TG_VERDICT_DENY, r->name, "Denied by rule \"", r->name, "\"");
                    return;
                }
            }
            int unanswered;
            double state_read = 0;
            int failed = eval_rule(&x, r, args, &unanswered, &state_read);
            if (failed >= 0)
                trace(tr, TG_TRACE_RULE, pt, i, failed);
            if (failed >= 0 && unanswered) {
                /* Fail closed, and say why: the operator reading the audit log can tell a
                 * pattern that gave up from one that did not match. */
                if (r->on_deny)
                    set_decision(d, TG_VERDICT_DENY, r->name, "%s (conditions[%d]: the regex gave no answer within its match limits)",
                                 r->on_deny, failed);
                else
                    set_decision(d, TG_VERDICT_DENY, r->name,
                                 "Denied by rule \"%s\" (conditions[%d]: the regex gave no answer within its match limits)",
                                 r->name, failed);
                return;
            }
            if (failed >= 0) {
                const struct cond *c = &r->conds[failed];
                if (c->is_state && c->counter >= 0) {
                    const struct pcounter *pc = &p->counters[c->counter];
                    int64_t ws = window_start(now_ms, pc->window_ms);
                    tg__note_counter(d, pc, state_read);
                    d->retry_after_ms = (uint64_t)(ws + pc->window_ms - now_ms);
                    tg_strlcpy(d->counter, pc->key + 2, sizeof(d->counter));
                    set_decision(d, TG_VERDICT_LIMITED, r->name, "%s; retry in %llu s",
                                 r->on_deny ? r->on_deny : r->name,
                                 (unsigned long long)((d->retry_after_ms + 999) / 1000));
                } else if (c->hist != NULL) {
                    tg__hist_refuse(x.hx, r, c, d);
                } else if (r->on_deny) {
                    set_decision_str(d, TG_VERDICT_DENY, r->name, r->on_deny);
                } else {
                    set_decision_around(d, TG_VERDICT_DENY, r->name, "Denied by rule \"", r->name, "\"");
                }
                return;
            }
        }
    }
    if (reserve) { /* the tool's counters, then the "*" entry's: every rule's before any limit's */
        for (int s = 0; s < 2; s++)
            if (sets[s] != NULL && reserve_rules(&x, tool, sets[s], args, d, tr) != 0)
                return;
        for (int s = 0; s < 2; s++)
            if (sets[s] != NULL && reserve_limits(&x, tool, sets[s], d, tr) != 0)
                return;
        if (p->records) /* after every read: a local store's views end with an add */
            tg__hist_record(&hx);
    }
    if (t != NULL && t->action == TA_APPROVE) {
        trace(tr, TG_TRACE_ACTION, t, 0, -1);
        d->approval_timeout_ms = t->approval_ms;
        d->approval_mode = t->approval_mode;
        set_decision_around(d, TG_VERDICT_APPROVE, t->name, "", tool, " needs a human's approval");
        return;
    }
    trace(tr, TG_TRACE_ALLOWED, t != NULL ? t : p->wildcard, 0, -1);
    d->verdict = TG_VERDICT_ALLOW;
}

void tg_policy_decide_call(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                           const char *tool, const cJSON *args, int64_t now_ms, struct tg_decision *d)
{
    decide_call(p, cs, who, tool, args, now_ms, 1, d, NULL);
}

void tg_policy_decide_continuation(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                                   const char *tool, const cJSON *args, int64_t now_ms, struct tg_decision *d)
{
    decide_call(p, cs, who, tool, args, now_ms, 0, d, NULL);
}

void tg__policy_decide_traced(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                              const char *tool, const cJSON *args, int64_t now_ms, struct tg_decision *d,
                              struct tg__trace *tr)
{
    decide_call(p, cs, who, tool, args, now_ms, 1, d, tr);
}
