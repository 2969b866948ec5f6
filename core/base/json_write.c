/* The JSON writer: cJSON trees and strings as compact JSON text, the bytes tg_json_parse()
 * reads back to the same tree (test/fuzz/fuzz_json.c holds it to that). The reader is
 * core/base/json.c. */
#include "core/base/json.h"

#include <string.h>

#include "core/base/sha256.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* The bytes a JSON string escapes. */
#define ESC4 1, 1, 1, 1
static const unsigned char needs_escape[256] = {
    ESC4, ESC4, ESC4, ESC4, ESC4, ESC4, ESC4, ESC4, /* 0x00-0x1f */
    [(unsigned char)'"'] = 1,
    [(unsigned char)'\\'] = 1,
};
#undef ESC4

#if defined(__SSE2__)
/* One bit per byte of p[0..16) that needs an escape. */
static inline unsigned escapes16(const unsigned char *p)
{
    const __m128i q = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), ctl = _mm_set1_epi8(0x1f);
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    __m128i low = _mm_cmpeq_epi8(_mm_min_epu8(x, ctl), x); /* x <= 0x1f, unsigned */
    return (unsigned)_mm_movemask_epi8(_mm_or_si128(low, _mm_or_si128(_mm_cmpeq_epi8(x, q), _mm_cmpeq_epi8(x, bs))));
}
#endif

/* The length of s[0..n)'s first run of bytes that need no escape in a JSON string (anything but
 * a control byte, '"' and '\\'): sixteen bytes a step with SSE2. Most strings written (keys, names,
 * ids, plain text) are one run. */
static size_t unescaped_run(const unsigned char *s, size_t n)
{
    size_t i = 0;
#if defined(__SSE2__)
    for (; i + 16 <= n; i += 16) {
        unsigned m = escapes16(s + i);
        if (m != 0)
            return i + (unsigned)__builtin_ctz(m);
    }
    if (n >= 16 && i < n) { /* the last bytes: the sixteen that end at n, those before i left out */
        unsigned m = escapes16(s + n - 16) >> (i - (n - 16));
        return m != 0 ? i + (unsigned)__builtin_ctz(m) : n;
    }
#endif
    /* a string shorter than sixteen bytes (most keys and names): a table look-up a byte, four
     * at a time */
    for (; i + 4 <= n; i += 4)
        if (needs_escape[s[i]] | needs_escape[s[i + 1]] | needs_escape[s[i + 2]] | needs_escape[s[i + 3]])
            break;
    while (i < n && !needs_escape[s[i]])
        i++;
    return i;
}

void tg_json_write_string(struct tg_buf *b, const char *s, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    if (tg_buf_try_reserve(b, n + 2, 0) != 0)
        abort();
    b->base[b->len++] = '"';
    for (size_t i = 0;;) {
        size_t r = unescaped_run((const unsigned char *)s + i, n - i);
        tg_buf_append(b, s + i, r);
        i += r;
        if (i == n)
            break;
        unsigned char c = (unsigned char)s[i++];
        char esc[7] = {'\\', 0};
        size_t en = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = hx[c >> 4];
            esc[5] = hx[c & 15];
            en = 6;
        }
        tg_buf_append(b, esc, en);
    }
    tg_buf_append(b, "\"", 1);
}

void tg_json_write(struct tg_buf *b, const cJSON *item)
{
    switch (item->type & 0xFF) {
    case cJSON_False: tg_buf_append(b, "false", 5); return;
    case cJSON_True: tg_buf_append(b, "true", 4); return;
    case cJSON_NULL: tg_buf_append(b, "null", 4); return;
    case cJSON_Raw: tg_buf_appends(b, item->valuestring ? item->valuestring : "null"); return;
    case cJSON_String: tg_json_write_string(b, item->valuestring, strlen(item->valuestring)); return;
    case cJSON_Number:
        if (item->valuestring != NULL) {
            tg_buf_appends(b, item->valuestring);
        } else {
            double d = item->valuedouble;
            if (d > -9e15 && d < 9e15 && d == (double)(long long)d)
                tg_buf_appendf(b, "%lld", (long long)d);
            else if (d != d || d - d != 0)
                tg_buf_append(b, "null", 4);
            else
                tg_buf_appendf(b, "%.17g", d);
        }
        return;
    case cJSON_Array:
        tg_buf_append(b, "[", 1);
        for (const cJSON *c = item->child; c; c = c->next) {
            tg_json_write(b, c);
            if (c->next)
                tg_buf_append(b, ",", 1);
        }
        tg_buf_append(b, "]", 1);
        return;
    case cJSON_Object:
        tg_buf_append(b, "{", 1);
        for (const cJSON *c = item->child; c; c = c->next) {
            tg_json_write_string(b, c->string, strlen(c->string));
            tg_buf_append(b, ":", 1);
            tg_json_write(b, c);
            if (c->next)
                tg_buf_append(b, ",", 1);
        }
        tg_buf_append(b, "}", 1);
        return;
    default: tg_buf_append(b, "null", 4); return;
    }
}

void tg_json_digest(const cJSON *args, uint8_t out[32])
{
    struct tg_buf b;
    tg_buf_init(&b);
    if (args)
        tg_json_write(&b, args);
    else
        tg_buf_appends(&b, "null");
    tg_sha256(b.base, b.len, out);
    tg_buf_dispose(&b);
}
