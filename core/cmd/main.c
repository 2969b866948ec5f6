/* tollgate — an MCP policy gateway. Command line and process lifecycle. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "core/call/audit.h"
#include "core/conf/conf.h"
#include "core/base/log.h"
#include "core/cmd/audit_cmd.h"
#include "core/cmd/policy_cmd.h"
#include "core/cmd/pin.h"
#include "core/cmd/scan.h"
#include "core/base/slab.h"
#include "core/app/sd_notify.h"
#include "policy/policy.h"
#include "core/app/server.h"
#include "policy/auth.h"
#include "core/wire/tls.h"

static void usage(FILE *f)
{
    fprintf(f, "usage:\n"
               "  tollgate [-c FILE]            run (default FILE: conf/tollgate.conf)\n"
               "  tollgate -t [-c FILE]         check the configuration, print errors, exit 0/1\n"
               "  tollgate hash-token [TOKEN]   print the SHA-256 of a bearer token for the configuration\n"
               "                                (reads one line from stdin when TOKEN is omitted)\n"
               "  tollgate policy check FILE...  validate policies (tollgate policy --help)\n"
               "  tollgate policy explain -c FILE --grant G --upstream U --call JSON\n"
               "                                decide one call without contacting anything\n"
               "  tollgate policy test FILE CASES.yaml  run expected decisions against a policy\n"
               "  tollgate scan [--header H]... URL | tollgate scan -- COMMAND ARG...\n"
               "                                list an MCP server's tools, print a starting policy\n"
               "                                (tollgate scan --help)\n"
               "  tollgate pin [-c FILE] [--diff] UPSTREAM\n"
               "                                pin an upstream's tool definitions, or compare them\n"
               "                                with what it lists now (tollgate pin --help)\n"
               "  tollgate audit verify [--key PUB.pem] [--closed] FILE...\n"
               "                                check chained audit files and checkpoint signatures\n"
               "  tollgate audit pubkey (-c FILE | --key PRIV.pem) | tollgate audit keygen FILE\n"
               "                                the audit signing key (tollgate audit --help)\n"
               "  tollgate -V                   print the version\n"
               "  tollgate -h, --help           this help\n");
}

static int hash_token(int argc, char **argv)
{
    char line[4096];
    const char *tok;
    if (argc >= 3) {
        tok = argv[2];
    } else {
        if (fgets(line, sizeof(line), stdin) == NULL) {
            fprintf(stderr, "tollgate: hash-token: no token given\n");
            return 1;
        }
        line[strcspn(line, "\r\n")] = '\0';
        tok = line;
    }
    if (tok[0] == '\0') {
        fprintf(stderr, "tollgate: hash-token: empty token\n");
        return 1;
    }
    uint8_t h[32];
    char hex[65];
    tg_sha256(tok, strlen(tok), h);
    tg_hex_encode(h, 32, hex);
    printf("%s\n", hex);
    return 0;
}

/* What the signal handlers reach: the server and the service manager's socket. */
struct tg_process {
    struct tg_server *srv;
    struct tg_sd_notify sd_notify;
};

/* A SIGHUP reload ended: the manager hears READY=1 again, unless a drain began meanwhile (the
 * reload was then dropped, and STOPPING=1 was sent). */
static void on_reloaded(void *ud, int ok, const struct tg_buf *err)
{
    struct tg_process *p = ud;
    if (!p->srv->draining)
        tg_sd_notify_reloaded(&p->sd_notify, ok);
}

static void on_signal(uv_signal_t *h, int signum)
{
    struct tg_process *p = h->data;
    struct tg_server *srv = p->srv;
    switch (signum) {
    case SIGTERM:
    case SIGINT:
        if (!srv->draining)
            tg_sd_notify_stopping(&p->sd_notify);
        tg_server_drain(srv);
        break;
    case SIGUSR1:
        tg_audit_reopen(srv->audit);
        if (tg_log_reopen() != 0)
            tg_log(TG_LOG_ERROR, "cannot reopen log file", NULL);
        else
            tg_log(TG_LOG_INFO, "log reopened", NULL);
        break;
    case SIGHUP:
        if (srv->draining)
            break; /* a reload would be dropped anyway; the manager must not see RELOADING now */
        tg_sd_notify_reloading(&p->sd_notify);
        tg_server_reload_start(srv, on_reloaded, p); /* the files are read off the loop */
        break;
    }
}

