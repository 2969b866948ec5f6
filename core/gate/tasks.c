#include "core/gate/tasks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/call/approvals.h"
#include "core/call/call.h"
#include "core/call/gateway.h"
#include "core/call/sink.h"
#include "core/call/tasks.h"
#include "core/mcp/era.h"
#include "core/mcp/mrtr.h"
#include "core/wire/msg.h"

/* The answer to m, {"jsonrpc","id","result": result} where result is JSON text; sk released. */
static void answer(struct tg_sink *sk, const struct tg_msg *m, const char *result, size_t n)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(&b, m->id_raw, m->id_len);
    tg_buf_appends(&b, ",\"result\":");
    tg_buf_append(&b, result, n);
    tg_buf_appends(&b, "}");
    sk->ops->answer(sk, NULL, 200, NULL, b.base, b.len);
    sk->ops->release(sk, NULL);
    tg_buf_dispose(&b);
}

/* A working task cancelled by its client: its call is withdrawn, never forwarded, whatever an
 * approver does later (or let go, if it runs already). */
static void withdraw(struct tg_task *t)
{
    struct tg_call *k = t->call;
    tg_task_finish(t, TG_TASK_CANCELLED, "cancelled by the client");
    if (k != NULL && k->parked)
        tg_approvals_finish(k, 0, "client", "cancelled");
    else if (k != NULL)
        tg_call_client_gone(k);
}

/* The task as a 2025 request has it (a task made for a 2026 client too). */
static void answer_task(struct tg_sink *sk, const struct tg_msg *m, const struct tg_task *t)
{
    struct tg_task c = *t;
    c.modern = 0;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_task_write(&b, &c);
    struct tg_buf meta;
    tg_buf_init(&meta);
    if (tg_call_task_denial_meta(t->call, &meta)) { /* mcp-drafts: repeated while its approval waits */
        b.len--; /* the Task's closing brace */
        tg_buf_append(&b, meta.base, meta.len);
        tg_buf_appends(&b, "}");
    }
    tg_buf_dispose(&meta);
    answer(sk, m, b.base, b.len);
    tg_buf_dispose(&b);
}

/* The tasks extension (MCP 2026-07-28, SEP-2663) on a task of the gateway's own: tasks/get its
 * DetailedTask (the result or error inlined once it finished); tasks/cancel withdraws a working
 * one and, like tasks/update, is answered with an empty ack (the state shows on the next
 * tasks/get; a finished task's cancel is acked the same). The gateway's task never asks for
 * input, so tasks/update has nothing to deliver: its inputResponses are checked and dropped. */
static void modern(struct tg_sink *sk, struct tg_msg *m, struct tg_task *t, const char *op)
{
    static const char ack[] = "{\"resultType\":\"complete\"}";
    if (strcmp(op, "get") == 0) {
        struct tg_task c = *t;
        c.modern = 1;
        struct tg_buf b;
        tg_buf_init(&b);
        tg_task_write_detail(&b, &c);
        answer(sk, m, b.base, b.len);
        tg_buf_dispose(&b);
        return;
    }
    if (strcmp(op, "update") == 0) {
        if (!cJSON_IsObject(tg_json_get(tg_json_get(m->root, "params"), "inputResponses"))) {
            tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                           "tasks/update needs params.inputResponses (an object)", NULL);
            return;
        }
        answer(sk, m, ack, sizeof(ack) - 1);
        return;
    }
    if (t->status == TG_TASK_WORKING)
        withdraw(t);
    answer(sk, m, ack, sizeof(ack) - 1);
}

