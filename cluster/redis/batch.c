/* The counter ops of a loop iteration, in one script call (see cluster/redis/internal.h).
 *
 * Why. Each decision took one EVALSHA per counter, and for Redis each call is a Lua invocation, a
 * GET and a SET: most of its CPU per decision. The decisions an iteration makes are written in
 * one write anyway (tg_redis_flush), so their counter ops are queued when made and encoded at the
 * flush: one request queued goes as it always went (one EVALSHA per op, send_op); several go as
 * calls of the batch script (scripts.c, batch_lua), at most TG__REDIS_BATCH_REQS requests and
 * TG__REDIS_BATCH_OPS ops each, all in that same write. The script runs the ops in the order they
 * were made with the single scripts' own functions, reading each key once and writing each key it
 * changed once, and answers one reply per op: each request gets what its own EVALSHAs would have
 * answered, one after the other, and goes on as soon as the batch's reply is read.
 *
 * Exactness. Redis ran a connection's commands back to back already; a batch is one of the orders
 * in which they could have run, with nothing of another client between them. What each op answers
 * and what is given back on failure are unchanged, so calls racing on several instances still get
 * exactly the budget between them.
 *
 * Failures are a single op's, for every request of the batch: the connection lost (no reply)
 * EDOWN; an error reply EREPLY (TGBADVALUE: EVALUE); a reply of another shape EREPLY; a reply
 * after the deadline is late (counted per op, as before). NOSCRIPT loads the scripts again and
 * sends the batch once more behind the loads, with the requests still waiting. A key holding
 * poison fails only the requests whose ops reach it.
 *
 * Lifetimes. Each queue or batch entry holds one count of its request's `outstanding`, so a
 * request answered meanwhile (its deadline, a failed history op) is freed only once its last entry
 * is sent and answered, or dropped. A batch (struct batch) is hiredis's privdata until its
 * callback ran, which frees it. */
#include <stdlib.h>
#include <string.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "cluster/redis/internal.h"
#include "cluster/redis/scripts.h"

struct batch {
    struct tg_redis *r;
    int retried; /* sent again after NOSCRIPT */
    size_t n;
    struct tg__redis_bent ent[];
};

static void on_batch_reply(redisAsyncContext *ac, void *reply, void *privdata);

static struct batch *batch_new(struct tg_redis *r, size_t cap)
{
    struct batch *b = calloc(1, sizeof(*b) + cap * sizeof(b->ent[0]));
    if (b == NULL)
        abort();
    b->r = r;
    return b;
}

/* Still to be asked for: not answered, not refused, not cancelled (its ops may be gone). */
static int live(const struct tg_redis_req *q) { return !q->answered && q->ops != NULL && q->where == &q->r->pending; }

/* An entry whose op is not sent: its count goes; a cancelled request that waited only for it
 * ends quietly (its callback will not run). */
static void drop(struct tg__redis_bent *e)
{
    struct tg_redis_req *q = e->q;
    q->outstanding--;
    if (!q->answered && q->ops == NULL && q->where == &q->r->pending)
        tg__redis_answer(q, TG_REDIS_OK, NULL);
    else if (q->answered)
        tg__redis_late(q, 0);
}

int tg__redis_batch_queue(struct tg_redis_req *q, size_t i)
{
    struct tg_redis *r = q->r;
    if (r->nbq == r->capbq) {
        size_t cap = r->capbq ? 2 * r->capbq : 64;
        struct tg__redis_bent *bq = realloc(r->bq, cap * sizeof(*bq));
        if (bq == NULL)
            abort();
        r->bq = bq;
        r->capbq = cap;
    }
    r->bq[r->nbq].q = q;
    r->bq[r->nbq].kind = (unsigned char)tg__redis_batch_kind(&q->ops[i]);
    r->bq[r->nbq++].i = i;
    q->outstanding++;
    return 0;
}

