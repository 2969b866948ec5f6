/* transports/batch.c: a batch answering on a long-lived sink (a channel), here the recording fake
 * sink of test/unit/core/middle.h, so every operation the channel sees is checked in order. One
 * message alone goes out answer by answer; an array's answers are gathered into one JSON array
 * sent when the last element is done; answers past limits.response_bytes or
 * limits.output_total_bytes become error objects the client can act on; tg_batch_run refuses
 * malformed elements and initialize with error objects and dispatches the rest, each element
 * deciding on its own (an element of an array cannot wait for a human). */
#include "test/unit/core/middle.h"

#include "transports/batch.h"

#define ANSWER(id) "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"result\":{}}"
#define CALL(id, tool)                                                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"tools/call\",\"params\":{\"name\":\"" tool "\","            \
    "\"arguments\":{\"x\":1}}}"
#define INITIALIZED "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"

/* The recorded messages, one a line. */
static const char *messages(struct rec *r) { return r->messages.base ? r->messages.base : ""; }
/* The recorded operations, space-separated. */
static const char *trace(struct rec *r) { return r->trace.base ? r->trace.base : ""; }

/* One message alone (single): each answer goes out at once, then the channel is released. */
static void single_goes_out_at_once(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct rec r;
    rec_init(&r);
    struct tg_batch *b = tg_batch_new(&m->srv, NULL, fsink_new(&r, 0), 1);
    assert_int_equal(b->sink.flags, 0); /* one message may wait for a human */
    tg_batch_add(b, ANSWER("1"), strlen(ANSWER("1")));
    assert_string_equal(messages(&r), ANSWER("1") "\n");
    tg_batch_add_error(b, "\"x\"", 3, TG_RPC_INVALID_REQUEST, "Invalid Request: no", NULL);
    assert_string_equal(messages(&r), ANSWER("1") "\n"
                                      "{\"jsonrpc\":\"2.0\",\"id\":\"x\",\"error\":{\"code\":-32600,\"message\":"
                                      "\"Invalid Request: no\"}}\n");
    assert_int_equal(m->srv.metrics.output_buffered, 0);
    tg_batch_done(b);
    assert_string_equal(trace(&r), "message message release");
    rec_dispose(&r);
    mw_free(m);
}

/* An array: nothing goes out until the last count is dropped, then one "[a,b]" message. */
static void array_gathers(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct rec r;
    rec_init(&r);
    struct tg_batch *b = tg_batch_new(&m->srv, NULL, fsink_new(&r, 0), 0);
    assert_int_equal(b->sink.flags, TG_SINK_NO_WAIT);
    struct tg_sink *e1 = tg_batch_element(b);
    struct tg_sink *e2 = tg_batch_element(b);
    assert_ptr_equal(e1, &b->sink);
    assert_ptr_equal(e2, &b->sink);
    tg_batch_add_error(b, NULL, 0, TG_RPC_PARSE_ERROR, "Parse error: x", NULL);
    tg_batch_done(b); /* the dispatch loop's count */
    /* A server message on the way goes straight to the channel; an answer is gathered. */
    e1->ops->message(e1, NULL, INITIALIZED, strlen(INITIALIZED));
    e1->ops->answer(e1, NULL, 200, NULL, ANSWER("1"), strlen(ANSWER("1")));
    e1->ops->release(e1, NULL);
    assert_string_equal(trace(&r), "message");
    size_t held = m->srv.metrics.output_buffered;
    assert_true(held > strlen(ANSWER("1")));
    /* A bare status (202 of a notification) adds nothing. */
    e2->ops->bare(e2, NULL, 202, NULL, NULL, 0);
    e2->ops->answer(e2, NULL, 202, NULL, NULL, 0);
    e2->ops->end(e2, NULL);
    assert_int_equal(m->srv.metrics.output_buffered, held);
    e2->ops->release(e2, NULL);
    assert_string_equal(trace(&r), "message message release");
    assert_string_equal(messages(&r), INITIALIZED "\n"
                                      "[{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":"
                                      "\"Parse error: x\"}}," ANSWER("1") "]\n");
    assert_int_equal(m->srv.metrics.output_buffered, 0);
    rec_dispose(&r);
    mw_free(m);
}

/* An array of notifications only: no message, the channel is released. */
static void array_of_nothing(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct rec r;
    rec_init(&r);
    struct tg_batch *b = tg_batch_new(&m->srv, NULL, fsink_new(&r, 0), 0);
    struct tg_sink *e = tg_batch_element(b);
    e->ops->answer(e, NULL, 202, NULL, NULL, 0);
    e->ops->release(e, NULL);
    assert_string_equal(trace(&r), "");
    tg_batch_done(b);
    assert_string_equal(trace(&r), "release");
    rec_dispose(&r);
    mw_free(m);
}

/* The batch's sink is behind when its channel is; listening always (the batch gathers). */
static void high_follows_the_channel(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct rec r;
    rec_init(&r);
    struct tg_batch *b = tg_batch_new(&m->srv, NULL, fsink_new(&r, 0), 0);
    assert_int_equal(b->sink.ops->high(&b->sink), 0);
    r.high = 1;
    assert_int_equal(b->sink.ops->high(&b->sink), 1);
    assert_int_equal(b->sink.ops->listening(&b->sink), 1);
    tg_batch_done(b);
    rec_dispose(&r);
    mw_free(m);
}

