/* Regex conditions: RE2 syntax (what Intercept's Go regexp reads) matched by PCRE2.
 *
 * A pattern is translated once, at compile time: what RE2 refuses (backreferences,
 * lookaround, atomic groups, possessive and doubled repeats, recursion, conditionals, verbs,
 * \Z, ...) is refused with the reason; what the two engines read differently (\s, \v, octal
 * escapes, literal braces, [ inside a class, classes under (?i)) is rewritten to PCRE2 that
 * means what RE2 means. Matching is bounded (backtracking steps, depth, heap, JIT stack), and
 * a match that hits a bound gives no answer rather than a guess. Pure: no I/O. */
#ifndef TG_REGEX_H
#define TG_REGEX_H

#include <stddef.h>

/* What all the patterns of one policy share: the match limits and the JIT stack. Made by the
 * first tg_regex_compile() that succeeds with *ctx == NULL; owned by the policy, which frees
 * it with tg_regex_ctx_free() after all its patterns. */
struct tg_regex_ctx;
/* One compiled pattern with its match data. Owned by its condition; freed by tg_regex_free(). */
struct tg_regex;

/* Compile the NUL-terminated RE2 pattern pat: 0 and *out, or -1 with *out NULL and the reason
 * (quoting pat, with the offset in it) in why. */
int tg_regex_compile(const char *pat, struct tg_regex_ctx **ctx, struct tg_regex **out, char *why, size_t whysz);
/* Search s (NUL-terminated UTF-8) for the pattern: 1 match, 0 no match, -1 no answer (a match
 * limit was hit, or s is not valid UTF-8). Uses the pattern's match data and its context's JIT
 * stack: one match at a time per context. */
int tg_regex_match(const struct tg_regex *re, const char *s);
void tg_regex_free(struct tg_regex *re);
void tg_regex_ctx_free(struct tg_regex_ctx *ctx);

#endif
