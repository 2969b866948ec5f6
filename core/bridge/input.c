/* A 2025 session's call on a 2026-07-28-only upstream that answered input_required: the
 * gateway asks the client itself, with real server-to-client requests on the call's stream,
 * and when every one is answered retries the call upstream with the answers (inputResponses)
 * and the upstream's requestState, which never leaves the gateway.
 *
 * The retry is the same call going on: it was decided once, and it takes no second
 * reservation. At most TG_SHIM_ROUNDS rounds; each waits at most the upstream's call timeout
 * for the client. A waiting call counts toward limits.inflight_per_session. */
#include "core/bridge/input.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/call.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/era.h"
#include "core/mcp/mrtr.h"
#include "core/mcp/schemas.h"
#include "core/wire/msg.h"
#include "core/call/roots.h"
#include "core/call/session.h"
#include "policy/policy.h"
#include "upstream/pool/pool.h"
#include "upstream/upstream.h"

#define TG_SHIM_ROUNDS 8
#define TG_SHIM_INPUTS 8

/* One call waiting for its client's answers. Owner: srv->shims until it retries or gives up;
 * freed in its timer's close callback. */
struct shim {
    struct tg_list link;
    struct tg_server *srv;
    struct tg_session *sess; /* reference */
    struct tg_sink *sink;    /* the client's, taken from the call (NULL once handed on) */
    uv_timer_t timer;
    char *request;           /* the request as first sent upstream (JSON) */
    char *client_id;
    size_t client_id_len;
    char *method, *tool;
    struct tg_policy *policy;
    char *state;             /* the upstream's requestState, or NULL */
    cJSON *responses;        /* inputResponses so far */
    struct {
        char key[64];
        char id[40]; /* the JSON id of the request the gateway sent the client */
    } pending[TG_SHIM_INPUTS];
    int npending;
    int rounds;
};

static void on_shim_closed(uv_handle_t *h)
{
    struct shim *sh = h->data;
    free(sh);
}

/* The shim goes; a client still waiting gets why (NULL: its sink was handed on). */
static void shim_end(struct shim *sh, const char *why)
{
    tg_list_unlink(&sh->link);
    if (sh->sink != NULL) {
        if (why != NULL) {
            struct tg_buf e;
            tg_buf_init(&e);
            tg_rpc_error(&e, sh->client_id, sh->client_id_len, TG_RPC_UPSTREAM, why, NULL);
            sh->sink->ops->answer(sh->sink, NULL, 200, NULL, e.base, e.len);
            sh->sink->ops->end(sh->sink, NULL);
            tg_buf_dispose(&e);
        }
        sh->sink->ops->release(sh->sink, NULL);
    }
    if (sh->sess->inflight > 0)
        sh->sess->inflight--;
    tg_session_unref(sh->sess);
    free(sh->request);
    free(sh->client_id);
    free(sh->method);
    free(sh->tool);
    free(sh->state);
    tg_policy_unref(sh->policy);
    cJSON_Delete(sh->responses);
    uv_close((uv_handle_t *)&sh->timer, on_shim_closed);
}

static void on_shim_timeout(uv_timer_t *t)
{
    struct shim *sh = t->data;
    shim_end(sh, "the client did not answer the upstream's request for input in time");
}

static void shim_retry(struct shim *sh);

/* Every input was the operator's to answer (pinned roots): the retry goes from the loop, not
 * from inside the upstream's answer that asked. */
static void on_shim_answered(uv_timer_t *t) { shim_retry(t->data); }

/* m is roots/list and roots are pinned for the call's session. */
static int pinned_roots(const struct tg_roots *roots, const cJSON *m)
{
    return roots != NULL && cJSON_IsString(m) && strcmp(m->valuestring, "roots/list") == 0;
}

