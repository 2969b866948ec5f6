/* core/mcp/rewrite.c and listen.c: what a grant sees of resources and prompts: the lists
 * filtered by the policy (an answer that cannot be filtered refused), and which server
 * notifications of resource updates may reach a client. */
#include "test/unit/unit.h"

#include <string.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "core/mcp/listen.h"
#include "core/mcp/rewrite.h"
#include "core/wire/msg.h"
#include "policy/policy.h"

static struct tg_policy *policy(const char *json)
{
    cJSON *root = cJSON_Parse(json);
    assert_non_null(root);
    struct tg_policy *p = NULL;
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    if (tg_policy_compile(root, "t.json", &p, &err, &warn) != 0)
        fail_msg("%.*s", (int)err.len, err.base);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    cJSON_Delete(root);
    return p;
}

static const char *const POLICY =
    "{\"version\":\"1\",\"default\":\"deny\","
    "\"resources\":{\"allow\":[\"file:///pub/*\",\"file:///tpl/{id}\"]},"
    "\"prompts\":{\"allow\":[\"ok-*\"]}}";

/* The answer to our id 17 for client id "c", as the client gets it (NUL-terminated), or NULL if
 * the call would not call it its answer. */
static char *rewrite(const struct tg_policy *p, int kind, const char *answer, int *is_error)
{
    struct tg_mcp_answer a = {
        .gid = "17", .gid_len = 2, .client_id = "\"c\"", .client_id_len = 3, .is_request = 1,
        .tools_filter = p, .upstream = "up", .list_kind = kind,
    };
    struct tg_buf out;
    tg_buf_init(&out);
    int valid = 0;
    if (tg_mcp_restore_id(&a, answer, strlen(answer), NULL, &out, &valid, is_error, NULL) != 1) {
        tg_buf_dispose(&out);
        return NULL;
    }
    tg_buf_append(&out, "", 1);
    char *s = strdup(out.base);
    tg_buf_dispose(&out);
    return s;
}

static void lists_show_only_what_is_allowed(void **state)
{
    struct tg_policy *p = policy(POLICY);
    int err;
    char *r = rewrite(p, TG_MCP_LIST_RESOURCES,
                      "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"resources\":[{\"uri\":\"file:///pub/a\"},"
                      "{\"uri\":\"file:///secret/b\"},{\"uri\":\"FILE:///pub/./c\"},{\"uri\":\"file:///pub/x/y\"},"
                      "{\"uri\":\"file:///pub/%2e%2e/secret/b\"},{\"name\":\"no uri\"},{\"uri\":7}],"
                      "\"nextCursor\":\"n1\"}}",
                      &err);
    assert_non_null(r);
    assert_int_equal(err, 0);
    assert_string_equal(r, "{\"jsonrpc\":\"2.0\",\"id\":\"c\",\"result\":{\"resources\":[{\"uri\":\"file:///pub/a\"},"
                           "{\"uri\":\"FILE:///pub/./c\"}],\"nextCursor\":\"n1\"}}");
    free(r);
    r = rewrite(p, TG_MCP_LIST_TEMPLATES,
                "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"resourceTemplates\":[{\"uriTemplate\":\"file:///tpl/{id}\"},"
                "{\"uriTemplate\":\"file:///secret/{id}\"}]}}",
                &err);
    assert_non_null(r);
    assert_string_equal(r, "{\"jsonrpc\":\"2.0\",\"id\":\"c\",\"result\":{\"resourceTemplates\":[{\"uriTemplate\":"
                           "\"file:///tpl/{id}\"}]}}");
    free(r);
    r = rewrite(p, TG_MCP_LIST_PROMPTS,
                "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"prompts\":[{\"name\":\"ok-1\"},{\"name\":\"admin\"},"
                "{\"name\":\"ok-2\",\"arguments\":[]}]}}",
                &err);
    assert_non_null(r);
    assert_string_equal(r, "{\"jsonrpc\":\"2.0\",\"id\":\"c\",\"result\":{\"prompts\":[{\"name\":\"ok-1\"},"
                           "{\"name\":\"ok-2\",\"arguments\":[]}]}}");
    free(r);
    tg_policy_unref(p);
    /* No groups under default deny: empty lists. */
    p = policy("{\"version\":\"1\",\"default\":\"deny\"}");
    r = rewrite(p, TG_MCP_LIST_PROMPTS,
                "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"prompts\":[{\"name\":\"ok-1\"}]}}", &err);
    assert_string_equal(r, "{\"jsonrpc\":\"2.0\",\"id\":\"c\",\"result\":{\"prompts\":[]}}");
    free(r);
    tg_policy_unref(p);
}

