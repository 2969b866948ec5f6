/* transports/streamable.c and respond.c: Streamable HTTP (/mcp) driven with hand-made requests
 * over a real connection (test/unit/transports/edge.h), the upstream a fake kind the test
 * answers. The checks a POST goes through in their order (Content-Type, Accept, the body, the
 * protocol version header, the session), the answer as JSON, as a bare 202 or as an SSE stream
 * (event ids, the 2025-11-25 priming event, chunk framing), batches (2025-03-26 only, their
 * limits and the error objects of refused elements), GET (its stream, one per session,
 * Last-Event-ID) and DELETE. */
#include "test/unit/transports/edge.h"

#define CALL(id, tool)                                                                                             \
    "{\"jsonrpc\":\"2.0\",\"id\":" id ",\"method\":\"tools/call\",\"params\":{\"name\":\"" tool "\","            \
    "\"arguments\":{\"x\":1}}}"
#define INITIALIZED "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}"
#define INIT(version)                                                                                              \
    "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"" version "\","   \
    "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"
#define NEED_SESSION "Bad Request: Mcp-Session-Id header is required"
#define NO_SHAPE "Invalid Request: a message needs \"method\", or exactly one of \"result\" and \"error\""

/* ---- the order of the checks ------------------------------------------------------------ */

/* Content-Type first: exactly one, listing application/json (parameters allowed). */
static void post_content_type(void **state)
{
    static const char *const bad[] = {
        "Accept: application/json, text/event-stream\r\n",
        "Content-Type: text/plain\r\nAccept: application/json, text/event-stream\r\n",
        "Content-Type: application/jsonx\r\nAccept: application/json, text/event-stream\r\n",
        "Content-Type: application/json\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n",
    };
    struct edge *t = edge_new();
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        edge_request(t, "POST", "/mcp", bad[i], "{}");
        EDGE_EXPECT_RPC(t, 415, NULL, TG_RPC_INVALID_REQUEST,
                        "Unsupported Media Type: Content-Type must be application/json");
    }
    /* With a charset it passes on to the next check (no session: 400). */
    edge_request(t, "POST", "/mcp",
                 "Content-Type: application/json; charset=utf-8\r\nAccept: application/json, text/event-stream\r\n",
                 INITIALIZED);
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST, NEED_SESSION);
    edge_free(t);
}

/* Then Accept: both application/json and text/event-stream, by name or by wildcard. */
static void post_accept(void **state)
{
    static const struct {
        const char *accept; /* NULL: none */
        int ok;
    } cases[] = {
        {NULL, 0},
        {"", 0},
        {"application/json", 0},
        {"text/event-stream", 0},
        {"application/jsonx, text/event-stream", 0},
        {"text/html, application/xml", 0},
        {"application/json, text/event-stream", 1},
        {"text/event-stream, application/json", 1},
        {"*/*", 1},
        {"application/*, text/*", 1},
        {"Application/JSON;q=0.9 , TEXT/EVENT-STREAM;q=0.5", 1},
        {"text/html,application/json,text/event-stream", 1},
    };
    struct edge *t = edge_new();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char hdr[256];
        snprintf(hdr, sizeof(hdr), "Content-Type: application/json\r\n%s%s%s", cases[i].accept ? "Accept: " : "",
                 cases[i].accept ? cases[i].accept : "", cases[i].accept ? "\r\n" : "");
        edge_request(t, "POST", "/mcp", hdr, INITIALIZED);
        const char *a = edge_answer(t);
        int got406 = strncmp(a, "HTTP/1.1 406 ", 13) == 0;
        int got400 = strncmp(a, "HTTP/1.1 400 ", 13) == 0 && strstr(a, NEED_SESSION) != NULL;
        if (cases[i].ok ? !got400 : !got406)
            fail_msg("Accept %s: expected %s, got:\n%s", cases[i].accept ? cases[i].accept : "(none)",
                     cases[i].ok ? "to pass" : "406", a);
        if (!cases[i].ok)
            EDGE_EXPECT_RPC(t, 406, NULL, TG_RPC_INVALID_REQUEST,
                            "Not Acceptable: Accept must list application/json and text/event-stream");
        edge_clear(t);
    }
    edge_free(t);
}

