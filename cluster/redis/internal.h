/* Internals of the Redis client shared by cluster/redis/redis.c (connections, requests) and
 * cluster/redis/sub.c (pub/sub). Not for other modules: they use cluster/redis/redis.h. */
#ifndef TG_CLUSTER_REDIS_INT_H
#define TG_CLUSTER_REDIS_INT_H

#include <hiredis/async.h>

#include "cluster/redis/redis.h"
#include "cluster/redis/scripts.h"

/* A connection's state; every transition goes through set_state(). */
enum conn_state {
    CONN_DOWN = 0,   /* no context; the timer is the backoff (or nothing when closing) */
    CONN_CONNECTING, /* context made, connect callback awaited; the timer is the deadline */
    CONN_HANDSHAKE,  /* connected, AUTH / SCRIPT LOAD sent; the timer is the deadline */
    CONN_UP,         /* ready: commands (or subscriptions) are sent */
};

struct conn {
    struct tg_redis *r;
    int is_sub;
    enum conn_state state;
    redisAsyncContext *ac; /* NULL when down; the context we speak through */
    uv_timer_t timer;
    uint64_t backoff;      /* next delay */
    int handshake_left;    /* replies still awaited before UP */
    int reloading;         /* SCRIPT LOAD sent after a NOSCRIPT, not all answered yet */
    int reload_left;
    char why[160];         /* the last failure, for on_state */
};

/* One command of a request, as hiredis's privdata: hiredis holds a pointer to it until the
 * command's callback ran. Lives inside its request. */
struct slot {
    struct tg_redis_req *q;
    size_t i;     /* the op it is for */
    int retried;  /* NOSCRIPT seen and resent once */
};

enum req_kind { REQ_COMMAND, REQ_OPS };

/* A request. Owner: the client (r->pending, r->late or r->done list, or none while only hiredis
 * holds it); freed by req_release() once answered and no command is outstanding. */
struct tg_redis_req {
    struct tg_redis *r;
    struct tg_redis_req *prev, *next; /* in the list `where` says */
    struct tg_redis_req **where;      /* &r->pending, &r->late, &r->done or NULL */
    enum req_kind kind;
    int answered;    /* the callback ran or will not run (cancelled, answered) */
    int cancelled;
    int late;        /* answered ETIMEDOUT: replies after this are late */
    int retried;     /* a NOSCRIPT resend was made (one more round trip) */
    int status;      /* for the done list: what to answer */
    uint64_t deadline;
    unsigned outstanding;
    tg_redis_reply_cb reply_cb;
    tg_redis_ops_cb ops_cb;
    void *ud;
    struct tg_counter_op *ops; /* REQ_OPS: the caller's, NULL once answered or cancelled */
    size_t n, nreplied;
    char *prefix;
    struct tg_redis_hist hist; /* REQ_OPS: for history ops (plan NULL when none given) */
    struct slot slots[];       /* n of them (1 for a command) */
};

/* A counter op queued for the flush (cluster/redis/batch.c): ops[i] of q. Each holds one count of
 * q->outstanding, so q lives until the entry is sent and answered, or dropped. */
struct tg__redis_bent {
    struct tg_redis_req *q;
    size_t i;
    unsigned char kind; /* ops[i].kind: q->ops goes once q is answered */
};

/* What the batch encoder reuses from flush to flush (batch.c). */
struct tg__redis_scratch {
    char *buf;
    size_t cap;
    const char **argv;
    size_t *argvlen;
    uint64_t *kh; /* the h1 of each distinct key of the batch being encoded */
    size_t capargv;
};

struct sub {
    struct sub *next;
    char *channel;
    tg_redis_message_cb cb;
    void *ud;
};

struct tg_redis {
    uv_loop_t *loop;
    char *host;   /* or the socket path when unix */
    int port;     /* 0: unix socket */
    char *password;
    uint64_t timeout_ms, backoff_ms, backoff_max_ms;
    size_t max_pending;
    tg_redis_state_cb on_state;
    void *ud;
    struct conn cmd, sub;
    uv_timer_t deadline_timer, kick;
    uv_prepare_t writer; /* tg_redis_flush before each poll */
    struct tg_redis_req *pending, *pending_tail; /* sent, waiting, in deadline order */
    struct tg_redis_req *late;                   /* answered ETIMEDOUT, replies outstanding */
    struct tg_redis_req *done;                   /* to answer from kick */
    redisAsyncContext *doomed[4];                /* to free from kick */
    int ndoomed;
    struct sub *subs;
    struct tg__redis_bent *bq; /* counter ops of this iteration's requests, in the order made */
    size_t nbq, capbq;
    struct tg__redis_scratch bs;
    char sha[TG__REDIS_NSCRIPTS][41];
    int reported;        /* -1 nothing yet, else the last up reported */
    int connects;        /* contexts made, for stats.reconnects */
    int closing;
    int handles_open;
    uint64_t rng;
    struct tg_redis_stats st;
};

/* Put a connection's context on the loop (cluster/redis/uvio.c): 0, or -1 (the caller frees ac). */
int tg__redis_attach(redisAsyncContext *ac, uv_loop_t *loop, struct conn *c);
/* What the command connection's socket did not take is written once it is writable. */
void tg__redis_want_write(redisAsyncContext *ac);
/* Send verb (SUBSCRIBE, UNSUBSCRIBE) for channel on the pub/sub connection (which is up). */
void tg__redis_sub_send(struct conn *c, const char *verb, const char *channel);
char *tg__redis_strdup(const char *s);

/* redis.c, for batch.c. Answer q now (from a loop callback), or from kick (a refusal). */
void tg__redis_answer(struct tg_redis_req *q, int status, const struct redisReply *reply);
void tg__redis_answer_later(struct tg_redis_req *q, int status);
/* A reply (replied 1) or a going-away (0) for a request already answered: counted if it is late,
 * and the request freed once nothing is outstanding. The caller decremented outstanding. */
void tg__redis_late(struct tg_redis_req *q, int replied);
/* ops[i] of q as its own EVALSHA: 0, -1 (the context refuses it), -2 (a history op it cannot send). */
int tg__redis_send_op(struct tg_redis_req *q, size_t i);
/* The connection behind ac failed (nothing if ac is no longer c's). */
void tg__redis_conn_lost(struct conn *c, const redisAsyncContext *ac, const char *why);

/* batch.c. Queue ops[i] (a counter op) of q, admitted, for the flush: 0. */
int tg__redis_batch_queue(struct tg_redis_req *q, size_t i);
/* Turn the queue into commands on the command connection (tg_redis_flush, before it writes):
 * one request queued: its ops one EVALSHA each (send_op); more: batch script calls of at most
 * TG__REDIS_BATCH_REQS requests and TG__REDIS_BATCH_OPS ops each. Down: each request queued is
 * answered EDOWN from kick. No callback runs inside. */
void tg__redis_batch_flush(struct tg_redis *r);
/* tg_redis_free: the queue is forgotten (its requests are answered ECLOSED by the caller). */
void tg__redis_batch_drop(struct tg_redis *r);
/* The last handle closed: the queue's and encoder's memory. */
void tg__redis_batch_dispose(struct tg_redis *r);
/* After NOSCRIPT on ac: SCRIPT LOAD of every script, once while a reload is under way. */
void tg__redis_reload_scripts(struct tg_redis *r, redisAsyncContext *ac);
#define TG__REDIS_BATCH_REQS 64
#define TG__REDIS_BATCH_OPS 256

#endif
