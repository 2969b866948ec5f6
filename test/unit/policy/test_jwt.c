/* policy/jwt.c: JWKS loading and JWT verification.
 *
 * Keys and tokens are made at test time by fixtures/jwt/gen.mjs with
 * node:crypto (OpenSSL), an implementation independent of the mbedtls
 * verifier under test; no private key is committed. Every token is built
 * for verification at NOW. */
#include "test/unit/unit.h"

#include <errno.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/base/json.h"
#include "policy/jwt.h"

extern char **environ;

#define NOW INT64_C(1700000000)
#define ISS "https://idp.test"
#define AUD "tollgate"

static const char *const fixture_files[] = {"jwks.json", "tokens.json", "jwks_rsa1024.json", "jwks_p384.json",
                                            "jwks_private.json"};

static struct {
    char dir[256];
    cJSON *tokens;
    struct tg_jwks *jwks;
} fx;

/* The tests of everything but the allow-list run with every algorithm the verifier knows allowed. */
#define ALL_ALGS (TG_JWT_ALG_HS256 | TG_JWT_ALG_RS256 | TG_JWT_ALG_ES256 | TG_JWT_ALG_PS256)
static const struct tg_jwt_rules default_rules = {ISS, AUD, 30, "sub", ALL_ALGS, "sub", NULL, NULL};

/* ---- fixtures ---- */

static void fixture_path(char *out, size_t n, const char *file) { snprintf(out, n, "%s/%s", fx.dir, file); }

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    struct tg_buf b;
    tg_buf_init(&b);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        tg_buf_append(&b, chunk, n);
    fclose(f);
    *len = b.len;
    tg_buf_append(&b, "", 1);
    return tg_buf_release(&b);
}

static int generate_fixtures(void)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(fx.dir, sizeof(fx.dir), "%s/tg-jwt-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(fx.dir) == NULL) {
        fprintf(stderr, "mkdtemp %s: %s\n", fx.dir, strerror(errno));
        return -1;
    }
    char now[32];
    snprintf(now, sizeof(now), "%lld", (long long)NOW);
    char *argv[] = {"node", TG_SOURCE_DIR "/test/unit/policy/fixtures/jwt/gen.mjs", fx.dir, now, NULL};
    pid_t pid;
    int r = posix_spawnp(&pid, "node", NULL, NULL, argv, environ);
    if (r != 0) {
        fprintf(stderr, "cannot run node (needed to generate JWT keys and tokens): %s\n", strerror(r));
        return -1;
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "node gen.mjs failed (status %d)\n", st);
        return -1;
    }
    char path[512];
    size_t len;
    fixture_path(path, sizeof(path), "tokens.json");
    char *text = read_all(path, &len);
    struct tg_json_doc doc = {0};
    if (text == NULL || tg_json_parse(text, len, 4, 1, &doc, NULL, NULL) != 0) {
        fprintf(stderr, "cannot read %s\n", path);
        free(text);
        return -1;
    }
    free(text);
    fx.tokens = doc.root;
    return 0;
}

static void remove_fixtures(void)
{
    char path[512];
    for (size_t i = 0; i < sizeof(fixture_files) / sizeof(fixture_files[0]); i++) {
        fixture_path(path, sizeof(path), fixture_files[i]);
        unlink(path);
    }
    rmdir(fx.dir);
    cJSON_Delete(fx.tokens);
    fx.tokens = NULL;
}

static const char *tok(const char *name)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(fx.tokens, name);
    if (!cJSON_IsString(t))
        fail_msg("gen.mjs made no token \"%s\"", name);
    return t->valuestring;
}

/* ---- assertions ---- */

static void check(const struct tg_jwks *keys, const char *label, struct tg_slice token,
                  const struct tg_jwt_rules *rules, int64_t now, int want_rc, const char *want)
{
    char grant[64];
    const char *why = "(unset)";
    int rc = tg_jwt_verify(keys, token, rules, now, grant, sizeof(grant), &why);
    if (want_rc == 0) {
        if (rc != 0)
            fail_msg("%s: refused (%d, \"%s\"), expected grant \"%s\"", label, rc, why ? why : "(null)", want);
        if (strcmp(grant, want) != 0)
            fail_msg("%s: grant \"%s\", expected \"%s\"", label, grant, want);
        assert_null(why);
    } else {
        if (rc != want_rc || why == NULL || strcmp(why, want) != 0)
            fail_msg("%s: got %d \"%s\", expected %d \"%s\"", label, rc, why ? why : "(null)", want_rc, want);
        assert_string_equal(grant, "");
    }
}

static void ok_at(const char *name, const struct tg_jwt_rules *rules, int64_t now, const char *grant)
{
    check(fx.jwks, name, tg_slice_cstr(tok(name)), rules, now, 0, grant);
}

