/* Histories in Redis (cluster/redis/history.c) against a redis-server of the test's own:
 *   - an entry's form: every field round-trips; anything that is not exactly an entry is refused;
 *   - add then get: the entries, oldest first; the list trimmed to limits.history_calls answers
 *     the same view and known_since_ms as the local ring after the same adds (and a member with a
 *     longer limit still learns what was forgotten); the key expires a day after its newest call;
 *   - poison (a foreign element, a key of another type, an element too long): TG_REDIS_EVALUE;
 *   - a plan that reads a history and takes a counter, run against Redis: one round trip. */
#include <stdarg.h>

#include "test/unit/unit.h"
#include "test/unit/cluster/redis_helpers.h"

#include "cluster/redis/redis.h"
#include "cluster/redis/scripts.h"
#include "core/base/siphash.h"
#include "policy/counters.h"
#include "policy/history.h"

static struct th_server srv;
static uv_loop_t *loop;
static uint8_t K[16]; /* what a cluster derives from its secret */

static struct tg_redis_hist hist(struct tg_counter_plan *plan, size_t calls)
{
    struct tg_redis_hist h = {plan, calls, {0}};
    memcpy(h.key, K, sizeof(K));
    return h;
}

/* The mac history.c describes, written again from its description: SipHash-2-4 of h1, h2 (big
 * endian) and the element before its last 8 bytes, the head's trim bit cleared. */
static void resign(unsigned char *p, size_t n, uint64_t h1, uint64_t h2, const uint8_t key[16])
{
    unsigned char b[16 + 4096];
    for (int i = 0; i < 8; i++) {
        b[i] = (unsigned char)(h1 >> (56 - 8 * i));
        b[8 + i] = (unsigned char)(h2 >> (56 - 8 * i));
    }
    memcpy(b + 16, p, n - 8);
    b[16] &= 0x7f;
    uint64_t m = tg_siphash(key, b, 16 + n - 8);
    for (int i = 0; i < 8; i++)
        p[n - 8 + i] = (unsigned char)(m >> (56 - 8 * i));
}

static void on_state(void *ud, int up, const char *why) { (void)ud, (void)up, (void)why; }

struct answer {
    int done, status;
};

static void on_ops(void *ud, int status)
{
    struct answer *a = ud;
    a->done = 1;
    a->status = status;
}

static struct tg_redis *client(void)
{
    char addr[64], why[128];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
    struct tg_redis_opts o = {.address = addr, .timeout_ms = 3000, .backoff_ms = 50, .backoff_max_ms = 400};
    struct tg_redis *r = tg_redis_new(loop, &o, on_state, NULL, why, sizeof(why));
    assert_non_null(r);
    for (uint64_t t = th_ms(); th_ms() - t < 10000 && !tg_redis_up(r);) {
        int never = 0;
        th_run_until(loop, &never, 10);
    }
    assert_true(tg_redis_up(r));
    return r;
}

static void finish(struct tg_redis *r)
{
    tg_redis_free(r);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
}

/* A synchronous connection for looking at and poisoning keys behind the client's back. */
static redisReply *cmd(const char *fmt, ...)
{
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    assert_true(c != NULL && !c->err);
    va_list ap;
    va_start(ap, fmt);
    redisReply *y = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    assert_non_null(y);
    return y;
}

static long long cmd_int(const char *fmt, const char *key)
{
    redisReply *y = cmd(fmt, key);
    assert_int_equal(y->type, REDIS_REPLY_INTEGER);
    long long v = y->integer;
    freeReplyObject(y);
    return v;
}

