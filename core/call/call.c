#include "core/call/call.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/audit.h"
#include "core/call/tasks.h"
#include "core/call/webhook.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/legacy.h"
#include "core/mcp/modern.h"
#include "core/mcp/era.h"
#include "core/mcp/listen.h"
#include "core/mcp/rewrite.h"
#include "core/mcp/schemas.h"
#include "core/wire/msg.h"
#include "core/call/roots.h"
#include "core/call/upauth.h"
#include "core/base/slab.h"
#include "policy/pins.h"
#include "policy/policy.h"
#include "upstream/upstream.h"
#include "upstream/pool/pool.h"

const char *tg_call_upstream_name(const struct tg_call *k) { return tg_upstream_conf(k->uprt)->name; }

/* The app chose the kinds (srv->upstream_ops: upstream/kinds.c, or a unit test's fake). */
static const struct tg_upstream_ops *ops_of(const struct tg_server *srv, const struct tg_upstream_conf *uc)
{
    return srv->upstream_ops(uc);
}

const struct tg_upstream_ops *tg__call_ops_of(struct tg_server *srv, struct tg_session *s)
{
    return (size_t)s->upstream < srv->nupstreams ? ops_of(srv, tg_upstream_conf(srv->upstreams[s->upstream])) : NULL;
}

/* The kind lets go of the call: nothing more comes for it. */
static void upstream_cancel(struct tg_call *k)
{
    k->ops->cancel(k->upcall);
    k->upcall = NULL;
    if (k->awaiting) {
        tg_list_unlink(&k->alink);
        k->awaiting = 0;
    }
}

/* ---- settlement ------------------------------------------------------------------------
 *
 * Reservations are given back only when the upstream certainly did not run the call: the
 * request never reached it, it refused the request (HTTP 4xx, session gone), or it answered a
 * JSON-RPC error object. A timeout, a stream that ended without the answer, a 5xx or a garbled
 * answer keep them: the tool may have run, and a caller who controls how long it runs or how
 * its upstream answers must not get it for free. This table is the only place that says so. */

static const struct {
    const char *audit; /* the audit line's outcome; NULL: no line (the decision's was written) */
    int give_back;
} outcomes[] = {
    [TG_OUT_OK] = {"ok", 0},
    [TG_OUT_ERROR] = {"error", 1},
    [TG_OUT_GARBLED] = {"error", 0},
    [TG_OUT_NOT_SENT] = {"unavailable", 1},
    [TG_OUT_NOT_SENT_TIMEOUT] = {"timeout", 1},
    [TG_OUT_REFUSED] = {"unavailable", 1},
    [TG_OUT_TIMEOUT] = {"timeout", 0},
    [TG_OUT_UNAVAILABLE] = {"unavailable", 0},
    [TG_OUT_CLIENT_GONE] = {"client_gone", 0},
    [TG_OUT_CLIENT_GONE_NOT_SENT] = {"client_gone", 1},
    [TG_OUT_WITHDRAWN] = {NULL, 1},
    [TG_OUT_ACCEPTED] = {"ok", 0},
    [TG_OUT_SESSION_GONE] = {"unavailable", 1},
    [TG_OUT_NO_STREAM] = {"unavailable", 1},
};

static void refund(struct tg_call *k)
{
    if (k->dec == NULL || k->refunded || k->dec->nres == 0)
        return;
    k->refunded = 1;
    k->srv->metrics.refunds++;
    k->srv->store.ops->refund(k->srv->store.ud, k->dec);
}

void tg_call_audit(struct tg_call *k, const char *decision, double latency, const char *outcome, const char *by)
{
    struct tg_audit_record r = {0};
    r.grant = k->grant;
    r.subject = k->subject ? k->subject : k->grant;
    r.session = k->sess ? k->sess->id_str : NULL;
    r.upstream = up_name(k);
    r.method = k->method;
    r.tool = k->tool;
    r.decision = decision;
    r.rule = k->dec ? k->dec->rule : NULL;
    r.history_json = k->dec ? k->dec->history_json : NULL;
    r.counters_json = k->dec ? k->dec->counters_json : NULL;
    if (k->tool && !k->args_sha256[0] && k->mrtr != NULL && k->srv->audit != NULL && tg_mcp_mrtr_digest(k->mrtr) == 0)
        tg_hex_encode(k->mrtr->b.args_sha256, 32, k->args_sha256); /* its arguments were kept (an audit log since) */
    r.args_sha256 = k->tool && k->args_sha256[0] ? k->args_sha256 : NULL; /* none if no reader when it began */
    r.args_json = k->args_json;
    r.approval_id = k->approval_id[0] ? k->approval_id : NULL;
    r.decided_by = by;
    r.latency_ms = latency;
    r.outcome = outcome;
    r.correlation_id = tg_call_denial_id(k, decision);
    tg_audit_log(k->srv->audit, &k->srv->conf->audit, &r);
}

