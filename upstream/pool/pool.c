#include <stdlib.h>

#include "core/base/log.h"
#include "upstream/pool/internal.h"
#include "upstream/child.h"

/* ---- connections --------------------------------------------------------------- */

/* The idle timer is armed lazily: a connection that goes idle and busy again once per call
 * would otherwise start and stop it every time. It runs on while the connection is busy; when
 * it fires it closes the connection only if it is idle and has been for the whole timeout, and
 * otherwise waits the rest (idle) or lapses (busy: the next idle spell arms it again). */
static void on_idle_timer(uv_timer_t *t)
{
    struct tg_upconn *c = t->data;
    if (c->state != UC_IDLE)
        return;
    uint64_t now = uv_now(c->up->loop), timeout = (uint64_t)c->up->uc->pool_idle_timeout_ms;
    if (now - c->idle_since < timeout) {
        uv_timer_start(&c->timer, on_idle_timer, timeout - (now - c->idle_since), 0);
        return;
    }
    tg__upconn_close(c);
}

/* r onto idle connection c. */
static void attach(struct tg_upconn *c, struct tg_upreq *r)
{
    c->state = UC_BUSY;
    tg_list_unlink(&c->link);
    tg_list_insert_tail(&c->up->busy, &c->link);
    tg__upconn_push(c, r); /* the idle timer, if armed, runs on (on_idle_timer) */
}

void tg__upconn_to_idle(struct tg_upconn *c)
{
    struct tg_upstream *u = c->up;
    c->reused = 1;
    if (u->closing || c->dedicated || (c->tls != NULL && c->tls_conf != u->conf)) {
        tg__upconn_close(c); /* (a TLS connection made before a reload: its settings are the old ones) */
        return;
    }
    c->state = UC_IDLE;
    tg_list_unlink(&c->link);
    tg_list_insert_tail(&u->idle, &c->link);
    u->nidle++;
    /* Keep reading while idle so that a server-side close is noticed at once. */
    tg__upconn_read_start(c);
    c->idle_since = uv_now(u->loop);
    if (!uv_is_active((uv_handle_t *)&c->timer))
        uv_timer_start(&c->timer, on_idle_timer, (uint64_t)u->uc->pool_idle_timeout_ms, 0);
    tg__upstream_serve_queue(u);
}

/* ---- requests ------------------------------------------------------------------- */

static void on_req_timer_closed(uv_handle_t *h)
{
    struct tg_upreq *r = h->data;
    struct tg_upstream *u = r->up;
    tg_buf_dispose(&r->out);
    tg_xfree(r->meta);
    tg_xfree(r);
    u->open_reqs--;
    tg__upstream_maybe_free(u);
}

/* Free r, unless a pipelined connection still owns it (an orphan: the connection frees it once
 * its answer is read). */
static void req_release(struct tg_upreq *r)
{
    if (r->orphan && r->conn != NULL)
        return;
    uv_close((uv_handle_t *)&r->timer, on_req_timer_closed);
}

void tg__upreq_release(struct tg_upreq *r) { req_release(r); }

/* Take r off its queue or connection (upstream/pool/pipeline.c: taken out, orphaned, or its
 * connection closed). */
static void req_unhook(struct tg_upreq *r)
{
    if (r->queued) {
        tg_list_unlink(&r->qlink);
        r->queued = 0;
        r->up->nqueued--;
    }
    if (r->conn != NULL)
        tg__upconn_drop(r->conn, r);
}

/* Mark r done, stop its timer and unhook it. Returns 0 if r was already done. */
static int req_detach(struct tg_upreq *r)
{
    if (r->done)
        return 0;
    r->done = 1;
    uv_timer_stop(&r->timer);
    req_unhook(r);
    return 1;
}

void tg__upreq_finish(struct tg_upreq *r, int err)
{
    if (!req_detach(r))
        return;
    if (err != 0) {
        r->up->metrics->upstream_errors++;
        if (err == TG_ETIMEDOUT)
            r->up->metrics->upstream_timeouts++;
    }
    tg_metrics_observe_latency(r->up->metrics, tg_upreq_elapsed_ms(r));
    r->cbs->on_done(r, err, r->ud);
    req_release(r);
}

