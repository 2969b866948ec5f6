/* The token lease of a cluster member (cluster.lease; see cluster/internal.h for the contract and
 * docs/cluster.md "Token leases" for the semantics).
 *
 * Why. With counters in Redis every call waits for its loop iteration's round trip before it is
 * forwarded. A lease lets a member take up to `tokens` more than a call needs from a bucket when
 * Redis has them ("take up to", scripts.c op_take with extra), keep them for at most `ms`, and
 * answer the next decisions that only take from buckets it holds enough of without Redis.
 *
 * Exactness. A token in a lease was taken from Redis and is spent at most once (deducted before
 * the decision is answered) or given back once (at its deadline, at reload, at shutdown); so
 * the members together never forward more than the budget. Per bucket a member holds, or is
 * asking for, at most `tokens`: a call can be refused while others hold up to (members - 1) x
 * tokens, each for at most `ms`.
 *
 * State. One entry per bucket (h1, h2) in a chained hash table, at most `keys` of them: the
 * tokens held, the extra asked for in flight, Redis's level at the last take with a lease, and
 * since when it holds tokens. Entries that hold tokens are also in a list in the order they got
 * them (all deadlines are since + ms, so it is their order too); one timer runs for its head.
 * Owner: the cluster (cl->lease), from tg_cluster_new to tg_cluster_free; the timer's close
 * frees the memory. Loop thread only. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/internal.h"
#include "cluster/redis/redis.h"
#include "core/base/buf.h"

struct lent {
    uint64_t h1, h2;
    double capacity;
    int64_t window_ms;
    double tokens; /* held, unspent */
    double asking; /* extra asked for in takes in flight */
    double level;  /* what Redis answered the bucket holds, at the last take with extra */
    uint64_t since; /* uv_now when tokens went from none to some */
    struct lent *next;  /* chain */
    struct tg_list fifo; /* in lease->held while tokens > 0 */
};

struct tg_lease {
    struct tg_cluster *cl; /* NULL once the cluster went (the timer is closing) */
    uv_timer_t timer;
    double tokens;
    uint64_t ms;
    size_t keys;
    struct lent **tab;
    size_t cap, count;
    struct tg_list held;
};

static size_t slot(const struct tg_lease *l, uint64_t h1) { return (size_t)(h1 ^ (h1 >> 29)) & (l->cap - 1); }

static struct lent *find(const struct tg_lease *l, uint64_t h1, uint64_t h2)
{
    if (l->cap == 0)
        return NULL;
    for (struct lent *e = l->tab[slot(l, h1)]; e != NULL; e = e->next)
        if (e->h1 == h1 && e->h2 == h2)
            return e;
    return NULL;
}

static void grow(struct tg_lease *l)
{
    size_t cap = l->cap ? 2 * l->cap : 64;
    struct lent **tab = tg_xcalloc(cap, sizeof(*tab));
    for (size_t i = 0; i < l->cap; i++)
        for (struct lent *e = l->tab[i], *nx; e != NULL; e = nx) {
            nx = e->next;
            size_t s = (size_t)(e->h1 ^ (e->h1 >> 29)) & (cap - 1);
            e->next = tab[s];
            tab[s] = e;
        }
    free(l->tab);
    l->tab = tab;
    l->cap = cap;
}

/* The entry of (h1, h2), made when there is none and the table has room; NULL when full. */
static struct lent *get(struct tg_lease *l, const struct tg_counter_op *op)
{
    struct lent *e = find(l, op->h1, op->h2);
    if (e != NULL || l->count >= l->keys)
        return e;
    if (l->count >= l->cap / 2)
        grow(l);
    e = tg_xcalloc(1, sizeof(*e));
    e->h1 = op->h1;
    e->h2 = op->h2;
    e->capacity = op->capacity;
    e->window_ms = op->window_ms;
    tg_list_init(&e->fifo);
    size_t s = slot(l, op->h1);
    e->next = l->tab[s];
    l->tab[s] = e;
    l->count++;
    return e;
}

/* An entry that holds nothing and asks for nothing goes. */
static void settle(struct tg_lease *l, struct lent *e)
{
    if (e->tokens > 0)
        return;
    tg_list_unlink(&e->fifo);
    if (e->asking > 0)
        return;
    struct lent **pp = &l->tab[slot(l, e->h1)];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    l->count--;
    free(e);
}

/* The tokens e holds, given back to Redis now (fire and forget: a give that fails loses them,
 * which errs toward fewer calls). */
