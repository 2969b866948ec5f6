#include "core/call/approvals.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/approvals_modes.h"
#include "core/call/audit.h"
#include "core/call/call.h"
#include "core/call/denial.h"
#include "core/call/webhook.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/base/sha256.h"
#include "core/wire/msg.h"
#include "policy/auth.h"
#include "policy/pins.h"
#include "policy/policy.h"
#include "upstream/pool/pool.h"

/* An event for the webhook (core/call/webhook.h) about k. */
static void hook(struct tg_call *k, const char *event, const char *by, const char *reason)
{
    struct tg_webhook_event e = {event,   k->approval_id, k->tool,        k->grant, k->subject ? k->subject : k->grant,
                                 up_name(k), k->args_sha256, by, reason};
    tg_webhook_post(k->srv, &e);
}

/* What k holds while parked, besides its struct: the message, and every copy of its arguments
 * (the audit's, a 2025 session's resend, a 2026 call's tree, counted at its text's size). A
 * cluster's listing adds its own when it is written (cluster/approvals.c). */
static size_t held_bytes(const struct tg_call *k)
{
    size_t n = sizeof(*k) + k->held.len;
    if (k->args_json != NULL)
        n += strlen(k->args_json);
    if (k->resend != NULL)
        n += strlen(k->resend);
    if (k->mrtr != NULL && k->mrtr->args != NULL)
        n += k->held.len;
    if (k->cred != NULL)
        n += sizeof(*k->cred);
    return n;
}

static size_t parked_of_grant(struct tg_server *srv, const char *grant)
{
    size_t n = 0;
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next)
        n += strcmp(tg_container_of(l, struct tg_call, alink)->grant, grant) == 0;
    return n;
}

int tg_approvals_room(struct tg_call *k, int in_batch, char *msg, size_t n, const char **reason)
{
    struct tg_server *srv = k->srv;
    const struct tg_limits *lim = &srv->conf->limits;
    int why = -1;
    *reason = "approval queue full";
    if (in_batch) {
        /* A batch cannot wait for a human; a single message on a channel can. */
        why = TG_APPROVAL_REFUSED_BATCH;
        *reason = "a batch cannot wait for approval";
        snprintf(msg, n, "%s needs a human's approval, which a batch cannot wait for; send it on its own", k->tool);
    } else if (srv->napprovals >= (size_t)lim->approvals_max) {
        why = TG_APPROVAL_REFUSED_FULL;
        snprintf(msg, n, "%s needs approval, but the approval queue is full (limits.approvals_max); try later", k->tool);
    } else if (srv->approvals_bytes + held_bytes(k) > (size_t)lim->approvals_bytes) {
        why = TG_APPROVAL_REFUSED_BYTES;
        snprintf(msg, n, "%s needs approval, but the approval queue is full (limits.approvals_bytes); try later",
                 k->tool);
    } else if (parked_of_grant(srv, k->grant) >= (size_t)lim->approvals_per_grant) {
        why = TG_APPROVAL_REFUSED_GRANT;
        *reason = "approval queue full for this grant";
        snprintf(msg, n,
                 "%s needs approval, but this grant already has %d calls waiting for approval "
                 "(limits.approvals_per_grant); try later",
                 k->tool, lim->approvals_per_grant);
    }
    if (why >= 0)
        srv->metrics.approvals_refused[why]++;
    return why;
}

/* One field of the digest's input: its length in decimal, a colon, its bytes, a newline; so no
 * field's bytes can pass for another's. */
static void digest_field(struct tg_buf *in, const char *p, size_t n)
{
    tg_buf_appendf(in, "%zu:", n);
    tg_buf_append(in, p, n);
    tg_buf_append(in, "\n", 1);
}

/* What an approver approves, bound: the tool, the arguments' text as they will be sent, the
 * grant, the subject, the upstream and the configuration that parked it. */