/* Then the body: JSON-RPC errors with the id when there is one; nothing reaches the upstream. */
static void post_body(void **state)
{
    static const struct {
        const char *body;
        const char *id;
        int code;
        const char *msg;
    } cases[] = {
        {"", NULL, TG_RPC_PARSE_ERROR, "Parse error: unexpected end of input"},
        {"{", NULL, TG_RPC_PARSE_ERROR, "Parse error: expected object key"},
        {"  \r\n\t", NULL, TG_RPC_PARSE_ERROR, "Parse error: unexpected end of input"},
        {"\"x\"", NULL, TG_RPC_INVALID_REQUEST, "Invalid Request: a JSON-RPC message must be an object"},
        {"{\"jsonrpc\":\"2.0\",\"id\":7}", "7", TG_RPC_INVALID_REQUEST, NO_SHAPE},
        {"{\"jsonrpc\":\"1.0\",\"id\":\"a\",\"method\":\"ping\"}", "\"a\"", TG_RPC_INVALID_REQUEST,
         "Invalid Request: \"jsonrpc\" must be \"2.0\""},
        {"{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"ping\"}", NULL, TG_RPC_INVALID_REQUEST,
         "Invalid Request: \"id\" must be a string or a number"},
    };
    struct edge *t = edge_new();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t before = t->srv->metrics.limit_json;
        edge_request(t, "POST", "/mcp", EDGE_JSON_POST, cases[i].body);
        EDGE_EXPECT_RPC(t, 400, cases[i].id, cases[i].code, cases[i].msg);
        assert_int_equal(t->srv->metrics.limit_json, before + 1);
    }
    assert_int_equal(fake.nsend, 0);
    edge_free(t);
}

/* Then MCP-Protocol-Version, then the session: which one, and whose. */
static void post_session_checks(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = edge_session(t, 0, "2025-06-18");
    char hdr[256];
    edge_request(t, "POST", "/mcp", EDGE_JSON_POST "MCP-Protocol-Version: 2099-01-01\r\n", CALL("3", "echo"));
    EDGE_EXPECT_RPC(t, 400, "3", TG_RPC_INVALID_REQUEST, "Bad Request: unsupported MCP-Protocol-Version");
    edge_request(t, "POST", "/mcp", EDGE_JSON_POST, CALL("3", "echo"));
    EDGE_EXPECT_RPC(t, 400, "3", TG_RPC_INVALID_REQUEST, NEED_SESSION);
    edge_request(t, "POST", "/mcp", EDGE_JSON_POST "Mcp-Session-Id: nosuchsession\r\n", CALL("3", "echo"));
    EDGE_EXPECT_RPC(t, 404, "3", TG_RPC_INVALID_REQUEST, "Session not found");
    /* A session of main is not found at side's endpoint. */
    edge_request(t, "POST", "/side/mcp", edge_in_session(hdr, sizeof(hdr), s), CALL("3", "echo"));
    EDGE_EXPECT_RPC(t, 404, "3", TG_RPC_INVALID_REQUEST, "Session not found");
    /* initialize opens a session: it must not name one. */
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), s), INIT("2025-06-18"));
    EDGE_EXPECT_RPC(t, 400, "1", TG_RPC_INVALID_REQUEST, "Bad Request: initialize must not carry Mcp-Session-Id");
    assert_int_equal(fake.nsend, 0);
    assert_int_equal(tg_session_table_count(t->srv->sessions), 1);
    /* A draining gateway opens none. */
    t->srv->draining = 1;
    edge_request(t, "POST", "/mcp", EDGE_JSON_POST, INIT("2025-06-18"));
    EDGE_EXPECT_RPC(t, 503, "1", TG_RPC_UPSTREAM, "gateway is shutting down");
    t->srv->draining = 0;
    assert_int_equal(tg_session_table_count(t->srv->sessions), 1);
    edge_free(t);
}

/* ---- answers ---------------------------------------------------------------------------- */

