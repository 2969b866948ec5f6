#include "core/base/sha256.h"

#include <string.h>

/* SHA-256 (FIPS 180-4) in C, for CPUs without the SHA instructions and for valgrind, which hides
 * them: there a 64-byte block is the instructions of this file (about 1,900 under callgrind with
 * AVX2, 2,650 without; mbedtls's portable code takes 4,075), and the audit log hashes a few
 * blocks per call. Written for few instructions rather than few lines:
 * - the 64 rounds are spelled out (macros) so no state word is ever moved: each round renames
 *   a..h instead of shifting them down;
 * - the schedule is computed before the rounds, four words at a time in vectors (a rolling
 *   window of 16 words in four vectors), with K added, so a round adds one word from memory;
 * - Maj(a,b,c) = ((a^b) & (b^c)) ^ b, where b^c is the a^b of the round before;
 * - each Sigma is three rotations nested so that one copy of the word is enough,
 *   ROTR(x,2)^ROTR(x,13)^ROTR(x,22) = ROTR(ROTR(ROTR(x,9)^x,11)^x,2);
 * - words are read 16 bytes at a time and byte-swapped by one shuffle, never byte by byte;
 * - the same code is compiled a second time for AVX2+BMI2 CPUs (x86-64 since 2013, and
 *   valgrind's), chosen by cpuid. Compilers without GNU C's vector types get a scalar schedule. */

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
        h += WK(t);                                                                                \
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

/* K[t] + W[t] for the rounds, four words at a time: words t..t+3 of a block at 8 * (t / 4), so
 * that two blocks' schedules can interleave (the second's at 8 * (t / 4) + 4). */
#define WK(t) wk[((t) >> 2) * 8 + ((t)&3)]

#if defined(__GNUC__) && (__GNUC__ >= 12 || defined(__clang__))
/* The schedule four words at a time in vectors of 4 (GNU C's vector types: SSE on x86-64,
 * whatever the target has elsewhere). W[t..t+3] = s1(W[t-2..t+1]) + W[t-7..t-4] +
 * s0(W[t-15..t-12]) + W[t-16..t-13]: s0 and the rest for all four at once; s1 in two halves,
 * since W[t+2..t+3] need W[t..t+1]. A rotation of a 32-bit word is the low half of a 64-bit
 * shift of the word written twice, so s1 of two words is three 64-bit shifts of one shuffle.
 * With 256-bit vectors (AVX2) the same steps take two blocks at once, one in each half. */
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef uint64_t v2q __attribute__((vector_size(16)));
typedef uint8_t v16b __attribute__((vector_size(16)));
typedef uint32_t v8u __attribute__((vector_size(32)));
typedef uint64_t v4q __attribute__((vector_size(32)));

#define AI static inline __attribute__((always_inline))

/* s1 of lanes 0 and 2 (and 4 and 6), given a vector whose 64-bit parts each hold one word twice. */
AI v4u vsig1_even(v4u dup)
{
    v2q q = (v2q)dup;
    return (v4u)((q >> 17) ^ (q >> 19)) ^ (dup >> 10);
}

/* (Macros, not functions: a function taking a 256-bit vector has an ABI without AVX.) */
#define VSIG1_EVEN2(dup) ((v8u)(((v4q)(dup) >> 17) ^ ((v4q)(dup) >> 19)) ^ ((dup) >> 10))

#define VSIG0(x) ((((x) >> 7) ^ ((x) << 25)) ^ (((x) >> 18) ^ ((x) << 14)) ^ ((x) >> 3))

/* W[t..t+3] into x0, which held W[t-16..t-13]; x1..x3 hold W[t-12..t-1]. */
#define VSTEP(x0, x1, x2, x3, t)                                                                   \
    do {                                                                                           \
        v4u w15 = __builtin_shufflevector(x0, x1, 1, 2, 3, 4);                                     \
        v4u w7 = __builtin_shufflevector(x2, x3, 1, 2, 3, 4);                                      \
        x0 += w7 + VSIG0(w15);                                                                     \
        v4u r_ = vsig1_even(__builtin_shufflevector(x3, x3, 2, 2, 3, 3));                          \
        x0 += __builtin_shufflevector(r_, zero, 0, 2, 4, 4);                                       \
        r_ = vsig1_even(__builtin_shufflevector(x0, x0, 0, 0, 1, 1));                              \
        x0 += __builtin_shufflevector(r_, zero, 4, 4, 0, 2);                                       \
        vstore_k(wk, x0, t);                                                                       \
    } while (0)

