/* Counter store: the interface (policy/counters.h) and its first implementation, the local
 * store: one open-addressing table (linear probing, backward-shift deletion) of 32-byte entries,
 * two to a cache line, keyed by two independent 64-bit hashes of "upstream, counter, scope
 * identity". Keys are never stored: the 63 bits of h1 and 32 of h2 that an entry keeps, of names
 * the gateway chooses (session ids are random, grant and counter names come from the operator),
 * do not collide in practice (about 2^-56 for a million live counters), and dropping the key
 * keeps a million live buckets at 64 MiB. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "policy/counters.h"

/* One slot of the local store's table. Value type: an element of local_store.t, freed with the
 * table (grow, local_free). */
struct entry {
    uint64_t h1;      /* 0: empty slot */
    uint32_t h2;      /* the low half of h2 */
    uint32_t life;    /* stamp_ms + life_ms(life): from then on the entry holds no information */
    int64_t stamp_ms; /* bucket: last refill; window: window start */
    double value;     /* bucket: tokens; window: count */
};

/* An entry's life, from its stamp: whole milliseconds below 2^31 ms (24 days), whole seconds
 * (rounded up, flagged by the top bit) above, up to 68 years. Rounding up only keeps an entry a
 * little longer; never shorter, as a window swept before its end would start again from 0. */
static uint32_t life_of(int64_t ms)
{
    if (ms <= 0)
        return 0;
    if (ms < (int64_t)0x80000000)
        return (uint32_t)ms;
    int64_t s = ms / 1000 + (ms % 1000 != 0);
    return 0x80000000u | (uint32_t)(s > 0x7fffffff ? 0x7fffffff : s);
}

_Static_assert(sizeof(struct entry) == 32, "two entries to a cache line");

static int64_t life_ms(uint32_t life) { return life & 0x80000000u ? (int64_t)(life & 0x7fffffff) * 1000 : life; }

/* The local store. Owned by whoever called tg_counters_new(); freed by tg_counters_free(). */
struct local_store {
    struct tg_counters base; /* first: a struct tg_counters * is a struct local_store * */
    struct entry *t;
    size_t cap; /* power of two */
    size_t count;
    size_t sweep_pos;
    struct tg_history *hist; /* made with the first entry (policy/history.c) */
    size_t hist_calls, hist_bytes;
};

/* The table's memory. A table of 2 MiB or more is mapped on its own, aligned to 2 MiB and marked
 * for transparent huge pages (Debian's default is "madvise"): with many callers a lookup lands on
 * a random page of a table far larger than the TLB reaches with 4 KiB pages, and the page walk
 * cost as much as the cache miss. Smaller tables are aligned to a cache line. Both arrive zeroed,
 * and no entry straddles two lines. */
#define HUGE_PAGE ((size_t)2 << 20)

