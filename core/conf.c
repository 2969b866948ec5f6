#include "core/conf.h"

#include <libconfig.h>
#include <stdarg.h>
#include <stdio.h>
#include <strings.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "policy/jwt.h"
#include "policy/policy.h"

/* One row per scalar integer directive (nginx ngx_command_t, redis createIntConfig). */
struct int_directive {
    const char *name;
    size_t offset;
    int min, max, def;
    const char *help;
};

#define LIM(f) offsetof(struct tg_limits, f)
static const struct int_directive limit_directives[] = {
    {"max_connections", LIM(max_connections), 1, 1000000, 10000, "client connections open at once"},
    {"header_bytes", LIM(header_bytes), 1024, 1048576, 16384, "request line and headers"},
    {"body_bytes", LIM(body_bytes), 1024, 1073741824, 4194304, "one request body"},
    {"response_bytes", LIM(response_bytes), 1024, 1073741824, 67108864, "one upstream JSON response"},
    {"json_depth", LIM(json_depth), 2, 1000, 64, "JSON nesting"},
    {"header_timeout_ms", LIM(header_timeout_ms), 100, 3600000, 10000, "time to send a request head"},
    {"idle_timeout_ms", LIM(idle_timeout_ms), 100, 86400000, 60000, "keep-alive idle time"},
    {"session_idle_timeout_ms", LIM(session_idle_timeout_ms), 1000, 604800000, 1800000, "idle session lifetime"},
    {"sessions_per_grant", LIM(sessions_per_grant), 1, 10000000, 1000, "live sessions per grant"},
    {"inflight_per_session", LIM(inflight_per_session), 1, 100000, 64, "calls in flight per session"},
    {"output_high_water", LIM(output_high_water), 4096, 1073741824, 1048576, "bytes queued to a slow client"},
    {"drain_timeout_ms", LIM(drain_timeout_ms), 0, 3600000, 10000, "graceful drain on SIGTERM"},
    {"approvals_max", LIM(approvals_max), 0, 1000000, 1000, "calls parked for approval at once"},
    {"replay_bytes", LIM(replay_bytes), 0, 67108864, 65536, "events kept per SSE stream for Last-Event-ID"},
    {"sse_keepalive_ms", LIM(sse_keepalive_ms), 1000, 3600000, 15000, "comment sent on an idle SSE stream"},
    {"output_total_bytes", LIM(output_total_bytes), 1048576, 2147483647, 268435456,
     "bytes queued to all clients together"},
    {NULL, 0, 0, 0, 0, NULL},
};

#define UPS(f) offsetof(struct tg_upstream_conf, f)
static const struct int_directive upstream_directives[] = {
    {"connect_timeout_ms", UPS(connect_timeout_ms), 10, 600000, 3000, "TCP connect"},
    {"call_timeout_ms", UPS(call_timeout_ms), 10, 86400000, 60000, "one upstream call"},
    {NULL, 0, 0, 0, 0, NULL},
};
static const struct int_directive pool_directives[] = {
    {"size", UPS(pool_size), 1, 4096, 16, "keep-alive connections"},
    {"idle_timeout_ms", UPS(pool_idle_timeout_ms), 100, 86400000, 30000, "idle pooled connection"},
    {"queue", UPS(queue_max), 0, 1000000, 1024, "calls waiting for a connection"},
    {"queue_timeout_ms", UPS(queue_timeout_ms), 1, 3600000, 5000, "queued call deadline"},
    {NULL, 0, 0, 0, 0, NULL},
};

struct loader {
    const char *path;
    struct tg_buf *err;
    int nerr;
    config_t *cfg;
};

