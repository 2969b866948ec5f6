/* Grants from credentials. Pure functions: no I/O, no libuv.
 *
 * Static bearer tokens are kept only as SHA-256 and compared in constant time
 * against every configured grant (no early exit, so timing does not reveal
 * which grant nearly matched). */
#ifndef TG_AUTH_H
#define TG_AUTH_H

#include "core/base/sha256.h"

#include <stdint.h>

#include "core/base/buf.h"
#include "policy/auth_memo.h"
#include "core/conf/conf.h"
#include "policy/jwt.h"

enum tg_auth_result {
    TG_AUTH_OK = 0,
    TG_AUTH_MISSING = 1, /* no credential and no anonymous grant */
    TG_AUTH_INVALID = 2, /* a credential that matches nothing, or a malformed header */
};

/* Who a request speaks for: the grant its credential names and, inside it, the subject. Value
 * type, filled by tg_auth_grant() on the caller's stack; grant points into the conf it was
 * checked against. */
struct tg_principal {
    const struct tg_grant_conf *grant;
    char subject[TG_SUBJECT_MAX]; /* a JWT: its subject claim (jwt[].subject_claim, "sub"); a static
                                   * token, a certificate or an anonymous grant: the grant's name */
    int64_t exp_s;                /* a JWT's exp (0: the credential does not expire) */
    int jwt;                      /* a JWT: 1 + the index of its jwt[] issuer; else 0 */
    uint8_t dpop;                 /* the request used the DPoP scheme (Authorization: DPoP TOKEN) */
    char jkt[TG_JWT_JKT_LEN + 1]; /* a JWT's cnf.jkt (RFC 9449), "" when the token is not bound */
    char scopes[TG_SCOPES_MAX];   /* what it may do (policy/scopes.h): a JWT's "scope"/"scp"; any
                                   * other credential: its grant's scopes (grants[].scopes), else none */
    const char *resource;         /* in, set by the caller and kept: the RFC 8707 resource the request
                                   * is made to, which a JWT's "aud" may name instead of
                                   * jwt[].audience (NULL: only the audience) */
};

/* *why when a JWT's kid was not in its issuer's fetched set and a refetch now runs for it
 * (policy/keyring.h): the caller may hold the request until that fetch ends and ask again. Compare
 * the pointer. */
extern const char tg_auth_keys_refetching[];

/* authorization: the Authorization header value, or a NULL slice when absent.
 * A bearer token is a static token (SHA-256 in the conf) or a JWT from a configured issuer whose
 * grant claim names a configured grant. now_s is the wall clock (for exp/nbf). On success *who is
 * filled; on failure who->grant is NULL and *why (may be NULL) says why in words fit for
 * WWW-Authenticate error_description. */
enum tg_auth_result tg_auth_grant(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                                  struct tg_principal *who, const char **why);
/* tg_auth_grant() through a connection's memo (policy/auth_memo.h). */
enum tg_auth_result tg_auth_grant_memo(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                                       struct tg_auth_memo *memo, struct tg_principal *who, const char **why);
/* The principal of a grant reached without a token (a client certificate, an anonymous grant):
 * the grant itself is the subject. */
void tg_principal_of_grant(const struct tg_grant_conf *g, struct tg_principal *who);
/* The issuer of who's JWT (c->jwt[who->jwt - 1].issuer), or "" for a static token, a
 * certificate or an anonymous grant. */
const char *tg_principal_issuer(const struct tg_conf *c, const struct tg_principal *who);
/* Who, inside its grant, a principal is, as a digest: SHA-256 of its JWT issuer ("" for a static
 * token, a certificate or an anonymous grant), a NUL and its subject. Two users of one grant
 * differ, and so do one subject name from two issuers, or a JWT whose subject is the grant's
 * name and the grant's static token. c: the conf who was checked against (who->jwt indexes it). */
void tg_principal_sha256(const struct tg_conf *c, const struct tg_principal *who, uint8_t out[32]);
/* The same identity as a keyed 64-bit tag (SipHash under a key random per process): what a
 * session this process made or adopted keeps, so that every request naming it is matched
 * without a SHA-256 (tg_principal_owns). Never leaves the process. */
uint64_t tg_principal_tag(const struct tg_conf *c, const struct tg_principal *who);
/* What a session keeps of the subject that made it, to match every request naming it. */
struct tg_owner {
    const char *subject;    /* its subject (NUL-terminated) */
    uint64_t tag;           /* tg_principal_tag() of its maker, or 0: not known here */
    uint64_t serial;        /* the conf serial when it was taken, and */
    int jwt;                /* ... the maker's who->jwt under that conf */
    const uint8_t *sha256;  /* tg_principal_sha256() of its maker (what a cluster record binds) */
};
/* 1 if who (checked against c) is the owner's maker. Under the conf the owner was taken with, a
 * compare of subject and issuer index; after a reload, the tag; with no tag, the SHA-256. */