static int declared(const char *caps, const char *method)
{
    if (caps == NULL)
        return 0;
    cJSON *c = cJSON_Parse(caps);
    int ok = (tg_mcp_input_kind(method, NULL) & tg_mcp_client_caps(c)) != 0;
    cJSON_Delete(c);
    return ok;
}

/* The filter's answer op: an input_required answer to a 2025 client's call becomes the shim's
 * requests to that client. */
static int shim_take(struct tg_call *k, void *data, const char *p, size_t n, char *why, size_t whysz)
{
    (void)data;
    struct tg_json_doc doc;
    if (k->era != TG_ERA_2025 || k->resend == NULL || tg_json_parse(p, n, 64, 1, &doc, NULL, NULL) != 0)
        return 0;
    int rc = 0;
    cJSON *res = tg_json_get(doc.root, "result");
    cJSON *rt = tg_json_get(res, "resultType");
    if (!cJSON_IsString(rt) || strcmp(rt->valuestring, "input_required") != 0)
        goto out;
    rc = -1;
    struct tg_sink *sk = k->sink;
    cJSON *reqs = tg_json_get(res, "inputRequests");
    cJSON *state = tg_json_get(res, "requestState");
    if (sk == NULL || (sk->flags & (TG_SINK_ANSWER_ONLY | TG_SINK_STATELESS))) {
        snprintf(why, whysz, "the upstream asked for input, which this exchange cannot carry (a batch)");
        goto out;
    }
    if (k->shim_rounds >= TG_SHIM_ROUNDS) {
        snprintf(why, whysz, "the upstream asked for input more than %d times", TG_SHIM_ROUNDS);
        goto out;
    }
    if (!cJSON_IsObject(reqs) || reqs->child == NULL || cJSON_GetArraySize(reqs) > TG_SHIM_INPUTS ||
        (state != NULL && !cJSON_IsString(state))) {
        snprintf(why, whysz, "the upstream's input_required result is malformed");
        goto out;
    }
    const struct tg_roots *roots = tg_roots_of_session(k->srv, k->sess, tg_upstream_conf(k->uprt));
    for (cJSON *r = reqs->child; r != NULL; r = r->next) {
        cJSON *m = tg_json_get(r, "method");
        if (strlen(r->string) >= sizeof(((struct shim *)0)->pending[0].key) || !cJSON_IsString(m) ||
            (!pinned_roots(roots, m) && !declared(k->sess->up_modern ? k->sess->u.client_caps : NULL, m->valuestring))) {
            snprintf(why, whysz, "the upstream asked for input the client did not declare: %.60s",
                     cJSON_IsString(m) ? m->valuestring : "(no method)");
            goto out;
        }
    }
    struct tg_server *srv = k->srv;
    struct shim *sh = tg_xcalloc(1, sizeof(*sh));
    sh->srv = srv;
    sh->sess = tg_session_ref(k->sess);
    sh->sess->inflight++;
    sh->sink = sk;
    k->sink = NULL; /* the call ends; its client waits here */
    if (sk->ops->bind != NULL)
        sk->ops->bind(sk, NULL);
    sh->request = k->resend;
    k->resend = NULL;
    sh->client_id = k->client_id;
    sh->client_id_len = k->client_id_len;
    k->client_id = NULL;
    sh->method = tg_xstrdup(k->method);
    sh->tool = k->tool ? tg_xstrdup(k->tool) : NULL;
    sh->policy = tg_policy_ref(k->policy);
    sh->state = cJSON_IsString(state) ? tg_xstrdup(state->valuestring) : NULL;
    sh->responses = cJSON_CreateObject();
    sh->rounds = k->shim_rounds + 1;
    tg_list_insert_tail(&srv->shims, &sh->link);
    uv_timer_init(srv->loop, &sh->timer);
    sh->timer.data = sh;
    const struct tg_upstream_conf *uc = tg_upstream_conf(k->uprt);
    uv_timer_start(&sh->timer, on_shim_timeout, (uint64_t)uc->call_timeout_ms, 0);
    for (cJSON *r = reqs->child; r != NULL; r = r->next) {
        if (pinned_roots(roots, tg_json_get(r, "method"))) {
            /* The operator's roots answer it; the client is never asked. */
            srv->metrics.roots_answered++;
            cJSON *pinned = cJSON_Parse(roots->result); /* made at load: always parses */
            cJSON_AddItemToObject(sh->responses, r->string, pinned != NULL ? pinned : cJSON_CreateObject());
            continue;
        }
        int i = sh->npending++;
        snprintf(sh->pending[i].key, sizeof(sh->pending[i].key), "%s", r->string);
        snprintf(sh->pending[i].id, sizeof(sh->pending[i].id), "\"tollgate-input-%llu\"",
                 (unsigned long long)++srv->next_gid);
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
        tg_buf_appends(&b, sh->pending[i].id);
        tg_buf_appends(&b, ",\"method\":");
        tg_json_write(&b, tg_json_get(r, "method"));
        cJSON *params = tg_json_get(r, "params");
        if (params != NULL) {
            tg_buf_appends(&b, ",\"params\":");
            tg_json_write(&b, params);
        }
        tg_buf_appends(&b, "}");
        sk->ops->message(sk, NULL, b.base, b.len);
        tg_buf_dispose(&b);
    }
    if (sh->npending == 0)
        uv_timer_start(&sh->timer, on_shim_answered, 0, 0); /* all pinned roots: retry once this answer is done */
    rc = 1;
out:
    cJSON_Delete(doc.root);
    return rc;
}

