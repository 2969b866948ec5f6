/* core/call/call.c: the life of one call, from the moment dispatch made it to its settlement, with
 * a fake upstream kind and a fake sink (test/unit/core/middle.h) around the real middle.
 *
 * What is checked is what can be seen from outside: the sink's operations and bytes (the
 * client's id restored, -32004 with {"upstream":NAME}), the audit lines, metrics.refunds and
 * whether the counter's token came back (the next call is allowed or limited), the fake's
 * cancel and pause counts, and the call's own state (closed, queued in dead_calls, freed only
 * by tg_call_run_pending). Re-entry from inside a sink operation and a send that fails the
 * call before it returns must not crash, release twice or touch freed memory (ASan).
 *
 * The policy (middle.h): echo allowed, rm denied, once a bucket of 1, deploy approval and a
 * bucket of 1, everything else denied and hidden. */
#include "test/unit/core/middle.h"

/* Send a tools/call of tool with the client's id (raw JSON) on a new fake sink; returns the
 * call the fake upstream got (NULL if it was not sent). */
static struct tg_call *call_tool(struct mw *m, struct tg_session *s, struct rec *r, unsigned flags, const char *id,
                                 const char *tool)
{
    char body[256];
    int before = fake.nsend;
    mw_send(m, s, fsink_new(r, flags), mw_call(body, sizeof(body), id, tool));
    return fake.nsend > before ? fake.last : NULL;
}

static int in_dead_calls(struct mw *m, struct tg_call *k)
{
    for (struct tg_list *l = m->srv.dead_calls.next; l != &m->srv.dead_calls; l = l->next)
        if (tg_container_of(l, struct tg_call, dlink) == k)
            return 1;
    return 0;
}

/* Whether "once" is available again: a call is forwarded (then failed away, refunded) or
 * limited. Leaves no call open. */
static int once_available(struct mw *m, struct tg_session *s)
{
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "99", "once");
    int ok = k != NULL;
    if (k != NULL && fake.kind == FAKE_HTTP)
        fake_fail(k, TG_OUT_NOT_SENT, "probe over");
    else if (k != NULL)
        tg_call_fail(k, TG_OUT_NOT_SENT, "probe over", -1);
    assert_int_equal(r.nrelease, 1);
    rec_dispose(&r);
    return ok;
}

/* ---- an answer ------------------------------------------------------------------------- */

static void answer_restores_client_id(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "\"client-7\"", "echo");
    assert_non_null(k);
    assert_ptr_equal(r.k, k);
    assert_string_equal(fake.last_body.base, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                                             "{\"name\":\"echo\",\"arguments\":{\"x\":1}}}");
    assert_int_equal(s->inflight, 1);
    assert_string_equal(r.trace.base, "bind");
    assert_int_equal(tg_call_running(k), 1);

    fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}");
    assert_string_equal(r.trace.base, "bind answer end release");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.answer.base,
                        "{\"jsonrpc\":\"2.0\",\"id\":\"client-7\",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}");
    assert_ptr_equal(r.answered_k, k);
    assert_int_equal(k->got_response, 1);
    assert_int_equal(m->srv.metrics.refunds, 0);
    assert_string_equal(mw_audit(m), "allow/ok");
    /* Closed marks: inert and queued, still readable until the queue runs. */
    assert_int_equal(k->closed, 1);
    assert_int_equal(tg_call_running(k), 0);
    assert_null(tg_call_sink(k));
    assert_int_equal(in_dead_calls(m, k), 1);
    assert_int_equal(s->inflight, 0);
    assert_true(tg_list_empty(&s->calls));
    tg_call_close(k); /* idempotent */
    tg_call_client_gone(k);
    assert_int_equal(r.nrelease, 1);
    tg_call_run_pending(&m->srv);
    assert_true(tg_list_empty(&m->srv.dead_calls));
    rec_dispose(&r);
    mw_free(m);
}

static void answer_with_error_object_refunds(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "5", "once");
    assert_non_null(k);
    fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32000,\"message\":\"tool broke\"}}");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":5,\"error\":{\"code\":-32000,\"message\":\"tool broke\"}}");
    assert_int_equal(k->got_response, 2);
    assert_int_equal(m->srv.metrics.refunds, 1);
    assert_string_equal(mw_audit(m), "allow/error");
    assert_int_equal(r.nrelease, 1);
    /* The token is back: the next call of the bucket of 1 goes through. */
    assert_int_equal(once_available(m, s), 1);
    rec_dispose(&r);
    mw_free(m);
}

static void garbled_answer_keeps_reservation(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "5", "once");
    fake_answer(k, "<html>oops</html>");
    cJSON *data;
    cJSON *e = REC_ERROR(&r, "5", TG_RPC_UPSTREAM, &data);
    assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                        "upstream sent an invalid response");
    assert_string_equal(json_str(data, "upstream"), "main");
    cJSON_Delete(e);
    assert_int_equal(m->srv.metrics.refunds, 0);
    assert_string_equal(mw_audit(m), "allow/error");
    assert_int_equal(once_available(m, s), 0);
    rec_dispose(&r);
    mw_free(m);
}

