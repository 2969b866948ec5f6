/* policy/regex.c: condition patterns in RE2 syntax, as Intercept (Go's regexp) reads them, run
 * by PCRE2: what each pattern means, what is refused at load, and a pattern that backtracks
 * without end denying the call rather than hanging. */
#include "test/unit/policy/policy_helpers.h"

#include <time.h>

/* ---- regex: RE2 syntax, as Intercept (Go's regexp) reads it ------------------------------ */

/* A tools: block with one tool per pattern, each one evaluate rule "<tool>" that requires
 * args.v to match. Patterns are YAML single-quoted (backslashes are literal there). */
struct rxcase {
    const char *tool, *pattern;
};

static void load_regex_tools(struct loaded *l, const struct rxcase *rx, size_t n)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "version: \"1\"\ntools:\n");
    for (size_t i = 0; i < n; i++)
        tg_buf_appendf(&b, "  %s: {rules: [{name: %s, conditions: [{path: args.v, op: regex, value: '%s'}]}]}\n",
                       rx[i].tool, rx[i].tool, rx[i].pattern);
    tg_buf_append(&b, "", 1);
    load_text(l, "re2.yaml", b.base);
    tg_buf_dispose(&b);
    if (l->rc != 0)
        fail_msg("RE2 patterns refused:\n%s", buf_str(&l->err));
}

/* The hostile review's case: \z is the end of the text, so this allow-list of temporary text
 * files does not let a path traversal through (the POSIX translation read \z as the letter z and
 * \A as A, which left the pattern unanchored). */
