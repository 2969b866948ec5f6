/* core/conf/conf.c: loading libconfig files into struct tg_conf, ${VAR} expansion,
 * and "file:line: directive: reason" errors. */
#include "test/unit/unit.h"

#include <unistd.h>
#include <sys/stat.h>

#include "core/conf/conf.h"
#include "policy/jwt.h"
#include "policy/dpop.h"

#include "test/unit/core/conf/conf_harness.h"
#define GRANTS "grants = ( { name = \"local\"; anonymous = true; } );\n"
#define UPSTREAM "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\"; } );\n"
#define MINIMAL LISTEN GRANTS UPSTREAM

/* ---- valid files ----------------------------------------------------------------- */

static void annotated_example_loads(void **state)
{
    /* As the binary loads it by default: conf/tollgate.conf from the source tree's root
     * (relative paths inside the file then resolve as they do for an operator). */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir(TG_SOURCE_DIR), 0);
    const char *path = "conf/tollgate.conf";
    for (int with_token = 0; with_token <= 1; with_token++) {
        if (with_token)
            setenv("COWORK_TOKEN", "s3cret", 1);
        else
            unsetenv("COWORK_TOKEN");
        struct tg_buf err;
        tg_buf_init(&err);
        struct tg_conf *c = tg_conf_load(path, &err);
        tg_buf_append(&err, "", 1);
        if (c == NULL)
            fail_msg("%s does not load:\n%s", path, err.base);
        assert_int_equal(err.len, 1);
        assert_int_equal(c->refcnt, 1);
        assert_string_equal(c->path, path);
        assert_int_equal(c->nlisteners, 1);
        assert_string_equal(c->listeners[0].address, "127.0.0.1");
        assert_int_equal(c->listeners[0].port, 8080);
        assert_int_equal(c->listeners[0].tls, 0);
        assert_int_equal(c->admin.enabled, 1);
        assert_int_equal(c->admin.port, 9090);
        assert_int_equal(c->admin.has_token, 0);
        assert_int_equal(c->limits.header_bytes, 16384);
        assert_int_equal(c->limits.json_depth, 64);
        assert_int_equal(c->limits.drain_timeout_ms, 10000);
        assert_int_equal(c->ngrants, 1);
        assert_string_equal(c->grants[0].name, "local");
        assert_int_equal(c->grants[0].anonymous, 1);
        assert_int_equal(c->grants[0].has_token, 0);
        assert_int_equal(c->nupstreams, 1);
        const struct tg_upstream_conf *u = &c->upstreams[0];
        assert_string_equal(u->name, "cowork-os");
        assert_string_equal(u->host, "127.0.0.1");
        assert_int_equal(u->port, 3333);
        assert_string_equal(u->path, "/mcp");
        assert_string_equal(u->authority, "127.0.0.1:3333");
        assert_int_equal(u->is_default, 1);
        assert_int_equal(u->init_local, 1);
        assert_int_equal(u->pool_size, 16);
        assert_int_equal(u->queue_max, 1024);
        assert_int_equal(u->queue_timeout_ms, 5000);
        assert_int_equal(u->pool_idle_timeout_ms, 30000);
        assert_int_equal(u->connect_timeout_ms, 3000);
        assert_int_equal(u->call_timeout_ms, 60000);
        assert_int_equal(c->default_upstream, 0);
        assert_int_equal(u->nheaders, 1);
        assert_string_equal(u->headers[0].name, "Authorization");
        assert_string_equal(u->headers[0].value, with_token ? "Bearer s3cret" : "Bearer devtoken");
        int idx = -1;
        assert_ptr_equal(tg_conf_find_upstream(c, TG_SLICE("cowork-os"), &idx), u);
        assert_int_equal(idx, 0);
        assert_null(tg_conf_find_upstream(c, TG_SLICE("cowork"), NULL));
        assert_null(tg_conf_find_upstream(c, TG_SLICE("cowork-os2"), NULL));
        /* Refcounting: a reference outlives the loader's. */
        assert_ptr_equal(tg_conf_ref(c), c);
        assert_int_equal(c->refcnt, 2);
        tg_conf_unref(c);
        assert_int_equal(c->refcnt, 1);
        tg_conf_unref(c);
        tg_buf_dispose(&err);
    }
    unsetenv("COWORK_TOKEN");
    tg_conf_unref(NULL);
    assert_int_equal(chdir(cwd), 0);
}

static void minimal_defaults(void **state)
{
    struct loaded l;
    load_ok(&l, MINIMAL);
    struct tg_conf *c = l.c;
    assert_int_equal(c->admin.enabled, 0);
    assert_int_equal(c->limits.max_connections, 10000);
    assert_int_equal(c->limits.header_bytes, 16384);
    assert_int_equal(c->limits.body_bytes, 4194304);
    assert_int_equal(c->limits.response_bytes, 67108864);
    assert_int_equal(c->limits.sessions_per_grant, 1000);
    assert_int_equal(c->limits.inflight_per_session, 64);
    assert_int_equal(c->limits.output_high_water, 1048576);
    assert_int_equal(c->upstreams[0].pool_size, 16);
    assert_int_equal(c->upstreams[0].queue_max, 1024);
    assert_int_equal(c->upstreams[0].is_default, 0);
    assert_int_equal(c->upstreams[0].init_local, 0);
    assert_int_equal(c->upstreams[0].nheaders, 0);
    assert_int_equal(c->default_upstream, 0); /* the only upstream */
    loaded_dispose(&l);

    /* Two upstreams and no default: none is the default. */
    load_ok(&l, LISTEN GRANTS "upstreams = ( { name = \"a\"; url = \"http://127.0.0.1:1/\"; },\n"
                              "              { name = \"b\"; url = \"http://127.0.0.1:2/\"; } );\n");
    assert_int_equal(l.c->default_upstream, -1);
    loaded_dispose(&l);
    load_ok(&l, LISTEN GRANTS "upstreams = ( { name = \"a\"; url = \"http://127.0.0.1:1/\"; },\n"
                              "              { name = \"b\"; url = \"http://127.0.0.1:2/\"; default = true; } );\n");
    assert_int_equal(l.c->default_upstream, 1);
    loaded_dispose(&l);
}

static void values_in_range_are_kept(void **state)
{
    struct loaded l;
    load_ok(&l, LISTEN GRANTS
            "limits = { header_bytes = 1024; json_depth = 1000; drain_timeout_ms = 0; max_connections = 1000000; };\n"
            "log = { level = \"debug\"; format = \"json\"; file = \"\"; };\n"
            "admin = { port = 0; token_sha256 = \"5E884898DA28047151D0E56F8DC6292773603D0D6AABBDD62A11EF721D1542D8\"; };\n"
            "upstreams = ( { name = \"up.v2_x-1\"; url = \"http://[::1]:8081\"; initialize = \"forward\";\n"
            "  call_timeout_ms = 10; connect_timeout_ms = 600000;\n"
            "  pool = { size = 1; queue = 0; queue_timeout_ms = 1; idle_timeout_ms = 100; };\n"
            "  headers = { X-Api-Key = \"k-${TG_T_SET}\"; Authorization = \"Bearer ${TG_T_UNSET:-dflt}\"; }; } );\n");
    struct tg_conf *c = l.c;
    assert_int_equal(c->limits.header_bytes, 1024);
    assert_int_equal(c->limits.json_depth, 1000);
    assert_int_equal(c->limits.drain_timeout_ms, 0);
    assert_int_equal(c->limits.max_connections, 1000000);
    assert_int_equal(c->log_level, 3);
    assert_int_equal(c->log_format, 1);
    assert_int_equal(c->admin.enabled, 1);
    assert_int_equal(c->admin.port, 0);
    assert_string_equal(c->admin.address, "127.0.0.1");
    assert_int_equal(c->admin.has_token, 1);
    assert_int_equal(c->admin.token_sha256[0], 0x5e);
    assert_int_equal(c->admin.token_sha256[31], 0xd8);
    const struct tg_upstream_conf *u = &c->upstreams[0];
    assert_string_equal(u->name, "up.v2_x-1");
    assert_string_equal(u->host, "::1");
    assert_int_equal(u->port, 8081);
    assert_string_equal(u->authority, "[::1]:8081");
    assert_string_equal(u->path, "/");
    assert_int_equal(u->call_timeout_ms, 10);
    assert_int_equal(u->connect_timeout_ms, 600000);
    assert_int_equal(u->pool_size, 1);
    assert_int_equal(u->queue_max, 0);
    assert_int_equal(u->queue_timeout_ms, 1);
    assert_int_equal(u->pool_idle_timeout_ms, 100);
    assert_int_equal(u->nheaders, 2);
    assert_string_equal(u->headers[0].name, "X-Api-Key");
    assert_string_equal(u->headers[0].value, "k-val");
    assert_string_equal(u->headers[1].value, "Bearer dflt");
    loaded_dispose(&l);
}

