/* Scans of JSON text that build nothing: tg_json_plain(), whether a text's strings read the
 * same decoded (the fast path's test, and the writers'), and tg_json_prefix_id(), the lenient
 * scan for the id of a message cut short. The fast path itself is core/base/json_scan.c. */
#include "core/base/json.h"

#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* 1 if no byte of p[0..n) is a backslash, a control byte or over 0x7f: sixteen bytes at a time
 * with SSE2 (every x86-64 has it; a signed compare with 0x20 catches both the control bytes and
 * those over 0x7f), eight at a time elsewhere. */
int tg_json_plain(const char *in, size_t n)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t i = 0;
#if defined(__SSE2__)
    const __m128i bs = _mm_set1_epi8('\\'), sp = _mm_set1_epi8(0x20);
    __m128i bad = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)(p + i));
        bad = _mm_or_si128(bad, _mm_or_si128(_mm_cmplt_epi8(x, sp), _mm_cmpeq_epi8(x, bs)));
    }
    if (_mm_movemask_epi8(bad) != 0)
        return 0;
#else
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t bad = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, p + i, 8);
        uint64_t b = x ^ (ones * '\\');
        bad |= (x & highs) | ((x - ones * 0x20) & ~x & highs) | ((b - ones) & ~b & highs);
    }
    if (bad != 0)
        return 0;
#endif
    for (; i < n; i++)
        if (p[i] == '\\' || p[i] < 0x20 || p[i] > 0x7f)
            return 0;
    return 1;
}

/* ---- the id of a message cut short ---------------------------------------------------- */

/* Past the string whose opening quote is at p[i]: the index after its closing quote, or n. */
static size_t skip_string(const char *p, size_t n, size_t i)
{
    for (i++; i < n && p[i] != '"'; i++)
        if (p[i] == '\\')
            i++;
    return i < n ? i + 1 : n;
}

static size_t skip_blank(const char *p, size_t n, size_t i)
{
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    return i;
}

int tg_json_prefix_id(const char *p, size_t n, struct tg_slice *id)
{
    size_t i = skip_blank(p, n, 0);
    if (i >= n || p[i] != '{')
        return 0;
    int depth = 1, want_key = 1;
    for (i++; i < n;) {
        char c = p[i];
        if (c == '"') {
            size_t s = i;
            i = skip_string(p, n, i);
            if (depth != 1 || !want_key)
                continue;
            want_key = 0;
            int is_id = i - s == 4 && memcmp(p + s, "\"id\"", 4) == 0;
            i = skip_blank(p, n, i);
            if (i >= n || p[i] != ':')
                return 0;
            i = skip_blank(p, n, i + 1);
            if (!is_id)
                continue;
            size_t v = i;
            if (i < n && p[i] == '"')
                i = skip_string(p, n, i);
            else
                while (i < n && ((p[i] >= '0' && p[i] <= '9') || p[i] == '-' || p[i] == '+' || p[i] == '.' ||
                                 p[i] == 'e' || p[i] == 'E'))
                    i++;
            if (i >= n || i == v)
                return 0; /* cut inside the id, or not a string or number */
            *id = tg_slice_of(p + v, i - v);
            return 1;
        }
        if (c == '{' || c == '[')
            depth++;
        else if ((c == '}' || c == ']') && --depth == 0)
            return 0;
        else if (c == ',' && depth == 1)
            want_key = 1;
        i++;
    }
    return 0;
}
