/* core/wire/msg.c: JSON-RPC decode and classification, id rewriting, error objects. */
#include "test/unit/unit.h"

#include "core/base/json.h"
#include "core/wire/msg.h"

static int decode(const char *s, struct tg_msg *m, const char **why)
{
    *why = NULL;
    return tg_msg_decode(s, strlen(s), 64, m, why);
}

static void expect_kind(const char *s, enum tg_msg_kind kind, const char *method, const char *id)
{
    struct tg_msg m;
    const char *why;
    int r = decode(s, &m, &why);
    if (r != 0)
        fail_msg("rejected with %d (%s): %s", r, why ? why : "?", s);
    assert_int_equal(m.kind, kind);
    if (method)
        assert_string_equal(m.method, method);
    else
        assert_null(m.method);
    if (id) {
        assert_non_null(m.id_raw);
        assert_string_equal(m.id_raw, id);
        assert_int_equal(m.id_len, strlen(id));
    } else {
        assert_null(m.id_raw);
    }
    tg_msg_dispose(&m);
    assert_null(m.root);
    assert_null(m.id_raw);
}

/* code, and the id the error reply would carry (NULL = null). */
static void expect_error(const char *s, int code, const char *id, const char *why_contains)
{
    struct tg_msg m;
    const char *why;
    int r = decode(s, &m, &why);
    if (r != code)
        fail_msg("decode returned %d, expected %d (why: %s): %s", r, code, why ? why : "-", s);
    assert_non_null(why);
    if (why_contains && strstr(why, why_contains) == NULL)
        fail_msg("reason \"%s\" does not mention \"%s\" for %s", why, why_contains, s);
    if (id) {
        if (m.id_raw == NULL)
            fail_msg("no id kept for the error reply, expected %s: %s", id, s);
        assert_string_equal(m.id_raw, id);
    } else if (m.id_raw != NULL) {
        fail_msg("id %s kept, expected none: %s", m.id_raw, s);
    }
    tg_msg_dispose(&m);
}

static void classify(void **state)
{
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"x\"}}", TG_MSG_REQUEST,
                "tools/call", "1");
    expect_kind("{\"method\":\"ping\",\"id\":\"a\\u0041\",\"jsonrpc\":\"2.0\"}", TG_MSG_REQUEST, "ping",
                "\"a\\u0041\"");
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":12345678901234567890,\"method\":\"ping\"}", TG_MSG_REQUEST, "ping",
                "12345678901234567890");
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":-7,\"method\":\"ping\"}", TG_MSG_REQUEST, "ping", "-7");
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\",\"params\":[1,2]}", TG_MSG_REQUEST, "ping", "0");
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":\"\",\"method\":\"ping\"}", TG_MSG_REQUEST, "ping", "\"\"");
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"x\",\"params\":{\"id\":6}}", TG_MSG_REQUEST, "x", "5");
    expect_kind("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", TG_MSG_NOTIFICATION,
                "notifications/initialized", NULL);
    expect_kind("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"id\":1}}",
                TG_MSG_NOTIFICATION, "notifications/progress", NULL);
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"result\":{}}", TG_MSG_RESPONSE, NULL, "\"x\"");
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":null}", TG_MSG_RESPONSE, NULL, "3");
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32601,\"message\":\"no\",\"data\":[1]}}",
                TG_MSG_RESPONSE, NULL, "3");
    /* An error about a request whose id could not be read has a null id. */
    expect_kind("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"parse\"}}",
                TG_MSG_RESPONSE, NULL, NULL);
    /* Whitespace and member order do not matter. */
    expect_kind(" { \"params\" : { } , \"method\" : \"a/b\" , \"id\" : 9 , \"jsonrpc\" : \"2.0\" } ", TG_MSG_REQUEST,
                "a/b", "9");
}

/* The method's id, set by the decoder, and the standard-method answer taken from it: the same
 * as the names say, for every named method (as a request and as a notification) and for names
 * that are not, or nearly are, named. */
