/* The compiled form of a policy: what policy/compile.c and compile_tool.c build and
 * policy/decide.c reads. Internal to policy/; callers see struct tg_policy as opaque.
 * Everything below belongs to one struct tg_policy and is freed with it (policy_free() in
 * compile.c, with tg__free_tool() for each tool); nothing changes after compilation. */
#ifndef TG_POLICY_INT_H
#define TG_POLICY_INT_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "policy/counters.h"
#include "policy/regex.h"

enum cop { OP_EQ, OP_NEQ, OP_IN, OP_NOT_IN, OP_LT, OP_LTE, OP_GT, OP_GTE, OP_REGEX, OP_CONTAINS, OP_EXISTS };

enum scope { SCOPE_GRANT, SCOPE_SESSION, SCOPE_GLOBAL, SCOPE_SUBJECT };
enum ckind { CK_BUCKET = 1, CK_WINDOW = 2 };

/* A counter the policy defines (a hosted limit or an Intercept state counter): an entry of
 * tg_policy.counters, which conditions, rules and limits name by index. policy_free() frees its
 * strings. */
struct pcounter {
    char *key;   /* identity within the policy: "L:name" (hosted) or "S:scope.name" (Intercept) */
    char *label; /* for messages */
    enum ckind kind;
    enum scope scope;
    double capacity;   /* bucket */
    int64_t window_ms; /* bucket: refills capacity in this time; window: its length */
    /* Made once the policy is compiled (tg__finish_counters), for decisions: */
    size_t keylen;     /* strlen(key) */
    char *jlabel;      /* key + 2 as a JSON string, cut at 120 bytes: its name in counters_json */
    size_t jlabel_len;
};

/* What hashing a counter's key for one caller starts with: the hash state after
 * "upstream\x1fkey\x1fscope\x1f" for keys whose identity has idlen bytes (the total length
 * seeds the hash, see tg_counters_hash_begin), and for private keys (tg_keyhash) the state after
 * the parts upstream, key, scope. The one part of a policy that changes after compilation:
 * decisions remember here the prefix they last hashed, per counter, so that the next caller of
 * the same upstream hashes only its identity. Each state holds for the upstream that
 * tg_policy.upmemo names while its gen is upmemo's (0: nothing yet). Safe for the reason the
 * regex match data is (regex.c): decisions run on one thread and never nest. An entry of
 * tg_policy.keymemo (one per counter), freed with it by policy_free(). */
struct keymemo {
    uint64_t gen, priv_gen;
    size_t idlen;
    struct tg_counters_hasher h;
    struct tg_keyhash priv;
};

/* The upstream the prefixes in keymemo are of: a decision for another upstream names it here and
 * moves gen on, which makes every keymemo state stale at once. An upstream name longer than up
 * is never remembered. Freed by policy_free(). */
struct upmemo {
    uint64_t gen; /* starts at 1; a 64-bit count never wraps */
    size_t len;
    char up[48];
};

/* One condition of a rule (conditions[i]); an entry of rule.conds. Its path, value and re are
 * owned by it and freed by tg__free_tool(). */
struct cond {
    int is_state;
    char **path; /* args path segments */
    long *path_idx; /* [npath]: each segment as a list index, -1 if not one (tg__finish_tool) */
    int npath;
    int counter; /* state: index into counters, or -1 if the policy never defines it */
    enum cop op;
    cJSON *value;
    double num;
    struct tg_regex *re; /* regex: compiled at load; this condition owns it */
    struct hcond *hist;  /* a history condition (policy/history_rules.h), or NULL; owned. Such a
                          * condition has is_state 1 and counter -1, so that argument conditions
                          * are told from it by the test they already make */
};

/* One Intercept rule of a tool (rules[i]); an entry of ptool.rules, freed with its conds by
 * tg__free_tool(). */
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
    long *incr_idx; /* [nincr]: as cond.path_idx */
    int nincr;
    double limit; /* the value after a reservation must be <= or < this (limit_op) */
    enum tg_limit_op limit_op;
    struct hwhen *when; /* "when": the calls the rule applies to (history_rules.h), NULL all; owned */
    int gate;           /* deny or when: the one test decide_call makes of a rule before its conditions */
};

enum taction { TA_ALLOW, TA_DENY, TA_APPROVE };

/* One argument a tool entry binds ("set": value) or forbids ("forbid": value NULL): an entry of
 * ptool.bind, its name and value owned by it and freed by tg__free_tool(). templated: some
 * string in value holds a ${...} template (policy/bind.c expands it for each call), 2 when one
 * of them names a claim. */
struct bitem {
    char *name;
    cJSON *value;
    int templated;
};

/* One entry of "tools": an entry of tg_policy.tools, or tg_policy.wildcard for "*". What it holds
 * is freed by tg__free_tool(); policy_free() frees the array and the wildcard itself. */
