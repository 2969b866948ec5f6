/* The upstream kinds behind one table of operations: Streamable HTTP (upstream/streamable.c),
 * legacy HTTP+SSE (upstream/legacy_sse.c) and stdio children (upstream/stdio.c); the half the
 * two message-stream kinds share is upstream/link.c, and upstream/kinds.c says which kind
 * serves an upstream's transport.
 *
 * A kind never calls up into the call it serves. The call hands it, with each message it sends,
 * a table of callbacks (struct tg_upstream_events) and an opaque pointer to pass them (the call
 * itself); what the upstream says comes back through them. A message-stream kind also reports
 * what comes on a session's link and answers no call through the session callbacks (struct
 * tg_upstream_host). Each kind keeps its own state per call (in the call's slot, which it
 * allocates and frees) and per session (s->uplink). No operation calls back from inside itself
 * except send, as it says. */
#ifndef TG_UPSTREAM_H
#define TG_UPSTREAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"

struct tg_json_doc;
struct tg_server;
struct tg_session;
struct tg_upstream;

/* What a message is, as far as its upstream goes. */
enum call_kind {
    KIND_REQUEST, /* a client request; the answer goes back with the client's id */
    KIND_FORWARD, /* a notification or a response from the client; answered 202 */
    KIND_GET,     /* the session's stream of server messages (a GET stream, or a channel's) */
};

/* How a call ended, as the kind saw it. The call settles its reservations by it (core/call/call.c
 * says which give them back) and maps the last three to what its client gets. */
enum tg_outcome {
    TG_OUT_OK,          /* answered with a result */
    TG_OUT_ERROR,       /* answered with a JSON-RPC error object: the tool did not run */
    TG_OUT_GARBLED,     /* answered with something that is not a well-formed answer: it may have run */
    TG_OUT_NOT_SENT,    /* never reached the upstream */
    TG_OUT_NOT_SENT_TIMEOUT, /* never reached it: no connection before the deadline */
    TG_OUT_REFUSED,     /* the upstream refused the request (HTTP 4xx, session gone) */
    TG_OUT_TIMEOUT,     /* no answer in time: it may have run */
    TG_OUT_UNAVAILABLE, /* connection lost, 5xx, stream ended without the answer: it may have run */
    TG_OUT_CLIENT_GONE, /* the client left while the upstream had it: it may have run */
    TG_OUT_CLIENT_GONE_NOT_SENT, /* the client left before the message was written: it did not run */
    TG_OUT_WITHDRAWN,   /* never forwarded (refused, parked then not approved): its decision's
                         * audit line is written already; only the reservations go back */
    TG_OUT_ACCEPTED,    /* HTTP 202: a notification or response taken; the client gets 202 */
    TG_OUT_SESSION_GONE, /* HTTP 404 on a session's message: the upstream ended the session, which
                          * ends here too; the client gets 404 (a 2026 client an error) */
    TG_OUT_NO_STREAM,   /* HTTP 404 or 405 to a GET: the upstream has no stream of its own
                         * messages; the client gets 405 */
};

/* What message() below says of a message. */
#define TG_UPMSG_RELAYED 1      /* passed on (or dropped after a look): nothing more to do */
#define TG_UPMSG_ANSWER 2       /* it was the call's answer, a result */
#define TG_UPMSG_ANSWER_ERROR 3 /* it was the call's answer, a JSON-RPC error object */

/* What a kind reports to the call it serves; call is the pointer given with send. Each may end
 * the call except where said; after done() the kind forgets call. */
