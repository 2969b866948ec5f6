#include "core/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/json.h"
#include "core/log.h"
#include "core/msg.h"
#include "core/audit.h"
#include "core/session.h"
#include "policy/auth.h"
#include "policy/policy.h"
#include "policy/counters.h"
#include "upstream/sse.h"
#include "transports/ws.h"
#include "upstream/stdio.h"
#include "upstream/upstream.h"

/* What a call is relaying, decided when the upstream's head arrives. */
enum call_mode {
    MODE_WAIT,     /* no upstream head yet */
    MODE_JSON,     /* application/json body being collected */
    MODE_SSE,      /* text/event-stream relayed event by event */
    MODE_ACCEPTED, /* 202 for a notification or response */
    MODE_GONE,     /* upstream says the session does not exist */
    MODE_ERROR,    /* any other status */
};

enum call_kind {
    KIND_REQUEST,   /* a client request; the answer goes back with the client's id */
    KIND_FORWARD,   /* a notification or a response from the client; answered 202 */
    KIND_GET,       /* the session's GET stream */
};

/* A client SSE stream of Streamable HTTP (a POST's answer or the GET stream): every event gets
 * an id "STREAM-SEQ", and the last limits.replay_bytes of events are kept so that a client that
 * lost the connection can GET with Last-Event-ID and carry on where it stopped. Owner: the
 * session (streams list); kept REPLAY_KEEP_MS after the stream ended, then freed by the tick. */
#define REPLAY_KEEP_MS 60000
#define REPLAY_MAX_PER_SESSION 16

struct tg_replay {
    struct tg_server *srv;
    struct tg_session *sess; /* reference */
    uint64_t id;
    uint64_t next_seq;
    /* The events, as written, in two generations: new ones go to gen[cur]; when it passes half
     * of limits.replay_bytes the older generation is dropped and the roles swap. No allocation
     * per event, and at most replay_bytes (plus one event) kept. */
    struct tg_buf gen[2];
    int cur;
    struct tg_call *live;    /* the call still producing events, or NULL once it ended */
    uint64_t last_write_ms;
    uint64_t ended_at;
    uint64_t detached_at;    /* the client went away while live */
    struct tg_list slink;    /* session's streams */
    struct tg_list glink;    /* srv->streams */
};

/* A JSON-RPC batch (protocol 2025-03-26 only): each element is decided and forwarded on its
 * own, and the answers are gathered into one JSON array. Owner: the router; freed when the
 * last element is done. */
/* A client transport that carries every message of one session on one long-lived stream:
 * legacy HTTP+SSE (replies as "message" events) or WebSocket (one text frame each).
 * Owner: refcounted; the client connection holds one reference until it goes, and every
 * message in flight (a batch) and the upstream GET stream hold one each. */
enum channel_kind { CH_SSE, CH_WS };

struct tg_channel {
    struct tg_server *srv;
    struct tg_session *sess; /* reference */
    enum channel_kind kind;
    struct tg_conn *conn;    /* NULL once the client has gone */
    struct tg_ws *ws;        /* CH_WS */
    int refcnt;
    int open;
    uint64_t last_write_ms;
    struct tg_list link;     /* srv->channels */
};

struct tg_batch {
    struct tg_server *srv;
    struct tg_conn *conn; /* NULL once the client has gone */
    int pending;          /* elements (and the dispatch loop itself) not done yet */
    struct tg_buf out;    /* "[a,b" so far */
    int nout;
    struct tg_channel *channel; /* answers go to this channel instead of conn */
    int single;                 /* a channel message that was not an array: answers go out one by one */
};

/* One client message in flight to the upstream. Owner: the router; freed by
 * call_free() after the upstream request is done or cancelled. Holds a
 * session reference. */
struct tg_call {
    struct tg_server *srv;
    int closed;               /* call_free() ran: inert, memory released by tg_router_run_pending */
    struct tg_list dlink;     /* srv->dead_calls once closed */
    struct tg_session *sess;
    struct tg_conn *conn; /* NULL once the client has gone */
    struct tg_upreq *up;
    enum call_kind kind;
    enum call_mode mode;
    int is_init;
    int got_response;
    uint64_t gid;
    char gid_str[24];
    size_t gid_len;
    char *client_id;
    size_t client_id_len;
    struct tg_buf body;
    struct tg_sse_parser sse;
    struct tg_list slink;
    struct tg_upstream *uprt; /* the upstream runtime this call uses */
    struct tg_policy *policy; /* decided under this policy (a reload does not change it) */
    char *grant;
    char *method;
    char *tool;               /* tools/call */
    struct tg_decision *dec;  /* tools/call: the decision and its reservations */
    char args_sha256[65];
    char *args_json;
    int is_tools_list;
    char *id_key;             /* canonical client id: duplicates and cancellation */
    int forwarded;            /* the message reached the upstream */
    int refunded;
    /* approvals */
    int parked;
    char approval_id[33];
    uint64_t approval_deadline;
    uint64_t parked_at_wall;
    struct tg_list alink;
    struct tg_buf held;       /* the message, serialized, waiting for a decision */
    struct tg_batch *batch;   /* the batch this element belongs to, or NULL */
    struct tg_channel *channel; /* KIND_GET for a channel session: events go there (reference) */
    /* message-stream upstreams (stdio, legacy SSE): the answer arrives on the session's stream */
    int awaiting;             /* in srv->awaiting (uses alink), answer not here yet */
    uint64_t deadline;        /* loop time after which the call times out */
    uint64_t sent_at;
    char *progress_token;     /* canonical params._meta.progressToken, for routing progress */
    struct tg_replay *replay; /* the client SSE stream's ids and replay buffer */
    struct tg_json_doc body_doc; /* MODE_JSON: the answer's spans, parsed once */
    int body_doc_ok;
    /* SEP-1699: the upstream ended the answer stream early with an event id and a retry; the
     * call waits retry ms (resume), then GETs the stream again with Last-Event-ID. */
    struct resume_wait *resume;
    int resumes;       /* reconnects in a row without an event between them */
    int resumes_total; /* reconnects of this call */
    uint64_t first_sent_ns; /* the first upstream request: latency covers the whole call */
    int resuming;      /* the upstream request now is such a GET */
    int resume_failed; /* that GET was refused: what it says is not relayed */
};

/* The timer of a call waiting to reconnect. Owner: the call until it is cancelled; freed in
 * its close callback. */
struct resume_wait {
    uv_timer_t timer;
    struct tg_call *k; /* NULL once cancelled */
};

static void on_resume_closed(uv_handle_t *h) { free(h->data); }

static void resume_cancel(struct tg_call *k)
{
    struct resume_wait *w = k->resume;
    if (w == NULL)
        return;
    k->resume = NULL;
    w->k = NULL;
    uv_close((uv_handle_t *)&w->timer, on_resume_closed);
}

static const char *const supported_versions[] = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", NULL};

int tg_proto_supported(struct tg_slice v)
{
    for (int i = 0; supported_versions[i]; i++)
        if (tg_slice_eq(v, tg_slice_cstr(supported_versions[i])))
            return 1;
    return 0;
}

static uint64_t now_ms(struct tg_server *srv) { return uv_now(srv->loop); }

/* Counters are aligned to UTC, so decisions use the wall clock. */
static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *up_name(const struct tg_call *k) { return tg_upstream_conf(k->uprt)->name; }

/* A canonical form of a request id: "n" + digits, or "s" + the decoded string. */
static char *id_key_of(const char *raw, size_t n)
{
    if (raw == NULL)
        return NULL;
    if (n > 0 && raw[0] == '"') {
        struct tg_json_doc d;
        if (tg_json_parse(raw, n, 2, 1, &d, NULL, NULL) != 0 || !cJSON_IsString(d.root)) {
            cJSON_Delete(d.root);
            return NULL;
        }
        size_t l = strlen(d.root->valuestring);
        char *k = tg_xmalloc(l + 2);
        k[0] = 's';
        memcpy(k + 1, d.root->valuestring, l + 1);
        cJSON_Delete(d.root);
        return k;
    }
    char *k = tg_xmalloc(n + 2);
    k[0] = 'n';
    memcpy(k + 1, raw, n);
    k[n + 1] = '\0';
    return k;
}

/* ---- small answers --------------------------------------------------------- */

static void respond_rpc(struct tg_conn *c, int status, const char *extra, const char *id, size_t id_len, int code,
                        const char *msg, const char *data)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_rpc_error(&b, id, id_len, code, msg, data);
    tg_http_respond(c, status, extra, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

/* error.data for -32004, NUL-terminated (it is passed on as a C string). */
static void upstream_data(struct tg_buf *b, const char *upstream)
{
    tg_buf_appends(b, "{\"upstream\":");
    tg_json_write_string(b, upstream, strlen(upstream));
    tg_buf_append(b, "}", 2);
}

/* ---- origin ----------------------------------------------------------------- */

static int origin_allowed(const struct tg_listen_conf *lc, struct tg_slice o)
{
    if (o.ptr == NULL)
        return 1; /* non-browser clients send no Origin */
    if (lc && lc->any_origin)
        return 1;
    if (lc)
        for (size_t i = 0; i < lc->norigins; i++)
            if (tg_slice_eq(o, tg_slice_cstr(lc->origins[i])))
                return 1;
    const char *p = o.ptr;
    size_t n = o.len;
    size_t skip = 0;
    if (n > 7 && strncasecmp(p, "http://", 7) == 0)
        skip = 7;
    else if (n > 8 && strncasecmp(p, "https://", 8) == 0)
        skip = 8;
    else
        return 0;
    p += skip;
    n -= skip;
    size_t hl;
    if (n > 0 && p[0] == '[') {
        const char *e = memchr(p, ']', n);
        if (e == NULL)
            return 0;
        hl = (size_t)(e - p) + 1;
    } else {
        hl = 0;
        while (hl < n && p[hl] != ':' && p[hl] != '/')
            hl++;
    }
    struct tg_slice host = tg_slice_of(p, hl);
    /* What follows the host may only be a port. */
    size_t i = hl;
    if (i < n) {
        if (p[i] != ':' || i + 1 == n)
            return 0;
        for (i++; i < n; i++)
            if (p[i] < '0' || p[i] > '9')
                return 0;
    }
    return tg_slice_eq_nocase(host, "localhost") || tg_slice_eq(host, TG_SLICE("127.0.0.1")) ||
           tg_slice_eq(host, TG_SLICE("[::1]"));
}

/* ---- calls --------------------------------------------------------------------- */

static void channel_unref(struct tg_channel *ch);
static void channel_end(struct tg_channel *ch, uint16_t ws_code, const char *why);
static void end_get_stream(struct tg_session *s);

/* One JSON-RPC message to the client of a channel session. */
static void channel_send(struct tg_channel *ch, const char *p, size_t n)
{
    if (!ch->open || ch->conn == NULL)
        return;
    ch->last_write_ms = uv_now(ch->srv->loop);
    if (ch->kind == CH_WS) {
        tg_ws_send_text(ch->ws, p, n);
        return;
    }
    struct tg_buf b;
    tg_buf_init(&b);
    if (tg_buf_try_reserve(&b, n + 32, 0) != 0)
        abort();
    tg_buf_appends(&b, "event: message\n");
    size_t st = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || p[i] == '\n' || p[i] == '\r') {
            tg_buf_appends(&b, "data: ");
            tg_buf_append(&b, p + st, i - st);
            tg_buf_append(&b, "\n", 1);
            st = i + 1;
        }
    tg_buf_append(&b, "\n", 1);
    tg_http_stream_write(ch->conn, b.base, b.len);
    tg_buf_dispose(&b);
    ch->srv->metrics.sse_events_relayed++;
}

static size_t channel_pending(const struct tg_channel *ch)
{
    if (!ch->open || ch->conn == NULL)
        return 0;
    return ch->kind == CH_WS ? tg_ws_pending(ch->ws) : ch->conn->out_pending;
}

static void batch_add(struct tg_batch *b, const char *p, size_t n)
{
    if (b->channel != NULL && b->single) {
        channel_send(b->channel, p, n);
        b->nout++;
        return;
    }
    tg_buf_append(&b->out, b->nout ? "," : "[", 1);
    tg_buf_append(&b->out, p, n);
    b->nout++;
}

static void batch_add_error(struct tg_batch *b, const char *id, size_t idn, int code, const char *msg,
                            const char *data)
{
    struct tg_buf e;
    tg_buf_init(&e);
    tg_rpc_error(&e, id, idn, code, msg, data);
    batch_add(b, e.base, e.len);
    tg_buf_dispose(&e);
}

static void on_batch_abort(struct tg_conn *c, void *ex)
{
    struct tg_batch *b = ex;
    b->conn = NULL; /* the elements go on; their answers are dropped */
}

static void batch_done_one(struct tg_batch *b)
{
    if (--b->pending > 0)
        return;
    if (b->channel != NULL) {
        if (!b->single && b->nout > 0) {
            tg_buf_append(&b->out, "]", 1);
            channel_send(b->channel, b->out.base, b->out.len);
        }
        channel_unref(b->channel);
        tg_buf_dispose(&b->out);
        free(b);
        return;
    }
    struct tg_conn *c = b->conn;
    if (c != NULL) {
        c->exchange = NULL;
        c->on_abort = NULL;
        c->on_drain = NULL;
        if (b->nout > 0) {
            tg_buf_append(&b->out, "]", 1);
            tg_http_respond(c, 200, NULL, "application/json", b->out.base, b->out.len);
        } else {
            tg_http_respond(c, 202, NULL, NULL, "", 0);
        }
    }
    tg_buf_dispose(&b->out);
    free(b);
}

/* Replies go to the client directly, or into its batch. */
static void reply_rpc(struct tg_conn *c, struct tg_batch *b, int status, const char *id, size_t idn, int code,
                      const char *msg, const char *data)
{
    if (b != NULL)
        batch_add_error(b, id, idn, code, msg, data);
    else
        respond_rpc(c, status, NULL, id, idn, code, msg, data);
}

static void reply_json(struct tg_conn *c, struct tg_batch *b, const char *p, size_t n)
{
    if (b != NULL)
        batch_add(b, p, n);
    else
        tg_http_respond(c, 200, NULL, "application/json", p, n);
}

static void reply_accepted(struct tg_conn *c, struct tg_batch *b)
{
    if (b == NULL)
        tg_http_respond(c, 202, NULL, NULL, "", 0);
}

static void refund(struct tg_call *k)
{
    if (k->dec == NULL || k->refunded || k->dec->nres == 0)
        return;
    k->refunded = 1;
    k->srv->metrics.refunds++;
    tg_policy_refund(k->srv->counters, k->dec, wall_ms());
}

static void audit_call(struct tg_call *k, const char *decision, double latency, const char *outcome, const char *by)
{
    struct tg_audit_record r = {0};
    r.grant = k->grant;
    r.session = k->sess ? k->sess->id_str : NULL;
    r.upstream = up_name(k);
    r.method = k->method;
    r.tool = k->tool;
    r.decision = decision;
    r.rule = k->dec ? k->dec->rule : NULL;
    r.counters_json = k->dec ? k->dec->counters_json : NULL;
    r.args_sha256 = k->tool ? k->args_sha256 : NULL;
    r.args_json = k->args_json;
    r.approval_id = k->approval_id[0] ? k->approval_id : NULL;
    r.decided_by = by;
    r.latency_ms = latency;
    r.outcome = outcome;
    tg_audit_log(k->srv->audit, &k->srv->conf->audit, &r);
}

/* Closing marks: the call is taken out of everything that can reach it (session, approvals,
 * waiting list, connection, upstream request, batch, channel), settled if it never reached the
 * upstream, and queued; its memory goes in tg_router_run_pending, after the handler that
 * closed it has returned, so a caller that still holds k reads valid, inert memory. Idempotent. */
static void call_free(struct tg_call *k)
{
    if (k->closed)
        return;
    k->closed = 1;
    /* Reservations for a call that never reached the upstream are given back. */
    if (!k->forwarded)
        refund(k);
    if (k->up != NULL) {
        tg_upreq_cancel(k->up);
        k->up = NULL;
    }
    resume_cancel(k);
    if (k->parked) {
        tg_list_unlink(&k->alink);
        k->srv->napprovals--;
        k->parked = 0;
    }
    if (k->awaiting) {
        tg_list_unlink(&k->alink);
        k->awaiting = 0;
    }
    if (k->replay != NULL) {
        k->replay->live = NULL;
        k->replay->ended_at = now_ms(k->srv);
        k->replay = NULL;
    }
    if (k->sess) {
        if (k->kind == KIND_REQUEST && k->sess->inflight > 0)
            k->sess->inflight--;
        if (k->sess->get_stream == k)
            k->sess->get_stream = NULL;
        tg_list_unlink(&k->slink);
        k->sess->last_active_ms = now_ms(k->srv);
        tg_session_unref(k->sess);
        k->sess = NULL;
    }
    if (k->conn && k->conn->exchange == k) {
        k->conn->exchange = NULL;
        k->conn->on_abort = NULL;
        k->conn->on_drain = NULL;
    }
    k->conn = NULL;
    struct tg_batch *b = k->batch;
    struct tg_channel *ch = k->channel;
    k->batch = NULL;
    k->channel = NULL;
    tg_list_insert_tail(&k->srv->dead_calls, &k->dlink);
    if (b != NULL)
        batch_done_one(b);
    if (ch != NULL)
        channel_unref(ch);
}

static void call_release(struct tg_call *k)
{
    free(k->progress_token);
    tg_policy_unref(k->policy);
    free(k->grant);
    free(k->method);
    free(k->tool);
    free(k->dec);
    free(k->args_json);
    free(k->id_key);
    tg_buf_dispose(&k->held);
    tg_buf_dispose(&k->body);
    tg_sse_dispose(&k->sse);
    free(k->client_id);
    tg_upstream_unref(k->uprt);
    free(k);
}

/* The client went away while its call was with the upstream: the upstream may have run it,
 * so its reservations stand; say so in the audit log. */
static void abandon(struct tg_call *k)
{
    if (k->up) {
        if (k->dec)
            audit_call(k, "allow", tg_upreq_elapsed_ms(k->up), "client_gone", NULL);
        tg_upreq_cancel(k->up);
        k->up = NULL;
    }
}

/* A client that lost a resumable stream may come back with Last-Event-ID: the call goes on,
 * its events kept in the replay buffer. Returns 1 if the call was kept. */