static void give_back(struct tg_lease *l, struct lent *e)
{
    struct tg_cluster *cl = l->cl;
    if (e->tokens <= 0)
        return;
    struct tg_counter_op g = {.kind = TG_COP_BUCKET_GIVE, .h1 = e->h1, .h2 = e->h2, .capacity = e->capacity,
                              .amount = e->tokens};
    cl->stats.lease_returned += e->tokens;
    e->tokens = 0;
    if (cl->redis != NULL)
        tg_redis_counter_ops(cl->redis, cl->key_prefix, &g, 1, NULL, NULL, NULL);
}

static void on_timer(uv_timer_t *t);

/* The timer, for the deadline of the oldest lease. */
static void arm(struct tg_lease *l)
{
    if (tg_list_empty(&l->held) || l->cl == NULL)
        return;
    struct lent *h = tg_container_of(l->held.next, struct lent, fifo);
    uint64_t now = uv_now(l->timer.loop), due = h->since + l->ms;
    uv_timer_start(&l->timer, on_timer, due > now ? due - now : 0, 0);
}

static void on_timer(uv_timer_t *t)
{
    struct tg_lease *l = t->data;
    uint64_t now = uv_now(t->loop);
    while (!tg_list_empty(&l->held)) {
        struct lent *e = tg_container_of(l->held.next, struct lent, fifo);
        if (e->since + l->ms > now)
            break;
        give_back(l, e);
        settle(l, e);
    }
    arm(l);
}

/* Holds tokens now: into the list, the timer armed when it was the first. */
static void hold(struct tg_lease *l, struct lent *e, double n)
{
    if (n <= 0)
        return;
    if (e->tokens <= 0) {
        e->since = uv_now(l->timer.loop);
        tg_list_unlink(&e->fifo);
        tg_list_insert_tail(&l->held, &e->fifo);
        if (l->held.next == &e->fifo)
            arm(l);
    }
    e->tokens += n;
}

struct tg_lease *tg__lease_new(struct tg_cluster *cl, const struct tg_cluster_conf *cc)
{
    struct tg_lease *l = tg_xcalloc(1, sizeof(*l));
    l->cl = cl;
    tg_list_init(&l->held);
    uv_timer_init(cl->loop, &l->timer);
    uv_unref((uv_handle_t *)&l->timer);
    l->timer.data = l;
    tg__lease_conf(l, cc);
    return l;
}

void tg__lease_give_all(struct tg_lease *l)
{
    while (!tg_list_empty(&l->held)) {
        struct lent *e = tg_container_of(l->held.next, struct lent, fifo);
        give_back(l, e);
        settle(l, e);
    }
    uv_timer_stop(&l->timer);
}

void tg__lease_conf(struct tg_lease *l, const struct tg_cluster_conf *cc)
{
    if (l == NULL) /* the cluster is going */
        return;
    tg__lease_give_all(l);
    l->tokens = cc->lease_tokens > 0 ? cc->lease_tokens : 0;
    l->ms = cc->lease_ms > 0 ? (uint64_t)cc->lease_ms : 1000;
    l->keys = cc->lease_keys > 0 ? (size_t)cc->lease_keys : 16384;
}

static void on_close(uv_handle_t *h) { free(h->data); }

void tg__lease_free(struct tg_lease *l)
{
    if (l == NULL)
        return;
    tg__lease_give_all(l);
    for (size_t i = 0; i < l->cap; i++)
        for (struct lent *e = l->tab[i], *nx; e != NULL; e = nx) {
            nx = e->next;
            free(e);
        }
    free(l->tab);
    l->tab = NULL;
    l->cap = l->count = 0;
    l->cl = NULL; /* refills still in flight end quietly (on_refill) */
    uv_close((uv_handle_t *)&l->timer, on_close);
}

/* A lease topped up ahead of need: a take of 0 with extra, whose answer fills the lease. */
struct refill {
    struct tg_lease *l;
    struct tg_counter_op op;
};

static void on_refill(void *ud, int status)
{
    struct refill *f = ud;
    if (f->l->cl != NULL)
        tg__lease_answered(f->l, &f->op, 1, status == TG_REDIS_OK);
    free(f);
}

/* A lease that fell below half its size while nothing is asked for it asks Redis for the rest
 * now, so that the calls after it do not find it empty and wait for a round trip each. */
static void refill(struct tg_lease *l, struct lent *e, const struct tg_counter_op *like)
{
    struct tg_cluster *cl = l->cl;
    double want = floor(l->tokens - e->tokens - e->asking);
    if (cl->redis == NULL || e->asking > 0 || !(e->tokens < l->tokens / 2) || want < 1)
        return;
    struct refill *f = tg_xcalloc(1, sizeof(*f));
    f->l = l;
    f->op = *like;
    f->op.amount = 0;
    f->op.extra = want;
    f->op.ok = 0;
    e->asking += want;
    cl->stats.lease_refills++;
    tg_redis_counter_ops(cl->redis, cl->key_prefix, &f->op, 1, NULL, on_refill, f);
}

