#include "core/router_int.h"


void approval_finish(struct tg_call *k, int approve, const char *by, const char *why)
{
    struct tg_server *srv = k->srv;
    tg_list_unlink(&k->alink);
    srv->napprovals--;
    k->parked = 0;
    if (approve) {
        srv->metrics.approvals_approved++;
        audit_call(k, "approved", -1, NULL, by);
        char esc[200]; /* the approver's name comes from a header: escaped, it cannot forge log fields */
        tg_log(TG_LOG_INFO, "approval granted", "approval_id=%s by=%s", k->approval_id,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by)));
        struct tg_buf body = k->held;
        tg_buf_init(&k->held);
        call_send(k, "POST", body.base, body.len, 0, (uint64_t)tg_upstream_conf(k->uprt)->call_timeout_ms);
        tg_buf_dispose(&body);
        return;
    }
    int cancelled = why != NULL && strcmp(why, "cancelled") == 0;
    if (why == NULL || cancelled)
        srv->metrics.approvals_rejected++;
    else
        srv->metrics.approvals_expired++;
    audit_call(k, cancelled ? "cancelled" : why ? "expired" : "rejected", -1, NULL, by);
    char esc[200];
    tg_log(TG_LOG_INFO, why ? "approval timed out" : "approval denied", "approval_id=%s by=%s", k->approval_id,
           tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by ? by : "-")));
    if (k->conn || k->batch) {
        struct tg_decision d = *k->dec;
        if (cancelled)
            snprintf(d.message, sizeof(d.message), "%s was cancelled by the client before approval; the call was not made", k->tool);
        else if (why)
            snprintf(d.message, sizeof(d.message), "%s was not approved in time; the call was not made", k->tool);
        else
            snprintf(d.message, sizeof(d.message), "%s was refused by a human approver; the call was not made",
                     k->tool);
        d.verdict = TG_VERDICT_DENY;
        respond_decision(k->conn, k->batch, k->client_id, k->client_id_len, k->tool, &d, k->approval_id);
    }
    call_free(k);
}
