/* Shared scaffolding for the tests of the middle (core/call/call.c, core/gate/dispatch.c, core/call/approvals.c,
 * core/app/route.c): a struct tg_server built by hand around a real loop, a real conf (loaded
 * from a small file written to a temporary directory), real sessions, counters, audit log and
 * upstream runtimes, with two fakes at the edges:
 *
 *   - a FAKE UPSTREAM KIND, installed through srv->upstream_ops. Its send records the body (with
 *     our gateway id) and the call; the test then answers as a real kind would, through the
 *     callbacks the call gave with the message (upstream/upstream.h), with the helpers
 *     fake_answer / fake_fail / fake_accepted (what upstream/streamable.c does when a request
 *     ends) or, for the message-stream kind (TG_UPOPS_SESSION_LINK, as stdio and legacy SSE),
 *     fake_link() -> tg_link_message on the real shared half (upstream/link.c). fake.fail_send
 *     makes send fail the call before it returns, as stdio does on a write error.
 *   - a FAKE SINK (struct fsink on the heap, freed by its release like a real transport's sink)
 *     that records every operation in a struct rec the test owns: counts, the last status and
 *     bytes, every message, and the order of operations. Any operation after release is a
 *     failure (and, the object being freed, a use-after-free ASan reports). Hooks let a test
 *     re-enter the call from inside an answer or a release.
 *
 * Every case ends with mw_free(): it requires that no call is left open, runs
 * tg_call_run_pending, closes everything and requires uv_loop_close() to succeed; LSan then
 * checks that nothing leaked. */
#ifndef TG_TEST_CORE_MIDDLE_H
#define TG_TEST_CORE_MIDDLE_H

#include "test/unit/unit.h"

#include <unistd.h>
#include <uv.h>

#include "core/app/server.h"
#include "core/call/approvals.h"
#include "core/call/audit.h"
#include "core/call/call.h"
#include "core/conf/conf.h"
#include "core/gate/dispatch.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/wire/msg.h"
#include "core/call/session.h"
#include "policy/policy.h"
#include "upstream/pool/pool.h"
#include "upstream/upstream.h"

/* ---- the policy and the conf ----------------------------------------------------------- */

/* Hosted shape: echo is allowed, rm denied, once allowed once (a bucket of 1), deploy needs
 * approval and takes a bucket of 1 too, review needs approval and takes nothing. Every other
 * tool (secret) is denied by default and so hidden from tools/list. */
#define MW_POLICY                                                                                                  \
    "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{"                                                          \
    "\"echo\":{\"action\":\"allow\"},"                                                                             \
    "\"rm\":{\"action\":\"deny\",\"reason\":\"Deleting files is not allowed\"},"                                   \
    "\"once\":{\"limits\":[{\"counter\":\"once_rate\",\"window\":\"day\",\"max\":1}]},"                            \
    "\"deploy\":{\"action\":\"approve\",\"approval_timeout\":30,"                                                  \
    "\"limits\":[{\"counter\":\"deploys\",\"window\":\"day\",\"max\":1}]},"                                        \
    "\"review\":{\"action\":\"approve\"}"                                                                          \
    "}}"

/* %s: the directory (policy and audit file). Upstream 0 "main" (the default, 20 ms calls),
 * upstream 1 "side" (denies sampling/createMessage). */
#define MW_CONF                                                                                                    \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "limits = { inflight_per_session = 3; approvals_max = 2; approvals_per_grant = 2; };\n"                                                 \
    "audit = { file = \"%s/audit.log\"; };\n"                                                                      \
    "grants = ( { name = \"alice\"; anonymous = true; } );\n"                                                      \
    "upstreams = (\n"                                                                                              \
    "  { name = \"main\"; url = \"http://127.0.0.1:9/mcp\"; default = true; call_timeout_ms = 20;\n"               \
    "    policy = \"%s/policy.json\"; approval_mode = \"hold\"; },\n"                                             \
    "  { name = \"side\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\"; approval_mode = \"hold\";\n" \
    "    deny_server_requests = [ \"sampling/createMessage\" ]; }\n"                                               \
    ");\n"

/* ---- the fake upstream kind --------------------------------------------------------------- */

enum fake_kind {
    FAKE_HTTP, /* one request per call, answered by the test (as upstream/streamable.c) */
    FAKE_LINK, /* every message on the session's link (TG_UPOPS_SESSION_LINK, as stdio) */
};

