/* transports/http1/conn.c and out.c, byte for byte: raw request bytes go in over a real
 * TCP connection (see harness.h), and the exact bytes that come back are checked, with a
 * fake environment whose on_request callback answers by URL:
 *
 *   /hello   200 "hello"               /echo  200, the request body as application/json
 *   /later   held: the test answers    /sse   a chunked stream, held open
 *   /close   the handler closes the connection itself
 *   /wait    held through a struct tg_http_wait (heap, as the admin API's): the test answers
 *   other    200, the URL as the body
 *
 * Each case runs in its own loop and ends with every handle closed and nothing leaked. */
#include "test/unit/transports/harness.h"

#include "core/wire/msg.h"

struct t1 {
    struct tg_conn *held; /* /later, /sse: answered by the test */
    int method;
    char x_test[64];
    /* the fields a decision reads, as the handler saw them ("-" when absent), and the count */
    char auth[64], sid[64], origin[64];
    int nheaders;
    /* /close */
    int aborts, aborts_inside_handler, abort_in_run_pending;
    void *abort_exchange;
    struct tg_http_wait *wait; /* /wait: the answer still to come */
    size_t sse_corked; /* /sse: bytes in the cork once the head and the first event are written */
};

static struct t1 *t1_of(struct hh *h) { return h->ud; }

static void on_abort_record(struct tg_conn *c, void *exchange)
{
    struct hh *h = exchange;
    struct t1 *t = t1_of(h);
    t->aborts++;
    t->abort_in_run_pending = h->in_run_pending;
    t->abort_exchange = exchange;
    assert_null(c->exchange); /* cleared before the call: a late answer cannot find it */
}

static void handler(struct hh *h, struct tg_conn *c)
{
    struct t1 *t = t1_of(h);
    struct tg_slice url = tg_http_req_url(c->req);
    t->method = c->req->method;
    struct tg_slice xt = tg_http_req_header(c->req, "x-test");
    snprintf(t->x_test, sizeof(t->x_test), "%.*s", (int)xt.len, xt.ptr ? xt.ptr : "");
    struct tg_slice v = tg_http_req_header(c->req, "authorization");
    snprintf(t->auth, sizeof(t->auth), "%.*s", v.ptr ? (int)v.len : 1, v.ptr ? v.ptr : "-");
    v = tg_http_req_header(c->req, "mcp-session-id");
    snprintf(t->sid, sizeof(t->sid), "%.*s", v.ptr ? (int)v.len : 1, v.ptr ? v.ptr : "-");
    v = tg_http_req_header(c->req, "origin");
    snprintf(t->origin, sizeof(t->origin), "%.*s", v.ptr ? (int)v.len : 1, v.ptr ? v.ptr : "-");
    t->nheaders = c->req->nheaders;
    if (tg_slice_eq(url, tg_slice_cstr("/hello"))) {
        tg_http_respond(c, 200, NULL, "text/plain", "hello", 5);
    } else if (tg_slice_eq(url, tg_slice_cstr("/echo"))) {
        tg_http_respond(c, 200, NULL, "application/json", c->req->body.base, c->req->body.len);
    } else if (tg_slice_eq(url, tg_slice_cstr("/later"))) {
        t->held = c;
    } else if (tg_slice_eq(url, tg_slice_cstr("/wait"))) {
        t->wait = tg_xcalloc(1, sizeof(*t->wait));
        tg_http_wait_start(t->wait, c);
    } else if (tg_slice_eq(url, tg_slice_cstr("/sse"))) {
        tg_http_stream_begin(c, 200, NULL, "text/event-stream");
        tg_http_stream_write(c, "data: 1\n\n", 9);
        t->sse_corked = c->cork.len;
        t->held = c;
    } else if (tg_slice_eq(url, tg_slice_cstr("/close"))) {
        c->exchange = h;
        c->on_abort = on_abort_record;
        tg_conn_close(c, "the handler gives up");
        t->aborts_inside_handler = t->aborts;
        /* A late answer on a closing connection writes nothing. */
        tg_http_respond(c, 200, NULL, "text/plain", "too late", 8);
        tg_http_stream_write(c, "x", 1);
        t->aborts_inside_handler += t->aborts;
    } else {
        tg_http_respond(c, 200, NULL, "text/plain", url.ptr, url.len);
    }
}