void tg__call_settle_hold(struct tg_call *k, enum tg_outcome o, double latency_ms)
{
    if (k->settled)
        return;
    k->settled = 1;
    if (k->approval_settled != NULL)
        k->approval_settled(k, outcomes[o].give_back); /* the approval it used */
    if (outcomes[o].give_back)
        refund(k);
    if (k->dec != NULL && outcomes[o].audit != NULL) {
        k->audit_held = outcomes[o].audit;
        k->audit_held_ms = latency_ms;
    }
}

void tg__call_audit_held(struct tg_call *k)
{
    const char *outcome = k->audit_held;
    k->audit_held = NULL;
    if (outcome != NULL)
        tg_call_audit(k, "allow", k->audit_held_ms, outcome, NULL);
}

void tg_call_settle(struct tg_call *k, enum tg_outcome o, double latency_ms)
{
    tg__call_settle_hold(k, o, latency_ms);
    tg__call_audit_held(k);
}

/* How long the upstream has had the call: from its first request (resumes included). */
double tg__call_latency(const struct tg_call *k)
{
    if (k->first_sent_ns)
        return (double)(uv_hrtime() - k->first_sent_ns) / 1e6;
    if (k->sent_at)
        return (double)(now_ms(k->srv) - k->sent_at);
    return -1;
}

/* ---- life ------------------------------------------------------------------------------ */

struct tg_call *tg_call_new(struct tg_server *srv, struct tg_session *s, struct tg_sink *sink, enum call_kind kind)
{
    struct tg_call *k = tg_xcalloc(1, sizeof(*k));
    k->srv = srv;
    k->uprt = tg_upstream_ref(srv->upstreams[s->upstream]);
    k->ops = ops_of(srv, tg_upstream_conf(k->uprt));
    k->grant = tg_xstrdup(s->grant);
    tg_list_init(&k->alink);
    tg_buf_init(&k->held);
    k->sess = tg_session_ref(s);
    k->kind = kind;
    tg_list_init(&k->slink);
    tg_list_insert_tail(&s->calls, &k->slink);
    s->last_active_ms = now_ms(srv);
    k->sink = sink;
    if (sink != NULL && sink->ops->bind != NULL)
        sink->ops->bind(sink, k);
    return k;
}

/* Closing marks: the call is taken out of everything that can reach it (session, approvals,
 * waiting list, upstream, sink), settled if it never reached the upstream, and queued; its
 * memory goes in tg_call_run_pending, after the handler that closed it has returned, so a
 * caller that still holds k reads valid, inert memory. Idempotent. */