/* What the fake kind saw. One per process (the operations table has no user data); reset by
 * mw_new. */
struct fake {
    enum fake_kind kind;
    int fail_send;               /* send fails the call before it returns */
    int unsent;                  /* FAKE_HTTP: the request is still queued (sent() says 0) */
    enum tg_outcome fail_outcome; /* FAKE_HTTP: the outcome of that failure (LINK: always NOT_SENT) */
    int nsend, ncancel, npause, nresume, ntouch, nreply, nclose;
    struct tg_call *last;        /* the call last sent */
    const struct tg_upstream_events *ev; /* the callbacks it came with (the same for every call) */
    struct tg_buf sent;          /* every body sent, one a line ("(stream)" for a stream) */
    struct tg_buf last_body;     /* the last body, NUL-terminated */
    struct tg_buf replies;       /* what the gateway said to the upstream itself, one a line */
    uint64_t last_timeout;
};

static struct fake fake;

/* What the call's slot holds while the fake has the call (FAKE_HTTP): tg_call_running() reads it
 * as "the upstream may still send", as for a real request in flight. Never dereferenced. */
static char fake_upreq_token;
#define FAKE_UPREQ ((void *)&fake_upreq_token)

static inline void fake_record(const struct tg_upstream_send *a)
{
    fake.nsend++;
    fake.last = a->call;
    fake.ev = a->ev;
    fake.last_timeout = a->timeout_ms;
    fake.last_body.len = 0;
    if (a->body != NULL) {
        tg_buf_append(&fake.sent, a->body, a->len);
        tg_buf_append(&fake.last_body, a->body, a->len);
    } else {
        tg_buf_appends(&fake.sent, "(stream)");
    }
    tg_buf_append(&fake.sent, "\n", 1);
    tg_buf_append(&fake.sent, "", 1);
    fake.sent.len--;
    tg_buf_append(&fake.last_body, "", 1);
    fake.last_body.len--;
}

static inline void fake_http_send(const struct tg_upstream_send *a)
{
    fake_record(a);
    if (fake.fail_send) {
        a->ev->done(a->call, fake.fail_outcome, "upstream main could not be reached (fake)", -1);
        return;
    }
    *a->state = FAKE_UPREQ;
    if (a->body == NULL)
        a->ev->stream(a->call);
}

/* FAKE_LINK: the session's link is the real shared half (upstream/link.c) with no process or
 * stream behind it. Owner: the session (s->uplink). */
static const struct tg_upstream_ops fake_link_ops;

static inline void fake_link_release(struct tg_session *s)
{
    struct tg_uplink *ln = s->uplink;
    s->uplink = NULL;
    tg_link_release(ln);
    free(ln);
}

static inline struct tg_uplink *fake_link_of(struct tg_server *srv, struct tg_session *s)
{
    if (s->uplink == NULL) {
        struct tg_upstream_send a = {.srv = srv, .sess = s, .up = srv->upstreams[s->upstream], .host = &tg__call_host};
        struct tg_uplink *ln = tg_xcalloc(1, sizeof(*ln));
        tg_link_init(ln, &fake_link_ops, &a);
        s->uplink = ln;
        s->release_link = fake_link_release;
    }
    return s->uplink;
}

static inline void fake_link_send(const struct tg_upstream_send *a)
{
    fake_record(a);
    if (a->body == NULL) {
        tg_link_listen(a);
        return;
    }
    tg_link_sent(fake_link_of(a->srv, a->sess), a, !fake.fail_send);
}

static inline void fake_http_cancel(void *state) { fake.ncancel++; }

static inline void fake_link_cancel(void *state)
{
    fake.ncancel++;
    tg_link_op_cancel(state);
}

static inline void fake_pause(struct tg_session *s, void *state, int pause)
{
    if (pause)
        fake.npause++;
    else
        fake.nresume++;
}

static inline void fake_touch(void *state) { fake.ntouch++; }

static inline int fake_sent(const void *state) { return fake.kind == FAKE_LINK || !fake.unsent; }

static inline void fake_reply(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p,
                              size_t n)
{
    fake.nreply++;
    tg_buf_append(&fake.replies, p, n);
    tg_buf_append(&fake.replies, "\n", 1);
    tg_buf_append(&fake.replies, "", 1);
    fake.replies.len--;
}

static inline void fake_close(struct tg_server *srv, struct tg_session *s) { fake.nclose++; }