/* Every input is answered: the call goes on upstream, through the client's sink. */
static void shim_retry(struct shim *sh)
{
    struct tg_server *srv = sh->srv;
    struct tg_session *s = sh->sess;
    if (!s->live || (size_t)s->upstream >= srv->nupstreams || !sh->sink->ops->listening(sh->sink)) {
        shim_end(sh, "the session ended while the upstream waited for input");
        return;
    }
    cJSON *req = cJSON_Parse(sh->request);
    cJSON *params = tg_json_get(req, "params");
    if (!cJSON_IsObject(params)) {
        cJSON_Delete(req);
        shim_end(sh, "the gateway lost the request it was to retry");
        return;
    }
    struct tg_call *k = tg_call_new(srv, s, sh->sink, KIND_REQUEST);
    sh->sink = NULL;
    s->inflight++;
    k->era = TG_ERA_2025;
    tg_strlcpy(k->proto, s->proto, sizeof(k->proto));
    k->method = sh->method;
    k->tool = sh->tool;
    k->policy = sh->policy;
    k->client_id = sh->client_id;
    k->client_id_len = sh->client_id_len;
    sh->method = sh->tool = sh->client_id = NULL;
    sh->policy = NULL;
    k->shim_rounds = sh->rounds;
    k->resend = sh->request; /* a next round starts from the same request */
    tg_bridge_input_filter(k);
    sh->request = NULL;
    k->gid = ++srv->next_gid;
    k->gid_len = (size_t)snprintf(k->gid_str, sizeof(k->gid_str), "%llu", (unsigned long long)k->gid);
    cJSON_ReplaceItemInObjectCaseSensitive(req, "id", cJSON_CreateNumber((double)k->gid));
    cJSON_AddItemToObject(params, "inputResponses", sh->responses);
    sh->responses = NULL;
    if (sh->state != NULL)
        cJSON_AddStringToObject(params, "requestState", sh->state);
    struct tg_buf body, h, ph;
    tg_buf_init(&body);
    tg_buf_init(&h);
    tg_buf_init(&ph);
    tg_json_write(&body, req);
    const cJSON *name = tg_json_get(params, "name");
    const struct tg_upstream_conf *uc = tg_upstream_conf(k->uprt);
    const cJSON *schema = strcmp(k->method, "tools/call") == 0 && cJSON_IsString(name) && srv->schemas != NULL
                              ? tg_mcp_schemas_find(srv->schemas, uc->name, name->valuestring)
                              : NULL;
    tg_mcp_param_headers_build(&ph, NULL, 0, schema, tg_json_get(params, "arguments"));
    tg_mcp_upstream_headers(&h, req, TG_MCP_MODERN_VERSION, ph.base);
    k->up_headers = h.base;
    cJSON_Delete(req);
    tg_buf_dispose(&ph);
    shim_end(sh, NULL);
    tg_call_send(k, body.base, body.len, (uint64_t)uc->call_timeout_ms);
    tg_buf_dispose(&body);
}

