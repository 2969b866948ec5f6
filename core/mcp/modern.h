/* The 2026-07-28 era's own rules: the methods it removed, the gateway's server/discover answer,
 * and what a complete result carries (resultType, cache hints). Pure functions: no I/O. */
#ifndef TG_MCP_MODERN_H
#define TG_MCP_MODERN_H

#include "core/base/buf.h"
#include "core/mcp/mrtr.h"

struct tg_upstream_conf;

/* 1 for a method the 2026-07-28 revision removed (initialize, ping, logging/setLevel,
 * resources/(un)subscribe, and the notifications that went with them). */
int tg_mcp_removed_method(const char *method);
/* The gateway's answer to server/discover (id: raw JSON) for upstream uc, which declared caps
 * (JSON; NULL when the gateway answers initialize itself); listen: 0 no subscriptions/listen,
 * 1 list changes relayed (listChanged told as declared), 2 relayed whole (subscribe too). */
void tg_mcp_discover_result(struct tg_buf *out, const char *id, size_t id_len, const struct tg_upstream_conf *uc,
                            const char *caps, int listen);
/* Make a 2025 upstream's successful answer a 2026 complete result, in place: resultType
 * "complete", and for the cacheable methods ttlMs 0 and cacheScope "private" (per-grant lists
 * must never be shared); tools/list loses the tools whose x-mcp-header annotations are invalid.
 * Answers that are not a JSON-RPC result are left as they are. */
/* c: the call, for the three methods that may take input (an input_required result is checked
 * and its requestState sealed, core/mcp/mrtr.h), else NULL (any result type but complete is
 * refused). Returns 0, or -1 with why: the client must get an error instead (-2: a capability
 * the client did not declare, why "capability:NAME"). */
int tg_mcp_modern_result(struct tg_buf *answer, const char *method, struct tg_mcp_mrtr *t, struct tg_mcp_mrtr_call *c,
                         int64_t now_ms, char *why, size_t whysz);
/* The same, told where the answer's result value is (result_len bytes at result_off: the caller
 * parsed the answer already; result_len 0: not known, it is found here). */
int tg_mcp_modern_result_at(struct tg_buf *answer, size_t result_off, size_t result_len, const char *method,
                            struct tg_mcp_mrtr *t, struct tg_mcp_mrtr_call *c, int64_t now_ms, char *why, size_t whysz);

#endif