/* An answer with some other id is not this call's answer: the client gets -32004. */
static void answer_with_wrong_id_is_refused(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "5", "echo");
    fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":777,\"result\":{}}");
    cJSON *e = REC_ERROR(&r, "5", TG_RPC_UPSTREAM, NULL);
    cJSON_Delete(e);
    assert_string_equal(r.trace.base, "bind answer end release");
    rec_dispose(&r);
    mw_free(m);
}

/* ---- the outcome table: the only place that decides a refund ---------------------------- */

static void outcome_table(void **state)
{
    static const struct {
        enum tg_outcome o;
        const char *audit;
        int refund;
    } want[] = {
        {TG_OUT_OK, "allow/ok", 0},
        {TG_OUT_ERROR, "allow/error", 1},
        {TG_OUT_GARBLED, "allow/error", 0},
        {TG_OUT_NOT_SENT, "allow/unavailable", 1},
        {TG_OUT_NOT_SENT_TIMEOUT, "allow/timeout", 1},
        {TG_OUT_REFUSED, "allow/unavailable", 1},
        {TG_OUT_TIMEOUT, "allow/timeout", 0},
        {TG_OUT_UNAVAILABLE, "allow/unavailable", 0},
        {TG_OUT_CLIENT_GONE, "allow/client_gone", 0},
        {TG_OUT_CLIENT_GONE_NOT_SENT, "allow/client_gone", 1},
        {TG_OUT_WITHDRAWN, "", 1},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        struct mw *m = mw_new(FAKE_HTTP);
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        struct tg_call *k = call_tool(m, s, &r, 0, "\"x\"", "once");
        assert_non_null(k);
        fake_fail(k, want[i].o, "upstream main failed (test)");
        cJSON *data;
        cJSON *e = REC_ERROR(&r, "\"x\"", TG_RPC_UPSTREAM, &data);
        assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                            "upstream main failed (test)");
        assert_string_equal(json_str(data, "upstream"), "main");
        cJSON_Delete(e);
        assert_string_equal(r.trace.base, "bind answer end release");
        if (m->srv.metrics.refunds != (uint64_t)want[i].refund)
            fail_msg("outcome %d: refunds %llu, expected %d", (int)want[i].o,
                     (unsigned long long)m->srv.metrics.refunds, want[i].refund);
        const char *a = mw_audit(m);
        if (strcmp(a, want[i].audit) != 0)
            fail_msg("outcome %d: audit \"%s\", expected \"%s\"", (int)want[i].o, a, want[i].audit);
        /* Settled once: a second settlement changes nothing. */
        tg_call_settle(k, TG_OUT_ERROR, 1);
        assert_int_equal(m->srv.metrics.refunds, (uint64_t)want[i].refund);
        assert_int_equal(once_available(m, s), want[i].refund);
        rec_dispose(&r);
        mw_free(m);
    }
}

/* ---- upstream failures ------------------------------------------------------------------ */

static void unavailable_is_32004_with_upstream(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 1); /* "side" */
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "12", "echo");
    fake_fail(k, TG_OUT_UNAVAILABLE, "upstream side is unavailable");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":12,\"error\":{\"code\":-32004,\"message\":"
                                       "\"upstream side is unavailable\",\"data\":{\"upstream\":\"side\"}}}");
    assert_int_equal(r.status, 200);
    assert_int_equal(r.nrelease, 1);
    assert_string_equal(mw_audit(m), "allow/unavailable");
    rec_dispose(&r);
    mw_free(m);
}

/* A notification that fails has no JSON-RPC answer: the exchange ends with 502 (504 for a
 * timeout). */
static void failed_notification_is_bare_502_or_504(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    for (int t = 0; t < 2; t++) {
        struct rec r;
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, 0), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}");
        assert_int_equal(fake.last->kind, KIND_FORWARD);
        fake_fail(fake.last, t ? TG_OUT_TIMEOUT : TG_OUT_UNAVAILABLE, t ? "upstream main timed out" : "gone");
        assert_string_equal(r.trace.base, "bind bare end release");
        assert_int_equal(r.status, t ? 504 : 502);
        assert_string_equal(r.answer.base, t ? "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32004,\"message\":"
                                               "\"upstream main timed out\",\"data\":{\"upstream\":\"main\"}}}"
                                             : "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32004,\"message\":"
                                               "\"gone\",\"data\":{\"upstream\":\"main\"}}}");
        rec_dispose(&r);
    }
    assert_string_equal(mw_audit(m), ""); /* undecided messages write no audit line */
    mw_free(m);
}

/* send fails the call before it returns (stdio on a write error): the caller's return path
 * must cope with a call that is already closed. */
static void send_fails_synchronously(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    fake.fail_send = 1;
    fake.fail_outcome = TG_OUT_NOT_SENT;
    struct rec r;
    rec_init(&r);
    char body[256];
    mw_send(m, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "3", "once"));
    assert_int_equal(fake.nsend, 1);
    assert_string_equal(r.trace.base, "bind answer end release");
    cJSON *e = REC_ERROR(&r, "3", TG_RPC_UPSTREAM, NULL);
    cJSON_Delete(e);
    assert_int_equal(fake.last->closed, 1);
    assert_int_equal(in_dead_calls(m, fake.last), 1);
    assert_int_equal(m->srv.metrics.refunds, 1);
    assert_int_equal(s->inflight, 0);
    assert_string_equal(mw_audit(m), "allow/unavailable");
    fake.fail_send = 0;
    assert_int_equal(once_available(m, s), 1);
    rec_dispose(&r);
    mw_free(m);
}

