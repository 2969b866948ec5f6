/* The fast path of tg_json_parse() without a tree: what every relayed upstream message goes
 * through. It only ever accepts: on anything it is not sure of (an escape, a byte over 0x7f, a
 * control byte, whitespace other than spaces, deep nesting, many keys, any error at all) it
 * says "not mine" and the strict parser in core/base/json.c decides, with its error message. So
 * what it accepts must be exactly valid JSON, and the four slices it fills must be the ones the
 * strict parser fills; test/unit/core/base/test_json.c and test/fuzz/fuzz_json.c hold it to both.
 *
 * Why it is faster: with no backslash in the input a string ends at the next quote, and with
 * no byte under 0x20 or over 0x7f there is nothing to validate inside it, so one pass over the
 * whole message (eight bytes at a time) replaces the per-string checks, and the grammar is
 * walked in one loop with an explicit stack instead of a call per value.
 *
 * tg_json_plain() and tg_json_prefix_id(), the other scans that build nothing, are in
 * core/base/json_plain.c. */
#include "core/base/json.h"

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define FAST_DEPTH 32 /* nesting beyond this: the strict parser */
#define FAST_KEYS 64  /* keys of the objects open at once, for the duplicate check */
#define FAST_OBJ_KEYS 16

/* Past the closing quote of the string opening at p (no backslash in the input), or NULL.
 * Inline and sixteen bytes at a time: most strings here are keys and short values, for which a
 * call to memchr() costs more than the search. */
static inline const unsigned char *string_end(const unsigned char *p, const unsigned char *end)
{
    p++;
#if defined(__SSE2__)
    const __m128i q = _mm_set1_epi8('"');
    for (; end - p >= 16; p += 16) {
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)p), q));
        if (m != 0)
            return p + __builtin_ctz(m) + 1;
    }
    for (; p < end; p++)
        if (*p == '"')
            return p + 1;
    return NULL;
#else
    const unsigned char *q = memchr(p, '"', (size_t)(end - p));
    return q != NULL ? q + 1 : NULL;
#endif
}

static int digit(unsigned c) { return c - '0' < 10; }

/* Past a JSON number at p (RFC 8259 grammar, as parse_number() takes it), or NULL. */
static inline const unsigned char *number_end(const unsigned char *p, const unsigned char *end)
{
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return NULL;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (p < end && digit(*p))
            p++;
    else
        return NULL;
    if (p < end && *p == '.') {
        if (++p >= end || !digit(*p))
            return NULL;
        while (p < end && digit(*p))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !digit(*p))
            return NULL;
        while (p < end && digit(*p))
            p++;
    }
    return p;
}

struct key {
    const unsigned char *p;
    size_t n;
};

/* A member of the root object, as parse_object() at depth 1 records it. */
static void record(struct tg_json_doc *doc, const unsigned char *k, size_t kn, const unsigned char *v,
                   const unsigned char *e)
{
    struct tg_slice s = tg_slice_of((const char *)v, (size_t)(e - v));
    if (kn == 2 && memcmp(k, "id", 2) == 0)
        doc->id_raw = s;
    else if (kn == 6 && memcmp(k, "method", 6) == 0)
        doc->method_raw = s;
    else if (kn == 5 && memcmp(k, "error", 5) == 0 && *v == '{')
        doc->error_raw = s;
    else if (kn == 6 && memcmp(k, "result", 6) == 0 && *v == '{')
        doc->result_raw = s;
}

/* The walker over the input itself, every read bounded: for inputs too long to copy, and for
 * targets without SSE2. */
