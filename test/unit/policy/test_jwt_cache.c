/* policy/jwt_cache.c through tg_auth_grant(): a verified JWT is remembered by its issuer's cache
 * and served from it, but never past exp + skew, never into another conf (a reload), never for a
 * token that failed, and never beyond its bound. */
#include "test/unit/unit.h"

#include "core/base/sha256.h"
#include "core/conf/conf.h"
#include "policy/auth.h"
#include "policy/jwt.h"
#include "policy/jwt_cache.h"
#include "policy/keyring.h"

#include <mbedtls/md.h>

struct fx {
    struct tg_conf conf;
    struct tg_grant_conf g[1];
    struct tg_jwt_conf jwt;
    char *issuers[1];
    uint8_t key[32];
};

static void fx_init(struct fx *f, size_t slots, int bind_issuer)
{
    memset(f, 0, sizeof(*f));
    memset(f->key, 0x33, 32);
    char k[64], jwks[200];
    k[tg_b64url_encode(f->key, 32, k)] = '\0';
    snprintf(jwks, sizeof(jwks), "{\"keys\":[{\"kty\":\"oct\",\"k\":\"%s\"}]}", k);
    struct tg_buf err;
    tg_buf_init(&err);
    assert_int_equal(tg_jwks_parse(jwks, strlen(jwks), "mem", &f->jwt.jwks, &err), 0);
    tg_buf_dispose(&err);
    f->jwt.issuer = "https://idp/";
    f->jwt.audience = "t";
    f->jwt.grant_claim = "grant";
    f->jwt.algs = TG_JWT_ALG_HS256;
    f->jwt.skew_s = 10;
    f->jwt.cache = tg_jwt_cache_new(slots);
    f->issuers[0] = "https://idp/";
    f->g[0].name = "staff";
    f->g[0].issuers = f->issuers;
    f->g[0].nissuers = bind_issuer ? 1 : 0;
    f->conf.grants = f->g;
    f->conf.ngrants = 1;
    f->conf.jwt = &f->jwt;
    f->conf.njwt = 1;
}

static void fx_dispose(struct fx *f)
{
    tg_jwks_free(f->jwt.jwks);
    tg_jwt_cache_free(f->jwt.cache);
}

static void token(const struct fx *f, const char *sub, int exp, const char *extra, int tamper, char *out, size_t n)
{
    char payload[400], input[1200], sig[64];
    snprintf(payload, sizeof(payload), "{\"iss\":\"https://idp/\",\"aud\":\"t\",\"grant\":\"staff\",\"sub\":\"%s\","
             "\"exp\":%d%s}", sub, exp, extra ? extra : "");
    static const char hdr[] = "{\"alg\":\"HS256\"}";
    size_t len = tg_b64url_encode((const uint8_t *)hdr, strlen(hdr), input);
    input[len++] = '.';
    len += tg_b64url_encode((const uint8_t *)payload, strlen(payload), input + len);
    uint8_t mac[32];
    assert_int_equal(
        mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), f->key, 32, (const uint8_t *)input, len, mac), 0);
    mac[0] ^= (uint8_t)tamper;
    sig[tg_b64url_encode(mac, 32, sig)] = '\0';
    snprintf(out, n, "%.*s.%s", (int)len, input, sig);
}

static enum tg_auth_result auth(const struct fx *f, const char *scheme, const char *tok, int64_t now,
                                struct tg_principal *who, const char **why)
{
    char h[1400];
    snprintf(h, sizeof(h), "%s %s", scheme, tok);
    return tg_auth_grant(&f->conf, tg_slice_cstr(h), now, who, why);
}

static void stats(const struct fx *f, size_t entries, uint64_t hits)
{
    struct tg_jwt_cache_stats st;
    tg_jwt_cache_stats(f->jwt.cache, &st);
    if (st.entries != entries || st.hits != hits)
        fail_msg("cache: %zu entries, %llu hits; expected %zu, %llu", st.entries, (unsigned long long)st.hits, entries,
                 (unsigned long long)hits);
}

