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

enum tg_auth_result {
    TG_AUTH_OK = 0,
    TG_AUTH_MISSING = 1, /* no credential and no anonymous grant */
    TG_AUTH_INVALID = 2, /* a credential that matches nothing, or a malformed header */
};

/* authorization: the Authorization header value, or a NULL slice when absent.
 * A bearer token is a static token (SHA-256 in the conf) or a JWT from a configured issuer whose
 * grant claim names a configured grant. now_s is the wall clock (for exp/nbf). On failure *why
 * (may be NULL) says why in words fit for WWW-Authenticate error_description. */
enum tg_auth_result tg_auth_grant(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                                  const struct tg_grant_conf **grant, const char **why);
/* tg_auth_grant() through a connection's memo (policy/auth_memo.h). */
enum tg_auth_result tg_auth_grant_memo(const struct tg_conf *c, struct tg_slice authorization, int64_t now_s,
                                       struct tg_auth_memo *memo, const struct tg_grant_conf **grant,
                                       const char **why);
/* Extract the token of "Bearer <token>" (scheme case-insensitive). Returns 0 or TG_EINVAL. */
int tg_auth_bearer(struct tg_slice authorization, struct tg_slice *token);

#endif