static void ok(const char *name) { ok_at(name, &default_rules, NOW, "alice"); }

static void bad_at(const char *name, const struct tg_jwt_rules *rules, int64_t now, const char *why)
{
    check(fx.jwks, name, tg_slice_cstr(tok(name)), rules, now, TG_EINVAL, why);
}

static void bad(const char *name, const char *why) { bad_at(name, &default_rules, NOW, why); }

static void bad_raw(const char *label, struct tg_slice token, const char *why)
{
    check(fx.jwks, label, token, &default_rules, NOW, TG_EINVAL, why);
}

static struct tg_jwks *parse_jwks(const char *json)
{
    struct tg_jwks *k = NULL;
    struct tg_buf err;
    tg_buf_init(&err);
    int rc = tg_jwks_parse(json, strlen(json), "mem.json", &k, &err);
    if (rc != 0)
        fail_msg("JWKS refused: %.*s", (int)err.len, err.base);
    assert_int_equal(err.len, 0);
    tg_buf_dispose(&err);
    return k;
}

/* The set must be refused and err must be exactly `want`. */
static void jwks_error(const char *json, const char *want)
{
    struct tg_jwks *k = (struct tg_jwks *)1;
    struct tg_buf err;
    tg_buf_init(&err);
    int rc = tg_jwks_parse(json, strlen(json), "mem.json", &k, &err);
    tg_buf_append(&err, "", 1);
    char got[1024];
    snprintf(got, sizeof(got), "%s", err.base);
    tg_buf_dispose(&err);
    if (rc != TG_EINVAL || k != NULL || strcmp(got, want) != 0)
        fail_msg("JWKS %s\n  got %d \"%s\"\n  expected \"%s\"", json, rc, got, want);
}

static void jwks_file_error(const char *file, const char *want_after_path)
{
    char path[512], want[1024];
    fixture_path(path, sizeof(path), file);
    snprintf(want, sizeof(want), "%s: %s", path, want_after_path);
    struct tg_jwks *k = (struct tg_jwks *)1;
    struct tg_buf err;
    tg_buf_init(&err);
    int rc = tg_jwks_load(path, &k, &err);
    tg_buf_append(&err, "", 1);
    char got[1024];
    snprintf(got, sizeof(got), "%s", err.base);
    tg_buf_dispose(&err);
    if (rc != TG_EINVAL || k != NULL || strcmp(got, want) != 0)
        fail_msg("%s\n  got %d \"%s\"\n  expected \"%s\"", file, rc, got, want);
}

/* ---- tokens that pass ---- */

