#include "core/app/server.h"
#include "core/app/keys.h"

#include "cluster/cluster.h"
#include "cluster/redis/redis.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/approvals.h"
#include "core/base/slab.h"
#include "core/call/audit.h"
#include "core/call/call.h"
#include "core/call/webhook.h"
#include "core/gate/dispatch.h"
#include "core/base/log.h"
#include "core/base/sha256.h"
#include "core/bridge/stateless.h"
#include "core/mcp/schemas.h"
#include "policy/pins.h"
#include "core/app/admin.h"
#include "core/call/roots.h"
#include "core/app/route.h"
#include "core/call/session.h"
#include "core/call/tasks.h"
#include "transports/channel.h"
#include "transports/cred_watch.h"
#include "transports/http1/http1.h"
#include "core/wire/tls.h"
#include "policy/dpop.h"
#include "policy/policy.h"
#include "upstream/token_exchange.h"
#include "upstream/pool/pool.h"
#include "upstream/upstream.h"

static void on_connection(uv_stream_t *h, int status)
{
    struct tg_listener *l = h->data;
    if (status < 0) {
        /* EMFILE: libuv accepts and drops the waiting connection with its reserved descriptor,
         * so the loop does not spin; say so once a second, not once per client. */
        struct tg_server *srv = l->server;
        struct tg_app *app = tg_app_of(srv);
        srv->metrics.conns_rejected++;
        uint64_t now = uv_now(srv->loop);
        if (now - app->accept_warned_ms >= 1000 || app->accept_warned_ms == 0) {
            app->accept_warned_ms = now;
            tg_log(TG_LOG_WARN, "accept failed", "error=\"%s\" rejected_total=%llu", uv_strerror(status),
                   (unsigned long long)srv->metrics.conns_rejected);
        }
        return;
    }
    tg_http1_accept(&tg_app_of(l->server)->http, &l->http, h);
}

static int bind_listener(struct tg_server *srv, struct tg_listener *l, const char *address, int port)
{
    struct sockaddr_storage ss;
    if (uv_ip4_addr(address, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(address, port, (struct sockaddr_in6 *)&ss) != 0) {
        tg_log(TG_LOG_ERROR, "listen address is not an IP literal", "address=%s", address);
        return TG_EINVAL;
    }
    uv_tcp_init(srv->loop, &l->tcp);
    l->tcp.data = l;
    l->server = srv;
    int r = uv_tcp_bind(&l->tcp, (struct sockaddr *)&ss, 0);
    if (r == 0)
        r = uv_listen((uv_stream_t *)&l->tcp, 1024, on_connection);
    if (r != 0) {
        tg_log(TG_LOG_ERROR, "cannot listen", "address=%s port=%d error=\"%s\"", address, port, uv_strerror(r));
        return r;
    }
    struct sockaddr_storage bound;
    int len = sizeof(bound);
    uv_tcp_getsockname(&l->tcp, (struct sockaddr *)&bound, &len);
    l->http.port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                               : ((struct sockaddr_in6 *)&bound)->sin6_port);
    return 0;
}

/* A complete request on a client connection: the admin listener's go to the admin API. */
static void on_http_request(struct tg_http_env *env, struct tg_conn *c)
{
    struct tg_server *srv = env->ud;
    if (c->listener->is_admin)
        tg_admin_handle(srv, c);
    else
        tg_route_handle(srv, c);
}

static void on_pending_idle(uv_idle_t *h) { (void)h; }

/* After each round of I/O, and before polling: closing connections tell their users and
 * pipelined input is parsed (with no handler on the stack), closed calls are released, and
 * what streams gathered is written (see tg__http_send_owned in transports/http1/out.c). Each round takes
 * what was queued before it; what it queues waits for the next round, and an idle handle keeps
 * the loop from blocking in between, so one client pipelining requests cannot hold the loop. */
static void flush_all(struct tg_server *srv)
{
    struct tg_app *app = tg_app_of(srv);
    tg_http_run_pending(&app->http);
    int more = tg_route_run_pending(srv);
    if (app->cluster != NULL)
        tg_redis_flush(tg_cluster_redis(app->cluster)); /* this iteration's decisions go to Redis now */
    tg_http_flush_corked(&app->http);
    if (more || !tg_list_empty(&app->http.conn_pending) || !tg_list_empty(&srv->dead_calls))
        uv_idle_start(&app->pending_idle, on_pending_idle);
    else
        uv_idle_stop(&app->pending_idle);
}

