/* Pub/sub of the Redis client (see cluster/redis/redis.h): the subscriptions table, which the pub/sub
 * connection subscribes again after every reconnect (cluster/redis/redis.c conn_ready), and the
 * delivery of messages. */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster/redis/internal.h"

/* ---- pub/sub ------------------------------------------------------------------------------ */

static struct sub *sub_find(struct tg_redis *r, const char *channel, size_t n)
{
    for (struct sub *s = r->subs; s; s = s->next)
        if (strlen(s->channel) == n && memcmp(s->channel, channel, n) == 0)
            return s;
    return NULL;
}

static void on_sub_reply(redisAsyncContext *ac, void *reply, void *privdata)
{
    struct conn *c = privdata;
    const redisReply *y = reply;
    if (!y || ac != c->ac || y->type != REDIS_REPLY_ARRAY || y->elements != 3)
        return;
    const redisReply *kind = y->element[0], *ch = y->element[1], *msg = y->element[2];
    if (kind->type != REDIS_REPLY_STRING || ch->type != REDIS_REPLY_STRING || msg->type != REDIS_REPLY_STRING ||
        kind->len != 7 || memcmp(kind->str, "message", 7) != 0)
        return;
    struct sub *s = sub_find(c->r, ch->str, ch->len);
    if (s && s->cb)
        s->cb(s->ud, s->channel, msg->str, msg->len);
}

void tg__redis_sub_send(struct conn *c, const char *verb, const char *channel)
{
    const char *argv[2] = {verb, channel};
    size_t argvlen[2] = {strlen(verb), strlen(channel)};
    if (redisAsyncCommandArgv(c->ac, on_sub_reply, c, 2, argv, argvlen) == REDIS_OK)
        c->r->st.commands++;
}

void tg_redis_subscribe(struct tg_redis *r, const char *channel, tg_redis_message_cb on_message, void *ud)
{
    if (r->closing)
        return;
    struct sub *s = sub_find(r, channel, strlen(channel));
    if (s) {
        s->cb = on_message;
        s->ud = ud;
        return;
    }
    s = calloc(1, sizeof(*s));
    if (!s)
        abort();
    s->channel = tg__redis_strdup(channel);
    s->cb = on_message;
    s->ud = ud;
    s->next = r->subs;
    r->subs = s;
    if (r->sub.state == CONN_UP)
        tg__redis_sub_send(&r->sub, "SUBSCRIBE", channel);
}

void tg_redis_unsubscribe(struct tg_redis *r, const char *channel)
{
    for (struct sub **pp = &r->subs; *pp; pp = &(*pp)->next) {
        struct sub *s = *pp;
        if (strcmp(s->channel, channel) != 0)
            continue;
        *pp = s->next;
        if (r->sub.state == CONN_UP && !r->closing)
            tg__redis_sub_send(&r->sub, "UNSUBSCRIBE", channel);
        free(s->channel);
        free(s);
        return;
    }
}