static void method_ids(void **state)
{
    static const struct {
        const char *name;
        enum tg_method id;
    } cases[] = {
        {"initialize", TG_M_INITIALIZE}, {"ping", TG_M_PING}, {"tools/call", TG_M_TOOLS_CALL},
        {"tools/list", TG_M_TOOLS_LIST}, {"resources/read", TG_M_RESOURCES_READ}, {"prompts/get", TG_M_PROMPTS_GET},
        {"resources/subscribe", TG_M_RESOURCES_SUBSCRIBE}, {"resources/unsubscribe", TG_M_RESOURCES_UNSUBSCRIBE},
        {"logging/setLevel", TG_M_LOGGING_SET_LEVEL}, {"subscriptions/listen", TG_M_LISTEN},
        {"notifications/initialized", TG_M_INITIALIZED}, {"notifications/cancelled", TG_M_CANCELLED},
        {"notifications/roots/list_changed", TG_M_ROOTS_LIST_CHANGED}, {"tools/calls", TG_M_OTHER},
        {"tools/cal", TG_M_OTHER}, {"Tools/call", TG_M_OTHER}, {"pin", TG_M_OTHER}, {"prompts/list", TG_M_OTHER},
        {"notifications/progress", TG_M_OTHER}, {"tasks/get", TG_M_OTHER}, {"x/y", TG_M_OTHER},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(tg_msg_method_id(cases[i].name), cases[i].id);
        for (int notify = 0; notify < 2; notify++) {
            char body[160];
            snprintf(body, sizeof(body), "{\"jsonrpc\":\"2.0\",%s\"method\":\"%s\"}", notify ? "" : "\"id\":7,",
                     cases[i].name);
            struct tg_msg m;
            const char *why = NULL;
            assert_int_equal(tg_msg_decode(body, strlen(body), 64, &m, &why), 0);
            assert_int_equal(m.mid, cases[i].id);
            for (int k = 0; k < 2; k++) {
                enum tg_msg_kind kind = k ? TG_MSG_NOTIFICATION : TG_MSG_REQUEST;
                if (tg_msg_is_standard(&m, kind) != tg_msg_is_standard_client_method(cases[i].name, kind))
                    fail_msg("%s (%s) as a %s: the id says %d", cases[i].name, notify ? "notification" : "request",
                             k ? "notification" : "request", tg_msg_is_standard(&m, kind));
            }
            tg_msg_dispose(&m);
        }
    }
    assert_int_equal(tg_msg_method_id(NULL), TG_M_OTHER);
}

static void parse_errors(void **state)
{
    expect_error("", TG_RPC_PARSE_ERROR, NULL, NULL);
    expect_error("{", TG_RPC_PARSE_ERROR, NULL, NULL);
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"", TG_RPC_PARSE_ERROR, NULL, NULL);
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"} x", TG_RPC_PARSE_ERROR, NULL, "trailing");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xC0\x80\"}", TG_RPC_PARSE_ERROR, NULL, "UTF-8");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\\ud800\"}", TG_RPC_PARSE_ERROR, NULL, "surrogate");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"method\":\"x\"}", TG_RPC_PARSE_ERROR, NULL, "duplicate");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"\\u006dethod\":\"y\"}", TG_RPC_PARSE_ERROR, NULL,
                 "duplicate");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":01,\"method\":\"x\"}", TG_RPC_PARSE_ERROR, NULL, NULL);
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":NaN,\"method\":\"x\"}", TG_RPC_PARSE_ERROR, NULL, NULL);
    /* Depth past the limit is a parse error too. */
    struct tg_msg m;
    const char *why = NULL;
    const char *deep = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":{\"a\":[[[]]]}}";
    assert_int_equal(tg_msg_decode(deep, strlen(deep), 4, &m, &why), TG_RPC_PARSE_ERROR);
    assert_string_equal(why, "nesting too deep");
    tg_msg_dispose(&m);
    assert_int_equal(tg_msg_decode(deep, strlen(deep), 5, &m, &why), 0);
    tg_msg_dispose(&m);
}

