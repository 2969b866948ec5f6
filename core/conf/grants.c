#include "core/conf/conf.h"

#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/conf/internal.h"
#include "core/base/json.h"
#include "policy/jwt.h"
#include "policy/dpop.h"
#include "policy/jwt_cache.h"
#include "policy/keyring.h"
#include "policy/pins.h"
#include "policy/policy.h"
#include "policy/uri.h"

/* grants[].issuers = [ "https://idp.example/", … ]: the JWT issuers whose tokens may name this
 * grant. Whether each is a configured jwt[].issuer is checked once those are loaded. */
static void load_issuers(struct loader *ld, const config_setting_t *g, struct tg_grant_conf *gc, const char *ctx)
{
    const config_setting_t *l = config_setting_get_member(g, "issuers");
    if (l == NULL)
        return;
    char ictx[64];
    snprintf(ictx, sizeof(ictx), "%s.issuers", ctx);
    if ((!config_setting_is_array(l) && !config_setting_is_list(l)) || config_setting_length(l) == 0) {
        tg__conf_errf(ld, l, ictx, "must be a non-empty array of jwt issuers [ \"https://idp.example/\" ]");
        return;
    }
    size_t n = (size_t)config_setting_length(l);
    gc->issuers = tg_xcalloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        const char *v = config_setting_get_string_elem(l, (int)i);
        if (v == NULL || v[0] == '\0') {
            tg__conf_errf(ld, l, ictx, "must be a non-empty array of jwt issuers [ \"https://idp.example/\" ]");
            continue;
        }
        const char *why = NULL;
        char var[128] = "";
        char *e = tg_conf_expand_env(v, &why, var, sizeof(var)); /* as jwt[].issuer is */
        if (e == NULL) {
            tg__conf_errf(ld, l, ictx, "%s%s%s", why, var[0] ? ": " : "", var);
            continue;
        }
        for (size_t k = 0; k < gc->nissuers; k++)
            if (strcmp(gc->issuers[k], e) == 0)
                tg__conf_errf(ld, l, ictx, "lists \"%s\" twice", e);
        gc->issuers[gc->nissuers++] = e;
    }
}

/* grants[].scopes = [ "deploy", … ]: the scopes its credentials other than a JWT (which carries
 * its own) hold, for policies that require scopes. Each a scope-token, at most TG_SCOPES_MAX_COUNT. */
static void load_grant_scopes(struct loader *ld, const config_setting_t *g, struct tg_grant_conf *gc,
                              const char *ctx)
{
    const config_setting_t *l = config_setting_get_member(g, "scopes");
    if (l == NULL)
        return;
    char sctx[64];
    snprintf(sctx, sizeof(sctx), "%s.scopes", ctx);
    int n = config_setting_length(l);
    if ((!config_setting_is_array(l) && !config_setting_is_list(l)) || n == 0 || n > TG_SCOPES_MAX_COUNT) {
        tg__conf_errf(ld, l, sctx, "must be a non-empty array of at most %d scopes [ \"deploy\" ]",
                      TG_SCOPES_MAX_COUNT);
        return;
    }
    char set[TG_SCOPES_MAX] = "";
    for (int i = 0; i < n; i++) {
        const char *v = config_setting_get_string_elem(l, i);
        if (v == NULL || !tg_scope_token_ok(v, strlen(v))) {
            tg__conf_errf(ld, l, sctx, "entry %d must be a scope: printable ASCII without spaces, '\"' or '\\'", i);
            return;
        }
        if (tg_scopes_has(set, v))
            tg__conf_errf(ld, l, sctx, "lists \"%s\" twice", v);
        else if (tg_scopes_add(set, sizeof(set), v) != 0) {
            tg__conf_errf(ld, l, sctx, "longer than %d bytes", TG_SCOPES_MAX - 1);
            return;
        }
    }
    gc->scopes = tg_xstrdup(set);
}

/* grants[].attributes = { tenant = "acme"; region = "eu"; }: what a policy's "set" may bind
 * arguments to (${grant.tenant}). Names as the templates spell them, values strings. */
