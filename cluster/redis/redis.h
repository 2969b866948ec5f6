/* The Redis client of a cluster of gateways (issue 12): one connection for commands and one
 * for pub/sub, over hiredis's async API on the server's libuv loop, so the loop never blocks.
 *
 * Every request has a deadline (timeout_ms from when it was made). Its callback runs exactly
 * once, from the loop and never inside the tg_redis_* call that made it: with the answer, or
 * with an error status when Redis is not connected, did not answer in time, or answered
 * something unexpected. A request whose deadline passed is answered TG_REDIS_ETIMEDOUT at once;
 * its reply, if it comes later, is read and dropped. Requests in flight are bounded
 * (max_pending): beyond that a request fails TG_REDIS_EBUSY, so a stalled Redis cannot make the
 * gateway hold unbounded memory.
 *
 * The connection is made at tg_redis_new() and made again after any failure, with backoff
 * (backoff_ms doubling up to backoff_max_ms, with jitter). After each connect: AUTH (when a
 * password is set), SCRIPT LOAD of the counter scripts, then "up". A reply NOSCRIPT (Redis
 * restarted, SCRIPT FLUSH) loads the scripts again and retries that request once, within its
 * deadline. A connection whose oldest request is overdue by more than 4 x timeout_ms is closed
 * and made again (a Redis that stopped answering on a live socket, SIGSTOP).
 *
 * Owner: the server (srv->cluster). Not thread-safe: the loop's thread only. */
#ifndef TG_CLUSTER_REDIS_H
#define TG_CLUSTER_REDIS_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "policy/counters.h"

struct redisReply;
struct tg_redis;
struct tg_redis_req;

enum {
    TG_REDIS_OK = 0,
    TG_REDIS_EDOWN = -1,     /* not connected (connecting, backing off, closed) */
    TG_REDIS_ETIMEDOUT = -2, /* no answer within timeout_ms */
    TG_REDIS_EREPLY = -3,    /* an error reply, or a reply of an unexpected shape */
    TG_REDIS_EBUSY = -4,     /* max_pending requests already in flight */
    TG_REDIS_ECLOSED = -5,   /* tg_redis_free() ran while the request waited */
    TG_REDIS_EVALUE = -6,    /* a counter value (a stored key or a script's answer) is not a finite
                              * decimal number, or a history entry not one: the data is poisoned,
                              * not the service down */
};

struct tg_redis_opts {
    const char *address;     /* "host:port" or "unix:/path/to/socket" */
    const char *password;    /* NULL or "": no AUTH */
    uint64_t timeout_ms;     /* deadline of each request, and of connect + AUTH + SCRIPT LOAD */
    uint64_t backoff_ms;     /* first reconnect delay */
    uint64_t backoff_max_ms; /* longest reconnect delay */
    size_t max_pending;      /* requests in flight at most (0: 65536) */
};

/* Counted for /metrics (the server prints them). */
struct tg_redis_stats {
    uint64_t requests;       /* tg_redis_* requests made */
    uint64_t commands;       /* commands written to Redis (a single op is one; the counter ops of
                              * several requests of one iteration are one batch call) */
    uint64_t round_trips;    /* writes of one or more commands that waited for replies */
    uint64_t writes;         /* writes to the command connection (at most one per loop iteration
                              * once it is up, whatever the number of requests) */
    uint64_t errors[7];      /* requests answered with -status (index 1..6) */
    uint64_t reconnects;     /* connections made after the first */
    uint64_t script_loads;   /* SCRIPT LOADs (at connect and after NOSCRIPT) */
    uint64_t pending;        /* requests in flight now */
    uint64_t late_replies;   /* replies that came after their request's deadline */
};

/* up: 1 connected and ready, 0 lost (why says what happened, for the log). Never called inside a
 * tg_redis_* call. */
typedef void (*tg_redis_state_cb)(void *ud, int up, const char *why);
/* status TG_REDIS_OK with the reply (borrowed for the call: hiredis frees it after), or an error
 * status with reply NULL. */
typedef void (*tg_redis_reply_cb)(void *ud, int status, const struct redisReply *reply);
/* Counter batch done: status TG_REDIS_OK when every op has its result (ops[i].ok/value/retry_ms
 * filled), or an error status (the results are not to be used; some ops may have run). */
