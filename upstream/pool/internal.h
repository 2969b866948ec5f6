/* Internal to the upstream pool (upstream/pool/pool.c) and its HTTP/1.1 client (upstream/pool/http_conn.c):
 * the objects both halves work on and the functions each calls in the other. Nothing outside
 * upstream/ includes this; the contract is upstream/pool/pool.h. */
#ifndef TG_UPSTREAM_POOL_INTERNAL_H
#define TG_UPSTREAM_POOL_INTERNAL_H

#include <llhttp.h>
#include <uv.h>

#include "core/base/buf.h"
#include "core/wire/tls.h"
#include "upstream/pool/pool.h"

enum upconn_state {
    UC_RESOLVING,  /* waiting for uv_getaddrinfo; req may be attached */
    UC_CONNECTING, /* uv_tcp_connect in progress; connect timer armed */
    UC_HANDSHAKE,  /* https://: TCP connected, TLS handshake running; connect timer still armed */
    UC_IDLE,       /* in up->idle; idle timer armed; no req */
    UC_BUSY,       /* req attached; request written, response being read */
    UC_CLOSING,    /* uv_close requested */
};

/* One TCP connection to an upstream. Owner: its upstream (on u->idle or u->busy, counted in
 * u->open_conns). tg__upconn_close() closes both handles; the last close callback frees it. */
struct tg_upconn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_req;
    uv_getaddrinfo_t gai;
    struct tg_upstream *up;
    struct tg_list link; /* up->idle or up->busy */
    enum upconn_state state;
    int dedicated;
    int reused; /* completed at least one exchange: a stale keep-alive close is possible */
    uint64_t idle_since; /* loop time it last went idle (the lazy idle timer checks it) */
    int resolving;
    int handles;
    llhttp_t parser;
    struct tg_tls *tls;   /* https://: the record layer, from TCP connect until the free */
    struct tg_conf *tls_conf; /* reference: tls uses its conf's tls_ctx, which a reload may drop */
    struct tg_buf plain;  /* https://: one read's decrypted bytes, on their way to the parser */
    struct tg_upreq *req; /* the request whose answer is read now: the first of reqs, or NULL */
    /* Requests on this connection in the order they were (or will be) written: the answers come
     * back in that order (HTTP/1.1 pipelining, upstreams[].pool.pipeline). Without pipelining
     * there is at most one. */
    struct tg_list reqs;
    int nreqs;
    int norphans;       /* of reqs, those whose owner let go: their answers are read and dropped */
    int nunsent;        /* of reqs, those not written yet: they go out together before the loop polls */
    int stream_head;    /* the answer being read is an event stream: no request joins behind it */
    uv_prepare_t flush; /* pipelining: writes the unsent requests, once per loop iteration */
    struct tg_list corked; /* pipelining: in up->corked while requests wait to be written */
    char hname[32];
    size_t hname_len;
    int hkind; /* 1 content-type, 2 mcp-session-id, 3 cache-control, 4 location (kept on request), 0 other */
    int in_value;
    int complete;
    size_t head_len; /* bytes of the response head so far (header names and values) */
    uint64_t id;
};

/* One upstream's runtime. Owner: refcounted. The server holds one reference while the
 * upstream is in its conf; each call and legacy SSE link of a session holds one. It is freed by
 * tg__upstream_maybe_free() once no reference, connection or request is left, so an upstream a
 * reload removed lives until its last call ends. It holds a reference on the conf its uc points
 * into. */
struct tg_upstream {
    uv_loop_t *loop;
    const struct tg_upstream_conf *uc;
    struct tg_conf *conf; /* reference: uc points into it */
    int refcnt;
    struct tg_metrics *metrics;
    struct sockaddr_storage addr;
    int addr_literal;
    struct tg_list idle, busy, queue;
    struct tg_list corked; /* pipelining: connections with requests not written yet this iteration */
    size_t npooled, nidle, nqueued, ndedicated;
    int closing;
    size_t open_conns;
    size_t open_reqs; /* requests not yet released: the upstream is freed only when both are 0 */
    uint64_t next_conn_id;
    int last_connect_failed;
    /* Backoff (upstreams[].backoff_ms): failures to reach it in a row, the pause now in force and
     * the loop time it ends; while it lasts, requests that need a new connection fail at once. */
    int fails;
    int trial; /* the pause ended and one request's connection is the trial */
    int backoff_cur_ms;
    uint64_t down_until;
    /* The era it speaks (upstream/probe.c): TG_UP_ERA_*, probed once and cached; the discover
     * result (JSON text, owned) when it speaks 2026-07-28. */
    int era;
    int probing;
    uint64_t probe_after;
    void (*on_verdict)(void *arg);
    void *verdict_arg; /* loop time before which a failed probe is not tried again */
    char *discover;
    struct tg_child *warm[64]; /* stdio: children started ahead of need */
    struct tg_child_tally *children; /* stdio: live children (upstreams[].max_children), reference */
    int nwarm;
    uint64_t evictions[2]; /* stdio: children taken from idle sessions, by TG_EVICT_* */
    char scratch[65536];
};

/* One HTTP request and its response. Owner: the caller of tg_upreq_start(), until on_done or
 * tg_upreq_cancel(); then the timer's close callback frees it (counted in u->open_reqs). */
