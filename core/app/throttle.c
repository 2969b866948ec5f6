/* The admin throttle: wrong admin tokens from the approvals page's login and from the admin API's
 * bearer header fill the same buckets. The contract is in core/app/throttle.h.
 *
 * nginx limit_req: a leaky bucket per key. Every wrong token fills the bucket of the peer's
 * address and the global one by one; a bucket drains at its rate. A request that meets a full
 * bucket (per address, or the global one) gets 429 and Retry-After before its token is looked
 * at, so a refused attempt tests nothing (and costs nothing: it does not fill the bucket). A
 * right token never fills one. The table is fixed storage: when it is full, the address seen
 * least recently makes room, drained ones first (the global bucket bounds what an attacker gains
 * by rotating addresses to evict their own). */
#include "core/app/throttle.h"

#include <stdio.h>
#include <string.h>

#include "core/app/server.h"
#include "core/base/log.h"
#include "transports/http1/http1.h"

struct throttle_bucket {
    double level;    /* wrong tokens not drained yet */
    uint64_t last_ms; /* loop time level was computed at */
    int locked;      /* a lockout was logged and has not ended */
};

struct throttle_peer {
    char addr[48]; /* the peer's address without its port; "" when the slot is free */
    struct throttle_bucket b;
};

static struct throttle_peer peers[TG_ADMIN_THROTTLE_PEERS];
static struct throttle_bucket global_bucket;
static struct {
    uint64_t failures[2], throttled[2], evicted; /* [enum tg_admin_door] */
} tstats;

static const char *const lockout_msg[2] = {"admin page login throttled", "admin API bearer throttled"};

static void bucket_drain(struct throttle_bucket *b, uint64_t now, uint64_t interval_ms)
{
    if (now > b->last_ms) {
        b->level -= (double)(now - b->last_ms) / (double)interval_ms;
        if (b->level < 0)
            b->level = 0;
    }
    b->last_ms = now;
}

/* Seconds until one more wrong token fits, or 0 when it fits now. */
static unsigned bucket_wait_s(const struct throttle_bucket *b, unsigned burst, uint64_t interval_ms)
{
    double over = b->level - (double)(burst - 1);
    if (over <= 0)
        return 0;
    return (unsigned)(over * (double)interval_ms / 1000.0) + 1;
}

static void peer_addr(const struct tg_conn *c, char out[48])
{
    tg_conn_peer_ip(c, out);
}

/* The peer's slot; with make, a new one (evicting) when it has none; else NULL. */
static struct throttle_peer *peer_slot(const char *addr, uint64_t now, int make)
{
    struct throttle_peer *victim = NULL;
    for (size_t i = 0; i < TG_ADMIN_THROTTLE_PEERS; i++) {
        struct throttle_peer *p = &peers[i];
        if (p->addr[0] != '\0' && strcmp(p->addr, addr) == 0)
            return p;
        if (!make)
            continue;
        if (p->addr[0] == '\0') {
            if (victim == NULL || victim->addr[0] != '\0')
                victim = p;
            continue;
        }
        if (victim != NULL && victim->addr[0] == '\0')
            continue;
        bucket_drain(&p->b, now, TG_ADMIN_THROTTLE_PEER_MS);
        int drained = p->b.level == 0, vdrained = victim != NULL && victim->b.level == 0;
        if (victim == NULL || (drained && !vdrained) || (drained == vdrained && p->b.last_ms < victim->b.last_ms))
            victim = p;
    }
    if (!make)
        return NULL;
    if (victim->addr[0] != '\0')
        tstats.evicted++;
    memset(victim, 0, sizeof(*victim));
    snprintf(victim->addr, sizeof(victim->addr), "%s", addr);
    victim->b.last_ms = now;
    return victim;
}

