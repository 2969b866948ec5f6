/* upstream/token_exchange.c: the RFC 8693 exchange's cache with a fake HTTP client (the request it
 * would send is recorded, its answer given by the test): one exchange shared by every use of a key
 * while it runs, a token reused until expires_in minus the margin and exchanged again after, a
 * token without expires_in not kept, failures (status, JSON, fields) told to every waiter and not
 * cached, the oldest entry evicted at the count and byte bounds, cancel and free. */
#include "test/unit/unit.h"

#include <uv.h>

#include "upstream/token_exchange.c"

/* ---- the fake client ------------------------------------------------------------------- */

struct fake {
    tg_fetch_cb cb;
    void *ud;
    int cancelled;
    char body[2048];
    char headers[512];
    char url[256];
};

static struct fake fakes[16];
static int nfakes;
static int fail_start;

static struct tg_fetch *fake_start(uv_loop_t *loop, const struct tg_fetch_opts *o, tg_fetch_cb cb, void *ud,
                                   const char **why)
{
    if (fail_start) {
        *why = "cannot read the CA file";
        return NULL;
    }
    assert_true(nfakes < 16);
    struct fake *f = &fakes[nfakes++];
    memset(f, 0, sizeof(*f));
    f->cb = cb;
    f->ud = ud;
    snprintf(f->body, sizeof(f->body), "%.*s", (int)o->body_len, o->body);
    snprintf(f->headers, sizeof(f->headers), "%s", o->headers ? o->headers : "");
    snprintf(f->url, sizeof(f->url), "%s", o->url);
    assert_string_equal(o->method, "POST");
    return (struct tg_fetch *)f;
}

static void fake_cancel(struct tg_fetch *f) { ((struct fake *)f)->cancelled = 1; }

static void answer(int i, int status, const char *body)
{
    struct tg_fetch_result r = {.err = 0, .status = status, .body = body, .len = strlen(body)};
    fakes[i].cb(fakes[i].ud, &r);
}

/* ---- the waiters ----------------------------------------------------------------------- */

struct heard {
    int n;
    char token[256];
    char why[256];
};

static void on_heard(void *ud, const char *token, const char *why)
{
    struct heard *h = ud;
    h->n++;
    snprintf(h->token, sizeof(h->token), "%s", token ? token : "");
    snprintf(h->why, sizeof(h->why), "%s", why ? why : "");
}

static uv_loop_t loop;
static struct tg_token_exchange_conf xconf = {
    .token_endpoint = "https://idp.test/token",
    .client_id = "gw",
    .headers = "Authorization: Basic Z3c6cw==\r\n",
    .form_tail = "&audience=u1",
};

static struct tg_tx_cache *new_cache(size_t entries, size_t bytes)
{
    nfakes = 0;
    fail_start = 0;
    uv_loop_init(&loop);
    struct tg_tx_cache *c = tg_tx_cache_new(&loop, entries, bytes);
    c->fetch_start = fake_start;
    c->fetch_cancel = fake_cancel;
    return c;
}

