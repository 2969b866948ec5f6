/* The life of one call (core/call/call.c): from the policy's decision to its settlement.
 *
 * A call is one client message in flight: made by core/gate/dispatch.c once the policy allowed it
 * (or parked for approval), sent through its upstream kind's operations (upstream/upstream.h),
 * answered through its sink (core/call/exchange.h), settled once by tg_call_settle(), and closed by
 * tg_call_close(). Closing marks: the call is unhooked from everything that can reach it and
 * queued; its memory goes in tg_call_run_pending(), after the handler that closed it returned.
 *
 * The upstream kinds (upstream/) implement the upstream half of a call without seeing this
 * struct: the call sends through its kind's operations and hears back through the callbacks it
 * hands them (core/call/upcalls.c). */
#ifndef TG_CALL_H
#define TG_CALL_H

#include <stdint.h>
#include <time.h>
#include <uv.h>

#include "core/base/buf.h"
#include "core/call/exchange.h"
#include "core/base/json.h"
#include "core/wire/sse.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "upstream/upstream.h"

struct tg_upstream;
struct tg_msg;
struct cJSON;
struct tg_upreq;
struct tg_policy;
struct tg_decision;
struct tg_upstream_ops;
struct tg_auth_cred;

/* A filter on a call (like an h2o ostream or an nginx body filter): what crosses the eras
 * between the call's client and its upstream. The bridge (core/bridge/) installs it on a call
 * whose client's era differs from the upstream's; the call consults it where the upstream's
 * traffic turns back toward the client, and never names the bridge. Every op may be NULL. The
 * filter is static; its data is the installer's, opaque to the call (not freed by it). */
struct tg_call_filter {
    /* The upstream's answer to k (not an error), rewritten already (p, n): 0 it goes on to the
     * client, 1 the filter took k's client over (k answers nothing more), -1 refused: the client
     * gets an error saying why. */
    int (*answer)(struct tg_call *k, void *data, const char *p, size_t n, char *why, size_t whysz);
    /* A server request p on k's stream that the session's policy lets through: 1 the filter
     * carries it to the client (k stays open upstream), 0 the call goes on as without one. */
    int (*server_request)(struct tg_call *k, void *data, const char *p, size_t n);
};

/* One client message in flight. Owner: the session's calls list while open; closed by
 * tg_call_close() and freed by tg_call_run_pending(). Holds a session reference, an upstream
 * reference and the sink until it closes. */
