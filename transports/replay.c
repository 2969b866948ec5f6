#include "transports/replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/gateway.h"
#include "core/call/session.h"
#include "core/wire/sse.h"
#include "transports/http1/http1.h"

void tg_replay_gen_clear(struct tg_replay_gen *g)
{
    while (g->head != NULL) {
        struct tg_replay_chunk *k = g->head;
        g->head = k->next;
        tg_buf_dispose(&k->b);
        tg_xfree(k);
    }
    g->tail = NULL;
    g->len = 0;
}

void tg_replay_free(struct tg_replay *r)
{
    tg_replay_gen_clear(&r->gen[0]);
    tg_replay_gen_clear(&r->gen[1]);
    tg_list_unlink(&r->snode);
    tg_list_unlink(&r->gnode);
    tg_session_unref(r->sess);
    tg_xfree(r);
}

struct tg_replay *tg_replay_new(struct tg_server *srv, struct tg_session *s, struct tg_http_sink *live)
{
    /* Keep a bounded number of streams per session: the oldest ended ones go first. */
    size_t n = 0;
    for (struct tg_list *l = s->streams.next; l != &s->streams; l = l->next)
        n++;
    for (struct tg_list *l = s->streams.next; n >= TG_REPLAY_MAX_PER_SESSION && l != &s->streams;) {
        struct tg_replay *o = tg_container_of(l, struct tg_replay, snode);
        l = l->next;
        if (o->live == NULL) {
            tg_replay_free(o);
            n--;
        }
    }
    struct tg_replay *r = tg_xcalloc(1, sizeof(*r));
    r->srv = srv;
    r->sess = tg_session_ref(s);
    r->id = ++srv->next_stream_id;
    r->live = live;
    r->last_write_ms = uv_now(srv->loop);
    tg_list_insert_tail(&s->streams, &r->snode);
    tg_list_insert_tail(&srv->streams, &r->gnode);
    return r;
}

/* The room write_id_line() asks for before `more`: "id: ", both padded arrays and the newline
 * fit in it. */
#define ID_LINE_ROOM(r) (4 + sizeof((r)->id_head) + sizeof((r)->seq_txt))

/* "id: HEX-DECIMAL\n" appended to b without printf: this runs once per relayed event, so the
 * "HEX-" part, the same for the whole stream, is made once, the sequence number is kept as text
 * and counted up in place, and both are copied as fixed-size blocks (their arrays are padded)
 * into room made for them, the bytes past their lengths overwritten by what comes next. */
static void write_id_line(struct tg_replay *r, struct tg_buf *b, size_t more)
{
    if (r->id_head_len == 0) {
        char tmp[20];
        size_t t = 0;
        uint64_t v = r->id;
        do {
            tmp[t++] = "0123456789abcdef"[v & 15];
            v >>= 4;
        } while (v != 0);
        while (t > 0)
            r->id_head[r->id_head_len++] = tmp[--t];
        r->id_head[r->id_head_len++] = '-';
    }
    if (r->seq_len == 0) {
        r->seq_txt[0] = '1';
        r->seq_len = 1;
    }
    ++r->next_seq; /* seq_txt holds it already */
    if (tg_buf_try_reserve(b, ID_LINE_ROOM(r) + more, 0) != 0)
        abort();
    char *q = b->base + b->len;
    memcpy(q, "id: ", 4);
    memcpy(q + 4, r->id_head, sizeof(r->id_head));
    q += 4 + r->id_head_len;
    memcpy(q, r->seq_txt, sizeof(r->seq_txt));
    q[r->seq_len] = '\n';
    b->len = (size_t)(q + r->seq_len + 1 - b->base);
    /* Counted up for the next event only now, after the copy: a digit stored just before the
     * copy's wide load of the same bytes stalls the load (store forwarding fails), which perf
     * put at a quarter of this function's time. */
    size_t t = r->seq_len;
    while (t > 0 && r->seq_txt[t - 1] == '9')
        r->seq_txt[--t] = '0';
    if (t > 0) {
        r->seq_txt[t - 1]++;
    } else {
        memmove(r->seq_txt + 1, r->seq_txt, r->seq_len);
        r->seq_txt[0] = '1';
        r->seq_len++;
    }
}

/* A generation's first chunk: enough for the usual answer of one event, so that a call in
 * flight (which a client can open many of) holds no more than its bytes need. Later chunks are
 * four times the last, up to REPLAY_CHUNK_MAX; tg_replay_end() gives back what is unused. */
#define REPLAY_FIRST_ROOM 1024
#define REPLAY_CHUNK_MAX 65536

/* A chunk of g with at least want bytes free: its last one, or a new one after it. */
static struct tg_replay_chunk *gen_room(struct tg_replay_gen *g, size_t want)
{
    struct tg_replay_chunk *t = g->tail;
    if (t != NULL && t->b.cap - t->b.len >= want)
        return t;
    size_t cap = t == NULL ? REPLAY_FIRST_ROOM : t->b.cap >= REPLAY_CHUNK_MAX / 4 ? REPLAY_CHUNK_MAX : 4 * t->b.cap;
    if (cap < want)
        cap = want;
    struct tg_replay_chunk *k = tg_xmalloc(sizeof(*k));
    k->next = NULL;
    tg_buf_init(&k->b);
    if (tg_buf_try_reserve(&k->b, cap, 0) != 0)
        abort();
    if (t != NULL)
        t->next = k;
    else
        g->head = k;
    g->tail = k;
    return k;
}

