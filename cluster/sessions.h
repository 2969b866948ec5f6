/* 2025 sessions on any member of a cluster (issue 12): a session's record (grant, upstream,
 * upstream session id, negotiated version) lives in Redis under key_prefix "s:" ID, so that a POST
 * naming it can be served by a gateway that did not make it. Its id is sealed
 * (core/call/session.h), so a forged one is refused without asking Redis. Streams (GET, legacy SSE,
 * WebSocket) stay with the gateway that holds their connection; sessions whose upstream lives
 * inside one gateway (stdio children, legacy SSE streams) are not shared at all.
 *
 * Loop thread only. */
#ifndef TG_CLUSTER_SESSIONS_H
#define TG_CLUSTER_SESSIONS_H

#include <stdint.h>

#include "core/base/buf.h"

struct tg_cluster;
struct tg_cluster_fetch;

/* What another gateway needs to serve a session. Strings borrowed for the callback. */
struct tg_cluster_session_rec {
    const char *grant;
    const char *upstream;   /* the upstream's name */
    const char *up_session; /* the upstream's Mcp-Session-Id, or NULL */
    const char *proto;
    int up_modern;          /* a 2025 session bridged to a 2026-07-28 upstream */
    const char *client_caps; /* up_modern: its initialize's capabilities (JSON), or NULL */
    int log_level;
    const char *instance;   /* the gateway that made it */
};

/* found: 1 with rec, 0 no such session (or expired), -1 Redis failed (why). Never called
 * inside tg_cluster_session_fetch(). */
typedef void (*tg_cluster_session_cb)(void *ud, int found, const struct tg_cluster_session_rec *rec, const char *why);

struct tg_session;
struct tg_upstream_conf;
/* A session of this gateway is ready (initialize answered): share it if its upstream can be
 * reached from any member (Streamable HTTP, or a 2025 session bridged to a 2026-07-28 upstream).
 * Sets s->shared. */
void tg_cluster_session_share(struct tg_cluster *cl, struct tg_session *s, const struct tg_upstream_conf *uc);
/* The session was used here: its record's expiry is pushed back (at most every ttl/8). */
void tg_cluster_session_used(struct tg_cluster *cl, struct tg_session *s, uint64_t now_ms);

/* Write (or rewrite) the record, expiring after cluster.session_ttl_ms without use. */
void tg_cluster_session_publish(struct tg_cluster *cl, const char *id, const struct tg_cluster_session_rec *rec);
/* The session was used: push its expiry back (fire and forget). */
void tg_cluster_session_touch(struct tg_cluster *cl, const char *id);
/* DELETE: the record goes, and every member is told (key_prefix "sessions:end"), so that the
 * ones holding a copy end it too. */
void tg_cluster_session_forget(struct tg_cluster *cl, const char *id);
/* Hear the ends other members announce: ended(ud, id) for each (this member's own too). */
void tg_cluster_sessions_watch(struct tg_cluster *cl, void (*ended)(void *ud, const char *id), void *ud);
/* Read a record. The handle is good until cb runs, for tg_cluster_session_cancel (after which
 * cb does not run). */
struct tg_cluster_fetch *tg_cluster_session_fetch(struct tg_cluster *cl, const char *id, tg_cluster_session_cb cb,
                                                  void *ud);
void tg_cluster_session_cancel(struct tg_cluster_fetch *f);

#endif
