/* policy/keyring.c: the holder of an issuer's fetched keys and the pure rules its driver and the
 * conf loader share: which URLs may be fetched, Cache-Control max-age within
 * refresh_min_s..refresh_max_s, where discovery documents live (RFC 8414 §3's path insertion),
 * what a discovery document must say (its issuer byte for byte), and which keys of a fetched set
 * are used. */
#include "test/unit/unit.h"

#include "core/base/buf.h"
#include "policy/jwt.h"
#include "policy/keyring.h"

/* P-256's generator: a valid EC public key. */
#define EC_KEY "{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY\"," \
               "\"y\":\"T-NC4v4af5uO5-tKfA-eFivOM1drMV7Oy7ZAaDe_UfU\""

static void ttl_clamps_max_age(void **st)
{
    assert_int_equal(tg_keyring_ttl("max-age=120", 60, 86400), 120);
    assert_int_equal(tg_keyring_ttl("public, max-age=300, must-revalidate", 60, 86400), 300);
    assert_int_equal(tg_keyring_ttl("MAX-AGE = 90", 60, 86400), 90);
    assert_int_equal(tg_keyring_ttl("max-age=\"200\"", 60, 86400), 200);
    assert_int_equal(tg_keyring_ttl("max-age=5", 60, 86400), 60);          /* below min */
    assert_int_equal(tg_keyring_ttl("max-age=999999999999", 60, 86400), 86400); /* above max, no overflow */
    assert_int_equal(tg_keyring_ttl("max-age=0", 2, 100), 2);
    assert_int_equal(tg_keyring_ttl("no-store", 60, 86400), 60);
    assert_int_equal(tg_keyring_ttl("max-age=600, no-cache", 60, 86400), 60);
    assert_int_equal(tg_keyring_ttl("no-cache, max-age=600", 60, 86400), 60);
    /* absent, malformed: an hour, clamped */
    assert_int_equal(tg_keyring_ttl(NULL, 60, 86400), 3600);
    assert_int_equal(tg_keyring_ttl("", 60, 86400), 3600);
    assert_int_equal(tg_keyring_ttl("max-age=12x", 60, 86400), 3600);
    assert_int_equal(tg_keyring_ttl("max-age=-5", 60, 86400), 3600);
    assert_int_equal(tg_keyring_ttl("max-age=", 60, 86400), 3600);
    assert_int_equal(tg_keyring_ttl("s-maxage=100", 60, 86400), 3600);
    assert_int_equal(tg_keyring_ttl("x-max-age=100", 60, 86400), 3600);
    assert_int_equal(tg_keyring_ttl(NULL, 60, 600), 600);
    assert_int_equal(tg_keyring_ttl(NULL, 7200, 86400), 7200);
}

static void url_rules(void **st)
{
    const char *why;
    assert_int_equal(tg_keyring_url_ok("https://idp.example/keys", &why), 0);
    assert_int_equal(tg_keyring_url_ok("https://[2001:db8::1]:8443/k", &why), 0);
    assert_int_equal(tg_keyring_url_ok("http://127.0.0.1:8080/keys", &why), 0);
    assert_int_equal(tg_keyring_url_ok("http://127.9.8.7/keys", &why), 0);
    assert_int_equal(tg_keyring_url_ok("http://[::1]:80/keys", &why), 0);
    assert_int_equal(tg_keyring_url_ok("http://localhost:9000", &why), 0);
    const char *bad[] = {"http://idp.example/keys", "http://128.0.0.1/k", "http://127.0.0.1.evil.example/k",
                         "http://[::2]/k", "http://10.0.0.1/k"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        why = NULL;
        assert_int_equal(tg_keyring_url_ok(bad[i], &why), -1);
        assert_non_null(strstr(why, "plain http:// only to a loopback address"));
    }
    const char *junk[] = {"ftp://idp/", "https://", "idp.example/keys", "https://user@idp.example/k", "", "https://[::1/k"};
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
        assert_int_equal(tg_keyring_url_ok(junk[i], &why), -1);
    assert_int_equal(tg_keyring_url_ok("https://idp.example/k#frag", &why), -1);
}

static void discovery_urls(void **st)
{
    char *u;
    u = tg_keyring_openid_url("https://idp.example");
    assert_string_equal(u, "https://idp.example/.well-known/openid-configuration");
    free(u);
    u = tg_keyring_openid_url("https://idp.example/realms/staff/");
    assert_string_equal(u, "https://idp.example/realms/staff/.well-known/openid-configuration");
    free(u);
    /* RFC 8414 §3: the well-known segment goes between the host and the issuer's path */
    u = tg_keyring_rfc8414_url("https://idp.example");
    assert_string_equal(u, "https://idp.example/.well-known/oauth-authorization-server");
    free(u);
    u = tg_keyring_rfc8414_url("https://idp.example/");
    assert_string_equal(u, "https://idp.example/.well-known/oauth-authorization-server");
    free(u);
    u = tg_keyring_rfc8414_url("https://idp.example:8443/tenant/a");
    assert_string_equal(u, "https://idp.example:8443/.well-known/oauth-authorization-server/tenant/a");
    free(u);
    assert_null(tg_keyring_rfc8414_url("https://idp.example/t?x=1"));
    assert_null(tg_keyring_rfc8414_url("urn:idp"));
    assert_null(tg_keyring_openid_url("urn:idp"));
}

