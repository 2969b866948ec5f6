/* HTTP/1.1 server connections (plain TCP or TLS) for clients.
 *
 * A tg_conn reads bytes, runs them through TLS when the listener has it, and
 * parses requests with llhttp. A complete request (head + body, within the
 * configured limits) is handed to env->on_request (the server routes it to
 * core/app/route.c). The handler answers at once with tg_http_respond(), or
 * later: it then sets conn->exchange/on_abort so that it hears about a client
 * that goes away first. A streamed answer (SSE) is tg_http_stream_begin(),
 * tg_http_stream_write()* and tg_http_stream_end(). Requests are processed one
 * at a time: pipelined bytes wait, unparsed, until the answer is complete.
 *
 * The transport knows nothing of the server: what it needs (loop, limits,
 * counters, the connection lists, the callbacks) comes in a struct tg_http_env.
 *
 * Ownership: the listener's accept callback creates a conn; it frees itself
 * after its uv_close callback. tg_conn_close() is idempotent and deferred. */
#ifndef TG_HTTP1_H
#define TG_HTTP1_H

#include <llhttp.h>
#include <string.h>
#include <uv.h>

#include "policy/auth_memo.h"
#include "core/base/buf.h"
#include "core/conf/conf.h"
#include "core/wire/http_fast.h"
#include "core/base/metrics.h"

struct tg_tls_ctx;
struct tg_conn;
struct tg_http_env;

typedef void (*tg_http_env_cb)(struct tg_http_env *env, struct tg_conn *conn);

/* What connections need from whoever runs them (the server, or a test). Owner: the caller,
 * who embeds it (struct tg_server does) and keeps it, and what it points to, alive and
 * current while any connection made with it lives; tg_http_env_init() fills it in. */
/* Durations of deadlines armed at once (header, idle and handshake timeouts, a TLS trim, a
 * protocol's tick, and the same after a reload changed them). */
#define TG_HTTP_DUE_LISTS 12

struct tg_http_env {
    uv_loop_t *loop;
    const struct tg_limits *limits; /* the current limits: the owner repoints it on reload */
    struct tg_metrics *metrics;
    const int *draining;            /* never NULL; *draining != 0: answers close their connection */
    int access_log;                 /* log.access: one "request" line per HTTP exchange */
    /* A complete request is on conn->req (conn is DISPATCHING). Never NULL. */
    tg_http_env_cb on_request;
    /* The connection is about to be freed (it already left conns). May be NULL. */
    tg_http_env_cb conn_gone;
    void *ud;                       /* the caller's */
    /* Kept by the transport; the owner may walk them. */
    struct tg_list conns;           /* every open connection, by tg_conn.node */
    size_t nconns;
    struct tg_list corked;          /* connections with stream output gathered this iteration */
    struct tg_list conn_pending;    /* connections with work put off to the end of the iteration */
    /* TLS handshake work in the loop iteration handshake_iter, and the handshakes waiting for a
     * later one (transports/http1/tls_io.c) */
    uint64_t handshake_iter, handshake_ns;
    size_t handshakes_waiting;
    uint64_t next_conn_id;
    /* Every connection's deadline (transports/http1/timer.c): one list per duration armed, in the
     * order of the deadlines, and one timer for the earliest head, at timer_at (UINT64_MAX: none). */
    struct tg_http_due {
        uint64_t ms;
        struct tg_list conns; /* by tg_conn.due_node */
    } due[TG_HTTP_DUE_LISTS];
    size_t ndue; /* slots of due given a duration */
    uv_timer_t timer;
    uint64_t timer_at;
    char scratch[65536];            /* one read buffer for every connection (see on_alloc) */
    struct tg_http_scratch *xpool;  /* request scratches given back, at most TG_HTTP_XPOOL */
    size_t nxpool;
};

#define TG_HTTP_XPOOL 256

void tg_http_env_init(struct tg_http_env *env, uv_loop_t *loop, const struct tg_limits *limits,
                      struct tg_metrics *metrics, const int *draining);
/* Closes the env's timer (after every connection is gone; the loop runs its close callback). */
void tg_http_env_close(struct tg_http_env *env);
/* Frees the pool (after every connection is gone). */
void tg_http_env_dispose(struct tg_http_env *env);

/* What a connection knows of the listener that accepted it. Owner: the listener's owner
 * (the server embeds one in each of its listeners); it outlives the connections. */
struct tg_http_listener {
    const struct tg_listener_conf *lc; /* NULL for the admin listener */
    struct tg_tls_ctx *tls;          /* NULL: plain TCP */
    int is_admin;                    /* not counted against max_connections */
    int port;                        /* bound port */
};