void tg_call_close(struct tg_call *k)
{
    if (k->closed)
        return;
    k->closed = 1;
    tg__call_audit_held(k); /* settled with an answer that did not go after all */
    if (k->deciding != NULL) {
        /* Its decision still waits for the shared store: what that takes is given back when it comes. */
        k->srv->store.ops->detach(k->srv->store.ud, k->deciding);
        k->deciding = NULL;
    }
    if (!k->forwarded)
        tg_call_settle(k, TG_OUT_WITHDRAWN, -1);
    if (k->record_wait != NULL) { /* its record lookup still waits: what it takes goes back */
        if (k->srv->store.ops->record_detach != NULL) /* NULL: the cluster went (shutdown) */
            k->srv->store.ops->record_detach(k->srv->store.ud, k->record_wait);
        k->record_wait = NULL;
    }
    if (k->approval_settled != NULL)
        k->approval_settled(k, 0); /* it reached the upstream: the approval is used */
    tg__call_upauth_cancel(k->upauth, &k->upauth_wait);
    upstream_cancel(k);
    if (k->parked) {
        /* Its client went while a human had yet to decide: withdrawn, as a cancel would. */
        struct tg_server *srv = k->srv;
        tg_list_unlink(&k->alink);
        srv->napprovals--;
        srv->approvals_bytes -= k->parked_bytes < srv->approvals_bytes ? k->parked_bytes : srv->approvals_bytes;
        k->parked = 0;
        srv->store.ops->approval_gone(srv->store.ud, k);
        srv->metrics.approvals_rejected++;
        tg_call_audit(k, "cancelled", -1, NULL, "client");
        struct tg_webhook_event e = {"withdrawn", k->approval_id, k->tool, k->grant, k->subject ? k->subject : k->grant,
                                     up_name(k), k->args_sha256, "client", NULL};
        tg_webhook_post(srv, &e);
    }
    if (k->record_shared) { /* a pending retry record nobody decided: others stop finding it */
        k->record_shared = 0;
        if (k->srv->store.ops->record_drop != NULL) /* NULL: the cluster went (it expires) */
            k->srv->store.ops->record_drop(k->srv->store.ud, k->approval_key, k->approval_id);
    }
    if (k->sess) {
        if (k->kind == KIND_REQUEST && k->sess->inflight > 0)
            k->sess->inflight--;
        if (k->sess->get_stream == k)
            k->sess->get_stream = NULL;
        tg_list_unlink(&k->slink);
        k->sess->last_active_ms = now_ms(k->srv);
        tg_session_unref(k->sess);
        k->sess = NULL;
    }
    tg_list_insert_tail(&k->srv->dead_calls, &k->dlink);
    struct tg_sink *sk = k->sink;
    k->sink = NULL;
    if (sk != NULL)
        sk->ops->release(sk, k); /* last: a batch may answer and go now */
}

/* A decision is 4 KiB, past the slab's classes: its own free list keeps a tools/call free of
 * malloc. 64 cover every call of a loop iteration at the rates measured (docs/benchmarks.md). */
static struct tg_recycler decisions = TG_RECYCLER_INIT(sizeof(struct tg_decision), 64);

struct tg_decision *tg_call_decision_new(void) { return tg_recycle_alloc(&decisions); }
void tg_call_decision_free(struct tg_decision *d) { tg_recycle_free(&decisions, d); }

static void call_release(struct tg_call *k)
{
    tg_xfree(k->progress_token);
    tg_xfree(k->approval_reason);
    tg_policy_unref(k->policy);
    tg_xfree(k->grant);
    tg_xfree(k->subject);
    tg_xfree(k->issuer);
    tg_xfree(k->method);
    tg_xfree(k->tool);
    tg_recycle_free(&decisions, k->dec);
    tg_xfree(k->args_json);
    tg_xfree(k->id_key);
    tg_xfree(k->up_headers);
    tg_xfree(k->resend);
    tg_xfree(k->listen_uris);
    tg_xfree(k->input_req_id);
    tg__call_upauth_free(k->upauth);
    if (k->mrtr != NULL)
        tg_mcp_mrtr_call_dispose(k->mrtr);
    tg_xfree(k->mrtr);
    tg_buf_dispose(&k->held);
    tg_xfree(k->cred);
    tg_xfree(k->judged_why);
    cJSON_Delete(k->resume_params);
    tg_xfree(k->client_id);
    tg_upstream_unref(k->uprt);
    tg_xfree(k);
}

void tg_call_run_pending(struct tg_server *srv)
{
    while (!tg_list_empty(&srv->dead_calls)) {
        struct tg_call *k = tg_container_of(srv->dead_calls.next, struct tg_call, dlink);
        tg_list_unlink(&k->dlink);
        call_release(k);
    }
}

void tg_call_abandon(struct tg_call *k)
{
    /* A message still queued for a connection never reached the upstream: its reservations go
     * back. Once written, the tool may run: they stand. */
    if (k->forwarded && tg_call_running(k))
        tg_call_settle(k, k->ops->sent(k->upcall) ? TG_OUT_CLIENT_GONE : TG_OUT_CLIENT_GONE_NOT_SENT,
                       tg__call_latency(k));
    upstream_cancel(k);
}

/* ---- upcalls from transports --------------------------------------------------------- */

