/* Internal to the policy compiler (policy/compile.c and compile_tool.c): the compile context,
 * its errors, and compiling one entry of "tools". */
#ifndef TG_COMPILE_TOOL_H
#define TG_COMPILE_TOOL_H

#include <cjson/cJSON.h>

#include "core/base/buf.h"
#include "policy/policy_int.h"

/* One compilation: lives on the stack of tg_policy_compile(); p is the policy being built. */
struct tg__cctx {
    const char *name;
    struct tg_buf *err, *warn;
    int nerr;
    struct tg_policy *p;
};

/* Append "NAME: PATH: reason" to the errors (the policy will be refused) or to the warnings. */
void tg__perr(struct tg__cctx *cx, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void tg__pwarn(struct tg__cctx *cx, const char *path, const char *what);
/* An error for every field of obj that is not in known (NULL-terminated), with the path, and
 * with the closest known field when one is close (tg__policy_suggest_key). */
void tg__check_keys(struct tg__cctx *cx, const cJSON *obj, const char *path, const char *const *known);
/* The entry of known (NULL-terminated) closest to key, if it is one edit away (a known key of up
 * to four characters) or two (longer ones), counting a swap of neighbours as one edit and
 * ignoring ASCII case; NULL if none is that close. */
const char *tg__policy_suggest_key(const char *key, const char *const *known);
/* Index of the counter with this key in p->counters, or -1. */
int tg__find_counter(struct tg_policy *p, const char *key);
/* Compile tools.NAME into t (which it overwrites); errors go to cx. */
void tg__compile_tool(struct tg__cctx *cx, const char *name, const cJSON *jt, struct ptool *t);
/* An error for each resource glob of globs[0..n) that starts with a scheme but is not written
 * in the normal form URIs are decided in: it would match no resource (compile.c). */
void tg__check_uri_globs(struct tg__cctx *cx, const char *path, char **globs, int n);
/* "tags": a list of tags into out[0..*nout) (policy/compile_tags.c); errors go to cx. */
void tg__compile_tags(struct tg__cctx *cx, const cJSON *j, const char *path, char ***out, int *nout);
void tg__free_tags(char **tags, int n);
/* Free what tg__compile_tool put in t (not t itself). */
void tg__free_tool(struct ptool *t);

#endif
