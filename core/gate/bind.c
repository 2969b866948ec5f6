/* Binding a tools/call's arguments to its caller (core/gate/bind.h). Runs before the 2026 retry
 * check and the decision: a retry's envelope, the decision, the audit digest, the approval queue
 * and the message sent upstream are all made from the bound tree afterwards. */
#include "core/gate/bind.h"
#include "core/gate/dispatch.h" /* tg_gate_bind_check_params */

#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "core/call/call.h"
#include "core/call/exchange.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "core/mcp/era.h"
#include "core/mcp/schemas.h"
#include "core/wire/msg.h"
#include "policy/auth.h"
#include "policy/bind.h"

/* The claims of the caller's JWT that pol names, as a compact JSON object (malloc'd), or NULL. */
static char *claims_of(const struct tg_exchange *x, const struct tg_policy *pol)
{
    const char *const *names;
    int n = tg_policy_bind_claims(pol, &names);
    if (n == 0 || x->who == NULL || x->who->jwt <= 0 || x->subject_token == NULL)
        return NULL;
    return tg_bind_claims_of_token(x->subject_token, x->subject_token_len, names, n);
}

void tg_gate_bind_session(const struct tg_exchange *x, const struct tg_policy *pol, struct tg_session *s)
{
    s->claims = claims_of(x, pol);
}

/* The request's Mcp-Param-* lines (a 2026 request's, kept as they came but for the ones its tool
 * marks, which were made from the arguments the model sent) made again from the bound arguments.
 * The lines live until the next binding: the gate serializes the request before it returns, and
 * decisions never nest (one loop thread). */
static void rebuild_param_headers(struct tg_exchange *x, const char *tool, const cJSON *args)
{
    static struct tg_buf lines;
    const cJSON *schema = x->srv->schemas != NULL ? tg_mcp_schemas_find(x->srv->schemas, x->uc->name, tool) : NULL;
    if (schema == NULL || (x->era != TG_ERA_2026 && !x->up_modern))
        return;
    struct tg_mcp_header h[64];
    size_t nh = 0;
    for (const char *p = x->fwd_headers; p != NULL && *p != '\0' && nh < 64;) {
        const char *eol = strstr(p, "\r\n");
        const char *colon = memchr(p, ':', eol != NULL ? (size_t)(eol - p) : strlen(p));
        if (eol == NULL || colon == NULL)
            break;
        const char *v = colon + 1;
        while (v < eol && *v == ' ')
            v++;
        h[nh].name = tg_slice_of(p, (size_t)(colon - p));
        h[nh].value = tg_slice_of(v, (size_t)(eol - v));
        nh++;
        p = eol + 2;
    }
    struct tg_buf out;
    tg_buf_init(&out);
    tg_mcp_param_headers_build(&out, h, nh, schema, args);
    tg_buf_dispose(&lines);
    lines = out;
    x->fwd_headers = lines.len > 0 ? lines.base : NULL;
}

int tg_gate_bind_check_params(const struct tg_exchange *x, const struct tg_mcp_header *h, size_t nh,
                              const cJSON *schema, const char *tool, const cJSON *args, struct tg_mcp_refusal *why)
{
    const struct tg_policy *pol = tg_conf_policy_for(x->srv->conf, x->grant, x->upstream);
    if (!tg_policy_binds(pol, tool))
        return tg_mcp_check_param_headers(h, nh, schema, args, why);
    cJSON *seen = cJSON_Duplicate(schema, 1);
    tg_policy_bind_schema(pol, tool, seen);
    int rc = tg_mcp_check_param_headers(h, nh, seen, args, why);
    cJSON_Delete(seen);
    return rc;
}

struct tg_decision *tg_gate_bind(struct tg_exchange *x, const struct tg_policy *pol, struct tg_msg *m, const char *subject)
{
    if (!tg_policy_binds_any(pol))
        return NULL; /* the common case: nothing to look at */
    cJSON *params = tg_json_get(m->root, "params");
    cJSON *name = tg_json_get(params, "name");
    cJSON *a = tg_json_get(params, "arguments");
    if (!cJSON_IsObject(params) || !cJSON_IsString(name) || (a != NULL && !cJSON_IsObject(a)) ||
        !tg_policy_binds(pol, name->valuestring) || !tg_policy_tool_visible(pol, name->valuestring))
        return NULL; /* nothing bound (or no tools/call: the gate refuses it; or a tool refused
                      * whatever its arguments: its refusal says so, not the binding's) */
    const char *tool = name->valuestring;
    const struct tg_grant_conf *g = x->grant;
    struct tg_bind_ctx cx = {g->name, subject, (const char *const *)g->attributes, g->nattributes, NULL};
    cJSON *claims = NULL; /* ours to free; a request's token's claims are the memo's */
    if (tg_policy_binds_claims(pol, tool)) {
        /* A request's own token, else what its session kept of its maker's (a channel's). */
        if (x->who != NULL && x->who->jwt > 0 && x->subject_token != NULL)
            cx.claims = tg_bind_token_claims_memo(x->subject_token, x->subject_token_len);
        else if (x->sess != NULL && x->sess->claims != NULL)
            cx.claims = claims = cJSON_Parse(x->sess->claims);
    }
    struct tg_decision d; /* written only when it refuses */
    int rc = tg_policy_bind_args(pol, tool, &cx, params, &d);
    cJSON_Delete(claims);
    if (rc < 0) {
        struct tg_decision *own = tg_call_decision_new();
        *own = d;
        return own;
    }
    if (rc > 0)
        tg_msg_edited(m); /* written from its tree from here on */
    /* Even when nothing changed: the client saw the schema without the bound arguments and sent
     * no header for them. */
    rebuild_param_headers(x, tool, tg_json_get(params, "arguments"));
    return NULL;
}
