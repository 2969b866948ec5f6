/*
 * fast_upstream — a minimal MCP Streamable-HTTP server used as the upstream
 * of every benchmark target (direct, nginx, tollgate).
 *
 * It must cost as little CPU as possible so that the benchmark measures the
 * proxy in front of it, not this process: one libuv loop, llhttp for framing,
 * no JSON library, no per-request allocation on the fast path (replies are
 * built in a per-connection buffer and written with uv_try_write, falling back
 * to a queued uv_write only when the socket is full).
 *
 * Replies (always application/json with Content-Length):
 *   initialize   protocolVersion echoed from params.protocolVersion,
 *                capabilities {tools:{}}, serverInfo, plus Mcp-Session-Id
 *   tools/call   {"content":[{"type":"text","text":"ok"}]}, plus "resultType":"complete"
 *                when the request's MCP-Protocol-Version header is 2026-07-28 or later
 *                (a 2026 server's answer, for the nginx-2026 target of run.sh; the
 *                other 2026 headers and the body's _meta are not checked)
 *   tools/list   one tool, "echo"
 *   ping         {}
 *   other        JSON-RPC error -32601
 *   no id        (notification or client response) 202 with an empty body
 * The reply's id is the request's top-level "id" token copied byte for byte.
 *
 * Streams (test/bench/streams.sh): a tools/call of the tool "stream" is answered
 * with text/event-stream, chunked: N "message" events carrying
 * notifications/progress (progressToken from params._meta.progressToken), then
 * the result, then the end of the body. N is arguments.events (default
 * --events, 1000); arguments.pad adds that many bytes to each progress message.
 * Events are produced STREAM_CHUNK bytes at a time, the next chunk only once the
 * previous one is written, so a slow reader slows the stream (backpressure). The
 * head goes out in the same write as the first chunk: a proxy then reads them
 * together however fast it is, which keeps test/perf/callgrind.sh's instruction
 * counts from depending on when it happened to read.
 * With --get-stream, GET answers 200 text/event-stream and holds the stream
 * open without sending anything (a session's standalone stream, for
 * test/bench/memory.sh); without it GET is 405.
 *
 * Usage: fast_upstream PORT [--events N] [--get-stream]     (PORT 0 picks a free port)
 * Prints "LISTENING <port>" on stdout once it accepts connections.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "llhttp.h"

#define MAX_BODY (4u * 1024u * 1024u)
#define READ_CHUNK 65536u
/* Stop reading from a client whose unsent replies pass this many bytes. */
#define OUT_HIGH_WATER (1u * 1024u * 1024u)
/* Bytes of events produced per write of an SSE answer. */
#define STREAM_CHUNK (32u * 1024u)
#define MAX_PAD 65536u

struct buf {
    char *base;
    size_t len;
    size_t cap;
};

struct slice {
    const char *ptr;
    size_t len;
};

/* One client connection. Owned by the loop; freed in on_close. */
struct conn {
    uv_tcp_t tcp;
    uv_shutdown_t shutdown;
    llhttp_t parser;
    struct buf in;   /* read buffer handed to libuv by on_alloc */
    struct buf body; /* body of the request being parsed, accumulated */
    struct buf out;  /* replies produced by the current read, not yet written */
    int too_large;   /* current body passed MAX_BODY */
    int closing;     /* shutdown or close already started */
    int close_after; /* a request said Connection: close (or HTTP/1.0) */
    int reading;     /* uv_read_start is in effect */
    /* MCP-Protocol-Version of the request being parsed: is it 2026-07-28 or later? The header
     * name and value are gathered in small buffers (llhttp may split them); longer ones never
     * match. */
    int modern;
    int hdr_is_pv;   /* the header being parsed is MCP-Protocol-Version */
    size_t hfield_len, hvalue_len;
    char hfield[24];
    char hvalue[16];
    /* An SSE answer in progress: the parser is paused, later bytes wait in rest. */
    int streaming;           /* 1: tools/call stream being written; 2: GET stream held open */
    int stream_busy;         /* a chunk of the stream is being written */
    unsigned long ev_total;  /* progress events to send */
    unsigned long ev_sent;
    unsigned long pad;       /* bytes of padding per progress event */
    char id[64];             /* the call's id token */
    size_t id_len;
    char token[80];          /* the progress token (a JSON value) */
    size_t token_len;
    struct buf sbuf;         /* the chunk being written */
    struct buf rest;         /* bytes read while streaming, parsed when the stream ends */
    uv_write_t swrite;
};

