/* Shared by the policy unit tests (test/unit/policy/test_*.c): loading a policy from a fixture or
 * from text, deciding a call, and checking a decision or a load error, each check naming the
 * caller's file and line. The clock is a parameter, so windows and buckets are driven by hand; T0 is
 * 2024-03-10T10:30:00.000Z, the start of a UTC minute and half an hour into an hour.
 *
 * Everything here is static inline: each test file is its own executable and uses a part. */
#ifndef TG_TEST_UNIT_POLICY_HELPERS_H
#define TG_TEST_UNIT_POLICY_HELPERS_H

#include "test/unit/unit.h"

#include <unistd.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "policy/counters.h"
#include "policy/policy.h"

/* Where a check was asked for, "file:line", as one string literal: the checks below take it (or
 * a longer label naming a case of a table) as `from` and start their failure messages with it. */
#define HERE_STR_(x) #x
#define HERE_STR(x) HERE_STR_(x)
#define HERE __FILE__ ":" HERE_STR(__LINE__)

#define FIX TG_SOURCE_DIR "/test/unit/policy/fixtures/"

#define T0 1710066600000LL       /* 2024-03-10T10:30:00.000Z */
#define DAY_END 1710115200000LL  /* 2024-03-11T00:00:00.000Z */
#define MIN_MS 60000LL
#define HOUR_MS 3600000LL

/* Decide through a plan against `remote`, the way the cluster does (policy/counters.h): each round
 * of operations is answered by `remote` between passes, then the final pass's effects (gives,
 * history adds) are applied to it. Returns the rounds that needed an answer; *neffects: how many
 * effects there were (a store that sends them in a round of their own counts one more), and
 * *unsettled whether the plan gave up. */
static inline int decide_through_plan(const struct tg_policy *p, struct tg_counters *remote, const struct tg_caller *who,
                                      const char *tool, const cJSON *args, int64_t now, struct tg_decision *d,
                                      size_t *neffects, int *unsettled)
{
    struct tg_counter_plan plan;
    tg_plan_init(&plan);
    int trips = 0;
    for (;;) {
        tg_plan_begin(&plan);
        tg_policy_decide_call(p, &plan.base, who, tool, args, now, d);
        size_t from, n = tg_plan_end(&plan, &from);
        if (n == 0)
            break;
        trips++;
        for (size_t i = from; i < from + n; i++)
            tg_counter_op_apply(remote, &plan.ops[i]);
        tg_plan_answered(&plan);
    }
    for (size_t i = 0; i < plan.neffects; i++)
        tg_counter_op_apply(remote, &plan.effects[i]);
    *neffects = plan.neffects;
    *unsettled = plan.unsettled;
    tg_plan_dispose(&plan);
    return trips;
}

/* Any verdict but ALLOW and APPROVE, for the checks below: what a drain stops at. */
#define REFUSED ((enum tg_verdict)-1)

static inline const char *verdict_name(enum tg_verdict v)
{
    if (v == REFUSED)
        return "DENY or LIMITED";
    switch (v) {
    case TG_VERDICT_ALLOW: return "ALLOW";
    case TG_VERDICT_DENY: return "DENY";
    case TG_VERDICT_LIMITED: return "LIMITED";
    case TG_VERDICT_APPROVE: return "APPROVE";
    }
    return "?";
}

static inline char *buf_str(struct tg_buf *b)
{
    static char empty[] = "";
    if (b->len == 0)
        return empty;
    tg_buf_append(b, "", 1);
    b->len--;
    return b->base;
}

static inline struct tg_policy *load_ok_at(const char *from, const char *path)
{
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    int r = tg_policy_load(path, &p, &err, &warn);
    if (r != 0 || p == NULL)
        fail_msg("%s: %s did not load (%d):\n%s", from, path, r, buf_str(&err));
    if (warn.len != 0)
        fail_msg("%s: %s loaded with warnings:\n%s", from, path, buf_str(&warn));
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    return p;
}
#define LOAD_OK(path) load_ok_at(HERE, (path))