/* The same for two blocks, lanes 0..3 one's and 4..7 the other's. */
#define VSTEP2(x0, x1, x2, x3, t)                                                                  \
    do {                                                                                           \
        v8u w15 = __builtin_shufflevector(x0, x1, 1, 2, 3, 8, 5, 6, 7, 12);                        \
        v8u w7 = __builtin_shufflevector(x2, x3, 1, 2, 3, 8, 5, 6, 7, 12);                         \
        x0 += w7 + VSIG0(w15);                                                                     \
        v8u d_ = __builtin_shufflevector(x3, x3, 2, 2, 3, 3, 6, 6, 7, 7);                          \
        v8u r_ = VSIG1_EVEN2(d_);                                                                  \
        x0 += __builtin_shufflevector(r_, zero, 0, 2, 8, 8, 4, 6, 8, 8);                           \
        d_ = __builtin_shufflevector(x0, x0, 0, 0, 1, 1, 4, 4, 5, 5);                              \
        r_ = VSIG1_EVEN2(d_);                                                                      \
        x0 += __builtin_shufflevector(r_, zero, 8, 8, 0, 2, 8, 8, 4, 6);                           \
        VSTORE_K2(x0, t);                                                                          \
    } while (0)

AI void vstore_k(uint32_t *wk, v4u x, int t)
{
    v4u k;
    memcpy(&k, tg__sha256_k + t, 16);
    k += x;
    memcpy(wk + 2 * t, &k, 16);
}

#define VSTORE_K2(x, t)                                                                            \
    do {                                                                                           \
        v4u k4_;                                                                                   \
        memcpy(&k4_, tg__sha256_k + (t), 16);                                                      \
        v8u s_ = (x) + __builtin_shufflevector(k4_, k4_, 0, 1, 2, 3, 0, 1, 2, 3);                  \
        memcpy(wk + 2 * (t), &s_, 32);                                                             \
    } while (0)

