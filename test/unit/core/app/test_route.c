/* core/app/route.c: the route table. tg_route_match (paths to endpoint and upstream) and
 * tg_route_origin_allowed (the Origin check) as functions, then tg_route_handle as the
 * on_request of a real tg_conn (test/unit/transports/harness.h: raw bytes over a loopback
 * socket) in front of a hand-built server with a fake upstream (test/unit/core/middle.h), so
 * that 404 / 403 / 401 / 400 / 405 are checked byte for byte in the order the router decides
 * them (path, then Origin, then authentication, then method), and an authenticated request is
 * seen to reach the transport and, through it, the upstream. */
#include "test/unit/core/middle.h"
#include "test/unit/transports/harness.h"

#include "core/app/route.h"
#include "policy/auth.h"

/* ---- tg_route_match ----------------------------------------------------------------------- */

#define CONF_NO_DEFAULT                                                                                            \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "grants = ( { name = \"alice\"; anonymous = true; } );\n"                                                      \
    "upstreams = (\n"                                                                                              \
    "  { name = \"a\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\"; },\n"                        \
    "  { name = \"b.c\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\"; } );\n"                    \
    "# %s\n"

static enum tg_endpoint match(const struct tg_conf *c, const char *path, int *up)
{
    return tg_route_match(c, tg_slice_cstr(path), up);
}

static void route_paths(void **state)
{
    static const struct {
        const char *path;
        enum tg_endpoint ep;
        int with_default; /* upstream with MW_CONF (main = 0 default, side = 1) */
        int without;      /* upstream with CONF_NO_DEFAULT (a = 0, b.c = 1, no default) */
    } cases[] = {
        {"/mcp", TG_EP_MCP, 0, -1},
        {"/sse", TG_EP_SSE, 0, -1},
        {"/messages", TG_EP_MESSAGES, 0, -1},
        {"/ws", TG_EP_WS, 0, -1},
        {"/side/mcp", TG_EP_MCP, 1, -1},
        {"/side/sse", TG_EP_SSE, 1, -1},
        {"/side/messages", TG_EP_MESSAGES, 1, -1},
        {"/side/ws", TG_EP_WS, 1, -1},
        {"/main/mcp", TG_EP_MCP, 0, -1},
        {"/a/mcp", TG_EP_MCP, -1, 0},
        {"/b.c/ws", TG_EP_WS, -1, 1},
        {"/nope/mcp", TG_EP_MCP, -1, -1}, /* an endpoint, of no upstream: the router says 404 */
        {"/a/b/mcp", TG_EP_MCP, -1, -1},  /* "a/b" is no upstream name */
        {"//mcp", TG_EP_NONE, -1, -1},
        {"///mcp", TG_EP_MCP, -1, -1},
        {"/Side/mcp", TG_EP_MCP, -1, -1}, /* names are case-sensitive */
        {"/MCP", TG_EP_NONE, -1, -1},
        {"/mcpx", TG_EP_NONE, -1, -1},
        {"/xmcp", TG_EP_NONE, -1, -1},
        {"/mcp/", TG_EP_NONE, -1, -1},
        {"/side/mcp/", TG_EP_NONE, -1, -1},
        {"/side/mcpx", TG_EP_NONE, -1, -1},
        {"/sidemcp", TG_EP_NONE, -1, -1},
        {"mcp", TG_EP_NONE, -1, -1},
        {"/", TG_EP_NONE, -1, -1},
        {"", TG_EP_NONE, -1, -1},
        {"/healthz", TG_EP_NONE, -1, -1},
        {"/side", TG_EP_NONE, -1, -1},
        {"/side/", TG_EP_NONE, -1, -1},
        {"/side/message", TG_EP_NONE, -1, -1},
    };
    struct mw *m1 = mw_new(FAKE_HTTP);
    struct mw *m2 = mw_new_conf(FAKE_HTTP, CONF_NO_DEFAULT);
    assert_int_equal(m1->srv.conf->default_upstream, 0);
    assert_int_equal(m2->srv.conf->default_upstream, -1);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int w = 0; w < 2; w++) {
            int up = 12345;
            enum tg_endpoint ep = match(w ? m2->srv.conf : m1->srv.conf, cases[i].path, &up);
            int want_up = w ? cases[i].without : cases[i].with_default;
            if (ep != cases[i].ep || up != want_up)
                fail_msg("\"%s\" (%s): endpoint %d upstream %d, expected %d and %d", cases[i].path,
                         w ? "no default" : "default", (int)ep, up, (int)cases[i].ep, want_up);
        }
    }
    /* The path is a slice: bytes after it are not read. */
    int up;
    assert_int_equal(tg_route_match(m1->srv.conf, tg_slice_of("/side/mcpXYZ", 9), &up), TG_EP_MCP);
    assert_int_equal(up, 1);
    assert_int_equal(tg_route_match(m1->srv.conf, tg_slice_of("/mcp", 0), &up), TG_EP_NONE);
    assert_int_equal(up, -1);
    mw_free(m1);
    mw_free(m2);
}

