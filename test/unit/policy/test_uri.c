/* policy/uri.c: the RFC 3986 §5.4 examples (references resolved against the RFC's base by
 * §5.2.2 here, with the module's remove_dot_segments, and the same paths appended to the base
 * and normalised as they are), and the forms a client would use to climb out of a glob. */
#include "test/unit/unit.h"

#include "policy/uri.h"

/* The tables are short: the fixed buffers of the resolver below hold them. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

/* ---- §5.2.2 reference resolution, for the RFC's tables --------------------------------- */

struct parts {
    char scheme[32], authority[64], path[128], query[64], fragment[64];
    int has_scheme, has_authority, has_query, has_fragment;
};

/* Appendix B: ^(([^:/?#]+):)?(//([^/?#]*))?([^?#]*)(\?([^#]*))?(#(.*))? */
static void split(const char *u, struct parts *o)
{
    memset(o, 0, sizeof(*o));
    size_t n = strcspn(u, ":/?#");
    if (u[n] == ':' && n > 0) {
        snprintf(o->scheme, sizeof(o->scheme), "%.*s", (int)n, u);
        o->has_scheme = 1;
        u += n + 1;
    }
    if (u[0] == '/' && u[1] == '/') {
        n = strcspn(u + 2, "/?#");
        snprintf(o->authority, sizeof(o->authority), "%.*s", (int)n, u + 2);
        o->has_authority = 1;
        u += 2 + n;
    }
    n = strcspn(u, "?#");
    snprintf(o->path, sizeof(o->path), "%.*s", (int)n, u);
    u += n;
    if (*u == '?') {
        n = strcspn(u + 1, "#");
        snprintf(o->query, sizeof(o->query), "%.*s", (int)n, u + 1);
        o->has_query = 1;
        u += 1 + n;
    }
    if (*u == '#') {
        snprintf(o->fragment, sizeof(o->fragment), "%s", u + 1);
        o->has_fragment = 1;
    }
}

static void dots(char *path)
{
    path[tg_uri_remove_dot_segments(path, strlen(path))] = '\0';
}

static void resolve(const char *base, const char *ref, char *out, size_t outsz)
{
    struct parts b, r, t;
    split(base, &b);
    split(ref, &r);
    memset(&t, 0, sizeof(t));
    if (r.has_scheme) {
        t = r;
        dots(t.path);
    } else {
        if (r.has_authority) {
            snprintf(t.authority, sizeof(t.authority), "%s", r.authority);
            t.has_authority = 1;
            snprintf(t.path, sizeof(t.path), "%s", r.path);
            dots(t.path);
            snprintf(t.query, sizeof(t.query), "%s", r.query);
            t.has_query = r.has_query;
        } else {
            if (r.path[0] == '\0') {
                snprintf(t.path, sizeof(t.path), "%s", b.path);
                snprintf(t.query, sizeof(t.query), "%s", r.has_query ? r.query : b.query);
                t.has_query = r.has_query || b.has_query;
            } else {
                if (r.path[0] == '/') {
                    snprintf(t.path, sizeof(t.path), "%s", r.path);
                } else { /* §5.2.3 merge */
                    if (b.has_authority && b.path[0] == '\0') {
                        snprintf(t.path, sizeof(t.path), "/%s", r.path);
                    } else {
                        const char *slash = strrchr(b.path, '/');
                        int keep = slash ? (int)(slash - b.path + 1) : 0;
                        snprintf(t.path, sizeof(t.path), "%.*s%s", keep, b.path, r.path);
                    }
                }
                dots(t.path);
                snprintf(t.query, sizeof(t.query), "%s", r.query);
                t.has_query = r.has_query;
            }
            snprintf(t.authority, sizeof(t.authority), "%s", b.authority);
            t.has_authority = b.has_authority;
        }
        snprintf(t.scheme, sizeof(t.scheme), "%s", b.scheme);
        t.has_scheme = 1;
    }
    snprintf(t.fragment, sizeof(t.fragment), "%s", r.fragment);
    t.has_fragment = r.has_fragment;
    snprintf(out, outsz, "%s%s%s%s%s%s%s%s%s", t.has_scheme ? t.scheme : "", t.has_scheme ? ":" : "",
             t.has_authority ? "//" : "", t.authority, t.path, t.has_query ? "?" : "", t.query,
             t.has_fragment ? "#" : "", t.fragment);
}

static const char *const BASE = "http://a/b/c/d;p?q";