static struct hh *setup(void)
{
    struct hh *h = hh_new(handler);
    h->ud = tg_xcalloc(1, sizeof(struct t1));
    return h;
}

static void teardown(struct hh *h)
{
    void *t = h->ud;
    hh_free(h);
    free(t);
}

/* The JSON-RPC error answer http1 makes itself, with Connection: close. */
static void expect_rpc_error(struct hh *h, int status, const char *msg, const char *file, int line)
{
    struct tg_buf body, want;
    tg_buf_init(&body);
    tg_buf_init(&want);
    tg_rpc_error(&body, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
    tg_buf_appendf(&want, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n",
                   status, tg_http_status_text(status), body.len);
    tg_buf_append(&want, body.base, body.len);
    hh_expect_bytes(h, want.base, want.len, file, line);
    tg_buf_dispose(&body);
    tg_buf_dispose(&want);
    hh_expect_eof(h, file, line);
}
#define EXPECT_RPC_ERROR(h, status, msg) expect_rpc_error((h), (status), (msg), __FILE__, __LINE__)

/* ---- answers -------------------------------------------------------------------------- */

static void get_answered_with_content_length(void **state)
{
    struct hh *h = setup();
    hh_connect(h);
    HH_SEND(h, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
    HH_EXPECT_QUIET(h); /* HTTP/1.1: kept alive, no Connection header */
    assert_int_equal(h->requests, 1);
    assert_int_equal(t1_of(h)->method, HTTP_GET);
    assert_int_equal(h->metrics.http_requests, 1);
    assert_int_equal(h->metrics.http_status[2], 1);
    assert_int_equal(h->metrics.conns_accepted, 1);
    teardown(h);
}

static void post_body_in_pieces_echoed(void **state)
{
    struct hh *h = setup();
    hh_connect(h);
    /* Split mid-header and mid-body: llhttp's data callbacks arrive in fragments. */
    HH_SEND(h, "POST /echo HTTP/1.1\r\nHost: x\r\nX-Te");
    hh_spin(h, 3);
    HH_SEND(h, "st: yes  \r\nContent-Length: 13\r\n\r\n{\"json");
    hh_spin(h, 3);
    assert_int_equal(h->requests, 0);
    HH_SEND(h, "rpc\":1}");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"jsonrpc\":1}");
    assert_int_equal(t1_of(h)->method, HTTP_POST);
    assert_string_equal(t1_of(h)->x_test, "yes"); /* trailing blanks are not part of the value */
    /* A chunked body on the same connection. */
    HH_SEND(h, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\nhello world");
    HH_EXPECT_QUIET(h);
    assert_int_equal(h->accepted, 1);
    teardown(h);
}

static void keepalive_pipelined_answered_in_order(void **state)
{
    struct hh *h = setup();
    hh_connect(h);
    /* Two requests in one segment; the first is answered late. The second must wait,
     * unparsed, and its answer must follow the first's. */
    HH_SEND(h, "GET /later HTTP/1.1\r\nHost: x\r\n\r\nGET /second HTTP/1.1\r\nHost: x\r\n\r\n");
    hh_spin(h, 10);
    assert_int_equal(h->requests, 1);
    HH_EXPECT_QUIET(h);
    assert_non_null(t1_of(h)->held);
    tg_http_respond(t1_of(h)->held, 200, NULL, "text/plain", "first", 5);
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nfirst"
                 "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\n/second");
    assert_int_equal(h->requests, 2);
    /* Three at once, all answered at once, in order. */
    HH_SEND(h, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /bb HTTP/1.1\r\nHost: x\r\n\r\nGET /ccc HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n/a"
                 "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\n/bb"
                 "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\n/ccc");
    HH_EXPECT_QUIET(h);
    assert_int_equal(h->accepted, 1);
    assert_int_equal(h->requests, 5);
    /* HTTP/1.0 asks for keep-alive and is told it holds. */
    HH_SEND(h, "GET /ten HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\n/ten");
    HH_EXPECT_QUIET(h);
    teardown(h);
}

/* ---- streams -------------------------------------------------------------------------- */

static void sse_stream_chunked_framing(void **state)
{
    struct hh *h = setup();
    hh_connect(h);
    HH_SEND(h, "GET /sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n");
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                               "Transfer-Encoding: chunked\r\n\r\n";
    static const char first[] = "9\r\ndata: 1\n\n\r\n";
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n"
                 "9\r\ndata: 1\n\n\r\n");
    /* The head waited in the cork with the first event: one write(2) for both, at the end of
     * the iteration, not one for the head and one for the burst behind it. */
    assert_int_equal(t1_of(h)->sse_corked, sizeof head - 1 + sizeof first - 1);
    struct tg_conn *c = t1_of(h)->held;
    assert_non_null(c);
    assert_int_equal(c->phase, TG_CONN_STREAMING);
    /* A request pipelined behind the stream waits for its end. */
    HH_SEND(h, "GET /queued HTTP/1.1\r\nHost: x\r\n\r\n");
    hh_spin(h, 5);
    assert_int_equal(h->requests, 1);
    /* Two events in one iteration: one chunk each (gathered in the cork, written once). */
    tg_http_stream_write(c, "data: 22\n\n", 10);
    tg_http_stream_write(c, "data: 333\n\n", 11);
    tg_http_stream_write(c, "", 0); /* nothing: no empty chunk, which would end the body */
    HH_EXPECT(h, "a\r\ndata: 22\n\n\r\nb\r\ndata: 333\n\n\r\n");
    /* Joined writes in one iteration share a chunk, its size (leading zeros) filled in once
     * known; a plain write after them gets its own, and so does the next joined one. */
    tg_http_stream_write_joined(c, "data: 22\n\n", 10);
    tg_http_stream_write_joined(c, "", 0);
    tg_http_stream_write_joined(c, "data: 333\n\n", 11);
    tg_http_stream_write(c, "data: 4\n\n", 9);
    tg_http_stream_write_joined(c, "data: 5\n\n", 9);
    HH_EXPECT(h, "000015\r\ndata: 22\n\ndata: 333\n\n\r\n9\r\ndata: 4\n\n\r\n000009\r\ndata: 5\n\n\r\n");
    /* the next iteration's are the next chunk; the end closes an open one first */
    tg_http_stream_write_joined(c, "data: 6\n\n", 9);
    tg_http_stream_end(c);
    HH_EXPECT(h, "000009\r\ndata: 6\n\n\r\n0\r\n\r\n"
                 "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 7\r\n\r\n/queued");
    HH_EXPECT_QUIET(h);
    assert_int_equal(h->accepted, 1);
    teardown(h);
}