struct tg_shared_job;
struct tg_gate_request;
struct tg_call {
    struct tg_server *srv;
    int closed;               /* tg_call_close() ran: inert, memory released by tg_call_run_pending */
    struct tg_list dlink;     /* srv->dead_calls once closed */
    struct tg_session *sess;
    struct tg_sink *sink;     /* where the answer goes; NULL once released */
    const struct tg_upstream_ops *ops; /* the upstream kind */
    struct tg_upstream *uprt; /* the upstream runtime this call uses (reference) */
    enum call_kind kind;
    enum tg_era era;          /* the client's protocol era (from the request context) */
    const struct tg_call_filter *filter; /* the era crossing, or NULL (tg_call_filter_set) */
    void *filter_data;
    char proto[24];           /* the client's protocol version for this call */
    int is_init;
    int got_response;         /* 1: the answer was relayed, 2: it was an error object */
    int settled;              /* tg_call_settle() ran */
    const char *audit_held;   /* settled with an answer on its way: the audit line's outcome, made
                               * once the client has the answer (tg__call_audit_held) */
    double audit_held_ms;
    uint64_t gid;
    char gid_str[24];
    size_t gid_len;
    char *client_id;
    size_t client_id_len;
    struct tg_list slink;     /* session's calls */
    struct tg_policy *policy; /* decided under this policy (a reload does not change it) */
    char *grant;
    char *subject;            /* who inside the grant asked (a decided request), or NULL: the grant */
    char *issuer;             /* its JWT's issuer, or NULL (none: a static token, a certificate) */
    char *method;
    char *tool;               /* tools/call, resources/read, prompts/get: what was decided */
    struct tg_decision *dec;  /* the decision and its reservations */
    char args_sha256[65];
    struct tg_mcp_mrtr_call *mrtr; /* a 2026 tools/call, prompts/get or resources/read: what an
                                    * input_required answer is sealed for (owned, strings borrowed
                                    * from the call) */
    char *args_json;
    int is_tools_list;
    int list_kind;            /* > 0: a resources/list, resources/templates/list or prompts/list whose answer
                               * is filtered (its enum tg_mcp_list); 0 for any other call */
    int is_listen;            /* a 2026 subscriptions/listen: no call timeout, notifications seen
                               * through the policy and tagged with the client's id */
    unsigned listen_mask;     /* a listen on a 2025 upstream session: the list changes it takes */
    char *listen_uris;        /* a 2025 session's GET stream as a listen: the resources it asked for
                               * (JSON array), or NULL */
    char *id_key;             /* canonical client id: duplicates and cancellation */
    int answer_status;        /* the HTTP status the answer goes with (0: 200) */
    struct tg_buf *answer_buf; /* during ops->answer only: the buffer holding the answer, which the
                                  sink may take (tg_call_take_answer) instead of copying it */
    struct tg_buf *answer_src; /* during tg_call_answer only, set by its caller: the buffer the
                                  upstream's answer is in, which the rewrite may take over */
    char *resend;             /* a 2025 session's call on a 2026-only upstream: the request as sent,
                               * for the retry after input_required (core/bridge/input.c) */
    int shim_rounds;          /* input rounds so far */
    char *input_req_id;       /* a 2026 call held open: the upstream's server request id (raw JSON)
                               * its client answers in a retry (core/bridge/input.c) */
    char *up_headers;         /* a 2026 request's Mcp-* header lines for the upstream, rebuilt
                               * from the body sent (NULL: the session's 2025 headers) */
    int forwarded;            /* the message reached the upstream */
    int refunded;
    char *progress_token;     /* canonical params._meta.progressToken, for routing progress */
    /* approvals (core/call/approvals.c) */
    int parked;
    char approval_id[33];
    char denial_id[33];       /* signals = "mcp-drafts": the handle of its refusal (core/call/denial.h), or "" */
    uint64_t approval_deadline;
    uint64_t parked_at_wall;
    char approval_digest[65]; /* what an approver approves (tg_approvals_digest), hex */
    uint64_t approval_policy; /* the serial of the configuration that parked it */
    size_t approval_args_off, approval_args_len; /* params.arguments in held, as they will be sent */
    const char *approval_decision, *approval_by; /* while it leaves the queue: "approved" or "denied"
                                                  * and who decided (NULL: no human decided) */
    struct tg_list alink;     /* srv->approvals while parked, srv->awaiting while awaiting */
    struct tg_buf held;       /* the message, serialized, waiting for a decision */
    struct tg_auth_cred *cred; /* parked: the credential it came with (owned), or NULL: unknown */
    size_t parked_bytes;      /* parked: what it counts toward limits.approvals_bytes */
    uint64_t judged_serial;   /* parked: the conf whose policy verdict judged_why is (0: none yet) */
    char *judged_why;         /* why that conf's policy no longer lets it run, or NULL (owned) */
    /* approval modes (core/call/approvals_modes.c) */
    unsigned char approval_mode;  /* the enum tg_approval_mode it parked in */
    unsigned char task_aug;       /* params.task: a task-augmented request (MCP 2025-11-25) */
    unsigned char tasks_ext;      /* a 2026-07-28 request whose client declared the tasks extension */
    unsigned char approval_state; /* a retry record: TG_RECORD_PENDING, _APPROVED or _DENIED */
    uint64_t next_progress;       /* hold: when the next notifications/progress goes (0: none) */
    double progress_sent;         /* hold: the last progress value sent */
    uint8_t approval_key[32];     /* retry: grant, subject, upstream, tool, canonical arguments */
    char *approval_reason;        /* a denied retry record: the approver's words */
    struct tg_call *approval_taken; /* a call that consumed a retry approval: the record, given
                                     * back if the call certainly did not run, closed otherwise */
    void (*approval_settled)(struct tg_call *k, int give_back); /* a call that took an approval
                                     * (approval_taken, or the shared store's record): once, when it settles */
    struct tg_record_wait *record_wait; /* retry with a shared store: the record lookup, until it answers */
    void (*record_then)(struct tg_call *k, struct tg_buf *out); /* parks k when no record was found */
    unsigned char record_shared;  /* its pending record is in the shared store: dropped when k
                                   * closes undecided */
    /* its decision (core/gate/dispatch.c, through the shared store: core/call/shared.h) */
    struct tg_gate_request *asking;  /* the request on the gate's stack while the store decides
                                      * inline; NULL once the decision waits (held has it) */
    struct tg_shared_job *deciding; /* non-NULL while it waits; detached when the call closes */
    struct cJSON *resume_params;    /* a 2026 retry that resumes a held call: its params, kept */
    char resume_parked[40];
    unsigned char decide_no_wait; /* the sink cannot wait for a human (TG_SINK_NO_WAIT) */
    uint64_t decide_timeout_ms;   /* the upstream's call_timeout_ms, for when it is sent */
    struct tg_upauth *upauth; /* its upstream credential: the caller's JWT for a token exchange, the
                               * message held while one runs (core/call/upauth.c; owned) */
    int upauth_wait;          /* waiting for that exchange: sent when it ends */
    /* the upstream half: the kind's own state for this call (allocated and freed by the kind;
     * non-NULL while the upstream may still send for it) */
    void *upcall;
    /* message-stream kinds (stdio, legacy SSE): the answer arrives on the session's link */
    int awaiting;             /* in srv->awaiting (uses alink), answer not here yet */
    uint64_t deadline;        /* loop time after which the call times out */
    uint64_t sent_at;
    uint64_t first_sent_ns;   /* a request per message: its first one (latency covers the whole call) */
    /* 1 while the messages of one read are handed to tg_call_upstream_message: the touch and the
     * backpressure check are left to the caller, once after the read (2: some were relayed). The
     * kinds' message callback (tg__call_message) always leaves them to the kind. */
    int feeding;
};

