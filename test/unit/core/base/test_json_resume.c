/* core/base/json_scan.c: the fast path resumes its walk from the last message's checkpoint, where the
 * two messages first differ. Whatever it resumes from, it must say what a walk from the first
 * byte says (the same result and the same four slices), and what it accepts the strict parser
 * accepts with the same slices.
 *
 * The messages come in chains, each made from the one before by a small change: a byte changed,
 * put in or taken out, a number counted up, the tail cut or replaced by another message's, the
 * same message again, one too long to copy. Each chain is scanned in order (each walk may resume
 * from the last), then each message again after tg__json_scan_forget() (a walk from the first
 * byte), and the two runs compared. */
#include "test/unit/unit.h"

#include "core/base/buf.h"
#include "core/base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHAIN 16

static uint64_t rng_state = 0x2545f4914f6cdd1dULL;
static unsigned rnd(unsigned n)
{
    return tg_unit_rnd(&rng_state, n);
}

static const char *pick(const char *const *v, size_t n) { return v[rnd((unsigned)n)]; }
#define PICK(v) pick((v), sizeof(v) / sizeof(*(v)))

/* A value of a few kinds, compact mostly (a space now and then), to depth 4. */
static void gen_value(struct tg_buf *b, int depth)
{
    static const char *const scalars[] = {"0",    "-1",    "12.5e3", "1E+2", "7",         "200",     "true",
                                          "null", "false", "\"\"",   "\"a\"", "\"x y\"", "\"2.0\"", "-0.5",
                                          "\"{[,:]}\"", "01", "tru"};
    static const char *const keys[] = {"\"id\"",     "\"method\"", "\"result\"", "\"error\"", "\"params\"", "\"a\"",
                                       "\"b\"",      "\"\"",       "\"progress\"", "\"total\"", "\"data\""};
    unsigned k = depth >= 4 ? 2 : rnd(4);
    if (rnd(40) == 0)
        tg_buf_append(b, " ", 1);
    if (k < 2) {
        int obj = k == 0, n = (int)rnd(5);
        tg_buf_append(b, obj ? "{" : "[", 1);
        for (int i = 0; i < n; i++) {
            if (i)
                tg_buf_append(b, ",", 1);
            if (obj) {
                tg_buf_appends(b, PICK(keys));
                tg_buf_append(b, ":", 1);
            }
            gen_value(b, depth + 1);
        }
        tg_buf_append(b, obj ? "}" : "]", 1);
    } else {
        tg_buf_appends(b, PICK(scalars));
    }
}

/* A first message: shaped as MCP servers send them, or anything the generator makes. */
static void gen_message(struct tg_buf *b)
{
    char t[512];
    int n;
    switch (rnd(6)) {
    case 0:
        n = snprintf(t, sizeof t,
                     "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":%u,"
                     "\"progress\":%u,\"total\":200}}",
                     rnd(100), rnd(300));
        break;
    case 1:
        n = snprintf(t, sizeof t,
                     "{\"jsonrpc\":\"2.0\",\"id\":%u,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"%s\"}],"
                     "\"isError\":false}}",
                     rnd(1000), rnd(2) ? "ok" : "a longer answer, with {[,:]} inside");
        break;
    case 2:
        n = snprintf(t, sizeof t, "{\"jsonrpc\":\"2.0\",\"id\":\"r-%u\",\"error\":{\"code\":-32000,\"message\":\"no\"}}",
                     rnd(50));
        break;
    case 3:
        n = snprintf(t, sizeof t,
                     "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"level\":\"info\","
                     "\"data\":{\"n\":%u,\"text\":\"line %u\"}}}",
                     rnd(100), rnd(100));
        break;
    default:
        tg_buf_append(b, "{", 1);
        for (int i = 0, m = (int)rnd(6); i < m; i++) {
            static const char *const keys[] = {"\"id\"",   "\"method\"", "\"result\"", "\"error\"",
                                               "\"jsonrpc\"", "\"params\"", "\"a\"",      "\"b\""};
            if (i)
                tg_buf_append(b, ",", 1);
            tg_buf_appends(b, PICK(keys));
            tg_buf_append(b, ":", 1);
            gen_value(b, 1);
        }
        tg_buf_append(b, "}", 1);
        return;
    }
    tg_buf_append(b, t, (size_t)n);
}

