/* What every sink shares (see core/call/sink.h). */
#include "core/call/sink.h"

#include "core/base/buf.h"
#include "core/wire/msg.h"

void tg_sink_nop(struct tg_sink *sk, struct tg_call *k) { (void)sk, (void)k; }

void tg_sink_nop_message(struct tg_sink *sk, struct tg_call *k, const char *p, size_t n)
{
    (void)sk, (void)k, (void)p, (void)n;
}

void tg_sink_nop_answer(struct tg_sink *sk, struct tg_call *k, int status, const char *extra, const char *p,
                        size_t n)
{
    (void)sk, (void)k, (void)status, (void)extra, (void)p, (void)n;
}

void tg_sink_nop_poll(struct tg_sink *sk, struct tg_call *k, long retry_ms) { (void)sk, (void)k, (void)retry_ms; }
int tg_sink_never_high(const struct tg_sink *sk) { (void)sk; return 0; }
int tg_sink_always_listening(const struct tg_sink *sk) { (void)sk; return 1; }

static const struct tg_sink_ops discard_ops = {
    .message = tg_sink_nop_message,
    .answer = tg_sink_nop_answer,
    TG_SINK_NO_STREAM,
    TG_SINK_NO_CLIENT,
    .release = tg_sink_nop,
};
struct tg_sink tg_sink_discard = {&discard_ops, TG_SINK_ANSWER_ONLY | TG_SINK_NO_WAIT};

void tg_sink_refuse(struct tg_sink *sk, int status, const char *id, size_t idn, int code, const char *msg,
                    const char *data)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_rpc_error(&b, id, idn, code, msg, data);
    sk->ops->answer(sk, NULL, status, NULL, b.base, b.len);
    tg_buf_dispose(&b);
    sk->ops->release(sk, NULL);
}

void tg_sink_accept(struct tg_sink *sk)
{
    sk->ops->bare(sk, NULL, 202, NULL, NULL, 0);
    sk->ops->release(sk, NULL);
}

void tg_sink_answer_empty(struct tg_sink *sk, const struct tg_msg *m)
{
    if (m->kind == TG_MSG_NOTIFICATION) {
        tg_sink_accept(sk);
        return;
    }
    struct tg_buf out;
    tg_buf_init(&out);
    tg_buf_appends(&out, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(&out, m->id_raw, m->id_len);
    tg_buf_appends(&out, ",\"result\":{}}");
    sk->ops->answer(sk, NULL, 200, NULL, out.base, out.len);
    sk->ops->release(sk, NULL);
    tg_buf_dispose(&out);
}