static void on_flush(uv_check_t *h)
{
    struct tg_server *srv = h->data;
    struct tg_app *app = tg_app_of(srv);
    /* libuv set the loop's clock when poll returned (a coarse clock, a few ms at worst): the
     * iteration's work is counted from there. */
    app->iter_start_ns = uv_now(srv->loop) * 1000000ULL;
    flush_all(srv);
}

/* Once per iteration, just before polling: the time since poll last returned (the I/O callbacks,
 * closes, timers, this flush) is what the iteration kept every other client waiting. */
static void note_iteration(struct tg_server *srv)
{
    struct tg_app *app = tg_app_of(srv);
    uint64_t now = uv_hrtime();
    if (app->iter_start_ns != 0) {
        uint64_t busy = now > app->iter_start_ns ? now - app->iter_start_ns : 0;
        srv->metrics.loop_iterations++;
        if (busy > srv->metrics.loop_busy_max_ns)
            srv->metrics.loop_busy_max_ns = busy;
        if (busy >= 100000000ULL) {
            srv->metrics.loop_stalls++;
            if (now - app->stall_logged_ns > 10000000000ULL) { /* at most one line per 10 s */
                app->stall_logged_ns = now;
                tg_log(TG_LOG_WARN, "event loop stalled", "busy_ms=%llu stalls=%llu",
                       (unsigned long long)(busy / 1000000), (unsigned long long)srv->metrics.loop_stalls);
            }
        }
    }
    app->iter_start_ns = 0; /* the next one starts when poll returns */
}

static void on_flush_prepare(uv_prepare_t *h)
{
    flush_all(h->data);
    note_iteration(h->data);
}

static void on_sweep(uv_timer_t *t)
{
    struct tg_server *srv = t->data;
    static unsigned ticks;
    tg_route_tick(srv, ++ticks % 10 == 0);
}

static void on_verdict(void *arg) { tg_bridge_wake(arg); }

/* Ask the upstream which era it speaks (once: the verdict is cached), and wake the stateless
 * requests waiting for it when it comes. */
static void watch_era(struct tg_server *srv, struct tg_upstream *u)
{
    tg_upstream_on_verdict(u, on_verdict, srv);
    tg_upstream_probe(u);
}

/* A member's client deleted a shared session: the copy here ends too. */
static void on_session_ended(void *ud, const char *id)
{
    struct tg_server *srv = ud;
    struct tg_session *s = tg_session_find(srv->sessions, tg_slice_cstr(id));
    if (s != NULL && s->shared) {
        tg_log(TG_LOG_DEBUG, "shared session ended by another instance", "session=%s", s->id_str);
        tg_dispatch_end_session(srv, s, TG_END_ELSEWHERE);
    }
}