/* The same on a message-stream kind: tg_link_sent(ln, a, 0) (upstream/link.c) fails the call as never sent. */
static void link_send_fails_synchronously(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    fake.fail_send = 1;
    struct rec r;
    rec_init(&r);
    char body[256];
    mw_send(m, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "3", "once"));
    assert_string_equal(r.trace.base, "bind answer end release");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32004,\"message\":"
                                       "\"upstream main could not be started or has gone\",\"data\":{\"upstream\":\"main\"}}}");
    assert_int_equal(m->srv.metrics.refunds, 1);
    assert_true(tg_list_empty(&m->srv.awaiting));
    assert_string_equal(mw_audit(m), "allow/unavailable");
    rec_dispose(&r);
    mw_free(m);
}

/* ---- message-stream kinds: answers on the session's link -------------------------------- */

static void link_answer_restores_id(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "\"a\"", "echo");
    assert_int_equal(k->awaiting, 1);
    assert_int_equal(k->forwarded, 1);
    assert_int_equal(k->deadline, k->sent_at + 20); /* upstream main: call_timeout_ms = 20 */
    assert_int_equal(tg_call_running(k), 1);
    /* An answer to some other id matches no call. */
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}");
    assert_string_equal(r.trace.base, "bind");
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}");
    assert_string_equal(r.trace.base, "bind answer end release");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":{\"ok\":true}}");
    assert_true(tg_list_empty(&m->srv.awaiting));
    assert_string_equal(mw_audit(m), "allow/ok");
    /* The same answer again: nobody waits for it any more. */
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"ok\":true}}");
    assert_int_equal(r.nanswer, 1);
    rec_dispose(&r);
    mw_free(m);
}

static void link_error_answer_refunds(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    call_tool(m, s, &r, 0, "1", "once");
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-1,\"message\":\"no\"}}");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-1,\"message\":\"no\"}}");
    assert_int_equal(m->srv.metrics.refunds, 1);
    assert_string_equal(mw_audit(m), "allow/error");
    rec_dispose(&r);
    mw_free(m);
}

/* A call waiting on a message stream past its deadline fails with "timed out"; it may have
 * run, so its reservation stays. A late answer finds nobody. */
static void link_call_times_out(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "8", "once");
    tg_call_expire_awaiting(&m->srv); /* not yet */
    assert_string_equal(r.trace.base, "bind");
    mw_wait_ms(m, 25);
    assert_true(now_ms(&m->srv) >= k->deadline);
    tg_call_expire_awaiting(&m->srv);
    assert_string_equal(r.trace.base, "bind answer end release");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":8,\"error\":{\"code\":-32004,\"message\":"
                                       "\"upstream main timed out\",\"data\":{\"upstream\":\"main\"}}}");
    assert_int_equal(fake.ncancel, 1);
    assert_true(tg_list_empty(&m->srv.awaiting));
    assert_int_equal(m->srv.metrics.refunds, 0);
    assert_string_equal(mw_audit(m), "allow/timeout");
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_int_equal(r.nanswer, 1);
    assert_int_equal(once_available(m, s), 0);
    rec_dispose(&r);
    mw_free(m);
}

/* Progress for the call's token and a server request go to the waiting call's client; a
 * server request the upstream may not make is answered by the gateway and never relayed. */
static void link_server_messages(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 1); /* side: denies sampling/createMessage */
    struct rec r;
    rec_init(&r);
    mw_send(m, s, fsink_new(&r, 0),
            "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
            "\"_meta\":{\"progressToken\":\"tok\"}}}");
    struct tg_call *k = fake.last;
    assert_string_equal(k->progress_token, "stok");
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"tok\","
                    "\"progress\":1}}");
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"roots/list\"}");
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":\"s2\",\"method\":\"sampling/createMessage\",\"params\":{}}");
    assert_int_equal(r.nmessage, 2);
    assert_string_equal(r.messages.base,
                        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"tok\","
                        "\"progress\":1}}\n"
                        "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"roots/list\"}\n");
    assert_int_equal(fake.nreply, 1);
    assert_string_equal(fake.replies.base,
                        "{\"jsonrpc\":\"2.0\",\"id\":\"s2\",\"error\":{\"code\":-32001,\"message\":\"sampling/createMessage "
                        "is not allowed through the gateway for upstream side\"}}\n");
    assert_int_equal(m->srv.metrics.server_requests_denied, 1);
    /* The client answers the server request it saw: that goes up (202); a second answer to the
     * same id, or one to the refused request, is a forgery. */
    struct rec r2;
    rec_init(&r2);
    mw_send(m, s, fsink_new(&r2, 0), "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{\"roots\":[]}}");
    assert_string_equal(r2.trace.base, "bind bare end release"); /* 202, as any kind's accepted message ends */
    assert_int_equal(r2.status, 202);
    assert_string_equal(fake.last_body.base, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{\"roots\":[]}}");
    for (int i = 0; i < 2; i++) {
        struct rec r3;
        rec_init(&r3);
        mw_send(m, s, fsink_new(&r3, 0),
                i ? "{\"jsonrpc\":\"2.0\",\"id\":\"s2\",\"result\":{}}" : "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{}}");
        assert_string_equal(r3.trace.base, "answer release");
        assert_int_equal(r3.status, 400);
        rec_dispose(&r3);
    }
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":4,\"result\":{}}");
    assert_int_equal(r.nrelease, 1);
    rec_dispose(&r);
    rec_dispose(&r2);
    mw_free(m);
}

