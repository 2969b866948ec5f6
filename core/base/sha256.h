/* SHA-256: with the CPU's SHA extensions where it has them (x86-64), mbedtls otherwise. */
#ifndef TG_SHA256_H
#define TG_SHA256_H

#include <stddef.h>
#include <stdint.h>

void tg_sha256(const void *p, size_t n, uint8_t out[32]);
/* mbedtls's, always (what tests compare the fast one with). */
void tg_sha256_portable(const void *p, size_t n, uint8_t out[32]);
/* 1 if tg_sha256 uses the CPU's instructions. */
int tg_sha256_accelerated(void);
/* HMAC-SHA256 (RFC 2104) of p[0..n) under key. */
void tg_hmac_sha256(const void *key, size_t keylen, const void *p, size_t n, uint8_t out[32]);
/* A MAC under a key for one use made from a 32-byte shared secret (the cluster's): HMAC-SHA256 of
 * p under HMAC-SHA256(secret, label). With p NULL, out is that key itself. Each use names its own
 * label, so a MAC made for one use is worth nothing in another. */
void tg_hmac_labelled(const uint8_t secret[32], const char *label, const void *p, size_t n, uint8_t out[32]);
/* Constant-time comparison of n bytes (digests, tokens): 1 if equal. */
int tg_ct_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif
