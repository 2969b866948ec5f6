/* The credential a call carries to its upstream, and the send that waits for it
 * (core/call/upauth.c: tg_call_send): a grant's
 * upstream_headers, or a token the upstream's token_exchange got for the caller's JWT
 * (upstream/token_exchange.h). The caller's own Authorization header never goes upstream.
 *
 * The JWT a token exchange needs is kept no longer than its call (tg_call_upauth_from) or, for
 * a channel's calls (WebSocket, legacy SSE: their messages carry no credential), its session
 * (tg_call_upauth_session), and only when the upstream exchanges tokens. */
#ifndef TG_CALL_UPAUTH_H
#define TG_CALL_UPAUTH_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "upstream/token_exchange.h"

struct tg_call;
struct tg_exchange;
struct tg_session;

/* What a call keeps for its upstream credential. Owner: the call (k->upauth); freed by
 * tg__call_upauth_free (below; core/call/call.c calls it) when the call's memory goes. */
struct tg_upauth {
    char *who;        /* "issuer length:issuer subject": whose token, or NULL */
    char *token;      /* the caller's JWT (a secret: wiped when freed), or NULL */
    size_t token_len;
    struct tg_tx_wait wait;
    struct tg_buf held; /* the message while the exchange runs */
    int held_body;      /* 0: a GET (no body) */
    uint64_t timeout;
    /* The last send with an exchanged token: the message again, for one more try with a new
     * token if the upstream refuses that one (HTTP 401). */
    int exchanged;          /* the last send carried one */
    int retried;            /* the call sent again after a 401 once: never twice */
    uint8_t key[32];        /* its cache key */
    uint8_t token_sha[32];  /* the token's digest (the token is not kept) */
    struct tg_buf resend;
    int resend_body;
    uint64_t resend_timeout;
    /* tg__call_upauth_refused, reached through here by core/call/upcalls.c (which upauth.c
     * needs: a direct call would make the two need each other) */
    int (*refused)(struct tg_call *k);
};

/* k's upstream exchanges tokens and request x carries a JWT: k keeps who and the token. */
void tg_call_upauth_from(struct tg_call *k, const struct tg_exchange *x);
/* Whose JWT x carries, for a token exchange's cache ("<issuer length>:<issuer><subject>",
 * malloc'd), or NULL when x has none: for a copy of x that outlives x->who (x.subject_who). */
char *tg_call_upauth_who(const struct tg_exchange *x);
/* The same for a channel's session s, from the request that opened it. */
void tg_call_upauth_session(struct tg_session *s, const struct tg_exchange *x);

/* tg_call_send's first step. 0: send now with *auth (header lines, malloc'd, or NULL). 1: the
 * message is held (copied) until the exchange ends, then sent. -1: it cannot be sent; the call
 * was answered -32004 and finished. */
int tg__call_upauth(struct tg_call *k, const char *body, size_t len, uint64_t timeout, char **auth);
/* The upstream answered k's message HTTP 401 (struct tg_upstream_events.unauthorized): an
 * exchanged token it carried leaves the cache at once, and the message goes once more with a
 * token exchanged anew (1). 0: nothing to retry (no exchanged token, or the retry's own 401). */
int tg__call_upauth_refused(struct tg_call *k);
static inline int tg__call_upauth_unauthorized(struct tg_call *k, struct tg_upauth *u)
{
    return u != NULL && u->refused != NULL ? u->refused(k) : 0;
}
/* For core/call/call.c: the call closes (it stops waiting for an exchange); its memory goes.
 * Inline here, so that the call needs nothing of upauth.c, which needs the call. */
static inline void tg__call_upauth_cancel(struct tg_upauth *u, int *waiting)
{
    if (u != NULL)
        tg_tx_wait_cancel(&u->wait);
    *waiting = 0;
}

static inline void tg__call_upauth_free(struct tg_upauth *u)
{
    if (u == NULL)
        return;
    tg_tx_wait_cancel(&u->wait);
    free(u->who);
    if (u->token != NULL)
        memset(u->token, 0, u->token_len); /* the caller's JWT */
    free(u->token);
    tg_buf_dispose(&u->held);
    tg_buf_dispose(&u->resend);
    free(u);
}

#endif
