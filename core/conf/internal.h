/* Internal to the conf loader, which is split over core/conf/conf.c (the file, log, listen, admin,
 * limits, audit, refcount), core/conf/upstreams.c (upstreams), core/conf/grants.c (grants, JWT
 * issuers, policies) and core/conf/cluster.c (cluster). No other module includes this header.
 *
 * Every tg__conf_load_* fills its part of a struct tg_conf that tg_conf_load() allocated; what it
 * stores there is owned by that conf, and the matching tg__conf_*_free, in the same file, frees it
 * when tg_conf_unref() drops the last reference. Errors go through
 * tg__conf_errf() and are counted in the loader: a conf with errors is never returned. */
#ifndef TG_CONF_INT_H
#define TG_CONF_INT_H

#include <libconfig.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#include "core/base/buf.h"
#include "core/conf/conf.h"

/* One row per scalar integer directive (nginx ngx_command_t, redis createIntConfig). Data only:
 * rows of static const tables (conf.c, upstreams.c), never freed. */
struct int_directive {
    const char *name;
    size_t offset;
    int min, max, def;
    const char *help;
};

/* The state of one tg_conf_load() call. It lives on the stack of tg_conf_load() and owns
 * nothing: err is the caller's, cfg that function's. */
struct loader {
    const char *path;
    struct tg_buf *err;
    int nerr;
    config_t *cfg;
    unsigned flags; /* TG_CONF_* */
};

/* Appends "file:line: directive: reason" for setting s (the file itself when s is NULL). */
void tg__conf_errf(struct loader *ld, const config_setting_t *s, const char *directive, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A path from the conf file: a relative one is taken from the conf file's folder (so it means the
 * same whatever the working directory). Takes p (may be NULL) and returns the path to keep. */
char *tg__conf_path(const struct loader *ld, char *p);
/* 0 if path opens for reading; else "cannot open PATH: reason" is reported at s and -1 returned
 * (-1 without a report when path is NULL). */
int tg__conf_check_readable(struct loader *ld, const config_setting_t *s, const char *directive, const char *path);
/* A stdio upstream's program can be run as its child will run it: a path (relative: from cwd, or
 * from the conf file's folder without cwd, command[0] then rewritten to it), or a name looked up
 * on the PATH in env (the child's environment). Reports at s otherwise. */
void tg__conf_check_command(struct loader *ld, const config_setting_t *s, const char *directive, char **command,
                            const char *cwd, char *const *env);
/* Reads a string setting, expanding ${VAR}. Missing and not required -> def (may be NULL). */
char *tg__conf_get_str(struct loader *ld, const config_setting_t *grp, const char *name, const char *def, int required,
                       const char *ctx);
int tg__conf_get_bool(struct loader *ld, const config_setting_t *grp, const char *name, int def, const char *ctx);
/* Sets each field of tab in base to its default, then to its value in grp (may be NULL). whole_group:
 * grp holds only these directives, so any other member is an "unknown directive" error. */
void tg__conf_load_ints(struct loader *ld, const config_setting_t *grp, const struct int_directive *tab, void *base,
                        const char *ctx, int whole_group);
/* signals at the top level and in each upstream (core/conf/signals.c); after the upstreams. */
void tg__conf_load_signals(struct loader *ld, config_t *cfg, struct tg_conf *c);
/* core/conf/audit.c: the audit group. */
void tg__conf_load_audit(struct loader *ld, config_t *cfg, struct tg_conf *c);
/* The file (or the folder it would be made in) must be writable by this process. */
void tg__conf_check_writable(struct loader *ld, const config_setting_t *s, const char *directive, const char *path);
/* What is left to read of f into text (NUL-terminated) and its SHA-256 in lowercase hex: 0, 1 past
 * 16 MiB, -1 on a read error (errno). */
int tg__conf_read_all(FILE *f, struct tg_buf *text, char sha[65]);
/* Reports every member of grp whose name is not in the NULL-terminated known. */
void tg__conf_check_members(struct loader *ld, const config_setting_t *grp, const char *const *known, const char *ctx);
/* grp's token_sha256 into out: 1 if present and valid, 0 if absent (or invalid, reported). */
int tg__conf_parse_sha256(struct loader *ld, const config_setting_t *grp, const char *ctx, uint8_t out[32]);

/* core/conf/upstreams.c: the upstreams list and the default upstream. */
void tg__conf_load_upstreams(struct loader *ld, config_t *cfg, struct tg_conf *c);
/* Frees what tg__conf_load_upstreams stored in c (called by tg_conf_unref only). */
void tg__conf_upstreams_free(struct tg_conf *c);

/* core/conf/grants.c. Grants come before upstreams; policies after both (they name upstreams), and
 * only when everything else loaded without errors. */
void tg__conf_load_grants(struct loader *ld, config_t *cfg, struct tg_conf *c);
/* core/conf/cluster.c: the cluster group. */
void tg__conf_load_cluster(struct loader *ld, config_t *cfg, struct tg_conf *c);
void tg__conf_cluster_free(struct tg_conf *c);
/* core/conf/approvals.c: the approvals group (its webhook). */
void tg__conf_load_approvals(struct loader *ld, config_t *cfg, struct tg_conf *c);
void tg__conf_approvals_free(struct tg_conf *c);
void tg__conf_load_jwt(struct loader *ld, config_t *cfg, struct tg_conf *c);
void tg__conf_load_policies(struct loader *ld, config_t *cfg, struct tg_conf *c);
/* Free the grants (with their policy overrides) and the JWT issuers (called by tg_conf_unref only). */
void tg__conf_grants_free(struct tg_conf *c);
/* core/conf/grants.c: a roots = [ "file:///…" or { uri = "file:///…"; name = "…"; }, … ] member of
 * grp (upstreams[] or grants[]) into r; absent: r stays unpinned. tg__conf_roots_free releases r. */
void tg__conf_load_roots(struct loader *ld, const config_setting_t *grp, struct tg_roots *r, const char *ctx);
void tg__conf_roots_free(struct tg_roots *r);
void tg__conf_jwt_free(struct tg_conf *c);
/* core/conf/upcred.c: grants[].upstream_headers and upstreams[].token_exchange, after both lists. */
void tg__conf_load_upcred(struct loader *ld, config_t *cfg, struct tg_conf *c);
void tg__conf_upcred_free(struct tg_conf *c);
void tg__conf_form_encode(struct tg_buf *b, const char *s);
/* core/conf/upstreams.c: a header name the conf may set (not one the gateway writes itself). */
int tg__conf_header_name_ok(const char *n);

#endif
