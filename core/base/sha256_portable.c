#include "core/base/sha256.h"

#include <string.h>

/* SHA-256 (FIPS 180-4) in plain C, for CPUs without the SHA instructions and for valgrind, which
 * hides them: there a 64-byte block is the instructions of this file, and the audit log hashes a
 * few blocks per call. Written for few instructions rather than few lines:
 * - the 64 rounds are spelled out (macros) so no state word is ever moved: each round renames
 *   a..h instead of shifting them down, and the round constant is an immediate;
 * - the schedule is a rolling window of 16 words, each replaced in place by the word 16 later;
 * - Maj(a,b,c) = ((a^b) & (b^c)) ^ b, where b^c is the a^b of the round before;
 * - each Sigma is three rotations nested so that one copy of the word is enough,
 *   ROTR(x,2)^ROTR(x,13)^ROTR(x,22) = ROTR(ROTR(ROTR(x,9)^x,11)^x,2);
 * - words are read 4 bytes at a time and byte-swapped (one instruction), never byte by byte. */

const uint32_t tg__sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

const uint32_t tg__sha256_h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))
#define BSIG0(x) ROTR(ROTR(ROTR(x, 9) ^ (x), 11) ^ (x), 2)
#define BSIG1(x) ROTR(ROTR(ROTR(x, 14) ^ (x), 5) ^ (x), 6)
#define SSIG0(x) (ROTR(ROTR(x, 11) ^ (x), 7) ^ ((x) >> 3))
#define SSIG1(x) (ROTR(ROTR(x, 2) ^ (x), 17) ^ ((x) >> 10))

static inline uint32_t load_be32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return __builtin_bswap32(v);
#elif defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return v;
#else
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
#endif
}

/* One round t: T1 = h + S1(e) + Ch(e,f,g) + K[t] + W[t]; d += T1; h = T1 + S0(a) + Maj(a,b,c).
 * ab carries a^b to the next round, where it is b^c. wk is K[t] + W[t], from the schedule.
 * Ch is (e&f)|(~e&g) written with + (the two never share a bit), which with BMI's andn gives
 * the compiler two independent terms to add; without it, g^(e&(f^g)) is one copy shorter. */
#define ROUND(a, b, c, d, e, f, g, h, t)                                                           \
    do {                                                                                           \
        uint32_t ab_ = (a) ^ (b);                                                                  \
        h += wk[t];                                                                                \
        h += BSIG1(e);                                                                             \
        h += bmi ? ((e) & (f)) + (~(e) & (g)) : ((((f) ^ (g)) & (e)) ^ (g));                       \
        d += h;                                                                                    \
        h += BSIG0(a);                                                                             \
        h += (ab_ & bc) ^ (b);                                                                     \
        bc = ab_;                                                                                  \
    } while (0)

#define EIGHT(t)                                                                                   \
    ROUND(a, b, c, d, e, f, g, h, (t));                                                            \
    ROUND(h, a, b, c, d, e, f, g, (t) + 1);                                                        \
    ROUND(g, h, a, b, c, d, e, f, (t) + 2);                                                        \
    ROUND(f, g, h, a, b, c, d, e, (t) + 3);                                                        \
    ROUND(e, f, g, h, a, b, c, d, (t) + 4);                                                        \
    ROUND(d, e, f, g, h, a, b, c, (t) + 5);                                                        \
    ROUND(c, d, e, f, g, h, a, b, (t) + 6);                                                        \
    ROUND(b, c, d, e, f, g, h, a, (t) + 7)

#if defined(__GNUC__) && (__GNUC__ >= 12 || defined(__clang__))
/* The schedule four words at a time in vectors of 4 (GNU C's vector types: SSE on x86-64,
 * whatever the target has elsewhere). W[t..t+3] = s1(W[t-2..t+1]) + W[t-7..t-4] +
 * s0(W[t-15..t-12]) + W[t-16..t-13]: s0 and the rest for all four at once; s1 in two halves,
 * since W[t+2..t+3] need W[t..t+1]. A rotation of a 32-bit word is the low half of a 64-bit
 * shift of the word written twice, so s1 of two words is three 64-bit shifts of one shuffle. */
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef uint64_t v2q __attribute__((vector_size(16)));
typedef uint8_t v16b __attribute__((vector_size(16)));

/* s1 of lanes 0 and 2, given a vector whose 64-bit halves each hold one word twice. */
static inline __attribute__((always_inline)) v4u vsig1_even(v4u dup)
{
    v2q q = (v2q)dup;
    return (v4u)((q >> 17) ^ (q >> 19)) ^ (dup >> 10);
}

/* W[t..t+3] into x0, which held W[t-16..t-13]; x1..x3 hold W[t-12..t-1]. */
#define VSTEP(x0, x1, x2, x3, t)                                                                   \
    do {                                                                                           \
        v4u w15 = __builtin_shufflevector(x0, x1, 1, 2, 3, 4);                                     \
        v4u w7 = __builtin_shufflevector(x2, x3, 1, 2, 3, 4);                                      \
        x0 += w7 + (((w15 >> 7) ^ (w15 << 25)) ^ ((w15 >> 18) ^ (w15 << 14)) ^ (w15 >> 3));        \
        v4u r_ = vsig1_even(__builtin_shufflevector(x3, x3, 2, 2, 3, 3));                          \
        x0 += __builtin_shufflevector(r_, zero, 0, 2, 4, 4);                                       \
        r_ = vsig1_even(__builtin_shufflevector(x0, x0, 0, 0, 1, 1));                              \
        x0 += __builtin_shufflevector(r_, zero, 4, 4, 0, 2);                                       \
        vstore_k(wk, x0, t);                                                                       \
    } while (0)