static void served_until_exp_plus_skew(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 64, 1);
    char tok[1200];
    token(&f, "alice", 2000, ",\"cnf\":{\"jkt\":\"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}", 0, tok, sizeof(tok));
    struct tg_principal who = {0};
    const char *why = NULL;
    assert_int_equal(auth(&f, "Bearer", tok, 1000, &who, &why), TG_AUTH_OK);
    stats(&f, 1, 0);
    /* Served from the cache: the same principal, the scheme of this request. */
    memset(&who, 0x55, sizeof(who));
    who.resource = NULL;
    assert_int_equal(auth(&f, "DPoP", tok, 2009, &who, &why), TG_AUTH_OK);
    stats(&f, 1, 1);
    assert_string_equal(who.grant->name, "staff");
    assert_string_equal(who.subject, "alice");
    assert_int_equal(who.exp_s, 2000);
    assert_int_equal(who.jwt, 1);
    assert_int_equal(who.dpop, 1);
    assert_string_equal(who.jkt, "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA");
    assert_int_equal(auth(&f, "Bearer", tok, 2009, &who, &why), TG_AUTH_OK);
    assert_int_equal(who.dpop, 0);
    stats(&f, 1, 2);
    /* A channel's credential from a cached token ends at exp + skew too. */
    struct tg_auth_cred cred;
    char h[1400];
    snprintf(h, sizeof(h), "Bearer %s", tok);
    tg_auth_cred_of(&f.conf, tg_slice_cstr(h), 2009, &f.g[0], NULL, NULL, NULL, &cred);
    assert_int_equal(cred.kind, TG_CRED_JWT);
    assert_int_equal(cred.end_s, 2010);
    /* At exp + skew it is not served: verified again, and expired. */
    assert_int_equal(auth(&f, "Bearer", tok, 2010, &who, &why), TG_AUTH_INVALID);
    assert_string_equal(why, "expired");
    stats(&f, 0, 3);
    assert_int_equal(auth(&f, "Bearer", tok, 1500, &who, &why), TG_AUTH_OK); /* verified again, cached again */
    stats(&f, 1, 3);
    fx_dispose(&f);
}

/* A reload is a new conf with new caches: a token the old conf cached is judged by the new one (here
 * the grant no longer lists the issuer: revoked). And a refused token is never cached. */
static void revoked_and_refused_are_not_served(void **state)
{
    (void)state;
    struct fx old, now;
    fx_init(&old, 64, 1);
    fx_init(&now, 64, 0);
    char tok[1200], bad[1200];
    token(&old, "bob", 5000, NULL, 0, tok, sizeof(tok));
    struct tg_principal who = {0};
    const char *why;
    assert_int_equal(auth(&old, "Bearer", tok, 1000, &who, &why), TG_AUTH_OK);
    assert_int_equal(auth(&old, "Bearer", tok, 1000, &who, &why), TG_AUTH_OK);
    stats(&old, 1, 1);
    assert_int_equal(auth(&now, "Bearer", tok, 1000, &who, &why), TG_AUTH_INVALID);
    assert_string_equal(why, "the token's issuer may not use the grant it names");
    assert_int_equal(auth(&now, "Bearer", tok, 1000, &who, &why), TG_AUTH_INVALID);
    stats(&now, 0, 0);
    token(&old, "bob", 5000, NULL, 1, bad, sizeof(bad));
    assert_int_equal(auth(&old, "Bearer", bad, 1000, &who, &why), TG_AUTH_INVALID);
    assert_string_equal(why, "bad signature");
    assert_int_equal(auth(&old, "Bearer", bad, 1000, &who, &why), TG_AUTH_INVALID);
    stats(&old, 1, 1);
    fx_dispose(&old);
    fx_dispose(&now);
}

