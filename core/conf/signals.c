/* signals: which shapes the gateway's own refusals take, at the top level and per upstream
 * (upstreams[].signals overrides). "tollgate" (the default) keeps tollgate's codes; "mcp-drafts"
 * answers a limited call as the MCP drafts define it (core/call/refusal.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conf/internal.h"

static int parse(struct loader *ld, const config_setting_t *grp, int def, const char *ctx)
{
    char *v = tg__conf_get_str(ld, grp, "signals", NULL, 0, ctx);
    int r = def;
    if (v != NULL && strcmp(v, "tollgate") == 0)
        r = TG_SIGNALS_TOLLGATE;
    else if (v != NULL && strcmp(v, "mcp-drafts") == 0)
        r = TG_SIGNALS_MCP_DRAFTS;
    else if (v != NULL)
        tg__conf_errf(ld, config_setting_get_member(grp, "signals"), "signals",
                      "must be \"tollgate\" or \"mcp-drafts\"");
    free(v);
    return r;
}

void tg__conf_load_signals(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    c->signals = parse(ld, config_root_setting(cfg), TG_SIGNALS_TOLLGATE, "");
    const config_setting_t *l = config_lookup(cfg, "upstreams");
    for (size_t i = 0; i < c->nupstreams; i++) {
        const config_setting_t *g = l != NULL ? config_setting_get_elem(l, (unsigned)i) : NULL;
        char ctx[80];
        snprintf(ctx, sizeof(ctx), "upstreams.%s", c->upstreams[i].name ? c->upstreams[i].name : "?");
        c->upstreams[i].signals = g != NULL && config_setting_is_group(g) ? parse(ld, g, c->signals, ctx) : c->signals;
    }
}
