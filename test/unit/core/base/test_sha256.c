/* core/base/sha256.c and sha256_portable.c: every way tollgate computes SHA-256 (the CPU's
 * instructions, the portable C compiled for any CPU and for AVX2+BMI2 ones, one-shot and in
 * pieces) and the HMAC on it give FIPS 180-4's and RFC 4231's answers, and mbedtls's for every
 * length around the block and padding edges. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/md.h>
#include <mbedtls/sha256.h>

#include "core/base/sha256.h"

/* A one-shot digest through one compression function, the way tg_sha256_portable does it: for
 * an even length, a last whole block goes with the padding (tg__sha256_pad's tail of 64..127). */
static void with_blocks(tg__sha256_blocks_fn *fn, const uint8_t *p, size_t n, uint8_t out[32])
{
    uint32_t state[8];
    size_t whole = n / 64;
    if (n % 2 == 0 && whole > 0)
        whole--;
    memcpy(state, tg__sha256_h0, sizeof(state));
    fn(state, p, whole);
    tg__sha256_pad(state, fn, p + whole * 64, n - whole * 64, n, out);
}

static int avx2_cpu(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2");
#else
    return 0;
#endif
}

static void via_base(const uint8_t *p, size_t n, uint8_t out[32]) { with_blocks(tg__sha256_blocks_base, p, n, out); }

#if defined(__x86_64__) && defined(__GNUC__)
static void via_avx2(const uint8_t *p, size_t n, uint8_t out[32]) { with_blocks(tg__sha256_blocks_avx2, p, n, out); }
#endif

static void via_portable(const uint8_t *p, size_t n, uint8_t out[32]) { tg_sha256_portable(p, n, out); }

static void via_default(const uint8_t *p, size_t n, uint8_t out[32]) { tg_sha256(p, n, out); }

/* in pieces of 1, 2, 3 ... bytes, growing, so every piece boundary meets every block offset */
static void via_pieces(const uint8_t *p, size_t n, uint8_t out[32])
{
    struct tg_sha256_ctx c;
    tg_sha256_init(&c);
    for (size_t at = 0, k = 1; at < n; at += k, k = k % 131 + 1)
        tg_sha256_update(&c, p + at, k < n - at ? k : n - at);
    tg_sha256_final(&c, out);
}

struct way {
    const char *name;
    void (*fn)(const uint8_t *p, size_t n, uint8_t out[32]);
    int accelerated; /* run with tg_sha256_set_accelerated(accelerated) */
};

/* Every way the running CPU can take. */
static size_t ways(struct way w[8])
{
    size_t n = 0;
    w[n++] = (struct way){"portable", via_portable, 1};
    w[n++] = (struct way){"portable C for any CPU", via_base, 1};
#if defined(__x86_64__) && defined(__GNUC__)
    if (avx2_cpu())
        w[n++] = (struct way){"portable C for AVX2", via_avx2, 1};
#endif
    w[n++] = (struct way){"tg_sha256", via_default, 1};
    w[n++] = (struct way){"tg_sha256, instructions off", via_default, 0};
    w[n++] = (struct way){"in pieces", via_pieces, 1};
    w[n++] = (struct way){"in pieces, instructions off", via_pieces, 0};
    return n;
}

static void hex(const uint8_t *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void fill_random(uint8_t *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)(x >> 24);
    }
}

static int setup(void **state)
{
    (void)state;
    print_message("SHA-256 instructions: %d, AVX2+BMI2: %d\n", tg_sha256_accelerated(), avx2_cpu());
    return 0;
}

static int restore(void **state)
{
    (void)state;
    tg_sha256_set_accelerated(1);
    return 0;
}

/* FIPS 180-4's examples (and the NIST test vectors' long message), every way. */
static void fips_vectors(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        size_t repeat;
        const char *digest;
    } v[] = {
        {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    struct way w[8];
    size_t nw = ways(w);
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        size_t len = strlen(v[i].text), n = len * v[i].repeat;
        uint8_t *msg = malloc(n + 1);
        assert_non_null(msg);
        for (size_t r = 0; r < v[i].repeat; r++)
            memcpy(msg + r * len, v[i].text, len);
        for (size_t k = 0; k < nw; k++) {
            uint8_t d[32];
            char got[65];
            tg_sha256_set_accelerated(w[k].accelerated);
            w[k].fn(msg, n, d);
            hex(d, 32, got);
            if (strcmp(got, v[i].digest) != 0)
                fail_msg("%s: \"%s\" x %zu gave %s, not %s", w[k].name, v[i].text, v[i].repeat, got, v[i].digest);
        }
        tg_sha256_set_accelerated(1);
        free(msg);
    }
}

