/* policy/auth.c: bearer parsing, token hashing and grant selection. */
#include "test/unit/unit.h"

#include "core/conf/conf.h"
#include "core/base/sha256.h"
#include "core/base/siphash.h"
#include "policy/auth.h"
#include "policy/keyring.h"
#include "policy/jwt.h"

#include <mbedtls/md.h>

static void hex_of(const uint8_t h[32], char out[65]) { tg_hex_encode(h, 32, out); }

static void sha256_vectors(void **state)
{
    static const struct {
        const char *in, *hex;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"password", "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"},
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        uint8_t h[32];
        char hex[65];
        tg_sha256(v[i].in, strlen(v[i].in), h);
        hex_of(h, hex);
        assert_string_equal(hex, v[i].hex);
    }
}

/* The hash an operator puts in the config: printf %s TOKEN | sha256sum. */
static void sha256_matches_sha256sum(void **state)
{
    uint8_t rnd[12];
    char token[40];
    assert_int_equal(tg_random(rnd, sizeof(rnd)), 0);
    tg_b64url_encode(rnd, sizeof(rnd), token); /* shell-safe characters only */
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "printf %%s '%s' | sha256sum", token);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char line[128] = "";
    char *got = fgets(line, sizeof(line), f);
    int st = pclose(f);
    if (got == NULL || st != 0)
        fail_msg("could not run: %s", cmd);
    line[64] = '\0';
    uint8_t h[32];
    char hex[65];
    tg_sha256(token, strlen(token), h);
    hex_of(h, hex);
    assert_string_equal(hex, line);
}

static void ct_equal(void **state)
{
    uint8_t a[32], b[32];
    memset(a, 0x5a, sizeof(a));
    memcpy(b, a, sizeof(b));
    assert_int_equal(tg_ct_equal(a, b, 32), 1);
    for (int i = 0; i < 32; i++) {
        b[i] ^= 0x01;
        assert_int_equal(tg_ct_equal(a, b, 32), 0);
        b[i] ^= 0x81;
        assert_int_equal(tg_ct_equal(a, b, 32), 0);
        b[i] ^= 0x80;
    }
    assert_int_equal(tg_ct_equal(a, b, 0), 1);
}

static void expect_token(const char *header, const char *token)
{
    struct tg_slice t = TG_SLICE_NULL;
    int r = tg_auth_bearer(tg_slice_cstr(header), &t);
    if (r != 0)
        fail_msg("\"%s\" refused (%d), expected token \"%s\"", header, r, token);
    if (t.len != strlen(token) || memcmp(t.ptr, token, t.len) != 0)
        fail_msg("\"%s\" gave token \"%.*s\", expected \"%s\"", header, (int)t.len, t.ptr, token);
    /* The token points into the header. */
    assert_true(t.ptr >= header && t.ptr + t.len <= header + strlen(header));
}

static void expect_bad(const char *header, size_t n)
{
    struct tg_slice t = TG_SLICE("untouched");
    int r = tg_auth_bearer(tg_slice_of(header, n), &t);
    if (r != TG_EINVAL)
        fail_msg("\"%.*s\" accepted (%d) with token \"%.*s\"", (int)n, header, r, (int)t.len, t.ptr);
}
#define BAD(lit) expect_bad((lit), sizeof(lit) - 1)

