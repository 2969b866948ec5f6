#include "core/call/approvals.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/approvals_modes.h"
#include "core/call/audit.h"
#include "core/call/call.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/wire/msg.h"
#include "policy/policy.h"
#include "upstream/pool/pool.h"

void tg_approvals_park(struct tg_call *k)
{
    struct tg_server *srv = k->srv;
    if (k->approval_mode == TG_APPROVAL_HOLD)
        tg_approvals_hold_prepare(k); /* its timeout capped; progress if its client can take it */
    uint8_t rnd[16];
    tg_random(rnd, sizeof(rnd));
    tg_hex_encode(rnd, sizeof(rnd), k->approval_id);
    k->parked = 1;
    k->approval_deadline = now_ms(srv) + (uint64_t)k->dec->approval_timeout_ms;
    k->parked_at_wall = (uint64_t)wall_ms();
    tg_list_insert_tail(&srv->approvals, &k->alink);
    srv->napprovals++;
    char gesc[160], tesc[300]; /* the tool's name is the client's: escaped, as every name */
    tg_log(TG_LOG_INFO, "call parked for approval", "approval_id=%s grant=%s session=%s upstream=%s tool=%s",
           k->approval_id, tg_log_esc(gesc, sizeof(gesc), tg_slice_cstr(k->grant)), k->sess->id_str, up_name(k),
           tg_log_esc(tesc, sizeof(tesc), tg_slice_cstr(k->tool)));
    tg_call_audit(k, "approve", -1, NULL, NULL);
    srv->store.ops->approval_park(srv->store.ud, k);
    tg_approvals_answer_now(k); /* retry and task: the client has its answer at once */
}

/* The answer to a call that was not approved: -32003 with {tool, approval_id, reason}, reason
 * being the approver's own words when they gave some, else what happened. */
static void answer_refused(struct tg_call *k, const char *message, const char *reason)
{
    struct tg_buf data, e;
    tg_buf_init(&data);
    tg_buf_init(&e);
    tg_buf_appends(&data, "{\"tool\":");
    tg_json_write_string(&data, k->tool, strlen(k->tool));
    tg_buf_appends(&data, ",\"approval_id\":");
    tg_json_write_string(&data, k->approval_id, strlen(k->approval_id));
    tg_buf_appends(&data, ",\"reason\":");
    tg_json_write_string(&data, reason, strlen(reason));
    tg_buf_append(&data, "}", 2); /* with its NUL: tg_rpc_error takes a C string */
    tg_rpc_error(&e, k->client_id, k->client_id_len, TG_RPC_APPROVAL, message, data.base);
    k->sink->ops->answer(k->sink, k, 200, NULL, e.base, e.len);
    tg_buf_dispose(&e);
    tg_buf_dispose(&data);
}

static void finish(struct tg_call *k, int approve, const char *by, const char *why, const char *reason)
{
    struct tg_server *srv = k->srv;
    tg_list_unlink(&k->alink);
    srv->napprovals--;
    k->parked = 0;
    srv->store.ops->approval_gone(srv->store.ud, k);
    if (approve) {
        srv->metrics.approvals_approved++;
        tg_call_audit(k, "approved", -1, NULL, by);
        char esc[200]; /* the approver's name comes from a header: escaped, it cannot forge log fields */
        tg_log(TG_LOG_INFO, "approval granted", "approval_id=%s by=%s", k->approval_id,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by)));
        if (k->approval_mode == TG_APPROVAL_RETRY && k->sess == NULL) {
            tg_approvals_record_decided(k, 1, NULL); /* it runs when its client calls again */
            return;
        }
        struct tg_buf body = k->held;
        tg_buf_init(&k->held);
        tg_call_send(k, body.base, body.len, (uint64_t)tg_upstream_conf(k->uprt)->call_timeout_ms);
        tg_buf_dispose(&body);
        return;
    }
    int cancelled = why != NULL && strcmp(why, "cancelled") == 0;
    if (why == NULL || cancelled)
        srv->metrics.approvals_rejected++;
    else
        srv->metrics.approvals_expired++;
    tg_call_audit(k, cancelled ? "cancelled" : why ? "expired" : "rejected", -1, NULL, by);
    char esc[200], resc[300];
    tg_log(TG_LOG_INFO, why ? "approval timed out" : "approval denied", "approval_id=%s by=%s reason=%s",
           k->approval_id, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by ? by : "-")),
           tg_log_esc(resc, sizeof(resc), tg_slice_cstr(reason && reason[0] ? reason : "-")));
    if (why == NULL && k->approval_mode == TG_APPROVAL_RETRY && k->sess == NULL) {
        tg_approvals_record_decided(k, 0, reason); /* its client hears it when it calls again */
        return;
    }
    if (k->sink != NULL && k->sink->ops->listening(k->sink)) {
        char message[sizeof(k->dec->message)];
        if (cancelled)
            snprintf(message, sizeof(message),
                     "%s was cancelled by the client before approval; the call was not made", k->tool);
        else if (why)
            snprintf(message, sizeof(message), "%s was not approved in time; the call was not made", k->tool);
        else
            snprintf(message, sizeof(message), "%s was refused by a human approver; the call was not made",
                     k->tool);
        answer_refused(k, message, reason && reason[0] ? reason : message);
    }
    tg_call_close(k);
}

void tg_approvals_finish(struct tg_call *k, int approve, const char *by, const char *why)
{
    finish(k, approve, by, why, NULL);
}

void tg_approvals_deny(struct tg_call *k, const char *by, const char *reason)
{
    finish(k, 0, by, NULL, reason);
}

