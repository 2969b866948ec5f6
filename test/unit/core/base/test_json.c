/* core/base/json.c: the strict parser and the writer.
 *
 * Every rejection is checked with a tree (build = 1) and without (build = 0),
 * in a copy that ends right before a PROT_NONE page, so that a read past the
 * end of the input crashes the test instead of passing by luck. */
#include "test/unit/unit.h"

#include <sys/mman.h>
#include <unistd.h>

#include "core/base/json.h"

/* ---- helpers --------------------------------------------------------------------- */

/* Input copied against a guard page: the byte after the last one is unmapped. */
struct guarded {
    char *map;
    size_t maplen;
    char *p;
};

static struct guarded guard_copy(const char *s, size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    size_t data_pages = (n + pg - 1) / pg;
    if (data_pages == 0)
        data_pages = 1;
    struct guarded g;
    g.maplen = (data_pages + 1) * pg;
    g.map = mmap(NULL, g.maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(g.map != MAP_FAILED);
    assert_int_equal(mprotect(g.map + data_pages * pg, pg, PROT_NONE), 0);
    g.p = g.map + data_pages * pg - n;
    if (n)
        memcpy(g.p, s, n);
    return g;
}

static void guard_free(struct guarded *g) { munmap(g->map, g->maplen); }

static int parse_guarded(const char *s, size_t n, int depth, int build, struct tg_json_doc *doc, const char **err,
                         size_t *off)
{
    struct guarded g = guard_copy(s, n);
    int r = tg_json_parse(g.p, n, depth, build, doc, err, off);
    cJSON_Delete(doc->root);
    doc->root = NULL;
    doc->id_raw = TG_SLICE_NULL; /* points into the guarded copy */
    guard_free(&g);
    return r;
}

static void check_reject(const char *s, size_t n, int depth, const char *line_why)
{
    for (int build = 0; build <= 1; build++) {
        struct tg_json_doc doc;
        const char *err = NULL;
        size_t off = (size_t)-1;
        int r = parse_guarded(s, n, depth, build, &doc, &err, &off);
        if (r != TG_EINVAL) {
            char hex[256];
            size_t k = 0;
            for (size_t i = 0; i < n && k + 4 < sizeof(hex); i++)
                k += (size_t)snprintf(hex + k, sizeof(hex) - k, "%02x", (unsigned char)s[i]);
            fail_msg("accepted (build=%d, r=%d) but must reject [%s]: %.*s (hex %s)", build, r, line_why, (int)n, s,
                     hex);
        }
        assert_non_null(err);
        assert_true(off <= n);
    }
}

static void check_accept(const char *s, size_t n, int depth)
{
    for (int build = 0; build <= 1; build++) {
        struct tg_json_doc doc;
        const char *err = NULL;
        size_t off = 0;
        int r = parse_guarded(s, n, depth, build, &doc, &err, &off);
        if (r != 0)
            fail_msg("rejected (build=%d) at offset %zu (%s) but must accept: %.*s", build, off, err ? err : "?",
                     (int)n, s);
    }
}

#define REJECT(lit) check_reject((lit), sizeof(lit) - 1, 64, #lit)
#define ACCEPT(lit) check_accept((lit), sizeof(lit) - 1, 64)
#define REJECT_D(lit, d) check_reject((lit), sizeof(lit) - 1, (d), #lit)
#define ACCEPT_D(lit, d) check_accept((lit), sizeof(lit) - 1, (d))

/* Parse (build) and write back; compare with the expected compact text. */
static void check_round_trip(const char *in, size_t n, const char *expect, size_t expect_n)
{
    struct tg_json_doc doc;
    const char *err = NULL;
    size_t off = 0;
    struct guarded g = guard_copy(in, n);
    int r = tg_json_parse(g.p, n, 64, 1, &doc, &err, &off);
    if (r != 0)
        fail_msg("rejected at %zu (%s): %.*s", off, err ? err : "?", (int)n, in);
    assert_non_null(doc.root);
    struct tg_buf b;
    tg_buf_init(&b);
    tg_json_write(&b, doc.root);
    if (b.len != expect_n || memcmp(b.base, expect, expect_n) != 0)
        fail_msg("round trip of %.*s\n   wrote %.*s\nexpected %.*s", (int)n, in, (int)b.len, b.base, (int)expect_n,
                 expect);
    /* What was written parses again to the same text (the writer emits strict JSON). */
    struct tg_json_doc again;
    r = tg_json_parse(b.base, b.len, 64, 1, &again, &err, &off);
    if (r != 0)
        fail_msg("written text does not parse (%s at %zu): %.*s", err, off, (int)b.len, b.base);
    struct tg_buf b2;
    tg_buf_init(&b2);
    tg_json_write(&b2, again.root);
    assert_int_equal(b2.len, b.len);
    assert_memory_equal(b2.base, b.base, b.len);
    tg_buf_dispose(&b2);
    cJSON_Delete(again.root);
    tg_buf_dispose(&b);
    cJSON_Delete(doc.root);
    guard_free(&g);
}

#define ROUND_TRIP(in, out) check_round_trip((in), sizeof(in) - 1, (out), sizeof(out) - 1)
#define SAME(in) ROUND_TRIP(in, in)

/* ---- valid documents ------------------------------------------------------------- */

static void round_trip_documents(void **state)
{
    SAME("{}");
    SAME("[]");
    SAME("\"\"");
    SAME("0");
    SAME("true");
    SAME("false");
    SAME("null");
    SAME("[[],{},[[]],{\"\":{}}]");
    SAME("{\"a\":1,\"b\":[true,false,null],\"c\":{\"d\":\"e\"}}");
    SAME("{\"z\":1,\"a\":2,\"m\":3}"); /* member order is kept, not sorted */
    SAME("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"x\",\"arguments\":{}}}");
    ROUND_TRIP(" \t\r\n{ \"a\" : [ 1 , 2 ] ,\n\"b\"\t:\r{ } } \n\t\r ", "{\"a\":[1,2],\"b\":{}}");
    ROUND_TRIP("[ ]", "[]");
    ROUND_TRIP("{ }", "{}");
}

static void round_trip_numbers_exact(void **state)
{
    /* Numbers print from their original text: nothing is rounded through a double. */
    SAME("12345678901234567890");
    SAME("-12345678901234567890123456789");
    SAME("[0,-0,1.5,-1.5e10,1E+2,1e-2,0.1,3.14159265358979323846264338327950288]");
    SAME("[9007199254740993,1e400,-1e-400,1.0,100e0]");
    SAME("{\"id\":12345678901234567890}");
    /* The double is still there for code that wants a value. */
    struct tg_json_doc doc;
    assert_int_equal(tg_json_parse("[1.5, 12345678901234567890]", strlen("[1.5, 12345678901234567890]"), 8, 1, &doc, NULL, NULL), 0);
    assert_true(cJSON_GetArrayItem(doc.root, 0)->valuedouble == 1.5);
    assert_true(cJSON_GetArrayItem(doc.root, 1)->valuedouble > 1.2e19);
    assert_string_equal(cJSON_GetArrayItem(doc.root, 1)->valuestring, "12345678901234567890");
    cJSON_Delete(doc.root);
}

static void round_trip_strings(void **state)
{
    /* Escapes are decoded; the writer re-escapes only what JSON requires. */
    ROUND_TRIP("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", "\"a\\\"b\\\\c/d\\b\\f\\n\\r\\t\"");
    ROUND_TRIP("\"\\u0041\\u00e9\\u20AC\"", "\"A\xC3\xA9\xE2\x82\xAC\"");
    ROUND_TRIP("\"\\u001f\\u0001\"", "\"\\u001f\\u0001\"");
    ROUND_TRIP("\"\\u007f\"", "\"\x7f\"");
    SAME("\"\x7f\"");
    SAME("\"caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\"");
    SAME("\"\xF4\x8F\xBF\xBF\xED\x9F\xBF\xEE\x80\x80\xC2\x80\"");
    ROUND_TRIP("{\"\\u006b\\n\":\"v\"}", "{\"k\\n\":\"v\"}");
}

static void surrogate_pairs_decode_to_4_bytes(void **state)
{
    static const struct {
        const char *in;
        const char *utf8;
    } v[] = {
        {"\"\\ud83d\\ude00\"", "\xF0\x9F\x98\x80"},     /* U+1F600 */
        {"\"\\uD800\\uDC00\"", "\xF0\x90\x80\x80"},     /* U+10000, first */
        {"\"\\uDBFF\\uDFFF\"", "\xF4\x8F\xBF\xBF"},     /* U+10FFFF, last */
        {"\"x\\uD834\\uDD1Ey\"", "x\xF0\x9D\x84\x9Ey"}, /* U+1D11E between ASCII */
    };
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        struct tg_json_doc doc;
        const char *err = NULL;
        assert_int_equal(tg_json_parse(v[i].in, strlen(v[i].in), 8, 1, &doc, &err, NULL), 0);
        assert_true(cJSON_IsString(doc.root));
        assert_string_equal(doc.root->valuestring, v[i].utf8);
        struct tg_buf b;
        tg_buf_init(&b);
        tg_json_write(&b, doc.root);
        assert_int_equal(b.len, strlen(v[i].utf8) + 2);
        assert_memory_equal(b.base + 1, v[i].utf8, strlen(v[i].utf8));
        tg_buf_dispose(&b);
        cJSON_Delete(doc.root);
    }
}

