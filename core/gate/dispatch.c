#include "core/gate/dispatch.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/upauth.h"
#include "core/call/approvals.h"
#include "core/call/approvals_modes.h"
#include "core/bridge/input.h"
#include "core/bridge/listen.h"
#include "core/call/audit.h"
#include "core/call/call.h"
#include "core/base/log.h"
#include "core/mcp/era.h"
#include "core/mcp/legacy.h"
#include "core/mcp/mrtr.h"
#include "core/mcp/listen.h"
#include "core/mcp/rewrite.h"
#include "core/gate/bind.h"
#include "core/gate/reads.h"
#include "core/gate/nonstandard.h"
#include "core/gate/pins.h"
#include "core/gate/scopes.h"
#include "core/gate/tasks.h"
#include "core/base/json.h"
#include "core/wire/msg.h"
#include "core/call/roots.h"
#include "core/call/gateway.h"
#include "core/call/shared.h"
#include "core/call/sink.h"
#include "core/base/sha256.h"
#include "policy/auth.h"
#include "policy/policy.h"
#include "upstream/pool/pool.h"

/* ---- answers made here, before any call ----------------------------------------------- */

/* A request the upstream hears as 2026-07-28: its Mcp-* headers, from the body. A 2026 request
 * to a 2025 upstream loses its claim instead (that upstream's session speaks 2025). *meta_cut:
 * 1 if the only change to m's tree since it was decoded is params._meta removed whole. */
static void up_headers(const struct tg_exchange *x, struct tg_call *k, struct tg_msg *m, int *meta_cut)
{
    *meta_cut = 0;
    if (x->up_modern && x->era == TG_ERA_2025) {
        tg_mcp_add_claim(m->root, x->sess->up_modern ? x->sess->u.client_caps : NULL,
                         x->sess->log_level); /* a 2025 session's request, as 2026 has it */
        tg_msg_edited(m);
    }
    if (!x->up_modern) {
        /* A 2025 upstream session hears 2025 only: no 2026 claim, no MRTR fields (a dual-era
         * upstream would take such a request for a 2026 one). */
        cJSON *params = tg_json_get(m->root, "params");
        if (cJSON_IsObject(params)) {
            if (tg_json_get(params, "_meta") != NULL) {
                int clean = !m->edited;
                if (tg_mcp_strip_claim(m->root)) {
                    *meta_cut = clean && m->src_meta_len > 0 && tg_json_get(params, "_meta") == NULL;
                    tg_msg_edited(m);
                }
            }
            if (x->era == TG_ERA_2025) {
                cJSON *a = cJSON_DetachItemFromObjectCaseSensitive(params, "requestState");
                cJSON *b = cJSON_DetachItemFromObjectCaseSensitive(params, "inputResponses");
                if (a != NULL || b != NULL) {
                    tg_msg_edited(m);
                    *meta_cut = 0;
                }
                cJSON_Delete(a);
                cJSON_Delete(b);
            }
        }
        return;
    }
    struct tg_buf h;
    tg_buf_init(&h);
    tg_mcp_upstream_headers(&h, m->root, x->proto, x->fwd_headers);
    k->up_headers = h.base; /* NUL-terminated; the call frees it */
}

/* A decision is counted; a deny or a limit is audited and answered, and the call ends
 * (returns 1). The same for a local decision and one that waited for Redis. */
static int refused(struct tg_server *srv, struct tg_call *k, const struct tg_decision *dec)
{
    srv->metrics.decisions[dec->verdict]++;
    if (dec->verdict != TG_VERDICT_DENY && dec->verdict != TG_VERDICT_LIMITED)
        return 0;
    tg_call_audit(k, dec->verdict == TG_VERDICT_DENY ? "deny" : "limited", -1, NULL, NULL);
    tg_call_count_refusal(k, dec);
    tg_call_answer_decision(k, dec, NULL);
    tg_call_close(k);
    return 1;
}

