/* A refused tools/call in the MCP drafts' shapes (core/call/denial.h).
 *
 * SEP-2643 (pull request 2643, head 6bff817 of 2026-08-21): the envelope rides in the _meta of the
 * result that expresses the denial; a CallToolResult with isError true for a denial with no
 * interaction to offer. reason is always "insufficient_authorization" (the only value the draft
 * defines); remediationHints only with remediation "available".
 * SEP-3313 (pull request 3313, opened 2026-08-27): class, code and the required correlationId in
 * the same result's _meta; retryable left out (MUST be absent or false outside "reliability").
 *
 * A call's handle (k->denial_id) is made once, by its first refusal or parking, whichever writes
 * first (its audit line, or its answer): every later line of the same call (approved, allow,
 * rejected) and its answer carry the same one. */
#include "core/call/denial.h"

#include <stdint.h>
#include <string.h>

#include "core/base/json.h"
#include "core/call/call.h"
#include "core/conf/conf.h"
#include "upstream/pool/pool.h"

void tg_denial_new_id(char out[TG_DENIAL_ID_LEN + 1])
{
    uint8_t r[TG_DENIAL_ID_LEN / 2];
    if (tg_random(r, sizeof(r)) != 0)
        memset(r, 0, sizeof(r)); /* getrandom(2) does not fail for 16 bytes once the pool is ready */
    tg_hex_encode(r, sizeof(r), out);
}

static const char *remediation_name(enum tg_remediation r)
{
    switch (r) {
    case TG_REMEDIATION_AVAILABLE: return "available";
    case TG_REMEDIATION_UNDISCLOSED: return "undisclosed";
    default: return "unavailable";
    }
}

static void member(struct tg_buf *b, const char *key, const char *v)
{
    tg_buf_appends(b, key);
    tg_json_write_string(b, v, strlen(v));
}

void tg_denial_meta(struct tg_buf *b, const struct tg_denial *d)
{
    tg_buf_appends(b, "\"" TG_META_AUTHORIZATION "\":{\"reason\":\"insufficient_authorization\"");
    member(b, ",\"remediation\":", remediation_name(d->remediation));
    member(b, ",\"authorizationContextId\":", d->id);
    if (d->remediation == TG_REMEDIATION_AVAILABLE && d->hint != NULL) {
        member(b, ",\"remediationHints\":[{\"type\":", d->hint);
        if (d->hint_url != NULL)
            member(b, ",\"url\":", d->hint_url);
        tg_buf_appends(b, "}]");
    }
    tg_buf_appends(b, "},\"" TG_META_TOOL_FAILURE "\":{\"class\":\"governance\"");
    member(b, ",\"code\":", d->code != NULL ? d->code : "policy_blocked");
    member(b, ",\"correlationId\":", d->id);
    tg_buf_appends(b, "}");
    if (d->own_json != NULL && d->own_json[0] != '\0') {
        tg_buf_appends(b, ",\"tollgate/refusal\":");
        tg_buf_appends(b, d->own_json);
    }
}

void tg_denial_result(struct tg_buf *out, const char *id_raw, size_t id_len, int modern, const char *text,
                      const struct tg_denial *d)
{
    tg_buf_appends(out, "{\"jsonrpc\":\"2.0\",\"id\":");
    if (id_raw != NULL)
        tg_buf_append(out, id_raw, id_len);
    else
        tg_buf_appends(out, "null");
    tg_buf_appends(out, modern ? ",\"result\":{\"resultType\":\"complete\",\"content\":[{\"type\":\"text\",\"text\":"
                               : ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":");
    tg_json_write_string(out, text, strlen(text));
    tg_buf_appends(out, "}],\"isError\":true,\"_meta\":{");
    tg_denial_meta(out, d);
    tg_buf_appends(out, "}}}");
}

const char *tg_denial_echoed(const cJSON *params)
{
    const cJSON *v = tg_json_get(tg_json_get(params, "_meta"), TG_META_AUTHORIZATION_CONTEXT_ID);
    if (!cJSON_IsString(v))
        return NULL;
    size_t n = 0;
    for (const char *p = v->valuestring; *p; p++, n++)
        if (n >= 128 || (unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e || *p == '"' || *p == '\\')
            return NULL;
    return n > 0 ? v->valuestring : NULL;
}

int tg_denial_drafts(const struct tg_call *k)
{
    return k->tool != NULL && k->method != NULL && strcmp(k->method, "tools/call") == 0 && k->uprt != NULL &&
           tg_upstream_conf(k->uprt)->signals == TG_SIGNALS_MCP_DRAFTS;
}

const char *tg_call_denial_id(struct tg_call *k, const char *decision)
{
    static const char *const refusals[] = {"deny", "approve", "rejected", "expired", "refused"};
    if (k->denial_id[0] != '\0')
        return k->denial_id;
    if (decision == NULL || strcmp(decision, "allow") == 0) /* the usual line: no conf lookup for it */
        return NULL;
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++)
        if (strcmp(decision, refusals[i]) == 0) {
            if (!tg_denial_drafts(k))
                return NULL;
            tg_denial_new_id(k->denial_id);
            return k->denial_id;
        }
    return NULL;
}

int tg_call_task_denial_meta(struct tg_call *k, struct tg_buf *b)
{
    if (k == NULL || !k->parked || !tg_denial_drafts(k))
        return 0;
    if (k->denial_id[0] == '\0')
        tg_denial_new_id(k->denial_id);
    struct tg_denial dn = {TG_REMEDIATION_AVAILABLE, "task", NULL, "user_action_required", k->denial_id, NULL};
    tg_buf_appends(b, ",\"_meta\":{");
    tg_denial_meta(b, &dn);
    tg_buf_appends(b, "}");
    return 1;
}
