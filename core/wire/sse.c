#include "core/wire/sse.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

void tg_sse_init(struct tg_sse_parser *p, size_t max_event)
{
    memset(p, 0, sizeof(*p));
    tg_buf_init(&p->line);
    tg_buf_init(&p->data);
    tg_buf_init(&p->event);
    tg_buf_init(&p->id);
    p->max_event = max_event;
    p->retry_ms = -1;
}

void tg_sse_dispose(struct tg_sse_parser *p)
{
    tg_buf_dispose(&p->line);
    tg_buf_dispose(&p->data);
    tg_buf_dispose(&p->event);
    tg_buf_dispose(&p->id);
}

void tg_sse_restart(struct tg_sse_parser *p)
{
    p->line.len = p->data.len = p->event.len = p->id.len = 0;
    p->has_data = p->has_id = p->last_cr = p->bom_checked = 0;
    p->skipping = p->skip_line = 0;
}

/* Resync: the event being read is over the limit. Its first bytes go to on_drop (what a data
 * line began with: the JSON of an answer, whose id names the call it belonged to), then it is
 * forgotten and skipped. mid_line: the current line has not ended yet. */
static void drop_event(struct tg_sse_parser *p, const char *line, size_t ln, int mid_line, void *ud)
{
    const char *head = p->data.len ? p->data.base : line;
    size_t hn = p->data.len ? p->data.len : ln;
    if (head == line && hn >= 5 && memcmp(head, "data:", 5) == 0) {
        head += 5, hn -= 5;
        if (hn && head[0] == ' ')
            head++, hn--;
    }
    if (p->on_drop)
        p->on_drop(ud, head ? head : "", hn > 4096 ? 4096 : hn);
    p->line.len = p->data.len = p->event.len = p->id.len = 0;
    p->has_data = p->has_id = 0;
    p->skipping = 1;
    p->skip_line = mid_line;
}

static int process_line(struct tg_sse_parser *p, const char *l, size_t n, tg_sse_event_cb cb, void *ud)
{
    if (n == 0) {
        if (p->has_data) {
            struct tg_sse_event ev = {
                tg_slice_of(p->event.base, p->event.len),
                tg_slice_of(p->data.base ? p->data.base : "", p->data.len),
                tg_slice_of(p->id.base, p->id.len),
                p->has_id,
            };
            if (cb(ud, &ev) != 0)
                return TG_SSE_STOPPED;
        }
        p->data.len = 0;
        p->event.len = 0;
        p->id.len = 0;
        p->has_data = 0;
        p->has_id = 0;
        return 0;
    }
    if (l[0] == ':')
        return 0;
    const char *colon = memchr(l, ':', n);
    size_t fn = colon ? (size_t)(colon - l) : n;
    const char *v = colon ? colon + 1 : l + n;
    size_t vn = (size_t)(l + n - v);
    if (vn && v[0] == ' ') {
        v++;
        vn--;
    }
    if (fn == 4 && memcmp(l, "data", 4) == 0) {
        if (p->has_data && tg_buf_try_append(&p->data, "\n", 1, p->max_event) != 0)
            return TG_ELIMIT;
        if (tg_buf_try_append(&p->data, v, vn, p->max_event) != 0)
            return TG_ELIMIT;
        p->has_data = 1;
    } else if (fn == 5 && memcmp(l, "event", 5) == 0) {
        p->event.len = 0;
        if (tg_buf_try_append(&p->event, v, vn, 256) != 0)
            return TG_ELIMIT;
    } else if (fn == 2 && memcmp(l, "id", 2) == 0) {
        if (memchr(v, '\0', vn) == NULL) {
            p->id.len = 0;
            if (tg_buf_try_append(&p->id, v, vn, 1024) != 0)
                return TG_ELIMIT;
            p->has_id = 1;
            /* Kept for Last-Event-ID only when it can be sent back as a header as it is. */
            int printable = vn < sizeof(p->last_id);
            for (size_t i = 0; i < vn && printable; i++)
                printable = (unsigned char)v[i] >= 0x20 && (unsigned char)v[i] < 0x7f;
            p->has_last_id = printable;
            p->last_id_len = printable ? vn : 0;
            if (printable)
                memcpy(p->last_id, v, vn);
        }
    } else if (fn == 5 && memcmp(l, "retry", 5) == 0) {
        long ms = 0;
        size_t i = 0;
        for (; i < vn && i < 9 && v[i] >= '0' && v[i] <= '9'; i++)
            ms = ms * 10 + (v[i] - '0');
        if (i == vn && vn > 0)
            p->retry_ms = ms;
    }
    /* Unknown fields are ignored. */
    return 0;
}