static void grow(struct tg__redis_scratch *s, size_t bytes, size_t args)
{
    if (bytes > s->cap) {
        free(s->buf);
        s->buf = malloc(bytes);
        if (s->buf == NULL)
            abort();
        s->cap = bytes;
    }
    if (args > s->capargv) {
        free(s->argv);
        free(s->argvlen);
        free(s->kh);
        s->argv = malloc(args * sizeof(*s->argv));
        s->argvlen = malloc(args * sizeof(*s->argvlen));
        s->kh = malloc(args * sizeof(*s->kh));
        if (s->argv == NULL || s->argvlen == NULL || s->kh == NULL)
            abort();
        s->capargv = args;
    }
}

static size_t put_uint(char *p, size_t x)
{
    char t[24];
    size_t n = 0, len = 0;
    do {
        t[n++] = (char)('0' + x % 10);
        x /= 10;
    } while (x != 0);
    while (n > 0)
        p[len++] = t[--n];
    return len;
}

/* EVALSHA batch numkeys KEY.. then per op: kind, key index, its arguments (those of its single
 * script, formatted by tg__redis_op_argv). Returns 0 (the batch is hiredis's now) or -1. */
static int send_batch(struct tg_redis *r, redisAsyncContext *ac, struct batch *b)
{
    struct tg__redis_scratch *s = &r->bs;
    struct tg__redis_argv v;
    size_t per_op = sizeof(v.key) + sizeof(v.num) + 48;
    /* argv: 3 + at most n keys (at the front) + up to 8 arguments per op (at the back, moved down
     * once the keys are known) */
    size_t slots = 3 + b->n + 8 * b->n;
    grow(s, b->n * per_op + 32, slots);
    char *p = s->buf;
    size_t nk = 0, na = 0, tail = 3 + b->n;
    for (size_t k = 0; k < b->n; k++) {
        const struct tg_redis_req *q = b->ent[k].q;
        const struct tg_counter_op *op = &q->ops[b->ent[k].i];
        tg__redis_op_argv(&v, op, q->prefix, "", NULL);
        size_t key = 0;
        while (key < nk && !(s->kh[key] == op->h1 && s->argvlen[3 + key] == v.argvlen[3] &&
                             memcmp(s->argv[3 + key], v.argv[3], v.argvlen[3]) == 0))
            key++;
        if (key == nk) {
            memcpy(p, v.argv[3], v.argvlen[3]);
            s->argv[3 + nk] = p;
            s->argvlen[3 + nk] = v.argvlen[3];
            s->kh[nk++] = op->h1;
            p += v.argvlen[3];
        }
        s->argv[tail + na] = p;
        s->argvlen[tail + na++] = put_uint(p, (size_t)tg__redis_batch_kind(op));
        p += s->argvlen[tail + na - 1];
        s->argv[tail + na] = p;
        s->argvlen[tail + na++] = put_uint(p, key + 1);
        p += s->argvlen[tail + na - 1];
        for (int j = 4; j < v.argc; j++) {
            memcpy(p, v.argv[j], v.argvlen[j]);
            s->argv[tail + na] = p;
            s->argvlen[tail + na++] = v.argvlen[j];
            p += v.argvlen[j];
        }
    }
    memmove(s->argv + 3 + nk, s->argv + tail, na * sizeof(*s->argv));
    memmove(s->argvlen + 3 + nk, s->argvlen + tail, na * sizeof(*s->argvlen));
    s->argv[0] = "EVALSHA";
    s->argvlen[0] = 7;
    s->argv[1] = r->sha[TG__REDIS_SCRIPT_BATCH];
    s->argvlen[1] = strlen(r->sha[TG__REDIS_SCRIPT_BATCH]);
    s->argv[2] = p;
    s->argvlen[2] = put_uint(p, nk);
    if (redisAsyncCommandArgv(ac, on_batch_reply, b, (int)(3 + nk + na), s->argv, s->argvlen) != REDIS_OK)
        return -1;
    r->st.commands++;
    return 0;
}

/* A batch hiredis refused (the context is going): its requests fail EDOWN, from kick. */
static void refused(struct batch *b)
{
    for (size_t k = 0; k < b->n; k++) {
        struct tg_redis_req *q = b->ent[k].q;
        if (live(q))
            tg__redis_answer_later(q, TG_REDIS_EDOWN);
        q->outstanding--;
    }
    free(b);
}