/* next: a small change of prev. */
static void derive(struct tg_buf *next, const struct tg_buf *prev)
{
    static const char stray[] = "{}[],:\" a0123456789-e.\\xtf";
    const char *p = prev->base;
    size_t n = prev->len, at = n > 0 ? rnd((unsigned)n + 1) : 0;
    unsigned op = rnd(10);
    if (op == 0 || n == 0) { /* the same again */
        tg_buf_append(next, p, n);
    } else if (op == 1) { /* a number counted up: the last digit of a run that is not the last */
        tg_buf_append(next, p, n);
        for (size_t i = at; i < n; i++)
            if (next->base[i] >= '0' && next->base[i] <= '9') {
                while (i + 1 < n && next->base[i + 1] >= '0' && next->base[i + 1] <= '9')
                    i++;
                next->base[i] = next->base[i] == '9' ? '0' : (char)(next->base[i] + 1);
                break;
            }
    } else if (op == 2 || op == 3) { /* a byte changed */
        tg_buf_append(next, p, n);
        if (at < n)
            next->base[at] = stray[rnd(sizeof stray - 1)];
    } else if (op == 4) { /* a byte put in */
        tg_buf_append(next, p, at);
        tg_buf_append(next, &stray[rnd(sizeof stray - 1)], 1);
        tg_buf_append(next, p + at, n - at);
    } else if (op == 5) { /* a byte taken out */
        tg_buf_append(next, p, at);
        if (at < n)
            tg_buf_append(next, p + at + 1, n - at - 1);
    } else if (op == 6) { /* cut */
        tg_buf_append(next, p, at);
    } else if (op == 7 || op == 8) { /* the tail of another message */
        struct tg_buf other;
        tg_buf_init(&other);
        gen_message(&other);
        size_t from = rnd((unsigned)other.len + 1);
        tg_buf_append(next, p, at);
        tg_buf_append(next, other.base + from, other.len - from);
        tg_buf_dispose(&other);
    } else if (rnd(4) == 0) { /* too long to copy: a long string put in */
        tg_buf_append(next, p, at);
        char *x = malloc(5000);
        assert_non_null(x);
        memset(x, 'x', 5000);
        tg_buf_append(next, x, 5000);
        free(x);
        tg_buf_append(next, p + at, n - at);
    } else {
        gen_message(next);
    }
}

static void same_doc(const struct tg_json_doc *a, const struct tg_json_doc *b, const struct tg_buf *m)
{
    const struct tg_slice *x[] = {&a->id_raw, &a->method_raw, &a->error_raw, &a->result_raw};
    const struct tg_slice *y[] = {&b->id_raw, &b->method_raw, &b->error_raw, &b->result_raw};
    for (int j = 0; j < 4; j++)
        if (x[j]->ptr != y[j]->ptr || x[j]->len != y[j]->len)
            fail_msg("slice %d: %p+%zu against %p+%zu on %.*s", j, (const void *)x[j]->ptr, x[j]->len,
                     (const void *)y[j]->ptr, y[j]->len, (int)m->len, m->base);
}

