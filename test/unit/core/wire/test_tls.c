/* core/wire/tls.c in memory: a server and a client tg_tls hand each other their records (no
 * socket), with a P-256 key and a self-signed certificate made here with mbedtls. What is
 * checked is tg_tls_trim(): an idle connection gives its record buffers' pages back, never
 * while a record is half read or data waits, and the connection goes on byte-exact in both
 * directions afterwards (sequence counters and keys intact), through records of every size. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>
#include <mbedtls/x509_crt.h>

#include "core/base/buf.h"
#include "core/base/log.h"
#include "core/wire/tls.h"

static char cert_path[64], key_path[64];

static void write_file(const char *path, const unsigned char *p)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs((const char *)p, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* A throwaway key and certificate for CN=localhost, in files the listener context reads. */
static int make_cert(void **state)
{
    (void)state;
    mbedtls_entropy_context ent;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_pk_context key;
    mbedtls_x509write_cert crt;
    mbedtls_mpi serial;
    mbedtls_entropy_init(&ent);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_pk_init(&key);
    mbedtls_x509write_crt_init(&crt);
    mbedtls_mpi_init(&serial);
    assert_int_equal(mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &ent, NULL, 0), 0);
    assert_int_equal(mbedtls_pk_setup(&key, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)), 0);
    assert_int_equal(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(key), mbedtls_ctr_drbg_random, &drbg),
                     0);
    static unsigned char pem[4096];
    assert_int_equal(mbedtls_pk_write_key_pem(&key, pem, sizeof(pem)), 0);
    snprintf(key_path, sizeof(key_path), "/tmp/tg-test-tls-%d.key", (int)getpid());
    write_file(key_path, pem);
    mbedtls_x509write_crt_set_version(&crt, MBEDTLS_X509_CRT_VERSION_3);
    mbedtls_x509write_crt_set_md_alg(&crt, MBEDTLS_MD_SHA256);
    mbedtls_x509write_crt_set_subject_key(&crt, &key);
    mbedtls_x509write_crt_set_issuer_key(&crt, &key);
    assert_int_equal(mbedtls_x509write_crt_set_subject_name(&crt, "CN=localhost"), 0);
    assert_int_equal(mbedtls_x509write_crt_set_issuer_name(&crt, "CN=localhost"), 0);
    assert_int_equal(mbedtls_mpi_lset(&serial, 1), 0);
    assert_int_equal(mbedtls_x509write_crt_set_serial(&crt, &serial), 0);
    assert_int_equal(mbedtls_x509write_crt_set_validity(&crt, "20250101000000", "20450101000000"), 0);
    assert_int_equal(mbedtls_x509write_crt_pem(&crt, pem, sizeof(pem), mbedtls_ctr_drbg_random, &drbg), 0);
    snprintf(cert_path, sizeof(cert_path), "/tmp/tg-test-tls-%d.crt", (int)getpid());
    write_file(cert_path, pem);
    mbedtls_mpi_free(&serial);
    mbedtls_x509write_crt_free(&crt);
    mbedtls_pk_free(&key);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&ent);
    return 0;
}

static int drop_cert(void **state)
{
    (void)state;
    unlink(cert_path);
    unlink(key_path);
    return 0;
}

struct pair {
    struct tg_tls_ctx *sctx;
    struct tg_tls_client_ctx *cctx;
    struct tg_tls *s, *c;
    struct tg_buf s_plain, c_plain, s_out, c_out; /* *_out: records that side wrote, for the other */
};

/* Hand each side's records to the other until neither has anything more to say. */
static void shuttle(struct pair *p)
{
    for (int round = 0; round < 64 && (p->s_out.len > 0 || p->c_out.len > 0); round++) {
        struct tg_buf in = p->c_out;
        tg_buf_init(&p->c_out);
        assert_int_equal(tg_tls_feed(p->s, in.base, in.len, &p->s_plain, 0, &p->s_out), 0);
        tg_buf_dispose(&in);
        in = p->s_out;
        tg_buf_init(&p->s_out);
        assert_int_equal(tg_tls_feed(p->c, in.base, in.len, &p->c_plain, 0, &p->c_out), 0);
        tg_buf_dispose(&in);
    }
    assert_int_equal(p->s_out.len + p->c_out.len, 0);
}

static void pair_open(struct pair *p)
{
    memset(p, 0, sizeof(*p));
    char err[256];
    struct tg_tls_server_opts so = {.cert_file = cert_path, .key_file = key_path};
    if (tg_tls_ctx_new(&so, &p->sctx, err, sizeof(err)) != 0)
        fail_msg("server context: %s", err);
    struct tg_tls_client_opts co = {.verify = 0};
    if (tg_tls_client_ctx_new(&co, &p->cctx, err, sizeof(err)) != 0)
        fail_msg("client context: %s", err);
    p->s = tg_tls_new(p->sctx);
    p->c = tg_tls_client_new(p->cctx, "localhost");
    assert_non_null(p->s);
    assert_non_null(p->c);
    assert_int_equal(tg_tls_feed(p->c, NULL, 0, &p->c_plain, 0, &p->c_out), 0); /* ClientHello */
    shuttle(p);
    assert_true(tg_tls_established(p->s));
    assert_true(tg_tls_established(p->c));
}

