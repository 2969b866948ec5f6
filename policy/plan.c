/* The plan: a counter store that records what a decision asks, so that the decision can run
 * against a store that answers later (policy/counters.h has the protocol). Pure: no I/O. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "policy/counters.h"

static struct tg_counter_plan *plan_of(struct tg_counters *c) { return (struct tg_counter_plan *)c; }

static struct tg_counter_op *push(struct tg_counter_op **v, size_t *n, size_t *cap)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 8;
        *v = tg_xrealloc(*v, *cap * sizeof(**v));
    }
    struct tg_counter_op *op = &(*v)[(*n)++];
    memset(op, 0, sizeof(*op));
    return op;
}

static int same_op(const struct tg_counter_op *a, const struct tg_counter_op *b)
{
    if (a->kind != b->kind || a->h1 != b->h1 || a->h2 != b->h2 || a->amount != b->amount)
        return 0;
    if (a->kind == TG_COP_HIST_GET)
        return 1;
    if (a->kind == TG_COP_BUCKET_TAKE)
        return a->now_ms == b->now_ms && a->capacity == b->capacity && a->window_ms == b->window_ms;
    return a->window_start == b->window_start && a->limit == b->limit && a->limit_op == b->limit_op;
}

/* What a taken operation that no pass consumes any more gives back. */
static void give_back(struct tg_counter_plan *p, const struct tg_counter_op *op)
{
    if (!op->ok || (op->kind != TG_COP_BUCKET_TAKE && op->kind != TG_COP_WINDOW_ADD))
        return;
    /* Kept effects sit before this pass's own: move the pass's effects up by one. */
    push(&p->effects, &p->neffects, &p->capeffects);
    memmove(&p->effects[p->kept + 1], &p->effects[p->kept], (p->neffects - 1 - p->kept) * sizeof(*p->effects));
    struct tg_counter_op *g = &p->effects[p->kept++];
    memset(g, 0, sizeof(*g));
    g->kind = op->kind == TG_COP_BUCKET_TAKE ? TG_COP_BUCKET_GIVE : TG_COP_WINDOW_SUB;
    g->h1 = op->h1;
    g->h2 = op->h2;
    g->capacity = op->capacity;
    g->amount = op->amount;
    g->window_start = op->window_start;
}

/* The operation at the cursor: the recorded one with its answer (1), or a new one recorded (0)
 * that the caller answers optimistically. */
static int step(struct tg_counter_plan *p, const struct tg_counter_op *want, struct tg_counter_op *answer)
{
    if (p->cursor < p->nops) {
        struct tg_counter_op *rec = &p->ops[p->cursor];
        if (p->cursor < p->nknown && same_op(rec, want)) {
            p->cursor++;
            *answer = *rec;
            return 1;
        }
        /* The path changed here: what was recorded from here on is not this decision's any more. */
        for (size_t i = p->cursor; i < p->nknown; i++)
            give_back(p, &p->ops[i]);
        p->nops = p->cursor;
        if (p->nknown > p->nops)
            p->nknown = p->nops;
    }
    struct tg_counter_op *rec = push(&p->ops, &p->nops, &p->capops);
    *rec = *want;
    p->cursor++;
    return 0;
}

static int within(double v, double limit, enum tg_limit_op op)
{
    return op == TG_LIMIT_NONE || (op == TG_LIMIT_LTE ? v <= limit : v < limit);
}

static int plan_bucket_take(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, int64_t window_ms,
                            double amount, int64_t now_ms, double *left, uint64_t *retry_ms)
{
    struct tg_counter_op want = {.kind = TG_COP_BUCKET_TAKE, .h1 = h1, .h2 = h2, .capacity = capacity,
                                 .window_ms = window_ms, .amount = amount, .now_ms = now_ms};
    struct tg_counter_op a;
    if (step(plan_of(c), &want, &a)) {
        *left = a.value;
        *retry_ms = a.retry_ms;
        return a.ok;
    }
    if (amount >= 0 && amount <= capacity) { /* a full bucket: what a bucket never seen has */
        *left = capacity - amount;
        *retry_ms = 0;
        return 1;
    }
    *left = capacity;
    *retry_ms = UINT64_MAX;
    return 0;
}

static void record_effect(struct tg_counter_plan *p, const struct tg_counter_op *op)
{
    *push(&p->effects, &p->neffects, &p->capeffects) = *op;
}

static void plan_bucket_give(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, double amount)
{
    struct tg_counter_op g = {.kind = TG_COP_BUCKET_GIVE, .h1 = h1, .h2 = h2, .capacity = capacity, .amount = amount};
    record_effect(plan_of(c), &g);
}

static double plan_window_get(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start)
{
    struct tg_counter_op want = {.kind = TG_COP_WINDOW_GET, .h1 = h1, .h2 = h2, .window_start = window_start};
    struct tg_counter_op a;
    return step(plan_of(c), &want, &a) ? a.value : 0;
}

