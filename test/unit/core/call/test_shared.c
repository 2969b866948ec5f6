/* core/call/shared.c, the local shared store, through its interface (core/call/shared.h): every
 * operation answers before it returns; decisions reserve on the server's counters and refunds
 * give them back; no session is shared; the approvals queue is the server's own. And the gate's
 * one continuation (core/gate/dispatch.c on_decided) behind a store that answers later, as a
 * cluster's does: the same bytes go upstream, a failed store fails closed, and a call that closes
 * while its decision waits is detached from it.
 *
 * The policy (test/unit/core/middle.h): echo allowed, once a bucket of 1, deploy approval and a
 * bucket of 1. */
#include "test/unit/core/middle.h"

#include "core/call/shared.h"

/* ---- the local store ---------------------------------------------------------------------- */

struct answer {
    int calls;   /* how many times the callback ran */
    int inside;  /* it ran while the operation had not returned */
    enum tg_shared_outcome o;
    struct tg_decision *d;
    int found;
    int rc;
    size_t n;
    char first_id[40];
    char first_tool[40];
    int instance_null;
    int first_decided;
    char first_by[40];
};

static int in_op; /* 1 while a store operation runs (the callback notes it) */

static void on_decided(void *ud, enum tg_shared_outcome o, struct tg_decision *d, const char *why)
{
    struct answer *a = ud;
    a->calls++;
    a->inside = in_op;
    a->o = o;
    a->d = d;
    (void)why;
}

static enum tg_verdict decide(struct mw *m, struct tg_session *s, const char *tool, int continuation,
                              struct tg_decision *d)
{
    struct tg_shared *st = &m->srv.store;
    const struct tg_grant_conf *g = tg_conf_find_grant(m->srv.conf, "alice");
    struct tg_shared_ask q = {tg_conf_policy_for(m->srv.conf, g, 0), {"alice", s->id_str, "main", NULL, NULL}, tool, NULL,
                              1700000000000LL, continuation};
    struct answer a = {0};
    in_op = 1;
    struct tg_shared_job *job = st->ops->decide(st->ud, &q, d, on_decided, &a);
    in_op = 0;
    assert_null(job);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.inside, 1);
    assert_int_equal(a.o, TG_SHARED_DECIDED);
    assert_ptr_equal(a.d, d);
    assert_int_equal(d->shared, 0);
    return d->verdict;
}

static void local_decide_and_refund(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct tg_decision d1, d2, d3;
    assert_int_equal(decide(m, s, "echo", 0, &d1), TG_VERDICT_ALLOW);
    assert_int_equal(d1.nres, 0);
    assert_int_equal(decide(m, s, "once", 0, &d1), TG_VERDICT_ALLOW);
    assert_int_equal(d1.nres, 1);
    assert_int_equal(decide(m, s, "once", 0, &d2), TG_VERDICT_LIMITED); /* the bucket of 1 is spent */
    /* A later round of a call decided already is judged again without reserving. */
    assert_int_equal(decide(m, s, "once", 1, &d3), TG_VERDICT_ALLOW);
    m->srv.store.ops->refund(m->srv.store.ud, &d1);
    assert_int_equal(decide(m, s, "once", 1, &d3), TG_VERDICT_ALLOW);
    assert_int_equal(decide(m, s, "once", 0, &d2), TG_VERDICT_ALLOW); /* the refund gave the token back */
    assert_int_equal(decide(m, s, "once", 0, &d3), TG_VERDICT_LIMITED);
    mw_free(m);
}

static void on_record(void *ud, int found, const struct tg_shared_session_rec *rec, const char *why)
{
    struct answer *a = ud;
    a->calls++;
    a->inside = in_op;
    a->found = found;
    (void)rec;
    (void)why;
}

static void local_sessions_are_nobody_elses(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct tg_shared *st = &m->srv.store;
    s->live = 1;
    st->ops->session_share(st->ud, s, &m->srv.conf->upstreams[0]);
    assert_int_equal(s->shared, 0);
    st->ops->session_used(st->ud, s, 1000);
    st->ops->session_forget(st->ud, s->id_str);
    assert_non_null(tg_session_find(m->srv.sessions, tg_slice_cstr(s->id_str))); /* forgetting is the cluster's */
    struct answer a = {0};
    in_op = 1;
    st->ops->session_fetch(st->ud, "0123456789abcdef0123456789abcdef", on_record, &a);
    in_op = 0;
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.inside, 1);
    assert_int_equal(a.found, 0);
    mw_free(m);
}

static void on_listed(void *ud, const struct tg_approval_item *items, size_t n)
{
    struct answer *a = ud;
    a->calls++;
    a->inside = in_op;
    a->n = n;
    if (n > 0) {
        snprintf(a->first_id, sizeof(a->first_id), "%s", items[0].id);
        snprintf(a->first_tool, sizeof(a->first_tool), "%s", items[0].tool);
        a->instance_null = items[0].instance == NULL;
        a->first_decided = items[0].decision != NULL;
        snprintf(a->first_by, sizeof(a->first_by), "%s", items[0].by ? items[0].by : "");
    }
}

