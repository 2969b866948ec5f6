/* core/mcp/era.c: the era of a request by its body, and the 2026-07-28 header checks (the
 * bypass vector of SEP-2243: a header never decides, the body does). */
#include "test/unit/unit.h"

#include <string.h>

#include "core/base/json.h"
#include "core/mcp/era.h"
#include "core/mcp/legacy.h"
#include "core/mcp/modern.h"
#include "core/mcp/rewrite.h"
#include "core/call/session.h"
#include "core/mcp/schemas.h"
#include "core/wire/msg.h"

#define META "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"," \
             "\"io.modelcontextprotocol/clientCapabilities\":{}}"

static cJSON *parse(const char *s)
{
    cJSON *j = cJSON_Parse(s);
    if (j == NULL)
        fail_msg("test JSON does not parse: %s", s);
    return j;
}

static void classify_by_body(void **state)
{
    struct tg_mcp_claim c;
    struct tg_mcp_refusal why;
    cJSON *legacy = parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
    assert_int_equal(tg_mcp_classify(legacy, &c, &why), 0);
    assert_int_equal(c.era, TG_ERA_2025);
    assert_null(c.version);
    cJSON_Delete(legacy);

    cJSON *modern = parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{" META "}}");
    assert_int_equal(tg_mcp_classify(modern, &c, &why), 0);
    assert_int_equal(c.era, TG_ERA_2026);
    assert_string_equal(c.version, "2026-07-28");
    assert_true(cJSON_IsObject(c.caps));
    cJSON_Delete(modern);

    /* A claim that is not a string, or without clientCapabilities: -32602, HTTP 400. */
    static const char *const bad[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":7}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\"}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\","
        "\"io.modelcontextprotocol/clientCapabilities\":[]}}}",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cJSON *j = parse(bad[i]);
        memset(&why, 0, sizeof(why));
        assert_int_equal(tg_mcp_classify(j, &c, &why), -1);
        assert_int_equal(why.code, TG_RPC_INVALID_PARAMS);
        assert_int_equal(why.status, 400);
        cJSON_Delete(j);
    }
}

static void versions(void **state)
{
    assert_true(tg_mcp_modern_version_supported("2026-07-28"));
    assert_false(tg_mcp_modern_version_supported("2026-07-29"));
    assert_false(tg_mcp_modern_version_supported("2025-11-25"));
    assert_false(tg_mcp_modern_version_supported(NULL));
    struct tg_buf b;
    tg_buf_init(&b);
    tg_mcp_unsupported_version_data(&b, "2099-01-01");
    assert_string_equal(b.base, "{\"supported\":[\"2026-07-28\"],\"requested\":\"2099-01-01\"}");
    tg_buf_dispose(&b);
}

static const char *value(const char *raw, struct tg_buf *b)
{
    if (tg_mcp_header_value(tg_slice_cstr(raw), b) != 0)
        return NULL;
    tg_buf_append(b, "", 1);
    b->len--;
    return b->base ? b->base : "";
}

static void header_values(void **state)
{
    struct tg_buf b;
    tg_buf_init(&b);
    assert_string_equal(value("echo", &b), "echo");
    assert_string_equal(value("  echo\t", &b), "echo"); /* optional whitespace is not the value */
    assert_string_equal(value("", &b), "");
    assert_string_equal(value(" \t ", &b), "");
    assert_string_equal(value("a b", &b), "a b");
    /* =?base64?...?= decodes; "héllo" and a value with a newline travel that way. */
    assert_string_equal(value("=?base64?aMOpbGxv?=", &b), "h\xc3\xa9llo");
    assert_string_equal(value("=?base64?YQpi?=", &b), "a\nb");
    assert_string_equal(value("=?base64?" "?=", &b), ""); /* (split: "??=" is a trigraph) */
    /* The markers are lowercase and case-sensitive: anything else is a literal. */
    assert_string_equal(value("=?BASE64?ZWNobw==?=", &b), "=?BASE64?ZWNobw==?=");
    /* Broken base64, control characters and bytes outside ASCII are refused. */
    assert_null(value("=?base64?ZWNob!==?=", &b));
    assert_null(value("=?base64?ZWNo b3c=?=", &b));
    assert_null(value("ec\x01ho", &b));
    assert_null(value("h\xc3\xa9llo", &b));
    tg_buf_dispose(&b);
}