static inline __attribute__((always_inline)) void vstore_k(uint32_t wk[64], v4u x, int t)
{
    v4u k;
    memcpy(&k, tg__sha256_k + t, 16);
    k += x;
    memcpy(wk + t, &k, 16);
}

static inline __attribute__((always_inline)) v4u vload_be(const uint8_t *p)
{
    v16b raw;
    memcpy(&raw, p, 16);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    raw = __builtin_shufflevector(raw, raw, 3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
#endif
    return (v4u)raw;
}

static inline __attribute__((always_inline)) void schedule(uint32_t wk[64], const uint8_t *p)
{
    const v4u zero = {0, 0, 0, 0};
    v4u x0 = vload_be(p), x1 = vload_be(p + 16), x2 = vload_be(p + 32), x3 = vload_be(p + 48);
    vstore_k(wk, x0, 0);
    vstore_k(wk, x1, 4);
    vstore_k(wk, x2, 8);
    vstore_k(wk, x3, 12);
    for (int t = 16; t < 64; t += 16) {
        VSTEP(x0, x1, x2, x3, t);
        VSTEP(x1, x2, x3, x0, t + 4);
        VSTEP(x2, x3, x0, x1, t + 8);
        VSTEP(x3, x0, x1, x2, t + 12);
    }
}
#else
static void schedule(uint32_t wk[64], const uint8_t *p)
{
    uint32_t w[16];
    for (int t = 0; t < 16; t++) {
        w[t] = load_be32(p + 4 * t);
        wk[t] = w[t] + tg__sha256_k[t];
    }
    for (int t = 16; t < 64; t++) {
        uint32_t x = w[(t - 15) & 15], y = w[(t - 2) & 15];
        w[t & 15] += SSIG1(y) + w[(t - 7) & 15] + SSIG0(x);
        wk[t] = w[t & 15] + tg__sha256_k[t];
    }
}
#endif

static inline __attribute__((always_inline)) void compress(uint32_t state[8], const uint8_t *p, size_t nblocks,
                                                            int bmi)
{
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    for (; nblocks > 0; nblocks--, p += 64) {
        uint32_t wk[64], bc = b ^ c;
        schedule(wk, p);
        EIGHT(0);
        EIGHT(8);
        EIGHT(16);
        EIGHT(24);
        EIGHT(32);
        EIGHT(40);
        EIGHT(48);
        EIGHT(56);
        a += state[0], b += state[1], c += state[2], d += state[3];
        e += state[4], f += state[5], g += state[6], h += state[7];
        state[0] = a, state[1] = b, state[2] = c, state[3] = d;
        state[4] = e, state[5] = f, state[6] = g, state[7] = h;
    }
}

void tg__sha256_blocks_base(uint32_t state[8], const uint8_t *p, size_t nblocks)
{
    compress(state, p, nblocks, 0);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same C for CPUs with AVX2 and BMI2 (x86-64 since 2013, and valgrind's): three-operand
 * rotations (rorx) and vector instructions spare most register copies. */
__attribute__((target("avx2,bmi,bmi2"))) void tg__sha256_blocks_avx2(uint32_t state[8], const uint8_t *p,
                                                                     size_t nblocks)
{
    compress(state, p, nblocks, 1);
}

void tg__sha256_blocks_portable(uint32_t state[8], const uint8_t *p, size_t nblocks)
{
    static tg__sha256_blocks_fn *fn;
    if (fn == NULL) {
        __builtin_cpu_init();
        fn = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") ? tg__sha256_blocks_avx2
                                                                            : tg__sha256_blocks_base;
    }
    fn(state, p, nblocks);
}
#else
void tg__sha256_blocks_portable(uint32_t state[8], const uint8_t *p, size_t nblocks)
{
    compress(state, p, nblocks, 0);
}
#endif

void tg__sha256_pad(uint32_t state[8], tg__sha256_blocks_fn *blocks, const uint8_t *tail, size_t rest,
                    uint64_t total, uint8_t out[32])
{
    uint8_t last[128] = {0};
    memcpy(last, tail, rest);
    last[rest] = 0x80;
    size_t n = rest < 56 ? 64 : 128;
    uint64_t bits = total * 8;
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    bits = __builtin_bswap64(bits);
    memcpy(last + n - 8, &bits, 8);
#else
    for (int i = 0; i < 8; i++)
        last[n - 1 - i] = (uint8_t)(bits >> (8 * i));
#endif
    blocks(state, last, n / 64);
    for (int i = 0; i < 8; i++) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        uint32_t v = __builtin_bswap32(state[i]);
        memcpy(out + 4 * i, &v, 4);
#else
        out[4 * i] = (uint8_t)(state[i] >> 24);
        out[4 * i + 1] = (uint8_t)(state[i] >> 16);
        out[4 * i + 2] = (uint8_t)(state[i] >> 8);
        out[4 * i + 3] = (uint8_t)state[i];
#endif
    }
}

void tg_sha256_portable(const void *p, size_t n, uint8_t out[32])
{
    uint32_t state[8];
    memcpy(state, tg__sha256_h0, sizeof(state));
    size_t whole = n / 64;
    tg__sha256_blocks_portable(state, p, whole);
    tg__sha256_pad(state, tg__sha256_blocks_portable, (const uint8_t *)p + whole * 64, n - whole * 64, n, out);
}