static int scan_walk(const char *in, size_t n, int max_depth, struct tg_json_doc *doc)
{
    const unsigned char *p = (const unsigned char *)in, *end = p + n;
    if (!tg_json_plain(in, n))
        return -1;
    /* One entry per open container: 1 = object, 2 = array; the first key of each open object. */
    unsigned char kind[FAST_DEPTH + 1];
    unsigned first_key[FAST_DEPTH + 1];
    /* a 64-bit filter of each open object's keys: the pairwise duplicate check runs only when a
     * key's bit is already set (a duplicate, or two keys that share length and first byte) */
    uint64_t seen[FAST_DEPTH + 1];
    struct key keys[FAST_KEYS];
    unsigned nkeys = 0;
    int depth = 0;
    /* the root object's member under way: its key, and where its value began */
    const unsigned char *mk = NULL, *mv = NULL;
    size_t mkn = 0;
    int limit = max_depth < FAST_DEPTH ? max_depth : FAST_DEPTH;
    for (;;) {
        /* A value. */
        while (p < end && *p == ' ')
            p++;
        if (p >= end)
            return -1;
        if (depth == 1 && kind[1] == 1)
            mv = p;
        unsigned c = *p;
        if (c == '{' || c == '[') {
            if (depth + 1 > limit)
                return -1;
            depth++;
            kind[depth] = c == '{' ? 1 : 2;
            first_key[depth] = nkeys;
            seen[depth] = 0;
            p++;
            while (p < end && *p == ' ')
                p++;
            if (p < end && *p == (c == '{' ? '}' : ']')) {
                p++;
                depth--;
                goto after_value;
            }
            if (c == '[')
                continue; /* the first element */
            goto key;
        }
        if (c == '"')
            p = string_end(p, end);
        else if (c == 't')
            p = end - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
        else if (c == 'f')
            p = end - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
        else if (c == 'n')
            p = end - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
        else if (c == '-' || digit(c))
            p = number_end(p, end);
        else
            return -1;
        if (p == NULL)
            return -1;
    after_value:
        /* p is past a value at this depth: a member's value of the root object ends here */
        if (depth == 1 && kind[1] == 1)
            record(doc, mk, mkn, mv, p);
        for (;;) {
            while (p < end && *p == ' ')
                p++;
            if (depth == 0)
                return p == end ? 0 : -1;
            if (p >= end)
                return -1;
            if (*p == ',') {
                p++;
                break;
            }
            if (*p != (kind[depth] == 1 ? '}' : ']'))
                return -1;
            p++;
            if (kind[depth] == 1)
                nkeys = first_key[depth]; /* its keys are done with */
            depth--;
            if (depth == 1 && kind[1] == 1)
                record(doc, mk, mkn, mv, p); /* the container was a root member's value */
        }
        if (kind[depth] == 2)
            continue; /* the next element */
    key:
        while (p < end && *p == ' ')
            p++;
        if (p >= end || *p != '"')
            return -1;
        {
            const unsigned char *k = p + 1, *ke = string_end(p, end);
            if (ke == NULL)
                return -1;
            size_t kn = (size_t)(ke - 1 - k);
            unsigned from = first_key[depth];
            if (nkeys - from >= FAST_OBJ_KEYS || nkeys >= FAST_KEYS)
                return -1;
            /* k[0] is the closing quote of an empty key */
            uint64_t bit = (uint64_t)1 << ((k[0] + kn * 5) & 63);
            if (seen[depth] & bit)
                for (unsigned i = from; i < nkeys; i++)
                    if (keys[i].n == kn && memcmp(keys[i].p, k, kn) == 0)
                        return -1; /* a duplicate: the strict parser says so */
            seen[depth] |= bit;
            keys[nkeys++] = (struct key){k, kn};
            p = ke;
            while (p < end && *p == ' ')
                p++;
            if (p >= end || *p != ':')
                return -1;
            p++;
            if (depth == 1) {
                mk = k;
                mkn = kn;
            }
        }
    }
}