int tg_server_init(struct tg_app *app, uv_loop_t *loop, struct tg_conf *conf)
{
    struct tg_server *srv = &app->srv;
    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->conf = tg_conf_ref(conf);
    app->listener_conf = tg_conf_ref(conf);
    tg_http_env_init(&app->http, loop, &conf->limits, &srv->metrics, &srv->draining);
    app->http.access_log = conf->log_access;
    app->http.on_request = on_http_request;
    app->http.ud = srv;
    srv->reload_start = tg_server_reload_start;
    srv->upstream_ops = tg_upstream_kind_for; /* the kinds this gateway has (upstream/kinds.c) */
    tg_list_init(&srv->dead_calls);
    tg_list_init(&srv->approvals);
    tg_list_init(&srv->approvals_decided);
    tg_list_init(&srv->tasks);
    tg_list_init(&srv->channels);
    tg_list_init(&srv->awaiting);
    tg_list_init(&srv->streams);
    tg_list_init(&srv->listens);
    tg_list_init(&srv->cred_watches);
    tg_list_init(&srv->shims);
    srv->counters = tg_counters_new();
    tg_counters_history_limits(srv->counters, (size_t)conf->limits.history_calls, (size_t)conf->limits.history_bytes);
    tg_mcp_mrtr_init(&srv->mrtr, 10000);
    srv->schemas = tg_mcp_schemas_new();
    srv->pins_seen = conf->has_pins ? tg_pins_seen_new() : NULL; /* NULL: no conf had pins yet */
    /* What can fail comes first (TLS keys, the audit log), before anything that would need
     * the loop to close it: a failed init leaves only memory, which tg_server_dispose frees. */
    app->nlisteners = conf->nlisteners;
    app->listeners = tg_xcalloc(conf->nlisteners, sizeof(*app->listeners));
    for (size_t i = 0; i < conf->nlisteners; i++) {
        struct tg_listener *l = &app->listeners[i];
        l->http.lc = &conf->listeners[i];
        l->server = srv;
        if (l->http.lc->tls) {
            char err[256];
            struct tg_tls_server_opts o = {l->http.lc->cert, l->http.lc->key, l->http.lc->client_ca,
                                           l->http.lc->client_auth, l->http.lc->session_timeout_s};
            if (tg_tls_ctx_new(&o, &l->http.tls, err, sizeof(err)) != 0) {
                tg_log(TG_LOG_ERROR, "TLS setup failed", "listener=%zu error=\"%s\"", i, err);
                return TG_EINVAL;
            }
        }
    }
    if (conf->audit.file != NULL) {
        struct tg_buf err;
        tg_buf_init(&err);
        srv->audit = tg_audit_open(loop, &conf->audit, &err);
        if (srv->audit == NULL) {
            tg_log(TG_LOG_ERROR, "cannot open the audit log", "file=%s", conf->audit.file);
            tg_buf_dispose(&err);
            return TG_EINVAL;
        }
        tg_buf_dispose(&err);
        tg_audit_set_conf(srv->audit, conf); /* the chain's first checkpoint */
    }
    srv->sessions = tg_session_table_new();
    app->keys = tg_keys_new(srv, tg_route_handle);
    tg_keys_attach(app->keys, conf); /* fetched when the server starts (never for `tollgate -t`) */
    /* The shared store: the server's own, or a cluster's (which falls back to the server's own). */
    tg_shared_local(&srv->store, srv);
    if (conf->cluster.enabled) {
        char why[200];
        app->cluster = tg_cluster_new(loop, &conf->cluster, &srv->store, why, sizeof(why));
        if (app->cluster == NULL) {
            tg_log(TG_LOG_ERROR, "cluster setup failed", "redis=%s error=\"%s\"", conf->cluster.redis, why);
            return TG_EINVAL;
        }
        /* Every member seals session ids and 2026 envelopes with keys from the same secret, so
         * any member can check what another made. */
        tg_session_table_seal(srv->sessions, conf->cluster.secret);
        tg_hmac_labelled(conf->cluster.secret, "tollgate mrtr envelope", NULL, 0, srv->mrtr.key);
        srv->mrtr.shared = 1;
        tg_cluster_store(app->cluster, &srv->store);
        tg_cluster_history_calls(app->cluster, (size_t)conf->limits.history_calls);
        tg_cluster_sessions_watch(app->cluster, on_session_ended, srv);
        tg_log(TG_LOG_INFO, "cluster", "redis=%s instance=%s on_unavailable=%s", conf->cluster.redis,
               conf->cluster.instance, conf->cluster.on_unavailable == TG_CLUSTER_LOCAL ? "local" : "deny");
    }
    srv->nupstreams = conf->nupstreams;
    srv->upstreams = tg_xcalloc(conf->nupstreams, sizeof(*srv->upstreams));
    for (size_t i = 0; i < conf->nupstreams; i++) {
        srv->upstreams[i] = tg_upstream_new(loop, conf, &conf->upstreams[i], &srv->metrics);
        watch_era(srv, srv->upstreams[i]);
    }
    uv_timer_init(loop, &app->sweep);
    app->sweep.data = srv;
    uv_check_init(loop, &app->flush_check);
    app->flush_check.data = srv;
    uv_check_start(&app->flush_check, on_flush);
    uv_unref((uv_handle_t *)&app->flush_check); /* it must not keep the loop alive by itself */
    uv_prepare_init(loop, &app->flush_prepare);
    app->flush_prepare.data = srv;
    uv_prepare_start(&app->flush_prepare, on_flush_prepare);
    uv_unref((uv_handle_t *)&app->flush_prepare);
    uv_idle_init(loop, &app->pending_idle);
    uv_unref((uv_handle_t *)&app->pending_idle);
    app->flush_ready = 1;
    uv_timer_init(loop, &app->drain_timer);
    app->drain_timer.data = srv;
    return 0;
}