static void whitespace_allowed(void **state)
{
    ACCEPT(" {}");
    ACCEPT("{} ");
    ACCEPT("\r\n\t {\r\n\t \"a\"\r\n\t :\r\n\t 1\r\n\t }\r\n\t ");
    ACCEPT(" 1 ");
    ACCEPT(" \"s\" ");
    /* Only the four JSON whitespace characters. */
    REJECT("\f{}");
    REJECT("{}\v");
    REJECT("\xC2\xA0{}");
    REJECT("{}\x00");
    REJECT("\xEF\xBB\xBF{}"); /* a BOM is not JSON whitespace */
}

/* ---- rejections -------------------------------------------------------------------- */

static void empty_and_trailing(void **state)
{
    REJECT("");
    REJECT(" ");
    REJECT(" \r\n\t");
    REJECT("{}{}");
    REJECT("{} {}");
    REJECT("1 2");
    REJECT("{}x");
    REJECT("\"a\"\"b\"");
    REJECT("[1],");
    REJECT("{\"a\":1}}");
    REJECT("[1]]");
    REJECT("null,");
    /* err_off points at the first byte that is not allowed. */
    const char *err = NULL;
    size_t off = 0;
    struct tg_json_doc doc;
    assert_int_equal(tg_json_parse("{\"a\":1} x", 9, 8, 1, &doc, &err, &off), TG_EINVAL);
    assert_int_equal(off, 8);
    assert_null(doc.root);
    assert_string_equal(err, "trailing data after JSON value");
}

static void structure_errors(void **state)
{
    REJECT("{");
    REJECT("[");
    REJECT("}");
    REJECT("]");
    REJECT("{\"a\"}");
    REJECT("{\"a\":}");
    REJECT("{\"a\" 1}");
    REJECT("{,}");
    REJECT("[,]");
    REJECT("[1,]");
    REJECT("[,1]");
    REJECT("{\"a\":1,}");
    REJECT("{\"a\":1");
    REJECT("[1 2]");
    REJECT("{\"a\":1 \"b\":2}");
    REJECT("{'a':1}");
    REJECT("{a:1}");
    REJECT("{1:1}");
    REJECT("{null:1}");
    REJECT("['a']");
    REJECT("tru");
    REJECT("True");
    REJECT("nul");
    REJECT("nulll");
    REJECT("falsey");
    REJECT("undefined");
    REJECT("/*c*/{}");
    REJECT("{}//c");
}

static void duplicate_keys(void **state)
{
    struct tg_json_doc doc;
    const char *err = NULL;
    static const char *const dups[] = {
        "{\"a\":1,\"a\":2}",
        "{\"a\":1,\"\\u0061\":2}",            /* equal after decoding */
        "{\"\\u0061\":1,\"a\":2}",
        "{\"\\u00e9\":1,\"\xC3\xA9\":2}",     /* escaped vs raw UTF-8 */
        "{\"\\ud83d\\ude00\":1,\"\xF0\x9F\x98\x80\":2}",
        "{\"a\\/b\":1,\"a/b\":2}",
        "{\"a\":1,\"b\":2,\"a\":3}",
        "{\"x\":{\"b\":1,\"b\":2}}",         /* nested */
        "[{\"b\":1},{\"c\":1,\"c\":1}]",     /* in an array */
        "{\"\":1,\"\":2}",                   /* empty keys */
        "{\"id\":1,\"id\":2}",
    };
    for (size_t i = 0; i < sizeof(dups) / sizeof(dups[0]); i++) {
        err = NULL;
        int r = tg_json_parse(dups[i], strlen(dups[i]), 8, 1, &doc, &err, NULL);
        if (r != TG_EINVAL)
            fail_msg("duplicate keys accepted: %s", dups[i]);
        assert_string_equal(err, "duplicate object key");
    }
    /* Keys that differ only in case, or by a prefix, are different keys. */
    ACCEPT("{\"a\":1,\"A\":2,\"aa\":3,\"a \":4}");
    ACCEPT("{\"a\":{\"a\":{\"a\":1}}}");
    ACCEPT("[{\"a\":1},{\"a\":1}]");
}

/* Without a tree (build = 0, how core/mcp/rewrite.c tg_mcp_restore_id() reads every upstream
 * message) duplicate keys are refused too: which of two "id"s a client keeps
 * must not be up to its JSON library. */
static void duplicate_keys_without_tree(void **state)
{
    static const char *const dups[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"id\":2}",
        "{\"a\":1,\"\\u0061\":2}",
        "{\"x\":{\"b\":1,\"b\":2}}",
        "{\"\\u00e9\":1,\"\xC3\xA9\":2}",
        "{\"a\\/b\":1,\"a/b\":2}",
        "[{\"c\":1},{\"c\":1,\"c\":1}]",
    };
    for (size_t i = 0; i < sizeof(dups) / sizeof(dups[0]); i++) {
        struct tg_json_doc doc;
        const char *err = NULL;
        int r = tg_json_parse(dups[i], strlen(dups[i]), 64, 0, &doc, &err, NULL);
        if (r != TG_EINVAL)
            fail_msg("build=0 accepted duplicate keys (r=%d): %s", r, dups[i]);
    }
}

/* Objects with more than 12 members take the sorted path. */
static void duplicate_keys_many_members(void **state)
{
    struct tg_buf b;
    for (int n = 12; n <= 40; n++) {
        /* n distinct keys: accepted and written back in the original order. */
        tg_buf_init(&b);
        tg_buf_appends(&b, "{");
        for (int i = n - 1; i >= 0; i--)
            tg_buf_appendf(&b, "\"k%d\":%d%s", i, i, i ? "," : "");
        tg_buf_appends(&b, "}");
        check_round_trip(b.base, b.len, b.base, b.len);
        check_accept(b.base, b.len, 64); /* without a tree too (past its 16 in-place keys) */
        /* The same with a duplicate of each key in turn (so every sorted position). */
        for (int dup_at = 0; dup_at < n; dup_at++) {
            struct tg_buf d;
            tg_buf_init(&d);
            tg_buf_appends(&d, "{");
            for (int i = 0; i < n; i++)
                tg_buf_appendf(&d, "\"k%d\":%d,", i, i);
            /* the duplicate written escaped: "k" is \u006b */
            tg_buf_appendf(&d, "\"\\u006b%d\":0}", dup_at);
            for (int build = 0; build <= 1; build++) {
                const char *err = NULL;
                struct tg_json_doc doc;
                int r = tg_json_parse(d.base, d.len, 8, build, &doc, &err, NULL);
                if (r != TG_EINVAL)
                    fail_msg("n=%d build=%d: duplicate of k%d accepted: %.*s", n, build, dup_at, (int)d.len, d.base);
                assert_string_equal(err, "duplicate object key");
            }
            tg_buf_dispose(&d);
        }
        tg_buf_dispose(&b);
    }
    /* Escaped keys, more than fit in place: accepted; every prefix refused and freed (LSan). */
    tg_buf_init(&b);
    tg_buf_appends(&b, "{");
    for (int i = 0; i < 40; i++)
        tg_buf_appendf(&b, "\"\\u006b%d\":{\"\\u0069d\":%d}%s", i, i, i < 39 ? "," : "}");
    check_accept(b.base, b.len, 64);
    for (size_t k = 0; k < b.len; k++)
        check_reject(b.base, k, 64, "prefix of an object with 40 escaped keys");
    tg_buf_dispose(&b);
    /* Keys that sort next to each other but differ. */
    ACCEPT("{\"a\":0,\"b\":0,\"c\":0,\"d\":0,\"e\":0,\"f\":0,\"g\":0,\"h\":0,\"i\":0,\"j\":0,\"k\":0,\"l\":0,"
           "\"m\":0,\"ab\":0,\"aa\":0,\"A\":0}");
}

