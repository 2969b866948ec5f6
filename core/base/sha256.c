#include "core/base/sha256.h"

#include <string.h>

#include <mbedtls/platform_util.h>

/* SHA-256 with the x86 SHA extensions (FIPS 180-4; the instructions as Intel documents them):
 * a 64-byte block in a few dozen instructions instead of portable rounds, which cost a tenth of
 * a proxied call for the audit log's argument digest. Used when the CPU has them (cpuid); the
 * portable C of sha256_portable.c otherwise (and under valgrind, which hides them). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#define SHA_TARGET __attribute__((target("sha,sse4.1,ssse3")))
#define NI 1
#define K tg__sha256_k

/* Four rounds with the message words m (W[4g..4g+3]) and the constants of group g. */
#define RNDS4(m, g)                                                                                                    \
    do {                                                                                                               \
        __m128i k_ = _mm_add_epi32((m), _mm_loadu_si128((const __m128i *)(K + 4 * (g))));                              \
        s1 = _mm_sha256rnds2_epu32(s1, s0, k_);                                                                        \
        s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(k_, 0x0e));                                               \
    } while (0)
/* W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time: a (W[t-16..]) becomes the
 * next four words, from b, c and d, the three groups after it. */
#define NEXT4(a, b, c, d) (a) = _mm_sha256msg2_epu32(_mm_add_epi32(_mm_sha256msg1_epu32((a), (b)), _mm_alignr_epi8((d), (c), 4)), (d))

/* state: ABEF and CDGH, the order the round instruction takes. The schedule rolls through four
 * registers, each group of four words made just before it is needed, so nothing is kept in
 * memory. */
SHA_TARGET static void blocks(__m128i *abef, __m128i *cdgh, const uint8_t *p, size_t nblocks)
{
    const __m128i be = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i s0 = *abef, s1 = *cdgh;
    for (; nblocks > 0; nblocks--, p += 64) {
        __m128i m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)p), be);
        __m128i m1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16)), be);
        __m128i m2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 32)), be);
        __m128i m3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 48)), be);
        __m128i a = s0, c = s1;
        RNDS4(m0, 0);
        RNDS4(m1, 1);
        RNDS4(m2, 2);
        RNDS4(m3, 3);
        for (int g = 4; g < 16; g += 4) {
            NEXT4(m0, m1, m2, m3);
            RNDS4(m0, g);
            NEXT4(m1, m2, m3, m0);
            RNDS4(m1, g + 1);
            NEXT4(m2, m3, m0, m1);
            RNDS4(m2, g + 2);
            NEXT4(m3, m0, m1, m2);
            RNDS4(m3, g + 3);
        }
        s0 = _mm_add_epi32(s0, a);
        s1 = _mm_add_epi32(s1, c);
    }
    *abef = s0;
    *cdgh = s1;
}

SHA_TARGET static void sha256_ni(const uint8_t *p, size_t n, uint8_t out[32])
{
    const uint32_t *h0 = tg__sha256_h0;
    __m128i dcba = _mm_loadu_si128((const __m128i *)h0), hgfe = _mm_loadu_si128((const __m128i *)(h0 + 4));
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xb1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1b);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xf0);
    size_t whole = n / 64;
    blocks(&abef, &cdgh, p, whole);
    uint8_t last[128];
    size_t rest = n - whole * 64;
    memcpy(last, p + whole * 64, rest);
    last[rest] = 0x80;
    size_t total = rest + 1 + 8 <= 64 ? 64 : 128;
    memset(last + rest + 1, 0, total - rest - 1 - 8);
    uint64_t bits = __builtin_bswap64((uint64_t)n * 8); /* big-endian */
    memcpy(last + total - 8, &bits, 8);
    blocks(&abef, &cdgh, last, total / 64);
    /* back to A..H, big-endian */
    __m128i feba = _mm_shuffle_epi32(abef, 0x1b);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xb1);
    __m128i lo = _mm_blend_epi16(feba, dchg, 0xf0); /* DCBA */
    __m128i hi = _mm_alignr_epi8(dchg, feba, 8);    /* HGFE */
    const __m128i be = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    _mm_storeu_si128((__m128i *)out, _mm_shuffle_epi8(lo, be));
    _mm_storeu_si128((__m128i *)(out + 16), _mm_shuffle_epi8(hi, be));
}

