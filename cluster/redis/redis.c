/* The Redis client of a cluster of gateways: see cluster/redis/redis.h for the contract.
 *
 * Shape. One struct tg_redis holds two connections (commands, pub/sub), each a hiredis async
 * context on the loop through hooks of our own (cluster/redis/uvio.c), a prepare handle that
 * writes what the iteration's requests buffered (tg_redis_flush: one write per iteration, each
 * request sent in the iteration that made it, its callback run as its own reply is read; the
 * counter ops of several requests go as one batch script call, cluster/redis/batch.c), and four
 * libuv timers: one per connection
 * (backoff while down, the connect + AUTH + SCRIPT LOAD deadline while connecting), one for the
 * deadlines of all requests (they share timeout_ms, so the oldest is the first list entry and one
 * timer suffices), and "kick", a 0 ms timer that delivers answers that must not be given inside
 * the call that asked (Redis down, EBUSY) and frees contexts that a hiredis callback condemned.
 *
 * Lifetimes. hiredis calls each command's callback exactly once: with the reply, or with NULL
 * when the context goes away. A request may be answered before that (deadline, cancel), so its
 * memory is counted by `outstanding` (commands whose hiredis callback has not run yet) and freed
 * only when it is answered and nothing is outstanding: hiredis never holds a freed pointer.
 * hiredis frees a context itself after a failed connect or a lost connection; we free one
 * (redisAsyncFree) only from our own timer callbacks, never inside a hiredis callback (LAYOUT.md
 * principle 6). The struct tg_redis outlives its contexts and handles: tg_redis_free() answers
 * the waiters, then kick frees the contexts and closes the timers, and the last close frees it.
 *
 * A socket error libuv reports on the poll handle (a refused connect shows as POLLERR) is handed
 * to hiredis as a read or a connect check (uvio.c); the connect deadline (timeout_ms) and the
 * overdue-connection reset cover what is never reported. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "cluster/redis/redis.h"
#include "cluster/redis/internal.h"
#include "cluster/redis/scripts.h"

static void conn_start(struct conn *c);

/* ---- small helpers ------------------------------------------------------------------------ */

char *tg__redis_strdup(const char *s)
{
    char *p = strdup(s ? s : "");
    if (!p)
        abort();
    return p;
}

static uint64_t next_rand(struct tg_redis *r)
{
    r->rng ^= r->rng << 13;
    r->rng ^= r->rng >> 7;
    r->rng ^= r->rng << 17;
    return r->rng;
}

static void on_kick(uv_timer_t *t);
static void on_writer(uv_prepare_t *h);

static void kick(struct tg_redis *r)
{
    if (!uv_is_active((uv_handle_t *)&r->kick) && !uv_is_closing((uv_handle_t *)&r->kick))
        uv_timer_start(&r->kick, on_kick, 0, 0);
}

static void list_push(struct tg_redis_req **head, struct tg_redis_req *q)
{
    /* pending keeps a tail so that it stays in deadline order; late and done order matter less
     * (late: approximately ordered, which the overdue check tolerates). */
    struct tg_redis *r = q->r;
    q->where = head;
    q->next = NULL;
    if (head == &r->pending) {
        q->prev = r->pending_tail;
        if (r->pending_tail)
            r->pending_tail->next = q;
        else
            r->pending = q;
        r->pending_tail = q;
        return;
    }
    q->prev = NULL;
    q->next = *head;
    if (*head)
        (*head)->prev = q;
    *head = q;
}

static void list_remove(struct tg_redis_req *q)
{
    struct tg_redis *r = q->r;
    if (!q->where)
        return;
    if (q->prev)
        q->prev->next = q->next;
    else
        *q->where = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else if (q->where == &r->pending)
        r->pending_tail = q->prev;
    q->prev = q->next = NULL;
    q->where = NULL;
}

static void req_release(struct tg_redis_req *q)
{
    if (!q->answered || q->outstanding > 0 || q->where != NULL)
        return;
    free(q->prefix);
    free(q);
}

void tg__redis_late(struct tg_redis_req *q, int replied)
{
    struct tg_redis *r = q->r;
    if (q->late && replied)
        r->st.late_replies++;
    if (q->outstanding == 0 && q->where == &r->late)
        list_remove(q);
    req_release(q);
}

