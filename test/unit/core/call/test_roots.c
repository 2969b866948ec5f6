/* core/call/roots.c and its call sites (core/call/call.c, core/gate/dispatch.c): with roots pinned, a server's
 * roots/list is answered by the gateway with them and never reaches a client, the client's
 * list_changed goes nowhere, and the initialize the server sees declares roots. A fake upstream
 * kind and a fake sink (test/unit/core/middle.h) around the real middle. */
#include "test/unit/core/middle.h"

#include "core/call/roots.h"

/* Upstream 0 "pinned" (roots pinned, a message-stream link as stdio), upstream 1 "open" (none);
 * grant alice (anonymous) takes them as they are. */
#define ROOTS_CONF                                                                                                 \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "audit = { file = \"%s/audit.log\"; };\n"                                                                      \
    "grants = ( { name = \"alice\"; anonymous = true; } );\n"                                                      \
    "upstreams = (\n"                                                                                              \
    "  { name = \"pinned\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\";\n"                      \
    "    roots = ( \"file:///srv/a\", { uri = \"file:///srv/b\"; name = \"B\"; } ); },\n"                          \
    "  { name = \"open\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\"; }\n"                      \
    ");\n"

#define PINNED "{\"roots\":[{\"uri\":\"file:///srv/a\"},{\"uri\":\"file:///srv/b\",\"name\":\"B\"}]}"

/* A tools/call whose stream can carry server requests: returns its sink's record. */
static void open_call(struct mw *m, struct tg_session *s, struct rec *r)
{
    rec_init(r);
    mw_send(m, s, fsink_new(r, 0), "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}");
    assert_non_null(fake.last);
}

static void server_roots_list_answered_by_the_gateway(void **state)
{
    struct mw *m = mw_new_conf(FAKE_LINK, ROOTS_CONF);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    open_call(m, s, &r);
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"roots/list\",\"params\":{}}");
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"roots/list\"}");
    assert_int_equal(r.nmessage, 0); /* the client never sees it */
    assert_string_equal(fake.replies.base, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":" PINNED "}\n"
                                           "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":" PINNED "}\n");
    assert_int_equal(m->srv.metrics.roots_answered, 2);
    assert_int_equal(m->srv.metrics.server_requests_denied, 0);
    /* Other server requests still reach the client; a client's answer to a roots/list it was
     * never sent is a forgery. */
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":\"s2\",\"method\":\"elicitation/create\",\"params\":{}}");
    assert_int_equal(r.nmessage, 1);
    struct rec r2;
    rec_init(&r2);
    mw_send(m, s, fsink_new(&r2, 0), "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{\"roots\":[{\"uri\":\"file:///\"}]}}");
    assert_int_equal(r2.status, 400);
    rec_dispose(&r2);
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    assert_int_equal(r.nrelease, 1); /* the call's answer (its gid is 1: the first of this server) */
    rec_dispose(&r);
    mw_free(m);
}

static void without_pins_roots_list_is_relayed(void **state)
{
    struct mw *m = mw_new_conf(FAKE_LINK, ROOTS_CONF);
    struct tg_session *s = mw_session(m, 1);
    struct rec r;
    open_call(m, s, &r);
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"roots/list\"}");
    assert_int_equal(r.nmessage, 1);
    assert_string_equal(r.messages.base, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"roots/list\"}\n");
    assert_int_equal(fake.nreply, 0);
    assert_int_equal(m->srv.metrics.roots_answered, 0);
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    rec_dispose(&r);
    mw_free(m);
}

/* ROOTS_CONF with a second grant that pins roots of its own. */
#define GRANT_PINS_CONF                                                                                            \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "audit = { file = \"%s/audit.log\"; };\n"                                                                      \
    "grants = ( { name = \"alice\"; anonymous = true; },\n"                                                      \
    "  { name = \"bob\"; token_sha256 = \"" "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" "\";\n" \
    "    roots = [ \"file:///home/bob\" ]; } );\n"                                                                 \
    "upstreams = (\n"                                                                                              \
    "  { name = \"pinned\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\";\n"                      \
    "    roots = ( \"file:///srv/a\", { uri = \"file:///srv/b\"; name = \"B\"; } ); },\n"                          \
    "  { name = \"open\"; url = \"http://127.0.0.1:9/mcp\"; policy = \"%s/policy.json\"; }\n"                      \
    ");\n"

/* While some grant pins roots, a session whose grant a reload removed gets an empty list, never
 * its client's roots, even on an upstream that pins none (without grant pins, the upstream's
 * decide: an unpinned one relays, as for every session; the grant is then never looked up). */
