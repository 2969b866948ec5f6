/* DPoP (RFC 9449): proofs of possession that a client signs per request with a key of its own, the
 * token's binding to that key (cnf.jkt), and the memory that stops one proof being used twice.
 *
 * Pure module: no libuv and no I/O. Signatures, key parsing and base64url go through policy/jwt.c.
 *
 * What a proof (the DPoP request header) must be to pass tg_dpop_verify():
 *   - a compact JWS of at most TG_DPOP_MAX_PROOF bytes, three base64url parts;
 *   - a header with "typ" exactly "dpop+jwt", an "alg" among chk->algs (RS256, ES256, PS256: never
 *     "none" or HMAC), no "crit", and a "jwk" that is a public key suiting the alg: EC P-256 on the
 *     curve, or RSA of 2048 to 8192 bits; a jwk with a private member ("d", "p", "q", "dp", "dq",
 *     "qi", "oth", "k") is refused;
 *   - signed by that jwk;
 *   - claims: "htm" equal to the request method; "htu" equal, once both are normalised
 *     (tg_dpop_htu_normalise), to the request URL; a numeric "iat" within chk->window_s of now
 *     either way; a "jti" string of 1 to TG_DPOP_MAX_JTI bytes; "ath" equal to base64url(SHA-256
 *     of the access token);
 *   - the RFC 7638 thumbprint of the jwk equal to chk->jkt (the token's cnf.jkt);
 *   - a jti not seen with the same key since its proof's iat left the window (the replay cache).
 * Checked in that order; the first failure wins, and only a proof that passed everything else is
 * remembered. The header checks and the key are kept for the last few dozen headers whose proof
 * had a good signature (the cache below), so a client that signs with one key has it parsed once. */
#ifndef TG_DPOP_H
#define TG_DPOP_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"
#include "policy/jwt.h"

#define TG_DPOP_MAX_PROOF 8192 /* bytes of a proof */
#define TG_DPOP_MAX_JTI 256    /* bytes of a jti */
#define TG_DPOP_MAX_URL 4096   /* bytes of an htu */

/* jwt[].dpop */
enum tg_dpop_mode {
    TG_DPOP_OFF = 0,      /* the DPoP scheme is refused; so is a token bound with cnf.jkt */
    TG_DPOP_OPTIONAL = 1, /* an unbound token as a bearer token; a bound one only with a valid proof */
    TG_DPOP_REQUIRED = 2, /* only bound tokens, each request with a valid proof */
};

/* Normalise an absolute http or https URL for comparing a proof's htu with the request (RFC 9449
 * §4.3, RFC 3986 §6.2.2 and §6.2.3): scheme and host in lower case, the scheme's default port
 * (":80" for http, ":443" for https) dropped, an empty path made "/", query and fragment dropped.
 * The path is kept byte for byte. Appends to out. Returns 0, or TG_EINVAL when url is not an
 * absolute http or https URL with a host, or longer than TG_DPOP_MAX_URL (out is then unchanged
 * in meaning: truncate it yourself if you care). A WebSocket upgrade is an HTTP GET: its proof
 * names the http(s) URL, never ws(s). */
int tg_dpop_htu_normalise(struct tg_slice url, struct tg_buf *out);

/* The RFC 7638 SHA-256 thumbprint of a public JWK, base64url (TG_JWT_JKT_LEN characters and a
 * NUL into out): EC from crv, kty, x, y; RSA from e, kty, n; each member as the JWK spells it.
 * Returns 0, or TG_EINVAL for another key type or a missing or non-base64url member. */
int tg_dpop_thumbprint(const struct cJSON *jwk, char out[TG_JWT_JKT_LEN + 1]);

/* The replay cache: the (key thumbprint, jti) pairs of accepted proofs, each until its iat leaves
 * the window. Keys are SipHash-2-4 tags under a random per-cache key. Bounded: at most max
 * entries (its storage grows by doubling up to that, and is counted in tg_dpop_replay_bytes).
 * When it is full and the oldest entry is still inside its window, that entry is evicted and the
 * cache remembers the evicted iat as a floor: from then on a proof whose iat is at or before the
 * floor is refused ("too old for the replay cache"), so an evicted jti can never be replayed; a
 * client's next, fresh proof passes. Owner: the server (one per process, surviving reloads);
 * freed with tg_dpop_replay_free(). */
struct tg_dpop_replay;
struct tg_dpop_replay *tg_dpop_replay_new(size_t max);
/* A reload's limits.dpop_replay_entries; a smaller max evicts the oldest as above. */
void tg_dpop_replay_set_max(struct tg_dpop_replay *r, size_t max);
void tg_dpop_replay_free(struct tg_dpop_replay *r);
/* Remember (jkt, jti) of a proof made at iat until until_s. Returns 0 the first time, TG_EINVAL
 * when the pair is remembered already, TG_ELIMIT when iat is at or before the eviction floor. */
int tg_dpop_replay_add(struct tg_dpop_replay *r, const char *jkt, struct tg_slice jti, int64_t iat, int64_t until_s,
                       int64_t now_s);
struct tg_dpop_replay_stats {
    size_t entries, max, bytes; /* bytes: what the cache holds allocated, itself included */
    uint64_t evicted;           /* entries dropped while still in their window (the cache was full) */
    uint64_t refused_floor;     /* proofs refused for an iat at or before the floor */
    int64_t floor_iat;          /* 0 until something was evicted */
    uint64_t key_hits, key_misses; /* proofs whose header (and key) was known already, or not */
};
void tg_dpop_replay_stats(const struct tg_dpop_replay *r, struct tg_dpop_replay_stats *out);

/* One request's proof and what it must match. Value type on the caller's stack; borrows all. */
struct tg_dpop_check {
    struct tg_slice proof;  /* the DPoP header's value */
    struct tg_slice method; /* the request method, e.g. "POST" */
    struct tg_slice htu;    /* the request URL, normalised (tg_dpop_htu_normalise) */
    struct tg_slice token;  /* the access token the proof goes with (for ath) */
    const char *jkt;        /* the token's cnf.jkt, TG_JWT_JKT_LEN characters */
    unsigned algs;          /* TG_JWT_ALG_ bits the proof may use; HS256 never counts */
    int window_s;           /* |now - iat| accepted, seconds */
    int64_t now_s;
};

/* Returns 0 when the proof passes (and is then remembered in replay), else TG_EINVAL with *why a
 * static sentence fit for WWW-Authenticate error_description (never proof bytes). */
int tg_dpop_verify(const struct tg_dpop_check *chk, struct tg_dpop_replay *replay, const char **why);

/* The algorithms a proof may use under an issuer's jwt[].algorithms: "ES256 RS256" and so on, for
 * a WWW-Authenticate algs parameter (HS256 never). Appends to out. */
void tg_dpop_algs_names(unsigned algs, struct tg_buf *out);

#endif