static void load_grant_attributes(struct loader *ld, const config_setting_t *g, struct tg_grant_conf *gc,
                                  const char *ctx)
{
    const config_setting_t *l = config_setting_get_member(g, "attributes");
    if (l == NULL)
        return;
    char sctx[64];
    snprintf(sctx, sizeof(sctx), "%s.attributes", ctx);
    int n = config_setting_length(l);
    if (!config_setting_is_group(l) || n > 64) {
        tg__conf_errf(ld, l, sctx, "must be a group of at most 64 strings { tenant = \"acme\"; }");
        return;
    }
    gc->attributes = tg_xcalloc((size_t)(2 * n + 1), sizeof(char *));
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        const char *name = config_setting_name(e);
        const char *v = config_setting_get_string(e);
        size_t nl = name != NULL ? strlen(name) : 0;
        int ok = nl > 0 && nl <= 64;
        for (size_t k = 0; ok && k < nl; k++)
            ok = (name[k] >= 'a' && name[k] <= 'z') || (name[k] >= 'A' && name[k] <= 'Z') ||
                 (name[k] >= '0' && name[k] <= '9') || name[k] == '_' || name[k] == '-';
        if (!ok) {
            tg__conf_errf(ld, e, sctx, "\"%s\": a name is 1 to 64 letters, digits, _ and -", name ? name : "");
            continue;
        }
        const char *why = NULL;
        char var[128] = "";
        char *x = v != NULL ? tg_conf_expand_env(v, &why, var, sizeof(var)) : NULL;
        if (v != NULL && x == NULL) {
            tg__conf_errf(ld, e, sctx, "%s: %s%s%s", name, why, var[0] ? ": " : "", var);
            continue;
        }
        if (x == NULL || strlen(x) > 1024) {
            tg__conf_errf(ld, e, sctx, "%s must be a string of at most 1024 bytes", name);
            free(x);
            continue;
        }
        gc->attributes[2 * gc->nattributes] = tg_xstrdup(name);
        gc->attributes[2 * gc->nattributes + 1] = x;
        gc->nattributes++;
    }
}

/* Every grants[].issuers entry is some jwt[].issuer, byte for byte (as a token's iss is compared):
 * a typo would otherwise leave the grant silently unreachable. */
static void check_grant_issuers(struct loader *ld, config_t *cfg, const struct tg_conf *c)
{
    const config_setting_t *gl = config_lookup(cfg, "grants");
    for (size_t i = 0; gl && i < c->ngrants; i++) {
        const struct tg_grant_conf *gc = &c->grants[i];
        for (size_t k = 0; k < gc->nissuers; k++) {
            size_t j = 0;
            while (j < c->njwt && (c->jwt[j].issuer == NULL || strcmp(c->jwt[j].issuer, gc->issuers[k]) != 0))
                j++;
            if (j < c->njwt)
                continue;
            const config_setting_t *g = config_setting_get_elem(gl, (unsigned)i);
            tg__conf_errf(ld, g ? config_setting_get_member(g, "issuers") : NULL, "issuers",
                          "grant %s: \"%s\" is no jwt[].issuer (the issuer is compared exactly, trailing / included)",
                          gc->name ? gc->name : "?", gc->issuers[k]);
        }
    }
}

void tg__conf_load_grants(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *l = config_lookup(cfg, "grants");
    if (l == NULL)
        return;
    if (!config_setting_is_list(l)) {
        tg__conf_errf(ld, l, "grants", "must be a list of ( { name = …; token_sha256 = …; } )");
        return;
    }
    c->ngrants = (size_t)config_setting_length(l);
    c->grants = tg_xcalloc(c->ngrants, sizeof(*c->grants));
    int anon = 0;
    for (size_t i = 0; i < c->ngrants; i++) {
        const config_setting_t *g = config_setting_get_elem(l, (unsigned)i);
        struct tg_grant_conf *gc = &c->grants[i];
        char ctx[32];
        snprintf(ctx, sizeof(ctx), "grants[%zu]", i);
        if (!config_setting_is_group(g)) {
            tg__conf_errf(ld, g, ctx, "must be a group");
            continue;
        }
        static const char *const known[] = {"name", "token_sha256", "anonymous", "max_sessions", "policies",
                                            "tls_subject", "roots", "issuers", "scopes",
                                            "upstream_headers", "attributes", NULL};
        tg__conf_check_members(ld, g, known, ctx);
        gc->name = tg__conf_get_str(ld, g, "name", NULL, 1, ctx);
        const config_setting_t *ms = config_setting_get_member(g, "max_sessions");
        if (ms != NULL) {
            if (config_setting_type(ms) != CONFIG_TYPE_INT || config_setting_get_int(ms) < 1 ||
                config_setting_get_int(ms) > 10000000)
                tg__conf_errf(ld, ms, "max_sessions", "must be an integer 1..10000000");
            else
                gc->max_sessions = config_setting_get_int(ms);
        }
        gc->has_token = tg__conf_parse_sha256(ld, g, ctx, gc->token_sha256);
        gc->anonymous = tg__conf_get_bool(ld, g, "anonymous", 0, ctx);
        gc->tls_subject = tg__conf_get_str(ld, g, "tls_subject", NULL, 0, ctx);
        if (gc->tls_subject != NULL && gc->tls_subject[0] == '\0')
            tg__conf_errf(ld, config_setting_get_member(g, "tls_subject"), "tls_subject",
                          "must name a certificate subject (\"O=acme, CN=alice\") or a CN (\"alice\")");
        for (size_t k = 0; k < i && gc->tls_subject; k++)
            if (c->grants[k].tls_subject && strcmp(gc->tls_subject, c->grants[k].tls_subject) == 0)
                tg__conf_errf(ld, config_setting_get_member(g, "tls_subject"), "tls_subject",
                              "\"%s\" already names grant %s", gc->tls_subject, c->grants[k].name);
        load_issuers(ld, g, gc, ctx);
        load_grant_scopes(ld, g, gc, ctx);
        load_grant_attributes(ld, g, gc, ctx);
        if (!gc->has_token && !gc->anonymous && gc->tls_subject == NULL) {
            if (gc->nissuers == 0)
                tg__conf_errf(ld, g, ctx,
                              "needs token_sha256, tls_subject, anonymous = true, or issuers = [ \"…\" ] (the jwt "
                              "issuers whose tokens may name it)");
            else
                gc->jwt_only = 1;
        }
        tg__conf_load_roots(ld, g, &gc->roots, ctx);
        c->grant_roots |= gc->roots.pinned;
        if (gc->anonymous && anon++)
            tg__conf_errf(ld, g, ctx, "only one grant may be anonymous");
        for (size_t k = 0; k < i; k++)
            if (gc->name && c->grants[k].name && strcmp(gc->name, c->grants[k].name) == 0)
                tg__conf_errf(ld, g, ctx, "duplicate grant name \"%s\"", gc->name);
    }
}