void tg__redis_batch_flush(struct tg_redis *r)
{
    size_t n = r->nbq, nreq = 0;
    if (n == 0)
        return;
    r->nbq = 0; /* nothing below queues more: no callback runs here */
    struct tg__redis_bent *bq = r->bq;
    redisAsyncContext *ac = r->cmd.ac;
    int up = !r->closing && r->cmd.state == CONN_UP && ac != NULL;
    for (size_t k = 0; k < n; k++)
        nreq += live(bq[k].q) && (k == 0 || bq[k].q != bq[k - 1].q);
    if (nreq <= 1 || !up) {
        /* one decision (or none): its ops one EVALSHA each, as without batching */
        for (size_t k = 0; k < n; k++) {
            struct tg_redis_req *q = bq[k].q;
            if (live(q) && (!up || tg__redis_send_op(q, bq[k].i) < 0))
                tg__redis_answer_later(q, TG_REDIS_EDOWN);
            drop(&bq[k]);
        }
        return;
    }
    size_t k = 0;
    while (k < n) {
        struct batch *b = batch_new(r, n - k < TG__REDIS_BATCH_OPS ? n - k : TG__REDIS_BATCH_OPS);
        size_t reqs = 0;
        for (; k < n; k++) {
            struct tg_redis_req *q = bq[k].q;
            if (!live(q)) {
                drop(&bq[k]);
                continue;
            }
            int fresh = b->n == 0 || b->ent[b->n - 1].q != q;
            if (b->n == TG__REDIS_BATCH_OPS || (fresh && reqs == TG__REDIS_BATCH_REQS))
                break;
            reqs += fresh;
            b->ent[b->n++] = bq[k]; /* the entry's count goes with it */
        }
        if (b->n == 0)
            free(b);
        else if (send_batch(r, ac, b) < 0)
            refused(b);
    }
}

void tg__redis_batch_drop(struct tg_redis *r)
{
    size_t n = r->nbq;
    r->nbq = 0;
    for (size_t k = 0; k < n; k++)
        r->bq[k].q->outstanding--; /* the caller answers them all now */
}

void tg__redis_batch_dispose(struct tg_redis *r)
{
    free(r->bq);
    free(r->bs.buf);
    free(r->bs.argv);
    free(r->bs.argvlen);
    free(r->bs.kh);
    r->bq = NULL;
    r->bs = (struct tg__redis_scratch){0};
}

static void on_reload_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct conn *c = privdata;
    (void)reply;
    if (ac != c->ac)
        return;
    if (--c->reload_left <= 0)
        c->reloading = 0;
}

void tg__redis_reload_scripts(struct tg_redis *r, redisAsyncContext *ac)
{
    if (r->cmd.reloading)
        return;
    r->cmd.reloading = 1;
    r->cmd.reload_left = TG__REDIS_NSCRIPTS;
    for (int k = 0; k < TG__REDIS_NSCRIPTS; k++) {
        redisAsyncCommand(ac, on_reload_reply, &r->cmd, "SCRIPT LOAD %s", tg__redis_scripts[k]);
        r->st.script_loads++;
        r->st.commands++;
    }
}

/* ---- the reply ------------------------------------------------------------------------------- */

/* Entry e's request fails with status (replied: a reply came, which is late if it was). */
static void entry_fail(struct tg__redis_bent *e, int status, int replied)
{
    struct tg_redis_req *q = e->q;
    q->outstanding--;
    if (q->answered)
        tg__redis_late(q, replied);
    else
        tg__redis_answer(q, status, NULL);
}

/* The elements of an op's reply in the batch's flat array: its single script's (batch_lua). */
static size_t nout(const struct tg__redis_bent *e)
{
    static const unsigned char n[] = {[TG_COP_BUCKET_TAKE] = 3, [TG_COP_BUCKET_GIVE] = 1, [TG_COP_WINDOW_GET] = 2,
                                      [TG_COP_WINDOW_ADD] = 2, [TG_COP_WINDOW_SUB] = 1,
                                      [TG__REDIS_BATCH_TAKE_UPTO] = 4};
    return n[e->kind];
}

