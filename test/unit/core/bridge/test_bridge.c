/* The bridge through its filter on the call (core/bridge/input.c, struct tg_call_filter): a call
 * made by the gate for a client of the other era carries the filter, and what the upstream sends
 * back is turned into what the client's era has. Each case runs the same traffic once more with
 * the filter taken off the call, and sees the call do what it does without a bridge: the
 * filter is what makes the difference. Scaffolding: test/unit/core/middle.h (fake upstream kind,
 * fake sink). */
#include "test/unit/core/middle.h"

#include "core/bridge/input.h"
#include "core/mcp/era.h"
#include "core/mcp/mrtr.h"

#define CALL "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"x\":1}}}"
#define ELICIT "{\"jsonrpc\":\"2.0\",\"id\":\"up-1\",\"method\":\"elicitation/create\",\"params\":{\"message\":\"sure?\"}}"
#define ASK "{\"resultType\":\"input_required\",\"inputRequests\":{\"k1\":{\"method\":\"elicitation/create\"," \
            "\"params\":{\"message\":\"sure?\"}}},\"requestState\":\"up-state\"}"

static struct mw *bridge_mw(void)
{
    struct mw *m = mw_new(FAKE_HTTP);
    tg_list_init(&m->srv.shims);
    tg_mcp_mrtr_init(&m->srv.mrtr, 16);
    return m;
}

static void bridge_mw_free(struct mw *m)
{
    tg_bridge_input_dispose(&m->srv);
    tg_mcp_mrtr_dispose(&m->srv.mrtr);
    mw_free(m);
}

static void as_2026(struct tg_exchange *x)
{
    x->era = TG_ERA_2026;
    x->client_caps = TG_CAP_ELICITATION;
    snprintf(x->proto, sizeof(x->proto), "2026-07-28");
}

static char *answer_for_gid(char *buf, size_t n, const char *result)
{
    snprintf(buf, n, "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"result\":%s}", (unsigned long long)fake_last_gid(), result);
    return buf;
}

/* A 2026 client's call on a 2025 upstream session meets a server request: through the filter,
 * the client gets input_required (the request its only input, with an envelope) and the call
 * stays open upstream; without it, the upstream's request is refused there. */
static void server_request_becomes_input_required(void **state)
{
    for (int filtered = 1; filtered >= 0; filtered--) {
        struct mw *m = bridge_mw();
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        mw_send_with(m, s, fsink_new(&r, TG_SINK_STATELESS), CALL, as_2026);
        struct tg_call *k = fake.last;
        assert_non_null(k);
        assert_non_null(k->filter); /* the gate put the bridge's filter on a call across the eras */
        if (!filtered)
            tg_call_filter_set(k, NULL, NULL);
        tg_call_upstream_message(k, ELICIT, strlen(ELICIT), NULL);
        if (filtered) {
            assert_int_equal(fake.nreply, 0);
            assert_int_equal(r.nanswer, 1);
            assert_int_equal(r.nrelease, 1);
            assert_int_equal(r.status, 200);
            cJSON *a = cJSON_Parse(r.answer.base);
            assert_non_null(a);
            assert_int_equal(cJSON_GetObjectItem(a, "id")->valueint, 5);
            cJSON *res = cJSON_GetObjectItem(a, "result");
            assert_string_equal(json_str(res, "resultType"), "input_required");
            cJSON *one = cJSON_GetObjectItem(cJSON_GetObjectItem(res, "inputRequests"), "input-1");
            assert_string_equal(json_str(one, "method"), "elicitation/create");
            assert_string_equal(json_str(cJSON_GetObjectItem(one, "params"), "message"), "sure?");
            assert_non_null(json_str(res, "requestState")); /* sealed: the retry names the held call */
            cJSON_Delete(a);
            assert_false(k->closed);
            assert_string_equal(k->input_req_id, "\"up-1\""); /* the retry's answer goes up with this id */
        } else {
            assert_int_equal(fake.nreply, 1); /* refused upstream: a 2026 stream carries no server request */
            assert_non_null(strstr(fake.replies.base, "\"up-1\""));
            assert_int_equal(r.nanswer, 0);
            assert_null(k->input_req_id);
        }
        fake_fail(k, TG_OUT_TIMEOUT, "upstream main timed out (test)");
        rec_dispose(&r);
        bridge_mw_free(m);
    }
}

