#include "policy/jwt_cache.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/sha256.h"

/* One slot. Value type: an element of the cache's table. */
struct slot {
    uint8_t used;
    uint8_t key[32]; /* the caller's key of the token and resource */
    struct tg_jwt_cached v;
};

/* Owner: its tg_jwt_conf (cache); freed by tg_jwt_cache_free() from tg__conf_jwt_free. */
struct tg_jwt_cache {
    size_t nslots, entries;
    struct slot *slots; /* NULL until the first put */
    uint64_t hits, misses;
};

struct tg_jwt_cache *tg_jwt_cache_new(size_t slots)
{
    struct tg_jwt_cache *c = tg_xcalloc(1, sizeof(*c));
    c->nslots = slots;
    return c;
}

void tg_jwt_cache_free(struct tg_jwt_cache *c)
{
    if (c == NULL)
        return;
    free(c->slots);
    c->slots = NULL;
    free(c);
}

/* The key is a keyed hash of attacker-chosen bytes; even a token aimed at a slot only evicts that
 * slot's entry, which costs its owner one verification: no worse than not caching. */
static struct slot *slot_of(struct tg_jwt_cache *c, const uint8_t key[32])
{
    uint64_t w[4];
    memcpy(w, key, sizeof(w));
    return &c->slots[(w[0] ^ w[1] ^ w[2] ^ w[3]) % c->nslots]; /* every part: one token, two routes, two slots */
}

int tg_jwt_cache_get(struct tg_jwt_cache *c, const uint8_t key[32], int64_t now_s, int skew_s, uint64_t keys_gen,
                     struct tg_jwt_cached *out)
{
    if (c == NULL || c->slots == NULL) {
        if (c != NULL)
            c->misses++;
        return 0;
    }
    struct slot *s = slot_of(c, key);
    if (!s->used || !tg_ct_equal(s->key, key, 32)) {
        c->misses++;
        return 0;
    }
    if (now_s >= s->v.claims.exp + (skew_s > 0 ? skew_s : 0) || s->v.keys_gen != keys_gen) {
        s->used = 0; /* expired, or its key set replaced: verified again (and refused as expired) */
        c->entries--;
        c->misses++;
        return 0;
    }
    *out = s->v;
    c->hits++;
    return 1;
}

void tg_jwt_cache_put(struct tg_jwt_cache *c, const uint8_t key[32], const struct tg_jwt_cached *v)
{
    if (c == NULL || c->nslots == 0)
        return;
    if (c->slots == NULL)
        c->slots = tg_xcalloc(c->nslots, sizeof(*c->slots));
    struct slot *s = slot_of(c, key);
    if (!s->used)
        c->entries++;
    s->used = 1;
    memcpy(s->key, key, 32);
    s->v = *v;
}

void tg_jwt_cache_stats(const struct tg_jwt_cache *c, struct tg_jwt_cache_stats *out)
{
    memset(out, 0, sizeof(*out));
    if (c == NULL)
        return;
    out->entries = c->entries;
    out->slots = c->nslots;
    out->bytes = sizeof(*c) + (c->slots ? c->nslots * sizeof(*c->slots) : 0);
    out->hits = c->hits;
    out->misses = c->misses;
}
