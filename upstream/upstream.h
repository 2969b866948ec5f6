/* Forwarding header, kept only while core/router.c and core/server.c still include it: the pool
 * moved to upstream/pool.h, and this path is reserved for the upstream operations table. */
#include "upstream/pool.h"
