/* policy/compile_bind.c and bind.c: "set", "forbid" and "strict" on a tool entry: what a load
 * refuses, what a call's arguments become, what strict refuses, what a missing attribute or claim
 * denies, what tools/list hides, and the claims read from a token. */
#include "test/unit/policy/policy_helpers.h"

#include "policy/bind.h"

static const char *const ATTRS[] = {"tenant", "acme", "region", "eu"};

/* The call's arguments (JSON text, NULL: none) after the binding of tool under the policy text,
 * into out (compact JSON of params.arguments, "-" when there are none); returns what
 * tg_policy_bind_args returned, with d. */
static int bind_text(const char *policy, const char *tool, const char *args, const char *claims, char *out, size_t n,
                     struct tg_decision *d)
{
    struct loaded l;
    LOAD_TEXT_OK(&l, "bind.json", policy);
    cJSON *params = cJSON_CreateObject();
    cJSON_AddStringToObject(params, "name", tool);
    if (args != NULL)
        cJSON_AddItemToObject(params, "arguments", cJSON_Parse(args));
    cJSON *cl = claims != NULL ? cJSON_Parse(claims) : NULL;
    struct tg_bind_ctx cx = {"g1", "alice", ATTRS, 2, cl};
    int rc = tg_policy_bind_args(l.p, tool, &cx, params, d);
    const cJSON *a = tg_json_get(params, "arguments");
    if (a == NULL) {
        snprintf(out, n, "-");
    } else {
        char *s = cJSON_PrintUnformatted(a);
        snprintf(out, n, "%s", s);
        free(s);
    }
    cJSON_Delete(cl);
    cJSON_Delete(params);
    loaded_dispose(&l);
    return rc;
}

#define P(tools) "{\"version\":\"1\",\"default\":\"allow\",\"tools\":" tools "}"

static void load_errors(void **state)
{
    (void)state;
    EXPECT_ERROR("b.json", P("{\"x\":{\"set\":[1]}}"), "tools.x.set", "must be a map {ARGUMENT: VALUE}");
    EXPECT_ERROR("b.json", P("{\"x\":{\"forbid\":\"a\"}}"), "tools.x.forbid", "must be a list of argument names");
    EXPECT_ERROR("b.json", P("{\"x\":{\"forbid\":[\"\"]}}"), "tools.x.forbid[0]", "an argument name must be a non-empty string");
    EXPECT_ERROR("b.json", P("{\"x\":{\"strict\":\"yes\"}}"), "tools.x.strict", "must be true or false");
    EXPECT_ERROR("b.json", P("{\"x\":{\"set\":{\"a\":1},\"forbid\":[\"a\"]}}"), "tools.x.forbid[0]",
                 "\"a\" is both set and forbidden");
    EXPECT_ERROR("b.json", P("{\"x\":{\"forbid\":[\"a\",\"a\"]}}"), "tools.x.forbid[1]", "\"a\" is listed twice");
    EXPECT_ERROR("b.json", P("{\"x\":{\"set\":{\"a\":\"${env.HOME}\"}}}"), "tools.x.set.a",
                 "a template is ${grant.ATTRIBUTE}, ${claims.NAME}, ${subject} or ${grant}");
    EXPECT_ERROR("b.json", P("{\"x\":{\"set\":{\"a\":\"${claims.org\"}}}"), "tools.x.set.a", "\"${\" without its closing \"}\"");
    EXPECT_ERROR("b.json", P("{\"x\":{\"set\":{\"a\":\"x-${grant.te nant}\"}}}"), "tools.x.set.a",
                 "an attribute name is 1 to 64 letters");
    EXPECT_ERROR("b.json", P("{\"x\":{\"set\":{\"a\":{\"deep\":[\"${oops}\"]}}}}"), "tools.x.set.a.deep[0]",
                 "a template is ${grant.ATTRIBUTE}");
    EXPECT_ERROR("b.json", P("{\"x\":{\"sett\":{\"a\":1}}}"), "tools.x.sett", "unknown field; did you mean `set`?");
    /* YAML and "*" take the same fields */
    struct loaded l;
    LOAD_TEXT_OK(&l, "b.yaml", "version: \"1\"\ndefault: allow\ntools:\n  \"*\": {forbid: [debug], strict: true}\n"
                               "  x: {set: {tenant_id: \"${grant.tenant}\"}}\n");
    assert_int_equal(tg_policy_binds(l.p, "x"), 1);
    assert_int_equal(tg_policy_binds(l.p, "other"), 1);
    loaded_dispose(&l);
    LOAD_TEXT_OK(&l, "b.json", P("{\"x\":{\"action\":\"allow\"}}"));
    assert_int_equal(tg_policy_binds(l.p, "x"), 0);
    loaded_dispose(&l);
}

