/* Calls parked for a human's approval, and their deadlines.
 *
 * A parked call stays owned by its session (its calls list) and sits in srv->approvals, oldest
 * first, until an approver decides (core/admin.c), its deadline passes (the tick), the client
 * cancels it or goes, or the gateway shuts down. Approved, it is sent as it was decided;
 * otherwise it is answered -32001 and closed, and its reservations go back. */
#ifndef TG_APPROVALS_H
#define TG_APPROVALS_H

#include "core/buf.h"

struct tg_call;
struct tg_server;
struct tg_session;

/* Park k (its message is in k->held): an id, a deadline, an audit line "approve". */
void tg_approvals_park(struct tg_call *k);
/* Decide: approve (sent now) or not (why: NULL a human refused, "timeout", "cancelled"). by:
 * who decided, for the audit line. */
void tg_approvals_finish(struct tg_call *k, int approve, const char *by, const char *why);
struct tg_call *tg_approvals_find(struct tg_server *srv, struct tg_slice id);
/* The pending approvals as {"approvals":[...]} (the admin API). */
void tg_approvals_list(struct tg_server *srv, struct tg_buf *out);
/* The tick: the ones past their deadline are refused. */
void tg_approvals_expire(struct tg_server *srv);
/* Shutdown: every one is refused. */
void tg_approvals_abort(struct tg_server *srv);
/* The session's client went: its parked calls are withdrawn. */
void tg_approvals_withdraw(struct tg_session *s);
/* notifications/cancelled for the parked call with this id key: 1 if one was withdrawn. */
int tg_approvals_cancel(struct tg_session *s, const char *id_key);

#endif