static void set_state(struct conn *c, enum conn_state s)
{
    c->state = s;
}

static void report(struct tg_redis *r, int up, const char *why)
{
    if (r->closing || r->reported == up)
        return;
    r->reported = up;
    if (r->on_state)
        r->on_state(r->ud, up, why);
}

/* ---- answering requests ------------------------------------------------------------------- */

static void arm_deadline(struct tg_redis *r);

/* Answer q now (we are in a loop callback, or in tg_redis_free for ECLOSED). */
void tg__redis_answer(struct tg_redis_req *q, int status, const struct redisReply *reply)
{
    struct tg_redis *r = q->r;
    if (q->answered)
        return;
    int was_pending = q->where == &r->pending;
    list_remove(q);
    if (was_pending && r->st.pending > 0)
        r->st.pending--;
    q->answered = 1;
    if (status < 0 && -status < 7)
        r->st.errors[-status]++;
    if (status == TG_REDIS_ETIMEDOUT) {
        q->late = 1;
        if (q->outstanding > 0)
            list_push(&r->late, q);
    }
    if (!q->cancelled) {
        q->cancelled = 1;
        if (q->kind == REQ_COMMAND && q->reply_cb)
            q->reply_cb(q->ud, status, status == TG_REDIS_OK ? reply : NULL);
        else if (q->kind == REQ_OPS && q->ops_cb)
            q->ops_cb(q->ud, status);
    }
    q->ops = NULL;
    req_release(q);
}

/* Answer q from kick, later: the request was refused at once (down, busy). */
void tg__redis_answer_later(struct tg_redis_req *q, int status)
{
    q->status = status;
    if (q->where == &q->r->pending && q->r->st.pending > 0)
        q->r->st.pending--;
    list_remove(q);
    list_push(&q->r->done, q);
    kick(q->r);
}

static struct tg_redis_req *req_new(struct tg_redis *r, enum req_kind kind, size_t nslots, size_t extra)
{
    struct tg_redis_req *q = calloc(1, sizeof(*q) + nslots * sizeof(struct slot) + extra);
    if (!q)
        abort();
    q->r = r;
    q->kind = kind;
    q->deadline = uv_now(r->loop) + r->timeout_ms;
    for (size_t i = 0; i < nslots; i++) {
        q->slots[i].q = q;
        q->slots[i].i = i;
    }
    r->st.requests++;
    return q;
}

/* Admit a new request, or queue its refusal. Returns 1 if it may be sent. */
static int admit(struct tg_redis_req *q)
{
    struct tg_redis *r = q->r;
    if (r->closing) {
        tg__redis_answer_later(q, TG_REDIS_ECLOSED);
        return 0;
    }
    if (r->cmd.state != CONN_UP) {
        tg__redis_answer_later(q, TG_REDIS_EDOWN);
        return 0;
    }
    if (r->st.pending >= r->max_pending) {
        tg__redis_answer_later(q, TG_REDIS_EBUSY);
        return 0;
    }
    int first = r->pending == NULL;
    list_push(&r->pending, q);
    r->st.pending++;
    if (first) /* otherwise the timer is armed for an earlier deadline already */
        arm_deadline(r);
    return 1;
}

/* ---- deadlines and the overdue reset ------------------------------------------------------ */

static struct tg_redis_req *oldest_late(struct tg_redis *r)
{
    struct tg_redis_req *o = NULL;
    for (struct tg_redis_req *q = r->late; q; q = q->next)
        if (!o || q->deadline < o->deadline)
            o = q;
    return o;
}

static void on_deadline(uv_timer_t *t);

static void arm_deadline(struct tg_redis *r)
{
    if (r->closing)
        return;
    uint64_t now = uv_now(r->loop), at = UINT64_MAX;
    if (r->pending)
        at = r->pending->deadline;
    struct tg_redis_req *o = oldest_late(r);
    if (o && o->deadline + 4 * r->timeout_ms + 1 < at)
        at = o->deadline + 4 * r->timeout_ms + 1;
    if (at == UINT64_MAX) {
        uv_timer_stop(&r->deadline_timer);
        return;
    }
    uv_timer_start(&r->deadline_timer, on_deadline, at > now ? at - now : 0, 0);
}

