#include "policy/keyring.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/json.h"
#include "policy/jwt.h"

/* One issuer's fetched keys. Owner: refcounted (policy/keyring.h); the last unref frees the set. */
struct tg_keyring {
    int refcnt;
    char *id;
    struct tg_jwks *jwks; /* NULL before the first good set */
    char why[300];        /* the last fetch's failure, quotable; "" after a good one */
    char pending[360];    /* "the issuer's keys are not fetched yet: " + why */
    struct tg_keyring_stats st;
    tg_keyring_refetch_fn refetch;
    void *refetch_arg;
};

struct tg_keyring *tg_keyring_new(const char *id)
{
    struct tg_keyring *k = tg_xcalloc(1, sizeof(*k));
    k->refcnt = 1;
    k->id = tg_xstrdup(id);
    snprintf(k->pending, sizeof(k->pending), "the issuer's keys are not fetched yet");
    return k;
}

struct tg_keyring *tg_keyring_ref(struct tg_keyring *k)
{
    k->refcnt++;
    return k;
}

void tg_keyring_unref(struct tg_keyring *k)
{
    if (k == NULL || --k->refcnt > 0)
        return;
    tg_jwks_free(k->jwks);
    free(k->id);
    free(k);
}

const char *tg_keyring_id(const struct tg_keyring *k) { return k->id; }
const struct tg_jwks *tg_keyring_jwks(const struct tg_keyring *k) { return k->jwks; }
const char *tg_keyring_why(const struct tg_keyring *k) { return k->why; }
const char *tg_keyring_pending_why(const struct tg_keyring *k) { return k->pending; }

void tg_keyring_set_jwks(struct tg_keyring *k, struct tg_jwks *jwks, int64_t now_s)
{
    tg_jwks_free(k->jwks);
    k->jwks = jwks;
    k->why[0] = '\0';
    k->st.fetched++;
    k->st.last_ok_s = now_s;
    k->st.nkeys = tg_jwks_count(jwks);
}

void tg_keyring_failed(struct tg_keyring *k, const char *why, int64_t now_s)
{
    (void)now_s;
    /* The words go into WWW-Authenticate's quoted error_description, /readyz's JSON and logs. */
    size_t n = 0;
    for (const char *p = why ? why : "failed"; *p && n + 1 < sizeof(k->why); p++)
        k->why[n++] = (unsigned char)*p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\' ? '\'' : *p;
    k->why[n] = '\0';
    k->st.failed++;
    snprintf(k->pending, sizeof(k->pending), "the issuer's keys are not fetched yet: %s", k->why);
}

void tg_keyring_stats(const struct tg_keyring *k, struct tg_keyring_stats *out) { *out = k->st; }

void tg_keyring_on_unknown_kid(struct tg_keyring *k, tg_keyring_refetch_fn fn, void *arg)
{
    k->refetch = fn;
    k->refetch_arg = arg;
}

int tg_keyring_unknown_kid(struct tg_keyring *k)
{
    k->st.unknown_kid++;
    return k->refetch != NULL ? k->refetch(k->refetch_arg, k) : 0;
}

void tg_keyring_count_refetch(struct tg_keyring *k) { k->st.unknown_refetch++; }

void tg_keyring_count_skipped(struct tg_keyring *k, const struct tg_jwks_skipped *sk)
{
    for (int r = 0; r < TG_JWKS_SKIP_N; r++)
        k->st.skipped[r] += sk->n[r];
}

const char *tg_jwks_skip_name(enum tg_jwks_skip r)
{
    static const char *const names[TG_JWKS_SKIP_N] = {"oct", "okp", "use", "alg", "curve", "kty"};
    return (unsigned)r < TG_JWKS_SKIP_N ? names[r] : "?";
}

/* ---- the rules ------------------------------------------------------------------------ */