static inline struct tg_policy *load_fixture(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), FIX "%s", name);
    return LOAD_OK(path);
}

/* Arguments through the gateway's own strict parser, as the router hands them over. */
static inline cJSON *J(const char *s)
{
    struct tg_json_doc doc;
    const char *why = NULL;
    size_t off = 0;
    if (tg_json_parse(s, strlen(s), 64, 1, &doc, &why, &off) != 0)
        fail_msg("test bug: bad JSON at %zu (%s): %s", off, why, s);
    return doc.root;
}

static inline void decide_as(const struct tg_policy *p, struct tg_counters *c, const char *grant, const char *session,
                             const char *tool, const char *args, int64_t now, struct tg_decision *d)
{
    struct tg_caller who = {grant, session, "up", NULL, NULL};
    cJSON *a = args ? J(args) : NULL;
    tg_policy_decide_call(p, c, &who, tool, a, now, d);
    cJSON_Delete(a);
}

static inline void decide(const struct tg_policy *p, struct tg_counters *c, const char *grant, const char *tool,
                          const char *args, int64_t now, struct tg_decision *d)
{
    decide_as(p, c, grant, "sess-1", tool, args, now, d);
}

/* msg: exact, or a prefix when it ends in '*'; rule and msg may be NULL (not checked). */
static inline void expect_at(const char *from, const struct tg_decision *d, enum tg_verdict v, const char *rule,
                             const char *msg)
{
    int ok = v == REFUSED ? d->verdict == TG_VERDICT_DENY || d->verdict == TG_VERDICT_LIMITED : d->verdict == v;
    if (rule && strcmp(d->rule, rule) != 0)
        ok = 0;
    if (msg) {
        size_t n = strlen(msg);
        if (n > 0 && msg[n - 1] == '*')
            ok = ok && strncmp(d->message, msg, n - 1) == 0;
        else
            ok = ok && strcmp(d->message, msg) == 0;
    }
    if (!ok)
        fail_msg("%s: got %s rule \"%s\" message \"%s\"; expected %s rule \"%s\" message \"%s\"", from,
                 verdict_name(d->verdict), d->rule, d->message, verdict_name(v), rule ? rule : "(any)",
                 msg ? msg : "(any)");
}
#define EXPECT(d, v, rule, msg) expect_at(HERE, (d), (v), (rule), (msg))

/* "...; retry in N s" with N = ceil(retry_after_ms / 1000) */
static inline void expect_retry_at(const char *from, const struct tg_decision *d, uint64_t retry_ms)
{
    if (d->verdict != TG_VERDICT_LIMITED || d->retry_after_ms != retry_ms)
        fail_msg("%s: got %s retry_after_ms %llu (\"%s\"); expected LIMITED retry_after_ms %llu", from,
                 verdict_name(d->verdict), (unsigned long long)d->retry_after_ms, d->message,
                 (unsigned long long)retry_ms);
    char tail[64];
    snprintf(tail, sizeof(tail), "; retry in %llu s", (unsigned long long)((retry_ms + 999) / 1000));
    size_t n = strlen(d->message), k = strlen(tail);
    if (n < k || strcmp(d->message + n - k, tail) != 0)
        fail_msg("%s: message \"%s\" does not end in \"%s\"", from, d->message, tail);
}
#define EXPECT_RETRY(d, ms) expect_retry_at(HERE, (d), (ms))

/* Token buckets round the hint up by a millisecond when max/window does not divide evenly in
 * binary floating point: accept ms or ms + 1, with a message that matches the value given. */
static inline void expect_retry_near_at(const char *from, const struct tg_decision *d, uint64_t ms)
{
    if (d->retry_after_ms != ms && d->retry_after_ms != ms + 1)
        fail_msg("%s: retry_after_ms %llu, expected %llu (+1)", from, (unsigned long long)d->retry_after_ms,
                 (unsigned long long)ms);
    expect_retry_at(from, d, d->retry_after_ms);
}
#define EXPECT_RETRY_NEAR(d, ms) expect_retry_near_at(HERE, (d), (ms))

