/* TLS through mbedtls, kept in this one module (so a later mbedtls 3.x with
 * TLS 1.3 is a local change).
 *
 * The record layer runs over our own buffers: tg_tls_feed() takes ciphertext
 * read from the socket and yields plaintext; every call that may produce
 * records appends the ciphertext to `out`, which the caller writes to the
 * socket. mbedtls never touches a file descriptor. */
#ifndef TG_TLS_H
#define TG_TLS_H

#include <stddef.h>

#include "core/base/buf.h"

struct tg_tls_ctx; /* one per TLS listener: certificate, key, config, DRBG. Owner: the listener. */
struct tg_tls;     /* one per connection. Owner: the connection. */
struct tg_tls_client_ctx; /* one per https:// upstream: CA chain, client certificate. Owner: its conf. */

/* The system bundle used when an https:// upstream names no tls.ca. */
#define TG_TLS_SYSTEM_CA "/etc/ssl/certs/ca-certificates.crt"

struct tg_tls_client_opts {
    const char *ca_file;   /* NULL: TG_TLS_SYSTEM_CA */
    const char *cert_file; /* NULL: no client certificate; else key_file too */
    const char *key_file;
    int verify;            /* 0: no certificate check at all (tls.verify = false) */
};

enum { TG_TLS_CLIENT_NONE, TG_TLS_CLIENT_OPTIONAL, TG_TLS_CLIENT_REQUIRED };

struct tg_tls_server_opts {
    const char *cert_file, *key_file;
    const char *client_ca_file; /* NULL: no client certificates asked for */
    int client_auth;            /* TG_TLS_CLIENT_*: with client_ca_file, optional or required */
    int session_timeout_s;      /* > 0: session tickets (RFC 5077) that resume for this long */
};

int tg_tls_ctx_new(const struct tg_tls_server_opts *o, struct tg_tls_ctx **out, char *err, size_t errsz);
/* Drops a reference (each connection made from it holds one): the last frees it. */
void tg_tls_ctx_free(struct tg_tls_ctx *ctx);

int tg_tls_client_ctx_new(const struct tg_tls_client_opts *o, struct tg_tls_client_ctx **out, char *err,
                          size_t errsz);
void tg_tls_client_ctx_free(struct tg_tls_client_ctx *ctx);

struct tg_tls *tg_tls_new(struct tg_tls_ctx *ctx);
/* A client connection that sends server_name as SNI and checks the certificate names it. Its
 * first tg_tls_feed(t, NULL, 0, ...) writes the ClientHello to out. */
struct tg_tls *tg_tls_client_new(struct tg_tls_client_ctx *ctx, const char *server_name);
void tg_tls_free(struct tg_tls *t);

/* Feed ciphertext. Appends decrypted application data to `plain` (up to plain_ceiling total,
 * TG_ELIMIT beyond) and handshake/alert records to `out`.
 * Returns 0, TG_ECLOSED when the peer sent close_notify, or TG_EINVAL on a TLS error. */
int tg_tls_feed(struct tg_tls *t, const char *in, size_t n, struct tg_buf *plain, size_t plain_ceiling,
                struct tg_buf *out);
/* Encrypt application data into `out`. Only valid once tg_tls_established(). */
int tg_tls_write(struct tg_tls *t, const char *p, size_t n, struct tg_buf *out);
int tg_tls_close_notify(struct tg_tls *t, struct tg_buf *out);
int tg_tls_established(const struct tg_tls *t);
/* Between records, an established connection's two record buffers (16 KiB each in mbedtls 2.28,
 * kept for its life; page-aligned whole pages of their own, see tg_tls_new()) hold nothing but the
 * sequence counters and record headers at their start: those are copied aside and every page is
 * given back to the kernel (madvise MADV_DONTNEED); the next tg_tls_feed, tg_tls_write or
 * tg_tls_close_notify puts them back, and a record faults in zeroed pages as it needs them.
 * Does nothing while a record is part read or part written, or data waits to be read, or when
 * trimmed already. Returns the bytes given back. */
size_t tg_tls_trim(struct tg_tls *t);
/* How long a client connection is idle before its record buffers are trimmed (transports/http1). */
#define TG_TLS_TRIM_MS 1000
/* A server connection's client certificate, if one was sent and verified against client_ca: its
 * subject as mbedtls prints it ("C=NL, O=acme, CN=alice", in certificate order) and its CN
 * (empty unless there is exactly one, free of NUL bytes and shorter than cnsz). Returns 1 then,
 * 0 (both empty) otherwise. */
int tg_tls_peer_subject(const struct tg_tls *t, char *dn, size_t dnsz, char *cn, size_t cnsz);
const char *tg_tls_last_error(const struct tg_tls *t);

/* core/wire/tls_gcm.c: the AES-GCM every record goes through, in place of mbedtls's (see there).
 * Is its fast path on (the CPU has AES-NI and PCLMULQDQ, and not turned off)? */
int tg__tls_gcm_fast(void);
/* Off: every record through mbedtls's own function (tests compare the two). */
void tg__tls_gcm_set_fast(int on);
/* Records sealed or opened by the fast path since start (tests: mbedtls does call it). */
unsigned long tg__tls_gcm_fast_calls(void);

#endif
