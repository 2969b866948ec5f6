/* A refused tools/call in the MCP drafts' shapes (signals = "mcp-drafts"): a CallToolResult with
 * isError true whose _meta carries the authorization denial envelope of SEP-2643
 * ("io.modelcontextprotocol/authorization") and the tool-failure classification of SEP-3313
 * ("io.modelcontextprotocol/toolFailure", class "governance"). One random handle serves as the
 * envelope's authorizationContextId, the classification's correlationId and the audit line's
 * correlation_id. docs/protocol.md#signals-in-the-mcp-drafts-shapes has the shapes. */
#ifndef TG_DENIAL_H
#define TG_DENIAL_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "core/base/buf.h"

#define TG_DENIAL_ID_LEN 32 /* hex digits of a handle: 128 random bits */

/* SEP-2643's remediation: whether the denial can be acted on. */
enum tg_remediation { TG_REMEDIATION_UNAVAILABLE, TG_REMEDIATION_UNDISCLOSED, TG_REMEDIATION_AVAILABLE };

struct tg_denial {
    enum tg_remediation remediation;
    const char *hint;     /* an available remediation's hint type ("url", "task"), or NULL: none */
    const char *hint_url; /* a "url" hint's page (a tollgate addition to the draft's bare hint), or NULL */
    const char *code;     /* SEP-3313's code: permission_denied, policy_blocked, user_action_required */
    const char *id;       /* the handle, TG_DENIAL_ID_LEN hex digits */
    const char *own_json; /* tollgate's own members (the tollgate-mode error.data object), or NULL */
};

/* A fresh handle: TG_DENIAL_ID_LEN lowercase hex digits and a NUL. */
void tg_denial_new_id(char out[TG_DENIAL_ID_LEN + 1]);

/* The members of _meta for d, without braces: "io.modelcontextprotocol/authorization":{...},
 * "io.modelcontextprotocol/toolFailure":{...}[,"tollgate/refusal":own_json]. */
void tg_denial_meta(struct tg_buf *b, const struct tg_denial *d);

/* The whole answer: {"jsonrpc":"2.0","id":ID,"result":{["resultType":"complete",]"content":
 * [{"type":"text","text":text}],"isError":true,"_meta":{...}}}. modern: the client speaks
 * 2026-07-28 (its results say their resultType). id_raw NULL: null. */
void tg_denial_result(struct tg_buf *out, const char *id_raw, size_t id_len, int modern, const char *text,
                      const struct tg_denial *d);

/* The handle a retry echoes (params._meta["io.modelcontextprotocol/authorization-context-id"]),
 * when it is a string of at most 128 printable ASCII bytes without '"' or '\\'; else NULL. It is
 * never authorization: the call is decided afresh as any other. */
const char *tg_denial_echoed(const cJSON *params);

struct tg_call;
/* 1 when k is a tools/call whose upstream has signals = "mcp-drafts". */
int tg_denial_drafts(const struct tg_call *k);

#define TG_META_AUTHORIZATION "io.modelcontextprotocol/authorization"
#define TG_META_TOOL_FAILURE "io.modelcontextprotocol/toolFailure"
#define TG_META_AUTHORIZATION_CONTEXT_ID "io.modelcontextprotocol/authorization-context-id"

#endif
