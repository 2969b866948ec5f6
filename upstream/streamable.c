/* Streamable HTTP upstreams: each message of a call is a POST on the pool (upstream/pool/pool.h),
 * answered with JSON or with an SSE stream; a session's stream of server messages is a
 * dedicated GET. This file is the MCP client: the pool knows nothing of MCP. What it learns it
 * reports to the call through the callbacks the call gave with the message (upstream/upstream.h). */
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "core/base/slab.h"
#include "core/wire/sse.h"
#include "upstream/upstream.h"
#include "upstream/pool/pool.h"

/* What a request is relaying, decided when the upstream's head arrives. */
enum mode {
    MODE_WAIT,     /* no upstream head yet */
    MODE_JSON,     /* application/json body being collected */
    MODE_SSE,      /* the answer streams to the client */
    MODE_ACCEPTED, /* 202 for a notification or response */
    MODE_GONE,     /* upstream says the session does not exist */
    MODE_ERROR,    /* any other status */
};

struct resume_wait;

/* One call's upstream half. Owner: the call's slot (*slot) from send until the kind reports
 * done (it clears the slot first) or the call cancels it; a cancel while the SSE parser runs
 * only marks it dead, and on_up_data frees it once the parser has returned. */
struct http_call {
    const struct tg_upstream_events *ev;
    void *call;
    void **slot;
    struct tg_server *srv;
    struct tg_session *sess;  /* the call holds it */
    struct tg_upstream *uprt; /* the call holds it */
    enum call_kind kind;
    unsigned char is_init, modern, in_feed, dead, relayed;
    enum mode mode;
    int got_response;         /* 1: the answer was relayed, 2: it was an error object */
    struct tg_upreq *up;
    struct tg_buf body;
    int body_doc_ok;
    size_t gid_len;
    char gid[24];
    /* SEP-1699: the upstream ended the answer stream early with an event id and a retry; the
     * call waits retry ms (resume), then GETs the stream again with Last-Event-ID. */
    struct resume_wait *resume;
    int resumes;       /* reconnects in a row without an event between them */
    int resumes_total; /* reconnects of this call */
    uint64_t first_sent_ns; /* the first upstream request: latency covers the whole call */
    int resuming;      /* the upstream request now is such a GET */
    int resume_failed; /* that GET was refused: what it says is not relayed */
    /* Last, and not cleared at send: set up when used (sse in MODE_SSE only, body_doc when
     * body_doc_ok), so that a call answered with JSON does not pay for zeroing them. */
    struct tg_sse_parser sse;
    struct tg_json_doc body_doc; /* MODE_JSON: the answer's spans, parsed once */
};

/* One call's state at a time per call in flight, reused: it is made and freed once per call. */
static struct tg_recycler http_calls = TG_RECYCLER_INIT(sizeof(struct http_call), 64);

/* The timer of a call waiting to reconnect. Owner: the call until it is cancelled; freed in
 * its close callback. */
struct resume_wait {
    uv_timer_t timer;
    struct http_call *k; /* NULL once cancelled */
};

static const struct tg_upreq_cbs call_cbs;

static const char *up_name(const struct http_call *k) { return tg_upstream_conf(k->uprt)->name; }

static void on_resume_closed(uv_handle_t *h) { free(h->data); }

static void resume_cancel(struct http_call *k)
{
    struct resume_wait *w = k->resume;
    if (w == NULL)
        return;
    k->resume = NULL;
    w->k = NULL;
    uv_close((uv_handle_t *)&w->timer, on_resume_closed);
}

static void http_call_free(struct http_call *k)
{
    tg_buf_dispose(&k->body);
    if (k->mode == MODE_SSE)
        tg_sse_dispose(&k->sse);
    tg_recycle_free(&http_calls, k);
}

/* The kind is done with the call: out of its slot, so that the call's cancel finds nothing. */
static void detach(struct http_call *k)
{
    if (k->slot != NULL)
        *k->slot = NULL;
    k->slot = NULL;
}

/* Report done (the call ends) and free k. */
static void finish(struct http_call *k, enum tg_outcome o, const char *why, double latency)
{
    detach(k);
    k->ev->done(k->call, o, why, latency);
    http_call_free(k);
}

