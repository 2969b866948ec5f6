#include "policy/auth.h"

#include <mbedtls/sha256.h>
#include <string.h>

#include "core/base/sha256.h"
#include "core/base/siphash.h"
#include "policy/jwt.h"
#include "policy/jwt_cache.h"
#include "policy/keyring.h"
#include <strings.h>

/* The token after a scheme of skip bytes and its spaces: RFC 6750's b64token charset (printable
 * ASCII without spaces), trailing blanks trimmed. */
static int token_after(struct tg_slice h, size_t skip, struct tg_slice *token)
{
    size_t i = skip;
    while (i < h.len && h.ptr[i] == ' ')
        i++;
    size_t end = h.len;
    while (end > i && (h.ptr[end - 1] == ' ' || h.ptr[end - 1] == '\t'))
        end--;
    if (end == i)
        return TG_EINVAL;
    for (size_t k = i; k < end; k++) {
        unsigned char c = (unsigned char)h.ptr[k];
        if (c <= 0x20 || c >= 0x7f)
            return TG_EINVAL; /* RFC 6750 b64token charset is printable ASCII without spaces */
    }
    *token = tg_slice_of(h.ptr + i, end - i);
    return 0;
}

int tg_auth_bearer(struct tg_slice h, struct tg_slice *token)
{
    if (h.len < 7 || strncasecmp(h.ptr, "Bearer ", 7) != 0)
        return TG_EINVAL;
    return token_after(h, 7, token);
}

/* "Bearer <token>" or "DPoP <token>" (RFC 9449 §7.1; schemes case-insensitive, one token charset). */
int tg_auth_token(struct tg_slice h, struct tg_slice *token, int *dpop)
{
    *dpop = h.len >= 5 && strncasecmp(h.ptr, "DPoP ", 5) == 0;
    return *dpop ? token_after(h, 5, token) : tg_auth_bearer(h, token);
}

static enum tg_auth_result grant_of(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                                    struct tg_principal *who, const char **why, int *by_static,
                                    struct tg_auth_cred *cred);

void tg_principal_of_grant(const struct tg_grant_conf *g, struct tg_principal *who)
{
    who->grant = g;
    tg_strlcpy(who->subject, g->name ? g->name : "", sizeof(who->subject));
    who->exp_s = 0;
    who->jwt = 0;
    who->dpop = 0;
    who->jkt[0] = '\0';
    tg_strlcpy(who->scopes, g->scopes ? g->scopes : "", sizeof(who->scopes));
}

const char *tg_principal_issuer(const struct tg_conf *c, const struct tg_principal *who)
{
    return who->jwt > 0 && (size_t)who->jwt <= c->njwt && c->jwt[who->jwt - 1].issuer != NULL
               ? c->jwt[who->jwt - 1].issuer
               : "";
}

void tg_principal_sha256(const struct tg_conf *c, const struct tg_principal *who, uint8_t out[32])
{
    const char *iss = tg_principal_issuer(c, who);
    size_t ilen = strlen(iss), slen = strnlen(who->subject, sizeof(who->subject));
    char buf[1024];
    if (ilen + 1 + slen <= sizeof(buf)) { /* the usual case: one pass of the fast digest */
        memcpy(buf, iss, ilen);
        buf[ilen] = '\0';
        memcpy(buf + ilen + 1, who->subject, slen);
        tg_sha256(buf, ilen + 1 + slen, out);
        return;
    }
    mbedtls_sha256_context ctx;
    mbedtls_sha256_init(&ctx);
    mbedtls_sha256_starts_ret(&ctx, 0);
    mbedtls_sha256_update_ret(&ctx, (const unsigned char *)iss, ilen + 1); /* its NUL too */
    mbedtls_sha256_update_ret(&ctx, (const unsigned char *)who->subject, slen);
    mbedtls_sha256_finish_ret(&ctx, out);
    mbedtls_sha256_free(&ctx);
}