/* Drop the command connection from one of our own timer callbacks (never inside hiredis). */
static void conn_reset(struct conn *c, const char *why)
{
    redisAsyncContext *ac = c->ac;
    if (!ac)
        return;
    tg__redis_conn_lost(c, ac, why); /* ac no longer ours: its callbacks below answer and are ignored */
    redisAsyncFree(ac);    /* runs the outstanding callbacks with NULL, now */
}

static void on_deadline(uv_timer_t *t)
{
    struct tg_redis *r = t->data;
    uint64_t now = uv_now(r->loop);
    while (r->pending && r->pending->deadline <= now && !r->closing)
        tg__redis_answer(r->pending, TG_REDIS_ETIMEDOUT, NULL);
    struct tg_redis_req *o = oldest_late(r);
    if (o && now > o->deadline + 4 * r->timeout_ms && r->cmd.ac && !r->closing) {
        char why[96];
        snprintf(why, sizeof(why), "no answer from Redis for %" PRIu64 " ms", now - o->deadline + r->timeout_ms);
        conn_reset(&r->cmd, why);
    }
    arm_deadline(r);
}

/* ---- replies ------------------------------------------------------------------------------ */

static void on_req_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct slot *s = privdata;
    struct tg_redis_req *q = s->q;
    struct tg_redis *r = q->r;
    const redisReply *y = reply;
    q->outstanding--;
    if (q->answered) {
        tg__redis_late(q, y != NULL);
        return;
    }
    if (!y) {
        /* the context is going away (hiredis is freeing it): the connection is lost */
        tg__redis_conn_lost(&r->cmd, ac, ac->errstr[0] ? ac->errstr : "connection closed");
        tg__redis_answer(q, TG_REDIS_EDOWN, NULL);
        return;
    }
    if (q->kind == REQ_COMMAND) {
        tg__redis_answer(q, y->type == REDIS_REPLY_ERROR ? TG_REDIS_EREPLY : TG_REDIS_OK, y);
        return;
    }
    if (y->type == REDIS_REPLY_ERROR && y->len >= 8 && memcmp(y->str, "NOSCRIPT", 8) == 0 && !s->retried && q->ops &&
        ac == r->cmd.ac && r->cmd.state == CONN_UP) {
        /* Redis lost the scripts (restart, SCRIPT FLUSH): load them again and send this op once
         * more behind the loads, on the same connection, so they run first. */
        s->retried = 1;
        tg__redis_reload_scripts(r, ac);
        if (!q->retried) {
            q->retried = 1;
            r->st.round_trips++;
        }
        if (tg__redis_send_op(q, s->i) < 0)
            tg__redis_answer(q, TG_REDIS_EDOWN, NULL);
        return;
    }
    if (y->type == REDIS_REPLY_ERROR) {
        int bad = y->len >= sizeof(TG__REDIS_BADVALUE) - 1 &&
                  memcmp(y->str, TG__REDIS_BADVALUE, sizeof(TG__REDIS_BADVALUE) - 1) == 0;
        tg__redis_answer(q, bad ? TG_REDIS_EVALUE : TG_REDIS_EREPLY, NULL);
        return;
    }
    int perr = q->ops ? tg__redis_op_parse(&q->ops[s->i], y, &q->hist) : 0;
    if (perr < 0) {
        tg__redis_answer(q, perr == -2 ? TG_REDIS_EVALUE : TG_REDIS_EREPLY, NULL);
        return;
    }
    if (++q->nreplied == q->n)
        tg__redis_answer(q, TG_REDIS_OK, NULL);
}

/* Send ops[i] of q as one EVALSHA (hiredis buffers it; the loop writes the batch at once).
 * Returns -1 if the context refuses it (disconnecting), -2 for a history op the request cannot
 * send (no bound, no entry). */
int tg__redis_send_op(struct tg_redis_req *q, size_t i)
{
    struct tg_redis *r = q->r;
    const struct tg_counter_op *op = &q->ops[i];
    struct tg__redis_argv v;
    int adds = op->kind == TG_COP_HIST_ADD || op->kind == TG_COP_HIST_DEL;
    if ((op->kind == TG_COP_HIST_GET || adds) && (q->hist.calls == 0 || (adds && op->entry == NULL)))
        return -2; /* no bound given, or nothing to add: never an empty or unbounded list */
    tg__redis_op_argv(&v, op, q->prefix, r->sha[op->kind], &q->hist);
    if (!r->cmd.ac || redisAsyncCommandArgv(r->cmd.ac, on_req_reply, &q->slots[i], v.argc, v.argv, v.argvlen) != REDIS_OK)
        return -1;
    q->outstanding++;
    r->st.commands++;
    return 0;
}