/* The session's link died: calls waiting on it fail (unavailable) and the session ends. */
static void link_gone_fails_waiting_calls(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r1, r2;
    rec_init(&r1);
    rec_init(&r2);
    call_tool(m, s, &r1, 0, "1", "echo");
    call_tool(m, s, &r2, 0, "2", "once");
    tg_session_ref(s);
    tg_link_gone(s->uplink, "the upstream process exited");
    assert_int_equal(s->live, 0);
    tg_session_unref(s);
    for (int i = 0; i < 2; i++) {
        struct rec *r = i ? &r2 : &r1;
        assert_string_equal(r->trace.base, "bind answer end release");
        cJSON *e = REC_ERROR(r, i ? "2" : "1", TG_RPC_UPSTREAM, NULL);
        assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                            "the upstream process exited");
        cJSON_Delete(e);
    }
    assert_int_equal(m->srv.metrics.refunds, 0);
    assert_string_equal(mw_audit(m), "allow/unavailable allow/unavailable");
    rec_dispose(&r1);
    rec_dispose(&r2);
    mw_free(m);
}

static void shutdown_answers_waiting_calls(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    call_tool(m, s, &r, 0, "1", "echo");
    tg_call_abort_waiting(&m->srv);
    cJSON *e = REC_ERROR(&r, "1", TG_RPC_UPSTREAM, NULL);
    assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"), "the gateway is shutting down");
    cJSON_Delete(e);
    assert_int_equal(r.nrelease, 1);
    assert_string_equal(mw_audit(m), "allow/unavailable");
    rec_dispose(&r);
    mw_free(m);
}

/* ---- the client goes -------------------------------------------------------------------- */

static void client_gone_mid_call(void **state)
{
    for (int kind = FAKE_HTTP; kind <= FAKE_LINK; kind++) {
        struct mw *m = mw_new((enum fake_kind)kind);
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        struct tg_call *k = call_tool(m, s, &r, 0, "1", "once");
        tg_call_client_gone(k);
        assert_string_equal(r.trace.base, "bind release");
        assert_true(fake.ncancel >= 1);
        assert_int_equal(k->closed, 1);
        assert_int_equal(s->inflight, 0);
        assert_int_equal(m->srv.metrics.refunds, 0); /* it may have run */
        cJSON *a = mw_audit_last(m);
        assert_string_equal(json_str(a, "decision"), "allow");
        assert_string_equal(json_str(a, "outcome"), "client_gone");
        assert_string_equal(json_str(a, "tool"), "once");
        assert_string_equal(json_str(a, "upstream"), "main");
        assert_non_null(cJSON_GetObjectItemCaseSensitive(a, "upstream_latency_ms"));
        cJSON_Delete(a);
        assert_string_equal(mw_audit(m), "allow/client_gone");
        if (kind == FAKE_LINK) {
            assert_true(tg_list_empty(&m->srv.awaiting));
            fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}"); /* late: dropped */
        }
        tg_call_client_gone(k);
        assert_int_equal(r.nrelease, 1);
        assert_int_equal(once_available(m, s), 0);
        rec_dispose(&r);
        mw_free(m);
    }
}

/* The client went while the request still waited for a pool connection: it never reached
 * the upstream, so its reservations go back (audited client_gone all the same). */
static void client_gone_before_written(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    fake.unsent = 1;
    struct tg_call *k = call_tool(m, s, &r, 0, "1", "once");
    tg_call_client_gone(k);
    assert_int_equal(r.nrelease, 1);
    assert_int_equal(m->srv.metrics.refunds, 1);
    const char *au = mw_audit(m);
    if (strcmp(au, "allow/client_gone") != 0)
        fail_msg("audit \"%s\"", au);
    assert_int_equal(once_available(m, s), 1);
    fake.unsent = 0;
    rec_dispose(&r);
    mw_free(m);
}

/* ---- re-entry --------------------------------------------------------------------------- */

static void hook_client_gone(struct rec *r, struct tg_call *k)
{
    assert_non_null(k);
    tg_call_client_gone(k);
}

static void hook_close(struct rec *r, struct tg_call *k)
{
    assert_non_null(k);
    tg_call_close(k);
}

static void hook_close_twice(struct rec *r, struct tg_call *k)
{
    if (k == NULL)
        return;
    tg_call_close(k);
    tg_call_client_gone(k);
}

/* The client goes (or the call is closed) from inside the answer: the call is settled once,
 * released once, and its memory stays until tg_call_run_pending. */
