/* core/gate/dispatch.c and core/call/approvals.c: the gate every client message passes, with a fake
 * upstream kind and a fake sink (test/unit/core/middle.h) around the real middle.
 *
 * tg_dispatch_message takes a context and a sink and releases the sink exactly once, whether
 * it answered at once (a refusal, a decision) or a call carried the message upstream; every
 * case checks the sink's operations in order and the exact bytes, and what reached the fake
 * upstream (our gateway id, never the client's), the audit lines, the decision counters and
 * the refunds.
 *
 * The policy (middle.h): echo allowed, rm denied, once a bucket of 1, deploy approval and a
 * bucket of 1, review approval, everything else denied and hidden. limits.inflight_per_session
 * is 3 and limits.approvals_max 2. */
#include "test/unit/core/middle.h"

#include "transports/batch.h"
#include "core/mcp/mrtr.h"

static struct tg_call *call_tool(struct mw *m, struct tg_session *s, struct rec *r, unsigned flags, const char *id,
                                 const char *tool)
{
    char body[256];
    int before = fake.nsend;
    mw_send(m, s, fsink_new(r, flags), mw_call(body, sizeof(body), id, tool));
    return fake.nsend > before ? fake.last : NULL;
}

static char *answer_for_gid(char *buf, size_t n, const char *result)
{
    snprintf(buf, n, "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"result\":%s}", (unsigned long long)fake_last_gid(), result);
    return buf;
}

/* ---- allow ------------------------------------------------------------------------------ */

static void allow_forwards_with_our_id(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    m->srv.next_gid = 41; /* our ids are the gateway's, whatever the client sent */
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "\"req-1\"", "echo");
    assert_non_null(k);
    assert_int_equal(fake.nsend, 1);
    assert_int_equal(fake.last_timeout, 20);
    assert_string_equal(fake.last_body.base, "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"tools/call\",\"params\":"
                                             "{\"name\":\"echo\",\"arguments\":{\"x\":1}}}");
    assert_string_equal(k->gid_str, "42");
    assert_string_equal(r.trace.base, "bind"); /* nothing answered yet */
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_ALLOW], 1);
    assert_int_equal(m->srv.metrics.rpc_requests, 1);
    assert_string_equal(mw_audit(m), ""); /* an allowed call is audited when it settles */
    fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{\"content\":[]}}");
    assert_string_equal(r.trace.base, "bind answer end release");
    assert_int_equal(r.status, 200);
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"req-1\",\"result\":{\"content\":[]}}");
    assert_int_equal(m->srv.metrics.refunds, 0);
    cJSON *a = mw_audit_last(m);
    assert_string_equal(json_str(a, "decision"), "allow");
    assert_string_equal(json_str(a, "outcome"), "ok");
    assert_string_equal(json_str(a, "grant"), "alice");
    assert_string_equal(json_str(a, "session"), s->id_str);
    assert_string_equal(json_str(a, "method"), "tools/call");
    assert_string_equal(json_str(a, "tool"), "echo");
    assert_int_equal(strlen(json_str(a, "args_sha256")), 64);
    cJSON_Delete(a);
    assert_int_equal(s->inflight, 0);
    rec_dispose(&r);
    mw_free(m);
}

/* Send body on s; the upstream must get want; answer it (with our id gid) and end the call. */
static void forward_case(struct mw *m, struct tg_session *s, const char *body, const char *want, unsigned gid)
{
    struct rec r;
    rec_init(&r);
    int before = fake.nsend;
    mw_send(m, s, fsink_new(&r, 0), body);
    assert_int_equal(fake.nsend, before + 1);
    assert_string_equal(fake.last_body.base, want);
    char ans[96];
    snprintf(ans, sizeof(ans), "{\"jsonrpc\":\"2.0\",\"id\":%u,\"result\":{}}", gid);
    fake_answer(fake.last, ans);
    assert_int_equal(r.status, 200);
    rec_dispose(&r);
}

/* An unchanged plain request goes up as its own bytes with our id in place (spacing and number
 * spellings as the client sent them); one with an escape, or one the gateway had to change
 * (2026 fields sent to a 2025 upstream), is written from the tree. */
