/* policy/decide.c: tools/call verdicts over both shapes (hosted actions, Intercept rules): hide,
 * the default, wildcard rules after a tool's own, deny rules with and without on_deny, approvals,
 * tools/list visibility and the methods list. Against both syntaxes of each fixture pair
 * (fixtures/NAME.json, NAME.yaml); helpers, and the clock T0: policy_helpers.h. */
#include "test/unit/policy/policy_helpers.h"

#define ALLOW TG_VERDICT_ALLOW
#define DENY TG_VERDICT_DENY
#define LIMITED TG_VERDICT_LIMITED
#define APPROVE TG_VERDICT_APPROVE

/* ---- Intercept: hide, default, wildcard, deny --------------------------------------- */

static void hide_list(void **state)
{
    static const struct call calls[] = {
        /* Listed under tools and hidden: hide wins. Not listed and hidden: denied too. */
        CALL("g", "secret_tool", "{}", T0, DENY, "(hidden)", "Tool \"secret_tool\" is hidden by policy", .vis = HIDDEN),
        CALL("g", "internal_debug", NULL, T0, DENY, "(hidden)", "Tool \"internal_debug\" is hidden by policy", .vis = HIDDEN),
        /* Exact names only. */
        CALL("g", "Secret_tool", "{}", T0, ALLOW, "", NULL, .vis = SHOWN),
        CALL("g", "secret_tool2", "{}", T0, ALLOW, "", NULL, .vis = SHOWN),
        CALL("g", "secret_too", "{}", T0, ALLOW, "", NULL, .vis = SHOWN),
        CALL("g", "secret_tool ", "{}", T0, ALLOW, "", NULL, .vis = SHOWN),
        CALL("g", " secret_tool", "{}", T0, ALLOW, "", NULL, .vis = SHOWN),
        CALL("g", "SECRET_TOOL", "{}", T0, ALLOW, "", NULL, .vis = SHOWN),
    };
    RUN_CALLS_ON_PAIR("intercept", calls);
}

static void hide_star_hides_everything(void **state)
{
    static const char *const texts[][2] = {
        {"star.json", "{\"version\":\"1\",\"hide\":[\"*\"],\"tools\":{\"a\":{\"rules\":[]}}}"},
        {"star.yaml", "version: \"1\"\nhide:\n  - \"*\"\ntools:\n  a:\n    rules: []\n"},
        {"star2.yaml", "version: \"1\"\nhide: [a, \"*\"]\ndefault: allow\ntools: {a: {rules: []}}\n"},
    };
    static const struct call calls[] = {
        CALL("g", "a", "{}", T0, DENY, "(hidden)", "Tool \"a\" is hidden by policy", .vis = HIDDEN),
        CALL("g", "b", "{}", T0, DENY, "(hidden)", "Tool \"b\" is hidden by policy", .vis = HIDDEN),
        CALL("g", "*", "{}", T0, DENY, "(hidden)", "Tool \"*\" is hidden by policy", .vis = HIDDEN),
        CALL("g", "anything", "{}", T0, DENY, "(hidden)", "Tool \"anything\" is hidden by policy", .vis = HIDDEN),
        CALL("g", "a", NULL, T0, DENY, "(hidden)", "Tool \"a\" is hidden by policy"),
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct loaded l;
        LOAD_TEXT_OK(&l, texts[i][0], texts[i][1]);
        struct tg_counters *c = tg_counters_new();
        RUN_CALLS(texts[i][0], l.p, c, calls);
        tg_counters_free(c);
        loaded_dispose(&l);
    }
}

static void default_allow_lets_unlisted_tools_through_wildcard_rules(void **state)
{
    static const struct call calls[] = {
        CALL("g", "not_in_the_policy", "{\"x\":1}", T0, ALLOW, "", "", .vis = SHOWN),
        /* ...but the wildcard rules still apply to it. */
        CALL("g", "not_in_the_policy", "{\"force\":true}", T0, DENY, "no force", "force is not allowed"),
        CALL("g", "free", NULL, T0, ALLOW, "", NULL),
    };
    RUN_CALLS_ON_PAIR("intercept", calls);
}

