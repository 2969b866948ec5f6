/* Legacy HTTP+SSE upstreams (protocol 2024-11-05): GET the event stream, follow its endpoint
 * event, POST every message there; answers and the server's own messages come on the stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "core/wire/sse.h"
#include "upstream/upstream.h"
#include "upstream/pool/pool.h"

struct sse_link;
struct sse_post;

static void sse_post(struct sse_link *ln, const char *body, size_t len, uint64_t gid);
static const struct tg_upreq_cbs link_cbs;

/* ---- legacy HTTP+SSE upstreams (2024-11-05): GET the stream, follow its endpoint event, POST there */

/* Owner: the session (s->uplink), released with it by release_sse_link. A release while
 * its parser runs only marks it dead; on_link_data frees it once the parser has returned. */
struct sse_link {
    struct tg_uplink base;    /* first; base.up is a reference here */
    struct tg_server *srv;
    int in_feed;              /* tg_sse_feed is on the stack */
    int dead;                 /* released: no more events, freed after the feed */
    struct tg_upreq *get;     /* the stream */
    struct tg_sse_parser sse;
    char *endpoint;           /* request target the endpoint event named */
    struct tg_buf queue;      /* messages sent before the endpoint was known, NUL-separated with their gid */
    int status;
};

/* A POST to the endpoint: it should get 202; otherwise the call it carried fails. Owner: the
 * pool request it rides on; freed in on_post_done. */
struct sse_post {
    const struct tg_upstream_host *host;
    struct tg_session *sess; /* held (host->hold) */
    uint64_t gid;
};

static void on_post_head(struct tg_upreq *r, int status, void *ud) { (void)r, (void)status, (void)ud; }
static void on_post_data(struct tg_upreq *r, const char *p, size_t n, void *ud) { (void)r, (void)p, (void)n, (void)ud; }
static void on_post_done(struct tg_upreq *r, int err, void *ud)
{
    struct sse_post *sp = ud;
    int st = tg_upreq_status(r);
    struct tg_uplink *ln = sp->sess->uplink;
    if ((err != 0 || st < 200 || st >= 300) && sp->gid != 0 && ln != NULL) {
        const char *name = tg_upstream_conf(ln->up)->name;
        char why[160];
        if (err == TG_ETIMEDOUT)
            snprintf(why, sizeof(why), "upstream %s timed out", name);
        else if (err != 0)
            snprintf(why, sizeof(why), "upstream %s is unavailable", name);
        else
            snprintf(why, sizeof(why), "upstream %s answered HTTP %d", name, st);
        /* a refused POST (4xx) or one that never left never ran */
        enum tg_outcome o;
        if (err != 0 && !tg_upreq_sent(r))
            o = err == TG_ETIMEDOUT ? TG_OUT_NOT_SENT_TIMEOUT : TG_OUT_NOT_SENT;
        else if (err != 0)
            o = err == TG_ETIMEDOUT ? TG_OUT_TIMEOUT : TG_OUT_UNAVAILABLE;
        else
            o = st >= 400 && st < 500 ? TG_OUT_REFUSED : TG_OUT_UNAVAILABLE;
        tg_link_failed(ln, sp->gid, o, why);
    }
    sp->host->hold(sp->sess, 0);
    free(sp);
}
static const struct tg_upreq_cbs post_cbs = {on_post_head, on_post_data, on_post_done};

static void sse_post(struct sse_link *ln, const char *body, size_t len, uint64_t gid)
{
    struct sse_post *sp = tg_xcalloc(1, sizeof(*sp));
    sp->host = ln->base.host;
    sp->sess = ln->base.sess;
    sp->host->hold(sp->sess, 1);
    sp->gid = gid;
    struct tg_buf h;
    tg_buf_init(&h);
    tg_buf_appends(&h, "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n");
    if (ln->base.sess->up_auth != NULL)
        tg_buf_appends(&h, ln->base.sess->up_auth); /* the credential of the session's latest call */
    tg_buf_append(&h, "", 1);
    tg_upreq_start_to(ln->base.up, "POST", ln->endpoint, h.base, body, len, 0,
                      (uint64_t)tg_upstream_conf(ln->base.up)->call_timeout_ms, &post_cbs, sp);
    tg_buf_dispose(&h);
}

