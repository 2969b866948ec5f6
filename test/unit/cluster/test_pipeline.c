/* The Redis client's pipelining (cluster/redis/redis.c, uvio.c) and what the cluster's decisions
 * keep through it, against a redis-server of the test's own:
 *   - many requests in flight on one connection: written in one write per loop iteration, each
 *     answered once, in order, each by its own reply; one round trip per decision (their takes in
 *     batch script calls);
 *   - two members (two connections) racing on one counter with their replies interleaved by Redis:
 *     exactly the budget allowed, no token given twice, also with Redis paused (SIGSTOP) while
 *     their commands wait in the sockets;
 *   - a reply that never comes: every decision in flight fails closed at its deadline, once; what
 *     it took ran in Redis (its reply came late) and is never given back;
 *   - Redis killed and restarted while commands wait in the socket: every decision in flight
 *     fails closed once (never also allowed), and decisions work again on the new Redis. */
#include "test/unit/unit.h"
#include "test/unit/cluster/redis_helpers.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <sched.h>

#include "cluster/cluster.h"
#include "cluster/redis/internal.h"
#include "cluster/redis/redis.h"
#include "cluster/redis/scripts.h"
#include "core/call/gateway.h"
#include "core/call/shared.h"
#include "policy/counters.h"

static struct th_server srv;
static uv_loop_t *loop;

struct answer {
    int done, status, order;
};
static int answered; /* answers so far, for their order */

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

static struct tg_redis *client(uint64_t timeout)
{
    char addr[64], why[128];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
    struct tg_redis_opts o = {.address = addr, .timeout_ms = timeout, .backoff_ms = 20, .backoff_max_ms = 100};
    struct tg_redis *r = tg_redis_new(loop, &o, on_state, NULL, why, sizeof(why));
    assert_non_null(r);
    for (uint64_t t = th_ms(); th_ms() - t < 10000 && !tg_redis_up(r);) {
        int never = 0;
        th_run_until(loop, &never, 10);
    }
    assert_true(tg_redis_up(r));
    return r;
}

/* SIGSTOP, and wait until the kernel says it is stopped (state T in /proc): a request written
 * after this cannot be answered before SIGCONT. */
static void stop_redis(void)
{
    kill(srv.pid, SIGSTOP);
    char path[64], st[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)srv.pid);
    for (uint64_t t = th_ms(); th_ms() - t < 5000;) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(st, 1, sizeof(st) - 1, f) : 0;
        if (f)
            fclose(f);
        st[n] = 0;
        const char *p = strrchr(st, ')');
        if (p != NULL && p[1] == ' ' && p[2] == 'T')
            return;
        sched_yield();
    }
    fail_msg("redis-server %d did not stop", (int)srv.pid);
}

static void finish(struct tg_redis *r)
{
    tg_redis_free(r);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
}

static void take_op(struct tg_counter_op *op, uint64_t h1, double capacity)
{
    memset(op, 0, sizeof(*op));
    op->kind = TG_COP_BUCKET_TAKE;
    op->h1 = h1;
    op->h2 = 99;
    op->capacity = capacity;
    op->window_ms = 86400000; /* refills a token a day: none during the test */
    op->amount = 1;
    op->now_ms = 1000;
}

static int all_done(const struct answer *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i].done == 0)
            return 0;
    return 1;
}

static void run_until_done(const struct answer *a, size_t n, uint64_t ms)
{
    for (uint64_t t = th_ms(); th_ms() - t < ms && !all_done(a, n);)
        uv_run(loop, UV_RUN_ONCE);
    assert_true(all_done(a, n));
}

#define NREQ 120

/* ---- (0) the request's text: numbers exactly as "%.17g" writes them --------------------------- */