#if defined(__SSE2__)
/* ---- the walker over a padded copy ---------------------------------------------------------
 *
 * Most of scan_walk()'s cost is in its bounds: a test against the end before every byte it
 * reads. A message short enough is copied first into a buffer with sixteen zero bytes after
 * it, sixteen bytes at a time with tg_json_plain()'s check on the way (so that pass is no
 * extra). A zero byte cannot be in plain input, and no grammar rule takes one, so the walk
 * reads with no bounds: it stops at the zero wherever the input ends early, and a string's
 * search (for a quote or a zero) never loads past the padding. The slices it keeps are moved
 * back onto the input.
 *
 * ---- resuming where the last message left off
 *
 * The messages of one stream mostly begin alike: a server's progress notifications differ from
 * one another only from their "progress" value on, its log messages from their "data". The
 * walk reads left to right, so its state at the start of a value depends only on the bytes
 * before it, with two exceptions: a member of the root object, whose value's first byte picks
 * the member's slot in tg_json_doc (chosen again on resume), and an array's first element,
 * which is one only if that byte is not the ']' of an empty array (so it must be shared too).
 * So the walker keeps its state at one value start of the last message (the checkpoint), the
 * copy it walked, and its stacks. The next message is copied over that copy, the copy noting
 * where the two first differ; when the checkpoint lies at or before that byte, the walk
 * resumes there instead of at the first byte, with the slices of the root members that ended
 * before it.
 *
 * The checkpoint taken is the last value start at or before where this message differed from
 * the one before it, where the next one likely differs too. The stacks are not copied for it:
 * a write below its depth or its count of keys (a container closed and another opened in its
 * place, a key stored over one it holds) drops it. The keys' pointers point into the copy,
 * whose bytes before the checkpoint are the next message's too. One memo per thread. */

#define FAST_COPY 4096 /* longer inputs: scan_walk() on the input itself */

/* A kept member's value, as offsets into the input (end 0: not seen; a value never ends at 0). */
struct span {
    size_t off, end;
};

struct checkpoint {
    const unsigned char *p; /* the value's first byte in memo.buf; NULL: no checkpoint */
    const unsigned char *mv;
    uint64_t seen;
    unsigned obj, from, nkeys;
    int depth;
    struct span *slot; /* the pending root member's in memo.doc, or NULL */
};

static _Thread_local struct scan_memo {
    unsigned char buf[FAST_COPY + 32]; /* the last message's padded copy */
    size_t n;                          /* its length; 0: nothing to resume from */
    int limit;                         /* the depth limit its walk had */
    struct checkpoint cp;
    struct span doc[4]; /* the four members tg_json_doc keeps (id, method, error, result), as its walk saw them */
    /* the walk's stacks, kept between messages for the checkpoint */
    unsigned char kind_at[FAST_DEPTH + 1];
    unsigned from_at[FAST_DEPTH + 1];
    uint64_t seen_at[FAST_DEPTH + 1];
    const unsigned char *keys[FAST_KEYS]; /* the open objects' keys (their lengths: key_len) */
    int whole; /* the copy was accepted by the compact walk, and doc holds all of its members */
    const unsigned char *swap_at; /* where cp.p was taken last (in the compact walk), kept when
                                   * cp is dropped: scan_swapped() needs no stacks */
    size_t swap_end;              /* where the value at swap_at ends, once known; 0: not yet */
    size_t resumed, skipped; /* walks resumed, bytes not walked again (tg__json_scan_stats) */
    size_t swapped;          /* messages taken as the last one with its scalar at cp swapped */
} memo;

enum { DOC_ID, DOC_METHOD, DOC_ERROR, DOC_RESULT };

/* Sixteen bytes copied to dst, and checked on the way (see copy_plain). */
static inline __attribute__((always_inline)) void copy16(unsigned char *dst, __m128i x, __m128i *bad)
{
    const __m128i bs = _mm_set1_epi8('\\'), sp = _mm_set1_epi8(0x20);
    _mm_storeu_si128((__m128i *)dst, x);
    *bad = _mm_or_si128(*bad, _mm_or_si128(_mm_cmplt_epi8(x, sp), _mm_cmpeq_epi8(x, bs)));
}

/* Copy in[0..n) over the message in dst (dst holds n + 32; its first `had` bytes are plain), with
 * sixteen zero bytes after it; 1 if plain, with *same set to a length of prefix the two share
 * (at most had). The blocks the same as those there (within had) are neither copied nor checked
 * again: they are plain already. */
