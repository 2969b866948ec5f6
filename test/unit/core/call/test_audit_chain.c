/* core/call/audit_chain.c through core/call/audit.c: every line the writer makes is canonical JSON
 * whose event_hash is the SHA-256 of the line without it, lines thread by previous_hash and seq,
 * checkpoints are signed with the configured P-256 key, and a file opened again (after a stop, a
 * crash that tore its last line, or a rotation) continues the same chain. A record dropped for
 * the queue's bound leaves no gap. */
#include "test/unit/unit.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/base64.h>

#include "core/base/json.h"
#include "core/base/sha256.h"
#include "core/call/audit.h"

#include "test/unit/core/audit_writer.h"

struct line {
    cJSON *j;
    char hash[65];
};

/* Every line of the file, checked on its own: canonical, and its event_hash the SHA-256 of the
 * line without it. Returns how many; lines[] holds each parsed (the caller frees). */
static int read_lines(const char *path, struct line *lines, int max)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    char *buf = malloc(1 << 16);
    int n = 0;
    while (fgets(buf, 1 << 16, fp) != NULL) {
        size_t len = strlen(buf);
        assert_true(len > 1 && buf[len - 1] == '\n');
        struct tg_json_doc doc = {0};
        const char *why;
        size_t off;
        if (tg_json_parse(buf, len - 1, 64, 1, &doc, &why, &off) != 0)
            fail_msg("line %d is not JSON (%s): %s", n + 1, why, buf);
        cJSON *eh = cJSON_DetachItemFromObjectCaseSensitive(doc.root, "event_hash");
        assert_true(cJSON_IsString(eh));
        struct tg_buf c;
        tg_buf_init(&c);
        tg_json_canon_as_written(&c, doc.root);
        /* event_hash last; a line without a client's arguments, a history object or several
         * counters is its canonical form as written */
        char *cut = strstr(buf, ",\"event_hash\":\"");
        assert_non_null(cut);
        assert_true(strncmp(cut + 80, "}\n", 2) == 0);
        if (cJSON_GetObjectItemCaseSensitive(doc.root, "args") == NULL) {
            assert_int_equal((size_t)(cut - buf) + 1, c.len);
            assert_memory_equal(buf, c.base, c.len - 1);
        }
        uint8_t h[32];
        tg_sha256(c.base, c.len, h);
        tg_hex_encode(h, 32, lines[n].hash);
        assert_string_equal(lines[n].hash, eh->valuestring);
        tg_buf_dispose(&c);
        cJSON_Delete(eh);
        assert_true(n < max);
        lines[n++].j = doc.root;
    }
    free(buf);
    fclose(fp);
    return n;
}

static void free_lines(struct line *l, int n)
{
    for (int i = 0; i < n; i++)
        cJSON_Delete(l[i].j);
}

static double num(const cJSON *o, const char *k) { return cJSON_GetObjectItemCaseSensitive(o, k)->valuedouble; }
static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}
static const char *reason(const cJSON *o)
{
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "checkpoint");
    return c ? str(c, "reason") : NULL;
}

/* Lines from..to-1 thread: previous_hash is the line before's event_hash, seq one more. */
static void assert_threaded(struct line *l, int from, int to)
{
    for (int i = from + 1; i < to; i++) {
        const char *p = str(l[i].j, "previous_hash");
        if (p == NULL || strcmp(p, l[i - 1].hash) != 0)
            fail_msg("line %d does not continue line %d", i + 1, i);
        assert_true(num(l[i].j, "seq") == num(l[i - 1].j, "seq") + 1);
    }
}

/* The checkpoint's signature verifies with the test's key over the line without event_hash and
 * signature. */
