/* The Lua text of the counter and history scripts (cluster/redis/scripts.c, history.c), indexed
 * by enum tg_counter_op_kind, then the batch script. Internal to cluster/redis. */
#ifndef TG_CLUSTER_REDIS_SCRIPTS_H
#define TG_CLUSTER_REDIS_SCRIPTS_H

#include "cluster/redis/redis.h"
#include "policy/counters.h"

#define TG__REDIS_NSCRIPTS 9
#define TG__REDIS_SCRIPT_BATCH 8 /* after the ops' scripts: the batch of counter ops (batch.c) */
extern const char *const tg__redis_scripts[TG__REDIS_NSCRIPTS];

struct redisReply;

/* The longest history entry in Redis (cluster/redis/history.c has the form): 30 fixed bytes, four
 * values, the tags, the upstream's and the name's bytes, the mac. */
#define TG__REDIS_HIST_MAXLEN (30 + 8 * TG_HIST_VALS + 8 * TG_HIST_TAGS + TG_HIST_UPSTREAM + TG_HIST_NAME + 8)
#define TG__REDIS_HIST_MAXLEN_S "325" /* the same, for the Lua text */
_Static_assert(TG__REDIS_HIST_MAXLEN == 325, "TG__REDIS_HIST_MAXLEN_S");

/* An op's kind in the batch script: its enum tg_counter_op_kind, or for a take with extra (a
 * lease's take up to, cluster/lease.c) TG__REDIS_BATCH_TAKE_UPTO (it answers 4 elements). */
#define TG__REDIS_BATCH_TAKE_UPTO 5
static inline int tg__redis_batch_kind(const struct tg_counter_op *op)
{
    return op->kind == TG_COP_BUCKET_TAKE && op->extra > 0 ? TG__REDIS_BATCH_TAKE_UPTO : (int)op->kind;
}

/* The EVALSHA command of one op: argv points into the struct itself. */
struct tg__redis_argv {
    char key[256];
    char num[6][32];
    unsigned char blob[TG__REDIS_HIST_MAXLEN]; /* a HIST_ADD's entry */
    const char *argv[10];
    size_t argvlen[10];
    int argc;
};
/* hist: for the history operations (the list's bound, the mac's key). A HIST_ADD's entry must
 * not be NULL. */
void tg__redis_op_argv(struct tg__redis_argv *v, const struct tg_counter_op *op, const char *prefix, const char *sha,
                       const struct tg_redis_hist *hist);
/* The start of the error a script answers when its key holds something that is not two finite
 * decimal numbers (poisoned, or written by something else): the op fails TG_REDIS_EVALUE. The
 * history scripts answer it for a key that is not a list, or an element longer than any entry. */
#define TG__REDIS_BADVALUE "TGBADVALUE"
/* Fill op's result from its script's reply: 0; -1 if the reply has another shape; -2 if a value
 * in it is not a finite decimal number, or not a history entry. Doubles come as "%.17g" strings,
 * read back exactly by tg_num_parse (core/base/num.h), which refuses nan, inf, hex and
 * out-of-range values. A HIST_GET's entries are written into hist->plan (tg_plan_hist_alloc;
 * NULL: the op fails -1), hist->calls the bound it was asked with. */
int tg__redis_op_parse(struct tg_counter_op *op, const struct redisReply *y, const struct tg_redis_hist *hist);

/* ---- histories (cluster/redis/history.c) --------------------------------------------------- */

extern const char tg__redis_hist_get_lua[];
extern const char tg__redis_hist_add_lua[];
extern const char tg__redis_hist_del_lua[];
/* e as an element of the list of key (h1, h2), signed under key (its length returned; never more
 * than TG__REDIS_HIST_MAXLEN). */
size_t tg__redis_hist_encode(const struct tg_hist_entry *e, uint64_t h1, uint64_t h2, const uint8_t key[16],
                             unsigned char out[TG__REDIS_HIST_MAXLEN]);
/* An element of the list of (h1, h2) back: 0 with e filled and *trimmed 1 for an element a trim
 * marked; -1 for anything that is not exactly an entry of the form history.c describes, signed
 * under key for this list. */
int tg__redis_hist_decode(const void *p, size_t n, uint64_t h1, uint64_t h2, const uint8_t key[16],
                          struct tg_hist_entry *e, int *trimmed);
/* A HIST_GET's reply {1, e1 .. ek}: op->view filled (entries in hist->plan); 0, -1 (shape), -2
 * (value). */
int tg__redis_hist_parse(struct tg_counter_op *op, const struct redisReply *y, const struct tg_redis_hist *hist);
/* The arguments after the key of a history op. */
void tg__redis_hist_argv(struct tg__redis_argv *v, const struct tg_counter_op *op, const struct tg_redis_hist *hist);

#endif
