/* The credential a call carries to its upstream (core/call/upauth.h).
 *
 * A grant's upstream_headers are static: looked up by the call's grant and upstream in the
 * conf in force. A token_exchange upstream gets, for a caller with a JWT, a token the exchange
 * made for that caller's subject (cached per subject and upstream); the call waits for it
 * without blocking the loop, its message held. A caller without a JWT (a static token, a
 * certificate, an anonymous grant) has no token to exchange: its grant's upstream_headers for
 * that upstream are used if it has them, else the call is refused with -32004. */
#include "core/call/upauth.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/log.h"
#include "core/base/sha256.h"
#include "core/call/call.h"
#include "core/conf/conf.h"
#include "policy/auth.h"
#include "upstream/pool/pool.h"
#include "upstream/token_exchange.h"
#include "upstream/upstream.h"

static void send_now(struct tg_call *k, const char *body, size_t len, uint64_t timeout, const char *auth);

#define TX_CACHE_ENTRIES 10000
#define TX_CACHE_BYTES (16u << 20)

static void wipe_free(char *p, size_t n)
{
    if (p == NULL)
        return;
    memset(p, 0, n);
    free(p);
}

/* "<issuer length>:<issuer><subject>": one subject of one issuer. */
static char *who_of(const struct tg_exchange *x)
{
    if (x->subject_who != NULL)
        return tg_xstrdup(x->subject_who);
    const struct tg_principal *p = x->who;
    const struct tg_conf *c = x->srv->conf;
    const char *iss = p->jwt > 0 && (size_t)p->jwt <= c->njwt && c->jwt[p->jwt - 1].issuer ? c->jwt[p->jwt - 1].issuer : "";
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appendf(&b, "%zu:%s%s", strlen(iss), iss, p->subject);
    tg_buf_append(&b, "", 1);
    return tg_buf_release(&b);
}

static int has_jwt(const struct tg_exchange *x)
{
    return x->subject_token != NULL && x->subject_token_len > 0 &&
           (x->subject_who != NULL || (x->who != NULL && x->who->jwt > 0));
}

static int wants_subject(const struct tg_exchange *x)
{
    return x->uc != NULL && x->uc->token_exchange != NULL && has_jwt(x);
}

char *tg_call_upauth_who(const struct tg_exchange *x) { return has_jwt(x) ? who_of(x) : NULL; }

void tg_call_upauth_from(struct tg_call *k, const struct tg_exchange *x)
{
    if (!wants_subject(x))
        return;
    struct tg_upauth *u = k->upauth;
    if (u == NULL) {
        u = k->upauth = tg_xcalloc(1, sizeof(*u));
        tg_buf_init(&u->held);
        tg_buf_init(&u->resend);
        u->refused = tg__call_upauth_refused;
    }
    free(u->who);
    wipe_free(u->token, u->token_len);
    u->who = who_of(x);
    u->token = tg_xcalloc(1, x->subject_token_len + 1);
    memcpy(u->token, x->subject_token, x->subject_token_len);
    u->token_len = x->subject_token_len;
}

void tg_call_upauth_session(struct tg_session *s, const struct tg_exchange *x)
{
    if (!wants_subject(x))
        return;
    free(s->up_who);
    if (s->up_token != NULL)
        wipe_free(s->up_token, strlen(s->up_token));
    s->up_who = who_of(x);
    s->up_token = tg_xcalloc(1, x->subject_token_len + 1);
    memcpy(s->up_token, x->subject_token, x->subject_token_len);
}

/* The cache key: the subject, and the upstream with its exchange's settings (a reload that
 * changes the audience or scope makes new tokens). */
static void key_of(const char *who, const struct tg_upstream_conf *uc, uint8_t key[32])
{
    const struct tg_token_exchange_conf *x = uc->token_exchange;
    struct tg_buf b;
    tg_buf_init(&b);
    const char *parts[] = {who, uc->name, x->token_endpoint, x->client_id, x->audience, x->scope};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        tg_buf_appends(&b, parts[i] ? parts[i] : "");
        tg_buf_append(&b, "", 1);
    }
    tg_sha256(b.base, b.len, key);
    tg_buf_dispose(&b);
}