static void bind_digest(struct tg_call *k)
{
    struct tg_server *srv = k->srv;
    k->approval_policy = srv->conf->serial;
    if (tg_audit_args_span(k->held.base, k->held.len, &k->approval_args_off, &k->approval_args_len) != 0)
        k->approval_args_off = k->approval_args_len = 0;
    const char *up = up_name(k) ? up_name(k) : "";
    const char *sub = k->subject ? k->subject : k->grant;
    char pol[24];
    snprintf(pol, sizeof(pol), "%llu", (unsigned long long)k->approval_policy);
    struct tg_buf in;
    tg_buf_init(&in);
    tg_buf_appends(&in, "tollgate approval 1\n");
    digest_field(&in, k->tool ? k->tool : "", k->tool ? strlen(k->tool) : 0);
    digest_field(&in, k->held.base + k->approval_args_off, k->approval_args_len);
    digest_field(&in, k->grant, strlen(k->grant));
    digest_field(&in, sub, strlen(sub));
    digest_field(&in, up, strlen(up));
    digest_field(&in, pol, strlen(pol));
    uint8_t h[32];
    tg_sha256(in.base, in.len, h);
    tg_buf_dispose(&in);
    tg_hex_encode(h, 32, k->approval_digest);
}

void tg_approvals_park(struct tg_call *k)
{
    struct tg_server *srv = k->srv;
    if (k->approval_mode == TG_APPROVAL_HOLD)
        tg_approvals_hold_prepare(k); /* its timeout capped; progress if its client can take it */
    if (!k->approval_id[0]) { /* a retry record shared already has its id */
        uint8_t rnd[16];
        tg_random(rnd, sizeof(rnd));
        tg_hex_encode(rnd, sizeof(rnd), k->approval_id);
    }
    bind_digest(k);
    k->parked = 1;
    k->approval_deadline = now_ms(srv) + (uint64_t)k->dec->approval_timeout_ms;
    k->parked_at_wall = (uint64_t)wall_ms();
    tg_list_insert_tail(&srv->approvals, &k->alink);
    srv->napprovals++;
    /* The credential it came with: asked again at approval whether it still holds. */
    k->cred = tg_xmalloc(sizeof(*k->cred));
    if (k->sink == NULL || k->sink->ops->cred == NULL || !k->sink->ops->cred(k->sink, k->cred)) {
        free(k->cred);
        k->cred = NULL;
    }
    char gesc[160], tesc[300]; /* the tool's name is the client's: escaped, as every name */
    tg_log(TG_LOG_INFO, "call parked for approval", "approval_id=%s grant=%s session=%s upstream=%s tool=%s",
           k->approval_id, tg_log_esc(gesc, sizeof(gesc), tg_slice_cstr(k->grant)), k->sess->id_str, up_name(k),
           tg_log_esc(tesc, sizeof(tesc), tg_slice_cstr(k->tool)));
    tg_call_audit(k, "approve", -1, NULL, NULL);
    k->parked_bytes = held_bytes(k);
    srv->store.ops->approval_park(srv->store.ud, k); /* a cluster adds its listing's bytes */
    srv->approvals_bytes += k->parked_bytes;
    hook(k, "parked", NULL, NULL);
    tg_approvals_answer_now(k); /* retry and task: the client has its answer at once */
}

/* k leaves the queue: uncounted (its mirror goes with approval_gone, after what a human decided
 * is noted on k for it). */
static void leave(struct tg_call *k)
{
    struct tg_server *srv = k->srv;
    tg_list_unlink(&k->alink);
    srv->napprovals--;
    srv->approvals_bytes -= k->parked_bytes < srv->approvals_bytes ? k->parked_bytes : srv->approvals_bytes;
    k->parked_bytes = 0;
    k->parked = 0;
}

void tg_approvals_reconf(struct tg_server *srv)
{
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        size_t before = k->parked_bytes;
        k->parked_bytes = held_bytes(k);
        srv->store.ops->approval_park(srv->store.ud, k); /* the listing is written again, its state new */
        srv->approvals_bytes = srv->approvals_bytes - before + k->parked_bytes;
    }
}

/* Whether k may still run under srv->conf (see tg_approvals_stale). The policy's verdict needs the
 * arguments parsed again: a listing (fresh 0, the page asks every second) reuses the one made
 * under the same configuration; an approval (fresh 1) decides again. */