/* ---- pinned roots ----------------------------------------------------------------------
 *
 * A root is a file:// URI (the only kind MCP defines), kept in one normal form so that what the
 * operator wrote is what the server gets: the scheme lower-cased, an empty host (localhost is
 * dropped), percent-encoded unreserved characters decoded and other escapes upper-cased, no
 * trailing slash. Refused, not repaired: any other scheme or host, a query or fragment, spaces,
 * control or non-ASCII bytes, an empty, "." or ".." segment (encoded too), an encoded "/" or "\"
 * or NUL. A root that names something else than it seems would widen what the server may touch. */

#define TG_ROOTS_MAX 64
#define TG_ROOT_URI_MAX 4096
#define TG_ROOT_NAME_MAX 256

/* The normal form of root uri in out (malloc'd), or NULL with *why: its escapes as every
 * resource URI's (policy/uri.h), with a root's own refusals around them. */
static char *root_normalise(const char *uri, const char **why)
{
    const char *p;
    if (strncasecmp(uri, "file://", 7) != 0) {
        *why = "must be a file:// URI (MCP roots are file:// URIs)";
        return NULL;
    }
    p = uri + 7;
    if (strncasecmp(p, "localhost/", 10) == 0)
        p += 9;
    if (*p != '/') {
        *why = "must be file:///absolute/path (no host but localhost)";
        return NULL;
    }
    if (strlen(uri) > TG_ROOT_URI_MAX) {
        *why = "is longer than 4096 bytes";
        return NULL;
    }
    size_t n = strlen(p);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= 0x20 || c >= 0x7f || c == '?' || c == '#' || c == '\\' || c == '"') {
            *why = "has a space, control or non-ASCII byte, \\, a quote, a query or a fragment (percent-encode it)";
            return NULL;
        }
    }
    char *out = tg_xmalloc(7 + n + 1); /* the normal form is never longer */
    memcpy(out, "file://", 7);
    char *path = out + 7;
    long w = tg_uri_normalize_escapes(p, n, path, why);
    if (w == -1)
        *why = "has a % that is not followed by two hex digits";
    else if (w < 0)
        *why = "has an encoded /, \\, NUL or control character";
    /* The decoded path's segments (so %2e%2e is ".."): none empty but a last one, none "." or "..". */
    for (size_t seg = 1, i = 1; w >= 0 && i <= (size_t)w; i++) {
        if (i < (size_t)w && path[i] != '/')
            continue;
        size_t sn = i - seg;
        if ((sn == 0 && i < (size_t)w) || (sn == 1 && path[seg] == '.') ||
            (sn == 2 && path[seg] == '.' && path[seg + 1] == '.')) {
            *why = sn == 0 ? "has an empty path segment (//)" : "has a \".\" or \"..\" segment (plain or percent-encoded)";
            w = -1;
        }
        seg = i + 1;
    }
    if (w < 0) {
        free(out);
        return NULL;
    }
    if (w > 1 && path[w - 1] == '/')
        w--; /* file:///srv/data/ is file:///srv/data; file:/// stays */
    path[w] = '\0';
    return out;
}

