/* A JSON-RPC batch (protocol 2025-03-26 only), or one message of a channel session: each
 * element is decided and forwarded on its own and answers through the batch's sink; over HTTP
 * the answers are gathered into one JSON array, on a channel they go out on the channel.
 *
 * Owner: the elements in flight and the loop that dispatches them each hold one count
 * (pending); the batch answers and frees itself when the last one is released. */
#ifndef TG_BATCH_H
#define TG_BATCH_H

#include "core/base/buf.h"
#include "core/call/exchange.h"
#include "core/base/json.h"

struct tg_conn;
struct tg_server;

/* Owner: counted in pending (the dispatch loop and each element in flight); the tg_batch_done()
 * that drops the last count answers and frees it. */
struct tg_batch {
    struct tg_sink sink;  /* first: each element's call answers through it */
    struct tg_server *srv;
    struct tg_conn *conn; /* NULL once the client has gone (or on a channel) */
    int pending;          /* elements (and the dispatch loop itself) not done yet */
    struct tg_buf out;    /* "[a,b" so far */
    size_t held;          /* of it, counted in the process's output total (metrics.output_buffered) */
    int nout;
    struct tg_sink *channel; /* answers go to this long-lived sink (a channel) instead of conn; the
                              * batch holds one reference, given back with its release op */
    int single;                 /* a channel message that was not an array: answers go out one by one */
};

/* A batch answering on HTTP connection c (which it hooks), or on the long-lived sink ch, whose
 * reference it takes over (single: one message, not an array). */
struct tg_batch *tg_batch_new(struct tg_server *srv, struct tg_conn *c, struct tg_sink *ch, int single);
/* One more element will answer through the batch: returns the sink to hand to dispatch. */
struct tg_sink *tg_batch_element(struct tg_batch *b);
/* An element refused before dispatch (it takes no count). */
void tg_batch_add_error(struct tg_batch *b, const char *id, size_t idn, int code, const char *msg, const char *data);
void tg_batch_add(struct tg_batch *b, const char *p, size_t n);
/* Decode and dispatch every element of a JSON array (initialize refused) through the batch. */
void tg_batch_run(struct tg_batch *b, struct tg_exchange *x, const cJSON *array, int json_depth);
/* The dispatch loop is over: drop its count (the batch may answer and go now). */
void tg_batch_done(struct tg_batch *b);

#endif