/* The lines to send: the grant's upstream_headers (less Authorization when a token replaces it)
 * and the exchanged token. */
static char *lines_of(const struct tg_grant_upheaders *gh, const char *token)
{
    if (gh == NULL && token == NULL)
        return NULL;
    struct tg_buf b;
    tg_buf_init(&b);
    for (size_t i = 0; gh != NULL && i < gh->nheaders; i++) {
        if (token != NULL && strcasecmp(gh->headers[i].name, "authorization") == 0)
            continue;
        tg_buf_appendf(&b, "%s: %s\r\n", gh->headers[i].name, gh->headers[i].value);
    }
    if (token != NULL)
        tg_buf_appendf(&b, "Authorization: Bearer %s\r\n", token);
    tg_buf_append(&b, "", 1);
    return tg_buf_release(&b);
}

static const struct tg_grant_upheaders *grant_headers(struct tg_call *k)
{
    const struct tg_conf *c = k->srv->conf;
    const struct tg_grant_conf *g = k->grant ? tg_conf_find_grant(c, k->grant) : NULL;
    return tg_conf_grant_upheaders(g, up_name(k), c);
}

/* What a send with exchanged token tok needs for a retry after a 401: the message, the token's
 * digest. */
static void keep_for_retry(struct tg_upauth *u, const char *tok, const char *body, size_t len, uint64_t timeout)
{
    u->exchanged = 1;
    tg_sha256(tok, strlen(tok), u->token_sha);
    u->resend.len = 0;
    u->resend_body = body != NULL;
    if (body != NULL)
        tg_buf_append(&u->resend, body, len);
    u->resend_timeout = timeout;
}

int tg__call_upauth_refused(struct tg_call *k)
{
    struct tg_upauth *u = k->upauth;
    if (u == NULL || !u->exchanged)
        return 0;
    u->exchanged = 0;
    int gone = tg_tx_refused(k->srv->token_cache, u->key, u->token_sha);
    if (u->retried || k->closed) {
        tg_log(TG_LOG_WARN, "upstream refused an exchanged token again", "upstream=%s", up_name(k));
        return 0;
    }
    u->retried = 1;
    tg_log(TG_LOG_INFO, "upstream refused an exchanged token: exchanging again", "upstream=%s dropped=%d",
           up_name(k), gone);
    struct tg_buf body = u->resend; /* the send may keep a new copy */
    tg_buf_init(&u->resend);
    int with_body = u->resend_body;
    tg_call_send(k, with_body ? (body.base ? body.base : "") : NULL, body.len, u->resend_timeout);
    tg_buf_dispose(&body);
    return 1;
}

static void on_token(void *ud, const char *token, const char *why)
{
    struct tg_call *k = ud;
    struct tg_upauth *u = k->upauth;
    k->upauth_wait = 0;
    if (token == NULL) {
        tg_call_fail(k, TG_OUT_NOT_SENT, why, -1);
        return;
    }
    char *auth = lines_of(grant_headers(k), token);
    struct tg_buf held = u->held; /* the send may hold again (a message sent twice) */
    tg_buf_init(&u->held);
    keep_for_retry(u, token, u->held_body ? (held.base ? held.base : "") : NULL, held.len, u->timeout);
    send_now(k, u->held_body ? held.base : NULL, held.len, u->timeout, auth);
    tg_buf_dispose(&held);
    wipe_free(auth, strlen(auth));
}

