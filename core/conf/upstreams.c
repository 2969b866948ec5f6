#include "core/conf/conf.h"

#include <libconfig.h>
#include <stdio.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>

#include "core/conf/internal.h"
#include "policy/pins.h"
#include "policy/policy.h"
#include "core/wire/tls.h"

#define UPS(f) offsetof(struct tg_upstream_conf, f)
static const struct int_directive upstream_directives[] = {
    {"connect_timeout_ms", UPS(connect_timeout_ms), 10, 600000, 3000, "TCP connect"},
    {"call_timeout_ms", UPS(call_timeout_ms), 10, 86400000, 60000, "one upstream call"},
    {"max_children", UPS(max_children), 1, 100000, 256, "stdio: live child processes at most"},
    {"backoff_ms", UPS(backoff_ms), 0, 600000, 500, "first pause after 3 failures to reach it (0: none)"},
    {"backoff_max_ms", UPS(backoff_max_ms), 1, 3600000, 30000, "longest pause"},
    {NULL, 0, 0, 0, 0, NULL},
};
static const struct int_directive pool_directives[] = {
    {"size", UPS(pool_size), 1, 4096, 16, "keep-alive connections"},
    {"idle_timeout_ms", UPS(pool_idle_timeout_ms), 100, 86400000, 30000, "idle pooled connection"},
    {"queue", UPS(queue_max), 0, 1000000, 1024, "calls waiting for a connection"},
    {"queue_timeout_ms", UPS(queue_timeout_ms), 1, 3600000, 5000, "queued call deadline"},
    {"pipeline", UPS(pool_pipeline), 1, 64, 1, "requests in flight per connection (HTTP/1.1 pipelining)"},
    {NULL, 0, 0, 0, 0, NULL},
};

/* http://host[:port]/path or https://host[:port]/path. */
int tg_conf_parse_url(struct tg_upstream_conf *u, const char **why)
{
    const char *p = u->url;
    if (strncmp(p, "https://", 8) == 0) {
        u->tls = 1;
        p += 8;
    } else if (strncmp(p, "http://", 7) == 0) {
        p += 7;
    } else {
        *why = "must start with http:// or https://";
        return -1;
    }
    const char *slash = strchr(p, '/');
    const char *hend = slash ? slash : p + strlen(p);
    if (hend == p) {
        *why = "has no host";
        return -1;
    }
    u->authority = tg_slice_dup(tg_slice_of(p, (size_t)(hend - p)));
    u->path = tg_xstrdup(slash ? slash : "/");
    const char *hs = p, *he;
    const char *portp = NULL;
    if (*p == '[') {
        he = memchr(p, ']', (size_t)(hend - p));
        if (he == NULL) {
            *why = "has an unterminated IPv6 literal";
            return -1;
        }
        hs = p + 1;
        if (he + 1 < hend && he[1] == ':')
            portp = he + 2;
        else if (he + 1 != hend) {
            *why = "has junk after the IPv6 literal";
            return -1;
        }
    } else {
        he = memchr(p, ':', (size_t)(hend - p));
        if (he)
            portp = he + 1;
        else
            he = hend;
    }
    u->host = tg_slice_dup(tg_slice_of(hs, (size_t)(he - hs)));
    u->port = u->tls ? 443 : 80;
    if (portp) {
        long v = 0;
        if (portp >= hend) {
            *why = "has an empty port";
            return -1;
        }
        for (const char *q = portp; q < hend; q++) {
            if (*q < '0' || *q > '9' || v > 65535) {
                *why = "has an invalid port";
                return -1;
            }
            v = v * 10 + (*q - '0');
        }
        if (v < 1 || v > 65535) {
            *why = "has an invalid port";
            return -1;
        }
        u->port = (int)v;
    }
    for (const char *q = u->path; *q; q++)
        if ((unsigned char)*q <= 0x20 || *q == 0x7f || *q == '#') {
            *why = "has a path with spaces, control characters or a fragment";
            return -1;
        }
    return 0;
}

static int valid_upstream_name(const char *n)
{
    if (!n || !*n || strlen(n) > 64)
        return 0;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_' || *p == '.'))
            return 0;
    static const char *const reserved[] = {"mcp", "sse", "messages", "ws", "healthz", "readyz", "metrics",
                                           "admin", ".well-known", NULL};
    for (int i = 0; reserved[i]; i++)
        if (strcmp(n, reserved[i]) == 0)
            return 0;
    return 1;
}

