/* The Lua text of the counter scripts (cluster/redis_scripts.c), indexed by enum
 * tg_counter_op_kind. Internal to cluster/redis.c. */
#ifndef TG_CLUSTER_REDIS_SCRIPTS_H
#define TG_CLUSTER_REDIS_SCRIPTS_H

#include "policy/counters.h"

#define TG__REDIS_NSCRIPTS 5
extern const char *const tg__redis_scripts[TG__REDIS_NSCRIPTS];

#endif
