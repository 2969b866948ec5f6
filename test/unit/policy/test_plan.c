/* policy/plan.c: a decision run against a store that answers later must be the decision the
 * local store gives, take exactly what it takes, and cost one round trip when every counter
 * fits. The "remote" here is a second local store, answered between passes the way the Redis
 * store answers (cluster/); the reference decides directly on its own store. */
#include "test/unit/unit.h"

#include "core/base/buf.h"
#include "policy/counters.h"
#include "policy/policy.h"
#include "test/unit/policy/policy_helpers.h"


static struct tg_policy *compile(const char *json)
{
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    if (tg_policy_compile(root, "test", &p, &err, &warn) != 0)
        fail_msg("policy did not compile: %.*s", (int)err.len, err.base);
    cJSON_Delete(root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    return p;
}

/* Decide through a plan against `remote`; returns the round trips it took, the gives sent after
 * the decision counting as one. */
static int planned(const struct tg_policy *p, struct tg_counters *remote, const struct tg_caller *who,
                   const char *tool, const cJSON *args, int64_t now, struct tg_decision *d, int *unsettled)
{
    size_t neffects;
    int trips = decide_through_plan(p, remote, who, tool, args, now, d, &neffects, unsettled);
    return trips + (neffects > 0);
}

static const char *const policies[] = {
    /* hosted token buckets, two on one tool, a wildcard one */
    "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{"
    "\"execute_code\":{\"limits\":[{\"counter\":\"exec\",\"window\":\"minute\",\"max\":3},"
    "{\"counter\":\"exec_hour\",\"window\":\"hour\",\"max\":5}]},"
    "\"read\":{\"action\":\"allow\"},\"deploy\":{\"action\":\"approve\",\"limits\":[{\"counter\":\"dep\",\"window\":60,\"max\":2,\"scope\":\"global\"}]},"
    "\"*\":{\"limits\":[{\"counter\":\"all\",\"window\":\"minute\",\"max\":6}]}}}",
    /* Intercept windows: conditions that read state, increments from arguments, rate_limit */
    "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{"
    "\"charge\":{\"rules\":[{\"name\":\"max\",\"conditions\":[{\"path\":\"args.amount\",\"op\":\"lte\",\"value\":50}]},"
    "{\"name\":\"cap\",\"conditions\":[{\"path\":\"state.charge.spend\",\"op\":\"lte\",\"value\":100}],"
    "\"state\":{\"counter\":\"spend\",\"window\":\"hour\",\"increment_from\":\"args.amount\"}}]},"
    "\"refund\":{\"rules\":[{\"name\":\"count\",\"conditions\":[{\"path\":\"state.refund.n\",\"op\":\"lt\",\"value\":2}],"
    "\"state\":{\"counter\":\"n\",\"window\":\"day\"}}]},"
    "\"after\":{\"rules\":[{\"name\":\"needs-refunds\",\"conditions\":[{\"path\":\"state.refund.n\",\"op\":\"gte\",\"value\":1}]}]},"
    "\"issue\":{\"rules\":[{\"name\":\"rl\",\"rate_limit\":\"3/hour\"},{\"name\":\"rl2\",\"rate_limit\":\"2/minute\"}]},"
    "\"bulk\":{\"rules\":[{\"name\":\"units\",\"conditions\":[{\"path\":\"state.bulk.u\",\"op\":\"lte\",\"value\":12}],"
    "\"state\":{\"counter\":\"u\",\"window\":\"hour\",\"increment\":5}}]}}}",
    /* a rule that only counts, and another that limits on what it counted: a refusal reports
     * the value the condition read, not one a later pass read past its own reservation */
    "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{"
    "\"tally\":{\"rules\":[{\"name\":\"count\",\"conditions\":[{\"path\":\"args.amount\",\"op\":\"exists\",\"value\":true}],"
    "\"state\":{\"counter\":\"n\",\"window\":\"minute\"}},"
    "{\"name\":\"three\",\"conditions\":[{\"path\":\"state.tally.n\",\"op\":\"lt\",\"value\":3}]}]}}}",
};

static const char *const tools[][7] = {
    {"execute_code", "read", "deploy", "other", "execute_code", "execute_code", NULL},
    {"charge", "refund", "after", "issue", "bulk", "charge", NULL},
    {"tally", "read", "tally", "other", "tally", "tally", NULL},
};

static const char *const argsets[] = {
    "{\"amount\":10}", "{\"amount\":49.9}", "{\"amount\":60}", "{\"amount\":-1}", "{\"amount\":\"x\"}", "{}", "{\"amount\":0.1}",
};

/* Random calls at random times: the plan and the direct decision agree on everything the caller
 * and the audit log see, call after call (so the remote holds what the local store holds). */
static void same_decisions_as_the_local_store(void **state)
{
    unsigned seed = 12345;
    for (size_t pi = 0; pi < sizeof(policies) / sizeof(policies[0]); pi++) {
        struct tg_policy *p = compile(policies[pi]);
        struct tg_counters *direct = tg_counters_new(), *remote = tg_counters_new();
        int64_t now = T0;
        int one_trip = 0, more = 0;
        for (int i = 0; i < 3000; i++) {
            seed = seed * 1103515245u + 12345u;
            const char *tool = tools[pi][(seed >> 8) % 6];
            const char *grant = (seed >> 4) & 1 ? "alice" : "bob";
            cJSON *args = cJSON_Parse(argsets[(seed >> 12) % 7]);
            now += (seed >> 16) % 4000;
            struct tg_caller who = {grant, "s1", "up", NULL, NULL};
            struct tg_decision a, b;
            tg_policy_decide_call(p, direct, &who, tool, args, now, &a);
            int unsettled;
            int trips = planned(p, remote, &who, tool, args, now, &b, &unsettled);
            assert_int_equal(unsettled, 0);
            /* A bucket that a diverged pass took from and gave back holds the same level, up to
             * the rounding of a refill split in two: a retry hint may move by a millisecond. */
            long long dr = (long long)a.retry_after_ms - (long long)b.retry_after_ms;
            if (a.verdict != b.verdict || strcmp(a.rule, b.rule) != 0 ||
                (dr == 0 && strcmp(a.message, b.message) != 0) || strcmp(a.counters_json, b.counters_json) != 0 ||
                dr < -1 || dr > 1 || a.nres != b.nres)
                fail_msg("policy %zu call %d (%s %s): direct %d %s \"%s\" {%s} retry %llu, planned %d %s \"%s\" {%s} retry %llu",
                         pi, i, tool, grant, a.verdict, a.rule, a.message, a.counters_json,
                         (unsigned long long)a.retry_after_ms, b.verdict, b.rule, b.message, b.counters_json,
                         (unsigned long long)b.retry_after_ms);
            if (a.verdict == TG_VERDICT_ALLOW && a.nres > 0)
                one_trip += trips == 1, more += trips != 1;
            /* A refund of the plan's reservations, as a failed upstream call gives, goes to the remote. */
            if (((seed >> 20) & 7) == 0) {
                tg_policy_refund(direct, &a, now);
                tg_policy_refund(remote, &b, now);
            }
            cJSON_Delete(args);
        }
        printf("# policy %zu: allowed calls with counters: %d in one round trip, %d in more\n", pi, one_trip, more);
        assert_true(one_trip > 100);
        if (pi == 0)
            assert_int_equal(more, 0); /* buckets alone: the optimism never misleads an allow */
        tg_counters_free(direct);
        tg_counters_free(remote);
        tg_policy_unref(p);
    }
}

/* Forty calls of one tool decided through plans, one round each in turn (every first round
 * is answered before any call is final): how many were allowed. */
static int race(const struct tg_policy *p, struct tg_counters *remote, const struct tg_caller *who, const char *tool,
                const cJSON *args)
{
    struct tg_counter_plan plans[40];
    struct tg_decision d;
    int done[40] = {0};
    for (int i = 0; i < 40; i++)
        tg_plan_init(&plans[i]);
    int remaining = 40, allowed = 0;
    while (remaining > 0) {
        for (int i = 0; i < 40; i++) {
            if (done[i])
                continue;
            tg_plan_begin(&plans[i]);
            tg_policy_decide_call(p, &plans[i].base, who, tool, args, T0, &d);
            size_t from, n = tg_plan_end(&plans[i], &from);
            if (n == 0) {
                for (size_t e = 0; e < plans[i].neffects; e++)
                    tg_counter_op_apply(remote, &plans[i].effects[e]);
                done[i] = 1;
                remaining--;
                allowed += d.verdict == TG_VERDICT_ALLOW;
                continue;
            }
            for (size_t k = from; k < from + n; k++)
                tg_counter_op_apply(remote, &plans[i].ops[k]);
            tg_plan_answered(&plans[i]);
        }
    }
    for (int i = 0; i < 40; i++)
        tg_plan_dispose(&plans[i]);
    return allowed;
}

/* Another instance spends between the rounds: the plan never lets more through than the budget,
 * and what a diverged pass did not use is given back. */
static void a_race_never_overspends(void **state)
{
    struct tg_policy *p = compile(policies[1]);
    struct tg_counters *remote = tg_counters_new();
    struct tg_caller who = {"alice", "s1", "up", NULL, NULL};
    cJSON *args = cJSON_Parse("{}");
    /* refund: "state.refund.n < 2" with a counter. Forty callers, interleaved so that each
     * one's first round is answered before any of them is final. */
    int allowed = race(p, remote, &who, "refund", args);
    /* The rule's own condition is the limit of its add ("lt 2": the total stays below 2), which
     * the store checks atomically: of forty callers whose reads all raced, exactly what forty
     * calls one after another let through passes. */
    struct tg_counters *direct = tg_counters_new();
    int sequential = 0;
    for (int i = 0; i < 40; i++) {
        struct tg_decision one;
        tg_policy_decide_call(p, direct, &who, "refund", args, T0, &one);
        sequential += one.verdict == TG_VERDICT_ALLOW;
    }
    tg_counters_free(direct);
    assert_int_equal(sequential, 1);
    assert_int_equal(allowed, sequential);
    /* Buckets: forty racing calls of a 3-per-minute tool, interleaved: exactly 3. */
    struct tg_policy *h = compile(policies[0]);
    allowed = race(h, remote, &who, "execute_code", args);
    assert_int_equal(allowed, 3);
    /* And what the refused ones took from the hour bucket and the wildcard came back: the hour
     * bucket (5) has 2 left, so after the minute refills two more pass and the third is limited
     * by exec_hour. */
    struct tg_decision x;
    int unsettled;
    planned(h, remote, &who, "execute_code", args, T0 + 60000, &x, &unsettled);
    assert_int_equal(x.verdict, TG_VERDICT_ALLOW);
    planned(h, remote, &who, "execute_code", args, T0 + 60000, &x, &unsettled);
    assert_int_equal(x.verdict, TG_VERDICT_ALLOW);
    planned(h, remote, &who, "execute_code", args, T0 + 60000, &x, &unsettled);
    assert_int_equal(x.verdict, TG_VERDICT_LIMITED);
    assert_string_equal(x.counter, "exec_hour");
    cJSON_Delete(args);
    tg_counters_free(remote);
    tg_policy_unref(p);
    tg_policy_unref(h);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_decisions_as_the_local_store),
        cmocka_unit_test(a_race_never_overspends),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
