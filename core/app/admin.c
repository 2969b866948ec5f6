/* The admin listener's applets: /metrics (Prometheus text), /healthz and /readyz, and the admin
 * API (/admin/approvals, /admin/approvals/ID/approve|deny, /admin/reload), and the approvals
 * page under /admin/ui/ (core/app/approvals_page.c). Answers made inside the gateway, beside the proxy path. */
#include "core/app/server.h"
#include "core/app/admin.h"
#include "core/app/keys.h"

#include "cluster/cluster.h"
#include "core/app/approvals_page.h"
#include "core/app/throttle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/approvals.h"
#include "core/call/audit.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "policy/pins.h"
#include "core/base/log.h"
#include "core/app/route.h"
#include "core/call/session.h"
#include "policy/auth.h"
#include "policy/dpop.h"
#include "policy/jwt_cache.h"
#include "policy/policy.h"
#include "transports/http1/http1.h"
#include "transports/channel.h"
#include "transports/respond.h"
#include "upstream/token_exchange.h"
#include "upstream/pool/pool.h"
#include "upstream/child.h"

static int admin_authorized(struct tg_server *srv, struct tg_conn *c)
{
    if (!srv->conf->admin.has_token)
        return 0;
    struct tg_slice tok;
    uint8_t h[32];
    if (tg_auth_bearer(tg_http_req_header(c->req, "authorization"), &tok) != 0)
        return 0;
    tg_sha256(tok.ptr, tok.len, h);
    return tg_ct_equal(h, srv->conf->admin.token_sha256, 32);
}

/* The admin API's bearer check behind the admin throttle (core/app/throttle.h), the buckets the
 * page's login fills: 1 to go on; else answered. A full bucket is 429 with Retry-After before the
 * token is looked at; a wrong token is 401 and fills the buckets; a request without an
 * Authorization header tries no token: 401, not counted. */
static int admin_api_gate(struct tg_server *srv, struct tg_conn *c)
{
    unsigned wait = tg_admin_throttle_check(srv, c, TG_ADMIN_DOOR_API);
    if (wait > 0) {
        char h429[64];
        snprintf(h429, sizeof(h429), "Retry-After: %u\r\n", wait);
        tg_http_respond(c, 429, h429, "application/json", "{\"error\":\"too many wrong tokens; try again later\"}",
                        50);
        return 0;
    }
    if (admin_authorized(srv, c))
        return 1;
    if (tg_http_req_header(c->req, "authorization").ptr != NULL) {
        tg_admin_throttle_failed(srv, c, TG_ADMIN_DOOR_API);
        tg_log(TG_LOG_WARN, "admin API bearer refused", "conn=%llu", (unsigned long long)c->id);
    }
    tg_http_respond(c, 401, "WWW-Authenticate: Bearer realm=\"tollgate-admin\"\r\n", "application/json",
                    "{\"error\":\"unauthorized\"}", 24);
    return 0;
}

/* GET /admin/approvals: every pending approval (every member's, with a cluster), as the page
 * lists them; the arguments only with audit.args = "values". Owner: the queue's callback, which
 * frees it. */
struct list_wait {
    struct tg_http_wait w;
    int args;
};

