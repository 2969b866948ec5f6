#include "core/call/sink.h"
#include "core/bridge/stateless.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/call.h"
#include "core/call/gateway.h"
#include "core/call/upauth.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/legacy.h"
#include "core/mcp/modern.h"
#include "core/wire/msg.h"
#include "policy/auth.h"
#include "policy/policy.h"
#include "core/call/session.h"
#include "upstream/pool/pool.h"

/* Where the upstream session of a stateless session stands. */
enum boot_state {
    BOOT_NONE,    /* nothing sent yet (or the last try failed: the next request tries again) */
    BOOT_PROBE,   /* waiting for the upstream's era (upstream/probe.c) */
    BOOT_INIT,    /* the gateway's initialize is upstream */
    BOOT_NOTIFY,  /* initialize answered; notifications/initialized is upstream */
    BOOT_READY,   /* requests go straight to the gate */
};

/* One stateless session's bridge state. Owner: the stateless table (srv->stateless holds the
 * session, the session points here); freed with the table's slot (slot_free) or at shutdown. */
struct tg_bridge {
    struct tg_session *s;   /* the session it belongs to (the table's reference keeps it) */
    enum boot_state state;
    int modern;             /* the upstream speaks 2026-07-28: requests pass as they are */
    int failed;             /* the last boot failed: its waiters are answered -32004 */
    char why[160];          /* why it failed */
    char *caps;             /* the upstream's initialize result capabilities (JSON), or NULL */
    struct tg_list waiters; /* struct waiter, oldest first */
    unsigned nwait;
    struct tg_list ready;   /* in srv's pending list while waiters should run */
    uint64_t reloads;       /* srv->reloads when the waiters were queued */
    const struct tg_exchange *asking; /* during tg_bridge_admit only: the request that may start the
                                       * boot, whose JWT a token_exchange upstream's initialize takes */
};

/* A stateless request waiting for its upstream session. Owner: its bridge's list; freed when it
 * runs or is answered. */
struct waiter {
    struct tg_list link;
    struct tg_exchange x;   /* copied; grant and uc are checked again (reloads) before use */
    struct tg_sink *sk;     /* the waiting client's sink (our reference until handed on) */
    struct tg_msg m;        /* the message, taken over from the transport */
    char *fwd_headers;      /* x.fwd_headers, copied (the client's buffer goes) */
    char *scopes, *resource_metadata; /* x's, copied (they were on the route's stack) */
    struct tg_principal who; /* *x.who, copied (the transport's goes): its subject is counted */
    char *subject_who, *subject_token; /* x's, copied for a token exchange (the JWT wiped when freed) */
    tg_bridge_go_cb go;     /* the gate's continuation */
};

/* The sink the gateway's own initialize and notifications/initialized answer through: it keeps
 * the result and, when released (after the answer, exactly once), moves the boot on from the
 * loop. Owner: the call it is bound to, through the release op. */
struct boot_sink {
    struct tg_sink sink;
    struct tg_session *s; /* reference */
    int ok;
    char *caps;
    char why[160];
};

/* The list of bridges whose waiters should run. One loop, one list: it lives with the
 * stateless table (srv) and is set up on first use. */
static struct tg_list *pending_of(struct tg_server *srv)
{
    if (srv->bridge_pending.next == NULL)
        tg_list_init(&srv->bridge_pending);
    return &srv->bridge_pending;
}

static void schedule(struct tg_bridge *b)
{
    if (!tg_list_linked(&b->ready))
        tg_list_insert_tail(pending_of(b->s->srv), &b->ready);
}

/* ---- the boot sink -------------------------------------------------------------------- */

static void boot_message(struct tg_sink *sk, struct tg_call *k, const char *p, size_t n)
{
    (void)sk, (void)k, (void)p, (void)n; /* what the upstream says while it initializes is not for a client */
}

static void boot_answer(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p, size_t n)
{
    (void)k, (void)status, (void)extra;
    struct boot_sink *bs = (struct boot_sink *)sk;
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 64, 1, &doc, NULL, NULL) != 0) {
        snprintf(bs->why, sizeof(bs->why), "the upstream's answer to initialize is not JSON");
        return;
    }
    cJSON *res = tg_json_get(doc.root, "result");
    cJSON *err = tg_json_get(doc.root, "error");
    if (cJSON_IsObject(res)) {
        bs->ok = 1;
        cJSON *caps = tg_json_get(res, "capabilities");
        if (cJSON_IsObject(caps))
            bs->caps = cJSON_PrintUnformatted(caps);
    } else {
        cJSON *msg = tg_json_get(err, "message");
        snprintf(bs->why, sizeof(bs->why), "the upstream refused the gateway's initialize: %.100s",
                 cJSON_IsString(msg) ? msg->valuestring : "(no message)");
    }
    cJSON_Delete(doc.root);
}