/* ---- tg_route_origin_allowed -------------------------------------------------------------- */

static int origin(const struct tg_listener_conf *lc, const char *o)
{
    return tg_route_origin_allowed(lc, o ? tg_slice_cstr(o) : TG_SLICE_NULL);
}

static void route_origins(void **state)
{
    char *extra[] = {"https://app.example.com", "http://10.0.0.5:3000"};
    struct tg_listener_conf lc = {0};
    lc.origins = extra;
    lc.norigins = 2;
    static const struct {
        const char *o;
        int ok;
    } cases[] = {
        {NULL, 1}, /* non-browser clients send none */
        {"http://localhost", 1},
        {"http://localhost:8080", 1},
        {"https://localhost", 1},
        {"https://localhost:443", 1},
        {"HTTP://LocalHost:1", 1},
        {"http://127.0.0.1", 1},
        {"http://127.0.0.1:65535", 1},
        {"http://[::1]", 1},
        {"http://[::1]:8080", 1},
        {"https://app.example.com", 1},
        {"http://10.0.0.5:3000", 1},
        {"", 0},
        {"null", 0},
        {"localhost", 0},
        {"http://", 0},
        {"https://", 0},
        {"ftp://localhost", 0},
        {"ws://localhost", 0},
        {"http:/localhost", 0},
        {"http://localhost:", 0},
        {"http://localhost:8a", 0},
        {"http://localhost:-1", 0},
        {"http://localhost: 80", 0},
        {"http://localhost/", 0},
        {"http://localhost/path", 0},
        {"http://localhost@evil.com", 0},
        {"http://evil.com@localhost", 0},
        {"http://localhost:80@evil.com", 0},
        {"http://localhost.evil.com", 0},
        {"http://localhost.", 0},
        {"http://evil-localhost", 0},
        {"http://127.0.0.1.evil.com", 0},
        {"http://127.0.0.2", 0},
        {"http://127.1", 0},
        {"http://[::1", 0},
        {"http://[::1]x", 0},
        {"http://[::1]:", 0},
        {"http://[::2]", 0},
        {"http://[::ffff:127.0.0.1]", 0},
        {"http://0.0.0.0", 0},
        {"https://app.example.com:443", 0}, /* configured origins match exactly */
        {"https://app.example.com/", 0},
        {"http://app.example.com", 0},
        {"https://APP.example.com", 0},
        {"http://10.0.0.5", 0},
        {"http://evil.com", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int got = origin(&lc, cases[i].o);
        if (got != cases[i].ok)
            fail_msg("Origin %s%s%s: %s, expected %s", cases[i].o ? "\"" : "", cases[i].o ? cases[i].o : "(none)",
                     cases[i].o ? "\"" : "", got ? "allowed" : "refused", cases[i].ok ? "allowed" : "refused");
        /* Without a listener conf: loopback only. */
        int loop_only = cases[i].ok && (cases[i].o == NULL || strstr(cases[i].o, "example") == NULL) &&
                        (cases[i].o == NULL || strstr(cases[i].o, "10.0.0.5") == NULL);
        if (origin(NULL, cases[i].o) != loop_only)
            fail_msg("Origin %s without listener conf: %d, expected %d", cases[i].o ? cases[i].o : "(none)",
                     !loop_only, loop_only);
    }
    /* A slice: bytes past its end are not read ("http://localhost" then garbage). */
    assert_int_equal(tg_route_origin_allowed(&lc, tg_slice_of("http://localhost.evil", 16)), 1);
    assert_int_equal(tg_route_origin_allowed(&lc, tg_slice_of("http://localhost:", 16)), 1);
    assert_int_equal(tg_route_origin_allowed(&lc, tg_slice_of("http://[::1]", 11)), 0);
    /* "*" in the conf: any origin. */
    lc.any_origin = 1;
    assert_int_equal(origin(&lc, "http://evil.com"), 1);
    assert_int_equal(origin(&lc, "null"), 1);
}

/* The conf loader sets any_origin for origins = ["*"] and keeps the others verbatim. */
#define CONF_ORIGINS                                                                                               \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; origins = [ \"https://app.example.com\" ]; },\n"           \
    "           { address = \"127.0.0.1\"; port = 8081; origins = [ \"*\" ]; } );\n"                               \
    "grants = ( { name = \"alice\"; anonymous = true; } );\n"                                                      \
    "upstreams = ( { name = \"main\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\"; } );\n"       \
    "# %s %s\n"

static void route_origins_from_conf(void **state)
{
    struct mw *m = mw_new_conf(FAKE_HTTP, CONF_ORIGINS);
    const struct tg_conf *c = m->srv.conf;
    assert_int_equal(c->nlisteners, 2);
    assert_int_equal(origin(&c->listeners[0], "https://app.example.com"), 1);
    assert_int_equal(origin(&c->listeners[0], "https://evil.example.com"), 0);
    assert_int_equal(origin(&c->listeners[0], "http://localhost:1"), 1);
    assert_int_equal(origin(&c->listeners[1], "https://evil.example.com"), 1);
    mw_free(m);
}

/* ---- tg_route_handle over a real connection ---------------------------------------------- */

#define ROUTER_TOKEN "alice-secret-token"

/* %s the token's SHA-256, then three %%s for the directory. main answers initialize itself;
 * side forwards it. No anonymous grant. */
#define CONF_ROUTER                                                                                                \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; origins = [ \"https://app.example.com\" ]; } );\n"         \
    "grants = ( { name = \"alice\"; token_sha256 = \"%s\"; } );\n"                                                 \
    "upstreams = (\n"                                                                                              \
    "  { name = \"main\"; url = \"http://127.0.0.1:9/mcp\"; default = true; initialize = \"local\";\n"             \
    "    policy = \"%%s/policy.json\"; },\n"                                                                       \
    "  { name = \"side\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%%s/policy.json\"; } );\n"                  \
    "# %%s\n"

struct rt {
    struct hh *h;
    struct mw *m;
};

static void on_request(struct hh *h, struct tg_conn *c) { tg_route_handle(&((struct rt *)h->ud)->m->srv, c); }

static void rt_new(struct rt *t, int anonymous)
{
    uint8_t sum[32];
    char hex[65];
    tg_sha256(ROUTER_TOKEN, strlen(ROUTER_TOKEN), sum);
    tg_hex_encode(sum, 32, hex);
    char fmt[2048];
    snprintf(fmt, sizeof(fmt), CONF_ROUTER, hex);
    if (anonymous) {
        char *g = strstr(fmt, "\"; } );");
        assert_non_null(g);
        char tail[2048];
        snprintf(tail, sizeof(tail), "%s", g + 7);
        snprintf(g, sizeof(fmt) - (size_t)(g - fmt), "\"; }, { name = \"anon\"; anonymous = true; } );%s", tail);
    }
    t->h = hh_new(on_request);
    t->h->ud = t;
    t->m = mw_new_on(FAKE_HTTP, fmt, &t->h->loop);
    t->h->hl.lc = &t->m->srv.conf->listeners[0];
}

static void rt_free(struct rt *t)
{
    hh_free(t->h); /* closes the connections: their exchanges go first */
    tg_route_dispose(&t->m->srv); /* what the transports keep for reuse */
    mw_free(t->m);
}

/* One request on a new connection ("Connection: close" is added), then the exact answer and
 * EOF. */
static void rt_request(struct rt *t, const char *method, const char *target, const char *headers, const char *body)
{
    hh_connect(t->h);
    char req[4096];
    size_t bl = body ? strlen(body) : 0;
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%s", method, target,
                     headers ? headers : "");
    if (body)
        n += snprintf(req + n, sizeof(req) - (size_t)n, "Content-Length: %zu\r\n", bl);
    n += snprintf(req + n, sizeof(req) - (size_t)n, "\r\n%s", body ? body : "");
    hh_send(t->h, req, (size_t)n);
}

