/* The audit group: where decisions are written, what of the arguments, and how the lines prove
 * themselves (the hash chain and its signed checkpoints, core/call/audit.h). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/ecsign.h"
#include "core/base/sha256.h"
#include "core/conf/internal.h"

int tg__conf_read_all(FILE *f, struct tg_buf *text, char sha[65])
{
    char chunk[16384];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        if (tg_buf_try_append(text, chunk, n, 16u << 20) != 0)
            return 1;
    if (ferror(f))
        return -1;
    uint8_t h[32];
    tg_sha256(text->base ? text->base : "", text->len, h);
    tg_hex_encode(h, 32, sha);
    tg_buf_append(text, "", 1);
    return 0;
}

#define AUD(f) offsetof(struct tg_audit_conf, f)
static const struct int_directive audit_ints[] = {
    {"max_pending_bytes", AUD(max_pending), 4096, 2147483647, 16 * 1024 * 1024, "bytes buffered while the disk is slow"},
    {"checkpoint_lines", AUD(checkpoint_lines), 1, 100000000, 10000, "records between two checkpoints"},
    {"checkpoint_seconds", AUD(checkpoint_seconds), 1, 86400, 60, "seconds between two checkpoints"},
    {NULL, 0, 0, 0, 0, NULL},
};

static void add_redact(struct tg_audit_conf *a, const char *v)
{
    a->redact = tg_xrealloc(a->redact, (a->nredact + 1) * sizeof(char *));
    a->redact[a->nredact++] = tg_xstrdup(v);
}

void tg__conf_load_audit(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    struct tg_audit_conf *a = &c->audit;
    const config_setting_t *g = config_lookup(cfg, "audit");
    if (g != NULL && !config_setting_is_group(g)) {
        tg__conf_errf(ld, g, "audit", "must be a group { file = …; args = \"hash\" | \"values\"; redact = [ … ]; }");
        g = NULL;
    }
    tg__conf_load_ints(ld, g, audit_ints, a, "audit", 0);
    a->chain = 1;
    if (g == NULL)
        return;
    static const char *const known[] = {"file",       "args",     "redact", "max_pending_bytes", "chain", "signing_key",
                                        "checkpoint_lines", "checkpoint_seconds", NULL};
    tg__conf_check_members(ld, g, known, "audit");
    a->file = tg__conf_path(ld, tg__conf_get_str(ld, g, "file", NULL, 1, "audit"));
    tg__conf_check_writable(ld, config_setting_get_member(g, "file"), "audit.file", a->file);
    char *args = tg__conf_get_str(ld, g, "args", "hash", 0, "audit");
    if (args && strcmp(args, "values") == 0)
        a->values = 1;
    else if (args && strcmp(args, "hash") != 0)
        tg__conf_errf(ld, config_setting_get_member(g, "args"), "audit.args", "must be \"hash\" or \"values\"");
    free(args);
    a->chain = tg__conf_get_bool(ld, g, "chain", 1, "audit");
    a->signing_key = tg__conf_path(ld, tg__conf_get_str(ld, g, "signing_key", NULL, 0, "audit"));
    if (a->signing_key != NULL) {
        const config_setting_t *ks = config_setting_get_member(g, "signing_key");
        char why[512];
        struct tg_ecsign *k;
        if (!a->chain)
            tg__conf_errf(ld, ks, "audit.signing_key", "signs the checkpoints of a chained log: set audit.chain = true");
        else if (tg__conf_check_readable(ld, ks, "audit.signing_key", a->signing_key) == 0) {
            if ((k = tg_ecsign_load(a->signing_key, why, sizeof(why))) == NULL)
                tg__conf_errf(ld, ks, "audit.signing_key", "%s", why);
            tg_ecsign_free(k);
        }
    }
    const config_setting_t *r = config_setting_get_member(g, "redact");
    static const char *const default_redact[] = {"password", "passwd", "secret", "token", "api_key", "apikey",
                                                 "authorization", "cookie", "private_key", NULL};
    if (r == NULL) {
        for (const char *const *d = default_redact; *d; d++)
            add_redact(a, *d);
    } else if (!config_setting_is_array(r)) {
        tg__conf_errf(ld, r, "audit.redact", "must be an array of argument names");
    } else {
        for (int i = 0; i < config_setting_length(r); i++) {
            const char *v = config_setting_get_string_elem(r, i);
            if (v == NULL)
                tg__conf_errf(ld, config_setting_get_elem(r, (unsigned)i), "audit.redact", "must hold strings");
            else
                add_redact(a, v);
        }
    }
}