static void boot_bare(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p, size_t n)
{
    (void)k, (void)extra, (void)p, (void)n;
    struct boot_sink *bs = (struct boot_sink *)sk;
    if (status >= 200 && status < 300)
        bs->ok = 1;
    else
        snprintf(bs->why, sizeof(bs->why), "the upstream answered notifications/initialized with HTTP %d", status);
}


/* The boot step is over: the bridge moves on from the loop, never inside the call's callback. */
static void boot_release(struct tg_sink *sk, struct tg_call *k)
{
    (void)k;
    struct boot_sink *bs = (struct boot_sink *)sk;
    struct tg_session *s = bs->s;
    struct tg_bridge *b = s->u.bridge;
    if (b != NULL && (b->state == BOOT_INIT || b->state == BOOT_NOTIFY)) {
        if (!bs->ok) {
            b->state = BOOT_NONE;
            b->failed = 1;
            tg_strlcpy(b->why, bs->why[0] ? bs->why : "the upstream did not answer the gateway's initialize",
                       sizeof(b->why));
            tg_log(TG_LOG_WARN, "upstream session for stateless requests failed", "grant=%s upstream_index=%d why=%s",
                   s->grant, s->upstream, b->why);
        } else if (b->state == BOOT_INIT) {
            free(b->caps);
            b->caps = bs->caps;
            bs->caps = NULL;
            b->state = BOOT_NOTIFY; /* run_pending sends notifications/initialized */
        } else {
            b->state = BOOT_READY;
        }
        schedule(b);
    }
    free(bs->caps);
    tg_session_unref(s);
    free(bs);
}

static const struct tg_sink_ops boot_ops = {
    .message = boot_message,
    .answer = boot_answer,
    .bare = boot_bare,
    .stream = tg_sink_nop,
    .end = tg_sink_nop,
    .poll = tg_sink_nop_poll,
    TG_SINK_NO_CLIENT,
    .release = boot_release,
};

/* Send one message of the gateway's own on the stateless session, as a 2025 client would: a call
 * the bridge makes itself (json: a notification's text, answered 202, or what follows a
 * request's id, which is the call's own). Nothing to decide: it is the gateway's own lifecycle. */
static void boot_send(struct tg_server *srv, struct tg_bridge *b, const char *json, int notify)
{
    struct tg_session *s = b->s;
    const struct tg_grant_conf *g = tg_conf_find_grant(srv->conf, s->grant);
    const struct tg_upstream_conf *uc =
        (size_t)s->upstream < srv->conf->nupstreams ? &srv->conf->upstreams[s->upstream] : NULL;
    struct boot_sink *bs = tg_xcalloc(1, sizeof(*bs));
    bs->sink.ops = &boot_ops;
    bs->sink.flags = TG_SINK_ANSWER_ONLY | TG_SINK_NO_WAIT;
    bs->s = tg_session_ref(s);
    if (g == NULL || uc == NULL) {
        snprintf(bs->why, sizeof(bs->why), "the grant or the upstream is gone (reload)");
        boot_release(&bs->sink, NULL);
        return;
    }
    if (!notify && srv->draining) {
        snprintf(bs->why, sizeof(bs->why), "the gateway is shutting down");
        boot_release(&bs->sink, NULL);
        return;
    }
    if (!notify && s->inflight >= (unsigned)srv->conf->limits.inflight_per_session) {
        srv->metrics.limit_inflight++;
        snprintf(bs->why, sizeof(bs->why), "too many calls in flight for this session (limits.inflight_per_session)");
        boot_release(&bs->sink, NULL);
        return;
    }
    struct tg_call *k = tg_call_new(srv, s, &bs->sink, notify ? KIND_FORWARD : KIND_REQUEST);
    /* A token_exchange upstream: the session's messages go with a token exchanged for the JWT
     * of the request that made the session be started. */
    if (b->asking != NULL)
        tg_call_upauth_from(k, b->asking);
    else if (!tg_list_empty(&b->waiters))
        tg_call_upauth_from(k, &tg_container_of(b->waiters.next, struct waiter, link)->x);
    k->era = TG_ERA_2025;
    tg_strlcpy(k->proto, TG_PROTO_LATEST, sizeof(k->proto));
    struct tg_buf body;
    tg_buf_init(&body);
    if (notify) {
        srv->metrics.rpc_notifications++;
        tg_buf_appends(&body, json);
    } else {
        srv->metrics.rpc_requests++;
        s->inflight++;
        k->policy = tg_policy_ref(tg_conf_policy_for(srv->conf, g, s->upstream));
        k->method = tg_xstrdup("initialize");
        k->is_init = 1;
        k->client_id = tg_xstrdup("0"); /* the id the boot sink's answer carries */
        k->client_id_len = 1;
        k->gid = ++srv->next_gid;
        k->gid_len = (size_t)snprintf(k->gid_str, sizeof(k->gid_str), "%llu", (unsigned long long)k->gid);
        tg_buf_appends(&body, "{\"jsonrpc\":\"2.0\",\"id\":");
        tg_buf_appends(&body, k->gid_str);
        tg_buf_appends(&body, json);
    }
    tg_call_send(k, body.base, body.len, (uint64_t)uc->call_timeout_ms);
    tg_buf_dispose(&body);
}

