/* cluster/redis/redis.c against real redis-server processes of our own (loopback, free ports): the
 * counter scripts give bit for bit what the local store gives, pipelining, deadlines under
 * SIGSTOP, Redis killed and restarted, NOSCRIPT, EBUSY, free with waiters, pub/sub across a
 * restart, AUTH. */
#include <fcntl.h>
#include <math.h>

#include "test/unit/unit.h"
#include "test/unit/cluster/redis_helpers.h"

#include "cluster/cluster.h"
#include "core/call/gateway.h"
#include "core/call/shared.h"
#include "cluster/redis/redis.h"
#include "core/base/json.h"
#include "policy/counters.h"

static struct th_server srv, srv_auth;
static uv_loop_t *loop;

struct watch {
    int up, downs, ups, changed;
    char why[256];
};

static void on_state(void *ud, int up, const char *why)
{
    struct watch *w = ud;
    w->up = up;
    w->changed = 1;
    if (up)
        w->ups++;
    else
        w->downs++;
    snprintf(w->why, sizeof(w->why), "%s", why);
    if (getenv("TG_TEST_VERBOSE"))
        fprintf(stderr, "state %p: %d %s\n", ud, up, why);
}

struct answer {
    int done, status;
    long long integer;
};

static void on_ops(void *ud, int status)
{
    struct answer *a = ud;
    a->done = 1;
    a->status = status;
}

static void on_reply(void *ud, int status, const struct redisReply *y)
{
    struct answer *a = ud;
    a->done = 1;
    a->status = status;
    a->integer = (y && y->type == REDIS_REPLY_INTEGER) ? y->integer : -1;
}

static struct tg_redis *client(struct th_server *s, const char *pass, uint64_t timeout, size_t max_pending,
                               struct watch *w)
{
    char addr[64], why[128];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", s->port);
    struct tg_redis_opts o = {.address = addr, .password = pass, .timeout_ms = timeout, .backoff_ms = 50,
                              .backoff_max_ms = 400, .max_pending = max_pending};
    struct tg_redis *r = tg_redis_new(loop, &o, on_state, w, why, sizeof(why));
    assert_non_null(r);
    return r;
}

static void wait_up(struct tg_redis *r, struct watch *w)
{
    (void)w;
    for (uint64_t t = th_ms(); th_ms() - t < 10000 && !tg_redis_up(r);) {
        int never = 0;
        th_run_until(loop, &never, 10);
    }
    assert_true(tg_redis_up(r));
}

static void finish(struct tg_redis *r)
{
    tg_redis_free(r);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
}

static int ping(struct tg_redis *r)
{
    struct answer a = {0};
    const char *argv[] = {"PING"};
    size_t len[] = {4};
    tg_redis_command(r, on_reply, &a, 1, argv, len);
    assert_int_equal(a.done, 0); /* never inside the call */
    th_run_until(loop, &a.done, 5000);
    assert_true(a.done);
    return a.status;
}

static int setup(void **state)
{
    (void)state;
    loop = uv_default_loop();
    th_start(&srv);
    snprintf(srv_auth.pass, sizeof(srv_auth.pass), "s3cret-%d", (int)getpid());
    th_start(&srv_auth);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    th_kill(&srv);
    th_kill(&srv_auth);
    return 0;
}

/* ---- (1) Redis and the local store agree, bit for bit ------------------------------------- */

static uint64_t rs = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
#define PICK(a) ((a)[rnd() % (sizeof(a) / sizeof((a)[0]))])

struct tkey {
    int bucket;
    uint64_t h1, h2;
    double capacity, limit;
    int64_t window_ms;
    enum tg_limit_op op;
};