uint64_t tg_principal_tag(const struct tg_conf *c, const struct tg_principal *who)
{
    static uint8_t key[16];
    static int keyed;
    if (!keyed) {
        if (tg_random(key, sizeof(key)) != 0)
            memset(key, 0x5a, sizeof(key)); /* still a tag; only the owner's speed depends on it */
        keyed = 1;
    }
    const char *iss = tg_principal_issuer(c, who);
    size_t ilen = strlen(iss), slen = strnlen(who->subject, sizeof(who->subject));
    char buf[1024 + TG_SUBJECT_MAX];
    uint64_t t;
    if (ilen < 1024) { /* issuer, its NUL ("a" "bc" is not "ab" "c"), subject: one pass */
        memcpy(buf, iss, ilen + 1);
        memcpy(buf + ilen + 1, who->subject, slen);
        t = tg_siphash(key, buf, ilen + 1 + slen);
    } else {
        t = tg_siphash(key, iss, ilen + 1) ^ (tg_siphash(key, who->subject, slen) * 0x9e3779b97f4a7c15ull);
    }
    return t != 0 ? t : 1; /* 0 means "unknown" */
}

int tg_principal_owns(const struct tg_conf *c, const struct tg_principal *who, const struct tg_owner *o)
{
    if (o->tag != 0) { /* the subject is compared whole; the issuer by index, or by the tag */
        if (strcmp(o->subject, who->subject) != 0)
            return 0;
        if (o->serial == c->serial)
            return o->jwt == who->jwt;
        return tg_principal_tag(c, who) == o->tag;
    }
    uint8_t d[32];
    tg_principal_sha256(c, who, d);
    return tg_ct_equal(d, o->sha256, 32);
}

enum tg_auth_result tg_auth_grant(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                                  struct tg_principal *who, const char **why)
{
    int by_static;
    return grant_of(c, authorization, now_s, who, why, &by_static, NULL);
}

enum tg_auth_result tg_auth_grant_memo(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                                       struct tg_auth_memo *memo, struct tg_principal *who, const char **why)
{
    static uint8_t key[16];
    static int keyed;
    if (!keyed) {
        if (tg_random(key, sizeof(key)) != 0)
            return tg_auth_grant(c, authorization, now_s, who, why); /* no key, no memo */
        keyed = 1;
    }
    /* Only a static bearer token is ever remembered; a DPoP request (whose scheme a remembered
     * principal would lose) is checked in full every time, and its proof after that. */
    if (authorization.ptr == NULL || (authorization.len >= 5 && strncasecmp(authorization.ptr, "DPoP ", 5) == 0))
        return tg_auth_grant(c, authorization, now_s, who, why);
    uint64_t tag = tg_siphash(key, authorization.ptr, authorization.len);
    if (memo->grant != NULL && memo->conf_serial == c->serial && memo->len == authorization.len && memo->tag == tag) {
        tg_principal_of_grant(memo->grant, who); /* only static tokens are memoised */
        if (why)
            *why = NULL;
        return TG_AUTH_OK;
    }
    int by_static = 0;
    enum tg_auth_result r = grant_of(c, authorization, now_s, who, why, &by_static, NULL);
    if (r == TG_AUTH_OK && by_static)
        *memo = (struct tg_auth_memo){tag, c->serial, authorization.len, who->grant};
    else
        *memo = (struct tg_auth_memo){0, 0, 0, NULL};
    return r;
}

const char tg_auth_keys_refetching[] = "unknown key (the issuer's keys are being fetched again)";

/* 1 if the token's unverified iss is issuer: only then may its unknown kid or the issuer's missing
 * keys speak for it (a token of issuer B must not make issuer A refetch). peek caches the iss. */
static int claims_issuer(struct tg_slice tok, const char *issuer, char *peek, size_t peek_sz, int *peeked)
{
    if (!*peeked)
        *peeked = tg_jwt_peek_issuer(tok, peek, peek_sz) == 0 ? 1 : -1;
    return *peeked == 1 && issuer != NULL && strcmp(peek, issuer) == 0;
}

/* A JWT verified for issuer names grant g only if g lists that issuer (grants[].issuers, compared
 * byte for byte like the token's iss): a grant without issuers, a static-token or certificate grant
 * among them, is never reached through a JWT, and one issuer cannot name another issuer's grants. */
