/* What every sink shares (the interface is in core/call/exchange.h): the operations of a sink
 * that has nothing to do for them, a sink that drops everything, and the answers made before
 * any call (a refusal, 202, an empty result), each of which releases the sink. */
#ifndef TG_SINK_H
#define TG_SINK_H

#include <stddef.h>

#include "core/call/exchange.h"

struct tg_msg;

/* Operations a sink leaves empty. */
void tg_sink_nop(struct tg_sink *sk, struct tg_call *k);                        /* stream, end, bind */
void tg_sink_nop_message(struct tg_sink *sk, struct tg_call *k, const char *p, size_t n);
void tg_sink_nop_answer(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p,
                        size_t n);                                               /* answer, bare */
void tg_sink_nop_poll(struct tg_sink *sk, struct tg_call *k, long retry_ms);
int tg_sink_never_high(const struct tg_sink *sk);
int tg_sink_always_listening(const struct tg_sink *sk);

/* The operations of a sink that is not one HTTP exchange and does not stream (a batch, a
 * channel, the gateway's own sinks): no status to show, nothing to start, end or poll. A
 * designated-initializer list for its table. */
#define TG_SINK_NO_STREAM .bare = tg_sink_nop_answer, .stream = tg_sink_nop, .end = tg_sink_nop, .poll = tg_sink_nop_poll
/* And of one that nobody reads behind (the gateway's own): never behind, always listening, and
 * shared by its calls (no bind). */
#define TG_SINK_NO_CLIENT .high = tg_sink_never_high, .listening = tg_sink_always_listening, .bind = tg_sink_nop

/* A sink for the gateway's own messages whose answers are of no interest: drops everything,
 * never waits; shared by every such call, never freed. */
extern struct tg_sink tg_sink_discard;

/* Answer with a JSON-RPC error (id: the raw id, or NULL for null) and HTTP status, then release. */
void tg_sink_refuse(struct tg_sink *sk, int status, const char *id, size_t idn, int code, const char *msg,
                    const char *data);
/* 202 and nothing else (a notification, an answer to the gateway), then release. */
void tg_sink_accept(struct tg_sink *sk);
/* An empty result for request m ({}), or 202 for a notification; then release. */
void tg_sink_answer_empty(struct tg_sink *sk, const struct tg_msg *m);

#endif