struct tg_upstream_events {
    /* A message on the call's answer stream: rewritten, checked and passed to the client as the
     * answer or as a message on the way. 0 (not looked at: nobody reads, not JSON, a server
     * request refused) or a TG_UPMSG_*. The kind calls backpressure() once after a read's
     * messages. */
    int (*message)(void *call, const char *p, size_t n);
    /* p, if it is the call's answer, to the client with status (0: 200): 1, or 0 if it is not the
     * answer (nothing sent). pre: p's spans if parsed already; own: p's buffer, which the rewrite
     * may take. Does not end the call. */
    int (*answer)(void *call, const char *p, size_t n, const struct tg_json_doc *pre, struct tg_buf *own, int status);
    /* The answer to a call waiting on a session's link came (doc: its spans; own: its buffer, or
     * NULL): settled, passed to the client, and the call ends. */
    void (*answered)(void *call, const char *p, size_t n, const struct tg_json_doc *doc, struct tg_buf *own);
    /* The answer will stream. */
    void (*stream)(void *call);
    /* The message was written to a session's link; the answer comes there (message-stream kinds):
     * it times out after timeout_ms (0: the upstream's call_timeout_ms). */
    void (*sent)(void *call, uint64_t timeout_ms);
    /* Settle the call's reservations now, before its answer goes (once; done() will not again).
     * latency_ms < 0: the call measures it. */
    void (*settle)(void *call, enum tg_outcome o, double latency_ms);
    /* Nothing more comes: settle with o (unless settled), tell the client why (NULL: nothing to
     * add) or what o maps to, end the call. */
    void (*done)(void *call, enum tg_outcome o, const char *why, double latency_ms);
    /* Progress: the call's timer starts again, and reading pauses while its client is behind. */
    void (*backpressure)(void *call);
    /* 1 if the client is behind (counted): stop reading until its drain resumes the call. */
    int (*behind)(void *call);
    /* 1 if someone still reads what comes for the call. */
    int (*listening)(void *call);
    /* The upstream asked to be polled again in retry_ms: the client may be told so. */
    void (*poll)(void *call, long retry_ms);
    /* The upstream answered HTTP 401: it did not run the message. Called with the kind's slot
     * for the call empty already. 1: the call took it (sent the message again with a new
     * credential, or answered), and the kind reports nothing more of this attempt; 0: the kind
     * goes on as with any refusal. NULL: always 0. */
    int (*unauthorized)(void *call);
};

/* What a message-stream kind reports of a session's link (upstream/link.c). */
struct tg_upstream_host {
    /* A message that answers no call: a server request or notification (doc: its spans). */
    void (*message)(struct tg_session *s, struct tg_upstream *u, const char *p, size_t n,
                    const struct tg_json_doc *doc);
    /* The link died; its waiting calls are done already: the session ends. */
    void (*gone)(struct tg_session *s, const char *why);
    /* After a read: stop reading the link while the session's clients are behind. */
    void (*backpressure)(struct tg_session *s);
    /* Keep (1) or let go (0) of s across a read that may end it. */
    void (*hold)(struct tg_session *s, int hold);
    /* At a stdio upstream's max_children: a session whose link may go to s (see
     * tg_session_pick_evictable), or NULL; *same: 1 if of s's grant. */
    struct tg_session *(*evictable)(struct tg_session *s, uint64_t idle_ms, int *same);
};

/* One message to send (ops->send). Borrowed for the call of send only. */
struct tg_upstream_send {
    struct tg_server *srv;
    struct tg_session *sess;
    struct tg_upstream *up;  /* the runtime the call holds a reference to */
    enum call_kind kind;
    const char *body;        /* NULL: open the session's stream of server messages */
    size_t len;
    uint64_t timeout_ms;
    int is_init;             /* an initialize: its answer names the upstream session */
    int is_listen;           /* a 2026 listen: a connection of its own, like a stream */
    const char *headers;     /* a 2026 request's Mcp-* header lines (NULL: the session's) */
    const char *auth;        /* the credential header lines for this message (a grant's
                              * upstream_headers, an exchanged token), or NULL; a session's later
                              * requests of its own take sess->up_auth */
    uint64_t first_sent_ns;  /* when the call first sent a message (uv_hrtime; 0: not stamped) */
    const char *gid;         /* the id the gateway gave the message (JSON), its length, its number */
    size_t gid_len;
    uint64_t gid_num;
    const struct tg_upstream_events *ev;
    const struct tg_upstream_host *host;
    void *call;              /* passed to ev */
    void **state;            /* the call's slot for the kind's state: set while the kind has the
                              * call, cleared by the kind when it is done */
};

/* The server's own messages arrive on the session's link (stdio, legacy SSE): a channel
 * session needs no GET stream to hear them. */
