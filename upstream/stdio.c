/* stdio upstreams: a child process per session (upstream/child.c runs it, the pool keeps warm
 * ones ready); every message of the session goes on its stdin, answers and the server's own
 * messages come on its stdout. */
#include <stdio.h>
#include <stdlib.h>

#include "core/call/call.h"
#include "core/base/log.h"
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
    tg_child_kill(ln->child);
    free(ln);
}

/* Its client still holds a stream of it open. A GET stream whose connection closed stays (its
 * events kept for a Last-Event-ID) with no one listening: that client is gone. */
static int client_connected(const struct tg_session *s)
{
    if (s->channel != NULL)
        return 1;
    struct tg_sink *sk = s->get_stream != NULL ? tg_call_sink(s->get_stream) : NULL;
    return sk != NULL && (sk->ops->connected != NULL ? sk->ops->connected(sk) : sk->ops->listening(sk));
}

/* At max_children a new session takes the child of an idle one (core/call/session.c picks it): of its
 * own grant whose client is gone at once, else one idle limits.stdio_evict_idle_ms (its own
 * grant's first). That session ends as if its child had exited, so its client's next request
 * gets 404 and it initialises again (what the protocol says a client does for a session the
 * server no longer knows). */
static void evict_for(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u)
{
    int may_evict = 0;
    if (!tg_upstream_children_full(u, &may_evict) || !may_evict)
        return;
    uint64_t now = uv_now(srv->loop);
    int same = 0;
    uint64_t idle_ms = (uint64_t)srv->conf->limits.stdio_evict_idle_ms;
    struct tg_session *v =
        tg_session_pick_evictable(srv->sessions, s->upstream, s->grant, now, idle_ms, client_connected, &same);
    if (v == NULL)
        return;
    tg_upstream_count_eviction(u, same ? TG_EVICT_SAME_GRANT : TG_EVICT_OTHER_GRANT);
    tg_log(TG_LOG_INFO, "stdio child taken from an idle session at max_children",
           "upstream=%s grant=%s for_grant=%s idle_ms=%llu", tg_upstream_conf(u)->name, v->grant, s->grant,
           (unsigned long long)(now - v->last_active_ms));
    tg_call_link_gone(v, "the session was idle and its upstream process went to a new session");
}

static int stdio_open(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u)
{
    if (s->uplink != NULL)
        return 0;
    evict_for(srv, s, u);
    int err = 0;
    struct tg_child *ch = tg_upstream_take_child(u, on_child_message, on_child_exit, s, &err);
    if (ch == NULL)
        return err ? err : TG_EINVAL;
    struct stdio_link *ln = tg_xcalloc(1, sizeof(*ln));
    ln->base.ops = &tg_upstream_stdio_ops;
    ln->child = ch;
    s->uplink = &ln->base;
    s->release_link = release_child;
    return 0;
}

static struct tg_child *child_of(struct tg_session *s)
{
    return s->uplink != NULL ? ((struct stdio_link *)s->uplink)->child : NULL;
}

static void stdio_send(struct tg_call *k, const char *body, size_t len, uint64_t timeout)
{
    if (body == NULL) {
        tg_call_link_listen(k); /* the server's own messages come from the child's stdout */
        return;
    }
    int ok = stdio_open(k->srv, k->sess, k->uprt) == 0 && tg_child_send(child_of(k->sess), body, len) == 0;
    tg_call_link_sent(k, ok, timeout);
}

static void stdio_pause(struct tg_session *s, struct tg_call *k, int pause)
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
    if ((size_t)s->upstream >= srv->nupstreams)
        return;
    tg_session_ref(s);
    if (doc == NULL)
        tg_session_link_oversized(s, tg_slice_of(p, n));
    else
        tg_session_link_message(srv, s, srv->upstreams[s->upstream], p, n, doc, own);
    tg_session_backpressure(srv, s);
    tg_session_unref(s);
}

/* The session's child died: its calls fail cleanly and the session ends, so that the next
 * initialize starts a new child. */
static void on_child_exit(void *ud, int64_t status, int sig)
{
    struct tg_session *s = ud;
    free(s->uplink); /* the child frees itself */
    s->uplink = NULL;
    tg_call_link_gone(s, "the upstream process exited");
}

const struct tg_upstream_ops tg_upstream_stdio_ops = {
    .name = "stdio",
    .flags = TG_UPOPS_SESSION_LINK,
    .probe = NULL,
    .open = stdio_open,
    .send = stdio_send,
    .sent = tg_call_link_sent_yes,
    .cancel = tg_call_link_cancel,
    .pause = stdio_pause,
    .touch = tg_call_link_touch,
    .reply = stdio_reply,
    .close = stdio_close,
};