static void answer_reenters_call(void **state)
{
    void (*hooks[])(struct rec *, struct tg_call *) = {hook_client_gone, hook_close};
    for (int kind = FAKE_HTTP; kind <= FAKE_LINK; kind++) {
        for (int h = 0; h < 2; h++) {
            struct mw *m = mw_new((enum fake_kind)kind);
            struct tg_session *s = mw_session(m, 0);
            struct rec r;
            rec_init(&r);
            r.on_answer = hooks[h];
            struct tg_call *k = call_tool(m, s, &r, 0, "1", "once");
            if (kind == FAKE_HTTP)
                fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
            else
                fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
            assert_string_equal(r.trace.base, "bind answer release");
            assert_int_equal(r.nrelease, 1);
            assert_int_equal(k->closed, 1);
            assert_int_equal(in_dead_calls(m, k), 1);
            assert_string_equal(mw_audit(m), "allow/ok");
            assert_int_equal(m->srv.metrics.refunds, 0);
            tg_call_run_pending(&m->srv);
            rec_dispose(&r);
            mw_free(m);
        }
    }
}

static void hook_line_held(struct rec *r, struct tg_call *k)
{
    assert_non_null(k);
    assert_true(k->settled);
    assert_non_null(k->audit_held); /* settled, but its audit line is not made yet */
    assert_string_equal(k->audit_held, "ok");
}

/* An answer is written before the call's audit line is made (the line, its JSON and its hash,
 * is not on the answer's way), and the line still says how the call settled. */
static void answer_before_audit_line(void **state)
{
    for (int kind = FAKE_HTTP; kind <= FAKE_LINK; kind++) {
        struct mw *m = mw_new((enum fake_kind)kind);
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        r.on_answer = hook_line_held;
        struct tg_call *k = call_tool(m, s, &r, 0, "1", "once");
        if (kind == FAKE_HTTP)
            fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
        else
            fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
        assert_non_null(strstr(r.trace.base, "answer"));
        assert_null(k->audit_held);
        assert_string_equal(mw_audit(m), "allow/ok");
        tg_call_run_pending(&m->srv);
        rec_dispose(&r);
        mw_free(m);
    }
}

/* The same inside a failure's answer (tg_call_fail), and inside the timeout's. */
static void failure_answer_reenters_call(void **state)
{
    for (int kind = FAKE_HTTP; kind <= FAKE_LINK; kind++) {
        struct mw *m = mw_new((enum fake_kind)kind);
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        r.on_answer = hook_client_gone;
        struct tg_call *k = call_tool(m, s, &r, 0, "1", "once");
        if (kind == FAKE_HTTP) {
            fake_fail(k, TG_OUT_NOT_SENT, "no");
        } else {
            mw_wait_ms(m, 25);
            tg_call_expire_awaiting(&m->srv);
        }
        assert_string_equal(r.trace.base, "bind answer release");
        assert_string_equal(mw_audit(m), kind == FAKE_HTTP ? "allow/unavailable" : "allow/timeout");
        assert_int_equal(m->srv.metrics.refunds, kind == FAKE_HTTP);
        rec_dispose(&r);
        mw_free(m);
    }
}

/* The send fails before it returns and the sink re-enters the call from inside that failure's
 * answer: one answer, one release, the token back once. */
static void send_failure_answer_reenters_call(void **state)
{
    void (*hooks[])(struct rec *, struct tg_call *) = {hook_client_gone, hook_close};
    for (int kind = FAKE_HTTP; kind <= FAKE_LINK; kind++) {
        for (int h = 0; h < 2; h++) {
            struct mw *m = mw_new((enum fake_kind)kind);
            struct tg_session *s = mw_session(m, 0);
            fake.fail_send = 1;
            fake.fail_outcome = TG_OUT_NOT_SENT;
            struct rec r;
            rec_init(&r);
            r.on_answer = hooks[h];
            r.on_release = hook_close_twice;
            call_tool(m, s, &r, 0, "1", "once");
            assert_string_equal(r.trace.base, "bind answer release");
            assert_int_equal(r.nrelease, 1);
            assert_int_equal(fake.last->closed, 1);
            assert_int_equal(in_dead_calls(m, fake.last), 1);
            assert_int_equal(m->srv.metrics.refunds, 1);
            assert_string_equal(mw_audit(m), "allow/unavailable");
            rec_dispose(&r);
            mw_free(m);
        }
    }
}

/* A sink whose release closes the call again. */
static void release_reenters_call(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    r.on_release = hook_close_twice;
    struct tg_call *k = call_tool(m, s, &r, 0, "1", "echo");
    fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_string_equal(r.trace.base, "bind answer end release");
    assert_int_equal(r.nrelease, 1);
    /* And through client_gone. */
    struct rec r2;
    rec_init(&r2);
    r2.on_release = hook_close_twice;
    k = call_tool(m, s, &r2, 0, "2", "echo");
    tg_call_client_gone(k);
    assert_string_equal(r2.trace.base, "bind release");
    assert_string_equal(mw_audit(m), "allow/ok allow/client_gone");
    rec_dispose(&r);
    rec_dispose(&r2);
    mw_free(m);
}

/* A message on the way (an SSE answer stream) whose sink closes the call: the rest of
 * tg_call_upstream_message must not touch the sink. */