static void argv_numbers_as_printf(void **state)
{
    (void)state;
    static const double fixed[] = {0, -0.0, 1, -1, 7, 10, 99, 100000000, 1e14, 999999999999999.0, 1e15, -1e15,
                                   1e16, 9007199254740993.0, 0.5, 0.1, -2.5, 1e-300, 1e300, 4.9e-324, 123456.789};
    uint64_t rs = 0x243f6a8885a308d3ULL;
    for (int i = 0; i < 20000; i++) {
        double x;
        if (i < (int)(sizeof(fixed) / sizeof(fixed[0]))) {
            x = fixed[i];
        } else {
            rs ^= rs << 13;
            rs ^= rs >> 7;
            rs ^= rs << 17;
            switch (i % 4) {
            case 0: x = (double)(int64_t)(rs % 2000000000000000ULL) - 1e15; break; /* integral, both signs */
            case 1: x = (double)(rs % 1000000) / 8; break;                          /* halves, eighths */
            case 2: memcpy(&x, &rs, sizeof(x)); break;                              /* any bits */
            default: x = (double)(rs % 100000) * 1e10; break;                       /* large integral */
            }
            if (isnan(x) || isinf(x))
                continue;
        }
        struct tg_counter_op op;
        take_op(&op, rs, x);
        op.amount = -x;
        op.now_ms = (int64_t)rs;
        op.window_ms = -(int64_t)(rs >> 3);
        struct tg__redis_argv v;
        tg__redis_op_argv(&v, &op, "pre:", "0123456789012345678901234567890123456789", NULL);
        char want[64], key[128];
        snprintf(key, sizeof(key), "pre:c:%016" PRIx64 "%016" PRIx64, op.h1, op.h2);
        assert_int_equal(v.argc, 8);
        assert_int_equal(v.argvlen[3], strlen(key));
        assert_string_equal(v.argv[3], key);
        snprintf(want, sizeof(want), "%.17g", op.capacity);
        assert_int_equal(v.argvlen[4], strlen(want));
        assert_string_equal(v.argv[4], want);
        snprintf(want, sizeof(want), "%" PRId64, op.window_ms);
        assert_string_equal(v.argv[5], want);
        snprintf(want, sizeof(want), "%.17g", op.amount);
        assert_int_equal(v.argvlen[6], strlen(want));
        assert_string_equal(v.argv[6], want);
        snprintf(want, sizeof(want), "%" PRId64, op.now_ms);
        assert_int_equal(v.argvlen[7], strlen(want));
        assert_string_equal(v.argv[7], want);
    }
}

/* ---- (0b) a refused connect is seen when the socket says so, not at the connect deadline ----- */

struct seen {
    int down;
    char why[160];
};

static void on_state_seen(void *ud, int up, const char *why)
{
    struct seen *x = ud;
    if (!up && !x->down) {
        x->down = 1;
        snprintf(x->why, sizeof(x->why), "%s", why);
    }
}

static void refused_connect_seen_at_once(void **state)
{
    (void)state;
    char addr[64], why[128];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", th_free_port()); /* nothing listens there */
    struct tg_redis_opts o = {.address = addr, .timeout_ms = 10000, .backoff_ms = 5000, .backoff_max_ms = 5000};
    struct seen x = {0};
    uint64_t t0 = th_ms();
    struct tg_redis *r = tg_redis_new(loop, &o, on_state_seen, &x, why, sizeof(why));
    assert_non_null(r);
    th_run_until(loop, &x.down, 5000);
    assert_true(x.down);
    assert_true(th_ms() - t0 < 3000); /* the connect deadline is 10 s */
    assert_non_null(strstr(x.why, "refused"));
    finish(r);
}

/* ---- (1) many in flight on one connection ------------------------------------------------- */

static void many_in_flight_one_write(void **state)
{
    (void)state;
    struct tg_redis *r = client(5000);
    static struct tg_counter_op ops[NREQ];
    static struct answer a[NREQ];
    memset(a, 0, sizeof(a));
    answered = 0;
    const struct tg_redis_stats *st = tg_redis_stats(r);
    struct tg_redis_stats before = *st;
    for (int i = 0; i < NREQ; i++) {
        take_op(&ops[i], 0x5151, 100);
        tg_redis_counter_ops(r, "tgpipe1:", &ops[i], 1, NULL, on_ops, &a[i]);
    }
    /* nothing written while the requests were made, nothing answered inside */
    assert_int_equal(st->writes, before.writes);
    assert_int_equal(answered, 0);
    assert_int_equal(st->pending, NREQ);
    /* the loop's next iteration writes them all at once, before it polls */
    uv_run(loop, UV_RUN_NOWAIT);
    assert_int_equal(st->writes - before.writes, 1);
    run_until_done(a, NREQ, 5000);
    for (int i = 0; i < NREQ; i++) {
        assert_int_equal(a[i].done, 1);
        assert_int_equal(a[i].status, TG_REDIS_OK);
        assert_int_equal(a[i].order, i); /* one connection: answered in the order made */
        assert_int_equal(ops[i].ok, i < 100);
        if (i < 100)
            assert_true(ops[i].value == 99 - i); /* each token once */
    }
    /* the requests' takes went as batch script calls (batch.c), a round trip each still */
    assert_int_equal(st->commands - before.commands, (NREQ + TG__REDIS_BATCH_REQS - 1) / TG__REDIS_BATCH_REQS);
    assert_int_equal(st->round_trips - before.round_trips, NREQ);
    /* no write after that one: the replies made no request */
    assert_int_equal(st->writes - before.writes, 1);
    finish(r);
}

