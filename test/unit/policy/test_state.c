/* policy/decide.c's Intercept state: rate_limit shorthands, state counters with increment and
 * increment_from (spend caps, with no float dust), fixed windows aligned to UTC, per-grant,
 * per-session, global and per-upstream counters, and refunds of window counts. */
#include "test/unit/policy/policy_helpers.h"

#define ALLOW TG_VERDICT_ALLOW
#define DENY TG_VERDICT_DENY
#define LIMITED TG_VERDICT_LIMITED

/* ---- Intercept state: counters, windows, scopes, refunds -------------------------------- */

static void rate_limit_shorthand(void **state)
{
    static const struct call calls[] = {
        /* 3/hour: three calls pass, the fourth is LIMITED until the top of the hour. */
        CALL("g", "create_issue", "{}", T0 + 1234, LIMITED, "hourly issue limit",
             "Rate limit of 3 per hour reached. Try again later.*", .allowed = ALLOWED(3),
             .retry_ms = HOUR_MS / 2 - 1234, .counter = "create_issue._rate_hour", .res = RES(0)),
        CALL("g", "create_issue", "{}", T0 + HOUR_MS / 2 - 1, LIMITED, NULL, NULL, .retry_ms = 1),
        CALL("g", "create_issue", "{}", T0 + HOUR_MS / 2, ALLOW, "", NULL),
        /* 2/minute with on_deny. */
        CALL("g", "create_pr", NULL, T0 + 30000, LIMITED, "pr limit", "PR limit reached; retry in 30 s",
             .allowed = ALLOWED(2), .retry_ms = 30000, .counter = "create_pr._rate_minute"),
        /* 1 ms before the minute ends: 1 s to wait, rounded up. */
        CALL("g", "create_pr", NULL, T0 + MIN_MS - 1, LIMITED, "pr limit", "PR limit reached; retry in 1 s"),
        CALL("g", "create_pr", NULL, T0 + MIN_MS, REFUSED, NULL, NULL, .allowed = ALLOWED(2)),
    };
    RUN_CALLS_ON_PAIR("intercept", calls);
}

static void state_increment_and_lt_vs_lte(void **state)
{
    static const struct call calls[] = {
        /* increment 5, lte 12: 5 and 10 pass, 15 would pass the limit. The condition itself
         * (10 <= 12) holds; the reservation refuses. */
        CALL("g", "bulk_op", "{}", T0, LIMITED, "bulk units", "Bulk unit budget spent; retry in 1800 s",
             .allowed = ALLOWED(2), .retry_ms = HOUR_MS / 2, .counter = "bulk_op.units"),
        /* lt 3 allows 2 (lt N means N-1); lte 3 (create_issue, 3/hour) allows 3. */
        CALL("g", "create_refund", "{}", T0, LIMITED, "daily refund count", "*", .allowed = ALLOWED(2),
             .msg_has = "daily refund count", .retry_ms = (uint64_t)(DAY_END - T0),
             .counter = "create_refund.daily_count"),
        CALL("g", "create_issue", "{}", T0, REFUSED, NULL, NULL, .allowed = ALLOWED(3)),
    };
    RUN_CALLS_ON_PAIR("intercept", calls);
}

static void state_increment_from_args(void **state)
{
    static const struct call calls[] = {
        /* the day counter and the wildcard's minute counter */
        CALL("g", "create_charge", "{\"amount\":40000}", T0, ALLOW, "", NULL, .res = RES(2)),
        CALL("g", "create_charge", "{\"amount\":40000}", T0, ALLOW, "", NULL),
        /* 80000 + 30000 > 100000: refused, nothing reserved. */
        CALL("g", "create_charge", "{\"amount\":30000}", T0, LIMITED, "daily spend cap",
             "Daily spending cap reached; retry in *", .res = RES(0)),
        /* Exactly to the limit passes; then even 1 does not. */
        CALL("g", "create_charge", "{\"amount\":20000}", T0, ALLOW, "", NULL),
        CALL("g", "create_charge", "{\"amount\":1}", T0, LIMITED, "daily spend cap", NULL),
        /* The argument condition of the first rule denies before any counter is looked at. */
        CALL("g", "create_charge", "{\"amount\":60000}", T0, DENY, "max single charge",
             "Single charge cannot exceed 500.00"),
        /* Another grant has its own day. */
        CALL("g2", "create_charge", "{\"amount\":50000}", T0, ALLOW, "", NULL),
        /* The next UTC day starts from zero. */
        CALL("g", "create_charge", "{\"amount\":50000}", DAY_END, ALLOW, "", NULL),
    };
    RUN_CALLS_ON_PAIR("intercept", calls);
}