int tg__conf_header_name_ok(const char *n)
{
    if (!*n)
        return 0;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
              *p == '_'))
            return 0;
    static const char *const owned[] = {"host", "content-length", "transfer-encoding", "connection",
                                        "mcp-session-id", "content-type", "accept", "upgrade", NULL};
    for (int i = 0; owned[i]; i++)
        if (strcasecmp(n, owned[i]) == 0)
            return 0;
    return 1;
}

/* https:// upstreams: tls = { ca; cert; key; server_name; verify; }. The CA chain and the client
 * certificate are read here, at load (off the loop on reload), into u->tls_ctx. */
static void load_tls(struct loader *ld, struct tg_conf *c, const config_setting_t *g, struct tg_upstream_conf *u,
                     const char *ctx)
{
    const config_setting_t *t = config_setting_get_member(g, "tls");
    char tctx[96];
    snprintf(tctx, sizeof(tctx), "%s.tls", ctx);
    if (t != NULL && !u->tls) {
        tg__conf_errf(ld, t, tctx, "is for https:// upstreams");
        return;
    }
    if (!u->tls)
        return;
    if (t != NULL && !config_setting_is_group(t)) {
        tg__conf_errf(ld, t, tctx, "must be a group { ca = …; cert = …; key = …; server_name = …; verify = …; }");
        return;
    }
    static const char *const known[] = {"ca", "cert", "key", "server_name", "verify", NULL};
    if (t != NULL)
        tg__conf_check_members(ld, t, known, tctx);
    u->tls_ca = t ? tg__conf_path(ld, tg__conf_get_str(ld, t, "ca", NULL, 0, tctx)) : NULL;
    u->tls_cert = t ? tg__conf_path(ld, tg__conf_get_str(ld, t, "cert", NULL, 0, tctx)) : NULL;
    u->tls_key = t ? tg__conf_path(ld, tg__conf_get_str(ld, t, "key", NULL, 0, tctx)) : NULL;
    u->tls_server_name = t ? tg__conf_get_str(ld, t, "server_name", NULL, 0, tctx) : NULL;
    u->tls_verify = t ? tg__conf_get_bool(ld, t, "verify", 1, tctx) : 1;
    if ((u->tls_cert == NULL) != (u->tls_key == NULL)) {
        tg__conf_errf(ld, t, tctx, "cert and key go together (a client certificate for mTLS upstreams)");
        return;
    }
    if (u->tls_server_name != NULL && (u->tls_server_name[0] == '\0' || strlen(u->tls_server_name) > 253 ||
                                       strpbrk(u->tls_server_name, " /:@[]") != NULL)) {
        tg__conf_errf(ld, config_setting_get_member(t, "server_name"), "server_name", "\"%s\" is not a host name",
                      u->tls_server_name);
        return;
    }
    if (!u->tls_verify) {
        tg_buf_appendf(&c->warnings,
                       "%s:%d: %s.verify: false: the upstream's certificate is not checked, so anyone on the path can "
                       "read and change its calls\n",
                       ld->path, config_setting_source_line(config_setting_get_member(t, "verify")), tctx);
        if (u->tls_ca != NULL)
            tg__conf_errf(ld, config_setting_get_member(t, "ca"), "ca", "has no use with verify = false");
    }
    if ((u->tls_ca && tg__conf_check_readable(ld, config_setting_get_member(t, "ca"), "ca", u->tls_ca) != 0) ||
        (u->tls_cert && tg__conf_check_readable(ld, config_setting_get_member(t, "cert"), "cert", u->tls_cert) != 0) ||
        (u->tls_key && tg__conf_check_readable(ld, config_setting_get_member(t, "key"), "key", u->tls_key) != 0))
        return;
    struct tg_tls_client_opts o = {u->tls_ca, u->tls_cert, u->tls_key, u->tls_verify};
    char err[256];
    if (tg_tls_client_ctx_new(&o, &u->tls_ctx, err, sizeof(err)) != 0)
        tg__conf_errf(ld, t, tctx, "%s", err);
}

extern char **environ;

/* What a child inherits from the gateway's environment without being asked: the locale, the
 * time zone, where to find programs and the home folder. Everything else (the tokens the conf
 * reads through ${VAR}, the gateway's own settings) stays in the gateway. */
