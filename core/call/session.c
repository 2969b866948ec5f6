#include "core/call/session.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/sha256.h"

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
    tg_hmac_sha256(secret, 32, in, sizeof(in), out);
    memcpy(mac, out, 8);
}

void tg_session_table_seal(struct tg_session_table *t, const uint8_t secret[32])
{
    t->sealed = 1;
    memcpy(t->secret, secret, 32);
}

/* A zeroed session with room for its grant's name. */
static struct tg_session *session_new(const char *grant)
{
    size_t n = strlen(grant) + 1;
    struct tg_session *s = tg_xcalloc(1, sizeof(*s) + n);
    memcpy(s->grant_name, grant, n);
    s->grant = s->grant_name;
    s->proto = "";
    return s;
}

static void insert(struct tg_session_table *t, struct tg_session *s, const char *grant, int upstream)
{
    tg_b64url_encode(s->id, sizeof(s->id), s->id_str);
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
    struct tg_session *s = session_new(grant);
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
    struct tg_session *s = session_new(grant);
    memcpy(s->id, raw, 16);
    insert(t, s, grant, upstream);
    if (memcmp(s->id_str, id.ptr, id.len) != 0) { /* not the canonical spelling of these bytes */
        tg_session_remove(t, s);
        return NULL;
    }
    return s;
}

/* base64url's value of each byte plus one, 0 for a byte that is not base64url: a table, as this
 * runs for every request that names its session (a chain of range tests cost a branch per test
 * per character). */
static const int8_t b64url_val[256] = {
    /* clang-format off */
    ['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6, ['G'] = 7, ['H'] = 8, ['I'] = 9,
    ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15, ['P'] = 16, ['Q'] = 17,
    ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22, ['W'] = 23, ['X'] = 24, ['Y'] = 25,
    ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29, ['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33,
    ['h'] = 34, ['i'] = 35, ['j'] = 36, ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41,
    ['p'] = 42, ['q'] = 43, ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49,
    ['x'] = 50, ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56, ['4'] = 57,
    ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['-'] = 63, ['_'] = 64,
    /* clang-format on */
};

static int decode_id(struct tg_slice id, uint8_t raw[16])
{
    if (id.len != TG_SESSION_ID_LEN)
        return -1;
    /* 22 characters: five groups of four make 15 bytes, the last two the 16th (their 4 bits
     * left over are not looked at: tg_session_find() compares the spelling too) */
    const unsigned char *c = (const unsigned char *)id.ptr;
    int bad = 0;
    for (int g = 0; g < 5; g++, c += 4) {
        int a = b64url_val[c[0]] - 1, b = b64url_val[c[1]] - 1, d = b64url_val[c[2]] - 1, e = b64url_val[c[3]] - 1;
        bad |= a | b | d | e;
        uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)d << 6 | (uint32_t)e;
        raw[3 * g] = (uint8_t)(v >> 16);
        raw[3 * g + 1] = (uint8_t)(v >> 8);
        raw[3 * g + 2] = (uint8_t)v;
    }
    int a = b64url_val[c[0]] - 1, b = b64url_val[c[1]] - 1;
    bad |= a | b;
    raw[15] = (uint8_t)((uint32_t)a << 2 | (uint32_t)b >> 4);
    return bad < 0 ? -1 : 0;
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

void tg_session_set_subject(struct tg_session *s, const char *subject)
{
    /* A grant's own principal is named after the grant: no copy of its own (a 32-byte chunk) */
    s->subject = strcmp(subject, s->grant_name) == 0 ? s->grant_name : tg_xstrdup(subject);
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
    if (s->subject != s->grant_name)
        free(s->subject);
    free(s->issuer);
    free(s->claims);
    free(s->up_session);
    if (s->up_auth != NULL)
        memset(s->up_auth, 0, strlen(s->up_auth)); /* a credential */
    free(s->up_auth);
    free(s->up_who);
    if (s->up_token != NULL)
        memset(s->up_token, 0, strlen(s->up_token)); /* the client's JWT */
    free(s->up_token);
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

/* Busy: a call of its client is under way (only the GET stream call may be on its calls list). A
 * server request waiting for the client's answer outside any call does not count: an abandoned
 * client never answers it. */
static int session_busy(const struct tg_session *s)
{
    if (s->inflight > 0 || s->init_pending)
        return 1;
    size_t n = 0;
    for (const struct tg_list *l = s->calls.next; l != &s->calls; l = l->next)
        n++;
    return n > (s->get_stream != NULL ? 1u : 0u);
}

struct tg_session *tg_session_pick_evictable(struct tg_session_table *t, int upstream, const char *grant,
                                             uint64_t now_ms, uint64_t idle_ms, int (*connected)(const struct tg_session *),
                                             int *same)
{
    /* Three tiers, the longest idle first in each: the grant's sessions whose client is gone, its
     * sessions idle idle_ms with a stream still open, other grants' sessions idle idle_ms. */
    struct tg_session *best[3] = {NULL, NULL, NULL};
    for (struct tg_list *l = t->all.next; l != &t->all; l = l->next) {
        struct tg_session *s = tg_container_of(l, struct tg_session, link);
        if (!s->live || s->upstream != upstream || s->uplink == NULL || session_busy(s))
            continue;
        int mine = strcmp(s->grant, grant) == 0;
        int open = connected(s);
        int idle_long = now_ms >= s->last_active_ms && now_ms - s->last_active_ms >= idle_ms;
        int tier = mine && !open ? 0 : mine && idle_long ? 1 : !mine && idle_long ? 2 : -1;
        if (tier >= 0 && (best[tier] == NULL || s->last_active_ms < best[tier]->last_active_ms))
            best[tier] = s;
    }
    for (int i = 0; i < 3; i++)
        if (best[i] != NULL) {
            *same = i < 2;
            return best[i];
        }
    *same = 0;
    return NULL;
}
