/* MRTR through the gateway (core/mcp/mrtr.c): an input_required result is sealed for the call it
 * answers, and a retry opens only for that call, once, with the keys issued. */
#include "test/unit/unit.h"

#include <string.h>

#include "core/base/json.h"
#include "core/mcp/mrtr.h"

#define NOW 1000000

static cJSON *params_of(const char *json) { return cJSON_Parse(json); }

static void bind(struct tg_mcp_mrtr_call *c, const char *grant, const char *method, const cJSON *params, unsigned caps)
{
    memset(c, 0, sizeof(*c));
    tg_mcp_mrtr_bind(c, grant, "up", method, params);
    c->client_caps = caps;
}

/* Seal an input_required result for params; returns the result (caller frees). */
static cJSON *sealed(struct tg_mcp_mrtr *t, const char *grant, const cJSON *params, const char *result_json)
{
    struct tg_mcp_mrtr_call c;
    bind(&c, grant, "tools/call", params, TG_CAP_ELICITATION);
    cJSON *res = cJSON_Parse(result_json);
    char why[160];
    assert_int_equal(tg_mcp_mrtr_result(t, res, &c, NOW, why, sizeof(why)), 0);
    return res;
}

/* The retry a client would send: the original params, the state echoed, responses for keys. */
static cJSON *retry_of(const char *params_json, const cJSON *res, const char *responses_json)
{
    cJSON *p = cJSON_Parse(params_json);
    cJSON_AddStringToObject(p, "requestState", cJSON_GetObjectItem(res, "requestState")->valuestring);
    cJSON_AddItemToObject(p, "inputResponses", cJSON_Parse(responses_json));
    return p;
}

/* As core/gate/dispatch.c binds a request: without the digest, which the retry makes itself. */
static int try_retry(struct tg_mcp_mrtr *t, const char *grant, cJSON *p, int64_t now)
{
    struct tg_mcp_mrtr_call c;
    memset(&c, 0, sizeof(c));
    tg_mcp_mrtr_bind_later(&c, grant, "up", "tools/call", p);
    c.client_caps = TG_CAP_ELICITATION;
    char why[200];
    int rc = tg_mcp_mrtr_retry(t, p, &c, now, NULL, 0, why, sizeof(why));
    tg_mcp_mrtr_call_dispose(&c);
    return rc;
}

static const char *P = "{\"name\":\"ask\",\"arguments\":{\"q\":1}}";
static const char *R = "{\"resultType\":\"input_required\",\"inputRequests\":{\"k1\":{\"method\":\"elicitation/create\","
                       "\"params\":{}}},\"requestState\":\"upstream-state\"}";

static void seal_and_open_once(void **state)
{
    (void)state;
    struct tg_mcp_mrtr t;
    tg_mcp_mrtr_init(&t, 16);
    cJSON *p = params_of(P);
    cJSON *res = sealed(&t, "alice", p, R);
    const char *tok = cJSON_GetObjectItem(res, "requestState")->valuestring;
    assert_string_not_equal(tok, "upstream-state"); /* the client never sees the upstream's state */
    cJSON *r = retry_of(P, res, "{\"k1\":{\"action\":\"accept\"}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), 1);
    assert_string_equal(cJSON_GetObjectItem(r, "requestState")->valuestring, "upstream-state");
    cJSON *again = retry_of(P, res, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", again, NOW + 2), -1); /* single use */
    cJSON_Delete(again);
    cJSON_Delete(r);
    cJSON_Delete(res);
    cJSON_Delete(p);
    tg_mcp_mrtr_dispose(&t);
}

static void retries_refused(void **state)
{
    (void)state;
    struct tg_mcp_mrtr t;
    tg_mcp_mrtr_init(&t, 16);
    cJSON *p = params_of(P);
    cJSON *res = sealed(&t, "alice", p, R);
    /* another grant */
    cJSON *r = retry_of(P, res, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "bob", r, NOW + 1), -1);
    cJSON_Delete(r);
    /* changed arguments, changed tool */
    r = retry_of("{\"name\":\"ask\",\"arguments\":{\"q\":2}}", res, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), -1);
    cJSON_Delete(r);
    r = retry_of("{\"name\":\"execute_code\",\"arguments\":{\"q\":1}}", res, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), -1);
    cJSON_Delete(r);
    /* a key never issued */
    r = retry_of(P, res, "{\"k2\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), -1);
    cJSON_Delete(r);
    /* tampered */
    r = retry_of(P, res, "{\"k1\":{}}");
    char *tok = cJSON_GetObjectItem(r, "requestState")->valuestring;
    tok[strlen(tok) / 2] = tok[strlen(tok) / 2] == 'A' ? 'B' : 'A';
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), -1);
    cJSON_Delete(r);
    /* expired */
    r = retry_of(P, res, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 11 * 60 * 1000), -1);
    cJSON_Delete(r);
    /* answers without any state answer nothing issued: dropped, a first round */
    r = cJSON_Parse("{\"name\":\"ask\",\"arguments\":{\"q\":1},\"inputResponses\":{\"k1\":{}}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), 0);
    assert_null(cJSON_GetObjectItem(r, "inputResponses"));
    cJSON_Delete(r);
    /* a state of the client's own making, and MRTR fields on another method */
    r = cJSON_Parse("{\"name\":\"ask\",\"arguments\":{\"q\":1},\"requestState\":\"upstream-state\",\"inputResponses\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), -1);
    cJSON_Delete(r);
    struct tg_mcp_mrtr_call c;
    r = cJSON_Parse("{\"requestState\":\"x\"}");
    bind(&c, "alice", "tools/list", r, 0);
    char why[200];
    assert_int_equal(tg_mcp_mrtr_retry(&t, r, &c, NOW, NULL, 0, why, sizeof(why)), -1);
    cJSON_Delete(r);
    /* none of the refusals used the envelope up: the real retry still opens */
    r = retry_of(P, res, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), 1);
    cJSON_Delete(r);
    cJSON_Delete(res);
    cJSON_Delete(p);
    tg_mcp_mrtr_dispose(&t);
}