static const char *judge(struct tg_call *k, char *why, size_t n, int fresh)
{
    const struct tg_conf *c = k->srv->conf;
    const struct tg_grant_conf *g = tg_conf_find_grant(c, k->grant);
    const char *up = up_name(k);
    int u = -1;
    if (g == NULL) {
        snprintf(why, n, "grant \"%s\" was removed from the configuration", k->grant);
        return why;
    }
    if (k->cred != NULL && k->cred->kind == TG_CRED_JWT && k->cred->end_s <= (int64_t)(wall_ms() / 1000)) {
        snprintf(why, n, "the token that made this call has expired");
        return why;
    }
    if (k->cred != NULL && !tg_auth_cred_holds(c, k->cred)) {
        snprintf(why, n,
                 "the credential that made this call is no longer accepted for grant \"%s\" (its token was "
                 "rotated, or its issuer or certificate removed)",
                 k->grant);
        return why;
    }
    if (up == NULL || tg_conf_find_upstream(c, tg_slice_cstr(up), &u) == NULL) {
        snprintf(why, n, "upstream \"%s\" was removed from the configuration", up ? up : "-");
        return why;
    }
    if (!fresh && k->judged_serial == c->serial) {
        if (k->judged_why == NULL)
            return NULL;
        snprintf(why, n, "%s", k->judged_why);
        return why;
    }
    struct tg_policy *p = tg_conf_policy_for(c, g, u);
    cJSON *msg = k->held.len > 0 ? cJSON_ParseWithLength(k->held.base, k->held.len) : NULL;
    const cJSON *args = tg_json_get(tg_json_get(msg, "params"), "arguments");
    struct tg_decision *d = tg_call_decision_new();
    struct tg_caller who = {k->grant, tg_call_counter_session(k->era, k->grant, k->sess), up, k->subject, k->issuer};
    /* Judged again without reserving: its reservations were taken when it was parked. */
    tg_policy_decide_continuation(p, k->srv->counters, &who, k->tool, args, wall_ms(), d);
    const char *out = NULL;
    if (d->verdict == TG_VERDICT_DENY) {
        snprintf(why, n, "tool \"%s\" is now denied%s%s: %s", k->tool, d->rule[0] ? " by " : "", d->rule,
                 d->message);
        out = why;
    } else if (!tg_policy_tool_visible(p, k->tool)) {
        snprintf(why, n, "tool \"%s\" is now hidden by the policy", k->tool);
        out = why;
    } else if (c->upstreams[u].pins != NULL && /* its definition changed while it waited */
               !tg_pins_admit_call(k->srv->pins_seen, c->upstreams[u].pins, up, p, k->tool, d->message,
                                   sizeof(d->message))) {
        snprintf(why, n, "tool \"%s\" is now refused by its pin: %s", k->tool, d->message);
        out = why;
    }
    tg_call_decision_free(d);
    cJSON_Delete(msg);
    tg_xfree(k->judged_why);
    k->judged_why = out != NULL ? tg_xstrdup(out) : NULL;
    k->judged_serial = c->serial;
    return out;
}

const char *tg_approvals_stale(struct tg_call *k, char *why, size_t n) { return judge(k, why, n, 0); }

/* The answer to a call that was not approved: -32003 with {tool, approval_id, reason}, reason
 * being the approver's own words when they gave some, else what happened. */
void tg_approvals_refuse(struct tg_call *k, const char *message, const char *reason, int again)
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
    struct tg_denial dn = {again ? TG_REMEDIATION_AVAILABLE : TG_REMEDIATION_UNAVAILABLE, NULL, NULL,
                           again ? "user_action_required" : "permission_denied", NULL, data.base};
    if (tg_call_answer_denial(k, message, &dn) == 0) {
        tg_buf_dispose(&data);
        return;
    }
    tg_rpc_error(&e, k->client_id, k->client_id_len, TG_RPC_APPROVAL, message, data.base);
    k->sink->ops->answer(k->sink, k, 200, NULL, e.base, e.len);
    tg_buf_dispose(&e);
    tg_buf_dispose(&data);
}

/* A human decided k: kept for the page (srv->decided). */
static void remember(struct tg_call *k, const char *decision, const char *by)
{
    struct tg_server *srv = k->srv;
    struct tg_approval_done *d = &srv->decided[srv->ndecided++ % TG_APPROVALS_DECIDED];
    memset(d, 0, sizeof(*d));
    snprintf(d->id, sizeof(d->id), "%s", k->approval_id);
    snprintf(d->decision, sizeof(d->decision), "%s", decision);
    snprintf(d->digest, sizeof(d->digest), "%s", k->approval_digest);
    snprintf(d->by, sizeof(d->by), "%s", by ? by : "");
    snprintf(d->tool, sizeof(d->tool), "%s", k->tool ? k->tool : "");
    snprintf(d->grant, sizeof(d->grant), "%s", k->grant);
    snprintf(d->subject, sizeof(d->subject), "%s", k->subject ? k->subject : k->grant);
    snprintf(d->upstream, sizeof(d->upstream), "%s", up_name(k) ? up_name(k) : "");
    d->policy = k->approval_policy;
    d->parked_at_ms = k->parked_at_wall;
    d->decided_at_ms = (uint64_t)wall_ms();
}

