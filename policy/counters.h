/* Counter store: the token buckets (hosted "limits") and fixed windows (Intercept "state" and
 * "rate_limit") that policy decisions take from and give back to, keyed by two 64-bit hashes of
 * "upstream, counter, scope identity" (tg_counters_hash; tg_keyhash for a store whose keys stay in
 * the process).
 *
 * A store is a struct tg_counters with a table of operations. tg_counters_new() makes the local
 * store (policy/counters.c: one in-process hash table). A shared store (one that several gateways
 * use, such as Redis) provides its own table and constructor; the decisions do not change, as they
 * reach a store only through the functions below. Each operation is one step on one counter, which
 * a shared store must make atomic; the arithmetic it must reproduce is described at each one.
 *
 * The store belongs to its creator (the server), outside any policy, so a reload keeps the counts;
 * tg_counters_free() frees it. Pure: no I/O in the local store, and the clock is a parameter. */
#ifndef TG_COUNTERS_H
#define TG_COUNTERS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "policy/history.h"

/* What the value after a window add must satisfy: nothing, "<= limit" or "< limit". */
enum tg_limit_op { TG_LIMIT_NONE = 0, TG_LIMIT_LTE, TG_LIMIT_LT };

struct tg_counters;

/* The operations of a store; the functions below call them and document what they must do.
 * Data only: each kind of store has one static const table (local_ops in counters.c). */
struct tg_counter_store_ops {
    int (*bucket_take)(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, int64_t window_ms,
                       double amount, int64_t now_ms, double *left, uint64_t *retry_ms);
    void (*bucket_give)(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, double amount);
    double (*window_get)(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start);
    int (*window_add)(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, int64_t window_ms,
                      double amount, double limit, enum tg_limit_op limit_op, double *now_value);
    void (*window_sub)(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, double amount);
    void (*sweep)(struct tg_counters *c, int64_t now_ms, size_t budget);
    size_t (*count)(const struct tg_counters *c);
    size_t (*memory)(const struct tg_counters *c);
    void (*free)(struct tg_counters *c);
    /* Optional (NULL: nothing to do): the counter will be asked for soon; start bringing it
     * close (the local store prefetches its slot). No effect on any answer. */
    void (*prefetch)(struct tg_counters *c, uint64_t h1, uint64_t h2);
    /* History (policy/history.h). Optional: NULL in a store that keeps none (it answers an empty
     * history, known since ever, and forgets what it is given). */
    void (*hist_get)(struct tg_counters *c, uint64_t h1, uint64_t h2, struct tg_hist_view *out);
    void (*hist_add)(struct tg_counters *c, uint64_t h1, uint64_t h2, const struct tg_hist_entry *e);
    /* 1: the store's keys never leave this process, so a decision may derive them with
     * tg_keyhash (faster) rather than tg_counters_hash; 0 (a store that names its counters to
     * others, as the cluster's Redis keys do): tg_counters_hash, the same in every release. */
    int private_keys;
};

/* The head of every store: an implementation embeds it as the first member of its own struct,
 * sets ops, and hands out a pointer to it. Callers only pass it to the functions below. Owner:
 * the store's creator (the server, srv->counters); tg_counters_free() frees it (ops->free). */
struct tg_counters {
    const struct tg_counter_store_ops *ops;
};

/* The local store: an in-process table, empty. Aborts if out of memory. */
struct tg_counters *tg_counters_new(void);
/* Free any store (NULL is ignored). */
void tg_counters_free(struct tg_counters *c);
/* Entries held, and the memory they take (for /metrics). */
size_t tg_counters_count(const struct tg_counters *c);
size_t tg_counters_memory(const struct tg_counters *c);
/* Drop entries that no longer hold information (full buckets, past windows); at most `budget`
 * slots scanned. A store that expires entries by itself may do nothing. */
void tg_counters_sweep(struct tg_counters *c, int64_t now_ms, size_t budget);

/* Does the store want to hear of counters before they are asked for (tg_counters_prefetch)? */
int tg_counters_prefetches(const struct tg_counters *c);
/* A hint that this counter is about to be read or changed; answers nothing, changes nothing. */
void tg_counters_prefetch(struct tg_counters *c, uint64_t h1, uint64_t h2);

/* The key of a counter: two independent 64-bit hashes of key[0..n), h1 never 0. */
void tg_counters_hash(const char *key, size_t n, uint64_t *h1, uint64_t *h2);
/* The same hash of the concatenation part[0] .. part[nparts-1] (len[k] bytes each), without
 * building it: what a decision uses for "upstream\x1fkey\x1fscope\x1fid". */
void tg_counters_hash_parts(const char *const *part, const size_t *len, int nparts, uint64_t *h1, uint64_t *h2);
/* The same hash fed in pieces: begin with the total length n, feed exactly n bytes, end. A state
 * after a prefix is a value that can be kept and fed on from (policy/decide.c keeps one per
 * counter). Value type. */