/* The endpoint event: a path (or a URL on the same server) to POST messages to. */
static int take_endpoint(struct sse_link *ln, struct tg_slice data)
{
    struct tg_slice p = data;
    if (tg_slice_starts_with(p, "http://")) {
        const char *slash = memchr(p.ptr + 7, '/', p.len - 7);
        if (slash == NULL)
            return -1;
        p = tg_slice_of(slash, p.len - (size_t)(slash - p.ptr));
    }
    if (p.len == 0 || p.ptr[0] != '/' || p.len > 2048)
        return -1;
    for (size_t i = 0; i < p.len; i++)
        if ((unsigned char)p.ptr[i] <= 0x20 || p.ptr[i] == 0x7f)
            return -1;
    free(ln->endpoint);
    ln->endpoint = tg_slice_dup(p);
    /* Flush what waited for it. */
    size_t off = 0;
    while (off < ln->queue.len) {
        uint64_t gid;
        memcpy(&gid, ln->queue.base + off, sizeof(gid));
        const char *msg = ln->queue.base + off + sizeof(gid);
        size_t ml = strlen(msg);
        sse_post(ln, msg, ml, gid);
        off += sizeof(gid) + ml + 1;
    }
    ln->queue.len = 0;
    return 0;
}

static int on_link_event(void *ud, const struct tg_sse_event *ev)
{
    struct sse_link *ln = ud;
    if (ln->dead)
        return 1;
    if (tg_slice_eq(ev->event, TG_SLICE("endpoint"))) {
        if (take_endpoint(ln, ev->data) != 0)
            tg_log(TG_LOG_WARN, "legacy SSE upstream sent an unusable endpoint", "upstream=%s",
                   tg_upstream_conf(ln->base.up)->name);
        return ln->dead;
    }
    if (ev->event.len == 0 || tg_slice_eq(ev->event, TG_SLICE("message")))
        tg_link_message(&ln->base, ev->data.ptr, ev->data.len, NULL, NULL);
    return ln->dead; /* the message may have ended the session (an initialize refused) */
}

static void sse_link_destroy(struct sse_link *ln)
{
    tg_sse_dispose(&ln->sse);
    tg_buf_dispose(&ln->queue);
    free(ln->endpoint);
    tg_upstream_unref(ln->base.up);
    free(ln);
}

static void on_link_head(struct tg_upreq *r, int status, void *ud)
{
    struct sse_link *ln = ud;
    ln->status = status;
    if (status != 200 || !tg_slice_has_token(tg_upreq_content_type(r), "text/event-stream"))
        tg_log(TG_LOG_WARN, "legacy SSE upstream refused the stream", "upstream=%s status=%d",
               tg_upstream_conf(ln->base.up)->name, status);
}

/* An event over limits.response_bytes was dropped (the parser goes on with the next one): the
 * call it answered, named by the id its JSON begins with, fails now instead of at its timeout. */
static void on_link_drop(void *ud, const char *head, size_t n)
{
    struct sse_link *ln = ud;
    struct tg_slice id = TG_SLICE_NULL;
    tg_json_prefix_id(head, n, &id);
    tg_link_oversized(&ln->base, id);
}

static void on_link_data(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct sse_link *ln = ud;
    if (ln->status != 200 || ln->dead)
        return;
    struct tg_session *s = ln->base.sess;
    const struct tg_upstream_host *host = ln->base.host;
    host->hold(s, 1);
    ln->in_feed = 1;
    int e = tg_sse_feed(&ln->sse, p, n, on_link_event, ln);
    ln->in_feed = 0;
    if (ln->dead) {
        sse_link_destroy(ln); /* released while its parser ran */
    } else {
        if (e != 0)
            tg_log(TG_LOG_WARN, "legacy SSE upstream event too large", "upstream=%s",
                   tg_upstream_conf(ln->base.up)->name);
        if (s->uplink == &ln->base)
            host->backpressure(s);
    }
    host->hold(s, 0);
}

