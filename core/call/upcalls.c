/* What the upstream kinds report, as the call hears it: the callbacks a call hands its kind with
 * each message (struct tg_upstream_events), and those a session hands a message-stream kind for
 * what comes on its link and answers no call (struct tg_upstream_host). The kinds see neither
 * the call nor its sink: they tell how it ended (an outcome), and this file maps that to what
 * the client gets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/call.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/legacy.h"
#include "core/mcp/rewrite.h"
#include "core/wire/msg.h"
#include "core/call/roots.h"
#include "core/call/upauth.h"
#include "policy/pins.h"
#include "upstream/pool/pool.h"

/* ---- a call's callbacks ------------------------------------------------------------------ */

static int ev_answer(void *call, const char *p, size_t n, const struct tg_json_doc *pre, struct tg_buf *own, int status)
{
    struct tg_call *k = call;
    k->answer_src = own; /* a big answer is rewritten in its buffer, not copied */
    k->answer_status = status;
    int mine = tg_call_answer(k, p, n, pre);
    k->answer_src = NULL;
    tg__call_audit_held(k); /* the client has its answer: now the audit line (ev_settle held it) */
    if (!mine)
        k->answer_status = 0;
    return mine;
}

/* The answer to call k arrived on the session's link. */
static void ev_answered(void *call, const char *p, size_t n, const struct tg_json_doc *doc, struct tg_buf *own)
{
    struct tg_call *k = call;
    int is_error = doc->error_raw.len > 0;
    if (k->is_init) {
        k->sess->init_pending = 0;
        if (is_error && k->sink != NULL && (k->sink->flags & TG_SINK_NEW_SESSION) && k->sess->live)
            tg_session_remove(k->srv->sessions, k->sess); /* no session was made after all */
    }
    tg__call_settle_hold(k, is_error ? TG_OUT_ERROR : TG_OUT_OK, tg__call_latency(k));
    k->answer_src = own;
    tg_call_answer(k, p, n, doc);
    k->answer_src = NULL;
    tg__call_audit_held(k); /* after the answer's write: not on its way */
    tg_call_finish(k);
}

static void ev_stream(void *call) { tg_call_stream(call); }

static void ev_sent(void *call, uint64_t timeout)
{
    struct tg_call *k = call;
    k->sent_at = now_ms(k->srv);
    k->awaiting = 1;
    k->deadline = k->sent_at + (timeout ? timeout : (uint64_t)tg_upstream_conf(k->uprt)->call_timeout_ms);
    tg_list_insert_tail(&k->srv->awaiting, &k->alink);
}

/* A kind settles a call just before it hands over the answer (ev_answer) or the end (ev_done):
 * the audit line waits for either, so that it is made after the client's write. */
static void ev_settle(void *call, enum tg_outcome o, double latency_ms)
{
    struct tg_call *k = call;
    tg__call_settle_hold(k, o, latency_ms < 0 ? tg__call_latency(k) : latency_ms);
}

/* The upstream ended the session (404 to a message of it): it ends here too. */
static void session_gone(struct tg_call *k)
{
    tg_log(TG_LOG_INFO, "upstream ended the session", "upstream=%s session=%s", up_name(k), k->sess->id_str);
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
}

static void ev_done(void *call, enum tg_outcome o, const char *why, double latency_ms)
{
    struct tg_call *k = call;
    k->upcall = NULL;
    tg__call_settle_hold(k, o, latency_ms < 0 ? tg__call_latency(k) : latency_ms);
    if (why != NULL)
        tg_call_answer_error(k, why, 0);
    else if (o == TG_OUT_ACCEPTED && k->sink != NULL)
        k->sink->ops->bare(k->sink, k, 202, NULL, NULL, 0);
    else if (o == TG_OUT_SESSION_GONE)
        session_gone(k);
    else if (o == TG_OUT_NO_STREAM && k->sink != NULL)
        k->sink->ops->bare(k->sink, k, 405, "Allow: POST, DELETE\r\n", NULL, 0);
    tg__call_audit_held(k); /* after what the client was told */
    tg_call_finish(k);
}