struct tg_counters_hasher {
    uint64_t a, b;
};
void tg_counters_hash_begin(struct tg_counters_hasher *h, size_t n);
void tg_counters_hash_feed(struct tg_counters_hasher *h, const char *p, size_t n);
void tg_counters_hash_end(const struct tg_counters_hasher *h, uint64_t *h1, uint64_t *h2);

/* Does the store take private keys (tg_counter_store_ops.private_keys)? */
int tg_counters_private_keys(const struct tg_counters *c);

/* Private keys: two 64-bit hashes of a tuple of strings, for a store whose keys never leave the
 * process (the local store). tg_counters_hash runs a byte at a time through two multiply
 * chains, and a decision hashes a grant or a 32-character session id for every counter it
 * reaches: the chains' latency was a fifth of a decision. This one takes eight bytes a step.
 * Each part is its length and then its bytes, so ("ab", "c") and ("a", "bc") differ. Not stable
 * across releases or machines (it reads words in the host's byte order): never for a key that is
 * stored or shared. Value type; a state after some parts can be kept and fed on from. */
struct tg_keyhash {
    uint64_t a, b;
};

static inline void tg__keyhash_word(struct tg_keyhash *h, uint64_t w)
{
    uint64_t a = (h->a ^ w) * 0x9e3779b97f4a7c15ULL;
    uint64_t b = (h->b + w) * 0xc2b2ae3d27d4eb4fULL;
    h->a = a ^ (a >> 29);
    h->b = b ^ (b >> 32);
}

static inline void tg_keyhash_begin(struct tg_keyhash *h)
{
    h->a = 0x243f6a8885a308d3ULL;
    h->b = 0x13198a2e03707344ULL;
}

static inline void tg_keyhash_part(struct tg_keyhash *h, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    tg__keyhash_word(h, (uint64_t)n);
    for (; n > 8; p += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        tg__keyhash_word(h, w);
    }
    /* The last 1 to 8 bytes as one word: two 4-byte loads that overlap when n < 8, or three
     * single bytes when n < 4. Either way every byte is in it, so for a given n two different
     * tails give two different words. */
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
        tg__keyhash_word(h, (uint64_t)lo | (uint64_t)hi << 32);
    } else if (n > 0) {
        tg__keyhash_word(h, (uint64_t)p[0] | (uint64_t)p[n >> 1] << 8 | (uint64_t)p[n - 1] << 16);
    }
}

/* h1 is never 0 (an empty slot of the local store). */
void tg_keyhash_end(const struct tg_keyhash *h, uint64_t *h1, uint64_t *h2);

/* Token bucket of `capacity` tokens refilled at capacity per window_ms, in whole milliseconds
 * (dt * capacity / window_ms, capped at capacity), starting full: take `amount`; returns 1
 * (taken) or 0 (not enough; *retry_ms is the first millisecond at which it would be, UINT64_MAX
 * if amount > capacity). *left is the level after the call, without float dust (a level within a
 * few ulps of a whole number is that number). A clock that steps back refills nothing. */
int tg_bucket_take(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, int64_t window_ms, double amount,
                   int64_t now_ms, double *left, uint64_t *retry_ms);
/* Give amount back to a bucket (capped at capacity; nothing if the bucket is gone, i.e. full). */
void tg_bucket_give(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, double amount);

/* Fixed window: current value in the window starting at window_start (0 if another window or
 * none). */
double tg_window_get(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start);
/* Add amount (finite, >= 0; anything else, NaN included, is refused) unless the sum would break
 * limit_op/limit; returns 1 if added. *now_value is the value after the call. Sums and
 * differences keep 15 significant digits (see settle() in counters.c), so decimal amounts add up
 * to their decimal sum and a refund restores the value exactly. */
int tg_window_add(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, int64_t window_ms,
                  double amount, double limit, enum tg_limit_op limit_op, double *now_value);
/* Take amount back from the window starting at window_start (never below 0; nothing if a new
 * window began). */
void tg_window_sub(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, double amount);

/* History: the entries of key (h1, h2), oldest first (the view is borrowed: valid until the store
 * changes or, for a plan, until it is disposed), and one more entry for it (copied). */
void tg_hist_get(struct tg_counters *c, uint64_t h1, uint64_t h2, struct tg_hist_view *out);
void tg_hist_add(struct tg_counters *c, uint64_t h1, uint64_t h2, const struct tg_hist_entry *e);
/* The local store's history: its bounds (calls per key, bytes over all keys; defaults 64 and
 * 64 MiB), and what it holds (for /metrics). Other stores ignore the bounds and report 0. */
void tg_counters_history_limits(struct tg_counters *c, size_t calls_per_key, size_t max_bytes);
size_t tg_counters_history_keys(const struct tg_counters *c);
size_t tg_counters_history_memory(const struct tg_counters *c);

/* ---- one operation as data: for stores that answer later (a shared store over the network) -- */