/* increment_from naming an argument that is missing or not a number: DENY, nothing reserved. */
static void state_increment_from_missing_or_not_a_number(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "spend.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  spend:\n"
                 "    rules:\n"
                 "      - name: budget\n"
                 "        conditions: [{path: state.spend.cost, op: lte, value: 10}]\n"
                 "        state: {counter: cost, window: day, increment_from: args.order.cost}\n"
                 "      - name: calls\n"
                 "        rate_limit: 100/minute\n");
    struct tg_counters *c = tg_counters_new();
#define WHY(what) "spend: args.order.cost, which counts toward \"budget\", " what
    static const struct call calls[] = {
        CALL("g", "spend", NULL, T0, DENY, "budget", WHY("is missing"), .res = RES(0)),
        CALL("g", "spend", "{}", T0, DENY, "budget", WHY("is missing"), .res = RES(0)),
        CALL("g", "spend", "{\"order\":{}}", T0, DENY, "budget", WHY("is missing"), .res = RES(0)),
        CALL("g", "spend", "{\"order\":{\"cost\":\"3\"}}", T0, DENY, "budget", WHY("is a string, not a number"),
             .res = RES(0)),
        CALL("g", "spend", "{\"order\":{\"cost\":null}}", T0, DENY, "budget", WHY("is null, not a number"),
             .res = RES(0)),
        CALL("g", "spend", "{\"order\":{\"cost\":[3]}}", T0, DENY, "budget", WHY("is a list, not a number"),
             .res = RES(0)),
        CALL("g", "spend", "{\"order\":{\"cost\":true}}", T0, DENY, "budget", WHY("is a boolean, not a number"),
             .res = RES(0)),
        CALL("g", "spend", "{\"order\":3}", T0, DENY, "budget", WHY("is missing"), .res = RES(0)),
        CALL("g", "spend", "{\"order\":{\"cost\":-1}}", T0, DENY, "budget",
             WHY("is -1: a negative amount cannot count")),
        /* Nothing above counted: the 100/minute rule still has all its calls, the budget all of its 10. */
        CALL("g", "spend", "{\"order\":{\"cost\":6.9}}", T0, ALLOW, "", NULL), /* 6.9, not Intercept's int64() 6 */
        CALL("g", "spend", "{\"order\":{\"cost\":4}}", T0, LIMITED, "budget", "budget; retry in *"), /* 10.9 > 10 */
        CALL("g", "spend", "{\"order\":{\"cost\":3.1}}", T0, ALLOW, "", NULL, /* exactly 10 */
             .counters_json = "\"spend.cost\":10,\"spend._rate_minute\":2"),
        CALL("g", "spend", "{\"order\":{\"cost\":1}}", T0, LIMITED, "budget", "budget; retry in *"),
        CALL("g", "spend", "{\"order\":{\"cost\":0}}", T0, ALLOW, "", NULL), /* 10 + 0 <= 10 */
        CALL("g", "spend", "{\"order\":{\"cost\":0}}", T0, LIMITED, "calls", NULL, .allowed = ALLOWED(100 - 3)),
    };
