/* JWT bearer tokens: a set of verification keys (JWKS) and compact-JWS verification.
 *
 * Pure module: no libuv and no I/O, except tg_jwks_load(), which reads one
 * file (call it at config load, never on the loop). Signatures go through
 * mbedtls 2.28; header and payload are parsed with tollgate's strict JSON
 * parser (duplicate members, invalid UTF-8 and trailing bytes are refused).
 *
 * What a token must be to pass tg_jwt_verify():
 *   - at most TG_JWT_MAX_TOKEN bytes, exactly three dot-separated parts, each
 *     base64url without padding, with canonical trailing bits;
 *   - a header object whose "alg" is exactly "HS256", "RS256", "ES256" or
 *     "PS256" ("none" and everything else is refused) and one of
 *     rules->algs, with no "crit" member;
 *     "typ" is optional and any string; "kid", if present, a string;
 *     "jku", "jwk", "x5u" and "x5c" are ignored: keys only ever come from
 *     the configured JWKS;
 *   - signed by a key of the configured set that suits the alg: HS256 only
 *     with "oct" keys, RS256 and PS256 only with "RSA" keys, ES256 only with "EC" P-256
 *     keys, and never with a key whose own "alg" names another algorithm. So
 *     an RSA or EC public key can never serve as an HMAC secret. With a
 *     "kid" only the key with that kid is tried; without one, every key that
 *     suits the alg is;
 *   - an ES256 signature is the raw 64-byte r||s of RFC 7518 §3.4 (an ASN.1
 *     DER signature is refused); an RS256 or PS256 signature is exactly as
 *     long as the modulus; PS256 is RSASSA-PSS with SHA-256, MGF1-SHA-256 and
 *     a 32-byte salt (RFC 7518 §3.5);
 *   - a payload object with a numeric "exp" (required) and optional numeric
 *     "nbf" and "iat" (a non-numeric one makes the token malformed), checked
 *     against now_s with rules->skew_s of tolerance each way: expired when
 *     now_s >= exp + skew, not yet valid when now_s + skew < nbf or < iat;
 *   - "iss" equal to rules->issuer, and "aud" equal to rules->audience or
 *     rules->resource, or an array holding one of them, when either is set (a
 *     missing or non-string claim is a mismatch);
 *   - a non-empty string in the claim rules->grant_claim (when set), and one in
 *     rules->subject_claim ("sub" when NULL) of fewer than TG_SUBJECT_MAX
 *     bytes: who the token speaks for, inside the grant;
 *   - "scope" and "scp", when present, as tg_scopes_of_claims() takes them
 *     (policy/scopes.h): a malformed or oversized claim refuses the token.
 *
 * The payload is parsed only after the signature has been verified, so
 * claims are only ever read from an authenticated payload. */
#ifndef TG_JWT_H
#define TG_JWT_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"
#include "policy/scopes.h"

#define TG_JWT_MAX_TOKEN 16384     /* bytes of a compact JWS; longer tokens are "malformed token" */
#define TG_JWKS_MAX_FILE (1 << 20) /* bytes of a JWKS file */
#define TG_JWKS_MAX_KEYS 256       /* keys in one set */
#define TG_JWT_MIN_RSA_BITS 2048
#define TG_JWT_MAX_RSA_BITS 8192
#define TG_JWT_MIN_HMAC_BYTES 32 /* RFC 7518 §3.2: an HS256 key is at least as long as the hash */

/* An immutable set of verification keys.
 * Owner: the conf that loaded it; freed with tg_jwks_free().
 * Verification does not change what the set accepts, but mbedtls caches
 * per-key precomputations (RSA Montgomery constant, the P-256 comb table)
 * inside the key on first use: verify from one thread at a time. */
struct tg_jwks;

/* Load a JWKS file ({"keys":[...]}). Each key is
 *   kty "oct" (HS256): "k", base64url, at least TG_JWT_MIN_HMAC_BYTES bytes;
 *   kty "RSA" (RS256, PS256): "n", "e", base64url big-endian; the modulus has
 *                      TG_JWT_MIN_RSA_BITS to TG_JWT_MAX_RSA_BITS bits;
 *   kty "EC"  (ES256): crv "P-256", "x", "y", 32 bytes each, on the curve;
 * with optional "kid" (string, unique in the file), "alg" (must fit the kty)
 * and "use" (must be "sig"). Other members are ignored, except that "d" on an
 * RSA or EC key is refused: private keys do not belong in a verification set.
 * Every problem found is appended to err as "PATH: keys[N].FIELD: reason\n"
 * (or "PATH: reason\n" for the file as a whole); then nothing is returned.
 * Returns 0 with *out set, or TG_EINVAL. */
int tg_jwks_load(const char *path, struct tg_jwks **out, struct tg_buf *err);
/* The same from memory (for tests and reload). name_for_errors replaces PATH. */
int tg_jwks_parse(const char *json, size_t len, const char *name_for_errors, struct tg_jwks **out, struct tg_buf *err);
/* Accepts NULL. */
void tg_jwks_free(struct tg_jwks *k);
/* Keys in the set (0 for NULL). */
size_t tg_jwks_count(const struct tg_jwks *k);

