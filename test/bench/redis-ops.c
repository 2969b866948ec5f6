/* The limit of one Redis primary for tollgate's shared counters: counter ops per second through
 * cluster/redis/redis.c against a local redis-server started here (loopback, free port), with batches
 * of 1 and 3 ops (a decision with one or three counters: one round trip each) and N requests in
 * flight at once; then "h+1": a decision that reads a history of 64 calls (or argv[2]), takes one
 * counter and adds its call, in one round trip. Prints ops/s and decisions/s, and
 * with one in flight the mean time of a decision's round trip. Not run by ctest.
 *   build-asan/test/bench/tg-bench-redis-ops [seconds per case, default 2] [history calls, default 64]
 * (use a build without sanitizers for figures: cmake -B build-rel -DCMAKE_BUILD_TYPE=Release) */
#include <fcntl.h>

#include "test/unit/cluster/redis_helpers.h"

#include "cluster/redis/redis.h"

static uv_loop_t *loop;
static int up;
static size_t hist_calls = 64;

static void on_state(void *ud, int u, const char *why)
{
    (void)ud, (void)why;
    up = u;
}

struct worker {
    struct tg_redis *r;
    struct tg_counter_op ops[3];
    struct tg_counter_plan plan; /* holds a history's answer */
    struct tg_hist_entry entry;
    size_t batch;
    int hist;
    uint64_t *done, *errors;
    int *running;
    int idx;
};

static void issue(struct worker *w);

static void on_ops(void *ud, int status)
{
    struct worker *w = ud;
    if (status == TG_REDIS_OK)
        (*w->done)++;
    else
        (*w->errors)++;
    if (*w->running)
        issue(w);
}

static void issue(struct worker *w)
{
    for (size_t i = 0; i < w->batch; i++) {
        struct tg_counter_op *op = &w->ops[i];
        memset(op, 0, sizeof(*op));
        op->kind = TG_COP_BUCKET_TAKE;
        op->h1 = (uint64_t)w->idx * 8 + i + 1;
        op->h2 = 42;
        op->capacity = 1e9;
        op->window_ms = 60000;
        op->amount = 1;
        op->now_ms = (int64_t)uv_now(loop);
    }
    struct tg_redis_hist h = {&w->plan, hist_calls, {0}};
    if (w->hist) {
        tg_plan_dispose(&w->plan); /* the last answer's entries */
        tg_plan_init(&w->plan);
        memset(&w->ops[0], 0, sizeof(w->ops[0]));
        w->ops[0].kind = TG_COP_HIST_GET;
        w->ops[0].h1 = (uint64_t)w->idx + 1;
        w->ops[0].h2 = 43;
        /* the call it records, after the read in the same write (as cluster/cluster.c sends it) */
        w->entry.at_ms = (int64_t)uv_now(loop);
        w->ops[2] = (struct tg_counter_op){.kind = TG_COP_HIST_ADD, .h1 = w->ops[0].h1, .h2 = 43, .entry = &w->entry};
    }
    tg_redis_counter_ops(w->r, "bench:", w->ops, w->batch, &h, on_ops, w);
}

static void on_stop(uv_timer_t *t) { *(int *)t->data = 0; }

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 2;
    if (argc > 2)
        hist_calls = (size_t)atol(argv[2]);
    signal(SIGPIPE, SIG_IGN);
    loop = uv_default_loop();
    struct th_server s = {0};
    th_start(&s);
    char addr[64], why[128];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", s.port);
    struct tg_redis_opts o = {.address = addr, .timeout_ms = 2000, .backoff_ms = 50, .backoff_max_ms = 500};
    struct tg_redis *r = tg_redis_new(loop, &o, on_state, NULL, why, sizeof(why));
    th_run_until(loop, &up, 5000);
    if (!up) {
        fprintf(stderr, "not connected\n");
        th_kill(&s);
        return 1;
    }
    static const int conc[] = {1, 16, 64, 256};
    printf("%-6s %-6s %12s %14s %10s\n", "batch", "inflt", "ops/s", "decisions/s", "errors");
    for (size_t b = 1; b <= 5; b += 2)
        for (size_t c = 0; c < sizeof(conc) / sizeof(conc[0]); c++) {
            int hist = b == 5;
            int n = conc[c], running = 1;
            uint64_t done = 0, errors = 0;
            struct worker *ws = calloc((size_t)n, sizeof(*ws));
            uv_timer_t stop;
            uv_timer_init(loop, &stop);
            stop.data = &running;
            uv_update_time(loop);
            uint64_t t0 = uv_hrtime();
            uv_timer_start(&stop, on_stop, (uint64_t)(secs * 1000), 0);
            for (int i = 0; i < n; i++) {
                ws[i] = (struct worker){.r = r, .batch = hist ? 3 : b, .hist = hist, .done = &done, .errors = &errors,
                                        .running = &running, .idx = i};
                tg_plan_init(&ws[i].plan);
                snprintf(ws[i].entry.upstream, sizeof(ws[i].entry.upstream), "github");
                snprintf(ws[i].entry.name, sizeof(ws[i].entry.name), "create_issue");
                ws[i].entry.ntags = 1;
                ws[i].entry.tags[0] = 77;
                ws[i].entry.vals[0] = 99;
                issue(&ws[i]);
            }
            while (running)
                uv_run(loop, UV_RUN_ONCE);
            double dt = (double)(uv_hrtime() - t0) / 1e9;
            /* let the requests in flight finish before the next case */
            while (tg_redis_stats(r)->pending > 0)
                uv_run(loop, UV_RUN_ONCE);
            uv_close((uv_handle_t *)&stop, NULL);
            uv_run(loop, UV_RUN_NOWAIT);
            char name[8];
            snprintf(name, sizeof(name), hist ? "h+1" : "%zu", b);
            printf("%-6s %-6d %12.0f %14.0f %10llu", name, n, (double)done * (double)(hist ? 3 : b) / dt,
                   (double)done / dt, (unsigned long long)errors);
            if (n == 1 && done > 0)
                printf("   %.1f us per decision", dt * 1e6 / (double)done);
            printf("\n");
            for (int i = 0; i < n; i++)
                tg_plan_dispose(&ws[i].plan);
            free(ws);
        }
    const struct tg_redis_stats *st = tg_redis_stats(r);
    printf("requests %llu commands %llu round_trips %llu\n", (unsigned long long)st->requests,
           (unsigned long long)st->commands, (unsigned long long)st->round_trips);
    tg_redis_free(r);
    for (int i = 0; i < 20; i++)
        uv_run(loop, UV_RUN_NOWAIT);
    th_kill(&s);
    return 0;
}