static void header_matches_body(void **state)
{
    cJSON *j = parse("{\"s\":\"abc\",\"i\":7,\"n\":-3,\"f\":1.5,\"t\":true,\"u\":false,\"o\":{},\"z\":null}");
#define M(str, key) tg_mcp_header_matches(tg_slice_cstr(str), cJSON_GetObjectItemCaseSensitive(j, key))
    assert_true(M("abc", "s"));
    assert_false(M("ABC", "s"));
    assert_false(M("abc ", "s"));
    assert_true(M("7", "i"));
    assert_true(M("007", "i")); /* integers compare as numbers */
    assert_true(M("-3", "n"));
    assert_false(M("7.0", "i"));
    assert_false(M("1e0", "i"));
    assert_false(M("", "i"));
    assert_false(M("1.5", "f")); /* never for a number that is not an integer */
    assert_true(M("true", "t"));
    assert_true(M("false", "u"));
    assert_false(M("True", "t"));
    assert_false(M("1", "t"));
    assert_false(M("{}", "o"));
    assert_false(M("null", "z"));
#undef M
    cJSON_Delete(j);
}

/* Headers h (name, value pairs ending with NULL) against body. Returns the refusal code or 0. */
static int check(const char *body, const char *const *h)
{
    struct tg_mcp_header hs[16];
    size_t n = 0;
    for (; h[2 * n] != NULL; n++) {
        hs[n].name = tg_slice_cstr(h[2 * n]);
        hs[n].value = tg_slice_cstr(h[2 * n + 1]);
    }
    cJSON *j = parse(body);
    struct tg_mcp_claim c;
    struct tg_mcp_refusal why;
    memset(&why, 0, sizeof(why));
    assert_int_equal(tg_mcp_classify(j, &c, &why), 0);
    assert_int_equal(c.era, TG_ERA_2026);
    int r = tg_mcp_check_headers(hs, n, j, &c, &why);
    cJSON_Delete(j);
    if (r == 0)
        return 0;
    assert_int_equal(why.status, 400);
    assert_true(why.message[0] != '\0');
    return why.code;
}

#define CALL(tool) "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"" tool "\"," META "}}"

