#include "core/conf/conf.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libconfig.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/conf/internal.h"
#include "core/base/log.h"
#include "policy/policy.h"
#include "core/wire/tls.h"

#define LIM(f) offsetof(struct tg_limits, f)
static const struct int_directive limit_directives[] = {
    {"max_connections", LIM(max_connections), 1, 1000000, 10000, "client connections open at once"},
    {"header_bytes", LIM(header_bytes), 1024, 1048576, 16384, "request line and headers"},
    {"body_bytes", LIM(body_bytes), 1024, 1073741824, 4194304, "one request body"},
    {"response_bytes", LIM(response_bytes), 1024, 1073741824, 67108864, "one upstream JSON response"},
    {"json_depth", LIM(json_depth), 2, 1000, 64, "JSON nesting"},
    {"header_timeout_ms", LIM(header_timeout_ms), 100, 3600000, 10000, "time to send a request head"},
    {"tls_handshake_timeout_ms", LIM(tls_handshake_timeout_ms), 100, 600000, 5000, "a client's TLS handshake"},
    {"tls_handshake_slice_ms", LIM(tls_handshake_slice_ms), 0, 1000, 4, "TLS handshake work per loop iteration"},
    {"idle_timeout_ms", LIM(idle_timeout_ms), 100, 86400000, 60000, "keep-alive idle time"},
    {"session_idle_timeout_ms", LIM(session_idle_timeout_ms), 1000, 604800000, 1800000, "idle session lifetime"},
    {"sessions_per_grant", LIM(sessions_per_grant), 1, 10000000, 1000, "live sessions per grant"},
    {"inflight_per_session", LIM(inflight_per_session), 1, 100000, 64, "calls in flight per session"},
    {"output_high_water", LIM(output_high_water), 4096, 1073741824, 1048576, "bytes queued to a slow client"},
    {"drain_timeout_ms", LIM(drain_timeout_ms), 0, 3600000, 10000, "graceful drain on SIGTERM"},
    {"approvals_max", LIM(approvals_max), 0, 1000000, 1000, "calls parked for approval at once"},
    {"approvals_bytes", LIM(approvals_bytes), 0, 2147483647, 67108864, "bytes parked calls hold together"},
    {"approvals_per_grant", LIM(approvals_per_grant), 0, 1000000, 0, "calls of one grant parked at once (0: a quarter of approvals_max)"},
    {"approval_hold_max_ms", LIM(approval_hold_max_ms), 1000, 86400000, 55000,
     "longest wait of a call held for approval (clients give up at 60 s)"},
    {"approval_progress_ms", LIM(approval_progress_ms), 100, 3600000, 15000,
     "notifications/progress to a held call's client"},
    {"approval_ttl_ms", LIM(approval_ttl_ms), 1000, 86400000, 600000, "a retry-mode decision waits for the retry"},
    {"replay_bytes", LIM(replay_bytes), 0, 67108864, 65536, "events kept per SSE stream for Last-Event-ID"},
    {"sse_keepalive_ms", LIM(sse_keepalive_ms), 1000, 3600000, 15000, "comment sent on an idle SSE stream"},
    {"ws_ping_ms", LIM(ws_ping_ms), 100, 3600000, 30000, "WebSocket ping interval (no pong, or half a frame, by the next: closed)"},
    {"listens_per_grant", LIM(listens_per_grant), 1, 100000, 16, "2026-07-28 subscriptions/listen streams per grant and upstream"},
    {"stdio_evict_idle_ms", LIM(stdio_evict_idle_ms), 0, 604800000, 60000,
     "idle time after which another grant's session gives up its stdio child at max_children"},
    {"output_total_bytes", LIM(output_total_bytes), 1048576, 2147483647, 268435456,
     "bytes queued to all clients together"},
    {"dpop_replay_entries", LIM(dpop_replay_entries), 16, 10000000, 100000,
     "DPoP proofs remembered against replay"},
    {"history_calls", LIM(history_calls), 1, 4096, 64, "calls remembered per subject (and per grant) for history conditions and brakes"},
    {"history_bytes", LIM(history_bytes), 65536, 2147483647, 67108864, "bytes every remembered call takes together"},
    {NULL, 0, 0, 0, 0, NULL},
};