/* The host of an http(s) URL (without brackets, port and path), and where its path begins. */
static int url_host(const char *url, char *host, size_t host_sz, const char **path, int *https)
{
    const char *p;
    if (strncmp(url, "https://", 8) == 0) {
        *https = 1;
        p = url + 8;
    } else if (strncmp(url, "http://", 7) == 0) {
        *https = 0;
        p = url + 7;
    } else {
        return -1;
    }
    const char *end = p + strcspn(p, "/?#");
    const char *hs = p, *he;
    if (*p == '[') {
        hs = p + 1;
        he = memchr(hs, ']', (size_t)(end - hs));
        if (he == NULL)
            return -1;
    } else {
        he = memchr(p, ':', (size_t)(end - p));
        if (he == NULL)
            he = end;
    }
    if (he == hs || memchr(p, '@', (size_t)(end - p)) != NULL || (size_t)(he - hs) >= host_sz)
        return -1; /* no host, or userinfo (never meant for a key set) */
    memcpy(host, hs, (size_t)(he - hs));
    host[he - hs] = '\0';
    *path = end;
    return 0;
}

static int loopback(const char *host)
{
    if (strcasecmp(host, "localhost") == 0 || strcmp(host, "::1") == 0)
        return 1;
    unsigned a, b, c, d;
    char extra;
    return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) == 4 && a == 127 && b < 256 && c < 256 && d < 256;
}

int tg_keyring_url_ok(const char *url, const char **why)
{
    char host[256];
    const char *path;
    int https;
    if (url == NULL || url_host(url, host, sizeof(host), &path, &https) != 0) {
        *why = "is not an https:// URL with a host";
        return -1;
    }
    if (strchr(url, '#') != NULL) {
        *why = "has a fragment";
        return -1;
    }
    if (!https && !loopback(host)) {
        *why = "must be https:// (plain http:// only to a loopback address: 127.0.0.1, [::1], localhost)";
        return -1;
    }
    return 0;
}

int64_t tg_keyring_ttl(const char *cc, int64_t min_s, int64_t max_s)
{
    int64_t ttl = TG_KEYRING_DEFAULT_TTL_S;
    int have = 0;
    for (const char *p = cc; p != NULL && *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *name = p;
        while (*p && *p != '=' && *p != ',' && *p != ' ' && *p != '\t')
            p++;
        size_t nl = (size_t)(p - name);
        const char *val = NULL;
        size_t vl = 0;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '=') {
            p++;
            while (*p == ' ' || *p == '\t')
                p++;
            int quoted = *p == '"';
            if (quoted)
                p++;
            val = p;
            while (*p && (quoted ? *p != '"' : (*p != ',' && *p != ' ' && *p != '\t')))
                p++;
            vl = (size_t)(p - val);
            if (quoted && *p == '"')
                p++;
        }
        while (*p && *p != ',')
            p++; /* anything else up to the next directive */
        if ((nl == 8 && strncasecmp(name, "no-store", 8) == 0) || (nl == 8 && strncasecmp(name, "no-cache", 8) == 0)) {
            ttl = min_s;
            have = 2; /* wins over a max-age */
        } else if (have < 2 && nl == 7 && strncasecmp(name, "max-age", 7) == 0 && val != NULL && vl > 0) {
            int64_t v = 0;
            size_t i = 0;
            for (; i < vl && val[i] >= '0' && val[i] <= '9'; i++)
                v = v > 100000000 ? 100000000 : v * 10 + (val[i] - '0');
            if (i == vl) {
                ttl = v;
                have = 1;
            }
        }
    }
    if (ttl < min_s)
        ttl = min_s;
    if (ttl > max_s)
        ttl = max_s;
    return ttl;
}

char *tg_keyring_openid_url(const char *issuer)
{
    char host[256];
    const char *path;
    int https;
    if (issuer == NULL || url_host(issuer, host, sizeof(host), &path, &https) != 0)
        return NULL;
    size_t n = strlen(issuer);
    while (n > 0 && issuer[n - 1] == '/')
        n--; /* OpenID Discovery §4: the issuer's trailing "/" is removed before the segment */
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_append(&b, issuer, n);
    tg_buf_appends(&b, "/.well-known/openid-configuration");
    tg_buf_append(&b, "", 1);
    return b.base;
}