static void standard_headers(void **state)
{
    const char *ok[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "echo", NULL};
    assert_int_equal(check(CALL("echo"), ok), 0);
    /* Header names are case-insensitive; values are not. */
    const char *lower[] = {"mcp-protocol-version", "2026-07-28", "mcp-method", "tools/call", "mcp-name", "echo", NULL};
    assert_int_equal(check(CALL("echo"), lower), 0);
    const char *b64[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name",
                         "=?base64?ZWNobw==?=", NULL};
    assert_int_equal(check(CALL("echo"), b64), 0);
    const char *spaced[] = {"MCP-Protocol-Version", " 2026-07-28", "Mcp-Method", "tools/call\t", "Mcp-Name", " echo ", NULL};
    assert_int_equal(check(CALL("echo"), spaced), 0); /* the value, without optional whitespace */
    const char *shorter[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "ech", NULL};
    assert_int_equal(check(CALL("echo"), shorter), TG_RPC_HEADER_MISMATCH);
    const char *longer[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "echox", NULL};
    assert_int_equal(check(CALL("echo"), longer), TG_RPC_HEADER_MISMATCH);
    const char *empty[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", " ", NULL};
    assert_int_equal(check(CALL("echo"), empty), TG_RPC_HEADER_MISMATCH);

    /* The bypass: Mcp-Name names an allowed tool over a body that calls another one. */
    const char *lie[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "echo", NULL};
    assert_int_equal(check(CALL("delete_channel"), lie), TG_RPC_HEADER_MISMATCH);
    const char *lie64[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name",
                           "=?base64?ZWNobw==?=", NULL};
    assert_int_equal(check(CALL("delete_channel"), lie64), TG_RPC_HEADER_MISMATCH);
    const char *upper64[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name",
                             "=?BASE64?ZWNobw==?=", NULL};
    assert_int_equal(check(CALL("echo"), upper64), TG_RPC_HEADER_MISMATCH);
    const char *broken64[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name",
                              "=?base64?ZWNo*w==?=", NULL};
    assert_int_equal(check(CALL("echo"), broken64), TG_RPC_HEADER_MISMATCH);

    /* Missing, duplicated and comma-joined headers. */
    const char *noname[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", NULL};
    assert_int_equal(check(CALL("echo"), noname), TG_RPC_HEADER_MISMATCH);
    const char *nomethod[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Name", "echo", NULL};
    assert_int_equal(check(CALL("echo"), nomethod), TG_RPC_HEADER_MISMATCH);
    const char *noversion[] = {"Mcp-Method", "tools/call", "Mcp-Name", "echo", NULL};
    assert_int_equal(check(CALL("echo"), noversion), TG_RPC_HEADER_MISMATCH);
    const char *twice[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "echo",
                           "Mcp-Name", "echo", NULL};
    assert_int_equal(check(CALL("echo"), twice), TG_RPC_HEADER_MISMATCH);
    const char *joined[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name",
                            "echo, delete_channel", NULL};
    assert_int_equal(check(CALL("echo"), joined), TG_RPC_HEADER_MISMATCH);

    /* Mcp-Method is case-sensitive; the version header must equal _meta's. */
    const char *mcase[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "Tools/Call", "Mcp-Name", "echo", NULL};
    assert_int_equal(check(CALL("echo"), mcase), TG_RPC_HEADER_MISMATCH);
    const char *vdiff[] = {"MCP-Protocol-Version", "2025-11-25", "Mcp-Method", "tools/call", "Mcp-Name", "echo", NULL};
    assert_int_equal(check(CALL("echo"), vdiff), TG_RPC_HEADER_MISMATCH);

    /* resources/read names params.uri; a method that names nothing takes no Mcp-Name. */
    const char *res[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "resources/read", "Mcp-Name",
                         "file:///a", NULL};
    assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"resources/read\",\"params\":{\"uri\":\"file:///a\"," META
                           "}}",
                           res),
                     0);
    const char *list_named[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list", "Mcp-Name", "x", NULL};
    assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{" META "}}", list_named),
                     TG_RPC_HEADER_MISMATCH);
    const char *list[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/list", NULL};
    assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"params\":{" META "}}", list), 0);
    /* The tasks extension's tasks/get, tasks/update, tasks/cancel name their task (params.taskId):
     * Mcp-Name is required and must state it; tasks/result names nothing. */
