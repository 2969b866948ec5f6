/* The local history (policy/history.h): rings of entries keyed by two 64-bit hashes, in a
 * chained hash table, with a list from the most to the least recently used ring. A ring grows
 * by doubling up to calls_per_key entries, then drops its oldest. Bytes are counted over every
 * ring (entries and heads); past max_bytes the least recently used rings go, and a small table
 * remembers, per slot of their key, until when they held calls, so that a key dropped to make
 * room answers "forgotten before T" rather than "nothing happened". */
#include "policy/history.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/siphash.h"

#define EVICTED_SLOTS 4096

/* One key's ring. Owned by its table; freed by ring_drop() or tg_history_free(). */
struct ring {
    uint64_t h1, h2;
    struct ring *next;                /* in its bucket */
    struct ring *newer, *older;       /* the use list: tg_history.mru is the newest */
    struct tg_hist_entry *e;          /* cap slots; n in use from head (the oldest), wrapping */
    uint32_t cap, n, head;
    int64_t forgot_ms;                /* the newest entry it dropped (INT64_MIN: none) */
};

struct tg_history {
    struct ring **bucket;
    size_t nbucket; /* a power of two */
    size_t nring;
    struct ring *mru, *lru;
    size_t calls_per_key, max_bytes, bytes;
    uint64_t forgotten, evicted;
    int64_t *evicted_until; /* [EVICTED_SLOTS]: per slot of h1, the newest call of a dropped ring */
    size_t sweep_bucket;
};

static size_t ring_bytes(const struct ring *r) { return sizeof(*r) + (size_t)r->cap * sizeof(struct tg_hist_entry); }

uint64_t tg_hist_tag_hash(const char *tag, size_t n)
{
    static const uint8_t key[16] = "tollgate-tags-01";
    uint64_t h = tg_siphash(key, tag, n);
    return h ? h : 1;
}

/* A session id is the gateway's own random text (or, for stateless calls, the grant's name):
 * nobody chooses it to collide, so a multiply-mix over its words serves, at a tenth of SipHash's
 * cost on every recorded call. Words are read little-endian: the same in every member. */
uint64_t tg_hist_session_hash(const char *id, size_t n)
{
    const unsigned char *p = (const unsigned char *)id;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)n * 0xff51afd7ed558ccdULL);
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t w = 0;
        for (int i = 0; i < 8; i++)
            w |= (uint64_t)p[i] << (8 * i);
        h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
        h ^= h >> 31;
    }
    uint64_t w = 0;
    for (size_t i = 0; i < n; i++)
        w |= (uint64_t)p[i] << (8 * i);
    h = (h ^ w) * 0x94d049bb133111ebULL;
    h ^= h >> 29;
    return h ? h : 1;
}

struct tg_history *tg_history_new(size_t calls_per_key, size_t max_bytes)
{
    struct tg_history *h = tg_xcalloc(1, sizeof(*h));
    h->nbucket = 256;
    h->bucket = tg_xcalloc(h->nbucket, sizeof(*h->bucket));
    h->evicted_until = tg_xcalloc(EVICTED_SLOTS, sizeof(*h->evicted_until));
    for (size_t i = 0; i < EVICTED_SLOTS; i++)
        h->evicted_until[i] = INT64_MIN;
    h->bytes = h->nbucket * sizeof(*h->bucket) + EVICTED_SLOTS * sizeof(*h->evicted_until);
    tg_history_limits(h, calls_per_key, max_bytes);
    return h;
}

static void use_unlink(struct tg_history *h, struct ring *r)
{
    if (r->newer)
        r->newer->older = r->older;
    else
        h->mru = r->older;
    if (r->older)
        r->older->newer = r->newer;
    else
        h->lru = r->newer;
    r->newer = r->older = NULL;
}

static void use_front(struct tg_history *h, struct ring *r)
{
    if (h->mru == r)
        return;
    if (r->newer || r->older || h->lru == r)
        use_unlink(h, r);
    r->older = h->mru;
    if (h->mru)
        h->mru->newer = r;
    h->mru = r;
    if (h->lru == NULL)
        h->lru = r;
}

static struct ring **find(struct tg_history *h, uint64_t h1, uint64_t h2)
{
    struct ring **pp = &h->bucket[h1 & (h->nbucket - 1)];
    while (*pp && ((*pp)->h1 != h1 || (*pp)->h2 != h2))
        pp = &(*pp)->next;
    return pp;
}

static int64_t newest_at(const struct ring *r)
{
    if (r->n == 0)
        return INT64_MIN;
    return r->e[(r->head + r->n - 1) % r->cap].at_ms;
}

/* Drop r (found at *pp). evicted: to make room (remember until when it held calls). */
static void ring_drop(struct tg_history *h, struct ring **pp, int evicted)
{
    struct ring *r = *pp;
    if (evicted) {
        int64_t *slot = &h->evicted_until[r->h1 % EVICTED_SLOTS];
        int64_t t = newest_at(r);
        if (t > *slot)
            *slot = t;
        h->evicted++;
    }
    *pp = r->next;
    use_unlink(h, r);
    h->bytes -= ring_bytes(r);
    h->nring--;
    free(r->e);
    free(r);
}

static void grow_table(struct tg_history *h)
{
    size_t nb = h->nbucket * 2;
    struct ring **b = tg_xcalloc(nb, sizeof(*b));
    for (size_t i = 0; i < h->nbucket; i++)
        for (struct ring *r = h->bucket[i], *next; r; r = next) {
            next = r->next;
            r->next = b[r->h1 & (nb - 1)];
            b[r->h1 & (nb - 1)] = r;
        }
    h->bytes += (nb - h->nbucket) * sizeof(*b);
    free(h->bucket);
    h->bucket = b;
    h->nbucket = nb;
}

