/* The upstream half of a call through the callbacks a kind reports by (upstream/upstream.h):
 * the kinds table (upstream/kinds.c), a fake kind driving the call's callbacks as a real one
 * does (message, stream, settle, done with every outcome, 202/404/405 mapped by the call), and
 * the link half the message-stream kinds share (upstream/link.c) under the fake link kind.
 *
 * The fake kind and sink are test/unit/core/middle.h's. What is checked is what the client and
 * the operator see: the sink's operations, statuses and bytes, the audit line, the refunds, the
 * session's end; and that the kind's slot in the call is empty once the kind reported done. */
#include "test/unit/core/middle.h"

/* A tools/call of tool with the client's id (raw JSON): the call the fake kind got. */
static struct tg_call *call_tool_id(struct mw *m, struct tg_session *s, struct rec *r, const char *id, const char *tool)
{
    char body[256];
    int before = fake.nsend;
    mw_send(m, s, fsink_new(r, 0), mw_call(body, sizeof(body), id, tool));
    assert_int_equal(fake.nsend, before + 1);
    assert_non_null(fake.ev);
    return fake.last;
}

static struct tg_call *call_tool(struct mw *m, struct tg_session *s, struct rec *r, const char *tool)
{
    return call_tool_id(m, s, r, "7", tool);
}

/* ---- the kinds table -------------------------------------------------------------------- */

static void kinds_by_transport(void **state)
{
    static const struct {
        int transport;
        const char *name;
        unsigned flags;
    } cases[] = {
        {TG_UP_STREAMABLE, "streamable-http", 0},
        {TG_UP_SSE, "sse", TG_UPOPS_SESSION_LINK},
        {TG_UP_STDIO, "stdio", TG_UPOPS_SESSION_LINK},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tg_upstream_conf uc;
        memset(&uc, 0, sizeof(uc));
        uc.transport = cases[i].transport;
        const struct tg_upstream_ops *ops = tg_upstream_kind_for(&uc);
        assert_non_null(ops);
        assert_string_equal(ops->name, cases[i].name);
        assert_int_equal(ops->flags, cases[i].flags);
        assert_non_null(ops->send);
        assert_non_null(ops->sent);
        assert_non_null(ops->cancel);
        assert_non_null(ops->pause);
        assert_non_null(ops->touch);
        assert_non_null(ops->reply);
        assert_non_null(ops->close);
    }
}

/* ---- done: every outcome, settled and told ---------------------------------------------- */

static void done_with_each_outcome(void **state)
{
    static const struct {
        enum tg_outcome o;
        const char *why;   /* what the kind tells (NULL: nothing) */
        const char *audit; /* the settlement's audit line */
        int refunded;
        const char *trace; /* what the client's sink saw */
        int status;
    } cases[] = {
        {TG_OUT_OK, NULL, "allow/ok", 0, "bind end release", 0},
        {TG_OUT_ERROR, NULL, "allow/error", 1, "bind end release", 0},
        {TG_OUT_GARBLED, "upstream sent an invalid response", "allow/error", 0, "bind answer end release", 200},
        {TG_OUT_NOT_SENT, "upstream main is unavailable", "allow/unavailable", 1, "bind answer end release", 200},
        {TG_OUT_NOT_SENT_TIMEOUT, "upstream main timed out", "allow/timeout", 1, "bind answer end release", 200},
        {TG_OUT_REFUSED, "upstream main answered HTTP 400", "allow/unavailable", 1, "bind answer end release", 200},
        {TG_OUT_TIMEOUT, "upstream main timed out", "allow/timeout", 0, "bind answer end release", 200},
        {TG_OUT_UNAVAILABLE, "upstream main is unavailable", "allow/unavailable", 0, "bind answer end release", 200},
        {TG_OUT_SESSION_GONE, NULL, "allow/unavailable", 1, "bind answer end release", 404},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mw *m = mw_new(FAKE_HTTP);
        struct tg_session *s = tg_session_ref(mw_session(m, 0)); /* read after a 404 ended it */
        struct rec r;
        rec_init(&r);
        struct tg_call *k = call_tool(m, s, &r, "once");
        assert_ptr_equal(k->upcall, FAKE_UPREQ); /* the kind's slot holds its state */
        assert_int_equal(tg_call_running(k), 1);
        fake_take(k);
        fake.ev->done(k, cases[i].o, cases[i].why, 2.5);
        assert_int_equal(k->closed, 1);
        assert_null(k->upcall);
        assert_string_equal(r.trace.base, cases[i].trace);
        assert_int_equal(r.status, cases[i].status);
        assert_string_equal(mw_audit(m), cases[i].audit);
        assert_int_equal(m->srv.metrics.refunds, cases[i].refunded);
        if (cases[i].why != NULL) {
            cJSON *data;
            cJSON *e = REC_ERROR(&r, "7", TG_RPC_UPSTREAM, &data);
            assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"), cases[i].why);
            assert_string_equal(json_str(data, "upstream"), "main");
            cJSON_Delete(e);
        }
        if (cases[i].o == TG_OUT_SESSION_GONE) {
            /* 404 maps to the session's end: here too, and the client is told as the spec says. */
            assert_int_equal(s->live, 0);
            assert_non_null(strstr(r.answer.base, "\"Session not found\""));
        } else {
            assert_int_equal(s->live, 1);
        }
        tg_session_unref(s);
        rec_dispose(&r);
        mw_free(m);
    }
}

