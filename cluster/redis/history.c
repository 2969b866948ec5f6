/* Histories in Redis (policy/history.h): the two scripts of the history operations, the form an
 * entry takes as a list element, and the reading of a HIST_GET's answer.
 *
 * A key (key_prefix "h:" then h1 and h2 as 32 hex digits) is a list of entries, oldest first. An
 * add appends (RPUSH), trims the list to calls + 1 elements (LTRIM) and sets the key to expire a
 * day after this newest entry (PEXPIRE TG_HIST_MAX_AGE_MS), in one script, so that no reader sees
 * a list longer than the writer's bound. The one element kept beyond `calls` stands for what was
 * forgotten: a reader shows the newest `calls` and reads the one before as "the newest call
 * forgotten", which is what the local store's ring says after the same adds
 * (known_since_ms = its time + 1). An element that a trim left first is also marked (the high
 * bit of its first byte), so that a member with a longer limits.history_calls, reading the whole
 * list, still learns that older calls are gone.
 *
 * An element is binary, version 1 (big-endian integers), 30 bytes then the variable parts:
 *
 *   0  head      0x01, or 0x81 when a trim left it first (it, and every call before it, forgotten)
 *   1  kind      enum tg_hist_kind, 0..2
 *   2  flags     bit 0: name cut (truncated); bits 4..7: vals[k] present (k = bit - 4); others 0
 *   3  ntags     0..TG_HIST_TAGS
 *   4  ulen      upstream's length, 0..TG_HIST_UPSTREAM
 *   5  nlen      name's length, 0..TG_HIST_NAME
 *   6  at_ms     int64, 0 or more
 *   14 call      uint64
 *   22 session   uint64 (0: none)
 *   30 vals      8 bytes per present value (never 0), in order of k
 *      tags      8 bytes per tag (never 0)
 *      upstream  ulen bytes, no NUL
 *      name      nlen bytes, no NUL
 *      mac       8 bytes: SipHash-2-4, under a key derived from the cluster's secret, of h1, h2
 *                (8 bytes each) and every byte before it, the head's trim bit cleared
 *
 * and its length is exactly what these say. Nothing in Redis is trusted: an element that is not
 * exactly this, or whose mac does not verify, fails the op TG_REDIS_EVALUE (the decision is
 * refused, never made on the local store instead). The mac matters because a condition can
 * allow on what history holds ("only after list_* was called on the same path"): whoever can
 * write to Redis can delete a history, but cannot make up a call, nor move one to another
 * subject's key. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster/redis/scripts.h"
#include "core/base/siphash.h"

#define HEAD_V1 0x01
#define HEAD_TRIMMED 0x80
#define FIXED 30
#define MAC 8

/* "1 e1 e2 ...": the newest ARGV[1] + 1 elements. A key of another type, or an element longer
 * than any entry, is poison: TG__REDIS_BADVALUE (and nothing big crosses the wire). */
const char tg__redis_hist_get_lua[] =
    "local keep = tonumber(ARGV[1]) + 1\n"
    "local t = redis.pcall('LRANGE', KEYS[1], -keep, -1)\n"
    "if t.err then return redis.error_reply('" TG__REDIS_BADVALUE " history key is not a list') end\n"
    "for i = 1, #t do\n"
    "  if #t[i] > " TG__REDIS_HIST_MAXLEN_S " then\n"
    "    return redis.error_reply('" TG__REDIS_BADVALUE " history entry longer than any entry')\n"
    "  end\n"
    "end\n"
    "table.insert(t, 1, 1)\n"
    "return t\n";

/* ARGV: the entry, calls, ttl_ms. Returns {1}. */
const char tg__redis_hist_add_lua[] =
    "local keep = tonumber(ARGV[2]) + 1\n"
    "local n = redis.pcall('RPUSH', KEYS[1], ARGV[1])\n"
    "if type(n) == 'table' then return redis.error_reply('" TG__REDIS_BADVALUE " history key is not a list') end\n"
    "if n > keep then\n"
    "  redis.call('LTRIM', KEYS[1], n - keep, -1)\n"
    "  local m = redis.call('LINDEX', KEYS[1], 0)\n"
    "  local b = m and string.byte(m, 1)\n"
    "  if b and b < 128 then redis.call('LSET', KEYS[1], 0, string.char(b + 128) .. string.sub(m, 2)) end\n"
    "end\n"
    "redis.call('PEXPIRE', KEYS[1], ARGV[3])\n"
    "return {1}\n";