static struct tg_hist_entry entry(int64_t at, int variant)
{
    struct tg_hist_entry e;
    memset(&e, 0, sizeof(e));
    e.at_ms = at;
    e.call = (uint64_t)at * 0x9e3779b97f4a7c15ULL + 1;
    e.session = variant & 1 ? 0 : 0x1234567890abcdefULL;
    e.kind = (uint8_t)(variant % 3);
    e.ntags = (uint8_t)(variant % (TG_HIST_TAGS + 1));
    for (int k = 0; k < e.ntags; k++)
        e.tags[k] = tg_hist_tag_hash("tag", 3) + (uint64_t)k;
    for (int k = 0; k < TG_HIST_VALS; k++)
        e.vals[k] = (variant >> k) & 1 ? 0xfedcba9876543210ULL + (uint64_t)k : 0;
    snprintf(e.upstream, sizeof(e.upstream), "up-%d", variant);
    snprintf(e.name, sizeof(e.name), "tool_%d_%lld", variant, (long long)at);
    return e;
}

static void assert_same_entry(const struct tg_hist_entry *a, const struct tg_hist_entry *b)
{
    assert_int_equal(a->at_ms, b->at_ms);
    assert_true(a->call == b->call);
    assert_true(a->session == b->session);
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->ntags, b->ntags);
    assert_int_equal(a->truncated, b->truncated);
    for (int k = 0; k < TG_HIST_VALS; k++)
        assert_true(a->vals[k] == b->vals[k]);
    for (int k = 0; k < a->ntags; k++)
        assert_true(a->tags[k] == b->tags[k]);
    assert_string_equal(a->upstream, b->upstream);
    assert_string_equal(a->name, b->name);
}

/* ---- the form of an entry ----------------------------------------------------------------- */

