/* core/base/buf.c: growth ceilings, Accept-style token search, base64url and hex. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/slab.h"

#include <malloc.h>

static void try_reserve_ceiling(void **state)
{
    struct tg_buf b;
    tg_buf_init(&b);
    /* Within the ceiling: storage grows but never past it. */
    assert_int_equal(tg_buf_try_reserve(&b, 100, 1000), 0);
    assert_true(b.cap >= 100);
    assert_true(b.cap <= 1000);
    assert_int_equal(tg_buf_try_append(&b, "0123456789", 10, 1000), 0);
    assert_int_equal(b.len, 10);
    /* Exactly at the ceiling is allowed, one byte past is a limit error. */
    assert_int_equal(tg_buf_try_reserve(&b, 990, 1000), 0);
    assert_int_equal(b.cap, 1000);
    assert_int_equal(tg_buf_try_reserve(&b, 991, 1000), TG_ELIMIT);
    char big[991];
    memset(big, 'x', sizeof(big));
    assert_int_equal(tg_buf_try_append(&b, big, sizeof(big), 1000), TG_ELIMIT);
    assert_int_equal(b.len, 10); /* a refused append leaves the buffer as it was */
    assert_memory_equal(b.base, "0123456789", 10);
    assert_int_equal(tg_buf_try_append(&b, big, 990, 1000), 0);
    assert_int_equal(b.len, 1000);
    /* Overflowing size_t is refused, not wrapped. */
    assert_int_equal(tg_buf_try_reserve(&b, SIZE_MAX, 0), TG_ENOMEM);
    assert_int_equal(tg_buf_try_reserve(&b, SIZE_MAX - 5, 0), TG_ENOMEM);
    tg_buf_dispose(&b);
    assert_null(b.base);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
}

static void try_reserve_no_ceiling_and_small_ceiling(void **state)
{
    struct tg_buf b;
    tg_buf_init(&b);
    /* A ceiling below the default first allocation (256) caps the allocation itself. */
    assert_int_equal(tg_buf_try_reserve(&b, 10, 16), 0);
    assert_int_equal(b.cap, 16);
    assert_int_equal(tg_buf_try_reserve(&b, 17, 16), TG_ELIMIT);
    tg_buf_dispose(&b);
    /* Without a ceiling, growth doubles and keeps contents. */
    for (int i = 0; i < 5000; i++) {
        char c = (char)('a' + i % 26);
        assert_int_equal(tg_buf_try_append(&b, &c, 1, 0), 0);
    }
    assert_int_equal(b.len, 5000);
    for (int i = 0; i < 5000; i++)
        assert_int_equal(b.base[i], 'a' + i % 26);
    tg_buf_dispose(&b);
}

static void append_helpers(void **state)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "x=");
    tg_buf_appendf(&b, "%d/%s", -42, "y");
    tg_buf_append(&b, ";", 1);
    tg_buf_append_u64(&b, 0);
    tg_buf_append(&b, ";", 1);
    tg_buf_append_u64(&b, UINT64_MAX);
    tg_buf_append(&b, "", 1);
    assert_string_equal(b.base, "x=-42/y;0;18446744073709551615");
    tg_buf_consume(&b, 2);
    assert_string_equal(b.base, "-42/y;0;18446744073709551615");
    tg_buf_consume(&b, 1000);
    assert_int_equal(b.len, 0);
    tg_buf_appends(&b, "kept");
    char *p = tg_buf_release(&b);
    assert_null(b.base);
    assert_int_equal(b.len, 0);
    assert_memory_equal(p, "kept", 4);
    free(p);
}

/* tg_token_eq_lower against strncasecmp, for names made of HTTP token bytes (RFC 9110 tchar, as
 * llhttp lets through): every looked-up name, each byte of it in both cases and replaced by every
 * token byte. */