static void errf(struct loader *ld, const config_setting_t *s, const char *directive, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void errf(struct loader *ld, const config_setting_t *s, const char *directive, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    const char *file = s ? config_setting_source_file(s) : NULL;
    int line = s ? config_setting_source_line(s) : 0;
    tg_buf_appendf(ld->err, "%s:%d: %s: %s\n", file ? file : ld->path, line, directive, msg);
    ld->nerr++;
}

char *tg_conf_expand_env(const char *in, const char **why, char *varname, size_t varname_sz)
{
    struct tg_buf b;
    tg_buf_init(&b);
    const char *p = in;
    while (*p) {
        if (p[0] == '$' && p[1] == '{') {
            const char *close = strchr(p + 2, '}');
            if (close == NULL) {
                *why = "unterminated ${";
                tg_buf_dispose(&b);
                return NULL;
            }
            const char *name = p + 2;
            const char *dflt = NULL;
            size_t nlen = (size_t)(close - name);
            const char *sep = NULL;
            for (const char *q = name; q < close - 1; q++)
                if (q[0] == ':' && q[1] == '-') {
                    sep = q;
                    break;
                }
            if (sep) {
                nlen = (size_t)(sep - name);
                dflt = sep + 2;
            }
            if (nlen == 0 || nlen >= varname_sz) {
                *why = "bad variable name in ${}";
                tg_buf_dispose(&b);
                return NULL;
            }
            memcpy(varname, name, nlen);
            varname[nlen] = '\0';
            for (size_t i = 0; i < nlen; i++) {
                char c = varname[i];
                if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i && c >= '0' && c <= '9'))) {
                    *why = "bad variable name in ${}";
                    tg_buf_dispose(&b);
                    return NULL;
                }
            }
            const char *val = getenv(varname);
            if (val != NULL)
                tg_buf_appends(&b, val);
            else if (dflt != NULL)
                tg_buf_append(&b, dflt, (size_t)(close - dflt));
            else {
                *why = "environment variable is not set";
                tg_buf_dispose(&b);
                return NULL;
            }
            p = close + 1;
            continue;
        }
        tg_buf_append(&b, p, 1);
        p++;
    }
    tg_buf_append(&b, "", 1);
    return tg_buf_release(&b);
}

/* Reads a string setting, expanding ${VAR}. Missing and not required -> def (may be NULL). */
static char *get_str(struct loader *ld, const config_setting_t *grp, const char *name, const char *def, int required,
                     const char *ctx)
{
    char directive[160];
    snprintf(directive, sizeof(directive), "%s%s%s", ctx, ctx[0] ? "." : "", name);
    const config_setting_t *s = config_setting_get_member(grp, name);
    if (s == NULL) {
        if (required)
            errf(ld, grp, directive, "is required");
        return def ? tg_xstrdup(def) : NULL;
    }
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        errf(ld, s, directive, "must be a string");
        return def ? tg_xstrdup(def) : NULL;
    }
    const char *why = NULL;
    char var[128];
    char *v = tg_conf_expand_env(config_setting_get_string(s), &why, var, sizeof(var));
    if (v == NULL) {
        errf(ld, s, directive, "%s%s%s", why, strcmp(why, "environment variable is not set") == 0 ? ": " : "",
             strcmp(why, "environment variable is not set") == 0 ? var : "");
        return def ? tg_xstrdup(def) : NULL;
    }
    return v;
}

static int get_bool(struct loader *ld, const config_setting_t *grp, const char *name, int def, const char *ctx)
{
    const config_setting_t *s = config_setting_get_member(grp, name);
    if (s == NULL)
        return def;
    if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
        char directive[160];
        snprintf(directive, sizeof(directive), "%s.%s", ctx, name);
        errf(ld, s, directive, "must be true or false");
        return def;
    }
    return config_setting_get_bool(s);
}

static void load_ints(struct loader *ld, const config_setting_t *grp, const struct int_directive *tab, void *base,
                      const char *ctx)
{
    for (const struct int_directive *d = tab; d->name; d++) {
        int *dst = (int *)((char *)base + d->offset);
        *dst = d->def;
        if (grp == NULL)
            continue;
        const config_setting_t *s = config_setting_get_member(grp, d->name);
        if (s == NULL)
            continue;
        char directive[160];
        snprintf(directive, sizeof(directive), "%s.%s", ctx, d->name);
        if (config_setting_type(s) != CONFIG_TYPE_INT && config_setting_type(s) != CONFIG_TYPE_INT64) {
            errf(ld, s, directive, "must be an integer");
            continue;
        }
        long long v = config_setting_get_int64(s);
        if (v < d->min || v > d->max) {
            errf(ld, s, directive, "%lld is out of range %d..%d (%s)", v, d->min, d->max, d->help);
            continue;
        }
        *dst = (int)v;
    }
    /* Unknown members are errors: a typo must not silently fall back to a default. */
    if (grp == NULL)
        return;
    for (int i = 0; i < config_setting_length(grp); i++) {
        const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
        const char *n = config_setting_name(s);
        int known = 0;
        for (const struct int_directive *d = tab; d->name; d++)
            if (n && strcmp(n, d->name) == 0)
                known = 1;
        if (!known && tab != upstream_directives) {
            char directive[160];
            snprintf(directive, sizeof(directive), "%s.%s", ctx, n ? n : "?");
            errf(ld, s, directive, "unknown directive");
        }
    }
}

