/* The process (core/app/server.c): starting the listeners and the loop's hooks, reloading the
 * configuration (a removed upstream lives until its calls end), draining and shutting down.
 * struct tg_app is the app's own state around the struct tg_server the floors below share
 * (core/call/gateway.h). */
#ifndef TG_SERVER_H
#define TG_SERVER_H

#include "core/base/buf.h"
#include "core/call/gateway.h"
#include "transports/http1/http1.h"

struct tg_cluster;
struct tg_reload_job;
struct tg_reload_waiter;

/* A listening socket. Owner: the server (listeners[] and admin), freed in tg_server_dispose. */
struct tg_listener {
    uv_tcp_t tcp;
    struct tg_server *server;
    struct tg_http_listener http; /* what its connections see as conn->listener: lc, tls, is_admin, port */
    int closed;
};

/* The process. Owner: main(), which allocates it, runs tg_server_init() and, after the loop,
 * tg_server_dispose() (which frees what it holds), then frees it. */
struct tg_app {
    struct tg_server srv; /* first: what the floors below share; tg_app_of() finds the app */
    struct tg_listener *listeners;
    size_t nlisteners;
    struct tg_listener admin;
    int admin_open;
    /* The client connections' environment: their lists (http.conns, http.corked,
     * http.conn_pending), count and ids; it points at conf->limits, metrics and draining. */
    struct tg_http_env http;
    uv_check_t flush_check;     /* writes it after each round of I/O */
    uv_prepare_t flush_prepare; /* and before polling (what timers wrote) */
    uv_idle_t pending_idle;     /* active while work waits for the next round: poll must not block */
    int flush_ready;            /* the three initialized */
    uint64_t iter_start_ns;     /* when poll last returned (set in the check phase, cleared at prepare) */
    uint64_t stall_logged_ns;
    struct tg_cluster *cluster;    /* the cluster group, or NULL (made at start); only the app knows it */
    struct tg_keys *keys;          /* fetched JWT issuer keys (core/app/keys.h) */
    struct tg_conf *listener_conf; /* the conf the listeners were made from (listeners need a restart to change) */
    uv_signal_t sigterm, sigint, sighup, sigusr1;
    uv_timer_t sweep;
    uv_timer_t drain_timer;
    uint64_t drain_deadline;
    uint64_t accept_warned_ms;
    struct tg_reload_job *reload_job;     /* the reload reading the conf in a worker, or NULL */
    struct tg_reload_waiter *reload_next; /* asked for while one ran: served by a fresh read */
};

/* The app around a server (every struct tg_server the app runs is a struct tg_app's). */
static inline struct tg_app *tg_app_of(struct tg_server *srv) { return tg_container_of(srv, struct tg_app, srv); }


int tg_server_init(struct tg_app *app, uv_loop_t *loop, struct tg_conf *conf);
int tg_server_start(struct tg_app *app);
/* Stop accepting, let in-flight work finish (up to drain_timeout_ms), then stop the loop. */
void tg_server_drain(struct tg_server *srv);
void tg_server_dispose(struct tg_app *app);
/* Load the configuration file again and swap it in; on error keep the old one and say why. The
 * files are read off the loop (policies, JWKS, CA bundles and certificates are read and parsed in
 * libuv's thread pool), then swapped in on the loop; done (may be NULL) runs from the loop
 * afterwards. Reloads asked for while one runs are served by one more read. */
void tg_server_reload_start(struct tg_server *srv, tg_reload_done_cb done, void *ud);

#endif
