/* Internal to the conf loader, which is split over core/conf.c (the file, log, listen, admin,
 * limits, audit, refcount), core/conf_upstream.c (upstreams) and core/conf_grant.c (grants, JWT
 * issuers, policies). No other module includes this header. */
#ifndef TG_CONF_INT_H
#define TG_CONF_INT_H

#include <libconfig.h>
#include <stddef.h>
#include <stdint.h>

#include "core/conf.h"

/* One row per scalar integer directive (nginx ngx_command_t, redis createIntConfig). */
struct int_directive {
    const char *name;
    size_t offset;
    int min, max, def;
    const char *help;
};

extern const struct int_directive upstream_directives[];

struct loader {
    const char *path;
    struct tg_buf *err;
    int nerr;
    config_t *cfg;
};

void errf(struct loader *ld, const config_setting_t *s, const char *directive, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
char *get_str(struct loader *ld, const config_setting_t *grp, const char *name, const char *def, int required,
              const char *ctx);
int get_bool(struct loader *ld, const config_setting_t *grp, const char *name, int def, const char *ctx);
void load_ints(struct loader *ld, const config_setting_t *grp, const struct int_directive *tab, void *base,
               const char *ctx);
void check_members(struct loader *ld, const config_setting_t *grp, const char *const *known, const char *ctx);
int parse_sha256(struct loader *ld, const config_setting_t *grp, const char *ctx, uint8_t out[32]);

/* core/conf_upstream.c */
void load_upstreams(struct loader *ld, config_t *cfg, struct tg_conf *c);

/* core/conf_grant.c */
void load_grants(struct loader *ld, config_t *cfg, struct tg_conf *c);
void load_jwt(struct loader *ld, config_t *cfg, struct tg_conf *c);
void load_policies(struct loader *ld, config_t *cfg, struct tg_conf *c);

#endif
