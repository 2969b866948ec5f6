/* policy/explain.c: where a decision came from. The verdict is tg_policy_decide_call()'s; these
 * cases check that the entry, the rule and the condition named are the ones that decided, and
 * that explaining takes from the counters exactly what deciding takes (explain decides once, as the
 * gateway does, and reads where the decision recorded it came from). */
#include "test/unit/unit.h"

#include "core/base/buf.h"
#include "policy/counters.h"
#include "policy/explain.h"
#include "policy/policy.h"

#define T0 1710066600000LL /* 2024-03-10T10:30:00.000Z, the start of a minute */

static struct tg_policy *compile(const char *json)
{
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    int r = tg_policy_compile(root, "test", &p, &err, &warn);
    if (r != 0)
        fail_msg("policy did not compile: %.*s", (int)err.len, err.base);
    cJSON_Delete(root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    return p;
}

static const struct tg_caller who = {"g", "s", "u", NULL, NULL};

static void explain(const struct tg_policy *p, struct tg_counters *c, const char *tool, const char *args_json,
                    struct tg_policy_explain *e)
{
    cJSON *args = args_json ? cJSON_Parse(args_json) : NULL;
    tg_policy_explain_call(p, c, &who, tool, args, T0, e);
    cJSON_Delete(args);
}

static void first_failing_condition_is_named(void **state)
{
    (void)state;
    struct tg_policy *p = compile(
        "{\"version\":\"1\",\"tools\":{\"t\":{\"rules\":[{\"name\":\"r\",\"conditions\":["
        "{\"path\":\"args.a\",\"op\":\"eq\",\"value\":1},"
        "{\"path\":\"args.b\",\"op\":\"gt\",\"value\":5},"
        "{\"path\":\"args.c\",\"op\":\"regex\",\"value\":\"^x\"},"
        "{\"path\":\"args.d\",\"op\":\"exists\",\"value\":true}]}]}}}");
    static const struct {
        const char *args;
        int cond;
    } cases[] = {
        {"{\"a\":1,\"b\":6,\"c\":\"xy\",\"d\":0}", -1}, {"{\"a\":2,\"b\":6,\"c\":\"xy\",\"d\":0}", 0},
        {"{\"a\":1,\"b\":5,\"c\":\"xy\",\"d\":0}", 1},  {"{\"a\":1,\"b\":6,\"c\":\"yx\",\"d\":0}", 2},
        {"{\"a\":1,\"b\":6,\"c\":\"xy\"}", 3},          {"{\"a\":1,\"b\":6,\"c\":\"xy\",\"d\":null}", 3},
        {"{}", 0},                                      {"{\"a\":1,\"b\":\"9\",\"c\":\"x\",\"d\":1}", 1},
    };
    struct tg_policy_explain *e = malloc(sizeof(*e));
    struct tg_decision *d = malloc(sizeof(*d));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tg_counters *c = tg_counters_new(), *c2 = tg_counters_new();
        explain(p, c, "t", cases[i].args, e);
        cJSON *args = cJSON_Parse(cases[i].args);
        tg_policy_decide_call(p, c2, &who, "t", args, T0, d);
        cJSON_Delete(args);
        if (e->cond != cases[i].cond || e->d.verdict != d->verdict)
            fail_msg("case %zu %s: cond %d (want %d), verdict %s (decide says %s), at %s", i, cases[i].args, e->cond,
                     cases[i].cond, tg_policy_verdict_str(e->d.verdict), tg_policy_verdict_str(d->verdict), e->where);
        assert_string_equal(e->where, cases[i].cond < 0 ? "tools.t" : "tools.t.rules[0]");
        tg_counters_free(c);
        tg_counters_free(c2);
    }
    struct tg_counters *c = tg_counters_new();
    explain(p, c, "t", "{\"a\":1,\"b\":6,\"c\":\"yx\"}", e);
    assert_string_equal(e->cond_text, "args.c regex \"^x\" (the call has \"yx\")");
    explain(p, c, "t", "{\"a\":1}", e);
    assert_string_equal(e->cond_text, "args.b gt 5 (the call has no such argument)");
    tg_counters_free(c);
    free(d);
    free(e);
    tg_policy_unref(p);
}