/* A queued write: the bytes follow the struct and belong to it until on_write. */
struct wreq {
    uv_write_t req;
    size_t len;
    char data[];
};

static llhttp_settings_t parser_settings;
static unsigned long long session_counter;
static unsigned long default_events = 1000;
static int get_stream_enabled;

/* ---- buffers ------------------------------------------------------------ */

static void buf_reserve(struct buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < extra)
        cap *= 2;
    char *p = realloc(b->base, cap);
    if (p == NULL) {
        fputs("fast_upstream: out of memory\n", stderr);
        abort();
    }
    b->base = p;
    b->cap = cap;
}

static void buf_append(struct buf *b, const void *p, size_t n)
{
    buf_reserve(b, n);
    memcpy(b->base + b->len, p, n);
    b->len += n;
}

#define buf_lit(b, s) buf_append((b), (s), sizeof(s) - 1)

static void buf_slice(struct buf *b, struct slice s)
{
    buf_append(b, s.ptr, s.len);
}

/* ---- a tiny JSON scanner: finds top-level members, validates nothing more
 * than it needs to skip values correctly ----------------------------------- */

static const char *skip_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p;
}

/* p points at the opening quote; returns the byte after the closing one. */
static const char *skip_string(const char *p, const char *e)
{
    for (p++; p < e; p++) {
        if (*p == '\\') {
            p++;
            continue;
        }
        if (*p == '"')
            return p + 1;
    }
    return NULL;
}