static int copy_plain(unsigned char *dst, const unsigned char *in, size_t n, size_t had, size_t *same)
{
    const __m128i bs = _mm_set1_epi8('\\'), sp = _mm_set1_epi8(0x20), zero = _mm_setzero_si128();
    if (n < 16) {
        _mm_storeu_si128((__m128i *)dst, zero);
        _mm_storeu_si128((__m128i *)(dst + 16), zero);
        memcpy(dst, in, n);
        __m128i x = _mm_loadu_si128((const __m128i *)dst);
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmplt_epi8(x, sp), _mm_cmpeq_epi8(x, bs)));
        *same = 0;
        return (m & ((1u << n) - 1)) == 0;
    }
    size_t i = 0, upto = had < n ? had : n;
    unsigned d = 0;
    /* thirty-two bytes a step while they are the same, then the block that differs */
    for (; i + 32 <= upto; i += 32) {
        __m128i e0 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(in + i)),
                                    _mm_loadu_si128((const __m128i *)(dst + i)));
        __m128i e1 = _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(in + i + 16)),
                                    _mm_loadu_si128((const __m128i *)(dst + i + 16)));
        if (_mm_movemask_epi8(_mm_and_si128(e0, e1)) != 0xffff)
            break;
    }
    for (; i + 16 <= upto; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(in + i)), o = _mm_loadu_si128((const __m128i *)(dst + i));
        d = ~(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(x, o)) & 0xffff;
        if (d != 0)
            break;
    }
    *same = i + (d != 0 ? (unsigned)__builtin_ctz(d) : 0);
    __m128i bad = zero;
    for (; i + 16 <= n; i += 16)
        copy16(dst + i, _mm_loadu_si128((const __m128i *)(in + i)), &bad);
    if (i < n) /* the last sixteen bytes, over some already there */
        copy16(dst + n - 16, _mm_loadu_si128((const __m128i *)(in + n - 16)), &bad);
    _mm_storeu_si128((__m128i *)(dst + n), zero);
    return _mm_movemask_epi8(bad) == 0;
}

/* Past the closing quote of the string opening at p, or NULL at the padding. */
static inline const unsigned char *string_end_z(const unsigned char *p)
{
    const __m128i q = _mm_set1_epi8('"'), zero = _mm_setzero_si128();
    for (p++;; p += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, q), _mm_cmpeq_epi8(x, zero)));
        if (m != 0) {
            p += __builtin_ctz(m);
            return *p == '"' ? p + 1 : NULL;
        }
    }
}

/* number_end() with the padding for a bound. */
static inline const unsigned char *number_end_z(const unsigned char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if ((unsigned)*p - '1' < 9)
        do
            p++;
        while (digit(*p));
    else
        return NULL;
    if (*p == '.') {
        if (!digit(*++p))
            return NULL;
        do
            p++;
        while (digit(*p));
    }
    if ((*p | 0x20) == 'e') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!digit(*p))
            return NULL;
        do
            p++;
        while (digit(*p));
    }
    return p;
}