static void check_members(struct loader *ld, const config_setting_t *grp, const char *const *known, const char *ctx)
{
    for (int i = 0; i < config_setting_length(grp); i++) {
        const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
        const char *n = config_setting_name(s);
        int ok = 0;
        for (int k = 0; known[k]; k++)
            if (n && strcmp(n, known[k]) == 0)
                ok = 1;
        if (!ok) {
            char directive[160];
            snprintf(directive, sizeof(directive), "%s%s%s", ctx, ctx[0] ? "." : "", n ? n : "?");
            errf(ld, s, directive, "unknown directive");
        }
    }
}

static int get_port(struct loader *ld, const config_setting_t *grp, const char *ctx, int def)
{
    const config_setting_t *s = config_setting_get_member(grp, "port");
    char directive[160];
    snprintf(directive, sizeof(directive), "%s.port", ctx);
    if (s == NULL) {
        if (def < 0)
            errf(ld, grp, directive, "is required");
        return def;
    }
    if (config_setting_type(s) != CONFIG_TYPE_INT) {
        errf(ld, s, directive, "must be an integer");
        return def;
    }
    int v = config_setting_get_int(s);
    if (v < 0 || v > 65535) {
        errf(ld, s, directive, "%d is out of range 0..65535 (0 = any free port)", v);
        return def;
    }
    return v;
}

static int parse_sha256(struct loader *ld, const config_setting_t *grp, const char *ctx, uint8_t out[32])
{
    char *hex = get_str(ld, grp, "token_sha256", NULL, 0, ctx);
    if (hex == NULL)
        return 0;
    int ok = strlen(hex) == 64 && tg_hex_decode(hex, 64, out) == 0;
    if (!ok)
        errf(ld, config_setting_get_member(grp, "token_sha256"), "token_sha256",
             "must be 64 hex digits (print one with: tollgate hash-token TOKEN)");
    free(hex);
    return ok;
}

static void load_log(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *g = config_lookup(cfg, "log");
    c->log_level = TG_LOG_INFO;
    c->log_format = 0;
    c->log_file = NULL;
    if (g == NULL)
        return;
    static const char *const known[] = {"level", "format", "file", NULL};
    check_members(ld, g, known, "log");
    char *level = get_str(ld, g, "level", "info", 0, "log");
    char *format = get_str(ld, g, "format", "logfmt", 0, "log");
    c->log_file = get_str(ld, g, "file", NULL, 0, "log");
    if (level && (c->log_level = tg_log_parse_level(level)) < 0) {
        errf(ld, config_setting_get_member(g, "level"), "log.level", "must be error, warn, info or debug");
        c->log_level = TG_LOG_INFO;
    }
    if (format && strcmp(format, "logfmt") != 0 && strcmp(format, "json") != 0)
        errf(ld, config_setting_get_member(g, "format"), "log.format", "must be logfmt or json");
    else if (format)
        c->log_format = strcmp(format, "json") == 0;
    free(level);
    free(format);
}

static void load_listeners(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *l = config_lookup(cfg, "listen");
    if (l == NULL || !config_setting_is_list(l) || config_setting_length(l) == 0) {
        errf(ld, l, "listen", "must be a non-empty list of ( { address = …; port = …; } )");
        return;
    }
    c->nlisteners = (size_t)config_setting_length(l);
    c->listeners = tg_xcalloc(c->nlisteners, sizeof(*c->listeners));
    for (size_t i = 0; i < c->nlisteners; i++) {
        const config_setting_t *g = config_setting_get_elem(l, (unsigned)i);
        struct tg_listen_conf *lc = &c->listeners[i];
        char ctx[32];
        snprintf(ctx, sizeof(ctx), "listen[%zu]", i);
        if (!config_setting_is_group(g)) {
            errf(ld, g, ctx, "must be a group { address = …; port = …; }");
            continue;
        }
        static const char *const known[] = {"address", "port", "tls", "origins", NULL};
        check_members(ld, g, known, ctx);
        lc->address = get_str(ld, g, "address", "127.0.0.1", 0, ctx);
        lc->port = get_port(ld, g, ctx, -1);
        const config_setting_t *tls = config_setting_get_member(g, "tls");
        if (tls != NULL) {
            char tctx[48];
            snprintf(tctx, sizeof(tctx), "%s.tls", ctx);
            static const char *const tknown[] = {"cert", "key", NULL};
            if (!config_setting_is_group(tls))
                errf(ld, tls, tctx, "must be a group { cert = …; key = …; }");
            else {
                check_members(ld, tls, tknown, tctx);
                lc->tls = 1;
                lc->cert = get_str(ld, tls, "cert", NULL, 1, tctx);
                lc->key = get_str(ld, tls, "key", NULL, 1, tctx);
            }
        }
        const config_setting_t *o = config_setting_get_member(g, "origins");
        if (o != NULL) {
            if (!config_setting_is_array(o) && !config_setting_is_list(o)) {
                errf(ld, o, "origins", "must be an array of strings");
            } else {
                lc->norigins = (size_t)config_setting_length(o);
                lc->origins = tg_xcalloc(lc->norigins, sizeof(char *));
                for (size_t k = 0; k < lc->norigins; k++) {
                    const char *v = config_setting_get_string_elem(o, (int)k);
                    if (v == NULL) {
                        errf(ld, o, "origins", "must be an array of strings");
                        continue;
                    }
                    lc->origins[k] = tg_xstrdup(v);
                    if (strcmp(v, "*") == 0)
                        lc->any_origin = 1;
                }
            }
        }
    }
}

