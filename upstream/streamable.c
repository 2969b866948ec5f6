/* Streamable HTTP upstreams: each message of a call is a POST on the pool (upstream/pool/pool.h),
 * answered with JSON or with an SSE stream; a session's stream of server messages is a
 * dedicated GET. This file is the MCP client: the pool knows nothing of MCP. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/call.h"
#include "core/base/log.h"
#include "core/wire/msg.h"
#include "upstream/upstream.h"
#include "upstream/pool/pool.h"

/* The timer of a call waiting to reconnect. Owner: the call until it is cancelled; freed in
 * its close callback. */
struct resume_wait {
    uv_timer_t timer;
    struct tg_call *k; /* NULL once cancelled */
};

static const struct tg_upreq_cbs call_cbs;

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

static void on_noop_head(struct tg_upreq *r, int status, void *ud) { (void)r, (void)status, (void)ud; }
static void on_noop_data(struct tg_upreq *r, const char *p, size_t n, void *ud) { (void)r, (void)p, (void)n, (void)ud; }
static void on_noop_done(struct tg_upreq *r, int err, void *ud) { (void)r, (void)err, (void)ud; }
static const struct tg_upreq_cbs noop_cbs = {on_noop_head, on_noop_data, on_noop_done};

static void session_headers(struct tg_buf *h, struct tg_session *s, int with_session)
{
    tg_buf_appends(h, "Accept: application/json, text/event-stream\r\n");
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
    struct tg_call *k = ud;
    if (k->closed)
        return 1;
    if (ev->event.len != 0 && !tg_slice_eq(ev->event, TG_SLICE("message")))
        return 0; /* only JSON-RPC messages are relayed */
    if (ev->data.len == 0)
        return 0; /* priming events carry no message */
    k->resumes = 0;
    tg_call_upstream_message(k, ev->data.ptr, ev->data.len, NULL);
    return k->closed;
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
        tg_call_stream(k);
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
static void too_large(struct tg_call *k, const char *what)
{
    tg_log(TG_LOG_WARN, what, "upstream=%s limit=%d", up_name(k), k->srv->conf->limits.response_bytes);
    double lat = tg_upreq_elapsed_ms(k->up);
    tg_upreq_cancel(k->up);
    k->up = NULL;
    tg_call_settle(k, TG_OUT_GARBLED, lat);
    /* The client hears why, on its JSON answer or on the stream it was given (unless the
     * answer went through before the cut). */
    if (k->mode == MODE_JSON || (k->mode == MODE_SSE && !k->got_response && k->kind == KIND_REQUEST))
        tg_call_answer_error(k, "upstream response exceeds limits.response_bytes", 0);
    tg_call_finish(k);
}

static void on_up_data(struct tg_upreq *r, const char *p, size_t n, void *ud)
{
    struct tg_call *k = ud;
    switch (k->mode) {
    case MODE_SSE: {
        if (k->resume_failed)
            return;
        k->feeding = 1;
        int e = tg_sse_feed(&k->sse, p, n, on_sse_event, k);
        int relayed = k->feeding == 2;
        k->feeding = 0;
        if (k->closed)
            return;
        if (relayed)
            tg_call_backpressure(k); /* once for all the messages these bytes held */
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
        if (k->sink != NULL && k->sink->ops->high(k->sink)) {
            k->srv->metrics.limit_output++;
            tg_upreq_pause(k->up); /* the sink's drain resumes every call of the session */
        }
        if (tg_buf_try_append(&k->body, p, n, (size_t)k->srv->conf->limits.response_bytes) != 0)
            too_large(k, "upstream response too large");
        return;
    default: {
        /* Error bodies are kept short: for the log, or (a 2026 upstream's error, relayed to
         * the client) up to 4 KiB. */
        size_t cap = k->up_headers != NULL ? 4096 : 512;
        if (k->body.len < cap)
            tg_buf_append(&k->body, p, n < cap - k->body.len ? n : cap - k->body.len);
        return;
    }
    }
}

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
    /* The event id goes back as Last-Event-ID: printable ASCII only (the upstream chose it). */
    if (k->sse.last_id_len > 1024 || !tg_header_value_safe(k->sse.last_id, k->sse.last_id_len))
        return 0;
    if (k->sink == NULL || !k->sink->ops->listening(k->sink))
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
    k->sink->ops->poll(k->sink, k, ms); /* a client that can poll too is told so */
    return 1;
}

/* How the request ended, for the call's settlement. */
static enum tg_outcome outcome_of(struct tg_call *k, struct tg_upreq *r, int err)
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
             memcmp(k->body_doc.id_raw.ptr, k->gid_str, k->gid_len) != 0))
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
    struct tg_call *k = ud;
    k->up = NULL;
    if (err == 0 && k->mode == MODE_SSE && try_resume(k))
        return;
    double latency = k->first_sent_ns ? (double)(uv_hrtime() - k->first_sent_ns) / 1e6 : tg_upreq_elapsed_ms(r);
    tg_call_settle(k, outcome_of(k, r, err), latency);
    const struct tg_upstream_conf *uc = tg_upstream_conf(k->uprt);
    /* Answering cannot close the call under us: a client that goes is heard of from the loop. */
    char why[160];
    if (err != 0) {
        if (err == TG_ETIMEDOUT)
            snprintf(why, sizeof(why), "upstream %s timed out", uc->name);
        else if (err == TG_ELIMIT)
            snprintf(why, sizeof(why), "upstream %s is busy (pool and queue full)", uc->name);
        else if (err == TG_EBACKOFF)
            snprintf(why, sizeof(why), "upstream %s is unavailable (backing off after repeated failures)", uc->name);
        else
            snprintf(why, sizeof(why), "upstream %s is unavailable", uc->name);
    }
    switch (k->mode) {
    case MODE_SSE:
        if (!k->got_response && k->kind == KIND_REQUEST)
            /* The stream ended without the answer: a clean error on the same stream. */
            tg_call_answer_error(k, err ? why : "upstream ended the stream without answering", 0);
        break;
    case MODE_JSON: {
        if (err != 0) {
            tg_call_answer_error(k, why, 0);
            break;
        }
        k->answer_src = &k->body; /* a big body is rewritten in place, not copied */
        int answered = tg_call_answer(k, k->body.base ? k->body.base : "", k->body.len,
                                      k->body_doc_ok ? &k->body_doc : NULL);
        k->answer_src = NULL;
        if (!answered) {
            char esc[200];
            tg_log(TG_LOG_WARN, "upstream answered with something that is not the answer", "upstream=%s body=%s",
                   uc->name, tg_log_esc(esc, sizeof(esc), tg_slice_of(k->body.base, k->body.len)));
            tg_call_answer_error(k, "upstream sent an invalid response", 0);
        }
        break;
    }
    case MODE_ACCEPTED:
        if (err != 0)
            tg_call_answer_error(k, why, 0);
        else if (k->sink != NULL)
            k->sink->ops->bare(k->sink, k, 202, NULL, NULL, 0);
        break;
    case MODE_GONE:
        tg_log(TG_LOG_INFO, "upstream ended the session", "upstream=%s session=%s", uc->name, k->sess->id_str);
        tg_session_remove(k->srv->sessions, k->sess);
        if (k->sink != NULL && k->era == TG_ERA_2026) {
            /* A stateless client has no session to lose: the next request makes a new one. */
            tg_call_answer_error(k, "the upstream ended the gateway's session; send the request again", 0);
        } else if (k->sink != NULL) {
            struct tg_buf e;
            tg_buf_init(&e);
            tg_rpc_error(&e, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
            if (k->kind == KIND_REQUEST)
                k->sink->ops->answer(k->sink, k, 404, NULL, e.base, e.len);
            else
                k->sink->ops->bare(k->sink, k, 404, NULL, e.base, e.len);
            tg_buf_dispose(&e);
        }
        break;
    case MODE_ERROR: {
        int st = tg_upreq_status(r);
        if (err == 0 && k->up_headers != NULL && k->kind == KIND_REQUEST && st >= 400 && st < 500) {
            /* A 2026-07-28 upstream refuses with a JSON-RPC error and the status the spec gives
             * it (-32020 400, -32601 404, ...): the client gets both, its own id restored. */
            k->answer_status = st;
            if (tg_call_answer(k, k->body.base ? k->body.base : "", k->body.len, NULL))
                break;
            k->answer_status = 0;
        }
        if (k->kind == KIND_GET && (st == 405 || st == 404)) {
            if (k->sink != NULL)
                k->sink->ops->bare(k->sink, k, 405, "Allow: POST, DELETE\r\n", NULL, 0);
            break;
        }
        char esc[200];
        tg_log(TG_LOG_WARN, "upstream error status", "upstream=%s status=%d body=%s", uc->name, st,
               tg_log_esc(esc, sizeof(esc), tg_slice_of(k->body.base, k->body.len)));
        if (err == 0)
            snprintf(why, sizeof(why), "upstream %s answered HTTP %d", uc->name, st);
        tg_call_answer_error(k, why, 0);
        break;
    }
    case MODE_WAIT:
        tg_call_answer_error(k, err ? why : "upstream closed without answering", 0);
        break;
    }
    tg_call_finish(k);
}