static void on_req_timer(uv_timer_t *t)
{
    struct tg_upreq *r = t->data;
    if (r->pending_err) {
        tg__upreq_finish(r, r->pending_err);
        return;
    }
    if (r->queued) {
        r->up->metrics->upstream_queue_timeouts++;
        tg_log(TG_LOG_WARN, "upstream queue deadline passed", "upstream=%s queue_timeout_ms=%d", r->up->uc->name,
               r->up->uc->queue_timeout_ms);
        tg__upreq_finish(r, TG_ELIMIT);
        return;
    }
    uint64_t now = uv_now(r->up->loop);
    if (r->touched_ms + r->timeout_ms > now) {
        uv_timer_start(&r->timer, on_req_timer, r->touched_ms + r->timeout_ms - now, 0);
        return;
    }
    tg_log(TG_LOG_WARN, "upstream call timed out", "upstream=%s timeout_ms=%llu", r->up->uc->name,
           (unsigned long long)r->timeout_ms);
    tg__upreq_finish(r, TG_ETIMEDOUT);
}

static void fail_later(struct tg_upreq *r, int err)
{
    r->pending_err = err;
    uv_timer_start(&r->timer, on_req_timer, 0, 0);
}

/* A failure found inside a call from the owner (tg_upreq_start, a pool change): r leaves its
 * queue or connection now, and on_done comes from the loop, after that call has returned. */
void tg__upreq_finish_later(struct tg_upreq *r, int err)
{
    if (r->done || r->pending_err)
        return;
    req_unhook(r);
    fail_later(r, err);
}

void tg__upstream_serve_queue(struct tg_upstream *u)
{
    while (!tg_list_empty(&u->queue)) {
        struct tg_upreq *r = tg_container_of(u->queue.next, struct tg_upreq, qlink);
        if (u->nidle == 0 && u->npooled >= (size_t)u->uc->pool_size && tg__upstream_pipeline_pick(u, 1) == NULL)
            return;
        tg_list_unlink(&r->qlink);
        r->queued = 0;
        u->nqueued--;
        if (r->timeout_ms)
            uv_timer_start(&r->timer, on_req_timer, r->timeout_ms, 0);
        else
            uv_timer_stop(&r->timer);
        tg__upreq_acquire(r);
    }
}

#define BACKOFF_AFTER 3 /* failures in a row before the first pause */

/* 1: a request that needs a new connection must fail now. After a pause, one request is let
 * through as the trial, and the others wait out a connect timeout behind it. */
static int backing_off(struct tg_upstream *u)
{
    if (u->fails < BACKOFF_AFTER || u->uc->backoff_ms == 0)
        return 0;
    uint64_t now = uv_now(u->loop);
    if (now < u->down_until) {
        u->metrics->upstream_backoff_refusals++;
        return 1;
    }
    u->trial = 1;
    u->down_until = now + (uint64_t)u->uc->connect_timeout_ms;
    return 0;
}

void tg__upreq_acquire(struct tg_upreq *r)
{
    struct tg_upstream *u = r->up;
    if (u->closing) {
        fail_later(r, TG_ECLOSED);
        return;
    }
    if (r->dedicated && backing_off(u)) {
        fail_later(r, TG_EBACKOFF);
        return;
    }
    if (r->dedicated) {
        tg__upconn_new(u, r, 1);
        return;
    }
    struct tg_upconn *c = tg__upstream_pipeline_pick(u, 0);
    if (c != NULL) {
        tg__upconn_push(c, r); /* joins the requests this iteration writes on c */
        return;
    }
    if (!tg_list_empty(&u->idle)) {
        /* Most recently used first: the others age out of the pool. */
        c = tg_container_of(u->idle.prev, struct tg_upconn, link);
        u->nidle--;
        attach(c, r);
        return;
    }
    if (!r->retried && backing_off(u)) {
        fail_later(r, TG_EBACKOFF); /* no new connection while the pause lasts (an idle one is still used) */
        return;
    }
    if (u->npooled < (size_t)u->uc->pool_size) {
        tg__upconn_new(u, r, 0);
        return;
    }
    if ((c = tg__upstream_pipeline_pick(u, 1)) != NULL) {
        tg__upconn_push(c, r);
        return;
    }
    if (u->nqueued >= (size_t)u->uc->queue_max) {
        tg_log(TG_LOG_WARN, "upstream queue full", "upstream=%s queue=%d", u->uc->name, u->uc->queue_max);
        fail_later(r, TG_ELIMIT);
        return;
    }
    r->queued = 1;
    u->nqueued++;
    tg_list_insert_tail(&u->queue, &r->qlink);
    uv_timer_start(&r->timer, on_req_timer, (uint64_t)u->uc->queue_timeout_ms, 0);
}

struct tg_upreq *tg_upreq_start(struct tg_upstream *u, const char *method, const char *extra_headers,
                                const char *body, size_t len, int dedicated, uint64_t timeout_ms,
                                const struct tg_upreq_cbs *cbs, void *ud)
{
    return tg_upreq_start_to(u, method, NULL, extra_headers, body, len, dedicated, timeout_ms, cbs, ud);
}

