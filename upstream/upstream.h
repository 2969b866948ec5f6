/* The upstream kinds behind one table of operations: Streamable HTTP (upstream/streamable.c),
 * legacy HTTP+SSE (upstream/legacy_sse.c) and stdio children (upstream/stdio.c).
 *
 * core/call/call.c picks the table by the upstream's transport and never asks which kind it
 * talks to. What comes back arrives through the call's upcalls (core/call/call.h):
 * tg_call_upstream_message, tg_call_stream, tg_call_fail, or, for the kinds that carry every
 * message of a session on one link, tg_session_link_message and tg_call_link_gone. No
 * operation calls back from inside itself: a failure found at once is delivered from the loop
 * or handled by the caller's return path, as each operation says. */
#ifndef TG_UPSTREAM_H
#define TG_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/call/exchange.h"

struct tg_call;
struct tg_server;
struct tg_session;
struct tg_upstream;

/* The server's own messages arrive on the session's link (stdio, legacy SSE): a channel
 * session needs no GET stream to hear them. */
#define TG_UPOPS_SESSION_LINK 0x1u

/* Data only: one static const table per kind (tg_upstream_*_ops below; a unit test may bring its
 * own through srv->upstream_ops); calls point at it, nobody frees it. */
struct tg_upstream_ops {
    const char *name;
    unsigned flags; /* TG_UPOPS_* */
    /* The era this upstream speaks, probed once and cached by the upstream runtime; NULL:
     * 2025 only (every kind today). */
    enum tg_era (*probe)(struct tg_upstream *u);
    /* Make sure the session's link exists (a child, an event stream). 0 or a negative error. */
    int (*open)(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u);
    /* Send call k's message; body NULL opens the session's stream of server messages. A
     * message that cannot be sent fails the call (tg_call_fail) before this returns, which the
     * caller must expect: k may be closed when it returns. */
    void (*send)(struct tg_call *k, const char *body, size_t len, uint64_t timeout_ms);
    /* 1 if the upstream may have k's message (it was written); 0 if it certainly has not (a
     * request still queued for a connection). */
    int (*sent)(const struct tg_call *k);
    /* Stop waiting for k: nothing more comes for it. */
    void (*cancel)(struct tg_call *k);
    /* Stop (pause 1) or restart (0) reading what comes for k, or (k NULL) the session's link. */
    void (*pause)(struct tg_session *s, struct tg_call *k, int pause);
    /* Progress was made: k's timer starts again. */
    void (*touch)(struct tg_call *k);
    /* A message of the gateway's own to the upstream session (an answer to a server request it
     * refused); nobody waits for what comes back. */
    void (*reply)(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p, size_t n);
    /* The session ends: its upstream state goes (DELETE of the upstream session, the child,
     * the event stream). */
    void (*close)(struct tg_server *srv, struct tg_session *s);
};

/* A session's link to a message-stream upstream, embedded first in each kind's link object.
 * Owner: the session (s->uplink); freed by the kind's release_link when the session goes. */
struct tg_uplink {
    const struct tg_upstream_ops *ops;
};

extern const struct tg_upstream_ops tg_upstream_streamable_ops;
extern const struct tg_upstream_ops tg_upstream_sse_ops;
extern const struct tg_upstream_ops tg_upstream_stdio_ops;

#endif
