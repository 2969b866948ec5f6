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

#include "cluster/internal.h"
#include "cluster/redis/redis.h"
#include "core/call/approvals.h"
#include "core/call/call.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/base/sha256.h"

static void hash_key(struct tg_cluster *cl, char *key, size_t n) { snprintf(key, n, "%sapprovals", cl->key_prefix); }

static void channel_of(struct tg_cluster *cl, const char *instance, char *ch, size_t n)
{
    snprintf(ch, n, "%sapprovals:%s", cl->key_prefix, instance);
}

/* A listing is signed: HMAC-SHA256 under a key from the cluster's secret over the whole JSON
 * text of the item, and stored as the MAC in hex, a dot, then that text. Every field an approver
 * sees is inside it, so whoever can write to Redis without being a member can hide a parked call
 * (delete it) but not change what is shown of it, nor list one of their own. */
#define LISTING_LABEL "tollgate approval listing"

static void listing_mac(struct tg_cluster *cl, const char *json, size_t n, char hex[65])
{
    uint8_t mac[32];
    tg_hmac_labelled(cl->conf.secret, LISTING_LABEL, json, n, mac);
    tg_hex_encode(mac, 32, hex);
}

/* Write k's listing: pending, or (k->approval_decision) decided by k->approval_by, kept for the
 * page for ten minutes (the local queue's rule), then cleaned up with the others. */
static size_t write_listing(struct tg_cluster *cl, struct tg_call *k)
{
    struct tg_approval_item it;
    char *text = tg_approvals_item_of(k, &it);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", it.id);
    cJSON_AddStringToObject(o, "grant", it.grant);
    cJSON_AddStringToObject(o, "subject", it.subject);
    cJSON_AddStringToObject(o, "session", it.session);
    cJSON_AddStringToObject(o, "upstream", it.upstream);
    cJSON_AddStringToObject(o, "tool", it.tool);
    if (text)
        cJSON_AddStringToObject(o, "args_text", text);
    cJSON_AddStringToObject(o, "args_sha256", it.args_sha256);
    cJSON_AddStringToObject(o, "digest", it.digest);
    cJSON_AddNumberToObject(o, "policy", (double)it.policy);
    cJSON_AddNumberToObject(o, "parked_at_ms", (double)k->parked_at_wall);
    uint64_t deadline = k->parked_at_wall + (uint64_t)k->dec->approval_timeout_ms;
    cJSON_AddNumberToObject(o, "deadline_ms", (double)deadline);
    if (k->approval_decision != NULL) {
        uint64_t now = (uint64_t)wall_ms();
        cJSON_AddStringToObject(o, "decision", k->approval_decision);
        cJSON_AddStringToObject(o, "by", k->approval_by);
        cJSON_AddNumberToObject(o, "decided_at_ms", (double)now);
        cJSON_AddNumberToObject(o, "keep_ms", (double)(now + 10 * 60 * 1000));
    }
    cJSON_AddStringToObject(o, "instance", cl->instance);
    char why[600], blocked[640];
    if (k->approval_decision == NULL && tg_approvals_stale(k, why, sizeof(why)) != NULL) {
        /* written again after each reload (tg_approvals_reconf): every member shows it */
        snprintf(blocked, sizeof(blocked), "no longer allowed: %s", why);
        cJSON_AddStringToObject(o, "blocked", blocked);
    }
    char *json = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    free(text);
    struct tg_buf v;
    tg_buf_init(&v);
    char mac[65];
    listing_mac(cl, json, strlen(json), mac);
    tg_buf_append(&v, mac, 64);
    tg_buf_append(&v, ".", 1);
    tg_buf_appends(&v, json);
    free(json);
    char key[128];
    hash_key(cl, key, sizeof(key));
    const char *argv[] = {"HSET", key, k->approval_id, v.base};
    size_t lens[] = {4, strlen(key), strlen(k->approval_id), v.len};
    tg_redis_command(cl->redis, NULL, NULL, 4, argv, lens);
    size_t n = v.len;
    tg_buf_dispose(&v);
    return n;
}

void tg__cluster_approval_park(void *ud, struct tg_call *k)
{
    k->parked_bytes += write_listing(ud, k); /* a copy of the arguments the queue keeps */
}

/* The listing stored under field id, verified: its item (the caller deletes it), or NULL when it
 * is not one a member wrote for this id (counted, and logged at most once a minute). */
