/* The admin throttle (core/app/throttle.c): wrong admin tokens, from the approvals page's login
 * (POST /admin/ui/login) and from the bearer-token admin API (/admin/approvals..., /admin/reload),
 * fill one leaky bucket per peer address (TG_ADMIN_THROTTLE_PEER_BURST at once, then one per
 * TG_ADMIN_THROTTLE_PEER_MS) and a global one (..._GLOBAL_...), like nginx's limit_req. A request
 * that meets a full bucket is answered 429 with Retry-After and its token is not looked at. The
 * address table holds TG_ADMIN_THROTTLE_PEERS entries (the one seen least recently, drained ones
 * first, makes room). Each lockout is logged once, by the door that met it first. */
#ifndef TG_ADMIN_THROTTLE_H
#define TG_ADMIN_THROTTLE_H

#include "core/base/buf.h"

#define TG_ADMIN_THROTTLE_PEERS 256
#define TG_ADMIN_THROTTLE_PEER_BURST 5u
#define TG_ADMIN_THROTTLE_PEER_MS 12000u /* 5 wrong tokens a minute per address */
#define TG_ADMIN_THROTTLE_GLOBAL_BURST 30u
#define TG_ADMIN_THROTTLE_GLOBAL_MS 2000u /* 30 a minute from all addresses together */

struct tg_conn;
struct tg_server;

/* Where an admin token came in: each is counted apart in /metrics and named in the lockout line. */
enum tg_admin_door {
    TG_ADMIN_DOOR_PAGE, /* the approvals page's login form */
    TG_ADMIN_DOOR_API,  /* an Authorization: Bearer header on the admin API */
};

/* Before a token is looked at: 0 to go on, else the Retry-After seconds of a 429 (counted as
 * throttled, the lockout logged when it begins). */
unsigned tg_admin_throttle_check(struct tg_server *srv, const struct tg_conn *c, enum tg_admin_door door);

/* A token was looked at and was wrong: fills the peer's bucket and the global one. */
void tg_admin_throttle_failed(struct tg_server *srv, const struct tg_conn *c, enum tg_admin_door door);

/* Appends the throttle's /metrics families to out. */
void tg_admin_throttle_metrics(struct tg_buf *out);

#endif