static void load_admin(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *g = config_lookup(cfg, "admin");
    if (g == NULL)
        return;
    if (!config_setting_is_group(g)) {
        errf(ld, g, "admin", "must be a group");
        return;
    }
    static const char *const known[] = {"address", "port", "token_sha256", NULL};
    check_members(ld, g, known, "admin");
    c->admin.enabled = 1;
    c->admin.address = get_str(ld, g, "address", "127.0.0.1", 0, "admin");
    c->admin.port = get_port(ld, g, "admin", 9090);
    c->admin.has_token = parse_sha256(ld, g, "admin", c->admin.token_sha256);
}

static void load_grants(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *l = config_lookup(cfg, "grants");
    if (l == NULL)
        return;
    if (!config_setting_is_list(l)) {
        errf(ld, l, "grants", "must be a list of ( { name = …; token_sha256 = …; } )");
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
            errf(ld, g, ctx, "must be a group");
            continue;
        }
        static const char *const known[] = {"name", "token_sha256", "anonymous", "max_sessions", "policies", NULL};
        check_members(ld, g, known, ctx);
        gc->name = get_str(ld, g, "name", NULL, 1, ctx);
        const config_setting_t *ms = config_setting_get_member(g, "max_sessions");
        if (ms != NULL) {
            if (config_setting_type(ms) != CONFIG_TYPE_INT || config_setting_get_int(ms) < 1 ||
                config_setting_get_int(ms) > 10000000)
                errf(ld, ms, "max_sessions", "must be an integer 1..10000000");
            else
                gc->max_sessions = config_setting_get_int(ms);
        }
        gc->has_token = parse_sha256(ld, g, ctx, gc->token_sha256);
        gc->anonymous = get_bool(ld, g, "anonymous", 0, ctx);
        if (!gc->has_token && !gc->anonymous) {
            if (config_lookup(ld->cfg, "jwt") == NULL)
                errf(ld, g, ctx, "needs token_sha256, anonymous = true, or a jwt issuer whose tokens name it");
            else
                gc->jwt_only = 1;
        }
        if (gc->anonymous && anon++)
            errf(ld, g, ctx, "only one grant may be anonymous");
        for (size_t k = 0; k < i; k++)
            if (gc->name && c->grants[k].name && strcmp(gc->name, c->grants[k].name) == 0)
                errf(ld, g, ctx, "duplicate grant name \"%s\"", gc->name);
    }
}

