/* policy/yaml.c and the JSON reader behind tg_policy_load: a policy's syntax. The fixtures in
 * test/unit/policy/fixtures/ come in pairs, NAME.json and NAME.yaml, holding the same policy: both
 * give the same tree and decide identically. YAML errors carry a line number; duplicate keys,
 * alias bombs and bad merge keys are refused; plain scalars follow the YAML 1.2 core schema. */
#include "test/unit/policy/policy_helpers.h"

static const char *const pairs[] = {"intercept", "intercept_deny", "hosted", "seed"};
#define NPAIRS (sizeof(pairs) / sizeof(pairs[0]))

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s", path);
    struct tg_buf b;
    tg_buf_init(&b);
    char chunk[4096];
    size_t k;
    while ((k = fread(chunk, 1, sizeof(chunk), f)) > 0)
        tg_buf_append(&b, chunk, k);
    fclose(f);
    tg_buf_append(&b, "", 1);
    *len = b.len - 1;
    return tg_buf_release(&b);
}

/* ---- fixtures: both syntaxes, same policy --------------------------------------- */

/* NAME.yaml becomes exactly the tree NAME.json parses to. */
static void json_and_yaml_give_the_same_tree(void **state)
{
    for (size_t i = 0; i < NPAIRS; i++) {
        char pj[512], py[512];
        snprintf(pj, sizeof(pj), FIX "%s.json", pairs[i]);
        snprintf(py, sizeof(py), FIX "%s.yaml", pairs[i]);
        size_t nj, ny;
        char *tj = read_file(pj, &nj), *ty = read_file(py, &ny);
        struct tg_json_doc doc;
        const char *why = NULL;
        size_t off = 0;
        if (tg_json_parse(tj, nj, 64, 1, &doc, &why, &off) != 0)
            fail_msg("%s: %s at %zu", pj, why, off);
        cJSON *fromyaml = NULL;
        char err[300];
        if (tg_yaml_to_json(ty, ny, &fromyaml, err, sizeof(err)) != 0)
            fail_msg("%s: %s", py, err);
        if (!cJSON_Compare(doc.root, fromyaml, 1)) {
            char *a = cJSON_PrintUnformatted(doc.root), *b = cJSON_PrintUnformatted(fromyaml);
            fail_msg("%s and %s differ:\n%s\n%s", pj, py, a, b);
        }
        cJSON_Delete(doc.root);
        cJSON_Delete(fromyaml);
        free(tj);
        free(ty);
    }
}

