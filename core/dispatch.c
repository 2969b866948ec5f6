#include "core/router_int.h"


static void park_call(struct tg_server *srv, struct tg_call *k);

static void handle_request(struct tg_server *srv, struct tg_conn *c, struct tg_batch *b, struct route *rt,
                           const struct tg_grant_conf *g, struct tg_session *s, struct tg_policy *pol, struct tg_msg *m);

static int cancel_parked(struct tg_session *s, struct tg_msg *m);

static void handle_forward(struct tg_server *srv, struct tg_conn *c, struct tg_batch *b, struct route *rt,
                           struct tg_session *s, struct tg_msg *m);

void respond_decision(struct tg_conn *c, struct tg_batch *b, const char *id, size_t idn, const char *tool,
                             const struct tg_decision *d, const char *approval_id)
{
    struct tg_buf data;
    tg_buf_init(&data);
    int code = TG_RPC_DENIED;
    tg_buf_appends(&data, "{\"tool\":");
    if (tool)
        tg_json_write_string(&data, tool, strlen(tool));
    else
        tg_buf_appends(&data, "null");
    if (d->verdict == TG_VERDICT_LIMITED) {
        code = TG_RPC_LIMITED;
        tg_buf_appends(&data, ",\"counter\":");
        tg_json_write_string(&data, d->counter, strlen(d->counter));
        tg_buf_appendf(&data, ",\"retry_after_ms\":%llu", (unsigned long long)d->retry_after_ms);
    } else if (approval_id != NULL) {
        code = TG_RPC_APPROVAL;
        tg_buf_appends(&data, ",\"approval_id\":");
        tg_json_write_string(&data, approval_id, strlen(approval_id));
    } else {
        tg_buf_appends(&data, ",\"rule\":");
        tg_json_write_string(&data, d->rule, strlen(d->rule));
        tg_buf_appends(&data, ",\"reason\":");
        tg_json_write_string(&data, d->message, strlen(d->message));
    }
    tg_buf_appends(&data, "}");
    tg_buf_append(&data, "", 1);
    reply_rpc(c, b, 200, id, idn, code, d->message, data.base);
    tg_buf_dispose(&data);
}

static void park_call(struct tg_server *srv, struct tg_call *k)
{
    uint8_t rnd[16];
    tg_random(rnd, sizeof(rnd));
    tg_hex_encode(rnd, sizeof(rnd), k->approval_id);
    k->parked = 1;
    k->approval_deadline = now_ms(srv) + (uint64_t)k->dec->approval_timeout_ms;
    k->parked_at_wall = (uint64_t)wall_ms();
    tg_list_insert_tail(&srv->approvals, &k->alink);
    srv->napprovals++;
    tg_log(TG_LOG_INFO, "call parked for approval", "approval_id=%s grant=%s session=%s upstream=%s tool=%s",
           k->approval_id, k->grant, k->sess->id_str, up_name(k), k->tool);
    audit_call(k, "approve", -1, NULL, NULL);
}

