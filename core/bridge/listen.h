/* subscriptions/listen across the eras (core/bridge/listen.c): a 2026 client's listen served
 * from a 2025 upstream session's GET stream, and a 2025 session's GET stream sent to a
 * 2026-07-28-only upstream as a listen. */
#ifndef TG_BRIDGE_LISTEN_H
#define TG_BRIDGE_LISTEN_H

#include "core/base/json.h"

struct tg_call;
struct tg_session;

/* Listen k (a 2026 client's, on a 2025 upstream session, up_caps what its initialize declared)
 * is served from the session's GET stream: acknowledged now, open until its client goes. */
void tg_bridge_listen_local(struct tg_call *k, const struct cJSON *params, const char *up_caps);
/* The GET stream k of a 2025 session on a 2026-07-28-only upstream, sent as a listen for the
 * list changes the upstream declared and the resources in uris (a JSON array, or NULL). */
void tg_bridge_listen_upstream(struct tg_call *k, const char *uris);
/* Such a session's client subscribed to (add 1) or unsubscribed from uri: the session keeps the
 * list, and its GET stream's listen, if it has one, is made again with it (the old one ends).
 * -1 (nothing changed) when the list is full: TG_LISTEN_URIS_MAX resources or
 * TG_LISTEN_URIS_BYTES of them, which is all a client can make a session hold this way. */
#define TG_LISTEN_URIS_MAX 256
#define TG_LISTEN_URIS_BYTES (64u << 10)
int tg_bridge_listen_resubscribe(struct tg_session *s, const char *uri, int add);

#endif
