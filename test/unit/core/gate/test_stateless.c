/* core/gate/stateless.c: the way a stateless (2026-07-28) request takes into the gate, through the
 * bridge's admission (core/bridge/stateless.c) and the gate's one continuation, on_admitted.
 *
 * Requests come in as transports/streamable.c hands them on once their claim is checked:
 * tg_stateless_session finds or opens the grant's session, tg_stateless_request asks the bridge
 * and the gate decides. Upstream "main" speaks 2025 (protocol = "2025": no probe), so the first
 * request parks while the bridge sends its own initialize and notifications/initialized as calls
 * of its own. The loop's flush (tg_bridge_run_pending, tg_call_run_pending) is run by hand.
 * Scaffolding: test/unit/core/middle.h (fake upstream kind, recording fake sink). */
#include "test/unit/core/middle.h"

#include "core/bridge/input.h"
#include "core/bridge/stateless.h"
#include "core/gate/stateless.h"
#include "core/mcp/era.h"
#include "core/mcp/mrtr.h"

/* MW_CONF, with upstream main's era known from the conf. */
#define STL_CONF                                                                                                   \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "limits = { inflight_per_session = 3; approvals_max = 2; };\n"                                                 \
    "audit = { file = \"%s/audit.log\"; };\n"                                                                      \
    "grants = ( { name = \"alice\"; anonymous = true; } );\n"                                                      \
    "upstreams = (\n"                                                                                              \
    "  { name = \"main\"; url = \"http://127.0.0.1:9/mcp\"; default = true; call_timeout_ms = 20;\n"               \
    "    protocol = \"2025\"; policy = \"%s/policy.json\"; },\n"                                                   \
    "  { name = \"side\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\"; }\n"                      \
    ");\n"

#define CALL_ECHO "{\"jsonrpc\":\"2.0\",\"id\":5,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"x\":1}}}"
#define CALL_RM "{\"jsonrpc\":\"2.0\",\"id\":6,\"method\":\"tools/call\",\"params\":{\"name\":\"rm\",\"arguments\":{}}}"
#define DISCOVER "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"server/discover\"}"
#define NOTIFY_INIT "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"

static struct mw *stl_mw(void)
{
    struct mw *m = mw_new_conf(FAKE_HTTP, STL_CONF);
    tg_list_init(&m->srv.shims);
    tg_mcp_mrtr_init(&m->srv.mrtr, 16);
    return m;
}

static void stl_mw_free(struct mw *m)
{
    tg_bridge_dispose(&m->srv); /* before the session table goes, as the app's shutdown */
    tg_bridge_input_dispose(&m->srv);
    tg_mcp_mrtr_dispose(&m->srv.mrtr);
    mw_free(m);
}

/* A stateless request of grant alice on upstream main, through sk (taken over), as the edge
 * passes it on. Returns the grant's stateless session. */
static struct tg_session *stl_send(struct mw *m, struct tg_sink *sk, const char *json)
{
    struct tg_exchange x = {0};
    x.srv = &m->srv;
    x.grant = tg_conf_find_grant(m->srv.conf, "alice");
    x.upstream = 0;
    x.uc = &m->srv.conf->upstreams[0];
    assert_int_equal(tg_stateless_session(&x), 0);
    assert_non_null(x.sess);
    x.era = TG_ERA_2026;
    snprintf(x.proto, sizeof(x.proto), "2026-07-28");
    struct tg_msg msg;
    const char *why = NULL;
    if (tg_msg_decode(json, strlen(json), 64, &msg, &why) != 0)
        fail_msg("test message does not decode (%s): %s", why, json);
    tg_stateless_request(&x, sk, &msg);
    tg_msg_dispose(&msg);
    return x.sess;
}

/* The loop's flush, until nothing waits for the next round. */
static void pump(struct mw *m)
{
    for (int i = 0; i < 16; i++) {
        tg_bridge_run_pending(&m->srv);
        tg_call_run_pending(&m->srv);
        if (!tg_bridge_pending(&m->srv))
            return;
    }
    fail_msg("the bridge keeps asking for another round");
}

/* The sink's operations so far ("" before the first). */
static const char *trace_of(const struct rec *r) { return r->trace.base != NULL ? r->trace.base : ""; }
#define TRACE(r) trace_of(r)

