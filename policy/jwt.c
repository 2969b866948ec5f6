#include "policy/jwt.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/bignum.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/ecp.h>
#include <mbedtls/md.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/rsa.h>
#include <mbedtls/sha256.h>

#include "core/base/json.h"

/* A JOSE header or a claim set is a flat object in practice; nested claims
 * get a little room, deeply nested ones are not worth parsing. */
#define JWT_JSON_DEPTH 16
#define JWKS_JSON_DEPTH 8

enum jwk_kty { KTY_OCT, KTY_RSA, KTY_EC };

/* Each algorithm has exactly one key type. Keeping the pairing in one table
 * is what stops alg confusion: an HS256 token is only ever checked against
 * "oct" keys, so the bytes of an RSA or EC public key can never become an
 * HMAC secret. */
static const struct {
    const char *alg;
    enum jwk_kty kty;
    const char *kty_name;
    unsigned bit;
    const char *not_allowed; /* the reason when the issuer does not list it */
} algs[] = {
    {"HS256", KTY_OCT, "oct", TG_JWT_ALG_HS256, "algorithm HS256 is not allowed for this issuer"},
    {"RS256", KTY_RSA, "RSA", TG_JWT_ALG_RS256, "algorithm RS256 is not allowed for this issuer"},
    {"ES256", KTY_EC, "EC", TG_JWT_ALG_ES256, "algorithm ES256 is not allowed for this issuer"},
    {"PS256", KTY_RSA, "RSA", TG_JWT_ALG_PS256, "algorithm PS256 is not allowed for this issuer"},
};
#define NALGS (sizeof(algs) / sizeof(algs[0]))

unsigned tg_jwt_alg_bit(const char *name)
{
    for (size_t a = 0; a < NALGS; a++)
        if (strcmp(name, algs[a].alg) == 0)
            return algs[a].bit;
    return 0;
}

/* One verification key. Value type: an element of tg_jwks.keys; jwk_dispose() frees its kid and
 * (when ready) its key material, from tg_jwks_free(). */
struct jwk {
    enum jwk_kty kty;
    int ready;         /* the mbedtls context below is initialised and must be freed */
    char *kid;         /* NULL when the key has none */
    unsigned only_alg; /* the TG_JWT_ALG_ bit of the key's own "alg", 0 when it has none */
    union {
        struct {
            uint8_t *k; /* the HMAC secret, wiped before it is freed */
            size_t len;
        } oct;
        mbedtls_rsa_context rsa;
        struct {
            mbedtls_ecp_group grp;
            mbedtls_ecp_point q;
        } ec;
    } u;
};

/* Owner: the conf that loaded it (tg_jwt_conf.jwks); freed by tg_jwks_free() from tg_conf_unref. */
struct tg_jwks {
    size_t n;
    struct jwk *keys;
};

/* ---- keys ---- */

static void jwk_dispose(struct jwk *k)
{
    free(k->kid);
    k->kid = NULL;
    if (!k->ready)
        return;
    switch (k->kty) {
    case KTY_OCT:
        mbedtls_platform_zeroize(k->u.oct.k, k->u.oct.len);
        free(k->u.oct.k);
        k->u.oct.k = NULL;
        break;
    case KTY_RSA:
        mbedtls_rsa_free(&k->u.rsa);
        break;
    case KTY_EC:
        mbedtls_ecp_point_free(&k->u.ec.q);
        mbedtls_ecp_group_free(&k->u.ec.grp);
        break;
    }
    k->ready = 0;
}

void tg_jwks_free(struct tg_jwks *k)
{
    if (k == NULL)
        return;
    for (size_t i = 0; i < k->n; i++)
        jwk_dispose(&k->keys[i]);
    free(k->keys);
    k->keys = NULL;
    free(k);
}

size_t tg_jwks_count(const struct tg_jwks *k) { return k != NULL ? k->n : 0; }