static const struct tg_upstream_ops fake_http_ops = {
    .name = "fake-http",
    .flags = 0,
    .send = fake_http_send,
    .sent = fake_sent,
    .cancel = fake_http_cancel,
    .pause = fake_pause,
    .touch = fake_touch,
    .reply = fake_reply,
    .close = fake_close,
};

static const struct tg_upstream_ops fake_link_ops = {
    .name = "fake-link",
    .flags = TG_UPOPS_SESSION_LINK,
    .send = fake_link_send,
    .sent = fake_sent,
    .cancel = fake_link_cancel,
    .pause = fake_pause,
    .touch = fake_touch,
    .reply = fake_reply,
    .close = fake_close,
};

static inline const struct tg_upstream_ops *fake_ops_for(const struct tg_upstream_conf *uc)
{
    return fake.kind == FAKE_LINK ? &fake_link_ops : &fake_http_ops;
}

/* The fake has k (FAKE_HTTP): it lets go, as a kind does before it reports done. */
static inline void fake_take(struct tg_call *k)
{
    assert_ptr_equal(k->upcall, FAKE_UPREQ);
    k->upcall = NULL;
}

/* The upstream answered k's request with json: what upstream/streamable.c does when a JSON
 * answer is complete (on_up_done, MODE_JSON): settle by what came, answer, done. */
static inline void fake_answer(struct tg_call *k, const char *json)
{
    fake_take(k);
    size_t n = strlen(json);
    struct tg_json_doc doc;
    int ok = tg_json_parse(json, n, 1000, 0, &doc, NULL, NULL) == 0;
    enum tg_outcome o = !ok ? TG_OUT_GARBLED : doc.error_raw.len > 0 ? TG_OUT_ERROR : TG_OUT_OK;
    tg__call_events.settle(k, o, 1.5);
    int answered = tg__call_events.answer(k, json, n, ok ? &doc : NULL, NULL, 0);
    tg__call_events.done(k, o, answered ? NULL : "upstream sent an invalid response", 1.5);
}

/* The request failed (connection lost, timeout, 5xx ...) with outcome o. */
static inline void fake_fail(struct tg_call *k, enum tg_outcome o, const char *why)
{
    fake_take(k);
    tg__call_events.done(k, o, why, -1);
}

/* A notification or response from the client was accepted upstream (HTTP 202). */
static inline void fake_accepted(struct tg_call *k)
{
    fake_take(k);
    tg__call_events.done(k, TG_OUT_ACCEPTED, NULL, 1);
}

/* ---- the fake sink ------------------------------------------------------------------------ */

/* What one exchange's sink saw. Owner: the test (usually on its stack); rec_dispose. */
struct rec {
    int nmessage, nanswer, nbare, nstream, nend, npoll, nrelease, nbind, nclose;
    int status;             /* of the last answer or bare */
    char extra[128];        /* the last answer's or bare's extra header lines */
    struct tg_buf answer;   /* the last answer's (or bare's) bytes, NUL-terminated */
    struct tg_buf messages; /* every message, one a line */
    struct tg_buf trace;    /* the operations in order, space-separated */
    struct tg_call *k;      /* from bind */
    struct tg_call *answered_k; /* the k the last answer came with */
    long poll_ms;
    int high, listening;    /* what high() and listening() say */
    /* Re-entry hooks, run inside the operation (after it is recorded). */
    void (*on_answer)(struct rec *r, struct tg_call *k);
    void (*on_message)(struct rec *r, struct tg_call *k);
    void (*on_release)(struct rec *r, struct tg_call *k);
    void *ud;
};

/* A transport's sink object. Owner: the middle from tg_dispatch_message on; freed by release. */
struct fsink {
    struct tg_sink sink;
    struct rec *r;
};

static inline void rec_init(struct rec *r)
{
    memset(r, 0, sizeof(*r));
    tg_buf_init(&r->answer);
    tg_buf_init(&r->messages);
    tg_buf_init(&r->trace);
    r->listening = 1;
}

static inline void rec_dispose(struct rec *r)
{
    tg_buf_dispose(&r->answer);
    tg_buf_dispose(&r->messages);
    tg_buf_dispose(&r->trace);
}

