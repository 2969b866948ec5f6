/* Counters by a pair of label values, for /metrics (tollgate_brakes_total{upstream,tool},
 * tollgate_history_refusals_total{upstream,rule}). The values come from requests (a tool's name),
 * so the table is bounded: at most TG_LABEL_COUNTS_MAX pairs, and what comes after them is
 * counted under the pair ("(other)", "(other)"). Owner: the server's struct tg_metrics, freed by
 * tg_label_counts_free when the server is disposed. Not thread-safe (the loop's thread only). */
#ifndef TG_LABEL_COUNTS_H
#define TG_LABEL_COUNTS_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"

#define TG_LABEL_COUNTS_MAX 256
#define TG_LABEL_VALUE_MAX 128 /* a longer value is cut to this many bytes */

struct tg_label_counts;

/* Adds n to the pair (a, b); *t is made on first use. */
void tg_label_counts_add(struct tg_label_counts **t, const char *a, const char *b, uint64_t n);
/* The count of the pair (a, b) (values as given to add, cut the same way); 0 if none. */
uint64_t tg_label_counts_get(const struct tg_label_counts *t, const char *a, const char *b);
size_t tg_label_counts_size(const struct tg_label_counts *t);
/* Prometheus text: # HELP, # TYPE counter, then one line per pair in the order they first came,
 * "NAME{LA="a",LB="b"} N", the values escaped as the format wants (\\, \", \n; other control
 * bytes written as '?'). t may be NULL (no line but the two comments). */
void tg_label_counts_render(const struct tg_label_counts *t, struct tg_buf *out, const char *name, const char *help,
                            const char *la, const char *lb);
void tg_label_counts_free(struct tg_label_counts *t);

#endif
