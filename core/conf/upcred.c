/* Credentials toward upstreams, per grant or per user: grants[].upstream_headers (static header
 * lines a grant's requests carry to one upstream) and upstreams[].token_exchange (an RFC 8693
 * exchange of the client's JWT for a token scoped to the upstream; the exchange itself runs in
 * upstream/token_exchange.c). Loaded after grants and upstreams, since each names the other.
 *
 * Every secret read here (header values, the client secret) stays in the conf: never logged,
 * never shown to a client. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/conf/conf.h"
#include "core/conf/internal.h"

/* { Name = "value"; … } into *out (n of them); names through tg__conf_header_name_ok, values
 * expanded (${VAR}) and free of control characters. */
static void load_headers(struct loader *ld, const config_setting_t *h, const char *ctx, struct tg_header **out,
                         size_t *n)
{
    *n = (size_t)config_setting_length(h);
    *out = tg_xcalloc(*n + 1, sizeof(**out));
    for (size_t k = 0; k < *n; k++) {
        const config_setting_t *hs = config_setting_get_elem(h, (unsigned)k);
        const char *name = config_setting_name(hs);
        struct tg_header *e = &(*out)[k];
        char hctx[200];
        snprintf(hctx, sizeof(hctx), "%s.%s", ctx, name ? name : "?");
        e->name = tg_xstrdup(name ? name : "");
        if (name == NULL || !tg__conf_header_name_ok(name)) {
            tg__conf_errf(ld, hs, hctx, "is not a header the gateway lets you set");
            e->value = tg_xstrdup("");
            continue;
        }
        if (config_setting_type(hs) != CONFIG_TYPE_STRING) {
            tg__conf_errf(ld, hs, hctx, "must be a string");
            e->value = tg_xstrdup("");
            continue;
        }
        const char *w = NULL;
        char var[128];
        e->value = tg_conf_expand_env(config_setting_get_string(hs), &w, var, sizeof(var));
        if (e->value == NULL) {
            int unset = strcmp(w, "environment variable is not set") == 0;
            tg__conf_errf(ld, hs, hctx, "%s%s%s", w, unset ? ": " : "", unset ? var : "");
            e->value = tg_xstrdup("");
        } else if (!tg_header_value_safe(e->value, strlen(e->value))) {
            tg__conf_errf(ld, hs, hctx, "must be printable ASCII, not empty (no CR, LF or other control characters)");
        }
    }
}

/* grants[].upstream_headers = { UPSTREAM = { Name = "value"; }; }: one entry per upstream. */
static void load_grant_headers(struct loader *ld, const config_setting_t *g, struct tg_conf *c, struct tg_grant_conf *gc,
                               const char *ctx)
{
    const config_setting_t *uh = config_setting_get_member(g, "upstream_headers");
    if (uh == NULL)
        return;
    char uctx[96];
    snprintf(uctx, sizeof(uctx), "%s.upstream_headers", ctx);
    if (!config_setting_is_group(uh)) {
        tg__conf_errf(ld, uh, uctx, "must be a group { UPSTREAM = { Name = \"value\"; }; }");
        return;
    }
    gc->nupheaders = (size_t)config_setting_length(uh);
    gc->upheaders = tg_xcalloc(gc->nupheaders + 1, sizeof(*gc->upheaders));
    for (size_t i = 0; i < gc->nupheaders; i++) {
        const config_setting_t *e = config_setting_get_elem(uh, (unsigned)i);
        struct tg_grant_upheaders *gu = &gc->upheaders[i];
        const char *un = config_setting_name(e);
        char ectx[200];
        snprintf(ectx, sizeof(ectx), "%s.%s", uctx, un ? un : "?");
        gu->upstream = -1;
        const struct tg_upstream_conf *u = un ? tg_conf_find_upstream(c, tg_slice_cstr(un), &gu->upstream) : NULL;
        if (u == NULL) {
            tg__conf_errf(ld, e, ectx, "no upstream named \"%s\"", un ? un : "");
            continue;
        }
        if (u->transport == TG_UP_STDIO) {
            tg__conf_errf(ld, e, ectx, "is a stdio upstream: there is no HTTP request to carry headers (give the "
                                       "child its credentials through env)");
            continue;
        }
        if (!config_setting_is_group(e)) {
            tg__conf_errf(ld, e, ectx, "must be a group { Name = \"value\"; }");
            continue;
        }
        load_headers(ld, e, ectx, &gu->headers, &gu->nheaders);
        struct tg_buf b;
        tg_buf_init(&b);
        for (size_t k = 0; k < gu->nheaders; k++)
            tg_buf_appendf(&b, "%s: %s\r\n", gu->headers[k].name, gu->headers[k].value);
        tg_buf_append(&b, "", 1);
        gu->lines = tg_buf_release(&b);
    }
}