static void forwarded_bytes_as_sent_unless_changed(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    m->srv.next_gid = 6;
    forward_case(m, s,
                 "{ \"jsonrpc\": \"2.0\", \"method\":\"tools/call\",\"id\" : \"xA\",    \"params\":{\"name\":\"echo\","
                 "\"arguments\":{\"x\":1.50E+1,\"s\":\"e\"}}}",
                 "{ \"jsonrpc\": \"2.0\", \"method\":\"tools/call\",\"id\" : 7,    \"params\":{\"name\":\"echo\","
                 "\"arguments\":{\"x\":1.50E+1,\"s\":\"e\"}}}",
                 7);
    const char *tree = "{\"jsonrpc\":\"2.0\",\"id\":%u,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{}}}";
    char want[160];
    snprintf(want, sizeof(want), tree, 8u); /* a 2026 field for a 2025 upstream: removed */
    forward_case(m, s,
                 "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
                 "\"arguments\":{},\"requestState\":\"abc\"}}",
                 want, 8);
    snprintf(want, sizeof(want), tree, 9u); /* an escape: the tree's writing (decoded, compact) */
    forward_case(m, s,
                 "{\"jsonrpc\":\"2.0\", \"id\":4,\"method\":\"tools/call\",\"params\":{\"n\\u0061me\":\"echo\",\"arguments\":{}}}",
                 want, 9);
    snprintf(want, sizeof(want), tree, 10u); /* a 2026 claim in _meta: removed, and _meta with it */
    forward_case(m, s,
                 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
                 "\"arguments\":{},\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"x\"}}}",
                 want, 10);
    /* ... which its own bytes say too, the member and a comma left out (the spacing kept) */
    forward_case(m, s,
                 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{ \"_meta\" : "
                 "{\"io.modelcontextprotocol/protocolVersion\":\"x\"} , \"name\":\"echo\", \"arguments\":{} }}",
                 "{\"jsonrpc\":\"2.0\",\"id\":11,\"method\":\"tools/call\",\"params\":{  \"name\":\"echo\", "
                 "\"arguments\":{} }}",
                 11);
    /* _meta that keeps a member, an escape, a requestState too: written from the tree */
    forward_case(m, s,
                 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\", "
                 "\"arguments\":{},\"_meta\":{\"progressToken\":\"t\",\"io.modelcontextprotocol/protocolVersion\":\"x\"}}}",
                 "{\"jsonrpc\":\"2.0\",\"id\":12,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
                 "\"arguments\":{},\"_meta\":{\"progressToken\":\"t\"}}}",
                 12);
    snprintf(want, sizeof(want), tree, 13u);
    forward_case(m, s,
                 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"ech\\u006f\", "
                 "\"arguments\":{},\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"x\"}}}",
                 want, 13);
    snprintf(want, sizeof(want), tree, 14u);
    forward_case(m, s,
                 "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\", "
                 "\"arguments\":{},\"requestState\":\"s\",\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"x\"}}}",
                 want, 14);
    mw_free(m);
}

/* Messages that are not decided go up as they are (id rewritten for requests). */
static void undecided_request_forwarded(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    mw_send(m, s, fsink_new(&r, 0), "{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"ping\"}");
    assert_string_equal(fake.last_body.base, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{}}");
    assert_int_equal(r.nrelease, 1);
    assert_string_equal(mw_audit(m), "");
    rec_dispose(&r);
    mw_free(m);
}

/* ---- deny ------------------------------------------------------------------------------- */

static void deny_answers_32001_never_sent(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    const char *tools[] = {"rm", "secret"};
    for (int i = 0; i < 2; i++) {
        struct rec r;
        rec_init(&r);
        assert_null(call_tool(m, s, &r, 0, "7", tools[i]));
        assert_string_equal(r.trace.base, "bind answer release");
        assert_int_equal(r.status, 200);
        cJSON *data;
        cJSON *e = REC_ERROR(&r, "7", TG_RPC_DENIED, &data);
        assert_string_equal(json_str(data, "tool"), tools[i]);
        assert_non_null(json_str(data, "rule"));
        assert_non_null(json_str(data, "reason"));
        if (i == 0) {
            assert_string_equal(json_str(data, "reason"), "Deleting files is not allowed");
            assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                                "Deleting files is not allowed");
        }
        cJSON_Delete(e);
        rec_dispose(&r);
    }
    assert_int_equal(fake.nsend, 0);
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_DENY], 2);
    assert_int_equal(m->srv.metrics.refunds, 0);
    assert_int_equal(s->inflight, 0);
    assert_string_equal(mw_audit(m), "deny deny");
    mw_free(m);
}

/* Methods no standard or policy allows, requests without an id, bad params, forged answers. */
static void protocol_refusals(void **state)
{
    static const struct {
        const char *msg;
        int status;
        const char *id;
        int code;
        int bare; /* a notification: 202, nothing else */
    } cases[] = {
        {"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"admin/shell\"}", 200, "1", TG_RPC_DENIED, 0},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/shell\"}", 202, NULL, 0, 1},
        {"{\"jsonrpc\":\"2.0\",\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}", 400, "null",
         TG_RPC_INVALID_REQUEST, 0},
        {"{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"arguments\":{}}}", 200, "2",
         TG_RPC_INVALID_PARAMS, 0},
        {"{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":[1]}}", 200,
         "3", TG_RPC_INVALID_PARAMS, 0},
        {"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"resources/read\",\"params\":{}}", 200, "4", TG_RPC_INVALID_PARAMS,
         0},
        {"{\"jsonrpc\":\"2.0\",\"id\":\"srv-1\",\"result\":{}}", 400, "null", TG_RPC_INVALID_REQUEST, 0},
    };
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct rec r;
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, 0), cases[i].msg);
        if (cases[i].bare) {
            assert_string_equal(r.trace.base, "bare release");
        } else {
            if (strcmp(r.trace.base, "answer release") != 0)
                fail_msg("case %zu: trace \"%s\"", i, r.trace.base);
            cJSON *e = REC_ERROR(&r, cases[i].id, cases[i].code, NULL);
            cJSON_Delete(e);
        }
        assert_null(r.answered_k);
        if (r.status != cases[i].status)
            fail_msg("case %zu: status %d, expected %d", i, r.status, cases[i].status);
        rec_dispose(&r);
    }
    assert_int_equal(fake.nsend, 0);
    assert_int_equal(m->srv.metrics.rpc_refused_nonstandard, 2);
    assert_string_equal(mw_audit(m), "deny deny"); /* the non-standard methods */
    mw_free(m);
}

/* ---- limit ------------------------------------------------------------------------------- */

static void limit_answers_32002(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r1, r2;
    rec_init(&r1);
    rec_init(&r2);
    struct tg_call *k = call_tool(m, s, &r1, 0, "1", "once");
    assert_non_null(k);
    assert_int_equal(k->dec->nres, 1);
    /* The token is taken while the first is in flight. */
    assert_null(call_tool(m, s, &r2, 0, "2", "once"));
    assert_string_equal(r2.trace.base, "bind answer release");
    cJSON *data;
    cJSON *e = REC_ERROR(&r2, "2", TG_RPC_LIMITED, &data);
    assert_string_equal(json_str(data, "tool"), "once");
    assert_string_equal(json_str(data, "counter"), "once_rate");
    cJSON *retry = cJSON_GetObjectItemCaseSensitive(data, "retry_after_ms");
    assert_true(cJSON_IsNumber(retry));
    assert_true(retry->valuedouble > 0 && retry->valuedouble <= 86400000);
    cJSON_Delete(e);
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_LIMITED], 1);
    char ans[200];
    fake_answer(k, answer_for_gid(ans, sizeof(ans), "{}"));
    assert_string_equal(mw_audit(m), "limited allow/ok");
    /* Used, not refunded: still limited. */
    struct rec r3;
    rec_init(&r3);
    assert_null(call_tool(m, s, &r3, 0, "3", "once"));
    e = REC_ERROR(&r3, "3", TG_RPC_LIMITED, NULL);
    cJSON_Delete(e);
    assert_int_equal(m->srv.metrics.refunds, 0);
    rec_dispose(&r1);
    rec_dispose(&r2);
    rec_dispose(&r3);
    mw_free(m);
}

