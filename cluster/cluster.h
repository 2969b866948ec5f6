/* One budget for several gateways: the shared side of decisions (issue 12). A gateway with a
 * `cluster` group decides tools/call against counters in Redis instead of its own memory, by the
 * plan of policy/counters.h: a first pass runs at once, and only a decision that reaches a counter
 * waits for Redis (one pipelined round trip when every counter fits). A decision that reaches no
 * counter never asks Redis, so a dead Redis does not stop calls that need none.
 *
 * When Redis cannot answer (down, slow past cluster.timeout_ms, busy), the decision fails closed
 * (-32004 with the reason) unless on_unavailable = "local", which decides it on the gateway's own
 * counters instead, logged and counted.
 *
 * Owner: the server (srv->cluster), made at start from the first configuration. Loop thread only. */
#ifndef TG_CLUSTER_CLUSTER_H
#define TG_CLUSTER_CLUSTER_H

#include <stdint.h>
#include <uv.h>

#include "core/conf/conf.h"
#include "policy/policy.h"

struct cJSON;
struct tg_buf;
struct tg_cluster;
struct tg_cluster_job;
struct tg_redis;

/* How a decision that waited ended. */
enum tg_cluster_outcome {
    TG_CLUSTER_DECIDED = 0,     /* d is the decision; its reservations are in Redis (d->shared) */
    TG_CLUSTER_FALLBACK = 1,    /* Redis failed; d was decided on the local counters (d->shared 0) */
    TG_CLUSTER_UNAVAILABLE = 2, /* Redis failed and on_unavailable = "deny": why says what failed */
};

/* A waiting decision ended. Never called inside tg_cluster_decide(). */
typedef void (*tg_cluster_decided_cb)(void *ud, enum tg_cluster_outcome o, struct tg_decision *d, const char *why);

struct tg_cluster_stats {
    uint64_t decisions_shared;   /* decisions that waited for Redis and got their answer */
    uint64_t decisions_local;    /* decisions that reached no counter (Redis not asked) */
    uint64_t fallback_local;     /* on_unavailable = "local": decided on this gateway's counters */
    uint64_t unavailable;        /* on_unavailable = "deny": refused with -32004 */
    uint64_t rounds;             /* Redis round trips made for decisions */
    uint64_t refunds;            /* reservations given back in Redis */
};

/* From the configuration's cluster group (enabled). local is the gateway's own store, for the
 * fallback (borrowed; it outlives the cluster). NULL with why on a malformed address. */
struct tg_cluster *tg_cluster_new(uv_loop_t *loop, const struct tg_cluster_conf *cc, struct tg_counters *local,
                                  char *why, size_t whyn);
/* Waiting decisions end TG_CLUSTER_UNAVAILABLE ("shutting down") before it returns. */
void tg_cluster_free(struct tg_cluster *cl);
/* A reload's cluster group: what can change without a restart (on_unavailable, timeout_ms). */
void tg_cluster_reconf(struct tg_cluster *cl, const struct tg_cluster_conf *cc);
int tg_cluster_up(const struct tg_cluster *cl);
const struct tg_cluster_stats *tg_cluster_stats(const struct tg_cluster *cl);
struct tg_redis *tg_cluster_redis(struct tg_cluster *cl);
const struct tg_cluster_conf *tg_cluster_conf(const struct tg_cluster *cl);

/* Decide a tools/call (continuation: a later round of a 2026 call, judged again without
 * reserving). Returns 1 when d is final now (no counter reached: d->shared 0), or 0 when the
 * decision waits for Redis: cb runs later with the outcome, and *job is the handle until then.
 * p, who, tool and args are copied; now_ms is the time every pass decides at. */
int tg_cluster_decide(struct tg_cluster *cl, struct tg_policy *p, const struct tg_caller *who, const char *tool,
                      const struct cJSON *args, int64_t now_ms, int continuation, struct tg_decision *d,
                      tg_cluster_decided_cb cb, void *ud, struct tg_cluster_job **job);
/* Name the ud the callback gets (a caller that makes its own state after deciding). */
void tg_cluster_bind(struct tg_cluster_job *job, void *ud);
/* The caller is gone (the call closed while its decision waited): cb will not run, and whatever
 * the decision takes in Redis is given back when its answer comes. */
void tg_cluster_detach(struct tg_cluster_job *job);
/* Give back a final decision's reservations in Redis (the upstream call failed, approval was
 * refused). Fire and forget: a Redis that does not answer keeps them until they expire, which
 * errs on the side of spending less. */
void tg_cluster_refund(struct tg_cluster *cl, const struct tg_decision *d);

/* The session ends other members announce (cluster/sessions.c): who hears them, and one heard. */
void tg_cluster_set_session_ended(struct tg_cluster *cl, void (*ended)(void *ud, const char *id), void *ud);
void tg_cluster_session_ended(struct tg_cluster *cl, const char *id);

/* For /metrics. */
void tg_cluster_metrics(const struct tg_cluster *cl, struct tg_buf *out);

#endif
