/* The connection's one timer (transports/http1/conn.c's connections): the deadline of each phase,
 * set lazily, and what happens when one passes. */
#include "transports/http1/internal.h"

#include "core/base/log.h"
#include "core/wire/msg.h"
#include "core/wire/tls.h"

static void on_timer(uv_timer_t *t);

/* The one timer, set lazily: c->due_ms says when the current phase's deadline falls, and the
 * timer is moved only when it would fire after that. Firing early, it sets itself again for
 * what is left (on_timer). A request on a keep-alive connection (READING, DISPATCHING, then
 * IDLE again) used to move it three times, each an operation on libuv's timer heap; now it
 * moves about once per header_timeout_ms. */
void tg__http_arm(struct tg_conn *c, uint64_t ms)
{
    c->due_ms = uv_now(c->env->loop) + ms;
    if (!uv_is_active((uv_handle_t *)&c->timer) || uv_timer_get_due_in(&c->timer) > ms)
        uv_timer_start(&c->timer, on_timer, ms, 0);
}

/* Every transition passes here: it checks the edge and sets the one timer's deadline. */
void tg__http_set_phase(struct tg_conn *c, enum tg_conn_phase s)
{
    const struct tg_limits *lim = c->env->limits;
    switch (s) {
    case TG_CONN_HANDSHAKE: break;
    case TG_CONN_IDLE:
        /* A TLS connection idle for TG_TLS_TRIM_MS gives its record buffers' pages back first. */
        c->trim_due = c->tls != NULL && lim->idle_timeout_ms > TG_TLS_TRIM_MS;
        tg__http_arm(c, c->trim_due ? TG_TLS_TRIM_MS : (uint64_t)lim->idle_timeout_ms);
        break;
    case TG_CONN_READING:
        if (c->phase != TG_CONN_READING)
            tg__http_arm(c, (uint64_t)lim->header_timeout_ms);
        break;
    case TG_CONN_DISPATCHING:
    case TG_CONN_STREAMING:
        c->due_ms = 0; /* nothing is due: if the timer fires, on_timer finds that */
        break;
    case TG_CONN_UPGRADED:
        c->due_ms = 0;
        uv_timer_stop(&c->timer); /* its ticks are the protocol's now (tg_http_upgraded_timer) */
        break;
    case TG_CONN_CLOSING:
    case TG_CONN_CLOSED: break;
    }
    if (s != TG_CONN_IDLE)
        c->trim_due = 0;
    c->phase = s;
}

static void on_timer(uv_timer_t *t)
{
    struct tg_conn *c = t->data;
    if (c->phase == TG_CONN_UPGRADED) {
        if (c->up_tick)
            c->up_tick(c, c->up_ud);
        return;
    }
    if (c->due_ms == 0)
        return; /* nothing due in this phase (a request under way, a stream) */
    uint64_t now = uv_now(c->env->loop);
    if (now < c->due_ms) { /* set for an earlier deadline since moved on (arm) */
        uv_timer_start(&c->timer, on_timer, c->due_ms - now, 0);
        return;
    }
    c->due_ms = 0;
    if (c->phase == TG_CONN_IDLE && c->trim_due) {
        c->trim_due = 0;
        c->env->metrics->tls_trimmed_bytes += tg_tls_trim(c->tls);
        /* The rest of the idle timeout; a reload may have cut it below the trim's delay since. */
        int64_t rest = (int64_t)c->env->limits->idle_timeout_ms - TG_TLS_TRIM_MS;
        tg__http_arm(c, rest > 0 ? (uint64_t)rest : 0);
        return;
    }
    if (c->phase == TG_CONN_READING) {
        /* A slow request (slowloris) gets 408 and the connection is closed. */
        c->close_after = 1;
        c->req.keep_alive = 0;
        tg__http_set_phase(c, TG_CONN_DISPATCHING);
        tg_http_respond_rpc_error(c, 408, NULL, TG_RPC_INVALID_REQUEST, "Request timeout");
        return;
    }
    if (c->phase == TG_CONN_HANDSHAKE) {
        c->env->metrics->tls_handshake_failures++;
        tg_log(TG_LOG_INFO, "TLS handshake timed out", "conn=%llu peer=%s timeout_ms=%d", (unsigned long long)c->id,
               tg_conn_peer(c), c->env->limits->tls_handshake_timeout_ms);
    }
    tg_conn_close(c, c->phase == TG_CONN_HANDSHAKE ? "handshake timeout" : "idle timeout");
}

void tg_http_upgraded_timer(struct tg_conn *c, uint64_t ms)
{
    if (c->phase == TG_CONN_UPGRADED)
        uv_timer_start(&c->timer, on_timer, ms, 0);
}