static void resumed_walk_as_fresh(void **state)
{
    (void)state;
    size_t resumed0, skipped0, swapped0, resumed, skipped, swapped;
    tg__json_scan_forget();
    tg__json_scan_stats(&resumed0, &skipped0, &swapped0);
    unsigned scans = 0, accepted = 0;
    for (int round = 0; round < 6000; round++) {
        struct tg_buf m[CHAIN];
        int depth[CHAIN], r[CHAIN];
        struct tg_json_doc d[CHAIN];
        tg_buf_init(&m[0]);
        gen_message(&m[0]);
        for (int k = 1; k < CHAIN; k++) {
            tg_buf_init(&m[k]);
            derive(&m[k], &m[k - 1]);
        }
        int limit = rnd(3) == 0 ? (int)rnd(5) + 1 : 64;
        for (int k = 0; k < CHAIN; k++) {
            depth[k] = rnd(16) == 0 ? (int)rnd(5) + 1 : limit; /* a limit changed now and then */
            r[k] = tg__json_scan_fast(m[k].base ? m[k].base : "", m[k].len, depth[k], &d[k]);
        }
        for (int k = 0; k < CHAIN; k++) {
            const char *p = m[k].base ? m[k].base : "";
            struct tg_json_doc fresh, strict;
            tg__json_scan_forget();
            int rf = tg__json_scan_fast(p, m[k].len, depth[k], &fresh);
            if (rf != r[k])
                fail_msg("resumed %d, from the first byte %d, on %.*s (after %.*s)", r[k], rf, (int)m[k].len, p,
                         k > 0 ? (int)m[k - 1].len : 0, k > 0 ? m[k - 1].base : "");
            scans++;
            if (rf != 0)
                continue;
            accepted++;
            same_doc(&d[k], &fresh, &m[k]);
            if (tg_json_parse(p, m[k].len, depth[k], 1, &strict, NULL, NULL) != 0)
                fail_msg("accepted what the strict parser refuses: %.*s", (int)m[k].len, p);
            same_doc(&d[k], &strict, &m[k]);
            cJSON_Delete(strict.root);
        }
        for (int k = 0; k < CHAIN; k++)
            tg_buf_dispose(&m[k]);
    }
    tg__json_scan_stats(&resumed, &skipped, &swapped);
    resumed -= resumed0;
    skipped -= skipped0;
    swapped -= swapped0;
    print_message("%u scans, %u accepted; in order, %zu walks resumed, %zu bytes not walked again, %zu taken "
                  "with one scalar swapped\n",
                  scans, accepted, resumed, skipped, swapped);
    /* not degenerate: many are accepted, many resumed, from well past the first byte, many
     * swapped */
    assert_true(accepted > scans / 8);
    assert_true(resumed > scans / 4);
    assert_true(skipped > resumed * 5);
    assert_true(swapped > scans / 100);
}

/* A progress stream as servers send it: the second message resumes at its root value, every
 * one after it is the one before with its "progress" value swapped (counted up, longer now and
 * then), and the slices are this message's. */
static void progress_stream_resumes(void **state)
{
    (void)state;
    tg__json_scan_forget();
    size_t resumed0, skipped0, swapped0, resumed, skipped, swapped;
    tg__json_scan_stats(&resumed0, &skipped0, &swapped0);
    char t[200];
    for (unsigned i = 1; i <= 200; i++) {
        int n = snprintf(t, sizeof t,
                         "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":"
                         "\"tok-7\",\"progress\":%u,\"total\":200}}",
                         i);
        struct tg_json_doc d;
        assert_int_equal(tg__json_scan_fast(t, (size_t)n, 64, &d), 0);
        assert_ptr_equal(d.method_raw.ptr, t + 26);
        assert_int_equal(d.method_raw.len, strlen("\"notifications/progress\""));
        assert_null(d.id_raw.ptr);
    }
    /* then the answer, with the same start: its id and result, nothing of the events' */
    const char *answer = "{\"jsonrpc\":\"2.0\",\"id\":9,\"result\":{\"content\":[]}}";
    struct tg_json_doc d;
    assert_int_equal(tg__json_scan_fast(answer, strlen(answer), 64, &d), 0);
    assert_null(d.method_raw.ptr);
    assert_ptr_equal(d.id_raw.ptr, answer + 22);
    assert_int_equal(d.result_raw.len, strlen("{\"content\":[]}"));
    tg__json_scan_stats(&resumed, &skipped, &swapped);
    /* the first walks from the first byte, the second from its root value, the others not */
    assert_int_equal(resumed - resumed0, 1);
    assert_int_equal(swapped - swapped0, 198);
    (void)skipped;
}

/* m through the fast path (its result returned) and the strict parser (*rs): what the first
 * accepts, the second accepts with the same slices. */
static int scan_as_strict(const char *m, int *rs)
{
    struct tg_json_doc d, s;
    int rd = tg__json_scan_fast(m, strlen(m), 64, &d);
    *rs = tg_json_parse(m, strlen(m), 64, 1, &s, NULL, NULL);
    if (rd == 0) {
        assert_int_equal(*rs, 0);
        same_doc(&d, &s, &(struct tg_buf){(char *)m, strlen(m), 0});
    }
    cJSON_Delete(s.root);
    return rd;
}

/* A checkpoint inside a kept member's value (the answer's result) and at a root member's
 * value whose first byte changes its kind: the slot is chosen again. */