static void binding(void **state)
{
    (void)state;
    char out[400];
    struct tg_decision d;
    /* overwritten, added, removed; a whole-string claim keeps its type, embedded ones are text */
    const char *pol = P("{\"x\":{\"set\":{\"tenant_id\":\"${grant.tenant}\",\"org\":\"${claims.org}\","
                        "\"n\":\"${claims.n}\",\"label\":\"${grant}/${subject}/${claims.n}/$${x}\",\"fixed\":{\"a\":[1,\"${grant.region}\"]}},"
                        "\"forbid\":[\"internal\"]}}");
    assert_int_equal(bind_text(pol, "x", "{\"tenant_id\":\"evil\",\"internal\":true,\"q\":1}",
                               "{\"org\":\"o1\",\"n\":42}", out, sizeof(out), &d),
                     1);
    assert_string_equal(out, "{\"tenant_id\":\"acme\",\"q\":1,\"org\":\"o1\",\"n\":42,\"label\":\"g1/alice/42/${x}\","
                             "\"fixed\":{\"a\":[1,\"eu\"]}}");
    /* no arguments at all: made */
    assert_int_equal(bind_text(pol, "x", NULL, "{\"org\":\"o1\",\"n\":1}", out, sizeof(out), &d), 1);
    /* nothing to change: 0 */
    const char *same = P("{\"x\":{\"set\":{\"a\":1.0}}}");
    assert_int_equal(bind_text(same, "x", "{\"a\":1}", NULL, out, sizeof(out), &d), 0);
    /* the tool's own entry wins per argument over "*" */
    const char *both = P("{\"*\":{\"set\":{\"a\":\"w\",\"b\":\"w\"},\"forbid\":[\"c\"]},\"x\":{\"set\":{\"a\":\"x\",\"c\":\"x\"}}}");
    assert_int_equal(bind_text(both, "x", "{}", NULL, out, sizeof(out), &d), 1);
    assert_string_equal(out, "{\"a\":\"x\",\"c\":\"x\",\"b\":\"w\"}");
    assert_int_equal(bind_text(both, "y", "{\"c\":1}", NULL, out, sizeof(out), &d), 1);
    assert_string_equal(out, "{\"a\":\"w\",\"b\":\"w\"}");
}

static void refusals(void **state)
{
    (void)state;
    char out[400];
    struct tg_decision d;
    const char *pol = P("{\"x\":{\"set\":{\"org\":\"${claims.org}\"}},\"y\":{\"set\":{\"t\":\"${grant.nope}\"}}}");
    assert_int_equal(bind_text(pol, "x", "{}", NULL, out, sizeof(out), &d), -1);
    assert_int_equal(d.verdict, TG_VERDICT_DENY);
    assert_string_equal(d.rule, "set");
    assert_non_null(strstr(d.message, "carries no claim \"org\""));
    assert_int_equal(bind_text(pol, "x", "{}", "{\"other\":1}", out, sizeof(out), &d), -1);
    assert_int_equal(bind_text(pol, "y", "{}", NULL, out, sizeof(out), &d), -1);
    assert_non_null(strstr(d.message, "grant \"g1\" has no attribute \"nope\""));
    /* strict: the same value passes, another is refused, a forbidden one is refused */
    const char *strict = P("{\"x\":{\"set\":{\"t\":\"${grant.tenant}\"},\"forbid\":[\"f\"],\"strict\":true}}");
    assert_int_equal(bind_text(strict, "x", "{\"t\":\"acme\"}", NULL, out, sizeof(out), &d), 0);
    assert_int_equal(bind_text(strict, "x", "{}", NULL, out, sizeof(out), &d), 1);
    assert_int_equal(bind_text(strict, "x", "{\"t\":\"evil\"}", NULL, out, sizeof(out), &d), -1);
    assert_string_equal(d.rule, "set");
    assert_int_equal(bind_text(strict, "x", "{\"f\":0}", NULL, out, sizeof(out), &d), -1);
    assert_string_equal(d.rule, "forbid");
    /* strict on "*" holds for a tool's own items unless the tool says otherwise */
    const char *wild = P("{\"*\":{\"strict\":true},\"x\":{\"set\":{\"t\":1}},\"z\":{\"set\":{\"t\":1},\"strict\":false}}");
    assert_int_equal(bind_text(wild, "x", "{\"t\":2}", NULL, out, sizeof(out), &d), -1);
    assert_int_equal(bind_text(wild, "z", "{\"t\":2}", NULL, out, sizeof(out), &d), 1);
}

static void schema_and_claims(void **state)
{
    (void)state;
    struct loaded l;
    LOAD_TEXT_OK(&l, "b.json", P("{\"x\":{\"set\":{\"t\":\"${claims.org}\"},\"forbid\":[\"f\"]}}"));
    cJSON *s = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"t\":{},\"f\":{},\"q\":{}},\"required\":[\"t\",\"q\"]}");
    assert_int_equal(tg_policy_bind_schema(l.p, "x", s), 1);
    char *txt = cJSON_PrintUnformatted(s);
    assert_string_equal(txt, "{\"type\":\"object\",\"properties\":{\"q\":{}},\"required\":[\"q\"]}");
    free(txt);
    assert_int_equal(tg_policy_bind_schema(l.p, "x", s), 0);
    assert_int_equal(tg_policy_bind_schema(l.p, "other", s), 0);
    cJSON_Delete(s);
    assert_int_equal(tg_policy_binds_claims(l.p, "x"), 1);
    const char *const *names;
    assert_int_equal(tg_policy_bind_claims(l.p, &names), 1);
    assert_string_equal(names[0], "org");
    /* header.{"org":"o1","sub":"a","n":[1]}.sig: only the named claims are kept */
    char tok[300], b64[200];
    const char *payload = "{\"org\":\"o1\",\"sub\":\"a\",\"n\":[1]}";
    size_t bl = tg_b64url_encode((const uint8_t *)payload, strlen(payload), b64);
    snprintf(tok, sizeof(tok), "eyJhbGciOiJIUzI1NiJ9.%.*s.c2ln", (int)bl, b64);
    char *kept = tg_bind_claims_of_token(tok, strlen(tok), names, 1);
    assert_string_equal(kept, "{\"org\":\"o1\"}");
    free(kept);
    static const char *const none[] = {"missing"};
    assert_null(tg_bind_claims_of_token(tok, strlen(tok), none, 1));
    assert_null(tg_bind_claims_of_token("a.!!.c", 6, names, 1));
    loaded_dispose(&l);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(load_errors),
        cmocka_unit_test(binding),
        cmocka_unit_test(refusals),
        cmocka_unit_test(schema_and_claims),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
