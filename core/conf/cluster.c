/* The cluster group: several gateways that share counters, sessions and approvals through one
 * Redis (ARCHITECTURE.md "Running several instances"). Only parsed and checked here; the server
 * (cluster/) acts on it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/conf/internal.h"

#define CL(f) offsetof(struct tg_cluster_conf, f)
static const struct int_directive cluster_ints[] = {
    {"timeout_ms", CL(timeout_ms), 1, 60000, 250, "deadline of every Redis operation"},
    {"backoff_ms", CL(backoff_ms), 1, 60000, 100, "first reconnect delay"},
    {"backoff_max_ms", CL(backoff_max_ms), 1, 600000, 5000, "longest reconnect delay"},
    {"session_ttl_ms", CL(session_ttl_ms), 1000, 604800000, 86400000, "a shared session's record after its last use"},
    {NULL, 0, 0, 0, 0, NULL},
};

static const struct int_directive lease_ints[] = {
    {"tokens", CL(lease_tokens), 0, 1000000, 0, "tokens an instance takes ahead per bucket (0: no lease)"},
    {"ms", CL(lease_ms), 1, 60000, 1000, "how long leased tokens may stay unspent on an instance"},
    {"keys", CL(lease_keys), 1, 1000000, 16384, "buckets that may hold a lease at once"},
    {NULL, 0, 0, 0, 0, NULL},
};

/* The secret: exactly 32 bytes, in a file only its owner may read or write. */
static void load_secret(struct loader *ld, const config_setting_t *s, struct tg_cluster_conf *cc)
{
    int fd = open(cc->secret_file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tg__conf_errf(ld, s, "cluster.secret_file", "cannot open %s: %s", cc->secret_file, strerror(errno));
        return;
    }
    struct stat st;
    unsigned char extra;
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
        n = read(fd, cc->secret, sizeof(cc->secret));
    if (n != (ssize_t)sizeof(cc->secret) || read(fd, &extra, 1) != 0)
        tg__conf_errf(ld, s, "cluster.secret_file", "%s must hold exactly 32 bytes (head -c 32 /dev/urandom > FILE)",
                      cc->secret_file);
    else if ((st.st_mode & 077) != 0)
        tg__conf_errf(ld, s, "cluster.secret_file", "%s is readable by others (mode %03o): chmod 600 it",
                      cc->secret_file, (unsigned)(st.st_mode & 0777));
    close(fd);
}

static int valid_address(const char *a)
{
    if (strncmp(a, "unix:", 5) == 0)
        return a[5] == '/';
    const char *colon = strrchr(a, ':');
    if (colon == NULL || colon == a || colon[1] == '\0')
        return 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    return *end == '\0' && port >= 1 && port <= 65535;
}

void tg__conf_load_cluster(struct loader *ld, config_t *cfg, struct tg_conf *c)
{
    struct tg_cluster_conf *cc = &c->cluster;
    const config_setting_t *g = config_lookup(cfg, "cluster");
    if (g == NULL)
        return;
    if (!config_setting_is_group(g)) {
        tg__conf_errf(ld, g, "cluster", "must be a group { redis = \"host:port\"; secret_file = …; }");
        return;
    }
    static const char *const known[] = {"redis", "password", "key_prefix", "secret_file", "on_unavailable", "instance",
                                        "timeout_ms", "backoff_ms", "backoff_max_ms", "session_ttl_ms", "lease", NULL};
    tg__conf_check_members(ld, g, known, "cluster");
    cc->enabled = 1;
    cc->redis = tg__conf_get_str(ld, g, "redis", NULL, 1, "cluster");
    if (cc->redis != NULL && !valid_address(cc->redis))
        tg__conf_errf(ld, config_setting_get_member(g, "redis"), "cluster.redis",
                      "must be \"host:port\" or \"unix:/path/to/socket\"");
    cc->password = tg__conf_get_str(ld, g, "password", NULL, 0, "cluster");
    if (cc->password != NULL && cc->password[0] == '\0') {
        free(cc->password);
        cc->password = NULL;
    }
    cc->key_prefix = tg__conf_get_str(ld, g, "key_prefix", "tollgate:", 0, "cluster");
    if (cc->key_prefix != NULL && strlen(cc->key_prefix) > 64)
        tg__conf_errf(ld, config_setting_get_member(g, "key_prefix"), "cluster.key_prefix", "must be at most 64 bytes");
    cc->secret_file = tg__conf_path(ld, tg__conf_get_str(ld, g, "secret_file", NULL, 1, "cluster"));
    if (cc->secret_file != NULL)
        load_secret(ld, config_setting_get_member(g, "secret_file"), cc);
    char *ou = tg__conf_get_str(ld, g, "on_unavailable", "deny", 0, "cluster");
    if (ou != NULL && strcmp(ou, "local") == 0)
        cc->on_unavailable = TG_CLUSTER_LOCAL;
    else if (ou != NULL && strcmp(ou, "deny") != 0)
        tg__conf_errf(ld, config_setting_get_member(g, "on_unavailable"), "cluster.on_unavailable",
                      "must be \"deny\" (fail closed) or \"local\" (per-instance counters)");
    free(ou);
    cc->instance = tg__conf_get_str(ld, g, "instance", NULL, 0, "cluster");
    if (cc->instance == NULL || cc->instance[0] == '\0') {
        free(cc->instance);
        char host[128] = "localhost";
        gethostname(host, sizeof(host) - 1);
        host[sizeof(host) - 1] = '\0';
        char buf[160];
        snprintf(buf, sizeof(buf), "%s:%ld", host, (long)getpid());
        cc->instance = tg_xstrdup(buf);
    }
    for (const char *p = cc->instance; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == '"' || *p == '\\' || (unsigned char)*p >= 0x7f || p - cc->instance >= 64) {
            tg__conf_errf(ld, config_setting_get_member(g, "instance"), "cluster.instance",
                          "must be at most 64 printable ASCII characters without spaces or quotes");
            break;
        }
    tg__conf_load_ints(ld, g, cluster_ints, cc, "cluster", 0);
    const config_setting_t *lg = config_setting_get_member(g, "lease");
    if (lg != NULL && !config_setting_is_group(lg)) {
        tg__conf_errf(ld, lg, "cluster.lease", "must be a group { tokens = N; ms = M; }");
        lg = NULL;
    }
    tg__conf_load_ints(ld, lg, lease_ints, cc, "cluster.lease", 1);
    if (cc->backoff_max_ms < cc->backoff_ms)
        tg__conf_errf(ld, config_setting_get_member(g, "backoff_max_ms"), "cluster.backoff_max_ms",
                      "must be at least backoff_ms (%d)", cc->backoff_ms);
}

void tg__conf_cluster_free(struct tg_conf *c)
{
    struct tg_cluster_conf *cc = &c->cluster;
    free(cc->redis);
    free(cc->password);
    free(cc->key_prefix);
    free(cc->secret_file);
    free(cc->instance);
    memset(cc->secret, 0, sizeof(cc->secret));
}