/* An upstream JSON-RPC error means the tool did not run: the token comes back. A timeout or an
 * unavailable upstream may have run it: the token stays used. */
static void limit_refunds_only_what_did_not_run(void **state)
{
    static const struct {
        int answer_error; /* 1: the upstream answers an error object; 0: the call fails with o */
        enum tg_outcome o;
        int refunded;
        const char *audit;
    } cases[] = {
        {1, TG_OUT_OK, 1, "allow/error"},
        {0, TG_OUT_TIMEOUT, 0, "allow/timeout limited"},
        {0, TG_OUT_UNAVAILABLE, 0, "allow/unavailable limited"},
        {0, TG_OUT_NOT_SENT, 1, "allow/unavailable"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct mw *m = mw_new(FAKE_HTTP);
        struct tg_session *s = mw_session(m, 0);
        struct rec r1, r2;
        rec_init(&r1);
        rec_init(&r2);
        struct tg_call *k = call_tool(m, s, &r1, 0, "1", "once");
        if (cases[i].answer_error)
            fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32602,\"message\":\"bad x\"}}");
        else
            fake_fail(k, cases[i].o, "upstream main failed");
        assert_int_equal(r1.nrelease, 1);
        if (m->srv.metrics.refunds != (uint64_t)cases[i].refunded)
            fail_msg("case %zu: refunds %llu", i, (unsigned long long)m->srv.metrics.refunds);
        struct tg_call *k2 = call_tool(m, s, &r2, 0, "2", "once");
        if ((k2 != NULL) != cases[i].refunded)
            fail_msg("case %zu: the next call was %s", i, k2 ? "allowed" : "limited");
        if (k2 != NULL) {
            char ans[200];
            fake_answer(k2, answer_for_gid(ans, sizeof(ans), "{}"));
            assert_string_equal(r2.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}");
            /* and now it is used */
            assert_int_equal(m->srv.metrics.refunds, 1);
            const char *a = mw_audit(m);
            char want[100];
            snprintf(want, sizeof(want), "%s allow/ok", cases[i].audit);
            assert_string_equal(a, want);
        } else {
            assert_string_equal(mw_audit(m), cases[i].audit);
        }
        rec_dispose(&r1);
        rec_dispose(&r2);
        mw_free(m);
    }
}

/* ---- approve ----------------------------------------------------------------------------- */

static void on_listed(void *ud, const struct tg_approval_item *items, size_t n)
{
    tg_approvals_write(ud, items, n, 1);
}

static void approve_parks_then_sends(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    assert_null(call_tool(m, s, &r, 0, "\"d1\"", "deploy"));
    struct tg_call *k = r.k;
    assert_non_null(k);
    assert_string_equal(r.trace.base, "bind"); /* parked: nothing said yet */
    assert_int_equal(k->parked, 1);
    assert_int_equal(m->srv.napprovals, 1);
    assert_int_equal(strlen(k->approval_id), 32);
    assert_int_equal(k->approval_deadline, now_ms(&m->srv) + 30000); /* approval_timeout = 30 (s) */
    assert_ptr_equal(tg_approvals_find(&m->srv, tg_slice_cstr(k->approval_id)), k);
    assert_int_equal(s->inflight, 1);
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_APPROVE], 1);
    struct tg_buf list;
    tg_buf_init(&list);
    m->srv.store.ops->approvals_list(m->srv.store.ud, on_listed, &list); /* the local queue answers at once */
    tg_buf_append(&list, "", 1);
    assert_non_null(strstr(list.base, "\"tool\":\"deploy\""));
    assert_non_null(strstr(list.base, k->approval_id));
    /* the shape a cluster's list has too: waited_ms, and instance (null: no member holds it) */
    assert_non_null(strstr(list.base, "\"waited_ms\":"));
    assert_non_null(strstr(list.base, ",\"instance\":null,\"blocked\":null}"));
    assert_non_null(strstr(list.base, "\"args\":{\"x\":1}"));
    tg_buf_dispose(&list);
    cJSON *a = mw_audit_last(m);
    assert_string_equal(json_str(a, "decision"), "approve");
    assert_string_equal(json_str(a, "approval_id"), k->approval_id);
    cJSON_Delete(a);
    assert_string_equal(mw_audit(m), "approve");

    tg_approvals_finish(k, 1, "bob", NULL);
    assert_int_equal(m->srv.napprovals, 0);
    assert_int_equal(k->parked, 0);
    assert_int_equal(fake.nsend, 1);
    assert_ptr_equal(fake.last, k);
    assert_string_equal(fake.last_body.base, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":"
                                             "{\"name\":\"deploy\",\"arguments\":{\"x\":1}}}");
    fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_string_equal(r.trace.base, "bind answer end release");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"d1\",\"result\":{}}");
    assert_int_equal(m->srv.metrics.approvals_approved, 1);
    assert_int_equal(m->srv.metrics.refunds, 0);
    a = mw_audit_last(m);
    assert_string_equal(json_str(a, "decision"), "allow");
    assert_string_equal(json_str(a, "outcome"), "ok");
    assert_non_null(json_str(a, "approval_id"));
    cJSON_Delete(a);
    assert_string_equal(mw_audit(m), "approved allow/ok");
    rec_dispose(&r);
    mw_free(m);
}

/* Refused by a human, or not decided in time: -32003 with the approval id, never sent, and the
 * reservation given back (deploy can park again rather than being limited). */