static void on_link_done(struct tg_upreq *r, int err, void *ud)
{
    struct sse_link *ln = ud;
    ln->get = NULL;
    if (ln->dead)
        return;
    tg_link_gone(&ln->base, "the upstream's event stream ended");
}

static const struct tg_upreq_cbs link_cbs = {on_link_head, on_link_data, on_link_done};

static void release_sse_link(struct tg_session *s)
{
    struct sse_link *ln = (struct sse_link *)s->uplink;
    s->uplink = NULL;
    if (ln == NULL)
        return;
    ln->dead = 1;
    tg_link_release(&ln->base);
    if (ln->get) {
        tg_upreq_cancel(ln->get);
        ln->get = NULL;
    }
    if (!ln->in_feed)
        sse_link_destroy(ln);
}

/* Backpressure on a message-stream upstream: stop reading it while its client is behind. */
static void sse_pause(struct tg_session *s, void *state, int pause)
{
    struct sse_link *ln = (struct sse_link *)s->uplink;
    if (ln == NULL || ln->get == NULL)
        return;
    if (pause)
        tg_upreq_pause(ln->get);
    else
        tg_upreq_resume(ln->get);
}

static int sse_open(const struct tg_upstream_send *a)
{
    struct tg_server *srv = a->srv;
    struct tg_session *s = a->sess;
    struct tg_upstream *u = a->up;
    if (s->uplink != NULL)
        return 0;
    struct sse_link *ln = tg_xcalloc(1, sizeof(*ln));
    tg_link_init(&ln->base, &tg_upstream_sse_ops, a);
    ln->srv = srv;
    tg_upstream_ref(u);
    tg_sse_init(&ln->sse, (size_t)srv->conf->limits.response_bytes);
    ln->sse.resync = 1; /* one stream, many calls: a dropped event fails its own call only */
    ln->sse.on_drop = on_link_drop;
    tg_buf_init(&ln->queue);
    s->uplink = &ln->base;
    s->release_link = release_sse_link;
    struct tg_buf h;
    tg_buf_init(&h);
    tg_buf_appends(&h, "Accept: text/event-stream\r\n");
    if (s->up_auth != NULL)
        tg_buf_appends(&h, s->up_auth);
    tg_buf_append(&h, "", 1);
    ln->get = tg_upreq_start(u, "GET", h.base, NULL, 0, 1, 0, &link_cbs, ln);
    tg_buf_dispose(&h);
    return 0;
}

static int sse_link_send(struct tg_server *srv, struct sse_link *ln, const char *body, size_t len, uint64_t gid)
{
    if (ln->endpoint == NULL) {
        if (ln->queue.len + len > (size_t)srv->conf->limits.body_bytes * 4)
            return TG_ELIMIT;
        tg_buf_append(&ln->queue, &gid, sizeof(gid));
        tg_buf_append(&ln->queue, body, len);
        tg_buf_append(&ln->queue, "", 1);
        return 0;
    }
    sse_post(ln, body, len, gid);
    return 0;
}

static void sse_send(const struct tg_upstream_send *a)
{
    if (a->body == NULL) {
        tg_link_listen(a); /* the server's own messages come on the session's event stream */
        return;
    }
    sse_open(a);
    struct sse_link *ln = (struct sse_link *)a->sess->uplink;
    int ok = sse_link_send(a->srv, ln, a->body, a->len, a->kind == KIND_REQUEST ? a->gid_num : 0) == 0;
    tg_link_sent(&ln->base, a, ok);
}

static void sse_reply(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p, size_t n)
{
    if (s->uplink != NULL)
        sse_link_send(srv, (struct sse_link *)s->uplink, p, n, 0); /* POSTed like any reply */
}

static void sse_close(struct tg_server *srv, struct tg_session *s) {}

const struct tg_upstream_ops tg_upstream_sse_ops = {
    .name = "sse",
    .flags = TG_UPOPS_SESSION_LINK,
    .send = sse_send,
    .sent = tg_link_op_sent,
    .cancel = tg_link_op_cancel,
    .pause = sse_pause,
    .touch = tg_link_op_touch,
    .reply = sse_reply,
    .close = sse_close,
};

