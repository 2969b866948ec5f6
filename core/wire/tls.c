#include "core/wire/tls.h"

#include <mbedtls/asn1.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/oid.h>
#include <mbedtls/pk.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/ssl.h>
#include <mbedtls/ssl_internal.h>
#include <mbedtls/ssl_ticket.h>
#include <mbedtls/x509_crt.h>
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* One TLS listener's context. Owner: refcounted: the listener (l->http.tls) holds one reference,
 * made by tg_tls_ctx_new(), and each connection's tg_tls one; a reload that reads the certificate
 * again puts a new one on the listener and drops its reference to this one, which goes with
 * the last connection that uses it. */
struct tg_tls_ctx {
    int refs;
    mbedtls_ssl_config conf;
    mbedtls_x509_crt cert;
    mbedtls_x509_crt client_ca; /* listen[].tls.client_ca: mTLS clients' certificates chain to it */
    mbedtls_pk_context key;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    /* Session tickets (listen[].tls.session_timeout_s > 0): a client that comes back within the
     * timeout resumes its session with no public-key work (no ECDHE, no signature: a full
     * handshake is 2.7 ms of the loop's time here, a resumed one a few µs). The ticket keys are
     * this context's own, random, rotated by mbedtls every timeout: a ticket opens only on the
     * listener that issued it, and a reload (new contexts) makes every earlier ticket a full
     * handshake again, so a changed client_ca or certificate is never bypassed by resumption. A
     * resumed session keeps the client certificate and its verification result it had. */
    mbedtls_ssl_ticket_context ticket;
    int has_ticket;
};

/* What of a record buffer outlives its record: the 8-byte sequence counter and the record header
 * at its start (in TLS, in_ctr/out_ctr are the buffer's first bytes; nothing after the header
 * outlives its record). */
#define TG_TLS_KEPT 64
#define TG_TLS_ERR 192

/* One connection's TLS state. Owner: the connection (c->tls), made by tg_tls_new() on accept and
 * freed by tg_tls_free() in on_handle_closed(); in and out are borrowed for one call only. */
struct tg_tls {
    mbedtls_ssl_context ssl;
    struct tg_tls_ctx *ctx; /* server side: a reference on the listener context its config is in */
    const char *in;
    size_t in_len;
    struct tg_buf *out;
    int established;
    int client;
    unsigned char ip[16]; /* client to an IP literal: the address its certificate must name */
    size_t ip_len;
    /* Trimmed (tg_tls_trim): the first bytes of the in and out record buffers, whose pages went
     * back to the kernel whole; put back by untrim() before mbedtls touches the buffers again. */
    int trimmed;
    unsigned char kept[2][TG_TLS_KEPT];
    char *err; /* the last error's text (TG_TLS_ERR bytes), made at the first error: most
                * connections never have one */
};

/* An https:// upstream's TLS client side: the CA chain its certificate must chain to, our
 * certificate and key for mTLS upstreams, the config, the DRBG. Owner: the upstream's conf
 * (tg_upstream_conf.tls), made by tg_tls_client_ctx_new() at load and freed with the conf. */
struct tg_tls_client_ctx {
    mbedtls_ssl_config conf;
    mbedtls_x509_crt ca;
    mbedtls_x509_crt cert;
    mbedtls_pk_context key;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    int verify;
};

/* ECDHE groups, cheapest first: mbedtls 2.28's default order starts at secp521r1, which makes
 * every handshake (and a handshake flood) several times dearer. */
static const mbedtls_ecp_group_id curves[] = {
    MBEDTLS_ECP_DP_CURVE25519, MBEDTLS_ECP_DP_SECP256R1, MBEDTLS_ECP_DP_SECP384R1, MBEDTLS_ECP_DP_NONE,
};

/* TLS 1.2, ECDHE key exchange, AEAD ciphers only. */
static const int suites[] = {
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    MBEDTLS_TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    MBEDTLS_TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    0,
};