#define TG_HTTP_MAX_HEADERS 64

/* Where a connection is in its life (its phase; "state" is kept for what a protocol carries,
 * such as a 2026 requestState or a policy's state counters). All moves go through
 * tg__http_set_phase() (transports/http1/internal.h). */
enum tg_conn_phase {
    TG_CONN_HANDSHAKE,   /* TLS handshake in progress; nothing parsed yet */
    TG_CONN_IDLE,        /* between requests; idle timer armed */
    TG_CONN_READING,     /* a request has started; header timer armed until the body is complete */
    TG_CONN_DISPATCHING, /* a complete request is with the handler; parser paused; no timer */
    TG_CONN_STREAMING,   /* the handler is streaming a chunked (SSE) answer; parser paused */
    TG_CONN_UPGRADED,    /* 101 sent: bytes belong to another protocol (WebSocket); HTTP parsing is over */
    TG_CONN_CLOSING,     /* uv_close requested; no more reads or writes */
    TG_CONN_CLOSED,      /* close callback ran; memory is about to be released */
};
const char *tg_conn_phase_str(enum tg_conn_phase s);


/* The request being read. It lives in the connection's request scratch (below), so it exists
 * only while a request is under way: c->req is NULL between requests. Its buffers are reset for
 * the next request and kept, at a usual size, with the scratch in the env's pool. */
struct tg_http_req {
    uint8_t method; /* llhttp_method_t */
    uint8_t nheaders; /* at most TG_HTTP_MAX_HEADERS */
    uint8_t last_was_value;
    uint8_t keep_alive;
    uint8_t too_many_headers;
    uint8_t http_minor; /* HTTP/1.<this>; known once the request is whole */
    uint8_t upgrade;    /* llhttp's verdict: the request asks for another protocol (or is CONNECT) */
    uint8_t in_trailers;  /* the head is over: fields llhttp reports now are a chunked body's trailers */
    struct tg_buf head; /* URL and header bytes, copied from the wire; the slices below point into it */
    uint32_t url_off, url_len;
    struct tg_http_header *headers; /* TG_HTTP_MAX_HEADERS of them, in the connection's scratch */
    struct tg_buf body;
    size_t trailer_bytes; /* trailer bytes read and discarded; with the head, under limits.header_bytes */
    unsigned head_flags;  /* llhttp's Connection and Upgrade flags as the head left them */
};

/* What a connection needs only while it has a request: the request itself (its fields and the
 * storage of its head and body), the parser, the header offsets and the access line's who.
 * Taken from the env's pool when a request begins and given back when it ends, so an idle
 * keep-alive connection holds none of it and a busy one allocates none of it. */
struct tg_http_scratch {
    struct tg_http_req req; /* conn->req points here while the connection holds the scratch */
    llhttp_t parser; /* made afresh when a connection takes the scratch (a request's first byte) */
    struct tg_http_header headers[TG_HTTP_MAX_HEADERS];
    char log_grant[65], log_upstream[65], log_session[40]; /* set by the router; copies, so that a reload cannot leave them dangling */
    char log_subject[256]; /* who inside the grant (a JWT's subject claim, whole: under 256 bytes) */
    /* The rest of the access line: when the exchange began (0: its line is written), the bytes
     * sent and the status. */
    uint64_t log_start_ms;
    uint64_t log_bytes;
    uint16_t log_status;
    struct tg_http_scratch *next; /* in the pool */
};

typedef void (*tg_conn_cb)(struct tg_conn *conn, void *exchange);

/* The protocol that took an upgraded connection over: made by tg_http_take_over, so that other
 * connections do not carry its fields. */
struct tg_conn_upgraded {
    tg_conn_cb data; /* bytes arrived in in */
    tg_conn_cb tick; /* the connection's timer fired */
    tg_conn_cb gone; /* the connection is closing */
    void *ud;
};

/* A TLS connection's plaintext waiting to be encrypted: made when a big answer first waits, freed
 * once it is all encrypted, so that no other connection carries its fields. */
struct tg_tls_backlog {
    struct tg_buf buf;
    size_t off; /* of buf, the part already encrypted */
};

/* A client's address as accept saw it, kept in binary (20 bytes, not a 64-byte string): it is
 * printed only for a log line or a throttle's key. */
struct tg_peer_addr {
    uint8_t ip[16];
    uint16_t port;
    uint8_t family; /* 4 or 6; 0: not known (getpeername failed) */
};

/* One client connection. Owner: the transport (env->conns), from tg_http1_accept() until its
 * last handle's close callback, on_handle_closed(), frees it; tg_conn_close() only marks it.
 * Exchanges hold plain pointers to it and drop them when on_abort or up->gone says it closes. */