static void invalid_utf8(void **state)
{
    REJECT("\"\xC0\x80\"");             /* overlong NUL */
    REJECT("\"\xC0\xAF\"");             /* overlong '/' */
    REJECT("\"\xC1\xBF\"");             /* overlong, 2 bytes */
    REJECT("\"\xE0\x80\xAF\"");         /* overlong '/', 3 bytes */
    REJECT("\"\xE0\x9F\xBF\"");         /* overlong U+07FF */
    REJECT("\"\xF0\x80\x80\xAF\"");     /* overlong '/', 4 bytes */
    REJECT("\"\xF0\x8F\xBF\xBF\"");     /* overlong U+FFFF */
    REJECT("\"\xED\xA0\x80\"");         /* encoded surrogate U+D800 */
    REJECT("\"\xED\xAD\xBF\"");         /* U+DB7F */
    REJECT("\"\xED\xB0\x80\"");         /* U+DC00 */
    REJECT("\"\xED\xBF\xBF\"");         /* U+DFFF */
    REJECT("\"\xED\xA0\xBD\xED\xB8\x80\""); /* CESU-8 pair */
    REJECT("\"\xF4\x90\x80\x80\"");     /* U+110000 */
    REJECT("\"\xF5\x80\x80\x80\"");
    REJECT("\"\xF7\xBF\xBF\xBF\"");
    REJECT("\"\xF8\x88\x80\x80\x80\""); /* 5-byte form */
    REJECT("\"\xFC\x84\x80\x80\x80\x80\"");
    REJECT("\"\xFE\"");
    REJECT("\"\xFF\"");
    REJECT("\"\x80\"");                 /* lone continuation bytes */
    REJECT("\"\xBF\"");
    REJECT("\"a\x80z\"");
    REJECT("\"\xC3\"");                 /* truncated sequences, closed by the quote */
    REJECT("\"\xE2\x82\"");
    REJECT("\"\xF0\x9F\x98\"");
    REJECT("\"\xC3");                   /* truncated by the end of input */
    REJECT("\"\xE2\x82");
    REJECT("\"\xF0\x9F\x98");
    REJECT("\"\xC3\x41\"");             /* bad continuation */
    REJECT("\"\xE2\x28\xA1\"");
    REJECT("\"\xE2\x82\x28\"");
    REJECT("\"\xF0\x28\x8C\xBC\"");
    REJECT("\"\xF0\x90\x28\xBC\"");
    REJECT("\"\xF0\x90\x8C\x28\"");
    REJECT("{\"\xC0\x80\":1}");         /* in keys too */
    REJECT("{\"\xED\xA0\x80\":1}");
    REJECT("{\"a\":[\"ok\",\"\xFF\"]}");
    /* The boundaries that are valid. */
    ACCEPT("\"\xC2\x80\xDF\xBF\"");
    ACCEPT("\"\xE0\xA0\x80\xEF\xBF\xBF\"");
    ACCEPT("\"\xED\x9F\xBF\xEE\x80\x80\"");
    ACCEPT("\"\xF0\x90\x80\x80\xF4\x8F\xBF\xBF\"");
    ACCEPT("\"\xEF\xBB\xBF\""); /* U+FEFF inside a string is a character */
}

static void lone_surrogates(void **state)
{
    REJECT("\"\\ud800\"");
    REJECT("\"\\uDBFF\"");
    REJECT("\"\\ud800x\"");
    REJECT("\"\\ud800\\n\"");
    REJECT("\"\\ud800\\u0041\"");
    REJECT("\"\\ud800\\ud800\"");
    REJECT("\"\\ud800\\uE000\"");
    REJECT("\"\\ud800\\");
    REJECT("\"\\ud800\\u");
    REJECT("\"\\ud800\\udc0");
    REJECT("\"\\ud800\\udc0\"");
    REJECT("\"\\udc00\"");
    REJECT("\"\\uDFFF\"");
    REJECT("\"\\udc00\\ud800\""); /* reversed pair */
    REJECT("\"\\udfff\\ud800\"");
    REJECT("\"\\ud800\xED\xB0\x80\""); /* escaped high + raw encoded low */
    REJECT("{\"\\ud800\":1}");
    ACCEPT("\"\\ud800\\udc00\"");
    ACCEPT("\"\\uD7FF\\uE000\\uFFFF\"");
}

