/* cluster/records.c: a retry record's value in Redis (STATE ID MAC "." JSON), signed under the
 * cluster's secret. What a member wrote opens to the same record; anything else (another
 * secret, another key, a changed byte of the JSON, a STATE or ID that is not the signed one, no
 * MAC) does not open. Then the store's record operations against a redis-server of the test's
 * own: made, found, taken once, busy, given back, used, dropped, a detached lookup undone, a
 * changed value ignored and counted. */
#include "test/unit/unit.h"
#include "test/unit/cluster/redis_helpers.h"

#include <cjson/cJSON.h>

#include "cluster/cluster.h"
#include "cluster/internal.h"
#include "core/call/call.h"
#include "core/base/buf.h"
#include "core/call/shared.h"

static uint8_t secret[32], key[32];
static const char *ID = "0123456789abcdef0123456789abcdef";

static void encode(const struct tg_approval_record *r, struct tg_buf *out)
{
    tg_buf_init(out);
    tg__cluster_record_encode(secret, r, "member-a", out);
    tg_buf_append(out, "", 1);
    out->len--;
}

/* 1 if v opens for key under secret; its record in *r (strings valid until *doc is deleted). */
static int opens(const uint8_t *sec, const uint8_t *k, const char *v, size_t n, struct tg_approval_record *r,
                 int *taken, cJSON **doc)
{
    *doc = tg__cluster_record_open(sec, k, v, n, r, taken);
    return *doc != NULL;
}

static void round_trip(void **state)
{
    (void)state;
    static const int states[] = {TG_RECORD_PENDING, TG_RECORD_APPROVED, TG_RECORD_DENIED};
    static const char chars[] = {'P', 'A', 'D'};
    for (int i = 0; i < 3; i++) {
        struct tg_approval_record in = {.id = ID, .state = states[i], .expires_ms = 1800000000123ull};
        memcpy(in.key, key, 32);
        if (states[i] != TG_RECORD_PENDING)
            in.by = "carol@b";
        if (states[i] == TG_RECORD_DENIED)
            in.reason = "not on a \"Friday\"\n";
        struct tg_buf v;
        encode(&in, &v);
        assert_int_equal(v.base[0], chars[i]);
        assert_memory_equal(v.base + 1, ID, 32);
        assert_int_equal(v.base[97], '.');
        struct tg_approval_record out;
        int taken = -1;
        cJSON *doc;
        assert_true(opens(secret, key, v.base, v.len, &out, &taken, &doc));
        assert_int_equal(taken, 0);
        assert_int_equal(out.state, states[i]);
        assert_string_equal(out.id, ID);
        assert_memory_equal(out.key, key, 32);
        assert_true(out.expires_ms == in.expires_ms);
        if (in.by)
            assert_string_equal(out.by, in.by);
        else
            assert_null(out.by);
        if (in.reason)
            assert_string_equal(out.reason, in.reason);
        else
            assert_null(out.reason);
        cJSON_Delete(doc);
        /* taken (T): only an approved record may be */
        v.base[0] = 'T';
        int ok = opens(secret, key, v.base, v.len, &out, &taken, &doc);
        assert_int_equal(ok, states[i] == TG_RECORD_APPROVED);
        if (ok)
            assert_int_equal(taken, 1);
        cJSON_Delete(doc);
        /* another state's letter in front of the signed JSON */
        for (int j = 0; j < 3; j++) {
            v.base[0] = chars[j];
            assert_int_equal(opens(secret, key, v.base, v.len, &out, &taken, &doc), i == j);
            cJSON_Delete(doc);
        }
        tg_buf_dispose(&v);
    }
}