static char *answer_for_gid(char *buf, size_t n, const char *result)
{
    snprintf(buf, n, "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"result\":%s}", (unsigned long long)fake_last_gid(), result);
    return buf;
}

/* The upstream's line i (from 0) of what it was sent, or NULL. */
static const char *sent_line(int i, char *buf, size_t n)
{
    const char *p = fake.sent.base != NULL ? fake.sent.base : "";
    for (; i > 0; i--) {
        p = strchr(p, '\n');
        if (p == NULL)
            return NULL;
        p++;
    }
    const char *e = strchr(p, '\n');
    if (e == NULL)
        return NULL;
    snprintf(buf, n, "%.*s", (int)(e - p), p);
    return buf;
}

/* The upstream session is booted: the bridge's initialize (the last body) is answered with
 * capabilities, its notifications/initialized accepted. */
static void boot_ok(struct mw *m)
{
    char buf[512], line[512];
    int before = fake.nsend;
    pump(m);
    assert_int_equal(fake.nsend, before + 1); /* the bridge's initialize */
    assert_non_null(strstr(fake.last_body.base, "\"method\":\"initialize\""));
    assert_non_null(strstr(fake.last_body.base, "\"clientInfo\":{\"name\":\"tollgate\""));
    fake_answer(fake.last, answer_for_gid(buf, sizeof(buf),
                                          "{\"protocolVersion\":\"2025-11-25\",\"capabilities\":{\"tools\":{\"listChanged\":true}},"
                                          "\"serverInfo\":{\"name\":\"up\",\"version\":\"1\"}}"));
    pump(m);
    assert_int_equal(fake.nsend, before + 2); /* then its notifications/initialized */
    assert_string_equal(sent_line(before + 1, line, sizeof(line)), NOTIFY_INIT);
    fake_accepted(fake.last);
    pump(m);
}

/* (1) The first stateless request of a grant opens the grant's session and waits while the
 * bridge makes the upstream session; then the gate decides it and it goes up, after the
 * bridge's initialize and notifications/initialized, and its answer reaches the client. */
static void first_request_parks_until_booted(void **state)
{
    struct mw *m = stl_mw();
    char buf[512], line[512];
    struct rec r;
    rec_init(&r);
    size_t sessions = tg_session_count_for_grant(m->srv.sessions, "alice");
    struct tg_session *s = stl_send(m, fsink_new(&r, TG_SINK_STATELESS), CALL_ECHO);
    assert_int_equal(tg_session_count_for_grant(m->srv.sessions, "alice"), sessions + 1);
    assert_int_equal(m->srv.nstateless, 1);
    assert_ptr_equal(m->srv.stateless[0], s);
    assert_int_equal(fake.nsend, 0);   /* nothing goes up from inside the request */
    assert_string_equal(TRACE(&r), ""); /* parked: the sink is untouched */
    boot_ok(m);
    /* Ready: the waiter went through the gate and up, the third thing the upstream heard. */
    assert_int_equal(fake.nsend, 3);
    assert_non_null(strstr(sent_line(0, line, sizeof(line)), "\"method\":\"initialize\""));
    assert_string_equal(sent_line(1, line, sizeof(line)), NOTIFY_INIT);
    assert_non_null(strstr(sent_line(2, line, sizeof(line)), "\"method\":\"tools/call\""));
    assert_non_null(strstr(line, "\"name\":\"echo\""));
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_ALLOW], 1);
    assert_string_equal(TRACE(&r), "bind");
    fake_answer(fake.last, answer_for_gid(buf, sizeof(buf), "{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}"));
    assert_int_equal(r.nanswer, 1);
    assert_int_equal(r.nrelease, 1);
    assert_int_equal(r.status, 200);
    cJSON *a = cJSON_Parse(r.answer.base);
    assert_non_null(a);
    assert_int_equal(cJSON_GetObjectItem(a, "id")->valueint, 5); /* the client's own id */
    assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(a, "result"), "content"));
    cJSON_Delete(a);
    assert_int_equal(s->inflight, 0);
    rec_dispose(&r);
    stl_mw_free(m);
}

/* (2) A later request of the grant finds the same session, ready: it goes up at once, with no
 * second initialize. */
