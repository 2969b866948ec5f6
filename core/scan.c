/* `tollgate scan` (core/scan.h): a small blocking MCP client that lists a server's tools. */
#include "core/scan.h"

#include <errno.h>
#include <fcntl.h>
#include <llhttp.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/json.h"
#include "core/scan_policy.h"
#include "core/sse.h"

#define SCAN_MAX_ANSWER (16u * 1024 * 1024) /* one HTTP answer, one stdio line */
#define SCAN_MAX_HEADERS 32
#define SCAN_MAX_PAGES 1000
#define SCAN_MAX_TOOLS 10000
#define SCAN_JSON_DEPTH 64
#define SCAN_PROTOCOL "2025-06-18"

extern char **environ;

static const char usage_text[] =
    "usage:\n"
    "  tollgate scan [--json] [--timeout SECONDS] [--header 'Name: value']... http://HOST[:PORT]/PATH\n"
    "  tollgate scan [--json] [--timeout SECONDS] -- COMMAND [ARG...]\n"
    "      Connect to an MCP server as a client (MCP " SCAN_PROTOCOL "), list its tools and print a\n"
    "      starting policy for them in PolicyLayer's format on stdout: YAML with a comment per tool\n"
    "      saying why it got its rule, or JSON with --json. The policy has default: deny, so any\n"
    "      tool it does not list is refused and hidden. Check it with `tollgate policy check FILE`.\n"
    "      URL: a Streamable HTTP endpoint (one POST per message, JSON or SSE answers, the\n"
    "      Mcp-Session-Id sent back); --header adds a request header, e.g. an Authorization.\n"
    "      https:// is not supported: scan through a local tunnel or use the stdio form.\n"
    "      -- COMMAND: start a stdio server (newline-delimited JSON on its stdin and stdout; its\n"
    "      stderr is passed through) and end it when done.\n"
    "      --timeout: how long to wait for each answer (default 10 s).\n"
    "      Exit 0 when the policy was printed, 1 when the server could not be scanned, 2 on bad\n"
    "      arguments.\n"
    "\n";

struct scan_header {
    const char *line; /* "Name: value" as given */
};

/* The client: one per run, on main's stack. */
struct scan_client {
    int stdio;      /* 1: a child process, 0: HTTP */
    int timeout_ms;
    int next_id;
    /* HTTP */
    char host[256]; /* as it goes in Host: (brackets kept for IPv6) */
    char addr[256]; /* for getaddrinfo */
    char port[8];
    const char *path;
    const struct scan_header *headers;
    size_t nheaders;
    char session[256]; /* Mcp-Session-Id, or "" */
    char protocol[64]; /* the version initialize chose, sent as MCP-Protocol-Version, or "" */
    /* stdio */
    pid_t pid;
    int to_child;   /* its stdin */
    int from_child; /* its stdout */
    struct tg_buf rbuf;
    size_t skipped; /* stdout lines that were not JSON-RPC */
};

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tollgate: scan: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for `events` on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, (int)(left > 60000 ? 60000 : left));
        if (r > 0)
            return 1;
        if (r < 0 && errno != EINTR)
            return -1;
    }
}

/* Peer text for an error line: printable ASCII, at most max bytes, into out (NUL-terminated). */
static void snippet(char *out, size_t cap, const char *p, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 4 < cap; i++)
        out[o++] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '.';
    if (o < n && o + 3 < cap)
        memcpy(out + o, "...", 3), o += 3;
    out[o] = '\0';
}

/* ---- answers ------------------------------------------------------------------------------ */

/* A parsed message that answers request `id`: returns the tree (the caller frees it), else NULL
 * and frees it. */