static void default_deny_wildcards_do_not_rescue(void **state)
{
    static const struct call calls[] = {
        CALL("g", "unlisted", "{}", T0, DENY, "(default deny)", "Tool \"unlisted\" is not permitted by policy", .vis = HIDDEN),
        /* An unlisted call the wildcard rules would pass, or would deny: the default decides first. */
        CALL("g", "unlisted", "{\"sudo\":1}", T0, DENY, "(default deny)", NULL),
        /* rules: [] is an unconditional allow... */
        CALL("g", "listed", "{}", T0, ALLOW, "", NULL, .vis = SHOWN),
        /* ...to which the wildcard rules still apply. */
        CALL("g", "listed", "{\"sudo\":true}", T0, DENY, "no sudo", "sudo is not allowed"),
        CALL("g", "listed_but_hidden", "{}", T0, DENY, "(hidden)", NULL, .vis = HIDDEN),
        /* Tool rules come before the wildcard rules. */
        CALL("g", "checked", "{\"n\":30,\"sudo\":1}", T0, DENY, "small", "n must be below 10"),
        CALL("g", "checked", "{\"n\":3,\"sudo\":1}", T0, DENY, "no sudo", "sudo is not allowed"),
        /* The wildcard's own rate limit (5/hour, _global scope) counts every listed tool's calls;
         * two allowed calls above (listed, listed) already count. */
        CALL("g", "checked", "{\"n\":3}", T0, ALLOW, "", NULL),
        CALL("g", "limited", NULL, T0, ALLOW, "", NULL),
        CALL("g", "limited", NULL, T0, ALLOW, "", NULL),
        CALL("g", "limited", NULL, T0, LIMITED, "two a minute",
             "Rate limit of 2 per minute reached. Try again later.; retry in 60 s", .retry_ms = MIN_MS,
             .counter = "limited._rate_minute"),
        CALL("g", "listed", NULL, T0 + 1000, ALLOW, "", NULL),
        CALL("g", "listed", NULL, T0 + 1000, LIMITED, "global hourly", "Rate limit of 5 per hour reached. Try again later.*",
             .retry_ms = HOUR_MS / 2 - 1000, .counter = "_global._rate_hour"),
    };
    RUN_CALLS_ON_PAIR("intercept_deny", calls);
}

static void wildcard_rules_run_after_tool_rules(void **state)
{
    static const struct call calls[] = {
        CALL("g", "eq_num", "{\"v\":6,\"force\":true}", T0, DENY, "eq_num", "Denied by rule \"eq_num\""),
        CALL("g", "eq_num", "{\"v\":5,\"force\":true}", T0, DENY, "no force", "force is not allowed"),
        CALL("g", "eq_num", "{\"v\":5,\"force\":null}", T0, ALLOW, "", NULL), /* null counts as absent */
        /* A deny rule stops before the wildcard rules too. */
        CALL("g", "delete_repo", "{\"force\":true}", T0, DENY, "block repo deletion", NULL),
    };
    RUN_CALLS_ON_PAIR("intercept", calls);
}

