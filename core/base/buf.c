#include "core/base/buf.h"

#include "core/base/slab.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Small blocks come from the free lists (core/base/slab.h): a request's many short-lived pieces
 * (its state, strings, first buffer room) skip malloc's slower paths. They are malloc blocks, so
 * free() and tg_xfree() both take them. */
void *tg_xmalloc(size_t n)
{
    void *p = tg_slab_alloc(n ? n : 1);
    if (p == NULL)
        abort();
    return p;
}

void *tg_xcalloc(size_t n, size_t sz)
{
    n = n ? n : 1;
    sz = sz ? sz : 1;
    if (n > SIZE_MAX / sz)
        abort();
    void *p;
    if (n * sz <= TG_SLAB_MAX) {
        p = tg_slab_alloc(n * sz);
        if (p != NULL)
            memset(p, 0, n * sz);
    } else {
        p = calloc(n, sz);
    }
    if (p == NULL)
        abort();
    return p;
}

void tg_xfree(void *p) { tg_slab_free(p); }

void *tg_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (q == NULL)
        abort();
    return q;
}

char *tg_xstrdup(const char *s)
{
    size_t n = strlen(s);
    char *p = tg_xmalloc(n + 1);
    memcpy(p, s, n + 1);
    return p;
}

int tg_buf_try_reserve_grow(struct tg_buf *b, size_t extra, size_t ceiling)
{
    if (extra > SIZE_MAX - b->len)
        return TG_ENOMEM;
    size_t need = b->len + extra;
    if (ceiling != 0 && need > ceiling)
        return TG_ELIMIT;
    if (need <= b->cap)
        return 0;
    size_t ncap = b->cap ? b->cap : 256;
    while (ncap < need)
        ncap = ncap > SIZE_MAX / 2 ? need : ncap * 2;
    if (ceiling != 0 && ncap > ceiling && need <= ceiling)
        ncap = ceiling;
    char *p = b->base != NULL ? realloc(b->base, ncap) : tg_slab_alloc(ncap);
    if (p == NULL)
        return TG_ENOMEM;
    b->base = p;
    b->cap = ncap;
    return 0;
}

void tg_buf_append_grow(struct tg_buf *b, const void *p, size_t n)
{
    if (tg_buf_try_reserve(b, n, 0) != 0)
        abort();
    if (n)
        memcpy(b->base + b->len, p, n);
    b->len += n;
}

int tg_buf_try_append_grow(struct tg_buf *b, const void *p, size_t n, size_t ceiling)
{
    int r = tg_buf_try_reserve(b, n, ceiling);
    if (r != 0)
        return r;
    if (n)
        memcpy(b->base + b->len, p, n);
    b->len += n;
    return 0;
}