#define TG_UPOPS_SESSION_LINK 0x1u

/* Data only: one static const table per kind (upstream/kinds.c picks it; a unit test may bring
 * its own through srv->upstream_ops); calls point at it, nobody frees it. state is what the kind
 * put in the call's slot (NULL: nothing now). */
struct tg_upstream_ops {
    const char *name;
    unsigned flags; /* TG_UPOPS_* */
    /* Send a message. One that cannot be sent is done() before this returns, which the caller
     * must expect: the call may be closed when it returns. */
    void (*send)(const struct tg_upstream_send *a);
    /* 1 if the upstream may have the message (it was written); 0 if it certainly has not (a
     * request still queued for a connection). */
    int (*sent)(const void *state);
    /* Stop waiting: nothing more comes for the call; its state goes. */
    void (*cancel)(void *state);
    /* Stop (pause 1) or restart (0) reading what comes for a call, or (state NULL) the session's
     * link. */
    void (*pause)(struct tg_session *s, void *state, int pause);
    /* Progress was made: the call's timer starts again. */
    void (*touch)(void *state);
    /* A message of the gateway's own to the upstream session (an answer to a server request it
     * refused); nobody waits for what comes back. */
    void (*reply)(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p, size_t n);
    /* The session ends: its upstream state goes (DELETE of the upstream session, the child,
     * the event stream). */
    void (*close)(struct tg_server *srv, struct tg_session *s);
};

/* A session's link to a message-stream upstream, embedded first in each kind's link object.
 * Owner: the session (s->uplink); freed by the kind's release_link when the session goes. The
 * calls waiting for an answer on it are its (upstream/link.c). */
struct tg_uplink {
    const struct tg_upstream_ops *ops;
    const struct tg_upstream_host *host;
    struct tg_session *sess;  /* not a reference: the link dies with the session */
    struct tg_upstream *up;   /* not a reference: the session's calls hold one */
    struct tg_list waiting;   /* struct tg_link_wait (upstream/link.c) */
};

/* The kinds' tables: only upstream/kinds.c names them. */
extern const struct tg_upstream_ops tg_upstream_streamable_ops;
extern const struct tg_upstream_ops tg_upstream_sse_ops;
extern const struct tg_upstream_ops tg_upstream_stdio_ops;

/* upstream/kinds.c: the kind that serves uc's transport (the app hands it to srv->upstream_ops). */
struct tg_upstream_conf;
const struct tg_upstream_ops *tg_upstream_kind_for(const struct tg_upstream_conf *uc);

/* upstream/link.c: the half the message-stream kinds share. */
void tg_link_init(struct tg_uplink *ln, const struct tg_upstream_ops *ops, const struct tg_upstream_send *a);
/* A stream call (a->body NULL): the server's own messages come on the session's link. */
void tg_link_listen(const struct tg_upstream_send *a);
/* a's message was written to ln (ok 1; ln may be NULL if not), or could not be (done now). */
void tg_link_sent(struct tg_uplink *ln, const struct tg_upstream_send *a, int ok);
/* A message on the link (pre: its spans, or NULL; own: its buffer, or NULL). */
void tg_link_message(struct tg_uplink *ln, const char *p, size_t n, const struct tg_json_doc *pre, struct tg_buf *own);
/* A message on the link was too long to keep; id is its "id" token if its first bytes showed
 * it: the call waiting for that answer is done now (garbled) instead of at its timeout. */
void tg_link_oversized(struct tg_uplink *ln, struct tg_slice id);
/* The POST that carried the message with gateway id gid failed: its call is done with o. */
void tg_link_failed(struct tg_uplink *ln, uint64_t gid, enum tg_outcome o, const char *why);
/* The link died (ln already out of its session, not freed yet): its waiting calls are done,
 * then the session hears of it. */
void tg_link_gone(struct tg_uplink *ln, const char *why);
/* The link goes (its session does): the calls still waiting forget it. */
void tg_link_release(struct tg_uplink *ln);
/* The shared operations. */
int tg_link_op_sent(const void *state);
void tg_link_op_cancel(void *state);
void tg_link_op_touch(void *state);

#endif