static void bearer_parsing(void **state)
{
    expect_token("Bearer abc", "abc");
    expect_token("bearer abc", "abc");
    expect_token("BEARER abc", "abc");
    expect_token("bEaReR abc", "abc");
    expect_token("Bearer  abc", "abc");
    expect_token("Bearer abc  ", "abc");
    expect_token("Bearer abc\t", "abc");
    expect_token("Bearer a", "a");
    expect_token("Bearer abc.DEF-_~+/=", "abc.DEF-_~+/=");
    expect_token("Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "eyJhbGciOiJIUzI1NiJ9.e30.sig");
    /* The slice ends where it says, whatever follows in memory. */
    const char raw[] = "Bearer tokenGARBAGE";
    struct tg_slice t;
    assert_int_equal(tg_auth_bearer(tg_slice_of(raw, 12), &t), 0);
    assert_int_equal(t.len, 5);
    assert_memory_equal(t.ptr, "token", 5);

    BAD("");
    BAD("Bearer");
    BAD("Bearer ");
    BAD("Bearer     ");
    BAD("Bearer \t");
    BAD("Bearerabc");
    BAD("Bearer\tabc");
    BAD("Beare abc");
    BAD("Basic YWxhZGRpbjpvcGVuc2VzYW1l");
    BAD("Token abc");
    BAD("abc");
    BAD("Bearer a b");
    BAD("Bearer a\tb");
    BAD("Bearer a\x01");
    BAD("Bearer a\x7f");
    BAD("Bearer \x7f");
    BAD("Bearer caf\xC3\xA9");
    BAD("Bearer \xFF\xFE");
    BAD("Bearer a\0b");
    BAD("Bearer \0");
}

/* A conf with the given grants only (what tg_auth_grant looks at). */
struct grants {
    struct tg_conf conf;
    struct tg_grant_conf g[4];
};

static void add_grant(struct grants *gs, const char *name, const char *token, int anonymous)
{
    struct tg_grant_conf *g = &gs->g[gs->conf.ngrants++];
    memset(g, 0, sizeof(*g));
    g->name = (char *)name;
    g->anonymous = anonymous;
    if (token) {
        g->has_token = 1;
        tg_sha256(token, strlen(token), g->token_sha256);
    }
    gs->conf.grants = gs->g;
}

static const struct tg_grant_conf *expect_auth(const struct tg_conf *c, const char *header,
                                               enum tg_auth_result want)
{
    struct tg_principal who = {.grant = (const struct tg_grant_conf *)c}; /* must be overwritten */
    enum tg_auth_result r = tg_auth_grant(c, header ? tg_slice_cstr(header) : TG_SLICE_NULL, 0, &who, NULL);
    const struct tg_grant_conf *g = who.grant;
    if (g != NULL && strcmp(who.subject, g->name) != 0) /* a static token's subject is its grant */
        fail_msg("subject \"%s\" for grant %s", who.subject, g->name);
    if (r != want)
        fail_msg("Authorization %s%s%s: result %d, expected %d", header ? "\"" : "", header ? header : "absent",
                 header ? "\"" : "", r, want);
    if (want == TG_AUTH_OK)
        assert_non_null(g);
    else
        assert_null(g);
    return g;
}

static void grant_selection(void **state)
{
    struct grants gs;
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "alice", "alice-token", 0);
    add_grant(&gs, "bob", "bob-token", 0);
    const struct tg_conf *c = &gs.conf;

    /* No anonymous grant: a missing header is MISSING, anything wrong is INVALID. */
    expect_auth(c, NULL, TG_AUTH_MISSING);
    assert_string_equal(expect_auth(c, "Bearer alice-token", TG_AUTH_OK)->name, "alice");
    assert_string_equal(expect_auth(c, "bearer bob-token", TG_AUTH_OK)->name, "bob");
    assert_string_equal(expect_auth(c, "Bearer bob-token  ", TG_AUTH_OK)->name, "bob");
    expect_auth(c, "Bearer wrong", TG_AUTH_INVALID);
    expect_auth(c, "Bearer alice-token2", TG_AUTH_INVALID);
    expect_auth(c, "Bearer alice-toke", TG_AUTH_INVALID);
    expect_auth(c, "Bearer Alice-token", TG_AUTH_INVALID);
    expect_auth(c, "Basic alice-token", TG_AUTH_INVALID);
    expect_auth(c, "alice-token", TG_AUTH_INVALID);
    expect_auth(c, "", TG_AUTH_INVALID); /* present but empty is not absent */
    expect_auth(c, "Bearer ", TG_AUTH_INVALID);

    /* With an anonymous grant: only a missing header gets it; a wrong token is still INVALID. */
    add_grant(&gs, "anon", NULL, 1);
    assert_string_equal(expect_auth(c, NULL, TG_AUTH_OK)->name, "anon");
    expect_auth(c, "Bearer wrong", TG_AUTH_INVALID);
    expect_auth(c, "", TG_AUTH_INVALID);
    expect_auth(c, "Basic Zm9v", TG_AUTH_INVALID);
    assert_string_equal(expect_auth(c, "Bearer alice-token", TG_AUTH_OK)->name, "alice");
    /* The anonymous grant has no hash (all zero); has_token keeps it from ever matching. */
    uint8_t zero[32] = {0};
    assert_memory_equal(gs.g[2].token_sha256, zero, 32);
}

static void grant_edge_cases(void **state)
{
    struct grants gs;
    memset(&gs, 0, sizeof(gs));
    /* No grants at all. */
    expect_auth(&gs.conf, NULL, TG_AUTH_MISSING);
    expect_auth(&gs.conf, "Bearer x", TG_AUTH_INVALID);
    /* Anonymous first in the list, then a token grant: each gets its own. */
    add_grant(&gs, "anon", NULL, 1);
    add_grant(&gs, "tok", "t", 0);
    assert_string_equal(expect_auth(&gs.conf, NULL, TG_AUTH_OK)->name, "anon");
    assert_string_equal(expect_auth(&gs.conf, "Bearer t", TG_AUTH_OK)->name, "tok");
    /* A grant that is anonymous and has a token answers to both. */
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "both", "secret", 1);
    assert_string_equal(expect_auth(&gs.conf, NULL, TG_AUTH_OK)->name, "both");
    assert_string_equal(expect_auth(&gs.conf, "Bearer secret", TG_AUTH_OK)->name, "both");
    expect_auth(&gs.conf, "Bearer secreT", TG_AUTH_INVALID);
    /* Two grants with the same token: the first one listed. */
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "first", "same", 0);
    add_grant(&gs, "second", "same", 0);
    assert_string_equal(expect_auth(&gs.conf, "Bearer same", TG_AUTH_OK)->name, "first");
}

/* The SHA extensions' digest is the portable one's, for every length around the block and
 * padding edges (55, 56, 63, 64, 119, 120 ...) and random bytes; on a CPU without them both are
 * the portable one (the test says which). test/unit/core/base/test_sha256.c checks both. */
