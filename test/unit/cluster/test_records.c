/* cluster/records.c: a retry record's value in Redis (STATE ID MAC "." JSON), signed under the
 * cluster's secret. What a member wrote opens to the same record; anything else (another
 * secret, another key, a changed byte of the JSON, a STATE or ID that is not the signed one, no
 * MAC) does not open. No Redis here: the scripts are exercised by test/interop/cluster.test.mjs. */
#include "test/unit/unit.h"

#include <cjson/cJSON.h>

#include "cluster/internal.h"
#include "core/base/buf.h"

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

int main(int argc, char **argv)
{
    memset(secret, 7, sizeof(secret));
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(i * 37 + 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(refused),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
