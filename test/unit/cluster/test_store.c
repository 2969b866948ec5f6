/* cluster/cluster.c, sessions.c, approvals.c: the cluster's shared store through its interface
 * (core/call/shared.h), against a redis-server of the test's own (loopback, free port):
 *   - decisions: one that reaches no counter answers inside decide; one that does waits for Redis,
 *     reserves there (d->shared), is limited by what another decision took, is given back by a
 *     refund, and a detached one gives back what it took; an unreachable Redis decides on the
 *     local store (on_unavailable = "local") or fails closed ("deny");
 *   - session records: shared by one member, fetched by another, refused when their MAC does not
 *     verify, forgotten for every member;
 *   - the approvals mirror: a call parked on member A (a hand-built server, test/unit/core/middle.h)
 *     is listed by member B with A's name, approved from B, and sent by A; then it is gone. */
#include "test/unit/core/middle.h"
#include "test/unit/cluster/redis_helpers.h"

#include "cluster/cluster.h"
#include "cluster/redis/redis.h"
#include "core/call/shared.h"
#include "policy/counters.h"

static struct th_server rs;
static uv_loop_t *loop;

/* A cluster member on loop, named instance, over the local store local. port 0: the test's Redis. */
static struct tg_cluster *member(const char *instance, const char *prefix, int port, enum tg_cluster_unavailable u,
                                 const struct tg_shared *local)
{
    static char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", port ? port : rs.port);
    struct tg_cluster_conf cc = {.enabled = 1, .redis = addr, .key_prefix = (char *)prefix, .on_unavailable = u,
                                 .instance = (char *)instance, .timeout_ms = 3000, .backoff_ms = 50,
                                 .backoff_max_ms = 400, .session_ttl_ms = 60000};
    memset(cc.secret, 7, sizeof(cc.secret));
    char why[256];
    struct tg_cluster *cl = tg_cluster_new(loop, &cc, local, why, sizeof(why));
    if (cl == NULL)
        fail_msg("cluster: %s", why);
    if (port == 0) {
        for (uint64_t t = th_ms(); th_ms() - t < 10000 && !tg_cluster_up(cl);) {
            int never = 0;
            th_run_until(loop, &never, 10);
        }
        assert_true(tg_cluster_up(cl));
    }
    return cl;
}

static void member_free(struct tg_cluster *cl)
{
    tg_cluster_free(cl);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
}

/* ---- decisions ---------------------------------------------------------------------------- */

struct decided {
    int done, inside;
    enum tg_shared_outcome o;
    struct tg_decision d;
    char why[200];
};

static int in_op;

static void on_decided(void *ud, enum tg_shared_outcome o, struct tg_decision *d, const char *why)
{
    struct decided *x = ud;
    x->done++;
    x->inside = in_op;
    x->o = o;
    if (d != NULL)
        x->d = *d;
    snprintf(x->why, sizeof(x->why), "%s", why ? why : "");
}

