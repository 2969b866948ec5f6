/* How a session ends (core/gate/dispatch.h): its client deletes it or goes, another cluster
 * member's client deleted it, or a reload removed its upstream. The upstream ending that a kind
 * reports (its link died) is the call floor's (tg_call_upstream_gone), which this one uses. */
#include "core/gate/dispatch.h"

#include <stdio.h>

#include "core/call/approvals.h"
#include "core/call/call.h"
#include "core/call/gateway.h"
#include "core/call/session.h"
#include "upstream/pool/pool.h"

void tg_dispatch_end_session(struct tg_server *srv, struct tg_session *s, enum tg_end_how how)
{
    /* Its parked calls go with it, however it ends: nobody is there for their answer, and an
     * approval must not send one on a session that is gone. */
    tg_approvals_withdraw(s, how == TG_END_CLIENT_GONE || how == TG_END_DELETE ? "cancelled" : "session");
    if (!s->live)
        return;
    if (how == TG_END_DELETE && s->shared)
        srv->store.ops->session_forget(srv->store.ud, s->id_str); /* for every member */
    if (how != TG_END_ELSEWHERE) /* the member that was asked closed it upstream */
        tg_call_close_upstream_session(srv, s);
    tg_call_end_get_stream(s);
    tg_call_end_session_calls(s);
    tg_session_remove(srv->sessions, s);
}

void tg_dispatch_upstream_removed(struct tg_server *srv, struct tg_session *s)
{
    char why[160];
    snprintf(why, sizeof(why), "upstream %s was removed by a configuration reload",
             (size_t)s->upstream < srv->nupstreams ? tg_upstream_conf(srv->upstreams[s->upstream])->name : "-");
    tg_call_upstream_gone(s, why, 1012, "upstream removed");
}