static cJSON *listing_open(struct tg_cluster *cl, const char *id, size_t idlen, const char *v, size_t n)
{
    char want[65];
    const char *json = v + 65;
    int ok = n > 65 && v[64] == '.';
    if (ok) {
        listing_mac(cl, json, n - 65, want);
        ok = tg_ct_equal((const uint8_t *)want, (const uint8_t *)v, 64);
    }
    cJSON *o = ok ? cJSON_ParseWithLength(json, n - 65) : NULL;
    const cJSON *oid = tg_json_get(o, "id");
    if (o != NULL && cJSON_IsString(oid) && strlen(oid->valuestring) == idlen && memcmp(oid->valuestring, id, idlen) == 0)
        return o;
    cJSON_Delete(o);
    cl->stats.listings_refused++;
    uint64_t now = (uint64_t)wall_ms();
    if (now - cl->listing_warned_ms >= 60000) {
        cl->listing_warned_ms = now;
        char esc[100];
        tg_log(TG_LOG_WARN, "cluster: an approval listing in Redis does not verify (not written by a member, or "
                            "changed since); it is not shown and cannot be decided",
               "approval_id=%s refused=%llu",
               tg_log_esc(esc, sizeof(esc), tg_slice_of(id, idlen < 64 ? idlen : 64)),
               (unsigned long long)cl->stats.listings_refused);
    }
    return NULL;
}

static void hdel(struct tg_cluster *cl, const char *id)
{
    char key[128];
    hash_key(cl, key, sizeof(key));
    const char *argv[] = {"HDEL", key, id};
    size_t lens[] = {4, strlen(key), strlen(id)};
    tg_redis_command(cl->redis, NULL, NULL, 3, argv, lens);
}

void tg__cluster_approval_gone(void *cl, struct tg_call *k)
{
    if (k->approval_decision != NULL)
        write_listing(cl, k); /* a human decided: shown as decided, by whom */
    else
        hdel(cl, k->approval_id);
}

/* A decision on the wire carries HMAC-SHA256 under a key from the cluster's secret, over
 * "id \n approve \n digest \n by \n reason": whoever can PUBLISH to Redis without being a member
 * cannot approve a call. */
static void decision_mac(struct tg_cluster *cl, const char *id, int approve, const char *digest, const char *by,
                         const char *reason, char hex[65])
{
    struct tg_buf in;
    tg_buf_init(&in);
    tg_buf_appendf(&in, "%s\n%d\n%s\n%s\n", id, approve ? 1 : 0, digest, by);
    if (reason)
        tg_buf_appends(&in, reason);
    uint8_t mac[32];
    tg_hmac_labelled(cl->conf.secret, "tollgate approval decision", in.base, in.len, mac);
    tg_buf_dispose(&in);
    tg_hex_encode(mac, 32, hex);
}

static void on_decided_here(void *ud, int rc, const char *why)
{
    (void)ud;
    (void)rc; /* decided by this member's queue, or no longer parked here: nothing to answer */
    (void)why;
}

/* A decision another member published for a call parked here. */
static void on_decision(void *ud, const char *channel, const char *p, size_t n)
{
    (void)channel;
    struct tg_cluster *cl = ud;
    cJSON *o = cJSON_ParseWithLength(p, n);
    const cJSON *id = tg_json_get(o, "id");
    const cJSON *by = tg_json_get(o, "by");
    const cJSON *reason = tg_json_get(o, "reason");
    const cJSON *mac = tg_json_get(o, "mac");
    const cJSON *digest = tg_json_get(o, "digest");
    int approve = cJSON_IsTrue(tg_json_get(o, "approve"));
    if (cJSON_IsString(id) && cJSON_IsString(by) && cJSON_IsString(mac) && cJSON_IsString(digest) &&
        (reason == NULL || cJSON_IsString(reason))) {
        char want[65];
        decision_mac(cl, id->valuestring, approve, digest->valuestring, by->valuestring,
                     reason ? reason->valuestring : NULL, want);
        if (strlen(mac->valuestring) == 64 && tg_ct_equal((const uint8_t *)want, (const uint8_t *)mac->valuestring, 64)) {
            /* Decided as if this member's own approver had (the local queue; unknown ids are
             * decided, expired or withdrawn already). */
            char who[128];
            snprintf(who, sizeof(who), "%s", by->valuestring);
            cl->local.ops->approval_decide(cl->local.ud, tg_slice_cstr(id->valuestring), approve,
                                           digest->valuestring, who,
                                           approve ? NULL : cJSON_IsString(reason) ? reason->valuestring : NULL,
                                           on_decided_here, NULL);
        } else {
            tg_log(TG_LOG_WARN, "cluster: an approval decision without a valid MAC was ignored", "approval_id=%.64s",
                   id->valuestring);
        }
    }
    cJSON_Delete(o);
}

