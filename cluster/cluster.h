/* One budget for several gateways: the cluster's shared store (core/call/shared.h), which the app
 * installs on the server when the configuration has a `cluster` group. Such a gateway decides
 * tools/call against counters in Redis instead of its own memory, by the
 * plan of policy/counters.h: a first pass runs at once, and only a decision that reaches a counter
 * or a history waits for Redis (one pipelined round trip when every counter fits: the history
 * reads, the counters and the call it records, which is in Redis before the answer). A decision
 * that reaches no counter and records nothing never asks Redis, so a dead Redis does not stop
 * calls that need none.
 *
 * When Redis cannot answer (down, slow past cluster.timeout_ms, busy), the decision fails closed
 * (-32004 with the reason) unless on_unavailable = "local", which decides it on the gateway's own
 * counters instead, logged and counted.
 *
 * It also holds the records of 2025 sessions any member can serve (cluster/sessions.c) and the
 * approvals queue every member sees (cluster/approvals.c).
 *
 * Owner: the app (srv->cluster), made at start from the first configuration. Loop thread only. */
#ifndef TG_CLUSTER_CLUSTER_H
#define TG_CLUSTER_CLUSTER_H

#include <stdint.h>
#include <uv.h>

#include "core/conf/conf.h"

struct tg_buf;
struct tg_cluster;
struct tg_redis;
struct tg_shared;

struct tg_cluster_stats {
    uint64_t decisions_shared;   /* decisions that waited for Redis and got their answer */
    uint64_t decisions_local;    /* decisions that reached no counter (Redis not asked) */
    uint64_t fallback_local;     /* on_unavailable = "local": decided on this gateway's counters */
    uint64_t unavailable;        /* on_unavailable = "deny": refused with -32004 */
    uint64_t rounds;             /* Redis round trips made for decisions */
    uint64_t refunds;            /* reservations given back in Redis */
    uint64_t history_adds;       /* calls added to a history in Redis (ahead of the decision included) */
    uint64_t history_dels;       /* calls added ahead and taken back: the decision did not record them */
    uint64_t values_refused;     /* decisions refused: a counter or history entry in Redis did not parse */
    uint64_t listings_refused;   /* approval listings read from Redis that did not verify */
    uint64_t records_refused;    /* retry records read from Redis that did not verify (ignored) */
    uint64_t decisions_lease;    /* decisions answered from this member's leases (Redis not asked) */
    double lease_taken;          /* tokens taken from Redis into leases */
    double lease_returned;       /* unspent leased tokens given back to Redis */
    uint64_t lease_refills;      /* takes of 0 with extra sent to top up a lease below half */
};

/* From the configuration's cluster group (enabled). local: this member's own store (the server's
 * local one, core/call/shared.h), which it decides on when Redis fails and on_unavailable =
 * "local", gives back local decisions' reservations to, and hands the decisions of approvals
 * parked here to (copied; its ud outlives the cluster): the decisions other members publish for
 * them are listened to from now on. NULL with why on a malformed address. */
struct tg_cluster *tg_cluster_new(uv_loop_t *loop, const struct tg_cluster_conf *cc, const struct tg_shared *local,
                                  char *why, size_t whyn);
/* Waiting decisions end TG_SHARED_UNAVAILABLE ("shutting down") before it returns. */
void tg_cluster_free(struct tg_cluster *cl);
/* The cluster as a shared store (core/call/shared.h): st gets its operations. */
void tg_cluster_store(struct tg_cluster *cl, struct tg_shared *st);
/* A reload's cluster group: what can change without a restart (on_unavailable, lease; every lease
 * is given back). */
void tg_cluster_reconf(struct tg_cluster *cl, const struct tg_cluster_conf *cc);
/* limits.history_calls (at start and at every reload): the history lists in Redis keep this many
 * calls per key, and a decision reads as many (default 64). */
void tg_cluster_history_calls(struct tg_cluster *cl, size_t calls);
int tg_cluster_up(const struct tg_cluster *cl);
const struct tg_cluster_stats *tg_cluster_stats(const struct tg_cluster *cl);
struct tg_redis *tg_cluster_redis(struct tg_cluster *cl);

/* Hear the session ends other members announce (key_prefix "sessions:end"): ended(ud, id) for
 * each (this member's own too). */
void tg_cluster_sessions_watch(struct tg_cluster *cl, void (*ended)(void *ud, const char *id), void *ud);

/* For /metrics. */
void tg_cluster_metrics(const struct tg_cluster *cl, struct tg_buf *out);

#endif