static void token_eq_lower_is_strncasecmp(void **state)
{
    static const char *names[] = {"content-type", "mcp-session-id", "mcp-protocol-version", "accept",
                                  "authorization", "sec-websocket-key", "x-tollgate-approver", "a1-b", "origin"};
    static const char tchar[] = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        const char *lo = names[k];
        size_t n = strlen(lo);
        char cand[64];
        memcpy(cand, lo, n);
        assert_true(tg_token_eq_lower(cand, lo, n));
        for (size_t i = 0; i < n; i++) {
            for (size_t t = 0; t < sizeof(tchar) - 1; t++) {
                memcpy(cand, lo, n);
                cand[i] = tchar[t];
                int want = strncasecmp(cand, lo, n) == 0;
                if (tg_token_eq_lower(cand, lo, n) != want)
                    fail_msg("%s with byte %zu as '%c': %d, strncasecmp says %d", lo, i, tchar[t], !want, want);
            }
            for (size_t j = 0; j < n; j++) /* upper case from byte i on */
                cand[j] = j >= i && lo[j] >= 'a' && lo[j] <= 'z' ? (char)(lo[j] - 32) : lo[j];
            assert_true(tg_token_eq_lower(cand, lo, n));
        }
    }
}

static void has_token_accept(void **state)
{
    struct tg_slice h = TG_SLICE("application/json;q=0.9, text/event-stream");
    assert_int_equal(tg_slice_has_token(h, "application/json"), 1);
    assert_int_equal(tg_slice_has_token(h, "text/event-stream"), 1);
    assert_int_equal(tg_slice_has_token(h, "text/html"), 0);
    /* Parameters are not tokens, and a token must match whole. */
    assert_int_equal(tg_slice_has_token(h, "q=0.9"), 0);
    assert_int_equal(tg_slice_has_token(h, "application/js"), 0);
    assert_int_equal(tg_slice_has_token(h, "json"), 0);
    assert_int_equal(tg_slice_has_token(h, "text/event-stream, x"), 0);
    /* Case-insensitive, whitespace around tokens and parameters. */
    assert_int_equal(tg_slice_has_token(TG_SLICE("TEXT/Event-Stream"), "text/event-stream"), 1);
    assert_int_equal(tg_slice_has_token(TG_SLICE("  application/json  ; charset=utf-8 ,text/plain"), "application/json"), 1);
    assert_int_equal(tg_slice_has_token(TG_SLICE("a,\tb\t,c"), "b"), 1);
    assert_int_equal(tg_slice_has_token(TG_SLICE(",,,"), "a"), 0);
    assert_int_equal(tg_slice_has_token(TG_SLICE(""), "a"), 0);
    assert_int_equal(tg_slice_has_token(TG_SLICE("*/*"), "application/json"), 0);
    /* A parameter value that looks like a token does not count. */
    assert_int_equal(tg_slice_has_token(TG_SLICE("text/plain;x=text/event-stream"), "text/event-stream"), 0);
    /* Not NUL-terminated: the slice ends where it says. */
    const char raw[] = "text/event-streamXYZ";
    assert_int_equal(tg_slice_has_token(tg_slice_of(raw, 17), "text/event-stream"), 1);
    assert_int_equal(tg_slice_has_token(tg_slice_of(raw, 16), "text/event-stream"), 0);
}

static void slice_compare(void **state)
{
    assert_int_equal(tg_slice_eq(TG_SLICE("abc"), TG_SLICE("abc")), 1);
    assert_int_equal(tg_slice_eq(TG_SLICE("abc"), TG_SLICE("abd")), 0);
    assert_int_equal(tg_slice_eq(TG_SLICE("abc"), TG_SLICE("ab")), 0);
    assert_int_equal(tg_slice_eq(TG_SLICE_NULL, TG_SLICE("")), 1);
    assert_int_equal(tg_slice_eq_nocase(TG_SLICE("KeeP-Alive"), "keep-alive"), 1);
    assert_int_equal(tg_slice_eq_nocase(TG_SLICE("keep-alive2"), "keep-alive"), 0);
    assert_int_equal(tg_slice_starts_with(TG_SLICE("/cowork/mcp"), "/cowork"), 1);
    assert_int_equal(tg_slice_starts_with(TG_SLICE("/co"), "/cowork"), 0);
    char *d = tg_slice_dup(tg_slice_of("abcdef", 3));
    assert_string_equal(d, "abc");
    free(d);
    d = tg_slice_dup(TG_SLICE_NULL);
    assert_string_equal(d, "");
    free(d);
}