static int detach_stream(struct tg_call *k)
{
    if (k->replay == NULL || (k->up == NULL && !k->awaiting && k->resume == NULL && k->kind != KIND_GET))
        return 0;
    k->replay->detached_at = now_ms(k->srv);
    return 1;
}

static void on_client_abort(struct tg_conn *c, void *ex)
{
    struct tg_call *k = ex;
    k->conn = NULL;
    if (detach_stream(k))
        return;
    abandon(k);
    call_free(k);
}

static void link_pause(struct tg_session *s, int pause);

static void on_client_drain(struct tg_conn *c, void *ex)
{
    struct tg_call *k = ex;
    if (k->up)
        tg_upreq_resume(k->up);
    if (k->sess)
        link_pause(k->sess, 0);
}

/* Write one SSE "message" event; data lines must not contain raw newlines. */
static void replay_free(struct tg_replay *r)
{
    tg_buf_dispose(&r->gen[0]);
    tg_buf_dispose(&r->gen[1]);
    tg_list_unlink(&r->slink);
    tg_list_unlink(&r->glink);
    tg_session_unref(r->sess);
    free(r);
}

/* A call's client stream just began: give it ids (and prime 2025-11-25 clients to reconnect). */
static void stream_open(struct tg_call *k)
{
    struct tg_server *srv = k->srv;
    struct tg_session *s = k->sess;
    if (k->conn == NULL || k->replay != NULL)
        return;
    /* Keep a bounded number of streams per session: the oldest ended ones go first. */
    size_t n = 0;
    for (struct tg_list *l = s->streams.next; l != &s->streams; l = l->next)
        n++;
    for (struct tg_list *l = s->streams.next; n >= REPLAY_MAX_PER_SESSION && l != &s->streams;) {
        struct tg_replay *o = tg_container_of(l, struct tg_replay, slink);
        l = l->next;
        if (o->live == NULL) {
            replay_free(o);
            n--;
        }
    }
    struct tg_replay *r = tg_xcalloc(1, sizeof(*r));
    r->srv = srv;
    r->sess = tg_session_ref(s);
    r->id = ++srv->next_stream_id;
    r->live = k;
    r->last_write_ms = now_ms(srv);
    tg_list_insert_tail(&s->streams, &r->slink);
    tg_list_insert_tail(&srv->streams, &r->glink);
    k->replay = r;
    if (strcmp(s->proto, "2025-11-25") == 0) {
        char prime[64];
        int pn = snprintf(prime, sizeof(prime), "id: %llx-0\nretry: 1000\ndata:\n\n", (unsigned long long)r->id);
        tg_http_stream_write(k->conn, prime, (size_t)pn);
    }
}

static void sse_write_message(struct tg_call *k, const char *p, size_t n)
{
    struct tg_replay *r = k->replay;
    if (k->conn == NULL && r == NULL)
        return;
    struct tg_buf b;
    tg_buf_init(&b);
    if (tg_buf_try_reserve(&b, n + 64, 0) != 0)
        abort();
    if (r != NULL) {
        tg_buf_append(&b, "id: ", 4);
        tg_buf_append_hex(&b, r->id);
        tg_buf_append(&b, "-", 1);
        tg_buf_append_u64(&b, ++r->next_seq);
        tg_buf_append(&b, "\n", 1);
    }
    tg_buf_append(&b, "event: message\n", 15);
    /* One data line per line of the message (compact JSON has none: one line, one copy). */
    size_t st = 0;
    for (;;) {
        const char *nl = memchr(p + st, '\n', n - st);
        const char *cr = memchr(p + st, '\r', n - st);
        const char *e = nl && (!cr || nl < cr) ? nl : cr;
        size_t stop = e ? (size_t)(e - p) : n;
        tg_buf_append(&b, "data: ", 6);
        tg_buf_append(&b, p + st, stop - st);
        tg_buf_append(&b, "\n", 1);
        if (e == NULL)
            break;
        st = stop + 1;
    }
    tg_buf_append(&b, "\n", 1);
    if (r != NULL) {
        /* Keep it for a resuming client; the oldest go when the buffer is full. */
        size_t half = (size_t)k->srv->conf->limits.replay_bytes / 2;
        if (r->gen[r->cur].len > half) {
            r->cur ^= 1;
            r->gen[r->cur].len = 0;
            if (r->gen[r->cur].cap > 2 * half + 65536)
                tg_buf_dispose(&r->gen[r->cur]);
        }
        if (half > 0)
            tg_buf_append(&r->gen[r->cur], b.base, b.len);
        r->last_write_ms = now_ms(k->srv);
    }
    if (k->conn)
        tg_http_stream_write(k->conn, b.base, b.len);
    tg_buf_dispose(&b);
    k->srv->metrics.sse_events_relayed++;
    if (k->conn && tg_conn_output_high(k->conn) && k->up) {
        k->srv->metrics.limit_output++;
        tg_upreq_pause(k->up);
    }
}

/* Learn the negotiated protocol version from an initialize result. */
static void note_init_result(struct tg_call *k, const char *p, size_t n)
{
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, k->srv->conf->limits.json_depth + 16, 1, &doc, NULL, NULL) != 0)
        return;
    cJSON *res = cJSON_GetObjectItemCaseSensitive(doc.root, "result");
    cJSON *pv = cJSON_GetObjectItemCaseSensitive(res, "protocolVersion");
    if (cJSON_IsString(pv) && strlen(pv->valuestring) < sizeof(k->sess->proto)) {
        strcpy(k->sess->proto, pv->valuestring);
        k->sess->initialized = 1;
    }
    cJSON_Delete(doc.root);
}

/* tools/list for this grant: drop the tools its policy hides or denies. The page's
 * nextCursor is the upstream's and stays valid, so pagination keeps working. */
static int filter_tools_list(struct tg_call *k, const char *p, size_t n, struct tg_buf *out)
{
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 1000, 1, &doc, NULL, NULL) != 0)
        return 0;
    cJSON *res = cJSON_GetObjectItemCaseSensitive(doc.root, "result");
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(res, "tools");
    if (!cJSON_IsObject(res) || !cJSON_IsArray(tools)) {
        cJSON_Delete(doc.root);
        return 0;
    }
    {
        cJSON *t = tools->child;
        while (t) {
            cJSON *next = t->next;
            cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
            if (!cJSON_IsString(name) || !tg_policy_tool_visible(k->policy, name->valuestring))
                cJSON_Delete(cJSON_DetachItemViaPointer(tools, t));
            t = next;
        }
    }
    cJSON *id = cJSON_CreateRaw(k->client_id);
    cJSON_ReplaceItemInObjectCaseSensitive(doc.root, "id", id);
    tg_json_write(out, doc.root);
    cJSON_Delete(doc.root);
    return 1;
}

/* Rewrite an upstream message for the client: our id back to the client's, byte for byte.
 * Returns 1 if the message was the answer to this call. out receives the bytes to send. */
static int restore_id(struct tg_call *k, const char *p, size_t n, struct tg_buf *out, int *valid, int *is_error,
                      struct tg_slice *server_request_id)
{
    struct tg_json_doc doc;
    *valid = 0;
    *is_error = 0;
    if (server_request_id)
        *server_request_id = TG_SLICE_NULL;
    if (k->body_doc_ok && p == k->body.base && n == k->body.len) {
        doc = k->body_doc; /* settle_call parsed this answer already: once is enough */
    } else if (tg_json_parse(p, n, 1000, 0, &doc, NULL, NULL) != 0) {
        return 0;
    }
    *valid = 1;
    if (k->kind == KIND_REQUEST && doc.id_raw.len == k->gid_len && memcmp(doc.id_raw.ptr, k->gid_str, k->gid_len) == 0 &&
        doc.method_raw.len == 0) {
        *is_error = doc.error_raw.len > 0;
        if (k->is_tools_list && !*is_error) {
            if (filter_tools_list(k, p, n, out))
                return 1;
            /* An answer that cannot be filtered is never relayed: it could show hidden tools. */
            char esc[120];
            tg_log(TG_LOG_WARN, "upstream tools/list answer cannot be filtered; refused", "upstream=%s body=%s",
                   up_name(k), tg_log_esc(esc, sizeof(esc), tg_slice_of(p, n)));
            struct tg_buf d;
            tg_buf_init(&d);
            upstream_data(&d, up_name(k));
            out->len = 0;
            tg_rpc_error(out, k->client_id, k->client_id_len, TG_RPC_UPSTREAM,
                         "upstream sent a tools/list answer the gateway cannot filter", d.base);
            tg_buf_dispose(&d);
            *is_error = 1;
            return 1;
        }
        tg_msg_splice_id(out, p, n, (size_t)(doc.id_raw.ptr - p), doc.id_raw.len, k->client_id, k->client_id_len);
        return 1;
    }
    if (server_request_id && doc.method_raw.len > 0 && doc.id_raw.len > 0)
        *server_request_id = doc.id_raw;
    tg_buf_append(out, p, n);
    return 0;
}

/* Server-to-client requests relayed to the client: only answers to these may go back up. */
#define MAX_PENDING_SERVER_REQUESTS 64

static void note_server_request(struct tg_session *s, struct tg_slice id)
{
    char *key = id_key_of(id.ptr, id.len);
    if (key == NULL)
        return;
    if (s->nserver_reqs >= MAX_PENDING_SERVER_REQUESTS) {
        /* Forget the oldest: a client that never answers cannot grow this without bound. */
        size_t first = strlen(s->server_reqs.base) + 1;
        tg_buf_consume(&s->server_reqs, first);
        s->nserver_reqs--;
    }
    tg_buf_append(&s->server_reqs, key, strlen(key) + 1);
    s->nserver_reqs++;
    free(key);
}

/* 1 if the id answers a pending server request (which is then no longer pending). */
static int take_server_request(struct tg_session *s, const char *raw, size_t n)
{
    char *key = id_key_of(raw, n);
    if (key == NULL)
        return 0;
    size_t off = 0;
    int found = 0;
    while (off < s->server_reqs.len) {
        const char *e = s->server_reqs.base + off;
        size_t el = strlen(e) + 1;
        if (strcmp(e, key) == 0) {
            memmove(s->server_reqs.base + off, s->server_reqs.base + off + el, s->server_reqs.len - off - el);
            s->server_reqs.len -= el;
            s->nserver_reqs--;
            found = 1;
            break;
        }
        off += el;
    }
    free(key);
    return found;
}

static void on_noop_head(struct tg_upreq *r, int status, void *ud) { (void)r, (void)status, (void)ud; }
static void on_noop_data(struct tg_upreq *r, const char *p, size_t n, void *ud) { (void)r, (void)p, (void)n, (void)ud; }
static void on_noop_done(struct tg_upreq *r, int err, void *ud) { (void)r, (void)err, (void)ud; }
static const struct tg_upreq_cbs noop_cbs = {on_noop_head, on_noop_data, on_noop_done};

/* A server-to-client request this upstream may not make (deny_server_requests): answer it
 * ourselves with an error, and never show it to the client. Returns 1 if refused. */
static int refuse_server_request(struct tg_call *k, const char *p, size_t n, int refuse_all)
{
    const struct tg_upstream_conf *uc = tg_upstream_conf(k->uprt);
    if (uc->ndeny_server_requests == 0 && !refuse_all)
        return 0;
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 1000, 1, &doc, NULL, NULL) != 0)
        return 0;
    cJSON *method = cJSON_GetObjectItemCaseSensitive(doc.root, "method");
    cJSON *id = cJSON_GetObjectItemCaseSensitive(doc.root, "id");
    int refused = 0;
    if (cJSON_IsString(method) && id != NULL && !cJSON_IsNull(id)) {
        refused = refuse_all; /* a batch has no stream to carry a server request to the client */
        for (size_t i = 0; i < uc->ndeny_server_requests; i++)
            if (strcmp(uc->deny_server_requests[i], method->valuestring) == 0)
                refused = 1;
    }
    if (refused) {
        k->srv->metrics.server_requests_denied++;
        char esc[96];
        tg_log(TG_LOG_INFO, "server request refused", "upstream=%s session=%s method=%s", uc->name, k->sess->id_str,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(method->valuestring)));
        struct tg_buf body, h;
        tg_buf_init(&body);
        tg_buf_init(&h);
        char msg[200];
        snprintf(msg, sizeof(msg), "%s is not allowed through the gateway for upstream %s", method->valuestring,
                 uc->name);
        tg_rpc_error(&body, doc.id_raw.ptr, doc.id_raw.len, TG_RPC_DENIED, msg, NULL);
        tg_buf_appends(&h, "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n");
        if (k->sess->up_session)
            tg_buf_appendf(&h, "Mcp-Session-Id: %s\r\n", k->sess->up_session);
        if (k->sess->proto[0])
            tg_buf_appendf(&h, "MCP-Protocol-Version: %s\r\n", k->sess->proto);
        tg_buf_append(&h, "", 1);
        tg_upreq_start(k->uprt, "POST", h.base, body.base, body.len, 0, (uint64_t)uc->call_timeout_ms, &noop_cbs,
                       NULL);
        tg_buf_dispose(&body);
        tg_buf_dispose(&h);
    }
    cJSON_Delete(doc.root);
    return refused;
}

static void relay_sse_event(struct tg_call *k, const struct tg_sse_event *ev);

/* Stops the parser once the call is closed (its owner may free the parser then). */
static int on_sse_event(void *ud, const struct tg_sse_event *ev)
{
    struct tg_call *k = ud;
    if (k->closed)
        return 1;
    relay_sse_event(k, ev);
    return k->closed;
}

static void relay_sse_event(struct tg_call *k, const struct tg_sse_event *ev)
{
    if (k->conn == NULL && k->batch == NULL && k->channel == NULL && k->replay == NULL)
        return;
    if (ev->event.len != 0 && !tg_slice_eq(ev->event, TG_SLICE("message")))
        return; /* only JSON-RPC messages are relayed */
    if (ev->data.len == 0)
        return; /* priming events carry no message */
    k->resumes = 0;
    struct tg_buf out;
    tg_buf_init(&out);
    int valid, is_error;
    struct tg_slice srv_req;
    int mine = restore_id(k, ev->data.ptr, ev->data.len, &out, &valid, &is_error, &srv_req);
    if (!valid) {
        tg_log(TG_LOG_WARN, "upstream sent a non-JSON SSE event; dropped", "upstream=%s session=%s",
               up_name(k), k->sess->id_str);
        tg_buf_dispose(&out);
        return;
    }
    if (mine) {
        k->got_response = 1;
        if (is_error)
            k->got_response = 2;
        if (k->is_init)
            note_init_result(k, ev->data.ptr, ev->data.len);
    } else if (refuse_server_request(k, ev->data.ptr, ev->data.len, k->batch != NULL && k->batch->channel == NULL)) {
        tg_buf_dispose(&out);
        return;
    } else if (srv_req.len > 0) {
        note_server_request(k->sess, srv_req);
    }
    struct tg_channel *ch = k->channel ? k->channel : k->batch ? k->batch->channel : NULL;
    if (ch != NULL) {
        /* A channel session: the answer goes into its batch (sent at once for a single message),
         * everything else the server says goes straight to the channel. */
        if (mine)
            batch_add(k->batch, out.base, out.len);
        else
            channel_send(ch, out.base, out.len);
        tg_buf_dispose(&out);
        if (k->up) {
            tg_upreq_touch(k->up);
            if (channel_pending(ch) > (size_t)k->srv->conf->limits.output_high_water) {
                k->srv->metrics.limit_output++;
                tg_upreq_pause(k->up);
            }
        }
        return;
    }
    if (k->batch != NULL) {
        /* A batch is answered with one JSON array: only the element's answer is kept. */
        if (mine)
            batch_add(k->batch, out.base, out.len);
        tg_buf_dispose(&out);
        if (k->up)
            tg_upreq_touch(k->up);
        return;
    }
    sse_write_message(k, out.base, out.len);
    tg_buf_dispose(&out);
    if (k->up)
        tg_upreq_touch(k->up); /* progress keeps a long call alive */
}

static void session_header(struct tg_call *k, char *hdr, size_t sz)
{
    if (k->is_init)
        snprintf(hdr, sz, "Mcp-Session-Id: %s\r\n", k->sess->id_str);
    else
        hdr[0] = '\0';
}

static void on_up_head(struct tg_upreq *r, int status, void *ud)
{
    struct tg_call *k = ud;
    struct tg_slice ct = tg_upreq_content_type(r);
    if (k->resuming) {
        /* The answer stream again: the client's stream goes on as it was. */
        if (status == 200 && tg_slice_has_token(ct, "text/event-stream")) {
            tg_sse_restart(&k->sse);
        } else {
            tg_log(TG_LOG_WARN, "upstream refused to resume the answer stream", "upstream=%s status=%d",
                   up_name(k), status);
            k->resume_failed = 1;
        }
        return;
    }
    if (k->is_init) {
        struct tg_slice sid = tg_upreq_session_id(r);
        if (sid.len > 0 && k->sess->up_session == NULL)
            k->sess->up_session = tg_slice_dup(sid);
    }
    if (status == 200 && tg_slice_has_token(ct, "text/event-stream") && k->kind != KIND_FORWARD) {
        k->mode = MODE_SSE;
        tg_sse_init(&k->sse, (size_t)k->srv->conf->limits.response_bytes);
        if (k->conn) {
            char hdr[96];
            session_header(k, hdr, sizeof(hdr));
            tg_http_stream_begin(k->conn, 200, hdr, "text/event-stream");
            stream_open(k);
        }
        return;
    }
    if (status >= 200 && status < 300 && k->kind == KIND_FORWARD) {
        k->mode = MODE_ACCEPTED;
        return;
    }
    if (status == 200 && k->kind == KIND_REQUEST) {
        k->mode = MODE_JSON;
        return;
    }
    if (status == 404 && k->sess->up_session != NULL && !k->is_init) {
        k->mode = MODE_GONE;
        return;
    }
    k->mode = MODE_ERROR;
}

static void on_up_done(struct tg_upreq *r, int err, void *ud);

