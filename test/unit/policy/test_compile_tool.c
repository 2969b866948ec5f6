/* policy/compile_tool.c: one entry of a policy's "tools", in either shape: Intercept rules
 * (conditions, state, rate_limit) and hosted entries (action, reason, approval_timeout, limits),
 * the error each malformed field gives, and the "did you mean" suggestion for an unknown key. */
#include "test/unit/policy/policy_helpers.h"

#include "policy/compile_tool.h"

/* neq and not_in compare scalars, so a list or a map as their value could never be matched by
 * the rule above (any scalar differs from it, and no list or map passes): refused at load. */
static void deny_lists_of_lists_or_maps_refused(void **state)
{
    static const struct load_error refused[] = {
        {"t.json",
         WITH_RULES("[{\"name\":\"a\",\"conditions\":[{\"path\":\"args.e\",\"op\":\"neq\",\"value\":[\"p\"]}]}]"),
         "tools.x.rules[0].conditions[0].value",
         "operator \"neq\" compares a string, number, boolean or null; a list or map cannot be its value"},
        {"t.json",
         WITH_RULES("[{\"name\":\"a\",\"conditions\":[{\"path\":\"args.e\",\"op\":\"neq\",\"value\":{\"p\":1}}]}]"),
         "tools.x.rules[0].conditions[0].value",
         "operator \"neq\" compares a string, number, boolean or null; a list or map cannot be its value"},
        {"t.json",
         WITH_RULES("[{\"name\":\"a\",\"conditions\":[{\"path\":\"args.e\",\"op\":\"not_in\",\"value\":[\"ok\",[\"p\"]]}]}]"),
         "tools.x.rules[0].conditions[0].value[1]",
         "operator \"not_in\" compares a string, number, boolean or null; a list or map cannot be in its list"},
    };
    EXPECT_ERRORS(refused);
}

/* policy.h: approval_timeout is seconds, or a count with a unit ("90s", "5m", "2h", "1d"). */
static void approval_timeout_units(void **state)
{
    static const struct {
        const char *value;
        int ms;
    } ok[] = {{"\"5m\"", 300000}, {"\"90s\"", 90000}, {"\"2h\"", 7200000}, {"\"1d\"", 86400000},
              {"\"45\"", 45000},   {"45", 45000},       {"0.5", 500},         {"\"hour\"", 3600000},
              {"\"3d\"", 86400000} /* at most a day */};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char text[200];
        snprintf(text, sizeof(text), "{\"version\":\"1\",\"tools\":{\"deploy\":{\"action\":\"approve\",\"approval_timeout\":%s}}}",
                 ok[i].value);
        struct loaded l;
        LOAD_TEXT_OK(&l, "approve.json", text);
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        decide(l.p, c, "g", "deploy", NULL, T0, &d);
        EXPECT(&d, TG_VERDICT_APPROVE, NULL, NULL);
        if (d.approval_timeout_ms != ok[i].ms)
            fail_msg("approval_timeout %s: %d ms, expected %d", ok[i].value, d.approval_timeout_ms, ok[i].ms);
        tg_counters_free(c);
        loaded_dispose(&l);
    }
    static const char *const bad[] = {"\"5x\"", "\"m\"", "\"0m\"", "\"-5m\"", "\"5 m\"", "\"5mm\"", "\"\"", "0", "true"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char text[200];
        snprintf(text, sizeof(text), "{\"version\":\"1\",\"tools\":{\"deploy\":{\"action\":\"approve\",\"approval_timeout\":%s}}}",
                 bad[i]);
        EXPECT_ERROR("approve.json", text, "tools.deploy.approval_timeout",
                     "must be a number of seconds or second|minute|hour|day");
    }
    /* Units are for approval_timeout only: limits and state windows keep their documented forms. */
    EXPECT_ERROR("w.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"limits\":[{\"window\":\"5m\",\"max\":1}]}}}",
                 "tools.x.limits[0].window", "must be second, minute");
}

/* ---- validation errors: FILE: PATH.IN.FILE: reason ---------------------------------------- */