static void discovery_document_checks(void **st)
{
    char why[300];
    const char *ok = "{\"issuer\":\"https://idp.example/t\",\"jwks_uri\":\"https://keys.example/jwks\"}";
    char *u = tg_keyring_discovery_jwks_uri(ok, strlen(ok), "https://idp.example/t", why, sizeof(why));
    assert_string_equal(u, "https://keys.example/jwks");
    free(u);
    /* byte for byte: a trailing slash is another issuer */
    assert_null(tg_keyring_discovery_jwks_uri(ok, strlen(ok), "https://idp.example/t/", why, sizeof(why)));
    assert_string_equal(why, "the discovery document names issuer https://idp.example/t, not the configured one");
    const char *cases[][2] = {
        {"{\"jwks_uri\":\"https://k/j\"}", "has no issuer"},
        {"{\"issuer\":1,\"jwks_uri\":\"https://k/j\"}", "has no issuer"},
        {"{\"issuer\":\"https://idp.example/t\"}", "has no jwks_uri"},
        {"{\"issuer\":\"https://idp.example/t\",\"jwks_uri\":\"\"}", "has no jwks_uri"},
        {"{\"issuer\":\"https://idp.example/t\",\"jwks_uri\":\"http://keys.example/j\"}", "jwks_uri must be https://"},
        {"[1]", "not a JSON object"},
        {"<html>", "not a JSON object"},
        {"{\"issuer\":\"https://idp.example/t\",\"issuer\":\"https://idp.example/t\",\"jwks_uri\":\"https://k/j\"}",
         "not a JSON object"}, /* duplicate members: refused by the strict parser */
        {"{\"issuer\":\"https://evil\\\"x\",\"jwks_uri\":\"https://k/j\"}", "names issuer https://evil'x, not"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        why[0] = '\0';
        assert_null(tg_keyring_discovery_jwks_uri(cases[i][0], strlen(cases[i][0]), "https://idp.example/t", why,
                                                  sizeof(why)));
        if (strstr(why, cases[i][1]) == NULL)
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, why, cases[i][1]);
    }
}

static void fetched_sets_keep_usable_keys(void **st)
{
    char why[300];
    struct tg_jwks *k = NULL;
    /* an Ed25519 key, an encryption key and an HMAC secret are skipped; the EC signing key stays */
    const char *mixed = "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"},"
                        EC_KEY ",\"use\":\"enc\",\"kid\":\"e\"},"
                        "{\"kty\":\"oct\",\"k\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"},"
                        EC_KEY ",\"use\":\"sig\",\"kid\":\"s\",\"alg\":\"ES256\"}],\"extra\":true}";
    struct tg_jwks_skipped sk;
    assert_int_equal(tg_keyring_parse_jwks(mixed, strlen(mixed), &k, why, sizeof(why), &sk), 0);
    assert_int_equal(tg_jwks_count(k), 1);
    tg_jwks_free(k);
    /* each skipped key is counted by its reason and named by its kid ("-" without one) */
    assert_int_equal(sk.total, 3);
    assert_int_equal(sk.n[TG_JWKS_SKIP_OKP], 1);
    assert_int_equal(sk.n[TG_JWKS_SKIP_USE], 1);
    assert_int_equal(sk.n[TG_JWKS_SKIP_OCT], 1);
    assert_string_equal(sk.list, "-:okp e:use -:oct");
    /* the other reasons: an alg not verified, a curve other than P-256, an unknown kty; a kid
     * with bytes that cannot be quoted; a long list is cut with "..." */
    const char *odd = "{\"keys\":[" EC_KEY ",\"alg\":\"ES384\",\"kid\":\"a\\\"b c\"},"
                      "{\"kty\":\"EC\",\"crv\":\"P-384\",\"kid\":\"p384\"},{\"kty\":\"PQ\",\"kid\":\"pq\"},\"x\","
                      EC_KEY ",\"kid\":\"ok\"}]}";
    assert_int_equal(tg_keyring_parse_jwks(odd, strlen(odd), &k, why, sizeof(why), &sk), 0);
    tg_jwks_free(k);
    assert_int_equal(sk.n[TG_JWKS_SKIP_ALG], 1);
    assert_int_equal(sk.n[TG_JWKS_SKIP_CURVE], 1);
    assert_int_equal(sk.n[TG_JWKS_SKIP_KTY], 2);
    assert_string_equal(sk.list, "a?b?c:alg p384:curve pq:kty -:kty");
    struct tg_buf many;
    tg_buf_init(&many);
    tg_buf_appends(&many, "{\"keys\":[");
    for (int i = 0; i < 40; i++)
        tg_buf_appendf(&many, "{\"kty\":\"oct\",\"kid\":\"secret-key-number-%02d\"},", i);
    tg_buf_appends(&many, EC_KEY "}]}");
    assert_int_equal(tg_keyring_parse_jwks(many.base, many.len, &k, why, sizeof(why), &sk), 0);
    tg_jwks_free(k);
    tg_buf_dispose(&many);
    assert_int_equal(sk.n[TG_JWKS_SKIP_OCT], 40);
    assert_true(strlen(sk.list) < sizeof(sk.list));
    assert_non_null(strstr(sk.list, "secret-key-number-00:oct "));
    assert_string_equal(sk.list + strlen(sk.list) - 4, " ...");
    assert_int_equal(strcmp(tg_jwks_skip_name(TG_JWKS_SKIP_CURVE), "curve"), 0);
    const char *none = "{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo\"}]}";
    assert_int_equal(tg_keyring_parse_jwks(none, strlen(none), &k, why, sizeof(why), NULL), TG_EINVAL);
    assert_null(k);
    assert_non_null(strstr(why, "no key tollgate can verify with"));
    assert_int_equal(tg_keyring_parse_jwks("nope", 4, &k, why, sizeof(why), NULL), TG_EINVAL);
    assert_non_null(strstr(why, "the JWKS is not JSON"));
    assert_int_equal(tg_keyring_parse_jwks("{\"keys\":{}}", 11, &k, why, sizeof(why), NULL), TG_EINVAL);
    assert_non_null(strstr(why, "\"keys\" array"));
    /* a usable key that is broken (not on the curve) refuses the set */
    const char *broken = "{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"axfR8uEsQkf4vOblY6RA8ncDfYEt6zOg9KE5RdiYwpY\","
                         "\"y\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}";
    assert_int_equal(tg_keyring_parse_jwks(broken, strlen(broken), &k, why, sizeof(why), NULL), TG_EINVAL);
    assert_non_null(strstr(why, "the JWKS is refused: jwks: keys[0]"));
    /* more than TG_JWKS_MAX_KEYS, counted before any is skipped */
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"keys\":[");
    for (int i = 0; i <= TG_JWKS_MAX_KEYS; i++)
        tg_buf_appendf(&b, "%s{\"kty\":\"OKP\"}", i ? "," : "");
    tg_buf_appends(&b, "]}");
    assert_int_equal(tg_keyring_parse_jwks(b.base, b.len, &k, why, sizeof(why), NULL), TG_EINVAL);
    assert_non_null(strstr(why, "257 keys (at most 256)"));
    tg_buf_dispose(&b);
}