static int grant_takes_issuer(const struct tg_grant_conf *g, const char *issuer)
{
    for (size_t i = 0; issuer != NULL && i < g->nissuers; i++)
        if (strcmp(g->issuers[i], issuer) == 0)
            return 1;
    return 0;
}

/* A JWT's part of a channel's credential: when the channel ends, and the issuer. */
static void cred_jwt(struct tg_auth_cred *cred, const struct tg_jwt_conf *j, int64_t exp)
{
    cred->kind = TG_CRED_JWT;
    cred->end_s = exp + (j->skew_s > 0 ? j->skew_s : 0);
    const char *iss = j->issuer ? j->issuer : "";
    tg_sha256(iss, strlen(iss), cred->issuer_sha256);
}

/* The cache's key of a token for a request to resource (NULL: none): a JWT's "aud" may name the
 * resource, so the same token may pass for one route and not another. Two SipHash-2-4 of the token
 * and two of the resource, under process-random keys: 128 bits each that nobody without the keys
 * can aim at, for a fraction of a SHA-256 of the token. 0, or -1 without random keys (no cache). */
static int cache_key(struct tg_slice tok, const char *resource, uint8_t out[32])
{
    static uint8_t k[32];
    static int keyed;
    if (!keyed) {
        if (tg_random(k, sizeof(k)) != 0)
            return -1;
        keyed = 1;
    }
    size_t rn = resource != NULL ? strlen(resource) : 0;
    uint64_t v[4] = {tg_siphash(k, tok.ptr, tok.len), tg_siphash(k + 16, tok.ptr, tok.len),
                     tg_siphash(k, resource != NULL ? resource : "", rn),
                     tg_siphash(k + 16, resource != NULL ? resource : "", rn)};
    memcpy(out, v, sizeof(v));
    return 0;
}

/* Which key set a cached verification used: a fetched set changes without a reload (rotation),
 * and a token whose key left must be verified again. A jwks_file set lives as long as the conf. */
static uint64_t keys_gen(const struct tg_jwt_conf *j)
{
    if (j->keyring == NULL)
        return 0;
    struct tg_keyring_stats st;
    tg_keyring_stats(j->keyring, &st);
    return st.fetched;
}

/* A JWT of issuer i, verified now or before (its cache), names grant g: fill who and cred. */
static void jwt_admit(const struct tg_conf *c, size_t i, const struct tg_grant_conf *g,
                      const struct tg_jwt_claims *claims, int dpop, struct tg_principal *who, struct tg_auth_cred *cred)
{
    who->grant = g;
    memcpy(who->subject, claims->subject, sizeof(who->subject));
    who->exp_s = claims->exp;
    who->jwt = (int)i + 1;
    memcpy(who->scopes, claims->scopes, sizeof(who->scopes));
    who->dpop = (uint8_t)dpop;
    memcpy(who->jkt, claims->jkt, sizeof(who->jkt));
    if (cred != NULL)
        cred_jwt(cred, &c->jwt[i], claims->exp);
}