/* The "iss" of a token's payload, NOT verified (which issuer's keys a token with an unknown kid
 * asks for: only that issuer refetches). 0 with out filled, or -1. */
int tg_jwt_peek_issuer(struct tg_slice token, char *out, size_t out_sz);

/* The algorithms an issuer may use, as bits of tg_jwt_rules.algs. */
#define TG_JWT_ALG_HS256 0x1u
#define TG_JWT_ALG_RS256 0x2u
#define TG_JWT_ALG_ES256 0x4u
#define TG_JWT_ALG_PS256 0x8u
#define TG_JWT_ALGS_DEFAULT (TG_JWT_ALG_RS256 | TG_JWT_ALG_ES256)

/* The TG_JWT_ALG_ bit of an algorithm name the verifier knows ("HS256", "RS256", "ES256", "PS256",
 * exact case), or 0. */
unsigned tg_jwt_alg_bit(const char *name);

#define TG_SUBJECT_MAX 256 /* bytes of a subject, NUL included */

/* What a verified token says, beyond the grant it names. Value type: the caller's, filled by
 * tg_jwt_verify() on success. */
#define TG_JWT_JKT_LEN 43 /* base64url of a SHA-256 thumbprint (RFC 7638) */
struct tg_jwt_claims {
    int64_t exp;                  /* "exp" in whole seconds (huge values clamped) */
    char subject[TG_SUBJECT_MAX]; /* the subject claim's value */
    char scopes[TG_SCOPES_MAX];   /* "scope" and "scp" (policy/scopes.h); "" when it has none */
    char jkt[TG_JWT_JKT_LEN + 1]; /* "cnf":{"jkt"} of a DPoP-bound token (RFC 9449 §6.1), "" when unbound */
};

/* What a token's claims must match. Value type: the caller fills one on its stack (policy/auth.c,
 * from a struct tg_jwt_conf); the strings are borrowed from the conf. */
struct tg_jwt_rules {
    const char *issuer;      /* required match of "iss" (NULL = not checked) */
    const char *audience;    /* must be "aud" or one element of an "aud" array (NULL = not checked) */
    int skew_s;              /* allowed clock skew for exp/nbf/iat, >= 0 */
    const char *grant_claim; /* claim whose string value names the grant, e.g. "sub"; NULL: none is
                              * read (the issuer's tokens all name one grant), grant is left "" */
    unsigned algs;           /* TG_JWT_ALG_ bits the issuer may use; 0 = TG_JWT_ALGS_DEFAULT */
    const char *subject_claim;   /* claim whose string value is the subject (NULL = "sub") */
    struct tg_jwt_claims *claims; /* when not NULL: filled once the token is verified */
    const char *resource;         /* RFC 8707: the resource the token is used at, accepted in "aud"
                                   * as audience is (either suffices; both NULL = not checked) */
};

/* Verify a compact JWS against keys and rules at time now_s (Unix seconds).
 * On success returns 0 and copies the grant claim value into grant
 * (NUL-terminated); if it does not fit in grant_sz bytes, returns TG_ELIMIT
 * with *why = "grant claim too long".
 * Otherwise returns TG_EINVAL and sets *why to a short static reason fit for a
 * log line and a WWW-Authenticate error_description (never token bytes):
 *   "malformed token"     size, parts, base64url, JSON, member types, "crit"
 *   "unsupported alg"     "alg" is not HS256, RS256, ES256 or PS256
 *   "algorithm X is not allowed for this issuer"   X is not in rules->algs
 *   "unknown key"         no key with the token's kid, or none suits the alg
 *   "bad signature"       no suitable key verifies it
 *   "expired", "not yet valid", "wrong issuer", "wrong audience",
 *   "missing grant claim" absent, not a string, or empty;
 *   "missing subject claim" the same for the subject claim, or as long as TG_SUBJECT_MAX;
 *   "malformed cnf claim" "cnf" is not an object, or its "jkt" is not a 43-character string;
 *   "malformed scope claim", "too many scopes" (policy/scopes.h).
 * Order: the encoding of all three parts and the header (malformed, alg,
 * allowed alg, crit), the key, the signature, then the payload (malformed, exp, nbf/iat,
 * iss, aud, grant, subject, scopes); the first failure wins. *why is NULL on success. */
int tg_jwt_verify(const struct tg_jwks *keys, struct tg_slice token, const struct tg_jwt_rules *rules, int64_t now_s,
                  char *grant, size_t grant_sz, const char **why);

/* 0 when sig is alg's signature of input under a key of the set that suits alg (RS256, PS256:
 * RSA; ES256: EC; never HS256, whose "key" would be a secret), else TG_EINVAL: for what carries its
 * own key, a DPoP proof's "jwk" header made a one-key set by tg_jwks_parse() (policy/dpop.c). */
int tg_jwks_verify_sig(const struct tg_jwks *keys, const char *alg, struct tg_slice input, const uint8_t *sig,
                       size_t siglen);

#endif