static void url_forms(void **state)
{
    static const struct {
        const char *url, *host, *path, *authority;
        int port;
    } v[] = {
        {"http://127.0.0.1:3333/mcp", "127.0.0.1", "/mcp", "127.0.0.1:3333", 3333},
        {"http://localhost/mcp?x=1", "localhost", "/mcp?x=1", "localhost", 80},
        {"http://example.com", "example.com", "/", "example.com", 80},
        {"http://[::1]/a/b", "::1", "/a/b", "[::1]", 80},
        {"http://[2001:db8::1]:65535/", "2001:db8::1", "/", "[2001:db8::1]:65535", 65535},
        {"http://h:1/", "h", "/", "h:1", 1},
        {"http://${TG_T_SET}:${TG_T_PORT}/p", "val", "/p", "val:4444", 4444},
        {"https://example.com/mcp", "example.com", "/mcp", "example.com", 443}, /* the system CA bundle */
        {"https://127.0.0.1:8443/", "127.0.0.1", "/", "127.0.0.1:8443", 8443},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        char text[1024];
        snprintf(text, sizeof(text), LISTEN GRANTS "upstreams = ( { name = \"u\"; url = \"%s\"; } );\n", v[i].url);
        struct loaded l;
        load_ok(&l, text);
        const struct tg_upstream_conf *u = &l.c->upstreams[0];
        assert_string_equal(u->host, v[i].host);
        assert_string_equal(u->path, v[i].path);
        assert_string_equal(u->authority, v[i].authority);
        assert_int_equal(u->port, v[i].port);
        assert_int_equal(u->tls, strncmp(v[i].url, "https:", 6) == 0);
        assert_int_equal(u->tls_ctx != NULL, u->tls);
        loaded_dispose(&l);
    }
}

/* ---- errors ------------------------------------------------------------------------ */

static void out_of_range_has_line(void **state)
{
    const char *text = MINIMAL "\n# a comment\nlimits = {\n  body_bytes = 2048;\n  header_bytes = 5;\n};\n";
    expect_error(text, line_of(text, "header_bytes = 5"), "limits.header_bytes", "5 is out of range 1024..1048576");
    text = MINIMAL "limits = { json_depth = 1001; };\n";
    expect_error(text, line_of(text, "json_depth"), "limits.json_depth", "1001 is out of range 2..1000");
    text = MINIMAL "limits = { tls_handshake_slice_ms = 1001; };\n";
    expect_error(text, line_of(text, "slice"), "limits.tls_handshake_slice_ms", "1001 is out of range 0..1000");
    text = MINIMAL "limits = { json_depth = \"64\"; };\n";
    expect_error(text, line_of(text, "json_depth"), "limits.json_depth", "must be an integer");
    text = LISTEN GRANTS "upstreams = (\n { name = \"u1\"; url = \"http://127.0.0.1:1/\";\n"
                         "   pool = {\n     size = 0;\n   }; } );\n";
    expect_error(text, line_of(text, "size = 0"), "upstreams.u1.pool.size", "0 is out of range 1..4096");
    text = LISTEN GRANTS "upstreams = (\n { name = \"u1\"; url = \"http://127.0.0.1:1/\";\n"
                         "   call_timeout_ms = 5; } );\n";
    expect_error(text, line_of(text, "call_timeout_ms"), "upstreams.u1.call_timeout_ms", "5 is out of range");
    text = "listen = (\n { address = \"127.0.0.1\";\n   port = 70000; } );\n" GRANTS UPSTREAM;
    expect_error(text, line_of(text, "port = 70000"), "listen[0].port", "70000 is out of range 0..65535");
    text = MINIMAL "limits = { header_bytes = 99999999999; };\n";
    expect_error(text, line_of(text, "header_bytes"), "limits.header_bytes", "out of range");
}

static void unknown_directives(void **state)
{
    const char *text = MINIMAL "\n\nbogus = 1;\n";
    expect_error(text, line_of(text, "bogus"), "bogus", "unknown directive");
    text = MINIMAL "limits = {\n  header_byte = 2048;\n};\n";
    expect_error(text, line_of(text, "header_byte"), "limits.header_byte", "unknown directive");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:1/\";\n  timeout = 5; } );\n";
    expect_error(text, line_of(text, "timeout"), "upstreams[0].timeout", "unknown directive");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:1/\";\n"
                         "  pool = { size = 2;\n    sise = 3; }; } );\n";
    expect_error(text, line_of(text, "sise"), "upstreams.u1.pool.sise", "unknown directive");
    text = "listen = ( { address = \"127.0.0.1\"; port = 8080;\n  tsl = 1; } );\n" GRANTS UPSTREAM;
    expect_error(text, line_of(text, "tsl"), "listen[0].tsl", "unknown directive");
    text = MINIMAL "log = {\n  levle = \"info\"; };\n";
    expect_error(text, line_of(text, "levle"), "log.levle", "unknown directive");
    text = LISTEN UPSTREAM "grants = ( { name = \"a\"; anonymous = true;\n  token = \"x\"; } );\n";
    expect_error(text, line_of(text, "token ="), "grants[0].token", "unknown directive");
}

static void syntax_error_has_line(void **state)
{
    const char *text = MINIMAL "limits = {\n  body_bytes = 4096;\n  header_bytes 2048;\n};\n";
    struct loaded l;
    load(&l, text);
    assert_null(l.c);
    char prefix[600];
    snprintf(prefix, sizeof(prefix), "%s:%d: syntax: ", l.path, line_of(text, "header_bytes"));
    if (strncmp(l.err.base, prefix, strlen(prefix)) != 0)
        fail_msg("expected \"%s...\", got: %s", prefix, l.err.base);
    loaded_dispose(&l);
    text = "\n\n\nlisten = ( { port = 8080; } \n";
    load(&l, text);
    assert_null(l.c);
    assert_non_null(strstr(l.err.base, ": syntax: "));
    loaded_dispose(&l);
    /* An unreadable file. */
    struct tg_buf err;
    tg_buf_init(&err);
    char missing[600];
    snprintf(missing, sizeof(missing), "%s/does-not-exist.conf", tmpdir);
    assert_null(tg_conf_load(missing, &err));
    tg_buf_append(&err, "", 1);
    char want[700];
    snprintf(want, sizeof(want), "%s: cannot open: No such file or directory\n", missing);
    assert_string_equal(err.base, want);
    tg_buf_dispose(&err);
}

static void env_errors_in_conf(void **state)
{
    const char *text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://${TG_T_UNSET}/mcp\"; } );\n";
    expect_error(text, line_of(text, "url ="), "upstreams.u1.url", "environment variable is not set: TG_T_UNSET");
    text = "listen = ( { address = \"${TG_T_UNSET2}\"; port = 1; } );\n" GRANTS UPSTREAM;
    expect_error(text, 1, "listen[0].address", "TG_T_UNSET2");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://${1x}/mcp\"; } );\n";
    expect_error(text, line_of(text, "url ="), "upstreams.u1.url", "bad variable name");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1/\";\n"
                         "  headers = {\n    X-K = \"${TG_T_UNSET}\"; }; } );\n";
    expect_error(text, line_of(text, "X-K"), "upstreams.u1.headers.X-K", "TG_T_UNSET");
}

/* A header value with an unterminated "${": the message ends at the reason (it
 * used to print an uninitialised buffer after it). */
static void header_unterminated_var_message(void **state)
{
    const char *text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1/\";\n"
                                     "  headers = {\n    X-K = \"abc${TG_T_SET\"; }; } );\n";
    struct loaded l;
    load(&l, text);
    assert_null(l.c);
    char want[700];
    snprintf(want, sizeof(want), "%s:%d: upstreams.u1.headers.X-K: unterminated ${\n", l.path, line_of(text, "X-K"));
    int same = strcmp(l.err.base, want) == 0;
    if (!same)
        print_error("got:      %s", l.err.base);
    loaded_dispose(&l);
    if (!same)
        fail_msg("expected: %s", want);
}

/* Bytes between the ']' of an IPv6 literal and the path must be a port: a typo such as
 * "http://[::1]8080/mcp" is refused, not loaded as [::1]:80. */
static void url_junk_after_ipv6_literal(void **state)
{
    const char *text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://[::1]8080/mcp\"; } );\n";
    expect_error(text, line_of(text, "http://["), "url", NULL);
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://[::1]x/\"; } );\n";
    expect_error(text, line_of(text, "http://["), "url", NULL);
}

