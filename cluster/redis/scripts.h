/* The Lua text of the counter scripts (cluster/redis/scripts.c), indexed by enum
 * tg_counter_op_kind. Internal to cluster/redis/redis.c. */
#ifndef TG_CLUSTER_REDIS_SCRIPTS_H
#define TG_CLUSTER_REDIS_SCRIPTS_H

#include "policy/counters.h"

#define TG__REDIS_NSCRIPTS 5
extern const char *const tg__redis_scripts[TG__REDIS_NSCRIPTS];

struct redisReply;

/* The EVALSHA command of one op: argv points into the struct itself. */
struct tg__redis_argv {
    char key[256];
    char num[6][32];
    const char *argv[10];
    size_t argvlen[10];
    int argc;
};
void tg__redis_op_argv(struct tg__redis_argv *v, const struct tg_counter_op *op, const char *prefix, const char *sha);
/* Fill op's result from its script's reply: 0; -1 if the reply has another shape; -2 if a value
 * in it is not a finite decimal number. Doubles come as "%.17g" strings, read back exactly by
 * tg_num_parse (core/base/num.h), which refuses nan, inf, hex and out-of-range values. */
/* The start of the error a script answers when its key holds something that is not two finite
 * decimal numbers (poisoned, or written by something else): the op fails TG_REDIS_EVALUE. */
#define TG__REDIS_BADVALUE "TGBADVALUE"
int tg__redis_op_parse(struct tg_counter_op *op, const struct redisReply *y);

#endif
