#include "core/session.h"

#include <stdlib.h>
#include <string.h>

#include <mbedtls/md.h>

/* Live sessions of one grant, so that the per-grant cap costs O(1) per initialize. Owner: the
 * table; freed when its last session is removed. */
struct tg_grant_count {
    char *grant;
    size_t n;
    struct tg_grant_count *next;
};

#define GRANT_BUCKETS 64

/* Owner: the server (srv->sessions), made by tg_session_table_new() in tg_server_init() and
 * freed by tg_session_table_free() in tg_server_dispose(). It holds one reference on each live
 * session. */
struct tg_session_table {
    struct tg_session **buckets;
    size_t nbuckets; /* power of two */
    size_t count;
    struct tg_list all;
    struct tg_grant_count *grants[GRANT_BUCKETS];
    int sealed;          /* ids carry a MAC under secret (a cluster: any member can check one) */
    uint8_t secret[32];
};

static struct tg_grant_count **grant_slot(struct tg_session_table *t, const char *grant)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (const unsigned char *p = (const unsigned char *)grant; *p; p++)
        h = (h ^ *p) * 16777619u;
    struct tg_grant_count **pp = &t->grants[h % GRANT_BUCKETS];
    while (*pp != NULL && strcmp((*pp)->grant, grant) != 0)
        pp = &(*pp)->next;
    return pp;
}

static size_t bucket_of(const struct tg_session_table *t, const uint8_t id[16])
{
    uint64_t h;
    memcpy(&h, id, sizeof(h)); /* ids are uniformly random: the first 8 bytes are a fine hash */
    return (size_t)h & (t->nbuckets - 1);
}

struct tg_session_table *tg_session_table_new(void)
{
    struct tg_session_table *t = tg_xcalloc(1, sizeof(*t));
    t->nbuckets = 1024;
    t->buckets = tg_xcalloc(t->nbuckets, sizeof(*t->buckets));
    tg_list_init(&t->all);
    return t;
}

void tg_session_table_free(struct tg_session_table *t)
{
    if (t == NULL)
        return;
    while (!tg_list_empty(&t->all)) {
        struct tg_session *s = tg_container_of(t->all.next, struct tg_session, link);
        tg_session_remove(t, s);
    }
    free(t->buckets);
    free(t);
}

size_t tg_session_table_count(const struct tg_session_table *t) { return t->count; }

size_t tg_session_count_for_grant(const struct tg_session_table *t, const char *grant)
{
    struct tg_grant_count *gc = *grant_slot((struct tg_session_table *)t, grant);
    return gc ? gc->n : 0;
}

static void grow(struct tg_session_table *t)
{
    size_t nb = t->nbuckets * 2;
    struct tg_session **b = tg_xcalloc(nb, sizeof(*b));
    for (size_t i = 0; i < t->nbuckets; i++) {
        struct tg_session *s = t->buckets[i];
        while (s) {
            struct tg_session *next = s->hnext;
            uint64_t h;
            memcpy(&h, s->id, sizeof(h));
            size_t k = (size_t)h & (nb - 1);
            s->hnext = b[k];
            b[k] = s;
            s = next;
        }
    }
    free(t->buckets);
    t->buckets = b;
    t->nbuckets = nb;
}

/* A sealed id: 8 random bytes, then the first 8 bytes of HMAC-SHA256(secret, "tollgate session
 * id\0" || those 8). A gateway of the cluster can refuse an id no member made without asking
 * Redis; guessing a live one still means guessing 64 random bits, for one grant's token. */
static void seal_mac(const uint8_t secret[32], const uint8_t rnd[8], uint8_t mac[8])
{
    static const char label[] = "tollgate session id";
    uint8_t in[sizeof(label) + 8], out[32];
    memcpy(in, label, sizeof(label));
    memcpy(in + sizeof(label), rnd, 8);
    if (mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), secret, 32, in, sizeof(in), out) != 0)
        abort();
    memcpy(mac, out, 8);
}

void tg_session_table_seal(struct tg_session_table *t, const uint8_t secret[32])
{
    t->sealed = 1;
    memcpy(t->secret, secret, 32);
}

static void insert(struct tg_session_table *t, struct tg_session *s, const char *grant, int upstream)
{
    tg_b64url_encode(s->id, sizeof(s->id), s->id_str);
    s->grant = tg_xstrdup(grant);
    s->upstream = upstream;
    s->live = 1;
    s->refcnt = 1;
    tg_list_init(&s->calls);
    tg_list_init(&s->streams);
    if (t->count + 1 > t->nbuckets)
        grow(t);
    size_t k = bucket_of(t, s->id);
    s->hnext = t->buckets[k];
    t->buckets[k] = s;
    tg_list_insert_tail(&t->all, &s->link);
    t->count++;
    struct tg_grant_count **pp = grant_slot(t, grant);
    if (*pp == NULL) {
        *pp = tg_xcalloc(1, sizeof(**pp));
        (*pp)->grant = tg_xstrdup(grant);
    }
    (*pp)->n++;
}

