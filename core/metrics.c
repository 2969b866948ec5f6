#include "core/metrics.h"

#include <stdio.h>

#include "core/server.h"
#include "core/audit.h"
#include "core/router.h"
#include "core/session.h"
#include "policy/policy.h"
#include "upstream/stdio.h"
#include "upstream/pool.h"

static const double lat_bounds[12] = {1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000, 1e300};

void tg_metrics_observe_latency(struct tg_metrics *m, double ms)
{
    for (int i = 0; i < 12; i++)
        if (ms <= lat_bounds[i]) {
            m->lat_buckets[i]++;
            break;
        }
    m->lat_count++;
    m->lat_sum += ms / 1000.0;
}

#define C(name, help, val)                                                                                     \
    tg_buf_appendf(out, "# HELP tollgate_" name " " help "\n# TYPE tollgate_" name " counter\ntollgate_" name " %llu\n", \
                   (unsigned long long)(val))
#define G(name, help, val)                                                                                     \
    tg_buf_appendf(out, "# HELP tollgate_" name " " help "\n# TYPE tollgate_" name " gauge\ntollgate_" name " %llu\n", \
                   (unsigned long long)(val))

void tg_metrics_render(struct tg_server *srv, struct tg_buf *out)
{
    const struct tg_metrics *m = &srv->metrics;
    G("connections_open", "Client connections open.", srv->http.nconns);
    C("connections_accepted_total", "Client connections accepted.", m->conns_accepted);
    C("connections_rejected_total", "Connections refused at limits.max_connections or failed to accept (EMFILE).", m->conns_rejected);
    C("tls_handshake_failures_total", "Failed TLS handshakes.", m->tls_handshake_failures);
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
    tg_buf_appends(out, "# HELP tollgate_output_buffered_bytes Bytes queued to clients and not yet written, all "
                        "connections together (bounded by limits.output_total_bytes).\n"
                        "# TYPE tollgate_output_buffered_bytes gauge\n");
    tg_buf_appendf(out, "tollgate_output_buffered_bytes %llu\n", (unsigned long long)m->output_buffered);
    size_t nsse, nws, nall = tg_session_table_count(srv->sessions);
    tg_router_channel_counts(srv, &nsse, &nws);
    tg_buf_appends(out, "# HELP tollgate_sessions_open Live MCP sessions by client transport.\n"
                        "# TYPE tollgate_sessions_open gauge\n");
    tg_buf_appendf(out, "tollgate_sessions_open{transport=\"streamable_http\"} %zu\n",
                   nall >= nsse + nws ? nall - nsse - nws : 0);
    tg_buf_appendf(out, "tollgate_sessions_open{transport=\"sse\"} %zu\n", nsse);
    tg_buf_appendf(out, "tollgate_sessions_open{transport=\"websocket\"} %zu\n", nws);
    C("sessions_created_total", "MCP sessions created.", m->sessions_created);
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
    G("approvals_pending", "Calls parked for a human's approval.", srv->napprovals);
    tg_buf_appends(out, "# HELP tollgate_approvals_total Parked calls by outcome.\n"
                        "# TYPE tollgate_approvals_total counter\n");
    tg_buf_appendf(out, "tollgate_approvals_total{outcome=\"approved\"} %llu\n",
                   (unsigned long long)m->approvals_approved);
    tg_buf_appendf(out, "tollgate_approvals_total{outcome=\"rejected\"} %llu\n",
                   (unsigned long long)m->approvals_rejected);
    tg_buf_appendf(out, "tollgate_approvals_total{outcome=\"expired\"} %llu\n",
                   (unsigned long long)m->approvals_expired);
    C("server_requests_denied_total", "Server-to-client requests refused (deny_server_requests, batches).",
      m->server_requests_denied);
    G("counters_live", "Rate-limit buckets and windows held in memory.", tg_counters_count(srv->counters));
    G("counters_memory_bytes", "Memory of the counter table.", tg_counters_memory(srv->counters));
    C("audit_records_total", "Audit records written.", tg_audit_written(srv->audit));
    C("audit_dropped_total", "Audit records dropped because the disk fell behind.", tg_audit_dropped(srv->audit));
    C("reloads_total", "Successful configuration reloads.", srv->reloads);
    G("upstream_processes", "stdio upstream children alive (warm ones included).", tg_child_live_count());
    C("reload_failures_total", "Reloads refused (the old configuration stayed).", srv->reload_failures);
    C("upstream_calls_total", "HTTP requests sent to upstreams.", m->upstream_calls);
    C("upstream_errors_total", "Upstream requests that failed.", m->upstream_errors);
    C("upstream_timeouts_total", "Upstream requests that timed out.", m->upstream_timeouts);
    C("upstream_queue_timeouts_total", "Calls that waited too long for a pooled connection.",
      m->upstream_queue_timeouts);
    C("upstream_connects_total", "Upstream TCP connections opened.", m->upstream_connects);
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
    tg_buf_appends(out, "# HELP tollgate_upstream_latency_seconds Upstream call latency.\n"
                        "# TYPE tollgate_upstream_latency_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < 12; i++) {
        cum += m->lat_buckets[i];
        if (i == 11)
            tg_buf_appendf(out, "tollgate_upstream_latency_seconds_bucket{le=\"+Inf\"} %llu\n",
                           (unsigned long long)cum);
        else
            tg_buf_appendf(out, "tollgate_upstream_latency_seconds_bucket{le=\"%g\"} %llu\n", lat_bounds[i] / 1000.0,
                           (unsigned long long)cum);
    }
    tg_buf_appendf(out, "tollgate_upstream_latency_seconds_sum %g\ntollgate_upstream_latency_seconds_count %llu\n",
                   m->lat_sum, (unsigned long long)m->lat_count);
}