int tg_call_is_listen(const struct tg_call *k) { return k->is_listen; }

const char *tg_call_client_id(const struct tg_call *k, size_t *n)
{
    *n = k->client_id_len;
    return k->client_id;
}

int tg_call_running(const struct tg_call *k)
{
    return !k->closed && (k->upcall != NULL || k->awaiting || k->upauth_wait || k->kind == KIND_GET);
}

struct tg_sink *tg_call_sink(const struct tg_call *k) { return k->sink; }

void tg_call_client_gone(struct tg_call *k)
{
    if (k->closed)
        return;
    tg_call_abandon(k);
    tg_call_close(k);
}

void tg_call_client_drained(struct tg_call *k)
{
    if (!k->closed && k->sess != NULL)
        k->ops->pause(k->sess, k->upcall, 0);
}

void tg_call_pause_link(struct tg_session *s, int pause)
{
    if (s->uplink != NULL)
        s->uplink->ops->pause(s, NULL, pause);
}

void tg_call_session_drained(struct tg_session *s)
{
    tg_call_pause_link(s, 0);
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        k->ops->pause(s, k->upcall, 0);
    }
}

void tg_call_session_stall(struct tg_session *s, int delta)
{
    s->stalled += delta;
    if (delta < 0 && s->stalled == 0)
        tg_call_pause_link(s, 0);
}

/* ---- what the upstream says ----------------------------------------------------------- */

static void answer_of(const struct tg_call *k, struct tg_mcp_answer *a)
{
    a->gid = k->gid_str;
    a->gid_len = k->gid_len;
    a->client_id = k->client_id;
    a->client_id_len = k->client_id_len;
    a->is_request = k->kind == KIND_REQUEST;
    a->tools_filter = k->is_tools_list || k->list_kind > 0 ? k->policy : NULL;
    a->list_kind = k->list_kind; /* 0: TG_MCP_LIST_TOOLS */
    a->upstream = up_name(k);
    /* deliver_answer reads the original of an initialize or tools/list answer after the rewrite */
    a->own = k->is_init || k->is_tools_list || k->list_kind > 0 ? NULL : k->answer_src;
    a->result_at = NULL;
    a->maybe_update = NULL;
    int pins = k->is_tools_list && k->srv->pins_seen != NULL; /* a list that may teach pinned definitions */
    a->pins = pins ? tg_upstream_conf(k->uprt)->pins : NULL;
    a->pins_seen = pins ? k->srv->pins_seen : NULL;
}

/* A server-to-client request this upstream may not make (deny_server_requests), or any on a
 * sink that can carry only the answer: the gateway answers it with an error and the client
 * never sees it. A roots/list while roots are pinned is answered with them, on every path
 * (the client's own roots never reach the server), or dropped if its id is null (nothing to
 * answer, and no client may be asked). Returns 1 if refused, answered or dropped. */
int tg__call_refuse_server_request(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p,
                                    size_t n, int refuse_all, const char *why)
{
    const struct tg_upstream_conf *uc = tg_upstream_conf(u);
    const struct tg_roots *roots = tg_roots_of_session(srv, s, uc);
    if (uc->ndeny_server_requests == 0 && !refuse_all && roots == NULL)
        return 0;
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 1000, 1, &doc, NULL, NULL) != 0)
        return 0;
    cJSON *method = tg_json_get(doc.root, "method");
    cJSON *id = tg_json_get(doc.root, "id");
    int refused = 0;
    if (roots != NULL && cJSON_IsString(method) && strcmp(method->valuestring, "roots/list") == 0 &&
        cJSON_IsNull(id)) {
        cJSON_Delete(doc.root); /* no id to answer: dropped, never relayed to a client */
        return 1;
    }
    if (roots != NULL && cJSON_IsString(method) && strcmp(method->valuestring, "roots/list") == 0 && id != NULL) {
        srv->metrics.roots_answered++;
        tg_log(TG_LOG_DEBUG, "roots/list answered with the pinned roots", "upstream=%s session=%s", uc->name,
               s->id_str);
        struct tg_buf body;
        tg_roots_answer(&body, doc.id_raw, roots);
        ops_of(srv, uc)->reply(srv, s, u, body.base, body.len);
        tg_buf_dispose(&body);
        cJSON_Delete(doc.root);
        return 1;
    }
    if (cJSON_IsString(method) && id != NULL && !cJSON_IsNull(id)) {
        refused = refuse_all;
        for (size_t i = 0; i < uc->ndeny_server_requests; i++)
            if (strcmp(uc->deny_server_requests[i], method->valuestring) == 0)
                refused = 1;
    }
    if (refused) {
        srv->metrics.server_requests_denied++;
        char esc[96];
        tg_log(TG_LOG_INFO, "server request refused", "upstream=%s session=%s method=%s", uc->name, s->id_str,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(method->valuestring)));
        struct tg_buf body;
        tg_buf_init(&body);
        char msg[200];
        if (why != NULL)
            snprintf(msg, sizeof(msg), "%s cannot reach a client: %s", method->valuestring, why);
        else
            snprintf(msg, sizeof(msg), "%s is not allowed through the gateway for upstream %s", method->valuestring,
                     uc->name);
        tg_rpc_error(&body, doc.id_raw.ptr, doc.id_raw.len, TG_RPC_DENIED, msg, NULL);
        ops_of(srv, uc)->reply(srv, s, u, body.base, body.len);
        tg_buf_dispose(&body);
    }
    cJSON_Delete(doc.root);
    return refused;
}

