#include "core/server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/router.h"
#include "core/session.h"
#include "transports/http1.h"
#include "transports/tls.h"
#include "upstream/upstream.h"

static void on_connection(uv_stream_t *h, int status)
{
    struct tg_listener *l = h->data;
    if (status < 0) {
        tg_log(TG_LOG_WARN, "accept failed", "error=\"%s\"", uv_strerror(status));
        return;
    }
    tg_http1_accept(l->server, l, h);
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
    l->port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                               : ((struct sockaddr_in6 *)&bound)->sin6_port);
    return 0;
}

static void on_sweep(uv_timer_t *t)
{
    struct tg_server *srv = t->data;
    tg_router_sweep(srv);
}

int tg_server_init(struct tg_server *srv, uv_loop_t *loop, struct tg_conf *conf)
{
    memset(srv, 0, sizeof(*srv));
    srv->loop = loop;
    srv->conf = conf;
    tg_list_init(&srv->conns);
    srv->sessions = tg_session_table_new();
    srv->nupstreams = conf->nupstreams;
    srv->upstreams = tg_xcalloc(conf->nupstreams, sizeof(*srv->upstreams));
    for (size_t i = 0; i < conf->nupstreams; i++)
        srv->upstreams[i] = tg_upstream_new(loop, &conf->upstreams[i], &srv->metrics);
    srv->nlisteners = conf->nlisteners;
    srv->listeners = tg_xcalloc(conf->nlisteners, sizeof(*srv->listeners));
    for (size_t i = 0; i < conf->nlisteners; i++) {
        struct tg_listener *l = &srv->listeners[i];
        l->lc = &conf->listeners[i];
        l->server = srv;
        if (l->lc->tls) {
            char err[256];
            if (tg_tls_ctx_new(l->lc->cert, l->lc->key, &l->tls, err, sizeof(err)) != 0) {
                tg_log(TG_LOG_ERROR, "TLS setup failed", "listener=%zu error=\"%s\"", i, err);
                return TG_EINVAL;
            }
        }
    }
    uv_timer_init(loop, &srv->sweep);
    srv->sweep.data = srv;
    uv_timer_init(loop, &srv->drain_timer);
    srv->drain_timer.data = srv;
    return 0;
}

int tg_server_start(struct tg_server *srv)
{
    for (size_t i = 0; i < srv->nlisteners; i++) {
        struct tg_listener *l = &srv->listeners[i];
        int r = bind_listener(srv, l, l->lc->address, l->lc->port);
        if (r != 0)
            return r;
        tg_log(TG_LOG_INFO, "listening", "address=%s port=%d tls=%s", l->lc->address, l->port,
               l->tls ? "true" : "false");
    }
    if (srv->conf->admin.enabled) {
        srv->admin.is_admin = 1;
        int r = bind_listener(srv, &srv->admin, srv->conf->admin.address, srv->conf->admin.port);
        if (r != 0)
            return r;
        srv->admin_open = 1;
        tg_log(TG_LOG_INFO, "admin listening", "address=%s port=%d", srv->conf->admin.address, srv->admin.port);
    }
    uv_timer_start(&srv->sweep, on_sweep, 10000, 10000);
    return 0;
}

void tg_server_on_request(struct tg_server *srv, struct tg_conn *c)
{
    if (c->listener->is_admin)
        tg_router_admin(srv, c);
    else
        tg_router_handle(srv, c);
}

void tg_server_conn_gone(struct tg_server *srv, struct tg_conn *c)
{
    if (tg_list_linked(&c->link)) {
        tg_list_unlink(&c->link);
        srv->nconns--;
    }
}

static void close_listeners(struct tg_server *srv)
{
    for (size_t i = 0; i < srv->nlisteners; i++) {
        struct tg_listener *l = &srv->listeners[i];
        if (!l->closed && l->tcp.loop != NULL && !uv_is_closing((uv_handle_t *)&l->tcp)) {
            uv_close((uv_handle_t *)&l->tcp, NULL);
            l->closed = 1;
        }
    }
    if (srv->admin_open && !uv_is_closing((uv_handle_t *)&srv->admin.tcp)) {
        uv_close((uv_handle_t *)&srv->admin.tcp, NULL);
        srv->admin_open = 0;
    }
}

static void finish_drain(struct tg_server *srv)
{
    uv_timer_stop(&srv->drain_timer);
    uv_timer_stop(&srv->sweep);
    /* Close what is left: connections, upstream pools, our own handles. */
    struct tg_list *l = srv->conns.next;
    while (l != &srv->conns) {
        struct tg_list *next = l->next;
        tg_conn_close(tg_container_of(l, struct tg_conn, link), "shutdown");
        l = next;
    }
    for (size_t i = 0; i < srv->nupstreams; i++) {
        tg_upstream_close(srv->upstreams[i]);
        srv->upstreams[i] = NULL;
    }
    uv_close((uv_handle_t *)&srv->drain_timer, NULL);
    uv_close((uv_handle_t *)&srv->sweep, NULL);
    uv_close((uv_handle_t *)&srv->sigterm, NULL);
    uv_close((uv_handle_t *)&srv->sigint, NULL);
    uv_close((uv_handle_t *)&srv->sighup, NULL);
    uv_close((uv_handle_t *)&srv->sigusr1, NULL);
}

static void on_drain_tick(uv_timer_t *t)
{
    struct tg_server *srv = t->data;
    size_t inflight = tg_router_inflight(srv);
    if (inflight == 0 || uv_now(srv->loop) >= srv->drain_deadline) {
        if (inflight)
            tg_log(TG_LOG_WARN, "drain deadline passed; closing calls in flight", "inflight=%zu", inflight);
        finish_drain(srv);
    }
}

void tg_server_drain(struct tg_server *srv)
{
    if (srv->draining)
        return;
    srv->draining = 1;
    tg_log(TG_LOG_INFO, "draining", "inflight=%zu timeout_ms=%d", tg_router_inflight(srv),
           srv->conf->limits.drain_timeout_ms);
    close_listeners(srv);
    tg_router_end_streams(srv);
    /* Idle keep-alive connections can go now; busy ones close after their answer. */
    struct tg_list *l = srv->conns.next;
    while (l != &srv->conns) {
        struct tg_list *next = l->next;
        struct tg_conn *c = tg_container_of(l, struct tg_conn, link);
        if (c->state == TG_CONN_IDLE || c->state == TG_CONN_HANDSHAKE)
            tg_conn_close(c, "draining");
        l = next;
    }
    srv->drain_deadline = uv_now(srv->loop) + (uint64_t)srv->conf->limits.drain_timeout_ms;
    uv_timer_start(&srv->drain_timer, on_drain_tick, 0, 50);
}

void tg_server_dispose(struct tg_server *srv)
{
    for (size_t i = 0; i < srv->nlisteners; i++)
        tg_tls_ctx_free(srv->listeners[i].tls);
    free(srv->listeners);
    tg_session_table_free(srv->sessions);
    free(srv->upstreams);
}
