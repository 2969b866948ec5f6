/* policy/decide.c, the condition operators of Intercept rules (eq, neq, in, not_in, lt, lte, gt,
 * gte, regex, contains, exists) over argument paths: each true and false, Go's %v formatting of
 * numbers where a string meets a number, and failing closed on values of another type. */
#include "test/unit/policy/policy_helpers.h"

/* ---- Intercept operators, each true and false ------------------------------------------- */

struct opcase {
    const char *tool, *args;
    int allow;
};

static const struct opcase opcases[] = {
    /* eq, numeric: numbers compare as numbers; a string and a number compare as Go's %v prints them */
    {"eq_num", "{\"v\":5}", 1},
    {"eq_num", "{\"v\":5.0}", 1},
    {"eq_num", "{\"v\":5e0}", 1},
    {"eq_num", "{\"v\":\"5\"}", 1},
    {"eq_num", "{\"v\":6}", 0},
    {"eq_num", "{\"v\":4.999}", 0},
    {"eq_num", "{\"v\":\"5.0\"}", 0},
    {"eq_num", "{\"v\":\" 5\"}", 0},
    {"eq_num", "{\"v\":[5]}", 0},
    {"eq_num", "{\"v\":null}", 0},
    {"eq_num", "{}", 0},
    {"eq_num", NULL, 0},
    /* eq, string */
    {"eq_str", "{\"v\":\"main\"}", 1},
    {"eq_str", "{\"v\":\"Main\"}", 0},
    {"eq_str", "{\"v\":\"main \"}", 0},
    {"eq_str", "{\"v\":\"mai\"}", 0},
    {"eq_str", "{\"w\":\"main\"}", 0},
    /* eq "5" (a string in the policy) */
    {"eq_strnum", "{\"v\":5}", 1},
    {"eq_strnum", "{\"v\":5.0}", 1},
    {"eq_strnum", "{\"v\":\"5\"}", 1},
    {"eq_strnum", "{\"v\":50}", 0},
    {"eq_strnum", "{\"v\":0.5}", 0},
    /* eq true: %v of true is "true" */
    {"eq_bool", "{\"v\":true}", 1},
    {"eq_bool", "{\"v\":\"true\"}", 1},
    {"eq_bool", "{\"v\":false}", 0},
    {"eq_bool", "{\"v\":1}", 0},
    {"eq_bool", "{\"v\":\"True\"}", 0},
    /* neq: a missing field fails every operator but exists */
    {"neq_num", "{\"v\":6}", 1},
    {"neq_num", "{\"v\":\"6\"}", 1},
    {"neq_num", "{\"v\":5}", 0},
    {"neq_num", "{\"v\":\"5\"}", 0},
    {"neq_num", "{}", 0},
    {"neq_str", "{\"v\":\"ready\"}", 1},
    {"neq_str", "{\"v\":\"Draft\"}", 1},
    {"neq_str", "{\"v\":\"draft\"}", 0},
    {"neq_str", "{}", 0},
    /* in [usd, eur, 7] */
    {"in", "{\"v\":\"usd\"}", 1},
    {"in", "{\"v\":\"eur\"}", 1},
    {"in", "{\"v\":7}", 1},
    {"in", "{\"v\":\"7\"}", 1},
    {"in", "{\"v\":7.0}", 1},
    {"in", "{\"v\":\"USD\"}", 0},
    {"in", "{\"v\":\"gbp\"}", 0},
    {"in", "{\"v\":8}", 0},
    {"in", "{\"v\":[\"usd\"]}", 0},
    {"in", "{}", 0},
    /* not_in [admin, root] */
    {"not_in", "{\"v\":\"bob\"}", 1},
    {"not_in", "{\"v\":\"Admin\"}", 1},
    {"not_in", "{\"v\":5}", 1},
    {"not_in", "{\"v\":\"admin\"}", 0},
    {"not_in", "{\"v\":\"root\"}", 0},
    {"not_in", "{}", 0},
    /* lt 10, lte 10, gt 0, gte 1.5: numbers only; a string never compares numerically */
    {"lt", "{\"v\":9}", 1},
    {"lt", "{\"v\":9.999}", 1},
    {"lt", "{\"v\":-1e300}", 1},
    {"lt", "{\"v\":10}", 0},
    {"lt", "{\"v\":11}", 0},
    {"lt", "{\"v\":\"9\"}", 0},
    {"lt", "{\"v\":true}", 0},
    {"lt", "{\"v\":null}", 0},
    {"lt", "{\"v\":[1]}", 0},
    {"lt", "{}", 0},
    {"lte", "{\"v\":10}", 1},
    {"lte", "{\"v\":1e1}", 1},
    {"lte", "{\"v\":-3}", 1},
    {"lte", "{\"v\":10.0001}", 0},
    {"lte", "{\"v\":\"10\"}", 0},
    {"gt", "{\"v\":0.001}", 1},
    {"gt", "{\"v\":1e300}", 1},
    {"gt", "{\"v\":0}", 0},
    {"gt", "{\"v\":-0.0}", 0},
    {"gt", "{\"v\":-1}", 0},
    {"gt", "{\"v\":\"1\"}", 0},
    {"gte", "{\"v\":1.5}", 1},
    {"gte", "{\"v\":2}", 1},
    {"gte", "{\"v\":1.4999}", 0},
    {"gte", "{\"v\":\"2\"}", 0},
    {"gte", "{\"v\":false}", 0},
    /* regex ^feat/[a-z]+$ : anchors hold */
    {"regex_anchor", "{\"v\":\"feat/login\"}", 1},
    {"regex_anchor", "{\"v\":\"xfeat/login\"}", 0},
    {"regex_anchor", "{\"v\":\"feat/login2\"}", 0},
    {"regex_anchor", "{\"v\":\"feat/\"}", 0},
    {"regex_anchor", "{\"v\":\"FEAT/login\"}", 0},
    {"regex_anchor", "{\"v\":\"feat/login\\n\"}", 0},
    {"regex_anchor", "{\"v\":5}", 0},
    {"regex_anchor", "{}", 0},
    /* regex ^v\d+\.\d+$ : \d is a digit, \. a literal dot */
    {"regex_digit", "{\"v\":\"v1.23\"}", 1},
    {"regex_digit", "{\"v\":\"v10.0\"}", 1},
    {"regex_digit", "{\"v\":\"v1x23\"}", 0},
    {"regex_digit", "{\"v\":\"v1.\"}", 0},
    {"regex_digit", "{\"v\":\"vd.d\"}", 0},
    {"regex_digit", "{\"v\":\"v1.2.3\"}", 0},
    /* regex ^[\d.]+-\w+$ : \d inside a bracket, \w */
    {"regex_class", "{\"v\":\"1.2.3-rc_1\"}", 1},
    {"regex_class", "{\"v\":\"1.2-x\"}", 1},
    {"regex_class", "{\"v\":\"1a2-x\"}", 0},
    {"regex_class", "{\"v\":\"1.2-x y\"}", 0},
    {"regex_class", "{\"v\":\"d.-x\"}", 0},
    /* regex (?i)^drop\s+table : case folding, \s */
    {"regex_icase", "{\"v\":\"DROP TABLE users\"}", 1},
    {"regex_icase", "{\"v\":\"drop\\ttable\"}", 1},
    {"regex_icase", "{\"v\":\"Drop   Table\"}", 1},
    {"regex_icase", "{\"v\":\"droptable\"}", 0},
    {"regex_icase", "{\"v\":\"select 1; drop table x\"}", 0},
    /* regex without anchors matches anywhere */
    {"regex_free", "{\"v\":\"sudo rm -rf /\"}", 1},
    {"regex_free", "{\"v\":\"rm -r\"}", 0},
    /* contains: substring of a string, element of a list */
    {"contains_str", "{\"v\":\"a test run\"}", 1},
    {"contains_str", "{\"v\":\"test\"}", 1},
    {"contains_str", "{\"v\":\"TEST\"}", 0},
    {"contains_str", "{\"v\":\"tes\"}", 0},
    {"contains_str", "{\"v\":[\"a test\"]}", 0},
    {"contains_str", "{\"v\":[\"test\"]}", 1},
    {"contains_str", "{\"v\":5}", 0},
    {"contains_list", "{\"tags\":[\"low\",\"urgent\"]}", 1},
    {"contains_list", "{\"tags\":[\"low\"]}", 0},
    {"contains_list", "{\"tags\":[\"urgent-ish\"]}", 0},
    {"contains_list", "{\"tags\":\"not urgent\"}", 1},
    {"contains_list", "{\"tags\":[]}", 0},
    {"contains_list", "{\"tags\":{\"urgent\":1}}", 0},
    {"contains_num", "{\"ids\":[41,42]}", 1},
    {"contains_num", "{\"ids\":[\"42\"]}", 1},
    {"contains_num", "{\"ids\":[42.0]}", 1},
    {"contains_num", "{\"ids\":[4,2]}", 0},
    {"contains_num", "{\"ids\":\"4242\"}", 0},
    /* exists: null counts as absent */
    {"exists_true", "{\"v\":0}", 1},
    {"exists_true", "{\"v\":false}", 1},
    {"exists_true", "{\"v\":\"\"}", 1},
    {"exists_true", "{\"v\":[]}", 1},
    {"exists_true", "{\"v\":null}", 0},
    {"exists_true", "{}", 0},
    {"exists_true", NULL, 0},
    {"exists_false", "{}", 1},
    {"exists_false", NULL, 1},
    {"exists_false", "{\"v\":null}", 1},
    {"exists_false", "{\"V\":1}", 1},
    {"exists_false", "{\"v\":\"\"}", 0},
    {"exists_false", "{\"v\":0}", 0},
    /* nested path args.a.b.c */
    {"nested", "{\"a\":{\"b\":{\"c\":\"deep\"}}}", 1},
    {"nested", "{\"a\":{\"b\":{\"c\":\"deep\",\"d\":1}},\"e\":2}", 1},
    {"nested", "{\"a\":{\"b\":{\"c\":\"shallow\"}}}", 0},
    {"nested", "{\"a\":{\"b\":\"deep\"}}", 0},
    {"nested", "{\"a\":{\"b\":{\"c\":{\"deep\":1}}}}", 0},
    {"nested", "{\"a\":\"b.c\"}", 0},
    {"nested", "{\"a.b.c\":\"deep\"}", 0},
    {"nested", "{}", 0},
    /* array index path args.items.1.name */
    {"index", "{\"items\":[{\"name\":\"first\"},{\"name\":\"second\"}]}", 1},
    {"index", "{\"items\":[0,{\"name\":\"second\"},2]}", 1},
    {"index", "{\"items\":{\"1\":{\"name\":\"second\"}}}", 1},
    {"index", "{\"items\":[{\"name\":\"second\"}]}", 0},
    {"index", "{\"items\":[{\"name\":\"first\"},{\"name\":\"third\"}]}", 0},
    {"index", "{\"items\":[]}", 0},
    {"index", "{\"items\":\"second\"}", 0},
};

