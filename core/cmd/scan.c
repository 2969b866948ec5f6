/* `tollgate scan` (core/cmd/scan.h): the command line, the MCP lifecycle and tools/list's pages;
 * the link to the server is core/cmd/scan_client.c, the policy policy/suggest.c. */
#include "core/cmd/scan.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "core/cmd/scan_client.h"
#include "policy/pins.h"
#include "policy/suggest.h"
#include "core/wire/tls.h"

#define SCAN_MAX_HEADERS 32
#define SCAN_MAX_PAGES 1000
#define SCAN_MAX_TOOLS 10000
#define SCAN_PROTOCOL "2025-06-18"

static const char usage_text[] =
    "usage:\n"
    "  tollgate scan [--json] [--pin FILE] [--timeout SECONDS] [--header 'Name: value']...\n"
    "                [--ca FILE | --insecure]\n"
    "                http[s]://HOST[:PORT]/PATH\n"
    "  tollgate scan [--json] [--pin FILE] [--timeout SECONDS] -- COMMAND [ARG...]\n"
    "      Connect to an MCP server as a client (MCP " SCAN_PROTOCOL "), list its tools (and its\n"
    "      resources, resource templates and prompts when it offers them) and print a starting\n"
    "      policy for them in PolicyLayer's format on stdout: YAML with a comment per entry saying\n"
    "      why it got its rule, or JSON with --json. The policy has default: deny, so any tool,\n"
    "      resource or prompt it does not list is refused and hidden. Check it with\n"
    "      `tollgate policy check FILE`.\n"
    "      URL: a Streamable HTTP endpoint (one POST per message, JSON or SSE answers, the\n"
    "      Mcp-Session-Id sent back); --header adds a request header, e.g. an Authorization.\n"
    "      https://: TLS 1.2 as the gateway's https upstreams, the certificate checked against\n"
    "      --ca FILE (PEM) or " TG_TLS_SYSTEM_CA " and the URL's host, before\n"
    "      anything is sent; --insecure skips the certificate check (for a test server only).\n"
    "      -- COMMAND: start a stdio server (newline-delimited JSON on its stdin and stdout; its\n"
    "      stderr is passed through) and end it when done.\n"
    "      --timeout: how long to wait for each answer, connecting and the TLS handshake included\n"
    "      (default 10 s).\n"
    "      --pin FILE: also write a pin file of the tools listed (their definitions and SHA-256s)\n"
    "      to FILE; name it in the conf as the upstream's pins = \"FILE\" (tollgate pin --help).\n"
    "      Exit 0 when the policy was printed, 1 when the server could not be scanned, 2 on bad\n"
    "      arguments.\n"
    "\n";

