/* Input between the eras (core/bridge/input.c), as a filter on the call (core/call/call.h).
 *
 * A 2025 session's call on a 2026-07-28-only upstream that answers input_required: the gateway
 * asks the client itself with real server requests, and retries the call with the answers. A
 * 2026 client's call on a 2025 upstream that meets a server request: the client gets
 * input_required, and the call is held open upstream for its retry. */
#ifndef TG_BRIDGE_INPUT_H
#define TG_BRIDGE_INPUT_H

#include "core/base/json.h"

struct tg_call;
struct tg_decision;
struct tg_msg;
struct tg_server;
struct tg_session;

/* k crosses the eras (a 2025 client's call with k->resend on a 2026-only upstream, or a 2026
 * client's call with k->mrtr): the input filter goes on it. */
void tg_bridge_input_filter(struct tg_call *k);
/* A client's response m to one of the gateway's own requests for input (1: consumed). */
int tg_bridge_input_answer(struct tg_server *srv, struct tg_session *s, struct tg_msg *m);
/* A 2026 retry r (decided again: dec) that continues the call held open upstream as parked:
 * the answer goes upstream and the held call answers through r's client; or r's client is told
 * why not (a retry that would wait for approval again, a held call that ended). r ends here. */
void tg_bridge_input_resume(struct tg_call *r, const struct tg_decision *dec, const char *parked,
                            const struct cJSON *params);
/* Shutdown: the clients still asked for input are answered -32004. */
void tg_bridge_input_dispose(struct tg_server *srv);

#endif
