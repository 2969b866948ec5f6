/* `tollgate scan`'s MCP client link (core/cmd/scan_client.h): the upstream pool's POSTs or a
 * child's pipes, on a loop run until each answer. */
#include "core/cmd/scan_client.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/wire/sse.h"
#include "upstream/child.h"
#include "upstream/pool/pool.h"

#define SCAN_JSON_DEPTH 64

void tg_scan_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("tollgate: scan: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
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

/* ---- one exchange ------------------------------------------------------------------------- */

/* A message sent and its answer awaited. Owner: the stack of tg_scan_client_rpc() or
 * tg_scan_client_notify(), which runs the loop until `settled`; c->wait points at it meanwhile. */
struct scan_exchange {
    struct tg_scan_client *c;
    int id; /* the request's id, or -1 for a notification */
    int settled;
    int rc;        /* 0 answered (answer set for a request), -1 failed (printed) */
    cJSON *answer; /* the answer's tree, the caller's once settled */
    /* HTTP */
    struct tg_upreq *req; /* in flight, else NULL */
    int is_sse;
    struct tg_buf body; /* a JSON (or error) answer's bytes */
    struct tg_sse_parser sse;
};

static void settle(struct scan_exchange *x, int rc)
{
    if (!x->settled) {
        x->settled = 1;
        x->rc = rc;
    }
}

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

static void on_deadline(uv_timer_t *t);

/* Runs the loop until x is settled or timeout_ms has passed. Returns x->rc. */
static int wait_for(struct tg_scan_client *c, struct scan_exchange *x)
{
    c->wait = x;
    c->deadline.data = x;
    uv_timer_start(&c->deadline, on_deadline, (uint64_t)c->timeout_ms, 0);
    while (!x->settled)
        (void)uv_run(&c->loop, UV_RUN_ONCE); /* the deadline keeps the loop alive until then */
    uv_timer_stop(&c->deadline);
    c->wait = NULL;
    if (c->child != NULL)
        c->skipped = c->bad_lines + tg_child_skipped(c->child);
    return x->rc;
}

/* ---- HTTP ---------------------------------------------------------------------------------- */

/* A resolver error in getaddrinfo's words, as `cannot resolve` has always said them. */
static const char *resolve_error(int err)
{
    static const struct {
        int uv, eai;
    } map[] = {{UV_EAI_NONAME, EAI_NONAME}, {UV_EAI_AGAIN, EAI_AGAIN},   {UV_EAI_FAIL, EAI_FAIL},
               {UV_EAI_NODATA, EAI_NODATA}, {UV_EAI_FAMILY, EAI_FAMILY}, {UV_EAI_SERVICE, EAI_SERVICE},
               {UV_EAI_MEMORY, EAI_MEMORY}, {UV_EAI_ADDRFAMILY, EAI_ADDRFAMILY}};
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (map[i].uv == err)
            return gai_strerror(map[i].eai);
    return "the resolver failed";
}

/* A system error (libuv's are -errno) in strerror's words; the pool's own (TG_E*) in a few.
 * (uv_strerror is not asked about a code it does not know: it would allocate its answer.) */
static const char *sys_error(int err)
{
    if (err == TG_ETIMEDOUT)
        return strerror(ETIMEDOUT);
    if (err == TG_ECLOSED)
        return "the connection closed";
    return err < 0 && err > -3000 ? strerror(-err) : "failed";
}

static int on_sse_event(void *ud, const struct tg_sse_event *ev)
{
    struct scan_exchange *x = ud;
    if (x->answer == NULL && x->id >= 0)
        x->answer = take_answer(ev->data.ptr, ev->data.len, x->id);
    return x->answer != NULL ? 1 : 0;
}

static void on_http_head(struct tg_upreq *r, int status, void *ud)
{
    struct scan_exchange *x = ud;
    struct tg_scan_client *c = x->c;
    struct tg_slice sid = tg_upreq_session_id(r), ct = tg_upreq_content_type(r);
    if (sid.len > 0 && sid.len < sizeof(c->session)) {
        memcpy(c->session, sid.ptr, sid.len);
        c->session[sid.len] = '\0';
    }
    x->is_sse = status / 100 == 2 && ct.len >= 17 && strncasecmp(ct.ptr, "text/event-stream", 17) == 0;
}

static void on_http_data(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct scan_exchange *x = ud;
    if (x->is_sse) {
        /* The answer ends the exchange: the stream may stay open after it. */
        (void)tg_sse_feed(&x->sse, p, n, on_sse_event, x);
        if (x->answer != NULL) {
            tg_upreq_cancel(r);
            x->req = NULL;
            settle(x, 0);
        }
        return;
    }
    if (tg_buf_try_append(&x->body, p, n, SCAN_MAX_ANSWER) != 0) {
        tg_scan_fail("the answer is larger than %u bytes", SCAN_MAX_ANSWER);
        tg_upreq_cancel(r);
        x->req = NULL;
        settle(x, -1);
    }
}

/* The request failed before its answer ended: why, in the words scan has always used. */
static void http_failed(struct scan_exchange *x, struct tg_upreq *r, int err)
{
    struct tg_scan_client *c = x->c;
    const char *why = tg_upreq_error(r);
    if (err <= UV_EAI_ADDRFAMILY && err >= UV_EAI_PROTOCOL)
        tg_scan_fail("cannot resolve %s: %s", c->addr, resolve_error(err));
    else if (!tg_upreq_sent(r) && err == TG_EINVAL && c->tls != NULL && why != NULL)
        tg_scan_fail("TLS handshake with %s port %s failed: %s", c->addr, c->port, why);
    else if (!tg_upreq_sent(r))
        tg_scan_fail("cannot connect to %s port %s: %s", c->addr, c->port, sys_error(err));
    else if (err == TG_EINVAL)
        tg_scan_fail("bad HTTP answer from %s port %s: %s", c->addr, c->port, why ? why : "malformed");
    else if (err == TG_ECLOSED)
        tg_scan_fail("the connection to %s port %s closed before the answer ended", c->addr, c->port);
    else
        tg_scan_fail("reading from %s port %s: %s", c->addr, c->port, sys_error(err));
}

static void on_http_done(struct tg_upreq *r, int err, void *ud)
{
    struct scan_exchange *x = ud;
    struct tg_scan_client *c = x->c;
    x->req = NULL;
    if (err != 0) {
        http_failed(x, r, err);
        settle(x, -1);
        return;
    }
    int status = tg_upreq_status(r);
    char text[204];
    snippet(text, sizeof(text), x->body.base, x->body.len);
    if (status / 100 != 2) {
        tg_scan_fail("HTTP %d from %s port %s%s%s", status, c->addr, c->port, x->body.len ? ": " : "", text);
        settle(x, -1);
        return;
    }
    if (x->id < 0) {
        settle(x, 0);
        return;
    }
    if (!x->is_sse && x->body.len > 0)
        x->answer = take_answer(x->body.base, x->body.len, x->id);
    if (x->answer == NULL) {
        tg_scan_fail("HTTP %d from %s port %s without a JSON-RPC answer to request %d%s%s", status, c->addr, c->port,
                     x->id, x->body.len ? ": " : "", text);
        settle(x, -1);
        return;
    }
    settle(x, 0);
}

static const struct tg_upreq_cbs http_cbs = {on_http_head, on_http_data, on_http_done};

/* POSTs one message and waits for its answer. For a request (id >= 0), *answer gets the
 * answer's tree; for a notification, any 2xx passes. Returns 0 or -1 (the reason printed). */
static int http_post(struct tg_scan_client *c, const char *msg, int id, cJSON **answer)
{
    struct tg_buf h;
    tg_buf_init(&h);
    tg_buf_appends(&h, "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n");
    if (c->session[0] != '\0')
        tg_buf_appendf(&h, "Mcp-Session-Id: %s\r\n", c->session);
    if (c->protocol[0] != '\0')
        tg_buf_appendf(&h, "MCP-Protocol-Version: %s\r\n", c->protocol);
    for (size_t i = 0; i < c->nheaders; i++)
        tg_buf_appendf(&h, "%s\r\n", c->headers[i].line);
    tg_buf_append(&h, "", 1);
    struct scan_exchange x = {.c = c, .id = id};
    tg_buf_init(&x.body);
    tg_sse_init(&x.sse, SCAN_MAX_ANSWER);
    x.req = tg_upreq_start(c->up, "POST", h.base, msg, strlen(msg), 0, 0, &http_cbs, &x);
    int rc = wait_for(c, &x);
    if (rc == 0 && answer != NULL) {
        *answer = x.answer;
        x.answer = NULL;
    }
    cJSON_Delete(x.answer);
    tg_sse_dispose(&x.sse);
    tg_buf_dispose(&x.body);
    tg_buf_dispose(&h);
    return rc;
}

/* ---- stdio --------------------------------------------------------------------------------- */

static int stdio_send(struct tg_scan_client *c, const char *msg, size_t n)
{
    int r = c->child != NULL ? tg_child_send(c->child, msg, n) : UV_EPIPE;
    if (r != 0) {
        tg_scan_fail("cannot write to the server's stdin: %s", r == TG_ECLOSED ? strerror(EPIPE) : sys_error(r));
        return -1;
    }
    return 0;
}

/* A request from the server while we wait: answered so that it does not wait on us. */
static void stdio_answer_server(struct tg_scan_client *c, const cJSON *msg)
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
    (void)stdio_send(c, b.base, b.len);
    tg_buf_dispose(&b);
}

