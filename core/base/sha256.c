#include "core/base/sha256.h"

#include <string.h>

#include <mbedtls/md.h>
#include <mbedtls/sha256.h>
#include <stdlib.h>

/* SHA-256 with the x86 SHA extensions (FIPS 180-4; the instructions as Intel documents them):
 * a 64-byte block in a few dozen instructions instead of mbedtls's portable rounds, which cost
 * a tenth of a proxied call for the audit log's argument digest. Used when the CPU has them
 * (cpuid); mbedtls otherwise, and for the answer the unit tests compare both against. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#define SHA_TARGET __attribute__((target("sha,sse4.1,ssse3")))

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* state: ABEF and CDGH, the order the round instruction takes. */
SHA_TARGET static void blocks(__m128i *abef, __m128i *cdgh, const uint8_t *p, size_t nblocks)
{
    const __m128i be = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i s0 = *abef, s1 = *cdgh;
    for (; nblocks > 0; nblocks--, p += 64) {
        __m128i w[16];
        for (int g = 0; g < 4; g++)
            w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * g)), be);
        /* W[t] = s1(W[t-2]) + W[t-7] + s0(W[t-15]) + W[t-16], four at a time */
        for (int g = 4; g < 16; g++) {
            __m128i t = _mm_sha256msg1_epu32(w[g - 4], w[g - 3]);
            t = _mm_add_epi32(t, _mm_alignr_epi8(w[g - 1], w[g - 2], 4));
            w[g] = _mm_sha256msg2_epu32(t, w[g - 1]);
        }
        __m128i a = s0, c = s1;
        for (int g = 0; g < 16; g++) {
            __m128i m = _mm_add_epi32(w[g], _mm_loadu_si128((const __m128i *)(K + 4 * g)));
            s1 = _mm_sha256rnds2_epu32(s1, s0, m);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0e));
        }
        s0 = _mm_add_epi32(s0, a);
        s1 = _mm_add_epi32(s1, c);
    }
    *abef = s0;
    *cdgh = s1;
}

SHA_TARGET static void sha256_ni(const uint8_t *p, size_t n, uint8_t out[32])
{
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
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
    uint64_t bits = (uint64_t)n * 8;
    for (int i = 0; i < 8; i++)
        last[total - 1 - i] = (uint8_t)(bits >> (8 * i));
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

int tg_sha256_accelerated(void)
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
int tg_sha256_accelerated(void) { return 0; }
#endif

void tg_sha256_portable(const void *p, size_t n, uint8_t out[32])
{
    mbedtls_sha256_ret((const unsigned char *)p, n, out, 0);
}

void tg_sha256(const void *p, size_t n, uint8_t out[32])
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (tg_sha256_accelerated()) {
        sha256_ni(p, n, out);
        return;
    }
#endif
    tg_sha256_portable(p, n, out);
}

int tg_ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

void tg_hmac_sha256(const void *key, size_t keylen, const void *p, size_t n, uint8_t out[32])
{
    if (mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, keylen, p, n, out) != 0)
        abort(); /* only a missing SHA-256 fails: a broken build */
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
