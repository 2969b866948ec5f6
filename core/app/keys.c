#include "core/app/keys.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/app/server.h"
#include "core/base/log.h"
#include "core/call/call.h"
#include "core/conf/conf.h"
#include "policy/jwt.h"
#include "policy/keyring.h"
#include "transports/http1/http1.h"
#include "upstream/fetch.h"

enum phase { PH_IDLE, PH_OPENID, PH_RFC8414, PH_JWKS };

/* One issuer's source of keys. Owner: its tg_keys (srcs); freed after its timer's close callback
 * (src_close). It holds one reference to its keyring; each conf using it holds another. */
struct key_src {
    struct tg_list link;
    struct tg_keys *ks;
    struct tg_keyring *k;
    char *issuer, *jwks_url, *ca; /* jwks_url NULL: discovery */
    int discovery;
    int min_s, max_s, timeout_ms; /* from the newest conf using it */
    char *jwks_uri;               /* discovery: the document's, once known */
    struct tg_fetch *f;
    enum phase phase;
    uv_timer_t timer;
    uint64_t last_start_ms; /* loop time the last fetch began (0: never) */
    int fails;              /* failures in a row */
    int used;               /* tg_keys_attach: some issuer of the newest conf uses it */
    struct tg_list parked;  /* struct key_park: requests waiting for this fetch */
};

/* A request waiting for its issuer's refetch. Owner: its source (parked), freed when woken. */
struct key_park {
    struct tg_http_wait w; /* first */
    struct tg_list link;
};

struct tg_keys {
    struct tg_server *srv;
    void (*route)(struct tg_server *srv, struct tg_conn *c);
    struct tg_list srcs;
    int started;
    struct key_src *asked;   /* the source whose refetch the current authentication waits for */
    struct tg_conn *rerouted; /* the request being routed again after its wait: it waits no more */
};

/* How fetch_now() starts: FETCH_ALL (the discovery document first for a discovered issuer, then
 * the JWKS), FETCH_JWKS (the JWKS alone when its URL is known: an unknown kid), FETCH_NEXT (the
 * next step of the fetch under way, in the phase the caller set). */
enum { FETCH_ALL, FETCH_JWKS, FETCH_NEXT };
static void fetch_now(struct key_src *s, int how);

struct tg_keys *tg_keys_new(struct tg_server *srv, void (*route)(struct tg_server *srv, struct tg_conn *c))
{
    struct tg_keys *ks = tg_xcalloc(1, sizeof(*ks));
    ks->srv = srv;
    ks->route = route;
    tg_list_init(&ks->srcs);
    return ks;
}

static const char *src_url(const struct key_src *s) { return s->jwks_url ? s->jwks_url : s->jwks_uri; }

/* Route every request waiting on s again (each once: it does not wait a second time). */
static void wake(struct key_src *s)
{
    struct tg_keys *ks = s->ks;
    while (!tg_list_empty(&s->parked)) {
        struct key_park *p = tg_container_of(s->parked.next, struct key_park, link);
        tg_list_unlink(&p->link);
        struct tg_conn *c = tg_http_wait_stop(&p->w);
        free(p);
        if (c == NULL)
            continue; /* the client went meanwhile */
        ks->rerouted = c;
        ks->route(ks->srv, c);
        ks->rerouted = NULL;
    }
}

static void on_timer(uv_timer_t *t)
{
    struct key_src *s = t->data;
    if (s->f == NULL)
        fetch_now(s, FETCH_ALL);
}

/* The fetch ended badly: the last good set stays; retry sooner than a refresh, backing off. */
static void failed(struct key_src *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failed(struct key_src *s, const char *fmt, ...)
{
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    s->phase = PH_IDLE;
    s->fails++;
    tg_keyring_failed(s->k, why, wall_ms() / 1000);
    int64_t retry = (int64_t)1 << (s->fails - 1 < 10 ? s->fails - 1 : 10);
    if (retry > s->min_s)
        retry = s->min_s;
    char esc[700];
    tg_log(TG_LOG_WARN, "fetching an issuer's keys failed; the last good set stays", "issuer=%s reason=%s retry_s=%lld",
           s->issuer, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(tg_keyring_why(s->k))), (long long)retry);
    uv_timer_start(&s->timer, on_timer, (uint64_t)retry * 1000, 0);
    wake(s);
}

