/* tg-bench-insns: instructions a piece of the gateway executes natively, counted exactly by
 * single-stepping it under ptrace. callgrind cannot count what valgrind cannot run: it hides the
 * CPU's SHA extensions, so under callgrind every SHA-256 takes the portable path. This counts the
 * path the gateway really takes on this CPU. Deterministic, like callgrind, and unaffected by load.
 *
 *   tg-bench-insns                 the audit record (chained and not) and SHA-256 of its size
 *   tg-bench-insns --sha LEN       SHA-256 of LEN bytes, accelerated and portable
 *
 * How: a child runs the code between two raise(SIGSTOP) marks; the parent single-steps from the
 * first mark to the second and subtracts the steps of an empty region (the marks themselves). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "core/base/buf.h"
#include "core/base/sha256.h"
#include "core/call/audit.h"
#include "core/conf/conf.h"

typedef void (*region_fn)(void *arg);

/* Steps from the child's first SIGSTOP to its second: the instructions of fn, plus the marks. */
static long count_region(region_fn setup, region_fn fn, void *arg)
{
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        exit(2);
    }
    if (pid == 0) {
        if (setup)
            setup(arg);
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) != 0)
            _exit(3);
        raise(SIGSTOP); /* the parent attaches here */
        raise(SIGSTOP); /* the region begins */
        fn(arg);
        raise(SIGSTOP); /* and ends */
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0); /* the TRACEME stop */
    ptrace(PTRACE_CONT, pid, NULL, NULL);
    waitpid(pid, &st, 0); /* the first mark */
    long steps = 0;
    /* TG_INSNS_TRACE=FILE: every instruction's address, and the child's maps, in FILE.N for region N */
    const char *trace = getenv("TG_INSNS_TRACE");
    static int region;
    char tname[512];
    snprintf(tname, sizeof(tname), "%s.%d", trace ? trace : "", region++);
    FILE *tf = trace ? fopen(tname, "w") : NULL;
    if (tf) {
        char mp[64], line[512];
        snprintf(mp, sizeof(mp), "/proc/%d/maps", (int)pid);
        FILE *m = fopen(mp, "r");
        while (m && fgets(line, sizeof(line), m))
            fprintf(tf, "map %s", line);
        if (m)
            fclose(m);
    }
    for (;;) {
        if (ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL) != 0) {
            perror("ptrace");
            exit(2);
        }
        waitpid(pid, &st, 0);
        if (WIFEXITED(st)) {
            fprintf(stderr, "the child exited inside the region\n");
            exit(2);
        }
        steps++;
        if (tf) {
            struct user_regs_struct regs;
            ptrace(PTRACE_GETREGS, pid, NULL, &regs);
            fprintf(tf, "%llx\n", (unsigned long long)regs.rip);
        }
        if (WIFSTOPPED(st) && WSTOPSIG(st) == SIGSTOP)
            break;
    }
    if (tf)
        fclose(tf);
    ptrace(PTRACE_CONT, pid, NULL, NULL);
    waitpid(pid, &st, 0);
    return steps;
}

static void nothing(void *arg) { (void)arg; }

struct sha_arg {
    size_t len;
    int portable;
    uint8_t buf[65536], out[32];
};

/* The first call asks the CPU what it has (cpuid): made before the region. */
static void sha_warm(void *v)
{
    struct sha_arg *a = v;
    tg_sha256(a->buf, 1, a->out);
}

static void sha_fn(void *v)
{
    struct sha_arg *a = v;
    if (a->portable)
        tg_sha256_portable(a->buf, a->len, a->out);
    else
        tg_sha256(a->buf, a->len, a->out);
}

struct audit_arg {
    uv_loop_t loop;
    struct tg_conf conf;
    struct tg_audit *a;
    char dir[64], path[128];
    int chain;
};

static const struct tg_audit_record record = {
    .grant = "bench", .subject = "bench", .session = "cnDtppVzCLaU7oHfSaeHUA", .upstream = "cowork-os",
    .method = "tools/call", .tool = "echo", .decision = "allow", .counters_json = "\"echo_rate\":99999990",
    .args_sha256 = "5041bf1f713df204784353e82f6a4a535931cb64f1f4b4a5aeaffcb720918b22", .latency_ms = 0.412,
    .outcome = "ok"};

