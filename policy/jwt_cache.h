/* Verified JWTs, remembered per issuer so that a client sending the same access token with every
 * request pays for its signature once (an ES256 verification costs mbedtls about a millisecond).
 *
 * Pure module: no I/O, no libuv. One cache per jwt[] issuer, made with its conf and freed with it
 * (tg__conf_jwt_free): a reload, which may remove the issuer, its keys or the grant a token names,
 * starts from empty caches, so nothing verified under the old conf is served under the new one.
 * An entry is found by a 256-bit key the caller derives from the whole token and the resource the
 * request was made to (policy/auth.c: keyed SipHash; a token's "aud" may name one route's resource
 * and not another's, RFC 8707) and holds only what the
 * verification concluded (grant, subject, exp, scopes, cnf.jkt) and with which key set: never the
 * token. A fetched key set that changed (rotation, policy/keyring.h) makes its entries stale.
 * It is served only while now < exp + skew; after that the token is verified again, and refused as
 * expired. Bounded: jwt[].cache_entries slots, direct-mapped by the hash (a new token takes its
 * slot from whatever held it), allocated on first use. A token's proof of possession (DPoP) is not
 * part of it: every request's proof is checked after the cache answered. */
#ifndef TG_JWT_CACHE_H
#define TG_JWT_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "policy/jwt.h"

/* What a successful tg_jwt_verify() concluded. Value type. */
struct tg_jwt_cached {
    size_t grant;                 /* index into the conf's grants */
    uint64_t keys_gen;            /* the issuer's key set it was verified with (a fetched set's
                                   * generation, policy/keyring.h): served only while that set is
                                   * still the current one */
    struct tg_jwt_claims claims;  /* exp, subject, scopes, jkt */
};

struct tg_jwt_cache;
/* A cache of at most slots entries (0: a cache that remembers nothing). Owner: the tg_jwt_conf. */
struct tg_jwt_cache *tg_jwt_cache_new(size_t slots);
void tg_jwt_cache_free(struct tg_jwt_cache *c); /* accepts NULL */
/* The entry of key (32 bytes), if it is there, was verified with the key set keys_gen and now_s < exp +
 * skew_s; an entry that fails either is dropped. Returns 1 with *out filled, else 0. c may be NULL. */
int tg_jwt_cache_get(struct tg_jwt_cache *c, const uint8_t key[32], int64_t now_s, int skew_s, uint64_t keys_gen,
                     struct tg_jwt_cached *out);
void tg_jwt_cache_put(struct tg_jwt_cache *c, const uint8_t key[32], const struct tg_jwt_cached *v);
struct tg_jwt_cache_stats {
    size_t entries, slots, bytes;
    uint64_t hits, misses;
};
void tg_jwt_cache_stats(const struct tg_jwt_cache *c, struct tg_jwt_cache_stats *out);

#endif