static const struct tg_upreq_cbs call_cbs = {on_up_head, on_up_data, on_up_done};

/* ---- operations ---------------------------------------------------------------------------- */

static void http_send(struct tg_call *k, const char *body, size_t len, uint64_t timeout)
{
    struct tg_buf h;
    tg_buf_init(&h);
    if (body)
        tg_buf_appends(&h, "Content-Type: application/json\r\n");
    if (k->up_headers != NULL) {
        /* 2026-07-28: no session; the Mcp-* headers were rebuilt from the body. */
        tg_buf_appends(&h, "Accept: application/json, text/event-stream\r\n");
        tg_buf_appends(&h, k->up_headers);
    } else {
        session_headers(&h, k->sess, !k->is_init);
    }
    tg_buf_append(&h, "", 1);
    k->forwarded = 1;
    if (k->first_sent_ns == 0)
        k->first_sent_ns = uv_hrtime();
    /* No body: the session's GET stream, on a connection of its own. */
    /* A listen lasts as long as a GET stream: a connection of its own, outside the pool. */
    k->up = tg_upreq_start(k->uprt, body ? "POST" : "GET", h.base, body, len, body == NULL || k->is_listen, timeout,
                           &call_cbs, k);
    tg_buf_dispose(&h);
}

static void http_cancel(struct tg_call *k)
{
    if (k->up != NULL) {
        tg_upreq_cancel(k->up);
        k->up = NULL;
    }
    resume_cancel(k);
}