static void on_up_data(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct tg_call *k = ud;
    switch (k->mode) {
    case MODE_SSE: {
        if (k->resume_failed)
            return;
        int e = tg_sse_feed(&k->sse, p, n, on_sse_event, k);
        if (k->closed)
            return;
        if (e == 0 && k->resuming && k->got_response && k->up == r) {
            /* A resumed stream is the session's stream upstream and may stay open after the
             * answer: the call is over with the answer, not when the upstream ends it. */
            on_up_done(r, 0, k);
            tg_upreq_cancel(r);
            return;
        }
        if (e != 0) {
            tg_log(TG_LOG_WARN, "upstream SSE event too large; stream cut", "upstream=%s limit=%d",
                   up_name(k),
                   k->srv->conf->limits.response_bytes);
            tg_upreq_cancel(k->up);
            k->up = NULL;
            if (k->conn)
                tg_http_stream_end(k->conn);
            call_free(k);
        }
        return;
    }
    case MODE_JSON: {
        struct tg_channel *ch = k->batch ? k->batch->channel : NULL;
        if (ch != NULL && channel_pending(ch) > (size_t)k->srv->conf->limits.output_high_water) {
            k->srv->metrics.limit_output++;
            tg_upreq_pause(k->up); /* the channel's drain resumes every call of the session */
        }
    }
        if (tg_buf_try_append(&k->body, p, n, (size_t)k->srv->conf->limits.response_bytes) != 0) {
            tg_log(TG_LOG_WARN, "upstream response too large", "upstream=%s limit=%d",
                   up_name(k),
                   k->srv->conf->limits.response_bytes);
            tg_upreq_cancel(k->up);
            k->up = NULL;
            if (k->conn) {
                struct tg_buf d;
                tg_buf_init(&d);
                upstream_data(&d, up_name(k));
                respond_rpc(k->conn, 200, NULL, k->client_id, k->client_id_len, TG_RPC_UPSTREAM,
                            "upstream response exceeds limits.response_bytes", d.base);
                tg_buf_dispose(&d);
            }
            call_free(k);
        }
        return;
    default:
        /* Error bodies are kept short, only for the log. */
        if (k->body.len < 512)
            tg_buf_append(&k->body, p, n < 512 - k->body.len ? n : 512 - k->body.len);
        return;
    }
}

static void answer_upstream_error(struct tg_call *k, const char *why)
{
    if (k->conn == NULL)
        return;
    const char *name = up_name(k);
    struct tg_buf d;
    tg_buf_init(&d);
    upstream_data(&d, name);
    if (k->kind == KIND_REQUEST) {
        char hdr[96];
        session_header(k, hdr, sizeof(hdr));
        if (k->is_init) {
            /* No session was made after all. */
            hdr[0] = '\0';
            tg_session_remove(k->srv->sessions, k->sess);
        }
        respond_rpc(k->conn, 200, hdr, k->client_id, k->client_id_len, TG_RPC_UPSTREAM, why, d.base);
    } else {
        respond_rpc(k->conn, strstr(why, "timed out") ? 504 : 502, NULL, NULL, 0, TG_RPC_UPSTREAM, why, d.base);
    }
    tg_buf_dispose(&d);
}

/* A decided tools/call is over: keep or give back its reservations, and write its audit line.
 * Reservations are given back only when the upstream certainly did not run the call: the
 * request never reached it, it refused the request (HTTP 4xx, session gone), or it answered a
 * JSON-RPC error object. A timeout, a stream that ended without the answer, a 5xx or a garbled
 * answer keep them: the tool may have run, and a caller who controls how long it runs or how
 * its upstream answers must not get it for free. */
static void settle_call(struct tg_call *k, struct tg_upreq *r, int err)
{
    if (k->dec == NULL)
        return;
    const char *outcome = "ok";
    int give_back = 0;
    if (k->mode == MODE_SSE && k->got_response) {
        outcome = k->got_response == 1 ? "ok" : "error";
        give_back = k->got_response == 2;
    } else if (err != 0) {
        outcome = err == TG_ETIMEDOUT ? "timeout" : "unavailable";
        give_back = !tg_upreq_sent(r);
    } else if (k->mode == MODE_SSE) {
        outcome = "unavailable"; /* the stream ended without the answer */
    } else if (k->mode == MODE_JSON) {
        if (k->body.base == NULL ||
            tg_json_parse(k->body.base, k->body.len, 1000, 0, &k->body_doc, NULL, NULL) != 0)
            outcome = "error";
        else if ((k->body_doc_ok = 1, k->body_doc.error_raw.len > 0))
            outcome = "error", give_back = 1;
    } else {
        int st = tg_upreq_status(r);
        outcome = k->mode == MODE_ERROR || k->mode == MODE_GONE ? "unavailable" : "error";
        give_back = k->mode == MODE_GONE || (k->mode == MODE_ERROR && st >= 400 && st < 500);
    }
    if (give_back)
        refund(k);
    double latency = k->first_sent_ns ? (double)(uv_hrtime() - k->first_sent_ns) / 1e6 : tg_upreq_elapsed_ms(r);
    audit_call(k, "allow", latency, outcome, NULL);
}

/* A batch element is over: put its answer (or an error for it) into the batch. */
static void batch_finish_call(struct tg_call *k, struct tg_upreq *r, int err)
{
    if (k->kind != KIND_REQUEST)
        return; /* notifications and responses have no answer */
    if (k->mode == MODE_SSE && k->got_response)
        return; /* already in the batch */
    if (k->mode == MODE_JSON && err == 0) {
        struct tg_buf out;
        tg_buf_init(&out);
        int valid, is_error;
        if (restore_id(k, k->body.base ? k->body.base : "", k->body.len, &out, &valid, &is_error, NULL)) {
            batch_add(k->batch, out.base, out.len);
            tg_buf_dispose(&out);
            return;
        }
        tg_buf_dispose(&out);
    }
    char why[160];
    snprintf(why, sizeof(why), "upstream %s %s", up_name(k),
             err == TG_ETIMEDOUT ? "timed out" : k->mode == MODE_ERROR ? "answered with an error status" : "is unavailable");
    struct tg_buf d;
    tg_buf_init(&d);
    upstream_data(&d, up_name(k));
    batch_add_error(k->batch, k->client_id, k->client_id_len, TG_RPC_UPSTREAM, why, d.base);
    tg_buf_dispose(&d);
    (void)r;
}

static const struct tg_upreq_cbs call_cbs;
static void session_headers(struct tg_buf *h, struct tg_session *s, int with_session);

static void on_resume_due(uv_timer_t *t)
{
    struct resume_wait *w = t->data;
    struct tg_call *k = w->k;
    if (k == NULL)
        return;
    resume_cancel(k);
    if (k->closed || k->sess == NULL)
        return;
    struct tg_buf h;
    tg_buf_init(&h);
    session_headers(&h, k->sess, 1);
    tg_buf_appends(&h, "Last-Event-ID: ");
    tg_buf_append(&h, k->sse.last_id, k->sse.last_id_len);
    tg_buf_appends(&h, "\r\n");
    tg_buf_append(&h, "", 1);
    k->resuming = 1;
    k->up = tg_upreq_start(k->uprt, "GET", h.base, NULL, 0, 1, (uint64_t)tg_upstream_conf(k->uprt)->call_timeout_ms,
                           &call_cbs, k);
    tg_buf_dispose(&h);
}

/* The upstream ended a request's SSE answer before the answer, having given the stream an id
 * and a retry time (SEP-1699 polling): reconnect after that time instead of failing the call.
 * Returns 1 if the call now waits for that. */
static int try_resume(struct tg_call *k)
{
    if (k->kind != KIND_REQUEST || k->got_response || k->resume_failed || !k->sse.has_last_id ||
        k->sse.retry_ms < 0 || k->resumes >= 16 || k->resumes_total >= 256 || k->srv->draining)
        return 0;
    if (k->conn == NULL && k->batch == NULL && k->channel == NULL && k->replay == NULL)
        return 0; /* nobody would read the answer */
    long ms = k->sse.retry_ms;
    long cap = tg_upstream_conf(k->uprt)->call_timeout_ms;
    if (ms > cap)
        ms = cap;
    struct resume_wait *w = tg_xcalloc(1, sizeof(*w));
    w->k = k;
    uv_timer_init(k->srv->loop, &w->timer);
    w->timer.data = w;
    uv_timer_start(&w->timer, on_resume_due, (uint64_t)ms, 0);
    k->resume = w;
    k->resumes++;
    k->resumes_total++;
    tg_log(TG_LOG_DEBUG, "upstream closed the answer stream early; reconnecting", "upstream=%s retry_ms=%ld",
           up_name(k), ms);
    /* A client primed to resume (2025-11-25 sessions get an id and a retry first) is told the
     * same: its stream ends here with the upstream's retry time, and it comes back with GET and
     * Last-Event-ID to the replay buffer while the call goes on. Older clients cannot resume:
     * their stream stays open and everything is relayed on it. */
    if (k->conn != NULL && k->replay != NULL && k->batch == NULL && k->channel == NULL && k->sess != NULL &&
        strcmp(k->sess->proto, "2025-11-25") == 0) {
        char rb[40];
        int rn = snprintf(rb, sizeof(rb), "retry: %ld\n\n", ms);
        struct tg_conn *c = k->conn;
        tg_http_stream_write(c, rb, (size_t)rn);
        c->exchange = NULL;
        c->on_abort = NULL;
        c->on_drain = NULL;
        k->conn = NULL;
        k->replay->detached_at = now_ms(k->srv);
        tg_http_stream_end(c);
    }
    return 1;
}

static void on_up_done(struct tg_upreq *r, int err, void *ud)
{
    struct tg_call *k = ud;
    k->up = NULL;
    if (err == 0 && k->mode == MODE_SSE && try_resume(k))
        return;
    settle_call(k, r, err);
    const struct tg_upstream_conf *uc = tg_upstream_conf(k->uprt);
    if (k->batch != NULL) {
        batch_finish_call(k, r, err);
        call_free(k);
        return;
    }
    if (k->channel != NULL) {
        call_free(k); /* the channel's upstream GET stream ended; the channel goes on */
        return;
    }
    struct tg_conn *c = k->conn;
    if (c == NULL) {
        call_free(k);
        return;
    }
    /* Answering cannot close the call under us: a client that goes is heard of from the loop. */
    char why[160];
    if (err != 0) {
        if (err == TG_ETIMEDOUT)
            snprintf(why, sizeof(why), "upstream %s timed out", uc->name);
        else if (err == TG_ELIMIT)
            snprintf(why, sizeof(why), "upstream %s is busy (pool and queue full)", uc->name);
        else
            snprintf(why, sizeof(why), "upstream %s is unavailable", uc->name);
    }
    switch (k->mode) {
    case MODE_SSE:
        if (!k->got_response && k->kind == KIND_REQUEST) {
            /* The stream ended without the answer: give the client a clean error on the same stream. */
            struct tg_buf b;
            tg_buf_init(&b);
            struct tg_buf d;
            tg_buf_init(&d);
            upstream_data(&d, uc->name);
            tg_rpc_error(&b, k->client_id, k->client_id_len, TG_RPC_UPSTREAM,
                         err ? why : "upstream ended the stream without answering", d.base);
            sse_write_message(k, b.base, b.len);
            tg_buf_dispose(&b);
            tg_buf_dispose(&d);
        }
        if (k->conn)
            tg_http_stream_end(k->conn);
        break;
    case MODE_JSON: {
        if (err != 0) {
            answer_upstream_error(k, why);
            break;
        }
        struct tg_buf out;
        tg_buf_init(&out);
        int valid, is_error;
        int mine = restore_id(k, k->body.base ? k->body.base : "", k->body.len, &out, &valid, &is_error, NULL);
        if (!mine) {
            char esc[200];
            tg_log(TG_LOG_WARN, "upstream answered with something that is not the answer", "upstream=%s body=%s",
                   uc->name, tg_log_esc(esc, sizeof(esc), tg_slice_of(k->body.base, k->body.len)));
            answer_upstream_error(k, "upstream sent an invalid response");
        } else {
            if (k->is_init)
                note_init_result(k, k->body.base, k->body.len);
            char hdr[96];
            session_header(k, hdr, sizeof(hdr));
            tg_http_respond(c, 200, hdr, "application/json", out.base, out.len);
        }
        tg_buf_dispose(&out);
        break;
    }
    case MODE_ACCEPTED:
        if (err != 0)
            answer_upstream_error(k, why);
        else
            tg_http_respond(c, 202, NULL, NULL, "", 0);
        break;
    case MODE_GONE:
        tg_log(TG_LOG_INFO, "upstream ended the session", "upstream=%s session=%s", uc->name, k->sess->id_str);
        tg_session_remove(k->srv->sessions, k->sess);
        respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        break;
    case MODE_ERROR: {
        int st = tg_upreq_status(r);
        if (k->kind == KIND_GET && (st == 405 || st == 404)) {
            tg_http_respond(c, 405, "Allow: POST, DELETE\r\n", NULL, "", 0);
            break;
        }
        char esc[200];
        tg_log(TG_LOG_WARN, "upstream error status", "upstream=%s status=%d body=%s", uc->name, st,
               tg_log_esc(esc, sizeof(esc), tg_slice_of(k->body.base, k->body.len)));
        if (err == 0)
            snprintf(why, sizeof(why), "upstream %s answered HTTP %d", uc->name, st);
        answer_upstream_error(k, why);
        break;
    }
    case MODE_WAIT:
        answer_upstream_error(k, err ? why : "upstream closed without answering");
        break;
    }
    call_free(k);
}

static const struct tg_upreq_cbs call_cbs = {on_up_head, on_up_data, on_up_done};

static struct tg_call *call_new(struct tg_server *srv, struct tg_session *s, struct tg_conn *c, enum call_kind kind)
{
    struct tg_call *k = tg_xcalloc(1, sizeof(*k));
    k->srv = srv;
    k->uprt = tg_upstream_ref(srv->upstreams[s->upstream]);
    k->grant = tg_xstrdup(s->grant);
    tg_list_init(&k->alink);
    tg_buf_init(&k->held);
    k->sess = tg_session_ref(s);
    k->conn = c;
    k->kind = kind;
    tg_buf_init(&k->body);
    tg_list_init(&k->slink);
    tg_list_insert_tail(&s->calls, &k->slink);
    s->last_active_ms = now_ms(srv);
    if (c) {
        c->exchange = k;
        c->on_abort = on_client_abort;
        c->on_drain = on_client_drain;
    }
    return k;
}

static void session_headers(struct tg_buf *h, struct tg_session *s, int with_session)
{
    tg_buf_appends(h, "Accept: application/json, text/event-stream\r\n");
    if (with_session && s->up_session)
        tg_buf_appendf(h, "Mcp-Session-Id: %s\r\n", s->up_session);
    if (s->proto[0])
        tg_buf_appendf(h, "MCP-Protocol-Version: %s\r\n", s->proto);
}

static void stream_send(struct tg_call *k, const char *body, size_t len, uint64_t timeout);

static void call_send(struct tg_call *k, const char *method, const char *body, size_t len, int dedicated,
                      uint64_t timeout)
{
    if (tg_upstream_conf(k->uprt)->transport != TG_UP_STREAMABLE) {
        stream_send(k, body, len, timeout);
        return;
    }
    struct tg_buf h;
    tg_buf_init(&h);
    if (body)
        tg_buf_appends(&h, "Content-Type: application/json\r\n");
    session_headers(&h, k->sess, !k->is_init);
    tg_buf_append(&h, "", 1);
    k->forwarded = 1;
    if (k->first_sent_ns == 0)
        k->first_sent_ns = uv_hrtime();
    k->up = tg_upreq_start(k->uprt, method, h.base, body, len, dedicated, timeout,
                           &call_cbs, k);
    tg_buf_dispose(&h);
}

/* ---- message-stream upstreams: stdio children (and legacy SSE) ------------------------
 *
 * These upstreams carry every message of a session on one stream, so an answer is matched to
 * its call by our gateway id, and what the server says on its own goes to the session's client
 * stream: the channel, the GET stream, or an open call's SSE answer. */

static char *id_key_of_string(const char *v)
{
    size_t l = strlen(v);
    char *k = tg_xmalloc(l + 2);
    k[0] = 's';
    memcpy(k + 1, v, l + 1);
    return k;
}

static char *id_key_of_number(const cJSON *n)
{
    if (!cJSON_IsNumber(n) || n->valuestring == NULL)
        return NULL;
    size_t l = strlen(n->valuestring);
    char *k = tg_xmalloc(l + 2);
    k[0] = 'n';
    memcpy(k + 1, n->valuestring, l + 1);
    return k;
}

static int sse_link_send(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *body,
                         size_t len, uint64_t gid);

/* deny_server_requests on a message-stream upstream: the gateway answers on the same stream. */
static int refuse_stream_request(struct tg_call *probe, const char *p, size_t n)
{
    const struct tg_upstream_conf *uc = tg_upstream_conf(probe->uprt);
    struct tg_json_doc doc;
    if (uc->ndeny_server_requests == 0 || tg_json_parse(p, n, 1000, 1, &doc, NULL, NULL) != 0)
        return 0;
    cJSON *method = cJSON_GetObjectItemCaseSensitive(doc.root, "method");
    int refused = 0;
    for (size_t i = 0; cJSON_IsString(method) && i < uc->ndeny_server_requests; i++)
        if (strcmp(uc->deny_server_requests[i], method->valuestring) == 0)
            refused = 1;
    if (refused) {
        probe->srv->metrics.server_requests_denied++;
        struct tg_buf e;
        tg_buf_init(&e);
        char msg[200];
        snprintf(msg, sizeof(msg), "%s is not allowed through the gateway for upstream %s", method->valuestring,
                 uc->name);
        tg_rpc_error(&e, doc.id_raw.ptr, doc.id_raw.len, TG_RPC_DENIED, msg, NULL);
        if (probe->sess->upstream_link != NULL && uc->transport == TG_UP_STDIO)
            tg_child_send(probe->sess->upstream_link, e.base, e.len);
        else if (probe->sess->upstream_link != NULL && uc->transport == TG_UP_SSE)
            sse_link_send(probe->srv, probe->sess, probe->uprt, e.base, e.len, 0); /* POSTed like any reply */
        tg_buf_dispose(&e);
    }
    cJSON_Delete(doc.root);
    return refused;
}

static void stream_fail(struct tg_call *k, const char *why, int give_back);

/* A client that stopped reading stops its message-stream upstream too (answers included);
 * its drain resumes it. */
static void session_backpressure(struct tg_server *srv, struct tg_session *s)
{
    size_t pending = s->channel ? channel_pending(s->channel) : 0;
    int high = 0;
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->conn && tg_conn_output_high(k->conn))
            high = 1;
    }
    if (high || pending > (size_t)srv->conf->limits.output_high_water || s->stalled > 0) {
        srv->metrics.limit_output++;
        link_pause(s, 1);
    }
}