static void session_of_a_removed_grant_gets_no_roots(void **state)
{
    struct mw *m = mw_new_conf(FAKE_LINK, GRANT_PINS_CONF);
    struct tg_session *s = mw_session(m, 1);
    struct rec r;
    open_call(m, s, &r);
    s->grant = "gone";
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"method\":\"roots/list\"}");
    assert_int_equal(r.nmessage, 0);
    assert_string_equal(fake.replies.base, "{\"jsonrpc\":\"2.0\",\"id\":\"s1\",\"result\":{\"roots\":[]}}\n");
    s->grant = s->grant_name;
    fake_link(m, s, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
    rec_dispose(&r);
    mw_free(m);
}

static void client_list_changed_dropped_and_initialize_declares_roots(void **state)
{
    struct mw *m = mw_new_conf(FAKE_LINK, ROOTS_CONF);
    for (int u = 0; u < 2; u++) {
        struct tg_session *s = mw_session(m, u);
        int sends = fake.nsend;
        struct rec r;
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, 0), "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}");
        assert_int_equal(r.status, 202);
        assert_int_equal(fake.nsend, u == 0 ? sends : sends + 1); /* pinned: never forwarded */
        rec_dispose(&r);
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, 0),
                "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\","
                "\"capabilities\":{\"roots\":{\"listChanged\":true},\"sampling\":{}},\"clientInfo\":{\"name\":\"c\","
                "\"version\":\"1\"}}}");
        cJSON *sent = cJSON_Parse(fake.last_body.base);
        cJSON *caps = cJSON_GetObjectItem(cJSON_GetObjectItem(sent, "params"), "capabilities");
        char *roots = cJSON_PrintUnformatted(cJSON_GetObjectItem(caps, "roots"));
        assert_string_equal(roots, u == 0 ? "{}" : "{\"listChanged\":true}");
        assert_non_null(cJSON_GetObjectItem(caps, "sampling"));
        free(roots);
        cJSON_Delete(sent);
        char answer[160];
        snprintf(answer, sizeof(answer), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"protocolVersion\":\"2025-06-18\"}}", fake.last->gid_str);
        fake_link(m, s, answer);
        rec_dispose(&r);
    }
    mw_free(m);
}

/* A client that declared no capabilities at all: the pinned upstream still hears roots. */
static void initialize_without_capabilities_declares_roots(void **state)
{
    struct mw *m = mw_new_conf(FAKE_LINK, ROOTS_CONF);
    struct tg_session *s = mw_session(m, 0);
    struct rec r;
    rec_init(&r);
    mw_send(m, s, fsink_new(&r, 0),
            "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"2025-06-18\","
            "\"clientInfo\":{\"name\":\"c\",\"version\":\"1\"}}}");
    assert_non_null(strstr(fake.last_body.base, "\"capabilities\":{\"roots\":{}}"));
    char answer[160];
    snprintf(answer, sizeof(answer), "{\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"protocolVersion\":\"2025-06-18\"}}", fake.last->gid_str);
    fake_link(m, s, answer);
    rec_dispose(&r);
    mw_free(m);
}

/* Streamable HTTP: a roots/list on a call's answer stream is answered by the gateway whatever the
 * stream can carry (a full stream, a batch's answer only, a 2026 client's exchange that would
 * otherwise get it as input_required), and the stream's client sees nothing of it. */
static void http_stream_roots_list_answered(void **state)
{
    static const unsigned flags[] = {0, TG_SINK_ANSWER_ONLY, TG_SINK_STATELESS};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        struct mw *m = mw_new_conf(FAKE_HTTP, ROOTS_CONF);
        struct tg_session *s = mw_session(m, 0);
        struct rec r;
        rec_init(&r);
        mw_send(m, s, fsink_new(&r, flags[i]),
                "{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\"}}");
        struct tg_call *k = fake.last;
        assert_non_null(k);
        tg_call_stream(k);
        const char *req = "{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"roots/list\"}";
        assert_int_equal(tg_call_upstream_message(k, req, strlen(req), NULL), 0);
        assert_int_equal(r.nmessage, 0);
        assert_int_equal(r.nanswer, 0);
        assert_string_equal(fake.replies.base, "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":" PINNED "}\n");
        fake_answer(k, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}");
        assert_int_equal(r.nanswer, 1);
        rec_dispose(&r);
        mw_free(m);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(server_roots_list_answered_by_the_gateway),
        cmocka_unit_test(without_pins_roots_list_is_relayed),
        cmocka_unit_test(session_of_a_removed_grant_gets_no_roots),
        cmocka_unit_test(client_list_changed_dropped_and_initialize_declares_roots),
        cmocka_unit_test(initialize_without_capabilities_declares_roots),
        cmocka_unit_test(http_stream_roots_list_answered),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