AI v4u vload_be(const uint8_t *p)
{
    v16b raw;
    memcpy(&raw, p, 16);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    raw = __builtin_shufflevector(raw, raw, 3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
#endif
    return (v4u)raw;
}

/* 16 bytes of each block, the first's in lanes 0..3 */
#define VLOAD_BE2(p, q) __builtin_shufflevector(vload_be(p), vload_be(q), 0, 1, 2, 3, 4, 5, 6, 7)

AI void schedule(uint32_t wk[128], const uint8_t *p)
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

AI void schedule2(uint32_t wk[128], const uint8_t *p)
{
    const v8u zero = {0, 0, 0, 0, 0, 0, 0, 0};
    v8u x0 = VLOAD_BE2(p, p + 64), x1 = VLOAD_BE2(p + 16, p + 80);
    v8u x2 = VLOAD_BE2(p + 32, p + 96), x3 = VLOAD_BE2(p + 48, p + 112);
    VSTORE_K2(x0, 0);
    VSTORE_K2(x1, 4);
    VSTORE_K2(x2, 8);
    VSTORE_K2(x3, 12);
    for (int t = 16; t < 64; t += 16) {
        VSTEP2(x0, x1, x2, x3, t);
        VSTEP2(x1, x2, x3, x0, t + 4);
        VSTEP2(x2, x3, x0, x1, t + 8);
        VSTEP2(x3, x0, x1, x2, t + 12);
    }
}
#define PAIRS 1
#else
#define AI static inline
#define PAIRS 0
static void schedule(uint32_t wk[128], const uint8_t *p)
{
    uint32_t w[16];
    for (int t = 0; t < 16; t++) {
        w[t] = load_be32(p + 4 * t);
        WK(t) = w[t] + tg__sha256_k[t];
    }
    for (int t = 16; t < 64; t++) {
        uint32_t x = w[(t - 15) & 15], y = w[(t - 2) & 15];
        w[t & 15] += SSIG1(y) + w[(t - 7) & 15] + SSIG0(x);
        WK(t) = w[t & 15] + tg__sha256_k[t];
    }
}
#endif

/* The 64 rounds of one block on the state, reading K + W from wk as WK lays it out. */
AI void rounds(uint32_t state[8], const uint32_t *wk, int bmi)
{
    uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
    uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
    uint32_t bc = b ^ c;
    EIGHT(0);
    EIGHT(8);
    EIGHT(16);
    EIGHT(24);
    EIGHT(32);
    EIGHT(40);
    EIGHT(48);
    EIGHT(56);
    state[0] += a, state[1] += b, state[2] += c, state[3] += d;
    state[4] += e, state[5] += f, state[6] += g, state[7] += h;
}

/* pairs: take two blocks' schedules at once where there are two (with 256-bit vectors). */
AI void compress(uint32_t state[8], const uint8_t *p, size_t nblocks, int bmi, int pairs)
{
    uint32_t wk[128];
    while (nblocks > 0) {
        size_t two = 0;
#if PAIRS
        if (pairs && nblocks >= 2) {
            schedule2(wk, p);
            two = 1;
        } else
#endif
            schedule(wk, p);
        for (size_t i = 0; i <= two; i++)
            rounds(state, wk + 4 * i, bmi);
        p += 64 * (1 + two);
        nblocks -= 1 + two;
    }
}

void tg__sha256_blocks_base(uint32_t state[8], const uint8_t *p, size_t nblocks)
{
    compress(state, p, nblocks, 0, 0);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* The same C for CPUs with AVX2 and BMI2 (x86-64 since 2013, and valgrind's): three-operand
 * rotations (rorx) and vector instructions spare most register copies, and the schedules of
 * two blocks share the instructions. */
__attribute__((target("avx2,bmi,bmi2"))) void tg__sha256_blocks_avx2(uint32_t state[8], const uint8_t *p,
                                                                     size_t nblocks)
{
    compress(state, p, nblocks, 1, 1);
}

void tg__sha256_blocks_portable(uint32_t state[8], const uint8_t *p, size_t nblocks)
{
    static tg__sha256_blocks_fn *chosen; /* any thread may choose first: all choose the same */
    tg__sha256_blocks_fn *fn = __atomic_load_n(&chosen, __ATOMIC_RELAXED);
    if (fn == NULL) {
        __builtin_cpu_init();
        fn = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("bmi2") ? tg__sha256_blocks_avx2
                                                                            : tg__sha256_blocks_base;
        __atomic_store_n(&chosen, fn, __ATOMIC_RELAXED);
    }
    fn(state, p, nblocks);
}
#else
void tg__sha256_blocks_portable(uint32_t state[8], const uint8_t *p, size_t nblocks)
{
    compress(state, p, nblocks, 0, 0);
}
#endif

void tg__sha256_pad(uint32_t state[8], tg__sha256_blocks_fn *blocks, const uint8_t *tail, size_t rest,
                    uint64_t total, uint8_t out[32])
{
    uint8_t last[192] = {0};
    if (rest > 0) /* an empty message may come as NULL */
        memcpy(last, tail, rest);
    last[rest] = 0x80;
    size_t n = (rest + 1 + 8 + 63) / 64 * 64;
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

void tg_sha256_portable(const void *data, size_t n, uint8_t out[32])
{
    const uint8_t *p = data;
    uint32_t state[8];
    memcpy(state, tg__sha256_h0, sizeof(state));
    size_t whole = n / 64, rest = n % 64;
    /* An odd number of whole blocks before a one-block padding: the last goes with the padding,
     * so that the two-block schedule pairs them all (a copy of 64 bytes for 200 instructions). */
    if (whole % 2 == 1 && rest < 56)
        whole--, rest += 64;
    tg__sha256_blocks_portable(state, p, whole);
    tg__sha256_pad(state, tg__sha256_blocks_portable, p + whole * 64, rest, n, out);
}