struct tg_session *tg_session_create(struct tg_session_table *t, const char *grant, int upstream)
{
    struct tg_session *s = tg_xcalloc(1, sizeof(*s));
    if (tg_random(s->id, t->sealed ? 8 : sizeof(s->id)) != 0)
        abort(); /* no randomness means no unguessable ids: refuse to run rather than issue weak ones */
    if (t->sealed)
        seal_mac(t->secret, s->id, s->id + 8);
    insert(t, s, grant, upstream);
    return s;
}

static int decode_id(struct tg_slice id, uint8_t raw[16]);

int tg_session_id_sealed(const struct tg_session_table *t, struct tg_slice id)
{
    uint8_t raw[16], mac[8];
    if (!t->sealed || decode_id(id, raw) != 0)
        return 0;
    seal_mac(t->secret, raw, mac);
    uint8_t d = 0;
    for (int i = 0; i < 8; i++)
        d |= (uint8_t)(mac[i] ^ raw[8 + i]);
    return d == 0;
}

struct tg_session *tg_session_adopt(struct tg_session_table *t, struct tg_slice id, const char *grant, int upstream)
{
    uint8_t raw[16];
    if (!tg_session_id_sealed(t, id) || decode_id(id, raw) != 0 || tg_session_find(t, id) != NULL)
        return NULL;
    struct tg_session *s = tg_xcalloc(1, sizeof(*s));
    memcpy(s->id, raw, 16);
    insert(t, s, grant, upstream);
    if (memcmp(s->id_str, id.ptr, id.len) != 0) { /* not the canonical spelling of these bytes */
        tg_session_remove(t, s);
        return NULL;
    }
    return s;
}

static int b64url_val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return -1;
}

static int decode_id(struct tg_slice id, uint8_t raw[16])
{
    if (id.len != TG_SESSION_ID_LEN)
        return -1;
    uint32_t acc = 0;
    int bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < id.len; i++) {
        int v = b64url_val(id.ptr[i]);
        if (v < 0)
            return -1;
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (o == 16)
                return -1;
            raw[o++] = (uint8_t)(acc >> bits);
        }
    }
    return o == 16 ? 0 : -1;
}

struct tg_session *tg_session_find(struct tg_session_table *t, struct tg_slice id)
{
    uint8_t raw[16];
    if (decode_id(id, raw) != 0)
        return NULL;
    for (struct tg_session *s = t->buckets[bucket_of(t, raw)]; s; s = s->hnext)
        if (memcmp(s->id, raw, 16) == 0 && memcmp(s->id_str, id.ptr, id.len) == 0)
            return s->live ? s : NULL;
    return NULL;
}

void tg_session_remove(struct tg_session_table *t, struct tg_session *s)
{
    if (!s->live)
        return;
    size_t k = bucket_of(t, s->id);
    for (struct tg_session **pp = &t->buckets[k]; *pp; pp = &(*pp)->hnext)
        if (*pp == s) {
            *pp = s->hnext;
            break;
        }
    tg_list_unlink(&s->link);
    t->count--;
    s->live = 0;
    struct tg_grant_count **pp = grant_slot(t, s->grant);
    if (*pp != NULL && --(*pp)->n == 0) {
        struct tg_grant_count *gc = *pp;
        *pp = gc->next;
        free(gc->grant);
        free(gc);
    }
    if (s->release_link != NULL && s->uplink != NULL)
        s->release_link(s);
    tg_session_unref(s);
}

struct tg_session *tg_session_ref(struct tg_session *s)
{
    s->refcnt++;
    return s;
}

void tg_session_unref(struct tg_session *s)
{
    if (--s->refcnt > 0)
        return;
    free(s->grant);
    free(s->up_session);
    free(s->listen_uris);
    if (s->up_modern)
        free(s->u.client_caps);
    tg_buf_dispose(&s->server_reqs);
    free(s);
}

void tg_session_sweep(struct tg_session_table *t, tg_session_visit_cb cb, void *arg)
{
    struct tg_list *l = t->all.next;
    while (l != &t->all) {
        struct tg_list *next = l->next;
        struct tg_session *s = tg_container_of(l, struct tg_session, link);
        if (cb(s, arg))
            tg_session_remove(t, s);
        l = next;
    }
}