int tg__call_upauth(struct tg_call *k, const char *body, size_t len, uint64_t timeout, char **auth)
{
    *auth = NULL;
    const struct tg_upstream_conf *uc = tg_upstream_conf(k->uprt);
    const struct tg_grant_upheaders *gh = grant_headers(k);
    if (uc->token_exchange == NULL) {
        *auth = lines_of(gh, NULL);
        return 0;
    }
    struct tg_upauth *u = k->upauth;
    const char *who = u != NULL && u->token != NULL ? u->who : k->sess != NULL ? k->sess->up_who : NULL;
    const char *tok = u != NULL && u->token != NULL ? u->token : k->sess != NULL ? k->sess->up_token : NULL;
    if (tok == NULL && gh != NULL) {
        *auth = lines_of(gh, NULL); /* a grant without an IdP: its own credential for this upstream */
        return 0;
    }
    if (tok == NULL && u == NULL && k->sess != NULL && k->sess->up_auth != NULL) {
        /* A request the gateway makes for the session (a subscription, a stream standing in for
         * its client's): what the session's latest call carried. */
        *auth = tg_xstrdup(k->sess->up_auth);
        return 0;
    }
    char why[300];
    if (tok == NULL) {
        snprintf(why, sizeof(why),
                 "upstream %s takes a token exchanged for the caller's own, and this caller's credential is not a JWT",
                 uc->name);
        tg_call_fail(k, TG_OUT_NOT_SENT, why, -1);
        return -1;
    }
    if (u == NULL) {
        u = k->upauth = tg_xcalloc(1, sizeof(*u));
        tg_buf_init(&u->held);
        tg_buf_init(&u->resend);
        u->refused = tg__call_upauth_refused;
    }
    struct tg_server *srv = k->srv;
    if (srv->token_cache == NULL)
        srv->token_cache = tg_tx_cache_new(srv->loop, TX_CACHE_ENTRIES, TX_CACHE_BYTES);
    uint8_t key[32];
    key_of(who, uc, key);
    const char *got = NULL;
    int r = tg_tx_get(srv->token_cache, uc->token_exchange, key, tg_slice_cstr(tok), &u->wait, on_token, k, &got, why,
                      sizeof(why));
    memcpy(u->key, key, 32);
    if (r == 0) {
        keep_for_retry(u, got, body, len, timeout);
        *auth = lines_of(gh, got);
        return 0;
    }
    if (r < 0) {
        tg_call_fail(k, TG_OUT_NOT_SENT, why, -1);
        return -1;
    }
    u->held.len = 0;
    u->held_body = body != NULL;
    if (body != NULL)
        tg_buf_append(&u->held, body, len);
    u->timeout = timeout;
    k->upauth_wait = 1;
    return 1;
}

/* ---- the send -------------------------------------------------------------------------- */

/* First the call's credential toward the upstream, which may take a token exchange (the
 * message then waits, held, and goes when it ends: core/call/upauth.c). */
void tg_call_send(struct tg_call *k, const char *body, size_t len, uint64_t timeout)
{
    char *auth = NULL;
    if (tg__call_upauth(k, body, len, timeout, &auth) != 0)
        return;
    send_now(k, body, len, timeout, auth);
    if (auth != NULL) {
        memset(auth, 0, strlen(auth));
        free(auth);
    }
}

static void send_now(struct tg_call *k, const char *body, size_t len, uint64_t timeout, const char *auth)
{
    struct tg_session *s = k->sess;
    if (s != NULL && (auth == NULL || s->up_auth == NULL || strcmp(s->up_auth, auth) != 0)) {
        /* what the session's own requests (DELETE, replies, a legacy stream's POSTs) carry next */
        if (s->up_auth != NULL)
            memset(s->up_auth, 0, strlen(s->up_auth));
        free(s->up_auth);
        s->up_auth = auth != NULL ? tg_xstrdup(auth) : NULL;
    }
    struct tg_upstream_send a = {
        .srv = k->srv,
        .sess = k->sess,
        .up = k->uprt,
        .kind = k->kind,
        .body = body,
        .len = len,
        .timeout_ms = timeout,
        .is_init = k->is_init,
        .is_listen = k->is_listen,
        .headers = k->up_headers,
        .auth = auth,
        .gid = k->gid_str,
        .gid_len = k->gid_len,
        .gid_num = k->gid,
        .ev = &tg__call_events,
        .host = &tg__call_host,
        .call = k,
        .state = &k->upcall,
    };
    k->forwarded = 1;
    if (!(k->ops->flags & TG_UPOPS_SESSION_LINK) && k->first_sent_ns == 0)
        k->first_sent_ns = uv_hrtime(); /* a request per message: latency from the first */
    a.first_sent_ns = k->first_sent_ns;
    k->ops->send(&a);
}
