/* A message of a method no standard or policy allows: counted, logged, audited as a deny, and
 * answered as a 2026-07-28 server answers a method it does not know, or -32001 for 2025. */
#include "core/gate/nonstandard.h"

#include <stdio.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/call/audit.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "core/call/sink.h"
#include "core/mcp/era.h"
#include "core/wire/msg.h"

void tg_gate_refuse_nonstandard(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const char *subject)
{
    struct tg_server *srv = x->srv;
    srv->metrics.rpc_refused_nonstandard++;
    srv->metrics.decisions[1]++;
    char esc[96];
    tg_log(TG_LOG_INFO, "refused non-standard method", "grant=%s session=%s upstream=%s method=%s", x->grant->name,
           x->sess->id_str, x->uc->name, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(m->method)));
    struct tg_audit_record ar = {0};
    ar.grant = x->grant->name;
    ar.subject = subject;
    ar.session = x->sess->id_str;
    ar.upstream = x->uc->name;
    ar.method = m->method;
    ar.decision = "deny";
    ar.rule = "non-standard-method";
    ar.correlation_id = NULL; /* a JSON-RPC error, no CallToolResult to carry a toolFailure */
    ar.latency_ms = -1;
    tg_audit_log(srv->audit, &srv->conf->audit, &ar);
    if (m->kind == TG_MSG_NOTIFICATION) {
        tg_sink_accept(sk); /* notifications get no answer; it is dropped */
        return;
    }
    if (x->era == TG_ERA_2026) {
        /* What a 2026-07-28 server answers a method it does not know (404, -32601): a client, or
         * a conformance suite, sees the same code through the gateway as directly. */
        tg_sink_refuse(sk, 404, m->id_raw, m->id_len, TG_RPC_METHOD_NOT_FOUND, "Method not found", NULL);
        return;
    }
    struct tg_buf d;
    tg_buf_init(&d);
    tg_buf_appends(&d, "{\"tool\":null,\"rule\":\"non-standard-method\",\"reason\":");
    char reason[200];
    snprintf(reason, sizeof(reason), "%s is not a standard MCP method; a policy must allow it by name", m->method);
    tg_json_write_string(&d, reason, strlen(reason));
    tg_buf_appends(&d, "}");
    tg_buf_append(&d, "", 1);
    char msg[200];
    snprintf(msg, sizeof(msg), "%s is refused by the gateway: not a standard MCP method", m->method);
    tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_DENIED, msg, d.base);
    tg_buf_dispose(&d);
}