static void resumed_slots(void **state)
{
    (void)state;
#define P "\"0123456789abcdefgh\","
    struct {
        const char *a, *b;
    } pairs[] = {
        {"{\"p\":" P "\"id\":1,\"result\":{\"a\":1,\"b\":2}}", "{\"p\":" P "\"id\":1,\"result\":{\"a\":1,\"b\":3}}"},
        {"{\"p\":" P "\"id\":1,\"result\":{\"a\":1}}", "{\"p\":" P "\"id\":1,\"result\":[{\"a\":1}]}"},
        {"{\"p\":" P "\"id\":1,\"result\":[1]}", "{\"p\":" P "\"id\":1,\"result\":{\"a\":1}}"},
        {"{\"p\":" P "\"error\":{\"code\":1},\"id\":1}", "{\"p\":" P "\"error\":{\"code\":2},\"id\":1}"},
        {"{\"p\":" P "\"a\":[{\"b\":1},{\"c\":2}],\"id\":5}", "{\"p\":" P "\"a\":[{\"b\":1},{\"c\":3}],\"id\":5}"},
        {"{\"p\":" P "\"a\":{\"b\":1},\"c\":{\"d\":1}}", "{\"p\":" P "\"a\":{\"b\":1},\"c\":{\"b\":1,\"b\":2}}"},
        {"{\"p\":" P "\"a\":{\"x\":1},\"y\":1}", "{\"p\":" P "\"a\":{\"x\":1},\"a\":1}"},
    };
    /* in turn, each walk after the first resumed from the other's checkpoint */
    for (size_t i = 0; i < sizeof(pairs) / sizeof(*pairs); i++) {
        tg__json_scan_forget();
        for (int k = 0; k < 6; k++) {
            int rs, rd = scan_as_strict(k % 2 ? pairs[i].b : pairs[i].a, &rs);
            if (rd != 0)
                assert_int_not_equal(rs, 0); /* refused: the duplicates */
        }
    }
#undef P
}

/* A checkpoint whose stacks were written over after it: the walk of the middle message takes
 * its checkpoint where it differs from the first (at the 1), then closes containers and opens
 * others in their place; the third message shares the middle one's bytes to the 1. Resumed from
 * a checkpoint kept past that, the third would be read with another container's kind, or
 * without a key to catch its duplicate: both are refused, as the strict parser refuses them. */
static void clobbered_checkpoint_dropped(void **state)
{
    (void)state;
    /* (a first member of twenty bytes: the copy compares whole blocks of sixteen) */
#define P "\"0123456789abcdefgh\","
#define Q "\"q\":\"0123456789abcdefghij0123456789\""
    static const char *const triples[][3] = {
        /* a key it holds written over: "c" where "b" was (a last member long enough for the
         * blocks compared to reach past the 1) */
        {"{\"p\":" P "\"a\":{\"b\":0},\"c\":2," Q "}", "{\"p\":" P "\"a\":{\"b\":1},\"c\":2," Q "}",
         "{\"p\":" P "\"a\":{\"b\":1,\"b\":2}," Q "}"},
        /* a container's kind written over: an array where the object was */
        {"[" P "{\"x\":[0]},[[2]]]", "[" P "{\"x\":[1]},[[2]]]", "[" P "{\"x\":[1]]]"},
        {"[" P "{\"x\":[0]},[[2]]]", "[" P "{\"x\":[1]},[[2]]]", "[" P "{\"x\":[1]]}"},
        /* both */
        {"{\"p\":" P "\"a\":{\"b\":0},\"c\":{\"d\":2}}", "{\"p\":" P "\"a\":{\"b\":1},\"c\":{\"d\":2}}",
         "{\"p\":" P "\"a\":{\"b\":1,\"b\":2}}"},
    };
#undef P
#undef Q
    for (size_t i = 0; i < sizeof(triples) / sizeof(*triples); i++) {
        struct tg_json_doc d, s;
        tg__json_scan_forget();
        for (int k = 0; k < 2; k++)
            assert_int_equal(tg__json_scan_fast(triples[i][k], strlen(triples[i][k]), 64, &d), 0);
        const char *c = triples[i][2];
        assert_int_not_equal(tg_json_parse(c, strlen(c), 64, 1, &s, NULL, NULL), 0);
        if (tg__json_scan_fast(c, strlen(c), 64, &d) == 0)
            fail_msg("accepted after %s: %s", triples[i][1], c);
    }
}

