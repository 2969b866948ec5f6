/* policy/compile_scopes.c, decide_resource.c: "scopes" in either policy shape (hosted JSON,
 * Intercept YAML), for tools, resources and prompts: what loads, what is refused, and what a
 * credential's scope set lacks. */
#include "test/unit/policy/policy_helpers.h"

#include "policy/scopes.h"

static const char hosted[] = "{\"version\": \"1\", \"default\": \"allow\", \"hide\": [\"secret\"],\n"
                             " \"tools\": {\"deploy\": {\"action\": \"allow\", \"scopes\": [\"deploy\", \"ops:write\"]},\n"
                             "           \"ask\": {\"action\": \"approve\", \"scopes\": [\"ask\"]},\n"
                             "           \"gone\": {\"action\": \"deny\", \"scopes\": [\"never\"]},\n"
                             "           \"secret\": {\"scopes\": [\"hidden\"]},\n"
                             "           \"read\": {\"action\": \"allow\"}},\n"
                             " \"resources\": {\"default\": \"allow\", \"scopes\": {\"db://prod/*\": [\"db.prod\"],\n"
                             "                                                  \"db://*\": [\"db\"]}},\n"
                             " \"prompts\": {\"scopes\": {\"admin-*\": [\"admin\"]}}}\n";

static const char intercept[] = "version: \"1\"\n"
                                "default: allow\n"
                                "tools:\n"
                                "  deploy:\n"
                                "    scopes: [deploy, \"ops:write\"]\n"
                                "    rules:\n"
                                "      - name: no prod\n"
                                "        conditions:\n"
                                "          - {path: args.env, op: neq, value: prod}\n"
                                "  \"*\":\n"
                                "    scopes:\n"
                                "      - mcp\n"
                                "    rules:\n"
                                "      - name: small\n"
                                "        conditions:\n"
                                "          - {path: args.n, op: lt, value: 100}\n";

static void need_is(const char *from, int got, const char *need, int want_lacks, const char *want_need)
{
    if (got != want_lacks || strcmp(need, want_need) != 0)
        fail_msg("%s: lacks %d need \"%s\", expected %d \"%s\"", from, got, need, want_lacks, want_need);
}
#define NEED(got, need, lacks, want) need_is(HERE, (got), (need), (lacks), (want))

static void hosted_shape(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "p.json", hosted);
    char need[TG_SCOPES_MAX];
    NEED(tg_policy_scopes_tool(l.p, "deploy", "", need, sizeof(need)), need, 1, "deploy ops:write");
    NEED(tg_policy_scopes_tool(l.p, "deploy", "deploy", need, sizeof(need)), need, 1, "deploy ops:write");
    NEED(tg_policy_scopes_tool(l.p, "deploy", "ops:write x deploy", need, sizeof(need)), need, 0, "deploy ops:write");
    NEED(tg_policy_scopes_tool(l.p, "deploy", "deployer ops:writes", need, sizeof(need)), need, 1, "deploy ops:write");
    NEED(tg_policy_scopes_tool(l.p, "ask", "", need, sizeof(need)), need, 1, "ask");
    NEED(tg_policy_scopes_tool(l.p, "read", "", need, sizeof(need)), need, 0, "");
    NEED(tg_policy_scopes_tool(l.p, "other", "", need, sizeof(need)), need, 0, "");
    /* refused whatever the token holds: the decision denies it, no step-up is asked for */
    NEED(tg_policy_scopes_tool(l.p, "gone", "", need, sizeof(need)), need, 0, "");
    NEED(tg_policy_scopes_tool(l.p, "secret", "", need, sizeof(need)), need, 0, "");
    /* a tool that lacks scopes is still listed */
    assert_true(tg_policy_tool_visible(l.p, "deploy"));
    /* resources: every matching pattern, "*" across "/", in the URI's normal form */
    NEED(tg_policy_scopes_resource(l.p, "db://prod/users", "", need, sizeof(need)), need, 1, "db.prod db");
    NEED(tg_policy_scopes_resource(l.p, "db://prod/a/b", "db", need, sizeof(need)), need, 1, "db.prod db");
    NEED(tg_policy_scopes_resource(l.p, "DB://prod/users", "db db.prod", need, sizeof(need)), need, 0, "db.prod db");
    NEED(tg_policy_scopes_resource(l.p, "db://dev/x", "db", need, sizeof(need)), need, 0, "db");
    NEED(tg_policy_scopes_resource(l.p, "file:///x", "", need, sizeof(need)), need, 0, "");
    NEED(tg_policy_scopes_prompt(l.p, "admin-reset", "", need, sizeof(need)), need, 1, "admin");
    NEED(tg_policy_scopes_prompt(l.p, "hello", "", need, sizeof(need)), need, 0, "");
    char all[TG_SCOPES_MAX] = "";
    tg_policy_scopes_all(l.p, all, sizeof(all));
    assert_string_equal(all, "ask deploy ops:write never hidden db.prod db admin");
    loaded_dispose(&l);
}

static void intercept_shape(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "p.yaml", intercept);
    char need[TG_SCOPES_MAX];
    /* the tool's own scopes and those of "*" */
    NEED(tg_policy_scopes_tool(l.p, "deploy", "deploy ops:write", need, sizeof(need)), need, 1, "deploy ops:write mcp");
    NEED(tg_policy_scopes_tool(l.p, "deploy", "mcp deploy ops:write", need, sizeof(need)), need, 0,
         "deploy ops:write mcp");
    NEED(tg_policy_scopes_tool(l.p, "other", "", need, sizeof(need)), need, 1, "mcp");
    /* the rules still decide once the scopes are there */
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    decide(l.p, c, "g", "deploy", "{\"env\":\"prod\",\"n\":1}", T0, &d);
    assert_int_equal(d.verdict, TG_VERDICT_DENY);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* The same requirement written in both shapes and both syntaxes asks for the same scopes. */
