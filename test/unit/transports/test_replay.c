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

#include "core/conf.h"
#include "core/gateway.h"
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
    tg_buf_dispose(&f->r.gen[0]);
    tg_buf_dispose(&f->r.gen[1]);
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

/* What a resuming client gets, oldest generation first (as tg_replay_write walks it). */
static void kept(struct tg_replay *r, struct tg_buf *out)
{
    out->len = 0;
    tg_buf_append(out, r->gen[r->cur ^ 1].base, r->gen[r->cur ^ 1].len);
    tg_buf_append(out, r->gen[r->cur].base, r->gen[r->cur].len);
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
        assert_true(f->r.gen[g].cap - f->r.gen[g].len <= 4096);
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
    assert_int_equal(f->r.gen[0].cap + f->r.gen[1].cap, 0);
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
    assert_true(f->r.gen[f->r.cur].cap <= 1024);
    tg_replay_end(&f->r);
    assert_int_equal(f->r.gen[f->r.cur].cap, f->r.gen[f->r.cur].len);
    assert_int_equal(f->r.gen[f->r.cur ^ 1].cap, 0);
    fix_free(f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keeps_newest_whole_events),
        cmocka_unit_test(nothing_kept_without_room),
        cmocka_unit_test(short_stream_gives_back_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
