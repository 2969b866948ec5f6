/* core/app/admin.c: the admin API as the on_request of a real tg_conn (test/unit/transports/harness.h)
 * in front of a hand-built server (test/unit/core/middle.h). The answers that come later (a
 * reload here) are given by the test, with the client still there or gone first: a gone client
 * gets nothing, and nothing touches its freed connection (ASan's to catch). Wrong bearer tokens
 * fill the admin throttle (core/app/throttle.h) that the approvals page's login fills too. */
#include "test/unit/core/middle.h"
#include "test/unit/transports/harness.h"

#include "core/app/admin.h"
#include "core/app/route.h"
#include "policy/auth.h"

#define ADMIN_TOKEN "admin-secret-token"
#define AUTH "Authorization: Bearer " ADMIN_TOKEN "\r\n"

/* %s the token's SHA-256, then three %%s for the directory. */
#define CONF_ADMIN                                                                                                 \
    "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"                                                    \
    "admin = { port = 0; token_sha256 = \"%s\"; };\n"                                                              \
    "grants = ( { name = \"alice\"; anonymous = true; } );\n"                                                      \
    "upstreams = ( { name = \"main\"; url = \"http://127.0.0.1:9/mcp\"; default = true;\n"                         \
    "    policy = \"%%s/policy.json\"; } );\n"                                                                     \
    "# %%s %%s\n"

struct at {
    struct hh *h;
    struct mw *m;
    /* the reload in flight, given back by the test */
    tg_reload_done_cb reload_done;
    void *reload_ud;
};

static void on_request(struct hh *h, struct tg_conn *c) { tg_admin_handle(&((struct at *)h->ud)->m->srv, c); }

static struct at *cur; /* the test's world, for the fake reload (srv has no user data for it) */

static void fake_reload_start(struct tg_server *srv, tg_reload_done_cb done, void *ud)
{
    (void)srv;
    struct at *t = cur;
    assert_null(t->reload_done);
    t->reload_done = done;
    t->reload_ud = ud;
}

static void at_new(struct at *t)
{
    memset(t, 0, sizeof(*t));
    uint8_t sum[32];
    char hex[65], fmt[2048];
    tg_sha256(ADMIN_TOKEN, strlen(ADMIN_TOKEN), sum);
    tg_hex_encode(sum, 32, hex);
    snprintf(fmt, sizeof(fmt), CONF_ADMIN, hex);
    t->h = hh_new(on_request);
    t->h->ud = t;
    t->m = mw_new_on(FAKE_HTTP, fmt, &t->h->loop);
    t->m->srv.reload_start = fake_reload_start;
    cur = t;
}

static void at_free(struct at *t)
{
    hh_free(t->h);
    tg_route_dispose(&t->m->srv);
    mw_free(t->m);
}

static void request(struct at *t, const char *method, const char *target)
{
    hh_connect(t->h);
    char req[512];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" AUTH
                     "Content-Length: 0\r\n\r\n", method, target);
    hh_send(t->h, req, (size_t)n);
}

static void reload_answered_when_over(void **state)
{
    struct at t;
    at_new(&t);
    request(&t, "POST", "/admin/reload");
    HH_RUN_UNTIL(t.h, t.reload_done != NULL);
    HH_EXPECT_QUIET(t.h);
    t.reload_done(t.reload_ud, 1, NULL);
    HH_EXPECT(t.h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 21\r\n\r\n"
                   "{\"status\":\"reloaded\"}");
    HH_EXPECT_EOF(t.h);
    at_free(&t);
}

static void reload_over_after_the_client_went(void **state)
{
    struct at t;
    at_new(&t);
    request(&t, "POST", "/admin/reload");
    HH_RUN_UNTIL(t.h, t.reload_done != NULL);
    shutdown(t.h->fd, SHUT_WR);
    HH_RUN_UNTIL(t.h, t.h->gone == 1); /* the connection is freed */
    struct tg_buf err;
    tg_buf_init(&err);
    tg_buf_appends(&err, "x.conf:1: refused");
    t.reload_done(t.reload_ud, 0, &err); /* no one to answer: nothing written, the wait freed */
    tg_buf_dispose(&err);
    HH_EXPECT_EOF(t.h);
    at_free(&t);
}