/* The call's gateway id, the id the upstream sees. */
static void set_gid(struct tg_server *srv, struct tg_call *k)
{
    k->gid = ++srv->next_gid;
    /* Decimal, without printf (once per call). */
    char tmp[24];
    size_t t = 0;
    uint64_t v = k->gid;
    do {
        tmp[t++] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    k->gid_len = 0;
    while (t > 0)
        k->gid_str[k->gid_len++] = tmp[--t];
    k->gid_str[k->gid_len] = '\0';
}

/* The message as the upstream gets it, into out: the call's gateway id, the upstream's headers,
 * and for a decided call of a 2025 session on a 2026 upstream a copy (input_required would
 * need it again). */
static void serialize(struct tg_exchange *x, struct tg_call *k, struct tg_msg *m, int decided, struct tg_buf *out)
{
    set_gid(x->srv, k);
    int meta_cut;
    up_headers(x, k, m, &meta_cut);
    if (m->src != NULL && !m->edited && x->era == TG_ERA_2025 && !x->up_modern && k->mrtr == NULL &&
        tg_json_plain(m->src, m->src_len))
        /* Unchanged since it was checked, and plain (no escape, nothing outside printable ASCII
         * and spaces): its own bytes with the id replaced are the tree the policy saw, written
         * with the client's spacing, so the upstream cannot read anything else in them. Any
         * other request is written again from its tree. */
        tg_msg_splice_id(out, m->src, m->src_len, m->src_id_off, m->id_len, k->gid_str, k->gid_len);
    else if (m->src != NULL && meta_cut && !x->up_modern && tg_json_plain(m->src, m->src_len) &&
             tg_msg_splice_id_cut(out, m->src, m->src_len, m->src_id_off, m->id_len, k->gid_str, k->gid_len,
                                  m->src_meta_off, m->src_meta_len) == 0)
        /* The same when the only change is params._meta gone whole (a 2026 claim, for a 2025
         * upstream): its bytes, with the member's and one comma's left out, are that tree. */
        ;
    else
        tg_msg_write_with_id(out, m, k->gid);
    if (x->era == TG_ERA_2025 && x->up_modern && k->mrtr == NULL && decided) {
        k->resend = tg_xmalloc(out->len + 1);
        memcpy(k->resend, out->base, out->len);
        k->resend[out->len] = '\0';
        tg_bridge_input_filter(k); /* an input_required answer is the bridge's to carry */
    }
}

/* An approve decision: the call waits for a human, unless it cannot (a batch, a full queue, a
 * grant holding its share of it): refused at once. The serialized message moves into the call. */
static void park_admitted(struct tg_call *k, struct tg_buf *out, int in_batch, int retry)
{
    k->held = *out;
    tg_buf_init(out);
    char msg[sizeof(k->dec->message)];
    const char *reason;
    int why = tg_approvals_room(k, in_batch && !retry, msg, sizeof(msg), &reason);
    if (why < 0) {
        tg_approvals_park(k);
        return;
    }
    tg_call_audit(k, "rejected", -1, NULL, why == TG_APPROVAL_REFUSED_BATCH ? "(batch)" : "(queue full)");
    tg_approvals_refuse(k, msg, reason, 1); /* a free queue, or the call alone, can take it */
    tg_call_close(k);
}

/* A retry call whose record the shared store looked up: none was there, it parks as the record. */
static void park_found_none(struct tg_call *k, struct tg_buf *out) { park_admitted(k, out, 0, 1); }

static void park(struct tg_call *k, struct tg_buf *out, int in_batch)
{
    /* 1 answered at once (a batch may be); -1 answered already, or park_found_none parks it later */
    int retry = tg_approvals_admit(k, out, park_found_none);
    if (retry < 0)
        return;
    park_admitted(k, out, in_batch, retry);
}

/* What the continuation reads of a request while it is still the transport's: on the gate's
 * stack, and k->asking while the store decides inline. */
struct tg_gate_request {
    struct tg_exchange *x;
    struct tg_msg *m;
    cJSON *params;
    const cJSON *args; /* tools/call */
    int listen, retry; /* retry: tg_mcp_mrtr_retry's (2 continues a call held open upstream) */
    const char *parked;
};

/* The arguments' digest (audit log, approval queue): a tenth of a call, made only for a reader. */
static void digest(struct tg_call *k, const struct tg_gate_request *r)
{
    if (k->mrtr != NULL) {
        tg_mcp_mrtr_digest_from(k->mrtr, r->params);
        tg_hex_encode(k->mrtr->b.args_sha256, 32, k->args_sha256); /* the same digest, made once */
    } else {
        tg_audit_args_hash(r->args, k->args_sha256);
    }
}

/* The decision waits for the shared store: what the continuation needs of the request is kept now
 * (its tree is the transport's and goes when the gate returns). It may yet park: the digest too. */
static void hold(struct tg_call *k, const struct tg_gate_request *r, struct tg_shared_job *job)
{
    k->deciding = job;
    digest(k, r);
    if (r->retry == 2) {
        k->resume_params = cJSON_Duplicate(r->params, 1);
        tg_strlcpy(k->resume_parked, r->parked, sizeof(k->resume_parked));
    } else {
        serialize(r->x, k, r->m, 1, &k->held);
        if (k->mrtr != NULL)
            tg_mcp_mrtr_keep_args(k->mrtr, r->params);
    }
}

/* The shared store could not decide and on_unavailable = "deny": fail closed, since no counter
 * could be reserved nothing is forwarded. */
static void fail_closed(struct tg_call *k, const char *why)
{
    k->srv->metrics.decisions[TG_VERDICT_DENY]++;
    snprintf(k->dec->message, sizeof(k->dec->message), "%s", why);
    snprintf(k->dec->rule, sizeof(k->dec->rule), "(cluster unavailable)");
    tg_call_audit(k, "unavailable", -1, NULL, NULL);
    struct tg_buf data, e;
    tg_buf_init(&data);
    tg_buf_init(&e);
    const char *up = tg_call_upstream_name(k) ? tg_call_upstream_name(k) : "";
    tg_buf_appends(&data, "{\"upstream\":");
    tg_json_write_string(&data, up, strlen(up));
    tg_buf_appends(&data, ",\"reason\":");
    tg_json_write_string(&data, why, strlen(why));
    tg_buf_append(&data, "}", 2); /* with its NUL: tg_rpc_error takes a C string */
    tg_rpc_error(&e, k->client_id, k->client_id_len, TG_RPC_UPSTREAM, why, data.base);
    if (k->sink != NULL)
        k->sink->ops->answer(k->sink, k, 200, NULL, e.base, e.len);
    tg_buf_dispose(&e);
    tg_buf_dispose(&data);
    tg_call_close(k);
}

/* A decided (or undecided) request that may go: listened to here, resumed, parked or sent. r:
 * the request (decided inline), or NULL when the decision waited and k holds it. */
static void go_on(struct tg_call *k, struct tg_gate_request *r)
{
    struct tg_buf out;
    if (r == NULL) {
        if (k->resume_params != NULL) {
            tg_bridge_input_resume(k, k->dec, k->resume_parked, k->resume_params);
            return;
        }
        out = k->held;
        tg_buf_init(&k->held);
    } else {
        struct tg_exchange *x = r->x;
        if (r->listen && !x->up_modern) {
            /* A 2025 upstream session has no listen: its GET stream serves every listen of it. */
            tg_bridge_listen_local(k, r->params, x->up_caps);
            return;
        }
        if (r->retry == 2) {
            /* The retry of a call held open upstream for its server request: decided again, it
             * now carries the answer up and the held call answers through this client. */
            tg_bridge_input_resume(k, k->dec, r->parked, r->params);
            return;
        }
        tg_roots_advertise(tg_conf_roots_for(x->grant, x->uc), r->m); /* pinned roots: the server asks the gateway */
        tg_buf_init(&out);
        serialize(x, k, r->m, k->tool != NULL, &out);
        if (k->mrtr != NULL)
            tg_mcp_mrtr_keep_args(k->mrtr, r->params); /* written: an input_required answer digests them */
    }
    if (k->dec != NULL && k->dec->verdict == TG_VERDICT_APPROVE) {
        park(k, &out, k->decide_no_wait);
        return;
    }
    tg_call_send(k, out.base, out.len, k->decide_timeout_ms); /* 0 for a listen: it lasts */
    tg_buf_dispose(&out);
}

/* The one continuation after a decision, the store's inline (k->asking is the request) or later
 * (k holds it), the policy's for reads, or none needed (d NULL). */
static void on_decided(void *ud, enum tg_shared_outcome o, struct tg_decision *d, const char *why)
{
    struct tg_call *k = ud;
    struct tg_gate_request *r = k->asking;
    k->deciding = NULL;
    if (o == TG_SHARED_UNAVAILABLE) {
        fail_closed(k, why);
        return;
    }
    if (d != NULL) {
        if (d != k->dec)
            *k->dec = *d; /* TG_SHARED_FALLBACK too: decided on this gateway's counters */
        if (r != NULL && r->m->mid == TG_M_TOOLS_CALL &&
            (k->srv->audit != NULL || k->dec->verdict == TG_VERDICT_APPROVE))
            digest(k, r);
        if (refused(k->srv, k, k->dec))
            return;
    }
    go_on(k, r);
}

/* A client request: decide it (tools/call, resources/read, prompts/get), then forward, park or refuse. */
static void handle_request(struct tg_exchange *x, struct tg_sink *sk, struct tg_policy *pol, struct tg_msg *m)
{
    struct tg_server *srv = x->srv;
    struct tg_session *s = x->sess;
    const struct tg_grant_conf *g = x->grant;
    const struct tg_limits *lim = &srv->conf->limits;
    /* Stateless (2026-07-28) requests of one grant share a session but not an id space: their
     * ids may repeat, and they are cancelled by closing their stream, never by id. */
    char *key = x->era == TG_ERA_2026 ? NULL : tg_mcp_id_key(m->id_raw, m->id_len);
    for (struct tg_list *l = s->calls.next; key && l != &s->calls; l = l->next) {
        struct tg_call *o = tg_container_of(l, struct tg_call, slink);
        if (o->kind == KIND_REQUEST && o->id_key && strcmp(o->id_key, key) == 0) {
            tg_xfree(key);
            tg_sink_refuse(sk, 400, NULL, 0, TG_RPC_INVALID_REQUEST,
                      "Invalid Request: a request with this id is already in flight in this session", NULL);
            return;
        }
    }
    if (s->inflight >= (unsigned)lim->inflight_per_session) {
        tg_xfree(key);
        srv->metrics.limit_inflight++;
        tg_sink_refuse(sk, 429, m->id_raw, m->id_len, TG_RPC_UPSTREAM,
                  "Too many calls in flight for this session (limits.inflight_per_session)", NULL);
        return;
    }
    cJSON *params = tg_json_get(m->root, "params");
    int listen = x->era == TG_ERA_2026 && m->mid == TG_M_LISTEN;
    if (listen) {
        unsigned n = 0;
        for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next)
            n += tg_container_of(l, struct tg_call, slink)->is_listen;
        if (n >= (unsigned)lim->listens_per_grant) {
            tg_xfree(key);
            srv->metrics.limit_inflight++;
            tg_sink_refuse(sk, 429, m->id_raw, m->id_len, TG_RPC_UPSTREAM,
                   "Too many subscriptions/listen streams for this grant (limits.listens_per_grant)", NULL);
            return;
        }
        tg_mcp_listen_filter_request(params, pol); /* resources the grant may not read are not listened to */
        tg_msg_edited(m);
    }
    /* Bound first: a 2026 retry's envelope was made of the bound arguments too. */
    struct tg_decision *bound = m->mid == TG_M_TOOLS_CALL ? tg_gate_bind(x, pol, m, tg_dispatch_subject(x)) : NULL;
    struct tg_mcp_mrtr_call *mc = NULL;
    int retry = 0;
    char parked[40] = "";
    if (x->era == TG_ERA_2026) {
        /* A retry is checked before anything is decided: its envelope must open for the call it
         * claims to continue, and the upstream sees only its own state. */
        if (tg_json_get(params, "requestState") != NULL || tg_json_get(params, "inputResponses") != NULL)
            tg_msg_edited(m); /* tg_mcp_mrtr_retry may change them: the request is written from its tree */
        mc = tg_xcalloc(1, sizeof(*mc));
        tg_mcp_mrtr_bind_later(mc, g->name, x->uc->name, m->method, params); /* a retry makes the digest */
        mc->client_caps = x->client_caps;
        const struct tg_roots *pinned = tg_conf_roots_for(g, x->uc);
        mc->pinned_roots = pinned != NULL ? pinned->result : NULL; /* for this retry only: the conf's */
        char why[200];
        retry = tg_mcp_mrtr_retry(&srv->mrtr, params, mc, (int64_t)wall_ms(), parked, sizeof(parked), why, sizeof(why));
        mc->pinned_roots = NULL;
        if (retry < 0) {
            tg_xfree(key);
            tg_xfree(mc);
            tg_call_decision_free(bound);
            char esc[96];
            tg_log(TG_LOG_INFO, "2026-07-28 retry refused", "grant=%s upstream=%s method=%s why=%s", g->name,
                   x->uc->name, m->method, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(why)));
            tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS, why, NULL);
            return;
        }
    }
    struct tg_decision *dec = NULL;
    const char *tool = NULL;
    const cJSON *args = NULL;
    int list = -1; /* a resources, templates or prompts list: its answer is filtered */
    if (m->mid == TG_M_TOOLS_CALL) {
        cJSON *name = tg_json_get(params, "name");
        cJSON *a = tg_json_get(params, "arguments");
        if (!cJSON_IsObject(params) || !cJSON_IsString(name) || (a != NULL && !cJSON_IsObject(a))) {
            tg_xfree(key);
            tg_xfree(mc);
            tg_call_decision_free(bound);
            tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                      "tools/call needs params.name (a string) and optional params.arguments (an object)", NULL);
            return;
        }
        tool = name->valuestring;
        args = a;
        if (tg_gate_scopes_refused(x, sk, m, params, pol, tool)) {
            tg_xfree(key);
            tg_xfree(mc);
            tg_call_decision_free(bound);
            return;
        }
        dec = bound != NULL ? bound : tg_call_decision_new(); /* decided through the shared store once the call is made */
    } else if (m->mid != TG_M_TOOLS_LIST && m->mid != TG_M_INITIALIZE && !listen) {
        const char *bad;
        if (tg_reads_decide(m, params, pol, &dec, &tool, &list, &bad) < 0) {
            tg_xfree(key);
            tg_xfree(mc);
            tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS, bad, NULL);
            return;
        }
        if (dec != NULL && dec->verdict != TG_VERDICT_DENY && tg_gate_scopes_refused(x, sk, m, params, pol, tool)) {
            tg_call_decision_free(dec);
            tg_xfree(key);
            tg_xfree(mc);
            return;
        }
        tg_reads_record(x, pol, m, tool, dec, tg_dispatch_subject(x), tg_dispatch_issuer(x)); /* for history */
    }
    srv->metrics.rpc_requests++;
    struct tg_call *k = tg_call_new(srv, s, sk, KIND_REQUEST);
    tg_call_upauth_from(k, x);
    k->era = x->era;
    tg_strlcpy(k->proto, x->proto, sizeof(k->proto));
    s->inflight++;
    k->policy = tg_policy_ref(pol);
    k->method = tg_xstrdup(m->method);
    k->subject = tg_xstrdup(tg_dispatch_subject(x));
    const char *iss = tg_dispatch_issuer(x);
    k->issuer = iss[0] != '\0' ? tg_xstrdup(iss) : NULL;
    {
        cJSON *meta = tg_json_get(params, "_meta");
        cJSON *tok = tg_json_get(meta, "progressToken");
        if (cJSON_IsString(tok))
            k->progress_token = tg_mcp_id_key_string(tok->valuestring);
        else if (cJSON_IsNumber(tok))
            k->progress_token = tg_mcp_id_key_number(tok);
        k->task_aug = cJSON_IsObject(tg_json_get(params, "task"));
        k->tasks_ext = x->era == TG_ERA_2026 && (x->client_caps & TG_CAP_TASKS);
    }
    k->id_key = key;
    if (mc != NULL && dec != NULL) {
        k->mrtr = mc; /* the binding's strings are the call's own from here on */
        tg_bridge_input_filter(k); /* 2026 has no server requests: one that comes is the bridge's */
        mc->b.grant = k->grant;
        mc->b.upstream = x->uc->name;
        mc->b.method = k->method;
        mc = NULL;
    }
    tg_xfree(mc);
    k->is_tools_list = m->mid == TG_M_TOOLS_LIST;
    k->list_kind = list > 0 ? list : 0;
    k->is_listen = listen;
    k->is_init = m->mid == TG_M_INITIALIZE;
    k->client_id = m->id_raw;
    k->client_id_len = m->id_len;
    m->id_raw = NULL;
    if (dec != NULL) {
        k->dec = dec;
        k->tool = tg_xstrdup(tool);
        if (k->mrtr != NULL)
            k->mrtr->b.name = k->tool;
        if (m->mid == TG_M_TOOLS_CALL)
            tg_call_tools_call_begin(k, params, args); /* its audited arguments, an echoed context */
    }
    struct tg_gate_request r = {x, m, params, args, listen, retry, parked};
    k->decide_no_wait = (sk->flags & TG_SINK_NO_WAIT) != 0;
    k->decide_timeout_ms = listen ? 0 : (uint64_t)x->uc->call_timeout_ms;
    k->asking = &r;
    if (m->mid == TG_M_TOOLS_CALL && bound == NULL && !(x->uc->pins != NULL && tg_gate_pins_refused(x, pol, tool, dec))) {
        /* Inline by the local store (and a cluster's when no counter is reached), else later. */
        const char *sess = tg_call_counter_session(x->era, g->name, s);
        struct tg_shared_ask q = {pol, {g->name, sess, x->uc->name, k->subject, k->issuer}, tool, args,
                                  (int64_t)wall_ms(),
                                  retry >= 1};
        struct tg_shared_job *job = srv->store.ops->decide(srv->store.ud, &q, dec, on_decided, k);
        if (job != NULL)
            hold(k, &r, job);
    } else {
        on_decided(k, TG_SHARED_DECIDED, dec, NULL); /* decided by the policy above, or nothing to decide */
    }
    k->asking = NULL; /* (a call closed inside stays readable until the end of the iteration) */
}