#define TASK(method) "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"" method "\",\"params\":{\"taskId\":\"t1\"," META "}}"
    const char *tget[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/get", "Mcp-Name", "t1", NULL};
    assert_int_equal(check(TASK("tasks/get"), tget), 0);
    const char *tcancel[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/cancel", "Mcp-Name", "t1", NULL};
    assert_int_equal(check(TASK("tasks/cancel"), tcancel), 0);
    const char *tupdate[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/update", "Mcp-Name", "t1", NULL};
    assert_int_equal(check(TASK("tasks/update"), tupdate), 0);
    const char *tother[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/get", "Mcp-Name", "t2", NULL};
    assert_int_equal(check(TASK("tasks/get"), tother), TG_RPC_HEADER_MISMATCH);
    const char *tnone[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/get", NULL};
    assert_int_equal(check(TASK("tasks/get"), tnone), TG_RPC_HEADER_MISMATCH);
    const char *tresult[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tasks/result", "Mcp-Name", "t1", NULL};
    assert_int_equal(check(TASK("tasks/result"), tresult), TG_RPC_HEADER_MISMATCH);
#undef TASK
    /* tools/call without params.name: -32602. */
    const char *nn[] = {"MCP-Protocol-Version", "2026-07-28", "Mcp-Method", "tools/call", "Mcp-Name", "x", NULL};
    assert_int_equal(check("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{" META "}}", nn),
                     TG_RPC_INVALID_PARAMS);
}

static const char *const schema_json =
    "{\"type\":\"object\",\"properties\":{"
    "\"region\":{\"type\":\"string\",\"x-mcp-header\":\"Region\"},"
    "\"count\":{\"type\":\"integer\",\"x-mcp-header\":\"Count\"},"
    "\"dry\":{\"type\":\"boolean\",\"x-mcp-header\":\"Dry\"},"
    "\"text\":{\"type\":\"string\"},"
    "\"opts\":{\"type\":\"object\",\"properties\":{\"zone\":{\"type\":\"string\",\"x-mcp-header\":\"Zone\"}}}}}";

static int params(const char *args_json, const char *const *h)
{
    struct tg_mcp_header hs[16];
    size_t n = 0;
    for (; h[2 * n] != NULL; n++) {
        hs[n].name = tg_slice_cstr(h[2 * n]);
        hs[n].value = tg_slice_cstr(h[2 * n + 1]);
    }
    cJSON *schema = parse(schema_json);
    cJSON *args = parse(args_json);
    struct tg_mcp_refusal why;
    memset(&why, 0, sizeof(why));
    int r = tg_mcp_check_param_headers(hs, n, schema, args, &why);
    cJSON_Delete(schema);
    cJSON_Delete(args);
    return r == 0 ? 0 : why.code;
}

static void param_headers(void **state)
{
    const char *all[] = {"Mcp-Param-Region", "eu-west", "Mcp-Param-Count", "3", "Mcp-Param-Dry", "true",
                         "Mcp-Param-Zone", "a", NULL};
    assert_int_equal(params("{\"region\":\"eu-west\",\"count\":3,\"dry\":true,\"text\":\"x\",\"opts\":{\"zone\":\"a\"}}", all), 0);
    /* Absent or null arguments take no header; an unmarked header is left alone (forwarded). */
    const char *none[] = {"Mcp-Param-Other", "whatever", NULL};
    assert_int_equal(params("{\"text\":\"x\",\"region\":null}", none), 0);
    /* A present argument needs its header, equal to it. */
    const char *missing[] = {"Mcp-Param-Count", "3", NULL};
    assert_int_equal(params("{\"region\":\"eu-west\",\"count\":3}", missing), TG_RPC_HEADER_MISMATCH);
    const char *wrong[] = {"Mcp-Param-Region", "us-east", NULL};
    assert_int_equal(params("{\"region\":\"eu-west\"}", wrong), TG_RPC_HEADER_MISMATCH);
    const char *num[] = {"Mcp-Param-Count", "03", NULL};
    assert_int_equal(params("{\"count\":3}", num), 0);
    /* A header for an argument the body does not have. */
    const char *extra[] = {"Mcp-Param-Region", "eu-west", NULL};
    assert_int_equal(params("{}", extra), TG_RPC_HEADER_MISMATCH);
    /* Nested through properties. */
    const char *zone[] = {"Mcp-Param-Zone", "b", NULL};
    assert_int_equal(params("{\"opts\":{\"zone\":\"a\"}}", zone), TG_RPC_HEADER_MISMATCH);
    const char *dup[] = {"Mcp-Param-Region", "eu-west", "mcp-param-region", "eu-west", NULL};
    assert_int_equal(params("{\"region\":\"eu-west\"}", dup), TG_RPC_HEADER_MISMATCH);
}

static void annotations(void **state)
{
    struct {
        const char *schema;
        int valid;
    } cases[] = {
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"x-mcp-header\":\"A\"}}}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}", 1},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"x-mcp-header\":\"A\"}}}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"object\",\"x-mcp-header\":\"A\"}}}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"x-mcp-header\":\"A B\"}}}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"x-mcp-header\":\"\"}}}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"x-mcp-header\":7}}}", 0},
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"x-mcp-header\":\"X\"},"
         "\"b\":{\"type\":\"integer\",\"x-mcp-header\":\"x\"}}}", 0}, /* unique ignoring case */
        {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"x-mcp-header\":\"I\"}}}}", 0},
        {"{\"type\":\"object\",\"anyOf\":[{\"properties\":{\"a\":{\"type\":\"string\",\"x-mcp-header\":\"A\"}}}]}", 0},
        {"{\"type\":\"object\",\"properties\":{\"o\":{\"type\":\"object\",\"properties\":{\"z\":{\"type\":\"string\","
         "\"x-mcp-header\":\"Z\"}}}}}", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cJSON *s = parse(cases[i].schema);
        if (tg_mcp_tool_headers_valid(s) != cases[i].valid)
            fail_msg("case %zu: valid %d, expected %d: %s", i, !cases[i].valid, cases[i].valid, cases[i].schema);
        cJSON_Delete(s);
    }
    assert_true(tg_mcp_tool_headers_valid(NULL));
}

/* A 2025 upstream's answer made a 2026 result: resultType, cache hints, and tools/list without
 * the tools a 2026 client would have to drop. */
static void modern_results(void **state)
{
    char why[160];
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"tools\":["
                       "{\"name\":\"ok\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"r\":{\"type\":\"string\",\"x-mcp-header\":\"R\"}}}},"
                       "{\"name\":\"bad\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"number\",\"x-mcp-header\":\"N\"}}}},"
                       "{\"name\":\"plain\",\"inputSchema\":{\"type\":\"object\"}}],\"ttlMs\":60000,\"cacheScope\":\"public\"}}");
    tg_mcp_modern_result(&b, "tools/list", NULL, NULL, 0, why, sizeof(why));
    cJSON *j = cJSON_ParseWithLength(b.base, b.len);
    assert_non_null(j);
    cJSON *res = cJSON_GetObjectItemCaseSensitive(j, "result");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(res, "resultType")->valuestring, "complete");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(res, "ttlMs")->valueint, 0); /* never the upstream's */
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(res, "cacheScope")->valuestring, "private");
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(res, "tools");
    assert_int_equal(cJSON_GetArraySize(tools), 2);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, 0), "name")->valuestring, "ok");
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, 1), "name")->valuestring, "plain");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(j, "id")->valueint, 3);
    cJSON_Delete(j);
    /* tools/call: resultType only; an error answer is left alone. */
    b.len = 0;
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"content\":[]}}");
    tg_mcp_modern_result(&b, "tools/call", NULL, NULL, 0, why, sizeof(why));
    tg_buf_append(&b, "", 1);
    assert_string_equal(b.base, "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"resultType\":\"complete\",\"content\":[]}}");
    b.len = 0;
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{ }}");
    tg_mcp_modern_result(&b, "tools/call", NULL, NULL, 0, why, sizeof(why));
    tg_buf_append(&b, "", 1);
    assert_string_equal(b.base, "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"resultType\":\"complete\" }}");
    /* The key spelled with an escape takes the slow path: it is the same key, and it is not complete. */
    b.len = 0;
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{\"result\\u0054ype\":\"input_required\"}}");
    assert_int_equal(tg_mcp_modern_result(&b, "tools/call", NULL, NULL, 0, why, sizeof(why)), -1);
    b.len = 0;
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32602,\"message\":\"x\"}}");
    tg_mcp_modern_result(&b, "tools/call", NULL, NULL, 0, why, sizeof(why));
    tg_buf_append(&b, "", 1);
    assert_string_equal(b.base, "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32602,\"message\":\"x\"}}");
    assert_true(tg_mcp_removed_method("ping"));
    assert_true(tg_mcp_removed_method("initialize"));
    assert_false(tg_mcp_removed_method("tools/call"));
    tg_buf_dispose(&b);
}