static void same_results(void **state)
{
    (void)state;
    struct watch w = {0};
    struct tg_redis *r = client(&srv, NULL, 3000, 0, &w);
    wait_up(r, &w);
    struct tg_counters *local = tg_counters_new();
    /* Buckets have long windows so that a key's Redis TTL (real ms) outlives this test even when
     * the test's clock runs ahead of real time: Redis expires keys on its own clock (a take leaves
     * at least 0.1 token missing, so TTL >= 0.1 * window / capacity >= 6 s). */
    static const double caps[] = {3, 10, 2.5, 7.3};
    static const int64_t bws[] = {600000, 3600000, 86400000};
    static const int64_t wws[] = {60000, 3600000, 86400000LL * 30};
    static const double limits[] = {5, 1.0, 100.5, 0.3};
    static const double amounts[] = {0.1, 0.9, 1, 2, 0.3, 0.7, 3.3, 0.2, 12.5};
    static const int64_t steps[] = {0, 1, 3, 17, 250, 5000, 60000, 400000, 7};
    struct tkey keys[8];
    char name[32];
    for (int i = 0; i < 8; i++) {
        snprintf(name, sizeof(name), "key-%d-%d", i, (int)getpid());
        tg_counters_hash(name, strlen(name), &keys[i].h1, &keys[i].h2);
        keys[i].bucket = i < 4;
        keys[i].capacity = PICK(caps);
        keys[i].window_ms = keys[i].bucket ? PICK(bws) : PICK(wws);
        keys[i].limit = PICK(limits);
        keys[i].op = (enum tg_limit_op)(rnd() % 3);
    }
    int64_t now = 1700000000000LL;
    int nops = 0, taken = 0, refused = 0;
    while (nops < 4000) {
        struct tg_counter_op ops[4], mine[4];
        size_t n = 1 + rnd() % 4;
        for (size_t i = 0; i < n; i++) {
            if (rnd() % 10 == 0)
                now -= (int64_t)(1 + rnd() % 100000); /* a clock that steps back */
            else
                now += PICK(steps);
            struct tkey *k = &keys[rnd() % 8];
            struct tg_counter_op *op = &ops[i];
            memset(op, 0, sizeof(*op));
            op->h1 = k->h1;
            op->h2 = k->h2;
            op->capacity = k->capacity;
            op->window_ms = k->window_ms;
            op->amount = rnd() % 8 == 0 ? k->capacity + 1 : PICK(amounts); /* sometimes > capacity */
            op->now_ms = now;
            op->limit = k->limit;
            op->limit_op = k->op;
            op->window_start = now / k->window_ms * k->window_ms;
            if (k->bucket)
                op->kind = rnd() % 3 ? TG_COP_BUCKET_TAKE : TG_COP_BUCKET_GIVE;
            else
                op->kind = (enum tg_counter_op_kind)(TG_COP_WINDOW_GET + rnd() % 3);
            /* a late refund (or read) of the window before; adds go to the current window, as
             * the decisions make them: a past window's key has expired in Redis, while the local
             * store still answers from it until swept */
            if (op->kind != TG_COP_WINDOW_ADD && rnd() % 6 == 0)
                op->window_start -= k->window_ms;
            if (op->kind == TG_COP_WINDOW_ADD && rnd() % 2)
                op->now_ms = 0; /* as the plan sends it */
        }
        memcpy(mine, ops, sizeof(ops));
        for (size_t i = 0; i < n; i++)
            tg_counter_op_apply(local, &mine[i]);
        struct answer a = {0};
        tg_redis_counter_ops(r, "tgtest:", ops, n, NULL, on_ops, &a);
        th_run_until(loop, &a.done, 5000);
        assert_true(a.done);
        assert_int_equal(a.status, TG_REDIS_OK);
        for (size_t i = 0; i < n; i++) {
            if (ops[i].ok != mine[i].ok || memcmp(&ops[i].value, &mine[i].value, sizeof(double)) != 0 ||
                ops[i].retry_ms != mine[i].retry_ms) {
                fail_msg("op %d kind %d amount %.17g cap %.17g w %lld now %lld: redis ok %d value %.17g retry %llu, "
                         "local ok %d value %.17g retry %llu",
                         nops + (int)i, ops[i].kind, ops[i].amount, ops[i].capacity, (long long)ops[i].window_ms,
                         (long long)ops[i].now_ms, ops[i].ok, ops[i].value, (unsigned long long)ops[i].retry_ms,
                         mine[i].ok, mine[i].value, (unsigned long long)mine[i].retry_ms);
            }
            if (ops[i].kind == TG_COP_BUCKET_TAKE || ops[i].kind == TG_COP_WINDOW_ADD)
                ops[i].ok ? taken++ : refused++;
        }
        nops += (int)n;
    }
    /* the sequence is not degenerate: both answers occurred many times */
    assert_true(taken > 200);
    assert_true(refused > 200);
    /* a bucket key carries a TTL (it expires once full again) */
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    redisReply *y = redisCommand(c, "PTTL tgtest:c:%016llx%016llx", (unsigned long long)keys[0].h1,
                                 (unsigned long long)keys[0].h2);
    assert_non_null(y);
    assert_true(y->type == REDIS_REPLY_INTEGER && (y->integer > 0 || y->integer == -2));
    freeReplyObject(y);
    redisFree(c);
    tg_counters_free(local);
    finish(r);
}