static void sha256_accelerated_matches(void **state)
{
    (void)state;
    uint8_t buf[1024];
    uint64_t x = 0x2545F4914F6CDD1DULL;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    for (size_t n = 0; n <= sizeof(buf); n++) {
        uint8_t a[32], b[32];
        tg_sha256(buf + (n % 7), n > sizeof(buf) - 7 ? sizeof(buf) - 7 : n, a);
        tg_sha256_portable(buf + (n % 7), n > sizeof(buf) - 7 ? sizeof(buf) - 7 : n, b);
        if (memcmp(a, b, 32) != 0)
            fail_msg("SHA-256 of %zu bytes differs (accelerated: %d)", n, tg_sha256_accelerated());
    }
    print_message("SHA-256 accelerated: %d\n", tg_sha256_accelerated());
}

/* The reference vector of the SipHash paper (appendix A): key 00..0f, message 00..0e. */
static void siphash_vector(void **state)
{
    (void)state;
    uint8_t key[16], msg[64];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    assert_true(tg_siphash(key, msg, 15) == 0xa129ca6149be45e5ULL);
    /* the first two of the reference implementation's vectors.h (empty and one byte) */
    assert_true(tg_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ULL);
    assert_true(tg_siphash(key, msg, 1) == 0x74f839c593dc67fdULL);
}

static const struct tg_grant_conf *memo_auth(const struct tg_conf *c, struct tg_auth_memo *m, const char *header,
                                             enum tg_auth_result want)
{
    struct tg_principal who = {0};
    enum tg_auth_result r = tg_auth_grant_memo(c, header ? tg_slice_cstr(header) : TG_SLICE_NULL, 0, m, &who, NULL);
    const struct tg_grant_conf *g = who.grant;
    if (r != want)
        fail_msg("memo, Authorization %s: result %d, expected %d", header ? header : "absent", r, want);
    return g;
}

/* The memo gives what a full check gives: the same grant for the same header, a full check
 * (and its answer) for any other header, nothing across confs. */
static void grant_memo(void **state)
{
    (void)state;
    struct grants gs;
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "alice", "alice-token", 0);
    add_grant(&gs, "bob", "bob-token", 0);
    gs.conf.serial = 7;
    struct tg_auth_memo m;
    memset(&m, 0, sizeof(m));
    assert_string_equal(memo_auth(&gs.conf, &m, "Bearer alice-token", TG_AUTH_OK)->name, "alice");
    assert_non_null(m.grant);
    assert_string_equal(memo_auth(&gs.conf, &m, "Bearer alice-token", TG_AUTH_OK)->name, "alice");
    /* another token on the same connection: checked, and remembered instead */
    assert_string_equal(memo_auth(&gs.conf, &m, "Bearer bob-token", TG_AUTH_OK)->name, "bob");
    assert_null(memo_auth(&gs.conf, &m, "Bearer alice-tokeN", TG_AUTH_INVALID));
    assert_null(m.grant); /* a failure forgets */
    assert_null(memo_auth(&gs.conf, &m, NULL, TG_AUTH_MISSING));
    /* a remembered token whose grant is gone from a reloaded conf: the new conf decides */
    assert_string_equal(memo_auth(&gs.conf, &m, "Bearer bob-token", TG_AUTH_OK)->name, "bob");
    struct grants gs2;
    memset(&gs2, 0, sizeof(gs2));
    add_grant(&gs2, "alice", "alice-token", 0);
    gs2.conf.serial = 8;
    assert_null(memo_auth(&gs2.conf, &m, "Bearer bob-token", TG_AUTH_INVALID));
    /* the same address with a later serial (a conf loaded where the old one was) */
    struct tg_auth_memo m2;
    memset(&m2, 0, sizeof(m2));
    assert_non_null(memo_auth(&gs.conf, &m2, "Bearer bob-token", TG_AUTH_OK));
    gs.conf.serial = 9;
    gs.g[1].has_token = 0; /* bob's token revoked */
    assert_null(memo_auth(&gs.conf, &m2, "Bearer bob-token", TG_AUTH_INVALID));
}

/* An HS256 JWT with key (32 bytes) for payload (JSON) and header hdr, as "Bearer …" in out. */
/* A JWKS of one HS256 secret (kid "k"), every byte fill; the secret goes to key. */
static struct tg_jwks *oct_jwks(uint8_t fill, uint8_t key[32])
{
    memset(key, fill, 32);
    char b64[64], jwks_json[200];
    b64[tg_b64url_encode(key, 32, b64)] = '\0';
    snprintf(jwks_json, sizeof(jwks_json), "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"k\",\"k\":\"%s\"}]}", b64);
    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_jwks *jwks = NULL;
    assert_int_equal(tg_jwks_parse(jwks_json, strlen(jwks_json), "mem", &jwks, &err), 0);
    tg_buf_dispose(&err);
    return jwks;
}

static void hs256_bearer_hdr(const char *hdr, const uint8_t key[32], const char *payload, char *out, size_t n)
{
    char input[1024];
    size_t len = tg_b64url_encode((const uint8_t *)hdr, strlen(hdr), input);
    input[len++] = '.';
    len += tg_b64url_encode((const uint8_t *)payload, strlen(payload), input + len);
    uint8_t mac[32];
    assert_int_equal(mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, 32, (const uint8_t *)input, len,
                                     mac),
                     0);
    char sig[64];
    sig[tg_b64url_encode(mac, 32, sig)] = '\0';
    input[len] = '\0';
    snprintf(out, n, "Bearer %s.%s", input, sig);
}