static inline uint32_t load32(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The member of tg_json_doc that a key of the root object fills with its value (which begins
 * with v), or NULL: error and result only when their value is an object. */
static inline struct span *root_slot(struct span *doc, const unsigned char *k, size_t kn, unsigned v)
{
    /* keys of 5 and 6 bytes as two overlapping 4-byte words */
    if (kn == 2)
        return k[0] == 'i' && k[1] == 'd' ? &doc[DOC_ID] : NULL;
    if (kn == 6 && load32(k) == load32("meth") && load32(k + 2) == load32("thod"))
        return &doc[DOC_METHOD];
    if (v != '{')
        return NULL;
    if (kn == 6 && load32(k) == load32("resu") && load32(k + 2) == load32("sult"))
        return &doc[DOC_RESULT];
    if (kn == 5 && load32(k) == load32("erro") && load32(k + 1) == load32("rror"))
        return &doc[DOC_ERROR];
    return NULL;
}

/* The length of the key opening at k in buf (its closing quote is there). */
static size_t key_len(const unsigned char *k) { return (size_t)((const unsigned char *)strchr((const char *)k, '"') - k); }

/* The walk over memo.buf (in's copy), from its first byte or (resume) from memo.cp. With
 * spaced = 0 (a constant: two copies are made) it takes no space outside strings, and costs no
 * test for one: most upstreams write compact JSON, whose only spaces are inside strings; that
 * one keeps memo.cp, a checkpoint at the last value start not past lim. The spaced walk keeps
 * none. */
static inline __attribute__((always_inline)) int walk_padded(size_t n, int limit, const int spaced,
                                                             const unsigned char *lim, const int resume)
{
    struct scan_memo *m = &memo;
    struct checkpoint *cp = &m->cp;
    const unsigned char *const buf = m->buf;
    unsigned char *kind_at = m->kind_at;
    unsigned *from_at = m->from_at;
    uint64_t *seen_at = m->seen_at;
    const unsigned char **keys = m->keys;
    const unsigned char *p = buf;
    /* The container open now, in registers: 1 for an object (0 for an array or none), the
     * 64-bit filter of its keys, its first key in keys[] (the pairwise duplicate check runs only
     * when a key's bit is already set). Those of the containers around it are in the stacks. */
    unsigned obj = 0, from = 0;
    uint64_t seen = 0;
    unsigned nkeys = 0;
    int depth = 0;
    /* the root object's member under way when doc keeps it: where, and its value in buf */
    struct span *doc = m->doc, *slot = NULL;
    const unsigned char *mv = NULL;
    if (!spaced && resume) {
        p = cp->p;
        mv = cp->mv;
        seen = cp->seen;
        obj = cp->obj;
        from = cp->from;
        nkeys = cp->nkeys;
        depth = cp->depth;
        if (depth == 1 && obj) /* a root member's value: its first byte is this message's */
            slot = root_slot(doc, keys[nkeys - 1], key_len(keys[nkeys - 1]), *p);
        else
            slot = cp->slot;
    } else {
        cp->p = NULL;
    }
    for (;;) {
        /* A value. */
        while (spaced && *p == ' ')
            p++;
        if (!spaced && p <= lim) {
            m->swap_at = p;
            m->swap_end = 0;
            cp->p = p;
            cp->mv = mv;
            cp->seen = seen;
            cp->obj = obj;
            cp->from = from;
            cp->nkeys = nkeys;
            cp->depth = depth;
            cp->slot = slot;
        }
        unsigned c = *p;
        if (c == '"') {
            if ((p = string_end_z(p)) == NULL)
                return -1;
            goto after_value;
        }
        if ((c | 0x20) == '{') { /* { or [ */
            if (depth + 1 > limit)
                return -1;
            p++;
            while (spaced && *p == ' ')
                p++;
            if (*p == c + 2) { /* } or ]: nothing to open */
                p++;
                goto after_value;
            }
            if (!spaced && depth < cp->depth)
                cp->p = NULL; /* its stacks written over */
            kind_at[depth] = (unsigned char)obj;
            from_at[depth] = from;
            seen_at[depth] = seen;
            depth++;
            obj = c == '{';
            from = nkeys;
            seen = 0;
            if (c == '[')
                continue; /* the first element */
            goto key;
        }
        if (c == '-' || digit(c))
            p = number_end_z(p);
        else if (c == 't')
            p = memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
        else if (c == 'f')
            p = memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
        else if (c == 'n')
            p = memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
        else
            return -1;
        if (p == NULL)
            return -1;
    after_value:
        /* p is past a value at this depth: a kept member's value of the root object ends here */
        if (slot != NULL && depth == 1) {
            *slot = (struct span){(size_t)(mv - buf), (size_t)(p - buf)};
            slot = NULL;
        }
        for (;;) {
            while (spaced && *p == ' ')
                p++;
            if (*p == ',' && depth > 0) {
                p++;
                break;
            }
            if (depth == 0)
                return p == buf + n ? 0 : -1;
            if (*p != (obj ? '}' : ']'))
                return -1;
            p++;
            if (obj)
                nkeys = from; /* its keys are done with */
            depth--;
            obj = kind_at[depth];
            from = from_at[depth];
            seen = seen_at[depth];
            if (slot != NULL && depth == 1) { /* the container was a kept member's value */
                *slot = (struct span){(size_t)(mv - buf), (size_t)(p - buf)};
                slot = NULL;
            }
        }
        if (!obj)
            continue; /* the next element */
    key:
        while (spaced && *p == ' ')
            p++;
        if (*p != '"')
            return -1;
        {
            const unsigned char *k = p + 1, *ke = string_end_z(p);
            if (ke == NULL)
                return -1;
            size_t kn = (size_t)(ke - 1 - k);
            if (nkeys >= FAST_KEYS)
                return -1;
            /* k[0] is the closing quote of an empty key */
            uint64_t bit = (uint64_t)1 << ((k[0] + kn * 5) & 63);
            if (seen & bit)
                for (unsigned i = from; i < nkeys; i++)
                    if (key_len(keys[i]) == kn && memcmp(keys[i], k, kn) == 0)
                        return -1; /* a duplicate: the strict parser says so */
            seen |= bit;
            if (!spaced && nkeys < cp->nkeys)
                cp->p = NULL; /* a key it holds written over */
            keys[nkeys++] = k;
            p = ke;
            while (spaced && *p == ' ')
                p++;
            if (*p != ':')
                return -1;
            p++;
            if (depth == 1) {
                while (spaced && *p == ' ')
                    p++;
                mv = p;
                slot = root_slot(doc, k, kn, *p);
            }
        }
    }
}

/* ---- the same message with one scalar swapped
 *
 * A stream's messages often differ in one scalar only: a progress notification from the one
 * before it in its "progress" number, a log message in its text. When the last message was
 * accepted whole and this one is that message with the scalar value that starts where its
 * walk took its last checkpoint (swap_at, kept when the checkpoint is dropped) replaced by
 * another scalar (the bytes before it the same, the bytes after the old value the same as
 * those after the new one), this one is valid too: a scalar
 * is a token the grammar takes anywhere another is taken, it ends where the old one did (the
 * byte after a value in the compact walk is a ',', '}' or ']', or there is none, and none of
 * them continues a scalar), and it keeps the same slot (root_slot() picks by key, and by '{'
 * only). The members that end past it move by the difference in length. Nothing is walked:
 * the new scalar is read, two runs of bytes compared, and the copy patched. */

/* doc's slices from the memo's members, onto in (the message the copy is of). */
static void fill_doc(struct tg_json_doc *doc, const char *in)
{
    struct tg_slice *out[4] = {&doc->id_raw, &doc->method_raw, &doc->error_raw, &doc->result_raw};
    for (int j = 0; j < 4; j++)
        if (memo.doc[j].end != 0)
            *out[j] = tg_slice_of(in + memo.doc[j].off, memo.doc[j].end - memo.doc[j].off);
}

/* Past the scalar at p in [p, end) (a string of plain bytes, a number, a literal), or NULL. */
static inline const unsigned char *scalar_end(const unsigned char *p, const unsigned char *end)
{
    unsigned c = *p;
    if (c == '"') {
        const unsigned char *q = string_end(p, end);
        return q != NULL && tg_json_plain((const char *)p + 1, (size_t)(q - p - 2)) ? q : NULL;
    }
    if (c == '-' || digit(c))
        return number_end(p, end);
    static const char *const lit[3] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t ln = strlen(lit[i]);
        if (c == (unsigned char)lit[i][0])
            return (size_t)(end - p) >= ln && memcmp(p, lit[i], ln) == 0 ? p + ln : NULL;
    }
    return NULL;
}

