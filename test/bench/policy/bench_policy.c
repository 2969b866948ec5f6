/* tg-bench-policy: what one policy decision costs, and what a million live counters weigh.
 *
 *   tg-bench-policy [--quick] [--digest | --digest-no-keys] [--tight] [--history] [--bind] [--pins] [--all]
 *                   [-n CALLS] [-r RUNS] [-b BUCKETS]
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
 * --bind adds arguments the model cannot choose: "*" sets tenant_id from the grant's attribute
 * (${grant.tenant}), and the payment tools (a fifth) also set org from the caller's JWT claim
 * (${claims.org}) and channel to a static "api", and forbid "internal". --pins pins every tool of
 * the upstream and lists them once before the timed loop, so that each call's definition is
 * looked up against its pin. With either, the timed loop (run_gate_calls) does per call what the
 * gateway's gate does before it decides (core/gate/bind.c, core/gate/pins.c): the binding, with
 * the caller's token's claims read from the token for a tool whose binding names one, then the
 * pin check, then the decision. The prepared argument trees are shared between calls, so a call
 * that bound something has its arguments put back as the model sent them (unbind_args) after
 * the decision: the gateway frees the bound nodes with the request instead. --all is --history
 * --bind --pins: all four features. With any of these flags the same calls also run through
 * the policy without them (run_plain, the runs alternated) and the overhead is printed.
 *
 * --quick (the bench-smoke ctests, with and without --all) runs a few thousand calls and checks
 * the verdict mix (and with --bind or --pins one binding value by value, and that no call was
 * refused by a binding or, of a listed tool, by its pin), so that the benchmark cannot rot;
 * speed is only reported, never asserted. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "policy/bind.h"
#include "policy/pins.h"
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
/* The features of the policy being built (build_policy): --history, --bind. */
static int hist, bindf;
#define UPSTREAM "cowork"

/* ---- the policy ---------------------------------------------------------------------- */

static void append_entry(struct tg_buf *b, int i);