static void operators_true_and_false(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "intercept.yaml" : "intercept.json");
        struct tg_counters *c = tg_counters_new();
        for (size_t i = 0; i < sizeof(opcases) / sizeof(opcases[0]); i++) {
            const struct opcase *oc = &opcases[i];
            struct tg_decision d;
            decide(p, c, "g-ops", oc->tool, oc->args, T0 + (int64_t)i * 1000, &d);
            char msg[160];
            snprintf(msg, sizeof(msg), "Denied by rule \"%s\"", oc->tool);
            if (oc->allow ? d.verdict != TG_VERDICT_ALLOW
                          : (d.verdict != TG_VERDICT_DENY || strcmp(d.rule, oc->tool) || strcmp(d.message, msg)))
                fail_msg("%s %s(%s): got %s rule \"%s\" \"%s\", expected %s", y ? "yaml" : "json", oc->tool,
                         oc->args ? oc->args : "NULL", verdict_name(d.verdict), d.rule, d.message,
                         oc->allow ? "ALLOW" : "DENY by its rule");
            /* A denied call leaves no reservation behind. */
            if (d.verdict == TG_VERDICT_DENY)
                assert_int_equal(d.nres, 0);
        }
        tg_counters_free(c);
        tg_policy_unref(p);
    }
}