/* The same calls against the JSON and the YAML form, each with its own counters, decide alike. */
static void json_and_yaml_decide_identically(void **state)
{
    static const char *const tools[] = {
        "free", "secret_tool", "internal_debug", "unlisted", "eq_num", "eq_str", "eq_strnum", "eq_bool", "neq_num",
        "neq_str", "in", "not_in", "lt", "lte", "gt", "gte", "regex_anchor", "regex_digit", "regex_class",
        "regex_icase", "regex_free", "contains_str", "contains_list", "contains_num", "exists_true", "exists_false",
        "nested", "index", "charge", "create_charge", "create_refund", "bulk_op", "create_issue", "create_pr",
        "delete_repo", "drop_db", "listed", "listed_but_hidden", "limited", "checked", "execute_code", "search",
        "fetch", "write", "global_tool", "two_limits", "outer_only", "unnamed", "rm", "rm2", "deploy", "deploy_fast",
        "deploy_min", "mixed", "Execute_code"};
    static const char *const args[] = {
        NULL, "{}", "{\"v\":5}", "{\"v\":\"5\"}", "{\"v\":\"main\"}", "{\"v\":true}", "{\"v\":9.5}", "{\"v\":null}",
        "{\"v\":\"feat/x\"}", "{\"v\":\"v1.2\"}", "{\"v\":\"1.2-ab\"}", "{\"v\":\"DROP TABLE t\"}",
        "{\"v\":\"a test\"}", "{\"tags\":[\"urgent\"],\"ids\":[41,42]}", "{\"a\":{\"b\":{\"c\":\"deep\"}}}",
        "{\"items\":[1,{\"name\":\"second\"}]}", "{\"amount\":30000,\"currency\":\"usd\"}", "{\"force\":1}",
        "{\"sudo\":true}", "{\"n\":3}", "{\"n\":30}", "{\"v\":\"usd\"}", "{\"v\":\"admin\"}"};
    for (size_t i = 0; i < NPAIRS; i++) {
        char nj[64], ny[64];
        snprintf(nj, sizeof(nj), "%s.json", pairs[i]);
        snprintf(ny, sizeof(ny), "%s.yaml", pairs[i]);
        struct tg_policy *pj = load_fixture(nj), *py = load_fixture(ny);
        struct tg_counters *cj = tg_counters_new(), *cy = tg_counters_new();
        int n = 0;
        for (int round = 0; round < 4; round++) /* repeat so that counters run out alike */
            for (size_t t = 0; t < sizeof(tools) / sizeof(tools[0]); t++)
                for (size_t a = 0; a < sizeof(args) / sizeof(args[0]); a++) {
                    struct tg_decision dj, dy;
                    int64_t now = T0 + round * 7000 + (int64_t)a;
                    const char *grant = (a & 1) ? "grant-a" : "grant-b";
                    decide(pj, cj, grant, tools[t], args[a], now, &dj);
                    decide(py, cy, grant, tools[t], args[a], now, &dy);
                    if (dj.verdict != dy.verdict || strcmp(dj.rule, dy.rule) || strcmp(dj.message, dy.message) ||
                        dj.retry_after_ms != dy.retry_after_ms || strcmp(dj.counter, dy.counter) ||
                        dj.approval_timeout_ms != dy.approval_timeout_ms ||
                        strcmp(dj.counters_json, dy.counters_json))
                        fail_msg("%s: %s(%s) round %d: json %s \"%s\" \"%s\" %llu, yaml %s \"%s\" \"%s\" %llu", pairs[i],
                                 tools[t], args[a] ? args[a] : "NULL", round, verdict_name(dj.verdict), dj.rule,
                                 dj.message, (unsigned long long)dj.retry_after_ms, verdict_name(dy.verdict),
                                 dy.rule, dy.message, (unsigned long long)dy.retry_after_ms);
                    n++;
                }
        for (size_t t = 0; t < sizeof(tools) / sizeof(tools[0]); t++)
            assert_int_equal(tg_policy_tool_visible(pj, tools[t]), tg_policy_tool_visible(py, tools[t]));
        assert_int_equal(tg_counters_count(cj), tg_counters_count(cy));
        assert_true(n > 1000);
        tg_counters_free(cj);
        tg_counters_free(cy);
        tg_policy_unref(pj);
        tg_policy_unref(py);
    }
}

/* ---- syntax: YAML and JSON ---------------------------------------------------------------- */

static void yaml_errors_carry_a_line_number(void **state)
{
    static const struct load_error refused[] = {
        {"syntax.yaml", "version: \"1\"\ndefault: allow: deny\n", "line 2", "mapping values are not allowed"},
        {"syntax.yaml", "version: \"1\"\ntools:\n  x:\n    rules: [a, b\nhide: []\n", "", ": line "},
        {"syntax.yaml", "version: \"1\"\n\n\ntools: {x: {rules: [}}\n", "line 4", ""},
        {"syntax.yaml", "version: \"1\"\ntools:\n  x: *nowhere\n", "line 3", "unknown alias"},
        {"syntax.yaml", "version: \"1\"\n---\nversion: \"1\"\n", "line 2", "a policy file holds one YAML document"},
        {"syntax.yaml", "", "", ": empty document"},
        {"syntax.yaml", "# only a comment\n", "", ": empty document"},
        {"syntax.yaml", "version: \"1\"\n? [a, b]\n: c\n", "line 2", "mapping keys must be scalars"},
        {"syntax.yaml", "version: \"1\"\n\"a\\0b\": 1\n", "line 2", "invalid mapping key"},
    };
    EXPECT_ERRORS(refused);
    /* Deep nesting is refused, not recursed into. */
    struct tg_buf deep;
    tg_buf_init(&deep);
    tg_buf_appends(&deep, "version: \"1\"\nx: ");
    for (int i = 0; i < 100; i++)
        tg_buf_appends(&deep, "[");
    for (int i = 0; i < 100; i++)
        tg_buf_appends(&deep, "]");
    tg_buf_appends(&deep, "\n");
    EXPECT_ERROR("deep.yaml", buf_str(&deep), "line 2", "nesting too deep");
    tg_buf_dispose(&deep);
}

