/* Resource URI normalisation (policy/uri.c). Properties, checked on every input it accepts:
 *   the normal form is no longer than the input, NUL-terminated at the length returned;
 *   normalising it again gives itself (a fixed point), so the decision and the upstream read
 *   one URI;
 *   it holds no control character, no "\", no "%2F", "%5C" or "%00", no escape of an unreserved
 *   character and no lower-case escape hex, and its path no "//", "/./" or "/../".
 * Any input: no crash, no read past it, no undefined behaviour. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "policy/uri.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1; /* lower-case hex is not normal */
}

static void check(const char *u, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)u[i];
        if (c < 0x20 || c == 0x7f || c == '\\')
            abort();
        if (c == '%') {
            if (i + 2 >= n)
                abort();
            int hi = hexval(u[i + 1]), lo = hexval(u[i + 2]);
            if (hi < 0 || lo < 0)
                abort();
            int v = hi * 16 + lo;
            if (v == '/' || v == '\\' || v == 0 || (v >= 'a' && v <= 'z') || (v >= 'A' && v <= 'Z') ||
                (v >= '0' && v <= '9') || v == '-' || v == '.' || v == '_' || v == '~')
                abort();
        }
    }
    const char *colon = memchr(u, ':', n);
    if (colon == NULL)
        abort();
    const char *path = colon + 1, *end = u + n;
    if (end - path >= 2 && path[0] == '/' && path[1] == '/') {
        path += 2;
        while (path < end && *path != '/' && *path != '?' && *path != '#')
            path++;
    }
    const char *pe = path;
    while (pe < end && *pe != '?' && *pe != '#')
        pe++;
    for (const char *s = path; s < pe; s++) {
        if (*s != '/')
            continue;
        size_t left = (size_t)(pe - s);
        if ((left >= 2 && s[1] == '/') || (left == 2 && s[1] == '.') || (left >= 3 && s[1] == '.' && s[2] == '/') ||
            (left == 3 && s[1] == '.' && s[2] == '.') || (left >= 4 && s[1] == '.' && s[2] == '.' && s[3] == '/'))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *out = malloc(size + 1), *again = malloc(size + 1);
    const char *why = NULL;
    long n = tg_uri_normalize((const char *)data, size, out, &why);
    if (n < 0) {
        if (why == NULL)
            abort();
    } else {
        if ((size_t)n > size || out[n] != '\0')
            abort();
        check(out, (size_t)n);
        if (tg_uri_normalize(out, (size_t)n, again, &why) != n || memcmp(again, out, (size_t)n + 1) != 0)
            abort();
    }
    free(out);
    free(again);
    return 0;
}