static void entry_form(void **state)
{
    (void)state;
    unsigned char b[TG__REDIS_HIST_MAXLEN + 8];
    struct tg_hist_entry d;
    int trimmed;
    for (int v = 0; v < 40; v++) {
        struct tg_hist_entry e = entry(1700000000000LL + v, v);
        size_t n = tg__redis_hist_encode(&e, 1, 2, K, b);
        assert_int_equal(tg__redis_hist_decode(b, n, 1, 2, K, &d, &trimmed), 0);
        assert_int_equal(trimmed, 0);
        assert_same_entry(&d, &e);
        resign(b, n, 1, 2, K); /* the mac is the one described */
        assert_int_equal(tg__redis_hist_decode(b, n, 1, 2, K, &d, &trimmed), 0);
    }
    /* the longest entry: every value, every tag, both names at their longest */
    struct tg_hist_entry e = entry(5, 15);
    e.ntags = TG_HIST_TAGS;
    for (int k = 0; k < TG_HIST_TAGS; k++)
        e.tags[k] = 100 + (uint64_t)k;
    memset(e.upstream, 'u', TG_HIST_UPSTREAM);
    e.upstream[TG_HIST_UPSTREAM] = 0;
    memset(e.name, 'n', TG_HIST_NAME);
    e.name[TG_HIST_NAME] = 0;
    e.truncated = 1;
    size_t n = tg__redis_hist_encode(&e, 1, 2, K, b);
    assert_int_equal(n, TG__REDIS_HIST_MAXLEN);
    assert_int_equal(tg__redis_hist_decode(b, n, 1, 2, K, &d, &trimmed), 0);
    assert_same_entry(&d, &e);

    struct tg_hist_entry small = entry(1000, 3); /* kind 0, 3 tags, vals 0 and 1 */
    unsigned char good[TG__REDIS_HIST_MAXLEN];
    size_t gn = tg__redis_hist_encode(&small, 1, 2, K, good);
    assert_int_equal(tg__redis_hist_decode(good, gn, 1, 2, K, &d, &trimmed), 0);
    good[0] |= 0x80;
    assert_int_equal(tg__redis_hist_decode(good, gn, 1, 2, K, &d, &trimmed), 0); /* marked by a trim */
    assert_int_equal(trimmed, 1);
    good[0] = 0x01;
    /* the mac: another list's key, another secret, any byte changed */
    uint8_t other[16];
    memcpy(other, K, sizeof(other));
    other[3] ^= 1;
    assert_int_equal(tg__redis_hist_decode(good, gn, 1, 3, K, &d, &trimmed), -1);
    assert_int_equal(tg__redis_hist_decode(good, gn, 2, 2, K, &d, &trimmed), -1);
    assert_int_equal(tg__redis_hist_decode(good, gn, 1, 2, other, &d, &trimmed), -1);
    for (size_t i = 0; i < gn; i++) {
        unsigned char c[TG__REDIS_HIST_MAXLEN];
        memcpy(c, good, gn);
        c[i] ^= i == 0 ? 0x02 : 0x01;
        if (tg__redis_hist_decode(c, gn, 1, 2, K, &d, &trimmed) != -1)
            fail_msg("byte %zu changed: accepted", i);
    }

    /* Each of these is not an entry, even signed (the test signs each under the right key). A
     * wrong length: */
    static const long dlen[] = {-1, 1, -8, 8};
    for (size_t i = 0; i < sizeof(dlen) / sizeof(dlen[0]); i++) {
        unsigned char c[TG__REDIS_HIST_MAXLEN + 8];
        memcpy(c, good, gn);
        memset(c + gn, 'x', 8);
        size_t cn = (size_t)((long)gn + dlen[i]);
        resign(c, cn, 1, 2, K);
        if (tg__redis_hist_decode(c, cn, 1, 2, K, &d, &trimmed) != -1)
            fail_msg("accepted: %ld bytes more", dlen[i]);
    }
    for (size_t cn = 0; cn < 38; cn++) { /* shorter than any entry */
        unsigned char c[64];
        memcpy(c, good, cn);
        if (cn >= 8)
            resign(c, cn, 1, 2, K);
        assert_int_equal(tg__redis_hist_decode(c, cn, 1, 2, K, &d, &trimmed), -1);
    }
    /* Fields out of range in an element whose length agrees with them: */
    struct {
        const char *what;
        unsigned head, kind, flags, ntags, ulen, nlen;
        int poke; /* 1: a NUL in the upstream, 2: in the name, 3: a tag of 0, 4: a value of 0, 5: time < 0 */
    } bad[] = {
        {"version 0", 0x00, 0, 0, 0, 1, 1, 0},
        {"version 2", 0x02, 0, 0, 0, 1, 1, 0},
        {"marked version 2", 0x82, 0, 0, 0, 1, 1, 0},
        {"version 0x7f", 0x7f, 0, 0, 0, 1, 1, 0},
        {"kind 3", 0x01, 3, 0, 0, 1, 1, 0},
        {"kind 255", 0x01, 255, 0, 0, 1, 1, 0},
        {"flag bit 1", 0x01, 0, 0x02, 0, 1, 1, 0},
        {"flag bit 3", 0x01, 0, 0x08, 0, 1, 1, 0},
        {"9 tags", 0x01, 0, 0, TG_HIST_TAGS + 1, 1, 1, 0},
        {"255 tags", 0x01, 0, 0, 255, 1, 1, 0},
        {"upstream too long", 0x01, 0, 0, 0, TG_HIST_UPSTREAM + 1, 1, 0},
        {"name too long (unterminated)", 0x01, 0, 0, 0, 1, TG_HIST_NAME + 1, 0},
        {"a NUL inside the upstream", 0x01, 0, 0, 0, 3, 3, 1},
        {"a NUL inside the name", 0x01, 0, 0, 0, 3, 3, 2},
        {"a tag hash of 0", 0x01, 0, 0, 2, 1, 1, 3},
        {"a present value of 0", 0x01, 0, 0x30, 0, 1, 1, 4},
        {"a negative time", 0x01, 0, 0, 0, 1, 1, 5},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        unsigned char c[4096];
        memset(c, 'a', sizeof(c));
        memset(c, 0, 30);
        c[0] = (unsigned char)bad[i].head;
        c[1] = (unsigned char)bad[i].kind;
        c[2] = (unsigned char)bad[i].flags;
        c[3] = (unsigned char)bad[i].ntags;
        c[4] = (unsigned char)bad[i].ulen;
        c[5] = (unsigned char)bad[i].nlen;
        c[6] = bad[i].poke == 5 ? 0x80 : 0x01;
        size_t nv = (bad[i].flags >> 4 & 1) + (bad[i].flags >> 5 & 1) + (bad[i].flags >> 6 & 1) + (bad[i].flags >> 7 & 1);
        size_t at = 30 + 8 * nv + 8 * bad[i].ntags; /* the upstream */
        if (bad[i].poke == 1)
            c[at + 1] = 0;
        if (bad[i].poke == 2)
            c[at + bad[i].ulen + 1] = 0;
        if (bad[i].poke == 3)
            memset(c + 30 + 8 * nv + 8, 0, 8);
        if (bad[i].poke == 4)
            memset(c + 30 + 8, 0, 8);
        size_t cn = at + bad[i].ulen + bad[i].nlen + 8;
        resign(c, cn, 1, 2, K);
        if (tg__redis_hist_decode(c, cn, 1, 2, K, &d, &trimmed) != -1)
            fail_msg("accepted: %s", bad[i].what);
        /* the same element with the field set right passes: the test finds the check it names */
        c[0] = 0x01, c[1] = 0, c[2] &= 0xf0, c[6] = 0x01;
        if (bad[i].ntags > TG_HIST_TAGS || bad[i].ulen > TG_HIST_UPSTREAM || bad[i].nlen > TG_HIST_NAME)
            continue;
        memset(c + at, 'a', bad[i].ulen + bad[i].nlen);
        memset(c + 30, 'v', 8 * (nv + bad[i].ntags));
        resign(c, cn, 1, 2, K);
        if (tg__redis_hist_decode(c, cn, 1, 2, K, &d, &trimmed) != 0)
            fail_msg("refused when fixed: %s", bad[i].what);
    }
    /* a value that is present must not be 0 */
    memcpy(b, good, gn);
    memset(b + 30, 0, 8);
    resign(b, gn, 1, 2, K);
    assert_int_equal(tg__redis_hist_decode(b, gn, 1, 2, K, &d, &trimmed), -1);
    memcpy(b, good, gn); /* and the test's mac is the real one: the same bytes pass */
    resign(b, gn, 1, 2, K);
    assert_int_equal(tg__redis_hist_decode(b, gn, 1, 2, K, &d, &trimmed), 0);
}