void tg__cluster_approvals_start(struct tg_cluster *cl)
{
    char ch[160];
    channel_of(cl, cl->instance, ch, sizeof(ch));
    tg_redis_subscribe(cl->redis, ch, on_decision, cl);
}

/* ---- the queue ---------------------------------------------------------------------------- */

struct list_wait {
    struct tg_cluster *cl;
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
        named[i].instance = w->cl->instance;
    }
    w->done(w->ud, named, n);
    free(named);
    free(w);
}

static void on_hash(void *ud, int status, const struct redisReply *r)
{
    struct list_wait *w = ud;
    struct tg_cluster *cl = w->cl;
    if (status != TG_REDIS_OK || r == NULL || r->type != REDIS_REPLY_ARRAY) {
        /* Redis failed: this member's own calls are still here to show. */
        tg_log(TG_LOG_WARN, "cluster: the shared approvals queue cannot be read; showing this instance's",
               "error=\"%s\"",
               status == TG_REDIS_EDOWN       ? "Redis not connected"
               : status == TG_REDIS_ETIMEDOUT ? "Redis timed out"
               : status == TG_REDIS_EBUSY     ? "too many Redis requests in flight"
               : status == TG_REDIS_ECLOSED   ? "closed"
                                              : "unexpected Redis reply");
        cl->local.ops->approvals_list(cl->local.ud, on_local, w);
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
        cJSON *o = listing_open(cl, f->str, f->len, v->str, v->len);
        if (o == NULL)
            continue; /* not shown; left where it is (deleting it would only help whoever wrote it) */
        uint64_t deadline = nget(o, "deadline_ms"), keep = nget(o, "keep_ms");
        if ((keep > deadline ? keep : deadline) + 60000 < now) {
            /* Its member went away without taking it out, or it was decided long ago: gone a
             * minute past its deadline (a decided one: past the time it is shown). */
            char id[80];
            snprintf(id, sizeof(id), "%.*s", (int)(f->len < 79 ? f->len : 79), f->str);
            hdel(cl, id);
            cJSON_Delete(o);
            continue;
        }
        const char *decision = sget(o, "decision");
        if (decision == NULL && deadline <= now) {
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
        it->subject = sget(o, "subject");
        it->args_text = sget(o, "args_text");
        it->digest = sget(o, "digest");
        it->policy = nget(o, "policy");
        it->parked_at_ms = nget(o, "parked_at_ms");
        it->waited_ms = now > it->parked_at_ms ? now - it->parked_at_ms : 0;
        it->expires_in_ms = deadline > now ? deadline - now : 0;
        it->instance = sget(o, "instance");
        it->args_sha256 = sget(o, "args_sha256");
        it->blocked = sget(o, "blocked");
        it->decision = decision;
        it->by = sget(o, "by");
        it->decided_at_ms = nget(o, "decided_at_ms");
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

void tg__cluster_approvals_list(void *ud, tg_approval_list_cb done, void *cb_ud)
{
    struct tg_cluster *cl = ud;
    struct list_wait *w = tg_xcalloc(1, sizeof(*w));
    w->cl = cl;
    w->done = done;
    w->ud = cb_ud;
    char key[128];
    hash_key(cl, key, sizeof(key));
    const char *argv[] = {"HGETALL", key};
    size_t lens[] = {7, strlen(key)};
    tg_redis_command(cl->redis, on_hash, w, 2, argv, lens);
}

/* A decision for an approval that is not (or no longer) here: its member is asked. */
struct decide_wait {
    struct tg_cluster *cl;
    tg_approval_decide_cb done;
    void *ud;
    char id[80];
    int approve;
    char digest[65];
    char by[128];
    char *reason;
    char *blocked; /* the listing says it may no longer run (its member refuses it) */
};

static void on_published(void *ud, int status, const struct redisReply *r)
{
    struct decide_wait *w = ud;
    /* PUBLISH answers how many members heard it: none means the member holding it is gone. */
    int heard = status == TG_REDIS_OK && r != NULL && r->type == REDIS_REPLY_INTEGER && r->integer > 0;
    if (heard && w->approve && w->blocked != NULL)
        w->done(w->ud, TG_APPROVAL_NOT_ALLOWED, w->blocked); /* its member refuses it, as it says */
    else
        w->done(w->ud, heard ? 0 : TG_APPROVAL_UNKNOWN, NULL);
    free(w->reason);
    free(w->blocked);
    free(w);
}

static void on_item(void *ud, int status, const struct redisReply *r)
{
    struct decide_wait *w = ud;
    struct tg_cluster *cl = w->cl;
    cJSON *o = status == TG_REDIS_OK && r != NULL && r->type == REDIS_REPLY_STRING
                   ? listing_open(cl, w->id, strlen(w->id), r->str, r->len)
                   : NULL;
    const char *inst = sget(o, "instance");
    const char *digest = sget(o, "digest");
    int rc = o == NULL || inst == NULL || digest == NULL || sget(o, "decision") != NULL ||
                     nget(o, "deadline_ms") <= (uint64_t)wall_ms()
                 ? TG_APPROVAL_UNKNOWN
             : w->approve && strcmp(digest, w->digest) != 0 ? TG_APPROVAL_STALE
                                                            : 0;
    if (rc != 0) {
        /* Not listed by a member, decided, past its deadline, or (approve) not what the approver
         * saw: nothing is published. Its member checks the digest again when it hears one. */
        w->done(w->ud, rc, NULL);
        cJSON_Delete(o);
        free(w->reason);
        free(w);
        return;
    }
    const char *blocked = sget(o, "blocked");
    if (blocked != NULL) /* why, without the listing's "no longer allowed: " */
        w->blocked = tg_xstrdup(strncmp(blocked, "no longer allowed: ", 19) == 0 ? blocked + 19 : blocked);
    char ch[160];
    channel_of(cl, inst, ch, sizeof(ch));
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "id", w->id);
    cJSON_AddBoolToObject(d, "approve", w->approve);
    cJSON_AddStringToObject(d, "digest", w->digest);
    cJSON_AddStringToObject(d, "by", w->by);
    if (w->reason)
        cJSON_AddStringToObject(d, "reason", w->reason);
    char mac[65];
    decision_mac(cl, w->id, w->approve, w->digest, w->by, w->reason, mac);
    cJSON_AddStringToObject(d, "mac", mac);
    char *json = cJSON_PrintUnformatted(d);
    cJSON_Delete(d);
    cJSON_Delete(o);
    const char *argv[] = {"PUBLISH", ch, json};
    size_t lens[] = {7, strlen(ch), strlen(json)};
    tg_redis_command(cl->redis, on_published, w, 3, argv, lens);
    free(json);
}

struct here {
    int rc;
    char why[600];
};

static void on_here(void *ud, int rc, const char *why)
{
    struct here *h = ud;
    h->rc = rc;
    snprintf(h->why, sizeof(h->why), "%s", why ? why : "");
}

void tg__cluster_approval_decide(void *ud, struct tg_slice id, int approve, const char *digest, const char *by,
                                 const char *reason, tg_approval_decide_cb done, void *cb_ud)
{
    struct tg_cluster *cl = ud;
    /* Parked here: this member's queue decides it (and answers before it returns). */
    struct here here = {TG_APPROVAL_UNKNOWN, ""};
    cl->local.ops->approval_decide(cl->local.ud, id, approve, digest, by, reason, on_here, &here);
    if (here.rc == 0 || here.rc == TG_APPROVAL_NOT_ALLOWED || id.len >= 80) {
        done(cb_ud, here.rc, here.why[0] ? here.why : NULL);
        return;
    }
    struct decide_wait *w = tg_xcalloc(1, sizeof(*w));
    w->cl = cl;
    w->done = done;
    w->ud = cb_ud;
    memcpy(w->id, id.ptr, id.len);
    w->approve = approve;
    snprintf(w->digest, sizeof(w->digest), "%s", digest ? digest : "");
    snprintf(w->by, sizeof(w->by), "%s@%s", by ? by : "admin", cl->instance);
    w->reason = reason ? tg_xstrdup(reason) : NULL;
    char key[128];
    hash_key(cl, key, sizeof(key));
    const char *argv[] = {"HGET", key, w->id};
    size_t lens[] = {4, strlen(key), id.len};
    tg_redis_command(cl->redis, on_item, w, 3, argv, lens);
}
