/* The deadlines of transports/http1/conn.c's connections: one per phase, kept on the env's lists
 * under one timer, and what happens when one passes. */
#include "transports/http1/internal.h"

#include "core/base/log.h"
#include "core/wire/msg.h"
#include "core/wire/tls.h"

static void on_env_timer(uv_timer_t *t);

/* The list for connections armed for ms: the one kept for ms (empty or not: a duration keeps its
 * list, so that the usual few are found in the first slots), else an empty one, else (more
 * durations at once than lists, after reloads) the first. */
static struct tg_list *due_list(struct tg_http_env *env, uint64_t ms)
{
    for (size_t i = 0; i < env->ndue; i++)
        if (env->due[i].ms == ms)
            return &env->due[i].conns;
    if (env->ndue < TG_HTTP_DUE_LISTS) {
        struct tg_http_due *d = &env->due[env->ndue++];
        d->ms = ms;
        return &d->conns;
    }
    for (size_t i = 0; i < TG_HTTP_DUE_LISTS; i++)
        if (tg_list_empty(&env->due[i].conns)) {
            env->due[i].ms = ms; /* a duration no connection waits on any more gives its slot up */
            return &env->due[i].conns;
        }
    return &env->due[0].conns;
}

/* Every connection's deadline is on one of the env's lists, one list per duration: armed at
 * uv_now() + ms with the same ms, a list's connections are in the order of their deadlines, so
 * arming one is an append and the env's one timer needs only the lists' heads. A connection
 * holds a list node (16 bytes) instead of a libuv timer (152). A request on a keep-alive
 * connection (READING, DISPATCHING, then IDLE again) moves its connection between lists and
 * touches libuv's timer heap only when its deadline comes before every other. */
void tg__http_arm(struct tg_conn *c, uint64_t ms)
{
    struct tg_http_env *env = c->env;
    uint64_t due = uv_now(env->loop) + ms;
    c->due_ms = due;
    tg_list_unlink(&c->due_node);
    struct tg_list *l = due_list(env, ms);
    /* In order: the tail at once, but for a list that holds several durations. */
    struct tg_list *at = l->prev;
    while (at != l && tg_container_of(at, struct tg_conn, due_node)->due_ms > due)
        at = at->prev;
    tg_list_insert_tail(at->next, &c->due_node);
    if (due < env->timer_at) {
        env->timer_at = due;
        uv_timer_start(&env->timer, on_env_timer, ms, 0);
    }
}

/* No deadline in this phase (a request under way, a stream, closing). */
static void disarm(struct tg_conn *c)
{
    c->due_ms = 0;
    tg_list_unlink(&c->due_node); /* the env's timer may fire for it still: it finds nothing due */
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
    case TG_CONN_UPGRADED: /* its ticks are the protocol's now (tg_http_upgraded_timer) */
    case TG_CONN_CLOSING:
    case TG_CONN_CLOSED:
        disarm(c);
        break;
    }
    if (s != TG_CONN_IDLE)
        c->trim_due = 0;
    c->phase = s;
}

/* c's deadline has passed. */
static void conn_due(struct tg_conn *c)
{
    c->due_ms = 0;
    if (c->phase == TG_CONN_UPGRADED) {
        if (c->up != NULL && c->up->tick)
            c->up->tick(c, c->up->ud);
        return;
    }
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
        c->req->keep_alive = 0;
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

/* The earliest deadline has come: every connection whose deadline has passed is taken off its
 * list first, then each hears of it, so that what one does (a connection armed again, at once
 * or not, another closed) cannot make this round run longer. A connection armed again or moved
 * on meanwhile has left the round's list: its old deadline no longer holds. */
static void on_env_timer(uv_timer_t *t)
{
    struct tg_http_env *env = t->data;
    uint64_t now = uv_now(env->loop);
    struct tg_list round;
    tg_list_init(&round);
    for (size_t i = 0; i < env->ndue; i++) {
        struct tg_list *l = &env->due[i].conns;
        while (!tg_list_empty(l)) {
            struct tg_conn *c = tg_container_of(l->next, struct tg_conn, due_node);
            if (c->due_ms > now)
                break;
            tg_list_unlink(&c->due_node);
            tg_list_insert_tail(&round, &c->due_node);
        }
    }
    env->timer_at = UINT64_MAX; /* the one-shot timer is spent */
    while (!tg_list_empty(&round)) {
        struct tg_conn *c = tg_container_of(round.next, struct tg_conn, due_node);
        tg_list_unlink(&c->due_node);
        conn_due(c);
    }
    /* The next deadline: the earliest head (if the round armed the earliest, the timer is set). */
    uint64_t next = UINT64_MAX;
    for (size_t i = 0; i < env->ndue; i++) {
        struct tg_list *l = &env->due[i].conns;
        if (!tg_list_empty(l) && tg_container_of(l->next, struct tg_conn, due_node)->due_ms < next)
            next = tg_container_of(l->next, struct tg_conn, due_node)->due_ms;
    }
    if (next < env->timer_at) {
        env->timer_at = next;
        uv_timer_start(&env->timer, on_env_timer, next > now ? next - now : 0, 0);
    }
}

void tg_http_upgraded_timer(struct tg_conn *c, uint64_t ms)
{
    if (c->phase == TG_CONN_UPGRADED)
        tg__http_arm(c, ms);
}

void tg__http_timer_init(struct tg_http_env *env)
{
    for (size_t i = 0; i < TG_HTTP_DUE_LISTS; i++)
        tg_list_init(&env->due[i].conns);
    env->timer_at = UINT64_MAX;
    uv_timer_init(env->loop, &env->timer);
    env->timer.data = env;
    uv_unref((uv_handle_t *)&env->timer); /* connections keep the loop alive, not their deadlines */
}

void tg_http_env_close(struct tg_http_env *env)
{
    if (env->loop != NULL && !uv_is_closing((uv_handle_t *)&env->timer))
        uv_close((uv_handle_t *)&env->timer, NULL);
}