static void errors_rules(void **state)
{
    static const struct load_error refused[] = {
        {"x.json", WITH_RULES("{}"), "tools.x.rules", "must be a list"},
        {"x.json", WITH_RULES("[5]"), "tools.x.rules[0]", "a rule must be an object"},
        {"x.json", WITH_RULES("[{\"action\":\"deny\"}]"), "tools.x.rules[0].name",
         "rule must have a name"},
        {"x.json", WITH_RULES("[{\"name\":\"\",\"action\":\"deny\"}]"), "tools.x.rules[0].name",
         "rule must have a name"},
        {"x.json", WITH_RULES("[{\"name\":\"a\",\"action\":\"deny\"},{\"name\":\"b\",\"action\":\"block\"}]"),
         "tools.x.rules[1].action", "action must be \"evaluate\" or \"deny\", got \"block\""},
        {"x.json",
         WITH_RULES("[{\"name\":\"a\",\"action\":\"deny\",\"conditions\":[{\"path\":\"args.a\",\"op\":\"eq\",\"value\":1}]}]"),
         "tools.x.rules[0].conditions", "deny rules must not have conditions"},
        {"x.json", WITH_RULES("[{\"name\":\"a\"}]"), "tools.x.rules[0].conditions",
         "evaluate rules must have at least one condition"},
        {"x.json", WITH_RULES("[{\"name\":\"a\",\"action\":\"evaluate\",\"on_deny\":\"no\"}]"),
         "tools.x.rules[0].conditions", "evaluate rules must have at least one condition"},
        {"x.json", WITH_RULES("[{\"name\":\"a\",\"conditions\":{}}]"), "tools.x.rules[0].conditions",
         "must be a list"},
        {"x.json", WITH_RULES("[{\"name\":\"a\",\"action\":\"deny\",\"on_deny\":5}]"),
         "tools.x.rules[0].on_deny", "must be a string"},
        /* A tool named with dots and spaces keeps its name in the path. */
        {"x.yaml", "version: \"1\"\ntools:\n  \"fs.read file\":\n    rules:\n      - action: deny\n",
         "tools.fs.read file.rules[0].name", "rule must have a name"},
    };
    EXPECT_ERRORS(refused);
}

/* Intercept: "evaluate rules must have at least one condition" also when the list is there but
 * empty (internal/config/validate.go checks len(rule.Conditions) == 0). */
static void evaluate_rule_with_empty_conditions_list_refused(void **state)
{
    char b[1024];
    EXPECT_ERROR("x.json", with_rules(b, sizeof(b), "[{\"name\":\"a\",\"conditions\":[]}]"),
                 "tools.x.rules[0].conditions", "evaluate rules must have at least one condition");
}