/* http://host[:port]/path — only plain HTTP for now. */
static int parse_url(struct tg_upstream_conf *u, const char **why)
{
    const char *p = u->url;
    if (strncmp(p, "http://", 7) != 0) {
        *why = strncmp(p, "https://", 8) == 0 ? "https upstreams are not supported yet; use http:// on a trusted link"
                                               : "must start with http://";
        return -1;
    }
    p += 7;
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
    u->port = 80;
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

static int valid_header_name(const char *n)
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

extern char **environ;

/* stdio upstream: command = [ "prog", "arg", … ]; env = { NAME = "value"; }; cwd; warm. */
static void load_command(struct loader *ld, const config_setting_t *g, const config_setting_t *cmd,
                         struct tg_upstream_conf *u, const char *ctx)
{
    u->transport = TG_UP_STDIO;
    if (config_setting_get_member(g, "url") || config_setting_get_member(g, "transport"))
        errf(ld, cmd, "command", "an upstream has either url (HTTP) or command (stdio), not both");
    int n = config_setting_is_array(cmd) || config_setting_is_list(cmd) ? config_setting_length(cmd) : 0;
    if (n == 0) {
        errf(ld, cmd, "command", "must be a non-empty array of strings [ \"program\", \"arg\", … ]");
        return;
    }
    u->command = tg_xcalloc((size_t)n + 1, sizeof(char *));
    for (int i = 0; i < n; i++) {
        const char *v = config_setting_get_string_elem(cmd, i);
        const char *why = NULL;
        char var[128];
        char *e = v ? tg_conf_expand_env(v, &why, var, sizeof(var)) : NULL;
        if (e == NULL) {
            errf(ld, cmd, "command", "element %d must be a string%s%s", i, why ? ": " : "", why ? why : "");
            e = tg_xstrdup("");
        }
        u->command[i] = e;
    }
    u->cwd = get_str(ld, g, "cwd", NULL, 0, ctx);
    const config_setting_t *w = config_setting_get_member(g, "warm");
    if (w != NULL) {
        if (config_setting_type(w) != CONFIG_TYPE_INT || config_setting_get_int(w) < 0 || config_setting_get_int(w) > 64)
            errf(ld, w, "warm", "must be an integer 0..64");
        else
            u->warm = config_setting_get_int(w);
    }
    const config_setting_t *env = config_setting_get_member(g, "env");
    size_t ninherit = 0;
    while (environ && environ[ninherit])
        ninherit++;
    size_t nextra = env && config_setting_is_group(env) ? (size_t)config_setting_length(env) : 0;
    if (env && !config_setting_is_group(env))
        errf(ld, env, "env", "must be a group { NAME = \"value\"; }");
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
            errf(ld, e, "env", "%s must be a string%s%s", name ? name : "?", why ? ": " : "", why ? why : "");
            continue;
        }
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_appendf(&b, "%s=%s", name, x);
        tg_buf_append(&b, "", 1);
        u->env[k++] = tg_buf_release(&b);
        free(x);
    }
    /* The inherited environment, minus what env overrides. */
    for (size_t i = 0; i < ninherit; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        int overridden = 0;
        for (size_t j = 0; j < k; j++)
            if (strncmp(u->env[j], environ[i], nl) == 0 && u->env[j][nl] == '=')
                overridden = 1;
        if (!overridden)
            u->env[k++] = tg_xstrdup(environ[i]);
    }
    u->env[k] = NULL;
}

