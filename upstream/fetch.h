/* One HTTP(S) exchange with any URL, for the gateway's own needs (an issuer's keys, its discovery
 * document, a token endpoint), on the upstream pool's HTTP/1.1 client (upstream/pool/pool.h).
 *
 * tg_fetch_start() makes a pool of one connection for the URL's origin, sends one request and
 * reads the whole answer (at most max_bytes of body) within timeout_ms. The callback runs exactly
 * once, from the loop and never inside tg_fetch_start(), unless tg_fetch_cancel() came first; after
 * the callback the fetch is gone (do not cancel it then). Redirects are never followed: a 3xx
 * answer is a failure whose why names where it pointed. Any other status is the caller's to judge
 * (err 0, status set). The TLS certificate is checked against ca_file or the system CAs, which a
 * worker thread reads before the connection is made (a CA file it cannot parse fails the fetch
 * through the callback). */
#ifndef TG_UPSTREAM_FETCH_H
#define TG_UPSTREAM_FETCH_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct tg_fetch_opts {
    const char *method;  /* "GET" or "POST" */
    const char *url;     /* https://, or http:// (the caller decides whether plain http is allowed) */
    const char *ca_file; /* NULL: the system CAs */
    const char *headers; /* extra "Name: value\r\n" lines, or NULL */
    const char *body;
    size_t body_len;
    size_t max_bytes;    /* answer body cap: past it the fetch fails with TG_ELIMIT */
    uint64_t timeout_ms; /* whole exchange (connect, TLS, request, answer); 0: 10 s */
};

struct tg_fetch_result {
    int err;                   /* 0, or a negative TG_E* */
    const char *why;           /* words when err != 0 ("timed out", "redirect to X refused", TLS reason, ...) */
    int status;                /* HTTP status when err == 0 */
    const char *body;          /* valid only inside the callback */
    size_t len;
    const char *cache_control; /* the header value or NULL */
};

typedef void (*tg_fetch_cb)(void *ud, const struct tg_fetch_result *res);

struct tg_fetch;

/* Never calls cb inside; returns NULL (and *why) for a URL it cannot use or a CA file it cannot
 * read. The strings of o are copied. */
struct tg_fetch *tg_fetch_start(uv_loop_t *loop, const struct tg_fetch_opts *o, tg_fetch_cb cb, void *ud,
                                const char **why);
/* No callback after it; f is freed. */
void tg_fetch_cancel(struct tg_fetch *f);

#endif