static void results_checked(void **state)
{
    (void)state;
    struct tg_mcp_mrtr t;
    tg_mcp_mrtr_init(&t, 2);
    cJSON *p = params_of(P);
    struct tg_mcp_mrtr_call c;
    char why[160];
    /* input the client did not declare */
    bind(&c, "alice", "tools/call", p, TG_CAP_ELICITATION);
    cJSON *res = cJSON_Parse("{\"resultType\":\"input_required\",\"inputRequests\":{\"s\":{\"method\":\"sampling/createMessage\"}}}");
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), -2); /* -32021 */
    assert_string_equal(why, "capability:sampling");
    cJSON_Delete(res);
    /* input on a method that takes none */
    bind(&c, "alice", "tools/list", p, TG_CAP_ELICITATION);
    res = cJSON_Parse(R);
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), -1);
    cJSON_Delete(res);
    /* an unknown result type */
    bind(&c, "alice", "tools/call", p, TG_CAP_ELICITATION);
    res = cJSON_Parse("{\"resultType\":\"surprise\"}");
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), -1);
    cJSON_Delete(res);
    /* no upstream state: the gateway mints one, and strips it on the retry */
    res = cJSON_Parse("{\"resultType\":\"input_required\",\"inputRequests\":{\"k1\":{\"method\":\"elicitation/create\"}}}");
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), 0);
    cJSON *r = retry_of(P, res, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), 1);
    assert_null(cJSON_GetObjectItem(r, "requestState"));
    cJSON_Delete(r);
    cJSON_Delete(res);
    /* beyond max, the oldest envelope is forgotten: it no longer opens */
    cJSON *a = sealed(&t, "alice", p, R), *b = sealed(&t, "alice", p, R), *d = sealed(&t, "alice", p, R);
    r = retry_of(P, a, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), -1);
    cJSON_Delete(r);
    r = retry_of(P, d, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), 1);
    cJSON_Delete(r);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(d);
    cJSON_Delete(p);
    tg_mcp_mrtr_dispose(&t);
}

/* A call bound without its digest keeps its arguments; the digest made from them when an answer
 * asks for input is the one an eager bind makes, and without them nothing is sealed. */