int tg_principal_owns(const struct tg_conf *c, const struct tg_principal *who, const struct tg_owner *o);
/* What authenticated a long-lived channel (a WebSocket, a legacy SSE stream), kept so that a reload
 * can ask whether it still names the same grant, and a JWT's channel can end at its exp. Only
 * digests and names: never the token. Value type, owned by whoever holds it. */
enum tg_cred_kind { TG_CRED_ANON, TG_CRED_TOKEN, TG_CRED_JWT, TG_CRED_CERT };
struct tg_auth_cred {
    uint8_t kind;              /* enum tg_cred_kind */
    uint8_t has_cert;          /* a client certificate came too (dn, cn) */
    uint8_t token_sha256[32];  /* TG_CRED_TOKEN */
    int64_t end_s;             /* TG_CRED_JWT: exp + the issuer's skew_s, when the channel ends */
    uint8_t issuer_sha256[32]; /* TG_CRED_JWT: SHA-256 of the issuer (names of any length, fixed size) */
    uint8_t grant_sha256[32];  /* SHA-256 of the grant's name */
    char dn[512], cn[256];     /* has_cert: the certificate's subject */
};
/* Fill cred for a request tg_auth_grant() (or a certificate, cert_grant) just admitted to grant g
 * (resource: as who->resource was). */
void tg_auth_cred_of(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                     const struct tg_grant_conf *g, const char *dn, const char *cn, const char *resource,
                     struct tg_auth_cred *cred);
/* The same for a JWT the request's principal who (jwt > 0) came from, verified under c already:
 * what the verification found is used, the token is not verified again. */
void tg_auth_cred_of_jwt(const struct tg_conf *c, const struct tg_principal *who, const char *dn, const char *cn,
                         struct tg_auth_cred *cred);
/* 1 while cred still names a grant of the same name under c (a reload may have removed or rotated
 * the token, removed the grant, changed its tls_subject or issuers); else 0. */
int tg_auth_cred_holds(const struct tg_conf *c, const struct tg_auth_cred *cred);
/* The grant whose tls_subject matches a certificate's subject dn (or, for a tls_subject without
 * '=', its common name cn), or NULL. */
const struct tg_grant_conf *tg_auth_cert_grant(const struct tg_conf *c, const char *dn, const char *cn);
/* Extract the token of "Bearer <token>" (scheme case-insensitive). Returns 0 or TG_EINVAL. */
int tg_auth_bearer(struct tg_slice authorization, struct tg_slice *token);
/* The same for "Bearer <token>" or "DPoP <token>"; *dpop says which. */
int tg_auth_token(struct tg_slice authorization, struct tg_slice *token, int *dpop);

/* DPoP (RFC 9449) for a request tg_auth_grant() admitted as who, under the issuer's jwt[].dpop
 * (policy/auth_dpop.c; the proof itself is policy/dpop.h's):
 *   - a static token, certificate or anonymous grant by the Bearer scheme: passes (the DPoP scheme
 *     with a static token was refused by tg_auth_grant already);
 *   - a JWT by the Bearer scheme: passes unless it is bound (cnf.jkt) or its issuer says
 *     "required" (a bound token is never a bearer token, whatever the mode);
 *   - a JWT by the DPoP scheme: refused under "off" and when unbound; else exactly one DPoP header
 *     whose proof passes tg_dpop_verify() for this request and the token's cnf.jkt.
 * Value type on the caller's stack; borrows all. */
struct tg_dpop_replay;
struct tg_dpop_request {
    struct tg_slice proof;  /* the DPoP header's value (NULL slice: none) */
    unsigned nproofs;       /* how many DPoP headers came */
    struct tg_slice method; /* "GET", "POST", ... */
    struct tg_slice url;    /* the public URL the client used, not yet normalised (no query) */
    int64_t now_s;
};
enum tg_dpop_verdict {
    TG_DPOP_PASS = 0,
    TG_DPOP_BAD_TOKEN = 1, /* 401 WWW-Authenticate: DPoP error="invalid_token" */
    TG_DPOP_BAD_PROOF = 2, /* 401 WWW-Authenticate: DPoP error="invalid_dpop_proof" */
};
/* *algs: the TG_JWT_ALG_ bits a proof may use (the issuer's, else every DPoP issuer's), for the
 * challenge's algs; *why: a static reason on failure. */
enum tg_dpop_verdict tg_auth_dpop(const struct tg_conf *c, const struct tg_principal *who,
                                  struct tg_slice authorization, const struct tg_dpop_request *rq,
                                  struct tg_dpop_replay *replay, unsigned *algs, const char **why);

#endif
