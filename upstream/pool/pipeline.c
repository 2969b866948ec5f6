/* The requests of one pooled connection, in the order they are written and answered.
 *
 * Without pipelining (upstreams[].pool.pipeline = 1, the default) a connection carries one
 * request at a time, written as soon as it is attached. With pipelining, up to that many ride
 * one connection: a request made while a connection already has requests waiting to be written
 * in this loop iteration joins it, and before the loop polls again they leave in one write. The
 * answers come back in the same order and are often read in one read, so a busy gateway makes
 * one write and one read toward the upstream for several calls instead of one each.
 *
 * What can go wrong with several requests on one connection, and what happens:
 * - A request taken off before it was written (cancelled, timed out) is simply taken out: the
 *   upstream never saw it.
 * - A request taken off after it was written is orphaned: it stays in line, its answer is read
 *   and dropped when it comes, and the connection frees it then. When nothing but orphans is
 *   left on a connection, or the one taken off is an event stream being read, the connection is
 *   closed instead.
 * - The connection fails: requests never written are tried again elsewhere; written ones end
 *   with TG_ECLOSED and tg_upreq_sent() says they may have run (no refund). When the server ends
 *   the connection after an answer (Connection: close) the requests behind it were not processed
 *   (RFC 9112 §9.6) and are tried again once.
 * - Head-of-line blocking: a slow answer delays the ones behind it. A connection whose answer
 *   being read is an event stream takes no more requests. */
#include "core/base/log.h"
#include "upstream/pool/internal.h"

static struct tg_upreq *first(struct tg_upconn *c)
{
    return tg_list_empty(&c->reqs) ? NULL : tg_container_of(c->reqs.next, struct tg_upreq, clink);
}

static void on_flush(uv_prepare_t *h)
{
    struct tg_upconn *c = h->data;
    if (tg__upconn_flush(c) != 0)
        tg__upconn_close(c);
}

static void uncork(struct tg_upconn *c)
{
    if (tg_list_linked(&c->corked))
        tg_list_unlink(&c->corked);
    uv_prepare_stop(&c->flush);
}

void tg__upconn_push(struct tg_upconn *c, struct tg_upreq *r)
{
    r->conn = c;
    if (c->nreqs > 0)
        c->up->metrics->upstream_pipelined++;
    tg_list_insert_tail(&c->reqs, &r->clink);
    c->nreqs++;
    c->nunsent++;
    if (c->req == NULL) {
        c->req = r;
        tg__upconn_begin_answer(c);
    }
    int depth = c->dedicated ? 1 : c->up->uc->pool_pipeline;
    if (depth > 1 && !tg_list_linked(&c->corked))
        tg_list_insert_tail(&c->up->corked, &c->corked); /* others of this iteration join it */
    if (c->state != UC_BUSY)
        return; /* a new connection: written once connected */
    if (depth <= 1) {
        if (tg__upconn_flush(c) != 0) /* inside tg_upreq_start: r ends from the loop */
            tg__upconn_close_with(c, TG_ECLOSED, TG_RETRY_UNSENT, 1);
        return;
    }
    uv_prepare_start(&c->flush, on_flush);
}

int tg__upconn_flush(struct tg_upconn *c)
{
    uncork(c);
    if (c->nunsent == 0)
        return 0;
    uv_buf_t bufs[64];
    unsigned n = 0;
    /* The unsent ones are the last of the line (it is written in order). */
    struct tg_list *l = c->reqs.prev;
    for (int k = c->nunsent; k > 1; k--)
        l = l->prev;
    for (; l != &c->reqs && n < 64; l = l->next) {
        struct tg_upreq *r = tg_container_of(l, struct tg_upreq, clink);
        bufs[n++] = uv_buf_init(r->out.base, (unsigned)r->out.len);
    }
    int e = tg__upconn_write(c, bufs, n);
    if (e != 0)
        return e;
    c->up->metrics->upstream_writes++; /* nothing of them was written: the close tries them again or ends them unsent */
    for (l = c->reqs.prev; n > 0; l = l->prev, n--)
        tg_container_of(l, struct tg_upreq, clink)->sent = 1;
    c->nunsent = 0;
    if (c->req != NULL && !c->req->paused)
        tg__upconn_read_start(c);
    return 0;
}