static void same_named_rules_name_the_one_that_failed(void **state)
{
    (void)state;
    struct tg_policy *p = compile(
        "{\"version\":\"1\",\"tools\":{\"t\":{\"rules\":["
        "{\"name\":\"same\",\"conditions\":[{\"path\":\"args.a\",\"op\":\"eq\",\"value\":1}]},"
        "{\"name\":\"same\",\"conditions\":[{\"path\":\"args.b\",\"op\":\"eq\",\"value\":1}]}]}}}");
    struct tg_policy_explain e;
    struct tg_counters *c = tg_counters_new();
    explain(p, c, "t", "{\"a\":1,\"b\":2}", &e);
    assert_int_equal(e.d.verdict, TG_VERDICT_DENY);
    assert_string_equal(e.where, "tools.t.rules[1]");
    assert_int_equal(e.cond, 0);
    tg_counters_free(c);
    tg_policy_unref(p);
}

static void entries_that_decide_without_rules(void **state)
{
    (void)state;
    struct tg_policy *p = compile("{\"version\":\"1\",\"default\":\"allow\",\"hide\":[\"h\"],\"tools\":{"
                                  "\"a\":{\"action\":\"approve\"},\"*\":{\"action\":\"deny\",\"reason\":\"no\"}}}");
    struct tg_policy_explain e;
    struct tg_counters *c = tg_counters_new();
    explain(p, c, "other", NULL, &e);
    assert_int_equal(e.d.verdict, TG_VERDICT_DENY);
    assert_string_equal(e.where, "tools.*.action");
    assert_true(e.hidden);
    explain(p, c, "h", NULL, &e);
    assert_string_equal(e.where, "hide");
    tg_policy_unref(p);
    p = compile("{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"a\":{\"action\":\"approve\"}}}");
    explain(p, c, "a", NULL, &e);
    assert_int_equal(e.d.verdict, TG_VERDICT_APPROVE);
    assert_string_equal(e.where, "tools.a.action");
    assert_false(e.hidden);
    explain(p, c, "b", NULL, &e);
    assert_string_equal(e.where, "default");
    assert_true(e.hidden);
    tg_counters_free(c);
    tg_policy_unref(p);
}

/* Explaining N calls leaves the store as deciding N calls does, call by call. */
static void explaining_takes_what_deciding_takes(void **state)
{
    (void)state;
    struct tg_policy *p = compile(
        "{\"version\":\"1\",\"tools\":{"
        "\"pay\":{\"rules\":[{\"name\":\"budget\",\"conditions\":[{\"path\":\"state.pay.spent\",\"op\":\"lte\",\"value\":10}],"
        "\"state\":{\"counter\":\"spent\",\"window\":\"day\",\"increment_from\":\"args.n\"}}],"
        "\"limits\":[{\"counter\":\"calls\",\"window\":\"minute\",\"max\":4}]},"
        "\"peek\":{\"rules\":[{\"name\":\"after-pay\",\"conditions\":[{\"path\":\"state.pay.spent\",\"op\":\"lt\",\"value\":3}]}]}}}");
    struct tg_counters *a = tg_counters_new(), *b = tg_counters_new();
    struct tg_policy_explain *e = malloc(sizeof(*e));
    struct tg_decision *d = malloc(sizeof(*d));
    cJSON *args = cJSON_Parse("{\"n\":3}");
    static const enum tg_verdict want[] = {TG_VERDICT_ALLOW, TG_VERDICT_ALLOW, TG_VERDICT_ALLOW, TG_VERDICT_LIMITED,
                                           TG_VERDICT_LIMITED};
    for (int i = 0; i < 5; i++) {
        tg_policy_explain_call(p, a, &who, "pay", args, T0, e);
        tg_policy_decide_call(p, b, &who, "pay", args, T0, d);
        assert_int_equal(e->d.verdict, d->verdict);
        assert_int_equal(e->d.verdict, want[i]);
        assert_string_equal(e->d.counters_json, d->counters_json);
    }
    assert_string_equal(e->where, "tools.pay.rules[0]");
    assert_string_equal(e->d.counter, "pay.spent");
    /* peek reads pay's counter (9 now): its state condition fails, which is LIMITED. */
    tg_policy_explain_call(p, a, &who, "peek", NULL, T0, e);
    assert_int_equal(e->d.verdict, TG_VERDICT_LIMITED);
    assert_string_equal(e->where, "tools.peek.rules[0]");
    assert_int_equal(e->cond, 0);
    assert_string_equal(e->cond_text, "state.pay.spent lt 3");
    cJSON_Delete(args);
    /* The bucket: four calls a minute, the fifth is limited at the limit's entry. */
    cJSON *one = cJSON_Parse("{\"n\":0}");
    struct tg_counters *c = tg_counters_new();
    for (int i = 0; i < 5; i++)
        tg_policy_explain_call(p, c, &who, "pay", one, T0, e);
    assert_int_equal(e->d.verdict, TG_VERDICT_LIMITED);
    assert_string_equal(e->where, "tools.pay.limits[0]");
    cJSON_Delete(one);
    struct tg_buf out;
    tg_buf_init(&out);
    tg_policy_explain_counters(p, "pay", &out);
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base,
                        "  calls: token bucket, scope grant, capacity 4, refills 4 per minute, takes 1 per call "
                        "(tools.pay.limits[0])\n"
                        "  pay.spent: fixed window of a day, scope grant, adds args.n per call, allowed while the "
                        "total stays <= 10 (tools.pay.rules[0], rule \"budget\")\n");
    out.len = 0;
    tg_policy_explain_counters(p, "peek", &out);
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base, "  pay.spent: fixed window of a day, scope grant, read by tools.peek.rules[0].conditions[0]\n");
    tg_buf_dispose(&out);
    tg_counters_free(a);
    tg_counters_free(b);
    tg_counters_free(c);
    free(d);
    free(e);
    tg_policy_unref(p);
}