static void regex_z_anchors_the_end_of_text(void **state)
{
    static const struct rxcase rx[] = {
        {"tmp", "^/tmp/[a-z0-9_]+\\.txt\\z"},
        {"data", "\\A/data/[a-z]+\\z"},
    };
    static const struct call calls[] = {
        CALL("g", "tmp", "{\"v\":\"/tmp/a.txt\"}", T0, TG_VERDICT_ALLOW, "", NULL),
        CALL("g", "tmp", "{\"v\":\"/tmp/a.txtz/../../etc/passwd\"}", T0, TG_VERDICT_DENY, "tmp", "Denied by rule \"tmp\""),
        CALL("g", "tmp", "{\"v\":\"/tmp/a.txt\\n/etc/passwd\"}", T0, TG_VERDICT_DENY, "tmp", NULL),
        CALL("g", "data", "{\"v\":\"/data/abc\"}", T0, TG_VERDICT_ALLOW, "", NULL),
        CALL("g", "data", "{\"v\":\"A/data/abcz\"}", T0, TG_VERDICT_DENY, "data", NULL),
        CALL("g", "data", "{\"v\":\"../../A/data/abc\"}", T0, TG_VERDICT_DENY, "data", NULL),
    };
    struct loaded l;
    load_regex_tools(&l, rx, 2);
    struct tg_counters *c = tg_counters_new();
    RUN_CALLS("re2.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* Each pattern means what it means in RE2. Under the old POSIX translation \A and \z reached
 * glibc as the letters A and z, so ^/tmp/[a-z0-9_]+\.txt\z was unanchored at the end and let
 * /tmp/a.txtz/../../etc/passwd through; \p{L}, (?i) after the start, \v, \Q..\E, octal and \x
 * escapes, named groups and non-greedy repeats were not RE2's either. */
static void regex_is_re2_syntax(void **state)
{
    static const struct rxcase rx[] = {
        {"z", "^/tmp/[a-z0-9_]+\\.txt\\z"},
        {"A", "\\A/data/"},
        {"dollar", "^abc$"},
        {"i_mid", "^id-(?i)abc$"},
        {"i_group", "^(?i:db)_prod$"},
        {"i_utf", "(?i)^élan$"},
        {"d", "^\\d{3}-\\d{4}$"},
        {"w", "^\\w+$"},
        {"b", "\\bdrop\\b"},
        {"s", "^a\\sb$"},
        {"S", "^\\S+$"},
        {"class_s", "^[\\s,]+$"},
        {"class_S", "^[\\S]+$"},
        {"class_D", "^[\\D]+$"},
        {"lazy", "^<.+?>(.*)$"},
        {"lazy_rep", "^a{2,3}?$"},
        {"pL", "^\\p{L}+$"},
        {"greek", "^\\p{Greek}+$"},
        {"pN", "^\\pN+$"},
        {"dot", "^.$"},
        {"dot_s", "(?s)^a.b$"},
        {"dot_nl", "^a.b$"},
        {"multi", "(?m)^b$"},
        {"quote", "^\\Q(?=x)+\\E$"},
        {"escapes", "^\\101\\x42\\x{43}\\.$"},
        {"vt", "^a\\vb$"},
        {"named", "^(?P<y>\\d{4})-(?<m>\\d\\d)$"},
        {"posix", "^[[:alpha:]][[:^digit:]]$"},
        {"brace", "^a{,2}$"},
        {"ungreedy", "(?U)^a+$"},
        /* found by comparing with RE2 itself on random patterns */
        {"neg_mix", "^[^\\W[:space:]]+$"},     /* PCRE2 10.42 alone lets "α" through */
        {"fold_neg", "(?i)^[\\W\\d]+$"},      /* (?i) folds before it negates: no s via U+017F */
        {"fold_posix", "(?i)^[[:^lower:]]+$"},
        {"fold_scope", "^(?i:[[:^lower:]])[[:^lower:]]$"},
        {"colon_class", "^[:a:]+$"},            /* a class of : and a, not [:alpha:] misplaced */
        {"line_start", "(?m)a\\n^$"},          /* (?m)^ matches after a final newline */
    };
    static const struct own_rule_case cases[] = {
        {"z", "{\"v\":\"/tmp/a.txt\"}", 1},
        {"z", "{\"v\":\"/tmp/a.txtz/../../etc/passwd\"}", 0},
        {"z", "{\"v\":\"/tmp/a.txt\\n\"}", 0},
        {"z", "{\"v\":\"/tmp/a.txtz\"}", 0},
        {"A", "{\"v\":\"/data/x\"}", 1},
        {"A", "{\"v\":\"A/data/x\"}", 0},
        {"A", "{\"v\":\"x/data/\"}", 0},
        {"dollar", "{\"v\":\"abc\"}", 1},
        {"dollar", "{\"v\":\"abc\\n\"}", 0}, /* RE2's $ is the end of text, not before a final newline */
        {"i_mid", "{\"v\":\"id-ABC\"}", 1},
        {"i_mid", "{\"v\":\"ID-abc\"}", 0},
        {"i_group", "{\"v\":\"DB_prod\"}", 1},
        {"i_group", "{\"v\":\"db_PROD\"}", 0},
        {"i_utf", "{\"v\":\"ÉLAN\"}", 1},
        {"d", "{\"v\":\"555-1234\"}", 1},
        {"d", "{\"v\":\"555-123\"}", 0},
        {"d", "{\"v\":\"٥٥٥-1234\"}", 0}, /* \d is ASCII in RE2 */
        {"w", "{\"v\":\"snake_case9\"}", 1},
        {"w", "{\"v\":\"héllo\"}", 0},
        {"w", "{\"v\":\"a-b\"}", 0},
        {"b", "{\"v\":\"x; drop table\"}", 1},
        {"b", "{\"v\":\"dropped\"}", 0},
        {"s", "{\"v\":\"a b\"}", 1},
        {"s", "{\"v\":\"a\\tb\"}", 1},
        {"s", "{\"v\":\"a\\u000bb\"}", 0}, /* RE2's \s is [\t\n\f\r ], no vertical tab */
        {"s", "{\"v\":\"a\\u00a0b\"}", 0},
        {"S", "{\"v\":\"a\\u000bb\"}", 1},
        {"S", "{\"v\":\"a b\"}", 0},
        {"class_s", "{\"v\":\" ,\\t\"}", 1},
        {"class_s", "{\"v\":\"\\u000b\"}", 0},
        {"class_S", "{\"v\":\"a\\u000bé\"}", 1},
        {"class_S", "{\"v\":\"a b\"}", 0},
        {"class_D", "{\"v\":\"abc\"}", 1},
        {"class_D", "{\"v\":\"a1\"}", 0},
        {"lazy", "{\"v\":\"<a><b>\"}", 1},
        {"lazy_rep", "{\"v\":\"aaa\"}", 1},
        {"lazy_rep", "{\"v\":\"aaaa\"}", 0},
        {"pL", "{\"v\":\"héllo\"}", 1},
        {"pL", "{\"v\":\"日本語\"}", 1},
        {"pL", "{\"v\":\"abc1\"}", 0},
        {"greek", "{\"v\":\"αβγ\"}", 1},
        {"greek", "{\"v\":\"abc\"}", 0},
        {"pN", "{\"v\":\"42\"}", 1},
        {"pN", "{\"v\":\"4x\"}", 0},
        {"dot", "{\"v\":\"é\"}", 1}, /* one character, two bytes */
        {"dot", "{\"v\":\"日\"}", 1},
        {"dot", "{\"v\":\"ab\"}", 0},
        {"dot", "{\"v\":\"\\n\"}", 0},
        {"dot_s", "{\"v\":\"a\\nb\"}", 1},
        {"dot_nl", "{\"v\":\"a\\nb\"}", 0},
        {"multi", "{\"v\":\"a\\nb\\nc\"}", 1},
        {"multi", "{\"v\":\"a\\nbc\"}", 0},
        {"quote", "{\"v\":\"(?=x)+\"}", 1},
        {"quote", "{\"v\":\"x\"}", 0},
        {"escapes", "{\"v\":\"ABC.\"}", 1},
        {"escapes", "{\"v\":\"ABCx\"}", 0},
        {"vt", "{\"v\":\"a\\u000bb\"}", 1},
        {"vt", "{\"v\":\"a\\nb\"}", 0},
        {"named", "{\"v\":\"2024-03\"}", 1},
        {"named", "{\"v\":\"2024-3\"}", 0},
        {"posix", "{\"v\":\"ab\"}", 1},
        {"posix", "{\"v\":\"a1\"}", 0},
        {"brace", "{\"v\":\"a{,2}\"}", 1}, /* not a repetition in RE2: literal braces */
        {"brace", "{\"v\":\"aa\"}", 0},
        {"ungreedy", "{\"v\":\"aaa\"}", 1},
        {"neg_mix", "{\"v\":\"ab_1\"}", 1},
        {"neg_mix", "{\"v\":\"α\"}", 0},
        {"neg_mix", "{\"v\":\"a b\"}", 0},
        {"fold_neg", "{\"v\":\"-1.\"}", 1},
        {"fold_neg", "{\"v\":\"s\"}", 0},
        {"fold_neg", "{\"v\":\"K\"}", 0},
        {"fold_neg", "{\"v\":\"\u017f\"}", 0},
        {"fold_posix", "{\"v\":\"1-\"}", 1},
        {"fold_posix", "{\"v\":\"S\"}", 0},
        {"fold_posix", "{\"v\":\"\u212a\"}", 0},
        {"fold_scope", "{\"v\":\"1A\"}", 1},
        {"fold_scope", "{\"v\":\"A1\"}", 0},
        {"colon_class", "{\"v\":\"a:a\"}", 1},
        {"colon_class", "{\"v\":\"b\"}", 0},
        {"line_start", "{\"v\":\"a\\n\"}", 1},
    };
    struct loaded l;
    load_regex_tools(&l, rx, sizeof(rx) / sizeof(rx[0]));
    EXPECT_OWN_RULE(l.p, cases);
    loaded_dispose(&l);
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A pattern that backtracks exponentially ((a+)+$ against a run of a's and a b) stops at the
 * match limit and the call is denied, quickly: a failure to evaluate never lets a call through.
 * Long honest inputs still match (the JIT stack is large enough for a 20000-character path). */
static void regex_catastrophic_backtracking_fails_closed(void **state)
{
    static const struct rxcase rx[] = {
        {"nested", "^(a+)+$"},
        {"alt", "^(a|aa)+$"},
        {"words", "^(\\w+\\s?)*$"},
        {"path", "^/(?:[a-z]|-|/)+\\.csv\\z"},
    };
    struct loaded l;
    load_regex_tools(&l, rx, sizeof(rx) / sizeof(rx[0]));
    struct tg_counters *c = tg_counters_new();
    char evil[200];
    int n = snprintf(evil, sizeof(evil), "{\"v\":\"");
    memset(evil + n, 'a', 60);
    snprintf(evil + n + 60, sizeof(evil) - (size_t)n - 60, "!\"}");
    static const char *const tools[] = {"nested", "alt", "words"};
    for (size_t i = 0; i < 3; i++) {
        struct tg_decision d;
        double t = mono_s();
        decide(l.p, c, "g", tools[i], evil, T0, &d);
        double took = mono_s() - t;
        EXPECT(&d, TG_VERDICT_DENY, tools[i], NULL);
        if (i < 2) /* these two give up; the third is answered (no match) within the limits */
            assert_non_null(strstr(d.message, "gave no answer within its match limits"));
        if (took > 1.0)
            fail_msg("%s: %.3f s to decide", tools[i], took);
    }
    /* 20000 characters of a legitimate path. */
    size_t big = 20000;
    char *ok = malloc(big + 32);
    assert_non_null(ok);
    memcpy(ok, "{\"v\":\"/", 7);
    for (size_t i = 0; i < big; i++)
        ok[7 + i] = "abc-/"[i % 5];
    memcpy(ok + 7 + big, ".csv\"}", 7);
    struct tg_decision d;
    decide(l.p, c, "g", "path", ok, T0, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, "", NULL);
    free(ok);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* What RE2 refuses (and what it reads differently) is refused at load, with the file and the
 * path of the pattern in the policy: PCRE2 would otherwise accept backreferences, lookaround,
 * atomic groups, possessive repeats, recursion, conditionals, verbs, \Z (which also matches
 * before a final newline), \K, \C and the rest. */
static void regex_non_re2_syntax_refused_at_load(void **state)
{
    static const struct {
        const char *pattern, *why;
    } e[] = {
        {"(a)\\\\1", "backreferences are not RE2 syntax"},
        {"(?<n>a)\\\\k<n>", "backreferences are not RE2 syntax"},
        {"(?P<n>a)(?P=n)", "backreferences are not RE2 syntax"},
        {"(a)\\\\g1", "backreferences are not RE2 syntax"},
        {"(a)\\\\g{-1}", "backreferences are not RE2 syntax"},
        {"a\\\\8", "backreferences are not RE2 syntax"},
        {"a(?=b)", "lookaround assertions are not RE2 syntax"},
        {"a(?!b)", "lookaround assertions are not RE2 syntax"},
        {"(?<=a)b", "lookaround assertions are not RE2 syntax"},
        {"(?<!a)b", "lookaround assertions are not RE2 syntax"},
        {"(?>a+)b", "atomic groups are not RE2 syntax"},
        {"a++b", "possessive quantifiers are not RE2 syntax"},
        {"a*+b", "possessive quantifiers are not RE2 syntax"},
        {"a?+b", "possessive quantifiers are not RE2 syntax"},
        {"a{2}+b", "possessive quantifiers are not RE2 syntax"},
        {"a**", "a repetition of a repetition is not RE2 syntax"},
        {"abc\\\\Z", "\\Z is not RE2 syntax"},
        {"(?R)", "recursion and subroutine calls are not RE2 syntax"},
        {"(a)(?1)", "recursion and subroutine calls are not RE2 syntax"},
        {"(?<n>a)(?&n)", "recursion and subroutine calls are not RE2 syntax"},
        {"(?P<n>a)(?P>n)", "recursion and subroutine calls are not RE2 syntax"},
        {"(a)\\\\g<1>", "recursion and subroutine calls are not RE2 syntax"},
        {"(a)?(?(1)b|c)", "conditional groups are not RE2 syntax"},
        {"(*FAIL)", "backtracking verbs and (*...) options are not RE2 syntax"},
        {"(*LIMIT_MATCH=10)a", "backtracking verbs and (*...) options are not RE2 syntax"},
        {"a\\\\Kb", "\\K is not RE2 syntax"},
        {"a\\\\Gb", "\\G is not RE2 syntax"},
        {"a\\\\Cb", "\\C is not RE2 syntax"},
        {"a\\\\hb", "\\h is not RE2 syntax"},
        {"a\\\\Rb", "\\R is not RE2 syntax"},
        {"a\\\\E", "\\E without \\Q is not RE2 syntax"},
        {"[\\\\b]", "\\b inside a character class is not RE2 syntax"},
        {"(?#note)a", "comments are not RE2 syntax"},
        {"(?|(a)|(b))", "branch reset groups are not RE2 syntax"},
        {"(?x)a b", "flag \"x\" is not RE2 syntax (RE2 has i, m, s and U)"},
        {"(?'n'a)", "(?'name'...) is not RE2 syntax; write (?P<name>...)"},
        {"a{1001}", "repetition counts above 1000 are not RE2 syntax"},
        {"a{2,1001}", "repetition counts above 1000 are not RE2 syntax"},
        {"a{99999999999999999999999}", "repetition counts above 1000 are not RE2 syntax"},
        {"a{1,99999999999999999999999}", "repetition counts above 1000 are not RE2 syntax"},
        {"\\\\x4", "\\x needs two hex digits or {hex} in RE2"},
        {"(?i-)a", "(?flags) must name at least one flag on each side of -"},
    };
    for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
        char rules[512], text[1024];
        snprintf(rules, sizeof(rules),
                 "[{\"name\":\"ok\",\"action\":\"deny\"},{\"name\":\"c\",\"conditions\":[{\"path\":\"args.q\",\"op\":\"exists\",\"value\":true},"
                 "{\"path\":\"args.a\",\"op\":\"regex\",\"value\":\"%s\"}]}]",
                 e[i].pattern);
        with_rules(text, sizeof(text), rules);
        EXPECT_ERROR("x.json", text, "tools.x.rules[1].conditions[1].value", e[i].why);
    }
    /* The same in YAML, and a PCRE2 compile error keeps the pattern and the reason. */
    EXPECT_ERROR("x.yaml",
                 "version: \"1\"\ntools:\n  t:\n    rules:\n      - name: r\n        conditions:\n"
                 "          - {path: args.p, op: exists, value: true}\n"
                 "          - {path: args.p, op: regex, value: '(x)\\1'}\n",
                 "tools.t.rules[0].conditions[1].value", "backreferences are not RE2 syntax");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(regex_z_anchors_the_end_of_text),
        cmocka_unit_test(regex_is_re2_syntax),
        cmocka_unit_test(regex_catastrophic_backtracking_fails_closed),
        cmocka_unit_test(regex_non_re2_syntax_refused_at_load),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