static cJSON *take_answer(const char *p, size_t n, int id)
{
    struct tg_json_doc doc;
    const char *err;
    size_t off;
    if (tg_json_parse(p, n, SCAN_JSON_DEPTH, 1, &doc, &err, &off) != 0)
        return NULL;
    const cJSON *jid = cJSON_GetObjectItemCaseSensitive(doc.root, "id");
    if (cJSON_IsObject(doc.root) && cJSON_IsNumber(jid) && jid->valuedouble == id &&
        cJSON_GetObjectItemCaseSensitive(doc.root, "method") == NULL)
        return doc.root;
    cJSON_Delete(doc.root);
    return NULL;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */

/* One HTTP answer being read. */
struct http_answer {
    struct scan_client *c;
    int id; /* the request's id, or -1 for a notification */
    struct tg_buf field, value, body;
    int is_sse, complete;
    struct tg_sse_parser sse;
    cJSON *answer;
    int too_big;
};

static int on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct http_answer *a = p->data;
    tg_buf_append(&a->field, at, n);
    return a->field.len > 8192 ? -1 : 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct http_answer *a = p->data;
    tg_buf_append(&a->value, at, n);
    return a->value.len > 8192 ? -1 : 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    struct http_answer *a = p->data;
    if (a->field.len == 12 && strncasecmp(a->field.base, "content-type", 12) == 0)
        a->is_sse = a->value.len >= 17 && strncasecmp(a->value.base, "text/event-stream", 17) == 0;
    if (a->field.len == 14 && strncasecmp(a->field.base, "mcp-session-id", 14) == 0 &&
        a->value.len < sizeof(a->c->session)) {
        memcpy(a->c->session, a->value.base, a->value.len);
        a->c->session[a->value.len] = '\0';
    }
    a->field.len = 0;
    a->value.len = 0;
    return 0;
}

static int on_sse_event(void *ud, const struct tg_sse_event *ev)
{
    struct http_answer *a = ud;
    if (a->answer == NULL && a->id >= 0)
        a->answer = take_answer(ev->data.ptr, ev->data.len, a->id);
    return a->answer != NULL ? 1 : 0;
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
    struct http_answer *a = p->data;
    if (a->is_sse && llhttp_get_status_code(p) / 100 == 2) {
        if (a->answer == NULL)
            (void)tg_sse_feed(&a->sse, at, n, on_sse_event, a);
        return 0;
    }
    if (tg_buf_try_append(&a->body, at, n, SCAN_MAX_ANSWER) != 0) {
        a->too_big = 1;
        return -1;
    }
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    ((struct http_answer *)p->data)->complete = 1;
    return 0;
}

static int http_connect(struct scan_client *c, long long deadline)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    int rc = getaddrinfo(c->addr, c->port, &hints, &res);
    if (rc != 0) {
        fail("cannot resolve %s: %s", c->addr, gai_strerror(rc));
        return -1;
    }
    int fd = -1, err = 0;
    for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
            err = errno;
        } else {
            int w = wait_fd(fd, POLLOUT, deadline);
            socklen_t len = sizeof(err);
            if (w <= 0)
                err = w == 0 ? ETIMEDOUT : errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                err = errno;
            if (err == 0)
                break;
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        fail("cannot connect to %s port %s: %s", c->addr, c->port, strerror(err));
    return fd;
}