static void approve_refused_or_expired(void **state)
{
    for (int expire = 0; expire < 2; expire++) {
        struct mw *m = mw_new(FAKE_HTTP);
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        call_tool(m, s, &r, 0, "5", "deploy");
        struct tg_call *k = r.k;
        char id[33];
        snprintf(id, sizeof(id), "%s", k->approval_id);
        if (expire) {
            tg_approvals_expire(&m->srv); /* not due */
            assert_int_equal(m->srv.napprovals, 1);
            k->approval_deadline = now_ms(&m->srv); /* 30 s pass */
            tg_approvals_expire(&m->srv);
        } else {
            tg_approvals_finish(k, 0, "bob", NULL);
        }
        assert_string_equal(r.trace.base, "bind answer release");
        cJSON *data;
        cJSON *e = REC_ERROR(&r, "5", TG_RPC_APPROVAL, &data);
        assert_string_equal(json_str(data, "tool"), "deploy");
        assert_string_equal(json_str(data, "approval_id"), id);
        assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                            expire ? "deploy was not approved in time; the call was not made"
                                   : "deploy was refused by a human approver; the call was not made");
        cJSON_Delete(e);
        assert_int_equal(fake.nsend, 0);
        assert_int_equal(m->srv.napprovals, 0);
        assert_null(tg_approvals_find(&m->srv, tg_slice_cstr(id)));
        assert_int_equal(m->srv.metrics.refunds, 1);
        assert_int_equal(expire ? m->srv.metrics.approvals_expired : m->srv.metrics.approvals_rejected, 1);
        assert_string_equal(mw_audit(m), expire ? "approve expired" : "approve rejected");
        /* The token is back: deploy parks again. */
        struct rec r2;
        rec_init(&r2);
        call_tool(m, s, &r2, 0, "6", "deploy");
        assert_int_equal(m->srv.napprovals, 1);
        tg_approvals_abort(&m->srv); /* shutdown refuses it */
        cJSON *e2 = REC_ERROR(&r2, "6", TG_RPC_APPROVAL, NULL);
        cJSON_Delete(e2);
        assert_int_equal(r2.nrelease, 1);
        rec_dispose(&r);
        rec_dispose(&r2);
        mw_free(m);
    }
}

/* A batch cannot wait for a human; the approval queue has a bound. */
static void approve_refused_without_parking(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    call_tool(m, s, &r, TG_SINK_NO_WAIT, "1", "deploy");
    assert_string_equal(r.trace.base, "bind answer release");
    cJSON *data;
    cJSON *e = REC_ERROR(&r, "1", TG_RPC_APPROVAL, &data);
    assert_string_equal(json_str(data, "approval_id"), "");
    assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                        "deploy needs a human's approval, which a batch cannot wait for; send it on its own");
    cJSON_Delete(e);
    assert_int_equal(m->srv.napprovals, 0);
    assert_int_equal(m->srv.metrics.refunds, 1); /* its reservation went back */
    assert_string_equal(mw_audit(m), "rejected");

    struct rec p1, p2, full;
    rec_init(&p1);
    rec_init(&p2);
    rec_init(&full);
    call_tool(m, s, &p1, 0, "2", "review");
    call_tool(m, s, &p2, 0, "3", "review");
    assert_int_equal(m->srv.napprovals, 2); /* limits.approvals_max */
    call_tool(m, s, &full, 0, "4", "review");
    e = REC_ERROR(&full, "4", TG_RPC_APPROVAL, NULL);
    assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                        "review needs approval, but the approval queue is full (limits.approvals_max); try later");
    cJSON_Delete(e);
    assert_int_equal(full.nrelease, 1);
    assert_int_equal(m->srv.napprovals, 2);
    cJSON *a = mw_audit_last(m);
    assert_string_equal(json_str(a, "decision"), "rejected");
    assert_string_equal(json_str(a, "decided_by"), "(queue full)");
    cJSON_Delete(a);
    tg_approvals_finish(p1.k, 0, NULL, NULL);
    tg_approvals_finish(p2.k, 0, NULL, NULL);
    assert_int_equal(p1.nrelease + p2.nrelease, 2);
    assert_string_equal(mw_audit(m), "approve approve rejected rejected rejected");
    rec_dispose(&r);
    rec_dispose(&p1);
    rec_dispose(&p2);
    rec_dispose(&full);
    mw_free(m);
}

/* Approved, then the send fails before it returns: -32004, the token back, nothing parked. */
static void approved_send_fails_synchronously(void **state)
{
    struct mw *m = mw_new(FAKE_LINK);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    call_tool(m, s, &r, 0, "1", "deploy");
    fake.fail_send = 1;
    tg_approvals_finish(r.k, 1, "bob", NULL);
    assert_string_equal(r.trace.base, "bind answer end release");
    cJSON *e = REC_ERROR(&r, "1", TG_RPC_UPSTREAM, NULL);
    cJSON_Delete(e);
    assert_int_equal(m->srv.napprovals, 0);
    assert_int_equal(m->srv.metrics.refunds, 1);
    assert_string_equal(mw_audit(m), "approve approved allow/unavailable");
    rec_dispose(&r);
    mw_free(m);
}

/* A human refuses while the client's sink re-enters the call from inside the answer. */
static void hook_client_gone(struct rec *r, struct tg_call *k)
{
    if (k != NULL)
        tg_call_client_gone(k);
}

static void decision_answer_reenters_call(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    const char *tools[] = {"rm", "deploy"};
    for (int i = 0; i < 2; i++) {
        struct rec r;
        rec_init(&r);
        r.on_answer = hook_client_gone;
        call_tool(m, s, &r, 0, "1", tools[i]);
        if (i == 1)
            tg_approvals_finish(r.k, 0, "bob", NULL);
        assert_string_equal(r.trace.base, "bind answer release");
        assert_int_equal(r.nrelease, 1);
        rec_dispose(&r);
    }
    assert_int_equal(m->srv.napprovals, 0);
    assert_int_equal(m->srv.metrics.refunds, 1);
    assert_string_equal(mw_audit(m), "deny approve rejected");
    mw_free(m);
}