/* One call of a scenario and the decision it must get. A table of them is walked in order by
 * RUN_CALLS against one policy and one set of counters, so that counts carry from one call to
 * the next; a failure names the table's label, the call's index, its tool and its arguments.
 * rule and msg are checked as EXPECT checks them; retry_ms (when not 0) as EXPECT_RETRY, or as
 * EXPECT_RETRY_NEAR with retry_near; counter and counters_json (when not NULL) are d.counter and
 * d.counters_json; msg_has (when not NULL) is somewhere in d.message; res (when not 0, written RES(n)) is n, the reservations the decision holds; vis
 * (when not 0) is what tg_policy_tool_visible says of the tool; session and upstream NULL are
 * "sess-1" and "up", as decide() calls; subject NULL is the grant's own. allowed (when not 0, written ALLOWED(n)) makes the row a drain: n calls are
 * allowed (or approved) first, and the checks are of the call that is then refused. */
enum { SHOWN = 1, HIDDEN = 2 };
#define RES(n) ((n) + 1)
#define ALLOWED(n) ((n) + 1)

struct call {
    const char *grant, *tool, *args;
    int64_t at;
    enum tg_verdict v;
    const char *rule, *msg;
    uint64_t retry_ms;
    int retry_near;
    const char *counter, *counters_json, *msg_has;
    int res, vis, allowed;
    const char *session, *upstream;
    const char *subject; /* who inside the grant (NULL: the grant's own) */
    const char *issuer;  /* its JWT's issuer (NULL: none) */
};

/* A row of a call table: the call and the decision it must get, then any of the checks after
 * msg by name (.retry_ms = MIN_MS, .vis = HIDDEN, ...). Every field is named, so that the rows
 * that check nothing more leave the rest zero without a -Wmissing-field-initializers warning. */
#define CALL(g, t, a, when, verdict, r, ...)                                                                     \
    {                                                                                                          \
        .grant = (g), .tool = (t), .args = (a), .at = (when), .v = (verdict), .rule = (r), .msg = __VA_ARGS__ \
    }

static inline void run_calls_at(const char *from, const char *label, const struct tg_policy *p, struct tg_counters *c,
                                const struct call *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct tg_decision d;
        char name[400];
        snprintf(name, sizeof(name), "%s: %s call %zu, %s(%s) for %s", from, label, i, k[i].tool,
                 k[i].args ? k[i].args : "NULL", k[i].grant);
        int n_ok = 0;
        for (;;) {
            struct tg_caller who = {k[i].grant, k[i].session ? k[i].session : "sess-1",
                                    k[i].upstream ? k[i].upstream : "up", k[i].subject, k[i].issuer};
            cJSON *a = k[i].args ? J(k[i].args) : NULL;
            tg_policy_decide_call(p, c, &who, k[i].tool, a, k[i].at, &d);
            cJSON_Delete(a);
            if (!k[i].allowed || (d.verdict != TG_VERDICT_ALLOW && d.verdict != TG_VERDICT_APPROVE))
                break;
            if (++n_ok == k[i].allowed)
                fail_msg("%s: more than %d calls allowed", name, k[i].allowed - 1);
        }
        if (k[i].allowed && n_ok != k[i].allowed - 1)
            fail_msg("%s: %d calls allowed, expected %d", name, n_ok, k[i].allowed - 1);
        expect_at(name, &d, k[i].v, k[i].rule, k[i].msg);
        if (k[i].retry_ms && k[i].retry_near)
            expect_retry_near_at(name, &d, k[i].retry_ms);
        else if (k[i].retry_ms)
            expect_retry_at(name, &d, k[i].retry_ms);
        if (k[i].counter && strcmp(d.counter, k[i].counter) != 0)
            fail_msg("%s: counter \"%s\", expected \"%s\"", name, d.counter, k[i].counter);
        if (k[i].counters_json && strcmp(d.counters_json, k[i].counters_json) != 0)
            fail_msg("%s: counters_json \"%s\", expected \"%s\"", name, d.counters_json, k[i].counters_json);
        if (k[i].msg_has && strstr(d.message, k[i].msg_has) == NULL)
            fail_msg("%s: message \"%s\" does not hold \"%s\"", name, d.message, k[i].msg_has);
        if (k[i].res && d.nres != k[i].res - 1)
            fail_msg("%s: %d reservations, expected %d", name, d.nres, k[i].res - 1);
        if (k[i].vis && tg_policy_tool_visible(p, k[i].tool) != (k[i].vis == SHOWN))
            fail_msg("%s: visible %d, expected %d", name, tg_policy_tool_visible(p, k[i].tool), k[i].vis == SHOWN);
    }
}
#define RUN_CALLS(label, p, c, calls) run_calls_at(HERE, (label), (p), (c), (calls), sizeof(calls) / sizeof((calls)[0]))