static void rt_expect_rpc(struct rt *t, int status, const char *extra, const char *msg, const char *file, int line)
{
    struct tg_buf body, want;
    tg_buf_init(&body);
    tg_buf_init(&want);
    tg_rpc_error(&body, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
    tg_buf_appendf(&want, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n%sConnection: close\r\nContent-Length: %zu\r\n\r\n",
                   status, tg_http_status_text(status), extra ? extra : "", body.len);
    tg_buf_append(&want, body.base, body.len);
    hh_expect_bytes(t->h, want.base, want.len, file, line);
    hh_expect_eof(t->h, file, line);
    tg_buf_dispose(&body);
    tg_buf_dispose(&want);
}
#define RT_EXPECT_RPC(t, status, extra, msg) rt_expect_rpc((t), (status), (extra), (msg), __FILE__, __LINE__)

static void rt_expect_405(struct rt *t, const char *allow, const char *file, int line)
{
    char want[256];
    int n = snprintf(want, sizeof(want), "HTTP/1.1 405 Method Not Allowed\r\nAllow: %s\r\nConnection: close\r\n"
                                         "Content-Length: 0\r\n\r\n", allow);
    hh_expect_bytes(t->h, want, (size_t)n, file, line);
    hh_expect_eof(t->h, file, line);
}
#define RT_EXPECT_405(t, allow) rt_expect_405((t), (allow), __FILE__, __LINE__)

#define AUTH "Authorization: Bearer " ROUTER_TOKEN "\r\n"
#define NOT_FOUND "Not Found: no MCP endpoint at this path"
#define FORBIDDEN "Forbidden: Origin not allowed"
#define UNAUTHORIZED "Unauthorized: a valid bearer token is required"
#define REALM "WWW-Authenticate: Bearer realm=\"tollgate\"\r\n"
#define INVALID(why) "WWW-Authenticate: Bearer realm=\"tollgate\", error=\"invalid_token\", error_description=\"" why "\"\r\n"

static void router_health(void **state)
{
    struct rt t;
    rt_new(&t, 0);
    rt_request(&t, "GET", "/healthz", NULL, NULL);
    HH_EXPECT(t.h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 15\r\n\r\n"
                   "{\"status\":\"ok\"}");
    HH_EXPECT_EOF(t.h);
    rt_request(&t, "GET", "/readyz?x=1", NULL, NULL);
    HH_EXPECT(t.h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 18\r\n\r\n"
                   "{\"status\":\"ready\"}");
    HH_EXPECT_EOF(t.h);
    t.m->srv.draining = 1;
    rt_request(&t, "GET", "/readyz", NULL, NULL);
    HH_EXPECT(t.h, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
                   "Content-Length: 22\r\n\r\n{\"status\":\"not ready\"}");
    HH_EXPECT_EOF(t.h);
    t.m->srv.draining = 0;
    rt_free(&t);
}

/* The path decides first: 404 even with a foreign Origin or no credentials. */
static void router_not_found(void **state)
{
    static const char *const paths[] = {"/", "/nope", "/nope/mcp", "/a/b/mcp", "/mcpx", "//mcp", "/mcp/", "/MCP",
                                        "/healthz/", "/side/mcp/x"};
    struct rt t;
    rt_new(&t, 0);
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        rt_request(&t, "POST", paths[i], "Origin: http://evil.com\r\n", "{}");
        RT_EXPECT_RPC(&t, 404, NULL, NOT_FOUND);
    }
    rt_free(&t);
}

