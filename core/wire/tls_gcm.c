/* AES-GCM for TLS records, in place of mbedtls 2.28's own mbedtls_gcm_crypt_and_tag().
 *
 * mbedtls 2.28 (Debian 12) does use AES-NI and PCLMULQDQ for GCM, but one 16-byte block at a
 * time through three calls (mbedtls_cipher_update, mbedtls_aes_crypt_ecb, the AES-NI round
 * loop) and a GHASH multiply that converts its operands on every block: about 150 cycles a
 * block, 2 µs of a TLS tools/call (a 300-byte request and a 200-byte answer), where OpenSSL's
 * stitched AES-GCM takes a tenth of that. Here the counter blocks go through AES four at a time
 * with the round keys in registers, and GHASH is one carry-less multiply and reduction a block.
 *
 * How it takes mbedtls's place: mbedtls_cipher_auth_encrypt_ext() and mbedtls_gcm_auth_decrypt()
 * reach mbedtls_gcm_crypt_and_tag() through the shared library's PLT, so the definition below
 * (exported by the executable) is the one they call; the tag check, the zeroing of a forged
 * record's plaintext and everything else stay mbedtls's. What this does not handle (no AES-NI
 * or PCLMULQDQ, an IV that is not 96 bits, a cipher that is not AES, a huge length) goes to
 * mbedtls's own function, found with dlsym(RTLD_NEXT). The key schedule read is mbedtls 2.28's
 * public mbedtls_aes_context (rk: the FIPS-197 expanded key, nr rounds); the build stops on
 * another major version (the check below). The algorithm is NIST SP 800-38D's; GHASH works on
 * byte-reversed blocks, with the multiply-then-reduce of Intel's carry-less multiplication
 * white paper. test/unit/core/wire/test_tls_gcm.c compares it with mbedtls's function on random
 * keys, IVs, lengths and data, in place and not, both directions. */
#include "core/wire/tls.h"

#include <mbedtls/aes.h>
#include <mbedtls/cipher.h>
#include <mbedtls/gcm.h>
#include <mbedtls/version.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#if MBEDTLS_VERSION_MAJOR != 2 || MBEDTLS_VERSION_MINOR < 16
#error "core/wire/tls_gcm.c reads mbedtls 2.x's public GCM and AES contexts: check them for this version"
#endif

typedef int (*gcm_fn)(mbedtls_gcm_context *ctx, int mode, size_t length, const unsigned char *iv, size_t iv_len,
                      const unsigned char *add, size_t add_len, const unsigned char *input, unsigned char *output,
                      size_t tag_len, unsigned char *tag);

static gcm_fn lib_gcm; /* mbedtls's own */
static int fast;       /* the CPU has what the fast path uses */
static int turned_off; /* tg__tls_gcm_set_fast(0): tests compare both */
static unsigned long fast_calls;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

#define GCM_TARGET __attribute__((target("aes,pclmul,sse4.1,ssse3")))

static int cpu_has(void)
{
    unsigned a, b, c, d;
    /* CPUID.1:ECX: PCLMULQDQ bit 1, SSSE3 9, SSE4.1 19, AES 25 */
    return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 1)) && (c & (1u << 9)) && (c & (1u << 19)) &&
           (c & (1u << 25));
}

/* a * b in GF(2^128), both byte-reversed (GHASH's bit order as the instructions see it). */
GCM_TARGET static inline __m128i gf_mul(__m128i a, __m128i b)
{
    __m128i lo = _mm_clmulepi64_si128(a, b, 0x00);
    __m128i mid = _mm_xor_si128(_mm_clmulepi64_si128(a, b, 0x10), _mm_clmulepi64_si128(a, b, 0x01));
    __m128i hi = _mm_clmulepi64_si128(a, b, 0x11);
    lo = _mm_xor_si128(lo, _mm_slli_si128(mid, 8));
    hi = _mm_xor_si128(hi, _mm_srli_si128(mid, 8));
    /* The 256-bit product shifted left by one bit (the reflected operands leave it one short). */
    __m128i lo_c = _mm_srli_epi32(lo, 31), hi_c = _mm_srli_epi32(hi, 31);
    lo = _mm_slli_epi32(lo, 1);
    hi = _mm_slli_epi32(hi, 1);
    __m128i top = _mm_srli_si128(lo_c, 12);
    hi = _mm_or_si128(_mm_or_si128(hi, _mm_slli_si128(hi_c, 4)), top);
    lo = _mm_or_si128(lo, _mm_slli_si128(lo_c, 4));
    /* Reduce modulo x^128 + x^7 + x^2 + x + 1: the first phase, then the second. */
    __m128i t = _mm_xor_si128(_mm_xor_si128(_mm_slli_epi32(lo, 31), _mm_slli_epi32(lo, 30)), _mm_slli_epi32(lo, 25));
    __m128i carry = _mm_srli_si128(t, 4);
    lo = _mm_xor_si128(lo, _mm_slli_si128(t, 12));
    __m128i u = _mm_xor_si128(_mm_xor_si128(_mm_srli_epi32(lo, 1), _mm_srli_epi32(lo, 2)), _mm_srli_epi32(lo, 7));
    u = _mm_xor_si128(u, carry);
    lo = _mm_xor_si128(lo, u);
    return _mm_xor_si128(hi, lo);
}