/* ---- (2) two connections racing, replies interleaved, Redis paused meanwhile --------------- */

static void two_connections_race_paused(void **state)
{
    (void)state;
    struct tg_redis *r[2] = {client(5000), client(5000)};
    static struct tg_counter_op ops[2][NREQ];
    static struct answer a[2][NREQ];
    memset(a, 0, sizeof(a));
    answered = 0;
    for (int round = 0; round < 2; round++) {
        /* a half of each member's requests before the pause, a half while Redis is stopped */
        for (int i = round * NREQ / 2; i < (round + 1) * NREQ / 2; i++)
            for (int m = 0; m < 2; m++) {
                take_op(&ops[m][i], 0x7777, 150);
                tg_redis_counter_ops(r[m], "tgpipe2:", &ops[m][i], 1, NULL, on_ops, &a[m][i]);
            }
        uv_run(loop, UV_RUN_NOWAIT); /* written */
        if (round == 0)
            stop_redis();
    }
    kill(srv.pid, SIGCONT);
    run_until_done(a[0], NREQ, 5000);
    run_until_done(a[1], NREQ, 5000);
    int oks = 0;
    static int seen[150];
    memset(seen, 0, sizeof(seen));
    for (int m = 0; m < 2; m++) {
        int last = 1;
        for (int i = 0; i < NREQ; i++) {
            assert_int_equal(a[m][i].done, 1);
            assert_int_equal(a[m][i].status, TG_REDIS_OK);
            if (ops[m][i].ok) {
                assert_true(last); /* per connection: the tokens go to the first ones */
                int v = (int)ops[m][i].value;
                assert_true(v >= 0 && v < 150);
                seen[v]++;
                oks++;
            }
            last = ops[m][i].ok;
        }
    }
    assert_int_equal(oks, 150); /* exactly the budget */
    for (int v = 0; v < 150; v++)
        assert_int_equal(seen[v], 1); /* no token given twice */
    finish(r[0]);
    finish(r[1]);
}

/* ---- cluster members deciding -------------------------------------------------------------- */

struct decided {
    int done;
    enum tg_shared_outcome o;
    int allowed;
};

static void on_decided(void *ud, enum tg_shared_outcome o, struct tg_decision *d, const char *why)
{
    (void)why;
    struct decided *x = ud;
    x->done++;
    x->o = o;
    x->allowed = o == TG_SHARED_DECIDED && d != NULL && d->verdict == TG_VERDICT_ALLOW;
}

