/* What a client transport and the middle (core/gate/dispatch.c, core/call/call.c) agree on: the request
 * context, and the sink a call answers through.
 *
 * A transport turns its framing into messages (struct tg_msg) and hands each one to
 * tg_dispatch_message() with a context and a sink. From then on the middle owns the sink
 * reference: it answers through the sink's operations and releases it exactly once, whether
 * it answered at once (a decision, a local answer) or a call carried the message upstream.
 * The call never asks which transport it is answering: Streamable HTTP (JSON or a per-request
 * SSE stream), a batch, or a long-lived channel (legacy SSE, WebSocket) all look the same.
 *
 * Calling back the other way, a transport tells the call that its client went away or drained
 * through the tg_call_client_* functions below. No sink operation frees the call or runs a
 * call callback from inside itself. */
#ifndef TG_EXCHANGE_H
#define TG_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>
struct tg_buf;

struct tg_server;
struct tg_session;
struct tg_call;
struct tg_grant_conf;
struct tg_upstream_conf;

/* The protocol era of a request: a 2025 session (initialize, Mcp-Session-Id) or a stateless
 * MCP 2026-07-28 request. Only 2025 is served today; the field is where the next era goes. */
enum tg_era {
    TG_ERA_2025 = 0,
    TG_ERA_2026 = 1,
};

/* The request context. Owner: the transport that built it (usually on its stack); the middle
 * copies what it keeps. */
struct tg_auth_cred;
struct tg_principal;

struct tg_exchange {
    struct tg_server *srv;
    enum tg_era era;
    char proto[24];                     /* protocol version of this request ("" = unknown yet) */
    unsigned client_caps;               /* TG_CAP_* the client declared (2026: core/mcp/mrtr.h) */
    const struct tg_grant_conf *grant;  /* the principal's grant (who->grant) */
    const struct tg_principal *who;     /* who the request speaks for (policy/auth.h), or NULL
                                         * where no request carried a credential (a channel's
                                         * message: then the subject that opened its session; a
                                         * reload's ending, a cluster member's message: the grant) */
    const char *scopes;                 /* the credential's scopes (policy/scopes.h), or NULL: none */
    const char *resource_metadata;      /* the route's RFC 9728 metadata URL, for a 403
                                         * insufficient_scope (NULL: no JWT issuers, none) */
    int upstream;                       /* index into conf->upstreams */
    const struct tg_upstream_conf *uc;
    struct tg_session *sess;            /* the session, or NULL for a stateless request */
    int up_modern;                      /* the upstream hears this request as 2026-07-28 (headers
                                         * rebuilt from the body, no upstream session) */
    const char *up_caps;                /* a stateless session's 2025 upstream: what its initialize
                                         * declared (JSON), or NULL */
    const char *fwd_headers;            /* the client's Mcp-Param-* lines the gateway passes on
                                         * (complete "Name: value\r\n" lines), or NULL */
    const char *subject_token;          /* the caller's JWT (borrowed from the request, this request
                                         * only), for a token exchange (core/call/upauth.h); never
                                         * logged, never sent upstream; or NULL */
    size_t subject_token_len;
    const char *subject_who;            /* whose it is, where who is gone (tg_call_upauth_who), or NULL */
    const struct tg_auth_cred *cred;    /* a channel's opening request: what authenticated it
                                         * (policy/auth.h; the channel keeps a copy), else NULL */
};

/* Sink flags. */
#define TG_SINK_ANSWER_ONLY 0x1u /* only the answer can reach the client (a batch over HTTP): server
                                  * requests are refused for it, other messages dropped */
#define TG_SINK_NO_WAIT 0x2u     /* the exchange cannot wait for a human (a batch of several) */
#define TG_SINK_STATELESS 0x8u   /* a 2026-07-28 request's own stream: its progress and logs reach
                                  * it, server requests never do (they are refused, or become
                                  * input_required), nor the session's other messages */
#define TG_SINK_NEW_SESSION 0x4u /* the session was made for this exchange (an initialize over
                                  * Streamable HTTP): if the upstream fails it, the session goes */

struct tg_sink;

/* Where one exchange's output goes. k is the call (NULL for an answer made before any call).
 * Data only: each transport has one static const table (batch.c, streamable.c, channel.c) that
 * its sinks point to; never freed. */