static void digest_made_late(void **state)
{
    (void)state;
    struct tg_mcp_mrtr t;
    tg_mcp_mrtr_init(&t, 16);
    char why[160];
    struct tg_mcp_mrtr_call c, eager;
    /* neither digest nor arguments: no envelope (fail closed) */
    cJSON *p = params_of(P);
    memset(&c, 0, sizeof(c));
    tg_mcp_mrtr_bind_later(&c, "alice", "up", "tools/call", p);
    c.client_caps = TG_CAP_ELICITATION;
    assert_int_equal(tg_mcp_mrtr_digest(&c), -1);
    cJSON *res = cJSON_Parse(R);
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), -1);
    assert_string_equal(cJSON_GetObjectItem(res, "requestState")->valuestring, "upstream-state");
    cJSON_Delete(res);
    res = cJSON_Parse("{}");
    assert_int_equal(tg_mcp_mrtr_seal_parked(&t, res, &c, NOW, "7"), -1);
    cJSON_Delete(res);
    /* kept: detached from the request, digested when the answer asks for input */
    tg_mcp_mrtr_keep_args(&c, p);
    assert_null(cJSON_GetObjectItem(p, "arguments"));
    assert_non_null(c.args);
    res = cJSON_Parse(R);
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), 0);
    assert_null(c.args); /* the digest is made: the arguments are let go */
    cJSON *q = params_of(P);
    bind(&eager, "alice", "tools/call", q, TG_CAP_ELICITATION);
    assert_memory_equal(c.b.args_sha256, eager.b.args_sha256, 32);
    cJSON *r = retry_of("{\"name\":\"ask\",\"arguments\":{\"q\":2}}", res, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), -1); /* other arguments */
    cJSON_Delete(r);
    r = retry_of(P, res, "{\"k1\":{}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), 1);
    cJSON_Delete(r);
    cJSON_Delete(res);
    tg_mcp_mrtr_call_dispose(&c);
    /* a digest made already: the request keeps its arguments */
    tg_mcp_mrtr_keep_args(&eager, q);
    assert_non_null(cJSON_GetObjectItem(q, "arguments"));
    assert_null(eager.args);
    cJSON_Delete(q);
    cJSON_Delete(p);
    /* no arguments at all: digested as null, either way */
    p = params_of("{\"name\":\"ask\"}");
    memset(&c, 0, sizeof(c));
    tg_mcp_mrtr_bind_later(&c, "alice", "up", "tools/call", p);
    tg_mcp_mrtr_keep_args(&c, p);
    assert_int_equal(tg_mcp_mrtr_digest(&c), 0);
    bind(&eager, "alice", "tools/call", p, 0);
    assert_memory_equal(c.b.args_sha256, eager.b.args_sha256, 32);
    cJSON_Delete(p);
    p = params_of("{\"name\":\"ask\",\"arguments\":null}");
    bind(&eager, "alice", "tools/call", p, 0);
    assert_memory_equal(c.b.args_sha256, eager.b.args_sha256, 32);
    cJSON_Delete(p);
    /* kept arguments never digested go with the call */
    p = params_of(P);
    memset(&c, 0, sizeof(c));
    tg_mcp_mrtr_bind_later(&c, "alice", "up", "tools/call", p);
    tg_mcp_mrtr_keep_args(&c, p);
    tg_mcp_mrtr_call_dispose(&c);
    assert_null(c.args);
    cJSON_Delete(p);
    tg_mcp_mrtr_dispose(&t);
}

/* Pinned roots: a roots/list input request leaves the result (the client never sees it, even one
 * that declared roots), and the retry carries the pinned roots for its key, whatever the client
 * sends; a client that answers that key itself is refused. */
