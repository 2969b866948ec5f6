#include "transports/cred_watch.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/log.h"
#include "core/base/sha256.h"
#include "core/call/call.h"
#include "core/call/exchange.h"
#include "core/call/gateway.h"
#include "core/wire/tls.h"
#include "policy/auth.h"
#include "transports/http1/http1.h"

/* Owner: the stream it watches (see the header). Its memory goes in the timer's close callback. */
struct tg_cred_watch {
    struct tg_auth_cred cred;
    uv_timer_t timer;     /* a JWT's exp; a credential refused when the watch began: the next turn */
    struct tg_list node;  /* srv->cred_watches */
    struct tg_server *srv;
    tg_cred_watch_cb on_end; /* NULL once the owner let go */
    void *ud;
    const char *why;       /* once it ended: why (static) */
    uint64_t conf_serial;  /* the conf whose answer is known (0: none yet) */
    int fired;             /* on_end ran */
};

/* Longest wait of the expiry timer: exp is the issuer's number (the verifier caps it, not to a
 * clock), so a far one is waited for a year at a time. */
#define TG_CRED_WATCH_EXP_MAX_S (365LL * 86400)

static void on_timer(uv_timer_t *t);

static void fire(struct tg_cred_watch *w)
{
    if (w->fired || w->on_end == NULL)
        return;
    w->fired = 1;
    uv_timer_stop(&w->timer);
    w->on_end(w->ud, w->why);
}

const char *tg_cred_watch_check(struct tg_cred_watch *w, const struct tg_conf *conf)
{
    if (w->why == NULL && w->cred.kind == TG_CRED_JWT && w->cred.end_s <= (int64_t)(wall_ms() / 1000))
        w->why = "token expired";
    if (w->why == NULL && w->conf_serial != conf->serial) {
        /* Asked once per conf: a message costs a comparison, not a digest per grant. */
        if (!tg_auth_cred_holds(conf, &w->cred))
            w->why = "credential no longer valid";
        w->conf_serial = conf->serial;
    }
    if (w->why != NULL)
        fire(w);
    return w->why;
}

/* Start the timer for what is left of a JWT (0: now). */
static void arm_expiry(struct tg_cred_watch *w)
{
    int64_t left_s = w->cred.end_s - (int64_t)(wall_ms() / 1000);
    if (left_s < 0)
        left_s = 0;
    uv_timer_start(&w->timer, on_timer,
                   (uint64_t)(left_s < TG_CRED_WATCH_EXP_MAX_S ? left_s : TG_CRED_WATCH_EXP_MAX_S) * 1000, 0);
}

static void on_timer(uv_timer_t *t)
{
    struct tg_cred_watch *w = t->data;
    if (tg_cred_watch_check(w, w->srv->conf) == NULL && w->cred.kind == TG_CRED_JWT)
        arm_expiry(w); /* a far exp: waited for a year at a time */
}

struct tg_cred_watch *tg_cred_watch_new(struct tg_server *srv, const struct tg_auth_cred *cred, tg_cred_watch_cb on_end,
                                        void *ud)
{
    struct tg_cred_watch *w = tg_xcalloc(1, sizeof(*w));
    w->cred = *cred;
    w->srv = srv;
    w->on_end = on_end;
    w->ud = ud;
    uv_timer_init(srv->loop, &w->timer);
    w->timer.data = w;
    uv_unref((uv_handle_t *)&w->timer); /* it never holds the loop open by itself */
    tg_list_insert_tail(&srv->cred_watches, &w->node);
    if (tg_auth_cred_holds(srv->conf, cred)) {
        w->conf_serial = srv->conf->serial;
        if (cred->kind == TG_CRED_JWT)
            arm_expiry(w);
    } else {
        w->why = "credential no longer valid";
        uv_timer_start(&w->timer, on_timer, 0, 0); /* its owner hears of it on the next turn, not inside its start */
    }
    return w;
}

void tg_cred_hint_of(const struct tg_exchange *x, struct tg_cred_hint *h)
{
    memset(h, 0, sizeof(*h));
    if (x->who == NULL || x->who->jwt <= 0)
        return;
    h->conf_serial = x->srv->conf->serial;
    h->exp_s = x->who->exp_s;
    h->jwt = x->who->jwt;
}

void tg_cred_of_request(struct tg_server *srv, const struct tg_conn *c, const char *grant,
                        const struct tg_cred_hint *hint, struct tg_auth_cred *out)
{
    const struct tg_conf *conf = srv->conf;
    const struct tg_grant_conf *g = grant != NULL ? tg_conf_find_grant(conf, grant) : NULL;
    struct tg_auth_cred cred;
    if (g == NULL) {
        /* The grant went with a reload since the request was admitted: a credential for a name no
         * grant has, which never holds. */
        memset(&cred, 0, sizeof(cred));
        tg_sha256(grant != NULL ? grant : "", grant != NULL ? strlen(grant) : 0, cred.grant_sha256);
        *out = cred;
        return;
    }
    char dn[512], cn[256];
    const char *cert = NULL; /* as the router took it: a certificate counts when it names a grant */
    if (c->tls != NULL && tg_tls_peer_subject(c->tls, dn, sizeof(dn), cn, sizeof(cn)) &&
        tg_auth_cert_grant(conf, dn, cn) != NULL)
        cert = dn;
    if (hint != NULL && hint->jwt > 0 && hint->conf_serial == conf->serial && (size_t)hint->jwt <= conf->njwt) {
        /* Verified under this very conf when the request came: an RS256 or ES256 verification
         * costs more than the rest of a call, so it is not done twice. */
        struct tg_principal who = {.grant = g, .exp_s = hint->exp_s, .jwt = hint->jwt};
        tg_auth_cred_of_jwt(conf, &who, cert, cn, &cred);
    } else {
        /* A reload came between the request and its stream: the token is checked again under the
         * new conf. The route's RFC 8707 resource is not at hand here, so a token whose aud names
         * only the resource (an issuer without audience) no longer holds: the stream ends, and the
         * client reconnects (fail closed, and rare). */
        tg_auth_cred_of(conf, tg_http_req_header(c->req, "authorization"), wall_ms() / 1000, g, cert, cn, NULL,
                        &cred);
    }
    *out = cred;
}