/* settle before done: the audit line is written once, with the settlement's outcome, after what
 * done tells the client (the line is held, not on the answer's way); done's outcome only says
 * what the client gets. */
static void settle_then_done_settles_once(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, "once");
    fake_take(k);
    fake.ev->settle(k, TG_OUT_OK, 1);
    assert_string_equal(mw_audit(m), "");
    fake.ev->done(k, TG_OUT_UNAVAILABLE, "upstream main is unavailable", 1);
    assert_string_equal(mw_audit(m), "allow/ok");
    assert_int_equal(m->srv.metrics.refunds, 0);
    assert_string_equal(r.trace.base, "bind answer end release");
    rec_dispose(&r);
    mw_free(m);
}

/* 202: a notification the upstream took. */
static void accepted_is_202(void **state)
{
    for (int link = 0; link < 2; link++) {
        struct mw *m = mw_new(link ? FAKE_LINK : FAKE_HTTP);
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, 0), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}");
        assert_int_equal(fake.nsend, 1);
        if (!link) { /* the link half reports it as soon as it is written */
            assert_string_equal(r.trace.base, "bind");
            fake_take(fake.last);
            fake.ev->done(fake.last, TG_OUT_ACCEPTED, NULL, 1);
        }
        assert_string_equal(r.trace.base, "bind bare end release");
        assert_int_equal(r.status, 202);
        assert_int_equal(r.answer.len, 0);
        assert_string_equal(mw_audit(m), "");
        rec_dispose(&r);
        mw_free(m);
    }
}

/* 404 to a 2026 client's call: it has no session to lose, it is told to send again; to a
 * notification: a bare 404. */
static void session_gone_by_era_and_kind(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = tg_session_ref(mw_session(m, 0)); /* read after it ended */
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, "echo");
    k->era = TG_ERA_2026;
    fake_take(k);
    fake.ev->settle(k, TG_OUT_REFUSED, 1);
    fake.ev->done(k, TG_OUT_SESSION_GONE, NULL, 1);
    assert_int_equal(s->live, 0);
    cJSON *e = REC_ERROR(&r, "7", TG_RPC_UPSTREAM, NULL);
    assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                        "the upstream ended the gateway's session; send the request again");
    cJSON_Delete(e);
    tg_session_unref(s);
    rec_dispose(&r);
    mw_free(m);

    m = mw_new(FAKE_HTTP);
    s = tg_session_ref(mw_session(m, 0));
    rec_init(&r);
    mw_send(m, s, fsink_new(&r, 0), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}");
    fake_take(fake.last);
    fake.ev->done(fake.last, TG_OUT_SESSION_GONE, NULL, 1);
    assert_string_equal(r.trace.base, "bind bare end release");
    assert_int_equal(r.status, 404);
    assert_int_equal(s->live, 0);
    tg_session_unref(s);
    rec_dispose(&r);
    mw_free(m);
}