/* ---- connections -------------------------------------------------------------------------- */

static void on_conn_timer(uv_timer_t *t);

static void start_backoff(struct conn *c)
{
    struct tg_redis *r = c->r;
    if (r->closing)
        return;
    uint64_t d = c->backoff;
    /* jitter: somewhere in [d/2, d], so that gateways restarted together do not reconnect in step */
    uint64_t half = d / 2;
    d = half + (half ? next_rand(r) % (d - half + 1) : 0);
    if (d < 1)
        d = 1;
    c->backoff = c->backoff * 2 > r->backoff_max_ms ? r->backoff_max_ms : c->backoff * 2;
    uv_timer_start(&c->timer, on_conn_timer, d, 0);
}

/* The connection behind ac failed or closed. Idempotent: nothing if ac is no longer ours. Never
 * frees ac (hiredis does, or the caller). */
void tg__redis_conn_lost(struct conn *c, const redisAsyncContext *ac, const char *why)
{
    struct tg_redis *r = c->r;
    if (ac == NULL || ac != c->ac)
        return;
    c->ac = NULL;
    c->reloading = 0;
    set_state(c, CONN_DOWN);
    snprintf(c->why, sizeof(c->why), "%s", why);
    uv_timer_stop(&c->timer);
    start_backoff(c);
    if (!c->is_sub)
        report(r, 0, c->why);
}

/* Give up on ac from inside a hiredis callback: it is freed from kick. */
static void conn_doom(struct conn *c, redisAsyncContext *ac, const char *why)
{
    struct tg_redis *r = c->r;
    tg__redis_conn_lost(c, ac, why);
    if (r->ndoomed < (int)(sizeof(r->doomed) / sizeof(r->doomed[0])))
        r->doomed[r->ndoomed++] = ac;
    kick(r);
}


static void conn_ready(struct conn *c)
{
    struct tg_redis *r = c->r;
    set_state(c, CONN_UP);
    uv_timer_stop(&c->timer);
    c->backoff = r->backoff_ms;
    if (c->is_sub) {
        for (struct sub *s = r->subs; s; s = s->next)
            tg__redis_sub_send(c, "SUBSCRIBE", s->channel);
        return;
    }
    report(r, 1, "connected");
}

static void on_handshake_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct conn *c = privdata;
    struct tg_redis *r = c->r;
    const redisReply *y = reply;
    if (ac != c->ac || c->state != CONN_HANDSHAKE)
        return;
    if (!y)
        return; /* going away: the disconnect callback follows */
    if (y->type == REDIS_REPLY_ERROR) {
        char why[200];
        int auth = r->password[0] && c->handshake_left == (c->is_sub ? 1 : TG__REDIS_NSCRIPTS + 1);
        snprintf(why, sizeof(why), "%s failed: %.*s", auth ? "AUTH" : "SCRIPT LOAD", (int)(y->len > 120 ? 120 : y->len),
                 y->str);
        conn_doom(c, ac, why);
        return;
    }
    if (y->type == REDIS_REPLY_STRING && y->len == 40) {
        /* a SCRIPT LOAD: the replies come in the order of the loads */
        int k = TG__REDIS_NSCRIPTS - (c->handshake_left > TG__REDIS_NSCRIPTS ? TG__REDIS_NSCRIPTS : c->handshake_left);
        memcpy(r->sha[k], y->str, 40);
        r->sha[k][40] = 0;
    }
    if (--c->handshake_left == 0)
        conn_ready(c);
}