static void done(struct tg_tx_cache *c)
{
    tg_tx_cache_free(c);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void key(uint8_t k[32], int n)
{
    memset(k, 0, 32);
    k[0] = (uint8_t)n;
    k[31] = (uint8_t)(n * 7);
}

static int get(struct tg_tx_cache *c, int n, const char *subject_token, struct tg_tx_wait *w, struct heard *h,
               const char **tok, char *why)
{
    uint8_t k[32];
    key(k, n);
    return tg_tx_get(c, &xconf, k, tg_slice_cstr(subject_token), w, on_heard, h, tok, why, 256);
}

#define OK_BODY(TOK, EXP) "{\"access_token\":\"" TOK "\",\"issued_token_type\":\"urn:ietf:params:oauth:token-type:access_token\",\"token_type\":\"Bearer\",\"expires_in\":" EXP "}"

static void shared_then_cached_then_refreshed(void **state)
{
    struct tg_tx_cache *c = new_cache(100, 1 << 20);
    struct tg_tx_wait w1 = {0}, w2 = {0};
    struct heard h1 = {0}, h2 = {0};
    const char *tok = NULL;
    char why[256];
    assert_int_equal(get(c, 1, "eyJ.a+b/c=", &w1, &h1, &tok, why), 1);
    assert_int_equal(get(c, 1, "eyJ.a+b/c=", &w2, &h2, &tok, why), 1);
    assert_int_equal(nfakes, 1); /* one exchange for both */
    /* the RFC 8693 request, the subject token form-encoded */
    assert_string_equal(fakes[0].body,
                        "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange"
                        "&subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token"
                        "&subject_token=eyJ.a%2Bb%2Fc%3D&audience=u1");
    assert_string_equal(fakes[0].headers, xconf.headers);
    assert_string_equal(fakes[0].url, "https://idp.test/token");
    answer(0, 200, OK_BODY("up-1", "100"));
    assert_int_equal(h1.n, 1);
    assert_int_equal(h2.n, 1);
    assert_string_equal(h1.token, "up-1");
    assert_string_equal(h2.token, "up-1");
    assert_int_equal(c->count, 1);
    /* fresh for 100 s less a quarter of it */
    struct tg_tx_entry *e = *slot_of(c, (uint8_t[32]){1, [31] = 7});
    assert_non_null(e);
    assert_int_equal(e->fresh_until, uv_now(&loop) + 75000);
    assert_int_equal(get(c, 1, "other", &w1, &h1, &tok, why), 0);
    assert_string_equal(tok, "up-1");
    assert_int_equal(nfakes, 1);
    assert_int_equal(c->hits, 1);
    /* another subject: its own exchange */
    struct heard h3 = {0};
    struct tg_tx_wait w3 = {0};
    assert_int_equal(get(c, 2, "t2", &w3, &h3, &tok, why), 1);
    assert_int_equal(nfakes, 2);
    answer(1, 200, OK_BODY("up-2", "7200"));
    assert_string_equal(h3.token, "up-2");
    e = *slot_of(c, (uint8_t[32]){2, [31] = 14});
    assert_int_equal(e->fresh_until, uv_now(&loop) + 7200000 - 30000); /* the margin is 30 s at most */
    /* past the margin: exchanged again, the old token no longer given */
    e = *slot_of(c, (uint8_t[32]){1, [31] = 7});
    e->fresh_until = uv_now(&loop);
    assert_int_equal(get(c, 1, "eyJ", &w1, &h1, &tok, why), 1);
    assert_int_equal(nfakes, 3);
    answer(2, 200, OK_BODY("up-1b", "100"));
    assert_string_equal(h1.token, "up-1b");
    assert_int_equal(c->ok, 3);
    assert_int_equal(c->count, 2);
    done(c);
}

static void failures_reach_every_waiter_and_are_not_kept(void **state)
{
    static const struct {
        int status;
        const char *body;
        const char *why;
    } cases[] = {
        {400, "{\"error\":\"invalid_grant\",\"error_description\":\"secret words\"}", "HTTP 400 (invalid_grant)"},
        {500, "oops", "HTTP 500"},
        {400, "{\"error\":\"bad\\r\\nX: y\"}", "HTTP 400"},
        {200, "not json", "not a JSON object"},
        {200, "[1]", "not a JSON object"},
        {200, "{\"token_type\":\"Bearer\"}", "no access_token"},
        {200, "{\"access_token\":\"\",\"token_type\":\"Bearer\"}", "no access_token"},
        {200, "{\"access_token\":\"a b\",\"token_type\":\"Bearer\"}", "cannot go in a header"},
        {200, "{\"access_token\":\"a\\r\\nX: y\",\"token_type\":\"Bearer\"}", "cannot go in a header"},
        {200, "{\"access_token\":\"a\",\"token_type\":\"DPoP\"}", "not Bearer or N_A"},
        {200, "{\"access_token\":\"a\"}", "not Bearer or N_A"},
        {200, "{\"access_token\":\"a\",\"token_type\":\"Bearer\",\"expires_in\":\"60\"}", "expires_in"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tg_tx_cache *c = new_cache(100, 1 << 20);
        struct tg_tx_wait w1 = {0}, w2 = {0};
        struct heard h1 = {0}, h2 = {0};
        const char *tok = NULL;
        char why[256];
        assert_int_equal(get(c, 1, "t", &w1, &h1, &tok, why), 1);
        assert_int_equal(get(c, 1, "t", &w2, &h2, &tok, why), 1);
        answer(0, cases[i].status, cases[i].body);
        assert_int_equal(h1.n, 1);
        assert_int_equal(h2.n, 1);
        assert_string_equal(h1.token, "");
        if (strstr(h1.why, cases[i].why) == NULL || strncmp(h1.why, "token exchange failed: ", 23) != 0)
            fail_msg("case %zu: why \"%s\" lacks \"%s\"", i, h1.why, cases[i].why);
        assert_null(strstr(h1.why, "secret words"));
        assert_null(strstr(h1.why, "\r"));
        assert_int_equal(c->failed, 1);
        assert_int_equal(c->count, 0); /* nothing kept: the next use tries again */
        assert_int_equal(get(c, 1, "t", &w1, &h1, &tok, why), 1);
        assert_int_equal(nfakes, 2);
        done(c);
    }
    /* N_A is a token type the upstream can be given; a network failure says what failed */
    struct tg_tx_cache *c = new_cache(100, 1 << 20);
    struct tg_tx_wait w = {0};
    struct heard h = {0};
    const char *tok;
    char why[256];
    assert_int_equal(get(c, 1, "t", &w, &h, &tok, why), 1);
    answer(0, 200, "{\"access_token\":\"na\",\"token_type\":\"N_A\",\"expires_in\":60}");
    assert_string_equal(h.token, "na");
    assert_int_equal(get(c, 2, "t", &w, &h, &tok, why), 1);
    struct tg_fetch_result r = {.err = TG_ETIMEDOUT, .why = "timed out"};
    fakes[1].cb(fakes[1].ud, &r);
    assert_string_equal(h.why, "token exchange failed: timed out");
    /* a fetch that cannot start: -1 and why, nothing waits */
    fail_start = 1;
    assert_int_equal(get(c, 3, "t", &w, &h, &tok, why), -1);
    assert_string_equal(why, "token exchange failed: cannot read the CA file");
    assert_int_equal(c->count, 1);
    done(c);
}

static void without_expires_in_not_kept(void **state)
{
    struct tg_tx_cache *c = new_cache(100, 1 << 20);
    struct tg_tx_wait w = {0};
    struct heard h = {0};
    const char *tok;
    char why[256];
    assert_int_equal(get(c, 1, "t", &w, &h, &tok, why), 1);
    answer(0, 200, "{\"access_token\":\"once\",\"token_type\":\"bearer\"}");
    assert_string_equal(h.token, "once");
    assert_int_equal(c->count, 0);
    assert_int_equal(c->bytes, 0);
    assert_int_equal(get(c, 1, "t", &w, &h, &tok, why), 1);
    assert_int_equal(nfakes, 2);
    done(c);
}

static void oldest_evicted_at_the_bounds(void **state)
{
    struct tg_tx_cache *c = new_cache(2, 1 << 20);
    struct tg_tx_wait w = {0};
    struct heard h = {0};
    const char *tok;
    char why[256];
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(get(c, i, "t", &w, &h, &tok, why), 1);
        answer(i - 1, 200, OK_BODY("tok", "600"));
    }
    assert_int_equal(c->count, 2);
    assert_int_equal(c->evictions, 1);
    assert_int_equal(get(c, 2, "t", &w, &h, &tok, why), 0); /* kept */
    assert_int_equal(get(c, 3, "t", &w, &h, &tok, why), 0);
    assert_int_equal(get(c, 1, "t", &w, &h, &tok, why), 1); /* the oldest went */
    assert_int_equal(c->evictions, 2);                      /* 2 made room for it */
    /* an entry with an exchange in flight is never evicted */
    struct tg_tx_wait w2 = {0};
    assert_int_equal(get(c, 4, "t", &w2, &h, &tok, why), 1);
    assert_int_equal(c->count, 2); /* 3 went; 1, in flight, stays */
    assert_int_equal(c->evictions, 3);
    answer(3, 200, OK_BODY("one", "600"));
    answer(4, 200, OK_BODY("four", "600"));
    assert_string_equal(h.token, "four");
    /* the byte bound: a token of 1000 bytes in a cache of about two of them */
    done(c);
    c = new_cache(100, 2 * (sizeof(struct tg_tx_entry) + 1000) + 10);
    char big[1100];
    snprintf(big, sizeof(big), "{\"access_token\":\"%01000d\",\"token_type\":\"Bearer\",\"expires_in\":600}", 7);
    for (int i = 1; i <= 3; i++) {
        assert_int_equal(get(c, i, "t", &w, &h, &tok, why), 1);
        answer(i - 1, 200, big);
    }
    assert_true(c->bytes <= c->max_bytes); /* trimmed as each token came */
    assert_int_equal(c->count, 2);
    assert_int_equal(get(c, 3, "t", &w, &h, &tok, why), 0);
    assert_int_equal(get(c, 1, "t", &w, &h, &tok, why), 1);
    assert_true(c->evictions >= 1);
    struct tg_buf m;
    tg_buf_init(&m);
    tg_tx_metrics(c, &m);
    tg_buf_append(&m, "", 1);
    assert_non_null(strstr(m.base, "tollgate_token_exchanges_total{result=\"ok\"} 3\n"));
    assert_non_null(strstr(m.base, "tollgate_token_exchange_evictions_total "));
    assert_non_null(strstr(m.base, "tollgate_token_exchange_cached_bytes "));
    tg_buf_dispose(&m);
    done(c);
}

/* A token the upstream refused (401) goes at once, only if it is still the one cached: not a newer
 * one, nor an entry whose exchange runs again. */
static void refused_token_goes_at_once(void **state)
{
    struct tg_tx_cache *c = new_cache(100, 1 << 20);
    struct tg_tx_wait w = {0};
    struct heard h = {0};
    const char *tok;
    char why[256];
    uint8_t k[32], old_sha[32], other[32];
    key(k, 1);
    assert_int_equal(get(c, 1, "t", &w, &h, &tok, why), 1);
    answer(0, 200, OK_BODY("first", "600"));
    tg_sha256("first", 5, old_sha);
    tg_sha256("firsT", 5, other);
    assert_int_equal(tg_tx_refused(c, k, other), 0); /* not the one cached */
    assert_int_equal(get(c, 1, "t", &w, &h, &tok, why), 0);
    assert_int_equal(tg_tx_refused(c, k, old_sha), 1);
    assert_int_equal(c->count, 0);
    assert_int_equal(c->refused, 1);
    /* the next use exchanges again; a late 401 for the old token leaves the new one alone */
    assert_int_equal(get(c, 1, "t", &w, &h, &tok, why), 1);
    assert_int_equal(tg_tx_refused(c, k, old_sha), 0); /* an exchange in flight */
    answer(1, 200, OK_BODY("second", "600"));
    assert_int_equal(tg_tx_refused(c, k, old_sha), 0);
    assert_int_equal(get(c, 1, "t", &w, &h, &tok, why), 0);
    assert_string_equal(tok, "second");
    assert_int_equal(tg_tx_refused(NULL, k, old_sha), 0);
    struct tg_buf m;
    tg_buf_init(&m);
    tg_tx_metrics(c, &m);
    tg_buf_append(&m, "", 1);
    assert_non_null(strstr(m.base, "tollgate_token_exchange_refused_total 1\n"));
    tg_buf_dispose(&m);
    done(c);
}

static void cancel_and_free(void **state)
{
    struct tg_tx_cache *c = new_cache(100, 1 << 20);
    struct tg_tx_wait w1 = {0}, w2 = {0}, w3 = {0};
    struct heard h1 = {0}, h2 = {0}, h3 = {0};
    const char *tok;
    char why[256];
    assert_int_equal(get(c, 1, "t", &w1, &h1, &tok, why), 1);
    assert_int_equal(get(c, 1, "t", &w2, &h2, &tok, why), 1);
    tg_tx_wait_cancel(&w1);
    tg_tx_wait_cancel(&w1); /* harmless twice */
    answer(0, 200, OK_BODY("x", "60"));
    assert_int_equal(h1.n, 0);
    assert_int_equal(h2.n, 1);
    /* free with an exchange in flight: cancelled, its waiter told */
    assert_int_equal(get(c, 2, "t", &w3, &h3, &tok, why), 1);
    tg_tx_cache_free(c);
    assert_int_equal(fakes[1].cancelled, 1);
    assert_int_equal(h3.n, 1);
    assert_non_null(strstr(h3.why, "shutting down"));
    tg_tx_cache_free(NULL);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(shared_then_cached_then_refreshed),
        cmocka_unit_test(failures_reach_every_waiter_and_are_not_kept),
        cmocka_unit_test(without_expires_in_not_kept),
        cmocka_unit_test(oldest_evicted_at_the_bounds),
        cmocka_unit_test(refused_token_goes_at_once),
        cmocka_unit_test(cancel_and_free),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
