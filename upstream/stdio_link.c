#include "core/router_int.h"


static void release_child(struct tg_session *s);

static struct tg_child *session_child(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u);

static void on_child_message(void *ud, const char *p, size_t n);

static void on_child_exit(void *ud, int64_t status, int sig);

/* deny_server_requests on a message-stream upstream: the gateway answers on the same stream. */
int refuse_stream_request(struct tg_call *probe, const char *p, size_t n)
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

void stream_send(struct tg_call *k, const char *body, size_t len, uint64_t timeout)
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