void tg__conf_load_roots(struct loader *ld, const config_setting_t *grp, struct tg_roots *r, const char *ctx)
{
    const config_setting_t *l = config_setting_get_member(grp, "roots");
    if (l == NULL)
        return;
    char rctx[120];
    snprintf(rctx, sizeof(rctx), "%s.roots", ctx);
    if (!config_setting_is_array(l) && !config_setting_is_list(l)) {
        tg__conf_errf(ld, l, rctx, "must be a list of file:// URIs [ \"file:///srv/data\", … ] (or groups { uri; name; })");
        return;
    }
    int n = config_setting_length(l);
    if (n > TG_ROOTS_MAX) {
        tg__conf_errf(ld, l, rctx, "has %d roots; at most %d", n, TG_ROOTS_MAX);
        return;
    }
    r->pinned = 1;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"roots\":[");
    char **seen = tg_xcalloc((size_t)n + 1, sizeof(char *));
    int listed = 0;
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(l, (unsigned)i);
        char ectx[140];
        snprintf(ectx, sizeof(ectx), "%s[%d]", rctx, i);
        const char *uri = NULL, *name = NULL;
        if (config_setting_type(e) == CONFIG_TYPE_STRING) {
            uri = config_setting_get_string(e);
        } else if (config_setting_is_group(e)) {
            static const char *const known[] = {"uri", "name", NULL};
            tg__conf_check_members(ld, e, known, ectx);
            const config_setting_t *u = config_setting_get_member(e, "uri");
            const config_setting_t *nm = config_setting_get_member(e, "name");
            uri = u != NULL ? config_setting_get_string(u) : NULL;
            if (nm != NULL && (name = config_setting_get_string(nm)) == NULL)
                tg__conf_errf(ld, nm, ectx, "name must be a string");
            if (u == NULL)
                tg__conf_errf(ld, e, ectx, "needs uri = \"file:///…\"");
            else if (uri == NULL)
                tg__conf_errf(ld, u, ectx, "uri must be a string");
        } else {
            tg__conf_errf(ld, e, ectx, "must be a file:// URI string or a group { uri = \"file:///…\"; name = \"…\"; }");
        }
        if (uri == NULL)
            continue;
        const char *why = NULL;
        char *norm = root_normalise(uri, &why);
        if (norm == NULL) {
            tg__conf_errf(ld, e, ectx, "\"%.200s\" %s", uri, why);
            continue;
        }
        if (name != NULL) {
            int bad = name[0] == '\0' || strlen(name) > TG_ROOT_NAME_MAX;
            for (const char *q = name; *q; q++)
                bad |= (unsigned char)*q < 0x20 || *q == 0x7f;
            if (bad)
                tg__conf_errf(ld, e, ectx, "name must be 1-256 bytes without control characters");
        }
        for (int k = 0; k < i; k++)
            if (seen[k] != NULL && strcmp(seen[k], norm) == 0)
                tg__conf_errf(ld, e, ectx, "\"%s\" is pinned twice", norm);
        if (listed++)
            tg_buf_appends(&b, ",");
        tg_buf_appends(&b, "{\"uri\":");
        tg_json_write_string(&b, norm, strlen(norm));
        if (name != NULL) {
            tg_buf_appends(&b, ",\"name\":");
            tg_json_write_string(&b, name, strlen(name));
        }
        tg_buf_appends(&b, "}");
        seen[i] = norm;
    }
    tg_buf_appends(&b, "]}");
    tg_buf_append(&b, "", 1);
    r->result = tg_buf_release(&b);
    for (int i = 0; i < n; i++)
        free(seen[i]);
    free(seen);
}

void tg__conf_roots_free(struct tg_roots *r)
{
    free(r->result);
    r->result = NULL;
}

const struct tg_roots *tg_conf_roots_for(const struct tg_grant_conf *g, const struct tg_upstream_conf *u)
{
    if (g != NULL && g->roots.pinned)
        return &g->roots;
    return u != NULL && u->roots.pinned ? &u->roots : NULL;
}

/* jwt[].algorithms: the signature algorithms an issuer's tokens may use. Strict: "none" (unsigned)
 * is refused by name, as is anything the verifier does not know; HS256 (a shared secret, never
 * what an identity provider publishes) only when listed, and only with oct keys. Absent: RS256
 * and ES256. */
static unsigned jwt_algorithms(struct loader *ld, const config_setting_t *s, const char *issuer)
{
    if (s == NULL)
        return TG_JWT_ALGS_DEFAULT;
    const char *iss = issuer ? issuer : "?";
    if (!config_setting_is_array(s) && !config_setting_is_list(s)) {
        tg__conf_errf(ld, s, "algorithms", "issuer %s: must be a list of strings, e.g. [\"RS256\", \"ES256\"]", iss);
        return TG_JWT_ALGS_DEFAULT;
    }
    unsigned bits = 0;
    int n = config_setting_length(s);
    for (int i = 0; i < n; i++) {
        const config_setting_t *e = config_setting_get_elem(s, (unsigned)i);
        const char *v = config_setting_type(e) == CONFIG_TYPE_STRING ? config_setting_get_string(e) : NULL;
        if (v == NULL)
            tg__conf_errf(ld, e, "algorithms", "issuer %s: element %d must be a string", iss, i);
        else if (strcmp(v, "none") == 0)
            tg__conf_errf(ld, e, "algorithms", "issuer %s: \"none\" (unsigned tokens) is never accepted", iss);
        else if (strncmp(v, "HS", 2) == 0 && strcmp(v, "HS256") != 0)
            tg__conf_errf(ld, e, "algorithms", "issuer %s: \"%s\" is not supported; HMAC is HS256 only", iss, v);
        else if (tg_jwt_alg_bit(v) == 0)
            tg__conf_errf(ld, e, "algorithms", "issuer %s: unknown algorithm \"%s\" (RS256, PS256, ES256 or HS256)", iss,
                          v);
        else
            bits |= tg_jwt_alg_bit(v);
    }
    if (n == 0)
        tg__conf_errf(ld, s, "algorithms", "issuer %s: empty; list at least one of RS256, PS256, ES256, HS256", iss);
    return bits != 0 ? bits : TG_JWT_ALGS_DEFAULT;
}

