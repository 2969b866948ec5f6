/* The gateway's audit writer (core/call/audit.c) and `tollgate audit verify` (core/cmd/audit_chain.c)
 * agree: files the real writer makes through stops, a crash that tore a line, a rotation and
 * signed checkpoints verify with its key and --closed; edited afterwards, they do not. */
#include "test/unit/unit.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>

#include "core/call/audit.h"
#include "core/cmd/audit_cmd.h"

#include "test/unit/core/audit_writer.h"

static int verify(struct fixture *f, int closed, struct tg_audit_verdict *v, char **text)
{
    struct tg_audit_key *k = NULL;
    char e[300];
    assert_int_equal(tg_audit_key_load(f->pub, &k, e, sizeof(e)), 0);
    size_t n = 0;
    FILE *out = open_memstream(text, &n);
    const char *files[] = {f->path, f->old}; /* the glob's order, not the chain's */
    int rc = tg_audit_verify(files, 2, &k, 1, closed, out, stderr, v);
    fclose(out);
    printf("%s", *text);
    tg_audit_key_free(k);
    return rc;
}

static void writer_files_verify(void **state)
{
    struct fixture *f = *state;
    struct tg_audit *a = open_log(f);
    for (int i = 0; i < 4; i++)
        log_one(f, a, i);
    close_log(f, a);
    a = open_log(f); /* a restart: the chain goes on in the same file */
    log_one(f, a, 4);
    close_log(f, a);
    int fd = open(f->path, O_WRONLY | O_APPEND); /* a crash in the middle of a write */
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "{\"decision\":\"al", 15), 15);
    close(fd);
    a = open_log(f);
    log_one(f, a, 5);
    assert_int_equal(rename(f->path, f->old), 0); /* logrotate, then SIGUSR1 */
    tg_audit_reopen(a);
    for (int i = 6; i < 9; i++)
        log_one(f, a, i);
    close_log(f, a);

    struct tg_audit_verdict v;
    char *text = NULL;
    assert_int_equal(verify(f, 1, &v, &text), 0);
    assert_non_null(strstr(text, "note: torn line (not JSON"));
    assert_non_null(strstr(text, "(a restart)"));
    assert_int_equal(v.records, 9);
    assert_true(v.checkpoints >= 7);
    assert_int_equal(v.signed_checkpoints, v.checkpoints);
    char want[300];
    snprintf(want, sizeof(want), "files %s %s\n", f->old, f->path);
    assert_non_null(strstr(text, want));
    free(text);

    /* A value changed afterwards: found at its line. */
    char cmd[400];
    snprintf(cmd, sizeof(cmd), "sed -i '2s/\"decision\":\"allow\"/\"decision\":\"deny\"/' %s", f->old);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(verify(f, 1, &v, &text), 1);
    assert_int_equal(v.problem, TG_AUDIT_EDITED);
    assert_string_equal(v.file, f->old);
    assert_int_equal(v.line, 2);
    assert_int_equal(v.seq, 2);
    free(text);
}

/* A full disk: a write cut short, then failing. The records lost were chained already; the next
 * checkpoint counts them as dropped, so the gap they leave is the writer's word, not tampering. */
static void failed_write_is_counted_not_tampering(void **state)
{
    struct fixture *f = *state;
    f->conf.audit.checkpoint_lines = 1000;
    struct tg_audit *a = open_log(f);
    log_one(f, a, 0);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    struct stat st;
    assert_int_equal(stat(f->path, &st), 0);
    struct rlimit was, small;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
    small = was;
    small.rlim_cur = (rlim_t)st.st_size + 100;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    for (int i = 1; i <= 5; i++)
        log_one(f, a, i);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
    signal(SIGXFSZ, SIG_DFL);
    assert_int_equal(tg_audit_dropped(a), 5);
    log_one(f, a, 6);
    close_log(f, a);
    unlink(f->old);
    assert_int_equal(rename(f->path, f->old), 0);
    int fd = open(f->path, O_WRONLY | O_CREAT, 0600); /* verify takes two files */
    close(fd);

    struct tg_audit_verdict v;
    char *text = NULL;
    assert_int_equal(verify(f, 1, &v, &text), 0);
    assert_non_null(strstr(text, ":3: note: torn line (not JSON"));
    assert_non_null(strstr(text, "note: 5 line(s) missing before line 4 (seq 3 to 7) are counted as dropped by the writer "
                                 "in this checkpoint"));
    free(text);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(writer_files_verify, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_write_is_counted_not_tampering, setup, teardown),
    };
    return tg_unit_run("audit_roundtrip", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