static const struct {
    const char *ref, *target;
} RFC[] = {
    /* §5.4.1 normal examples */
    {"g:h", "g:h"},
    {"g", "http://a/b/c/g"},
    {"./g", "http://a/b/c/g"},
    {"g/", "http://a/b/c/g/"},
    {"/g", "http://a/g"},
    {"//g", "http://g"},
    {"?y", "http://a/b/c/d;p?y"},
    {"g?y", "http://a/b/c/g?y"},
    {"#s", "http://a/b/c/d;p?q#s"},
    {"g#s", "http://a/b/c/g#s"},
    {"g?y#s", "http://a/b/c/g?y#s"},
    {";x", "http://a/b/c/;x"},
    {"g;x", "http://a/b/c/g;x"},
    {"g;x?y#s", "http://a/b/c/g;x?y#s"},
    {"", "http://a/b/c/d;p?q"},
    {".", "http://a/b/c/"},
    {"./", "http://a/b/c/"},
    {"..", "http://a/b/"},
    {"../", "http://a/b/"},
    {"../g", "http://a/b/g"},
    {"../..", "http://a/"},
    {"../../", "http://a/"},
    {"../../g", "http://a/g"},
    /* §5.4.2 abnormal examples */
    {"../../../g", "http://a/g"},
    {"../../../../g", "http://a/g"},
    {"/./g", "http://a/g"},
    {"/../g", "http://a/g"},
    {"g.", "http://a/b/c/g."},
    {".g", "http://a/b/c/.g"},
    {"g..", "http://a/b/c/g.."},
    {"..g", "http://a/b/c/..g"},
    {"./../g", "http://a/b/g"},
    {"./g/.", "http://a/b/c/g/"},
    {"g/./h", "http://a/b/c/g/h"},
    {"g/../h", "http://a/b/c/h"},
    {"g;x=1/./y", "http://a/b/c/g;x=1/y"},
    {"g;x=1/../y", "http://a/b/c/y"},
    {"g?y/./x", "http://a/b/c/g?y/./x"},
    {"g?y/../x", "http://a/b/c/g?y/../x"},
    {"g#s/./x", "http://a/b/c/g#s/./x"},
    {"g#s/../x", "http://a/b/c/g#s/../x"},
    {"http:g", "http:g"}, /* strict parser */
};

#define NO_SLASHES "cannot be parsed (a file:, http(s): or ws(s): URI is written with \"//\" after the scheme)"

static long norm(const char *in, char *out, const char **why)
{
    *why = NULL;
    return tg_uri_normalize(in, strlen(in), out, why);
}

/* Every target of the RFC's tables, resolved with our remove_dot_segments. */
static void rfc_resolution(void **state)
{
    for (size_t i = 0; i < sizeof(RFC) / sizeof(RFC[0]); i++) {
        char got[256];
        resolve(BASE, RFC[i].ref, got, sizeof(got));
        if (strcmp(got, RFC[i].target) != 0)
            fail_msg("resolve(\"%s\"): got \"%s\", want \"%s\"", RFC[i].ref, got, RFC[i].target);
    }
}

/* The RFC's targets are already normal: each normalises to itself, but for the ".." the RFC
 * leaves in a query or fragment, which a resource URI may not hold. */
static void rfc_targets_are_normal(void **state)
{
    for (size_t i = 0; i < sizeof(RFC) / sizeof(RFC[0]); i++) {
        char out[256];
        const char *why;
        long n = norm(RFC[i].target, out, &why);
        int climbs = strstr(RFC[i].target, "/../") != NULL;
        if (strcmp(RFC[i].target, "http:g") == 0) { /* a URL parser reads it as "http://g" */
            assert_int_equal(n, -1);
            assert_string_equal(why, NO_SLASHES);
            continue;
        }
        if (climbs) {
            if (n >= 0)
                fail_msg("\"%s\": accepted as \"%s\", want refused", RFC[i].target, out);
            assert_string_equal(why, "still holds \"..\" after normalisation");
            continue;
        }
        if (n < 0)
            fail_msg("\"%s\": refused (%s)", RFC[i].target, why);
        assert_string_equal(out, RFC[i].target);
        assert_int_equal(n, (long)strlen(RFC[i].target));
    }
}

/* The relative paths of the tables written after the base's folder: the URI a client would
 * send, normalised, is the RFC's target. */
