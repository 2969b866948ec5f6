/* policy/compile.c: loading a policy file (tg_policy_load) or a tree (tg_policy_compile): the
 * fixtures load cleanly, the top-level fields are checked, every error is reported as
 * "FILE: PATH.IN.FILE: reason", unknown fields are errors, a missing default is a note, and the
 * deny-all policy. A tool's own fields: test_compile_tool.c. */
#include "test/unit/policy/policy_helpers.h"

static void fixtures_load_cleanly(void **state)
{
    static const struct {
        const char *name;
        size_t tools;
    } want[] = {{"intercept", 34}, {"intercept_deny", 4}, {"hosted", 14}, {"seed", 1}};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        for (int y = 0; y < 2; y++) {
            char name[64];
            snprintf(name, sizeof(name), "%s.%s", want[i].name, y ? "yaml" : "json");
            struct tg_policy *p = load_fixture(name);
            if (tg_policy_tool_count(p) != want[i].tools)
                fail_msg("%s: %zu tools, expected %zu (\"*\" is not counted)", name, tg_policy_tool_count(p),
                         want[i].tools);
            assert_non_null(strstr(tg_policy_name(p), name));
            tg_policy_unref(p);
        }
}

static void deny_all_policy(void **state)
{
    struct tg_policy *p = tg_policy_deny_all();
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    static const char *const tools[] = {"a", "execute_code", "*", ""};
    for (int i = 0; i < 4; i++) {
        decide(p, c, "g", tools[i], "{}", T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, NULL, NULL);
        assert_int_equal(tg_policy_tool_visible(p, tools[i]), 0);
    }
    assert_int_equal(tg_policy_method_allowed(p, "custom/ping"), 0);
    assert_int_equal(tg_policy_tool_count(p), 0);
    assert_ptr_equal(tg_policy_ref(p), p);
    tg_policy_unref(p);
    tg_policy_unref(p);
    tg_counters_free(c);
}

static void errors_top_level(void **state)
{
    static const struct load_error refused[] = {
        {"v.json", "{\"version\":\"2\",\"tools\":{}}", "version", "version must be \"1\", got \"2\""},
        {"v.yaml", "version: 1\ntools: {}\n", "version", "version must be \"1\", got \"(a number; write \"1\")\""},
        {"v.json", "{\"tools\":{}}", "version", "version must be \"1\", got \"(missing)\""},
        {"d.json", "{\"version\":\"1\",\"default\":\"block\"}", "default",
         "default must be \"allow\" or \"deny\", got \"block\""},
        {"d.yaml", "version: \"1\"\ndefault: Deny\n", "default", "default must be \"allow\" or \"deny\", got \"Deny\""},
        {"h.json", "{\"version\":\"1\",\"hide\":[\"a\",\"b\",\"a\"]}", "hide", "duplicate entry \"a\""},
        {"h.yaml", "version: \"1\"\nhide: [a, \"\"]\n", "hide[1]", "entry must not be empty"},
        {"h.yaml", "version: \"1\"\nhide: [a, 5]\n", "hide[1]", "entry must not be empty"},
        {"h.yaml", "version: \"1\"\nhide: a\n", "hide", "must be a list of strings"},
        {"t.json", "{\"version\":\"1\",\"tools\":[]}", "tools", "must be an object of tool names"},
        {"t.json", "{\"version\":\"1\",\"tools\":{\"x\":[]}}", "tools.x", "must be an object"},
        {"r.yaml", "- version: \"1\"\n", "(root)", "a policy must be an object"},
        {"r.json", "[{\"version\":\"1\"}]", "(root)", "a policy must be an object"},
        {"r.yaml", "just a string\n", "(root)", "a policy must be an object"},
    };
    EXPECT_ERRORS(refused);
}

