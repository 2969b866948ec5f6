/* The protocol era of a request, and the MCP 2026-07-28 checks of its HTTP headers against its
 * body (the bypass vector of SEP-2243: headers never decide, the body does).
 *
 * Pure functions over a parsed body and the request's header list: no I/O. The transport hands
 * the headers as (name, value) slices; everything here reads the body and compares. Not wired
 * into the request path yet (issue 9 does that); the functions and their tests come first. */
#ifndef TG_MCP_ERA_H
#define TG_MCP_ERA_H

#include <cjson/cJSON.h>

#include "core/base/buf.h"
#include "core/call/exchange.h"

#define TG_MCP_MODERN_VERSION "2026-07-28"
#define TG_MCP_META_VERSION "io.modelcontextprotocol/protocolVersion"
#define TG_MCP_META_CAPS "io.modelcontextprotocol/clientCapabilities"

/* JSON-RPC codes the 2026-07-28 revision defines (spec-only range -32020..-32099). */
#define TG_RPC_HEADER_MISMATCH (-32020)
#define TG_RPC_MISSING_CAPABILITY (-32021)
#define TG_RPC_UNSUPPORTED_VERSION (-32022)

/* What a request claims about itself. Points into the body it was read from. */
struct tg_mcp_claim {
    enum tg_era era;
    const char *version;    /* _meta protocolVersion (TG_ERA_2026), else NULL */
    const cJSON *caps;      /* _meta clientCapabilities (TG_ERA_2026), else NULL */
};

/* A refusal: the JSON-RPC code, the HTTP status and a message. */
struct tg_mcp_refusal {
    int code;
    int status;
    char message[200];
};

/* One request header, as the transport has it. */
struct tg_mcp_header {
    struct tg_slice name, value;
};

/* Classify a JSON-RPC message by its body: a request whose params._meta names
 * io.modelcontextprotocol/protocolVersion is a 2026-era request, anything else 2025. Returns 0,
 * or -1 with *why set when the claim is malformed (a version that is not a string, a modern
 * claim without clientCapabilities: -32602, HTTP 400). */
int tg_mcp_classify(const cJSON *root, struct tg_mcp_claim *out, struct tg_mcp_refusal *why);
/* 1 if tollgate serves this 2026-era version. */
int tg_mcp_modern_version_supported(const char *v);
/* error.data of -32022: {"supported":[...],"requested":V}, NUL-terminated. */
void tg_mcp_unsupported_version_data(struct tg_buf *out, const char *requested);

/* Decode a header value: the =?base64?...?= form (lowercase markers, case-sensitive, the
 * canonical padded encoding only) or the literal value, after trimming optional whitespace. A
 * value with a control character or a byte outside ASCII, or a broken or non-canonical base64
 * form, is refused (-1). */
int tg_mcp_header_value(struct tg_slice raw, struct tg_buf *out);
/* 1 if a decoded header value states the body's value: a string byte for byte, an integer as
 * a number, a boolean as true/false. Anything else (objects, arrays, non-integers) never
 * matches. */
int tg_mcp_header_matches(struct tg_slice decoded, const cJSON *v);

/* The standard headers of a 2026-era request against its body: MCP-Protocol-Version against
 * _meta, Mcp-Method against method (case-sensitive), Mcp-Name against params.name (tools/call,
 * prompts/get) or params.uri (resources/read). A missing, mismatched, duplicated or
 * comma-joined header is -32020 (400). Returns 0 when they agree. */
int tg_mcp_check_headers(const struct tg_mcp_header *h, size_t nh, const cJSON *root,
                         const struct tg_mcp_claim *claim, struct tg_mcp_refusal *why);
/* The Mcp-Param-* headers of a tools/call against its arguments, for the properties the tool's
 * inputSchema marks x-mcp-header: present (and equal) when the argument is present and not
 * null, absent otherwise. Headers for names the schema does not mark are left alone (they are
 * forwarded). Returns 0 when they agree, else -32020 (400). */
int tg_mcp_check_param_headers(const struct tg_mcp_header *h, size_t nh, const cJSON *input_schema,
                               const cJSON *arguments, struct tg_mcp_refusal *why);
/* 1 if a tool's x-mcp-header annotations are valid: only on string, integer or boolean
 * properties reachable through "properties" alone, each a token, unique ignoring case.
 * Clients must drop a tool that is not. */
int tg_mcp_tool_headers_valid(const cJSON *input_schema);

/* The Mcp-Param-* lines a 2026 tools/call is sent upstream with: for the properties the tool's
 * inputSchema (NULL: not known) marks x-mcp-header, rebuilt from the arguments (present and not
 * null); the client's other Mcp-Param-* headers (h), which the gateway does not recognise, as
 * they came. NUL-terminated "Name: value\r\n" lines, or none at all (out left as it was, its
 * base NULL if it had none). */
void tg_mcp_param_headers_build(struct tg_buf *out, const struct tg_mcp_header *h, size_t nh, const cJSON *input_schema,
                                const cJSON *arguments);
/* Add the 2026 claim to a request of a 2025 session sent to a 2026-07-28-only upstream:
 * params._meta protocolVersion, clientCapabilities (caps JSON, "{}" if NULL), clientInfo, and
 * logLevel when the session set one (without it a 2026 server sends no log messages). */
void tg_mcp_add_claim(cJSON *root, const char *caps, unsigned log_level);
/* A logging/setLevel level as a small number (1 debug .. 8 emergency), 0 if it is none; and back. */
unsigned tg_mcp_log_level(const char *name);
const char *tg_mcp_log_level_name(unsigned level);
/* Remove a 2026 request's claim from its params._meta (protocolVersion, clientCapabilities,
 * clientInfo, logLevel; _meta itself if nothing else is left): what a 2025 upstream is sent. */
int tg_mcp_strip_claim(cJSON *root); /* 1 if it removed anything */
/* Write one header value as a 2026 request carries it: the value itself when it is plain
 * ASCII (printable, no edge whitespace, not itself like the sentinel), else =?base64?...?=. */
void tg_mcp_header_value_write(struct tg_buf *out, const char *v, size_t n);
/* The Mcp-* headers of a 2026 request to an upstream, rebuilt from the body it is sent with
 * (root), never copied from the client: MCP-Protocol-Version (version), Mcp-Method, and Mcp-Name
 * where the method has one; then extra (complete lines the caller passes through, or NULL).
 * "Name: value\r\n" lines, NUL-terminated. */
void tg_mcp_upstream_headers(struct tg_buf *out, const cJSON *root, const char *version, const char *extra);

#endif