/* r out of c's line, its answer never to be read. */
static void unlink_req(struct tg_upconn *c, struct tg_upreq *r)
{
    tg_list_unlink(&r->clink);
    c->nreqs--;
    if (!r->sent)
        c->nunsent--;
    if (r->orphan)
        c->norphans--;
    r->conn = NULL;
    if (c->req == r) {
        c->req = first(c);
        if (c->req != NULL)
            tg__upconn_begin_answer(c);
    }
    if (c->nunsent == 0)
        uncork(c);
}

void tg__upconn_advance(struct tg_upconn *c)
{
    struct tg_upreq *r = c->req;
    if (r != NULL)
        unlink_req(c, r);
}

void tg__upconn_drop(struct tg_upconn *c, struct tg_upreq *r)
{
    if (!r->sent) {
        unlink_req(c, r); /* never written: the upstream does not know of it */
        if (c->nreqs == 0 && c->state == UC_BUSY)
            tg__upconn_to_idle(c);
        else if (c->nreqs == 0)
            tg__upconn_close(c); /* still connecting, for nobody now */
        return;
    }
    if (c->nreqs - c->norphans <= 1 || (r == c->req && c->stream_head)) {
        /* Alone on it (a half-read answer cannot be skipped but by closing), or an endless
         * stream in front of the others. */
        unlink_req(c, r);
        tg__upconn_close(c);
        return;
    }
    r->orphan = 1;
    c->norphans++;
}

void tg__upconn_fail_all(struct tg_upconn *c, int err, enum tg_retry retry, int later)
{
    struct tg_upstream *u = c->up;
    struct tg_list line;
    tg_list_init(&line);
    while (!tg_list_empty(&c->reqs)) {
        struct tg_upreq *r = first(c);
        tg_list_unlink(&r->clink);
        r->conn = NULL;
        tg_list_insert_tail(&line, &r->clink);
    }
    c->req = NULL;
    c->nreqs = c->nunsent = c->norphans = 0;
    uncork(c);
    /* c is closed (off every list) by now: a request tried again never lands on it. */
    while (!tg_list_empty(&line)) {
        struct tg_upreq *r = tg_container_of(line.next, struct tg_upreq, clink);
        tg_list_unlink(&r->clink);
        tg_list_init(&r->clink);
        if (r->orphan) {
            tg__upreq_release(r);
        } else if (r->done) {
            continue;
        } else if (!u->closing && !r->got_bytes &&
                   (retry == TG_RETRY_CLOSED ||
                    (!r->retried && ((retry == TG_RETRY_UNSENT && !r->sent) || retry == TG_RETRY_STALE)))) {
            /* Once, but after a server's close (each round answers one): a connection that fails
             * every time does not loop. */
            if (retry != TG_RETRY_CLOSED)
                r->retried = 1;
            r->sent = 0;
            tg__upreq_acquire(r);
        } else if (later) {
            tg__upreq_finish_later(r, err);
        } else {
            tg__upreq_finish(r, err);
        }
    }
}

struct tg_upconn *tg__upstream_pipeline_pick(struct tg_upstream *u, int busy)
{
    int depth = u->uc->pool_pipeline;
    if (depth <= 1)
        return NULL;
    if (!busy) {
        /* The connection this iteration's requests are gathering on. */
        if (tg_list_empty(&u->corked))
            return NULL;
        struct tg_upconn *c = tg_container_of(u->corked.prev, struct tg_upconn, corked);
        return c->nreqs < depth && !c->stream_head && !c->dedicated ? c : NULL;
    }
    /* Every connection is busy and the pool is full: the least loaded takes it. */
    struct tg_upconn *best = NULL;
    for (struct tg_list *l = u->busy.next; l != &u->busy; l = l->next) {
        struct tg_upconn *c = tg_container_of(l, struct tg_upconn, link);
        if (c->state != UC_BUSY || c->dedicated || c->stream_head || c->nreqs >= depth)
            continue;
        if (best == NULL || c->nreqs < best->nreqs)
            best = c;
    }
    return best;
}
