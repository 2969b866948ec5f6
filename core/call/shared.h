/* The shared store: what the members of a cluster share, behind one table of operations.
 *
 *   decisions        decide a tools/call against the rate-limit counters; refund what a final
 *                    decision reserved (the call failed, approval was refused)
 *   session records  a 2025 session is shared (initialize answered), used, forgotten (DELETE),
 *                    and fetched by a member that did not make it
 *   approvals mirror a parked call is mirrored (park) and leaves (gone); the queue approvers see
 *                    is listed and decided
 *
 * Every operation that answers does so through its callback: the local store (no cluster,
 * core/call/shared.c) runs it before the operation returns; a store that asks another process
 * (cluster/cluster.c, Redis) may run it later. A caller is written for both: it keeps what the
 * callback needs until then, and continues in the callback only.
 *
 * The app (core/app/server.c) installs the store on the server at start (srv->store) and is the
 * only code that knows which one it is. Loop thread only. */
#ifndef TG_CALL_SHARED_H
#define TG_CALL_SHARED_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"
#include "policy/policy.h"

struct cJSON;
struct tg_call;
struct tg_server;
struct tg_session;
struct tg_shared_job;
struct tg_upstream_conf;

/* ---- decisions ---------------------------------------------------------------------------- */

/* A tools/call to decide. Strings borrowed for the call to decide (a store that waits copies
 * what it keeps). continuation: a later round of a 2026 call, judged again without reserving. */
struct tg_shared_ask {
    struct tg_policy *policy;
    struct tg_caller who;
    const char *tool;
    const struct cJSON *args;
    int64_t now_ms; /* the wall clock every pass decides at (counters are aligned to UTC) */
    int continuation;
};

/* How a decision ended. */
enum tg_shared_outcome {
    TG_SHARED_DECIDED = 0,     /* d is the decision (d->shared: its reservations are in the shared store) */
    TG_SHARED_FALLBACK = 1,    /* the shared store failed; d was decided on this member's counters */
    TG_SHARED_UNAVAILABLE = 2, /* the shared store failed and on_unavailable = "deny": why says what
                                * failed; d is NULL and nothing was reserved */
};

/* The decision is known. d: the decision (the caller's, or a copy it takes), NULL when
 * unavailable. Runs once per decide, inside it or later, never after detach. */
typedef void (*tg_shared_decided_cb)(void *ud, enum tg_shared_outcome o, struct tg_decision *d, const char *why);

/* ---- session records ---------------------------------------------------------------------- */

/* What another member needs to serve a session. Strings borrowed for the callback. */
struct tg_shared_session_rec {
    const char *grant;
    const char *upstream;    /* the upstream's name */
    const char *up_session;  /* the upstream's Mcp-Session-Id, or NULL */
    const char *proto;
    int up_modern;           /* a 2025 session bridged to a 2026-07-28 upstream */
    const char *client_caps; /* up_modern: its initialize's capabilities (JSON), or NULL */
    int log_level;
    const char *instance;    /* the member that made it */
    const char *owner;       /* hex SHA-256 of the subject that made it (tg_principal_sha256), or
                              * NULL: a record without one is served to nobody */
};

/* found: 1 with rec, 0 no such session (or expired, or its record does not verify), -1 the store
 * failed (why). */
typedef void (*tg_shared_session_cb)(void *ud, int found, const struct tg_shared_session_rec *rec, const char *why);

/* ---- the approvals queue ------------------------------------------------------------------ */

/* A pending approval as approvers see it. Callers never touch struct tg_call. */
struct tg_approval_item {
    const char *id;
    const char *grant;
    const char *session;
    const char *upstream;
    const char *tool;
    uint64_t parked_at_ms;   /* wall clock (ms since the epoch) */
    uint64_t waited_ms;      /* how long it has waited so far */
    uint64_t expires_in_ms;  /* until its deadline */
    const char *instance;    /* a cluster: the member holding the call (NULL for the local queue) */
    const char *args_sha256; /* the arguments' digest (hex), or NULL */
    const char *subject;     /* who inside the grant asked */
    const char *args_text;   /* the arguments' text as they will be sent (numbers as written), the
                              * values of audit.redact keys replaced by "[redacted]"; or NULL */
    const char *digest;      /* what an approve must name (tg_approvals_digest, hex) */
    uint64_t policy;         /* the serial of the configuration that parked it, on its member */
    const char *decision;    /* NULL: pending; "approved" or "denied": decided lately, by `by` */
    const char *by;
    uint64_t decided_at_ms;  /* wall clock */
    const char *blocked;     /* "no longer allowed: WHY" when the configuration in force would not
                              * let it run any more (approve is refused), or NULL */
};
/* items: valid during the call only. n: how many. */
typedef void (*tg_approval_list_cb)(void *ud, const struct tg_approval_item *items, size_t n);
/* rc: 0 decided, TG_APPROVAL_UNKNOWN no pending approval with this id (decided, expired, unknown),
 * TG_APPROVAL_STALE an approve whose digest is not the parked call's (nothing ran),
 * TG_APPROVAL_NOT_ALLOWED approved, but the configuration in force no longer lets it run: it was
 * refused instead (its client told, nothing ran), and why says what changed (else why is NULL). */
#define TG_APPROVAL_UNKNOWN (-2)
#define TG_APPROVAL_STALE (-3)
#define TG_APPROVAL_NOT_ALLOWED (-4)
typedef void (*tg_approval_decide_cb)(void *ud, int rc, const char *why);

