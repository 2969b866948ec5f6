/* core/call/audit.c: how records reach the file. A regular file is written by the loop itself, once
 * per iteration (or at once past 64 KiB); anything else (here a pipe) through the thread pool.
 * Either way every record is written or counted as dropped, and closing writes what waits. */
#include "test/unit/unit.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/call/audit.h"
#include "core/base/json.h"
#include "policy/counters.h"
#include "policy/policy.h"

struct fixture {
    uv_loop_t loop;
    char dir[64], path[128];
    struct tg_audit_conf ac;
    struct rlimit fsize; /* RLIMIT_FSIZE as it was: a case that lowers it fails without leaving it low */
};

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/tg-audit-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->path, sizeof(f->path), "%s/audit.log", f->dir);
    uv_loop_init(&f->loop);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &f->fsize), 0);
    f->ac.max_pending = 16 * 1024 * 1024;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    setrlimit(RLIMIT_FSIZE, &f->fsize);
    signal(SIGXFSZ, SIG_DFL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    unlink(f->path);
    rmdir(f->dir);
    free(f);
    return 0;
}

static struct tg_audit *open_at(struct fixture *f, const char *path)
{
    f->ac.file = (char *)path;
    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_audit *a = tg_audit_open(&f->loop, &f->ac, &err);
    assert_non_null(a);
    tg_buf_dispose(&err);
    return a;
}

static void log_n(struct tg_audit *a, struct fixture *f, int n)
{
    for (int i = 0; i < n; i++) {
        char tool[32];
        snprintf(tool, sizeof(tool), "tool-%d", i);
        struct tg_audit_record r = {.grant = "alice", .upstream = "main", .method = "tools/call", .tool = tool,
                                    .decision = "allow", .latency_ms = -1};
        tg_audit_log(a, &f->ac, &r);
    }
}

static size_t lines_in(const char *p, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += p[i] == '\n';
    return k;
}

static size_t file_lines(const char *path)
{
    FILE *fp = fopen(path, "r");
    assert_non_null(fp);
    size_t k = 0;
    int c;
    while ((c = fgetc(fp)) != EOF)
        k += c == '\n';
    fclose(fp);
    return k;
}

/* A regular file: nothing is written while the iteration runs, all of it once the loop turns. */
static void regular_file_written_once_per_iteration(void **state)
{
    struct fixture *f = *state;
    struct tg_audit *a = open_at(f, f->path);
    log_n(a, f, 100);
    assert_int_equal(file_lines(f->path), 0);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(file_lines(f->path), 100);
    assert_int_equal(tg_audit_written(a), 100);
    assert_int_equal(tg_audit_dropped(a), 0);
    /* the loop has nothing left to do for the audit log: it does not keep it alive */
    assert_int_equal(uv_run(&f->loop, UV_RUN_NOWAIT), 0);
    tg_audit_close(a);
}

/* Past 64 KiB waiting, the records go at once, in the iteration that made them. */
static void big_backlog_written_at_once(void **state)
{
    struct fixture *f = *state;
    struct tg_audit *a = open_at(f, f->path);
    log_n(a, f, 1000); /* about 130 KiB */
    assert_true(tg_audit_written(a) > 0);
    assert_true(file_lines(f->path) > 0);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(file_lines(f->path), 1000);
    assert_int_equal(tg_audit_written(a), 1000);
    tg_audit_close(a);
}

/* Records still waiting when the log closes (a reload, the drain) are written by the close. */
static void close_writes_what_waits(void **state)
{
    struct fixture *f = *state;
    struct tg_audit *a = open_at(f, f->path);
    log_n(a, f, 5);
    tg_audit_close(a);
    assert_int_equal(file_lines(f->path), 5);
}

/* A write that fails (here: over RLIMIT_FSIZE, EFBIG) loses its records, counted, and the
 * loop goes on; once writes succeed again, records are written again. The record the short
 * write tore is ended with a newline before them: the next records are whole lines. */