static struct entry *table_alloc(size_t cap)
{
    size_t bytes = cap * sizeof(struct entry);
    if (bytes < HUGE_PAGE) {
        struct entry *t = aligned_alloc(64, bytes); /* bytes: a power of two >= 32 KiB */
        if (!t)
            abort();
        memset(t, 0, bytes);
        return t;
    }
    size_t len = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    char *m = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        abort();
    char *t = (char *)(((uintptr_t)m + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (t > m)
        munmap(m, (size_t)(t - m));
    if (t + len < m + len + HUGE_PAGE)
        munmap(t + len, (size_t)(m + len + HUGE_PAGE - (t + len)));
#ifdef MADV_HUGEPAGE
    (void)madvise(t, len, MADV_HUGEPAGE); /* advice only: without it the table still works */
#endif
    return (struct entry *)t;
}

static void table_free(struct entry *t, size_t cap)
{
    size_t bytes = cap * sizeof(struct entry);
    if (bytes < HUGE_PAGE)
        free(t);
    else
        munmap(t, (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
}

static struct local_store *local_of(struct tg_counters *c) { return (struct local_store *)c; }
static const struct local_store *clocal_of(const struct tg_counters *c) { return (const struct local_store *)c; }

static void local_free(struct tg_counters *base)
{
    struct local_store *c = local_of(base);
    table_free(c->t, c->cap);
    tg_history_free(c->hist);
    free(c);
}

static size_t local_count(const struct tg_counters *base) { return clocal_of(base)->count; }
static size_t local_memory(const struct tg_counters *base)
{
    const struct local_store *c = clocal_of(base);
    return c->cap * sizeof(struct entry) + sizeof(*c);
}

/* An entry's home slot. Every h1 has bit 0 set (0 marks an empty slot), so the index starts
 * above it: with h1's low bits, only odd slots were ever a home and the table probed as if it
 * were twice as full. */
static size_t home_of(uint64_t h1, size_t cap) { return (size_t)(h1 >> 1) & (cap - 1); }

static void insert_raw(struct entry *t, size_t cap, const struct entry *e)
{
    size_t i = home_of(e->h1, cap);
    while (t[i].h1 != 0)
        i = (i + 1) & (cap - 1);
    t[i] = *e;
}

static void grow(struct local_store *c)
{
    size_t ncap = c->cap * 2;
    struct entry *nt = table_alloc(ncap);
    for (size_t i = 0; i < c->cap; i++)
        if (c->t[i].h1 != 0)
            insert_raw(nt, ncap, &c->t[i]);
    table_free(c->t, c->cap);
    c->t = nt;
    c->cap = ncap;
}

/* Find or create. h1 must not be 0 (tg_counters_hash never returns it). */
static struct entry *slot(struct local_store *c, uint64_t h1, uint64_t h2, int create)
{
    size_t i = home_of(h1, c->cap);
    while (c->t[i].h1 != 0) {
        if (c->t[i].h1 == h1 && c->t[i].h2 == (uint32_t)h2)
            return &c->t[i];
        i = (i + 1) & (c->cap - 1);
    }
    if (!create)
        return NULL;
    if ((c->count + 1) * 2 > c->cap) {
        grow(c);
        return slot(c, h1, h2, 1);
    }
    c->t[i].h1 = h1;
    c->t[i].h2 = (uint32_t)h2;
    c->t[i].life = 0;
    c->t[i].stamp_ms = 0;
    c->t[i].value = 0;
    c->count++;
    return &c->t[i];
}

static void remove_at(struct local_store *c, size_t i)
{
    /* Backward-shift deletion keeps probe chains intact without tombstones. */
    size_t mask = c->cap - 1;
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (c->t[j].h1 == 0)
            break;
        size_t home = home_of(c->t[j].h1, c->cap);
        /* Move t[j] into the hole at i if its home is not in (i, j]. */
        int between = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            c->t[i] = c->t[j];
            i = j;
        }
    }
    memset(&c->t[i], 0, sizeof(c->t[i]));
    c->count--;
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

void tg_counters_hash_begin(struct tg_counters_hasher *h, size_t n)
{
    h->a = 0xcbf29ce484222325ULL;
    h->b = 0x84222325cbf29ce4ULL ^ n;
}

void tg_counters_hash_feed(struct tg_counters_hasher *h, const char *p, size_t n)
{
    const unsigned char *key = (const unsigned char *)p;
    uint64_t a = h->a, b = h->b;
    for (size_t i = 0; i < n; i++) {
        a = (a ^ key[i]) * 0x100000001b3ULL;
        b = (b + key[i] + 0x9e3779b97f4a7c15ULL) * 0xff51afd7ed558ccdULL;
        b ^= b >> 29;
    }
    h->a = a;
    h->b = b;
}

void tg_counters_hash_end(const struct tg_counters_hasher *h, uint64_t *h1, uint64_t *h2)
{
    *h1 = mix(h->a) | 1; /* never 0: 0 marks an empty slot */
    *h2 = mix(h->b ^ h->a);
}

void tg_counters_hash_parts(const char *const *part, const size_t *len, int nparts, uint64_t *h1, uint64_t *h2)
{
    size_t n = 0;
    for (int k = 0; k < nparts; k++)
        n += len[k];
    struct tg_counters_hasher h;
    tg_counters_hash_begin(&h, n);
    for (int k = 0; k < nparts; k++)
        tg_counters_hash_feed(&h, part[k], len[k]);
    tg_counters_hash_end(&h, h1, h2);
}

void tg_counters_hash(const char *key, size_t n, uint64_t *h1, uint64_t *h2)
{
    tg_counters_hash_parts(&key, &n, 1, h1, h2);
}

void tg_keyhash_end(const struct tg_keyhash *h, uint64_t *h1, uint64_t *h2)
{
    *h1 = mix(h->a ^ (h->b >> 17)) | 1; /* never 0: 0 marks an empty slot */
    *h2 = mix(h->b + (h->a << 23 | h->a >> 41));
}

/* Tokens that dt ms put back: capacity * dt / window, one correctly rounded product and one
 * quotient of integers. The old dt * (capacity / window) rounded the rate first and drifted:
 * 36 a second gave 26.999999999999996 tokens after 750 ms, not 27. */
static double refill(int64_t dt, double capacity, int64_t window_ms)
{
    if (dt <= 0)
        return 0;
    if (dt >= window_ms)
        return capacity;
    return (double)dt * capacity / (double)window_ms;
}

/* A level a few ulps away from a whole number is that number: what is left of the rounding in a
 * sum of refills and takes. A real fraction is at least 1/window_ms of a token away (refill comes
 * in whole milliseconds), which is far more than this tolerance for any level a double can hold
 * with that precision. */
static double whole_if_near(double tokens)
{
    double r = nearbyint(tokens);
    double tol = 8 * DBL_EPSILON * fmax(1, fabs(tokens));
    return fabs(tokens - r) <= tol ? r + 0 : tokens; /* + 0: no -0 */
}

static double level_at(const struct entry *e, double capacity, int64_t window_ms, int64_t now_ms)
{
    if (e == NULL)
        return capacity;
    double tokens = whole_if_near(e->value + refill(now_ms - e->stamp_ms, capacity, window_ms));
    return tokens > capacity ? capacity : tokens;
}

static int local_bucket_take(struct tg_counters *base, uint64_t h1, uint64_t h2, double capacity, int64_t window_ms,
                             double amount, int64_t now_ms, double *left, uint64_t *retry_ms)
{
    struct local_store *c = local_of(base);
    struct entry *e = slot(c, h1, h2, 0);
    double tokens = level_at(e, capacity, window_ms, now_ms);
    if (!(tokens >= amount)) {
        /* The first whole millisecond at which the refill covers the shortfall, computed the
         * way a take computes it, so that the hint is honest and not a millisecond late. */
        uint64_t ms = (uint64_t)ceil((amount - tokens) * (double)window_ms / capacity);
        if (ms < 1)
            ms = 1;
        while (ms < (uint64_t)window_ms &&
               !(whole_if_near(tokens + refill((int64_t)ms, capacity, window_ms)) >= amount))
            ms++;
        *retry_ms = amount > capacity ? UINT64_MAX : ms;
        *left = tokens;
        if (e != NULL) {
            int64_t expire_ms = e->stamp_ms + life_ms(e->life); /* the life counts from the stamp */
            e->value = tokens;
            if (now_ms > e->stamp_ms) /* a clock that steps back must not refill the same time twice */
                e->stamp_ms = now_ms;
            e->life = life_of(expire_ms - e->stamp_ms);
        }
        return 0;
    }
    if (e == NULL)
        e = slot(c, h1, h2, 1);
    tokens = whole_if_near(tokens - amount);
    e->value = tokens;
    if (now_ms > e->stamp_ms)
        e->stamp_ms = now_ms;
    e->life = life_of((int64_t)ceil((capacity - tokens) * (double)window_ms / capacity) + 1);
    *left = tokens;
    *retry_ms = 0;
    return 1;
}

static void local_bucket_give(struct tg_counters *base, uint64_t h1, uint64_t h2, double capacity, double amount)
{
    struct local_store *c = local_of(base);
    struct entry *e = slot(c, h1, h2, 0);
    if (e == NULL)
        return; /* already full again and swept */
    e->value = whole_if_near(e->value + amount);
    if (e->value > capacity)
        e->value = capacity;
}

/* Every power of ten up to 1e22 is exactly a double. */
static const double exact_pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                     1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/* x = a + b or a - b for two counter values. Amounts are decimal fractions (0.1, 0.9 cents), which
 * have no exact binary form, so a plain double sum drifts: 0.1 + 0.2 is 0.30000000000000004 (over
 * a cap of 0.3), ten 0.1 are 0.9999999999999999, and giving both back leaves 2.8e-17 instead of 0.
 * The error of one operation is an ulp or two of the larger operand, while decimal inputs sit on a
 * grid of at most 15 significant digits of it. Rounding x to that grid removes the drift: the
 * result is the double nearest the decimal sum, as the policy's own literals are, and a refund
 * returns to exactly the value before. An input finer than 15 digits of the counter (1e-15 added
 * to 5) is rounded with it, by at most half a unit in the 15th digit; that is what a double can
 * hold anyway. Integers are exact in a double up to 2^53 and are left alone (the common case
 * costs one comparison). */
static double settle(double x, double a, double b)
{
    if (x == floor(x) || !isfinite(x))
        return x == 0 ? 0 : x; /* no -0 */
    double mag = fmax(fabs(a), fabs(b));
    int k = 14 - (int)floor(log10(mag)); /* decimals that keep 15 significant digits of mag */
    if (k <= 0 || k >= (int)(sizeof(exact_pow10) / sizeof(exact_pow10[0])))
        return x; /* mag >= 1e15 (integral grid) or < 1e-8 (no exact scale): nothing to settle */
    double q = exact_pow10[k];
    double r = nearbyint(x * q) / q;
    return r == 0 ? 0 : r;
}

static int within(double v, double limit, enum tg_limit_op op)
{
    switch (op) {
    case TG_LIMIT_NONE: return 1;
    case TG_LIMIT_LTE: return v <= limit;
    case TG_LIMIT_LT: return v < limit;
    }
    return 0;
}

static double local_window_get(struct tg_counters *base, uint64_t h1, uint64_t h2, int64_t window_start)
{
    struct local_store *c = local_of(base);
    struct entry *e = slot(c, h1, h2, 0);
    if (e == NULL || e->stamp_ms != window_start)
        return 0;
    return e->value;
}

static int local_window_add(struct tg_counters *base, uint64_t h1, uint64_t h2, int64_t window_start,
                            int64_t window_ms, double amount, double limit, enum tg_limit_op limit_op,
                            double *now_value)
{
    struct local_store *c = local_of(base);
    struct entry *e = slot(c, h1, h2, 0);
    double cur = (e != NULL && e->stamp_ms == window_start) ? e->value : 0;
    double next = settle(cur + amount, cur, amount);
    /* Written so that a NaN anywhere refuses; so does a sum past a double's range (a counter
     * with no limit fed huge amounts), which would hold inf from then on. */
    if (!(amount >= 0) || !isfinite(next) || !within(next, limit, limit_op)) {
        *now_value = cur;
        return 0;
    }
    if (e == NULL)
        e = slot(c, h1, h2, 1);
    e->stamp_ms = window_start;
    e->value = next;
    e->life = life_of(window_ms);
    *now_value = next;
    return 1;
}

static void local_window_sub(struct tg_counters *base, uint64_t h1, uint64_t h2, int64_t window_start, double amount)
{
    struct local_store *c = local_of(base);
    struct entry *e = slot(c, h1, h2, 0);
    if (e == NULL || e->stamp_ms != window_start)
        return; /* a new window began: nothing of the old one to give back */
    double next = settle(e->value - amount, e->value, amount);
    e->value = next > 0 ? next : 0;
}

static void local_sweep(struct tg_counters *base, int64_t now_ms, size_t budget)
{
    struct local_store *c = local_of(base);
    if (c->hist != NULL)
        tg_history_sweep(c->hist, now_ms, budget / 64 + 1);
    if (c->count == 0)
        return;
    if (budget > c->cap)
        budget = c->cap;
    while (budget-- > 0) {
        size_t i = c->sweep_pos & (c->cap - 1);
        if (c->t[i].h1 != 0 && c->t[i].stamp_ms + life_ms(c->t[i].life) <= now_ms) {
            remove_at(c, i);
            /* an entry may have shifted into i: look at it again, without spending budget on it */
            budget++;
            continue;
        }
        c->sweep_pos = (i + 1) & (c->cap - 1);
    }
}

/* A decision knows which counters it will reach before it reaches them; the table is far larger
 * than the caches with many callers, so a lookup is a memory miss. Asking for every slot first
 * lets those misses overlap instead of coming one after another. An entry is in one line. */
static void local_prefetch(struct tg_counters *base, uint64_t h1, uint64_t h2)
{
    (void)h2;
    struct local_store *c = local_of(base);
    const struct entry *e = &c->t[home_of(h1, c->cap)];
    __builtin_prefetch(e);
}

static void local_hist_get(struct tg_counters *base, uint64_t h1, uint64_t h2, struct tg_hist_view *out)
{
    struct local_store *c = local_of(base);
    if (c->hist == NULL) {
        memset(out, 0, sizeof(*out));
        out->known_since_ms = INT64_MIN;
        return;
    }
    tg_history_get(c->hist, h1, h2, out);
}

static void local_hist_add(struct tg_counters *base, uint64_t h1, uint64_t h2, const struct tg_hist_entry *e)
{
    struct local_store *c = local_of(base);
    if (c->hist == NULL)
        c->hist = tg_history_new(c->hist_calls, c->hist_bytes);
    tg_history_add(c->hist, h1, h2, e);
}

static const struct tg_counter_store_ops local_ops = {
    .prefetch = local_prefetch,
    .hist_get = local_hist_get,
    .hist_add = local_hist_add,
    .private_keys = 1,
    .bucket_take = local_bucket_take,
    .bucket_give = local_bucket_give,
    .window_get = local_window_get,
    .window_add = local_window_add,
    .window_sub = local_window_sub,
    .sweep = local_sweep,
    .count = local_count,
    .memory = local_memory,
    .free = local_free,
};

struct tg_counters *tg_counters_new(void)
{
    struct local_store *c = calloc(1, sizeof(*c));
    if (!c)
        abort();
    c->base.ops = &local_ops;
    c->hist_calls = 64;
    c->hist_bytes = (size_t)64 << 20;
    c->cap = 1024;
    c->t = table_alloc(c->cap);
    return &c->base;
}

/* ---- the interface: every call goes to the store's own operation ---------------------- */

void tg_counters_free(struct tg_counters *c)
{
    if (!c)
        return;
    c->ops->free(c);
}

size_t tg_counters_count(const struct tg_counters *c) { return c->ops->count(c); }
int tg_counters_prefetches(const struct tg_counters *c) { return c->ops->prefetch != NULL; }
int tg_counters_private_keys(const struct tg_counters *c) { return c->ops->private_keys; }
void tg_counters_prefetch(struct tg_counters *c, uint64_t h1, uint64_t h2)
{
    if (c->ops->prefetch != NULL)
        c->ops->prefetch(c, h1, h2);
}
size_t tg_counters_memory(const struct tg_counters *c) { return c->ops->memory(c); }

void tg_counters_sweep(struct tg_counters *c, int64_t now_ms, size_t budget) { c->ops->sweep(c, now_ms, budget); }

int tg_bucket_take(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, int64_t window_ms, double amount,
                   int64_t now_ms, double *left, uint64_t *retry_ms)
{
    return c->ops->bucket_take(c, h1, h2, capacity, window_ms, amount, now_ms, left, retry_ms);
}

void tg_bucket_give(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, double amount)
{
    c->ops->bucket_give(c, h1, h2, capacity, amount);
}

double tg_window_get(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start)
{
    return c->ops->window_get(c, h1, h2, window_start);
}

int tg_window_add(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, int64_t window_ms,
                  double amount, double limit, enum tg_limit_op limit_op, double *now_value)
{
    return c->ops->window_add(c, h1, h2, window_start, window_ms, amount, limit, limit_op, now_value);
}

void tg_window_sub(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, double amount)
{
    c->ops->window_sub(c, h1, h2, window_start, amount);
}

void tg_counter_op_apply(struct tg_counters *c, struct tg_counter_op *op)
{
    switch (op->kind) {
    case TG_COP_BUCKET_TAKE:
        op->ok = tg_bucket_take(c, op->h1, op->h2, op->capacity, op->window_ms, op->amount, op->now_ms, &op->value,
                                &op->retry_ms);
        return;
    case TG_COP_BUCKET_GIVE:
        tg_bucket_give(c, op->h1, op->h2, op->capacity, op->amount);
        op->ok = 1;
        return;
    case TG_COP_WINDOW_GET:
        op->value = tg_window_get(c, op->h1, op->h2, op->window_start);
        op->ok = 1;
        return;
    case TG_COP_WINDOW_ADD:
        op->ok = tg_window_add(c, op->h1, op->h2, op->window_start, op->window_ms, op->amount, op->limit, op->limit_op,
                               &op->value);
        return;
    case TG_COP_WINDOW_SUB:
        tg_window_sub(c, op->h1, op->h2, op->window_start, op->amount);
        op->ok = 1;
        return;
    case TG_COP_HIST_GET:
        tg_hist_get(c, op->h1, op->h2, &op->view);
        op->ok = 1;
        return;
    case TG_COP_HIST_DEL:
        op->ok = 1;
        return;
    case TG_COP_HIST_ADD:
        if (op->entry != NULL)
            tg_hist_add(c, op->h1, op->h2, op->entry);
        op->ok = 1;
        return;
    }
}

void tg_hist_get(struct tg_counters *c, uint64_t h1, uint64_t h2, struct tg_hist_view *out)
{
    if (c->ops->hist_get == NULL) {
        memset(out, 0, sizeof(*out));
        out->known_since_ms = INT64_MIN;
        return;
    }
    c->ops->hist_get(c, h1, h2, out);
}

void tg_hist_add(struct tg_counters *c, uint64_t h1, uint64_t h2, const struct tg_hist_entry *e)
{
    if (c->ops->hist_add != NULL)
        c->ops->hist_add(c, h1, h2, e);
}

void tg_counters_history_limits(struct tg_counters *c, size_t calls_per_key, size_t max_bytes)
{
    if (c->ops != &local_ops)
        return;
    struct local_store *l = local_of(c);
    l->hist_calls = calls_per_key;
    l->hist_bytes = max_bytes;
    if (l->hist != NULL)
        tg_history_limits(l->hist, calls_per_key, max_bytes);
}

size_t tg_counters_history_keys(const struct tg_counters *c)
{
    return c->ops == &local_ops && clocal_of(c)->hist ? tg_history_keys(clocal_of(c)->hist) : 0;
}

size_t tg_counters_history_memory(const struct tg_counters *c)
{
    return c->ops == &local_ops && clocal_of(c)->hist ? tg_history_memory(clocal_of(c)->hist) : 0;
}
