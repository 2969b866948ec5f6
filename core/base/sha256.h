/* SHA-256: with the CPU's SHA extensions where it has them (x86-64), portable C otherwise
 * (core/base/sha256_portable.c). */
#ifndef TG_SHA256_H
#define TG_SHA256_H

#include <stddef.h>
#include <stdint.h>

void tg_sha256(const void *p, size_t n, uint8_t out[32]);
/* The portable C one, always. */
void tg_sha256_portable(const void *p, size_t n, uint8_t out[32]);
/* 1 if tg_sha256, the incremental digest and the HMAC use the CPU's instructions. */
int tg_sha256_accelerated(void);
/* For tests and measurements: 0 makes them all use the portable code even on a CPU with the
 * instructions; 1 goes back to the instructions where there are any. */
void tg_sha256_set_accelerated(int on);

/* A digest of data given in pieces: _init, any number of _update, then _final (which leaves
 * the struct to be _init'ed again). The same digest as tg_sha256 of the pieces put together. */
struct tg_sha256_ctx {
    uint32_t _state[8];
    uint64_t _len;
    uint8_t _buf[64];
};
void tg_sha256_init(struct tg_sha256_ctx *c);
void tg_sha256_update(struct tg_sha256_ctx *c, const void *p, size_t n);
void tg_sha256_final(struct tg_sha256_ctx *c, uint8_t out[32]);

/* HMAC-SHA256 (RFC 2104) of p[0..n) under key. */
void tg_hmac_sha256(const void *key, size_t keylen, const void *p, size_t n, uint8_t out[32]);
/* A MAC under a key for one use made from a 32-byte shared secret (the cluster's): HMAC-SHA256 of
 * p under HMAC-SHA256(secret, label). With p NULL, out is that key itself. Each use names its own
 * label, so a MAC made for one use is worth nothing in another. */
void tg_hmac_labelled(const uint8_t secret[32], const char *label, const void *p, size_t n, uint8_t out[32]);
/* Constant-time comparison of n bytes (digests, tokens): 1 if equal. */
int tg_ct_equal(const uint8_t *a, const uint8_t *b, size_t n);

/* Between core/base/sha256.c and sha256_portable.c: the constants, and the compression of whole
 * blocks into the state (A..H, FIPS 180-4's H0..H7) by either. */
extern const uint32_t tg__sha256_k[64];
extern const uint32_t tg__sha256_h0[8];
typedef void tg__sha256_blocks_fn(uint32_t state[8], const uint8_t *p, size_t nblocks);
tg__sha256_blocks_fn tg__sha256_blocks_portable; /* the best of the two below for this CPU */
tg__sha256_blocks_fn tg__sha256_blocks_base;     /* the C for any CPU */
#if defined(__x86_64__) && defined(__GNUC__)
tg__sha256_blocks_fn tg__sha256_blocks_avx2; /* the same C for CPUs with AVX2 and BMI2 only */
#endif
/* Pads the last rest (< 128) bytes of a message of total bytes, compresses them and writes the digest. */
void tg__sha256_pad(uint32_t state[8], tg__sha256_blocks_fn *blocks, const uint8_t *tail, size_t rest,
                    uint64_t total, uint8_t out[32]);

#endif
