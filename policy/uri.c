/* Resource URIs in one normal form (see policy/uri.h). */
#include "policy/uri.h"

#include <stdint.h>
#include <string.h>

#include "core/base/buf.h"

static int is_alpha(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static char lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

/* RFC 3986 §2.3: what an escape of it means the same as it. */
static int unreserved(unsigned char c)
{
    return is_alpha(c) || is_digit(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

static int scheme_is(const char *scheme, size_t n, const char *name)
{
    return strlen(name) == n && memcmp(scheme, name, n) == 0;
}

/* The schemes a URL parser (WHATWG, as Node's and browsers' URL) treats as special: it
 * reads their authority in its own normal form, so this one must read it the same way. */
static int is_special(const char *scheme, size_t n)
{
    static const char *const names[] = {"file", "http", "https", "ws", "wss", "ftp"};
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        if (scheme_is(scheme, n, names[k]))
            return 1;
    return 0;
}

/* How many bytes at the end of the authority out[a..e) a URL parser drops: a file: URI's
 * "localhost" (file://localhost/x is file:///x), else a port that is empty or the scheme's
 * default, leading zeros and all (http://h:0080/ is http://h/). */
static size_t authority_excess(const char *out, size_t scheme_len, size_t a, size_t e)
{
    if (scheme_is(out, scheme_len, "file"))
        return e - a == 9 && memcmp(out + a, "localhost", 9) == 0 ? 9 : 0;
    size_t c = e;
    while (c > a && is_digit((unsigned char)out[c - 1]))
        c--;
    const char *bracket = memchr(out + a, '[', c - a);
    if (c == a || out[c - 1] != ':' || (bracket != NULL && out[c - 2] != ']'))
        return 0; /* no port (an IPv6 literal's last group is not one) */
    unsigned long port = 0;
    for (size_t k = c; k < e && port < 100000; k++)
        port = port * 10 + (unsigned long)(out[k] - '0');
    unsigned long def = scheme_is(out, scheme_len, "https") || scheme_is(out, scheme_len, "wss") ? 443
                        : scheme_is(out, scheme_len, "ftp")                                        ? 21
                                                                                                   : 80;
    return c == e || port == def ? e - c + 1 : 0;
}

/* Is out[a..e), a special scheme's host, one a URL parser reads as an IPv4 address (its last
 * label a number, decimal or 0x hex) written another way than a.b.c.d, which it would rewrite
 * ("0x7f.1", "2130706433", "127.000.0.1" are all 127.0.0.1)? */
static int odd_ipv4(const char *out, size_t a, size_t e)
{
    size_t end = e > a && out[e - 1] == '.' ? e - 1 : e, last = end;
    while (last > a && out[last - 1] != '.')
        last--;
    int hex = end - last > 2 && out[last] == '0' && (out[last + 1] | 0x20) == 'x';
    if (last == end)
        return 0;
    for (size_t k = last + (hex ? 2 : 0); k < end; k++)
        if (!(is_digit((unsigned char)out[k]) || (hex && strchr("abcdefABCDEF", out[k]) != NULL)))
            return 0; /* a name */
    if (end != e || hex)
        return 1;
    int labels = 0;
    for (size_t k = a; k <= e; labels++) {
        size_t d = k;
        unsigned v = 0;
        while (d < e && is_digit((unsigned char)out[d]) && d - k < 4)
            v = v * 10 + (unsigned)(out[d++] - '0');
        if (d == k || v > 255 || (d - k > 1 && out[k] == '0') || (d < e && out[d] != '.'))
            return 1;
        k = d + 1;
    }
    return labels != 4;
}

/* The input is path[r..n); the output path[0..w), never ahead of r, so the work is in place.
 * "Replacing a prefix by /" is stepping r to a "/" the input holds already, or writing one
 * behind the output's end. */
size_t tg_uri_remove_dot_segments(char *path, size_t n)
{
    size_t r = 0, w = 0;
#define AT(s) (n - r >= sizeof(s) - 1 && memcmp(path + r, s, sizeof(s) - 1) == 0)
#define IS(s) (n - r == sizeof(s) - 1 && memcmp(path + r, s, sizeof(s) - 1) == 0)
    while (r < n) {
        if (AT("../")) { /* A */
            r += 3;
        } else if (AT("./")) {
            r += 2;
        } else if (AT("/./")) { /* B */
            r += 2;
        } else if (IS("/.")) {
            path[++r] = '/';
        } else if (AT("/../") || IS("/..")) { /* C */
            if (IS("/..")) {
                path[r + 2] = '/';
                r += 2;
            } else {
                r += 3;
            }
            while (w > 0 && path[w - 1] != '/')
                w--;
            if (w > 0)
                w--; /* the segment and the "/" before it */
        } else if (IS(".") || IS("..")) { /* D */
            r = n;
        } else { /* E: the first segment, with its leading "/" if any */
            do
                path[w++] = path[r++];
            while (r < n && path[r] != '/');
        }
    }
#undef AT
#undef IS
    return w;
}

/* A ".." left anywhere: a segment of the path, the query or the fragment. */
static int has_dotdot(const char *s, size_t n)
{
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == '/' || s[i] == '?' || s[i] == '#' || s[i] == '&' || s[i] == '=' || s[i] == ';') {
            if (i - start == 2 && s[start] == '.' && s[start + 1] == '.')
                return 1;
            start = i + 1;
        }
    }
    return 0;
}

long tg_uri_normalize_escapes(const char *in, size_t n, char *out, const char **why)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (in[i] != '%') {
            out[w++] = in[i];
            continue;
        }
        uint8_t v;
        if (i + 2 >= n || tg_hex_decode(in + i + 1, 2, &v) != 0) {
            *why = "cannot be parsed (a \"%\" not followed by two hex digits)";
            return -1;
        }
        if (v == 0) {
            *why = "holds an encoded NUL (%00)";
            return -2;
        }
        if (v == '/') {
            *why = "holds an encoded \"/\" (%2F)";
            return -2;
        }
        if (v == '\\') {
            *why = "holds an encoded backslash (%5C)";
            return -2;
        }
        if (v < 0x20 || v == 0x7f) {
            *why = "holds an encoded control character";
            return -2;
        }
        if (unreserved(v)) {
            out[w++] = (char)v;
        } else {
            out[w++] = '%';
            out[w++] = hex[v >> 4];
            out[w++] = hex[v & 15];
        }
        i += 2;
    }
    return (long)w;
}