int tg_jwt_peek_issuer(struct tg_slice token, char *out, size_t out_sz)
{
    const char *d1 = memchr(token.ptr, '.', token.len);
    if (d1 == NULL || token.len > TG_JWT_MAX_TOKEN || out_sz == 0)
        return -1;
    const char *p = d1 + 1, *end = token.ptr + token.len;
    const char *d2 = memchr(p, '.', (size_t)(end - p));
    if (d2 == NULL)
        return -1;
    size_t n = (size_t)(d2 - p), len = 0;
    uint8_t *buf = tg_xmalloc(n + 1);
    int rc = -1;
    struct tg_json_doc doc = {0};
    const char *jerr;
    size_t joff;
    if (tg_b64url_decode(p, n, buf, &len) == 0 && tg_json_parse((const char *)buf, len, 8, 1, &doc, &jerr, &joff) == 0) {
        const cJSON *iss = cJSON_IsObject(doc.root) ? tg_json_get(doc.root, "iss") : NULL;
        if (cJSON_IsString(iss) && strlen(iss->valuestring) < out_sz) {
            memcpy(out, iss->valuestring, strlen(iss->valuestring) + 1);
            rc = 0;
        }
    }
    cJSON_Delete(doc.root);
    free(buf);
    return rc;
}

/* The state of one tg_jwks_parse() call, on the stack of tg_jwks_parse(); err is the caller's. */
struct loader {
    const char *name;
    struct tg_buf *err;
    int nerr;
};

static void key_error(struct loader *L, size_t i, const char *field, const char *reason)
{
    tg_buf_appendf(L->err, "%s: keys[%zu]%s%s: %s\n", L->name, i, field[0] ? "." : "", field, reason);
    L->nerr++;
}

/* Decode the base64url string member `field` of key i into a malloc'd buffer.
 * Returns 1 when the member is absent (and not required), 0 on success,
 * TG_EINVAL after reporting a problem. */
static int b64_member(struct loader *L, size_t i, const cJSON *key, const char *field, int required, uint8_t **out,
                      size_t *outlen)
{
    const cJSON *m = tg_json_get(key, field);
    *out = NULL;
    *outlen = 0;
    if (m == NULL) {
        if (!required)
            return 1;
        key_error(L, i, field, "missing");
        return TG_EINVAL;
    }
    if (!cJSON_IsString(m)) {
        key_error(L, i, field, "must be a string");
        return TG_EINVAL;
    }
    size_t n = strlen(m->valuestring); /* the strict parser refuses U+0000 */
    uint8_t *b = tg_xmalloc(n / 4 * 3 + 3);
    if (n == 0 || tg_b64url_decode(m->valuestring, n, b, outlen) != 0) {
        free(b);
        key_error(L, i, field, n == 0 ? "empty" : "not base64url (URL-safe alphabet, no padding)");
        return TG_EINVAL;
    }
    *out = b;
    return 0;
}

static int load_oct(struct loader *L, size_t i, const cJSON *obj, struct jwk *k)
{
    uint8_t *b;
    size_t n;
    if (b64_member(L, i, obj, "k", 1, &b, &n) != 0)
        return TG_EINVAL;
    if (n < TG_JWT_MIN_HMAC_BYTES) {
        mbedtls_platform_zeroize(b, n);
        free(b);
        char why[96];
        snprintf(why, sizeof(why), "HS256 secret has %zu bytes; at least %d needed", n, TG_JWT_MIN_HMAC_BYTES);
        key_error(L, i, "k", why);
        return TG_EINVAL;
    }
    k->u.oct.k = b;
    k->u.oct.len = n;
    k->ready = 1;
    return 0;
}

static size_t bit_length(const uint8_t *p, size_t n)
{
    if (n == 0)
        return 0;
    size_t bits = (n - 1) * 8;
    for (uint8_t c = p[0]; c != 0; c >>= 1)
        bits++;
    return bits;
}

