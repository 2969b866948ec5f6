#include "core/wire/http_fast.h"

#include <string.h>

#include <llhttp.h>

#include "core/base/buf.h"

/* Byte classes: TCHAR, RFC 9110's token characters (header names); URLCHAR, what a target may
 * hold here (see the header). Bytes over 0x7f are neither. */
enum { TCHAR = 1, URLCHAR = 2 };
static const unsigned char CLASS[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 3, 0, 1, 3, 3, 3, 3, 2, 2, 3, 3, 2, 3, 3, 2,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 0, 2, 0, 2,
    2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0, 0, 0, 1, 3,
    1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 0, 1, 0, 3, 0,
};

/* 1 if the 8 bytes at p are printable ASCII (0x20-0x7e): a byte below 0x20 or above 0x7e lights
 * its top bit in one of the two tests. */
static inline int word_printable(const char *p)
{
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t w;
    memcpy(&w, p, 8);
    return !(((w - ones * 0x20) & ~w & high) | (((w + ones) | w) & high));
}

/* 1 if every byte of p[0..n) is printable ASCII, eight at a time. */
static int printable(const char *p, size_t n)
{
    size_t i = 0;
    if (n >= 8) { /* the last word overlaps the one before it: no byte-by-byte tail */
        for (; i + 8 < n; i += 8)
            if (!word_printable(p + i))
                return 0;
        return word_printable(p + n - 8);
    }
    for (; i < n; i++) {
        unsigned char b = (unsigned char)p[i];
        if (b < 0x20 || b > 0x7e)
            return 0;
    }
    return 1;
}

static inline int name_is(const char *name, size_t n, const char *lower, size_t ln)
{
    return n == ln && tg_token_eq_lower(name, lower, n);
}

int tg_http_fast_maybe(const char *p, size_t n)
{
    if (n < 6)
        return 0;
    switch (p[0]) {
    case 'G': return memcmp(p, "GET /", 5) == 0;
    case 'P': return memcmp(p, "POST /", 6) == 0;
    case 'D': return n >= 8 && memcmp(p, "DELETE /", 8) == 0;
    }
    return 0;
}

/* The header lines at q, through the blank line that ends them: into h[0..f->nheaders),
 * f->keep_alive, f->has_length and f->body_len. The position after the blank line, or NULL when
 * the lines are not all there or not of the shape. */
static const char *fields(const char *p, const char *q, const char *end, struct tg_http_header *h, int max_headers,
                          struct tg_http_fast *f)
{
    int nh = 0, have_length = 0, have_connection = 0;
    uint64_t length = 0;
    f->keep_alive = 1;
    for (;;) {
        if (end - q < 2)
            return NULL;
        if (q[0] == '\r') {
            if (q[1] != '\n')
                return NULL;
            q += 2;
            break;
        }
        /* The line is found first, so the scans below stop at its CR at the latest. */
        const char *cr = memchr(q, '\r', (size_t)(end - q));
        if (cr == NULL || cr + 1 == end || cr[1] != '\n')
            return NULL;
        const char *name = q;
        while (CLASS[(unsigned char)*q] & TCHAR)
            q++;
        size_t name_len = (size_t)(q - name);
        if (*q != ':' || name_len == 0)
            return NULL;
        q++;
        while (*q == ' ')
            q++;
        const char *value = q;
        size_t value_len = (size_t)(cr - value);
        if (value_len == 0 || value[value_len - 1] == ' ' || !printable(value, value_len))
            return NULL;
        switch (name_len) {
        case 7:
            if (name_is(name, name_len, "upgrade", 7))
                return NULL;
            break;
        case 10:
            if (name_is(name, name_len, "connection", 10)) {
                if (have_connection++)
                    return NULL;
                if (name_is(value, value_len, "close", 5))
                    f->keep_alive = 0;
                else if (!name_is(value, value_len, "keep-alive", 10))
                    return NULL;
            }
            break;
        case 14:
            if (name_is(name, name_len, "content-length", 14)) {
                if (have_length++ || value_len > 15 || (value[0] == '0' && value_len > 1))
                    return NULL;
                for (size_t i = 0; i < value_len; i++) {
                    if (value[i] < '0' || value[i] > '9')
                        return NULL;
                    length = length * 10 + (uint64_t)(value[i] - '0');
                }
            }
            break;
        case 16:
            if (name_is(name, name_len, "proxy-connection", 16))
                return NULL;
            break;
        case 17:
            if (name_is(name, name_len, "transfer-encoding", 17))
                return NULL;
            break;
        }
        if (nh == max_headers)
            return NULL;
        h[nh].name_off = (uint32_t)(name - p);
        h[nh].name_len = (uint32_t)name_len;
        h[nh].value_off = (uint32_t)(value - p);
        h[nh].value_len = (uint32_t)value_len;
        nh++;
        q = cr + 2;
    }
    if ((uint64_t)(end - q) < length)
        return NULL;
    f->nheaders = nh;
    f->head_len = (uint32_t)(q - p);
    f->body_len = length;
    f->has_length = have_length;
    return q;
}