static struct tg_cluster *member(const char *name, const char *prefix, int timeout_ms, const struct tg_shared *local)
{
    char addr[64], why[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
    struct tg_cluster_conf cc = {.enabled = 1, .redis = addr, .key_prefix = (char *)prefix,
                                 .on_unavailable = TG_CLUSTER_DENY, .instance = (char *)name,
                                 .timeout_ms = timeout_ms, .backoff_ms = 20, .backoff_max_ms = 100,
                                 .session_ttl_ms = 60000};
    memset(cc.secret, 5, sizeof(cc.secret));
    struct tg_cluster *cl = tg_cluster_new(loop, &cc, local, why, sizeof(why));
    if (cl == NULL)
        fail_msg("cluster: %s", why);
    return cl;
}

static void wait_members_up(struct tg_cluster **cl, int n)
{
    for (int i = 0; i < n; i++)
        for (uint64_t t = th_ms(); th_ms() - t < 10000 && !tg_cluster_up(cl[i]);) {
            int never = 0;
            th_run_until(loop, &never, 10);
        }
    for (int i = 0; i < n; i++)
        assert_true(tg_cluster_up(cl[i]));
}

static struct tg_policy *budget(int max)
{
    char pol[300];
    snprintf(pol, sizeof(pol),
             "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"t\":{\"limits\":"
             "[{\"counter\":\"c\",\"window\":\"day\",\"max\":%d,\"scope\":\"grant\"}]}}}",
             max);
    cJSON *root = cJSON_Parse(pol);
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    if (tg_policy_compile(root, "pipe", &p, &err, &warn) != 0)
        fail_msg("policy: %.*s", (int)err.len, err.base);
    cJSON_Delete(root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    return p;
}

#define NDEC 60

struct members {
    struct tg_server gw[2];
    struct tg_shared local[2], st[2];
    struct tg_cluster *cl[2];
    struct tg_decision d[2][NDEC];
    struct decided x[2][NDEC];
};

static void members_start(struct members *ms, const char *prefix, int timeout_ms)
{
    memset(ms, 0, sizeof(*ms));
    for (int m = 0; m < 2; m++) {
        ms->gw[m].counters = tg_counters_new();
        tg_shared_local(&ms->local[m], &ms->gw[m]);
        ms->cl[m] = member(m ? "b" : "a", prefix, timeout_ms, &ms->local[m]);
        tg_cluster_store(ms->cl[m], &ms->st[m]);
    }
    wait_members_up(ms->cl, 2);
}

static void members_stop(struct members *ms)
{
    for (int m = 0; m < 2; m++) {
        tg_cluster_free(ms->cl[m]);
        for (int i = 0; i < 20; i++)
            uv_run(loop, UV_RUN_NOWAIT);
        tg_counters_free(ms->gw[m].counters);
    }
}

/* Decisions [from, to) on both members, alternating, all in flight at once. */
static void decide_range(struct members *ms, struct tg_policy *p, int from, int to)
{
    for (int i = from; i < to; i++)
        for (int m = 0; m < 2; m++) {
            struct tg_shared_ask q = {p, {"g", "s", "u", NULL, NULL}, "t", NULL, 1700000000000LL, 0};
            ms->x[m][i].done = 0;
            ms->st[m].ops->decide(ms->st[m].ud, &q, &ms->d[m][i], on_decided, &ms->x[m][i]);
            assert_int_equal(ms->x[m][i].done, 0); /* waits for Redis */
        }
}

static int decided_all(const struct members *ms, int from, int to)
{
    for (int m = 0; m < 2; m++)
        for (int i = from; i < to; i++)
            if (ms->x[m][i].done == 0)
                return 0;
    return 1;
}

static void wait_decided(const struct members *ms, int from, int to)
{
    for (uint64_t t = th_ms(); th_ms() - t < 10000 && !decided_all(ms, from, to);)
        uv_run(loop, UV_RUN_ONCE);
    assert_true(decided_all(ms, from, to));
}

/* (3) A reply that never comes: Redis stopped past the deadline with decisions in flight. */
static void reply_never_comes(void **state)
{
    (void)state;
    static struct members ms;
    members_start(&ms, "tgpipe3:", 300);
    struct tg_policy *p = budget(30);
    decide_range(&ms, p, 0, 5);
    wait_decided(&ms, 0, 5); /* 10 allowed, before */
    stop_redis();
    decide_range(&ms, p, 5, 15);
    uv_run(loop, UV_RUN_NOWAIT); /* the 20 takes are in the sockets */
    uint64_t t0 = th_ms();
    wait_decided(&ms, 5, 15);
    uint64_t dt = th_ms() - t0;
    uint64_t refunds = 0;
    for (int m = 0; m < 2; m++) {
        for (int i = 0; i < 15; i++) {
            assert_int_equal(ms.x[m][i].done, 1); /* once: never refused and then allowed */
            if (i < 5)
                assert_true(ms.x[m][i].allowed);
            else
                assert_int_equal(ms.x[m][i].o, TG_SHARED_UNAVAILABLE); /* fail closed: deny */
        }
        refunds += tg_cluster_stats(ms.cl[m])->refunds;
    }
    assert_true(dt < 3000); /* at the deadline, not when Redis comes back */
    kill(srv.pid, SIGCONT);
    /* The 20 late takes ran (their replies are read and dropped): those tokens are spent for
     * calls that were refused. Giving them back would need to know they ran; the client never
     * does, so nothing is given back (refunds 0) and the budget errs toward less, never more. */
    assert_int_equal(refunds, 0);
    int wait = 0;
    for (uint64_t t = th_ms(); th_ms() - t < 10000 && !wait;) {
        uv_run(loop, UV_RUN_ONCE);
        wait = tg_redis_stats(tg_cluster_redis(ms.cl[0]))->late_replies +
                   tg_redis_stats(tg_cluster_redis(ms.cl[1]))->late_replies ==
               20;
    }
    assert_true(wait);
    wait_members_up(ms.cl, 2); /* the overdue reset may have made the connections again */
    decide_range(&ms, p, 15, 25);
    wait_decided(&ms, 15, 25);
    int allowed = 0;
    for (int m = 0; m < 2; m++)
        for (int i = 15; i < 25; i++) {
            assert_int_equal(ms.x[m][i].done, 1);
            allowed += ms.x[m][i].allowed;
        }
    assert_int_equal(allowed, 30 - 10 - 20); /* 0: the late takes spent the rest */
    tg_policy_unref(p);
    members_stop(&ms);
}

/* (4) The race across members with Redis paused mid-run (under the deadline), then killed and
 * restarted with decisions waiting in the sockets. */
static void race_paused_then_restarted(void **state)
{
    (void)state;
    static struct members ms;
    members_start(&ms, "tgpipe4:", 3000);
    struct tg_policy *p = budget(50);
    decide_range(&ms, p, 0, 20);
    uv_run(loop, UV_RUN_NOWAIT);
    stop_redis();
    decide_range(&ms, p, 20, 40); /* written while Redis is stopped: they wait in the sockets */
    uv_run(loop, UV_RUN_NOWAIT);
    kill(srv.pid, SIGCONT);
    wait_decided(&ms, 0, 40);
    int allowed = 0;
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < 40; i++) {
            assert_int_equal(ms.x[m][i].done, 1);
            assert_int_equal(ms.x[m][i].o, TG_SHARED_DECIDED);
            allowed += ms.x[m][i].allowed;
        }
    assert_int_equal(allowed, 50); /* exactly the budget of 80 asked */