static void second_request_reuses_session(void **state)
{
    struct mw *m = stl_mw();
    char buf[512], line[512];
    struct rec r1, r2;
    rec_init(&r1);
    rec_init(&r2);
    struct tg_session *s = stl_send(m, fsink_new(&r1, TG_SINK_STATELESS), CALL_ECHO);
    boot_ok(m);
    fake_answer(fake.last, answer_for_gid(buf, sizeof(buf), "{\"content\":[]}"));
    assert_int_equal(r1.nanswer, 1);
    size_t sessions = tg_session_count_for_grant(m->srv.sessions, "alice");
    assert_ptr_equal(stl_send(m, fsink_new(&r2, TG_SINK_STATELESS), CALL_ECHO), s);
    assert_int_equal(tg_session_count_for_grant(m->srv.sessions, "alice"), sessions);
    assert_int_equal(m->srv.nstateless, 1);
    assert_int_equal(fake.nsend, 4); /* straight up: decided inside the request */
    assert_non_null(strstr(sent_line(3, line, sizeof(line)), "\"method\":\"tools/call\""));
    const char *init = strstr(fake.sent.base, "\"method\":\"initialize\"");
    assert_non_null(init);
    assert_null(strstr(init + 1, "\"method\":\"initialize\"")); /* one initialize, the first one */
    assert_false(tg_bridge_pending(&m->srv));
    fake_answer(fake.last, answer_for_gid(buf, sizeof(buf), "{\"content\":[]}"));
    pump(m);
    assert_int_equal(fake.nsend, 4);
    assert_string_equal(TRACE(&r2), "bind answer end release");
    assert_non_null(strstr(r2.answer.base, "\"id\":5"));
    rec_dispose(&r1);
    rec_dispose(&r2);
    stl_mw_free(m);
}

/* (3) The upstream refuses the bridge's initialize, or it fails: the parked request is refused
 * -32004 through its own sink, and nothing of it went up. */
static void refused_boot_refuses_waiter(void **state)
{
    for (int refuse = 1; refuse >= 0; refuse--) {
        struct mw *m = stl_mw();
        char buf[512];
        struct rec r;
        rec_init(&r);
        stl_send(m, fsink_new(&r, TG_SINK_STATELESS), CALL_ECHO);
        pump(m);
        assert_int_equal(fake.nsend, 1);
        assert_non_null(strstr(fake.last_body.base, "\"method\":\"initialize\""));
        if (refuse) {
            snprintf(buf, sizeof(buf), "{\"jsonrpc\":\"2.0\",\"id\":%llu,\"error\":{\"code\":-32600,\"message\":\"no thanks\"}}",
                     (unsigned long long)fake_last_gid());
            fake_answer(fake.last, buf);
        } else {
            fake_fail(fake.last, TG_OUT_TIMEOUT, "upstream main timed out (test)");
        }
        assert_string_equal(TRACE(&r), ""); /* answered from the loop, not inside the call */
        pump(m);
        assert_int_equal(fake.nsend, 1); /* no notifications/initialized, no tools/call */
        assert_string_equal(TRACE(&r), "answer release");
        assert_int_equal(r.status, 200);
        cJSON *data;
        cJSON *e = REC_ERROR(&r, "5", TG_RPC_UPSTREAM, &data);
        const char *msg = json_str(cJSON_GetObjectItem(e, "error"), "message");
        assert_non_null(msg);
        assert_non_null(strstr(msg, "upstream session unavailable"));
        if (refuse)
            assert_non_null(strstr(msg, "no thanks"));
        cJSON_Delete(e);
        assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_ALLOW], 0); /* the gate never decided it */
        rec_dispose(&r);
        stl_mw_free(m);
    }
}

/* (4) A request the policy denies is refused -32001 without reaching the upstream: a waiter once
 * the session is ready, and one that finds it ready. */
