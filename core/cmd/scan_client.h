/* `tollgate scan`'s link to the server (core/cmd/scan.h says what the command does): one JSON-RPC
 * exchange at a time, each looking blocking to its caller: it runs a small uv loop of its own
 * until the answer comes or timeout_ms passes. The loop drives the gateway's own upstream
 * runtime: over HTTP the keep-alive pool (upstream/pool/pool.h: a POST per message, a JSON or an
 * SSE answer, the Mcp-Session-Id kept; https:// with the certificate checked before anything is
 * sent), over stdio a child (upstream/child.h: newline-delimited JSON; lines that are not JSON
 * are counted in `skipped`; requests from the server are answered: ping and roots/list, -32601
 * for the rest). Answers are parsed with the strict parser (core/base/json.h). Errors are printed
 * with tg_scan_fail(). */
#ifndef TG_SCAN_CLIENT_H
#define TG_SCAN_CLIENT_H

#include <uv.h>

#include <cjson/cJSON.h>

#include "core/base/metrics.h"
#include "core/conf/conf.h"

#define SCAN_MAX_ANSWER (16u * 1024 * 1024) /* one HTTP answer, one stdio line */

struct tg_tls_client_ctx;
struct tg_upstream;
struct tg_child;
struct scan_exchange;

struct tg_scan_header {
    const char *line; /* "Name: value" as given */
};

/* The client: one per run, on tg_scan_cli()'s stack, set up by it (zeroed, then timeout_ms,
 * next_id = 1; the HTTP fields from the URL), started by tg_scan_client_start() and ended by
 * tg_scan_client_stop(). */
struct tg_scan_client {
    int stdio;      /* 1: a child process, 0: HTTP */
    int timeout_ms;
    int next_id;
    /* HTTP */
    char host[256]; /* as it goes in Host: (brackets kept for IPv6) */
    char addr[256]; /* the address or name to connect to */
    char port[8];
    const char *path;
    const struct tg_scan_header *headers;
    size_t nheaders;
    struct tg_tls_client_ctx *tls; /* https://: the CA bundle and checks (owned by tg_scan_cli), else NULL */
    char session[256]; /* Mcp-Session-Id, or "" */
    char protocol[64]; /* the version initialize chose, sent as MCP-Protocol-Version, or "" */
    size_t skipped;    /* stdio: stdout lines that were not JSON-RPC */
    char **env;        /* stdio: the child's whole environment (NULL: this process's) */
    const char *cwd;   /* stdio: its working directory (NULL: this one) */
    /* the runtime, from tg_scan_client_start() to tg_scan_client_stop() */
    int started;
    uv_loop_t loop;
    uv_timer_t deadline;             /* one exchange's timeout_ms */
    struct tg_upstream_conf uc;      /* what the runtime is given: the URL's parts, or the command */
    struct tg_metrics metrics;       /* the pool counts into it; nothing reads it */
    struct tg_upstream *up;          /* HTTP */
    struct tg_child *child;          /* stdio, NULL once it exited */
    size_t bad_lines;                /* stdio: lines the child passed that the strict parser refused */
    struct scan_exchange *wait;      /* the exchange in progress, or NULL */
};

/* "tollgate: scan: " + the message + a newline, on stderr. */
void tg_scan_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Starts the loop and the pool for c's URL, or (c->stdio) argv[0] (looked up on PATH, the whole
 * environment passed, its stderr this process's) with pipes on its stdin and stdout. 0 or -1
 * (printed). */
int tg_scan_client_start(struct tg_scan_client *c, char **argv);

/* Ends the child (its stdin closed, SIGTERM, SIGKILL 2 s later) or the pool's connections, and
 * runs the loop until all is closed. Idempotent; nothing to do if tg_scan_client_start() did not run. */
void tg_scan_client_stop(struct tg_scan_client *c);

/* Sends a request (params: JSON text or NULL) and waits for its answer: 0 with *result set
 * (owned by *msg, which the caller frees with cJSON_Delete), 1 when the server answered with an
 * error (described in errtext; *msg set), -1 when there was no usable answer (printed). */
int tg_scan_client_rpc(struct tg_scan_client *c, const char *method, const char *params, cJSON **msg,
                     const cJSON **result, char *errtext, size_t errcap);

/* Sends a notification (over HTTP: waits for its 2xx): 0 or -1 (printed). */
int tg_scan_client_notify(struct tg_scan_client *c, const char *method);

#endif
