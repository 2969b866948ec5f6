/* Policies: PolicyLayer's two shapes (hosted JSON, Intercept rules in JSON or
 * YAML) compiled into one immutable struct tg_policy, and decisions over it.
 *
 * Pure: no I/O except reading the file in tg_policy_load(), no libuv. The
 * clock is a parameter. Counter state lives in a struct tg_counters owned by
 * the caller (the server), outside any policy, so a reload keeps it; decisions
 * reach it only through policy/counters.h, so any store behind that interface
 * serves. This header includes it, for the store's constructor and metrics.
 *
 * Semantics (ARCHITECTURE.md "Policy files"):
 *   hosted  {version, default, tools:{T:{action, reason, limits:[{counter, window, max, scope}]}}}
 *           limits are token buckets (capacity max, refill max/window), scope grant|subject|session|global.
 *   Intercept {version, description, default, hide, tools:{T|"*":{rules:[{name, action: evaluate|deny,
 *           conditions:[{path, op, value}], on_deny, state:{counter, window, increment, increment_from},
 *           rate_limit:"N/window"}]}}}  state counters are fixed UTC windows.
 * Both may appear in one file. Extensions (tollgate): per tool "approval_timeout" (seconds or
 * "5m") and "approval_mode" (hold, retry or task), "methods" (non-standard methods allowed by name), "resources" and "prompts" rules, and
 * "scopes": per tool (either shape) a list of OAuth scopes a call needs, and in "resources" and
 * "prompts" a map {GLOB: [scopes]}. */
#ifndef TG_POLICY_H
#define TG_POLICY_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "core/base/buf.h"
#include "policy/counters.h"

struct tg_policy;

enum tg_verdict {
    TG_VERDICT_ALLOW = 0,
    TG_VERDICT_DENY,    /* -32001 */
    TG_VERDICT_LIMITED, /* -32002 */
    TG_VERDICT_APPROVE, /* parked for a human; -32003 if refused or timed out */
};

/* How a call that needs approval meets its client (per tool "approval_mode", per upstream
 * approval_mode in the conf): held open while a human decides, answered at once and run when
 * called again after the approval, or a task the client polls. AUTO: neither says (the gateway
 * chooses by the client: core/call/approvals_retry.c). */
enum tg_approval_mode {
    TG_APPROVAL_AUTO = 0,
    TG_APPROVAL_HOLD,
    TG_APPROVAL_RETRY,
    TG_APPROVAL_TASK,
};
/* "hold", "retry" or "task" to its mode; -1 for anything else. */
int tg_policy_approval_mode(const char *s);

#define TG_MAX_RESERVATIONS 64 /* counters one call may take (checked when a policy is compiled) */

/* One counter a decision took. Value type, embedded in struct tg_decision (res[]). */
struct tg_reservation {
    uint64_t h1, h2;
    int kind; /* 1 bucket, 2 window */
    double amount;
    int64_t window_start;
    double capacity;
};

/* The outcome of a decision. Value type: the tg_policy_decide_* functions fill caller storage;
 * a call's own is malloc'd in core/gate/dispatch.c (k->dec), freed by call_release() in core/call/call.c. */
struct tg_decision {
    enum tg_verdict verdict;
    char rule[128];     /* rule or limit that decided, "" for a plain allow */
    char message[512];  /* what the model reads */
    char counter[128];  /* LIMITED: the counter */
    uint64_t retry_after_ms;
    double limit, remaining;  /* LIMITED by a limit: its capacity and what is left of it, when
                               * limit_known (a brake or a state condition: not known) */
    unsigned char limit_known;
    int approval_timeout_ms;
    int approval_mode;  /* APPROVE: the tool's enum tg_approval_mode (AUTO: the upstream's) */
    struct tg_reservation res[TG_MAX_RESERVATIONS];
    int nres;
    char counters_json[512]; /* counter values after the decision, for the audit log */
    size_t counters_json_len; /* strlen(counters_json) */
    int shared;              /* set by the caller: the reservations are in a shared store
                              * (cluster/), so a refund goes there, not to the local one */
    char history_json[256];  /* a refusal by a history condition: the earlier call that caused it,
                              * {"tool"|"resource"|"prompt": NAME, "upstream": U, "at": ISO-8601},
                              * for error.data.history; "" otherwise */
    unsigned char by_history; /* DENY by a history condition (history_json may still be "": none
                               * counted, or history too short): tollgate_history_refusals_total */
};

/* Who is calling: the identities that counter scopes refer to. Value type on the caller's stack
 * (core/gate/dispatch.c); the strings are borrowed for the decision. */
struct tg_caller {
    const char *grant;
    const char *session;
    const char *upstream; /* counters of different upstreams never mix */
    const char *subject;  /* who inside the grant (the credential's subject); NULL: the grant's own */
    const char *issuer;   /* the subject's issuer (a JWT's jwt[].issuer); NULL or "": none (a static
                           * token, a certificate, an anonymous grant) */
};