/* ARGV: the entry. Takes back the newest element equal to it (an add sent ahead of a decision
 * that did not keep it). A key of another type is left alone. Returns {1}. */
const char tg__redis_hist_del_lua[] =
    "redis.pcall('LREM', KEYS[1], -1, ARGV[1])\n"
    "return {1}\n";

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (unsigned char)(v & 0xff);
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v = v << 8 | p[i];
    return v;
}

/* A NUL-terminated field of at most max bytes (a longer one is cut, as the entry would be). */
static size_t field_len(const char *s, size_t max)
{
    const char *z = memchr(s, 0, max);
    return z ? (size_t)(z - s) : max;
}

/* The mac of the n bytes of an element before its mac, for key (h1, h2). */
static uint64_t mac_of(const uint8_t key[16], uint64_t h1, uint64_t h2, const unsigned char *p, size_t n)
{
    unsigned char b[16 + TG__REDIS_HIST_MAXLEN];
    put64(b, h1);
    put64(b + 8, h2);
    memcpy(b + 16, p, n);
    b[16] &= (unsigned char)~HEAD_TRIMMED;
    return tg_siphash(key, b, 16 + n);
}

size_t tg__redis_hist_encode(const struct tg_hist_entry *e, uint64_t h1, uint64_t h2, const uint8_t key[16],
                             unsigned char out[TG__REDIS_HIST_MAXLEN])
{
    size_t ntags = e->ntags <= TG_HIST_TAGS ? e->ntags : TG_HIST_TAGS;
    size_t ulen = field_len(e->upstream, TG_HIST_UPSTREAM), nlen = field_len(e->name, TG_HIST_NAME);
    unsigned char flags = e->truncated ? 1 : 0;
    unsigned char *p = out + FIXED;
    for (int k = 0; k < TG_HIST_VALS; k++)
        if (e->vals[k] != 0) {
            flags |= (unsigned char)(0x10 << k);
            put64(p, e->vals[k]);
            p += 8;
        }
    for (size_t k = 0; k < ntags; k++) {
        put64(p, e->tags[k] ? e->tags[k] : 1); /* a tag hash is never 0 (tg_hist_tag_hash) */
        p += 8;
    }
    memcpy(p, e->upstream, ulen);
    p += ulen;
    memcpy(p, e->name, nlen);
    p += nlen;
    out[0] = HEAD_V1;
    out[1] = e->kind <= TG_HIST_PROMPT ? e->kind : TG_HIST_TOOL;
    out[2] = flags;
    out[3] = (unsigned char)ntags;
    out[4] = (unsigned char)ulen;
    out[5] = (unsigned char)nlen;
    put64(out + 6, (uint64_t)(e->at_ms > 0 ? e->at_ms : 0));
    put64(out + 14, e->call);
    put64(out + 22, e->session);
    put64(p, mac_of(key, h1, h2, out, (size_t)(p - out)));
    return (size_t)(p + MAC - out);
}

