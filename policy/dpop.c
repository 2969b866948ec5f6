#include "policy/dpop.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/json.h"
#include "core/base/sha256.h"
#include "core/base/siphash.h"

/* A JOSE header or claim set: a JSON object through the strict parser (policy/jwt.c's rules). */
static int parse_object(const uint8_t *p, size_t n, cJSON **out)
{
    struct tg_json_doc doc = {0};
    *out = NULL;
    if (tg_json_parse((const char *)p, n, 16, 1, &doc, NULL, NULL) != 0)
        return TG_EINVAL;
    if (!cJSON_IsObject(doc.root)) {
        cJSON_Delete(doc.root);
        return TG_EINVAL;
    }
    *out = doc.root;
    return 0;
}

/* ---- htu ---- */

static char lower(char c) { return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c; }

int tg_dpop_htu_normalise(struct tg_slice url, struct tg_buf *out)
{
    if (url.ptr == NULL || url.len > TG_DPOP_MAX_URL)
        return TG_EINVAL;
    const char *p = url.ptr, *e = url.ptr + url.len;
    int https;
    if (url.len >= 8 && strncasecmp(p, "https://", 8) == 0)
        https = 1, p += 8;
    else if (url.len >= 7 && strncasecmp(p, "http://", 7) == 0)
        https = 0, p += 7;
    else
        return TG_EINVAL;
    const char *auth = p;
    while (p < e && *p != '/' && *p != '?' && *p != '#')
        p++;
    const char *auth_end = p;
    /* The host: a bracketed IPv6 literal or everything up to the last ':'. No userinfo. */
    const char *host_end = auth_end;
    if (auth < auth_end && auth[0] == '[') {
        const char *rb = memchr(auth, ']', (size_t)(auth_end - auth));
        if (rb == NULL)
            return TG_EINVAL;
        host_end = rb + 1;
    } else {
        for (const char *q = auth; q < auth_end; q++)
            if (*q == ':')
                host_end = q;
    }
    if (host_end == auth)
        return TG_EINVAL;
    for (const char *q = auth; q < host_end; q++) {
        unsigned char c = (unsigned char)*q;
        if (c <= 0x20 || c >= 0x7f || c == '@' || c == '\\')
            return TG_EINVAL;
    }
    /* The port: digits after ':', or nothing (an empty port is the default, RFC 3986 §6.2.3). */
    unsigned long port = 0;
    int has_port = 0;
    if (host_end < auth_end) {
        if (*host_end != ':')
            return TG_EINVAL;
        for (const char *q = host_end + 1; q < auth_end; q++) {
            if (*q < '0' || *q > '9')
                return TG_EINVAL;
            port = port * 10 + (unsigned long)(*q - '0');
            if (port > 65535)
                return TG_EINVAL;
            has_port = 1;
        }
    }
    if (has_port && port == (https ? 443u : 80u))
        has_port = 0;
    const char *path = p;
    while (p < e && *p != '?' && *p != '#')
        p++;
    for (const char *q = path; q < p; q++) {
        unsigned char c = (unsigned char)*q;
        if (c <= 0x20 || c >= 0x7f)
            return TG_EINVAL;
    }
    tg_buf_appends(out, https ? "https://" : "http://");
    for (const char *q = auth; q < host_end; q++) {
        char c = lower(*q);
        tg_buf_append(out, &c, 1);
    }
    if (has_port)
        tg_buf_appendf(out, ":%lu", port);
    if (p == path)
        tg_buf_append(out, "/", 1);
    else
        tg_buf_append(out, path, (size_t)(p - path));
    return 0;
}

/* ---- thumbprints ---- */

/* A member the thumbprint quotes: a string of characters JSON writes as themselves (so the
 * canonical JSON of RFC 7638 §3 is the member as given), base64url when b64 says so. */
static const char *plain_member(const cJSON *jwk, const char *name, int b64)
{
    const cJSON *m = tg_json_get(jwk, name);
    if (!cJSON_IsString(m) || m->valuestring[0] == '\0')
        return NULL;
    for (const char *q = m->valuestring; *q; q++) {
        unsigned char c = (unsigned char)*q;
        int ok = b64 ? ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                        c == '_')
                     : (c > 0x20 && c < 0x7f && c != '"' && c != '\\');
        if (!ok)
            return NULL;
    }
    return m->valuestring;
}