static const char *str_at(const cJSON *o, const char *k)
{
    const cJSON *v = tg_json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* METHOD page by page (following nextCursor), the objects of each answer's FIELD array moved
 * into `into`. Returns 0, 1 when the server answered with an error or without the array (printed
 * as a warning unless required, then it is an error), -1 when there was no answer. */
static int list_pages(struct tg_scan_client *c, const char *method, const char *field, cJSON *into, int required)
{
    char *cursor = NULL;
    int pages = 0;
    for (;;) {
        struct tg_buf params;
        tg_buf_init(&params);
        if (cursor != NULL) {
            tg_buf_appends(&params, "{\"cursor\":");
            tg_json_write_string(&params, cursor, strlen(cursor));
            tg_buf_appends(&params, "}");
        }
        tg_buf_append(&params, "", 1);
        cJSON *msg = NULL;
        const cJSON *result;
        char errtext[300];
        int rc = tg_scan_client_rpc(c, method, cursor != NULL ? params.base : NULL, &msg, &result, errtext, sizeof(errtext));
        tg_buf_dispose(&params);
        const cJSON *list = rc == 0 ? tg_json_get(result, field) : NULL;
        if (rc == 0 && !cJSON_IsArray(list)) {
            snprintf(errtext, sizeof(errtext), "answered without a %s array", field);
            rc = 1;
        }
        if (rc == 1)
            tg_scan_fail("%s%s failed: %s%s", required ? "" : "warning: ", method, errtext,
                         required ? "" : "; what it lists is left to default: deny");
        if (rc != 0) {
            cJSON_Delete(msg);
            free(cursor);
            return rc;
        }
        for (cJSON *t = list->child; t != NULL;) {
            cJSON *next = t->next;
            if (cJSON_GetArraySize(into) < SCAN_MAX_TOOLS)
                cJSON_AddItemToArray(into, cJSON_DetachItemViaPointer((cJSON *)list, t));
            t = next;
        }
        const char *next = str_at(result, "nextCursor");
        int again = next != NULL && next[0] != '\0' && (cursor == NULL || strcmp(next, cursor) != 0);
        free(cursor);
        cursor = again ? strdup(next) : NULL;
        cJSON_Delete(msg);
        if (!again)
            return 0;
        if (++pages >= SCAN_MAX_PAGES) {
            tg_scan_fail("%s still had a nextCursor after %d pages", method, SCAN_MAX_PAGES);
            free(cursor);
            return -1;
        }
    }
}

/* What the server lists, each NULL until asked and answered. Owned by tg_scan_cli(). */
struct scan_lists {
    cJSON *tools, *resources, *templates, *prompts;
};

/* Asks METHOD when `ask`; on an error answer the list stays NULL (not offered). -1: no answer
 * (printed), and nothing more is asked. */
static int list_optional(struct tg_scan_client *c, int ask, const char *method, const char *field, cJSON **out)
{
    if (!ask)
        return 0;
    cJSON *l = cJSON_CreateArray();
    int rc = list_pages(c, method, field, l, 0);
    if (rc != 0) {
        cJSON_Delete(l);
        return rc < 0 ? -1 : 0;
    }
    *out = l;
    return 0;
}

/* initialize, initialized, tools/list page by page, then resources/list,
 * resources/templates/list and prompts/list if the server offers them (or did not say, having
 * refused initialize) and `others` asks for them. Returns 0 or -1. */
static int scan_server(struct tg_scan_client *c, struct scan_lists *ls, struct tg_scan_source *src, cJSON **init_msg,
                       int others)
{
    const cJSON *result;
    char errtext[300];
    int rc = tg_scan_client_rpc(c, "initialize",
                 "{\"protocolVersion\":\"" SCAN_PROTOCOL "\",\"capabilities\":{},"
                 "\"clientInfo\":{\"name\":\"tollgate-scan\",\"version\":\"" TG_VERSION "\"}}",
                 init_msg, &result, errtext, sizeof(errtext));
    if (rc < 0)
        return -1;
    int resources = 1, prompts = 1;
    if (rc == 1) {
        tg_scan_fail("warning: the server refused initialize (%s); asking for its tools anyway", errtext);
    } else {
        const cJSON *info = tg_json_get(result, "serverInfo");
        src->server = str_at(info, "name");
        src->version = str_at(info, "version");
        src->protocol = str_at(result, "protocolVersion");
        if (src->protocol != NULL && strlen(src->protocol) < sizeof(c->protocol) &&
            strspn(src->protocol, "0123456789-") == strlen(src->protocol))
            snprintf(c->protocol, sizeof(c->protocol), "%s", src->protocol);
        const cJSON *caps = tg_json_get(result, "capabilities");
        resources = cJSON_IsObject(tg_json_get(caps, "resources"));
        prompts = cJSON_IsObject(tg_json_get(caps, "prompts"));
    }
    if (tg_scan_client_notify(c, "notifications/initialized") != 0)
        return -1;
    if (list_pages(c, "tools/list", "tools", ls->tools, 1) != 0)
        return -1;
    if (!others)
        return 0;
    /* The tools are in hand: a server that stops answering now still gets its policy, with
     * what it did not list left to default: deny. */
    if (list_optional(c, resources, "resources/list", "resources", &ls->resources) != 0 ||
        list_optional(c, resources, "resources/templates/list", "resourceTemplates", &ls->templates) != 0 ||
        list_optional(c, prompts, "prompts/list", "prompts", &ls->prompts) != 0)
        tg_scan_fail("warning: the server stopped answering after tools/list; the resources and prompts it did not "
                     "list are left to default: deny");
    return 0;
}

int tg_scan_list_tools(struct tg_scan_client *c, cJSON *into, char **server)
{
    struct scan_lists ls = {.tools = into};
    struct tg_scan_source src = {0};
    cJSON *init = NULL;
    /* resources and prompts are not asked for: the server is told nothing of them (no caps) */
    int rc = scan_server(c, &ls, &src, &init, 0);
    if (server != NULL)
        *server = rc == 0 && src.server != NULL ? strdup(src.server) : NULL;
    cJSON_Delete(init);
    return rc;
}

/* url into b with its user information and its query as [redacted]. */
static void append_url_redacted(struct tg_buf *b, const char *url)
{
    const char *host = strstr(url, "://");
    host = host ? host + 3 : url;
    size_t hl = strcspn(host, "/?#");
    const char *at = memchr(host, '@', hl);
    if (at != NULL) {
        tg_buf_append(b, url, (size_t)(host - url));
        tg_buf_appends(b, "[redacted]");
        host = at;
    } else {
        host = url;
    }
    size_t n = strcspn(host, "?#");
    tg_buf_append(b, host, n);
    if (host[n] != '\0')
        tg_buf_appends(b, "?[redacted]");
}

/* Splits http[s]://host[:port][/path] into c; *https says which. Returns 0, or -1 with the
 * reason printed. */
static int parse_url(struct tg_scan_client *c, const char *url, int *https_out)
{
    int https = strncasecmp(url, "https://", 8) == 0;
    if (!https && strncasecmp(url, "http://", 7) != 0)
        goto bad;
    const char *h = url + (https ? 8 : 7), *end = h + strcspn(h, "/?#");
    const char *port = NULL, *hend = end;
    if (*h == '[') {
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (rb == NULL)
            goto bad;
        snprintf(c->addr, sizeof(c->addr), "%.*s", (int)(rb - h - 1), h + 1);
        if (rb + 1 < end && rb[1] == ':')
            port = rb + 2;
        else if (rb + 1 != end)
            goto bad;
        hend = rb + 1;
    } else {
        const char *colon = memchr(h, ':', (size_t)(end - h));
        if (colon != NULL) {
            port = colon + 1;
            hend = colon;
        }
        snprintf(c->addr, sizeof(c->addr), "%.*s", (int)(hend - h), h);
    }
    if (c->addr[0] == '\0' || (size_t)(hend - h) >= sizeof(c->host) || memchr(h, '@', (size_t)(end - h)) != NULL)
        goto bad;
    if (port != NULL) {
        size_t pl = (size_t)(end - port);
        if (pl == 0 || pl > 5 || strspn(port, "0123456789") < pl || atoi(port) < 1 || atoi(port) > 65535)
            goto bad;
        snprintf(c->port, sizeof(c->port), "%.*s", (int)pl, port);
    } else {
        snprintf(c->port, sizeof(c->port), "%s", https ? "443" : "80");
    }
    snprintf(c->host, sizeof(c->host), "%.*s", (int)(end - h), h);
    c->path = *end == '/' ? end : "/";
    *https_out = https;
    if (*end == '?' || *end == '#' || strpbrk(c->path, " \r\n\t") != NULL || strchr(c->path, '#') != NULL)
        goto bad;
    return 0;
bad:;
    /* the URL as the policy's comment would name it: no user information or query on stderr */
    struct tg_buf shown;
    tg_buf_init(&shown);
    append_url_redacted(&shown, url);
    tg_buf_append(&shown, "", 1);
    if (!https && strncasecmp(url, "http://", 7) != 0)
        tg_scan_fail("%s: not an http:// or https:// URL (for a stdio server: tollgate scan -- COMMAND ARG...)",
                     shown.base);
    else
        tg_scan_fail("%s: cannot read this URL (want http[s]://HOST[:PORT]/PATH)", shown.base);
    tg_buf_dispose(&shown);
    return -1;
}

/* --pin FILE: the tools listed, pinned for an upstream named as the server calls itself. 0 or 1. */
static int write_pins(const char *path, const char *server, const cJSON *tools)
{
    struct tg_buf err;
    tg_buf_init(&err);
    int rc = tg_pins_write_file(path, server != NULL ? server : "scanned", tools, &err);
    if (rc != 0)
        tg_scan_fail("%.*s", (int)err.len, err.base);
    else
        tg_scan_fail("%d tool(s) pinned in %s", cJSON_GetArraySize(tools), path);
    tg_buf_dispose(&err);
    return rc == 0 ? 0 : 1;
}

static int usage_error(const char *why)
{
    tg_scan_fail("%s", why);
    fputs(usage_text, stderr);
    return 2;
}


/* The policy's "# Scanned:" comment names what was scanned, but never a credential given on the
 * command line: an argument that follows a header or environment flag, or a flag that names a
 * secret (--token X, --api-key X), or that reads like one itself, is written as [redacted]; so
 * are a URL's user information and query, in an argument as in the scanned URL. */
static const char *const secret_words[] = {"bearer", "auth", "token", "secret", "pass", "apikey", "api_key",
                                           "api-key", "key", "credential", "creds", "private", NULL};

static int has_secret_word(const char *s)
{
    for (int i = 0; secret_words[i]; i++)
        if (strcasestr(s, secret_words[i]) != NULL)
            return 1;
    return 0;
}

static int secret_arg(const char *prev, const char *arg)
{
    static const char *const flags[] = {"-H", "--header", "--headers", "-e", "--env", NULL};
    for (int i = 0; flags[i]; i++)
        if (strcmp(prev, flags[i]) == 0)
            return 1;
    if (prev[0] == '-' && strchr(prev, '=') == NULL && has_secret_word(prev))
        return 1;
    return has_secret_word(arg);
}

int tg_scan_cli(int argc, char **argv)
{
    struct tg_scan_header headers[SCAN_MAX_HEADERS];
    struct tg_scan_client c = {.timeout_ms = 10000, .next_id = 1};
    int json = 0, i, insecure = 0, https = 0;
    const char *url = NULL, *ca = NULL, *pin = NULL;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            fputs(tg_suggest_heuristics_help, stdout);
            fputs(tg_suggest_tags_help, stdout);
            fputs(tg_suggest_brake_help, stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            json = 1;
        } else if (strcmp(a, "--timeout") == 0 && i + 1 < argc) {
            char *e;
            double s = strtod(argv[++i], &e);
            if (*e != '\0' || !(s > 0 && s <= 3600))
                return usage_error("--timeout wants a number of seconds between 0 and 3600");
            c.timeout_ms = (int)(s * 1000) > 0 ? (int)(s * 1000) : 1;
        } else if (strcmp(a, "--header") == 0 && i + 1 < argc) {
            const char *h = argv[++i], *colon = strchr(h, ':');
            if (colon == NULL || colon == h || strpbrk(h, "\r\n") != NULL || strcspn(h, " \t") < (size_t)(colon - h))
                return usage_error("--header wants 'Name: value'");
            if (c.nheaders == SCAN_MAX_HEADERS)
                return usage_error("too many --header options");
            headers[c.nheaders++].line = h;
        } else if (strcmp(a, "--ca") == 0 && i + 1 < argc) {
            ca = argv[++i];
        } else if (strcmp(a, "--pin") == 0 && i + 1 < argc) {
            pin = argv[++i];
        } else if (strcmp(a, "--insecure") == 0) {
            insecure = 1;
        } else if (strcmp(a, "--") == 0) {
            c.stdio = 1;
            i++;
            break;
        } else if (a[0] == '-') {
            tg_scan_fail("unknown option %s", a);
            fputs(usage_text, stderr);
            return 2;
        } else if (url == NULL) {
            url = a;
        } else {
            return usage_error("one URL only (for a command, put -- before it)");
        }
    }
    if (c.stdio && (url != NULL || i >= argc))
        return usage_error(url != NULL ? "a URL or -- COMMAND, not both" : "-- wants a command");
    if (!c.stdio && url == NULL)
        return usage_error("a URL or -- COMMAND is required");
    if (c.stdio && c.nheaders > 0)
        return usage_error("--header is for an http:// URL");
    if (ca != NULL && insecure)
        return usage_error("--ca or --insecure, not both");
    if (c.stdio && (ca != NULL || insecure))
        return usage_error("--ca and --insecure are for an https:// URL");
    c.headers = headers;
    if (!c.stdio && parse_url(&c, url, &https) != 0)
        return 1;
    if (!https && (ca != NULL || insecure))
        return usage_error("--ca and --insecure are for an https:// URL");
    if (https) {
        char err[512];
        struct tg_tls_client_opts o = {.ca_file = ca, .verify = !insecure};
        if (tg_tls_client_ctx_new(&o, &c.tls, err, sizeof(err)) != 0) {
            tg_scan_fail("TLS: %s", err);
            return 1;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    struct tg_buf target;
    tg_buf_init(&target);
    if (c.stdio) {
        for (int k = i; k < argc; k++) {
            if (k > i)
                tg_buf_appends(&target, " ");
            if (k > i && secret_arg(argv[k - 1], argv[k]))
                tg_buf_appends(&target, "[redacted]");
            else if (strstr(argv[k], "://") != NULL)
                append_url_redacted(&target, argv[k]);
            else
                tg_buf_appends(&target, argv[k]);
        }
    } else {
        append_url_redacted(&target, url);
    }
    tg_buf_append(&target, "", 1);
    struct tg_scan_source src = {.target = target.base};
    struct scan_lists ls = {.tools = cJSON_CreateArray()};
    cJSON *init_msg = NULL;
    int rc = 1;
    if (tg_scan_client_start(&c, c.stdio ? argv + i : NULL) != 0)
        goto out;
    if (scan_server(&c, &ls, &src, &init_msg, 1) != 0)
        goto out;
    if (c.skipped > 0)
        tg_scan_fail("warning: %zu lines on the server's stdout were not JSON, skipped", c.skipped);
    struct tg_buf policy;
    tg_buf_init(&policy);
    struct tg_scan_offer offer = {ls.resources, ls.templates, ls.prompts};
    tg_suggest_write_policy(&policy, ls.tools, &offer, &src, json);
    fwrite(policy.base, 1, policy.len, stdout);
    tg_buf_dispose(&policy);
    rc = fflush(stdout) == 0 ? 0 : 1;
    if (rc == 0 && pin != NULL)
        rc = write_pins(pin, src.server, ls.tools);
out:
    tg_scan_client_stop(&c);
    tg_tls_client_ctx_free(c.tls);
    cJSON_Delete(init_msg);
    cJSON_Delete(ls.tools);
    cJSON_Delete(ls.resources);
    cJSON_Delete(ls.templates);
    cJSON_Delete(ls.prompts);
    tg_buf_dispose(&target);
    return rc;
}