int tg__redis_hist_decode(const void *data, size_t n, uint64_t h1, uint64_t h2, const uint8_t key[16],
                          struct tg_hist_entry *e, int *trimmed)
{
    const unsigned char *s = data;
    if (n < FIXED || (s[0] & ~HEAD_TRIMMED) != HEAD_V1 || s[1] > TG_HIST_PROMPT || (s[2] & 0x0e) != 0 ||
        s[3] > TG_HIST_TAGS || s[4] > TG_HIST_UPSTREAM || s[5] > TG_HIST_NAME)
        return -1;
    size_t nvals = 0;
    for (int k = 0; k < TG_HIST_VALS; k++)
        nvals += (s[2] >> (4 + k)) & 1;
    if (n != FIXED + 8 * (nvals + s[3]) + s[4] + s[5] + MAC || get64(s + n - MAC) != mac_of(key, h1, h2, s, n - MAC))
        return -1;
    memset(e, 0, sizeof(*e));
    *trimmed = (s[0] & HEAD_TRIMMED) != 0;
    e->kind = s[1];
    e->truncated = s[2] & 1;
    e->ntags = s[3];
    uint64_t at = get64(s + 6);
    if (at > (uint64_t)INT64_MAX - 1) /* negative, or no time after it */
        return -1;
    e->at_ms = (int64_t)at;
    e->call = get64(s + 14);
    e->session = get64(s + 22);
    const unsigned char *p = s + FIXED;
    for (int k = 0; k < TG_HIST_VALS; k++)
        if ((s[2] >> (4 + k)) & 1) {
            if ((e->vals[k] = get64(p)) == 0)
                return -1;
            p += 8;
        }
    for (size_t k = 0; k < e->ntags; k++, p += 8)
        if ((e->tags[k] = get64(p)) == 0)
            return -1;
    if (memchr(p, 0, s[4]) != NULL || memchr(p + s[4], 0, s[5]) != NULL)
        return -1; /* a name ends at its length, never inside it */
    memcpy(e->upstream, p, s[4]);
    memcpy(e->name, p + s[4], s[5]);
    return 0;
}

int tg__redis_hist_parse(struct tg_counter_op *op, const redisReply *y, const struct tg_redis_hist *h)
{
    struct tg_counter_plan *plan = h->plan;
    size_t calls = h->calls;
    if (plan == NULL || y->elements - 1 > calls + 1)
        return -1;
    size_t k = y->elements - 1, skip = 0;
    struct tg_hist_view *v = &op->view;
    memset(v, 0, sizeof(*v));
    v->known_since_ms = INT64_MIN;
    for (size_t i = 0; i < k; i++)
        if (y->element[1 + i]->type != REDIS_REPLY_STRING)
            return -1;
    if (k > 0) {
        struct tg_hist_entry first;
        int trimmed;
        if (tg__redis_hist_decode(y->element[1]->str, y->element[1]->len, op->h1, op->h2, h->key, &first, &trimmed) < 0)
            return -2;
        /* calls + 1 elements: the first is the newest one this member's bound forgets. */
        if (trimmed || k == calls + 1) {
            skip = 1;
            v->known_since_ms = first.at_ms + 1;
        }
    }
    struct tg_hist_entry *e = k > skip ? tg_plan_hist_alloc(plan, k - skip) : NULL;
    for (size_t i = skip; i < k; i++) {
        int trimmed;
        const redisReply *x = y->element[1 + i];
        if (tg__redis_hist_decode(x->str, x->len, op->h1, op->h2, h->key, &e[i - skip], &trimmed) < 0 || trimmed)
            return -2; /* a trim marks the first element only */
    }
    v->a = e;
    v->na = k - skip;
    op->ok = 1;
    return 0;
}

void tg__redis_hist_argv(struct tg__redis_argv *v, const struct tg_counter_op *op, const struct tg_redis_hist *h)
{
    snprintf(v->num[0], sizeof(v->num[0]), "%zu", h->calls);
    if (op->kind == TG_COP_HIST_GET) {
        v->argv[v->argc] = v->num[0];
        v->argvlen[v->argc++] = strlen(v->num[0]);
        return;
    }
    size_t n = tg__redis_hist_encode(op->entry, op->h1, op->h2, h->key, v->blob);
    snprintf(v->num[1], sizeof(v->num[1]), "%" PRId64, TG_HIST_MAX_AGE_MS);
    v->argv[v->argc] = (const char *)v->blob;
    v->argvlen[v->argc++] = n;
    if (op->kind == TG_COP_HIST_DEL)
        return;
    v->argv[v->argc] = v->num[0];
    v->argvlen[v->argc++] = strlen(v->num[0]);
    v->argv[v->argc] = v->num[1];
    v->argvlen[v->argc++] = strlen(v->num[1]);
}