static void invalid_requests(void **state)
{
    /* Valid JSON, not a JSON-RPC message. */
    expect_error("[]", TG_RPC_INVALID_REQUEST, NULL, "object");
    expect_error("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}]", TG_RPC_INVALID_REQUEST, NULL, "object");
    expect_error("1", TG_RPC_INVALID_REQUEST, NULL, NULL);
    expect_error("\"x\"", TG_RPC_INVALID_REQUEST, NULL, NULL);
    expect_error("null", TG_RPC_INVALID_REQUEST, NULL, NULL);
    expect_error("{}", TG_RPC_INVALID_REQUEST, NULL, "jsonrpc");
    /* jsonrpc must be exactly the string "2.0"; the id is kept for the error reply. */
    expect_error("{\"id\":5,\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, "5", "jsonrpc");
    expect_error("{\"jsonrpc\":\"1.0\",\"id\":5,\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, "5", "jsonrpc");
    expect_error("{\"jsonrpc\":2.0,\"id\":\"s\",\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, "\"s\"", "jsonrpc");
    expect_error("{\"jsonrpc\":\"2.0 \",\"id\":5,\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, "5", "jsonrpc");
    /* id types */
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":true,\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, NULL, "id");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, NULL, "id");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":[1],\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, NULL, "id");
    /* Fractional (or exponent) numeric ids are refused. */
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1.5,\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, "1.5", "integer");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1.0,\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, "1.0", "integer");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1e3,\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, "1e3", "integer");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1E3,\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, "1E3", "integer");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":-0.5,\"result\":{}}", TG_RPC_INVALID_REQUEST, "-0.5", "integer");
    /* method */
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}", TG_RPC_INVALID_REQUEST, "1", "method");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":5}", TG_RPC_INVALID_REQUEST, "1", "method");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":null}", TG_RPC_INVALID_REQUEST, "1", "method");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"result\":{}}", TG_RPC_INVALID_REQUEST, "1",
                 "result");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"error\":{\"code\":1,\"message\":\"m\"}}",
                 TG_RPC_INVALID_REQUEST, "1", NULL);
    /* params must be structured */
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":\"s\"}", TG_RPC_INVALID_REQUEST, "1",
                 "params");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":3}", TG_RPC_INVALID_REQUEST, "1",
                 "params");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":null}", TG_RPC_INVALID_REQUEST, "1",
                 "params");
    expect_error("{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"params\":true}", TG_RPC_INVALID_REQUEST, NULL, "params");
    /* A request id must not be null. */
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"x\"}", TG_RPC_INVALID_REQUEST, NULL, "null");
    /* Unknown top-level members are refused in requests, notifications and responses. */
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"extra\":1}", TG_RPC_INVALID_REQUEST, "1",
                 "unexpected member");
    expect_error("{\"jsonrpc\":\"2.0\",\"method\":\"x\",\"Params\":{}}", TG_RPC_INVALID_REQUEST, NULL,
                 "unexpected member");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"ID\":2}", TG_RPC_INVALID_REQUEST, "1",
                 "unexpected member");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"params\":{}}", TG_RPC_INVALID_REQUEST, "1",
                 "unexpected member");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"method2\":1}", TG_RPC_INVALID_REQUEST, "1",
                 "unexpected member");
    /* Keys that share a first letter, or all but the end, with a member's */
    static const char *const near[] = {"\"i\"", "\"idd\"", "\"jsonrpc2\"", "\"j\"", "\"\"", "\"methods\"", "\"p\""};
    for (size_t i = 0; i < sizeof(near) / sizeof(*near); i++) {
        char m[128];
        snprintf(m, sizeof(m), "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",%s:1}", near[i]);
        expect_error(m, TG_RPC_INVALID_REQUEST, "1", "unexpected member");
        snprintf(m, sizeof(m), "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},%s:1}", i == 5 ? "\"errors\"" : near[i]);
        expect_error(m, TG_RPC_INVALID_REQUEST, "1", "unexpected member");
    }
    /* Responses */
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1}", TG_RPC_INVALID_REQUEST, "1", "method");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1,\"error\":{\"code\":1,\"message\":\"m\"}}",
                 TG_RPC_INVALID_REQUEST, "1", NULL);
    expect_error("{\"jsonrpc\":\"2.0\",\"result\":{}}", TG_RPC_INVALID_REQUEST, NULL, "id");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":\"bad\"}", TG_RPC_INVALID_REQUEST, "1", "error");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":\"m\"}}", TG_RPC_INVALID_REQUEST, "1",
                 "code");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"1\",\"message\":\"m\"}}",
                 TG_RPC_INVALID_REQUEST, "1", "code");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":1}}", TG_RPC_INVALID_REQUEST, "1", "message");
    expect_error("{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":[1]}", TG_RPC_INVALID_REQUEST, "1", "error");
}