static void pair_close(struct pair *p)
{
    tg_tls_free(p->s);
    tg_tls_free(p->c);
    tg_tls_ctx_free(p->sctx);
    tg_tls_client_ctx_free(p->cctx);
    tg_buf_dispose(&p->s_plain);
    tg_buf_dispose(&p->c_plain);
    tg_buf_dispose(&p->s_out);
    tg_buf_dispose(&p->c_out);
}

static void fill(char *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (char)('!' + (i * 7 + seed) % 90);
}

/* n bytes each way, checked byte for byte on arrival. */
static void exchange(struct pair *p, size_t n, unsigned seed)
{
    char *a = malloc(n ? n : 1), *b = malloc(n ? n : 1);
    fill(a, n, seed);
    fill(b, n, seed + 1);
    p->s_plain.len = p->c_plain.len = 0;
    assert_int_equal(tg_tls_write(p->c, a, n, &p->c_out), 0);
    assert_int_equal(tg_tls_write(p->s, b, n, &p->s_out), 0);
    shuttle(p);
    assert_int_equal(p->s_plain.len, n);
    assert_int_equal(p->c_plain.len, n);
    assert_memory_equal(p->s_plain.base, a, n);
    assert_memory_equal(p->c_plain.base, b, n);
    free(a);
    free(b);
}

static void trim_gives_pages_back_and_the_connection_goes_on(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p);
    long page = sysconf(_SC_PAGESIZE);
    exchange(&p, 16000, 1); /* full-size records: every page of both buffers written */
    size_t got = tg_tls_trim(p.s);
    /* Two buffers of over 16 KiB, every page of each given back, the first one too (its counter
     * and header are kept aside until the next record). */
    size_t whole = (size_t)((16384 + 13 + page - 1) / page);
    assert_true(got >= 2 * whole * (size_t)page);
    assert_true(tg_tls_trim(p.c) >= 2 * whole * (size_t)page);
    assert_int_equal(tg_tls_trim(p.s), 0); /* trimmed already: nothing more to give */
    /* Records of every size afterwards, with trims between: both sides read exactly what the
     * other wrote (a lost sequence counter or key would fail the MAC check at once). */
    size_t sizes[] = {1, 100, 4000, 4097, 16384, 40000, 0, 3};
    for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        exchange(&p, sizes[i], 10 + i);
        if (i % 2 == 0) {
            tg_tls_trim(p.s);
            tg_tls_trim(p.c);
        }
    }
    pair_close(&p);
}

static void no_trim_while_a_record_is_half_read(void **state)
{
    (void)state;
    struct pair p;
    pair_open(&p);
    exchange(&p, 9000, 2);
    char msg[5000];
    fill(msg, sizeof(msg), 3);
    assert_int_equal(tg_tls_write(p.c, msg, sizeof(msg), &p.c_out), 0);
    /* Half of the record: mbedtls holds it in its input buffer, past the first page. */
    size_t half = p.c_out.len / 2;
    p.s_plain.len = 0;
    assert_int_equal(tg_tls_feed(p.s, p.c_out.base, half, &p.s_plain, 0, &p.s_out), 0);
    assert_int_equal(p.s_plain.len, 0);
    assert_int_equal(tg_tls_trim(p.s), 0);
    assert_int_equal(tg_tls_feed(p.s, p.c_out.base + half, p.c_out.len - half, &p.s_plain, 0, &p.s_out), 0);
    p.c_out.len = 0;
    assert_int_equal(p.s_plain.len, sizeof(msg));
    assert_memory_equal(p.s_plain.base, msg, sizeof(msg));
    assert_true(tg_tls_trim(p.s) > 0); /* whole again: now it may */
    exchange(&p, 12345, 4);
    pair_close(&p);
}

static void no_trim_before_the_handshake_ends(void **state)
{
    (void)state;
    struct pair p;
    memset(&p, 0, sizeof(p));
    char err[256];
    struct tg_tls_server_opts so = {.cert_file = cert_path, .key_file = key_path};
    assert_int_equal(tg_tls_ctx_new(&so, &p.sctx, err, sizeof(err)), 0);
    struct tg_tls_client_opts co = {.verify = 0};
    assert_int_equal(tg_tls_client_ctx_new(&co, &p.cctx, err, sizeof(err)), 0);
    p.s = tg_tls_new(p.sctx);
    p.c = tg_tls_client_new(p.cctx, "localhost");
    assert_int_equal(tg_tls_trim(p.s), 0);
    assert_int_equal(tg_tls_feed(p.c, NULL, 0, &p.c_plain, 0, &p.c_out), 0);
    assert_int_equal(tg_tls_trim(p.c), 0);
    struct tg_buf in = p.c_out;
    tg_buf_init(&p.c_out);
    assert_int_equal(tg_tls_feed(p.s, in.base, in.len, &p.s_plain, 0, &p.s_out), 0);
    tg_buf_dispose(&in);
    assert_false(tg_tls_established(p.s));
    assert_int_equal(tg_tls_trim(p.s), 0);
    shuttle(&p);
    exchange(&p, 2000, 5);
    pair_close(&p);
}

int main(void)
{
    tg_log_setup(TG_LOG_WARN, TG_LOG_LOGFMT, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(trim_gives_pages_back_and_the_connection_goes_on),
        cmocka_unit_test(no_trim_while_a_record_is_half_read),
        cmocka_unit_test(no_trim_before_the_handshake_ends),
    };
    return cmocka_run_group_tests(tests, make_cert, drop_cert);
}