static int is_loopback_host(const char *h)
{
    unsigned char a[16];
    if (strcasecmp(h, "localhost") == 0)
        return 1;
    if (inet_pton(AF_INET, h, a) == 1)
        return a[0] == 127;
    if (inet_pton(AF_INET6, h, a) == 1) {
        static const unsigned char one[16] = {[15] = 1};
        return memcmp(a, one, 16) == 0;
    }
    return 0;
}

/* application/x-www-form-urlencoded (RFC 6749 appendix B: also for client_secret_basic). */
void tg__conf_form_encode(struct tg_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' ||
            *p == '.' || *p == '_' || *p == '~') {
            tg_buf_append(b, (const char *)p, 1);
        } else {
            char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
            tg_buf_append(b, e, 3);
        }
    }
}

static void base64(struct tg_buf *out, const unsigned char *in, size_t n)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        char q[4] = {al[v >> 18 & 63], al[v >> 12 & 63], i + 1 < n ? al[v >> 6 & 63] : '=', i + 2 < n ? al[v & 63] : '='};
        tg_buf_append(out, q, 4);
    }
}

/* The client secret: the file's first line (a trailing newline is not part of it). */
static char *read_secret(struct loader *ld, const config_setting_t *s, const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tg__conf_errf(ld, s, "client_secret_file", "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        tg__conf_errf(ld, s, "client_secret_file", "%s is not a regular file", path);
        return NULL;
    }
    if ((st.st_mode & 077) != 0) {
        close(fd);
        tg__conf_errf(ld, s, "client_secret_file", "%s is readable by others (mode %03o): chmod 600 it", path,
                      (unsigned)(st.st_mode & 0777));
        return NULL;
    }
    char buf[1025];
    ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        n--;
    if (n <= 0 || (size_t)n >= sizeof(buf) || memchr(buf, '\n', (size_t)n) != NULL || memchr(buf, '\0', (size_t)n)) {
        tg__conf_errf(ld, s, "client_secret_file", "%s must hold one line of 1 to 1024 bytes", path);
        memset(buf, 0, sizeof(buf));
        return NULL;
    }
    char *v = tg_xcalloc(1, (size_t)n + 1);
    memcpy(v, buf, (size_t)n);
    memset(buf, 0, sizeof(buf));
    return v;
}

/* upstreams[].token_exchange = { token_endpoint; client_id; client_secret_file; audience; scope; ca; } */
static void load_token_exchange(struct loader *ld, const config_setting_t *g, struct tg_upstream_conf *u,
                                const char *ctx)
{
    const config_setting_t *t = config_setting_get_member(g, "token_exchange");
    if (t == NULL)
        return;
    char tctx[96];
    snprintf(tctx, sizeof(tctx), "%s.token_exchange", ctx);
    if (!config_setting_is_group(t)) {
        tg__conf_errf(ld, t, tctx, "must be a group { token_endpoint = …; client_id = …; client_secret_file = …; }");
        return;
    }
    if (u->transport == TG_UP_STDIO) {
        tg__conf_errf(ld, t, tctx, "is for HTTP upstreams (a stdio child gets no Authorization header)");
        return;
    }
    static const char *const known[] = {"token_endpoint", "client_id", "client_secret_file", "audience", "scope", "ca",
                                        NULL};
    tg__conf_check_members(ld, t, known, tctx);
    struct tg_token_exchange_conf *x = tg_xcalloc(1, sizeof(*x));
    u->token_exchange = x;
    x->token_endpoint = tg__conf_get_str(ld, t, "token_endpoint", NULL, 1, tctx);
    x->client_id = tg__conf_get_str(ld, t, "client_id", NULL, 1, tctx);
    x->client_secret_file = tg__conf_path(ld, tg__conf_get_str(ld, t, "client_secret_file", NULL, 1, tctx));
    x->audience = tg__conf_get_str(ld, t, "audience", NULL, 0, tctx);
    x->scope = tg__conf_get_str(ld, t, "scope", NULL, 0, tctx);
    x->ca = tg__conf_path(ld, tg__conf_get_str(ld, t, "ca", NULL, 0, tctx));
    if (x->token_endpoint != NULL) {
        struct tg_upstream_conf e = {.url = x->token_endpoint};
        const char *why = NULL;
        const config_setting_t *es = config_setting_get_member(t, "token_endpoint");
        if (tg_conf_parse_url(&e, &why) != 0)
            tg__conf_errf(ld, es, "token_endpoint", "\"%s\" %s", x->token_endpoint, why);
        else if (!e.tls && !is_loopback_host(e.host))
            tg__conf_errf(ld, es, "token_endpoint",
                          "\"%s\": plain http:// only to a loopback address (the client secret and the users' "
                          "tokens cross it); use https://",
                          x->token_endpoint);
        else if (!e.tls && x->ca != NULL)
            tg__conf_errf(ld, config_setting_get_member(t, "ca"), "ca", "has no use with an http:// token_endpoint");
        free(e.host);
        free(e.path);
        free(e.authority);
    }
    if (x->ca != NULL)
        tg__conf_check_readable(ld, config_setting_get_member(t, "ca"), "ca", x->ca);
    if (x->client_id != NULL && x->client_id[0] == '\0')
        tg__conf_errf(ld, config_setting_get_member(t, "client_id"), "client_id", "must not be empty");
    char *secret = x->client_secret_file
                       ? read_secret(ld, config_setting_get_member(t, "client_secret_file"), x->client_secret_file)
                       : NULL;
    if (secret != NULL && x->client_id != NULL) {
        /* client_secret_basic: both form-encoded, then base64 (RFC 6749 2.3.1). */
        struct tg_buf raw, b;
        tg_buf_init(&raw);
        tg_buf_init(&b);
        tg__conf_form_encode(&raw, x->client_id);
        tg_buf_append(&raw, ":", 1);
        tg__conf_form_encode(&raw, secret);
        tg_buf_appends(&b, "Authorization: Basic ");
        base64(&b, (const unsigned char *)raw.base, raw.len);
        tg_buf_appends(&b, "\r\nContent-Type: application/x-www-form-urlencoded\r\nAccept: application/json\r\n");
        tg_buf_append(&b, "", 1);
        memset(raw.base, 0, raw.len);
        tg_buf_dispose(&raw);
        x->headers = tg_buf_release(&b);
    }
    if (secret != NULL) {
        memset(secret, 0, strlen(secret));
        free(secret);
    }
    struct tg_buf f;
    tg_buf_init(&f);
    if (x->audience != NULL) {
        tg_buf_appends(&f, "&audience=");
        tg__conf_form_encode(&f, x->audience);
    }
    if (x->scope != NULL) {
        tg_buf_appends(&f, "&scope=");
        tg__conf_form_encode(&f, x->scope);
    }
    tg_buf_append(&f, "", 1);
    x->form_tail = tg_buf_release(&f);
}