static int inherited_by_default(const char *e, size_t nl)
{
    static const char *const names[] = {"PATH", "HOME", "LANG", "TZ", NULL};
    for (int i = 0; names[i]; i++)
        if (strlen(names[i]) == nl && strncmp(e, names[i], nl) == 0)
            return 1;
    return nl > 3 && strncmp(e, "LC_", 3) == 0;
}

static int env_has(char *const *env, size_t k, const char *e, size_t nl)
{
    for (size_t j = 0; j < k; j++)
        if (strncmp(env[j], e, nl) == 0 && env[j][nl] == '=')
            return 1;
    return 0;
}

/* The child's whole environment, built once at load: env = { NAME = "value"; } first, then the
 * names env_pass = [ "NAME", … ] lists and the default ones (PATH, HOME, LANG, LC_*, TZ), each
 * from the gateway's environment when set there and not already given by env. */
static void load_child_env(struct loader *ld, const config_setting_t *g, struct tg_upstream_conf *u)
{
    const config_setting_t *env = config_setting_get_member(g, "env");
    const config_setting_t *pass = config_setting_get_member(g, "env_pass");
    size_t ninherit = 0;
    while (environ && environ[ninherit])
        ninherit++;
    size_t nextra = env && config_setting_is_group(env) ? (size_t)config_setting_length(env) : 0;
    if (env && !config_setting_is_group(env))
        tg__conf_errf(ld, env, "env", "must be a group { NAME = \"value\"; }");
    size_t npass = 0;
    if (pass != NULL && !config_setting_is_array(pass) && !config_setting_is_list(pass))
        tg__conf_errf(ld, pass, "env_pass", "must be an array of variable names [ \"NAME\", … ]");
    else if (pass != NULL)
        npass = (size_t)config_setting_length(pass);
    for (size_t i = 0; i < npass; i++) {
        const char *name = config_setting_get_string_elem(pass, (int)i);
        if (name == NULL || name[0] == '\0' || strchr(name, '=') != NULL)
            tg__conf_errf(ld, pass, "env_pass", "element %zu must be a variable name (no \"=\"; values go in env)", i);
    }
    u->env = tg_xcalloc(ninherit + nextra + 1, sizeof(char *));
    size_t k = 0;
    for (size_t i = 0; i < nextra; i++) {
        const config_setting_t *e = config_setting_get_elem(env, (unsigned)i);
        const char *name = config_setting_name(e);
        const char *val = config_setting_get_string(e);
        const char *why = NULL;
        char var[128];
        char *x = val ? tg_conf_expand_env(val, &why, var, sizeof(var)) : NULL;
        if (x == NULL) {
            tg__conf_errf(ld, e, "env", "%s must be a string%s%s", name ? name : "?", why ? ": " : "", why ? why : "");
            continue;
        }
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_appendf(&b, "%s=%s", name, x);
        tg_buf_append(&b, "", 1);
        u->env[k++] = tg_buf_release(&b);
        free(x);
    }
    /* From the gateway's environment: the default names and those env_pass lists, unless env set
     * them. A listed name the gateway does not have is simply absent. */
    for (size_t i = 0; i < ninherit; i++) {
        const char *eq = strchr(environ[i], '=');
        if (eq == NULL)
            continue;
        size_t nl = (size_t)(eq - environ[i]);
        int wanted = inherited_by_default(environ[i], nl);
        for (size_t j = 0; j < npass && !wanted; j++) {
            const char *name = config_setting_get_string_elem(pass, (int)j);
            wanted = name != NULL && strlen(name) == nl && strncmp(name, environ[i], nl) == 0;
        }
        if (wanted && !env_has(u->env, k, environ[i], nl))
            u->env[k++] = tg_xstrdup(environ[i]);
    }
    u->env[k] = NULL;
}

