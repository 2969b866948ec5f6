/* The cluster's files (cluster.c: decisions and the store's table; sessions.c: 2025 session
 * records; approvals.c: the approvals mirror) share the cluster's state through this header. The
 * rest of the gateway sees cluster/cluster.h, and below the app only the shared store
 * (core/call/shared.h). Loop thread only. */
#ifndef TG_CLUSTER_INTERNAL_H
#define TG_CLUSTER_INTERNAL_H

#include <stdint.h>
#include <uv.h>

#include "cluster/cluster.h"
#include "core/base/buf.h"
#include "core/call/shared.h"
#include "core/conf/conf.h"

struct tg_call;
struct tg_redis;
struct tg_session;
struct tg_upstream_conf;

struct tg_cluster {
    uv_loop_t *loop;
    struct tg_redis *redis;
    struct tg_shared local;      /* this member's own store: fallback decisions, refunds of
                                  * local decisions, the approvals parked here */
    char *key_prefix;
    char *instance;
    enum tg_cluster_unavailable on_unavailable;
    struct tg_cluster_conf conf; /* the first conf's values; strings are the copies above */
    struct tg_list jobs;         /* decisions waiting for Redis */
    struct tg_cluster_stats stats;
    uint64_t listing_warned_ms; /* wall clock of the last warning about a listing that did not verify */
    uint64_t record_warned_ms;  /* the same for retry records (records.c) */
    uint64_t value_warned_ms;   /* the same for counters and history entries that do not parse */
    size_t hist_calls;          /* limits.history_calls: what the history lists in Redis keep */
    uint8_t hist_key[16];       /* signs history entries (from the secret, its own label) */
    int up;
    struct tg_lease *lease;     /* cluster.lease (lease.c); always made, off with tokens 0 */
    /* Who hears the session ends members announce (cluster/sessions.c subscribes). */
    void (*session_ended)(void *ud, const char *id);
    void *session_ended_ud;
};

/* The token lease (lease.c): tokens a member took from Redis ahead, per bucket, spent without
 * asking Redis, given back after cluster.lease.ms, at reload and at shutdown. */
struct tg_lease;
struct tg_counter_op;
struct tg_lease *tg__lease_new(struct tg_cluster *cl, const struct tg_cluster_conf *cc);
/* Every lease given back (Redis), then the memory goes once the timer is closed. */
void tg__lease_free(struct tg_lease *l);
/* A reload's values: every lease given back first. */
void tg__lease_conf(struct tg_lease *l, const struct tg_cluster_conf *cc);
void tg__lease_give_all(struct tg_lease *l);
/* A decision's first round ops[0, n): when every op is a bucket take the leases cover (each
 * bucket's amounts summed), the amounts are spent from them and each op answered (ok, level: Redis's
 * level at the last lease take plus what the lease still holds); 1. Else nothing changes; 0. */
int tg__lease_serve(struct tg_lease *l, struct tg_counter_op *ops, size_t n);
/* Before ops go to Redis: each bucket take asks for extra (op->extra) up to what the lease may
 * hold; tg__lease_answered must follow, with ok 1 when the ops have their results. */
void tg__lease_ask(struct tg_lease *l, struct tg_counter_op *ops, size_t n);
void tg__lease_answered(struct tg_lease *l, struct tg_counter_op *ops, size_t n, int ok);
/* A refund of amount to the bucket: what the lease takes in (up to its size); returns the rest,
 * for Redis. */
double tg__lease_refund(struct tg_lease *l, uint64_t h1, uint64_t h2, double capacity, double amount);
size_t tg__lease_keys(const struct tg_lease *l);

/* 2025 sessions on any member (sessions.c): a session's record (grant, upstream, upstream
 * session id, negotiated version) lives in Redis under key_prefix "s:" ID, so that a POST naming
 * it can be served by a member that did not make it. Its id is sealed (core/call/session.h), so
 * a forged one is refused without asking Redis. Streams (GET, legacy SSE, WebSocket) stay with
 * the member that holds their connection; sessions whose upstream lives inside one gateway
 * (stdio children, legacy SSE streams) are not shared at all. The store's session operations. */
void tg__cluster_session_share(void *cl, struct tg_session *s, const struct tg_upstream_conf *uc);
void tg__cluster_session_used(void *cl, struct tg_session *s, uint64_t now_ms);
void tg__cluster_session_forget(void *cl, const char *id);
void tg__cluster_session_fetch(void *cl, const char *id, tg_shared_session_cb cb, void *cb_ud);

/* The approvals mirror (approvals.c): the store's approval operations, and the channel on which
 * other members' decisions for calls parked here arrive. */
void tg__cluster_approval_park(void *cl, struct tg_call *k);
void tg__cluster_approval_gone(void *cl, struct tg_call *k);
void tg__cluster_approvals_list(void *cl, tg_approval_list_cb done, void *cb_ud);
void tg__cluster_approval_decide(void *cl, struct tg_slice id, int approve, const char *digest, const char *by,
                                 const char *reason, tg_approval_decide_cb done, void *cb_ud);
void tg__cluster_approvals_start(struct tg_cluster *cl);

/* Retry records every member finds (records.c): the store's record operations. */
struct tg_record_wait *tg__cluster_record_find(void *cl, const struct tg_approval_record *mine, tg_record_cb cb,
                                               void *cb_ud);
void tg__cluster_record_detach(void *cl, struct tg_record_wait *w);
void tg__cluster_record_put(void *cl, const struct tg_approval_record *rec);
void tg__cluster_record_drop(void *cl, const uint8_t key[32], const char *id);
void tg__cluster_record_settled(void *cl, const uint8_t key[32], const char *id, int give_back);
/* A record's value in Redis: STATE ID MAC "." JSON, signed under secret (records.c says how). */
void tg__cluster_record_encode(const uint8_t secret[32], const struct tg_approval_record *r, const char *instance,
                               struct tg_buf *out);
/* The value v (n bytes) stored for key, verified: its JSON (the caller deletes it; r's strings
 * point into it) with r filled and *taken 1 for a record taken by a call running now; NULL when
 * it does not verify (not a member's, changed since, another key's, or its STATE or ID not the
 * signed ones). Its expiry is the caller's to check. */
struct cJSON *tg__cluster_record_open(const uint8_t secret[32], const uint8_t key[32], const char *v, size_t n,
                                      struct tg_approval_record *r, int *taken);

#endif