static void message_reenters_call(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    r.on_message = hook_client_gone;
    r.high = 1; /* backpressure would ask the sink */
    struct tg_call *k = call_tool(m, s, &r, 0, "1", "once");
    tg_call_stream(k);
    const char *prog = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1}}";
    assert_int_equal(tg_call_upstream_message(k, prog, strlen(prog), NULL), 0);
    assert_string_equal(r.trace.base, "bind stream message release");
    assert_int_equal(fake.npause, 0);
    /* The kind may still deliver, as on_sse_event does until it sees k->closed. */
    assert_int_equal(tg_call_upstream_message(k, prog, strlen(prog), NULL), 0);
    assert_string_equal(mw_audit(m), "allow/client_gone");
    rec_dispose(&r);
    mw_free(m);
}

/* ---- streamed answers, backpressure, server requests on an answer-only sink ------------- */

#define PROGRESS "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1}}"

/* A call of echo (client id "q") whose answer streams, as upstream/streamable.c makes it. */
static struct tg_call *sse_call(struct mw *m, struct tg_session *s, struct rec *r)
{
    struct tg_call *k = call_tool(m, s, r, 0, "\"q\"", "echo");
    tg_call_stream(k);
    return k;
}

/* While upstream/streamable.c feeds a read's bytes to the SSE parser (k->feeding), the messages
 * relayed from them neither touch the call nor ask the sink: that is done once after the bytes,
 * and only when a message was relayed (feeding 2). */
static void feeding_defers_backpressure(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = sse_call(m, s, &r);
    const char *prog = PROGRESS;
    r.high = 1;
    int touch0 = fake.ntouch;
    k->feeding = 1;
    for (int i = 0; i < 5; i++)
        assert_int_equal(tg_call_upstream_message(k, prog, strlen(prog), NULL), 0);
    assert_int_equal(k->feeding, 2);
    assert_int_equal(r.nmessage, 5);
    assert_int_equal(fake.ntouch, touch0);
    assert_int_equal(fake.npause, 0);
    k->feeding = 0;
    tg_call_backpressure(k); /* what on_up_data does after the bytes */
    assert_int_equal(fake.ntouch, touch0 + 1);
    assert_int_equal(fake.npause, 1);
    assert_int_equal(m->srv.metrics.limit_output, 1);
    r.high = 0;
    tg_call_client_drained(k);
    const char *ans = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"v\":2}}";
    assert_int_equal(tg_call_upstream_message(k, ans, strlen(ans), NULL), 1);
    k->feeding = 0;
    k->upcall = NULL;
    tg_call_settle(k, TG_OUT_OK, 1);
    tg_call_finish(k);
    assert_string_equal(mw_audit(m), "allow/ok");
    rec_dispose(&r);
    mw_free(m);
}

static void streamed_answer_and_backpressure(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = sse_call(m, s, &r);
    const char *prog = PROGRESS;
    assert_int_equal(tg_call_upstream_message(k, prog, strlen(prog), NULL), 0);
    assert_int_equal(fake.ntouch, 1);
    assert_int_equal(fake.npause, 0);
    r.high = 1;
    assert_int_equal(tg_call_upstream_message(k, prog, strlen(prog), NULL), 0);
    assert_int_equal(fake.npause, 1);
    assert_int_equal(m->srv.metrics.limit_output, 1);
    r.high = 0;
    tg_call_client_drained(k);
    assert_int_equal(fake.nresume, 1);
    /* Not JSON: dropped. */
    assert_int_equal(tg_call_upstream_message(k, "nope", 4, NULL), 0);
    const char *ans = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"v\":2}}";
    assert_int_equal(tg_call_upstream_message(k, ans, strlen(ans), NULL), 1);
    assert_int_equal(r.nmessage, 2);
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"result\":{\"v\":2}}");
    /* The stream ends: what upstream/streamable.c does then. */
    k->upcall = NULL;
    tg_call_settle(k, TG_OUT_OK, 1);
    tg_call_finish(k);
    assert_string_equal(r.trace.base, "bind stream message message answer end release");
    assert_string_equal(mw_audit(m), "allow/ok");
    rec_dispose(&r);
    mw_free(m);
}

/* A sink that carries only the answer (a batch over HTTP): a server request is refused for it
 * (the gateway answers the upstream), other messages are dropped. */
static void answer_only_sink_refuses_server_requests(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, TG_SINK_ANSWER_ONLY, "1", "echo");
    tg_call_stream(k);
    const char *req = "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"elicitation/create\",\"params\":{}}";
    const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}";
    assert_int_equal(tg_call_upstream_message(k, req, strlen(req), NULL), 0);
    assert_int_equal(tg_call_upstream_message(k, note, strlen(note), NULL), 0);
    assert_int_equal(r.nmessage, 0);
    assert_string_equal(fake.replies.base, "{\"jsonrpc\":\"2.0\",\"id\":9,\"error\":{\"code\":-32001,\"message\":"
                                           "\"elicitation/create is not allowed through the gateway for upstream main\"}}\n");
    /* The client may not answer it either. */
    struct rec r2;
    rec_init(&r2);
    mw_send(m, s, fsink_new(&r2, 0), "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{}}");
    assert_int_equal(r2.status, 400);
    fake_fail(k, TG_OUT_UNAVAILABLE, "x");
    rec_dispose(&r);
    rec_dispose(&r2);
    mw_free(m);
}

