#include "core/call/tasks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/call/call.h" /* now_ms, wall_ms: inline */
#include "core/call/gateway.h"
#include "core/call/sink.h"
#include "core/wire/msg.h"

static const char *const status_names[] = {"working", "completed", "failed", "cancelled"};

/* ---- the sink a task's call answers into ------------------------------------------------ */

static struct tg_task *task_of(struct tg_sink *sk) { return tg_container_of(sk, struct tg_task, sink); }

/* The call's answer: kept for tasks/result; a JSON-RPC error fails the task, saying why. */
static void task_answer(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p, size_t n)
{
    (void)k;
    (void)status;
    (void)extra;
    struct tg_task *t = task_of(sk);
    if (t->status != TG_TASK_WORKING)
        return; /* cancelled first: what the call says after is dropped */
    t->answer = tg_xmalloc(n + 1);
    memcpy(t->answer, p, n);
    t->answer[n] = '\0';
    t->answer_len = n;
    cJSON *root = cJSON_ParseWithLength(p, n);
    const cJSON *err = tg_json_get(root, "error");
    const cJSON *rt = tg_json_get(tg_json_get(root, "result"), "resultType");
    if (err == NULL && cJSON_IsString(rt) && strcmp(rt->valuestring, "complete") != 0) {
        /* The tool asked its client for input (input_required): a task the gateway made for an
         * approval has nobody to ask, so it fails saying so. */
        static const char why[] = "the tool asked for input, which a task made for an approval cannot relay: "
                                  "call the tool again";
        struct tg_buf e;
        tg_buf_init(&e);
        tg_rpc_error(&e, NULL, 0, TG_RPC_INTERNAL, why, NULL);
        free(t->answer);
        t->answer = tg_xmalloc(e.len + 1);
        memcpy(t->answer, e.base, e.len);
        t->answer[e.len] = '\0';
        t->answer_len = e.len;
        tg_buf_dispose(&e);
        tg_task_finish(t, TG_TASK_FAILED, why);
    } else if (err != NULL) {
        const cJSON *msg = tg_json_get(err, "message");
        const cJSON *reason = tg_json_get(tg_json_get(err, "data"), "reason");
        char why[800];
        snprintf(why, sizeof(why), "%s%s%s", cJSON_IsString(msg) ? msg->valuestring : "the call failed",
                 cJSON_IsString(reason) && cJSON_IsString(msg) && strcmp(reason->valuestring, msg->valuestring) != 0
                     ? ": "
                     : "",
                 cJSON_IsString(reason) && cJSON_IsString(msg) && strcmp(reason->valuestring, msg->valuestring) != 0
                     ? reason->valuestring
                     : "");
        tg_task_finish(t, TG_TASK_FAILED, why);
    } else {
        tg_task_finish(t, TG_TASK_COMPLETED, NULL);
    }
    cJSON_Delete(root);
}

static void task_release(struct tg_sink *sk, struct tg_call *k)
{
    (void)k;
    struct tg_task *t = task_of(sk);
    t->call = NULL;
    if (t->status == TG_TASK_WORKING) /* the call ended without an answer (the gateway stops) */
        tg_task_finish(t, TG_TASK_FAILED, "the call ended before it was answered");
}

static const struct tg_sink_ops task_sink_ops = {
    .message = tg_sink_nop_message, /* progress of a task nobody streams: dropped */
    .answer = task_answer,
    TG_SINK_NO_STREAM,
    TG_SINK_NO_CLIENT,
    .release = task_release,
};

/* ---- the table ---------------------------------------------------------------------------- */

static void task_free(struct tg_task *t)
{
    tg_list_unlink(&t->link);
    t->srv->ntasks--;
    free(t->id);
    free(t->grant);
    free(t->subject);
    free(t->upstream);
    free(t->status_message);
    free(t->answer);
    free(t);
}

struct tg_task *tg_task_new(struct tg_server *srv, const char *id, const char *grant, const char *subject,
                            const char *upstream, int relayed, int64_t ttl_ms)
{
    if (srv->ntasks >= TG_TASKS_MAX) {
        /* Full: the oldest one no call answers into goes. */
        for (struct tg_list *l = srv->tasks.next; l != &srv->tasks; l = l->next) {
            struct tg_task *o = tg_container_of(l, struct tg_task, link);
            if (o->call == NULL) {
                task_free(o);
                break;
            }
        }
    }
    struct tg_task *t = tg_xcalloc(1, sizeof(*t));
    t->sink.ops = &task_sink_ops;
    t->sink.flags = TG_SINK_ANSWER_ONLY; /* the server's requests are refused for it, its messages dropped */
    t->srv = srv;
    if (id != NULL) {
        t->id = tg_xstrdup(id);
    } else {
        uint8_t rnd[16];
        t->id = tg_xmalloc(33);
        tg_random(rnd, sizeof(rnd));
        tg_hex_encode(rnd, sizeof(rnd), t->id);
    }
    t->grant = tg_xstrdup(grant);
    t->subject = tg_xstrdup(subject ? subject : grant);
    t->upstream = tg_xstrdup(upstream);
    t->relayed = relayed;
    t->created_ms = t->updated_ms = wall_ms();
    t->ttl_ms = ttl_ms;
    if (relayed)
        t->expires = now_ms(srv) + (uint64_t)(ttl_ms > 0 ? ttl_ms : 86400000);
    tg_list_insert_tail(&srv->tasks, &t->link);
    srv->ntasks++;
    return t;
}