/* The index of the first CR or LF in b[k..n), or n. A relayed stream's lines are whole JSON
 * messages that end in LF: libc's memchr (vectorized) finds it, and a CR before it is looked for
 * only in what precedes it. */
static size_t line_end(const char *b, size_t k, size_t n)
{
    const char *lf = memchr(b + k, '\n', n - k);
    size_t e = lf != NULL ? (size_t)(lf - b) : n;
    const char *cr = memchr(b + k, '\r', e - k);
    return cr != NULL ? (size_t)(cr - b) : e;
}

/* Copy p[0..n) to dst and say 1 when it holds no byte below 0x0e or over 0x7f, so neither CR
 * nor LF: one pass that copies and checks, four instructions per sixteen bytes with SSE2 (a
 * signed compare catches both ends), for the usual message, compact ASCII JSON. 0 says only
 * "look closer" (the bytes are copied either way). */
static int copy_no_line_end(char *dst, const char *p, size_t n)
{
#if defined(__SSE2__)
    if (n >= 16) {
        const __m128i lim = _mm_set1_epi8(0x0e);
        __m128i bad = _mm_setzero_si128();
        size_t i = 0;
        for (; i + 16 <= n; i += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(p + i));
            _mm_storeu_si128((__m128i *)(dst + i), x);
            bad = _mm_or_si128(bad, _mm_cmplt_epi8(x, lim));
        }
        if (i < n) { /* the last bytes: one more block that ends at n */
            __m128i x = _mm_loadu_si128((const __m128i *)(p + n - 16));
            _mm_storeu_si128((__m128i *)(dst + n - 16), x);
            bad = _mm_or_si128(bad, _mm_cmplt_epi8(x, lim));
        }
        return _mm_movemask_epi8(bad) == 0;
    }
#endif
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        dst[i] = p[i];
        if ((unsigned char)p[i] < 0x0e || (unsigned char)p[i] > 0x7f)
            ok = 0;
    }
    return ok;
}

/* The index of the first byte of b[k..n) below 0x0e or over 0x7f, or n: in compact ASCII JSON,
 * the LF that ends its line. Sixteen bytes a step with SSE2 (a signed compare catches both
 * ends), so that the usual line is read once, not once for its LF and again for a CR. */
static size_t first_odd_byte(const char *b, size_t k, size_t n)
{
#if defined(__SSE2__)
    const __m128i lim = _mm_set1_epi8(0x0e);
    for (; k + 16 <= n; k += 16) {
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmplt_epi8(_mm_loadu_si128((const __m128i *)(b + k)), lim));
        if (m != 0)
            return k + (size_t)__builtin_ctz(m);
    }
#endif
    for (; k < n; k++)
        if ((unsigned char)b[k] < 0x0e || (unsigned char)b[k] > 0x7f)
            return k;
    return n;
}

/* The event a relaying upstream sends, whole at b: "event: message", one "data: " line with no
 * CR in it, and the blank line. Returns its length with the data's bytes in *d, or 0 for
 * anything else (which the line parser reads). */
static size_t usual_event(const char *b, size_t n, size_t max, const char **d, size_t *dn)
{
    static const char head[] = "event: message\ndata: ";
    const size_t hn = sizeof(head) - 1;
    if (n < hn + 2 || memcmp(b, head, hn) != 0)
        return 0;
    size_t odd = first_odd_byte(b, hn, n);
    const char *lf;
    if (odd == n)
        return 0; /* no LF: the line is not all here */
    if (b[odd] == '\n') {
        lf = b + odd; /* and no CR before it */
    } else {
        /* a tab, a byte over 0x7f (UTF-8 text), a CR: the line's end the long way */
        lf = memchr(b + hn, '\n', n - hn);
        if (lf != NULL && memchr(b + hn, '\r', (size_t)(lf - (b + hn))) != NULL)
            return 0;
    }
    if (lf == NULL || (size_t)(lf - b) + 1 >= n || lf[1] != '\n')
        return 0;
    size_t len = (size_t)(lf - (b + hn));
    if (len > max)
        return 0;
    *d = b + hn;
    *dn = len;
    return (size_t)(lf - b) + 2;
}

