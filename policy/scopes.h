/* OAuth scopes: what a credential grants (a JWT's "scope" or "scp" claim, a grant's scopes) and
 * what a policy requires of a tool, resource or prompt (policy/policy.h, "scopes").
 *
 * A set of scopes travels as one NUL-terminated string of scope-tokens (RFC 6749 §3.3: printable
 * ASCII without space, '"' or '\') separated by single spaces, each once: the form the
 * WWW-Authenticate "scope" parameter carries, so it can be written into a header as it is.
 * Pure: no I/O. */
#ifndef TG_SCOPES_H
#define TG_SCOPES_H

#include <cjson/cJSON.h>
#include <stddef.h>

#define TG_SCOPES_MAX 1024     /* bytes of a credential's set, NUL included */
#define TG_SCOPES_MAX_COUNT 64 /* scopes in one set */
#define TG_SCOPE_MAX 128       /* bytes of one scope, NUL included */

/* 1 if s[0..n) is one scope-token (1 to TG_SCOPE_MAX - 1 bytes of %x21 / %x23-5B / %x5D-7E). */
int tg_scope_token_ok(const char *s, size_t n);

/* The scopes of a verified token's claims into out (n bytes, at least TG_SCOPES_MAX): "scope", a
 * space-separated string (RFC 9068 §2.2.3, RFC 8693 §4.2), and "scp", an array of strings or one
 * space-separated string (as some providers write it); with both, every scope of either. No claim:
 * the empty set. 0, or -1 with *why ("malformed scope claim": a claim of another type, an empty
 * entry or one that is no scope-token; "too many scopes": more than TG_SCOPES_MAX_COUNT, or
 * more than n bytes): the token is refused, never taken with fewer scopes than it says. */
int tg_scopes_of_claims(const cJSON *claims, char *out, size_t n, const char **why);

/* 1 if the set (space-separated, may be NULL: empty) holds scope. */
int tg_scopes_has(const char *set, const char *scope);

/* Append scope to the set in out (n bytes) unless it is there. -1 if it does not fit. */
int tg_scopes_add(char *out, size_t n, const char *scope);

#endif
