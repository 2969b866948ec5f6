/* `tollgate policy explain` and `policy test` (core/cmd/policy_cmd.c): the caller a call's
 * arguments are bound to (policy/bind.h), given as --attribute NAME=VALUE (a grant attribute, over
 * the conf's) and --claim NAME=VALUE (a token claim: VALUE as JSON when it is JSON, else a
 * string), both repeatable, or a case's attributes: and claims: maps. */
#ifndef TG_CMD_POLICY_BIND_H
#define TG_CMD_POLICY_BIND_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "policy/explain.h"
#include "policy/policy.h"

#define BIND_OPTS_MAX 64
/* Value type, zeroed = none; tg__bind_opts_dispose() frees what it holds. */
struct tg__bind_opts {
    char *attrs[2 * BIND_OPTS_MAX]; /* name and value in turn */
    size_t nattrs;
    cJSON *claims; /* an object, or NULL: no token */
};

void tg__bind_opts_dispose(struct tg__bind_opts *b);
/* Add a claim (claim 1: v any JSON, replacing one of the same name) or an attribute (v a string;
 * -1 when it is not, or BIND_OPTS_MAX are there). */
int tg__bind_opt_add(struct tg__bind_opts *b, int claim, const char *name, size_t n, const cJSON *v);
/* "--claim NAME=VALUE" or "--attribute NAME=VALUE" (or "--claim=NAME=VALUE") at argv[*i]: 1 if it
 * is one (*i moved past its value; *bad when it is malformed), else 0. */
int tg__bind_option(int argc, char **argv, int *i, struct tg__bind_opts *b, int *bad);
/* Bind call ({name, arguments}) as the gateway would, for grant and subject (NULL: the grant): 0
 * it goes on to the decision (the final arguments printed when print and the tool binds any), -1
 * refused (e explains it). */
int tg__bind_call(const struct tg_policy *p, cJSON *call, const char *grant, const char *subject,
              const struct tg__bind_opts *b, int print, struct tg_policy_explain *e);

#endif
