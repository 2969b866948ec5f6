/* How a call that needs approval meets its client: held open (hold), answered at once and run
 * when called again once approved (retry), or a task (task: the client polls; until the task
 * form is built it falls back to retry).
 *
 * The mode is the tool's approval_mode (policy), else its upstream's (conf), else chosen by the
 * client: hold for a 2025-era call that sent params._meta.progressToken (its client can be kept
 * waiting by progress), retry for every other call (a 2026-07-28 request, a 2025 call without a
 * token: clients with default options give up on a call after 60 s).
 *
 * hold: the call parks as it always did, its approval_timeout cut to limits.approval_hold_max_ms,
 * and a client that sent a progressToken gets notifications/progress every
 * limits.approval_progress_ms while it waits.
 *
 * retry: the call parks as a record (a struct tg_call with no sink and no session: its client has
 * its answer, -32003 with status "pending"), listed and decided like any parked call, in a
 * cluster too. A decided record waits limits.approval_ttl_ms in srv->approvals_decided for the
 * same grant, subject, upstream, tool and canonical arguments (sorted keys, numbers as written):
 * approved, that call runs, once (the record is taken, and given back if the call certainly did
 * not run); denied, it is refused with the approver's reason. A call identical to a pending
 * record is answered with that record's id. */
#ifndef TG_APPROVALS_MODES_H
#define TG_APPROVALS_MODES_H

#include "core/base/buf.h"

struct tg_call;
struct tg_server;

enum { TG_RECORD_PENDING = 0, TG_RECORD_APPROVED, TG_RECORD_DENIED };

/* The mode k (its decision APPROVE) meets its client in: TG_APPROVAL_HOLD or _RETRY. */
int tg_approvals_mode_of(const struct tg_call *k);
/* hold, before k parks: its timeout capped, its progress started. */
void tg_approvals_hold_prepare(struct tg_call *k);
/* retry: out is k's message. 1 if a record answered k (approved: k was sent, out is consumed;
 * denied or pending: k was answered and closed); 0 if k is to park as a new record. */
int tg_approvals_retry_take(struct tg_call *k, struct tg_buf *out);
/* retry, once k is parked: its client is answered "pending", k lets go of sink and session. */
void tg_approvals_retry_detach(struct tg_call *k);
/* A human decided the retry record k (out of the queue already): it waits for its call. */
void tg_approvals_record_decided(struct tg_call *k, int approve, const char *reason);
/* k, which took a record, settled: the record given back (give_back) or gone. */
void tg_approvals_taken_settled(struct tg_call *k, int give_back);
/* The tick: progress to held calls that are due; decided records past their time go. */
void tg_approvals_modes_tick(struct tg_server *srv);
/* Shutdown: every decided record goes. */
void tg_approvals_records_close(struct tg_server *srv);

#endif
