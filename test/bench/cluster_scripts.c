/* tg-bench-cluster-scripts: print one of the gateway's Redis counter scripts (cluster/redis/scripts.c)
 * byte for byte, so that test/bench/cluster.sh can SCRIPT LOAD the very text tollgate runs and drive
 * it with redis-benchmark (the limit of one Redis primary in decisions per second).
 *
 *   tg-bench-cluster-scripts take|give|get|add|sub|batch > FILE
 *
 * Write it to a file and load it with `redis-cli -x SCRIPT LOAD < FILE`: a shell's $(...) would drop
 * the final newline and so change the script's SHA1. */
#include <stdio.h>
#include <string.h>

#include "cluster/redis/scripts.h"

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        enum tg_counter_op_kind kind;
    } names[] = {
        {"take", TG_COP_BUCKET_TAKE}, {"give", TG_COP_BUCKET_GIVE}, {"get", TG_COP_WINDOW_GET},
        {"add", TG_COP_WINDOW_ADD},   {"sub", TG_COP_WINDOW_SUB},
        {"batch", (enum tg_counter_op_kind)TG__REDIS_SCRIPT_BATCH}, /* the counter ops of several decisions */
    };
    if (argc == 2)
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
            if (strcmp(argv[1], names[i].name) == 0) {
                const char *s = tg__redis_scripts[names[i].kind];
                return fwrite(s, 1, strlen(s), stdout) == strlen(s) && fflush(stdout) == 0 ? 0 : 1;
            }
    fprintf(stderr, "usage: %s take|give|get|add|sub|batch\n", argv[0]);
    return 2;
}