static const char *skip_value(const char *p, const char *e)
{
    if (p >= e)
        return NULL;
    if (*p == '"')
        return skip_string(p, e);
    if (*p == '{' || *p == '[') {
        int depth = 0;
        while (p < e) {
            char c = *p;
            if (c == '"') {
                p = skip_string(p, e);
                if (p == NULL)
                    return NULL;
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if (c == '}' || c == ']')
                depth--;
            p++;
            if (depth == 0)
                return p;
        }
        return NULL;
    }
    /* number, true, false, null */
    const char *start = p;
    while (p < e && *p != ',' && *p != '}' && *p != ']' && *p != ' ' &&
           *p != '\t' && *p != '\r' && *p != '\n')
        p++;
    return p > start ? p : NULL;
}

static int key_is(struct slice key, const char *lit, size_t n)
{
    return key.len == n && memcmp(key.ptr, lit, n) == 0;
}

#define KEY_IS(k, s) key_is((k), (s), sizeof(s) - 1)

struct rpc {
    struct slice id;     /* raw token, empty when absent */
    struct slice method; /* string contents without quotes, empty when absent */
    struct slice params; /* raw value, empty when absent */
    int has_id;
    int has_method;
};

/*
 * Calls on_member for each member of the object at [p, e). Keys are the raw
 * bytes between the quotes (escaped keys never match, which is fine for the
 * names looked up here). Returns 0, or -1 when the input is not an object.
 */
typedef void (*member_cb)(void *ud, struct slice key, struct slice val);

static int scan_object(const char *p, const char *e, member_cb on_member, void *ud)
{
    p = skip_ws(p, e);
    if (p >= e || *p != '{')
        return -1;
    p = skip_ws(p + 1, e);
    if (p < e && *p == '}')
        return 0;
    for (;;) {
        if (p >= e || *p != '"')
            return -1;
        const char *kend = skip_string(p, e);
        if (kend == NULL)
            return -1;
        struct slice key = { p + 1, (size_t)(kend - p - 2) };
        p = skip_ws(kend, e);
        if (p >= e || *p != ':')
            return -1;
        p = skip_ws(p + 1, e);
        const char *vend = skip_value(p, e);
        if (vend == NULL)
            return -1;
        on_member(ud, key, (struct slice){ p, (size_t)(vend - p) });
        p = skip_ws(vend, e);
        if (p < e && *p == ',') {
            p = skip_ws(p + 1, e);
            continue;
        }
        if (p < e && *p == '}')
            return 0;
        return -1;
    }
}

static void on_rpc_member(void *ud, struct slice key, struct slice val)
{
    struct rpc *r = ud;
    if (KEY_IS(key, "id")) {
        r->id = val;
        r->has_id = 1;
    } else if (KEY_IS(key, "method")) {
        if (val.len >= 2 && val.ptr[0] == '"') {
            r->method = (struct slice){ val.ptr + 1, val.len - 2 };
            r->has_method = 1;
        }
    } else if (KEY_IS(key, "params")) {
        r->params = val;
    }
}

static void on_params_member(void *ud, struct slice key, struct slice val)
{
    struct slice *pv = ud;
    if (KEY_IS(key, "protocolVersion") && val.len >= 2 && val.ptr[0] == '"')
        *pv = val;
}

struct call_params {
    struct slice name;  /* string contents */
    struct slice token; /* params._meta.progressToken, raw */
    long events;        /* arguments.events, -1 when absent */
    long pad;           /* arguments.pad */
};

static long slice_long(struct slice v)
{
    long n = 0;
    if (v.len == 0 || v.len > 9)
        return -1;
    for (size_t i = 0; i < v.len; i++) {
        if (v.ptr[i] < '0' || v.ptr[i] > '9')
            return -1;
        n = n * 10 + (v.ptr[i] - '0');
    }
    return n;
}

static void on_args_member(void *ud, struct slice key, struct slice val)
{
    struct call_params *cp = ud;
    if (KEY_IS(key, "events"))
        cp->events = slice_long(val);
    else if (KEY_IS(key, "pad"))
        cp->pad = slice_long(val);
}

static void on_meta_member(void *ud, struct slice key, struct slice val)
{
    struct call_params *cp = ud;
    if (KEY_IS(key, "progressToken"))
        cp->token = val;
}

static void on_call_member(void *ud, struct slice key, struct slice val)
{
    struct call_params *cp = ud;
    if (KEY_IS(key, "name") && val.len >= 2 && val.ptr[0] == '"')
        cp->name = (struct slice){ val.ptr + 1, val.len - 2 };
    else if (KEY_IS(key, "arguments"))
        scan_object(val.ptr, val.ptr + val.len, on_args_member, cp);
    else if (KEY_IS(key, "_meta"))
        scan_object(val.ptr, val.ptr + val.len, on_meta_member, cp);
}

/* ---- replies ------------------------------------------------------------ */

static void reply(struct conn *c, const char *status, const char *extra_headers,
                  const char *body, size_t body_len)
{
    char head[256];
    int keep_alive = llhttp_should_keep_alive(&c->parser);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %s\r\n"
                     "%s"
                     "%s"
                     "Content-Length: %zu\r\n"
                     "%s"
                     "\r\n",
                     status,
                     body_len ? "Content-Type: application/json\r\n" : "",
                     extra_headers ? extra_headers : "",
                     body_len,
                     !keep_alive ? "Connection: close\r\n"
                     : c->parser.http_minor == 0 ? "Connection: keep-alive\r\n"
                                                 : "");
    if (n < 0 || (size_t)n >= sizeof head)
        abort(); /* cannot happen: every input is ours */
    buf_append(&c->out, head, (size_t)n);
    buf_append(&c->out, body, body_len);
}

