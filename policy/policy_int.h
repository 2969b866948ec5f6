/* The compiled form of a policy: what policy/compile.c and compile_tool.c build and
 * policy/decide.c reads. Internal to policy/; callers see struct tg_policy as opaque. */
#ifndef TG_POLICY_INT_H
#define TG_POLICY_INT_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "policy/counters.h"
#include "policy/policy.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

enum cop { OP_EQ, OP_NEQ, OP_IN, OP_NOT_IN, OP_LT, OP_LTE, OP_GT, OP_GTE, OP_REGEX, OP_CONTAINS, OP_EXISTS };

enum scope { SCOPE_GRANT, SCOPE_SESSION, SCOPE_GLOBAL };
enum ckind { CK_BUCKET = 1, CK_WINDOW = 2 };

struct pcounter {
    char *key;   /* identity within the policy: "L:name" (hosted) or "S:scope.name" (Intercept) */
    char *label; /* for messages */
    enum ckind kind;
    enum scope scope;
    double capacity;   /* bucket */
    int64_t window_ms; /* bucket: refills capacity in this time; window: its length */
};

struct cond {
    int is_state;
    char **path; /* args path segments */
    int npath;
    int counter; /* state: index into counters, or -1 if the policy never defines it */
    enum cop op;
    cJSON *value;
    double num;
    pcre2_code *re;            /* regex: compiled (JIT where it can be) at load */
    pcre2_match_data *md;      /* regex: this pattern's match data, reused by every match */
    pcre2_match_context *mctx; /* regex: the policy's limits (struct tg_policy owns it) */
};

struct rule {
    char *name;
    int deny;
    struct cond *conds;
    int nconds;
    char *on_deny;
    int counter; /* state counter, -1 if none */
    double increment;
    char *incr_from; /* "args.a.b" as written, for messages */
    char **incr_path;
    int nincr;
    double limit; /* the value after a reservation must be <= or < this (limit_op) */
    enum tg_limit_op limit_op;
};

enum taction { TA_ALLOW, TA_DENY, TA_APPROVE };

struct ptool {
    char *name;
    enum taction action;
    char *reason;
    int *limits;
    int nlimits;
    struct rule *rules;
    int nrules;
    int approval_ms;
    int unconditional_deny; /* some rule denies without conditions: hidden from tools/list */
};

struct globset {
    int present;
    int default_deny;
    char **allow, **deny;
    int nallow, ndeny;
    char *reason;
};

struct tg_policy {
    int refcnt;
    char *name;
    int default_deny;
    int hide_all;
    char **hide;
    int nhide;
    struct ptool *tools; /* sorted by name */
    int ntools;
    struct ptool *wildcard;
    struct pcounter *counters;
    int ncounters;
    char **methods;
    int nmethods;
    struct globset resources, prompts;
    /* Regex conditions: one match context (limits, JIT stack) for all of them, made with the
     * first. Matching writes to the match data and the JIT stack, which is safe because
     * decisions run on one thread and never nest. */
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
};

#endif