static inline struct rec *rec_op(const struct tg_sink *sk, const char *op)
{
    struct rec *r = ((const struct fsink *)sk)->r;
    if (r->nrelease != 0)
        fail_msg("sink operation %s after release (trace: %.*s)", op, (int)r->trace.len, r->trace.base);
    if (strcmp(op, "high") != 0 && strcmp(op, "listening") != 0) {
        if (r->trace.len)
            tg_buf_append(&r->trace, " ", 1);
        tg_buf_appends(&r->trace, op);
        tg_buf_append(&r->trace, "", 1);
        r->trace.len--;
    }
    return r;
}

static inline void rec_keep(struct rec *r, int status, const char *extra, const char *p, size_t n)
{
    r->status = status;
    snprintf(r->extra, sizeof(r->extra), "%s", extra ? extra : "");
    r->answer.len = 0;
    tg_buf_append(&r->answer, p ? p : "", n);
    tg_buf_append(&r->answer, "", 1);
    r->answer.len--;
}

static inline void fsink_message(struct tg_sink *sk, struct tg_call *k, const char *p, size_t n)
{
    struct rec *r = rec_op(sk, "message");
    r->nmessage++;
    tg_buf_append(&r->messages, p, n);
    tg_buf_append(&r->messages, "\n", 1);
    tg_buf_append(&r->messages, "", 1);
    r->messages.len--;
    if (r->on_message)
        r->on_message(r, k);
}

static inline void fsink_answer(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p,
                                size_t n)
{
    struct rec *r = rec_op(sk, "answer");
    r->nanswer++;
    r->answered_k = k;
    rec_keep(r, status, extra, p, n);
    if (r->on_answer)
        r->on_answer(r, k);
}

static inline void fsink_bare(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p,
                              size_t n)
{
    struct rec *r = rec_op(sk, "bare");
    r->nbare++;
    rec_keep(r, status, extra, p, n);
}

static inline void fsink_stream(struct tg_sink *sk, struct tg_call *k) { rec_op(sk, "stream")->nstream++; }
static inline void fsink_end(struct tg_sink *sk, struct tg_call *k) { rec_op(sk, "end")->nend++; }

static inline void fsink_poll(struct tg_sink *sk, struct tg_call *k, long retry_ms)
{
    struct rec *r = rec_op(sk, "poll");
    r->npoll++;
    r->poll_ms = retry_ms;
}

static inline int fsink_high(const struct tg_sink *sk) { return rec_op(sk, "high")->high; }
static inline int fsink_listening(const struct tg_sink *sk) { return rec_op(sk, "listening")->listening; }

static inline void fsink_close(struct tg_sink *sk, uint16_t ws_code, const char *why)
{
    rec_op(sk, "close")->nclose++;
}

static inline void fsink_bind(struct tg_sink *sk, struct tg_call *k)
{
    struct rec *r = rec_op(sk, "bind");
    r->nbind++;
    r->k = k;
}

static inline void fsink_release(struct tg_sink *sk, struct tg_call *k)
{
    struct rec *r = rec_op(sk, "release");
    if (r->on_release)
        r->on_release(r, k);
    r->nrelease++;
    free(sk);
}

static const struct tg_sink_ops fsink_ops = {
    .message = fsink_message,
    .answer = fsink_answer,
    .bare = fsink_bare,
    .stream = fsink_stream,
    .end = fsink_end,
    .poll = fsink_poll,
    .high = fsink_high,
    .listening = fsink_listening,
    .close = fsink_close,
    .bind = fsink_bind,
    .release = fsink_release,
};

static inline struct tg_sink *fsink_new(struct rec *r, unsigned flags)
{
    struct fsink *f = tg_xcalloc(1, sizeof(*f));
    f->sink.ops = &fsink_ops;
    f->sink.flags = flags;
    f->r = r;
    return &f->sink;
}

/* ---- the server --------------------------------------------------------------------------- */

/* One test's world. Owner: the test case (mw_new / mw_free). */
struct mw {
    uv_loop_t loop;
    int ext_loop; /* srv.loop is the caller's (mw_new_on): not run or closed here */
    union { /* the app's code (route, admin) finds its struct tg_app around srv */
        struct tg_server srv;
        struct tg_app app;
    };
    char dir[256];
    char audit_path[300];
    long audit_off;
    struct tg_buf audit; /* mw_audit's last answer */
};

static inline void mw_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

/* conf: a printf format with three %s for the directory, or NULL for MW_CONF. loop: the
 * caller's loop (NULL: one of its own). */