static void errors_conditions(void **state)
{
    static const struct {
        const char *cond, *where, *what;
    } e[] = {
        {"5", "", "a condition must be an object {path, op, value}"},
        {"{\"op\":\"eq\",\"value\":1}", ".path", "must be a string"},
        {"{\"path\":\"arg.x\",\"op\":\"eq\",\"value\":1}", ".path", "path must start with \"args.\" or \"state.\", got \"arg.x\""},
        {"{\"path\":\"x\",\"op\":\"eq\",\"value\":1}", ".path", "path must start with \"args.\" or \"state.\", got \"x\""},
        {"{\"path\":\"Args.x\",\"op\":\"eq\",\"value\":1}", ".path", "path must start with \"args.\" or \"state.\""},
        {"{\"path\":\"args.\",\"op\":\"eq\",\"value\":1}", ".path", "\"args.\" is not a valid args path"},
        {"{\"path\":\"args.a..b\",\"op\":\"eq\",\"value\":1}", ".path", "\"args.a..b\" is not a valid args path"},
        {"{\"path\":\"args.a.\",\"op\":\"eq\",\"value\":1}", ".path", "\"args.a.\" is not a valid args path"},
        {"{\"path\":\"state.x\",\"op\":\"lt\",\"value\":1}", ".path", "\"state.x\" must be state.<tool or _global>.<counter>"},
        {"{\"path\":\"state.x.\",\"op\":\"lt\",\"value\":1}", ".path", "\"state.x.\" must be state.<tool or _global>.<counter>"},
        {"{\"path\":\"args.a\",\"op\":\"like\",\"value\":1}", ".op", "unknown operator \"like\""},
        {"{\"path\":\"args.a\",\"op\":\"EQ\",\"value\":1}", ".op", "unknown operator \"EQ\""},
        {"{\"path\":\"args.a\",\"value\":1}", ".op", "unknown operator"},
        {"{\"path\":\"args.a\",\"op\":\"eq\"}", ".value", "is required"},
        {"{\"path\":\"args.a\",\"op\":\"in\",\"value\":\"usd\"}", ".value", "operator \"in\" requires a list value"},
        {"{\"path\":\"args.a\",\"op\":\"not_in\",\"value\":{}}", ".value", "operator \"not_in\" requires a list value"},
        {"{\"path\":\"args.a\",\"op\":\"lt\",\"value\":\"5\"}", ".value", "operator \"lt\" requires a numeric value"},
        {"{\"path\":\"args.a\",\"op\":\"lte\",\"value\":null}", ".value", "operator \"lte\" requires a numeric value"},
        {"{\"path\":\"args.a\",\"op\":\"gt\",\"value\":[1]}", ".value", "operator \"gt\" requires a numeric value"},
        {"{\"path\":\"args.a\",\"op\":\"gte\",\"value\":true}", ".value", "operator \"gte\" requires a numeric value"},
        {"{\"path\":\"args.a\",\"op\":\"exists\",\"value\":\"true\"}", ".value", "operator \"exists\" requires a boolean value"},
        {"{\"path\":\"args.a\",\"op\":\"exists\",\"value\":1}", ".value", "operator \"exists\" requires a boolean value"},
        {"{\"path\":\"args.a\",\"op\":\"regex\",\"value\":5}", ".value", "regex value must be a string"},
        {"{\"path\":\"args.a\",\"op\":\"regex\",\"value\":\"(unclosed\"}", ".value", "invalid regex \"(unclosed\": "},
        {"{\"path\":\"args.a\",\"op\":\"regex\",\"value\":\"[a-\"}", ".value", "invalid regex \"[a-\": "},
        {"{\"path\":\"args.a\",\"op\":\"regex\",\"value\":\"a{2,1}\"}", ".value", "invalid regex \"a{2,1}\": "},
    };
    for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
        char rules[512], text[1024], where[200];
        snprintf(rules, sizeof(rules), "[{\"name\":\"ok\",\"action\":\"deny\"},{\"name\":\"c\",\"conditions\":[{\"path\":\"args.q\",\"op\":\"exists\",\"value\":true},%s]}]", e[i].cond);
        with_rules(text, sizeof(text), rules);
        snprintf(where, sizeof(where), "tools.x.rules[1].conditions[1]%s", e[i].where);
        EXPECT_ERROR("cond.json", text, where, e[i].what);
    }
    /* The same in YAML: tools.x.rules[1].conditions[0].op: unknown operator ... */
    EXPECT_ERROR("cond.yaml",
                 "version: \"1\"\ntools:\n  x:\n    rules:\n      - name: a\n        action: deny\n"
                 "      - name: b\n        conditions:\n          - path: args.a\n            op: matches\n            value: x\n",
                 "tools.x.rules[1].conditions[0].op", "unknown operator \"matches\"");
}