/* A certificate and its key, which must match (mbedtls_ssl_conf_own_cert does not check). */
static int load_pair(mbedtls_x509_crt *crt, mbedtls_pk_context *key, const char *cert_file, const char *key_file,
                     const char **what)
{
    int r;
    if ((r = mbedtls_x509_crt_parse_file(crt, cert_file)) != 0)
        *what = cert_file;
    else if ((r = mbedtls_pk_parse_keyfile(key, key_file, NULL)) != 0)
        *what = key_file;
    else if ((r = mbedtls_pk_check_pair(&crt->pk, key)) != 0)
        *what = "certificate and key do not match";
    return r;
}

/* What both ends share: TLS 1.2 only, our suites and curves, no renegotiation. */
static int conf_common(mbedtls_ssl_config *conf, int endpoint, mbedtls_ctr_drbg_context *drbg, const char **what)
{
    (void)tg__tls_gcm_fast(); /* its CPU check and mbedtls's own function found now, not at the first record */
    int r = mbedtls_ssl_config_defaults(conf, endpoint, MBEDTLS_SSL_TRANSPORT_STREAM, MBEDTLS_SSL_PRESET_DEFAULT);
    if (r != 0) {
        *what = "TLS defaults";
        return r;
    }
    mbedtls_ssl_conf_rng(conf, mbedtls_ctr_drbg_random, drbg);
    mbedtls_ssl_conf_min_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_max_version(conf, MBEDTLS_SSL_MAJOR_VERSION_3, MBEDTLS_SSL_MINOR_VERSION_3);
    mbedtls_ssl_conf_ciphersuites(conf, suites);
    mbedtls_ssl_conf_curves(conf, curves);
    mbedtls_ssl_conf_renegotiation(conf, MBEDTLS_SSL_RENEGOTIATION_DISABLED);
    return 0;
}

int tg_tls_ctx_new(const struct tg_tls_server_opts *o, struct tg_tls_ctx **out, char *err, size_t errsz)
{
    const char *cert_file = o->cert_file, *key_file = o->key_file;
    struct tg_tls_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return TG_ENOMEM;
    c->refs = 1;
    mbedtls_ssl_config_init(&c->conf);
    mbedtls_x509_crt_init(&c->cert);
    mbedtls_x509_crt_init(&c->client_ca);
    mbedtls_pk_init(&c->key);
    mbedtls_entropy_init(&c->entropy);
    mbedtls_ctr_drbg_init(&c->drbg);
    int r;
    char ebuf[128];
    const char *what = "";
    if ((r = mbedtls_ctr_drbg_seed(&c->drbg, mbedtls_entropy_func, &c->entropy, (const unsigned char *)"tollgate",
                                   8)) != 0) {
        what = "seeding the random generator";
        goto fail;
    }
    if ((r = load_pair(&c->cert, &c->key, cert_file, key_file, &what)) != 0 ||
        (r = conf_common(&c->conf, MBEDTLS_SSL_IS_SERVER, &c->drbg, &what)) != 0)
        goto fail;
    if ((r = mbedtls_ssl_conf_own_cert(&c->conf, &c->cert, &c->key)) != 0) {
        what = "certificate and key do not match";
        goto fail;
    }
    if (o->session_timeout_s > 0) {
        mbedtls_ssl_ticket_init(&c->ticket);
        c->has_ticket = 1;
        if ((r = mbedtls_ssl_ticket_setup(&c->ticket, mbedtls_ctr_drbg_random, &c->drbg, MBEDTLS_CIPHER_AES_256_GCM,
                                          (uint32_t)o->session_timeout_s)) != 0) {
            what = "session tickets";
            goto fail;
        }
        mbedtls_ssl_conf_session_tickets_cb(&c->conf, mbedtls_ssl_ticket_write, mbedtls_ssl_ticket_parse, &c->ticket);
    }
    if (o->client_ca_file != NULL) {
        if ((r = mbedtls_x509_crt_parse_file(&c->client_ca, o->client_ca_file)) != 0) {
            what = o->client_ca_file;
            goto fail;
        }
        mbedtls_ssl_conf_ca_chain(&c->conf, &c->client_ca, NULL);
        /* optional: a certificate that does not verify is no credential, but the handshake goes
         * on (tg_tls_peer_subject says so); required: no verified certificate, no handshake. */
        mbedtls_ssl_conf_authmode(&c->conf, o->client_auth == TG_TLS_CLIENT_REQUIRED ? MBEDTLS_SSL_VERIFY_REQUIRED
                                                                                      : MBEDTLS_SSL_VERIFY_OPTIONAL);
    }
    *out = c;
    return 0;
fail:
    mbedtls_strerror(r, ebuf, sizeof(ebuf));
    snprintf(err, errsz, "%s: %s", what, ebuf);
    tg_tls_ctx_free(c);
    return TG_EINVAL;
}