int tg_dpop_thumbprint(const cJSON *jwk, char out[TG_JWT_JKT_LEN + 1])
{
    out[0] = '\0';
    const char *kty = cJSON_IsObject(jwk) ? plain_member(jwk, "kty", 0) : NULL;
    if (kty == NULL)
        return TG_EINVAL;
    struct tg_buf b;
    tg_buf_init(&b);
    int r = TG_EINVAL;
    /* RFC 7638 §3.2: the required members only, in lexicographic order, no whitespace. */
    if (strcmp(kty, "EC") == 0) {
        const char *crv = plain_member(jwk, "crv", 0), *x = plain_member(jwk, "x", 1), *y = plain_member(jwk, "y", 1);
        if (crv == NULL || x == NULL || y == NULL)
            goto out;
        tg_buf_appendf(&b, "{\"crv\":\"%s\",\"kty\":\"EC\",\"x\":\"%s\",\"y\":\"%s\"}", crv, x, y);
    } else if (strcmp(kty, "RSA") == 0) {
        const char *e = plain_member(jwk, "e", 1), *n = plain_member(jwk, "n", 1);
        if (e == NULL || n == NULL)
            goto out;
        tg_buf_appendf(&b, "{\"e\":\"%s\",\"kty\":\"RSA\",\"n\":\"%s\"}", e, n);
    } else {
        goto out;
    }
    uint8_t h[32];
    tg_sha256(b.base, b.len, h);
    char enc[48];
    size_t n = tg_b64url_encode(h, sizeof(h), enc);
    if (n != TG_JWT_JKT_LEN)
        goto out;
    memcpy(out, enc, n);
    out[n] = '\0';
    r = 0;
out:
    tg_buf_dispose(&b);
    return r;
}

/* ---- the replay cache ---- */

#define NONE UINT32_MAX
#define REPLAY_FIRST_CAP 1024

/* One remembered proof. Value type: an element of the cache's ring. */
struct seen {
    uint64_t tag;   /* SipHash of the key thumbprint and the jti */
    int64_t iat;    /* the proof's iat, whole seconds */
    int64_t until;  /* after this it cannot pass the iat window anyway */
    uint32_t next;  /* the next entry in the same bucket, or NONE */
};

/* Owner: the server (struct tg_server.dpop_replay), freed by tg_dpop_replay_free(). The ring holds
 * entries oldest first from head; buckets chain them by tag. */
/* A proof header seen lately, already checked: a client signs every proof with the same key and
 * the same header, so its key is parsed (and mbedtls's precomputation for it made) once. Value
 * type: an element of tg_dpop_replay.keys; the key is the cache's, freed when the slot is reused
 * or the cache freed. */
#define PROOF_KEYS 64
struct proof_key {
    uint8_t header_sha256[32]; /* of the decoded header, every member included */
    unsigned alg_bit;
    char alg[8];
    char jkt[TG_JWT_JKT_LEN + 1];
    struct tg_jwks *key; /* the jwk as a one-key set; NULL: an empty slot */
};

struct tg_dpop_replay {
    struct proof_key keys[PROOF_KEYS];
    uint64_t key_hits, key_misses;
    uint8_t key[16];
    struct seen *ring;
    uint32_t *buckets; /* nbuckets heads, a power of two at least cap */
    size_t cap, nbuckets, head, count, max;
    int64_t floor_iat;
    uint64_t evicted, refused_floor;
};

static uint32_t *bucket_of(struct tg_dpop_replay *r, uint64_t tag) { return &r->buckets[tag & (r->nbuckets - 1)]; }

static void unlink_head(struct tg_dpop_replay *r)
{
    uint32_t idx = (uint32_t)r->head;
    uint32_t *pp = bucket_of(r, r->ring[idx].tag);
    while (*pp != NONE && *pp != idx)
        pp = &r->ring[*pp].next;
    if (*pp == idx)
        *pp = r->ring[idx].next;
    r->head = (r->head + 1) % r->cap;
    r->count--;
}

static void push(struct tg_dpop_replay *r, const struct seen *s)
{
    uint32_t idx = (uint32_t)((r->head + r->count) % r->cap);
    r->ring[idx] = *s;
    uint32_t *b = bucket_of(r, s->tag);
    r->ring[idx].next = *b;
    *b = idx;
    r->count++;
}