/* Descriptors: every client connection, every pooled upstream socket and a few of our own
 * need one. Raise the soft limit as far as the hard one allows, and say clearly when even that
 * cannot cover limits.max_connections, instead of failing accept() under load. Returns the
 * limit in force. */
static rlim_t check_descriptors(const struct tg_conf *conf, int raise, FILE *out)
{
    unsigned long long need = (unsigned long long)conf->limits.max_connections + 64;
    for (size_t i = 0; i < conf->nupstreams; i++)
        need += (unsigned long long)conf->upstreams[i].pool_size + (unsigned long long)conf->upstreams[i].warm * 3;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (raise && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        struct rlimit want = rl;
        want.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? (rlim_t)need : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &want) == 0)
            rl = want;
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need) {
        char msg[400];
        snprintf(msg, sizeof(msg),
                 "limits.max_connections = %d with the upstream pools needs about %llu descriptors, but RLIMIT_NOFILE "
                 "allows %llu (hard limit %llu): raise it (ulimit -n, LimitNOFILE= in the unit) or lower "
                 "limits.max_connections; past the limit, new connections fail",
                 conf->limits.max_connections, need, (unsigned long long)rl.rlim_cur,
                 (unsigned long long)rl.rlim_max);
        if (out != NULL)
            fprintf(out, "%s: warning: %s\n", conf->path, msg);
        else
            tg_log(TG_LOG_WARN, "descriptor limit below what the configuration needs", "detail=\"%s\"", msg);
    }
    return rl.rlim_cur;
}

