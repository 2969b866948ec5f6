/* policy/counters.c: the counter store (open addressing, backward-shift deletion, sweeping).
 *
 * A million live buckets must fit in 128 MiB and every one must still be found with its value;
 * sweeping removes what no longer holds information (full buckets, past windows) and nothing else,
 * whatever the probe chains look like (wrap-around at the end of the table included). */
#include "test/unit/unit.h"

#include <math.h>

#include "policy/counters.h"
#include "policy/policy.h"

#define MIB (1024.0 * 1024.0)

static void key_hash(const char *prefix, unsigned i, uint64_t *h1, uint64_t *h2)
{
    char k[64];
    int n = snprintf(k, sizeof(k), "%s\x1f%u", prefix, i);
    tg_counters_hash(k, (size_t)n, h1, h2);
}

static double value_of(unsigned i) { return (double)(i % 977) + 1; }

static void million_live_buckets(void **state)
{
    const unsigned n = 1000000;
    const int64_t ws = 1710066600000LL, wms = 3600000;
    struct tg_counters *c = tg_counters_new();
    for (unsigned i = 0; i < n; i++) {
        uint64_t h1, h2;
        double now;
        key_hash("up\x1fS:tool.counter\x1fg\x1fgrant", i, &h1, &h2);
        assert_int_equal(tg_window_add(c, h1, h2, ws, wms, value_of(i), 0, 0, &now), 1);
    }
    assert_int_equal(tg_counters_count(c), n);
    size_t mem = tg_counters_memory(c);
    printf("# %u live counters: %.1f MiB (%.1f bytes each)\n", n, (double)mem / MIB, (double)mem / n);
    if (mem > (size_t)128 * 1024 * 1024)
        fail_msg("%zu bytes (%.1f MiB) for %u counters, budget 128 MiB", mem, (double)mem / MIB, n);
    /* All found, values intact; the hashes never collided into one entry. */
    for (unsigned i = 0; i < n; i++) {
        uint64_t h1, h2;
        key_hash("up\x1fS:tool.counter\x1fg\x1fgrant", i, &h1, &h2);
        double v = tg_window_get(c, h1, h2, ws);
        if (v != value_of(i))
            fail_msg("counter %u: %g, expected %g", i, v, value_of(i));
    }
    /* Unknown keys are not found. */
    for (unsigned i = n; i < n + 1000; i++) {
        uint64_t h1, h2;
        key_hash("up\x1fS:tool.counter\x1fg\x1fgrant", i, &h1, &h2);
        assert_true(tg_window_get(c, h1, h2, ws) == 0);
    }
    /* The same million as token buckets (one taken each): also within budget, all found. */
    tg_counters_free(c);
    c = tg_counters_new();
    for (unsigned i = 0; i < n; i++) {
        uint64_t h1, h2, retry;
        double left;
        key_hash("b", i, &h1, &h2);
        assert_int_equal(tg_bucket_take(c, h1, h2, 10, 60000, 1, ws, &left, &retry), 1);
    }
    assert_int_equal(tg_counters_count(c), n);
    assert_true(tg_counters_memory(c) <= (size_t)128 * 1024 * 1024);
    for (unsigned i = 0; i < n; i += 7) {
        uint64_t h1, h2, retry;
        double left;
        key_hash("b", i, &h1, &h2);
        assert_int_equal(tg_bucket_take(c, h1, h2, 10, 60000, 1, ws, &left, &retry), 1);
        if (left < 7.999 || left > 8.001)
            fail_msg("bucket %u: %g tokens left, expected 8", i, left);
    }
    tg_counters_free(c);
}