/* why: NULL a human refused, "cancelled" its client went, "session" its session ended,
 * "timeout" its deadline passed (or the gateway shut down). Returns 0, or TG_APPROVAL_NOT_ALLOWED
 * when an approval found that the configuration in force no longer lets it run (stale: why not). */
static int finish(struct tg_call *k, int approve, const char *by, const char *why, const char *reason, char *stale,
                  size_t stale_n)
{
    struct tg_server *srv = k->srv;
    const char *no_longer = approve ? judge(k, stale, stale_n, 1) : NULL;
    leave(k);
    if (approve || why == NULL) { /* a human's decision, not a deadline's or a client's */
        k->approval_decision = !approve ? "denied" : no_longer ? "refused" : "approved";
        k->approval_by = by ? by : "";
        remember(k, k->approval_decision, by);
    }
    srv->store.ops->approval_gone(srv->store.ud, k);
    k->approval_decision = k->approval_by = NULL;
    if (approve && no_longer == NULL) {
        srv->metrics.approvals_approved++;
        tg_call_audit(k, "approved", -1, NULL, by);
        char esc[200]; /* the approver's name comes from a header: escaped, it cannot forge log fields */
        tg_log(TG_LOG_INFO, "approval granted", "approval_id=%s by=%s", k->approval_id,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by)));
        hook(k, "approved", by, NULL);
        if (k->approval_mode == TG_APPROVAL_RETRY && k->sess == NULL) {
            tg_approvals_record_decided(k, 1, by, NULL); /* it runs when its client calls again */
            return 0;
        }
        struct tg_buf body = k->held;
        tg_buf_init(&k->held);
        tg_call_send(k, body.base, body.len, (uint64_t)tg_upstream_conf(k->uprt)->call_timeout_ms);
        tg_buf_dispose(&body);
        return 0;
    }
    if (approve) {
        /* Approved under a configuration that no longer allows it: nothing is forwarded. */
        srv->metrics.approvals_refused[TG_APPROVAL_REFUSED_STALE]++;
        tg_call_audit(k, "refused", -1, NULL, by);
        char esc[200], resc[700];
        tg_log(TG_LOG_INFO, "approved call no longer allowed", "approval_id=%s by=%s why=%s", k->approval_id,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by ? by : "-")),
               tg_log_esc(resc, sizeof(resc), tg_slice_cstr(no_longer)));
        hook(k, "refused", by, no_longer);
        if (k->sink != NULL && k->sink->ops->listening(k->sink)) {
            char message[sizeof(k->dec->message) + 400];
            snprintf(message, sizeof(message),
                     "%s was approved, but the configuration in force no longer allows it: %s; the call was not made",
                     k->tool, no_longer);
            tg_approvals_refuse(k, message, no_longer, 0);
        }
        tg_call_close(k);
        return TG_APPROVAL_NOT_ALLOWED;
    }
    int cancelled = why != NULL && (strcmp(why, "cancelled") == 0 || strcmp(why, "session") == 0);
    if (why == NULL || cancelled)
        srv->metrics.approvals_rejected++;
    else
        srv->metrics.approvals_expired++;
    tg_call_audit(k, cancelled ? "cancelled" : why ? "expired" : "rejected", -1, NULL, by);
    char esc[200], resc[300];
    tg_log(TG_LOG_INFO, why ? "approval timed out" : "approval denied", "approval_id=%s by=%s reason=%s",
           k->approval_id, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by ? by : "-")),
           tg_log_esc(resc, sizeof(resc), tg_slice_cstr(reason && reason[0] ? reason : "-")));
    hook(k, cancelled ? "withdrawn" : why ? "expired" : "denied", by, reason);
    if (why == NULL && k->approval_mode == TG_APPROVAL_RETRY && k->sess == NULL) {
        tg_approvals_record_decided(k, 0, by, reason); /* its client hears it when it calls again */
        return 0;
    }
    if (k->sink != NULL && k->sink->ops->listening(k->sink)) {
        char message[sizeof(k->dec->message)];
        if (cancelled && strcmp(why, "session") == 0)
            snprintf(message, sizeof(message), "%s was withdrawn: its session ended before approval; the call was not made",
                     k->tool);
        else if (cancelled)
            snprintf(message, sizeof(message),
                     "%s was cancelled by the client before approval; the call was not made", k->tool);
        else if (why)
            snprintf(message, sizeof(message), "%s was not approved in time; the call was not made", k->tool);
        else
            snprintf(message, sizeof(message), "%s was refused by a human approver; the call was not made",
                     k->tool);
        tg_approvals_refuse(k, message, reason && reason[0] ? reason : message, why != NULL);
    }
    tg_call_close(k);
    return 0;
}