/* ---- add, get, trim, expiry ---------------------------------------------------------------- */

/* Run ops on Redis with a plan to hold the answers; the batch's status. */
static int run(struct tg_redis *r, const char *prefix, struct tg_counter_op *ops, size_t n, size_t calls,
               struct tg_counter_plan *plan)
{
    struct answer a = {0};
    struct tg_redis_hist h = hist(plan, calls);
    tg_redis_counter_ops(r, prefix, ops, n, &h, on_ops, &a);
    assert_int_equal(a.done, 0);
    th_run_until(loop, &a.done, 5000);
    assert_true(a.done);
    return a.status;
}

static void add(struct tg_redis *r, const char *prefix, uint64_t h1, uint64_t h2, const struct tg_hist_entry *e,
                size_t calls)
{
    struct tg_counter_op op = {.kind = TG_COP_HIST_ADD, .h1 = h1, .h2 = h2, .entry = e};
    assert_int_equal(run(r, prefix, &op, 1, calls, NULL), TG_REDIS_OK);
}

static void get(struct tg_redis *r, const char *prefix, uint64_t h1, uint64_t h2, size_t calls,
                struct tg_counter_plan *plan, struct tg_hist_view *v)
{
    struct tg_counter_op op = {.kind = TG_COP_HIST_GET, .h1 = h1, .h2 = h2};
    assert_int_equal(run(r, prefix, &op, 1, calls, plan), TG_REDIS_OK);
    assert_int_equal(op.ok, 1);
    *v = op.view;
}

static void assert_same_view(const struct tg_hist_view *got, const struct tg_hist_view *want)
{
    assert_int_equal(tg_hist_view_len(got), tg_hist_view_len(want));
    assert_true(got->known_since_ms == want->known_since_ms);
    for (size_t i = 0; i < tg_hist_view_len(want); i++)
        assert_same_entry(tg_hist_view_newest(got, i), tg_hist_view_newest(want, i));
}