/* tasks/result of a finished task: its call's answer, under this request's id. */
static void answer_result(struct tg_sink *sk, const struct tg_msg *m, const struct tg_task *t)
{
    cJSON *root = t->answer ? cJSON_ParseWithLength(t->answer, t->answer_len) : NULL;
    const cJSON *result = tg_json_get(root, "result");
    const cJSON *err = tg_json_get(root, "error");
    struct tg_buf b;
    tg_buf_init(&b);
    if (result != NULL) {
        tg_json_write(&b, result);
        answer(sk, m, b.base, b.len);
    } else if (err != NULL) {
        tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
        tg_buf_append(&b, m->id_raw, m->id_len);
        tg_buf_appends(&b, ",\"error\":");
        tg_json_write(&b, err);
        tg_buf_appends(&b, "}");
        sk->ops->answer(sk, NULL, 200, NULL, b.base, b.len);
        sk->ops->release(sk, NULL);
    } else {
        tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                       t->status == TG_TASK_CANCELLED ? "the task was cancelled: it has no result"
                                                      : "the task has no result yet: poll tasks/get until it is completed",
                       NULL);
    }
    tg_buf_dispose(&b);
    cJSON_Delete(root);
}

static void list(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const char *subject)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"tasks\":[");
    int first = 1;
    for (struct tg_list *l = x->srv->tasks.next; l != &x->srv->tasks; l = l->next) {
        struct tg_task *t = tg_container_of(l, struct tg_task, link);
        if (t->relayed || strcmp(t->grant, x->grant->name) != 0 ||
            strcmp(t->subject, subject ? subject : x->grant->name) != 0 || strcmp(t->upstream, x->uc->name) != 0)
            continue; /* another's, or an upstream's (its list is not relayed) */
        if (!first)
            tg_buf_appends(&b, ",");
        first = 0;
        tg_task_write(&b, t);
    }
    tg_buf_appends(&b, "]}");
    answer(sk, m, b.base, b.len);
    tg_buf_dispose(&b);
}

int tg_gate_tasks(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const char *subject)
{
    if (strncmp(m->method, "tasks/", 6) != 0)
        return 0;
    const char *op = m->method + 6;
    int get = strcmp(op, "get") == 0, result = strcmp(op, "result") == 0, cancel = strcmp(op, "cancel") == 0;
    int update = strcmp(op, "update") == 0, era2026 = x->era == TG_ERA_2026;
    if (era2026 && (result || strcmp(op, "list") == 0))
        return 0; /* MCP 2026-07-28 removed both (SEP-2663): the era's unknown-method answer, -32601 */
    if (strcmp(op, "list") == 0) {
        list(x, sk, m, subject);
        return 1;
    }
    if (!get && !result && !cancel && !(update && era2026))
        return 0; /* (tasks/update is no 2025 method: the policy's to allow, as any other) */
    if (era2026 && !(x->client_caps & TG_CAP_TASKS)) {
        /* The extension's methods are for a client that declared it (SEP-2663, SEP-2575). */
        tg_sink_refuse(sk, 400, m->id_raw, m->id_len, TG_RPC_MISSING_CAPABILITY,
                       "Missing required client capability: extensions." TG_MCP_TASKS_EXT,
                       "{\"requiredCapabilities\":{\"extensions\":{\"" TG_MCP_TASKS_EXT "\":{}}}}");
        return 1;
    }
    const cJSON *id = tg_json_get(tg_json_get(m->root, "params"), "taskId");
    struct tg_task *t =
        cJSON_IsString(id) ? tg_task_find(x->srv, id->valuestring, x->grant->name, subject, x->uc->name) : NULL;
    if (t == NULL) {
        char esc[96];
        tg_log(TG_LOG_INFO, "task not found for its caller", "grant=%s upstream=%s method=%s task=%s", x->grant->name,
               x->uc->name, m->method,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(cJSON_IsString(id) ? id->valuestring : "-")));
        tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS, "Failed to retrieve task: Task not found",
                       NULL);
        return 1;
    }
    if (t->relayed)
        return 0; /* the caller's own upstream task: its upstream answers */
    if (era2026) {
        modern(sk, m, t, op);
        return 1;
    }
    if (get) {
        answer_task(sk, m, t);
    } else if (result) {
        answer_result(sk, m, t);
    } else if (t->status != TG_TASK_WORKING) {
        tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                       "Cannot cancel task: it is already in a terminal status", NULL);
    } else {
        withdraw(t);
        answer_task(sk, m, t);
    }
    return 1;
}