static void b64url_vectors(void **state)
{
    /* RFC 4648 section 10 vectors, without padding, in the URL-safe alphabet. */
    static const struct {
        const char *in, *out;
    } v[] = {
        {"", ""}, {"f", "Zg"}, {"fo", "Zm8"}, {"foo", "Zm9v"}, {"foob", "Zm9vYg"}, {"fooba", "Zm9vYmE"}, {"foobar", "Zm9vYmFy"},
    };
    char out[64];
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        memset(out, 0x55, sizeof(out));
        size_t n = tg_b64url_encode((const uint8_t *)v[i].in, strlen(v[i].in), out);
        assert_string_equal(out, v[i].out);
        assert_int_equal(n, strlen(v[i].out));
    }
    /* '+' and '/' of standard base64 become '-' and '_'. */
    const uint8_t hi[] = {0xfb, 0xff, 0xbf};
    tg_b64url_encode(hi, 3, out);
    assert_string_equal(out, "-_-_");
    const uint8_t two[] = {0xfb, 0xff};
    tg_b64url_encode(two, 2, out);
    assert_string_equal(out, "-_8");
    /* 16 bytes (a session id) -> 22 characters. */
    uint8_t id[16];
    memset(id, 0xff, sizeof(id));
    assert_int_equal(tg_b64url_encode(id, 16, out), 22);
    assert_string_equal(out, "_____________________w");
}

static void hex_round_trip(void **state)
{
    uint8_t all[256], back[256];
    char hex[513];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    tg_hex_encode(all, 256, hex);
    assert_int_equal(strlen(hex), 512);
    assert_memory_equal(hex, "000102", 6);
    assert_string_equal(hex + 506, "fdfeff");
    memset(back, 0, sizeof(back));
    assert_int_equal(tg_hex_decode(hex, 512, back), 0);
    assert_memory_equal(back, all, 256);
    /* Upper case decodes too. */
    uint8_t two[2];
    assert_int_equal(tg_hex_decode("ABcd", 4, two), 0);
    assert_int_equal(two[0], 0xab);
    assert_int_equal(two[1], 0xcd);
    /* Odd length and non-hex digits are refused. */
    assert_int_equal(tg_hex_decode("abc", 3, two), TG_EINVAL);
    assert_int_equal(tg_hex_decode("0g", 2, two), TG_EINVAL);
    assert_int_equal(tg_hex_decode("g0", 2, two), TG_EINVAL);
    assert_int_equal(tg_hex_decode(" 0", 2, two), TG_EINVAL);
    assert_int_equal(tg_hex_decode("", 0, two), 0);
}

static void random_fills(void **state)
{
    uint8_t a[32], b[32], zero[32] = {0};
    assert_int_equal(tg_random(a, sizeof(a)), 0);
    assert_int_equal(tg_random(b, sizeof(b)), 0);
    assert_memory_not_equal(a, b, sizeof(a));
    assert_memory_not_equal(a, zero, sizeof(a));
}

static void list_ops(void **state)
{
    struct item {
        int v;
        struct tg_list link;
    } it[3] = {{1, {0}}, {2, {0}}, {3, {0}}};
    struct tg_list head;
    tg_list_init(&head);
    assert_int_equal(tg_list_empty(&head), 1);
    for (int i = 0; i < 3; i++)
        tg_list_insert_tail(&head, &it[i].link);
    assert_int_equal(tg_list_linked(&it[1].link), 1);
    tg_list_unlink(&it[1].link);
    assert_int_equal(tg_list_linked(&it[1].link), 0);
    tg_list_unlink(&it[1].link); /* unlinking twice is harmless */
    int seen[3], n = 0;
    for (struct tg_list *l = head.next; l != &head; l = l->next)
        seen[n++] = tg_container_of(l, struct item, link)->v;
    assert_int_equal(n, 2);
    assert_int_equal(seen[0], 1);
    assert_int_equal(seen[1], 3);
}

