/* policy/decide_resource.c: resources/read and prompts/get decisions: a policy's "resources" and
 * "prompts" glob lists (deny first, then allow, then the group's default, else the policy's),
 * over URIs in their normal form (policy/uri.c). */
#include "test/unit/policy/policy_helpers.h"

#include "policy/uri.h"

static void resources_and_prompts_globsets(void **state)
{
    for (int y = 0; y < 2; y++) {
        struct tg_policy *p = load_fixture(y ? "hosted.yaml" : "hosted.json");
        struct tg_decision d;
        static const struct {
            const char *uri;
            int allow;
            const char *rule;
        } res[] = {
            {"file:///docs/a.md", 1, ""},
            {"file:///docs/sub/dir/b.md", 0, "(default deny)"}, /* an allow's '*' stays in a segment */
            {"file:///docs/", 1, ""},
            {"file:///docs/private/plan.md", 0, "file:///docs/private/*"}, /* deny wins over allow */
            {"file:///docs/id.key", 0, "*.key"},
            {"mem://notes/id.key", 0, "*.key"},
            {"mem://notes/public", 1, ""},
            {"mem://a/b/c/public", 0, "(default deny)"},
            {"mem://notes/public/x", 0, "(default deny)"},
            {"mem://public", 0, "(default deny)"},
            {"file:///etc/passwd", 0, "(default deny)"},
            {"FILE:///docs/a.md", 1, ""}, /* decided in its normal form */
            {"file:///docs/private/../a.md", 1, ""},
            {"file:///docs/%70rivate/plan.md", 0, "file:///docs/private/*"},
            {"file:///docs//private/plan.md", 0, "file:///docs/private/*"},
            {"file:///docs/sub/../../etc/passwd", 0, "(default deny)"},
            {"file:///docs/%2e%2e/etc/passwd", 0, "(default deny)"},
            {"file:///docs/deep/er/id.key", 0, "*.key"}, /* a deny's '*' crosses '/' */
            {"file:///docs", 0, "(default deny)"},
            {"", 0, "(uri)"},
            {"file:///docs/..%2Fetc/passwd", 0, "(uri)"},
            {"file:///docs/a\\b", 0, "(uri)"},
        };
        for (size_t i = 0; i < sizeof(res) / sizeof(res[0]); i++) {
            tg_policy_decide_resource(p, res[i].uri, &d);
            char msg[300], norm[200];
            const char *why;
            if (strcmp(res[i].rule, "(uri)") == 0) { /* refused before any glob: the message says why */
                if (d.verdict != TG_VERDICT_DENY || strcmp(d.rule, "(uri)") != 0 ||
                    strncmp(d.message, "Resource URI \"", 14) != 0 || strstr(d.message, "is refused: it ") == NULL)
                    fail_msg("\"%s\": got %s %s \"%s\"", res[i].uri, verdict_name(d.verdict), d.rule, d.message);
                continue;
            }
            assert_true(tg_uri_normalize(res[i].uri, strlen(res[i].uri), norm, &why) >= 0);
            if (res[i].allow)
                msg[0] = '\0';
            else if (strcmp(res[i].rule, "(default deny)") == 0)
                snprintf(msg, sizeof(msg), "Resource \"%s\" is not permitted by policy", norm);
            else
                snprintf(msg, sizeof(msg), "Resource \"%s\" is denied by policy", norm);
            EXPECT(&d, res[i].allow ? TG_VERDICT_ALLOW : TG_VERDICT_DENY, res[i].rule, msg);
        }
        static const struct {
            const char *name;
            int allow;
        } pr[] = {{"summarize", 1}, {"admin_reset", 0}, {"admin_", 0}, {"xadmin_reset", 1}, {"Admin_reset", 1},
                  {"admin", 1}};
        for (size_t i = 0; i < sizeof(pr) / sizeof(pr[0]); i++) {
            tg_policy_decide_prompt(p, pr[i].name, &d);
            if (pr[i].allow)
                EXPECT(&d, TG_VERDICT_ALLOW, "", "");
            else
                EXPECT(&d, TG_VERDICT_DENY, "admin_*", "Admin prompts are disabled");
        }
        tg_policy_unref(p);
    }
    /* No resources or prompts section: the policy's default decides (deny here). */
    struct tg_policy *p = load_fixture("seed.json");
    struct tg_decision d;
    tg_policy_decide_resource(p, "file:///etc/passwd", &d);
    EXPECT(&d, TG_VERDICT_DENY, "(default deny)",
           "Resource \"file:///etc/passwd\" is not permitted by policy (no \"resources\" rules; the policy's "
           "default is deny)");
    tg_policy_decide_prompt(p, "anything", &d);
    EXPECT(&d, TG_VERDICT_DENY, "(default deny)",
           "Prompt \"anything\" is not permitted by policy (no \"prompts\" rules; the policy's default is deny)");
    tg_policy_unref(p);
    /* Globs backtrack: "a*b*c" style patterns, and a reason for the default. */
    struct loaded l;
    LOAD_TEXT_OK(&l, "glob.yaml",
                 "version: \"1\"\n"
                 "resources:\n"
                 "  default: deny\n"
                 "  reason: Only reports\n"
                 "  allow: [\"x:r*port*.pdf\", \"x:**x\"]\n");
    static const struct {
        const char *uri;
        int allow;
    } g[] = {{"x:report.pdf", 1}, {"x:rrreport-2024.pdf", 1}, {"x:r-port.pdf", 1},     {"x:report.pdf.exe", 0},
             {"x:report.pd", 0},  {"x:xreport.pdf", 0},       {"x:rport.pdfx.pdf", 1}, {"x:x", 1},
             {"x:aaax", 1},       {"x:xa", 0},                {"x:r/port.pdf", 0},     {"x:a/b/x", 1}};
    for (size_t i = 0; i < sizeof(g) / sizeof(g[0]); i++) {
        tg_policy_decide_resource(l.p, g[i].uri, &d);
        if (g[i].allow)
            EXPECT(&d, TG_VERDICT_ALLOW, "", "");
        else
            EXPECT(&d, TG_VERDICT_DENY, "(default deny)", "Only reports");
    }
    loaded_dispose(&l);
}