/* Windows of two lengths: at the end of the short one, a sweep drops exactly those. */
static void sweep_removes_expired_and_keeps_live(void **state)
{
    const unsigned n = 50000;
    const int64_t t0 = 1710066600000LL;
    struct tg_counters *c = tg_counters_new();
    for (unsigned i = 0; i < n; i++) {
        uint64_t h1, h2;
        double now;
        key_hash(i % 2 ? "minute" : "hour", i, &h1, &h2);
        tg_window_add(c, h1, h2, t0, i % 2 ? 60000 : 3600000, value_of(i), 0, 0, &now);
    }
    assert_int_equal(tg_counters_count(c), n);
    /* Nothing has expired yet. */
    tg_counters_sweep(c, t0 + 59999, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), n);
    tg_counters_sweep(c, t0 + 60000, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), n / 2);
    for (unsigned i = 0; i < n; i++) {
        uint64_t h1, h2;
        key_hash(i % 2 ? "minute" : "hour", i, &h1, &h2);
        double v = tg_window_get(c, h1, h2, t0);
        double want = i % 2 ? 0 : value_of(i);
        if (v != want)
            fail_msg("%s counter %u: %g after the sweep, expected %g", i % 2 ? "minute" : "hour", i, v, want);
    }
    /* Full buckets are dropped too; one not yet refilled stays. */
    uint64_t a1, a2, b1, b2, retry;
    double left;
    key_hash("bucket", 1, &a1, &a2);
    key_hash("bucket", 2, &b1, &b2);
    tg_bucket_take(c, a1, a2, 10, 60000, 1, t0, &left, &retry);  /* full again at t0 + 6000 */
    tg_bucket_take(c, b1, b2, 10, 60000, 10, t0, &left, &retry); /* full at t0 + 60000 */
    tg_counters_sweep(c, t0 + 7000, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), n / 2 + 1);
    /* The emptied bucket still holds its (partial) refill. */
    assert_int_equal(tg_bucket_take(c, b1, b2, 10, 60000, 2, t0 + 7000, &left, &retry), 0);
    assert_int_equal(tg_bucket_take(c, b1, b2, 10, 60000, 1, t0 + 7000, &left, &retry), 1);
    tg_counters_sweep(c, t0 + 3600000, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), 0);
    tg_counters_free(c);
}

/* An entry's life is kept from its stamp, in milliseconds up to 2^31 and in seconds (rounded up)
 * beyond: a year-long window is never swept before it ends, at most a second after. A failed take
 * moves a bucket's stamp to now and keeps the moment it is full again. */
static void long_lives_and_failed_takes(void **state)
{
    const int64_t t0 = 1710066600000LL;
    const int64_t year = 31536000000LL, odd = 2147483648LL + 1500; /* 2^31 ms and a half second */
    struct tg_counters *c = tg_counters_new();
    uint64_t y1, y2, o1, o2, b1, b2, retry;
    double now, left;
    key_hash("year", 0, &y1, &y2);
    key_hash("odd", 0, &o1, &o2);
    assert_int_equal(tg_window_add(c, y1, y2, t0, year, 5, 0, 0, &now), 1);
    assert_int_equal(tg_window_add(c, o1, o2, t0, odd, 7, 0, 0, &now), 1);
    tg_counters_sweep(c, t0 + odd - 1, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), 2);
    assert_true(tg_window_get(c, o1, o2, t0) == 7);
    tg_counters_sweep(c, t0 + odd + 1000, SIZE_MAX); /* rounded up to a whole second: gone by now */
    assert_int_equal(tg_counters_count(c), 1);
    tg_counters_sweep(c, t0 + year - 1, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), 1);
    assert_true(tg_window_get(c, y1, y2, t0) == 5);
    tg_counters_sweep(c, t0 + year, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), 0);

    /* 10 tokens a minute, all taken at t0: full again at t0 + 60000. Failed takes at t0 + 30000
     * and t0 + 50000 move the stamp, not that moment. */
    key_hash("bucket", 9, &b1, &b2);
    assert_int_equal(tg_bucket_take(c, b1, b2, 10, 60000, 10, t0, &left, &retry), 1);
    assert_int_equal(tg_bucket_take(c, b1, b2, 10, 60000, 6, t0 + 30000, &left, &retry), 0);
    assert_int_equal(tg_bucket_take(c, b1, b2, 10, 60000, 9, t0 + 50000, &left, &retry), 0);
    tg_counters_sweep(c, t0 + 59999, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), 1);
    tg_counters_sweep(c, t0 + 60001, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), 0);
    tg_counters_free(c);
}

