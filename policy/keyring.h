/* An issuer's keys fetched at run time (jwt[].jwks_url, jwt[].discovery): a mutable holder the
 * immutable conf points to (struct tg_jwt_conf.keyring), so that keys fetched after the conf was
 * loaded, and kept across reloads, reach verification.
 *
 * Pure module (no libuv, no I/O): the fetching driver lives on the app floor (core/app/keys.c) and
 * tells the holder what it got (tg_keyring_set_jwks, tg_keyring_failed); verification
 * (policy/auth.c) reads the current set and reports a token whose kid the set lacks through the
 * function the driver installed (tg_keyring_on_unknown_kid), never through a symbol of a higher
 * floor. Beside it, the pure rules the driver and the conf loader share: which URLs may be
 * fetched, where discovery documents live, what a discovery document must say, how long a set
 * is kept (Cache-Control max-age within refresh_min_s..refresh_max_s), and which keys of a
 * fetched set are used.
 *
 * Ownership: refcounted. The app's driver holds one reference for as long as an issuer with the
 * same issuer, source and CA is configured (a reload reuses the holder: no refetch, no keys lost);
 * each conf that points at it holds one, dropped by tg_conf_unref. */
#ifndef TG_POLICY_KEYRING_H
#define TG_POLICY_KEYRING_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"

struct tg_jwks;
struct tg_keyring;

/* Why a key of a fetched set is not used (tg_keyring_parse_jwks): an HMAC secret ("oct"), an
 * OKP key (Ed25519, X25519), "use" other than "sig", an "alg" tollgate does not verify with, an
 * EC curve other than P-256, another or no "kty". */
enum tg_jwks_skip {
    TG_JWKS_SKIP_OCT,
    TG_JWKS_SKIP_OKP,
    TG_JWKS_SKIP_USE,
    TG_JWKS_SKIP_ALG,
    TG_JWKS_SKIP_CURVE,
    TG_JWKS_SKIP_KTY,
    TG_JWKS_SKIP_N
};
/* Its name in logs and metrics: "oct", "okp", "use", "alg", "curve", "kty". */
const char *tg_jwks_skip_name(enum tg_jwks_skip r);
/* The keys one fetched set skipped: how many per reason, and "KID:REASON" for each, space
 * separated (a kid quotable: visible ASCII only, else '?'; "-" for none; cut at the end of the
 * buffer with "..."). */
struct tg_jwks_skipped {
    unsigned n[TG_JWKS_SKIP_N];
    unsigned total;
    char list[512];
};

/* The driver's answer to a token whose kid the current set lacks: 1 if a refetch now runs for
 * it (the request may wait for it), 0 if none will (at most one per refresh_min_s per issuer). */
typedef int (*tg_keyring_refetch_fn)(void *arg, struct tg_keyring *k);

/* id: what makes two configured issuers share one holder (issuer, source and CA). */
struct tg_keyring *tg_keyring_new(const char *id);
struct tg_keyring *tg_keyring_ref(struct tg_keyring *k);
void tg_keyring_unref(struct tg_keyring *k); /* accepts NULL */
const char *tg_keyring_id(const struct tg_keyring *k);

/* The current set, or NULL before the first good one. Valid until the next tg_keyring_set_jwks
 * (verification reads it and is done before the loop runs on). */
const struct tg_jwks *tg_keyring_jwks(const struct tg_keyring *k);
/* A good set came (the holder takes it; the old one is freed). */
void tg_keyring_set_jwks(struct tg_keyring *k, struct tg_jwks *jwks, int64_t now_s);
/* A fetch failed: the last good set stays; why (words, any bytes) is kept, made safe to quote. */
void tg_keyring_failed(struct tg_keyring *k, const char *why, int64_t now_s);

/* What a fetch said last: "" after a good one, else the failure in words (no quote, backslash or
 * control byte). Valid until the next fetch ends. */
const char *tg_keyring_why(const struct tg_keyring *k);
/* Why a token of this issuer gets 401 before the first good set: "the issuer's keys are not
 * fetched yet" and the last failure's words. Valid like tg_keyring_why. */
const char *tg_keyring_pending_why(const struct tg_keyring *k);
struct tg_keyring_stats {
    uint64_t fetched;          /* good sets */
    uint64_t failed;           /* failed fetches */
    uint64_t unknown_kid;      /* tokens with a kid the set lacked */
    uint64_t unknown_refetch;  /* refetches those started */
    int64_t last_ok_s;         /* wall clock of the last good set (0: none) */
    size_t nkeys;              /* keys in the current set */
    uint64_t skipped[TG_JWKS_SKIP_N]; /* keys of fetched sets skipped as unusable, per reason */
};
void tg_keyring_stats(const struct tg_keyring *k, struct tg_keyring_stats *out);

void tg_keyring_on_unknown_kid(struct tg_keyring *k, tg_keyring_refetch_fn fn, void *arg);
/* Verification saw a kid the set lacks: 1 if a refetch runs for it now (see tg_keyring_refetch_fn). */
int tg_keyring_unknown_kid(struct tg_keyring *k);
void tg_keyring_count_refetch(struct tg_keyring *k);
/* A fetch's set skipped these keys: counted (per fetch: a set fetched again counts again). */
void tg_keyring_count_skipped(struct tg_keyring *k, const struct tg_jwks_skipped *sk);

/* ---- the rules ------------------------------------------------------------------------ */

#define TG_KEYRING_MAX_BYTES (1 << 20) /* a fetched JWKS or discovery document, like TG_JWKS_MAX_FILE */
#define TG_KEYRING_DEFAULT_TTL_S 3600  /* a set whose answer has no max-age (then clamped) */

/* 0 if url may be fetched for keys: https://, or http:// to a loopback address (127.0.0.0/8,
 * [::1], localhost); else -1 and *why. */
int tg_keyring_url_ok(const char *url, const char **why);
/* How long a set is kept, in seconds: the answer's Cache-Control max-age clamped to
 * [min_s, max_s]; min_s for no-cache or no-store; TG_KEYRING_DEFAULT_TTL_S clamped when it says
 * neither (cc NULL, no max-age, a malformed one). */
int64_t tg_keyring_ttl(const char *cc, int64_t min_s, int64_t max_s);
/* The discovery documents of an issuer: OpenID (ISSUER/.well-known/openid-configuration) and
 * RFC 8414 §3 (the well-known segment between the host and the issuer's path). Malloc'd, or NULL
 * for an issuer that is no http(s) URL. */
char *tg_keyring_openid_url(const char *issuer);
char *tg_keyring_rfc8414_url(const char *issuer);
/* A discovery document's jwks_uri (malloc'd) after checking that its "issuer" is the configured
 * one byte for byte and that the jwks_uri may be fetched; else NULL and why. */
char *tg_keyring_discovery_jwks_uri(const char *json, size_t len, const char *issuer, char *why, size_t why_sz);
/* A fetched JWKS into a set: the signing keys tollgate can use (RSA, EC P-256 with "use" absent or
 * "sig" and "alg" absent or one it verifies) are kept, the others skipped (an encryption key, an
 * Ed25519 key); never HMAC secrets. 0 with *out, or TG_EINVAL and why (garbage, more than
 * TG_JWKS_MAX_KEYS keys, no usable key, a bad usable key). skipped (NULL: not wanted) says which
 * keys were skipped and why, whatever the result (all zero when the set is not a keys array). */
int tg_keyring_parse_jwks(const char *json, size_t len, struct tg_jwks **out, char *why, size_t why_sz,
                          struct tg_jwks_skipped *skipped);

#endif