/* stdio upstream: command = [ "prog", "arg", … ]; env = { NAME = "value"; }; cwd; warm. */
static void load_command(struct loader *ld, const config_setting_t *g, const config_setting_t *cmd,
                         struct tg_upstream_conf *u, const char *ctx)
{
    u->transport = TG_UP_STDIO;
    if (config_setting_get_member(g, "url") || config_setting_get_member(g, "transport"))
        tg__conf_errf(ld, cmd, "command", "an upstream has either url (HTTP) or command (stdio), not both");
    int n = config_setting_is_array(cmd) || config_setting_is_list(cmd) ? config_setting_length(cmd) : 0;
    if (n == 0) {
        tg__conf_errf(ld, cmd, "command", "must be a non-empty array of strings [ \"program\", \"arg\", … ]");
        return;
    }
    u->command = tg_xcalloc((size_t)n + 1, sizeof(char *));
    for (int i = 0; i < n; i++) {
        const char *v = config_setting_get_string_elem(cmd, i);
        const char *why = NULL;
        char var[128];
        char *e = v ? tg_conf_expand_env(v, &why, var, sizeof(var)) : NULL;
        if (e == NULL) {
            tg__conf_errf(ld, cmd, "command", "element %d must be a string%s%s", i, why ? ": " : "", why ? why : "");
            e = tg_xstrdup("");
        }
        u->command[i] = e;
    }
    u->cwd = tg__conf_path(ld, tg__conf_get_str(ld, g, "cwd", NULL, 0, ctx));
    const config_setting_t *w = config_setting_get_member(g, "warm");
    if (w != NULL) {
        if (config_setting_type(w) != CONFIG_TYPE_INT || config_setting_get_int(w) < 0 || config_setting_get_int(w) > 64)
            tg__conf_errf(ld, w, "warm", "must be an integer 0..64");
        else
            u->warm = config_setting_get_int(w);
    }
    load_child_env(ld, g, u);
}