struct tg_cred_watch *tg_cred_watch_of_request(struct tg_server *srv, const struct tg_conn *c, const char *grant,
                                               const struct tg_cred_hint *hint, tg_cred_watch_cb on_end, void *ud)
{
    struct tg_auth_cred cred;
    tg_cred_of_request(srv, c, grant, hint, &cred);
    return tg_cred_watch_new(srv, &cred, on_end, ud);
}

int tg_cred_of_stream(const struct tg_cred_watch *w, struct tg_server *srv, const struct tg_conn *c,
                      const char *grant, const struct tg_cred_hint *hint, struct tg_auth_cred *out)
{
    if (w != NULL)
        *out = w->cred;
    else if (c != NULL)
        tg_cred_of_request(srv, c, grant, hint, out);
    return w != NULL || c != NULL;
}

const struct tg_auth_cred *tg_cred_watch_cred(const struct tg_cred_watch *w) { return w != NULL ? &w->cred : NULL; }

static void on_closed(uv_handle_t *h) { free(h->data); }

void tg_cred_watch_free(struct tg_cred_watch *w)
{
    if (w == NULL)
        return;
    w->on_end = NULL;
    tg_list_unlink(&w->node);
    uv_close((uv_handle_t *)&w->timer, on_closed); /* stops it; the watch goes on the next turn */
}

void tg_cred_watches_recheck(struct tg_server *srv)
{
    /* The ended ones move to a list of their own first; then the first is taken each time and put
     * back before its owner hears of it: an owner that ends may free other watches (or its own). */
    struct tg_list due;
    tg_list_init(&due);
    for (struct tg_list *l = srv->cred_watches.next, *next; l != &srv->cred_watches; l = next) {
        next = l->next;
        struct tg_cred_watch *w = tg_container_of(l, struct tg_cred_watch, node);
        if (w->fired || w->why != NULL)
            continue;
        if (!tg_auth_cred_holds(srv->conf, &w->cred)) {
            w->why = "credential no longer valid";
            tg_list_unlink(&w->node);
            tg_list_insert_tail(&due, &w->node);
        }
        w->conf_serial = srv->conf->serial;
    }
    size_t n = 0;
    while (!tg_list_empty(&due)) {
        struct tg_cred_watch *w = tg_container_of(due.next, struct tg_cred_watch, node);
        tg_list_unlink(&w->node);
        tg_list_insert_tail(&srv->cred_watches, &w->node);
        n++;
        fire(w);
    }
    if (n > 0)
        tg_log(TG_LOG_INFO, "streams ended: the credential that opened them no longer holds after the reload",
               "streams=%zu", n);
}

/* ---- legacy SSE sessions a credential ended ------------------------------------------------ */

#define TG_CRED_ENDED_KEEP 256

struct tg_cred_ended {
    struct {
        uint8_t sid_grant[32]; /* SHA-256 of "SID\0GRANT" */
        const char *why;
    } e[TG_CRED_ENDED_KEEP];
    unsigned next;
};

static void ended_key(const char *sid, size_t sidn, const char *grant, uint8_t out[32])
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_append(&b, sid, sidn);
    tg_buf_append(&b, "", 1);
    tg_buf_appends(&b, grant != NULL ? grant : "");
    tg_sha256(b.base, b.len, out);
    tg_buf_dispose(&b);
}

void tg_cred_ended_note(struct tg_server *srv, const char *sid, const char *grant, const char *why)
{
    if (srv->cred_ended == NULL)
        srv->cred_ended = tg_xcalloc(1, sizeof(*srv->cred_ended));
    struct tg_cred_ended *r = srv->cred_ended;
    unsigned i = r->next++ % TG_CRED_ENDED_KEEP;
    ended_key(sid, strlen(sid), grant, r->e[i].sid_grant);
    r->e[i].why = why;
}

const char *tg_cred_ended_why(struct tg_server *srv, struct tg_slice sid, const char *grant)
{
    struct tg_cred_ended *r = srv->cred_ended;
    if (r == NULL || sid.ptr == NULL)
        return NULL;
    uint8_t k[32];
    ended_key(sid.ptr, sid.len, grant, k);
    for (unsigned i = 0; i < TG_CRED_ENDED_KEEP && i < r->next; i++)
        if (r->e[i].why != NULL && memcmp(r->e[i].sid_grant, k, 32) == 0)
            return r->e[i].why;
    return NULL;
}

void tg_cred_watches_dispose(struct tg_server *srv)
{
    free(srv->cred_ended);
    srv->cred_ended = NULL;
}