/* Calls that a tool's own rule decides: ALLOW, or DENY by the rule named as the tool. A table
 * walked by EXPECT_OWN_RULE, one call each at T0 with fresh counters for the table. */
struct own_rule_case {
    const char *tool, *args;
    int allow;
};

static inline void expect_own_rule_at(const char *from, const struct tg_policy *p, const struct own_rule_case *k,
                                      size_t n)
{
    struct tg_counters *c = tg_counters_new();
    for (size_t i = 0; i < n; i++) {
        struct tg_decision d;
        decide(p, c, "g", k[i].tool, k[i].args, T0, &d);
        int allowed = d.verdict == TG_VERDICT_ALLOW;
        if (allowed != k[i].allow || (!allowed && (d.verdict != TG_VERDICT_DENY || strcmp(d.rule, k[i].tool))))
            fail_msg("%s: case %zu, %s(%s): got %s rule \"%s\" \"%s\", expected %s", from, i, k[i].tool, k[i].args,
                     verdict_name(d.verdict), d.rule, d.message, k[i].allow ? "ALLOW" : "DENY by its rule");
    }
    tg_counters_free(c);
}
#define EXPECT_OWN_RULE(p, cases) expect_own_rule_at(HERE, (p), (cases), sizeof(cases) / sizeof((cases)[0]))

/* What tools/list shows of each tool named: a table walked by EXPECT_SHOWN. */
struct shown {
    const char *tool;
    int visible;
};

static inline void expect_shown_at(const char *from, const struct tg_policy *p, const struct shown *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (tg_policy_tool_visible(p, w[i].tool) != w[i].visible)
            fail_msg("%s: %s: visible %d, expected %d", from, w[i].tool, tg_policy_tool_visible(p, w[i].tool),
                     w[i].visible);
}
#define EXPECT_SHOWN(p, table) expect_shown_at(HERE, (p), (table), sizeof(table) / sizeof((table)[0]))