/* The id key a notifications/cancelled names (params.requestId, of any length: ids are bounded
 * only by limits.body_bytes), or NULL. */
static char *cancel_key(struct tg_msg *m)
{
    cJSON *rid = tg_json_get(tg_json_get(m->root, "params"), "requestId");
    return cJSON_IsString(rid) ? tg_mcp_id_key_string(rid->valuestring) : tg_mcp_id_key_number(rid);
}

/* A cancel naming a forwarded call of this session: its requestId becomes our id. 0 if it names
 * none (nothing to cancel upstream). A 2026-07-28 upstream is told by the end of the call's
 * request instead (it has no notifications/cancelled over HTTP): the call is let go (0). */
static int rewrite_cancel(struct tg_session *s, struct tg_msg *m, const char *want)
{
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->kind != KIND_REQUEST || k->id_key == NULL || !k->forwarded || strcmp(k->id_key, want) != 0)
            continue;
        if (s->up_modern) {
            tg_call_client_gone(k);
            return 0;
        }
        cJSON *n = tg_json_number_raw(k->gid_str, k->gid_len);
        if (n == NULL)
            return 0;
        cJSON_ReplaceItemInObjectCaseSensitive(tg_json_get(m->root, "params"), "requestId", n);
        tg_msg_edited(m);
        return 1;
    }
    return 0;
}