static void on_noop_head(struct tg_upreq *r, int status, void *ud) { (void)r, (void)status, (void)ud; }
static void on_noop_data(struct tg_upreq *r, const char *p, size_t n, void *ud) { (void)r, (void)p, (void)n, (void)ud; }
static void on_noop_done(struct tg_upreq *r, int err, void *ud) { (void)r, (void)err, (void)ud; }
static const struct tg_upreq_cbs noop_cbs = {on_noop_head, on_noop_data, on_noop_done};

/* auth: the credential lines (the message's own, or for a request of the session's, the last its
 * calls carried: s->up_auth). */
static void session_headers(struct tg_buf *h, struct tg_session *s, int with_session, const char *auth)
{
    tg_buf_appends(h, "Accept: application/json, text/event-stream\r\n");
    if (auth != NULL)
        tg_buf_appends(h, auth);
    if (with_session && s->up_session) {
        tg_buf_append(h, "Mcp-Session-Id: ", 16);
        tg_buf_appends(h, s->up_session);
        tg_buf_append(h, "\r\n", 2);
    }
    if (s->proto[0]) {
        tg_buf_append(h, "MCP-Protocol-Version: ", 22);
        tg_buf_appends(h, s->proto);
        tg_buf_append(h, "\r\n", 2);
    }
}

/* ---- the answer -------------------------------------------------------------------------- */

/* Stops the parser once the call is closed (its owner may free the parser then). */
static int on_sse_event(void *ud, const struct tg_sse_event *ev)
{
    struct http_call *k = ud;
    if (k->dead)
        return 1;
    if (ev->event.len != 0 && !tg_slice_eq(ev->event, TG_SLICE("message")))
        return 0; /* only JSON-RPC messages are relayed */
    if (ev->data.len == 0)
        return 0; /* priming events carry no message */
    k->resumes = 0;
    int r = k->ev->message(k->call, ev->data.ptr, ev->data.len);
    if (r != 0)
        k->relayed = 1;
    if (r >= TG_UPMSG_ANSWER)
        k->got_response = r - 1;
    return k->dead;
}

static void on_up_head(struct tg_upreq *r, int status, void *ud)
{
    struct http_call *k = ud;
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
        /* It goes into every later request's Mcp-Session-Id: visible ASCII only, bounded. */
        if (sid.len > 0 && k->sess->up_session == NULL && sid.len <= 256 && tg_header_value_safe(sid.ptr, sid.len))
            k->sess->up_session = tg_slice_dup(sid);
        else if (sid.len > 0 && k->sess->up_session == NULL)
            tg_log(TG_LOG_WARN, "upstream session id refused (not visible ASCII, or over 256 bytes)", "upstream=%s",
                   up_name(k));
    }
    if (status == 200 && tg_slice_has_token(ct, "text/event-stream") && k->kind != KIND_FORWARD) {
        k->mode = MODE_SSE;
        tg_sse_init(&k->sse, (size_t)k->srv->conf->limits.response_bytes);
        k->ev->stream(k->call);
        return;
    }
    if (status >= 200 && status < 300 && k->kind == KIND_FORWARD)
        k->mode = MODE_ACCEPTED;
    else if (status == 200 && k->kind == KIND_REQUEST)
        k->mode = MODE_JSON;
    else if (status == 404 && k->sess->up_session != NULL && !k->is_init)
        k->mode = MODE_GONE;
    else
        k->mode = MODE_ERROR;
}

static void on_up_done(struct tg_upreq *r, int err, void *ud);

/* The upstream sent more than limits.response_bytes: the call is cut. The tool may have run. */
static void too_large(struct http_call *k, const char *what)
{
    tg_log(TG_LOG_WARN, what, "upstream=%s limit=%d", up_name(k), k->srv->conf->limits.response_bytes);
    double lat = tg_upreq_elapsed_ms(k->up);
    tg_upreq_cancel(k->up);
    k->up = NULL;
    /* The client hears why, on its JSON answer or on the stream it was given (unless the
     * answer went through before the cut). */
    int tell = k->mode == MODE_JSON || (k->mode == MODE_SSE && !k->got_response && k->kind == KIND_REQUEST);
    finish(k, TG_OUT_GARBLED, tell ? "upstream response exceeds limits.response_bytes" : NULL, lat);
}

