/* Policy loading and decisions (policy/compile.c, compile_tool.c, yaml.c, decide.c, regex.c,
 * counters.c). The input is a policy file, JSON or YAML, chosen as tg_policy_load() chooses
 * (JSON if the first non-space byte is '{'), and read the same way, in memory: tg_json_parse
 * or tg_yaml_to_json, then tg_policy_compile (the file reading of tg_policy_load is all it adds).
 *
 * A policy that compiles is then asked, on a fresh in-memory counter store (tg_counters_new),
 * a fixed script: tools/call for each tool the file names (its first 8) and a few fixed names,
 * with fixed arguments and without, twice each with a refund between, a continuation,
 * tool_visible, method_allowed, and resources/read and prompts/get for fixed URIs and names.
 * Properties:
 *   a policy either compiles or says why (err not empty), never both;
 *   the script run twice on two fresh stores gives the same transcript (verdict, rule, message,
 *   counter, retry-after, reservations, counters_json): decisions are deterministic;
 *   a LIMITED verdict names its counter; every message and rule is NUL-terminated in its array.
 * Any input: no crash, no leak, no undefined behaviour. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NOW_MS 1780000000000LL /* a fixed clock: the transcript must not depend on the time */
#define MAX_TOOLS 8

static const char *const fixed_tools[] = {"free", "*", "unknown_tool", ""};
static const char *const uris[] = {"file:///docs/a.md", "file:///docs/private/x.key", "mem://h/public", ""};
static const char *const prompts[] = {"greet", "admin_reset", ""};
static const char ARGS[] = "{\"v\":5,\"n\":3,\"path\":\"/docs/a\",\"amount\":2.5,\"cost\":\"7\","
                           "\"items\":[\"a\",1,true],\"o\":{\"k\":\"v\",\"n\":{\"d\":-1}},\"s\":\"main\"}";

static void note(struct tg_buf *t, const char *what, const char *name, const struct tg_decision *d)
{
    if (memchr(d->rule, '\0', sizeof(d->rule)) == NULL || memchr(d->message, '\0', sizeof(d->message)) == NULL ||
        memchr(d->counter, '\0', sizeof(d->counter)) == NULL ||
        memchr(d->counters_json, '\0', sizeof(d->counters_json)) == NULL)
        abort();
    if (d->nres < 0 || d->nres > TG_MAX_RESERVATIONS)
        abort();
    if (d->verdict == TG_VERDICT_LIMITED && d->counter[0] == '\0')
        abort();
    tg_buf_appendf(t, "%s %s: %d [%s] [%s] [%s] %llu %d %d [%s]\n", what, name, (int)d->verdict, d->rule, d->message,
                   d->counter, (unsigned long long)d->retry_after_ms, d->approval_timeout_ms, d->nres,
                   d->counters_json);
}

static void call(const struct tg_policy *p, struct tg_counters *c, const char *tool, const cJSON *args,
                 struct tg_buf *t)
{
    struct tg_caller who = {"grant-a", "session-1", "up", NULL, NULL};
    struct tg_decision d;
    memset(&d, 0, sizeof(d));
    tg_policy_decide_call(p, c, &who, tool, args, NOW_MS, &d);
    note(t, "call", tool, &d);
    if (d.verdict == TG_VERDICT_ALLOW || d.verdict == TG_VERDICT_APPROVE)
        tg_policy_refund(c, &d, NOW_MS + 1);
    tg_policy_decide_call(p, c, &who, tool, args, NOW_MS + 2, &d);
    note(t, "again", tool, &d);
    tg_policy_decide_continuation(p, c, &who, tool, args, NOW_MS + 3, &d);
    note(t, "cont", tool, &d);
    tg_buf_appendf(t, "visible %s: %d\n", tool, tg_policy_tool_visible(p, tool));
}

static void script(const struct tg_policy *p, const char *const *tools, size_t ntools, const cJSON *args,
                   struct tg_buf *t)
{
    struct tg_counters *c = tg_counters_new();
    for (size_t i = 0; i < ntools; i++) {
        call(p, c, tools[i], args, t);
        call(p, c, tools[i], NULL, t);
    }
    for (size_t i = 0; i < sizeof(fixed_tools) / sizeof(*fixed_tools); i++)
        call(p, c, fixed_tools[i], args, t);
    for (size_t i = 0; i < sizeof(uris) / sizeof(*uris); i++) {
        struct tg_decision d;
        memset(&d, 0, sizeof(d));
        tg_policy_decide_resource(p, uris[i], &d);
        note(t, "resource", uris[i], &d);
    }
    for (size_t i = 0; i < sizeof(prompts) / sizeof(*prompts); i++) {
        struct tg_decision d;
        memset(&d, 0, sizeof(d));
        tg_policy_decide_prompt(p, prompts[i], &d);
        note(t, "prompt", prompts[i], &d);
    }
    tg_buf_appendf(t, "methods %d %d; tools %zu; session counters %d; name %s\n",
                   tg_policy_method_allowed(p, "custom/ping"), tg_policy_method_allowed(p, "tools/call"),
                   tg_policy_tool_count(p), tg_policy_session_counters(p), tg_policy_name(p));
    tg_counters_sweep(c, NOW_MS + 86400000LL * 400, 1 << 20);
    tg_counters_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* As tg_policy_load reads a file: into a buffer, then JSON or YAML by the first byte. */
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    size_t i = 0;
    while (i < size && (text[i] == ' ' || (text[i] >= '\t' && text[i] <= '\r')))
        i++;
    cJSON *root = NULL;
    if (i < size && text[i] == '{') {
        struct tg_json_doc doc;
        if (tg_json_parse(text, size, 64, 1, &doc, NULL, NULL) == 0)
            root = doc.root;
    } else {
        char why[300];
        why[0] = '\0';
        if (tg_yaml_to_json(text, size, &root, why, sizeof(why)) != 0) {
            if (root != NULL || why[0] == '\0')
                abort(); /* a refusal says why and leaves nothing behind */
        }
    }
    free(text);
    if (root == NULL)
        return 0;

    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    int r = tg_policy_compile(root, "fuzz.policy", &p, &err, &warn);
    if ((r == 0) != (p != NULL) || (r != 0 && err.len == 0))
        abort();
    if (p != NULL) {
        const char *tools[MAX_TOOLS];
        size_t ntools = 0;
        const cJSON *tt = cJSON_GetObjectItemCaseSensitive(root, "tools");
        for (const cJSON *t = cJSON_IsObject(tt) ? tt->child : NULL; t != NULL && ntools < MAX_TOOLS; t = t->next)
            tools[ntools++] = t->string;
        cJSON *args = cJSON_Parse(ARGS);
        struct tg_buf t1, t2;
        tg_buf_init(&t1);
        tg_buf_init(&t2);
        script(p, tools, ntools, args, &t1);
        script(tg_policy_ref(p), tools, ntools, args, &t2);
        tg_policy_unref(p);
        if (t1.len != t2.len || memcmp(t1.base, t2.base, t1.len) != 0)
            abort(); /* the same calls on fresh counters: the same verdicts */
        tg_buf_dispose(&t1);
        tg_buf_dispose(&t2);
        cJSON_Delete(args);
        tg_policy_unref(p);
    }
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    cJSON_Delete(root);
    return 0;
}