static void on_fetched(void *ud, const struct tg_fetch_result *r)
{
    struct key_src *s = ud;
    s->f = NULL;
    const char *what = s->phase == PH_JWKS ? "JWKS" : "discovery document";
    const char *url = s->phase == PH_JWKS ? src_url(s) : NULL;
    char *doc_url = s->phase == PH_OPENID   ? tg_keyring_openid_url(s->issuer)
                    : s->phase == PH_RFC8414 ? tg_keyring_rfc8414_url(s->issuer)
                                             : NULL;
    if (url == NULL)
        url = doc_url != NULL ? doc_url : "?";
    if (r->err != 0) {
        failed(s, "%s %s: %s", what, url, r->why ? r->why : "failed");
    } else if (s->phase == PH_OPENID && r->status == 404) {
        free(doc_url);
        s->phase = PH_RFC8414; /* no OpenID document: the RFC 8414 one */
        fetch_now(s, FETCH_NEXT);
        return;
    } else if (r->status != 200) {
        failed(s, "%s %s: HTTP status %d", what, url, r->status);
    } else if (s->phase != PH_JWKS) {
        char why[400];
        char *uri = tg_keyring_discovery_jwks_uri(r->body, r->len, s->issuer, why, sizeof(why));
        if (uri == NULL) {
            failed(s, "%s %s: %s", what, url, why);
        } else {
            free(s->jwks_uri);
            s->jwks_uri = uri;
            s->phase = PH_JWKS;
            fetch_now(s, FETCH_NEXT);
        }
    } else {
        char why[400];
        struct tg_jwks *set = NULL;
        struct tg_jwks_skipped sk;
        int prc = tg_keyring_parse_jwks(r->body, r->len, &set, why, sizeof(why), &sk);
        if (sk.total > 0) { /* once per fetch: which keys of the set are not used, and why */
            char esc[600];
            tg_keyring_count_skipped(s->k, &sk);
            tg_log(TG_LOG_INFO, "issuer keys skipped (not usable to verify tokens)", "issuer=%s skipped=%u keys=%s",
                   s->issuer, sk.total, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(sk.list)));
        }
        if (prc != 0) {
            failed(s, "%s %s: %s", what, url, why);
        } else {
            int64_t ttl = tg_keyring_ttl(r->cache_control, s->min_s, s->max_s);
            tg_keyring_set_jwks(s->k, set, wall_ms() / 1000);
            s->phase = PH_IDLE;
            s->fails = 0;
            tg_log(TG_LOG_INFO, "issuer keys fetched", "issuer=%s keys=%zu next_refresh_s=%lld", s->issuer,
                   tg_jwks_count(set), (long long)ttl);
            uv_timer_start(&s->timer, on_timer, (uint64_t)ttl * 1000, 0);
            wake(s);
        }
    }
    free(doc_url);
}

/* Start a fetch. how: FETCH_ALL (the discovery document first for a discovered issuer, then the
 * JWKS), FETCH_JWKS (the JWKS alone when its URL is known: an unknown kid), FETCH_NEXT (the next
 * step of the fetch under way, in the phase the caller set). */
static void fetch_now(struct key_src *s, int how)
{
    if (how != FETCH_NEXT) {
        s->phase = s->discovery && !(how == FETCH_JWKS && s->jwks_uri != NULL) ? PH_OPENID : PH_JWKS;
        s->last_start_ms = uv_now(s->ks->srv->loop);
    }
    char *own = s->phase == PH_OPENID   ? tg_keyring_openid_url(s->issuer)
                : s->phase == PH_RFC8414 ? tg_keyring_rfc8414_url(s->issuer)
                                         : NULL;
    const char *url = own != NULL ? own : src_url(s);
    uv_timer_stop(&s->timer);
    struct tg_fetch_opts o = {.method = "GET",
                              .url = url,
                              .ca_file = s->ca,
                              .headers = "Accept: application/json\r\nUser-Agent: tollgate/" TG_VERSION "\r\n",
                              .max_bytes = TG_KEYRING_MAX_BYTES,
                              .timeout_ms = (uint64_t)s->timeout_ms};
    const char *why = NULL;
    s->f = url != NULL ? tg_fetch_start(s->ks->srv->loop, &o, on_fetched, s, &why) : NULL;
    if (s->f == NULL)
        failed(s, "%s: %s", url ? url : "no URL", why ? why : "cannot be fetched");
    free(own);
}