void tg_buf_appendf(struct tg_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (tg_buf_try_reserve(b, (size_t)n + 1, 0) != 0)
        abort();
    va_start(ap, fmt);
    vsnprintf(b->base + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void tg_buf_append_u64(struct tg_buf *b, uint64_t v)
{
    char tmp[24];
    int i = 24;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    tg_buf_append(b, tmp + i, (size_t)(24 - i));
}

void tg_buf_append_hex(struct tg_buf *b, uint64_t v)
{
    static const char hx[] = "0123456789abcdef";
    /* the digits written in place, last first: this is every chunk's size line */
    size_t n = v != 0 ? (size_t)(67 - __builtin_clzll(v)) / 4 : 1;
    if (tg_buf_try_reserve(b, n, 0) != 0)
        abort();
    char *q = b->base + b->len + n;
    do {
        *--q = hx[v & 15];
        v >>= 4;
    } while (v);
    b->len += n;
}

void tg_buf_consume(struct tg_buf *b, size_t n)
{
    if (n >= b->len) {
        b->len = 0;
        return;
    }
    memmove(b->base, b->base + n, b->len - n);
    b->len -= n;
}

char *tg_buf_release(struct tg_buf *b)
{
    char *p = b->base;
    tg_buf_init(b);
    return p;
}

int tg_slice_starts_with(struct tg_slice a, const char *lit)
{
    size_t n = strlen(lit);
    return a.len >= n && memcmp(a.ptr, lit, n) == 0;
}

int tg_slice_next_token(struct tg_slice h, size_t *at, struct tg_slice *tok)
{
    size_t i = *at;
    while (i < h.len && (h.ptr[i] == ' ' || h.ptr[i] == '\t' || h.ptr[i] == ','))
        i++;
    if (i >= h.len) {
        *at = i;
        return 0;
    }
    size_t start = i;
    while (i < h.len && h.ptr[i] != ',' && h.ptr[i] != ';')
        i++;
    size_t end = i;
    while (end > start && (h.ptr[end - 1] == ' ' || h.ptr[end - 1] == '\t'))
        end--;
    while (i < h.len && h.ptr[i] != ',') /* parameters */
        i++;
    *tok = tg_slice_of(h.ptr + start, end - start);
    *at = i;
    return 1;
}

int tg_slice_has_token(struct tg_slice h, const char *token)
{
    if (tg_slice_eq_nocase(h, token))
        return 1; /* the usual value: the token alone */
    struct tg_slice t;
    for (size_t i = 0; tg_slice_next_token(h, &i, &t);)
        if (tg_slice_eq_nocase(t, token))
            return 1;
    return 0;
}

char *tg_slice_dup(struct tg_slice s)
{
    char *p = tg_xmalloc(s.len + 1);
    if (s.len)
        memcpy(p, s.ptr, s.len);
    p[s.len] = '\0';
    return p;
}

/* Both digits of every byte, made by the compiler: one 2-byte copy per byte encoded. */
#define HEX_D(v) ((char)((v) < 10 ? '0' + (v) : 'a' + (v)-10))
#define HEX_P(i) {HEX_D((i) >> 4), HEX_D((i)&15)}
#define HEX_R(b)                                                                                                       \
    HEX_P(b + 0), HEX_P(b + 1), HEX_P(b + 2), HEX_P(b + 3), HEX_P(b + 4), HEX_P(b + 5), HEX_P(b + 6), HEX_P(b + 7),  \
        HEX_P(b + 8), HEX_P(b + 9), HEX_P(b + 10), HEX_P(b + 11), HEX_P(b + 12), HEX_P(b + 13), HEX_P(b + 14),         \
        HEX_P(b + 15)
static const char hex_pairs[256][2] = {HEX_R(0x00), HEX_R(0x10), HEX_R(0x20), HEX_R(0x30), HEX_R(0x40), HEX_R(0x50),
                                       HEX_R(0x60), HEX_R(0x70), HEX_R(0x80), HEX_R(0x90), HEX_R(0xa0), HEX_R(0xb0),
                                       HEX_R(0xc0), HEX_R(0xd0), HEX_R(0xe0), HEX_R(0xf0)};

void tg_hex_encode(const uint8_t *in, size_t n, char *out)
{
    size_t i = 0;
#if defined(__SSE2__)
    /* Sixteen bytes at a time (digests: SHA-256 is two rounds), with SSE2, which every x86-64 has. */
    const __m128i low = _mm_set1_epi8(0x0f), nine = _mm_set1_epi8(9), zero = _mm_set1_epi8('0'),
                  gap = _mm_set1_epi8('a' - '0' - 10);
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(in + i));
        __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low), lo = _mm_and_si128(v, low);
        __m128i a = _mm_unpacklo_epi8(hi, lo), z = _mm_unpackhi_epi8(hi, lo); /* digits in order */
        a = _mm_add_epi8(_mm_add_epi8(a, zero), _mm_and_si128(_mm_cmpgt_epi8(a, nine), gap));
        z = _mm_add_epi8(_mm_add_epi8(z, zero), _mm_and_si128(_mm_cmpgt_epi8(z, nine), gap));
        _mm_storeu_si128((__m128i *)(out + 2 * i), a);
        _mm_storeu_si128((__m128i *)(out + 2 * i + 16), z);
    }
#endif
    char *o = out + 2 * i;
    for (const uint8_t *p = in + i, *e = in + n; p < e; p++, o += 2)
        memcpy(o, hex_pairs[*p], 2);
    *o = '\0';
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = tolower(c);
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int tg_hex_decode(const char *in, size_t n, uint8_t *out)
{
    if (n % 2)
        return TG_EINVAL;
    for (size_t i = 0; i < n; i += 2) {
        int h = hexval((unsigned char)in[i]), l = hexval((unsigned char)in[i + 1]);
        if (h < 0 || l < 0)
            return TG_EINVAL;
        out[i / 2] = (uint8_t)(h << 4 | l);
    }
    return 0;
}

static int b64url_value(unsigned char c)
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

/* Strict unpadded base64url (RFC 7515 §2), here rather than in policy/jwt.c so that every JOSE
 * reader (tokens, keys, DPoP proofs) decodes alike. mbedtls_base64_decode() is standard base64 and tolerates
 * padding and line breaks, so decode by hand and refuse anything that is
 * not the one canonical spelling of the bytes: '=' and other non-alphabet
 * characters, a length of 4k+1 characters, and set bits left over after
 * the last whole byte (otherwise "AA" and "AB" would decode alike and one
 * signed token would have several accepted spellings). */
int tg_b64url_decode(const char *in, size_t n, uint8_t *out, size_t *outlen)
{
    if (n % 4 == 1)
        return TG_EINVAL;
    uint32_t acc = 0;
    unsigned bits = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64url_value((unsigned char)in[i]);
        if (v < 0)
            return TG_EINVAL;
        acc = (acc << 6 | (uint32_t)v) & 0xffffff;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0)
        return TG_EINVAL;
    *outlen = o;
    return 0;
}

size_t tg_b64url_encode(const uint8_t *in, size_t n, char *out)
{
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    size_t o = 0, i = 0;
    for (; i + 2 < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = al[v >> 18 & 63];
        out[o++] = al[v >> 12 & 63];
        out[o++] = al[v >> 6 & 63];
        out[o++] = al[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = al[v >> 18 & 63];
        out[o++] = al[v >> 12 & 63];
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = al[v >> 18 & 63];
        out[o++] = al[v >> 12 & 63];
        out[o++] = al[v >> 6 & 63];
    }
    out[o] = '\0';
    return o;
}

int tg_random(void *out, size_t n)
{
    uint8_t *p = out;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int tg_header_value_safe(const char *p, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] < 0x20 || (unsigned char)p[i] > 0x7e)
            return 0;
    return 1;
}