static void reply_rpc(struct conn *c, const struct rpc *r)
{
    static const struct slice default_pv = { "\"2025-06-18\"", 12 };
    /* Only initialize, tools/list and the rare others come here, so a
     * temporary body buffer costs nothing that matters. */
    struct buf b = { 0 };
    char extra[96];
    extra[0] = '\0';

    buf_lit(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    buf_slice(&b, r->id);

    if (KEY_IS(r->method, "tools/call")) {
        if (c->modern)
            buf_lit(&b, ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}],"
                        "\"resultType\":\"complete\"}}");
        else
            buf_lit(&b, ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}");
    } else if (KEY_IS(r->method, "tools/list")) {
        buf_lit(&b, ",\"result\":{\"tools\":[{\"name\":\"echo\","
                    "\"description\":\"Replies ok.\","
                    "\"inputSchema\":{\"type\":\"object\","
                    "\"properties\":{\"text\":{\"type\":\"string\"}}}}]}}");
    } else if (KEY_IS(r->method, "initialize")) {
        struct slice pv = default_pv;
        if (r->params.len)
            scan_object(r->params.ptr, r->params.ptr + r->params.len,
                        on_params_member, &pv);
        buf_lit(&b, ",\"result\":{\"protocolVersion\":");
        buf_slice(&b, pv);
        buf_lit(&b, ",\"capabilities\":{\"tools\":{}},"
                    "\"serverInfo\":{\"name\":\"tg-bench-upstream\",\"version\":\"1.0\"}}}");
        snprintf(extra, sizeof extra, "Mcp-Session-Id: fu-%016llx\r\n",
                 ++session_counter);
    } else if (KEY_IS(r->method, "ping")) {
        buf_lit(&b, ",\"result\":{}}");
    } else {
        buf_lit(&b, ",\"error\":{\"code\":-32601,\"message\":\"Method not found\"}}");
    }
    reply(c, "200 OK", extra[0] ? extra : NULL, b.base, b.len);
    free(b.base);
    b.base = NULL;
}

/* Fast path for the call the benchmark repeats: no temporary buffer. */
static void reply_tools_call(struct conn *c, struct slice id)
{
    static const char pre[] = "{\"jsonrpc\":\"2.0\",\"id\":";
    static const char post2025[] =
        ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}";
    static const char post2026[] =
        ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}],\"resultType\":\"complete\"}}";
    const char *post = c->modern ? post2026 : post2025;
    size_t post_len = c->modern ? sizeof post2026 - 1 : sizeof post2025 - 1;
    size_t body_len = sizeof pre - 1 + id.len + post_len;
    char head[160];
    int keep_alive = llhttp_should_keep_alive(&c->parser);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\n"
                     "Content-Type: application/json\r\n"
                     "Content-Length: %zu\r\n"
                     "%s\r\n",
                     body_len,
                     !keep_alive ? "Connection: close\r\n"
                     : c->parser.http_minor == 0 ? "Connection: keep-alive\r\n"
                                                 : "");
    if (n < 0 || (size_t)n >= sizeof head)
        abort();
    buf_reserve(&c->out, (size_t)n + body_len);
    buf_append(&c->out, head, (size_t)n);
    buf_append(&c->out, pre, sizeof pre - 1);
    buf_slice(&c->out, id);
    buf_append(&c->out, post, post_len);
}

static const void *memmem_(const void *h, size_t hn, const void *n, size_t nn)
{
    const char *p = h, *e = p + hn;
    if (nn == 0)
        return h;
    while (hn >= nn && (p = memchr(p, *(const char *)n, (size_t)(e - p))) != NULL) {
        if ((size_t)(e - p) < nn)
            return NULL;
        if (memcmp(p, n, nn) == 0)
            return p;
        p++;
    }
    return NULL;
}