/* A sweep with a small budget scans a slice of the table; repeated, it covers all of it. */
static void sweep_in_slices(void **state)
{
    const unsigned n = 20000;
    const int64_t t0 = 1710066600000LL;
    struct tg_counters *c = tg_counters_new();
    for (unsigned i = 0; i < n; i++) {
        uint64_t h1, h2;
        double now;
        key_hash("w", i, &h1, &h2);
        tg_window_add(c, h1, h2, t0, i % 3 ? 60000 : 86400000, 1, 0, 0, &now);
    }
    size_t before = tg_counters_count(c);
    tg_counters_sweep(c, t0 + 60000, 100);
    assert_true(tg_counters_count(c) < before);
    assert_true(tg_counters_count(c) > before - 100);
    for (int k = 0; k < 2000; k++)
        tg_counters_sweep(c, t0 + 60000, 100);
    size_t keep = (n + 2) / 3;
    assert_int_equal(tg_counters_count(c), keep);
    for (unsigned i = 0; i < n; i += 3) {
        uint64_t h1, h2;
        key_hash("w", i, &h1, &h2);
        assert_true(tg_window_get(c, h1, h2, t0) == 1);
    }
    /* A sweep of an empty store, and a zero budget, do nothing. */
    tg_counters_sweep(c, t0 + 60000, 0);
    assert_int_equal(tg_counters_count(c), keep);
    tg_counters_free(c);
    c = tg_counters_new();
    tg_counters_sweep(c, t0, SIZE_MAX);
    assert_int_equal(tg_counters_count(c), 0);
    tg_counters_free(c);
}

/* Keys whose first hash lands on the last slots of the table: one probe chain that wraps to slot 0
 * and beyond. Deleting from the middle of it (backward shift across the wrap) must keep every
 * remaining entry reachable. The table starts with 1024 slots; 300 entries stay below half. */
static void sweep_across_the_wrap(void **state)
{
    const int64_t t0 = 1710066600000LL;
    for (int pattern = 0; pattern < 4; pattern++) {
        struct tg_counters *c = tg_counters_new();
        const int n = 300;
        for (int i = 0; i < n; i++) {
            /* homes 1020..1023 (and a few at 0..3; the home is h1 >> 1), distinct h2 */
            uint64_t h1 = ((uint64_t)(i + 1) << 32) | (uint64_t)(i % 8 < 4 ? 1020 + i % 4 : i % 4) << 1 | 1;
            uint64_t h2 = (uint64_t)i * 0x9e3779b97f4a7c15ULL;
            double now;
            int expires = pattern == 0 ? i % 2 : pattern == 1 ? i < 150 : pattern == 2 ? i >= 150 : i % 5 == 0;
            tg_window_add(c, h1, h2, t0, expires ? 60000 : 3600000, (double)i + 1, 0, 0, &now);
        }
        assert_int_equal(tg_counters_count(c), n);
        tg_counters_sweep(c, t0 + 60000, SIZE_MAX);
        int kept = 0;
        for (int i = 0; i < n; i++) {
            uint64_t h1 = ((uint64_t)(i + 1) << 32) | (uint64_t)(i % 8 < 4 ? 1020 + i % 4 : i % 4) << 1 | 1;
            uint64_t h2 = (uint64_t)i * 0x9e3779b97f4a7c15ULL;
            int expires = pattern == 0 ? i % 2 : pattern == 1 ? i < 150 : pattern == 2 ? i >= 150 : i % 5 == 0;
            double v = tg_window_get(c, h1, h2, t0);
            if (v != (expires ? 0 : (double)i + 1))
                fail_msg("pattern %d entry %d: %g, expected %g", pattern, i, v, expires ? 0.0 : (double)i + 1);
            kept += !expires;
        }
        assert_int_equal(tg_counters_count(c), kept);
        tg_counters_free(c);
    }
}