/* The fixture pair NAME.json and NAME.yaml: the calls against each, with counters of its own. */
static inline void run_calls_on_pair_at(const char *from, const char *name, const struct call *k, size_t n)
{
    for (int y = 0; y < 2; y++) {
        char file[64], path[512];
        snprintf(file, sizeof(file), "%s.%s", name, y ? "yaml" : "json");
        snprintf(path, sizeof(path), FIX "%s", file);
        struct tg_policy *p = load_ok_at(from, path);
        struct tg_counters *c = tg_counters_new();
        run_calls_at(from, file, p, c, k, n);
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}
#define RUN_CALLS_ON_PAIR(name, calls) run_calls_on_pair_at(HERE, (name), (calls), sizeof(calls) / sizeof((calls)[0]))

/* Call `tool` until it is not allowed; returns how many calls were allowed (at most `max`). */
static inline int drain(const struct tg_policy *p, struct tg_counters *c, const char *grant, const char *tool,
                        const char *args, int64_t now, int max, struct tg_decision *last)
{
    for (int i = 0; i < max; i++) {
        decide(p, c, grant, tool, args, now, last);
        if (last->verdict != TG_VERDICT_ALLOW && last->verdict != TG_VERDICT_APPROVE)
            return i;
    }
    return max;
}

/* Write text to a fresh file named `name` in a private directory and load it. */
struct loaded {
    char dir[64];
    char path[160];
    struct tg_buf err, warn;
    struct tg_policy *p;
    int rc;
};

static inline void load_text(struct loaded *l, const char *name, const char *text)
{
    memset(l, 0, sizeof(*l));
    snprintf(l->dir, sizeof(l->dir), "/tmp/tg-policy-XXXXXX");
    if (mkdtemp(l->dir) == NULL)
        fail_msg("mkdtemp failed");
    snprintf(l->path, sizeof(l->path), "%s/%s", l->dir, name);
    FILE *f = fopen(l->path, "wb");
    assert_non_null(f);
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    tg_buf_init(&l->err);
    tg_buf_init(&l->warn);
    l->rc = tg_policy_load(l->path, &l->p, &l->err, &l->warn);
    unlink(l->path);
    rmdir(l->dir);
}

/* load_text, and the load must succeed (warnings allowed: the caller checks l->warn if it cares). */
static inline void load_text_ok_at(const char *from, struct loaded *l, const char *name, const char *text)
{
    load_text(l, name, text);
    if (l->rc != 0 || l->p == NULL)
        fail_msg("%s: %s refused:\n%s", from, name, buf_str(&l->err));
}
#define LOAD_TEXT_OK(l, name, text) load_text_ok_at(HERE, (l), (name), (text))

static inline void loaded_dispose(struct loaded *l)
{
    tg_policy_unref(l->p);
    tg_buf_dispose(&l->err);
    tg_buf_dispose(&l->warn);
}

/* The load must fail, and the errors must hold "PATH: where: what"; where "" means "PATH" + what,
 * where NULL means the file's path and `what` anywhere. */
static inline void expect_error_at(const char *from, const char *name, const char *text, const char *where,
                                   const char *what)
{
    struct loaded l;
    load_text(&l, name, text);
    char want[600];
    if (where == NULL)
        snprintf(want, sizeof(want), "%s", l.path);
    else if (where[0])
        snprintf(want, sizeof(want), "%s: %s: %s", l.path, where, what);
    else
        snprintf(want, sizeof(want), "%s%s", l.path, what);
    if (l.rc == 0 || l.p != NULL)
        fail_msg("%s: %s loaded; expected an error \"%s\"", from, name, want);
    if (strstr(buf_str(&l.err), want) == NULL || (where == NULL && strstr(buf_str(&l.err), what) == NULL))
        fail_msg("%s: errors do not contain \"%s\"%s%s:\n%s", from, want, where ? "" : " and ",
                 where ? "" : what, buf_str(&l.err));
    loaded_dispose(&l);
}
#define EXPECT_ERROR(name, text, where, what) expect_error_at(HERE, (name), (text), (where), (what))

/* A table of loads that must fail, walked by EXPECT_ERRORS; a failure names the case's index. */
struct load_error {
    const char *name, *text, *where, *what;
};

static inline void expect_errors_at(const char *from, const struct load_error *e, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char label[200];
        snprintf(label, sizeof(label), "%s: case %zu (%s)", from, i, e[i].name);
        expect_error_at(label, e[i].name, e[i].text, e[i].where, e[i].what);
    }
}
#define EXPECT_ERRORS(cases) expect_errors_at(HERE, (cases), sizeof(cases) / sizeof((cases)[0]))

/* A policy whose one tool "x" has the rules given (JSON array text): WITH_RULES for a string
 * literal, with_rules for text made at run time. */
#define WITH_RULES(rules) "{\"version\":\"1\",\"tools\":{\"x\":{\"rules\":" rules "}}}"

/* with_rules: see WITH_RULES. */
static inline char *with_rules(char *out, size_t n, const char *rules)
{
    snprintf(out, n, "{\"version\":\"1\",\"tools\":{\"x\":{\"rules\":%s}}}", rules);
    return out;
}

#endif
