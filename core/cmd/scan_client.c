/* `tollgate scan`'s MCP client link (core/cmd/scan_client.h): blocking HTTP POSTs or a child's pipes. */
#include "core/cmd/scan_client.h"

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

#include "core/base/json.h"
#include "core/wire/sse.h"
#include "core/wire/tls.h"

#define SCAN_JSON_DEPTH 64

extern char **environ;

void tg_scan_fail(const char *fmt, ...)
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
    const cJSON *jid = tg_json_get(doc.root, "id");
    if (cJSON_IsObject(doc.root) && cJSON_IsNumber(jid) && jid->valuedouble == id &&
        tg_json_get(doc.root, "method") == NULL)
        return doc.root;
    cJSON_Delete(doc.root);
    return NULL;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */

/* One HTTP answer being read. */
struct http_answer {
    struct tg_scan_link *c;
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

static int http_connect(struct tg_scan_link *c, long long deadline)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res, *ai;
    int rc = getaddrinfo(c->addr, c->port, &hints, &res);
    if (rc != 0) {
        tg_scan_fail("cannot resolve %s: %s", c->addr, gai_strerror(rc));
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
        tg_scan_fail("cannot connect to %s port %s: %s", c->addr, c->port, strerror(err));
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
            int ready = wait_fd(fd, POLLOUT, deadline);
            if (ready == 0)
                errno = ETIMEDOUT;
            if (ready <= 0)
                return -1;
        } else {
            return -1;
        }
    }
    return 0;
}

/* One connection's byte stream: plain, or TLS records through core/wire/tls.c (which works on
 * buffers: ciphertext in, plaintext out, records to send appended to `out`). */
struct link_io {
    struct tg_scan_link *c;
    int fd;
    struct tg_tls *tls;
    struct tg_buf out, plain;
    int closed; /* close_notify came (with the last plaintext, perhaps): the next read is the end */
};

static int io_flush(struct link_io *io, long long deadline)
{
    int r = send_all(io->fd, io->out.base, io->out.len, deadline, 1);
    io->out.len = 0;
    if (r != 0)
        tg_scan_fail("cannot send to %s port %s: %s", io->c->addr, io->c->port, strerror(errno));
    return r;
}

/* Reads what comes next into io->plain (appended): 1 bytes or nothing yet (TLS records that
 * carried none), 0 end of stream, -1 error (printed). */
static int io_read(struct link_io *io, long long deadline, const char *waiting_for)
{
    char buf[16384];
    if (io->closed)
        return 0;
    for (;;) {
        int w = wait_fd(io->fd, POLLIN, deadline);
        if (w <= 0) {
            tg_scan_fail("no %s from %s port %s within %d ms", waiting_for, io->c->addr, io->c->port, io->c->timeout_ms);
            return -1;
        }
        ssize_t r = recv(io->fd, buf, sizeof(buf), 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r < 0) {
            tg_scan_fail("reading from %s port %s: %s", io->c->addr, io->c->port, strerror(errno));
            return -1;
        }
        if (io->tls == NULL) {
            if (r > 0)
                tg_buf_append(&io->plain, buf, (size_t)r);
            return r > 0 ? 1 : 0;
        }
        if (r == 0)
            return 0; /* without close_notify: the HTTP parser judges whether the answer ended */
        int e = tg_tls_feed(io->tls, buf, (size_t)r, &io->plain, SCAN_MAX_ANSWER, &io->out);
        if (io->out.len > 0 && io_flush(io, deadline) != 0)
            return -1;
        if (e == TG_ECLOSED) {
            io->closed = 1;
            return io->plain.len > 0 ? 1 : 0;
        }
        if (e != 0) {
            tg_scan_fail("TLS error with %s port %s: %s", io->c->addr, io->c->port, tg_tls_last_error(io->tls));
            return -1;
        }
        return 1;
    }
}