static inline uint64_t now_ms(struct tg_server *srv) { return uv_now(srv->loop); }

/* Counters are aligned to UTC, so decisions use the wall clock. */
static inline int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

const char *tg_call_upstream_name(const struct tg_call *k);
#define up_name tg_call_upstream_name

/* A new call of session s for the message the sink carries (sink may be NULL: nobody reads). */
struct tg_call *tg_call_new(struct tg_server *srv, struct tg_session *s, struct tg_sink *sink, enum call_kind kind);
/* Storage for a call's decision (k->dec, freed with the call): uninitialized, from a free list. */
struct tg_decision *tg_call_decision_new(void);
/* One tg_call_decision_new() gave that no call took. */
void tg_call_decision_free(struct tg_decision *d);
/* Whose session a call's counters of scope "session" count under: its 2025 session's id. A
 * stateless (2026-07-28) request has none: its grant's, so they count per grant and upstream
 * (docs/policy.md), the same on every member of a cluster and whichever stateless session of the
 * grant served it (the session id is per member). A grant's name never reads as a session id. */
static inline const char *tg_call_counter_session(enum tg_era era, const char *grant, const struct tg_session *s)
{
    return era == TG_ERA_2026 ? grant : s != NULL ? s->id_str : NULL;
}

/* Install filter f (data: its own, opaque here) on k: the bridge, for a call across the eras. */
static inline void tg_call_filter_set(struct tg_call *k, const struct tg_call_filter *f, void *data)
{
    k->filter = f;
    k->filter_data = data;
}
/* Send the call's message (body NULL: open the session's stream) through its upstream kind. */
void tg_call_send(struct tg_call *k, const char *body, size_t len, uint64_t timeout);
/* Close: idempotent; the call is unhooked, its sink released, its memory freed later. */
void tg_call_close(struct tg_call *k);
/* Free the calls closed since the last run (the server calls it with no handler on the stack). */
void tg_call_run_pending(struct tg_server *srv);

/* May server notification p go to session s's client (see tg_mcp_relay_allowed)? Decided by
 * the policy of the session's grant and upstream as the configuration has it now; 0 (dropped,
 * and logged) if that grant is gone. Callers ask only for a message whose method token may be
 * notifications/resources/updated (tg_mcp_method_maybe_update): the others pass unlooked-at. */
int tg__call_may_relay(struct tg_server *srv, struct tg_session *s, const char *p, size_t n);
/* core/call/call.c, for its other files: how long the upstream has had k (ms, -1: not sent); a
 * server request the session's policy or client cannot take, answered upstream with an error
 * (1: refused). */
double tg__call_latency(const struct tg_call *k);
int tg__call_refuse_server_request(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p,
                                   size_t n, int refuse_all, const char *why);
/* Keep or give back a decided call's reservations, and write its audit line: once per call. */
void tg_call_settle(struct tg_call *k, enum tg_outcome o, double latency_ms);
/* The same for a call whose answer goes to the client next: its audit line (its JSON and its
 * hash) waits for tg__call_audit_held(), after the answer's write, so it is not on the answer's
 * way; tg_call_close() writes it too, at the latest. */
void tg__call_settle_hold(struct tg_call *k, enum tg_outcome o, double latency_ms);
void tg__call_audit_held(struct tg_call *k);
void tg_call_audit(struct tg_call *k, const char *decision, double latency, const char *outcome, const char *by);
/* The upstream may have run it and the client is gone: audit client_gone, stop the upstream. */
void tg_call_abandon(struct tg_call *k);

/* Output from the upstream kinds. */
/* A message from the upstream for call k: rewritten (id restored, tools/list filtered), checked
 * (server requests), and passed to the sink as the answer or as a message on the way. Returns 1
 * if it was k's answer. */
int tg_call_upstream_message(struct tg_call *k, const char *p, size_t n, const struct tg_json_doc *pre);
/* p, if it is k's answer, to the client (id restored, tools/list filtered, initialize noted):
 * returns 1; 0 if it is not k's answer (nothing sent). pre: p's spans if parsed already. */
int tg_call_answer(struct tg_call *k, const char *p, size_t n, const struct tg_json_doc *pre);
/* An error answer for k: -32004 with the client's id for a request (an initialize that failed
 * also takes its new session away), or status (0: 504 for a timeout, else 502) otherwise. */
