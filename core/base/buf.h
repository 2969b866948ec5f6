/* tg_buf: the one growable byte buffer; tg_slice: a view into bytes owned elsewhere.
 *
 * Wire data is never assumed to end in NUL. A tg_buf owns its storage and is
 * released with tg_buf_dispose(). Growth on behalf of a peer goes through
 * tg_buf_try_reserve(), which refuses to pass a caller-given ceiling so that a
 * peer can never make a buffer grow without bound. */
#ifndef TG_BUF_H
#define TG_BUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "core/base/slab.h"

#define TG_WUR __attribute__((warn_unused_result))

/* Error codes: 0 is success; negatives below -4000 are ours, libuv's errno values pass through. */
enum {
    TG_EAGAIN = -4001,   /* incomplete input: call again with more bytes */
    TG_ENOMEM = -4002,   /* allocation failed or a configured ceiling was hit */
    TG_EINVAL = -4003,   /* malformed input */
    TG_ELIMIT = -4004,   /* a configured limit was exceeded */
    TG_ETIMEDOUT = -4005,
    TG_ECLOSED = -4006,
    TG_EBACKOFF = -4007, /* an upstream that failed repeatedly is not tried until its backoff ends */
};

/* A view: a value type that owns nothing; the bytes belong to whoever the slice came from. */
struct tg_slice {
    const char *ptr;
    size_t len;
};

#define TG_SLICE(lit) ((struct tg_slice){(lit), sizeof(lit) - 1})
#define TG_SLICE_NULL ((struct tg_slice){NULL, 0})

/* Value type, embedded in its owner or on the stack. It owns the storage it points to, freed by
 * tg_buf_dispose() (or handed to the caller by tg_buf_release()); a struct copy takes it over. */
struct tg_buf {
    char *base;
    size_t len;
    size_t cap;
};

/* Inline: every relayed message makes (and mostly leaves empty) a buffer or two. */
static inline void tg_buf_init(struct tg_buf *b)
{
    b->base = NULL;
    b->len = b->cap = 0;
}
static inline void tg_buf_dispose(struct tg_buf *b)
{
    if (b->base != NULL)
        tg_slab_free(b->base);
    tg_buf_init(b);
}
/* Make room for at least `extra` more bytes without passing `ceiling` total (0 = no ceiling).
 * Inline when the room is there already (most calls on the relay paths); _grow makes it. */
TG_WUR int tg_buf_try_reserve_grow(struct tg_buf *b, size_t extra, size_t ceiling);
static inline TG_WUR int tg_buf_try_reserve(struct tg_buf *b, size_t extra, size_t ceiling)
{
    if (extra <= b->cap - b->len && (ceiling == 0 || b->len + extra <= ceiling))
        return 0;
    return tg_buf_try_reserve_grow(b, extra, ceiling);
}
/* Append; aborts on OOM (for sizes we chose, not the peer). Inline when the bytes fit: the
 * relay paths append a handful of short pieces per message, and a literal's memcpy becomes a
 * move. The _grow halves make the room and append. */
void tg_buf_append_grow(struct tg_buf *b, const void *p, size_t n);
TG_WUR int tg_buf_try_append_grow(struct tg_buf *b, const void *p, size_t n, size_t ceiling);
static inline void tg_buf_append(struct tg_buf *b, const void *p, size_t n)
{
    if (n <= b->cap - b->len && n != 0) {
        memcpy(b->base + b->len, p, n);
        b->len += n;
    } else if (n != 0) {
        tg_buf_append_grow(b, p, n);
    }
}
static inline TG_WUR int tg_buf_try_append(struct tg_buf *b, const void *p, size_t n, size_t ceiling)
{
    if (n <= b->cap - b->len && n != 0 && (ceiling == 0 || b->len + n <= ceiling)) {
        memcpy(b->base + b->len, p, n);
        b->len += n;
        return 0;
    }
    return tg_buf_try_append_grow(b, p, n, ceiling);
}
/* Inline: a literal's length is known where it is appended. */
static inline void tg_buf_appends(struct tg_buf *b, const char *s) { tg_buf_append(b, s, strlen(s)); }
void tg_buf_appendf(struct tg_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tg_buf_append_u64(struct tg_buf *b, uint64_t v);
void tg_buf_append_hex(struct tg_buf *b, uint64_t v);
/* Drop the first n bytes. */
void tg_buf_consume(struct tg_buf *b, size_t n);
/* Hand the storage to the caller (who frees it with free()) and reset the buffer. */
char *tg_buf_release(struct tg_buf *b);

static inline struct tg_slice tg_slice_of(const char *p, size_t n) { return (struct tg_slice){p, n}; }
static inline struct tg_slice tg_slice_cstr(const char *s) { return (struct tg_slice){s, s ? strlen(s) : 0}; }
/* Inline: with a literal on one side, the compiler compares its bytes as words. */
static inline int tg_slice_eq(struct tg_slice a, struct tg_slice b)
{
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}
/* Inline: the literal's length is known where it is called, and most candidates differ in it. */
static inline int tg_slice_eq_nocase(struct tg_slice a, const char *lit)
{
    size_t n = strlen(lit);
    return a.len == n && strncasecmp(a.ptr, lit, n) == 0;
}
int tg_slice_starts_with(struct tg_slice a, const char *lit);
/* A header name as llhttp hands it (HTTP token bytes only) against lower[0..n), a lowercase name
 * of letters, digits and '-': inline, eight bytes a step. Each byte ORed with 0x20 equals the
 * name's only when it is the same letter in either case or the same byte (the one other byte
 * that ORs to '-' or to a digit is a control byte, never in a token), so this is exact for
 * such input, where strncasecmp was a call per header looked up. */
static inline int tg_token_eq_lower(const char *a, const char *lower, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x, y;
        memcpy(&x, a + i, 8);
        memcpy(&y, lower + i, 8);
        if ((x | 0x2020202020202020ULL) != y)
            return 0;
    }
    for (; i < n; i++)
        if (((unsigned char)a[i] | 0x20u) != (unsigned char)lower[i])
            return 0;
    return 1;
}
/* Case-insensitive search of a token in a comma-separated header value (media types ignore parameters). */
int tg_slice_has_token(struct tg_slice header, const char *token);
/* The tokens of such a value one by one, parameters left out: 1 with *tok set and *at moved
 * past it, 0 at the end. Start with *at = 0. */
