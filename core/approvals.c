#include "core/approvals.h"

#include <stdio.h>
#include <string.h>

#include "core/call.h"
#include "core/log.h"
#include "policy/policy.h"
#include "upstream/pool.h"

void tg_approvals_park(struct tg_call *k)
{
    struct tg_server *srv = k->srv;
    uint8_t rnd[16];
    tg_random(rnd, sizeof(rnd));
    tg_hex_encode(rnd, sizeof(rnd), k->approval_id);
    k->parked = 1;
    k->approval_deadline = now_ms(srv) + (uint64_t)k->dec->approval_timeout_ms;
    k->parked_at_wall = (uint64_t)wall_ms();
    tg_list_insert_tail(&srv->approvals, &k->alink);
    srv->napprovals++;
    tg_log(TG_LOG_INFO, "call parked for approval", "approval_id=%s grant=%s session=%s upstream=%s tool=%s",
           k->approval_id, k->grant, k->sess->id_str, up_name(k), k->tool);
    tg_call_audit(k, "approve", -1, NULL, NULL);
}

void tg_approvals_finish(struct tg_call *k, int approve, const char *by, const char *why)
{
    struct tg_server *srv = k->srv;
    tg_list_unlink(&k->alink);
    srv->napprovals--;
    k->parked = 0;
    if (approve) {
        srv->metrics.approvals_approved++;
        tg_call_audit(k, "approved", -1, NULL, by);
        char esc[200]; /* the approver's name comes from a header: escaped, it cannot forge log fields */
        tg_log(TG_LOG_INFO, "approval granted", "approval_id=%s by=%s", k->approval_id,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by)));
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
    char esc[200];
    tg_log(TG_LOG_INFO, why ? "approval timed out" : "approval denied", "approval_id=%s by=%s", k->approval_id,
           tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by ? by : "-")));
    if (k->sink != NULL && k->sink->ops->listening(k->sink)) {
        struct tg_decision d = *k->dec;
        if (cancelled)
            snprintf(d.message, sizeof(d.message),
                     "%s was cancelled by the client before approval; the call was not made", k->tool);
        else if (why)
            snprintf(d.message, sizeof(d.message), "%s was not approved in time; the call was not made", k->tool);
        else
            snprintf(d.message, sizeof(d.message), "%s was refused by a human approver; the call was not made",
                     k->tool);
        d.verdict = TG_VERDICT_DENY;
        tg_call_answer_decision(k, &d, k->approval_id);
    }
    tg_call_close(k);
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

void tg_approvals_list(struct tg_server *srv, struct tg_buf *b)
{
    tg_buf_appends(b, "{\"approvals\":[");
    uint64_t now = now_ms(srv);
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        if (l != srv->approvals.next)
            tg_buf_append(b, ",", 1);
        tg_buf_appendf(b, "{\"id\":\"%s\",\"grant\":", k->approval_id);
        tg_json_write_string(b, k->grant, strlen(k->grant));
        tg_buf_appendf(b, ",\"session\":\"%s\",\"upstream\":", k->sess->id_str);
        tg_json_write_string(b, up_name(k), strlen(up_name(k)));
        tg_buf_appends(b, ",\"tool\":");
        tg_json_write_string(b, k->tool, strlen(k->tool));
        tg_buf_appendf(b, ",\"args_sha256\":\"%s\"", k->args_sha256);
        if (k->args_json) {
            tg_buf_appends(b, ",\"args\":");
            tg_buf_appends(b, k->args_json);
        }
        tg_buf_appendf(b, ",\"parked_at_ms\":%llu,\"expires_in_ms\":%llu}", (unsigned long long)k->parked_at_wall,
                       (unsigned long long)(k->approval_deadline > now ? k->approval_deadline - now : 0));
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
}

void tg_approvals_abort(struct tg_server *srv)
{
    while (!tg_list_empty(&srv->approvals)) {
        struct tg_call *k = tg_container_of(srv->approvals.next, struct tg_call, alink);
        tg_approvals_finish(k, 0, "shutdown", "timeout");
    }
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