/* jwt[].dpop and dpop_window_s: strict values; a proof is signed with a public key, so an issuer
 * with DPoP must list an algorithm besides HS256. */
static void jwt_dpop(struct loader *ld, const config_setting_t *g, struct tg_jwt_conf *j)
{
    static const char *const modes[] = {"off", "optional", "required"};
    j->dpop = TG_DPOP_OFF;
    j->dpop_window_s = 60;
    const config_setting_t *m = config_setting_get_member(g, "dpop");
    if (m != NULL) {
        const char *v = config_setting_type(m) == CONFIG_TYPE_STRING ? config_setting_get_string(m) : NULL;
        int found = -1;
        for (int i = 0; v != NULL && i < 3; i++)
            if (strcmp(v, modes[i]) == 0)
                found = i;
        if (found < 0)
            tg__conf_errf(ld, m, "dpop", "must be \"off\", \"optional\" or \"required\"");
        else
            j->dpop = found;
    }
    const config_setting_t *w = config_setting_get_member(g, "dpop_window_s");
    if (w != NULL) {
        if (config_setting_type(w) != CONFIG_TYPE_INT || config_setting_get_int(w) < 1 ||
            config_setting_get_int(w) > 3600)
            tg__conf_errf(ld, w, "dpop_window_s", "must be an integer 1..3600");
        else
            j->dpop_window_s = config_setting_get_int(w);
    }
    if (j->dpop != TG_DPOP_OFF && (j->algs & ~TG_JWT_ALG_HS256) == 0)
        tg__conf_errf(ld, m, "dpop", "issuer %s: DPoP proofs are signed with a public key; list RS256, ES256 or PS256 in "
                      "algorithms", j->issuer ? j->issuer : "?");
}

static void load_jwt_list(struct loader *ld, config_t *cfg, struct tg_conf *c);

#define JWT(f) offsetof(struct tg_jwt_conf, f)
static const struct int_directive jwt_directives[] = {
    {"refresh_min_s", JWT(refresh_min_s), 1, 86400, 60, "fetched keys kept at least; unknown-kid refetch spacing"},
    {"refresh_max_s", JWT(refresh_max_s), 1, 31536000, 86400, "fetched keys kept at most"},
    {"fetch_timeout_ms", JWT(fetch_timeout_ms), 100, 120000, 10000, "one fetch of keys or discovery, whole"},
    {NULL, 0, 0, 0, 0, NULL},
};

/* Where an issuer's keys come from: exactly one of jwks_file, jwks_url and discovery = true. A
 * fetched source must be https:// (plain http:// only to loopback); so must a discovered issuer,
 * whose documents are fetched from it. Nothing is fetched here: the server fetches when it starts
 * (so `tollgate -t` never reaches the network). */
static void jwt_source(struct loader *ld, const config_setting_t *g, struct tg_jwt_conf *j, const char *ctx)
{
    j->jwks_url = tg__conf_get_str(ld, g, "jwks_url", NULL, 0, ctx);
    j->discovery = tg__conf_get_bool(ld, g, "discovery", 0, ctx);
    j->ca = tg__conf_path(ld, tg__conf_get_str(ld, g, "ca", NULL, 0, ctx));
    tg__conf_load_ints(ld, g, jwt_directives, j, ctx, 0);
    int n = (j->jwks_file != NULL) + (j->jwks_url != NULL) + (j->discovery != 0);
    const char *why = NULL;
    if (n != 1)
        tg__conf_errf(ld, g, ctx, "needs exactly one of jwks_file, jwks_url and discovery = true (it has %s)",
                      n == 0 ? "none" : "several");
    else if (j->jwks_url != NULL && tg_keyring_url_ok(j->jwks_url, &why) != 0)
        tg__conf_errf(ld, config_setting_get_member(g, "jwks_url"), "jwks_url", "\"%s\" %s", j->jwks_url, why);
    else if (j->discovery && j->issuer != NULL && tg_keyring_url_ok(j->issuer, &why) != 0)
        tg__conf_errf(ld, config_setting_get_member(g, "discovery"), "discovery",
                      "the issuer \"%s\" %s: its discovery document is fetched from it", j->issuer, why);
    if (j->ca != NULL && j->jwks_file != NULL)
        tg__conf_errf(ld, config_setting_get_member(g, "ca"), "ca", "is for jwks_url and discovery (a jwks_file is not fetched)");
    else if (j->ca != NULL)
        tg__conf_check_readable(ld, config_setting_get_member(g, "ca"), "ca", j->ca);
    if (j->refresh_min_s > j->refresh_max_s)
        tg__conf_errf(ld, config_setting_get_member(g, "refresh_min_s"), "refresh_min_s",
                      "%d is above refresh_max_s (%d)", j->refresh_min_s, j->refresh_max_s);
}

