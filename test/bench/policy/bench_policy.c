/* tg-bench-policy: what one policy decision costs, and what a million live counters weigh.
 *
 *   tg-bench-policy [--quick] [--digest | --digest-no-keys] [--tight] [--history] [-n CALLS] [-r RUNS] [-b BUCKETS]
 *
 * A 100-tool policy mixing both PolicyLayer shapes: hosted token buckets, Intercept argument
 * conditions (eq/neq/in/lte/gte/contains/exists and one regex), Intercept fixed-window counters
 * (state blocks and rate_limit shorthand) and a wildcard rule, compiled once. N calls over varied
 * tools, grants and sessions are prepared up front (arguments already parsed into cJSON trees, as
 * the router hands them over); the timed loop only calls tg_policy_decide_call(). Best of RUNS
 * runs (CLOCK_MONOTONIC), each on fresh counters. Then a million distinct grants each take one
 * token from a bucket: tg_counters_memory() and the RSS growth (/proc/self/status VmRSS).
 *
 * --history adds session history: every tool carries a tag, "*" a brake on repeated calls, and a
 * rule for the calls of one tag counts the calls of another within 10 minutes, so every allowed
 * call is remembered and reads its caller's ring (what such a policy costs per decision). The
 * count is compared with gte 0, which holds: a caller here makes a thousand calls a second, so
 * its ring of 64 (limits.history_calls) never covers 10 minutes, and a bound such as lte would
 * fail closed on every call ("history is too short").
 *
 * --quick (the bench-smoke ctest) runs a few thousand calls and checks the verdict mix, so that
 * the benchmark cannot rot; speed is only reported, never asserted. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "policy/policy.h"

#define NTOOLS 100
#define NGRANTS 1000
#define NSESSIONS 4000
#define T0 1710066600000LL /* 2024-03-10T10:30:00Z */

struct call {
    uint16_t tool;
    uint16_t args;
    uint32_t who;
};

static char tool_names[NTOOLS][16];
/* The limits of the policy: high enough that none is reached, or (--tight, for the digest)
 * low enough that many are. */
static long lim = 100000, glim = 1000000;
static int hist; /* --history */

/* ---- the policy ---------------------------------------------------------------------- */

static void append_entry(struct tg_buf *b, int i);

static void append_tool(struct tg_buf *out, int i)
{
    tg_buf_appendf(out, "%s\"%s\":", i ? "," : "", tool_names[i]);
    struct tg_buf e;
    tg_buf_init(&e);
    append_entry(&e, i);
    if (hist) /* the entry's own tags, before its other fields */
        tg_buf_appendf(out, "{\"tags\":[\"t%d\"],%.*s", i % 4, (int)e.len - 1, e.base + 1);
    else
        tg_buf_append(out, e.base, e.len);
    tg_buf_dispose(&e);
}

static void append_entry(struct tg_buf *b, int i)
{
    const char *n = tool_names[i];
    switch (i % 5) {
    case 0: /* hosted token bucket, per grant */
        tg_buf_appendf(b, "{\"limits\":[{\"counter\":\"%s_rate\",\"window\":\"minute\",\"max\":%ld,\"scope\":\"grant\"}]}", n, lim);
        break;
    case 1: /* Intercept argument rules, one of them a regex */
        tg_buf_appendf(b,
                       "{\"rules\":["
                       "{\"name\":\"amount\",\"conditions\":[{\"path\":\"args.amount\",\"op\":\"lte\",\"value\":50000},"
                       "{\"path\":\"args.currency\",\"op\":\"in\",\"value\":[\"usd\",\"eur\",\"gbp\"]}],"
                       "\"on_deny\":\"amount or currency not allowed\"},"
                       "{\"name\":\"path\",\"conditions\":[{\"path\":\"args.path\",\"op\":\"regex\",\"value\":\"^/data/[a-z0-9_/]+\\\\.csv$\"}]},"
                       "{\"name\":\"mode\",\"conditions\":[{\"path\":\"args.opts.mode\",\"op\":\"neq\",\"value\":\"admin\"}]}"
                       "]}");
        break;
    case 2: /* Intercept fixed window with a condition on it, plus argument checks */
        tg_buf_appendf(b,
                       "{\"rules\":["
                       "{\"name\":\"tags\",\"conditions\":[{\"path\":\"args.tags\",\"op\":\"contains\",\"value\":\"ok\"},"
                       "{\"path\":\"args.opts.dry\",\"op\":\"exists\",\"value\":true}]},"
                       "{\"name\":\"calls\",\"conditions\":[{\"path\":\"state.%s.calls\",\"op\":\"lte\",\"value\":%ld}],"
                       "\"state\":{\"counter\":\"calls\",\"window\":\"minute\"}}"
                       "]}",
                       n, lim);
        break;
    case 3: /* both shapes on one tool: rate_limit shorthand and a hosted bucket, per session */
        tg_buf_appendf(b,
                       "{\"limits\":[{\"counter\":\"%s_burst\",\"window\":10,\"max\":%ld,\"scope\":\"session\"}],"
                       "\"rules\":[{\"name\":\"hourly\",\"rate_limit\":\"%ld/hour\"},"
                       "{\"name\":\"size\",\"conditions\":[{\"path\":\"args.amount\",\"op\":\"gte\",\"value\":1}]}]}",
                       n, lim, lim);
        break;
    case 4: /* plain allow, and a few denied tools */
        if (i % 20 == 4)
            tg_buf_appendf(b, "{\"action\":\"deny\",\"reason\":\"not today\"}");
        else
            tg_buf_appendf(b, "{\"rules\":[]}");
        break;
    }
}

