#include "upstream/fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/log.h"
#include "core/base/metrics.h"
#include "core/conf/conf.h"
#include "core/wire/tls.h"
#include "upstream/pool/pool.h"

/* One exchange. Owner: the caller of tg_fetch_start() until the callback or tg_fetch_cancel(),
 * which free it. The upstream it made holds the only reference to conf, a one-upstream conf made
 * here for the URL's origin: the pool's TLS connections keep it (and the CA chain in it) alive
 * until their last handle is closed, after the fetch itself is gone. */
struct tg_fetch {
    struct tg_conf *conf;
    struct tg_upstream *up;
    struct tg_upreq *req;
    struct tg_metrics metrics; /* the pool counts into it; nobody reads it */
    tg_fetch_cb cb;
    void *ud;
    size_t max_bytes;
    int status;
    int over;
    struct tg_buf body;
    char cc[256];
    int has_cc;
    char why[1200];
};

static void fetch_free(struct tg_fetch *f)
{
    if (f->up != NULL)
        tg_upstream_close(f->up); /* drops its reference to conf once its handles are closed */
    tg_buf_dispose(&f->body);
    free(f);
}

static void on_head(struct tg_upreq *r, int status, void *ud)
{
    struct tg_fetch *f = ud;
    f->status = status;
    struct tg_slice cc = tg_upreq_cache_control(r);
    if (cc.len > 0 && cc.len < sizeof(f->cc)) {
        memcpy(f->cc, cc.ptr, cc.len);
        f->cc[cc.len] = '\0';
        f->has_cc = 1;
    }
    if (status >= 300 && status < 400) {
        /* The peer's Location, printable ASCII only: the words go into logs and /readyz. */
        char loc[1024];
        struct tg_slice l = tg_upreq_location(r);
        size_t n = 0;
        for (size_t i = 0; i < l.len && n + 1 < sizeof(loc); i++)
            loc[n++] = l.ptr[i] > 0x20 && l.ptr[i] < 0x7f ? l.ptr[i] : '?';
        loc[n] = '\0';
        snprintf(f->why, sizeof(f->why), "redirect (%d) to %s refused", status, n ? loc : "nowhere");
    }
}

static void on_data(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct tg_fetch *f = ud;
    (void)r;
    if (f->over || f->why[0] != '\0')
        return;
    if (f->body.len + n > f->max_bytes || tg_buf_try_reserve(&f->body, n, 0) != 0) {
        f->over = 1;
        return;
    }
    memcpy(f->body.base + f->body.len, p, n);
    f->body.len += n;
}

static const char *err_words(int err)
{
    switch (err) {
    case TG_ETIMEDOUT: return "timed out";
    case TG_ECLOSED: return "the connection closed before the answer ended";
    case TG_ELIMIT: return "too many requests waiting";
    case TG_EINVAL: return "malformed answer";
    default: return err < 0 && err > -4000 ? uv_strerror(err) : "failed";
    }
}

static void on_done(struct tg_upreq *r, int err, void *ud)
{
    struct tg_fetch *f = ud;
    struct tg_fetch_result res = {0};
    char why[1400];
    if (err == 0 && f->over) {
        err = TG_ELIMIT;
        snprintf(why, sizeof(why), "answer over %zu bytes", f->max_bytes);
    } else if (err == 0 && f->why[0] != '\0') {
        err = TG_EINVAL;
        snprintf(why, sizeof(why), "%s", f->why);
    } else if (err != 0) {
        const char *pool_why = tg_upreq_error(r);
        snprintf(why, sizeof(why), "%s", pool_why ? pool_why : err_words(err));
    }
    res.err = err;
    res.why = err != 0 ? why : NULL;
    res.status = err == 0 ? f->status : 0;
    res.body = f->body.base != NULL ? f->body.base : "";
    res.len = f->body.len;
    res.cache_control = f->has_cc ? f->cc : NULL;
    f->req = NULL;
    f->cb(f->ud, &res);
    fetch_free(f);
}

static const struct tg_upreq_cbs fetch_cbs = {on_head, on_data, on_done};

struct tg_fetch *tg_fetch_start(uv_loop_t *loop, const struct tg_fetch_opts *o, tg_fetch_cb cb, void *ud,
                                const char **why)
{
    static char err[256]; /* *why for a CA file that cannot be used; the loop has one thread */
    uint64_t timeout = o->timeout_ms ? o->timeout_ms : 10000;
    struct tg_conf *c = tg_xcalloc(1, sizeof(*c));
    c->refcnt = 1;
    c->default_upstream = 0;
    c->nupstreams = 1;
    c->upstreams = tg_xcalloc(1, sizeof(*c->upstreams));
    struct tg_upstream_conf *uc = &c->upstreams[0];
    uc->name = tg_xstrdup("fetch");
    uc->url = tg_xstrdup(o->url);
    if (tg_conf_parse_url(uc, why) != 0) {
        tg_conf_unref(c);
        return NULL;
    }
    if (uc->tls) {
        uc->tls_verify = 1;
        uc->tls_ca = o->ca_file ? tg_xstrdup(o->ca_file) : NULL;
        struct tg_tls_client_opts to = {uc->tls_ca, NULL, NULL, 1};
        if (tg_tls_client_ctx_new(&to, &uc->tls_ctx, err, sizeof(err)) != 0) {
            *why = err;
            tg_conf_unref(c);
            return NULL;
        }
    }
    uc->connect_timeout_ms = (int)(timeout < 600000 ? timeout : 600000);
    uc->call_timeout_ms = uc->connect_timeout_ms;
    uc->pool_size = 1;
    uc->pool_idle_timeout_ms = 1000;
    uc->queue_max = 1;
    uc->queue_timeout_ms = uc->connect_timeout_ms;
    uc->max_children = 1;

    struct tg_fetch *f = tg_xcalloc(1, sizeof(*f));
    f->conf = c;
    f->cb = cb;
    f->ud = ud;
    f->max_bytes = o->max_bytes;
    tg_buf_init(&f->body);
    f->up = tg_upstream_new(loop, c, uc, &f->metrics);
    tg_conf_unref(c); /* the upstream holds it now */
    /* A dedicated connection: the answer's end is its close or its length, and it is never reused. */
    f->req = tg_upreq_start(f->up, o->method ? o->method : "GET", o->headers, o->body, o->body ? o->body_len : 0, 1,
                            timeout, &fetch_cbs, f);
    tg_upreq_keep_meta(f->req);
    return f;
}

void tg_fetch_cancel(struct tg_fetch *f)
{
    if (f == NULL)
        return;
    if (f->req != NULL)
        tg_upreq_cancel(f->req);
    fetch_free(f);
}