static enum tg_auth_result grant_of(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                                    struct tg_principal *who, const char **why, int *by_static,
                                    struct tg_auth_cred *cred)
{
    *by_static = 0;
    who->grant = NULL;
    who->subject[0] = '\0';
    who->exp_s = 0;
    who->jwt = 0;
    who->dpop = 0;
    who->jkt[0] = '\0';
    who->scopes[0] = '\0';
    if (why)
        *why = NULL;
    if (authorization.ptr == NULL) {
        for (size_t i = 0; i < c->ngrants; i++)
            if (c->grants[i].anonymous) {
                tg_principal_of_grant(&c->grants[i], who);
                return TG_AUTH_OK;
            }
        if (why)
            *why = "a bearer token is required";
        return TG_AUTH_MISSING;
    }
    struct tg_slice tok;
    int dpop = 0;
    if (tg_auth_token(authorization, &tok, &dpop) != 0) {
        if (why)
            *why = "malformed Authorization header";
        return TG_AUTH_INVALID;
    }
    /* A JWT (three dot-separated parts) verified before under this conf, for this resource, with
     * the same key set, still before its exp + skew: its issuer's cache (policy/jwt_cache.h) says
     * what the verification said, without the signature's cost. Only tokens that failed the
     * static-token check under this conf were ever put there, so looking first changes nothing. */
    size_t dots = 0;
    for (size_t i = 0; i < tok.len; i++)
        dots += tok.ptr[i] == '.';
    uint8_t ck[32];
    int cacheable = dots == 2 && c->njwt > 0 && cache_key(tok, who->resource, ck) == 0;
    for (size_t i = 0; cacheable && i < c->njwt; i++) {
        struct tg_jwt_cached hit;
        if (c->jwt[i].cache != NULL &&
            tg_jwt_cache_get(c->jwt[i].cache, ck, now_s, c->jwt[i].skew_s, keys_gen(&c->jwt[i]), &hit) &&
            hit.grant < c->ngrants) {
            jwt_admit(c, i, &c->grants[hit.grant], &hit.claims, dpop, who, cred);
            return TG_AUTH_OK;
        }
    }
    uint8_t h[32];
    tg_sha256(tok.ptr, tok.len, h);
    const struct tg_grant_conf *found = NULL;
    for (size_t i = 0; i < c->ngrants; i++) {
        int eq = tg_ct_equal(h, c->grants[i].token_sha256, 32) & c->grants[i].has_token;
        if (eq && found == NULL)
            found = &c->grants[i];
    }
    if (found != NULL && dpop) {
        if (why)
            *why = "the DPoP scheme is for a JWT bound to the proof's key, not a static token";
        return TG_AUTH_INVALID;
    }
    if (found != NULL) {
        tg_principal_of_grant(found, who);
        *by_static = 1;
        if (cred != NULL) {
            cred->kind = TG_CRED_TOKEN;
            memcpy(cred->token_sha256, h, 32);
        }
        return TG_AUTH_OK;
    }
    /* A JWT: three dot-separated parts, verified against each configured issuer. */
    if (dots == 2 && c->njwt > 0) {
        const char *last = "invalid token";
        char peek[512];
        int peeked = 0, sticky = 0; /* sticky: last says this issuer's keys are missing or being fetched */
        for (size_t i = 0; i < c->njwt; i++) {
            const struct tg_jwt_conf *j = &c->jwt[i];
            const struct tg_jwks *keys = j->jwks != NULL ? j->jwks : j->keyring ? tg_keyring_jwks(j->keyring) : NULL;
            if (keys == NULL) {
                if (j->keyring != NULL && !sticky && claims_issuer(tok, j->issuer, peek, sizeof(peek), &peeked)) {
                    last = tg_keyring_pending_why(j->keyring); /* before the first good set: 401, and why */
                    sticky = 1;
                }
                continue;
            }
            if (j->audience == NULL && who->resource == NULL) {
                last = "wrong audience"; /* no audience to check it against: never unchecked */
                continue;
            }
            struct tg_jwt_claims claims;
            struct tg_jwt_rules rules = {.issuer = j->issuer,
                                         .audience = j->audience,
                                         .resource = who->resource,
                                         .skew_s = j->skew_s,
                                         .grant_claim = j->grant_claim,
                                         .algs = j->algs,
                                         .subject_claim = j->subject_claim,
                                         .claims = &claims};
            char name[128];
            const char *w = NULL;
            if (tg_jwt_verify(keys, tok, &rules, now_s, name, sizeof(name), &w) != 0) {
                if (sticky)
                    continue;
                if (w && j->keyring != NULL && strcmp(w, "unknown key") == 0 &&
                    claims_issuer(tok, j->issuer, peek, sizeof(peek), &peeked) && tg_keyring_unknown_kid(j->keyring)) {
                    last = tg_auth_keys_refetching; /* the caller may wait for that fetch (core/app/keys.c) */
                    sticky = 1;
                    continue;
                }
                /* A wrong issuer, or an algorithm this issuer does not allow (checked before the
                 * issuer is), means "not this one": keep the more telling reason of another. */
                int not_this = w && (strcmp(w, "wrong issuer") == 0 || strstr(w, "not allowed for this issuer"));
                if (w && (!not_this || strcmp(last, "invalid token") == 0))
                    last = w;
                continue;
            }
            const char *gname = j->grant != NULL ? j->grant : name; /* jwt[].grant: every token's */
            const struct tg_grant_conf *named = NULL;
            for (size_t k = 0; k < c->ngrants && named == NULL; k++)
                if (c->grants[k].name && strcmp(c->grants[k].name, gname) == 0)
                    named = &c->grants[k];
            if (named == NULL)
                last = "the token names no configured grant";
            else if (!grant_takes_issuer(named, j->issuer))
                last = "the token's issuer may not use the grant it names";
            else {
                jwt_admit(c, i, named, &claims, dpop, who, cred);
                struct tg_jwt_cached v = {.grant = (size_t)(named - c->grants), .keys_gen = keys_gen(j), .claims = claims};
                if (cacheable)
                    tg_jwt_cache_put(j->cache, ck, &v);
                return TG_AUTH_OK;
            }
            break;
        }
        if (why)
            *why = last;
        return TG_AUTH_INVALID;
    }
    if (why)
        *why = "invalid token";
    return TG_AUTH_INVALID;
}