static void load_upstreams(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *l = config_lookup(cfg, "upstreams");
    c->default_upstream = -1;
    if (l == NULL || !config_setting_is_list(l) || config_setting_length(l) == 0) {
        errf(ld, l, "upstreams", "must be a non-empty list of ( { name = …; url = …; } )");
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
            errf(ld, g, ctx, "must be a group");
            continue;
        }
        static const char *const known[] = {"name", "url", "default", "headers", "initialize", "connect_timeout_ms",
                                            "call_timeout_ms", "pool", "policy", "deny_server_requests",
                                            "transport", "command", "env", "cwd", "warm", NULL};
        check_members(ld, g, known, ctx);
        u->name = get_str(ld, g, "name", NULL, 1, ctx);
        if (u->name && !valid_upstream_name(u->name))
            errf(ld, config_setting_get_member(g, "name"), "name",
                 "\"%s\" must be 1-64 of [A-Za-z0-9._-] and not a reserved path (mcp, sse, messages, ws, admin, …)",
                 u->name);
        for (size_t k = 0; k < i; k++)
            if (u->name && c->upstreams[k].name && strcmp(u->name, c->upstreams[k].name) == 0)
                errf(ld, g, ctx, "duplicate upstream name \"%s\"", u->name);
        if (u->name)
            snprintf(ctx, sizeof(ctx), "upstreams.%s", u->name);
        const config_setting_t *cmd = config_setting_get_member(g, "command");
        if (cmd != NULL) {
            load_command(ld, g, cmd, u, ctx);
        } else {
            u->url = get_str(ld, g, "url", NULL, 1, ctx);
            const char *why = NULL;
            if (u->url && parse_url(u, &why) != 0)
                errf(ld, config_setting_get_member(g, "url"), "url", "\"%s\" %s", u->url, why);
            char *tr = get_str(ld, g, "transport", "streamable", 0, ctx);
            if (tr && strcmp(tr, "sse") == 0)
                u->transport = TG_UP_SSE;
            else if (tr && strcmp(tr, "streamable") != 0)
                errf(ld, config_setting_get_member(g, "transport"), "transport",
                     "must be \"streamable\" or \"sse\" (a stdio upstream has command instead of url)");
            free(tr);
            if (config_setting_get_member(g, "env") || config_setting_get_member(g, "cwd") ||
                config_setting_get_member(g, "warm"))
                errf(ld, g, ctx, "env, cwd and warm are for stdio upstreams (command = [ … ])");
        }
        u->is_default = get_bool(ld, g, "default", 0, ctx);
        if (u->is_default) {
            if (c->default_upstream >= 0)
                errf(ld, g, ctx, "only one upstream may be default");
            c->default_upstream = (int)i;
        }
        u->policy_path = get_str(ld, g, "policy", NULL, 0, ctx);
        const config_setting_t *dsr = config_setting_get_member(g, "deny_server_requests");
        if (dsr != NULL) {
            if (!config_setting_is_array(dsr) && !config_setting_is_list(dsr)) {
                errf(ld, dsr, "deny_server_requests", "must be an array of method names");
            } else {
                u->ndeny_server_requests = (size_t)config_setting_length(dsr);
                u->deny_server_requests = tg_xcalloc(u->ndeny_server_requests + 1, sizeof(char *));
                for (size_t k = 0; k < u->ndeny_server_requests; k++) {
                    const char *m = config_setting_get_string_elem(dsr, (int)k);
                    if (m == NULL || m[0] == '\0') {
                        errf(ld, dsr, "deny_server_requests", "must be an array of method names");
                        m = "";
                    }
                    u->deny_server_requests[k] = tg_xstrdup(m);
                }
            }
        }
        char *init = get_str(ld, g, "initialize", "forward", 0, ctx);
        if (init && strcmp(init, "local") == 0) {
            u->init_local = 1;
            if (u->transport != TG_UP_STREAMABLE)
                errf(ld, config_setting_get_member(g, "initialize"), "initialize",
                     "\"local\" is for Streamable HTTP upstreams (stdio and SSE servers take initialize)");
        }
        else if (init && strcmp(init, "forward") != 0)
            errf(ld, config_setting_get_member(g, "initialize"), "initialize", "must be \"forward\" or \"local\"");
        free(init);
        load_ints(ld, g, upstream_directives, u, ctx);
        const config_setting_t *pool = config_setting_get_member(g, "pool");
        char pctx[80];
        snprintf(pctx, sizeof(pctx), "%s.pool", ctx);
        if (pool != NULL && !config_setting_is_group(pool)) {
            errf(ld, pool, pctx, "must be a group");
            pool = NULL;
        }
        load_ints(ld, pool, pool_directives, u, pctx);
        const config_setting_t *h = config_setting_get_member(g, "headers");
        if (h != NULL) {
            if (!config_setting_is_group(h)) {
                errf(ld, h, "headers", "must be a group { Name = \"value\"; }");
            } else {
                u->nheaders = (size_t)config_setting_length(h);
                u->headers = tg_xcalloc(u->nheaders, sizeof(*u->headers));
                for (size_t k = 0; k < u->nheaders; k++) {
                    const config_setting_t *hs = config_setting_get_elem(h, (unsigned)k);
                    const char *n = config_setting_name(hs);
                    char hctx[160];
                    snprintf(hctx, sizeof(hctx), "%s.headers.%s", ctx, n ? n : "?");
                    if (n == NULL || !valid_header_name(n)) {
                        errf(ld, hs, hctx, "is not a header the gateway lets you set");
                        continue;
                    }
                    u->headers[k].name = tg_xstrdup(n);
                    if (config_setting_type(hs) != CONFIG_TYPE_STRING) {
                        errf(ld, hs, hctx, "must be a string");
                        u->headers[k].value = tg_xstrdup("");
                        continue;
                    }
                    const char *w = NULL;
                    char var[128];
                    u->headers[k].value = tg_conf_expand_env(config_setting_get_string(hs), &w, var, sizeof(var));
                    if (u->headers[k].value == NULL) {
                        int unset = strcmp(w, "environment variable is not set") == 0;
                        errf(ld, hs, hctx, "%s%s%s", w, unset ? ": " : "", unset ? var : "");
                        u->headers[k].value = tg_xstrdup("");
                    }
                    for (const char *q = u->headers[k].value; *q; q++)
                        if ((unsigned char)*q < 0x20 && *q != '\t') {
                            errf(ld, hs, hctx, "contains a control character");
                            break;
                        }
                }
            }
        }
    }
    if (c->default_upstream < 0 && c->nupstreams == 1)
        c->default_upstream = 0;
}

