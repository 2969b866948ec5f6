#include "core/call/approvals_modes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/base/sha256.h"
#include "core/call/call.h"
#include "core/call/denial.h"
#include "core/call/gateway.h"
#include "core/call/tasks.h"
#include "core/mcp/era.h"
#include "core/wire/msg.h"
#include "policy/policy.h"
#include "upstream/pool/pool.h"

#define RETRY_AFTER_MS 5000 /* what a pending answer suggests: a human takes seconds at least */

int tg_approvals_mode_of(const struct tg_call *k)
{
    int m = k->dec->approval_mode;
    if (m == TG_APPROVAL_AUTO)
        m = tg_upstream_conf(k->uprt)->approval_mode;
    /* A task-augmented 2025 call, or a 2026 call whose client declared the tasks extension. */
    int tasks = (k->task_aug && k->era == TG_ERA_2025) || (k->tasks_ext && k->era == TG_ERA_2026);
    if (m == TG_APPROVAL_AUTO && tasks)
        m = TG_APPROVAL_TASK; /* the client takes a task (SEP-2848: a requestable denial is one) */
    if (m == TG_APPROVAL_AUTO)
        m = k->era == TG_ERA_2025 && k->progress_token != NULL ? TG_APPROVAL_HOLD : TG_APPROVAL_RETRY;
    if (m == TG_APPROVAL_TASK && !tasks)
        m = TG_APPROVAL_RETRY; /* a client that did not ask for a task cannot take one */
    return m;
}

static void task_strip(struct tg_call *k, struct tg_buf *out);

int tg_approvals_admit(struct tg_call *k, struct tg_buf *out, void (*park)(struct tg_call *k, struct tg_buf *out))
{
    k->approval_mode = (unsigned char)tg_approvals_mode_of(k);
    if (k->approval_mode == TG_APPROVAL_RETRY && tg_approvals_retry_take(k, out, park))
        return -1;
    if (k->approval_mode == TG_APPROVAL_TASK)
        task_strip(k, out);
    return k->approval_mode != TG_APPROVAL_HOLD;
}

/* Where an approver decides: public_url, else the admin listener, then the page's path. */
static void approve_url(const struct tg_server *srv, struct tg_buf *b)
{
    const struct tg_conf *c = srv->conf;
    if (c->public_url != NULL) {
        size_t n = strlen(c->public_url);
        while (n > 0 && c->public_url[n - 1] == '/')
            n--;
        tg_buf_append(b, c->public_url, n);
    } else if (c->admin.enabled && c->admin.address != NULL) {
        int v6 = strchr(c->admin.address, ':') != NULL;
        tg_buf_appendf(b, "http://%s%s%s:%d", v6 ? "[" : "", c->admin.address, v6 ? "]" : "",
                       srv->admin_port ? srv->admin_port : c->admin.port);
    }
    tg_buf_appends(b, "/admin/ui/");
}

/* ---- hold ---------------------------------------------------------------------------------- */

void tg_approvals_hold_prepare(struct tg_call *k)
{
    const struct tg_limits *lim = &k->srv->conf->limits;
    k->approval_mode = TG_APPROVAL_HOLD;
    if (k->dec->approval_timeout_ms > lim->approval_hold_max_ms)
        k->dec->approval_timeout_ms = lim->approval_hold_max_ms; /* the listing's deadline too */
    if (k->progress_token != NULL)
        k->next_progress = now_ms(k->srv) + (uint64_t)lim->approval_progress_ms;
}

/* notifications/progress for the held call k, its token written back from its canonical key
 * ('s' a string, 'n' a number as written: core/mcp/rewrite.c). */
static void send_progress(struct tg_call *k)
{
    struct tg_sink *sk = k->sink;
    if (sk == NULL || !sk->ops->listening(sk) || (sk->flags & TG_SINK_ANSWER_ONLY))
        return;
    struct tg_buf b, url;
    tg_buf_init(&b);
    tg_buf_init(&url);
    approve_url(k->srv, &url);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":");
    const char *t = k->progress_token;
    if (t[0] == 's')
        tg_json_write_string(&b, t + 1, strlen(t + 1));
    else
        tg_buf_appends(&b, t + 1);
    k->progress_sent += 1;
    char msg[400];
    snprintf(msg, sizeof(msg), "waiting for a human to approve %s at %.*s (approval %s)", k->tool, (int)url.len,
             url.base, k->approval_id);
    tg_buf_appendf(&b, ",\"progress\":%.0f,\"message\":", k->progress_sent);
    tg_json_write_string(&b, msg, strlen(msg));
    tg_buf_appends(&b, "}}");
    sk->ops->message(sk, k, b.base, b.len);
    tg_buf_dispose(&b);
    tg_buf_dispose(&url);
}