/* An array's first element starts where the byte is not ']': a checkpoint there is no use to
 * a message whose byte there is (found by fuzz_json: the empty array of the first two is the
 * close of the third's eighth). */
static void first_element_needs_its_byte(void **state)
{
    (void)state;
    const char *p = "{\"\":[[[[[[[[]]]]]]}", *q = "{\"\":[[[[[[[]]]]]]]}";
    struct tg_json_doc d;
    tg__json_scan_forget();
    assert_int_equal(tg__json_scan_fast(p, strlen(p), 64, &d), -1);
    assert_int_equal(tg__json_scan_fast(p, strlen(p), 64, &d), -1);
    assert_int_equal(tg__json_scan_fast(q, strlen(q), 64, &d), 0);
    tg__json_scan_forget();
    assert_int_equal(tg__json_scan_fast(q, strlen(q), 64, &d), 0);
}

/* One scalar swapped for another: taken with no walk where the grammar allows it (the same
 * slices as the strict parser's, those past it moved), left to the walk where it does not (an
 * escape, a number that is not one, a container, an array's first element gone, a second
 * change). Each pair is scanned a, b, a, b: from the third, the checkpoint is at the scalar. */
static void swapped_scalars(void **state)
{
    (void)state;
#define P "{\"p\":\"0123456789abcdefgh\","
    static const struct {
        const char *a, *b;
        int swaps; /* of the third and fourth scans */
    } pairs[] = {
        {P "\"id\":12,\"result\":{\"x\":\"abc\"}}", P "\"id\":7,\"result\":{\"x\":\"abc\"}}", 2},
        {P "\"params\":{\"data\":\"hello\"},\"id\":3}", P "\"params\":{\"data\":\"hello there\"},\"id\":3}", 2},
        {P "\"a\":5,\"id\":1}", P "\"a\":\"five\",\"id\":1}", 2},
        {P "\"a\":true,\"method\":\"m\"}", P "\"a\":null,\"method\":\"m\"}", 2},
        {P "\"a\":[1,-2.5e3,3],\"id\":1}", P "\"a\":[1,-2.5e31,3],\"id\":1}", 2},
        {"\"0123456789abcdefghij\"", "\"0123456789abcdefghijkl\"", 2},
        {P "\"a\":\"xy\",\"id\":1}", P "\"a\":\"x\\\"y\",\"id\":1}", 0}, /* an escape */
        {P "\"a\":10,\"id\":1}", P "\"a\":01,\"id\":1}", 0},
        {P "\"a\":1,\"id\":1}", P "\"a\":1.,\"id\":1}", 0},
        {P "\"a\":true,\"id\":1}", P "\"a\":tru,\"id\":1}", 0},
        {P "\"a\":1,\"id\":1}", P "\"a\":{},\"id\":1}", 0},
        {P "\"a\":[5],\"id\":1}", P "\"a\":[],\"id\":1}", 0},
        {P "\"a\":1,\"b\":2}", P "\"a\":3,\"b\":4}", 0},
        {P "\"a\":1,\"b\":2}", P "\"a\":3,\"b\":2,\"b\":2}", 0},
    };
#undef P
    for (size_t i = 0; i < sizeof(pairs) / sizeof(*pairs); i++) {
        size_t r0, k0, s0, r1, k1, s1;
        tg__json_scan_forget();
        for (int k = 0; k < 4; k++) {
            if (k == 2)
                tg__json_scan_stats(&r0, &k0, &s0);
            const char *m = k % 2 ? pairs[i].b : pairs[i].a;
            int rs;
            if (scan_as_strict(m, &rs) != 0 && pairs[i].swaps != 0)
                fail_msg("refused %s", m);
        }
        tg__json_scan_stats(&r1, &k1, &s1);
        if ((int)(s1 - s0) != pairs[i].swaps)
            fail_msg("%zu swaps, not %d: %s / %s", s1 - s0, pairs[i].swaps, pairs[i].a, pairs[i].b);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(progress_stream_resumes),
        cmocka_unit_test(resumed_slots),
        cmocka_unit_test(clobbered_checkpoint_dropped),
        cmocka_unit_test(first_element_needs_its_byte),
        cmocka_unit_test(swapped_scalars),
        cmocka_unit_test(resumed_walk_as_fresh),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
