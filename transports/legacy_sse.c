#include "transports/legacy_sse.h"

#include <stdio.h>
#include <string.h>

#include "core/call/exchange.h"
#include "core/base/log.h"
#include "core/wire/msg.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "core/gate/dispatch.h"
#include "core/wire/http_fast.h"
#include "transports/channel.h"
#include "transports/cred_watch.h"
#include "transports/http1/http1.h"
#include "transports/respond.h"
#include "transports/streamable.h"

void tg_legacy_sse_open(struct tg_exchange *x, struct tg_conn *c)
{
    if (!tg_streamable_accepts_sse(c))
        return;
    struct tg_session *s = tg_channel_session_new(x, c);
    if (s == NULL)
        return;
    struct tg_channel *ch = tg_channel_new(x->srv, s, CH_SSE, c, x->cred);
    tg_channel_keep_scopes(ch, x);
    tg_http_stream_begin(c, 200, NULL, "text/event-stream");
    c->exchange = ch;
    c->on_abort = tg_channel_on_conn_abort;
    c->on_drain = tg_channel_on_drain;
    struct tg_buf b;
    tg_buf_init(&b);
    /* The endpoint is relative to this stream's URL, as the 2024-11-05 transport expects. */
    struct tg_slice url = tg_http_req_url(c->req);
    size_t q = 0;
    while (q < url.len && url.ptr[q] != '?')
        q++;
    size_t base = q >= 4 ? q - 4 : 0; /* strip "/sse" */
    tg_buf_appends(&b, "event: endpoint\ndata: ");
    tg_buf_append(&b, url.ptr, base);
    tg_buf_appendf(&b, "/messages?sessionId=%s\n\n", s->id_str);
    tg_http_stream_write(c, b.base, b.len);
    tg_buf_dispose(&b);
    tg_log(TG_LOG_DEBUG, "legacy SSE session opened", "session=%s grant=%s", s->id_str, x->grant->name);
}

/* 401 for a message to a stream that ended with the credential that opened it (a reload took
 * the credential, or its JWT expired): the client opens a new stream with a fresh one. */
static void stream_ended(struct tg_conn *c, const char *why)
{
    char hdr[200], msg[160];
    snprintf(hdr, sizeof(hdr), "WWW-Authenticate: Bearer realm=\"tollgate\", error=\"invalid_token\", "
                               "error_description=\"%s\"\r\n", why);
    snprintf(msg, sizeof(msg), "Unauthorized: the credential that opened this stream ended (%s); open a new one", why);
    tg_respond_rpc(c, 401, hdr, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
}

void tg_legacy_sse_messages(struct tg_exchange *x, struct tg_conn *c, struct tg_slice query)
{
    struct tg_slice ct = tg_http_req_header(c->req, "content-type");
    if (ct.ptr == NULL || !tg_slice_has_token(ct, "application/json") ||
        tg_http_req_header_count(c->req, "content-type") != 1) {
        tg_respond_rpc(c, 415, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Unsupported Media Type: Content-Type must be application/json", NULL);
        return;
    }
    struct tg_slice sid = tg_http_fast_query_param(query, "sessionId");
    struct tg_session *s = sid.ptr ? tg_session_find(x->srv->sessions, sid) : NULL;
    if (sid.ptr == NULL) {
        tg_respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Bad Request: sessionId is required", NULL);
        return;
    }
    struct tg_channel *ch = s && s->channel ? (struct tg_channel *)s->channel : NULL;
    if (s == NULL || ch == NULL || ch->kind != CH_SSE || !ch->open || strcmp(s->grant, x->grant->name) != 0 ||
        s->upstream != x->upstream || !tg_dispatch_session_owner(x, s)) { /* another user's: not found */
        const char *ended = tg_cred_ended_why(x->srv, sid, x->grant->name);
        if (ended != NULL)
            stream_ended(c, ended); /* its stream ended with the credential that opened it */
        else
            tg_respond_rpc(c, 404, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, "Session not found", NULL);
        return;
    }
    tg_channel_ref(ch);
    int status = tg_channel_message(ch, x, c->req->body.base ? c->req->body.base : "", c->req->body.len);
    tg_channel_unref(ch);
    if (status == 401) {
        const char *ended = tg_cred_ended_why(x->srv, sid, x->grant->name); /* noted as the stream ended */
        stream_ended(c, ended != NULL ? ended : "credential no longer valid");
    } else if (status == 202) {
        tg_http_respond(c, 202, NULL, "text/plain", "Accepted", 8);
    } else {
        tg_respond_rpc(c, status, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                            status == 404 ? "Session not found" : "Bad Request: the message was refused (see the stream)",
                            NULL);
    }
}