/* A writer with its queue grown and a record or two behind it: the steady state of a call. */
static void audit_setup(void *v)
{
    struct audit_arg *a = v;
    snprintf(a->dir, sizeof(a->dir), "/tmp/tg-insns-XXXXXX");
    if (mkdtemp(a->dir) == NULL)
        exit(2);
    snprintf(a->path, sizeof(a->path), "%s/audit.log", a->dir);
    uv_loop_init(&a->loop);
    a->conf.path = "/etc/tollgate/tollgate.conf";
    a->conf.audit.file = a->path;
    a->conf.audit.max_pending = 16 << 20;
    a->conf.audit.chain = a->chain;
    a->conf.audit.checkpoint_lines = 1000000;
    a->conf.audit.checkpoint_seconds = 3600;
    struct tg_buf err;
    tg_buf_init(&err);
    a->a = tg_audit_open(&a->loop, &a->conf.audit, &err);
    if (a->a == NULL)
        exit(2);
    tg_audit_set_conf(a->a, &a->conf);
    /* Both of the writer's buffers grown (they swap at each write), then a record behind. */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 32; i++)
            tg_audit_log(a->a, &a->conf.audit, &record);
        uv_run(&a->loop, UV_RUN_NOWAIT);
    }
    tg_audit_log(a->a, &a->conf.audit, &record);
}

static void audit_fn(void *v)
{
    struct audit_arg *a = v;
    tg_audit_log(a->a, &a->conf.audit, &record);
}

int main(int argc, char **argv)
{
    long marks = argc >= 2 && strcmp(argv[1], "--loop") == 0 ? 0 : count_region(NULL, nothing, NULL);
    static struct sha_arg sa;
    if (argc == 3 && strcmp(argv[1], "--sha") == 0) {
        sa.len = (size_t)atol(argv[2]);
        if (sa.len > sizeof(sa.buf))
            return 2;
        long fast = count_region(sha_warm, sha_fn, &sa) - marks;
        sa.portable = 1;
        long slow = count_region(sha_warm, sha_fn, &sa) - marks;
        printf("sha256 of %zu bytes: %ld instructions (%s), %ld portable\n", sa.len, fast,
               tg_sha256_accelerated() ? "SHA extensions" : "portable: no SHA extensions", slow);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "--loop") == 0) { /* for a profiler: N records (chained), no ptrace */
        static struct audit_arg la;
        la.chain = argc < 4 || strcmp(argv[3], "plain") != 0;
        audit_setup(&la);
        for (long i = atol(argv[2]); i > 0; i--) {
            audit_fn(&la);
            if (i % 64 == 0)
                uv_run(&la.loop, UV_RUN_NOWAIT);
        }
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "usage: tg-bench-insns [--sha LEN | --loop N [plain]]\n");
        return 2;
    }
    static struct audit_arg plain, chained;
    plain.chain = 0;
    chained.chain = 1;
    long p = count_region(audit_setup, audit_fn, &plain) - marks;
    long c = count_region(audit_setup, audit_fn, &chained) - marks;
    /* the chained record's size, for the SHA-256 it takes */
    audit_setup(&chained);
    uv_run(&chained.loop, UV_RUN_NOWAIT);
    FILE *f = fopen(chained.path, "r");
    char line[4096];
    size_t len = 0;
    while (f && fgets(line, sizeof(line), f))
        len = strlen(line);
    if (f)
        fclose(f);
    size_t hashed = len > 81 ? len - 81 : 0; /* without ,"event_hash":"…" and the newline, with the brace */
    sa.len = hashed;
    sa.portable = 0;
    long fast = count_region(sha_warm, sha_fn, &sa) - marks;
    sa.portable = 1;
    long slow = count_region(sha_warm, sha_fn, &sa) - marks;
    printf("audit record, plain:   %ld instructions\n", p);
    printf("audit record, chained: %ld instructions (+%ld), %zu bytes hashed\n", c, c - p, hashed);
    printf("sha256 of %zu bytes:   %ld instructions (%s), %ld portable (what callgrind counts)\n", hashed, fast,
           tg_sha256_accelerated() ? "SHA extensions" : "portable: no SHA extensions", slow);
    return 0;
}
