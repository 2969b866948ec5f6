/* Numbers that come from outside (a Redis reply, a stored counter, a log value): read strictly.
 *
 * strtod() alone accepts far more than a decimal number: leading blanks, "inf", "nan",
 * "infinity", hexadecimal ("0x10", "0x1p3"), and it reads "1e999" as infinity. A counter or a
 * log value must never become one of those, so every number read from outside goes through
 * this module: the text must be exactly a JSON number (RFC 8259 §6:
 * -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?) and, to be parsed, its value finite. */
#ifndef TG_NUM_H
#define TG_NUM_H

#include <stddef.h>

/* 1 if p[0..n) is exactly a JSON number (the grammar only: "1e999" is one), else 0. */
int tg_num_is_json(const char *p, size_t n);

/* p[0..n), a JSON number of at most TG_NUM_MAX_LEN bytes whose value is finite, into *out:
 * 0. Anything else (not the grammar, too long, out of a double's range): -1, *out untouched. */
#define TG_NUM_MAX_LEN 64
int tg_num_parse(const char *p, size_t n, double *out);

#endif
