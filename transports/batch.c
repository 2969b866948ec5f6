#include "transports/batch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/sink.h"
#include "core/gate/dispatch.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "core/wire/msg.h"
#include "transports/http1/http1.h"

/* Gathered answers are output a client will get: they count toward limits.output_total_bytes
 * with every connection's queue, and the batch's whole answer is no longer than one upstream
 * answer may be (limits.response_bytes). */
static int room_for(const struct tg_batch *b, size_t n)
{
    const struct tg_limits *l = &b->srv->conf->limits;
    return b->out.len + n <= (size_t)l->response_bytes &&
           b->srv->metrics.output_buffered + n <= (size_t)l->output_total_bytes;
}

static void gather(struct tg_batch *b, const char *p, size_t n)
{
    size_t before = b->out.len;
    tg_buf_append(&b->out, b->nout ? "," : "[", 1);
    tg_buf_append(&b->out, p, n);
    b->nout++;
    b->held += b->out.len - before;
    b->srv->metrics.output_buffered += b->out.len - before;
}

void tg_batch_add(struct tg_batch *b, const char *p, size_t n)
{
    if (b->channel != NULL && b->single) {
        b->channel->ops->message(b->channel, NULL, p, n);
        b->nout++;
        return;
    }
    if (b->channel == NULL && b->conn == NULL) {
        b->nout++; /* the client has gone: nothing to gather */
        return;
    }
    if (room_for(b, n + 1)) {
        gather(b, p, n);
        return;
    }
    /* The element ran; its answer is replaced by an error the client can act on. */
    b->srv->metrics.limit_output++;
    struct tg_json_doc d;
    int has_id = tg_json_parse(p, n, 1000, 0, &d, NULL, NULL) == 0 && d.id_raw.len > 0;
    struct tg_buf e;
    tg_buf_init(&e);
    tg_rpc_error(&e, has_id ? d.id_raw.ptr : NULL, has_id ? d.id_raw.len : 0, TG_RPC_UPSTREAM,
                 "the batch's answers exceed limits.response_bytes or limits.output_total_bytes: send fewer at once",
                 NULL);
    gather(b, e.base, e.len);
    tg_buf_dispose(&e);
}

static void release_held(struct tg_batch *b)
{
    b->srv->metrics.output_buffered -= b->held;
    b->held = 0;
}

void tg_batch_add_error(struct tg_batch *b, const char *id, size_t idn, int code, const char *msg, const char *data)
{
    struct tg_buf e;
    tg_buf_init(&e);
    tg_rpc_error(&e, id, idn, code, msg, data);
    tg_batch_add(b, e.base, e.len);
    tg_buf_dispose(&e);
}

static void on_batch_abort(struct tg_conn *c, void *ex)
{
    struct tg_batch *b = ex;
    b->conn = NULL; /* the elements go on; their answers are dropped */
}

void tg_batch_done(struct tg_batch *b)
{
    if (--b->pending > 0)
        return;
    if (b->channel != NULL) {
        release_held(b);
        if (!b->single && b->nout > 0) {
            tg_buf_append(&b->out, "]", 1);
            b->channel->ops->message(b->channel, NULL, b->out.base, b->out.len);
        }
        b->channel->ops->release(b->channel, NULL);
        tg_buf_dispose(&b->out);
        tg_xfree(b);
        return;
    }
    struct tg_conn *c = b->conn;
    release_held(b);
    if (c != NULL) {
        c->exchange = NULL;
        c->on_abort = NULL;
        c->on_drain = NULL;
        if (b->nout > 0) {
            tg_buf_append(&b->out, "]", 1);
            tg_http_respond_owned(c, 200, NULL, "application/json", &b->out);
        } else {
            tg_http_respond(c, 202, NULL, NULL, "", 0);
        }
    }
    tg_buf_dispose(&b->out);
    tg_xfree(b);
}

/* ---- the sink ---------------------------------------------------------------------- */

/* Over HTTP a batch carries answers only; on a channel the rest goes straight to the channel. */
static void on_sink_message(struct tg_sink *sk, struct tg_call *k, const char *p, size_t n)
{
    struct tg_batch *b = (struct tg_batch *)sk;
    if (b->channel != NULL)
        b->channel->ops->message(b->channel, NULL, p, n);
}

static void on_sink_answer(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p,
                           size_t n)
{
    struct tg_batch *b = (struct tg_batch *)sk;
    if (n > 0)
        tg_batch_add(b, p, n); /* a bare status (202 for a notification) adds nothing */
}



static int on_sink_high(const struct tg_sink *sk)
{
    const struct tg_batch *b = (const struct tg_batch *)sk;
    return b->channel != NULL && b->channel->ops->high(b->channel);
}

static int on_sink_listening(const struct tg_sink *sk) { return 1; }

static void on_sink_release(struct tg_sink *sk, struct tg_call *k) { tg_batch_done((struct tg_batch *)sk); }

static const struct tg_sink_ops batch_sink_ops = {
    .message = on_sink_message,
    .answer = on_sink_answer,
    TG_SINK_NO_STREAM, /* only an HTTP exchange shows a status */
    .high = on_sink_high,
    .listening = on_sink_listening,
    .release = on_sink_release,
};

struct tg_batch *tg_batch_new(struct tg_server *srv, struct tg_conn *c, struct tg_sink *ch, int single)
{
    struct tg_batch *b = tg_xcalloc(1, sizeof(*b));
    b->sink.ops = &batch_sink_ops;
    b->srv = srv;
    b->pending = 1; /* held by the dispatch loop until every element is dispatched */
    b->single = single;
    tg_buf_init(&b->out);
    if (ch != NULL) {
        b->channel = ch;
        /* One message alone on a channel can wait for a human; elements of an array cannot. */
        b->sink.flags = single ? 0 : TG_SINK_NO_WAIT;
    } else {
        b->conn = c;
        b->sink.flags = TG_SINK_ANSWER_ONLY | TG_SINK_NO_WAIT;
        c->exchange = b;
        c->on_abort = on_batch_abort;
        c->on_drain = NULL;
    }
    return b;
}

struct tg_sink *tg_batch_element(struct tg_batch *b)
{
    b->pending++;
    return &b->sink;
}

void tg_batch_run(struct tg_batch *b, struct tg_exchange *x, const cJSON *array, int json_depth)
{
    struct tg_buf el;
    tg_buf_init(&el);
    for (const cJSON *e = array->child; e; e = e->next) {
        /* Each element goes through the same strict decoder as a single message. */
        el.len = 0;
        tg_json_write(&el, e);
        struct tg_msg m;
        const char *why = NULL;
        int code = tg_msg_decode(el.base, el.len, json_depth, &m, &why);
        if (code != 0) {
            char msg[160];
            snprintf(msg, sizeof(msg), "%s: %s", code == TG_RPC_PARSE_ERROR ? "Parse error" : "Invalid Request", why);
            tg_batch_add_error(b, m.id_raw, m.id_len, code, msg, NULL);
        } else if (m.kind == TG_MSG_REQUEST && m.mid == TG_M_INITIALIZE) {
            tg_batch_add_error(b, m.id_raw, m.id_len, TG_RPC_INVALID_REQUEST,
                               "Invalid Request: initialize cannot be batched", NULL);
        } else {
            tg_dispatch_message(x, tg_batch_element(b), &m);
        }
        tg_msg_dispose(&m);
    }
    tg_buf_dispose(&el);
}