static void on_up_data(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct http_call *k = ud;
    switch (k->mode) {
    case MODE_SSE: {
        if (k->resume_failed)
            return;
        k->relayed = 0;
        k->in_feed = 1;
        int e = tg_sse_feed(&k->sse, p, n, on_sse_event, k);
        if (k->relayed && !k->dead)
            k->ev->backpressure(k->call); /* once for all the messages these bytes held */
        k->in_feed = 0;
        if (k->dead) {
            http_call_free(k); /* cancelled while its parser ran */
            return;
        }
        if (e == 0 && k->resuming && k->got_response && k->up == r) {
            /* A resumed stream is the session's stream upstream and may stay open after the
             * answer: the call is over with the answer, not when the upstream ends it. */
            on_up_done(r, 0, k);
            tg_upreq_cancel(r);
            return;
        }
        if (e != 0)
            too_large(k, "upstream SSE event too large; stream cut");
        return;
    }
    case MODE_JSON:
        if (k->ev->behind(k->call))
            tg_upreq_pause(k->up); /* the sink's drain resumes every call of the session */
        if (tg_buf_try_append(&k->body, p, n, (size_t)k->srv->conf->limits.response_bytes) != 0)
            too_large(k, "upstream response too large");
        return;
    default: {
        /* Error bodies are kept short: for the log, or (a 2026 upstream's error, relayed to
         * the client) up to 4 KiB. */
        size_t cap = k->modern ? 4096 : 512;
        if (k->body.len < cap)
            tg_buf_append(&k->body, p, n < cap - k->body.len ? n : cap - k->body.len);
        return;
    }
    }
}