/* Head of the SSE answer; the events follow from stream_pump(). */
static void start_stream(struct conn *c, const struct rpc *r, const struct call_params *cp)
{
    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: text/event-stream\r\n"
                               "Cache-Control: no-cache\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n";
    buf_append(&c->out, head, sizeof head - 1);
    c->streaming = 1;
    c->ev_total = cp->events >= 0 ? (unsigned long)cp->events : default_events;
    c->ev_sent = 0;
    c->pad = cp->pad > 0 ? (unsigned long)cp->pad : 0;
    if (c->pad > MAX_PAD)
        c->pad = MAX_PAD;
    c->id_len = r->id.len < sizeof c->id ? r->id.len : 0;
    memcpy(c->id, r->id.ptr, c->id_len);
    if (c->id_len == 0) {
        memcpy(c->id, "null", 4);
        c->id_len = 4;
    }
    if (cp->token.len > 0 && cp->token.len < sizeof c->token) {
        memcpy(c->token, cp->token.ptr, cp->token.len);
        c->token_len = cp->token.len;
    } else {
        memcpy(c->token, "\"bench\"", 7);
        c->token_len = 7;
    }
}

static const char parse_error_body[] =
    "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32700,\"message\":\"Parse error\"}}";

static void handle_request(struct conn *c)
{
    llhttp_method_t method = (llhttp_method_t)llhttp_get_method(&c->parser);

    if (method == HTTP_DELETE) {
        reply(c, "200 OK", NULL, "", 0);
        return;
    }
    if (method == HTTP_GET && get_stream_enabled) {
        static const char head[] = "HTTP/1.1 200 OK\r\n"
                                   "Content-Type: text/event-stream\r\n"
                                   "Cache-Control: no-cache\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n";
        buf_append(&c->out, head, sizeof head - 1);
        c->streaming = 2;
        return;
    }
    if (method != HTTP_POST) {
        /* No standalone SSE stream is offered, which the spec allows. */
        reply(c, "405 Method Not Allowed", "Allow: POST, DELETE\r\n", "", 0);
        return;
    }
    if (c->too_large) {
        reply(c, "413 Content Too Large", NULL, "", 0);
        return;
    }

    struct rpc r = { 0 };
    if (scan_object(c->body.base, c->body.base + c->body.len, on_rpc_member, &r) != 0) {
        reply(c, "400 Bad Request", NULL, parse_error_body, sizeof parse_error_body - 1);
        return;
    }
    if (!r.has_id || !r.has_method) {
        /* A notification, or a response to a server request: accepted. */
        reply(c, "202 Accepted", NULL, "", 0);
        return;
    }
    if (KEY_IS(r.method, "tools/call")) {
        if (r.params.len && memmem_(r.params.ptr, r.params.len, "\"stream\"", 8)) {
            struct call_params cp = { .events = -1, .pad = 0 };
            scan_object(r.params.ptr, r.params.ptr + r.params.len, on_call_member, &cp);
            if (KEY_IS(cp.name, "stream")) {
                start_stream(c, &r, &cp);
                return;
            }
        }
        reply_tools_call(c, r.id);
    } else
        reply_rpc(c, &r);
}

/* ---- llhttp callbacks ----------------------------------------------------- */

static int on_message_begin(llhttp_t *p)
{
    struct conn *c = p->data;
    c->body.len = 0;
    c->too_large = 0;
    c->modern = 0;
    c->hfield_len = 0;
    return 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (c->hfield_len + len <= sizeof c->hfield)
        memcpy(c->hfield + c->hfield_len, at, len);
    c->hfield_len += len; /* past the buffer: too long to be the one looked for */
    return 0;
}

static int on_header_field_complete(llhttp_t *p)
{
    static const char pv[] = "mcp-protocol-version";
    struct conn *c = p->data;
    c->hdr_is_pv = 0;
    if (c->hfield_len == sizeof pv - 1) {
        size_t i = 0;
        while (i < c->hfield_len && (c->hfield[i] | 0x20) == pv[i])
            i++; /* ASCII case folding: '-' | 0x20 is still '-' */
        c->hdr_is_pv = i == c->hfield_len;
    }
    c->hfield_len = 0;
    c->hvalue_len = 0;
    return 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (!c->hdr_is_pv)
        return 0;
    if (c->hvalue_len + len <= sizeof c->hvalue)
        memcpy(c->hvalue + c->hvalue_len, at, len);
    c->hvalue_len += len;
    return 0;
}