struct ptool {
    char *name;
    enum taction action;
    char *reason;
    int *limits; /* indices into tg_policy.counters */
    int nlimits;
    struct rule *rules;
    int nrules;
    int approval_ms;
    int approval_mode; /* enum tg_approval_mode */
    int unconditional_deny; /* some rule denies without conditions: hidden from tools/list */
    /* The counters a call of this tool can reach (state conditions, rule counters, limits), each
     * once, for the decision to hash and prefetch before it evaluates anything; reach_stops: the
     * list ends at a deny (the action, or a rule without conditions), so "*" is not reached. Made
     * by tg__finish_tool(). */
    int *reach;
    int nreach;
    int reach_stops;
    char *scopes; /* "scopes": the scope set (policy/scopes.h) a call needs, or NULL */
    char **tags;  /* "tags" (never on "*"): what the tool does, for history conditions and brakes */
    int ntags;
    struct brake *brake; /* "brake" (policy/history_rules.h), or NULL; owned */
    uint64_t *tagh;      /* tg_hist_tag_hash of each of tags (tg__finish_history), or NULL; owned */
    /* "set" and "forbid" (policy/compile_bind.c): the entry's own, and what a call of the tool
     * applies (ebind: its own and, for the arguments it does not name, those of "*"; borrowed from
     * the two entries, made by tg__finish_bind). strict: "strict" (-1 not given); ebind_strict:
     * the entry's, else "*"'s, else 0. */
    struct bitem *bind;
    int nbind;
    int strict;
    const struct bitem **ebind;
    int nebind;
    int ebind_strict;
};

/* One slot of tg_policy.tool_slots: idx + 1 of a tool (0: empty) and the hash of its name. */
struct tool_slot {
    uint32_t hash;
    int idx1;
};

/* "resources" or "prompts": glob lists, embedded in struct tg_policy. */
struct globset {
    int present;
    int has_default; /* the group says "default": else the policy's default decides */
    int default_deny;
    char **allow, **deny;
    int nallow, ndeny;
    char *reason;
    struct scoped_glob *scoped; /* "scopes": {GLOB: [scopes]}, in the file's order */
    int nscoped;
};

/* One entry of a "resources" or "prompts" group's "scopes": what reading (getting) what glob
 * matches needs. Owned by its globset, freed with it (compile.c). */
struct scoped_glob {
    char *glob;
    char *scopes; /* a scope set (policy/scopes.h) */
};

/* A compiled policy. Immutable and refcounted: made by tg_policy_compile() (or _load, _deny_all)
 * with one reference; each holder (the conf, a call in flight) takes one with tg_policy_ref();
 * the last tg_policy_unref() frees it. */
struct tg_policy {
    int refcnt;
    char *name;
    char file_sha256[65]; /* of the file it was loaded from (hex), "" when it was not read from one */
    int default_deny;
    int hide_all;
    char **hide;
    int nhide;
    struct ptool *tools; /* sorted by name */
    int ntools;
    /* tools by name: open addressing (linear probing) over tool_mask + 1 slots, made by
     * tg__index_tools() when the names are distinct; NULL otherwise (a binary search then). */
    struct tool_slot *tool_slots;
    uint32_t tool_mask;
    struct ptool *wildcard;
    struct pcounter *counters;
    int ncounters;
    struct keymemo *keymemo; /* [ncounters]: see struct keymemo; written by decisions */
    struct upmemo *upmemo;   /* with keymemo */
    char **methods;
    int nmethods;
    struct globset resources, prompts;
    /* Regex conditions: one match context (limits, JIT stack) for all of them, made with the
     * first; NULL if there is none. */
    struct tg_regex_ctx *rx;
    /* History (policy/history_rules.h): records is 1 when the policy uses tags, history
     * conditions or brakes, so its allowed calls are remembered; hist (NULL when it does not)
     * holds the argument paths its entries remember and the tags of resources and prompts. */
    int records;
    struct hpolicy *hist;
    /* The claims some "set" names (${claims.NAME}), each once: what a caller's token must keep
     * for the policy (tg_policy_bind_claims). */
    char **bind_claims;
    int nbind_claims;
    int binds; /* some entry has "set" or "forbid": without, a call's arguments are not looked at */
};

/* "scopes": a list of scope-tokens into a scope set (*out, NULL on error); errors go to cx
 * (policy/compile_scopes.c). And a group's {GLOB: [scopes]} into g. */
struct tg__cctx;
void tg__compile_scopes(struct tg__cctx *cx, const cJSON *j, const char *path, char **out);
void tg__compile_scoped_globs(struct tg__cctx *cx, const cJSON *j, const char *path, struct globset *g);
void tg__free_scoped_globs(struct globset *g);
/* Add each scope of set to need (n bytes); 1 if have lacks one of them (compile_scopes.c). */
int tg__scopes_need(const char *set, const char *have, char *need, size_t n);
/* Does s match the glob pat ("*" crosses "/" unless star_stops; decide_resource.c)? */
int tg__glob_match(const char *pat, const char *s, int star_stops);
/* Go's %v for a float64 (decide_note.c). */
void tg__go_float(double d, char *out, size_t n);
/* Is tag one of tags[0..n)? (compile_tags.c) */
int tg__has_tag(char *const *tags, int n, const char *tag);
/* The entry of tools named name, or NULL (decide.c). */
const struct ptool *tg__find_tool(const struct tg_policy *p, const char *name);

