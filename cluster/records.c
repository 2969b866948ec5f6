/* Retry-mode approvals every member finds (core/call/shared.h, "retry records").
 *
 * One Redis string per match key, key_prefix "ar:" + the key in hex, expiring with the record
 * (pending: at its call's deadline; decided: approval_ttl after the decision). Its value is
 *
 *     STATE ID MAC "." JSON
 *
 * STATE one character (P pending, A approved, T approved and taken by a call running now,
 * D denied), ID the approval id (32 hex digits), MAC HMAC-SHA256 in hex under a key from the
 * cluster's secret over JSON, and JSON every field of the record: {"v":1, "key", "id", "state",
 * "by", "reason", "expires_ms", "instance"}. STATE and ID stand before the MAC so that the
 * scripts below can compare and swap without the secret; a member believes them only when the
 * JSON they are signed with says the same (T: "approved"). A value that does not verify is
 * ignored and counted: whoever can write to Redis without being a member can make a call ask
 * for a new approval, never run one nobody approved, nor change an approver's reason.
 *
 * Consumption is one script: an A record becomes T in the same step that reads it, so of two
 * members making the same call at once exactly one finds it approved; the other finds T
 * (busy). The call that took it settles it: T is deleted (used), or turned back into A (given
 * back: it certainly did not run); key "ar:" KEY ":t" names the lookup that took it, so that a
 * lookup whose answer never came (Redis timed out) is undone after the fact. A lookup that finds
 * nothing makes the caller's pending record in that step too, so identical calls on different
 * members share one approval. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cluster/internal.h"
#include "cluster/redis/redis.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/base/sha256.h"
#include "core/call/call.h"

#define RECORD_LABEL "tollgate approval record"
#define HEAD 97 /* STATE, ID (32), MAC (64) */

/* KEYS[1] the record, KEYS[2] who took it; ARGV[1] the caller's pending record, ARGV[2] its time
 * to live (ms), ARGV[3] the caller's token (its pending record's id). */
static const char FIND[] = "local v = redis.call('GET', KEYS[1])\n"
                           "if not v then\n"
                           "  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n"
                           "  return false\n"
                           "end\n"
                           "if string.sub(v, 1, 1) == 'A' then\n"
                           "  redis.call('SET', KEYS[1], 'T' .. string.sub(v, 2), 'KEEPTTL')\n"
                           "  local t = redis.call('PTTL', KEYS[1])\n"
                           "  if t > 0 then redis.call('SET', KEYS[2], ARGV[3], 'PX', t) end\n"
                           "end\n"
                           "return v\n";

/* KEYS as FIND's; ARGV[1] an id, ARGV[2] what to do: P drop the pending record of that id, T
 * delete the taken one of that id (used), G give the taken one of that id back, F undo a lookup
 * whose answer never came (ARGV[1] its token: the pending record it made dropped, or the
 * record it took given back). Never to any other record. */
static const char SETTLE[] = "local v = redis.call('GET', KEYS[1])\n"
                             "if not v then return 0 end\n"
                             "local s = string.sub(v, 1, 1)\n"
                             "local mine = string.sub(v, 2, 33) == ARGV[1]\n"
                             "if ARGV[2] == 'F' then\n"
                             "  if s == 'P' and mine then redis.call('DEL', KEYS[1]) return 1 end\n"
                             "  if s ~= 'T' or redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end\n"
                             "elseif not mine then return 0\n"
                             "elseif ARGV[2] ~= 'G' then\n"
                             "  if s ~= ARGV[2] then return 0 end\n"
                             "  redis.call('DEL', KEYS[1], KEYS[2])\n"
                             "  return 1\n"
                             "elseif s ~= 'T' then return 0\n"
                             "end\n"
                             "redis.call('SET', KEYS[1], 'A' .. string.sub(v, 2), 'KEEPTTL')\n"
                             "redis.call('DEL', KEYS[2])\n"
                             "return 1\n";

static const char *const state_names[] = {"pending", "approved", "denied"};
static const char state_chars[] = {'P', 'A', 'D'};

void tg__cluster_record_encode(const uint8_t secret[32], const struct tg_approval_record *r, const char *instance,
                               struct tg_buf *out)
{
    char key[65];
    tg_hex_encode(r->key, 32, key);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "v", 1);
    cJSON_AddStringToObject(o, "key", key);
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "state", state_names[r->state]);
    if (r->by != NULL)
        cJSON_AddStringToObject(o, "by", r->by);
    if (r->reason != NULL)
        cJSON_AddStringToObject(o, "reason", r->reason);
    cJSON_AddNumberToObject(o, "expires_ms", (double)r->expires_ms);
    cJSON_AddStringToObject(o, "instance", instance);
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    uint8_t mac[32];
    char hex[65];
    tg_hmac_labelled(secret, RECORD_LABEL, json, strlen(json), mac);
    tg_hex_encode(mac, 32, hex);
    tg_buf_append(out, &state_chars[r->state], 1);
    tg_buf_appendf(out, "%.32s%s.", r->id, hex);
    tg_buf_appends(out, json);
    free(json);
}

