/* The policy's refusal of a call as its client reads it (core/call/call.h tg_call_answer_decision),
 * and as /metrics counts it. One place for every client transport and era: the gate answers a
 * deny or a limit through here whether the decision was local or waited for the shared store.
 *
 *   deny     -32001 {tool, rule, reason[, history]}
 *   brake    -32002 {tool, rule: "brake", retry_after_ms, reason}
 *   limited  -32002 {tool, counter, retry_after_ms}
 *   approval -32003 {tool, approval_id}
 *
 * With signals = "mcp-drafts" (the call's upstream, else the conf), a brake or a limited call is
 * answered in the shape of the MCP rate-limited error draft (SEP-3304): code -32023, the same
 * data plus retryAfterMs and, when the limit says, limit and remaining; and where the answer is a
 * plain HTTP response, status 429 with Retry-After (seconds, rounded up), RateLimit-Limit and
 * RateLimit-Remaining. A sink that cannot show a status (a stream already open, WebSocket, legacy
 * SSE) sends the JSON-RPC error alone: it ignores the status and the headers.
 *
 * With "mcp-drafts", a denied tools/call is answered instead as a CallToolResult with isError
 * true that carries the authorization denial envelope (SEP-2643) and the tool-failure
 * classification (SEP-3313) in its _meta (core/call/denial.c), tollgate's data beside them under
 * "tollgate/refusal". A tool tools/list does not show (hidden, denied outright, unnamed under a
 * default deny, refused by its pin) is "undisclosed": one text and code for all of them, no rule,
 * no reason, nothing that tells it from any other such name.
 *
 * history: the earlier call that made a history condition refuse this one, {tool|resource|prompt,
 * upstream, at}, as the decision wrote it (a JSON object). */
#include <stdio.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "core/base/label_counts.h"
#include "core/base/log.h"
#include "core/call/audit.h"
#include "core/call/call.h"
#include "core/call/denial.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "core/conf/conf.h"
#include "core/wire/msg.h"
#include "policy/policy.h"
#include "upstream/pool/pool.h"

static int is_brake(const struct tg_decision *d)
{
    return d->verdict == TG_VERDICT_LIMITED && strcmp(d->rule, "brake") == 0;
}

/* The code a draft names for a rate-limited call (SEP-3304), in MCP's reserved range. */
#define TG_RPC_RATE_LIMITED (-32023)

static int drafts(const struct tg_call *k)
{
    return k->uprt != NULL && tg_upstream_conf(k->uprt)->signals == TG_SIGNALS_MCP_DRAFTS;
}

int tg_call_answer_denial(struct tg_call *k, const char *text, struct tg_denial *d)
{
    if (!tg_denial_drafts(k))
        return -1;
    struct tg_sink *sk = k->sink;
    if (sk == NULL)
        return 0;
    if (k->denial_id[0] == '\0')
        tg_denial_new_id(k->denial_id);
    d->id = k->denial_id;
    struct tg_buf e;
    tg_buf_init(&e);
    tg_denial_result(&e, k->client_id, k->client_id_len, k->era == TG_ERA_2026, text, d);
    sk->ops->answer(sk, k, 200, NULL, e.base, e.len);
    tg_buf_dispose(&e);
    return 0;
}

/* Would tools/list show k's tool to k's caller? A pin's refusal hides the tool as well. */
static int tool_shown(const struct tg_call *k, const struct tg_decision *d)
{
    if (strcmp(d->rule, "pin") == 0 || strcmp(d->rule, "(hidden)") == 0 || strcmp(d->rule, "(default deny)") == 0)
        return 0;
    const struct tg_conf *c = k->srv->conf;
    const struct tg_grant_conf *g = tg_conf_find_grant(c, k->grant);
    if (g == NULL || k->sess == NULL || k->sess->upstream < 0 || (size_t)k->sess->upstream >= c->nupstreams)
        return 1;
    const struct tg_policy *p = tg_conf_policy_for(c, g, k->sess->upstream);
    return p == NULL || tg_policy_tool_visible(p, k->tool);
}

/* A policy's deny of a tools/call as the drafts have it: 0, or -1 (not answered here). */
static int drafts_deny(struct tg_call *k, const struct tg_decision *d, const char *own)
{
    if (!tg_denial_drafts(k))
        return -1;
    struct tg_denial dn = {0};
    if (!tool_shown(k, d)) {
        dn.remediation = TG_REMEDIATION_UNDISCLOSED;
        dn.code = "permission_denied";
        char text[300];
        snprintf(text, sizeof(text), "Tool \"%.200s\" is not available", k->tool);
        return tg_call_answer_denial(k, text, &dn);
    }
    dn.remediation = TG_REMEDIATION_UNAVAILABLE;
    dn.code = "policy_blocked";
    dn.own_json = own;
    return tg_call_answer_denial(k, d->message, &dn);
}