/* The fast path (no tree: the upstream's spacing kept) is taken exactly when the answer holds no
 * "resultType" and no \u anywhere, as memmem would find them; a result whose place is known (the
 * answer's id restored from a parse already made) is made the same bytes as one found again. */
static void modern_result_paths(void **state)
{
    char why[160];
    /* JSON string contents: put as the answer's first key, and in its last string value */
    static const char *const inner[] = {
        "", "resultType", "resultTyp", "ResultType", "TTTT", "T", "xresultType", "resultTypex", "\\\\", "\\\\u",
        "\\\\x", "\\n", "\\u0041", "\\\"resultType\\\"", "\\\\\\u0041", "x\\\\",
    };
    for (size_t i = 0; i < sizeof(inner) / sizeof(inner[0]); i++) {
        for (int where = 0; where < 2; where++) {
            char json[256];
            if (where == 0)
                snprintf(json, sizeof(json), "{\"%s\":0,\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{ \"a\": 1}}", inner[i]);
            else
                snprintf(json, sizeof(json), "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{ \"a\": 1,\"b\":\"%s\"}}", inner[i]);
            size_t n = strlen(json);
            int slow = memmem(json, n, "\"resultType\"", 12) != NULL || memmem(json, n, "\\u", 2) != NULL;
            struct tg_buf b;
            tg_buf_init(&b);
            tg_buf_append(&b, json, n);
            tg_mcp_modern_result(&b, "tools/call", NULL, NULL, 0, why, sizeof(why));
            tg_buf_append(&b, "", 1);
            assert_non_null(strstr(b.base, "\"resultType\":\"complete\"")); /* it parsed: made a 2026 result */
            int kept = strstr(b.base, "\"a\": ") != NULL; /* the fast path leaves the space */
            if (kept == slow)
                fail_msg("%s: %s path, want the %s one", json, kept ? "fast" : "slow", slow ? "slow" : "fast");
            tg_buf_dispose(&b);
        }
    }
    static const struct {
        const char *answer, *client_id;
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"content\":[]}}", "\"a-much-longer-client-id\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"content\":[]}}", "1"},
        {"{\"result\" : {  } , \"id\" : 17,\"jsonrpc\":\"2.0\"}", "\"c\""},
        {"{\"result\":{\"a\":[1,2]},\"jsonrpc\":\"2.0\",\"id\":17}", "123456789012"},
        {"{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":\"text\"}", "\"c\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":7}", "\"c\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"resultType\":\"complete\", \"a\":1}}", "\"c\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"t\":\"\\u0041\"}}", "\"c\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"t\":1}}", "\"\\u0041\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *p = cases[i].answer;
        size_t n = strlen(p);
        struct tg_json_doc doc;
        assert_int_equal(tg_json_parse(p, n, 1000, 0, &doc, NULL, NULL), 0);
        struct tg_mcp_answer a = {"17", 2, cases[i].client_id, strlen(cases[i].client_id), 1, NULL, "up", NULL, NULL, 0, NULL, NULL, NULL};
        size_t at[2] = {0, 0};
        a.result_at = at;
        struct tg_buf known, found;
        tg_buf_init(&known);
        tg_buf_init(&found);
        int valid, is_error;
        assert_int_equal(tg_mcp_restore_id(&a, p, n, &doc, &known, &valid, &is_error, NULL), 1);
        assert_int_equal(at[1], doc.result_raw.len);
        assert_memory_equal(known.base + at[0], doc.result_raw.ptr, at[1]);
        tg_buf_append(&found, known.base, known.len);
        int rc1 = tg_mcp_modern_result_at(&known, at[0], at[1], "tools/call", NULL, NULL, 0, why, sizeof(why));
        int rc2 = tg_mcp_modern_result(&found, "tools/call", NULL, NULL, 0, why, sizeof(why));
        assert_int_equal(rc1, rc2);
        tg_buf_append(&known, "", 1);
        tg_buf_append(&found, "", 1);
        assert_string_equal(known.base, found.base);
        tg_buf_dispose(&known);
        tg_buf_dispose(&found);
    }
}