/* The client of a parked call goes: the call is withdrawn, its reservation given back. */
static void parked_client_gone(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    call_tool(m, s, &r, 0, "1", "deploy");
    tg_call_client_gone(r.k);
    assert_string_equal(r.trace.base, "bind release");
    assert_int_equal(m->srv.napprovals, 0);
    assert_true(tg_list_empty(&m->srv.approvals));
    assert_int_equal(m->srv.metrics.refunds, 1);
    assert_int_equal(fake.nsend, 0);
    /* Withdrawn, as a cancel would be: the audit log says so (not "approve" as the last word). */
    const char *au = mw_audit(m);
    if (strcmp(au, "approve cancelled") != 0)
        fail_msg("audit \"%s\"", au);
    assert_int_equal(m->srv.metrics.approvals_rejected, 1);
    rec_dispose(&r);
    mw_free(m);
}

/* ---- cancel ------------------------------------------------------------------------------ */

static void cancel_forwarded_with_our_id(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    m->srv.next_gid = 99;
    struct rec r, rc;
    rec_init(&r);
    rec_init(&rc);
    struct tg_call *k = call_tool(m, s, &r, 0, "\"abc\"", "echo");
    mw_send(m, s, fsink_new(&rc, 0),
            "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"abc\",\"reason\":\"no\"}}");
    assert_int_equal(fake.nsend, 2);
    assert_string_equal(fake.last_body.base, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":"
                                             "{\"requestId\":100,\"reason\":\"no\"}}");
    assert_int_equal(fake.last->kind, KIND_FORWARD);
    fake_accepted(fake.last);
    assert_string_equal(rc.trace.base, "bind bare end release");
    assert_int_equal(rc.status, 202);
    /* The call itself is the upstream's to end. */
    assert_int_equal(k->closed, 0);
    fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":100,\"error\":{\"code\":-32800,\"message\":\"cancelled\"}}");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"error\":{\"code\":-32800,\"message\":\"cancelled\"}}");
    assert_int_equal(m->srv.metrics.rpc_notifications, 1);
    rec_dispose(&r);
    rec_dispose(&rc);
    mw_free(m);
}

/* A cancellation naming nothing in flight (a number is not the string, an answered call is
 * gone) is accepted and dropped. */
static void cancel_unknown_is_dropped(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    struct tg_call *k = call_tool(m, s, &r, 0, "\"7\"", "echo");
    const char *msgs[] = {
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":7}}",
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"8\"}}",
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{}}",
    };
    for (int i = 0; i < 3; i++) {
        struct rec rc;
        rec_init(&rc);
        mw_send(m, s, fsink_new(&rc, 0), msgs[i]);
        assert_string_equal(rc.trace.base, "bare release");
        assert_int_equal(rc.status, 202);
        rec_dispose(&rc);
    }
    assert_int_equal(fake.nsend, 1);
    fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    struct rec rc;
    rec_init(&rc);
    mw_send(m, s, fsink_new(&rc, 0), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"7\"}}");
    assert_string_equal(rc.trace.base, "bare release");
    assert_int_equal(fake.nsend, 1);
    rec_dispose(&r);
    rec_dispose(&rc);
    mw_free(m);
}

/* Cancelling a parked call withdraws it: -32003 for the call, never sent, even if an approver
 * acts on it later (it is no longer to be found). */
static void cancel_parked_withdraws(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r, rc;
    rec_init(&r);
    rec_init(&rc);
    call_tool(m, s, &r, 0, "5", "deploy");
    char id[33];
    snprintf(id, sizeof(id), "%s", r.k->approval_id);
    mw_send(m, s, fsink_new(&rc, 0), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":5}}");
    assert_string_equal(rc.trace.base, "bare release");
    assert_int_equal(rc.status, 202);
    assert_string_equal(r.trace.base, "bind answer release");
    cJSON *data;
    cJSON *e = REC_ERROR(&r, "5", TG_RPC_APPROVAL, &data);
    assert_string_equal(json_str(data, "approval_id"), id);
    assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                        "deploy was cancelled by the client before approval; the call was not made");
    cJSON_Delete(e);
    assert_int_equal(m->srv.napprovals, 0);
    assert_null(tg_approvals_find(&m->srv, tg_slice_cstr(id)));
    assert_int_equal(fake.nsend, 0);
    assert_int_equal(m->srv.metrics.refunds, 1);
    assert_string_equal(mw_audit(m), "approve cancelled");
    rec_dispose(&r);
    rec_dispose(&rc);
    mw_free(m);
}

/* ---- duplicates and the in-flight limit --------------------------------------------------- */

static void duplicate_id_refused(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r1, r2, r3, r4;
    rec_init(&r1);
    rec_init(&r2);
    rec_init(&r3);
    rec_init(&r4);
    struct tg_call *k1 = call_tool(m, s, &r1, 0, "1", "echo");
    assert_null(call_tool(m, s, &r2, 0, "1", "echo"));
    assert_string_equal(r2.trace.base, "answer release");
    assert_int_equal(r2.status, 400);
    assert_string_equal(r2.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":"
                                        "\"Invalid Request: a request with this id is already in flight in this session\"}}");
    /* A parked call holds its id too; "1" (a string) is another id than 1. */
    call_tool(m, s, &r3, 0, "9", "review");
    struct tg_call *k4 = call_tool(m, s, &r4, 0, "\"1\"", "echo");
    assert_non_null(k4);
    struct rec r5;
    rec_init(&r5);
    assert_null(call_tool(m, s, &r5, 0, "9", "echo"));
    assert_int_equal(r5.status, 400);
    assert_int_equal(fake.nsend, 2);
    fake_answer(k1, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    fake_answer(k4, "{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{}}");
    assert_string_equal(r4.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{}}");
    tg_approvals_finish(r3.k, 0, NULL, NULL);
    /* Answered: the id is free again. */
    struct rec r6;
    rec_init(&r6);
    struct tg_call *k6 = call_tool(m, s, &r6, 0, "1", "echo");
    assert_non_null(k6);
    fake_fail(k6, TG_OUT_UNAVAILABLE, "x");
    struct rec *all[] = {&r1, &r2, &r3, &r4, &r5, &r6};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(all[i]->nrelease, 1);
        rec_dispose(all[i]);
    }
    mw_free(m);
}