struct tg_conn {
    uv_tcp_t tcp;
    struct tg_http_env *env;
    const struct tg_http_listener *listener;
    uint64_t id;
    uint64_t due_ms; /* the loop time the current phase's deadline falls at; 0: none */
    struct tg_list due_node; /* on one of env->due while due_ms != 0 (timer.c) */
    struct tg_tls *tls;
    struct tg_buf in; /* plaintext not yet parsed */
    /* The request under way, in the connection's scratch (see above); NULL between requests. A
     * handler reads it while the connection is DISPATCHING or STREAMING. */
    struct tg_http_req *req;
    struct tg_auth_memo auth_memo; /* the router's: the last static token this connection proved */
    size_t out_pending; /* bytes handed to uv_write (or corked) and not yet confirmed */
    size_t out_pending_corked; /* the part of out_pending still in cork */
    struct tg_list pend_node; /* in env->conn_pending while pend != 0 */
    /* The small state, packed together (no holes between wider members). */
    enum tg_conn_phase phase : 8;
    /* Work put off to the end of the loop iteration (tg_http_run_pending), so that no callback
     * runs inside the tg_http_* or tg_conn_close call that caused it. */
    uint8_t pend;        /* TG_PEND_* */
    uint8_t req_complete : 1;
    uint8_t close_after : 1; /* close once the current answer is written */
    uint8_t over_limit : 1;  /* accepted past limits.max_connections: its request gets 503, then it closes */
    uint8_t read_stopped : 1;
    uint8_t eof : 1;
    uint8_t in_process : 1;  /* process_input() is on the stack: do not re-enter it */
    uint8_t trim_due : 1;    /* IDLE on TLS: the deadline is TG_TLS_TRIM_MS's, then idle_timeout_ms's (timer.c) */
    uint8_t wait_drain : 1;  /* pipelined input waits for the output to drain below the mark */
    uint16_t reject_status; /* set by a parser callback that refused the request (413, 414, 431) */
    uint32_t cork_last;  /* the size of the last cork written */
    struct tg_peer_addr peer; /* the client's address (tg_conn_peer() prints it) */
    /* The handler's pending work for this request, if any. */
    void *exchange;
    tg_conn_cb on_abort; /* the client went away while exchange was set */
    tg_conn_cb on_drain; /* out_pending fell below the low-water mark */
    /* Someone waiting for output already answered to drain (outlives the exchange): called once
     * when out_pending falls below the low-water mark or the connection closes. */
    tg_conn_cb on_watch;
    void *watch_ud;
    /* After an upgrade: the protocol that took the connection over (tg_http_take_over), or NULL. */
    struct tg_conn_upgraded *up;
    struct tg_list node; /* in env->conns */
    struct tg_buf cork;       /* stream output gathered during this loop iteration */
    size_t chunk_open;        /* 1 + where in cork the open chunk starts (its size not written yet); 0: none */
    struct tg_tls_backlog *tls_plain; /* TLS: plaintext not encrypted yet (a big answer goes a slice
                                       * per round), or NULL (out.c) */
    struct tg_list cork_node; /* in env->corked while cork holds bytes */
};

/* The request scratch c holds (a request is under way), or NULL. */
static inline struct tg_http_scratch *tg_http_scratch_of(const struct tg_conn *c)
{
    return c->req != NULL ? (struct tg_http_scratch *)((char *)c->req - offsetof(struct tg_http_scratch, req)) : NULL;
}

/* The client's "ip:port" (an IPv6 address without brackets), "" if not known: for a log line, in
 * a buffer of the calling thread's that the next call overwrites. */
const char *tg_conn_peer(const struct tg_conn *c);
/* The client's address without the port into out (48 bytes), "" if not known. */
void tg_conn_peer_ip(const struct tg_conn *c, char out[48]);

/* Accept one connection from listener_handle (call it from the listener's connection callback). */
void tg_http1_accept(struct tg_http_env *env, const struct tg_http_listener *l, uv_stream_t *listener_handle);

struct tg_slice tg_http_req_url(const struct tg_http_req *r);
/* First header with this name (looked up in lowercase letters, digits and '-'; matched in any
 * case), or a NULL slice. */
struct tg_slice tg_http_req_header_n(const struct tg_http_req *r, const char *name, size_t n);
/* How many headers have this name (duplicated security-relevant headers are refused). */
int tg_http_req_header_count_n(const struct tg_http_req *r, const char *name, size_t n);
/* The same for a NUL-terminated name: inline, so that a literal's length is the compiler's. */
static inline struct tg_slice tg_http_req_header(const struct tg_http_req *r, const char *name)
{
    return tg_http_req_header_n(r, name, strlen(name));
}
static inline int tg_http_req_header_count(const struct tg_http_req *r, const char *name)
{
    return tg_http_req_header_count_n(r, name, strlen(name));
}