static void boot_start(struct tg_server *srv, struct tg_bridge *b)
{
    b->state = BOOT_INIT;
    b->failed = 0;
    /* Every input kind a 2026 client may take: a server request reaches the client that made the
     * call as input_required, when that client declared the kind, and is refused otherwise. */
    boot_send(srv, b,
              ",\"method\":\"initialize\",\"params\":{\"protocolVersion\":\"" TG_PROTO_LATEST
              "\",\"capabilities\":{\"elicitation\":{},\"sampling\":{},\"roots\":{}},\"clientInfo\":{\"name\":\"tollgate\",\"version\":\"" TG_VERSION "\"}}}",
              0);
}

/* ---- waiters ----------------------------------------------------------------------------- */


/* server/discover, answered by the gateway: the versions it serves for this upstream, and what
 * the upstream's initialize declared (or, for a local initialize, the gateway's own). */
static void answer_discover(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, const struct tg_bridge *b0)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_mcp_discover_result(&b, m->id_raw, m->id_len, x->uc, b0 != NULL ? b0->caps : NULL,
                           b0 == NULL ? 0 : 2);
    sk->ops->answer(sk, NULL, 200, NULL, b.base, b.len);
    sk->ops->release(sk, NULL);
    tg_buf_dispose(&b);
}

/* m may go on to the gate now: what the upstream session speaks goes into x. 1 if the bridge
 * answered m itself (server/discover), 0 if the gate is to decide it. */
static int admit(struct tg_bridge *b, struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m)
{
    x->up_modern = b != NULL && b->modern;
    x->up_caps = b != NULL && !b->modern ? b->caps : NULL;
    if (m->kind == TG_MSG_REQUEST && strcmp(m->method, "server/discover") == 0) {
        answer_discover(x, sk, m, b);
        return 1;
    }
    return 0;
}

static struct tg_upstream *runtime_of(struct tg_server *srv, const struct tg_session *s)
{
    return (size_t)s->upstream < srv->nupstreams ? srv->upstreams[s->upstream] : NULL;
}

/* The upstream's era is known: a 2025 upstream gets the gateway's initialize, a modern one
 * nothing (its discover result gave the capabilities). 0, or -1 while it is not known. */
static int era_known(struct tg_server *srv, struct tg_bridge *b)
{
    struct tg_upstream *u = runtime_of(srv, b->s);
    enum tg_up_era e = u != NULL ? tg_upstream_era(u) : TG_UP_ERA_UNKNOWN;
    if (e == TG_UP_ERA_UNKNOWN) {
        if (u != NULL)
            tg_upstream_probe(u);
        return -1;
    }
    if (e == TG_UP_ERA_2025) {
        boot_start(srv, b);
        return 0;
    }
    b->modern = 1;
    free(b->caps);
    b->caps = NULL;
    cJSON *res = cJSON_Parse(tg_upstream_discover(u));
    cJSON *caps = tg_json_get(res, "capabilities");
    if (cJSON_IsObject(caps))
        b->caps = cJSON_PrintUnformatted(caps);
    cJSON_Delete(res);
    b->state = BOOT_READY;
    schedule(b);
    return 0;
}