static void ev_backpressure(void *call)
{
    struct tg_call *k = call;
    if (!k->closed)
        tg_call_backpressure(k);
}

static int ev_behind(void *call)
{
    struct tg_call *k = call;
    if (k->sink == NULL || !k->sink->ops->high(k->sink))
        return 0;
    k->srv->metrics.limit_output++;
    return 1;
}

static int ev_listening(void *call)
{
    struct tg_call *k = call;
    return k->sink != NULL && k->sink->ops->listening(k->sink);
}

static void ev_poll(void *call, long retry_ms)
{
    struct tg_call *k = call;
    if (k->sink != NULL)
        k->sink->ops->poll(k->sink, k, retry_ms);
}

static int ev_unauthorized(void *call)
{
    struct tg_call *k = call;
    return tg__call_upauth_unauthorized(k, k->upauth);
}

const struct tg_upstream_events tg__call_events = {
    .message = tg__call_message,
    .answer = ev_answer,
    .answered = ev_answered,
    .stream = ev_stream,
    .sent = ev_sent,
    .settle = ev_settle,
    .done = ev_done,
    .backpressure = ev_backpressure,
    .behind = ev_behind,
    .listening = ev_listening,
    .poll = ev_poll,
    .unauthorized = ev_unauthorized,
};

/* ---- a session's callbacks (message-stream kinds) ------------------------------------------
 *
 * What the server says on its own goes to the session's client stream: the channel, the GET
 * stream, or an open call's answer stream. */

/* Where a server message that answers no call goes. */
static int session_stream_write(struct tg_session *s, const char *p, size_t n, const char *progress_key)
{
    if (s->channel != NULL) {
        s->channel->ops->message(s->channel, NULL, p, n);
        return 1;
    }
    struct tg_call *target = NULL;
    for (struct tg_list *l = s->calls.next; progress_key && l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->progress_token && strcmp(k->progress_token, progress_key) == 0 && k->awaiting) {
            target = k;
            break;
        }
    }
    if (target == NULL && s->get_stream != NULL && s->get_stream->sink != NULL &&
        s->get_stream->sink->ops->listening(s->get_stream->sink))
        target = s->get_stream;
    for (struct tg_list *l = s->calls.prev; target == NULL && l != &s->calls; l = l->prev) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->awaiting && k->sink != NULL && !(k->sink->flags & (TG_SINK_ANSWER_ONLY | TG_SINK_STATELESS)) &&
            k->sink->ops->listening(k->sink))
            target = k;
    }
    if (target == NULL)
        return 0;
    if (target->sink != NULL && !(target->sink->flags & TG_SINK_ANSWER_ONLY))
        target->sink->ops->message(target->sink, target, p, n);
    return 1;
}

/* A server request or notification on the session's link. */
static void host_message(struct tg_session *s, struct tg_upstream *u, const char *p, size_t n,
                         const struct tg_json_doc *doc)
{
    struct tg_server *srv = s->srv;
    char *progress = NULL;
    int is_request = doc->method_raw.len > 0 && doc->id_raw.len > 0;
    if (is_request) {
        if (tg__call_refuse_server_request(srv, s, u, p, n, 0, NULL))
            return;
    } else if (tg_slice_eq(doc->method_raw, TG_SLICE("\"notifications/progress\""))) {
        struct tg_json_doc full;
        if (tg_json_parse(p, n, 1000, 1, &full, NULL, NULL) == 0) {
            cJSON *tok = tg_json_get(tg_json_get(full.root, "params"), "progressToken");
            if (tok)
                progress = cJSON_IsString(tok) ? tg_mcp_id_key_string(tok->valuestring) : tg_mcp_id_key_number(tok);
            cJSON_Delete(full.root);
        }
    }
    if (!is_request && tg_slice_eq(doc->method_raw, TG_SLICE("\"roots/list\"")) &&
        tg_roots_of_session(srv, s, tg_upstream_conf(u)) != NULL)
        return; /* pinned roots: a roots/list never reaches a client, not even as a notification */
    if (!is_request && tg_mcp_method_maybe_update(doc->method_raw) && !tg__call_may_relay(srv, s, p, n)) {
        tg_xfree(progress);
        return; /* a resource the grant may not read: no client hears of it */
    }
    if (!is_request && srv->pins_seen != NULL)
        tg_pins_seen_note(srv->pins_seen, tg_upstream_conf(u)->pins, tg_upstream_conf(u)->name, p, n);
    int delivered = session_stream_write(s, p, n, progress);
    tg_xfree(progress);
    if (is_request && delivered) {
        tg_mcp_note_server_request(s, doc->id_raw);
    } else if (is_request) {
        /* No client stream could carry it (none open, or only a batch's answer): the upstream
         * gets an error now instead of waiting for an answer that cannot come. */
        tg__call_refuse_server_request(srv, s, u, p, n, 1, "no open stream of this session can carry a server request");
    } else if (!delivered) {
        tg_log(TG_LOG_DEBUG, "server message with nowhere to go; dropped", "session=%s", s->id_str);
    }
}

