/* Which era a Streamable HTTP upstream speaks, asked once and cached on its runtime.
 *
 * First server/discover as a 2026-07-28 client sends it: a result listing 2026-07-28 means the
 * upstream is modern. A modern upstream is then sent a 2025 initialize: if it makes a session,
 * it is dual-era (the session is deleted at once) and each client era is served in its own;
 * if not, it speaks 2026-07-28 only and 2025 clients are bridged to it. Any other answer to
 * discover means 2025. An upstream that cannot be reached gets no verdict: the next request
 * that needs one asks again (at most once per probe_retry). With protocol = "2026" the
 * discover result is still fetched (the bridge answers initialize from it), and the verdict is
 * 2026 whatever initialize would say. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/era.h"
#include "core/wire/sse.h"
#include "upstream/pool/pool.h"
#include "upstream/pool/internal.h"

#define PROBE_BODY_MAX 65536
#define PROBE_TIMEOUT_MS 5000
#define PROBE_RETRY_MS 1000 /* probe_retry: an unreachable upstream is asked at most this often */

/* One probe request. Owner: itself, from tg_upstream_probe() to its on_done; it holds a
 * reference on the upstream. */
struct probe {
    struct tg_upstream *u;
    int step; /* 0: discover, 1: initialize */
    int status;
    int sse; /* the answer is an event stream */
    struct tg_buf body;
    char session[128];
};

static void probe_start(struct probe *p);
static void on_head(struct tg_upreq *r, int status, void *ud);
static void on_data(struct tg_upreq *r, const char *d, size_t n, void *ud);
static void on_done(struct tg_upreq *r, int err, void *ud);
static const struct tg_upreq_cbs probe_cbs = {on_head, on_data, on_done};

static void on_head(struct tg_upreq *r, int status, void *ud)
{
    struct probe *p = ud;
    p->status = status;
    p->sse = tg_slice_has_token(tg_upreq_content_type(r), "text/event-stream");
    struct tg_slice sid = tg_upreq_session_id(r);
    if (sid.len > 0 && sid.len < sizeof(p->session) && tg_header_value_safe(sid.ptr, sid.len)) {
        memcpy(p->session, sid.ptr, sid.len);
        p->session[sid.len] = '\0';
    }
}

static void on_data(struct tg_upreq *r, const char *d, size_t n, void *ud)
{
    (void)r;
    struct probe *p = ud;
    if (p->body.len + n <= PROBE_BODY_MAX)
        tg_buf_append(&p->body, d, n);
}

/* The first event whose data is a JSON-RPC answer (a priming event with empty data, or a
 * notification, may come first). */
static int probe_event(void *ud, const struct tg_sse_event *ev)
{
    cJSON **out = ud;
    cJSON *m = cJSON_ParseWithLength(ev->data.ptr, ev->data.len);
    if (tg_json_get(m, "result") != NULL || tg_json_get(m, "error") != NULL) {
        *out = m;
        return 1; /* found: stop */
    }
    cJSON_Delete(m);
    return 0;
}

/* The JSON-RPC answer in a probe's response: the body, or on an event stream (core/wire/sse.c) the
 * first event that carries one. */
static cJSON *answer_of(struct probe *p)
{
    const char *b = p->body.base ? p->body.base : "";
    if (!p->sse)
        return cJSON_ParseWithLength(b, p->body.len);
    struct tg_sse_parser sp;
    tg_sse_init(&sp, PROBE_BODY_MAX);
    cJSON *m = NULL;
    tg_sse_feed(&sp, b, p->body.len, probe_event, &m);
    tg_sse_dispose(&sp);
    return m;
}

static int lists_modern(const cJSON *res)
{
    const cJSON *v;
    cJSON_ArrayForEach(v, tg_json_get(res, "supportedVersions"))
        if (cJSON_IsString(v) && strcmp(v->valuestring, TG_MCP_MODERN_VERSION) == 0)
            return 1;
    return 0;
}

static const char *era_name(int era)
{
    return era == TG_UP_ERA_2026 ? "2026-07-28" : era == TG_UP_ERA_DUAL ? "dual" : "2025";
}

static void verdict(struct probe *p, int era)
{
    struct tg_upstream *u = p->u;
    u->era = era;
    u->probing = 0;
    tg_log(TG_LOG_INFO, "upstream protocol", "upstream=%s era=%s", u->uc->name, era_name(era));
}

