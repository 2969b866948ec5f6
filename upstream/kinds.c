/* Which kind serves an upstream: by the transport its configuration names. The app hands this
 * choice down (srv->upstream_ops), so that the call never names a kind. */
#include "core/conf/conf.h"
#include "upstream/upstream.h"

const struct tg_upstream_ops *tg_upstream_kind_for(const struct tg_upstream_conf *uc)
{
    switch (uc->transport) {
    case TG_UP_STDIO: return &tg_upstream_stdio_ops;
    case TG_UP_SSE: return &tg_upstream_sse_ops;
    default: return &tg_upstream_streamable_ops;
    }
}