/* ---- retry records (core/call/approvals_modes.h) ------------------------------------------ */

/* The state of a retry-mode approval: what a call made again with the same key meets. */
enum { TG_RECORD_PENDING = 0, TG_RECORD_APPROVED, TG_RECORD_DENIED };

/* A retry-mode approval as members share it. Strings borrowed for the call. */
struct tg_approval_record {
    uint8_t key[32];     /* grant, subject, upstream, tool, canonical arguments (the match key) */
    const char *id;      /* its approval id (32 hex digits) */
    int state;           /* TG_RECORD_PENDING, _APPROVED or _DENIED */
    const char *by;      /* decided: who, or NULL */
    const char *reason;  /* denied: the approver's words, or NULL */
    uint64_t expires_ms; /* wall clock: pending, its call's deadline; decided, approval_ttl on */
};

/* How a record lookup ended. */
enum {
    TG_RECORD_MINE = 0,  /* none was there: the caller's pending record is the record now */
    TG_RECORD_FOUND = 1, /* rec: pending (another call's), denied, or approved and taken by the
                          * caller (its call runs, then settles it: record_settled) */
    TG_RECORD_BUSY = 2,  /* approved, and taken by a call that runs now */
    TG_RECORD_FAILED = -1, /* the store cannot answer (why): nothing was taken, nothing made */
};
struct tg_record_wait;
typedef void (*tg_record_cb)(void *ud, int found, const struct tg_approval_record *rec, const char *why);

/* ---- the store ---------------------------------------------------------------------------- */

struct tg_shared_ops {
    /* Decide q into d (the caller's storage, which stays valid until cb ran or it detached).
     * Returns NULL when cb ran already (before decide returned), or the handle of a decision
     * that waits: cb runs later, and until then d holds a deny that reserves nothing. */
    struct tg_shared_job *(*decide)(void *ud, const struct tg_shared_ask *q, struct tg_decision *d,
                                    tg_shared_decided_cb cb, void *cb_ud);
    /* The caller of a waiting decision is gone: cb will not run, and what the decision takes is
     * given back when its answer comes. */
    void (*detach)(void *ud, struct tg_shared_job *job);
    /* Give back a final decision's reservations. Fire and forget. */
    void (*refund)(void *ud, const struct tg_decision *d);
    /* An allowed resources/read (name: the URI in normal form) or prompts/get (prompt) goes into
     * its caller's history when p records (tg_policy_record_read). Fire and forget. */
    void (*record_read)(void *ud, const struct tg_policy *p, const struct tg_caller *who, int prompt,
                        const char *name, int64_t now_ms);

    /* A session of this member is ready (initialize answered): its record is written if its
     * upstream can be reached from any member (sets s->shared). */
    void (*session_share)(void *ud, struct tg_session *s, const struct tg_upstream_conf *uc);
    /* A shared session was used: its record's expiry is pushed back (at most every ttl/8). */
    void (*session_used)(void *ud, struct tg_session *s, uint64_t now_ms);
    /* DELETE of a shared session: its record goes, and every member holding it ends it. */
    void (*session_forget)(void *ud, const char *id);
    /* Read the record of a session another member made. */
    void (*session_fetch)(void *ud, const char *id, tg_shared_session_cb cb, void *cb_ud);

    /* k was parked (core/call/approvals.c): approvers elsewhere see it. */
    void (*approval_park)(void *ud, struct tg_call *k);
    /* k left the queue (decided, expired, withdrawn). */
    void (*approval_gone)(void *ud, struct tg_call *k);
    /* Every pending approval, oldest first. */
    void (*approvals_list)(void *ud, tg_approval_list_cb done, void *cb_ud);
    /* Approve or deny (with a reason, NULL for none) the approval `id`; by: who, for the audit.
     * An approve names the digest the approver saw (the item's digest): any other, or NULL, is
     * TG_APPROVAL_STALE and nothing runs. */
    void (*approval_decide)(void *ud, struct tg_slice id, int approve, const char *digest, const char *by,
                            const char *reason, tg_approval_decide_cb done, void *cb_ud);

    /* Retry records that every member finds. NULL in the local store: a member's records are its
     * own lists (srv->approvals, srv->approvals_decided). */
    /* The record of mine->key, in one round trip and atomically: approved, it is taken (no other
     * call finds it approved until it is given back); none, mine (pending) becomes the record.
     * cb runs later, once, unless detached first; returns the handle until then. */
    struct tg_record_wait *(*record_find)(void *ud, const struct tg_approval_record *mine, tg_record_cb cb,
                                          void *cb_ud);
    /* The caller of a waiting lookup is gone: what it took is given back, what it made dropped. */
    void (*record_detach)(void *ud, struct tg_record_wait *w);
    /* A human decided the record (approved or denied): it replaces the pending one. */
    void (*record_put)(void *ud, const struct tg_approval_record *rec);
    /* A pending record left undecided (expired, withdrawn, refused): dropped if still id's. */
    void (*record_drop)(void *ud, const uint8_t key[32], const char *id);
    /* The call that took the approved record id settled: given back (give_back) or used. */
    void (*record_settled)(void *ud, const uint8_t key[32], const char *id, int give_back);
};

/* The store a server uses: its operations and their first argument. */
struct tg_shared {
    const struct tg_shared_ops *ops;
    void *ud;
};

/* The local store (core/call/shared.c): srv's own counters (srv->counters) and approvals queue
 * (srv->approvals); no session is shared. Every operation answers before it returns. */
void tg_shared_local(struct tg_shared *st, struct tg_server *srv);

#endif