void tg_call_backpressure(struct tg_call *k)
{
    struct tg_sink *sk = k->sink;
    k->ops->touch(k->upcall); /* progress keeps a long call alive */
    if (sk != NULL && sk->ops->high(sk)) {
        k->srv->metrics.limit_output++;
        k->ops->pause(k->sess, k->upcall, 1); /* the sink's drain resumes it */
    }
}

/* k's answer, rewritten already (out), to its sink: noted (initialize), made a 2026 result for
 * a 2026 client, answered. The one place an upstream's answer reaches a client. */
static void deliver_answer_at(struct tg_call *k, struct tg_buf *out, int is_error, const char *p, size_t n,
                              const size_t result_at[2]);

static void deliver_answer(struct tg_call *k, struct tg_buf *out, int is_error, const char *p, size_t n)
{
    static const size_t unknown[2] = {0, 0};
    deliver_answer_at(k, out, is_error, p, n, unknown);
}

/* result_at: where the result value is in out, if known (tg_mcp_answer.result_at). */
static void deliver_answer_at(struct tg_call *k, struct tg_buf *out, int is_error, const char *p, size_t n,
                              const size_t result_at[2])
{
    k->got_response = is_error ? 2 : 1;
    if (k->is_init) {
        tg_mcp_note_init_result(k->sess, p, n, k->srv->conf->limits.json_depth + 16);
        if (k->sess != NULL && (size_t)k->sess->upstream < k->srv->conf->nupstreams)
            k->srv->store.ops->session_share(k->srv->store.ud, k->sess, &k->srv->conf->upstreams[k->sess->upstream]);
    }
    if (k->task_aug && !is_error) /* an upstream's task id: its caller's alone */
        tg_tasks_note_relayed(k->srv, p, n, k->grant, k->subject, up_name(k));
    if (k->is_tools_list && !is_error && k->srv->schemas != NULL)
        tg_mcp_schemas_learn(k->srv->schemas, up_name(k), p, n); /* for 2026 clients' Mcp-Param-* */
    char why[160];
    if (k->filter != NULL && k->filter->answer != NULL && !is_error) {
        /* Across the eras: an answer the client's era cannot take (input_required for a 2025 client). */
        int shim = k->filter->answer(k, k->filter_data, out->base, out->len, why, sizeof(why));
        if (shim == 1)
            return; /* its client is asked for the input; the retry answers it */
        if (shim < 0) {
            tg_log(TG_LOG_WARN, "upstream answer refused", "upstream=%s grant=%s why=%s", up_name(k), k->grant, why);
            out->len = 0;
            tg_rpc_error(out, k->client_id, k->client_id_len, TG_RPC_UPSTREAM, why, NULL);
        }
    }
    if (k->mrtr != NULL && k->era == TG_ERA_2026 && !is_error) {
        const struct tg_roots *roots = tg_roots_of_session(k->srv, k->sess, tg_upstream_conf(k->uprt));
        k->mrtr->pinned_roots = roots != NULL ? roots->result : NULL; /* borrowed for the result below */
    }
    int mr = k->era == TG_ERA_2026 && !is_error
                 ? tg_mcp_modern_result_at(out, result_at[0], result_at[1], k->method, &k->srv->mrtr, k->mrtr,
                                           (int64_t)wall_ms(), why, sizeof(why))
                 : 0;
    if (k->mrtr != NULL)
        k->mrtr->pinned_roots = NULL;
    if (mr != 0) {
        /* An answer a 2026 client must not get: input it did not declare (-32021), input on a
         * method that takes none, a result type nobody knows. */
        tg_log(TG_LOG_WARN, "upstream answer refused", "upstream=%s grant=%s why=%s", up_name(k), k->grant, why);
        struct tg_buf d;
        tg_buf_init(&d);
        out->len = 0;
        if (mr == -2) {
            tg_buf_appendf(&d, "{\"requiredCapabilities\":{\"%s\":{}}}", why + 11);
            tg_buf_append(&d, "", 1);
            char msg[120];
            snprintf(msg, sizeof(msg), "Missing required client capability: %s", why + 11);
            tg_rpc_error(out, k->client_id, k->client_id_len, TG_RPC_MISSING_CAPABILITY, msg, d.base);
            k->answer_status = 400;
        } else {
            tg_mcp_upstream_data(&d, up_name(k));
            tg_rpc_error(out, k->client_id, k->client_id_len, TG_RPC_UPSTREAM, why, d.base);
        }
        tg_buf_dispose(&d);
    }
    if (k->sink != NULL) {
        k->answer_buf = out;
        k->sink->ops->answer(k->sink, k, k->answer_status ? k->answer_status : 200, NULL, out->base, out->len);
        k->answer_buf = NULL;
    }
}