/* An answer already given to a client that is not reading it: the session's upstream stays
 * paused until that connection drains (or closes). */
static void on_answer_drained(struct tg_conn *c, void *ud)
{
    struct tg_session *s = ud;
    if (--s->stalled == 0)
        link_pause(s, 0);
    tg_session_unref(s);
}

static void watch_answer(struct tg_server *srv, struct tg_session *s, struct tg_conn *c)
{
    if (c == NULL || c->state >= TG_CONN_CLOSING || c->on_watch != NULL || !tg_conn_output_high(c))
        return;
    s->stalled++;
    c->watch_ud = tg_session_ref(s);
    c->on_watch = on_answer_drained;
}

static void on_child_message(void *ud, const char *p, size_t n);
static void on_child_exit(void *ud, int64_t status, int sig);

static void release_child(struct tg_session *s)
{
    struct tg_child *ch = s->upstream_link;
    s->upstream_link = NULL;
    tg_child_kill(ch);
}

static struct tg_child *session_child(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u)
{
    if (s->upstream_link != NULL)
        return s->upstream_link;
    int err = 0;
    struct tg_child *ch = tg_upstream_take_child(u, on_child_message, on_child_exit, s, &err);
    if (ch == NULL)
        return NULL;
    s->upstream_link = ch;
    s->release_link = release_child;
    return ch;
}

/* ---- legacy HTTP+SSE upstreams (2024-11-05): GET the stream, follow its endpoint event, POST there */

/* Owner: the session (upstream_link), released with it by release_sse_link. A release while
 * its parser runs only marks it dead; on_link_data frees it once the parser has returned. */
struct sse_link {
    struct tg_server *srv;
    struct tg_session *sess;  /* not a reference: the link dies with the session */
    struct tg_upstream *up;   /* reference */
    int in_feed;              /* tg_sse_feed is on the stack */
    int dead;                 /* released: no more events, freed after the feed */
    struct tg_upreq *get;     /* the stream */
    struct tg_sse_parser sse;
    char *endpoint;           /* request target the endpoint event named */
    struct tg_buf queue;      /* messages sent before the endpoint was known, NUL-separated with their gid */
    int status;
};

/* A POST to the endpoint: it should get 202; otherwise the call it carried fails. */
struct sse_post {
    struct tg_server *srv;
    struct tg_session *sess; /* reference */
    uint64_t gid;
};

static void stream_upstream_gone(struct tg_session *s, const char *why);
static void stream_server_message(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p,
                                  size_t n);

static void on_post_head(struct tg_upreq *r, int status, void *ud) { (void)r, (void)status, (void)ud; }
static void on_post_data(struct tg_upreq *r, const char *p, size_t n, void *ud) { (void)r, (void)p, (void)n, (void)ud; }
static void on_post_done(struct tg_upreq *r, int err, void *ud)
{
    struct sse_post *sp = ud;
    int st = tg_upreq_status(r);
    if ((err != 0 || st < 200 || st >= 300) && sp->gid != 0) {
        for (struct tg_list *l = sp->sess->calls.next; l != &sp->sess->calls; l = l->next) {
            struct tg_call *k = tg_container_of(l, struct tg_call, slink);
            if (k->awaiting && k->gid == sp->gid) {
                char why[160];
                if (err == TG_ETIMEDOUT)
                    snprintf(why, sizeof(why), "upstream %s timed out", up_name(k));
                else if (err != 0)
                    snprintf(why, sizeof(why), "upstream %s is unavailable", up_name(k));
                else
                    snprintf(why, sizeof(why), "upstream %s answered HTTP %d", up_name(k), st);
                /* a refused POST (4xx) or one that never left never ran */
                stream_fail(k, why, err != 0 ? !tg_upreq_sent(r) : st >= 400 && st < 500);
                break;
            }
        }
    }
    tg_session_unref(sp->sess);
    free(sp);
}
static const struct tg_upreq_cbs post_cbs = {on_post_head, on_post_data, on_post_done};

static void sse_post(struct sse_link *ln, const char *body, size_t len, uint64_t gid)
{
    struct sse_post *sp = tg_xcalloc(1, sizeof(*sp));
    sp->srv = ln->srv;
    sp->sess = tg_session_ref(ln->sess);
    sp->gid = gid;
    tg_upreq_start_to(ln->up, "POST", ln->endpoint,
                      "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", body, len,
                      0, (uint64_t)tg_upstream_conf(ln->up)->call_timeout_ms, &post_cbs, sp);
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
                   tg_upstream_conf(ln->up)->name);
        return ln->dead;
    }
    if (ev->event.len == 0 || tg_slice_eq(ev->event, TG_SLICE("message")))
        stream_server_message(ln->srv, ln->sess, ln->up, ev->data.ptr, ev->data.len);
    return ln->dead; /* the message may have ended the session (an initialize refused) */
}

static void sse_link_destroy(struct sse_link *ln)
{
    tg_sse_dispose(&ln->sse);
    tg_buf_dispose(&ln->queue);
    free(ln->endpoint);
    tg_upstream_unref(ln->up);
    free(ln);
}

static void on_link_head(struct tg_upreq *r, int status, void *ud)
{
    struct sse_link *ln = ud;
    ln->status = status;
    if (status != 200 || !tg_slice_has_token(tg_upreq_content_type(r), "text/event-stream"))
        tg_log(TG_LOG_WARN, "legacy SSE upstream refused the stream", "upstream=%s status=%d",
               tg_upstream_conf(ln->up)->name, status);
}

static void on_link_data(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct sse_link *ln = ud;
    if (ln->status != 200 || ln->dead)
        return;
    struct tg_session *s = tg_session_ref(ln->sess);
    struct tg_server *srv = ln->srv;
    ln->in_feed = 1;
    int e = tg_sse_feed(&ln->sse, p, n, on_link_event, ln);
    ln->in_feed = 0;
    if (ln->dead) {
        sse_link_destroy(ln); /* released while its parser ran */
    } else {
        if (e != 0)
            tg_log(TG_LOG_WARN, "legacy SSE upstream event too large", "upstream=%s", tg_upstream_conf(ln->up)->name);
        if (s->upstream_link == ln)
            session_backpressure(srv, s);
    }
    tg_session_unref(s);
}

static void on_link_done(struct tg_upreq *r, int err, void *ud)
{
    struct sse_link *ln = ud;
    ln->get = NULL;
    if (ln->dead)
        return;
    stream_upstream_gone(ln->sess, "the upstream's event stream ended");
}

static const struct tg_upreq_cbs link_cbs = {on_link_head, on_link_data, on_link_done};

static void release_sse_link(struct tg_session *s)
{
    struct sse_link *ln = s->upstream_link;
    s->upstream_link = NULL;
    if (ln == NULL)
        return;
    ln->dead = 1;
    if (ln->get) {
        tg_upreq_cancel(ln->get);
        ln->get = NULL;
    }
    if (!ln->in_feed)
        sse_link_destroy(ln);
}

/* Backpressure on a message-stream upstream: stop reading it while its client is behind. */
static void link_pause(struct tg_session *s, int pause)
{
    if (s->upstream_link == NULL || (size_t)s->upstream >= ((struct tg_server *)s->srv)->nupstreams)
        return;
    struct tg_server *srv = s->srv;
    int tr = tg_upstream_conf(srv->upstreams[s->upstream])->transport;
    if (tr == TG_UP_STDIO) {
        if (pause)
            tg_child_pause(s->upstream_link);
        else
            tg_child_resume(s->upstream_link);
    } else if (tr == TG_UP_SSE) {
        struct sse_link *ln = s->upstream_link;
        if (ln->get && pause)
            tg_upreq_pause(ln->get);
        else if (ln->get)
            tg_upreq_resume(ln->get);
    }
}

static int sse_link_send(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *body,
                         size_t len, uint64_t gid)
{
    struct sse_link *ln = s->upstream_link;
    if (ln == NULL) {
        ln = tg_xcalloc(1, sizeof(*ln));
        ln->srv = srv;
        ln->sess = s;
        ln->up = tg_upstream_ref(u);
        tg_sse_init(&ln->sse, (size_t)srv->conf->limits.response_bytes);
        tg_buf_init(&ln->queue);
        s->upstream_link = ln;
        s->release_link = release_sse_link;
        ln->get = tg_upreq_start(u, "GET", "Accept: text/event-stream\r\n", NULL, 0, 1, 0, &link_cbs, ln);
    }
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

/* The client stream of call k: its SSE answer (started now if needed), or its channel. */
static void call_stream_write(struct tg_call *k, const char *p, size_t n)
{
    struct tg_channel *ch = k->channel ? k->channel : k->batch ? k->batch->channel : NULL;
    if (ch != NULL) {
        channel_send(ch, p, n);
        return;
    }
    if (k->conn == NULL || k->batch != NULL)
        return;
    if (k->mode != MODE_SSE) {
        char hdr[96];
        session_header(k, hdr, sizeof(hdr));
        k->mode = MODE_SSE;
        tg_http_stream_begin(k->conn, 200, hdr, "text/event-stream");
        stream_open(k);
    }
    sse_write_message(k, p, n);
}

static void stream_send(struct tg_call *k, const char *body, size_t len, uint64_t timeout)
{
    struct tg_server *srv = k->srv;
    const struct tg_upstream_conf *uc = tg_upstream_conf(k->uprt);
    if (k->kind == KIND_GET) {
        /* The client's GET stream: the server's own messages come from the child's stdout. */
        k->forwarded = 1;
        if (k->conn != NULL) {
            k->mode = MODE_SSE;
            tg_http_stream_begin(k->conn, 200, NULL, "text/event-stream");
            stream_open(k);
        }
        return;
    }
    int sent;
    if (uc->transport == TG_UP_STDIO) {
        struct tg_child *child = session_child(srv, k->sess, k->uprt);
        sent = child != NULL && tg_child_send(child, body, len) == 0;
    } else {
        sent = sse_link_send(srv, k->sess, k->uprt, body, len, k->kind == KIND_REQUEST ? k->gid : 0) == 0;
    }
    if (!sent) {
        char why[160];
        snprintf(why, sizeof(why), "upstream %s could not be started or has gone", uc->name);
        stream_fail(k, why, 1); /* the message was never written */
        return;
    }
    k->forwarded = 1;
    k->sent_at = now_ms(srv);
    if (k->kind != KIND_REQUEST) {
        /* notifications and responses: nothing comes back for them */
        if (k->batch == NULL && k->conn != NULL)
            tg_http_respond(k->conn, 202, NULL, NULL, "", 0);
        call_free(k);
        return;
    }
    k->awaiting = 1;
    k->deadline = k->sent_at + (timeout ? timeout : (uint64_t)uc->call_timeout_ms);
    tg_list_insert_tail(&srv->awaiting, &k->alink);
}

/* A decided call's audit line and refund, for answers that came on a message stream.
 * give_back: the upstream certainly did not run it (see settle_call). */
static void stream_settle(struct tg_call *k, const char *outcome, int give_back)
{
    if (k->dec == NULL)
        return;
    if (give_back)
        refund(k);
    audit_call(k, "allow", (double)(now_ms(k->srv) - k->sent_at), outcome, NULL);
}

static void stream_fail(struct tg_call *k, const char *why, int give_back)
{
    stream_settle(k, strstr(why, "timed out") ? "timeout" : "unavailable", give_back);
    struct tg_buf e, d;
    tg_buf_init(&e);
    tg_buf_init(&d);
    upstream_data(&d, up_name(k));
    if (k->kind == KIND_REQUEST) {
        tg_rpc_error(&e, k->client_id, k->client_id_len, TG_RPC_UPSTREAM, why, d.base);
        if (k->batch != NULL)
            batch_add(k->batch, e.base, e.len);
        else if (k->conn != NULL && k->mode == MODE_SSE) {
            sse_write_message(k, e.base, e.len);
            tg_http_stream_end(k->conn);
        } else if (k->conn != NULL) {
            if (k->is_init)
                tg_session_remove(k->srv->sessions, k->sess);
            tg_http_respond(k->conn, 200, NULL, "application/json", e.base, e.len);
        }
    } else if (k->conn != NULL) {
        if (k->mode == MODE_SSE)
            tg_http_stream_end(k->conn);
        else
            tg_http_respond(k->conn, 502, NULL, "application/json", e.base, e.len);
    }
    tg_buf_dispose(&e);
    tg_buf_dispose(&d);
    call_free(k);
}

/* The answer to call k arrived on the session's stream. */
static void stream_answer(struct tg_call *k, const char *p, size_t n)
{
    struct tg_buf out;
    tg_buf_init(&out);
    int valid, is_error;
    restore_id(k, p, n, &out, &valid, &is_error, NULL);
    if (k->is_init) {
        k->sess->init_pending = 0;
        if (!is_error)
            note_init_result(k, p, n);
    }
    stream_settle(k, is_error ? "error" : "ok", is_error);
    if (k->batch != NULL) {
        batch_add(k->batch, out.base, out.len);
    } else if (k->conn != NULL && k->mode == MODE_SSE) {
        sse_write_message(k, out.base, out.len);
        if (k->conn)
            tg_http_stream_end(k->conn);
    } else if (k->conn != NULL) {
        char hdr[96];
        session_header(k, hdr, sizeof(hdr));
        if (k->is_init && is_error) {
            hdr[0] = '\0';
            tg_session_remove(k->srv->sessions, k->sess);
        }
        struct tg_conn *c = k->conn;
        tg_http_respond(c, 200, hdr, "application/json", out.base, out.len);
        watch_answer(k->srv, k->sess, c);
    }
    tg_buf_dispose(&out);
    call_free(k);
}

/* Where a server message that answers no call goes: the channel, the GET stream, or the
 * SSE answer of a call still waiting (the client reads all of these). */
static int session_stream_write(struct tg_session *s, const char *p, size_t n, const char *progress_key)
{
    if (s->channel != NULL) {
        channel_send(s->channel, p, n);
        return 1;
    }
    struct tg_call *target = NULL;
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (progress_key && k->progress_token && strcmp(k->progress_token, progress_key) == 0 && k->awaiting) {
            target = k;
            break;
        }
    }
    if (target == NULL && s->get_stream != NULL && ((struct tg_call *)s->get_stream)->conn != NULL)
        target = s->get_stream;
    for (struct tg_list *l = s->calls.prev; target == NULL && l != &s->calls; l = l->prev) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->awaiting && (k->conn != NULL || (k->batch && k->batch->channel)))
            target = k;
    }
    if (target == NULL)
        return 0;
    call_stream_write(target, p, n);
    return 1;
}

static void stream_server_message(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p,
                                  size_t n)
{
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 1000, 0, &doc, NULL, NULL) != 0)
        return;
    if (doc.method_raw.len == 0 && doc.id_raw.len > 0) {
        for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
            struct tg_call *k = tg_container_of(l, struct tg_call, slink);
            if (k->awaiting && k->kind == KIND_REQUEST && doc.id_raw.len == k->gid_len &&
                memcmp(doc.id_raw.ptr, k->gid_str, k->gid_len) == 0) {
                stream_answer(k, p, n);
                return;
            }
        }
        char esc[80];
        tg_log(TG_LOG_INFO, "upstream answer matches no call; dropped", "upstream=%s session=%s id=%s",
               tg_upstream_conf(u)->name, s->id_str, tg_log_esc(esc, sizeof(esc), doc.id_raw));
        return;
    }
    /* A server request or notification. */
    char *progress = NULL;
    if (doc.method_raw.len > 0 && doc.id_raw.len > 0) {
        struct tg_call probe;
        memset(&probe, 0, sizeof(probe));
        probe.srv = srv;
        probe.sess = s;
        probe.uprt = u;
        if (refuse_stream_request(&probe, p, n))
            return;
        note_server_request(s, doc.id_raw);
    } else if (tg_slice_eq(doc.method_raw, TG_SLICE("\"notifications/progress\""))) {
        struct tg_json_doc full;
        if (tg_json_parse(p, n, 1000, 1, &full, NULL, NULL) == 0) {
            cJSON *tok = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(full.root, "params"),
                                                          "progressToken");
            if (tok)
                progress = cJSON_IsString(tok) ? id_key_of_string(tok->valuestring) : id_key_of_number(tok);
            cJSON_Delete(full.root);
        }
    }
    if (!session_stream_write(s, p, n, progress))
        tg_log(TG_LOG_DEBUG, "server message with nowhere to go; dropped", "session=%s", s->id_str);
    free(progress);
}

static void on_child_message(void *ud, const char *p, size_t n)
{
    struct tg_session *s = ud;
    struct tg_server *srv = s->srv;
    if ((size_t)s->upstream >= srv->nupstreams)
        return;
    tg_session_ref(s);
    stream_server_message(srv, s, srv->upstreams[s->upstream], p, n);
    session_backpressure(srv, s);
    tg_session_unref(s);
}

/* The session's child died: its calls fail cleanly and the session ends, so that the next
 * initialize starts a new child. */
static void on_child_exit(void *ud, int64_t status, int sig)
{
    struct tg_session *s = ud;
    s->upstream_link = NULL;
    stream_upstream_gone(s, "the upstream process exited");
}

static void stream_upstream_gone(struct tg_session *s, const char *why)
{
    struct tg_server *srv = s->srv;
    tg_session_ref(s);
    struct tg_list *l = s->calls.next;
    while (l != &s->calls) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        l = l->next;
        if (k->awaiting)
            stream_fail(k, why, 0);
    }
    if (s->channel != NULL)
        channel_end(s->channel, 1011, "upstream gone");
    if (s->live) {
        end_get_stream(s);
        tg_session_remove(srv->sessions, s);
    }
    tg_session_unref(s);
}

/* ---- MCP endpoint --------------------------------------------------------------- */

struct route {
    int upstream;
    const struct tg_upstream_conf *uc;
};

static void local_init_result(struct tg_session *s, struct tg_msg *m, const struct tg_upstream_conf *uc,
                              struct tg_buf *b);