/* ---- (2) a batch of n ops is one round trip; (5) NOSCRIPT ----------------------------------- */

static void pipelined_and_noscript(void **state)
{
    (void)state;
    struct watch w = {0};
    struct tg_redis *r = client(&srv, "", 3000, 0, &w);
    wait_up(r, &w);
    struct tg_counter_op ops[3];
    memset(ops, 0, sizeof(ops));
    for (int i = 0; i < 3; i++) {
        ops[i].kind = TG_COP_BUCKET_TAKE;
        ops[i].h1 = 11 + (uint64_t)i;
        ops[i].h2 = 7;
        ops[i].capacity = 5;
        ops[i].window_ms = 60000;
        ops[i].amount = 1;
        ops[i].now_ms = 1000;
    }
    struct tg_redis_stats before = *tg_redis_stats(r);
    struct answer a = {0};
    tg_redis_counter_ops(r, "tgtest2:", ops, 3, NULL, on_ops, &a);
    th_run_until(loop, &a.done, 5000);
    assert_int_equal(a.status, TG_REDIS_OK);
    const struct tg_redis_stats *st = tg_redis_stats(r);
    assert_int_equal(st->round_trips - before.round_trips, 1);
    assert_int_equal(st->commands - before.commands, 3);
    assert_int_equal(ops[2].ok, 1);
    assert_true(ops[2].value == 4);

    /* SCRIPT FLUSH: the next op meets NOSCRIPT, the client loads the scripts and retries it */
    const char *argv[] = {"SCRIPT", "FLUSH"};
    size_t len[] = {6, 5};
    struct answer f = {0};
    tg_redis_command(r, on_reply, &f, 2, argv, len);
    th_run_until(loop, &f.done, 5000);
    assert_int_equal(f.status, TG_REDIS_OK);
    uint64_t loads = st->script_loads;
    memset(&a, 0, sizeof(a));
    tg_redis_counter_ops(r, "tgtest2:", ops, 3, NULL, on_ops, &a);
    th_run_until(loop, &a.done, 5000);
    assert_int_equal(a.status, TG_REDIS_OK);
    assert_true(ops[0].value == 3 && ops[2].value == 3);
    assert_true(st->script_loads > loads);
    finish(r);
}

/* ---- (3) deadline under SIGSTOP; late replies dropped; the overdue reset -------------------- */

