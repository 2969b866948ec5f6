/* The batch of counter ops (cluster/redis/batch.c and its script in scripts.c) against a
 * redis-server of the test's own:
 *   - a random sequence of takes, gives, gets, adds and subs on a few keys, made once as one
 *     request per loop iteration (each op its own EVALSHA: the single scripts) and once as many
 *     requests in one iteration (batch calls): every op answers the same, bit for bit, and every
 *     key ends with the same value and the same TTL;
 *   - more requests than a batch holds: several batch calls in the one write, answers in order;
 *   - a poisoned key among them: the requests that reach it fail TG_REDIS_EVALUE, the others go on;
 *   - SCRIPT FLUSH before a batch: NOSCRIPT, the scripts loaded again, the batch answered once. */
#include "test/unit/unit.h"
#include "test/unit/cluster/redis_helpers.h"

#include <hiredis/hiredis.h>
#include <inttypes.h>

#include "cluster/redis/redis.h"
#include "cluster/redis/internal.h"
#include "policy/counters.h"

static struct th_server srv;
static uv_loop_t *loop;

struct answer {
    int done, status, order;
};
static int answered;

static void on_ops(void *ud, int status)
{
    struct answer *a = ud;
    a->done++;
    a->status = status;
    a->order = answered++;
}

static void on_state(void *ud, int up, const char *why)
{
    (void)ud;
    (void)up;
    (void)why;
}