void tg_approvals_finish(struct tg_call *k, int approve, const char *by, const char *why)
{
    char stale[600];
    finish(k, approve, by, why, NULL, stale, sizeof(stale));
}

void tg_approvals_deny(struct tg_call *k, const char *by, const char *reason)
{
    finish(k, 0, by, NULL, reason, NULL, 0);
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

static void write_item(struct tg_buf *b, const struct tg_approval_item *it, int args)
{
    static const char *const names[] = {"id", "grant", "subject", "session", "upstream", "tool", "args_sha256",
                                        "digest"};
    const char *vals[] = {it->id, it->grant, it->subject, it->session, it->upstream, it->tool, it->args_sha256,
                          it->digest};
    tg_buf_appends(b, "{");
    for (int f = 0; f < 8; f++) {
        tg_buf_appendf(b, "%s\"%s\":", f ? "," : "", names[f]);
        tg_json_write_string(b, vals[f] ? vals[f] : "", vals[f] ? strlen(vals[f]) : 0);
    }
    if (args && it->args_text) {
        /* Written as JSON values, never spliced: the text as a string, and the arguments parsed
         * strictly from it and written again (numbers keep their text); null if it is not JSON. */
        tg_buf_appends(b, ",\"args_text\":");
        tg_json_write_string(b, it->args_text, strlen(it->args_text));
        struct tg_json_doc doc = {0};
        const char *err;
        size_t eoff;
        tg_buf_appends(b, ",\"args\":");
        if (tg_json_parse(it->args_text, strlen(it->args_text), 1000, 1, &doc, &err, &eoff) == 0)
            tg_json_write(b, doc.root);
        else
            tg_buf_appends(b, "null");
        cJSON_Delete(doc.root);
    }
    tg_buf_appendf(b, ",\"policy\":%llu,\"parked_at_ms\":%llu", (unsigned long long)it->policy,
                   (unsigned long long)it->parked_at_ms);
    if (it->decision != NULL) {
        tg_buf_appends(b, ",\"decision\":");
        tg_json_write_string(b, it->decision, strlen(it->decision));
        tg_buf_appends(b, ",\"by\":");
        tg_json_write_string(b, it->by ? it->by : "", it->by ? strlen(it->by) : 0);
        tg_buf_appendf(b, ",\"decided_at_ms\":%llu", (unsigned long long)it->decided_at_ms);
    } else {
        tg_buf_appendf(b, ",\"waited_ms\":%llu,\"expires_in_ms\":%llu", (unsigned long long)it->waited_ms,
                       (unsigned long long)it->expires_in_ms);
    }
    tg_buf_appends(b, ",\"instance\":");
    if (it->instance)
        tg_json_write_string(b, it->instance, strlen(it->instance));
    else
        tg_buf_appends(b, "null");
    if (it->decision == NULL) {
        tg_buf_appends(b, ",\"blocked\":");
        if (it->blocked)
            tg_json_write_string(b, it->blocked, strlen(it->blocked));
        else
            tg_buf_appends(b, "null");
    }
    tg_buf_appends(b, "}");
}

void tg_approvals_write(struct tg_buf *b, const struct tg_approval_item *items, size_t n, int args)
{
    for (int decided = 0; decided < 2; decided++) {
        tg_buf_appends(b, decided ? "],\"decided\":[" : "{\"approvals\":[");
        int first = 1;
        for (size_t i = 0; i < n; i++) {
            if ((items[i].decision != NULL) != decided)
                continue;
            if (!first)
                tg_buf_appends(b, ",");
            first = 0;
            write_item(b, &items[i], args);
        }
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

void tg_approvals_withdraw(struct tg_session *s, const char *why)
{
    for (struct tg_call *k; (k = first_parked(s)) != NULL;)
        tg_approvals_finish(k, 0, strcmp(why, "session") == 0 ? "session" : "client", why);
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

char *tg_approvals_item_of(struct tg_call *k, struct tg_approval_item *it)
{
    struct tg_server *srv = k->srv;
    /* Shown with redaction whatever audit.args says: the page always shows the arguments. */
    char *text = k->approval_args_len
                     ? tg_audit_args_text(&srv->conf->audit, k->held.base + k->approval_args_off, k->approval_args_len)
                     : NULL;
    memset(it, 0, sizeof(*it));
    it->id = k->approval_id;
    it->grant = k->grant;
    it->subject = k->subject ? k->subject : k->grant;
    it->session = k->sess ? k->sess->id_str : "";
    it->upstream = up_name(k) ? up_name(k) : "";
    it->tool = k->tool ? k->tool : "";
    it->args_text = text;
    it->args_sha256 = k->args_sha256;
    it->digest = k->approval_digest;
    it->policy = k->approval_policy;
    it->parked_at_ms = k->parked_at_wall;
    return text;
}

/* The local queue: srv->approvals, answered at once, then the calls decided in the last ten
 * minutes. */
#define DECIDED_SHOWN_MS (10 * 60 * 1000)

void tg_approvals_local_list(struct tg_server *srv, tg_approval_list_cb done, void *ud)
{
    size_t n = 0, i = 0;
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next)
        n++;
    struct tg_approval_item *items = tg_xcalloc(n + TG_APPROVALS_DECIDED, sizeof(*items));
    char **texts = tg_xcalloc(n + 1, sizeof(*texts));
    char **blocked = tg_xcalloc(n + 1, sizeof(*blocked));
    uint64_t now = now_ms(srv), wall = (uint64_t)wall_ms();
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next, i++) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        struct tg_approval_item *it = &items[i];
        texts[i] = tg_approvals_item_of(k, it);
        char why[600];
        if (tg_approvals_stale(k, why, sizeof(why)) != NULL) {
            size_t bn = strlen(why) + 32;
            blocked[i] = tg_xmalloc(bn);
            snprintf(blocked[i], bn, "no longer allowed: %s", why);
            it->blocked = blocked[i];
        }
        uint64_t parked_loop = k->approval_deadline - (uint64_t)k->dec->approval_timeout_ms;
        it->waited_ms = now > parked_loop ? now - parked_loop : 0;
        it->expires_in_ms = k->approval_deadline > now ? k->approval_deadline - now : 0;
    }
    unsigned have = srv->ndecided < TG_APPROVALS_DECIDED ? srv->ndecided : TG_APPROVALS_DECIDED;
    for (unsigned j = 1; j <= have; j++) { /* newest first */
        const struct tg_approval_done *d = &srv->decided[(srv->ndecided - j) % TG_APPROVALS_DECIDED];
        if (wall - d->decided_at_ms > DECIDED_SHOWN_MS)
            continue;
        struct tg_approval_item *it = &items[i++];
        it->id = d->id;
        it->grant = d->grant;
        it->subject = d->subject;
        it->session = "";
        it->upstream = d->upstream;
        it->tool = d->tool;
        it->digest = d->digest;
        it->policy = d->policy;
        it->parked_at_ms = d->parked_at_ms;
        it->decision = d->decision;
        it->by = d->by;
        it->decided_at_ms = d->decided_at_ms;
    }
    done(ud, items, i);
    for (size_t j = 0; j < n; j++) {
        free(texts[j]);
        free(blocked[j]);
    }
    free(texts);
    free(blocked);
    free(items);
}

void tg_approvals_local_decide(struct tg_server *srv, struct tg_slice id, int approve, const char *digest,
                               const char *by, const char *reason, tg_approval_decide_cb done, void *ud)
{
    struct tg_call *k = tg_approvals_find(srv, id);
    if (k == NULL) {
        done(ud, TG_APPROVAL_UNKNOWN, NULL);
        return;
    }
    if (approve && (digest == NULL || strlen(digest) != 64 ||
                    !tg_ct_equal((const uint8_t *)digest, (const uint8_t *)k->approval_digest, 64))) {
        /* Not what this call would send: whoever approves saw something else. It stays parked. */
        char esc[200];
        tg_log(TG_LOG_WARN, "approval refused: its digest is not the parked call's", "approval_id=%s by=%s",
               k->approval_id, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by ? by : "-")));
        done(ud, TG_APPROVAL_STALE, NULL);
        return;
    }
    char stale[600];
    int rc = approve ? finish(k, 1, by, NULL, NULL, stale, sizeof(stale)) : finish(k, 0, by, NULL, reason, NULL, 0);
    done(ud, rc, rc == TG_APPROVAL_NOT_ALLOWED ? stale : NULL);
}