/* A round of deferred work takes the whole queue at once; what is queued meanwhile waits. */
static void list_splice(void **state)
{
    (void)state;
    struct item {
        int v;
        struct tg_list link;
    } it[5];
    struct tg_list a, b;
    tg_list_init(&a);
    tg_list_init(&b);
    tg_list_splice_tail(&a, &b); /* empty into empty */
    assert_int_equal(tg_list_empty(&a), 1);
    for (int i = 0; i < 5; i++) {
        it[i].v = i;
        tg_list_insert_tail(i < 2 ? &a : &b, &it[i].link);
    }
    tg_list_splice_tail(&a, &b);
    assert_int_equal(tg_list_empty(&b), 1);
    int n = 0;
    for (struct tg_list *l = a.next; l != &a; l = l->next, n++)
        assert_int_equal(tg_container_of(l, struct item, link)->v, n);
    assert_int_equal(n, 5);
    for (struct tg_list *l = a.prev; l != &a; l = l->prev)
        n--;
    assert_int_equal(n, 0);
    tg_list_insert_tail(&b, &(struct item){9, {0}}.link); /* b works again after the splice */
    assert_int_equal(tg_list_empty(&b), 0);
}

/* The slab: blocks come back for requests they can hold, either side may free what the other
 * allocated, and a full class gives to malloc. Runs under ASan too (enabled by hand). */
static void slab_lists(void **state)
{
    (void)state;
    tg_slab_enable(1);
    tg_slab_drain();
    void *a = tg_slab_alloc(10);
    assert_true(malloc_usable_size(a) >= 10);
    memset(a, 0xab, 10);
    tg_slab_free(a);
    assert_int_equal(tg_slab_cached(), 1);
    void *b = tg_slab_alloc(20); /* the same class: the same block */
    assert_ptr_equal(a, b);
    assert_int_equal(tg_slab_cached(), 0);
    free(b); /* a slab block is a malloc block */
    /* a malloc block given to the slab is kept by its usable size and reused within it */
    void *m = malloc(56); /* usable 56 with glibc and with ASan: a class */
    assert_int_equal(malloc_usable_size(m), 56);
    tg_slab_free(m);
    void *n = tg_slab_alloc(50);
    assert_ptr_equal(m, n);
    memset(n, 1, 50);
    tg_slab_free(n);
    void *odd = malloc(100); /* no class's usable size under ASan (exact), 104 with glibc: kept */
    tg_slab_free(odd);
    /* big blocks are not kept */
    tg_slab_drain();
    void *big = tg_slab_alloc(4096);
    memset(big, 2, 4096);
    tg_slab_free(big);
    assert_int_equal(tg_slab_cached(), 0);
    /* at most TG_SLAB_KEEP per class */
    void **v = malloc(sizeof(*v) * (TG_SLAB_KEEP + 10));
    for (int i = 0; i < TG_SLAB_KEEP + 10; i++)
        v[i] = tg_slab_alloc(30);
    for (int i = 0; i < TG_SLAB_KEEP + 10; i++)
        tg_slab_free(v[i]);
    assert_int_equal(tg_slab_cached(), TG_SLAB_KEEP);
    tg_slab_drain();
    /* the larger classes (a call's state) keep fewer */
    for (int i = 0; i < TG_SLAB_KEEP_LARGE + 10; i++)
        v[i] = tg_slab_alloc(1176);
    for (int i = 0; i < TG_SLAB_KEEP_LARGE + 10; i++)
        tg_slab_free(v[i]);
    assert_int_equal(tg_slab_cached(), TG_SLAB_KEEP_LARGE);
    void *again = tg_slab_alloc(1170); /* the same class */
    assert_true(malloc_usable_size(again) >= 1170);
    assert_int_equal(tg_slab_cached(), TG_SLAB_KEEP_LARGE - 1);
    tg_xfree(again);
    void *past = tg_slab_alloc(TG_SLAB_MAX + 1); /* beyond the classes: malloc's */
    tg_slab_free(past);
    assert_int_equal(tg_slab_cached(), TG_SLAB_KEEP_LARGE);
    free(v);
    tg_slab_drain();
    assert_int_equal(tg_slab_cached(), 0);
    /* off: everything goes to malloc and back */
    tg_slab_enable(0);
    void *o = tg_slab_alloc(10);
    tg_slab_free(o);
    assert_int_equal(tg_slab_cached(), 0);
}

