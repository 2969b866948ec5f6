/* The approvals queue of a cluster (issue 12): every member's parked calls, listed and decided
 * from any member's admin API and page.
 *
 * A parked call stays in its own gateway (its client's connection is there); what approvers see
 * of it is written to one Redis hash, key_prefix "approvals", field = approval id, value = the
 * item as JSON with the member's name. Listing reads the hash. Deciding a call of another member
 * publishes the decision on that member's channel, key_prefix "approvals:" NAME, to which each
 * member subscribes; the member holding the call decides it as if its own approver had. The
 * deadline is kept where the call is, so it holds whatever Redis does. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#include <mbedtls/md.h>

#include "cluster/cluster.h"
#include "cluster/redis/redis.h"
#include "core/call/approvals.h"
#include "core/call/audit.h"
#include "core/call/call.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "core/base/log.h"

static const struct tg_cluster_conf *cconf(struct tg_server *srv) { return tg_cluster_conf(srv->cluster); }

static void hash_key(struct tg_server *srv, char *key, size_t n)
{
    snprintf(key, n, "%sapprovals", cconf(srv)->key_prefix);
}

static void channel_of(struct tg_server *srv, const char *instance, char *ch, size_t n)
{
    snprintf(ch, n, "%sapprovals:%s", cconf(srv)->key_prefix, instance);
}

void tg__approvals_shared_park(struct tg_call *k)
{
    struct tg_server *srv = k->srv;
    struct tg_audit_conf ac = srv->conf->audit;
    ac.values = 1; /* approvers always see the arguments, redacted */
    cJSON *msg = cJSON_ParseWithLength(k->held.base, k->held.len);
    const cJSON *args = tg_json_get(tg_json_get(msg, "params"), "arguments");
    char *shown = args ? tg_audit_args_values(&ac, args) : NULL;
    cJSON_Delete(msg);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", k->approval_id);
    cJSON_AddStringToObject(o, "grant", k->grant);
    cJSON_AddStringToObject(o, "session", k->sess ? k->sess->id_str : "");
    cJSON_AddStringToObject(o, "upstream", tg_call_upstream_name(k) ? tg_call_upstream_name(k) : "");
    cJSON_AddStringToObject(o, "tool", k->tool ? k->tool : "");
    if (shown)
        cJSON_AddStringToObject(o, "args", shown);
    cJSON_AddStringToObject(o, "args_sha256", k->args_sha256);
    cJSON_AddNumberToObject(o, "parked_at_ms", (double)k->parked_at_wall);
    cJSON_AddNumberToObject(o, "deadline_ms", (double)(k->parked_at_wall + (uint64_t)k->dec->approval_timeout_ms));
    cJSON_AddStringToObject(o, "instance", cconf(srv)->instance);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    free(shown);
    char key[128];
    hash_key(srv, key, sizeof(key));
    const char *argv[] = {"HSET", key, k->approval_id, json};
    size_t lens[] = {4, strlen(key), strlen(k->approval_id), strlen(json)};
    tg_redis_command(tg_cluster_redis(srv->cluster), NULL, NULL, 4, argv, lens);
    free(json);
}

static void hdel(struct tg_server *srv, const char *id)
{
    char key[128];
    hash_key(srv, key, sizeof(key));
    const char *argv[] = {"HDEL", key, id};
    size_t lens[] = {4, strlen(key), strlen(id)};
    tg_redis_command(tg_cluster_redis(srv->cluster), NULL, NULL, 3, argv, lens);
}

void tg__approvals_shared_gone(struct tg_call *k) { hdel(k->srv, k->approval_id); }

/* A decision on the wire carries HMAC-SHA256 under a key from the cluster's secret, over
 * "id \n approve \n by \n reason": whoever can PUBLISH to Redis without being a member
 * cannot approve a call. */
static void decision_mac(struct tg_server *srv, const char *id, int approve, const char *by, const char *reason,
                         char hex[65])
{
    static const char label[] = "tollgate approval decision";
    const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    uint8_t key[32], mac[32];
    if (mbedtls_md_hmac(md, cconf(srv)->secret, 32, (const unsigned char *)label, sizeof(label) - 1, key) != 0)
        abort();
    struct tg_buf in;
    tg_buf_init(&in);
    tg_buf_appendf(&in, "%s\n%d\n%s\n", id, approve ? 1 : 0, by);
    if (reason)
        tg_buf_appends(&in, reason);
    if (mbedtls_md_hmac(md, key, 32, (const unsigned char *)in.base, in.len, mac) != 0)
        abort();
    tg_buf_dispose(&in);
    tg_hex_encode(mac, 32, hex);
}