void tg_tls_ctx_free(struct tg_tls_ctx *c)
{
    if (c == NULL || --c->refs > 0)
        return;
    mbedtls_ssl_config_free(&c->conf);
    if (c->has_ticket)
        mbedtls_ssl_ticket_free(&c->ticket);
    mbedtls_x509_crt_free(&c->cert);
    mbedtls_x509_crt_free(&c->client_ca);
    mbedtls_pk_free(&c->key);
    mbedtls_ctr_drbg_free(&c->drbg);
    mbedtls_entropy_free(&c->entropy);
    free(c);
}

int tg_tls_client_ctx_new(const struct tg_tls_client_opts *o, struct tg_tls_client_ctx **out, char *err,
                          size_t errsz)
{
    struct tg_tls_client_ctx *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return TG_ENOMEM;
    mbedtls_ssl_config_init(&c->conf);
    mbedtls_x509_crt_init(&c->ca);
    mbedtls_x509_crt_init(&c->cert);
    mbedtls_pk_init(&c->key);
    mbedtls_entropy_init(&c->entropy);
    mbedtls_ctr_drbg_init(&c->drbg);
    c->verify = o->verify;
    int r;
    char ebuf[128];
    const char *what = "";
    if ((r = mbedtls_ctr_drbg_seed(&c->drbg, mbedtls_entropy_func, &c->entropy, (const unsigned char *)"tollgate-up",
                                   11)) != 0) {
        what = "seeding the random generator";
        goto fail;
    }
    const char *ca = o->ca_file ? o->ca_file : TG_TLS_SYSTEM_CA;
    if (c->verify) {
        /* A bundle may hold certificates mbedtls cannot parse (r > 0 counts them); at least one must load. */
        r = mbedtls_x509_crt_parse_file(&c->ca, ca);
        if (r < 0 || c->ca.version == 0) {
            what = ca;
            if (r >= 0)
                r = MBEDTLS_ERR_X509_INVALID_FORMAT;
            goto fail;
        }
    }
    if (o->cert_file != NULL && (r = load_pair(&c->cert, &c->key, o->cert_file, o->key_file, &what)) != 0)
        goto fail;
    if ((r = conf_common(&c->conf, MBEDTLS_SSL_IS_CLIENT, &c->drbg, &what)) != 0)
        goto fail;
    if (c->verify) {
        mbedtls_ssl_conf_authmode(&c->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
        mbedtls_ssl_conf_ca_chain(&c->conf, &c->ca, NULL);
    } else {
        mbedtls_ssl_conf_authmode(&c->conf, MBEDTLS_SSL_VERIFY_NONE);
    }
    if (o->cert_file != NULL && (r = mbedtls_ssl_conf_own_cert(&c->conf, &c->cert, &c->key)) != 0) {
        what = "client certificate and key do not match";
        goto fail;
    }
    *out = c;
    return 0;
fail:
    mbedtls_strerror(r, ebuf, sizeof(ebuf));
    snprintf(err, errsz, "%s: %s", what, ebuf);
    tg_tls_client_ctx_free(c);
    return TG_EINVAL;
}

void tg_tls_client_ctx_free(struct tg_tls_client_ctx *c)
{
    if (c == NULL)
        return;
    mbedtls_ssl_config_free(&c->conf);
    mbedtls_x509_crt_free(&c->ca);
    mbedtls_x509_crt_free(&c->cert);
    mbedtls_pk_free(&c->key);
    mbedtls_ctr_drbg_free(&c->drbg);
    mbedtls_entropy_free(&c->entropy);
    free(c);
}

static int bio_send(void *ctx, const unsigned char *buf, size_t len)
{
    struct tg_tls *t = ctx;
    if (t->out == NULL)
        return MBEDTLS_ERR_SSL_WANT_WRITE;
    tg_buf_append(t->out, buf, len);
    return (int)len;
}

static int bio_recv(void *ctx, unsigned char *buf, size_t len)
{
    struct tg_tls *t = ctx;
    if (t->in_len == 0)
        return MBEDTLS_ERR_SSL_WANT_READ;
    size_t n = len < t->in_len ? len : t->in_len;
    memcpy(buf, t->in, n);
    t->in += n;
    t->in_len -= n;
    return (int)n;
}

static uintptr_t page_size(void)
{
    static uintptr_t page;
    if (page == 0)
        page = (uintptr_t)sysconf(_SC_PAGESIZE);
    return page;
}

/* Where out_buf starts in the block page_align_buffers() makes: the in buffer's whole pages. */
static size_t in_pages(void)
{
    uintptr_t page = page_size();
    return (MBEDTLS_SSL_IN_BUFFER_LEN + page - 1) & ~(page - 1);
}

/* mbedtls_ssl_setup() took its record buffers with calloc: put in their place one block that
 * starts on a page and holds both, each in whole pages of its own, zeroed as calloc would
 * (mbedtls 2.28's fields are public; its in/out pointers are derived from them again).
 * Trimmed, they give back every page they have: malloc'd ones keep the pages they share with
 * their neighbours, and two aligned blocks leave two alignment gaps. The block is in_buf's
 * allocation: ssl_free() takes out_buf out before mbedtls frees in_buf. */
static int page_align_buffers(mbedtls_ssl_context *ssl)
{
    uintptr_t page = page_size();
    size_t out_len = (MBEDTLS_SSL_OUT_BUFFER_LEN + page - 1) & ~(page - 1);
    void *p = NULL;
    if (posix_memalign(&p, page, in_pages() + out_len) != 0)
        return -1;
    unsigned char *in = p, *out = in + in_pages();
    memset(in, 0, MBEDTLS_SSL_IN_BUFFER_LEN);
    memset(out, 0, MBEDTLS_SSL_OUT_BUFFER_LEN);
    free(ssl->in_buf);
    free(ssl->out_buf);
    ssl->in_buf = in;
    ssl->out_buf = out;
    mbedtls_ssl_reset_in_out_pointers(ssl);
    return 0;
}

/* mbedtls_ssl_free(), with out_buf (part of in_buf's block, if page_align_buffers() made it)
 * wiped and taken out first: mbedtls wipes and frees in_buf, the whole block. */
static void ssl_free(mbedtls_ssl_context *ssl)
{
    if (ssl->in_buf != NULL && ssl->out_buf == ssl->in_buf + in_pages()) {
        mbedtls_platform_zeroize(ssl->out_buf, MBEDTLS_SSL_OUT_BUFFER_LEN);
        ssl->out_buf = NULL;
    }
    mbedtls_ssl_free(ssl);
}

struct tg_tls *tg_tls_new(struct tg_tls_ctx *ctx)
{
    struct tg_tls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    mbedtls_ssl_init(&t->ssl);
    if (mbedtls_ssl_setup(&t->ssl, &ctx->conf) != 0 || page_align_buffers(&t->ssl) != 0) {
        ssl_free(&t->ssl);
        free(t);
        return NULL;
    }
    mbedtls_ssl_set_bio(&t->ssl, t, bio_send, bio_recv, NULL);
    t->ctx = ctx;
    ctx->refs++;
    return t;
}

/* mbedtls 2.28 checks a name only against DNS entries and the CN, and would put an IP literal in
 * SNI: for an address, the leaf certificate must list it as an iPAddress subjectAltName. */
static int verify_ip(void *ud, mbedtls_x509_crt *crt, int depth, uint32_t *flags)
{
    struct tg_tls *t = ud;
    if (depth != 0)
        return 0;
    for (const mbedtls_x509_sequence *s = &crt->subject_alt_names; s != NULL && s->buf.p != NULL; s = s->next)
        if (s->buf.tag == (MBEDTLS_ASN1_CONTEXT_SPECIFIC | 7) && s->buf.len == t->ip_len &&
            memcmp(s->buf.p, t->ip, t->ip_len) == 0)
            return 0;
    *flags |= MBEDTLS_X509_BADCERT_CN_MISMATCH;
    return 0;
}

struct tg_tls *tg_tls_client_new(struct tg_tls_client_ctx *ctx, const char *server_name)
{
    struct tg_tls *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->client = 1;
    mbedtls_ssl_init(&t->ssl);
    int r = mbedtls_ssl_setup(&t->ssl, &ctx->conf);
    if (r == 0 && page_align_buffers(&t->ssl) != 0)
        r = -1;
    if (r == 0 && inet_pton(AF_INET, server_name, t->ip) == 1)
        t->ip_len = 4;
    else if (r == 0 && inet_pton(AF_INET6, server_name, t->ip) == 1)
        t->ip_len = 16;
    if (t->ip_len != 0)
        mbedtls_ssl_set_verify(&t->ssl, verify_ip, t); /* no SNI for an address (RFC 6066 3) */
    else if (r == 0)
        r = mbedtls_ssl_set_hostname(&t->ssl, server_name); /* both the SNI sent and the name checked */
    if (r != 0) {
        ssl_free(&t->ssl);
        free(t);
        return NULL;
    }
    mbedtls_ssl_set_bio(&t->ssl, t, bio_send, bio_recv, NULL);
    return t;
}

void tg_tls_free(struct tg_tls *t)
{
    if (t == NULL)
        return;
    ssl_free(&t->ssl);
    tg_tls_ctx_free(t->ctx); /* (NULL on the client side) */
    free(t->err);
    free(t);
}

static int set_err(struct tg_tls *t, int r)
{
    if (r == MBEDTLS_ERR_X509_CERT_VERIFY_FAILED) {
        /* Say why: "expired", "CN mismatch", "not trusted" ..., one line. */
        char info[160];
        int n = mbedtls_x509_crt_verify_info(info, sizeof(info), "", mbedtls_ssl_get_verify_result(&t->ssl));
        for (int i = 0; i < n && info[i]; i++)
            if (info[i] == '\n')
                info[i] = i + 1 < n && info[i + 1] ? ';' : '\0';
        if (t->err != NULL || (t->err = malloc(TG_TLS_ERR)) != NULL)
            snprintf(t->err, TG_TLS_ERR, "certificate verification failed: %s", n > 0 ? info : "unknown reason");
        return TG_EINVAL;
    }
    if (t->err != NULL || (t->err = malloc(TG_TLS_ERR)) != NULL)
        mbedtls_strerror(r, t->err, TG_TLS_ERR);
    return TG_EINVAL;
}

/* Before mbedtls reads or writes a record again: the counters and headers back in place. */
static void untrim(struct tg_tls *t)
{
    if (!t->trimmed)
        return;
    memcpy(t->ssl.in_buf, t->kept[0], TG_TLS_KEPT);
    memcpy(t->ssl.out_buf, t->kept[1], TG_TLS_KEPT);
    t->trimmed = 0;
}

int tg_tls_feed(struct tg_tls *t, const char *in, size_t n, struct tg_buf *plain, size_t plain_ceiling,
                struct tg_buf *out)
{
    untrim(t);
    t->in = in;
    t->in_len = n;
    t->out = out;
    int rc = 0;
    if (!t->established) {
        int r = mbedtls_ssl_handshake(&t->ssl);
        if (r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE)
            goto done;
        if (r != 0) {
            rc = set_err(t, r);
            goto done;
        }
        t->established = 1;
    }
    /* Room for what these bytes hold (a record's plaintext is shorter than it), not a whole
     * record's 16 KiB: a small request then fits the buffer the connection kept from the last
     * one, with no 16 KiB allocation per request. What a record fed in parts needs more comes
     * in the next rounds. */
    size_t want = t->in_len < 16384 - 64 ? t->in_len + 64 : 16384;
    for (;;) {
        if (tg_buf_try_reserve(plain, want, plain_ceiling ? plain_ceiling + 16384 : 0) != 0) {
            rc = TG_ELIMIT;
            break;
        }
        size_t room = plain->cap - plain->len;
        int r = mbedtls_ssl_read(&t->ssl, (unsigned char *)plain->base + plain->len, room < 16384 ? room : 16384);
        want = 16384;
        if (r > 0) {
            plain->len += (size_t)r;
            if (plain_ceiling && plain->len > plain_ceiling) {
                rc = TG_ELIMIT;
                break;
            }
            continue;
        }
        if (r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE)
            break;
        if (r == 0 || r == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) {
            rc = TG_ECLOSED;
            break;
        }
        rc = set_err(t, r);
        break;
    }
done:
    if (rc == 0 && t->in_len != 0)
        rc = TG_EINVAL; /* mbedtls consumes all input it is given; leftovers mean a state we do not expect */
    t->in = NULL;
    t->in_len = 0;
    t->out = NULL;
    return rc;
}

int tg_tls_write(struct tg_tls *t, const char *p, size_t n, struct tg_buf *out)
{
    untrim(t);
    t->out = out;
    int rc = 0;
    while (n > 0) {
        int r = mbedtls_ssl_write(&t->ssl, (const unsigned char *)p, n);
        if (r < 0) {
            rc = set_err(t, r);
            break;
        }
        p += r;
        n -= (size_t)r;
    }
    t->out = NULL;
    return rc;
}

int tg_tls_close_notify(struct tg_tls *t, struct tg_buf *out)
{
    if (!t->established)
        return 0;
    untrim(t);
    t->out = out;
    int r = mbedtls_ssl_close_notify(&t->ssl);
    t->out = NULL;
    return r == 0 ? 0 : TG_EINVAL;
}

int tg_tls_established(const struct tg_tls *t) { return t->established; }

/* The pages of a record buffer (page_buf: whole pages of its own), given back to the kernel. */
static size_t drop_pages(unsigned char *buf, size_t len)
{
    uintptr_t page = page_size();
    size_t n = (len + page - 1) & ~(page - 1);
    if (((uintptr_t)buf & (page - 1)) != 0 || madvise(buf, n, MADV_DONTNEED) != 0)
        return 0;
    return n;
}

size_t tg_tls_trim(struct tg_tls *t)
{
    mbedtls_ssl_context *s = &t->ssl;
    if (t->trimmed || !t->established || s->state != MBEDTLS_SSL_HANDSHAKE_OVER || s->in_left != 0 ||
        s->in_msglen != 0 || s->in_offt != NULL || s->in_hslen != 0 || s->keep_current_message || s->out_left != 0)
        return 0;
    memcpy(t->kept[0], s->in_buf, TG_TLS_KEPT);
    memcpy(t->kept[1], s->out_buf, TG_TLS_KEPT);
    size_t n = drop_pages(s->in_buf, MBEDTLS_SSL_IN_BUFFER_LEN);
    n += drop_pages(s->out_buf, MBEDTLS_SSL_OUT_BUFFER_LEN);
    t->trimmed = 1;
    return n;
}

int tg_tls_peer_subject(const struct tg_tls *t, char *dn, size_t dnsz, char *cn, size_t cnsz)
{
    dn[0] = cn[0] = '\0';
    if (!t->established || t->client || mbedtls_ssl_get_verify_result(&t->ssl) != 0)
        return 0;
    const mbedtls_x509_crt *crt = mbedtls_ssl_get_peer_cert(&t->ssl);
    if (crt == NULL)
        return 0; /* optional and none sent (the verify result is 0 then too) */
    if (mbedtls_x509_dn_gets(dn, dnsz, &crt->subject) < 0)
        return 0;
    /* The CN is used only when there is exactly one, and it holds no NUL and fits: "alice\0evil",
     * a CN cut at cnsz or "CN=mallory, CN=alice" never read as alice (the whole subject still can
     * be matched: mbedtls prints it with such bytes escaped). */
    int ncn = 0;
    for (const mbedtls_x509_name *n = &crt->subject; n != NULL; n = n->next)
        if (n->oid.p != NULL && MBEDTLS_OID_CMP(MBEDTLS_OID_AT_CN, &n->oid) == 0 && ncn++ == 0 &&
            n->val.len < cnsz && memchr(n->val.p, '\0', n->val.len) == NULL) {
            memcpy(cn, n->val.p, n->val.len);
            cn[n->val.len] = '\0';
        }
    if (ncn != 1)
        cn[0] = '\0';
    return 1;
}
const char *tg_tls_last_error(const struct tg_tls *t) { return t->err != NULL ? t->err : ""; }
