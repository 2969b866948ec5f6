/* The approvals group: approvals = { webhook = { url = "https://…"; secret_file = "…"; }; };
 * Only parsed and checked here; core/call/webhook.c acts on it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/conf/internal.h"
#include "policy/keyring.h"

#define TG_WEBHOOK_SECRET_MIN 16
#define TG_WEBHOOK_SECRET_MAX 4096
#define TG_WEBHOOK_QUEUE_DEFAULT 256
#define TG_WEBHOOK_QUEUE_MAX 1000000

/* The secret: 16 to 4096 bytes (one trailing newline is not part of it), in a file only its
 * owner may read or write: whoever holds it can sign events the receiver believes. */
static void load_secret(struct loader *ld, const config_setting_t *s, struct tg_approvals_conf *ac)
{
    const char *dir = "approvals.webhook.secret_file";
    int fd = open(ac->webhook_secret_file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tg__conf_errf(ld, s, dir, "cannot open %s: %s", ac->webhook_secret_file, strerror(errno));
        return;
    }
    struct stat st;
    uint8_t buf[TG_WEBHOOK_SECRET_MAX + 2];
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        n = read(fd, buf, sizeof(buf));
    close(fd);
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    if (n < TG_WEBHOOK_SECRET_MIN || n > TG_WEBHOOK_SECRET_MAX)
        tg__conf_errf(ld, s, dir, "%s must hold %d to %d bytes (head -c 32 /dev/urandom | base64 > FILE)",
                      ac->webhook_secret_file, TG_WEBHOOK_SECRET_MIN, TG_WEBHOOK_SECRET_MAX);
    else if ((st.st_mode & 077) != 0)
        tg__conf_errf(ld, s, dir, "%s is readable by others (mode %03o): chmod 600 it", ac->webhook_secret_file,
                      (unsigned)(st.st_mode & 0777));
    else {
        ac->webhook_secret = tg_xmalloc((size_t)n);
        memcpy(ac->webhook_secret, buf, (size_t)n);
        ac->webhook_secret_len = (size_t)n;
    }
    memset(buf, 0, sizeof(buf));
}

void tg__conf_load_approvals(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    c->approvals.webhook_queue = TG_WEBHOOK_QUEUE_DEFAULT;
    const config_setting_t *g = config_lookup(cfg, "approvals");
    if (g == NULL)
        return;
    if (!config_setting_is_group(g)) {
        tg__conf_errf(ld, g, "approvals", "must be a group { webhook = { url = …; secret_file = …; }; }");
        return;
    }
    static const char *const known[] = {"webhook", NULL};
    tg__conf_check_members(ld, g, known, "approvals");
    const config_setting_t *w = config_setting_get_member(g, "webhook");
    if (w == NULL)
        return;
    if (!config_setting_is_group(w)) {
        tg__conf_errf(ld, w, "approvals.webhook", "must be a group { url = …; secret_file = …; }");
        return;
    }
    static const char *const wknown[] = {"url", "secret_file", "queue", NULL};
    tg__conf_check_members(ld, w, wknown, "approvals.webhook");
    struct tg_approvals_conf *ac = &c->approvals;
    const config_setting_t *q = config_setting_get_member(w, "queue");
    if (q != NULL) {
        /* 2 at least: the event in flight stays, so one more can always take a dropped one's place */
        if (config_setting_type(q) != CONFIG_TYPE_INT || config_setting_get_int(q) < 2 ||
            config_setting_get_int(q) > TG_WEBHOOK_QUEUE_MAX)
            tg__conf_errf(ld, q, "approvals.webhook.queue", "must be an integer in 2..%d", TG_WEBHOOK_QUEUE_MAX);
        else
            ac->webhook_queue = config_setting_get_int(q);
    }
    ac->webhook_url = tg__conf_get_str(ld, w, "url", NULL, 1, "approvals.webhook");
    const char *why = NULL;
    if (ac->webhook_url != NULL && tg_keyring_url_ok(ac->webhook_url, &why) != 0)
        tg__conf_errf(ld, config_setting_get_member(w, "url"), "approvals.webhook.url", "\"%s\" %s", ac->webhook_url,
                      why);
    ac->webhook_secret_file = tg__conf_path(ld, tg__conf_get_str(ld, w, "secret_file", NULL, 1, "approvals.webhook"));
    if (ac->webhook_secret_file != NULL)
        load_secret(ld, config_setting_get_member(w, "secret_file"), ac);
}

void tg__conf_approvals_free(struct tg_conf *c)
{
    struct tg_approvals_conf *ac = &c->approvals;
    free(ac->webhook_url);
    free(ac->webhook_secret_file);
    if (ac->webhook_secret != NULL)
        memset(ac->webhook_secret, 0, ac->webhook_secret_len);
    free(ac->webhook_secret);
    memset(ac, 0, sizeof(*ac));
}
