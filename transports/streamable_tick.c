/* The tick of Streamable HTTP client streams (transports/streamable.h): keepalive comments on idle
 * ones, and the GET streams whose client never came back are let go. */
#include "transports/streamable.h"

#include "core/call/gateway.h"
#include "core/call/session.h"
#include "transports/http1/http1.h"
#include "transports/replay.h"

/* Keepalive comments on idle subscriptions/listen streams. */
static void listens_tick(struct tg_server *srv, uint64_t now, uint64_t ka)
{
    for (struct tg_list *l = srv->listens.next; l != &srv->listens; l = l->next) {
        struct tg_http_sink *hs = tg_container_of(l, struct tg_http_sink, listen_node);
        if (hs->conn != NULL && now - hs->last_write_ms >= ka) {
            tg_http_stream_write(hs->conn, ": keepalive\n\n", 13);
            hs->last_write_ms = now;
        }
    }
}

void tg_streamable_tick(struct tg_server *srv)
{
    uint64_t now = uv_now(srv->loop);
    uint64_t ka = (uint64_t)srv->conf->limits.sse_keepalive_ms;
    listens_tick(srv, now, ka);
    tg_replay_expire(srv);
    struct tg_list *l = srv->streams.next;
    while (l != &srv->streams) {
        struct tg_replay *r = tg_container_of(l, struct tg_replay, gnode);
        l = l->next;
        struct tg_http_sink *hs = r->live;
        if (hs == NULL)
            continue;
        if (hs->conn != NULL && now - r->last_write_ms >= ka) {
            tg_http_stream_write(hs->conn, ": keepalive\n\n", 13);
            r->last_write_ms = now;
        } else if (hs->conn == NULL && r->detached_at != 0 && now - r->detached_at >= TG_REPLAY_KEEP_MS &&
                   hs->call != NULL && hs->get) {
            tg_call_client_gone(hs->call);
        }
    }
}

int tg_streamable_sink_cred(const struct tg_sink *sk, struct tg_auth_cred *out)
{
    const struct tg_http_sink *hs = (const struct tg_http_sink *)sk;
    return tg_cred_of_stream(hs->watch, hs->srv, hs->conn, hs->sess->grant, &hs->hint, out);
}