static void errors_state(void **state)
{
#define STATE_RULE(st, cond) "[{\"name\":\"s\",\"conditions\":[" cond "],\"state\":" st "}]"
#define LTE_N "{\"path\":\"state.x.n\",\"op\":\"lte\",\"value\":3}"
    static const struct load_error refused[] = {
        {"s.json", WITH_RULES(STATE_RULE("5", LTE_N)), "tools.x.rules[0].state",
         "must be an object {counter, window, increment, increment_from}"},
        {"s.json", WITH_RULES(STATE_RULE("{\"counter\":\"\",\"window\":\"hour\"}", LTE_N)),
         "tools.x.rules[0].state.counter", "counter must not be empty"},
        {"s.json", WITH_RULES(STATE_RULE("{\"window\":\"hour\"}", LTE_N)),
         "tools.x.rules[0].state.counter", "counter must not be empty"},
        {"s.json", WITH_RULES(STATE_RULE("{\"counter\":\"n\",\"window\":\"week\"}", LTE_N)),
         "tools.x.rules[0].state.window", "window must be \"minute\", \"hour\", or \"day\", got \"week\""},
        {"s.json", WITH_RULES(STATE_RULE("{\"counter\":\"n\",\"window\":\"second\"}", LTE_N)),
         "tools.x.rules[0].state.window", "window must be \"minute\", \"hour\", or \"day\", got \"second\""},
        {"s.json", WITH_RULES(STATE_RULE("{\"counter\":\"n\",\"window\":60}", LTE_N)),
         "tools.x.rules[0].state.window", "window must be \"minute\", \"hour\", or \"day\""},
        {"s.json", WITH_RULES(STATE_RULE("{\"counter\":\"n\"}", LTE_N)),
         "tools.x.rules[0].state.window", "window must be \"minute\", \"hour\", or \"day\""},
        {"s.json",
         WITH_RULES(STATE_RULE("{\"counter\":\"n\",\"window\":\"hour\",\"increment\":-1}", LTE_N)),
         "tools.x.rules[0].state.increment", "must be a non-negative number"},
        {"s.json",
         WITH_RULES(STATE_RULE("{\"counter\":\"n\",\"window\":\"hour\",\"increment\":\"2\"}", LTE_N)),
         "tools.x.rules[0].state.increment", "must be a non-negative number"},
        {"s.json",
         WITH_RULES(STATE_RULE("{\"counter\":\"n\",\"window\":\"hour\",\"increment_from\":\"amount\"}", LTE_N)),
         "tools.x.rules[0].state.increment_from", "increment_from must start with \"args.\", got \"amount\""},
        {"s.json",
         WITH_RULES(STATE_RULE("{\"counter\":\"n\",\"window\":\"hour\",\"increment_from\":\"state.x.n\"}", LTE_N)),
         "tools.x.rules[0].state.increment_from", "increment_from must start with \"args.\""},
        {"s.json",
         WITH_RULES(STATE_RULE("{\"counter\":\"n\",\"window\":\"hour\",\"scope\":\"team\"}", LTE_N)),
         "tools.x.rules[0].state.scope", "must be grant, subject, session or global"},
        /* A state condition naming a counter no state block defines. */
        {"s.json",
         WITH_RULES("[{\"name\":\"s\",\"conditions\":[{\"path\":\"state.x.nope\",\"op\":\"lt\",\"value\":3}]}]"),
         "tools.x.rules[0].conditions[0].path",
         "condition references state.x.nope but no matching state block found"},
        {"s.json",
         WITH_RULES(STATE_RULE("{\"counter\":\"n\",\"window\":\"hour\"}",
                               "{\"path\":\"state.y.n\",\"op\":\"lt\",\"value\":3}")),
         "tools.x.rules[0].conditions[0].path", "condition references state.y.n but no matching state block found"},
        /* In the wildcard, counters live under _global, not "*". */
        {"s.yaml",
         "version: \"1\"\ntools:\n  \"*\":\n    rules:\n      - name: g\n"
         "        conditions: [{path: state.*.n, op: lte, value: 3}]\n"
         "        state: {counter: n, window: minute}\n",
         "tools.*.rules[0].conditions[0].path", "condition references state.*.n but no matching state block found"},
        /* Two rules of a tool defining one counter. */
        {"s.json",
         WITH_RULES("[{\"name\":\"a\",\"conditions\":[" LTE_N "],\"state\":{\"counter\":\"n\",\"window\":\"hour\"}},"
                    "{\"name\":\"b\",\"conditions\":[" LTE_N "],\"state\":{\"counter\":\"n\",\"window\":\"day\"}}]"),
         "tools.x.rules[1].state.counter", "duplicate state counter \"n\""},
    };
    EXPECT_ERRORS(refused);
#undef STATE_RULE
#undef LTE_N
    /* A condition may read a counter another tool or a later rule defines. */
    struct loaded l;
    LOAD_TEXT_OK(&l, "cross.yaml",
                 "version: \"1\"\ntools:\n"
                 "  reader:\n    rules:\n      - name: r\n        conditions: [{path: state.writer.n, op: lt, value: 2}]\n"
                 "  writer:\n    rules:\n"
                 "      - name: early\n        conditions: [{path: state.writer.n, op: lt, value: 5}]\n"
                 "      - name: w\n        conditions: [{path: state.writer.n, op: lte, value: 3}]\n"
                 "        state: {counter: n, window: hour}\n");
    struct tg_counters *c = tg_counters_new();
    static const struct call calls[] = {
        CALL("g", "reader", NULL, T0, TG_VERDICT_ALLOW, "", NULL),
        CALL("g", "writer", NULL, T0, TG_VERDICT_ALLOW, "", NULL),
        CALL("g", "writer", NULL, T0, TG_VERDICT_ALLOW, "", NULL),
        /* writer's count is 2: reader's lt 2 fails, as a LIMITED until the window ends. */
        CALL("g", "reader", NULL, T0, TG_VERDICT_LIMITED, "r", "r; retry in 1800 s", .counter = "writer.n"),
    };
    RUN_CALLS("cross.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

static void errors_rate_limit(void **state)
{
    char b[1024];
    static const struct {
        const char *rl, *what;
    } e[] = {
        {"\"abc/hour\"", "rate_limit must be \"N/window\" with a positive integer N, got \"abc/hour\""},
        {"\"0/hour\"", "rate_limit must be \"N/window\" with a positive integer N, got \"0/hour\""},
        {"\"-1/hour\"", "rate_limit must be \"N/window\" with a positive integer N, got \"-1/hour\""},
        {"\"5\"", "rate_limit must be \"N/window\" with a positive integer N, got \"5\""},
        {"\"/hour\"", "rate_limit must be \"N/window\" with a positive integer N, got \"/hour\""},
        {"\"5x/hour\"", "rate_limit must be \"N/window\" with a positive integer N, got \"5x/hour\""},
        {"5", "rate_limit must be \"N/window\" with a positive integer N"},
        {"\"5/week\"", "rate_limit window must be \"minute\", \"hour\", or \"day\", got \"week\""},
        {"\"5/second\"", "rate_limit window must be \"minute\", \"hour\", or \"day\", got \"second\""},
        {"\"5/Hour\"", "rate_limit window must be \"minute\", \"hour\", or \"day\", got \"Hour\""},
        {"\"5/\"", "rate_limit window must be \"minute\", \"hour\", or \"day\", got \"\""},
        {"\"5/60\"", "rate_limit window must be \"minute\", \"hour\", or \"day\", got \"60\""},
    };
    for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
        char rules[300];
        snprintf(rules, sizeof(rules), "[{\"name\":\"rl\",\"rate_limit\":%s}]", e[i].rl);
        EXPECT_ERROR("rl.json", with_rules(b, sizeof(b), rules), "tools.x.rules[0].rate_limit", e[i].what);
    }
    static const struct load_error refused[] = {
        {"rl.json",
         WITH_RULES("[{\"name\":\"rl\",\"rate_limit\":\"5/hour\",\"conditions\":[{\"path\":\"args.a\",\"op\":\"eq\",\"value\":1}]}]"),
         "tools.x.rules[0].rate_limit", "rate_limit cannot be combined with conditions or state"},
        {"rl.json",
         WITH_RULES("[{\"name\":\"rl\",\"rate_limit\":\"5/hour\",\"state\":{\"counter\":\"n\",\"window\":\"hour\"}}]"),
         "tools.x.rules[0].rate_limit", "rate_limit cannot be combined with conditions or state"},
        {"rl.json", WITH_RULES("[{\"name\":\"rl\",\"action\":\"deny\",\"rate_limit\":\"5/hour\"}]"),
         "tools.x.rules[0].rate_limit", "rate_limit cannot be used with action \"deny\""},
        {"rl.yaml",
         "version: \"1\"\ntools:\n  x:\n    rules:\n      - {name: a, rate_limit: 5/hour}\n"
         "      - {name: b, rate_limit: 10/minute}\n      - {name: c, rate_limit: 50/hour}\n",
         "tools.x.rules[2].rate_limit", "duplicate state counter \"_rate_hour\""},
    };
    EXPECT_ERRORS(refused);
    /* Same window on different tools: no clash. */
    struct loaded l;
    LOAD_TEXT_OK(&l, "rl.yaml",
                 "version: \"1\"\ntools:\n  x: {rules: [{name: a, rate_limit: 5/hour}]}\n"
                 "  y: {rules: [{name: a, rate_limit: 5/hour}]}\n  \"*\": {rules: [{name: a, rate_limit: 5/hour}]}\n");
    loaded_dispose(&l);
}

static void errors_hosted(void **state)
{
#define LIMIT(l) "{\"version\":\"1\",\"tools\":{\"execute_code\":{\"limits\":[" l "]}}}"
    static const struct {
        const char *text, *where, *what;
    } e[] = {
        {"{\"version\":\"1\",\"tools\":{\"execute_code\":{\"limits\":{}}}}", "tools.execute_code.limits",
         "must be a list of {counter, window, max, scope}"},
        {LIMIT("5"), "tools.execute_code.limits[0]", "must be an object {counter, window, max, scope}"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"week\",\"max\":10}"), "tools.execute_code.limits[0].window",
         "must be second, minute, hour, day or a number of seconds (1..31536000)"},
        {LIMIT("{\"counter\":\"c\",\"max\":10}"), "tools.execute_code.limits[0].window", "must be second, minute"},
        {LIMIT("{\"counter\":\"c\",\"window\":0,\"max\":10}"), "tools.execute_code.limits[0].window", "must be second"},
        {LIMIT("{\"counter\":\"c\",\"window\":-60,\"max\":10}"), "tools.execute_code.limits[0].window", "must be second"},
        {LIMIT("{\"counter\":\"c\",\"window\":31536001,\"max\":10}"), "tools.execute_code.limits[0].window", "must be second"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"60s\",\"max\":10}"), "tools.execute_code.limits[0].window", "must be second"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"Minute\",\"max\":10}"), "tools.execute_code.limits[0].window", "must be second"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"minute\",\"max\":0}"), "tools.execute_code.limits[0].max", "must be a positive integer"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"minute\",\"max\":1.5}"), "tools.execute_code.limits[0].max", "must be a positive integer"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"minute\",\"max\":\"10\"}"), "tools.execute_code.limits[0].max", "must be a positive integer"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"minute\"}"), "tools.execute_code.limits[0].max", "must be a positive integer"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"minute\",\"max\":-3}"), "tools.execute_code.limits[0].max", "must be a positive integer"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"minute\",\"max\":10,\"scope\":\"team\"}"), "tools.execute_code.limits[0].scope",
         "must be grant, subject, session or global"},
        {LIMIT("{\"counter\":\"c\",\"window\":\"minute\",\"max\":10,\"scope\":\"Grant\"}"), "tools.execute_code.limits[0].scope",
         "must be grant, subject, session or global"},
        {LIMIT("{\"counter\":\"\",\"window\":\"minute\",\"max\":10}"), "tools.execute_code.limits[0].counter", "must be a non-empty string"},
        {LIMIT("{\"counter\":7,\"window\":\"minute\",\"max\":10}"), "tools.execute_code.limits[0].counter", "must be a non-empty string"},
        {LIMIT("{\"counter\":\"a\",\"window\":\"minute\",\"max\":10},{\"counter\":\"a\",\"window\":\"minute\",\"max\":11}"),
         "tools.execute_code.limits[1].counter", "counter \"a\" is defined elsewhere with a different max, window or scope"},
        /* The same counter on two tools must be defined alike: max, window and scope. */
        {"{\"version\":\"1\",\"tools\":{\"a\":{\"limits\":[{\"counter\":\"io\",\"window\":\"minute\",\"max\":4}]},"
         "\"b\":{\"limits\":[{\"counter\":\"io\",\"window\":\"minute\",\"max\":5}]}}}",
         "tools.b.limits[0].counter", "counter \"io\" is defined elsewhere with a different max, window or scope"},
        {"{\"version\":\"1\",\"tools\":{\"a\":{\"limits\":[{\"counter\":\"io\",\"window\":\"minute\",\"max\":4}]},"
         "\"b\":{\"limits\":[{\"counter\":\"io\",\"window\":\"hour\",\"max\":4}]}}}",
         "tools.b.limits[0].counter", "counter \"io\" is defined elsewhere"},
        {"{\"version\":\"1\",\"tools\":{\"a\":{\"limits\":[{\"counter\":\"io\",\"window\":\"minute\",\"max\":4}]},"
         "\"b\":{\"limits\":[{\"counter\":\"io\",\"window\":\"minute\",\"max\":4,\"scope\":\"session\"}]}}}",
         "tools.b.limits[0].counter", "counter \"io\" is defined elsewhere"},
        {"{\"version\":\"1\",\"tools\":{\"x\":{\"action\":\"block\"}}}", "tools.x.action", "must be allow, deny or approve"},
        {"{\"version\":\"1\",\"tools\":{\"x\":{\"action\":true}}}", "tools.x.action", "must be allow, deny or approve"},
        {"{\"version\":\"1\",\"tools\":{\"*\":{\"action\":\"approve\"}}}", "tools.*.action",
         "approve is per tool; \"*\" cannot require approval"},
        {"{\"version\":\"1\",\"tools\":{\"x\":{\"action\":\"deny\",\"reason\":5}}}", "tools.x.reason", "must be a string"},
        {"{\"version\":\"1\",\"tools\":{\"x\":{\"action\":\"approve\",\"approval_timeout\":-1}}}", "tools.x.approval_timeout",
         "must be a number of seconds or second|minute|hour|day"},
        {"{\"version\":\"1\",\"tools\":{\"x\":{\"action\":\"approve\",\"approval_timeout\":\"soon\"}}}", "tools.x.approval_timeout",
         "must be a number of seconds or second|minute|hour|day"},
        {"{\"version\":\"1\",\"methods\":\"custom/ping\"}", "methods", "must be a list of strings"},
        {"{\"version\":\"1\",\"methods\":[\"\"]}", "methods[0]", "entry must not be empty"},
        {"{\"version\":\"1\",\"methods\":[\"a\",\"a\"]}", "methods", "duplicate entry \"a\""},
        {"{\"version\":\"1\",\"resources\":[]}", "resources", "must be an object {default, allow, deny, reason}"},
        {"{\"version\":\"1\",\"resources\":{\"default\":\"block\"}}", "resources.default", "must be \"allow\" or \"deny\""},
        {"{\"version\":\"1\",\"resources\":{\"allow\":\"file:///*\"}}", "resources.allow", "must be a list of strings"},
        /* A resource glob with a scheme matches URIs in their normal form only: written another
         * way it would never match (a deny that never denies). */
        {"{\"version\":\"1\",\"resources\":{\"deny\":[\"*.key\",\"file://localhost/secret/**\"]}}", "resources.deny[1]",
         "\"file://localhost/secret/**\" matches no resource: URIs are decided in their normal form; write "
         "\"file:///secret/**\""},
        {"{\"version\":\"1\",\"resources\":{\"deny\":[\"FILE:///secret/**\"]}}", "resources.deny[0]",
         "\"FILE:///secret/**\" matches no resource: URIs are decided in their normal form; write \"file:///secret/**\""},
        {"{\"version\":\"1\",\"resources\":{\"deny\":[\"https://h:443/s/*\"]}}", "resources.deny[0]",
         "\"https://h:443/s/*\" matches no resource: URIs are decided in their normal form; write \"https://h/s/*\""},
        {"{\"version\":\"1\",\"resources\":{\"allow\":[\"file:///a/%2e%2e/b/*\"]}}", "resources.allow[0]",
         "\"file:///a/%2e%2e/b/*\" matches no resource: URIs are decided in their normal form; write \"file:///b/*\""},
        {"{\"version\":\"1\",\"resources\":{\"deny\":[\"file:/secret/**\"]}}", "resources.deny[0]",
         "\"file:/secret/**\" matches no resource: a URI written so cannot be parsed"},
        {"{\"version\":\"1\",\"prompts\":{\"deny\":[\"a\",\"\"]}}", "prompts.deny[1]", "entry must not be empty"},
        {"{\"version\":\"1\",\"prompts\":5}", "prompts", "must be an object {default, allow, deny, reason}"},
    };