/* 405: the upstream has no stream of its own messages; the client's GET is told so. */
static void no_stream_is_405(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_exchange x;
    mw_exchange(m, s, &x);
    assert_int_equal(tg_dispatch_listen(&x, fsink_new(&r, 0), 0), 0);
    assert_string_equal(fake.sent.base, "(stream)\n");
    struct tg_call *k = fake.last;
    assert_ptr_equal(s->get_stream, k);
    assert_string_equal(r.trace.base, "bind stream"); /* the fake reported stream() at once */
    fake_take(k);
    fake.ev->done(k, TG_OUT_NO_STREAM, NULL, 1);
    assert_string_equal(r.trace.base, "bind stream bare end release");
    assert_int_equal(r.status, 405);
    assert_string_equal(r.extra, "Allow: POST, DELETE\r\n");
    assert_null(s->get_stream);
    assert_int_equal(s->live, 1);
    rec_dispose(&r);
    mw_free(m);
}

/* ---- messages on an answer stream ------------------------------------------------------- */

static void message_reports_what_it_was(void **state)
{
    for (int err = 0; err < 2; err++) {
        struct mw *m = mw_new(FAKE_HTTP);
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        struct tg_call *k = call_tool(m, s, &r, "echo");
        fake.ev->stream(k);
        const char *prog = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1}}";
        r.high = 1;
        assert_int_equal(fake.ev->message(k, prog, strlen(prog)), TG_UPMSG_RELAYED);
        assert_int_equal(fake.ev->message(k, "nope", 4), 0);
        /* The kind calls backpressure once after a read: message() neither touches nor pauses. */
        assert_int_equal(fake.ntouch, 0);
        assert_int_equal(fake.npause, 0);
        fake.ev->backpressure(k);
        assert_int_equal(fake.ntouch, 1);
        assert_int_equal(fake.npause, 1);
        assert_int_equal(fake.ev->behind(k), 1);
        r.high = 0;
        assert_int_equal(fake.ev->behind(k), 0);
        assert_int_equal(fake.ev->listening(k), 1);
        const char *ans = err ? "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32000,\"message\":\"no\"}}"
                              : "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"v\":2}}";
        assert_int_equal(fake.ev->message(k, ans, strlen(ans)), err ? TG_UPMSG_ANSWER_ERROR : TG_UPMSG_ANSWER);
        fake_take(k);
        fake.ev->done(k, err ? TG_OUT_ERROR : TG_OUT_OK, NULL, 1);
        assert_string_equal(r.trace.base, "bind stream message answer end release");
        assert_string_equal(mw_audit(m), err ? "allow/error" : "allow/ok");
        rec_dispose(&r);
        mw_free(m);
    }
}

/* answer(): the call's answer with the status the kind gives it (a 2026 upstream's 4xx error). */
static void answer_with_status(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, "echo");
    fake_take(k);
    const char *other = "{\"jsonrpc\":\"2.0\",\"id\":99,\"result\":{}}";
    assert_int_equal(fake.ev->answer(k, other, strlen(other), NULL, NULL, 400), 0);
    assert_int_equal(r.nanswer, 0);
    const char *e = "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32601,\"message\":\"no\"}}";
    assert_int_equal(fake.ev->answer(k, e, strlen(e), NULL, NULL, 404), 1);
    assert_int_equal(r.status, 404);
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":7,\"error\":{\"code\":-32601,\"message\":\"no\"}}");
    fake.ev->done(k, TG_OUT_REFUSED, NULL, 1);
    assert_string_equal(r.trace.base, "bind answer end release");
    rec_dispose(&r);
    mw_free(m);
}

/* ---- the link half ------------------------------------------------------------------------ */

static void link_answer_matched_by_id(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, "once");
    assert_non_null(s->uplink);
    assert_non_null(k->upcall); /* its wait on the link */
    assert_int_equal(k->awaiting, 1);
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{}}"); /* nobody's */
    assert_string_equal(r.trace.base, "bind");
    char ans[96];
    snprintf(ans, sizeof(ans), "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"result\":{\"ok\":1}}", (unsigned long long)k->gid);
    fake_link(m, s, ans);
    assert_string_equal(r.trace.base, "bind answer end release");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"ok\":1}}");
    assert_null(k->upcall);
    assert_int_equal(k->awaiting, 0);
    assert_string_equal(mw_audit(m), "allow/ok");
    rec_dispose(&r);
    mw_free(m);
}