static void on_connect(const redisAsyncContext *cac, int status)
{
    struct conn *c = cac->data;
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    if (ac != c->ac)
        return;
    if (status != REDIS_OK) {
        char why[200];
        snprintf(why, sizeof(why), "connect failed: %s", ac->errstr[0] ? ac->errstr : "error");
        tg__redis_conn_lost(c, ac, why); /* hiredis frees ac after this callback */
        return;
    }
    struct tg_redis *r = c->r;
    set_state(c, CONN_HANDSHAKE);
    c->handshake_left = 0;
    if (r->password[0]) {
        redisAsyncCommand(ac, on_handshake_reply, c, "AUTH %s", r->password);
        c->handshake_left++;
    }
    if (!c->is_sub) {
        for (int k = 0; k < TG__REDIS_NSCRIPTS; k++) {
            redisAsyncCommand(ac, on_handshake_reply, c, "SCRIPT LOAD %s", tg__redis_scripts[k]);
            r->st.script_loads++;
            c->handshake_left++;
        }
    }
    if (c->handshake_left == 0)
        conn_ready(c);
}

static void on_disconnect(const redisAsyncContext *cac, int status)
{
    struct conn *c = cac->data;
    struct tg_redis *r = c->r;
    (void)status;
    for (int i = 0; i < r->ndoomed; i++)
        if (r->doomed[i] == cac) {
            r->doomed[i] = r->doomed[--r->ndoomed];
            break;
        }
    tg__redis_conn_lost(c, cac, cac->errstr[0] ? cac->errstr : "connection closed by Redis");
}

static void conn_start(struct conn *c)
{
    struct tg_redis *r = c->r;
    if (r->closing)
        return;
    redisAsyncContext *ac = r->port ? redisAsyncConnect(r->host, r->port) : redisAsyncConnectUnix(r->host);
    if (!ac)
        abort();
    if (r->connects++ > 1) /* two connections are made at start */
        r->st.reconnects++;
    if (ac->err) {
        char why[200];
        snprintf(why, sizeof(why), "connect failed: %s", ac->errstr);
        redisAsyncFree(ac); /* never connected: no callback runs */
        snprintf(c->why, sizeof(c->why), "%s", why);
        start_backoff(c);
        if (!c->is_sub)
            report(r, 0, c->why);
        return;
    }
    ac->data = c;
    if (tg__redis_attach(ac, r->loop, c) != 0) {
        redisAsyncFree(ac);
        start_backoff(c);
        return;
    }
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    c->ac = ac;
    set_state(c, CONN_CONNECTING);
    uv_timer_start(&c->timer, on_conn_timer, r->timeout_ms, 0);
}

static void on_conn_timer(uv_timer_t *t)
{
    struct conn *c = t->data;
    if (c->state == CONN_DOWN) {
        conn_start(c);
        return;
    }
    if (c->state == CONN_CONNECTING || c->state == CONN_HANDSHAKE) {
        char why[96];
        snprintf(why, sizeof(why), "%s did not finish within %" PRIu64 " ms",
                 c->state == CONN_CONNECTING ? "connect" : "AUTH / SCRIPT LOAD", c->r->timeout_ms);
        conn_reset(c, why);
    }
}

/* ---- kick: deferred answers, condemned contexts, the end ---------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
    struct tg_redis *r = h->data;
    if (--r->handles_open > 0)
        return;
    while (r->subs) {
        struct sub *s = r->subs;
        r->subs = s->next;
        free(s->channel);
        free(s);
    }
    tg__redis_batch_dispose(r);
    free(r->host);
    free(r->password);
    free(r);
}

static void on_kick(uv_timer_t *t)
{
    struct tg_redis *r = t->data;
    while (r->done) {
        struct tg_redis_req *q = r->done;
        list_remove(q);
        tg__redis_answer(q, q->status, NULL);
    }
    while (r->ndoomed > 0) {
        redisAsyncContext *ac = r->doomed[--r->ndoomed];
        redisAsyncFree(ac);
    }
    if (!r->closing)
        return;
    /* tg_redis_free ran: every request is answered; free the contexts (their outstanding
     * callbacks run now, with NULL, and release the requests), then close the timers. */
    struct conn *cs[2] = {&r->cmd, &r->sub};
    for (int i = 0; i < 2; i++) {
        redisAsyncContext *ac = cs[i]->ac;
        cs[i]->ac = NULL;
        set_state(cs[i], CONN_DOWN);
        if (ac)
            redisAsyncFree(ac);
    }
    while (r->late) {
        struct tg_redis_req *q = r->late;
        list_remove(q);
        req_release(q);
    }
    uv_handle_t *hs[5] = {(uv_handle_t *)&r->cmd.timer, (uv_handle_t *)&r->sub.timer,
                          (uv_handle_t *)&r->deadline_timer, (uv_handle_t *)&r->kick, (uv_handle_t *)&r->writer};
    for (int i = 0; i < 5; i++) {
        hs[i]->data = r;
        uv_close(hs[i], on_handle_closed);
    }
}