void tg__conf_load_upstreams(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *l = config_lookup(cfg, "upstreams");
    c->default_upstream = -1;
    if (l == NULL || !config_setting_is_list(l) || config_setting_length(l) == 0) {
        tg__conf_errf(ld, l, "upstreams", "must be a non-empty list of ( { name = …; url = …; } )");
        return;
    }
    c->nupstreams = (size_t)config_setting_length(l);
    c->upstreams = tg_xcalloc(c->nupstreams, sizeof(*c->upstreams));
    for (size_t i = 0; i < c->nupstreams; i++) {
        const config_setting_t *g = config_setting_get_elem(l, (unsigned)i);
        struct tg_upstream_conf *u = &c->upstreams[i];
        char ctx[48];
        snprintf(ctx, sizeof(ctx), "upstreams[%zu]", i);
        if (!config_setting_is_group(g)) {
            tg__conf_errf(ld, g, ctx, "must be a group");
            continue;
        }
        static const char *const known[] = {"name", "url", "default", "headers", "initialize", "protocol", "connect_timeout_ms",
                                            "call_timeout_ms", "pool", "policy", "deny_server_requests",
                                            "transport", "command", "env", "env_pass", "cwd", "warm", "max_children", "tls",
                                            "backoff_ms", "backoff_max_ms", "roots", "token_exchange", "approval_mode", "pins",
                                            "signals", NULL};
        tg__conf_check_members(ld, g, known, ctx);
        u->name = tg__conf_get_str(ld, g, "name", NULL, 1, ctx);
        if (u->name && !valid_upstream_name(u->name))
            tg__conf_errf(
                ld, config_setting_get_member(g, "name"), "name",
                "\"%s\" must be 1-64 of [A-Za-z0-9._-] and not a reserved path (mcp, sse, messages, ws, admin, …)",
                u->name);
        for (size_t k = 0; k < i; k++)
            if (u->name && c->upstreams[k].name && strcmp(u->name, c->upstreams[k].name) == 0)
                tg__conf_errf(ld, g, ctx, "duplicate upstream name \"%s\"", u->name);
        if (u->name)
            snprintf(ctx, sizeof(ctx), "upstreams.%s", u->name);
        const config_setting_t *cmd = config_setting_get_member(g, "command");
        if (cmd != NULL) {
            load_command(ld, g, cmd, u, ctx);
            if (u->command != NULL) /* after env: the child's PATH finds the program */
                tg__conf_check_command(ld, cmd, "command", u->command, u->cwd, u->env);
            if (config_setting_get_member(g, "tls") != NULL)
                tg__conf_errf(ld, config_setting_get_member(g, "tls"), "tls", "is for https:// upstreams");
        } else {
            u->url = tg__conf_get_str(ld, g, "url", NULL, 1, ctx);
            const char *why = NULL;
            if (u->url && tg_conf_parse_url(u, &why) != 0)
                tg__conf_errf(ld, config_setting_get_member(g, "url"), "url", "\"%s\" %s", u->url, why);
            else if (u->url)
                load_tls(ld, c, g, u, ctx);
            char *tr = tg__conf_get_str(ld, g, "transport", "streamable", 0, ctx);
            if (tr && strcmp(tr, "sse") == 0)
                u->transport = TG_UP_SSE;
            else if (tr && strcmp(tr, "streamable") != 0)
                tg__conf_errf(ld, config_setting_get_member(g, "transport"), "transport",
                              "must be \"streamable\" or \"sse\" (a stdio upstream has command instead of url)");
            free(tr);
            if (config_setting_get_member(g, "env") || config_setting_get_member(g, "env_pass") ||
                config_setting_get_member(g, "cwd") || config_setting_get_member(g, "warm"))
                tg__conf_errf(ld, g, ctx, "env, env_pass, cwd and warm are for stdio upstreams (command = [ … ])");
        }
        u->is_default = tg__conf_get_bool(ld, g, "default", 0, ctx);
        if (u->is_default) {
            if (c->default_upstream >= 0)
                tg__conf_errf(ld, g, ctx, "only one upstream may be default");
            c->default_upstream = (int)i;
        }
        u->policy_path = tg__conf_path(ld, tg__conf_get_str(ld, g, "policy", NULL, 0, ctx));
        u->pins_path = tg__conf_path(ld, tg__conf_get_str(ld, g, "pins", NULL, 0, ctx));
        const config_setting_t *dsr = config_setting_get_member(g, "deny_server_requests");
        if (dsr != NULL) {
            if (!config_setting_is_array(dsr) && !config_setting_is_list(dsr)) {
                tg__conf_errf(ld, dsr, "deny_server_requests", "must be an array of method names");
            } else {
                u->ndeny_server_requests = (size_t)config_setting_length(dsr);
                u->deny_server_requests = tg_xcalloc(u->ndeny_server_requests + 1, sizeof(char *));
                for (size_t k = 0; k < u->ndeny_server_requests; k++) {
                    const char *m = config_setting_get_string_elem(dsr, (int)k);
                    if (m == NULL || m[0] == '\0') {
                        tg__conf_errf(ld, dsr, "deny_server_requests", "must be an array of method names");
                        m = "";
                    }
                    u->deny_server_requests[k] = tg_xstrdup(m);
                }
            }
        }
        tg__conf_load_roots(ld, g, &u->roots, ctx); /* pinned roots: core/conf/grants.c */
        char *init = tg__conf_get_str(ld, g, "initialize", "forward", 0, ctx);
        if (init && strcmp(init, "local") == 0) {
            u->init_local = 1;
            if (u->transport != TG_UP_STREAMABLE)
                tg__conf_errf(ld, config_setting_get_member(g, "initialize"), "initialize",
                              "\"local\" is for Streamable HTTP upstreams (stdio and SSE servers take initialize)");
        }
        else if (init && strcmp(init, "forward") != 0)
            tg__conf_errf(ld, config_setting_get_member(g, "initialize"), "initialize",
                          "must be \"forward\" or \"local\"");
        free(init);
        char *proto = tg__conf_get_str(ld, g, "protocol", "auto", 0, ctx);
        if (proto && strcmp(proto, "2025") == 0)
            u->protocol = TG_PROTOCOL_2025;
        else if (proto && strcmp(proto, "2026") == 0)
            u->protocol = TG_PROTOCOL_2026;
        else if (proto && strcmp(proto, "auto") != 0)
            tg__conf_errf(ld, config_setting_get_member(g, "protocol"), "protocol",
                          "must be \"auto\", \"2025\" or \"2026\"");
        free(proto);
        if (u->transport != TG_UP_STREAMABLE && u->protocol == TG_PROTOCOL_2026)
            tg__conf_errf(ld, config_setting_get_member(g, "protocol"), "protocol",
                          "\"2026\" is for Streamable HTTP upstreams (stdio and legacy SSE servers speak 2025 here)");
        if (u->init_local && u->protocol == TG_PROTOCOL_2026)
            tg__conf_errf(ld, config_setting_get_member(g, "protocol"), "protocol",
                          "a 2026-07-28 upstream has no initialize: drop initialize = \"local\"");
        if (u->transport != TG_UP_STREAMABLE || u->init_local)
            u->protocol = TG_PROTOCOL_2025; /* nothing to probe: these speak 2025 */
        tg__conf_load_ints(ld, g, upstream_directives, u, ctx, 0);
        char *mode = tg__conf_get_str(ld, g, "approval_mode", NULL, 0, ctx);
        if (mode != NULL && (u->approval_mode = tg_policy_approval_mode(mode)) < 0) {
            tg__conf_errf(ld, config_setting_get_member(g, "approval_mode"), "approval_mode",
                          "must be \"hold\", \"retry\" or \"task\"");
            u->approval_mode = TG_APPROVAL_AUTO;
        }
        free(mode);
        const config_setting_t *pool = config_setting_get_member(g, "pool");
        char pctx[80];
        snprintf(pctx, sizeof(pctx), "%s.pool", ctx);
        if (pool != NULL && !config_setting_is_group(pool)) {
            tg__conf_errf(ld, pool, pctx, "must be a group");
            pool = NULL;
        }
        tg__conf_load_ints(ld, pool, pool_directives, u, pctx, 1);
        const config_setting_t *h = config_setting_get_member(g, "headers");
        if (h != NULL) {
            if (!config_setting_is_group(h)) {
                tg__conf_errf(ld, h, "headers", "must be a group { Name = \"value\"; }");
            } else {
                u->nheaders = (size_t)config_setting_length(h);
                u->headers = tg_xcalloc(u->nheaders, sizeof(*u->headers));
                for (size_t k = 0; k < u->nheaders; k++) {
                    const config_setting_t *hs = config_setting_get_elem(h, (unsigned)k);
                    const char *n = config_setting_name(hs);
                    char hctx[160];
                    snprintf(hctx, sizeof(hctx), "%s.headers.%s", ctx, n ? n : "?");
                    if (n == NULL || !tg__conf_header_name_ok(n)) {
                        tg__conf_errf(ld, hs, hctx, "is not a header the gateway lets you set");
                        continue;
                    }
                    u->headers[k].name = tg_xstrdup(n);
                    if (config_setting_type(hs) != CONFIG_TYPE_STRING) {
                        tg__conf_errf(ld, hs, hctx, "must be a string");
                        u->headers[k].value = tg_xstrdup("");
                        continue;
                    }
                    const char *w = NULL;
                    char var[128];
                    u->headers[k].value = tg_conf_expand_env(config_setting_get_string(hs), &w, var, sizeof(var));
                    if (u->headers[k].value == NULL) {
                        int unset = strcmp(w, "environment variable is not set") == 0;
                        tg__conf_errf(ld, hs, hctx, "%s%s%s", w, unset ? ": " : "", unset ? var : "");
                        u->headers[k].value = tg_xstrdup("");
                    }
                    for (const char *q = u->headers[k].value; *q; q++)
                        if ((unsigned char)*q < 0x20 && *q != '\t') {
                            tg__conf_errf(ld, hs, hctx, "contains a control character");
                            break;
                        }
                }
            }
        }
    }
    if (c->default_upstream < 0 && c->nupstreams == 1)
        c->default_upstream = 0;
}