static int http_sent(const struct tg_call *k) { return k->up == NULL || tg_upreq_sent(k->up); }

static void http_pause(struct tg_session *s, struct tg_call *k, int pause)
{
    if (k == NULL || k->up == NULL)
        return;
    if (pause)
        tg_upreq_pause(k->up);
    else
        tg_upreq_resume(k->up);
}

static void http_touch(struct tg_call *k)
{
    if (k->up != NULL)
        tg_upreq_touch(k->up);
}

static void http_reply(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p, size_t n)
{
    struct tg_buf h;
    tg_buf_init(&h);
    tg_buf_appends(&h, "Content-Type: application/json\r\n");
    session_headers(&h, s, 1);
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
    session_headers(&h, s, 1);
    tg_buf_append(&h, "", 1);
    tg_upreq_start(u, "DELETE", h.base, NULL, 0, 0, (uint64_t)tg_upstream_conf(u)->call_timeout_ms, &noop_cbs, NULL);
    tg_buf_dispose(&h);
}

static int http_open(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u) { return 0; }

const struct tg_upstream_ops tg_upstream_streamable_ops = {
    .name = "streamable-http",
    .flags = 0,
    .probe = NULL,
    .open = http_open,
    .send = http_send,
    .sent = http_sent,
    .cancel = http_cancel,
    .pause = http_pause,
    .touch = http_touch,
    .reply = http_reply,
    .close = http_close,
};
