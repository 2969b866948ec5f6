/* The token lease (cluster/lease.c, cluster.lease) against a redis-server of the test's own:
 *   - the "take up to" op, as a single script and in a batch: amount + extra when the bucket
 *     has it, else exactly amount, else refused, and what it took;
 *   - a member with a lease answers the decisions its lease covers inside decide, without
 *     waiting for Redis, also while Redis is stopped; below half it asks for the rest ahead of
 *     need (one refill at a time); the rest go to Redis and fill the lease again; a refund of a
 *     leased take goes back to the lease;
 *   - three members racing on one bucket with leases, Redis paused and resumed mid-run: never
 *     more than the budget forwarded, and what is not forwarded is what sits in leases;
 *   - leftovers come back: after cluster.lease.ms the unspent tokens are in Redis again and a
 *     member without a lease reaches the whole budget. */
#include "test/unit/unit.h"
#include "test/unit/cluster/redis_helpers.h"

#include <cjson/cJSON.h>
#include <sched.h>

#include "cluster/cluster.h"
#include "cluster/redis/redis.h"
#include "core/call/gateway.h"
#include "core/call/shared.h"
#include "policy/counters.h"

static struct th_server srv;
static uv_loop_t *loop;

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

/* ---- (1) the script ------------------------------------------------------------------------ */

struct answer {
    int done, status;
};

static void on_ops(void *ud, int status)
{
    struct answer *a = ud;
    a->done++;
    a->status = status;
}

static void on_state(void *ud, int up, const char *why)
{
    (void)ud, (void)up, (void)why;
}

static void take(struct tg_counter_op *op, double amount, double extra)
{
    memset(op, 0, sizeof(*op));
    op->kind = TG_COP_BUCKET_TAKE;
    op->h1 = 4242;
    op->h2 = 7;
    op->capacity = 10;
    op->window_ms = 86400000; /* no refill during the test */
    op->amount = amount;
    op->extra = extra;
    op->now_ms = 1000;
}

static void wait_answers(struct answer *a, int n)
{
    for (uint64_t t = th_ms(); th_ms() - t < 5000;) {
        int k = 0;
        while (k < n && a[k].done)
            k++;
        if (k == n)
            return;
        uv_run(loop, UV_RUN_ONCE);
    }
    fail_msg("not answered");
}

static void take_up_to_script(void **state)
{
    (void)state;
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
    struct tg_counter_op op[3];
    struct answer a[3] = {{0}};
    /* single script: 1 + 4 of 10 */
    take(&op[0], 1, 4);
    tg_redis_counter_ops(r, "tglease1:", &op[0], 1, NULL, on_ops, &a[0]);
    wait_answers(a, 1);
    assert_int_equal(a[0].status, TG_REDIS_OK);
    assert_int_equal(op[0].ok, 1);
    assert_true(op[0].taken == 5 && op[0].value == 5);
    /* batch (three requests in one iteration): 5, then 5 left 0, then refused */
    memset(a, 0, sizeof(a));
    for (int i = 0; i < 3; i++) {
        take(&op[i], 1, 4);
        tg_redis_counter_ops(r, "tglease1:", &op[i], 1, NULL, on_ops, &a[i]);
    }
    wait_answers(a, 3);
    assert_true(op[0].ok && op[0].taken == 5 && op[0].value == 0);
    assert_true(!op[1].ok && op[1].taken == 0 && op[1].value == 0 && op[1].retry_ms > 0);
    assert_true(!op[2].ok && op[2].taken == 0);
    /* 3 given back: 1 + 4 does not fit, exactly 1 is taken */
    struct tg_counter_op g = op[0];
    g.kind = TG_COP_BUCKET_GIVE;
    g.amount = 3;
    memset(a, 0, sizeof(a));
    tg_redis_counter_ops(r, "tglease1:", &g, 1, NULL, on_ops, &a[0]);
    wait_answers(a, 1);
    memset(a, 0, sizeof(a));
    take(&op[0], 1, 4);
    take(&op[1], 1, 0); /* a plain take beside it in the batch: 3 elements, as before */
    tg_redis_counter_ops(r, "tglease1:", &op[0], 1, NULL, on_ops, &a[0]);
    tg_redis_counter_ops(r, "tglease1:", &op[1], 1, NULL, on_ops, &a[1]);
    wait_answers(a, 2);
    assert_true(op[0].ok && op[0].taken == 1 && op[0].value == 2);
    assert_true(op[1].ok && op[1].value == 1);
    tg_redis_free(r);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
}