/* A forwarded initialize: 200 with the new session's id; a local one (side) answers at once. */
static void post_initialize(void **state)
{
    struct edge *t = edge_new();
    t->srv->next_gid = 40;
    edge_request(t, "POST", "/mcp", EDGE_JSON_POST, INIT("2025-06-18"));
    HH_RUN_UNTIL(t->h, fake.nsend == 1);
    assert_non_null(strstr(fake.last_body.base, "\"id\":41,\"method\":\"initialize\""));
    struct tg_session *s = fake.last->sess;
    char extra[80];
    snprintf(extra, sizeof(extra), "Mcp-Session-Id: %s\r\n", s->id_str);
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":41,\"result\":{\"protocolVersion\":\"2025-06-18\"}}");
    EDGE_EXPECT_JSON(t, 200, extra, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-06-18\"}}");
    assert_int_equal(s->initialized, 1);

    /* An initialize the upstream fails leaves no session (and no Mcp-Session-Id). */
    edge_request(t, "POST", "/mcp", EDGE_JSON_POST, INIT("2025-06-18"));
    HH_RUN_UNTIL(t->h, fake.nsend == 2);
    assert_int_equal(tg_session_table_count(t->srv->sessions), 2);
    fake_fail(fake.last, TG_OUT_UNAVAILABLE, "upstream main is down (test)");
    EDGE_EXPECT_JSON(t, 200, NULL,
                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32004,\"message\":"
                     "\"upstream main is down (test)\",\"data\":{\"upstream\":\"main\"}}}");
    assert_int_equal(tg_session_table_count(t->srv->sessions), 1);

    edge_request(t, "POST", "/side/mcp", EDGE_JSON_POST, INIT("2025-03-26"));
    const char *a = edge_answer(t);
    assert_int_equal(fake.nsend, 2);
    assert_non_null(strstr(a, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: "));
    assert_non_null(strstr(a, "\"protocolVersion\":\"2025-03-26\""));
    assert_int_equal(tg_session_table_count(t->srv->sessions), 2);
    edge_free(t);
}

/* A request answered as JSON: the client's id back; a notification: 202 with no body. */
static void post_json_and_202(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = edge_session(t, 0, "2025-06-18");
    char hdr[256];
    t->srv->next_gid = 9;
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), s), CALL("\"abc\"", "echo"));
    HH_RUN_UNTIL(t->h, fake.nsend == 1);
    assert_string_equal(fake.last_body.base, CALL("10", "echo"));
    hh_spin(t->h, 5);
    assert_int_equal(t->h->got.len, 0); /* waits for the upstream */
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":10,\"result\":{\"content\":[]}}");
    EDGE_EXPECT_JSON(t, 200, NULL, "{\"jsonrpc\":\"2.0\",\"id\":\"abc\",\"result\":{\"content\":[]}}");

    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), s), INITIALIZED);
    HH_RUN_UNTIL(t->h, fake.nsend == 2);
    fake_accepted(fake.last);
    HH_EXPECT(t->h, "HTTP/1.1 202 Accepted\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    HH_EXPECT_EOF(t->h);

    /* A denied tool is answered by the gateway: nothing goes up. */
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), s), CALL("4", "rm"));
    const char *a = edge_answer(t);
    assert_non_null(strstr(a, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(a, "{\"jsonrpc\":\"2.0\",\"id\":4,\"error\":{\"code\":-32001,"));
    assert_int_equal(fake.nsend, 2);
    edge_free(t);
}

#define PROGRESS "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1}}"

/* An answer the upstream streams: text/event-stream, each message one event with an id
 * STREAM-SEQ; a 2025-11-25 session is primed first (id STREAM-0, retry, empty data). */
static void post_sse_answer(void **state)
{
    for (int primed = 0; primed < 2; primed++) {
        struct edge *t = edge_new();
        struct tg_session *s = edge_session(t, 0, primed ? "2025-11-25" : "2025-06-18");
        char hdr[256];
        t->srv->next_gid = 19;
        edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), s), CALL("8", "echo"));
        HH_RUN_UNTIL(t->h, fake.nsend == 1);
        struct tg_call *k = fake.last;
        tg_call_stream(k);
        assert_int_equal(tg_call_upstream_message(k, PROGRESS, strlen(PROGRESS), NULL), 0);
        const char *ans = "{\"jsonrpc\":\"2.0\",\"id\":20,\"result\":{}}";
        assert_int_equal(tg_call_upstream_message(k, ans, strlen(ans), NULL), 1);
        k->upcall = NULL;
        tg_call_settle(k, TG_OUT_OK, 1);
        tg_call_finish(k);
        struct tg_buf head, body;
        tg_buf_init(&head);
        tg_buf_init(&body);
        edge_split_chunked(edge_answer(t), &head, &body);
        assert_string_equal(head.base, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n"
                                       "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n");
        /* The stream's id is the replay buffer's. */
        assert_false(tg_list_empty(&s->streams));
        struct tg_replay *r = tg_container_of(s->streams.next, struct tg_replay, snode);
        char want[512];
        snprintf(want, sizeof(want),
                 "%s%llx-0\n%s"
                 "id: %llx-1\nevent: message\ndata: " PROGRESS "\n\n"
                 "id: %llx-2\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n\n",
                 primed ? "id: " : "", (unsigned long long)r->id, primed ? "retry: 1000\ndata:\n\n" : "",
                 (unsigned long long)r->id, (unsigned long long)r->id);
        const char *w = want;
        if (!primed)
            w = strchr(want, '\n') + 1; /* no priming line */
        assert_string_equal(body.base, w);
        assert_true(r->ended_at != 0); /* kept for a client that comes back */
        tg_buf_dispose(&head);
        tg_buf_dispose(&body);
        edge_free(t);
    }
}

