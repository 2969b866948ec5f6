/* The local shared store: a gateway without a cluster shares nothing, so every operation is
 * answered here, before it returns (core/call/shared.h). Decisions use the server's own counters,
 * which outlive every conf; the approvals queue is the server's own list of parked calls. */
#include "core/call/shared.h"

#include "core/call/approvals.h"
#include "core/call/call.h"
#include "core/call/gateway.h"

static struct tg_shared_job *local_decide(void *ud, const struct tg_shared_ask *q, struct tg_decision *d,
                                          tg_shared_decided_cb cb, void *cb_ud)
{
    struct tg_server *srv = ud;
    if (q->continuation) /* a later round of a call decided already: judged again, nothing reserved */
        tg_policy_decide_continuation(q->policy, srv->counters, &q->who, q->tool, q->args, q->now_ms, d);
    else
        tg_policy_decide_call(q->policy, srv->counters, &q->who, q->tool, q->args, q->now_ms, d);
    d->shared = 0;
    cb(cb_ud, TG_SHARED_DECIDED, d, NULL);
    return NULL;
}

static void local_detach(void *ud, struct tg_shared_job *job)
{
    (void)ud;
    (void)job; /* never made: every decision here is answered inside decide */
}

static void local_refund(void *ud, const struct tg_decision *d)
{
    struct tg_server *srv = ud;
    tg_policy_refund(srv->counters, d, wall_ms());
}

static void local_record_read(void *ud, const struct tg_policy *p, const struct tg_caller *who, int prompt,
                              const char *name, int64_t now_ms)
{
    struct tg_server *srv = ud;
    tg_policy_record_read(p, srv->counters, who, prompt, name, now_ms);
}

static void local_session_share(void *ud, struct tg_session *s, const struct tg_upstream_conf *uc)
{
    (void)ud;
    (void)s;
    (void)uc; /* no other member to serve it */
}

static void local_session_used(void *ud, struct tg_session *s, uint64_t now_ms)
{
    (void)ud;
    (void)s;
    (void)now_ms;
}

static void local_session_forget(void *ud, const char *id)
{
    (void)ud;
    (void)id;
}

static void local_session_fetch(void *ud, const char *id, tg_shared_session_cb cb, void *cb_ud)
{
    (void)ud;
    (void)id;
    cb(cb_ud, 0, NULL, NULL); /* a session this gateway does not hold exists nowhere */
}

static void local_approval_mirror(void *ud, struct tg_call *k)
{
    (void)ud;
    (void)k; /* srv->approvals is the queue: nothing to mirror */
}

static void local_approvals_list(void *ud, tg_approval_list_cb done, void *cb_ud)
{
    tg_approvals_local_list(ud, done, cb_ud);
}

static void local_approval_decide(void *ud, struct tg_slice id, int approve, const char *digest, const char *by,
                                  const char *reason, tg_approval_decide_cb done, void *cb_ud)
{
    tg_approvals_local_decide(ud, id, approve, digest, by, reason, done, cb_ud);
}

static const struct tg_shared_ops local_ops = {
    .decide = local_decide,
    .detach = local_detach,
    .refund = local_refund,
    .record_read = local_record_read,
    .session_share = local_session_share,
    .session_used = local_session_used,
    .session_forget = local_session_forget,
    .session_fetch = local_session_fetch,
    .approval_park = local_approval_mirror,
    .approval_gone = local_approval_mirror,
    .approvals_list = local_approvals_list,
    .approval_decide = local_approval_decide,
};

void tg_shared_local(struct tg_shared *st, struct tg_server *srv)
{
    st->ops = &local_ops;
    st->ud = srv;
}