/* A link upstream's server request that no client stream can carry (its only waiting call
 * answers a batch over HTTP) is refused to the upstream at once, not left unanswered; and the
 * client may not answer it later. */
static void link_server_request_with_nowhere_to_go_is_refused(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    call_tool(m, s, &r, TG_SINK_ANSWER_ONLY, "1", "echo");
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"method\":\"roots/list\"}");
    assert_int_equal(r.nmessage, 0);
    assert_int_equal(fake.nreply, 1);
    assert_string_equal(fake.replies.base, "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"error\":{\"code\":-32001,\"message\":"
                                           "\"roots/list cannot reach a client: no open stream of this session can "
                                           "carry a server request\"}}\n");
    struct rec r2;
    rec_init(&r2);
    mw_send(m, s, fsink_new(&r2, 0), "{\"jsonrpc\":\"2.0\",\"id\":\"q\",\"result\":{\"roots\":[]}}");
    assert_int_equal(r2.status, 400);
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    rec_dispose(&r);
    rec_dispose(&r2);
    mw_free(m);
}

/* A client that stopped listening gets nothing relayed. */
static void sink_not_listening_gets_nothing(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "1", "echo");
    r.listening = 0;
    const char *ans = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}";
    assert_int_equal(tg_call_upstream_message(k, ans, strlen(ans), NULL), 0);
    assert_int_equal(r.nanswer, 0);
    fake_fail(k, TG_OUT_UNAVAILABLE, "x");
    rec_dispose(&r);
    mw_free(m);
}

/* ---- tools/list ------------------------------------------------------------------------- */

static void tools_list_is_filtered(void **state)
{
    for (int kind = FAKE_HTTP; kind <= FAKE_LINK; kind++) {
        struct mw *m = mw_new((enum fake_kind)kind);
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, 0), "{\"jsonrpc\":\"2.0\",\"id\":\"L\",\"method\":\"tools/list\"}");
        assert_string_equal(fake.last_body.base, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\"}");
        const char *ans = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tools\":[{\"name\":\"echo\"},{\"name\":\"secret\"},"
                          "{\"name\":\"rm\"},{\"name\":\"once\",\"description\":\"x\"},{\"nameless\":1}],"
                          "\"nextCursor\":\"c2\"}}";
        if (kind == FAKE_HTTP)
            fake_answer(fake.last, ans);
        else
            fake_link(m, s, ans);
        assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"L\",\"result\":{\"tools\":[{\"name\":\"echo\"},"
                                           "{\"name\":\"once\",\"description\":\"x\"}],\"nextCursor\":\"c2\"}}");
        assert_string_equal(r.trace.base, "bind answer end release");
        assert_string_equal(mw_audit(m), ""); /* tools/list is not decided: no audit line */
        rec_dispose(&r);
        mw_free(m);
    }
}

/* An answer that cannot be filtered could show hidden tools: -32004 instead. An error answer
 * passes as it is. */
static void tools_list_unfilterable_is_refused(void **state)
{
    static const char *const bad[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"result\":{\"tools\":{\"name\":\"secret\"}}}",
        "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"result\":[{\"name\":\"secret\"}]}",
        "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"result\":{}}",
    };
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct rec r;
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, 0), "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}");
        struct tg_call *k = fake.last;
        char ans[200];
        snprintf(ans, sizeof(ans), bad[i], (unsigned long long)fake_last_gid());
        if (i == 0) {
            tg_call_stream(k);
            assert_int_equal(tg_call_upstream_message(k, ans, strlen(ans), NULL), 1);
            k->upcall = NULL;
            tg_call_settle(k, TG_OUT_ERROR, 1);
            tg_call_finish(k);
        } else {
            fake_answer(k, ans);
        }
        assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32004,\"message\":"
                                           "\"upstream sent a tools/list answer the gateway cannot filter\","
                                           "\"data\":{\"upstream\":\"main\"}}}");
        assert_int_equal(r.nrelease, 1);
        rec_dispose(&r);
    }
    struct rec r;
    rec_init(&r);
    mw_send(m, s, fsink_new(&r, 0), "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}");
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":999,\"error\":{\"code\":-32601,\"message\":\"no\"}}");
    cJSON *e = REC_ERROR(&r, "3", TG_RPC_UPSTREAM, NULL); /* wrong id: not the answer */
    cJSON_Delete(e);
    rec_dispose(&r);
    rec_init(&r);
    mw_send(m, s, fsink_new(&r, 0), "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/list\"}");
    uint64_t gid = fake_last_gid();
    char ans[200];
    snprintf(ans, sizeof(ans), "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"error\":{\"code\":-32601,\"message\":\"no\"}}",
             (unsigned long long)gid);
    fake_answer(fake.last, ans);
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":3,\"error\":{\"code\":-32601,\"message\":\"no\"}}");
    rec_dispose(&r);
    mw_free(m);
}

/* ---- initialize, and ids ------------------------------------------------------------------ */

#define INIT_REQ                                                                                                   \
    "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-03-26\","      \
    "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"