/* A JSON object line from the child's stdout (doc NULL: a line over SCAN_MAX_ANSWER). */
static void on_child_message(void *ud, const char *p, size_t n, const struct tg_json_doc *doc, struct tg_buf *own)
{
    struct tg_scan_client *c = ud;
    struct scan_exchange *x = c->wait;
    (void)own;
    if (doc == NULL) {
        if (x != NULL && !x->settled) {
            tg_scan_fail("a line of the server's stdout is longer than %u bytes", SCAN_MAX_ANSWER);
            settle(x, -1);
        }
        return;
    }
    struct tg_json_doc d;
    const char *err;
    size_t off;
    if (tg_json_parse(p, n, SCAN_JSON_DEPTH, 1, &d, &err, &off) != 0) {
        c->bad_lines++;
        return;
    }
    const cJSON *jid = tg_json_get(d.root, "id");
    if (tg_json_get(d.root, "method") != NULL) {
        stdio_answer_server(c, d.root);
    } else if (x != NULL && !x->settled && x->answer == NULL && cJSON_IsNumber(jid) && jid->valuedouble == x->id) {
        x->answer = d.root;
        settle(x, 0);
        return;
    }
    cJSON_Delete(d.root);
}

static void on_child_exit(void *ud, int64_t status, int term_signal)
{
    struct tg_scan_client *c = ud;
    struct scan_exchange *x = c->wait;
    c->skipped = c->bad_lines + tg_child_skipped(c->child);
    c->child = NULL; /* it frees itself */
    if (x != NULL && !x->settled) {
        tg_scan_fail("the server exited (%s %d) before answering request %d", term_signal ? "signal" : "status",
                     term_signal ? term_signal : (int)status, x->id);
        settle(x, -1);
    }
}