int tg_call_take_answer(struct tg_call *k, const char *p, size_t n, struct tg_buf *to)
{
    int ok = k != NULL && k->answer_buf != NULL && k->answer_buf->base == p && k->answer_buf->len == n;
    if (ok) {
        *to = *k->answer_buf;
        tg_buf_init(k->answer_buf);
    }
    return ok;
}

/* The policy's word on a resource update, for every session whatever its era (core/bridge/listen.c
 * needs it too, but nothing in it crosses the eras). */
int tg__call_may_relay(struct tg_server *srv, struct tg_session *s, const char *p, size_t n)
{
    const struct tg_grant_conf *g = tg_conf_find_grant(srv->conf, s->grant);
    int ok = g != NULL && tg_mcp_relay_allowed(p, n, tg_conf_policy_for(srv->conf, g, s->upstream));
    if (!ok)
        tg_log(TG_LOG_DEBUG, "resource update for a resource the grant may not read; dropped", "session=%s",
               s->id_str);
    return ok;
}

/* What tg_call_upstream_message does, saying what p was: 0 (not looked at), or a TG_UPMSG_*. */
static int relay(struct tg_call *k, const char *p, size_t n, const struct tg_json_doc *pre)
{
    struct tg_sink *sk = k->sink;
    if (sk == NULL || !sk->ops->listening(sk))
        return 0;
    struct tg_buf out;
    tg_buf_init(&out);
    int valid, is_error;
    struct tg_slice srv_req;
    struct tg_mcp_answer a;
    answer_of(k, &a);
    int maybe_update = 0;
    a.maybe_update = &maybe_update;
    int mine = tg_mcp_restore_id(&a, p, n, pre, &out, &valid, &is_error, &srv_req);
    if (!valid) {
        tg_log(TG_LOG_WARN, "upstream sent a message that is not JSON; dropped", "upstream=%s session=%s",
               up_name(k), k->sess->id_str);
        tg_buf_dispose(&out);
        return 0;
    }
    if (mine) {
        deliver_answer(k, &out, is_error, p, n);
    } else if (valid != 2) {
        tg_log(TG_LOG_INFO, "upstream answer matches no call (or is a batch); dropped", "upstream=%s session=%s", up_name(k),
               k->sess->id_str); /* another call's id: never relayed (see tg_mcp_restore_id) */
    } else if (srv_req.len > 0 && /* only a request can be refused: a notification is not parsed again */
               (tg__call_refuse_server_request(k->srv, k->sess, k->uprt, p, n, (sk->flags & TG_SINK_ANSWER_ONLY) != 0,
                                               NULL) ||
                (k->filter != NULL && k->filter->server_request != NULL &&
                 k->filter->server_request(k, k->filter_data, p, n)) ||
                tg__call_refuse_server_request(k->srv, k->sess, k->uprt, p, n, (sk->flags & TG_SINK_STATELESS) != 0,
                                               NULL))) {
        tg_buf_dispose(&out);
        return 0;
    } else {
        if (srv_req.len > 0)
            tg_mcp_note_server_request(k->sess, srv_req);
        if (k->srv->pins_seen != NULL) /* NULL until a conf has pins: nothing to look for */
            tg_pins_seen_note(k->srv->pins_seen, tg_upstream_conf(k->uprt)->pins, up_name(k), p, n);
        if (k->is_listen) {
            /* Seen through the policy, tagged with the client's listen id. */
            if (tg_mcp_listen_message(&out, p, n, k->client_id, k->client_id_len, k->policy))
                sk->ops->message(sk, k, out.base, out.len);
        } else if (!(sk->flags & TG_SINK_ANSWER_ONLY) &&
                   (!maybe_update || tg__call_may_relay(k->srv, k->sess, p, n))) {
            sk->ops->message(sk, k, p, n); /* as it came: nothing in it is rewritten */
        }
    }
    tg_buf_dispose(&out);
    return !mine ? TG_UPMSG_RELAYED : is_error ? TG_UPMSG_ANSWER_ERROR : TG_UPMSG_ANSWER;
}