static struct tg_policy *policy(void)
{
    static const char pol[] = "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"free\":{\"action\":\"allow\"},"
                              "\"t\":{\"limits\":[{\"counter\":\"c\",\"window\":\"day\",\"max\":1,\"scope\":\"grant\"}]}}}";
    cJSON *root = cJSON_Parse(pol);
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    if (tg_policy_compile(root, "store", &p, &err, &warn) != 0)
        fail_msg("policy: %.*s", (int)err.len, err.base);
    cJSON_Delete(root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    return p;
}

/* Ask st to decide tool; *job: the handle (NULL: answered inside). */
static struct tg_shared_job *ask(const struct tg_shared *st, struct tg_policy *p, const char *tool, struct decided *x,
                                 struct tg_decision *d)
{
    struct tg_shared_ask q = {p, {"g", "s", "u", NULL, NULL}, tool, NULL, 1700000000000LL, 0};
    memset(x, 0, sizeof(*x));
    in_op = 1;
    struct tg_shared_job *job = st->ops->decide(st->ud, &q, d, on_decided, x);
    in_op = 0;
    return job;
}

static void wait_decided(struct decided *x)
{
    th_run_until(loop, &x->done, 5000);
    assert_int_equal(x->done, 1);
    assert_int_equal(x->inside, 0);
}

static void decide_refund_detach(void **state)
{
    struct tg_server gw = {0}; /* the local store needs only the counters */
    gw.counters = tg_counters_new();
    struct tg_shared local, st;
    tg_shared_local(&local, &gw);
    struct tg_cluster *cl = member("a", "tgstore1:", 0, TG_CLUSTER_DENY, &local);
    tg_cluster_store(cl, &st);
    struct tg_policy *p = policy();
    struct decided x;
    struct tg_decision d;

    /* No counter reached: answered inside, Redis not asked. */
    assert_null(ask(&st, p, "free", &x, &d));
    assert_int_equal(x.done, 1);
    assert_int_equal(x.inside, 1);
    assert_int_equal(x.o, TG_SHARED_DECIDED);
    assert_int_equal(x.d.verdict, TG_VERDICT_ALLOW);
    assert_int_equal(x.d.shared, 0);
    assert_int_equal(tg_cluster_stats(cl)->decisions_local, 1);

    /* A counter: it waits, d holding a deny that reserves nothing until the answer. */
    assert_non_null(ask(&st, p, "t", &x, &d));
    assert_int_equal(x.done, 0);
    assert_int_equal(d.verdict, TG_VERDICT_DENY);
    assert_int_equal(d.nres, 0);
    wait_decided(&x);
    assert_int_equal(x.o, TG_SHARED_DECIDED);
    assert_int_equal(x.d.verdict, TG_VERDICT_ALLOW);
    assert_int_equal(x.d.shared, 1);
    assert_int_equal(x.d.nres, 1);
    struct tg_decision first = x.d;

    assert_non_null(ask(&st, p, "t", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.d.verdict, TG_VERDICT_LIMITED); /* the bucket of 1 is spent, in Redis */

    st.ops->refund(st.ud, &first);
    assert_non_null(ask(&st, p, "t", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.d.verdict, TG_VERDICT_ALLOW); /* given back */

    st.ops->refund(st.ud, &x.d);
    struct decided gone;
    struct tg_decision gd;
    struct tg_shared_job *job = ask(&st, p, "t", &gone, &gd);
    assert_non_null(job);
    st.ops->detach(st.ud, job); /* its answer takes the token, then gives it back */
    assert_non_null(ask(&st, p, "t", &x, &d));
    wait_decided(&x); /* pipelined after the detached one */
    assert_int_equal(gone.done, 0);
    assert_non_null(ask(&st, p, "t", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.d.verdict, TG_VERDICT_ALLOW);
    assert_int_equal(gone.done, 0);

    member_free(cl);
    tg_policy_unref(p);
    tg_counters_free(gw.counters);
}

/* The tokens left in every bucket under prefix, summed, read from Redis at once (a key holds
 * "stamp tokens"). */
static double tokens_in_redis(const char *prefix)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", rs.port, tv);
    assert_true(c != NULL && !c->err);
    redisReply *keys = redisCommand(c, "KEYS %s*", prefix);
    assert_true(keys != NULL && keys->type == REDIS_REPLY_ARRAY);
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

struct checked {
    struct decided x;
    double tokens; /* in Redis when the decision was heard */
};

static void on_decided_check(void *ud, enum tg_shared_outcome o, struct tg_decision *d, const char *why)
{
    struct checked *c = ud;
    c->tokens = tokens_in_redis("tgstore3:");
    on_decided(&c->x, o, d, why);
}

/* A call refused by its second bucket after the first round took from both: what the round took
 * from the first is back in Redis when the caller hears "limited", so no member's next call finds
 * it spent (before, the give-back was sent and the refusal answered at once). */
static void refusal_gives_back_first(void **state)
{
    struct tg_server gw = {0};
    gw.counters = tg_counters_new();
    struct tg_shared local, st;
    tg_shared_local(&local, &gw);
    struct tg_cluster *cl = member("a", "tgstore3:", 0, TG_CLUSTER_DENY, &local);
    tg_cluster_store(cl, &st);
    static const char pol[] = "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"two\":{\"limits\":["
                              "{\"counter\":\"a\",\"window\":\"day\",\"max\":5},{\"counter\":\"b\",\"window\":\"day\",\"max\":1}]}}}";
    cJSON *root = cJSON_Parse(pol);
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    assert_int_equal(tg_policy_compile(root, "store", &p, &err, &warn), 0);
    cJSON_Delete(root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    struct tg_shared_ask q = {p, {"g", "s", "u", NULL, NULL}, "two", NULL, 1700000000000LL, 0};
    struct checked c;
    struct tg_decision d;
    for (int i = 0; i < 2; i++) {
        memset(&c, 0, sizeof(c));
        assert_non_null(st.ops->decide(st.ud, &q, &d, on_decided_check, &c));
        wait_decided(&c.x);
    }
    assert_int_equal(c.x.d.verdict, TG_VERDICT_LIMITED);
    assert_true(c.tokens == 4.0); /* a: 5 less the first call's; b: 0 */
    member_free(cl);
    tg_policy_unref(p);
    tg_counters_free(gw.counters);
    (void)state;
}

static void unreachable_redis(void **state)
{
    struct tg_server gw = {0};
    gw.counters = tg_counters_new();
    struct tg_shared local, st;
    tg_shared_local(&local, &gw);
    struct tg_policy *p = policy();
    struct decided x;
    struct tg_decision d;
    int dead = th_free_port(); /* nothing listens there */

    struct tg_cluster *cl = member("a", "tgstore2:", dead, TG_CLUSTER_LOCAL, &local);
    tg_cluster_store(cl, &st);
    assert_non_null(ask(&st, p, "t", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.o, TG_SHARED_FALLBACK);
    assert_int_equal(x.d.verdict, TG_VERDICT_ALLOW);
    assert_int_equal(x.d.shared, 0);
    assert_non_null(strstr(x.why, "Redis"));
    /* It took the local store's token: the local store itself is limited now, until the refund
     * (of a local decision: to the local store). */
    struct decided y;
    struct tg_decision e;
    assert_null(ask(&local, p, "t", &y, &e));
    assert_int_equal(y.d.verdict, TG_VERDICT_LIMITED);
    st.ops->refund(st.ud, &x.d);
    assert_null(ask(&local, p, "t", &y, &e));
    assert_int_equal(y.d.verdict, TG_VERDICT_ALLOW);
    member_free(cl);

    cl = member("a", "tgstore2:", dead, TG_CLUSTER_DENY, &local);
    tg_cluster_store(cl, &st);
    assert_non_null(ask(&st, p, "t", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.o, TG_SHARED_UNAVAILABLE);
    assert_non_null(strstr(x.why, "Redis"));
    member_free(cl);
    tg_policy_unref(p);
    tg_counters_free(gw.counters);
}

/* ---- histories ------------------------------------------------------------------------------ */

static struct tg_policy *compile(const char *json)
{
    cJSON *root = cJSON_Parse(json);
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    if (tg_policy_compile(root, "history", &p, &err, &warn) != 0)
        fail_msg("policy: %.*s", (int)err.len, err.base);
    cJSON_Delete(root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    return p;
}

static void on_pong(void *ud, int status, const struct redisReply *y)
{
    (void)status, (void)y;
    *(int *)ud = 1;
}

/* Everything member cl sent without waiting has reached Redis: a PING on the same connection is
 * answered after it. */
static void settle(struct tg_cluster *cl)
{
    int done = 0;
    const char *argv[] = {"PING"};
    size_t len[] = {4};
    tg_redis_command(tg_cluster_redis(cl), on_pong, &done, 1, argv, len);
    th_run_until(loop, &done, 5000);
    assert_true(done);
}

/* The calls in the history lists of prefix in Redis. */
static long long history_len(const char *prefix)
{
    redisContext *c = redisConnect("127.0.0.1", rs.port);
    assert_true(c != NULL && !c->err);
    redisReply *keys = redisCommand(c, "KEYS %sh:*", prefix);
    assert_true(keys != NULL && keys->type == REDIS_REPLY_ARRAY);
    long long n = 0;
    for (size_t i = 0; i < keys->elements; i++) {
        redisReply *y = redisCommand(c, "LLEN %s", keys->element[i]->str);
        n += y->integer;
        freeReplyObject(y);
    }
    freeReplyObject(keys);
    redisFree(c);
    return n;
}

/* A toxic flow across two members: secrets read through a, egress refused on b. A decision that
 * reads the history, takes a counter and records the call costs one round trip (stats.rounds,
 * and the client's own count), and is answered once its call is in Redis; one that reads
 * neither but records waits for that one round trip too; a refused one is taken back out. */
static void history_across_members(void **state)
{
    struct tg_server gw = {0};
    gw.counters = tg_counters_new();
    struct tg_shared local, sa, sb;
    tg_shared_local(&local, &gw);
    struct tg_cluster *a = member("a", "tgstore5:", 0, TG_CLUSTER_LOCAL, &local);
    struct tg_cluster *b = member("b", "tgstore5:", 0, TG_CLUSTER_LOCAL, &local);
    tg_cluster_store(a, &sa);
    tg_cluster_store(b, &sb);
    struct tg_policy *p = compile(
        "{\"version\":\"1\",\"default\":\"allow\",\"tools\":{"
        "\"read_env\":{\"tags\":[\"reads_secrets\"]},"
        "\"http_post\":{\"tags\":[\"egress\"],\"rules\":[{\"name\":\"rl\",\"rate_limit\":\"100/minute\"}]},"
        "\"*\":{\"rules\":[{\"name\":\"no-egress-after-secrets\",\"when\":{\"tags\":[\"egress\"]},"
        "\"conditions\":[{\"history\":{\"tags\":[\"reads_secrets\"],\"within\":\"10m\"},\"op\":\"eq\","
        "\"value\":0}]}]}}}");
    struct decided x;
    struct tg_decision d;

    /* egress first: the history (empty) and the rate limit in one round trip */
    uint64_t rounds = tg_cluster_stats(a)->rounds, rt = tg_redis_stats(tg_cluster_redis(a))->round_trips;
    assert_non_null(ask(&sa, p, "http_post", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.o, TG_SHARED_DECIDED);
    assert_int_equal(x.d.verdict, TG_VERDICT_ALLOW);
    assert_int_equal(tg_cluster_stats(a)->rounds - rounds, 1);
    /* one write to Redis in all: the read, the take and the add, pipelined */
    assert_int_equal(tg_redis_stats(tg_cluster_redis(a))->round_trips - rt, 1);
    assert_int_equal(tg_cluster_stats(a)->history_adds, 1);
    assert_int_equal(history_len("tgstore5:"), 1); /* there before the answer */

    /* the secrets read through a: no counter, no history condition, but recorded: answered after
     * its one round trip, its call in Redis by then */
    rounds = tg_cluster_stats(a)->rounds;
    rt = tg_redis_stats(tg_cluster_redis(a))->round_trips;
    assert_non_null(ask(&sa, p, "read_env", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.d.verdict, TG_VERDICT_ALLOW);
    assert_int_equal(tg_cluster_stats(a)->rounds - rounds, 1);
    assert_int_equal(tg_redis_stats(tg_cluster_redis(a))->round_trips - rt, 1);
    assert_int_equal(tg_cluster_stats(a)->history_adds, 2);
    assert_int_equal(history_len("tgstore5:"), 2);

    /* egress through b: refused by what a saw, in one round trip, naming the earlier call */
    rounds = tg_cluster_stats(b)->rounds;
    assert_non_null(ask(&sb, p, "http_post", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.o, TG_SHARED_DECIDED);
    assert_int_equal(x.d.verdict, TG_VERDICT_DENY);
    assert_int_equal(tg_cluster_stats(b)->rounds - rounds, 1);
    if (strstr(x.d.history_json, "read_env") == NULL)
        fail_msg("error.data.history: %s", x.d.history_json);
    /* its add, sent ahead with the read, was taken back before the answer: not recorded */
    assert_int_equal(tg_cluster_stats(b)->history_adds, 1);
    assert_int_equal(tg_cluster_stats(b)->history_dels, 1);
    assert_int_equal(history_len("tgstore5:"), 2);
    /* b's own memory knows nothing of it: the history is Redis's */
    assert_int_equal(tg_counters_history_keys(gw.counters), 0);

    /* A history entry poisoned in Redis: refused (-32004); the call its first round added ahead
     * of the read that failed is taken back. */
    redisContext *rc = redisConnect("127.0.0.1", rs.port);
    redisReply *keys = redisCommand(rc, "KEYS tgstore5:h:*");
    assert_int_equal(keys->elements, 1);
    freeReplyObject(redisCommand(rc, "RPUSH %s junk", keys->element[0]->str));
    assert_non_null(ask(&sb, p, "http_post", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.o, TG_SHARED_UNAVAILABLE);
    assert_int_equal(tg_cluster_stats(b)->values_refused, 1);
    settle(b);
    assert_int_equal(history_len("tgstore5:"), 3); /* the two calls and the junk, no http_post */
    assert_int_equal(tg_cluster_stats(b)->history_adds - tg_cluster_stats(b)->history_dels, 0);
    freeReplyObject(redisCommand(rc, "RPOP %s", keys->element[0]->str));
    freeReplyObject(keys);
    redisFree(rc);

    /* Redis unreachable: a call that would be recorded is refused (on_unavailable = "deny"), even
     * one that reads nothing: let through unrecorded, the flow after it could not be seen. */
    struct tg_cluster *c = member("c", "tgstore5:", th_free_port(), TG_CLUSTER_DENY, &local);
    struct tg_shared sc;
    tg_cluster_store(c, &sc);
    assert_non_null(ask(&sc, p, "read_env", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.o, TG_SHARED_UNAVAILABLE);
    member_free(c);

    member_free(a);
    member_free(b);
    tg_policy_unref(p);
    tg_counters_free(gw.counters);
}

/* A brake counts the identical calls made through every member: two through a, the third through
 * b is braked, spending nothing. */
static void brake_across_members(void **state)
{
    struct tg_server gw = {0};
    gw.counters = tg_counters_new();
    struct tg_shared local, sa, sb;
    tg_shared_local(&local, &gw);
    struct tg_cluster *a = member("a", "tgstore6:", 0, TG_CLUSTER_LOCAL, &local);
    struct tg_cluster *b = member("b", "tgstore6:", 0, TG_CLUSTER_LOCAL, &local);
    tg_cluster_store(a, &sa);
    tg_cluster_store(b, &sb);
    struct tg_policy *p = compile("{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"t\":{\"limits\":"
                                  "[{\"counter\":\"c\",\"window\":\"day\",\"max\":10,\"scope\":\"grant\"}],"
                                  "\"brake\":{\"repeats\":2,\"within\":\"60s\"}}}}");
    struct decided x;
    struct tg_decision d;
    for (int i = 0; i < 2; i++) {
        assert_non_null(ask(&sa, p, "t", &x, &d));
        wait_decided(&x);
        assert_int_equal(x.d.verdict, TG_VERDICT_ALLOW);
    }
    uint64_t rounds = tg_cluster_stats(b)->rounds;
    assert_non_null(ask(&sb, p, "t", &x, &d));
    wait_decided(&x);
    assert_int_equal(x.o, TG_SHARED_DECIDED);
    assert_int_equal(x.d.verdict, TG_VERDICT_LIMITED);
    assert_string_equal(x.d.rule, "brake");
    assert_int_equal(x.d.nres, 0); /* spends nothing */
    assert_int_equal(tg_cluster_stats(b)->rounds - rounds, 1);
    /* a braked call is not recorded: its add sent ahead is taken back before the answer */
    assert_int_equal(tg_cluster_stats(b)->history_adds - tg_cluster_stats(b)->history_dels, 0);
    assert_int_equal(history_len("tgstore6:"), 2);
    member_free(a);
    member_free(b);
    tg_policy_unref(p);
    tg_counters_free(gw.counters);
}

/* ---- session records ---------------------------------------------------------------------- */

struct fetched {
    int done, found;
    char grant[64], upstream[64], up_session[64], instance[64];
};

static void on_record(void *ud, int found, const struct tg_shared_session_rec *rec, const char *why)
{
    struct fetched *f = ud;
    f->done = 1;
    f->found = found;
    if (found == 1) {
        snprintf(f->grant, sizeof(f->grant), "%s", rec->grant);
        snprintf(f->upstream, sizeof(f->upstream), "%s", rec->upstream);
        snprintf(f->up_session, sizeof(f->up_session), "%s", rec->up_session ? rec->up_session : "");
        snprintf(f->instance, sizeof(f->instance), "%s", rec->instance ? rec->instance : "");
    }
    (void)why;
}

static void fetch(const struct tg_shared *st, const char *id, struct fetched *f)
{
    memset(f, 0, sizeof(*f));
    st->ops->session_fetch(st->ud, id, on_record, f);
    assert_int_equal(f->done, 0); /* never inside */
    th_run_until(loop, &f->done, 5000);
    assert_int_equal(f->done, 1);
}

static char ended[64];
static int nended;
static void on_ended(void *ud, const char *id)
{
    (void)ud;
    nended++;
    snprintf(ended, sizeof(ended), "%s", id);
}

static void session_records(void **state)
{
    struct tg_server gw = {0};
    gw.counters = tg_counters_new();
    struct tg_shared local, a, b;
    tg_shared_local(&local, &gw);
    struct tg_cluster *ca = member("a", "tgstore3:", 0, TG_CLUSTER_DENY, &local);
    struct tg_cluster *cb = member("b", "tgstore3:", 0, TG_CLUSTER_DENY, &local);
    tg_cluster_store(ca, &a);
    tg_cluster_store(cb, &b);
    tg_cluster_sessions_watch(cb, on_ended, NULL);

    struct tg_session_table *t = tg_session_table_new();
    uint8_t secret[32];
    memset(secret, 7, sizeof(secret));
    tg_session_table_seal(t, secret);
    struct tg_session *s = tg_session_create(t, "g", 0);
    s->initialized = 1;
    s->proto = "2025-06-18";
    s->up_session = tg_xstrdup("up-1");
    struct tg_upstream_conf http = {0}, stdio = {0};
    http.name = "main";
    http.transport = TG_UP_STREAMABLE;
    stdio.name = "child";
    stdio.transport = TG_UP_STDIO;

    struct fetched f;
    a.ops->session_share(a.ud, s, &stdio);
    assert_int_equal(s->shared, 0); /* a child lives inside one gateway */
    fetch(&b, s->id_str, &f);
    assert_int_equal(f.found, 0);

    a.ops->session_share(a.ud, s, &http);
    assert_int_equal(s->shared, 1);
    fetch(&b, s->id_str, &f);
    assert_int_equal(f.found, 1);
    assert_string_equal(f.grant, "g");
    assert_string_equal(f.upstream, "main");
    assert_string_equal(f.up_session, "up-1");
    assert_string_equal(f.instance, "a");

    /* Write access to Redis alone cannot move the session to another grant. */
    redisContext *c = redisConnect("127.0.0.1", rs.port);
    redisReply *y = redisCommand(c, "GET tgstore3:s:%s", s->id_str);
    assert_true(y != NULL && y->type == REDIS_REPLY_STRING);
    char *forged = tg_xstrdup(y->str);
    freeReplyObject(y);
    char *at = strstr(forged, "\"grant\":\"g\"");
    assert_non_null(at);
    at[9] = 'h';
    y = redisCommand(c, "SET tgstore3:s:%s %s", s->id_str, forged);
    freeReplyObject(y);
    free(forged);
    fetch(&b, s->id_str, &f);
    assert_int_equal(f.found, 0);

    a.ops->session_share(a.ud, s, &http); /* written again */
    settle(ca); /* a's SET and b's GET go on two connections: no order between them otherwise */
    fetch(&b, s->id_str, &f);
    assert_int_equal(f.found, 1);
    nended = 0;
    a.ops->session_forget(a.ud, s->id_str);
    th_run_until(loop, &nended, 5000);
    assert_int_equal(nended, 1);
    assert_string_equal(ended, s->id_str); /* every member hears it */
    fetch(&b, s->id_str, &f);
    assert_int_equal(f.found, 0);
    redisFree(c);

    member_free(ca);
    member_free(cb);
    tg_session_table_free(t);
    tg_counters_free(gw.counters);
}

/* ---- the approvals mirror ------------------------------------------------------------------ */

struct listed {
    int done;
    size_t n, ndecided; /* pending ones, and decided ones (shown as such) */
    char id[40], tool[40], instance[40], by[40];
};

static void on_listed(void *ud, const struct tg_approval_item *items, size_t n)
{
    struct listed *l = ud;
    l->done = 1;
    for (size_t i = 0; i < n; i++) {
        if (items[i].decision != NULL) {
            snprintf(l->by, sizeof(l->by), "%s", items[i].by ? items[i].by : "");
            l->ndecided++;
            continue;
        }
        if (l->n++ == 0) {
            snprintf(l->id, sizeof(l->id), "%s", items[i].id);
            snprintf(l->tool, sizeof(l->tool), "%s", items[i].tool);
            snprintf(l->instance, sizeof(l->instance), "%s", items[i].instance ? items[i].instance : "");
        }
    }
}

static void list(const struct tg_shared *st, struct listed *l)
{
    memset(l, 0, sizeof(*l));
    st->ops->approvals_list(st->ud, on_listed, l);
    th_run_until(loop, &l->done, 5000);
    assert_int_equal(l->done, 1);
}

struct verdict {
    int done, rc;
};

static void on_approval(void *ud, int rc, const char *why)
{
    struct verdict *v = ud;
    v->done = 1;
    v->rc = rc;
    (void)why;
}

static void approvals_mirror(void **state)
{
    struct mw *mb = mw_new_on(FAKE_HTTP, NULL, loop); /* member b: no call of its own */
    struct mw *ma = mw_new_on(FAKE_HTTP, NULL, loop);
    struct tg_shared local_a = ma->srv.store, local_b = mb->srv.store;
    struct tg_cluster *ca = member("a", "tgstore4:", 0, TG_CLUSTER_DENY, &local_a);
    struct tg_cluster *cb = member("b", "tgstore4:", 0, TG_CLUSTER_DENY, &local_b);
    tg_cluster_store(ca, &ma->srv.store);
    tg_cluster_store(cb, &mb->srv.store);
    const struct tg_shared *b = &mb->srv.store;

    struct tg_session *s = mw_session(ma, 0);
    struct rec r;
    rec_init(&r);
    char body[256];
    mw_send(ma, s, fsink_new(&r, 0), mw_call(body, sizeof(body), "\"d1\"", "deploy"));
    assert_int_equal(ma->srv.napprovals, 0); /* deploy's bucket is in Redis: the decision waits */
    for (uint64_t t = th_ms(); th_ms() - t < 5000 && ma->srv.napprovals == 0;) {
        int never = 0;
        th_run_until(loop, &never, 5);
    }
    assert_int_equal(ma->srv.napprovals, 1);
    char id[40];
    snprintf(id, sizeof(id), "%s", r.k->approval_id);

    struct listed l;
    list(b, &l);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.id, id);
    assert_string_equal(l.tool, "deploy");
    assert_string_equal(l.instance, "a");

    struct verdict v = {0};
    b->ops->approval_decide(b->ud, tg_slice_cstr("ffffffffffffffffffffffffffffffff"), 1, NULL, "carol", NULL, on_approval, &v);
    th_run_until(loop, &v.done, 5000);
    assert_int_equal(v.rc, TG_APPROVAL_UNKNOWN);

    memset(&v, 0, sizeof(v));
    b->ops->approval_decide(b->ud, tg_slice_cstr(id), 1, "0000000000000000000000000000000000000000000000000000000000000000",
                            "carol", NULL, on_approval, &v);
    th_run_until(loop, &v.done, 5000);
    assert_int_equal(v.rc, TG_APPROVAL_STALE); /* not the digest b lists: nothing published */
    assert_int_equal(ma->srv.napprovals, 1);

    memset(&v, 0, sizeof(v));
    b->ops->approval_decide(b->ud, tg_slice_cstr(id), 1, r.k->approval_digest, "carol", NULL, on_approval, &v);
    th_run_until(loop, &v.done, 5000);
    assert_int_equal(v.rc, 0); /* a heard it */
    int sent = 0;
    for (uint64_t t = th_ms(); th_ms() - t < 5000 && !sent;) {
        int never = 0;
        th_run_until(loop, &never, 5);
        sent = fake.nsend == 1;
    }
    assert_true(sent); /* a sent it, as its own approver's decision */
    assert_int_equal(ma->srv.napprovals, 0);
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_string_equal(r.answer.base, "{\"jsonrpc\":\"2.0\",\"id\":\"d1\",\"result\":{}}");
    for (uint64_t t = th_ms(); th_ms() - t < 5000;) { /* a's HDEL and b's read go on two connections */
        list(b, &l);
        if (l.n == 0)
            break;
    }
    assert_int_equal(l.n, 0); /* gone from the pending ones */
    assert_int_equal(l.ndecided, 1);
    assert_string_equal(l.by, "carol@b"); /* shown as decided, by whom and where */
    rec_dispose(&r);

    member_free(ca);
    member_free(cb);
    ma->srv.store = local_a;
    mb->srv.store = local_b;
    mw_free(ma);
    mw_free(mb);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    loop = uv_default_loop();
    th_start(&rs);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(decide_refund_detach),
        cmocka_unit_test(refusal_gives_back_first),
        cmocka_unit_test(unreachable_redis),
        cmocka_unit_test(history_across_members),
        cmocka_unit_test(brake_across_members),
        cmocka_unit_test(session_records),
        cmocka_unit_test(approvals_mirror),
    };
    int rc = TG_UNIT_RUN(tests, argc, argv);
    th_kill(&rs);
    uv_loop_close(loop);
    return rc;
}