static int send_all(int fd, const char *p, size_t n, long long deadline, int sock)
{
    while (n > 0) {
        ssize_t w = sock ? send(fd, p, n, MSG_NOSIGNAL) : write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(fd, POLLOUT, deadline) <= 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* POSTs one message. For a request (id >= 0), *answer gets the answer's tree; for a
 * notification, any 2xx passes. Returns 0 or -1 (the reason printed). */
static int http_post(struct scan_client *c, const char *msg, int id, cJSON **answer)
{
    long long deadline = now_ms() + c->timeout_ms;
    int fd = http_connect(c, deadline);
    if (fd < 0)
        return -1;
    struct tg_buf req;
    tg_buf_init(&req);
    tg_buf_appendf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                   "Accept: application/json, text/event-stream\r\nConnection: close\r\n"
                   "Content-Length: %zu\r\n", c->path, c->host, strlen(msg));
    if (c->session[0] != '\0')
        tg_buf_appendf(&req, "Mcp-Session-Id: %s\r\n", c->session);
    if (c->protocol[0] != '\0')
        tg_buf_appendf(&req, "MCP-Protocol-Version: %s\r\n", c->protocol);
    for (size_t i = 0; i < c->nheaders; i++)
        tg_buf_appendf(&req, "%s\r\n", c->headers[i].line);
    tg_buf_appends(&req, "\r\n");
    tg_buf_appends(&req, msg);
    int rc = -1;
    struct http_answer a = {.c = c, .id = id};
    tg_buf_init(&a.field);
    tg_buf_init(&a.value);
    tg_buf_init(&a.body);
    tg_sse_init(&a.sse, SCAN_MAX_ANSWER);
    llhttp_settings_t settings;
    llhttp_settings_init(&settings);
    settings.on_header_field = on_header_field;
    settings.on_header_value = on_header_value;
    settings.on_header_value_complete = on_header_value_complete;
    settings.on_body = on_body;
    settings.on_message_complete = on_message_complete;
    llhttp_t parser;
    llhttp_init(&parser, HTTP_RESPONSE, &settings);
    parser.data = &a;
    if (send_all(fd, req.base, req.len, deadline, 1) != 0) {
        fail("cannot send to %s port %s: %s", c->addr, c->port, strerror(errno));
        goto out;
    }
    char buf[16384];
    int eof = 0;
    while (!a.complete && a.answer == NULL) {
        int w = wait_fd(fd, POLLIN, deadline);
        if (w <= 0) {
            fail("no answer from %s port %s within %d ms", c->addr, c->port, c->timeout_ms);
            goto out;
        }
        ssize_t r = recv(fd, buf, sizeof(buf), 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r < 0) {
            fail("reading from %s port %s: %s", c->addr, c->port, strerror(errno));
            goto out;
        }
        llhttp_errno_t e = r == 0 ? llhttp_finish(&parser) : llhttp_execute(&parser, buf, (size_t)r);
        if (r == 0)
            eof = 1;
        if (e != HPE_OK) {
            if (a.too_big)
                fail("the answer is larger than %u bytes", SCAN_MAX_ANSWER);
            else
                fail("bad HTTP answer from %s port %s: %s", c->addr, c->port, llhttp_get_error_reason(&parser));
            goto out;
        }
        if (eof)
            break;
    }
    int status = llhttp_get_status_code(&parser);
    if (!a.complete && a.answer == NULL) {
        fail("the connection to %s port %s closed before the answer ended", c->addr, c->port);
        goto out;
    }
    if (status / 100 != 2) {
        char text[204];
        snippet(text, sizeof(text), a.body.base, a.body.len);
        fail("HTTP %d from %s port %s%s%s", status, c->addr, c->port, a.body.len ? ": " : "", text);
        goto out;
    }
    if (id < 0) {
        rc = 0;
        goto out;
    }
    if (!a.is_sse && a.body.len > 0)
        a.answer = take_answer(a.body.base, a.body.len, id);
    if (a.answer == NULL) {
        char text[204];
        snippet(text, sizeof(text), a.body.base, a.body.len);
        fail("HTTP %d from %s port %s without a JSON-RPC answer to request %d%s%s", status, c->addr, c->port, id,
             a.body.len ? ": " : "", text);
        goto out;
    }
    *answer = a.answer;
    a.answer = NULL;
    rc = 0;
out:
    cJSON_Delete(a.answer);
    tg_sse_dispose(&a.sse);
    tg_buf_dispose(&a.field);
    tg_buf_dispose(&a.value);
    tg_buf_dispose(&a.body);
    tg_buf_dispose(&req);
    close(fd);
    return rc;
}

/* ---- stdio --------------------------------------------------------------------------------- */

static int stdio_start(struct scan_client *c, char **argv)
{
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0)
        return -1;
    if (pipe2(out, O_CLOEXEC) != 0) {
        close(in[0]);
        close(in[1]);
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    int rc = posix_spawnp(&c->pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
        close(in[1]);
        close(out[0]);
        fail("cannot start %s: %s", argv[0], strerror(rc));
        return -1;
    }
    c->to_child = in[1];
    c->from_child = out[0];
    fcntl(c->from_child, F_SETFL, O_NONBLOCK);
    return 0;
}

static int stdio_send(struct scan_client *c, const char *msg)
{
    long long deadline = now_ms() + c->timeout_ms;
    if (send_all(c->to_child, msg, strlen(msg), deadline, 0) != 0 || send_all(c->to_child, "\n", 1, deadline, 0) != 0) {
        fail("cannot write to the server's stdin: %s", errno ? strerror(errno) : "timed out");
        return -1;
    }
    return 0;
}

/* A request from the server while we wait: answered so that it does not wait on us. */
static void stdio_answer_server(struct scan_client *c, const cJSON *msg)
{
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(msg, "method");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "id");
    if (!cJSON_IsString(method) || id == NULL)
        return; /* a notification: nothing to say */
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_json_write(&b, id);
    if (strcmp(method->valuestring, "ping") == 0)
        tg_buf_appends(&b, ",\"result\":{}}");
    else if (strcmp(method->valuestring, "roots/list") == 0)
        tg_buf_appends(&b, ",\"result\":{\"roots\":[]}}");
    else
        tg_buf_appends(&b, ",\"error\":{\"code\":-32601,\"message\":\"tollgate scan does not do this\"}}");
    tg_buf_append(&b, "", 1);
    (void)stdio_send(c, b.base);
    tg_buf_dispose(&b);
}