static void on_done(struct tg_upreq *r, int err, void *ud)
{
    (void)r;
    struct probe *p = ud;
    struct tg_upstream *u = p->u;
    if (p->step == 2) {
        /* the probe session's DELETE: nothing to learn */
    } else if (err != 0) {
        u->probing = 0;
        u->probe_after = uv_now(u->loop) + PROBE_RETRY_MS;
        tg_log(TG_LOG_WARN, "upstream protocol probe failed; asked again on the next request",
               "upstream=%s step=%s error=\"%s\" code=%s", u->uc->name, p->step == 0 ? "discover" : "initialize",
               err > -4000                ? uv_strerror(err)
               : err == TG_ETIMEDOUT      ? "timed out"
               : err == TG_EBACKOFF       ? "backing off after repeated failures"
                                          : "no usable answer",
               err > -4000 ? uv_err_name(err) : "-");
    } else if (p->step == 0) {
        cJSON *msg = p->status == 200 ? answer_of(p) : NULL;
        cJSON *res = tg_json_get(msg, "result");
        if (cJSON_IsObject(res) && lists_modern(res)) {
            free(u->discover);
            u->discover = cJSON_PrintUnformatted(res);
            if (u->uc->protocol == TG_PROTOCOL_2026) {
                verdict(p, TG_UP_ERA_2026);
            } else {
                cJSON_Delete(msg);
                /* Modern: does it also make 2025 sessions? */
                struct probe *q = tg_xcalloc(1, sizeof(*q));
                q->u = tg_upstream_ref(u);
                q->step = 1;
                probe_start(q);
                msg = NULL;
            }
        } else if (u->uc->protocol == TG_PROTOCOL_2026) {
            u->probing = 0;
            u->probe_after = uv_now(u->loop) + PROBE_RETRY_MS;
            tg_log(TG_LOG_WARN, "upstream has protocol = \"2026\" but did not answer server/discover; asked again on the next request",
                   "upstream=%s status=%d", u->uc->name, p->status);
        } else {
            verdict(p, TG_UP_ERA_2025);
        }
        cJSON_Delete(msg);
    } else {
        cJSON *msg = p->status == 200 ? answer_of(p) : NULL;
        int dual = cJSON_IsObject(tg_json_get(msg, "result"));
        cJSON_Delete(msg);
        if (dual && p->session[0]) {
            /* The probe's session is of no use: it ends now. */
            char h[200];
            snprintf(h, sizeof(h), "Mcp-Session-Id: %s\r\nMCP-Protocol-Version: 2025-11-25\r\n", p->session);
            struct probe *d = tg_xcalloc(1, sizeof(*d));
            d->u = tg_upstream_ref(u);
            d->step = 2;
            tg_upreq_start(u, "DELETE", h, NULL, 0, 0, PROBE_TIMEOUT_MS, &probe_cbs, d);
        }
        verdict(p, dual ? TG_UP_ERA_DUAL : TG_UP_ERA_2026);
    }
    if (!u->probing && p->step != 2 && u->on_verdict != NULL)
        u->on_verdict(u->verdict_arg);
    tg_buf_dispose(&p->body);
    tg_upstream_unref(u);
    free(p);
}

static void probe_start(struct probe *p)
{
    const char *headers, *body;
    if (p->step == 0) {
        headers = "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                  "MCP-Protocol-Version: " TG_MCP_MODERN_VERSION "\r\nMcp-Method: server/discover\r\n";
        body = "{\"jsonrpc\":\"2.0\",\"id\":\"tollgate-probe\",\"method\":\"server/discover\",\"params\":{\"_meta\":{"
               "\"io.modelcontextprotocol/protocolVersion\":\"" TG_MCP_MODERN_VERSION "\","
               "\"io.modelcontextprotocol/clientCapabilities\":{},"
               "\"io.modelcontextprotocol/clientInfo\":{\"name\":\"tollgate\",\"version\":\"" TG_VERSION "\"}}}}";
    } else {
        headers = "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                  "MCP-Protocol-Version: 2025-11-25\r\n";
        body = "{\"jsonrpc\":\"2.0\",\"id\":\"tollgate-probe\",\"method\":\"initialize\",\"params\":{"
               "\"protocolVersion\":\"2025-11-25\",\"capabilities\":{},"
               "\"clientInfo\":{\"name\":\"tollgate-probe\",\"version\":\"" TG_VERSION "\"}}}";
    }
    tg_upreq_start(p->u, "POST", headers, body, strlen(body), 0, PROBE_TIMEOUT_MS, &probe_cbs, p);
}

void tg_upstream_probe(struct tg_upstream *u)
{
    const struct tg_upstream_conf *uc = u->uc;
    if (u->era != TG_UP_ERA_UNKNOWN || u->probing || u->closing || uv_now(u->loop) < u->probe_after)
        return;
    if (uc->protocol == TG_PROTOCOL_2025 || uc->transport != TG_UP_STREAMABLE || uc->init_local) {
        u->era = TG_UP_ERA_2025;
        return;
    }
    u->probing = 1;
    struct probe *p = tg_xcalloc(1, sizeof(*p));
    p->u = tg_upstream_ref(u);
    probe_start(p);
}

enum tg_up_era tg_upstream_era(const struct tg_upstream *u) { return (enum tg_up_era)u->era; }

int tg_upstream_probing(const struct tg_upstream *u) { return u->probing; }

void tg_upstream_on_verdict(struct tg_upstream *u, void (*fn)(void *arg), void *arg)
{
    u->on_verdict = fn;
    u->verdict_arg = arg;
}

const char *tg_upstream_discover(const struct tg_upstream *u) { return u->discover; }