/* An empty message given as NULL, each way in: the digest of nothing. */
static void null_and_empty(void **state)
{
    (void)state;
    static const uint8_t empty[32] = {0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4,
                                      0xc8, 0x99, 0x6f, 0xb9, 0x24, 0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b,
                                      0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55};
    for (int on = 1; on >= 0; on--) {
        uint8_t d[32], a[32], b[32];
        tg_sha256_set_accelerated(on);
        tg_sha256(NULL, 0, d);
        assert_memory_equal(d, empty, 32);
        tg_sha256_portable(NULL, 0, d);
        assert_memory_equal(d, empty, 32);
        struct tg_sha256_ctx c;
        tg_sha256_init(&c);
        tg_sha256_update(&c, NULL, 0);
        tg_sha256_final(&c, d);
        assert_memory_equal(d, empty, 32);
        tg_hmac_sha256(NULL, 0, NULL, 0, a);
        assert_int_equal(mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), (const uint8_t *)"", 0,
                                         (const uint8_t *)"", 0, b),
                         0);
        assert_memory_equal(a, b, 32);
    }
}

/* Random bytes of every length 0..300 (one to five blocks, both padding cases, every tail
 * length), at every alignment 0..7 in turn: mbedtls's digest, every way. */
static void matches_mbedtls(void **state)
{
    (void)state;
    uint8_t buf[300 + 8];
    struct way w[8];
    size_t nw = ways(w);
    for (size_t n = 0; n <= 300; n++) {
        fill_random(buf, sizeof(buf), 0x9E3779B97F4A7C15ULL + n);
        const uint8_t *p = buf + n % 8;
        uint8_t want[32];
        assert_int_equal(mbedtls_sha256_ret(p, n, want, 0), 0);
        for (size_t k = 0; k < nw; k++) {
            uint8_t d[32];
            tg_sha256_set_accelerated(w[k].accelerated);
            w[k].fn(p, n, d);
            if (memcmp(d, want, 32) != 0)
                fail_msg("%s: %zu random bytes differ from mbedtls", w[k].name, n);
        }
    }
}

/* A message of 300 bytes cut in two at every offset, and in three at every pair of offsets
 * 1..130 apart: the digest of the whole, with the instructions and without. */
static void pieces_at_every_offset(void **state)
{
    (void)state;
    uint8_t msg[300], want[32];
    fill_random(msg, sizeof(msg), 42);
    tg_sha256_portable(msg, sizeof(msg), want);
    for (int on = 1; on >= 0; on--) {
        tg_sha256_set_accelerated(on);
        for (size_t i = 0; i <= sizeof(msg); i++) {
            struct tg_sha256_ctx c;
            uint8_t d[32];
            tg_sha256_init(&c);
            tg_sha256_update(&c, msg, i);
            tg_sha256_update(&c, msg + i, sizeof(msg) - i);
            tg_sha256_final(&c, d);
            if (memcmp(d, want, 32) != 0)
                fail_msg("cut at %zu (instructions %d): differs", i, on);
            for (size_t j = i; j <= sizeof(msg) && j <= i + 130; j++) {
                tg_sha256_init(&c);
                tg_sha256_update(&c, msg, i);
                tg_sha256_update(&c, msg + i, j - i);
                tg_sha256_update(&c, msg + j, sizeof(msg) - j);
                tg_sha256_final(&c, d);
                if (memcmp(d, want, 32) != 0)
                    fail_msg("cut at %zu and %zu (instructions %d): differs", i, j, on);
            }
        }
        /* a finished digest starts again from _init */
        struct tg_sha256_ctx c;
        uint8_t d[32], abc[32];
        tg_sha256_init(&c);
        tg_sha256_update(&c, msg, 100);
        tg_sha256_final(&c, d);
        tg_sha256_init(&c);
        tg_sha256_update(&c, "abc", 3);
        tg_sha256_final(&c, d);
        tg_sha256_portable("abc", 3, abc);
        assert_memory_equal(d, abc, 32);
    }
}

