/* Regex conditions: RE2 syntax on PCRE2 (policy/regex.c). */
#ifndef TG_REGEX_H
#define TG_REGEX_H

#include <stddef.h>

struct tg_policy;
struct cond;

/* Compile pat into out->re (and its match data); 0, or -1 with the reason in why. */
int tg__compile_regex(struct tg_policy *p, const char *pat, struct cond *out, char *why, size_t whysz);
/* 1 match, 0 no match, -1 no answer (a limit was hit, or s is not valid UTF-8). */
int tg__regex_match(const struct cond *c, const char *s);

#endif
