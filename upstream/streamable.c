#include "core/router_int.h"

static const struct tg_upreq_cbs call_cbs;

static void on_resume_closed(uv_handle_t *h);

static void on_noop_head(struct tg_upreq *r, int status, void *ud);
static void on_noop_data(struct tg_upreq *r, const char *p, size_t n, void *ud);
static void on_noop_done(struct tg_upreq *r, int err, void *ud);

static int refuse_server_request(struct tg_call *k, const char *p, size_t n, int refuse_all);

static int on_sse_event(void *ud, const struct tg_sse_event *ev);

static void relay_sse_event(struct tg_call *k, const struct tg_sse_event *ev);

static void on_up_head(struct tg_upreq *r, int status, void *ud);

static void on_up_data(struct tg_upreq *r, const char *p, size_t n, void *ud);

static void on_resume_due(uv_timer_t *t);

static int try_resume(struct tg_call *k);

static void on_up_done(struct tg_upreq *r, int err, void *ud);

static void session_headers(struct tg_buf *h, struct tg_session *s, int with_session);

static void on_resume_closed(uv_handle_t *h) { free(h->data); }

void resume_cancel(struct tg_call *k)
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

void session_header(struct tg_call *k, char *hdr, size_t sz)
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

static void session_headers(struct tg_buf *h, struct tg_session *s, int with_session)
{
    tg_buf_appends(h, "Accept: application/json, text/event-stream\r\n");
    if (with_session && s->up_session)
        tg_buf_appendf(h, "Mcp-Session-Id: %s\r\n", s->up_session);
    if (s->proto[0])
        tg_buf_appendf(h, "MCP-Protocol-Version: %s\r\n", s->proto);
}

void call_send(struct tg_call *k, const char *method, const char *body, size_t len, int dedicated,
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

/* The session ends: tell a Streamable HTTP upstream too (nobody waits for its answer). */
void delete_upstream_session(struct tg_server *srv, struct tg_session *s)
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