/* verification met a kid the set lacks (policy/auth.c through the keyring). */
static int on_unknown_kid(void *arg, struct tg_keyring *k)
{
    struct key_src *s = arg;
    struct tg_keys *ks = s->ks;
    if (!ks->started)
        return 0;
    if (s->f != NULL) {
        ks->asked = s; /* one runs: wait for it */
        return 1;
    }
    uint64_t now = uv_now(ks->srv->loop);
    if (s->last_start_ms != 0 && now - s->last_start_ms < (uint64_t)s->min_s * 1000)
        return 0; /* at most one per refresh_min_s: unknown kids cannot make us hammer the issuer */
    tg_keyring_count_refetch(k);
    tg_log(TG_LOG_INFO, "a token's kid is not in the issuer's keys: fetching them again", "issuer=%s", s->issuer);
    fetch_now(s, FETCH_JWKS);
    if (s->f == NULL)
        return 0;
    ks->asked = s;
    return 1;
}

int tg_keys_park(struct tg_keys *ks, struct tg_conn *c)
{
    if (ks == NULL)
        return 0;
    struct key_src *s = ks->asked;
    ks->asked = NULL;
    if (s == NULL || s->f == NULL || c == ks->rerouted)
        return 0;
    struct key_park *p = tg_xcalloc(1, sizeof(*p));
    tg_list_insert_tail(&s->parked, &p->link);
    tg_http_wait_start(&p->w, c);
    return 1;
}

static char *src_id(const struct tg_jwt_conf *j)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appendf(&b, "%s\n%s\n%s", j->issuer ? j->issuer : "", j->jwks_url ? j->jwks_url : "discovery",
                   j->ca ? j->ca : "");
    tg_buf_append(&b, "", 1);
    return b.base;
}

void tg_keys_attach(struct tg_keys *ks, struct tg_conf *conf)
{
    if (ks == NULL)
        return; /* shutting down */
    for (struct tg_list *n = ks->srcs.next; n != &ks->srcs; n = n->next)
        tg_container_of(n, struct key_src, link)->used = 0;
    for (size_t i = 0; i < conf->njwt; i++) {
        struct tg_jwt_conf *j = &conf->jwt[i];
        if (j->jwks_url == NULL && !j->discovery)
            continue;
        char *id = src_id(j);
        struct key_src *s = NULL;
        for (struct tg_list *n = ks->srcs.next; n != &ks->srcs && s == NULL; n = n->next) {
            struct key_src *x = tg_container_of(n, struct key_src, link);
            if (strcmp(tg_keyring_id(x->k), id) == 0)
                s = x;
        }
        if (s == NULL) {
            s = tg_xcalloc(1, sizeof(*s));
            s->ks = ks;
            s->k = tg_keyring_new(id);
            s->issuer = tg_xstrdup(j->issuer);
            s->jwks_url = j->jwks_url ? tg_xstrdup(j->jwks_url) : NULL;
            s->ca = j->ca ? tg_xstrdup(j->ca) : NULL;
            s->discovery = j->discovery;
            tg_list_init(&s->parked);
            uv_timer_init(ks->srv->loop, &s->timer);
            s->timer.data = s;
            tg_keyring_on_unknown_kid(s->k, on_unknown_kid, s);
            tg_list_insert_tail(&ks->srcs, &s->link);
            s->min_s = j->refresh_min_s;
            s->max_s = j->refresh_max_s;
            s->timeout_ms = j->fetch_timeout_ms;
            if (ks->started)
                fetch_now(s, FETCH_ALL);
        }
        free(id);
        s->used = 1;
        s->min_s = j->refresh_min_s;
        s->max_s = j->refresh_max_s;
        s->timeout_ms = j->fetch_timeout_ms;
        if (j->keyring == NULL)
            j->keyring = tg_keyring_ref(s->k);
    }
}

static void on_src_closed(uv_handle_t *h)
{
    struct key_src *s = h->data;
    free(s);
}

static void src_close(struct key_src *s)
{
    tg_list_unlink(&s->link);
    tg_fetch_cancel(s->f);
    s->f = NULL;
    tg_keyring_on_unknown_kid(s->k, NULL, NULL);
    tg_keyring_unref(s->k);
    free(s->issuer);
    free(s->jwks_url);
    free(s->ca);
    free(s->jwks_uri);
    uv_close((uv_handle_t *)&s->timer, on_src_closed);
}

void tg_keys_sweep(struct tg_keys *ks, const struct tg_conf *conf)
{
    (void)conf;
    if (ks == NULL)
        return;
    for (struct tg_list *n = ks->srcs.next, *next; n != &ks->srcs; n = next) {
        next = n->next;
        struct key_src *s = tg_container_of(n, struct key_src, link);
        if (s->used)
            continue;
        tg_fetch_cancel(s->f);
        s->f = NULL;
        wake(s); /* routed again under the new conf */
        src_close(s);
    }
}