static void inflight_limit_429(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec r[5];
    struct tg_call *k[3];
    for (int i = 0; i < 5; i++)
        rec_init(&r[i]);
    k[0] = call_tool(m, s, &r[0], 0, "1", "echo");
    k[1] = call_tool(m, s, &r[1], 0, "2", "echo");
    call_tool(m, s, &r[2], 0, "3", "review"); /* parked calls count */
    k[2] = r[2].k;
    assert_int_equal(s->inflight, 3);
    assert_null(call_tool(m, s, &r[3], 0, "4", "echo"));
    assert_string_equal(r[3].trace.base, "answer release");
    assert_int_equal(r[3].status, 429);
    assert_string_equal(r[3].answer.base, "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32004,\"message\":"
                                          "\"Too many calls in flight for this session (limits.inflight_per_session)\"}}");
    assert_int_equal(m->srv.metrics.limit_inflight, 1);
    assert_int_equal(fake.nsend, 2);
    /* Notifications are not calls in flight. */
    struct rec rn;
    rec_init(&rn);
    mw_send(m, s, fsink_new(&rn, 0), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}");
    fake_accepted(fake.last);
    assert_int_equal(rn.status, 202);
    rec_dispose(&rn);
    fake_answer(k[0], "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_int_equal(s->inflight, 2);
    struct tg_call *k4 = call_tool(m, s, &r[4], 0, "5", "echo");
    assert_non_null(k4);
    fake_fail(k[1], TG_OUT_UNAVAILABLE, "x");
    fake_fail(k4, TG_OUT_UNAVAILABLE, "x");
    tg_approvals_finish(k[2], 0, NULL, NULL);
    assert_int_equal(s->inflight, 0);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(r[i].nrelease, 1);
        rec_dispose(&r[i]);
    }
    mw_free(m);
}

/* ---- local lifecycle, streams, sessions ending ------------------------------------------ */

#define MW_CONF_LOCAL                                                                                              \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "audit = { file = \"%s/audit.log\"; };\n"                                                                      \
    "grants = ( { name = \"alice\"; anonymous = true; } );\n"                                                      \
    "upstreams = ( { name = \"main\"; url = \"http://127.0.0.1:9/mcp\"; initialize = \"local\";\n"                 \
    "    policy = \"%s/policy.json\"; } );\n"                                                                      \
    "# %s\n"

/* A local-initialize upstream: the gateway answers ping and initialized itself. */
static void local_lifecycle_answered_here(void **state)
{
    struct mw *m = mw_new_conf(FAKE_HTTP, MW_CONF_LOCAL);
    struct tg_session *s = mw_session(m, 0);
    struct rec r1, r2;
    rec_init(&r1);
    rec_init(&r2);
    mw_send(m, s, fsink_new(&r1, 0), "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}");
    assert_string_equal(r1.trace.base, "answer release");
    assert_string_equal(r1.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"result\":{}}");
    mw_send(m, s, fsink_new(&r2, 0), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}");
    assert_string_equal(r2.trace.base, "bare release");
    assert_int_equal(r2.status, 202);
    assert_int_equal(fake.nsend, 0);
    rec_dispose(&r1);
    rec_dispose(&r2);
    mw_free(m);
}

/* The session's stream of server messages (a GET stream), and how it ends. */
static void listen_opens_stream(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct tg_exchange x;
    mw_exchange(m, s, &x);
    struct rec r;
    rec_init(&r);
    assert_int_equal(tg_dispatch_listen(&x, fsink_new(&r, 0), 0), 0);
    assert_string_equal(fake.sent.base, "(stream)\n");
    assert_ptr_equal(s->get_stream, r.k);
    assert_int_equal(r.k->kind, KIND_GET);
    assert_string_equal(r.trace.base, "bind stream");
    assert_ptr_equal(tg_dispatch_get_stream_sink(s), tg_call_sink(r.k));
    const char *note = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}";
    assert_int_equal(tg_call_upstream_message(r.k, note, strlen(note), NULL), 0);
    assert_string_equal(r.messages.base, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n");
    tg_call_end_get_stream(s);
    assert_string_equal(r.trace.base, "bind stream message bare end release");
    assert_int_equal(r.status, 405);
    assert_string_equal(r.extra, "Allow: POST, DELETE\r\n");
    assert_null(s->get_stream);
    assert_null(tg_dispatch_get_stream_sink(s));
    rec_dispose(&r);
    /* A message-stream upstream needs no stream for a channel: the sink is not taken. */
    fake.kind = FAKE_LINK;
    struct rec r2;
    rec_init(&r2);
    struct tg_sink *sk = fsink_new(&r2, 0);
    assert_int_equal(tg_dispatch_listen(&x, sk, 1), -1);
    assert_string_equal(r2.trace.base ? r2.trace.base : "", "");
    free(sk);
    rec_dispose(&r2);
    mw_free(m);
}

/* DELETE: the upstream session ends, calls in flight are let go (client_gone, their
 * reservations kept) and their clients told; parked calls stay for the human. A channel's
 * client gone (TG_END_CLIENT_GONE) withdraws parked calls too. */