static void add_get_round_trip(void **state)
{
    (void)state;
    struct tg_redis *r = client();
    struct tg_counter_plan plan;
    tg_plan_init(&plan);
    struct tg_hist_view v;
    get(r, "tgh1:", 1, 2, 64, &plan, &v); /* never written: empty, complete */
    assert_int_equal(tg_hist_view_len(&v), 0);
    assert_true(v.known_since_ms == INT64_MIN);
    struct tg_hist_entry e[3];
    for (int i = 0; i < 3; i++) {
        e[i] = entry(1700000000000LL + i, 5 + i);
        add(r, "tgh1:", 1, 2, &e[i], 64);
    }
    get(r, "tgh1:", 1, 2, 64, &plan, &v);
    assert_int_equal(tg_hist_view_len(&v), 3);
    assert_true(v.known_since_ms == INT64_MIN);
    for (int i = 0; i < 3; i++) /* oldest first */
        assert_same_entry(&v.a[i], &e[i]);
    get(r, "tgh1:", 1, 3, 64, &plan, &v); /* another key is apart */
    assert_int_equal(tg_hist_view_len(&v), 0);
    /* The key's shape: PREFIX h: and 32 hex digits, a list. */
    redisReply *y = cmd("TYPE tgh1:h:00000000000000010000000000000002");
    assert_string_equal(y->str, "list");
    freeReplyObject(y);

    /* Fire and forget: the caller's entry and ops may go at once (the client keeps copies). */
    struct tg_counter_op *op = calloc(1, sizeof(*op));
    struct tg_hist_entry *heap = malloc(sizeof(*heap));
    *heap = entry(1700000000100LL, 9);
    struct tg_hist_entry keep = *heap;
    *op = (struct tg_counter_op){.kind = TG_COP_HIST_ADD, .h1 = 1, .h2 = 2, .entry = heap};
    struct tg_redis_hist h = hist(NULL, 64);
    tg_redis_counter_ops(r, "tgh1:", op, 1, &h, NULL, NULL);
    memset(heap, 0xee, sizeof(*heap));
    free(heap);
    free(op);
    get(r, "tgh1:", 1, 2, 64, &plan, &v); /* after the add: one connection, in order */
    assert_int_equal(tg_hist_view_len(&v), 4);
    assert_same_entry(tg_hist_view_newest(&v, 0), &keep);

    /* A history op without a bound, or an add without an entry, is never sent. */
    struct tg_counter_op g = {.kind = TG_COP_HIST_GET, .h1 = 1, .h2 = 2};
    struct answer a = {0};
    tg_redis_counter_ops(r, "tgh1:", &g, 1, NULL, on_ops, &a);
    th_run_until(loop, &a.done, 5000);
    assert_int_equal(a.status, TG_REDIS_EREPLY);
    struct tg_counter_op n0 = {.kind = TG_COP_HIST_ADD, .h1 = 1, .h2 = 2};
    assert_int_equal(run(r, "tgh1:", &n0, 1, 64, NULL), TG_REDIS_EREPLY);
    assert_int_equal(cmd_int("LLEN %s", "tgh1:h:00000000000000010000000000000002"), 4);
    /* Redis lost its scripts (restart, SCRIPT FLUSH): loaded again, the ops resent once. */
    freeReplyObject(cmd("SCRIPT FLUSH"));
    struct tg_hist_entry e4 = entry(1700000000200LL, 11);
    add(r, "tgh1:", 1, 2, &e4, 64);
    freeReplyObject(cmd("SCRIPT FLUSH"));
    get(r, "tgh1:", 1, 2, 64, &plan, &v);
    assert_int_equal(tg_hist_view_len(&v), 5);
    assert_same_entry(tg_hist_view_newest(&v, 0), &e4);
    tg_plan_dispose(&plan);
    finish(r);
}

/* The list answers what the local ring answers after the same adds, for every bound, and a
 * member whose bound is longer than the writer's still learns what was forgotten. */
