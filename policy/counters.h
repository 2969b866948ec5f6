/* Internal interface of the counter store (policy/counters.c), used by policy.c and its tests. */
#ifndef TG_COUNTERS_H
#define TG_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "policy/policy.h"

void tg_counters_hash(const char *key, size_t n, uint64_t *h1, uint64_t *h2);
/* Token bucket of `capacity` tokens refilled at capacity per window_ms: take `amount`; returns 1
 * (taken) or 0 (not enough; *retry_ms is the first millisecond at which it would be). *left is the
 * level after the call, without float dust (a level within a few ulps of a whole number is that
 * number). */
int tg_bucket_take(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, int64_t window_ms, double amount,
                   int64_t now_ms, double *left, uint64_t *retry_ms);
void tg_bucket_give(struct tg_counters *c, uint64_t h1, uint64_t h2, double capacity, double amount);
/* Fixed window: current value in the window starting at window_start. */
double tg_window_get(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start);

/* What the value after an add must satisfy: nothing, "<= limit" or "< limit". */
enum tg_limit_op { TG_LIMIT_NONE = 0, TG_LIMIT_LTE, TG_LIMIT_LT };

/* Add amount (finite, >= 0) unless the sum would break limit_op/limit; returns 1 if added.
 * Sums and differences keep 15 significant digits (see settle() in counters.c), so decimal
 * amounts add up to their decimal sum and a refund restores the value exactly. */
int tg_window_add(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, int64_t window_ms,
                  double amount, double limit, enum tg_limit_op limit_op, double *now_value);
void tg_window_sub(struct tg_counters *c, uint64_t h1, uint64_t h2, int64_t window_start, double amount);

#endif