static void answer_local_init(struct tg_server *srv, struct tg_conn *c, struct tg_session *s, struct tg_msg *m,
                              const struct tg_upstream_conf *uc)
{
    struct tg_buf b;
    tg_buf_init(&b);
    local_init_result(s, m, uc, &b);
    char hdr[96];
    snprintf(hdr, sizeof(hdr), "Mcp-Session-Id: %s\r\n", s->id_str);
    tg_http_respond(c, 200, hdr, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

/* The gateway's own answer to initialize, for upstreams that cannot take it (CoWork OS). */
static void local_init_result(struct tg_session *s, struct tg_msg *m, const struct tg_upstream_conf *uc,
                              struct tg_buf *out)
{
    cJSON *params = cJSON_GetObjectItemCaseSensitive(m->root, "params");
    cJSON *pv = cJSON_GetObjectItemCaseSensitive(params, "protocolVersion");
    const char *ver = TG_PROTO_LATEST;
    if (cJSON_IsString(pv) && tg_proto_supported(tg_slice_cstr(pv->valuestring)))
        ver = pv->valuestring;
    snprintf(s->proto, sizeof(s->proto), "%s", ver);
    s->initialized = 1;
    struct tg_buf *bp = out;
#define b (*bp)
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(&b, m->id_raw, m->id_len);
    tg_buf_appendf(&b,
                   ",\"result\":{\"protocolVersion\":\"%s\",\"capabilities\":{\"tools\":{\"listChanged\":false},"
                   "\"resources\":{\"subscribe\":false,\"listChanged\":false}},\"serverInfo\":{\"name\":",
                   ver);
    char name[96];
    snprintf(name, sizeof(name), "tollgate/%s", uc->name);
    tg_json_write_string(&b, name, strlen(name));
    tg_buf_appends(&b, ",\"version\":\"" TG_VERSION "\"}}}");
#undef b
}

/* notifications/cancelled names the client's request id: point it at ours, or drop it. */
static int rewrite_cancel(struct tg_session *s, struct tg_msg *m, int depth)
{
    (void)depth;
    cJSON *params = cJSON_GetObjectItemCaseSensitive(m->root, "params");
    cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
    char *want = NULL;
    if (cJSON_IsString(rid)) {
        size_t l = strlen(rid->valuestring);
        want = tg_xmalloc(l + 2);
        want[0] = 's';
        memcpy(want + 1, rid->valuestring, l + 1);
    } else if (cJSON_IsNumber(rid) && rid->valuestring != NULL) {
        size_t l = strlen(rid->valuestring);
        want = tg_xmalloc(l + 2);
        want[0] = 'n';
        memcpy(want + 1, rid->valuestring, l + 1);
    }
    if (want == NULL)
        return 0;
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->kind != KIND_REQUEST || k->id_key == NULL || !k->forwarded || strcmp(k->id_key, want) != 0)
            continue;
        free(want);
        cJSON *n = tg_json_number_raw(k->gid_str, k->gid_len);
        if (n == NULL)
            return 0;
        cJSON_ReplaceItemInObjectCaseSensitive(params, "requestId", n);
        return 1;
    }
    free(want);
    return 0;
}

static int accept_ok(struct tg_slice accept, int need_json, int need_sse)
{
    if (accept.ptr == NULL)
        return 0;
    int any = tg_slice_has_token(accept, "*/*");
    int json = any || tg_slice_has_token(accept, "application/json") || tg_slice_has_token(accept, "application/*");
    int sse = any || tg_slice_has_token(accept, "text/event-stream") || tg_slice_has_token(accept, "text/*");
    return (!need_json || json) && (!need_sse || sse);
}

static void respond_decision(struct tg_conn *c, struct tg_batch *b, const char *id, size_t idn, const char *tool,
                             const struct tg_decision *d, const char *approval_id)
{
    struct tg_buf data;
    tg_buf_init(&data);
    int code = TG_RPC_DENIED;
    tg_buf_appends(&data, "{\"tool\":");
    if (tool)
        tg_json_write_string(&data, tool, strlen(tool));
    else
        tg_buf_appends(&data, "null");
    if (d->verdict == TG_VERDICT_LIMITED) {
        code = TG_RPC_LIMITED;
        tg_buf_appends(&data, ",\"counter\":");
        tg_json_write_string(&data, d->counter, strlen(d->counter));
        tg_buf_appendf(&data, ",\"retry_after_ms\":%llu", (unsigned long long)d->retry_after_ms);
    } else if (approval_id != NULL) {
        code = TG_RPC_APPROVAL;
        tg_buf_appends(&data, ",\"approval_id\":");
        tg_json_write_string(&data, approval_id, strlen(approval_id));
    } else {
        tg_buf_appends(&data, ",\"rule\":");
        tg_json_write_string(&data, d->rule, strlen(d->rule));
        tg_buf_appends(&data, ",\"reason\":");
        tg_json_write_string(&data, d->message, strlen(d->message));
    }
    tg_buf_appends(&data, "}");
    tg_buf_append(&data, "", 1);
    reply_rpc(c, b, 200, id, idn, code, d->message, data.base);
    tg_buf_dispose(&data);
}

static void park_call(struct tg_server *srv, struct tg_call *k)
{
    uint8_t rnd[16];
    tg_random(rnd, sizeof(rnd));
    tg_hex_encode(rnd, sizeof(rnd), k->approval_id);
    k->parked = 1;
    k->approval_deadline = now_ms(srv) + (uint64_t)k->dec->approval_timeout_ms;
    k->parked_at_wall = (uint64_t)wall_ms();
    tg_list_insert_tail(&srv->approvals, &k->alink);
    srv->napprovals++;
    tg_log(TG_LOG_INFO, "call parked for approval", "approval_id=%s grant=%s session=%s upstream=%s tool=%s",
           k->approval_id, k->grant, k->sess->id_str, up_name(k), k->tool);
    audit_call(k, "approve", -1, NULL, NULL);
}

/* A client request: decide it (tools/call, resources/read, prompts/get), then forward, park or refuse. */
static void handle_request(struct tg_server *srv, struct tg_conn *c, struct tg_batch *b, struct route *rt,
                           const struct tg_grant_conf *g, struct tg_session *s, struct tg_policy *pol, struct tg_msg *m)
{
    const struct tg_limits *lim = &srv->conf->limits;
    char *key = id_key_of(m->id_raw, m->id_len);
    for (struct tg_list *l = s->calls.next; key && l != &s->calls; l = l->next) {
        struct tg_call *o = tg_container_of(l, struct tg_call, slink);
        if (o->kind == KIND_REQUEST && o->id_key && strcmp(o->id_key, key) == 0) {
            free(key);
            reply_rpc(c, b, 400, NULL, 0, TG_RPC_INVALID_REQUEST,
                      "Invalid Request: a request with this id is already in flight in this session", NULL);
            return;
        }
    }
    if (s->inflight >= (unsigned)lim->inflight_per_session) {
        free(key);
        srv->metrics.limit_inflight++;
        reply_rpc(c, b, 429, m->id_raw, m->id_len, TG_RPC_UPSTREAM,
                  "Too many calls in flight for this session (limits.inflight_per_session)", NULL);
        return;
    }
    cJSON *params = cJSON_GetObjectItemCaseSensitive(m->root, "params");
    struct tg_decision *dec = NULL;
    const char *tool = NULL;
    const cJSON *args = NULL;
    if (strcmp(m->method, "tools/call") == 0) {
        cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
        cJSON *a = cJSON_GetObjectItemCaseSensitive(params, "arguments");
        if (!cJSON_IsObject(params) || !cJSON_IsString(name) || (a != NULL && !cJSON_IsObject(a))) {
            free(key);
            reply_rpc(c, b, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                      "tools/call needs params.name (a string) and optional params.arguments (an object)", NULL);
            return;
        }
        tool = name->valuestring;
        args = a;
        dec = tg_xmalloc(sizeof(*dec));
        struct tg_caller who = {g->name, s->id_str, rt->uc->name};
        tg_policy_decide_call(pol, srv->counters, &who, tool, args, wall_ms(), dec);
    } else if (strcmp(m->method, "resources/read") == 0 || strcmp(m->method, "prompts/get") == 0) {
        int res = m->method[0] == 'r';
        cJSON *what = cJSON_GetObjectItemCaseSensitive(params, res ? "uri" : "name");
        if (!cJSON_IsString(what)) {
            free(key);
            reply_rpc(c, b, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                      res ? "resources/read needs params.uri (a string)" : "prompts/get needs params.name (a string)",
                      NULL);
            return;
        }
        dec = tg_xcalloc(1, sizeof(*dec));
        if (res)
            tg_policy_decide_resource(pol, what->valuestring, dec);
        else
            tg_policy_decide_prompt(pol, what->valuestring, dec);
        tool = what->valuestring;
    }
    srv->metrics.rpc_requests++;
    struct tg_call *k = call_new(srv, s, c, KIND_REQUEST);
    if (b != NULL) {
        k->batch = b;
        b->pending++;
    }
    s->inflight++;
    k->policy = tg_policy_ref(pol);
    k->method = tg_xstrdup(m->method);
    {
        cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
        cJSON *tok = cJSON_GetObjectItemCaseSensitive(meta, "progressToken");
        if (cJSON_IsString(tok))
            k->progress_token = id_key_of_string(tok->valuestring);
        else if (cJSON_IsNumber(tok))
            k->progress_token = id_key_of_number(tok);
    }
    k->id_key = key;
    k->is_tools_list = strcmp(m->method, "tools/list") == 0;
    k->is_init = strcmp(m->method, "initialize") == 0;
    k->client_id = m->id_raw;
    k->client_id_len = m->id_len;
    m->id_raw = NULL;
    if (dec != NULL) {
        k->dec = dec;
        k->tool = tg_xstrdup(tool);
        if (strcmp(m->method, "tools/call") == 0) {
            tg_audit_args_hash(args, k->args_sha256);
            k->args_json = tg_audit_args_values(&srv->conf->audit, args);
        }
        srv->metrics.decisions[dec->verdict]++;
        if (dec->verdict == TG_VERDICT_DENY || dec->verdict == TG_VERDICT_LIMITED) {
            audit_call(k, dec->verdict == TG_VERDICT_DENY ? "deny" : "limited", -1, NULL, NULL);
            respond_decision(c, b, k->client_id, k->client_id_len, k->tool, dec, NULL);
            call_free(k);
            return;
        }
    }
    k->gid = ++srv->next_gid;
    k->gid_len = (size_t)snprintf(k->gid_str, sizeof(k->gid_str), "%llu", (unsigned long long)k->gid);
    struct tg_buf out;
    tg_buf_init(&out);
    tg_msg_write_with_id(&out, m, k->gid);
    if (dec != NULL && dec->verdict == TG_VERDICT_APPROVE) {
        /* A batch cannot wait for a human; a single message on a channel can. */
        int in_batch = b != NULL && !(b->channel != NULL && b->single);
        if (in_batch || srv->napprovals >= (size_t)lim->approvals_max) {
            tg_buf_dispose(&out);
            audit_call(k, "rejected", -1, NULL, "(queue full)");
            struct tg_decision full = *dec;
            if (in_batch)
                snprintf(full.message, sizeof(full.message), "%s needs a human's approval, which a batch cannot wait for; send it on its own", k->tool);
            else
                snprintf(full.message, sizeof(full.message), "%s needs approval, but the approval queue is full (limits.approvals_max); try later", k->tool);
            respond_decision(c, b, k->client_id, k->client_id_len, k->tool, &full, "");
            call_free(k);
            return;
        }
        k->held = out;
        park_call(srv, k);
        return;
    }
    call_send(k, "POST", out.base, out.len, 0, (uint64_t)rt->uc->call_timeout_ms);
    tg_buf_dispose(&out);
}

static void approval_finish(struct tg_call *k, int approve, const char *by, const char *why);

/* notifications/cancelled naming a call still parked for approval: it is withdrawn and never
 * forwarded, whatever an approver does later. */
static int cancel_parked(struct tg_session *s, struct tg_msg *m)
{
    cJSON *params = cJSON_GetObjectItemCaseSensitive(m->root, "params");
    cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
    /* The key of an id of any length (ids are bounded only by limits.body_bytes). */
    char *want = cJSON_IsString(rid) ? id_key_of_string(rid->valuestring) : id_key_of_number(rid);
    if (want == NULL)
        return 0;
    int found = 0;
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->parked && k->id_key && strcmp(k->id_key, want) == 0) {
            approval_finish(k, 0, "client", "cancelled");
            found = 1;
            break;
        }
    }
    free(want);
    return found;
}

/* Notifications and responses from the client. */
static void handle_forward(struct tg_server *srv, struct tg_conn *c, struct tg_batch *b, struct route *rt,
                           struct tg_session *s, struct tg_msg *m)
{
    if (m->kind == TG_MSG_NOTIFICATION)
        srv->metrics.rpc_notifications++;
    else
        srv->metrics.rpc_responses++;
    if (m->kind == TG_MSG_RESPONSE && !take_server_request(s, m->id_raw, m->id_len)) {
        /* Only answers to requests the server actually sent go up; anything else is a forgery. */
        if (b != NULL)
            batch_add_error(b, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Invalid Request: no server request with this id is waiting for an answer", NULL);
        else
            respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                        "Invalid Request: no server request with this id is waiting for an answer", NULL);
        return;
    }
    if (m->kind == TG_MSG_NOTIFICATION && strcmp(m->method, "notifications/cancelled") == 0 &&
        cancel_parked(s, m)) {
        reply_accepted(c, b);
        return;
    }
    if (m->kind == TG_MSG_NOTIFICATION && strcmp(m->method, "notifications/cancelled") == 0 &&
        !rewrite_cancel(s, m, srv->conf->limits.json_depth)) {
        /* Not one of this session's calls in flight: nothing to cancel upstream. */
        reply_accepted(c, b);
        return;
    }
    struct tg_call *k = call_new(srv, s, c, KIND_FORWARD);
    if (b != NULL) {
        k->batch = b;
        b->pending++;
    }
    struct tg_buf out;
    tg_buf_init(&out);
    tg_json_write(&out, m->root);
    call_send(k, "POST", out.base, out.len, 0, (uint64_t)rt->uc->call_timeout_ms);
    tg_buf_dispose(&out);
}

/* One decoded message of a live session: the policy gate, then forward or refuse.
 * b is the batch it belongs to (answers go there), or NULL (answers go to c). */
static void dispatch_message(struct tg_server *srv, struct tg_conn *c, struct tg_batch *b, struct route *rt,
                             const struct tg_grant_conf *g, struct tg_session *s, struct tg_msg *m)
{
    struct tg_policy *pol = tg_conf_policy_for(srv->conf, g, rt->upstream);
    /* Messages a client may send: standard MCP methods, methods the policy names, and
     * responses to the server's requests. */
    if (m->kind == TG_MSG_NOTIFICATION && tg_msg_is_standard_client_method(m->method, TG_MSG_REQUEST)) {
        /* A request method without an id would run upstream unanswered and undecided. */
        srv->metrics.decisions[1]++;
        char msg[200];
        snprintf(msg, sizeof(msg), "Invalid Request: %s is a request and needs an id", m->method);
        if (b != NULL)
            batch_add_error(b, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
        else
            respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
        return;
    }
    if (m->kind != TG_MSG_RESPONSE && !tg_msg_is_standard_client_method(m->method, m->kind) &&
        !tg_policy_method_allowed(pol, m->method)) {
        srv->metrics.rpc_refused_nonstandard++;
        srv->metrics.decisions[1]++;
        char esc[96];
        tg_log(TG_LOG_INFO, "refused non-standard method", "grant=%s session=%s upstream=%s method=%s", g->name,
               s->id_str, rt->uc->name, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(m->method)));
        struct tg_audit_record ar = {0};
        ar.grant = g->name;
        ar.session = s->id_str;
        ar.upstream = rt->uc->name;
        ar.method = m->method;
        ar.decision = "deny";
        ar.rule = "non-standard-method";
        ar.latency_ms = -1;
        tg_audit_log(srv->audit, &srv->conf->audit, &ar);
        if (m->kind == TG_MSG_NOTIFICATION) {
            reply_accepted(c, b); /* notifications get no answer; it is dropped */
        } else {
            struct tg_buf d;
            tg_buf_init(&d);
            tg_buf_appends(&d, "{\"tool\":null,\"rule\":\"non-standard-method\",\"reason\":");
            char reason[200];
            snprintf(reason, sizeof(reason), "%s is not a standard MCP method; a policy must allow it by name",
                     m->method);
            tg_json_write_string(&d, reason, strlen(reason));
            tg_buf_appends(&d, "}");
            tg_buf_append(&d, "", 1);
            char msg[200];
            snprintf(msg, sizeof(msg), "%s is refused by the gateway: not a standard MCP method", m->method);
            reply_rpc(c, b, 200, m->id_raw, m->id_len, TG_RPC_DENIED, msg, d.base);
            tg_buf_dispose(&d);
        }
        return;
    }
    if (rt->uc->init_local && m->kind != TG_MSG_RESPONSE &&
        (strcmp(m->method, "notifications/initialized") == 0 || strcmp(m->method, "ping") == 0)) {
        /* The gateway owns the lifecycle of a local-initialize upstream-> */
        if (m->kind == TG_MSG_NOTIFICATION) {
            reply_accepted(c, b);
        } else {
            struct tg_buf out;
            tg_buf_init(&out);
            tg_buf_appends(&out, "{\"jsonrpc\":\"2.0\",\"id\":");
            tg_buf_append(&out, m->id_raw, m->id_len);
            tg_buf_appends(&out, ",\"result\":{}}");
            reply_json(c, b, out.base, out.len);
            tg_buf_dispose(&out);
        }
        return;
    }
    if (m->kind == TG_MSG_REQUEST)
        handle_request(srv, c, b, rt, g, s, pol, m);
    else
        handle_forward(srv, c, b, rt, s, m);
}

/* A JSON-RPC batch: only for sessions that negotiated 2025-03-26 (later versions removed
 * batching), never with initialize, and every element decided on its own. */