static void rfc_paths_after_base(void **state)
{
    int tried = 0;
    for (size_t i = 0; i < sizeof(RFC) / sizeof(RFC[0]); i++) {
        const char *r = RFC[i].ref;
        if (r[0] == '\0' || r[0] == '?' || r[0] == '#' || r[0] == '/' || strchr(r, ':') != NULL ||
            strstr(RFC[i].target, "/../") != NULL)
            continue;
        char in[256], out[256];
        snprintf(in, sizeof(in), "http://a/b/c/%s", r);
        const char *why;
        if (norm(in, out, &why) < 0)
            fail_msg("\"%s\": refused (%s)", in, why);
        if (strcmp(out, RFC[i].target) != 0)
            fail_msg("\"%s\": got \"%s\", want \"%s\"", in, out, RFC[i].target);
        tried++;
    }
    assert_true(tried >= 25);
}

static void remove_dot_segments_rfc_walkthrough(void **state)
{
    /* §5.2.4's two worked examples, and the edges of each rule. */
    static const struct {
        const char *in, *out;
    } c[] = {{"/a/b/c/./../../g", "/a/g"}, {"mid/content=5/../6", "mid/6"}, {"../x", "x"},  {"./x", "x"},
             {"/.", "/"},                  {"/..", "/"},                    {".", ""},       {"..", ""},
             {"/a/..", "/"},               {"/a/b/..", "/a/"},              {"a/..", "/"},   {"/a/./b/", "/a/b/"},
             {"", ""},                     {"/", "/"},                      {"/.../x", "/.../x"}};
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char p[64];
        snprintf(p, sizeof(p), "%s", c[i].in);
        dots(p);
        if (strcmp(p, c[i].out) != 0)
            fail_msg("remove_dot_segments(\"%s\"): got \"%s\", want \"%s\"", c[i].in, p, c[i].out);
    }
}