/* Notifications and responses from the client. */
static void handle_forward(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m)
{
    struct tg_server *srv = x->srv;
    struct tg_session *s = x->sess;
    if (m->kind == TG_MSG_NOTIFICATION)
        srv->metrics.rpc_notifications++;
    else
        srv->metrics.rpc_responses++;
    if (m->kind == TG_MSG_RESPONSE && tg_bridge_input_answer(srv, s, m)) {
        tg_sink_accept(sk); /* an answer to the gateway's own request for input */
        return;
    }
    if (m->kind == TG_MSG_RESPONSE && !tg_mcp_take_server_request(s, m->id_raw, m->id_len)) {
        /* Only answers to requests the server actually sent go up; anything else is a forgery. */
        tg_sink_refuse(sk, 400, NULL, 0, TG_RPC_INVALID_REQUEST,
               "Invalid Request: no server request with this id is waiting for an answer", NULL);
        return;
    }
    if (tg_roots_drop(tg_conf_roots_for(x->grant, x->uc), m)) {
        tg_sink_accept(sk); /* the server's roots are the operator's, not the client's */
        return;
    }
    if (m->kind == TG_MSG_NOTIFICATION && m->mid == TG_M_CANCELLED) {
        /* A call parked for approval is withdrawn and never forwarded, whatever an approver does
         * later; one in flight upstream is cancelled there; anything else names nothing. */
        char *want = cancel_key(m);
        int upstream = want != NULL && !tg_approvals_cancel(s, want) && rewrite_cancel(s, m, want);
        free(want);
        if (!upstream) {
            tg_sink_accept(sk);
            return;
        }
    }
    struct tg_call *k = tg_call_new(srv, s, sk, KIND_FORWARD);
    tg_call_upauth_from(k, x);
    k->era = x->era;
    tg_strlcpy(k->proto, x->proto, sizeof(k->proto));
    struct tg_buf out;
    tg_buf_init(&out);
    int meta_cut;
    up_headers(x, k, m, &meta_cut); /* a notification is always written from its tree */
    tg_json_write(&out, m->root);
    tg_call_send(k, out.base, out.len, (uint64_t)x->uc->call_timeout_ms);
    tg_buf_dispose(&out);
}