static void valid_tokens(void **state)
{
    static const char *const names[] = {
        "hs_ok",      "rs_ok",       "es_ok",    "hs_nokid",  "rs_nokid",       "es_nokid", "typ_missing",
        "typ_at_jwt", "jku_ignored", "nbf_past", "aud_array", "odd_payload_ok", "at_cap",
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        ok(names[i]);
    ok_at("sub_unicode", &default_rules, NOW, "zo\xc3\xab");
    /* The cap is inclusive: the largest token gen.mjs could make within it. */
    assert_in_range(strlen(tok("at_cap")), TG_JWT_MAX_TOKEN - 3, TG_JWT_MAX_TOKEN);
}

static void grant_claim_is_configurable(void **state)
{
    struct tg_jwt_rules r = default_rules;
    r.grant_claim = "tollgate_grant";
    ok_at("grant_in_other_claim", &r, NOW, "bob");
    bad_at("rs_ok", &r, NOW, "missing grant claim");
    r.grant_claim = "iss";
    ok_at("rs_ok", &r, NOW, ISS);
}

static void grant_buffer_size(void **state)
{
    struct tg_slice t = tg_slice_cstr(tok("rs_ok"));
    char grant[8];
    const char *why = NULL;
    memset(grant, 'x', sizeof(grant));
    assert_int_equal(tg_jwt_verify(fx.jwks, t, &default_rules, NOW, grant, 5, &why), TG_ELIMIT);
    assert_string_equal(why, "grant claim too long");
    assert_int_equal(grant[0], '\0');
    assert_int_equal(grant[5], 'x'); /* nothing written past grant_sz */
    assert_int_equal(tg_jwt_verify(fx.jwks, t, &default_rules, NOW, grant, 6, &why), 0);
    assert_string_equal(grant, "alice");
    assert_int_equal(grant[6], 'x');
}

/* ---- time ---- */

static void time_claims(void **state)
{
    bad("expired", "expired");
    bad("nbf_future", "not yet valid");
    bad("iat_future", "not yet valid");
}

/* rs_ok: exp = NOW + 3600; nbf_future: nbf = NOW + 600; iat_future: iat = NOW + 600. */
static void skew_boundaries(void **state)
{
    struct tg_jwt_rules r0 = default_rules, r30 = default_rules, rneg = default_rules;
    r0.skew_s = 0;
    r30.skew_s = 30;
    rneg.skew_s = -100; /* treated as no skew, never as a shorter lifetime */
    ok_at("rs_ok", &r0, NOW + 3599, "alice");
    bad_at("rs_ok", &r0, NOW + 3600, "expired");
    ok_at("rs_ok", &r30, NOW + 3629, "alice");
    bad_at("rs_ok", &r30, NOW + 3630, "expired");
    ok_at("rs_ok", &rneg, NOW + 3599, "alice");
    bad_at("rs_ok", &rneg, NOW + 3600, "expired");

    ok_at("nbf_future", &r0, NOW + 600, "alice");
    bad_at("nbf_future", &r0, NOW + 599, "not yet valid");
    ok_at("nbf_future", &r30, NOW + 570, "alice");
    bad_at("nbf_future", &r30, NOW + 569, "not yet valid");
    ok_at("iat_future", &r30, NOW + 570, "alice");
    bad_at("iat_future", &r30, NOW + 569, "not yet valid");

    /* A NumericDate may have a fraction: exp = NOW + 0.5. */
    ok_at("exp_fraction", &r0, NOW, "alice");
    bad_at("exp_fraction", &r0, NOW + 1, "expired");
    /* Far past and far future clocks. */
    bad_at("rs_ok", &r30, INT64_MAX, "expired");
    bad_at("rs_ok", &r30, INT64_MIN, "not yet valid"); /* iat = NOW - 5 */
}

static void time_claim_types(void **state)
{
    static const char *const names[] = {"missing_exp", "exp_string", "exp_null", "nbf_string", "iat_bool", "exp_huge"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        bad(names[i], "malformed token");
}

/* ---- issuer, audience, grant ---- */

static void issuer_and_audience(void **state)
{
    bad("wrong_iss", "wrong issuer");
    bad("missing_iss", "wrong issuer");
    bad("iss_array", "wrong issuer");
    bad("wrong_aud", "wrong audience");
    bad("missing_aud", "wrong audience");
    bad("aud_array_without", "wrong audience");
    bad("aud_prefix", "wrong audience");

    struct tg_jwt_rules any = default_rules;
    any.issuer = NULL;
    any.audience = NULL;
    ok_at("wrong_iss", &any, NOW, "alice");
    ok_at("missing_iss", &any, NOW, "alice");
    ok_at("wrong_aud", &any, NOW, "alice");
    ok_at("missing_aud", &any, NOW, "alice");
}

static void grant_claim_missing(void **state)
{
    bad("no_sub", "missing grant claim");
    bad("sub_number", "missing grant claim");
    bad("sub_empty", "missing grant claim");
    bad("sub_object", "missing grant claim");
}

/* ---- algorithms and keys ---- */

static void unsupported_algs(void **state)
{
    static const char *const names[] = {"alg_none",  "alg_none_kid", "alg_None",  "alg_none_signed",
                                        "alg_hs256_lower", "alg_HS384", "alg_RS512", "alg_EdDSA"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        bad(names[i], "unsupported alg");
    bad("alg_missing", "malformed token");
    bad("alg_number", "malformed token");
}

/* Each issuer lists the algorithms its tokens may use; 0 means RS256 and ES256. An algorithm outside
 * the list is refused before any key is looked at, whatever the token's signature. */
static void algorithm_allow_list(void **state)
{
    struct tg_jwt_rules dflt = default_rules, es_only = default_rules, ps = default_rules;
    dflt.algs = 0;
    es_only.algs = TG_JWT_ALG_ES256;
    ps.algs = TG_JWT_ALGS_DEFAULT | TG_JWT_ALG_PS256;

    /* The default: RS256 and ES256 pass, PS256 and HS256 do not, none is never an algorithm. */
    ok_at("rs_ok", &dflt, NOW, "alice");
    ok_at("es_ok", &dflt, NOW, "alice");
    bad_at("ps_ok", &dflt, NOW, "algorithm PS256 is not allowed for this issuer");
    bad_at("alg_PS256", &dflt, NOW, "algorithm PS256 is not allowed for this issuer");
    bad_at("hs_ok", &dflt, NOW, "algorithm HS256 is not allowed for this issuer");
    bad_at("confusion_pem_nokid", &dflt, NOW, "algorithm HS256 is not allowed for this issuer");
    bad_at("alg_none", &dflt, NOW, "unsupported alg");
    bad_at("alg_none_signed", &dflt, NOW, "unsupported alg");

    /* Listed: PS256 verifies (RSASSA-PSS, SHA-256, MGF1-SHA-256, 32-byte salt). */
    ok_at("ps_ok", &ps, NOW, "alice");
    ok_at("ps_nokid", &ps, NOW, "alice");
    ok_at("ps_unbound_key", &ps, NOW, "alice");
    ok_at("rs_ok", &ps, NOW, "alice");
    bad_at("ps_salt_max", &ps, NOW, "bad signature");
    bad_at("ps_salt_0", &ps, NOW, "bad signature");
    bad_at("ps_pkcs1_sig", &ps, NOW, "bad signature");
    bad_at("ps_tampered", &ps, NOW, "bad signature");
    /* A key whose own "alg" names the other RSA algorithm is never tried. */
    bad_at("ps_with_rs_key", &ps, NOW, "unknown key");
    bad_at("rs_with_ps_key", &ps, NOW, "unknown key");
    bad_at("hs_ok", &ps, NOW, "algorithm HS256 is not allowed for this issuer");

    /* ["ES256"]: a valid RS256 token is refused by its alg. */
    ok_at("es_ok", &es_only, NOW, "alice");
    bad_at("rs_ok", &es_only, NOW, "algorithm RS256 is not allowed for this issuer");
    bad_at("rs_nokid", &es_only, NOW, "algorithm RS256 is not allowed for this issuer");
    bad_at("ps_ok", &es_only, NOW, "algorithm PS256 is not allowed for this issuer");
    bad_at("alg_none", &es_only, NOW, "unsupported alg");

    assert_int_equal(tg_jwt_alg_bit("PS256"), TG_JWT_ALG_PS256);
    assert_int_equal(tg_jwt_alg_bit("ps256"), 0);
    assert_int_equal(tg_jwt_alg_bit("none"), 0);
}

/* HS256 "signed" with the bytes of a public key must never verify: HS256
 * only ever looks at "oct" keys. */
static void alg_confusion(void **state)
{
    bad("confusion_pem_kid", "unknown key"); /* kid names the RSA key: not an HMAC key */
    bad("confusion_ec_kid", "unknown key");
    bad("confusion_pem_nokid", "bad signature"); /* only the oct keys were tried */
    bad("confusion_pkcs1_nokid", "bad signature");
    bad("confusion_n_nokid", "bad signature");
    bad("confusion_jwk_nokid", "bad signature");
    bad("confusion_ec_nokid", "bad signature");

    /* With no oct key at all there is nothing to try. */
    char path[512];
    size_t len;
    fixture_path(path, sizeof(path), "jwks.json");
    char *all = read_all(path, &len);
    assert_non_null(all);
    struct tg_json_doc doc = {0};
    assert_int_equal(tg_json_parse(all, len, 8, 1, &doc, NULL, NULL), 0);
    free(all);
    cJSON *keys = cJSON_GetObjectItemCaseSensitive(doc.root, "keys");
    cJSON *k = keys->child;
    while (k != NULL) {
        cJSON *next = k->next;
        if (strcmp(cJSON_GetObjectItemCaseSensitive(k, "kty")->valuestring, "oct") == 0)
            cJSON_Delete(cJSON_DetachItemViaPointer(keys, k));
        k = next;
    }
    char *pub = cJSON_PrintUnformatted(doc.root);
    cJSON_Delete(doc.root);
    struct tg_jwks *no_oct = parse_jwks(pub);
    free(pub);
    check(no_oct, "confusion_pem_nokid", tg_slice_cstr(tok("confusion_pem_nokid")), &default_rules, NOW, TG_EINVAL,
          "unknown key");
    check(no_oct, "confusion_n_nokid", tg_slice_cstr(tok("confusion_n_nokid")), &default_rules, NOW, TG_EINVAL,
          "unknown key");
    check(no_oct, "rs_ok", tg_slice_cstr(tok("rs_ok")), &default_rules, NOW, 0, "alice");
    tg_jwks_free(no_oct);
}

static void key_selection(void **state)
{
    bad("unknown_kid", "unknown key");
    bad("rs_with_es_kid", "unknown key");
    bad("es_with_rs_kid", "unknown key");
    bad("kid_empty", "unknown key");
    bad("hs_with_decoy_kid", "bad signature"); /* a kid means that key only */
    bad("kid_number", "malformed token");
}

static void keys_without_kid(void **state)
{
    /* A set whose keys have no kid: tokens with a kid find nothing, tokens
     * without one are tried against every key of the right type. */
    char path[512];
    size_t len;
    fixture_path(path, sizeof(path), "jwks.json");
    char *all = read_all(path, &len);
    assert_non_null(all);
    struct tg_json_doc doc = {0};
    assert_int_equal(tg_json_parse(all, len, 8, 1, &doc, NULL, NULL), 0);
    free(all);
    for (cJSON *k = cJSON_GetObjectItemCaseSensitive(doc.root, "keys")->child; k != NULL; k = k->next)
        cJSON_DeleteItemFromObjectCaseSensitive(k, "kid");
    char *text = cJSON_PrintUnformatted(doc.root);
    cJSON_Delete(doc.root);
    struct tg_jwks *anon = parse_jwks(text);
    free(text);
    static const char *const names[] = {"hs_nokid", "rs_nokid", "es_nokid"};
    for (size_t i = 0; i < 3; i++)
        check(anon, names[i], tg_slice_cstr(tok(names[i])), &default_rules, NOW, 0, "alice");
    check(anon, "rs_ok", tg_slice_cstr(tok("rs_ok")), &default_rules, NOW, TG_EINVAL, "unknown key");
    tg_jwks_free(anon);
}

/* ---- signatures ---- */

static void tampering(void **state)
{
    static const char *const names[] = {"hs_tampered_payload",
                                        "rs_tampered_payload",
                                        "es_tampered_payload",
                                        "hs_tampered_sig",
                                        "rs_tampered_sig",
                                        "es_tampered_sig",
                                        "es_der",
                                        "es_zero",
                                        "rs_short",
                                        "rs_long",
                                        "hs_truncated_mac",
                                        "empty_sig_hs"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        bad(names[i], "bad signature");
}

/* ---- header and payload ---- */

static void header_members(void **state)
{
    static const char *const names[] = {"crit",         "crit_empty",      "typ_number",     "header_dup_alg",
                                        "header_array", "header_not_json", "header_trailing"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        bad(names[i], "malformed token");
}

/* Validly signed, so only the strict payload decoder can refuse them. */
static void payload_encoding(void **state)
{
    static const char *const names[] = {"payload_dup_sub",  "payload_array", "payload_string",
                                        "payload_bad_utf8", "payload_nul",   "payload_empty"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        bad(names[i], "malformed token");
}

/* ---- structure and base64url ---- */

static void base64url_spelling(void **state)
{
    static const char *const names[] = {"padding_payload",  "padding_sig",     "padding_header", "noncanonical_payload",
                                        "noncanonical_sig", "plus_in_payload", "payload_4k1"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        bad(names[i], "malformed token");
}

static void structure(void **state)
{
    static const char *const raw[] = {"", ".", "..", "...", "a", "a.b", "a.b.c.d", "eyJ.eyJ.", ".eyJ.AA", "eyJ..AA"};
    for (size_t i = 0; i < sizeof(raw) / sizeof(raw[0]); i++)
        bad_raw(raw[i], tg_slice_cstr(raw[i]), "malformed token");
    bad_raw("NULL slice", TG_SLICE_NULL, "malformed token");

    const char *good = tok("rs_ok");
    size_t n = strlen(good);
    char *t = malloc(n + 8);
    assert_non_null(t);
    snprintf(t, n + 8, "%s.", good);
    bad_raw("trailing dot", tg_slice_cstr(t), "malformed token");
    snprintf(t, n + 8, ".%s", good);
    bad_raw("leading dot", tg_slice_cstr(t), "malformed token");
    snprintf(t, n + 8, "%s.AAAA", good);
    bad_raw("four parts", tg_slice_cstr(t), "malformed token");
    static const char inserts[] = {' ', '\n', '\t', '\0', '=', '+', '/', '\x80'};
    for (size_t i = 0; i < sizeof(inserts); i++) {
        memcpy(t, good, 10);
        t[10] = inserts[i];
        memcpy(t + 11, good + 10, n - 10);
        bad_raw("inserted character", tg_slice_of(t, n + 1), "malformed token");
    }
    free(t);
    /* The slice is the token: bytes after it are not read. */
    t = malloc(n + 1);
    memcpy(t, good, n);
    t[n] = 'A';
    check(fx.jwks, "slice of a longer buffer", tg_slice_of(t, n), &default_rules, NOW, 0, "alice");
    free(t);
}

static void size_cap(void **state)
{
    bad("over_cap", "malformed token");
    assert_in_range(strlen(tok("over_cap")), TG_JWT_MAX_TOKEN + 1, TG_JWT_MAX_TOKEN + 4);
    char *big = malloc(TG_JWT_MAX_TOKEN + 2);
    memset(big, 'A', TG_JWT_MAX_TOKEN + 1);
    big[100] = '.';
    big[200] = '.';
    bad_raw("16 KiB + 1 of base64url", tg_slice_of(big, TG_JWT_MAX_TOKEN + 1), "malformed token");
    free(big);
}

/* Every proper prefix of a valid token is refused (and read within bounds). */
static void every_prefix(void **state)
{
    static const char *const names[] = {"hs_ok", "rs_ok", "es_ok"};
    for (size_t k = 0; k < 3; k++) {
        const char *good = tok(names[k]);
        size_t n = strlen(good);
        for (size_t i = 0; i < n; i++) {
            char *p = malloc(i ? i : 1);
            memcpy(p, good, i);
            char grant[64];
            const char *why = NULL;
            int rc = tg_jwt_verify(fx.jwks, tg_slice_of(p, i), &default_rules, NOW, grant, sizeof(grant), &why);
            if (rc != TG_EINVAL)
                fail_msg("%s cut to %zu of %zu bytes: %d", names[k], i, n, rc);
            free(p);
        }
    }
}

/* Changing any one character of a valid token makes it fail: canonical
 * base64url gives every byte string exactly one spelling, and every byte is
 * signed. hs_ok gets every replacement, the slower algorithms one each. */
static void every_character_changed(void **state)
{
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=+/ ";
    static const char *const names[] = {"hs_ok", "rs_ok", "es_ok"};
    for (size_t k = 0; k < 3; k++) {
        const char *good = tok(names[k]);
        size_t n = strlen(good);
        char *t = malloc(n);
        for (size_t i = 0; i < n; i++) {
            for (size_t a = 0; a < sizeof(alphabet) - 1; a++) {
                char c = k == 0 ? alphabet[a] : alphabet[(a + i) % (sizeof(alphabet) - 1)];
                if (c == good[i])
                    continue;
                memcpy(t, good, n);
                t[i] = c;
                char grant[64];
                const char *why = NULL;
                int rc = tg_jwt_verify(fx.jwks, tg_slice_of(t, n), &default_rules, NOW, grant, sizeof(grant), &why);
                if (rc != TG_EINVAL)
                    fail_msg("%s with byte %zu changed to '%c': %d", names[k], i, c, rc);
                if (k > 0)
                    break;
            }
        }
        free(t);
    }
}

/* Each generated token, placed so that its last byte is followed by a
 * PROT_NONE page (picohttpparser's guard-page test), gives the same answer
 * as from an ordinary buffer, and that answer is one of the documented
 * reasons. */
static void guard_page(void **state)
{
    static const char *const reasons[] = {"malformed token", "unsupported alg", "unknown key",
                                          "bad signature",   "expired",         "not yet valid",
                                          "wrong issuer",    "wrong audience",  "missing grant claim",
                                          "algorithm HS256 is not allowed for this issuer"};
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t span = (TG_JWT_MAX_TOKEN + 8 + pg - 1) / pg * pg;
    char *m = mmap(NULL, span + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    assert_int_equal(mprotect(m + span, pg, PROT_NONE), 0);
    int count = 0;
    for (const cJSON *t = fx.tokens->child; t != NULL; t = t->next, count++) {
        size_t n = strlen(t->valuestring);
        assert_true(n <= span);
        char *p = m + span - n;
        memcpy(p, t->valuestring, n);
        char g1[64], g2[64];
        const char *w1 = NULL, *w2 = NULL;
        int r1 = tg_jwt_verify(fx.jwks, tg_slice_of(p, n), &default_rules, NOW, g1, sizeof(g1), &w1);
        int r2 = tg_jwt_verify(fx.jwks, tg_slice_cstr(t->valuestring), &default_rules, NOW, g2, sizeof(g2), &w2);
        if (r1 != r2 || (w1 == NULL) != (w2 == NULL) || (w1 && strcmp(w1, w2) != 0))
            fail_msg("%s: %d \"%s\" against the guard page, %d \"%s\" otherwise", t->string, r1, w1 ? w1 : "", r2,
                     w2 ? w2 : "");
        if (r1 == 0)
            continue;
        size_t i = 0;
        while (i < sizeof(reasons) / sizeof(reasons[0]) && strcmp(w1, reasons[i]) != 0)
            i++;
        if (i == sizeof(reasons) / sizeof(reasons[0]))
            fail_msg("%s: undocumented reason \"%s\"", t->string, w1);
    }
    assert_true(count > 80);
    munmap(m, span + pg);
}

/* ---- JWKS ---- */

static void jwks_generated_set_loads(void **state)
{
    char path[512];
    fixture_path(path, sizeof(path), "jwks.json");
    struct tg_jwks *k = NULL;
    struct tg_buf err;
    tg_buf_init(&err);
    assert_int_equal(tg_jwks_load(path, &k, &err), 0);
    assert_non_null(k);
    assert_int_equal(err.len, 0);
    tg_buf_dispose(&err);
    check(k, "es_ok", tg_slice_cstr(tok("es_ok")), &default_rules, NOW, 0, "alice");
    tg_jwks_free(k);
    tg_jwks_free(NULL);
}

/* 32 bytes of 0x00..0x1f, base64url. */
#define K32 "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"

static void jwks_accepts(void **state)
{
    /* Unknown members are ignored; kid, alg and use are optional. */
    struct tg_jwks *k =
        parse_jwks("{\"keys\":[{\"kty\":\"oct\",\"k\":\"" K32 "\",\"key_ops\":[\"verify\"],\"x5t\":\"x\"},"
                   "{\"kty\":\"oct\",\"k\":\"" K32 "\"}],\"extra\":1}");
    tg_jwks_free(k);
}

static void jwks_errors(void **state)
{
    jwks_error("{\"keys\":[{\"kty\":\"RSA\",\"e\":\"AQAB\",\"kid\":\"a\"}]}", "mem.json: keys[0].n: missing\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAEC+wQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8\"}]}",
               "mem.json: keys[0].k: not base64url (URL-safe alphabet, no padding)\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"" K32 "=\"}]}",
               "mem.json: keys[0].k: not base64url (URL-safe alphabet, no padding)\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9\"}]}",
               "mem.json: keys[0].k: not base64url (URL-safe alphabet, no padding)\n"); /* spare bits set */
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"\"}]}", "mem.json: keys[0].k: empty\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":7}]}", "mem.json: keys[0].k: must be a string\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"AAECAwQFBgcICQoLDA0ODw\"}]}",
               "mem.json: keys[0].k: HS256 secret has 16 bytes; at least 32 needed\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"" K32 "\",\"kid\":\"a\"},{\"kty\":\"oct\",\"k\":\"" K32
               "\"},{\"kty\":\"oct\",\"k\":\"" K32 "\",\"kid\":\"a\"}]}",
               "mem.json: keys[2].kid: duplicate of keys[0].kid\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"" K32 "\",\"kid\":5}]}",
               "mem.json: keys[0].kid: must be a non-empty string\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"" K32 "\",\"alg\":\"RS256\"}]}",
               "mem.json: keys[0].alg: must be \"HS256\" for kty \"oct\"\n");
    jwks_error("{\"keys\":[{\"kty\":\"RSA\",\"alg\":\"ES256\"}]}",
               "mem.json: keys[0].alg: must be \"RS256\" or \"PS256\" for kty \"RSA\"\nmem.json: keys[0].n: missing\n");
    jwks_error("{\"keys\":[{\"kty\":\"EC\",\"alg\":\"PS256\"}]}",
               "mem.json: keys[0].alg: must be \"ES256\" for kty \"EC\"\nmem.json: keys[0].crv: missing\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"" K32 "\",\"use\":\"enc\"}]}",
               "mem.json: keys[0].use: must be \"sig\"\n");
    jwks_error("{\"keys\":[{\"kty\":\"OKP\",\"crv\":\"Ed25519\",\"x\":\"" K32 "\"}]}",
               "mem.json: keys[0].kty: unsupported key type (\"oct\", \"RSA\" or \"EC\")\n");
    jwks_error("{\"keys\":[{\"k\":\"" K32 "\"}]}", "mem.json: keys[0].kty: missing\n");
    jwks_error("{\"keys\":[\"" K32 "\"]}", "mem.json: keys[0]: must be an object\n");
    jwks_error("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-384\",\"x\":\"" K32 "\",\"y\":\"" K32 "\"}]}",
               "mem.json: keys[0].crv: unsupported curve (only \"P-256\", for ES256)\n");
    jwks_error("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"" K32 "AAAA\",\"y\":\"" K32 "\"}]}",
               "mem.json: keys[0].x: must decode to 32 bytes\n");
    /* (0x00..0x1f, 0x00..0x1f) is not on the curve. */
    jwks_error("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"" K32 "\",\"y\":\"" K32 "\"}]}",
               "mem.json: keys[0].x: (x, y) is not a point on P-256\n");
    jwks_error("{\"keys\":[{\"kty\":\"EC\",\"crv\":\"P-256\",\"x\":\"" K32 "\",\"y\":\"" K32 "\",\"d\":\"" K32 "\"}]}",
               "mem.json: keys[0].d: private key material does not belong in a verification key set\n"
               "mem.json: keys[0].x: (x, y) is not a point on P-256\n");
    /* Every bad key is reported, not just the first. */
    jwks_error("{\"keys\":[{\"kty\":\"RSA\"},{\"kty\":\"oct\",\"k\":\"" K32 "\"},{\"kty\":\"EC\"}]}",
               "mem.json: keys[0].n: missing\nmem.json: keys[2].crv: missing\n");

    /* The set as a whole. */
    jwks_error("{}", "mem.json: keys: missing\n");
    jwks_error("{\"keys\":{}}", "mem.json: keys: must be an array\n");
    jwks_error("{\"keys\":[]}", "mem.json: keys: empty\n");
    jwks_error("[]", "mem.json: must be a JSON object with \"keys\"\n");
    jwks_error("{\"keys\":[{\"kty\":\"oct\",\"k\":\"" K32 "\"}],\"keys\":[]}",
               "mem.json: invalid JSON at byte 84: duplicate object key\n");
    jwks_error("{\"keys\":[", "mem.json: invalid JSON at byte 9: unexpected end of input\n");
}

static void jwks_rsa_errors(void **state)
{
    /* An even modulus of 2048 bits, and an exponent of 2. */
    char n[400], json[800];
    uint8_t raw[256];
    memset(raw, 0xff, sizeof(raw));
    raw[255] = 0xfe;
    tg_b64url_encode(raw, sizeof(raw), n);
    snprintf(json, sizeof(json), "{\"keys\":[{\"kty\":\"RSA\",\"n\":\"%s\",\"e\":\"AQAB\"}]}", n);
    jwks_error(json, "mem.json: keys[0].e: not a valid RSA public key (n, e)\n");
    raw[255] = 0xff;
    tg_b64url_encode(raw, sizeof(raw), n);
    snprintf(json, sizeof(json), "{\"keys\":[{\"kty\":\"RSA\",\"n\":\"%s\",\"e\":\"Ag\"}]}", n);
    jwks_error(json, "mem.json: keys[0].e: not a valid RSA public key (n, e)\n");
    /* 2047 bits, even with a leading zero octet. */
    uint8_t raw2[257] = {0};
    memset(raw2 + 1, 0xff, 256);
    raw2[1] = 0x7f;
    tg_b64url_encode(raw2, sizeof(raw2), n);
    snprintf(json, sizeof(json), "{\"keys\":[{\"kty\":\"RSA\",\"n\":\"%s\",\"e\":\"AQAB\"}]}", n);
    jwks_error(json, "mem.json: keys[0].n: modulus has 2047 bits; 2048 to 8192 needed\n");

    jwks_file_error("jwks_rsa1024.json", "keys[0].n: modulus has 1024 bits; 2048 to 8192 needed\n");
    jwks_file_error("jwks_p384.json", "keys[0].crv: unsupported curve (only \"P-256\", for ES256)\n");
    jwks_file_error("jwks_private.json", "keys[0].d: private key material does not belong in a verification key set\n");
}

static void jwks_file_problems(void **state)
{
    jwks_file_error("missing.json", "cannot open: No such file or directory\n");
    /* One byte over the cap. */
    char path[512];
    fixture_path(path, sizeof(path), "big.json");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < TG_JWKS_MAX_FILE + 1; i++)
        fputc(' ', f);
    fclose(f);
    char want[64];
    snprintf(want, sizeof(want), "larger than %d bytes\n", TG_JWKS_MAX_FILE);
    jwks_file_error("big.json", want);
    unlink(path);
}

int main(int argc, char **argv)
{
    if (generate_fixtures() != 0)
        return 1;
    char path[512];
    struct tg_buf err;
    tg_buf_init(&err);
    fixture_path(path, sizeof(path), "jwks.json");
    if (tg_jwks_load(path, &fx.jwks, &err) != 0) {
        fprintf(stderr, "generated JWKS refused: %.*s", (int)err.len, err.base);
        tg_buf_dispose(&err);
        remove_fixtures();
        return 1;
    }
    tg_buf_dispose(&err);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(valid_tokens),        cmocka_unit_test(grant_claim_is_configurable),
        cmocka_unit_test(grant_buffer_size),   cmocka_unit_test(time_claims),
        cmocka_unit_test(skew_boundaries),     cmocka_unit_test(time_claim_types),
        cmocka_unit_test(issuer_and_audience), cmocka_unit_test(grant_claim_missing),
        cmocka_unit_test(unsupported_algs),    cmocka_unit_test(algorithm_allow_list),
        cmocka_unit_test(alg_confusion),
        cmocka_unit_test(key_selection),       cmocka_unit_test(keys_without_kid),
        cmocka_unit_test(tampering),           cmocka_unit_test(header_members),
        cmocka_unit_test(payload_encoding),    cmocka_unit_test(base64url_spelling),
        cmocka_unit_test(structure),           cmocka_unit_test(size_cap),
        cmocka_unit_test(every_prefix),        cmocka_unit_test(every_character_changed),
        cmocka_unit_test(guard_page),          cmocka_unit_test(jwks_generated_set_loads),
        cmocka_unit_test(jwks_accepts),        cmocka_unit_test(jwks_errors),
        cmocka_unit_test(jwks_rsa_errors),     cmocka_unit_test(jwks_file_problems),
    };
    int r = TG_UNIT_RUN(tests, argc, argv);
    tg_jwks_free(fx.jwks);
    remove_fixtures();
    return r;
}