static void denied_never_reaches_upstream(void **state)
{
    struct mw *m = stl_mw();
    struct rec r1, r2;
    rec_init(&r1);
    rec_init(&r2);
    stl_send(m, fsink_new(&r1, TG_SINK_STATELESS), CALL_RM);
    boot_ok(m);
    assert_int_equal(fake.nsend, 2); /* initialize and notifications/initialized only */
    assert_string_equal(TRACE(&r1), "bind answer release");
    cJSON *e = REC_ERROR(&r1, "6", TG_RPC_DENIED, NULL);
    cJSON_Delete(e);
    stl_send(m, fsink_new(&r2, TG_SINK_STATELESS), CALL_RM);
    assert_int_equal(fake.nsend, 2);
    assert_string_equal(TRACE(&r2), "bind answer release");
    e = REC_ERROR(&r2, "6", TG_RPC_DENIED, NULL);
    cJSON_Delete(e);
    assert_null(strstr(fake.sent.base, "\"name\":\"rm\""));
    assert_int_equal(m->srv.metrics.decisions[TG_VERDICT_DENY], 2);
    assert_string_equal(mw_audit(m), "deny deny");
    rec_dispose(&r1);
    rec_dispose(&r2);
    stl_mw_free(m);
}

/* (5) server/discover is the bridge's to answer, with what the upstream's initialize declared:
 * once the session is ready, no upstream call; as the grant's first request, it waits for the
 * bridge's own initialize and nothing of its own goes up. */
static void discover_answered_by_bridge(void **state)
{
    for (int first = 1; first >= 0; first--) {
        struct mw *m = stl_mw();
        char buf[512];
        struct rec r0, r;
        rec_init(&r0);
        rec_init(&r);
        if (!first) {
            stl_send(m, fsink_new(&r0, TG_SINK_STATELESS), CALL_ECHO);
            boot_ok(m);
            fake_answer(fake.last, answer_for_gid(buf, sizeof(buf), "{\"content\":[]}"));
        }
        int before = fake.nsend;
        stl_send(m, fsink_new(&r, TG_SINK_STATELESS), DISCOVER);
        if (first) {
            assert_string_equal(TRACE(&r), ""); /* waits for the upstream's capabilities */
            boot_ok(m);
            assert_int_equal(fake.nsend, 2); /* the bridge's own two, nothing of the client's */
        } else {
            assert_int_equal(fake.nsend, before); /* no upstream call at all */
        }
        assert_string_equal(TRACE(&r), "answer release");
        assert_int_equal(r.status, 200);
        cJSON *a = cJSON_Parse(r.answer.base);
        assert_non_null(a);
        assert_int_equal(cJSON_GetObjectItem(a, "id")->valueint, 9);
        cJSON *res = cJSON_GetObjectItem(a, "result");
        assert_non_null(cJSON_GetObjectItem(res, "supportedVersions"));
        assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(res, "capabilities"), "tools"));
        cJSON_Delete(a);
        assert_null(strstr(fake.sent.base, "server/discover"));
        rec_dispose(&r0);
        rec_dispose(&r);
        stl_mw_free(m);
    }
}

/* More waiters than limits.inflight_per_session (3): the next is refused 429 at once. */
static void full_refused_429(void **state)
{
    struct mw *m = stl_mw();
    struct rec r[4];
    for (int i = 0; i < 4; i++) {
        rec_init(&r[i]);
        stl_send(m, fsink_new(&r[i], TG_SINK_STATELESS), CALL_ECHO);
    }
    for (int i = 0; i < 3; i++)
        assert_string_equal(TRACE(&r[i]), "");
    assert_string_equal(TRACE(&r[3]), "answer release");
    assert_int_equal(r[3].status, 429);
    cJSON *e = REC_ERROR(&r[3], "5", TG_RPC_UPSTREAM, NULL);
    cJSON_Delete(e);
    assert_int_equal(m->srv.metrics.limit_inflight, 1);
    pump(m);
    fake_fail(fake.last, TG_OUT_TIMEOUT, "upstream main timed out (test)"); /* the rest are refused */
    pump(m);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(TRACE(&r[i]), "answer release");
        rec_dispose(&r[i]);
    }
    rec_dispose(&r[3]);
    assert_int_equal(fake.nsend, 1);
    stl_mw_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_request_parks_until_booted),
        cmocka_unit_test(second_request_reuses_session),
        cmocka_unit_test(refused_boot_refuses_waiter),
        cmocka_unit_test(denied_never_reaches_upstream),
        cmocka_unit_test(discover_answered_by_bridge),
        cmocka_unit_test(full_refused_429),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
