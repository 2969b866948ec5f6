/* HTTP upstreams: a keep-alive HTTP/1.1 connection pool per upstream and the
 * requests that run on it.
 *
 * tg_upreq_start() sends one HTTP request. The pool hands it an idle
 * connection, opens a new one while under pool.size, or queues it (at most
 * pool.queue, each with pool.queue_timeout_ms). A "dedicated" request (a
 * long-lived GET stream) gets a connection of its own, outside the pool.
 *
 * Callbacks, in order: on_head once (status and headers known), on_data for
 * each piece of body as it arrives, then on_done exactly once. No callback ever
 * runs inside tg_upreq_start(): a failure found there (EMFILE, a refused
 * connect, a full queue) is delivered from the loop. After on_done,
 * or after tg_upreq_cancel(), the request is freed and no callback runs.
 * on_done's err is 0 (complete), TG_ETIMEDOUT, TG_ELIMIT (queue full or
 * queue deadline) or another negative error (connect/reset/malformed). */
#ifndef TG_UPSTREAM_POOL_H
#define TG_UPSTREAM_POOL_H

#include <uv.h>

#include "core/base/buf.h"
#include "core/conf/conf.h"
#include "core/base/metrics.h"
#include "upstream/child.h"

struct tg_upstream;
struct tg_upreq;

/* Data only: one static const table per kind of request (upstream/streamable.c, legacy_sse.c); a
 * request points at it and never frees it. */
struct tg_upreq_cbs {
    void (*on_head)(struct tg_upreq *r, int status, void *ud);
    void (*on_data)(struct tg_upreq *r, const char *p, size_t n, void *ud);
    void (*on_done)(struct tg_upreq *r, int err, void *ud);
};

/* uc points into conf, of which the upstream keeps a reference (conf may be NULL outside the
 * gateway: unit tests, `tollgate scan`; a child's stdout lines are then capped at 64 MiB).
 * The caller owns the one reference the upstream starts with. */
struct tg_upstream *tg_upstream_new(uv_loop_t *loop, struct tg_conf *conf, const struct tg_upstream_conf *uc,
                                    struct tg_metrics *m);
/* Shutdown: closes every connection; pending requests get on_done(TG_ECLOSED) from inside this
 * call. Drops the caller's reference; the memory goes once handles are closed and no one else
 * holds a reference. */
void tg_upstream_close(struct tg_upstream *u);
/* Reload removed it: no new connection or child from now on, idle connections closed, requests
 * in flight finish normally. Drops the caller's reference. */
void tg_upstream_retire(struct tg_upstream *u);
/* Holders that outlive the server's reference (calls, links) take one of their own. */
struct tg_upstream *tg_upstream_ref(struct tg_upstream *u);
void tg_upstream_unref(struct tg_upstream *u);
const struct tg_upstream_conf *tg_upstream_conf(const struct tg_upstream *u);
/* Reload: the same upstream (same name and URL) under a new conf; pooled connections stay. */
void tg_upstream_set_conf(struct tg_upstream *u, struct tg_conf *conf, const struct tg_upstream_conf *uc);
void tg_upstream_stats(const struct tg_upstream *u, size_t *total, size_t *idle, size_t *queued, size_t *dedicated);
/* 1 if a connection succeeded recently or none failed yet. */
int tg_upstream_reachable(const struct tg_upstream *u);

struct tg_child;
/* stdio upstreams: a child for a new session, warm if one is ready (another is then started). */
struct tg_child *tg_upstream_take_child(struct tg_upstream *u, tg_child_message_cb on_message,
                                        void (*on_exit)(void *, int64_t, int), void *ud, int *err);
/* stdio: 1 if tg_upstream_take_child() would refuse now (max_children in use, no warm child);
 * *may_evict then says whether a session giving up its child would make room (the children
 * already leaving are fewer than max_children). */