int tg_slice_next_token(struct tg_slice header, size_t *at, struct tg_slice *tok);
/* Returns a malloc'd NUL-terminated copy. */
char *tg_slice_dup(struct tg_slice s);

/* Allocation helpers that abort on OOM (fixed, small sizes only). */
void *tg_xmalloc(size_t n);
void *tg_xcalloc(size_t n, size_t sz);
/* Frees what any allocator here (or malloc) gave: a small block goes back to the free lists. */
void tg_xfree(void *p);
void *tg_xrealloc(void *p, size_t n);
char *tg_xstrdup(const char *s);

/* Hex and base64url helpers. */
void tg_hex_encode(const uint8_t *in, size_t n, char *out /* 2n+1 */);
int tg_hex_decode(const char *in, size_t n, uint8_t *out /* n/2 */);
size_t tg_b64url_encode(const uint8_t *in, size_t n, char *out /* 4n/3+4 */);
/* Decode unpadded base64url into out (room for n * 3 / 4 bytes), the one canonical spelling only:
 * no '=', nothing outside the URL-safe alphabet, no 4k+1 length, no set bits after the last whole
 * byte. 0 with *outlen set, or TG_EINVAL. */
int tg_b64url_decode(const char *in, size_t n, uint8_t *out, size_t *outlen);
/* Fill with cryptographically random bytes (getrandom). */
int tg_random(void *out, size_t n);
/* 1 if n bytes at p may go into an HTTP header value the gateway writes: printable ASCII and
 * spaces only (no CR, LF, NUL or other control bytes, nothing over 0x7e), and not empty. A value
 * a peer chose goes through this before it reaches a header. */
int tg_header_value_safe(const char *p, size_t n);

#define tg_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

/* Intrusive doubly linked list (h2o linklist / libuv queue). A node is embedded in the object it
 * links and a head in the list's owner: neither is allocated or freed on its own. */
struct tg_list {
    struct tg_list *prev, *next;
};
static inline void tg_list_init(struct tg_list *l) { l->prev = l->next = l; }
static inline int tg_list_empty(const struct tg_list *l) { return l->next == l; }
static inline int tg_list_linked(const struct tg_list *n) { return n->next != NULL && n->next != n; }
static inline void tg_list_insert_tail(struct tg_list *head, struct tg_list *n)
{
    n->prev = head->prev;
    n->next = head;
    head->prev->next = n;
    head->prev = n;
}
static inline void tg_list_unlink(struct tg_list *n)
{
    if (n->next == NULL)
        return;
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
/* Move every node of from to the end of head; from is left empty. */
static inline void tg_list_splice_tail(struct tg_list *head, struct tg_list *from)
{
    if (from->next == from)
        return;
    from->next->prev = head->prev;
    head->prev->next = from->next;
    from->prev->next = head;
    head->prev = from->prev;
    from->prev = from->next = from;
}

/* Copy the C string src into dst[cap], cut to fit, always NUL-terminated (cap > 0). */
static inline void tg_strlcpy(char *dst, const char *src, size_t cap)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

#endif