static inline struct mw *mw_new_on(enum fake_kind kind, const char *conf_fmt, uv_loop_t *loop)
{
    tg_log_setup(TG_LOG_WARN, TG_LOG_LOGFMT, NULL);
    struct mw *m = tg_xcalloc(1, sizeof(*m));
    tg_buf_init(&m->audit);
    const char *base = getenv("TMPDIR");
    snprintf(m->dir, sizeof(m->dir), "%s/tg-middle-XXXXXX", base && *base ? base : "/tmp");
    assert_non_null(mkdtemp(m->dir));
    char path[400], conf[4096];
    snprintf(path, sizeof(path), "%s/policy.json", m->dir);
    mw_write(path, MW_POLICY);
    snprintf(conf, sizeof(conf), conf_fmt ? conf_fmt : MW_CONF, m->dir, m->dir, m->dir);
    snprintf(path, sizeof(path), "%s/tollgate.conf", m->dir);
    mw_write(path, conf);
    snprintf(m->audit_path, sizeof(m->audit_path), "%s/audit.log", m->dir);

    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_conf *c = tg_conf_load(path, &err);
    if (c == NULL)
        fail_msg("conf refused:\n%s\n%.*s", conf, (int)err.len, err.base);
    tg_buf_dispose(&err);

    /* What tg_server_init does, less listeners, signals and flush handles. */
    if (loop == NULL)
        assert_int_equal(uv_loop_init(&m->loop), 0);
    m->ext_loop = loop != NULL;
    struct tg_server *srv = &m->srv;
    srv->loop = loop != NULL ? loop : &m->loop;
    srv->conf = c; /* the load's reference */
    tg_list_init(&srv->dead_calls);
    tg_list_init(&srv->approvals);
    tg_list_init(&srv->approvals_decided);
    tg_list_init(&srv->tasks);
    tg_list_init(&srv->channels);
    tg_list_init(&srv->cred_watches);
    tg_list_init(&srv->awaiting);
    tg_list_init(&srv->streams);
    srv->counters = tg_counters_new();
    if (c->audit.file != NULL) {
        tg_buf_init(&err);
        srv->audit = tg_audit_open(srv->loop, &c->audit, &err);
        assert_non_null(srv->audit);
        tg_buf_dispose(&err);
    }
    srv->sessions = tg_session_table_new();
    tg_shared_local(&srv->store, srv);
    srv->nupstreams = c->nupstreams;
    srv->upstreams = tg_xcalloc(c->nupstreams, sizeof(*srv->upstreams));
    for (size_t i = 0; i < c->nupstreams; i++)
        srv->upstreams[i] = tg_upstream_new(srv->loop, c, &c->upstreams[i], &srv->metrics);
    srv->upstream_ops = fake_ops_for;

    tg_buf_dispose(&fake.sent);
    tg_buf_dispose(&fake.last_body);
    tg_buf_dispose(&fake.replies);
    memset(&fake, 0, sizeof(fake));
    fake.kind = kind;
    tg_buf_init(&fake.sent);
    tg_buf_init(&fake.last_body);
    tg_buf_init(&fake.replies);
    return m;
}

static inline struct mw *mw_new_conf(enum fake_kind kind, const char *conf_fmt)
{
    return mw_new_on(kind, conf_fmt, NULL);
}
static inline struct mw *mw_new(enum fake_kind kind) { return mw_new_on(kind, NULL, NULL); }

static inline int mw_remove_session(struct tg_session *s, void *arg) { return 1; }

static inline void mw_on_handle_describe(uv_handle_t *u, void *arg)
{
    print_error("left open: %s handle %p\n", uv_handle_type_name(u->type), (void *)u);
}

static inline int mw_no_open_call(struct tg_session *s, void *arg)
{
    if (!tg_list_empty(&s->calls)) {
        struct tg_call *k = tg_container_of(s->calls.next, struct tg_call, slink);
        fail_msg("a call is left open at the end of the test (session %s, method %s)", s->id_str,
                 k->method ? k->method : "-");
    }
    return 0;
}