void tg__conf_upstreams_free(struct tg_conf *c)
{
    for (size_t i = 0; i < c->nupstreams; i++) {
        struct tg_upstream_conf *u = &c->upstreams[i];
        free(u->name);
        free(u->url);
        free(u->host);
        free(u->path);
        free(u->authority);
        free(u->tls_ca);
        free(u->tls_cert);
        free(u->tls_key);
        free(u->tls_server_name);
        tg_tls_client_ctx_free(u->tls_ctx);
        for (size_t k = 0; k < u->nheaders; k++) {
            free(u->headers[k].name);
            free(u->headers[k].value);
        }
        free(u->headers);
        free(u->policy_path);
        tg_policy_unref(u->policy);
        free(u->pins_path);
        tg_pins_unref(u->pins);
        for (char **a = u->command; a && *a; a++)
            free(*a);
        free(u->command);
        for (char **a = u->env; a && *a; a++)
            free(*a);
        free(u->env);
        free(u->cwd);
        for (size_t k = 0; k < u->ndeny_server_requests; k++)
            free(u->deny_server_requests[k]);
        free(u->deny_server_requests);
        tg__conf_roots_free(&u->roots);
    }
    free(c->upstreams);
}

const struct tg_upstream_conf *tg_conf_find_upstream(const struct tg_conf *c, struct tg_slice name, int *index)
{
    for (size_t i = 0; i < c->nupstreams; i++)
        if (c->upstreams[i].name && tg_slice_eq(name, tg_slice_cstr(c->upstreams[i].name))) {
            if (index)
                *index = (int)i;
            return &c->upstreams[i];
        }
    return NULL;
}
