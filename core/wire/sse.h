/* text/event-stream (WHATWG "server-sent events"): the one parser and the one writer.
 *
 * Parser: feed bytes in any split; each complete event is delivered once its
 * blank line arrives. Lines end in LF, CRLF or CR. A field without a colon is
 * a field name with an empty value; lines starting with ':' are comments. The
 * data of one event is capped at max_event bytes (TG_ELIMIT beyond).
 *
 * Writer: each tg_sse_write_* appends one complete block (ending in its blank
 * line) to out, which the caller owns; nothing else in out is touched. It
 * aborts on OOM, as tg_buf_append does. Event names, ids and comments are the
 * gateway's own: they must hold no CR, LF or NUL (asserted). */
#ifndef TG_SSE_H
#define TG_SSE_H

#include "core/base/buf.h"

/* One parsed event. Value type on the stack of process_line() in core/wire/sse.c (under
 * tg_sse_feed()); its slices point into the parser's buffers, valid only during the callback. */
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

/* Embedded in its owner (a Streamable HTTP call's answer stream, a legacy SSE link):
 * tg_sse_init() sets it up and tg_sse_dispose() frees its buffers, after tg_sse_feed() returned. */
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
    /* A stream that carries many calls (a legacy SSE upstream) sets resync: an event over
     * max_event is then dropped, on_drop (if set) is told its first bytes (with the ud of the
     * feed), parsing skips to the end of that event and goes on, and tg_sse_feed returns
     * TG_ELIMIT once it is done with the bytes. Without resync the first TG_ELIMIT ends the feed
     * (a stream of one call fails as a whole). */
    int resync;
    void (*on_drop)(void *ud, const char *head, size_t n);
    int skipping;  /* the rest of a dropped event is skipped up to its blank line */
    int skip_line; /* ... and first the rest of the current line */
};

void tg_sse_init(struct tg_sse_parser *p, size_t max_event);
void tg_sse_dispose(struct tg_sse_parser *p);
/* The same source reconnected: parsing starts afresh (BOM included), the last event id and the
 * retry time are kept, as a reconnecting EventSource keeps them. */
void tg_sse_restart(struct tg_sse_parser *p);
int tg_sse_feed(struct tg_sse_parser *p, const char *bytes, size_t n, tg_sse_event_cb cb, void *ud);

/* An event named "message" (what MCP sends) carrying the n bytes at p, after an "id:" line when
 * id is not NULL:
 *     id: <id>\n            (only if id != NULL)
 *     event: message\n
 *     data: <line>\n        (one per line of p)
 *     \n
 * Every LF and every CR in p ends a line, so CRLF gives an empty data line between the two, and
 * an empty message is one empty data line. A parser gives the message back unchanged if it holds
 * no CR (data lines are joined with LF); in JSON a raw CR can only be whitespace, and it comes
 * back as LF. p may be NULL when n is 0. */
void tg_sse_write_message(struct tg_buf *out, const char *id, size_t id_len, const char *p, size_t n);
/* The same with another event name ("endpoint" for the 2024-11-05 SSE transport). */
void tg_sse_write_event(struct tg_buf *out, const char *event, const char *id, size_t id_len, const char *p,
                        size_t n);
/* ": <text>\n\n", a comment a client ignores (a keepalive). */
void tg_sse_write_comment(struct tg_buf *out, const char *text);
/* "retry: <ms>\n\n": the reconnection time, without an event (before a stream ends for polling). */
void tg_sse_write_retry(struct tg_buf *out, long retry_ms);
/* "id: <id>\nretry: <ms>\ndata:\n\n": the event with an id and empty data that primes a client to
 * resume with Last-Event-ID (MCP 2025-11-25). */
void tg_sse_write_prime(struct tg_buf *out, const char *id, size_t id_len, long retry_ms);

#endif