/* What a 2026 upstream is sent: Mcp-* headers rebuilt from the body, never copied; marked
 * Mcp-Param-* rebuilt from the arguments, unmarked ones passed on; the claim added or removed. */
static void upstream_headers(void **state)
{
    (void)state;
    cJSON *root = cJSON_Parse("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"caf\u00e9 \","
                              "\"arguments\":{\"region\":\"eu\",\"n\":3,\"b\":true,\"gone\":null}}}");
    struct tg_buf h;
    tg_buf_init(&h);
    tg_mcp_upstream_headers(&h, root, "2026-07-28", "Mcp-Param-X: y\r\n");
    assert_string_equal(h.base, "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\n"
                                "Mcp-Name: =?base64?Y2Fmw6kg?=\r\nMcp-Param-X: y\r\n");
    cJSON *schema = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"region\":{\"type\":\"string\",\"x-mcp-header\":\"Region\"},"
                                "\"n\":{\"type\":\"integer\",\"x-mcp-header\":\"N\"},\"b\":{\"type\":\"boolean\",\"x-mcp-header\":\"B\"},"
                                "\"gone\":{\"type\":\"string\",\"x-mcp-header\":\"Gone\"}}}");
    struct tg_mcp_header in[2] = {
        {tg_slice_cstr("Mcp-Param-Region"), tg_slice_cstr("spoofed")},
        {tg_slice_cstr("mcp-param-other"), tg_slice_cstr("kept")},
    };
    h.len = 0;
    tg_mcp_param_headers_build(&h, in, 2, schema,
                               cJSON_GetObjectItem(cJSON_GetObjectItem(root, "params"), "arguments"));
    assert_string_equal(h.base, "Mcp-Param-Region: eu\r\nMcp-Param-N: 3\r\nMcp-Param-B: true\r\nmcp-param-other: kept\r\n");
    /* a number out of any integer's range states no header (and is no undefined cast) */
    cJSON *huge = cJSON_Parse("{\"region\":\"eu\",\"n\":1e300}");
    h.len = 0;
    tg_mcp_param_headers_build(&h, NULL, 0, schema, huge);
    assert_string_equal(h.base, "Mcp-Param-Region: eu\r\n");
    cJSON_Delete(huge);
    h.len = 0;
    tg_mcp_param_headers_build(&h, in, 2, NULL, NULL); /* schema unknown: both as they came */
    assert_string_equal(h.base, "Mcp-Param-Region: spoofed\r\nmcp-param-other: kept\r\n");
    struct tg_buf none;
    tg_buf_init(&none);
    tg_mcp_param_headers_build(&none, in, 0, NULL, NULL); /* nothing to send: nothing made */
    assert_int_equal(none.len, 0);
    assert_null(none.base);
    tg_mcp_add_claim(root, "{\"elicitation\":{}}", tg_mcp_log_level("warning"));
    assert_string_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "params"), "_meta"), "io.modelcontextprotocol/logLevel")->valuestring, "warning");
    assert_int_equal(tg_mcp_log_level("nope"), 0);
    cJSON *meta = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "params"), "_meta");
    assert_string_equal(cJSON_GetObjectItem(meta, TG_MCP_META_VERSION)->valuestring, "2026-07-28");
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(meta, TG_MCP_META_CAPS), "elicitation"));
    tg_mcp_strip_claim(root);
    assert_null(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "params"), "_meta"));
    cJSON_Delete(schema);
    cJSON_Delete(root);
    tg_buf_dispose(&h);
}