static int stdio_wait(struct scan_client *c, int id, cJSON **answer)
{
    long long deadline = now_ms() + c->timeout_ms;
    for (;;) {
        char *nl;
        while ((nl = c->rbuf.len ? memchr(c->rbuf.base, '\n', c->rbuf.len) : NULL) != NULL) {
            size_t n = (size_t)(nl - c->rbuf.base);
            struct tg_json_doc doc;
            const char *err;
            size_t off;
            if (tg_json_parse(c->rbuf.base, n, SCAN_JSON_DEPTH, 1, &doc, &err, &off) == 0) {
                const cJSON *jid = cJSON_GetObjectItemCaseSensitive(doc.root, "id");
                if (cJSON_GetObjectItemCaseSensitive(doc.root, "method") != NULL) {
                    stdio_answer_server(c, doc.root);
                } else if (cJSON_IsNumber(jid) && jid->valuedouble == id) {
                    tg_buf_consume(&c->rbuf, n + 1);
                    *answer = doc.root;
                    return 0;
                }
                cJSON_Delete(doc.root);
            } else if (n > 0) {
                c->skipped++;
            }
            tg_buf_consume(&c->rbuf, n + 1);
        }
        if (c->rbuf.len >= SCAN_MAX_ANSWER) {
            fail("a line of the server's stdout is longer than %u bytes", SCAN_MAX_ANSWER);
            return -1;
        }
        int w = wait_fd(c->from_child, POLLIN, deadline);
        if (w <= 0) {
            fail("no answer to request %d on the server's stdout within %d ms", id, c->timeout_ms);
            return -1;
        }
        if (tg_buf_try_reserve(&c->rbuf, 65536, SCAN_MAX_ANSWER + 65536) != 0)
            return -1;
        ssize_t r = read(c->from_child, c->rbuf.base + c->rbuf.len, 65536);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0) {
            int st = 0;
            if (r == 0 && waitpid(c->pid, &st, WNOHANG) == c->pid) {
                c->pid = 0;
                fail("the server exited (%s %d) before answering request %d", WIFEXITED(st) ? "status" : "signal",
                     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), id);
            } else {
                fail("the server closed its stdout before answering request %d", id);
            }
            return -1;
        }
        c->rbuf.len += (size_t)r;
    }
}

/* Ends the child: EOF on its stdin, then SIGTERM after 2 s, SIGKILL after 2 more. */
static void stdio_stop(struct scan_client *c)
{
    if (c->to_child >= 0)
        close(c->to_child);
    if (c->from_child >= 0)
        close(c->from_child);
    c->to_child = c->from_child = -1;
    if (c->pid <= 0)
        return;
    long long start = now_ms();
    int sig = 0, st;
    while (waitpid(c->pid, &st, WNOHANG) == 0) {
        long long t = now_ms() - start;
        if (t > 2000 && sig == 0)
            kill(c->pid, sig = SIGTERM);
        else if (t > 4000 && sig == SIGTERM)
            kill(c->pid, sig = SIGKILL);
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
    }
    c->pid = 0;
}