/* Resize r's slots to cap (>= 1), keeping its newest entries in order from slot 0. */
static void ring_resize(struct tg_history *h, struct ring *r, uint32_t cap)
{
    struct tg_hist_entry *e = tg_xcalloc(cap, sizeof(*e));
    uint32_t keep = r->n < cap ? r->n : cap;
    uint32_t skip = r->n - keep;
    if (skip > 0) {
        r->forgot_ms = r->e[(r->head + skip - 1) % r->cap].at_ms;
        h->forgotten += skip;
    }
    for (uint32_t i = 0; i < keep; i++)
        e[i] = r->e[(r->head + skip + i) % r->cap];
    h->bytes -= ring_bytes(r);
    free(r->e);
    r->e = e;
    r->cap = cap;
    r->n = keep;
    r->head = 0;
    h->bytes += ring_bytes(r);
}

/* Drop least recently used rings (never keep) until the bytes fit. */
static void make_room(struct tg_history *h, const struct ring *keep)
{
    while (h->bytes > h->max_bytes && h->lru != NULL && h->lru != keep)
        ring_drop(h, find(h, h->lru->h1, h->lru->h2), 1);
}

void tg_history_limits(struct tg_history *h, size_t calls_per_key, size_t max_bytes)
{
    if (calls_per_key < 1)
        calls_per_key = 1;
    if (calls_per_key > TG_HIST_MAX_CALLS)
        calls_per_key = TG_HIST_MAX_CALLS;
    h->calls_per_key = calls_per_key;
    h->max_bytes = max_bytes;
    for (size_t i = 0; i < h->nbucket; i++)
        for (struct ring *r = h->bucket[i]; r; r = r->next)
            if (r->cap > calls_per_key)
                ring_resize(h, r, (uint32_t)calls_per_key);
    make_room(h, NULL);
}

void tg_history_get(struct tg_history *h, uint64_t h1, uint64_t h2, struct tg_hist_view *out)
{
    memset(out, 0, sizeof(*out));
    struct ring *r = *find(h, h1, h2);
    int64_t ev = h->evicted_until[h1 % EVICTED_SLOTS];
    out->known_since_ms = ev == INT64_MIN ? INT64_MIN : ev + 1;
    if (r == NULL)
        return;
    use_front(h, r);
    if (r->forgot_ms != INT64_MIN && r->forgot_ms + 1 > out->known_since_ms)
        out->known_since_ms = r->forgot_ms + 1;
    uint32_t first = r->cap - r->head < r->n ? r->cap - r->head : r->n;
    out->a = r->e + r->head;
    out->na = first;
    out->b = r->e;
    out->nb = r->n - first;
}

void tg_history_add(struct tg_history *h, uint64_t h1, uint64_t h2, const struct tg_hist_entry *e)
{
    struct ring **pp = find(h, h1, h2);
    struct ring *r = *pp;
    if (r == NULL) {
        if (h->nring >= h->nbucket)
            grow_table(h);
        r = tg_xcalloc(1, sizeof(*r));
        r->h1 = h1;
        r->h2 = h2;
        r->forgot_ms = INT64_MIN;
        r->cap = h->calls_per_key < 4 ? (uint32_t)h->calls_per_key : 4;
        r->e = tg_xcalloc(r->cap, sizeof(*r->e));
        struct ring **b = &h->bucket[h1 & (h->nbucket - 1)];
        r->next = *b;
        *b = r;
        h->nring++;
        h->bytes += ring_bytes(r);
    } else if (r->n == r->cap && r->cap < h->calls_per_key) {
        uint32_t cap = r->cap * 2;
        ring_resize(h, r, cap > h->calls_per_key ? (uint32_t)h->calls_per_key : cap);
    }
    use_front(h, r);
    if (r->n == r->cap) { /* full: the oldest goes */
        r->forgot_ms = r->e[r->head].at_ms;
        r->head = (r->head + 1) % r->cap;
        r->n--;
        h->forgotten++;
    }
    r->e[(r->head + r->n) % r->cap] = *e;
    r->n++;
    make_room(h, r);
}

void tg_history_sweep(struct tg_history *h, int64_t now_ms, size_t budget)
{
    for (size_t k = 0; k < budget && h->nring > 0; k++) {
        size_t i = h->sweep_bucket++ & (h->nbucket - 1);
        struct ring **pp = &h->bucket[i];
        while (*pp) {
            if (newest_at(*pp) < now_ms - TG_HIST_MAX_AGE_MS)
                ring_drop(h, pp, 0);
            else
                pp = &(*pp)->next;
        }
    }
}

size_t tg_history_keys(const struct tg_history *h) { return h->nring; }
size_t tg_history_memory(const struct tg_history *h) { return sizeof(*h) + h->bytes; }
uint64_t tg_history_forgotten(const struct tg_history *h) { return h->forgotten; }
uint64_t tg_history_evicted(const struct tg_history *h) { return h->evicted; }

void tg_history_free(struct tg_history *h)
{
    if (h == NULL)
        return;
    for (size_t i = 0; i < h->nbucket; i++)
        for (struct ring *r = h->bucket[i], *next; r; r = next) {
            next = r->next;
            free(r->e);
            free(r);
        }
    free(h->bucket);
    free(h->evicted_until);
    free(h);
}