/* A decision another member published for a call parked here. */
static void on_decision(void *ud, const char *channel, const char *p, size_t n)
{
    (void)channel;
    struct tg_server *srv = ud;
    cJSON *o = cJSON_ParseWithLength(p, n);
    const cJSON *id = tg_json_get(o, "id");
    const cJSON *by = tg_json_get(o, "by");
    const cJSON *reason = tg_json_get(o, "reason");
    const cJSON *mac = tg_json_get(o, "mac");
    int approve = cJSON_IsTrue(tg_json_get(o, "approve"));
    struct tg_call *k = NULL;
    if (cJSON_IsString(id) && cJSON_IsString(by) && cJSON_IsString(mac) && (reason == NULL || cJSON_IsString(reason))) {
        char want[65];
        decision_mac(srv, id->valuestring, approve, by->valuestring, reason ? reason->valuestring : NULL, want);
        uint8_t d = strlen(mac->valuestring) == 64 ? 0 : 1;
        for (size_t i = 0; i < 64 && d == 0; i++)
            d |= (uint8_t)(want[i] ^ mac->valuestring[i]);
        if (d == 0)
            k = tg_approvals_find(srv, tg_slice_cstr(id->valuestring));
        else
            tg_log(TG_LOG_WARN, "cluster: an approval decision without a valid MAC was ignored", "approval_id=%.64s",
                   id->valuestring);
    }
    if (k != NULL) {
        char who[128];
        snprintf(who, sizeof(who), "%s", cJSON_IsString(by) ? by->valuestring : "cluster");
        if (approve)
            tg_approvals_finish(k, 1, who, NULL);
        else
            tg_approvals_deny(k, who, cJSON_IsString(reason) ? reason->valuestring : NULL);
    }
    cJSON_Delete(o);
}

void tg__approvals_shared_start(struct tg_server *srv)
{
    char ch[160];
    channel_of(srv, cconf(srv)->instance, ch, sizeof(ch));
    tg_redis_subscribe(tg_cluster_redis(srv->cluster), ch, on_decision, srv);
}

/* ---- the queue ---------------------------------------------------------------------------- */

struct list_wait {
    struct tg_server *srv;
    tg_approval_list_cb done;
    void *ud;
};

static int by_parked(const void *a, const void *b)
{
    const struct tg_approval_item *x = a, *y = b;
    return x->parked_at_ms < y->parked_at_ms ? -1 : x->parked_at_ms > y->parked_at_ms;
}