/* ---- retry --------------------------------------------------------------------------------- */

/* What a retry must match: grant, subject, upstream, tool and the arguments of the message as
 * it goes upstream (out), canonical. */
static void retry_key(const struct tg_call *k, const struct tg_buf *out, uint8_t key[32])
{
    struct tg_buf b;
    tg_buf_init(&b);
    const char *parts[] = {k->grant, k->subject ? k->subject : k->grant, up_name(k), k->tool};
    for (int i = 0; i < 4; i++) {
        const char *p = parts[i] ? parts[i] : "";
        tg_buf_append(&b, p, strlen(p) + 1); /* with its NUL: no part runs into the next */
    }
    struct tg_json_doc doc;
    if (tg_json_parse(out->base, out->len, k->srv->conf->limits.json_depth + 16, 1, &doc, NULL, NULL) == 0) {
        const cJSON *args = tg_json_get(tg_json_get(doc.root, "params"), "arguments");
        if (args != NULL)
            tg_json_canon_as_written(&b, args);
        else
            tg_buf_appends(&b, "{}"); /* no arguments and {} are the same call */
        cJSON_Delete(doc.root);
    }
    tg_sha256(b.base, b.len, key);
    tg_buf_dispose(&b);
}

/* What a call made again meets besides a record's states: its approval in use by a call running
 * now, or no shared store to ask. */
enum { ST_BUSY = 10, ST_UNAVAILABLE };

/* -32003 to k's client about the record `id` in state st: pending, denied (with the approver's
 * reason), busy or unavailable (why). */
static void answer_record(struct tg_call *k, int st, const char *id, const char *why)
{
    struct tg_sink *sk = k->sink;
    if (sk == NULL)
        return;
    struct tg_buf data, e, url;
    tg_buf_init(&data);
    tg_buf_init(&e);
    tg_buf_init(&url);
    approve_url(k->srv, &url);
    tg_buf_append(&url, "", 1);
    char msg[1024];
    const char *status = st == TG_RECORD_DENIED  ? "denied"
                         : st == ST_BUSY          ? "running"
                         : st == ST_UNAVAILABLE   ? "unavailable"
                                                  : "pending";
    if (st == TG_RECORD_DENIED)
        snprintf(msg, sizeof(msg), "%s was refused by a human approver; the call was not made", k->tool);
    else if (st == ST_BUSY)
        snprintf(msg, sizeof(msg),
                 "%s was approved once, and that approved call is running now for another request; the call was "
                 "not made. If that one fails, its approval comes back: call %s again then",
                 k->tool, k->tool);
    else if (st == ST_UNAVAILABLE)
        snprintf(msg, sizeof(msg),
                 "%s needs a human's approval, but approvals are unavailable (%s); the call was not made, try again "
                 "later",
                 k->tool, why ? why : "the shared store failed");
    else
        snprintf(msg, sizeof(msg),
                 "%s needs a human's approval: a human must approve this call at %s (approval %s); ask the user to "
                 "approve it, then call %s again with the same arguments",
                 k->tool, url.base, id, k->tool);
    tg_buf_appends(&data, "{\"tool\":");
    tg_json_write_string(&data, k->tool, strlen(k->tool));
    if (id != NULL) {
        tg_buf_appends(&data, ",\"approval_id\":");
        tg_json_write_string(&data, id, strlen(id));
    }
    tg_buf_appends(&data, ",\"status\":");
    tg_json_write_string(&data, status, strlen(status));
    if (st == TG_RECORD_PENDING) {
        tg_buf_appends(&data, ",\"approve_url\":");
        tg_json_write_string(&data, url.base, url.len - 1);
        tg_buf_appendf(&data, ",\"retry_after_ms\":%d", RETRY_AFTER_MS);
    } else {
        const char *r = why && why[0] ? why : msg;
        tg_buf_appends(&data, ",\"reason\":");
        tg_json_write_string(&data, r, strlen(r));
    }
    tg_buf_append(&data, "}", 2); /* with its NUL: tg_rpc_error takes a C string */
    /* mcp-drafts: waiting for a human is a remedy at a page (a "url" hint naming it); a refusal
     * is final. Busy and unavailable are no authorization denial: they keep -32003. */
    struct tg_denial dn = {TG_REMEDIATION_AVAILABLE, "url", url.base, "user_action_required", NULL, data.base};
    if (st == TG_RECORD_DENIED) {
        dn.remediation = TG_REMEDIATION_UNAVAILABLE;
        dn.code = "permission_denied";
    }
    if ((st != TG_RECORD_PENDING && st != TG_RECORD_DENIED) || tg_call_answer_denial(k, msg, &dn) != 0) {
        tg_rpc_error(&e, k->client_id, k->client_id_len, TG_RPC_APPROVAL, msg, data.base);
        sk->ops->answer(sk, k, 200, NULL, e.base, e.len);
    }
    tg_buf_dispose(&e);
    tg_buf_dispose(&data);
    tg_buf_dispose(&url);
}