/* 0 with doc filled, or 1: not this case (nothing changed, the walk decides). */
static int scan_swapped(const unsigned char *in, size_t n, int limit, struct tg_json_doc *doc)
{
    struct scan_memo *m = &memo;
    if (!m->whole || m->limit != limit || n < 16)
        return 1;
    unsigned char *buf = m->buf;
    size_t at = (size_t)(m->swap_at - buf);
    unsigned c = buf[at];
    if (at >= n || c == '{' || c == '[' || memcmp(in, buf, at) != 0)
        return 1;
    if (m->swap_end == 0) { /* the old value was walked: where it ends is read again, once */
        const unsigned char *oe = scalar_end(buf + at, buf + m->n);
        if (oe == NULL)
            return 1;
        m->swap_end = (size_t)(oe - buf);
    }
    const unsigned char *ne = scalar_end(in + at, in + n);
    if (ne == NULL)
        return 1;
    size_t old_end = m->swap_end, new_end = (size_t)(ne - in), tail = n - new_end;
    if (m->n - old_end != tail || memcmp(ne, buf + old_end, tail) != 0)
        return 1;
    /* this message is the last one with [at, old_end) swapped for [at, new_end) */
    if (new_end != old_end) {
        memmove(buf + new_end, buf + old_end, tail);
        _mm_storeu_si128((__m128i *)(buf + n), _mm_setzero_si128());
    }
    if (new_end - at > 16)
        memcpy(buf + at, in + at, new_end - at);
    else /* mostly a few digits: no call */
        for (size_t i = at; i < new_end; i++)
            buf[i] = in[i];
    m->swap_end = new_end;
    for (int j = 0; j < 4; j++) {
        struct span *sp = &m->doc[j];
        if (sp->end > at) {
            sp->end = sp->end - old_end + new_end;
            if (sp->off > at)
                sp->off = sp->off - old_end + new_end;
        }
    }
    m->n = n;
    m->swapped++;
    fill_doc(doc, (const char *)in);
    return 0;
}