/* Every error in a file is reported, one line each, and no policy comes back. */
static void errors_all_reported(void **state)
{
    struct loaded l;
    load_text(&l, "many.yaml",
              "version: \"2\"\n"
              "default: maybe\n"
              "hide: [a, a]\n"
              "tools:\n"
              "  x:\n"
              "    rules:\n"
              "      - action: evaluate\n"
              "        conditions: [{path: args.a, op: like, value: 1}]\n"
              "  y:\n"
              "    limits: [{counter: c, window: week, max: 0}]\n");
    assert_int_not_equal(l.rc, 0);
    assert_null(l.p);
    const char *want[] = {"version: ", "default: ", "hide: duplicate entry \"a\"", "tools.x.rules[0].name: ",
                          "tools.x.rules[0].conditions[0].op: ", "tools.y.limits[0].window: ", "tools.y.limits[0].max: "};
    const char *all = buf_str(&l.err);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        char w[300];
        snprintf(w, sizeof(w), "%s: %s", l.path, want[i]);
        if (strstr(all, w) == NULL)
            fail_msg("missing \"%s\" in:\n%s", w, all);
    }
    size_t lines = 0;
    for (const char *p = all; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, sizeof(want) / sizeof(want[0]));
    loaded_dispose(&l);

    /* tg_policy_compile on a tree names it as told. */
    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_policy *p = (struct tg_policy *)1;
    cJSON *root = J("{\"version\":\"1\",\"default\":\"no\"}");
    assert_int_not_equal(tg_policy_compile(root, "inline-policy", &p, &err, NULL), 0);
    assert_null(p);
    assert_string_equal(buf_str(&err), "inline-policy: default: default must be \"allow\" or \"deny\", got \"no\"\n");
    cJSON_Delete(root);
    tg_buf_dispose(&err);
}

/* An unknown field at any level is an error naming the file and the path in it, with the known
 * field it is close to ("did you mean"), in both shapes and both syntaxes; nothing loads. */
static void unknown_fields_are_errors(void **state)
{
    static const char *const texts[][2] = {
        {"unknown.json",
         "{\"version\":\"1\",\"defualt\":\"deny\",\"colour\":\"red\",\"tools\":{\"x\":{\"acton\":\"allow\",\"rules\":[{\"name\":\"a\","
         "\"severity\":\"high\",\"Action\":\"deny\",\"conditions\":[{\"path\":\"args.a\",\"op\":\"eq\",\"valeu\":1,\"value\":1}],"
         "\"state\":{\"countr\":\"c\",\"counter\":\"c\",\"window\":\"hour\"}}]},"
         "\"y\":{\"limts\":[],\"limits\":[{\"counter\":\"c\",\"windw\":\"minute\",\"window\":\"minute\",\"max\":1}]}},"
         "\"resources\":{\"default\":\"allow\",\"alow\":[\"a://*\"]},\"prompts\":{\"dney\":[\"p\"]}}"},
        {"unknown.yaml",
         "version: \"1\"\ndefualt: deny\ncolour: red\ntools:\n  x:\n    acton: allow\n    rules:\n      - name: a\n"
         "        severity: high\n        Action: deny\n"
         "        conditions: [{path: args.a, op: eq, valeu: 1, value: 1}]\n"
         "        state: {countr: c, counter: c, window: hour}\n"
         "  y:\n    limts: []\n    limits: [{counter: c, windw: minute, window: minute, max: 1}]\n"
         "resources: {default: allow, alow: [\"a://*\"]}\nprompts: {dney: [p]}\n"},
    };
    static const char *const want[][2] = {
        {"defualt", "unknown field; did you mean `default`?"},
        {"colour", "unknown field (this object takes version, description, default, hide, tools, methods, resources, prompts)"},
        {"tools.x.acton", "unknown field; did you mean `action`?"},
        {"tools.x.rules[0].severity", "unknown field (this object takes name, action, conditions, on_deny, state, rate_limit, when)"},
        {"tools.x.rules[0].Action", "unknown field; did you mean `action`?"},
        {"tools.x.rules[0].conditions[0].valeu", "unknown field; did you mean `value`?"},
        {"tools.x.rules[0].state.countr", "unknown field; did you mean `counter`?"},
        {"tools.y.limts", "unknown field; did you mean `limits`?"},
        {"tools.y.limits[0].windw", "unknown field; did you mean `window`?"},
        {"resources.alow", "unknown field; did you mean `allow`?"},
        {"prompts.dney", "unknown field; did you mean `deny`?"},
    };
    for (int i = 0; i < 2; i++) {
        struct loaded l;
        load_text(&l, texts[i][0], texts[i][1]);
        if (l.rc == 0 || l.p != NULL)
            fail_msg("%s loaded with unknown fields", texts[i][0]);
        for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
            char w[400];
            snprintf(w, sizeof(w), "%s: %s: %s\n", l.path, want[k][0], want[k][1]);
            if (strstr(buf_str(&l.err), w) == NULL)
                fail_msg("%s: no error \"%s\" in:\n%s", texts[i][0], w, buf_str(&l.err));
        }
        loaded_dispose(&l);
    }
    /* One slip alone is enough to refuse a policy. */
    EXPECT_ERROR("one.json", "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"x\":{\"acton\":\"allow\"}}}",
                 "tools.x.acton", "unknown field; did you mean `action`?");
    /* The documented fields, all present, load without an error or a warning (the fixtures too). */
    struct loaded l;
    LOAD_TEXT_OK(&l, "known.json",
                 "{\"version\":\"1\",\"description\":\"d\",\"default\":\"allow\",\"hide\":[],\"methods\":[],"
                 "\"tools\":{\"x\":{\"action\":\"approve\",\"reason\":\"r\",\"approval_timeout\":5,\"limits\":[],"
                 "\"rules\":[{\"name\":\"a\",\"action\":\"evaluate\",\"on_deny\":\"o\",\"conditions\":[{\"path\":\"state.x.c\",\"op\":\"lte\",\"value\":1}],"
                 "\"state\":{\"counter\":\"c\",\"window\":\"day\",\"increment\":1,\"increment_from\":\"args.n\",\"scope\":\"grant\"}}]}},"
                 "\"resources\":{\"default\":\"allow\",\"allow\":[],\"deny\":[],\"reason\":\"r\"},"
                 "\"prompts\":{\"default\":\"allow\",\"allow\":[],\"deny\":[],\"reason\":\"r\"}}");
    assert_string_equal(buf_str(&l.warn), "");
    loaded_dispose(&l);
}