int tg__lease_serve(struct tg_lease *l, struct tg_counter_op *ops, size_t n)
{
    if (l == NULL) /* the cluster is going */
        return 0;
    if (l->tokens <= 0 || n == 0 || l->count == 0)
        return 0;
    /* Every op a take the lease covers, two takes of one bucket counted together. */
    for (size_t i = 0; i < n; i++) {
        const struct tg_counter_op *op = &ops[i];
        if (op->kind != TG_COP_BUCKET_TAKE || !(op->amount >= 0))
            return 0;
        struct lent *e = find(l, op->h1, op->h2);
        if (e == NULL || e->capacity != op->capacity || e->window_ms != op->window_ms)
            return 0;
        double need = 0;
        for (size_t k = 0; k <= i; k++)
            if (ops[k].h1 == op->h1 && ops[k].h2 == op->h2)
                need += ops[k].amount;
        if (!(e->tokens >= need))
            return 0;
    }
    for (size_t i = 0; i < n; i++) {
        struct tg_counter_op *op = &ops[i];
        struct lent *e = find(l, op->h1, op->h2);
        e->tokens -= op->amount;
        if (e->tokens < 1e-9)
            e->tokens = 0; /* no float dust left to give back */
        op->ok = 1;
        op->retry_ms = 0;
        op->value = e->level + e->tokens;
        if (op->value > op->capacity)
            op->value = op->capacity;
        op->taken = op->amount;
    }
    for (size_t i = 0; i < n; i++) {
        struct lent *e = find(l, ops[i].h1, ops[i].h2);
        if (e != NULL)
            refill(l, e, &ops[i]);
    }
    for (size_t i = 0; i < n; i++) {
        struct lent *e = find(l, ops[i].h1, ops[i].h2);
        if (e != NULL)
            settle(l, e);
    }
    return 1;
}

void tg__lease_ask(struct tg_lease *l, struct tg_counter_op *ops, size_t n)
{
    if (l == NULL) /* the cluster is going */
        return;
    for (size_t i = 0; i < n; i++) {
        struct tg_counter_op *op = &ops[i];
        op->extra = 0;
        if (l->tokens <= 0 || op->kind != TG_COP_BUCKET_TAKE || !(op->amount >= 0) ||
            !(op->amount + l->tokens <= op->capacity))
            continue;
        struct lent *e = get(l, op);
        if (e == NULL)
            continue;
        if (e->capacity != op->capacity || e->window_ms != op->window_ms) {
            /* the bucket changed at a reload: what is held goes back under its old size */
            give_back(l, e);
            tg_list_unlink(&e->fifo);
            e->capacity = op->capacity;
            e->window_ms = op->window_ms;
        }
        double want = l->tokens - e->tokens - e->asking;
        if (want >= 1) {
            op->extra = floor(want);
            e->asking += op->extra;
        }
        settle(l, e); /* one made for nothing goes again */
    }
}

void tg__lease_answered(struct tg_lease *l, struct tg_counter_op *ops, size_t n, int ok)
{
    if (l == NULL || l->cl == NULL) /* the cluster is going */
        return;
    for (size_t i = 0; i < n; i++) {
        struct tg_counter_op *op = &ops[i];
        if (op->kind != TG_COP_BUCKET_TAKE || !(op->extra > 0))
            continue;
        struct lent *e = find(l, op->h1, op->h2);
        double got = ok && op->ok ? op->taken - op->amount : 0;
        double asked = op->extra;
        op->extra = 0;
        if (e == NULL) /* cannot be: an entry that asks stays */
            continue;
        e->asking = e->asking > asked ? e->asking - asked : 0;
        if (ok && op->ok)
            e->level = op->value;
        if (got > 0) {
            l->cl->stats.lease_taken += got;
            if (l->tokens > 0 && e->capacity == op->capacity)
                hold(l, e, got);
            else /* turned off (or resized) at a reload meanwhile */
                tg__lease_refund(l, op->h1, op->h2, op->capacity, got);
        }
        settle(l, e);
    }
}

double tg__lease_refund(struct tg_lease *l, uint64_t h1, uint64_t h2, double capacity, double amount)
{
    if (l == NULL)
        return amount;
    struct lent *e = find(l, h1, h2);
    if (e == NULL || l->tokens <= 0 || e->capacity != capacity || !(amount > 0))
        return amount;
    double room = l->tokens - e->tokens;
    double in = amount < room ? amount : room;
    if (!(in > 0))
        return amount;
    hold(l, e, in);
    return amount - in;
}

size_t tg__lease_keys(const struct tg_lease *l) { return l ? l->count : 0; }
