/* Roots the operator pins for a server (upstreams[].roots, grants[].roots; parsed and checked in
 * core/conf/grants.c). With roots pinned, the gateway answers the server's roots/list itself with
 * exactly them (core/call/call.c, core/bridge/input.c, core/mcp/mrtr.c), a client is never asked, and a
 * client's notifications/roots/list_changed goes nowhere: a filesystem server takes the folders
 * it may touch from its client's roots, so pinning them is what keeps a read-only policy
 * read-only. This file holds what the call paths share: which roots a session has, the answer
 * to a roots/list, and what a client's initialize and list_changed become. */
#ifndef TG_ROOTS_H
#define TG_ROOTS_H

#include "core/base/buf.h"

struct tg_conf;
struct tg_roots;
struct tg_msg;
struct tg_server;
struct tg_session;
struct tg_upstream_conf;

/* The roots pinned for session s (may be NULL) on upstream uc: its grant's (grants[].roots, from
 * the server's current conf) if it pins any, else the upstream's; NULL if neither does (its
 * server's roots/list then goes to a client as any server request). A session whose grant is no
 * longer in the conf (a reload removed it) has none pinned while some grant pins roots: an empty
 * list, never its client's (without grant pins, its upstream's roots decide, as for any session). */
const struct tg_roots *tg_roots_of_session(struct tg_server *srv, const struct tg_session *s,
                                           const struct tg_upstream_conf *uc);
/* After a reload (srv->conf is the new conf, old the one before): 1 if the server of 2025
 * session s must be told its roots changed (notifications/roots/list_changed), because its
 * pinned roots are new or other than they were; it would otherwise keep the roots it had (its
 * client's, or the old pins) until the session ends, asking again only when it chooses. */
int tg_roots_changed(struct tg_server *srv, const struct tg_conf *old, const struct tg_session *s);
/* b (initialized here, the caller disposes it): the JSON-RPC response with id that answers a
 * roots/list with the pinned roots r. */
void tg_roots_answer(struct tg_buf *b, struct tg_slice id, const struct tg_roots *r);

/* An initialize m for a server whose roots are pinned (r, or NULL: nothing to do) declares the
 * roots capability, whether or not its client did, so the server asks (and gets the pinned
 * roots), and without listChanged (the client's changes are not the server's). */
void tg_roots_advertise(const struct tg_roots *r, struct tg_msg *m);
/* 1 if m is a client's notifications/roots/list_changed that must not reach a server whose roots
 * are pinned (r non-NULL). */
int tg_roots_drop(const struct tg_roots *r, const struct tg_msg *m);

#endif
