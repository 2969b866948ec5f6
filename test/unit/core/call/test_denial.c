/* core/call/denial.c: a refused tools/call in the MCP drafts' shapes. The envelope (SEP-2643) and
 * the classification (SEP-3313) are written member by member, the handle is 128 random bits in
 * hex, hints appear only with "available", and a retry's echo is taken only when it is a short
 * printable string (anything else is as if absent: the call is decided the same either way). */
#include "../../unit.h"

#include <cjson/cJSON.h>

#include "core/base/buf.h"
#include "core/call/denial.h"

#define ID "0123456789abcdef0123456789abcdef"

static char *meta(const struct tg_denial *d)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_denial_meta(&b, d);
    tg_buf_append(&b, "", 1);
    return b.base;
}

static void unavailable_has_no_hints(void **state)
{
    (void)state;
    struct tg_denial d = {TG_REMEDIATION_UNAVAILABLE, "url", "http://x/", "policy_blocked", ID, "{\"tool\":\"t\"}"};
    char *s = meta(&d);
    assert_string_equal(s, "\"io.modelcontextprotocol/authorization\":{\"reason\":\"insufficient_authorization\","
                           "\"remediation\":\"unavailable\",\"authorizationContextId\":\"" ID "\"},"
                           "\"io.modelcontextprotocol/toolFailure\":{\"class\":\"governance\",\"code\":\"policy_blocked\","
                           "\"correlationId\":\"" ID "\"},\"tollgate/refusal\":{\"tool\":\"t\"}");
    free(s);
    d.remediation = TG_REMEDIATION_UNDISCLOSED;
    d.own_json = NULL;
    d.code = "permission_denied";
    s = meta(&d);
    assert_non_null(strstr(s, "\"remediation\":\"undisclosed\",\"authorizationContextId\":\"" ID "\"}"));
    assert_null(strstr(s, "remediationHints"));
    assert_null(strstr(s, "tollgate/refusal"));
    free(s);
}

static void available_with_a_hint(void **state)
{
    (void)state;
    struct tg_denial d = {TG_REMEDIATION_AVAILABLE, "url", "http://gw/admin/ui/", "user_action_required", ID, NULL};
    char *s = meta(&d);
    assert_non_null(strstr(s, "\"remediation\":\"available\",\"authorizationContextId\":\"" ID "\","
                              "\"remediationHints\":[{\"type\":\"url\",\"url\":\"http://gw/admin/ui/\"}]}"));
    free(s);
    d.hint = "task";
    d.hint_url = NULL;
    s = meta(&d);
    assert_non_null(strstr(s, "\"remediationHints\":[{\"type\":\"task\"}]}"));
    free(s);
    d.hint = NULL; /* available without a hint: the draft allows it */
    s = meta(&d);
    assert_null(strstr(s, "remediationHints"));
    free(s);
}

static void result_per_era(void **state)
{
    (void)state;
    struct tg_denial d = {TG_REMEDIATION_UNAVAILABLE, NULL, NULL, "policy_blocked", ID, NULL};
    struct tg_buf b;
    tg_buf_init(&b);
    tg_denial_result(&b, "7", 1, 0, "no \"quotes\"", &d);
    tg_buf_append(&b, "", 1);
    cJSON *j = cJSON_Parse(b.base);
    assert_non_null(j);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "result");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r, "isError")));
    assert_null(cJSON_GetObjectItemCaseSensitive(r, "resultType"));
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(r, "content"), 0)->child->next->valuestring,
                        "no \"quotes\"");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "id")->valueint, 7);
    cJSON_Delete(j);
    b.len = 0;
    tg_denial_result(&b, NULL, 0, 1, "x", &d);
    tg_buf_append(&b, "", 1);
    assert_non_null(strstr(b.base, "{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":{\"resultType\":\"complete\",\"content\":"));
    tg_buf_dispose(&b);
}

static void handles_are_fresh_hex(void **state)
{
    (void)state;
    char a[TG_DENIAL_ID_LEN + 1], b[TG_DENIAL_ID_LEN + 1];
    tg_denial_new_id(a);
    tg_denial_new_id(b);
    assert_int_equal(strlen(a), 32);
    assert_int_equal(strspn(a, "0123456789abcdef"), 32);
    assert_string_not_equal(a, b);
}

static const char *echoed(const char *params)
{
    static char out[200];
    cJSON *p = cJSON_Parse(params);
    const char *e = tg_denial_echoed(p);
    snprintf(out, sizeof(out), "%s", e ? e : "(none)");
    cJSON_Delete(p);
    return out;
}

static void echo_taken_only_when_plain(void **state)
{
    (void)state;
    assert_string_equal(echoed("{\"_meta\":{\"io.modelcontextprotocol/authorization-context-id\":\"" ID "\"}}"), ID);
    assert_string_equal(echoed("{\"_meta\":{\"io.modelcontextprotocol/authorization-context-id\":\"authzctx_7c5d\"}}"),
                        "authzctx_7c5d");
    assert_string_equal(echoed("{}"), "(none)");
    assert_string_equal(echoed("{\"_meta\":{\"io.modelcontextprotocol/authorization-context-id\":7}}"), "(none)");
    assert_string_equal(echoed("{\"_meta\":{\"io.modelcontextprotocol/authorization-context-id\":\"\"}}"), "(none)");
    assert_string_equal(echoed("{\"_meta\":{\"io.modelcontextprotocol/authorization-context-id\":\"a\\nb\"}}"), "(none)");
    assert_string_equal(echoed("{\"_meta\":{\"io.modelcontextprotocol/authorization-context-id\":\"a\\\"b\"}}"), "(none)");
    char big[400];
    snprintf(big, sizeof(big), "{\"_meta\":{\"io.modelcontextprotocol/authorization-context-id\":\"%0129d\"}}", 0);
    assert_string_equal(echoed(big), "(none)");
    assert_string_equal(echoed("{\"_meta\":\"io.modelcontextprotocol/authorization-context-id\"}"), "(none)");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(unavailable_has_no_hints), cmocka_unit_test(available_with_a_hint),
        cmocka_unit_test(result_per_era),           cmocka_unit_test(handles_are_fresh_hex),
        cmocka_unit_test(echo_taken_only_when_plain),
    };
    return tg_unit_run("denial", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