static void deadline_sigstop(void **state)
{
    (void)state;
    struct watch w = {0};
    struct tg_redis *r = client(&srv, NULL, 300, 0, &w);
    wait_up(r, &w);
    kill(srv.pid, SIGSTOP);
    uint64_t t0 = th_ms();
    struct answer a = {0};
    const char *argv[] = {"PING"};
    size_t len[] = {4};
    tg_redis_command(r, on_reply, &a, 1, argv, len);
    th_run_until(loop, &a.done, 5000);
    uint64_t dt = th_ms() - t0;
    assert_int_equal(a.status, TG_REDIS_ETIMEDOUT);
    assert_true(dt >= 280 && dt < 1500);
    const struct tg_redis_stats *st = tg_redis_stats(r);
    assert_int_equal(st->errors[2], 1);
    kill(srv.pid, SIGCONT);
    /* the late reply arrives, is read and counted, and goes nowhere */
    struct late {
        int seen;
    } l = {0};
    for (int i = 0; i < 50 && !l.seen; i++) {
        uv_run(loop, UV_RUN_ONCE);
        l.seen = st->late_replies == 1;
    }
    assert_int_equal(st->late_replies, 1);
    assert_int_equal(ping(r), TG_REDIS_OK);

    /* Stopped for long: the connection is reset (down), made again once Redis runs (up). */
    kill(srv.pid, SIGSTOP);
    memset(&a, 0, sizeof(a));
    tg_redis_command(r, on_reply, &a, 1, argv, len);
    w.up = 1;
    int down = 0;
    for (uint64_t t = th_ms(); th_ms() - t < 5000 && !down;) {
        uv_run(loop, UV_RUN_ONCE);
        down = w.up == 0;
    }
    assert_true(down);
    assert_non_null(strstr(w.why, "no answer"));
    kill(srv.pid, SIGCONT);
    wait_up(r, &w);
    assert_int_equal(ping(r), TG_REDIS_OK);
    finish(r);
}

/* ---- (4) Redis killed: EDOWN, never synchronous; restarted: reconnect, scripts reloaded ------ */

static void killed_and_restarted(void **state)
{
    (void)state;
    struct watch w = {0};
    struct tg_redis *r = client(&srv, NULL, 300, 0, &w);
    wait_up(r, &w);
    const struct tg_redis_stats *st = tg_redis_stats(r);
    uint64_t loads = st->script_loads;
    th_kill(&srv);
    int down = 0;
    for (uint64_t t = th_ms(); th_ms() - t < 5000 && !down;) {
        uv_run(loop, UV_RUN_ONCE);
        down = !w.up;
    }
    assert_true(down);
    assert_int_equal(w.downs, 1);
    struct tg_counter_op op = {.kind = TG_COP_WINDOW_ADD, .h1 = 5, .h2 = 5, .window_start = 0, .window_ms = 60000,
                               .amount = 1, .limit = 10, .limit_op = TG_LIMIT_LTE};
    struct answer a = {0};
    tg_redis_counter_ops(r, "tgtest4:", &op, 1, NULL, on_ops, &a);
    assert_int_equal(a.done, 0); /* answered from the loop, not inside the call */
    th_run_until(loop, &a.done, 2000);
    assert_int_equal(a.status, TG_REDIS_EDOWN);
    th_start(&srv);
    wait_up(r, &w);
    assert_int_equal(w.ups, 2);
    assert_true(st->reconnects >= 1);
    assert_true(st->script_loads >= loads + 5);
    memset(&a, 0, sizeof(a));
    tg_redis_counter_ops(r, "tgtest4:", &op, 1, NULL, on_ops, &a);
    th_run_until(loop, &a.done, 2000);
    assert_int_equal(a.status, TG_REDIS_OK);
    assert_true(op.ok == 1 && op.value == 1);
    finish(r);
}

/* ---- (6) max_pending; (7) free with waiters ----------------------------------------------- */