/* The reversal of a block's 16 bytes. */
#define REV _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)

/* Hash a block that may be short (zero-padded, as GHASH pads). */
GCM_TARGET static inline __m128i ghash_tail(__m128i x, __m128i h, const unsigned char *p, size_t n)
{
    unsigned char b[16] = {0};
    memcpy(b, p, n);
    return gf_mul(_mm_xor_si128(x, _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)b), REV)), h);
}

/* Counter block i of a 96-bit IV: iv || BE32(i). */
GCM_TARGET static inline __m128i ctr_block(__m128i iv, uint32_t i) { return _mm_insert_epi32(iv, (int)__builtin_bswap32(i), 3); }

#define AES_ROUND4(k)                                                                                                  \
    do {                                                                                                               \
        b0 = _mm_aesenc_si128(b0, (k));                                                                                \
        b1 = _mm_aesenc_si128(b1, (k));                                                                                \
        b2 = _mm_aesenc_si128(b2, (k));                                                                                \
        b3 = _mm_aesenc_si128(b3, (k));                                                                                \
    } while (0)

GCM_TARGET static inline __m128i aes1(const __m128i *rk, int nr, __m128i b)
{
    b = _mm_xor_si128(b, rk[0]);
    for (int r = 1; r < nr; r++)
        b = _mm_aesenc_si128(b, rk[r]);
    return _mm_aesenclast_si128(b, rk[nr]);
}

GCM_TARGET static void seal_open(const mbedtls_aes_context *aes, int enc, size_t len, const unsigned char *iv,
                                 const unsigned char *add, size_t add_len, const unsigned char *in, unsigned char *out,
                                 size_t tag_len, unsigned char *tag)
{
    const __m128i rev = REV;
    __m128i rk[15];
    int nr = aes->nr;
    for (int r = 0; r <= nr; r++)
        rk[r] = _mm_loadu_si128((const __m128i *)(aes->rk + 4 * r));
    __m128i h = _mm_shuffle_epi8(aes1(rk, nr, _mm_setzero_si128()), rev);
    unsigned char ivb[16] = {0};
    memcpy(ivb, iv, 12);
    __m128i ivv = _mm_loadu_si128((const __m128i *)ivb);
    __m128i x = _mm_setzero_si128();
    size_t i = 0;
    for (; i + 16 <= add_len; i += 16)
        x = gf_mul(_mm_xor_si128(x, _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(add + i)), rev)), h);
    if (i < add_len)
        x = ghash_tail(x, h, add + i, add_len - i);
    uint32_t ctr = 2; /* 1 is J0, which masks the tag */
    size_t off = 0;
    for (; off + 64 <= len; off += 64, ctr += 4) {
        __m128i b0 = _mm_xor_si128(ctr_block(ivv, ctr), rk[0]);
        __m128i b1 = _mm_xor_si128(ctr_block(ivv, ctr + 1), rk[0]);
        __m128i b2 = _mm_xor_si128(ctr_block(ivv, ctr + 2), rk[0]);
        __m128i b3 = _mm_xor_si128(ctr_block(ivv, ctr + 3), rk[0]);
        for (int r = 1; r < nr; r++)
            AES_ROUND4(rk[r]);
        b0 = _mm_aesenclast_si128(b0, rk[nr]);
        b1 = _mm_aesenclast_si128(b1, rk[nr]);
        b2 = _mm_aesenclast_si128(b2, rk[nr]);
        b3 = _mm_aesenclast_si128(b3, rk[nr]);
        __m128i p0 = _mm_loadu_si128((const __m128i *)(in + off));
        __m128i p1 = _mm_loadu_si128((const __m128i *)(in + off + 16));
        __m128i p2 = _mm_loadu_si128((const __m128i *)(in + off + 32));
        __m128i p3 = _mm_loadu_si128((const __m128i *)(in + off + 48));
        __m128i c0 = _mm_xor_si128(p0, b0), c1 = _mm_xor_si128(p1, b1);
        __m128i c2 = _mm_xor_si128(p2, b2), c3 = _mm_xor_si128(p3, b3);
        _mm_storeu_si128((__m128i *)(out + off), c0);
        _mm_storeu_si128((__m128i *)(out + off + 16), c1);
        _mm_storeu_si128((__m128i *)(out + off + 32), c2);
        _mm_storeu_si128((__m128i *)(out + off + 48), c3);
        if (!enc) { /* the hash is over the ciphertext: the input when opening */
            c0 = p0, c1 = p1, c2 = p2, c3 = p3;
        }
        x = gf_mul(_mm_xor_si128(x, _mm_shuffle_epi8(c0, rev)), h);
        x = gf_mul(_mm_xor_si128(x, _mm_shuffle_epi8(c1, rev)), h);
        x = gf_mul(_mm_xor_si128(x, _mm_shuffle_epi8(c2, rev)), h);
        x = gf_mul(_mm_xor_si128(x, _mm_shuffle_epi8(c3, rev)), h);
    }
    for (; off + 16 <= len; off += 16, ctr++) {
        __m128i p = _mm_loadu_si128((const __m128i *)(in + off));
        __m128i c = _mm_xor_si128(p, aes1(rk, nr, ctr_block(ivv, ctr)));
        _mm_storeu_si128((__m128i *)(out + off), c);
        x = gf_mul(_mm_xor_si128(x, _mm_shuffle_epi8(enc ? c : p, rev)), h);
    }
    if (off < len) {
        size_t n = len - off;
        unsigned char ks[16], b[16];
        _mm_storeu_si128((__m128i *)ks, aes1(rk, nr, ctr_block(ivv, ctr)));
        memcpy(b, in + off, n); /* the ciphertext when opening: read before out (maybe in) is written */
        for (size_t j = 0; j < n; j++)
            out[off + j] = (unsigned char)(b[j] ^ ks[j]);
        x = ghash_tail(x, h, enc ? out + off : b, n);
    }
    /* The lengths block, bits of the additional data then of the text, big-endian: reversed, the
     * text's is the low half. */
    x = gf_mul(_mm_xor_si128(x, _mm_set_epi64x((long long)((uint64_t)add_len * 8), (long long)((uint64_t)len * 8))), h);
    __m128i t = _mm_xor_si128(_mm_shuffle_epi8(x, rev), aes1(rk, nr, ctr_block(ivv, 1)));
    unsigned char full[16];
    _mm_storeu_si128((__m128i *)full, t);
    memcpy(tag, full, tag_len);
}
#else
static int cpu_has(void) { return 0; }
static void seal_open(const mbedtls_aes_context *aes, int enc, size_t len, const unsigned char *iv,
                      const unsigned char *add, size_t add_len, const unsigned char *in, unsigned char *out,
                      size_t tag_len, unsigned char *tag)
{
    (void)aes, (void)enc, (void)len, (void)iv, (void)add, (void)add_len, (void)in, (void)out, (void)tag_len, (void)tag;
}
#endif