static void hs256_bearer(const uint8_t key[32], const char *payload, char *out, size_t n)
{
    hs256_bearer_hdr("{\"alg\":\"HS256\",\"typ\":\"JWT\"}", key, payload, out, n);
}

static const char *jwt_auth(const struct tg_conf *c, const uint8_t key[32], const char *iss, const char *grant,
                            enum tg_auth_result want, const char *want_why)
{
    char payload[256], header[1200];
    snprintf(payload, sizeof(payload), "{\"iss\":\"%s\",\"aud\":\"t\",\"sub\":\"%s\",\"exp\":2000}", iss, grant);
    hs256_bearer(key, payload, header, sizeof(header));
    struct tg_principal who = {0};
    const char *why = NULL;
    enum tg_auth_result r = tg_auth_grant(c, tg_slice_cstr(header), 1000, &who, &why);
    const struct tg_grant_conf *g = who.grant;
    if (g != NULL && (strcmp(who.subject, grant) != 0 || who.exp_s != 2000 || who.jwt == 0))
        fail_msg("iss %s naming %s: subject \"%s\", exp %lld, jwt %d", iss, grant, who.subject, (long long)who.exp_s, who.jwt);
    if (r != want || (want_why != NULL && (why == NULL || strcmp(why, want_why) != 0)))
        fail_msg("iss %s naming %s: result %d (%s), expected %d (%s)", iss, grant, r, why ? why : "-", want,
                 want_why ? want_why : "-");
    return g ? g->name : NULL;
}

/* Users inside a grant: jwt[].subject_claim says who a token speaks for, separately from the claim
 * that names the grant; a token without it, or with one too long to keep whole, is refused. */
static void jwt_subject_claim(void **state)
{
    (void)state;
    uint8_t key[32];
    struct tg_jwks *jwks = oct_jwks(0x42, key);
    struct tg_jwt_conf jwt = {.issuer = "https://a/", .audience = "t", .grant_claim = "team", .subject_claim = "sub",
                              .jwks = jwks, .algs = TG_JWT_ALG_HS256};
    char *only_a[] = {"https://a/"};
    struct grants gs;
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "staff", NULL, 0);
    gs.g[0].issuers = only_a, gs.g[0].nissuers = 1;
    gs.conf.jwt = &jwt;
    gs.conf.njwt = 1;

    char longsub[TG_SUBJECT_MAX + 1];
    memset(longsub, 'u', TG_SUBJECT_MAX);
    longsub[TG_SUBJECT_MAX] = '\0';
    static const struct {
        const char *extra; /* claims besides iss, aud, exp and team */
        const char *subject, *why;
    } cases[] = {
        {"\"sub\":\"alice@example\"", "alice@example", NULL},
        {"\"sub\":\"bob\"", "bob", NULL},
        {"\"email\":\"alice@example\"", NULL, "missing subject claim"},
        {"\"sub\":\"\"", NULL, "missing subject claim"},
        {"\"sub\":7", NULL, "missing subject claim"},
        {NULL, NULL, "missing subject claim"}, /* TG_SUBJECT_MAX bytes: does not fit with its NUL */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char payload[600], header[1600], extra[300];
        if (cases[i].extra == NULL)
            snprintf(extra, sizeof(extra), "\"sub\":\"%s\"", longsub);
        else
            snprintf(extra, sizeof(extra), "%s", cases[i].extra);
        snprintf(payload, sizeof(payload), "{\"iss\":\"https://a/\",\"aud\":\"t\",\"team\":\"staff\",%s,\"exp\":2000}",
                 extra);
        hs256_bearer(key, payload, header, sizeof(header));
        struct tg_principal who = {0};
        const char *why = NULL;
        enum tg_auth_result r = tg_auth_grant(&gs.conf, tg_slice_cstr(header), 1000, &who, &why);
        if (cases[i].subject != NULL) {
            assert_int_equal(r, TG_AUTH_OK);
            assert_string_equal(who.grant->name, "staff");
            assert_string_equal(who.subject, cases[i].subject);
        } else {
            assert_int_equal(r, TG_AUTH_INVALID);
            assert_null(who.grant);
            assert_string_equal(why, cases[i].why);
        }
    }
    /* 255 bytes fit */
    longsub[TG_SUBJECT_MAX - 1] = '\0';
    char payload[600], header[1600];
    snprintf(payload, sizeof(payload), "{\"iss\":\"https://a/\",\"aud\":\"t\",\"team\":\"staff\",\"sub\":\"%s\",\"exp\":2000}",
             longsub);
    hs256_bearer(key, payload, header, sizeof(header));
    struct tg_principal who = {0};
    assert_int_equal(tg_auth_grant(&gs.conf, tg_slice_cstr(header), 1000, &who, NULL), TG_AUTH_OK);
    assert_string_equal(who.subject, longsub);
    tg_jwks_free(jwks);
}

static int refetch_calls, refetch_answer;
static int on_refetch(void *arg, struct tg_keyring *k)
{
    refetch_calls++;
    return refetch_answer;
}

