/* SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed 64-bit hash, a PRF for short inputs.
 * Used where a cheap tag must not be forgeable by a peer who does not know the key. */
#ifndef TG_SIPHASH_H
#define TG_SIPHASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t tg_siphash(const uint8_t key[16], const void *p, size_t n);

#endif