/* Without "default" a policy denies (and hides) what it does not name, and says so in a note. */
static void missing_default_denies_with_a_note(void **state)
{
    static const char *const texts[][2] = {
        {"nodefault.json", "{\"version\":\"1\",\"tools\":{\"named\":{\"action\":\"allow\"}}}"},
        {"nodefault.yaml", "version: \"1\"\ntools:\n  named: {action: allow}\n"},
    };
    for (int i = 0; i < 2; i++) {
        struct loaded l;
        LOAD_TEXT_OK(&l, texts[i][0], texts[i][1]);
        char w[300];
        snprintf(w, sizeof(w), "%s: default: not set, so what this policy does not name is denied", l.path);
        if (strstr(buf_str(&l.warn), w) == NULL)
            fail_msg("%s: no note \"%s\" in:\n%s", texts[i][0], w, buf_str(&l.warn));
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        decide(l.p, c, "g", "named", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
        decide(l.p, c, "g", "unnamed", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_DENY, "(default deny)", "Tool \"unnamed\" is not permitted by policy");
        assert_int_equal(tg_policy_tool_visible(l.p, "named"), 1);
        assert_int_equal(tg_policy_tool_visible(l.p, "unnamed"), 0);
        tg_counters_free(c);
        loaded_dispose(&l);
    }
    /* Said explicitly, either way, there is no note. */
    for (int i = 0; i < 2; i++) {
        struct loaded l;
        LOAD_TEXT_OK(&l, "explicit.json", i ? "{\"version\":\"1\",\"default\":\"allow\"}" : "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{}}");
        assert_string_equal(buf_str(&l.warn), "");
        loaded_dispose(&l);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fixtures_load_cleanly),
        cmocka_unit_test(deny_all_policy),
        cmocka_unit_test(errors_top_level),
        cmocka_unit_test(errors_all_reported),
        cmocka_unit_test(unknown_fields_are_errors),
        cmocka_unit_test(missing_default_denies_with_a_note),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