static int load_rsa(struct loader *L, size_t i, const cJSON *obj, struct jwk *k)
{
    uint8_t *n = NULL, *e = NULL;
    size_t nlen = 0, elen = 0;
    int r = TG_EINVAL;
    if (b64_member(L, i, obj, "n", 1, &n, &nlen) != 0)
        goto out;
    if (b64_member(L, i, obj, "e", 1, &e, &elen) != 0)
        goto out;
    /* RFC 7518 §6.3.1.1 wants the shortest encoding, but leading zero octets
     * are common enough in published sets and harmless: skip them. */
    const uint8_t *np = n, *ep = e;
    while (nlen > 0 && *np == 0)
        np++, nlen--;
    while (elen > 0 && *ep == 0)
        ep++, elen--;
    size_t bits = bit_length(np, nlen);
    if (bits < TG_JWT_MIN_RSA_BITS || bits > TG_JWT_MAX_RSA_BITS) {
        char why[96];
        snprintf(why, sizeof(why), "modulus has %zu bits; %d to %d needed", bits, TG_JWT_MIN_RSA_BITS,
                 TG_JWT_MAX_RSA_BITS);
        key_error(L, i, "n", why);
        goto out;
    }
    if (elen == 0 || elen > 8) {
        key_error(L, i, "e", "not a usable public exponent");
        goto out;
    }
    mbedtls_rsa_init(&k->u.rsa, MBEDTLS_RSA_PKCS_V15, 0);
    k->ready = 1;
    /* With only N and E imported, mbedtls_rsa_complete() just sets the
     * modulus length; mbedtls_rsa_check_pubkey() then refuses an even
     * modulus, E < 3, an even E and E >= N. */
    if (mbedtls_rsa_import_raw(&k->u.rsa, np, nlen, NULL, 0, NULL, 0, NULL, 0, ep, elen) != 0 ||
        mbedtls_rsa_complete(&k->u.rsa) != 0 || mbedtls_rsa_check_pubkey(&k->u.rsa) != 0) {
        key_error(L, i, "e", "not a valid RSA public key (n, e)");
        goto out;
    }
    r = 0;
out:
    free(n);
    free(e);
    return r;
}

static int load_ec(struct loader *L, size_t i, const cJSON *obj, struct jwk *k)
{
    uint8_t *x = NULL, *y = NULL;
    size_t xlen = 0, ylen = 0;
    int r = TG_EINVAL;
    const cJSON *crv = tg_json_get(obj, "crv");
    if (crv == NULL) {
        key_error(L, i, "crv", "missing");
        goto out;
    }
    if (!cJSON_IsString(crv) || strcmp(crv->valuestring, "P-256") != 0) {
        key_error(L, i, "crv", "unsupported curve (only \"P-256\", for ES256)");
        goto out;
    }
    if (b64_member(L, i, obj, "x", 1, &x, &xlen) != 0)
        goto out;
    if (b64_member(L, i, obj, "y", 1, &y, &ylen) != 0)
        goto out;
    /* RFC 7518 §6.2.1.2: full-length coordinates, 32 bytes for P-256. */
    if (xlen != 32) {
        key_error(L, i, "x", "must decode to 32 bytes");
        goto out;
    }
    if (ylen != 32) {
        key_error(L, i, "y", "must decode to 32 bytes");
        goto out;
    }
    mbedtls_ecp_group_init(&k->u.ec.grp);
    mbedtls_ecp_point_init(&k->u.ec.q);
    k->ready = 1;
    if (mbedtls_ecp_group_load(&k->u.ec.grp, MBEDTLS_ECP_DP_SECP256R1) != 0 ||
        mbedtls_mpi_read_binary(&k->u.ec.q.X, x, xlen) != 0 || mbedtls_mpi_read_binary(&k->u.ec.q.Y, y, ylen) != 0 ||
        mbedtls_mpi_lset(&k->u.ec.q.Z, 1) != 0) {
        key_error(L, i, "x", "out of memory");
        goto out;
    }
    /* Coordinates below p and on the curve: an invalid point would make the
     * verification equation meaningless (invalid-curve attacks). */
    if (mbedtls_ecp_check_pubkey(&k->u.ec.grp, &k->u.ec.q) != 0) {
        key_error(L, i, "x", "(x, y) is not a point on P-256");
        goto out;
    }
    r = 0;
out:
    free(x);
    free(y);
    return r;
}