static void refused(void **state)
{
    (void)state;
    struct tg_approval_record in = {.id = ID, .state = TG_RECORD_APPROVED, .by = "carol", .expires_ms = 1800000000000ull};
    memcpy(in.key, key, 32);
    struct tg_buf v;
    encode(&in, &v);
    struct tg_approval_record out;
    int taken;
    cJSON *doc;
    /* another secret, another key */
    uint8_t other[32];
    memcpy(other, secret, 32);
    other[31] ^= 1;
    assert_false(opens(other, key, v.base, v.len, &out, &taken, &doc));
    memcpy(other, key, 32);
    other[0] ^= 0x80;
    assert_false(opens(secret, other, v.base, v.len, &out, &taken, &doc));
    /* every byte after the state letter, changed, refuses it (ID, MAC, dot, JSON) */
    for (size_t i = 1; i < v.len; i++) {
        char was = v.base[i];
        v.base[i] = was == 'x' ? 'y' : 'x';
        assert_false(opens(secret, key, v.base, v.len, &out, &taken, &doc));
        v.base[i] = was;
    }
    /* cut short, or no MAC at all */
    assert_false(opens(secret, key, v.base, v.len - 1, &out, &taken, &doc));
    assert_false(opens(secret, key, v.base, 97, &out, &taken, &doc));
    struct tg_buf bare;
    tg_buf_init(&bare);
    tg_buf_append(&bare, v.base, 33);
    tg_buf_append(&bare, v.base + 97, v.len - 97);
    assert_false(opens(secret, key, bare.base, bare.len, &out, &taken, &doc));
    tg_buf_dispose(&bare);
    /* the value as written still opens */
    assert_true(opens(secret, key, v.base, v.len, &out, &taken, &doc));
    cJSON_Delete(doc);
    tg_buf_dispose(&v);
}

/* ---- against Redis -------------------------------------------------------------------------- */

static struct th_server rs;
static uv_loop_t *loop;

struct found {
    int done, found, state;
    char id[33], reason[100];
};

static void on_found(void *ud, int found, const struct tg_approval_record *rec, const char *why)
{
    (void)why;
    struct found *f = ud;
    f->done = 1;
    f->found = found;
    if (rec != NULL) {
        f->state = rec->state;
        snprintf(f->id, sizeof(f->id), "%s", rec->id);
        snprintf(f->reason, sizeof(f->reason), "%s", rec->reason ? rec->reason : "");
    }
}

static struct found find(struct tg_shared *st, const char *id)
{
    struct found f = {0};
    struct tg_approval_record mine = {.id = id, .state = TG_RECORD_PENDING, .expires_ms = (uint64_t)wall_ms() + 60000};
    memcpy(mine.key, key, 32);
    st->ops->record_find(st->ud, &mine, on_found, &f);
    assert_int_equal(f.done, 0); /* never inside the call */
    assert_true(th_run_until(loop, &f.done, 5000));
    return f;
}

/* The record's value in Redis now ("" when there is none), through a connection of the test's. */
static void value(redisContext *c, const char *rkey, char *out, size_t n)
{
    redisReply *y = redisCommand(c, "GET %s", rkey);
    snprintf(out, n, "%s", y && y->type == REDIS_REPLY_STRING ? y->str : "");
    freeReplyObject(y);
}

/* Run the loop until the record's first letter is c (0: gone). */
static void wait_letter(redisContext *rc, const char *rkey, char c)
{
    char v[2048];
    for (uint64_t t = th_ms(); th_ms() - t < 5000;) {
        value(rc, rkey, v, sizeof(v));
        if (v[0] == c)
            return;
        int never = 0;
        th_run_until(loop, &never, 5);
    }
    fail_msg("record %s: wanted '%c', have %.40s", rkey, c ? c : '0', v);
}