static void end_session(void **state)
{
    for (int how = 0; how < 2; how++) {
        struct mw *m = mw_new(FAKE_HTTP);
        struct tg_session *s = mw_session(m, 0);
        struct rec r1, r2;
        rec_init(&r1);
        rec_init(&r2);
        call_tool(m, s, &r1, 0, "1", "once");
        call_tool(m, s, &r2, 0, "2", "deploy");
        tg_session_ref(s);
        tg_dispatch_end_session(&m->srv, s, how ? TG_END_CLIENT_GONE : TG_END_DELETE);
        assert_int_equal(s->live, 0);
        assert_int_equal(fake.nclose, 1);
        assert_string_equal(r1.trace.base, "bind answer end release");
        cJSON *e = REC_ERROR(&r1, "1", TG_RPC_UPSTREAM, NULL);
        assert_string_equal(json_str(cJSON_GetObjectItemCaseSensitive(e, "error"), "message"),
                            "the session ended before the answer came");
        cJSON_Delete(e);
        /* DELETE and a client gone alike: its parked call goes with the session (before, a DELETE
         * left it in the queue, to be sent on a session that no longer was). */
        assert_string_equal(r2.trace.base, "bind answer release");
        e = REC_ERROR(&r2, "2", TG_RPC_APPROVAL, NULL);
        cJSON_Delete(e);
        assert_int_equal(m->srv.napprovals, 0);
        assert_int_equal(m->srv.approvals_bytes, 0);
        assert_int_equal(m->srv.metrics.refunds, 1); /* the parked deploy's */
        assert_string_equal(mw_audit(m), "approve cancelled allow/client_gone");
        tg_session_unref(s);
        rec_dispose(&r1);
        rec_dispose(&r2);
        mw_free(m);
    }
}

/* ---- a real sink: transports/batch.c on a channel ------------------------------------------ */

/* Each element of a batch is decided on its own; the answers go out as one array on the
 * channel when the last element is released, and the channel's reference is given back once.
 * A batch cannot wait for a human. */
static void batch_on_channel(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct rec ch;
    rec_init(&ch);
    struct tg_batch *b = tg_batch_new(&m->srv, NULL, fsink_new(&ch, 0), 0);
    char body[256];
    mw_send(m, s, tg_batch_element(b), mw_call(body, sizeof(body), "1", "echo"));
    struct tg_call *echo = fake.last;
    mw_send(m, s, tg_batch_element(b), mw_call(body, sizeof(body), "2", "rm"));
    mw_send(m, s, tg_batch_element(b), mw_call(body, sizeof(body), "3", "deploy"));
    mw_send(m, s, tg_batch_element(b), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}");
    struct tg_call *note = fake.last;
    assert_int_equal(fake.nsend, 2);
    assert_int_equal(m->srv.napprovals, 0);
    tg_batch_done(b); /* the dispatch loop is over; two elements are still out */
    assert_string_equal(ch.trace.base ? ch.trace.base : "", "");
    fake_accepted(note);
    assert_string_equal(ch.trace.base ? ch.trace.base : "", "");
    fake_answer(echo, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_string_equal(ch.trace.base, "message release");
    cJSON *d = NULL;
    struct tg_json_doc doc;
    assert_int_equal(tg_json_parse(ch.messages.base, ch.messages.len - 1, 100, 1, &doc, NULL, NULL), 0);
    d = doc.root;
    assert_int_equal(cJSON_GetArraySize(d), 3);
    int codes[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        cJSON *e = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(d, i), "error");
        codes[i] = cJSON_GetObjectItemCaseSensitive(e, "code")->valueint;
    }
    assert_int_equal(codes[0], TG_RPC_DENIED);
    assert_int_equal(codes[1], TG_RPC_APPROVAL);
    cJSON_Delete(d);
    assert_non_null(strstr(ch.messages.base, ",{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}]\n"));
    assert_int_equal(m->srv.metrics.refunds, 1); /* deploy's reservation */
    assert_string_equal(mw_audit(m), "deny rejected allow/ok");

    /* One message alone on a channel answers straight away, and may wait for a human. */
    struct rec ch2;
    rec_init(&ch2);
    b = tg_batch_new(&m->srv, NULL, fsink_new(&ch2, 0), 1);
    mw_send(m, s, tg_batch_element(b), mw_call(body, sizeof(body), "4", "review"));
    tg_batch_done(b);
    assert_int_equal(m->srv.napprovals, 1);
    struct tg_call *k = tg_container_of(m->srv.approvals.next, struct tg_call, alink);
    tg_approvals_finish(k, 0, "bob", NULL);
    assert_string_equal(ch2.trace.base, "message release");
    struct rec one;
    one.answer = ch2.messages;
    one.answer.len--; /* the "\n" */
    cJSON *e = REC_ERROR(&one, "4", TG_RPC_APPROVAL, NULL);
    cJSON_Delete(e);
    rec_dispose(&ch);
    rec_dispose(&ch2);
    mw_free(m);
}

#define MW_CONF_ONE_SESSION                                                                                        \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "grants = ( { name = \"alice\"; anonymous = true; max_sessions = 1; } );\n"                                    \
    "upstreams = ( { name = \"main\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\"; } );\n"       \
    "# %s %s\n"

/* A new session: the grant's cap (429) and draining (503). */
static void session_open_refusals(void **state)
{
    struct mw *m = mw_new_conf(FAKE_HTTP, MW_CONF_ONE_SESSION);
    struct tg_session *s = mw_session(m, 0);
    assert_int_equal(m->srv.metrics.sessions_created, 1);
    assert_ptr_equal(s->srv, &m->srv);
    struct tg_exchange x;
    mw_exchange(m, s, &x);
    x.sess = NULL;
    assert_int_equal(tg_dispatch_session_open(&x), 429);
    assert_null(x.sess);
    assert_int_equal(m->srv.metrics.limit_sessions, 1);
    m->srv.draining = 1;
    assert_int_equal(tg_dispatch_session_open(&x), 503);
    m->srv.draining = 0;
    tg_dispatch_end_session(&m->srv, s, TG_END_DELETE); /* the session goes: room for one */
    assert_int_equal(tg_dispatch_session_open(&x), 0);
    assert_non_null(x.sess);
    mw_free(m);
}

/* ---- 2026-07-28 input_required ---------------------------------------------------------- */

static void as_2026(struct tg_exchange *x)
{
    x->era = TG_ERA_2026;
    x->client_caps = TG_CAP_ELICITATION;
    snprintf(x->proto, sizeof(x->proto), "2026-07-28");
}

/* body as a 2026 client's request on s (an upstream session that speaks 2025). */
static void mw_send_2026(struct mw *m, struct tg_session *s, struct tg_sink *sk, const char *json)
{
    mw_send_with(m, s, sk, json, as_2026);
}

