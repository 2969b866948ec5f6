/* transports/replay.c: the replay buffer of a Streamable HTTP SSE stream. Events are framed
 * straight into it (tg_replay_message); what it keeps is always the newest events, whole and in
 * order, within limits.replay_bytes plus two events (one per generation); with replay_bytes 0 nothing is kept; an
 * ended stream keeps its bytes, not the room it grew. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/conf/conf.h"
#include "core/call/gateway.h"
#include "transports/replay.h"

struct fix {
    struct tg_conf conf;
    struct tg_server srv;
    struct tg_replay r;
    struct tg_buf scratch;
};

static struct fix *fix_new(int replay_bytes)
{
    struct fix *f = calloc(1, sizeof(*f));
    f->conf.limits.replay_bytes = replay_bytes;
    f->srv.conf = &f->conf;
    f->srv.loop = uv_default_loop();
    f->r.srv = &f->srv;
    f->r.id = 0x2a;
    return f;
}

static void fix_free(struct fix *f)
{
    tg_replay_gen_clear(&f->r.gen[0]);
    tg_replay_gen_clear(&f->r.gen[1]);
    tg_buf_dispose(&f->scratch);
    free(f);
}

/* The message of event number i: its size varies, so generations fill at odd points. */
static size_t message(char *out, size_t cap, unsigned i)
{
    int n = snprintf(out, cap, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":%u,"
                               "\"pad\":\"%.*s\"}}",
                     i, (int)(i * 7 % 90), "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

/* What a resuming client gets, oldest generation first (as tg_replay_write walks it); checks
 * that each generation's len is what its chunks hold. */
static void kept(struct tg_replay *r, struct tg_buf *out)
{
    out->len = 0;
    for (int g = 0; g < 2; g++) {
        const struct tg_replay_gen *gen = &r->gen[g == 0 ? r->cur ^ 1 : r->cur];
        size_t sum = 0;
        for (const struct tg_replay_chunk *k = gen->head; k != NULL; k = k->next) {
            tg_buf_append(out, k->b.base, k->b.len);
            sum += k->b.len;
            assert_true(k->next != NULL || k == gen->tail);
        }
        assert_int_equal(sum, gen->len);
    }
}

/* Bytes a generation holds, used or not. */
static size_t gen_cap(const struct tg_replay_gen *g)
{
    size_t cap = 0;
    for (const struct tg_replay_chunk *k = g->head; k != NULL; k = k->next)
        cap += k->b.cap;
    return cap;
}

static void keeps_newest_whole_events(void **state)
{
    (void)state;
    const int limit = 4096;
    struct fix *f = fix_new(limit);
    struct tg_buf all, want, got;
    tg_buf_init(&all);
    tg_buf_init(&want);
    tg_buf_init(&got);
    size_t max_ev = 0;
    for (unsigned i = 1; i <= 400; i++) {
        char m[256];
        size_t n = message(m, sizeof m, i);
        struct tg_slice ev = tg_replay_message(&f->r, m, n, &f->scratch);
        /* the event as the client reads it: its id, the event line, the data, the blank line */
        want.len = 0;
        tg_buf_appendf(&want, "id: 2a-%u\nevent: message\ndata: %.*s\n\n", i, (int)n, m);
        assert_int_equal(ev.len, want.len);
        assert_memory_equal(ev.ptr, want.base, want.len);
        assert_int_equal(f->scratch.len, 0); /* framed in the buffer, not the scratch */
        tg_buf_append(&all, ev.ptr, ev.len);
        if (ev.len > max_ev)
            max_ev = ev.len;
        /* what is kept is a suffix of everything sent, starting at an event, within the limit */
        kept(&f->r, &got);
        assert_true(got.len <= (size_t)limit + 2 * max_ev); /* each generation: half, and one event over */
        assert_true(got.len <= all.len);
        assert_memory_equal(got.base, all.base + all.len - got.len, got.len);
        assert_true(got.len == all.len || memcmp(got.base, "id: 2a-", 7) == 0);
        if (i > 100) /* and it is not emptied either: at least half the limit stays */
            assert_true(got.len >= (size_t)limit / 2);
    }
    assert_int_equal(f->r.next_seq, 400);
    /* the stream ends: the same bytes, in no more room than they take */
    kept(&f->r, &want);
    tg_replay_end(&f->r);
    kept(&f->r, &got);
    assert_int_equal(got.len, want.len);
    assert_memory_equal(got.base, want.base, want.len);
    for (int g = 0; g < 2; g++)
        assert_true(gen_cap(&f->r.gen[g]) - f->r.gen[g].len <= 4096);
    tg_buf_dispose(&all);
    tg_buf_dispose(&want);
    tg_buf_dispose(&got);
    fix_free(f);
}

static void nothing_kept_without_room(void **state)
{
    (void)state;
    struct fix *f = fix_new(0);
    for (unsigned i = 1; i <= 50; i++) {
        char m[256];
        size_t n = message(m, sizeof m, i);
        struct tg_slice ev = tg_replay_message(&f->r, m, n, &f->scratch);
        assert_ptr_equal(ev.ptr, f->scratch.base);
        assert_int_equal(ev.len, f->scratch.len);
        char id[32];
        int idn = snprintf(id, sizeof id, "id: 2a-%u\n", i);
        assert_memory_equal(ev.ptr, id, (size_t)idn);
    }
    assert_int_equal(f->r.gen[0].len + f->r.gen[1].len, 0);
    assert_int_equal(gen_cap(&f->r.gen[0]) + gen_cap(&f->r.gen[1]), 0);
    assert_null(f->r.gen[0].head);
    assert_null(f->r.gen[1].head);
    fix_free(f);
}

/* A call in flight with one event holds about a kilobyte (a client can open many), and once
 * it ended, no more than its bytes. */
static void short_stream_gives_back_room(void **state)
{
    (void)state;
    struct fix *f = fix_new(65536);
    char m[256];
    size_t n = message(m, sizeof m, 1);
    tg_replay_message(&f->r, m, n, &f->scratch);
    assert_true(gen_cap(&f->r.gen[f->r.cur]) <= 1024);
    tg_replay_end(&f->r);
    assert_int_equal(gen_cap(&f->r.gen[f->r.cur]), f->r.gen[f->r.cur].len);
    assert_int_equal(gen_cap(&f->r.gen[f->r.cur ^ 1]), 0);
    fix_free(f);
}

/* A long stream grows by new chunks, not by moving what it keeps: every event stays where it was
 * framed until its generation is dropped (a moving buffer copied everything kept at each growth),
 * the chunks grow four times over to 64 KiB, and one event larger than that gets a chunk of its
 * own size. */
static void growing_moves_nothing(void **state)
{
    (void)state;
    struct fix *f = fix_new(1 << 20);
    enum { N = 3000 };
    const char **where = calloc(N + 1, sizeof(*where));
    char (*copy)[256] = calloc(N + 1, sizeof(*copy));
    size_t *len = calloc(N + 1, sizeof(*len));
    for (unsigned i = 1; i <= N; i++) {
        char m[256];
        size_t n = message(m, sizeof m, i);
        struct tg_slice ev = tg_replay_message(&f->r, m, n, &f->scratch);
        assert_true(ev.len <= sizeof(copy[i]));
        where[i] = ev.ptr;
        len[i] = ev.len;
        memcpy(copy[i], ev.ptr, ev.len);
    }
    assert_int_equal(f->r.cur, 0); /* N events stay within one generation of 512 KiB */
    for (unsigned i = 1; i <= N; i++)
        if (memcmp(where[i], copy[i], len[i]) != 0)
            fail_msg("event %u moved or changed after it was framed", i);
    size_t caps[8] = {0}, nk = 0;
    for (const struct tg_replay_chunk *k = f->r.gen[0].head; k != NULL; k = k->next, nk++)
        if (nk < 8)
            caps[nk] = k->b.cap;
    assert_true(nk >= 5);
    assert_true(caps[0] >= 1024 && caps[0] < 2048);
    assert_true(caps[1] >= 4096 && caps[1] < 8192);
    assert_true(caps[2] >= 16384 && caps[2] < 32768);
    assert_true(caps[3] >= 65536 && caps[3] < 131072);
    assert_true(caps[4] >= 65536 && caps[4] < 131072);
    /* an event larger than any chunk */
    size_t big = 200000;
    char *m = malloc(big);
    memset(m, 'x', big);
    m[0] = '"';
    m[big - 1] = '"';
    struct tg_slice ev = tg_replay_message(&f->r, m, big, &f->scratch);
    assert_true(ev.len > big);
    assert_true(f->r.gen[0].tail->b.cap >= ev.len && f->r.gen[0].tail->b.len == ev.len);
    assert_memory_equal(where[1], copy[1], len[1]);
    free(m);
    free(where);
    free(copy);
    free(len);
    fix_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keeps_newest_whole_events),
        cmocka_unit_test(nothing_kept_without_room),
        cmocka_unit_test(short_stream_gives_back_room),
        cmocka_unit_test(growing_moves_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
