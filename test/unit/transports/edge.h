/* Scaffolding for the tests of the transports' MCP half (transports/streamable.c, batch.c,
 * channel.c, legacy_sse.c, ws_channel.c, respond.c): a real tg_conn fed raw bytes over a
 * loopback socket (test/unit/transports/harness.h) in front of a hand-built server with a fake
 * upstream kind (test/unit/core/middle.h). There is no router: the handler builds the request
 * context (struct tg_exchange) itself, as core/app/route.c does once a request is
 * authenticated, and calls the transport function the path names:
 *
 *   POST/GET/DELETE .../mcp  tg_streamable_post / _get / _delete
 *   GET .../sse              tg_legacy_sse_open
 *   POST .../messages?Q      tg_legacy_sse_messages (query Q)
 *   GET .../ws               tg_ws_channel_open
 *
 * A path that starts with "/side/" is upstream 1 (side, initialize = "local"), any other upstream
 * 0 (main, forwarded to the fake kind). The grant is always alice (anonymous). */
#ifndef TG_TEST_TRANSPORTS_EDGE_H
#define TG_TEST_TRANSPORTS_EDGE_H

#include "test/unit/core/middle.h"
#include "test/unit/transports/harness.h"

#include "policy/auth.h"
#include "transports/batch.h"
#include "transports/channel.h"
#include "transports/cred_watch.h"
#include "transports/legacy_sse.h"
#include "transports/replay.h"
#include "transports/respond.h"
#include "transports/streamable.h"
#include "transports/ws_channel.h"

/* main forwards everything (no call timeout: the test answers when it likes); side answers
 * initialize itself. Three %s for the directory (the last one in a comment). */
#define EDGE_CONF                                                                                                  \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "limits = { inflight_per_session = 3; };\n"                                                                    \
    "grants = ( { name = \"alice\"; anonymous = true; } );\n"                                                      \
    "upstreams = (\n"                                                                                              \
    "  { name = \"main\"; url = \"http://127.0.0.1:9/mcp\"; default = true; policy = \"%s/policy.json\"; },\n"     \
    "  { name = \"side\"; url = \"http://127.0.0.1:9/mcp\"; initialize = \"local\";\n"                             \
    "    policy = \"%s/policy.json\"; } );\n"                                                                      \
    "# %s\n"

/* One test's world. Owner: the test case (edge_new / edge_free). */
struct edge {
    struct hh *h;
    struct mw *m;
    struct tg_server *srv;
};

static inline int edge_ends_with(struct tg_slice p, const char *suffix)
{
    size_t n = strlen(suffix);
    return p.len >= n && memcmp(p.ptr + p.len - n, suffix, n) == 0;
}

static inline void edge_on_request(struct hh *h, struct tg_conn *c)
{
    struct edge *t = h->ud;
    struct tg_slice url = tg_http_req_url(c->req);
    size_t q = 0;
    while (q < url.len && url.ptr[q] != '?')
        q++;
    struct tg_slice path = tg_slice_of(url.ptr, q);
    struct tg_slice query = tg_slice_of(url.ptr + q, url.len - q);
    struct tg_exchange x = {0};
    x.srv = t->srv;
    x.era = TG_ERA_2025;
    x.grant = tg_conf_find_grant(t->srv->conf, "alice");
    x.upstream = path.len > 6 && memcmp(path.ptr, "/side/", 6) == 0 ? 1 : 0;
    x.uc = &t->srv->conf->upstreams[x.upstream];
    int method = c->req->method;
    struct tg_auth_cred cred; /* a channel's, as the router keeps it */
    tg_auth_cred_of(t->srv->conf, TG_SLICE_NULL, 0, x.grant, NULL, NULL, NULL, &cred);
    if (edge_ends_with(path, "/sse") || edge_ends_with(path, "/ws"))
        x.cred = &cred;
    if (edge_ends_with(path, "/mcp") && method == HTTP_POST)
        tg_streamable_post(&x, c);
    else if (edge_ends_with(path, "/mcp") && method == HTTP_GET)
        tg_streamable_get(&x, c);
    else if (edge_ends_with(path, "/mcp") && method == HTTP_DELETE)
        tg_streamable_delete(&x, c);
    else if (edge_ends_with(path, "/sse") && method == HTTP_GET)
        tg_legacy_sse_open(&x, c);
    else if (edge_ends_with(path, "/messages") && method == HTTP_POST)
        tg_legacy_sse_messages(&x, c, query);
    else if (edge_ends_with(path, "/ws") && method == HTTP_GET)
        tg_ws_channel_open(&x, c);
    else
        fail_msg("no transport for %.*s", (int)url.len, url.ptr);
}

static inline struct edge *edge_new(void)
{
    struct edge *t = tg_xcalloc(1, sizeof(*t));
    t->h = hh_new(edge_on_request);
    t->h->ud = t;
    t->m = mw_new_on(FAKE_HTTP, EDGE_CONF, &t->h->loop);
    t->srv = &t->m->srv;
    tg_list_init(&t->srv->listens);
    t->h->hl.lc = &t->srv->conf->listeners[0];
    return t;
}

static inline void edge_free(struct edge *t)
{
    hh_free(t->h); /* closes the connections: their exchanges go first */
    tg_streamable_free_streams(t->srv);
    tg_streamable_dispose();
    tg_channels_dispose();
    tg_cred_watches_dispose(t->srv);
    mw_free(t->m);
    free(t);
}