static void deny_rules_with_and_without_on_deny(void **state)
{
    static const struct call calls[] = {
        CALL("g", "delete_repo", "{\"repo\":\"x\"}", T0, DENY, "block repo deletion", "Repository deletion is not permitted"),
        CALL("g", "drop_db", NULL, T0, DENY, "block drop", "Denied by rule \"block drop\""),
        /* Case and prefix variants are other tools, which the default lets through. */
        CALL("g", "Delete_repo", NULL, T0, ALLOW, "", NULL),
        CALL("g", "delete_repo2", NULL, T0, ALLOW, "", NULL),
        CALL("g", "delete_rep", NULL, T0, ALLOW, "", NULL),
    };
    /* An unconditional deny rule hides the tool from tools/list; a conditional rule does not. */
    static const struct shown shown[] = {{"delete_repo", 0}, {"drop_db", 0}, {"eq_num", 1}, {"create_issue", 1}};
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept.yaml" : "intercept.json");
        struct tg_counters *c = tg_counters_new();
        RUN_CALLS(y ? "yaml" : "json", p, c, calls);
        EXPECT_SHOWN(p, shown);
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

static void evaluate_failures_deny_with_on_deny_or_rule_name(void **state)
{
    static const struct call calls[] = {
        /* Two conditions ANDed. */
        CALL("g", "charge", "{\"amount\":50000,\"currency\":\"usd\"}", T0, ALLOW, "", NULL),
        CALL("g", "charge", "{\"amount\":50001,\"currency\":\"usd\"}", T0, DENY, "safe charge",
             "Only USD or EUR charges up to 500.00"),
        CALL("g", "charge", "{\"amount\":100,\"currency\":\"gbp\"}", T0, DENY, "safe charge",
             "Only USD or EUR charges up to 500.00"),
        CALL("g", "charge", "{\"currency\":\"eur\"}", T0, DENY, "safe charge", NULL),
        CALL("g", "charge", NULL, T0, DENY, "safe charge", NULL),
        /* No on_deny: the rule's name. */
        CALL("g", "lt", "{\"v\":10}", T0, DENY, "lt", "Denied by rule \"lt\""),
    };
    RUN_CALLS_ON_PAIR("intercept", calls);
}

static void hosted_actions_deny_and_approve(void **state)
{
    static const struct call calls[] = {
        CALL("g", "rm", "{\"path\":\"/\"}", T0, DENY, "rm", "Deleting files is not allowed", .vis = HIDDEN),
        CALL("g", "rm2", NULL, T0, DENY, "rm2", "Tool \"rm2\" is denied by policy", .vis = HIDDEN),
    };
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "hosted.yaml" : "hosted.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        RUN_CALLS(y ? "yaml" : "json", p, c, calls);
        decide(p, c, "g", "deploy", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_APPROVE, "deploy", "deploy needs a human's approval");
        assert_int_equal(d.approval_timeout_ms, 300000);
        assert_int_equal(tg_policy_tool_visible(p, "deploy"), 1);
        decide(p, c, "g", "deploy_min", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_APPROVE, "deploy_min", NULL);
        assert_int_equal(d.approval_timeout_ms, 60000);
        /* approval_timeout 30 (seconds); an approval reserves the tool's counters up front. */
        decide(p, c, "g", "deploy_fast", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_APPROVE, "deploy_fast", NULL);
        assert_int_equal(d.approval_timeout_ms, 30000);
        assert_int_equal(d.nres, 1);
        struct tg_decision refused = d;
        decide(p, c, "g", "deploy_fast", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_APPROVE, "deploy_fast", NULL);
        decide(p, c, "g", "deploy_fast", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_LIMITED, "deploys", NULL);
        assert_int_equal(d.approval_timeout_ms, 0);
        /* The human said no: the reservation comes back. */
        tg_policy_refund(c, &refused, T0);
        decide(p, c, "g", "deploy_fast", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_APPROVE, "deploy_fast", NULL);
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

static void tool_visibility(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "visible.json",
                 "{\"version\":\"1\",\"default\":\"allow\",\"hide\":[\"h\"],\"tools\":{"
                 "\"plain\":{\"rules\":[]},"
                 "\"cond\":{\"rules\":[{\"name\":\"c\",\"conditions\":[{\"path\":\"args.x\",\"op\":\"eq\",\"value\":1}]}]},"
                 "\"late_deny\":{\"rules\":[{\"name\":\"ok\",\"conditions\":[{\"path\":\"args.x\",\"op\":\"eq\",\"value\":1}]},"
                 "{\"name\":\"no\",\"action\":\"deny\"}]},"
                 "\"h\":{\"rules\":[]},"
                 "\"hosted_deny\":{\"action\":\"deny\"},"
                 "\"hosted_allow\":{\"action\":\"allow\"},"
                 "\"approve\":{\"action\":\"approve\"},"
                 "\"limited\":{\"limits\":[{\"window\":\"minute\",\"max\":1}]}}}");
    static const struct shown want[] = {{"plain", 1},        {"cond", 1},    {"late_deny", 0}, {"h", 0},
                                        {"hosted_deny", 0},  {"hosted_allow", 1}, {"approve", 1}, {"limited", 1},
                                        {"unlisted", 1},     {"Plain", 1}};
    EXPECT_SHOWN(l.p, want);
    loaded_dispose(&l);

    /* A wildcard deny (rule or hosted action) hides and denies every tool. */
    static const struct {
        const char *text, *rule;
    } wild[] = {
        {"{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"a\":{\"rules\":[]},\"*\":{\"rules\":[{\"name\":\"lockdown\",\"action\":\"deny\",\"on_deny\":\"Maintenance\"}]}}}",
         "lockdown"},
        {"{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"a\":{\"action\":\"allow\"},\"*\":{\"action\":\"deny\",\"reason\":\"Maintenance\"}}}",
         "*"},
    };
    for (int i = 0; i < 2; i++) {
        LOAD_TEXT_OK(&l, "wild.json", wild[i].text);
        struct tg_counters *c = tg_counters_new();
        const struct call calls[] = {
            CALL("g", "a", NULL, T0, DENY, wild[i].rule, "Maintenance", .vis = HIDDEN),
            CALL("g", "b", NULL, T0, DENY, wild[i].rule, "Maintenance", .vis = HIDDEN),
        };
        RUN_CALLS(wild[i].rule, l.p, c, calls);
        tg_counters_free(c);
        loaded_dispose(&l);
    }
}

static void methods_list(void **state)
{
    static const struct {
        const char *method;
        int allowed;
    } m[] = {{"custom/ping", 1}, {"tollgate/echo", 1}, {"custom/Ping", 0}, {"custom/ping2", 0},
             {"custom/pin", 0},  {"custom/*", 0},      {"", 0}};
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "hosted.yaml" : "hosted.json");
        for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++)
            if (tg_policy_method_allowed(p, m[i].method) != m[i].allowed)
                fail_msg("%s: method \"%s\": allowed %d, expected %d", y ? "yaml" : "json", m[i].method,
                         tg_policy_method_allowed(p, m[i].method), m[i].allowed);
        tg_policy_unref(p);
    }
    struct tg_policy *p = load_fixture("intercept.json");
    assert_int_equal(tg_policy_method_allowed(p, "custom/ping"), 0);
    tg_policy_unref(p);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hide_list),
        cmocka_unit_test(hide_star_hides_everything),
        cmocka_unit_test(default_allow_lets_unlisted_tools_through_wildcard_rules),
        cmocka_unit_test(default_deny_wildcards_do_not_rescue),
        cmocka_unit_test(wildcard_rules_run_after_tool_rules),
        cmocka_unit_test(deny_rules_with_and_without_on_deny),
        cmocka_unit_test(evaluate_failures_deny_with_on_deny_or_rule_name),
        cmocka_unit_test(hosted_actions_deny_and_approve),
        cmocka_unit_test(tool_visibility),
        cmocka_unit_test(methods_list),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
