/* core/conf/upcred.c: grants[].upstream_headers and upstreams[].token_exchange, what they load
 * into and every error they give. */
#include "test/unit/unit.h"

#include <unistd.h>
#include <sys/stat.h>

#include "core/conf/conf.h"

#include "test/unit/core/conf/conf_harness.h"
#define UPSTREAMS                                                                                        \
    "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\"; headers = { X-Own = \"o\"; }; },\n" \
    "  { name = \"kids\"; command = [ \"/bin/cat\" ]; } );\n"

static const char *secret_file(const char *content)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/secret%d", tmpdir, ++nfile);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
    chmod(path, 0600);
    return path;
}

static void grant_headers_load(void **state)
{
    setenv("TG_T_UPTOKEN", "abc123", 1);
    struct loaded l;
    load_ok(&l, LISTEN UPSTREAMS
            "grants = ( { name = \"ci\"; token_sha256 = \"" "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
            "\";\n  upstream_headers = { u1 = { Authorization = \"Bearer ${TG_T_UPTOKEN}\"; X-Team = \"qa\"; }; }; },\n"
            "  { name = \"other\"; anonymous = true; } );\n");
    const struct tg_grant_conf *g = tg_conf_find_grant(l.c, "ci");
    assert_non_null(g);
    const struct tg_grant_upheaders *gh = tg_conf_grant_upheaders(g, "u1", l.c);
    assert_non_null(gh);
    assert_int_equal(gh->upstream, 0);
    assert_int_equal(gh->nheaders, 2);
    assert_string_equal(gh->lines, "Authorization: Bearer abc123\r\nX-Team: qa\r\n");
    assert_null(tg_conf_grant_upheaders(g, "kids", l.c));
    assert_null(tg_conf_grant_upheaders(tg_conf_find_grant(l.c, "other"), "u1", l.c));
    loaded_dispose(&l);
}

#define GRANT_WITH(UH) \
    "grants = ( { name = \"ci\"; anonymous = true;\n  upstream_headers = " UH "; } );\n"

static void grant_headers_errors(void **state)
{
    const char *t = LISTEN UPSTREAMS GRANT_WITH("{ nope = { A = \"b\"; }; }");
    expect_error(t, line_of(t, "nope"), "grants.ci.upstream_headers.nope", "no upstream named \"nope\"");
    t = LISTEN UPSTREAMS GRANT_WITH("{ kids = { A = \"b\"; }; }");
    expect_error(t, line_of(t, "kids = {"), "grants.ci.upstream_headers.kids", "stdio upstream");
    t = LISTEN UPSTREAMS GRANT_WITH("{ u1 = { Host = \"evil\"; }; }");
    expect_error(t, line_of(t, "Host"), "grants.ci.upstream_headers.u1.Host", "not a header the gateway lets you set");
    t = LISTEN UPSTREAMS GRANT_WITH("{ u1 = { X-A = \"a\\r\\nX-Injected: 1\"; }; }");
    expect_error(t, line_of(t, "X-A"), "grants.ci.upstream_headers.u1.X-A", "no CR, LF");
    t = LISTEN UPSTREAMS GRANT_WITH("{ u1 = { X-A = \"${TG_T_UNSET}\"; }; }");
    expect_error(t, line_of(t, "X-A"), "grants.ci.upstream_headers.u1.X-A", "environment variable is not set: TG_T_UNSET");
    t = LISTEN UPSTREAMS GRANT_WITH("{ u1 = { X-A = 3; }; }");
    expect_error(t, line_of(t, "X-A"), "grants.ci.upstream_headers.u1.X-A", "must be a string");
    t = LISTEN UPSTREAMS GRANT_WITH("[ \"u1\" ]");
    expect_error(t, line_of(t, "upstream_headers"), "grants.ci.upstream_headers", "must be a group");
    t = LISTEN UPSTREAMS GRANT_WITH("{ u1 = \"Bearer x\"; }");
    expect_error(t, line_of(t, "upstream_headers"), "grants.ci.upstream_headers.u1", "must be a group");
}

static void token_exchange_loads(void **state)
{
    char text[2048];
    snprintf(text, sizeof(text),
             LISTEN "grants = ( { name = \"g\"; anonymous = true; } );\n"
                    "upstreams = ( { name = \"u1\"; url = \"https://127.0.0.1:3333/mcp\";\n"
                    "  token_exchange = { token_endpoint = \"https://idp.example/token\"; client_id = \"gate way\";\n"
                    "    client_secret_file = \"%s\"; audience = \"https://u1.example/\"; scope = \"read write\"; }; } );\n",
             secret_file("s:3cret\n"));
    struct loaded l;
    load_ok(&l, text);
    const struct tg_token_exchange_conf *x = l.c->upstreams[0].token_exchange;
    assert_non_null(x);
    assert_string_equal(x->token_endpoint, "https://idp.example/token");
    assert_null(x->ca);
    /* client_secret_basic: form-encoded "gate+way" is "gate%20way" here, ":" in the secret is %3A:
     * base64("gate%20way:s%3A3cret") */
    assert_non_null(strstr(x->headers, "Authorization: Basic Z2F0ZSUyMHdheTpzJTNBM2NyZXQ=\r\n"));
    assert_non_null(strstr(x->headers, "Content-Type: application/x-www-form-urlencoded\r\n"));
    assert_string_equal(x->form_tail, "&audience=https%3A%2F%2Fu1.example%2F&scope=read%20write");
    loaded_dispose(&l);
    /* plain http to loopback is allowed */
    snprintf(text, sizeof(text),
             LISTEN "grants = ( { name = \"g\"; anonymous = true; } );\n"
                    "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\";\n"
                    "  token_exchange = { token_endpoint = \"http://[::1]:9/token\"; client_id = \"c\";\n"
                    "    client_secret_file = \"%s\"; }; } );\n",
             secret_file("x"));
    load_ok(&l, text);
    assert_string_equal(l.c->upstreams[0].token_exchange->form_tail, "");
    loaded_dispose(&l);
}