/* ---- batches (2025-03-26) ----------------------------------------------------------------- */

static void batch_refusals(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *old = edge_session(t, 0, "2025-03-26");
    struct tg_session *s = edge_session(t, 0, "2025-06-18");
    char hdr[256];
    edge_request(t, "POST", "/mcp", EDGE_JSON_POST, "[" CALL("1", "echo") "]");
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST,
                    "Bad Request: a batch needs Mcp-Session-Id (initialize cannot be batched)");
    edge_request(t, "POST", "/mcp", EDGE_JSON_POST "Mcp-Session-Id: nope\r\n", "[" CALL("1", "echo") "]");
    EDGE_EXPECT_RPC(t, 404, NULL, TG_RPC_INVALID_REQUEST, "Session not found");
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), s), " [" CALL("1", "echo") "]");
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST,
                    "Invalid Request: JSON-RPC batches are only accepted for protocol 2025-03-26; this session uses "
                    "2025-06-18");
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), old), "[]");
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST, "Invalid Request: empty batch");
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), old),
                 "[" CALL("1", "echo") "," CALL("2", "echo") "," CALL("3", "echo") "," CALL("4", "echo") "]");
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST,
                    "Invalid Request: more batch elements than limits.inflight_per_session");
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), old), "[" CALL("1", "echo") "}");
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_PARSE_ERROR, "Parse error: expected ',' or ']'");
    assert_int_equal(fake.nsend, 0);
    edge_free(t);
}

/* Each element on its own: refused elements are error objects in the array, the others go up
 * and their answers join the array in the order they come. */
static void batch_answers(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = edge_session(t, 0, "2025-03-26");
    char hdr[256];
    t->srv->next_gid = 29;
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), s),
                 "[" CALL("1", "echo") ",{\"jsonrpc\":\"2.0\",\"id\":2}," INIT("2025-03-26") "]");
    HH_RUN_UNTIL(t->h, fake.nsend == 1);
    assert_string_equal(fake.last_body.base, CALL("30", "echo"));
    hh_spin(t->h, 5);
    assert_int_equal(t->h->got.len, 0); /* the array waits for every element */
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":30,\"result\":{}}");
    EDGE_EXPECT_JSON(t, 200, NULL,
                     "[{\"jsonrpc\":\"2.0\",\"id\":2,\"error\":{\"code\":-32600,\"message\":\"Invalid Request: "
                     "a message needs \\\"method\\\", or exactly one of \\\"result\\\" and \\\"error\\\"\"}},"
                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32600,\"message\":\"Invalid Request: "
                     "initialize cannot be batched\"}},"
                     "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}]");

    /* Only notifications: 202 once every one is accepted. */
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), s), "[" INITIALIZED "," INITIALIZED "]");
    HH_RUN_UNTIL(t->h, fake.nsend == 3);
    struct tg_call *first = NULL;
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k != fake.last)
            first = k;
    }
    assert_non_null(first);
    fake_accepted(first);
    hh_spin(t->h, 5);
    assert_int_equal(t->h->got.len, 0);
    fake_accepted(fake.last);
    HH_EXPECT(t->h, "HTTP/1.1 202 Accepted\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    HH_EXPECT_EOF(t->h);
    assert_int_equal(t->srv->metrics.output_buffered, 0);
    edge_free(t);
}

/* ---- GET and DELETE --------------------------------------------------------------------- */