int tg_upstream_children_full(const struct tg_upstream *u, int *may_evict);
/* Why a session gave up its child: for another session of its grant, or of another grant. */
enum { TG_EVICT_SAME_GRANT = 0, TG_EVICT_OTHER_GRANT = 1 };
void tg_upstream_count_eviction(struct tg_upstream *u, int reason);
uint64_t tg_upstream_evictions(const struct tg_upstream *u, int reason);

/* extra_headers: complete "Name: value\r\n" lines (may be NULL). timeout_ms 0 = none. */
struct tg_upreq *tg_upreq_start(struct tg_upstream *u, const char *method, const char *extra_headers,
                                const char *body, size_t len, int dedicated, uint64_t timeout_ms,
                                const struct tg_upreq_cbs *cbs, void *ud);
/* The same to an explicit request target (a legacy SSE upstream's endpoint) instead of the URL's path. */
struct tg_upreq *tg_upreq_start_to(struct tg_upstream *u, const char *method, const char *target,
                                   const char *extra_headers, const char *body, size_t len, int dedicated,
                                   uint64_t timeout_ms, const struct tg_upreq_cbs *cbs, void *ud);
void tg_upreq_cancel(struct tg_upreq *r);
void tg_upreq_pause(struct tg_upreq *r);
void tg_upreq_resume(struct tg_upreq *r);
/* Restart the call timer (progress was made). */
void tg_upreq_touch(struct tg_upreq *r);
/* Response headers the gateway uses (valid from on_head until on_done). */
struct tg_slice tg_upreq_content_type(const struct tg_upreq *r);
struct tg_slice tg_upreq_session_id(const struct tg_upreq *r);
int tg_upreq_status(const struct tg_upreq *r);
/* Keep the answer's Cache-Control and Location too (call right after tg_upreq_start; for
 * upstream/fetch.c). Then readable from on_head until on_done; empty when absent. */
void tg_upreq_keep_meta(struct tg_upreq *r);
struct tg_slice tg_upreq_cache_control(const struct tg_upreq *r);
struct tg_slice tg_upreq_location(const struct tg_upreq *r);
/* 1 once the request was written (in part or whole) to a connection: the upstream may have it.
 * A request that failed with this 0 certainly never reached the upstream. */
int tg_upreq_sent(const struct tg_upreq *r);
double tg_upreq_elapsed_ms(const struct tg_upreq *r);
/* Why on_done's err came, in words when the pool has them (the TLS layer's reason for a failed
 * handshake or a TLS error, llhttp's for a malformed answer), else NULL. Valid in on_done. */
const char *tg_upreq_error(const struct tg_upreq *r);
/* 1 while r waits for its connection's TLS handshake (connected, nothing sent yet). */
int tg_upreq_handshaking(const struct tg_upreq *r);

/* The era an upstream speaks (upstream/probe.c). */
enum tg_up_era {
    TG_UP_ERA_UNKNOWN = 0, /* not probed yet, or the probe could not reach it */
    TG_UP_ERA_2025,        /* initialize and sessions only */
    TG_UP_ERA_DUAL,        /* both: each client era is served in its own */
    TG_UP_ERA_2026,        /* 2026-07-28 only */
};
/* Start the probe if the verdict is not known and none runs (Streamable HTTP upstreams with
 * protocol "auto" or "2026"; the others are 2025 without asking). The verdict comes later: never
 * inside this call. */
void tg_upstream_probe(struct tg_upstream *u);
enum tg_up_era tg_upstream_era(const struct tg_upstream *u);
int tg_upstream_probing(const struct tg_upstream *u);
/* fn(arg) runs (from the loop) when a probe ends, with or without a verdict. */
void tg_upstream_on_verdict(struct tg_upstream *u, void (*fn)(void *arg), void *arg);
/* The upstream's server/discover result object (JSON text), or NULL. */
const char *tg_upstream_discover(const struct tg_upstream *u);

#endif