static void load_audit(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    c->audit.max_pending = 16 * 1024 * 1024;
    const config_setting_t *g = config_lookup(cfg, "audit");
    if (g == NULL)
        return;
    if (!config_setting_is_group(g)) {
        errf(ld, g, "audit", "must be a group { file = …; args = \"hash\" | \"values\"; redact = [ … ]; }");
        return;
    }
    static const char *const known[] = {"file", "args", "redact", "max_pending_bytes", NULL};
    check_members(ld, g, known, "audit");
    c->audit.file = get_str(ld, g, "file", NULL, 1, "audit");
    char *args = get_str(ld, g, "args", "hash", 0, "audit");
    if (args && strcmp(args, "values") == 0)
        c->audit.values = 1;
    else if (args && strcmp(args, "hash") != 0)
        errf(ld, config_setting_get_member(g, "args"), "audit.args", "must be \"hash\" or \"values\"");
    free(args);
    const config_setting_t *mp = config_setting_get_member(g, "max_pending_bytes");
    if (mp != NULL) {
        if (config_setting_type(mp) != CONFIG_TYPE_INT || config_setting_get_int(mp) < 4096)
            errf(ld, mp, "audit.max_pending_bytes", "must be an integer >= 4096");
        else
            c->audit.max_pending = config_setting_get_int(mp);
    }
    const config_setting_t *r = config_setting_get_member(g, "redact");
    static const char *const default_redact[] = {"password", "passwd", "secret", "token", "api_key", "apikey",
                                                 "authorization", "cookie", "private_key", NULL};
    if (r == NULL) {
        for (const char *const *d = default_redact; *d; d++) {
            c->audit.redact = tg_xrealloc(c->audit.redact, (c->audit.nredact + 1) * sizeof(char *));
            c->audit.redact[c->audit.nredact++] = tg_xstrdup(*d);
        }
    } else if (!config_setting_is_array(r)) {
        errf(ld, r, "audit.redact", "must be an array of argument names");
    } else {
        for (int i = 0; i < config_setting_length(r); i++) {
            const char *v = config_setting_get_string_elem(r, i);
            if (v == NULL)
                continue;
            c->audit.redact = tg_xrealloc(c->audit.redact, (c->audit.nredact + 1) * sizeof(char *));
            c->audit.redact[c->audit.nredact++] = tg_xstrdup(v);
        }
    }
}