struct tg_upreq {
    struct tg_upstream *up;
    struct tg_upconn *conn;
    const struct tg_upreq_cbs *cbs;
    void *ud;
    struct tg_buf out;
    uv_timer_t timer;
    struct tg_list qlink;
    struct tg_list clink; /* in conn->reqs */
    int queued;
    int orphan; /* done, but its answer must still be read off a pipelined connection: conn frees it */
    int dedicated;
    int done;
    int retried;
    int got_bytes;
    int paused;
    int pending_err;
    int sent; /* bytes of the request may have reached the upstream */
    int status;
    uint64_t timeout_ms;
    uint64_t touched_ms; /* loop time of the last sign of life (tg_upreq_touch): the timer checks it */
    uint64_t start_ns;
    char ctype[128];
    size_t ctype_len;
    char sid[256];
    size_t sid_len;
    char why[128]; /* the failure in words (tg_upreq_error), or "" */
    struct tg_upreq_meta *meta; /* tg_upreq_keep_meta(): Cache-Control and Location, else NULL */
};

/* Response headers only a fetch (upstream/fetch.c) reads, kept on request. Owner: its request;
 * freed with it. */
struct tg_upreq_meta {
    char cc[256];
    size_t cc_len;
    char loc[1024];
    size_t loc_len;
};

/* upstream/pool/pipeline.c: the requests of one connection, in order. */
/* r joins c's requests (written now without pipelining, else before the loop polls). */
void tg__upconn_push(struct tg_upconn *c, struct tg_upreq *r);
/* The answer to c->req is whole (or c->req was taken off): the next request's answer is read. */
void tg__upconn_advance(struct tg_upconn *c);
/* r leaves c without its answer read: never written (taken out), the last on c (c closed) or
 * one of several (orphaned: its answer is read and dropped). */
void tg__upconn_drop(struct tg_upconn *c, struct tg_upreq *r);
/* What a closing connection's requests may do besides ending with an error. */
enum tg_retry {
    TG_RETRY_NONE,   /* nothing: each ends with the error (the connection was never made) */
    TG_RETRY_UNSENT, /* those never written are tried again elsewhere, once */
    TG_RETRY_STALE,  /* those too that were written and got nothing (a kept-alive connection the
                      * server had closed while idle), once */
    TG_RETRY_CLOSED, /* the server ended the connection after an answer: those behind it were not
                      * processed (RFC 9112 §9.6) and are tried again, however often */
};
/* c is closing: each request still on it ends with err (from the loop if later) or, as retry
 * allows, is tried again elsewhere. */
void tg__upconn_fail_all(struct tg_upconn *c, int err, enum tg_retry retry, int later);
/* The pooled connection a new request should join (pipelining), or NULL: with busy 0, the one
 * this iteration's requests gather on; with busy 1 (the pool is full), the least loaded. */
struct tg_upconn *tg__upstream_pipeline_pick(struct tg_upstream *u, int busy);
/* Free an orphan the connection owned. */
void tg__upreq_release(struct tg_upreq *r);
/* Write c's unsent requests now. Returns 0 or a libuv error (c is then closed). */
int tg__upconn_flush(struct tg_upconn *c);
/* Bytes to c's socket (upstream/pool/http_conn.c). */
int tg__upconn_write(struct tg_upconn *c, const uv_buf_t *bufs, unsigned n);
/* The parser made ready for c->req's answer. */
void tg__upconn_begin_answer(struct tg_upconn *c);

/* upstream/pool/http_conn.c: one connection, its requests written and answers read. */
/* Fill r->out with the request: request line (target, or the URL's path if NULL), Host, the
 * upstream's configured headers (but those extra_headers sets too), extra_headers, and the body
 * with its Content-Length if any. */
void tg__upreq_format(struct tg_upreq *r, const char *method, const char *target, const char *extra_headers,
                      const char *body, size_t len);
/* A new connection (resolved, then connected), carrying r (or NULL) once connected. */
void tg__upconn_new(struct tg_upstream *u, struct tg_upreq *r, int dedicated);
/* Idempotent; a request still on c gets on_done(TG_ECLOSED) (tg__upconn_fail_all). */
void tg__upconn_close(struct tg_upconn *c);
/* The same, with tg__upconn_fail_all's err, retry and later (tg__upconn_close: TG_ECLOSED,
 * TG_RETRY_UNSENT, at once). */
void tg__upconn_close_with(struct tg_upconn *c, int err, enum tg_retry retry, int later);
/* Read the connection (a response, or an idle connection's close). */
void tg__upconn_read_start(struct tg_upconn *c);

/* upstream/pool/pool.c: the pool, the queue and the life of a request. */
/* A response ended on a reusable connection: back to the idle list, or closed. */
void tg__upconn_to_idle(struct tg_upconn *c);
/* Put r on an idle connection, a new one or the queue. */
void tg__upreq_acquire(struct tg_upreq *r);
/* on_done(err) now, then release r; nothing if r is done already. */
void tg__upreq_finish(struct tg_upreq *r, int err);
/* The same, with on_done from the loop (for failures found inside a call from the owner). */
void tg__upreq_finish_later(struct tg_upreq *r, int err);
/* Hand queued requests the connections the pool has room for. */
void tg__upstream_serve_queue(struct tg_upstream *u);
/* A new connection failed before carrying anything (connect, TLS, resolution), or one worked. */
void tg__upstream_reach_failed(struct tg_upstream *u);
void tg__upstream_reached(struct tg_upstream *u);
/* Free u once no reference, connection or request is left. */
void tg__upstream_maybe_free(struct tg_upstream *u);

#endif