static void trim_like_the_local_ring(void **state)
{
    (void)state;
    struct tg_redis *r = client();
    struct tg_counter_plan plan;
    tg_plan_init(&plan);
    static const size_t bounds[] = {1, 2, 4, 7};
    for (size_t b = 0; b < sizeof(bounds) / sizeof(bounds[0]); b++) {
        size_t calls = bounds[b];
        struct tg_history *local = tg_history_new(calls, 1 << 24);
        uint64_t h1 = 100 + b;
        for (int i = 0; i < 12; i++) {
            struct tg_hist_entry e = entry(1000 * (i + 1) + (i % 3 == 0 ? 0 : 500), i);
            tg_history_add(local, h1, 9, &e);
            add(r, "tgh2:", h1, 9, &e, calls);
            struct tg_hist_view want, got;
            tg_history_get(local, h1, 9, &want);
            get(r, "tgh2:", h1, 9, calls, &plan, &got);
            assert_same_view(&got, &want);
            /* a reader with a longer bound: the newest the writer kept, and the same since */
            struct tg_hist_view wide;
            get(r, "tgh2:", h1, 9, calls + 3, &plan, &wide);
            size_t kept = (size_t)(i + 1) < calls ? (size_t)(i + 1) : calls;
            size_t seen = tg_hist_view_len(&wide);
            if ((size_t)(i + 1) <= calls + 1) { /* nothing trimmed yet: all of them, complete */
                assert_int_equal(seen, (size_t)(i + 1) < calls + 3 ? (size_t)(i + 1) : calls + 3);
                assert_true(wide.known_since_ms == INT64_MIN || seen == calls + 3);
            } else { /* trimmed: what the writer kept, since what it forgot */
                assert_int_equal(seen, kept);
                assert_true(wide.known_since_ms == want.known_since_ms);
            }
            for (size_t k = 0; k < kept && k < seen; k++)
                assert_same_entry(tg_hist_view_newest(&wide, k), tg_hist_view_newest(&want, k));
        }
        char key[80];
        snprintf(key, sizeof(key), "tgh2:h:%016llx%016llx", (unsigned long long)h1, 9ULL);
        assert_int_equal(cmd_int("LLEN %s", key), (long long)calls + 1); /* never longer */
        tg_history_free(local);
    }
    tg_plan_dispose(&plan);
    finish(r);
}

static void expires_a_day_after_the_newest(void **state)
{
    (void)state;
    struct tg_redis *r = client();
    const char *key = "tgh3:h:00000000000000050000000000000006";
    struct tg_hist_entry e = entry(1700000000000LL, 1);
    add(r, "tgh3:", 5, 6, &e, 64);
    long long ttl = cmd_int("PTTL %s", key);
    assert_true(ttl > TG_HIST_MAX_AGE_MS - 60000 && ttl <= TG_HIST_MAX_AGE_MS);
    freeReplyObject(cmd("PEXPIRE %s 5000", key));
    e.at_ms += 1000;
    add(r, "tgh3:", 5, 6, &e, 64); /* each add moves it a day on */
    ttl = cmd_int("PTTL %s", key);
    assert_true(ttl > TG_HIST_MAX_AGE_MS - 60000 && ttl <= TG_HIST_MAX_AGE_MS);
    /* gone (what expiry does): empty and complete again, as the local store after its sweep */
    freeReplyObject(cmd("DEL %s", key));
    struct tg_counter_plan plan;
    tg_plan_init(&plan);
    struct tg_hist_view v;
    get(r, "tgh3:", 5, 6, 64, &plan, &v);
    assert_int_equal(tg_hist_view_len(&v), 0);
    assert_true(v.known_since_ms == INT64_MIN);
    tg_plan_dispose(&plan);
    finish(r);
}

/* ---- poison ----------------------------------------------------------------------------- */

