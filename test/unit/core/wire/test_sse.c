/* core/wire/sse.c: the incremental text/event-stream parser and the writer.
 * Every stream is parsed whole, one byte at a time and split at every pair of
 * boundaries; all must give the same events (wslay "*_1byte" style). The
 * writer is checked byte for byte, then read back by the parser. */
#include "test/unit/unit.h"

#include "core/wire/sse.h"

struct ev {
    char event[64];
    char data[600];
    size_t data_len;
    char id[64];
    int has_id;
};

struct col {
    struct ev ev[16];
    int n;
};

static void copy_slice(char *dst, size_t cap, struct tg_slice s)
{
    assert_true(s.len < cap);
    if (s.len)
        memcpy(dst, s.ptr, s.len);
    dst[s.len] = '\0';
}

static int on_event(void *ud, const struct tg_sse_event *e)
{
    struct col *c = ud;
    assert_true(c->n < 16);
    struct ev *v = &c->ev[c->n++];
    copy_slice(v->event, sizeof(v->event), e->event);
    copy_slice(v->data, sizeof(v->data), e->data);
    v->data_len = e->data.len;
    copy_slice(v->id, sizeof(v->id), e->id);
    v->has_id = e->has_id;
    return 0;
}

/* Feeds s in the pieces given by cut points (ascending, within 0..n); returns the first error. */
static int feed_cuts(const char *s, size_t n, const size_t *cuts, size_t ncuts, size_t max_event, struct col *c)
{
    struct tg_sse_parser p;
    tg_sse_init(&p, max_event);
    memset(c, 0, sizeof(*c));
    size_t at = 0;
    int r = 0;
    for (size_t i = 0; i <= ncuts && r == 0; i++) {
        size_t end = i < ncuts ? cuts[i] : n;
        /* Each piece in its own allocation so an over-read is caught by ASan. */
        char *piece = malloc(end - at + 1);
        memcpy(piece, s + at, end - at);
        r = tg_sse_feed(&p, piece, end - at, on_event, c);
        free(piece);
        at = end;
    }
    tg_sse_dispose(&p);
    return r;
}

static void assert_same(const struct col *a, const struct col *b, const char *how)
{
    if (a->n != b->n)
        fail_msg("%s: %d events, whole feed gave %d", how, b->n, a->n);
    for (int i = 0; i < a->n; i++) {
        const struct ev *x = &a->ev[i], *y = &b->ev[i];
        if (strcmp(x->event, y->event) || x->data_len != y->data_len || memcmp(x->data, y->data, x->data_len) ||
            strcmp(x->id, y->id) || x->has_id != y->has_id)
            fail_msg("%s: event %d differs: event=\"%s\" data=\"%s\" id=\"%s\"/%d vs event=\"%s\" data=\"%s\" "
                     "id=\"%s\"/%d",
                     how, i, y->event, y->data, y->id, y->has_id, x->event, x->data, x->id, x->has_id);
    }
}

/* Parses s whole, then byte by byte, then cut at every pair of positions; returns the events of the whole feed. */
static void parse_all_ways(const char *s, size_t n, size_t max_event, struct col *whole, int expect_r)
{
    int r = feed_cuts(s, n, NULL, 0, max_event, whole);
    assert_int_equal(r, expect_r);
    struct col other;
    size_t cuts[1024];
    assert_true(n < 1024);
    for (size_t i = 0; i < n; i++)
        cuts[i] = i + 1;
    r = feed_cuts(s, n, cuts, n ? n - 1 : 0, max_event, &other);
    assert_int_equal(r, expect_r);
    assert_same(whole, &other, "one byte at a time");
    for (size_t i = 0; i <= n; i++)
        for (size_t j = i; j <= n; j++) {
            size_t two[2] = {i, j};
            r = feed_cuts(s, n, two, 2, max_event, &other);
            if (r != expect_r)
                fail_msg("cut at %zu and %zu: returned %d, expected %d", i, j, r, expect_r);
            char how[64];
            snprintf(how, sizeof(how), "cut at %zu and %zu", i, j);
            assert_same(whole, &other, how);
        }
}

#define PARSE(lit, col) parse_all_ways((lit), sizeof(lit) - 1, 1 << 20, (col), 0)
#define PARSE_MAX(lit, max, col, r) parse_all_ways((lit), sizeof(lit) - 1, (max), (col), (r))