static void window_add_get_sub(void **state)
{
    struct tg_counters *c = tg_counters_new();
    uint64_t h1, h2;
    double now;
    key_hash("k", 1, &h1, &h2);
    const int64_t w0 = 1710066600000LL, w1 = w0 + 60000;
    assert_int_equal(tg_window_add(c, h1, h2, w0, 60000, 3, 5, 1, &now), 1);
    assert_true(now == 3);
    assert_int_equal(tg_window_add(c, h1, h2, w0, 60000, 3, 5, 1, &now), 0); /* 6 > 5 */
    assert_true(now == 3);
    assert_int_equal(tg_window_add(c, h1, h2, w0, 60000, 2, 5, 1, &now), 1); /* 5 <= 5 */
    assert_true(tg_window_get(c, h1, h2, w0) == 5);
    /* A new window starts from zero; the old one is not readable any more. */
    assert_true(tg_window_get(c, h1, h2, w1) == 0);
    assert_int_equal(tg_window_add(c, h1, h2, w1, 60000, 1, 5, 1, &now), 1);
    assert_true(now == 1);
    assert_true(tg_window_get(c, h1, h2, w0) == 0);
    /* Subtracting from the past window does nothing; from the current one, down to zero at most. */
    tg_window_sub(c, h1, h2, w0, 1);
    assert_true(tg_window_get(c, h1, h2, w1) == 1);
    tg_window_sub(c, h1, h2, w1, 5);
    assert_true(tg_window_get(c, h1, h2, w1) == 0);
    /* Without a limit anything goes. */
    assert_int_equal(tg_window_add(c, h1, h2, w1, 60000, 1e9, 0, 0, &now), 1);
    /* ... but a sum past a double's range: the counter never holds inf (nor an audit line). */
    assert_int_equal(tg_window_add(c, h1, h2, w1, 60000, 1.5e308, 0, 0, &now), 1);
    assert_int_equal(tg_window_add(c, h1, h2, w1, 60000, 1.5e308, 0, 0, &now), 0);
    assert_true(isfinite(now) && isfinite(tg_window_get(c, h1, h2, w1)));
    assert_int_equal(tg_counters_count(c), 1);
    tg_counters_free(c);
}

static void bucket_take_give(void **state)
{
    struct tg_counters *c = tg_counters_new();
    uint64_t h1, h2, retry;
    double left;
    key_hash("k", 2, &h1, &h2);
    const int64_t t0 = 1710066600000LL;
    const int64_t per = 1000; /* 2 a second */
    assert_int_equal(tg_bucket_take(c, h1, h2, 2, per, 1, t0, &left, &retry), 1);
    assert_int_equal(tg_bucket_take(c, h1, h2, 2, per, 1, t0, &left, &retry), 1);
    assert_int_equal(tg_bucket_take(c, h1, h2, 2, per, 1, t0, &left, &retry), 0);
    assert_int_equal(retry, 500); /* the first millisecond at which a token is back */
    assert_int_equal(tg_bucket_take(c, h1, h2, 2, per, 1, t0 + (int64_t)retry, &left, &retry), 1);
    tg_bucket_give(c, h1, h2, 2, 1);
    tg_bucket_give(c, h1, h2, 2, 5); /* capped at capacity */
    assert_int_equal(tg_bucket_take(c, h1, h2, 2, per, 2, t0 + 501, &left, &retry), 1);
    assert_int_equal(tg_bucket_take(c, h1, h2, 2, per, 1, t0 + 501, &left, &retry), 0);
    /* A bucket that does not exist yet is full; giving to it does not create it. */
    uint64_t g1, g2;
    key_hash("k", 3, &g1, &g2);
    tg_bucket_give(c, g1, g2, 2, 1);
    assert_int_equal(tg_counters_count(c), 1);
    /* A refused take on a new key does not create an entry either. */
    assert_int_equal(tg_bucket_take(c, g1, g2, 2, per, 3, t0, &left, &retry), 0);
    assert_int_equal(tg_counters_count(c), 1);
    /* Time going backwards does not mint tokens. */
    assert_int_equal(tg_bucket_take(c, h1, h2, 2, per, 1, t0, &left, &retry), 0);
    tg_counters_free(c);
}

static void hash_never_zero_and_distinct(void **state)
{
    uint64_t a1, a2, b1, b2;
    tg_counters_hash("", 0, &a1, &a2);
    assert_true(a1 != 0);
    tg_counters_hash("a\x1f" "bc", 4, &a1, &a2);
    tg_counters_hash("ab\x1f" "c", 4, &b1, &b2);
    assert_true(a1 != b1 || a2 != b2);
    tg_counters_hash("grant", 5, &a1, &a2);
    tg_counters_hash("Grant", 5, &b1, &b2);
    assert_true(a1 != b1 || a2 != b2);
}

static void keyhash_of(const char *const *part, const size_t *len, int n, uint64_t *h1, uint64_t *h2)
{
    struct tg_keyhash h;
    tg_keyhash_begin(&h);
    for (int i = 0; i < n; i++)
        tg_keyhash_part(&h, part[i], len[i]);
    tg_keyhash_end(&h, h1, h2);
}