static struct tg_policy *build_policy(void)
{
    for (int i = 0; i < NTOOLS; i++)
        snprintf(tool_names[i], sizeof(tool_names[i]), "tool_%03d", i);
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"version\":\"1\",\"default\":\"deny\",\"hide\":[\"debug_dump\"],\"tools\":{");
    for (int i = 0; i < NTOOLS; i++)
        append_tool(&b, i);
    if (hist)
        tg_buf_appends(&b, ",\"*\":{\"brake\":{\"repeats\":1000,\"within\":\"60s\"},\"rules\":["
                           "{\"name\":\"flow\",\"when\":{\"tags\":[\"t1\"]},\"conditions\":[{\"history\":"
                           "{\"tags\":[\"t0\"],\"within\":\"10m\"},\"op\":\"gte\",\"value\":0}]},"
                           "{\"name\":\"no force\",");
    else
        tg_buf_appends(&b, ",\"*\":{\"rules\":[{\"name\":\"no force\",");
    tg_buf_appendf(&b, "\"conditions\":[{\"path\":\"args.force\",\"op\":\"exists\",\"value\":false}]},"
                       "{\"name\":\"global\",\"conditions\":[{\"path\":\"state._global.calls\",\"op\":\"lt\",\"value\":%ld}],"
                       "\"state\":{\"counter\":\"calls\",\"window\":\"hour\"}}]}}}",
                   glim);
    struct tg_json_doc doc;
    const char *why = NULL;
    size_t off = 0;
    if (tg_json_parse(b.base, b.len, 64, 1, &doc, &why, &off) != 0) {
        fprintf(stderr, "bench policy: %s at %zu\n", why, off);
        exit(2);
    }
    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_policy *p = NULL;
    if (tg_policy_compile(doc.root, "bench", &p, &err, NULL) != 0) {
        fprintf(stderr, "bench policy:\n%.*s", (int)err.len, err.base);
        exit(2);
    }
    cJSON_Delete(doc.root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&b);
    return p;
}

/* ---- the calls ------------------------------------------------------------------------- */

