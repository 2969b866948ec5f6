/* policy/compile_history.c, decide_history.c: session-history rules ("when", history conditions)
 * and runaway-loop brakes, decided over the local store's history and through a plan (the
 * cluster's path), and the errors a malformed one gives. */
#include "test/unit/unit.h"

#include "policy/explain.h"
#include "test/unit/policy/policy_helpers.h"

#define SEC 1000LL

/* One call as `sub` (NULL: the grant's own) of grant "g" in session sess on upstream "up". */
static void call_as(const struct tg_policy *p, struct tg_counters *c, const char *sub, const char *sess,
                    const char *tool, const char *args, int64_t now, struct tg_decision *d)
{
    struct tg_caller who = {"g", sess, "up", sub, sub ? "https://issuer" : NULL};
    cJSON *a = args ? J(args) : NULL;
    tg_policy_decide_call(p, c, &who, tool, a, now, d);
    cJSON_Delete(a);
}

static void call(const struct tg_policy *p, struct tg_counters *c, const char *tool, const char *args, int64_t now,
                 struct tg_decision *d)
{
    call_as(p, c, "alice", "s1", tool, args, now, d);
}

#define TOXIC(scope)                                                                                            \
    "version: \"1\"\n"                                                                                        \
    "default: allow\n"                                                                                        \
    "tools:\n"                                                                                                \
    "  read_env: {tags: [reads_secrets]}\n"                                                                   \
    "  http_post: {tags: [egress]}\n"                                                                         \
    "  \"*\":\n"                                                                                              \
    "    rules:\n"                                                                                            \
    "      - name: no-egress-after-secrets\n"                                                                 \
    "        when: {tags: [egress]}\n"                                                                        \
    "        conditions:\n"                                                                                   \
    "          - history: {tags: [reads_secrets], within: 10m" scope "}\n"                                    \
    "            op: eq\n"                                                                                    \
    "            value: 0\n"
static const char toxic[] = TOXIC("");