static void busy_and_free(void **state)
{
    (void)state;
    struct watch w = {0};
    struct tg_redis *r = client(&srv, NULL, 3000, 2, &w);
    wait_up(r, &w);
    struct answer a[3] = {{0}};
    const char *argv[] = {"PING"};
    size_t len[] = {4};
    for (int i = 0; i < 3; i++)
        tg_redis_command(r, on_reply, &a[i], 1, argv, len);
    assert_int_equal(a[2].done, 0);
    th_run_until(loop, &a[1].done, 3000);
    th_run_until(loop, &a[2].done, 3000);
    assert_int_equal(a[0].status, TG_REDIS_OK);
    assert_int_equal(a[1].status, TG_REDIS_OK);
    assert_int_equal(a[2].status, TG_REDIS_EBUSY);
    assert_int_equal(tg_redis_stats(r)->errors[4], 1);

    /* free with requests sent and unanswered, one refused, one cancelled: ECLOSED, no leak (ASan) */
    struct answer b[3] = {{0}}, c = {0};
    struct tg_counter_op ops[2] = {{.kind = TG_COP_WINDOW_GET, .h1 = 1, .h2 = 2}, {.kind = TG_COP_WINDOW_GET, .h1 = 3}};
    tg_redis_command(r, on_reply, &b[0], 1, argv, len);
    tg_redis_counter_ops(r, "x:", ops, 2, NULL, on_ops, &b[1]);
    tg_redis_command(r, on_reply, &b[2], 1, argv, len); /* over max_pending */
    struct tg_redis_req *q = tg_redis_command(r, on_reply, &c, 1, argv, len);
    tg_redis_cancel(q);
    tg_redis_free(r);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(b[i].done, 1);
        assert_int_equal(b[i].status, TG_REDIS_ECLOSED);
    }
    assert_int_equal(c.done, 0);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
    assert_int_equal(c.done, 0);
}

/* ---- (8) pub/sub across a restart --------------------------------------------------------- */

struct inbox {
    int got;
    char last[64];
};

static void on_message(void *ud, const char *channel, const char *p, size_t n)
{
    struct inbox *in = ud;
    (void)channel;
    in->got++;
    snprintf(in->last, sizeof(in->last), "%.*s", (int)n, p);
}

/* PUBLISH from b until someone hears it (the subscription is made asynchronously). */
static void publish_until_heard(struct tg_redis *b, struct inbox *in, const char *msg)
{
    const char *argv[] = {"PUBLISH", "tg-test-ch", msg};
    size_t len[] = {7, 10, strlen(msg)};
    int before = in->got;
    for (uint64_t t = th_ms(); th_ms() - t < 8000 && in->got == before;) {
        struct answer a = {0};
        tg_redis_command(b, on_reply, &a, 3, argv, len);
        th_run_until(loop, &a.done, 2000);
        if (a.status == TG_REDIS_OK && a.integer >= 1)
            th_run_until(loop, &in->got, 2000);
        else {
            int never = 0;
            th_run_until(loop, &never, 20); /* not subscribed yet: ask again shortly */
        }
    }
    assert_true(in->got > before);
    assert_string_equal(in->last, msg);
}

static void pubsub_restart(void **state)
{
    (void)state;
    struct watch wa = {0}, wb = {0};
    struct tg_redis *a = client(&srv, NULL, 500, 0, &wa), *b = client(&srv, NULL, 500, 0, &wb);
    struct inbox in = {0};
    tg_redis_subscribe(a, "tg-test-ch", on_message, &in);
    wait_up(a, &wa);
    wait_up(b, &wb);
    publish_until_heard(b, &in, "hello");
    th_kill(&srv);
    th_start(&srv);
    wait_up(a, &wa);
    wait_up(b, &wb);
    publish_until_heard(b, &in, "again");
    tg_redis_unsubscribe(a, "tg-test-ch");
    finish(a);
    finish(b);
}

/* ---- (9) AUTH --------------------------------------------------------------------------- */