/* Answers past limits.response_bytes (the whole array) are replaced by -32004 with their own id;
 * past limits.output_total_bytes (all the process holds for clients) too. */
static void limits_replace_answers(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_limits *lim = &m->srv.conf->limits;
    const char *big = "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"text\":\"0123456789012345678901234567890123456789\"}}";
    const char *bad = "{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-32004,\"message\":\"the batch's answers "
                      "exceed limits.response_bytes or limits.output_total_bytes: send fewer at once\"}}";
    for (int which = 0; which < 2; which++) {
        struct rec r;
        rec_init(&r);
        int saved_resp = lim->response_bytes;
        int saved_total = lim->output_total_bytes;
        if (which == 0) {
            lim->response_bytes = (int)(strlen(ANSWER("1")) + strlen(big)); /* one byte short with "[" and "," */
        } else {
            lim->output_total_bytes = 1000;
            m->srv.metrics.output_buffered = 1000 - strlen(ANSWER("1")) - strlen(big); /* other clients' */
        }
        size_t others = m->srv.metrics.output_buffered;
        struct tg_batch *b = tg_batch_new(&m->srv, NULL, fsink_new(&r, 0), 0);
        tg_batch_add(b, ANSWER("1"), strlen(ANSWER("1")));
        tg_batch_add(b, big, strlen(big));
        assert_int_equal(m->srv.metrics.limit_output, (uint64_t)which + 1);
        tg_batch_done(b);
        struct tg_buf want;
        tg_buf_init(&want);
        tg_buf_appendf(&want, "[%s,%s]\n", ANSWER("1"), bad);
        assert_string_equal(messages(&r), want.base);
        assert_int_equal(m->srv.metrics.output_buffered, others);
        tg_buf_dispose(&want);
        lim->response_bytes = saved_resp;
        lim->output_total_bytes = saved_total;
        m->srv.metrics.output_buffered = 0;
        rec_dispose(&r);
    }
    /* One byte more of room and the answer fits. */
    struct rec r;
    rec_init(&r);
    lim->response_bytes = (int)(strlen(ANSWER("1")) + strlen(big) + 2);
    struct tg_batch *b = tg_batch_new(&m->srv, NULL, fsink_new(&r, 0), 0);
    tg_batch_add(b, ANSWER("1"), strlen(ANSWER("1")));
    tg_batch_add(b, big, strlen(big));
    tg_batch_done(b);
    assert_int_equal(m->srv.metrics.limit_output, 2);
    assert_non_null(strstr(messages(&r), "0123456789\"}}]"));
    rec_dispose(&r);
    mw_free(m);
}

/* tg_batch_run: every element through the strict decoder; initialize is refused; the others
 * are dispatched through the batch, an approval in an array answered at once (it cannot wait). */
static void run_elements(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 1); /* side: no call timeout */
    struct tg_exchange x;
    mw_exchange(m, s, &x);
    struct rec r;
    rec_init(&r);
    m->srv.next_gid = 49;
    const char *body = "[" CALL("1", "echo") ",{\"jsonrpc\":\"2.0\",\"id\":\"i\",\"method\":\"initialize\","
                       "\"params\":{}},7,{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":5}," CALL("4", "review") "]";
    struct tg_json_doc doc;
    assert_int_equal(tg_json_parse(body, strlen(body), 64, 1, &doc, NULL, NULL), 0);
    struct tg_batch *b = tg_batch_new(&m->srv, NULL, fsink_new(&r, 0), 0);
    tg_batch_run(b, &x, doc.root, 64);
    cJSON_Delete(doc.root);
    tg_batch_done(b);
    assert_int_equal(fake.nsend, 1);
    assert_string_equal(fake.last_body.base, CALL("50", "echo"));
    assert_int_equal(b->pending, 1); /* echo is in flight */
    assert_string_equal(trace(&r), "");
    assert_int_equal(m->srv.napprovals, 0);
    fake_answer(fake.last, ANSWER("50"));
    assert_string_equal(trace(&r), "message release");
    const char *got = messages(&r);
    assert_non_null(strstr(got, "{\"jsonrpc\":\"2.0\",\"id\":\"i\",\"error\":{\"code\":-32600,\"message\":"
                                "\"Invalid Request: initialize cannot be batched\"}}"));
    assert_non_null(strstr(got, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":"
                                "\"Invalid Request: a JSON-RPC message must be an object\"}}"));
    assert_non_null(strstr(got, "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32600,"));
    assert_non_null(strstr(got, "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32003,"));
    assert_true(strstr(got, ANSWER("1") "]\n") != NULL); /* echo's answer came last */
    assert_int_equal(got[0], '[');
    rec_dispose(&r);
    mw_free(m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(single_goes_out_at_once),
        cmocka_unit_test(array_gathers),
        cmocka_unit_test(array_of_nothing),
        cmocka_unit_test(high_follows_the_channel),
        cmocka_unit_test(limits_replace_answers),
        cmocka_unit_test(run_elements),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
