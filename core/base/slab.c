#include "core/base/slab.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>

/* Classes by usable size: 24, 40, 56, ... 1288 bytes (glibc chunks are 16-byte multiples with
 * 8 bytes of header on 64-bit: a request of u usable bytes for u = 16k + 8 takes a chunk exactly).
 * The first TG_SLAB_SMALL classes (to 264 bytes: tree nodes, keys, short strings) keep
 * TG_SLAB_KEEP blocks each; the larger ones (a call's state, its buffers' first room) keep
 * TG_SLAB_KEEP_LARGE. */
#define CLASSES TG_SLAB_CLASSES
#define MIN_USABLE 24
#define CLASS_USABLE(i) ((size_t)(MIN_USABLE + 16 * (i)))
#define CLASS_KEEP(i) ((i) < TG_SLAB_SMALL ? TG_SLAB_KEEP : TG_SLAB_KEEP_LARGE)

struct freeblock {
    struct freeblock *next;
};

static int enabled;
static _Thread_local struct freeblock *lists[CLASSES];
static _Thread_local unsigned counts[CLASSES];

void tg_slab_enable(int on) { __atomic_store_n(&enabled, on, __ATOMIC_RELAXED); }

int tg_slab_default(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return 0;
#else
    return 1;
#endif
#else
    return 1;
#endif
}

static int class_of_request(size_t n)
{
    if (n <= MIN_USABLE)
        return 0;
    size_t i = (n - MIN_USABLE + 15) / 16;
    return i < CLASSES ? (int)i : -1;
}

void *tg_slab_alloc(size_t n)
{
    int i = class_of_request(n);
    if (i < 0 || !__atomic_load_n(&enabled, __ATOMIC_RELAXED))
        return malloc(n ? n : 1);
    struct freeblock *b = lists[i];
    if (b != NULL) {
        lists[i] = b->next;
        counts[i]--;
        return b;
    }
    return malloc(CLASS_USABLE(i));
}

void tg_slab_free(void *p)
{
    if (p == NULL)
        return;
    if (!__atomic_load_n(&enabled, __ATOMIC_RELAXED)) {
        free(p);
        return;
    }
    size_t u = malloc_usable_size(p);
    /* A block whose usable size is a class's (any malloc'd block may come here) is kept for
     * requests up to that size; any other goes back to malloc. */
    if (u < MIN_USABLE || (u - MIN_USABLE) % 16 != 0 || (u - MIN_USABLE) / 16 >= CLASSES) {
        free(p);
        return;
    }
    size_t i = (u - MIN_USABLE) / 16;
    if (counts[i] >= CLASS_KEEP(i)) {
        free(p);
        return;
    }
    struct freeblock *b = p;
    b->next = lists[i];
    lists[i] = b;
    counts[i]++;
}

static _Thread_local struct tg_recycler *recyclers;

void *tg_recycle_alloc(struct tg_recycler *r)
{
    void *p = r->head;
    if (p != NULL) {
        r->head = ((struct freeblock *)p)->next;
        r->count--;
        return p;
    }
    if (!r->registered) {
        r->registered = 1;
        r->next = recyclers;
        recyclers = r;
    }
    return malloc(r->size);
}

void tg_recycle_free(struct tg_recycler *r, void *p)
{
    if (p == NULL)
        return;
    if (r->count >= r->keep || !__atomic_load_n(&enabled, __ATOMIC_RELAXED)) {
        free(p);
        return;
    }
    ((struct freeblock *)p)->next = r->head;
    r->head = p;
    r->count++;
}

void tg_slab_drain(void)
{
    for (struct tg_recycler *r = recyclers; r != NULL; r = r->next) {
        while (r->head != NULL) {
            struct freeblock *b = r->head;
            r->head = b->next;
            free(b);
        }
        r->count = 0;
    }
    for (int i = 0; i < CLASSES; i++) {
        while (lists[i] != NULL) {
            struct freeblock *b = lists[i];
            lists[i] = b->next;
            free(b);
        }
        counts[i] = 0;
    }
}

size_t tg_slab_cached(void)
{
    size_t n = 0;
    for (int i = 0; i < CLASSES; i++)
        n += counts[i];
    for (struct tg_recycler *r = recyclers; r != NULL; r = r->next)
        n += r->count;
    return n;
}
