/* Upstream answers: the HTTP/1.1 response parser of upstream/pool/http_conn.c (its llhttp settings
 * and header/body callbacks) and text/event-stream (core/wire/sse.c: tg_sse_init, tg_sse_feed,
 * tg_sse_restart, and the writer tg_sse_write_message), the parser every SSE upstream answer and
 * legacy SSE link goes through.
 *
 * Input: 4 control bytes, then the bytes. Byte 0 picks max_event (16 << (b0 & 15)) and, with
 * bit 7 set, that the bytes are an HTTP response (else an SSE stream); byte 1 stops the SSE
 * callback after that many events (0: never); bytes 2-3 seed the chunking.
 *
 * HTTP: upstream/pool/http_conn.c is compiled into this target (#include, as unit tests reach statics), so
 * its own resp_settings and callbacks parse the response on a zeroed struct tg_upconn with a
 * request attached, as on_conn_read() runs llhttp_execute: each read until the response is
 * complete (HPE_PAUSED) or an error; at the end of the bytes, llhttp_finish as on an EOF. The
 * transcript: interim and final status, Content-Type and Mcp-Session-Id as captured, the body,
 * the outcome (llhttp errno, complete, bytes left after the response); when the Content-Type is
 * text/event-stream, the body is parsed as SSE too. on_conn_read() itself, with its keep-alive
 * and retry decisions, needs a libuv stream and a pool, and is not driven.
 *
 * The stream is fed three ways on fresh parsers: in one tg_sse_feed, split at pseudo-random
 * points (chunks of 0..32 bytes, empty feeds included), and one byte at a time; each way feeds
 * it, restarts the parser (tg_sse_restart, as on a reconnect), and feeds it again, and stops at
 * the first feed that does not return 0 (as the owner drops the stream).
 * Properties:
 *   the three ways give the same transcript: every event (name, data, id, has_id), the result
 *   that ended the feeding, and the state kept for a reconnect (last id, retry);
 *   an event's data never exceeds max_event; a kept last id is printable ASCII;
 *   the writer: parse(tg_sse_write_message(id, x)) is one event "message" with that id and data
 *   x with each CR turned into LF (what core/wire/sse.h promises).
 * Any input: no crash, no leak, no undefined behaviour.
 *
 * Its first finding, fixed: on_headers_complete() in upstream/pool/http_conn.c took a 101 for an
 * interim response, and llhttp handed its bytes to on_body before any on_head.
 *
 * Its second, fixed too (regress/upstream/1xx-*): any other 1xx with a Content-Length or
 * Transfer-Encoding: chunked had a body for llhttp 8.1 (only 101 is special to it), so those
 * bytes reached on_data before any on_head; on_headers_complete() now skips the body of a 1xx
 * (RFC 9112 6.3: it has none), and of a 204 and a 304.
 *
 * A line over max_event + 1024 was capped only when it arrived in pieces (tg_sse_feed now caps
 * a whole one too). Streams with a line that long are still not compared across splits (build
 * with -DTG_FUZZ_SSE_STRICT to compare them): at the cap, a partial BOM joining the first line
 * may decide which side of it a line falls.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/wire/sse.h"
/* tgcore builds it with its own warning set; -Wextra here would flag an unused callback parameter. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include "upstream/pool/http_conn.c"
#pragma GCC diagnostic pop

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint32_t next(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return *s;
}

/* Chunk length for mode 0 (one chunk), 1 (pseudo-random, 0..32) or 2 (one byte). */
static size_t chunk(int mode, size_t left, uint32_t *seed)
{
    size_t k = mode == 0 ? left : mode == 2 ? 1 : next(seed) % 33;
    return k > left ? left : k;
}

/* ---- SSE ------------------------------------------------------------------------------------ */

struct run {
    struct tg_buf t; /* the transcript */
    size_t max_event;
    unsigned stop_after, seen;
};

static void put_slice(struct tg_buf *t, char tag, struct tg_slice s)
{
    tg_buf_appendf(t, "%c%zu:", tag, s.len);
    tg_buf_append(t, s.ptr ? s.ptr : "", s.len);
}

static int on_event(void *ud, const struct tg_sse_event *ev)
{
    struct run *r = ud;
    if (ev->data.len > r->max_event)
        abort(); /* the cap holds */
    put_slice(&r->t, 'E', ev->event);
    put_slice(&r->t, 'D', ev->data);
    tg_buf_appendf(&r->t, "H%d", ev->has_id);
    put_slice(&r->t, 'I', ev->id);
    tg_buf_append(&r->t, "\n", 1);
    r->seen++;
    return r->stop_after != 0 && r->seen >= r->stop_after;
}