void tg_keys_start(struct tg_keys *ks)
{
    if (ks == NULL)
        return;
    ks->started = 1;
    for (struct tg_list *n = ks->srcs.next; n != &ks->srcs; n = n->next) {
        struct key_src *s = tg_container_of(n, struct key_src, link);
        if (s->f == NULL)
            fetch_now(s, FETCH_ALL);
    }
}

int tg_keys_ready(const struct tg_conf *conf, struct tg_buf *why)
{
    int ready = 1;
    for (size_t i = 0; i < conf->njwt; i++) {
        const struct tg_jwt_conf *j = &conf->jwt[i];
        if (j->keyring == NULL || tg_keyring_jwks(j->keyring) != NULL)
            continue;
        tg_buf_appendf(why, "%sjwt[%zu] issuer %s: %s", ready ? "" : "; ", i, j->issuer ? j->issuer : "?",
                       tg_keyring_pending_why(j->keyring));
        ready = 0;
    }
    return ready;
}

/* A Prometheus label value: backslash, quote and newline escaped. */
static void label(struct tg_buf *out, const char *v)
{
    for (const char *p = v; *p; p++) {
        if (*p == '\\' || *p == '"')
            tg_buf_append(out, "\\", 1);
        if (*p == '\n')
            tg_buf_appends(out, "\\n");
        else
            tg_buf_append(out, p, 1);
    }
}

void tg_keys_metrics(struct tg_keys *ks, struct tg_buf *out)
{
    if (ks == NULL || tg_list_empty(&ks->srcs))
        return;
    static const struct {
        const char *name, *type, *help;
    } m[] = {
        {"jwks_fetches_total", "counter", "Fetches of an issuer's keys (jwks_url, discovery) by result."},
        {"jwks_keys", "gauge", "Keys in an issuer's current fetched set (0 before the first good one)."},
        {"jwks_unknown_kid_total", "counter", "Tokens whose kid was not in the issuer's fetched set."},
        {"jwks_refetches_total", "counter", "Refetches an unknown kid started (at most one per refresh_min_s)."},
        {"jwks_last_success_seconds", "gauge", "Unix time of the issuer's last good set (0: none yet)."},
        {"jwks_keys_skipped_total", "counter",
         "Keys of an issuer's fetched sets skipped as unusable, by reason (counted per fetch)."},
    };
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        tg_buf_appendf(out, "# HELP tollgate_%s %s\n# TYPE tollgate_%s %s\n", m[i].name, m[i].help, m[i].name, m[i].type);
        for (struct tg_list *n = ks->srcs.next; n != &ks->srcs; n = n->next) {
            struct key_src *s = tg_container_of(n, struct key_src, link);
            struct tg_keyring_stats st;
            tg_keyring_stats(s->k, &st);
            for (int r = 0; r < (i == 0 ? 2 : i == 5 ? TG_JWKS_SKIP_N : 1); r++) {
                tg_buf_appendf(out, "tollgate_%s{issuer=\"", m[i].name);
                label(out, s->issuer);
                uint64_t v = i == 0 ? (r == 0 ? st.fetched : st.failed)
                             : i == 1 ? (uint64_t)(tg_keyring_jwks(s->k) ? st.nkeys : 0)
                             : i == 2 ? st.unknown_kid
                             : i == 3 ? st.unknown_refetch
                             : i == 4 ? (uint64_t)st.last_ok_s
                                      : st.skipped[r];
                if (i == 5)
                    tg_buf_appendf(out, "\",reason=\"%s", tg_jwks_skip_name((enum tg_jwks_skip)r));
                tg_buf_appendf(out, "\"%s} %llu\n", i == 0 ? (r == 0 ? ",result=\"ok\"" : ",result=\"failed\"") : "",
                               (unsigned long long)v);
            }
        }
    }
}

void tg_keys_free(struct tg_keys *ks)
{
    if (ks == NULL)
        return;
    while (!tg_list_empty(&ks->srcs)) {
        struct key_src *s = tg_container_of(ks->srcs.next, struct key_src, link);
        while (!tg_list_empty(&s->parked)) {
            struct key_park *p = tg_container_of(s->parked.next, struct key_park, link);
            tg_list_unlink(&p->link);
            tg_http_wait_stop(&p->w);
            free(p);
        }
        src_close(s);
    }
    free(ks);
}