/* ---- members deciding ------------------------------------------------------------------------ */

struct decided {
    int done, inside, allowed;
    enum tg_shared_outcome o;
    struct tg_decision d;
};

static int in_op;

static void on_decided(void *ud, enum tg_shared_outcome o, struct tg_decision *d, const char *why)
{
    (void)why;
    struct decided *x = ud;
    x->done++;
    x->inside = in_op;
    x->o = o;
    x->allowed = o == TG_SHARED_DECIDED && d != NULL && d->verdict == TG_VERDICT_ALLOW;
    if (d != NULL)
        x->d = *d;
}

struct member {
    struct tg_server gw;
    struct tg_shared local, st;
    struct tg_cluster *cl;
};

static void member_start(struct member *m, const char *name, const char *prefix, int lease, int lease_ms)
{
    char addr[64], why[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", srv.port);
    struct tg_cluster_conf cc = {.enabled = 1, .redis = addr, .key_prefix = (char *)prefix,
                                 .on_unavailable = TG_CLUSTER_DENY, .instance = (char *)name,
                                 .timeout_ms = 3000, .backoff_ms = 20, .backoff_max_ms = 100,
                                 .session_ttl_ms = 60000, .lease_tokens = lease, .lease_ms = lease_ms,
                                 .lease_keys = 16};
    memset(cc.secret, 5, sizeof(cc.secret));
    memset(m, 0, sizeof(*m));
    m->gw.counters = tg_counters_new();
    tg_shared_local(&m->local, &m->gw);
    m->cl = tg_cluster_new(loop, &cc, &m->local, why, sizeof(why));
    if (m->cl == NULL)
        fail_msg("cluster: %s", why);
    tg_cluster_store(m->cl, &m->st);
    for (uint64_t t = th_ms(); th_ms() - t < 10000 && !tg_cluster_up(m->cl);) {
        int never = 0;
        th_run_until(loop, &never, 10);
    }
    assert_true(tg_cluster_up(m->cl));
}

static void member_stop(struct member *m)
{
    tg_cluster_free(m->cl);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
    tg_counters_free(m->gw.counters);
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
    if (tg_policy_compile(root, "lease", &p, &err, &warn) != 0)
        fail_msg("policy: %.*s", (int)err.len, err.base);
    cJSON_Delete(root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    return p;
}

static void ask(struct member *m, struct tg_policy *p, struct decided *x)
{
    struct tg_shared_ask q = {p, {"g", "s", "u", NULL, NULL}, "t", NULL, 1700000000000LL, 0};
    struct tg_decision d;
    memset(x, 0, sizeof(*x));
    in_op = 1;
    m->st.ops->decide(m->st.ud, &q, &d, on_decided, x);
    in_op = 0;
}

static void wait_one(struct decided *x)
{
    th_run_until(loop, &x->done, 5000);
    assert_int_equal(x->done, 1);
}

/* The tokens of every bucket under prefix in Redis, summed. */
static double tokens_in_redis(const char *prefix)
{
    redisContext *c = redisConnect("127.0.0.1", srv.port);
    assert_true(c != NULL && !c->err);
    redisReply *keys = redisCommand(c, "KEYS %sc:*", prefix);
    double sum = 0;
    for (size_t i = 0; i < keys->elements; i++) {
        redisReply *v = redisCommand(c, "GET %s", keys->element[i]->str);
        double stamp, tokens;
        if (v != NULL && v->type == REDIS_REPLY_STRING && sscanf(v->str, "%lf %lf", &stamp, &tokens) == 2)
            sum += tokens;
        freeReplyObject(v);
    }
    freeReplyObject(keys);
    redisFree(c);
    return sum;
}

static void on_pong(void *ud, int status, const struct redisReply *y)
{
    (void)status, (void)y;
    *(int *)ud = 1;
}

/* What member m sent without waiting has reached Redis. */
static void settle(struct member *m)
{
    int done = 0;
    const char *argv[] = {"PING"};
    size_t len[] = {4};
    tg_redis_command(tg_cluster_redis(m->cl), on_pong, &done, 1, argv, len);
    th_run_until(loop, &done, 5000);
    assert_true(done);
}

static void lease_served_locally(void **state)
{
    (void)state;
    struct member a;
    member_start(&a, "a", "tglease2:", 5, 60000);
    struct tg_policy *p = budget(20);
    struct decided x;
    ask(&a, p, &x); /* to Redis: 1 + 5 */
    assert_int_equal(x.done, 0);
    wait_one(&x);
    assert_true(x.allowed);
    assert_true(x.d.shared);
    assert_true(tokens_in_redis("tglease2:") == 14);
    const struct tg_redis_stats *rs = tg_redis_stats(tg_cluster_redis(a.cl));
    uint64_t commands = rs->commands;
    struct tg_decision leased = {0};
    for (int i = 0; i < 4; i++) { /* answered inside decide, nothing sent */
        ask(&a, p, &x);
        assert_int_equal(x.done, 1);
        assert_int_equal(x.inside, 1);
        assert_true(x.allowed);
        assert_true(x.d.shared);
        leased = x.d;
    }
    assert_int_equal(rs->commands, commands); /* nothing written yet: a refill waits for the loop */
    assert_int_equal(tg_cluster_stats(a.cl)->decisions_lease, 4);
    /* at 2 of 5 left it asked Redis for 3 more ahead of need (sent when the loop runs) */
    assert_int_equal(tg_cluster_stats(a.cl)->lease_refills, 1);
    /* a refund of a leased take goes back to the lease (1 left, 2 now), not to Redis */
    a.st.ops->refund(a.st.ud, &leased);
    assert_true(tokens_in_redis("tglease2:") == 14);
    /* Redis stopped: the two tokens in the lease still serve two calls */
    stop_redis();
    for (int i = 0; i < 2; i++) {
        ask(&a, p, &x);
        assert_int_equal(x.inside, 1);
        assert_true(x.allowed);
    }
    kill(srv.pid, SIGCONT);
    assert_int_equal(tg_cluster_stats(a.cl)->lease_refills, 1); /* one in flight at a time */
    /* empty: to Redis again behind the refill (3), taking 1 + 2: it holds 5 again */
    ask(&a, p, &x);
    assert_int_equal(x.done, 0);
    wait_one(&x);
    assert_true(x.allowed);
    assert_true(tokens_in_redis("tglease2:") == 8);
    /* shutdown gives back the 5 unspent */
    member_stop(&a);
    for (uint64_t t = th_ms(); th_ms() - t < 5000 && tokens_in_redis("tglease2:") != 13;)
        sched_yield();
    assert_true(tokens_in_redis("tglease2:") == 13);
    tg_policy_unref(p);
}

#define NM 3
#define NWAVE 4
#define NDEC 10

/* Three members with leases of 4 race for a budget of 50 in waves of 3 x 10 calls (each wave
 * asked at once, then answered), Redis paused (SIGSTOP) in the middle of the second wave. */
static void race_three_paused(void **state)
{
    (void)state;
    static struct member m[NM];
    static struct decided x[NM][NDEC];
    for (int k = 0; k < NM; k++)
        member_start(&m[k], k == 0 ? "a" : k == 1 ? "b" : "c", "tglease3:", 4, 60000);
    struct tg_policy *p = budget(50);
    int allowed = 0, leased = 0;
    for (int w = 0; w < NWAVE; w++) {
        for (int i = 0; i < NDEC; i++) {
            if (w == 1 && i == NDEC / 2) {
                uv_run(loop, UV_RUN_NOWAIT); /* what was asked so far is in the sockets */
                stop_redis();
            }
            for (int k = 0; k < NM; k++)
                ask(&m[k], p, &x[k][i]);
            if (i % 3 == 0)
                uv_run(loop, UV_RUN_NOWAIT);
        }
        if (w == 1) {
            uv_run(loop, UV_RUN_NOWAIT);
            kill(srv.pid, SIGCONT);
        }
        for (int k = 0; k < NM; k++)
            for (int i = 0; i < NDEC; i++) {
                wait_one(&x[k][i]);
                assert_int_equal(x[k][i].o, TG_SHARED_DECIDED);
                allowed += x[k][i].allowed;
                leased += x[k][i].allowed && x[k][i].inside;
            }
    }
    double held = 0;
    for (int k = 0; k < NM; k++) {
        const struct tg_cluster_stats *s = tg_cluster_stats(m[k].cl);
        held += s->lease_taken - s->lease_returned - (double)s->decisions_lease;
    }
    assert_true(leased > 0);
    /* never above the budget; what was not forwarded is what sits in leases, at most 4 each */
    assert_true(allowed <= 50);
    assert_true(allowed + held == 50);
    assert_true(held <= NM * 4);
    assert_true(tokens_in_redis("tglease3:") == 0);
    for (int k = 0; k < NM; k++)
        member_stop(&m[k]);
    /* every lease back at shutdown: what was not forwarded is in Redis again */
    for (uint64_t t = th_ms(); th_ms() - t < 5000 && tokens_in_redis("tglease3:") != 50 - allowed;)
        sched_yield();
    assert_true(tokens_in_redis("tglease3:") == 50 - allowed);
    tg_policy_unref(p);
}

static void leftovers_come_back(void **state)
{
    (void)state;
    struct member a, b;
    member_start(&a, "a", "tglease4:", 5, 1000);
    member_start(&b, "b", "tglease4:", 0, 1000); /* no lease: as before */
    struct tg_policy *p = budget(20);
    struct decided x;
    ask(&a, p, &x);
    wait_one(&x);
    assert_true(x.allowed); /* a holds 5 */
    int allowed = 0;
    for (int i = 0; i < 20; i++) {
        ask(&b, p, &x);
        assert_int_equal(x.done, 0);
        wait_one(&x);
        allowed += x.allowed;
    }
    assert_int_equal(allowed, 14); /* 20 - 1 - the 5 in a's lease */
    assert_true(tg_cluster_stats(b.cl)->lease_taken == 0);
    /* after 1000 ms a gives them back */
    for (uint64_t t = th_ms(); th_ms() - t < 5000 && tg_cluster_stats(a.cl)->lease_returned < 5;) {
        int never = 0;
        th_run_until(loop, &never, 20);
    }
    assert_true(tg_cluster_stats(a.cl)->lease_returned == 5);
    settle(&a);
    allowed = 0;
    for (int i = 0; i < 10; i++) {
        ask(&b, p, &x);
        wait_one(&x);
        allowed += x.allowed;
    }
    assert_int_equal(allowed, 5); /* the whole budget reached: 1 + 14 + 5 */
    member_stop(&a);
    member_stop(&b);
    tg_policy_unref(p);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(take_up_to_script),
        cmocka_unit_test(lease_served_locally),
        cmocka_unit_test(race_three_paused),
        cmocka_unit_test(leftovers_come_back),
    };
    loop = uv_default_loop();
    th_start(&srv);
    int rc = TG_UNIT_RUN(tests, argc, argv);
    th_kill(&srv);
    uv_loop_close(loop);
    return rc;
}