/* Entry e's own reply (el: its elements, as a single script's array): as on_req_reply (redis.c)
 * takes a single op's. */
static void entry_reply(struct tg__redis_bent *e, redisReply **el, size_t n)
{
    struct tg_redis_req *q = e->q;
    if (q->answered) {
        entry_fail(e, TG_REDIS_EREPLY, 1);
        return;
    }
    if (el[0]->type == REDIS_REPLY_STRING) {
        int bad = el[0]->len == sizeof(TG__REDIS_BADVALUE) - 1 &&
                  memcmp(el[0]->str, TG__REDIS_BADVALUE, el[0]->len) == 0;
        entry_fail(e, bad ? TG_REDIS_EVALUE : TG_REDIS_EREPLY, 1);
        return;
    }
    redisReply y = {.type = REDIS_REPLY_ARRAY, .elements = n, .element = el};
    int perr = q->ops ? tg__redis_op_parse(&q->ops[e->i], &y, &q->hist) : 0;
    if (perr < 0) {
        entry_fail(e, perr == -2 ? TG_REDIS_EVALUE : TG_REDIS_EREPLY, 1);
        return;
    }
    q->outstanding--;
    if (++q->nreplied == q->n)
        tg__redis_answer(q, TG_REDIS_OK, NULL);
}

static void on_batch_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct batch *b = privdata;
    struct tg_redis *r = b->r;
    const redisReply *y = reply;
    if (y == NULL) {
        /* the context is going away (hiredis is freeing it): the connection is lost */
        tg__redis_conn_lost(&r->cmd, ac, ac->errstr[0] ? ac->errstr : "connection closed");
        for (size_t k = 0; k < b->n; k++)
            entry_fail(&b->ent[k], TG_REDIS_EDOWN, 0);
    } else if (y->type == REDIS_REPLY_ERROR && y->len >= 8 && memcmp(y->str, "NOSCRIPT", 8) == 0 && !b->retried &&
               ac == r->cmd.ac && r->cmd.state == CONN_UP) {
        /* Redis lost the scripts (restart, SCRIPT FLUSH): load them again and send the batch once
         * more behind the loads, with the requests that still wait. */
        tg__redis_reload_scripts(r, ac);
        struct batch *again = batch_new(r, b->n);
        again->retried = 1;
        for (size_t k = 0; k < b->n; k++) {
            struct tg_redis_req *q = b->ent[k].q;
            if (!live(q)) {
                entry_fail(&b->ent[k], TG_REDIS_EREPLY, 1);
                continue;
            }
            if (!q->retried) {
                q->retried = 1;
                r->st.round_trips++;
            }
            again->ent[again->n++] = b->ent[k];
        }
        if (again->n == 0 || send_batch(r, ac, again) < 0) {
            for (size_t k = 0; k < again->n; k++)
                entry_fail(&again->ent[k], TG_REDIS_EDOWN, 0);
            free(again);
        }
    } else if (y->type == REDIS_REPLY_ERROR) {
        int bad = y->len >= sizeof(TG__REDIS_BADVALUE) - 1 &&
                  memcmp(y->str, TG__REDIS_BADVALUE, sizeof(TG__REDIS_BADVALUE) - 1) == 0;
        for (size_t k = 0; k < b->n; k++)
            entry_fail(&b->ent[k], bad ? TG_REDIS_EVALUE : TG_REDIS_EREPLY, 1);
    } else {
        /* the flat array: each op's elements in turn (the entries keep their ops' kinds: a
         * request answered meanwhile no longer has its ops) */
        size_t want = 0;
        for (size_t k = 0; k < b->n; k++)
            want += nout(&b->ent[k]);
        if (y->type != REDIS_REPLY_ARRAY || y->elements != want) {
            for (size_t k = 0; k < b->n; k++)
                entry_fail(&b->ent[k], TG_REDIS_EREPLY, 1);
        } else {
            size_t at = 0;
            for (size_t k = 0; k < b->n; k++) {
                size_t m = nout(&b->ent[k]);
                entry_reply(&b->ent[k], y->element + at, m);
                at += m;
            }
        }
    }
    free(b);
}