/* A client request: decide it (tools/call, resources/read, prompts/get), then forward, park or refuse. */
static void handle_request(struct tg_server *srv, struct tg_conn *c, struct tg_batch *b, struct route *rt,
                           const struct tg_grant_conf *g, struct tg_session *s, struct tg_policy *pol, struct tg_msg *m)
{
    const struct tg_limits *lim = &srv->conf->limits;
    char *key = id_key_of(m->id_raw, m->id_len);
    for (struct tg_list *l = s->calls.next; key && l != &s->calls; l = l->next) {
        struct tg_call *o = tg_container_of(l, struct tg_call, slink);
        if (o->kind == KIND_REQUEST && o->id_key && strcmp(o->id_key, key) == 0) {
            free(key);
            reply_rpc(c, b, 400, NULL, 0, TG_RPC_INVALID_REQUEST,
                      "Invalid Request: a request with this id is already in flight in this session", NULL);
            return;
        }
    }
    if (s->inflight >= (unsigned)lim->inflight_per_session) {
        free(key);
        srv->metrics.limit_inflight++;
        reply_rpc(c, b, 429, m->id_raw, m->id_len, TG_RPC_UPSTREAM,
                  "Too many calls in flight for this session (limits.inflight_per_session)", NULL);
        return;
    }
    cJSON *params = cJSON_GetObjectItemCaseSensitive(m->root, "params");
    struct tg_decision *dec = NULL;
    const char *tool = NULL;
    const cJSON *args = NULL;
    if (strcmp(m->method, "tools/call") == 0) {
        cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
        cJSON *a = cJSON_GetObjectItemCaseSensitive(params, "arguments");
        if (!cJSON_IsObject(params) || !cJSON_IsString(name) || (a != NULL && !cJSON_IsObject(a))) {
            free(key);
            reply_rpc(c, b, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                      "tools/call needs params.name (a string) and optional params.arguments (an object)", NULL);
            return;
        }
        tool = name->valuestring;
        args = a;
        dec = tg_xmalloc(sizeof(*dec));
        struct tg_caller who = {g->name, s->id_str, rt->uc->name};
        tg_policy_decide_call(pol, srv->counters, &who, tool, args, wall_ms(), dec);
    } else if (strcmp(m->method, "resources/read") == 0 || strcmp(m->method, "prompts/get") == 0) {
        int res = m->method[0] == 'r';
        cJSON *what = cJSON_GetObjectItemCaseSensitive(params, res ? "uri" : "name");
        if (!cJSON_IsString(what)) {
            free(key);
            reply_rpc(c, b, 200, m->id_raw, m->id_len, TG_RPC_INVALID_PARAMS,
                      res ? "resources/read needs params.uri (a string)" : "prompts/get needs params.name (a string)",
                      NULL);
            return;
        }
        dec = tg_xcalloc(1, sizeof(*dec));
        if (res)
            tg_policy_decide_resource(pol, what->valuestring, dec);
        else
            tg_policy_decide_prompt(pol, what->valuestring, dec);
        tool = what->valuestring;
    }
    srv->metrics.rpc_requests++;
    struct tg_call *k = call_new(srv, s, c, KIND_REQUEST);
    if (b != NULL) {
        k->batch = b;
        b->pending++;
    }
    s->inflight++;
    k->policy = tg_policy_ref(pol);
    k->method = tg_xstrdup(m->method);
    {
        cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
        cJSON *tok = cJSON_GetObjectItemCaseSensitive(meta, "progressToken");
        if (cJSON_IsString(tok))
            k->progress_token = id_key_of_string(tok->valuestring);
        else if (cJSON_IsNumber(tok))
            k->progress_token = id_key_of_number(tok);
    }
    k->id_key = key;
    k->is_tools_list = strcmp(m->method, "tools/list") == 0;
    k->is_init = strcmp(m->method, "initialize") == 0;
    k->client_id = m->id_raw;
    k->client_id_len = m->id_len;
    m->id_raw = NULL;
    if (dec != NULL) {
        k->dec = dec;
        k->tool = tg_xstrdup(tool);
        if (strcmp(m->method, "tools/call") == 0) {
            tg_audit_args_hash(args, k->args_sha256);
            k->args_json = tg_audit_args_values(&srv->conf->audit, args);
        }
        srv->metrics.decisions[dec->verdict]++;
        if (dec->verdict == TG_VERDICT_DENY || dec->verdict == TG_VERDICT_LIMITED) {
            audit_call(k, dec->verdict == TG_VERDICT_DENY ? "deny" : "limited", -1, NULL, NULL);
            respond_decision(c, b, k->client_id, k->client_id_len, k->tool, dec, NULL);
            call_free(k);
            return;
        }
    }
    k->gid = ++srv->next_gid;
    k->gid_len = (size_t)snprintf(k->gid_str, sizeof(k->gid_str), "%llu", (unsigned long long)k->gid);
    struct tg_buf out;
    tg_buf_init(&out);
    tg_msg_write_with_id(&out, m, k->gid);
    if (dec != NULL && dec->verdict == TG_VERDICT_APPROVE) {
        /* A batch cannot wait for a human; a single message on a channel can. */
        int in_batch = b != NULL && !(b->channel != NULL && b->single);
        if (in_batch || srv->napprovals >= (size_t)lim->approvals_max) {
            tg_buf_dispose(&out);
            audit_call(k, "rejected", -1, NULL, "(queue full)");
            struct tg_decision full = *dec;
            if (in_batch)
                snprintf(full.message, sizeof(full.message), "%s needs a human's approval, which a batch cannot wait for; send it on its own", k->tool);
            else
                snprintf(full.message, sizeof(full.message), "%s needs approval, but the approval queue is full (limits.approvals_max); try later", k->tool);
            respond_decision(c, b, k->client_id, k->client_id_len, k->tool, &full, "");
            call_free(k);
            return;
        }
        k->held = out;
        park_call(srv, k);
        return;
    }
    call_send(k, "POST", out.base, out.len, 0, (uint64_t)rt->uc->call_timeout_ms);
    tg_buf_dispose(&out);
}