static void normal_forms(void **state)
{
    static const struct {
        const char *in, *out;
    } c[] = {
        {"file:///srv/data/../etc/passwd", "file:///srv/etc/passwd"},
        {"file:///srv/data/%2e%2e/etc/passwd", "file:///srv/etc/passwd"},
        {"file:///srv/data/%2E%2e/etc/passwd", "file:///srv/etc/passwd"},
        {"file:///srv/data/.%2e/etc/passwd", "file:///srv/etc/passwd"},
        {"file:///srv/data/%2e./etc/passwd", "file:///srv/etc/passwd"},
        {"file:///srv/data/%2e/x", "file:///srv/data/x"},
        {"file:///srv//data///x", "file:///srv/data/x"},
        {"file:////etc/passwd", "file:///etc/passwd"},
        {"file:///srv/data//../x", "file:///srv/x"}, /* what a file system does with "data//.." */
        {"FILE:///srv/Data/A.md", "file:///srv/Data/A.md"},
        {"HtTp://EXAMPLE.com:8080/P%7eth/%41", "http://example.com:8080/P~th/A"},
        {"TeSt://User@EXAMPLE.com:8080/P%7eth/%41", "test://User@example.com:8080/P~th/A"},
        {"http://EXAMPLE.com/%2a%3f?q=%3d", "http://example.com/%2A%3F?q=%3D"},
        {"http://%4A%4b.com/", "http://jk.com/"},
        {"test://static/resource/1", "test://static/resource/1"},
        {"test://static/resource/{id}", "test://static/resource/{id}"},
        {"mem://notes/public", "mem://notes/public"},
        {"urn:isbn:0451450523", "urn:isbn:0451450523"},
        {"file:///docs/a..b.md", "file:///docs/a..b.md"},
        {"file:///../../etc/passwd", "file:///etc/passwd"}, /* no folder above the root */
        {"file:///caf%C3%A9", "file:///caf%C3%A9"},
        {"x:", "x:"},
        /* What a URL parser (Node's URL, which the SDKs' servers look resources up with) drops
         * of a special scheme's authority: a glob written with the short form sees them. */
        {"file://localhost/srv/secret", "file:///srv/secret"},
        {"FILE://LocalHost/srv/secret", "file:///srv/secret"},
        {"file://localhost.example/x", "file://localhost.example/x"},
        {"https://api.example.com:443/secret", "https://api.example.com/secret"},
        {"https://api.example.com:00443/secret", "https://api.example.com/secret"},
        {"https://api.example.com:/secret", "https://api.example.com/secret"},
        {"http://api.example.com:80/secret", "http://api.example.com/secret"},
        {"ws://h:80/x", "ws://h/x"},
        {"wss://h:443/x", "wss://h/x"},
        {"ftp://h:21/x", "ftp://h/x"},
        {"http://h:443/x", "http://h:443/x"},
        {"https://h:80/x", "https://h:80/x"},
        {"http://h:8080/x", "http://h:8080/x"},
        {"http://[::1]:80/x", "http://[::1]/x"},
        {"http://[::80]/x", "http://[::80]/x"},
        {"demo://h:80/x", "demo://h:80/x"}, /* not special: its port is its own */
        {"http://127.0.0.1:80/x", "http://127.0.0.1/x"},
        {"http://10.0.0.255/x", "http://10.0.0.255/x"},
        {"http://0.0.0.0/x", "http://0.0.0.0/x"},
        {"http://v1.example/x", "http://v1.example/x"},
        {"demo://0x7f.1/x", "demo://0x7f.1/x"},
        {"demo:x/y", "demo:x/y"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char out[256], again[256];
        const char *why;
        long n = norm(c[i].in, out, &why);
        if (n < 0)
            fail_msg("\"%s\": refused (%s)", c[i].in, why);
        if (strcmp(out, c[i].out) != 0)
            fail_msg("\"%s\": got \"%s\", want \"%s\"", c[i].in, out, c[i].out);
        assert_int_equal(n, (long)strlen(out));
        assert_true((size_t)n <= strlen(c[i].in));
        assert_true(norm(out, again, &why) >= 0);
        assert_string_equal(again, out); /* a fixed point */
    }
}

static void refused_forms(void **state)
{
    static const struct {
        const char *in, *why;
    } c[] = {
        {"file:///srv/data/..%2fetc/passwd", "holds an encoded \"/\" (%2F)"},
        {"file:///srv/data/%2F..%2Fetc", "holds an encoded \"/\" (%2F)"},
        {"file:///srv/data/..%5cetc", "holds an encoded backslash (%5C)"},
        {"file:///srv/data\\..\\etc", "holds a backslash"},
        {"file:///srv/a%00.md", "holds an encoded NUL (%00)"},
        {"file:///srv/a\n", "holds a control character"},
        {"file:///srv/a%0a", "holds an encoded control character"},
        {"file:///srv/a%7F", "holds an encoded control character"},
        {"file:///srv/a%2", "cannot be parsed (a \"%\" not followed by two hex digits)"},
        {"file:///srv/a%zz", "cannot be parsed (a \"%\" not followed by two hex digits)"},
        {"file:///srv/a%", "cannot be parsed (a \"%\" not followed by two hex digits)"},
        {"/etc/passwd", "cannot be parsed (an absolute URI starts with a scheme and \":\")"},
        {"report.pdf", "cannot be parsed (an absolute URI starts with a scheme and \":\")"},
        {"", "cannot be parsed (an absolute URI starts with a scheme and \":\")"},
        {"1x:/a", "cannot be parsed (an absolute URI starts with a scheme and \":\")"},
        {":/a", "cannot be parsed (an absolute URI starts with a scheme and \":\")"},
        {"file:///srv/x?p=../../etc", "still holds \"..\" after normalisation"},
        {"file:///srv/x?p=%2e%2e", "still holds \"..\" after normalisation"},
        {"file:///srv/x#/../y", "still holds \"..\" after normalisation"},
        {"file:/srv/secret", NO_SLASHES},
        {"file:srv/secret", NO_SLASHES},
        {"FILE:/srv/secret", NO_SLASHES},
        {"file:", NO_SLASHES},
        {"https:api.example.com/secret", NO_SLASHES},
        {"http:/api.example.com/secret", NO_SLASHES},
        {"wss:h/x", NO_SLASHES},
        {"https://\xEF\xBC\xA1pi.example.com/secret", "holds a non-ASCII character or an escape in its host"},
        {"https://api\xE3\x80\x82" "example.com/secret", "holds a non-ASCII character or an escape in its host"},
        {"https://%EF%BC%A1pi.example.com/secret", "holds a non-ASCII character or an escape in its host"},
        {"https://api.ex\xC2\xAD" "ample.com/secret", "holds a non-ASCII character or an escape in its host"},
        {"http://a%25b.com/", "holds a non-ASCII character or an escape in its host"},
        {"http://0x7f.1/x", "holds an IPv4 address in its host written another way than a.b.c.d"},
        {"http://0X7F.0.0.1/x", "holds an IPv4 address in its host written another way than a.b.c.d"},
        {"http://2130706433/x", "holds an IPv4 address in its host written another way than a.b.c.d"},
        {"http://127.000.0.1/x", "holds an IPv4 address in its host written another way than a.b.c.d"},
        {"http://127.1/x", "holds an IPv4 address in its host written another way than a.b.c.d"},
        {"https://1.2.3.4./x", "holds an IPv4 address in its host written another way than a.b.c.d"},
        {"http://1.2.3.256/x", "holds an IPv4 address in its host written another way than a.b.c.d"},
        {"http://1.2.3.4.5/x", "holds an IPv4 address in its host written another way than a.b.c.d"},
        {"http://h::80/x", "has a port that is not a number"},
        {"http://h:8o/x", "has a port that is not a number"},
        {"http://[::1]x/x", "has a port that is not a number"},
        {"http://[::1]:8:0/x", "has a port that is not a number"},
        {"http://u@h/x", "holds a user name or password before its host"},
        {"https://u:p@api.example.com/secret", "holds a user name or password before its host"},
        {"https://api.example.com:443@evil/secret", "holds a user name or password before its host"},
        {"file://u@localhost/x", "holds a user name or password before its host"},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char out[256];
        const char *why;
        long n = norm(c[i].in, out, &why);
        if (n >= 0)
            fail_msg("\"%s\": accepted as \"%s\", want refused", c[i].in, out);
        assert_non_null(why);
        assert_string_equal(why, c[i].why);
    }
    /* A NUL inside the bytes (the length is what counts, not the terminator). */
    char out[32];
    const char *why;
    assert_int_equal(tg_uri_normalize("file:///a\0b", 11, out, &why), -1);
    assert_string_equal(why, "holds a NUL byte");
    /* A peer's URI is matched against globs at a cost of its length: at most TG_URI_MAX bytes. */
    static char big[TG_URI_MAX + 2], bout[TG_URI_MAX + 2];
    memcpy(big, "file:///", 8);
    memset(big + 8, 'a', TG_URI_MAX - 8);
    assert_int_equal(tg_uri_normalize(big, TG_URI_MAX, bout, &why), TG_URI_MAX);
    big[TG_URI_MAX] = 'a';
    assert_int_equal(tg_uri_normalize(big, TG_URI_MAX + 1, bout, &why), -1);
    assert_string_equal(why, "is longer than 8192 bytes");
}

/* Generated URIs from the characters that matter: whatever is accepted is no longer than the
 * input, normalises to itself, and holds no dot segment, "//" in its path, "%2F" or "\\". */
static void generated_uris(void **state)
{
    static const char *const parts[] = {"/", "//", ".", "..", "%2e", "%2E", "%2f", "%5c", "%41", "%7e", "%3f",
                                        "a", "B", "?", "#", "=", "&", "@", ":", "%", "%0", "~", "\\"};
    uint64_t rnd = 0x9e3779b97f4a7c15ull;
    int accepted = 0;
    for (int i = 0; i < 20000; i++) {
        char in[256], out[256], again[256];
        int k = snprintf(in, sizeof(in), "%s", tg_unit_rnd(&rnd, 2) ? "File://Host" : "x:");
        int np = (int)tg_unit_rnd(&rnd, 12);
        for (int j = 0; j < np; j++)
            k += snprintf(in + k, sizeof(in) - (size_t)k, "%s", parts[tg_unit_rnd(&rnd, sizeof(parts) / sizeof(parts[0]))]);
        const char *why;
        long n = tg_uri_normalize(in, (size_t)k, out, &why);
        if (n < 0)
            continue;
        accepted++;
        if ((size_t)n > (size_t)k || strlen(out) != (size_t)n)
            fail_msg("\"%s\" -> \"%s\": longer than the input", in, out);
        if (tg_uri_normalize(out, (size_t)n, again, &why) != n || strcmp(again, out) != 0)
            fail_msg("\"%s\" -> \"%s\" -> \"%s\": not a fixed point", in, out, again);
        size_t path = strcspn(out, "?#");
        char p[256];
        snprintf(p, sizeof(p), "%.*s", (int)path, out);
        const char *after = strstr(p, "://");
        const char *pp = after != NULL ? strchr(after + 3, '/') : strchr(p, ':') + 1;
        if (pp != NULL && (strstr(pp, "//") != NULL || strstr(pp, "/./") != NULL || strstr(pp, "/../") != NULL))
            fail_msg("\"%s\" -> \"%s\": a dot or empty segment is left", in, out);
        if (strstr(out, "%2F") != NULL || strstr(out, "%5C") != NULL || strchr(out, '\\') != NULL)
            fail_msg("\"%s\" -> \"%s\": an encoded / or \\ is left", in, out);
    }
    assert_true(accepted > 1000);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(rfc_resolution),
        cmocka_unit_test(rfc_targets_are_normal),
        cmocka_unit_test(rfc_paths_after_base),
        cmocka_unit_test(remove_dot_segments_rfc_walkthrough),
        cmocka_unit_test(normal_forms),
        cmocka_unit_test(refused_forms),
        cmocka_unit_test(generated_uris),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