static void assert_signed(struct fixture *f, const cJSON *cp)
{
    cJSON *o = cJSON_Duplicate(cp, 1);
    const char *sig64 = str(o, "signature");
    assert_non_null(sig64);
    unsigned char sig[128];
    size_t slen = 0;
    assert_int_equal(mbedtls_base64_decode(sig, sizeof(sig), &slen, (const unsigned char *)sig64, strlen(sig64)), 0);
    cJSON_DeleteItemFromObjectCaseSensitive(o, "signature");
    struct tg_buf c;
    tg_buf_init(&c);
    tg_json_canon_as_written(&c, o);
    uint8_t h[32];
    tg_sha256(c.base, c.len, h);
    assert_int_equal(mbedtls_pk_verify(&f->pk, MBEDTLS_MD_SHA256, h, 32, sig, slen), 0);
    h[0] ^= 1;
    assert_int_not_equal(mbedtls_pk_verify(&f->pk, MBEDTLS_MD_SHA256, h, 32, sig, slen), 0);
    tg_buf_dispose(&c);
    cJSON_Delete(o);
}

static void lines_chain_and_checkpoints_are_signed(void **state)
{
    struct fixture *f = *state;
    struct tg_audit *a = open_log(f);
    for (int i = 0; i < 7; i++)
        log_one(f, a, i);
    close_log(f, a);
    struct line l[32];
    int n = read_lines(f->path, l, 32);
    /* start, 3 records, lines, 3 records, lines, 1 record, shutdown */
    assert_int_equal(n, 1 + 3 + 1 + 3 + 1 + 1 + 1);
    assert_string_equal(reason(l[0].j), "start");
    assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(l[0].j, "previous_hash")));
    assert_true(num(l[0].j, "seq") == 1);
    assert_string_equal(reason(l[4].j), "lines");
    assert_string_equal(reason(l[8].j), "lines");
    assert_string_equal(reason(l[10].j), "shutdown");
    assert_true(num(cJSON_GetObjectItemCaseSensitive(l[4].j, "checkpoint"), "records") == 3);
    assert_true(num(cJSON_GetObjectItemCaseSensitive(l[10].j, "checkpoint"), "records") == 1);
    assert_threaded(l, 0, n);
    for (int i = 0; i < n; i++)
        if (reason(l[i].j) != NULL)
            assert_signed(f, l[i].j);
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(l[0].j, "checkpoint");
    assert_string_equal(str(cJSON_GetObjectItemCaseSensitive(cp, "conf"), "sha256"), f->conf.sha256);
    assert_int_equal(strlen(str(cp, "key_sha256")), 64);
    assert_string_equal(str(l[1].j, "disposition"), "allowed");
    assert_string_equal(str(l[2].j, "disposition"), "denied");
    /* the client's argument text is in canonical form, numbers as it wrote them */
    struct tg_buf b;
    tg_buf_init(&b);
    tg_json_canon_as_written(&b, cJSON_GetObjectItemCaseSensitive(l[1].j, "args"));
    tg_buf_append(&b, "", 1);
    assert_string_equal(b.base, "{\"a\":[1,{\"x\":3,\"y\":2}],\"b\":1.0e0}");
    tg_buf_dispose(&b);
    free_lines(l, n);
}