struct tg_upreq *tg_upreq_start_to(struct tg_upstream *u, const char *method, const char *target,
                                   const char *extra_headers, const char *body, size_t len, int dedicated,
                                   uint64_t timeout_ms, const struct tg_upreq_cbs *cbs, void *ud)
{
    struct tg_upreq *r = tg_xcalloc(1, sizeof(*r));
    r->up = u;
    u->open_reqs++;
    r->cbs = cbs;
    r->ud = ud;
    r->dedicated = dedicated;
    r->timeout_ms = timeout_ms;
    r->start_ns = uv_hrtime();
    tg_list_init(&r->qlink);
    tg_list_init(&r->clink);
    uv_timer_init(u->loop, &r->timer);
    r->timer.data = r;
    tg__upreq_format(r, method, target, extra_headers, body, len);
    u->metrics->upstream_calls++;
    if (timeout_ms)
        uv_timer_start(&r->timer, on_req_timer, timeout_ms, 0);
    tg__upreq_acquire(r);
    return r;
}

void tg_upreq_cancel(struct tg_upreq *r)
{
    if (req_detach(r))
        req_release(r);
}

void tg_upreq_pause(struct tg_upreq *r)
{
    if (r->paused)
        return;
    r->paused = 1;
    if (r->conn && r->conn->state == UC_BUSY && r->conn->req == r)
        uv_read_stop((uv_stream_t *)&r->conn->tcp);
}

void tg_upreq_resume(struct tg_upreq *r)
{
    if (!r->paused)
        return;
    r->paused = 0;
    if (r->conn && r->conn->state == UC_BUSY && r->conn->req == r)
        tg__upconn_read_start(r->conn);
}

/* A sign of life (a streamed event): the deadline moves. Recorded, not re-armed: a stream of
 * events would otherwise restart the timer once per event. The timer, when it fires, sees the
 * deadline moved and waits the rest. */
void tg_upreq_touch(struct tg_upreq *r) { r->touched_ms = uv_now(r->up->loop); }

struct tg_slice tg_upreq_content_type(const struct tg_upreq *r) { return tg_slice_of(r->ctype, r->ctype_len); }
struct tg_slice tg_upreq_session_id(const struct tg_upreq *r) { return tg_slice_of(r->sid, r->sid_len); }
int tg_upreq_status(const struct tg_upreq *r) { return r->status; }
int tg_upreq_sent(const struct tg_upreq *r) { return r->sent; }

void tg_upreq_keep_meta(struct tg_upreq *r)
{
    if (r->meta == NULL)
        r->meta = tg_xcalloc(1, sizeof(*r->meta));
}

struct tg_slice tg_upreq_cache_control(const struct tg_upreq *r)
{
    return r->meta ? tg_slice_of(r->meta->cc, r->meta->cc_len) : tg_slice_of("", 0);
}

struct tg_slice tg_upreq_location(const struct tg_upreq *r)
{
    return r->meta ? tg_slice_of(r->meta->loc, r->meta->loc_len) : tg_slice_of("", 0);
}
double tg_upreq_elapsed_ms(const struct tg_upreq *r) { return (double)(uv_hrtime() - r->start_ns) / 1e6; }
const char *tg_upreq_error(const struct tg_upreq *r) { return r->why[0] != '\0' ? r->why : NULL; }
int tg_upreq_handshaking(const struct tg_upreq *r) { return r->conn != NULL && r->conn->state == UC_HANDSHAKE; }

/* ---- upstream ---------------------------------------------------------------------- */

void tg__upstream_reach_failed(struct tg_upstream *u)
{
    u->last_connect_failed = 1;
    if (++u->fails < BACKOFF_AFTER || u->uc->backoff_ms == 0)
        return;
    if (!u->trial && uv_now(u->loop) < u->down_until)
        return; /* connections started before the pause began: the pause stands */
    u->trial = 0;
    long long next = u->backoff_cur_ms ? (long long)u->backoff_cur_ms * 2 : u->uc->backoff_ms;
    u->backoff_cur_ms = (int)(next < u->uc->backoff_max_ms ? next : u->uc->backoff_max_ms);
    u->down_until = uv_now(u->loop) + (uint64_t)u->backoff_cur_ms;
    tg_log(TG_LOG_WARN, "upstream backing off", "upstream=%s failures=%d retry_in_ms=%d", u->uc->name, u->fails,
           u->backoff_cur_ms);
}