unsigned tg_admin_throttle_check(struct tg_server *srv, const struct tg_conn *c, enum tg_admin_door door)
{
    uint64_t now = uv_now(srv->loop);
    char addr[48];
    peer_addr(c, addr);
    bucket_drain(&global_bucket, now, TG_ADMIN_THROTTLE_GLOBAL_MS);
    unsigned g = bucket_wait_s(&global_bucket, TG_ADMIN_THROTTLE_GLOBAL_BURST, TG_ADMIN_THROTTLE_GLOBAL_MS);
    if (g == 0)
        global_bucket.locked = 0;
    struct throttle_peer *p = peer_slot(addr, now, 0);
    unsigned w = 0;
    if (p != NULL) {
        bucket_drain(&p->b, now, TG_ADMIN_THROTTLE_PEER_MS);
        w = bucket_wait_s(&p->b, TG_ADMIN_THROTTLE_PEER_BURST, TG_ADMIN_THROTTLE_PEER_MS);
        if (w == 0)
            p->b.locked = 0;
    }
    unsigned wait = w > g ? w : g;
    if (wait == 0)
        return 0;
    tstats.throttled[door]++;
    if (w > 0 && !p->b.locked) {
        p->b.locked = 1;
        tg_log(TG_LOG_WARN, lockout_msg[door], "scope=peer peer=%s retry_after_s=%u wrong_tokens_per_min=%u",
               addr, w, (unsigned)(60000 / TG_ADMIN_THROTTLE_PEER_MS));
    }
    if (g > 0 && !global_bucket.locked) {
        global_bucket.locked = 1;
        tg_log(TG_LOG_WARN, lockout_msg[door], "scope=global peer=%s retry_after_s=%u wrong_tokens_per_min=%u",
               addr, g, (unsigned)(60000 / TG_ADMIN_THROTTLE_GLOBAL_MS));
    }
    return wait;
}

void tg_admin_throttle_failed(struct tg_server *srv, const struct tg_conn *c, enum tg_admin_door door)
{
    uint64_t now = uv_now(srv->loop);
    char addr[48];
    peer_addr(c, addr);
    struct throttle_peer *p = peer_slot(addr, now, 1);
    bucket_drain(&p->b, now, TG_ADMIN_THROTTLE_PEER_MS);
    p->b.level += 1;
    bucket_drain(&global_bucket, now, TG_ADMIN_THROTTLE_GLOBAL_MS);
    global_bucket.level += 1;
    tstats.failures[door]++;
}

void tg_admin_throttle_metrics(struct tg_buf *out)
{
    size_t live = 0;
    for (size_t i = 0; i < TG_ADMIN_THROTTLE_PEERS; i++)
        live += peers[i].addr[0] != '\0';
    tg_buf_appendf(out,
                   "# HELP tollgate_admin_login_failures_total Approvals page logins with a wrong token.\n"
                   "# TYPE tollgate_admin_login_failures_total counter\ntollgate_admin_login_failures_total %llu\n"
                   "# HELP tollgate_admin_login_throttled_total Approvals page logins refused with 429 by the login "
                   "throttle.\n# TYPE tollgate_admin_login_throttled_total counter\n"
                   "tollgate_admin_login_throttled_total %llu\n"
                   "# HELP tollgate_admin_login_throttle_addresses Peer addresses held by the login throttle.\n"
                   "# TYPE tollgate_admin_login_throttle_addresses gauge\ntollgate_admin_login_throttle_addresses %zu\n"
                   "# HELP tollgate_admin_login_throttle_evictions_total Addresses dropped from the full login "
                   "throttle table to make room.\n# TYPE tollgate_admin_login_throttle_evictions_total counter\n"
                   "tollgate_admin_login_throttle_evictions_total %llu\n"
                   "# HELP tollgate_admin_auth_failures_total Admin API requests with a wrong bearer token.\n"
                   "# TYPE tollgate_admin_auth_failures_total counter\ntollgate_admin_auth_failures_total %llu\n"
                   "# HELP tollgate_admin_auth_throttled_total Admin API requests refused with 429 by the login "
                   "throttle.\n# TYPE tollgate_admin_auth_throttled_total counter\n"
                   "tollgate_admin_auth_throttled_total %llu\n",
                   (unsigned long long)tstats.failures[TG_ADMIN_DOOR_PAGE],
                   (unsigned long long)tstats.throttled[TG_ADMIN_DOOR_PAGE], live, (unsigned long long)tstats.evicted,
                   (unsigned long long)tstats.failures[TG_ADMIN_DOOR_API],
                   (unsigned long long)tstats.throttled[TG_ADMIN_DOOR_API]);
}