static void escapes(void **state)
{
    REJECT("\"\\u0000\"");
    REJECT("\"a\\u0000b\"");
    REJECT("{\"\\u0000\":1}");
    REJECT("\"\\u000\"");
    REJECT("\"\\u00\"");
    REJECT("\"\\u\"");
    REJECT("\"\\uZZZZ\"");
    REJECT("\"\\u12G4\"");
    REJECT("\"\\U0041\"");
    REJECT("\"\\x41\"");
    REJECT("\"\\'\"");
    REJECT("\"\\a\"");
    REJECT("\"\\0\"");
    REJECT("\"\\ \"");
    REJECT("\"\\\"");
    REJECT("\"\\");
    REJECT("\"abc");
    REJECT("\"");
    REJECT("\"\\u00e");
    ACCEPT("\"\\u0001\\uffff\\uFFFE\"");
    ACCEPT("\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"");
}

static void control_chars_in_strings(void **state)
{
    for (int c = 0; c < 0x20; c++) {
        char s[8] = {'"', 'a', (char)c, 'b', '"'};
        check_reject(s, 5, 64, "raw control character");
        char k[16] = {'{', '"', (char)c, '"', ':', '1', '}'};
        check_reject(k, 7, 64, "raw control character in key");
    }
    ACCEPT("\"\x7f\"");
    ACCEPT("\" ~\"");
}

static void number_grammar(void **state)
{
    REJECT("01");
    REJECT("00");
    REJECT("-01");
    REJECT("[01]");
    REJECT("{\"a\":01}");
    REJECT("1.");
    REJECT("[1.]");
    REJECT("1.e5");
    REJECT(".5");
    REJECT("-.5");
    REJECT("-");
    REJECT("[-]");
    REJECT("--1");
    REJECT("+1");
    REJECT("1e");
    REJECT("1E");
    REJECT("1e+");
    REJECT("1e-");
    REJECT("[1e]");
    REJECT("1e1.5");
    REJECT("1ee1");
    REJECT("0x10");
    REJECT("1_000");
    REJECT("1,000");
    REJECT("NaN");
    REJECT("-NaN");
    REJECT("nan");
    REJECT("Infinity");
    REJECT("-Infinity");
    REJECT("inf");
    REJECT("[Infinity]");
    REJECT("{\"a\":NaN}");
    REJECT("- 1");
    REJECT("1 .5");
    ACCEPT("0");
    ACCEPT("-0");
    ACCEPT("-0.0");
    ACCEPT("0e0");
    ACCEPT("0E-0");
    ACCEPT("1e+10");
    ACCEPT("123.456e-789");
    ACCEPT("[0,1,-1,10,0.5,-0.5]");
}

static void depth_limit(void **state)
{
    /* The root container is depth 1; scalars do not add depth. */
    ACCEPT_D("[[[]]]", 3);
    ACCEPT_D("[[[1]]]", 3);
    ACCEPT_D("{\"a\":{\"b\":{\"c\":1}}}", 3);
    ACCEPT_D("[{\"a\":[]}]", 3);
    REJECT_D("[[[[]]]]", 3);
    REJECT_D("{\"a\":{\"b\":{\"c\":{}}}}", 3);
    REJECT_D("[{\"a\":[{}]}]", 3);
    ACCEPT_D("[]", 1);
    ACCEPT_D("1", 1);
    REJECT_D("[[]]", 1);
    struct tg_json_doc doc;
    const char *err = NULL;
    assert_int_equal(tg_json_parse("[[[[]]]]", 8, 3, 1, &doc, &err, NULL), TG_EINVAL);
    assert_string_equal(err, "nesting too deep");

    /* Exactly at and one over a larger limit, for both shapes. */
    for (int limit = 10; limit <= 200; limit += 190) {
        for (int extra = 0; extra <= 1; extra++) {
            int d = limit + extra;
            struct tg_buf a, o;
            tg_buf_init(&a);
            tg_buf_init(&o);
            for (int i = 0; i < d; i++) {
                tg_buf_appends(&a, "[");
                tg_buf_appends(&o, "{\"k\":");
            }
            tg_buf_appends(&o, "0");
            for (int i = 0; i < d; i++) {
                tg_buf_appends(&a, "]");
                tg_buf_appends(&o, "}");
            }
            if (extra) {
                check_reject(a.base, a.len, limit, "array nesting one over the limit");
                check_reject(o.base, o.len, limit, "object nesting one over the limit");
            } else {
                check_accept(a.base, a.len, limit);
                check_accept(o.base, o.len, limit);
            }
            tg_buf_dispose(&a);
            tg_buf_dispose(&o);
        }
    }

    /* Very deep input is refused at the limit without recursing further. */
    size_t n = 1000000;
    char *deep = malloc(n);
    memset(deep, '[', n);
    check_reject(deep, n, 64, "a million brackets");
    free(deep);
}

/* ---- id_raw ------------------------------------------------------------------------- */

static void expect_id(const char *in, const char *id)
{
    for (int build = 0; build <= 1; build++) {
        struct tg_json_doc doc;
        const char *err = NULL;
        struct guarded g = guard_copy(in, strlen(in));
        int r = tg_json_parse(g.p, strlen(in), 64, build, &doc, &err, NULL);
        if (r != 0)
            fail_msg("rejected (%s): %s", err, in);
        if (id == NULL) {
            if (doc.id_raw.len != 0)
                fail_msg("build=%d: %s: id_raw is \"%.*s\", expected none", build, in, (int)doc.id_raw.len,
                         doc.id_raw.ptr);
        } else {
            if (doc.id_raw.len != strlen(id) || memcmp(doc.id_raw.ptr, id, doc.id_raw.len) != 0)
                fail_msg("build=%d: %s: id_raw is \"%.*s\", expected \"%s\"", build, in, (int)doc.id_raw.len,
                         doc.id_raw.ptr ? doc.id_raw.ptr : "", id);
            /* The span points into the input, at the token itself. */
            assert_true(doc.id_raw.ptr >= g.p && doc.id_raw.ptr + doc.id_raw.len <= g.p + strlen(in));
            assert_int_equal((size_t)(doc.id_raw.ptr - g.p), (size_t)(strstr(in, id) - in));
        }
        cJSON_Delete(doc.root);
        guard_free(&g);
    }
}

static void id_raw_span(void **state)
{
    expect_id("{\"jsonrpc\":\"2.0\",\"id\":12345678901234567890,\"method\":\"x\"}", "12345678901234567890");
    expect_id("{\"id\":1}", "1");
    expect_id("{\"id\":-0}", "-0");
    expect_id("{\"id\" : -17 }", "-17");
    expect_id("{\"id\":1.5e3}", "1.5e3");
    expect_id("{\"id\":\"a\\\"b\\u0041\\\\\"}", "\"a\\\"b\\u0041\\\\\"");
    expect_id("{\"id\":\"\"}", "\"\"");
    expect_id("{\"id\":null}", "null");
    expect_id("{\"id\":{\"id\":1}}", "{\"id\":1}");
    expect_id("{\"id\":[1,{\"id\":2}]}", "[1,{\"id\":2}]");
    expect_id("{\"\\u0069d\":3}", "3"); /* the key is compared after decoding */
    expect_id("{\"i\\u0064\":\"x\"}", "\"x\"");
    /* Nested "id" members are not the message's id. */
    expect_id("{\"params\":{\"id\":5},\"id\":7}", "7");
    expect_id("{\"id\":7,\"params\":{\"id\":5}}", "7");
    expect_id("{\"params\":{\"id\":5}}", NULL);
    expect_id("{\"params\":[{\"id\":5}],\"result\":{\"x\":{\"id\":6}}}", NULL);
    expect_id("[{\"id\":1}]", NULL);
    expect_id("[[{\"id\":1}],{\"id\":2}]", NULL);
    expect_id("\"id\"", NULL);
    expect_id("{\"idx\":1,\"i\":2,\"ID\":3,\"Id\":4,\" id\":5}", NULL);
    expect_id("{}", NULL);
    expect_id("5", NULL);
}

static void id_raw_cleared_on_error(void **state)
{
    struct tg_json_doc doc;
    doc.id_raw = TG_SLICE("stale");
    doc.root = (cJSON *)&doc; /* must be overwritten */
    assert_int_equal(tg_json_parse("{\"id\":1,", 8, 8, 1, &doc, NULL, NULL), TG_EINVAL);
    assert_null(doc.root);
    assert_int_equal(doc.id_raw.len, 0);
}

/* ---- over-reads ------------------------------------------------------------------- */

static const char full_doc[] =
    "{\"jsonrpc\":\"2.0\",\"id\":12345678901234567890,\"method\":\"tools/call\",\"params\":{\"name\":"
    "\"caf\xC3\xA9\\u00e9\\ud83d\\ude00\xF0\x9F\x98\x80\",\"arguments\":{\"a\":[true,false,null,-0.5e-3,"
    "1E+2,0,\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u0001\"],\"b\":{},\"c\":[],\"d\":\"\xE2\x82\xAC\",\"e\":-12}}}";

static void every_prefix_rejected(void **state)
{
    size_t n = sizeof(full_doc) - 1;
    check_accept(full_doc, n, 64);
    for (size_t k = 0; k < n; k++) {
        char why[64];
        snprintf(why, sizeof(why), "prefix of %zu bytes", k);
        check_reject(full_doc, k, 64, why);
    }
    /* Each prefix of each rejected token as well: no read past the end either way. */
    static const char *const pieces[] = {"\"\\ud83d\\ude00\"", "\"\\u00e9\"", "\"\xF0\x9F\x98\x80\"", "-1.5e+10",
                                         "true", "false", "null", "{\"a\":[1]}"};
    for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
        size_t pn = strlen(pieces[i]);
        check_accept(pieces[i], pn, 64);
        for (size_t k = 0; k < pn; k++) {
            /* A prefix of a number can itself be a number ("-1.5"): only check that it does not crash. */
            struct tg_json_doc doc;
            for (int build = 0; build <= 1; build++)
                (void)parse_guarded(pieces[i], k, 64, build, &doc, NULL, NULL);
            if (pieces[i][0] != '-')
                check_reject(pieces[i], k, 64, "prefix of a token");
        }
    }
}

static void guard_page_on_bad_input(void **state)
{
    /* Inputs whose last byte starts something that needs more bytes. */
    static const char *const tails[] = {"\"\\", "\"\\u", "\"\\u12", "\"\\ud800", "\"\\ud800\\", "\"\\ud800\\u",
                                        "\"\\ud800\\udc", "\"\xC3", "\"\xE2\x82", "\"\xF0\x9F\x98", "t", "tr",
                                        "fals", "n", "-", "1e", "1e+", "1.", "{\"a\"", "{\"a\":", "[1,", "{",
                                        "[", "\""};
    for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++)
        check_reject(tails[i], strlen(tails[i]), 64, "needs more bytes");
}

/* ---- writer -------------------------------------------------------------------------- */

