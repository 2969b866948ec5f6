/* `tollgate pin` (core/cmd/pin.h): the command line, where the pin file goes, and --diff. The
 * listing is `tollgate scan`'s (core/cmd/scan.c), the file format policy/pins.c. */
#include "core/cmd/pin.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "core/cmd/scan.h"
#include "core/cmd/scan_client.h"
#include "core/conf/conf.h"
#include "policy/explain.h"
#include "policy/pins.h"
#include "policy/policy.h"

#define PIN_MAX_HEADERS 64

static const char usage_text[] =
    "usage:\n"
    "  tollgate pin [-c CONF] [--out FILE] [--timeout SECONDS] UPSTREAM\n"
    "      Connect to the conf's upstream UPSTREAM as `tollgate scan` does (its url with its headers\n"
    "      and TLS settings, or its command with its env and cwd), list its tools and write a pin\n"
    "      file: per tool its definition (name, description, inputSchema, outputSchema,\n"
    "      annotations) and the SHA-256 of its canonical JSON. The file goes to --out FILE, else\n"
    "      to the upstream's pins = \"FILE\", else beside its policy as POLICY_BASENAME.pins.json\n"
    "      (the line to add to the conf is printed). With pins set, the gateway hides and denies\n"
    "      a tool whose listed definition differs from its pin.\n"
    "  tollgate pin --diff [-c CONF] [--timeout SECONDS] UPSTREAM\n"
    "      Compare the upstream's pin file with what the upstream lists now: tools changed (the\n"
    "      fields that differ, the description before and after), added (listed, not pinned) and\n"
    "      removed (pinned, no longer listed).\n"
    "      CONF defaults to conf/tollgate.conf. --timeout: how long to wait for each answer\n"
    "      (default 10 s). Exit: pin 0 written, 1 the upstream could not be listed or the file not\n"
    "      written, 2 bad arguments or conf; --diff 0 no difference, 1 differences, 2 errors.\n";

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tollgate: pin: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* The default pin file: beside the policy, its extension replaced; else beside the conf. */
static char *default_path(const struct tg_conf *conf, const struct tg_upstream_conf *u)
{
    struct tg_buf b;
    tg_buf_init(&b);
    if (u->policy_path != NULL) {
        const char *p = u->policy_path, *slash = strrchr(p, '/'), *dot = strrchr(p, '.');
        size_t n = dot != NULL && (slash == NULL || dot > slash + 1) ? (size_t)(dot - p) : strlen(p);
        tg_buf_append(&b, p, n);
    } else {
        const char *slash = strrchr(conf->path, '/');
        if (slash != NULL)
            tg_buf_append(&b, conf->path, (size_t)(slash - conf->path + 1));
        tg_buf_appends(&b, u->name);
    }
    tg_buf_appends(&b, ".pins.json");
    tg_buf_append(&b, "", 1);
    char *s = strdup(b.base);
    tg_buf_dispose(&b);
    return s;
}

/* The client for upstream u: its URL or command as the conf has them. 0, or 2 (printed). */
static int client_for(struct tg_scan_client *c, const struct tg_upstream_conf *u, struct tg_scan_header *h,
                      struct tg_buf *lines)
{
    if (u->transport == TG_UP_STDIO) {
        c->stdio = 1;
        c->env = u->env;
        c->cwd = u->cwd;
        return 0;
    }
    if (u->transport != TG_UP_STREAMABLE) {
        fail("upstream %s uses transport \"sse\"; tollgate pin lists Streamable HTTP and stdio upstreams (write "
             "the pin file with tollgate scan --pin FILE against a Streamable HTTP endpoint of the server)",
             u->name);
        return 2;
    }
    snprintf(c->addr, sizeof(c->addr), "%s", u->host);
    snprintf(c->port, sizeof(c->port), "%d", u->port);
    snprintf(c->host, sizeof(c->host), "%s", u->authority);
    c->path = u->path;
    c->tls = u->tls_ctx;
    /* The upstream's own headers (its credential among them): "Name: value" lines, each its own
     * string in lines (offsets first, pointers once the buffer stops moving). */
    size_t off[PIN_MAX_HEADERS];
    size_t n = u->nheaders < PIN_MAX_HEADERS ? u->nheaders : PIN_MAX_HEADERS;
    for (size_t i = 0; i < n; i++) {
        off[i] = lines->len;
        tg_buf_appendf(lines, "%s: %s", u->headers[i].name, u->headers[i].value);
        tg_buf_append(lines, "", 1);
    }
    for (size_t i = 0; i < n; i++)
        h[i].line = lines->base + off[i];
    c->headers = h;
    c->nheaders = n;
    return 0;
}