void tg__conf_errf(struct loader *ld, const config_setting_t *s, const char *directive, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One error, one line: a value quoted from the file may hold a newline or control bytes
     * (fuzz_conf), shown as '?' so that every line still starts with FILE:LINE:. */
    for (char *q = msg; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    /* The directive may hold a name from the file too ("upstreams.NAME.tls"), valid or not. */
    char dir[160];
    snprintf(dir, sizeof(dir), "%s", directive);
    for (char *q = dir; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    /* libconfig gives some settings no line (0: list elements, groups, the root): the nearest
     * enclosing setting that has one is named instead, and with none the line is left out. */
    const config_setting_t *at = s;
    while (at != NULL && config_setting_source_line(at) == 0)
        at = config_setting_parent(at);
    const char *file = at ? config_setting_source_file(at) : NULL;
    if (at != NULL)
        tg_buf_appendf(ld->err, "%s:%d: %s: %s\n", file ? file : ld->path, config_setting_source_line(at), dir, msg);
    else
        tg_buf_appendf(ld->err, "%s: %s: %s\n", ld->path, dir, msg);
    ld->nerr++;
}

char *tg__conf_path(const struct loader *ld, char *p)
{
    const char *slash = strrchr(ld->path, '/');
    if (p == NULL || p[0] == '\0' || p[0] == '/' || slash == NULL)
        return p; /* absolute, empty, or the conf file is in the working directory already */
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_append(&b, ld->path, (size_t)(slash - ld->path) + 1);
    tg_buf_appends(&b, p);
    tg_buf_append(&b, "", 1);
    free(p);
    return tg_buf_release(&b);
}

int tg__conf_check_readable(struct loader *ld, const config_setting_t *s, const char *directive, const char *path)
{
    int fd = path ? open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK) : -1;
    struct stat st;
    if (fd < 0) {
        if (path != NULL)
            tg__conf_errf(ld, s, directive, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    int dir = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
    close(fd);
    if (dir) {
        tg__conf_errf(ld, s, directive, "cannot open %s: %s", path, strerror(EISDIR));
        return -1;
    }
    return 0;
}

/* A file the gateway appends to (log.file, audit.file): it, or the folder it would be made in,
 * must be writable, as start needs. Nothing is created here. */
void tg__conf_check_writable(struct loader *ld, const config_setting_t *s, const char *directive, const char *path)
{
    if (path == NULL || path[0] == '\0')
        return;
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            tg__conf_errf(ld, s, directive, "cannot open %s for writing: %s", path, strerror(EISDIR));
        else if (access(path, W_OK) != 0)
            tg__conf_errf(ld, s, directive, "cannot open %s for writing: %s", path, strerror(errno));
        return;
    }
    if (errno != ENOENT) {
        tg__conf_errf(ld, s, directive, "cannot open %s for writing: %s", path, strerror(errno));
        return;
    }
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash == path ? 1 : slash - path) : 1, slash ? path : ".");
    if (access(dir, W_OK | X_OK) != 0)
        tg__conf_errf(ld, s, directive, "cannot create %s: %s: %s", path, dir, strerror(errno));
}

/* Is prog, found at path, something execvp can run? 0, or errno. */
static int executable(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return errno;
    if (S_ISDIR(st.st_mode))
        return EISDIR;
    if (!S_ISREG(st.st_mode) || access(path, X_OK) != 0)
        return EACCES;
    return 0;
}