/* After a read of secrets, egress is refused for 10 minutes, naming the read; then allowed. */
static void toxic_flow_is_refused_for_the_window(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "toxic.yaml", toxic);
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    call(l.p, c, "http_post", "{\"url\":\"https://x\"}", T0, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    call(l.p, c, "read_env", "{}", T0 + SEC, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    assert_string_equal(d.history_json, "");
    call(l.p, c, "http_post", "{\"url\":\"https://x\"}", T0 + 2 * SEC, &d);
    EXPECT(&d, TG_VERDICT_DENY, "no-egress-after-secrets",
           "Denied by rule \"no-egress-after-secrets\": 1 matching call within 10 min (the rule needs eq 0); "
           "the latest: tool read_env on up at 2024-03-10T10:30:01.000Z");
    assert_string_equal(d.history_json, "{\"tool\":\"read_env\",\"upstream\":\"up\",\"at\":\"2024-03-10T10:30:01.000Z\"}");
    /* another subject of the grant did not read anything */
    call_as(l.p, c, "bob", "s2", "http_post", "{}", T0 + 3 * SEC, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    /* the last millisecond of the window, and the first after it */
    call(l.p, c, "http_post", "{}", T0 + SEC + 10 * MIN_MS - 1, &d);
    EXPECT(&d, TG_VERDICT_DENY, "no-egress-after-secrets", NULL);
    call(l.p, c, "http_post", "{}", T0 + SEC + 10 * MIN_MS, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    assert_string_equal(d.history_json, "");
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* scope grant: what one subject read counts for every subject of the grant. */
static void scope_grant_sees_every_subject(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "toxic-grant.yaml", TOXIC(", scope: grant"));
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    call_as(l.p, c, "alice", "s1", "read_env", "{}", T0, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    call_as(l.p, c, "bob", "s2", "http_post", "{}", T0 + SEC, &d);
    EXPECT(&d, TG_VERDICT_DENY, "no-egress-after-secrets", NULL);
    call_as(l.p, c, NULL, "s3", "http_post", "{}", T0 + SEC, &d); /* the grant's own */
    EXPECT(&d, TG_VERDICT_DENY, "no-egress-after-secrets", NULL);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* At most 3 distinct args.repo per hour for create_issue; a repo used before counts once. */
static void distinct_values_per_hour(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "distinct.json",
                 "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"create_issue\":{\"rules\":[{\"name\":\"three-repos\","
                 "\"conditions\":[{\"history\":{\"tools\":[\"create_issue\"],\"distinct\":\"args.repo\",\"within\":\"1h\"},"
                 "\"op\":\"lte\",\"value\":3}]}]}}}");
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    const char *repos[] = {"a", "b", "c", "a", "b"};
    for (int i = 0; i < 5; i++) {
        char args[64];
        snprintf(args, sizeof(args), "{\"repo\":\"%s\",\"title\":\"t%d\"}", repos[i], i);
        call(l.p, c, "create_issue", args, T0 + i * SEC, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    }
    call(l.p, c, "create_issue", "{\"repo\":\"d\"}", T0 + 10 * SEC, &d);
    EXPECT(&d, TG_VERDICT_DENY, "three-repos",
           "Denied by rule \"three-repos\": 4 distinct values of args.repo within 1 h (the rule needs lte 3); the "
           "latest: tool create_issue on up at 2024-03-10T10:30:04.000Z");
    /* an hour after "a" and "b" were last used, d fits */
    call(l.p, c, "create_issue", "{\"repo\":\"d\"}", T0 + 4 * SEC + HOUR_MS, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* A remembered value is read by its path, not its slot: a policy whose paths come in another
 * order (another upstream's, or this one after a reload) counts the same distinct values. */
static void distinct_values_are_read_by_path(void **state)
{
    (void)state;
    struct loaded a, b;
    LOAD_TEXT_OK(&a, "a.json",
                 "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"create_issue\":{\"rules\":[{\"name\":\"r\","
                 "\"conditions\":[{\"history\":{\"same\":\"args.x\",\"within\":\"1h\"},\"op\":\"gte\",\"value\":0},"
                 "{\"history\":{\"distinct\":\"args.repo\",\"within\":\"1h\"},\"op\":\"gte\",\"value\":0}]}]}}}");
    LOAD_TEXT_OK(&b, "b.json",
                 "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"create_issue\":{\"rules\":[{\"name\":\"two\","
                 "\"conditions\":[{\"history\":{\"tools\":[\"create_issue\"],\"distinct\":\"args.repo\",\"within\":\"1h\"},"
                 "\"op\":\"lte\",\"value\":2}]}]}}}");
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    call(a.p, c, "create_issue", "{\"repo\":\"p\",\"x\":1}", T0, &d);
    call(a.p, c, "create_issue", "{\"repo\":\"q\",\"x\":2}", T0 + 1, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    call(b.p, c, "create_issue", "{\"repo\":\"q\"}", T0 + 2, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    call(b.p, c, "create_issue", "{\"repo\":\"r\"}", T0 + 3, &d);
    EXPECT(&d, TG_VERDICT_DENY, "two", "Denied by rule \"two\": 3 distinct values of args.repo within 1 h*");
    tg_counters_free(c);
    loaded_dispose(&a);
    loaded_dispose(&b);
}

static const char list_first[] = "version: \"1\"\n"
                                 "default: allow\n"
                                 "tools:\n"
                                 "  \"*\":\n"
                                 "    rules:\n"
                                 "      - name: list-before-delete\n"
                                 "        when: {tools: [\"delete_*\"]}\n"
                                 "        on_deny: list the directory first\n"
                                 "        conditions:\n"
                                 "          - history: {tools: [\"list_*\"], same: args.path, scope: session, within: 1h}\n"
                                 "            op: gte\n"
                                 "            value: 1\n";

/* delete_* only after list_* on the same args.path in this session. */
static void list_before_delete_in_the_session(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "list.yaml", list_first);
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    call(l.p, c, "delete_file", "{\"path\":\"/a\"}", T0, &d);
    EXPECT(&d, TG_VERDICT_DENY, "list-before-delete", "list the directory first");
    call(l.p, c, "list_dir", "{\"path\":\"/a\",\"depth\":1}", T0 + SEC, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    call(l.p, c, "delete_file", "{\"path\":\"/a\"}", T0 + 2 * SEC, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    call(l.p, c, "delete_file", "{\"path\":\"/b\"}", T0 + 3 * SEC, &d);
    EXPECT(&d, TG_VERDICT_DENY, "list-before-delete", NULL);
    call(l.p, c, "delete_file", NULL, T0 + 3 * SEC, &d); /* no path: nothing can be the same */
    EXPECT(&d, TG_VERDICT_DENY, "list-before-delete", NULL);
    call_as(l.p, c, "alice", "s2", "delete_file", "{\"path\":\"/a\"}", T0 + 4 * SEC, &d); /* another session */
    EXPECT(&d, TG_VERDICT_DENY, "list-before-delete", NULL);
    call(l.p, c, "list_other", "{\"path\":\"/b\"}", T0 + 5 * SEC, &d); /* a rule not for it: when */
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    call(l.p, c, "delete_dir", "{\"path\":\"/b\"}", T0 + 6 * SEC, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    tg_counters_free(c);
    loaded_dispose(&l);
}

static const char brakes[] = "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{"
                             "\"create_issue\":{\"brake\":{\"repeats\":4,\"within\":\"60s\"},"
                             "\"limits\":[{\"counter\":\"ci\",\"window\":\"day\",\"max\":100}]},"
                             "\"poll\":{\"tags\":[\"read\"]},"
                             "\"*\":{\"brake\":{\"repeats\":2,\"within\":\"60s\",\"cycle\":3,\"tags\":[\"write\"]}},"
                             "\"a\":{\"tags\":[\"write\"]},\"b\":{\"tags\":[\"write\"]},\"c\":{\"tags\":[\"write\"]}}}";

/* The N+1th identical call is braked (-32002, rule brake), spends nothing, is not recorded;
 * key order and number spelling do not make calls differ; varied arguments pass. */
static void brake_on_identical_calls(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "brakes.json", brakes);
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    const char *spellings[] = {"{\"repo\":\"r\",\"n\":1}", "{\"n\":1.0,\"repo\":\"r\"}", "{ \"n\" : 10e-1, \"repo\" : \"r\" }",
                               "{\"repo\":\"r\",\"n\":1E0}"};
    for (int i = 0; i < 4; i++) {
        call(l.p, c, "create_issue", spellings[i], T0 + i * SEC, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
        assert_int_equal(d.nres, 1);
    }
    call(l.p, c, "create_issue", "{\"repo\":\"r\",\"n\":1}", T0 + 10 * SEC, &d);
    EXPECT(&d, TG_VERDICT_LIMITED, "brake",
           "you have called create_issue with the same arguments 5 times in 60 s; stop and report to the user");
    assert_int_equal(d.nres, 0);
    assert_int_equal(d.retry_after_ms, 50 * SEC); /* the first leaves the window at T0 + 60 s */
    /* varied arguments pass */
    for (int i = 0; i < 10; i++) {
        char args[64];
        snprintf(args, sizeof(args), "{\"repo\":\"r\",\"n\":%d}", i + 2);
        call(l.p, c, "create_issue", args, T0 + 11 * SEC + i, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    }
    /* braked calls were not recorded: once the first leaves, one more fits */
    call(l.p, c, "create_issue", "{\"repo\":\"r\",\"n\":1}", T0 + 60 * SEC + 1, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    call(l.p, c, "create_issue", "{\"repo\":\"r\",\"n\":1}", T0 + 60 * SEC + 2, &d);
    EXPECT(&d, TG_VERDICT_LIMITED, "brake", NULL);
    /* the bucket took only the allowed calls: 4 + 10 + 1 of 100 */
    struct tg_policy_explain *e = tg_xmalloc(sizeof(*e));
    struct tg_caller who = {"g", "s1", "up", "alice", "https://issuer"};
    cJSON *a = J("{\"repo\":\"q\"}");
    tg_policy_explain_call(l.p, c, &who, "create_issue", a, T0 + 60 * SEC + 3, e);
    if (strstr(e->d.counters_json, "\"ci\":84") == NULL)
        fail_msg("counters %s", e->d.counters_json);
    cJSON_Delete(a);
    free(e);
    /* another subject has its own history */
    call_as(l.p, c, "bob", "s9", "create_issue", "{\"repo\":\"r\",\"n\":1}", T0 + 60 * SEC + 4, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* What counts as the same arguments: canonical JSON, nothing looser. With repeats 1, the second
 * call is braked exactly when its arguments are the first's. */
static void brake_compares_canonical_arguments(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "one.json", "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{\"t\":{\"brake\":{\"repeats\":1,\"within\":60}}}}");
    static const struct {
        const char *a, *b;
        int same;
    } pairs[] = {
        {"{\"a\":{\"x\":1,\"y\":[1,2]},\"s\":\"v\"}", "{ \"s\" : \"v\", \"a\" : {\"y\":[1, 2.0], \"x\":1e0} }", 1},
        {"{\"n\":100}", "{\"n\":1e2}", 1},
        {"{\"n\":-0}", "{\"n\":0}", 1},
        {"{\"n\":0.5}", "{\"n\":5e-1}", 1},
        {"{\"n\":123456789012345678901}", "{\"n\":123456789012345678902}", 0},
        {"{\"l\":[1,2]}", "{\"l\":[2,1]}", 0},
        {"{\"a\":1}", "{\"a\":\"1\"}", 0},
        {"{\"a\":1,\"b\":2}", "{\"a\":2,\"b\":1}", 0},
        {"{\"a\":{\"b\":1}}", "{\"a\":{\"c\":1}}", 0},
        {"{\"a\":null}", "{}", 0},
        {"{}", NULL, 1}, /* no arguments are {} */
        {"{\"s\":\"ab\"}", "{\"s\":\"a\\u0062\"}", 1},
    };
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        call(l.p, c, "t", pairs[i].a, T0, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
        call(l.p, c, "t", pairs[i].b, T0 + 1, &d);
        if ((d.verdict == TG_VERDICT_LIMITED) != pairs[i].same)
            fail_msg("pair %zu: %s then %s: %s", i, pairs[i].a, pairs[i].b ? pairs[i].b : "(none)", d.message);
        call_as(l.p, c, "alice", "s1", "t2", pairs[i].a, T0 + 2, &d); /* another tool is another call */
        EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
        tg_counters_free(c);
    }
    loaded_dispose(&l);
}

/* "*"'s brake applies to tools with one of its tags; cycles of 2 and 3 calls are braked and
 * named; a tool without the tag is never braked by it. */
static void brake_cycles_and_tags(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "brakes.json", brakes);
    for (int L = 2; L <= 3; L++) {
        struct tg_counters *c = tg_counters_new();
        struct tg_decision d;
        const char *names[] = {"a", "b", "c"};
        int braked_at = -1;
        for (int i = 0; i < 12 && braked_at < 0; i++) {
            call(l.p, c, names[i % L], "{\"x\":1}", T0 + i * SEC, &d);
            if (d.verdict != TG_VERDICT_ALLOW)
                braked_at = i;
        }
        assert_int_equal(braked_at, 2 * L); /* the loop ran twice; its third round starts */
        EXPECT(&d, TG_VERDICT_LIMITED, "brake", L == 2 ? "you have repeated the same 2 calls (b, a) 3 times in 60 s; stop and report to the user"
                                                       : "you have repeated the same 3 calls (b, c, a) 3 times in 60 s; stop and report to the user");
        assert_int_equal(d.retry_after_ms, 60 * SEC - (uint64_t)(2 * L) * SEC);
        tg_counters_free(c);
    }
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    for (int i = 0; i < 10; i++) {
        call(l.p, c, "poll", "{}", T0 + i, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    }
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* A ring that forgot calls inside the window cannot prove "no read of secrets": deny, saying so;
 * a lower bound that the calls it holds already meet stands. */
static void known_since_fails_closed(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "toxic.yaml", toxic);
    struct tg_counters *c = tg_counters_new();
    tg_counters_history_limits(c, 4, (size_t)64 << 20);
    struct tg_decision d;
    for (int i = 0; i < 5; i++) {
        call(l.p, c, "other", "{}", T0 + i * SEC, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    }
    call(l.p, c, "http_post", "{}", T0 + 6 * SEC, &d);
    EXPECT(&d, TG_VERDICT_DENY, "no-egress-after-secrets",
           "Denied by rule \"no-egress-after-secrets\": history is too short to check it: calls before "
           "2024-03-10T10:30:00.001Z are forgotten and the rule looks back 10 min; raise limits.history_calls");
    /* once the forgotten call is out of the window, it can be proven again */
    call(l.p, c, "http_post", "{}", T0 + 10 * MIN_MS + 1, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    tg_counters_free(c);
    struct loaded m;
    LOAD_TEXT_OK(&m, "list.yaml", list_first);
    c = tg_counters_new();
    tg_counters_history_limits(c, 2, (size_t)64 << 20);
    call(m.p, c, "list_dir", "{\"path\":\"/a\"}", T0, &d);
    call(m.p, c, "x", "{}", T0 + 1, &d);
    call(m.p, c, "list_dir", "{\"path\":\"/a\"}", T0 + 2, &d);
    call(m.p, c, "delete_file", "{\"path\":\"/a\"}", T0 + 3, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    tg_counters_free(c);
    loaded_dispose(&m);
    loaded_dispose(&l);
}

/* A continuation (an MRTR round) judges history but records nothing and is never braked. */
static void continuation_records_nothing(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "toxic.yaml", toxic);
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    struct tg_caller who = {"g", "s1", "up", "alice", "https://issuer"};
    cJSON *a = J("{}");
    for (int i = 0; i < 3; i++) {
        tg_policy_decide_continuation(l.p, c, &who, "read_env", a, T0 + i, &d);
        EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    }
    tg_policy_decide_call(l.p, c, &who, "http_post", a, T0 + 10, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    /* and its judgement stands on what is recorded */
    tg_policy_decide_call(l.p, c, &who, "read_env", a, T0 + 20, &d);
    tg_policy_decide_continuation(l.p, c, &who, "http_post", a, T0 + 30, &d);
    EXPECT(&d, TG_VERDICT_DENY, "no-egress-after-secrets", NULL);
    cJSON_Delete(a);
    struct loaded m;
    LOAD_TEXT_OK(&m, "brakes.json", brakes);
    cJSON *b = J("{\"repo\":\"r\"}");
    for (int i = 0; i < 4; i++)
        tg_policy_decide_call(m.p, c, &who, "create_issue", b, T0 + i, &d);
    tg_policy_decide_continuation(m.p, c, &who, "create_issue", b, T0 + 5, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    cJSON_Delete(b);
    loaded_dispose(&m);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* The cluster's path: a plan answered by another store between passes decides as the local store
 * does, in one round trip, and adds to the remote only in its final pass. */
static int planned(const struct tg_policy *p, struct tg_counters *remote, const struct tg_caller *who,
                   const char *tool, const cJSON *args, int64_t now, struct tg_decision *d)
{
    size_t neffects;
    int unsettled;
    int trips = decide_through_plan(p, remote, who, tool, args, now, d, &neffects, &unsettled);
    assert_int_equal(unsettled, 0);
    return trips;
}

static void plan_decides_as_the_local_store(void **state)
{
    (void)state;
    const char *texts[] = {toxic, list_first, brakes};
    const char *names[] = {"toxic.yaml", "list.yaml", "brakes.json"};
    const char *tools[] = {"read_env", "http_post", "list_dir", "delete_file", "create_issue", "a", "b", "poll"};
    const char *argss[] = {"{\"path\":\"/a\"}", "{\"path\":\"/b\",\"repo\":\"r\"}", "{\"repo\":\"r\",\"path\":\"/a\"}"};
    for (int k = 0; k < 3; k++) {
        struct loaded l;
        LOAD_TEXT_OK(&l, names[k], texts[k]);
        struct tg_counters *local = tg_counters_new(), *remote = tg_counters_new();
        uint32_t seed = 12345u + (uint32_t)k;
        for (int i = 0; i < 300; i++) {
            seed = seed * 1103515245u + 12345u;
            const char *tool = tools[(seed >> 8) % 8];
            const char *sub = (seed >> 16) % 3 == 0 ? NULL : (seed >> 16) % 3 == 1 ? "alice" : "bob";
            const char *sess = (seed >> 20) % 2 ? "s1" : "s2";
            cJSON *args = J(argss[(seed >> 24) % 3]);
            struct tg_caller who = {"g", sess, "up", sub, sub ? "iss" : NULL};
            int64_t now = T0 + i * 7 * SEC;
            struct tg_decision a, b;
            tg_policy_decide_call(l.p, local, &who, tool, args, now, &a);
            int trips = planned(l.p, remote, &who, tool, args, now, &b);
            if (a.verdict != b.verdict || strcmp(a.rule, b.rule) != 0 || strcmp(a.message, b.message) != 0 ||
                strcmp(a.history_json, b.history_json) != 0 || a.retry_after_ms != b.retry_after_ms)
                fail_msg("%s call %d (%s): local %s \"%s\" \"%s\", planned %s \"%s\" \"%s\"", names[k], i, tool,
                         verdict_name(a.verdict), a.rule, a.message, verdict_name(b.verdict), b.rule, b.message);
            if (trips > 1)
                fail_msg("%s call %d (%s): %d round trips", names[k], i, tool, trips);
            cJSON_Delete(args);
        }
        tg_counters_free(local);
        tg_counters_free(remote);
        loaded_dispose(&l);
    }
}

/* A policy without tags, history conditions or brakes records nothing; "when" alone does not
 * make it record. */
static void a_policy_without_them_records_nothing(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "plain.yaml",
                 "version: \"1\"\ndefault: allow\ntools:\n  x:\n    rules:\n      - name: r\n        when: {tools: [x]}\n"
                 "        conditions: [{path: args.a, op: eq, value: 1}]\n");
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    call(l.p, c, "x", "{\"a\":1}", T0, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    call(l.p, c, "x", "{\"a\":2}", T0, &d);
    EXPECT(&d, TG_VERDICT_DENY, "r", NULL);
    call(l.p, c, "y", "{\"a\":2}", T0, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    assert_int_equal(tg_counters_history_keys(c), 0);
    tg_counters_free(c);
    loaded_dispose(&l);
    LOAD_TEXT_OK(&l, "toxic.yaml", toxic);
    c = tg_counters_new();
    call(l.p, c, "x", NULL, T0, &d);
    assert_int_equal(tg_counters_history_keys(c), 2); /* alice's ring and the grant's */
    call_as(l.p, c, NULL, "s1", "x", NULL, T0, &d);
    assert_int_equal(tg_counters_history_keys(c), 2); /* the grant's own: one ring */
    tg_counters_free(c);
    loaded_dispose(&l);
}

#define HC(h, op, v) WITH_RULES("[{\"name\":\"r\",\"conditions\":[{\"history\":" h ",\"op\":\"" op "\",\"value\":" v "}]}]")
#define C0 "tools.x.rules[0].conditions[0]"

static void errors_of_history_conditions(void **state)
{
    (void)state;
    static const struct load_error cases[] = {
        {"nowithin.json", HC("{\"tags\":[\"a\"]}", "eq", "0"), C0 ".history.within", "is required*"},
        {"zero.json", HC("{\"within\":\"0s\"}", "eq", "0"), C0 ".history.within", "must be a duration from 1 second to 1 day*"},
        {"neg.json", HC("{\"within\":\"-5m\"}", "eq", "0"), C0 ".history.within", "must be a duration*"},
        {"huge.json", HC("{\"within\":\"2d\"}", "eq", "0"), C0 ".history.within", "must be a duration*"},
        {"huge2.json", HC("{\"within\":86401}", "eq", "0"), C0 ".history.within", "must be a duration*"},
        {"huge3.json", HC("{\"within\":\"99999999999999999999h\"}", "eq", "0"), C0 ".history.within", "must be a duration*"},
        {"word.json", HC("{\"within\":\"soon\"}", "eq", "0"), C0 ".history.within", "must be a duration*"},
        {"unit.json", HC("{\"within\":\"10mm\"}", "eq", "0"), C0 ".history.within", "must be a duration*"},
        {"nan.json", HC("{\"within\":true}", "eq", "0"), C0 ".history.within", "must be a duration*"},
        {"op.json", HC("{\"within\":\"1m\"}", "regex", "0"), C0 ".op", "a history condition compares a count*"},
        {"val.json", HC("{\"within\":\"1m\"}", "lt", "\"3\""), C0 ".value", "a history condition's value is a count*"},
        {"negval.json", HC("{\"within\":\"1m\"}", "lt", "-1"), C0 ".value", "a history condition's value is a count*"},
        {"scope.json", HC("{\"within\":\"1m\",\"scope\":\"global\"}", "eq", "0"), C0 ".history.scope", "must be subject, grant or session"},
        {"key.json", HC("{\"within\":\"1m\",\"tagz\":[\"a\"]}", "eq", "0"), C0 ".history.tagz", "unknown field; did you mean `tags`?"},
        {"path.json", HC("{\"within\":\"1m\",\"same\":\"repo\"}", "eq", "0"), C0 ".history.same", "must be an argument path*"},
        {"path2.json", HC("{\"within\":\"1m\",\"distinct\":\"args.a..b\"}", "eq", "0"), C0 ".history.distinct", "\"args.a..b\" has an empty segment"},
        {"globs.json", HC("{\"within\":\"1m\",\"tools\":[]}", "eq", "0"), C0 ".history.tools", "must be a non-empty list*"},
        {"tag.json", HC("{\"within\":\"1m\",\"tags\":[\"a b\"]}", "eq", "0"), C0 ".history.tags[0]", "a tag is made of*"},
        {"hist.json", HC("[1]", "eq", "0"), C0 ".history", "must be a map*"},
        {"extra.json", WITH_RULES("[{\"name\":\"r\",\"conditions\":[{\"history\":{\"within\":\"1m\"},\"op\":\"eq\",\"value\":0,\"path\":\"args.a\"}]}]"),
         C0 ".path", "unknown field*"},
        {"five.json",
         WITH_RULES("[{\"name\":\"r\",\"conditions\":["
                    "{\"history\":{\"within\":\"1m\",\"same\":\"args.a\"},\"op\":\"gte\",\"value\":0},"
                    "{\"history\":{\"within\":\"1m\",\"same\":\"args.b\",\"distinct\":\"args.c\"},\"op\":\"gte\",\"value\":0},"
                    "{\"history\":{\"within\":\"1m\",\"distinct\":\"args.d\"},\"op\":\"gte\",\"value\":0},"
                    "{\"history\":{\"within\":\"1m\",\"same\":\"args.a\",\"distinct\":\"args.e\"},\"op\":\"gte\",\"value\":0}]}]"),
         "tools.x.rules[0].conditions[3].history.distinct", "a policy's history conditions compare at most 4 different*"},
        {"when.json", WITH_RULES("[{\"name\":\"r\",\"when\":{},\"action\":\"deny\"}]"), "tools.x.rules[0].when", "must name tags or tools*"},
        {"when2.json", WITH_RULES("[{\"name\":\"r\",\"when\":{\"tool\":[\"a\"]},\"action\":\"deny\"}]"), "tools.x.rules[0].when.tool",
         "unknown field; did you mean `tools`?"},
    };
    /* "*" in what means a prefix: the table's messages are matched by EXPECT_ERROR's substring search */
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char what[300];
        snprintf(what, sizeof(what), "%s", cases[i].what);
        size_t n = strlen(what);
        if (n > 0 && what[n - 1] == '*')
            what[n - 1] = '\0';
        char label[200];
        snprintf(label, sizeof(label), "%s: case %zu (%s)", HERE, i, cases[i].name);
        expect_error_at(label, cases[i].name, cases[i].text, cases[i].where, what);
    }
}

static void errors_of_brakes(void **state)
{
    (void)state;
    static const struct load_error cases[] = {
        {"tags.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"repeats\":3,\"within\":\"1m\",\"tags\":[\"w\"]}}}}",
         "tools.x.brake.tags", "only the brake of \"*\" selects tools by tag; this one applies to x"},
        {"norep.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"within\":\"1m\"}}}}", "tools.x.brake.repeats", "is required"},
        {"rep0.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"repeats\":0,\"within\":\"1m\"}}}}", "tools.x.brake.repeats",
         "must be a whole number from 1 to 1000"},
        {"rep.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"repeats\":2.5,\"within\":\"1m\"}}}}", "tools.x.brake.repeats",
         "must be a whole number"},
        {"cyc.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"repeats\":2,\"within\":\"1m\",\"cycle\":9}}}}", "tools.x.brake.cycle",
         "must be a whole number from 2 to 8"},
        {"cyc1.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"repeats\":2,\"within\":\"1m\",\"cycle\":1}}}}", "tools.x.brake.cycle",
         "must be a whole number from 2 to 8"},
        {"win.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"repeats\":2}}}}", "tools.x.brake.within", "is required"},
        {"win2.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"repeats\":2,\"within\":\"25h\"}}}}", "tools.x.brake.within",
         "must be a duration"},
        {"msg.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"repeats\":2,\"within\":\"1m\",\"message\":\"\"}}}}",
         "tools.x.brake.message", "must be a string of 1 to 400 bytes"},
        {"key.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":{\"repeat\":2,\"within\":\"1m\"}}}}", "tools.x.brake.repeat",
         "unknown field; did you mean `repeats`?"},
        {"map.json", "{\"version\":\"1\",\"tools\":{\"x\":{\"brake\":5}}}", "tools.x.brake", "must be a map*"},
        {"rtags.json", "{\"version\":\"1\",\"tools\":{},\"resources\":{\"tags\":{\"file:///etc/*\":\"secret\"}}}", "resources.tags.file:///etc/*",
         "must be a list of tags"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char what[300];
        snprintf(what, sizeof(what), "%s", cases[i].what);
        size_t n = strlen(what);
        if (n > 0 && what[n - 1] == '*')
            what[n - 1] = '\0';
        char label[200];
        snprintf(label, sizeof(label), "%s: case %zu (%s)", HERE, i, cases[i].name);
        expect_error_at(label, cases[i].name, cases[i].text, cases[i].where, what);
    }
    /* a "*" brake with tags loads, in YAML too */
    struct loaded l;
    LOAD_TEXT_OK(&l, "ok.yaml", "version: \"1\"\ntools:\n  \"*\":\n    brake: {repeats: 3, within: 90, tags: [write], message: stop}\n");
    loaded_dispose(&l);
}

/* Resources and prompts recorded with the tags of their patterns count in history conditions. */
static void reads_are_recorded_with_tags(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "reads.yaml",
                 "version: \"1\"\ndefault: allow\n"
                 "resources: {default: allow, tags: {\"file:///etc/**\": [reads_secrets]}}\n"
                 "prompts: {default: allow, tags: {\"admin_*\": [reads_secrets]}}\n"
                 "tools:\n  \"*\":\n    rules:\n      - name: no-send\n        when: {tools: [\"send_*\"]}\n"
                 "        conditions:\n          - history: {tags: [reads_secrets], resources: [\"db://*\"], within: 5m}\n"
                 "            op: eq\n            value: 0\n");
    struct tg_counters *c = tg_counters_new();
    struct tg_caller who = {"g", "s1", "up", "alice", "https://issuer"};
    struct tg_decision d;
    tg_policy_record_read(l.p, c, &who, 0, "file:///tmp/x", T0);
    call(l.p, c, "send_mail", "{}", T0 + 1, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    tg_policy_record_read(l.p, c, &who, 0, "file:///etc/passwd", T0 + 2);
    call(l.p, c, "send_mail", "{}", T0 + 3, &d);
    EXPECT(&d, TG_VERDICT_DENY, "no-send", NULL);
    assert_string_equal(d.history_json, "{\"resource\":\"file:///etc/passwd\",\"upstream\":\"up\",\"at\":\"2024-03-10T10:30:00.002Z\"}");
    call(l.p, c, "send_mail", "{}", T0 + 3 + 5 * MIN_MS, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, NULL, NULL);
    tg_policy_record_read(l.p, c, &who, 1, "admin_keys", T0 + 6 * MIN_MS);
    call(l.p, c, "send_mail", "{}", T0 + 6 * MIN_MS + 1, &d);
    EXPECT(&d, TG_VERDICT_DENY, "no-send", NULL);
    assert_non_null(strstr(d.history_json, "\"prompt\":\"admin_keys\""));
    tg_policy_record_read(l.p, c, &who, 0, "db://main", T0 + 20 * MIN_MS);
    call(l.p, c, "send_mail", "{}", T0 + 20 * MIN_MS + 1, &d);
    EXPECT(&d, TG_VERDICT_DENY, "no-send", NULL);
    tg_counters_free(c);
    loaded_dispose(&l);
}

/* explain says which brake or history condition decided. */
static void explain_names_the_step(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "toxic.yaml", toxic);
    struct tg_counters *c = tg_counters_new();
    struct tg_caller who = {"g", "s1", "up", NULL, NULL};
    tg_policy_history_add_call(l.p, c, &who, "read_env", NULL, T0 - 5 * MIN_MS);
    struct tg_policy_explain *e = tg_xmalloc(sizeof(*e));
    tg_policy_explain_call(l.p, c, &who, "http_post", NULL, T0, e);
    EXPECT(&e->d, TG_VERDICT_DENY, "no-egress-after-secrets", NULL);
    assert_string_equal(e->where, "tools.*.rules[0]");
    assert_string_equal(e->cond_text, "history{tags [reads_secrets], within 10 min, scope subject} count eq 0");
    tg_counters_free(c);
    loaded_dispose(&l);
    LOAD_TEXT_OK(&l, "brakes.json", brakes);
    c = tg_counters_new();
    cJSON *a = J("{\"x\":1}");
    for (int i = 0; i < 4; i++)
        tg_policy_history_add_call(l.p, c, &who, "create_issue", a, T0 - i);
    tg_policy_explain_call(l.p, c, &who, "create_issue", a, T0, e);
    EXPECT(&e->d, TG_VERDICT_LIMITED, "brake", NULL);
    assert_string_equal(e->where, "tools.create_issue.brake");
    cJSON_Delete(a);
    free(e);
    tg_counters_free(c);
    loaded_dispose(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(toxic_flow_is_refused_for_the_window),
        cmocka_unit_test(scope_grant_sees_every_subject),
        cmocka_unit_test(distinct_values_per_hour),
        cmocka_unit_test(distinct_values_are_read_by_path),
        cmocka_unit_test(list_before_delete_in_the_session),
        cmocka_unit_test(brake_on_identical_calls),
        cmocka_unit_test(brake_compares_canonical_arguments),
        cmocka_unit_test(brake_cycles_and_tags),
        cmocka_unit_test(known_since_fails_closed),
        cmocka_unit_test(continuation_records_nothing),
        cmocka_unit_test(plan_decides_as_the_local_store),
        cmocka_unit_test(a_policy_without_them_records_nothing),
        cmocka_unit_test(errors_of_history_conditions),
        cmocka_unit_test(errors_of_brakes),
        cmocka_unit_test(reads_are_recorded_with_tags),
        cmocka_unit_test(explain_names_the_step),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