/* Load a JSON or YAML policy (chosen by content: JSON if it starts with '{'). Errors are appended
 * to err as "FILE: PATH.IN.FILE: reason\n"; warnings (unknown fields) to warn. */
int tg_policy_load(const char *path, struct tg_policy **out, struct tg_buf *err, struct tg_buf *warn);
/* Compile from a tree (takes no ownership). name is used in messages. */
int tg_policy_compile(const cJSON *root, const char *name, struct tg_policy **out, struct tg_buf *err,
                      struct tg_buf *warn);
/* A policy that denies and hides everything (an upstream with no policy fails closed). */
struct tg_policy *tg_policy_deny_all(void);
struct tg_policy *tg_policy_ref(struct tg_policy *p);
void tg_policy_unref(struct tg_policy *p);
const char *tg_policy_name(const struct tg_policy *p);
/* SHA-256 (hex) of the file the policy was loaded from, or NULL when it was not read from one. */
const char *tg_policy_file_sha256(const struct tg_policy *p);
/* How many of its counters have scope "session" (which count per grant for stateless requests). */
int tg_policy_session_counters(const struct tg_policy *p);
size_t tg_policy_tool_count(const struct tg_policy *p);

/* Decide a tools/call. args may be NULL. Reserves counters on ALLOW and APPROVE. */
void tg_policy_decide_call(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who,
                           const char *tool, const cJSON *args, int64_t now_ms, struct tg_decision *d);
/* The same for the retry of a call already decided (an MRTR round): every rule and condition is
 * judged again, but nothing is reserved: the first round's reservation stands for the call. */
void tg_policy_decide_continuation(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who,
                                   const char *tool, const cJSON *args, int64_t now_ms, struct tg_decision *d);
/* Undo the reservations of a decision (the upstream call failed, or approval was refused). */
void tg_policy_refund(struct tg_counters *c, const struct tg_decision *d, int64_t now_ms);
/* Remember an allowed resources/read (prompt 0: name is the URI) or prompts/get (prompt 1) in the
 * caller's history, with the tags of the group's "tags" patterns that match it, for history
 * conditions that count resources or prompts. Nothing when the policy does not record. */
void tg_policy_record_read(const struct tg_policy *p, struct tg_counters *c, const struct tg_caller *who, int prompt,
                           const char *name, int64_t now_ms);
/* Should tools/list show this tool to callers of this policy? */
int tg_policy_tool_visible(const struct tg_policy *p, const char *tool);
/* Non-standard method named by the policy's "methods": 1 allowed, 0 not. */
int tg_policy_method_allowed(const struct tg_policy *p, const char *method);
/* resources/read (uri) and prompts/get (name): ALLOW or DENY with message. */
void tg_policy_decide_resource(const struct tg_policy *p, const char *uri, struct tg_decision *d);
void tg_policy_decide_prompt(const struct tg_policy *p, const char *name, struct tg_decision *d);

/* Scopes (policy/scopes.h): what a credential must hold for a call, from "scopes" in the policy.
 * Each returns 1 and the needed set in need (n bytes, TG_SCOPES_MAX) when have (the credential's
 * set; "" none) lacks one of them, else 0. A tool needs its entry's scopes and those of "*"; one
 * the policy refuses whatever the scopes (hidden, denied outright) needs none: the decision
 * refuses it, and no client is sent to get scopes that would not help. A resource (URI in any
 * form: decided in its normal form) or prompt needs the scopes of every pattern of the group's
 * "scopes" that matches it ("*" crosses "/"). */
int tg_policy_scopes_tool(const struct tg_policy *p, const char *tool, const char *have, char *need, size_t n);
int tg_policy_scopes_resource(const struct tg_policy *p, const char *uri, const char *have, char *need, size_t n);
int tg_policy_scopes_prompt(const struct tg_policy *p, const char *name, const char *have, char *need, size_t n);
/* Add every scope the policy names to the set out (n bytes), each once (RFC 9728 scopes_supported). */
void tg_policy_scopes_all(const struct tg_policy *p, char *out, size_t n);

/* Tags (a tool entry's "tags", either shape): what a tool does, which history conditions and
 * brakes select calls by. A tag is 1..TG_TAG_MAX bytes of [A-Za-z0-9_.:-]; a tool has at most
 * TG_TAGS_PER_TOOL. The tags of tool's own entry into *tags (borrowed from p), and how many. */
#define TG_TAG_MAX 64
#define TG_TAGS_PER_TOOL 8
int tg_policy_tool_tags(const struct tg_policy *p, const char *tool, const char *const **tags);

/* YAML to the same cJSON tree a JSON policy gives (libyaml). */
int tg_yaml_to_json(const char *text, size_t len, cJSON **out, char *err, size_t errsz);

#endif