static void feed_all(struct run *r, const char *p, size_t n, int mode, uint32_t seed)
{
    struct tg_sse_parser sp;
    tg_sse_init(&sp, r->max_event);
    int rc = 0;
    for (int pass = 0; pass < 2 && rc == 0; pass++) {
        if (pass == 1)
            tg_sse_restart(&sp);
        size_t i = 0;
        /* Mode 1 also makes empty feeds, at the end too. */
        while (rc == 0 && (i < n || (mode == 1 && (next(&seed) & 7) == 0))) {
            size_t k = chunk(mode, n - i, &seed);
            rc = tg_sse_feed(&sp, p + i, k, on_event, r);
            i += k;
        }
        tg_buf_appendf(&r->t, "pass %d rc %d\n", pass, rc);
    }
    if (sp.has_last_id) {
        if (sp.last_id_len >= sizeof(sp.last_id))
            abort();
        for (size_t i = 0; i < sp.last_id_len; i++)
            if ((unsigned char)sp.last_id[i] < 0x20 || (unsigned char)sp.last_id[i] > 0x7e)
                abort();
    }
    tg_buf_appendf(&r->t, "last id %d ", sp.has_last_id);
    tg_buf_append(&r->t, sp.last_id, sp.has_last_id ? sp.last_id_len : 0);
    tg_buf_appendf(&r->t, " retry %ld\n", sp.retry_ms);
    tg_sse_dispose(&sp);
}

static void sse_stream(const uint8_t *data, const char *p, size_t n, uint32_t seed)
{
    struct run r[3];
    for (int m = 0; m < 3; m++) {
        tg_buf_init(&r[m].t);
        r[m].max_event = (size_t)16 << (data[0] & 15);
        r[m].stop_after = data[1];
        r[m].seen = 0;
        feed_all(&r[m], p, n, m, seed);
    }
    int long_line = 0;
#ifndef TG_FUZZ_SSE_STRICT
    for (size_t i = 0, len = 0; i < n && !long_line; i++) {
        len = p[i] == '\n' || p[i] == '\r' ? 0 : len + 1;
        long_line = len + 3 > r[0].max_event + 1024; /* + 3: a partial BOM joins the first line */
    }
#endif
    for (int m = 1; m < 3 && !long_line; m++)
        if (r[m].t.len != r[0].t.len || memcmp(r[m].t.base, r[0].t.base, r[0].t.len) != 0)
            abort(); /* the events do not depend on where the reads split the stream */
    for (int m = 0; m < 3; m++)
        tg_buf_dispose(&r[m].t);
}

/* ---- the SSE writer ------------------------------------------------------------------------- */

struct one {
    int n;
    struct tg_buf data, id;
    int has_id;
    int named_message;
};

static int on_written(void *ud, const struct tg_sse_event *ev)
{
    struct one *o = ud;
    o->n++;
    o->named_message = tg_slice_eq(ev->event, TG_SLICE("message"));
    o->data.len = o->id.len = 0;
    tg_buf_append(&o->data, ev->data.ptr, ev->data.len);
    tg_buf_append(&o->id, ev->id.ptr ? ev->id.ptr : "", ev->id.len);
    o->has_id = ev->has_id;
    return 0;
}

static void writer_round_trip(const char *p, size_t n, int with_id)
{
    struct tg_buf out;
    tg_buf_init(&out);
    tg_sse_write_message(&out, with_id ? "42" : NULL, with_id ? 2 : 0, n ? p : NULL, n);
    struct one o = {0};
    tg_buf_init(&o.data);
    tg_buf_init(&o.id);
    struct tg_sse_parser sp;
    tg_sse_init(&sp, n + 1);
    if (tg_sse_feed(&sp, out.base, out.len, on_written, &o) != 0 || o.n != 1 || !o.named_message ||
        o.has_id != with_id || o.data.len != n)
        abort();
    if (with_id && (o.id.len != 2 || memcmp(o.id.base, "42", 2) != 0))
        abort();
    for (size_t i = 0; i < n; i++)
        if (o.data.base[i] != (p[i] == '\r' ? '\n' : p[i]))
            abort();
    tg_sse_dispose(&sp);
    tg_buf_dispose(&o.data);
    tg_buf_dispose(&o.id);
    tg_buf_dispose(&out);
}

