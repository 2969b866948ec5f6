/* RFC 9728 protected-resource metadata, an applet beside the proxy path: what a client that
 * got 401 needs to find the authorization servers of a resource. */
#ifndef TG_OAUTH_META_H
#define TG_OAUTH_META_H

#include "core/base/buf.h"

struct tg_conn;
struct tg_server;

/* GET /.well-known/oauth-protected-resource{rest} */
void tg_oauth_meta_handle(struct tg_server *srv, struct tg_conn *c, struct tg_slice rest);
/* The base URL clients use: public_url, or the scheme and Host of this request when the Host
 * is a plain host[:port] (anything else falls back to the listener's address). */
void tg_oauth_meta_base_url(struct tg_server *srv, struct tg_conn *c, struct tg_buf *out);
/* The RFC 8707 resource of the MCP route at path (/NAME/ENDPOINT or /ENDPOINT, any of its
 * transports) appended to out: BASE/NAME/mcp (BASE/mcp), the "resource" of its RFC 9728
 * metadata, which lives at BASE/.well-known/oauth-protected-resource/NAME/mcp. *base_len: how
 * many bytes of what was appended are BASE. */
void tg_oauth_meta_resource(struct tg_server *srv, struct tg_conn *c, struct tg_slice path, struct tg_buf *out,
                            size_t *base_len);

#endif