/* ---- the interface ------------------------------------------------------------------------ */

static int parse_address(struct tg_redis *r, const char *a, char *why, size_t whyn)
{
    if (!a || !*a) {
        snprintf(why, whyn, "redis address is empty");
        return -1;
    }
    if (strncmp(a, "unix:", 5) == 0) {
        if (!a[5]) {
            snprintf(why, whyn, "redis address \"%s\": no socket path", a);
            return -1;
        }
        r->host = tg__redis_strdup(a + 5);
        r->port = 0;
        return 0;
    }
    const char *colon = strrchr(a, ':');
    if (!colon || colon == a) {
        snprintf(why, whyn, "redis address \"%s\": expected host:port or unix:/path", a);
        return -1;
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || port < 1 || port > 65535) {
        snprintf(why, whyn, "redis address \"%s\": bad port", a);
        return -1;
    }
    const char *h = a;
    size_t n = (size_t)(colon - a);
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    r->host = strndup(h, n);
    if (!r->host)
        abort();
    r->port = (int)port;
    return 0;
}

struct tg_redis *tg_redis_new(uv_loop_t *loop, const struct tg_redis_opts *o, tg_redis_state_cb on_state, void *ud,
                              char *why, size_t whyn)
{
    struct tg_redis *r = calloc(1, sizeof(*r));
    if (!r)
        abort();
    if (parse_address(r, o->address, why, whyn) < 0) {
        free(r->host);
        free(r);
        return NULL;
    }
    r->loop = loop;
    r->password = tg__redis_strdup(o->password);
    r->timeout_ms = o->timeout_ms ? o->timeout_ms : 1000;
    r->backoff_ms = o->backoff_ms ? o->backoff_ms : 100;
    r->backoff_max_ms = o->backoff_max_ms >= r->backoff_ms ? o->backoff_max_ms : r->backoff_ms;
    r->max_pending = o->max_pending ? o->max_pending : 65536;
    r->on_state = on_state;
    r->ud = ud;
    r->reported = -1;
    r->rng = (uv_hrtime() ^ (uint64_t)(uintptr_t)r) | 1;
    struct conn *cs[2] = {&r->cmd, &r->sub};
    for (int i = 0; i < 2; i++) {
        cs[i]->r = r;
        cs[i]->is_sub = i;
        cs[i]->backoff = r->backoff_ms;
        uv_timer_init(loop, &cs[i]->timer);
        cs[i]->timer.data = cs[i];
        /* the first connect runs from the loop, so that no callback can run inside this call */
        uv_timer_start(&cs[i]->timer, on_conn_timer, 0, 0);
    }
    uv_timer_init(loop, &r->deadline_timer);
    r->deadline_timer.data = r;
    uv_timer_init(loop, &r->kick);
    r->kick.data = r;
    uv_prepare_init(loop, &r->writer);
    r->writer.data = r;
    uv_prepare_start(&r->writer, on_writer);
    uv_unref((uv_handle_t *)&r->writer); /* it keeps no loop running */
    r->handles_open = 5;
    return r;
}

void tg_redis_free(struct tg_redis *r)
{
    if (!r || r->closing)
        return;
    r->closing = 1;
    uv_timer_stop(&r->cmd.timer);
    uv_timer_stop(&r->sub.timer);
    uv_timer_stop(&r->deadline_timer);
    uv_prepare_stop(&r->writer);
    tg__redis_batch_drop(r);
    while (r->pending)
        tg__redis_answer(r->pending, TG_REDIS_ECLOSED, NULL);
    while (r->done) {
        struct tg_redis_req *q = r->done;
        list_remove(q);
        tg__redis_answer(q, TG_REDIS_ECLOSED, NULL);
    }
    uv_timer_stop(&r->kick);
    uv_timer_start(&r->kick, on_kick, 0, 0);
}

int tg_redis_up(const struct tg_redis *r) { return r->cmd.state == CONN_UP && !r->closing; }

