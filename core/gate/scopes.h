/* Scope step-up (MCP authorization, RFC 6750 §3.1): a call whose credential lacks the scopes the
 * policy requires (policy/policy.h, "scopes") is refused before anything is decided or counted,
 * saying which scopes to get and where the route's RFC 9728 metadata is. */
#ifndef TG_GATE_SCOPES_H
#define TG_GATE_SCOPES_H

#include <cjson/cJSON.h>

struct tg_exchange;
struct tg_sink;
struct tg_msg;
struct tg_policy;

#define TG_RPC_INSUFFICIENT_SCOPE (-32005)

/* Request m (tools/call of tool; resources/read or subscribe, prompts/get, completion/complete of
 * what, as core/gate/reads.h names it) under policy pol: if x->scopes lacks what it needs, answer
 * sk and release it, and return 1. Over HTTP: 403 with WWW-Authenticate: Bearer
 * error="insufficient_scope", scope="NEEDED", resource_metadata="URL" and the JSON-RPC error
 * TG_RPC_INSUFFICIENT_SCOPE; where no status can be shown (a WebSocket, a legacy SSE stream, a
 * batch) the same error, whose data holds error, scope, resource_metadata and www_authenticate.
 * 0: it may go on (nothing answered). */
int tg_gate_scopes_refused(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const cJSON *params,
                           const struct tg_policy *pol, const char *what);

#endif