typedef void (*tg_redis_ops_cb)(void *ud, int status);
/* A message on a subscribed channel (borrowed for the call). */
typedef void (*tg_redis_message_cb)(void *ud, const char *channel, const char *p, size_t n);

/* Starts connecting at once. Returns NULL (with why filled) only for a malformed address. */
struct tg_redis *tg_redis_new(uv_loop_t *loop, const struct tg_redis_opts *o, tg_redis_state_cb on_state, void *ud,
                              char *why, size_t whyn);
/* Closes both connections. Every request still waiting is answered TG_REDIS_ECLOSED first (from
 * inside this call: the one exception to the rule above, as the owner is going away; callers
 * must not free their own state in that callback's path before tg_redis_free returns). The
 * memory goes once hiredis and libuv have let go of it (the loop must run on until then). */
void tg_redis_free(struct tg_redis *r);
int tg_redis_up(const struct tg_redis *r);
/* Write what the requests of this loop iteration queued, in one write. The client runs it itself
 * from a prepare handle (just before the loop polls); the server calls it too, after its I/O
 * callbacks and before it writes to clients, so that Redis starts on the iteration's decisions
 * first. Requests are never written one by one when they are made. Replies never run inside it
 * (a failed write is noticed by the next poll). */
void tg_redis_flush(struct tg_redis *r);
const struct tg_redis_stats *tg_redis_stats(const struct tg_redis *r);

/* What a batch needs for history operations (TG_COP_HIST_GET, TG_COP_HIST_ADD). */
struct tg_redis_hist {
    struct tg_counter_plan *plan; /* a HIST_GET's answer: its entries are made here
                                   * (tg_plan_hist_alloc) and its view points into them, so they
                                   * live until the plan is disposed; NULL: a HIST_GET fails */
    size_t calls;                 /* limits.history_calls: what an add trims a list to, and
                                   * how many of the newest a get reads */
    uint8_t key[16];              /* entries are signed with it (derived from the cluster's
                                   * secret): one that does not verify fails TG_REDIS_EVALUE */
};

/* Run n counter operations in order, pipelined in one write, each one EVALSHA of its script (one
 * script per kind of operation; the counter operations of several requests made in one loop
 * iteration go together as one call of the batch script, cluster/redis/batch.c, which answers each
 * exactly as its own script would; with the arithmetic of policy/counters.c reproduced exactly: a
 * take/give/get/add/sub on Redis gives bit for bit what tg_counter_op_apply() gives on the local
 * store). Keys: key_prefix "c:" then h1 and h2 as 32 lowercase hex digits; each key expires
 * when it holds no more information (a full bucket, a past window). History operations go in the
 * same write (the same round trip): key_prefix "h:" and the same hex, a list of entries that
 * answers what the local store's ring answers after the same adds (cluster/redis/history.c has
 * the form, each entry signed under hist->key); hist may be NULL for a batch without them (such an op then fails TG_REDIS_EREPLY).
 * An entry in Redis that is not exactly an entry fails the batch TG_REDIS_EVALUE. ops (and a
 * HIST_ADD's entry) must stay valid until cb runs or the request is cancelled. cb may be NULL
 * (fire and forget: refunds, history adds): the request then keeps a copy of ops and entries. */
struct tg_redis_req *tg_redis_counter_ops(struct tg_redis *r, const char *key_prefix, struct tg_counter_op *ops,
                                          size_t n, const struct tg_redis_hist *hist, tg_redis_ops_cb cb, void *ud);

/* Any command (argv with lengths, binary-safe). cb may be NULL. */
struct tg_redis_req *tg_redis_command(struct tg_redis *r, tg_redis_reply_cb cb, void *ud, int argc,
                                      const char *const *argv, const size_t *argvlen);

/* The caller no longer wants the answer: cb will not run. The request itself still completes
 * in Redis if it was sent. NULL is ignored. A request is not to be cancelled after its cb ran. */
void tg_redis_cancel(struct tg_redis_req *q);

/* Subscribe (on the pub/sub connection) to channel; on_message runs for each message, and the
 * subscription is made again after every reconnect. One callback per channel; subscribing a
 * channel again replaces it. */
void tg_redis_subscribe(struct tg_redis *r, const char *channel, tg_redis_message_cb on_message, void *ud);
void tg_redis_unsubscribe(struct tg_redis *r, const char *channel);

#endif