#undef LIMIT
    for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++)
        EXPECT_ERROR("hosted.json", e[i].text, e[i].where, e[i].what);
    EXPECT_ERROR("hosted.yaml",
                 "version: \"1\"\ntools:\n  execute_code:\n    limits:\n      - {counter: c, window: fortnight, max: 10}\n",
                 "tools.execute_code.limits[0].window", "must be second, minute, hour, day or a number of seconds");
}

/* "tags": a list of distinct short words per tool, never on "*"; a tool's tags are found by name. */
static void tags_compile_and_errors(void **state)
{
    (void)state;
#define T(t) "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"x\":{\"tags\":" t "}}}"
    EXPECT_ERROR("tags.json", T("\"egress\""), "tools.x.tags", "must be a list of tags");
    EXPECT_ERROR("tags.json", T("[\"egress\",\"\"]"), "tools.x.tags[1]", "a tag must not be empty");
    EXPECT_ERROR("tags.json", T("[\"reads secrets\"]"), "tools.x.tags[0]", "a tag is made of letters, digits, _ - . and : only");
    EXPECT_ERROR("tags.json", T("[\"a*\"]"), "tools.x.tags[0]", "a tag is made of letters");
    EXPECT_ERROR("tags.json", T("[5]"), "tools.x.tags[0]", "a tag must be a string");
    EXPECT_ERROR("tags.json", T("[\"a\",\"a\"]"), "tools.x.tags[1]", "\"a\" is listed twice");
    EXPECT_ERROR("tags.json", T("[\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"]"), "tools.x.tags[0]",
                 "a tag is at most 64 bytes");
    EXPECT_ERROR("tags.json", T("[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]"),
                 "tools.x.tags", "at most 8 tags");
    EXPECT_ERROR("tags.json", "{\"version\":\"1\",\"tools\":{\"*\":{\"tags\":[\"egress\"]}}}", "tools.*.tags",
                 "tags say what one tool does; put them on the tool's own entry");
    EXPECT_ERROR("tags.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"tag\":[\"egress\"]}}}", "tools.x.tag",
                 "unknown field; did you mean `tags`?");
#undef T
    struct tg_policy *p = NULL;
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    const char *yaml = "version: \"1\"\ndefault: deny\ntools:\n  read_env: {tags: [reads_secrets, \"fs:read\"]}\n  post: {}\n";
    cJSON *root = NULL;
    char e[256];
    assert_int_equal(tg_yaml_to_json(yaml, strlen(yaml), &root, e, sizeof(e)), 0);
    assert_int_equal(tg_policy_compile(root, "tags.yaml", &p, &err, &warn), 0);
    const char *const *tags;
    assert_int_equal(tg_policy_tool_tags(p, "read_env", &tags), 2);
    assert_string_equal(tags[0], "reads_secrets");
    assert_string_equal(tags[1], "fs:read");
    assert_int_equal(tg_policy_tool_tags(p, "post", &tags), 0);
    assert_int_equal(tg_policy_tool_tags(p, "nope", &tags), 0);
    assert_null(tags);
    tg_policy_unref(p);
    cJSON_Delete(root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
}

/* The suggestion: one edit away for a known key of up to four characters, two for longer ones;
 * a swap of neighbours is one edit; case does not count; nothing when nothing is that close. */
static void unknown_field_suggestions(void **state)
{
    static const char *const known[] = {"op", "max", "path", "action", "default", "conditions", NULL};
    static const char *const cases[][2] = {
        {"acton", "action"},   {"actoin", "action"},  {"ACTION", "action"},  {"defualt", "default"},
        {"dflt", NULL},        {"po", "op"},          {"o", "op"},           {"opp", "op"},
        {"mx", "max"},         {"maxx", "max"},       {"mix", "max"},        {"mxa", "max"},
        {"pth", "path"},       {"note", NULL},        {"conditons", "conditions"},
        {"condition", "conditions"}, {"colour", NULL}, {"", NULL},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *got = tg__policy_suggest_key(cases[i][0], known);
        if ((got == NULL) != (cases[i][1] == NULL) || (got != NULL && strcmp(got, cases[i][1]) != 0))
            fail_msg("\"%s\": suggested %s, expected %s", cases[i][0], got ? got : "nothing",
                     cases[i][1] ? cases[i][1] : "nothing");
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(deny_lists_of_lists_or_maps_refused),
        cmocka_unit_test(approval_timeout_units),
        cmocka_unit_test(tags_compile_and_errors),
        cmocka_unit_test(errors_rules),
        cmocka_unit_test(evaluate_rule_with_empty_conditions_list_refused),
        cmocka_unit_test(errors_conditions),
        cmocka_unit_test(errors_state),
        cmocka_unit_test(errors_rate_limit),
        cmocka_unit_test(errors_hosted),
        cmocka_unit_test(unknown_field_suggestions),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