static void writer_plain_cjson(void **state)
{
    /* Trees built by code (not parsed) print their doubles. NaN, infinities and huge
     * values must not reach a (long long) conversion, which is undefined behaviour
     * (clang's -fsanitize=undefined reports it; GCC needs -fsanitize=float-cast-overflow). */
    cJSON *a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber(3));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(-2));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(0.5));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(0.0 / 0.0));
    cJSON_AddItemToArray(a, cJSON_CreateString("q\"\x01"));
    cJSON_AddItemToArray(a, tg_json_number_raw("12345678901234567890", 20));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "k\n", cJSON_CreateNull());
    cJSON_AddItemToArray(a, o);
    struct tg_buf b;
    tg_buf_init(&b);
    tg_json_write(&b, a);
    tg_buf_append(&b, "", 1);
    assert_string_equal(b.base, "[3,-2,0.5,null,\"q\\\"\\u0001\",12345678901234567890,{\"k\\n\":null}]");
    tg_buf_dispose(&b);
    cJSON_Delete(a);
    a = cJSON_CreateArray();
    cJSON_AddItemToArray(a, cJSON_CreateNumber(1.0 / 0.0));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(-1.0 / 0.0));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(1e300));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(-9.5e18));
    cJSON_AddItemToArray(a, cJSON_CreateNumber(8e15));
    tg_buf_init(&b);
    tg_json_write(&b, a);
    tg_buf_append(&b, "", 1);
    assert_string_equal(b.base, "[null,null,1.0000000000000001e+300,-9.5e+18,8000000000000000]");
    tg_buf_dispose(&b);
    cJSON_Delete(a);
}

static void writer_string_escapes(void **state)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_json_write_string(&b, "a\0b\x1f\x7f\xC3\xA9\\\"/", 10);
    tg_buf_append(&b, "", 1);
    assert_string_equal(b.base, "\"a\\u0000b\\u001f\x7f\xC3\xA9\\\\\\\"/\"");
    b.len = 0;
    tg_json_write_string(&b, "", 0);
    assert_int_equal(b.len, 2);
    assert_memory_equal(b.base, "\"\"", 2);
    /* Long strings (the writer goes sixteen bytes a step, then reads the sixteen that end the
     * string again) with a byte to escape at every place, against a byte-at-a-time escaper;
     * bytes over 0x7f and 0x7f itself are kept as they are. Every other round has few bytes to
     * escape, so that the first of them is often past the whole sixteen-byte steps. */
    static const unsigned char pick[] = {'a', 'Z', ' ', '/', 0x7f, 0x80, 0xC3, 0xff, '"', '\\', '\n', 0x00, 0x1f, 0x20, 0x1e};
    struct tg_buf want;
    tg_buf_init(&want);
    uint64_t st = 0x243f6a8885a308d3ULL;
    for (int round = 0; round < 4000; round++) {
        unsigned char in[80];
        size_t n = tg_unit_rnd(&st, sizeof(in) + 1);
        unsigned sparse = round % 2 ? 4 : 40;
        for (size_t i = 0; i < n; i++)
            in[i] = tg_unit_rnd(&st, sparse) == 0 ? pick[tg_unit_rnd(&st, sizeof(pick))] : (unsigned char)('a' + tg_unit_rnd(&st, 26));
        want.len = 0;
        tg_buf_append(&want, "\"", 1);
        for (size_t i = 0; i < n; i++) {
            char e[8];
            unsigned c = in[i];
            if (c == '"' || c == '\\')
                snprintf(e, sizeof(e), "\\%c", c);
            else if (c == '\n')
                snprintf(e, sizeof(e), "\\n");
            else if (c < 0x20)
                snprintf(e, sizeof(e), "\\u%04x", c);
            else
                snprintf(e, sizeof(e), "%c", c);
            tg_buf_append(&want, e, strlen(e)); /* a 0 byte was escaped: e is a C string */
        }
        tg_buf_append(&want, "\"", 1);
        b.len = 0;
        tg_json_write_string(&b, (const char *)in, n);
        if (b.len != want.len || memcmp(b.base, want.base, b.len) != 0)
            fail_msg("round %d: %zu bytes written, %zu wanted", round, b.len, want.len);
    }
    tg_buf_dispose(&want);
    tg_buf_dispose(&b);
}

/* ---- the fast path without a tree (core/base/json_scan.c) against the strict parser ---------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static unsigned rnd(unsigned n)
{
    return tg_unit_rnd(&rng_state, n);
}

static void gen_value(struct tg_buf *b, int depth);

static void gen_string(struct tg_buf *b)
{
    static const char *const pieces[] = {"id", "method", "error", "result", "a", "b", "x y", "", "\\n", "\\\"",
                                         "\xc3\xa9", "\\u0041", "2.0", "tools/call", "ok", "\x7f",
                                         "the quick brown fox jumps over", "{[,:]} \"", "notifications/progress"};
    tg_buf_append(b, "\"", 1);
    int n = (int)rnd(3);
    for (int i = 0; i < n; i++)
        tg_buf_appends(b, pieces[rnd(sizeof(pieces) / sizeof(*pieces))]);
    tg_buf_append(b, "\"", 1);
}

static void gen_key(struct tg_buf *b)
{
    static const char *const keys[] = {"\"id\"", "\"method\"", "\"error\"", "\"result\"", "\"params\"",
                                       "\"jsonrpc\"", "\"a\"", "\"b\"", "\"i\\u0064\"", "\"\"",
                                       "\"progressToken\"", "\"a long key, with: [brackets]\""};
    tg_buf_appends(b, keys[rnd(sizeof(keys) / sizeof(*keys))]);
}

static void gen_space(struct tg_buf *b)
{
    static const char *const sp[] = {"", "", "", " ", "  ", "\n", "\t"};
    tg_buf_appends(b, sp[rnd(sizeof(sp) / sizeof(*sp))]);
}

static void gen_value(struct tg_buf *b, int depth)
{
    static const char *const scalars[] = {"0", "-1", "12.5e3", "1E+2", "-0.0", "01", "1.", "-", "true", "false",
                                          "null", "tru", "nul", "7", "123456789012345678901234567890"};
    unsigned k = depth > 6 ? rnd(2) + 2 : rnd(5);
    gen_space(b);
    if (k == 0 || k == 1) {
        int obj = k == 0;
        tg_buf_append(b, obj ? "{" : "[", 1);
        int n = (int)rnd(5);
        for (int i = 0; i < n; i++) {
            if (i)
                tg_buf_append(b, ",", 1);
            if (obj) {
                gen_space(b);
                gen_key(b);
                gen_space(b);
                tg_buf_append(b, ":", 1);
            }
            gen_value(b, depth + 1);
        }
        gen_space(b);
        tg_buf_append(b, obj ? "}" : "]", 1);
    } else if (k == 2) {
        gen_string(b);
    } else {
        tg_buf_appends(b, scalars[rnd(sizeof(scalars) / sizeof(*scalars))]);
    }
    gen_space(b);
}

/* What the fast path accepts, the strict parser accepts, with the same four slices; and on
 * plain compact messages (what upstreams send) it does accept. Mutations (a byte changed,
 * dropped or cut) make sure the invalid side is walked too. */