static void append_tool(struct tg_buf *out, int i)
{
    tg_buf_appendf(out, "%s\"%s\":", i ? "," : "", tool_names[i]);
    struct tg_buf e;
    tg_buf_init(&e);
    append_entry(&e, i);
    /* the entry's own tags and binding, before its other fields */
    tg_buf_appends(out, "{");
    if (hist)
        tg_buf_appendf(out, "\"tags\":[\"t%d\"],", i % 4);
    if (bindf && i % 5 == 1)
        tg_buf_appends(out, "\"set\":{\"org\":\"${claims.org}\",\"channel\":\"api\"},\"forbid\":[\"internal\"],");
    tg_buf_append(out, e.base + 1, e.len - 1);
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
    tg_buf_appends(&b, ",\"*\":{");
    if (bindf)
        tg_buf_appends(&b, "\"set\":{\"tenant_id\":\"${grant.tenant}\"},");
    if (hist)
        tg_buf_appends(&b, "\"brake\":{\"repeats\":1000,\"within\":\"60s\"},\"rules\":["
                           "{\"name\":\"flow\",\"when\":{\"tags\":[\"t1\"]},\"conditions\":[{\"history\":"
                           "{\"tags\":[\"t0\"],\"within\":\"10m\"},\"op\":\"gte\",\"value\":0}]},"
                           "{\"name\":\"no force\",");
    else
        tg_buf_appends(&b, "\"rules\":[{\"name\":\"no force\",");
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

/* A few calls for unlisted and hidden tools. */
static const char *const extra[2] = {"not_in_policy", "debug_dump"};

/* The timed loop of decisions alone, as the gateway pays them for a policy that binds nothing and
 * an upstream without pins. */
static inline __attribute__((always_inline)) void decide_calls(const struct tg_policy *p, struct tg_counters *c,
                                                               const struct tg_caller *who, const struct call *calls,
                                                               long ncalls, cJSON *const *args, long v[4])
{
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

/* The timed loops, each on its own so that callgrind can count it alone:
 *   valgrind --tool=callgrind --toggle-collect=run_calls tg-bench-policy -n 20000 -r 1 -b 1000
 * gives the instructions of 20000 decisions; --toggle-collect=run_gate_calls those of --bind,
 * --pins or --all, and --toggle-collect=run_plain those of the policy without the features that
 * these runs measure beside them. run_calls and run_plain are the same code. */
static __attribute__((noinline)) void run_calls(const struct tg_policy *p, struct tg_counters *c,
                                                const struct tg_caller *who, const struct call *calls, long ncalls,
                                                cJSON *const *args, long v[4])
{
    decide_calls(p, c, who, calls, ncalls, args, v);
}

/* noipa: the compiler would fold the two identical functions into one name. */
static __attribute__((noipa)) void run_plain(const struct tg_policy *p, struct tg_counters *c,
                                             const struct tg_caller *who, const struct call *calls, long ncalls,
                                             cJSON *const *args, long v[4])
{
    decide_calls(p, c, who, calls, ncalls, args, v);
}

/* What the gate needs beside the policy: the grants' attributes and tokens (--bind), the pins of
 * the upstream and what was learnt of its tools (--pins); and what it did in the last run. */
struct gate {
    const char *(*attrs)[4];        /* per grant: "region", "tenant" and their values */
    char (*tokens)[512];            /* per grant: a JWT whose payload carries "org" */
    size_t *token_len;
    struct tg_pins *pins;           /* NULL: an upstream without pins */
    struct tg_pins_seen *seen;
    cJSON *const *params;           /* per argument set: {"arguments": args[i]}, as a tools/call has it */
    cJSON *const *pristine;         /* per argument set: a copy of the arguments as the model sent them */
    int keep[NARGS];                /* per argument set: its leading members that no binding touches */
    long bound, bind_refused, pin_refused;
};

/* The arguments the policy binds or forbids (build_policy with --bind). */
static const char *const bound_names[] = {"tenant_id", "org", "channel", "internal"};

/* How many leading members of args no binding touches: a binding replaces or removes only the
 * members it names, and adds its own after the last. */
static int untouched(const cJSON *args)
{
    int n = 0;
    for (const cJSON *e = args->child; e != NULL; e = e->next, n++)
        for (size_t i = 0; i < sizeof(bound_names) / sizeof(bound_names[0]); i++)
            if (strcmp(e->string, bound_names[i]) == 0)
                return n;
    return n;
}

/* Arguments a binding changed put back as the model sent them (pristine): the members after the
 * keep untouched ones are freed (what the gateway pays when it frees the request: the nodes the
 * binding made) and those the model sent there copied back (which only the argument set that
 * sends a bound and a forbidden argument has: what the gateway's parse would have made). */
static __attribute__((noinline)) void unbind_args(cJSON *args, const cJSON *pristine, int keep)
{
    cJSON *last = NULL, *tail = args->child;
    for (int i = 0; i < keep; i++) {
        last = tail;
        tail = tail->next;
    }
    if (last == NULL) {
        args->child = NULL;
    } else {
        last->next = NULL;
        args->child->prev = last;
    }
    cJSON_Delete(tail);
    const cJSON *e = pristine->child;
    for (int i = 0; i < keep; i++)
        e = e->next;
    for (; e != NULL; e = e->next)
        cJSON_AddItemToArray(args, cJSON_Duplicate(e, 1)); /* the copy keeps its name */
}

/* Per call what the gateway does for a tools/call before and with its decision (core/gate/bind.c,
 * then core/gate/pins.c, then the decision; core/gate/dispatch.c): the arguments bound to the
 * caller, the caller's claims read from its token when the binding names one; a binding that
 * refuses ends the call; then the pin check, which may refuse it (the gate would also log that
 * refusal: not done here); then the decision on the bound arguments. */
static __attribute__((noinline)) void run_gate_calls(const struct tg_policy *p, struct tg_counters *c,
                                                     const struct tg_caller *who, const struct call *calls,
                                                     long ncalls, struct gate *g, long v[4])
{
    struct tg_decision d;
    long bound = 0, bind_refused = 0, pin_refused = 0;
    for (long i = 0; i < ncalls; i++) {
        const struct call *k = &calls[i];
        int64_t now = T0 + (i >> 6);
        const char *tool = (i & 1023) == 1023 ? extra[(i >> 10) & 1] : tool_names[k->tool];
        const struct tg_caller *w = &who[k->who];
        cJSON *params = g->params[k->args];
        int changed = 0;
        if (tg_policy_binds_any(p) && tg_policy_binds(p, tool) && tg_policy_tool_visible(p, tool)) {
            unsigned gi = k->who % NGRANTS;
            struct tg_bind_ctx cx = {w->grant, w->grant, g->attrs[gi], 2, NULL};
            if (tg_policy_binds_claims(p, tool)) /* as the gate: a token read lately is not read again */
                cx.claims = tg_bind_token_claims_memo(g->tokens[gi], g->token_len[gi]);
            int rc = tg_policy_bind_args(p, tool, &cx, params, &d);
            if (rc < 0) {
                v[d.verdict]++;
                bind_refused++;
                continue;
            }
            changed = rc > 0;
            bound += changed;
        }
        char why[sizeof(d.message)];
        if (g->pins != NULL && !tg_pins_admit_call(g->seen, g->pins, UPSTREAM, p, tool, why, sizeof(why))) {
            memset(&d, 0, sizeof(d));
            d.verdict = TG_VERDICT_DENY;
            snprintf(d.rule, sizeof(d.rule), "pin");
            snprintf(d.message, sizeof(d.message), "%s", why);
            pin_refused++;
        } else {
            tg_policy_decide_call(p, c, w, tool, tg_json_get(params, "arguments"), now, &d);
        }
        v[d.verdict]++;
        if (changed)
            unbind_args(tg_json_get(params, "arguments"), g->pristine[k->args], g->keep[k->args]);
    }
    g->bound = bound;
    g->bind_refused = bind_refused;
    g->pin_refused = pin_refused;
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

/* ---- the gate's side ----------------------------------------------------------------------- */

/* --bind: each grant's attributes (conf grants[].attributes) and a JWT of its caller, whose
 * payload carries the "org" claim the policy binds (signature bytes only: the gateway verified it
 * before the gate reads its payload). */
static void setup_callers(struct gate *g, char (*grants)[24])
{
    static char values[NGRANTS][2][24];
    g->attrs = calloc(NGRANTS, sizeof(*g->attrs));
    g->tokens = calloc(NGRANTS, sizeof(*g->tokens));
    g->token_len = calloc(NGRANTS, sizeof(*g->token_len));
    static const char head[] = "{\"alg\":\"ES256\",\"typ\":\"JWT\",\"kid\":\"idp-2024-03\"}";
    uint8_t sig[64];
    for (size_t i = 0; i < sizeof(sig); i++)
        sig[i] = (uint8_t)(i * 37 + 11);
    for (int i = 0; i < NGRANTS; i++) {
        snprintf(values[i][0], sizeof(values[i][0]), "eu-west-%d", i % 3);
        snprintf(values[i][1], sizeof(values[i][1]), "acme-%04d", i);
        g->attrs[i][0] = "region";
        g->attrs[i][1] = values[i][0];
        g->attrs[i][2] = "tenant";
        g->attrs[i][3] = values[i][1];
        char body[256];
        int n = snprintf(body, sizeof(body),
                         "{\"iss\":\"https://idp.example\",\"sub\":\"user-%04d@idp.example\",\"aud\":\"%s\","
                         "\"iat\":1710066000,\"exp\":1710069600,\"scope\":\"mcp:call\",\"org\":\"org-%02d\"}",
                         i, grants[i], i % 50);
        if ((sizeof(head) + (size_t)n + sizeof(sig)) * 4 / 3 + 8 > sizeof(g->tokens[i]))
            exit(2); /* the token would not fit */
        char *t = g->tokens[i];
        size_t len = tg_b64url_encode((const uint8_t *)head, sizeof(head) - 1, t);
        t[len++] = '.';
        len += tg_b64url_encode((const uint8_t *)body, (size_t)n, t + len);
        t[len++] = '.';
        len += tg_b64url_encode(sig, sizeof(sig), t + len);
        t[len] = '\0';
        g->token_len[i] = len;
    }
}

/* --pins: a pin file of the upstream's 100 tools (written in the temporary directory, loaded
 * as the conf loads upstreams[].pins, removed), and each tool listed once with its pinned
 * definition, as a tools/list answer teaches the gateway. */
static void setup_pins(struct gate *g, const struct tg_policy *p)
{
    struct tg_buf t;
    tg_buf_init(&t);
    tg_buf_appends(&t, "[");
    for (int i = 0; i < NTOOLS; i++)
        tg_buf_appendf(&t,
                       "%s{\"name\":\"%s\",\"description\":\"Tool %d of the benchmark's upstream: reads or writes "
                       "the records of one tenant.\",\"inputSchema\":{\"type\":\"object\",\"properties\":{"
                       "\"amount\":{\"type\":\"number\"},\"currency\":{\"type\":\"string\",\"enum\":[\"usd\",\"eur\",\"gbp\"]},"
                       "\"path\":{\"type\":\"string\"},\"opts\":{\"type\":\"object\"},\"tags\":{\"type\":\"array\","
                       "\"items\":{\"type\":\"string\"}}},\"required\":[\"amount\"]},"
                       "\"annotations\":{\"readOnlyHint\":%s}}",
                       i ? "," : "", tool_names[i], i, i % 2 ? "true" : "false");
    tg_buf_appends(&t, "]");
    struct tg_json_doc doc;
    const char *why = NULL;
    size_t off = 0;
    if (tg_json_parse(t.base, t.len, 64, 1, &doc, &why, &off) != 0) {
        fprintf(stderr, "bench tools: %s at %zu\n", why, off);
        exit(2);
    }
    tg_buf_dispose(&t);
    const char *dir = getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp";
    char path[512];
    snprintf(path, sizeof(path), "%s/tg-bench-policy-%ld.pins.json", dir, (long)getpid());
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    int rc = tg_pins_write_file(path, UPSTREAM, doc.root, &err);
    if (rc == 0)
        rc = tg_pins_load(path, UPSTREAM, &g->pins, &err, &warn);
    unlink(path);
    if (rc != 0) {
        fprintf(stderr, "bench pins: %.*s\n", (int)err.len, err.base);
        exit(2);
    }
    g->seen = tg_pins_seen_new();
    for (const cJSON *e = doc.root->child; e != NULL; e = e->next)
        if (!tg_pins_admit_listed(g->seen, g->pins, UPSTREAM, p, e)) {
            fprintf(stderr, "bench pins: a listed tool was not admitted\n");
            exit(2);
        }
    cJSON_Delete(doc.root);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
}

/* --bind: one call bound and put back, checked: the bound values are the caller's, the forbidden
 * argument is gone, and the arguments are as the model sent them afterwards. 0, or -1. */
static int check_binding(const struct tg_policy *p, struct gate *g, const char *grant, int gi)
{
    int a = 2; /* the argument set that sends its own tenant_id and a forbidden "internal" */
    struct tg_bind_ctx cx = {grant, grant, g->attrs[gi], 2, NULL};
    cJSON *claims = tg_bind_token_claims(g->tokens[gi], g->token_len[gi]);
    cx.claims = claims;
    struct tg_decision d;
    int rc = tg_policy_bind_args(p, tool_names[1], &cx, g->params[a], &d);
    cJSON_Delete(claims);
    cJSON *args = tg_json_get(g->params[a], "arguments");
    const cJSON *tenant = tg_json_get(args, "tenant_id"), *org = tg_json_get(args, "org");
    const cJSON *channel = tg_json_get(args, "channel");
    char want_org[16];
    snprintf(want_org, sizeof(want_org), "org-%02d", gi % 50);
    int ok = rc == 1 && cJSON_IsString(tenant) && strcmp(tenant->valuestring, g->attrs[gi][3]) == 0 &&
             cJSON_IsString(org) && strcmp(org->valuestring, want_org) == 0 && cJSON_IsString(channel) &&
             strcmp(channel->valuestring, "api") == 0 && tg_json_get(args, "internal") == NULL;
    unbind_args(args, g->pristine[a], g->keep[a]);
    if (!ok || !cJSON_Compare(args, g->pristine[a], 1)) {
        fprintf(stderr, "FAIL: the binding of %s did not bind as the policy says, or was not undone\n", tool_names[1]);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    long ncalls = 2000000, runs = 5, nbuckets = 1000000;
    int quick = 0, digest = 0, tight = 0, pinsf = 0;
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
        } else if (strcmp(argv[i], "--bind") == 0) {
            bindf = 1;
        } else if (strcmp(argv[i], "--pins") == 0) {
            pinsf = 1;
        } else if (strcmp(argv[i], "--all") == 0) {
            hist = bindf = pinsf = 1;
        } else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) {
            nbuckets = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "-r") == 0 && i + 1 < argc) {
            runs = strtol(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: %s [--quick] [--digest | --digest-no-keys] [--tight] [--history] [--bind] [--pins] [--all] "
                            "[-n CALLS] [-r RUNS] [-b BUCKETS]\n", argv[0]);
            return 2;
        }
    }
    if (ncalls < 1 || runs < 1 || nbuckets < 1)
        return 2;

    /* With features, the same policy without them too, to measure them against. */
    int features = hist || bindf || pinsf, gated = bindf || pinsf;
    struct tg_policy *p = build_policy(), *plain = NULL;
    if (features) {
        int h = hist, b = bindf;
        hist = bindf = 0;
        plain = build_policy();
        hist = h;
        bindf = b;
    }

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
    /* With bindings, one argument set sends a tenant_id of its own and a forbidden argument: the
     * binding overwrites the one and removes the other (the runs without features see them too). */
    if (bindf) {
        cJSON_AddStringToObject(args[2], "tenant_id", "acme-other");
        cJSON_AddTrueToObject(args[2], "internal");
    }
    struct gate gt = {0};
    cJSON *params[NARGS], *pristine[NARGS];
    for (size_t i = 0; i < NARGS; i++) {
        params[i] = cJSON_CreateObject();
        cJSON_AddItemToObject(params[i], "arguments", args[i]);
        pristine[i] = cJSON_Duplicate(args[i], 1);
        gt.keep[i] = untouched(args[i]);
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
    gt.params = params;
    gt.pristine = pristine;
    if (bindf) {
        setup_callers(&gt, grants);
        if (check_binding(p, &gt, grants[0], 0) != 0)
            return 1;
    }
    if (pinsf)
        setup_pins(&gt, p);

    /* With features, each run is one without them (run_plain) then one with them, on the same
     * calls, each on fresh counters: the two see the same machine as nearly as it goes. */
    double best = 1e30, sum = 0, pbest = 1e30, psum = 0;
    long verdicts[4] = {0};
    size_t hkeys = 0, hbytes = 0;
    for (long run = 0; run < runs; run++) {
        char without[64] = "";
        if (features) {
            struct tg_counters *c = tg_counters_new();
            long v[4] = {0};
            double t = now_s();
            run_plain(plain, c, who, calls, ncalls, args, v);
            double ns = (now_s() - t) * 1e9 / (double)ncalls;
            snprintf(without, sizeof(without), "; without the features %.1f ns", ns);
            if (ns < pbest)
                pbest = ns;
            psum += ns;
            tg_counters_free(c);
        }
        struct tg_counters *c = tg_counters_new();
        long v[4] = {0};
        double t = now_s();
        if (gated)
            run_gate_calls(p, c, who, calls, ncalls, &gt, v);
        else
            run_calls(p, c, who, calls, ncalls, args, v);
        double dt = now_s() - t;
        double ns = dt * 1e9 / (double)ncalls;
        printf("run %ld: %.1f ns/decision (%.2f M decisions/s), %zu counters%s\n", run + 1, ns,
               (double)ncalls / dt / 1e6, tg_counters_count(c), without);
        if (ns < best)
            best = ns;
        sum += ns;
        memcpy(verdicts, v, sizeof(v));
        hkeys = tg_counters_history_keys(c);
        hbytes = tg_counters_history_memory(c);
        tg_counters_free(c);
    }
    printf("decisions: %ld calls x %ld runs over %d tools, %d grants, %d sessions\n", ncalls, runs, NTOOLS, NGRANTS,
           NSESSIONS);
    printf("verdicts (last run): ALLOW %ld, DENY %ld, LIMITED %ld, APPROVE %ld\n", verdicts[0], verdicts[1],
           verdicts[2], verdicts[3]);
    printf("best: %.1f ns/decision, mean %.1f ns (target <= 500 ns)\n", best, sum / (double)runs);
    if (features) {
        char names[40];
        snprintf(names, sizeof(names), "%s%s%s", hist ? "+history" : "", bindf ? "+bind" : "", pinsf ? "+pins" : "");
        printf("without the features (%s): best %.1f ns/decision, mean %.1f ns\n", names + 1, pbest,
               psum / (double)runs);
        printf("the features cost %+.1f ns/decision: %+.1f %% (best %.1f / %.1f = %.2f)\n", best - pbest,
               (best / pbest - 1) * 100, best, pbest, best / pbest);
    }
    if (hist)
        printf("history (last run): %zu rings, %.1f KiB, %.0f B per ring\n", hkeys, (double)hbytes / 1024.0,
               hkeys ? (double)hbytes / (double)hkeys : 0.0);
    if (gated)
        printf("gate (last run): %ld calls had arguments bound, %ld refused by a binding, %ld refused by a pin\n",
               gt.bound, gt.bind_refused, gt.pin_refused);
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
    /* Every visible tool binds tenant_id ("*"); nothing lacks what it binds; only the calls of the
     * unlisted and the hidden tool (1 in 1024) are refused by the pins. */
    if (bindf && (gt.bound < ncalls / 2 || gt.bind_refused != 0)) {
        fprintf(stderr, "FAIL: %ld calls bound, %ld refused by a binding\n", gt.bound, gt.bind_refused);
        ok = 0;
    }
    if (pinsf && gt.pin_refused > ncalls / 500 + 1) {
        fprintf(stderr, "FAIL: %ld calls refused by a pin\n", gt.pin_refused);
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
    for (size_t i = 0; i < NARGS; i++) {
        cJSON_Delete(params[i]); /* and args[i] */
        cJSON_Delete(pristine[i]);
    }
    free(gt.attrs);
    free(gt.tokens);
    free(gt.token_len);
    tg_pins_seen_free(gt.seen);
    if (gt.pins != NULL)
        tg_pins_unref(gt.pins);
    free(calls);
    free(who);
    tg_policy_unref(p);
    if (plain != NULL)
        tg_policy_unref(plain);
    return ok ? 0 : 1;
}