/* A complete answer with Content-Length. extra_headers: "Name: value\r\n"... or NULL. */
void tg_http_respond(struct tg_conn *c, int status, const char *extra_headers, const char *content_type,
                     const char *body, size_t len);
/* The same, taking body's storage (left empty): a big body on plain TCP is written from there
 * with no copy. */
void tg_http_respond_owned(struct tg_conn *c, int status, const char *extra_headers, const char *content_type,
                           struct tg_buf *body);
/* A JSON-RPC error answer: {"jsonrpc":"2.0","id":null,"error":{code,message}}. */
void tg_http_respond_rpc_error(struct tg_conn *c, int status, const char *extra_headers, int code, const char *msg);
void tg_http_stream_begin(struct tg_conn *c, int status, const char *extra_headers, const char *content_type);
void tg_http_stream_write(struct tg_conn *c, const char *p, size_t n);
/* The same, and the chunk may hold the joined writes just before and after it in this loop
 * iteration. Only for what a client may take in one piece without changing what it does: the
 * official TypeScript SDK handles a response at once but notifications and requests a microtask
 * later, so a response read in one piece with the notifications before it overtakes them. A
 * response is written with tg_http_stream_write, which always makes its own chunk. */
void tg_http_stream_write_joined(struct tg_conn *c, const char *p, size_t n);
void tg_http_stream_end(struct tg_conn *c);

/* A handler that answers later, when something else answers it (a reload, Redis, the approvals
 * queue): the wait holds the connection as its exchange and forgets it if the client goes
 * first. Storage: the caller's (usually the first member of its own struct), kept until the
 * answer comes whether the client stayed or not; the answer's callback calls
 * tg_http_wait_stop() once, then frees it. */
struct tg_http_wait {
    struct tg_conn *_conn; /* NULL once the connection has gone */
};
/* Hold c (no other exchange on it) until tg_http_wait_stop(). */
void tg_http_wait_start(struct tg_http_wait *w, struct tg_conn *c);
/* The answer came: the connection to answer on, no longer held, or NULL if the client has gone
 * meanwhile (then there is no one to answer). */
struct tg_conn *tg_http_wait_stop(struct tg_http_wait *w);

/* Closing marks: the connection stops reading and writing at once, and its users hear of it
 * (on_abort, up->gone, on_watch) from the loop after the current handler has returned, never
 * from inside this call or a tg_http_* call. The memory goes after the handles' close callbacks. */
void tg_conn_close(struct tg_conn *c, const char *why);
/* Close even a connection already waiting for its last writes (end of a drain). */
void tg_conn_close_now(struct tg_conn *c, const char *why);

/* Upgrades (WebSocket): answer 101 with extra headers; the connection then carries another protocol. */
void tg_http_upgrade(struct tg_conn *c, const char *extra_headers);
/* Hand the upgraded connection to a protocol (NULL callbacks detach it). Bytes that came with
 * the handshake reach on_data from the loop, never inside this call. */
void tg_http_take_over(struct tg_conn *c, tg_conn_cb on_data, tg_conn_cb on_tick, tg_conn_cb on_gone, void *ud);
void tg_http_upgraded_timer(struct tg_conn *c, uint64_t ms);
/* Stop reading an upgraded connection until its output drains below the mark. */
void tg_http_read_pause(struct tg_conn *c);
/* Bytes for the peer as they are (encrypted on TLS connections). */
void tg_http_raw_write(struct tg_conn *c, const char *p, size_t n);
/* The same with a head before p (a frame header): both go into the cork, no buffer between. */
void tg_http_raw_write2(struct tg_conn *c, const char *head, size_t hn, const char *p, size_t n);
/* Write what a stream gathered this iteration. */
void tg_http_flush(struct tg_conn *c);
/* tg_http_flush() every connection on env->corked (the owner calls it once per loop iteration). */
void tg_http_flush_corked(struct tg_http_env *env);
/* Close once everything queued has been written. */
void tg_http_close_after_writes(struct tg_conn *c);
/* Run what connections put off (close notifications, pipelined input); the owner calls it
 * once per loop iteration, with no handler on the stack. Each call takes what was queued
 * before it; what it queues waits for the next (env->conn_pending is then not empty). */
void tg_http_run_pending(struct tg_http_env *env);
/* 1 when this connection's queued output, or the whole process's, is over its limit. */
int tg_conn_output_high(const struct tg_conn *c);
const char *tg_http_status_text(int status);

#endif
