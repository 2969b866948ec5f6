/* Session-history rules and runaway-loop brakes: the compiled form of a rule's "when", of a
 * condition {history: {...}, op, value}, of a tool entry's "brake" and of the tags of resources
 * and prompts (policy/compile_history.c), and what a decision does with them
 * (policy/decide_history.c) over the history a counter store keeps (policy/history.h).
 * Internal to policy/. Everything here belongs to its struct tg_policy and is freed with it. */
#ifndef TG_HISTORY_RULES_H
#define TG_HISTORY_RULES_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "policy/history.h"
#include "policy/policy.h"
#include "policy/policy_int.h"

/* Which calls a history condition counts or a "when" applies to: a call carrying one of tags, a
 * tool whose name matches one of tools, a resource or prompt matching resources or prompts. With
 * no list at all (a history condition without filter), every call. */
struct hfilter {
    char **tags;
    uint64_t *tagh; /* tg_hist_tag_hash of each */
    int ntags;
    char **tools, **resources, **prompts;
    int ntools, nresources, nprompts;
};

enum hscope { HS_SUBJECT = 0, HS_GRANT, HS_SESSION };

/* A condition {history: {...}, op, value}: struct cond.hist (op and num are the cond's). */
struct hcond {
    struct hfilter f;
    int64_t within_ms;
    enum hscope scope;
    int same, distinct; /* index into hpolicy.paths, or -1 */
};

/* A rule's "when" (struct rule.when): only tags and tools. */
struct hwhen {
    struct hfilter f;
};

/* A tool entry's "brake" (struct ptool.brake). */
struct brake {
    int repeats;       /* more than this many identical calls within within_ms: braked */
    int64_t within_ms;
    int cycle;         /* 0, or the longest repeated sequence looked for (2..8) */
    char **tags;       /* "*" only: the tools it applies to (none: every tool) */
    int ntags;
    char *message;     /* what the model reads instead of the default, or NULL */
};

/* An argument path that entries remember the value of ("same"/"distinct"). */
struct hpath {
    char *text; /* "args.a.b" as written */
    char **seg;
    long *idx;  /* each segment as a list index, -1 if not one */
    int n;
    uint64_t seed; /* the hash of text: mixed into the value's hash */
};

/* {GLOB: [tags]} of "resources" or "prompts". */
struct tagged_glob {
    char *glob;
    char **tags;
    int ntags;
};

/* The policy's history: struct tg_policy.hist. */
struct hpolicy {
    struct hpath paths[TG_HIST_VALS];
    int npaths;
    int reads_grant; /* some condition has scope grant */
    int cycles;      /* some brake looks for cycles: every remembered call needs its identity */
    struct tagged_glob *rtags, *ptags;
    int nrtags, nptags;
};

/* ---- compiling (compile_history.c) --------------------------------------------------- */

struct tg__cctx;
/* A condition that has "history" (compile_cond hands it over whole); path is conditions[i]. */
void tg__compile_history_cond(struct tg__cctx *cx, const cJSON *c, const char *path, struct cond *out);
/* A rule's "when" (path: the rule's). */
void tg__compile_when(struct tg__cctx *cx, const cJSON *j, const char *path, struct hwhen **out);
/* A tool entry's "brake" (path: tools.NAME). */
void tg__compile_brake(struct tg__cctx *cx, const cJSON *j, const char *path, const char *tool, struct brake **out);
/* "tags" of a "resources" or "prompts" group: {GLOB: [tags]} (path: resources.tags). */
void tg__compile_glob_tags(struct tg__cctx *cx, const cJSON *j, const char *path, int prompts);
/* After every tool is compiled: records, and hist made when it does. */
void tg__finish_history(struct tg_policy *p);
void tg__free_hcond(struct hcond *h);
void tg__free_hwhen(struct hwhen *w);
void tg__free_brake(struct brake *b);
void tg__free_hpolicy(struct hpolicy *h);
/* "history{tags [a], within 10 minutes, scope session, same args.path} lte 3" for explain. */
void tg__describe_history_cond(const struct cond *c, char *out, size_t n);
/* A duration as a message says it: "60 s", "10 min", "1 h". */
void tg__hist_duration(int64_t ms, char *out, size_t n);

/* ---- deciding (decide_history.c) ------------------------------------------------------- */

/* What one decision of a recording policy knows of history: on decide_call()'s stack. The rings
 * are read when first needed, at most once each, and always before anything is added. */
struct tg__hctx {
    const struct tg_policy *p;
    struct tg_counters *cs;
    const struct tg_caller *who;
    const char *tool;
    const struct ptool *t; /* the tool's own entry, or NULL */
    const cJSON *args;
    int64_t now_ms;
    int continuation;      /* an MRTR round: this call is in the history already; nothing recorded */
    unsigned have;         /* HX_* bits */
    uint64_t ks1, ks2, kg1, kg2;
    int own;               /* the subject is the grant's own: one ring serves both */
    struct tg_hist_view subj, grant;
    struct tg_hist_entry self; /* this call, as it would be recorded */
    /* The last history condition that did not hold: */
    double count;
    int unproven;          /* the window reaches past what the ring still holds */
    int64_t known_since_ms;
    struct tg_hist_entry cause; /* the newest earlier call it counted (valid if has_cause) */
    int has_cause;
};

void tg__hist_begin(struct tg__hctx *h, const struct tg_policy *p, struct tg_counters *cs,
                    const struct tg_caller *who, const char *tool, const struct ptool *t, const cJSON *args,
                    int64_t now_ms, int continuation);
/* The brake of the tool's entry (or of "*" when the tool's has none and its tags fit): 1 and
 * the decision made (LIMITED, rule "brake") when this call repeats itself; *owner its entry. */
int tg__hist_brake(struct tg__hctx *h, const struct ptool *wild, struct tg_decision *d, const struct ptool **owner);
/* Does a rule with this "when" apply to a call of tool (own entry t)? */
int tg__hist_when(const struct hwhen *w, const char *tool, const struct ptool *t);
/* A history condition: 1 holds, 0 does not (or cannot be proven: h->unproven). */
int tg__hist_cond(struct tg__hctx *h, const struct cond *c);
/* The refusal of rule r whose history condition c did not hold (after tg__hist_cond). */
void tg__hist_refuse(struct tg__hctx *h, const struct rule *r, const struct cond *c, struct tg_decision *d);
/* Remember this call (an allowed or parked first round): the subject's ring and the grant's. */
void tg__hist_record(struct tg__hctx *h);

#endif