/* ---- 2025 sessions on a 2026-07-28-only upstream ------------------------------------------ */

static int modern_only(const struct tg_exchange *x)
{
    struct tg_server *srv = x->srv;
    return (size_t)x->upstream < srv->nupstreams && srv->upstreams[x->upstream] != NULL &&
           tg_upstream_era(srv->upstreams[x->upstream]) == TG_UP_ERA_2026;
}

/* What the gateway answers itself for such a session: initialize (from the upstream's discover
 * result), and the 2025 lifecycle the upstream no longer has. Returns 1 if m was answered. */
static int bridged_lifecycle(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m)
{
    struct tg_session *s = x->sess;
    if (m->kind == TG_MSG_RESPONSE || (!s->up_modern && s->u.bridge != NULL))
        return 0; /* (a stateless session's own initialize: its upstream speaks 2025) */
    if (m->kind == TG_MSG_REQUEST && m->mid == TG_M_INITIALIZE) {
        cJSON *caps = tg_json_get(tg_json_get(m->root, "params"), "capabilities");
        if (s->up_modern)
            free(s->u.client_caps);
        s->u.client_caps = cJSON_IsObject(caps) ? cJSON_PrintUnformatted(caps) : NULL;
        s->up_modern = 1;
        s->init_pending = 0;
        struct tg_buf out;
        tg_buf_init(&out);
        tg_mcp_bridged_init(s, m, x->uc, NULL, &out);
        const char *d = tg_upstream_discover(x->srv->upstreams[x->upstream]);
        if (d != NULL) {
            cJSON *res = cJSON_Parse(d);
            char *c = cJSON_PrintUnformatted(tg_json_get(res, "capabilities"));
            out.len = 0;
            tg_mcp_bridged_init(s, m, x->uc, c, &out);
            free(c);
            cJSON_Delete(res);
        }
        x->srv->store.ops->session_share(x->srv->store.ud, s, x->uc);
        sk->ops->answer(sk, NULL, 200, NULL, out.base, out.len);
        sk->ops->release(sk, NULL);
        tg_buf_dispose(&out);
        return 1;
    }
    if (!s->up_modern)
        return 0;
    int subscribe = m->mid == TG_M_RESOURCES_SUBSCRIBE;
    if (m->kind == TG_MSG_REQUEST && (subscribe || m->mid == TG_M_RESOURCES_UNSUBSCRIBE)) {
        /* The session's listen upstream is made again with the new list of resources. */
        const struct tg_policy *pol = tg_conf_policy_for(x->srv->conf, x->grant, x->upstream);
        struct tg_decision d;
        cJSON *uri;
        const char *bad;
        int rc = tg_reads_decide_uri(m, tg_json_get(m->root, "params"), pol, &d, &uri, &bad); /* the normal form */
        if (rc < 0) {
            tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS, bad, NULL);
            return 1;
        }
        if (rc == 1 && d.verdict != TG_VERDICT_ALLOW) {
            tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_DENIED, d.message[0] ? d.message : "resource denied by policy", NULL);
            return 1;
        }
        if (tg_bridge_listen_resubscribe(s, uri->valuestring, subscribe) != 0) {
            tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                               "too many resource subscriptions on this session (at most 256 resources, 64 KiB of URIs)",
                               NULL);
            return 1;
        }
        tg_sink_answer_empty(sk, m);
        return 1;
    }
    if (m->kind == TG_MSG_REQUEST && m->mid == TG_M_LOGGING_SET_LEVEL) {
        /* 2026 has no setLevel: the level goes with each request as _meta logLevel. */
        cJSON *level = tg_json_get(tg_json_get(m->root, "params"), "level");
        unsigned l = cJSON_IsString(level) ? tg_mcp_log_level(level->valuestring) : 0;
        if (l == 0) {
            tg_sink_refuse(sk, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS, "logging/setLevel needs a known params.level", NULL);
            return 1;
        }
        s->log_level = (unsigned char)l;
        tg_sink_answer_empty(sk, m);
        return 1;
    }
    switch (m->mid) {
    case TG_M_INITIALIZED:
    case TG_M_PING:
    case TG_M_LOGGING_SET_LEVEL:
    case TG_M_RESOURCES_SUBSCRIBE:
    case TG_M_RESOURCES_UNSUBSCRIBE:
    case TG_M_ROOTS_LIST_CHANGED:
        tg_sink_answer_empty(sk, m);
        return 1;
    default:
        return 0;
    }
}