static void fast_scan_matches_strict(void **state)
{
    (void)state;
    unsigned accepted = 0, agreed_valid = 0, total = 0, accepted_long = 0;
    for (int round = 0; round < 60000; round++) {
        struct tg_buf b;
        tg_buf_init(&b);
        if (rnd(2)) {
            tg_buf_append(&b, "{", 1);
            /* some with many members, under keys of their own (mostly), longer than a few
             * 64-byte blocks */
            int many = rnd(4) == 0;
            int n = (int)rnd(many ? 24 : 6);
            for (int i = 0; i < n; i++) {
                if (i)
                    tg_buf_append(&b, ",", 1);
                if (many && rnd(8) != 0) {
                    char k[32];
                    tg_buf_append(&b, k, (size_t)snprintf(k, sizeof k, "\"member %d\"", i));
                } else {
                    gen_key(&b);
                }
                tg_buf_append(&b, ":", 1);
                if (many && rnd(8) != 0) {
                    static const char *const clean[] = {
                        "\"words with spaces, {[,:]} inside\"", "-12.5e+3", "true", "null", " 0 ",
                        "[1,\"a b\",{\"c\":null,\"d\":[[],{}]}]", "{\"id\":1,\"method\":\"m\"}", "\"\""};
                    tg_buf_appends(&b, clean[rnd(sizeof(clean) / sizeof(*clean))]);
                } else {
                    gen_value(&b, 1);
                }
            }
            tg_buf_append(&b, "}", 1);
        } else {
            gen_value(&b, 0);
        }
        unsigned m = rnd(4);
        if (m == 1 && b.len > 0)
            b.base[rnd((unsigned)b.len)] = "{}[],:\" a0-e.\\x"[rnd(16)];
        else if (m == 2 && b.len > 1)
            b.len = rnd((unsigned)b.len);
        int depth = (int)rnd(8) + 1;
        struct tg_json_doc fast, strict;
        int rf = tg__json_scan_fast(b.base ? b.base : "", b.len, depth, &fast);
        int rs = tg_json_parse(b.base ? b.base : "", b.len, depth, 1, &strict, NULL, NULL);
        total++;
        if (rs == 0)
            agreed_valid++;
        if (rf == 0 && b.len > 128)
            accepted_long++;
        if (rf == 0) {
            accepted++;
            if (rs != 0)
                fail_msg("fast path accepted what the strict parser refuses: %.*s", (int)b.len, b.base);
            const struct tg_slice *f[] = {&fast.id_raw, &fast.method_raw, &fast.error_raw, &fast.result_raw};
            const struct tg_slice *t[] = {&strict.id_raw, &strict.method_raw, &strict.error_raw, &strict.result_raw};
            for (int j = 0; j < 4; j++)
                if (f[j]->ptr != t[j]->ptr || f[j]->len != t[j]->len)
                    fail_msg("slice %d differs on %.*s", j, (int)b.len, b.base);
        }
        cJSON_Delete(strict.root);
        tg_buf_dispose(&b);
    }
    /* the generator is not degenerate: both sides are walked */
    assert_true(accepted > total / 10);
    assert_true(agreed_valid > accepted);
    print_message("fast path: %u of %u accepted, %u of them over 128 bytes\n", accepted, total, accepted_long);
    assert_true(accepted_long > total / 200);
    /* the messages upstreams send take the fast path */
    const char *plain[] = {
        "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":7,\"progress\":1,\"total\":200}}",
        "{\"jsonrpc\":\"2.0\",\"id\":12,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"ok\"}]}}",
        "{\"jsonrpc\":\"2.0\",\"id\":\"a b\",\"error\":{\"code\":-32000,\"message\":\"no\"}}",
    };
    for (size_t i = 0; i < sizeof(plain) / sizeof(*plain); i++) {
        struct tg_json_doc d;
        assert_int_equal(tg__json_scan_fast(plain[i], strlen(plain[i]), 64, &d), 0);
    }
}

/* The fast path's key filter and its sixteen-byte string search: keys that share a filter bit
 * (same length and first byte) but differ are taken, a duplicate is refused however many keys
 * stand between, and a string's closing quote is found at every offset around the block edge
 * and in the bytes too few for a block at the end. */
static void fast_scan_keys_and_strings(void **state)
{
    (void)state;
    struct tg_json_doc d;
    const char *ok[] = {
        "{\"ab\":1,\"ac\":2,\"ad\":3}",
        "{\"\":1,\"a\":2,\"b\":{\"\":3}}",
        "{\"k\":{\"x\":1},\"x\":{\"k\":2}}",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++)
        assert_int_equal(tg__json_scan_fast(ok[i], strlen(ok[i]), 64, &d), 0);
    const char *dup[] = {
        "{\"ab\":1,\"ac\":2,\"ab\":3}",
        "{\"\":1,\"\":2}",
        "{\"a\":{\"q\":1,\"r\":2,\"q\":3}}",
        "{\"a\":1,\"b\":2,\"c\":3,\"d\":4,\"e\":5,\"f\":6,\"a\":7}",
    };
    for (size_t i = 0; i < sizeof(dup) / sizeof(*dup); i++) {
        assert_int_equal(tg__json_scan_fast(dup[i], strlen(dup[i]), 64, &d), -1);
        assert_int_not_equal(tg_json_parse(dup[i], strlen(dup[i]), 64, 1, &d, NULL, NULL), 0);
        cJSON_Delete(d.root);
    }
    for (size_t len = 0; len < 70; len++) {
        char msg[128];
        int n = snprintf(msg, sizeof msg, "{\"method\":\"%.*s\"}", (int)len,
                         "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyz");
        assert_int_equal(tg__json_scan_fast(msg, (size_t)n, 64, &d), 0);
        assert_int_equal(d.method_raw.len, len + 2);
        /* the closing quote cut off: no string end is found past the input */
        assert_int_equal(tg__json_scan_fast(msg, (size_t)n - 2, 64, &d), -1);
    }
}

/* tg_json_get() answers as cJSON_GetObjectItemCaseSensitive() does: first match, case counts,
 * keys that share a first byte, the empty key, an array or a scalar, NULL. */
static void get_matches_cjson(void **state)
{
    (void)state;
    cJSON *o = cJSON_Parse("{\"a\":1,\"ab\":2,\"A\":3,\"\":4,\"abc\":5,\"x\":[1,2]}");
    cJSON_AddItemToObject(o, "ab", cJSON_CreateNumber(6)); /* a second "ab": the first wins */
    const char *keys[] = {"a", "ab", "A", "", "abc", "abd", "b", "x", "AB"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(*keys); i++)
        assert_ptr_equal(tg_json_get(o, keys[i]), cJSON_GetObjectItemCaseSensitive(o, keys[i]));
    assert_int_equal(tg_json_get(o, "ab")->valueint, 2);
    cJSON *arr = tg_json_get(o, "x");
    assert_null(tg_json_get(arr, "a"));
    assert_null(tg_json_get(tg_json_get(o, "a"), "a"));
    assert_null(tg_json_get(NULL, "a"));
    cJSON_Delete(o);
}

/* The fast path on one input, against a guard page: if it accepts, the strict parser accepts with
 * the same four slices; returns what the fast path said. */
static int fast_vs_strict(const char *s, size_t n)
{
    struct guarded g = guard_copy(s, n);
    struct tg_json_doc fast, strict;
    int rf = tg__json_scan_fast(g.p, n, 64, &fast);
    int rs = tg_json_parse(g.p, n, 64, 1, &strict, NULL, NULL);
    if (rf == 0) {
        if (rs != 0)
            fail_msg("fast path accepted what the strict parser refuses: %.*s", (int)n, s);
        const struct tg_slice *f[] = {&fast.id_raw, &fast.method_raw, &fast.error_raw, &fast.result_raw};
        const struct tg_slice *t[] = {&strict.id_raw, &strict.method_raw, &strict.error_raw, &strict.result_raw};
        for (int j = 0; j < 4; j++)
            if (f[j]->ptr != t[j]->ptr || f[j]->len != t[j]->len)
                fail_msg("slice %d differs on %.*s", j, (int)n, s);
    }
    cJSON_Delete(strict.root);
    guard_free(&g);
    return rf;
}

/* Inputs whose length, strings and numbers fall on every side of the 16- and 64-byte edges and of
 * the largest input the fast path copies (FAST_COPY, 4096): taken when valid, refused when cut,
 * with a stray byte after them, or with a quote left open; strings holding structural bytes; a
 * quote as the very last byte; spaces between every token. */