void tg__conf_load_jwt(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    load_jwt_list(ld, cfg, c);
    check_grant_issuers(ld, cfg, c);
    /* jwt[].grant: a grant that exists and takes this issuer, else no token of it could ever pass */
    const config_setting_t *l = config_lookup(cfg, "jwt");
    for (size_t i = 0; l != NULL && i < c->njwt; i++) {
        const struct tg_jwt_conf *j = &c->jwt[i];
        const struct tg_grant_conf *gc = j->grant != NULL ? tg_conf_find_grant(c, j->grant) : NULL;
        size_t k = 0;
        while (gc != NULL && j->issuer != NULL && k < gc->nissuers && strcmp(gc->issuers[k], j->issuer) != 0)
            k++;
        if (j->grant != NULL && (gc == NULL || k == gc->nissuers))
            tg__conf_errf(ld, config_setting_get_member(config_setting_get_elem(l, (unsigned)i), "grant"), "grant",
                          "issuer %s: \"%s\" is no grant that lists this issuer in grants[].issuers",
                          j->issuer ? j->issuer : "?", j->grant);
    }
}

static void load_jwt_list(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *l = config_lookup(cfg, "jwt");
    if (l == NULL)
        return;
    if (!config_setting_is_list(l)) {
        tg__conf_errf(ld, l, "jwt",
                      "must be a list of ( { issuer = …; audience = …; jwks_file = …; grant_claim = …; } )");
        return;
    }
    c->njwt = (size_t)config_setting_length(l);
    c->jwt = tg_xcalloc(c->njwt + 1, sizeof(*c->jwt));
    for (size_t i = 0; i < c->njwt; i++) {
        const config_setting_t *g = config_setting_get_elem(l, (unsigned)i);
        struct tg_jwt_conf *j = &c->jwt[i];
        char ctx[32];
        snprintf(ctx, sizeof(ctx), "jwt[%zu]", i);
        if (!config_setting_is_group(g)) {
            tg__conf_errf(ld, g, ctx, "must be a group");
            continue;
        }
        static const char *const known[] = {"issuer",        "audience",      "jwks_file",        "jwks_url",
                                            "discovery",     "ca",            "refresh_min_s",    "refresh_max_s",
                                            "fetch_timeout_ms", "grant_claim", "skew_s",          "algorithms",
                                            "subject_claim", "grant",    "dpop",
                                            "dpop_window_s", "cache_entries", NULL};
        tg__conf_check_members(ld, g, known, ctx);
        j->issuer = tg__conf_get_str(ld, g, "issuer", NULL, 1, ctx);
        /* Without an audience a token's aud must name the resource it is used at (RFC 8707):
         * public_url + the route's path. That URL must be the operator's, never one made of a
         * request's Host header, so without public_url there is nothing to check aud against. */
        j->audience = tg__conf_get_str(ld, g, "audience", NULL, 0, ctx);
        if (j->audience == NULL && config_lookup(cfg, "public_url") == NULL)
            tg__conf_errf(ld, g, ctx, "needs audience, or public_url set (then a token's aud must name the "
                                      "route's resource URL, public_url + its path)");
        j->jwks_file = tg__conf_path(ld, tg__conf_get_str(ld, g, "jwks_file", NULL, 0, ctx));
        jwt_source(ld, g, j, ctx);
        j->grant = tg__conf_get_str(ld, g, "grant", NULL, 0, ctx);
        if (j->grant != NULL && config_setting_get_member(g, "grant_claim") != NULL)
            tg__conf_errf(ld, config_setting_get_member(g, "grant"), "grant",
                          "issuer %s: grant and grant_claim exclude each other (grant: every token names that grant)",
                          j->issuer ? j->issuer : "?");
        j->grant_claim = j->grant != NULL ? NULL : tg__conf_get_str(ld, g, "grant_claim", "sub", 0, ctx);
        j->subject_claim = tg__conf_get_str(ld, g, "subject_claim", "sub", 0, ctx);
        j->skew_s = 60;
        const config_setting_t *sk = config_setting_get_member(g, "skew_s");
        if (sk != NULL) {
            if (config_setting_type(sk) != CONFIG_TYPE_INT || config_setting_get_int(sk) < 0 ||
                config_setting_get_int(sk) > 3600)
                tg__conf_errf(ld, sk, "skew_s", "must be an integer 0..3600");
            else
                j->skew_s = config_setting_get_int(sk);
        }
        j->algs = jwt_algorithms(ld, config_setting_get_member(g, "algorithms"), j->issuer);
        jwt_dpop(ld, g, j);
        int slots = 1024;
        const config_setting_t *ce = config_setting_get_member(g, "cache_entries");
        if (ce != NULL) {
            if (config_setting_type(ce) != CONFIG_TYPE_INT || config_setting_get_int(ce) < 0 ||
                config_setting_get_int(ce) > 1000000)
                tg__conf_errf(ld, ce, "cache_entries", "must be an integer 0..1000000");
            else
                slots = config_setting_get_int(ce);
        }
        j->cache = tg_jwt_cache_new((size_t)slots);
        if (j->jwks_file != NULL) {
            struct tg_buf jerr;
            tg_buf_init(&jerr);
            if (tg_jwks_load(j->jwks_file, &j->jwks, &jerr) != 0) {
                tg_buf_append(&jerr, "", 1);
                for (const char *q = jerr.base; q && *q;) {
                    const char *nl = strchr(q, '\n');
                    size_t n = nl ? (size_t)(nl - q) : strlen(q);
                    tg__conf_errf(ld, config_setting_get_member(g, "jwks_file"), "jwks_file", "%.*s", (int)n, q);
                    q += n + (nl ? 1 : 0);
                }
            }
            tg_buf_dispose(&jerr);
        }
    }
}