static void approvals_listed_and_decided(void **state)
{
    /* Without a cluster the queue answers at once, through the same wait. */
    struct at t;
    at_new(&t);
    request(&t, "GET", "/admin/approvals");
    HH_EXPECT(t.h, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 29\r\n\r\n"
                   "{\"approvals\":[],\"decided\":[]}");
    HH_EXPECT_EOF(t.h);
    request(&t, "POST", "/admin/approvals/abc/approve");
    HH_EXPECT(t.h, "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: 74\r\n\r\n"
                   "{\"error\":\"no pending approval with this id (decided, expired or unknown)\"}");
    HH_EXPECT_EOF(t.h);
    at_free(&t);
}

/* One request with its own headers and body; the whole answer (the server closes) into out. */
static const char *exchange(struct at *t, const char *method, const char *target, const char *headers,
                            const char *body, char *out, size_t outsz)
{
    hh_connect(t->h);
    char req[1024];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n%s",
                     method, target, headers, strlen(body), body);
    hh_send(t->h, req, (size_t)n);
    HH_RUN_UNTIL(t->h, t->h->eof);
    snprintf(out, outsz, "%.*s", (int)t->h->got.len, t->h->got.base);
    tg_buf_consume(&t->h->got, t->h->got.len);
    return out;
}

#define WRONG "Authorization: Bearer wrong-token\r\n"
#define FORM "Content-Type: application/x-www-form-urlencoded\r\n"
#define STARTS(s, lit) (strncmp((s), (lit), sizeof(lit) - 1) == 0)

/* The throttle's state is the process's: this case alone fills 127.0.0.1's bucket, last. */
static void wrong_bearers_and_page_logins_fill_one_bucket(void **state)
{
    struct at t;
    at_new(&t);
    static char r[1 << 17]; /* /metrics is long */
    /* a right token before the bucket fills works, and fills nothing */
    assert_true(STARTS(exchange(&t, "GET", "/admin/approvals", AUTH, "", r, sizeof(r)), "HTTP/1.1 200 "));
    /* no Authorization header tries no token: 401, not counted */
    for (int i = 0; i < 6; i++)
        assert_true(STARTS(exchange(&t, "GET", "/admin/approvals", "", "", r, sizeof(r)), "HTTP/1.1 401 "));
    /* 3 wrong tokens on the page's login, 2 on the admin API: 5, the per-address burst */
    for (int i = 0; i < 3; i++)
        assert_true(STARTS(exchange(&t, "POST", "/admin/ui/login", FORM, "token=wrong", r, sizeof(r)), "HTTP/1.1 401 "));
    for (int i = 0; i < 2; i++) {
        exchange(&t, "POST", "/admin/approvals/abc/approve", WRONG, "", r, sizeof(r));
        assert_true(STARTS(r, "HTTP/1.1 401 "));
        assert_non_null(strstr(r, "WWW-Authenticate: Bearer"));
    }
    /* full: the right bearer token is not looked at */
    exchange(&t, "GET", "/admin/approvals", AUTH, "", r, sizeof(r));
    assert_true(STARTS(r, "HTTP/1.1 429 "));
    const char *ra = strstr(r, "Retry-After: ");
    assert_non_null(ra);
    long secs = strtol(ra + 13, NULL, 10);
    assert_true(secs >= 1 && secs <= 13);
    assert_non_null(strstr(r, "{\"error\":\"too many wrong tokens; try again later\"}"));
    assert_true(STARTS(exchange(&t, "POST", "/admin/reload", WRONG, "", r, sizeof(r)), "HTTP/1.1 429 "));
    assert_null(t.reload_done);
    /* and the page's login meets the same full bucket */
    assert_true(STARTS(exchange(&t, "POST", "/admin/ui/login", FORM, "token=" ADMIN_TOKEN, r, sizeof(r)), "HTTP/1.1 429 "));
    assert_null(strstr(r, "Set-Cookie"));
    /* counted apart by door in /metrics (which the throttle does not refuse) */
    exchange(&t, "GET", "/metrics", AUTH, "", r, sizeof(r));
    assert_true(STARTS(r, "HTTP/1.1 200 "));
    assert_non_null(strstr(r, "\ntollgate_admin_auth_failures_total 2\n"));
    assert_non_null(strstr(r, "\ntollgate_admin_auth_throttled_total 2\n"));
    assert_non_null(strstr(r, "\ntollgate_admin_login_failures_total 3\n"));
    assert_non_null(strstr(r, "\ntollgate_admin_login_throttled_total 1\n"));
    assert_non_null(strstr(r, "\ntollgate_admin_login_throttle_addresses 1\n"));
    at_free(&t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reload_answered_when_over),
        cmocka_unit_test(reload_over_after_the_client_went),
        cmocka_unit_test(approvals_listed_and_decided),
        cmocka_unit_test(wrong_bearers_and_page_logins_fill_one_bucket),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