static int scan_padded(const char *in, size_t n, int max_depth, struct tg_json_doc *doc)
{
    struct scan_memo *m = &memo;
    size_t same;
    int limit = max_depth < FAST_DEPTH ? max_depth : FAST_DEPTH;
    if (scan_swapped((const unsigned char *)in, n, limit, doc) == 0)
        return 0;
    m->whole = 0;
    if (!copy_plain(m->buf, (const unsigned char *)in, n, m->n, &same)) {
        m->n = 0; /* the copy holds another message now */
        return -1;
    }
    /* after a first message, no checkpoint is worth taking past its first byte */
    const unsigned char *lim = m->buf + (m->n != 0 ? same : 0);
    /* An array's first element starts where its first byte is not ']': that byte must be shared
     * too. Any other value starts where the bytes before it say. */
    int resume = m->n != 0 && m->cp.p != NULL && m->limit == limit &&
                 (m->cp.p < lim || (m->cp.p == lim && (m->cp.p == m->buf || m->cp.p[-1] != '[')));
    if (resume) {
        /* the members that ended before it are this message's too */
        size_t upto = (size_t)(m->cp.p - m->buf);
        m->resumed++;
        m->skipped += upto;
        for (int j = 0; j < 4; j++)
            if (m->doc[j].end > upto)
                m->doc[j].end = 0;
    } else {
        for (int j = 0; j < 4; j++)
            m->doc[j].end = 0;
    }
    m->n = n;
    m->limit = limit;
    int rc = walk_padded(n, limit, 0, lim, resume);
    m->whole = rc == 0;
    if (rc != 0 && memchr(m->buf, ' ', n) != NULL) {
        /* spaces outside strings, or a refusal: the walk that takes them decides */
        m->cp.p = NULL;
        for (int j = 0; j < 4; j++)
            m->doc[j].end = 0;
        rc = walk_padded(n, limit, 1, lim, 0);
    }
    if (rc == 0)
        fill_doc(doc, in);
    return rc;
}

void tg__json_scan_forget(void)
{
    memo.n = 0;
    memo.whole = 0;
}

void tg__json_scan_stats(size_t *resumed, size_t *skipped, size_t *swapped)
{
    *resumed = memo.resumed;
    *skipped = memo.skipped;
    *swapped = memo.swapped;
}
#else
void tg__json_scan_forget(void) {}
void tg__json_scan_stats(size_t *resumed, size_t *skipped, size_t *swapped) { *resumed = *skipped = *swapped = 0; }
#endif

int tg__json_scan_fast(const char *in, size_t n, int max_depth, struct tg_json_doc *doc)
{
    /* One store per slice, not a chain of assignments: for a chain GCC stores the last slice as
     * two words and reads it back as one 16-byte load to copy it, a store-forwarding stall that
     * perf put at a quarter of this function's time. */
    doc->root = NULL;
    doc->case_twins = -1; /* no tree, not looked for */
    doc->id_raw = TG_SLICE_NULL;
    doc->method_raw = TG_SLICE_NULL;
    doc->error_raw = TG_SLICE_NULL;
    doc->result_raw = TG_SLICE_NULL;
    if (n == 0)
        return -1;
#if defined(__SSE2__)
    if (n <= FAST_COPY)
        return scan_padded(in, n, max_depth, doc);
#endif
    return scan_walk(in, n, max_depth, doc);
}