/* The TLS handshake, certificate checks included, before any request byte is sent. */
static int io_handshake(struct link_io *io, long long deadline)
{
    io->tls = tg_tls_client_new(io->c->tls, io->c->addr);
    if (io->tls == NULL) {
        tg_scan_fail("cannot set up TLS for %s", io->c->addr);
        return -1;
    }
    int e = tg_tls_feed(io->tls, NULL, 0, &io->plain, SCAN_MAX_ANSWER, &io->out);
    while (e == 0 && !tg_tls_established(io->tls)) {
        if (io->out.len > 0 && io_flush(io, deadline) != 0)
            return -1;
        char buf[16384];
        int w = wait_fd(io->fd, POLLIN, deadline);
        if (w <= 0) {
            tg_scan_fail("TLS handshake with %s port %s: no answer within %d ms", io->c->addr, io->c->port,
                         io->c->timeout_ms);
            return -1;
        }
        ssize_t r = recv(io->fd, buf, sizeof(buf), 0);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0) {
            tg_scan_fail("TLS handshake with %s port %s: %s", io->c->addr, io->c->port,
                         r == 0 ? "the server closed the connection" : strerror(errno));
            return -1;
        }
        e = tg_tls_feed(io->tls, buf, (size_t)r, &io->plain, SCAN_MAX_ANSWER, &io->out);
    }
    if (e != 0) {
        const char *why = tg_tls_last_error(io->tls);
        tg_scan_fail("TLS handshake with %s port %s failed: %s", io->c->addr, io->c->port,
                     why && why[0] ? why : "the server's answer is not TLS");
        return -1;
    }
    return io->out.len > 0 ? io_flush(io, deadline) : 0;
}

static int io_send(struct link_io *io, const char *p, size_t n, long long deadline)
{
    if (io->tls == NULL) {
        if (send_all(io->fd, p, n, deadline, 1) == 0)
            return 0;
        tg_scan_fail("cannot send to %s port %s: %s", io->c->addr, io->c->port, strerror(errno));
        return -1;
    }
    if (tg_tls_write(io->tls, p, n, &io->out) != 0) {
        tg_scan_fail("TLS error with %s port %s: %s", io->c->addr, io->c->port, tg_tls_last_error(io->tls));
        return -1;
    }
    return io_flush(io, deadline);
}

/* POSTs one message. For a request (id >= 0), *answer gets the answer's tree; for a
 * notification, any 2xx passes. Returns 0 or -1 (the reason printed). */
static int http_post(struct tg_scan_link *c, const char *msg, int id, cJSON **answer)
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
    struct link_io io = {.c = c, .fd = fd};
    tg_buf_init(&io.out);
    tg_buf_init(&io.plain);
    if (c->tls != NULL && io_handshake(&io, deadline) != 0)
        goto out;
    if (io_send(&io, req.base, req.len, deadline) != 0)
        goto out;
    int eof = 0;
    while (!a.complete && a.answer == NULL) {
        io.plain.len = 0;
        int r = io_read(&io, deadline, "answer");
        if (r < 0)
            goto out;
        if (r > 0 && io.plain.len == 0)
            continue;
        llhttp_errno_t e = r == 0 ? llhttp_finish(&parser) : llhttp_execute(&parser, io.plain.base, io.plain.len);
        if (r == 0)
            eof = 1;
        if (e != HPE_OK) {
            if (a.too_big)
                tg_scan_fail("the answer is larger than %u bytes", SCAN_MAX_ANSWER);
            else
                tg_scan_fail("bad HTTP answer from %s port %s: %s", c->addr, c->port, llhttp_get_error_reason(&parser));
            goto out;
        }
        if (eof)
            break;
    }
    int status = llhttp_get_status_code(&parser);
    if (!a.complete && a.answer == NULL) {
        tg_scan_fail("the connection to %s port %s closed before the answer ended", c->addr, c->port);
        goto out;
    }
    if (status / 100 != 2) {
        char text[204];
        snippet(text, sizeof(text), a.body.base, a.body.len);
        tg_scan_fail("HTTP %d from %s port %s%s%s", status, c->addr, c->port, a.body.len ? ": " : "", text);
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
        tg_scan_fail("HTTP %d from %s port %s without a JSON-RPC answer to request %d%s%s", status, c->addr, c->port, id,
             a.body.len ? ": " : "", text);
        goto out;
    }
    *answer = a.answer;
    a.answer = NULL;
    rc = 0;
out:
    tg_tls_free(io.tls);
    tg_buf_dispose(&io.out);
    tg_buf_dispose(&io.plain);
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