static void expect_ev(const struct col *c, int i, const char *event, const char *data, const char *id)
{
    assert_true(i < c->n);
    assert_string_equal(c->ev[i].event, event);
    assert_string_equal(c->ev[i].data, data);
    assert_int_equal(c->ev[i].data_len, strlen(data));
    if (id) {
        assert_int_equal(c->ev[i].has_id, 1);
        assert_string_equal(c->ev[i].id, id);
    } else {
        assert_int_equal(c->ev[i].has_id, 0);
    }
}

static void single_event(void **state)
{
    struct col c;
    PARSE("data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}", NULL);
}

/* The usual relayed event is read in one step (core/wire/sse.c usual_event) when it is whole in a
 * feed; cut anywhere it goes through the line parser: both must give the same events, for it and
 * for everything that only looks like it. */
static void usual_event_and_near_misses(void **state)
{
    struct col c;
    PARSE("event: message\ndata: {\"a\":1}\n\n"
          "event: message\ndata: x\r\n\n"
          "event: message\ndata: y\n\n"
          ": c\nevent: message\ndata: z\ndata: w\n\n"
          "event: messagex\ndata: q\n\n"
          "event: message\ndata: \n\n"
          "id: 5\nevent: message\ndata: after id\n\n"
          "event: message\ndata:nospace\n\n"
          "event: message\ndata: last\n\n",
          &c);
    assert_int_equal(c.n, 9);
    expect_ev(&c, 0, "message", "{\"a\":1}", NULL);
    expect_ev(&c, 1, "message", "x", NULL);
    expect_ev(&c, 2, "message", "y", NULL);
    expect_ev(&c, 3, "message", "z\nw", NULL);
    expect_ev(&c, 4, "messagex", "q", NULL);
    expect_ev(&c, 5, "message", "", NULL);
    expect_ev(&c, 6, "message", "after id", "5");
    expect_ev(&c, 7, "message", "nospace", NULL);
    expect_ev(&c, 8, "message", "last", NULL);
    /* Bytes that stop the one-pass search for the line's end (core/wire/sse.c first_odd_byte) before
     * its LF, in the first sixteen bytes and past them: a tab, UTF-8, a CR (which ends the line:
     * "b" is then a field of its own, ignored), a CR after the odd byte. */
    struct col o;
    PARSE("event: message\ndata: \t{\"k\":\"0123456789abcdef\"}\n\n"
          "event: message\ndata: {\"k\":\"0123456789abcdef\u00e9\t\"}\n\n"
          "event: message\ndata: {\"k\":\"0123456789abcdef\xc3\xa9\"}\n\n"
          "event: message\ndata: a\rb\n\n"
          "event: message\ndata: 0123456789abcdef0123\rb\n\n"
          "event: message\ndata: 0123456789abcdef\xc3\xa9 0123456789abcdef\rb\n\n"
          "event: message\ndata: \xc3\xa9\n\n"
          "event: message\ndata: 0123456789abcdef0123456789abcdef01\n\n",
          &o);
    assert_int_equal(o.n, 8);
    expect_ev(&o, 0, "message", "\t{\"k\":\"0123456789abcdef\"}", NULL);
    expect_ev(&o, 1, "message", "{\"k\":\"0123456789abcdef\u00e9\t\"}", NULL);
    expect_ev(&o, 2, "message", "{\"k\":\"0123456789abcdef\xc3\xa9\"}", NULL);
    expect_ev(&o, 3, "message", "a", NULL);
    expect_ev(&o, 4, "message", "0123456789abcdef0123", NULL);
    expect_ev(&o, 5, "message", "0123456789abcdef\xc3\xa9 0123456789abcdef", NULL);
    expect_ev(&o, 6, "message", "\xc3\xa9", NULL);
    expect_ev(&o, 7, "message", "0123456789abcdef0123456789abcdef01", NULL);
    /* over the limit: the line parser's answer (the event is refused) */
    struct col d;
    PARSE_MAX("event: message\ndata: 0123456789\n\n", 5, &d, TG_ELIMIT);
    assert_int_equal(d.n, 0);
}