/* Then the Origin: 403 before authentication is looked at. */
static void router_origin(void **state)
{
    static const char *const bad[] = {"Origin: http://evil.com\r\n", "Origin: http://localhost@evil.com\r\n",
                                      "Origin: http://localhost.evil.com\r\n", "Origin: http://localhost:\r\n",
                                      "Origin: null\r\n",
                                      "Origin: http://localhost\r\nOrigin: http://localhost\r\n"};
    struct rt t;
    rt_new(&t, 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rt_request(&t, "POST", i % 2 ? "/side/mcp" : "/mcp", bad[i], "{}");
        RT_EXPECT_RPC(&t, 403, NULL, FORBIDDEN);
    }
    /* Allowed origins go on to authentication (no credentials here: 401). */
    static const char *const good[] = {"", "Origin: http://localhost:3000\r\n", "Origin: https://app.example.com\r\n",
                                       "Origin: http://[::1]\r\n"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        rt_request(&t, "POST", "/mcp", good[i], "{}");
        RT_EXPECT_RPC(&t, 401, REALM, UNAUTHORIZED);
    }
    rt_free(&t);
}

/* Then authentication: 401 with WWW-Authenticate, 400 for two Authorization headers; a valid
 * token reaches the endpoint (405 for a method it does not take shows that). */