/* Which default decides a resource or prompt no glob names: the group's "default" if it says
 * one, else the policy's; no group at all, the policy's. "*" of an allow stays in a segment,
 * "**" crosses "/". */
static void resources_and_prompts_defaults(void **state)
{
    static const struct {
        const char *policy;
        const char *uri, *prompt;
        int uri_allowed, prompt_allowed;
    } c[] = {
        /* no groups: the policy's default */
        {"{\"version\":\"1\",\"default\":\"deny\"}", "file:///srv/a", "p", 0, 0},
        {"{\"version\":\"1\",\"default\":\"allow\"}", "file:///srv/a", "p", 1, 1},
        /* a group without "default": the policy's */
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"file:///pub/*\"]},"
         "\"prompts\":{\"deny\":[\"x\"]}}",
         "file:///srv/a", "p", 0, 0},
        {"{\"version\":\"1\",\"default\":\"allow\",\"resources\":{\"deny\":[\"file:///pub/*\"]},"
         "\"prompts\":{\"deny\":[\"x\"]}}",
         "file:///srv/a", "p", 1, 1},
        /* a group's own default wins over the policy's */
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"default\":\"allow\"},"
         "\"prompts\":{\"default\":\"allow\"}}",
         "file:///srv/a", "p", 1, 1},
        {"{\"version\":\"1\",\"default\":\"allow\",\"resources\":{\"default\":\"deny\"},"
         "\"prompts\":{\"default\":\"deny\"}}",
         "file:///srv/a", "p", 0, 0},
        /* '*' and '**' */
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"file:///srv/*\"]}}",
         "file:///srv/a", "p", 1, 0},
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"file:///srv/*\"]}}",
         "file:///srv/a/b", "p", 0, 0},
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"file:///srv/**\"]}}",
         "file:///srv/a/b/c", "p", 1, 0},
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"file:///srv/**\"]}}",
         "file:///srv/data/../../etc/passwd", "p", 0, 0},
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"file:///srv/**\"]}}",
         "file:///srv/.%2e/etc/passwd", "p", 0, 0},
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"file:///srv/**\"]}}",
         "file:///srv/x%2f..%2f..%2fetc/passwd", "p", 0, 0},
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"file:///srv/**\"]}}",
         "FILE:///srv//A", "p", 1, 0},
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"test://*/r/*\"]}}",
         "TEST://Static/r/1", "p", 1, 0},
        {"{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"test://*/r/*\"]}}",
         "test://static/x/r/1", "p", 0, 0},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        struct loaded l;
        LOAD_TEXT_OK(&l, "t.json", c[i].policy);
        struct tg_policy *p = l.p;
        struct tg_decision d;
        tg_policy_decide_resource(p, c[i].uri, &d);
        if ((d.verdict == TG_VERDICT_ALLOW) != c[i].uri_allowed)
            fail_msg("case %zu: resource %s: got %s (%s)", i, c[i].uri, verdict_name(d.verdict), d.message);
        tg_policy_decide_prompt(p, c[i].prompt, &d);
        if ((d.verdict == TG_VERDICT_ALLOW) != c[i].prompt_allowed)
            fail_msg("case %zu: prompt %s: got %s (%s)", i, c[i].prompt, verdict_name(d.verdict), d.message);
        loaded_dispose(&l);
    }
    /* A pattern past the matcher's stack arrays and a URI past decide_resource's: the heap
     * paths decide the same. */
    char pat[400], uri[1200], pol[600];
    memset(pat, 'a', 300);
    memcpy(pat, "file:///", 8);
    memcpy(pat + 300, "/**", 4);
    snprintf(pol, sizeof(pol), "{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"%s\"]}}", pat);
    struct loaded l;
    LOAD_TEXT_OK(&l, "long.json", pol);
    snprintf(uri, sizeof(uri), "%.300s/", pat);
    memset(uri + 301, 'b', 800);
    uri[1101] = '\0';
    struct tg_decision d;
    tg_policy_decide_resource(l.p, uri, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, "", "");
    uri[9] = 'c';
    tg_policy_decide_resource(l.p, uri, &d);
    assert_int_equal(d.verdict, TG_VERDICT_DENY);
    assert_string_equal(d.rule, "(default deny)");
    loaded_dispose(&l);
    /* Past TG_URI_MAX (8 KiB) a URI or a prompt name is refused before any glob reads it, even
     * where "**" would allow it: matching costs its length times the patterns'. */
    LOAD_TEXT_OK(&l, "all.json",
                 "{\"version\":\"1\",\"default\":\"deny\",\"resources\":{\"allow\":[\"**\"]},"
                 "\"prompts\":{\"allow\":[\"*\"]}}");
    static char big[8192 + 2];
    memcpy(big, "file:///", 8);
    memset(big + 8, 'x', 8192 - 8);
    tg_policy_decide_resource(l.p, big, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, "", "");
    tg_policy_decide_prompt(l.p, big, &d);
    EXPECT(&d, TG_VERDICT_ALLOW, "", "");
    big[8192] = 'x';
    tg_policy_decide_resource(l.p, big, &d);
    assert_int_equal(d.verdict, TG_VERDICT_DENY);
    assert_string_equal(d.rule, "(uri)");
    assert_non_null(strstr(d.message, "longer than 8192 bytes"));
    tg_policy_decide_prompt(l.p, big, &d);
    assert_int_equal(d.verdict, TG_VERDICT_DENY);
    assert_string_equal(d.rule, "(name)");
    loaded_dispose(&l);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(resources_and_prompts_globsets),
        cmocka_unit_test(resources_and_prompts_defaults),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