int tg_sse_feed(struct tg_sse_parser *p, const char *b, size_t n, tg_sse_event_cb cb, void *ud)
{
    size_t i = 0;
    /* A leading byte-order mark is skipped, even when it arrives split across feeds. */
    static const char bom[3] = {'\xEF', '\xBB', '\xBF'};
    while (p->bom_checked < 3 && i < n) {
        if (b[i] == bom[p->bom_checked]) {
            p->bom_checked++;
            i++;
            continue;
        }
        /* Not a BOM after all: what matched so far is ordinary line content. */
        if (p->bom_checked > 0 && tg_buf_try_append(&p->line, bom, (size_t)p->bom_checked, p->max_event + 1024) != 0)
            return TG_ELIMIT;
        p->bom_checked = 3;
    }
    if (p->bom_checked < 3)
        return 0;
    int dropped = 0;
    while (i < n) {
        if (p->last_cr && b[i] == '\n') {
            p->last_cr = 0;
            i++;
            continue;
        }
        p->last_cr = 0;
        if (!p->skipping && p->line.len == 0 && !p->has_data && p->event.len == 0 && !p->has_id) {
            /* At an event's start with nothing carried over: the usual event is dispatched from
             * the input in one step, as the line parser would dispatch it. */
            const char *d;
            size_t dn, e = usual_event(b + i, n - i, p->max_event, &d, &dn);
            if (e != 0) {
                struct tg_sse_event ev = {TG_SLICE("message"), tg_slice_of(d, dn), TG_SLICE_NULL, 0};
                if (cb(ud, &ev) != 0)
                    return TG_SSE_STOPPED;
                i += e;
                continue;
            }
        }
        const char *start = b + i;
        size_t k = line_end(b, i, n);
        if (p->skipping) {
            /* A dropped event: its lines go unread up to the blank line that ends it. */
            if (k == n) {
                if (k > i)
                    p->skip_line = 1;
                break;
            }
            if (!p->skip_line && k == i)
                p->skipping = 0;
            p->skip_line = 0;
            if (b[k] == '\r')
                p->last_cr = 1;
            i = k + 1;
            continue;
        }
        if (k == n) {
            if (tg_buf_try_append(&p->line, start, k - i, p->max_event + 1024) != 0) {
                if (!p->resync)
                    return TG_ELIMIT;
                drop_event(p, p->line.base, p->line.len, 1, ud), dropped = 1;
            }
            break;
        }
        int r;
        if (p->line.len) {
            if (tg_buf_try_append(&p->line, start, k - i, p->max_event + 1024) != 0) {
                if (!p->resync)
                    return TG_ELIMIT;
                drop_event(p, p->line.base, p->line.len, 0, ud), dropped = 1;
                r = 0;
            } else {
                r = process_line(p, p->line.base, p->line.len, cb, ud);
                if (r == TG_SSE_STOPPED)
                    return r;
                if (r == TG_ELIMIT && p->resync)
                    drop_event(p, p->line.base, p->line.len, 0, ud), dropped = 1, r = 0;
                p->line.len = 0;
            }
        } else if (k - i > p->max_event + 1024) {
            if (!p->resync)
                return TG_ELIMIT; /* the same cap as a line that came in pieces (fuzz_upstream) */
            drop_event(p, start, k - i, 0, ud), dropped = 1;
            r = 0;
        } else {
            r = process_line(p, start, k - i, cb, ud);
            if (r == TG_ELIMIT && p->resync)
                drop_event(p, start, k - i, 0, ud), dropped = 1, r = 0;
        }
        if (r != 0)
            return r;
        if (b[k] == '\r')
            p->last_cr = 1;
        i = k + 1;
    }
    return dropped ? TG_ELIMIT : 0;
}