/* Move to a ring of cap entries, keeping the newest that fit; the others are evicted. */
static void resize(struct tg_dpop_replay *r, size_t cap)
{
    struct tg_dpop_replay old = *r;
    size_t nb = 1;
    while (nb < cap)
        nb <<= 1;
    r->ring = tg_xcalloc(cap, sizeof(*r->ring));
    r->buckets = tg_xmalloc(nb * sizeof(*r->buckets));
    for (size_t i = 0; i < nb; i++)
        r->buckets[i] = NONE;
    r->cap = cap;
    r->nbuckets = nb;
    r->head = 0;
    r->count = 0;
    for (size_t i = 0; i < old.count; i++) {
        const struct seen *s = &old.ring[(old.head + i) % old.cap];
        if (old.count - i > cap) {
            if (s->iat > r->floor_iat)
                r->floor_iat = s->iat;
            r->evicted++;
            continue;
        }
        push(r, s);
    }
    free(old.ring);
    free(old.buckets);
}

struct tg_dpop_replay *tg_dpop_replay_new(size_t max)
{
    struct tg_dpop_replay *r = tg_xcalloc(1, sizeof(*r));
    if (tg_random(r->key, sizeof(r->key)) != 0)
        abort(); /* without a secret key a client could aim its jti values at one bucket */
    r->max = max > 0 ? max : 1;
    resize(r, r->max < REPLAY_FIRST_CAP ? r->max : REPLAY_FIRST_CAP);
    return r;
}

void tg_dpop_replay_set_max(struct tg_dpop_replay *r, size_t max)
{
    max = max > 0 ? max : 1;
    if (max == r->max)
        return;
    r->max = max;
    if (r->cap > max)
        resize(r, max);
}

void tg_dpop_replay_free(struct tg_dpop_replay *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < PROOF_KEYS; i++)
        tg_jwks_free(r->keys[i].key);
    free(r->ring);
    free(r->buckets);
    free(r);
}

int tg_dpop_replay_add(struct tg_dpop_replay *r, const char *jkt, struct tg_slice jti, int64_t iat, int64_t until_s,
                       int64_t now_s)
{
    while (r->count > 0 && r->ring[r->head].until < now_s)
        unlink_head(r); /* out of its window: no longer needed to refuse a replay */
    if (r->floor_iat != 0 && iat <= r->floor_iat) {
        r->refused_floor++;
        return TG_ELIMIT;
    }
    uint8_t in[TG_JWT_JKT_LEN + 1 + TG_DPOP_MAX_JTI];
    size_t jl = strlen(jkt);
    if (jl > TG_JWT_JKT_LEN || jti.len > TG_DPOP_MAX_JTI)
        return TG_EINVAL;
    memcpy(in, jkt, jl);
    in[jl] = 0;
    memcpy(in + jl + 1, jti.ptr, jti.len);
    uint64_t tag = tg_siphash(r->key, in, jl + 1 + jti.len);
    for (uint32_t i = *bucket_of(r, tag); i != NONE; i = r->ring[i].next)
        if (r->ring[i].tag == tag)
            return TG_EINVAL;
    if (r->count == r->cap) {
        if (r->cap < r->max) {
            resize(r, r->cap * 2 < r->max ? r->cap * 2 : r->max);
        } else {
            const struct seen *old = &r->ring[r->head];
            if (old->iat > r->floor_iat)
                r->floor_iat = old->iat;
            r->evicted++;
            unlink_head(r);
        }
    }
    struct seen s = {tag, iat, until_s, NONE};
    push(r, &s);
    return 0;
}

void tg_dpop_replay_stats(const struct tg_dpop_replay *r, struct tg_dpop_replay_stats *out)
{
    out->entries = r->count;
    out->max = r->max;
    out->bytes = sizeof(*r) + r->cap * sizeof(*r->ring) + r->nbuckets * sizeof(*r->buckets);
    out->evicted = r->evicted;
    out->refused_floor = r->refused_floor;
    out->floor_iat = r->floor_iat;
    out->key_hits = r->key_hits;
    out->key_misses = r->key_misses;
}

/* ---- proofs ---- */

void tg_dpop_algs_names(unsigned algs, struct tg_buf *out)
{
    static const char *const names[] = {"ES256", "RS256", "PS256"};
    int first = 1;
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (algs & tg_jwt_alg_bit(names[i])) {
            tg_buf_appendf(out, "%s%s", first ? "" : " ", names[i]);
            first = 0;
        }
}

/* The header of a proof not seen before (RFC 9449 §4.3, checks 4 to 7, but the issuer's
 * algorithms, checked again for a known header): typ, alg, a public jwk suiting it. On success pk holds the key, its alg and its
 * thumbprint; the caller owns pk->key. */
