/* Streamable HTTP clients (/mcp): POST carries one message (or a 2025-03-26 batch) answered as
 * JSON or as a per-request SSE stream, GET opens the session's stream of server messages (or
 * resumes one with Last-Event-ID), DELETE ends the session.
 *
 * The answer of each exchange goes through a struct tg_http_sink. Owner: the call answering
 * through it (released by the sink's release op, which frees it); the client connection only
 * points at it (c->exchange) until the sink or the connection lets go. */
#ifndef TG_STREAMABLE_H
#define TG_STREAMABLE_H

#include "core/base/buf.h"
#include "core/call/exchange.h"
#include "transports/cred_watch.h"

struct tg_conn;
struct tg_replay;
struct tg_server;

/* Owner: the middle, from tg_dispatch_message() or tg_dispatch_listen() on (then the call bound
 * to it); on_sink_release() frees it. The connection only points at it (c->exchange). */
struct tg_http_sink {
    struct tg_sink sink;      /* first */
    struct tg_server *srv;
    struct tg_session *sess;  /* reference */
    struct tg_call *call;     /* the call answering through it, once there is one */
    struct tg_conn *conn;     /* NULL once the client has gone or the answer is complete */
    struct tg_replay *replay; /* once the answer streams: its ids and kept events */
    int is_init;              /* an initialize: a 200 answer carries Mcp-Session-Id while the session lives */
    int streaming;            /* the SSE answer has begun */
    int get;                  /* the session's GET stream (let go when its client does not come back) */
    int modern;               /* a 2026-07-28 request: no event ids, no replay, no priming event */
    struct tg_list listen_node; /* in srv->listens while it carries a subscriptions/listen stream */
    uint64_t last_write_ms;     /* (for its keepalive) */
    struct tg_cred_watch *watch; /* owned, once it streams: the credential of the request that
                                  * opened it (or took it over) ends it (transports/cred_watch.h) */
    struct tg_cred_hint hint;    /* what the router found of that request's JWT */
};

void tg_streamable_post(struct tg_exchange *x, struct tg_conn *c);
void tg_streamable_get(struct tg_exchange *x, struct tg_conn *c);
void tg_streamable_delete(struct tg_exchange *x, struct tg_conn *c);
/* A GET that opens an event stream must accept one; otherwise 406 is answered and 0 returned. */
int tg_streamable_accepts_sse(struct tg_conn *c);
/* The tick: keepalive comments on idle client streams; GET streams whose client never came
 * back are let go; replay buffers that ended long ago are freed. */
void tg_streamable_tick(struct tg_server *srv);
/* Shutdown: every replay buffer goes. */
void tg_streamable_free_streams(struct tg_server *srv);
/* The sink's cred operation (core/call/exchange.h): its stream's credential, or its request's. */
int tg_streamable_sink_cred(const struct tg_sink *sk, struct tg_auth_cred *out);
/* The cache of released sinks goes (after the loop stopped). */
void tg_streamable_dispose(void);

#endif