/* ---- the link ------------------------------------------------------------------------------ */

static void on_deadline(uv_timer_t *t)
{
    struct scan_exchange *x = t->data;
    struct tg_scan_client *c = x->c;
    if (x->settled)
        return;
    if (c->stdio) {
        tg_scan_fail("no answer to request %d on the server's stdout within %d ms", x->id, c->timeout_ms);
    } else if (x->req != NULL && tg_upreq_handshaking(x->req)) {
        tg_scan_fail("TLS handshake with %s port %s: no answer within %d ms", c->addr, c->port, c->timeout_ms);
    } else if (x->req != NULL && !tg_upreq_sent(x->req)) {
        tg_scan_fail("cannot connect to %s port %s: %s", c->addr, c->port, strerror(ETIMEDOUT));
    } else {
        tg_scan_fail("no answer from %s port %s within %d ms", c->addr, c->port, c->timeout_ms);
    }
    if (x->req != NULL)
        tg_upreq_cancel(x->req);
    x->req = NULL;
    settle(x, -1);
}

int tg_scan_client_start(struct tg_scan_client *c, char **argv)
{
    /* The runtime logs as the gateway does; scan says what went wrong itself. */
    tg_log_setup(TG_LOG_ERROR - 1, TG_LOG_LOGFMT, NULL);
    uv_loop_init(&c->loop);
    uv_timer_init(&c->loop, &c->deadline);
    c->started = 1;
    c->uc.name = "scan";
    if (c->stdio) {
        /* The environment as it is (uc.env NULL), argv[0] looked up on its PATH. */
        c->uc.transport = TG_UP_STDIO;
        c->uc.command = argv;
        c->uc.env = c->env;
        c->uc.cwd = (char *)c->cwd;
        c->uc.stderr_inherit = 1;
        int err = 0;
        c->child = tg_child_spawn(&c->loop, &c->uc, SCAN_MAX_ANSWER, NULL, on_child_message, on_child_exit, c, &err);
        if (c->child == NULL) {
            tg_scan_fail("cannot start %s: %s", argv[0], sys_error(err));
            return -1;
        }
        return 0;
    }
    c->uc.transport = TG_UP_STREAMABLE;
    c->uc.host = c->addr;
    c->uc.port = atoi(c->port);
    c->uc.path = (char *)c->path;
    c->uc.authority = c->host;
    c->uc.tls = c->tls != NULL;
    c->uc.tls_ctx = c->tls;
    /* One connection, kept alive between messages. Each exchange's deadline is the link's own
     * timer (on_deadline says where it stopped); the pool's connect timer only backs it up. */
    c->uc.pool_size = 1;
    c->uc.queue_max = 1;
    c->uc.queue_timeout_ms = c->timeout_ms;
    c->uc.connect_timeout_ms = c->timeout_ms * 2;
    c->uc.pool_idle_timeout_ms = c->timeout_ms * 2;
    c->up = tg_upstream_new(&c->loop, NULL, &c->uc, &c->metrics);
    return 0;
}

