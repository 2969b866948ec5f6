/* Free lists for the small blocks a message's JSON tree is made of, in front of malloc.
 *
 * A decoded request is a few dozen small allocations (cJSON nodes, keys, strings, numbers'
 * text) freed together a moment later, once per message: glibc's per-thread cache holds only
 * seven blocks of a size, and the rest of each burst goes through its slower paths. These lists
 * keep up to TG_SLAB_KEEP blocks of each size class per thread (a hostile burst leaves at most
 * that much behind).
 *
 * The blocks are ordinary malloc blocks of a class's usable size, so either side may free what
 * the other allocated: tg_slab_free() takes any malloc'd block (its class is read back with
 * malloc_usable_size), and free() takes a tg_slab_alloc() block. This is what lets cJSON's hooks
 * point here while code that frees cJSON_Print output with free() stays right, and what lets
 * tg_xmalloc(), tg_xcalloc() and a tg_buf's first room (core/base/buf.c) come from here too: a call's
 * state, its strings and buffers, freed with tg_xfree() or tg_buf_dispose() on the hot paths and
 * with free() elsewhere. Each thread has its own lists (policies load in a worker thread; a
 * buffer handed to another thread to free goes to malloc, as the log writer's does). Off until tg_slab_enable(1) (main() turns it
 * on unless built with sanitizers, whose use-after-free checks need every free to be real). */
#ifndef TG_SLAB_H
#define TG_SLAB_H

#include <stddef.h>

/* Per class and thread: 16 classes of <= 264 B keep 1024 blocks each (4.3 MiB at most), 64 of
 * 280 B to 1288 B keep 64 each (3.2 MiB at most): what a hostile burst can leave behind. */
#define TG_SLAB_CLASSES 80
#define TG_SLAB_SMALL 16
#define TG_SLAB_KEEP 1024
#define TG_SLAB_KEEP_LARGE 64
#define TG_SLAB_MAX 1288 /* the largest request served from the lists */

void tg_slab_enable(int on);
/* 1, or 0 in a build with AddressSanitizer. */
int tg_slab_default(void);
void *tg_slab_alloc(size_t n);
void tg_slab_free(void *p);
/* Return this thread's cached blocks to malloc (at exit, and in tests). */
void tg_slab_drain(void);
/* Blocks this thread holds (for tests and metrics). */
size_t tg_slab_cached(void);

/* A free list for one kind of object too large for the classes (a call's policy decision is
 * 4 KiB), kept by its owner: up to `keep` blocks of exactly `size` bytes, for the loop thread
 * only. Like the classes, its blocks are malloc blocks (free() may take one), it keeps nothing
 * while the slab is off (the sanitizers see every free), and tg_slab_drain() on the thread that
 * used it gives its blocks back. */
struct tg_recycler {
    size_t size;
    unsigned keep, count;
    void *head;
    struct tg_recycler *next; /* registered on first use, for tg_slab_drain */
    int registered;
};
#define TG_RECYCLER_INIT(sz, n) {(sz), (n), 0, NULL, NULL, 0}
void *tg_recycle_alloc(struct tg_recycler *r);
void tg_recycle_free(struct tg_recycler *r, void *p);

#endif