static void auth(void **state)
{
    (void)state;
    struct watch w = {0}, bad = {0};
    struct tg_redis *r = client(&srv_auth, srv_auth.pass, 500, 0, &w);
    wait_up(r, &w);
    assert_int_equal(ping(r), TG_REDIS_OK);
    finish(r);

    r = client(&srv_auth, "wrong", 500, 0, &bad);
    th_run_until(loop, &bad.changed, 5000);
    assert_int_equal(bad.up, 0);
    assert_non_null(strstr(bad.why, "AUTH failed"));
    /* it keeps trying, with backoff (50 ms doubling to 400 ms): a handful of attempts a second */
    uint64_t before = tg_redis_stats(r)->reconnects;
    int never = 0;
    th_run_until(loop, &never, 1500);
    uint64_t tries = tg_redis_stats(r)->reconnects - before;
    assert_true(tries >= 2 && tries <= 16);
    assert_false(tg_redis_up(r));
    assert_int_equal(bad.ups, 0);
    finish(r);
}

/* ---- (8) a counter value that is not a finite decimal number fails closed ---------------- */

/* What a key may hold that the scripts never write: strtod's extensions, out-of-range values,
 * blanks, signs and dots JSON has not, negative counts, garbage. Each must fail the op
 * (TG_REDIS_EVALUE), never read as a number or as an empty counter, the refunds' ops too. */
static const char *const poisons[] = {"nan", "-nan", "inf", "-inf", "infinity", "0x10", "0x1p3", "1e999",
                                      "-1e999", "01", "1e", "abc", "5 5", "+5", "05", ".5", "5.", " 5", "5 ", "1e400", "0x", "-5", "-1e300", "1_000", "5e+", "--5",
                                      "1111111111111111111111111111111111111111111111111111111111111111111111e999"};

static void redis_set(const char *key, const char *value)
{
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    assert_non_null(c);
    redisReply *y = redisCommand(c, "SET %s %s", key, value);
    assert_non_null(y);
    assert_int_equal(y->type, REDIS_REPLY_STATUS);
    freeReplyObject(y);
    redisFree(c);
}

