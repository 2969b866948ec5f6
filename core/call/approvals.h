/* Calls parked for a human's approval, and their deadlines.
 *
 * A parked call stays owned by its session (its calls list) and sits in srv->approvals, oldest
 * first, until an approver decides (core/app/admin.c), its deadline passes (the tick), the client
 * cancels it or goes, or the gateway shuts down. Approved, it is sent as it was decided;
 * otherwise it is answered -32001 and closed, and its reservations go back. */
#ifndef TG_APPROVALS_H
#define TG_APPROVALS_H

#include "core/base/buf.h"

struct tg_call;
struct tg_server;
struct tg_session;

/* Park k (its message is in k->held): an id, a deadline, an audit line "approve". */
void tg_approvals_park(struct tg_call *k);
/* Decide: approve (sent now) or not (why: NULL a human refused, "timeout", "cancelled"). by:
 * who decided, for the audit line. */
void tg_approvals_finish(struct tg_call *k, int approve, const char *by, const char *why);
/* A human refused, saying why (reason: NULL or "" for none; it goes to the client in
 * error.data.reason and to the log, escaped). */
void tg_approvals_deny(struct tg_call *k, const char *by, const char *reason);
struct tg_call *tg_approvals_find(struct tg_server *srv, struct tg_slice id);
/* The tick: the ones past their deadline are refused. */
void tg_approvals_expire(struct tg_server *srv);
/* Shutdown: every one is refused. */
void tg_approvals_abort(struct tg_server *srv);
/* The session's client went: its parked calls are withdrawn. */
void tg_approvals_withdraw(struct tg_session *s);
/* notifications/cancelled for the parked call with this id key: 1 if one was withdrawn. */
int tg_approvals_cancel(struct tg_session *s, const char *id_key);

/* The queue as approvers see it (the approvals page, core/app/approvals_page.c), behind a table of
 * operations: the local queue (srv->approvals) is one implementation; a cluster-wide one (parked
 * calls of every instance, decided from any) is another. Callers never touch struct tg_call.
 *
 * Both operations answer through their callback, which the local queue runs before the
 * operation returns and a shared queue later (so a caller keeps what it needs until then and
 * must tolerate either). */
struct tg_approval_item {
    const char *id;
    const char *grant;
    const char *session;
    const char *upstream;
    const char *tool;
    const char *args;        /* the arguments as JSON with the values of audit.redact keys
                              * replaced by "[redacted]"; NULL when the call has none */
    uint64_t parked_at_ms;   /* wall clock (ms since the epoch) */
    uint64_t waited_ms;      /* how long it has waited so far */
    uint64_t expires_in_ms;  /* until its deadline */
    const char *instance;    /* a cluster: the member holding the call (NULL for the local queue) */
    const char *args_sha256; /* the arguments' digest (hex), or NULL */
};
/* items: valid during the call only. n: how many. */
typedef void (*tg_approval_list_cb)(void *ud, const struct tg_approval_item *items, size_t n);
/* rc: 0 decided, TG_APPROVAL_UNKNOWN no pending approval with this id (decided, expired, unknown). */
#define TG_APPROVAL_UNKNOWN (-2)
typedef void (*tg_approval_decide_cb)(void *ud, int rc);

struct tg_approval_queue_ops {
    /* Every pending approval, oldest first. */
    void (*list)(struct tg_server *srv, tg_approval_list_cb done, void *ud);
    /* Approve or deny (with a reason, NULL for none) the approval `id`; by: who, for the audit. */
    void (*decide)(struct tg_server *srv, struct tg_slice id, int approve, const char *by, const char *reason,
                   tg_approval_decide_cb done, void *ud);
};
/* The queue as the admin API and the page answer it, with or without a cluster:
 * {"approvals":[{id, grant, session, upstream, tool, args_sha256, args?, parked_at_ms, waited_ms,
 * expires_in_ms, instance}...]}. args: written when the item has some and `args` is nonzero;
 * instance: null for the local queue. */
void tg_approvals_write(struct tg_buf *out, const struct tg_approval_item *items, size_t n, int args);
/* The queue this server's approvers see: the shared one with a cluster, else the local one. */
const struct tg_approval_queue_ops *tg_approvals_queue(struct tg_server *srv);

/* cluster/approvals.c, with a cluster: the local queue stays the truth for this member's
 * calls; these mirror it in Redis and take decisions other members publish. */
extern const struct tg_approval_queue_ops tg__approvals_local_queue;
extern const struct tg_approval_queue_ops tg__approvals_shared_queue;
void tg__approvals_shared_start(struct tg_server *srv);
void tg__approvals_shared_park(struct tg_call *k);
void tg__approvals_shared_gone(struct tg_call *k);

#endif