static int load_key(struct loader *L, size_t i, const cJSON *obj, struct jwk *k)
{
    if (!cJSON_IsObject(obj)) {
        key_error(L, i, "", "must be an object");
        return TG_EINVAL;
    }
    int bad = 0;
    const cJSON *kty = tg_json_get(obj, "kty");
    size_t a = NALGS;
    if (kty == NULL) {
        key_error(L, i, "kty", "missing");
        return TG_EINVAL;
    }
    if (cJSON_IsString(kty))
        for (a = 0; a < NALGS; a++)
            if (strcmp(kty->valuestring, algs[a].kty_name) == 0)
                break;
    if (a == NALGS) {
        key_error(L, i, "kty", "unsupported key type (\"oct\", \"RSA\" or \"EC\")");
        return TG_EINVAL;
    }
    k->kty = algs[a].kty;

    const cJSON *kid = tg_json_get(obj, "kid");
    if (kid != NULL) {
        if (!cJSON_IsString(kid) || kid->valuestring[0] == '\0') {
            key_error(L, i, "kid", "must be a non-empty string");
            bad = 1;
        } else {
            k->kid = tg_xstrdup(kid->valuestring);
        }
    }
    /* A key's own "alg" must suit its kty, and then binds the key to that one algorithm: an RSA key
     * published for PS256 never verifies an RS256 token, nor the other way round. */
    const cJSON *alg = tg_json_get(obj, "alg");
    if (alg != NULL) {
        size_t b = NALGS;
        if (cJSON_IsString(alg))
            for (b = 0; b < NALGS; b++)
                if (algs[b].kty == k->kty && strcmp(alg->valuestring, algs[b].alg) == 0)
                    break;
        if (b == NALGS) {
            char why[80];
            snprintf(why, sizeof(why), "must be \"%s\" for kty \"%s\"",
                     k->kty == KTY_RSA ? "RS256\" or \"PS256" : algs[a].alg, algs[a].kty_name);
            key_error(L, i, "alg", why);
            bad = 1;
        } else {
            k->only_alg = algs[b].bit;
        }
    }
    const cJSON *use = tg_json_get(obj, "use");
    if (use != NULL && (!cJSON_IsString(use) || strcmp(use->valuestring, "sig") != 0)) {
        key_error(L, i, "use", "must be \"sig\"");
        bad = 1;
    }
    if (k->kty != KTY_OCT && tg_json_get(obj, "d") != NULL) {
        key_error(L, i, "d", "private key material does not belong in a verification key set");
        bad = 1;
    }
    int r;
    switch (k->kty) {
    case KTY_OCT:
        r = load_oct(L, i, obj, k);
        break;
    case KTY_RSA:
        r = load_rsa(L, i, obj, k);
        break;
    default:
        r = load_ec(L, i, obj, k);
        break;
    }
    return bad || r != 0 ? TG_EINVAL : 0;
}

int tg_jwks_parse(const char *json, size_t len, const char *name, struct tg_jwks **out, struct tg_buf *err)
{
    struct loader L = {name, err, 0};
    struct tg_json_doc doc = {0};
    struct tg_jwks *set = NULL;
    const char *jerr = NULL;
    size_t joff = 0;
    *out = NULL;
    if (tg_json_parse(json, len, JWKS_JSON_DEPTH, 1, &doc, &jerr, &joff) != 0) {
        tg_buf_appendf(err, "%s: invalid JSON at byte %zu: %s\n", name, joff, jerr ? jerr : "?");
        return TG_EINVAL;
    }
    const cJSON *keys = cJSON_IsObject(doc.root) ? tg_json_get(doc.root, "keys") : NULL;
    if (!cJSON_IsObject(doc.root)) {
        tg_buf_appendf(err, "%s: must be a JSON object with \"keys\"\n", name);
        L.nerr++;
        goto done;
    }
    if (keys == NULL || !cJSON_IsArray(keys)) {
        tg_buf_appendf(err, "%s: keys: %s\n", name, keys == NULL ? "missing" : "must be an array");
        L.nerr++;
        goto done;
    }
    size_t n = (size_t)cJSON_GetArraySize(keys);
    if (n == 0 || n > TG_JWKS_MAX_KEYS) {
        tg_buf_appendf(err, "%s: keys: %s\n", name, n == 0 ? "empty" : "too many keys (at most 256)");
        L.nerr++;
        goto done;
    }
    set = tg_xcalloc(1, sizeof(*set));
    set->keys = tg_xcalloc(n, sizeof(*set->keys));
    set->n = n;
    size_t i = 0;
    for (const cJSON *k = keys->child; k != NULL; k = k->next, i++)
        load_key(&L, i, k, &set->keys[i]);
    for (i = 1; i < n; i++) {
        if (set->keys[i].kid == NULL)
            continue;
        for (size_t j = 0; j < i; j++)
            if (set->keys[j].kid != NULL && strcmp(set->keys[i].kid, set->keys[j].kid) == 0) {
                char why[64];
                snprintf(why, sizeof(why), "duplicate of keys[%zu].kid", j);
                key_error(&L, i, "kid", why);
                break;
            }
    }
done:
    cJSON_Delete(doc.root);
    if (L.nerr > 0) {
        tg_jwks_free(set);
        return TG_EINVAL;
    }
    *out = set;
    return 0;
}