static void failed_write_counts_its_records(void **state)
{
    struct fixture *f = *state;
    struct tg_audit *a = open_at(f, f->path);
    struct rlimit small = {.rlim_cur = 100, .rlim_max = f->fsize.rlim_max};
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    log_n(a, f, 10);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &f->fsize), 0);
    signal(SIGXFSZ, SIG_DFL);
    /* the first 100 bytes went (a short write), the rest failed: every record is one or the other */
    assert_int_equal(tg_audit_written(a) + tg_audit_dropped(a), 10);
    assert_true(tg_audit_dropped(a) > 0);
    uint64_t dropped = tg_audit_dropped(a);
    log_n(a, f, 3);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(tg_audit_dropped(a), dropped);
    assert_int_equal(tg_audit_written(a) + tg_audit_dropped(a), 13);
    tg_audit_close(a);
    /* 100 bytes of the first batch (no record is that short: one whole, or none, and a torn
     * one), then its newline, then the three records, each a line that starts a JSON object */
    FILE *fp = fopen(f->path, "r");
    assert_non_null(fp);
    char line[4096];
    int n = 0, whole = 0;
    while (fgets(line, sizeof(line), fp) != NULL) {
        n++;
        whole += line[0] == '{' && strstr(line, "}\n") != NULL;
    }
    fclose(fp);
    assert_int_equal(n, 4);
    assert_true(whole >= 3);
}

/* A pipe is not written by the loop (its reader could stall it): the thread pool writes it, and
 * the loop stays alive until it has. */
static void pipe_written_through_the_pool(void **state)
{
    struct fixture *f = *state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fds[1]);
    struct tg_audit *a = open_at(f, path);
    log_n(a, f, 50);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(tg_audit_written(a), 50);
    char buf[65536];
    ssize_t n = read(fds[0], buf, sizeof(buf));
    assert_true(n > 0);
    assert_int_equal(lines_in(buf, (size_t)n), 50);
    tg_audit_close(a);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    close(fds[0]);
    close(fds[1]);
}

/* A policy whose one tool "t" has these limits (the tree is taken), and one decision of it. */
struct limited {
    struct tg_policy *p;
    struct tg_counters *c;
};