struct pair {
    uint64_t h1, h2;
};
static int pair_cmp(const void *a, const void *b)
{
    const struct pair *x = a, *y = b;
    if (x->h1 != y->h1)
        return x->h1 < y->h1 ? -1 : 1;
    return x->h2 < y->h2 ? -1 : x->h2 > y->h2;
}

/* Private keys (tg_keyhash): parts are told apart by their lengths, every byte of a tail counts,
 * h1 is never 0, and a million keys shaped like the gateway's (upstream, counter, scope, an
 * identity that differs in a digit or two) neither collide nor crowd the table's slots. */
static void keyhash_parts_bytes_and_spread(void **state)
{
    uint64_t a1, a2, b1, b2;
    const char *pa[2] = {"ab", "c"}, *pb[2] = {"a", "bc"};
    size_t la[2] = {2, 1}, lb[2] = {1, 2};
    keyhash_of(pa, la, 2, &a1, &a2);
    keyhash_of(pb, lb, 2, &b1, &b2);
    assert_true(a1 != b1 && a2 != b2);
    const char *pe[2] = {"", ""};
    size_t le[2] = {0, 0};
    keyhash_of(pe, le, 1, &a1, &a2);
    keyhash_of(pe, le, 2, &b1, &b2);
    assert_true(a1 != 0 && b1 != 0 && (a1 != b1 || a2 != b2));
    /* each length from 0 to 40, and each byte of each: one bit flipped gives another key */
    char buf[41];
    for (int n = 0; n <= 40; n++) {
        for (int i = 0; i < n; i++)
            buf[i] = (char)('a' + (i * 7) % 26);
        const char *p1[1] = {buf};
        size_t l1[1] = {(size_t)n};
        keyhash_of(p1, l1, 1, &a1, &a2);
        assert_true(a1 != 0);
        for (int i = 0; i < n; i++) {
            buf[i] ^= 1;
            keyhash_of(p1, l1, 1, &b1, &b2);
            buf[i] ^= 1;
            if (a1 == b1 || a2 == b2)
                fail_msg("length %d: flipping byte %d kept a hash", n, i);
        }
    }
    enum { N = 1000000, SLOTS = 1 << 16 };
    struct pair *v = malloc(N * sizeof(*v));
    unsigned *fill = calloc(SLOTS, sizeof(*fill));
    assert_non_null(v);
    assert_non_null(fill);
    for (int i = 0; i < N; i++) {
        char id[32];
        int n = snprintf(id, sizeof(id), "grant-%07d", i);
        const char *part[4] = {"cowork", i % 3 ? "L:execute_code_rate" : "S:_global.calls", "g", id};
        size_t len[4] = {6, strlen(part[1]), 1, (size_t)n};
        keyhash_of(part, len, 4, &v[i].h1, &v[i].h2);
        assert_true(v[i].h1 != 0);
        fill[(v[i].h1 >> 1) & (SLOTS - 1)]++; /* the local store's home slot (bit 0 is always set) */
    }
    qsort(v, N, sizeof(*v), pair_cmp);
    for (int i = 1; i < N; i++)
        if (v[i].h1 == v[i - 1].h1)
            fail_msg("two keys share h1 %016llx", (unsigned long long)v[i].h1);
    /* about 15.3 keys per slot: a fair spread puts no slot far past that (Poisson: above 45 is
     * a chance of about 2e-10 per slot), and leaves few empty (about 15) */
    unsigned empty = 0;
    for (int i = 0; i < SLOTS; i++)
        empty += fill[i] == 0;
    if (empty > 100)
        fail_msg("%u of %d slots are no key's home", empty, SLOTS);
    unsigned most = 0;
    for (int i = 0; i < SLOTS; i++)
        most = fill[i] > most ? fill[i] : most;
    if (most > 45)
        fail_msg("a slot of %d holds %u keys of %d", SLOTS, most, N);
    free(v);
    free(fill);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(million_live_buckets),
        cmocka_unit_test(sweep_removes_expired_and_keeps_live),
        cmocka_unit_test(sweep_in_slices),
        cmocka_unit_test(sweep_across_the_wrap),
        cmocka_unit_test(long_lives_and_failed_takes),
        cmocka_unit_test(window_add_get_sub),
        cmocka_unit_test(bucket_take_give),
        cmocka_unit_test(hash_never_zero_and_distinct),
        cmocka_unit_test(keyhash_parts_bytes_and_spread),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