static void dispose_is_idempotent(void **state)
{
    struct tg_msg m;
    const char *why;
    assert_int_equal(decode("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\"}", &m, &why), 0);
    tg_msg_dispose(&m);
    tg_msg_dispose(&m);
    assert_null(m.root);
    assert_null(m.method);
}

static void write_with_id(void **state)
{
    struct tg_msg m;
    const char *why;
    const char *in = "{\"method\":\"tools/call\",\"params\":{\"b\":12345678901234567890,\"a\":\"\\u00e9\\n\"},"
                     "\"jsonrpc\":\"2.0\",\"id\":\"client-1\"}";
    assert_int_equal(decode(in, &m, &why), 0);
    struct tg_buf out;
    tg_buf_init(&out);
    tg_msg_write_with_id(&out, &m, 42);
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base, "{\"method\":\"tools/call\",\"params\":{\"b\":12345678901234567890,\"a\":"
                                  "\"\xC3\xA9\\n\"},\"jsonrpc\":\"2.0\",\"id\":42}");
    tg_msg_dispose(&m);

    /* id first, largest gateway id. */
    out.len = 0;
    assert_int_equal(decode("{\"id\":7,\"jsonrpc\":\"2.0\",\"method\":\"ping\"}", &m, &why), 0);
    tg_msg_write_with_id(&out, &m, UINT64_MAX);
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base, "{\"id\":18446744073709551615,\"jsonrpc\":\"2.0\",\"method\":\"ping\"}");
    tg_msg_dispose(&m);

    /* Nested "id" members are not touched. */
    out.len = 0;
    assert_int_equal(decode("{\"jsonrpc\":\"2.0\",\"params\":{\"id\":\"keep\"},\"method\":\"x\",\"id\":1}", &m, &why),
                     0);
    tg_msg_write_with_id(&out, &m, 0);
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base, "{\"jsonrpc\":\"2.0\",\"params\":{\"id\":\"keep\"},\"method\":\"x\",\"id\":0}");
    /* The output is itself a valid request with the new id. */
    struct tg_msg m2;
    assert_int_equal(tg_msg_decode(out.base, out.len - 1, 64, &m2, &why), 0);
    assert_int_equal(m2.kind, TG_MSG_REQUEST);
    assert_string_equal(m2.id_raw, "0");
    tg_msg_dispose(&m2);
    tg_msg_dispose(&m);
    tg_buf_dispose(&out);
}

static void splice_id(void **state)
{
    struct tg_buf out;
    tg_buf_init(&out);
    const char *in = "{\"jsonrpc\":\"2.0\",\"id\":17,\"result\":{\"id\":17}}";
    struct tg_json_doc doc;
    assert_int_equal(tg_json_parse(in, strlen(in), 64, 0, &doc, NULL, NULL), 0);
    assert_int_equal(doc.id_raw.len, 2);
    const char *client_id = "\"abc\\u0041\"";
    tg_msg_splice_id(&out, in, strlen(in), (size_t)(doc.id_raw.ptr - in), doc.id_raw.len, client_id,
                     strlen(client_id));
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base, "{\"jsonrpc\":\"2.0\",\"id\":\"abc\\u0041\",\"result\":{\"id\":17}}");
    /* At the start and at the end of the input. */
    out.len = 0;
    tg_msg_splice_id(&out, "7", 1, 0, 1, "12345678901234567890", 20);
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base, "12345678901234567890");
    out.len = 0;
    tg_msg_splice_id(&out, "{\"x\":1,\"id\":99}", 15, 12, 2, "1", 1);
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base, "{\"x\":1,\"id\":1}");
    tg_buf_dispose(&out);
}

/* The id replaced and params._meta left out, the id before or after it; spans that overlap or
 * run past the input write nothing. */
