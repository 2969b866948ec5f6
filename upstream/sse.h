/* Forwarding header, kept only while core/router.c still includes it: the SSE parser and writer
 * are core/sse.h now. */
#include "core/sse.h"