static struct tg_policy *load_policy_file(struct loader *ld, const config_setting_t *s, const char *directive,
                                          const char *path, struct tg_conf *c)
{
    struct tg_buf perr, pwarn;
    tg_buf_init(&perr);
    tg_buf_init(&pwarn);
    struct tg_policy *p = NULL;
    if (tg_policy_load(path, &p, &perr, &pwarn) != 0) {
        /* The policy module names the file and the path inside it; say which directive loaded it. */
        const char *line = perr.base ? perr.base : "";
        tg_buf_append(&perr, "", 1);
        for (const char *q = line; *q;) {
            const char *nl = strchr(q, '\n');
            size_t n = nl ? (size_t)(nl - q) : strlen(q);
            tg__conf_errf(ld, s, directive, "%.*s", (int)n, q);
            q += n + (nl ? 1 : 0);
        }
    }
    if (pwarn.len) {
        tg_buf_append(&c->warnings, pwarn.base, pwarn.len);
    }
    tg_buf_dispose(&perr);
    tg_buf_dispose(&pwarn);
    return p;
}

/* An upstream's pins = "FILE" (policy/pins.h): strict, like a policy; the errors name the file
 * and the path inside it. */
static void load_pins(struct loader *ld, const config_setting_t *g, struct tg_conf *c, struct tg_upstream_conf *u)
{
    if (u->pins_path == NULL)
        return;
    struct tg_buf perr;
    tg_buf_init(&perr);
    char d[120];
    snprintf(d, sizeof(d), "upstreams.%s.pins", u->name ? u->name : "?");
    c->has_pins = 1;
    if (tg_pins_load(u->pins_path, u->name, &u->pins, &perr, &c->warnings) != 0) {
        tg_buf_append(&perr, "", 1);
        for (const char *q = perr.base; *q;) {
            size_t n = strcspn(q, "\n");
            tg__conf_errf(ld, g ? config_setting_get_member(g, "pins") : NULL, d, "%.*s", (int)n, q);
            q += n + (q[n] ? 1 : 0);
        }
    }
    tg_buf_dispose(&perr);
}