/* ---- MCP ----------------------------------------------------------------------------------- */

/* Sends a request (params: JSON text or NULL) and waits for its answer: 0 with *result set
 * (owned by *msg, which the caller frees), 1 when the server answered with an error (printed
 * into errtext), -1 when there was no answer (printed). */
static int rpc(struct scan_client *c, const char *method, const char *params, cJSON **msg, const cJSON **result,
               char *errtext, size_t errcap)
{
    int id = c->next_id++;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appendf(&b, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"%s\"", id, method);
    if (params != NULL)
        tg_buf_appendf(&b, ",\"params\":%s", params);
    tg_buf_append(&b, "}", 2);
    int rc = c->stdio ? stdio_send(c, b.base) : 0;
    if (rc == 0)
        rc = c->stdio ? stdio_wait(c, id, msg) : http_post(c, b.base, id, msg);
    tg_buf_dispose(&b);
    if (rc != 0)
        return -1;
    const cJSON *err = cJSON_GetObjectItemCaseSensitive(*msg, "error");
    *result = cJSON_GetObjectItemCaseSensitive(*msg, "result");
    if (cJSON_IsObject(*result) && (err == NULL || cJSON_IsNull(err)))
        return 0;
    const cJSON *code = cJSON_GetObjectItemCaseSensitive(err, "code");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(err, "message");
    if (cJSON_IsObject(err))
        snprintf(errtext, errcap, "error %s: %.200s", cJSON_IsNumber(code) ? code->valuestring : "?",
                 cJSON_IsString(m) ? m->valuestring : "(no message)");
    else
        snprintf(errtext, errcap, "an answer with neither a result object nor an error");
    return 1;
}

static int notify(struct scan_client *c, const char *method)
{
    char b[256];
    snprintf(b, sizeof(b), "{\"jsonrpc\":\"2.0\",\"method\":\"%s\"}", method);
    return c->stdio ? stdio_send(c, b) : http_post(c, b, -1, NULL);
}

static const char *str_at(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* initialize, initialized, then tools/list page by page into `tools`. Returns 0 or -1. */
static int scan_server(struct scan_client *c, cJSON *tools, struct tg_scan_source *src, cJSON **init_msg)
{
    const cJSON *result;
    char errtext[300];
    int rc = rpc(c, "initialize",
                 "{\"protocolVersion\":\"" SCAN_PROTOCOL "\",\"capabilities\":{},"
                 "\"clientInfo\":{\"name\":\"tollgate-scan\",\"version\":\"" TG_VERSION "\"}}",
                 init_msg, &result, errtext, sizeof(errtext));
    if (rc < 0)
        return -1;
    if (rc == 1) {
        fail("warning: the server refused initialize (%s); asking for its tools anyway", errtext);
    } else {
        const cJSON *info = cJSON_GetObjectItemCaseSensitive(result, "serverInfo");
        src->server = str_at(info, "name");
        src->version = str_at(info, "version");
        src->protocol = str_at(result, "protocolVersion");
        if (src->protocol != NULL && strlen(src->protocol) < sizeof(c->protocol) &&
            strspn(src->protocol, "0123456789-") == strlen(src->protocol))
            snprintf(c->protocol, sizeof(c->protocol), "%s", src->protocol);
    }
    if (notify(c, "notifications/initialized") != 0)
        return -1;
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
        rc = rpc(c, "tools/list", cursor != NULL ? params.base : NULL, &msg, &result, errtext, sizeof(errtext));
        tg_buf_dispose(&params);
        if (rc == 1)
            fail("tools/list failed: %s", errtext);
        const cJSON *list = rc == 0 ? cJSON_GetObjectItemCaseSensitive(result, "tools") : NULL;
        if (rc == 0 && !cJSON_IsArray(list)) {
            fail("tools/list answered without a tools array");
            rc = -1;
        }
        if (rc != 0) {
            cJSON_Delete(msg);
            free(cursor);
            return -1;
        }
        for (cJSON *t = list->child; t != NULL;) {
            cJSON *next = t->next;
            if (cJSON_GetArraySize(tools) < SCAN_MAX_TOOLS)
                cJSON_AddItemToArray(tools, cJSON_DetachItemViaPointer((cJSON *)list, t));
            t = next;
        }
        const char *next = str_at(result, "nextCursor");
        int again = next != NULL && next[0] != '\0' && (cursor == NULL || strcmp(next, cursor) != 0);
        free(cursor);
        cursor = again ? strdup(next) : NULL;
        cJSON_Delete(msg);
        if (!again)
            break;
        if (++pages >= SCAN_MAX_PAGES) {
            fail("tools/list still had a nextCursor after %d pages", SCAN_MAX_PAGES);
            free(cursor);
            return -1;
        }
    }
    return 0;
}