/* A recycler: a freed block comes back whole, at most `keep` are kept, drain gives them back, and
 * with the slab off nothing is kept (so the sanitizers see each free). */
static void recycler_keeps_and_drains(void **state)
{
    (void)state;
    static struct tg_recycler r = TG_RECYCLER_INIT(4400, 3);
    tg_slab_enable(1);
    tg_slab_drain();
    void *a = tg_recycle_alloc(&r);
    assert_true(malloc_usable_size(a) >= 4400);
    memset(a, 0x5a, 4400);
    tg_recycle_free(&r, a);
    assert_int_equal(r.count, 1);
    assert_int_equal(tg_slab_cached(), 1); /* counted with the classes */
    void *b = tg_recycle_alloc(&r);
    assert_ptr_equal(a, b);
    assert_int_equal(r.count, 0);
    void *v[5] = {b};
    for (int i = 1; i < 5; i++)
        v[i] = tg_recycle_alloc(&r);
    for (int i = 0; i < 5; i++)
        tg_recycle_free(&r, v[i]);
    assert_int_equal(r.count, 3);
    tg_recycle_free(&r, NULL);
    assert_int_equal(r.count, 3);
    free(tg_recycle_alloc(&r)); /* a recycled block is a malloc block */
    assert_int_equal(r.count, 2);
    tg_slab_drain();
    assert_int_equal(r.count, 0);
    assert_ptr_equal(r.head, NULL);
    tg_slab_enable(0);
    void *c = tg_recycle_alloc(&r);
    tg_recycle_free(&r, c);
    assert_int_equal(r.count, 0);
}

/* Chunk size lines: every digit count, the edges of each, and appending after other bytes. */
static void append_hex_digits(void **state)
{
    (void)state;
    struct tg_buf b;
    tg_buf_init(&b);
    for (int bits = 0; bits <= 64; bits++) {
        uint64_t edge = bits == 64 ? UINT64_MAX : (((uint64_t)1 << bits) - 1);
        uint64_t vals[] = {edge, edge + 1, edge / 3};
        for (size_t i = 0; i < 3; i++) {
            b.len = 0;
            tg_buf_append(&b, "x", 1);
            tg_buf_append_hex(&b, vals[i]);
            char want[24];
            int n = snprintf(want, sizeof want, "x%llx", (unsigned long long)vals[i]);
            assert_int_equal(b.len, (size_t)n);
            assert_memory_equal(b.base, want, (size_t)n);
        }
    }
    tg_buf_dispose(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(append_hex_digits),
        cmocka_unit_test(token_eq_lower_is_strncasecmp),
        cmocka_unit_test(try_reserve_ceiling),
        cmocka_unit_test(try_reserve_no_ceiling_and_small_ceiling),
        cmocka_unit_test(append_helpers),
        cmocka_unit_test(has_token_accept),
        cmocka_unit_test(slice_compare),
        cmocka_unit_test(b64url_vectors),
        cmocka_unit_test(hex_round_trip),
        cmocka_unit_test(random_fills),
        cmocka_unit_test(list_ops),
        cmocka_unit_test(list_splice),
        cmocka_unit_test(slab_lists),
        cmocka_unit_test(recycler_keeps_and_drains),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