int tg_server_start(struct tg_app *app)
{
    struct tg_server *srv = &app->srv;
    for (size_t i = 0; i < app->nlisteners; i++) {
        struct tg_listener *l = &app->listeners[i];
        int r = bind_listener(srv, l, l->http.lc->address, l->http.lc->port);
        if (r != 0)
            return r;
        tg_log(TG_LOG_INFO, "listening", l->http.tls ? "address=%s port=%d tls=true" : "address=%s port=%d tls=false",
               l->http.lc->address, l->http.port);
    }
    if (srv->conf->admin.enabled) {
        app->admin.http.is_admin = 1;
        int r = bind_listener(srv, &app->admin, srv->conf->admin.address, srv->conf->admin.port);
        if (r != 0)
            return r;
        app->admin_open = 1;
        tg_log(TG_LOG_INFO, "admin listening", "address=%s port=%d", srv->conf->admin.address, app->admin.http.port);
        srv->admin_port = app->admin.http.port;
    }
    uv_timer_start(&app->sweep, on_sweep, 1000, 1000);
    tg_keys_start(app->keys);
    return 0;
}

static void close_listeners(struct tg_server *srv)
{
    struct tg_app *app = tg_app_of(srv);
    for (size_t i = 0; i < app->nlisteners; i++) {
        struct tg_listener *l = &app->listeners[i];
        if (!l->closed && l->tcp.loop != NULL && !uv_is_closing((uv_handle_t *)&l->tcp)) {
            uv_close((uv_handle_t *)&l->tcp, NULL);
            l->closed = 1;
        }
    }
    if ((app->admin_open || app->admin.tcp.loop != NULL) && !uv_is_closing((uv_handle_t *)&app->admin.tcp)) {
        uv_close((uv_handle_t *)&app->admin.tcp, NULL); /* also one whose bind failed at start */
        app->admin_open = 0;
    }
}

static int remove_session(struct tg_session *s, void *arg)
{
    (void)arg;
    return 1;
}

static void finish_drain(struct tg_server *srv)
{
    struct tg_app *app = tg_app_of(srv);
    /* Calls still running (any upstream kind) and waiting are answered, then sessions end:
     * stdio children get their stdin closed, SIGTERM, then SIGKILL. */
    tg_route_end_calls(srv); /* answered while their clients are still connected */
    tg_route_free_streams(srv);
    tg_channels_end(srv, 0);
    tg_session_sweep(srv->sessions, remove_session, NULL);
    tg_route_free_streams(srv);
    uv_timer_stop(&app->drain_timer);
    uv_timer_stop(&app->sweep);
    tg_keys_free(app->keys); /* fetches and refresh timers, which would keep the loop alive */
    app->keys = NULL;
    tg_webhook_free(srv);
    /* Close what is left: connections, upstream pools, our own handles. */
    struct tg_list *l = app->http.conns.next;
    while (l != &app->http.conns) {
        struct tg_list *next = l->next;
        tg_conn_close_now(tg_container_of(l, struct tg_conn, node), "shutdown");
        l = next;
    }
    for (size_t i = 0; i < srv->nupstreams; i++) {
        tg_upstream_close(srv->upstreams[i]);
        srv->upstreams[i] = NULL;
    }
    tg_audit_close(srv->audit);
    srv->audit = NULL;
    /* Last: the refunds of the calls ended above are written; then Redis's handles go, or they
     * would keep the loop alive. */
    tg_tx_cache_free(srv->token_cache); /* exchanges in flight end; their calls are told why */
    srv->token_cache = NULL;
    tg_cluster_free(app->cluster);
    app->cluster = NULL;
    tg_shared_local(&srv->store, srv); /* what ends later refunds to the server's own counters */
    uv_close((uv_handle_t *)&app->drain_timer, NULL);
    /* flush_check and flush_prepare stay until tg_server_dispose: the closes queued here are
     * finished by them. */
    uv_close((uv_handle_t *)&app->sweep, NULL);
    uv_close((uv_handle_t *)&app->sigterm, NULL);
    uv_close((uv_handle_t *)&app->sigint, NULL);
    uv_close((uv_handle_t *)&app->sighup, NULL);
    uv_close((uv_handle_t *)&app->sigusr1, NULL);
}

static void on_drain_tick(uv_timer_t *t)
{
    struct tg_server *srv = t->data;
    struct tg_app *app = tg_app_of(srv);
    size_t inflight = tg_call_inflight(srv);
    tg_channels_end(srv, 1); /* a channel whose calls are all answered is told now */
    if (inflight == 0 || uv_now(srv->loop) >= app->drain_deadline) {
        if (inflight)
            tg_log(TG_LOG_WARN, "drain deadline passed; closing calls in flight", "inflight=%zu", inflight);
        finish_drain(srv);
    }
}

