/* policy/history.c and the history of the counter stores (policy/counters.h): rings keep the
 * newest calls in order, forget the oldest and say since when they are complete; a ring dropped
 * to stay within the bytes answers "forgotten before T", not "nothing happened"; a plan answers
 * a history it has not asked yet as empty, then with the real one, and adds only in its final
 * pass. */
#include "test/unit/unit.h"

#include "core/base/buf.h"
#include "policy/counters.h"
#include "policy/history.h"

static struct tg_hist_entry entry(int64_t at, const char *name)
{
    struct tg_hist_entry e;
    memset(&e, 0, sizeof(e));
    e.at_ms = at;
    e.call = (uint64_t)at * 31u + 7u;
    snprintf(e.name, sizeof(e.name), "%s", name);
    return e;
}

static void ring_keeps_newest_in_order(void **state)
{
    (void)state;
    struct tg_history *h = tg_history_new(5, 1 << 20);
    struct tg_hist_view v;
    tg_history_get(h, 1, 2, &v);
    assert_int_equal(tg_hist_view_len(&v), 0);
    assert_true(v.known_since_ms == INT64_MIN);
    for (int i = 1; i <= 12; i++) {
        struct tg_hist_entry e = entry(1000 * i, "t");
        tg_history_add(h, 1, 2, &e);
        tg_history_get(h, 1, 2, &v);
        size_t want = i < 5 ? (size_t)i : 5;
        assert_int_equal(tg_hist_view_len(&v), want);
        for (size_t k = 0; k < want; k++) /* newest first: i, i-1, ... */
            assert_int_equal(tg_hist_view_newest(&v, k)->at_ms, 1000 * (i - (int)k));
        if (i <= 5)
            assert_true(v.known_since_ms == INT64_MIN);
        else /* the newest forgotten entry is i-5: complete from just after it */
            assert_int_equal(v.known_since_ms, 1000 * (i - 5) + 1);
    }
    /* another key is apart */
    tg_history_get(h, 1, 3, &v);
    assert_int_equal(tg_hist_view_len(&v), 0);
    assert_int_equal(tg_history_keys(h), 1);
    assert_int_equal(tg_history_forgotten(h), 7);
    /* a smaller ring on reload keeps the newest */
    tg_history_limits(h, 2, 1 << 20);
    tg_history_get(h, 1, 2, &v);
    assert_int_equal(tg_hist_view_len(&v), 2);
    assert_int_equal(tg_hist_view_newest(&v, 0)->at_ms, 12000);
    assert_int_equal(v.known_since_ms, 10001);
    tg_history_free(h);
}

static void bytes_bound_drops_least_recently_used(void **state)
{
    (void)state;
    size_t ring = 4 * sizeof(struct tg_hist_entry) + 256;
    struct tg_history *h = tg_history_new(4, 0);
    size_t base = tg_history_memory(h);
    tg_history_limits(h, 4, base + 3 * ring);
    for (uint64_t k = 1; k <= 3; k++) {
        struct tg_hist_entry e = entry(5000 + (int64_t)k, "t");
        tg_history_add(h, k, k, &e);
    }
    assert_int_equal(tg_history_keys(h), 3);
    struct tg_hist_view v;
    tg_history_get(h, 1, 1, &v); /* key 1 used: key 2 is now the least recently used */
    for (uint64_t k = 4; k <= 6; k++) {
        struct tg_hist_entry e = entry(6000 + (int64_t)k, "t");
        tg_history_add(h, k, k, &e);
    }
    assert_true(tg_history_memory(h) <= base + 3 * ring + 64);
    assert_true(tg_history_evicted(h) >= 1);
    tg_history_get(h, 2, 2, &v);
    assert_int_equal(tg_hist_view_len(&v), 0);
    assert_int_equal(v.known_since_ms, 5003); /* key 2's newest call was at 5002 */
    tg_history_get(h, 6, 6, &v);
    assert_int_equal(tg_hist_view_len(&v), 1);
    tg_history_free(h);
}

static void sweep_drops_day_old_rings(void **state)
{
    (void)state;
    struct tg_history *h = tg_history_new(8, 1 << 20);
    struct tg_hist_entry e = entry(1000, "old"), f = entry(TG_HIST_MAX_AGE_MS, "new");
    tg_history_add(h, 1, 1, &e);
    tg_history_add(h, 2, 2, &f);
    tg_history_sweep(h, TG_HIST_MAX_AGE_MS + 1001, 1 << 20);
    assert_int_equal(tg_history_keys(h), 1);
    struct tg_hist_view v;
    tg_history_get(h, 2, 2, &v);
    assert_int_equal(tg_hist_view_len(&v), 1);
    assert_string_equal(tg_hist_view_newest(&v, 0)->name, "new");
    tg_history_free(h);
}

/* The local counter store keeps a history; a plan over it asks once and adds in its final pass. */
static void stores_and_plans(void **state)
{
    (void)state;
    struct tg_counters *c = tg_counters_new();
    tg_counters_history_limits(c, 3, 1 << 20);
    struct tg_hist_entry e = entry(100, "read_env");
    tg_hist_add(c, 9, 9, &e);
    struct tg_hist_view v;
    tg_hist_get(c, 9, 9, &v);
    assert_int_equal(tg_hist_view_len(&v), 1);
    assert_int_equal(tg_counters_history_keys(c), 1);
    assert_true(tg_counters_history_memory(c) > 0);

    struct tg_counter_plan p;
    tg_plan_init(&p);
    tg_plan_begin(&p);
    tg_hist_get(&p.base, 9, 9, &v); /* not asked yet: empty */
    assert_int_equal(tg_hist_view_len(&v), 0);
    struct tg_hist_entry g = entry(200, "post");
    tg_hist_add(&p.base, 9, 9, &g);
    size_t from, n = tg_plan_end(&p, &from);
    assert_int_equal(n, 1);
    assert_int_equal(p.ops[from].kind, TG_COP_HIST_GET);
    tg_counter_op_apply(c, &p.ops[from]); /* the "remote" answers */
    tg_plan_answered(&p);
    tg_plan_begin(&p);
    tg_hist_get(&p.base, 9, 9, &v);
    assert_int_equal(tg_hist_view_len(&v), 1);
    assert_string_equal(tg_hist_view_newest(&v, 0)->name, "read_env");
    tg_hist_add(&p.base, 9, 9, &g);
    n = tg_plan_end(&p, &from);
    assert_int_equal(n, 0);
    assert_int_equal(p.neffects, 1); /* the first pass's add was dropped with its pass */
    assert_int_equal(p.effects[0].kind, TG_COP_HIST_ADD);
    tg_counter_op_apply(c, &p.effects[0]);
    tg_plan_dispose(&p);
    tg_hist_get(c, 9, 9, &v);
    assert_int_equal(tg_hist_view_len(&v), 2);
    assert_string_equal(tg_hist_view_newest(&v, 0)->name, "post");
    tg_counters_free(c);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ring_keeps_newest_in_order),
        cmocka_unit_test(bytes_bound_drops_least_recently_used),
        cmocka_unit_test(sweep_drops_day_old_rings),
        cmocka_unit_test(stores_and_plans),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
