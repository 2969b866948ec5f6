#include "core/router_int.h"


/* GET /NAME/sse: a legacy HTTP+SSE session (2024-11-05). */
void open_sse_channel(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g)
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
void handle_messages(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g,
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