/* The call k took the shared record: it settled (given back if it certainly did not run). */
static void shared_taken_settled(struct tg_call *k, int give_back)
{
    k->approval_settled = NULL;
    give_back = give_back && !k->srv->draining;
    if (give_back)
        tg_log(TG_LOG_INFO, "approved call did not run: its approval is given back", "approval_id=%s", k->approval_id);
    if (k->srv->store.ops->record_settled != NULL) /* NULL: the cluster went (shutdown): it stays taken */
        k->srv->store.ops->record_settled(k->srv->store.ud, k->approval_key, k->approval_id, give_back);
}

/* The shared store answered k's lookup (k->held: its message). */
static void on_record(void *ud, int found, const struct tg_approval_record *rec, const char *why)
{
    struct tg_call *k = ud;
    k->record_wait = NULL;
    struct tg_buf out = k->held;
    tg_buf_init(&k->held);
    if (found == TG_RECORD_MINE) {
        k->record_shared = 1; /* dropped if k leaves undecided */
        k->record_then(k, &out); /* parks it as the record, or refuses it (and the record goes) */
        return;
    }
    if (found == TG_RECORD_FOUND && rec->state == TG_RECORD_APPROVED) {
        snprintf(k->approval_id, sizeof(k->approval_id), "%s", rec->id); /* its audit lines name it */
        k->approval_settled = shared_taken_settled; /* until the call settles */
        tg_log(TG_LOG_INFO, "approved call made again: it runs", "approval_id=%s session=%s", k->approval_id,
               k->sess ? k->sess->id_str : "-");
        tg_call_send(k, out.base, out.len, (uint64_t)tg_upstream_conf(k->uprt)->call_timeout_ms);
        tg_buf_dispose(&out);
        return;
    }
    tg_buf_dispose(&out);
    if (found == TG_RECORD_FOUND) {
        snprintf(k->approval_id, sizeof(k->approval_id), "%s", rec->id);
        if (rec->state == TG_RECORD_DENIED)
            tg_call_audit(k, "rejected", -1, NULL, NULL);
        answer_record(k, rec->state, rec->id, rec->reason);
    } else if (found == TG_RECORD_BUSY) {
        tg_call_audit(k, "rejected", -1, NULL, NULL);
        answer_record(k, ST_BUSY, rec ? rec->id : NULL, NULL);
    } else {
        tg_call_audit(k, "unavailable", -1, NULL, NULL);
        tg_log(TG_LOG_WARN, "approval records unavailable: the call made again is refused", "why=\"%s\"",
               why ? why : "-");
        answer_record(k, ST_UNAVAILABLE, NULL, why);
    }
    tg_call_close(k);
}

/* k's record, asked of the shared store (out moves into k while it waits). A new record's id is
 * made now: it is the one other members find if none was there. */
static void shared_find(struct tg_call *k, struct tg_buf *out, void (*park)(struct tg_call *k, struct tg_buf *out))
{
    struct tg_server *srv = k->srv;
    uint8_t rnd[16];
    tg_random(rnd, sizeof(rnd));
    tg_hex_encode(rnd, sizeof(rnd), k->approval_id);
    struct tg_approval_record mine = {.id = k->approval_id, .state = TG_RECORD_PENDING};
    memcpy(mine.key, k->approval_key, 32);
    mine.expires_ms = (uint64_t)wall_ms() + (uint64_t)k->dec->approval_timeout_ms;
    k->held = *out;
    tg_buf_init(out);
    k->record_then = park;
    k->record_wait = srv->store.ops->record_find(srv->store.ud, &mine, on_record, k);
}