enum tg_counter_op_kind {
    TG_COP_BUCKET_TAKE = 0,
    TG_COP_BUCKET_GIVE,
    TG_COP_WINDOW_GET,
    TG_COP_WINDOW_ADD,
    TG_COP_WINDOW_SUB,
    TG_COP_HIST_GET, /* answered: view */
    TG_COP_HIST_ADD, /* an effect: entry */
    TG_COP_HIST_DEL, /* a shared store's own effect: take back the entry of a HIST_ADD it sent ahead
                      * of the decision (cluster/cluster.c); the local store has nothing to undo */
};

/* One call of the functions above, as a value: the arguments, and once answered the result.
 * Value type, in arrays (the plan below, a shared store's request). */
struct tg_counter_op {
    enum tg_counter_op_kind kind;
    uint64_t h1, h2;
    double capacity;       /* buckets */
    int64_t window_ms;     /* buckets and window add */
    double amount;         /* take, give, add, sub */
    int64_t now_ms;        /* take */
    int64_t window_start;  /* windows */
    double limit;          /* window add */
    enum tg_limit_op limit_op;
    /* A shared store's own (cluster/lease.c): a take that may take this much more for the
     * instance's lease when the bucket has it ("take up to"); 0: a plain take. */
    double extra;
    /* The result: ok (take, add: 1 taken/added; get, give, sub: 1), value (take: the level
     * after, *left; add: *now_value; get: the value), retry_ms (take). */
    int ok;
    double value;
    uint64_t retry_ms;
    double taken; /* a take with extra: what it took (amount + extra, amount, or 0) */
    /* History: an add's entry; a get's answer. Both point into memory that the plan (or the
     * caller of tg_counter_op_apply) keeps: see tg_plan_hist_alloc. */
    const struct tg_hist_entry *entry;
    struct tg_hist_view view;
};

/* Run one operation on a store now and fill its result. */
void tg_counter_op_apply(struct tg_counters *c, struct tg_counter_op *op);

/* A decision made against a store that answers later (policy/plan.c). The plan is a store whose
 * operations record what a decision asks; the decision is run again (a "pass") until every
 * operation it reaches has an answer:
 *
 *   tg_plan_init(&p);
 *   for (;;) {
 *       tg_plan_begin(&p);
 *       tg_policy_decide_call(pol, &p.base, who, tool, args, now_ms, &d);  // same now_ms each pass
 *       size_t from, n = tg_plan_end(&p, &from);
 *       if (n == 0) break;                   // final: d is the decision
 *       ...run p.ops[from .. from+n) on the shared store, write their results, tg_plan_answered(&p)
 *   }
 *   ...run p.effects[0 .. p.neffects) (refunds; no answer needed), tg_plan_dispose(&p)
 *
 * A pass answers a known operation from its result, and an unknown one optimistically (a take
 * or add that fits succeeds, a window reads 0) while recording it for the next round. A pass
 * that asks something else than the operation recorded at that place (a real answer changed its
 * path) leaves the rest of the record unconsumed: what those operations took is given back (an
 * effect). Gives and subs of the final pass are effects; those of earlier passes are dropped,
 * as they undid optimistic answers. So a decision costs one round trip when the optimism holds
 * (every counter fits), and never takes more than the final pass reserved. Passes are bounded:
 * after TG_PLAN_MAX_ROUNDS rounds tg_plan_end() returns 0 with p->unsettled = 1, and the caller
 * must fail closed. */
#define TG_PLAN_MAX_ROUNDS 8

struct tg_counter_plan {
    struct tg_counters base;     /* first: pass &plan.base as the decision's store */
    struct tg_counter_op *ops;   /* what the decision asks, in order; [0, nknown) answered */
    size_t nops, capops, nknown;
    size_t cursor;               /* the next operation this pass */
    struct tg_counter_op *effects; /* after the final pass: the gives and subs to run on the
                                    * shared store, in order (what was given back first) */
    size_t neffects, capeffects;
    size_t kept;                 /* effects[0, kept) outlive the pass: what unconsumed operations
                                  * took; effects[kept ..) are this pass's own */
    int rounds;
    int unsettled;
    void **blocks;               /* what tg_plan_hist_alloc gave out, freed by tg_plan_dispose */
    size_t nblocks;
};

void tg_plan_init(struct tg_counter_plan *p);
void tg_plan_begin(struct tg_counter_plan *p);
/* After a pass: how many operations need an answer (ops[*from ..]); 0 when the pass was final. */
size_t tg_plan_end(struct tg_counter_plan *p, size_t *from);
/* The operations tg_plan_end() named have their results. */
void tg_plan_answered(struct tg_counter_plan *p);
void tg_plan_dispose(struct tg_counter_plan *p);
/* n entries (zeroed) that live until the plan is disposed: where a shared store writes the
 * entries of a history it answers (a get's view points into them). */
struct tg_hist_entry *tg_plan_hist_alloc(struct tg_counter_plan *p, size_t n);

#endif