char *tg_keyring_rfc8414_url(const char *issuer)
{
    char host[256];
    const char *path;
    int https;
    if (issuer == NULL || url_host(issuer, host, sizeof(host), &path, &https) != 0 || strpbrk(path, "?#") != NULL)
        return NULL; /* RFC 8414 §2: an issuer has no query or fragment */
    size_t plen = strlen(path);
    while (plen > 0 && path[plen - 1] == '/')
        plen--;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_append(&b, issuer, (size_t)(path - issuer));
    tg_buf_appends(&b, "/.well-known/oauth-authorization-server");
    tg_buf_append(&b, path, plen); /* §3: inserted between the host and the issuer's path */
    tg_buf_append(&b, "", 1);
    return b.base;
}

char *tg_keyring_discovery_jwks_uri(const char *json, size_t len, const char *issuer, char *why, size_t why_sz)
{
    struct tg_json_doc doc = {0};
    const char *jerr = NULL, *uwhy = NULL;
    size_t joff = 0;
    char *out = NULL;
    if (tg_json_parse(json, len, 16, 1, &doc, &jerr, &joff) != 0 || !cJSON_IsObject(doc.root)) {
        snprintf(why, why_sz, "the discovery document is not a JSON object");
        goto done;
    }
    const cJSON *iss = tg_json_get(doc.root, "issuer"), *uri = tg_json_get(doc.root, "jwks_uri");
    if (!cJSON_IsString(iss)) {
        snprintf(why, why_sz, "the discovery document has no issuer");
    } else if (strcmp(iss->valuestring, issuer) != 0) {
        /* OpenID Discovery §4.3, RFC 8414 §3.3: another issuer's document must not be used. */
        char esc[128];
        size_t n = 0;
        for (const char *p = iss->valuestring; *p && n + 1 < sizeof(esc); p++)
            esc[n++] = (unsigned char)*p < 0x20 || *p == '"' || *p == '\\' ? '\'' : *p;
        esc[n] = '\0';
        snprintf(why, why_sz, "the discovery document names issuer %s, not the configured one", esc);
    } else if (!cJSON_IsString(uri) || uri->valuestring[0] == '\0') {
        snprintf(why, why_sz, "the discovery document has no jwks_uri");
    } else if (tg_keyring_url_ok(uri->valuestring, &uwhy) != 0) {
        snprintf(why, why_sz, "the discovery document's jwks_uri %s", uwhy);
    } else {
        out = tg_xstrdup(uri->valuestring);
    }
done:
    cJSON_Delete(doc.root);
    return out;
}

/* A key of a fetched set tollgate verifies with (-1): RSA, or EC on P-256, for signatures; else
 * why not (enum tg_jwks_skip). */
static int key_skip(const cJSON *k)
{
    const cJSON *kty = tg_json_get(k, "kty"), *use = tg_json_get(k, "use"), *alg = tg_json_get(k, "alg");
    if (!cJSON_IsObject(k) || !cJSON_IsString(kty))
        return TG_JWKS_SKIP_KTY;
    if (strcmp(kty->valuestring, "oct") == 0)
        return TG_JWKS_SKIP_OCT; /* never: a published HMAC secret is no secret */
    if (strcmp(kty->valuestring, "OKP") == 0)
        return TG_JWKS_SKIP_OKP; /* not verified here */
    if (use != NULL && !(cJSON_IsString(use) && strcmp(use->valuestring, "sig") == 0))
        return TG_JWKS_SKIP_USE;
    if (strcmp(kty->valuestring, "RSA") == 0)
        return alg == NULL || (cJSON_IsString(alg) && (strcmp(alg->valuestring, "RS256") == 0 ||
                                                      strcmp(alg->valuestring, "PS256") == 0))
                   ? -1
                   : TG_JWKS_SKIP_ALG;
    if (strcmp(kty->valuestring, "EC") == 0) {
        const cJSON *crv = tg_json_get(k, "crv");
        if (!cJSON_IsString(crv) || strcmp(crv->valuestring, "P-256") != 0)
            return TG_JWKS_SKIP_CURVE;
        return alg == NULL || (cJSON_IsString(alg) && strcmp(alg->valuestring, "ES256") == 0) ? -1 : TG_JWKS_SKIP_ALG;
    }
    return TG_JWKS_SKIP_KTY;
}