struct tg_task *tg_task_find(struct tg_server *srv, const char *id, const char *grant, const char *subject,
                             const char *upstream)
{
    for (struct tg_list *l = srv->tasks.next; l != &srv->tasks; l = l->next) {
        struct tg_task *t = tg_container_of(l, struct tg_task, link);
        if (strcmp(t->id, id) == 0 && strcmp(t->upstream, upstream) == 0)
            /* Another's is not found: the same answer as one that does not exist. */
            return strcmp(t->grant, grant) == 0 && strcmp(t->subject, subject ? subject : grant) == 0 ? t : NULL;
    }
    return NULL;
}

void tg_task_finish(struct tg_task *t, int status, const char *message)
{
    t->status = status;
    free(t->status_message);
    t->status_message = message != NULL ? tg_xstrdup(message) : NULL;
    t->updated_ms = wall_ms();
    t->expires = now_ms(t->srv) + (uint64_t)t->srv->conf->limits.approval_ttl_ms;
}

static void iso8601(struct tg_buf *b, int64_t ms)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char d[40];
    strftime(d, sizeof(d), "%Y-%m-%dT%H:%M:%S", &tm);
    tg_buf_appendf(b, "\"%s.%03dZ\"", d, (int)(ms % 1000));
}

void tg_task_write(struct tg_buf *b, const struct tg_task *t)
{
    tg_buf_appends(b, t->modern ? "\"taskId\":" : "{\"taskId\":");
    tg_json_write_string(b, t->id, strlen(t->id));
    tg_buf_appendf(b, ",\"status\":\"%s\"", status_names[t->status]);
    if (t->status_message != NULL) {
        tg_buf_appends(b, ",\"statusMessage\":");
        tg_json_write_string(b, t->status_message, strlen(t->status_message));
    }
    tg_buf_appends(b, ",\"createdAt\":");
    iso8601(b, t->created_ms);
    tg_buf_appends(b, ",\"lastUpdatedAt\":");
    iso8601(b, t->updated_ms);
    if (t->modern)
        tg_buf_appendf(b, ",\"ttlMs\":%lld,\"pollIntervalMs\":%d", (long long)t->ttl_ms, TG_TASK_POLL_MS);
    else
        tg_buf_appendf(b, ",\"ttl\":%lld,\"pollInterval\":%d}", (long long)t->ttl_ms, TG_TASK_POLL_MS);
}

void tg_task_write_detail(struct tg_buf *b, const struct tg_task *t)
{
    tg_buf_appends(b, "{\"resultType\":\"complete\",");
    tg_task_write(b, t);
    tg_call_task_denial_meta(t->call, b); /* mcp-drafts: repeated while its approval waits */
    cJSON *root = t->answer != NULL && t->status != TG_TASK_CANCELLED ? cJSON_ParseWithLength(t->answer, t->answer_len)
                                                                     : NULL;
    const cJSON *v = tg_json_get(root, t->status == TG_TASK_COMPLETED ? "result" : "error");
    if (v != NULL && (t->status == TG_TASK_COMPLETED || t->status == TG_TASK_FAILED)) {
        tg_buf_appends(b, t->status == TG_TASK_COMPLETED ? ",\"result\":" : ",\"error\":");
        tg_json_write(b, v);
    } else if (t->status == TG_TASK_FAILED) {
        /* It ended without an answer (the gateway stopped): the error says so. */
        const char *why = t->status_message ? t->status_message : "the call failed";
        tg_buf_appendf(b, ",\"error\":{\"code\":%d,\"message\":", TG_RPC_INTERNAL);
        tg_json_write_string(b, why, strlen(why));
        tg_buf_appends(b, "}");
    }
    cJSON_Delete(root);
    tg_buf_appends(b, "}");
}

void tg_tasks_note_relayed(struct tg_server *srv, const char *p, size_t n, const char *grant, const char *subject,
                           const char *upstream)
{
    cJSON *root = cJSON_ParseWithLength(p, n);
    const cJSON *task = tg_json_get(tg_json_get(root, "result"), "task");
    const cJSON *id = tg_json_get(task, "taskId");
    const cJSON *ttl = tg_json_get(task, "ttl");
    if (cJSON_IsString(id) && id->valuestring[0] != '\0' && strlen(id->valuestring) <= 256) {
        int64_t ms = cJSON_IsNumber(ttl) && ttl->valuedouble > 0 && ttl->valuedouble < 8.64e9 ? (int64_t)ttl->valuedouble : 0;
        int known = 0;
        for (struct tg_list *l = srv->tasks.next; l != &srv->tasks && !known; l = l->next) {
            struct tg_task *t = tg_container_of(l, struct tg_task, link);
            known = strcmp(t->id, id->valuestring) == 0 && strcmp(t->upstream, upstream) == 0;
        }
        if (!known) /* the first to get it owns it: an upstream naming one id twice gives it to nobody else */
            tg_task_new(srv, id->valuestring, grant, subject, upstream, 1, ms);
    }
    cJSON_Delete(root);
}

void tg_tasks_expire(struct tg_server *srv)
{
    uint64_t now = now_ms(srv);
    for (struct tg_list *l = srv->tasks.next, *next; l != &srv->tasks; l = next) {
        next = l->next;
        struct tg_task *t = tg_container_of(l, struct tg_task, link);
        if (t->call == NULL && t->expires != 0 && t->expires <= now)
            task_free(t);
    }
}

void tg_tasks_free(struct tg_server *srv)
{
    while (!tg_list_empty(&srv->tasks))
        task_free(tg_container_of(srv->tasks.next, struct tg_task, link));
}