/* Arguments: mostly ones that pass, some that fail a condition. */
static const char *const args_text[] = {
    "{\"amount\":1200,\"currency\":\"usd\",\"path\":\"/data/sales/2024_q1.csv\",\"opts\":{\"mode\":\"read\",\"dry\":true},\"tags\":[\"ok\",\"x\"]}",
    "{\"amount\":49999,\"currency\":\"eur\",\"path\":\"/data/a/b/c.csv\",\"opts\":{\"mode\":\"write\",\"dry\":false},\"tags\":[\"a\",\"b\",\"ok\"]}",
    "{\"amount\":7,\"currency\":\"gbp\",\"path\":\"/data/x.csv\",\"opts\":{\"dry\":1},\"tags\":[\"ok\"],\"note\":\"a longer free text argument that nobody looks at\"}",
    "{\"amount\":300,\"currency\":\"usd\",\"path\":\"/data/reports/monthly/2024/03/summary_final_v2.csv\",\"opts\":{\"mode\":\"read\",\"dry\":true},\"tags\":[\"ok\"]}",
    "{\"amount\":60000,\"currency\":\"usd\",\"path\":\"/data/x.csv\",\"opts\":{\"dry\":true},\"tags\":[\"ok\"]}",      /* amount */
    "{\"amount\":10,\"currency\":\"usd\",\"path\":\"/etc/passwd\",\"opts\":{\"dry\":true},\"tags\":[\"ok\"]}",         /* regex */
    "{\"amount\":10,\"currency\":\"usd\",\"path\":\"/data/x.csv\",\"opts\":{\"mode\":\"admin\",\"dry\":true},\"tags\":[\"ok\"]}", /* neq */
    "{\"amount\":10,\"currency\":\"usd\",\"path\":\"/data/x.csv\",\"opts\":{\"dry\":true},\"tags\":[\"ok\"],\"force\":true}",    /* wildcard */
};
#define NARGS (sizeof(args_text) / sizeof(args_text[0]))

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint32_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* The timed loop, on its own so that callgrind can count it alone:
 *   valgrind --tool=callgrind --toggle-collect=run_calls tg-bench-policy -n 20000 -r 1 -b 1000
 * gives the instructions of 20000 decisions. */
static __attribute__((noinline)) void run_calls(const struct tg_policy *p, struct tg_counters *c,
                                                const struct tg_caller *who, const struct call *calls, long ncalls,
                                                cJSON *const *args, long v[4])
{
    /* A few calls for unlisted and hidden tools. */
    static const char *const extra[2] = {"not_in_policy", "debug_dump"};
    struct tg_decision d;
    for (long i = 0; i < ncalls; i++) {
        const struct call *k = &calls[i];
        /* the clock moves 1 ms every 64 calls: windows and buckets roll over during a run */
        int64_t now = T0 + (i >> 6);
        const char *tool = (i & 1023) == 1023 ? extra[(i >> 10) & 1] : tool_names[k->tool];
        tg_policy_decide_call(p, c, &who[k->who], tool, args[k->args], now, &d);
        v[d.verdict]++;
    }
}

/* The same calls, untimed, folding everything each decision says (verdict, rule, message,
 * counter, retry, counters_json, the reservations) into one FNV-1a digest: two builds that print
 * the same digest decided the same, byte for byte. With keys 0 (--digest-no-keys) the
 * reservations' key hashes are left out: two builds that derive counter keys differently
 * (policy/counters.h, tg_keyhash) compare on everything else. */
static void fold(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        *h = (*h ^ b[i]) * 0x100000001b3ULL;
}