/* A token whose aud names one route's resource, cached for it, is judged afresh for another. */
static void per_resource(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 64, 1);
    char tok[1200], h[1400];
    token(&f, "carol", 5000, NULL, 0, tok, sizeof(tok));
    struct tg_principal who = {.resource = "https://gw/a/mcp"};
    const char *why;
    snprintf(h, sizeof(h), "Bearer %s", tok);
    /* aud is "t" (the audience): good for any resource; cached per resource all the same */
    assert_int_equal(tg_auth_grant(&f.conf, tg_slice_cstr(h), 1000, &who, &why), TG_AUTH_OK);
    struct tg_principal other = {.resource = "https://gw/b/mcp"};
    assert_int_equal(tg_auth_grant(&f.conf, tg_slice_cstr(h), 1000, &other, &why), TG_AUTH_OK);
    stats(&f, 2, 0);
    assert_int_equal(tg_auth_grant(&f.conf, tg_slice_cstr(h), 1000, &other, &why), TG_AUTH_OK);
    stats(&f, 2, 1);
    /* Without the configured audience, aud must name the resource: a's token is no good for b. */
    char ta[1200];
    {
        struct fx g;
        fx_init(&g, 64, 1);
        g.jwt.audience = NULL;
        char payload[300], input[1200], sig[64];
        snprintf(payload, sizeof(payload), "{\"iss\":\"https://idp/\",\"aud\":\"https://gw/a/mcp\",\"grant\":\"staff\","
                 "\"sub\":\"d\",\"exp\":5000}");
        static const char hdr[] = "{\"alg\":\"HS256\"}";
        size_t len = tg_b64url_encode((const uint8_t *)hdr, strlen(hdr), input);
        input[len++] = '.';
        len += tg_b64url_encode((const uint8_t *)payload, strlen(payload), input + len);
        uint8_t mac[32];
        assert_int_equal(mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), g.key, 32,
                                         (const uint8_t *)input, len, mac), 0);
        sig[tg_b64url_encode(mac, 32, sig)] = '\0';
        snprintf(ta, sizeof(ta), "Bearer %.*s.%s", (int)len, input, sig);
        struct tg_principal wa = {.resource = "https://gw/a/mcp"}, wb = {.resource = "https://gw/b/mcp"};
        assert_int_equal(tg_auth_grant(&g.conf, tg_slice_cstr(ta), 1000, &wa, &why), TG_AUTH_OK);
        assert_int_equal(tg_auth_grant(&g.conf, tg_slice_cstr(ta), 1000, &wa, &why), TG_AUTH_OK);
        stats(&g, 1, 1);
        assert_int_equal(tg_auth_grant(&g.conf, tg_slice_cstr(ta), 1000, &wb, &why), TG_AUTH_INVALID);
        assert_string_equal(why, "wrong audience");
        fx_dispose(&g);
    }
    fx_dispose(&f);
}

/* Fetched keys change without a reload: a token whose key left the set is not served. */
static void rotated_keys(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 64, 1);
    struct tg_keyring *k = tg_keyring_new("test");
    tg_keyring_set_jwks(k, f.jwt.jwks, 1000); /* the holder takes the set */
    f.jwt.jwks = NULL;
    f.jwt.keyring = k;
    char tok[1200];
    token(&f, "dave", 5000, NULL, 0, tok, sizeof(tok));
    struct tg_principal who = {0};
    const char *why;
    assert_int_equal(auth(&f, "Bearer", tok, 1000, &who, &why), TG_AUTH_OK);
    assert_int_equal(auth(&f, "Bearer", tok, 1000, &who, &why), TG_AUTH_OK);
    stats(&f, 1, 1);
    /* The issuer rotates: the new set has another secret only. */
    struct tg_jwks *other = NULL;
    struct tg_buf err;
    tg_buf_init(&err);
    static const char set[] = "{\"keys\":[{\"kty\":\"oct\",\"k\":\"QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI\"}]}";
    assert_int_equal(tg_jwks_parse(set, strlen(set), "mem", &other, &err), 0);
    tg_buf_dispose(&err);
    tg_keyring_set_jwks(k, other, 1100);
    assert_int_equal(auth(&f, "Bearer", tok, 1100, &who, &why), TG_AUTH_INVALID);
    assert_string_equal(why, "bad signature");
    stats(&f, 0, 1);
    f.jwt.keyring = NULL;
    tg_keyring_unref(k);
    fx_dispose(&f);
}

static void bounded(void **state)
{
    (void)state;
    struct fx f;
    fx_init(&f, 4, 1);
    struct tg_jwt_cache_stats st0, st;
    char tok[1200], sub[16];
    struct tg_principal who = {0};
    const char *why;
    for (int i = 0; i < 100; i++) {
        snprintf(sub, sizeof(sub), "u%d", i);
        token(&f, sub, 5000, NULL, 0, tok, sizeof(tok));
        assert_int_equal(auth(&f, "Bearer", tok, 1000, &who, &why), TG_AUTH_OK);
        assert_string_equal(who.subject, sub);
        tg_jwt_cache_stats(f.jwt.cache, i == 0 ? &st0 : &st);
    }
    assert_true(st.entries <= 4);
    assert_int_equal(st.bytes, st0.bytes);
    assert_int_equal(st.slots, 4);
    fx_dispose(&f);
    /* 0 slots: nothing is remembered. */
    fx_init(&f, 0, 1);
    token(&f, "z", 5000, NULL, 0, tok, sizeof(tok));
    assert_int_equal(auth(&f, "Bearer", tok, 1000, &who, &why), TG_AUTH_OK);
    assert_int_equal(auth(&f, "Bearer", tok, 1000, &who, &why), TG_AUTH_OK);
    stats(&f, 0, 0);
    fx_dispose(&f);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(served_until_exp_plus_skew),
        cmocka_unit_test(revoked_and_refused_are_not_served),
        cmocka_unit_test(bounded),
        cmocka_unit_test(per_resource),
        cmocka_unit_test(rotated_keys),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