int main(int argc, char **argv)
{
    const char *conf_path = "conf/tollgate.conf";
    int check_only = 0;
    if (argc == 2 && strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "hash-token") == 0)
        return hash_token(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "policy") == 0)
        return tg_policy_cli(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "scan") == 0)
        return tg_scan_cli(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "pin") == 0)
        return tg_pin_cli(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "audit") == 0)
        return tg_audit_cli(argc - 1, argv + 1);
    int opt;
    while ((opt = getopt(argc, argv, "c:tVh")) != -1) {
        switch (opt) {
        case 'c': conf_path = optarg; break;
        case 't': check_only = 1; break;
        case 'V': printf("tollgate %s\n", TG_VERSION); return 0;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tollgate: unexpected argument: %s\n", argv[optind]);
        usage(stderr);
        return 1;
    }
    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_conf *conf = tg_conf_load(conf_path, &err);
    if (conf == NULL) {
        fwrite(err.base, 1, err.len, stderr);
        tg_buf_dispose(&err);
        if (check_only)
            fprintf(stderr, "tollgate: configuration %s is invalid\n", conf_path);
        return 1;
    }
    tg_buf_dispose(&err);
    if (conf->warnings.len)
        fwrite(conf->warnings.base, 1, conf->warnings.len, check_only ? stdout : stderr);
    if (check_only) {
        /* What start does with the listeners' files: parse the certificates and keys, and check
         * that they match (the loader only checked that they open). */
        int bad = 0;
        for (size_t i = 0; i < conf->nlisteners; i++) {
            const struct tg_listener_conf *lc = &conf->listeners[i];
            struct tg_tls_server_opts o = {lc->cert, lc->key, lc->client_ca, lc->client_auth, lc->session_timeout_s};
            struct tg_tls_ctx *ctx = NULL;
            char e[256];
            if (lc->tls && tg_tls_ctx_new(&o, &ctx, e, sizeof(e)) != 0) {
                fprintf(stderr, "%s: listen[%zu].tls: %s\n", conf_path, i, e);
                bad = 1;
            }
            tg_tls_ctx_free(ctx);
        }
        if (bad) {
            fprintf(stderr, "tollgate: configuration %s is invalid\n", conf_path);
            tg_conf_unref(conf);
            return 1;
        }
        check_descriptors(conf, 0, stdout);
        /* scope: session has no session in 2026-07-28: say what it counts there. */
        for (size_t i = 0; i < conf->nupstreams; i++) {
            const struct tg_upstream_conf *u = &conf->upstreams[i];
            int n = tg_policy_session_counters(u->policy);
            for (size_t g = 0; g < conf->ngrants; g++)
                for (size_t j = 0; j < conf->grants[g].npolicies; j++)
                    if (conf->grants[g].policies[j].upstream == (int)i)
                        n += tg_policy_session_counters(conf->grants[g].policies[j].policy);
            if (n > 0)
                printf("tollgate: upstream %s: %d counter(s) with scope \"session\" count per grant for stateless "
                       "(2026-07-28) requests, which have no session\n", u->name, n);
        }
        printf("tollgate: configuration %s is ok (%zu listener(s), %zu grant(s), %zu upstream(s))\n", conf_path,
               conf->nlisteners, conf->ngrants, conf->nupstreams);
        tg_conf_unref(conf);
        return 0;
    }
    int lrc = tg_log_setup(conf->log_level, conf->log_format, conf->log_file);
    if (lrc != 0) {
        fprintf(stderr, "tollgate: cannot open log file %s: %s\n", conf->log_file, strerror(lrc < 0 ? -lrc : EIO));
        tg_conf_unref(conf);
        return 1;
    }
    check_descriptors(conf, 1, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Before any thread starts: this takes NOTIFY_SOCKET out of the environment. */
    struct tg_process proc;
    int nrc = tg_sd_notify_init(&proc.sd_notify);
    if (nrc != 0)
        tg_log(TG_LOG_WARN, "NOTIFY_SOCKET is set but cannot be used; the service manager will not hear readiness",
               "errno=%d error=\"%s\"", -nrc, strerror(-nrc));
    /* One malloc arena: the loop does all the work; the log writer and the reload worker would
     * otherwise each get an arena of their own, whose freed pages stay in the process. */
    mallopt(M_ARENA_MAX, 1);
    /* A message's JSON tree comes from free lists (core/base/slab.h), except under the sanitizers. */
    tg_slab_enable(tg_slab_default());
    cJSON_InitHooks(&(cJSON_Hooks){tg_slab_alloc, tg_slab_free});
    if (tg_log_start() != 0)
        fprintf(stderr, "tollgate: no log writer thread; log lines are written from the loop\n");
    uv_loop_t *loop = uv_default_loop();
    struct tg_app *app = tg_xcalloc(1, sizeof(*app));
    struct tg_server *srv = &app->srv;
    proc.srv = srv;
    int rc = 0;
    if (tg_server_init(app, loop, conf) != 0) {
        rc = 1; /* half made: it holds only memory, which tg_server_dispose frees */
    } else {
        /* Signals first: once a listener is logged, a supervisor's SIGTERM means a drain. */
        int sigs[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};
        uv_signal_t *hs[] = {&app->sigterm, &app->sigint, &app->sighup, &app->sigusr1};
        for (int i = 0; i < 4; i++) {
            uv_signal_init(loop, hs[i]);
            hs[i]->data = &proc;
            uv_signal_start(hs[i], on_signal, sigs[i]);
        }
        if (tg_server_start(app) != 0) {
            rc = 1;
            tg_server_drain(srv); /* closes what start opened, and everything else, as at exit */
        } else {
            tg_log(TG_LOG_INFO, "started", "version=%s conf=%s pid=%d", TG_VERSION, conf_path, (int)getpid());
            tg_sd_notify_ready(&proc.sd_notify); /* the listeners accept from here on */
        }
    }
    tg_conf_unref(conf); /* the server holds its own references */
    uv_run(loop, UV_RUN_DEFAULT);
    tg_server_dispose(app);
    free(app);
    tg_slab_drain();
    uv_loop_close(loop);
    tg_sd_notify_dispose(&proc.sd_notify);
    tg_log(TG_LOG_INFO, "stopped", NULL);
    tg_log_stop(); /* writes what is queued */
    tg_log_setup(TG_LOG_INFO, 0, NULL);
    return rc;
}