static void router_auth(void **state)
{
    struct rt t;
    rt_new(&t, 0);
    rt_request(&t, "POST", "/mcp", NULL, "{}");
    RT_EXPECT_RPC(&t, 401, REALM, UNAUTHORIZED);
    rt_request(&t, "POST", "/mcp", "Authorization: Bearer wrong\r\n", "{}");
    RT_EXPECT_RPC(&t, 401, INVALID("invalid token"), UNAUTHORIZED);
    rt_request(&t, "POST", "/mcp", "Authorization: Basic YWxpY2U6eA==\r\n", "{}");
    RT_EXPECT_RPC(&t, 401, INVALID("malformed Authorization header"), UNAUTHORIZED);
    rt_request(&t, "POST", "/mcp", "Authorization: Bearer " ROUTER_TOKEN "x\r\n", "{}");
    RT_EXPECT_RPC(&t, 401, INVALID("invalid token"), UNAUTHORIZED);
    rt_request(&t, "POST", "/mcp", AUTH AUTH, "{}");
    RT_EXPECT_RPC(&t, 400, NULL, "Bad Request: more than one Authorization header");
    rt_request(&t, "PUT", "/mcp", AUTH, "{}");
    {
        const char *b = "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Method Not Allowed\"}}";
        char want[512];
        int n = snprintf(want, sizeof(want), "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\n"
                                             "Allow: GET, POST, DELETE\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                         strlen(b), b);
        HH_EXPECT_N(t.h, want, (size_t)n);
        HH_EXPECT_EOF(t.h);
    }
    rt_request(&t, "POST", "/sse", AUTH, "{}");
    RT_EXPECT_405(&t, "GET");
    rt_request(&t, "POST", "/side/ws", AUTH, "{}");
    RT_EXPECT_405(&t, "GET");
    rt_request(&t, "GET", "/side/messages", AUTH, NULL);
    RT_EXPECT_405(&t, "POST");
    /* Browsers cannot set headers on a WebSocket: ?access_token= stands in, on /ws only. */
    rt_request(&t, "POST", "/ws?access_token=" ROUTER_TOKEN, NULL, "{}");
    RT_EXPECT_405(&t, "GET");
    rt_request(&t, "POST", "/ws?x=1&access_token=wrong", NULL, "{}");
    RT_EXPECT_RPC(&t, 401, INVALID("invalid token"), UNAUTHORIZED);
    rt_request(&t, "POST", "/ws?access_token=", NULL, "{}");
    RT_EXPECT_RPC(&t, 401, REALM, UNAUTHORIZED);
    rt_request(&t, "POST", "/sse?access_token=" ROUTER_TOKEN, NULL, "{}");
    RT_EXPECT_RPC(&t, 401, REALM, UNAUTHORIZED);
    rt_request(&t, "GET", "/mcp?access_token=" ROUTER_TOKEN, "Accept: text/event-stream\r\n", NULL);
    RT_EXPECT_RPC(&t, 401, REALM, UNAUTHORIZED);
    /* The header wins over the query. */
    rt_request(&t, "POST", "/ws?access_token=" ROUTER_TOKEN, "Authorization: Bearer wrong\r\n", "{}");
    RT_EXPECT_RPC(&t, 401, INVALID("invalid token"), UNAUTHORIZED);
    assert_int_equal(tg_session_table_count(t.m->srv.sessions), 0);
    rt_free(&t);
}

/* With an anonymous grant, no credentials is fine; a wrong token is still 401. */
static void router_anonymous(void **state)
{
    struct rt t;
    rt_new(&t, 1);
    rt_request(&t, "PATCH", "/side/mcp", NULL, "{}");
    HH_RUN_UNTIL(t.h, t.h->eof);
    assert_non_null(memmem(t.h->got.base, t.h->got.len, "HTTP/1.1 405 ", 13));
    t.h->got.len = 0;
    rt_request(&t, "POST", "/mcp", "Authorization: Bearer wrong\r\n", "{}");
    RT_EXPECT_RPC(&t, 401, INVALID("invalid token"), UNAUTHORIZED);
    rt_free(&t);
}

#define JSON_POST "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
#define INIT "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\"," \
             "\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}"

/* An authenticated initialize reaches the transport: answered by the gateway for main
 * (initialize = "local"), forwarded to the upstream for side, our id going up and the
 * client's coming back, with the new session's id. */
static void router_reaches_upstream(void **state)
{
    struct rt t;
    rt_new(&t, 0);
    rt_request(&t, "POST", "/mcp", AUTH JSON_POST, INIT);
    HH_RUN_UNTIL(t.h, t.h->eof);
    tg_buf_append(&t.h->got, "", 1);
    assert_non_null(strstr(t.h->got.base, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: "));
    assert_non_null(strstr(t.h->got.base, "\"protocolVersion\":\"2025-06-18\""));
    t.h->got.len = 0;
    assert_int_equal(fake.nsend, 0);
    assert_int_equal(tg_session_table_count(t.m->srv.sessions), 1);

    t.m->srv.next_gid = 6;
    rt_request(&t, "POST", "/side/mcp", AUTH JSON_POST, INIT);
    HH_RUN_UNTIL(t.h, fake.nsend == 1);
    assert_string_equal(fake.last_body.base,
                        "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"initialize\",\"params\":{\"protocolVersion\":"
                        "\"2025-06-18\",\"capabilities\":{},\"clientInfo\":{\"name\":\"t\",\"version\":\"1\"}}}");
    struct tg_session *s = fake.last->sess;
    assert_int_equal(s->upstream, 1);
    assert_string_equal(s->grant, "alice");
    char sid[40];
    snprintf(sid, sizeof(sid), "%s", s->id_str);
    hh_spin(t.h, 5);
    assert_int_equal(t.h->got.len, 0); /* waits for the upstream */
    fake_answer(fake.last, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"protocolVersion\":\"2025-06-18\","
                           "\"capabilities\":{},\"serverInfo\":{\"name\":\"u\",\"version\":\"1\"}}}");
    const char *b = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"protocolVersion\":\"2025-06-18\","
                    "\"capabilities\":{},\"serverInfo\":{\"name\":\"u\",\"version\":\"1\"}}}";
    char want[1024];
    int n = snprintf(want, sizeof(want), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: %s\r\n"
                                         "Connection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     sid, strlen(b), b);
    HH_EXPECT_N(t.h, want, (size_t)n);
    HH_EXPECT_EOF(t.h);
    assert_int_equal(s->initialized, 1);
    assert_string_equal(s->proto, "2025-06-18");
    assert_int_equal(tg_session_table_count(t.m->srv.sessions), 2);
    rt_free(&t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(route_paths),
        cmocka_unit_test(route_origins),
        cmocka_unit_test(route_origins_from_conf),
        cmocka_unit_test(router_health),
        cmocka_unit_test(router_not_found),
        cmocka_unit_test(router_origin),
        cmocka_unit_test(router_auth),
        cmocka_unit_test(router_anonymous),
        cmocka_unit_test(router_reaches_upstream),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
