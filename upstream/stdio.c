/* stdio upstreams: a child process per session (upstream/child.c runs it, the pool keeps warm
 * ones ready); every message of the session goes on its stdin, answers and the server's own
 * messages come on its stdout. */
#include <stdio.h>
#include <stdlib.h>

#include "core/base/log.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "upstream/upstream.h"
#include "upstream/pool/pool.h"
#include "upstream/child.h"

/* Owner: the session (s->uplink), freed by release_child when the session goes, or when the
 * child exits (on_child_exit). */
struct stdio_link {
    struct tg_uplink base; /* first */
    struct tg_child *child;
};

static void on_child_message(void *ud, const char *p, size_t n, const struct tg_json_doc *doc, struct tg_buf *own);
static void on_child_exit(void *ud, int64_t status, int sig);

static void release_child(struct tg_session *s)
{
    struct stdio_link *ln = (struct stdio_link *)s->uplink;
    s->uplink = NULL;
    if (ln == NULL)
        return;
    tg_link_release(&ln->base);
    tg_child_kill(ln->child);
    free(ln);
}

/* At max_children a new session takes the child of an idle one (its host picks it, see
 * tg_session_pick_evictable). That session ends as if its child had exited, so its client's next
 * request gets 404 and it initialises again (what the protocol says a client does for a session
 * the server no longer knows). */
static void evict_for(const struct tg_upstream_send *a)
{
    struct tg_server *srv = a->srv;
    struct tg_session *s = a->sess;
    struct tg_upstream *u = a->up;
    int may_evict = 0;
    if (!tg_upstream_children_full(u, &may_evict) || !may_evict)
        return;
    uint64_t now = uv_now(srv->loop);
    int same = 0;
    struct tg_session *v = a->host->evictable(s, (uint64_t)srv->conf->limits.stdio_evict_idle_ms, &same);
    if (v == NULL || v->uplink == NULL)
        return;
    tg_upstream_count_eviction(u, same ? TG_EVICT_SAME_GRANT : TG_EVICT_OTHER_GRANT);
    tg_log(TG_LOG_INFO, "stdio child taken from an idle session at max_children",
           "upstream=%s grant=%s for_grant=%s idle_ms=%llu", tg_upstream_conf(u)->name, v->grant, s->grant,
           (unsigned long long)(now - v->last_active_ms));
    tg_link_gone(v->uplink, "the session was idle and its upstream process went to a new session");
}

static int stdio_open(const struct tg_upstream_send *a)
{
    struct tg_session *s = a->sess;
    if (s->uplink != NULL)
        return 0;
    evict_for(a);
    int err = 0;
    struct tg_child *ch = tg_upstream_take_child(a->up, on_child_message, on_child_exit, s, &err);
    if (ch == NULL)
        return err ? err : TG_EINVAL;
    struct stdio_link *ln = tg_xcalloc(1, sizeof(*ln));
    tg_link_init(&ln->base, &tg_upstream_stdio_ops, a);
    ln->child = ch;
    s->uplink = &ln->base;
    s->release_link = release_child;
    return 0;
}

static struct tg_child *child_of(struct tg_session *s)
{
    return s->uplink != NULL ? ((struct stdio_link *)s->uplink)->child : NULL;
}

static void stdio_send(const struct tg_upstream_send *a)
{
    if (a->body == NULL) {
        tg_link_listen(a); /* the server's own messages come from the child's stdout */
        return;
    }
    int ok = stdio_open(a) == 0 && tg_child_send(child_of(a->sess), a->body, a->len) == 0;
    tg_link_sent(a->sess->uplink, a, ok);
}

static void stdio_pause(struct tg_session *s, void *state, int pause)
{
    struct tg_child *ch = child_of(s);
    if (ch == NULL)
        return;
    if (pause)
        tg_child_pause(ch);
    else
        tg_child_resume(ch);
}

static void stdio_reply(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p, size_t n)
{
    struct tg_child *ch = child_of(s);
    if (ch != NULL)
        tg_child_send(ch, p, n);
}

static void stdio_close(struct tg_server *srv, struct tg_session *s) {}

static void on_child_message(void *ud, const char *p, size_t n, const struct tg_json_doc *doc, struct tg_buf *own)
{
    struct tg_session *s = ud;
    struct tg_server *srv = s->srv;
    struct tg_uplink *ln = s->uplink;
    if ((size_t)s->upstream >= srv->nupstreams || ln == NULL)
        return;
    const struct tg_upstream_host *host = ln->host;
    host->hold(s, 1);
    ln->up = srv->upstreams[s->upstream];
    if (doc == NULL)
        tg_link_oversized(ln, tg_slice_of(p, n));
    else
        tg_link_message(ln, p, n, doc, own); /* may end the session, and ln with it */
    host->backpressure(s);
    host->hold(s, 0);
}

/* The session's child died: its calls fail cleanly and the session ends, so that the next
 * initialize starts a new child. */
static void on_child_exit(void *ud, int64_t status, int sig)
{
    struct tg_session *s = ud;
    struct tg_uplink *ln = s->uplink;
    if (ln == NULL)
        return;
    s->uplink = NULL; /* the child frees itself */
    tg_link_gone(ln, "the upstream process exited");
    free(ln);
}

const struct tg_upstream_ops tg_upstream_stdio_ops = {
    .name = "stdio",
    .flags = TG_UPOPS_SESSION_LINK,
    .send = stdio_send,
    .sent = tg_link_op_sent,
    .cancel = tg_link_op_cancel,
    .pause = stdio_pause,
    .touch = tg_link_op_touch,
    .reply = stdio_reply,
    .close = stdio_close,
};