static int refetches;
static int on_refetch(void *arg, struct tg_keyring *k)
{
    refetches++;
    return *(int *)arg;
}

static void holder(void **st)
{
    struct tg_keyring *k = tg_keyring_new("iss\nurl\n");
    assert_null(tg_keyring_jwks(k));
    assert_string_equal(tg_keyring_pending_why(k), "the issuer's keys are not fetched yet");
    tg_keyring_failed(k, "GET \"x\"\\\n: timed out", 10);
    assert_string_equal(tg_keyring_why(k), "GET 'x''': timed out"); /* quotable */
    assert_string_equal(tg_keyring_pending_why(k), "the issuer's keys are not fetched yet: GET 'x''': timed out");
    assert_int_equal(tg_keyring_unknown_kid(k), 0); /* no driver: no refetch */
    int answer = 1;
    tg_keyring_on_unknown_kid(k, on_refetch, &answer);
    assert_int_equal(tg_keyring_unknown_kid(k), 1);
    answer = 0;
    assert_int_equal(tg_keyring_unknown_kid(k), 0);
    assert_int_equal(refetches, 2);
    char why[200];
    struct tg_jwks *set = NULL;
    const char *one = "{\"keys\":[" EC_KEY "}]}";
    assert_int_equal(tg_keyring_parse_jwks(one, strlen(one), &set, why, sizeof(why), NULL), 0);
    struct tg_keyring *r = tg_keyring_ref(k);
    tg_keyring_set_jwks(k, set, 20);
    assert_ptr_equal(tg_keyring_jwks(r), set);
    assert_string_equal(tg_keyring_why(k), "");
    struct tg_keyring_stats s;
    tg_keyring_stats(k, &s);
    assert_int_equal(s.fetched, 1);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.unknown_kid, 3);
    assert_int_equal(s.last_ok_s, 20);
    assert_int_equal(s.nkeys, 1);
    tg_keyring_failed(k, "later", 30); /* the set stays */
    assert_ptr_equal(tg_keyring_jwks(k), set);
    tg_keyring_unref(k);
    tg_keyring_unref(r); /* the last reference frees the set (LSan) */
    tg_keyring_unref(NULL);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ttl_clamps_max_age),       cmocka_unit_test(url_rules),
        cmocka_unit_test(discovery_urls),           cmocka_unit_test(discovery_document_checks),
        cmocka_unit_test(fetched_sets_keep_usable_keys), cmocka_unit_test(holder),
    };
    return tg_unit_run("policy/keyring", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
