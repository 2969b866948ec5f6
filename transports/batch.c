#include "core/router_int.h"


/* ---- small answers --------------------------------------------------------- */

void respond_rpc(struct tg_conn *c, int status, const char *extra, const char *id, size_t id_len, int code,
                        const char *msg, const char *data)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_rpc_error(&b, id, id_len, code, msg, data);
    tg_http_respond(c, status, extra, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

void batch_add(struct tg_batch *b, const char *p, size_t n)
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

void batch_add_error(struct tg_batch *b, const char *id, size_t idn, int code, const char *msg,
                            const char *data)
{
    struct tg_buf e;
    tg_buf_init(&e);
    tg_rpc_error(&e, id, idn, code, msg, data);
    batch_add(b, e.base, e.len);
    tg_buf_dispose(&e);
}

void on_batch_abort(struct tg_conn *c, void *ex)
{
    struct tg_batch *b = ex;
    b->conn = NULL; /* the elements go on; their answers are dropped */
}

void batch_done_one(struct tg_batch *b)
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
void reply_rpc(struct tg_conn *c, struct tg_batch *b, int status, const char *id, size_t idn, int code,
                      const char *msg, const char *data)
{
    if (b != NULL)
        batch_add_error(b, id, idn, code, msg, data);
    else
        respond_rpc(c, status, NULL, id, idn, code, msg, data);
}

void reply_json(struct tg_conn *c, struct tg_batch *b, const char *p, size_t n)
{
    if (b != NULL)
        batch_add(b, p, n);
    else
        tg_http_respond(c, 200, NULL, "application/json", p, n);
}

void reply_accepted(struct tg_conn *c, struct tg_batch *b)
{
    if (b == NULL)
        tg_http_respond(c, 202, NULL, NULL, "", 0);
}