void tg__upstream_reached(struct tg_upstream *u)
{
    if (u->last_connect_failed)
        tg_log(TG_LOG_INFO, "upstream reachable again", "upstream=%s", u->uc->name);
    u->last_connect_failed = 0;
    u->fails = 0;
    u->trial = 0;
    u->backoff_cur_ms = 0;
    u->down_until = 0;
}

/* Warm children sit in fixed slots (a child's exit callback clears its own slot). */
static void on_warm_exit(void *ud, int64_t status, int sig)
{
    struct tg_child **slot = ud;
    *slot = NULL;
}

/* The longest stdout line a child may write: one answer, as long as an HTTP upstream's may be. */
static size_t child_max_line(const struct tg_upstream *u)
{
    return u->conf != NULL ? (size_t)u->conf->limits.response_bytes : (size_t)65536 * 1024;
}

static void fill_warm(struct tg_upstream *u)
{
    if (u->uc->transport != TG_UP_STDIO || u->closing)
        return;
    int want = u->uc->warm < 64 ? u->uc->warm : 64;
    int have = 0;
    for (int i = 0; i < 64; i++)
        have += u->warm[i] != NULL;
    for (int i = 0; i < 64 && have < want; i++) {
        if (u->warm[i] != NULL)
            continue;
        if (u->children->live >= (size_t)u->uc->max_children)
            return; /* warm ones count toward max_children too */
        int err = 0;
        struct tg_child *c = tg_child_spawn(u->loop, u->uc, child_max_line(u), u->children, NULL, on_warm_exit,
                                            &u->warm[i], &err);
        if (c == NULL) {
            u->last_connect_failed = 1;
            return;
        }
        u->warm[i] = c;
        have++;
    }
    u->nwarm = have;
}

/* One token must not start a thousand processes: at the cap a session gets no new child (nor
 * while as many again are still leaving). */
static int at_cap(const struct tg_upstream *u)
{
    size_t max = (size_t)u->uc->max_children;
    return u->children->live >= max || u->children->live + u->children->leaving >= 2 * max;
}

struct tg_child *tg_upstream_take_child(struct tg_upstream *u, tg_child_message_cb on_message,
                                        void (*on_exit)(void *, int64_t, int), void *ud, int *err)
{
    struct tg_child *c = NULL;
    for (int i = 0; i < 64 && c == NULL; i++) {
        if (u->warm[i] != NULL && tg_child_alive(u->warm[i])) {
            c = u->warm[i];
            u->warm[i] = NULL;
        }
    }
    if (c != NULL) {
        tg_child_bind(c, on_message, on_exit, ud);
    } else if (at_cap(u)) {
        if (u->metrics != NULL)
            u->metrics->limit_children++;
        tg_log(TG_LOG_WARN, "upstream child refused: upstreams[].max_children reached", "upstream=%s max_children=%d",
               u->uc->name, u->uc->max_children);
        *err = TG_ELIMIT;
        return NULL;
    } else {
        c = tg_child_spawn(u->loop, u->uc, child_max_line(u), u->children, on_message, on_exit, ud, err);
        u->last_connect_failed = c == NULL;
    }
    fill_warm(u);
    return c;
}

static int warm_ready(const struct tg_upstream *u)
{
    for (int i = 0; i < 64; i++)
        if (u->warm[i] != NULL && tg_child_alive(u->warm[i]))
            return 1;
    return 0;
}

int tg_upstream_children_full(const struct tg_upstream *u, int *may_evict)
{
    *may_evict = u->children->leaving < (size_t)u->uc->max_children;
    return !warm_ready(u) && at_cap(u);
}

void tg_upstream_count_eviction(struct tg_upstream *u, int reason) { u->evictions[reason != TG_EVICT_SAME_GRANT]++; }

uint64_t tg_upstream_evictions(const struct tg_upstream *u, int reason)
{
    return u->evictions[reason != TG_EVICT_SAME_GRANT];
}

struct tg_upstream *tg_upstream_new(uv_loop_t *loop, struct tg_conf *conf, const struct tg_upstream_conf *uc,
                                    struct tg_metrics *m)
{
    struct tg_upstream *u = tg_xcalloc(1, sizeof(*u));
    u->loop = loop;
    u->uc = uc;
    u->conf = conf ? tg_conf_ref(conf) : NULL;
    u->refcnt = 1;
    u->metrics = m;
    u->children = tg_child_tally_new();
    tg_list_init(&u->idle);
    tg_list_init(&u->busy);
    tg_list_init(&u->queue);
    tg_list_init(&u->corked);
    if (uc->host != NULL && (uv_ip4_addr(uc->host, uc->port, (struct sockaddr_in *)&u->addr) == 0 ||
                             uv_ip6_addr(uc->host, uc->port, (struct sockaddr_in6 *)&u->addr) == 0))
        u->addr_literal = 1;
    fill_warm(u);
    return u;
}