static void on_approval(void *ud, int rc, const char *why)
{
    struct answer *a = ud;
    a->calls++;
    a->inside = in_op;
    a->rc = rc;
    (void)why;
}

static void local_approvals_queue(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    struct tg_shared *st = &m->srv.store;
    struct rec r;
    rec_init(&r);
    char body[256];
    mw_send(m, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "\"d1\"", "deploy"));
    assert_int_equal(fake.nsend, 0); /* parked */
    assert_int_equal(m->srv.napprovals, 1);

    struct answer a = {0};
    in_op = 1;
    st->ops->approvals_list(st->ud, on_listed, &a);
    in_op = 0;
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.inside, 1);
    assert_int_equal(a.n, 1);
    assert_string_equal(a.first_id, r.k->approval_id);
    assert_string_equal(a.first_tool, "deploy");
    assert_true(a.instance_null);

    memset(&a, 0, sizeof(a));
    in_op = 1;
    st->ops->approval_decide(st->ud, tg_slice_cstr("00000000000000000000000000000000"), 1, NULL, "bob", NULL, on_approval,
                             &a);
    in_op = 0;
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.inside, 1);
    assert_int_equal(a.rc, TG_APPROVAL_UNKNOWN);
    assert_int_equal(fake.nsend, 0);

    /* an approve without the call's digest, or with another, runs nothing: it stays parked */
    static const char *const wrong[] = {NULL, "", "0000000000000000000000000000000000000000000000000000000000000000"};
    for (size_t i = 0; i < 3; i++) {
        memset(&a, 0, sizeof(a));
        st->ops->approval_decide(st->ud, tg_slice_cstr(r.k->approval_id), 1, wrong[i], "bob", NULL, on_approval, &a);
        assert_int_equal(a.calls, 1);
        assert_int_equal(a.rc, TG_APPROVAL_STALE);
        assert_int_equal(m->srv.napprovals, 1);
        assert_int_equal(fake.nsend, 0);
    }
    assert_int_equal(strlen(r.k->approval_digest), 64);

    memset(&a, 0, sizeof(a));
    in_op = 1;
    st->ops->approval_decide(st->ud, tg_slice_cstr(r.k->approval_id), 1, r.k->approval_digest, "bob", NULL, on_approval, &a);
    in_op = 0;
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.inside, 1);
    assert_int_equal(a.rc, 0);
    assert_int_equal(m->srv.napprovals, 0);
    assert_int_equal(fake.nsend, 1); /* approved: sent */
    /* listed as decided, by whom */
    struct answer l = {0};
    st->ops->approvals_list(st->ud, on_listed, &l);
    assert_int_equal(l.n, 1);
    assert_true(l.first_decided);
    assert_string_equal(l.first_by, "bob");
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"d1\",\"result\":{}}");
    rec_dispose(&r);
    mw_free(m);
}

/* ---- the gate behind a store that answers later ------------------------------------------- */

/* A store whose decisions wait until the test answers them (as a cluster's do for Redis); every
 * other operation is the local store's. */
static struct later {
    struct tg_shared local;
    tg_shared_decided_cb cb;
    void *cb_ud;
    struct tg_decision *d;
    int decides, detaches;
    int job; /* the handle's storage */
} later;

static struct tg_shared_job *later_decide(void *ud, const struct tg_shared_ask *q, struct tg_decision *d,
                                          tg_shared_decided_cb cb, void *cb_ud)
{
    (void)ud;
    (void)q;
    later.decides++;
    later.cb = cb;
    later.cb_ud = cb_ud;
    later.d = d;
    memset(d, 0, sizeof(*d));
    d->verdict = TG_VERDICT_DENY; /* until the answer comes */
    return (struct tg_shared_job *)&later.job;
}

static void later_detach(void *ud, struct tg_shared_job *job)
{
    (void)ud;
    assert_ptr_equal(job, &later.job);
    later.detaches++;
    later.cb = NULL;
}

static struct tg_shared_ops later_ops;

static void install_later(struct mw *m)
{
    memset(&later, 0, sizeof(later));
    later.local = m->srv.store;
    later_ops = *later.local.ops;
    later_ops.decide = later_decide;
    later_ops.detach = later_detach;
    m->srv.store.ops = &later_ops;
}