/* A stream's cork starts with room for what its last one held, so a burst like the last is
 * gathered with no realloc; a smaller burst after it sizes the next one down again. The bytes
 * are the same either way. */
static void cork_sized_from_the_last_burst(void **state)
{
    struct hh *h = setup();
    hh_connect(h);
    HH_SEND(h, "GET /sse HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n"
                 "9\r\ndata: 1\n\n\r\n");
    struct tg_conn *c = t1_of(h)->held;
    assert_non_null(c);
    char ev[100];
    memset(ev, 'x', sizeof ev);
    memcpy(ev, "data: ", 6);
    memcpy(ev + sizeof ev - 2, "\n\n", 2);
    struct tg_buf want;
    tg_buf_init(&want);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 300; i++) {
            tg_http_stream_write_joined(c, ev, sizeof ev);
            if (i == 0 && round == 1)
                assert_true(c->cork.cap >= 300 * sizeof ev); /* the room of the last burst */
        }
        want.len = 0;
        tg_buf_appends(&want, "007530\r\n"); /* 30,000 bytes in one chunk */
        for (int i = 0; i < 300; i++)
            tg_buf_append(&want, ev, sizeof ev);
        tg_buf_appends(&want, "\r\n");
        HH_EXPECT_N(h, want.base, want.len);
        assert_int_equal(c->cork_last, 30000 + 8 + 2);
    }
    /* one event: the cork after it is sized for one again */
    tg_http_stream_write_joined(c, ev, sizeof ev);
    assert_true(c->cork.cap >= 30010);
    want.len = 0;
    tg_buf_appends(&want, "000064\r\n");
    tg_buf_append(&want, ev, sizeof ev);
    tg_buf_appends(&want, "\r\n");
    HH_EXPECT_N(h, want.base, want.len);
    assert_int_equal(c->cork_last, 100 + 8 + 2);
    tg_http_stream_write_joined(c, ev, sizeof ev);
    assert_true(c->cork.cap < 4096);
    tg_http_stream_end(c);
    tg_buf_dispose(&want);
    teardown(h);
}