static void fast_scan_block_edges(void **state)
{
    (void)state;
    static const size_t lens[] = {15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097, 4200};
    char *msg = malloc(8192);
    assert_non_null(msg);
    for (size_t li = 0; li < sizeof(lens) / sizeof(*lens); li++) {
        size_t len = lens[li];
        /* {"method":"xxx...x"}: the string's closing quote at len - 2 */
        int h = snprintf(msg, 64, "{\"method\":\"");
        memset(msg + h, 'x', len - (size_t)h - 2);
        memcpy(msg + len - 2, "\"}", 2);
        assert_int_equal(fast_vs_strict(msg, len), 0);
        for (size_t cut = 1; cut < 4; cut++)
            assert_int_equal(fast_vs_strict(msg, len - cut), -1);
        /* structural bytes and spaces inside the string, at every offset near the end */
        for (size_t at = (size_t)h; at < len - 2; at += at + 80 < len ? 61 : 1) {
            char keep = msg[at];
            for (const char *c = "{}[],: "; *c; c++) {
                msg[at] = *c;
                assert_int_equal(fast_vs_strict(msg, len), 0);
            }
            msg[at] = '"'; /* now a second string after the first: refused */
            assert_int_equal(fast_vs_strict(msg, len), -1);
            msg[at] = keep;
        }
        /* a number to the last byte before the brace: {"id":1111...1} */
        h = snprintf(msg, 64, "{\"id\":");
        memset(msg + h, '1', len - (size_t)h - 1);
        msg[len - 1] = '}';
        assert_int_equal(fast_vs_strict(msg, len), 0);
        msg[len - 3] = 'x'; /* a stray byte inside the number */
        assert_int_equal(fast_vs_strict(msg, len), -1);
        msg[len - 3] = '.';
        assert_int_equal(fast_vs_strict(msg, len), 0);
        msg[len - 2] = 'e'; /* 1.e...: refused, an exponent with no digit */
        assert_int_equal(fast_vs_strict(msg, len), -1);
        /* a whole string, its quote the last byte; then left open */
        memset(msg, 'y', len);
        msg[0] = msg[len - 1] = '"';
        assert_int_equal(fast_vs_strict(msg, len), 0);
        msg[len - 1] = 'y';
        assert_int_equal(fast_vs_strict(msg, len), -1);
        msg[len - 1] = ' ';
        assert_int_equal(fast_vs_strict(msg, len), -1);
        /* a valid value, then spaces to the end, then a stray quote at the end */
        memset(msg, ' ', len);
        memcpy(msg + 3, "[1,{}]", 6);
        assert_int_equal(fast_vs_strict(msg, len), 0);
        msg[len - 1] = '"';
        assert_int_equal(fast_vs_strict(msg, len), -1);
        msg[len - 1] = '1';
        assert_int_equal(fast_vs_strict(msg, len), -1);
    }
    /* spaces between every token, and around the whole */
    const char *spaced = "  { \"jsonrpc\" : \"2.0\" , \"id\" : 7 , \"result\" : { \"a\" : [ 1 , true , null , "
                         "\"x y\" , [ ] , { } ] } , \"method\" : \"m\"  }  ";
    assert_int_equal(fast_vs_strict(spaced, strlen(spaced)), 0);
    struct tg_json_doc d;
    assert_int_equal(tg__json_scan_fast(spaced, strlen(spaced), 64, &d), 0);
    assert_int_equal(d.id_raw.len, 1);
    assert_int_equal(d.method_raw.len, 3);
    assert_true(d.result_raw.len > 20 && d.result_raw.ptr[0] == '{' && d.result_raw.ptr[d.result_raw.len - 1] == '}');
    /* depth counted as before: max_depth containers are taken, one more is not */
    const char *deep = "[[[[{\"a\":[]}]]]]";
    assert_int_equal(tg__json_scan_fast(deep, strlen(deep), 6, &d), 0);
    assert_int_equal(tg__json_scan_fast(deep, strlen(deep), 5, &d), -1);
    free(msg);
}

/* params._meta as bytes to cut: whenever the root's params object has a "_meta" member, the
 * parse gives the span, and the input without it parses to the same tree less that member
 * (whitespace, its place among the others, escapes, another "_meta" elsewhere); never without. */
static void params_meta_cut(void **state)
{
    (void)state;
    static const char *const pkeys[] = {"\"a\"", "\"_meta\"", "\"_meta\"", "\"b\"", "\"progressToken\"", "\"_me\\u0074a\"",
                                        "\"_metax\""};
    unsigned cut = 0, checked = 0;
    for (int round = 0; round < 20000; round++) {
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_append(&b, "{", 1);
        gen_space(&b);
        int other = (int)rnd(3); /* another root member with a "_meta" at depth 2: before, after, none */
        if (other == 1)
            tg_buf_appends(&b, "\"x\":{\"_meta\":{}},");
        tg_buf_appends(&b, "\"id\":1,");
        gen_space(&b);
        tg_buf_appends(&b, "\"params\"");
        gen_space(&b);
        tg_buf_appends(&b, ":");
        gen_space(&b);
        if (rnd(8) == 0) {
            gen_value(&b, 5); /* not always an object */
        } else {
            tg_buf_append(&b, "{", 1);
            int n = (int)rnd(4);
            for (int i = 0; i < n; i++) {
                if (i)
                    tg_buf_append(&b, ",", 1);
                gen_space(&b);
                tg_buf_appends(&b, pkeys[rnd(sizeof(pkeys) / sizeof(*pkeys))]);
                gen_space(&b);
                tg_buf_append(&b, ":", 1);
                if (rnd(2))
                    tg_buf_appends(&b, "{\"_meta\":{\"io.x\":\"2026\"},\"k\":[1,{\"_meta\":2}]}");
                else
                    gen_value(&b, 5);
            }
            gen_space(&b);
            tg_buf_append(&b, "}", 1);
        }
        gen_space(&b);
        if (other == 2)
            tg_buf_appends(&b, ",\"x\":{\"_meta\":{}}");
        tg_buf_append(&b, "}", 1);
        struct tg_json_doc doc;
        if (tg_json_parse(b.base, b.len, 64, 1, &doc, NULL, NULL) != 0) {
            tg_buf_dispose(&b);
            continue;
        }
        checked++;
        cJSON *params = cJSON_GetObjectItemCaseSensitive(doc.root, "params");
        cJSON *meta = cJSON_IsObject(params) ? cJSON_GetObjectItemCaseSensitive(params, "_meta") : NULL;
        if (meta == NULL) {
            if (doc.params_meta.len != 0)
                fail_msg("a cut without params._meta: %.*s", (int)b.len, b.base);
        } else {
            if (doc.params_meta.len == 0)
                fail_msg("no cut for params._meta: %.*s", (int)b.len, b.base);
            cut++;
            struct tg_buf rest, want, got;
            tg_buf_init(&rest);
            tg_buf_init(&want);
            tg_buf_init(&got);
            size_t off = (size_t)(doc.params_meta.ptr - b.base);
            tg_buf_append(&rest, b.base, off);
            tg_buf_append(&rest, b.base + off + doc.params_meta.len, b.len - off - doc.params_meta.len);
            cJSON_Delete(cJSON_DetachItemViaPointer(params, meta));
            tg_json_write(&want, doc.root);
            struct tg_json_doc again;
            if (tg_json_parse(rest.base, rest.len, 64, 1, &again, NULL, NULL) != 0)
                fail_msg("%.*s less the cut does not parse: %.*s", (int)b.len, b.base, (int)rest.len, rest.base);
            tg_json_write(&got, again.root);
            if (got.len != want.len || memcmp(got.base, want.base, got.len) != 0)
                fail_msg("%.*s less the cut: %.*s, want %.*s", (int)b.len, b.base, (int)got.len, got.base,
                         (int)want.len, want.base);
            cJSON_Delete(again.root);
            tg_buf_dispose(&rest);
            tg_buf_dispose(&want);
            tg_buf_dispose(&got);
        }
        cJSON_Delete(doc.root);
        /* without a tree: no cut */
        assert_int_equal(tg_json_parse(b.base, b.len, 64, 0, &doc, NULL, NULL), 0);
        assert_int_equal(doc.params_meta.len, 0);
        tg_buf_dispose(&b);
    }
    assert_true(cut > 1000 && checked - cut > 1000);
}

/* ---- canonical JSON (json_canon.c) ------------------------------------------------------ */

static char *canon_of(const char *text)
{
    struct tg_json_doc doc;
    assert_int_equal(tg_json_parse(text, strlen(text), 64, 1, &doc, NULL, NULL), 0);
    struct tg_buf b;
    tg_buf_init(&b);
    tg_json_canon(&b, doc.root);
    cJSON_Delete(doc.root);
    char *s = strndup(b.base ? b.base : "", b.len);
    tg_buf_dispose(&b);
    return s;
}

static void canon_expect(const char *in, const char *want)
{
    char *got = canon_of(in);
    char shown[256];
    int same = strcmp(got, want) == 0;
    snprintf(shown, sizeof(shown), "%s", got);
    free(got);
    if (!same)
        fail_msg("canonical form of %s: got %s, want %s", in, shown, want);
}