/* An issuer whose keys are fetched (policy/keyring.h): before the first set its tokens get 401 and
 * why; a kid the set lacks asks the driver for a refetch, only for the issuer the token's iss
 * names, and says so when one runs (the caller may wait for it). */
static void jwt_fetched_keys(void **state)
{
    (void)state;
    uint8_t key[32];
    struct tg_jwks *jwks = oct_jwks(0x42, key);
    struct tg_keyring *ring = tg_keyring_new("a");
    struct tg_jwt_conf jwt = {.issuer = "https://a/", .audience = "t", .grant_claim = "sub", .keyring = ring,
                              .algs = TG_JWT_ALG_HS256};
    char *only_a[] = {"https://a/"};
    struct grants gs;
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "ga", NULL, 0);
    gs.g[0].issuers = only_a, gs.g[0].nissuers = 1;
    gs.conf.jwt = &jwt;
    gs.conf.njwt = 1;
    const struct tg_conf *c = &gs.conf;

    assert_null(jwt_auth(c, key, "https://a/", "ga", TG_AUTH_INVALID, "the issuer's keys are not fetched yet"));
    tg_keyring_failed(ring, "JWKS https://a/keys: timed out", 1);
    assert_null(jwt_auth(c, key, "https://a/", "ga", TG_AUTH_INVALID,
                         "the issuer's keys are not fetched yet: JWKS https://a/keys: timed out"));
    assert_null(jwt_auth(c, key, "https://c/", "ga", TG_AUTH_INVALID, "invalid token")); /* not its issuer */
    tg_keyring_set_jwks(ring, jwks, 2);
    assert_string_equal(jwt_auth(c, key, "https://a/", "ga", TG_AUTH_OK, NULL), "ga");

    tg_keyring_on_unknown_kid(ring, on_refetch, NULL);
    static const char rotated[] = "{\"alg\":\"HS256\",\"kid\":\"rotated\"}";
    char header[1200];
    struct tg_principal who = {0};
    const char *why = NULL;
    hs256_bearer_hdr(rotated, key, "{\"iss\":\"https://a/\",\"aud\":\"t\",\"sub\":\"ga\",\"exp\":2000}", header,
                     sizeof(header));
    refetch_answer = 1;
    assert_int_equal(tg_auth_grant(c, tg_slice_cstr(header), 1000, &who, &why), TG_AUTH_INVALID);
    assert_ptr_equal(why, tg_auth_keys_refetching);
    assert_int_equal(refetch_calls, 1);
    refetch_answer = 0; /* none runs (at most one per refresh_min_s): plain "unknown key" */
    assert_int_equal(tg_auth_grant(c, tg_slice_cstr(header), 1000, &who, &why), TG_AUTH_INVALID);
    assert_string_equal(why, "unknown key");
    assert_int_equal(refetch_calls, 2);
    /* another issuer's token with an unknown kid never makes this issuer refetch */
    hs256_bearer_hdr(rotated, key, "{\"iss\":\"https://c/\",\"aud\":\"t\",\"sub\":\"ga\",\"exp\":2000}", header,
                     sizeof(header));
    assert_int_equal(tg_auth_grant(c, tg_slice_cstr(header), 1000, &who, &why), TG_AUTH_INVALID);
    assert_int_equal(refetch_calls, 2);
    tg_keyring_unref(ring); /* frees jwks */
}

/* jwt[].grant: every token of the issuer names that grant, whatever its claims say; each is told
 * apart by its subject. The grant must still take the issuer. */
static void jwt_issuer_grant(void **state)
{
    (void)state;
    uint8_t key[32];
    struct tg_jwks *jwks = oct_jwks(0x24, key);
    struct tg_jwt_conf jwt = {.issuer = "https://a/", .audience = "t", .grant = "staff", .subject_claim = "sub",
                              .jwks = jwks, .algs = TG_JWT_ALG_HS256};
    char *only_a[] = {"https://a/"};
    struct grants gs;
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "staff", NULL, 0);
    add_grant(&gs, "other", NULL, 0);
    gs.g[0].issuers = only_a, gs.g[0].nissuers = 1;
    gs.g[1].issuers = only_a, gs.g[1].nissuers = 1;
    gs.conf.jwt = &jwt;
    gs.conf.njwt = 1;
    static const char *const payloads[] = {
        "{\"iss\":\"https://a/\",\"aud\":\"t\",\"sub\":\"alice\",\"exp\":2000}",              /* no grant claim */
        "{\"iss\":\"https://a/\",\"aud\":\"t\",\"sub\":\"alice\",\"team\":\"other\",\"exp\":2000}", /* ignored */
    };
    for (size_t i = 0; i < 2; i++) {
        char header[1200];
        hs256_bearer(key, payloads[i], header, sizeof(header));
        struct tg_principal who = {0};
        const char *why = NULL;
        assert_int_equal(tg_auth_grant(&gs.conf, tg_slice_cstr(header), 1000, &who, &why), TG_AUTH_OK);
        assert_string_equal(who.grant->name, "staff");
        assert_string_equal(who.subject, "alice");
    }
    /* the grant no longer takes the issuer (a reload in between): refused */
    gs.g[0].nissuers = 0;
    char header[1200];
    hs256_bearer(key, payloads[0], header, sizeof(header));
    struct tg_principal who = {0};
    const char *why = NULL;
    assert_int_equal(tg_auth_grant(&gs.conf, tg_slice_cstr(header), 1000, &who, &why), TG_AUTH_INVALID);
    assert_string_equal(why, "the token's issuer may not use the grant it names");
    tg_jwks_free(jwks);
}