static void poisoned_values_refused(void **state)
{
    (void)state;
    struct watch w = {0};
    struct tg_redis *r = client(&srv, NULL, 3000, 0, &w);
    wait_up(r, &w);
    uint64_t h1, h2;
    tg_counters_hash("poisoned", 8, &h1, &h2);
    char key[128], value[160];
    snprintf(key, sizeof(key), "tgpoison:c:%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
    for (size_t i = 0; i < sizeof(poisons) / sizeof(poisons[0]); i++) {
        for (int kind = 0; kind < 5; kind++) { /* take, add, get, and the refunds: give, sub */
            for (int where = 0; where < 2; where++) { /* the value, then the stamp */
                if (where == 0)
                    snprintf(value, sizeof(value), "60000 %s", poisons[i]);
                else
                    snprintf(value, sizeof(value), "%s 3", poisons[i]);
                redis_set(key, value);
                struct tg_counter_op op;
                memset(&op, 0, sizeof(op));
                static const enum tg_counter_op_kind kinds[] = {TG_COP_BUCKET_TAKE, TG_COP_WINDOW_ADD, TG_COP_WINDOW_GET,
                                                                TG_COP_BUCKET_GIVE, TG_COP_WINDOW_SUB};
                op.kind = kinds[kind];
                op.h1 = h1;
                op.h2 = h2;
                op.capacity = 10;
                op.window_ms = 60000;
                op.amount = 1;
                op.now_ms = 61000;
                op.window_start = 60000;
                op.limit = 10;
                op.limit_op = TG_LIMIT_LTE;
                op.value = -7;
                struct answer a = {0};
                tg_redis_counter_ops(r, "tgpoison:", &op, 1, NULL, on_ops, &a);
                th_run_until(loop, &a.done, 5000);
                assert_true(a.done);
                if (a.status != TG_REDIS_EVALUE)
                    fail_msg("key \"%s\", op kind %d: status %d (value %.17g), not TG_REDIS_EVALUE", value, op.kind,
                             a.status, op.value);
            }
        }
    }
    /* a key of another type (a list, a hash): poison too, not an error to fall back from */
    static const char *const typed[] = {"RPUSH %s 60000", "HSET %s a 1", "SADD %s x"};
    for (size_t t = 0; t < sizeof(typed) / sizeof(typed[0]); t++) {
        redisContext *rc = redisConnect("127.0.0.1", srv.port);
        assert_non_null(rc);
        freeReplyObject(redisCommand(rc, "DEL %s", key));
        redisReply *y = redisCommand(rc, typed[t], key);
        assert_non_null(y);
        assert_int_equal(y->type, REDIS_REPLY_INTEGER);
        freeReplyObject(y);
        redisFree(rc);
        struct tg_counter_op op;
        memset(&op, 0, sizeof(op));
        op.kind = t == 0 ? TG_COP_BUCKET_TAKE : t == 1 ? TG_COP_WINDOW_ADD : TG_COP_WINDOW_SUB;
        op.h1 = h1;
        op.h2 = h2;
        op.capacity = 10;
        op.window_ms = 60000;
        op.amount = 1;
        op.now_ms = 61000;
        op.window_start = 60000;
        op.limit = 10;
        op.limit_op = TG_LIMIT_LTE;
        struct answer a = {0};
        tg_redis_counter_ops(r, "tgpoison:", &op, 1, NULL, on_ops, &a);
        th_run_until(loop, &a.done, 5000);
        if (a.status != TG_REDIS_EVALUE)
            fail_msg("a key made by \"%s\": status %d, not TG_REDIS_EVALUE", typed[t], a.status);
    }
    /* a well-formed key still counts */
    redis_set(key, "60000 3");
    struct tg_counter_op op;
    memset(&op, 0, sizeof(op));
    op.kind = TG_COP_WINDOW_GET;
    op.h1 = h1;
    op.h2 = h2;
    op.window_start = 60000;
    struct answer a = {0};
    tg_redis_counter_ops(r, "tgpoison:", &op, 1, NULL, on_ops, &a);
    th_run_until(loop, &a.done, 5000);
    assert_int_equal(a.status, TG_REDIS_OK);
    assert_true(op.value == 3);
    finish(r);
}

struct decided {
    int done;
    enum tg_shared_outcome o;
    char why[256];
    char counters[512];
};

static void on_decided(void *ud, enum tg_shared_outcome o, struct tg_decision *d, const char *why)
{
    struct decided *x = ud;
    x->done = 1;
    x->o = o;
    snprintf(x->why, sizeof(x->why), "%s", why ? why : "");
    snprintf(x->counters, sizeof(x->counters), "%s", d ? d->counters_json : "");
}

/* One tools/call of "t" decided by the cluster: its outcome. */
static void cluster_call(struct tg_cluster *cl, struct tg_policy *p, int64_t now, struct decided *x)
{
    struct tg_shared st;
    tg_cluster_store(cl, &st);
    struct tg_shared_ask q = {p, {"g", "s", "u", NULL, NULL}, "t", NULL, now, 0};
    struct tg_decision d;
    memset(x, 0, sizeof(*x));
    if (st.ops->decide(st.ud, &q, &d, on_decided, x) == NULL)
        return; /* answered inside */
    th_run_until(loop, &x->done, 5000);
    assert_true(x->done);
}

/* The decision a poisoned key meets: -32004 (TG_SHARED_UNAVAILABLE) with the reason, even with
 * on_unavailable = "local" (deciding on local counters would hand whoever poisoned the key a
 * fresh budget), and no nan or inf in anything an audit line is made of. */
static void poisoned_counter_fails_the_decision(void **state)
{
    (void)state;
    char addr[64], why[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
    struct tg_cluster_conf cc = {.enabled = 1, .redis = addr, .key_prefix = "tgpoisonc:",
                                 .on_unavailable = TG_CLUSTER_LOCAL, .instance = "test", .timeout_ms = 3000,
                                 .backoff_ms = 50, .backoff_max_ms = 400, .session_ttl_ms = 60000};
    struct tg_server gw = {0}; /* the local store needs only the counters */
    gw.counters = tg_counters_new();
    struct tg_shared local;
    tg_shared_local(&local, &gw);
    struct tg_cluster *cl = tg_cluster_new(loop, &cc, &local, why, sizeof(why));
    assert_non_null(cl);
    for (uint64_t t = th_ms(); th_ms() - t < 10000 && !tg_cluster_up(cl);) {
        int never = 0;
        th_run_until(loop, &never, 10);
    }
    assert_true(tg_cluster_up(cl));
    static const char pol[] = "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"t\":{\"limits\":"
                              "[{\"counter\":\"c\",\"window\":\"day\",\"max\":5,\"scope\":\"grant\"}]}}}";
    cJSON *root = cJSON_Parse(pol);
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    if (tg_policy_compile(root, "poison", &p, &err, &warn) != 0)
        fail_msg("policy: %.*s", (int)err.len, err.base);
    cJSON_Delete(root);
    int64_t now = 1700000000000LL;
    struct decided x;
    cluster_call(cl, p, now, &x);
    assert_int_equal(x.o, TG_SHARED_DECIDED);
    if (strstr(x.counters, "\"c\":4") == NULL) /* what is left of 5 */
        fail_msg("counters after the first call: %s", x.counters);
    for (size_t i = 0; i < sizeof(poisons) / sizeof(poisons[0]); i++) {
        /* every key of this prefix (the one counter) now holds the poison as its value */
        redisContext *c = redisConnect("127.0.0.1", srv.port);
        redisReply *keys = redisCommand(c, "KEYS tgpoisonc:c:*");
        assert_true(keys != NULL && keys->type == REDIS_REPLY_ARRAY && keys->elements == 1);
        redisReply *y = redisCommand(c, "GET %s", keys->element[0]->str);
        assert_true(y != NULL && y->type == REDIS_REPLY_STRING);
        char stamp[64];
        snprintf(stamp, sizeof(stamp), "%.*s", (int)strcspn(y->str, " "), y->str);
        freeReplyObject(y);
        y = redisCommand(c, "SET %s %s%s%s", keys->element[0]->str, stamp, " ", poisons[i]);
        freeReplyObject(y);
        freeReplyObject(keys);
        redisFree(c);
        cluster_call(cl, p, now + 1000, &x);
        if (x.o != TG_SHARED_UNAVAILABLE)
            fail_msg("poison \"%s\": outcome %d, counters %s", poisons[i], x.o, x.counters);
        assert_non_null(strstr(x.why, "not a finite decimal number"));
        assert_null(strstr(x.counters, "nan"));
        assert_null(strstr(x.counters, "inf"));
        /* put it back, for the next poison */
        c = redisConnect("127.0.0.1", srv.port);
        keys = redisCommand(c, "KEYS tgpoisonc:c:*");
        y = redisCommand(c, "SET %s %s%s", keys->element[0]->str, stamp, " 1");
        freeReplyObject(y);
        freeReplyObject(keys);
        redisFree(c);
    }
    assert_int_equal(tg_cluster_stats(cl)->fallback_local, 0);
    assert_int_equal(tg_cluster_stats(cl)->values_refused, sizeof(poisons) / sizeof(poisons[0]));
    assert_int_equal(tg_redis_stats(tg_cluster_redis(cl))->errors[-TG_REDIS_EVALUE], sizeof(poisons) / sizeof(poisons[0]));
    tg_policy_unref(p);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    tg_cluster_free(cl);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
    tg_counters_free(gw.counters);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(same_results),     cmocka_unit_test(pipelined_and_noscript),
        cmocka_unit_test(deadline_sigstop), cmocka_unit_test(killed_and_restarted),
        cmocka_unit_test(busy_and_free),    cmocka_unit_test(pubsub_restart),
        cmocka_unit_test(auth),
        cmocka_unit_test(poisoned_values_refused), cmocka_unit_test(poisoned_counter_fails_the_decision),
    };
    if (setup(NULL) != 0)
        return 1;
    int rc = TG_UNIT_RUN(tests, argc, argv);
    teardown(NULL);
    uv_loop_close(loop);
    return rc;
}