/* The answer comes: verdict v, decided on this member's counters (FALLBACK) or shared. */
static void later_answer(enum tg_shared_outcome o, enum tg_verdict v, const char *why)
{
    assert_non_null(later.cb);
    tg_shared_decided_cb cb = later.cb;
    later.cb = NULL;
    if (o == TG_SHARED_UNAVAILABLE) {
        cb(later.cb_ud, o, NULL, why);
        return;
    }
    struct tg_decision d = {0};
    d.verdict = v;
    snprintf(d.rule, sizeof(d.rule), "tools.x");
    snprintf(d.message, sizeof(d.message), "decided later");
    cb(later.cb_ud, o, &d, NULL);
}

/* The bytes the upstream gets for an allowed call are the same whether its decision came inline
 * or later; a call that waits has not been sent. */
static void later_allow_sends_the_same_bytes(void **state)
{
    char inline_body[512];
    struct rec r;
    char body[256];
    {
        struct mw *m = mw_new(FAKE_HTTP);
        struct tg_session *s = mw_session(m, 0);
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "\"e1\"", "echo"));
        assert_int_equal(fake.nsend, 1);
        snprintf(inline_body, sizeof(inline_body), "%s", fake.last_body.base);
        fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
        rec_dispose(&r);
        mw_free(m);
    }
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    install_later(m);
    rec_init(&r);
    mw_send(m, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "\"e1\"", "echo"));
    assert_int_equal(later.decides, 1);
    assert_int_equal(fake.nsend, 0); /* waits */
    assert_string_equal(r.trace.base, "bind");
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_DENY], 0); /* not counted until decided */
    later_answer(TG_SHARED_DECIDED, TG_VERDICT_ALLOW, NULL);
    assert_int_equal(fake.nsend, 1);
    assert_string_equal(fake.last_body.base, inline_body);
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_ALLOW], 1);
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"e1\",\"result\":{}}");
    assert_int_equal(later.detaches, 0);
    rec_dispose(&r);
    mw_free(m);
}

/* Decided later to need approval: it parks, as an inline decision does, and is sent when approved. */
static void later_approve_parks(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    install_later(m);
    struct rec r;
    rec_init(&r);
    char body[256];
    mw_send(m, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "\"d1\"", "deploy"));
    later_answer(TG_SHARED_FALLBACK, TG_VERDICT_APPROVE, NULL);
    assert_int_equal(m->srv.napprovals, 1);
    assert_int_equal(fake.nsend, 0);
    assert_int_equal(strlen(r.k->args_sha256), 64); /* the queue shows the digest */
    tg_approvals_finish(r.k, 1, "bob", NULL);
    assert_int_equal(fake.nsend, 1);
    assert_non_null(strstr(fake.last_body.base, "\"name\":\"deploy\""));
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"d1\",\"result\":{}}");
    rec_dispose(&r);
    mw_free(m);
}

/* Decided later to deny, or the store failed: refused as inline, never sent. */
static void later_deny_and_unavailable(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    install_later(m);
    struct rec r;
    rec_init(&r);
    char body[256];
    mw_send(m, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "1", "echo"));
    later_answer(TG_SHARED_DECIDED, TG_VERDICT_DENY, NULL);
    cJSON *e = REC_ERROR(&r, "1", TG_RPC_DENIED, NULL);
    cJSON_Delete(e);
    assert_string_equal(r.trace.base, "bind answer release");
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_DENY], 1);
    rec_dispose(&r);

    rec_init(&r);
    mw_send(m, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "2", "echo"));
    later_answer(TG_SHARED_UNAVAILABLE, 0, "the shared counter store (Redis) is not connected");
    cJSON *data = NULL;
    e = REC_ERROR(&r, "2", TG_RPC_UPSTREAM, &data);
    assert_string_equal(json_str(data, "reason"), "the shared counter store (Redis) is not connected");
    assert_string_equal(json_str(data, "upstream"), "main");
    cJSON_Delete(e);
    assert_int_equal(fake.nsend, 0);
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_DENY], 2);
    assert_string_equal(mw_audit(m), "deny unavailable");
    rec_dispose(&r);
    mw_free(m);
}

/* The client goes while the decision waits: the call is detached from it, and nothing is sent. */
static void later_client_gone_detaches(void **state)
{
    struct mw *m = mw_new(FAKE_HTTP);
    struct tg_session *s = mw_session(m, 0);
    install_later(m);
    struct rec r;
    rec_init(&r);
    char body[256];
    mw_send(m, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "1", "echo"));
    assert_non_null(later.cb);
    tg_call_close(r.k);
    assert_int_equal(later.detaches, 1);
    assert_null(later.cb);
    assert_int_equal(fake.nsend, 0);
    rec_dispose(&r);
    mw_free(m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(local_decide_and_refund),
        cmocka_unit_test(local_sessions_are_nobody_elses),
        cmocka_unit_test(local_approvals_queue),
        cmocka_unit_test(later_allow_sends_the_same_bytes),
        cmocka_unit_test(later_approve_parks),
        cmocka_unit_test(later_deny_and_unavailable),
        cmocka_unit_test(later_client_gone_detaches),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