/* ---- writer ------------------------------------------------------------------------- */

#ifndef NDEBUG
/* A name, id or comment of the gateway's own: a CR, LF or NUL in it would end the line early. */
static int one_line(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\n' || s[i] == '\r' || s[i] == '\0')
            return 0;
    return 1;
}
#endif

/* "data: <line>\n" for each line of p, where each LF and each CR ends one. */
static void write_data_lines(struct tg_buf *out, const char *p, size_t n)
{
    for (size_t st = 0;;) {
        size_t stop = line_end(p, st, n);
        tg_buf_append(out, "data: ", 6);
        if (stop > st)
            tg_buf_append(out, p + st, stop - st);
        tg_buf_append(out, "\n", 1);
        if (stop == n)
            return;
        st = stop + 1;
    }
}

static void write_id(struct tg_buf *out, const char *id, size_t id_len)
{
    assert(one_line(id, id_len));
    tg_buf_append(out, "id: ", 4);
    tg_buf_append(out, id, id_len);
    tg_buf_append(out, "\n", 1);
}

void tg_sse_write_event(struct tg_buf *out, const char *event, const char *id, size_t id_len, const char *p,
                        size_t n)
{
    size_t en = strlen(event);
    assert(one_line(event, en));
    /* One allocation for the usual message of one line. */
    if (tg_buf_try_reserve(out, n + id_len + en + 32, 0) != 0)
        abort();
    if (id != NULL)
        write_id(out, id, id_len);
    tg_buf_append(out, "event: ", 7);
    tg_buf_append(out, event, en);
    tg_buf_append(out, "\n", 1);
    write_data_lines(out, p, n);
    tg_buf_append(out, "\n", 1);
}

/* The same bytes as tg_sse_write_event(out, "message", ...), with the event line appended in
 * one piece: this runs once per relayed message. */
void tg_sse_write_message(struct tg_buf *out, const char *id, size_t id_len, const char *p, size_t n)
{
    if (tg_buf_try_reserve(out, n + id_len + 39, 0) != 0)
        abort();
    /* One line, the usual message: its pieces copied into the room just made, the message
     * checked for CR and LF as it is copied. Nothing counts until out->len moves. */
    assert(id == NULL || one_line(id, id_len));
    char *q = out->base + out->len;
    if (q == NULL) /* never, after the reserve: said so for GCC, whose -flto build warned */
        abort();
    if (id != NULL) {
        memcpy(q, "id: ", 4);
        memcpy(q + 4, id, id_len);
        q[4 + id_len] = '\n';
        q += id_len + 5;
    }
    memcpy(q, "event: message\ndata: ", 21);
    if (copy_no_line_end(q + 21, p, n) || line_end(p, 0, n) == n) {
        memcpy(q + 21 + n, "\n\n", 2);
        out->len = (size_t)(q + 23 + n - out->base);
        return;
    }
    if (id != NULL)
        write_id(out, id, id_len);
    tg_buf_append(out, "event: message\n", 15);
    write_data_lines(out, p, n);
    tg_buf_append(out, "\n", 1);
}

void tg_sse_write_comment(struct tg_buf *out, const char *text)
{
    size_t n = strlen(text);
    assert(one_line(text, n));
    tg_buf_append(out, ": ", 2);
    tg_buf_append(out, text, n);
    tg_buf_append(out, "\n\n", 2);
}

void tg_sse_write_retry(struct tg_buf *out, long retry_ms)
{
    assert(retry_ms >= 0);
    tg_buf_append(out, "retry: ", 7);
    tg_buf_append_u64(out, (uint64_t)retry_ms);
    tg_buf_append(out, "\n\n", 2);
}

void tg_sse_write_prime(struct tg_buf *out, const char *id, size_t id_len, long retry_ms)
{
    assert(retry_ms >= 0);
    write_id(out, id, id_len);
    tg_buf_append(out, "retry: ", 7);
    tg_buf_append_u64(out, (uint64_t)retry_ms);
    tg_buf_append(out, "\ndata:\n\n", 8);
}
