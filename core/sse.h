/* Incremental text/event-stream parser (WHATWG "server-sent events").
 *
 * Feed bytes in any split; each complete event is delivered once its blank
 * line arrives. Lines end in LF, CRLF or CR. A field without a colon is a
 * field name with an empty value; lines starting with ':' are comments. The
 * data of one event is capped at max_event bytes (TG_ELIMIT beyond). */
#ifndef TG_SSE_H
#define TG_SSE_H

#include "core/buf.h"

struct tg_sse_event {
    struct tg_slice event; /* empty = "message" */
    struct tg_slice data;
    struct tg_slice id;
    int has_id;
};

/* Return 0 to go on, anything else to stop: tg_sse_feed then returns TG_SSE_STOPPED at once and
 * touches neither the parser nor the bytes again (the owner may have gone away in the callback;
 * it frees the parser only after tg_sse_feed has returned). */
typedef int (*tg_sse_event_cb)(void *ud, const struct tg_sse_event *ev);
#define TG_SSE_STOPPED 1

struct tg_sse_parser {
    struct tg_buf line;
    struct tg_buf data;
    struct tg_buf event;
    struct tg_buf id;
    int has_data;
    int has_id;
    int last_cr;
    int bom_checked; /* bytes of a leading BOM matched so far; 3 = done */
    size_t max_event;
    /* The stream's state for a reconnect (WHATWG "last event ID" and "reconnection time"):
     * last_id holds the last id field seen (set even by an event without data), retry_ms the
     * last valid retry field, or -1. */
    char last_id[256];
    size_t last_id_len;
    int has_last_id;
    long retry_ms;
};

void tg_sse_init(struct tg_sse_parser *p, size_t max_event);
void tg_sse_dispose(struct tg_sse_parser *p);
/* The same source reconnected: parsing starts afresh (BOM included), the last event id and the
 * retry time are kept, as a reconnecting EventSource keeps them. */
void tg_sse_restart(struct tg_sse_parser *p);
int tg_sse_feed(struct tg_sse_parser *p, const char *bytes, size_t n, tg_sse_event_cb cb, void *ud);

#endif