/* The annotated schemas learnt from tools/list answers: per upstream, replaced by a later list,
 * unannotated and oversized ones not kept. */
static void schemas_learnt(void **state)
{
    (void)state;
    struct tg_mcp_schemas *sc = tg_mcp_schemas_new();
    const char *a = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":["
                    "{\"name\":\"r\",\"inputSchema\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\",\"x-mcp-header\":\"X\"}}}},"
                    "{\"name\":\"plain\",\"inputSchema\":{\"type\":\"object\"}}]}}";
    tg_mcp_schemas_learn(sc, "up", a, strlen(a));
    assert_non_null(tg_mcp_schemas_find(sc, "up", "r"));
    assert_null(tg_mcp_schemas_find(sc, "up", "plain"));
    assert_null(tg_mcp_schemas_find(sc, "other", "r"));
    /* a later list drops the annotation: the entry goes */
    const char *b = "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"tools\":[{\"name\":\"r\",\"inputSchema\":{\"type\":\"object\"}}]}}";
    tg_mcp_schemas_learn(sc, "up", b, strlen(b));
    assert_null(tg_mcp_schemas_find(sc, "up", "r"));
    /* an oversized schema is not learnt */
    struct tg_buf big;
    tg_buf_init(&big);
    tg_buf_appends(&big, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"tools\":[{\"name\":\"huge\",\"inputSchema\":{\"type\":\"object\","
                         "\"description\":\"");
    for (int i = 0; i < TG_MCP_SCHEMA_BYTES; i++)
        tg_buf_append(&big, "a", 1);
    tg_buf_appends(&big, "\",\"properties\":{\"x\":{\"type\":\"string\",\"x-mcp-header\":\"X\"}}}}]}}");
    tg_mcp_schemas_learn(sc, "up", big.base, big.len);
    assert_null(tg_mcp_schemas_find(sc, "up", "huge"));
    tg_buf_dispose(&big);
    tg_mcp_schemas_free(sc);
}