static const cJSON *listed(const cJSON *tools, const char *name)
{
    for (const cJSON *t = tools->child; t != NULL; t = t->next) {
        const cJSON *n = tg_json_get(t, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return t;
    }
    return NULL;
}

static int same_field(const cJSON *a, const cJSON *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    struct tg_buf x, y;
    tg_buf_init(&x);
    tg_buf_init(&y);
    tg_json_canon(&x, a);
    tg_json_canon(&y, b);
    int same = x.len == y.len && memcmp(x.base, y.base, x.len) == 0;
    tg_buf_dispose(&x);
    tg_buf_dispose(&y);
    return same;
}

static void print_value(const char *label, const cJSON *v)
{
    struct tg_buf b;
    tg_buf_init(&b);
    if (v == NULL)
        tg_buf_appends(&b, "(absent)");
    else
        tg_json_write(&b, v);
    printf("  %s %.*s\n", label, (int)b.len, b.base);
    tg_buf_dispose(&b);
}

/* The differences between the pins and the tools listed, printed. Returns how many. */
static int diff(const struct tg_pins *pins, const cJSON *tools, const char *upstream)
{
    static const char *const fields[] = {"name", "description", "inputSchema", "outputSchema", "annotations", NULL};
    int ndiff = 0;
    for (size_t i = 0; i < tg_pins_count(pins); i++) {
        const char *name = tg_pins_name(pins, i);
        const cJSON *def = tg_pins_definition(pins, i), *now = listed(tools, name);
        if (now == NULL) {
            printf("removed: %s (pinned, no longer listed)\n", name);
            ndiff++;
            continue;
        }
        uint8_t h[32];
        tg_pins_hash(now, h);
        if (memcmp(h, tg_pins_find(pins, name), 32) == 0)
            continue;
        ndiff++;
        printf("changed: %s (fields:", name);
        for (int f = 0; fields[f]; f++)
            if (!same_field(tg_json_get(def, fields[f]), tg_json_get(now, fields[f])))
                printf(" %s", fields[f]);
        printf(")\n");
        const cJSON *d0 = tg_json_get(def, "description"), *d1 = tg_json_get(now, "description");
        if (!same_field(d0, d1)) {
            print_value("description before:", d0);
            print_value("description after: ", d1);
        }
    }
    for (const cJSON *t = tools->child; t != NULL; t = t->next) {
        const cJSON *n = tg_json_get(t, "name");
        if (cJSON_IsString(n) && tg_pins_find(pins, n->valuestring) == NULL) {
            printf("added: %s (listed, not pinned)\n", n->valuestring);
            ndiff++;
        }
    }
    if (ndiff == 0)
        printf("no difference: upstream %s lists the %zu pinned tools as pinned (%s)\n", upstream,
               tg_pins_count(pins), tg_pins_path(pins));
    else
        printf("%d difference(s) between %s and what upstream %s lists now; review them, then pin again with "
               "tollgate pin %s\n",
               ndiff, tg_pins_path(pins), upstream, upstream);
    return ndiff;
}

void tg_pin_explain(const struct tg_upstream_conf *u, const struct tg_policy *p, const char *tool, int refused,
                    struct tg_policy_explain *e, char *pin, size_t n)
{
    pin[0] = '\0';
    if (u->pins == NULL || !tg_pins_explain(u->pins, p, tool, pin, n) || refused)
        return;
    memset(&e->d, 0, sizeof(e->d));
    e->d.verdict = TG_VERDICT_DENY;
    snprintf(e->d.rule, sizeof(e->d.rule), "pin");
    snprintf(e->d.message, sizeof(e->d.message),
             "tool \"%s\" of upstream \"%s\" is not pinned, and the policy denies by default", tool, u->name);
    e->where[0] = '\0';
    e->cond = -1;
    e->hidden = 1;
}

static int usage_error(const char *why)
{
    fail("%s", why);
    fputs(usage_text, stderr);
    return 2;
}

int tg_pin_cli(int argc, char **argv)
{
    const char *conf_path = "conf/tollgate.conf", *out = NULL, *name = NULL;
    int want_diff = 0, timeout_ms = 10000;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if (strcmp(a, "--diff") == 0) {
            want_diff = 1;
        } else if (strcmp(a, "-c") == 0 && i + 1 < argc) {
            conf_path = argv[++i];
        } else if (strcmp(a, "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
            char *e;
            double s = strtod(argv[++i], &e);
            if (*e != '\0' || !(s > 0 && s <= 3600))
                return usage_error("--timeout wants a number of seconds between 0 and 3600");
            timeout_ms = (int)(s * 1000) > 0 ? (int)(s * 1000) : 1;
        } else if (a[0] == '-') {
            return usage_error("unknown option");
        } else if (name == NULL) {
            name = a;
        } else {
            return usage_error("one UPSTREAM only");
        }
    }
    if (name == NULL)
        return usage_error("UPSTREAM (an upstream's name in the conf) is required");
    if (want_diff && out != NULL)
        return usage_error("--out is for writing a pin file, not for --diff");
    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_conf *conf = tg_conf_load_flags(conf_path, &err, TG_CONF_NO_PINS);
    if (conf == NULL) {
        fwrite(err.base, 1, err.len, stderr);
        fail("configuration %s is invalid", conf_path);
        tg_buf_dispose(&err);
        return 2;
    }
    tg_buf_dispose(&err);
    const struct tg_upstream_conf *u = NULL;
    for (size_t i = 0; i < conf->nupstreams; i++)
        if (strcmp(conf->upstreams[i].name, name) == 0)
            u = &conf->upstreams[i];
    int rc = 2;
    struct tg_pins *pins = NULL;
    char *path = NULL;
    struct tg_buf lines;
    tg_buf_init(&lines);
    struct tg_scan_header headers[PIN_MAX_HEADERS];
    struct tg_scan_client c = {.timeout_ms = timeout_ms, .next_id = 1};
    cJSON *tools = cJSON_CreateArray();
    if (u == NULL) {
        fail("%s has no upstream named \"%s\"", conf_path, name);
        goto done;
    }
    if (want_diff) {
        if (u->pins_path == NULL) {
            fail("upstream %s has no pins = \"FILE\" in %s; write one with tollgate pin %s", name, conf_path, name);
            goto done;
        }
        struct tg_buf perr, pwarn;
        tg_buf_init(&perr);
        tg_buf_init(&pwarn);
        int bad = tg_pins_load(u->pins_path, u->name, &pins, &perr, &pwarn) != 0;
        if (perr.len > 0)
            fwrite(perr.base, 1, perr.len, stderr);
        if (pwarn.len > 0)
            fwrite(pwarn.base, 1, pwarn.len, stderr);
        tg_buf_dispose(&perr);
        tg_buf_dispose(&pwarn);
        if (bad)
            goto done;
    }
    if (client_for(&c, u, headers, &lines) != 0)
        goto done;
    signal(SIGPIPE, SIG_IGN);
    rc = want_diff ? 2 : 1;
    if (tg_scan_client_start(&c, c.stdio ? u->command : NULL) != 0 || tg_scan_list_tools(&c, tools, NULL) != 0) {
        tg_scan_client_stop(&c);
        goto done;
    }
    tg_scan_client_stop(&c);
    if (want_diff) {
        rc = diff(pins, tools, name) > 0 ? 1 : 0;
        goto done;
    }
    path = strdup(out != NULL ? out : u->pins_path != NULL ? u->pins_path : "");
    if (path[0] == '\0') {
        free(path);
        path = default_path(conf, u);
    }
    struct tg_buf werr;
    tg_buf_init(&werr);
    if (tg_pins_write_file(path, u->name, tools, &werr) != 0) {
        fail("%.*s", (int)werr.len, werr.base);
        tg_buf_dispose(&werr);
        goto done;
    }
    tg_buf_dispose(&werr);
    rc = 0;
    fprintf(stderr, "tollgate: pin: %d tool(s) of upstream %s pinned in %s\n", cJSON_GetArraySize(tools), name, path);
    if (u->pins_path == NULL || (out != NULL && strcmp(out, u->pins_path) != 0))
        fprintf(stderr, "tollgate: pin: to enforce it, add to upstream %s in %s:\n    pins = \"%s\";\n", name,
                conf_path, path);
done:
    cJSON_Delete(tools);
    tg_pins_unref(pins);
    free(path);
    tg_buf_dispose(&lines);
    tg_conf_unref(conf);
    return rc;
}