int tg_jwks_load(const char *path, struct tg_jwks **out, struct tg_buf *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        tg_buf_appendf(err, "%s: cannot open: %s\n", path, strerror(errno));
        return TG_EINVAL;
    }
    char *data = tg_xmalloc(TG_JWKS_MAX_FILE + 1);
    size_t n = fread(data, 1, TG_JWKS_MAX_FILE + 1, f);
    int rerr = ferror(f) ? errno : 0;
    fclose(f);
    int r;
    if (rerr != 0) {
        tg_buf_appendf(err, "%s: cannot read: %s\n", path, strerror(rerr));
        r = TG_EINVAL;
    } else if (n > TG_JWKS_MAX_FILE) {
        tg_buf_appendf(err, "%s: larger than %d bytes\n", path, TG_JWKS_MAX_FILE);
        r = TG_EINVAL;
    } else {
        r = tg_jwks_parse(data, n, path, out, err);
    }
    free(data);
    data = NULL;
    return r;
}

/* ---- verification ---- */

static int ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

/* Returns 0 when sig is a valid signature of `in` (whose SHA-256 is hash)
 * under k. Every length is checked before mbedtls sees the buffer: the RSA
 * verify reads exactly modulus-length bytes from sig whatever its size. */
static int verify_with(struct jwk *k, unsigned alg, const uint8_t *in, size_t inlen, const uint8_t hash[32],
                       const uint8_t *sig, size_t siglen)
{
    switch (k->kty) {
    case KTY_OCT: {
        uint8_t mac[32];
        if (siglen != sizeof(mac))
            return TG_EINVAL;
        const mbedtls_md_info_t *sha256 = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
        if (mbedtls_md_hmac(sha256, k->u.oct.k, k->u.oct.len, in, inlen, mac) != 0)
            return TG_EINVAL;
        int eq = ct_equal(mac, sig, sizeof(mac));
        mbedtls_platform_zeroize(mac, sizeof(mac)); /* a valid MAC for attacker-chosen input */
        return eq ? 0 : TG_EINVAL;
    }
    case KTY_RSA:
        if (siglen != mbedtls_rsa_get_len(&k->u.rsa))
            return TG_EINVAL;
        /* RFC 7518 §3.5: PSS with SHA-256, MGF1 with SHA-256 and a salt as
         * long as the hash, exactly (any other salt length is refused). */
        if (alg == TG_JWT_ALG_PS256)
            return mbedtls_rsa_rsassa_pss_verify_ext(&k->u.rsa, NULL, NULL, MBEDTLS_RSA_PUBLIC, MBEDTLS_MD_SHA256, 32,
                                                     hash, MBEDTLS_MD_SHA256, 32, sig) == 0
                       ? 0
                       : TG_EINVAL;
        /* Called directly rather than through mbedtls_rsa_pkcs1_verify() so
         * that the padding mode stored in the context cannot matter. */
        return mbedtls_rsa_rsassa_pkcs1_v15_verify(&k->u.rsa, NULL, NULL, MBEDTLS_RSA_PUBLIC, MBEDTLS_MD_SHA256, 32,
                                                   hash, sig) == 0
                   ? 0
                   : TG_EINVAL;
    case KTY_EC: {
        /* JWS carries r||s (RFC 7518 §3.4), not the ASN.1 DER that
         * mbedtls_pk_verify() expects; hand r and s to ECDSA directly.
         * mbedtls_ecdsa_verify() refuses r or s outside [1, n-1]. */
        if (siglen != 64)
            return TG_EINVAL;
        mbedtls_mpi r, s;
        mbedtls_mpi_init(&r);
        mbedtls_mpi_init(&s);
        int rc = TG_EINVAL;
        if (mbedtls_mpi_read_binary(&r, sig, 32) == 0 && mbedtls_mpi_read_binary(&s, sig + 32, 32) == 0 &&
            mbedtls_ecdsa_verify(&k->u.ec.grp, hash, 32, &k->u.ec.q, &r, &s) == 0)
            rc = 0;
        mbedtls_mpi_free(&r);
        mbedtls_mpi_free(&s);
        return rc;
    }
    }
    return TG_EINVAL;
}