void tg_server_drain(struct tg_server *srv)
{
    struct tg_app *app = tg_app_of(srv);
    if (srv->draining)
        return;
    srv->draining = 1;
    close_listeners(srv);
    /* Logged once the listeners are closed: the log writer thread may show it at once, and a
     * reader who connects after seeing it must be refused, not reset from the backlog. */
    tg_log(TG_LOG_INFO, "draining", "inflight=%zu timeout_ms=%d", tg_call_inflight(srv),
           srv->conf->limits.drain_timeout_ms);
    tg_route_end_streams(srv);
    /* Idle keep-alive connections can go now; busy ones close after their answer. */
    struct tg_list *l = app->http.conns.next;
    while (l != &app->http.conns) {
        struct tg_list *next = l->next;
        struct tg_conn *c = tg_container_of(l, struct tg_conn, node);
        if (c->phase == TG_CONN_IDLE || c->phase == TG_CONN_HANDSHAKE)
            tg_conn_close(c, "draining");
        l = next;
    }
    app->drain_deadline = uv_now(srv->loop) + (uint64_t)srv->conf->limits.drain_timeout_ms;
    uv_timer_start(&app->drain_timer, on_drain_tick, 0, 50);
}

static void reload_forget(struct tg_server *srv);

void tg_server_dispose(struct tg_app *app)
{
    struct tg_server *srv = &app->srv;
    reload_forget(srv);
    tg_keys_free(app->keys);
    app->keys = NULL;
    tg_webhook_free(srv);
    /* Decisions still waiting for Redis end now ("shutting down"); the client's memory goes
     * with the loop runs below. */
    tg_cluster_free(app->cluster);
    app->cluster = NULL;
    tg_shared_local(&srv->store, srv);
    /* The loop ran dry; what was put off to the end of an iteration may still wait. */
    do {
        flush_all(srv);
        uv_run(srv->loop, UV_RUN_DEFAULT);
    } while (!tg_list_empty(&app->http.conn_pending) || !tg_list_empty(&srv->dead_calls));
    tg_http_env_close(&app->http); /* the connections' deadline timer */
    if (app->flush_ready) {
        uv_close((uv_handle_t *)&app->flush_check, NULL);
        uv_close((uv_handle_t *)&app->flush_prepare, NULL);
        uv_close((uv_handle_t *)&app->pending_idle, NULL);
    }
    uv_run(srv->loop, UV_RUN_DEFAULT);
    for (size_t i = 0; i < app->nlisteners; i++)
        tg_tls_ctx_free(app->listeners[i].http.tls);
    free(app->listeners);
    tg_http_env_dispose(&app->http);
    tg_session_table_free(srv->sessions);
    tg_tasks_free(srv); /* no call answers into one any more */
    tg_route_dispose(srv);
    free(srv->upstreams);
    tg_counters_free(srv->counters);
    tg_label_counts_free(srv->metrics.brakes);
    tg_label_counts_free(srv->metrics.history_refusals);
    srv->metrics.brakes = srv->metrics.history_refusals = NULL;
    tg_dpop_replay_free(srv->dpop_replay);
    srv->dpop_replay = NULL;
    tg_conf_unref(srv->conf);
    tg_conf_unref(app->listener_conf);
    tg_mcp_mrtr_dispose(&srv->mrtr);
    tg_mcp_schemas_free(srv->schemas);
    srv->schemas = NULL;
    tg_pins_seen_free(srv->pins_seen);
    srv->pins_seen = NULL;
}

/* The same sockets: a reload can change a listener's certificate, key and client CA (read again
 * each time), not its address, port or whether it speaks TLS. */
static int same_listeners(const struct tg_conf *a, const struct tg_conf *b)
{
    if (a->nlisteners != b->nlisteners)
        return 0;
    for (size_t i = 0; i < a->nlisteners; i++) {
        const struct tg_listener_conf *x = &a->listeners[i], *y = &b->listeners[i];
        if (strcmp(x->address, y->address) || x->port != y->port || x->tls != y->tls)
            return 0;
    }
    return 1;
}

/* The listeners' TLS contexts of conf c, read from their files (in the reload worker). NULL with
 * err on a failure. */