/* Policies, after upstreams are known: the upstream's own, then per-grant overrides. */
void tg__conf_load_policies(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *ul = config_lookup(cfg, "upstreams");
    for (size_t i = 0; i < c->nupstreams; i++) {
        struct tg_upstream_conf *u = &c->upstreams[i];
        if (u->policy_path == NULL) {
            tg_buf_appendf(&c->warnings,
                           "%s: upstreams.%s: no policy: every tool is denied and hidden (write a policy with "
                           "\"default\": \"allow\" to pass everything)\n",
                           ld->path, u->name ? u->name : "?");
            continue;
        }
        const config_setting_t *g = ul ? config_setting_get_elem(ul, (unsigned)i) : NULL;
        char d[120];
        snprintf(d, sizeof(d), "upstreams.%s.policy", u->name ? u->name : "?");
        u->policy = load_policy_file(ld, g ? config_setting_get_member(g, "policy") : NULL, d, u->policy_path, c);
    }
    for (size_t i = 0; i < c->nupstreams && !(ld->flags & TG_CONF_NO_PINS); i++)
        load_pins(ld, ul ? config_setting_get_elem(ul, (unsigned)i) : NULL, c, &c->upstreams[i]);
    const config_setting_t *gl = config_lookup(cfg, "grants");
    for (size_t i = 0; gl && i < c->ngrants; i++) {
        struct tg_grant_conf *gc = &c->grants[i];
        const config_setting_t *g = config_setting_get_elem(gl, (unsigned)i);
        const config_setting_t *pl = g ? config_setting_get_member(g, "policies") : NULL;
        if (pl == NULL)
            continue;
        char ctx[120];
        snprintf(ctx, sizeof(ctx), "grants.%s.policies", gc->name ? gc->name : "?");
        if (!config_setting_is_list(pl)) {
            tg__conf_errf(ld, pl, ctx, "must be a list of ( { upstream = …; policy = …; } )");
            continue;
        }
        gc->npolicies = (size_t)config_setting_length(pl);
        gc->policies = tg_xcalloc(gc->npolicies + 1, sizeof(*gc->policies));
        for (size_t k = 0; k < gc->npolicies; k++) {
            const config_setting_t *e = config_setting_get_elem(pl, (unsigned)k);
            struct tg_grant_policy *gp = &gc->policies[k];
            gp->upstream = -1;
            char ectx[160];
            snprintf(ectx, sizeof(ectx), "%s[%zu]", ctx, k);
            if (!config_setting_is_group(e)) {
                tg__conf_errf(ld, e, ectx, "must be a group { upstream = …; policy = …; }");
                continue;
            }
            static const char *const known[] = {"upstream", "policy", NULL};
            tg__conf_check_members(ld, e, known, ectx);
            char *un = tg__conf_get_str(ld, e, "upstream", NULL, 1, ectx);
            gp->path = tg__conf_path(ld, tg__conf_get_str(ld, e, "policy", NULL, 1, ectx));
            if (un != NULL && tg_conf_find_upstream(c, tg_slice_cstr(un), &gp->upstream) == NULL)
                tg__conf_errf(ld, config_setting_get_member(e, "upstream"), "upstream", "no upstream named \"%s\"", un);
            for (size_t m = 0; m < k; m++)
                if (gp->upstream >= 0 && gc->policies[m].upstream == gp->upstream)
                    tg__conf_errf(ld, e, ectx, "a second policy for upstream \"%s\"", un);
            free(un);
            if (gp->path != NULL) {
                char d[200];
                snprintf(d, sizeof(d), "%s.policy", ectx);
                gp->policy = load_policy_file(ld, config_setting_get_member(e, "policy"), d, gp->path, c);
            }
        }
    }
}

struct tg_policy *tg_conf_policy_for(const struct tg_conf *c, const struct tg_grant_conf *g, int u)
{
    if (g != NULL)
        for (size_t i = 0; i < g->npolicies; i++)
            if (g->policies[i].upstream == u && g->policies[i].policy != NULL)
                return g->policies[i].policy;
    if (u >= 0 && (size_t)u < c->nupstreams && c->upstreams[u].policy != NULL)
        return c->upstreams[u].policy;
    return c->deny_all;
}

const struct tg_grant_conf *tg_conf_find_grant(const struct tg_conf *c, const char *name)
{
    for (size_t i = 0; i < c->ngrants; i++)
        if (c->grants[i].name && strcmp(c->grants[i].name, name) == 0)
            return &c->grants[i];
    return NULL;
}

void tg__conf_grants_free(struct tg_conf *c)
{
    for (size_t i = 0; i < c->ngrants; i++) {
        free(c->grants[i].name);
        free(c->grants[i].tls_subject);
        free(c->grants[i].scopes);
        for (size_t k = 0; k < 2 * c->grants[i].nattributes; k++)
            free(c->grants[i].attributes[k]);
        free(c->grants[i].attributes);
        for (size_t k = 0; k < c->grants[i].nissuers; k++)
            free(c->grants[i].issuers[k]);
        free(c->grants[i].issuers);
        for (size_t k = 0; k < c->grants[i].npolicies; k++) {
            free(c->grants[i].policies[k].path);
            tg_policy_unref(c->grants[i].policies[k].policy);
        }
        free(c->grants[i].policies);
        tg__conf_roots_free(&c->grants[i].roots);
    }
    free(c->grants);
}

void tg__conf_jwt_free(struct tg_conf *c)
{
    for (size_t i = 0; i < c->njwt; i++) {
        free(c->jwt[i].issuer);
        free(c->jwt[i].audience);
        free(c->jwt[i].jwks_file);
        free(c->jwt[i].jwks_url);
        free(c->jwt[i].ca);
        tg_keyring_unref(c->jwt[i].keyring);
        free(c->jwt[i].grant_claim);
        free(c->jwt[i].grant);
        free(c->jwt[i].subject_claim);
        tg_jwks_free(c->jwt[i].jwks);
        tg_jwt_cache_free(c->jwt[i].cache);
    }
    free(c->jwt);
}