/* ---- HTTP responses ------------------------------------------------------------------------- */

struct http_run {
    struct tg_buf t;    /* the transcript */
    struct tg_buf body; /* the body as on_data gave it */
    int heads;
};

static void on_head(struct tg_upreq *r, int status, void *ud)
{
    struct http_run *h = ud;
    h->heads++;
    if (r->ctype_len >= sizeof(r->ctype) || r->sid_len >= sizeof(r->sid))
        abort();
    tg_buf_appendf(&h->t, "head %d ctype [%.*s] sid [%.*s]\n", status, (int)r->ctype_len, r->ctype,
                   (int)r->sid_len, r->sid);
}

static void on_data(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    (void)r;
    struct http_run *h = ud;
    if (h->heads == 0 && !(r->status >= 100 && r->status < 200))
        abort(); /* a body before its head */
    if (h->heads == 0)
        abort(); /* (a 101 with a body was: upstream/pool/http_conn.c now refuses a 101) */
    tg_buf_append(&h->body, p, n);
}

static void on_done(struct tg_upreq *r, int err, void *ud)
{
    (void)r, (void)err, (void)ud;
    abort(); /* only on_conn_read finishes a request, and it is not driven here */
}

static const struct tg_upreq_cbs http_cbs = {on_head, on_data, on_done};

static void http_feed(struct http_run *h, const char *p, size_t n, int mode, uint32_t seed)
{
    struct tg_upconn c;
    struct tg_upreq r;
    memset(&c, 0, sizeof(c));
    memset(&r, 0, sizeof(r));
    r.cbs = &http_cbs;
    r.ud = h;
    c.req = &r;
    c.state = UC_BUSY;
    llhttp_init(&c.parser, HTTP_RESPONSE, &resp_settings);
    c.parser.data = &c;
    llhttp_errno_t e = HPE_OK;
    size_t i = 0, left = 0;
    while (i < n) {
        size_t k = chunk(mode, n - i, &seed);
        if (k == 0)
            continue; /* on_conn_read never sees an empty read */
        r.got_bytes = 1;
        e = llhttp_execute(&c.parser, p + i, k);
        if (e == HPE_PAUSED && c.complete) {
            left = n - (size_t)(llhttp_get_error_pos(&c.parser) - p);
            break;
        }
        i += k;
        if (e != HPE_OK)
            break;
    }
    if (e == HPE_OK && r.got_bytes && r.status >= 200)
        e = llhttp_finish(&c.parser); /* the upstream closed: a body delimited by the close ends */
    tg_buf_appendf(&h->t, "end %s complete %d status %d left %zu keep %d\n", llhttp_errno_name(e), c.complete,
                   r.status, left, c.complete ? llhttp_should_keep_alive(&c.parser) : -1);
    tg_buf_appendf(&h->t, "body %zu\n", h->body.len);
    tg_buf_append(&h->t, h->body.base ? h->body.base : "", h->body.len);
}

static void http_response(const uint8_t *data, const char *p, size_t n, uint32_t seed)
{
    struct http_run h[3];
    for (int m = 0; m < 3; m++) {
        tg_buf_init(&h[m].t);
        tg_buf_init(&h[m].body);
        h[m].heads = 0;
        http_feed(&h[m], p, n, m, seed);
    }
    if (getenv("TG_FUZZ_VERBOSE") != NULL) /* seed triage */
        fprintf(stderr, "%.*s\n", (int)h[0].t.len, h[0].t.base);
    for (int m = 1; m < 3; m++)
        if (h[m].t.len != h[0].t.len || memcmp(h[m].t.base, h[0].t.base, h[0].t.len) != 0)
            abort(); /* the response does not depend on where the reads split it */
    /* As upstream/streamable.c: an event-stream body goes to the SSE parser. */
    if (memmem(h[0].t.base, h[0].t.len, "ctype [text/event-stream", 24) != NULL)
        sse_stream(data, h[0].body.base ? h[0].body.base : "", h[0].body.len, seed);
    for (int m = 0; m < 3; m++) {
        tg_buf_dispose(&h[m].t);
        tg_buf_dispose(&h[m].body);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    const char *p = (const char *)data + 4;
    size_t n = size - 4;
    uint32_t seed = ((uint32_t)data[2] << 8 | data[3]) * 2654435761u + 1;
    if (data[0] & 0x80) {
        http_response(data, p, n, seed);
        return 0;
    }
    sse_stream(data, p, n, seed);
    writer_round_trip(p, n, data[1] & 1);
    return 0;
}