static void on_resume_due(uv_timer_t *t)
{
    struct resume_wait *w = t->data;
    struct http_call *k = w->k;
    if (k == NULL)
        return;
    resume_cancel(k);
    struct tg_buf h;
    tg_buf_init(&h);
    session_headers(&h, k->sess, 1, k->sess->up_auth);
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
static int try_resume(struct http_call *k)
{
    if (k->kind != KIND_REQUEST || k->got_response || k->resume_failed || !k->sse.has_last_id ||
        k->sse.retry_ms < 0 || k->resumes >= 16 || k->resumes_total >= 256 || k->srv->draining)
        return 0;
    /* The event id goes back as Last-Event-ID: printable ASCII only (the upstream chose it). */
    if (k->sse.last_id_len > 1024 || !tg_header_value_safe(k->sse.last_id, k->sse.last_id_len))
        return 0;
    if (!k->ev->listening(k->call))
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
    k->ev->poll(k->call, ms); /* a client that can poll too is told so */
    return 1;
}

/* How the request ended, for the call's settlement. */
static enum tg_outcome outcome_of(struct http_call *k, struct tg_upreq *r, int err)
{
    if (k->mode == MODE_SSE && k->got_response)
        return k->got_response == 1 ? TG_OUT_OK : TG_OUT_ERROR;
    if (err != 0) {
        if (!tg_upreq_sent(r))
            return err == TG_ETIMEDOUT ? TG_OUT_NOT_SENT_TIMEOUT : TG_OUT_NOT_SENT;
        return err == TG_ETIMEDOUT ? TG_OUT_TIMEOUT : TG_OUT_UNAVAILABLE;
    }
    switch (k->mode) {
    case MODE_SSE: return TG_OUT_UNAVAILABLE; /* the stream ended without the answer */
    case MODE_JSON:
        if (k->body.base == NULL || tg_json_parse(k->body.base, k->body.len, 1000, 0, &k->body_doc, NULL, NULL) != 0)
            return TG_OUT_GARBLED;
        k->body_doc_ok = 1;
        /* Well-formed but not this request's answer (another id, or not a response): garbled,
         * as the client is told; never an "ok" in the audit log. */
        if (k->kind == KIND_REQUEST &&
            (k->body_doc.method_raw.len > 0 || k->body_doc.id_raw.len != k->gid_len ||
             memcmp(k->body_doc.id_raw.ptr, k->gid, k->gid_len) != 0))
            return TG_OUT_GARBLED;
        return k->body_doc.error_raw.len > 0 ? TG_OUT_ERROR : TG_OUT_OK;
    case MODE_GONE: return TG_OUT_REFUSED;
    case MODE_ERROR: {
        int st = tg_upreq_status(r);
        return st >= 400 && st < 500 ? TG_OUT_REFUSED : TG_OUT_UNAVAILABLE;
    }
    default: return TG_OUT_GARBLED;
    }
}

static void on_up_done(struct tg_upreq *r, int err, void *ud)
{
    struct http_call *k = ud;
    k->up = NULL;
    if (err == 0 && k->mode == MODE_SSE && try_resume(k))
        return;
    if (err == 0 && k->mode == MODE_ERROR && tg_upreq_status(r) == 401 && k->ev->unauthorized != NULL) {
        /* The credential was refused and the message not run: the call may send it again. */
        void **slot = k->slot;
        detach(k);
        if (k->ev->unauthorized(k->call)) {
            http_call_free(k);
            return;
        }
        k->slot = slot;
        if (slot != NULL)
            *slot = k;
    }
    double latency = k->first_sent_ns ? (double)(uv_hrtime() - k->first_sent_ns) / 1e6 : tg_upreq_elapsed_ms(r);
    enum tg_outcome o = outcome_of(k, r, err);
    detach(k);
    k->ev->settle(k->call, o, latency);
    const struct tg_upstream_conf *uc = tg_upstream_conf(k->uprt);
    /* Answering cannot end the call under us: a client that goes is heard of from the loop. */
    char why[160];
    const char *tell = NULL;
    if (err != 0) {
        if (err == TG_ETIMEDOUT)
            snprintf(why, sizeof(why), "upstream %s timed out", uc->name);
        else if (err == TG_ELIMIT)
            snprintf(why, sizeof(why), "upstream %s is busy (its pool queue is full, or the call waited past pool.queue_timeout_ms)", uc->name);
        else if (err == TG_EBACKOFF)
            snprintf(why, sizeof(why), "upstream %s is unavailable (backing off after repeated failures)", uc->name);
        else
            snprintf(why, sizeof(why), "upstream %s is unavailable", uc->name);
    }
    switch (k->mode) {
    case MODE_SSE:
        if (!k->got_response && k->kind == KIND_REQUEST)
            /* The stream ended without the answer: a clean error on the same stream. */
            tell = err ? why : "upstream ended the stream without answering";
        break;
    case MODE_JSON: {
        if (err != 0) {
            tell = why;
            break;
        }
        /* a big body is rewritten in place, not copied */
        if (!k->ev->answer(k->call, k->body.base ? k->body.base : "", k->body.len, k->body_doc_ok ? &k->body_doc : NULL,
                           &k->body, 0)) {
            char esc[200];
            tg_log(TG_LOG_WARN, "upstream answered with something that is not the answer", "upstream=%s body=%s",
                   uc->name, tg_log_esc(esc, sizeof(esc), tg_slice_of(k->body.base, k->body.len)));
            tell = "upstream sent an invalid response";
        }
        break;
    }
    case MODE_ACCEPTED:
        if (err != 0)
            tell = why;
        else
            o = TG_OUT_ACCEPTED;
        break;
    case MODE_GONE:
        o = TG_OUT_SESSION_GONE;
        break;
    case MODE_ERROR: {
        int st = tg_upreq_status(r);
        /* A 2026-07-28 upstream refuses with a JSON-RPC error and the status the spec gives it
         * (-32020 400, -32601 404, ...): the client gets both, its own id restored. */
        if (err == 0 && k->modern && k->kind == KIND_REQUEST && st >= 400 && st < 500 &&
            k->ev->answer(k->call, k->body.base ? k->body.base : "", k->body.len, NULL, NULL, st))
            break;
        if (k->kind == KIND_GET && (st == 405 || st == 404)) {
            o = TG_OUT_NO_STREAM;
            break;
        }
        char esc[200];
        tg_log(TG_LOG_WARN, "upstream error status", "upstream=%s status=%d body=%s", uc->name, st,
               tg_log_esc(esc, sizeof(esc), tg_slice_of(k->body.base, k->body.len)));
        if (err == 0)
            snprintf(why, sizeof(why), "upstream %s answered HTTP %d", uc->name, st);
        tell = why;
        break;
    }
    case MODE_WAIT:
        tell = err ? why : "upstream closed without answering";
        break;
    }
    finish(k, o, tell, latency);
}

static const struct tg_upreq_cbs call_cbs = {on_up_head, on_up_data, on_up_done};

/* ---- operations ---------------------------------------------------------------------------- */

static void http_send(const struct tg_upstream_send *a)
{
    struct http_call *k = tg_recycle_alloc(&http_calls);
    memset(k, 0, offsetof(struct http_call, sse));
    k->ev = a->ev;
    k->call = a->call;
    k->slot = a->state;
    k->srv = a->srv;
    k->sess = a->sess;
    k->uprt = a->up;
    k->kind = a->kind;
    k->is_init = (unsigned char)a->is_init;
    k->modern = a->headers != NULL;
    k->gid_len = a->gid_len < sizeof(k->gid) ? a->gid_len : sizeof(k->gid);
    memcpy(k->gid, a->gid, k->gid_len);
    tg_buf_init(&k->body);
    *a->state = k;
    struct tg_buf h;
    tg_buf_init(&h);
    if (a->body)
        tg_buf_appends(&h, "Content-Type: application/json\r\n");
    if (a->headers != NULL) {
        /* 2026-07-28: no session; the Mcp-* headers were rebuilt from the body. */
        tg_buf_appends(&h, "Accept: application/json, text/event-stream\r\n");
        tg_buf_appends(&h, a->headers);
        if (a->auth != NULL)
            tg_buf_appends(&h, a->auth);
    } else {
        session_headers(&h, a->sess, !a->is_init, a->auth);
    }
    tg_buf_append(&h, "", 1);
    k->first_sent_ns = a->first_sent_ns ? a->first_sent_ns : uv_hrtime();
    /* No body: the session's GET stream, on a connection of its own. */
    /* A listen lasts as long as a GET stream: a connection of its own, outside the pool. */
    k->up = tg_upreq_start(a->up, a->body ? "POST" : "GET", h.base, a->body, a->len, a->body == NULL || a->is_listen,
                           a->timeout_ms, &call_cbs, k);
    tg_buf_dispose(&h);
}

static void http_cancel(void *state)
{
    struct http_call *k = state;
    if (k == NULL)
        return;
    detach(k);
    if (k->up != NULL) {
        tg_upreq_cancel(k->up);
        k->up = NULL;
    }
    resume_cancel(k);
    k->dead = 1;
    if (!k->in_feed)
        http_call_free(k);
}

static int http_sent(const void *state)
{
    const struct http_call *k = state;
    return k == NULL || k->up == NULL || tg_upreq_sent(k->up);
}

static void http_pause(struct tg_session *s, void *state, int pause)
{
    struct http_call *k = state;
    if (k == NULL || k->up == NULL)
        return;
    if (pause)
        tg_upreq_pause(k->up);
    else
        tg_upreq_resume(k->up);
}

static void http_touch(void *state)
{
    struct http_call *k = state;
    if (k != NULL && k->up != NULL)
        tg_upreq_touch(k->up);
}

static void http_reply(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p, size_t n)
{
    struct tg_buf h;
    tg_buf_init(&h);
    tg_buf_appends(&h, "Content-Type: application/json\r\n");
    session_headers(&h, s, 1, s->up_auth);
    tg_buf_append(&h, "", 1);
    tg_upreq_start(u, "POST", h.base, p, n, 0, (uint64_t)tg_upstream_conf(u)->call_timeout_ms, &noop_cbs, NULL);
    tg_buf_dispose(&h);
}

/* The session ends: tell the upstream too (nobody waits for its answer). */
static void http_close(struct tg_server *srv, struct tg_session *s)
{
    if (s->up_session == NULL || (size_t)s->upstream >= srv->nupstreams)
        return;
    struct tg_upstream *u = srv->upstreams[s->upstream];
    struct tg_buf h;
    tg_buf_init(&h);
    session_headers(&h, s, 1, s->up_auth);
    tg_buf_append(&h, "", 1);
    tg_upreq_start(u, "DELETE", h.base, NULL, 0, 0, (uint64_t)tg_upstream_conf(u)->call_timeout_ms, &noop_cbs, NULL);
    tg_buf_dispose(&h);
}

const struct tg_upstream_ops tg_upstream_streamable_ops = {
    .name = "streamable-http",
    .flags = 0,
    .send = http_send,
    .sent = http_sent,
    .cancel = http_cancel,
    .pause = http_pause,
    .touch = http_touch,
    .reply = http_reply,
    .close = http_close,
};