static void malformed_fail_closed(void **state)
{
    (void)state;
    struct tg_redis *r = client();
    const char *key = "tgh4:h:00000000000000070000000000000008";
    struct tg_counter_plan plan;
    tg_plan_init(&plan);
    struct tg_hist_entry e = entry(1700000000000LL, 2);
    unsigned char good[TG__REDIS_HIST_MAXLEN], marked[TG__REDIS_HIST_MAXLEN];
    size_t gn = tg__redis_hist_encode(&e, 7, 8, K, good);
    memcpy(marked, good, gn);
    marked[0] |= 0x80;
    unsigned char moved[TG__REDIS_HIST_MAXLEN], forged[TG__REDIS_HIST_MAXLEN];
    uint8_t other[16];
    memset(other, 0x11, sizeof(other));
    tg__redis_hist_encode(&e, 7, 9, K, moved);
    tg__redis_hist_encode(&e, 7, 8, other, forged);
    char huge[400];
    memset(huge, 'x', sizeof(huge));
    struct {
        const char *what;
        const void *p;
        size_t n;
        int at_end; /* pushed after a good entry (1) or alone (0) */
    } poisons[] = {
        {"text", "hello", 5, 0},
        {"an empty element", "", 0, 1},
        {"a good entry cut short", good, gn - 1, 1},
        {"longer than any entry", huge, sizeof(huge), 1},
        {"a trim mark after the first", marked, gn, 1},
        {"an entry of another list", moved, gn, 1},
        {"an entry signed under another secret", forged, gn, 1},
    };
    for (size_t i = 0; i < sizeof(poisons) / sizeof(poisons[0]); i++) {
        freeReplyObject(cmd("DEL %s", key));
        if (poisons[i].at_end)
            freeReplyObject(cmd("RPUSH %s %b", key, good, gn));
        freeReplyObject(cmd("RPUSH %s %b", key, poisons[i].p, poisons[i].n));
        struct tg_counter_op op = {.kind = TG_COP_HIST_GET, .h1 = 7, .h2 = 8};
        int st = run(r, "tgh4:", &op, 1, 64, &plan);
        if (st != TG_REDIS_EVALUE)
            fail_msg("%s: status %d", poisons[i].what, st);
    }
    /* the same entry marked, first: a trim's mark, read as such */
    freeReplyObject(cmd("DEL %s", key));
    freeReplyObject(cmd("RPUSH %s %b %b", key, marked, gn, good, gn));
    struct tg_hist_view v;
    get(r, "tgh4:", 7, 8, 64, &plan, &v);
    assert_int_equal(tg_hist_view_len(&v), 1);
    assert_int_equal(v.known_since_ms, e.at_ms + 1);
    /* a key of another type: neither read nor added to */
    freeReplyObject(cmd("SET %s 1", key));
    struct tg_counter_op op = {.kind = TG_COP_HIST_GET, .h1 = 7, .h2 = 8};
    assert_int_equal(run(r, "tgh4:", &op, 1, 64, &plan), TG_REDIS_EVALUE);
    struct tg_counter_op ad = {.kind = TG_COP_HIST_ADD, .h1 = 7, .h2 = 8, .entry = &e};
    assert_int_equal(run(r, "tgh4:", &ad, 1, 64, NULL), TG_REDIS_EVALUE);
    /* a poisoned history in a batch fails the batch, counter ops and all */
    freeReplyObject(cmd("DEL %s", key));
    freeReplyObject(cmd("RPUSH %s junk", key));
    struct tg_counter_op two[2] = {
        {.kind = TG_COP_BUCKET_TAKE, .h1 = 7, .h2 = 8, .capacity = 5, .window_ms = 1000, .amount = 1,
         .now_ms = 1700000000000LL},
        {.kind = TG_COP_HIST_GET, .h1 = 7, .h2 = 8},
    };
    assert_int_equal(run(r, "tgh4:", two, 2, 64, &plan), TG_REDIS_EVALUE);
    assert_int_equal(tg_redis_stats(r)->errors[-TG_REDIS_EVALUE], 10);
    tg_plan_dispose(&plan);
    finish(r);
}

/* ---- a decision's plan against Redis ---------------------------------------------------- */