static void line_endings(void **state)
{
    struct col c;
    PARSE("event: message\ndata: a\nid: 1\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "message", "a", "1");
    PARSE("event: message\r\ndata: a\r\nid: 1\r\n\r\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "message", "a", "1");
    PARSE("event: message\rdata: a\rid: 1\r\r", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "message", "a", "1");
    /* Mixed in one stream; CR LF counts as one line end, LF CR as two. */
    PARSE("data: x\r\n\ndata: y\r\rdata: z\n\r", &c);
    assert_int_equal(c.n, 3);
    expect_ev(&c, 0, "", "x", NULL);
    expect_ev(&c, 1, "", "y", NULL);
    expect_ev(&c, 2, "", "z", NULL);
    PARSE("data: x\n\rdata: y\r\n\r\n", &c);
    assert_int_equal(c.n, 2);
    expect_ev(&c, 0, "", "x", NULL);
    expect_ev(&c, 1, "", "y", NULL);
}

static void multi_line_data(void **state)
{
    struct col c;
    PARSE("data: line1\ndata: line2\r\ndata:line3\rdata\ndata: \n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "line1\nline2\nline3\n\n", NULL);
    /* Only one leading space is removed. */
    PARSE("data:  two spaces \n\n", &c);
    expect_ev(&c, 0, "", " two spaces ", NULL);
    /* A bare "data" line dispatches an empty message. */
    PARSE("data\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "", NULL);
    /* Colons after the first belong to the value. */
    PARSE("data: a:b: c\n\n", &c);
    expect_ev(&c, 0, "", "a:b: c", NULL);
}

static void comments_and_unknown_fields(void **state)
{
    struct col c;
    PARSE(": ping\n\n", &c);
    assert_int_equal(c.n, 0);
    PARSE(":\n:comment\r\n: data: not data\rdata: real\n: between\ndata: more\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "real\nmore", NULL);
    PARSE("retry: 1000\nfoo: bar\nDATA: upper\n data: leading space\ndata: ok\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "ok", NULL);
    /* No data, no event (even with event and id fields). */
    PARSE("event: x\nid: 5\n\nretry: 1\n\n\n\n", &c);
    assert_int_equal(c.n, 0);
}

static void event_and_id_fields(void **state)
{
    struct col c;
    PARSE("id: 42\nevent: endpoint\ndata: /messages?sessionId=abc\n\n"
          "data: {}\n\n"
          "event: first\nevent: second\nid: a\nid: b\ndata: d\n\n"
          "id\ndata: e\n\n",
          &c);
    assert_int_equal(c.n, 4);
    expect_ev(&c, 0, "endpoint", "/messages?sessionId=abc", "42");
    expect_ev(&c, 1, "", "{}", NULL); /* event type does not carry over */
    expect_ev(&c, 2, "second", "d", "b");
    expect_ev(&c, 3, "", "e", ""); /* an empty id is an id */
    /* An id containing NUL is ignored. */
    PARSE("id: a\0b\ndata: x\n\n", &c);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.ev[0].has_id, 0);
}

static void several_events_and_incomplete_tail(void **state)
{
    struct col c;
    PARSE("data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n", &c);
    assert_int_equal(c.n, 3); /* the last one has no blank line yet */
    expect_ev(&c, 2, "", "3", NULL);
    PARSE("data: 1\n\n\n\n\ndata: 2\n\n", &c);
    assert_int_equal(c.n, 2);
}

static void bom_at_start(void **state)
{
    struct col c;
    /* Whole feed: the BOM is skipped. */
    assert_int_equal(feed_cuts("\xEF\xBB\xBF" "data: b\n\n", 12, NULL, 0, 1 << 20, &c), 0);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "b", NULL);
    /* Only at the very start: later it is part of a line (here an unknown field name). */
    PARSE("data: a\n\n\xEF\xBB\xBF" "data: b\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "a", NULL);
    /* A BOM inside data is kept. */
    PARSE("data: \xEF\xBB\xBFx\n\n", &c);
    expect_ev(&c, 0, "", "\xEF\xBB\xBFx", NULL);
}

/* The BOM is recognised however the first bytes are split across feeds (a first read
 * of one or two bytes used to let EF BB BF into the first line and lose the event).
 * Bytes that start like a BOM but are not one stay line content. */
static void bom_split_across_feeds(void **state)
{
    struct col c;
    PARSE("\xEF\xBB\xBF" "data: b\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "b", NULL);
    /* Not a BOM after all: the bytes are part of the first line (here the field name). */
    PARSE("\xEF" "data: b\n\ndata: c\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "c", NULL);
    PARSE("\xEF\xBB" "data: b\n\ndata: c\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "c", NULL);
    PARSE(":\xEF\xBB\xBF\n" "data: b\n\n", &c); /* a comment, then an event */
    assert_int_equal(c.n, 1);
    /* Only one BOM is skipped. */
    PARSE("\xEF\xBB\xBF\xEF\xBB\xBF" "data: b\n\ndata: c\n\n", &c);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "c", NULL);
    /* A stream that is only a BOM (so far) gives nothing, and then continues normally. */
    PARSE("\xEF\xBB\xBF", &c);
    assert_int_equal(c.n, 0);
}

static void max_event_limit(void **state)
{
    struct col c;
    /* Exactly max_event bytes of data is fine; one more is TG_ELIMIT, whatever the split. */
    PARSE_MAX("data: 0123456789abcdef\n\n", 16, &c, 0);
    assert_int_equal(c.n, 1);
    expect_ev(&c, 0, "", "0123456789abcdef", NULL);
    PARSE_MAX("data: 0123456789abcdefg\n\n", 16, &c, TG_ELIMIT);
    assert_int_equal(c.n, 0);
    /* The joining newlines count. */
    PARSE_MAX("data: 01234567\ndata: 0123456\n\n", 16, &c, 0);
    expect_ev(&c, 0, "", "01234567\n0123456", NULL);
    PARSE_MAX("data: 01234567\ndata: 01234567\n\n", 16, &c, TG_ELIMIT);
    /* The limit is per event: many events of max size pass. */
    PARSE_MAX("data: 0123456789abcdef\n\ndata: 0123456789abcdef\n\ndata: 0123456789abcdef\n\n", 16, &c, 0);
    assert_int_equal(c.n, 3);
    /* Event names are capped too. */
    char big[400];
    int k = snprintf(big, sizeof(big), "event: ");
    memset(big + k, 'e', 300);
    k += 300;
    k += snprintf(big + k, sizeof(big) - (size_t)k, "\ndata: x\n\n");
    assert_int_equal(feed_cuts(big, (size_t)k, NULL, 0, 1 << 20, &c), TG_ELIMIT);
    /* A line that never ends cannot grow without bound. */
    struct tg_sse_parser p;
    tg_sse_init(&p, 64);
    char chunk[256];
    memset(chunk, ':', sizeof(chunk));
    int r = 0;
    for (int i = 0; i < 100 && r == 0; i++)
        r = tg_sse_feed(&p, chunk, sizeof(chunk), on_event, &c);
    assert_int_equal(r, TG_ELIMIT);
    assert_true(p.line.cap <= 64 + 1024);
    tg_sse_dispose(&p);
}

/* The owner of a parser may go away inside the event callback (a session removed by the answer
 * it just got): returning non-zero stops the feed at once, and the parser is never touched again,
 * so the owner can free it (here: its heap storage, which ASan would catch being read). */
struct owner {
    struct tg_sse_parser *p;
    int events;
};

static int on_event_then_gone(void *ud, const struct tg_sse_event *e)
{
    struct owner *o = ud;
    (void)e;
    o->events++;
    tg_sse_dispose(o->p);
    free(o->p);
    o->p = NULL;
    return 1;
}

/* resync (a legacy SSE link: many calls on one stream): an event over the limit is dropped, its
 * first bytes reported, and the events around it still arrive, whatever the cuts. */
static char dropped_head[64];
static int ndropped;
static void on_drop(void *ud, const char *head, size_t n)
{
    (void)ud;
    ndropped++;
    size_t k = n < sizeof(dropped_head) - 1 ? n : sizeof(dropped_head) - 1;
    memcpy(dropped_head, head, k);
    dropped_head[k] = '\0';
}

static void resync_drops_one_event(void **state)
{
    (void)state;
    struct tg_buf s;
    tg_buf_init(&s);
    tg_buf_appends(&s, "data: {\"id\":1}\n\n");
    /* 300 bytes of data over two lines (the limit is 100), then an event field and an id */
    tg_buf_appends(&s, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"");
    for (int i = 0; i < 150; i++)
        tg_buf_append(&s, "x", 1);
    tg_buf_appends(&s, "\ndata: ");
    for (int i = 0; i < 150; i++)
        tg_buf_append(&s, "y", 1);
    tg_buf_appends(&s, "\"}\nid: 9\r\n\r\n");
    tg_buf_appends(&s, "data: {\"id\":2}\r\r");
    /* and one over the limit in a single line, then the last event */
    tg_buf_appends(&s, "data: {\"id\":8,");
    for (int i = 0; i < 400; i++)
        tg_buf_append(&s, "z", 1);
    tg_buf_appends(&s, "}\n\ndata: {\"id\":3}\n\n");
    for (size_t cut = 0; cut <= s.len; cut++) {
        for (size_t step = 1; step <= 7; step += 6) {
            struct tg_sse_parser p;
            tg_sse_init(&p, 100);
            p.resync = 1;
            p.on_drop = on_drop;
            struct col c;
            memset(&c, 0, sizeof(c));
            ndropped = 0;
            int r = 0, any_limit = 0;
            /* first piece up to cut, then pieces of `step` bytes */
            size_t at = 0;
            while (at < s.len) {
                size_t end = at == 0 && cut > 0 ? cut : at + step;
                if (end > s.len)
                    end = s.len;
                char *piece = malloc(end - at + 1);
                memcpy(piece, s.base + at, end - at);
                r = tg_sse_feed(&p, piece, end - at, on_event, &c);
                free(piece);
                assert_true(r == 0 || r == TG_ELIMIT);
                any_limit |= r == TG_ELIMIT;
                at = end;
            }
            tg_sse_dispose(&p);
            if (c.n != 3 || ndropped != 2 || !any_limit)
                fail_msg("cut %zu step %zu: %d events, %d dropped", cut, step, c.n, ndropped);
            assert_string_equal(c.ev[0].data, "{\"id\":1}");
            assert_string_equal(c.ev[1].data, "{\"id\":2}");
            assert_string_equal(c.ev[2].data, "{\"id\":3}");
            assert_false(c.ev[1].has_id); /* the dropped event's id: 9 went with it */
            assert_true(strncmp(dropped_head, "{\"id\":8,", 8) == 0);
        }
    }
    tg_buf_dispose(&s);
}

static void owner_gone_in_callback(void **state)
{
    (void)state;
    struct owner o = {malloc(sizeof(struct tg_sse_parser)), 0};
    tg_sse_init(o.p, 1 << 20);
    static const char in[] = "data: one\n\ndata: two\n\ndata: three\n\n";
    char *bytes = malloc(sizeof(in));
    memcpy(bytes, in, sizeof(in));
    assert_int_equal(tg_sse_feed(o.p, bytes, sizeof(in) - 1, on_event_then_gone, &o), TG_SSE_STOPPED);
    assert_int_equal(o.events, 1);
    assert_null(o.p);
    free(bytes);
}

/* SEP-1699: the last id and retry survive a reconnect (they go back as Last-Event-ID), and a
 * line cut by the old stream's end does not leak into the new one. */
static void restart_keeps_last_id_and_retry(void **state)
{
    (void)state;
    struct col c;
    memset(&c, 0, sizeof(c));
    struct tg_sse_parser p;
    tg_sse_init(&p, 1 << 20);
    static const char first[] = "id: ev-7\nretry: 250\ndata:\n\ndata: half";
    assert_int_equal(tg_sse_feed(&p, first, sizeof(first) - 1, on_event, &c), 0);
    assert_int_equal(p.retry_ms, 250);
    tg_sse_restart(&p);
    assert_int_equal(p.has_last_id, 1);
    assert_int_equal(p.last_id_len, 4);
    assert_memory_equal(p.last_id, "ev-7", 4);
    assert_int_equal(p.retry_ms, 250);
    int before = c.n;
    static const char second[] = "data: whole\n\n";
    assert_int_equal(tg_sse_feed(&p, second, sizeof(second) - 1, on_event, &c), 0);
    assert_int_equal(c.n, before + 1);
    assert_string_equal(c.ev[c.n - 1].data, "whole");
    tg_sse_dispose(&p);
}

/* ---- writer ---------------------------------------------------------------------------- */

/* Printable form of bytes for failure messages: CR and LF shown as \r and \n. */
static const char *esc(char *dst, size_t cap, const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 3 < cap; i++) {
        if (p[i] == '\n' || p[i] == '\r') {
            dst[k++] = '\\';
            dst[k++] = p[i] == '\n' ? 'n' : 'r';
        } else {
            dst[k++] = p[i];
        }
    }
    dst[k] = '\0';
    return dst;
}

static void expect_bytes_(const struct tg_buf *b, const char *want, size_t want_len, const char *what)
{
    if (b->len != want_len || (want_len && memcmp(b->base, want, want_len) != 0)) {
        char x[512], y[512];
        fail_msg("%s: wrote \"%s\" (%zu bytes), expected \"%s\" (%zu bytes)", what, esc(x, sizeof(x), b->base, b->len),
                 b->len, esc(y, sizeof(y), want, want_len), want_len);
    }
}
#define EXPECT_BYTES(b, lit, what) expect_bytes_((b), (lit), sizeof(lit) - 1, (what))

struct wcase {
    const char *name;
    const char *msg;
    size_t len;
    const char *data_lines; /* what follows "event: message\n": the data lines and the blank line */
};
#define WCASE(name, msg, lines) {name, msg, sizeof(msg) - 1, lines}

/* The bytes the two writers of the old core/app/route.c (channel_send and sse_write_message) produced: every
 * LF and every CR ends a data line, so CRLF leaves an empty data line between. */
static const struct wcase wcases[] = {
    WCASE("no newline", "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}",
          "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"),
    WCASE("LF", "a\nb", "data: a\ndata: b\n\n"),
    WCASE("CR", "a\rb", "data: a\ndata: b\n\n"),
    WCASE("CRLF", "a\r\nb", "data: a\ndata: \ndata: b\n\n"),
    WCASE("LFCR", "a\n\rb", "data: a\ndata: \ndata: b\n\n"),
    WCASE("empty", "", "data: \n\n"),
    WCASE("only LF", "\n", "data: \ndata: \n\n"),
    WCASE("only CRLF", "\r\n", "data: \ndata: \ndata: \n\n"),
    WCASE("trailing LF", "a\n", "data: a\ndata: \n\n"),
    WCASE("leading CR", "\ra", "data: \ndata: a\n\n"),
    WCASE("two LF", "a\n\nb", "data: a\ndata: \ndata: b\n\n"),
    WCASE("mixed", "x\ry\nz\r\n", "data: x\ndata: y\ndata: z\ndata: \ndata: \n\n"),
};

static void writer_message_bytes(void **state)
{
    for (size_t i = 0; i < sizeof(wcases) / sizeof(wcases[0]); i++) {
        const struct wcase *w = &wcases[i];
        char want[256];
        char what[64];
        struct tg_buf b;

        tg_buf_init(&b);
        tg_sse_write_message(&b, NULL, 0, w->msg, w->len);
        int n = snprintf(want, sizeof(want), "event: message\n%s", w->data_lines);
        snprintf(what, sizeof(what), "%s, no id", w->name);
        expect_bytes_(&b, want, (size_t)n, what);
        tg_buf_dispose(&b);

        tg_buf_init(&b);
        tg_sse_write_message(&b, "1fa-7", 5, w->msg, w->len);
        n = snprintf(want, sizeof(want), "id: 1fa-7\nevent: message\n%s", w->data_lines);
        snprintf(what, sizeof(what), "%s, id", w->name);
        expect_bytes_(&b, want, (size_t)n, what);
        tg_buf_dispose(&b);
    }
}

static void writer_edge_cases(void **state)
{
    struct tg_buf b;
    /* An empty message may come without a pointer. */
    tg_buf_init(&b);
    tg_sse_write_message(&b, NULL, 0, NULL, 0);
    EXPECT_BYTES(&b, "event: message\ndata: \n\n", "NULL, 0");
    tg_buf_dispose(&b);
    /* An empty id is written (it resets the client's last event id); only NULL leaves it out. */
    tg_buf_init(&b);
    tg_sse_write_message(&b, "", 0, "x", 1);
    EXPECT_BYTES(&b, "id: \nevent: message\ndata: x\n\n", "empty id");
    tg_buf_dispose(&b);
    /* The id is id_len bytes, not up to a NUL. */
    tg_buf_init(&b);
    tg_sse_write_message(&b, "5-12345", 4, "x", 1);
    EXPECT_BYTES(&b, "id: 5-12\nevent: message\ndata: x\n\n", "id_len");
    tg_buf_dispose(&b);
    /* Bytes other than CR and LF pass as they are, a NUL included. */
    tg_buf_init(&b);
    tg_sse_write_message(&b, NULL, 0, "a\0b", 3);
    EXPECT_BYTES(&b, "event: message\ndata: a\0b\n\n", "NUL");
    tg_buf_dispose(&b);
}

static void writer_appends(void **state)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_append(&b, "HTTP", 4);
    tg_sse_write_message(&b, "1-1", 3, "a", 1);
    tg_sse_write_message(&b, "1-2", 3, "b\nc", 3);
    EXPECT_BYTES(&b, "HTTPid: 1-1\nevent: message\ndata: a\n\nid: 1-2\nevent: message\ndata: b\ndata: c\n\n",
                 "two messages after existing bytes");
    tg_buf_dispose(&b);
}

/* A long message with many lines: every line written, in order (and scanned once, not once per
 * line; a quadratic scan would show here as a slow test under ASan). */
static void writer_many_lines(void **state)
{
    size_t lines = 100000, n = lines * 2;
    char *msg = malloc(n);
    for (size_t i = 0; i < lines; i++) {
        msg[2 * i] = (char)('a' + i % 26);
        msg[2 * i + 1] = '\n';
    }
    struct tg_buf b;
    tg_buf_init(&b);
    tg_sse_write_message(&b, NULL, 0, msg, n);
    static const char head[] = "event: message\n";
    assert_int_equal(b.len, sizeof(head) - 1 + lines * 8 + 7 + 1);
    assert_memory_equal(b.base, head, sizeof(head) - 1);
    const char *q = b.base + sizeof(head) - 1;
    for (size_t i = 0; i < lines; i++, q += 8) {
        char want[8] = {'d', 'a', 't', 'a', ':', ' ', (char)('a' + i % 26), '\n'};
        if (memcmp(q, want, 8) != 0)
            fail_msg("line %zu differs", i);
    }
    assert_memory_equal(q, "data: \n\n", 8);
    tg_buf_dispose(&b);
    free(msg);
}

static void writer_other_blocks(void **state)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_sse_write_event(&b, "endpoint", NULL, 0, "/mcp/messages?sessionId=ab", 26);
    EXPECT_BYTES(&b, "event: endpoint\ndata: /mcp/messages?sessionId=ab\n\n", "endpoint event");
    tg_buf_dispose(&b);

    tg_buf_init(&b);
    tg_sse_write_comment(&b, "keepalive");
    EXPECT_BYTES(&b, ": keepalive\n\n", "comment");
    tg_buf_dispose(&b);

    tg_buf_init(&b);
    tg_sse_write_retry(&b, 0);
    tg_sse_write_retry(&b, 1500);
    EXPECT_BYTES(&b, "retry: 0\n\nretry: 1500\n\n", "retry");
    tg_buf_dispose(&b);

    /* The priming event transports/streamable.c writes as "id: %llx-0\nretry: 1000\ndata:\n\n". */
    tg_buf_init(&b);
    tg_sse_write_prime(&b, "1fa-0", 5, 1000);
    EXPECT_BYTES(&b, "id: 1fa-0\nretry: 1000\ndata:\n\n", "prime");
    tg_buf_dispose(&b);
}

/* What the writer wrote, the parser reads back: a message without CR comes back byte for byte,
 * with its id and the event name "message". */
static void roundtrip_one(const char *msg, size_t n, const char *id, int all_cuts)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_sse_write_message(&b, id, id ? strlen(id) : 0, msg, n);
    struct col c, d;
    if (all_cuts) {
        parse_all_ways(b.base, b.len, 1 << 20, &c, 0);
    } else {
        assert_int_equal(feed_cuts(b.base, b.len, NULL, 0, 1 << 20, &c), 0);
        size_t cuts[128];
        assert_true(b.len <= 128);
        for (size_t i = 0; i + 1 < b.len; i++)
            cuts[i] = i + 1;
        assert_int_equal(feed_cuts(b.base, b.len, cuts, b.len ? b.len - 1 : 0, 1 << 20, &d), 0);
        assert_same(&c, &d, "one byte at a time");
    }
    char x[128];
    if (c.n != 1 || c.ev[0].data_len != n || (n && memcmp(c.ev[0].data, msg, n) != 0))
        fail_msg("\"%s\": %d events, first data \"%s\"", esc(x, sizeof(x), msg, n), c.n,
                 c.n ? c.ev[0].data : "");
    assert_string_equal(c.ev[0].event, "message");
    assert_int_equal(c.ev[0].has_id, id != NULL);
    if (id)
        assert_string_equal(c.ev[0].id, id);
    tg_buf_dispose(&b);
}

static void writer_parser_roundtrip(void **state)
{
    static const char *const msgs[] = {
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"a\\nb\"}]}}",
        "", "x", "a\nb", "\n", "\n\n", "a\n", "\nb", "data: not a field", ": not a comment", "id: 9",
        /* one line, but not plain ASCII: the writer's quick check says "look closer" */
        "{\"text\":\"caf\xc3\xa9 \xe2\x82\xac and a\ttab, longer than a block\"}", "\x01\x02\x0b\x0c x",
    };
    for (size_t i = 0; i < sizeof(msgs) / sizeof(msgs[0]); i++) {
        roundtrip_one(msgs[i], strlen(msgs[i]), NULL, 1);
        roundtrip_one(msgs[i], strlen(msgs[i]), "3-14", 1);
    }
    /* Every message of up to 7 bytes over {a, LF, ':', ' '}, whole and one byte at a time. */
    static const char alpha[4] = {'a', '\n', ':', ' '};
    for (size_t len = 0; len <= 7; len++) {
        size_t total = (size_t)1 << (2 * len);
        for (size_t v = 0; v < total; v++) {
            char m[8];
            for (size_t i = 0; i < len; i++)
                m[i] = alpha[(v >> (2 * i)) & 3];
            roundtrip_one(m, len, (v & 1) ? "7-1" : NULL, 0);
        }
    }
}

/* A CR does not survive: the parser ends a line at it (and at CRLF once), and joins data lines
 * with LF. So CR comes back as LF and CRLF as two LFs. */
static void writer_parser_cr_becomes_lf(void **state)
{
    static const struct {
        const char *msg, *back;
    } cases[] = {{"a\rb", "a\nb"}, {"a\r\nb", "a\n\nb"}, {"\r", "\n"}, {"a\n\rb", "a\n\nb"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tg_buf b;
        tg_buf_init(&b);
        tg_sse_write_message(&b, NULL, 0, cases[i].msg, strlen(cases[i].msg));
        struct col c;
        parse_all_ways(b.base, b.len, 1 << 20, &c, 0);
        assert_int_equal(c.n, 1);
        expect_ev(&c, 0, "message", cases[i].back, NULL);
        tg_buf_dispose(&b);
    }
}

/* Line ends at every offset around the sixteen-byte blocks the writer and the parser search
 * in: a message of lines of 0 to 40 bytes, each ended by LF or CR, written and parsed back
 * (a CR comes back as LF). */
static void writer_parser_long_lines(void **state)
{
    (void)state;
    for (size_t first = 0; first <= 40; first++) {
        char msg[256], back[256];
        size_t n = 0;
        for (size_t line = 0; line < 3; line++) {
            size_t len = line == 0 ? first : (first * 7 + line * 5) % 37;
            for (size_t i = 0; i < len; i++)
                msg[n + i] = back[n + i] = (char)('a' + (n + i) % 26);
            n += len;
            msg[n] = (first + line) % 2 ? '\r' : '\n';
            back[n] = '\n';
            n++;
        }
        msg[n] = back[n] = 'z'; /* the last line has no end */
        n++;
        back[n] = msg[n] = '\0';
        struct tg_buf b;
        tg_buf_init(&b);
        tg_sse_write_message(&b, NULL, 0, msg, n);
        struct col c;
        parse_all_ways(b.base, b.len, 1 << 20, &c, 0);
        assert_int_equal(c.n, 1);
        expect_ev(&c, 0, "message", back, NULL);
        tg_buf_dispose(&b);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(single_event),
        cmocka_unit_test(usual_event_and_near_misses),
        cmocka_unit_test(line_endings),
        cmocka_unit_test(multi_line_data),
        cmocka_unit_test(comments_and_unknown_fields),
        cmocka_unit_test(event_and_id_fields),
        cmocka_unit_test(several_events_and_incomplete_tail),
        cmocka_unit_test(bom_at_start),
        cmocka_unit_test(bom_split_across_feeds),
        cmocka_unit_test(max_event_limit),
        cmocka_unit_test(resync_drops_one_event),
        cmocka_unit_test(owner_gone_in_callback),
        cmocka_unit_test(restart_keeps_last_id_and_retry),
        cmocka_unit_test(writer_message_bytes),
        cmocka_unit_test(writer_edge_cases),
        cmocka_unit_test(writer_appends),
        cmocka_unit_test(writer_many_lines),
        cmocka_unit_test(writer_other_blocks),
        cmocka_unit_test(writer_parser_roundtrip),
        cmocka_unit_test(writer_parser_cr_becomes_lf),
        cmocka_unit_test(writer_parser_long_lines),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