/* "set", "forbid" and "strict" of a tool entry (policy/compile_bind.c); and, once every entry is
 * compiled, each entry's ebind. */
void tg__compile_bind(struct tg__cctx *cx, const cJSON *jt, const char *path, struct ptool *t);
void tg__finish_bind(struct tg_policy *p);
void tg__free_bind(struct ptool *t);
/* The pieces of a "set" string (compile_bind.c): literal text ("$$" is one '$'), and the
 * templates ${grant.ATTR}, ${claims.NAME}, ${subject}, ${grant}. cb is called for each piece in
 * order (a literal piece may come in several parts); a nonzero return stops the walk and is
 * returned. -1 with *err for a malformed template (cb may have run for what came before). */
enum tref { TREF_TEXT, TREF_ATTR, TREF_CLAIM, TREF_SUBJECT, TREF_GRANT };
typedef int (*tg__tref_cb)(void *ud, enum tref kind, const char *s, size_t n);
int tg__template_walk(const char *s, tg__tref_cb cb, void *ud, const char **err);

/* Fill each counter's keylen and jlabel (compile.c, after every counter is defined). */
void tg__finish_counters(struct tg_policy *p);
/* The hash of a tool's name in tg_policy.tool_slots, and the index built over the sorted tools. */
uint32_t tg__tool_hash(const char *name);
void tg__index_tools(struct tg_policy *p);
/* Fill path_idx and incr_idx of every rule of t, and its reach list (compile.c). */
void tg__finish_tool(struct ptool *t);
/* A path segment as a list index: what strtol reads if that is all of it and >= 0, else -1. */
long tg__path_index(const char *seg);

/* A window's name for messages: "second", "minute", "hour", "day" or "N seconds" (compile_tool.c). */
void tg__policy_window_label(int64_t ms, char *out, size_t n);

/* Where a decision came from: the step of the decision that gave its verdict, recorded by
 * tg__policy_decide_traced() for policy/explain.c (so explain prints the path the decision took
 * instead of walking the rules again). The other tg_policy_decide_* functions record nothing. */
enum tg__trace_at {
    TG_TRACE_HIDE,      /* the tool is hidden ("hide") */
    TG_TRACE_DEFAULT,   /* no entry names the tool and the policy denies by default */
    TG_TRACE_ACTION,    /* entry's action: deny, or approve (the tool's own entry) */
    TG_TRACE_RULE,      /* entry->rules[index]: a deny rule, or condition cond did not hold */
    TG_TRACE_INCREMENT, /* entry->rules[index]: its increment_from is not a countable amount */
    TG_TRACE_COUNTER,   /* entry->rules[index]: its counter would pass its limit */
    TG_TRACE_LIMIT,     /* entry->limits[index]: the token bucket is empty */
    TG_TRACE_ALLOWED,   /* every rule held: entry allowed it (NULL: allowed by default) */
    TG_TRACE_BRAKE,     /* entry's "brake": the call repeats itself */
};
struct tg__trace {
    enum tg__trace_at at;
    const struct ptool *entry; /* the tool's own entry or the wildcard "*" */
    int index;                 /* into entry's rules or limits, by at */
    int cond;                  /* TG_TRACE_RULE: the condition that did not hold; -1 otherwise */
};
/* tg_policy_decide_call() that also records into tr where the verdict came from. */
struct tg_decision;
struct tg_counters;
struct tg_caller;
void tg__policy_decide_traced(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                              const char *tool, const cJSON *args, int64_t now_ms, struct tg_decision *d,
                              struct tg__trace *tr);

/* Append ",NAME:VALUE" for counter pc to d->counters_json (policy/decide_note.c): what
 * snprintf would write, truncation included. */
void tg__note_counter(struct tg_decision *d, const struct pcounter *pc, double value);
/* A refusal by a limit: retry_after_ms, and the limit's capacity and what is left of it (whole
 * units, never below 0) for the rate-limit signals. For a window, left is worked out from the
 * value now and the limit's operator (< leaves one unit less than <=). */
void tg__note_limit(struct tg_decision *d, uint64_t retry_ms, double limit, double left);
void tg__note_window_limit(struct tg_decision *d, uint64_t retry_ms, double limit, int limit_op, double now);
/* Empty d->counters_json (and its length with it). */
void tg__note_clear(struct tg_decision *d);
/* piece[0..n) (len[k] bytes each) copied to out, cut after room bytes, then a NUL (out has room
 * + 1 bytes): what snprintf("%s%s...") writes into a buffer of room + 1. The end (the NUL). */
char *tg__cat_cut(char *out, size_t room, const char *const *piece, const size_t *len, int n);

#endif