/* blocks() on a state in FIPS order (A..H): the incremental digest's and the HMAC's. */
SHA_TARGET static void ni_blocks(uint32_t state[8], const uint8_t *p, size_t nblocks)
{
    __m128i dcba = _mm_loadu_si128((const __m128i *)state), hgfe = _mm_loadu_si128((const __m128i *)(state + 4));
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xb1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1b);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xf0);
    blocks(&abef, &cdgh, p, nblocks);
    __m128i feba = _mm_shuffle_epi32(abef, 0x1b);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xb1);
    _mm_storeu_si128((__m128i *)state, _mm_blend_epi16(feba, dchg, 0xf0));
    _mm_storeu_si128((__m128i *)(state + 4), _mm_alignr_epi8(dchg, feba, 8));
}

static int cpu_has(void)
{
    static int known = -1;
    if (known < 0) {
        unsigned a, b, c, d;
        int sha = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
        int sse = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 19)) && (c & (1u << 9));
        known = sha && sse;
    }
    return known;
}
#else
#define NI 0
static int cpu_has(void) { return 0; }
#endif

static int turned_off;

int tg_sha256_accelerated(void) { return !turned_off && cpu_has(); }

void tg_sha256_set_accelerated(int on) { turned_off = !on; }

void tg_sha256(const void *p, size_t n, uint8_t out[32])
{
    if (p == NULL) /* an empty message may come as NULL; memcpy may not be given one */
        p = "";
#if NI
    if (tg_sha256_accelerated()) {
        sha256_ni(p, n, out);
        return;
    }
#endif
    tg_sha256_portable(p, n, out);
}

static tg__sha256_blocks_fn *blocks_fn(void)
{
#if NI
    if (tg_sha256_accelerated())
        return ni_blocks;
#endif
    return tg__sha256_blocks_portable;
}

void tg_sha256_init(struct tg_sha256_ctx *c)
{
    memcpy(c->_state, tg__sha256_h0, sizeof(c->_state));
    c->_len = 0;
}

void tg_sha256_update(struct tg_sha256_ctx *c, const void *data, size_t n)
{
    const uint8_t *p = data;
    size_t have = (size_t)(c->_len % 64);
    if (n == 0)
        return;
    c->_len += n;
    tg__sha256_blocks_fn *fn = blocks_fn();
    if (have > 0) { /* fill the block begun by an earlier piece first */
        size_t take = 64 - have < n ? 64 - have : n;
        memcpy(c->_buf + have, p, take);
        if (have + take < 64)
            return;
        fn(c->_state, c->_buf, 1);
        p += take, n -= take;
    }
    size_t whole = n / 64;
    if (whole > 0)
        fn(c->_state, p, whole);
    memcpy(c->_buf, p + whole * 64, n - whole * 64);
}

void tg_sha256_final(struct tg_sha256_ctx *c, uint8_t out[32])
{
    tg__sha256_pad(c->_state, blocks_fn(), c->_buf, (size_t)(c->_len % 64), c->_len, out);
}

int tg_ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* RFC 2104 on the incremental digest: the CPU's instructions when tg_sha256 has them. */
void tg_hmac_sha256(const void *key, size_t keylen, const void *p, size_t n, uint8_t out[32])
{
    uint8_t k[64] = {0}, pad[64], inner[32];
    if (keylen > sizeof(k))
        tg_sha256(key, keylen, k);
    else if (keylen > 0)
        memcpy(k, key, keylen);
    struct tg_sha256_ctx c;
    for (size_t i = 0; i < sizeof(pad); i++)
        pad[i] = k[i] ^ 0x36;
    tg_sha256_init(&c);
    tg_sha256_update(&c, pad, sizeof(pad));
    tg_sha256_update(&c, p, n);
    tg_sha256_final(&c, inner);
    for (size_t i = 0; i < sizeof(pad); i++)
        pad[i] = k[i] ^ 0x5c;
    tg_sha256_init(&c);
    tg_sha256_update(&c, pad, sizeof(pad));
    tg_sha256_update(&c, inner, sizeof(inner));
    tg_sha256_final(&c, out);
    mbedtls_platform_zeroize(k, sizeof(k));
    mbedtls_platform_zeroize(pad, sizeof(pad));
    mbedtls_platform_zeroize(inner, sizeof(inner));
    mbedtls_platform_zeroize(&c, sizeof(c));
}

void tg_hmac_labelled(const uint8_t secret[32], const char *label, const void *p, size_t n, uint8_t out[32])
{
    uint8_t key[32];
    tg_hmac_sha256(secret, 32, label, strlen(label), key);
    if (p == NULL)
        memcpy(out, key, 32);
    else
        tg_hmac_sha256(key, 32, p, n, out);
}