int tg_approvals_retry_take(struct tg_call *k, struct tg_buf *out, void (*park)(struct tg_call *k, struct tg_buf *out))
{
    struct tg_server *srv = k->srv;
    k->approval_mode = TG_APPROVAL_RETRY;
    retry_key(k, out, k->approval_key);
    uint64_t now = now_ms(srv);
    for (struct tg_list *l = srv->approvals_decided.next; l != &srv->approvals_decided; l = l->next) {
        struct tg_call *r = tg_container_of(l, struct tg_call, alink);
        if (r->approval_deadline <= now || memcmp(r->approval_key, k->approval_key, 32) != 0)
            continue;
        memcpy(k->approval_id, r->approval_id, sizeof(k->approval_id)); /* its audit lines name it */
        if (r->approval_state == TG_RECORD_APPROVED) {
            tg_list_unlink(&r->alink);
            k->approval_taken = r; /* until the call settles: given back if it certainly did not run */
            k->approval_settled = tg_approvals_taken_settled;
            tg_log(TG_LOG_INFO, "approved call made again: it runs", "approval_id=%s session=%s", r->approval_id,
                   k->sess->id_str);
            tg_call_send(k, out->base, out->len, (uint64_t)tg_upstream_conf(k->uprt)->call_timeout_ms);
        } else {
            tg_call_audit(k, "rejected", -1, NULL, NULL);
            answer_record(k, r->approval_state, r->approval_id, r->approval_reason);
            tg_call_close(k);
        }
        tg_buf_dispose(out);
        return 1;
    }
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next) {
        struct tg_call *r = tg_container_of(l, struct tg_call, alink);
        if (r->approval_mode != TG_APPROVAL_RETRY || r->sess != NULL ||
            memcmp(r->approval_key, k->approval_key, 32) != 0)
            continue;
        /* The same call again while a human has yet to decide: one approval for both. */
        answer_record(k, TG_RECORD_PENDING, r->approval_id, NULL);
        tg_call_close(k);
        tg_buf_dispose(out);
        return 1;
    }
    if (srv->store.ops->record_find == NULL)
        return 0;
    shared_find(k, out, park); /* the members' records: the store knows them all */
    return 1;
}

void tg_approvals_retry_detach(struct tg_call *k)
{
    answer_record(k, TG_RECORD_PENDING, k->approval_id, NULL);
    tg_call_settle(k, TG_OUT_WITHDRAWN, -1); /* its reservations back: the call made again decides anew */
    struct tg_sink *sk = k->sink;
    k->sink = NULL;
    if (sk != NULL)
        sk->ops->release(sk, k);
    struct tg_session *s = k->sess;
    if (s != NULL) {
        /* The record outlives its session: the call may come again on another. */
        if (k->kind == KIND_REQUEST && s->inflight > 0)
            s->inflight--;
        tg_list_unlink(&k->slink);
        s->last_active_ms = now_ms(k->srv);
        tg_session_unref(s);
        k->sess = NULL;
    }
}

void tg_approvals_record_decided(struct tg_call *k, int approve, const char *by, const char *reason)
{
    struct tg_server *srv = k->srv;
    if (srv->store.ops->record_put != NULL) {
        /* Shared: the store's record is the one every member's call made again meets. */
        struct tg_approval_record rec = {.id = k->approval_id,
                                         .state = approve ? TG_RECORD_APPROVED : TG_RECORD_DENIED,
                                         .by = by,
                                         .reason = reason != NULL && reason[0] ? reason : NULL};
        memcpy(rec.key, k->approval_key, 32);
        rec.expires_ms = (uint64_t)wall_ms() + (uint64_t)srv->conf->limits.approval_ttl_ms;
        srv->store.ops->record_put(srv->store.ud, &rec);
        k->record_shared = 0; /* decided: the record is the decision now */
        tg_call_close(k);
        return;
    }
    k->approval_state = approve ? TG_RECORD_APPROVED : TG_RECORD_DENIED;
    tg_xfree(k->approval_reason);
    k->approval_reason = reason != NULL && reason[0] ? tg_xstrdup(reason) : NULL;
    k->approval_deadline = now_ms(srv) + (uint64_t)srv->conf->limits.approval_ttl_ms;
    tg_list_insert_tail(&srv->approvals_decided, &k->alink);
}