/* A NumericDate (RFC 7519 §2): any finite JSON number. Returns 1 when
 * absent, 0 with *v set, TG_EINVAL when present but not a number. */
static int numeric_claim(const cJSON *claims, const char *name, double *v)
{
    const cJSON *m = tg_json_get(claims, name);
    if (m == NULL)
        return 1;
    if (!cJSON_IsNumber(m) || !isfinite(m->valuedouble))
        return TG_EINVAL;
    *v = m->valuedouble;
    return 0;
}

/* Claim strings come from the strict parser, which refuses U+0000, so
 * strcmp() compares them whole. */
static int string_claim_is(const cJSON *m, const char *want)
{
    return cJSON_IsString(m) && strcmp(m->valuestring, want) == 0;
}

static int audience_ok(const cJSON *aud, const char *want)
{
    if (cJSON_IsString(aud))
        return strcmp(aud->valuestring, want) == 0;
    if (!cJSON_IsArray(aud))
        return 0;
    for (const cJSON *e = aud->child; e != NULL; e = e->next)
        if (string_claim_is(e, want))
            return 1;
    return 0;
}

static int parse_object(const uint8_t *p, size_t n, cJSON **out)
{
    struct tg_json_doc doc = {0};
    *out = NULL;
    if (tg_json_parse((const char *)p, n, JWT_JSON_DEPTH, 1, &doc, NULL, NULL) != 0)
        return TG_EINVAL;
    if (!cJSON_IsObject(doc.root)) {
        cJSON_Delete(doc.root);
        return TG_EINVAL;
    }
    *out = doc.root;
    return 0;
}