static void handle_batch(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g,
                         const char *body, size_t blen)
{
    const struct tg_limits *lim = &srv->conf->limits;
    struct tg_json_doc doc;
    const char *why = NULL;
    if (tg_json_parse(body, blen, lim->json_depth, 1, &doc, &why, NULL) != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "Parse error: %s", why);
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_PARSE_ERROR, msg, NULL);
        return;
    }
    struct tg_slice sid = tg_http_req_header(&c->req, "mcp-session-id");
    struct tg_session *s = sid.ptr ? tg_session_find(srv->sessions, sid) : NULL;
    if (sid.ptr == NULL) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Bad Request: a batch needs Mcp-Session-Id (initialize cannot be batched)", NULL);
        cJSON_Delete(doc.root);
        return;
    }
    if (s == NULL || strcmp(s->grant, g->name) != 0 || s->upstream != rt->upstream) {
        respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        cJSON_Delete(doc.root);
        return;
    }
    if (strcmp(s->proto, "2025-03-26") != 0) {
        char msg[200];
        snprintf(msg, sizeof(msg),
                 "Invalid Request: JSON-RPC batches are only accepted for protocol 2025-03-26; this session uses %s",
                 s->proto[0] ? s->proto : "an unknown version");
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
        cJSON_Delete(doc.root);
        return;
    }
    int n = cJSON_GetArraySize(doc.root);
    if (n == 0 || n > lim->inflight_per_session) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    n == 0 ? "Invalid Request: empty batch"
                           : "Invalid Request: more batch elements than limits.inflight_per_session",
                    NULL);
        cJSON_Delete(doc.root);
        return;
    }
    s->last_active_ms = now_ms(srv);
    struct tg_batch *b = tg_xcalloc(1, sizeof(*b));
    b->srv = srv;
    b->conn = c;
    b->pending = 1; /* held by this loop until every element is dispatched */
    tg_buf_init(&b->out);
    c->exchange = b;
    c->on_abort = on_batch_abort;
    c->on_drain = NULL;
    struct tg_buf el;
    tg_buf_init(&el);
    for (cJSON *e = doc.root->child; e; e = e->next) {
        /* Each element goes through the same strict decoder as a single message. */
        el.len = 0;
        tg_json_write(&el, e);
        struct tg_msg m;
        int code = tg_msg_decode(el.base, el.len, lim->json_depth, &m, &why);
        if (code != 0) {
            char msg[160];
            snprintf(msg, sizeof(msg), "%s: %s", code == TG_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request", why);
            batch_add_error(b, m.id_raw, m.id_len, code, msg, NULL);
        } else if (m.kind == TG_MSG_REQUEST && strcmp(m.method, "initialize") == 0) {
            batch_add_error(b, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST, "Invalid Request: initialize cannot be batched",
                            NULL);
        } else {
            dispatch_message(srv, NULL, b, rt, g, s, &m);
        }
        tg_msg_dispose(&m);
    }
    tg_buf_dispose(&el);
    cJSON_Delete(doc.root);
    batch_done_one(b);
}

/* A GET that opens an event stream must accept one; otherwise 406. */
static int accepts_sse(struct tg_conn *c)
{
    if (accept_ok(tg_http_req_header(&c->req, "accept"), 0, 1))
        return 1;
    respond_rpc(c, 406, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Not Acceptable: Accept must list text/event-stream",
                NULL);
    return 0;
}

static void handle_post(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
{
    struct tg_http_req *req = &c->req;
    const struct tg_limits *lim = &srv->conf->limits;
    struct tg_slice ct = tg_http_req_header(req, "content-type");
    if (ct.ptr == NULL || !tg_slice_has_token(ct, "application/json") ||
        tg_http_req_header_count(req, "content-type") != 1) {
        respond_rpc(c, 415, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Unsupported Media Type: Content-Type must be application/json", NULL);
        return;
    }
    if (!accept_ok(tg_http_req_header(req, "accept"), 1, 1)) {
        respond_rpc(c, 406, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Not Acceptable: Accept must list application/json and text/event-stream", NULL);
        return;
    }
    const char *body = req->body.base ? req->body.base : "";
    size_t blen = req->body.len;
    size_t i = 0;
    while (i < blen && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    if (i < blen && body[i] == '[') {
        handle_batch(srv, c, rt, g, body, blen);
        return;
    }
    struct tg_msg m;
    const char *why = NULL;
    int code = tg_msg_decode(body, blen, lim->json_depth, &m, &why);
    if (code != 0) {
        srv->metrics.limit_json++;
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: %s", code == TG_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request", why);
        respond_rpc(c, 400, NULL, m.id_raw, m.id_len, code, msg, NULL);
        tg_msg_dispose(&m);
        return;
    }
    struct tg_slice pv = tg_http_req_header(req, "mcp-protocol-version");
    if (pv.ptr != NULL && !tg_proto_supported(pv)) {
        respond_rpc(c, 400, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                    "Bad Request: unsupported MCP-Protocol-Version", NULL);
        tg_msg_dispose(&m);
        return;
    }
    struct tg_slice sid = tg_http_req_header(req, "mcp-session-id");
    int is_init = m.kind == TG_MSG_REQUEST && strcmp(m.method, "initialize") == 0;
    struct tg_session *s = NULL;
    if (is_init) {
        if (sid.ptr != NULL) {
            respond_rpc(c, 400, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                        "Bad Request: initialize must not carry Mcp-Session-Id", NULL);
            tg_msg_dispose(&m);
            return;
        }
        if (srv->draining) {
            respond_rpc(c, 503, NULL, m.id_raw, m.id_len, TG_RPC_UPSTREAM, "gateway is shutting down", NULL);
            tg_msg_dispose(&m);
            return;
        }
        size_t cap = (size_t)(g->max_sessions > 0 ? g->max_sessions : lim->sessions_per_grant);
        if (tg_session_count_for_grant(srv->sessions, g->name) >= cap) {
            srv->metrics.limit_sessions++;
            respond_rpc(c, 429, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                        "Too many sessions for this grant (limits.sessions_per_grant); end one with DELETE", NULL);
            tg_msg_dispose(&m);
            return;
        }
        s = tg_session_create(srv->sessions, g->name, rt->upstream);
        s->srv = srv;
        s->last_active_ms = now_ms(srv);
        srv->metrics.sessions_created++;
        if (rt->uc->init_local) {
            answer_local_init(srv, c, s, &m, rt->uc);
            tg_msg_dispose(&m);
            return;
        }
    } else {
        if (sid.ptr == NULL) {
            respond_rpc(c, 400, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                        "Bad Request: Mcp-Session-Id header is required", NULL);
            tg_msg_dispose(&m);
            return;
        }
        s = tg_session_find(srv->sessions, sid);
        if (s == NULL || strcmp(s->grant, g->name) != 0 || s->upstream != rt->upstream) {
            respond_rpc(c, 404, NULL, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
            tg_msg_dispose(&m);
            return;
        }
        s->last_active_ms = now_ms(srv);
    }
    dispatch_message(srv, c, NULL, rt, g, s, &m);
    tg_msg_dispose(&m);
}
static struct tg_session *require_session(struct tg_server *srv, struct tg_conn *c, struct route *rt,
                                          const struct tg_grant_conf *g)
{
    struct tg_slice sid = tg_http_req_header(&c->req, "mcp-session-id");
    if (sid.ptr == NULL) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: Mcp-Session-Id header is required",
                    NULL);
        return NULL;
    }
    struct tg_session *s = tg_session_find(srv->sessions, sid);
    if (s == NULL || strcmp(s->grant, g->name) != 0 || s->upstream != rt->upstream) {
        respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        return NULL;
    }
    struct tg_slice pv = tg_http_req_header(&c->req, "mcp-protocol-version");
    if (pv.ptr != NULL && !tg_proto_supported(pv)) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: unsupported MCP-Protocol-Version",
                    NULL);
        return NULL;
    }
    s->last_active_ms = now_ms(srv);
    return s;
}

/* Write the kept events whose sequence number is above after_seq (oldest generation first).
 * Each kept event starts with "id: HEX-SEQ\n" and ends with a blank line. */
static void replay_write(struct tg_replay *r, struct tg_conn *c, uint64_t after_seq)
{
    for (int g = 0; g < 2; g++) {
        struct tg_buf *b = &r->gen[g == 0 ? r->cur ^ 1 : r->cur];
        size_t off = 0;
        while (off < b->len) {
            const char *ev = b->base + off;
            const char *end = memmem(ev, b->len - off, "\n\n", 2);
            size_t n = end ? (size_t)(end - ev) + 2 : b->len - off;
            const char *dash = memchr(ev, '-', n);
            uint64_t seq = dash ? strtoull(dash + 1, NULL, 10) : 0;
            if (seq > after_seq)
                tg_http_stream_write(c, ev, n);
            off += n;
        }
    }
}

/* Give a live stream's call a (new) client connection and replay what it missed. */
static void attach_stream(struct tg_call *k, struct tg_conn *c, uint64_t after_seq)
{
    struct tg_replay *r = k ? k->replay : NULL;
    tg_http_stream_begin(c, 200, NULL, "text/event-stream");
    if (r != NULL)
        replay_write(r, c, after_seq);
    k->conn = c;
    if (r != NULL)
        r->detached_at = 0;
    c->exchange = k;
    c->on_abort = on_client_abort;
    c->on_drain = on_client_drain;
    if (k->up)
        tg_upreq_resume(k->up);
}

/* GET with Last-Event-ID: "STREAM-SEQ" names a stream of this session and the last event seen. */
static void resume_stream(struct tg_server *srv, struct tg_conn *c, struct tg_session *s, struct tg_slice last)
{
    char buf[64];
    if (last.len == 0 || last.len >= sizeof(buf)) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: malformed Last-Event-ID", NULL);
        return;
    }
    memcpy(buf, last.ptr, last.len);
    buf[last.len] = '\0';
    /* Exactly HEX "-" DECIMAL, as we write them: no blanks, signs, prefixes or empty parts. */
    char *dash = strchr(buf, '-');
    int ok = dash != NULL && dash != buf && dash[1] != '\0' && dash - buf <= 16 && strlen(dash + 1) <= 19;
    for (char *q = buf; ok && q < dash; q++)
        ok = (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f');
    for (char *q = dash ? dash + 1 : buf; ok && *q; q++)
        ok = *q >= '0' && *q <= '9';
    unsigned long long sid = ok ? strtoull(buf, NULL, 16) : 0;
    unsigned long long seq = ok ? strtoull(dash + 1, NULL, 10) : 0;
    if (!ok) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: malformed Last-Event-ID", NULL);
        return;
    }
    for (struct tg_list *l = s->streams.next; l != &s->streams; l = l->next) {
        struct tg_replay *r = tg_container_of(l, struct tg_replay, slink);
        if (r->id != sid)
            continue;
        if (r->live != NULL && r->live->conn != NULL) {
            respond_rpc(c, 409, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Conflict: this stream has a client", NULL);
            return;
        }
        if (r->live != NULL) {
            attach_stream(r->live, c, seq);
            return;
        }
        /* The stream ended while the client was away: replay the rest, then end it. */
        tg_http_stream_begin(c, 200, NULL, "text/event-stream");
        replay_write(r, c, seq);
        tg_http_stream_end(c);
        return;
    }
    respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                "Not Found: this stream cannot be resumed (unknown or expired)", NULL);
}

/* Keepalive comments on idle client streams; streams that ended long ago, and GET streams
 * whose client never came back, are let go. */
static void streams_tick(struct tg_server *srv)
{
    uint64_t now = now_ms(srv);
    uint64_t ka = (uint64_t)srv->conf->limits.sse_keepalive_ms;
    struct tg_list *l = srv->streams.next;
    while (l != &srv->streams) {
        struct tg_replay *r = tg_container_of(l, struct tg_replay, glink);
        l = l->next;
        struct tg_call *k = r->live;
        if (k == NULL) {
            if (now - r->ended_at >= REPLAY_KEEP_MS)
                replay_free(r);
            continue;
        }
        if (k->conn != NULL && now - r->last_write_ms >= ka) {
            tg_http_stream_write(k->conn, ": keepalive\n\n", 13);
            r->last_write_ms = now;
        } else if (k->conn == NULL && r->detached_at != 0 && now - r->detached_at >= REPLAY_KEEP_MS &&
                   k->kind == KIND_GET) {
            abandon(k);
            call_free(k);
        }
    }
}

void tg_router_channel_counts(struct tg_server *srv, size_t *sse, size_t *ws)
{
    *sse = *ws = 0;
    for (struct tg_list *l = srv->channels.next; l != &srv->channels; l = l->next) {
        struct tg_channel *ch = tg_container_of(l, struct tg_channel, link);
        if (ch->open)
            (*(ch->kind == CH_WS ? ws : sse))++;
    }
}

/* Shutdown: calls that wait on a message stream or on a human get an answer now (the
 * upstreams are about to close), so that nothing is left holding a session. */
static void abort_waiting(struct tg_server *srv)
{
    while (!tg_list_empty(&srv->awaiting)) {
        struct tg_call *k = tg_container_of(srv->awaiting.next, struct tg_call, alink);
        stream_fail(k, "the gateway is shutting down", 0);
    }
    while (!tg_list_empty(&srv->approvals)) {
        struct tg_call *k = tg_container_of(srv->approvals.next, struct tg_call, alink);
        approval_finish(k, 0, "shutdown", "timeout");
    }
}

void tg_router_free_streams(struct tg_server *srv)
{
    abort_waiting(srv);
    while (!tg_list_empty(&srv->streams)) {
        struct tg_replay *r = tg_container_of(srv->streams.next, struct tg_replay, glink);
        if (r->live != NULL)
            r->live->replay = NULL;
        replay_free(r);
    }
}

static void handle_get(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
{
    if (!accepts_sse(c))
        return;
    struct tg_session *s = require_session(srv, c, rt, g);
    if (s == NULL)
        return;
    if (rt->uc->init_local) {
        tg_http_respond(c, 405, "Allow: POST, DELETE\r\n", NULL, "", 0);
        return;
    }
    struct tg_slice last = tg_http_req_header(&c->req, "last-event-id");
    if (last.ptr != NULL) {
        resume_stream(srv, c, s, last);
        return;
    }
    if (s->get_stream != NULL) {
        struct tg_call *gk = s->get_stream;
        if (gk->conn == NULL && gk->replay != NULL) {
            /* The GET stream lost its client without Last-Event-ID: the new one takes it over. */
            attach_stream(gk, c, 0);
            return;
        }
        respond_rpc(c, 409, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Conflict: this session already has a GET stream",
                    NULL);
        return;
    }
    struct tg_call *k = call_new(srv, s, c, KIND_GET);
    s->get_stream = k;
    call_send(k, "GET", NULL, 0, 1, 0);
}

/* The session ends: tell a Streamable HTTP upstream too (nobody waits for its answer). */
static void delete_upstream_session(struct tg_server *srv, struct tg_session *s)
{
    if (s->up_session == NULL || (size_t)s->upstream >= srv->nupstreams)
        return;
    struct tg_upstream *u = srv->upstreams[s->upstream];
    struct tg_buf h;
    tg_buf_init(&h);
    session_headers(&h, s, 1);
    tg_buf_append(&h, "", 1);
    tg_upreq_start(u, "DELETE", h.base, NULL, 0, 0, (uint64_t)tg_upstream_conf(u)->call_timeout_ms, &noop_cbs, NULL);
    tg_buf_dispose(&h);
}

static void end_get_stream(struct tg_session *s)
{
    struct tg_call *k = s->get_stream;
    if (k == NULL)
        return;
    if (k->up) {
        tg_upreq_cancel(k->up);
        k->up = NULL;
    }
    struct tg_conn *c = k->conn;
    k->conn = NULL;
    if (c) {
        c->exchange = NULL;
        c->on_abort = NULL;
        c->on_drain = NULL;
        if (c->state == TG_CONN_STREAMING)
            tg_http_stream_end(c);
        else
            tg_http_respond(c, 405, "Allow: POST, DELETE\r\n", NULL, "", 0);
    }
    call_free(k);
}

/* The client ended its session (DELETE, or its SSE stream or WebSocket closed) while calls ran:
 * they are abandoned now, not when the upstream gets round to answering, and audited as
 * client_gone (the upstream may have run them: their reservations stand). A client still
 * waiting on one (Streamable HTTP) gets -32004. */
static void end_session_calls(struct tg_session *s)
{
    struct tg_list *l = s->calls.next;
    while (l != &s->calls) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        l = l->next;
        if (k->kind == KIND_GET || k->parked)
            continue;
        if (k->up == NULL && !k->awaiting && k->resume == NULL)
            continue;
        if (k->up != NULL) {
            abandon(k);
        } else if (k->resume != NULL) {
            resume_cancel(k);
            if (k->dec)
                audit_call(k, "allow", -1, "client_gone", NULL);
        } else {
            stream_settle(k, "client_gone", 0);
        }
        if (k->conn != NULL || k->batch != NULL) {
            struct tg_buf e, d;
            tg_buf_init(&e);
            tg_buf_init(&d);
            upstream_data(&d, up_name(k));
            tg_rpc_error(&e, k->client_id, k->client_id_len, TG_RPC_UPSTREAM, "the session ended before the answer came",
                         d.base);
            if (k->batch != NULL)
                batch_add(k->batch, e.base, e.len);
            else if (k->mode == MODE_SSE) {
                sse_write_message(k, e.base, e.len);
                tg_http_stream_end(k->conn);
            } else {
                tg_http_respond(k->conn, 200, NULL, "application/json", e.base, e.len);
            }
            tg_buf_dispose(&e);
            tg_buf_dispose(&d);
        }
        call_free(k);
    }
}

static void handle_delete(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
{
    struct tg_session *s = require_session(srv, c, rt, g);
    if (s == NULL)
        return;
    delete_upstream_session(srv, s);
    end_get_stream(s);
    end_session_calls(s);
    tg_log(TG_LOG_DEBUG, "session deleted", "session=%s grant=%s", s->id_str, s->grant);
    tg_session_remove(srv->sessions, s);
    tg_http_respond(c, 200, NULL, NULL, "", 0);
}

/* ---- entry ----------------------------------------------------------------------- */

static void respond_json(struct tg_conn *c, int status, const char *json)
{
    tg_http_respond(c, status, NULL, "application/json", json, strlen(json));
}

static int readyz(struct tg_server *srv)
{
    for (size_t i = 0; i < srv->nupstreams; i++)
        if (tg_upstream_reachable(srv->upstreams[i]))
            return 1;
    return 0;
}

/* ---- channels: legacy HTTP+SSE and WebSocket clients ---------------------------------- */

/* The raw value of a query parameter (no percent-decoding: session ids and tokens are plain). */
static struct tg_slice query_param(struct tg_slice q, const char *name)
{
    size_t nl = strlen(name);
    size_t i = (q.len > 0 && q.ptr[0] == '?') ? 1 : 0;
    while (i < q.len) {
        size_t e = i;
        while (e < q.len && q.ptr[e] != '&')
            e++;
        if (e - i > nl && memcmp(q.ptr + i, name, nl) == 0 && q.ptr[i + nl] == '=')
            return tg_slice_of(q.ptr + i + nl + 1, e - i - nl - 1);
        i = e + 1;
    }
    return TG_SLICE_NULL;
}

static void channel_unref(struct tg_channel *ch)
{
    if (--ch->refcnt > 0)
        return;
    tg_list_unlink(&ch->link);
    if (ch->sess->channel == ch)
        ch->sess->channel = NULL;
    tg_session_unref(ch->sess);
    tg_ws_free(ch->ws);
    free(ch);
}

static struct tg_channel *channel_new(struct tg_server *srv, struct tg_session *s, enum channel_kind kind,
                                      struct tg_conn *c)
{
    struct tg_channel *ch = tg_xcalloc(1, sizeof(*ch));
    ch->srv = srv;
    ch->sess = tg_session_ref(s);
    ch->kind = kind;
    ch->conn = c;
    ch->refcnt = 1; /* the client connection's */
    ch->open = 1;
    ch->last_write_ms = uv_now(srv->loop);
    tg_list_insert_tail(&srv->channels, &ch->link);
    s->channel = ch;
    return ch;
}

/* The client went away: the session ends with it (upstream session too). */
static void channel_gone(struct tg_channel *ch)
{
    if (!ch->open)
        return;
    ch->open = 0;
    ch->conn = NULL;
    struct tg_session *s = ch->sess;
    struct tg_server *srv = ch->srv;
    /* Calls still waiting for a human are withdrawn: nobody is there for their answer. */
    for (struct tg_list *l = s->calls.next; l != &s->calls;) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        l = l->next;
        if (k->parked)
            approval_finish(k, 0, "client", "cancelled");
    }
    if (s->live) {
        delete_upstream_session(srv, s);
        end_get_stream(s);
        end_session_calls(s);
        tg_session_remove(srv->sessions, s);
    }
    channel_unref(ch);
}

