/* Counters and gauges of the process, shown in Prometheus text format by core/app/admin.c.
 * Owner: the server (srv->metrics), for the life of the process. */
#ifndef TG_METRICS_H
#define TG_METRICS_H

#include <stdint.h>

#include "core/base/buf.h"
#include "core/base/label_counts.h"

/* Value type, embedded in struct tg_server (srv->metrics); connections and upstreams point
 * at it. */
struct tg_metrics {
    uint64_t conns_accepted, conns_rejected, conns_open, tls_handshake_failures;
    uint64_t tls_handshakes_put_off; /* waited for a later loop iteration (limits.tls_handshake_slice_ms) */
    uint64_t tls_trimmed_bytes;      /* record buffer pages of idle TLS connections given back (tg_tls_trim) */
    uint64_t http_requests, http_status[6]; /* by class 1xx..5xx */
    uint64_t limit_header_bytes, limit_body_bytes, limit_json, limit_inflight, limit_sessions, limit_output;
    uint64_t limit_children; /* stdio children refused at upstreams[].max_children */
    uint64_t output_buffered; /* gauge: bytes queued to clients, all connections together */
    uint64_t sessions_open, sessions_created, sessions_expired;
    uint64_t sessions_adopted; /* 2025 sessions another member of the cluster made, served here */
    uint64_t rpc_requests, rpc_notifications, rpc_responses, rpc_refused_nonstandard;
    uint64_t upstream_calls, upstream_errors, upstream_timeouts, upstream_connects, upstream_queue_timeouts;
    uint64_t upstream_pipelined, upstream_writes; /* calls written behind another on its connection; writes of requests */
    uint64_t upstream_backoff_refusals; /* requests refused at once while an upstream is backing off */
    uint64_t sse_events_relayed;
    /* The loop's iterations: busy time (not waiting in poll) each, its longest and those of 100 ms
     * or more (a stall every client feels). */
    uint64_t loop_busy_max_ns, loop_stalls, loop_iterations;
    uint64_t decisions[5]; /* allow deny limited approve(parked) refused-by-protocol */
    uint64_t approvals_approved, approvals_rejected, approvals_expired;
    uint64_t approvals_refused[5]; /* calls refused instead of parked or run (TG_APPROVAL_REFUSED_*) */
    uint64_t webhook[4];           /* approval webhook events by outcome (TG_WEBHOOK_*) */
    uint64_t server_requests_denied, refunds;
    uint64_t dpop_refused; /* 401s for DPoP: a bound token without a valid proof, DPoP where it is off */
    uint64_t roots_answered; /* roots/list answered with pinned roots (upstreams[].roots, grants[].roots) */
    /* Calls a brake stopped, by (upstream, tool); refusals a history condition decided, by
     * (upstream, rule). Made on first use, freed with the server (tg_label_counts_free). */
    struct tg_label_counts *brakes, *history_refusals;
    /* upstream latency histogram (ms buckets) */
    uint64_t lat_buckets[12];
    uint64_t lat_count;
    double lat_sum;
};

/* Why an approval was refused (approvals_refused[]): the queue held approvals_max calls, held
 * approvals_bytes, the grant held approvals_per_grant; a batch cannot wait; the configuration in
 * force no longer allowed it when it was approved. */
enum {
    TG_APPROVAL_REFUSED_FULL = 0,
    TG_APPROVAL_REFUSED_BYTES,
    TG_APPROVAL_REFUSED_GRANT,
    TG_APPROVAL_REFUSED_BATCH,
    TG_APPROVAL_REFUSED_STALE,
};
/* What became of an approval webhook event (webhook[]): delivered (2xx), tried again after a
 * failure, given up after its last attempt, dropped from a full queue. */
enum { TG_WEBHOOK_SENT = 0, TG_WEBHOOK_RETRIED, TG_WEBHOOK_FAILED, TG_WEBHOOK_DROPPED };

/* Upper bounds (ms) of the latency histogram buckets. */
extern const double tg_metrics_lat_bounds[12];
void tg_metrics_observe_latency(struct tg_metrics *m, double ms);

#endif