static inline void edge_on_poll_closed(uv_handle_t *u) { ((struct hh *)u->data)->polling = 0; }

/* Let the client's connection go from the harness (its poll handle closed, so that the next
 * request can have one): returns its socket, still open, for the caller to close. */
static inline int edge_detach(struct edge *t)
{
    struct hh *h = t->h;
    if (h->polling) {
        uv_close((uv_handle_t *)&h->poll, edge_on_poll_closed);
        while (h->polling)
            uv_run(&h->loop, UV_RUN_NOWAIT);
    }
    int fd = h->fd;
    h->fd = -1;
    return fd;
}

/* A request on a new connection (the last one's socket is closed). headers: more complete header lines, or NULL; body: NULL for
 * none. keep: 0 adds "Connection: close" (the answer then ends with EOF). */
static inline void edge_send(struct edge *t, const char *method, const char *target, const char *headers,
                             const char *body, int keep)
{
    int old = edge_detach(t);
    if (old >= 0)
        close(old);
    hh_connect(t->h);
    struct tg_buf r;
    tg_buf_init(&r);
    tg_buf_appendf(&r, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s", method, target, keep ? "" : "Connection: close\r\n",
                   headers ? headers : "");
    if (body != NULL)
        tg_buf_appendf(&r, "Content-Length: %zu\r\n", strlen(body));
    tg_buf_appendf(&r, "\r\n%s", body ? body : "");
    hh_send(t->h, r.base, r.len);
    tg_buf_dispose(&r);
}
#define edge_request(t, method, target, headers, body) edge_send((t), (method), (target), (headers), (body), 0)

/* The whole answer of a "Connection: close" request, NUL-terminated (consumed from h->got by
 * the next call). */
static inline const char *edge_answer(struct edge *t)
{
    HH_RUN_UNTIL(t->h, t->h->eof);
    tg_buf_append(&t->h->got, "", 1);
    t->h->got.len--;
    return t->h->got.base;
}

static inline void edge_clear(struct edge *t) { t->h->got.len = 0; }

/* The answer is exactly this JSON body with this status (and extra header lines), then EOF. */
static inline void edge_expect_json(struct edge *t, int status, const char *extra, const char *json, const char *file,
                                    int line)
{
    struct tg_buf want;
    tg_buf_init(&want);
    tg_buf_appendf(&want,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n%sConnection: close\r\nContent-Length: %zu\r\n\r\n",
                   status, tg_http_status_text(status), extra ? extra : "", strlen(json));
    tg_buf_appends(&want, json);
    hh_expect_bytes(t->h, want.base, want.len, file, line);
    hh_expect_eof(t->h, file, line);
    tg_buf_dispose(&want);
}
#define EDGE_EXPECT_JSON(t, status, extra, json) edge_expect_json((t), (status), (extra), (json), __FILE__, __LINE__)

/* The answer is the JSON-RPC error {id (raw JSON or NULL), code, msg} with this status. */
static inline void edge_expect_rpc(struct edge *t, int status, const char *id, int code, const char *msg,
                                   const char *file, int line)
{
    struct tg_buf body;
    tg_buf_init(&body);
    tg_rpc_error(&body, id, id ? strlen(id) : 0, code, msg, NULL);
    tg_buf_append(&body, "", 1);
    edge_expect_json(t, status, NULL, body.base, file, line);
    tg_buf_dispose(&body);
}
#define EDGE_EXPECT_RPC(t, status, id, code, msg) edge_expect_rpc((t), (status), (id), (code), (msg), __FILE__, __LINE__)

/* A live, initialized session of upstream u speaking proto (as an answered initialize leaves it). */
static inline struct tg_session *edge_session(struct edge *t, int u, const char *proto)
{
    struct tg_session *s = mw_session(t->m, u);
    s->proto = proto; /* a literal */
    return s;
}

#define EDGE_JSON_POST "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"

/* The headers of a POST in session s (a buffer of the caller's). */
static inline const char *edge_in_session(char *buf, size_t n, const struct tg_session *s)
{
    snprintf(buf, n, EDGE_JSON_POST "Mcp-Session-Id: %s\r\n", s->id_str);
    return buf;
}

/* An answer's head and its body with the chunk framing taken off (a streamed answer is
 * chunked; the events inside may share a chunk). Fails on framing that is not chunked. */
static inline void edge_split_chunked(const char *all, struct tg_buf *head, struct tg_buf *body)
{
    const char *e = strstr(all, "\r\n\r\n");
    assert_non_null(e);
    head->len = body->len = 0;
    tg_buf_append(head, all, (size_t)(e + 4 - all));
    tg_buf_append(head, "", 1);
    head->len--;
    const char *p = e + 4;
    for (;;) {
        char *end;
        unsigned long n = strtoul(p, &end, 16);
        if (end == p || end[0] != '\r' || end[1] != '\n')
            fail_msg("not a chunk: \"%.40s\"", p);
        p = end + 2;
        if (n == 0)
            break;
        assert_true(strlen(p) >= n + 2);
        tg_buf_append(body, p, n);
        p += n;
        assert_memory_equal(p, "\r\n", 2);
        p += 2;
    }
    assert_string_equal(p, "\r\n"); /* the last chunk, nothing after */
    tg_buf_append(body, "", 1);
    body->len--;
}

#endif