const struct tg_grant_conf *tg_auth_cert_grant(const struct tg_conf *c, const char *dn, const char *cn)
{
    for (size_t i = 0; i < c->ngrants; i++) {
        const char *ts = c->grants[i].tls_subject;
        if (ts != NULL && (strcmp(ts, dn) == 0 || (strchr(ts, '=') == NULL && cn[0] && strcmp(ts, cn) == 0)))
            return &c->grants[i];
    }
    return NULL;
}

void tg_auth_cred_of(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                     const struct tg_grant_conf *g, const char *dn, const char *cn, const char *resource,
                     struct tg_auth_cred *cred)
{
    memset(cred, 0, sizeof(*cred));
    const char *name = g->name ? g->name : "";
    tg_sha256(name, strlen(name), cred->grant_sha256);
    if (dn != NULL) {
        cred->has_cert = 1;
        tg_strlcpy(cred->dn, dn, sizeof(cred->dn));
        tg_strlcpy(cred->cn, cn ? cn : "", sizeof(cred->cn));
    }
    cred->kind = dn != NULL && authorization.ptr == NULL ? TG_CRED_CERT : TG_CRED_ANON;
    if (authorization.ptr != NULL) {
        struct tg_principal again;
        again.resource = resource;
        int by_static;
        grant_of(c, authorization, now_s, &again, NULL, &by_static, cred);
    }
}

void tg_auth_cred_of_jwt(const struct tg_conf *c, const struct tg_principal *who, const char *dn, const char *cn,
                         struct tg_auth_cred *cred)
{
    tg_auth_cred_of(c, TG_SLICE_NULL, 0, who->grant, dn, cn, NULL, cred);
    cred_jwt(cred, &c->jwt[who->jwt - 1], who->exp_s);
}

static int named(const char *s, const uint8_t want[32])
{
    uint8_t h[32];
    tg_sha256(s, strlen(s), h);
    return tg_ct_equal(h, want, 32);
}

int tg_auth_cred_holds(const struct tg_conf *c, const struct tg_auth_cred *cred)
{
    const struct tg_grant_conf *g = NULL;
    for (size_t i = 0; i < c->ngrants && g == NULL; i++)
        if (c->grants[i].name != NULL && named(c->grants[i].name, cred->grant_sha256))
            g = &c->grants[i];
    if (g == NULL)
        return 0;
    if (cred->has_cert && tg_auth_cert_grant(c, cred->dn, cred->cn) != g)
        return 0; /* the certificate no longer names this grant (tls_subject changed) */
    switch (cred->kind) {
    case TG_CRED_ANON: return g->anonymous;
    case TG_CRED_TOKEN: return g->has_token && tg_ct_equal(g->token_sha256, cred->token_sha256, 32);
    case TG_CRED_JWT: {
        const char *issuer = NULL; /* still configured, and still one the grant lists */
        for (size_t i = 0; i < c->njwt && issuer == NULL; i++)
            if (c->jwt[i].issuer != NULL && named(c->jwt[i].issuer, cred->issuer_sha256))
                issuer = c->jwt[i].issuer;
        return grant_takes_issuer(g, issuer);
    }
    default: return 1; /* TG_CRED_CERT: checked above */
    }
}
