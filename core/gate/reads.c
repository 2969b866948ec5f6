/* What a request reads besides tools (core/gate/reads.h): resources, prompts, completions,
 * and the lists of them. Only these methods pay for it: tools/call never comes here. */
#include "core/gate/reads.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/call.h"
#include "core/call/exchange.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "core/base/json.h"
#include "core/mcp/rewrite.h"
#include "core/wire/msg.h"
#include "policy/policy.h"
#include "policy/uri.h"

/* params.uri of a resources request in its normal form, written so into the request. 0 (*uri
 * the string item), -1 if params.uri is not a string, -2 if the URI is refused (d says why). */
static int normal_uri(struct tg_msg *m, cJSON *params, const struct tg_policy *pol, struct tg_decision *d,
                      cJSON **uri)
{
    cJSON *u = tg_json_get(params, "uri");
    *uri = u;
    if (!cJSON_IsString(u))
        return -1;
    /* A "\u0000" ends the decoded string early: what the upstream would read past it was never
     * decided. Refused wherever it is in the request (that costs a search of these requests only). */
    if (m->src != NULL && memmem(m->src, m->src_len, "\\u0000", 6) != NULL) {
        memset(d, 0, sizeof(*d));
        d->verdict = TG_VERDICT_DENY;
        snprintf(d->rule, sizeof(d->rule), "(uri)");
        snprintf(d->message, sizeof(d->message), "Resource URI \"%.200s\" is refused: the request holds a NUL (\\u0000)",
                 u->valuestring);
        return -2;
    }
    size_t n = strlen(u->valuestring);
    char *norm = tg_xmalloc(n + 1);
    const char *why;
    long w = tg_uri_normalize(u->valuestring, n, norm, &why);
    if (w < 0) {
        tg_xfree(norm);
        tg_policy_decide_resource(pol, u->valuestring, d); /* denied, saying why */
        return -2;
    }
    if ((size_t)w != n || memcmp(norm, u->valuestring, n) != 0) {
        cJSON *nu = cJSON_CreateString(norm);
        nu->string = u->string; /* the member's name moves to the new value */
        u->string = NULL;
        cJSON_ReplaceItemViaPointer(params, u, nu);
        *uri = nu;
    }
    tg_xfree(norm);
    /* Written from the tree from here on: the bytes the client sent may spell the URI another
     * way (escapes, "..") that the upstream would read differently. */
    tg_msg_edited(m);
    return 0;
}

/* completion/complete: its ref names a prompt (decided as prompts/get) or a resource template
 * (decided as the URI its uriTemplate is written as). */
static const char *decide_completion(cJSON *params, const struct tg_policy *pol, struct tg_decision *d)
{
    cJSON *ref = tg_json_get(params, "ref");
    cJSON *type = tg_json_get(ref, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "ref/prompt") == 0) {
        cJSON *name = tg_json_get(ref, "name");
        if (cJSON_IsString(name)) {
            tg_policy_decide_prompt(pol, name->valuestring, d);
            return name->valuestring;
        }
    } else if (cJSON_IsString(type) && strcmp(type->valuestring, "ref/resource") == 0) {
        cJSON *uri = tg_json_get(ref, "uri");
        if (cJSON_IsString(uri)) {
            tg_policy_decide_resource(pol, uri->valuestring, d);
            return uri->valuestring;
        }
    }
    return NULL;
}

int tg_reads_decide_uri(struct tg_msg *m, cJSON *params, const struct tg_policy *pol, struct tg_decision *d,
                        cJSON **uri, const char **bad)
{
    memset(d, 0, sizeof(*d));
    int rc = normal_uri(m, params, pol, d, uri);
    if (rc == -1) {
        *bad = m->mid == TG_M_RESOURCES_READ        ? "resources/read needs params.uri (a string)"
               : m->mid == TG_M_RESOURCES_SUBSCRIBE ? "resources/subscribe needs params.uri (a string)"
                                                    : "resources/unsubscribe needs params.uri (a string)";
        return -1;
    }
    if (rc == 0 && m->mid == TG_M_RESOURCES_UNSUBSCRIBE)
        return 0; /* letting go of a resource needs no permission; its URI is the normal one */
    if (rc == 0)
        tg_policy_decide_resource(pol, (*uri)->valuestring, d);
    return 1;
}

int tg_reads_decide(struct tg_msg *m, cJSON *params, const struct tg_policy *pol, struct tg_decision **dec,
                    const char **what, int *list, const char **bad)
{
    *dec = NULL;
    *what = NULL;
    *list = -1;
    *bad = NULL;
    switch (m->mid) {
    case TG_M_RESOURCES_READ:
    case TG_M_RESOURCES_SUBSCRIBE:
    case TG_M_RESOURCES_UNSUBSCRIBE: {
        struct tg_decision d;
        cJSON *uri;
        int rc = tg_reads_decide_uri(m, params, pol, &d, &uri, bad);
        if (rc <= 0)
            return rc;
        *dec = memcpy(tg_call_decision_new(), &d, sizeof(d));
        *what = uri->valuestring;
        return 1;
    }
    case TG_M_PROMPTS_GET: {
        cJSON *name = tg_json_get(params, "name");
        if (!cJSON_IsString(name)) {
            *bad = "prompts/get needs params.name (a string)";
            return -1;
        }
        *dec = memset(tg_call_decision_new(), 0, sizeof(**dec));
        tg_policy_decide_prompt(pol, name->valuestring, *dec);
        *what = name->valuestring;
        return 1;
    }
    case TG_M_OTHER:
        break;
    default:
        return 0;
    }
    if (strcmp(m->method, "completion/complete") == 0) {
        struct tg_decision d;
        memset(&d, 0, sizeof(d));
        *what = decide_completion(params, pol, &d);
        if (*what == NULL) {
            *bad = "completion/complete needs params.ref: {\"type\": \"ref/prompt\", \"name\"} or "
                   "{\"type\": \"ref/resource\", \"uri\"}";
            return -1;
        }
        *dec = memcpy(tg_call_decision_new(), &d, sizeof(d));
        return 1;
    }
    int k = tg_mcp_list_kind(m->method);
    if (k > TG_MCP_LIST_TOOLS)
        *list = k;
    return 0;
}

void tg_reads_record(struct tg_exchange *x, const struct tg_policy *pol, const struct tg_msg *m, const char *what,
                     const struct tg_decision *d, const char *subject, const char *issuer)
{
    if (d == NULL || d->verdict != TG_VERDICT_ALLOW || what == NULL ||
        (m->mid != TG_M_RESOURCES_READ && m->mid != TG_M_PROMPTS_GET))
        return;
    /* The same caller a tools/call is decided for (core/gate/dispatch.c handle_request). */
    struct tg_caller who = {x->grant->name, x->sess != NULL ? x->sess->id_str : NULL, x->uc->name, subject,
                            issuer != NULL && issuer[0] != '\0' ? issuer : NULL};
    x->srv->store.ops->record_read(x->srv->store.ud, pol, &who, m->mid == TG_M_PROMPTS_GET, what, (int64_t)wall_ms());
}