static void yaml_duplicate_keys_refused(void **state)
{
    static const struct load_error refused[] = {
        {"dup.yaml", "version: \"1\"\ndefault: allow\ndefault: deny\n", "line 3", "duplicate key \"default\""},
        {"dup.yaml",
         "version: \"1\"\ntools:\n  x:\n    rules: []\n  y:\n    rules: []\n  x:\n    rules: []\n",
         "line 7", "duplicate key \"x\""},
        {"dup.yaml", "version: \"1\"\ntools: {x: {rules: []}, \"x\": {rules: []}}\n", "line 2", "duplicate key \"x\""},
        /* A key that only differs in quoting is the same key. */
        {"dup.yaml", "version: \"1\"\n'version': \"1\"\n", "line 2", "duplicate key \"version\""},
    };
    EXPECT_ERRORS(refused);
}

/* Billion laughs: nine aliases of nine aliases of ... Refused by the node budget, quickly. */
static void yaml_alias_bomb_refused(void **state)
{
    struct tg_buf y;
    tg_buf_init(&y);
    tg_buf_appends(&y, "version: \"1\"\na: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for (char c = 'b'; c <= 'j'; c++)
        tg_buf_appendf(&y, "%c: &%c [*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c,*%c]\n", c, c, c - 1, c - 1, c - 1, c - 1, c - 1,
                       c - 1, c - 1, c - 1, c - 1);
    EXPECT_ERROR("laughs.yaml", buf_str(&y), "line 7", "too many nodes (aliases)");
    /* Also straight through tg_yaml_to_json. */
    cJSON *out = NULL;
    char err[300];
    assert_int_not_equal(tg_yaml_to_json(y.base, y.len, &out, err, sizeof(err)), 0);
    assert_null(out);
    assert_non_null(strstr(err, "too many nodes"));
    tg_buf_dispose(&y);
}

/* Anchors and aliases within the budget are expanded like Go's YAML does. */
static void yaml_aliases_within_budget(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "alias.yaml",
                 "version: \"1\"\n"
                 "tools:\n"
                 "  a:\n"
                 "    rules: &limit\n"
                 "      - name: cap\n"
                 "        conditions: &conds [{path: args.n, op: lte, value: &max 10}]\n"
                 "  b:\n"
                 "    rules: *limit\n"
                 "  c:\n"
                 "    rules:\n"
                 "      - {name: cap2, conditions: *conds}\n"
                 "      - {name: exact, conditions: [{path: args.m, op: neq, value: *max}]}\n");
    static const struct call calls[] = {
        CALL("g", "b", "{\"n\":11}", T0, TG_VERDICT_DENY, "cap", NULL),
        CALL("g", "c", "{\"n\":10,\"m\":10}", T0, TG_VERDICT_DENY, "exact", NULL),
        CALL("g", "c", "{\"n\":10,\"m\":9}", T0, TG_VERDICT_ALLOW, "", NULL),
    };
    struct tg_counters *c = tg_counters_new();
    RUN_CALLS("alias.yaml", l.p, c, calls);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* YAML 1.2 core schema for plain scalars; quoted and !!str scalars stay strings. */
static void yaml_scalars(void **state)
{
    const char *y = "i: 42\nneg: -7\nhex: 0x1F\noct: 0o17\nf: 1.5\ne: 2e3\ndot: .5\n"
                    "t: true\nT: True\nfl: FALSE\nn: null\ntilde: ~\nempty:\n"
                    "qs: \"42\"\nss: '42'\ntag: !!str 42\nyes: yes\non: on\ninf: .inf\nver: 1.2.3\n"
                    "big: 123456789012345678901234567890\nsp: hello world\n";
    cJSON *root = NULL;
    char err[300];
    if (tg_yaml_to_json(y, strlen(y), &root, err, sizeof(err)) != 0)
        fail_msg("%s", err);
    cJSON *want = J("{\"i\":42,\"neg\":-7,\"hex\":31,\"oct\":15,\"f\":1.5,\"e\":2000,\"dot\":0.5,"
                    "\"t\":true,\"T\":true,\"fl\":false,\"n\":null,\"tilde\":null,\"empty\":null,"
                    "\"qs\":\"42\",\"ss\":\"42\",\"tag\":\"42\",\"yes\":\"yes\",\"on\":\"on\",\"inf\":\".inf\","
                    "\"ver\":\"1.2.3\",\"big\":1.2345678901234568e+29,\"sp\":\"hello world\"}");
    if (!cJSON_Compare(root, want, 1))
        fail_msg("got %s", cJSON_PrintUnformatted(root));
    cJSON_Delete(root);
    cJSON_Delete(want);
}

static void json_duplicate_keys_and_syntax_refused(void **state)
{
    static const struct load_error refused[] = {
        {"dup.json", "{\"version\":\"1\",\"version\":\"1\"}", "", ":1: duplicate object key"},
        /* core/base/json.c finds duplicates when the object closes, so the line is that of its '}'
         * (6), not of the second "x" (5); the error does not name the key either. */
        {"dup.json", "{\n  \"version\": \"1\",\n  \"tools\": {\n    \"x\": {\"rules\": []},\n    \"x\": {\"rules\": []}\n  }\n}\n",
         NULL, "duplicate object key"},
        /* Duplicates compare after decoding escapes. */
        {"dup.json", "{\"version\":\"1\",\"tools\":{\"x\":{},\"\\u0078\":{}}}", "", ":1: duplicate object key"},
        {"syntax.json", "{\n\"version\": \"1\",\n\"tools\": {,}\n}", "", ":3: "},
        {"syntax.json", "{\"version\":\"1\"} trailing", "", ":1: "},
        {"syntax.json", "{\"version\":\"1\",}", "", ":1: "},
        {"utf8.json", "{\"version\":\"1\",\"hide\":[\"\xff\"]}", "", ":1: invalid UTF-8 in string"},
        {"missing.json", "", "", ": empty document"},
    };
    EXPECT_ERRORS(refused);
    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_policy *p = NULL;
    assert_int_not_equal(tg_policy_load("/nonexistent/dir/policy.json", &p, &err, NULL), 0);
    assert_null(p);
    assert_non_null(strstr(buf_str(&err), "/nonexistent/dir/policy.json: cannot open: "));
    tg_buf_dispose(&err);
}

/* YAML merge keys ("<<: *base") are applied, as Go's yaml.v3 applies them for Intercept: the
 * merged fields count, and "<<" is not kept as an ordinary (unknown) key. */
static void yaml_merge_keys_apply(void **state)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "merge.yaml",
                 "version: \"1\"\n"
                 "default: deny\n"
                 "tools:\n"
                 "  a:\n"
                 "    rules:\n"
                 "      - &cap {name: cap, conditions: [{path: args.n, op: lte, value: 10}]}\n"
                 "  b:\n"
                 "    rules:\n"
                 "      - <<: *cap\n"
                 "        on_deny: n is too big\n");
    assert_string_equal(buf_str(&l.warn), "");
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    decide(l.p, c, "g", "b", "{\"n\":11}", T0, &d);
    EXPECT(&d, TG_VERDICT_DENY, "cap", "n is too big");
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* Only a plain << is a merge key (YAML 1.1's merge type, as yaml.v3 reads it): '<<', "<<" and
 * !!str << are ordinary keys, so a tool or field named "<<" (scan writes names quoted) stays one. */
static void yaml_only_a_plain_merge_key_merges(void **state)
{
    static const char *const texts[][2] = {
        {"base: &b {x: 1}\nm:\n  <<: *b\n", "{\"base\":{\"x\":1},\"m\":{\"x\":1}}"},
        {"base: &b {x: 1}\nm:\n  !!merge <<: *b\n", "{\"base\":{\"x\":1},\"m\":{\"x\":1}}"},
        {"base: &b {x: 1}\nm:\n  '<<': *b\n", "{\"base\":{\"x\":1},\"m\":{\"<<\":{\"x\":1}}}"},
        {"base: &b {x: 1}\nm:\n  \"<<\": *b\n", "{\"base\":{\"x\":1},\"m\":{\"<<\":{\"x\":1}}}"},
        {"base: &b {x: 1}\nm:\n  !!str <<: *b\n", "{\"base\":{\"x\":1},\"m\":{\"<<\":{\"x\":1}}}"},
        {"m: {\"<<\": 3, '<<x': 4}\n", "{\"m\":{\"<<\":3,\"<<x\":4}}"},
        {"m:\n  \"<<\": [1, 2]\n", "{\"m\":{\"<<\":[1,2]}}"},
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        cJSON *out = NULL;
        char err[200] = "";
        if (tg_yaml_to_json(texts[i][0], strlen(texts[i][0]), &out, err, sizeof(err)) != 0)
            fail_msg("refused (%s):\n%s", err, texts[i][0]);
        char *got = cJSON_PrintUnformatted(out);
        if (strcmp(got, texts[i][1]) != 0)
            fail_msg("%s\ngave %s, expected %s", texts[i][0], got, texts[i][1]);
        cJSON_free(got);
        cJSON_Delete(out);
    }
    /* A tool named "<<", as tollgate scan writes it, loads as that tool. */
    struct loaded l;
    LOAD_TEXT_OK(&l, "quoted-merge.yaml",
                 "version: \"1\"\ndefault: deny\ntools:\n  \"<<\":\n    action: allow\n  'x':\n    action: deny\n");
    assert_int_equal(tg_policy_tool_count(l.p), 2);
    assert_int_equal(tg_policy_tool_visible(l.p, "<<"), 1);
    loaded_dispose(&l);
}

/* A bad merge key is refused with an error, and frees what it built once (a second << that
 * does not parse, and a merge list holding a scalar, once freed the merged map twice). */
static void yaml_bad_merge_keys_refused(void **state)
{
    static const char *const bad[] = {
        "a: &a {x: 1}\nm:\n  <<: *a\n  <<: @x\n",
        "a: &a {x: 1}\nb: &b {y: 2}\nm:\n  <<: [*b, 3]\n",
        "a: &a {x: 1}\nm:\n  <<: 3\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *out = NULL;
        char err[200] = "";
        if (tg_yaml_to_json(bad[i], strlen(bad[i]), &out, err, sizeof(err)) == 0)
            fail_msg("accepted: %s", bad[i]);
        assert_null(out);
        assert_true(err[0] != '\0');
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(yaml_bad_merge_keys_refused),
        cmocka_unit_test(json_and_yaml_give_the_same_tree),
        cmocka_unit_test(json_and_yaml_decide_identically),
        cmocka_unit_test(yaml_errors_carry_a_line_number),
        cmocka_unit_test(yaml_duplicate_keys_refused),
        cmocka_unit_test(yaml_alias_bomb_refused),
        cmocka_unit_test(yaml_aliases_within_budget),
        cmocka_unit_test(yaml_scalars),
        cmocka_unit_test(json_duplicate_keys_and_syntax_refused),
        cmocka_unit_test(yaml_only_a_plain_merge_key_merges),
        cmocka_unit_test(yaml_merge_keys_apply),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
