/* What binds a long-lived client stream to the credential that opened it: a WebSocket or legacy
 * SSE channel (transports/channel.c), and a Streamable HTTP stream (transports/streamable.c): a
 * 2025 session's GET stream, a POST answer that streams, a 2026 subscriptions/listen.
 *
 * A watch keeps a copy of the credential (policy/auth.h: digests and names, never the token). A
 * reload asks every watch whether the new conf still takes its credential
 * (tg_cred_watches_recheck); a JWT's watch ends at exp + skew on a timer of its own (no polling;
 * a far exp is waited for a year at a time). Either way the owner's end callback runs once, with
 * the reason, from the reload or from the loop (never inside a call of the owner's). Every message
 * the owner is given afterwards is refused (tg_cred_watch_check), so nothing goes through in the
 * window before the client's side has closed.
 *
 * Owner: the stream it watches, which calls tg_cred_watch_free() when it goes (the watch's memory
 * goes with its timer's close callback). */
#ifndef TG_CRED_WATCH_H
#define TG_CRED_WATCH_H

#include <stdint.h>

#include "core/base/buf.h"

struct tg_auth_cred;
struct tg_exchange;
struct tg_conf;
struct tg_conn;
struct tg_server;
struct tg_cred_watch;

/* The credential ended: why is a static string ("credential no longer valid", "token expired"). */
typedef void (*tg_cred_watch_cb)(void *ud, const char *why);

/* A watch over cred (copied) for the owner ud; on_end runs once when it ends. A credential the
 * current conf does not take (it changed since the request was admitted) ends on the next turn
 * of the loop. */
struct tg_cred_watch *tg_cred_watch_new(struct tg_server *srv, const struct tg_auth_cred *cred, tg_cred_watch_cb on_end,
                                        void *ud);
/* What the router found of a request's JWT (its principal, policy/auth.h), kept by a stream that
 * begins later so that the token is not verified again then. Value type; zeroed: nothing. */
struct tg_cred_hint {
    uint64_t conf_serial; /* the conf it was verified under */
    int64_t exp_s;
    int jwt;              /* 1 + the index of its jwt[] issuer; 0: not a JWT */
};
/* The hint of the request x (its principal, if any). */
void tg_cred_hint_of(const struct tg_exchange *x, struct tg_cred_hint *h);
/* The same as tg_cred_watch_new for the request connection c carries now (its Authorization
 * header, or its client certificate), admitted to the grant named grant; hint: what was found of
 * it when it was admitted, or NULL. */
struct tg_cred_watch *tg_cred_watch_of_request(struct tg_server *srv, const struct tg_conn *c, const char *grant,
                                               const struct tg_cred_hint *hint, tg_cred_watch_cb on_end, void *ud);
/* The credential the request connection c carries now, as tg_cred_watch_of_request would watch it
 * (a grant gone from the conf: a credential that never holds). */
void tg_cred_of_request(struct tg_server *srv, const struct tg_conn *c, const char *grant,
                        const struct tg_cred_hint *hint, struct tg_auth_cred *out);
/* A stream's credential into out: its watch's (w), else what its request connection c carries
 * now; 1, or 0 with neither. */
int tg_cred_of_stream(const struct tg_cred_watch *w, struct tg_server *srv, const struct tg_conn *c,
                      const char *grant, const struct tg_cred_hint *hint, struct tg_auth_cred *out);
/* The credential w watches (NULL for NULL). */
const struct tg_auth_cred *tg_cred_watch_cred(const struct tg_cred_watch *w);
/* The owner lets go (NULL: nothing). on_end never runs after this. */
void tg_cred_watch_free(struct tg_cred_watch *w);
/* NULL while the credential holds under conf (and a JWT's exp has not passed); else why not.
 * Once it ended it stays ended, and the owner's on_end has run (here, if nothing ran it yet:
 * the caller must hold its owner). */
const char *tg_cred_watch_check(struct tg_cred_watch *w, const struct tg_conf *conf);
/* After a reload to srv->conf: every watch whose credential the new conf does not take ends. */
void tg_cred_watches_recheck(struct tg_server *srv);

/* Legacy SSE sessions whose stream a credential ended, remembered (a bounded number, the oldest
 * forgotten first) so that a POST /messages for one gets 401 with the reason instead of 404. */
void tg_cred_ended_note(struct tg_server *srv, const char *sid, const char *grant, const char *why);
/* Why the session sid of grant was ended, or NULL. */
const char *tg_cred_ended_why(struct tg_server *srv, struct tg_slice sid, const char *grant);
/* The server goes: what it remembered goes too (the watches went with their streams). */
void tg_cred_watches_dispose(struct tg_server *srv);

#endif