void tg__upstream_maybe_free(struct tg_upstream *u)
{
    if (u->refcnt > 0 || u->open_conns > 0 || u->open_reqs > 0)
        return;
    if (u->conf)
        tg_conf_unref(u->conf);
    free(u->discover);
    tg_child_tally_unref(u->children);
    free(u);
}

struct tg_upstream *tg_upstream_ref(struct tg_upstream *u)
{
    u->refcnt++;
    return u;
}

void tg_upstream_unref(struct tg_upstream *u)
{
    if (u == NULL)
        return;
    u->refcnt--;
    tg__upstream_maybe_free(u);
}

static void stop_new_work(struct tg_upstream *u)
{
    u->closing = 1;
    for (int i = 0; i < 64; i++) {
        tg_child_kill(u->warm[i]);
        u->warm[i] = NULL;
    }
    u->nwarm = 0;
    while (!tg_list_empty(&u->idle))
        tg__upconn_close(tg_container_of(u->idle.next, struct tg_upconn, link));
}

void tg_upstream_close(struct tg_upstream *u)
{
    stop_new_work(u);
    while (!tg_list_empty(&u->queue)) {
        struct tg_upreq *r = tg_container_of(u->queue.next, struct tg_upreq, qlink);
        tg__upreq_finish(r, TG_ECLOSED);
    }
    u->refcnt++; /* tg__upconn_close may release the last request: free only at the end */
    while (!tg_list_empty(&u->busy))
        tg__upconn_close(tg_container_of(u->busy.next, struct tg_upconn, link));
    u->refcnt -= 2; /* the one just taken and the owner's */
    tg__upstream_maybe_free(u);
}

void tg_upstream_retire(struct tg_upstream *u)
{
    stop_new_work(u);
    /* Queued requests were never sent and no new connection will be made for them. */
    while (!tg_list_empty(&u->queue))
        tg__upreq_finish_later(tg_container_of(u->queue.next, struct tg_upreq, qlink), TG_ECLOSED);
    tg_upstream_unref(u);
}

const struct tg_upstream_conf *tg_upstream_conf(const struct tg_upstream *u) { return u->uc; }

/* A stdio child made for a would be the one b makes (the command is the same already). */
static int same_spawn(const struct tg_upstream_conf *a, const struct tg_upstream_conf *b)
{
    if ((a->cwd == NULL) != (b->cwd == NULL) || (a->cwd != NULL && strcmp(a->cwd, b->cwd) != 0))
        return 0;
    size_t i = 0;
    for (; a->env != NULL && b->env != NULL && a->env[i] && b->env[i]; i++)
        if (strcmp(a->env[i], b->env[i]) != 0)
            return 0;
    return (a->env == NULL || a->env[i] == NULL) && (b->env == NULL || b->env[i] == NULL);
}

void tg_upstream_set_conf(struct tg_upstream *u, struct tg_conf *conf, const struct tg_upstream_conf *uc)
{
    if (conf)
        tg_conf_ref(conf);
    if (u->conf)
        tg_conf_unref(u->conf);
    if (u->uc->protocol != uc->protocol && !u->probing)
        u->era = TG_UP_ERA_UNKNOWN; /* told to speak another era: the verdict is made again */
    int respawn = u->uc->transport == TG_UP_STDIO && !same_spawn(u->uc, uc);
    u->conf = conf;
    u->uc = uc;
    if (respawn) {
        /* Warm children were started with the old env, env_pass or cwd: one made for the old
         * conf must not go to a session of the new (a variable taken out of env stays out). */
        for (int i = 0; i < 64; i++) {
            tg_child_kill(u->warm[i]);
            u->warm[i] = NULL;
        }
        fill_warm(u);
    }
    /* Idle TLS connections were made with the old tls = { … } (a rotated CA, a new client
     * certificate): new ones use the new; busy ones finish their exchange first. */
    while (uc->tls && !tg_list_empty(&u->idle))
        tg__upconn_close(tg_container_of(u->idle.next, struct tg_upconn, link));
    tg__upstream_serve_queue(u); /* a larger pool may take queued calls now */
}

void tg_upstream_stats(const struct tg_upstream *u, size_t *total, size_t *idle, size_t *queued, size_t *dedicated)
{
    *total = u->npooled;
    *idle = u->nidle;
    *queued = u->nqueued;
    *dedicated = u->ndedicated;
}

int tg_upstream_reachable(const struct tg_upstream *u) { return !u->last_connect_failed; }