static int plan_window_add(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, int64_t window_ms,
                           double amount, double limit, enum tg_limit_op limit_op, double *now_value)
{
    struct tg_counter_op want = {.kind = TG_COP_WINDOW_ADD, .h1 = h1, .h2 = h2, .window_start = window_start,
                                 .window_ms = window_ms, .amount = amount, .limit = limit, .limit_op = limit_op};
    struct tg_counter_op a;
    if (step(plan_of(c), &want, &a)) {
        *now_value = a.value;
        return a.ok;
    }
    if (amount >= 0 && within(amount, limit, limit_op)) { /* an empty window */
        *now_value = amount;
        return 1;
    }
    *now_value = 0;
    return 0;
}

static void plan_window_sub(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, double amount)
{
    struct tg_counter_op s = {.kind = TG_COP_WINDOW_SUB, .h1 = h1, .h2 = h2, .window_start = window_start, .amount = amount};
    record_effect(plan_of(c), &s);
}

/* A history not asked yet reads as empty and complete: the optimism of a window that reads 0. The
 * real answer comes with the round's other operations, and the next pass decides on it. */
static void plan_hist_get(struct tg_counters *c, uint64_t h1, uint64_t h2, struct tg_hist_view *out)
{
    struct tg_counter_op want = {.kind = TG_COP_HIST_GET, .h1 = h1, .h2 = h2};
    struct tg_counter_op a;
    if (step(plan_of(c), &want, &a)) {
        *out = a.view;
        return;
    }
    memset(out, 0, sizeof(*out));
    out->known_since_ms = INT64_MIN;
}

struct tg_hist_entry *tg_plan_hist_alloc(struct tg_counter_plan *p, size_t n)
{
    struct tg_hist_entry *e = tg_xcalloc(n ? n : 1, sizeof(*e));
    p->blocks = tg_xrealloc(p->blocks, (p->nblocks + 1) * sizeof(*p->blocks));
    p->blocks[p->nblocks++] = e;
    return e;
}

/* An add is an effect of the final pass, like a give: the entry is copied into the plan. */
static void plan_hist_add(struct tg_counters *c, uint64_t h1, uint64_t h2, const struct tg_hist_entry *e)
{
    struct tg_counter_plan *p = plan_of(c);
    struct tg_hist_entry *copy = tg_plan_hist_alloc(p, 1);
    *copy = *e;
    struct tg_counter_op a = {.kind = TG_COP_HIST_ADD, .h1 = h1, .h2 = h2, .entry = copy};
    record_effect(p, &a);
}

static void plan_sweep(struct tg_counters *c, int64_t now_ms, size_t budget) { (void)c, (void)now_ms, (void)budget; }
static size_t plan_count(const struct tg_counters *c) { return ((const struct tg_counter_plan *)c)->nops; }
static size_t plan_memory(const struct tg_counters *c)
{
    const struct tg_counter_plan *p = (const struct tg_counter_plan *)c;
    return (p->capops + p->capeffects) * sizeof(struct tg_counter_op);
}
static void plan_free(struct tg_counters *c) { tg_plan_dispose(plan_of(c)); }

static const struct tg_counter_store_ops plan_ops = {
    .bucket_take = plan_bucket_take,
    .bucket_give = plan_bucket_give,
    .window_get = plan_window_get,
    .window_add = plan_window_add,
    .window_sub = plan_window_sub,
    .sweep = plan_sweep,
    .count = plan_count,
    .memory = plan_memory,
    .free = plan_free, /* disposes; the plan itself is the caller's storage */
    .hist_get = plan_hist_get,
    .hist_add = plan_hist_add,
};

void tg_plan_init(struct tg_counter_plan *p)
{
    memset(p, 0, sizeof(*p));
    p->base.ops = &plan_ops;
}

void tg_plan_begin(struct tg_counter_plan *p)
{
    p->cursor = 0;
    p->neffects = p->kept; /* the last pass's own gives undid its optimistic answers */
}

size_t tg_plan_end(struct tg_counter_plan *p, size_t *from)
{
    /* What the pass did not reach of the record is not this decision's. */
    if (p->cursor < p->nops) {
        for (size_t i = p->cursor; i < p->nknown; i++)
            give_back(p, &p->ops[i]);
        p->nops = p->cursor;
        if (p->nknown > p->nops)
            p->nknown = p->nops;
    }
    *from = p->nknown;
    size_t n = p->nops - p->nknown;
    if (n > 0 && ++p->rounds > TG_PLAN_MAX_ROUNDS) {
        p->unsettled = 1;
        p->nops = p->nknown; /* nothing more is asked; what was taken is given back */
        p->neffects = p->kept;
        for (size_t i = 0; i < p->nknown; i++)
            give_back(p, &p->ops[i]);
        return 0;
    }
    return n;
}

void tg_plan_answered(struct tg_counter_plan *p) { p->nknown = p->nops; }

void tg_plan_dispose(struct tg_counter_plan *p)
{
    free(p->ops);
    free(p->effects);
    for (size_t i = 0; i < p->nblocks; i++)
        free(p->blocks[i]);
    free(p->blocks);
    p->blocks = NULL;
    p->nblocks = 0;
    p->ops = p->effects = NULL;
    p->nops = p->capops = p->nknown = p->neffects = p->capeffects = p->kept = 0;
}