/* notifications/cancelled naming a call still parked for approval: it is withdrawn and never
 * forwarded, whatever an approver does later. */
static int cancel_parked(struct tg_session *s, struct tg_msg *m)
{
    cJSON *params = cJSON_GetObjectItemCaseSensitive(m->root, "params");
    cJSON *rid = cJSON_GetObjectItemCaseSensitive(params, "requestId");
    /* The key of an id of any length (ids are bounded only by limits.body_bytes). */
    char *want = cJSON_IsString(rid) ? id_key_of_string(rid->valuestring) : id_key_of_number(rid);
    if (want == NULL)
        return 0;
    int found = 0;
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, slink);
        if (k->parked && k->id_key && strcmp(k->id_key, want) == 0) {
            approval_finish(k, 0, "client", "cancelled");
            found = 1;
            break;
        }
    }
    free(want);
    return found;
}

/* Notifications and responses from the client. */
static void handle_forward(struct tg_server *srv, struct tg_conn *c, struct tg_batch *b, struct route *rt,
                           struct tg_session *s, struct tg_msg *m)
{
    if (m->kind == TG_MSG_NOTIFICATION)
        srv->metrics.rpc_notifications++;
    else
        srv->metrics.rpc_responses++;
    if (m->kind == TG_MSG_RESPONSE && !take_server_request(s, m->id_raw, m->id_len)) {
        /* Only answers to requests the server actually sent go up; anything else is a forgery. */
        if (b != NULL)
            batch_add_error(b, NULL, 0, TG_RPC_INVALID_REQUEST,
                            "Invalid Request: no server request with this id is waiting for an answer", NULL);
        else
            respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST,
                        "Invalid Request: no server request with this id is waiting for an answer", NULL);
        return;
    }
    if (m->kind == TG_MSG_NOTIFICATION && strcmp(m->method, "notifications/cancelled") == 0 &&
        cancel_parked(s, m)) {
        reply_accepted(c, b);
        return;
    }
    if (m->kind == TG_MSG_NOTIFICATION && strcmp(m->method, "notifications/cancelled") == 0 &&
        !rewrite_cancel(s, m, srv->conf->limits.json_depth)) {
        /* Not one of this session's calls in flight: nothing to cancel upstream. */
        reply_accepted(c, b);
        return;
    }
    struct tg_call *k = call_new(srv, s, c, KIND_FORWARD);
    if (b != NULL) {
        k->batch = b;
        b->pending++;
    }
    struct tg_buf out;
    tg_buf_init(&out);
    tg_json_write(&out, m->root);
    call_send(k, "POST", out.base, out.len, 0, (uint64_t)rt->uc->call_timeout_ms);
    tg_buf_dispose(&out);
}