static void init(void)
{
    lib_gcm = (gcm_fn)dlsym(RTLD_NEXT, "mbedtls_gcm_crypt_and_tag");
    fast = lib_gcm != NULL && cpu_has();
}

int tg__tls_gcm_fast(void)
{
    pthread_once(&once, init);
    return fast && !turned_off;
}

void tg__tls_gcm_set_fast(int on) { turned_off = !on; }

unsigned long tg__tls_gcm_fast_calls(void) { return fast_calls; }

/* The AES key schedule the fast path can use: AES-128/192/256 as mbedtls_gcm_setkey() set it. */
static const mbedtls_aes_context *aes_of(const mbedtls_gcm_context *ctx)
{
    const mbedtls_cipher_info_t *ci = ctx->cipher_ctx.cipher_info;
    if (ci == NULL || (ci->type != MBEDTLS_CIPHER_AES_128_ECB && ci->type != MBEDTLS_CIPHER_AES_192_ECB &&
                       ci->type != MBEDTLS_CIPHER_AES_256_ECB))
        return NULL;
    const mbedtls_aes_context *aes = ctx->cipher_ctx.cipher_ctx;
    if (aes == NULL || aes->rk == NULL || (aes->nr != 10 && aes->nr != 12 && aes->nr != 14))
        return NULL;
    return aes;
}

__attribute__((visibility("default"), used)) int
mbedtls_gcm_crypt_and_tag(mbedtls_gcm_context *ctx, int mode, size_t length, const unsigned char *iv, size_t iv_len,
                          const unsigned char *add, size_t add_len, const unsigned char *input, unsigned char *output,
                          size_t tag_len, unsigned char *tag)
{
    const mbedtls_aes_context *aes;
    if (tg__tls_gcm_fast() && iv_len == 12 && tag_len >= 4 && tag_len <= 16 && length < (1u << 30) &&
        add_len < (1u << 30) && (mode == MBEDTLS_GCM_ENCRYPT || mode == MBEDTLS_GCM_DECRYPT) &&
        (length == 0 || (input != NULL && output != NULL)) && (add_len == 0 || add != NULL) &&
        (aes = aes_of(ctx)) != NULL) {
        seal_open(aes, mode == MBEDTLS_GCM_ENCRYPT, length, iv, add, add_len, input, output, tag_len, tag);
        fast_calls++;
        return 0;
    }
    if (lib_gcm == NULL)
        return MBEDTLS_ERR_GCM_BAD_INPUT;
    return lib_gcm(ctx, mode, length, iv, iv_len, add, add_len, input, output, tag_len, tag);
}
