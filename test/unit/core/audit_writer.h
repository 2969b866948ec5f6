/* For tests of the audit writer's files (core/call/audit.c): a temporary folder with a fresh P-256
 * key (private and public PEM), a conf whose audit group chains and signs every 3 records, and a
 * record of every form a line takes. Static functions: included by one test file each. */
#ifndef TG_TEST_AUDIT_WRITER_H
#define TG_TEST_AUDIT_WRITER_H

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>

#include "core/call/audit.h"

struct fixture {
    uv_loop_t loop;
    char dir[64], path[128], old[140], key[128], pub[128];
    struct tg_conf conf;
    mbedtls_pk_context pk; /* the key made for the test: verifies the signatures */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/tg-audit-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/audit.log", f->dir);
    snprintf(f->old, sizeof(f->old), "%s/audit.log.1", f->dir);
    snprintf(f->key, sizeof(f->key), "%s/audit.key", f->dir);
    snprintf(f->pub, sizeof(f->pub), "%s/audit.pub", f->dir);
    mbedtls_entropy_context e;
    mbedtls_ctr_drbg_context d;
    mbedtls_entropy_init(&e);
    mbedtls_ctr_drbg_init(&d);
    mbedtls_pk_init(&f->pk);
    assert_int_equal(mbedtls_ctr_drbg_seed(&d, mbedtls_entropy_func, &e, NULL, 0), 0);
    assert_int_equal(mbedtls_pk_setup(&f->pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)), 0);
    assert_int_equal(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(f->pk), mbedtls_ctr_drbg_random, &d),
                     0);
    unsigned char pem[1024];
    const char *paths[] = {f->key, f->pub};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(i == 0 ? mbedtls_pk_write_key_pem(&f->pk, pem, sizeof(pem))
                                : mbedtls_pk_write_pubkey_pem(&f->pk, pem, sizeof(pem)),
                         0);
        FILE *fp = fopen(paths[i], "w");
        assert_non_null(fp);
        fputs((char *)pem, fp);
        fclose(fp);
    }
    mbedtls_ctr_drbg_free(&d);
    mbedtls_entropy_free(&e);
    uv_loop_init(&f->loop);
    f->conf.path = "/etc/tollgate/tollgate.conf";
    memset(f->conf.sha256, 'a', 64);
    f->conf.audit.file = f->path;
    f->conf.audit.max_pending = 16 * 1024 * 1024;
    f->conf.audit.chain = 1;
    f->conf.audit.signing_key = f->key;
    f->conf.audit.checkpoint_lines = 3;
    f->conf.audit.checkpoint_seconds = 3600;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    const char *paths[] = {f->path, f->old, f->key, f->pub};
    for (int i = 0; i < 4; i++)
        unlink(paths[i]);
    rmdir(f->dir);
    mbedtls_pk_free(&f->pk);
    free(f);
    return 0;
}

static struct tg_audit *open_log(struct fixture *f)
{
    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_audit *a = tg_audit_open(&f->loop, &f->conf.audit, &err);
    assert_non_null(a);
    tg_buf_dispose(&err);
    tg_audit_set_conf(a, &f->conf);
    return a;
}

static void close_log(struct fixture *f, struct tg_audit *a)
{
    tg_audit_close(a);
    uv_run(&f->loop, UV_RUN_DEFAULT);
}

static void log_one(struct fixture *f, struct tg_audit *a, int i)
{
    char tool[32];
    snprintf(tool, sizeof(tool), "t\xc3\xa9-\"%d\"", i);
    /* the forms a line takes: counters out of byte order, a history object, arguments spaced as
     * the client sent them, numbers written 1.0e0 and 2.50, a latency */
    struct tg_audit_record r = {.grant = "alice", .subject = "a\nb", .session = "s1", .upstream = "main",
                                .method = "tools/call", .tool = tool, .decision = i % 2 ? "deny" : "allow",
                                .rule = "r", .counters_json = "\"zeta\":1,\"alpha\":2.50",
                                .history_json = "{\"tool\":\"read_env\",\"upstream\":\"u\",\"at\":\"x\"}",
                                .args_json = "{ \"b\" : 1.0e0, \"a\": [1, {\"y\":2,\"x\":3}] }",
                                .args_sha256 = "00", .latency_ms = 1.5, .outcome = "ok"};
    tg_audit_log(a, &f->conf.audit, &r);
}

#endif