/* One decoded message of a live session: the policy gate, then forward or refuse.
 * b is the batch it belongs to (answers go there), or NULL (answers go to c). */
void dispatch_message(struct tg_server *srv, struct tg_conn *c, struct tg_batch *b, struct route *rt,
                             const struct tg_grant_conf *g, struct tg_session *s, struct tg_msg *m)
{
    struct tg_policy *pol = tg_conf_policy_for(srv->conf, g, rt->upstream);
    /* Messages a client may send: standard MCP methods, methods the policy names, and
     * responses to the server's requests. */
    if (m->kind == TG_MSG_NOTIFICATION && tg_msg_is_standard_client_method(m->method, TG_MSG_REQUEST)) {
        /* A request method without an id would run upstream unanswered and undecided. */
        srv->metrics.decisions[1]++;
        char msg[200];
        snprintf(msg, sizeof(msg), "Invalid Request: %s is a request and needs an id", m->method);
        if (b != NULL)
            batch_add_error(b, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
        else
            respond_rpc(c, 400, NULL, NULL, 0, TG_RPC_INVALID_REQUEST, msg, NULL);
        return;
    }
    if (m->kind != TG_MSG_RESPONSE && !tg_msg_is_standard_client_method(m->method, m->kind) &&
        !tg_policy_method_allowed(pol, m->method)) {
        srv->metrics.rpc_refused_nonstandard++;
        srv->metrics.decisions[1]++;
        char esc[96];
        tg_log(TG_LOG_INFO, "refused non-standard method", "grant=%s session=%s upstream=%s method=%s", g->name,
               s->id_str, rt->uc->name, tg_log_esc(esc, sizeof(esc), tg_slice_cstr(m->method)));
        struct tg_audit_record ar = {0};
        ar.grant = g->name;
        ar.session = s->id_str;
        ar.upstream = rt->uc->name;
        ar.method = m->method;
        ar.decision = "deny";
        ar.rule = "non-standard-method";
        ar.latency_ms = -1;
        tg_audit_log(srv->audit, &srv->conf->audit, &ar);
        if (m->kind == TG_MSG_NOTIFICATION) {
            reply_accepted(c, b); /* notifications get no answer; it is dropped */
        } else {
            struct tg_buf d;
            tg_buf_init(&d);
            tg_buf_appends(&d, "{\"tool\":null,\"rule\":\"non-standard-method\",\"reason\":");
            char reason[200];
            snprintf(reason, sizeof(reason), "%s is not a standard MCP method; a policy must allow it by name",
                     m->method);
            tg_json_write_string(&d, reason, strlen(reason));
            tg_buf_appends(&d, "}");
            tg_buf_append(&d, "", 1);
            char msg[200];
            snprintf(msg, sizeof(msg), "%s is refused by the gateway: not a standard MCP method", m->method);
            reply_rpc(c, b, 200, m->id_raw, m->id_len, TG_RPC_DENIED, msg, d.base);
            tg_buf_dispose(&d);
        }
        return;
    }
    if (rt->uc->init_local && m->kind != TG_MSG_RESPONSE &&
        (strcmp(m->method, "notifications/initialized") == 0 || strcmp(m->method, "ping") == 0)) {
        /* The gateway owns the lifecycle of a local-initialize upstream-> */
        if (m->kind == TG_MSG_NOTIFICATION) {
            reply_accepted(c, b);
        } else {
            struct tg_buf out;
            tg_buf_init(&out);
            tg_buf_appends(&out, "{\"jsonrpc\":\"2.0\",\"id\":");
            tg_buf_append(&out, m->id_raw, m->id_len);
            tg_buf_appends(&out, ",\"result\":{}}");
            reply_json(c, b, out.base, out.len);
            tg_buf_dispose(&out);
        }
        return;
    }
    if (m->kind == TG_MSG_REQUEST)
        handle_request(srv, c, b, rt, g, s, pol, m);
    else
        handle_forward(srv, c, b, rt, s, m);
}