static inline void mw_free(struct mw *m)
{
    struct tg_server *srv = &m->srv;
    tg_session_sweep(srv->sessions, mw_no_open_call, NULL);
    assert_int_equal(srv->napprovals, 0);
    assert_true(tg_list_empty(&srv->approvals));
    assert_true(tg_list_empty(&srv->awaiting));
    tg_session_sweep(srv->sessions, mw_remove_session, NULL);
    tg_call_run_pending(srv);
    assert_true(tg_list_empty(&srv->dead_calls));
    tg_audit_close(srv->audit);
    srv->audit = NULL;
    for (size_t i = 0; i < srv->nupstreams; i++)
        tg_upstream_close(srv->upstreams[i]);
    if (!m->ext_loop) {
        uv_run(&m->loop, UV_RUN_DEFAULT);
        if (uv_loop_close(&m->loop) != 0) {
            uv_walk(&m->loop, mw_on_handle_describe, NULL);
            fail_msg("handles left open after the test");
        }
    }
    free(srv->upstreams);
    tg_session_table_free(srv->sessions);
    tg_counters_free(srv->counters);
    tg_conf_unref(srv->conf);
    tg_buf_dispose(&m->audit);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", m->dir);
    assert_int_equal(system(cmd), 0);
    free(m);
    tg_buf_dispose(&fake.sent);
    tg_buf_dispose(&fake.last_body);
    tg_buf_dispose(&fake.replies);
    memset(&fake, 0, sizeof(fake));
}

/* The audit lines written since the last look, as "decision" or "decision/outcome" words, one
 * per line, space-separated ("allow/ok deny"). The loop runs until the writes are done. */
static inline const char *mw_audit(struct mw *m)
{
    uv_run(&m->loop, UV_RUN_DEFAULT);
    FILE *f = fopen(m->audit_path, "r");
    assert_non_null(f);
    assert_int_equal(fseek(f, m->audit_off, SEEK_SET), 0);
    m->audit.len = 0;
    char line[8192];
    while (fgets(line, sizeof(line), f) != NULL) {
        struct tg_json_doc doc;
        if (tg_json_parse(line, strlen(line), 100, 1, &doc, NULL, NULL) != 0)
            fail_msg("audit line is not JSON: %s", line);
        cJSON *d = cJSON_GetObjectItemCaseSensitive(doc.root, "decision");
        cJSON *o = cJSON_GetObjectItemCaseSensitive(doc.root, "outcome");
        assert_true(cJSON_IsString(d));
        if (m->audit.len)
            tg_buf_append(&m->audit, " ", 1);
        tg_buf_appends(&m->audit, d->valuestring);
        if (cJSON_IsString(o)) {
            tg_buf_append(&m->audit, "/", 1);
            tg_buf_appends(&m->audit, o->valuestring);
        }
        cJSON_Delete(doc.root);
    }
    m->audit_off = ftell(f);
    fclose(f);
    tg_buf_append(&m->audit, "", 1);
    m->audit.len--;
    return m->audit.base;
}

/* The last audit line written (since the last mw_audit), parsed: the caller deletes it. */
static inline cJSON *mw_audit_last(struct mw *m)
{
    uv_run(&m->loop, UV_RUN_DEFAULT);
    FILE *f = fopen(m->audit_path, "r");
    assert_non_null(f);
    char line[8192], last[8192] = "";
    while (fgets(line, sizeof(line), f) != NULL)
        snprintf(last, sizeof(last), "%s", line);
    fclose(f);
    struct tg_json_doc doc;
    if (tg_json_parse(last, strlen(last), 100, 1, &doc, NULL, NULL) != 0)
        fail_msg("last audit line is not JSON: %s", last);
    return doc.root;
}

/* A new session of grant alice on upstream u, as an initialize over Streamable HTTP makes it. */
static inline struct tg_session *mw_session(struct mw *m, int u)
{
    struct tg_exchange x = {0};
    x.srv = &m->srv;
    x.grant = tg_conf_find_grant(m->srv.conf, "alice");
    assert_non_null(x.grant);
    x.upstream = u;
    x.uc = &m->srv.conf->upstreams[u];
    assert_int_equal(tg_dispatch_session_open(&x), 0);
    x.sess->initialized = 1;
    x.sess->proto = "2025-06-18";
    return x.sess;
}

static inline void mw_exchange(struct mw *m, struct tg_session *s, struct tg_exchange *x)
{
    memset(x, 0, sizeof(*x));
    x->srv = &m->srv;
    x->era = TG_ERA_2025;
    x->grant = tg_conf_find_grant(m->srv.conf, s->grant);
    x->upstream = s->upstream;
    x->uc = &m->srv.conf->upstreams[s->upstream];
    x->sess = s;
    snprintf(x->proto, sizeof(x->proto), "%s", s->proto);
}