#define CALL_2026 "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"x\":1}"
#define META_2026 "\"_meta\":{\"io.modelcontextprotocol/protocolVersion\":\"2026-07-28\",\"io.modelcontextprotocol/clientCapabilities\":{}}"
#define ASK_2026 "{\"resultType\":\"input_required\",\"inputRequests\":{\"k1\":{\"method\":\"elicitation/create\",\"params\":{}}},\"requestState\":\"up-state\"}"

/* A call's arguments digest binds its envelope. Without a reader for it (no audit log) the call
 * keeps its arguments, once written for the upstream, and digests them only if the answer asks
 * for input; the envelope opens for the same arguments only, and an audit log opened since the
 * call began still gets the digest. */
static void input_required_sealed_for_the_arguments(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    tg_mcp_mrtr_init(&m->srv.mrtr, 16);
    struct tg_session *s = mw_session(m, 0);
    struct tg_audit *audit = m->srv.audit;
    char buf[512];
    for (int with_audit = 0; with_audit < 2; with_audit++) {
        m->srv.audit = with_audit ? audit : NULL;
        struct rec r;
        rec_init(&r);
        mw_send_2026(m, s, fsink_new(&r, 0), CALL_2026 "," META_2026 " }}");
        struct tg_call *k = fake.last;
        assert_non_null(k->mrtr);
        assert_int_equal(k->mrtr->args_state, with_audit ? TG_MRTR_ARGS_DIGEST : TG_MRTR_ARGS_KEPT);
        /* written before the arguments are kept; the claim left out of the client's own bytes */
        snprintf(buf, sizeof(buf),
                 "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
                 "\"arguments\":{\"x\":1} }}",
                 k->gid_str);
        assert_string_equal(fake.last_body.base, buf);
        fake_answer(k, answer_for_gid(buf, sizeof(buf), ASK_2026));
        assert_int_equal(r.status, 200);
        cJSON *a = cJSON_Parse(r.answer.base);
        const char *tok = json_str(cJSON_GetObjectItem(a, "result"), "requestState");
        assert_non_null(tok);
        assert_string_not_equal(tok, "up-state");
        char retry[1024];
        /* other arguments: refused, and the envelope is not used up */
        struct rec r2;
        rec_init(&r2);
        int before = fake.nsend;
        snprintf(retry, sizeof(retry),
                 "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\","
                 "\"arguments\":{\"x\":2},\"requestState\":\"%s\",\"inputResponses\":{\"k1\":{}}}}", tok);
        mw_send_2026(m, s, fsink_new(&r2, 0), retry);
        assert_int_equal(fake.nsend, before);
        assert_non_null(strstr(r2.answer.base, "\"code\":-32602"));
        rec_dispose(&r2);
        /* the same arguments: the upstream gets its own state back */
        rec_init(&r2);
        snprintf(retry, sizeof(retry), CALL_2026 ", \"requestState\":\"%s\",\"inputResponses\":{\"k1\":{}}," META_2026 "}}",
                 tok);
        mw_send_2026(m, s, fsink_new(&r2, 0), retry);
        assert_int_equal(fake.nsend, before + 1);
        /* a retry's params are changed: written from the tree */
        assert_non_null(strstr(fake.last_body.base, "\"arguments\":{\"x\":1},\"requestState\":\"up-state\",\"inputResponses\":{\"k1\":{}}}}"));
        fake_answer(fake.last, answer_for_gid(buf, sizeof(buf), "{\"content\":[]}"));
        assert_non_null(strstr(r2.answer.base, "\"resultType\":\"complete\""));
        rec_dispose(&r2);
        cJSON_Delete(a);
        rec_dispose(&r);
    }
    /* an audit log opened while the call ran: its line has the digest all the same */
    m->srv.audit = NULL;
    struct rec r;
    rec_init(&r);
    mw_send_2026(m, s, fsink_new(&r, 0), CALL_2026 "}}");
    struct tg_call *k = fake.last;
    assert_int_equal(k->mrtr->args_state, TG_MRTR_ARGS_KEPT);
    m->srv.audit = audit;
    mw_audit(m);
    fake_answer(k, answer_for_gid(buf, sizeof(buf), "{\"content\":[]}"));
    cJSON *a = mw_audit_last(m);
    char want[65];
    cJSON *args = cJSON_Parse("{\"x\":1}");
    tg_audit_args_hash(args, want);
    cJSON_Delete(args);
    assert_string_equal(json_str(a, "args_sha256"), want);
    cJSON_Delete(a);
    rec_dispose(&r);
    tg_mcp_mrtr_dispose(&m->srv.mrtr);
    mw_free(m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(allow_forwards_with_our_id),
        cmocka_unit_test(undecided_request_forwarded),
        cmocka_unit_test(deny_answers_32001_never_sent),
        cmocka_unit_test(forwarded_bytes_as_sent_unless_changed),
        cmocka_unit_test(protocol_refusals),
        cmocka_unit_test(limit_answers_32002),
        cmocka_unit_test(limit_refunds_only_what_did_not_run),
        cmocka_unit_test(approve_parks_then_sends),
        cmocka_unit_test(approve_refused_or_expired),
        cmocka_unit_test(approve_refused_without_parking),
        cmocka_unit_test(approved_send_fails_synchronously),
        cmocka_unit_test(decision_answer_reenters_call),
        cmocka_unit_test(parked_client_gone),
        cmocka_unit_test(cancel_forwarded_with_our_id),
        cmocka_unit_test(cancel_unknown_is_dropped),
        cmocka_unit_test(cancel_parked_withdraws),
        cmocka_unit_test(duplicate_id_refused),
        cmocka_unit_test(inflight_limit_429),
        cmocka_unit_test(local_lifecycle_answered_here),
        cmocka_unit_test(listen_opens_stream),
        cmocka_unit_test(end_session),
        cmocka_unit_test(batch_on_channel),
        cmocka_unit_test(session_open_refusals),
        cmocka_unit_test(input_required_sealed_for_the_arguments),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