void tg__conf_load_upcred(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    const config_setting_t *ul = config_lookup(cfg, "upstreams");
    for (size_t i = 0; ul != NULL && config_setting_is_list(ul) && i < c->nupstreams; i++) {
        const config_setting_t *g = config_setting_get_elem(ul, (unsigned)i);
        char ctx[96];
        if (g == NULL || !config_setting_is_group(g))
            continue;
        snprintf(ctx, sizeof(ctx), "upstreams.%s", c->upstreams[i].name ? c->upstreams[i].name : "?");
        load_token_exchange(ld, g, &c->upstreams[i], ctx);
    }
    const config_setting_t *gl = config_lookup(cfg, "grants");
    for (size_t i = 0; gl != NULL && config_setting_is_list(gl) && i < c->ngrants; i++) {
        const config_setting_t *g = config_setting_get_elem(gl, (unsigned)i);
        char ctx[96];
        if (g == NULL || !config_setting_is_group(g))
            continue;
        snprintf(ctx, sizeof(ctx), "grants.%s", c->grants[i].name ? c->grants[i].name : "?");
        load_grant_headers(ld, g, c, &c->grants[i], ctx);
    }
}

const struct tg_grant_upheaders *tg_conf_grant_upheaders(const struct tg_grant_conf *g, const char *upstream,
                                                         const struct tg_conf *c)
{
    for (size_t i = 0; g != NULL && i < g->nupheaders; i++) {
        int u = g->upheaders[i].upstream;
        if (u >= 0 && (size_t)u < c->nupstreams && strcmp(c->upstreams[u].name, upstream) == 0)
            return &g->upheaders[i];
    }
    return NULL;
}

static void headers_free(struct tg_header *h, size_t n)
{
    for (size_t k = 0; h != NULL && k < n; k++) {
        free(h[k].name);
        if (h[k].value != NULL)
            memset(h[k].value, 0, strlen(h[k].value));
        free(h[k].value);
    }
    free(h);
}

void tg__conf_upcred_free(struct tg_conf *c)
{
    for (size_t i = 0; i < c->ngrants; i++) {
        struct tg_grant_conf *g = &c->grants[i];
        for (size_t k = 0; k < g->nupheaders; k++) {
            headers_free(g->upheaders[k].headers, g->upheaders[k].nheaders);
            if (g->upheaders[k].lines != NULL)
                memset(g->upheaders[k].lines, 0, strlen(g->upheaders[k].lines));
            free(g->upheaders[k].lines);
        }
        free(g->upheaders);
        g->upheaders = NULL;
    }
    for (size_t i = 0; i < c->nupstreams; i++) {
        struct tg_token_exchange_conf *x = c->upstreams[i].token_exchange;
        if (x == NULL)
            continue;
        free(x->token_endpoint);
        free(x->client_id);
        free(x->client_secret_file);
        free(x->audience);
        free(x->scope);
        free(x->ca);
        if (x->headers != NULL)
            memset(x->headers, 0, strlen(x->headers));
        free(x->headers);
        free(x->form_tail);
        free(x);
        c->upstreams[i].token_exchange = NULL;
    }
}