/* An initialize that fails took a new session (TG_SINK_NEW_SESSION): the session goes with it.
 * One that succeeds records the protocol version the server chose. */
static void initialize_outcomes(void **state)
{
    for (int kind = FAKE_HTTP; kind <= FAKE_LINK; kind++) {
        for (int ok = 0; ok < 2; ok++) {
            struct mw *m = mw_new((enum fake_kind)kind);
            struct tg_session *s = mw_session(m, 0);
            s->initialized = 0;
            s->proto = "";
            tg_session_ref(s);
            struct rec r;
            rec_init(&r);
            mw_send(m, s, fsink_new(&r, TG_SINK_NEW_SESSION), INIT_REQ);
            struct tg_call *k = fake.last;
            assert_int_equal(k->is_init, 1);
            const char *ans = ok ? "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-03-26\","
                                   "\"capabilities\":{},\"serverInfo\":{\"name\":\"u\",\"version\":\"1\"}}}"
                                 : "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"bad version\"}}";
            if (kind == FAKE_HTTP && !ok)
                fake_fail(k, TG_OUT_UNAVAILABLE, "upstream main is unavailable");
            else if (kind == FAKE_HTTP)
                fake_answer(k, ans);
            else
                fake_link(m, s, ans);
            assert_int_equal(r.nrelease, 1);
            assert_int_equal(s->live, ok);
            assert_int_equal(tg_session_table_count(m->srv.sessions), (size_t)ok);
            if (ok) {
                assert_int_equal(s->initialized, 1);
                assert_string_equal(s->proto, "2025-03-26");
                assert_string_equal(r.answer.base,
                                    "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"protocolVersion\":\"2025-03-26\","
                                    "\"capabilities\":{},\"serverInfo\":{\"name\":\"u\",\"version\":\"1\"}}}");
            } else {
                cJSON *e = REC_ERROR(&r, "0", kind == FAKE_HTTP ? TG_RPC_UPSTREAM : -32602, NULL);
                cJSON_Delete(e);
            }
            tg_session_unref(s);
            rec_dispose(&r);
            mw_free(m);
        }
    }
}

/* The client's id comes back byte for byte, whatever its form; ours went up. */
static void odd_client_ids(void **state)
{
    static const char *const ids[] = {
        "12345678901234567890123", "-0", "-42", "\"\"", "\"\\u00e9\\\"q\\\\\"", "\"\xc3\xa9\xe2\x82\xac\"",
    };
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        struct rec r;
        rec_init(&r);
        struct tg_call *k = call_tool(m, s, &r, 0, ids[i], "echo");
        assert_non_null(k);
        char want[200], ans[200];
        snprintf(want, sizeof(want), "{\"jsonrpc\":\"2.0\",\"id\":%zu,\"method\":\"tools/call\"", i + 1);
        assert_memory_equal(fake.last_body.base, want, strlen(want));
        snprintf(ans, sizeof(ans), "{\"jsonrpc\":\"2.0\",\"result\":{},\"id\":%zu}", i + 1);
        fake_answer(k, ans);
        snprintf(want, sizeof(want), "{\"jsonrpc\":\"2.0\",\"result\":{},\"id\":%s}", ids[i]);
        assert_string_equal(r.answer.base, want);
        rec_dispose(&r);
    }
    mw_free(m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(answer_restores_client_id),
        cmocka_unit_test(answer_with_error_object_refunds),
        cmocka_unit_test(garbled_answer_keeps_reservation),
        cmocka_unit_test(answer_with_wrong_id_is_refused),
        cmocka_unit_test(outcome_table),
        cmocka_unit_test(unavailable_is_32004_with_upstream),
        cmocka_unit_test(failed_notification_is_bare_502_or_504),
        cmocka_unit_test(send_fails_synchronously),
        cmocka_unit_test(link_send_fails_synchronously),
        cmocka_unit_test(link_answer_restores_id),
        cmocka_unit_test(link_error_answer_refunds),
        cmocka_unit_test(link_call_times_out),
        cmocka_unit_test(link_server_messages),
        cmocka_unit_test(link_gone_fails_waiting_calls),
        cmocka_unit_test(shutdown_answers_waiting_calls),
        cmocka_unit_test(client_gone_mid_call),
        cmocka_unit_test(client_gone_before_written),
        cmocka_unit_test(link_server_request_with_nowhere_to_go_is_refused),
        cmocka_unit_test(answer_reenters_call),
        cmocka_unit_test(answer_before_audit_line),
        cmocka_unit_test(failure_answer_reenters_call),
        cmocka_unit_test(send_failure_answer_reenters_call),
        cmocka_unit_test(release_reenters_call),
        cmocka_unit_test(message_reenters_call),
        cmocka_unit_test(streamed_answer_and_backpressure),
        cmocka_unit_test(feeding_defers_backpressure),
        cmocka_unit_test(answer_only_sink_refuses_server_requests),
        cmocka_unit_test(sink_not_listening_gets_nothing),
        cmocka_unit_test(tools_list_is_filtered),
        cmocka_unit_test(tools_list_unfilterable_is_refused),
        cmocka_unit_test(initialize_outcomes),
        cmocka_unit_test(odd_client_ids),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