/* A JWT names only a grant bound to its issuer (grants[].issuers): not another issuer's, not a
 * static-token or certificate grant that lists no issuer, and one of several issuers its own. */
static void jwt_grants_bound_to_issuers(void **state)
{
    (void)state;
    uint8_t key[32];
    struct tg_jwks *jwks = oct_jwks(0x42, key);

    struct tg_jwt_conf jwt[2] = {{.issuer = "https://a/", .audience = "t", .skew_s = 0, .grant_claim = "sub", .jwks = jwks, .algs = TG_JWT_ALG_HS256},
                                 {.issuer = "https://b/", .audience = "t", .skew_s = 0, .grant_claim = "sub", .jwks = jwks, .algs = TG_JWT_ALG_HS256}};
    char *only_a[] = {"https://a/"}, *only_b[] = {"https://b/"}, *both[] = {"https://b/", "https://a/"};
    struct grants gs;
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "ga", NULL, 0);
    gs.g[0].issuers = only_a, gs.g[0].nissuers = 1;
    add_grant(&gs, "gb", NULL, 0);
    gs.g[1].issuers = only_b, gs.g[1].nissuers = 1;
    add_grant(&gs, "static", "static-token", 0);
    add_grant(&gs, "shared", NULL, 0);
    gs.g[3].issuers = both, gs.g[3].nissuers = 2;
    gs.conf.jwt = jwt;
    gs.conf.njwt = 2;
    const struct tg_conf *c = &gs.conf;

    assert_string_equal(jwt_auth(c, key, "https://a/", "ga", TG_AUTH_OK, NULL), "ga");
    assert_string_equal(jwt_auth(c, key, "https://b/", "gb", TG_AUTH_OK, NULL), "gb");
    assert_string_equal(jwt_auth(c, key, "https://a/", "shared", TG_AUTH_OK, NULL), "shared");
    assert_string_equal(jwt_auth(c, key, "https://b/", "shared", TG_AUTH_OK, NULL), "shared");
    const char *refused = "the token's issuer may not use the grant it names";
    assert_null(jwt_auth(c, key, "https://a/", "gb", TG_AUTH_INVALID, refused));
    assert_null(jwt_auth(c, key, "https://b/", "ga", TG_AUTH_INVALID, refused));
    assert_null(jwt_auth(c, key, "https://a/", "static", TG_AUTH_INVALID, refused));
    /* a certificate grant without issuers, and a grant without any credential, the same */
    gs.g[2].has_token = 0;
    gs.g[2].tls_subject = "CN=static";
    assert_null(jwt_auth(c, key, "https://b/", "static", TG_AUTH_INVALID, refused));
    gs.g[2].tls_subject = NULL;
    assert_null(jwt_auth(c, key, "https://b/", "static", TG_AUTH_INVALID, refused));
    assert_null(jwt_auth(c, key, "https://a/", "nobody", TG_AUTH_INVALID, "the token names no configured grant"));
    assert_null(jwt_auth(c, key, "https://c/", "ga", TG_AUTH_INVALID, "wrong issuer"));
    tg_jwks_free(jwks);
}

/* What a channel keeps of its credential (tg_auth_cred_of) and whether a later conf still takes it
 * (tg_auth_cred_holds): a rotated or removed token, a removed grant, a changed tls_subject or
 * issuers, a removed issuer do not; an unchanged one does. A JWT's end is exp + skew_s. */