/* The kind's message callback: the kind asks for backpressure once, when its read is done. */
int tg__call_message(void *call, const char *p, size_t n) { return relay(call, p, n, NULL); }

int tg_call_upstream_message(struct tg_call *k, const char *p, size_t n, const struct tg_json_doc *pre)
{
    int r = relay(k, p, n, pre);
    if (r == 0)
        return 0;
    if (k->feeding)
        k->feeding = 2; /* once, when the bytes are all read */
    else if (!k->closed)
        tg_call_backpressure(k);
    return r >= TG_UPMSG_ANSWER;
}

int tg_call_answer(struct tg_call *k, const char *p, size_t n, const struct tg_json_doc *pre)
{
    struct tg_buf out;
    tg_buf_init(&out);
    int valid, is_error;
    struct tg_mcp_answer a;
    answer_of(k, &a);
    size_t result_at[2] = {0, 0};
    a.result_at = result_at;
    int mine = tg_mcp_restore_id(&a, p, n, pre, &out, &valid, &is_error, NULL);
    if (mine)
        deliver_answer_at(k, &out, is_error, p, n, result_at);
    tg_buf_dispose(&out);
    return mine;
}

void tg_call_stream(struct tg_call *k)
{
    if (k->sink != NULL)
        k->sink->ops->stream(k->sink, k);
}

void tg_call_answer_error(struct tg_call *k, const char *why, int status)
{
    struct tg_sink *sk = k->sink;
    if (sk == NULL)
        return;
    struct tg_buf e, d;
    tg_buf_init(&e);
    tg_buf_init(&d);
    tg_mcp_upstream_data(&d, up_name(k));
    if (k->kind == KIND_REQUEST) {
        /* An initialize that failed made no session after all. */
        if (k->is_init && (sk->flags & TG_SINK_NEW_SESSION) && k->sess != NULL && k->sess->live)
            tg_session_remove(k->srv->sessions, k->sess);
        tg_rpc_error(&e, k->client_id, k->client_id_len, TG_RPC_UPSTREAM, why, d.base);
        sk->ops->answer(sk, k, 200, NULL, e.base, e.len);
    } else {
        tg_rpc_error(&e, NULL, 0, TG_RPC_UPSTREAM, why, d.base);
        sk->ops->bare(sk, k, status ? status : strstr(why, "timed out") ? 504 : 502, NULL, e.base, e.len);
    }
    tg_buf_dispose(&e);
    tg_buf_dispose(&d);
}

void tg_call_close_upstream_session(struct tg_server *srv, struct tg_session *s)
{
    const struct tg_upstream_ops *ops = tg__call_ops_of(srv, s);
    if (ops != NULL)
        ops->close(srv, s);
}