static void sse_stream_http10_ends_with_the_connection(void **state)
{
    struct hh *h = setup();
    hh_connect(h);
    HH_SEND(h, "GET /sse HTTP/1.0\r\n\r\n");
    /* No chunked encoding in HTTP/1.0: raw event bytes, and the close ends the body. */
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\nCache-Control: no-cache\r\n\r\n"
                 "data: 1\n\n");
    tg_http_stream_write(t1_of(h)->held, "data: 2\n\n", 9);
    tg_http_stream_end(t1_of(h)->held);
    HH_EXPECT(h, "data: 2\n\n");
    HH_EXPECT_EOF(h);
    teardown(h);
}

/* ---- refusals ------------------------------------------------------------------------- */

static void malformed_request_400(void **state)
{
    static const char *bad[] = {
        "GET / HTTP/1.1\r\nHost x\r\n\r\n",                                  /* header without a colon */
        "G@T / HTTP/1.1\r\nHost: x\r\n\r\n",                                 /* not a method */
        "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",  /* two lengths */
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", /* not a chunk size */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct hh *h = setup();
        hh_connect(h);
        hh_send(h, bad[i], strlen(bad[i]));
        if (i == 0) /* once in full, by hand */
            HH_EXPECT(h, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nConnection: close\r\n"
                         "Content-Length: 91\r\n\r\n"
                         "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Bad Request: malformed HTTP\"}}");
        else
            EXPECT_RPC_ERROR(h, 400, "Bad Request: malformed HTTP");
        HH_EXPECT_EOF(h);
        assert_int_equal(h->requests, 0);
        assert_int_equal(h->metrics.http_status[4], 1);
        teardown(h);
    }
}