static void on_channel_conn_abort(struct tg_conn *c, void *ex) { channel_gone(ex); }

/* The gateway ends a channel (shutdown, upstream gone): close the client's side, then the session. */
static void channel_end(struct tg_channel *ch, uint16_t ws_code, const char *why)
{
    if (!ch->open || ch->conn == NULL)
        return;
    if (ch->kind == CH_WS) {
        tg_ws_close(ch->ws, ws_code, why); /* the session ends when the close handshake does */
        return;
    }
    struct tg_conn *c = ch->conn;
    c->exchange = NULL; /* ending the stream must not look like the client leaving: we say it */
    c->on_abort = NULL;
    c->on_drain = NULL;
    ch->refcnt++;
    tg_http_stream_end(c);
    channel_gone(ch);
    channel_unref(ch);
}

static void on_channel_drain(struct tg_conn *c, void *ex)
{
    struct tg_channel *ch = ex;
    link_pause(ch->sess, 0);
    for (struct tg_list *l = ch->sess->calls.next; l != &ch->sess->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->up)
            tg_upreq_resume(k->up);
    }
}

/* The upstream's GET stream, so that a channel session hears what the server says on its own. */
static void channel_open_upstream_stream(struct tg_server *srv, struct tg_channel *ch)
{
    struct tg_session *s = ch->sess;
    const struct tg_upstream_conf *uc = tg_upstream_conf(srv->upstreams[s->upstream]);
    if (uc->init_local || uc->transport != TG_UP_STREAMABLE || s->get_stream != NULL || !ch->open)
        return;
    struct tg_call *k = call_new(srv, s, NULL, KIND_GET);
    k->channel = ch;
    ch->refcnt++;
    s->get_stream = k;
    call_send(k, "GET", NULL, 0, 1, 0);
}