static void waiter_free(struct waiter *w)
{
    tg_list_unlink(&w->link);
    tg_msg_dispose(&w->m);
    free(w->fwd_headers);
    free(w->scopes);
    free(w->resource_metadata);
    free(w->subject_who);
    if (w->subject_token != NULL)
        memset(w->subject_token, 0, w->x.subject_token_len);
    free(w->subject_token);
    free(w);
}

static void fail_waiters(struct tg_bridge *b, const char *why)
{
    char msg[200];
    snprintf(msg, sizeof(msg), "upstream session unavailable: %s", why);
    while (!tg_list_empty(&b->waiters)) {
        struct waiter *w = tg_container_of(b->waiters.next, struct waiter, link);
        b->nwait--;
        w->go(&w->x, w->sk, &w->m, msg);
        waiter_free(w);
    }
}

static void run_bridge(struct tg_server *srv, struct tg_bridge *b)
{
    struct tg_session *s = b->s;
    if (!s->live) {
        fail_waiters(b, "the session ended");
        return;
    }
    if (b->state == BOOT_NOTIFY) {
        boot_send(srv, b, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}", 1);
        return;
    }
    if (b->state == BOOT_PROBE) {
        struct tg_upstream *u = runtime_of(srv, s);
        if (era_known(srv, b) == 0)
            return;
        if (u != NULL && tg_upstream_probing(u))
            return; /* still asking: tg_bridge_wake comes with the verdict */
        b->state = BOOT_NONE;
        fail_waiters(b, "the upstream could not be asked which protocol it speaks");
        return;
    }
    if (b->failed) {
        fail_waiters(b, b->why);
        return;
    }
    if (b->state != BOOT_READY)
        return;
    if (b->reloads != srv->reloads && !tg_list_empty(&b->waiters)) {
        fail_waiters(b, "the configuration was reloaded while it was being made; send the request again");
        return;
    }
    while (!tg_list_empty(&b->waiters)) {
        struct waiter *w = tg_container_of(b->waiters.next, struct waiter, link);
        b->nwait--;
        tg_list_unlink(&w->link);
        if (!w->sk->ops->listening(w->sk))
            w->sk->ops->release(w->sk, NULL); /* the client left: nothing of its goes upstream */
        else if (!admit(b, &w->x, w->sk, &w->m))
            w->go(&w->x, w->sk, &w->m, NULL); /* the gate decides it now */
        tg_list_init(&w->link);
        waiter_free(w);
    }
}

void tg_bridge_run_pending(struct tg_server *srv)
{
    struct tg_list *pend = pending_of(srv);
    struct tg_list batch;
    tg_list_init(&batch);
    tg_list_splice_tail(&batch, pend); /* what this round queues runs in the next */
    while (!tg_list_empty(&batch)) {
        struct tg_bridge *b = tg_container_of(batch.next, struct tg_bridge, ready);
        tg_list_unlink(&b->ready);
        tg_list_init(&b->ready);
        run_bridge(srv, b);
    }
}

int tg_bridge_pending(struct tg_server *srv) { return !tg_list_empty(pending_of(srv)); }