void tg_redis_flush(struct tg_redis *r)
{
    tg__redis_batch_flush(r); /* the counter ops queued by this iteration's requests (batch.c) */
    redisAsyncContext *ac = r->cmd.ac;
    if (r->closing || r->cmd.state != CONN_UP || ac == NULL || (ac->c.flags & REDIS_CONNECTED) == 0 ||
        sdslen(ac->c.obuf) == 0)
        return;
    /* redisBufferWrite, not redisAsyncHandleWrite: the latter runs the disconnect path (and its
     * callbacks) on an error; here an error is left for the poll that follows to find. What the
     * socket did not take is written when it is writable (uvio.c polls for it only then). */
    int done = 0;
    if (redisBufferWrite(&ac->c, &done) == REDIS_OK && !done)
        tg__redis_want_write(ac);
    r->st.writes++;
}

static void on_writer(uv_prepare_t *h) { tg_redis_flush(h->data); }

const struct tg_redis_stats *tg_redis_stats(const struct tg_redis *r) { return &r->st; }

struct tg_redis_req *tg_redis_counter_ops(struct tg_redis *r, const char *key_prefix, struct tg_counter_op *ops,
                                          size_t n, const struct tg_redis_hist *hist, tg_redis_ops_cb cb, void *ud)
{
    /* Fire and forget (no cb): the caller may drop ops at once, so the request keeps a copy,
     * which a NOSCRIPT resend needs, and of the entries its history adds point to. */
    size_t nent = 0;
    for (size_t i = 0; !cb && i < n; i++)
        nent += (ops[i].kind == TG_COP_HIST_ADD || ops[i].kind == TG_COP_HIST_DEL) && ops[i].entry != NULL;
    size_t extra = cb ? 0 : n * sizeof(*ops) + nent * sizeof(struct tg_hist_entry);
    struct tg_redis_req *q = req_new(r, REQ_OPS, n, extra);
    q->ops_cb = cb;
    q->ud = ud;
    q->ops = ops;
    if (hist != NULL)
        q->hist = *hist;
    if (!cb) {
        q->ops = (struct tg_counter_op *)(void *)&q->slots[n];
        memcpy(q->ops, ops, n * sizeof(*ops));
        struct tg_hist_entry *e = (struct tg_hist_entry *)(void *)&q->ops[n];
        q->hist.plan = NULL; /* nobody waits for an answer to write */
        for (size_t i = 0; i < n; i++)
            if ((q->ops[i].kind == TG_COP_HIST_ADD || q->ops[i].kind == TG_COP_HIST_DEL) && q->ops[i].entry != NULL) {
                *e = *q->ops[i].entry;
                q->ops[i].entry = e++;
            }
    }
    q->n = n;
    q->prefix = tg__redis_strdup(key_prefix);
    if (!admit(q))
        return q;
    if (n == 0) {
        tg__redis_answer_later(q, TG_REDIS_OK);
        return q;
    }
    r->st.round_trips++;
    for (size_t i = 0; i < n; i++) {
        /* counter ops wait for the flush, which may make one batch call of the iteration's */
        int e = ops[i].kind <= TG_COP_WINDOW_SUB ? tg__redis_batch_queue(q, i) : tg__redis_send_op(q, i);
        if (e < 0) {
            tg__redis_answer_later(q, e == -2 ? TG_REDIS_EREPLY : TG_REDIS_EDOWN);
            break;
        }
    }
    return q;
}

struct tg_redis_req *tg_redis_command(struct tg_redis *r, tg_redis_reply_cb cb, void *ud, int argc,
                                      const char *const *argv, const size_t *argvlen)
{
    struct tg_redis_req *q = req_new(r, REQ_COMMAND, 1, 0);
    q->reply_cb = cb;
    q->ud = ud;
    if (!admit(q))
        return q;
    if (redisAsyncCommandArgv(r->cmd.ac, on_req_reply, &q->slots[0], argc, (const char **)argv, argvlen) != REDIS_OK) {
        tg__redis_answer_later(q, TG_REDIS_EDOWN);
        return q;
    }
    q->outstanding++;
    r->st.commands++;
    r->st.round_trips++;
    return q;
}

void tg_redis_cancel(struct tg_redis_req *q)
{
    if (!q)
        return;
    q->cancelled = 1;
    q->ops = NULL;
}