static int on_header_value_complete(llhttp_t *p)
{
    struct conn *c = p->data;
    /* Versions are dates: a later one compares greater byte for byte. */
    if (c->hdr_is_pv && c->hvalue_len == 10 && memcmp(c->hvalue, "2026-07-28", 10) >= 0)
        c->modern = 1;
    c->hdr_is_pv = 0;
    return 0;
}

static int on_body(llhttp_t *p, const char *at, size_t len)
{
    struct conn *c = p->data;
    if (c->too_large || c->body.len + len > MAX_BODY) {
        c->too_large = 1;
        return 0;
    }
    buf_append(&c->body, at, len);
    return 0;
}

static int on_message_complete(llhttp_t *p)
{
    struct conn *c = p->data;
    handle_request(c);
    if (!llhttp_should_keep_alive(p))
        c->close_after = 1;
    /* An SSE answer owns the connection until it ends: later requests wait. */
    return c->streaming ? HPE_PAUSED : 0;
}

/* ---- connection I/O -------------------------------------------------------- */

static void on_close(uv_handle_t *h)
{
    struct conn *c = (struct conn *)h;
    free(c->in.base);
    c->in.base = NULL;
    free(c->body.base);
    c->body.base = NULL;
    free(c->out.base);
    c->out.base = NULL;
    free(c->sbuf.base);
    free(c->rest.base);
    free(c);
}

static void conn_close(struct conn *c)
{
    if (c->closing)
        return;
    c->closing = 1;
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    (void)status;
    struct conn *c = req->data;
    c->closing = 0; /* shutdown done; let conn_close run */
    conn_close(c);
}

/* Ends the connection after the queued replies have been written. */
static void conn_finish(struct conn *c)
{
    if (c->closing)
        return;
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->shutdown.data = c;
    if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown) == 0)
        c->closing = 1;
    else
        conn_close(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    struct conn *c = (struct conn *)h;
    if (c->in.base == NULL) {
        c->in.base = malloc(READ_CHUNK);
        if (c->in.base == NULL)
            abort();
        c->in.cap = READ_CHUNK;
    }
    *b = uv_buf_init(c->in.base, (unsigned int)c->in.cap);
}

static void on_write(uv_write_t *req, int status)
{
    struct wreq *w = (struct wreq *)req;
    struct conn *c = req->data;
    free(w);
    if (status < 0) {
        conn_close(c);
        return;
    }
    if (!c->reading && !c->closing &&
        c->tcp.write_queue_size < OUT_HIGH_WATER / 2) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
            c->reading = 1;
    }
}

static int conn_flush(struct conn *c)
{
    size_t off = 0;
    if (c->out.len == 0)
        return 0;
    if (c->tcp.write_queue_size == 0) {
        uv_buf_t b = uv_buf_init(c->out.base, (unsigned int)c->out.len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (n >= 0)
            off = (size_t)n;
        else if (n != UV_EAGAIN)
            return n;
    }
    if (off < c->out.len) {
        size_t rest = c->out.len - off;
        struct wreq *w = malloc(sizeof *w + rest);
        if (w == NULL)
            abort();
        memcpy(w->data, c->out.base + off, rest);
        w->len = rest;
        w->req.data = c;
        uv_buf_t b = uv_buf_init(w->data, (unsigned int)rest);
        int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_write);
        if (rc < 0) {
            free(w);
            return rc;
        }
    }
    c->out.len = 0;
    return 0;
}

/* ---- SSE answers ---------------------------------------------------------------- */

static void feed(struct conn *c, const char *p, size_t n);

static void append_ulong(struct buf *b, unsigned long v)
{
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    buf_append(b, tmp + i, sizeof tmp - i);
}

static void on_stream_write(uv_write_t *req, int status);

