/* RFC 8693 token exchange toward an upstream (upstreams[].token_exchange): the client's access
 * token goes to the token endpoint as subject_token, and the access token that comes back is what
 * the upstream sees, as "Authorization: Bearer …". One cache per server, keyed by a digest of
 * (issuer, subject, upstream and its exchange settings) that the caller makes:
 *
 *   - a token is used until its expires_in minus a margin (a quarter of its life, at most 30 s);
 *     past that, the next use exchanges again (so a token is never sent that near its end). A
 *     token without expires_in serves the calls that waited for it and is not kept.
 *   - concurrent uses for one key share one exchange in flight (its waiters all hear its end).
 *   - bounded: at most max_entries tokens and max_bytes of them; the oldest is evicted first
 *     (never one with an exchange in flight). Counted: tg_tx_metrics().
 *   - a token the upstream refused (HTTP 401) goes at once: tg_tx_refused().
 *
 * Never logged: the subject token, the exchanged token, the client secret. The endpoint's
 * error code (RFC 6749 5.2 "error") is the only part of a refusal that reaches the caller. */
#ifndef TG_UPSTREAM_TOKEN_EXCHANGE_H
#define TG_UPSTREAM_TOKEN_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/base/buf.h"

struct tg_token_exchange_conf;
struct tg_tx_cache;
struct tg_tx_entry;

/* token: the exchanged token (valid only inside the callback), or NULL and why says what failed. */
typedef void (*tg_tx_cb)(void *ud, const char *token, const char *why);

/* One use waiting for an exchange. Storage: the caller's (embedded in what waits); linked into
 * the cache while it waits, until its callback runs or tg_tx_wait_cancel(). */
struct tg_tx_wait {
    struct tg_list node;
    struct tg_tx_entry *_e; /* NULL: not waiting */
    tg_tx_cb cb;
    void *ud;
};

struct tg_tx_cache *tg_tx_cache_new(uv_loop_t *loop, size_t max_entries, size_t max_bytes);
/* Exchanges in flight are cancelled; each waiter hears why (its callback, from inside this). */
void tg_tx_cache_free(struct tg_tx_cache *c);

/* A token for key. 0: a fresh one is cached, *token points at it (valid until the loop runs
 * again). 1: w waits; cb(ud, …) runs from the loop later, exactly once unless cancelled. -1: no
 * exchange could start (why filled). subject_token is copied into the request and not kept. */
int tg_tx_get(struct tg_tx_cache *c, const struct tg_token_exchange_conf *x, const uint8_t key[32],
              struct tg_slice subject_token, struct tg_tx_wait *w, tg_tx_cb cb, void *ud, const char **token,
              char *why, size_t whysz);
/* The upstream refused a token of key's (HTTP 401): it goes from the cache at once, if it is
 * still the one cached (token_sha256: the digest of the token sent; a newer token, or an
 * exchange in flight, stays). 1 if it went. Counted. */
int tg_tx_refused(struct tg_tx_cache *c, const uint8_t key[32], const uint8_t token_sha256[32]);
/* w stops waiting (no callback). Harmless when it is not waiting. */
void tg_tx_wait_cancel(struct tg_tx_wait *w);

/* Prometheus lines: tokens cached and their bytes, exchanges by result, hits, evictions, tokens
 * upstreams refused. */
void tg_tx_metrics(const struct tg_tx_cache *c, struct tg_buf *out);

#endif