static const char *sget(const cJSON *o, const char *name)
{
    const cJSON *v = tg_json_get(o, name);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

cJSON *tg__cluster_record_open(const uint8_t secret[32], const uint8_t key[32], const char *v, size_t n,
                               struct tg_approval_record *r, int *taken)
{
    if (n <= HEAD || v[HEAD] != '.')
        return NULL;
    uint8_t mac[32];
    char hex[65];
    tg_hmac_labelled(secret, RECORD_LABEL, v + HEAD + 1, n - HEAD - 1, mac);
    tg_hex_encode(mac, 32, hex);
    if (!tg_ct_equal((const uint8_t *)hex, (const uint8_t *)v + 33, 64))
        return NULL;
    cJSON *o = cJSON_ParseWithLength(v + HEAD + 1, n - HEAD - 1);
    char want[65];
    tg_hex_encode(key, 32, want);
    const char *k = sget(o, "key"), *id = sget(o, "id"), *st = sget(o, "state");
    const cJSON *exp = tg_json_get(o, "expires_ms"), *ver = tg_json_get(o, "v");
    int state = -1;
    for (int i = 0; st != NULL && i < 3; i++)
        if (strcmp(st, state_names[i]) == 0)
            state = i;
    char c = v[0];
    int ok = o != NULL && cJSON_IsNumber(ver) && ver->valuedouble == 1 && k != NULL && strcmp(k, want) == 0 &&
             id != NULL && strlen(id) == 32 && memcmp(id, v + 1, 32) == 0 && cJSON_IsNumber(exp) &&
             exp->valuedouble > 0 && state >= 0 &&
             (c == state_chars[state] || (c == 'T' && state == TG_RECORD_APPROVED));
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    memset(r, 0, sizeof(*r));
    memcpy(r->key, key, 32);
    r->id = id;
    r->state = state;
    r->by = sget(o, "by");
    r->reason = sget(o, "reason");
    r->expires_ms = (uint64_t)exp->valuedouble;
    *taken = c == 'T';
    return o;
}

static void record_key(struct tg_cluster *cl, const uint8_t key[32], char *out, size_t n)
{
    char hex[65];
    tg_hex_encode(key, 32, hex);
    snprintf(out, n, "%sar:%s", cl->key_prefix, hex);
}

/* A value that did not verify: counted, and logged at most once a minute. */
static void refused(struct tg_cluster *cl)
{
    cl->stats.records_refused++;
    uint64_t now = (uint64_t)wall_ms();
    if (now - cl->record_warned_ms >= 60000) {
        cl->record_warned_ms = now;
        tg_log(TG_LOG_WARN, "cluster: an approval record in Redis does not verify (not written by a member, or "
                            "changed since); it is ignored",
               "refused=%llu", (unsigned long long)cl->stats.records_refused);
    }
}

static void settle(struct tg_cluster *cl, const uint8_t key[32], const char *id, const char *how)
{
    char k[200], t[204];
    record_key(cl, key, k, sizeof(k));
    snprintf(t, sizeof(t), "%s:t", k);
    const char *argv[] = {"EVAL", SETTLE, "2", k, t, id, how};
    size_t lens[] = {4, sizeof(SETTLE) - 1, 1, strlen(k), strlen(t), strlen(id), 1};
    tg_redis_command(cl->redis, NULL, NULL, 7, argv, lens);
}

/* A lookup waiting for Redis. Owner: the cluster, until its answer came (freed then). */
struct tg_record_wait {
    struct tg_cluster *cl;
    tg_record_cb cb; /* NULL once detached */
    void *ud;
    uint8_t key[32];
    char id[33];     /* the caller's pending record's id */
    struct tg_buf mine;
    uint64_t ttl_ms;
};

static void on_found(void *ud, int status, const struct redisReply *r)
{
    struct tg_record_wait *w = ud;
    struct tg_cluster *cl = w->cl;
    if (status != TG_REDIS_OK || r == NULL || (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_STRING)) {
        /* Nothing known: the caller fails closed (Redis may have made the pending record or
         * taken an approved one; neither runs anything, and both expire). */
        /* Its script may yet run (a Redis that timed out): undone after it, on the same connection. */
        if (status != TG_REDIS_ECLOSED)
            settle(cl, w->key, w->id, "F");
        if (w->cb != NULL)
            w->cb(w->ud, TG_RECORD_FAILED, NULL,
                  status == TG_REDIS_EDOWN       ? "Redis not connected"
                  : status == TG_REDIS_ETIMEDOUT ? "Redis timed out"
                  : status == TG_REDIS_EBUSY     ? "too many Redis requests in flight"
                  : status == TG_REDIS_ECLOSED   ? "shutting down"
                                                 : "unexpected Redis reply");
        goto out;
    }
    int found = TG_RECORD_MINE, taken = 0;
    struct tg_approval_record rec;
    cJSON *o = NULL;
    if (r->type == REDIS_REPLY_STRING) {
        o = tg__cluster_record_open(cl->conf.secret, w->key, r->str, r->len, &rec, &taken);
        if (o == NULL)
            refused(cl);
        if (o != NULL && rec.expires_ms > (uint64_t)wall_ms())
            found = taken ? TG_RECORD_BUSY : TG_RECORD_FOUND; /* T: taken by another call already */
        if (found == TG_RECORD_MINE) {
            /* Ignored (or past its time): the caller's pending record replaces it. */
            char k[200];
            record_key(cl, w->key, k, sizeof(k));
            char px[24];
            snprintf(px, sizeof(px), "%llu", (unsigned long long)w->ttl_ms);
            const char *argv[] = {"SET", k, w->mine.base, "PX", px};
            size_t lens[] = {3, strlen(k), w->mine.len, 2, strlen(px)};
            tg_redis_command(cl->redis, NULL, NULL, 5, argv, lens);
        }
    }
    /* The script turned an approved record to taken: this lookup is the one that took it. */
    int took = found == TG_RECORD_FOUND && rec.state == TG_RECORD_APPROVED;
    if (w->cb != NULL)
        w->cb(w->ud, found, found == TG_RECORD_MINE ? NULL : &rec, NULL);
    else if (took)
        settle(cl, w->key, rec.id, "G"); /* its caller went: nothing ran */
    else if (found == TG_RECORD_MINE)
        settle(cl, w->key, w->id, "P"); /* nobody parks it */
    cJSON_Delete(o);
out:
    tg_buf_dispose(&w->mine);
    free(w);
}

struct tg_record_wait *tg__cluster_record_find(void *ud, const struct tg_approval_record *mine, tg_record_cb cb,
                                               void *cb_ud)
{
    struct tg_cluster *cl = ud;
    struct tg_record_wait *w = tg_xcalloc(1, sizeof(*w));
    w->cl = cl;
    w->cb = cb;
    w->ud = cb_ud;
    memcpy(w->key, mine->key, 32);
    snprintf(w->id, sizeof(w->id), "%s", mine->id);
    tg_buf_init(&w->mine);
    tg__cluster_record_encode(cl->conf.secret, mine, cl->instance, &w->mine);
    uint64_t now = (uint64_t)wall_ms();
    w->ttl_ms = mine->expires_ms > now ? mine->expires_ms - now : 1;
    char k[200], t[204], px[24];
    record_key(cl, mine->key, k, sizeof(k));
    snprintf(t, sizeof(t), "%s:t", k);
    snprintf(px, sizeof(px), "%llu", (unsigned long long)w->ttl_ms);
    const char *argv[] = {"EVAL", FIND, "2", k, t, w->mine.base, px, w->id};
    size_t lens[] = {4, sizeof(FIND) - 1, 1, strlen(k), strlen(t), w->mine.len, strlen(px), strlen(w->id)};
    tg_redis_command(cl->redis, on_found, w, 8, argv, lens);
    return w;
}

void tg__cluster_record_detach(void *ud, struct tg_record_wait *w)
{
    (void)ud;
    if (w == NULL)
        return;
    w->cb = NULL;
    w->ud = NULL;
}

void tg__cluster_record_put(void *ud, const struct tg_approval_record *rec)
{
    struct tg_cluster *cl = ud;
    uint64_t now = (uint64_t)wall_ms();
    if (rec->expires_ms <= now)
        return;
    struct tg_buf v;
    tg_buf_init(&v);
    tg__cluster_record_encode(cl->conf.secret, rec, cl->instance, &v);
    char k[200], px[24];
    record_key(cl, rec->key, k, sizeof(k));
    snprintf(px, sizeof(px), "%llu", (unsigned long long)(rec->expires_ms - now));
    const char *argv[] = {"SET", k, v.base, "PX", px};
    size_t lens[] = {3, strlen(k), v.len, 2, strlen(px)};
    tg_redis_command(cl->redis, NULL, NULL, 5, argv, lens);
    tg_buf_dispose(&v);
}

void tg__cluster_record_drop(void *ud, const uint8_t key[32], const char *id) { settle(ud, key, id, "P"); }

void tg__cluster_record_settled(void *ud, const uint8_t key[32], const char *id, int give_back)
{
    settle(ud, key, id, give_back ? "G" : "T");
}
