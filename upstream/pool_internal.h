/* Internal to the upstream pool (upstream/pool.c) and its HTTP/1.1 client (upstream/http_client.c):
 * the objects both halves work on and the functions each calls in the other. Nothing outside
 * upstream/ includes this; the contract is upstream/pool.h. */
#ifndef TG_UPSTREAM_POOL_INTERNAL_H
#define TG_UPSTREAM_POOL_INTERNAL_H

#include <llhttp.h>
#include <uv.h>

#include "core/buf.h"
#include "upstream/pool.h"

enum upconn_state {
    UC_RESOLVING,  /* waiting for uv_getaddrinfo; req may be attached */
    UC_CONNECTING, /* uv_tcp_connect in progress; connect timer armed */
    UC_IDLE,       /* in up->idle; idle timer armed; no req */
    UC_BUSY,       /* req attached; request written, response being read */
    UC_CLOSING,    /* uv_close requested */
};

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
    int resolving;
    int handles;
    llhttp_t parser;
    struct tg_upreq *req;
    char hname[32];
    size_t hname_len;
    int hkind; /* 1 content-type, 2 mcp-session-id, 0 other */
    int in_value;
    int complete;
    uint64_t id;
};

/* One upstream's runtime. Owner: refcounted. The server holds one reference while the
 * upstream is in its conf; each call and legacy SSE link of a session holds one. It is freed by
 * maybe_free() once no reference, connection or request is left, so an upstream a reload
 * removed lives until its last call ends. It holds a reference on the conf its uc points into. */
struct tg_upstream {
    uv_loop_t *loop;
    const struct tg_upstream_conf *uc;
    struct tg_conf *conf; /* reference: uc points into it */
    int refcnt;
    struct tg_metrics *metrics;
    struct sockaddr_storage addr;
    int addr_literal;
    struct tg_list idle, busy, queue;
    size_t npooled, nidle, nqueued, ndedicated;
    int closing;
    size_t open_conns;
    size_t open_reqs; /* requests not yet released: the upstream is freed only when both are 0 */
    uint64_t next_conn_id;
    int last_connect_failed;
    struct tg_child *warm[64]; /* stdio: children started ahead of need */
    int nwarm;
    char scratch[65536];
};

struct tg_upreq {
    struct tg_upstream *up;
    struct tg_upconn *conn;
    const struct tg_upreq_cbs *cbs;
    void *ud;
    struct tg_buf out;
    uv_timer_t timer;
    struct tg_list qlink;
    int queued;
    int dedicated;
    int done;
    int retried;
    int got_bytes;
    int paused;
    int pending_err;
    int sent; /* bytes of the request may have reached the upstream */
    int status;
    uint64_t timeout_ms;
    uint64_t start_ns;
    char ctype[128];
    size_t ctype_len;
    char sid[256];
    size_t sid_len;
};

/* upstream/http_client.c: one connection, one request at a time on it. */
void conn_new(struct tg_upstream *u, struct tg_upreq *r, int dedicated);
void conn_send(struct tg_upconn *c);
void conn_close(struct tg_upconn *c);
void on_conn_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
void on_conn_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);

/* upstream/pool.c: the pool, the queue and the life of a request. */
void conn_to_idle(struct tg_upconn *c);
void acquire(struct tg_upreq *r);
void finish(struct tg_upreq *r, int err);
void finish_later(struct tg_upreq *r, int err);
void serve_queue(struct tg_upstream *u);
void maybe_free(struct tg_upstream *u);

#endif