struct tg_call *tg_approvals_find(struct tg_server *srv, struct tg_slice id)
{
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        if (tg_slice_eq(id, tg_slice_cstr(k->approval_id)))
            return k;
    }
    return NULL;
}

void tg_approvals_write(struct tg_buf *b, const struct tg_approval_item *items, size_t n, int args)
{
    tg_buf_appends(b, "{\"approvals\":[");
    for (size_t i = 0; i < n; i++) {
        const struct tg_approval_item *it = &items[i];
        static const char *const names[] = {"id", "grant", "session", "upstream", "tool", "args_sha256"};
        const char *vals[] = {it->id, it->grant, it->session, it->upstream, it->tool, it->args_sha256};
        tg_buf_appends(b, i ? ",{" : "{");
        for (int f = 0; f < 6; f++) {
            tg_buf_appendf(b, "%s\"%s\":", f ? "," : "", names[f]);
            tg_json_write_string(b, vals[f] ? vals[f] : "", vals[f] ? strlen(vals[f]) : 0);
        }
        if (args && it->args) {
            tg_buf_appends(b, ",\"args\":");
            tg_buf_appends(b, it->args);
        }
        tg_buf_appendf(b, ",\"parked_at_ms\":%llu,\"waited_ms\":%llu,\"expires_in_ms\":%llu,\"instance\":",
                       (unsigned long long)it->parked_at_ms, (unsigned long long)it->waited_ms,
                       (unsigned long long)it->expires_in_ms);
        if (it->instance)
            tg_json_write_string(b, it->instance, strlen(it->instance));
        else
            tg_buf_appends(b, "null");
        tg_buf_appends(b, "}");
    }
    tg_buf_appends(b, "]}");
}

void tg_approvals_expire(struct tg_server *srv)
{
    /* Timeouts differ per tool, so the whole list is scanned; the due ones move to a list of
     * their own first, then the first is taken each time (refusing one may close another). */
    uint64_t now = now_ms(srv);
    struct tg_list due;
    tg_list_init(&due);
    for (struct tg_list *l = srv->approvals.next, *next; l != &srv->approvals; l = next) {
        next = l->next;
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        if (k->approval_deadline <= now) {
            tg_list_unlink(&k->alink);
            tg_list_insert_tail(&due, &k->alink);
        }
    }
    while (!tg_list_empty(&due))
        tg_approvals_finish(tg_container_of(due.next, struct tg_call, alink), 0, NULL, "timeout");
    tg_approvals_modes_tick(srv);
}

void tg_approvals_abort(struct tg_server *srv)
{
    while (!tg_list_empty(&srv->approvals)) {
        struct tg_call *k = tg_container_of(srv->approvals.next, struct tg_call, alink);
        tg_approvals_finish(k, 0, "shutdown", "timeout");
    }
    tg_approvals_records_close(srv);
}

static struct tg_call *first_parked(struct tg_session *s)
{
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->parked)
            return k;
    }
    return NULL;
}

void tg_approvals_withdraw(struct tg_session *s)
{
    for (struct tg_call *k; (k = first_parked(s)) != NULL;)
        tg_approvals_finish(k, 0, "client", "cancelled");
}

int tg_approvals_cancel(struct tg_session *s, const char *want)
{
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->parked && k->id_key && strcmp(k->id_key, want) == 0) {
            tg_approvals_finish(k, 0, "client", "cancelled");
            return 1;
        }
    }
    return 0;
}

/* The local queue: srv->approvals, answered at once. */
void tg_approvals_local_list(struct tg_server *srv, tg_approval_list_cb done, void *ud)
{
    size_t n = 0, i = 0;
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next)
        n++;
    struct tg_approval_item *items = n ? tg_xcalloc(n, sizeof(*items)) : NULL;
    /* Shown with redaction whatever audit.args says: the page always shows the arguments. */
    struct tg_audit_conf ac = srv->conf->audit;
    ac.values = 1;
    uint64_t now = now_ms(srv);
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next, i++) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        struct tg_approval_item *it = &items[i];
        it->id = k->approval_id;
        it->grant = k->grant;
        it->session = k->sess ? k->sess->id_str : ""; /* a retry record has none: its client has its answer */
        it->upstream = up_name(k);
        it->tool = k->tool;
        cJSON *msg = cJSON_ParseWithLength(k->held.base, k->held.len);
        const cJSON *args = tg_json_get(tg_json_get(msg, "params"),
                                                             "arguments");
        it->args = args ? tg_audit_args_values(&ac, args) : NULL;
        cJSON_Delete(msg);
        it->parked_at_ms = k->parked_at_wall;
        uint64_t parked_loop = k->approval_deadline - (uint64_t)k->dec->approval_timeout_ms;
        it->waited_ms = now > parked_loop ? now - parked_loop : 0;
        it->expires_in_ms = k->approval_deadline > now ? k->approval_deadline - now : 0;
        it->args_sha256 = k->args_sha256;
    }
    done(ud, items, n);
    for (i = 0; i < n; i++)
        free((char *)items[i].args);
    free(items);
}

void tg_approvals_local_decide(struct tg_server *srv, struct tg_slice id, int approve, const char *by,
                               const char *reason, tg_approval_decide_cb done, void *ud)
{
    struct tg_call *k = tg_approvals_find(srv, id);
    if (k == NULL) {
        done(ud, TG_APPROVAL_UNKNOWN);
        return;
    }
    if (approve)
        finish(k, 1, by, NULL, NULL);
    else
        finish(k, 0, by, NULL, reason);
    done(ud, 0);
}
