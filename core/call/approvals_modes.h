/* How a call that needs approval meets its client: held open (hold), answered at once and run
 * when called again once approved (retry), or a task the client polls (task).
 *
 * The mode is the tool's approval_mode (policy), else its upstream's (conf), else chosen by the
 * client: task for a 2025-era task-augmented call (params.task, MCP 2025-11-25) and for a
 * 2026-07-28 call whose client declared the tasks extension (io.modelcontextprotocol/tasks,
 * SEP-2663; SEP-2848 answers a requestable denial with a task), hold for a 2025-era call that sent
 * params._meta.progressToken (its client can be kept waiting by progress), retry for every other
 * call (a 2026-07-28 request without the extension, a 2025 call without a token: clients with
 * default options give up on a call after 60 s). task for a client that takes no task is retry.
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
 * record is answered with that record's id. In a cluster the records are the shared store's
 * (core/call/shared.h, cluster/records.c): a call made again on any member finds them, one member
 * takes an approved one, and a store that cannot answer refuses the call (fails closed).
 *
 * task: the call parks with its session, its client answered at once with a CreateTaskResult
 * (working; for a 2026 client the extension's flat one, resultType "task"); from then on it
 * answers into its task's sink (core/call/tasks.h): approved, it runs (without params.task) and
 * the task completes with its answer; refused or expired, the task fails saying why. */
#ifndef TG_APPROVALS_MODES_H
#define TG_APPROVALS_MODES_H

#include "core/base/buf.h"
#include "core/call/shared.h"

struct tg_call;
struct tg_server;

/* The mode k (its decision APPROVE) meets its client in: TG_APPROVAL_HOLD, _RETRY or _TASK. */
int tg_approvals_mode_of(const struct tg_call *k);
/* Before k (APPROVE, out its message) parks: its mode set. -1: a retry record answered it (see
 * tg_approvals_retry_take), or the shared store looks it up and park(k, out) parks it later if
 * none was found; 1: it will be answered at once (retry, task); 0: it is held. */
int tg_approvals_admit(struct tg_call *k, struct tg_buf *out, void (*park)(struct tg_call *k, struct tg_buf *out));
/* Once k is parked: retry, its client answered "pending" and let go; task, its client answered
 * with the task, into whose sink k answers from now on; hold, nothing. */
void tg_approvals_answer_now(struct tg_call *k);
/* hold, before k parks: its timeout capped, its progress started. */
void tg_approvals_hold_prepare(struct tg_call *k);
/* retry: out is k's message. 1 if a record answered k (approved: k was sent, out is consumed;
 * denied or pending: k was answered and closed), or if the shared store looks k's record up (out
 * moves into k; park(k, out) runs when none was found, else k is answered as above); 0 if k is to
 * park as a new record. With a shared store (a cluster) the records are the store's: found on any
 * member, taken by one call only, failing closed when the store cannot answer. */
int tg_approvals_retry_take(struct tg_call *k, struct tg_buf *out, void (*park)(struct tg_call *k, struct tg_buf *out));
/* retry, once k is parked: its client is answered "pending", k lets go of sink and session. */
void tg_approvals_retry_detach(struct tg_call *k);
/* A human (by) decided the retry record k (out of the queue already): it waits for its call,
 * here or (a shared store) in the store, k closed. */
void tg_approvals_record_decided(struct tg_call *k, int approve, const char *by, const char *reason);
/* k, which took a record, settled: the record given back (give_back) or gone. */
void tg_approvals_taken_settled(struct tg_call *k, int give_back);
/* The tick: progress to held calls that are due; decided records past their time go. */
void tg_approvals_modes_tick(struct tg_server *srv);
/* Shutdown: every decided record goes. */
void tg_approvals_records_close(struct tg_server *srv);

#endif