int tg_scan_link_start(struct tg_scan_link *c, char **argv)
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
    /* The command ignores SIGPIPE while it runs; the server must get the default back (an
     * ignored signal stays ignored across exec). */
    posix_spawnattr_t attr;
    sigset_t def;
    posix_spawnattr_init(&attr);
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_setsigdefault(&attr, &def);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawnp(&c->pid, argv[0], &fa, &attr, argv, environ);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    if (rc != 0) {
        close(in[1]);
        close(out[0]);
        tg_scan_fail("cannot start %s: %s", argv[0], strerror(rc));
        return -1;
    }
    c->to_child = in[1];
    c->from_child = out[0];
    /* Both ends non-blocking, so a server that stops reading cannot hold a write past the
     * deadline (send_all waits with poll). */
    fcntl(c->from_child, F_SETFL, O_NONBLOCK);
    fcntl(c->to_child, F_SETFL, O_NONBLOCK);
    return 0;
}

static int stdio_send(struct tg_scan_link *c, const char *msg)
{
    long long deadline = now_ms() + c->timeout_ms;
    if (send_all(c->to_child, msg, strlen(msg), deadline, 0) != 0 || send_all(c->to_child, "\n", 1, deadline, 0) != 0) {
        tg_scan_fail("cannot write to the server's stdin: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* A request from the server while we wait: answered so that it does not wait on us. */
static void stdio_answer_server(struct tg_scan_link *c, const cJSON *msg)
{
    const cJSON *method = tg_json_get(msg, "method");
    const cJSON *id = tg_json_get(msg, "id");
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

static int stdio_wait(struct tg_scan_link *c, int id, cJSON **answer)
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
                const cJSON *jid = tg_json_get(doc.root, "id");
                if (tg_json_get(doc.root, "method") != NULL) {
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
            tg_scan_fail("a line of the server's stdout is longer than %u bytes", SCAN_MAX_ANSWER);
            return -1;
        }
        int w = wait_fd(c->from_child, POLLIN, deadline);
        if (w <= 0) {
            tg_scan_fail("no answer to request %d on the server's stdout within %d ms", id, c->timeout_ms);
            return -1;
        }
        if (tg_buf_try_reserve(&c->rbuf, 65536, SCAN_MAX_ANSWER + 65536) != 0)
            return -1;
        ssize_t r = read(c->from_child, c->rbuf.base + c->rbuf.len, 65536);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (r <= 0) {
            /* EOF usually means the server is exiting: give it a moment to be reaped, so the
             * message can say how it ended (the pipe closes before the process is gone). */
            int st = 0, gone = 0;
            for (long long until = now_ms() + 1000; r == 0 && !gone && now_ms() < until;) {
                gone = waitpid(c->pid, &st, WNOHANG) == c->pid;
                struct timespec ts = {0, 10 * 1000000};
                if (!gone)
                    nanosleep(&ts, NULL);
            }
            if (gone) {
                c->pid = 0;
                tg_scan_fail("the server exited (%s %d) before answering request %d", WIFEXITED(st) ? "status" : "signal",
                     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), id);
            } else {
                tg_scan_fail("the server closed its stdout before answering request %d", id);
            }
            return -1;
        }
        c->rbuf.len += (size_t)r;
    }
}

/* Ends the child: EOF on its stdin, then SIGTERM after 2 s, SIGKILL after 2 more. */
void tg_scan_link_stop(struct tg_scan_link *c)
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
int tg_scan_link_rpc(struct tg_scan_link *c, const char *method, const char *params, cJSON **msg, const cJSON **result,
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
    const cJSON *err = tg_json_get(*msg, "error");
    *result = tg_json_get(*msg, "result");
    if (cJSON_IsObject(*result) && (err == NULL || cJSON_IsNull(err)))
        return 0;
    const cJSON *code = tg_json_get(err, "code");
    const cJSON *m = tg_json_get(err, "message");
    if (cJSON_IsObject(err))
        snprintf(errtext, errcap, "error %s: %.200s", cJSON_IsNumber(code) ? code->valuestring : "?",
                 cJSON_IsString(m) ? m->valuestring : "(no message)");
    else
        snprintf(errtext, errcap, "an answer with neither a result object nor an error");
    return 1;
}

int tg_scan_link_notify(struct tg_scan_link *c, const char *method)
{
    char b[256];
    snprintf(b, sizeof(b), "{\"jsonrpc\":\"2.0\",\"method\":\"%s\"}", method);
    return c->stdio ? stdio_send(c, b) : http_post(c, b, -1, NULL);
}