static void limited_decide(struct limited *l, cJSON *limits, struct tg_decision *d)
{
    cJSON *root = cJSON_Parse("{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"t\":{}}}");
    cJSON_AddItemToObject(cJSON_GetObjectItem(cJSON_GetObjectItem(root, "tools"), "t"), "limits", limits);
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    l->p = NULL;
    if (tg_policy_compile(root, "limits", &l->p, &err, &warn) != 0)
        fail_msg("policy: %.*s", (int)err.len, err.base);
    cJSON_Delete(root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    l->c = tg_counters_new();
    struct tg_caller who = {"g", "s", "u", NULL, NULL};
    tg_policy_decide_call(l->p, l->c, &who, "t", NULL, 1700000000000LL, d);
}

static void limited_dispose(struct limited *l)
{
    tg_counters_free(l->c);
    tg_policy_unref(l->p);
}

/* Every audit line is one line of strict JSON whatever the names in it: tool and grant names
 * with newlines, quotes, backslashes and control bytes, and counters with 300-byte names (full of
 * characters that escape, and multi-byte UTF-8 at the 120-byte cut) and so many of them that
 * counters_json runs out of room. */
static void lines_are_json_whatever_the_names(void **state)
{
    struct fixture *f = *state;
    /* counter names: long ones whose escaped form crosses 120 bytes in many ways */
    static const char *const pieces[] = {"\\\"", "\\\\", "\\n", "\\u0001", "\xc3\xa9", "\xf0\x9f\x98\x80", "a", "\\t"};
    cJSON *limits = cJSON_CreateArray();
    char names[24][1024];
    for (int i = 0; i < 24; i++) {
        /* the JSON text of the policy (escapes stand for one byte each); names go up to the
         * 149 bytes a counter name may have, decoded */
        size_t k = (size_t)snprintf(names[i], 16, "c%02d", i), decoded = k;
        static const size_t dlen[] = {1, 1, 1, 1, 2, 4, 1, 1};
        for (int j = 0; decoded + 4 <= 140 + (size_t)(i % 9); j++) {
            const char *pc = pieces[(i + j) % 8];
            size_t m = strlen(pc);
            memcpy(names[i] + k, pc, m);
            k += m;
            decoded += dlen[(i + j) % 8];
        }
        names[i][k] = '\0';
        char lim[1200];
        snprintf(lim, sizeof(lim), "{\"counter\":\"%s\",\"window\":\"day\",\"max\":%d,\"scope\":\"grant\"}", names[i],
                 1000 + i);
        cJSON_AddItemToArray(limits, cJSON_Parse(lim));
    }
    for (int i = 0; i < 24; i++)
        assert_non_null(cJSON_GetArrayItem(limits, i));
    struct limited l;
    struct tg_decision d;
    limited_decide(&l, limits, &d);
    assert_true(d.counters_json_len > 0);

    struct tg_audit *a = open_at(f, f->path);
    char big[301];
    memset(big, 'x', 300);
    big[300] = '\0';
    static const char *const odd[] = {"plain", "new\nline", "quo\"te", "back\\slash", "ctl\x01\x1f\x7f",
                                      "\"}\n{\"forged\":1", "caf\xc3\xa9"};
    int nrec = 0;
    for (size_t i = 0; i <= sizeof(odd) / sizeof(odd[0]); i++) {
        const char *name = i < sizeof(odd) / sizeof(odd[0]) ? odd[i] : big;
        struct tg_audit_record r = {.grant = name, .session = name, .upstream = "u", .method = "tools/call",
                                    .tool = name, .decision = "allow", .rule = name, .counters_json = d.counters_json,
                                    .approval_id = name, .decided_by = name, .latency_ms = 1.5, .outcome = "ok"};
        tg_audit_log(a, &f->ac, &r);
        nrec++;
    }
    tg_audit_close(a);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    FILE *fp = fopen(f->path, "r");
    assert_non_null(fp);
    char *line = malloc(1 << 16);
    int n = 0;
    while (fgets(line, 1 << 16, fp) != NULL) {
        size_t len = strlen(line);
        assert_true(len > 0 && line[len - 1] == '\n');
        cJSON *j = cJSON_ParseWithLength(line, len - 1);
        if (j == NULL)
            fail_msg("record %d is not JSON: %s", n, line);
        struct tg_json_doc doc;
        const char *e = NULL;
        size_t off = 0;
        if (tg_json_parse(line, len - 1, 16, 1, &doc, &e, &off) != 0)
            fail_msg("record %d is not strict JSON (%s at %zu): %s", n, e, off, line);
        cJSON_Delete(doc.root);
        const char *name = n < (int)(sizeof(odd) / sizeof(odd[0])) ? odd[n] : big;
        assert_string_equal(cJSON_GetObjectItem(j, "tool")->valuestring, name);
        assert_string_equal(cJSON_GetObjectItem(j, "grant")->valuestring, name);
        assert_null(cJSON_GetObjectItem(j, "forged"));
        cJSON *cs = cJSON_GetObjectItem(j, "counters");
        assert_true(cJSON_IsObject(cs));
        int members = 0;
        for (cJSON *m = cs->child; m != NULL; m = m->next, members++) {
            assert_true(cJSON_IsNumber(m));
            assert_true(strlen(m->string) <= 120);
        }
        assert_true(members >= 2); /* as many whole members as fit, the rest left out */
        cJSON_Delete(j);
        n++;
    }
    fclose(fp);
    free(line);
    assert_int_equal(n, nrec);
    limited_dispose(&l);
}

/* Two counters whose long names differ only past the 120 bytes a label keeps: each keeps a key of
 * its own in "counters" (a duplicate key is no strict JSON, and one value would hide the other). */
static void cut_counter_labels_stay_distinct(void **state)
{
    (void)state;
    char lim[3][400], base[140];
    memset(base, 'x', 130);
    base[130] = '\0';
    cJSON *limits = cJSON_CreateArray();
    for (int i = 0; i < 3; i++) {
        /* two long names alike up to byte 130, and a short one that reads like a cut label */
        if (i < 2)
            snprintf(lim[i], sizeof(lim[i]), "{\"counter\":\"%s%c\",\"window\":\"day\",\"max\":9,\"scope\":\"grant\"}", base,
                     'A' + i);
        else
            snprintf(lim[i], sizeof(lim[i]), "{\"counter\":\"%.118s\",\"window\":\"day\",\"max\":9,\"scope\":\"grant\"}", base);
        cJSON_AddItemToArray(limits, cJSON_Parse(lim[i]));
    }
    struct limited l;
    struct tg_decision d;
    limited_decide(&l, limits, &d);
    char obj[600];
    snprintf(obj, sizeof(obj), "{%s}", d.counters_json);
    struct tg_json_doc doc;
    const char *e = NULL;
    size_t off = 0;
    if (tg_json_parse(obj, strlen(obj), 4, 1, &doc, &e, &off) != 0)
        fail_msg("counters are not strict JSON (%s at %zu): %s", e, off, obj);
    assert_int_equal(cJSON_GetArraySize(doc.root), 3);
    for (cJSON *m = doc.root->child; m != NULL; m = m->next)
        assert_true(strlen(m->string) <= 118);
    cJSON_Delete(doc.root);
    limited_dispose(&l);
}

/* What approvers see of the arguments: the bytes as they came, only the values of audit.redact
 * keys replaced (an escaped key too, nested ones too); numbers, spacing and escapes kept. */
static void args_text_is_the_senders_with_redacted_values(void **state)
{
    (void)state;
    char *redact[] = {"content", "Token"};
    struct tg_audit_conf ac = {0};
    ac.redact = redact;
    ac.nredact = 2;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"{\"n\":1e400,\"big\":123456789012345678901234567890,\"odd\":9007199254740993}",
         "{\"n\":1e400,\"big\":123456789012345678901234567890,\"odd\":9007199254740993}"},
        {"{ \"content\" : {\"a\":[1,2]} , \"x\" : -0.0e-7 }", "{ \"content\" : \"[redacted]\" , \"x\" : -0.0e-7 }"},
        {"{\"a\":[{\"TOKEN\":\"s\\\"e}c\"},\"\\u00e9\"],\"\\u0074oken\":2}",
         "{\"a\":[{\"TOKEN\":\"[redacted]\"},\"\\u00e9\"],\"\\u0074oken\":\"[redacted]\"}"},
        {"[]", "[]"},
        {"{}", "{}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *got = tg_audit_args_text(&ac, cases[i].in, strlen(cases[i].in));
        assert_string_equal(got, cases[i].out);
        free(got);
    }
    const char *msg = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"w\",\"x\":{\"arguments\":0},"
                      "\"arguments\" : {\"k\":\"}\"} }}";
    size_t off, len;
    assert_int_equal(tg_audit_args_span(msg, strlen(msg), &off, &len), 0);
    assert_int_equal(len, strlen("{\"k\":\"}\"}"));
    assert_memory_equal(msg + off, "{\"k\":\"}\"}", len);
    assert_int_equal(tg_audit_args_span("{\"params\":{\"name\":\"w\"}}", 23, &off, &len), -1);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(regular_file_written_once_per_iteration, setup, teardown),
        cmocka_unit_test_setup_teardown(big_backlog_written_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(close_writes_what_waits, setup, teardown),
        cmocka_unit_test_setup_teardown(failed_write_counts_its_records, setup, teardown),
        cmocka_unit_test_setup_teardown(pipe_written_through_the_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(lines_are_json_whatever_the_names, setup, teardown),
        cmocka_unit_test(cut_counter_labels_stay_distinct),
        cmocka_unit_test(args_text_is_the_senders_with_redacted_values),
    };
    return tg_unit_run("audit", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