static void on_listed(void *ud, const struct tg_approval_item *items, size_t n)
{
    struct list_wait *lw = ud;
    struct tg_conn *c = tg_http_wait_stop(&lw->w);
    int args = lw->args;
    free(lw);
    if (c == NULL)
        return;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_approvals_write(&b, items, n, args);
    tg_http_respond(c, 200, NULL, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

static void list_approvals(struct tg_server *srv, struct tg_conn *c)
{
    struct list_wait *lw = tg_xcalloc(1, sizeof(*lw));
    lw->args = srv->conf->audit.values;
    tg_http_wait_start(&lw->w, c);
    srv->store.ops->approvals_list(srv->store.ud, on_listed, lw);
}

/* A label value as Prometheus reads it: backslash, double quote and newline escaped. */
static void label(struct tg_buf *out, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            tg_buf_append(out, "\\", 1);
        if (*v == '\n')
            tg_buf_append(out, "\\n", 2);
        else
            tg_buf_append(out, v, 1);
    }
}

static void pin_metric(void *ud, const char *upstream, const char *tool, uint64_t n)
{
    struct tg_buf *out = ud;
    tg_buf_appends(out, "tollgate_pin_mismatches_total{upstream=\"");
    label(out, upstream);
    tg_buf_appends(out, "\",tool=\"");
    label(out, tool);
    tg_buf_appendf(out, "\"} %llu\n", (unsigned long long)n);
}

#define C(name, help, val)                                                                                     \
    tg_buf_appendf(out, "# HELP tollgate_" name " " help "\n# TYPE tollgate_" name " counter\ntollgate_" name " %llu\n", \
                   (unsigned long long)(val))
#define G(name, help, val)                                                                                     \
    tg_buf_appendf(out, "# HELP tollgate_" name " " help "\n# TYPE tollgate_" name " gauge\ntollgate_" name " %llu\n", \
                   (unsigned long long)(val))

static void metrics_render(struct tg_server *srv, struct tg_buf *out)
{
    const struct tg_metrics *m = &srv->metrics;
    G("connections_open", "Client connections open.", tg_app_of(srv)->http.nconns);
    C("connections_accepted_total", "Client connections accepted.", m->conns_accepted);
    C("connections_rejected_total", "Connections refused at limits.max_connections or failed to accept (EMFILE).", m->conns_rejected);
    C("tls_handshake_failures_total", "Failed TLS handshakes.", m->tls_handshake_failures);
    C("tls_handshakes_put_off_total", "TLS handshakes that waited for a later loop iteration (limits.tls_handshake_slice_ms).",
      m->tls_handshakes_put_off);
    C("tls_trimmed_bytes_total", "Bytes of idle TLS connections' record buffers given back to the kernel.",
      m->tls_trimmed_bytes);
    C("http_requests_total", "HTTP requests parsed.", m->http_requests);
    tg_buf_appends(out, "# HELP tollgate_http_responses_total HTTP responses by status class.\n"
                        "# TYPE tollgate_http_responses_total counter\n");
    for (int i = 1; i < 6; i++)
        tg_buf_appendf(out, "tollgate_http_responses_total{class=\"%dxx\"} %llu\n", i,
                       (unsigned long long)m->http_status[i]);
    tg_buf_appends(out, "# HELP tollgate_limit_hits_total Requests refused or paused at a configured limit.\n"
                        "# TYPE tollgate_limit_hits_total counter\n");
    tg_buf_appendf(out, "tollgate_limit_hits_total{limit=\"header_bytes\"} %llu\n",
                   (unsigned long long)m->limit_header_bytes);
    tg_buf_appendf(out, "tollgate_limit_hits_total{limit=\"body_bytes\"} %llu\n",
                   (unsigned long long)m->limit_body_bytes);
    tg_buf_appendf(out, "tollgate_limit_hits_total{limit=\"json\"} %llu\n", (unsigned long long)m->limit_json);
    tg_buf_appendf(out, "tollgate_limit_hits_total{limit=\"inflight_per_session\"} %llu\n",
                   (unsigned long long)m->limit_inflight);
    tg_buf_appendf(out, "tollgate_limit_hits_total{limit=\"sessions_per_grant\"} %llu\n",
                   (unsigned long long)m->limit_sessions);
    tg_buf_appendf(out, "tollgate_limit_hits_total{limit=\"output_high_water\"} %llu\n",
                   (unsigned long long)m->limit_output);
    tg_buf_appendf(out, "tollgate_limit_hits_total{limit=\"max_children\"} %llu\n",
                   (unsigned long long)m->limit_children);
    tg_buf_appends(out, "# HELP tollgate_output_buffered_bytes Bytes queued to clients and not yet written, all "
                        "connections together (bounded by limits.output_total_bytes).\n"
                        "# TYPE tollgate_output_buffered_bytes gauge\n");
    tg_buf_appendf(out, "tollgate_output_buffered_bytes %llu\n", (unsigned long long)m->output_buffered);
    size_t nsse, nws, nall = tg_session_table_count(srv->sessions);
    tg_channels_count(srv, &nsse, &nws);
    tg_buf_appends(out, "# HELP tollgate_sessions_open Live MCP sessions by client transport.\n"
                        "# TYPE tollgate_sessions_open gauge\n");
    tg_buf_appendf(out, "tollgate_sessions_open{transport=\"streamable_http\"} %zu\n",
                   nall >= nsse + nws ? nall - nsse - nws : 0);
    tg_buf_appendf(out, "tollgate_sessions_open{transport=\"sse\"} %zu\n", nsse);
    tg_buf_appendf(out, "tollgate_sessions_open{transport=\"websocket\"} %zu\n", nws);
    C("sessions_created_total", "MCP sessions created.", m->sessions_created);
    C("sessions_adopted_total", "2025 sessions another member of the cluster made, served here (their record read from Redis).", m->sessions_adopted);
    C("sessions_expired_total", "MCP sessions dropped after limits.session_idle_timeout_ms.", m->sessions_expired);
    C("rpc_requests_total", "JSON-RPC requests forwarded.", m->rpc_requests);
    C("rpc_notifications_total", "JSON-RPC notifications forwarded.", m->rpc_notifications);
    C("rpc_responses_total", "JSON-RPC responses (to server requests) forwarded.", m->rpc_responses);
    C("rpc_refused_nonstandard_total", "Messages refused for a non-standard method.", m->rpc_refused_nonstandard);
    C("sse_events_relayed_total", "SSE events relayed to clients.", m->sse_events_relayed);
    tg_buf_appends(out, "# HELP tollgate_decisions_total Policy decisions by verdict.\n"
                        "# TYPE tollgate_decisions_total counter\n");
    static const char *const verdicts[] = {"allow", "deny", "limited", "approve"};
    for (int i = 0; i < 4; i++)
        tg_buf_appendf(out, "tollgate_decisions_total{verdict=\"%s\"} %llu\n", verdicts[i],
                       (unsigned long long)m->decisions[i]);
    C("refunds_total", "Calls whose counter reservations were given back.", m->refunds);
    tg_label_counts_render(m->brakes, out, "tollgate_brakes_total",
                           "Calls a runaway-loop brake refused (-32002, rule brake), by upstream and tool.", "upstream", "tool");
    tg_label_counts_render(m->history_refusals, out, "tollgate_history_refusals_total",
                           "Calls a history condition refused (-32001), by upstream and rule.", "upstream", "rule");
    G("approvals_pending", "Calls parked for a human's approval.", srv->napprovals);
    tg_buf_appends(out, "# HELP tollgate_approvals_total Parked calls by outcome.\n"
                        "# TYPE tollgate_approvals_total counter\n");
    tg_buf_appendf(out, "tollgate_approvals_total{outcome=\"approved\"} %llu\n",
                   (unsigned long long)m->approvals_approved);
    tg_buf_appendf(out, "tollgate_approvals_total{outcome=\"rejected\"} %llu\n",
                   (unsigned long long)m->approvals_rejected);
    tg_buf_appendf(out, "tollgate_approvals_total{outcome=\"expired\"} %llu\n",
                   (unsigned long long)m->approvals_expired);
    G("approvals_parked_bytes", "Bytes the parked calls hold (requests and copies of their arguments).",
      srv->approvals_bytes);
    tg_buf_appends(out, "# HELP tollgate_approvals_refused_total Calls that needed approval, refused by reason.\n"
                        "# TYPE tollgate_approvals_refused_total counter\n");
    static const char *const refusals[] = {"queue_full", "bytes", "per_grant", "batch", "no_longer_allowed"};
    for (int i = 0; i < 5; i++)
        tg_buf_appendf(out, "tollgate_approvals_refused_total{reason=\"%s\"} %llu\n", refusals[i],
                       (unsigned long long)m->approvals_refused[i]);
    tg_buf_appends(out, "# HELP tollgate_approval_webhook_total Approval webhook events by outcome.\n"
                        "# TYPE tollgate_approval_webhook_total counter\n");
    static const char *const hooks[] = {"sent", "retried", "failed", "dropped"};
    for (int i = 0; i < 4; i++)
        tg_buf_appendf(out, "tollgate_approval_webhook_total{outcome=\"%s\"} %llu\n", hooks[i],
                       (unsigned long long)m->webhook[i]);
    C("server_requests_denied_total", "Server-to-client requests refused (deny_server_requests, batches).",
      m->server_requests_denied);
    tg_tx_metrics(srv->token_cache, out);
    C("roots_answered_total", "Server roots/list requests the gateway answered with the pinned roots.",
      m->roots_answered);
    C("dpop_refused_total", "Requests refused for DPoP (401 invalid_dpop_proof or a bound token's invalid_token).",
      m->dpop_refused);
    struct tg_dpop_replay_stats ds = {0};
    if (srv->dpop_replay != NULL)
        tg_dpop_replay_stats(srv->dpop_replay, &ds);
    G("dpop_replay_entries", "DPoP proofs remembered against replay (limits.dpop_replay_entries).", ds.entries);
    G("dpop_replay_memory_bytes", "Memory of the DPoP replay cache.", ds.bytes);
    C("dpop_replay_evicted_total", "DPoP proofs forgotten inside their window because the cache was full.",
      ds.evicted);
    struct tg_jwt_cache_stats js = {0};
    for (size_t i = 0; i < srv->conf->njwt; i++) {
        struct tg_jwt_cache_stats one;
        tg_jwt_cache_stats(srv->conf->jwt[i].cache, &one);
        js.entries += one.entries, js.bytes += one.bytes, js.hits += one.hits, js.misses += one.misses;
    }
    G("jwt_cache_entries", "Verified JWTs remembered (jwt[].cache_entries; emptied by a reload).", js.entries);
    G("jwt_cache_memory_bytes", "Memory of the verified-JWT caches.", js.bytes);
    G("jwt_cache_hits", "JWTs served from the cache since the configuration was loaded.", js.hits);
    G("jwt_cache_misses", "JWTs verified in full since the configuration was loaded.", js.misses);
    G("counters_live", "Rate-limit buckets and windows held in memory.", tg_counters_count(srv->counters));
    G("counters_memory_bytes", "Memory of the counter table.", tg_counters_memory(srv->counters));
    G("history_keys", "Subjects and grants whose calls history remembers (limits.history_calls each).",
      tg_counters_history_keys(srv->counters));
    G("history_memory_bytes", "Memory of the remembered calls (limits.history_bytes).", tg_counters_history_memory(srv->counters));
    if (tg_app_of(srv)->cluster != NULL)
        tg_cluster_metrics(tg_app_of(srv)->cluster, out);
    C("audit_records_total", "Audit records written.", tg_audit_written(srv->audit));
    C("audit_dropped_total", "Audit records dropped: the disk fell behind or a write failed.", tg_audit_dropped(srv->audit));
    C("reloads_total", "Successful configuration reloads.", srv->reloads);
    tg_keys_metrics(tg_app_of(srv)->keys, out);
    G("upstream_processes", "stdio upstream children alive (warm ones included).", tg_child_live_count());
    C("reload_failures_total", "Reloads refused (the old configuration stayed).", srv->reload_failures);
    C("upstream_calls_total", "HTTP requests sent to upstreams.", m->upstream_calls);
    C("upstream_errors_total", "Upstream requests that failed.", m->upstream_errors);
    C("upstream_timeouts_total", "Upstream requests that timed out.", m->upstream_timeouts);
    C("upstream_queue_timeouts_total", "Calls that waited too long for a pooled connection.",
      m->upstream_queue_timeouts);
    C("upstream_connects_total", "Upstream TCP connections opened.", m->upstream_connects);
    C("upstream_pipelined_total", "Upstream calls written behind another on its connection (pool.pipeline).",
      m->upstream_pipelined);
    C("upstream_request_writes_total", "Writes of upstream requests (several pipelined calls leave in one).",
      m->upstream_writes);
    C("upstream_backoff_refusals_total", "Upstream requests refused at once while the upstream was backing off.",
      m->upstream_backoff_refusals);
    tg_buf_appends(out, "# HELP tollgate_upstream_pool Upstream connections by state.\n"
                        "# TYPE tollgate_upstream_pool gauge\n");
    for (size_t i = 0; i < srv->nupstreams; i++) {
        if (srv->upstreams[i] == NULL)
            continue;
        size_t total, idle, queued, dedicated;
        tg_upstream_stats(srv->upstreams[i], &total, &idle, &queued, &dedicated);
        const char *n = srv->conf->upstreams[i].name;
        tg_buf_appendf(out, "tollgate_upstream_pool{upstream=\"%s\",state=\"pooled\"} %zu\n", n, total);
        tg_buf_appendf(out, "tollgate_upstream_pool{upstream=\"%s\",state=\"idle\"} %zu\n", n, idle);
        tg_buf_appendf(out, "tollgate_upstream_pool{upstream=\"%s\",state=\"queued\"} %zu\n", n, queued);
        tg_buf_appendf(out, "tollgate_upstream_pool{upstream=\"%s\",state=\"streams\"} %zu\n", n, dedicated);
    }
    tg_buf_appends(out, "# HELP tollgate_pin_mismatches_total Tool definitions listed by an upstream that differ from "
                        "their pin (each distinct change once).\n# TYPE tollgate_pin_mismatches_total counter\n");
    tg_pins_seen_each(srv->pins_seen, pin_metric, out);
    tg_buf_appends(out, "# HELP tollgate_stdio_evictions_total stdio children taken at max_children from idle sessions "
                        "(same_grant: of the new session's grant; other_grant: idle limits.stdio_evict_idle_ms).\n"
                        "# TYPE tollgate_stdio_evictions_total counter\n");
    for (size_t i = 0; i < srv->nupstreams; i++) {
        if (srv->upstreams[i] == NULL || srv->conf->upstreams[i].transport != TG_UP_STDIO)
            continue;
        const char *n = srv->conf->upstreams[i].name;
        tg_buf_appendf(out, "tollgate_stdio_evictions_total{upstream=\"%s\",reason=\"same_grant\"} %llu\n", n,
                       (unsigned long long)tg_upstream_evictions(srv->upstreams[i], TG_EVICT_SAME_GRANT));
        tg_buf_appendf(out, "tollgate_stdio_evictions_total{upstream=\"%s\",reason=\"other_grant\"} %llu\n", n,
                       (unsigned long long)tg_upstream_evictions(srv->upstreams[i], TG_EVICT_OTHER_GRANT));
    }
    tg_buf_appendf(out,
                   "# HELP tollgate_loop_busy_max_seconds Longest event-loop iteration since start (time not spent "
                   "waiting for I/O).\n# TYPE tollgate_loop_busy_max_seconds gauge\ntollgate_loop_busy_max_seconds %.6f\n",
                   (double)m->loop_busy_max_ns / 1e9);
    C("loop_stalls_total", "Event-loop iterations that ran 100 ms or more.", m->loop_stalls);
    C("loop_iterations_total", "Event-loop iterations.", m->loop_iterations);
    tg_admin_throttle_metrics(out);
    tg_buf_appends(out, "# HELP tollgate_upstream_latency_seconds Upstream call latency.\n"
                        "# TYPE tollgate_upstream_latency_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < 12; i++) {
        cum += m->lat_buckets[i];
        if (i == 11)
            tg_buf_appendf(out, "tollgate_upstream_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
                           (unsigned long long)cum);
        else
            tg_buf_appendf(out, "tollgate_upstream_latency_seconds_bucket{le=\"%g\"} %llu\n", tg_metrics_lat_bounds[i] / 1000.0,
                           (unsigned long long)cum);
    }
    tg_buf_appendf(out, "tollgate_upstream_latency_seconds_sum %g\ntollgate_upstream_latency_seconds_count %llu\n",
                   m->lat_sum, (unsigned long long)m->lat_count);
}

/* POST /admin/reload waiting for its reload. Owner: the reload (its done callback frees it). */
static void on_reloaded(void *ud, int ok, const struct tg_buf *err)
{
    struct tg_conn *c = tg_http_wait_stop(ud);
    free(ud);
    if (c == NULL)
        return;
    if (ok) {
        tg_respond_json(c, 200, "{\"status\":\"reloaded\"}");
        return;
    }
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"status\":\"failed\",\"errors\":");
    tg_json_write_string(&b, err->base ? err->base : "", err->len);
    tg_buf_appends(&b, "}");
    tg_http_respond(c, 400, NULL, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

/* POST /admin/approvals/ID/... waiting for the queue's answer. Owner: the queue operation (its
 * callback frees it). */
struct decide_wait {
    struct tg_http_wait w;
    int approve;
    char id[65];
    char by[96];
    char digest[65];  /* approve: the JSON body's "digest", or "" */
    char reason[601]; /* deny: the JSON body's "reason", or "" */
};

static void on_decided(void *ud, int rc, const char *why)
{
    struct decide_wait *w = ud;
    struct tg_conn *c = tg_http_wait_stop(&w->w);
    if (c != NULL) {
        if (rc == TG_APPROVAL_STALE) {
            tg_respond_json(c, 409, "{\"error\":\"the digest is not the parked call's (GET /admin/approvals shows it); "
                                    "nothing was run\"}");
        } else if (rc == TG_APPROVAL_NOT_ALLOWED) {
            /* Approved under a configuration that no longer lets it run: refused, nothing ran. */
            struct tg_buf b;
            tg_buf_init(&b);
            tg_buf_appends(&b, "{\"error\":");
            char msg[700];
            snprintf(msg, sizeof(msg), "no longer allowed: %s", why ? why : "the configuration changed");
            tg_json_write_string(&b, msg, strlen(msg));
            tg_buf_appends(&b, "}");
            tg_http_respond(c, 409, NULL, "application/json", b.base, b.len);
            tg_buf_dispose(&b);
        } else if (rc != 0) {
            tg_respond_json(c, 404, "{\"error\":\"no pending approval with this id (decided, expired or unknown)\"}");
        } else {
            struct tg_buf b;
            tg_buf_init(&b);
            tg_buf_appends(&b, "{\"id\":");
            tg_json_write_string(&b, w->id, strlen(w->id));
            tg_buf_appendf(&b, ",\"decision\":\"%s\",\"by\":", w->approve ? "approved" : "denied");
            tg_json_write_string(&b, w->by, strlen(w->by));
            tg_buf_appends(&b, "}");
            tg_http_respond(c, 200, NULL, "application/json", b.base, b.len);
            tg_buf_dispose(&b);
        }
    }
    free(w);
}

static void admin_decide(struct tg_server *srv, struct tg_conn *c, struct tg_slice rest)
{
    /* rest = "ID/approve" or "ID/deny" */
    const char *slash = memchr(rest.ptr, '/', rest.len);
    if (slash == NULL) {
        tg_respond_json(c, 404, "{\"error\":\"use POST /admin/approvals/ID/approve or /deny\"}");
        return;
    }
    struct tg_slice id = tg_slice_of(rest.ptr, (size_t)(slash - rest.ptr));
    struct tg_slice verb = tg_slice_of(slash + 1, rest.len - id.len - 1);
    int approve = tg_slice_eq(verb, TG_SLICE("approve"));
    if (!approve && !tg_slice_eq(verb, TG_SLICE("deny"))) {
        tg_respond_json(c, 404, "{\"error\":\"use POST /admin/approvals/ID/approve or /deny\"}");
        return;
    }
    if (id.len == 0 || id.len > 64) {
        tg_respond_json(c, 404, "{\"error\":\"no pending approval with this id (decided, expired or unknown)\"}");
        return;
    }
    /* Who decided: the approver's name if the caller gives one, else "api", for the audit log
     * and the page. */
    struct decide_wait *w = tg_xcalloc(1, sizeof(*w));
    snprintf(w->by, sizeof(w->by), "api");
    struct tg_slice who = tg_http_req_header(c->req, "x-tollgate-approver");
    if (who.ptr != NULL && who.len > 0) {
        /* Recorded as given (JSON-escaped where it is written), printable ASCII only, bounded. */
        size_t o = 0;
        for (size_t i = 0; i < who.len && o < 64; i++) {
            unsigned char ch = (unsigned char)who.ptr[i];
            w->by[o++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
        }
        w->by[o] = '\0';
    }
    /* The JSON body: approve names the digest of what the approver saw ({"digest":"..."}), which
     * must be the parked call's; deny may give a reason ({"reason":"..."}) that goes to the client
     * in error.data.reason, as the page's form field does. Refused (400) rather than cut or
     * ignored when it is not that. */
    if (c->req->body.len > 0) {
        struct tg_json_doc doc = {0};
        const char *jerr;
        size_t joff;
        int bad = tg_json_parse(c->req->body.base, c->req->body.len, 8, 1, &doc, &jerr, &joff) != 0;
        const cJSON *r = bad ? NULL : tg_json_get(doc.root, "reason");
        const cJSON *d = bad ? NULL : tg_json_get(doc.root, "digest");
        bad = bad || !cJSON_IsObject(doc.root) || (r != NULL && !cJSON_IsString(r)) ||
              (r != NULL && strlen(r->valuestring) >= sizeof(w->reason)) || (d != NULL && !cJSON_IsString(d));
        if (!bad && r != NULL && !approve) {
            snprintf(w->reason, sizeof(w->reason), "%s", r->valuestring);
            for (char *p = w->reason; *p; p++) /* no control characters in the log or the answer */
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                    *p = ' ';
        }
        if (!bad && d != NULL && approve && strlen(d->valuestring) < sizeof(w->digest))
            snprintf(w->digest, sizeof(w->digest), "%s", d->valuestring);
        cJSON_Delete(doc.root);
        if (bad) {
            free(w);
            tg_respond_json(c, 400, "{\"error\":\"the body must be a JSON object with a string digest (approve) or an "
                                    "optional string reason of at most 600 bytes (deny)\"}");
            return;
        }
    }
    memcpy(w->id, id.ptr, id.len);
    w->approve = approve;
    tg_http_wait_start(&w->w, c);
    srv->store.ops->approval_decide(srv->store.ud, id, approve, w->digest, w->by, w->reason, on_decided, w);
}

void tg_admin_handle(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_slice url = tg_http_req_url(c->req);
    size_t q = 0;
    while (q < url.len && url.ptr[q] != '?')
        q++;
    struct tg_slice path = tg_slice_of(url.ptr, q);
    if (tg_slice_eq(path, TG_SLICE("/healthz"))) {
        tg_respond_json(c, 200, "{\"status\":\"ok\"}");
        return;
    }
    if (tg_slice_eq(path, TG_SLICE("/readyz"))) {
        tg_route_readyz(srv, c);
        return;
    }
    if (tg_slice_eq(path, TG_SLICE("/metrics"))) {
        if (srv->conf->admin.has_token && !admin_authorized(srv, c)) {
            tg_http_respond(c, 401, "WWW-Authenticate: Bearer realm=\"tollgate-admin\"\r\n", "text/plain",
                            "unauthorized\n", 13);
            return;
        }
        struct tg_buf b;
        tg_buf_init(&b);
        metrics_render(srv, &b);
        tg_http_respond(c, 200, NULL, "text/plain; version=0.0.4", b.base, b.len);
        tg_buf_dispose(&b);
        return;
    }
    if (tg_slice_starts_with(path, "/admin/")) {
        if (!srv->conf->admin.has_token) {
            tg_respond_json(c, 403, "{\"error\":\"the admin API needs admin.token_sha256 in the configuration\"}");
            return;
        }
        if (tg_slice_eq(path, TG_SLICE("/admin/ui")) || tg_slice_starts_with(path, "/admin/ui/")) {
            tg_approvals_page_handle(srv, c, path); /* its own sign-in: a session cookie, not the bearer */
            return;
        }
        if (!admin_api_gate(srv, c))
            return;
        if (tg_slice_eq(path, TG_SLICE("/admin/approvals")) && c->req->method == HTTP_GET) {
            list_approvals(srv, c);
            return;
        }
        if (tg_slice_starts_with(path, "/admin/approvals/") && c->req->method == HTTP_POST) {
            admin_decide(srv, c, tg_slice_of(path.ptr + 17, path.len - 17));
            return;
        }
        if (tg_slice_eq(path, TG_SLICE("/admin/reload")) && c->req->method == HTTP_POST) {
            /* Answered when the reload is over (the conf is read off the loop). */
            struct tg_http_wait *w = tg_xcalloc(1, sizeof(*w));
            tg_http_wait_start(w, c);
            srv->reload_start(srv, on_reloaded, w);
            return;
        }
        tg_respond_json(c, 404, "{\"error\":\"unknown admin endpoint\"}");
        return;
    }
    tg_http_respond(c, 404, NULL, "text/plain", "not found\n", 10);
}