static void body_over_limit_413(void **state)
{
    /* Announced: refused from the head, before any body byte is read. */
    struct hh *h = setup();
    h->limits.body_bytes = 64;
    hh_connect(h);
    HH_SEND(h, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 65\r\n\r\n");
    EXPECT_RPC_ERROR(h, 413, "Content too large");
    assert_int_equal(h->requests, 0);
    assert_int_equal(h->metrics.limit_body_bytes, 1);
    teardown(h);

    /* Chunked: refused once the bytes pass the limit. */
    h = setup();
    h->limits.body_bytes = 64;
    hh_connect(h);
    HH_SEND(h, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               "28\r\n0123456789012345678901234567890123456789\r\n"
               "28\r\n0123456789012345678901234567890123456789\r\n0\r\n\r\n");
    EXPECT_RPC_ERROR(h, 413, "Content too large");
    assert_int_equal(h->requests, 0);
    assert_int_equal(h->metrics.limit_body_bytes, 1);
    teardown(h);

    /* At the limit exactly: accepted. */
    h = setup();
    h->limits.body_bytes = 5;
    hh_connect(h);
    HH_SEND(h, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello");
    teardown(h);
}

/* A chunked body's trailer fields are read and dropped (RFC 9110 §6.5.1): Authorization,
 * Mcp-Session-Id and Origin sent after the body are no request headers, so no authentication,
 * session or origin check can read them; a header the head did send is not replaced. The trailer
 * section shares limits.header_bytes with the head: over it, 431. */
static void chunked_trailers_never_headers(void **state)
{
    struct hh *h = setup();
    hh_connect(h);
    HH_SEND(h, "POST /echo HTTP/1.1\r\nHost: x\r\nX-Test: head\r\nTransfer-Encoding: chunked\r\n\r\n"
               "5\r\nhello\r\n0\r\n"
               "Authorization: Bearer trailer-token\r\nMcp-Session-Id: trailer-session\r\n"
               "Origin: http://evil.example\r\nX-Test: trailer\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello");
    struct t1 *t = t1_of(h);
    assert_string_equal(t->auth, "-");
    assert_string_equal(t->sid, "-");
    assert_string_equal(t->origin, "-");
    assert_string_equal(t->x_test, "head");
    assert_int_equal(t->nheaders, 3);
    /* The next request on the connection starts with a head of its own, trailers forgotten. */
    HH_SEND(h, "GET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer head\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
    assert_string_equal(t->auth, "Bearer head");
    assert_string_equal(t->sid, "-");
    HH_EXPECT_QUIET(h);
    teardown(h);

    /* More trailer fields than a head may hold headers: still only dropped bytes, no 431 for the count. */
    h = setup();
    hh_connect(h);
    struct tg_buf req;
    tg_buf_init(&req);
    tg_buf_appends(&req, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n");
    for (int i = 0; i <= TG_HTTP_MAX_HEADERS; i++)
        tg_buf_appendf(&req, "X-T%d: v\r\n", i);
    tg_buf_appends(&req, "\r\n");
    hh_send(h, req.base, req.len);
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\nok");
    assert_int_equal(t1_of(h)->nheaders, 2);
    teardown(h);

    /* Head and trailers over header_bytes together: refused, the handler never sees it. */
    h = setup();
    h->limits.header_bytes = 256;
    hh_connect(h);
    req.len = 0;
    tg_buf_appends(&req, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\nX-Big: ");
    for (int i = 0; i < 250; i++)
        tg_buf_appends(&req, "a");
    tg_buf_appends(&req, "\r\n\r\n");
    hh_send(h, req.base, req.len);
    EXPECT_RPC_ERROR(h, 431, "Request header fields too large");
    assert_int_equal(h->requests, 0);
    assert_int_equal(h->metrics.limit_header_bytes, 1);
    teardown(h);
    tg_buf_dispose(&req);
}

/* Trailer fields that would frame, route or end the connection (Content-Length, Host,
 * Connection, Upgrade) or fold onto a second line change nothing: the body is the one the chunks
 * framed, the connection stays as the head asked, the next request starts at the byte after the
 * trailer section, whether the bytes came at once or one at a time, and its head is its own. A
 * Transfer-Encoding trailer is malformed (llhttp): 400, and nothing reaches the handler. */
static void framing_trailers_change_nothing(void **state)
{
    static const char *const trailers[] = {
        "Transfer-Encoding: chunked\r\n", "Content-Length: 40\r\n", "Host: evil.example\r\n", "Connection: close\r\n",
        "Connection: upgrade\r\nUpgrade: websocket\r\n", "X-Fold: a\r\n folded: b\r\n",
    };
    for (size_t i = 0; i < sizeof(trailers) / sizeof(trailers[0]); i++) {
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            struct hh *h = setup();
            hh_connect(h);
            struct tg_buf req;
            tg_buf_init(&req);
            tg_buf_appends(&req, "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n");
            tg_buf_appends(&req, trailers[i]);
            tg_buf_appends(&req, "\r\nGET /hello HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer next\r\n\r\n");
            for (size_t k = 0; k < req.len && !h->eof; k += bytewise ? 1 : req.len) {
                if (send(h->fd, req.base + k, bytewise ? 1 : req.len, MSG_NOSIGNAL) <= 0)
                    break; /* closed after the 400 */
                hh_spin(h, 1);
            }
            tg_buf_dispose(&req);
            if (i == 0) {
                EXPECT_RPC_ERROR(h, 400, "Bad Request: malformed HTTP");
                assert_int_equal(h->requests, 0);
                teardown(h);
                continue;
            }
            HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello");
            HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
            struct t1 *t = t1_of(h);
            assert_string_equal(t->auth, "Bearer next");
            assert_int_equal(t->nheaders, 2);
            assert_int_equal(h->requests, 2);
            HH_EXPECT_QUIET(h);
            teardown(h);
        }
    }
}

static void headers_over_limit_431(void **state)
{
    /* One header more than TG_HTTP_MAX_HEADERS. */
    struct hh *h = setup();
    hh_connect(h);
    struct tg_buf req;
    tg_buf_init(&req);
    tg_buf_appends(&req, "GET /hello HTTP/1.1\r\n");
    for (int i = 0; i <= TG_HTTP_MAX_HEADERS; i++)
        tg_buf_appendf(&req, "X-H%d: v\r\n", i);
    tg_buf_appends(&req, "\r\n");
    hh_send(h, req.base, req.len);
    EXPECT_RPC_ERROR(h, 431, "Request header fields too large");
    assert_int_equal(h->requests, 0);
    teardown(h);

    /* Exactly TG_HTTP_MAX_HEADERS: accepted. */
    h = setup();
    hh_connect(h);
    req.len = 0;
    tg_buf_appends(&req, "GET /hello HTTP/1.1\r\n");
    for (int i = 0; i < TG_HTTP_MAX_HEADERS; i++)
        tg_buf_appendf(&req, "X-H%d: v\r\n", i);
    tg_buf_appends(&req, "\r\n");
    hh_send(h, req.base, req.len);
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
    teardown(h);

    /* Header bytes over header_bytes. */
    h = setup();
    h->limits.header_bytes = 256;
    hh_connect(h);
    req.len = 0;
    tg_buf_appends(&req, "GET /hello HTTP/1.1\r\nHost: x\r\nX-Big: ");
    for (int i = 0; i < 300; i++)
        tg_buf_appends(&req, "a");
    tg_buf_appends(&req, "\r\n\r\n");
    hh_send(h, req.base, req.len);
    EXPECT_RPC_ERROR(h, 431, "Request header fields too large");
    assert_int_equal(h->metrics.limit_header_bytes, 1);
    teardown(h);

    /* The URL is in the same budget: 414. */
    h = setup();
    h->limits.header_bytes = 64;
    hh_connect(h);
    req.len = 0;
    tg_buf_appends(&req, "GET /");
    for (int i = 0; i < 100; i++)
        tg_buf_appends(&req, "u");
    tg_buf_appends(&req, " HTTP/1.1\r\n\r\n");
    hh_send(h, req.base, req.len);
    EXPECT_RPC_ERROR(h, 414, "URI too long");
    teardown(h);
    tg_buf_dispose(&req);
}

static void header_timeout_408(void **state)
{
    struct hh *h = setup();
    h->limits.header_timeout_ms = 50;
    hh_connect(h);
    HH_SEND(h, "GET /hello HTTP/1.1\r\nHo"); /* and nothing more */
    EXPECT_RPC_ERROR(h, 408, "Request timeout");
    assert_int_equal(h->requests, 0);
    teardown(h);
}

/* The deadlines are kept on one list per duration, in order within each: a connection armed
 * after a reload cut header_timeout_ms is on a list of its own, and its deadline, earlier than
 * those armed before with the old one, fires first and on time while theirs stand. (One list in
 * the order of arming would keep it waiting behind them: 20 s, past the harness's watchdog.) */
static void a_shorter_deadline_armed_later_fires_first(void **state)
{
    (void)state;
    struct hh *h = setup();
    h->limits.header_timeout_ms = 20000;
    hh_connect(h);
    HH_SEND(h, "GET /a HTTP/1.1\r\nHo"); /* a head that stays unfinished */
    HH_RUN_UNTIL(h, h->conn->phase == TG_CONN_READING);
    struct tg_conn *first = h->conn;
    h->limits.header_timeout_ms = 50; /* as a reload would */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", h->port, &a);
    assert_int_equal(connect(fd, (const struct sockaddr *)&a, sizeof(a)), 0);
    HH_RUN_UNTIL(h, h->accepted == 2);
    assert_int_equal(send(fd, "GET /b HTTP/1.1\r\nHo", 19, MSG_NOSIGNAL), 19);
    HH_RUN_UNTIL(h, h->gone == 1); /* the second: 408, then closed */
    assert_int_equal(first->phase, TG_CONN_READING);
    HH_EXPECT_QUIET(h);
    close(fd);
    teardown(h);
}

static void on_waited(uv_timer_t *t) { *(int *)t->data = 1; }

/* Runs the harness loop for ms (the server's timers with it). */
static void wait_ms(struct hh *h, uint64_t ms)
{
    uv_timer_t t;
    int done = 0;
    uv_timer_init(&h->loop, &t);
    t.data = &done;
    uv_timer_start(&t, on_waited, ms, 0);
    HH_RUN_UNTIL(h, done);
    uv_close((uv_handle_t *)&t, NULL);
    hh_spin(h, 1);
}

static uint64_t now_ms(struct hh *h)
{
    uv_update_time(&h->loop);
    return uv_now(&h->loop);
}

/* A connection with these timeouts that has had one request answered. */
static struct hh *answered_once(int header_ms, int idle_ms)
{
    struct hh *h = setup();
    h->limits.header_timeout_ms = header_ms;
    h->limits.idle_timeout_ms = idle_ms;
    hh_connect(h);
    HH_SEND(h, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n/a");
    return h;
}

/* A connection's deadline moves between the env's lists as its state changes (transports/http1/
 * timer.c, tg__http_arm()), and the env's one timer may fire for a deadline since moved. Each
 * timeout still counts from the start of its own state, and nothing is due while a request is
 * answered. The bounds are lower bounds: a slow machine only makes the waits longer. */
static void timeouts_count_from_their_state(void **state)
{
    /* Idle after an answer: closed no sooner than idle_timeout_ms after it (the timer, set for
     * the request's head first, fires early and sets itself again). */
    struct hh *h = answered_once(50, 250);
    uint64_t t0 = now_ms(h);
    HH_EXPECT_EOF(h);
    uint64_t idle = now_ms(h) - t0;
    if (idle < 200)
        fail_msg("closed %llu ms after the answer, idle_timeout_ms 250", (unsigned long long)idle);
    teardown(h);

    /* A second request's head, begun 40 ms after the first: 408 no sooner than
     * header_timeout_ms after it began, not when the first one's would have fallen. */
    h = answered_once(80, 1000);
    wait_ms(h, 40);
    uint64_t t1 = now_ms(h);
    HH_SEND(h, "GET /b HTTP/1.1\r\nHo");
    EXPECT_RPC_ERROR(h, 408, "Request timeout");
    uint64_t head = now_ms(h) - t1;
    if (head < 80)
        fail_msg("408 %llu ms after the head began, header_timeout_ms 80", (unsigned long long)head);
    teardown(h);

    /* A request held past both timeouts is answered, and the connection stays. */
    h = setup();
    h->limits.header_timeout_ms = 30;
    h->limits.idle_timeout_ms = 60;
    hh_connect(h);
    HH_SEND(h, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_RUN_UNTIL(h, t1_of(h)->held != NULL);
    wait_ms(h, 150);
    HH_EXPECT_QUIET(h);
    tg_http_respond(t1_of(h)->held, 200, NULL, "text/plain", "late", 4);
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\nlate");
    HH_SEND(h, "GET /c HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n/c");
    teardown(h);
}

/* ---- closing -------------------------------------------------------------------------- */

static void connection_close_honoured(void **state)
{
    struct hh *h = setup();
    hh_connect(h);
    /* The request pipelined after "Connection: close" is never read. */
    HH_SEND(h, "GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 2\r\n\r\n/a");
    HH_EXPECT_EOF(h);
    assert_int_equal(h->requests, 1);
    teardown(h);

    /* HTTP/1.0 without keep-alive closes by default. */
    h = setup();
    hh_connect(h);
    HH_SEND(h, "GET /a HTTP/1.0\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 2\r\n\r\n/a");
    HH_EXPECT_EOF(h);
    teardown(h);

    /* Draining (the env's flag): an answer closes its connection. */
    h = setup();
    hh_connect(h);
    h->draining = 1;
    HH_SEND(h, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 2\r\n\r\n/a");
    HH_EXPECT_EOF(h);
    teardown(h);
}

static void close_in_handler_is_deferred(void **state)
{
    struct hh *h = setup();
    struct t1 *t = t1_of(h);
    hh_connect(h);
    HH_SEND(h, "GET /close HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_RUN_UNTIL(h, h->requests == 1);
    /* Neither the close nor the calls after it ran on_abort under the handler. */
    assert_int_equal(t->aborts_inside_handler, 0);
    HH_RUN_UNTIL(h, t->aborts == 1);
    assert_int_equal(t->abort_in_run_pending, 1);
    assert_ptr_equal(t->abort_exchange, h);
    HH_EXPECT_EOF(h); /* and nothing was written */
    HH_RUN_UNTIL(h, h->gone == 1);
    assert_int_equal(t->aborts, 1);
    assert_int_equal(h->env.nconns, 0);
    teardown(h);
}

static void peer_close_aborts_held_request(void **state)
{
    /* The client leaves while its request is held: on_abort once, from the loop. */
    struct hh *h = setup();
    struct t1 *t = t1_of(h);
    hh_connect(h);
    HH_SEND(h, "GET /later HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_RUN_UNTIL(h, t->held != NULL);
    t->held->exchange = h;
    t->held->on_abort = on_abort_record;
    shutdown(h->fd, SHUT_WR);
    HH_RUN_UNTIL(h, t->aborts == 1);
    assert_int_equal(t->abort_in_run_pending, 1);
    HH_RUN_UNTIL(h, h->gone == 1);
    assert_int_equal(t->aborts, 1);
    teardown(h);
}

static void wait_answered_on_its_connection(void **state)
{
    /* The answer comes while the client is there: the wait gives the connection back, no longer
     * held, and the answer goes out on it; the connection serves the next request. */
    struct hh *h = setup();
    struct t1 *t = t1_of(h);
    hh_connect(h);
    HH_SEND(h, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_RUN_UNTIL(h, t->wait != NULL);
    hh_spin(h, 5);
    HH_EXPECT_QUIET(h);
    struct tg_conn *c = tg_http_wait_stop(t->wait);
    assert_non_null(c);
    assert_null(c->exchange);
    assert_null(c->on_abort);
    free(t->wait);
    t->wait = NULL;
    tg_http_respond(c, 200, NULL, "text/plain", "later", 5);
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nlater");
    HH_SEND(h, "GET /hello HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_EXPECT(h, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello");
    teardown(h);
}

static void wait_outlives_its_connection(void **state)
{
    /* The client goes first: the connection is freed, the wait stays with its owner and, when
     * the answer comes, says there is no one to answer (reading freed memory here is ASan's to
     * catch). */
    struct hh *h = setup();
    struct t1 *t = t1_of(h);
    hh_connect(h);
    HH_SEND(h, "GET /wait HTTP/1.1\r\nHost: x\r\n\r\n");
    HH_RUN_UNTIL(h, t->wait != NULL);
    shutdown(h->fd, SHUT_WR);
    HH_RUN_UNTIL(h, h->gone == 1);
    assert_int_equal(h->env.nconns, 0);
    assert_null(tg_http_wait_stop(t->wait));
    assert_null(tg_http_wait_stop(t->wait)); /* still nothing: the wait keeps no stale pointer */
    free(t->wait);
    t->wait = NULL;
    teardown(h);
}

int main(int argc, char **argv)
{
    tg_log_setup(TG_LOG_WARN, TG_LOG_LOGFMT, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(get_answered_with_content_length),
        cmocka_unit_test(post_body_in_pieces_echoed),
        cmocka_unit_test(keepalive_pipelined_answered_in_order),
        cmocka_unit_test(sse_stream_chunked_framing),
        cmocka_unit_test(cork_sized_from_the_last_burst),
        cmocka_unit_test(sse_stream_http10_ends_with_the_connection),
        cmocka_unit_test(malformed_request_400),
        cmocka_unit_test(body_over_limit_413),
        cmocka_unit_test(chunked_trailers_never_headers),
        cmocka_unit_test(framing_trailers_change_nothing),
        cmocka_unit_test(headers_over_limit_431),
        cmocka_unit_test(header_timeout_408),
        cmocka_unit_test(timeouts_count_from_their_state),
        cmocka_unit_test(a_shorter_deadline_armed_later_fires_first),
        cmocka_unit_test(connection_close_honoured),
        cmocka_unit_test(close_in_handler_is_deferred),
        cmocka_unit_test(peer_close_aborts_held_request),
        cmocka_unit_test(wait_answered_on_its_connection),
        cmocka_unit_test(wait_outlives_its_connection),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
