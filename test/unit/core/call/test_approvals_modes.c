/* core/call/approvals_modes.c: retry mode through the gate (core/gate/dispatch.c) with a fake
 * upstream kind. A call that needs approval is answered at once and kept as a record; identical
 * calls share it; once approved, the call made again runs once, and gets it back when it
 * certainly did not run; denied, the call made again hears the reason. The canonical arguments:
 * members in any order are one call, 1 and 1.0 are two.
 *
 * The policy (test/unit/core/middle.h): review needs approval (no limits); the upstream "main"
 * has approval_mode = "retry" here. */
#include "test/unit/core/middle.h"

#include "core/call/approvals_modes.h"

#define RETRY_CONF                                                                                                 \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "limits = { inflight_per_session = 3; approvals_max = 2; approvals_per_grant = 2;"                             \
    " approval_ttl_ms = 60000; };\n"                                                                               \
    "audit = { file = \"%s/audit.log\"; };\n"                                                                      \
    "grants = ( { name = \"alice\"; anonymous = true; } );\n"                                                      \
    "upstreams = (\n"                                                                                              \
    "  { name = \"main\"; url = \"http://127.0.0.1:9/mcp\"; default = true; call_timeout_ms = 20;\n"               \
    "    policy = \"%s/policy.json\"; approval_mode = \"retry\"; },\n"                                            \
    "  { name = \"side\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\"; }\n"                      \
    ");\n"

/* review with arguments args (JSON text), id id: the call if it reached the upstream. */
static struct tg_call *review(struct mw *m, struct tg_session *s, struct rec *r, const char *id, const char *args)
{
    char body[512];
    snprintf(body, sizeof(body),
             "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\",\"params\":{\"name\":\"review\",\"arguments\":%s}}",
             id, args);
    int before = fake.nsend;
    rec_init(r);
    mw_send(m, s, fsink_new(r, 0), body);
    return fake.nsend > before ? fake.last : NULL;
}

/* An answer to the call the fake upstream got last. */
static const char *answer_for(char *buf, size_t n)
{
    snprintf(buf, n, "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"result\":{\"content\":[]}}",
             (unsigned long long)fake_last_gid());
    return buf;
}

/* The pending answer's approval id (copied into out). */
static void pending(struct rec *r, const char *id, char out[33])
{
    cJSON *data;
    cJSON *root = REC_ERROR(r, id, -32003, &data);
    assert_string_equal(json_str(data, "status"), "pending");
    assert_string_equal(json_str(data, "approve_url"), "/admin/ui/"); /* no public_url, no admin listener */
    assert_non_null(strstr(r->answer.base, "ask the user to approve it, then call review again with the same arguments"));
    snprintf(out, 33, "%s", json_str(data, "approval_id"));
    assert_int_equal(strlen(out), 32);
    cJSON_Delete(root);
    rec_dispose(r);
}

static void decided(void *ud, int rc, const char *why)
{
    (void)why;
    *(int *)ud = rc;
}

static void decide(struct mw *m, const char *id, int approve, const char *reason)
{
    int rc = 1;
    struct tg_call *k = tg_approvals_find(&m->srv, tg_slice_cstr(id));
    assert_non_null(k);
    tg_approvals_local_decide(&m->srv, tg_slice_cstr(id), approve, k->approval_digest, "carol", reason, decided, &rc);
    assert_int_equal(rc, 0);
}

static void end(struct mw *m)
{
    tg_approvals_abort(&m->srv); /* pending and decided records go */
    mw_free(m);
}

static void retry_runs_once_and_gets_it_back_if_it_did_not_run(void **state)
{
    (void)state;
    struct mw *m = mw_new_conf(FAKE_HTTP, RETRY_CONF);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    char a1[33], a2[33], a3[33];
    assert_null(review(m, s, &r, "1", "{\"b\":1,\"a\":[1.5,{\"y\":2,\"x\":1}]}"));
    pending(&r, "1", a1);
    assert_int_equal(m->srv.napprovals, 1);
    assert_int_equal(s->inflight, 0); /* the record holds no slot of its session */
    assert_null(review(m, s, &r, "2", "{\"a\":[1.5,{\"x\":1,\"y\":2}],\"b\":1}"));
    pending(&r, "2", a2);
    assert_string_equal(a2, a1); /* the same call, members in another order: one approval */
    assert_int_equal(m->srv.napprovals, 1);
    assert_null(review(m, s, &r, "3", "{\"a\":[1.50,{\"x\":1,\"y\":2}],\"b\":1}"));
    pending(&r, "3", a3);
    assert_string_not_equal(a3, a1); /* 1.50 is not 1.5 as written */
    decide(m, a3, 0, NULL);
    decide(m, a1, 1, NULL);
    assert_int_equal(m->srv.napprovals, 0);
    assert_int_equal(fake.nsend, 0); /* nothing runs at the approval */

    struct tg_call *k = review(m, s, &r, "4", "{\"b\":1,\"a\":[1.5,{\"y\":2,\"x\":1}]}");
    assert_non_null(k);
    assert_string_equal(k->approval_id, a1);
    fake_fail(k, TG_OUT_NOT_SENT, "connection refused"); /* it never reached the upstream */
    rec_dispose(&r);
    tg_call_run_pending(&m->srv);
    k = review(m, s, &r, "5", "{\"b\":1,\"a\":[1.5,{\"y\":2,\"x\":1}]}");
    assert_non_null(k); /* the approval was given back */
    char buf[256];
    fake_answer(k, answer_for(buf, sizeof(buf)));
    rec_dispose(&r);
    tg_call_run_pending(&m->srv);
    assert_null(review(m, s, &r, "6", "{\"b\":1,\"a\":[1.5,{\"y\":2,\"x\":1}]}"));
    char a4[33];
    pending(&r, "6", a4); /* used: a new approval */
    assert_string_not_equal(a4, a1);
    assert_int_equal(fake.nsend, 2);
    end(m);
}

static void retry_denied_says_why(void **state)
{
    (void)state;
    struct mw *m = mw_new_conf(FAKE_HTTP, RETRY_CONF);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    char a1[33];
    assert_null(review(m, s, &r, "1", "{}"));
    pending(&r, "1", a1);
    decide(m, a1, 0, "not today");
    assert_null(review(m, s, &r, "2", "{}"));
    cJSON *data;
    cJSON *root = REC_ERROR(&r, "2", -32003, &data);
    assert_string_equal(json_str(data, "status"), "denied");
    assert_string_equal(json_str(data, "reason"), "not today");
    assert_string_equal(json_str(data, "approval_id"), a1);
    cJSON_Delete(root);
    rec_dispose(&r);
    /* no arguments and {} are one call */
    char body[200];
    snprintf(body, sizeof(body), "{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"tools/call\",\"params\":{\"name\":\"review\"}}");
    rec_init(&r);
    mw_send(m, s, fsink_new(&r, 0), body);
    root = REC_ERROR(&r, "3", -32003, &data);
    assert_string_equal(json_str(data, "status"), "denied");
    cJSON_Delete(root);
    rec_dispose(&r);
    assert_int_equal(fake.nsend, 0);
    end(m);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(retry_runs_once_and_gets_it_back_if_it_did_not_run),
        cmocka_unit_test(retry_denied_says_why),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
