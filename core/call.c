#include "core/router_int.h"


static void refund(struct tg_call *k);

static void call_release(struct tg_call *k);

static int detach_stream(struct tg_call *k);

static void on_answer_drained(struct tg_conn *c, void *ud);

static void watch_answer(struct tg_server *srv, struct tg_session *s, struct tg_conn *c);

static void call_stream_write(struct tg_call *k, const char *p, size_t n);

static void stream_settle(struct tg_call *k, const char *outcome, int give_back);

static void stream_answer(struct tg_call *k, const char *p, size_t n);

static int session_stream_write(struct tg_session *s, const char *p, size_t n, const char *progress_key);

void tg_router_drop_session(struct tg_server *srv, struct tg_session *s);

void tg_router_run_pending(struct tg_server *srv);

static int count_inflight(struct tg_session *s, void *arg);

size_t tg_router_inflight(struct tg_server *srv);

static void refund(struct tg_call *k)
{
    if (k->dec == NULL || k->refunded || k->dec->nres == 0)
        return;
    k->refunded = 1;
    k->srv->metrics.refunds++;
    tg_policy_refund(k->srv->counters, k->dec, wall_ms());
}

void audit_call(struct tg_call *k, const char *decision, double latency, const char *outcome, const char *by)
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
void call_free(struct tg_call *k)
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
void abandon(struct tg_call *k)
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

void on_client_abort(struct tg_conn *c, void *ex)
{
    struct tg_call *k = ex;
    k->conn = NULL;
    if (detach_stream(k))
        return;
    abandon(k);
    call_free(k);
}

void on_client_drain(struct tg_conn *c, void *ex)
{
    struct tg_call *k = ex;
    if (k->up)
        tg_upreq_resume(k->up);
    if (k->sess)
        link_pause(k->sess, 0);
}

void answer_upstream_error(struct tg_call *k, const char *why)
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
void settle_call(struct tg_call *k, struct tg_upreq *r, int err)
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
void batch_finish_call(struct tg_call *k, struct tg_upreq *r, int err)
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

struct tg_call *call_new(struct tg_server *srv, struct tg_session *s, struct tg_conn *c, enum call_kind kind)
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

/* A client that stopped reading stops its message-stream upstream too (answers included);
 * its drain resumes it. */
void session_backpressure(struct tg_server *srv, struct tg_session *s)
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

void stream_fail(struct tg_call *k, const char *why, int give_back)
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

void stream_server_message(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p,
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

void stream_upstream_gone(struct tg_session *s, const char *why)
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

/* Shutdown: calls that wait on a message stream or on a human get an answer now (the
 * upstreams are about to close), so that nothing is left holding a session. */
void abort_waiting(struct tg_server *srv)
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

void end_get_stream(struct tg_session *s)
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
void end_session_calls(struct tg_session *s)
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
