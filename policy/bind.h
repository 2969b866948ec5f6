/* Arguments the model cannot choose: a tool entry's "set" (values the policy binds, static or
 * from the caller) and "forbid" (arguments removed), applied to a tools/call's arguments before
 * it is decided, so that the decision, the audit line, an approver and the upstream all see the
 * final arguments; and the same arguments removed from the tool's inputSchema in tools/list, so
 * that the model never sees them.
 *
 * Pure: no I/O, no libuv. What a template names comes from the caller's context. */
#ifndef TG_BIND_H
#define TG_BIND_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "policy/policy.h"

/* Who the call is bound to. Value type on the caller's stack; everything borrowed. */
struct tg_bind_ctx {
    const char *grant;          /* ${grant} */
    const char *subject;        /* ${subject}: the caller's subject (the grant's name without one) */
    const char *const *attrs;   /* ${grant.ATTR}: the grant's attributes, name and value in turn */
    size_t nattrs;              /* pairs in attrs */
    const cJSON *claims;        /* ${claims.NAME}: an object of the caller's token's claims (those
                                 * tg_policy_bind_claims names suffice), or NULL: no token */
};

/* 1 if some entry of the policy has "set" or "forbid", else 0 (one load, for the per-call path). */
int tg_policy_binds_any(const struct tg_policy *p);
/* 1 if calls of tool have arguments bound or forbidden (its own entry's or "*"'s), else 0. */
int tg_policy_binds(const struct tg_policy *p, const char *tool);
/* 1 if the binding of tool names a claim (the caller must find the claims), else 0. */
int tg_policy_binds_claims(const struct tg_policy *p, const char *tool);
/* Apply the binding of tool to params (a tools/call's params object; "arguments" is made when a
 * value is set and there was none). Returns 0 (nothing changed), 1 (arguments written), or -1:
 * refused, d filled as a deny (rule "set" or "forbid", the message saying why), params left as
 * they may be half bound (the call goes no further). Refused: a template names an attribute the
 * grant lacks or a claim the caller's token does not carry; with "strict", the model sent a
 * different value for a bound argument, or sent a forbidden one. */
int tg_policy_bind_args(const struct tg_policy *p, const char *tool, const struct tg_bind_ctx *cx, cJSON *params,
                        struct tg_decision *d);
/* Remove the arguments tool binds or forbids from its inputSchema's "properties" and "required".
 * 1 if it changed anything. */
int tg_policy_bind_schema(const struct tg_policy *p, const char *tool, cJSON *input_schema);
/* The claims the policy's templates name, each once (borrowed from p), and how many. */
int tg_policy_bind_claims(const struct tg_policy *p, const char *const **names);
/* The claims of a JWT (compact JWS; the caller verified it already: its payload is only read
 * here) as an object (cJSON_Delete), or NULL if it cannot be read. */
cJSON *tg_bind_token_claims(const char *token, size_t len);
/* The same, borrowed: the claims of tokens asked for lately are kept (256 of up to 8 KiB), so
 * that the calls of one client, which bring the same token each time, read its payload once.
 * Valid until the next call of this function; loop thread only. */
const cJSON *tg_bind_token_claims_memo(const char *token, size_t len);
/* The named claims of a JWT (compact JWS; the caller verified it already: its payload is only
 * read here) as a compact JSON object text, malloc'd; NULL if it carries none of them or cannot
 * be read. */
char *tg_bind_claims_of_token(const char *token, size_t len, const char *const *names, int n);/* The binding as `tollgate policy explain` and `policy test` show it: tg_policy_bind_args(), and
 * when it refuses, e filled as the explanation of that deny (where: "tools.T.set" or
 * "tools.T.forbid", T the entry that binds). */
struct tg_policy_explain;
int tg_policy_explain_bind(const struct tg_policy *p, const char *tool, const struct tg_bind_ctx *cx, cJSON *params,
                           struct tg_policy_explain *e);

#endif
