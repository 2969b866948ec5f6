#include "core/sse.h"

#include <string.h>

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
    while (i < n) {
        if (p->last_cr && b[i] == '\n') {
            p->last_cr = 0;
            i++;
            continue;
        }
        p->last_cr = 0;
        const char *start = b + i;
        size_t k = i;
        while (k < n && b[k] != '\n' && b[k] != '\r')
            k++;
        if (k == n) {
            if (tg_buf_try_append(&p->line, start, k - i, p->max_event + 1024) != 0)
                return TG_ELIMIT;
            return 0;
        }
        int r;
        if (p->line.len) {
            if (tg_buf_try_append(&p->line, start, k - i, p->max_event + 1024) != 0)
                return TG_ELIMIT;
            r = process_line(p, p->line.base, p->line.len, cb, ud);
            if (r == TG_SSE_STOPPED)
                return r;
            p->line.len = 0;
        } else {
            r = process_line(p, start, k - i, cb, ud);
        }
        if (r != 0)
            return r;
        if (b[k] == '\r')
            p->last_cr = 1;
        i = k + 1;
    }
    return 0;
}