static void channel_credentials(void **state)
{
    (void)state;
    uint8_t key[32];
    struct tg_jwks *jwks = oct_jwks(0x24, key);
    struct tg_jwt_conf jwt = {.issuer = "https://a/", .audience = "t", .skew_s = 30, .grant_claim = "sub",
                              .jwks = jwks, .algs = TG_JWT_ALG_HS256};
    char *only_a[] = {"https://a/"};
    struct grants gs;
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "tok", "tok-token", 0);
    add_grant(&gs, "ga", NULL, 0);
    gs.g[1].issuers = only_a, gs.g[1].nissuers = 1;
    add_grant(&gs, "cert", NULL, 0);
    gs.g[2].tls_subject = "client-1";
    add_grant(&gs, "anon", NULL, 1);
    gs.conf.jwt = &jwt;
    gs.conf.njwt = 1;
    struct tg_conf *c = &gs.conf;

    struct tg_auth_cred tok, j, cert, anon;
    tg_auth_cred_of(c, tg_slice_cstr("Bearer tok-token"), 1000, &gs.g[0], NULL, NULL, NULL, &tok);
    assert_int_equal(tok.kind, TG_CRED_TOKEN);
    char header[1200];
    hs256_bearer(key, "{\"iss\":\"https://a/\",\"aud\":\"t\",\"sub\":\"ga\",\"exp\":2000}", header, sizeof(header));
    tg_auth_cred_of(c, tg_slice_cstr(header), 1000, &gs.g[1], NULL, NULL, NULL, &j);
    assert_int_equal(j.kind, TG_CRED_JWT);
    assert_int_equal(j.end_s, 2030);
    uint8_t iss_h[32];
    tg_sha256("https://a/", 10, iss_h);
    assert_memory_equal(j.issuer_sha256, iss_h, 32);
    assert_null(tg_auth_cert_grant(c, "CN=other", "other"));
    assert_ptr_equal(tg_auth_cert_grant(c, "CN=client-1", "client-1"), &gs.g[2]);
    tg_auth_cred_of(c, TG_SLICE_NULL, 1000, &gs.g[2], "CN=client-1", "client-1", NULL, &cert);
    assert_int_equal(cert.kind, TG_CRED_CERT);
    tg_auth_cred_of(c, TG_SLICE_NULL, 1000, &gs.g[3], NULL, NULL, NULL, &anon);
    assert_int_equal(anon.kind, TG_CRED_ANON);
    for (const struct tg_auth_cred *k = &tok; k != NULL; k = k == &tok ? &j : k == &j ? &cert : k == &cert ? &anon : NULL)
        assert_true(tg_auth_cred_holds(c, k));

    tg_sha256("new-token", 9, gs.g[0].token_sha256); /* rotated */
    assert_false(tg_auth_cred_holds(c, &tok));
    tg_sha256("tok-token", 9, gs.g[0].token_sha256);
    gs.g[0].name = "renamed"; /* the token now names another grant */
    assert_false(tg_auth_cred_holds(c, &tok));
    gs.g[0].name = "tok";
    assert_true(tg_auth_cred_holds(c, &tok));

    gs.g[1].nissuers = 0; /* the grant no longer lists the issuer */
    assert_false(tg_auth_cred_holds(c, &j));
    gs.g[1].nissuers = 1;
    gs.conf.njwt = 0; /* the issuer is gone */
    assert_false(tg_auth_cred_holds(c, &j));
    gs.conf.njwt = 1;

    gs.g[2].tls_subject = "client-2";
    assert_false(tg_auth_cred_holds(c, &cert));
    gs.g[2].tls_subject = "client-1";
    gs.g[3].anonymous = 0;
    assert_false(tg_auth_cred_holds(c, &anon));
    gs.conf.ngrants = 2; /* cert and anon removed */
    assert_false(tg_auth_cred_holds(c, &cert));
    assert_true(tg_auth_cred_holds(c, &j));
    tg_jwks_free(jwks);
}

/* Scopes: a JWT's "scope" (space-separated) and "scp" (an array, or a string), bounded, a malformed
 * one refusing the token; a static token holds its grant's scopes, or none. And RFC 8707: "aud"
 * may name the route's resource instead of jwt[].audience; without either it is never unchecked. */