static void token_exchange_errors(void **state)
{
    const char *sec = secret_file("s");
    char text[2048];
#define TX(URL, MORE)                                                                                          \
    snprintf(text, sizeof(text),                                                                               \
             LISTEN "grants = ( { name = \"g\"; anonymous = true; } );\n"                                       \
                    "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\";\n"                     \
                    "  token_exchange = { token_endpoint = \"" URL "\";\n    client_id = \"c\"; client_secret_file = \"%s\"; " MORE " }; } );\n", \
             sec)
    TX("http://idp.example/token", "");
    expect_error(text, line_of(text, "token_endpoint"), "token_endpoint", "plain http:// only to a loopback address");
    TX("http://10.0.0.1/token", "");
    expect_error(text, line_of(text, "token_endpoint"), "token_endpoint", "loopback");
    TX("ftp://127.0.0.1/token", "");
    expect_error(text, line_of(text, "token_endpoint"), "token_endpoint", "must start with http:// or https://");
    TX("https://idp.example/token", "ca = \"/nonexistent/ca.pem\";");
    expect_error(text, line_of(text, "client_id"), "ca", "cannot open /nonexistent/ca.pem");
    TX("https://idp.example/token", "bogus = 1;");
    expect_error(text, line_of(text, "bogus"), "upstreams.u1.token_exchange.bogus", "unknown directive");
    const char *t = LISTEN "grants = ( { name = \"g\"; anonymous = true; } );\n"
                           "upstreams = ( { name = \"u1\"; url = \"https://127.0.0.1:3333/mcp\";\n"
                           "  token_exchange = { token_endpoint = \"https://idp.example/token\"; }; } );\n";
    expect_error(t, line_of(t, "token_exchange"), "upstreams.u1.token_exchange.client_id", "required");
    t = LISTEN "grants = ( { name = \"g\"; anonymous = true; } );\n"
               "upstreams = ( { name = \"u1\"; url = \"https://127.0.0.1:3333/mcp\";\n"
               "  token_exchange = { token_endpoint = \"https://idp.example/token\"; client_id = \"c\";\n"
               "  client_secret_file = \"/nonexistent/secret\"; }; } );\n";
    expect_error(t, line_of(t, "client_secret_file"), "client_secret_file", "cannot open /nonexistent/secret");
    snprintf(text, sizeof(text),
             LISTEN "grants = ( { name = \"g\"; anonymous = true; } );\n"
                    "upstreams = ( { name = \"u1\"; url = \"https://127.0.0.1:3333/mcp\";\n"
                    "  token_exchange = { token_endpoint = \"https://idp.example/token\"; client_id = \"c\";\n"
                    "  client_secret_file = \"%s\"; }; } );\n",
             secret_file("two\nlines\n"));
    expect_error(text, line_of(text, "client_secret_file"), "client_secret_file", "one line");
    const char *open_secret = secret_file("s");
    chmod(open_secret, 0644);
    snprintf(text, sizeof(text),
             LISTEN "grants = ( { name = \"g\"; anonymous = true; } );\n"
                    "upstreams = ( { name = \"u1\"; url = \"https://127.0.0.1:3333/mcp\";\n"
                    "  token_exchange = { token_endpoint = \"https://idp.example/token\"; client_id = \"c\";\n"
                    "  client_secret_file = \"%s\"; }; } );\n",
             open_secret);
    expect_error(text, line_of(text, "client_secret_file"), "client_secret_file", "readable by others (mode 644)");
    snprintf(text, sizeof(text),
             LISTEN "grants = ( { name = \"g\"; anonymous = true; } );\n"
                    "upstreams = ( { name = \"kids\"; command = [ \"/bin/cat\" ];\n"
                    "  token_exchange = { token_endpoint = \"https://idp.example/token\"; client_id = \"c\";\n"
                    "  client_secret_file = \"%s\"; }; } );\n",
             sec);
    expect_error(text, line_of(text, "token_exchange"), "upstreams.kids.token_exchange", "is for HTTP upstreams");
    t = LISTEN "grants = ( { name = \"g\"; anonymous = true; } );\n"
               "upstreams = ( { name = \"u1\"; url = \"https://127.0.0.1:3333/mcp\"; token_exchange = \"x\"; } );\n";
    expect_error(t, line_of(t, "token_exchange"), "upstreams.u1.token_exchange", "must be a group");
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(grant_headers_load),
        cmocka_unit_test(grant_headers_errors),
        cmocka_unit_test(token_exchange_loads),
        cmocka_unit_test(token_exchange_errors),
    };
    if (setup_dir(NULL) != 0)
        return 1;
    int r = TG_UNIT_RUN(tests, argc, argv);
    teardown_dir(NULL);
    return r;
}