#undef WHY
    RUN_CALLS("spend.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* A state counter whose own rule sets no limit on it still counts every allowed call, so that
 * another rule's condition on it limits (it was never added to: the condition read 0 for ever). */
static void state_counter_read_by_another_rule(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "sends.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  send_email:\n"
                 "    rules:\n"
                 "      - name: count sends\n"
                 "        conditions: [{path: args.to, op: exists, value: true}]\n"
                 "        state: {counter: sends, window: hour}\n"
                 "      - name: two an hour\n"
                 "        conditions: [{path: state.send_email.sends, op: lt, value: 2}]\n");
    struct tg_counters *c = tg_counters_new();
    static const struct call calls[] = {
        CALL("g", "send_email", "{\"to\":\"a@b\"}", T0, LIMITED, "two an hour", "two an hour; retry in *",
             .allowed = ALLOWED(2)),
        /* The next hour: the counter is fresh again. */
        CALL("g", "send_email", "{\"to\":\"a@b\"}", T0 + HOUR_MS, ALLOW, "", NULL),
    };
    RUN_CALLS("sends.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* Spend caps count the amount the call carries, not its integer part: eight charges of 0.9 do
 * not pass a cap of 5 (Intercept's int64() counts each as 0), 0.5 + 0.4 is under "lt 1" and a
 * further 0.1 is not, and what the counter holds is what a state condition reads. */
static void spend_caps_count_fractional_amounts(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "frac.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  pay:\n"
                 "    rules:\n"
                 "      - name: cap\n"
                 "        conditions: [{path: state.pay.spend, op: lte, value: 5}]\n"
                 "        state: {counter: spend, window: day, increment_from: args.amount}\n"
                 "  tip:\n"
                 "    rules:\n"
                 "      - name: under one\n"
                 "        conditions: [{path: state.tip.total, op: lt, value: 1}]\n"
                 "        state: {counter: total, window: day, increment_from: args.amount}\n"
                 "  report:\n"
                 "    rules:\n"
                 "      - name: big spenders only\n"
                 "        conditions: [{path: state.pay.spend, op: gte, value: 4.5}]\n");
    struct tg_counters *c = tg_counters_new();
    static const struct call calls[] = {
        CALL("g", "report", "{}", T0, LIMITED, "big spenders only", NULL), /* a state condition that fails is LIMITED */
        CALL("g", "pay", "{\"amount\":0.9}", T0, LIMITED, "cap", NULL, .allowed = ALLOWED(5),
             .counters_json = "\"pay.spend\":4.5"),
        /* 4.5 spent: the condition reads 4.5 (a truncated 4 would deny). */
        CALL("g", "report", "{}", T0, ALLOW, "", NULL),
        /* 4.5 + 0.5 is exactly the cap. */
        CALL("g", "pay", "{\"amount\":0.5}", T0, ALLOW, "", NULL, .counters_json = "\"pay.spend\":5"),
        CALL("g", "pay", "{\"amount\":0.001}", T0, LIMITED, "cap", NULL),
        /* lt 1: 0.5 and 0.4 pass (0.9 < 1); 0.1 more would make 1, which is not below 1. */
        CALL("g", "tip", "{\"amount\":0.5}", T0, ALLOW, "", NULL),
        CALL("g", "tip", "{\"amount\":0.4}", T0, ALLOW, "", NULL),
        CALL("g", "tip", "{\"amount\":0.1}", T0, LIMITED, "under one", NULL),
        CALL("g", "tip", "{\"amount\":0.09}", T0, ALLOW, "", NULL, .counters_json = "\"tip.total\":0.99"),
    };
    RUN_CALLS("frac.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* A negative amount would give budget back, and one that is not a finite number cannot be
 * counted at all: both are refused by the argument's own value (-0.5 is not rounded to 0 first),
 * with a reason that names the argument, and nothing is reserved. */
static void spend_caps_refuse_negative_and_non_finite_amounts(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "neg.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  pay:\n"
                 "    rules:\n"
                 "      - name: cap\n"
                 "        conditions: [{path: state.pay.spend, op: lte, value: 5}]\n"
                 "        state: {counter: spend, window: day, increment_from: args.amount}\n");
    struct tg_counters *c = tg_counters_new();
#define WHY(what) "pay: args.amount, which counts toward \"cap\", " what
    static const struct call calls[] = {
        CALL("g", "pay", "{\"amount\":-0.5}", T0, DENY, "cap", WHY("is -0.5: a negative amount cannot count"),
             .res = RES(0)),
        CALL("g", "pay", "{\"amount\":-1e-300}", T0, DENY, "cap", WHY("is -1e-300: a negative amount cannot count"),
             .res = RES(0)),
        CALL("g", "pay", "{\"amount\":-7}", T0, DENY, "cap", WHY("is -7: a negative amount cannot count"), .res = RES(0)),
        CALL("g", "pay", "{\"amount\":1e400}", T0, DENY, "cap", WHY("is 1e400, not a finite number"), .res = RES(0)),
        CALL("g", "pay", "{\"amount\":-1e400}", T0, DENY, "cap", WHY("is -1e400, not a finite number"), .res = RES(0)),
        CALL("g", "pay", "{\"amount\":\"0.5\"}", T0, DENY, "cap", WHY("is a string, not a number"), .res = RES(0)),
        CALL("g", "pay", "{\"amount\":{\"value\":1}}", T0, DENY, "cap", WHY("is a map, not a number"), .res = RES(0)),
        /* Nothing was counted (or given back): the whole cap is still there, and no more. */
        CALL("g", "pay", "{\"amount\":5}", T0, ALLOW, "", NULL),
        CALL("g", "pay", "{\"amount\":0.5}", T0, LIMITED, "cap", NULL),
        /* -0 is zero, not a negative amount. */
        CALL("g", "pay", "{\"amount\":-0.0}", T0, ALLOW, "", NULL),
    };
#undef WHY
    RUN_CALLS("neg.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* Decimal fractions have no exact binary form, and plain double sums leave dust: 0.1 + 0.2 is
 * 0.30000000000000004 (over a cap of 0.3) and giving both back leaves 2.8e-17, not 0. The
 * counter keeps 15 significant digits, so the sum is the decimal one and a refund goes back to
 * exactly where it was. */
static void spend_caps_leave_no_float_dust(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "dust.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  pay:\n"
                 "    rules:\n"
                 "      - name: cap\n"
                 "        conditions: [{path: state.pay.spend, op: lte, value: 0.3}]\n"
                 "        state: {counter: spend, window: day, increment_from: args.amount}\n");
    struct tg_counters *c = tg_counters_new();
    struct tg_decision a, b, d;
    decide(l.p, c, "g", "pay", "{\"amount\":0.1}", T0, &a);
    EXPECT(&a, TG_VERDICT_ALLOW, "", NULL);
    decide(l.p, c, "g", "pay", "{\"amount\":0.2}", T0, &b);
    EXPECT(&b, TG_VERDICT_ALLOW, "", NULL);
    assert_string_equal(b.counters_json, "\"pay.spend\":0.3");
    decide(l.p, c, "g", "pay", "{\"amount\":0}", T0, &d); /* 0.3 + 0 <= 0.3 */
    EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
    decide(l.p, c, "g", "pay", "{\"amount\":1e-9}", T0, &d);
    EXPECT(&d, TG_VERDICT_LIMITED, "cap", NULL);
    assert_string_equal(d.counters_json, "\"pay.spend\":0.3");
    tg_policy_refund(c, &a, T0);
    tg_policy_refund(c, &b, T0);
    decide(l.p, c, "g", "pay", "{\"amount\":0}", T0, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
    assert_string_equal(d.counters_json, "\"pay.spend\":0");
    tg_counters_free(c);
    loaded_dispose(&l);
    /* Ten tenths are one (a plain double sum is 0.9999999999999999), and 0.7 + 0.2 + 0.1 with the
     * 0.2 given back is 0.8. */
    LOAD_TEXT_OK(&l, "tenths.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  pay:\n"
                 "    rules:\n"
                 "      - name: cap\n"
                 "        conditions: [{path: state.pay.spend, op: lte, value: 1}]\n"
                 "        state: {counter: spend, window: day, increment_from: args.amount}\n");
    c = tg_counters_new();
    assert_int_equal(drain(l.p, c, "g", "pay", "{\"amount\":0.1}", T0, 20, &d), 10);
    decide(l.p, c, "g", "pay", "{\"amount\":0}", T0, &d);
    assert_string_equal(d.counters_json, "\"pay.spend\":1");
    decide(l.p, c, "g2", "pay", "{\"amount\":0.7}", T0, &d);
    decide(l.p, c, "g2", "pay", "{\"amount\":0.2}", T0, &a);
    decide(l.p, c, "g2", "pay", "{\"amount\":0.1}", T0, &d);
    assert_string_equal(d.counters_json, "\"pay.spend\":1");
    tg_policy_refund(c, &a, T0);
    decide(l.p, c, "g2", "pay", "{\"amount\":0}", T0, &d);
    assert_string_equal(d.counters_json, "\"pay.spend\":0.8");
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* Windows are fixed and aligned to UTC: minute, hour, day boundaries reset them. */
static void windows_reset_at_utc_boundaries(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "windows.json",
                 "{\"version\":\"1\",\"tools\":{"
                 "\"m\":{\"rules\":[{\"name\":\"m\",\"rate_limit\":\"1/minute\"}]},"
                 "\"h\":{\"rules\":[{\"name\":\"h\",\"rate_limit\":\"1/hour\"}]},"
                 "\"d\":{\"rules\":[{\"name\":\"d\",\"rate_limit\":\"1/day\"}]}}}");
    struct tg_counters *c = tg_counters_new();
    static const struct call calls[] = {
        /* 23:59:59.000 on 2024-03-10: one call each, then each is limited to its own boundary
         * (all three windows end at midnight). */
        CALL("g", "m", NULL, DAY_END - 1000, ALLOW, "", NULL),
        CALL("g", "m", NULL, DAY_END - 1, LIMITED, NULL, NULL, .retry_ms = 1),
        CALL("g", "h", NULL, DAY_END - 1000, ALLOW, "", NULL),
        CALL("g", "h", NULL, DAY_END - 1, LIMITED, NULL, NULL, .retry_ms = 1),
        CALL("g", "d", NULL, DAY_END - 1000, ALLOW, "", NULL),
        CALL("g", "d", NULL, DAY_END - 1, LIMITED, NULL, NULL, .retry_ms = 1),
        CALL("g", "m", NULL, DAY_END, ALLOW, "", NULL),
        CALL("g", "h", NULL, DAY_END, ALLOW, "", NULL),
        CALL("g", "d", NULL, DAY_END, ALLOW, "", NULL),
        /* 00:00:30: the minute ends in 30 s, the hour in 59.5 min, the day in 23.99 h. */
        CALL("g", "m", NULL, DAY_END + 30000, LIMITED, NULL, NULL, .retry_ms = 30000),
        CALL("g", "h", NULL, DAY_END + 30000, LIMITED, NULL, NULL, .retry_ms = (uint64_t)(HOUR_MS - 30000)),
        CALL("g", "d", NULL, DAY_END + 30000, LIMITED, NULL, NULL, .retry_ms = (uint64_t)(24 * HOUR_MS - 30000)),
        /* A new minute, not a sliding one: 00:01:00.000 passes though the last call was 60 s ago minus 0. */
        CALL("g", "m", NULL, DAY_END + MIN_MS, ALLOW, "", NULL),
        CALL("g", "h", NULL, DAY_END + HOUR_MS - 1, LIMITED, NULL, NULL, .retry_ms = 1),
        CALL("g", "h", NULL, DAY_END + HOUR_MS, ALLOW, "", NULL),
        CALL("g", "d", NULL, DAY_END + 24 * HOUR_MS - 1, LIMITED, NULL, NULL, .retry_ms = 1),
        CALL("g", "d", NULL, DAY_END + 24 * HOUR_MS, ALLOW, "", NULL),
    };
    RUN_CALLS("windows.json", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

static void counters_are_per_grant_and_per_upstream(void **state)
{
    static const struct call calls[] = {
        CALL("grant-a", "create_issue", NULL, T0, REFUSED, NULL, NULL, .allowed = ALLOWED(3)),
        CALL("grant-b", "create_issue", NULL, T0, REFUSED, NULL, NULL, .allowed = ALLOWED(3)),
        /* Another session of grant-a shares grant-a's counter. */
        CALL("grant-a", "create_issue", NULL, T0, LIMITED, "hourly issue limit", NULL, .session = "other-session"),
        /* The same grant behind another upstream has its own counters. */
        CALL("grant-a", "create_issue", NULL, T0, ALLOW, "", NULL, .upstream = "other-upstream"),
        /* Grant names are compared exactly. */
        CALL("Grant-a", "create_issue", NULL, T0, REFUSED, NULL, NULL, .allowed = ALLOWED(3)),
        CALL("grant-a ", "create_issue", NULL, T0, REFUSED, NULL, NULL, .allowed = ALLOWED(3)),
    };
    RUN_CALLS_ON_PAIR("intercept", calls);
}

/* tollgate extension: an Intercept state block may say scope: session or global. */
static void state_scopes_session_and_global(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "scopes.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  per_session:\n"
                 "    rules:\n"
                 "      - name: s\n"
                 "        conditions: [{path: state.per_session.n, op: lte, value: 2}]\n"
                 "        state: {counter: n, window: hour, scope: session}\n"
                 "  everyone:\n"
                 "    rules:\n"
                 "      - name: e\n"
                 "        conditions: [{path: state.everyone.n, op: lte, value: 3}]\n"
                 "        state: {counter: n, window: hour, scope: global}\n");
    struct tg_counters *c = tg_counters_new();
    static const struct call calls[] = {
        CALL("g1", "per_session", NULL, T0, ALLOW, "", NULL, .session = "s1"),
        CALL("g1", "per_session", NULL, T0, ALLOW, "", NULL, .session = "s1"),
        CALL("g1", "per_session", NULL, T0, LIMITED, "s", NULL, .session = "s1"),
        CALL("g1", "per_session", NULL, T0, ALLOW, "", NULL, .session = "s2"),
        CALL("g1", "everyone", NULL, T0, ALLOW, "", NULL, .session = "s1"),
        CALL("g2", "everyone", NULL, T0, ALLOW, "", NULL, .session = "s9"),
        CALL("g3", "everyone", NULL, T0, ALLOW, "", NULL, .session = "s8"),
        CALL("g4", "everyone", NULL, T0, LIMITED, "e", NULL, .session = "s7", .retry_ms = HOUR_MS / 2),
    };
    RUN_CALLS("scopes.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* The Intercept shape takes scope: subject too: a state counter per user inside the grant. */
static void state_scope_subject(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "subject.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  query:\n"
                 "    rules:\n"
                 "      - name: per-user\n"
                 "        conditions: [{path: state.query.n, op: lte, value: 1}]\n"
                 "        state: {counter: n, window: hour, scope: subject}\n"
                 "      - name: per-team\n"
                 "        conditions: [{path: state.query.t, op: lte, value: 2}]\n"
                 "        state: {counter: t, window: hour}\n");
    struct tg_counters *c = tg_counters_new();
    static const struct call calls[] = {
        CALL("staff", "query", NULL, T0, ALLOW, "", NULL, .subject = "alice"),
        CALL("staff", "query", NULL, T0, LIMITED, "per-user", NULL, .subject = "alice", .retry_ms = HOUR_MS / 2),
        CALL("staff", "query", NULL, T0, ALLOW, "", NULL, .subject = "bob"),
        CALL("staff", "query", NULL, T0, LIMITED, "per-user", NULL, .subject = "bob", .session = "s2",
             .retry_ms = HOUR_MS / 2),
        /* carol has a count of her own left, but the grant's counter is spent by alice and bob */
        CALL("staff", "query", NULL, T0, LIMITED, "per-team", NULL, .subject = "carol", .retry_ms = HOUR_MS / 2),
        CALL("other", "query", NULL, T0, ALLOW, "", NULL, .subject = "alice"),
    };
    RUN_CALLS("subject.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

static void wildcard_counter_is_global_scope_across_tools(void **state)
{
    static const struct call after[] = {
        CALL("g", "free", NULL, T0 + 20000, LIMITED, "global rate", "Global rate limit reached; retry in 40 s",
             .retry_ms = 40000, .counter = "_global.calls_per_minute"),
        /* The wildcard's counter is per grant, like any other without a scope. */
        CALL("h", "free", NULL, T0 + 20000, ALLOW, "", NULL),
        CALL("g", "free", NULL, T0 + MIN_MS, ALLOW, "", NULL),
    };
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept.yaml" : "intercept.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        static const char *const tools[] = {"free", "unlisted_a", "eq_str", "unlisted_b"};
        static const char *const args[] = {NULL, "{}", "{\"v\":\"main\"}", "{\"q\":1}"};
        for (int i = 0; i < 100; i++) {
            decide(p, c, "g", tools[i % 4], args[i % 4], T0 + 100 * i, &d);
            EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        }
        RUN_CALLS(y ? "yaml" : "json", p, c, after);
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

static void refund_restores_a_window_count(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept.yaml" : "intercept.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d, first, mid;
        decide(p, c, "g", "create_issue", NULL, T0, &first);
        EXPECT(&first, TG_VERDICT_ALLOW, "", NULL);
        assert_int_equal(first.nres, 2);
        decide(p, c, "g", "create_issue", NULL, T0 + 1, &mid);
        decide(p, c, "g", "create_issue", NULL, T0 + 2, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        decide(p, c, "g", "create_issue", NULL, T0 + 3, &d);
        EXPECT(&d, TG_VERDICT_LIMITED, NULL, NULL);
        /* The upstream call failed: its reservation comes back, one more call passes. */
        tg_policy_refund(c, &mid, T0 + 4);
        decide(p, c, "g", "create_issue", NULL, T0 + 5, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        decide(p, c, "g", "create_issue", NULL, T0 + 6, &d);
        EXPECT(&d, TG_VERDICT_LIMITED, NULL, NULL);
        /* Refunding a LIMITED or DENY decision gives nothing back. */
        tg_policy_refund(c, &d, T0 + 7);
        decide(p, c, "g", "create_issue", NULL, T0 + 8, &d);
        EXPECT(&d, TG_VERDICT_LIMITED, NULL, NULL);
        /* Next hour: one call; a late refund of a call from the previous hour does not touch it. */
        int64_t t1 = T0 + HOUR_MS / 2;
        decide(p, c, "g", "create_issue", NULL, t1, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        tg_policy_refund(c, &first, t1 + 1);
        assert_int_equal(drain(p, c, "g", "create_issue", NULL, t1 + 2, 10, &d), 2);
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

/* Refunding one decision twice is the caller's bug, but the count stays sane: never below zero,
 * so the limit is not raised. */
static void refund_never_goes_negative(void **state)
{
    struct tg_policy *p = load_fixture("intercept.json");
    struct tg_counters *c = tg_counters_new();
    struct tg_decision a, d;
    decide(p, c, "g", "create_issue", NULL, T0, &a);
    tg_policy_refund(c, &a, T0);
    tg_policy_refund(c, &a, T0);
    assert_int_equal(drain(p, c, "g", "create_issue", NULL, T0, 10, &d), 3);
    tg_counters_free(c);
    tg_policy_unref(p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rate_limit_shorthand),
        cmocka_unit_test(state_increment_and_lt_vs_lte),
        cmocka_unit_test(state_counter_read_by_another_rule),
        cmocka_unit_test(state_increment_from_args),
        cmocka_unit_test(state_increment_from_missing_or_not_a_number),
        cmocka_unit_test(spend_caps_count_fractional_amounts),
        cmocka_unit_test(spend_caps_refuse_negative_and_non_finite_amounts),
        cmocka_unit_test(spend_caps_leave_no_float_dust),
        cmocka_unit_test(windows_reset_at_utc_boundaries),
        cmocka_unit_test(counters_are_per_grant_and_per_upstream),
        cmocka_unit_test(state_scopes_session_and_global),
        cmocka_unit_test(state_scope_subject),
        cmocka_unit_test(wildcard_counter_is_global_scope_across_tools),
        cmocka_unit_test(refund_restores_a_window_count),
        cmocka_unit_test(refund_never_goes_negative),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