struct tg_slice tg_replay_message(struct tg_replay *r, const char *p, size_t n, struct tg_buf *scratch)
{
    size_t half = (size_t)r->srv->conf->limits.replay_bytes / 2;
    r->last_write_ms = uv_now(r->srv->loop);
    /* The event, framed: the id line, then what tg_sse_write_message() takes (n + 39 at most),
     * all asked for at once so that neither step grows the chunk. */
    size_t want = ID_LINE_ROOM(r) + n + 40;
    struct tg_buf *b = scratch;
    struct tg_replay_gen *g = NULL;
    if (half == 0) {
        b->len = 0; /* nothing is kept: the event is framed in the caller's scratch */
    } else {
        g = &r->gen[r->cur];
        if (g->len > half) {
            r->cur ^= 1;
            g = &r->gen[r->cur];
            tg_replay_gen_clear(g);
        }
        b = &gen_room(g, want)->b; /* room for all of it: framing it moves nothing kept */
    }
    size_t at = b->len;
    write_id_line(r, b, n + 40); /* room for the rest too: tg_sse_write_message() takes n + 39 */
    tg_sse_write_message(b, NULL, 0, p, n);
    if (g != NULL)
        g->len += b->len - at;
    return tg_slice_of(b->base + at, b->len - at);
}

/* Oldest generation first. Each kept event starts with "id: HEX-SEQ\n" and ends with a blank line. */
void tg_replay_write(struct tg_replay *r, struct tg_conn *c, uint64_t after_seq)
{
    for (int g = 0; g < 2; g++) {
        for (const struct tg_replay_chunk *k = r->gen[g == 0 ? r->cur ^ 1 : r->cur].head; k != NULL; k = k->next) {
            size_t off = 0;
            while (off < k->b.len) {
                const char *ev = k->b.base + off;
                const char *end = memmem(ev, k->b.len - off, "\n\n", 2);
                size_t n = end ? (size_t)(end - ev) + 2 : k->b.len - off;
                const char *dash = memchr(ev, '-', n);
                uint64_t seq = dash ? strtoull(dash + 1, NULL, 10) : 0;
                if (seq > after_seq)
                    tg_http_stream_write(c, ev, n);
                off += n;
            }
        }
    }
}

int tg_replay_parse_id(struct tg_slice last, uint64_t *stream, uint64_t *seq)
{
    char buf[64];
    if (last.len == 0 || last.len >= sizeof(buf))
        return -1;
    memcpy(buf, last.ptr, last.len);
    buf[last.len] = '\0';
    /* Exactly HEX "-" DECIMAL, as we write them: no blanks, signs, prefixes or empty parts. */
    char *dash = strchr(buf, '-');
    int ok = dash != NULL && dash != buf && dash[1] != '\0' && dash - buf <= 16 && strlen(dash + 1) <= 19;
    for (char *q = buf; ok && q < dash; q++)
        ok = (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f');
    for (char *q = dash ? dash + 1 : buf; ok && *q; q++)
        ok = *q >= '0' && *q <= '9';
    if (!ok)
        return -1;
    *stream = strtoull(buf, NULL, 16);
    *seq = strtoull(dash + 1, NULL, 10);
    return 0;
}

/* An ended stream is kept TG_REPLAY_KEEP_MS: with its bytes only, not the room it grew. Only the
 * last chunk has room to spare (a new one is made only when an event does not fit the last). */
static void fit(struct tg_replay_gen *g)
{
    if (g->len == 0) {
        tg_replay_gen_clear(g);
        return;
    }
    struct tg_buf *b = &g->tail->b;
    if (b->cap - b->len <= 256)
        return;
    char *q = realloc(b->base, b->len);
    if (q != NULL) {
        b->base = q;
        b->cap = b->len;
    }
}

void tg_replay_end(struct tg_replay *r)
{
    r->live = NULL;
    r->ended_at = uv_now(r->srv->loop);
    fit(&r->gen[0]);
    fit(&r->gen[1]);
}

void tg_replay_expire(struct tg_server *srv)
{
    uint64_t now = uv_now(srv->loop);
    struct tg_list *l = srv->streams.next;
    while (l != &srv->streams) {
        struct tg_replay *r = tg_container_of(l, struct tg_replay, gnode);
        l = l->next;
        if (r->live == NULL && now - r->ended_at >= TG_REPLAY_KEEP_MS)
            tg_replay_free(r);
    }
}

void tg_replay_free_all(struct tg_server *srv)
{
    while (!tg_list_empty(&srv->streams))
        tg_replay_free(tg_container_of(srv->streams.next, struct tg_replay, gnode));
}
