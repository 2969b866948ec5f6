/* Shared 2025 sessions: their records in Redis (cluster/internal.h), the shared store's session
 * operations. */

#include <cjson/cJSON.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/internal.h"
#include "cluster/redis/redis.h"
#include "core/conf/conf.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/base/sha256.h"
#include "core/call/session.h"

/* A read waiting for Redis. Owner: itself, from tg__cluster_session_fetch() until on_get ran. */
struct tg_cluster_fetch {
    struct tg_cluster *cl;
    tg_shared_session_cb cb;
    void *ud;
    char id[64];
    int second; /* the second read of a record the first did not find */
};

static void get(struct tg_cluster_fetch *f);

static int key_of(struct tg_cluster *cl, const char *id, char *key, size_t n)
{
    return snprintf(key, n, "%ss:%s", cl->conf.key_prefix, id);
}

/* A record carries HMAC-SHA256 under a key from the cluster's secret over what it binds (id,
 * grant, upstream, upstream session, version, and the digest of the subject that made it):
 * write access to Redis alone cannot move a session to another grant, user or upstream session. */
static void record_mac(struct tg_cluster *cl, const char *id, const struct tg_shared_session_rec *r, char hex[65])
{
    struct tg_buf in;
    tg_buf_init(&in);
    const char *parts[] = {id, r->grant, r->upstream, r->up_session ? r->up_session : "", r->proto,
                           r->up_modern ? "1" : "0", r->client_caps ? r->client_caps : ""};
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        tg_buf_appendf(&in, "%zu:", strlen(parts[i])); /* length-prefixed: no two records read the same */
        tg_buf_appends(&in, parts[i]);
    }
    if (r->owner != NULL) { /* a part of its own, after the others: a record without one reads as before */
        tg_buf_appendf(&in, "owner%zu:", strlen(r->owner));
        tg_buf_appends(&in, r->owner);
    }
    uint8_t mac[32];
    tg_hmac_labelled(cl->conf.secret, "tollgate session record", in.base, in.len, mac);
    tg_buf_dispose(&in);
    tg_hex_encode(mac, 32, hex);
}

static void publish(struct tg_cluster *cl, const char *id, const struct tg_shared_session_rec *rec)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "grant", rec->grant);
    cJSON_AddStringToObject(o, "upstream", rec->upstream);
    if (rec->up_session)
        cJSON_AddStringToObject(o, "up_session", rec->up_session);
    cJSON_AddStringToObject(o, "proto", rec->proto ? rec->proto : "");
    if (rec->up_modern) {
        cJSON_AddBoolToObject(o, "up_modern", 1);
        if (rec->client_caps)
            cJSON_AddStringToObject(o, "client_caps", rec->client_caps);
        cJSON_AddNumberToObject(o, "log_level", rec->log_level);
    }
    cJSON_AddStringToObject(o, "instance", cl->conf.instance);
    if (rec->owner != NULL)
        cJSON_AddStringToObject(o, "owner", rec->owner);
    char mac[65];
    record_mac(cl, id, rec, mac);
    cJSON_AddStringToObject(o, "mac", mac);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    char key[160], ttl[24];
    key_of(cl, id, key, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%d", cl->conf.session_ttl_ms);
    const char *argv[] = {"SET", key, json, "PX", ttl};
    size_t lens[] = {3, strlen(key), strlen(json), 2, strlen(ttl)};
    tg_redis_command(cl->redis, NULL, NULL, 5, argv, lens);
    free(json);
}

static void touch(struct tg_cluster *cl, const char *id)
{
    char key[160], ttl[24];
    key_of(cl, id, key, sizeof(key));
    snprintf(ttl, sizeof(ttl), "%d", cl->conf.session_ttl_ms);
    const char *argv[] = {"PEXPIRE", key, ttl};
    size_t lens[] = {7, strlen(key), strlen(ttl)};
    tg_redis_command(cl->redis, NULL, NULL, 3, argv, lens);
}

void tg__cluster_session_forget(void *ud, const char *id)
{
    struct tg_cluster *cl = ud;
    char key[160];
    key_of(cl, id, key, sizeof(key));
    const char *argv[] = {"DEL", key};
    size_t lens[] = {3, strlen(key)};
    tg_redis_command(cl->redis, NULL, NULL, 2, argv, lens);
    char ch[128];
    snprintf(ch, sizeof(ch), "%ssessions:end", cl->conf.key_prefix);
    const char *pargv[] = {"PUBLISH", ch, id};
    size_t plens[] = {7, strlen(ch), strlen(id)};
    tg_redis_command(cl->redis, NULL, NULL, 3, pargv, plens);
}

static void on_end(void *ud, const char *channel, const char *p, size_t n)
{
    (void)channel;
    char id[64];
    if (n == 0 || n >= sizeof(id))
        return;
    memcpy(id, p, n);
    id[n] = '\0';
    struct tg_cluster *cl = ud;
    if (cl->session_ended != NULL)
        cl->session_ended(cl->session_ended_ud, id);
}

