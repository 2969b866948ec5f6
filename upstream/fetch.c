#include "upstream/fetch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    uv_loop_t *loop;
    uv_work_t work;    /* https://: the CA bundle is read by a worker (tens of ms for the system's) */
    int working;       /* work queued: f lives until its after-work callback */
    int cancelled;     /* tg_fetch_cancel() came while working: that callback frees f, silently */
    char ca_err[256];
    int ca_rc;
    char *method, *headers, *body;
    size_t body_len;
    uint64_t timeout_ms;
    struct tg_conf *conf; /* until the upstream takes it (begin) */
    struct tg_upstream *up;
    struct tg_upreq *req;
    struct tg_metrics metrics; /* the pool counts into it; nobody reads it */
    tg_fetch_cb cb;
    void *ud;
    size_t max_bytes;
    int status;
    int over;
    struct tg_buf answer; /* the answer's body so far */
    char cc[256];
    int has_cc;
    char why[1200];
};

static void fetch_free(struct tg_fetch *f)
{
    if (f->up != NULL)
        tg_upstream_close(f->up); /* drops its reference to conf once its handles are closed */
    else
        tg_conf_unref(f->conf);
    tg_buf_dispose(&f->answer);
    free(f->method);
    free(f->headers);
    free(f->body);
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
    if (f->answer.len + n > f->max_bytes || tg_buf_try_reserve(&f->answer, n, 0) != 0) {
        f->over = 1;
        return;
    }
    memcpy(f->answer.base + f->answer.len, p, n);
    f->answer.len += n;
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
    res.body = f->answer.base != NULL ? f->answer.base : "";
    res.len = f->answer.len;
    res.cache_control = f->has_cc ? f->cc : NULL;
    f->req = NULL;
    f->cb(f->ud, &res);
    fetch_free(f);
}

static const struct tg_upreq_cbs fetch_cbs = {on_head, on_data, on_done};

/* Connect and send: the pool's upstream for the URL's origin takes the conf. */
static void begin(struct tg_fetch *f)
{
    struct tg_upstream_conf *uc = &f->conf->upstreams[0];
    f->up = tg_upstream_new(f->loop, f->conf, uc, &f->metrics);
    tg_conf_unref(f->conf); /* the upstream holds it now */
    f->conf = NULL;
    /* A dedicated connection: the answer's end is its close or its length, and it is never reused. */
    f->req = tg_upreq_start(f->up, f->method, f->headers, f->body, f->body_len, 1, f->timeout_ms, &fetch_cbs, f);
    tg_upreq_keep_meta(f->req);
}

static void on_ca_work(uv_work_t *w)
{
    struct tg_fetch *f = w->data;
    struct tg_upstream_conf *uc = &f->conf->upstreams[0];
    struct tg_tls_client_opts to = {uc->tls_ca, NULL, NULL, 1};
    f->ca_rc = tg_tls_client_ctx_new(&to, &uc->tls_ctx, f->ca_err, sizeof(f->ca_err));
}

static void on_ca_done(uv_work_t *w, int status)
{
    struct tg_fetch *f = w->data;
    f->working = 0;
    if (f->cancelled) {
        fetch_free(f);
        return;
    }
    if (status != 0 || f->ca_rc != 0) {
        char why[300];
        snprintf(why, sizeof(why), "CA: %s", status != 0 ? uv_strerror(status) : f->ca_err);
        struct tg_fetch_result res = {.err = TG_EINVAL, .why = why, .body = "", .len = 0};
        f->cb(f->ud, &res);
        fetch_free(f);
        return;
    }
    begin(f);
}

struct tg_fetch *tg_fetch_start(uv_loop_t *loop, const struct tg_fetch_opts *o, tg_fetch_cb cb, void *ud,
                                const char **why)
{
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
    if (uc->tls && o->ca_file != NULL && access(o->ca_file, R_OK) != 0) {
        *why = "cannot read the CA file";
        tg_conf_unref(c);
        return NULL;
    }
    uc->tls_verify = 1;
    uc->tls_ca = uc->tls && o->ca_file ? tg_xstrdup(o->ca_file) : NULL;
    uc->connect_timeout_ms = (int)(timeout < 600000 ? timeout : 600000);
    uc->call_timeout_ms = uc->connect_timeout_ms;
    uc->pool_size = 1;
    uc->pool_idle_timeout_ms = 1000;
    uc->queue_max = 1;
    uc->queue_timeout_ms = uc->connect_timeout_ms;
    uc->max_children = 1;

    struct tg_fetch *f = tg_xcalloc(1, sizeof(*f));
    f->loop = loop;
    f->conf = c;
    f->cb = cb;
    f->ud = ud;
    f->max_bytes = o->max_bytes;
    f->timeout_ms = timeout;
    tg_buf_init(&f->answer);
    f->method = tg_xstrdup(o->method ? o->method : "GET");
    f->headers = o->headers ? tg_xstrdup(o->headers) : NULL;
    if (o->body != NULL) {
        f->body = tg_xmalloc(o->body_len + 1);
        memcpy(f->body, o->body, o->body_len);
        f->body_len = o->body_len;
    }
    if (uc->tls) {
        /* Reading and parsing a CA bundle is file I/O and work the loop must not wait for. */
        f->work.data = f;
        f->working = 1;
        if (uv_queue_work(loop, &f->work, on_ca_work, on_ca_done) == 0)
            return f;
        f->working = 0;
        on_ca_work(&f->work); /* no worker: at once (never expected) */
        if (f->ca_rc != 0) {
            static char err[256]; /* *why; the loop has one thread */
            snprintf(err, sizeof(err), "CA: %s", f->ca_err);
            *why = err;
            fetch_free(f);
            return NULL;
        }
    }
    begin(f);
    return f;
}

void tg_fetch_cancel(struct tg_fetch *f)
{
    if (f == NULL)
        return;
    if (f->working) {
        f->cancelled = 1; /* freed by on_ca_done, which runs even when the work is cancelled */
        uv_cancel((uv_req_t *)&f->work);
        return;
    }
    if (f->req != NULL)
        tg_upreq_cancel(f->req);
    fetch_free(f);
}