static void shapes_agree(void **state)
{
    (void)state;
    static const char *const texts[][2] = {
        {"a.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"action\":\"allow\",\"scopes\":[\"s\"]}}}"},
        {"b.yaml", "version: \"1\"\ndefault: allow\ntools:\n  t:\n    action: allow\n    scopes: [s]\n"},
        {"c.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"scopes\":[\"s\"],\"rules\":[{\"name\":\"r\","
                   "\"conditions\":[{\"path\":\"args.x\",\"op\":\"exists\",\"value\":false}]}]}}}"},
        {"d.yaml", "version: \"1\"\ndefault: allow\ntools:\n  t:\n    scopes:\n      - s\n    rules:\n      - name: r\n"
                   "        conditions:\n          - path: args.x\n            op: exists\n            value: false\n"},
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct loaded l;
        LOAD_TEXT_OK(&l, texts[i][0], texts[i][1]);
        char need[TG_SCOPES_MAX];
        NEED(tg_policy_scopes_tool(l.p, "t", "", need, sizeof(need)), need, 1, "s");
        NEED(tg_policy_scopes_tool(l.p, "t", "s", need, sizeof(need)), need, 0, "s");
        loaded_dispose(&l);
    }
}

static void load_errors(void **state)
{
    (void)state;
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"scope\":[\"s\"]}}}", "tools.t.scope",
                 "unknown field; did you mean `scopes`?");
    EXPECT_ERROR("p.yaml", "version: \"1\"\ndefault: allow\ntools:\n  t:\n    scoeps: [s]\n", "tools.t.scoeps",
                 "unknown field; did you mean `scopes`?");
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"scopes\":[\"s\",7]}}}",
                 "tools.t.scopes[1]", "a scope must be a string");
    EXPECT_ERROR("p.yaml", "version: \"1\"\ndefault: allow\ntools:\n  t:\n    scopes: [s, [x]]\n", "tools.t.scopes[1]",
                 "a scope must be a string");
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"scopes\":\"deploy\"}}}",
                 "tools.t.scopes", "must be a non-empty list of at most 64 scopes, e.g. [\"deploy\"]");
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"scopes\":[]}}}", "tools.t.scopes",
                 "must be a non-empty list");
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"scopes\":[\"a b\"]}}}",
                 "tools.t.scopes[0]", "\"a b\" is not a scope");
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"scopes\":[\"\"]}}}",
                 "tools.t.scopes[0]", "\"\" is not a scope");
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"scopes\":[\"a\",\"a\"]}}}",
                 "tools.t.scopes[1]", "\"a\" is listed twice");
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"resources\":{\"scopes\":[\"a\"]}}",
                 "resources.scopes", "must be a map of patterns to scope lists");
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"prompts\":{\"scopes\":{\"p*\":\"a\"}}}",
                 "prompts.scopes.p*", "must be a non-empty list");
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"prompts\":{\"scope\":{\"p*\":[\"a\"]}}}",
                 "prompts.scope", "unknown field; did you mean `scopes`?");
    /* a pattern that could match no URI would require nothing: refused like an allow or deny one */
    EXPECT_ERROR("p.json", "{\"version\":\"1\",\"default\":\"allow\",\"resources\":{\"scopes\":{\"HTTP://x/*\":[\"a\"]}}}",
                 "resources.scopes.HTTP://x/*[0]", "\"HTTP://x/*\" matches no resource");
}

static void scope_tokens(void **state)
{
    (void)state;
    assert_true(tg_scope_token_ok("a", 1));
    assert_true(tg_scope_token_ok("files:read!#$%&'()*+,-./;<=>?@[]^_`{|}~", 39));
    assert_false(tg_scope_token_ok("", 0));
    assert_false(tg_scope_token_ok("a b", 3));
    assert_false(tg_scope_token_ok("a\"", 2));
    assert_false(tg_scope_token_ok("a\\", 2));
    assert_false(tg_scope_token_ok("a\x7f", 2));
    assert_false(tg_scope_token_ok("\xc3\xa9", 2));
    char big[TG_SCOPE_MAX + 1];
    memset(big, 'a', sizeof(big));
    assert_true(tg_scope_token_ok(big, TG_SCOPE_MAX - 1));
    assert_false(tg_scope_token_ok(big, TG_SCOPE_MAX));
    assert_true(tg_scopes_has("a bc d", "bc"));
    assert_false(tg_scopes_has("a bc d", "b"));
    assert_false(tg_scopes_has(NULL, "b"));
    char set[8] = "";
    assert_int_equal(tg_scopes_add(set, sizeof(set), "abc"), 0);
    assert_int_equal(tg_scopes_add(set, sizeof(set), "abc"), 0);
    assert_int_equal(tg_scopes_add(set, sizeof(set), "de"), 0);
    assert_string_equal(set, "abc de");
    assert_int_equal(tg_scopes_add(set, sizeof(set), "f"), -1);
    assert_string_equal(set, "abc de");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hosted_shape),  cmocka_unit_test(intercept_shape), cmocka_unit_test(shapes_agree),
        cmocka_unit_test(load_errors),   cmocka_unit_test(scope_tokens),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