static void splice_id_cut(void **state)
{
    struct tg_buf out;
    tg_buf_init(&out);
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":17,\"method\":\"m\",\"params\":{\"a\":1, \"_meta\":{\"x\":[]} }}",
         "{\"jsonrpc\":\"2.0\",\"id\":\"c\",\"method\":\"m\",\"params\":{\"a\":1 }}"},
        {"{\"params\":{ \"_meta\" : {}, \"a\":1},\"id\":17,\"jsonrpc\":\"2.0\",\"method\":\"m\"}",
         "{\"params\":{  \"a\":1},\"id\":\"c\",\"jsonrpc\":\"2.0\",\"method\":\"m\"}"},
        {"{\"params\":{\"_meta\":{}},\"id\":17,\"jsonrpc\":\"2.0\",\"method\":\"m\"}",
         "{\"params\":{},\"id\":\"c\",\"jsonrpc\":\"2.0\",\"method\":\"m\"}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *in = cases[i].in;
        struct tg_msg m;
        const char *why = NULL;
        if (tg_msg_decode(in, strlen(in), 64, &m, &why) != 0)
            assert_string_equal(why, "(decodes)");
        assert_true(m.src_meta_len > 0);
        out.len = 0;
        assert_int_equal(tg_msg_splice_id_cut(&out, in, strlen(in), m.src_id_off, m.id_len, "\"c\"", 3, m.src_meta_off,
                                              m.src_meta_len), 0);
        tg_buf_append(&out, "", 1);
        assert_string_equal(out.base, cases[i].want);
        tg_msg_dispose(&m);
    }
    out.len = 0;
    assert_int_equal(tg_msg_splice_id_cut(&out, "0123456789", 10, 2, 2, "x", 1, 3, 2), -1);
    assert_int_equal(tg_msg_splice_id_cut(&out, "0123456789", 10, 4, 2, "x", 1, 2, 3), -1);
    assert_int_equal(tg_msg_splice_id_cut(&out, "0123456789", 10, 2, 2, "x", 1, 8, 3), -1);
    assert_int_equal(tg_msg_splice_id_cut(&out, "0123456789", 10, 9, 2, "x", 1, 0, 1), -1);
    assert_int_equal(out.len, 0);
    assert_int_equal(tg_msg_splice_id_cut(&out, "0123456789", 10, 2, 2, "x", 1, 4, 6), 0);
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base, "01x");
    tg_buf_dispose(&out);
}

static void rpc_error_shape(void **state)
{
    struct tg_buf out;
    tg_buf_init(&out);
    tg_rpc_error(&out, NULL, 0, TG_RPC_INVALID_REQUEST, "bad \"x\"\n", NULL);
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base,
                        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"bad \\\"x\\\"\\n\"}}");
    out.len = 0;
    tg_rpc_error(&out, "\"a\"xyz", 3, TG_RPC_DENIED, "denied by policy", "{\"tool\":\"t\",\"rule\":null}");
    tg_buf_append(&out, "", 1);
    assert_string_equal(out.base, "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"error\":{\"code\":-32001,\"message\":"
                                  "\"denied by policy\",\"data\":{\"tool\":\"t\",\"rule\":null}}}");
    /* Each is a valid JSON-RPC error response. */
    struct tg_msg m;
    const char *why;
    assert_int_equal(tg_msg_decode(out.base, out.len - 1, 64, &m, &why), 0);
    assert_int_equal(m.kind, TG_MSG_RESPONSE);
    assert_string_equal(m.id_raw, "\"a\"");
    cJSON *err = cJSON_GetObjectItemCaseSensitive(m.root, "error");
    assert_int_equal(cJSON_GetObjectItemCaseSensitive(err, "code")->valueint, -32001);
    tg_msg_dispose(&m);
    out.len = 0;
    tg_rpc_error(&out, "12345678901234567890", 20, TG_RPC_UPSTREAM, "upstream unavailable", "{\"upstream\":\"u\"}");
    assert_int_equal(tg_msg_decode(out.base, out.len, 64, &m, &why), 0);
    assert_string_equal(m.id_raw, "12345678901234567890");
    tg_msg_dispose(&m);
    tg_buf_dispose(&out);
}