static void jwt_scopes_and_resource(void **state)
{
    (void)state;
    uint8_t key[32];
    struct tg_jwks *jwks = oct_jwks(0x42, key);
    struct tg_jwt_conf jwt = {.issuer = "https://a/", .audience = "t", .grant_claim = "team", .subject_claim = "sub",
                              .jwks = jwks, .algs = TG_JWT_ALG_HS256};
    char *only_a[] = {"https://a/"};
    struct grants gs;
    memset(&gs, 0, sizeof(gs));
    add_grant(&gs, "staff", NULL, 0);
    gs.g[0].issuers = only_a, gs.g[0].nissuers = 1;
    add_grant(&gs, "ci", "ci-token", 0);
    gs.g[1].scopes = "deploy read";
    add_grant(&gs, "plain", "plain-token", 0);
    gs.conf.jwt = &jwt;
    gs.conf.njwt = 1;

    char many[2000];
    size_t mn = 0;
    for (int i = 0; i <= TG_SCOPES_MAX_COUNT; i++)
        mn += (size_t)snprintf(many + mn, sizeof(many) - mn, "%ss%d", i ? " " : "", i);
    static const struct {
        const char *claims; /* besides iss, aud, team, sub, exp; NULL: "scope" with too many */
        const char *scopes, *why;
    } cases[] = {
        {"\"x\":1", "", NULL},
        {"\"scope\":\"\"", "", NULL},
        {"\"scope\":\"deploy\"", "deploy", NULL},
        {"\"scope\":\"read deploy read\"", "read deploy", NULL},
        {"\"scp\":[\"a:b\",\"c\"]", "a:b c", NULL},
        {"\"scp\":\"a c\"", "a c", NULL},
        {"\"scope\":\"a\",\"scp\":[\"b\",\"a\"]", "a b", NULL},
        {"\"scp\":[]", "", NULL},
        {"\"scope\":[\"deploy\"]", NULL, "malformed scope claim"},
        {"\"scope\":7", NULL, "malformed scope claim"},
        {"\"scope\":\"a  b\"", NULL, "malformed scope claim"},
        {"\"scope\":\" a\"", NULL, "malformed scope claim"},
        {"\"scope\":\"a\\\"b\"", NULL, "malformed scope claim"},
        {"\"scope\":\"caf\\u00e9\"", NULL, "malformed scope claim"},
        {"\"scp\":[\"a\",3]", NULL, "malformed scope claim"},
        {"\"scp\":[\"\"]", NULL, "malformed scope claim"},
        {"\"scp\":{\"a\":1}", NULL, "malformed scope claim"},
        {NULL, NULL, "too many scopes"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char payload[2400], header[3600], extra[2100];
        if (cases[i].claims == NULL)
            snprintf(extra, sizeof(extra), "\"scope\":\"%s\"", many);
        else
            snprintf(extra, sizeof(extra), "%s", cases[i].claims);
        snprintf(payload, sizeof(payload),
                 "{\"iss\":\"https://a/\",\"aud\":\"t\",\"team\":\"staff\",\"sub\":\"u\",%s,\"exp\":2000}", extra);
        hs256_bearer(key, payload, header, sizeof(header));
        struct tg_principal who = {0};
        const char *why = NULL;
        enum tg_auth_result r = tg_auth_grant(&gs.conf, tg_slice_cstr(header), 1000, &who, &why);
        if (cases[i].scopes != NULL) {
            if (r != TG_AUTH_OK || strcmp(who.scopes, cases[i].scopes) != 0)
                fail_msg("case %zu: result %d (%s), scopes \"%s\", expected \"%s\"", i, r, why ? why : "-", who.scopes,
                         cases[i].scopes);
        } else {
            assert_int_equal(r, TG_AUTH_INVALID);
            assert_null(who.grant);
            assert_string_equal(why, cases[i].why);
        }
    }
    /* A static token: its grant's scopes, or none. */
    struct tg_principal who = {0};
    assert_int_equal(tg_auth_grant(&gs.conf, tg_slice_cstr("Bearer ci-token"), 1000, &who, NULL), TG_AUTH_OK);
    assert_string_equal(who.scopes, "deploy read");
    assert_int_equal(tg_auth_grant(&gs.conf, tg_slice_cstr("Bearer plain-token"), 1000, &who, NULL), TG_AUTH_OK);
    assert_string_equal(who.scopes, "");

    /* RFC 8707: aud naming the route's resource, the audience, or neither. */
    static const struct {
        const char *aud, *audience, *resource;
        int ok;
    } auds[] = {
        {"\"https://gw/a/mcp\"", "t", "https://gw/a/mcp", 1},
        {"[\"x\",\"https://gw/a/mcp\"]", "t", "https://gw/a/mcp", 1},
        {"\"t\"", "t", "https://gw/a/mcp", 1},
        {"\"https://gw/b/mcp\"", "t", "https://gw/a/mcp", 0}, /* another route's */
        {"\"https://gw/a/mcp\"", NULL, "https://gw/a/mcp", 1},
        {"\"https://gw/b/mcp\"", NULL, "https://gw/a/mcp", 0},
        {"\"t\"", NULL, "https://gw/a/mcp", 0},
        {"\"https://gw/a/mcp\"", "t", NULL, 0},
        {"\"https://gw/a/mcp\"", NULL, NULL, 0}, /* nothing to check aud against: refused */
        {"\"\"", NULL, NULL, 0},
    };
    for (size_t i = 0; i < sizeof(auds) / sizeof(auds[0]); i++) {
        char payload[400], header[1200];
        snprintf(payload, sizeof(payload),
                 "{\"iss\":\"https://a/\",\"aud\":%s,\"team\":\"staff\",\"sub\":\"u\",\"exp\":2000}", auds[i].aud);
        hs256_bearer(key, payload, header, sizeof(header));
        jwt.audience = (char *)auds[i].audience;
        struct tg_principal w = {0};
        w.resource = auds[i].resource;
        const char *why = NULL;
        enum tg_auth_result r = tg_auth_grant(&gs.conf, tg_slice_cstr(header), 1000, &w, &why);
        if ((r == TG_AUTH_OK) != auds[i].ok)
            fail_msg("aud case %zu: result %d (%s)", i, r, why ? why : "-");
        if (!auds[i].ok)
            assert_string_equal(why, "wrong audience");
        assert_ptr_equal(w.resource, auds[i].resource); /* an input, kept */
        /* a channel's credential is the JWT's only with the same resource */
        struct tg_auth_cred cred;
        tg_auth_cred_of(&gs.conf, tg_slice_cstr(header), 1000, &gs.g[0], NULL, NULL, auds[i].resource, &cred);
        assert_int_equal(cred.kind, auds[i].ok ? TG_CRED_JWT : TG_CRED_ANON);
    }
    tg_jwks_free(jwks);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sha256_vectors),
        cmocka_unit_test(sha256_matches_sha256sum),
        cmocka_unit_test(ct_equal),
        cmocka_unit_test(bearer_parsing),
        cmocka_unit_test(grant_selection),
        cmocka_unit_test(grant_edge_cases),
        cmocka_unit_test(siphash_vector),
        cmocka_unit_test(sha256_accelerated_matches),
        cmocka_unit_test(grant_memo),
        cmocka_unit_test(jwt_grants_bound_to_issuers),
        cmocka_unit_test(jwt_fetched_keys),
        cmocka_unit_test(jwt_subject_claim),
        cmocka_unit_test(jwt_issuer_grant),
        cmocka_unit_test(channel_credentials),
        cmocka_unit_test(jwt_scopes_and_resource),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