/* One message (or array) from a channel client. Returns the HTTP status for a POST /messages. */
static int channel_message(struct tg_server *srv, struct tg_channel *ch, const char *body, size_t blen)
{
    struct tg_session *s = ch->sess;
    const struct tg_grant_conf *g = tg_conf_find_grant(srv->conf, s->grant);
    if (!s->live || g == NULL || (size_t)s->upstream >= srv->conf->nupstreams) {
        struct tg_buf e;
        tg_buf_init(&e);
        tg_rpc_error(&e, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        channel_send(ch, e.base, e.len);
        tg_buf_dispose(&e);
        return 404;
    }
    struct route rt = {s->upstream, &srv->conf->upstreams[s->upstream]};
    const struct tg_limits *lim = &srv->conf->limits;
    s->last_active_ms = now_ms(srv);
    size_t i = 0;
    while (i < blen && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n'))
        i++;
    struct tg_batch *b = tg_xcalloc(1, sizeof(*b));
    b->srv = srv;
    b->pending = 1;
    b->channel = ch;
    ch->refcnt++;
    tg_buf_init(&b->out);
    int status = 202;
    if (i < blen && body[i] == '[') {
        struct tg_json_doc doc;
        const char *why = NULL;
        if (tg_json_parse(body, blen, lim->json_depth, 1, &doc, &why, NULL) != 0) {
            char msg[160];
            snprintf(msg, sizeof(msg), "Parse error: %s", why);
            b->single = 1;
            batch_add_error(b, NULL, 0, TG_RPC_PARSE_ERROR, msg, NULL);
            status = 400;
        } else if (strcmp(s->proto, "2025-03-26") != 0 || cJSON_GetArraySize(doc.root) == 0 ||
                   cJSON_GetArraySize(doc.root) > lim->inflight_per_session) {
            b->single = 1;
            batch_add_error(b, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Invalid Request: batches are only accepted for protocol 2025-03-26, non-empty and "
                            "within limits.inflight_per_session",
                            NULL);
            status = 400;
        } else {
            struct tg_buf el;
            tg_buf_init(&el);
            for (cJSON *e = doc.root->child; e; e = e->next) {
                el.len = 0;
                tg_json_write(&el, e);
                struct tg_msg m;
                int code = tg_msg_decode(el.base, el.len, lim->json_depth, &m, &why);
                if (code != 0)
                    batch_add_error(b, m.id_raw, m.id_len, code, why, NULL);
                else if (m.kind == TG_MSG_REQUEST && strcmp(m.method, "initialize") == 0)
                    batch_add_error(b, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                                    "Invalid Request: initialize cannot be batched", NULL);
                else
                    dispatch_message(srv, NULL, b, &rt, g, s, &m);
                tg_msg_dispose(&m);
            }
            tg_buf_dispose(&el);
        }
        cJSON_Delete(doc.root);
        batch_done_one(b);
        return status;
    }
    b->single = 1;
    struct tg_msg m;
    const char *why = NULL;
    int code = tg_msg_decode(body, blen, lim->json_depth, &m, &why);
    if (code != 0) {
        char msg[160];
        snprintf(msg, sizeof(msg), "%s: %s", code == TG_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request", why);
        batch_add_error(b, m.id_raw, m.id_len, code, msg, NULL);
        status = 400;
    } else if (m.kind == TG_MSG_REQUEST && strcmp(m.method, "initialize") == 0) {
        if (s->initialized || s->init_pending) {
            batch_add_error(b, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                            "Invalid Request: this session is already initialized", NULL);
        } else if (rt.uc->init_local) {
            struct tg_buf out;
            tg_buf_init(&out);
            local_init_result(s, &m, rt.uc, &out);
            batch_add(b, out.base, out.len);
            tg_buf_dispose(&out);
        } else {
            s->init_pending = 1;
            dispatch_message(srv, NULL, b, &rt, g, s, &m);
        }
    } else {
        int initialized = m.kind == TG_MSG_NOTIFICATION && strcmp(m.method, "notifications/initialized") == 0;
        dispatch_message(srv, NULL, b, &rt, g, s, &m);
        if (initialized)
            channel_open_upstream_stream(srv, ch);
    }
    tg_msg_dispose(&m);
    batch_done_one(b);
    return status;
}

static struct tg_session *new_channel_session(struct tg_server *srv, struct tg_conn *c, struct route *rt,
                                              const struct tg_grant_conf *g)
{
    if (srv->draining) {
        respond_rpc(c, 503, NULL, NULL, 0, TG_RPC_UPSTREAM, "gateway is shutting down", NULL);
        return NULL;
    }
    size_t cap = (size_t)(g->max_sessions > 0 ? g->max_sessions : srv->conf->limits.sessions_per_grant);
    if (tg_session_count_for_grant(srv->sessions, g->name) >= cap) {
        srv->metrics.limit_sessions++;
        respond_rpc(c, 429, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Too many sessions for this grant (limits.sessions_per_grant)", NULL);
        return NULL;
    }
    struct tg_session *s = tg_session_create(srv->sessions, g->name, rt->upstream);
    s->srv = srv;
    s->last_active_ms = now_ms(srv);
    srv->metrics.sessions_created++;
    return s;
}

/* GET /NAME/sse: a legacy HTTP+SSE session (2024-11-05). */
static void open_sse_channel(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
{
    if (!accepts_sse(c))
        return;
    struct tg_session *s = new_channel_session(srv, c, rt, g);
    if (s == NULL)
        return;
    struct tg_channel *ch = channel_new(srv, s, CH_SSE, c);
    tg_http_stream_begin(c, 200, NULL, "text/event-stream");
    c->exchange = ch;
    c->on_abort = on_channel_conn_abort;
    c->on_drain = on_channel_drain;
    struct tg_buf b;
    tg_buf_init(&b);
    /* The endpoint is relative to this stream's URL, as the 2024-11-05 transport expects. */
    struct tg_slice url = tg_http_req_url(&c->req);
    size_t q = 0;
    while (q < url.len && url.ptr[q] != '?')
        q++;
    size_t base = q >= 4 ? q - 4 : 0; /* strip "/sse" */
    tg_buf_appends(&b, "event: endpoint\ndata: ");
    tg_buf_append(&b, url.ptr, base);
    tg_buf_appendf(&b, "/messages?sessionId=%s\n\n", s->id_str);
    tg_http_stream_write(c, b.base, b.len);
    tg_buf_dispose(&b);
    tg_log(TG_LOG_DEBUG, "legacy SSE session opened", "session=%s grant=%s", s->id_str, g->name);
}

/* POST /NAME/messages?sessionId=ID */
static void handle_messages(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g,
                            struct tg_slice query)
{
    struct tg_slice ct = tg_http_req_header(&c->req, "content-type");
    if (ct.ptr == NULL || !tg_slice_has_token(ct, "application/json") ||
        tg_http_req_header_count(&c->req, "content-type") != 1) {
        respond_rpc(c, 415, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Unsupported Media Type: Content-Type must be application/json", NULL);
        return;
    }
    struct tg_slice sid = query_param(query, "sessionId");
    struct tg_session *s = sid.ptr ? tg_session_find(srv->sessions, sid) : NULL;
    if (sid.ptr == NULL) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: sessionId is required", NULL);
        return;
    }
    struct tg_channel *ch = s ? s->channel : NULL;
    if (s == NULL || ch == NULL || ch->kind != CH_SSE || !ch->open || strcmp(s->grant, g->name) != 0 ||
        s->upstream != rt->upstream) {
        respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        return;
    }
    ch->refcnt++;
    int status = channel_message(srv, ch, c->req.body.base ? c->req.body.base : "", c->req.body.len);
    channel_unref(ch);
    if (status == 202)
        tg_http_respond(c, 202, NULL, "text/plain", "Accepted", 8);
    else
        respond_rpc(c, status, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    status == 404 ? "Session not found" : "Bad Request: the message was refused (see the stream)",
                    NULL);
}

static void on_ws_message(void *ud, const char *p, size_t n)
{
    struct tg_channel *ch = ud;
    ch->refcnt++;
    channel_message(ch->srv, ch, p, n);
    channel_unref(ch);
}

static void on_ws_closed(void *ud) { channel_gone(ud); }

/* GET /NAME/ws: WebSocket, subprotocol "mcp", one session per connection. */
static void open_ws_channel(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
{
    struct tg_http_req *req = &c->req;
    struct tg_slice up = tg_http_req_header(req, "upgrade");
    struct tg_slice conn = tg_http_req_header(req, "connection");
    struct tg_slice ver = tg_http_req_header(req, "sec-websocket-version");
    struct tg_slice key = tg_http_req_header(req, "sec-websocket-key");
    struct tg_slice proto = tg_http_req_header(req, "sec-websocket-protocol");
    char accept[32];
    if (up.ptr == NULL || !tg_slice_eq_nocase(up, "websocket") || !tg_slice_has_token(conn, "upgrade") ||
        !c->parser.upgrade) {
        respond_rpc(c, 426, "Upgrade: websocket\r\n", NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Upgrade Required: /ws is a WebSocket endpoint", NULL);
        return;
    }
    if (!tg_slice_eq(ver, TG_SLICE("13"))) {
        respond_rpc(c, 400, "Sec-WebSocket-Version: 13\r\n", NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Bad Request: Sec-WebSocket-Version 13 is required", NULL);
        return;
    }
    if (tg_ws_accept_key(key, accept) != 0) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: invalid Sec-WebSocket-Key", NULL);
        return;
    }
    if (proto.ptr == NULL || !tg_slice_has_token(proto, "mcp")) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                    "Bad Request: the WebSocket subprotocol \"mcp\" is required", NULL);
        return;
    }
    struct tg_session *s = new_channel_session(srv, c, rt, g);
    if (s == NULL)
        return;
    struct tg_channel *ch = channel_new(srv, s, CH_WS, c);
    char hdr[200];
    snprintf(hdr, sizeof(hdr),
             "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\nSec-WebSocket-Protocol: mcp\r\n",
             accept);
    tg_http_upgrade(c, hdr);
    c->exchange = ch;
    c->on_drain = on_channel_drain;
    ch->ws = tg_ws_start(c, (size_t)srv->conf->limits.body_bytes, 30000, on_ws_message, on_ws_closed, ch);
    tg_log(TG_LOG_DEBUG, "WebSocket session opened", "session=%s grant=%s", s->id_str, g->name);
}

/* Keepalive comments on idle legacy SSE streams, so proxies and clients keep them open. */
static void channels_keepalive(struct tg_server *srv)
{
    uint64_t now = uv_now(srv->loop);
    for (struct tg_list *l = srv->channels.next; l != &srv->channels; l = l->next) {
        struct tg_channel *ch = tg_container_of(l, struct tg_channel, link);
        if (ch->kind == CH_SSE && ch->open && ch->conn &&
            now - ch->last_write_ms >= (uint64_t)srv->conf->limits.sse_keepalive_ms) {
            tg_http_stream_write(ch->conn, ": keepalive\n\n", 13);
            ch->last_write_ms = now;
        }
    }
}

/* The base URL clients use: public_url, or the scheme and Host of this request when the Host is a plain
 * host[:port] (anything else falls back to the listener's address, so a peer cannot inject text). */
static void base_url(struct tg_server *srv, struct tg_conn *c, struct tg_buf *out)
{
    if (srv->conf->public_url) {
        size_t n = strlen(srv->conf->public_url);
        while (n > 0 && srv->conf->public_url[n - 1] == '/')
            n--;
        tg_buf_append(out, srv->conf->public_url, n);
        return;
    }
    tg_buf_appends(out, c->listener->tls ? "https://" : "http://");
    struct tg_slice host = tg_http_req_header(&c->req, "host");
    int ok = host.ptr != NULL && host.len > 0 && host.len < 256;
    for (size_t i = 0; ok && i < host.len; i++) {
        char ch = host.ptr[i];
        ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
             ch == '-' || ch == ':' || ch == '[' || ch == ']';
    }
    if (ok)
        tg_buf_append(out, host.ptr, host.len);
    else
        tg_buf_appendf(out, "%s:%d", c->listener->lc ? c->listener->lc->address : "127.0.0.1", c->listener->port);
}

/* RFC 9728 protected-resource metadata for /NAME/mcp (and the default /mcp). */
static void protected_resource_metadata(struct tg_server *srv, struct tg_conn *c, struct tg_slice rest)
{
    const struct tg_upstream_conf *uc = NULL;
    if (srv->conf->njwt == 0) {
        respond_json(c, 404, "{\"error\":\"no JWT issuers configured\"}");
        return;
    }
    /* RFC 9728 §3.1: the metadata of resource BASE/P lives at BASE/.well-known/oauth-protected-resource/P,
     * and its "resource" is BASE/P exactly. */
    if (tg_slice_eq(rest, TG_SLICE("/mcp")) && srv->conf->default_upstream >= 0)
        uc = &srv->conf->upstreams[srv->conf->default_upstream];
    else if (rest.len > 5 && rest.ptr[0] == '/' && memcmp(rest.ptr + rest.len - 4, "/mcp", 4) == 0)
        uc = tg_conf_find_upstream(srv->conf, tg_slice_of(rest.ptr + 1, rest.len - 5), NULL);
    if (uc == NULL) {
        respond_json(c, 404, "{\"error\":\"no MCP endpoint at this path\"}");
        return;
    }
    struct tg_buf b, url;
    tg_buf_init(&b);
    tg_buf_init(&url);
    base_url(srv, c, &url);
    tg_buf_append(&url, rest.ptr, rest.len);
    tg_buf_appends(&b, "{\"resource\":");
    tg_json_write_string(&b, url.base, url.len);
    tg_buf_appends(&b, ",\"authorization_servers\":[");
    for (size_t i = 0; i < srv->conf->njwt; i++) {
        if (i)
            tg_buf_append(&b, ",", 1);
        tg_json_write_string(&b, srv->conf->jwt[i].issuer, strlen(srv->conf->jwt[i].issuer));
    }
    tg_buf_appends(&b, "],\"bearer_methods_supported\":[\"header\"],\"resource_name\":");
    char name[96];
    snprintf(name, sizeof(name), "tollgate/%s", uc->name);
    tg_json_write_string(&b, name, strlen(name));
    tg_buf_appends(&b, "}");
    tg_http_respond(c, 200, "Cache-Control: max-age=300\r\n", "application/json", b.base, b.len);
    tg_buf_dispose(&b);
    tg_buf_dispose(&url);
}

void tg_router_handle(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_http_req *req = &c->req;
    struct tg_slice url = tg_http_req_url(req);
    size_t q = 0;
    while (q < url.len && url.ptr[q] != '?')
        q++;
    struct tg_slice path = tg_slice_of(url.ptr, q);
    if (tg_slice_eq(path, TG_SLICE("/healthz"))) {
        respond_json(c, 200, "{\"status\":\"ok\"}");
        return;
    }
    if (tg_slice_eq(path, TG_SLICE("/readyz"))) {
        if (readyz(srv) && !srv->draining)
            respond_json(c, 200, "{\"status\":\"ready\"}");
        else
            respond_json(c, 503, "{\"status\":\"not ready\"}");
        return;
    }
    if (tg_slice_starts_with(path, "/.well-known/oauth-protected-resource") &&
        (path.len == 37 || path.ptr[37] == '/')) {
        protected_resource_metadata(srv, c, tg_slice_of(path.ptr + 37, path.len - 37));
        return;
    }
    struct route rt = {-1, NULL};
    /* /ENDPOINT for the default upstream, or /NAME/ENDPOINT; ENDPOINT is mcp, sse, messages or ws. */
    static const char *const endpoints[] = {"mcp", "sse", "messages", "ws", NULL};
    int endpoint = -1;
    for (int e = 0; endpoints[e] && endpoint < 0; e++) {
        size_t el = strlen(endpoints[e]);
        if (path.len == el + 1 && path.ptr[0] == '/' && memcmp(path.ptr + 1, endpoints[e], el) == 0) {
            endpoint = e;
            if (srv->conf->default_upstream >= 0) {
                rt.upstream = srv->conf->default_upstream;
                rt.uc = &srv->conf->upstreams[rt.upstream];
            }
        } else if (path.len >= el + 3 && path.ptr[0] == '/' && path.ptr[path.len - el - 1] == '/' &&
                   memcmp(path.ptr + path.len - el, endpoints[e], el) == 0) {
            endpoint = e;
            rt.uc = tg_conf_find_upstream(srv->conf, tg_slice_of(path.ptr + 1, path.len - el - 2), &rt.upstream);
        }
    }
    if (rt.uc == NULL) {
        respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Not Found: no MCP endpoint at this path", NULL);
        return;
    }
    if (tg_http_req_header_count(req, "origin") > 1 ||
        !origin_allowed(c->listener->lc, tg_http_req_header(req, "origin"))) {
        char esc[128];
        tg_log(TG_LOG_INFO, "foreign origin refused", "conn=%llu peer=%s origin=%s", (unsigned long long)c->id,
               c->peer, tg_log_esc(esc, sizeof(esc), tg_http_req_header(req, "origin")));
        respond_rpc(c, 403, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Forbidden: Origin not allowed", NULL);
        return;
    }
    if (tg_http_req_header_count(req, "authorization") > 1) {
        respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: more than one Authorization header",
                    NULL);
        return;
    }
    const struct tg_grant_conf *g = NULL;
    const char *why = NULL;
    struct tg_slice authz = tg_http_req_header(req, "authorization");
    char qauth[4200];
    if (authz.ptr == NULL && endpoint == 3) {
        /* Browsers cannot set headers on a WebSocket: ?access_token=TOKEN stands in for
         * "Authorization: Bearer TOKEN" on /ws only. */
        struct tg_slice tok = query_param(tg_slice_of(url.ptr + q, url.len - q), "access_token");
        if (tok.ptr != NULL && tok.len > 0 && tok.len < sizeof(qauth) - 8) {
            int n = snprintf(qauth, sizeof(qauth), "Bearer %.*s", (int)tok.len, tok.ptr);
            authz = tg_slice_of(qauth, (size_t)n);
        }
    }
    enum tg_auth_result ar = tg_auth_grant(srv->conf, authz, wall_ms() / 1000, &g, &why);
    if (ar != TG_AUTH_OK) {
        struct tg_buf hdr;
        tg_buf_init(&hdr);
        tg_buf_appends(&hdr, "WWW-Authenticate: Bearer realm=\"tollgate\"");
        if (srv->conf->njwt > 0) {
            tg_buf_appends(&hdr, ", resource_metadata=\"");
            base_url(srv, c, &hdr);
            tg_buf_appends(&hdr, "/.well-known/oauth-protected-resource");
            tg_buf_append(&hdr, path.ptr, path.len);
            tg_buf_appends(&hdr, "\"");
        }
        if (ar == TG_AUTH_INVALID)
            tg_buf_appendf(&hdr, ", error=\"invalid_token\", error_description=\"%s\"", why ? why : "invalid token");
        tg_buf_appends(&hdr, "\r\n");
        tg_buf_append(&hdr, "", 1);
        tg_log(TG_LOG_INFO, "unauthorized", "conn=%llu peer=%s reason=\"%s\"", (unsigned long long)c->id, c->peer,
               why ? why : (ar == TG_AUTH_MISSING ? "missing" : "invalid"));
        respond_rpc(c, 401, hdr.base, NULL, 0, TG_RPC_INVALID_REQUEST, "Unauthorized: a valid bearer token is required",
                    NULL);
        tg_buf_dispose(&hdr);
        return;
    }
    if (endpoint == 1 || endpoint == 3) {
        if (req->method != HTTP_GET) {
            tg_http_respond(c, 405, "Allow: GET\r\n", NULL, "", 0);
            return;
        }
        if (endpoint == 1)
            open_sse_channel(srv, c, &rt, g);
        else
            open_ws_channel(srv, c, &rt, g);
        return;
    }
    if (endpoint == 2) {
        if (req->method != HTTP_POST) {
            tg_http_respond(c, 405, "Allow: POST\r\n", NULL, "", 0);
            return;
        }
        handle_messages(srv, c, &rt, g, tg_slice_of(url.ptr + q, url.len - q));
        return;
    }
    switch (req->method) {
    case HTTP_POST: handle_post(srv, c, &rt, g); return;
    case HTTP_GET: handle_get(srv, c, &rt, g); return;
    case HTTP_DELETE: handle_delete(srv, c, &rt, g); return;
    default:
        tg_http_respond(c, 405, "Allow: GET, POST, DELETE\r\n", "application/json",
                        "{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Method Not Allowed\"}}",
                        strlen("{\"jsonrpc\":\"2.0\",\"id\":null,\"error\":{\"code\":-32600,\"message\":\"Method Not Allowed\"}}"));
        return;
    }
}

static void approval_finish(struct tg_call *k, int approve, const char *by, const char *why);

static int admin_authorized(struct tg_server *srv, struct tg_conn *c)
{
    if (!srv->conf->admin.has_token)
        return 0;
    struct tg_slice tok;
    uint8_t h[32];
    if (tg_auth_bearer(tg_http_req_header(&c->req, "authorization"), &tok) != 0)
        return 0;
    tg_auth_sha256(tok.ptr, tok.len, h);
    return tg_auth_ct_equal(h, srv->conf->admin.token_sha256, 32);
}

static void admin_list_approvals(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"approvals\":[");
    uint64_t now = now_ms(srv);
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        if (l != srv->approvals.next)
            tg_buf_append(&b, ",", 1);
        tg_buf_appendf(&b, "{\"id\":\"%s\",\"grant\":", k->approval_id);
        tg_json_write_string(&b, k->grant, strlen(k->grant));
        tg_buf_appendf(&b, ",\"session\":\"%s\",\"upstream\":", k->sess->id_str);
        tg_json_write_string(&b, up_name(k), strlen(up_name(k)));
        tg_buf_appends(&b, ",\"tool\":");
        tg_json_write_string(&b, k->tool, strlen(k->tool));
        tg_buf_appendf(&b, ",\"args_sha256\":\"%s\"", k->args_sha256);
        if (k->args_json) {
            tg_buf_appends(&b, ",\"args\":");
            tg_buf_appends(&b, k->args_json);
        }
        tg_buf_appendf(&b, ",\"parked_at_ms\":%llu,\"expires_in_ms\":%llu}", (unsigned long long)k->parked_at_wall,
                       (unsigned long long)(k->approval_deadline > now ? k->approval_deadline - now : 0));
    }
    tg_buf_appends(&b, "]}");
    tg_http_respond(c, 200, NULL, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

static void admin_decide(struct tg_server *srv, struct tg_conn *c, struct tg_slice rest)
{
    /* rest = "ID/approve" or "ID/deny" */
    const char *slash = memchr(rest.ptr, '/', rest.len);
    if (slash == NULL) {
        respond_json(c, 404, "{\"error\":\"use POST /admin/approvals/ID/approve or /deny\"}");
        return;
    }
    struct tg_slice id = tg_slice_of(rest.ptr, (size_t)(slash - rest.ptr));
    struct tg_slice verb = tg_slice_of(slash + 1, rest.len - id.len - 1);
    int approve = tg_slice_eq(verb, TG_SLICE("approve"));
    if (!approve && !tg_slice_eq(verb, TG_SLICE("deny"))) {
        respond_json(c, 404, "{\"error\":\"use POST /admin/approvals/ID/approve or /deny\"}");
        return;
    }
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        if (!tg_slice_eq(id, tg_slice_cstr(k->approval_id)))
            continue;
        /* Who decided: the approver's name if the caller gives one, for the audit log. */
        char by[96] = "admin";
        struct tg_slice who = tg_http_req_header(&c->req, "x-tollgate-approver");
        if (who.ptr != NULL && who.len > 0) {
            /* Recorded as given (JSON-escaped where it is written), printable ASCII only, bounded. */
            size_t o = strlen(by);
            by[o++] = ':';
            for (size_t i = 0; i < who.len && o < sizeof(by) - 1; i++) {
                unsigned char ch = (unsigned char)who.ptr[i];
                by[o++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
            }
            by[o] = '\0';
        }
        char idcopy[33];
        snprintf(idcopy, sizeof(idcopy), "%s", k->approval_id);
        approval_finish(k, approve, by, NULL);
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_appendf(&b, "{\"id\":\"%s\",\"decision\":\"%s\",\"by\":", idcopy, approve ? "approved" : "denied");
        tg_json_write_string(&b, by, strlen(by));
        tg_buf_appends(&b, "}");
        tg_http_respond(c, 200, NULL, "application/json", b.base, b.len);
        tg_buf_dispose(&b);
        return;
    }
    respond_json(c, 404, "{\"error\":\"no pending approval with this id (decided, expired or unknown)\"}");
}

void tg_router_admin(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_slice url = tg_http_req_url(&c->req);
    size_t q = 0;
    while (q < url.len && url.ptr[q] != '?')
        q++;
    struct tg_slice path = tg_slice_of(url.ptr, q);
    if (tg_slice_eq(path, TG_SLICE("/healthz"))) {
        respond_json(c, 200, "{\"status\":\"ok\"}");
        return;
    }
    if (tg_slice_eq(path, TG_SLICE("/readyz"))) {
        respond_json(c, readyz(srv) && !srv->draining ? 200 : 503,
                     readyz(srv) && !srv->draining ? "{\"status\":\"ready\"}" : "{\"status\":\"not ready\"}");
        return;
    }
    if (tg_slice_eq(path, TG_SLICE("/metrics"))) {
        if (srv->conf->admin.has_token && !admin_authorized(srv, c)) {
            tg_http_respond(c, 401, "WWW-Authenticate: Bearer realm=\"tollgate-admin\"\r\n", "text/plain",
                            "unauthorized\n", 13);
            return;
        }
        struct tg_buf b;
        tg_buf_init(&b);
        tg_metrics_render(srv, &b);
        tg_http_respond(c, 200, NULL, "text/plain; version=0.0.4", b.base, b.len);
        tg_buf_dispose(&b);
        return;
    }
    if (tg_slice_starts_with(path, "/admin/")) {
        if (!srv->conf->admin.has_token) {
            respond_json(c, 403, "{\"error\":\"the admin API needs admin.token_sha256 in the configuration\"}");
            return;
        }
        if (!admin_authorized(srv, c)) {
            tg_http_respond(c, 401, "WWW-Authenticate: Bearer realm=\"tollgate-admin\"\r\n", "application/json",
                            "{\"error\":\"unauthorized\"}", 24);
            return;
        }
        if (tg_slice_eq(path, TG_SLICE("/admin/approvals")) && c->req.method == HTTP_GET) {
            admin_list_approvals(srv, c);
            return;
        }
        if (tg_slice_starts_with(path, "/admin/approvals/") && c->req.method == HTTP_POST) {
            admin_decide(srv, c, tg_slice_of(path.ptr + 17, path.len - 17));
            return;
        }
        if (tg_slice_eq(path, TG_SLICE("/admin/reload")) && c->req.method == HTTP_POST) {
            struct tg_buf err, b;
            tg_buf_init(&err);
            tg_buf_init(&b);
            if (tg_server_reload(srv, &err) == 0) {
                respond_json(c, 200, "{\"status\":\"reloaded\"}");
            } else {
                tg_buf_appends(&b, "{\"status\":\"failed\",\"errors\":");
                tg_json_write_string(&b, err.base ? err.base : "", err.len);
                tg_buf_appends(&b, "}");
                tg_http_respond(c, 400, NULL, "application/json", b.base, b.len);
            }
            tg_buf_dispose(&err);
            tg_buf_dispose(&b);
            return;
        }
        respond_json(c, 404, "{\"error\":\"unknown admin endpoint\"}");
        return;
    }
    tg_http_respond(c, 404, NULL, "text/plain", "not found\n", 10);
}

static int sweep_one(struct tg_session *s, void *arg)
{
    struct tg_server *srv = arg;
    uint64_t idle = now_ms(srv) - s->last_active_ms;
    if (s->inflight == 0 && s->get_stream == NULL && s->channel == NULL &&
        idle > (uint64_t)srv->conf->limits.session_idle_timeout_ms) {
        srv->metrics.sessions_expired++;
        tg_log(TG_LOG_DEBUG, "session expired", "session=%s grant=%s", s->id_str, s->grant);
        return 1;
    }
    return 0;
}

static void approval_finish(struct tg_call *k, int approve, const char *by, const char *why)
{
    struct tg_server *srv = k->srv;
    tg_list_unlink(&k->alink);
    srv->napprovals--;
    k->parked = 0;
    if (approve) {
        srv->metrics.approvals_approved++;
        audit_call(k, "approved", -1, NULL, by);
        char esc[200]; /* the approver's name comes from a header: escaped, it cannot forge log fields */
        tg_log(TG_LOG_INFO, "approval granted", "approval_id=%s by=%s", k->approval_id,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by)));
        struct tg_buf body = k->held;
        tg_buf_init(&k->held);
        call_send(k, "POST", body.base, body.len, 0, (uint64_t)tg_upstream_conf(k->uprt)->call_timeout_ms);
        tg_buf_dispose(&body);
        return;
    }
    int cancelled = why != NULL && strcmp(why, "cancelled") == 0;
    if (why == NULL || cancelled)
        srv->metrics.approvals_rejected++;
    else
        srv->metrics.approvals_expired++;
    audit_call(k, cancelled ? "cancelled" : why ? "expired" : "rejected", -1, NULL, by);
    char esc[200];
    tg_log(TG_LOG_INFO, why ? "approval timed out" : "approval denied", "approval_id=%s by=%s", k->approval_id,
           tg_log_esc(esc, sizeof(esc), tg_slice_cstr(by ? by : "-")));
    if (k->conn || k->batch) {
        struct tg_decision d = *k->dec;
        if (cancelled)
            snprintf(d.message, sizeof(d.message), "%s was cancelled by the client before approval; the call was not made", k->tool);
        else if (why)
            snprintf(d.message, sizeof(d.message), "%s was not approved in time; the call was not made", k->tool);
        else
            snprintf(d.message, sizeof(d.message), "%s was refused by a human approver; the call was not made",
                     k->tool);
        d.verdict = TG_VERDICT_DENY;
        respond_decision(k->conn, k->batch, k->client_id, k->client_id_len, k->tool, &d, k->approval_id);
    }
    call_free(k);
}

void tg_router_tick(struct tg_server *srv, int sessions_too)
{
    uint64_t now = now_ms(srv);
    while (!tg_list_empty(&srv->approvals)) {
        struct tg_call *k = tg_container_of(srv->approvals.next, struct tg_call, alink);
        /* Oldest first, but timeouts differ per tool: scan the whole list when the head is not due. */
        if (k->approval_deadline > now)
            break;
        approval_finish(k, 0, NULL, "timeout");
    }
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals;) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        l = l->next;
        if (k->approval_deadline <= now)
            approval_finish(k, 0, NULL, "timeout");
    }
    tg_counters_sweep(srv->counters, wall_ms(), 65536);
    channels_keepalive(srv);
    streams_tick(srv);
    struct tg_list *al = srv->awaiting.next;
    while (al != &srv->awaiting) {
        struct tg_call *k = tg_container_of(al, struct tg_call, alink);
        al = al->next;
        if (k->deadline <= now) {
            char why[160];
            snprintf(why, sizeof(why), "upstream %s timed out", up_name(k));
            stream_fail(k, why, 0); /* it may have run */
        }
    }
    if (sessions_too)
        tg_session_sweep(srv->sessions, sweep_one, srv);
}

void tg_router_drop_session(struct tg_server *srv, struct tg_session *s)
{
    /* Its upstream was removed by a reload: calls waiting on its child or event stream cannot
     * be answered any more (calls on a Streamable HTTP pool still finish there). */
    char why[160];
    snprintf(why, sizeof(why), "upstream %s was removed by a configuration reload",
             (size_t)s->upstream < srv->nupstreams ? tg_upstream_conf(srv->upstreams[s->upstream])->name : "-");
    tg_session_ref(s);
    for (struct tg_list *l = s->calls.next; l != &s->calls;) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        l = l->next;
        if (k->awaiting)
            stream_fail(k, why, 0);
    }
    if (s->channel != NULL)
        channel_end(s->channel, 1012, "upstream removed");
    end_get_stream(s);
    if (s->live)
        tg_session_remove(srv->sessions, s);
    tg_session_unref(s);
}

void tg_router_run_pending(struct tg_server *srv)
{
    while (!tg_list_empty(&srv->dead_calls)) {
        struct tg_call *k = tg_container_of(srv->dead_calls.next, struct tg_call, dlink);
        tg_list_unlink(&k->dlink);
        call_release(k);
    }
}

static int end_stream_one(struct tg_session *s, void *arg)
{
    (void)arg;
    end_get_stream(s);
    return 0;
}

void tg_router_end_streams(struct tg_server *srv)
{
    tg_session_sweep(srv->sessions, end_stream_one, srv);
    /* Channel clients are told the gateway is going away. */
    struct tg_list *l = srv->channels.next;
    while (l != &srv->channels) {
        struct tg_channel *ch = tg_container_of(l, struct tg_channel, link);
        l = l->next;
        if (!ch->open || ch->conn == NULL)
            continue;
        channel_end(ch, 1001, "gateway shutting down");
    }
}

static int count_inflight(struct tg_session *s, void *arg)
{
    *(size_t *)arg += s->inflight;
    return 0;
}

size_t tg_router_inflight(struct tg_server *srv)
{
    size_t n = 0;
    tg_session_sweep(srv->sessions, count_inflight, &n);
    return n;
}
