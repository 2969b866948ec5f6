/* policy/decide.c: tools/call verdicts over both shapes (hosted actions, Intercept rules): hide,
 * the default, wildcard rules after a tool's own, deny rules with and without on_deny, approvals,
 * tools/list visibility and the methods list. Against both syntaxes of each fixture pair
 * (fixtures/NAME.json, NAME.yaml); helpers, and the clock T0: policy_helpers.h. */
#include "test/unit/policy/policy_helpers.h"

/* ---- Intercept: hide, default, wildcard, deny --------------------------------------- */

static void hide_list(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept.yaml" : "intercept.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        /* Listed under tools and hidden: hide wins. Not listed and hidden: denied too. */
        decide(p, c, "g", "secret_tool", "{}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "(hidden)", "Tool \"secret_tool\" is hidden by policy");
        decide(p, c, "g", "internal_debug", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "(hidden)", "Tool \"internal_debug\" is hidden by policy");
        assert_int_equal(tg_policy_tool_visible(p, "secret_tool"), 0);
        assert_int_equal(tg_policy_tool_visible(p, "internal_debug"), 0);
        /* Exact names only. */
        static const char *const near[] = {"Secret_tool", "secret_tool2", "secret_too", "secret_tool ", " secret_tool",
                                           "SECRET_TOOL"};
        for (size_t i = 0; i < sizeof(near) / sizeof(near[0]); i++) {
            decide(p, c, "g", near[i], "{}", T0, &d);
            EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
            assert_int_equal(tg_policy_tool_visible(p, near[i]), 1);
        }
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

static void hide_star_hides_everything(void **state)
{
    static const char *const texts[][2] = {
        {"star.json", "{\"version\":\"1\",\"hide\":[\"*\"],\"tools\":{\"a\":{\"rules\":[]}}}"},
        {"star.yaml", "version: \"1\"\nhide:\n  - \"*\"\ntools:\n  a:\n    rules: []\n"},
        {"star2.yaml", "version: \"1\"\nhide: [a, \"*\"]\ndefault: allow\ntools: {a: {rules: []}}\n"},
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct loaded l;
        load_text(&l, texts[i][0], texts[i][1]);
        if (l.rc != 0)
            fail_msg("%s: %s", texts[i][0], buf_str(&l.err));
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        static const char *const tools[] = {"a", "b", "*", "anything"};
        for (size_t t = 0; t < 4; t++) {
            char msg[80];
            snprintf(msg, sizeof(msg), "Tool \"%s\" is hidden by policy", tools[t]);
            decide(l.p, c, "g", tools[t], "{}", T0, &d);
            EXPECT(&d, TG_VERDICT_DENY, "(hidden)", msg);
            assert_int_equal(tg_policy_tool_visible(l.p, tools[t]), 0);
        }
        decide(l.p, c, "g", "a", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "(hidden)", "Tool \"a\" is hidden by policy");
        tg_counters_free(c);
        loaded_dispose(&l);
    }
}

static void default_allow_lets_unlisted_tools_through_wildcard_rules(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept.yaml" : "intercept.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        decide(p, c, "g", "not_in_the_policy", "{\"x\":1}", T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", "");
        assert_int_equal(tg_policy_tool_visible(p, "not_in_the_policy"), 1);
        /* ...but the wildcard rules still apply to it. */
        decide(p, c, "g", "not_in_the_policy", "{\"force\":true}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "no force", "force is not allowed");
        decide(p, c, "g", "free", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

static void default_deny_wildcards_do_not_rescue(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept_deny.yaml" : "intercept_deny.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        decide(p, c, "g", "unlisted", "{}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "(default deny)", "Tool \"unlisted\" is not permitted by policy");
        assert_int_equal(tg_policy_tool_visible(p, "unlisted"), 0);
        /* An unlisted call the wildcard rules would pass, or would deny: the default decides first. */
        decide(p, c, "g", "unlisted", "{\"sudo\":1}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "(default deny)", NULL);
        /* rules: [] is an unconditional allow... */
        decide(p, c, "g", "listed", "{}", T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        assert_int_equal(tg_policy_tool_visible(p, "listed"), 1);
        /* ...to which the wildcard rules still apply. */
        decide(p, c, "g", "listed", "{\"sudo\":true}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "no sudo", "sudo is not allowed");
        decide(p, c, "g", "listed_but_hidden", "{}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "(hidden)", NULL);
        assert_int_equal(tg_policy_tool_visible(p, "listed_but_hidden"), 0);
        /* Tool rules come before the wildcard rules. */
        decide(p, c, "g", "checked", "{\"n\":30,\"sudo\":1}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "small", "n must be below 10");
        decide(p, c, "g", "checked", "{\"n\":3,\"sudo\":1}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "no sudo", "sudo is not allowed");
        /* The wildcard's own rate limit (5/hour, _global scope) counts every listed tool's calls;
         * two allowed calls above (listed, listed) already count. */
        decide(p, c, "g", "checked", "{\"n\":3}", T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        decide(p, c, "g", "limited", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        decide(p, c, "g", "limited", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        decide(p, c, "g", "limited", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_LIMITED, "two a minute", "Rate limit of 2 per minute reached. Try again later.; retry in 60 s");
        EXPECT_RETRY(&d, MIN_MS);
        assert_string_equal(d.counter, "limited._rate_minute");
        decide(p, c, "g", "listed", NULL, T0 + 1000, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        decide(p, c, "g", "listed", NULL, T0 + 1000, &d);
        EXPECT(&d, TG_VERDICT_LIMITED, "global hourly", "Rate limit of 5 per hour reached. Try again later.*");
        EXPECT_RETRY(&d, HOUR_MS / 2 - 1000);
        assert_string_equal(d.counter, "_global._rate_hour");
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

static void wildcard_rules_run_after_tool_rules(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept.yaml" : "intercept.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        decide(p, c, "g", "eq_num", "{\"v\":6,\"force\":true}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "eq_num", "Denied by rule \"eq_num\"");
        decide(p, c, "g", "eq_num", "{\"v\":5,\"force\":true}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "no force", "force is not allowed");
        decide(p, c, "g", "eq_num", "{\"v\":5,\"force\":null}", T0, &d); /* null counts as absent */
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        /* A deny rule stops before the wildcard rules too. */
        decide(p, c, "g", "delete_repo", "{\"force\":true}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "block repo deletion", NULL);
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

static void deny_rules_with_and_without_on_deny(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept.yaml" : "intercept.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        decide(p, c, "g", "delete_repo", "{\"repo\":\"x\"}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "block repo deletion", "Repository deletion is not permitted");
        decide(p, c, "g", "drop_db", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "block drop", "Denied by rule \"block drop\"");
        /* An unconditional deny rule hides the tool from tools/list; a conditional rule does not. */
        assert_int_equal(tg_policy_tool_visible(p, "delete_repo"), 0);
        assert_int_equal(tg_policy_tool_visible(p, "drop_db"), 0);
        assert_int_equal(tg_policy_tool_visible(p, "eq_num"), 1);
        assert_int_equal(tg_policy_tool_visible(p, "create_issue"), 1);
        /* Case and prefix variants are other tools, which the default lets through. */
        decide(p, c, "g", "Delete_repo", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        decide(p, c, "g", "delete_repo2", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        decide(p, c, "g", "delete_rep", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

static void evaluate_failures_deny_with_on_deny_or_rule_name(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept.yaml" : "intercept.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        /* Two conditions ANDed. */
        decide(p, c, "g", "charge", "{\"amount\":50000,\"currency\":\"usd\"}", T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
        decide(p, c, "g", "charge", "{\"amount\":50001,\"currency\":\"usd\"}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "safe charge", "Only USD or EUR charges up to 500.00");
        decide(p, c, "g", "charge", "{\"amount\":100,\"currency\":\"gbp\"}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "safe charge", "Only USD or EUR charges up to 500.00");
        decide(p, c, "g", "charge", "{\"currency\":\"eur\"}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "safe charge", NULL);
        decide(p, c, "g", "charge", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "safe charge", NULL);
        /* No on_deny: the rule's name. */
        decide(p, c, "g", "lt", "{\"v\":10}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "lt", "Denied by rule \"lt\"");
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

static void hosted_actions_deny_and_approve(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "hosted.yaml" : "hosted.json");
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        decide(p, c, "g", "rm", "{\"path\":\"/\"}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "rm", "Deleting files is not allowed");
        decide(p, c, "g", "rm2", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "rm2", "Tool \"rm2\" is denied by policy");
        assert_int_equal(tg_policy_tool_visible(p, "rm"), 0);
        assert_int_equal(tg_policy_tool_visible(p, "rm2"), 0);
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
    load_text(&l, "visible.json",
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
    if (l.rc != 0)
        fail_msg("%s", buf_str(&l.err));
    static const struct {
        const char *tool;
        int visible;
    } want[] = {{"plain", 1},       {"cond", 1},         {"late_deny", 0}, {"h", 0},       {"hosted_deny", 0},
                {"hosted_allow", 1}, {"approve", 1},     {"limited", 1},   {"unlisted", 1}, {"Plain", 1}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (tg_policy_tool_visible(l.p, want[i].tool) != want[i].visible)
            fail_msg("%s: visible %d, expected %d", want[i].tool, tg_policy_tool_visible(l.p, want[i].tool),
                     want[i].visible);
    loaded_dispose(&l);

    /* A wildcard deny (rule or hosted action) hides and denies every tool. */
    static const char *const wild[] = {
        "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"a\":{\"rules\":[]},\"*\":{\"rules\":[{\"name\":\"lockdown\",\"action\":\"deny\",\"on_deny\":\"Maintenance\"}]}}}",
        "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"a\":{\"action\":\"allow\"},\"*\":{\"action\":\"deny\",\"reason\":\"Maintenance\"}}}",
    };
    for (int i = 0; i < 2; i++) {
        load_text(&l, "wild.json", wild[i]);
        if (l.rc != 0)
            fail_msg("%s", buf_str(&l.err));
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        assert_int_equal(tg_policy_tool_visible(l.p, "a"), 0);
        assert_int_equal(tg_policy_tool_visible(l.p, "b"), 0);
        decide(l.p, c, "g", "a", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, i ? "*" : "lockdown", "Maintenance");
        decide(l.p, c, "g", "b", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, i ? "*" : "lockdown", "Maintenance");
        tg_counters_free(c);
        loaded_dispose(&l);
    }
}

static void methods_list(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "hosted.yaml" : "hosted.json");
        assert_int_equal(tg_policy_method_allowed(p, "custom/ping"), 1);
        assert_int_equal(tg_policy_method_allowed(p, "tollgate/echo"), 1);
        assert_int_equal(tg_policy_method_allowed(p, "custom/Ping"), 0);
        assert_int_equal(tg_policy_method_allowed(p, "custom/ping2"), 0);
        assert_int_equal(tg_policy_method_allowed(p, "custom/pin"), 0);
        assert_int_equal(tg_policy_method_allowed(p, "custom/*"), 0);
        assert_int_equal(tg_policy_method_allowed(p, ""), 0);
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