static void against_redis(void **state)
{
    (void)state;
    struct tg_cluster_conf cc = {.enabled = 1, .key_prefix = "rec:", .instance = "a", .timeout_ms = 3000,
                                 .backoff_ms = 50, .backoff_max_ms = 400, .session_ttl_ms = 60000};
    char addr[64], why[256];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", rs.port);
    cc.redis = addr;
    memcpy(cc.secret, secret, 32);
    struct tg_shared none = {0};
    struct tg_cluster *cl = tg_cluster_new(loop, &cc, &none, why, sizeof(why));
    assert_non_null(cl);
    for (uint64_t t = th_ms(); th_ms() - t < 10000 && !tg_cluster_up(cl);) {
        int never = 0;
        th_run_until(loop, &never, 10);
    }
    assert_true(tg_cluster_up(cl));
    struct tg_shared st;
    tg_cluster_store(cl, &st);
    struct timeval tv = {2, 0};
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", rs.port, tv);
    assert_true(rc != NULL && !rc->err);
    char hex[65], rkey[100], v[2048];
    tg_hex_encode(key, 32, hex);
    snprintf(rkey, sizeof(rkey), "rec:ar:%s", hex);
    const char *id1 = "11111111111111111111111111111111", *id2 = "22222222222222222222222222222222";

    /* none: mine is the record; an identical lookup finds it pending */
    struct found f = find(&st, id1);
    assert_int_equal(f.found, TG_RECORD_MINE);
    value(rc, rkey, v, sizeof(v));
    assert_int_equal(v[0], 'P');
    assert_memory_equal(v + 1, id1, 32);
    f = find(&st, id2);
    assert_int_equal(f.found, TG_RECORD_FOUND);
    assert_int_equal(f.state, TG_RECORD_PENDING);
    assert_string_equal(f.id, id1);
    /* dropped only by its own id */
    st.ops->record_drop(st.ud, key, id2);
    st.ops->record_drop(st.ud, key, id1);
    wait_letter(rc, rkey, 0);

    /* approved: taken by one lookup, busy for the next; given back, taken again, used */
    struct tg_approval_record ok = {.id = id1, .state = TG_RECORD_APPROVED, .by = "carol",
                                    .expires_ms = (uint64_t)wall_ms() + 60000};
    memcpy(ok.key, key, 32);
    st.ops->record_put(st.ud, &ok);
    wait_letter(rc, rkey, 'A');
    f = find(&st, id2);
    assert_int_equal(f.found, TG_RECORD_FOUND);
    assert_int_equal(f.state, TG_RECORD_APPROVED);
    assert_string_equal(f.id, id1);
    value(rc, rkey, v, sizeof(v));
    assert_int_equal(v[0], 'T');
    assert_int_equal(find(&st, id2).found, TG_RECORD_BUSY);
    st.ops->record_settled(st.ud, key, id1, 1);
    wait_letter(rc, rkey, 'A');
    assert_int_equal(find(&st, id2).found, TG_RECORD_FOUND);
    st.ops->record_settled(st.ud, key, id1, 0);
    wait_letter(rc, rkey, 0);
    f = find(&st, id2); /* used: the next one is a new pending record */
    assert_int_equal(f.found, TG_RECORD_MINE);
    st.ops->record_drop(st.ud, key, id2);
    wait_letter(rc, rkey, 0);

    /* a lookup whose caller went before the answer: what it took goes back */
    st.ops->record_put(st.ud, &ok);
    wait_letter(rc, rkey, 'A');
    struct found gone = {0};
    struct tg_approval_record mine = {.id = id2, .state = TG_RECORD_PENDING, .expires_ms = (uint64_t)wall_ms() + 60000};
    memcpy(mine.key, key, 32);
    st.ops->record_detach(st.ud, st.ops->record_find(st.ud, &mine, on_found, &gone));
    int never = 0;
    th_run_until(loop, &never, 100);
    wait_letter(rc, rkey, 'A');
    assert_int_equal(gone.done, 0);

    /* denied, with the approver's words, for every lookup */
    struct tg_approval_record no = {.id = id1, .state = TG_RECORD_DENIED, .by = "dave", .reason = "not today",
                                    .expires_ms = (uint64_t)wall_ms() + 60000};
    memcpy(no.key, key, 32);
    st.ops->record_put(st.ud, &no);
    wait_letter(rc, rkey, 'D');
    for (int i = 0; i < 2; i++) {
        f = find(&st, id2);
        assert_int_equal(f.found, TG_RECORD_FOUND);
        assert_int_equal(f.state, TG_RECORD_DENIED);
        assert_string_equal(f.reason, "not today");
    }

    /* a changed value (the reason) is ignored and counted: the lookup's own record replaces it */
    value(rc, rkey, v, sizeof(v));
    char *r = strstr(v, "not today");
    assert_non_null(r);
    r[0] = 'N';
    redisReply *y = redisCommand(rc, "SET %s %s", rkey, v);
    freeReplyObject(y);
    uint64_t before = tg_cluster_stats(cl)->records_refused;
    f = find(&st, id2);
    assert_int_equal(f.found, TG_RECORD_MINE);
    assert_true(tg_cluster_stats(cl)->records_refused == before + 1);
    value(rc, rkey, v, sizeof(v));
    assert_int_equal(v[0], 'P');
    assert_memory_equal(v + 1, id2, 32);

    redisFree(rc);
    tg_cluster_free(cl);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    loop = uv_default_loop();
    th_start(&rs);
    memset(secret, 7, sizeof(secret));
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(i * 37 + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(refused),
        cmocka_unit_test(against_redis),
    };
    int rc = TG_UNIT_RUN(tests, argc, argv);
    th_kill(&rs);
    uv_loop_close(loop);
    return rc;
}