/* Stopped and started again, torn by a crash, rotated: one chain throughout. */
static void a_file_opened_again_continues_the_chain(void **state)
{
    struct fixture *f = *state;
    f->conf.audit.checkpoint_lines = 1000;
    struct tg_audit *a = open_log(f);
    log_one(f, a, 0);
    close_log(f, a);
    a = open_log(f);
    log_one(f, a, 1);
    close_log(f, a);
    /* a write cut short */
    int fd = open(f->path, O_WRONLY | O_APPEND);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "{\"decision\":\"al", 15), 15);
    close(fd);
    a = open_log(f);
    log_one(f, a, 2);
    /* rotation: the old file ends with a checkpoint the new one continues from */
    const char *old = f->old;
    assert_int_equal(rename(f->path, old), 0);
    tg_audit_reopen(a);
    log_one(f, a, 3);
    close_log(f, a);

    /* the old file: start rec shutdown start rec shutdown | torn | start rec rotate; the new: rec shutdown */
    FILE *fp = fopen(old, "r");
    char buf[8192];
    int k = 0, torn_at = -1;
    while (fgets(buf, sizeof(buf), fp) != NULL) {
        k++;
        if (strncmp(buf, "{\"decision\":\"al\n", 16) == 0)
            torn_at = k;
    }
    fclose(fp);
    assert_int_equal(torn_at, 7); /* a line of its own */
    /* drop the torn line to read the rest as chained lines */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "sed -i 7d %s && cat %s %s > %s.all", old, old, f->path, f->path);
    assert_int_equal(system(cmd), 0);
    char all[170];
    snprintf(all, sizeof(all), "%s.all", f->path);
    struct line l[32];
    int n = read_lines(all, l, 32);
    unlink(all);
    assert_int_equal(n, 11);
    assert_threaded(l, 0, n);
    assert_string_equal(reason(l[3].j), "start");
    assert_string_equal(reason(l[6].j), "start");
    assert_string_equal(reason(l[8].j), "rotate");
    assert_string_equal(reason(l[10].j), "shutdown");
    assert_true(num(l[10].j, "seq") == 11);
    free_lines(l, n);
}

/* A record the queue cannot take is counted and leaves the chain whole; the next checkpoint says
 * how many were lost. */
static void a_dropped_record_leaves_no_gap(void **state)
{
    struct fixture *f = *state;
    f->conf.audit.max_pending = 700; /* the start checkpoint and one record fit */
    f->conf.audit.checkpoint_lines = 1000;
    f->conf.audit.signing_key = NULL;
    struct tg_audit *a = open_log(f);
    log_one(f, a, 0);
    assert_int_equal(tg_audit_dropped(a), 1);
    uv_run(&f->loop, UV_RUN_NOWAIT); /* written: the queue is empty again */
    log_one(f, a, 1);
    close_log(f, a);
    struct line l[8];
    int n = read_lines(f->path, l, 8);
    assert_int_equal(n, 3);
    assert_threaded(l, 0, n);
    assert_null(str(l[0].j, "signature"));
    const cJSON *cp = cJSON_GetObjectItemCaseSensitive(l[2].j, "checkpoint");
    assert_true(num(cp, "dropped") == 1);
    free_lines(l, n);
}

/* audit.chain = false: the lines of before, keys in byte order, no chain members or checkpoints. */
static void no_chain_no_chain_members(void **state)
{
    struct fixture *f = *state;
    f->conf.audit.chain = 0;
    f->conf.audit.signing_key = NULL;
    struct tg_audit *a = open_log(f);
    log_one(f, a, 0);
    close_log(f, a);
    FILE *fp = fopen(f->path, "r");
    char buf[8192];
    assert_non_null(fgets(buf, sizeof(buf), fp));
    assert_null(fgets(buf + 4096, 4096, fp));
    fclose(fp);
    assert_null(strstr(buf, "event_hash"));
    assert_null(strstr(buf, "previous_hash"));
    assert_non_null(strstr(buf, "\"disposition\":\"allowed\""));
    cJSON *j = cJSON_Parse(buf);
    assert_non_null(j);
    const char *prev = "";
    for (const cJSON *m = j->child; m; m = m->next) {
        assert_true(strcmp(prev, m->string) < 0);
        prev = m->string;
    }
    cJSON_Delete(j);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(lines_chain_and_checkpoints_are_signed, setup, teardown),
        cmocka_unit_test_setup_teardown(a_file_opened_again_continues_the_chain, setup, teardown),
        cmocka_unit_test_setup_teardown(a_dropped_record_leaves_no_gap, setup, teardown),
        cmocka_unit_test_setup_teardown(no_chain_no_chain_members, setup, teardown),
    };
    return tg_unit_run("audit_chain", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