void tg_cluster_sessions_watch(struct tg_cluster *cl, void (*ended)(void *ud, const char *id), void *ud)
{
    cl->session_ended = ended;
    cl->session_ended_ud = ud;
    char ch[128];
    snprintf(ch, sizeof(ch), "%ssessions:end", cl->conf.key_prefix);
    tg_redis_subscribe(cl->redis, ch, on_end, cl);
}

static const char *str_of(const cJSON *o, const char *name)
{
    const cJSON *v = tg_json_get(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void on_get(void *ud, int status, const struct redisReply *reply)
{
    struct tg_cluster_fetch *f = ud;
    if (status == TG_REDIS_OK && reply != NULL && reply->type == REDIS_REPLY_NIL && !f->second && f->cb != NULL) {
        /* The member that made the session answered its client and writes the record in the
         * same loop iteration, so a client fast enough to reach us first may have: read once
         * more, one Redis round trip later (ids are sealed: only a real id pays for this). */
        f->second = 1;
        get(f);
        return;
    }
    tg_shared_session_cb cb = f->cb;
    void *cud = f->ud;
    struct tg_cluster *cl = f->cl;
    char id[64];
    memcpy(id, f->id, sizeof(id));
    free(f);
    if (cb == NULL)
        return;
    if (status != TG_REDIS_OK) {
        cb(cud, -1, NULL, status == TG_REDIS_ETIMEDOUT ? "Redis did not answer in time" : "Redis is unavailable");
        return;
    }
    if (reply == NULL || reply->type == REDIS_REPLY_NIL) {
        cb(cud, 0, NULL, NULL);
        return;
    }
    if (reply->type != REDIS_REPLY_STRING) {
        cb(cud, -1, NULL, "Redis gave an unexpected answer");
        return;
    }
    cJSON *o = cJSON_ParseWithLength(reply->str, reply->len);
    struct tg_shared_session_rec rec = {0};
    rec.grant = str_of(o, "grant");
    rec.upstream = str_of(o, "upstream");
    rec.up_session = str_of(o, "up_session");
    rec.proto = str_of(o, "proto");
    rec.up_modern = cJSON_IsTrue(tg_json_get(o, "up_modern"));
    rec.client_caps = str_of(o, "client_caps");
    const cJSON *ll = tg_json_get(o, "log_level");
    rec.log_level = cJSON_IsNumber(ll) && ll->valuedouble >= 0 && ll->valuedouble < 16 ? (int)ll->valuedouble : 0;
    rec.instance = str_of(o, "instance");
    rec.owner = str_of(o, "owner");
    const char *mac = str_of(o, "mac");
    char want[65];
    int ok = rec.grant != NULL && rec.upstream != NULL && rec.proto != NULL && mac != NULL && strlen(mac) == 64;
    if (ok) {
        record_mac(cl, id, &rec, want);
        ok = tg_ct_equal((const uint8_t *)want, (const uint8_t *)mac, 64);
    }
    if (!ok) {
        tg_log(TG_LOG_WARN, "cluster: a session record in Redis is malformed or its MAC does not verify; refused",
               "session=%s", id);
        cb(cud, 0, NULL, NULL); /* as if absent: Session not found */
    } else {
        cb(cud, 1, &rec, NULL);
    }
    cJSON_Delete(o);
}

void tg__cluster_session_fetch(void *cl, const char *id, tg_shared_session_cb cb, void *cb_ud)
{
    struct tg_cluster_fetch *f = tg_xcalloc(1, sizeof(*f));
    f->cl = cl;
    f->cb = cb;
    f->ud = cb_ud;
    snprintf(f->id, sizeof(f->id), "%s", id);
    get(f);
}

static void get(struct tg_cluster_fetch *f)
{
    char key[160];
    key_of(f->cl, f->id, key, sizeof(key));
    const char *argv[] = {"GET", key};
    size_t lens[] = {3, strlen(key)};
    tg_redis_command(f->cl->redis, on_get, f, 2, argv, lens);
}

void tg__cluster_session_share(void *cl, struct tg_session *s, const struct tg_upstream_conf *uc)
{
    if (!s->live || !s->initialized || (uc->transport != TG_UP_STREAMABLE && !s->up_modern))
        return; /* a stdio child or a legacy SSE stream lives inside this gateway only */
    struct tg_shared_session_rec rec = {0};
    rec.grant = s->grant;
    rec.upstream = uc->name;
    rec.up_session = s->up_session;
    rec.proto = s->proto;
    rec.up_modern = s->up_modern;
    rec.client_caps = s->up_modern ? s->u.client_caps : NULL;
    rec.log_level = s->log_level;
    char owner[65];
    if (s->subject != NULL) {
        tg_hex_encode(s->subject_sha256, 32, owner);
        rec.owner = owner;
    }
    publish(cl, s->id_str, &rec);
    s->shared = 1;
}

void tg__cluster_session_used(void *ud, struct tg_session *s, uint64_t now_ms)
{
    struct tg_cluster *cl = ud;
    if (!s->shared || now_ms - s->shared_touch_ms < (uint64_t)cl->conf.session_ttl_ms / 8)
        return;
    s->shared_touch_ms = now_ms;
    touch(cl, s->id_str);
}
