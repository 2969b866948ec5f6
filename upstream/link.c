/* The half the message-stream upstreams share (stdio, legacy SSE): everything the upstream sends
 * comes on the session's one link. An answer is matched here, by the gateway's id, to the call
 * waiting for it; anything else goes to the session (tg_upstream_host). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/call/session.h"
#include "core/mcp/rewrite.h"
#include "upstream/pool/pool.h"
#include "upstream/upstream.h"

/* A call waiting for its answer on a link. Owner: the call's slot (freed by tg_link_op_cancel,
 * or here when the answer or the end comes); on its link's waiting list until then. */
struct tg_link_wait {
    struct tg_list link;     /* ln->waiting; points to itself once the link went */
    const struct tg_upstream_events *ev;
    void *call;
    void **state;
    uint64_t gid_num;
    size_t gid_len;
    char gid[24];
};

void tg_link_init(struct tg_uplink *ln, const struct tg_upstream_ops *ops, const struct tg_upstream_send *a)
{
    ln->ops = ops;
    ln->host = a->host;
    ln->sess = a->sess;
    ln->up = a->up;
    tg_list_init(&ln->waiting);
}

void tg_link_listen(const struct tg_upstream_send *a) { a->ev->stream(a->call); }

void tg_link_sent(struct tg_uplink *ln, const struct tg_upstream_send *a, int ok)
{
    if (!ok) {
        char why[160];
        snprintf(why, sizeof(why), "upstream %s could not be started or has gone", tg_upstream_conf(a->up)->name);
        a->ev->done(a->call, TG_OUT_NOT_SENT, why, -1); /* the message was never written */
        return;
    }
    if (a->kind != KIND_REQUEST) {
        a->ev->done(a->call, TG_OUT_ACCEPTED, NULL, -1); /* nothing comes back for it */
        return;
    }
    struct tg_link_wait *w = tg_xcalloc(1, sizeof(*w));
    w->ev = a->ev;
    w->call = a->call;
    w->state = a->state;
    w->gid_num = a->gid_num;
    w->gid_len = a->gid_len < sizeof(w->gid) ? a->gid_len : sizeof(w->gid);
    memcpy(w->gid, a->gid, w->gid_len);
    tg_list_insert_tail(&ln->waiting, &w->link);
    *a->state = w;
    a->ev->sent(a->call, a->timeout_ms);
}

/* w leaves its link and its call's slot: what it held is returned, w freed. */
static void take(struct tg_link_wait *w, const struct tg_upstream_events **ev, void **call)
{
    tg_list_unlink(&w->link);
    *w->state = NULL;
    *ev = w->ev;
    *call = w->call;
    tg_xfree(w);
}

static struct tg_link_wait *find(struct tg_uplink *ln, struct tg_slice id, uint64_t gid)
{
    for (struct tg_list *l = ln->waiting.next; l != &ln->waiting; l = l->next) {
        struct tg_link_wait *w = tg_container_of(l, struct tg_link_wait, link);
        if (id.ptr != NULL ? id.len == w->gid_len && memcmp(id.ptr, w->gid, id.len) == 0 : w->gid_num == gid)
            return w;
    }
    return NULL;
}

static void end(struct tg_link_wait *w, enum tg_outcome o, const char *why)
{
    const struct tg_upstream_events *ev;
    void *call;
    take(w, &ev, &call);
    ev->done(call, o, why, -1);
}

void tg_link_message(struct tg_uplink *ln, const char *p, size_t n, const struct tg_json_doc *pre, struct tg_buf *own)
{
    struct tg_json_doc doc;
    if (pre != NULL)
        doc = *pre; /* parsed once already (a stdio line): a 50 MiB answer is not scanned twice */
    else if (tg_json_parse(p, n, 1000, 0, &doc, NULL, NULL) != 0)
        return;
    if (!tg_mcp_is_object(p, n)) {
        tg_log(TG_LOG_INFO, "upstream sent a batch or a bare value; dropped", "upstream=%s session=%s",
               tg_upstream_conf(ln->up)->name, ln->sess->id_str); /* its members would pass undecided */
        return;
    }
    if (doc.method_raw.len == 0 && doc.id_raw.len > 0) {
        struct tg_link_wait *w = find(ln, doc.id_raw, 0);
        if (w != NULL) {
            const struct tg_upstream_events *ev;
            void *call;
            take(w, &ev, &call);
            ev->answered(call, p, n, &doc, own);
            return;
        }
        char esc[80];
        tg_log(TG_LOG_INFO, "upstream answer matches no call; dropped", "upstream=%s session=%s id=%s",
               tg_upstream_conf(ln->up)->name, ln->sess->id_str, tg_log_esc(esc, sizeof(esc), doc.id_raw));
        return;
    }
    ln->host->message(ln->sess, ln->up, p, n, &doc); /* a server request or notification */
}

void tg_link_oversized(struct tg_uplink *ln, struct tg_slice id)
{
    struct tg_link_wait *w = id.len > 0 ? find(ln, id, 0) : NULL;
    if (w != NULL) /* it ran (not refunded); its answer is gone */
        end(w, TG_OUT_GARBLED, "upstream answer exceeds limits.response_bytes");
}

void tg_link_failed(struct tg_uplink *ln, uint64_t gid, enum tg_outcome o, const char *why)
{
    struct tg_link_wait *w = find(ln, TG_SLICE_NULL, gid);
    if (w != NULL)
        end(w, o, why);
}

/* The waiting calls move to a list of this function's own first: ending one may end the session
 * (an initialize that failed), and ln with it. Then the first is taken each time, never a saved
 * next: ending one call may end another (its sink's operations may). */
void tg_link_gone(struct tg_uplink *ln, const char *why)
{
    struct tg_session *s = ln->sess;
    const struct tg_upstream_host *host = ln->host;
    struct tg_list gone;
    tg_list_init(&gone);
    if (!tg_list_empty(&ln->waiting)) {
        gone.next = ln->waiting.next;
        gone.prev = ln->waiting.prev;
        gone.next->prev = &gone;
        gone.prev->next = &gone;
        tg_list_init(&ln->waiting);
    }
    host->hold(s, 1);
    while (!tg_list_empty(&gone)) /* ln may be freed from here on */
        end(tg_container_of(gone.next, struct tg_link_wait, link), TG_OUT_UNAVAILABLE, why);
    host->gone(s, why);
    host->hold(s, 0);
}

void tg_link_release(struct tg_uplink *ln)
{
    while (!tg_list_empty(&ln->waiting)) {
        struct tg_list *l = ln->waiting.next;
        tg_list_unlink(l);
        tg_list_init(l); /* its call still holds it: freed when the call lets go */
    }
}

int tg_link_op_sent(const void *state) { return 1; }

void tg_link_op_cancel(void *state)
{
    struct tg_link_wait *w = state;
    if (w == NULL)
        return;
    tg_list_unlink(&w->link);
    *w->state = NULL;
    tg_xfree(w);
}

void tg_link_op_touch(void *state) {}