/* A 2025 client's call on a 2026-07-28-only upstream is answered input_required: through the
 * filter, the client is asked with a real server request on its stream, its answer goes up in
 * the retry (with the upstream's requestState), and the retry's answer is the client's answer,
 * with its own id; without it, the client gets the 2026 result as it came. */
static void input_required_becomes_server_request(void **state)
{
    char buf[1024];
    for (int filtered = 1; filtered >= 0; filtered--) {
        struct mw *m = bridge_mw();
        struct tg_session *s = mw_session(m, 0);
        s->up_modern = 1; /* the gateway answered its initialize from the upstream's discover */
        s->u.client_caps = tg_xstrdup("{\"elicitation\":{}}");
        struct rec r;
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, 0), CALL);
        struct tg_call *k = fake.last;
        assert_non_null(k);
        assert_non_null(k->filter);
        assert_non_null(strstr(fake.last_body.base, "\"name\":\"echo\""));
        if (!filtered)
            tg_call_filter_set(k, NULL, NULL);
        fake_answer(k, answer_for_gid(buf, sizeof(buf), ASK));
        if (!filtered) {
            assert_int_equal(r.nmessage, 0);
            assert_int_equal(r.nanswer, 1);
            assert_non_null(strstr(r.answer.base, "input_required"));
            rec_dispose(&r);
            bridge_mw_free(m);
            continue;
        }
        /* The client was asked, and waits for the retry's answer. */
        assert_int_equal(r.nanswer, 0);
        assert_int_equal(r.nmessage, 1);
        cJSON *ask = cJSON_Parse(r.messages.base);
        assert_non_null(ask);
        assert_string_equal(json_str(ask, "method"), "elicitation/create");
        assert_string_equal(json_str(cJSON_GetObjectItem(ask, "params"), "message"), "sure?");
        const char *ask_id = json_str(ask, "id");
        assert_non_null(ask_id);
        assert_int_equal(strncmp(ask_id, "tollgate-input-", 15), 0);
        int sent = fake.nsend;
        struct rec r2;
        rec_init(&r2);
        snprintf(buf, sizeof(buf), "{\"jsonrpc\":\"2.0\",\"id\":\"%s\",\"result\":{\"action\":\"accept\"}}", ask_id);
        cJSON_Delete(ask);
        mw_send(m, s, fsink_new(&r2, 0), buf);
        assert_int_equal(r2.status, 202); /* the gateway's own request: taken here */
        assert_int_equal(fake.nsend, sent + 1); /* the retry */
        struct tg_call *retry = fake.last;
        assert_ptr_not_equal(retry, k);
        assert_non_null(retry->filter); /* a next round is carried the same way */
        cJSON *up = cJSON_Parse(fake.last_body.base);
        cJSON *params = cJSON_GetObjectItem(up, "params");
        assert_string_equal(json_str(params, "requestState"), "up-state");
        cJSON *given = cJSON_GetObjectItem(cJSON_GetObjectItem(params, "inputResponses"), "k1");
        assert_string_equal(json_str(given, "action"), "accept");
        cJSON_Delete(up);
        fake_answer(retry, answer_for_gid(buf, sizeof(buf), "{\"content\":[]}"));
        assert_int_equal(r.nanswer, 1);
        cJSON *a = cJSON_Parse(r.answer.base);
        assert_int_equal(cJSON_GetObjectItem(a, "id")->valueint, 5);
        assert_non_null(cJSON_GetObjectItem(a, "result"));
        cJSON_Delete(a);
        rec_dispose(&r2);
        rec_dispose(&r);
        bridge_mw_free(m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(server_request_becomes_input_required),
        cmocka_unit_test(input_required_becomes_server_request),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