static void a_list_that_cannot_be_filtered_is_refused(void **state)
{
    struct tg_policy *p = policy(POLICY);
    static const struct {
        int kind;
        const char *answer, *what;
    } c[] = {
        {TG_MCP_LIST_RESOURCES, "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"resources\":{\"uri\":\"file:///x\"}}}",
         "resources/list"},
        {TG_MCP_LIST_RESOURCES, "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"items\":[]}}", "resources/list"},
        {TG_MCP_LIST_TEMPLATES, "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":[]}", "resources/templates/list"},
        {TG_MCP_LIST_PROMPTS, "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"prompts\":\"all\"}}", "prompts/list"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        int err = 0;
        char *r = rewrite(p, c[i].kind, c[i].answer, &err);
        assert_non_null(r);
        assert_int_equal(err, 1);
        char want[200];
        snprintf(want, sizeof(want), "upstream sent a %s answer the gateway cannot filter", c[i].what);
        if (strstr(r, want) == NULL || strstr(r, "-32004") == NULL || strstr(r, "file:///x") != NULL)
            fail_msg("%s: got %s", c[i].answer, r);
        free(r);
    }
    tg_policy_unref(p);
}

static void resource_updates_are_seen_through_the_policy(void **state)
{
    assert_true(tg_mcp_method_maybe_update(TG_SLICE("\"notifications/resources/updated\"")));
    assert_true(tg_mcp_method_maybe_update(TG_SLICE("\"notifications\\/resources\\/updated\"")));
    assert_true(tg_mcp_method_maybe_update(TG_SLICE("\"notifications/resources/updat\\u0065d\"")));
    assert_false(tg_mcp_method_maybe_update(TG_SLICE("\"notifications/progress\"")));
    assert_false(tg_mcp_method_maybe_update(TG_SLICE("\"notifications/resources/list_changed\"")));
    struct tg_policy *p = policy(POLICY);
    static const struct {
        const char *msg;
        int ok;
    } c[] = {
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":\"file:///pub/a\"}}", 1},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":\"FILE:///pub//a\"}}", 1},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":\"file:///secret/a\"}}",
         0},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":\"file:///pub/../s\"}}",
         0},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications\\/resources\\/updated\",\"params\":{\"uri\":\"file:///secret/a\"}}",
         0},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":\"file:\\/\\/\\/secret\"}}",
         0},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{}}", 0},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\",\"params\":{\"uri\":\"file:///pub/a\\u0000/../../secret\"}}",
         0},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/resources/updated\"}", 0},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"updated\"}}", 1},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"a \\\"quote\\\"\"}}", 1},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
        if (tg_mcp_relay_allowed(c[i].msg, strlen(c[i].msg), p) != c[i].ok)
            fail_msg("%s: want %s", c[i].msg, c[i].ok ? "relayed" : "dropped");
    tg_policy_unref(p);
}

/* The result that ends a listen (a credential ended): resultType "complete", the listen's own id
 * as the subscription id, whatever JSON the id was. */
static void a_listen_ends_with_its_complete_result(void **state)
{
    (void)state;
    const char *ids[] = {"\"L1\"", "7", "\"a\\\"b\""};
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        struct tg_buf b;
        tg_buf_init(&b);
        tg_mcp_listen_complete(&b, ids[i], strlen(ids[i]));
        cJSON *m = cJSON_ParseWithLength(b.base, b.len);
        assert_non_null(m);
        cJSON *id = cJSON_Parse(ids[i]);
        cJSON *res = tg_json_get(m, "result");
        assert_true(cJSON_Compare(tg_json_get(m, "id"), id, 1));
        assert_string_equal(tg_json_get(res, "resultType")->valuestring, "complete");
        assert_true(cJSON_Compare(tg_json_get(tg_json_get(res, "_meta"), TG_MCP_META_SUBSCRIPTION), id, 1));
        cJSON_Delete(id);
        cJSON_Delete(m);
        tg_buf_dispose(&b);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lists_show_only_what_is_allowed),
        cmocka_unit_test(a_list_that_cannot_be_filtered_is_refused),
        cmocka_unit_test(resource_updates_are_seen_through_the_policy),
        cmocka_unit_test(a_listen_ends_with_its_complete_result),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
