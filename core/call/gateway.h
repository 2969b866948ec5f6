/* The state the gateway's modules share: one loop, the current conf, listeners, sessions,
 * upstreams, and the lists of calls, approvals, channels and streams.
 *
 * struct tg_server is the context passed explicitly everywhere instead of global state. Data
 * only: core/app/server.c fills it and runs it (start, reload, drain); the modules above the base
 * read and change their part of it. Owner: main(), for the life of the process. It owns the
 * listeners, every client connection (through http.conns), the session table and the upstream
 * runtimes. */
#ifndef TG_GATEWAY_H
#define TG_GATEWAY_H

#include <uv.h>

#include "core/base/buf.h"
#include "core/conf/conf.h"
#include "core/mcp/mrtr.h"
#include "core/base/metrics.h"
#include "core/call/shared.h"
#include "transports/http1/http1.h"

struct tg_tls_ctx;
struct tg_mcp_schemas;
struct tg_counters;
struct tg_cluster;
struct tg_audit;
struct tg_session_table;
struct tg_upstream;
struct tg_conn;
struct tg_upstream_ops;

/* A listening socket. Owner: the server (listeners[] and admin), freed in tg_server_dispose. */
struct tg_listener {
    uv_tcp_t tcp;
    struct tg_server *server;
    struct tg_http_listener http; /* what its connections see as conn->listener: lc, tls, is_admin, port */
    int closed;
};

/* The gateway's state. Owner: main(), which allocates it, runs tg_server_init() and, after the
 * loop, tg_server_dispose() (which frees what it holds), then frees it. */
/* The end of an asynchronous reload (tg_server.reload_start). */
typedef void (*tg_reload_done_cb)(void *ud, int ok, const struct tg_buf *err);
struct tg_reload_job;
struct tg_reload_waiter;

struct tg_server {
    uv_loop_t *loop;
    struct tg_conf *conf;
    struct tg_listener *listeners;
    size_t nlisteners;
    struct tg_listener admin;
    int admin_open;
    /* The client connections' environment: their lists (http.conns, http.corked,
     * http.conn_pending), count and ids; it points at conf->limits, metrics and draining. */
    struct tg_http_env http;
    uv_check_t flush_check; /* writes it after each round of I/O */
    uv_prepare_t flush_prepare; /* and before polling (what timers wrote) */
    uv_idle_t pending_idle;     /* active while work waits for the next round: poll must not block */
    int flush_ready;            /* the three initialized */
    uint64_t iter_start_ns; /* when poll last returned (set in the check phase, cleared at prepare) */
    uint64_t stall_logged_ns;
    uint64_t next_gid; /* gateway JSON-RPC ids sent upstream */
    struct tg_session_table *sessions;
    struct tg_upstream **upstreams; /* one per conf->upstreams[i] */
    size_t nupstreams;
    struct tg_metrics metrics;
    struct tg_counters *counters; /* outlives confs: a reload keeps every counter */
    /* The shared store (core/call/shared.h) every floor below the app goes through: the local
     * one, or a cluster's. The app installs it; only the app reads cluster. */
    struct tg_shared store;
    struct tg_cluster *cluster;   /* the app's: the cluster group, or NULL (made at start) */
    struct tg_audit *audit;
    struct tg_list approvals;     /* parked calls, oldest first */
    struct tg_list channels;      /* legacy SSE and WebSocket client sessions */
    struct tg_list awaiting;      /* calls waiting for an answer on a message-stream upstream */
    struct tg_list dead_calls;    /* closed calls whose memory goes at the end of the iteration */
    struct tg_list streams;       /* resumable client SSE streams (keepalive, expiry) */
    struct tg_list listens;       /* 2026 subscriptions/listen client streams (keepalive) */
    struct tg_list shims;         /* 2025 calls waiting for their client's input (core/bridge/input.c) */
    uint64_t next_stream_id;
    size_t napprovals;
    uint64_t reloads, reload_failures;
    struct tg_conf *listener_conf; /* the conf the listeners were made from (listeners need a restart to change) */
    uv_signal_t sigterm, sigint, sighup, sigusr1;
    uv_timer_t sweep;
    uv_timer_t drain_timer;
    /* The sessions stateless (2026-07-28) requests use: one per grant and upstream, found by the
     * session's own grant and upstream; each slot holds a session reference (core/gate/dispatch.c;
     * dropped by tg_bridge_dispose); a slot whose session ended is reused. */
    struct tg_session **stateless;
    size_t nstateless;
    struct tg_list bridge_pending;
    struct tg_mcp_mrtr mrtr;
    struct tg_mcp_schemas *schemas; /* annotated tools' input schemas, per upstream (core/mcp/schemas.h) */      /* MRTR envelopes: the key and the ones issued, not used yet */ /* stateless sessions whose waiting requests run next round */
    int draining;
    uint64_t drain_deadline;
    uint64_t accept_warned_ms;
    /* The operations of an upstream's kind, chosen by the app (upstream/kinds.c: by transport; a
     * unit test puts a fake kind here). */
    const struct tg_upstream_ops *(*upstream_ops)(const struct tg_upstream_conf *uc);
    /* Load the configuration file again (core/app/server.c): the admin API's reload. done runs from
     * the loop, never inside this call, once the new conf is in force (ok 1) or refused (ok 0,
     * err says why). */
    void (*reload_start)(struct tg_server *srv, tg_reload_done_cb done, void *ud);
    struct tg_reload_job *reload_job; /* the reload reading the conf in a worker, or NULL */
    struct tg_reload_waiter *reload_next; /* asked for while one ran: served by a fresh read */
};

#endif
