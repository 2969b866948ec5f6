#include "core/app/oauth_meta.h"

#include <stdio.h>
#include <string.h>

#include "core/call/gateway.h"
#include "core/base/json.h"
#include "transports/http1/http1.h"
#include "transports/respond.h"

/* The base URL clients use: public_url, or the scheme and Host of this request when the Host is a plain
 * host[:port] (anything else falls back to the listener's address, so a peer cannot inject text). */
void tg_oauth_meta_base_url(struct tg_server *srv, struct tg_conn *c, struct tg_buf *out)
{
    if (srv->conf->public_url) {
        size_t n = strlen(srv->conf->public_url);
        while (n > 0 && srv->conf->public_url[n - 1] == '/')
            n--;
        tg_buf_append(out, srv->conf->public_url, n);
        return;
    }
    tg_buf_appends(out, c->listener->tls ? "https://" : "http://");
    struct tg_slice host = tg_http_req_header(&c->req, "host");
    int ok = host.ptr != NULL && host.len > 0 && host.len < 256;
    for (size_t i = 0; ok && i < host.len; i++) {
        char ch = host.ptr[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
             ch == '-' || ch == ':' || ch == '[' || ch == ']';
    }
    if (ok)
        tg_buf_append(out, host.ptr, host.len);
    else
        tg_buf_appendf(out, "%s:%d", c->listener->lc ? c->listener->lc->address : "127.0.0.1", c->listener->port);
}

/* RFC 9728 protected-resource metadata for /NAME/mcp (and the default /mcp). */
void tg_oauth_meta_handle(struct tg_server *srv, struct tg_conn *c, struct tg_slice rest)
{
    const struct tg_upstream_conf *uc = NULL;
    if (srv->conf->njwt == 0) {
        tg_respond_json(c, 404, "{\"error\":\"no JWT issuers configured\"}");
        return;
    }
    /* RFC 9728 §3.1: the metadata of resource BASE/P lives at BASE/.well-known/oauth-protected-resource/P,
     * and its "resource" is BASE/P exactly. */
    if (tg_slice_eq(rest, TG_SLICE("/mcp")) && srv->conf->default_upstream >= 0)
        uc = &srv->conf->upstreams[srv->conf->default_upstream];
    else if (rest.len > 5 && rest.ptr[0] == '/' && memcmp(rest.ptr + rest.len - 4, "/mcp", 4) == 0)
        uc = tg_conf_find_upstream(srv->conf, tg_slice_of(rest.ptr + 1, rest.len - 5), NULL);
    if (uc == NULL) {
        tg_respond_json(c, 404, "{\"error\":\"no MCP endpoint at this path\"}");
        return;
    }
    struct tg_buf b, url;
    tg_buf_init(&b);
    tg_buf_init(&url);
    tg_oauth_meta_base_url(srv, c, &url);
    tg_buf_append(&url, rest.ptr, rest.len);
    tg_buf_appends(&b, "{\"resource\":");
    tg_json_write_string(&b, url.base, url.len);
    tg_buf_appends(&b, ",\"authorization_servers\":[");
    for (size_t i = 0; i < srv->conf->njwt; i++) {
        if (i)
            tg_buf_append(&b, ",", 1);
        tg_json_write_string(&b, srv->conf->jwt[i].issuer, strlen(srv->conf->jwt[i].issuer));
    }
    tg_buf_appends(&b, "],\"bearer_methods_supported\":[\"header\"],\"resource_name\":");
    char name[96];
    snprintf(name, sizeof(name), "tollgate/%s", uc->name);
    tg_json_write_string(&b, name, strlen(name));
    tg_buf_appends(&b, "}");
    tg_http_respond(c, 200, "Cache-Control: max-age=300\r\n", "application/json", b.base, b.len);
    tg_buf_dispose(&b);
    tg_buf_dispose(&url);
}