static uint64_t digest_calls(const struct tg_policy *p, const struct tg_caller *who, const struct call *calls,
                             long ncalls, cJSON *const *args, int keys)
{
    static const char *const extra[2] = {"not_in_policy", "debug_dump"};
    struct tg_counters *c = tg_counters_new();
    struct tg_decision d;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (long i = 0; i < ncalls; i++) {
        const struct call *k = &calls[i];
        int64_t now = T0 + (i >> 6);
        const char *tool = (i & 1023) == 1023 ? extra[(i >> 10) & 1] : tool_names[k->tool];
        tg_policy_decide_call(p, c, &who[k->who], tool, args[k->args], now, &d);
        int v = (int)d.verdict;
        fold(&h, &v, sizeof(v));
        fold(&h, d.rule, strlen(d.rule) + 1);
        fold(&h, d.message, strlen(d.message) + 1);
        fold(&h, d.counter, strlen(d.counter) + 1);
        fold(&h, d.counters_json, strlen(d.counters_json) + 1);
        fold(&h, &d.retry_after_ms, sizeof(d.retry_after_ms));
        fold(&h, &d.approval_timeout_ms, sizeof(d.approval_timeout_ms));
        fold(&h, &d.nres, sizeof(d.nres));
        for (int j = 0; j < d.nres; j++) {
            const struct tg_reservation *r = &d.res[j];
            if (keys) {
                fold(&h, &r->h1, sizeof(r->h1));
                fold(&h, &r->h2, sizeof(r->h2));
            }
            fold(&h, &r->kind, sizeof(r->kind));
            fold(&h, &r->amount, sizeof(r->amount));
            if (r->kind == 2)
                fold(&h, &r->window_start, sizeof(r->window_start));
            else
                fold(&h, &r->capacity, sizeof(r->capacity));
        }
    }
    tg_counters_free(c);
    return h;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

int main(int argc, char **argv)
{
    long ncalls = 2000000, runs = 5, nbuckets = 1000000;
    int quick = 0, digest = 0, tight = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
            ncalls = 5000;
            runs = 2;
            nbuckets = 20000;
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            ncalls = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--digest") == 0) {
            digest = 1;
        } else if (strcmp(argv[i], "--digest-no-keys") == 0) {
            digest = 2;
        } else if (strcmp(argv[i], "--tight") == 0) {
            lim = 3;
            glim = 100000;
            tight = 1;
        } else if (strcmp(argv[i], "--history") == 0) {
            hist = 1;
        } else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) {
            nbuckets = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
            runs = strtol(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: %s [--quick] [--digest | --digest-no-keys] [--tight] [--history] [-n CALLS] [-r RUNS] [-b BUCKETS]\n", argv[0]);
            return 2;
        }
    }
    if (ncalls < 1 || runs < 1 || nbuckets < 1)
        return 2;

    struct tg_policy *p = build_policy();

    /* Everything the loop touches is prepared here. */
    cJSON *args[NARGS];
    for (size_t i = 0; i < NARGS; i++) {
        struct tg_json_doc doc;
        const char *why = NULL;
        size_t off = 0;
        if (tg_json_parse(args_text[i], strlen(args_text[i]), 64, 1, &doc, &why, &off) != 0) {
            fprintf(stderr, "args %zu: %s\n", i, why);
            return 2;
        }
        args[i] = doc.root;
    }
    static char grants[NGRANTS][24], sessions[NSESSIONS][24];
    for (int i = 0; i < NGRANTS; i++)
        snprintf(grants[i], sizeof(grants[i]), "grant-%04d", i);
    for (int i = 0; i < NSESSIONS; i++)
        snprintf(sessions[i], sizeof(sessions[i]), "%08x-%04x", (unsigned)next_rand(), (unsigned)i);
    struct tg_caller *who = malloc(NSESSIONS * sizeof(*who));
    for (int i = 0; i < NSESSIONS; i++)
        who[i] = (struct tg_caller){grants[i % NGRANTS], sessions[i], "cowork", NULL, NULL};
    struct call *calls = malloc((size_t)ncalls * sizeof(*calls));
    for (long i = 0; i < ncalls; i++) {
        uint32_t r = next_rand();
        calls[i].tool = (uint16_t)(r % NTOOLS);
        /* 7 in 8 calls carry passing arguments */
        uint32_t a = (r >> 8) % 32;
        calls[i].args = (uint16_t)(a < 28 ? a % 4 : 4 + a % 4);
        calls[i].who = (r >> 16) % NSESSIONS;
    }
    double best = 1e30, sum = 0;
    long verdicts[4] = {0};
    for (long run = 0; run < runs; run++) {
        struct tg_counters *c = tg_counters_new();
        long v[4] = {0};
        double t = now_s();
        run_calls(p, c, who, calls, ncalls, args, v);
        double dt = now_s() - t;
        double ns = dt * 1e9 / (double)ncalls;
        printf("run %ld: %.1f ns/decision (%.2f M decisions/s), %zu counters\n", run + 1, ns, (double)ncalls / dt / 1e6,
               tg_counters_count(c));
        if (ns < best)
            best = ns;
        sum += ns;
        memcpy(verdicts, v, sizeof(v));
        tg_counters_free(c);
    }
    printf("decisions: %ld calls x %ld runs over %d tools, %d grants, %d sessions\n", ncalls, runs, NTOOLS, NGRANTS,
           NSESSIONS);
    printf("verdicts (last run): ALLOW %ld, DENY %ld, LIMITED %ld, APPROVE %ld\n", verdicts[0], verdicts[1],
           verdicts[2], verdicts[3]);
    printf("best: %.1f ns/decision, mean %.1f ns (target <= 500 ns)\n", best, sum / (double)runs);
    if (digest || quick)
        printf("digest of every decision: %016llx\n", (unsigned long long)digest_calls(p, who, calls, ncalls, args, digest != 2));

    /* A million live buckets: the seed policy (one hosted bucket per grant), a million grants. */
    static const char seed[] = "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"execute_code\":{\"limits\":"
                               "[{\"counter\":\"execute_code_rate\",\"window\":\"minute\",\"max\":10,\"scope\":\"grant\"}]}}}";
    struct tg_json_doc sdoc;
    const char *swhy = NULL;
    size_t soff = 0;
    struct tg_policy *sp = NULL;
    struct tg_buf serr;
    tg_buf_init(&serr);
    if (tg_json_parse(seed, strlen(seed), 64, 1, &sdoc, &swhy, &soff) != 0 ||
        tg_policy_compile(sdoc.root, "seed", &sp, &serr, NULL) != 0)
        return 2;
    cJSON_Delete(sdoc.root);
    tg_buf_dispose(&serr);
    struct tg_counters *c = tg_counters_new();
    long rss0 = rss_kib();
    struct tg_decision d;
    long taken = 0;
    char g[48];
    struct tg_caller one = {g, "s", "cowork", NULL, NULL};
    double t = now_s();
    for (long i = 0; i < nbuckets; i++) {
        snprintf(g, sizeof(g), "bucket-grant-%07ld", i);
        tg_policy_decide_call(sp, c, &one, "execute_code", NULL, T0, &d);
        taken += d.verdict == TG_VERDICT_ALLOW;
    }
    double fill = now_s() - t;
    long rss1 = rss_kib();
    size_t mem = tg_counters_memory(c);
    printf("%ld live buckets: tg_counters_memory %.1f MiB (%.1f B each), RSS +%.1f MiB; filled at %.0f ns/call\n",
           (long)tg_counters_count(c), (double)mem / 1048576.0, (double)mem / (double)nbuckets,
           (double)(rss1 - rss0) / 1024.0, fill * 1e9 / (double)nbuckets);

    /* The same bucket per user inside one grant (scope "subject"): what an identity provider's
     * users cost against a grant of their own each. */
    static const char seed_u[] = "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"execute_code\":{\"limits\":"
                                 "[{\"counter\":\"execute_code_rate\",\"window\":\"minute\",\"max\":10,\"scope\":\"subject\"}]}}}";
    struct tg_policy *up = NULL;
    tg_buf_init(&serr);
    if (tg_json_parse(seed_u, strlen(seed_u), 64, 1, &sdoc, &swhy, &soff) != 0 ||
        tg_policy_compile(sdoc.root, "seed-subject", &up, &serr, NULL) != 0)
        return 2;
    cJSON_Delete(sdoc.root);
    tg_buf_dispose(&serr);
    struct tg_counters *cu = tg_counters_new();
    char sub[48];
    struct tg_caller user = {"staff", "s", "cowork", sub, NULL};
    long utaken = 0;
    t = now_s();
    for (long i = 0; i < nbuckets; i++) {
        snprintf(sub, sizeof(sub), "user-%07ld@idp.example", i);
        tg_policy_decide_call(up, cu, &user, "execute_code", NULL, T0, &d);
        utaken += d.verdict == TG_VERDICT_ALLOW;
    }
    fill = now_s() - t;
    printf("%ld subject buckets in one grant: filled at %.0f ns/call\n", (long)tg_counters_count(cu),
           fill * 1e9 / (double)nbuckets);
    tg_counters_free(cu);
    tg_policy_unref(up);

    int ok = 1;
    if (utaken != nbuckets) {
        fprintf(stderr, "FAIL: %ld of %ld subject bucket calls allowed\n", utaken, nbuckets);
        ok = 0;
    }
    if (taken != nbuckets || (long)tg_counters_count(c) != nbuckets) {
        fprintf(stderr, "FAIL: %ld of %ld bucket calls allowed, %zu counters\n", taken, nbuckets, tg_counters_count(c));
        ok = 0;
    }
    /* The mix must exercise every path: allowed, denied by an argument rule, by the default and
     * hidden list, and by the deny action. */
    if (!tight && (verdicts[0] < ncalls / 2 || verdicts[1] < ncalls / 20)) {
        fprintf(stderr, "FAIL: unexpected verdict mix\n");
        ok = 0;
    }
    if (nbuckets >= 1000000 && mem > (size_t)128 * 1024 * 1024) {
        fprintf(stderr, "FAIL: %zu bytes for %ld buckets, budget 128 MiB\n", mem, nbuckets);
        ok = 0;
    }
    if (quick)
        printf("quick run: %s\n", ok ? "ok" : "FAILED");

    tg_counters_free(c);
    tg_policy_unref(sp);
    for (size_t i = 0; i < NARGS; i++)
        cJSON_Delete(args[i]);
    free(calls);
    free(who);
    tg_policy_unref(p);
    return ok ? 0 : 1;
}
