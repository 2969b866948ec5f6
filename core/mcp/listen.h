/* subscriptions/listen (MCP 2026-07-28) through the gateway: the request's filter and the
 * upstream's notifications, seen through the grant's policy.
 *
 * resourceSubscriptions the grant may not read are dropped before the request goes upstream and
 * from the acknowledgement; notifications/resources/updated for a URI it may not read never
 * reach it; every notification carries the client's own listen id as _meta
 * "io.modelcontextprotocol/subscriptionId";
 * progress and log notifications never go on a listen stream. Pure functions over JSON. */
#ifndef TG_MCP_LISTEN_H
#define TG_MCP_LISTEN_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "core/base/buf.h"

struct tg_policy;

#define TG_MCP_LISTEN_METHOD "subscriptions/listen"
#define TG_MCP_META_SUBSCRIPTION "io.modelcontextprotocol/subscriptionId"

/* Drop the resourceSubscriptions of a listen request's params the policy does not let the grant
 * read. */
void tg_mcp_listen_filter_request(cJSON *params, const struct tg_policy *pol);
/* One message the upstream sent on a listen stream, for the client whose listen id is id (raw
 * JSON; NULL: the GET stream of a 2025 session, which gets no acknowledgement and no tag): 1
 * with the message to send in out, 0 to drop it. */
int tg_mcp_listen_message(struct tg_buf *out, const char *p, size_t n, const char *id, size_t idn,
                          const struct tg_policy *pol);

/* The listen result that ends the listen whose id is id (raw JSON): resultType "complete" with the
 * id as _meta subscriptionId, the era's graceful end of a subscription. */
void tg_mcp_listen_complete(struct tg_buf *out, const char *id, size_t idn);

/* May server message p go to a client of this policy as it is? 0 for a
 * notifications/resources/updated whose URI the grant may not read (or that names none), or for
 * a message that does not parse; 1 for anything else. p is parsed: callers ask only for a
 * message whose method token may spell that method (tg_mcp_method_maybe_update), so the others
 * pay nothing. */
int tg_mcp_relay_allowed(const char *p, size_t n, const struct tg_policy *pol);

#endif