int tg_http_fast_request(const char *p, size_t n, struct tg_http_header *h, int max_headers,
                         struct tg_http_fast *f)
{
    if (!tg_http_fast_maybe(p, n) || n > UINT32_MAX)
        return 0;
    const char *q, *end = p + n;
    switch (p[0]) {
    case 'G': f->method = HTTP_GET; q = p + 4; break;
    case 'P': f->method = HTTP_POST; q = p + 5; break;
    default: f->method = HTTP_DELETE; q = p + 7; break;
    }
    f->status = 0;
    /* The line is found first, so the scan of the target stops at its CR at the latest. */
    const char *cr = memchr(q, '\r', (size_t)(end - q));
    if (cr == NULL)
        return 0;
    f->url_off = (uint32_t)(q - p);
    while (CLASS[(unsigned char)*q] & URLCHAR)
        q++;
    f->url_len = (uint32_t)(q - p) - f->url_off;
    if (cr - q != 9 || (size_t)(end - q) < 11 || memcmp(q, " HTTP/1.1\r\n", 11) != 0)
        return 0;
    return fields(p, q + 11, end, h, max_headers, f) != NULL;
}

int tg_http_fast_response(const char *p, size_t n, struct tg_http_header *h, int max_headers,
                          struct tg_http_fast *f)
{
    /* "HTTP/1.1 200 R\r\n" at the least */
    if (n < 16 || n > UINT32_MAX || memcmp(p, "HTTP/1.1 ", 9) != 0)
        return 0;
    const char *end = p + n;
    int status = 0;
    for (int i = 9; i < 12; i++) {
        if (p[i] < '0' || p[i] > '9')
            return 0;
        status = status * 10 + (p[i] - '0');
    }
    if (p[12] != ' ' || status < 200 || status > 599 || status == 204 || status == 304)
        return 0;
    const char *reason = p + 13, *cr = memchr(reason, '\r', (size_t)(end - reason));
    if (cr == NULL || cr == reason || cr + 1 == end || cr[1] != '\n' || !printable(reason, (size_t)(cr - reason)))
        return 0;
    f->method = 0;
    f->status = status;
    f->url_off = f->url_len = 0;
    return fields(p, cr + 2, end, h, max_headers, f) != NULL && f->has_length;
}

struct tg_slice tg_http_fast_query_param(struct tg_slice q, const char *name)
{
    size_t nl = strlen(name);
    size_t i = (q.len > 0 && q.ptr[0] == '?') ? 1 : 0;
    while (i < q.len) {
        size_t e = i;
        while (e < q.len && q.ptr[e] != '&')
            e++;
        if (e - i > nl && memcmp(q.ptr + i, name, nl) == 0 && q.ptr[i + nl] == '=')
            return tg_slice_of(q.ptr + i + nl + 1, e - i - nl - 1);
        i = e + 1;
    }
    return TG_SLICE_NULL;
}
