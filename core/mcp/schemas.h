/* The input schemas of the tools that carry x-mcp-header annotations, learnt from the tools/list
 * answers that pass through the gateway, per upstream: a 2026 tools/call's Mcp-Param-* headers
 * are checked against its arguments with them, and rebuilt from the body for the upstream.
 *
 * Only annotated tools are kept, at most TG_MCP_SCHEMAS_MAX per upstream, each at most
 * TG_MCP_SCHEMA_BYTES (a later list replaces a tool's entry; beyond the caps nothing new is
 * learnt). Owner: the server; freed by
 * tg_mcp_schemas_free. */
#ifndef TG_MCP_SCHEMAS_H
#define TG_MCP_SCHEMAS_H

#include <stddef.h>

#include <cjson/cJSON.h>

#define TG_MCP_SCHEMAS_MAX 1024
#define TG_MCP_SCHEMA_BYTES 16384 /* so at most 16 MiB per upstream */

struct tg_mcp_schemas;

struct tg_mcp_schemas *tg_mcp_schemas_new(void);
void tg_mcp_schemas_free(struct tg_mcp_schemas *s);
/* Learn from an upstream's tools/list answer (the raw JSON-RPC message). */
void tg_mcp_schemas_learn(struct tg_mcp_schemas *s, const char *upstream, const char *answer, size_t n);
/* The inputSchema of an annotated tool of this upstream, or NULL (not annotated, or not listed yet). */
const cJSON *tg_mcp_schemas_find(const struct tg_mcp_schemas *s, const char *upstream, const char *tool);

#endif