static int header_checks(const uint8_t *hdec, size_t hlen, unsigned algs, struct proof_key *pk, const char **why)
{
    static const char *const private_members[] = {"d", "p", "q", "dp", "dq", "qi", "oth", "k"};
    cJSON *header = NULL;
    int r = TG_EINVAL;
    if (parse_object(hdec, hlen, &header) != 0 || tg_json_get(header, "crit") != NULL)
        goto out; /* *why is "malformed DPoP proof" */
    const cJSON *typ = tg_json_get(header, "typ");
    if (!cJSON_IsString(typ) || strcmp(typ->valuestring, "dpop+jwt") != 0) {
        *why = "DPoP proof typ is not dpop+jwt";
        goto out;
    }
    const cJSON *alg = tg_json_get(header, "alg");
    unsigned bit = cJSON_IsString(alg) ? tg_jwt_alg_bit(alg->valuestring) : 0;
    if (bit == 0 || bit == TG_JWT_ALG_HS256 || !(algs & bit)) {
        *why = "DPoP proof alg is not allowed";
        goto out;
    }
    const cJSON *jwk = tg_json_get(header, "jwk");
    if (!cJSON_IsObject(jwk)) {
        *why = "DPoP proof has no jwk header";
        goto out;
    }
    for (size_t i = 0; i < sizeof(private_members) / sizeof(private_members[0]); i++)
        if (tg_json_get(jwk, private_members[i]) != NULL) {
            *why = "DPoP proof jwk holds private key material";
            goto out;
        }
    /* The jwk becomes a one-key set through the JWKS reader, with its checks (RSA 2048..8192
     * bits, EC P-256 on the curve, "d" refused), after its kty was found to suit the alg. */
    const cJSON *kty = tg_json_get(jwk, "kty");
    int want_ec = bit == TG_JWT_ALG_ES256;
    char *text = NULL;
    struct tg_buf set, err;
    tg_buf_init(&set);
    tg_buf_init(&err);
    if (cJSON_IsString(kty) && strcmp(kty->valuestring, want_ec ? "EC" : "RSA") == 0 &&
        (text = cJSON_PrintUnformatted(jwk)) != NULL) {
        tg_buf_appendf(&set, "{\"keys\":[%s]}", text);
        cJSON_free(text);
        if (tg_jwks_parse(set.base, set.len, "jwk", &pk->key, &err) != 0)
            pk->key = NULL;
    }
    tg_buf_dispose(&set);
    tg_buf_dispose(&err);
    if (pk->key == NULL || tg_dpop_thumbprint(jwk, pk->jkt) != 0) {
        *why = "DPoP proof jwk is not a usable public key for its alg";
        goto out;
    }
    pk->alg_bit = bit;
    snprintf(pk->alg, sizeof(pk->alg), "%s", alg->valuestring);
    r = 0;
out:
    cJSON_Delete(header);
    return r;
}