static struct tg_call *first_parked(struct tg_session *s)
{
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next)
        if (tg_container_of(l, struct tg_call, slink)->parked)
            return tg_container_of(l, struct tg_call, slink);
    return NULL;
}

void tg_call_upstream_gone(struct tg_session *s, const char *why, uint16_t ws_code, const char *ws_why)
{
    tg_session_ref(s);
    for (struct tg_call *k; (k = tg_call_first_awaiting(s)) != NULL;)
        tg_call_fail(k, TG_OUT_UNAVAILABLE, why, -1);
    /* Parked calls go too: an approval would send them to a session that is gone. */
    for (struct tg_call *k; (k = first_parked(s)) != NULL;) {
        if (k->sink != NULL && k->sink->ops->listening(k->sink))
            tg_call_answer_error(k, "the upstream session ended before the call was approved; it was not made", 0);
        tg_call_close(k); /* withdrawn: out of the queue, its reservations back */
    }
    if (s->channel != NULL && s->channel->ops->close != NULL)
        s->channel->ops->close(s->channel, ws_code, ws_why);
    tg_call_end_get_stream(s);
    if (s->live)
        tg_session_remove(s->srv->sessions, s);
    tg_session_unref(s);
}

/* The session's link died (the kind has done its waiting calls already). */
static void host_gone(struct tg_session *s, const char *why) { tg_call_upstream_gone(s, why, 1011, "upstream gone"); }

/* A client that stopped reading stops its message-stream upstream too (answers included);
 * its drain resumes it. */
static void host_backpressure(struct tg_session *s)
{
    int high = s->channel != NULL && s->channel->ops->high(s->channel);
    for (struct tg_list *l = s->calls.next; !high && l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        high = k->sink != NULL && k->sink->ops->high(k->sink);
    }
    if (high || s->stalled > 0) {
        s->srv->metrics.limit_output++;
        tg_call_pause_link(s, 1);
    }
}

static void host_hold(struct tg_session *s, int hold)
{
    if (hold)
        tg_session_ref(s);
    else
        tg_session_unref(s);
}

/* Its client still holds a stream of it open. A GET stream whose connection closed stays (its
 * events kept for a Last-Event-ID) with no one listening: that client is gone. */
static int client_connected(const struct tg_session *s)
{
    if (s->channel != NULL)
        return 1;
    struct tg_sink *sk = s->get_stream != NULL ? s->get_stream->sink : NULL;
    return sk != NULL && (sk->ops->connected != NULL ? sk->ops->connected(sk) : sk->ops->listening(sk));
}

static struct tg_session *host_evictable(struct tg_session *s, uint64_t idle_ms, int *same)
{
    return tg_session_pick_evictable(s->srv->sessions, s->upstream, s->grant, now_ms(s->srv), idle_ms,
                                     client_connected, same);
}

const struct tg_upstream_host tg__call_host = {
    .message = host_message,
    .gone = host_gone,
    .backpressure = host_backpressure,
    .hold = host_hold,
    .evictable = host_evictable,
};
