/* Scope step-up (core/gate/scopes.h). */
#include "core/gate/scopes.h"

#include <stdio.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/call/audit.h"
#include "core/call/exchange.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "core/wire/msg.h"
#include "policy/policy.h"
#include "policy/scopes.h"

/* What m needs that have lacks, into need: 1 if it lacks some. kind: what m names, for data. */
static int lacks(const struct tg_msg *m, const cJSON *params, const struct tg_policy *pol, const char *what,
                 const char *have, char *need, size_t n, const char **kind)
{
    switch (m->mid) {
    case TG_M_TOOLS_CALL: *kind = "tool"; return tg_policy_scopes_tool(pol, what, have, need, n);
    case TG_M_RESOURCES_READ:
    case TG_M_RESOURCES_SUBSCRIBE: *kind = "uri"; return tg_policy_scopes_resource(pol, what, have, need, n);
    case TG_M_PROMPTS_GET: *kind = "prompt"; return tg_policy_scopes_prompt(pol, what, have, need, n);
    default: break;
    }
    if (strcmp(m->method, "completion/complete") != 0)
        return 0;
    const cJSON *type = tg_json_get(tg_json_get(params, "ref"), "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "ref/prompt") == 0) {
        *kind = "prompt";
        return tg_policy_scopes_prompt(pol, what, have, need, n);
    }
    *kind = "uri";
    return tg_policy_scopes_resource(pol, what, have, need, n);
}

int tg_gate_scopes_refused(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const cJSON *params,
                           const struct tg_policy *pol, const char *what)
{
    char need[TG_SCOPES_MAX];
    const char *kind = "tool";
    if (what == NULL || !lacks(m, params, pol, what, x->scopes ? x->scopes : "", need, sizeof(need), &kind))
        return 0;
    struct tg_server *srv = x->srv;
    srv->metrics.decisions[TG_VERDICT_DENY]++;
    char esc[96], esc2[96];
    tg_log(TG_LOG_INFO, "insufficient scope", "grant=%s session=%s upstream=%s method=%s %s=%s needs=%s",
           x->grant->name, x->sess ? x->sess->id_str : "-", x->uc->name, m->method, kind,
           tg_log_esc(esc, sizeof(esc), tg_slice_cstr(what)), tg_log_esc(esc2, sizeof(esc2), tg_slice_cstr(need)));
    struct tg_audit_record ar = {0};
    ar.grant = x->grant->name;
    ar.session = x->sess ? x->sess->id_str : "";
    ar.upstream = x->uc->name;
    ar.method = m->method;
    ar.tool = what;
    ar.decision = "deny";
    ar.rule = "insufficient_scope";
    ar.correlation_id = NULL; /* a JSON-RPC error, no CallToolResult to carry a toolFailure */
    ar.latency_ms = -1;
    tg_audit_log(srv->audit, &srv->conf->audit, &ar);

    /* Scope-tokens hold no '"' or '\', and the metadata URL is the conf's or a checked Host: both
     * go into the quoted-strings as they are. */
    struct tg_buf wa, hdr, data, body;
    tg_buf_init(&wa);
    tg_buf_init(&hdr);
    tg_buf_init(&data);
    tg_buf_init(&body);
    tg_buf_appendf(&wa, "Bearer error=\"insufficient_scope\", scope=\"%s\"", need);
    if (x->resource_metadata != NULL)
        tg_buf_appendf(&wa, ", resource_metadata=\"%s\"", x->resource_metadata);
    tg_buf_appends(&hdr, "WWW-Authenticate: ");
    tg_buf_append(&hdr, wa.base, wa.len);
    tg_buf_append(&hdr, "\r\n", 3); /* with its NUL: extra is a C string */
    tg_buf_appends(&data, "{\"error\":\"insufficient_scope\",\"scope\":");
    tg_json_write_string(&data, need, strlen(need));
    tg_buf_appends(&data, ",\"resource_metadata\":");
    if (x->resource_metadata != NULL)
        tg_json_write_string(&data, x->resource_metadata, strlen(x->resource_metadata));
    else
        tg_buf_appends(&data, "null");
    tg_buf_appends(&data, ",\"www_authenticate\":");
    tg_json_write_string(&data, wa.base, wa.len);
    tg_buf_appendf(&data, ",\"%s\":", kind);
    tg_json_write_string(&data, what, strlen(what));
    tg_buf_append(&data, "}", 2);
    char msg[TG_SCOPES_MAX + 200];
    snprintf(msg, sizeof(msg), "Insufficient scope: this call needs a token with the scopes \"%s\"", need);
    tg_rpc_error(&body, m->id_raw, m->id_len, TG_RPC_INSUFFICIENT_SCOPE, msg, data.base);
    sk->ops->answer(sk, NULL, 403, hdr.base, body.base, body.len);
    sk->ops->release(sk, NULL);
    tg_buf_dispose(&body);
    tg_buf_dispose(&data);
    tg_buf_dispose(&hdr);
    tg_buf_dispose(&wa);
    return 1;
}