long tg_uri_normalize(const char *in, size_t n, char *out, const char **why)
{
    if (n > TG_URI_MAX) {
        *why = "is longer than 8192 bytes";
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == 0) {
            *why = "holds a NUL byte";
            return -1;
        }
        if (c < 0x20 || c == 0x7f) {
            *why = "holds a control character";
            return -1;
        }
        if (c == '\\') {
            *why = "holds a backslash";
            return -1;
        }
    }
    size_t i = 0;
    while (i < n && (is_alpha((unsigned char)in[i]) || (i > 0 && (is_digit((unsigned char)in[i]) || in[i] == '+' ||
                                                                  in[i] == '-' || in[i] == '.'))))
        i++;
    if (i == 0 || i == n || in[i] != ':') {
        *why = "cannot be parsed (an absolute URI starts with a scheme and \":\")";
        return -1;
    }
    size_t w = 0;
    for (; w < i; w++)
        out[w] = lower(in[w]);
    out[w++] = ':';
    size_t s = w; /* after the scheme */
    long esc = tg_uri_normalize_escapes(in + i + 1, n - i - 1, out + s, why);
    if (esc < 0)
        return -1;
    w = s + (size_t)esc;
    /* Decoding made no "/", "?", "#" or "@" (reserved: they stay escaped), so the components
     * are found in the decoded form. */
    size_t p = s;
    int special = is_special(out, i);
    if (special && (w - p < 2 || out[p] != '/' || out[p + 1] != '/')) {
        /* A URL parser reads "file:/x", "file:x" and "http:host/x" as "file:///x" and
         * "http://host/x": a glob written with "//" would not see them. */
        *why = "cannot be parsed (a file:, http(s): or ws(s): URI is written with \"//\" after the scheme)";
        return -1;
    }
    if (w - p >= 2 && out[p] == '/' && out[p + 1] == '/') {
        size_t a = p + 2, e = a;
        while (e < w && out[e] != '/' && out[e] != '?' && out[e] != '#')
            e++;
        size_t host = a;
        for (size_t k = a; k < e; k++)
            if (out[k] == '@')
                host = k + 1;
        if (special && host != a) {
            /* "https://u@h/secret" is what a client that fetches it reads as "https://h/secret" */
            *why = "holds a user name or password before its host";
            return -1;
        }
        size_t hend = host;
        if (host < e && out[host] == '[') {
            const char *rb = memchr(out + host, ']', e - host);
            hend = rb != NULL ? (size_t)(rb - out) + 1 : e;
        } else {
            while (hend < e && out[hend] != ':')
                hend++;
        }
        if (special && out[host] != '[' && odd_ipv4(out, host, hend)) {
            *why = "holds an IPv4 address in its host written another way than a.b.c.d";
            return -1;
        }
        for (size_t k = hend + 1; special && hend < e && k <= e; k++)
            if (out[hend] != ':' || (k < e && !is_digit((unsigned char)out[k]))) {
                /* "h::80" would lose one ":80" here and its last ":" at the parser */
                *why = "has a port that is not a number";
                return -1;
            }
        for (size_t k = host; special && k < e; k++)
            if (out[k] == '%' || (unsigned char)out[k] >= 0x80) {
                /* A URL parser decodes it and maps it (IDNA): "https://ＡＰＩ.example.com",
                 * "api。example。com" and "%EF%BC%A1pi.example.com" are all api.example.com. */
                *why = "holds a non-ASCII character or an escape in its host";
                return -1;
            }
        for (size_t k = host; k < e; k++) {
            if (out[k] == '%')
                k += 2; /* an escape's hex stays upper-case */
            else
                out[k] = lower(out[k]);
        }
        size_t cut = special ? authority_excess(out, i, a, e) : 0;
        memmove(out + e - cut, out + e, w - e);
        w -= cut;
        p = e - cut;
    }
    size_t q = p;
    while (q < w && out[q] != '?' && out[q] != '#')
        q++;
    /* Empty segments first: "a//../b" is what a file system reads as "a/../b". */
    size_t pw = p;
    for (size_t k = p; k < q; k++)
        if (!(out[k] == '/' && pw > p && out[pw - 1] == '/'))
            out[pw++] = out[k];
    pw = p + tg_uri_remove_dot_segments(out + p, pw - p);
    memmove(out + pw, out + q, w - q);
    w = pw + (w - q);
    out[w] = '\0';
    if (has_dotdot(out + s, w - s)) {
        *why = "still holds \"..\" after normalisation";
        return -1;
    }
    return (long)w;
}