void tg_dispatch_message(struct tg_exchange *x, struct tg_sink *sk, struct tg_msg *m)
{
    struct tg_server *srv = x->srv;
    struct tg_policy *pol = tg_conf_policy_for(srv->conf, x->grant, x->upstream);
    if (x->era == TG_ERA_2025 && x->sess != NULL && (x->sess->up_modern || modern_only(x))) {
        if (bridged_lifecycle(x, sk, m))
            return;
        if (x->sess->up_modern) {
            x->up_modern = 1; /* heard upstream as 2026-07-28 */
            tg_strlcpy(x->proto, TG_MCP_MODERN_VERSION, sizeof(x->proto));
        }
    }
    if (srv->draining && m->kind == TG_MSG_REQUEST) {
        /* A drain finishes what runs and starts nothing new (on a channel or a pipelined request). */
        tg_sink_refuse(sk, 503, m->id_raw, m->id_len, TG_RPC_UPSTREAM, "the gateway is shutting down", NULL);
        return;
    }
    /* Messages a client may send: standard MCP methods, methods the policy names, and
     * responses to the server's requests. */
    if (m->kind == TG_MSG_NOTIFICATION && tg_msg_is_standard(m, TG_MSG_REQUEST)) {
        /* A request method without an id would run upstream unanswered and undecided. */
        srv->metrics.decisions[1]++;
        char msg[200];
        snprintf(msg, sizeof(msg), "Invalid Request: %s is a request and needs an id", m->method);
        tg_sink_refuse(sk, 400, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
        return;
    }
    if (m->kind == TG_MSG_REQUEST && tg_gate_tasks(x, sk, m, tg_dispatch_subject(x)))
        return; /* a task of the gateway's own, or one the caller does not own */
    int listen = x->era == TG_ERA_2026 && m->kind == TG_MSG_REQUEST && m->mid == TG_M_LISTEN;
    if (m->kind != TG_MSG_RESPONSE && !listen && !tg_msg_is_standard(m, m->kind) &&
        !tg_policy_method_allowed(pol, m->method)) {
        tg_gate_refuse_nonstandard(x, sk, m, tg_dispatch_subject(x));
        return;
    }
    if (x->uc->init_local && m->kind != TG_MSG_RESPONSE &&
        (m->mid == TG_M_INITIALIZED || m->mid == TG_M_PING)) {
        tg_sink_answer_empty(sk, m); /* the gateway owns the lifecycle of a local-initialize upstream */
        return;
    }
    if (m->kind == TG_MSG_REQUEST)
        handle_request(x, sk, pol, m);
    else
        handle_forward(x, sk, m);
}

/* ---- sessions ------------------------------------------------------------------------------ */

int tg_dispatch_listen(struct tg_exchange *x, struct tg_sink *sk, int for_channel)
{
    struct tg_session *s = x->sess;
    if (for_channel && (x->uc->init_local || tg_call_kind_has_link(x->srv, s)))
        return -1; /* the server's own messages come on the session's link */
    struct tg_call *k = tg_call_new(x->srv, s, sk, KIND_GET);
    tg_call_upauth_from(k, x);
    s->get_stream = k;
    if (s->up_modern) {
        /* A 2026-07-28 upstream has no GET stream: the session's stream is a listen for every
         * list change the upstream declared, and the resources the client subscribes to. */
        k->policy = tg_policy_ref(tg_conf_policy_for(x->srv->conf, x->grant, x->upstream));
        tg_bridge_listen_upstream(k, s->listen_uris); /* the resources subscribed to so far */
        return 0;
    }
    tg_call_send(k, NULL, 0, 0);
    return 0;
}

int tg_dispatch_session_open(struct tg_exchange *x)
{
    struct tg_server *srv = x->srv;
    if (srv->draining)
        return 503;
    const struct tg_grant_conf *g = x->grant;
    size_t cap = (size_t)(g->max_sessions > 0 ? g->max_sessions : srv->conf->limits.sessions_per_grant);
    if (tg_session_count_for_grant(srv->sessions, g->name) >= cap) {
        srv->metrics.limit_sessions++;
        return 429;
    }
    struct tg_session *s = tg_session_create(srv->sessions, g->name, x->upstream);
    s->srv = srv;
    if (x->era == TG_ERA_2025) { /* a stateless (2026) session is the grant's, shared by its users */
        struct tg_principal own;
        const struct tg_principal *who = x->who;
        if (who == NULL) {
            tg_principal_of_grant(g, &own);
            who = &own;
        }
        tg_session_set_subject(s, who->subject);
        const char *iss = tg_principal_issuer(srv->conf, who);
        s->issuer = iss[0] != '\0' ? tg_xstrdup(iss) : NULL;
        tg_principal_sha256(srv->conf, who, s->subject_sha256); /* once: the cluster record binds it */
        tg_gate_bind_session(x, tg_conf_policy_for(srv->conf, g, x->upstream), s);
        s->subject_tag = tg_principal_tag(srv->conf, who);
        s->subject_serial = srv->conf->serial, s->subject_jwt = who->jwt;
    }
    s->last_active_ms = uv_now(srv->loop);
    srv->metrics.sessions_created++;
    x->sess = s;
    if (x->cred != NULL)
        tg_call_upauth_session(s, x); /* a channel's messages carry no credential of their own */
    return 0;
}

int tg_dispatch_session_owner(const struct tg_exchange *x, const struct tg_session *s)
{
    if (s->subject == NULL)
        return 1; /* not bound: a stateless session, checked by grant alone */
    struct tg_principal own;
    const struct tg_principal *who = x->who;
    if (who == NULL) {
        tg_principal_of_grant(x->grant, &own);
        who = &own;
    }
    struct tg_owner o = {s->subject, s->subject_tag, s->subject_serial, s->subject_jwt, s->subject_sha256};
    return tg_principal_owns(x->srv->conf, who, &o);
}

const char *tg_dispatch_subject(const struct tg_exchange *x)
{
    if (x->who != NULL)
        return x->who->subject;
    if (x->sess != NULL && x->sess->subject != NULL)
        return x->sess->subject;
    return x->grant->name;
}

const char *tg_dispatch_issuer(const struct tg_exchange *x)
{
    if (x->who != NULL)
        return tg_principal_issuer(x->srv->conf, x->who);
    if (x->sess != NULL && x->sess->subject != NULL && x->sess->issuer != NULL)
        return x->sess->issuer;
    return "";
}

void tg_dispatch_session_used(struct tg_server *srv, struct tg_session *s)
{
    if (s->shared) /* only a shared session has a record to renew */
        srv->store.ops->session_used(srv->store.ud, s, uv_now(srv->loop));
}

void tg_dispatch_session_ready(struct tg_server *srv, struct tg_session *s)
{
    if ((size_t)s->upstream < srv->conf->nupstreams)
        srv->store.ops->session_share(srv->store.ud, s, &srv->conf->upstreams[s->upstream]);
}


struct tg_sink *tg_dispatch_get_stream_sink(struct tg_session *s)
{
    return s->get_stream != NULL ? tg_call_sink(s->get_stream) : NULL;
}