void tg_call_tell_upstream(struct tg_server *srv, struct tg_session *s, const char *p, size_t n)
{
    const struct tg_upstream_ops *ops = tg__call_ops_of(srv, s);
    if (ops != NULL)
        ops->reply(srv, s, srv->upstreams[s->upstream], p, n);
}

int tg_call_kind_has_link(struct tg_server *srv, struct tg_session *s)
{
    const struct tg_upstream_ops *ops = tg__call_ops_of(srv, s);
    return ops != NULL && (ops->flags & TG_UPOPS_SESSION_LINK) != 0;
}

void tg_call_finish(struct tg_call *k)
{
    if (k->sink != NULL)
        k->sink->ops->end(k->sink, k);
    tg_call_close(k);
}

void tg_call_fail(struct tg_call *k, enum tg_outcome o, const char *why, double latency_ms)
{
    tg_call_settle(k, o, latency_ms < 0 ? tg__call_latency(k) : latency_ms);
    tg_call_answer_error(k, why, 0);
    tg_call_finish(k);
}

/* ---- message-stream upstreams: the calls waiting on a session's link ------------------- */

struct tg_call *tg_call_first_awaiting(struct tg_session *s)
{
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->awaiting)
            return k;
    }
    return NULL;
}

/* ---- sessions ending ------------------------------------------------------------------- */

void tg_call_end_get_stream(struct tg_session *s)
{
    struct tg_call *k = s->get_stream;
    if (k == NULL)
        return;
    upstream_cancel(k);
    struct tg_sink *sk = k->sink;
    if (sk != NULL)
        sk->ops->bare(sk, k, 405, "Allow: POST, DELETE\r\n", NULL, 0); /* a stream only ends */
    tg_call_finish(k);
}

/* The client ended its session (DELETE, or its SSE stream or WebSocket closed) while calls ran:
 * they are abandoned now, not when the upstream gets round to answering, and audited as
 * client_gone (the upstream may have run them: their reservations stand). A client still
 * waiting on one gets -32004. */
static struct tg_call *first_running(struct tg_session *s)
{
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->kind != KIND_GET && !k->parked && tg_call_running(k))
            return k;
    }
    return NULL;
}

void tg_call_end_session_calls(struct tg_session *s)
{
    tg_session_ref(s); /* an initialize's error takes its new session away, and its call held the last reference */
    for (struct tg_call *k; (k = first_running(s)) != NULL;) {
        tg_call_abandon(k);
        if (k->sink != NULL && k->sink->ops->listening(k->sink))
            tg_call_answer_error(k, "the session ended before the answer came", 0);
        tg_call_finish(k);
    }
    tg_session_unref(s);
}

void tg_call_abort_waiting(struct tg_server *srv)
{
    while (!tg_list_empty(&srv->awaiting)) {
        struct tg_call *k = tg_container_of(srv->awaiting.next, struct tg_call, alink);
        tg_call_fail(k, TG_OUT_UNAVAILABLE, "the gateway is shutting down", -1);
    }
}

void tg_call_expire_awaiting(struct tg_server *srv)
{
    /* The due ones move to a list of their own first; then the first is taken each time (a
     * failure may close another call, which then leaves this list too). */
    uint64_t now = now_ms(srv);
    struct tg_list due;
    tg_list_init(&due);
    for (struct tg_list *al = srv->awaiting.next, *next; al != &srv->awaiting; al = next) {
        next = al->next;
        struct tg_call *k = tg_container_of(al, struct tg_call, alink);
        if (k->deadline <= now) {
            tg_list_unlink(&k->alink);
            tg_list_insert_tail(&due, &k->alink);
        }
    }
    while (!tg_list_empty(&due)) {
        struct tg_call *k = tg_container_of(due.next, struct tg_call, alink);
        char why[160];
        snprintf(why, sizeof(why), "upstream %s timed out", up_name(k));
        tg_call_fail(k, TG_OUT_TIMEOUT, why, -1); /* it may have run */
    }
}

static int count_inflight(struct tg_session *s, void *arg)
{
    *(size_t *)arg += s->inflight;
    return 0;
}

size_t tg_call_inflight(struct tg_server *srv)
{
    size_t n = 0;
    tg_session_sweep(srv->sessions, count_inflight, &n);
    return n;
}