/* A decision in the shape history conditions take: read the subject's history; refuse when it
 * holds two calls or more ("at most 2"), else take a token and record the call. */
static int decide(struct tg_counters *st, int64_t now)
{
    struct tg_hist_view v;
    tg_hist_get(st, 11, 12, &v);
    if (tg_hist_view_len(&v) >= 2)
        return 0;
    double left;
    uint64_t retry;
    if (!tg_bucket_take(st, 13, 14, 10, 60000, 1, now, &left, &retry))
        return 0;
    struct tg_hist_entry e = entry(now, 4);
    tg_hist_add(st, 11, 12, &e);
    return 1;
}

/* The plan loop of cluster/cluster.c, the effects sent without waiting. Returns the verdict;
 * *rounds: round trips made for it. */
static int decide_on_redis(struct tg_redis *r, int64_t now, int *rounds)
{
    struct tg_counter_plan p;
    tg_plan_init(&p);
    int verdict;
    *rounds = 0;
    for (;;) {
        tg_plan_begin(&p);
        verdict = decide(&p.base, now);
        size_t from, n = tg_plan_end(&p, &from);
        if (n == 0)
            break;
        (*rounds)++;
        assert_int_equal(run(r, "tgh5:", p.ops + from, n, 64, &p), TG_REDIS_OK);
        tg_plan_answered(&p);
    }
    assert_int_equal(p.unsettled, 0);
    struct tg_redis_hist h = hist(NULL, 64);
    tg_redis_counter_ops(r, "tgh5:", p.effects, p.neffects, &h, NULL, NULL);
    tg_plan_dispose(&p);
    return verdict;
}

static void one_round_trip(void **state)
{
    (void)state;
    struct tg_redis *r = client();
    int64_t now = 1700000000000LL;
    int rounds;
    /* Twice allowed: the history read and the token taken in one pipelined round trip. */
    for (int i = 0; i < 2; i++) {
        uint64_t before = tg_redis_stats(r)->round_trips, cmds = tg_redis_stats(r)->commands;
        assert_int_equal(decide_on_redis(r, now + i, &rounds), 1);
        assert_int_equal(rounds, 1);
        /* the round (a get and a take), then the add sent without waiting */
        assert_int_equal(tg_redis_stats(r)->round_trips - before, 2);
        assert_int_equal(tg_redis_stats(r)->commands - cmds, 3);
    }
    /* The third: its history (the two calls, added by the effects) refuses it, still in one
     * round trip; the token the optimistic pass took is given back; nothing recorded. */
    uint64_t before = tg_redis_stats(r)->round_trips;
    assert_int_equal(decide_on_redis(r, now + 2, &rounds), 0);
    assert_int_equal(rounds, 1);
    assert_int_equal(tg_redis_stats(r)->round_trips - before, 2); /* the round, then the refund */
    struct tg_counter_plan plan;
    tg_plan_init(&plan);
    struct tg_hist_view v;
    get(r, "tgh5:", 11, 12, 64, &plan, &v);
    assert_int_equal(tg_hist_view_len(&v), 2);
    assert_int_equal(v.a[1].at_ms, now + 1);
    tg_plan_dispose(&plan);
    redisReply *y = cmd("GET tgh5:c:000000000000000d000000000000000e");
    assert_int_equal(y->type, REDIS_REPLY_STRING);
    assert_non_null(strstr(y->str, " 8")); /* 10 - 2 taken, the third's given back */
    freeReplyObject(y);
    finish(r);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(entry_form),
        cmocka_unit_test(add_get_round_trip),
        cmocka_unit_test(trim_like_the_local_ring),
        cmocka_unit_test(expires_a_day_after_the_newest),
        cmocka_unit_test(malformed_fail_closed),
        cmocka_unit_test(one_round_trip),
    };
    loop = uv_default_loop();
    memset(K, 0x5a, sizeof(K));
    th_start(&srv);
    int rc = TG_UNIT_RUN(tests, argc, argv);
    th_kill(&srv);
    uv_loop_close(loop);
    return rc;
}