struct tg_sink_ops {
    /* Something the server says while the call runs (progress, a log, a server request). */
    void (*message)(struct tg_sink *sk, struct tg_call *k, const char *p, size_t n);
    /* The call's answer: a JSON-RPC response, with the HTTP status where HTTP shows one (200,
     * or 400/404/429 for a refusal). extra: more "Name: value\r\n" header lines, or NULL. On a
     * sink that already streams, the answer is one more event. */
    void (*answer)(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p, size_t n);
    /* An exchange without a JSON-RPC answer ends with an HTTP status (202, 405, 502, 504) and an
     * optional JSON body: only a sink that is one HTTP exchange shows it. */
    void (*bare)(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p, size_t n);
    /* The upstream streams this call's messages: a sink that can stream starts its stream now. */
    void (*stream)(struct tg_sink *sk, struct tg_call *k);
    /* Nothing more comes for this exchange: a stream ends, a bare exchange gets 202 if it got
     * nothing else. */
    void (*end)(struct tg_sink *sk, struct tg_call *k);
    /* The upstream asked to be polled again in retry_ms (SEP-1699): a client that can do the
     * same is told so and let go. */
    void (*poll)(struct tg_sink *sk, struct tg_call *k, long retry_ms);
    /* 1 while the client is behind: its queued output is over the high-water mark. */
    int (*high)(const struct tg_sink *sk);
    /* 1 while someone can still read what comes (a client, or a replay buffer for one). */
    int (*listening)(const struct tg_sink *sk);
    /* The gateway ends a long-lived client stream (upstream gone, shutdown). May be NULL. */
    void (*close)(struct tg_sink *sk, uint16_t ws_code, const char *why);
    /* A call now answers through this sink (NULL for sinks shared by several calls). */
    void (*bind)(struct tg_sink *sk, struct tg_call *k);
    /* The middle lets go of the sink: no operation follows. */
    void (*release)(struct tg_sink *sk, struct tg_call *k);
    /* 1 while a client's connection reads it now (0: at most a replay buffer keeps what comes
     * for a client that may come back). May be NULL: listening says it. */
    int (*connected)(const struct tg_sink *sk);
    /* The credential the client authenticated this exchange with (policy/auth.h), into out: 1, or
     * 0 when the sink cannot say. A parked call keeps it, to ask at approval whether it still
     * holds. May be NULL: cannot say. */
    int (*cred)(const struct tg_sink *sk, struct tg_auth_cred *out);
};

/* Embedded first in each transport's sink object. Owner: the transport object that embeds it
 * (an HTTP exchange, a batch, a channel); its release op frees or unrefs that object. */
struct tg_sink {
    const struct tg_sink_ops *ops;
    unsigned flags; /* TG_SINK_* */
};

/* Upcalls from transports to the call they feed (core/call/call.c). None runs a sink operation
 * inside the transport's own call chain: a call that must close is closed, and freed later. */
void tg_call_client_gone(struct tg_call *k);    /* the client went away for good */
void tg_call_client_drained(struct tg_call *k); /* the client's output fell below the low-water mark */
int tg_call_running(const struct tg_call *k);   /* 1 while the upstream may still send for k */
int tg_call_is_listen(const struct tg_call *k); /* a 2026 subscriptions/listen: its stream lasts */
/* The id the client gave k's request (raw JSON, *n bytes), or NULL. */
const char *tg_call_client_id(const struct tg_call *k, size_t *n);
struct tg_sink *tg_call_sink(const struct tg_call *k);
/* Inside ops->answer(k, ..., p, n): move the answer's storage into *to (1) when p and n are the
 * buffer the call built (a big answer need not be copied again); 0: copy it. */
int tg_call_take_answer(struct tg_call *k, const char *p, size_t n, struct tg_buf *to);
/* A session's long-lived client stream (a channel) drained: every reader of the session resumes. */
void tg_call_session_drained(struct tg_session *s);
/* An answer already handed to a client that is slow to read it: the session's message-stream
 * upstream pauses until done() runs (delta +1 to stall, -1 when the client drained). */
void tg_call_session_stall(struct tg_session *s, int delta);

#endif