static struct tg_redis *client(void)
{
    char addr[64], why[128];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
    struct tg_redis_opts o = {.address = addr, .timeout_ms = 5000, .backoff_ms = 20, .backoff_max_ms = 100};
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

static void run_until_done(const struct answer *a, size_t n)
{
    for (uint64_t t = th_ms(); th_ms() - t < 5000;) {
        size_t k = 0;
        while (k < n && a[k].done)
            k++;
        if (k == n)
            return;
        uv_run(loop, UV_RUN_ONCE);
    }
    fail_msg("not every request was answered");
}

static redisReply *cmd(const char *fmt, const char *arg)
{
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    assert_non_null(c);
    assert_int_equal(c->err, 0);
    redisReply *y = redisCommand(c, fmt, arg);
    assert_non_null(y);
    redisFree(c);
    return y;
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#define NOPS 600
#define NKEYS 5

/* A random op on one of NKEYS keys: amounts, capacities and windows such that takes fail and
 * succeed, a key moves between two windows, decimal amounts add up, gives cap, subs floor at 0.
 * Every key an op writes keeps a TTL of a minute or more: the one-by-one run takes wall-clock
 * time, and a key that expired between two of its calls would answer otherwise than within one
 * script (both are right; only the test must not depend on Redis's clock). */
static void random_op(struct tg_counter_op *op, uint64_t *s, int64_t now)
{
    memset(op, 0, sizeof(*op));
    static const enum tg_counter_op_kind kinds[] = {TG_COP_BUCKET_TAKE, TG_COP_BUCKET_TAKE, TG_COP_BUCKET_TAKE,
                                                    TG_COP_BUCKET_GIVE, TG_COP_WINDOW_GET, TG_COP_WINDOW_ADD,
                                                    TG_COP_WINDOW_ADD, TG_COP_WINDOW_ADD, TG_COP_WINDOW_SUB};
    op->kind = kinds[rnd(s) % 9];
    op->h1 = 1 + rnd(s) % NKEYS;
    op->h2 = 7;
    static const double amounts[] = {1, 2, 0.5, 0.1, 3, 0, 7.25};
    op->amount = amounts[rnd(s) % 7];
    op->now_ms = now;
    op->limit = 8.5;
    op->limit_op = (enum tg_limit_op)(rnd(s) % 3);
    if (op->kind == TG_COP_BUCKET_TAKE || op->kind == TG_COP_BUCKET_GIVE) {
        op->h2 = 8; /* buckets and windows on keys of their own, as a policy's counters are */
        op->capacity = 10;
        op->window_ms = 600000; /* a token a minute: refills by fractions between the ops */
        if (op->amount < 1)
            op->amount += 1;
    } else {
        op->window_ms = 3600000; /* the test's clock stays within one hour: this one, or the next */
        op->window_start = now / 3600000 * 3600000 + (int64_t)(rnd(s) % 8 == 0) * 3600000;
    }
}

/* Run ops[0..n) under prefix: batched (all requests in one iteration) or one per iteration. */
static void run_ops(struct tg_redis *r, const char *prefix, struct tg_counter_op *ops, size_t n, int batched,
                    struct answer *a)
{
    answered = 0;
    memset(a, 0, n * sizeof(*a));
    const struct tg_redis_stats *st = tg_redis_stats(r);
    uint64_t cmds = st->commands;
    for (size_t i = 0; i < n; i++) {
        tg_redis_counter_ops(r, prefix, &ops[i], 1, NULL, on_ops, &a[i]);
        if (!batched)
            run_until_done(&a[i], 1);
    }
    run_until_done(a, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(a[i].status, TG_REDIS_OK);
        assert_int_equal(a[i].order, (int)i);
    }
    uint64_t want = batched ? (n + TG__REDIS_BATCH_REQS - 1) / TG__REDIS_BATCH_REQS : n;
    assert_int_equal(st->commands - cmds, want);
}

static void batch_answers_as_single_ops(void **state)
{
    (void)state;
    struct tg_redis *r = client();
    static struct tg_counter_op one[NOPS], many[NOPS];
    static struct answer a[NOPS];
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    int64_t now = 1699999200000 + 1000; /* an hour's start: the ops' 3 minutes stay within it */
    for (size_t i = 0; i < NOPS; i++) {
        now += (int64_t)(rnd(&s) % 300); /* refills, and a window rolls over now and then */
        random_op(&one[i], &s, now);
    }
    memcpy(many, one, sizeof(one));
    run_ops(r, "tgb-one:", one, NOPS, 0, a);
    run_ops(r, "tgb-many:", many, NOPS, 1, a);
    int taken = 0, refused = 0;
    for (size_t i = 0; i < NOPS; i++) {
        if (many[i].ok != one[i].ok || memcmp(&many[i].value, &one[i].value, sizeof(double)) != 0)
            print_message("op %zu kind %d key %" PRIu64 "/%" PRIu64 " amount %g ws %" PRId64 " now %" PRId64
                          ": single %d %.17g, batch %d %.17g\n",
                          i, (int)one[i].kind, one[i].h1, one[i].h2, one[i].amount, one[i].window_start,
                          one[i].now_ms, one[i].ok, one[i].value, many[i].ok, many[i].value);
        assert_int_equal(many[i].ok, one[i].ok);
        assert_memory_equal(&many[i].value, &one[i].value, sizeof(double));
        assert_int_equal(many[i].retry_ms, one[i].retry_ms);
        if (one[i].kind == TG_COP_BUCKET_TAKE || one[i].kind == TG_COP_WINDOW_ADD) {
            taken += one[i].ok;
            refused += !one[i].ok;
        }
    }
    print_message("takes and adds: %d taken, %d refused\n", taken, refused);
    assert_true(taken > 20 && refused > 20); /* the sequence reached both answers */
    /* the keys end the same: value and TTL (within the time the two runs took) */
    for (int k = 1; k <= NKEYS; k++)
        for (int h2 = 7; h2 <= 8; h2++) {
            char key[2][96];
            snprintf(key[0], sizeof(key[0]), "tgb-one:c:%016x%016x", k, h2);
            snprintf(key[1], sizeof(key[1]), "tgb-many:c:%016x%016x", k, h2);
            redisReply *v[2] = {cmd("GET %s", key[0]), cmd("GET %s", key[1])};
            redisReply *t[2] = {cmd("PTTL %s", key[0]), cmd("PTTL %s", key[1])};
            assert_int_equal(v[0]->type, v[1]->type);
            if (v[0]->type == REDIS_REPLY_STRING)
                assert_string_equal(v[0]->str, v[1]->str);
            if (t[0]->integer < 0) /* -2 no key, -1 no TTL */
                assert_int_equal(t[1]->integer, t[0]->integer);
            else
                assert_true(t[1]->integer >= t[0]->integer - 50 && t[1]->integer <= t[0]->integer + 5000);
            for (int j = 0; j < 2; j++) {
                freeReplyObject(v[j]);
                freeReplyObject(t[j]);
            }
        }
    finish(r);
}

/* ---- a poisoned key among the batch --------------------------------------------------------- */

static void poison_fails_only_its_requests(void **state)
{
    (void)state;
    struct tg_redis *r = client();
    freeReplyObject(cmd("SET tgb-p:c:00000000000000020000000000000009 %s", "not numbers"));
    static struct tg_counter_op ops[30][2];
    static struct answer a[30];
    answered = 0;
    memset(a, 0, sizeof(a));
    for (int i = 0; i < 30; i++) {
        size_t n = 1;
        memset(ops[i], 0, sizeof(ops[i]));
        ops[i][0] = (struct tg_counter_op){.kind = TG_COP_BUCKET_TAKE, .h1 = 1, .h2 = 9, .capacity = 100,
                                           .window_ms = 86400000, .amount = 1, .now_ms = 5000};
        if (i % 3 != 0) { /* these also reach the poisoned key: after the good one, or before it */
            ops[i][1] = ops[i][0];
            ops[i][i % 3 == 1 ? 1 : 0].h1 = 2;
            n = 2;
        }
        tg_redis_counter_ops(r, "tgb-p:", ops[i], n, NULL, on_ops, &a[i]);
    }
    run_until_done(a, 30);
    int left = 100;
    for (int i = 0; i < 30; i++) {
        /* every op on the good key ran, in order (as its own EVALSHA would have, its request
         * failed or not): the good bucket went down by one each time */
        assert_int_equal(a[i].status, i % 3 != 0 ? TG_REDIS_EVALUE : TG_REDIS_OK);
        if (i % 3 != 2) {
            assert_int_equal(ops[i][0].ok, 1);
            assert_true(ops[i][0].value == left - 1);
        }
        left--;
    }
    assert_int_equal(tg_redis_stats(r)->errors[-TG_REDIS_EVALUE], 20);
    redisReply *y = cmd("GET %s", "tgb-p:c:00000000000000010000000000000009");
    assert_non_null(strstr(y->str, " 70")); /* 100 - 30 */
    freeReplyObject(y);
    finish(r);
}

/* ---- NOSCRIPT before a batch ----------------------------------------------------------------- */

static void noscript_reloads_and_resends_the_batch(void **state)
{
    (void)state;
    struct tg_redis *r = client();
    freeReplyObject(cmd("SCRIPT %s", "FLUSH"));
    const struct tg_redis_stats *st = tg_redis_stats(r);
    uint64_t loads = st->script_loads, rt = st->round_trips;
    static struct tg_counter_op ops[20];
    static struct answer a[20];
    answered = 0;
    memset(a, 0, sizeof(a));
    for (int i = 0; i < 20; i++) {
        ops[i] = (struct tg_counter_op){.kind = TG_COP_BUCKET_TAKE, .h1 = 3, .h2 = 9, .capacity = 15,
                                        .window_ms = 86400000, .amount = 1, .now_ms = 5000};
        tg_redis_counter_ops(r, "tgb-ns:", &ops[i], 1, NULL, on_ops, &a[i]);
    }
    run_until_done(a, 20);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(a[i].done, 1);
        assert_int_equal(a[i].status, TG_REDIS_OK);
        assert_int_equal(a[i].order, i);
        assert_int_equal(ops[i].ok, i < 15); /* run once each: exactly the 15 tokens */
    }
    assert_int_equal(st->script_loads - loads, TG__REDIS_NSCRIPTS);
    assert_int_equal(st->round_trips - rt, 40); /* each request: its round trip, and the resend */
    finish(r);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(batch_answers_as_single_ops),
        cmocka_unit_test(poison_fails_only_its_requests),
        cmocka_unit_test(noscript_reloads_and_resends_the_batch),
    };
    loop = uv_default_loop();
    th_start(&srv);
    int rc = TG_UNIT_RUN(tests, argc, argv);
    th_kill(&srv);
    uv_loop_close(loop);
    return rc;
}