/* Splits http://host[:port][/path] into c. Returns 0, or -1 with the reason printed. */
static int parse_url(struct scan_client *c, const char *url)
{
    if (strncasecmp(url, "https://", 8) == 0) {
        fail("https:// is not supported by tollgate scan; reach the server over http:// (e.g. through an SSH "
             "tunnel or a local proxy), or scan its stdio command with `tollgate scan -- COMMAND`");
        return -1;
    }
    if (strncasecmp(url, "http://", 7) != 0) {
        fail("%s: not an http:// URL (for a stdio server: tollgate scan -- COMMAND ARG...)", url);
        return -1;
    }
    const char *h = url + 7, *end = h + strcspn(h, "/?#");
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
        snprintf(c->port, sizeof(c->port), "80");
    }
    snprintf(c->host, sizeof(c->host), "%.*s", (int)(end - h), h);
    c->path = *end == '/' ? end : "/";
    if (*end == '?' || *end == '#' || strpbrk(c->path, " \r\n\t") != NULL || strchr(c->path, '#') != NULL)
        goto bad;
    return 0;
bad:
    fail("%s: cannot read this URL (want http://HOST[:PORT]/PATH)", url);
    return -1;
}

static int usage_error(const char *why)
{
    fail("%s", why);
    fputs(usage_text, stderr);
    return 2;
}

int tg_scan_cli(int argc, char **argv)
{
    struct scan_header headers[SCAN_MAX_HEADERS];
    struct scan_client c = {.timeout_ms = 10000, .next_id = 1, .to_child = -1, .from_child = -1};
    int json = 0, i;
    const char *url = NULL;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_text, stdout);
            fputs(tg_scan_heuristics_help, stdout);
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
        } else if (strcmp(a, "--") == 0) {
            c.stdio = 1;
            i++;
            break;
        } else if (a[0] == '-') {
            fail("unknown option %s", a);
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
    c.headers = headers;
    if (!c.stdio && parse_url(&c, url) != 0)
        return 1;
    signal(SIGPIPE, SIG_IGN);
    tg_buf_init(&c.rbuf);
    struct tg_buf target;
    tg_buf_init(&target);
    if (c.stdio) {
        for (int k = i; k < argc; k++)
            tg_buf_appendf(&target, "%s%s", k > i ? " " : "", argv[k]);
    } else {
        tg_buf_appends(&target, url);
    }
    tg_buf_append(&target, "", 1);
    struct tg_scan_source src = {.target = target.base};
    cJSON *tools = cJSON_CreateArray();
    cJSON *init_msg = NULL;
    int rc = 1;
    if (c.stdio && stdio_start(&c, argv + i) != 0)
        goto out;
    if (scan_server(&c, tools, &src, &init_msg) != 0)
        goto out;
    if (c.skipped > 0)
        fail("warning: %zu lines on the server's stdout were not JSON, skipped", c.skipped);
    struct tg_buf policy;
    tg_buf_init(&policy);
    tg_scan_write_policy(&policy, tools, &src, json);
    fwrite(policy.base, 1, policy.len, stdout);
    tg_buf_dispose(&policy);
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    if (c.stdio)
        stdio_stop(&c);
    cJSON_Delete(init_msg);
    cJSON_Delete(tools);
    tg_buf_dispose(&c.rbuf);
    tg_buf_dispose(&target);
    return rc;
}