static void upstream_errors(void **state)
{
    const char *text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"ftp://x/\"; } );\n";
    expect_error(text, line_of(text, "ftp"), "url", "must start with http:// or https://");
    /* https:// upstreams: tls = { ... } is checked, and its files are read at load. */
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://h/\";\n  tls = { ca = \"/x\"; }; } );\n";
    expect_error(text, line_of(text, "tls ="), "upstreams.u1.tls", "is for https:// upstreams");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; command = [ \"cat\" ];\n  tls = { }; } );\n";
    expect_error(text, line_of(text, "tls ="), "tls", "is for https:// upstreams");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"https://h/\";\n  tls = { ca = \"/nonexistent/ca.pem\"; }; } );\n";
    expect_error(text, line_of(text, "ca ="), "ca", "cannot open /nonexistent/ca.pem: No such file or directory");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"https://h/\";\n  tls = { cert = \"/c.pem\"; }; } );\n";
    expect_error(text, line_of(text, "tls ="), "upstreams.u1.tls", "cert and key go together");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"https://h/\";\n  tls = { verify = false; ca = \"/x\"; }; } );\n";
    expect_error(text, line_of(text, "tls ="), "ca", "has no use with verify = false");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"https://h/\";\n  tls = { server_name = \"a b\"; }; } );\n";
    expect_error(text, line_of(text, "tls ="), "server_name", "is not a host name");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"https://h/\";\n  tls = { colour = 1; }; } );\n";
    expect_error(text, line_of(text, "tls ="), "upstreams.u1.tls.colour", "unknown directive");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http:///mcp\"; } );\n";
    expect_error(text, line_of(text, "http:///"), "url", "has no host");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://h:/mcp\"; } );\n";
    expect_error(text, line_of(text, "http://h"), "url", "empty port");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://h:0/mcp\"; } );\n";
    expect_error(text, line_of(text, "http://h"), "url", "invalid port");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://h:65536/mcp\"; } );\n";
    expect_error(text, line_of(text, "http://h"), "url", "invalid port");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://h:99999999999999999999/\"; } );\n";
    expect_error(text, line_of(text, "http://h"), "url", "invalid port");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://h:8a/\"; } );\n";
    expect_error(text, line_of(text, "http://h"), "url", "invalid port");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://[::1/\"; } );\n";
    expect_error(text, line_of(text, "http://["), "url", "IPv6");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://h/a b\"; } );\n";
    expect_error(text, line_of(text, "http://h"), "url", "spaces");
    text = LISTEN GRANTS "upstreams = ( { name = \"u1\";\n  url = \"http://h/a#frag\"; } );\n";
    expect_error(text, line_of(text, "http://h"), "url", "fragment");
    text = LISTEN GRANTS "\nupstreams = ( {\n  name = \"u1\"; } );\n";
    expect_error(text, line_of(text, "upstreams = ( {"), "upstreams.u1.url", "is required");

    /* Duplicate names: reported on the second one. */
    text = LISTEN GRANTS "upstreams = (\n  { name = \"same\"; url = \"http://127.0.0.1:1/\"; },\n"
                         "  { name = \"same\"; url = \"http://127.0.0.1:2/\"; }\n);\n";
    expect_error(text, line_of(text, "2/\""), "upstreams[1]", "duplicate upstream name \"same\"");
    /* Reserved names (they are gateway paths) and malformed names. */
    static const char *const bad_names[] = {"mcp", "sse", "messages", "ws", "admin", "healthz", "readyz",
                                            "metrics", ".well-known", "", "a/b", "a b", "caf\xC3\xA9",
                                            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"};
    for (size_t i = 0; i < sizeof(bad_names) / sizeof(bad_names[0]); i++) {
        char t[1024];
        snprintf(t, sizeof(t), LISTEN GRANTS "upstreams = ( {\n  name = \"%s\"; url = \"http://127.0.0.1:1/\"; } );\n",
                 bad_names[i]);
        expect_error(t, line_of(t, "  name = \""), "name", "must be 1-64 of [A-Za-z0-9._-]");
    }
    struct loaded l;
    load_ok(&l, LISTEN GRANTS "upstreams = ( { name = \"mcp2\"; url = \"http://127.0.0.1:1/\"; },\n"
                              "  { name = \"MCP\"; url = \"http://127.0.0.1:1/\"; } );\n");
    loaded_dispose(&l);
    text = LISTEN GRANTS "upstreams = (\n  { name = \"a\"; url = \"http://127.0.0.1:1/\"; default = true; },\n"
                         "  { name = \"b\"; url = \"http://127.0.0.1:2/\"; default = true; }\n);\n";
    expect_error(text, line_of(text, "\"b\""), "upstreams.b", "only one upstream may be default");
    text = LISTEN GRANTS "upstreams = ( { name = \"a\"; url = \"http://127.0.0.1:1/\";\n  default = 1; } );\n";
    expect_error(text, line_of(text, "default"), "upstreams.a.default", "must be true or false");
    text = LISTEN GRANTS "upstreams = ( { name = \"a\"; url = \"http://127.0.0.1:1/\";\n  initialize = \"yes\"; } );\n";
    expect_error(text, line_of(text, "initialize"), "initialize", "must be \"forward\" or \"local\"");
    text = LISTEN GRANTS "upstreams = ( { name = \"a\"; url = \"http://127.0.0.1:1/\";\n"
                         "  headers = {\n    Host = \"evil\"; }; } );\n";
    expect_error(text, line_of(text, "Host"), "upstreams.a.headers.Host", "is not a header the gateway lets you set");
    text = LISTEN GRANTS "upstreams = ( { name = \"a\"; url = \"http://127.0.0.1:1/\";\n"
                         "  headers = {\n    Mcp-Session-Id = \"x\"; }; } );\n";
    expect_error(text, line_of(text, "Mcp-Session-Id"), "upstreams.a.headers.Mcp-Session-Id", "is not a header");
    text = LISTEN GRANTS "upstreams = ( { name = \"a\"; url = \"http://127.0.0.1:1/\";\n"
                         "  headers = {\n    X-A = \"a\\nb\"; }; } );\n";
    expect_error(text, line_of(text, "X-A"), "upstreams.a.headers.X-A", "control character");
    text = LISTEN GRANTS "upstreams = ( { name = \"a\"; url = \"http://127.0.0.1:1/\";\n"
                         "  headers = {\n    X-A = 5; }; } );\n";
    expect_error(text, line_of(text, "X-A"), "upstreams.a.headers.X-A", "must be a string");
    text = LISTEN GRANTS "upstreams = ( );\n";
    expect_error(text, line_of(text, "upstreams"), "upstreams", "non-empty list");
    text = LISTEN GRANTS;
    expect_error(text, 0, "upstreams", "non-empty list");
}

static void grant_and_token_errors(void **state)
{
    /* mTLS: listen[].tls.client_ca / client_auth, grants[].tls_subject. */
    {
        const char *t = "listen = ( { address = \"127.0.0.1\"; port = 1;\n  tls = { cert = \"/c\"; key = \"/k\"; client_auth = \"sometimes\"; }; } );\n"
                        GRANTS "upstreams = ( { name = \"u\"; url = \"http://h/\"; } );\n";
        expect_error(t, line_of(t, "client_auth"), "client_auth", "must be \"none\", \"optional\" or \"required\"");
        t = "listen = ( { address = \"127.0.0.1\"; port = 1;\n  tls = { cert = \"/c\"; key = \"/k\"; session_timeout_s = 86401; }; } );\n"
            GRANTS "upstreams = ( { name = \"u\"; url = \"http://h/\"; } );\n";
        expect_error(t, line_of(t, "session_timeout_s"), "listen[0].tls.session_timeout_s", "86401 is out of range 0..86400");
        t = "listen = ( { address = \"127.0.0.1\"; port = 1;\n  tls = { cert = \"/c\"; key = \"/k\"; client_auth = \"required\"; }; } );\n"
            GRANTS "upstreams = ( { name = \"u\"; url = \"http://h/\"; } );\n";
        expect_error(t, line_of(t, "client_auth"), "client_auth", "needs client_ca");
        t = LISTEN "grants = ( { name = \"a\"; tls_subject = \"alice\"; },\n  { name = \"b\"; tls_subject = \"alice\"; } );\n"
                   "upstreams = ( { name = \"u\"; url = \"http://h/\"; } );\n";
        expect_error(t, line_of(t, "name = \"b\""), "tls_subject", "already names grant a");
        t = LISTEN "grants = ( { name = \"a\"; tls_subject = \"alice\"; } );\nupstreams = ( { name = \"u\"; url = \"http://h/\"; } );\n";
        struct loaded l;
        load_ok(&l, t);
        assert_string_equal(l.c->grants[0].tls_subject, "alice");
        assert_int_equal(l.c->limits.tls_handshake_timeout_ms, 5000);
        assert_int_equal(l.c->limits.tls_handshake_slice_ms, 4);
        loaded_dispose(&l);
    }

    const char *text = LISTEN UPSTREAM "grants = ( { name = \"a\";\n  token_sha256 = \"abcd\"; } );\n";
    expect_error(text, line_of(text, "abcd"), "token_sha256", "must be 64 hex digits");
    text = LISTEN UPSTREAM "grants = ( { name = \"a\";\n"
                           "  token_sha256 = \"zz884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8\"; } );\n";
    expect_error(text, line_of(text, "zz88"), "token_sha256", "must be 64 hex digits");
    text = LISTEN UPSTREAM "grants = ( { name = \"a\";\n"
                           "  token_sha256 = \"5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d80\"; } );\n";
    expect_error(text, line_of(text, "5e88"), "token_sha256", "must be 64 hex digits");
    text = LISTEN UPSTREAM "admin = {\n  token_sha256 = \"nothex\"; };\n";
    expect_error(text, line_of(text, "nothex"), "token_sha256", "must be 64 hex digits");
    text = LISTEN UPSTREAM "grants = (\n  { name = \"a\"; } );\n";
    expect_error(text, line_of(text, "\"a\""), "grants[0]", "needs token_sha256, tls_subject, anonymous = true");
    text = LISTEN UPSTREAM "grants = (\n  { name = \"a\"; anonymous = true; },\n  { name = \"b\"; anonymous = true; } );\n";
    expect_error(text, line_of(text, "\"b\""), "grants[1]", "only one grant may be anonymous");
    text = LISTEN UPSTREAM "grants = (\n  { name = \"a\"; anonymous = true; },\n"
                           "  { name = \"a\"; token_sha256 = \"5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8\"; } );\n";
    expect_error(text, line_of(text, "5e88"), "grants[1]", "duplicate grant name \"a\"");
    /* A valid token grant. */
    struct loaded l;
    load_ok(&l, LISTEN UPSTREAM "grants = ( { name = \"alice\"; token_sha256 = "
                                "\"5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8\"; } );\n");
    assert_int_equal(l.c->ngrants, 1);
    assert_int_equal(l.c->grants[0].has_token, 1);
    assert_int_equal(l.c->grants[0].anonymous, 0);
    assert_int_equal(l.c->grants[0].token_sha256[1], 0x88);
    loaded_dispose(&l);
}

/* grants[].issuers: the JWT issuers whose tokens may name a grant. Each must be a jwt[].issuer,
 * byte for byte; a grant reached by nothing else needs it; a misspelt key is an error. */
static const char *write_file(const char *name, const char *content, mode_t mode);

static void grant_issuers(void **state)
{
    write_file("iss-jwks.json", "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"k\","
                                "\"k\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}\n", 0644);
#define JWT2 "jwt = ( { issuer = \"https://a.example/\"; audience = \"t\"; jwks_file = \"iss-jwks.json\"; },\n" \
             "        { issuer = \"https://b.example/\"; audience = \"t\"; jwks_file = \"iss-jwks.json\"; } );\n"
    struct loaded l;
    load_ok(&l, LISTEN UPSTREAM JWT2 "grants = ( { name = \"a\"; issuers = [ \"https://a.example/\" ]; },\n"
                                     " { name = \"ab\"; issuers = [ \"https://a.example/\", \"https://b.example/\" ];\n"
                                     "   token_sha256 = \"5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8\"; } );\n");
    assert_int_equal(l.c->grants[0].nissuers, 1);
    assert_string_equal(l.c->grants[0].issuers[0], "https://a.example/");
    assert_int_equal(l.c->grants[0].jwt_only, 1);
    assert_int_equal(l.c->grants[1].nissuers, 2);
    assert_string_equal(l.c->grants[1].issuers[1], "https://b.example/");
    loaded_dispose(&l);

    /* an issuer no jwt[] entry has: compared exactly, so a missing trailing / is one */
    const char *text = LISTEN UPSTREAM JWT2 "grants = ( { name = \"a\";\n issuers = [ \"https://a.example\" ]; } );\n";
    expect_error(text, line_of(text, "issuers"), "issuers", "grant a: \"https://a.example\" is no jwt[].issuer");
    text = LISTEN UPSTREAM "grants = ( { name = \"x\"; anonymous = true;\n issuers = [ \"https://a.example/\" ]; } );\n";
    expect_error(text, line_of(text, "issuers"), "issuers", "grant x: \"https://a.example/\" is no jwt[].issuer");
    /* a misspelt key, a wrong shape, an empty list, a repeat */
    text = LISTEN UPSTREAM JWT2 "grants = ( { name = \"a\"; token_sha256 = \"5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8\";\n"
                                " issuer = [ \"https://a.example/\" ]; } );\n";
    expect_error(text, line_of(text, "issuer = ["), "grants[0].issuer", "unknown directive");
    text = LISTEN UPSTREAM JWT2 "grants = ( { name = \"a\";\n issuers = \"https://a.example/\"; } );\n";
    expect_error(text, line_of(text, "issuers"), "grants[0].issuers", "must be a non-empty array");
    text = LISTEN UPSTREAM JWT2 "grants = ( { name = \"a\";\n issuers = [ ]; } );\n";
    expect_error(text, line_of(text, "issuers"), "grants[0].issuers", "must be a non-empty array");
    text = LISTEN UPSTREAM JWT2 "grants = ( { name = \"a\";\n issuers = [ \"https://a.example/\", \"https://a.example/\" ]; } );\n";
    expect_error(text, line_of(text, "issuers"), "grants[0].issuers", "lists \"https://a.example/\" twice");
    /* with jwt issuers configured, a grant with no credential and no issuers is reached by nothing */
    text = LISTEN UPSTREAM JWT2 "grants = (\n { name = \"a\"; } );\n";
    expect_error(text, line_of(text, "\"a\""), "grants[0]", "or issuers = [");
#undef JWT2
}

/* grants[].attributes: what a policy's ${grant.NAME} binds arguments to; names as templates spell
 * them, values strings (with ${VAR}). */
static void grant_attributes(void **state)
{
    (void)state;
    setenv("TG_TEST_REGION", "eu", 1);
    struct loaded l;
    load_ok(&l, LISTEN UPSTREAM "grants = ( { name = \"a\"; anonymous = true;\n"
                                " attributes = { tenant = \"acme\"; region = \"${TG_TEST_REGION}\"; }; } );\n");
    assert_int_equal(l.c->grants[0].nattributes, 2);
    assert_string_equal(l.c->grants[0].attributes[0], "tenant");
    assert_string_equal(l.c->grants[0].attributes[1], "acme");
    assert_string_equal(l.c->grants[0].attributes[3], "eu");
    loaded_dispose(&l);
    const char *text = LISTEN UPSTREAM "grants = ( { name = \"a\"; anonymous = true;\n attributes = [ \"acme\" ]; } );\n";
    expect_error(text, line_of(text, "attributes"), "grants[0].attributes", "must be a group of at most 64 strings");
    text = LISTEN UPSTREAM "grants = ( { name = \"a\"; anonymous = true;\n attributes = { tenant = 5; }; } );\n";
    expect_error(text, line_of(text, "attributes"), "grants[0].attributes", "tenant must be a string");
    text = LISTEN UPSTREAM "grants = ( { name = \"a\"; anonymous = true;\n attributes = { tenant = \"${TG_TEST_UNSET_VAR}\"; }; } );\n";
    unsetenv("TG_TEST_UNSET_VAR");
    expect_error(text, line_of(text, "attributes"), "grants[0].attributes", "TG_TEST_UNSET_VAR");
}

/* jwt[].grant: every token of an issuer names one grant (an IdP's tokens carry users, not grants).
 * The grant must take the issuer; it excludes grant_claim. */
static void jwt_grant(void **state)
{
    write_file("iss-jwks.json", "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"k\","
                                "\"k\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}\n", 0644);
    struct loaded l;
    load_ok(&l, LISTEN UPSTREAM "jwt = ( { issuer = \"https://a.example/\"; audience = \"t\"; jwks_file = \"iss-jwks.json\";\n"
                                "          grant = \"staff\"; } );\n"
                                "grants = ( { name = \"staff\"; issuers = [ \"https://a.example/\" ]; } );\n");
    assert_string_equal(l.c->jwt[0].grant, "staff");
    assert_null(l.c->jwt[0].grant_claim);
    loaded_dispose(&l);
    const char *text = LISTEN UPSTREAM "jwt = ( { issuer = \"https://a.example/\"; audience = \"t\"; jwks_file = \"iss-jwks.json\";\n"
                                      "          grant = \"staff\"; grant_claim = \"team\"; } );\n"
                                      "grants = ( { name = \"staff\"; issuers = [ \"https://a.example/\" ]; } );\n";
    expect_error(text, line_of(text, "grant = "), "grant", "grant and grant_claim exclude each other");
    text = LISTEN UPSTREAM "jwt = ( { issuer = \"https://a.example/\"; audience = \"t\"; jwks_file = \"iss-jwks.json\";\n"
                           "          grant = \"nobody\"; } );\n"
                           "grants = ( { name = \"staff\"; issuers = [ \"https://a.example/\" ]; } );\n";
    expect_error(text, line_of(text, "grant = "), "grant", "\"nobody\" is no grant that lists this issuer");
    text = LISTEN UPSTREAM "jwt = ( { issuer = \"https://a.example/\"; audience = \"t\"; jwks_file = \"iss-jwks.json\";\n"
                           "          grant = \"solo\"; } );\n"
                           "grants = ( { name = \"staff\"; issuers = [ \"https://a.example/\" ]; },\n"
                           "  { name = \"solo\"; token_sha256 = \"5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8\"; } );\n";
    expect_error(text, line_of(text, "grant = "), "grant", "\"solo\" is no grant that lists this issuer");
}

static void other_errors(void **state)
{
    const char *text = GRANTS UPSTREAM;
    expect_error(text, 0, "listen", "non-empty list");
    text = "listen = (\n  { address = \"127.0.0.1\"; } );\n" GRANTS UPSTREAM;
    expect_error(text, line_of(text, "{ address"), "listen[0].port", "is required");
    text = MINIMAL "log = {\n  level = \"loud\"; };\n";
    expect_error(text, line_of(text, "loud"), "log.level", "must be error, warn, info or debug");
    text = MINIMAL "log = {\n  format = \"xml\"; };\n";
    expect_error(text, line_of(text, "xml"), "log.format", "must be logfmt or json");
    text = MINIMAL "limits = 5;\n";
    expect_error(text, line_of(text, "limits"), "limits", "must be a group");
    text = "listen = ( { address = \"127.0.0.1\"; port = 1;\n  tls = { cert = \"c.pem\"; }; } );\n" GRANTS UPSTREAM;
    expect_error(text, line_of(text, "tls"), "listen[0].tls.key", "is required");
    /* stdio upstreams: initialize = "local" makes no sense, url and command exclude each other */
    text = "listen = ( { port = 0; } );\n" GRANTS "upstreams = ( { name = \"x\"; command = [ \"node\" ];\n  initialize = \"local\"; } );\n";
    expect_error(text, line_of(text, "initialize"), "initialize", "is for Streamable HTTP upstreams");
    text = "listen = ( { port = 0; } );\n" GRANTS "upstreams = ( { name = \"x\"; url = \"http://127.0.0.1:1/mcp\";\n  command = [ \"node\" ]; } );\n";
    expect_error(text, line_of(text, "command"), "command", "either url (HTTP) or command (stdio)");
    /* Every error is reported, not only the first. */
    struct loaded l;
    load(&l, MINIMAL "limits = { header_bytes = 1; body_bytes = 1; };\nfoo = 1;\n");
    assert_null(l.c);
    int lines = 0;
    for (const char *p = l.err.base; *p; p++)
        lines += *p == '\n';
    assert_int_equal(lines, 3);
    loaded_dispose(&l);
}

/* ---- pinned roots ------------------------------------------------------------------------- */

#define ROOTS_UP(r) "upstreams = ( { name = \"fs\"; command = [ \"node\" ];\n  roots = " r "; } );\n"

/* The roots/list result an upstream's roots = … directive makes, or fails. */
static void roots_ok(const char *roots, const char *result)
{
    char text[1024];
    snprintf(text, sizeof(text), LISTEN GRANTS ROOTS_UP("%s"), roots);
    struct loaded l;
    load_ok(&l, text);
    const struct tg_roots *r = tg_conf_roots_for(&l.c->grants[0], &l.c->upstreams[0]);
    assert_non_null(r);
    assert_string_equal(r->result, result);
    loaded_dispose(&l);
}

static void roots_bad(const char *roots, const char *reason)
{
    char text[1024];
    snprintf(text, sizeof(text), LISTEN GRANTS ROOTS_UP("%s"), roots);
    expect_error(text, line_of(text, "roots"), "upstreams.fs.roots[0]", reason);
}

static void pinned_roots(void **state)
{
    /* Normal forms: what the server gets is what was meant, written one way. */
    roots_ok("[ \"file:///srv/data\" ]", "{\"roots\":[{\"uri\":\"file:///srv/data\"}]}");
    roots_ok("[ \"FILE:///srv/data/\" ]", "{\"roots\":[{\"uri\":\"file:///srv/data\"}]}");
    roots_ok("[ \"file://localhost/srv/d%61ta\" ]", "{\"roots\":[{\"uri\":\"file:///srv/data\"}]}");
    roots_ok("[ \"file:///srv/my%20data\", \"file:///\" ]",
             "{\"roots\":[{\"uri\":\"file:///srv/my%20data\"},{\"uri\":\"file:///\"}]}");
    roots_ok("[ \"file:///a/b%7e%2Dc%c3%a9\" ]", "{\"roots\":[{\"uri\":\"file:///a/b~-c%C3%A9\"}]}");
    roots_ok("( { uri = \"file:///srv/data\"; name = \"Data \\\"A\\\"\"; } )",
             "{\"roots\":[{\"uri\":\"file:///srv/data\",\"name\":\"Data \\\"A\\\"\"}]}");
    roots_ok("[ ]", "{\"roots\":[]}"); /* pinned to nothing: the server gets no roots at all */
    /* Anything else is an error, never repaired into something wider. */
    roots_bad("[ \"/srv/data\" ]", "must be a file:// URI");
    roots_bad("[ \"https://example.com/x\" ]", "must be a file:// URI");
    roots_bad("[ \"file://server/share\" ]", "no host but localhost");
    roots_bad("[ \"file:srv\" ]", "must be a file:// URI");
    roots_bad("[ \"file:///srv/../etc\" ]", "\"..\" segment");
    roots_bad("[ \"file:///srv/data/..\" ]", "\"..\" segment");
    roots_bad("[ \"file:///srv/./data\" ]", "\".\" or");
    roots_bad("[ \"file:///srv/%2e%2E/etc\" ]", "percent-encoded");
    roots_bad("[ \"file:///srv/%2E\" ]", "percent-encoded");
    roots_bad("[ \"file:///srv//data\" ]", "empty path segment");
    roots_bad("[ \"file:///srv%2fdata\" ]", "encoded /");
    roots_bad("[ \"file:///srv%5Cdata\" ]", "encoded /");
    roots_bad("[ \"file:///srv%00\" ]", "NUL");
    roots_bad("[ \"file:///srv%2\" ]", "two hex digits");
    roots_bad("[ \"file:///srv/my data\" ]", "percent-encode");
    roots_bad("[ \"file:///srv?x=1\" ]", "a query");
    roots_bad("[ \"file:///srv#top\" ]", "a fragment");
    roots_bad("[ \"file:///srv\\\\data\" ]", "percent-encode");
    roots_bad("[ \"file:///srv/d\xc3\xa9\" ]", "non-ASCII");
    roots_bad("[ 5 ]", "must be a file:// URI string or a group");
    roots_bad("( { name = \"x\"; } )", "needs uri");
    roots_bad("( { uri = \"file:///x\"; name = \"\"; } )", "name must be 1-256 bytes");
    const char *text = LISTEN GRANTS ROOTS_UP("[ \"file:///a\", \"file:///a/\" ]");
    expect_error(text, line_of(text, "roots"), "upstreams.fs.roots[1]", "is pinned twice");
    text = LISTEN GRANTS ROOTS_UP("( { uri = \"file:///x\"; nam = \"x\"; } )");
    expect_error(text, line_of(text, "roots"), "upstreams.fs.roots[0].nam", "unknown directive");
    text = LISTEN GRANTS ROOTS_UP("\"file:///a\"");
    expect_error(text, line_of(text, "roots"), "upstreams.fs.roots", "must be a list of file:// URIs");

    /* A grant's roots override every upstream's for that grant (even one that pins none); other
     * grants keep the upstream's; without either, nothing is pinned. */
    struct loaded l;
    load_ok(&l, LISTEN
            "grants = ( { name = \"ro\"; anonymous = true; roots = [ \"file:///srv/ro\" ]; },\n"
            "  { name = \"rw\"; token_sha256 = \"" "0000000000000000000000000000000000000000000000000000000000000000" "\"; } );\n"
            "upstreams = ( { name = \"fs\"; command = [ \"node\" ]; roots = [ \"file:///srv/fs\" ]; },\n"
            "  { name = \"other\"; command = [ \"node\" ]; } );\n");
    assert_string_equal(tg_conf_roots_for(&l.c->grants[0], &l.c->upstreams[0])->result,
                        "{\"roots\":[{\"uri\":\"file:///srv/ro\"}]}");
    assert_string_equal(tg_conf_roots_for(&l.c->grants[0], &l.c->upstreams[1])->result,
                        "{\"roots\":[{\"uri\":\"file:///srv/ro\"}]}");
    assert_string_equal(tg_conf_roots_for(&l.c->grants[1], &l.c->upstreams[0])->result,
                        "{\"roots\":[{\"uri\":\"file:///srv/fs\"}]}");
    assert_null(tg_conf_roots_for(&l.c->grants[1], &l.c->upstreams[1]));
    assert_null(tg_conf_roots_for(NULL, &l.c->upstreams[1]));
    loaded_dispose(&l);
    text = LISTEN "grants = ( { name = \"g\"; anonymous = true;\n  roots = [ \"file:///srv/../x\" ]; } );\n" UPSTREAM;
    expect_error(text, line_of(text, "roots"), "grants[0].roots[0]", "\"..\" segment");
}

/* ---- tg_conf_expand_env ---------------------------------------------------------------- */

static void expand_ok(const char *in, const char *out)
{
    const char *why = NULL;
    char var[64];
    char *r = tg_conf_expand_env(in, &why, var, sizeof(var));
    if (r == NULL)
        fail_msg("expanding \"%s\" failed: %s", in, why ? why : "?");
    assert_string_equal(r, out);
    free(r);
}

static void expand_fail(const char *in, const char *why_expected, const char *var_expected)
{
    const char *why = NULL;
    char var[64] = "";
    char *r = tg_conf_expand_env(in, &why, var, sizeof(var));
    if (r != NULL)
        fail_msg("expanding \"%s\" gave \"%s\", expected failure (%s)", in, r, why_expected);
    assert_string_equal(why, why_expected);
    if (var_expected)
        assert_string_equal(var, var_expected);
}

/* ---- what start needs, checked at load (so tollgate -t refuses it too) -------------------- */

/* Writes content to tmpdir/name with mode; returns the path (static storage, per call). */
static const char *write_file(const char *name, const char *content, mode_t mode)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(content, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
    return path;
}

static void listen_address_is_an_ip_literal(void **state)
{
    const char *text = "listen = ( { address = \"localhost\"; port = 8080; } );\n" GRANTS UPSTREAM;
    expect_error(text, 1, "address", "\"localhost\" is not an IP address; host names are not looked up");
    text = LISTEN "admin = {\n address = \"my-host.example\"; };\n" GRANTS UPSTREAM;
    expect_error(text, line_of(text, "my-host"), "admin.address", "\"my-host.example\" is not an IP address");
    static const char *const ok[] = {"0.0.0.0", "::", "::1", "fe80::1%lo", "127.0.0.2"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char t[512];
        snprintf(t, sizeof(t), "listen = ( { address = \"%s\"; port = 8080; } );\n" GRANTS UPSTREAM, ok[i]);
        struct loaded l;
        load_ok(&l, t);
        loaded_dispose(&l);
    }
}

static void stdio_command_must_run(void **state)
{
    /* A name not on the PATH, an empty program, a path that is not executable, a folder. */
    const char *text = LISTEN GRANTS "upstreams = ( { name = \"s\";\n command = [ \"tg-no-such-program-29\", \"-y\" ]; } );\n";
    expect_error(text, line_of(text, "command"), "command", "\"tg-no-such-program-29\" is not found on the PATH the process gets");
    write_file("not-exec.sh", "#!/bin/sh\nexit 0\n", 0644);
    text = LISTEN GRANTS "upstreams = ( { name = \"s\";\n command = [ \"./not-exec.sh\" ]; } );\n";
    char want[700];
    snprintf(want, sizeof(want), "%s/./not-exec.sh is not an executable file", tmpdir);
    expect_error(text, line_of(text, "command"), "command", want);
    text = LISTEN GRANTS "upstreams = ( { name = \"s\";\n command = [ \"/\" ]; } );\n";
    expect_error(text, line_of(text, "command"), "command", "cannot run /: Is a directory");
    text = LISTEN GRANTS "upstreams = ( { name = \"s\";\n command = [ \"sh\" ]; cwd = \"no-such-dir\"; } );\n";
    expect_error(text, line_of(text, "command"), "cwd", "no-such-dir as the working directory: No such file or directory");
    /* Found on the PATH env gives the child, and only there; a relative path is taken from the
     * conf file's folder (and becomes that path), or from cwd when it is set. */
    write_file("tg-fake-server-29", "#!/bin/sh\nexit 0\n", 0755);
    char t[1024];
    snprintf(t, sizeof(t), LISTEN GRANTS "upstreams = ( { name = \"s\"; command = [ \"tg-fake-server-29\" ];\n"
                                         " env = { PATH = \"/nonexistent:%s\"; }; } );\n", tmpdir);
    struct loaded l;
    load_ok(&l, t);
    loaded_dispose(&l);
    text = LISTEN GRANTS "upstreams = ( { name = \"s\"; command = [ \"tg-fake-server-29\" ]; } );\n";
    expect_error(text, line_of(text, "command"), "command", "\"tg-fake-server-29\" is not found");
    load_ok(&l, LISTEN GRANTS "upstreams = ( { name = \"s\"; command = [ \"./tg-fake-server-29\" ]; } );\n");
    snprintf(want, sizeof(want), "%s/./tg-fake-server-29", tmpdir);
    assert_string_equal(l.c->upstreams[0].command[0], want);
    loaded_dispose(&l);
    snprintf(t, sizeof(t), LISTEN GRANTS "upstreams = ( { name = \"s\"; command = [ \"./tg-fake-server-29\" ]; cwd = \"%s\"; } );\n",
             tmpdir);
    load_ok(&l, t);
    assert_string_equal(l.c->upstreams[0].command[0], "./tg-fake-server-29"); /* the child runs it from cwd */
    loaded_dispose(&l);
}

static void files_must_open(void **state)
{
    char want[700];
    /* A policy, a listener's certificate and key, an upstream's CA, a JWKS file: each names the
     * path tried (relative ones from the conf file's folder) and the reason. */
    const char *text = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:1/\";\n policy = \"missing.json\"; } );\n";
    snprintf(want, sizeof(want), "%s/missing.json: cannot open: No such file or directory", tmpdir);
    expect_error(text, line_of(text, "policy ="), "upstreams.u1.policy", want);
    text = "listen = ( { address = \"127.0.0.1\"; port = 8443;\n tls = { cert = \"nope.crt\";\n key = \"/nonexistent/k.pem\"; }; } );\n" GRANTS UPSTREAM;
    snprintf(want, sizeof(want), "cannot open %s/nope.crt: No such file or directory", tmpdir);
    expect_error(text, line_of(text, "cert ="), "cert", want);
    expect_error(text, line_of(text, "key ="), "key", "cannot open /nonexistent/k.pem: No such file or directory");
    text = "listen = ( { address = \"127.0.0.1\"; port = 8443;\n tls = { cert = \"/\"; key = \"/\"; }; } );\n" GRANTS UPSTREAM;
    expect_error(text, line_of(text, "cert ="), "cert", "cannot open /: Is a directory");
    text = LISTEN GRANTS UPSTREAM "jwt = ( { issuer = \"https://i\"; audience = \"a\";\n jwks_file = \"jwks.json\"; } );\n";
    snprintf(want, sizeof(want), "%s/jwks.json: cannot open: No such file or directory", tmpdir);
    expect_error(text, line_of(text, "jwks_file"), "jwks_file", want);
    text = LISTEN GRANTS UPSTREAM "log = {\n file = \"/nonexistent/dir/tollgate.log\"; };\n";
    expect_error(text, line_of(text, "file ="), "log.file", "cannot create /nonexistent/dir/tollgate.log: /nonexistent/dir: No such file or directory");
    text = LISTEN GRANTS UPSTREAM "audit = {\n file = \"/\"; };\n";
    expect_error(text, line_of(text, "file ="), "audit.file", "cannot open / for writing: Is a directory");
}

/* jwt[].algorithms: the issuer's allow-list. RS256 and ES256 when absent; none, HMAC and unknown
 * names are load errors that name the issuer and the value. */
static void jwt_algorithms(void **state)
{
    /* P-256's generator: a valid public key. */
    write_file("jwks-g.json",
               "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY\","
               "\"y\":\"T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU\"}]}\n",
               0644);
#define JWT_ISSUER(extra)                                                                                      \
    LISTEN GRANTS UPSTREAM "jwt = ( { issuer = \"https://idp.test\"; audience = \"a\";\n"                        \
                           " jwks_file = \"jwks-g.json\";\n" extra " } );\n"
    struct loaded l;
    load_ok(&l, JWT_ISSUER(""));
    assert_int_equal(l.c->jwt[0].algs, TG_JWT_ALG_RS256 | TG_JWT_ALG_ES256);
    loaded_dispose(&l);
    load_ok(&l, JWT_ISSUER(" algorithms = [ \"PS256\", \"ES256\" ];"));
    assert_int_equal(l.c->jwt[0].algs, TG_JWT_ALG_PS256 | TG_JWT_ALG_ES256);
    loaded_dispose(&l);
    load_ok(&l, JWT_ISSUER(" algorithms = [ \"ES256\" ];"));
    assert_int_equal(l.c->jwt[0].algs, TG_JWT_ALG_ES256);
    loaded_dispose(&l);

    /* HS256 (a shared secret) only when listed; no other HMAC size. */
    load_ok(&l, JWT_ISSUER(" algorithms = [ \"HS256\" ];"));
    assert_int_equal(l.c->jwt[0].algs, TG_JWT_ALG_HS256);
    loaded_dispose(&l);
    const char *text = JWT_ISSUER(" algorithms = [ \"RS256\", \"HS512\" ];");
    expect_error(text, line_of(text, "algorithms"), "algorithms",
                 "issuer https://idp.test: \"HS512\" is not supported; HMAC is HS256 only");
    text = JWT_ISSUER(" algorithms = [ \"none\" ];");
    expect_error(text, line_of(text, "algorithms"), "algorithms",
                 "issuer https://idp.test: \"none\" (unsigned tokens) is never accepted");
    text = JWT_ISSUER(" algorithms = [ \"XX\" ];");
    expect_error(text, line_of(text, "algorithms"), "algorithms",
                 "issuer https://idp.test: unknown algorithm \"XX\" (RS256, PS256, ES256 or HS256)");
    text = JWT_ISSUER(" algorithms = [ \"rs256\" ];");
    expect_error(text, line_of(text, "algorithms"), "algorithms", "unknown algorithm \"rs256\"");
    text = JWT_ISSUER(" algorithms = [ ];");
    expect_error(text, line_of(text, "algorithms"), "algorithms", "issuer https://idp.test: empty");
    text = JWT_ISSUER(" algorithms = [ 1 ];");
    expect_error(text, line_of(text, "algorithms"), "algorithms", "element 0 must be a string");
    text = JWT_ISSUER(" algorithms = \"RS256\";");
    expect_error(text, line_of(text, "algorithms"), "algorithms", "must be a list of strings");
#undef JWT_ISSUER
}

/* jwt[].dpop, dpop_window_s, cache_entries and limits.dpop_replay_entries: strict values, the
 * defaults, and DPoP only with an algorithm a public key signs. */
static void jwt_dpop_directives(void **state)
{
    write_file("jwks-g.json",
               "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY\","
               "\"y\":\"T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU\"}]}\n",
               0644);
#define JWT_ISSUER(extra)                                                                                      \
    LISTEN GRANTS UPSTREAM "jwt = ( { issuer = \"https://idp.test\"; audience = \"a\";\n"                        \
                           " jwks_file = \"jwks-g.json\";\n" extra " } );\n"
    struct loaded l;
    load_ok(&l, JWT_ISSUER(""));
    assert_int_equal(l.c->jwt[0].dpop, TG_DPOP_OFF);
    assert_int_equal(l.c->jwt[0].dpop_window_s, 60);
    assert_int_equal(l.c->limits.dpop_replay_entries, 100000);
    loaded_dispose(&l);
    load_ok(&l, JWT_ISSUER(" dpop = \"optional\"; dpop_window_s = 5; cache_entries = 0;"));
    assert_int_equal(l.c->jwt[0].dpop, TG_DPOP_OPTIONAL);
    assert_int_equal(l.c->jwt[0].dpop_window_s, 5);
    loaded_dispose(&l);
    load_ok(&l, JWT_ISSUER(" dpop = \"required\";"));
    assert_int_equal(l.c->jwt[0].dpop, TG_DPOP_REQUIRED);
    loaded_dispose(&l);
    const char *text = JWT_ISSUER(" dpop = \"Required\";");
    expect_error(text, line_of(text, "dpop"), "dpop", "must be \"off\", \"optional\" or \"required\"");
    text = JWT_ISSUER(" dpop = true;");
    expect_error(text, line_of(text, "dpop"), "dpop", "must be \"off\", \"optional\" or \"required\"");
    text = JWT_ISSUER(" dpop_window_s = 0;");
    expect_error(text, line_of(text, "dpop_window_s"), "dpop_window_s", "must be an integer 1..3600");
    text = JWT_ISSUER(" cache_entries = -1;");
    expect_error(text, line_of(text, "cache_entries"), "cache_entries", "must be an integer 0..1000000");
    text = JWT_ISSUER(" algorithms = [ \"HS256\" ];\n dpop = \"optional\";");
    expect_error(text, line_of(text, "dpop ="), "dpop", "DPoP proofs are signed with a public key");
#undef JWT_ISSUER
}

/* jwt[] key sources: exactly one of jwks_file, jwks_url and discovery = true; a fetched one is
 * https:// (http:// only to loopback, which the error says); nothing is fetched at load. */
static void jwt_sources(void **state)
{
#define JWT_SRC(issuer, src) LISTEN GRANTS UPSTREAM "jwt = ( { issuer = \"" issuer "\"; audience = \"a\";\n" src " } );\n"
    struct loaded l;
    load_ok(&l, JWT_SRC("https://idp.test", " jwks_url = \"https://idp.test/keys\";"));
    assert_string_equal(l.c->jwt[0].jwks_url, "https://idp.test/keys");
    assert_null(l.c->jwt[0].jwks);
    assert_null(l.c->jwt[0].keyring); /* the app attaches it; loading fetches nothing */
    assert_int_equal(l.c->jwt[0].refresh_min_s, 60);
    assert_int_equal(l.c->jwt[0].refresh_max_s, 86400);
    assert_int_equal(l.c->jwt[0].fetch_timeout_ms, 10000);
    loaded_dispose(&l);
    load_ok(&l, JWT_SRC("https://idp.test/tenant", " discovery = true; refresh_min_s = 5; refresh_max_s = 600;"));
    assert_int_equal(l.c->jwt[0].discovery, 1);
    assert_int_equal(l.c->jwt[0].refresh_min_s, 5);
    assert_int_equal(l.c->jwt[0].refresh_max_s, 600);
    loaded_dispose(&l);
    load_ok(&l, JWT_SRC("http://127.0.0.1:9/", " discovery = true;"));
    loaded_dispose(&l);
    load_ok(&l, JWT_SRC("https://idp.test", " jwks_url = \"http://[::1]:8080/keys\";"));
    loaded_dispose(&l);
    write_file("src-ca.pem", "not read at load beyond being readable\n", 0644);
    load_ok(&l, JWT_SRC("https://idp.test", " jwks_url = \"https://idp.test/k\"; ca = \"src-ca.pem\";"));
    assert_non_null(strstr(l.c->jwt[0].ca, "/src-ca.pem"));
    loaded_dispose(&l);

    const char *text = JWT_SRC("https://idp.test", "");
    expect_error(text, line_of(text, "jwt = "), "jwt[0]", "needs exactly one of jwks_file, jwks_url and discovery = true (it has none)");
    text = JWT_SRC("https://idp.test", " jwks_url = \"https://idp.test/k\"; discovery = true;");
    expect_error(text, line_of(text, "jwt = "), "jwt[0]", "(it has several)");
    text = JWT_SRC("https://idp.test", " jwks_url = \"http://idp.test/k\";");
    expect_error(text, line_of(text, "jwks_url"), "jwks_url",
                 "\"http://idp.test/k\" must be https:// (plain http:// only to a loopback address");
    text = JWT_SRC("https://idp.test", " jwks_url = \"ftp://idp.test/k\";");
    expect_error(text, line_of(text, "jwks_url"), "jwks_url", "is not an https:// URL with a host");
    text = JWT_SRC("http://idp.test", " discovery = true;");
    expect_error(text, line_of(text, "discovery"), "discovery",
                 "the issuer \"http://idp.test\" must be https:// (plain http:// only to a loopback address");
    text = JWT_SRC("https://idp.test", " jwks_url = \"https://idp.test/k\"; refresh_min_s = 100; refresh_max_s = 50;");
    expect_error(text, line_of(text, "refresh_min_s"), "refresh_min_s", "100 is above refresh_max_s (50)");
    text = JWT_SRC("https://idp.test", " jwks_url = \"https://idp.test/k\"; refresh_min_s = 0;");
    expect_error(text, line_of(text, "refresh_min_s"), "jwt[0].refresh_min_s", "0 is out of range 1..86400");
    text = JWT_SRC("https://idp.test", " jwks_url = \"https://idp.test/k\"; refresh_mins = 5;");
    expect_error(text, line_of(text, "refresh_mins"), "jwt[0].refresh_mins", "unknown directive");
    text = JWT_SRC("https://idp.test", " jwks_url = \"https://idp.test/k\"; ca = \"/nonexistent/ca.pem\";");
    expect_error(text, line_of(text, "ca ="), "ca", "cannot open /nonexistent/ca.pem");
    text = JWT_SRC("https://idp.test", " discovery = \"yes\";");
    expect_error(text, line_of(text, "discovery"), "jwt[0].discovery", NULL);
#undef JWT_SRC
}

/* Relative paths mean the same from any working directory: the conf file's folder. */
static void relative_paths_from_the_conf_folder(void **state)
{
    write_file("rel-policy.json", "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{}}\n", 0644);
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    const char *path = write_conf(LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:1/\";\n"
                                               " policy = \"rel-policy.json\"; } );\naudit = { file = \"audit.log\"; };\n");
    for (int from = 0; from < 2; from++) {
        /* from /, with the conf's absolute path; from the folder above, with a relative one */
        char dir[300], rel[600], want[700];
        snprintf(dir, sizeof(dir), "%s", tmpdir);
        char *slash = strrchr(dir, '/');
        assert_non_null(slash);
        *slash = '\0';
        assert_int_equal(chdir(from == 0 ? "/" : dir), 0);
        snprintf(rel, sizeof(rel), "%s", from == 0 ? path : path + strlen(dir) + 1);
        struct tg_buf err;
        tg_buf_init(&err);
        struct tg_conf *c = tg_conf_load(rel, &err);
        tg_buf_append(&err, "", 1);
        if (c == NULL)
            fail_msg("%s from %s: %s", rel, from == 0 ? "/" : dir, err.base);
        snprintf(want, sizeof(want), "%s/rel-policy.json", from == 0 ? tmpdir : tmpdir + strlen(dir) + 1);
        assert_string_equal(c->upstreams[0].policy_path, want);
        snprintf(want, sizeof(want), "%s/audit.log", from == 0 ? tmpdir : tmpdir + strlen(dir) + 1);
        assert_string_equal(c->audit.file, want);
        tg_conf_unref(c);
        tg_buf_dispose(&err);
    }
    assert_int_equal(chdir(cwd), 0);
}

/* Errors point at a line of the file, or at none: never line 0 (libconfig's for list elements,
 * groups, the root). */
static void no_error_has_line_zero(void **state)
{
    static const char *const broken[] = {
        "grants = ( { name = \"a\"; anonymous = true; } );\nupstreams = ( { name = \"u\"; url = \"http://h/\"; } );\n",
        "listen = ( );\nupstreams = ( );\n",
        "listen = ( 1, \"x\" );\ngrants = ( 2 );\nupstreams = ( 3 );\n",
        "listen = (\n  {\n    port = 1;\n    tls = { cert = \"nope\"; };\n  }\n);\n" GRANTS UPSTREAM,
        LISTEN GRANTS "upstreams = (\n  {\n    name = \"s\";\n    command = [ ];\n  },\n  {\n    url = \"http://h/\";\n  }\n);\n",
        LISTEN GRANTS "upstreams = (\n  {\n    name = \"s\";\n    command = [ 1, \"x\" ];\n    env = { A = 1; };\n  }\n);\n",
        LISTEN "grants = (\n  {\n    name = \"g\";\n    policies = ( 1, { upstream = \"nope\"; } );\n  }\n);\n" UPSTREAM,
        LISTEN GRANTS UPSTREAM "jwt = ( 1, { issuer = \"x\"; } );\naudit = ( );\nlimits = 1;\n",
    };
    for (size_t i = 0; i < sizeof(broken) / sizeof(broken[0]); i++) {
        struct loaded l;
        load(&l, broken[i]);
        assert_null(l.c);
        if (l.err.len == 0)
            fail_msg("case %zu: no error", i);
        for (const char *p = l.err.base; *p;) {
            const char *nl = strchr(p, '\n');
            assert_non_null(nl);
            if (strncmp(p, l.path, strlen(l.path)) != 0)
                fail_msg("case %zu: an error line without the file: %.*s", i, (int)(nl - p), p);
            if (strncmp(p + strlen(l.path), ":0:", 3) == 0)
                fail_msg("case %zu: an error with line 0: %.*s", i, (int)(nl - p), p);
            p = nl + 1;
        }
        loaded_dispose(&l);
    }
}

static void expand_env(void **state)
{
    expand_ok("", "");
    expand_ok("plain", "plain");
    expand_ok("$", "$");
    expand_ok("a$", "a$");
    expand_ok("$TG_T_SET", "$TG_T_SET");
    expand_ok("$(TG_T_SET)", "$(TG_T_SET)");
    expand_ok("{TG_T_SET}", "{TG_T_SET}");
    expand_ok("${TG_T_SET}", "val");
    expand_ok("x${TG_T_SET}y${TG_T_SET}z", "xvalyvalz");
    expand_ok("$${TG_T_SET}", "$val");
    expand_ok("${TG_T_SET}}", "val}");
    expand_ok("${TG_T_EMPTY}", "");
    expand_ok("${TG_T_UNSET:-fallback}", "fallback");
    expand_ok("${TG_T_UNSET:-}", "");
    expand_ok("${TG_T_UNSET:-a b/c:d}", "a b/c:d");
    expand_ok("${TG_T_UNSET:-a:-b}", "a:-b");
    expand_ok("${TG_T_SET:-fallback}", "val");
    expand_ok("<${TG_T_UNSET:-x}${TG_T_SET}>", "<xval>");
    /* A value is not expanded again. */
    setenv("TG_T_META", "${TG_T_SET}", 1);
    expand_ok("${TG_T_META}", "${TG_T_SET}");
    unsetenv("TG_T_META");

    expand_fail("${TG_T_UNSET}", "environment variable is not set", "TG_T_UNSET");
    expand_fail("a${TG_T_SET}b${TG_T_UNSET}", "environment variable is not set", "TG_T_UNSET");
    expand_fail("${", "unterminated ${", NULL);
    expand_fail("abc${TG_T_SET", "unterminated ${", NULL);
    expand_fail("${}", "bad variable name in ${}", NULL);
    expand_fail("${:-x}", "bad variable name in ${}", NULL);
    expand_fail("${1A}", "bad variable name in ${}", NULL);
    expand_fail("${A-B}", "bad variable name in ${}", NULL);
    expand_fail("${A B}", "bad variable name in ${}", NULL);
    expand_fail("${A:}", "bad variable name in ${}", NULL);
    expand_fail("${A.B}", "bad variable name in ${}", NULL);
    /* The name must fit the caller's buffer (with its NUL). */
    const char *why = NULL;
    char small[4];
    assert_null(tg_conf_expand_env("${ABCD}", &why, small, sizeof(small)));
    assert_string_equal(why, "bad variable name in ${}");
    setenv("ABC", "3", 1);
    char *r = tg_conf_expand_env("${ABC}", &why, small, sizeof(small));
    assert_non_null(r);
    assert_string_equal(r, "3");
    free(r);
    unsetenv("ABC");
}

/* cluster.lease: off without the group, its values kept, out of range and unknown members refused. */
static void cluster_lease(void **state)
{
    (void)state;
    char key[512], head[1024], text[2048];
    snprintf(key, sizeof(key), "%s/cluster.key", tmpdir);
    FILE *f = fopen(key, "w");
    assert_non_null(f);
    for (int i = 0; i < 32; i++)
        fputc(i, f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(key, 0600), 0);
    snprintf(head, sizeof(head), LISTEN GRANTS "upstreams = ( { name = \"a\"; url = \"http://127.0.0.1:1/\"; } );\n"
             "cluster = { redis = \"127.0.0.1:6379\"; secret_file = \"%s\";\n", key);
    struct loaded l;
    snprintf(text, sizeof(text), "%s};\n", head);
    load_ok(&l, text);
    assert_int_equal(l.c->cluster.lease_tokens, 0); /* off */
    assert_int_equal(l.c->cluster.lease_ms, 1000);
    assert_int_equal(l.c->cluster.lease_keys, 16384);
    loaded_dispose(&l);
    snprintf(text, sizeof(text), "%s  lease = { tokens = 64; ms = 250; keys = 10; };\n};\n", head);
    load_ok(&l, text);
    assert_int_equal(l.c->cluster.lease_tokens, 64);
    assert_int_equal(l.c->cluster.lease_ms, 250);
    assert_int_equal(l.c->cluster.lease_keys, 10);
    loaded_dispose(&l);
    snprintf(text, sizeof(text), "%s  lease = { tokens = 2000000; };\n};\n", head);
    expect_error(text, line_of(text, "tokens"), "cluster.lease.tokens", "out of range 0..1000000");
    snprintf(text, sizeof(text), "%s  lease = { tokens = 8; ms = 0; };\n};\n", head);
    expect_error(text, line_of(text, "ms = 0"), "cluster.lease.ms", "out of range 1..60000");
    snprintf(text, sizeof(text), "%s  lease = { tokens = 8; tokenz = 1; };\n};\n", head);
    expect_error(text, line_of(text, "tokenz"), "cluster.lease.tokenz", "unknown directive");
    snprintf(text, sizeof(text), "%s  lease = 8;\n};\n", head);
    expect_error(text, line_of(text, "lease"), "cluster.lease", "must be a group");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(annotated_example_loads),
        cmocka_unit_test(minimal_defaults),
        cmocka_unit_test(values_in_range_are_kept),
        cmocka_unit_test(url_forms),
        cmocka_unit_test(out_of_range_has_line),
        cmocka_unit_test(unknown_directives),
        cmocka_unit_test(syntax_error_has_line),
        cmocka_unit_test(env_errors_in_conf),
        cmocka_unit_test(header_unterminated_var_message),
        cmocka_unit_test(upstream_errors),
        cmocka_unit_test(url_junk_after_ipv6_literal),
        cmocka_unit_test(grant_and_token_errors),
        cmocka_unit_test(grant_issuers),
        cmocka_unit_test(grant_attributes),
        cmocka_unit_test(jwt_grant),
        cmocka_unit_test(other_errors),
        cmocka_unit_test(expand_env),
        cmocka_unit_test(pinned_roots),
        cmocka_unit_test(listen_address_is_an_ip_literal),
        cmocka_unit_test(stdio_command_must_run),
        cmocka_unit_test(files_must_open),
        cmocka_unit_test(jwt_algorithms),
        cmocka_unit_test(jwt_dpop_directives),
        cmocka_unit_test(jwt_sources),
        cmocka_unit_test(relative_paths_from_the_conf_folder),
        cmocka_unit_test(no_error_has_line_zero),
        cmocka_unit_test(cluster_lease),
    };
    if (setup_dir(NULL) != 0)
        return 1;
    int r = TG_UNIT_RUN(tests, argc, argv);
    teardown_dir(NULL);
    return r;
}
