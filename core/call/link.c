/* The calls of message-stream upstreams (stdio, legacy SSE): everything the upstream sends
 * comes on the session's one link, and is sorted here into the answer of a waiting call, a
 * server request or notification for the session's client stream, or nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/call.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/legacy.h"
#include "core/mcp/listen.h"
#include "core/mcp/rewrite.h"
#include "core/wire/msg.h"
#include "core/call/roots.h"
#include "upstream/pool/pool.h"
#include "upstream/upstream.h"

/* The answer to call k arrived on the session's link. */
static void link_answer(struct tg_call *k, const char *p, size_t n, const struct tg_json_doc *doc,
                        struct tg_buf *own)
{
    int is_error = doc->error_raw.len > 0;
    if (k->is_init) {
        k->sess->init_pending = 0;
        if (is_error && k->sink != NULL && (k->sink->flags & TG_SINK_NEW_SESSION) && k->sess->live)
            tg_session_remove(k->srv->sessions, k->sess); /* no session was made after all */
    }
    tg_call_settle(k, is_error ? TG_OUT_ERROR : TG_OUT_OK, tg__call_latency(k));
    k->answer_src = own; /* p's buffer: a big answer is rewritten in it, not copied */
    tg_call_answer(k, p, n, doc);
    k->answer_src = NULL;
    tg_call_finish(k);
}

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

void tg_session_link_message(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p,
                             size_t n, const struct tg_json_doc *pre, struct tg_buf *own)
{
    struct tg_json_doc doc;
    if (pre != NULL)
        doc = *pre; /* parsed once already (a stdio line): a 50 MiB answer is not scanned twice */
    else if (tg_json_parse(p, n, 1000, 0, &doc, NULL, NULL) != 0)
        return;
    if (!tg_mcp_is_object(p, n)) {
        tg_log(TG_LOG_INFO, "upstream sent a batch or a bare value; dropped", "upstream=%s session=%s",
               tg_upstream_conf(u)->name, s->id_str); /* its members would pass undecided */
        return;
    }
    if (doc.method_raw.len == 0 && doc.id_raw.len > 0) {
        for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
            struct tg_call *k = tg_container_of(l, struct tg_call, slink);
            if (k->awaiting && k->kind == KIND_REQUEST && doc.id_raw.len == k->gid_len &&
                memcmp(doc.id_raw.ptr, k->gid_str, k->gid_len) == 0) {
                link_answer(k, p, n, &doc, own);
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
    int is_request = doc.method_raw.len > 0 && doc.id_raw.len > 0;
    if (is_request) {
        if (tg__call_refuse_server_request(srv, s, u, p, n, 0, NULL))
            return;
    } else if (tg_slice_eq(doc.method_raw, TG_SLICE("\"notifications/progress\""))) {
        struct tg_json_doc full;
        if (tg_json_parse(p, n, 1000, 1, &full, NULL, NULL) == 0) {
            cJSON *tok = tg_json_get(tg_json_get(full.root, "params"),
                                                          "progressToken");
            if (tok)
                progress = cJSON_IsString(tok) ? tg_mcp_id_key_string(tok->valuestring) : tg_mcp_id_key_number(tok);
            cJSON_Delete(full.root);
        }
    }
    if (!is_request && tg_slice_eq(doc.method_raw, TG_SLICE("\"roots/list\"")) &&
        tg_roots_of_session(srv, s, tg_upstream_conf(u)) != NULL)
        return; /* pinned roots: a roots/list never reaches a client, not even as a notification */
    if (!is_request && tg_mcp_method_maybe_update(doc.method_raw) && !tg__call_may_relay(srv, s, p, n)) {
        tg_xfree(progress);
        return; /* a resource the grant may not read: no client hears of it */
    }
    int delivered = session_stream_write(s, p, n, progress);
    tg_xfree(progress);
    if (is_request && delivered) {
        tg_mcp_note_server_request(s, doc.id_raw);
    } else if (is_request) {
        /* No client stream could carry it (none open, or only a batch's answer): the upstream
         * gets an error now instead of waiting for an answer that cannot come. */
        tg__call_refuse_server_request(srv, s, u, p, n, 1, "no open stream of this session can carry a server request");
    } else if (!delivered) {
        tg_log(TG_LOG_DEBUG, "server message with nowhere to go; dropped", "session=%s", s->id_str);
    }
}

/* A client that stopped reading stops its message-stream upstream too (answers included);
 * its drain resumes it. */
void tg_session_backpressure(struct tg_server *srv, struct tg_session *s)
{
    int high = s->channel != NULL && s->channel->ops->high(s->channel);
    for (struct tg_list *l = s->calls.next; !high && l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        high = k->sink != NULL && k->sink->ops->high(k->sink);
    }
    if (high || s->stalled > 0) {
        srv->metrics.limit_output++;
        tg_call_pause_link(s, 1);
    }
}

void tg_session_link_oversized(struct tg_session *s, struct tg_slice id)
{
    for (struct tg_list *l = s->calls.next; id.len > 0 && l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->awaiting && k->kind == KIND_REQUEST && id.len == k->gid_len && memcmp(id.ptr, k->gid_str, id.len) == 0) {
            /* It ran (not refunded); its answer is gone. */
            tg_call_fail(k, TG_OUT_GARBLED, "upstream answer exceeds limits.response_bytes", -1);
            return;
        }
    }
}

/* The policy's word on a resource update, for every session whatever its era (it was in
 * core/bridge/listen.c, which needs it too, but nothing in it crosses the eras). */
int tg__call_may_relay(struct tg_server *srv, struct tg_session *s, const char *p, size_t n)
{
    const struct tg_grant_conf *g = tg_conf_find_grant(srv->conf, s->grant);
    int ok = g != NULL && tg_mcp_relay_allowed(p, n, tg_conf_policy_for(srv->conf, g, s->upstream));
    if (!ok)
        tg_log(TG_LOG_DEBUG, "resource update for a resource the grant may not read; dropped", "session=%s",
               s->id_str);
    return ok;
}