/* sk gets key k, skipped for reason r. */
static void note_skip(struct tg_jwks_skipped *sk, const cJSON *k, int r)
{
    sk->n[r]++;
    sk->total++;
    const cJSON *kid = cJSON_IsObject(k) ? tg_json_get(k, "kid") : NULL;
    char one[96];
    size_t n = 0;
    if (cJSON_IsString(kid) && kid->valuestring[0] != '\0') {
        for (const char *p = kid->valuestring; *p && n < 64; p++)
            one[n++] = *p > 0x20 && *p < 0x7f && *p != '"' && *p != '\\' ? *p : '?';
    } else {
        one[n++] = '-';
    }
    snprintf(one + n, sizeof(one) - n, ":%s", tg_jwks_skip_name((enum tg_jwks_skip)r));
    size_t have = strlen(sk->list);
    if (have >= 3 && strcmp(sk->list + have - 3, "...") == 0)
        return; /* cut already (an entry ends in its reason) */
    if (have + (have ? 1 : 0) + strlen(one) + 5 > sizeof(sk->list)) { /* room for " ..." always stays */
        snprintf(sk->list + have, sizeof(sk->list) - have, "%s...", have ? " " : "");
        return;
    }
    snprintf(sk->list + have, sizeof(sk->list) - have, "%s%s", have ? " " : "", one);
}

int tg_keyring_parse_jwks(const char *json, size_t len, struct tg_jwks **out, char *why, size_t why_sz,
                          struct tg_jwks_skipped *skipped)
{
    struct tg_jwks_skipped own;
    struct tg_jwks_skipped *sk = skipped != NULL ? skipped : &own;
    memset(sk, 0, sizeof(*sk));
    struct tg_json_doc doc = {0};
    const char *jerr = NULL;
    size_t joff = 0;
    int rc = TG_EINVAL;
    *out = NULL;
    if (tg_json_parse(json, len, 16, 1, &doc, &jerr, &joff) != 0) {
        snprintf(why, why_sz, "the JWKS is not JSON (byte %zu: %s)", joff, jerr ? jerr : "?");
        return TG_EINVAL;
    }
    const cJSON *keys = cJSON_IsObject(doc.root) ? tg_json_get(doc.root, "keys") : NULL;
    if (!cJSON_IsArray(keys)) {
        snprintf(why, why_sz, "the JWKS is not an object with a \"keys\" array");
        goto done;
    }
    int n = cJSON_GetArraySize(keys);
    if (n > TG_JWKS_MAX_KEYS) {
        snprintf(why, why_sz, "the JWKS has %d keys (at most %d)", n, TG_JWKS_MAX_KEYS);
        goto done;
    }
    /* The usable keys, written out again for the strict parser (policy/jwt.c checks each). */
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"keys\":[");
    int used = 0;
    for (const cJSON *k = keys->child; k != NULL; k = k->next) {
        int r = key_skip(k);
        if (r >= 0) {
            note_skip(sk, k, r);
            continue;
        }
        if (used++)
            tg_buf_append(&b, ",", 1);
        tg_json_write(&b, k);
    }
    tg_buf_appends(&b, "]}");
    if (used == 0) {
        snprintf(why, why_sz, "the JWKS has no key tollgate can verify with (%d keys: RSA or EC P-256 signing keys needed)", n);
    } else {
        struct tg_buf err;
        tg_buf_init(&err);
        if (tg_jwks_parse(b.base, b.len, "jwks", out, &err) == 0) {
            rc = 0;
        } else {
            size_t m = err.len;
            while (m > 0 && err.base[m - 1] == '\n')
                m--;
            const char *nl = memchr(err.base, '\n', m);
            snprintf(why, why_sz, "the JWKS is refused: %.*s", (int)(nl ? (size_t)(nl - err.base) : m), err.base);
        }
        tg_buf_dispose(&err);
    }
    tg_buf_dispose(&b);
done:
    cJSON_Delete(doc.root);
    return rc;
}