static void load_jwt(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *l = config_lookup(cfg, "jwt");
    if (l == NULL)
        return;
    if (!config_setting_is_list(l)) {
        errf(ld, l, "jwt", "must be a list of ( { issuer = …; audience = …; jwks_file = …; grant_claim = …; } )");
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
            errf(ld, g, ctx, "must be a group");
            continue;
        }
        static const char *const known[] = {"issuer", "audience", "jwks_file", "grant_claim", "skew_s", NULL};
        check_members(ld, g, known, ctx);
        j->issuer = get_str(ld, g, "issuer", NULL, 1, ctx);
        j->audience = get_str(ld, g, "audience", NULL, 1, ctx);
        j->jwks_file = get_str(ld, g, "jwks_file", NULL, 1, ctx);
        j->grant_claim = get_str(ld, g, "grant_claim", "sub", 0, ctx);
        j->skew_s = 60;
        const config_setting_t *sk = config_setting_get_member(g, "skew_s");
        if (sk != NULL) {
            if (config_setting_type(sk) != CONFIG_TYPE_INT || config_setting_get_int(sk) < 0 ||
                config_setting_get_int(sk) > 3600)
                errf(ld, sk, "skew_s", "must be an integer 0..3600");
            else
                j->skew_s = config_setting_get_int(sk);
        }
        if (j->jwks_file != NULL) {
            struct tg_buf jerr;
            tg_buf_init(&jerr);
            if (tg_jwks_load(j->jwks_file, &j->jwks, &jerr) != 0) {
                tg_buf_append(&jerr, "", 1);
                for (const char *q = jerr.base; q && *q;) {
                    const char *nl = strchr(q, '\n');
                    size_t n = nl ? (size_t)(nl - q) : strlen(q);
                    errf(ld, config_setting_get_member(g, "jwks_file"), "jwks_file", "%.*s", (int)n, q);
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
            errf(ld, s, directive, "%.*s", (int)n, q);
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

/* Policies, after upstreams are known: the upstream's own, then per-grant overrides. */
static void load_policies(struct loader *ld, config_t *cfg, struct tg_conf *c)
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
            errf(ld, pl, ctx, "must be a list of ( { upstream = …; policy = …; } )");
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
                errf(ld, e, ectx, "must be a group { upstream = …; policy = …; }");
                continue;
            }
            static const char *const known[] = {"upstream", "policy", NULL};
            check_members(ld, e, known, ectx);
            char *un = get_str(ld, e, "upstream", NULL, 1, ectx);
            gp->path = get_str(ld, e, "policy", NULL, 1, ectx);
            if (un != NULL && tg_conf_find_upstream(c, tg_slice_cstr(un), &gp->upstream) == NULL)
                errf(ld, config_setting_get_member(e, "upstream"), "upstream", "no upstream named \"%s\"", un);
            for (size_t m = 0; m < k; m++)
                if (gp->upstream >= 0 && gc->policies[m].upstream == gp->upstream)
                    errf(ld, e, ectx, "a second policy for upstream \"%s\"", un);
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

struct tg_conf *tg_conf_load(const char *path, struct tg_buf *err)
{
    struct loader ld = {path, err, 0, NULL};
    config_t cfg;
    config_init(&cfg);
    if (config_read_file(&cfg, path) != CONFIG_TRUE) {
        const char *ef = config_error_file(&cfg);
        if (config_error_type(&cfg) == CONFIG_ERR_FILE_IO)
            tg_buf_appendf(err, "%s:0: file: cannot read\n", path);
        else
            tg_buf_appendf(err, "%s:%d: syntax: %s\n", ef ? ef : path, config_error_line(&cfg),
                           config_error_text(&cfg));
        config_destroy(&cfg);
        return NULL;
    }
    ld.cfg = &cfg;
    struct tg_conf *c = tg_xcalloc(1, sizeof(*c));
    c->refcnt = 1;
    c->path = tg_xstrdup(path);
    config_setting_t *root = config_root_setting(&cfg);
    static const char *const known[] = {"log", "listen", "admin", "limits", "grants", "upstreams", "audit", "jwt",
                                        "public_url", NULL};
    check_members(&ld, root, known, "");
    load_log(&ld, &cfg, c);
    load_listeners(&ld, &cfg, c);
    load_admin(&ld, &cfg, c);
    const config_setting_t *lim = config_lookup(&cfg, "limits");
    if (lim != NULL && !config_setting_is_group(lim)) {
        errf(&ld, lim, "limits", "must be a group");
        lim = NULL;
    }
    load_ints(&ld, lim, limit_directives, &c->limits, "limits");
    load_grants(&ld, &cfg, c);
    load_upstreams(&ld, &cfg, c);
    load_audit(&ld, &cfg, c);
    load_jwt(&ld, &cfg, c);
    const config_setting_t *pu = config_lookup(&cfg, "public_url");
    if (pu != NULL) {
        const char *v = config_setting_get_string(pu);
        if (v == NULL || (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) || strchr(v, '"') ||
            strchr(v, ' '))
            errf(&ld, pu, "public_url", "must be an http:// or https:// URL without quotes or spaces");
        else
            c->public_url = tg_xstrdup(v);
    }
    c->deny_all = tg_policy_deny_all();
    if (ld.nerr == 0)
        load_policies(&ld, &cfg, c);
    config_destroy(&cfg);
    if (ld.nerr > 0) {
        tg_conf_unref(c);
        return NULL;
    }
    if (c->ngrants == 0)
        tg_log(TG_LOG_WARN, "no grants configured: every client request will get 401", "conf=%s", path);
    return c;
}

struct tg_conf *tg_conf_ref(struct tg_conf *c)
{
    c->refcnt++;
    return c;
}

void tg_conf_unref(struct tg_conf *c)
{
    if (c == NULL || --c->refcnt > 0)
        return;
    for (size_t i = 0; i < c->nlisteners; i++) {
        struct tg_listen_conf *l = &c->listeners[i];
        free(l->address);
        free(l->cert);
        free(l->key);
        for (size_t k = 0; k < l->norigins; k++)
            free(l->origins[k]);
        free(l->origins);
    }
    free(c->listeners);
    free(c->admin.address);
    for (size_t i = 0; i < c->ngrants; i++) {
        free(c->grants[i].name);
        for (size_t k = 0; k < c->grants[i].npolicies; k++) {
            free(c->grants[i].policies[k].path);
            tg_policy_unref(c->grants[i].policies[k].policy);
        }
        free(c->grants[i].policies);
    }
    free(c->grants);
    free(c->audit.file);
    for (size_t i = 0; i < c->audit.nredact; i++)
        free(c->audit.redact[i]);
    free(c->audit.redact);
    tg_policy_unref(c->deny_all);
    for (size_t i = 0; i < c->njwt; i++) {
        free(c->jwt[i].issuer);
        free(c->jwt[i].audience);
        free(c->jwt[i].jwks_file);
        free(c->jwt[i].grant_claim);
        tg_jwks_free(c->jwt[i].jwks);
    }
    free(c->jwt);
    free(c->public_url);
    tg_buf_dispose(&c->warnings);
    for (size_t i = 0; i < c->nupstreams; i++) {
        struct tg_upstream_conf *u = &c->upstreams[i];
        free(u->name);
        free(u->url);
        free(u->host);
        free(u->path);
        free(u->authority);
        for (size_t k = 0; k < u->nheaders; k++) {
            free(u->headers[k].name);
            free(u->headers[k].value);
        }
        free(u->headers);
        free(u->policy_path);
        tg_policy_unref(u->policy);
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
    }
    free(c->upstreams);
    free(c->log_file);
    free(c->path);
    free(c);
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
