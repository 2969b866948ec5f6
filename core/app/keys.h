/* The fetching driver of the JWT issuers whose keys come from a URL (jwt[].jwks_url) or from the
 * issuer's discovery document (jwt[].discovery): one source per distinct issuer, source and CA,
 * holding that issuer's keyring (policy/keyring.h) across reloads.
 *
 * Everything runs on the loop through upstream/fetch.h: a fetch when the server starts (or when a
 * reload brings a new source), a timer for the next refresh (the answer's Cache-Control max-age
 * within refresh_min_s..refresh_max_s; after a failure sooner, never more often than 1 s), and a
 * refetch when verification meets a kid the set lacks, at most once per refresh_min_s per source.
 * A request whose token carried such a kid waits for that refetch (tg_keys_park) and is routed
 * again when it ends, once: a token signed with a freshly rotated key works on its first request.
 *
 * Owner: the app (struct tg_app.keys), made in tg_server_init, freed in tg_server_dispose. */
#ifndef TG_APP_KEYS_H
#define TG_APP_KEYS_H

#include <uv.h>

#include "core/base/buf.h"

struct tg_conf;
struct tg_conn;
struct tg_server;
struct tg_keys;

/* route: what routes a request that waited (tg_route_handle; passed in, so that the route table
 * and this driver do not call each other by name). */
struct tg_keys *tg_keys_new(struct tg_server *srv, void (*route)(struct tg_server *srv, struct tg_conn *c));
/* Give conf's fetched issuers their keyrings: the source of the same issuer, source and CA if
 * there is one (its keys stay), else a new one (fetched at once once started). Call before conf
 * serves a request. */
void tg_keys_attach(struct tg_keys *ks, struct tg_conf *conf);
/* After a reload swapped conf in: sources no issuer of it uses go (their waiting requests are
 * routed again under the new conf). */
void tg_keys_sweep(struct tg_keys *ks, const struct tg_conf *conf);
/* The server starts: every source fetches. */
void tg_keys_start(struct tg_keys *ks);
/* 1 if every fetched issuer of conf has a set; else 0 and why (issuer and reason) appended. */
int tg_keys_ready(const struct tg_conf *conf, struct tg_buf *why);
/* Right after authentication failed with tg_auth_keys_refetching: hold c until that refetch ends,
 * then route it again (1); 0 if it cannot wait (it was routed again already): answer it now. */
int tg_keys_park(struct tg_keys *ks, struct tg_conn *c);
/* Prometheus lines: fetches by result, keys held, unknown kids and the refetches they started. */
void tg_keys_metrics(struct tg_keys *ks, struct tg_buf *out);
/* Cancel fetches and timers; waiting requests are let go. The loop then runs to close handles. */
void tg_keys_free(struct tg_keys *ks);

#endif
