/* Tasks (MCP 2025-11-25, and the 2026-07-28 tasks extension, SEP-2663) the gateway knows of, each bound to the grant, subject and upstream that
 * made it:
 *   - its own: a call parked for approval in approval_mode "task" (core/call/approvals_modes.c)
 *     answers into its task's sink, and the task holds that answer for tasks/result;
 *   - relayed: a task id an upstream handed out in answer to a task-augmented call; the gateway
 *     notes whose it is, and only that caller may name it (tasks/get, tasks/result, tasks/cancel
 *     go upstream for it alone; core/gate/tasks.c).
 * A task the caller does not own is "not found" to it, as one that does not exist. The table
 * lives in srv->tasks: at most TG_TASKS_MAX (the oldest finished or relayed ones go first), a
 * finished one limits.approval_ttl_ms after it finished, a relayed one after its ttl. */
#ifndef TG_CALL_TASKS_H
#define TG_CALL_TASKS_H

#include <stdint.h>

#include "core/base/buf.h"
#include "core/call/exchange.h"

#define TG_TASKS_MAX 10000
#define TG_TASK_POLL_MS 1000 /* the pollInterval the gateway's own tasks suggest */

struct tg_server;
struct tg_call;

enum tg_task_status { TG_TASK_WORKING = 0, TG_TASK_COMPLETED, TG_TASK_FAILED, TG_TASK_CANCELLED };

/* Owner: srv->tasks (tg_tasks_expire, tg_tasks_free). */
struct tg_task {
    struct tg_sink sink;       /* the gateway's own: its call answers here */
    struct tg_server *srv;
    struct tg_list link;       /* srv->tasks, oldest first */
    char *id;
    char *grant, *subject, *upstream;
    int relayed;               /* an upstream's task id */
    int modern;                /* made for a 2026-07-28 client: the extension's shape (ttlMs, ...) */
    int status;                /* enum tg_task_status */
    char *status_message;      /* or NULL */
    char *answer;              /* finished: the call's JSON-RPC answer (its own id), or NULL */
    size_t answer_len;
    int64_t created_ms, updated_ms; /* wall clock */
    int64_t ttl_ms;
    uint64_t expires;          /* loop time it goes, 0 while working */
    struct tg_call *call;      /* its call, while the call answers into sink */
};

/* A new task of grant/subject/upstream: id NULL makes a random one (the gateway's own). */
struct tg_task *tg_task_new(struct tg_server *srv, const char *id, const char *grant, const char *subject,
                            const char *upstream, int relayed, int64_t ttl_ms);
/* The task id names for this caller on this upstream, or NULL (none, or another's). */
struct tg_task *tg_task_find(struct tg_server *srv, const char *id, const char *grant, const char *subject,
                             const char *upstream);
/* The Task object (taskId, status, statusMessage, createdAt, lastUpdatedAt, ttl, pollInterval);
 * a modern one's members, without the braces, as the extension names them (ttlMs,
 * pollIntervalMs): a CreateTaskResult or tasks/get result adds its own. */
void tg_task_write(struct tg_buf *b, const struct tg_task *t);
/* tasks/get of a modern task (the extension's DetailedTask): resultType "complete", the task,
 * and once it finished its call's result (completed) or error (failed), inlined. */
void tg_task_write_detail(struct tg_buf *b, const struct tg_task *t);
/* A task finished (status, message: statusMessage or NULL): kept limits.approval_ttl_ms more. */
void tg_task_finish(struct tg_task *t, int status, const char *message);
/* An upstream's answer p to a task-augmented call of grant/subject on upstream: a task id in it
 * (result.task.taskId) is noted as theirs. */
void tg_tasks_note_relayed(struct tg_server *srv, const char *p, size_t n, const char *grant, const char *subject,
                           const char *upstream);
/* The tick: tasks past their time go (a working one stays while its call lives). */
void tg_tasks_expire(struct tg_server *srv);
/* The end: every task goes (no call answers into one any more). */
void tg_tasks_free(struct tg_server *srv);

#endif