static void link_oversized_and_failed(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r1, r2;
    rec_init(&r1);
    rec_init(&r2);
    struct tg_call *k1 = call_tool(m, s, &r1, "once");
    struct tg_call *k2 = call_tool_id(m, s, &r2, "8", "echo");
    /* The answer to k1 was too long: k1 ends garbled (it ran: its reservation stands). */
    tg_link_oversized(s->uplink, tg_slice_of(k1->gid_str, k1->gid_len));
    assert_string_equal(r1.trace.base, "bind answer end release");
    assert_non_null(strstr(r1.answer.base, "upstream answer exceeds limits.response_bytes"));
    assert_string_equal(mw_audit(m), "allow/error");
    assert_int_equal(m->srv.metrics.refunds, 0);
    assert_string_equal(r2.trace.base, "bind");
    /* The POST that carried k2 was refused: k2 ends with that outcome. */
    tg_link_failed(s->uplink, k1->gid, TG_OUT_REFUSED, "gone already"); /* k1's wait is over: nothing */
    assert_string_equal(r2.trace.base, "bind");
    tg_link_failed(s->uplink, k2->gid, TG_OUT_REFUSED, "upstream main answered HTTP 400");
    assert_string_equal(r2.trace.base, "bind answer end release");
    assert_non_null(strstr(r2.answer.base, "upstream main answered HTTP 400"));
    assert_string_equal(mw_audit(m), "allow/unavailable");
    assert_int_equal(s->live, 1);
    rec_dispose(&r1);
    rec_dispose(&r2);
    mw_free(m);
}

/* A send the link cannot write is done before send returns: never sent, given back. */
static void link_send_fails_not_sent(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    fake.fail_send = 1;
    struct tg_call *k = call_tool(m, s, &r, "once");
    assert_int_equal(k->closed, 1);
    assert_null(k->upcall);
    assert_string_equal(r.trace.base, "bind answer end release");
    assert_non_null(strstr(r.answer.base, "upstream main could not be started or has gone"));
    assert_string_equal(mw_audit(m), "allow/unavailable");
    assert_int_equal(m->srv.metrics.refunds, 1);
    rec_dispose(&r);
    mw_free(m);
}

/* The link dies while an initialize waits on it: that initialize fails, which takes its new
 * session away, and the session its link; the link half must not touch the link after. */
static void link_gone_during_initialize(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = tg_session_ref(mw_session(m, 0));
    s->initialized = 0;
    s->proto = "";
    struct rec r1, r2;
    rec_init(&r1);
    rec_init(&r2);
    mw_send(m, s, fsink_new(&r1, TG_SINK_NEW_SESSION),
            "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-03-26\","
            "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}");
    struct tg_call *k = fake.last;
    assert_int_equal(k->is_init, 1);
    assert_int_equal(k->awaiting, 1);
    call_tool_id(m, s, &r2, "8", "echo");
    tg_link_gone(s->uplink, "the upstream's event stream ended");
    assert_int_equal(s->live, 0);
    assert_null(s->uplink);
    assert_string_equal(r1.trace.base, "bind answer end release");
    assert_string_equal(r2.trace.base, "bind answer end release");
    assert_non_null(strstr(r2.answer.base, "the upstream's event stream ended"));
    tg_session_unref(s);
    rec_dispose(&r1);
    rec_dispose(&r2);
    mw_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kinds_by_transport),
        cmocka_unit_test(done_with_each_outcome),
        cmocka_unit_test(settle_then_done_settles_once),
        cmocka_unit_test(accepted_is_202),
        cmocka_unit_test(session_gone_by_era_and_kind),
        cmocka_unit_test(no_stream_is_405),
        cmocka_unit_test(message_reports_what_it_was),
        cmocka_unit_test(answer_with_status),
        cmocka_unit_test(link_answer_matched_by_id),
        cmocka_unit_test(link_oversized_and_failed),
        cmocka_unit_test(link_send_fails_not_sent),
        cmocka_unit_test(link_gone_during_initialize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