static void standard_methods(void **state)
{
    assert_int_equal(tg_msg_is_standard_client_method("shutdown", TG_MSG_REQUEST), 0);
    assert_int_equal(tg_msg_is_standard_client_method("tools/call", TG_MSG_REQUEST), 1);
    assert_int_equal(tg_msg_is_standard_client_method("tools/list", TG_MSG_REQUEST), 1);
    assert_int_equal(tg_msg_is_standard_client_method("initialize", TG_MSG_REQUEST), 1);
    assert_int_equal(tg_msg_is_standard_client_method("ping", TG_MSG_REQUEST), 1);
    assert_int_equal(tg_msg_is_standard_client_method("notifications/initialized", TG_MSG_NOTIFICATION), 1);
    /* a request method is not a notification, and the other way round */
    assert_int_equal(tg_msg_is_standard_client_method("tools/call", TG_MSG_NOTIFICATION), 0);
    assert_int_equal(tg_msg_is_standard_client_method("notifications/initialized", TG_MSG_REQUEST), 0);
    assert_int_equal(tg_msg_is_standard_client_method("notifications/cancelled", TG_MSG_NOTIFICATION), 1);
    assert_int_equal(tg_msg_is_standard_client_method("resources/read", TG_MSG_REQUEST), 1);
    assert_int_equal(tg_msg_is_standard_client_method("prompts/get", TG_MSG_REQUEST), 1);
    assert_int_equal(tg_msg_is_standard_client_method("", TG_MSG_REQUEST), 0);
    assert_int_equal(tg_msg_is_standard_client_method("Tools/call", TG_MSG_REQUEST), 0);
    assert_int_equal(tg_msg_is_standard_client_method("tools/call ", TG_MSG_REQUEST), 0);
    assert_int_equal(tg_msg_is_standard_client_method("tools/", TG_MSG_REQUEST), 0);
    /* Server-to-client methods are not something a client sends. */
    assert_int_equal(tg_msg_is_standard_client_method("sampling/createMessage", TG_MSG_REQUEST), 0);
    assert_int_equal(tg_msg_is_standard_client_method("notifications/message", TG_MSG_NOTIFICATION), 0);
}

/* Keys that differ only in ASCII case are refused at any depth, among few keys (pairwise) and
 * many (sorted); keys whose first bytes differ only in bit 0x20 but are not letters pass. */
static void case_twins(void **state)
{
    (void)state;
    static const struct {
        const char *msg;
        int refused;
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"Name\":\"b\"}}", 1},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"arguments\":{\"x\":{\"kEy\":1,\"KeY\":2}}}}", 1},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"mame\":\"b\"}}", 0},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"arguments\":{\"a@\":1,\"a`\":2,\"@x\":3,\"`x\":4}}}", 0},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"arguments\":{\"k1\":1,\"k2\":1,\"k3\":1,\"k4\":1,\"k5\":1,\"k6\":1,\"k7\":1,\"k8\":1,\"k9\":1,\"k10\":1,\"k11\":1,\"k12\":1,\"K7\":1}}}", 1},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"arguments\":{\"k1\":1,\"k2\":1,\"k3\":1,\"k4\":1,\"k5\":1,\"k6\":1,\"k7\":1,\"k8\":1,\"k9\":1,\"k10\":1,\"k11\":1,\"k12\":1,\"k13\":1}}}", 0},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"arguments\":{\"l\":[1,{\"q\":1,\"Q\":2}]}}}", 1},
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"arguments\":{\"l\":[{\"q\":1},{\"Q\":2}]}}}", 0},
        {"{\"jsonrpc\":\"2.0\",\"ID\":1,\"id\":1,\"method\":\"tools/call\"}", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        struct tg_msg m;
        const char *why = NULL;
        int r = tg_msg_decode(cases[i].msg, strlen(cases[i].msg), 64, &m, &why);
        if (cases[i].refused != (r == TG_RPC_INVALID_REQUEST))
            fail_msg("case %zu: decode gave %d (%s)", i, r, why ? why : "");
        tg_msg_dispose(&m);
    }
    /* a duplicate is still a duplicate (a parse error), not a pair of twins */
    static const char dup[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"a\",\"name\":\"b\"}}";
    struct tg_msg m;
    const char *why = NULL;
    assert_int_equal(tg_msg_decode(dup, strlen(dup), 64, &m, &why), TG_RPC_PARSE_ERROR);
    tg_msg_dispose(&m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(classify),
        cmocka_unit_test(case_twins),
        cmocka_unit_test(parse_errors),
        cmocka_unit_test(method_ids),
        cmocka_unit_test(invalid_requests),
        cmocka_unit_test(dispose_is_idempotent),
        cmocka_unit_test(write_with_id),
        cmocka_unit_test(splice_id),
        cmocka_unit_test(splice_id_cut),
        cmocka_unit_test(rpc_error_shape),
        cmocka_unit_test(standard_methods),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