static void pinned_roots_answered_at_retry(void **state)
{
    (void)state;
    static const char *ROOTS = "{\"roots\":[{\"uri\":\"file:///srv/a\"}]}";
    static const char *RR = "{\"resultType\":\"input_required\",\"inputRequests\":{\"r\":{\"method\":\"roots/list\"},"
                            "\"k1\":{\"method\":\"elicitation/create\",\"params\":{}}}}";
    struct tg_mcp_mrtr t;
    tg_mcp_mrtr_init(&t, 16);
    cJSON *p = params_of(P);
    struct tg_mcp_mrtr_call c;
    bind(&c, "alice", "tools/call", p, TG_CAP_ELICITATION | TG_CAP_ROOTS);
    c.pinned_roots = ROOTS;
    cJSON *res = cJSON_Parse(RR);
    char why[200];
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), 0);
    cJSON *reqs = cJSON_GetObjectItem(res, "inputRequests");
    assert_null(cJSON_GetObjectItem(reqs, "r"));
    assert_non_null(cJSON_GetObjectItem(reqs, "k1"));
    /* The client answers what it was asked; the gateway adds the roots. */
    cJSON *r = retry_of(P, res, "{\"k1\":{\"action\":\"accept\"}}");
    struct tg_mcp_mrtr_call rc;
    memset(&rc, 0, sizeof(rc));
    tg_mcp_mrtr_bind_later(&rc, "alice", "up", "tools/call", r);
    rc.client_caps = TG_CAP_ELICITATION;
    rc.pinned_roots = ROOTS;
    assert_int_equal(tg_mcp_mrtr_retry(&t, r, &rc, NOW + 1, NULL, 0, why, sizeof(why)), 1);
    char *got = cJSON_PrintUnformatted(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "inputResponses"), "r"));
    assert_string_equal(got, ROOTS);
    free(got);
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "inputResponses"), "k1"));
    cJSON_Delete(r);
    tg_mcp_mrtr_call_dispose(&rc);
    cJSON_Delete(res);
    /* A client that answers the pinned key (with its own roots) is refused. */
    res = cJSON_Parse(RR);
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), 0);
    r = retry_of(P, res, "{\"k1\":{},\"r\":{\"roots\":[{\"uri\":\"file:///\"}]}}");
    assert_int_equal(try_retry(&t, "alice", r, NOW + 1), -1);
    cJSON_Delete(r);
    cJSON_Delete(res);
    /* Only roots asked: no inputRequests left, the state alone makes the retry (minted here). */
    res = cJSON_Parse("{\"resultType\":\"input_required\",\"inputRequests\":{\"r\":{\"method\":\"roots/list\"}}}");
    c.client_caps = 0; /* pinned roots need no client capability */
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), 0);
    assert_null(cJSON_GetObjectItem(res, "inputRequests"));
    assert_true(cJSON_IsString(cJSON_GetObjectItem(res, "requestState")));
    r = params_of(P);
    cJSON_AddStringToObject(r, "requestState", cJSON_GetObjectItem(res, "requestState")->valuestring);
    memset(&rc, 0, sizeof(rc));
    tg_mcp_mrtr_bind_later(&rc, "alice", "up", "tools/call", r);
    rc.pinned_roots = NULL; /* unpinned since: nothing, not the client's */
    assert_int_equal(tg_mcp_mrtr_retry(&t, r, &rc, NOW + 1, NULL, 0, why, sizeof(why)), 1);
    got = cJSON_PrintUnformatted(cJSON_GetObjectItem(r, "inputResponses"));
    assert_string_equal(got, "{\"r\":{\"roots\":[]}}");
    assert_null(cJSON_GetObjectItem(r, "requestState")); /* minted: the upstream never had one */
    free(got);
    cJSON_Delete(r);
    tg_mcp_mrtr_call_dispose(&rc);
    cJSON_Delete(res);
    /* Each roots/list asked is a copy of the pinned roots in the retry: at most 8 of them. */
    for (int n = 8; n <= 9; n++) {
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_appends(&b, "{\"resultType\":\"input_required\",\"inputRequests\":{");
        for (int i = 0; i < n; i++)
            tg_buf_appendf(&b, "%s\"r%d\":{\"method\":\"roots/list\"}", i ? "," : "", i);
        tg_buf_appends(&b, "}}");
        tg_buf_append(&b, "", 1);
        res = cJSON_Parse(b.base);
        assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), n <= 8 ? 0 : -1);
        cJSON_Delete(res);
        tg_buf_dispose(&b);
    }
    /* A key of the upstream's that looks like the gateway's mark is refused, not taken for one. */
    res = cJSON_Parse("{\"resultType\":\"input_required\",\"inputRequests\":{\"\\u0001r\":{\"method\":\"roots/list\"}}}");
    assert_int_equal(tg_mcp_mrtr_result(&t, res, &c, NOW, why, sizeof(why)), -1);
    cJSON_Delete(res);
    tg_mcp_mrtr_call_dispose(&c);
    cJSON_Delete(p);
    tg_mcp_mrtr_dispose(&t);
}

/* clientCapabilities: the input kinds, and the tasks extension only as an object under extensions. */
static void client_caps_read(void **state)
{
    (void)state;
    static const struct {
        const char *caps;
        unsigned want;
    } cases[] = {
        {"{}", 0},
        {"{\"elicitation\":{},\"roots\":{}}", TG_CAP_ELICITATION | TG_CAP_ROOTS},
        {"{\"extensions\":{\"io.modelcontextprotocol/tasks\":{}}}", TG_CAP_TASKS},
        {"{\"extensions\":{\"io.modelcontextprotocol/tasks\":true}}", 0},
        {"{\"tasks\":{}}", 0}, /* the 2025 capability is not the extension */
        {"{\"extensions\":{\"io.modelcontextprotocol/Tasks\":{}}}", 0},
        {"{\"sampling\":{},\"extensions\":{\"x/y\":{},\"io.modelcontextprotocol/tasks\":{\"a\":1}}}",
         TG_CAP_SAMPLING | TG_CAP_TASKS},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cJSON *c = cJSON_Parse(cases[i].caps);
        assert_int_equal(tg_mcp_client_caps(c), cases[i].want);
        cJSON_Delete(c);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(seal_and_open_once),
        cmocka_unit_test(retries_refused),
        cmocka_unit_test(results_checked),
        cmocka_unit_test(digest_made_late),
        cmocka_unit_test(pinned_roots_answered_at_retry),
        cmocka_unit_test(client_caps_read),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
