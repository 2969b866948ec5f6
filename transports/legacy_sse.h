/* Legacy HTTP+SSE clients (protocol 2024-11-05): GET /NAME/sse opens a session whose every
 * message comes as an SSE event on that stream; the client POSTs to /NAME/messages. */
#ifndef TG_LEGACY_SSE_H
#define TG_LEGACY_SSE_H

#include "core/base/buf.h"

struct tg_conn;
struct tg_exchange;

void tg_legacy_sse_open(struct tg_exchange *x, struct tg_conn *c);
void tg_legacy_sse_messages(struct tg_exchange *x, struct tg_conn *c, struct tg_slice query);

#endif