void tg__conf_check_command(struct loader *ld, const config_setting_t *s, const char *directive, char **command,
                            const char *cwd, char *const *env)
{
    struct stat st;
    if (cwd != NULL) {
        int e = stat(cwd, &st) != 0 ? errno : !S_ISDIR(st.st_mode) ? ENOTDIR : 0;
        if (e != 0) {
            tg__conf_errf(ld, s, "cwd", "cannot use %s as the working directory: %s", cwd, strerror(e));
            return;
        }
    }
    const char *prog = command ? command[0] : NULL;
    if (prog == NULL || prog[0] == '\0') {
        tg__conf_errf(ld, s, directive, "the program (element 0) is empty");
        return;
    }
    char path[4096];
    if (strchr(prog, '/') != NULL) {
        /* A path: from the child's working directory (cwd), or the conf file's folder. */
        if (prog[0] != '/' && cwd != NULL)
            snprintf(path, sizeof(path), "%s/%s", cwd, prog);
        else if (prog[0] != '/') {
            command[0] = tg__conf_path(ld, command[0]);
            prog = command[0];
            snprintf(path, sizeof(path), "%s", prog);
        } else
            snprintf(path, sizeof(path), "%s", prog);
        int e = executable(path);
        if (e == EACCES)
            tg__conf_errf(ld, s, directive, "%s is not an executable file", path);
        else if (e != 0)
            tg__conf_errf(ld, s, directive, "cannot run %s: %s", path, strerror(e));
        return;
    }
    /* A name: looked up as the child's execvp will, on the PATH of its environment (the
     * default search path of the C library without one). */
    const char *search = "/bin:/usr/bin";
    for (char *const *e = env; e && *e; e++)
        if (strncmp(*e, "PATH=", 5) == 0)
            search = *e + 5;
    const char *denied = NULL;
    char denied_path[4096];
    for (const char *p = search;; p++) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        /* An empty entry is the working directory, a relative one is taken from it. */
        if (n == 0)
            snprintf(path, sizeof(path), "%s/%s", cwd ? cwd : ".", prog);
        else if (p[0] != '/' && cwd != NULL)
            snprintf(path, sizeof(path), "%s/%.*s/%s", cwd, (int)n, p, prog);
        else
            snprintf(path, sizeof(path), "%.*s/%s", (int)n, p, prog);
        int r = executable(path);
        if (r == 0)
            return;
        if (r == EACCES && denied == NULL) {
            snprintf(denied_path, sizeof(denied_path), "%s", path);
            denied = denied_path;
        }
        if (end == NULL)
            break;
        p = end;
    }
    if (denied != NULL)
        tg__conf_errf(ld, s, directive, "%s is not an executable file", denied);
    else
        tg__conf_errf(ld, s, directive, "\"%s\" is not found on the PATH the process gets (%s)", prog, search);
}

/* listen[].address, admin.address: the socket is bound to this address, never a name looked up. */
static void check_ip_literal(struct loader *ld, const config_setting_t *s, const char *directive, const char *addr)
{
    unsigned char buf[sizeof(struct in6_addr)];
    char v6[64];
    snprintf(v6, sizeof(v6), "%s", addr ? addr : "");
    char *scope = strchr(v6, '%'); /* fe80::1%eth0 */
    if (scope != NULL)
        *scope = '\0';
    if (addr == NULL || inet_pton(AF_INET, addr, buf) == 1 || inet_pton(AF_INET6, v6, buf) == 1)
        return;
    tg__conf_errf(ld, s, directive,
                  "\"%s\" is not an IP address; host names are not looked up (127.0.0.1 or ::1 for this host only, "
                  "0.0.0.0 or :: for every interface)",
                  addr);
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
char *tg__conf_get_str(struct loader *ld, const config_setting_t *grp, const char *name, const char *def, int required,
                       const char *ctx)
{
    char directive[160];
    snprintf(directive, sizeof(directive), "%s%s%s", ctx, ctx[0] ? "." : "", name);
    const config_setting_t *s = config_setting_get_member(grp, name);
    if (s == NULL) {
        if (required)
            tg__conf_errf(ld, grp, directive, "is required");
        return def ? tg_xstrdup(def) : NULL;
    }
    if (config_setting_type(s) != CONFIG_TYPE_STRING) {
        tg__conf_errf(ld, s, directive, "must be a string");
        return def ? tg_xstrdup(def) : NULL;
    }
    const char *why = NULL;
    char var[128];
    char *v = tg_conf_expand_env(config_setting_get_string(s), &why, var, sizeof(var));
    if (v == NULL) {
        tg__conf_errf(ld, s, directive, "%s%s%s", why, strcmp(why, "environment variable is not set") == 0 ? ": " : "",
                      strcmp(why, "environment variable is not set") == 0 ? var : "");
        return def ? tg_xstrdup(def) : NULL;
    }
    return v;
}

int tg__conf_get_bool(struct loader *ld, const config_setting_t *grp, const char *name, int def, const char *ctx)
{
    const config_setting_t *s = config_setting_get_member(grp, name);
    if (s == NULL)
        return def;
    if (config_setting_type(s) != CONFIG_TYPE_BOOL) {
        char directive[160];
        snprintf(directive, sizeof(directive), "%s.%s", ctx, name);
        tg__conf_errf(ld, s, directive, "must be true or false");
        return def;
    }
    return config_setting_get_bool(s);
}

void tg__conf_load_ints(struct loader *ld, const config_setting_t *grp, const struct int_directive *tab, void *base,
                        const char *ctx, int whole_group)
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
            tg__conf_errf(ld, s, directive, "must be an integer");
            continue;
        }
        long long v = config_setting_get_int64(s);
        if (v < d->min || v > d->max) {
            tg__conf_errf(ld, s, directive, "%lld is out of range %d..%d (%s)", v, d->min, d->max, d->help);
            continue;
        }
        *dst = (int)v;
    }
    /* Unknown members are errors: a typo must not silently fall back to a default. A group that
     * also holds other directives (an upstream) has its members checked by its loader instead. */
    if (grp == NULL || !whole_group)
        return;
    for (int i = 0; i < config_setting_length(grp); i++) {
        const config_setting_t *s = config_setting_get_elem(grp, (unsigned)i);
        const char *n = config_setting_name(s);
        int known = 0;
        for (const struct int_directive *d = tab; d->name; d++)
            if (n && strcmp(n, d->name) == 0)
                known = 1;
        if (!known) {
            char directive[160];
            snprintf(directive, sizeof(directive), "%s.%s", ctx, n ? n : "?");
            tg__conf_errf(ld, s, directive, "unknown directive");
        }
    }
}

