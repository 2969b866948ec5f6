/* tasks/get, tasks/result, tasks/cancel and tasks/list (MCP 2025-11-25) at the gate: a task is
 * its caller's (core/call/tasks.h). The gateway answers for its own tasks (a call parked for
 * approval in approval_mode "task"); a relayed upstream task goes upstream only for the caller it
 * was handed to; any other task id is "not found" (-32602). tasks/list is answered by the
 * gateway with the caller's own tasks: an upstream's list, which holds every grant's, is never
 * relayed. */
#ifndef TG_GATE_TASKS_H
#define TG_GATE_TASKS_H

struct tg_exchange;
struct tg_sink;
struct tg_msg;

/* Request m of the caller (x's grant, subject): 1 if it was a tasks/ request answered here (sk
 * released); 0 if it goes on (another method, or a relayed task of the caller's). */
int tg_gate_tasks(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const char *subject);

#endif
