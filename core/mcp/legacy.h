/* The rules of the 2025 protocol era: the versions, the gateway's own initialize, the batch
 * rule, and the ledger of server-to-client requests (only answers to requests the server
 * really sent may go back up). Pure functions over a session: no I/O. */
#ifndef TG_MCP_LEGACY_H
#define TG_MCP_LEGACY_H

#include "core/base/buf.h"

struct tg_msg;
struct tg_session;
struct tg_upstream_conf;

#define TG_PROTO_LATEST "2025-11-25"
/* Server-to-client requests kept per session; the oldest is forgotten past this. */
#define TG_MCP_MAX_SERVER_REQUESTS 64

int tg_mcp_version_supported(struct tg_slice v);
/* The gateway's own static copy of v if it is a version the gateway knows, else NULL (what a
 * session's proto points to). */
const char *tg_mcp_version_known(struct tg_slice v);
/* JSON-RPC batches exist only in 2025-03-26. */
int tg_mcp_batch_allowed(const char *proto);
/* Learn the negotiated version from an initialize result (the session is then initialized). */
void tg_mcp_note_init_result(struct tg_session *s, const char *p, size_t n, int depth);
/* The gateway's own answer to initialize m, for upstreams that cannot take it (CoWork OS). */
/* The same for a 2026-07-28-only upstream, from the capabilities its server/discover declared
 * (JSON, may be NULL): what the gateway relays, listChanged and subscribe as declared (the GET
 * stream is relayed as subscriptions/listen, resources/subscribe as its resourceSubscriptions). */
void tg_mcp_bridged_init(struct tg_session *s, struct tg_msg *m, const struct tg_upstream_conf *uc, const char *caps,
                         struct tg_buf *out);
void tg_mcp_local_init(struct tg_session *s, struct tg_msg *m, const struct tg_upstream_conf *uc,
                       struct tg_buf *out);
/* A server request with this raw id was relayed to the client. */
void tg_mcp_note_server_request(struct tg_session *s, struct tg_slice id);
/* 1 if the raw id answers a pending server request (which is then no longer pending). */
int tg_mcp_take_server_request(struct tg_session *s, const char *raw, size_t n);

#endif