int tg_jwt_verify(const struct tg_jwks *keys, struct tg_slice token, const struct tg_jwt_rules *rules, int64_t now_s,
                  char *grant, size_t grant_sz, const char **why)
{
    assert(keys != NULL && rules != NULL && grant != NULL && why != NULL);
    cJSON *header = NULL, *claims = NULL;
    uint8_t *scratch = NULL;
    int r = TG_EINVAL;
    *why = "malformed token";
    if (grant_sz > 0)
        grant[0] = '\0';
    if (token.ptr == NULL || token.len == 0 || token.len > TG_JWT_MAX_TOKEN)
        return TG_EINVAL;

    /* Exactly three parts: header.payload.signature. */
    const char *p = token.ptr, *end = token.ptr + token.len;
    const char *d1 = memchr(p, '.', token.len);
    const char *d2 = d1 ? memchr(d1 + 1, '.', (size_t)(end - d1 - 1)) : NULL;
    if (d2 == NULL || memchr(d2 + 1, '.', (size_t)(end - d2 - 1)) != NULL)
        return TG_EINVAL;
    struct tg_slice hpart = tg_slice_of(p, (size_t)(d1 - p));
    struct tg_slice ppart = tg_slice_of(d1 + 1, (size_t)(d2 - d1 - 1));
    struct tg_slice spart = tg_slice_of(d2 + 1, (size_t)(end - d2 - 1));
    struct tg_slice signing_input = tg_slice_of(p, (size_t)(d2 - p));
    /* An empty signature is allowed through here only so that an
     * unsecured token ("alg":"none") is refused as such, by its alg. */
    if (hpart.len == 0 || ppart.len == 0)
        return TG_EINVAL;

    /* Decode all three parts first, so that a token that is not a
     * well-formed compact JWS is "malformed" whatever else is wrong with it.
     * The decoded parts together are shorter than the token. The payload is
     * only decoded here; it is parsed after the signature has been checked,
     * so no unauthenticated claim is ever looked at. */
    scratch = tg_xmalloc(token.len);
    uint8_t *hdec = scratch, *pdec, *sig;
    size_t hlen = 0, plen = 0, siglen = 0;
    if (tg_b64url_decode(hpart.ptr, hpart.len, hdec, &hlen) != 0)
        goto out;
    pdec = hdec + hlen;
    if (tg_b64url_decode(ppart.ptr, ppart.len, pdec, &plen) != 0)
        goto out;
    sig = pdec + plen;
    if (tg_b64url_decode(spart.ptr, spart.len, sig, &siglen) != 0)
        goto out;
    if (parse_object(hdec, hlen, &header) != 0)
        goto out;

    const cJSON *alg = tg_json_get(header, "alg");
    if (!cJSON_IsString(alg))
        goto out;
    size_t a;
    for (a = 0; a < NALGS; a++)
        if (strcmp(alg->valuestring, algs[a].alg) == 0)
            break;
    if (a == NALGS) {
        *why = "unsupported alg";
        goto out;
    }
    unsigned allowed = rules->algs != 0 ? rules->algs : TG_JWT_ALGS_DEFAULT;
    if (!(allowed & algs[a].bit)) {
        *why = algs[a].not_allowed;
        goto out;
    }
    /* RFC 7515 §4.1.11: extensions we would have to understand; we
     * understand none. */
    if (tg_json_get(header, "crit") != NULL)
        goto out;
    const cJSON *typ = tg_json_get(header, "typ");
    if (typ != NULL && !cJSON_IsString(typ))
        goto out;
    const cJSON *kidm = tg_json_get(header, "kid");
    if (kidm != NULL && !cJSON_IsString(kidm))
        goto out;
    const char *kid = kidm ? kidm->valuestring : NULL;

    uint8_t hash[32];
    if (algs[a].kty != KTY_OCT &&
        mbedtls_sha256_ret((const unsigned char *)signing_input.ptr, signing_input.len, hash, 0) != 0)
        goto out;
    int tried = 0, verified = 0;
    for (size_t i = 0; i < keys->n && !verified; i++) {
        struct jwk *k = &keys->keys[i];
        if (k->kty != algs[a].kty || (k->only_alg != 0 && k->only_alg != algs[a].bit))
            continue;
        if (kid != NULL && (k->kid == NULL || strcmp(k->kid, kid) != 0))
            continue;
        tried = 1;
        verified =
            verify_with(k, algs[a].bit, (const uint8_t *)signing_input.ptr, signing_input.len, hash, sig, siglen) == 0;
    }
    if (!tried) {
        *why = "unknown key";
        goto out;
    }
    if (!verified) {
        *why = "bad signature";
        goto out;
    }

    /* From here on the payload is the issuer's. */
    *why = "malformed token";
    if (parse_object(pdec, plen, &claims) != 0)
        goto out;
    double exp = 0, nbf = 0, iat = 0;
    int has_nbf, has_iat;
    if (numeric_claim(claims, "exp", &exp) != 0)
        goto out;
    if ((has_nbf = numeric_claim(claims, "nbf", &nbf)) < 0 || (has_iat = numeric_claim(claims, "iat", &iat)) < 0)
        goto out;
    double now = (double)now_s, skew = rules->skew_s > 0 ? (double)rules->skew_s : 0;
    if (now >= exp + skew) {
        *why = "expired";
        goto out;
    }
    if ((has_nbf == 0 && now + skew < nbf) || (has_iat == 0 && now + skew < iat)) {
        *why = "not yet valid";
        goto out;
    }
    if (rules->issuer != NULL && !string_claim_is(tg_json_get(claims, "iss"), rules->issuer)) {
        *why = "wrong issuer";
        goto out;
    }
    const cJSON *aud = tg_json_get(claims, "aud");
    if ((rules->audience != NULL || rules->resource != NULL) &&
        !(rules->audience != NULL && audience_ok(aud, rules->audience)) &&
        !(rules->resource != NULL && audience_ok(aud, rules->resource))) {
        *why = "wrong audience";
        goto out;
    }
    const cJSON *g = rules->grant_claim != NULL ? tg_json_get(claims, rules->grant_claim) : NULL;
    if (rules->grant_claim != NULL && (!cJSON_IsString(g) || g->valuestring[0] == '\0')) {
        *why = "missing grant claim";
        goto out;
    }
    size_t glen = g != NULL ? strlen(g->valuestring) : 0; /* no grant claim: the caller knows the grant */
    if (glen >= grant_sz) {
        *why = "grant claim too long";
        r = TG_ELIMIT;
        goto out;
    }
    const cJSON *sub = tg_json_get(claims, rules->subject_claim != NULL ? rules->subject_claim : "sub");
    if (!cJSON_IsString(sub) || sub->valuestring[0] == '\0' || strlen(sub->valuestring) >= TG_SUBJECT_MAX) {
        *why = "missing subject claim";
        goto out;
    }
    char scopes[TG_SCOPES_MAX];
    if (tg_scopes_of_claims(claims, scopes, sizeof(scopes), why) != 0)
        goto out;
    /* RFC 9449 §6.1: a DPoP-bound token carries its key's thumbprint in cnf.jkt. A cnf that is
     * there but unreadable is refused: the token is bound to something, and a bound token must
     * never pass as a plain bearer token. */
    const cJSON *cnf = tg_json_get(claims, "cnf");
    const cJSON *jkt = cJSON_IsObject(cnf) ? tg_json_get(cnf, "jkt") : NULL;
    if ((cnf != NULL && !cJSON_IsObject(cnf)) ||
        (jkt != NULL && (!cJSON_IsString(jkt) || strlen(jkt->valuestring) != TG_JWT_JKT_LEN))) {
        *why = "malformed cnf claim";
        goto out;
    }
    if (g != NULL)
        memcpy(grant, g->valuestring, glen + 1);
    if (rules->claims != NULL) {
        memcpy(rules->claims->scopes, scopes, strlen(scopes) + 1);
        rules->claims->jkt[0] = '\0';
        if (jkt != NULL)
            memcpy(rules->claims->jkt, jkt->valuestring, TG_JWT_JKT_LEN + 1);
        rules->claims->exp = exp > 9e15 ? INT64_MAX / 2 : (int64_t)exp;
        memcpy(rules->claims->subject, sub->valuestring, strlen(sub->valuestring) + 1);
    }
    *why = NULL;
    r = 0;
out:
    cJSON_Delete(claims);
    cJSON_Delete(header);
    free(scratch);
    scratch = NULL;
    return r;
}

/* ---- a signature alone, for a DPoP proof (policy/dpop.c) ---- */

int tg_jwks_verify_sig(const struct tg_jwks *keys, const char *alg, struct tg_slice input, const uint8_t *sig,
                       size_t siglen)
{
    unsigned bit = tg_jwt_alg_bit(alg);
    size_t a = 0;
    while (a < NALGS && algs[a].bit != bit)
        a++;
    uint8_t hash[32];
    if (a == NALGS || algs[a].kty == KTY_OCT || /* never HMAC */
        mbedtls_sha256_ret((const unsigned char *)input.ptr, input.len, hash, 0) != 0)
        return TG_EINVAL;
    for (size_t i = 0; i < keys->n; i++) {
        struct jwk *k = &keys->keys[i];
        if (k->kty == algs[a].kty && (k->only_alg == 0 || k->only_alg == bit) &&
            verify_with(k, bit, (const uint8_t *)input.ptr, input.len, hash, sig, siglen) == 0)
            return 0;
    }
    return TG_EINVAL;
}
