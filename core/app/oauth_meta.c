#include "core/app/oauth_meta.h"

#include "policy/dpop.h"

#include <stdio.h>
#include <string.h>

#include "core/call/gateway.h"
#include "core/base/json.h"
#include "policy/policy.h"
#include "policy/scopes.h"
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
    struct tg_slice host = tg_http_req_header(c->req, "host");
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

void tg_oauth_meta_resource(struct tg_server *srv, struct tg_conn *c, struct tg_slice path, struct tg_buf *out,
                            size_t *base_len)
{
    size_t start = out->len;
    tg_oauth_meta_base_url(srv, c, out);
    *base_len = out->len - start;
    size_t cut = path.len;
    while (cut > 0 && path.ptr[cut - 1] != '/')
        cut--;
    if (cut > 0)
        cut--; /* keep /NAME, drop /ENDPOINT */
    tg_buf_append(out, path.ptr, cut);
    tg_buf_appends(out, "/mcp");
}

/* The issuers whose tokens can be used at upstream u: those some grant lists (grants[].issuers)
 * whose policy for u is not the fail-closed deny-everything one. As JSON strings, comma-separated. */
static void route_issuers(const struct tg_conf *conf, int u, struct tg_buf *b)
{
    int any = 0;
    for (size_t i = 0; i < conf->njwt; i++) {
        const char *iss = conf->jwt[i].issuer;
        int usable = 0;
        for (size_t k = 0; k < conf->ngrants && !usable; k++) {
            const struct tg_grant_conf *g = &conf->grants[k];
            for (size_t m = 0; m < g->nissuers && !usable; m++)
                usable = strcmp(g->issuers[m], iss) == 0 && tg_conf_policy_for(conf, g, u) != conf->deny_all;
        }
        if (!usable)
            continue;
        if (any++)
            tg_buf_append(b, ",", 1);
        tg_json_write_string(b, iss, strlen(iss));
    }
}

/* "scopes_supported":[...], (with its comma) from every policy a grant uses at upstream u, when
 * any of them names scopes; nothing otherwise. */
static void route_scopes(const struct tg_conf *conf, int u, struct tg_buf *b)
{
    char set[TG_SCOPES_MAX * 2] = "";
    for (size_t k = 0; k < conf->ngrants; k++)
        tg_policy_scopes_all(tg_conf_policy_for(conf, &conf->grants[k], u), set, sizeof(set));
    if (set[0] == '\0')
        return;
    tg_buf_appends(b, "\"scopes_supported\":[");
    for (const char *p = set; *p != '\0';) {
        const char *sp = strchr(p, ' ');
        size_t len = sp ? (size_t)(sp - p) : strlen(p);
        if (p != set)
            tg_buf_append(b, ",", 1);
        tg_json_write_string(b, p, len);
        p += len + (sp != NULL);
    }
    tg_buf_appends(b, "],");
}

/* RFC 9728 §2's DPoP members (with their comma) when an issuer takes DPoP: the proof algorithms
 * (the issuers' algorithms but HMAC) and whether every issuer requires bound tokens. */
static void route_dpop(const struct tg_conf *conf, struct tg_buf *b)
{
    unsigned algs = 0;
    int all_required = 1;
    for (size_t i = 0; i < conf->njwt; i++) {
        if (conf->jwt[i].dpop != TG_DPOP_OFF)
            algs |= (conf->jwt[i].algs != 0 ? conf->jwt[i].algs : TG_JWT_ALGS_DEFAULT) & ~TG_JWT_ALG_HS256;
        all_required &= conf->jwt[i].dpop == TG_DPOP_REQUIRED;
    }
    if (algs == 0)
        return;
    struct tg_buf names;
    tg_buf_init(&names);
    tg_dpop_algs_names(algs, &names);
    tg_buf_appends(b, "\"dpop_signing_alg_values_supported\":[\"");
    for (size_t i = 0; i < names.len; i++) {
        if (names.base[i] == ' ')
            tg_buf_appends(b, "\",\"");
        else
            tg_buf_append(b, &names.base[i], 1);
    }
    tg_buf_appendf(b, "\"],\"dpop_bound_access_tokens_required\":%s,", all_required ? "true" : "false");
    tg_buf_dispose(&names);
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
    route_issuers(srv->conf, (int)(uc - srv->conf->upstreams), &b);
    tg_buf_appends(&b, "],");
    route_scopes(srv->conf, (int)(uc - srv->conf->upstreams), &b);
    route_dpop(srv->conf, &b);
    tg_buf_appends(&b, "\"bearer_methods_supported\":[\"header\"],\"resource_name\":");
    char name[96];
    snprintf(name, sizeof(name), "tollgate/%s", uc->name);
    tg_json_write_string(&b, name, strlen(name));
    tg_buf_appends(&b, "}");
    tg_http_respond(c, 200, "Cache-Control: max-age=300\r\n", "application/json", b.base, b.len);
    tg_buf_dispose(&b);
    tg_buf_dispose(&url);
}