static void get_stream(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = edge_session(t, 0, "2025-06-18");
    char hdr[256];
    edge_request(t, "GET", "/mcp", "Accept: application/json\r\n", NULL);
    EDGE_EXPECT_RPC(t, 406, NULL, TG_RPC_INVALID_REQUEST, "Not Acceptable: Accept must list text/event-stream");
    edge_request(t, "GET", "/mcp", "Accept: text/event-stream\r\n", NULL);
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST, NEED_SESSION);
    snprintf(hdr, sizeof(hdr), "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\nLast-Event-ID: 12\r\n", s->id_str);
    edge_request(t, "GET", "/mcp", hdr, NULL);
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST, "Bad Request: malformed Last-Event-ID");
    snprintf(hdr, sizeof(hdr), "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\nLast-Event-ID: 77-3\r\n",
             s->id_str);
    edge_request(t, "GET", "/mcp", hdr, NULL);
    EDGE_EXPECT_RPC(t, 404, NULL, TG_RPC_INVALID_REQUEST, "Not Found: this stream cannot be resumed (unknown or expired)");

    /* The session's stream: the upstream's is opened, its messages are events. */
    snprintf(hdr, sizeof(hdr), "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\n", s->id_str);
    edge_request(t, "GET", "/mcp", hdr, NULL);
    HH_RUN_UNTIL(t->h, fake.nsend == 1);
    assert_string_equal(fake.last_body.base, "");
    assert_string_equal(fake.sent.base, "(stream)\n");
    assert_non_null(s->get_stream);
    HH_RUN_UNTIL(t->h, memmem(t->h->got.base, t->h->got.len, "\r\n\r\n", 4) != NULL);
    struct tg_call *k = fake.last;
    int fd = edge_detach(t); /* keep the stream's connection while a second GET comes */
    struct tg_buf first;
    tg_buf_init(&first);
    tg_buf_append(&first, t->h->got.base, t->h->got.len);
    edge_clear(t);
    edge_request(t, "GET", "/mcp", hdr, NULL);
    EDGE_EXPECT_RPC(t, 409, NULL, TG_RPC_INVALID_REQUEST, "Conflict: this session already has a GET stream");
    /* A resumption of a stream that has its client: 409 too. */
    struct tg_replay *r = tg_container_of(s->streams.next, struct tg_replay, snode);
    snprintf(hdr, sizeof(hdr), "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\nLast-Event-ID: %llx-0\r\n",
             s->id_str, (unsigned long long)r->id);
    edge_request(t, "GET", "/mcp", hdr, NULL);
    EDGE_EXPECT_RPC(t, 409, NULL, TG_RPC_INVALID_REQUEST, "Conflict: this stream has a client");
    tg_buf_append(&first, "", 1);
    assert_non_null(strstr(first.base, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"));
    tg_buf_dispose(&first);
    close(fd);
    /* The client went away without Last-Event-ID support (no 2025-11-25): the call stays for a while. */
    HH_RUN_UNTIL(t->h, t->h->env.nconns == 0);
    assert_ptr_equal(s->get_stream, k);
    tg_call_end_get_stream(s);
    edge_free(t);
}

/* got holds s (the bytes so far, chunk framing and all: an event is never split). */
static int got_has(struct edge *t, const char *s)
{
    return t->h->got.len > 0 && memmem(t->h->got.base, t->h->got.len, s, strlen(s)) != NULL;
}

/* The GET stream outlives its client: events that come meanwhile are kept, a client that comes
 * back with Last-Event-ID gets those after it, one without takes the stream over from the start
 * of what is kept; the tick sends keepalives and lets go of a stream whose client stayed away
 * TG_REPLAY_KEEP_MS. */
static void get_resume_and_tick(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = edge_session(t, 0, "2025-06-18");
    char hdr[256];
    snprintf(hdr, sizeof(hdr), "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\n", s->id_str);
    edge_request(t, "GET", "/mcp", hdr, NULL);
    HH_RUN_UNTIL(t->h, fake.nsend == 1 && got_has(t, "\r\n\r\n"));
    struct tg_call *k = fake.last;
    struct tg_replay *r = tg_container_of(s->streams.next, struct tg_replay, snode);
    unsigned long long id = (unsigned long long)r->id;
    char ev[256];
    const char *n1 = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/one\"}";
    const char *n2 = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/two\"}";
    tg_call_upstream_message(k, n1, strlen(n1), NULL);
    snprintf(ev, sizeof(ev), "id: %llx-1\nevent: message\ndata: %s\n\n", id, n1);
    HH_RUN_UNTIL(t->h, got_has(t, ev));
    /* Idle: a keepalive comment from the tick. */
    int ka = t->srv->conf->limits.sse_keepalive_ms;
    t->srv->conf->limits.sse_keepalive_ms = 0;
    tg_streamable_tick(t->srv);
    HH_RUN_UNTIL(t->h, got_has(t, ": keepalive\n\n"));
    t->srv->conf->limits.sse_keepalive_ms = ka;
    /* The client goes; the stream stays, and keeps what comes. */
    close(edge_detach(t));
    HH_RUN_UNTIL(t->h, t->h->env.nconns == 0);
    edge_clear(t);
    assert_ptr_equal(s->get_stream, k);
    assert_true(r->detached_at != 0);
    tg_call_upstream_message(k, n2, strlen(n2), NULL);
    snprintf(hdr, sizeof(hdr), "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\nLast-Event-ID: %llx-1\r\n",
             s->id_str, id);
    edge_request(t, "GET", "/mcp", hdr, NULL);
    snprintf(ev, sizeof(ev), "id: %llx-2\nevent: message\ndata: %s\n\n", id, n2);
    HH_RUN_UNTIL(t->h, got_has(t, ev));
    assert_true(got_has(t, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"));
    assert_false(got_has(t, "notifications/one")); /* seen before */
    assert_int_equal(r->detached_at, 0);
    /* Gone again; a GET without Last-Event-ID takes the stream over from what is kept. */
    close(edge_detach(t));
    HH_RUN_UNTIL(t->h, t->h->env.nconns == 0);
    edge_clear(t);
    snprintf(hdr, sizeof(hdr), "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\n", s->id_str);
    edge_request(t, "GET", "/mcp", hdr, NULL);
    HH_RUN_UNTIL(t->h, got_has(t, ev));
    assert_true(got_has(t, "notifications/one"));
    close(edge_detach(t));
    HH_RUN_UNTIL(t->h, t->h->env.nconns == 0);
    /* The tick lets it go only once it has been away TG_REPLAY_KEEP_MS. */
    uint64_t now = uv_now(&t->h->loop);
    assert_true(now > TG_REPLAY_KEEP_MS);
    int cancelled = fake.ncancel;
    r->detached_at = now - TG_REPLAY_KEEP_MS + 1000;
    tg_streamable_tick(t->srv);
    tg_call_run_pending(t->srv);
    assert_ptr_equal(s->get_stream, k);
    assert_int_equal(fake.ncancel, cancelled);
    r->detached_at = now - TG_REPLAY_KEEP_MS;
    tg_streamable_tick(t->srv);
    tg_call_run_pending(t->srv);
    assert_null(s->get_stream);
    assert_true(fake.ncancel > cancelled); /* the upstream stream is let go */
    edge_free(t);
}

/* A POST's stream whose client went: the call goes on however long it is away (only the GET
 * stream is let go by the tick), its answer is kept, and a client that comes back with
 * Last-Event-ID gets it and the end of the stream. */
static void post_stream_resumed_after_end(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = edge_session(t, 0, "2025-11-25");
    char hdr[256];
    t->srv->next_gid = 79;
    edge_request(t, "POST", "/mcp", edge_in_session(hdr, sizeof(hdr), s), CALL("8", "echo"));
    HH_RUN_UNTIL(t->h, fake.nsend == 1);
    struct tg_call *k = fake.last;
    tg_call_stream(k);
    HH_RUN_UNTIL(t->h, got_has(t, "retry: 1000\ndata:\n\n"));
    struct tg_replay *r = tg_container_of(s->streams.next, struct tg_replay, snode);
    close(edge_detach(t));
    HH_RUN_UNTIL(t->h, t->h->env.nconns == 0);
    edge_clear(t);
    int cancelled = fake.ncancel;
    r->detached_at = uv_now(&t->h->loop) - TG_REPLAY_KEEP_MS - 1;
    tg_streamable_tick(t->srv);
    tg_call_run_pending(t->srv);
    assert_int_equal(fake.ncancel, cancelled);
    assert_ptr_equal(k->upcall, FAKE_UPREQ);
    const char *ans = "{\"jsonrpc\":\"2.0\",\"id\":80,\"result\":{}}";
    assert_int_equal(tg_call_upstream_message(k, ans, strlen(ans), NULL), 1);
    k->upcall = NULL;
    tg_call_settle(k, TG_OUT_OK, 1);
    tg_call_finish(k);
    assert_null(r->live);
    snprintf(hdr, sizeof(hdr), "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\nLast-Event-ID: %llx-0\r\n",
             s->id_str, (unsigned long long)r->id);
    edge_request(t, "GET", "/mcp", hdr, NULL);
    struct tg_buf head, body;
    tg_buf_init(&head);
    tg_buf_init(&body);
    edge_split_chunked(edge_answer(t), &head, &body);
    char want[256];
    snprintf(want, sizeof(want), "id: %llx-1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n\n",
             (unsigned long long)r->id);
    assert_string_equal(body.base, want);
    tg_buf_dispose(&head);
    tg_buf_dispose(&body);
    edge_free(t);
}

/* side answers initialize itself and has no stream of server messages to offer. */
static void get_local_405(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = edge_session(t, 1, "2025-06-18");
    char hdr[256];
    snprintf(hdr, sizeof(hdr), "Accept: text/event-stream\r\nMcp-Session-Id: %s\r\n", s->id_str);
    edge_request(t, "GET", "/side/mcp", hdr, NULL);
    HH_EXPECT(t->h, "HTTP/1.1 405 Method Not Allowed\r\nAllow: POST, DELETE\r\nConnection: close\r\n"
                    "Content-Length: 0\r\n\r\n");
    HH_EXPECT_EOF(t->h);
    assert_int_equal(fake.nsend, 0);
    edge_free(t);
}

static void delete_session(void **state)
{
    struct edge *t = edge_new();
    struct tg_session *s = edge_session(t, 0, "2025-06-18");
    char sid[64], hdr[256];
    snprintf(sid, sizeof(sid), "%s", s->id_str);
    edge_request(t, "DELETE", "/mcp", NULL, NULL);
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST, NEED_SESSION);
    edge_request(t, "DELETE", "/mcp", "Mcp-Session-Id: nope\r\n", NULL);
    EDGE_EXPECT_RPC(t, 404, NULL, TG_RPC_INVALID_REQUEST, "Session not found");
    snprintf(hdr, sizeof(hdr), "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 1.0\r\n", sid);
    edge_request(t, "DELETE", "/mcp", hdr, NULL);
    EDGE_EXPECT_RPC(t, 400, NULL, TG_RPC_INVALID_REQUEST, "Bad Request: unsupported MCP-Protocol-Version");
    edge_request(t, "DELETE", "/side/mcp", hdr + 0, NULL);
    EDGE_EXPECT_RPC(t, 404, NULL, TG_RPC_INVALID_REQUEST, "Session not found");
    assert_int_equal(tg_session_table_count(t->srv->sessions), 1);
    snprintf(hdr, sizeof(hdr), "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-06-18\r\n", sid);
    edge_request(t, "DELETE", "/mcp", hdr, NULL);
    HH_EXPECT(t->h, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
    HH_EXPECT_EOF(t->h);
    assert_int_equal(tg_session_table_count(t->srv->sessions), 0);
    assert_int_equal(fake.nclose, 1); /* the upstream session ends too */
    /* The id is gone for good. */
    snprintf(hdr, sizeof(hdr), EDGE_JSON_POST "Mcp-Session-Id: %s\r\n", sid);
    edge_request(t, "POST", "/mcp", hdr, CALL("5", "echo"));
    EDGE_EXPECT_RPC(t, 404, "5", TG_RPC_INVALID_REQUEST, "Session not found");
    edge_free(t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(post_content_type),
        cmocka_unit_test(post_accept),
        cmocka_unit_test(post_body),
        cmocka_unit_test(post_session_checks),
        cmocka_unit_test(post_initialize),
        cmocka_unit_test(post_json_and_202),
        cmocka_unit_test(post_sse_answer),
        cmocka_unit_test(batch_refusals),
        cmocka_unit_test(batch_answers),
        cmocka_unit_test(get_stream),
        cmocka_unit_test(get_resume_and_tick),
        cmocka_unit_test(post_stream_resumed_after_end),
        cmocka_unit_test(get_local_405),
        cmocka_unit_test(delete_session),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