/* A client message of session s, answered through sk (taken over by the middle); edit, if not
 * NULL, changes the exchange first (another era, other capabilities). */
static inline void mw_send_with(struct mw *m, struct tg_session *s, struct tg_sink *sk, const char *json,
                                void (*edit)(struct tg_exchange *x))
{
    struct tg_msg msg;
    const char *why = NULL;
    if (tg_msg_decode(json, strlen(json), 64, &msg, &why) != 0)
        fail_msg("test message does not decode (%s): %s", why, json);
    struct tg_exchange x;
    mw_exchange(m, s, &x);
    if (edit != NULL)
        edit(&x);
    tg_dispatch_message(&x, sk, &msg);
    tg_msg_dispose(&msg);
}

static inline void mw_send(struct mw *m, struct tg_session *s, struct tg_sink *sk, const char *json)
{
    mw_send_with(m, s, sk, json, NULL);
}

/* A message from the upstream on the session's link (FAKE_LINK). */
static inline void fake_link(struct mw *m, struct tg_session *s, const char *json)
{
    tg_session_ref(s);
    tg_link_message(fake_link_of(&m->srv, s), json, strlen(json), NULL, NULL);
    tg_session_unref(s);
}

/* Let the loop's clock pass ms (a timer: no sleep). */
static inline void mw_on_timer(uv_timer_t *t) { *(int *)t->data = 1; }
static inline void mw_on_timer_closed(uv_handle_t *h) { free(h); }
static inline void mw_wait_ms(struct mw *m, uint64_t ms)
{
    uv_timer_t *t = tg_xcalloc(1, sizeof(*t));
    int fired = 0;
    uv_timer_init(m->srv.loop, t);
    t->data = &fired;
    uv_timer_start(t, mw_on_timer, ms, 0);
    while (!fired)
        uv_run(m->srv.loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)t, mw_on_timer_closed);
    uv_run(m->srv.loop, UV_RUN_NOWAIT);
}

/* ---- checking answers --------------------------------------------------------------------- */

/* The last answer the sink got, parsed: a JSON-RPC error with this id (raw JSON) and code.
 * Returns the tree (the caller deletes it); *data gets error.data (or NULL). */
static inline cJSON *rec_error(const struct rec *r, const char *id_raw, int code, cJSON **data, const char *file,
                               int line)
{
    struct tg_json_doc doc;
    if (tg_json_parse(r->answer.base ? r->answer.base : "", r->answer.len, 100, 1, &doc, NULL, NULL) != 0)
        fail_msg("%s:%d: the answer is not JSON: \"%.*s\"", file, line, (int)r->answer.len, r->answer.base);
    if (!tg_slice_eq(doc.id_raw, tg_slice_cstr(id_raw)))
        fail_msg("%s:%d: answer id %.*s, expected %s in %s", file, line, (int)doc.id_raw.len, doc.id_raw.ptr, id_raw,
                 r->answer.base);
    cJSON *e = cJSON_GetObjectItemCaseSensitive(doc.root, "error");
    cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");
    if (!cJSON_IsNumber(c) || c->valueint != code)
        fail_msg("%s:%d: expected error %d, got %s", file, line, code, r->answer.base);
    if (data)
        *data = cJSON_GetObjectItemCaseSensitive(e, "data");
    return doc.root;
}
#define REC_ERROR(r, id, code, data) rec_error((r), (id), (code), (data), __FILE__, __LINE__)

static inline const char *json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The gateway id the fake upstream saw in its last body. */
static inline uint64_t fake_last_gid(void)
{
    struct tg_json_doc doc;
    assert_int_equal(tg_json_parse(fake.last_body.base, fake.last_body.len, 100, 0, &doc, NULL, NULL), 0);
    char tmp[32];
    assert_true(doc.id_raw.len > 0 && doc.id_raw.len < sizeof(tmp));
    memcpy(tmp, doc.id_raw.ptr, doc.id_raw.len);
    tmp[doc.id_raw.len] = '\0';
    return strtoull(tmp, NULL, 10);
}

/* A tools/call request body. */
static inline const char *mw_call(char *buf, size_t n, const char *id, const char *tool)
{
    snprintf(buf, n, "{\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"tools/call\",\"params\":{\"name\":\"%s\","
                     "\"arguments\":{\"x\":1}}}", id, tool);
    return buf;
}

#endif