static const char *sget(const cJSON *o, const char *name)
{
    const cJSON *v = tg_json_get(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static uint64_t nget(const cJSON *o, const char *name)
{
    const cJSON *v = tg_json_get(o, name);
    return cJSON_IsNumber(v) && v->valuedouble > 0 ? (uint64_t)v->valuedouble : 0;
}

/* Redis failed: this member's own calls, named as Redis would have named them. */
static void on_local(void *ud, const struct tg_approval_item *items, size_t n)
{
    struct list_wait *w = ud;
    struct tg_approval_item *named = n ? tg_xcalloc(n, sizeof(*named)) : NULL;
    for (size_t i = 0; i < n; i++) {
        named[i] = items[i];
        named[i].instance = cconf(w->srv)->instance;
    }
    w->done(w->ud, named, n);
    free(named);
    free(w);
}

static void on_hash(void *ud, int status, const struct redisReply *r)
{
    struct list_wait *w = ud;
    struct tg_server *srv = w->srv;
    if (status != TG_REDIS_OK || r == NULL || r->type != REDIS_REPLY_ARRAY) {
        /* Redis failed: this member's own calls are still here to show. */
        tg_log(TG_LOG_WARN, "cluster: the shared approvals queue cannot be read; showing this instance's",
               "error=\"%s\"",
               status == TG_REDIS_EDOWN       ? "Redis not connected"
               : status == TG_REDIS_ETIMEDOUT ? "Redis timed out"
               : status == TG_REDIS_EBUSY     ? "too many Redis requests in flight"
               : status == TG_REDIS_ECLOSED   ? "closed"
                                              : "unexpected Redis reply");
        tg__approvals_local_queue.list(srv, on_local, w);
        return;
    }
    size_t n = r->elements / 2, m = 0;
    struct tg_approval_item *items = n ? tg_xcalloc(n, sizeof(*items)) : NULL;
    cJSON **docs = n ? tg_xcalloc(n, sizeof(*docs)) : NULL;
    uint64_t now = (uint64_t)wall_ms();
    for (size_t i = 0; i < n; i++) {
        const struct redisReply *f = r->element[2 * i], *v = r->element[2 * i + 1];
        if (f->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING)
            continue;
        cJSON *o = cJSON_ParseWithLength(v->str, v->len);
        uint64_t deadline = nget(o, "deadline_ms");
        if (o == NULL || sget(o, "id") == NULL || deadline + 60000 < now) {
            /* Its member went away without taking it out: gone a minute past its deadline. */
            char id[80];
            snprintf(id, sizeof(id), "%.*s", (int)(f->len < 79 ? f->len : 79), f->str);
            hdel(srv, id);
            cJSON_Delete(o);
            continue;
        }
        if (deadline <= now) {
            cJSON_Delete(o);
            continue; /* refused by its member at its next tick */
        }
        struct tg_approval_item *it = &items[m];
        docs[m++] = o;
        it->id = sget(o, "id");
        it->grant = sget(o, "grant");
        it->session = sget(o, "session");
        it->upstream = sget(o, "upstream");
        it->tool = sget(o, "tool");
        it->args = sget(o, "args");
        it->parked_at_ms = nget(o, "parked_at_ms");
        it->waited_ms = now > it->parked_at_ms ? now - it->parked_at_ms : 0;
        it->expires_in_ms = deadline - now;
        it->instance = sget(o, "instance");
        it->args_sha256 = sget(o, "args_sha256");
    }
    if (m > 1)
        qsort(items, m, sizeof(*items), by_parked);
    w->done(w->ud, items, m);
    for (size_t i = 0; i < m; i++)
        cJSON_Delete(docs[i]);
    free(docs);
    free(items);
    free(w);
}

static void shared_list(struct tg_server *srv, tg_approval_list_cb done, void *ud)
{
    struct list_wait *w = tg_xcalloc(1, sizeof(*w));
    w->srv = srv;
    w->done = done;
    w->ud = ud;
    char key[128];
    hash_key(srv, key, sizeof(key));
    const char *argv[] = {"HGETALL", key};
    size_t lens[] = {7, strlen(key)};
    tg_redis_command(tg_cluster_redis(srv->cluster), on_hash, w, 2, argv, lens);
}

/* A decision for an approval that is not (or no longer) here: its member is asked. */
struct decide_wait {
    struct tg_server *srv;
    tg_approval_decide_cb done;
    void *ud;
    char id[80];
    int approve;
    char by[128];
    char *reason;
};

static void on_published(void *ud, int status, const struct redisReply *r)
{
    struct decide_wait *w = ud;
    /* PUBLISH answers how many members heard it: none means the member holding it is gone. */
    int heard = status == TG_REDIS_OK && r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer > 0;
    w->done(w->ud, heard ? 0 : TG_APPROVAL_UNKNOWN);
    free(w->reason);
    free(w);
}

static void on_item(void *ud, int status, const struct redisReply *r)
{
    struct decide_wait *w = ud;
    struct tg_server *srv = w->srv;
    cJSON *o = status == TG_REDIS_OK && r != NULL && r->type == REDIS_REPLY_STRING ? cJSON_ParseWithLength(r->str, r->len)
                                                                                   : NULL;
    const char *inst = sget(o, "instance");
    if (o == NULL || inst == NULL || nget(o, "deadline_ms") <= (uint64_t)wall_ms()) {
        w->done(w->ud, TG_APPROVAL_UNKNOWN);
        cJSON_Delete(o);
        free(w->reason);
        free(w);
        return;
    }
    char ch[160];
    channel_of(srv, inst, ch, sizeof(ch));
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "id", w->id);
    cJSON_AddBoolToObject(d, "approve", w->approve);
    cJSON_AddStringToObject(d, "by", w->by);
    if (w->reason)
        cJSON_AddStringToObject(d, "reason", w->reason);
    char mac[65];
    decision_mac(srv, w->id, w->approve, w->by, w->reason, mac);
    cJSON_AddStringToObject(d, "mac", mac);
    char *json = cJSON_PrintUnformatted(d);
    cJSON_Delete(d);
    cJSON_Delete(o);
    const char *argv[] = {"PUBLISH", ch, json};
    size_t lens[] = {7, strlen(ch), strlen(json)};
    tg_redis_command(tg_cluster_redis(srv->cluster), on_published, w, 3, argv, lens);
    free(json);
}

static void shared_decide(struct tg_server *srv, struct tg_slice id, int approve, const char *by, const char *reason,
                          tg_approval_decide_cb done, void *ud)
{
    if (tg_approvals_find(srv, id) != NULL || id.len >= 80) {
        tg__approvals_local_queue.decide(srv, id, approve, by, reason, done, ud); /* parked here */
        return;
    }
    struct decide_wait *w = tg_xcalloc(1, sizeof(*w));
    w->srv = srv;
    w->done = done;
    w->ud = ud;
    memcpy(w->id, id.ptr, id.len);
    w->approve = approve;
    snprintf(w->by, sizeof(w->by), "%s@%s", by ? by : "admin", cconf(srv)->instance);
    w->reason = reason ? tg_xstrdup(reason) : NULL;
    char key[128];
    hash_key(srv, key, sizeof(key));
    const char *argv[] = {"HGET", key, w->id};
    size_t lens[] = {4, strlen(key), id.len};
    tg_redis_command(tg_cluster_redis(srv->cluster), on_item, w, 3, argv, lens);
}

const struct tg_approval_queue_ops tg__approvals_shared_queue = {
    .list = shared_list,
    .decide = shared_decide,
};