/* RFC 4231's test cases 1-7 (case 5 compares the 128 bits it gives). */
static void hmac_rfc4231(void **state)
{
    (void)state;
    uint8_t k20b[20], k20a[20], k25[25], k20c[20], k131[131], dd[50], cd[50];
    memset(k20b, 0x0b, sizeof(k20b));
    memset(k20a, 0xaa, sizeof(k20a));
    for (int i = 0; i < 25; i++)
        k25[i] = (uint8_t)(i + 1);
    memset(k20c, 0x0c, sizeof(k20c));
    memset(k131, 0xaa, sizeof(k131));
    memset(dd, 0xdd, sizeof(dd));
    memset(cd, 0xcd, sizeof(cd));
    static const char big_key[] = "Test Using Larger Than Block-Size Key - Hash Key First";
    static const char big_both[] = "This is a test using a larger than block-size key and a larger than block-size "
                                   "data. The key needs to be hashed before being used by the HMAC algorithm.";
    const struct {
        const void *key;
        size_t keylen;
        const void *data;
        size_t len;
        const char *mac;
    } v[] = {
        {k20b, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", 4, "what do ya want for nothing?", 28,
         "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {k20a, 20, dd, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
        {k25, 25, cd, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
        {k20c, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b"},
        {k131, 131, big_key, strlen(big_key), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
        {k131, 131, big_both, strlen(big_both), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
    };
    for (int on = 1; on >= 0; on--) {
        tg_sha256_set_accelerated(on);
        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
            uint8_t mac[32];
            char got[65];
            tg_hmac_sha256(v[i].key, v[i].keylen, v[i].data, v[i].len, mac);
            hex(mac, 32, got);
            if (strncmp(got, v[i].mac, strlen(v[i].mac)) != 0)
                fail_msg("test case %zu (instructions %d): %s, not %s", i + 1, on, got, v[i].mac);
        }
    }
}

/* Keys of every length 0..140 (shorter than, as long as and longer than a block) and messages
 * of 0..200 bytes: mbedtls's HMAC; and tg_hmac_labelled is HMAC under HMAC(secret, label). */
static void hmac_matches_mbedtls(void **state)
{
    (void)state;
    const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    uint8_t key[140], msg[200];
    fill_random(key, sizeof(key), 7);
    fill_random(msg, sizeof(msg), 8);
    for (int on = 1; on >= 0; on--) {
        tg_sha256_set_accelerated(on);
        for (size_t kl = 0; kl <= sizeof(key); kl++) {
            size_t n = (kl * 37) % (sizeof(msg) + 1);
            uint8_t a[32], b[32];
            tg_hmac_sha256(key, kl, msg, n, a);
            assert_int_equal(mbedtls_md_hmac(md, key, kl, msg, n, b), 0);
            if (memcmp(a, b, 32) != 0)
                fail_msg("key of %zu bytes, message of %zu (instructions %d): differs from mbedtls", kl, n, on);
        }
        for (size_t n = 0; n <= sizeof(msg); n++) {
            uint8_t a[32], b[32];
            tg_hmac_sha256(key, 32, msg, n, a);
            assert_int_equal(mbedtls_md_hmac(md, key, 32, msg, n, b), 0);
            if (memcmp(a, b, 32) != 0)
                fail_msg("message of %zu bytes (instructions %d): differs from mbedtls", n, on);
        }
        uint8_t k[32], a[32], b[32];
        assert_int_equal(mbedtls_md_hmac(md, key, 32, (const uint8_t *)"a label", 7, k), 0);
        assert_int_equal(mbedtls_md_hmac(md, k, 32, msg, 100, b), 0);
        tg_hmac_labelled(key, "a label", msg, 100, a);
        assert_memory_equal(a, b, 32);
        tg_hmac_labelled(key, "a label", NULL, 0, a);
        assert_memory_equal(a, k, 32);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(fips_vectors, restore),
        cmocka_unit_test_teardown(null_and_empty, restore),
        cmocka_unit_test_teardown(matches_mbedtls, restore),
        cmocka_unit_test_teardown(pieces_at_every_offset, restore),
        cmocka_unit_test_teardown(hmac_rfc4231, restore),
        cmocka_unit_test_teardown(hmac_matches_mbedtls, restore),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