void tg_call_answer_error(struct tg_call *k, const char *why, int status);
/* The policy's refusal of k (deny, limited, a brake, or an approval that did not come),
 * -32001/-32002/-32003 with what the client needs to know in error.data (rule, the earlier call
 * a history condition saw, counter and retry, approval id): core/call/refusal.c. */
void tg_call_answer_decision(struct tg_call *k, const struct tg_decision *d, const char *approval_id);
/* Counts a refusal on /metrics by what made it: a brake (tollgate_brakes_total{upstream,tool}),
 * a history condition, whether or not it named an earlier call (tollgate_history_refusals_total
 * {upstream,rule}); others not here. */
void tg_call_count_refusal(struct tg_call *k, const struct tg_decision *d);
/* The correlation id of k's audit line for decision: with signals = "mcp-drafts", a tools/call
 * refused (or parked) by the gateway gets a handle, made once and sent in its answer's _meta
 * (core/call/denial.c); NULL otherwise. */
const char *tg_call_denial_id(struct tg_call *k, const char *decision);
struct tg_denial;
/* Answers k with a CallToolResult that says d (core/call/denial.h) and text; 0. -1: k's upstream
 * keeps signals = "tollgate" or k is not a tools/call: nothing is sent, the caller answers
 * (core/call/refusal.c). */
int tg_call_answer_denial(struct tg_call *k, const char *text, struct tg_denial *d);
/* A call parked for approval whose answer is a task (its CreateTaskResult, a tasks/get while it
 * waits), with signals = "mcp-drafts": appends ,"_meta":{...} with the envelope, remediation
 * "available" and a "task" hint, and returns 1; else 0, nothing appended (core/call/denial.c). */
int tg_call_task_denial_meta(struct tg_call *k, struct tg_buf *b);
/* A tools/call begins: its redacted arguments for the audit log, and a retry's echo of an
 * authorization context noted in the log (it changes no decision). */
void tg_call_tools_call_begin(struct tg_call *k, const struct cJSON *params, const struct cJSON *args);
/* Send the session's DELETE, kill its child, close its stream: the session ends upstream. */
void tg_call_close_upstream_session(struct tg_server *srv, struct tg_session *s);
/* Message p (a notification) to s's upstream, on the session's link (as an answer to a server
 * request goes): nobody waits for an answer. */
void tg_call_tell_upstream(struct tg_server *srv, struct tg_session *s, const char *p, size_t n);
/* 1 if the session's upstream carries the server's own messages on the session's link. */
int tg_call_kind_has_link(struct tg_server *srv, struct tg_session *s);
/* Nothing more comes: the sink ends (a stream), and the call closes. */
void tg_call_finish(struct tg_call *k);
/* The answer will stream. */
void tg_call_stream(struct tg_call *k);
/* The call failed before or without its answer: settle with o, answer the client with -32004
 * (or the status for an exchange without answer), end, close. */
void tg_call_fail(struct tg_call *k, enum tg_outcome o, const char *why, double latency_ms);
/* Pause or resume reading the upstream for this call (backpressure). */
void tg_call_backpressure(struct tg_call *k);

/* Pause or resume the session's link (stdio child, legacy SSE stream). */
void tg_call_pause_link(struct tg_session *s, int pause);
/* core/call/upcalls.c: what the call hands its kind (the callbacks, the session's), and the
 * outcome's settlement mapped to what the client gets. */
extern const struct tg_upstream_events tg__call_events;
int tg__call_message(void *call, const char *p, size_t n);
extern const struct tg_upstream_host tg__call_host;
/* The kind's operations for session s's upstream, or NULL if it is gone from the conf. */
const struct tg_upstream_ops *tg__call_ops_of(struct tg_server *srv, struct tg_session *s);

/* The session's first call still waiting for an answer on its link, or NULL. */
struct tg_call *tg_call_first_awaiting(struct tg_session *s);
/* The session's upstream is gone (its link died, or a reload removed it): calls waiting on its
 * link fail with why (calls on a Streamable HTTP pool still finish there), its channel is closed
 * with ws_code and ws_why, its GET stream ends, and the session is removed. */
void tg_call_upstream_gone(struct tg_session *s, const char *why, uint16_t ws_code, const char *ws_why);
/* Sessions ending. */
void tg_call_end_get_stream(struct tg_session *s);
void tg_call_end_session_calls(struct tg_session *s);
/* Shutdown: calls waiting on a message stream or a human get an answer now. */
void tg_call_abort_waiting(struct tg_server *srv);
/* Calls waiting on a message stream past their deadline fail (the tick). */
void tg_call_expire_awaiting(struct tg_server *srv);
size_t tg_call_inflight(struct tg_server *srv);

#endif