/* Go's %v prints a float64 with %g's shortest form: %v switches to exponent notation at 1e6
 * (exponent < -4 || >= 6 with the shortest precision), not at 1e21 as the JSON encoder does.
 * Arguments come from JSON, so Intercept sees them as float64: eq(1000000, "1000000") is false
 * there ("1e+06" != "1000000") and eq(1234567, "1.234567e+06") is true. */
static void go_v_formats_large_floats_in_exponent_form(void **state)
{
    struct loaded l;
    load_text(&l, "gov.yaml",
              "version: \"1\"\n"
              "tools:\n"
              "  million:\n"
              "    rules: [{name: m, conditions: [{path: args.v, op: eq, value: \"1000000\"}]}]\n"
              "  expo:\n"
              "    rules: [{name: e, conditions: [{path: args.v, op: eq, value: \"1.234567e+06\"}]}]\n"
              "  small:\n"
              "    rules: [{name: s, conditions: [{path: args.v, op: eq, value: \"999999\"}]}]\n");
    assert_int_equal(l.rc, 0);
    static const struct call calls[] = {
        CALL("g", "small", "{\"v\":999999}", T0, TG_VERDICT_ALLOW, "", NULL), /* below the threshold both agree */
        CALL("g", "million", "{\"v\":1000000}", T0, TG_VERDICT_DENY, "m", NULL),
        CALL("g", "expo", "{\"v\":1234567}", T0, TG_VERDICT_ALLOW, "", NULL),
    };
    struct tg_counters *c = tg_counters_new();
    RUN_CALLS("gov.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* The other side of %v: Intercept reads its policy with yaml.v3, which gives a plain integer
 * scalar as an int, and %v prints an int with all its digits. So value: 1000000 in the policy
 * equals the string argument "1000000" (and not "1e+06"), whatever size the integer. The JSON
 * form of the same policy must decide the same. */
static void go_v_policy_integers_print_all_digits(void **state)
{
    static const char *const texts[][2] = {
        {"int.yaml", "version: \"1\"\ntools:\n  t:\n    rules: [{name: id, conditions: [{path: args.id, op: in, value: [1000000, 20000000]}]}]\n"},
        {"int.json", "{\"version\":\"1\",\"tools\":{\"t\":{\"rules\":[{\"name\":\"id\",\"conditions\":[{\"path\":\"args.id\",\"op\":\"in\",\"value\":[1000000,20000000]}]}]}}}"},
    };
    static const struct call calls[] = {
        CALL("g", "t", "{\"id\":1000000}", T0, TG_VERDICT_ALLOW, "", NULL), /* number to number */
        CALL("g", "t", "{\"id\":\"20000000\"}", T0, TG_VERDICT_ALLOW, "", NULL),
        CALL("g", "t", "{\"id\":\"1e+06\"}", T0, TG_VERDICT_DENY, "id", NULL),
    };
    for (int i = 0; i < 2; i++) {
        struct loaded l;
        load_text(&l, texts[i][0], texts[i][1]);
        assert_int_equal(l.rc, 0);
        struct tg_counters *c = tg_counters_new();
        RUN_CALLS(texts[i][0], l.p, c, calls);
        tg_counters_free(c);
        loaded_dispose(&l);
    }
}

/* A deny-list must not be passed by handing it a value of another shape: env not_in
 * ["production"] with env: ["production"] (or {"v": "production"}, or null) is not "some other
 * environment". neq and not_in compare a string, number or boolean; anything else fails the
 * condition, so the rule denies. The other operators fail closed the same way on a value of the
 * wrong type: no number from a string for lt..gte, no substring of an object for contains, no
 * match of a list for regex, no member of the list found by eq or in for a list or an object. */
static void operators_fail_closed_on_values_of_another_type(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "types.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  neq:      {rules: [{name: neq,      conditions: [{path: args.env, op: neq, value: production}]}]}\n"
                 "  not_in:   {rules: [{name: not_in,   conditions: [{path: args.env, op: not_in, value: [production, prod]}]}]}\n"
                 "  eq:       {rules: [{name: eq,       conditions: [{path: args.env, op: eq, value: staging}]}]}\n"
                 "  in:       {rules: [{name: in,       conditions: [{path: args.env, op: in, value: [staging, dev]}]}]}\n"
                 "  lt:       {rules: [{name: lt,       conditions: [{path: args.env, op: lt, value: 10}]}]}\n"
                 "  lte:      {rules: [{name: lte,      conditions: [{path: args.env, op: lte, value: 10}]}]}\n"
                 "  gt:       {rules: [{name: gt,       conditions: [{path: args.env, op: gt, value: 0}]}]}\n"
                 "  gte:      {rules: [{name: gte,      conditions: [{path: args.env, op: gte, value: 0}]}]}\n"
                 "  contains: {rules: [{name: contains, conditions: [{path: args.env, op: contains, value: stag}]}]}\n"
                 "  regex:    {rules: [{name: regex,    conditions: [{path: args.env, op: regex, value: \"^staging$\"}]}]}\n");
    static const struct own_rule_case cases[] = {
        /* the deny-lists: scalars other than the listed ones pass, everything else fails */
        {"neq", "{\"env\":\"staging\"}", 1},
        {"neq", "{\"env\":7}", 1},
        {"neq", "{\"env\":false}", 1},
        {"neq", "{\"env\":\"production\"}", 0},
        {"neq", "{\"env\":[\"production\"]}", 0},
        {"neq", "{\"env\":[\"staging\"]}", 0},
        {"neq", "{\"env\":[]}", 0},
        {"neq", "{\"env\":{\"name\":\"production\"}}", 0},
        {"neq", "{\"env\":{}}", 0},
        {"neq", "{\"env\":null}", 0},
        {"neq", "{}", 0},
        {"not_in", "{\"env\":\"staging\"}", 1},
        {"not_in", "{\"env\":1}", 1},
        {"not_in", "{\"env\":true}", 1},
        {"not_in", "{\"env\":\"prod\"}", 0},
        {"not_in", "{\"env\":[\"production\"]}", 0},
        {"not_in", "{\"env\":[\"production\",\"prod\"]}", 0},
        {"not_in", "{\"env\":[[\"production\"]]}", 0},
        {"not_in", "{\"env\":{\"0\":\"production\"}}", 0},
        {"not_in", "{\"env\":null}", 0},
        /* the allow-lists: only the listed scalars pass */
        {"eq", "{\"env\":\"staging\"}", 1},
        {"eq", "{\"env\":[\"staging\"]}", 0},
        {"eq", "{\"env\":{\"staging\":true}}", 0},
        {"in", "{\"env\":\"dev\"}", 1},
        {"in", "{\"env\":[\"dev\"]}", 0},
        {"in", "{\"env\":[\"staging\",\"dev\"]}", 0},
        {"in", "{\"env\":{\"dev\":1}}", 0},
        {"in", "{\"env\":null}", 0},
        /* numeric comparisons: numbers only */
        {"lt", "{\"env\":5}", 1},
        {"lt", "{\"env\":\"5\"}", 0},
        {"lt", "{\"env\":[5]}", 0},
        {"lt", "{\"env\":{\"v\":5}}", 0},
        {"lt", "{\"env\":true}", 0},
        {"lt", "{\"env\":false}", 0},
        {"lt", "{\"env\":null}", 0},
        {"lte", "{\"env\":\"\"}", 0},
        {"lte", "{\"env\":[]}", 0},
        {"gt", "{\"env\":\"1\"}", 0},
        {"gt", "{\"env\":[1]}", 0},
        {"gte", "{\"env\":{}}", 0},
        {"gte", "{\"env\":true}", 0},
        /* contains: a substring of a string or an element of a list, never a key or a value of a map */
        {"contains", "{\"env\":\"staging\"}", 1},
        {"contains", "{\"env\":[\"stag\"]}", 1},
        {"contains", "{\"env\":{\"stag\":\"stag\"}}", 0},
        {"contains", "{\"env\":[[\"stag\"]]}", 0},
        {"contains", "{\"env\":5}", 0},
        {"contains", "{\"env\":null}", 0},
        /* regex: strings only */
        {"regex", "{\"env\":\"staging\"}", 1},
        {"regex", "{\"env\":[\"staging\"]}", 0},
        {"regex", "{\"env\":{\"staging\":1}}", 0},
    };
    EXPECT_OWN_RULE(l.p, cases);
    loaded_dispose(&l);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(operators_true_and_false),
        cmocka_unit_test(go_v_formats_large_floats_in_exponent_form),
        cmocka_unit_test(operators_fail_closed_on_values_of_another_type),
        cmocka_unit_test(go_v_policy_integers_print_all_digits),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