/* SEP-3304's data members beside ours, and the HTTP headers a 429 carries (extra: room for them). */
static void rate_limited(struct tg_buf *data, const struct tg_decision *d, char *extra, size_t room)
{
    uint64_t secs = (d->retry_after_ms + 999) / 1000;
    tg_buf_appendf(data, ",\"retryAfterMs\":%llu", (unsigned long long)d->retry_after_ms);
    int n = snprintf(extra, room, "Retry-After: %llu\r\n", (unsigned long long)secs);
    if (d->limit_known) {
        tg_buf_appendf(data, ",\"limit\":%.15g,\"remaining\":%.15g", d->limit, d->remaining);
        snprintf(extra + n, room - (size_t)n, "RateLimit-Limit: %.15g\r\nRateLimit-Remaining: %.15g\r\n", d->limit,
                 d->remaining);
    }
}

static void add_string(struct tg_buf *b, const char *key, const char *v)
{
    tg_buf_appends(b, key);
    tg_json_write_string(b, v, strlen(v));
}

void tg_call_answer_decision(struct tg_call *k, const struct tg_decision *d, const char *approval_id)
{
    struct tg_sink *sk = k->sink;
    if (sk == NULL)
        return;
    const char *tool = k->tool;
    struct tg_buf data;
    tg_buf_init(&data);
    int code = TG_RPC_DENIED, status = 200;
    char extra[160];
    extra[0] = '\0';
    tg_buf_appends(&data, "{\"tool\":");
    if (tool)
        tg_json_write_string(&data, tool, strlen(tool));
    else
        tg_buf_appends(&data, "null");
    if (is_brake(d)) {
        code = TG_RPC_LIMITED;
        add_string(&data, ",\"rule\":", d->rule);
        tg_buf_appendf(&data, ",\"retry_after_ms\":%llu", (unsigned long long)d->retry_after_ms);
        add_string(&data, ",\"reason\":", d->message);
    } else if (d->verdict == TG_VERDICT_LIMITED) {
        code = TG_RPC_LIMITED;
        add_string(&data, ",\"counter\":", d->counter);
        tg_buf_appendf(&data, ",\"retry_after_ms\":%llu", (unsigned long long)d->retry_after_ms);
    } else if (approval_id != NULL) {
        code = TG_RPC_APPROVAL;
        add_string(&data, ",\"approval_id\":", approval_id);
    } else {
        add_string(&data, ",\"rule\":", d->rule);
        add_string(&data, ",\"reason\":", d->message);
    }
    if (approval_id == NULL && d->history_json[0] != '\0') {
        /* Written by the decision from the history it read: an object of ours, not a peer's text. */
        tg_buf_appends(&data, ",\"history\":");
        tg_buf_appends(&data, d->history_json);
    }
    if (code == TG_RPC_LIMITED && drafts(k)) {
        code = TG_RPC_RATE_LIMITED;
        status = 429;
        rate_limited(&data, d, extra, sizeof(extra));
    }
    tg_buf_appends(&data, "}");
    tg_buf_append(&data, "", 1);
    if (code == TG_RPC_DENIED && approval_id == NULL && drafts_deny(k, d, data.base) == 0) {
        tg_buf_dispose(&data);
        return;
    }
    struct tg_buf e;
    tg_buf_init(&e);
    tg_rpc_error(&e, k->client_id, k->client_id_len, code, d->message, data.base);
    sk->ops->answer(sk, k, status, extra[0] ? extra : NULL, e.base, e.len);
    tg_buf_dispose(&e);
    tg_buf_dispose(&data);
}

void tg_call_count_refusal(struct tg_call *k, const struct tg_decision *d)
{
    struct tg_metrics *m = &k->srv->metrics;
    const char *up = up_name(k) != NULL ? up_name(k) : "";
    if (is_brake(d))
        tg_label_counts_add(&m->brakes, up, k->tool != NULL ? k->tool : "", 1);
    else if (d->verdict == TG_VERDICT_DENY && d->by_history)
        tg_label_counts_add(&m->history_refusals, up, d->rule, 1);
}

void tg_call_tools_call_begin(struct tg_call *k, const cJSON *params, const cJSON *args)
{
    k->args_json = tg_audit_args_values(&k->srv->conf->audit, args);
    const char *echo = tg_denial_echoed(params);
    if (echo != NULL && drafts(k)) {
        /* SEP-2643's retry echo: noted for the operator, never read as authorization. */
        char esc[120], esc2[160];
        tg_log(TG_LOG_INFO, "call echoes an authorization context",
               "grant=%s upstream=%s tool=%s authorization_context_id=%s", k->grant, up_name(k) ? up_name(k) : "-",
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(k->tool)),
               tg_log_esc(esc2, sizeof(esc2), tg_slice_cstr(echo)));
    }
}