int tg_bridge_input_answer(struct tg_server *srv, struct tg_session *s, struct tg_msg *m)
{
    if (m->id_raw == NULL || srv->shims.next == NULL)
        return 0;
    for (struct tg_list *l = srv->shims.next; l != &srv->shims; l = l->next) {
        struct shim *sh = tg_container_of(l, struct shim, link);
        if (sh->sess != s)
            continue;
        for (int i = 0; i < sh->npending; i++) {
            if (strlen(sh->pending[i].id) != m->id_len || memcmp(sh->pending[i].id, m->id_raw, m->id_len) != 0)
                continue;
            cJSON *result = tg_json_get(m->root, "result");
            if (!cJSON_IsObject(result)) {
                shim_end(sh, "the client refused the upstream's request for input");
                return 1;
            }
            cJSON_AddItemToObject(sh->responses, sh->pending[i].key, cJSON_Duplicate(result, 1));
            sh->pending[i] = sh->pending[--sh->npending];
            if (sh->npending == 0)
                shim_retry(sh);
            return 1;
        }
    }
    return 0;
}

void tg_bridge_input_dispose(struct tg_server *srv)
{
    while (srv->shims.next != NULL && !tg_list_empty(&srv->shims))
        shim_end(tg_container_of(srv->shims.next, struct shim, link), "the gateway is shutting down");
}

/* ---- a 2025 upstream's server request for a 2026 client ---------------------------------
 *
 * The 2026 client cannot be asked: it gets input_required, with the request as its only input
 * and a requestState that names the call the gateway holds open upstream (sealed like every
 * envelope: its grant, upstream, tool and arguments). Its retry, decided again, carries the
 * answer up as the response to the upstream's request, and the held call answers the retry.
 * A held call is bound by the upstream's call timeout, like any other. */

#define INPUT_KEY "input-1"

/* The filter's server_request op, for a 2026 client's own stream (a stateless sink). */
static int input_park(struct tg_call *k, void *data, const char *p, size_t n)
{
    (void)data;
    struct tg_sink *sk = k->sink;
    if (k->mrtr == NULL || sk == NULL || !(sk->flags & TG_SINK_STATELESS) || k->input_req_id != NULL || k->client_id == NULL)
        return 0;
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, 64, 1, &doc, NULL, NULL) != 0)
        return 0;
    int parked = 0;
    cJSON *method = tg_json_get(doc.root, "method");
    cJSON *id = tg_json_get(doc.root, "id");
    unsigned need = tg_mcp_input_kind(cJSON_IsString(method) ? method->valuestring : NULL, NULL);
    if (need == 0 || !(k->mrtr->client_caps & need) || id == NULL || cJSON_IsNull(id))
        goto out; /* refused by the caller, as before */
    cJSON *result = cJSON_CreateObject();
    cJSON_AddStringToObject(result, "resultType", "input_required");
    cJSON *reqs = cJSON_AddObjectToObject(result, "inputRequests");
    cJSON *one = cJSON_AddObjectToObject(reqs, INPUT_KEY);
    cJSON_AddStringToObject(one, "method", method->valuestring);
    cJSON *params = tg_json_get(doc.root, "params");
    if (params != NULL)
        cJSON_AddItemToObject(one, "params", cJSON_Duplicate(params, 1));
    if (tg_mcp_mrtr_seal_parked(&k->srv->mrtr, result, k->mrtr, wall_ms(), k->gid_str) != 0) {
        cJSON_Delete(result);
        goto out;
    }
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(&b, k->client_id, k->client_id_len);
    tg_buf_appends(&b, ",\"result\":");
    tg_json_write(&b, result);
    tg_buf_appends(&b, "}");
    cJSON_Delete(result);
    struct tg_buf idt;
    tg_buf_init(&idt);
    tg_json_write(&idt, id);
    tg_buf_append(&idt, "", 1);
    k->input_req_id = idt.base; /* owned by the call now */
    /* The client's exchange ends with input_required; the call stays with the upstream. */
    k->sink = NULL;
    sk->ops->answer(sk, k, 200, NULL, b.base, b.len);
    sk->ops->end(sk, k);
    sk->ops->release(sk, k);
    tg_buf_dispose(&b);
    tg_log(TG_LOG_INFO, "server request held for a 2026 client's retry", "upstream=%s grant=%s method=%s",
           tg_upstream_conf(k->uprt)->name, k->grant, method->valuestring);
    parked = 1;
