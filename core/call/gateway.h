/* The state the gateway's floors below the app share: one loop, the current conf, sessions,
 * upstreams, the shared store, and the lists of calls, approvals, channels and streams.
 *
 * struct tg_server is the context passed explicitly everywhere instead of global state. Data
 * only: the app (core/app/server.c) fills it and runs it (start, reload, drain); the modules
 * below read and change their part of it. It is the first member of the app's own struct
 * (struct tg_app, core/app/server.h), which holds what only the process knows: listeners, client
 * connections, signals, timers, the reload in progress and the cluster. */
#ifndef TG_GATEWAY_H
#define TG_GATEWAY_H

#include <uv.h>

#include "core/base/buf.h"
#include "core/conf/conf.h"
#include "core/mcp/mrtr.h"
#include "core/base/metrics.h"
#include "core/call/shared.h"

#define TG_APPROVALS_DECIDED 16 /* decided calls the approvals page keeps showing */

struct tg_mcp_schemas;
struct tg_pins_seen;
struct tg_counters;
struct tg_audit;
struct tg_session_table;
struct tg_upstream;
struct tg_upstream_ops;
struct tg_tx_cache;
struct tg_cred_ended;
struct tg_webhook;

/* The end of an asynchronous reload (tg_server.reload_start). */
typedef void (*tg_reload_done_cb)(void *ud, int ok, const struct tg_buf *err);

struct tg_server {
    uv_loop_t *loop;
    struct tg_conf *conf;
    uint64_t next_gid; /* gateway JSON-RPC ids sent upstream */
    struct tg_session_table *sessions;
    struct tg_upstream **upstreams; /* one per conf->upstreams[i] */
    size_t nupstreams;
    struct tg_metrics metrics;
    struct tg_counters *counters; /* outlives confs: a reload keeps every counter */
    struct tg_dpop_replay *dpop_replay; /* DPoP proofs seen (policy/dpop.h); made by the first proof,
                                         * outlives confs so a reload cannot reopen a replay */
    /* The shared store (core/call/shared.h) every floor below the app goes through: the local
     * one, or a cluster's. The app installs it. */
    struct tg_shared store;
    struct tg_audit *audit;
    struct tg_list approvals;     /* parked calls, oldest first */
    struct tg_list approvals_decided; /* retry records decided, waiting for their call again */
    struct tg_list tasks;         /* tasks made or relayed, bound to their callers (core/call/tasks.h) */
    size_t ntasks;
    struct tg_list channels;      /* legacy SSE and WebSocket client sessions */
    struct tg_list awaiting;      /* calls waiting for an answer on a message-stream upstream */
    struct tg_list dead_calls;    /* closed calls whose memory goes at the end of the iteration */
    struct tg_list streams;       /* resumable client SSE streams (keepalive, expiry) */
    struct tg_list listens;       /* 2026 subscriptions/listen client streams (keepalive) */
    struct tg_list shims;         /* 2025 calls waiting for their client's input (core/bridge/input.c) */
    struct tg_list cred_watches;  /* long-lived client streams' credentials (transports/cred_watch.c) */
    struct tg_cred_ended *cred_ended; /* legacy SSE sessions a credential ended, remembered: owned, or NULL */
    uint64_t next_stream_id;
    size_t napprovals;
    size_t approvals_bytes;       /* what the parked calls hold (limits.approvals_bytes) */
    struct tg_webhook *webhook;   /* approval events for approvals.webhook (core/call/webhook.h) */
    int admin_port;               /* the admin listener's port as bound (approval URLs), or 0 */
    /* The last calls a human decided, as the approvals page shows them (core/call/approvals.c):
     * a ring, decided[ndecided % TG_APPROVALS_DECIDED] next. */
    struct tg_approval_done {
        char id[33], decision[9], digest[65];
        char by[160], tool[192], grant[96], subject[192], upstream[96];
        uint64_t policy, parked_at_ms, decided_at_ms;
    } decided[TG_APPROVALS_DECIDED];
    unsigned ndecided;
    uint64_t reloads, reload_failures;
    /* The sessions stateless (2026-07-28) requests use: one per grant and upstream, found by the
     * session's own grant and upstream; each slot holds a session reference (core/gate/stateless.c;
     * dropped by tg_bridge_dispose); a slot whose session ended is reused. */
    struct tg_session **stateless;
    size_t nstateless;
    struct tg_list bridge_pending; /* stateless sessions whose waiting requests run next round */
    struct tg_mcp_mrtr mrtr;       /* MRTR envelopes: the key and the ones issued, not used yet */
    struct tg_mcp_schemas *schemas; /* annotated tools' input schemas, per upstream (core/mcp/schemas.h) */
    struct tg_pins_seen *pins_seen; /* pinned tools' definitions as listed, per upstream (policy/pins.h);
                                     * made when the first conf with pins is applied, NULL before */
    int draining;
    struct tg_tx_cache *token_cache; /* exchanged upstream tokens (upstream/token_exchange.h), made at
                                      * first use; freed at dispose */
    /* The operations of an upstream's kind, chosen by the app (upstream/kinds.c: by transport; a
     * unit test puts a fake kind here). */
    const struct tg_upstream_ops *(*upstream_ops)(const struct tg_upstream_conf *uc);
    /* Load the configuration file again (core/app/server.c): the admin API's reload. done runs from
     * the loop, never inside this call, once the new conf is in force (ok 1) or refused (ok 0,
     * err says why). */
    void (*reload_start)(struct tg_server *srv, tg_reload_done_cb done, void *ud);
};

#endif