static void canonical_forms(void **state)
{
    (void)state;
    /* members sorted, whitespace gone, nested too */
    canon_expect("{ \"b\" : 1 , \"a\" : {\"z\":[3, 2], \"y\": \"x\"} }", "{\"a\":{\"y\":\"x\",\"z\":[3,2]},\"b\":1}");
    /* one number, many spellings */
    const char *ones[] = {"1", "1.0", "1e0", "10e-1", "0.1e1", "1.000", "100E-2"};
    for (size_t i = 0; i < sizeof(ones) / sizeof(ones[0]); i++)
        canon_expect(ones[i], "1");
    canon_expect("-0", "0");
    canon_expect("-0.0e5", "0");
    canon_expect("0.10", "0.1");
    canon_expect("1e2", "100");
    canon_expect("-12.500", "-12.5");
    canon_expect("0.000001", "0.000001");
    canon_expect("1e-7", "1e-7");
    canon_expect("123e-9", "1.23e-7");
    canon_expect("1e20", "100000000000000000000");
    canon_expect("1e21", "1e21");
    canon_expect("1e400", "1e400");
    /* no rounding: integers a double cannot tell apart stay apart */
    canon_expect("9007199254740993", "9007199254740993");
    canon_expect("9007199254740992", "9007199254740992");
    /* strings and literals as written, escapes normalised */
    canon_expect("[\"\\u0041\", true, null, false]", "[\"A\",true,null,false]");
    /* the same value hashes the same; another value does not */
    struct tg_json_doc a, b, c;
    const char *ta = "{\"n\": 1.0, \"s\": [ \"x\" ]}", *tb = "{\"s\":[\"x\"],\"n\":1}", *tc = "{\"s\":[\"x\"],\"n\":2}";
    assert_int_equal(tg_json_parse(ta, strlen(ta), 64, 1, &a, NULL, NULL), 0);
    assert_int_equal(tg_json_parse(tb, strlen(tb), 64, 1, &b, NULL, NULL), 0);
    assert_int_equal(tg_json_parse(tc, strlen(tc), 64, 1, &c, NULL, NULL), 0);
    assert_true(tg_json_canon_hash(a.root, 7) == tg_json_canon_hash(b.root, 7));
    assert_true(tg_json_canon_hash(a.root, 7) != tg_json_canon_hash(b.root, 8));
    assert_true(tg_json_canon_hash(a.root, 7) != tg_json_canon_hash(c.root, 7));
    uint8_t d1[32], d2[32];
    tg_json_canon_sha256(a.root, d1);
    tg_json_canon_sha256(b.root, d2);
    assert_memory_equal(d1, d2, 32);
    cJSON_Delete(a.root);
    cJSON_Delete(b.root);
    cJSON_Delete(c.root);
    /* strings: short ones hash by their bytes, long ones by their text; either way one value, one
     * hash, and a string never hashes as the number or the literal it spells */
    char longs[400];
    memset(longs, 'x', sizeof(longs) - 1);
    longs[sizeof(longs) - 1] = '\0';
    cJSON *s1 = cJSON_CreateString("tenant-a"), *s2 = cJSON_CreateString("tenant-a"), *s3 = cJSON_CreateString("1");
    cJSON *l1 = cJSON_CreateString(longs), *l2 = cJSON_CreateString(longs), *one = cJSON_CreateNumber(1);
    assert_true(tg_json_canon_hash(s1, 3) == tg_json_canon_hash(s2, 3));
    assert_true(tg_json_canon_hash(l1, 3) == tg_json_canon_hash(l2, 3));
    assert_true(tg_json_canon_hash(s1, 3) != tg_json_canon_hash(l1, 3));
    assert_true(tg_json_canon_hash(s3, 3) != tg_json_canon_hash(one, 3));
    cJSON_Delete(s1);
    cJSON_Delete(s2);
    cJSON_Delete(s3);
    cJSON_Delete(l1);
    cJSON_Delete(l2);
    cJSON_Delete(one);
    /* as written: members sorted, but numbers keep their text (1.0 is not 1) */
    {
        struct tg_json_doc w;
        const char *tw = "{\"b\": 1.0, \"a\": [ 1e0 ]}";
        assert_int_equal(tg_json_parse(tw, strlen(tw), 64, 1, &w, NULL, NULL), 0);
        struct tg_buf o;
        tg_buf_init(&o);
        tg_json_canon_as_written(&o, w.root);
        assert_int_equal((int)o.len, (int)strlen("{\"a\":[1e0],\"b\":1.0}"));
        assert_memory_equal(o.base, "{\"a\":[1e0],\"b\":1.0}", o.len);
        tg_buf_dispose(&o);
        cJSON_Delete(w.root);
    }
    /* a number made without text (cJSON_CreateNumber) has the same form */
    cJSON *n = cJSON_CreateNumber(0.5);
    struct tg_buf w;
    tg_buf_init(&w);
    tg_json_canon(&w, n);
    assert_int_equal((int)w.len, 3);
    assert_memory_equal(w.base, "0.5", 3);
    tg_buf_dispose(&w);
    cJSON_Delete(n);
}

/* Values as deep as a request may be (limits.json_depth up to 1000) are never cut short: two that
 * differ only at the bottom have two canonical forms, as written and by value. */
static void canonical_deep_values(void **state)
{
    (void)state;
    enum { DEPTH = 1000 };
    char *t[2];
    struct tg_json_doc d[2];
    struct tg_buf c[2], w[2];
    uint8_t h[2][32];
    for (int i = 0; i < 2; i++) {
        t[i] = malloc(2 * DEPTH + 2);
        memset(t[i], '[', DEPTH - 1);
        t[i][DEPTH - 1] = (char)('1' + i);
        memset(t[i] + DEPTH, ']', DEPTH - 1);
        t[i][2 * DEPTH - 1] = '\0';
        assert_int_equal(tg_json_parse(t[i], strlen(t[i]), DEPTH, 1, &d[i], NULL, NULL), 0);
        tg_buf_init(&c[i]);
        tg_buf_init(&w[i]);
        tg_json_canon(&c[i], d[i].root);
        tg_json_canon_as_written(&w[i], d[i].root);
        tg_json_canon_sha256(d[i].root, h[i]);
        assert_int_equal(c[i].len, strlen(t[i])); /* the whole value, nothing replaced */
        assert_memory_equal(w[i].base, t[i], w[i].len);
    }
    assert_memory_not_equal(c[0].base, c[1].base, c[0].len);
    assert_memory_not_equal(h[0], h[1], 32);
    for (int i = 0; i < 2; i++) {
        tg_buf_dispose(&c[i]);
        tg_buf_dispose(&w[i]);
        cJSON_Delete(d[i].root);
        free(t[i]);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip_documents),
        cmocka_unit_test(params_meta_cut),
        cmocka_unit_test(round_trip_numbers_exact),
        cmocka_unit_test(round_trip_strings),
        cmocka_unit_test(surrogate_pairs_decode_to_4_bytes),
        cmocka_unit_test(whitespace_allowed),
        cmocka_unit_test(empty_and_trailing),
        cmocka_unit_test(structure_errors),
        cmocka_unit_test(duplicate_keys),
        cmocka_unit_test(duplicate_keys_many_members),
        cmocka_unit_test(duplicate_keys_without_tree),
        cmocka_unit_test(fast_scan_keys_and_strings),
        cmocka_unit_test(get_matches_cjson),
        cmocka_unit_test(fast_scan_block_edges),
        cmocka_unit_test(invalid_utf8),
        cmocka_unit_test(lone_surrogates),
        cmocka_unit_test(escapes),
        cmocka_unit_test(control_chars_in_strings),
        cmocka_unit_test(number_grammar),
        cmocka_unit_test(depth_limit),
        cmocka_unit_test(id_raw_span),
        cmocka_unit_test(id_raw_cleared_on_error),
        cmocka_unit_test(every_prefix_rejected),
        cmocka_unit_test(guard_page_on_bad_input),
        cmocka_unit_test(writer_plain_cjson),
        cmocka_unit_test(writer_string_escapes),
        cmocka_unit_test(fast_scan_matches_strict),
        cmocka_unit_test(canonical_forms),
        cmocka_unit_test(canonical_deep_values),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