    /* killed with 2 x 10 decisions in its socket, and started again (empty: no persistence) */
    stop_redis();
    decide_range(&ms, p, 40, 50);
    uv_run(loop, UV_RUN_NOWAIT);
    /* SIGKILL while it is stopped (th_kill would let it run first): the 20 never run */
    kill(srv.pid, SIGKILL);
    waitpid(srv.pid, NULL, 0);
    srv.pid = 0;
    wait_decided(&ms, 40, 50);
    for (int m = 0; m < 2; m++)
        for (int i = 40; i < 50; i++) {
            assert_int_equal(ms.x[m][i].done, 1);
            assert_int_equal(ms.x[m][i].o, TG_SHARED_UNAVAILABLE); /* refused, and only that */
        }
    th_start(&srv); /* on the same port */
    wait_members_up(ms.cl, 2);
    decide_range(&ms, p, 0, NDEC); /* a fresh bucket: 50 of 120 */
    wait_decided(&ms, 0, NDEC);
    allowed = 0;
    for (int m = 0; m < 2; m++)
        for (int i = 0; i < NDEC; i++) {
            assert_int_equal(ms.x[m][i].done, 1);
            assert_int_equal(ms.x[m][i].o, TG_SHARED_DECIDED);
            allowed += ms.x[m][i].allowed;
        }
    assert_int_equal(allowed, 50);
    tg_policy_unref(p);
    members_stop(&ms);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(argv_numbers_as_printf),
        cmocka_unit_test(refused_connect_seen_at_once),
        cmocka_unit_test(many_in_flight_one_write),
        cmocka_unit_test(two_connections_race_paused),
        cmocka_unit_test(reply_never_comes),
        cmocka_unit_test(race_paused_then_restarted),
    };
    loop = uv_default_loop();
    th_start(&srv);
    int rc = TG_UNIT_RUN(tests, argc, argv);
    th_kill(&srv);
    uv_loop_close(loop);
    return rc;
}