void tg__conf_check_members(struct loader *ld, const config_setting_t *grp, const char *const *known, const char *ctx)
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
            tg__conf_errf(ld, s, directive, "unknown directive");
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
            tg__conf_errf(ld, grp, directive, "is required");
        return def;
    }
    if (config_setting_type(s) != CONFIG_TYPE_INT) {
        tg__conf_errf(ld, s, directive, "must be an integer");
        return def;
    }
    int v = config_setting_get_int(s);
    if (v < 0 || v > 65535) {
        tg__conf_errf(ld, s, directive, "%d is out of range 0..65535 (0 = any free port)", v);
        return def;
    }
    return v;
}

int tg__conf_parse_sha256(struct loader *ld, const config_setting_t *grp, const char *ctx, uint8_t out[32])
{
    char *hex = tg__conf_get_str(ld, grp, "token_sha256", NULL, 0, ctx);
    if (hex == NULL)
        return 0;
    int ok = strlen(hex) == 64 && tg_hex_decode(hex, 64, out) == 0;
    if (!ok)
        tg__conf_errf(ld, config_setting_get_member(grp, "token_sha256"), "token_sha256",
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
    static const char *const known[] = {"level", "format", "file", "access", NULL};
    tg__conf_check_members(ld, g, known, "log");
    c->log_access = tg__conf_get_bool(ld, g, "access", 0, "log");
    char *level = tg__conf_get_str(ld, g, "level", "info", 0, "log");
    char *format = tg__conf_get_str(ld, g, "format", "logfmt", 0, "log");
    c->log_file = tg__conf_path(ld, tg__conf_get_str(ld, g, "file", NULL, 0, "log"));
    tg__conf_check_writable(ld, config_setting_get_member(g, "file"), "log.file", c->log_file);
    if (level && (c->log_level = tg_log_parse_level(level)) < 0) {
        tg__conf_errf(ld, config_setting_get_member(g, "level"), "log.level", "must be error, warn, info or debug");
        c->log_level = TG_LOG_INFO;
    }
    if (format && strcmp(format, "logfmt") != 0 && strcmp(format, "json") != 0)
        tg__conf_errf(ld, config_setting_get_member(g, "format"), "log.format", "must be logfmt or json");
    else if (format)
        c->log_format = strcmp(format, "json") == 0;
    free(level);
    free(format);
}

static void load_listeners(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *l = config_lookup(cfg, "listen");
    if (l == NULL || !config_setting_is_list(l) || config_setting_length(l) == 0) {
        tg__conf_errf(ld, l, "listen", "must be a non-empty list of ( { address = …; port = …; } )");
        return;
    }
    c->nlisteners = (size_t)config_setting_length(l);
    c->listeners = tg_xcalloc(c->nlisteners, sizeof(*c->listeners));
    for (size_t i = 0; i < c->nlisteners; i++) {
        const config_setting_t *g = config_setting_get_elem(l, (unsigned)i);
        struct tg_listener_conf *lc = &c->listeners[i];
        char ctx[32];
        snprintf(ctx, sizeof(ctx), "listen[%zu]", i);
        if (!config_setting_is_group(g)) {
            tg__conf_errf(ld, g, ctx, "must be a group { address = …; port = …; }");
            continue;
        }
        static const char *const known[] = {"address", "port", "tls", "origins", NULL};
        tg__conf_check_members(ld, g, known, ctx);
        lc->address = tg__conf_get_str(ld, g, "address", "127.0.0.1", 0, ctx);
        check_ip_literal(ld, config_setting_get_member(g, "address"), "address", lc->address);
        lc->port = get_port(ld, g, ctx, -1);
        const config_setting_t *tls = config_setting_get_member(g, "tls");
        if (tls != NULL) {
            char tctx[48];
            snprintf(tctx, sizeof(tctx), "%s.tls", ctx);
            static const char *const tknown[] = {"cert", "key", "client_ca", "client_auth", "session_timeout_s", NULL};
            static const struct int_directive tints[] = {
                {"session_timeout_s", offsetof(struct tg_listener_conf, session_timeout_s), 0, 86400, 300,
                 "how long a TLS session ticket resumes a session"},
                {NULL, 0, 0, 0, 0, NULL},
            };
            if (!config_setting_is_group(tls))
                tg__conf_errf(ld, tls, tctx, "must be a group { cert = …; key = …; }");
            else {
                tg__conf_check_members(ld, tls, tknown, tctx);
                lc->tls = 1;
                lc->cert = tg__conf_path(ld, tg__conf_get_str(ld, tls, "cert", NULL, 1, tctx));
                lc->key = tg__conf_path(ld, tg__conf_get_str(ld, tls, "key", NULL, 1, tctx));
                lc->client_ca = tg__conf_path(ld, tg__conf_get_str(ld, tls, "client_ca", NULL, 0, tctx));
                tg__conf_check_readable(ld, config_setting_get_member(tls, "cert"), "cert", lc->cert);
                tg__conf_check_readable(ld, config_setting_get_member(tls, "key"), "key", lc->key);
                tg__conf_check_readable(ld, config_setting_get_member(tls, "client_ca"), "client_ca", lc->client_ca);
                tg__conf_load_ints(ld, tls, tints, lc, tctx, 0);
                char *ca = tg__conf_get_str(ld, tls, "client_auth", lc->client_ca ? "optional" : "none", 0, tctx);
                const config_setting_t *cas = config_setting_get_member(tls, "client_auth");
                if (ca && strcmp(ca, "optional") == 0)
                    lc->client_auth = TG_TLS_CLIENT_OPTIONAL;
                else if (ca && strcmp(ca, "required") == 0)
                    lc->client_auth = TG_TLS_CLIENT_REQUIRED;
                else if (ca && strcmp(ca, "none") != 0)
                    tg__conf_errf(ld, cas, "client_auth", "must be \"none\", \"optional\" or \"required\"");
                if (lc->client_auth != TG_TLS_CLIENT_NONE && lc->client_ca == NULL)
                    tg__conf_errf(ld, cas, "client_auth", "needs client_ca (the CA client certificates chain to)");
                if (lc->client_auth == TG_TLS_CLIENT_NONE && lc->client_ca != NULL)
                    tg__conf_errf(ld, cas, "client_ca", "has no use with client_auth = \"none\"");
                free(ca);
            }
        }
        const config_setting_t *o = config_setting_get_member(g, "origins");
        if (o != NULL) {
            if (!config_setting_is_array(o) && !config_setting_is_list(o)) {
                tg__conf_errf(ld, o, "origins", "must be an array of strings");
            } else {
                lc->norigins = (size_t)config_setting_length(o);
                lc->origins = tg_xcalloc(lc->norigins, sizeof(char *));
                for (size_t k = 0; k < lc->norigins; k++) {
                    const char *v = config_setting_get_string_elem(o, (int)k);
                    if (v == NULL) {
                        tg__conf_errf(ld, o, "origins", "must be an array of strings");
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
        tg__conf_errf(ld, g, "admin", "must be a group");
        return;
    }
    static const char *const known[] = {"address", "port", "token_sha256", NULL};
    tg__conf_check_members(ld, g, known, "admin");
    c->admin.enabled = 1;
    c->admin.address = tg__conf_get_str(ld, g, "address", "127.0.0.1", 0, "admin");
    check_ip_literal(ld, config_setting_get_member(g, "address"), "admin.address", c->admin.address);
    c->admin.port = get_port(ld, g, "admin", 9090);
    c->admin.has_token = tg__conf_parse_sha256(ld, g, "admin", c->admin.token_sha256);
}

/* An address as the kernel compares it for a bind: IPv4 as ::ffff:a.b.c.d. 0, or -1 for what is
 * left out of the comparison (not a literal, or scoped: fe80::1%eth0 and %eth1 are two). */
static int bind_key(const char *a, unsigned char k[16])
{
    memset(k, 0, 16);
    if (a == NULL || strchr(a, '%') != NULL)
        return -1;
    if (inet_pton(AF_INET, a, k + 12) == 1) {
        k[10] = k[11] = 0xff;
        return 0;
    }
    return inet_pton(AF_INET6, a, k) == 1 ? 0 : -1;
}

/* Would binding a and b to one port fail? The same address, or either the wildcard of the
 * other's family, or :: (which takes IPv4 too unless the host says otherwise). */
static int binds_clash(const char *a, const char *b)
{
    static const unsigned char any6[16], any4[16] = {[10] = 0xff, [11] = 0xff};
    unsigned char x[16], y[16];
    if (bind_key(a, x) != 0 || bind_key(b, y) != 0)
        return 0;
    int x4 = memcmp(x, any4, 12) == 0, y4 = memcmp(y, any4, 12) == 0;
    return memcmp(x, y, 16) == 0 || memcmp(x, any6, 16) == 0 || memcmp(y, any6, 16) == 0 ||
           (x4 && y4 && (memcmp(x, any4, 16) == 0 || memcmp(y, any4, 16) == 0));
}

/* Two of the conf's sockets (listen[], admin) on one port: start would fail on the second bind
 * with "address already in use", so the loader refuses it (port 0 is any free one). */
static void check_ports(struct loader *ld, config_t *cfg, const struct tg_conf *c)
{
    const config_setting_t *l = config_lookup(cfg, "listen");
    size_t n = c->nlisteners + (c->admin.enabled ? 1 : 0);
    for (size_t j = 1; j < n; j++) {
        int admin = j == c->nlisteners;
        const char *addr = admin ? c->admin.address : c->listeners[j].address;
        int port = admin ? c->admin.port : c->listeners[j].port;
        for (size_t i = 0; i < j && i < c->nlisteners && port > 0; i++) {
            if (c->listeners[i].port != port || !binds_clash(c->listeners[i].address, addr))
                continue;
            const config_setting_t *g = admin ? config_lookup(cfg, "admin") : config_setting_get_elem(l, (unsigned)j);
            char ctx[32];
            if (admin)
                snprintf(ctx, sizeof(ctx), "admin");
            else
                snprintf(ctx, sizeof(ctx), "listen[%zu]", j);
            tg__conf_errf(ld, config_setting_get_member(g, "port"), ctx,
                          "%s port %d is listen[%zu]'s too (%s): start would fail with \"address already in use\"",
                          addr, port, i, c->listeners[i].address);
            break;
        }
    }
}

struct tg_conf *tg_conf_load(const char *path, struct tg_buf *err) { return tg_conf_load_flags(path, err, 0); }

struct tg_conf *tg_conf_load_flags(const char *path, struct tg_buf *err, unsigned flags)
{
    struct loader ld = {path, err, 0, NULL, flags};
    config_t cfg;
    config_init(&cfg);
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        tg_buf_appendf(err, "%s: cannot open: %s\n", path, strerror(errno));
        config_destroy(&cfg);
        return NULL;
    }
    /* Read once: the text parsed is the text whose SHA-256 the audit log's checkpoints record. */
    char sha[65];
    struct tg_buf text;
    tg_buf_init(&text);
    int rd = tg__conf_read_all(f, &text, sha);
    fclose(f);
    if (rd != 0) {
        tg_buf_appendf(err, "%s: cannot read: %s\n", path, rd > 0 ? "larger than 16 MiB" : strerror(errno));
        tg_buf_dispose(&text);
        config_destroy(&cfg);
        return NULL;
    }
    int parsed = config_read_string(&cfg, text.base);
    tg_buf_dispose(&text);
    if (parsed != CONFIG_TRUE) {
        const char *ef = config_error_file(&cfg);
        if (config_error_type(&cfg) == CONFIG_ERR_FILE_IO)
            tg_buf_appendf(err, "%s: cannot read: %s\n", path, strerror(errno));
        else
            tg_buf_appendf(err, "%s:%d: syntax: %s\n", ef ? ef : path, config_error_line(&cfg),
                           config_error_text(&cfg));
        config_destroy(&cfg);
        return NULL;
    }
    ld.cfg = &cfg;
    struct tg_conf *c = tg_xcalloc(1, sizeof(*c));
    static uint64_t serials; /* a reload loads in a worker thread */
    c->serial = __atomic_add_fetch(&serials, 1, __ATOMIC_RELAXED);
    c->refcnt = 1;
    c->path = tg_xstrdup(path);
    memcpy(c->sha256, sha, sizeof(sha));
    config_setting_t *root = config_root_setting(&cfg);
    static const char *const known[] = {"log", "listen", "admin", "limits", "grants", "upstreams", "audit", "jwt",
                                        "public_url", "cluster", "approvals", "signals", NULL};
    tg__conf_check_members(&ld, root, known, "");
    load_log(&ld, &cfg, c);
    load_listeners(&ld, &cfg, c);
    load_admin(&ld, &cfg, c);
    check_ports(&ld, &cfg, c);
    const config_setting_t *lim = config_lookup(&cfg, "limits");
    if (lim != NULL && !config_setting_is_group(lim)) {
        tg__conf_errf(&ld, lim, "limits", "must be a group");
        lim = NULL;
    }
    tg__conf_load_ints(&ld, lim, limit_directives, &c->limits, "limits", 1);
    if (c->limits.approvals_per_grant == 0)
        c->limits.approvals_per_grant = c->limits.approvals_max / 4 > 0 ? c->limits.approvals_max / 4 : 1;
    if (c->limits.approval_hold_max_ms > 60000)
        tg_buf_appendf(&c->warnings, "%s: limits.approval_hold_max_ms: above 60 s, a held call outlives its client: "
                       "MCP clients with default options give up after 60 s unless they reset their timeout on "
                       "progress\n", ld.path);
    tg__conf_load_grants(&ld, &cfg, c);
    tg__conf_load_upstreams(&ld, &cfg, c);
    tg__conf_load_signals(&ld, &cfg, c);
    tg__conf_load_upcred(&ld, &cfg, c);
    tg__conf_load_audit(&ld, &cfg, c);
    tg__conf_load_approvals(&ld, &cfg, c);
    tg__conf_load_cluster(&ld, &cfg, c);
    tg__conf_load_jwt(&ld, &cfg, c);
    const config_setting_t *pu = config_lookup(&cfg, "public_url");
    if (pu != NULL) {
        const char *v = config_setting_get_string(pu);
        if (v == NULL || (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) || strchr(v, '"') ||
            strchr(v, ' '))
            tg__conf_errf(&ld, pu, "public_url", "must be an http:// or https:// URL without quotes or spaces");
        else
            c->public_url = tg_xstrdup(v);
    }
    c->deny_all = tg_policy_deny_all();
    if (ld.nerr == 0)
        tg__conf_load_policies(&ld, &cfg, c);
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
        struct tg_listener_conf *l = &c->listeners[i];
        free(l->address);
        free(l->cert);
        free(l->key);
        free(l->client_ca);
        for (size_t k = 0; k < l->norigins; k++)
            free(l->origins[k]);
        free(l->origins);
    }
    free(c->listeners);
    free(c->admin.address);
    tg__conf_upcred_free(c);
    tg__conf_grants_free(c);
    free(c->audit.file);
    free(c->audit.signing_key);
    for (size_t i = 0; i < c->audit.nredact; i++)
        free(c->audit.redact[i]);
    free(c->audit.redact);
    tg_policy_unref(c->deny_all);
    tg__conf_jwt_free(c);
    free(c->public_url);
    tg_buf_dispose(&c->warnings);
    tg__conf_upstreams_free(c);
    tg__conf_cluster_free(c);
    tg__conf_approvals_free(c);
    free(c->log_file);
    free(c->path);
    free(c);
}
