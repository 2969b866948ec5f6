/* `tollgate scan`'s link to the server (core/cmd/scan.h says what the command does): one blocking
 * JSON-RPC exchange at a time, over HTTP (a POST per message on a fresh connection, a JSON or an
 * SSE answer, the Mcp-Session-Id kept; https:// through core/wire/tls.c, the handshake and the
 * records driven here over the blocking socket, the certificate checked before anything is sent) or over a child's stdin/stdout (newline-delimited JSON;
 * lines that are not JSON are counted in `skipped`, requests from the server are answered:
 * ping and roots/list, -32601 for the rest). Each wait is bounded by timeout_ms. Answers are
 * parsed with the strict parser (core/base/json.h). Errors are printed with tg_scan_fail(). */
#ifndef TG_SCAN_LINK_H
#define TG_SCAN_LINK_H

#include <sys/types.h>

#include <cjson/cJSON.h>

#include "core/base/buf.h"

#define SCAN_MAX_ANSWER (16u * 1024 * 1024) /* one HTTP answer, one stdio line */

struct tg_tls_client_ctx;

struct tg_scan_header {
    const char *line; /* "Name: value" as given */
};

/* The client: one per run, on tg_scan_cli()'s stack, set up by it (zeroed, then timeout_ms,
 * next_id = 1, to_child = from_child = -1, rbuf initialised; the HTTP fields from the URL);
 * tg_scan_link_stop() ends a child and closes its pipes, the caller disposes rbuf. */
struct tg_scan_link {
    int stdio;      /* 1: a child process, 0: HTTP */
    int timeout_ms;
    int next_id;
    /* HTTP */
    char host[256]; /* as it goes in Host: (brackets kept for IPv6) */
    char addr[256]; /* for getaddrinfo */
    char port[8];
    const char *path;
    const struct tg_scan_header *headers;
    size_t nheaders;
    struct tg_tls_client_ctx *tls; /* https://: the CA bundle and checks (owned by tg_scan_cli), else NULL */
    char session[256]; /* Mcp-Session-Id, or "" */
    char protocol[64]; /* the version initialize chose, sent as MCP-Protocol-Version, or "" */
    /* stdio */
    pid_t pid;
    int to_child;   /* its stdin */
    int from_child; /* its stdout */
    struct tg_buf rbuf;
    size_t skipped; /* stdout lines that were not JSON-RPC */
};

/* "tollgate: scan: " + the message + a newline, on stderr. */
void tg_scan_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Starts argv[0] (looked up on PATH) with pipes on its stdin and stdout (c->stdio is set by
 * the caller). 0 or -1 (printed). */
int tg_scan_link_start(struct tg_scan_link *c, char **argv);

/* Ends the child: EOF on its stdin, SIGTERM after 2 s, SIGKILL after 2 more. Idempotent. */
void tg_scan_link_stop(struct tg_scan_link *c);

/* Sends a request (params: JSON text or NULL) and waits for its answer: 0 with *result set
 * (owned by *msg, which the caller frees with cJSON_Delete), 1 when the server answered with an
 * error (described in errtext; *msg set), -1 when there was no usable answer (printed). */
int tg_scan_link_rpc(struct tg_scan_link *c, const char *method, const char *params, cJSON **msg,
                     const cJSON **result, char *errtext, size_t errcap);

/* Sends a notification: 0 or -1 (printed). */
int tg_scan_link_notify(struct tg_scan_link *c, const char *method);

#endif