/* The steps decided after every rule held: an amount increment_from cannot count (the rule's
 * state block is named), and an allow by the "*" entry. */
static void counting_steps_and_the_wildcard(void **state)
{
    (void)state;
    struct tg_policy *p = compile(
        "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{"
        "\"pay\":{\"rules\":[{\"name\":\"ok\",\"conditions\":[{\"path\":\"args.to\",\"op\":\"exists\",\"value\":true}]},"
        "{\"name\":\"budget\",\"conditions\":[{\"path\":\"args.n\",\"op\":\"exists\",\"value\":true}],\"state\":{\"counter\":\"spent\",\"window\":\"day\",\"increment_from\":\"args.n\"}}]},"
        "\"*\":{\"rules\":[{\"name\":\"any\",\"conditions\":[{\"path\":\"args.x\",\"op\":\"neq\",\"value\":1}]}]}}}");
    struct tg_counters *c = tg_counters_new();
    struct tg_policy_explain *e = malloc(sizeof(*e));
    explain(p, c, "pay", "{\"to\":\"a\",\"n\":-1,\"x\":0}", e);
    assert_int_equal(e->d.verdict, TG_VERDICT_DENY);
    assert_string_equal(e->where, "tools.pay.rules[1].state.increment_from");
    assert_int_equal(e->cond, -1);
    explain(p, c, "pay", "{\"to\":\"a\",\"n\":2,\"x\":0}", e);
    assert_int_equal(e->d.verdict, TG_VERDICT_ALLOW);
    assert_string_equal(e->where, "tools.pay");
    explain(p, c, "other", "{\"x\":0}", e);
    assert_int_equal(e->d.verdict, TG_VERDICT_ALLOW);
    assert_string_equal(e->where, "tools.*");
    explain(p, c, "other", "{\"x\":1}", e);
    assert_int_equal(e->d.verdict, TG_VERDICT_DENY);
    assert_string_equal(e->where, "tools.*.rules[0]");
    assert_int_equal(e->cond, 0);
    assert_string_equal(e->cond_text, "args.x neq 1 (the call has 1)");
    explain(p, c, "pay", "{\"n\":1,\"x\":1}", e); /* the tool's entry is judged first */
    assert_string_equal(e->where, "tools.pay.rules[0]");
    assert_string_equal(e->cond_text, "args.to exists true (the call has no such argument)");
    tg_counters_free(c);
    free(e);
    tg_policy_unref(p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_failing_condition_is_named),
        cmocka_unit_test(same_named_rules_name_the_one_that_failed),
        cmocka_unit_test(entries_that_decide_without_rules),
        cmocka_unit_test(explaining_takes_what_deciding_takes),
        cmocka_unit_test(counting_steps_and_the_wildcard),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