enum tg_bridge_admission tg_bridge_admit(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m, tg_bridge_go_cb go)
{
    struct tg_server *srv = x->srv;
    struct tg_session *s = x->sess;
    struct tg_bridge *b = s->u.bridge;
    if (b->state == BOOT_NONE && !x->uc->init_local) {
        /* A cached verdict decides at once: a modern upstream is ready, a 2025 one gets the
         * gateway's initialize; otherwise the probe's verdict is waited for. */
        b->state = BOOT_PROBE;
        b->asking = x;
        era_known(srv, b);
        b->asking = NULL;
    }
    if (x->uc->init_local || (b->state == BOOT_READY && tg_list_empty(&b->waiters)))
        return admit(b, x, sk, m) ? TG_BRIDGE_ANSWERED : TG_BRIDGE_READY;
    if (b->nwait + s->inflight >= (unsigned)srv->conf->limits.inflight_per_session) {
        srv->metrics.limit_inflight++;
        return TG_BRIDGE_FULL;
    }
    struct waiter *w = tg_xcalloc(1, sizeof(*w));
    w->x = *x;
    w->sk = sk;
    w->m = *m;
    w->m.src = NULL; /* the transport's bytes are not kept: it is written from the tree */
    memset(m, 0, sizeof(*m));
    if (x->fwd_headers != NULL)
        w->fwd_headers = tg_xstrdup(x->fwd_headers);
    w->x.fwd_headers = w->fwd_headers;
    w->scopes = x->scopes != NULL ? tg_xstrdup(x->scopes) : NULL;
    w->resource_metadata = x->resource_metadata != NULL ? tg_xstrdup(x->resource_metadata) : NULL;
    w->x.scopes = w->scopes;
    w->x.resource_metadata = w->resource_metadata;
    w->x.cred = NULL; /* the channel credential was on the route's stack */
    w->x.who = NULL;
    if (x->who != NULL) {
        w->who = *x->who; /* copied: the transport's goes (its resource pointer with it) */
        w->who.resource = NULL;
        w->x.who = &w->who;
    }
    if (x->subject_token != NULL) { /* a token exchange needs the JWT and whose it is */
        w->subject_who = tg_call_upauth_who(x);
        w->subject_token = tg_xcalloc(1, x->subject_token_len + 1);
        memcpy(w->subject_token, x->subject_token, x->subject_token_len);
        w->x.subject_token = w->subject_token;
        w->x.subject_who = w->subject_who;
    }
    w->go = go;
    if (tg_list_empty(&b->waiters))
        b->reloads = srv->reloads;
    tg_list_insert_tail(&b->waiters, &w->link);
    b->nwait++;
    struct tg_upstream *u = runtime_of(srv, s);
    if (b->state == BOOT_PROBE && (u == NULL || !tg_upstream_probing(u)))
        schedule(b); /* no probe runs (it failed a moment ago): the waiter is answered -32004 */
    return TG_BRIDGE_PARKED;
}

void tg_bridge_wake(struct tg_server *srv)
{
    for (size_t i = 0; i < srv->nstateless; i++) {
        struct tg_bridge *b = srv->stateless[i]->u.bridge;
        if (b != NULL && b->state == BOOT_PROBE)
            schedule(b);
    }
}

/* ---- the stateless table ------------------------------------------------------------- */

static void bridge_free(struct tg_session *s)
{
    struct tg_bridge *b = s->u.bridge;
    if (b == NULL)
        return;
    fail_waiters(b, "the session ended");
    if (tg_list_linked(&b->ready))
        tg_list_unlink(&b->ready);
    free(b->caps);
    free(b);
    s->u.bridge = NULL;
}

int tg_bridge_find(struct tg_exchange *x)
{
    struct tg_server *srv = x->srv;
    /* Matched on the session's own grant and upstream, which a reload keeps current (upstream
     * indices move when upstreams are added or removed). */
    for (size_t i = 0; i < srv->nstateless; i++) {
        struct tg_session *c = srv->stateless[i];
        if (c->live && c->upstream == x->upstream && strcmp(c->grant, x->grant->name) == 0) {
            c->last_active_ms = uv_now(srv->loop);
            x->sess = c;
            return 1;
        }
    }
    return 0;
}

void tg_bridge_adopt(struct tg_exchange *x)
{
    struct tg_server *srv = x->srv;
    struct tg_session **slot = NULL;
    for (size_t i = 0; i < srv->nstateless && slot == NULL; i++)
        if (!srv->stateless[i]->live)
            slot = &srv->stateless[i];
    struct tg_session *s = x->sess;
    struct tg_bridge *b = tg_xcalloc(1, sizeof(*b));
    b->s = s;
    tg_list_init(&b->waiters);
    tg_list_init(&b->ready);
    s->u.bridge = b;
    if (x->uc->init_local) {
        /* The upstream hears 2025 from this session: the gateway speaks the latest 2025 version. */
        s->proto = TG_PROTO_LATEST;
        s->initialized = 1;
        b->state = BOOT_READY;
    }
    if (slot == NULL) {
        srv->stateless = tg_xrealloc(srv->stateless, (srv->nstateless + 1) * sizeof(*srv->stateless));
        slot = &srv->stateless[srv->nstateless++];
    } else {
        bridge_free(*slot);
        tg_session_unref(*slot);
    }
    *slot = tg_session_ref(s);
}

void tg_bridge_dispose(struct tg_server *srv)
{
    for (size_t i = 0; i < srv->nstateless; i++) {
        bridge_free(srv->stateless[i]);
        tg_session_unref(srv->stateless[i]);
    }
    free(srv->stateless);
    srv->stateless = NULL;
    srv->nstateless = 0;
}