/* The stream is over: requests that arrived meanwhile are parsed now. */
static void stream_done(struct conn *c)
{
    c->streaming = 0;
    if (c->close_after) {
        conn_finish(c);
        return;
    }
    llhttp_resume(&c->parser);
    struct buf pending = c->rest;
    c->rest = (struct buf){ 0 };
    if (pending.len)
        feed(c, pending.base, pending.len);
    free(pending.base);
}

/* Writes the next chunk of events (one write at a time: the reader sets the pace). */
static void stream_pump(struct conn *c)
{
    enum { ROOM = 16 }; /* for the chunk-size line, written in front once the size is known */
    if (c->streaming != 1 || c->stream_busy || c->closing)
        return;
    if (c->ev_sent > c->ev_total) {
        stream_done(c);
        return;
    }
    struct buf *b = &c->sbuf;
    b->len = 0;
    buf_reserve(b, ROOM + STREAM_CHUNK + 1024 + c->pad);
    b->len = ROOM;
    while (c->ev_sent < c->ev_total && b->len - ROOM < STREAM_CHUNK) {
        c->ev_sent++;
        buf_lit(b, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
                   "\"params\":{\"progressToken\":");
        buf_append(b, c->token, c->token_len);
        buf_lit(b, ",\"progress\":");
        append_ulong(b, c->ev_sent);
        buf_lit(b, ",\"total\":");
        append_ulong(b, c->ev_total);
        if (c->pad) {
            buf_lit(b, ",\"message\":\"");
            buf_reserve(b, c->pad);
            memset(b->base + b->len, 'x', c->pad);
            b->len += c->pad;
            buf_lit(b, "\"");
        }
        buf_lit(b, "}}\n\n");
    }
    int last = 0;
    if (c->ev_sent == c->ev_total) {
        c->ev_sent++; /* the result is sent too */
        last = 1;
        buf_lit(b, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":");
        buf_append(b, c->id, c->id_len);
        buf_lit(b, ",\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}\n\n");
    }
    char hex[ROOM];
    int hn = snprintf(hex, sizeof hex, "%zx\r\n", b->len - ROOM);
    if (hn <= 0 || hn > ROOM)
        abort();
    memcpy(b->base + ROOM - hn, hex, (size_t)hn);
    buf_lit(b, "\r\n");
    if (last)
        buf_lit(b, "0\r\n\r\n");
    /* c->out holds the head (and any answer before it) on the first chunk: it belongs to this
     * write until on_stream_write, and nothing is added to it while the stream lasts. */
    uv_buf_t ub[2];
    unsigned int nb = 0;
    if (c->out.len > 0)
        ub[nb++] = uv_buf_init(c->out.base, (unsigned int)c->out.len);
    ub[nb++] = uv_buf_init(b->base + ROOM - hn, (unsigned int)(b->len - (ROOM - (size_t)hn)));
    c->stream_busy = 1;
    c->swrite.data = c;
    if (uv_write(&c->swrite, (uv_stream_t *)&c->tcp, ub, nb, on_stream_write) != 0) {
        c->stream_busy = 0;
        conn_close(c);
    }
}

static void on_stream_write(uv_write_t *req, int status)
{
    struct conn *c = req->data;
    c->stream_busy = 0;
    c->out.len = 0;
    if (status < 0 || c->closing) {
        conn_close(c);
        return;
    }
    stream_pump(c);
}

/* ---- input ---------------------------------------------------------------------- */

/* Every complete request in p (pipelining) is answered into c->out by
 * on_message_complete; partial ones stay in the parser. While an SSE answer is
 * being written the parser is paused and the bytes wait in c->rest. */