static struct tg_tls_ctx **listener_contexts(const struct tg_conf *c, struct tg_buf *err)
{
    struct tg_tls_ctx **v = tg_xcalloc(c->nlisteners ? c->nlisteners : 1, sizeof(*v));
    for (size_t i = 0; i < c->nlisteners; i++) {
        const struct tg_listener_conf *lc = &c->listeners[i];
        if (!lc->tls)
            continue;
        struct tg_tls_server_opts o = {lc->cert, lc->key, lc->client_ca, lc->client_auth, lc->session_timeout_s};
        char e[256];
        if (tg_tls_ctx_new(&o, &v[i], e, sizeof(e)) != 0) {
            tg_buf_appendf(err, "%s: listen[%zu].tls: %s\n", c->path, i, e);
            for (size_t k = 0; k < i; k++)
                tg_tls_ctx_free(v[k]);
            free(v);
            return NULL;
        }
    }
    return v;
}

static void free_contexts(struct tg_tls_ctx **v, size_t n)
{
    for (size_t i = 0; v != NULL && i < n; i++)
        tg_tls_ctx_free(v[i]);
    free(v);
}

static void log_reload_errors(struct tg_server *srv, const struct tg_buf *err)
{
    srv->reload_failures++;
    tg_log(TG_LOG_ERROR, "reload failed; the running configuration stays", "conf=%s", srv->conf->path);
    for (const char *p = err->base; p && p < err->base + err->len;) {
        const char *nl = memchr(p, '\n', (size_t)(err->base + err->len - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(err->base + err->len - p);
        char esc[400];
        tg_log(TG_LOG_ERROR, "reload error", "error=%s", tg_log_esc(esc, sizeof(esc), tg_slice_of(p, n)));
        p += n + 1;
    }
}

/* The same upstream across a reload: same kind and the same URL or command line. */
static int same_target(const struct tg_upstream_conf *a, const struct tg_upstream_conf *b)
{
    if (a->transport != b->transport)
        return 0;
    if (a->url && b->url)
        return strcmp(a->url, b->url) == 0;
    if (a->command == NULL || b->command == NULL)
        return 0;
    size_t i = 0;
    for (; a->command[i] && b->command[i]; i++)
        if (strcmp(a->command[i], b->command[i]) != 0)
            return 0;
    return a->command[i] == NULL && b->command[i] == NULL;
}

/* The argument of remap_session(): on reload_apply()'s stack; it owns nothing. */
struct remap_ctx {
    struct tg_server *srv;
    int *map;
};

static int remap_session(struct tg_session *s, void *arg)
{
    struct remap_ctx *rc = arg;
    int to = rc->map[s->upstream];
    if (to < 0) {
        tg_dispatch_upstream_removed(rc->srv, s);
        return 0; /* already removed */
    }
    s->upstream = to;
    return 0;
}

/* The argument of tell_roots_changed(): on reload_apply()'s stack; it owns nothing. */
struct roots_ctx {
    struct tg_server *srv;
    const struct tg_conf *old;
};

static int tell_roots_changed(struct tg_session *s, void *arg)
{
    static const char note[] = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/roots/list_changed\"}";
    struct roots_ctx *rc = arg;
    if (tg_roots_changed(rc->srv, rc->old, s))
        tg_call_tell_upstream(rc->srv, s, note, sizeof(note) - 1);
    return 0;
}

static int reload_apply(struct tg_server *srv, struct tg_conf *nc, struct tg_tls_ctx **tls, struct tg_buf *err);

/* One who asked for a reload. Owner: the job (or srv->reload_next) until its done has run. */
struct tg_reload_waiter {
    tg_reload_done_cb done;
    void *ud;
    struct tg_reload_waiter *next;
};

/* A reload reading the conf off the loop. Owner: srv->reload_job until after_reload() frees it;
 * srv is NULL once the server went (dispose), and then the result is just dropped. */
struct tg_reload_job {
    uv_work_t req;
    struct tg_server *srv;
    char *path;
    struct tg_conf *nc; /* what the worker loaded, or NULL with err */
    struct tg_tls_ctx **tls; /* its listeners' TLS contexts, read in the worker too */
    struct tg_buf err;
    struct tg_reload_waiter *waiters;
};

static void reload_work(uv_work_t *req)
{
    struct tg_reload_job *j = tg_container_of(req, struct tg_reload_job, req);
    j->nc = tg_conf_load(j->path, &j->err); /* no loop state is touched here */
    if (j->nc != NULL && (j->tls = listener_contexts(j->nc, &j->err)) == NULL) {
        tg_conf_unref(j->nc);
        j->nc = NULL;
    }
    /* What the load freed on this pool thread goes back to malloc: a thread's slab lists are its
     * own, and a pool thread would keep them (up to TG_SLAB_KEEP blocks a class) until the
     * process ends, where nothing frees them. */
    tg_slab_drain();
}

/* Every waiter hears the end, even a dropped one (err NULL: the server is going), so that what
 * it holds for the answer is freed. */
static void free_waiters(struct tg_reload_waiter *w, int ok, const struct tg_buf *err)
{
    static const char gone[] = "the server is shutting down";
    struct tg_buf none = {(char *)gone, sizeof(gone) - 1, 0};
    while (w != NULL) {
        struct tg_reload_waiter *next = w->next;
        if (w->done != NULL)
            w->done(w->ud, ok, err != NULL ? err : &none);
        free(w);
        w = next;
    }
}

static void after_reload(uv_work_t *req, int status);

static void start_job(struct tg_server *srv)
{
    struct tg_app *app = tg_app_of(srv);
    struct tg_reload_job *j = tg_xcalloc(1, sizeof(*j));
    j->srv = srv;
    j->path = tg_xstrdup(srv->conf->path);
    tg_buf_init(&j->err);
    j->waiters = app->reload_next;
    app->reload_next = NULL;
    app->reload_job = j;
    if (uv_queue_work(srv->loop, &j->req, reload_work, after_reload) != 0)
        abort(); /* only for a NULL work callback */
}

static void after_reload(uv_work_t *req, int status)
{
    struct tg_reload_job *j = tg_container_of(req, struct tg_reload_job, req);
    struct tg_server *srv = j->srv;
    struct tg_app *app = tg_app_of(srv);
    if (srv == NULL || srv->draining || status != 0) {
        if (j->nc != NULL)
            free_contexts(j->tls, j->nc->nlisteners);
        if (j->nc != NULL)
            tg_conf_unref(j->nc);
        if (srv != NULL)
            app->reload_job = NULL;
        free_waiters(j->waiters, 0, NULL);
    } else {
        app->reload_job = NULL;
        int ok = reload_apply(srv, j->nc, j->tls, &j->err) == 0;
        free_waiters(j->waiters, ok, &j->err);
        if (app->reload_next != NULL && !srv->draining)
            start_job(srv);
    }
    tg_buf_dispose(&j->err);
    free(j->path);
    free(j);
}

static void reload_forget(struct tg_server *srv)
{
    struct tg_app *app = tg_app_of(srv);
    if (app->reload_job != NULL)
        app->reload_job->srv = NULL; /* still in the pool: its result is dropped when it comes */
    free_waiters(app->reload_next, 0, NULL);
    app->reload_next = NULL;
}

void tg_server_reload_start(struct tg_server *srv, tg_reload_done_cb done, void *ud)
{
    struct tg_app *app = tg_app_of(srv);
    struct tg_reload_waiter *w = tg_xcalloc(1, sizeof(*w));
    w->done = done;
    w->ud = ud;
    struct tg_reload_waiter **tail = &app->reload_next;
    while (*tail != NULL)
        tail = &(*tail)->next;
    *tail = w;
    if (app->reload_job == NULL)
        start_job(srv); /* else: after the running one, a fresh read serves this one */
}

/* Swap nc in (taking its reference and the listener contexts tls, both may be NULL on a failure). */
static int reload_apply(struct tg_server *srv, struct tg_conf *nc, struct tg_tls_ctx **tls, struct tg_buf *err)
{
    struct tg_app *app = tg_app_of(srv);
    size_t nc_listeners = nc != NULL ? nc->nlisteners : 0;
    if (nc == NULL) {
        log_reload_errors(srv, err);
        free_contexts(tls, 0);
        return -1;
    }
    struct tg_conf *old = srv->conf;
    /* Audit file: reopen only if it changed. */
    int audit_changed = (old->audit.file == NULL) != (nc->audit.file == NULL) ||
                        (old->audit.file && nc->audit.file && strcmp(old->audit.file, nc->audit.file) != 0) ||
                        old->audit.chain != nc->audit.chain;
    struct tg_audit *na = srv->audit;
    if (audit_changed) {
        na = NULL;
        if (nc->audit.file != NULL && (na = tg_audit_open(srv->loop, &nc->audit, err)) == NULL) {
            log_reload_errors(srv, err);
            tg_conf_unref(nc);
            free_contexts(tls, nc_listeners);
            return -1;
        }
        tg_audit_close(srv->audit); /* its last checkpoint now; freed once the loop runs */
        tg_audit_hand_over(srv->audit, na);
    }
    srv->audit = na;
    tg_audit_set_conf(srv->audit, nc); /* a checkpoint: "start" in a new file, "reload" in the same one */
    if (!same_listeners(app->listener_conf, nc)) {
        tg_log(TG_LOG_WARN, "listener address, port or TLS on/off changed: that needs a restart; listeners unchanged",
               NULL);
    } else if (tls != NULL) {
        /* Certificates, keys and client CAs read again: new handshakes use them; connections made
         * before keep the old context until they close. */
        for (size_t i = 0; i < app->nlisteners && i < nc->nlisteners; i++)
            if (tls[i] != NULL) {
                tg_tls_ctx_free(app->listeners[i].http.tls);
                app->listeners[i].http.tls = tls[i];
                tls[i] = NULL;
            }
    }
    free_contexts(tls, nc_listeners);
    /* Upstreams: the same name and URL keep their runtime (pool, queue, sessions). */
    struct tg_upstream **nu = tg_xcalloc(nc->nupstreams ? nc->nupstreams : 1, sizeof(*nu));
    int *map = tg_xcalloc(srv->nupstreams ? srv->nupstreams : 1, sizeof(int));
    for (size_t i = 0; i < srv->nupstreams; i++)
        map[i] = -1;
    for (size_t j = 0; j < nc->nupstreams; j++) {
        for (size_t i = 0; i < srv->nupstreams; i++) {
            const struct tg_upstream_conf *ou = &old->upstreams[i];
            if (map[i] < 0 && strcmp(ou->name, nc->upstreams[j].name) == 0 && same_target(ou, &nc->upstreams[j])) {
                map[i] = (int)j;
                nu[j] = srv->upstreams[i];
                tg_upstream_set_conf(nu[j], nc, &nc->upstreams[j]);
                break;
            }
        }
        if (nu[j] == NULL)
            nu[j] = tg_upstream_new(srv->loop, nc, &nc->upstreams[j], &srv->metrics);
        watch_era(srv, nu[j]);
    }
    struct remap_ctx rc = {srv, map};
    tg_session_sweep(srv->sessions, remap_session, &rc);
    for (size_t i = 0; i < srv->nupstreams; i++)
        if (map[i] < 0)
            tg_upstream_retire(srv->upstreams[i]); /* lives until the calls that hold it end */
    free(map);
    free(srv->upstreams);
    srv->upstreams = nu;
    srv->nupstreams = nc->nupstreams;
    if (app->cluster != NULL && nc->cluster.enabled)
        tg_cluster_reconf(app->cluster, &nc->cluster);
    else if ((app->cluster != NULL) != (nc->cluster.enabled != 0))
        tg_log(TG_LOG_WARN, "the cluster group was added or removed: that takes effect at restart", "conf=%s",
               nc->path);
    tg_keys_attach(app->keys, nc); /* the same issuer, source and CA keep their keys */
    srv->conf = nc;
    if (nc->has_pins && srv->pins_seen == NULL)
        srv->pins_seen = tg_pins_seen_new();
    tg_counters_history_limits(srv->counters, (size_t)nc->limits.history_calls, (size_t)nc->limits.history_bytes);
    if (app->cluster != NULL)
        tg_cluster_history_calls(app->cluster, (size_t)nc->limits.history_calls);
    tg_keys_sweep(app->keys, nc);
    struct roots_ctx rc2 = {srv, old};
    tg_session_sweep(srv->sessions, tell_roots_changed, &rc2); /* servers holding other roots ask again */
    tg_cred_watches_recheck(srv); /* credentials the new conf no longer takes end their streams */
    tg_approvals_reconf(srv);     /* a cluster's listing shows what the new conf lets run */
    app->http.limits = &nc->limits; /* connections read their limits through it */
    app->http.access_log = nc->log_access;
    if (tg_log_setup(nc->log_level, nc->log_format, nc->log_file) != 0)
        tg_log(TG_LOG_ERROR, "cannot open the new log file; logging goes on where it went", "file=%s",
               nc->log_file ? nc->log_file : "-");
    srv->reloads++;
    tg_log(TG_LOG_INFO, "configuration reloaded", "conf=%s upstreams=%zu grants=%zu", nc->path, nc->nupstreams,
           nc->ngrants);
    tg_conf_unref(old); /* calls in flight keep their policies by reference */
    return 0;
}