void tg_scan_client_stop(struct tg_scan_client *c)
{
    if (!c->started)
        return;
    c->started = 0;
    if (c->child != NULL)
        c->skipped = c->bad_lines + tg_child_skipped(c->child);
    tg_child_kill(c->child); /* stdin closed, SIGTERM, SIGKILL 2 s later: the loop runs until it is reaped */
    c->child = NULL;
    if (c->up != NULL)
        tg_upstream_close(c->up);
    c->up = NULL;
    uv_close((uv_handle_t *)&c->deadline, NULL);
    uv_run(&c->loop, UV_RUN_DEFAULT);
    if (uv_loop_close(&c->loop) != 0)
        tg_scan_fail("warning: a handle was left open");
}

/* ---- MCP ----------------------------------------------------------------------------------- */

static int stdio_exchange(struct tg_scan_client *c, const char *msg, size_t n, int id, cJSON **answer)
{
    if (stdio_send(c, msg, n) != 0)
        return -1;
    struct scan_exchange x = {.c = c, .id = id};
    int rc = wait_for(c, &x);
    if (rc == 0)
        *answer = x.answer;
    else
        cJSON_Delete(x.answer);
    return rc;
}

/* Sends a request (params: JSON text or NULL) and waits for its answer: 0 with *result set
 * (owned by *msg, which the caller frees), 1 when the server answered with an error (printed
 * into errtext), -1 when there was no answer (printed). */
int tg_scan_client_rpc(struct tg_scan_client *c, const char *method, const char *params, cJSON **msg, const cJSON **result,
               char *errtext, size_t errcap)
{
    int id = c->next_id++;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appendf(&b, "{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"%s\"", id, method);
    if (params != NULL)
        tg_buf_appendf(&b, ",\"params\":%s", params);
    tg_buf_append(&b, "}", 2);
    int rc = c->stdio ? stdio_exchange(c, b.base, b.len - 1, id, msg) : http_post(c, b.base, id, msg);
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

int tg_scan_client_notify(struct tg_scan_client *c, const char *method)
{
    char b[256];
    int n = snprintf(b, sizeof(b), "{\"jsonrpc\":\"2.0\",\"method\":\"%s\"}", method);
    return c->stdio ? stdio_send(c, b, (size_t)n) : http_post(c, b, -1, NULL);
}