/* What an upstream says goes into later headers only when it is safe: the agreed version must
 * be one the gateway knows (a JSON escape could carry CR/LF into MCP-Protocol-Version). */
static void upstream_values_into_headers(void **state)
{
    (void)state;
    struct tg_session s;
    memset(&s, 0, sizeof(s));
    s.proto = "2025-06-18";
    const char *evil = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-06-18\\r\\nX-Evil: 1\"}}";
    tg_mcp_note_init_result(&s, evil, strlen(evil), 64);
    assert_string_equal(s.proto, "2025-06-18");
    assert_false(s.initialized);
    const char *ok = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-11-25\"}}";
    tg_mcp_note_init_result(&s, ok, strlen(ok), 64);
    assert_string_equal(s.proto, "2025-11-25");
    assert_true(s.initialized);
    assert_true(tg_header_value_safe("abc-123 x", 9));
    assert_false(tg_header_value_safe("a\r\nb", 4));
    assert_false(tg_header_value_safe("a\x01", 2));
    assert_false(tg_header_value_safe("\xc3\xa9", 2));
    assert_false(tg_header_value_safe("", 0));
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(classify_by_body), cmocka_unit_test(versions),      cmocka_unit_test(header_values),
        cmocka_unit_test(header_matches_body), cmocka_unit_test(standard_headers), cmocka_unit_test(param_headers),
        cmocka_unit_test(annotations), cmocka_unit_test(modern_results), cmocka_unit_test(modern_result_paths), cmocka_unit_test(upstream_headers), cmocka_unit_test(schemas_learnt), cmocka_unit_test(upstream_values_into_headers),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