out:
    cJSON_Delete(doc.root);
    return parked;
}

static const struct tg_call_filter input_filter = {
    .answer = shim_take,
    .server_request = input_park,
};

void tg_bridge_input_filter(struct tg_call *k) { tg_call_filter_set(k, &input_filter, NULL); }

/* The held call named parked takes r's client, and the answer goes up: NULL, or why not. */
static const char *resume_held(struct tg_call *r, const char *parked, const cJSON *params)
{
    struct tg_session *s = r->sess;
    struct tg_call *k = NULL;
    for (struct tg_list *l = s->calls.next; l != &s->calls; l = l->next) {
        struct tg_call *c = tg_container_of(l, struct tg_call, slink);
        if (c != r && !c->closed && c->input_req_id != NULL && c->sink == NULL && strcmp(c->gid_str, parked) == 0)
            k = c;
    }
    if (k == NULL || !tg_call_running(k))
        return "Invalid params: the call this retry continues has ended (the upstream gave up waiting); call again";
    cJSON *answer = tg_json_get(tg_json_get(params, "inputResponses"), INPUT_KEY);
    if (!cJSON_IsObject(answer))
        return "Invalid params: the retry must answer inputResponses." INPUT_KEY;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_appends(&b, k->input_req_id);
    tg_buf_appends(&b, ",\"result\":");
    tg_json_write(&b, answer);
    tg_buf_appends(&b, "}");
    k->ops->reply(k->srv, s, k->uprt, b.base, b.len);
    tg_buf_dispose(&b);
    free(k->input_req_id);
    k->input_req_id = NULL;
    /* The held call answers the retry's client from now on, with the retry's id. */
    free(k->client_id);
    k->client_id = r->client_id;
    k->client_id_len = r->client_id_len;
    r->client_id = NULL;
    k->sink = r->sink;
    r->sink = NULL;
    if (k->sink->ops->bind != NULL)
        k->sink->ops->bind(k->sink, k);
    k->ops->touch(k);
    return NULL;
}

void tg_bridge_input_resume(struct tg_call *r, const struct tg_decision *dec, const char *parked, const cJSON *params)
{
    const char *why = dec != NULL && dec->verdict == TG_VERDICT_APPROVE
                          ? "Invalid params: the call this retry continues cannot wait for approval again"
                          : resume_held(r, parked, params);
    if (why != NULL && r->sink != NULL) {
        struct tg_buf e;
        tg_buf_init(&e);
        tg_rpc_error(&e, r->client_id, r->client_id_len, TG_RPC_INVALID_PARAMS, why, NULL);
        r->sink->ops->answer(r->sink, r, 200, NULL, e.base, e.len);
        tg_buf_dispose(&e);
    }
    tg_call_close(r);
}
