/* Calls parked for a human's approval, and their deadlines.
 *
 * A parked call stays owned by its session (its calls list) and sits in srv->approvals, oldest
 * first, until an approver decides (core/app/admin.c), its deadline passes (the tick), the client
 * cancels it or goes, or the gateway shuts down. Approved, it is sent as it was decided;
 * otherwise it is answered -32001 and closed, and its reservations go back. */
#ifndef TG_APPROVALS_H
#define TG_APPROVALS_H

#include "core/base/buf.h"
#include "core/call/shared.h"

struct cJSON;
struct tg_call;
struct tg_server;
struct tg_session;

/* May k (its message in k->held) wait in the queue? -1 yes; else the reason it may not
 * (TG_APPROVAL_REFUSED_*: core/base/metrics.h), counted, with what the client reads in msg and
 * data.reason in *reason: a batch (in_batch) cannot wait; the queue holds limits.approvals_max
 * calls or limits.approvals_bytes; k's grant holds limits.approvals_per_grant of them (on this
 * member: each member counts its own). */
int tg_approvals_room(struct tg_call *k, int in_batch, char *msg, size_t n, const char **reason);
/* Refuse k at once, a call that could not be parked: -32003 with message and data.reason. With
 * signals = "mcp-drafts" a CallToolResult instead (core/call/denial.h): remediation "available"
 * when calling again can get the call through (again: a new approval, a free queue), else
 * "unavailable". */
void tg_approvals_refuse(struct tg_call *k, const char *message, const char *reason, int again);
/* Park k (its message is in k->held): an id, a deadline, an audit line "approve", its bytes
 * counted, the credential it came with kept (its sink's), a webhook event. */
void tg_approvals_park(struct tg_call *k);
/* NULL while parked call k may still run under srv->conf as it is now; else why not, in why (n
 * bytes): its grant or upstream was removed, its credential no longer holds (rotated, expired,
 * its issuer or certificate gone), its tool is now hidden or denied, a rule now fails. The
 * policy's verdict is judged once per configuration for listings; an approval judges it again. */
const char *tg_approvals_stale(struct tg_call *k, char *why, size_t n);
/* After a reload: every parked call is mirrored again (a cluster's listing shows its state under
 * the new conf). */
void tg_approvals_reconf(struct tg_server *srv);
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
/* The session's client went, or the session ended (why: "cancelled" its client went or deleted
 * it, "session" it ended otherwise): its parked calls are withdrawn. */
void tg_approvals_withdraw(struct tg_session *s, const char *why);
/* notifications/cancelled for the parked call with this id key: 1 if one was withdrawn. */
int tg_approvals_cancel(struct tg_session *s, const char *id_key);

/* The local queue as approvers see it (the approvals page, core/app/approvals_page.c; the admin
 * API): this member's parked calls, answered before these return. They are the local shared
 * store's approvals_list and approval_decide (core/call/shared.h); a cluster's store lists every
 * member's and passes the decisions for calls parked here to these. */
void tg_approvals_local_list(struct tg_server *srv, tg_approval_list_cb done, void *ud);
void tg_approvals_local_decide(struct tg_server *srv, struct tg_slice id, int approve, const char *digest,
                               const char *by, const char *reason, tg_approval_decide_cb done, void *ud);
/* The item approvers see of parked call k (strings borrowed from k); returns its args_text
 * (malloc'd, the caller frees it), or NULL. */
char *tg_approvals_item_of(struct tg_call *k, struct tg_approval_item *it);
/* The queue as the admin API and the page answer it, with or without a cluster:
 * {"approvals":[{id, grant, subject, session, upstream, tool, args_sha256, digest, args_text?,
 * args?, policy, parked_at_ms, waited_ms, expires_in_ms, instance, blocked}...], "decided":[{..., decision,
 * by, decided_at_ms, instance}...]}: items with a decision go to "decided". args_text and args:
 * written when the item has some and `args` is nonzero, as JSON values (a string, and the value
 * parsed strictly from it); instance: null for the local queue; blocked: null, or "no longer allowed: WHY". */
void tg_approvals_write(struct tg_buf *out, const struct tg_approval_item *items, size_t n, int args);

#endif