static void feed(struct conn *c, const char *p, size_t n)
{
    if (c->streaming) {
        if (c->rest.len + n > MAX_BODY) {
            conn_close(c);
            return;
        }
        buf_append(&c->rest, p, n);
        return;
    }
    llhttp_errno_t err = llhttp_execute(&c->parser, p, n);
    int done = 0;
    if (err == HPE_PAUSED && c->streaming) {
        const char *pos = llhttp_get_error_pos(&c->parser);
        if (pos != NULL && pos >= p && pos < p + n)
            buf_append(&c->rest, pos, (size_t)(p + n - pos));
    } else if (err != HPE_OK) {
        if (err != HPE_CLOSED_CONNECTION) {
            static const char bad[] =
                "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
            buf_append(&c->out, bad, sizeof bad - 1);
        }
        done = 1;
    } else if (c->close_after) {
        done = 1;
    }

    if (c->streaming == 1) {
        stream_pump(c); /* writes c->out too; close_after, if any, waits for the end of the stream */
        return;
    }
    if (conn_flush(c) < 0) {
        conn_close(c);
        return;
    }
    if (c->streaming)
        return; /* a GET stream held open */
    if (done) {
        conn_finish(c);
        return;
    }
    if (c->tcp.write_queue_size > OUT_HIGH_WATER) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    struct conn *c = (struct conn *)s;
    if (nread == 0)
        return;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    feed(c, b->base, (size_t)nread);
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status < 0)
        return;
    struct conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        abort();
    uv_tcp_init(server->loop, &c->tcp);
    if (uv_accept(server, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_init(&c->parser, HTTP_REQUEST, &parser_settings);
    c->parser.data = c;
    if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
        conn_close(c);
        return;
    }
    c->reading = 1;
}

static void on_signal(uv_signal_t *h, int signum)
{
    (void)signum;
    uv_stop(h->loop);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PORT [--events N] [--get-stream]   (PORT 0 picks a free port)\n", argv[0]);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--get-stream") == 0) {
            get_stream_enabled = 1;
        } else if (strcmp(argv[i], "--events") == 0 && i + 1 < argc) {
            long v = slice_long((struct slice){ argv[i + 1], strlen(argv[i + 1]) });
            if (v < 0) {
                fprintf(stderr, "fast_upstream: bad --events '%s'\n", argv[i + 1]);
                return 2;
            }
            default_events = (unsigned long)v;
            i++;
        } else {
            fprintf(stderr, "fast_upstream: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    char *end;
    errno = 0;
    long port = strtol(argv[1], &end, 10);
    if (errno || *end || port < 0 || port > 65535) {
        fprintf(stderr, "fast_upstream: bad port '%s'\n", argv[1]);
        return 2;
    }

    signal(SIGPIPE, SIG_IGN);

    llhttp_settings_init(&parser_settings);
    parser_settings.on_message_begin = on_message_begin;
    parser_settings.on_header_field = on_header_field;
    parser_settings.on_header_field_complete = on_header_field_complete;
    parser_settings.on_header_value = on_header_value;
    parser_settings.on_header_value_complete = on_header_value_complete;
    parser_settings.on_body = on_body;
    parser_settings.on_message_complete = on_message_complete;

    uv_loop_t *loop = uv_default_loop();
    uv_tcp_t server;
    struct sockaddr_in addr;
    uv_ip4_addr("127.0.0.1", (int)port, &addr);
    uv_tcp_init(loop, &server);
    int rc = uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&server, 1024, on_connection);
    if (rc != 0) {
        fprintf(stderr, "fast_upstream: listen on 127.0.0.1:%ld: %s\n", port,
                uv_strerror(rc));
        return 1;
    }

    struct sockaddr_storage bound;
    int len = (int)sizeof bound;
    uv_tcp_getsockname(&server, (struct sockaddr *)&bound, &len);
    printf("LISTENING %u\n", (unsigned)ntohs(((struct sockaddr_in *)&bound)->sin_port));
    fflush(stdout);

    uv_signal_t sigint, sigterm;
    uv_signal_init(loop, &sigint);
    uv_signal_start(&sigint, on_signal, SIGINT);
    uv_signal_init(loop, &sigterm);
    uv_signal_start(&sigterm, on_signal, SIGTERM);

    uv_run(loop, UV_RUN_DEFAULT);
    return 0;
}