void tg_approvals_taken_settled(struct tg_call *k, int give_back)
{
    struct tg_call *r = k->approval_taken;
    k->approval_taken = NULL;
    k->approval_settled = NULL;
    if (give_back && !k->srv->draining) {
        tg_log(TG_LOG_INFO, "approved call did not run: its approval is given back", "approval_id=%s",
               r->approval_id);
        tg_list_insert_tail(&k->srv->approvals_decided, &r->alink);
        return;
    }
    tg_call_close(r); /* used: the next call needs a new approval */
}

/* ---- task ---------------------------------------------------------------------------------- */

/* Before it parks: approved, it runs as a plain call (the task is the gateway's, not the
 * upstream's), and what the approver sees and approves is that call. */
static void task_strip(struct tg_call *k, struct tg_buf *out)
{
    struct tg_json_doc doc;
    if (tg_json_parse(out->base, out->len, k->srv->conf->limits.json_depth + 16, 1, &doc, NULL, NULL) == 0) {
        cJSON_DeleteItemFromObjectCaseSensitive(tg_json_get(doc.root, "params"), "task");
        out->len = 0;
        tg_json_write(out, doc.root);
        cJSON_Delete(doc.root);
    }
    k->task_aug = 0;
}

static void task_start(struct tg_call *k)
{
    struct tg_server *srv = k->srv;
    int64_t ttl = (int64_t)k->dec->approval_timeout_ms + srv->conf->limits.approval_ttl_ms; /* covers the wait */
    struct tg_task *t = tg_task_new(srv, NULL, k->grant, k->subject, up_name(k), 0, ttl);
    t->modern = k->era == TG_ERA_2026;
    struct tg_buf b, url;
    tg_buf_init(&b);
    tg_buf_init(&url);
    approve_url(srv, &url);
    char msg[600];
    snprintf(msg, sizeof(msg), "waiting for a human to approve %s at %.*s (approval %s)", k->tool, (int)url.len,
             url.base, k->approval_id);
    t->status_message = tg_xstrdup(msg);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(&b, k->client_id, k->client_id_len);
    if (t->modern) {
        /* The extension's CreateTaskResult: the task's members, flat, beside resultType. */
        tg_buf_appends(&b, ",\"result\":{\"resultType\":\"task\",");
        tg_task_write(&b, t);
    } else {
        tg_buf_appends(&b, ",\"result\":{\"task\":");
        tg_task_write(&b, t);
    }
    tg_call_task_denial_meta(k, &b); /* mcp-drafts: the envelope with a "task" hint (SEP-2643) */
    tg_buf_appends(&b, "}}");
    struct tg_sink *sk = k->sink;
    if (sk != NULL) {
        sk->ops->answer(sk, k, 200, NULL, b.base, b.len);
        sk->ops->release(sk, k);
    }
    k->sink = &t->sink; /* its answer, or its refusal, is the task's from now on */
    t->call = k;
    tg_xfree(k->id_key); /* answered: its id is the client's to use again */
    k->id_key = NULL;
    tg_log(TG_LOG_INFO, "parked call answered with a task", "approval_id=%s task=%s", k->approval_id, t->id);
    tg_buf_dispose(&b);
    tg_buf_dispose(&url);
}

void tg_approvals_answer_now(struct tg_call *k)
{
    if (k->approval_mode == TG_APPROVAL_RETRY)
        tg_approvals_retry_detach(k);
    else if (k->approval_mode == TG_APPROVAL_TASK)
        task_start(k);
}

/* ---- the tick ------------------------------------------------------------------------------ */

void tg_approvals_modes_tick(struct tg_server *srv)
{
    uint64_t now = now_ms(srv);
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        if (k->next_progress != 0 && k->next_progress <= now) {
            k->next_progress = now + (uint64_t)srv->conf->limits.approval_progress_ms;
            send_progress(k); /* a message, never an answer: k stays parked */
        }
    }
    for (struct tg_list *l = srv->approvals_decided.next, *next; l != &srv->approvals_decided; l = next) {
        next = l->next;
        struct tg_call *r = tg_container_of(l, struct tg_call, alink);
        if (r->approval_deadline <= now) {
            tg_list_unlink(&r->alink);
            tg_call_close(r);
        }
    }
    tg_tasks_expire(srv);
}

void tg_approvals_records_close(struct tg_server *srv)
{
    while (!tg_list_empty(&srv->approvals_decided)) {
        struct tg_call *r = tg_container_of(srv->approvals_decided.next, struct tg_call, alink);
        tg_list_unlink(&r->alink);
        tg_call_close(r);
    }
}