int tg_dpop_verify(const struct tg_dpop_check *chk, struct tg_dpop_replay *replay, const char **why)
{
    cJSON *claims = NULL;
    struct proof_key fresh = {0};
    uint8_t *scratch = NULL;
    struct tg_buf htu;
    tg_buf_init(&htu);
    int r = TG_EINVAL;
    *why = "malformed DPoP proof";
    struct tg_slice pr = chk->proof;
    if (pr.ptr == NULL || pr.len == 0 || pr.len > TG_DPOP_MAX_PROOF)
        goto out;
    const char *end = pr.ptr + pr.len;
    const char *d1 = memchr(pr.ptr, '.', pr.len);
    const char *d2 = d1 ? memchr(d1 + 1, '.', (size_t)(end - d1 - 1)) : NULL;
    if (d2 == NULL || memchr(d2 + 1, '.', (size_t)(end - d2 - 1)) != NULL || d1 == pr.ptr || d2 == d1 + 1 ||
        d2 + 1 == end)
        goto out;
    scratch = tg_xmalloc(pr.len);
    uint8_t *hdec = scratch, *pdec, *sig;
    size_t hlen = 0, plen = 0, siglen = 0;
    if (tg_b64url_decode(pr.ptr, (size_t)(d1 - pr.ptr), hdec, &hlen) != 0)
        goto out;
    pdec = hdec + hlen;
    if (tg_b64url_decode(d1 + 1, (size_t)(d2 - d1 - 1), pdec, &plen) != 0)
        goto out;
    sig = pdec + plen;
    if (tg_b64url_decode(d2 + 1, (size_t)(end - d2 - 1), sig, &siglen) != 0)
        goto out;
    /* RFC 9449 §4.3: checks 4 to 7, on the header: once per header (proof_key). */
    uint8_t hsum[32];
    tg_sha256(hdec, hlen, hsum);
    struct proof_key *pk = &replay->keys[hsum[0] % PROOF_KEYS];
    if (pk->key != NULL && tg_ct_equal(pk->header_sha256, hsum, 32)) {
        replay->key_hits++;
    } else {
        replay->key_misses++;
        pk = &fresh;
        if (header_checks(hdec, hlen, chk->algs, pk, why) != 0)
            goto out;
    }
    if (!(chk->algs & pk->alg_bit)) {
        *why = "DPoP proof alg is not allowed";
        goto out;
    }
    if (tg_jwks_verify_sig(pk->key, pk->alg, tg_slice_of(pr.ptr, (size_t)(d2 - pr.ptr)), sig, siglen) != 0) {
        *why = "DPoP proof signature is invalid";
        goto out;
    }
    if (pk == &fresh) { /* a good signature by a new header's key: remember it (its slot's last goes) */
        struct proof_key *slot = &replay->keys[hsum[0] % PROOF_KEYS];
        tg_jwks_free(slot->key);
        *slot = fresh;
        memcpy(slot->header_sha256, hsum, 32);
        fresh.key = NULL;
        pk = slot;
    }

    /* Checks 8 to 12, on the claims the key signed. */
    if (parse_object(pdec, plen, &claims) != 0)
        goto out;
    const cJSON *htm = tg_json_get(claims, "htm");
    if (!cJSON_IsString(htm) || !tg_slice_eq(tg_slice_cstr(htm->valuestring), chk->method)) {
        *why = "DPoP proof htm does not match the request method";
        goto out;
    }
    const cJSON *htum = tg_json_get(claims, "htu");
    if (!cJSON_IsString(htum) || tg_dpop_htu_normalise(tg_slice_cstr(htum->valuestring), &htu) != 0 ||
        !tg_slice_eq(tg_slice_of(htu.base, htu.len), chk->htu)) {
        *why = "DPoP proof htu does not match the request URL";
        goto out;
    }
    const cJSON *iat = tg_json_get(claims, "iat");
    double now = (double)chk->now_s, win = chk->window_s > 0 ? (double)chk->window_s : 0;
    if (!cJSON_IsNumber(iat) || !isfinite(iat->valuedouble) || iat->valuedouble < now - win ||
        iat->valuedouble > now + win) {
        *why = "DPoP proof iat is outside the accepted window";
        goto out;
    }
    const cJSON *jti = tg_json_get(claims, "jti");
    if (!cJSON_IsString(jti) || jti->valuestring[0] == '\0' || strlen(jti->valuestring) > TG_DPOP_MAX_JTI) {
        *why = "DPoP proof jti is missing or too long";
        goto out;
    }
    const cJSON *ath = tg_json_get(claims, "ath");
    uint8_t th[32];
    char want[48];
    tg_sha256(chk->token.ptr, chk->token.len, th);
    want[tg_b64url_encode(th, sizeof(th), want)] = '\0';
    if (!cJSON_IsString(ath) || strcmp(ath->valuestring, want) != 0) {
        *why = "DPoP proof ath does not match the access token";
        goto out;
    }
    const char *jkt = pk->jkt;
    if (chk->jkt == NULL || strcmp(jkt, chk->jkt) != 0) {
        *why = "DPoP proof key does not match the token's cnf.jkt";
        goto out;
    }
    int64_t iat_s = (int64_t)floor(iat->valuedouble);
    int rr = tg_dpop_replay_add(replay, jkt, tg_slice_cstr(jti->valuestring), iat_s, iat_s + (int64_t)win + 1,
                                chk->now_s);
    if (rr == TG_ELIMIT) {
        *why = "DPoP proof is older than the replay cache remembers: send a fresh proof";
        goto out;
    }
    if (rr != 0) {
        *why = "DPoP proof jti was used already";
        goto out;
    }
    *why = NULL;
    r = 0;
out:
    tg_buf_dispose(&htu);
    tg_jwks_free(fresh.key);
    cJSON_Delete(claims);
    free(scratch);
    scratch = NULL;
    return r;
}
