/* Policy compiler: a policy document (either PolicyLayer shape, JSON or YAML) into one immutable
 * struct tg_policy. See policy/policy.h for the format. */
#include "policy/policy.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/sha256.h"
#include "core/base/json.h"
#include "policy/compile_tool.h"
#include "policy/history_rules.h"
#include "policy/regex.h"
#include "policy/uri.h"

#define POLICY_MAX_FILE (4 * 1024 * 1024)

/* ---- compile ------------------------------------------------------------------ */

static void compile_list(struct tg__cctx *cx, const cJSON *j, const char *path, char ***out, int *n)
{
    if (!cJSON_IsArray(j)) {
        tg__perr(cx, path, "must be a list of strings");
        return;
    }
    *n = cJSON_GetArraySize(j);
    *out = tg_xcalloc((size_t)(*n ? *n : 1), sizeof(char *));
    int i = 0;
    for (const cJSON *c = j->child; c; c = c->next, i++) {
        char p[600];
        snprintf(p, sizeof(p), "%s[%d]", path, i);
        if (!cJSON_IsString(c) || c->valuestring[0] == '\0') {
            tg__perr(cx, p, "entry must not be empty");
            (*out)[i] = tg_xstrdup("");
            continue;
        }
        for (int k = 0; k < i; k++)
            if (strcmp((*out)[k], c->valuestring) == 0)
                tg__perr(cx, path, "duplicate entry \"%s\"", c->valuestring);
        (*out)[i] = tg_xstrdup(c->valuestring);
    }
}

static void compile_globset(struct tg__cctx *cx, const cJSON *j, const char *path, struct globset *g)
{
    if (!cJSON_IsObject(j)) {
        tg__perr(cx, path, "must be an object {default, allow, deny, reason}");
        return;
    }
    static const char *const known[] = {"default", "allow", "deny", "reason", "scopes", "tags", NULL};
    tg__check_keys(cx, j, path, known);
    g->present = 1;
    char sub[600];
    const cJSON *d = tg_json_get(j, "default");
    if (d != NULL) {
        g->has_default = 1;
        snprintf(sub, sizeof(sub), "%s.default", path);
        if (cJSON_IsString(d) && strcmp(d->valuestring, "deny") == 0)
            g->default_deny = 1;
        else if (!(cJSON_IsString(d) && strcmp(d->valuestring, "allow") == 0))
            tg__perr(cx, sub, "must be \"allow\" or \"deny\"");
    }
    const cJSON *a = tg_json_get(j, "allow");
    if (a) {
        snprintf(sub, sizeof(sub), "%s.allow", path);
        compile_list(cx, a, sub, &g->allow, &g->nallow);
        if (strcmp(path, "resources") == 0)
            tg__check_uri_globs(cx, sub, g->allow, g->nallow);
    }
    const cJSON *dn = tg_json_get(j, "deny");
    if (dn) {
        snprintf(sub, sizeof(sub), "%s.deny", path);
        compile_list(cx, dn, sub, &g->deny, &g->ndeny);
        if (strcmp(path, "resources") == 0)
            tg__check_uri_globs(cx, sub, g->deny, g->ndeny);
    }
    const cJSON *r = tg_json_get(j, "reason");
    if (cJSON_IsString(r))
        g->reason = tg_xstrdup(r->valuestring);
    const cJSON *sc = tg_json_get(j, "scopes");
    if (sc != NULL) {
        snprintf(sub, sizeof(sub), "%s.scopes", path);
        tg__compile_scoped_globs(cx, sc, sub, g);
    }
    const cJSON *tg = tg_json_get(j, "tags"); /* {GLOB: [tags]}: what history records them with */
    if (tg != NULL) {
        snprintf(sub, sizeof(sub), "%s.tags", path);
        tg__compile_glob_tags(cx, tg, sub, strcmp(path, "prompts") == 0);
    }
}

static int cmp_tools(const void *a, const void *b)
{
    return strcmp(((const struct ptool *)a)->name, ((const struct ptool *)b)->name);
}

static void free_globset(struct globset *g)
{
    for (int i = 0; i < g->nallow; i++)
        free(g->allow[i]);
    for (int i = 0; i < g->ndeny; i++)
        free(g->deny[i]);
    free(g->allow);
    free(g->deny);
    free(g->reason);
    tg__free_scoped_globs(g);
}

static void policy_free(struct tg_policy *p)
{
    for (int i = 0; i < p->ntools; i++)
        tg__free_tool(&p->tools[i]);
    free(p->tools);
    free(p->tool_slots);
    if (p->wildcard) {
        tg__free_tool(p->wildcard);
        free(p->wildcard);
    }
    for (int i = 0; i < p->nhide; i++)
        free(p->hide[i]);
    free(p->hide);
    for (int i = 0; i < p->ncounters; i++) {
        free(p->counters[i].key);
        free(p->counters[i].label);
        free(p->counters[i].jlabel);
    }
    free(p->counters);
    free(p->keymemo);
    free(p->upmemo);
    for (int i = 0; i < p->nmethods; i++)
        free(p->methods[i]);
    free(p->methods);
    free_globset(&p->resources);
    free_globset(&p->prompts);
    tg_regex_ctx_free(p->rx);
    tg__free_hpolicy(p->hist);
    for (int i = 0; i < p->nbind_claims; i++)
        free(p->bind_claims[i]);
    free(p->bind_claims);
    free(p->name);
    free(p);
}

int tg_policy_compile(const cJSON *root, const char *name, struct tg_policy **out, struct tg_buf *err,
                      struct tg_buf *warn)
{
    struct tg_policy *p = tg_xcalloc(1, sizeof(*p));
    p->refcnt = 1;
    p->name = tg_xstrdup(name);
    struct tg__cctx cx = {name, err, warn, 0, p};
    *out = NULL;
    if (!cJSON_IsObject(root)) {
        tg__perr(&cx, "(root)", "a policy must be an object");
        policy_free(p);
        return TG_EINVAL;
    }
    static const char *const known[] = {"version", "description", "default", "hide", "tools",
                                        "methods", "resources", "prompts", NULL};
    tg__check_keys(&cx, root, "", known);
    const cJSON *v = tg_json_get(root, "version");
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "1") != 0)
        tg__perr(&cx, "version", "version must be \"1\", got \"%s\"",
             cJSON_IsString(v) ? v->valuestring : (cJSON_IsNumber(v) ? "(a number; write \"1\")" : "(missing)"));
    const cJSON *d = tg_json_get(root, "default");
    if (d == NULL) {
        /* Fail closed: a policy that does not say what happens to the rest denies it. */
        p->default_deny = 1;
        tg__pwarn(&cx, "default", "not set, so what this policy does not name is denied (write \"default\": "
                                  "\"deny\" to say so, or \"default\": \"allow\" to pass it)");
    } else {
        if (cJSON_IsString(d) && strcmp(d->valuestring, "deny") == 0)
            p->default_deny = 1;
        else if (!(cJSON_IsString(d) && strcmp(d->valuestring, "allow") == 0))
            tg__perr(&cx, "default", "default must be \"allow\" or \"deny\", got \"%s\"",
                 cJSON_IsString(d) ? d->valuestring : "?");
    }
    const cJSON *h = tg_json_get(root, "hide");
    if (h != NULL && !cJSON_IsNull(h)) {
        compile_list(&cx, h, "hide", &p->hide, &p->nhide);
        for (int i = 0; i < p->nhide; i++)
            if (strcmp(p->hide[i], "*") == 0)
                p->hide_all = 1;
    }
    const cJSON *t = tg_json_get(root, "tools");
    if (t == NULL || cJSON_IsNull(t)) {
        if (p->default_deny)
            tg__pwarn(&cx, "tools", "no tools listed under default deny: every tool is denied");
    } else if (!cJSON_IsObject(t)) {
        tg__perr(&cx, "tools", "must be an object of tool names");
    } else {
        int n = cJSON_GetArraySize(t);
        p->tools = tg_xcalloc((size_t)(n ? n : 1), sizeof(*p->tools));
        for (const cJSON *c = t->child; c; c = c->next) {
            if (strcmp(c->string, "*") == 0) {
                p->wildcard = tg_xcalloc(1, sizeof(*p->wildcard));
                tg__compile_tool(&cx, "*", c, p->wildcard);
            } else {
                tg__compile_tool(&cx, c->string, c, &p->tools[p->ntools++]);
            }
        }
        qsort(p->tools, (size_t)p->ntools, sizeof(*p->tools), cmp_tools);
    }
    /* State conditions may name counters defined by later rules: resolve them now. */
    struct ptool *all[2] = {NULL, p->wildcard};
    for (int ti = -1; ti < p->ntools; ti++) {
        struct ptool *tool = ti < 0 ? all[1] : &p->tools[ti];
        if (tool == NULL)
            continue;
        for (int r = 0; r < tool->nrules; r++)
            for (int k = 0; k < tool->rules[r].nconds; k++) {
                struct cond *c = &tool->rules[r].conds[k];
                if (!c->is_state || c->npath != 1)
                    continue;
                c->counter = tg__find_counter(p, c->path[0]);
                if (c->counter < 0) {
                    char path[600];
                    snprintf(path, sizeof(path), "tools.%s.rules[%d].conditions[%d].path", tool->name, r, k);
                    tg__perr(&cx, path, "condition references state.%s but no matching state block found",
                         c->path[0] + 2);
                }
            }
    }
    /* A call's reservations are kept in a fixed array so that they can be given back: refuse
     * a policy that would put more counters than that on one call. */
    int wild_counters = 0;
    if (p->wildcard) {
        wild_counters += p->wildcard->nlimits;
        for (int r = 0; r < p->wildcard->nrules; r++)
            wild_counters += p->wildcard->rules[r].counter >= 0;
    }
    for (int ti = 0; ti < p->ntools; ti++) {
        int n = wild_counters + p->tools[ti].nlimits;
        for (int r = 0; r < p->tools[ti].nrules; r++)
            n += p->tools[ti].rules[r].counter >= 0;
        if (n > TG_MAX_RESERVATIONS) {
            char path[600];
            snprintf(path, sizeof(path), "tools.%s", p->tools[ti].name);
            tg__perr(&cx, path, "%d counters apply to one call (with \"*\"); at most %d are supported", n,
                 TG_MAX_RESERVATIONS);
        }
    }
    if (wild_counters > TG_MAX_RESERVATIONS)
        tg__perr(&cx, "tools.*", "%d counters apply to one call; at most %d are supported", wild_counters,
             TG_MAX_RESERVATIONS);
    const cJSON *m = tg_json_get(root, "methods");
    if (m != NULL)
        compile_list(&cx, m, "methods", &p->methods, &p->nmethods);
    const cJSON *res = tg_json_get(root, "resources");
    if (res != NULL)
        compile_globset(&cx, res, "resources", &p->resources);
    const cJSON *pr = tg_json_get(root, "prompts");
    if (pr != NULL)
        compile_globset(&cx, pr, "prompts", &p->prompts);
    if (cx.nerr > 0) {
        policy_free(p);
        return TG_EINVAL;
    }
    tg__finish_counters(p);
    tg__finish_history(p);
    tg__index_tools(p);
    for (int ti = 0; ti < p->ntools; ti++)
        tg__finish_tool(&p->tools[ti]);
    if (p->wildcard != NULL)
        tg__finish_tool(p->wildcard);
    tg__finish_bind(p);
    *out = p;
    return 0;
}

uint32_t tg__tool_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = (h ^ *c) * 0x100000001b3ULL;
    return (uint32_t)(h ^ (h >> 32));
}

/* A decision finds its tool by a hash of the name instead of a binary search of strcmp calls.
 * Only for distinct names: with two tools of one name (the tree allows it) the binary search
 * keeps deciding which one answers, as it always did. */
void tg__index_tools(struct tg_policy *p)
{
    for (int i = 1; i < p->ntools; i++)
        if (strcmp(p->tools[i - 1].name, p->tools[i].name) == 0)
            return;
    if (p->ntools == 0)
        return;
    uint32_t cap = 8;
    while (cap < 2 * (uint32_t)p->ntools)
        cap *= 2;
    p->tool_slots = tg_xcalloc(cap, sizeof(*p->tool_slots));
    p->tool_mask = cap - 1;
    for (int i = 0; i < p->ntools; i++) {
        uint32_t h = tg__tool_hash(p->tools[i].name);
        uint32_t k = h & p->tool_mask;
        while (p->tool_slots[k].idx1 != 0)
            k = (k + 1) & p->tool_mask;
        p->tool_slots[k].hash = h;
        p->tool_slots[k].idx1 = i + 1;
    }
}

long tg__path_index(const char *seg)
{
    char *end;
    long k = strtol(seg, &end, 10);
    return (*end != '\0' || k < 0 || end == seg) ? -1 : k;
}

static long *path_indices(char **path, int n)
{
    if (n <= 0)
        return NULL;
    long *idx = tg_xmalloc((size_t)n * sizeof(*idx));
    for (int i = 0; i < n; i++)
        idx[i] = tg__path_index(path[i]);
    return idx;
}

static void reach_add(struct ptool *t, int idx)
{
    if (idx < 0)
        return;
    for (int i = 0; i < t->nreach; i++)
        if (t->reach[i] == idx)
            return;
    t->reach = tg_xrealloc(t->reach, (size_t)(t->nreach + 1) * sizeof(*t->reach));
    t->reach[t->nreach++] = idx;
}

/* Argument paths are split at compile time; which segments read as list indices is decided here
 * too, not with strtol on every call. And the counters a call can reach, in the order decide_call
 * reaches them, up to where it stops for certain. */
void tg__finish_tool(struct ptool *t)
{
    t->reach_stops = t->action == TA_DENY;
    for (int r = 0; r < t->nrules && !t->reach_stops; r++) {
        if (t->rules[r].deny && t->rules[r].when == NULL) {
            t->reach_stops = 1;
            break;
        }
        for (int k = 0; k < t->rules[r].nconds; k++)
            if (t->rules[r].conds[k].is_state)
                reach_add(t, t->rules[r].conds[k].counter);
    }
    if (!t->reach_stops) {
        for (int r = 0; r < t->nrules; r++)
            reach_add(t, t->rules[r].counter);
        for (int i = 0; i < t->nlimits; i++)
            reach_add(t, t->limits[i]);
    }
    for (int r = 0; r < t->nrules; r++) {
        struct rule *ru = &t->rules[r];
        for (int k = 0; k < ru->nconds; k++) {
            struct cond *c = &ru->conds[k];
            if (!c->is_state)
                c->path_idx = path_indices(c->path, c->npath);
        }
        ru->incr_idx = path_indices(ru->incr_path, ru->nincr);
    }
}

/* 1 if one of counters [0, i) has the label b[0..n) already. */
static int label_taken(const struct tg_policy *p, int i, const char *b, size_t n)
{
    for (int k = 0; k < i; k++)
        if (p->counters[k].jlabel_len == n && memcmp(p->counters[k].jlabel, b, n) == 0)
            return 1;
    return 0;
}

/* What a decision would otherwise work out for each counter on every call: the key's length
 * (hashed with the caller's names) and the counter's name as counters_json quotes it. */
void tg__finish_counters(struct tg_policy *p)
{
    p->keymemo = p->ncounters > 0 ? tg_xcalloc((size_t)p->ncounters, sizeof(*p->keymemo)) : NULL;
    p->upmemo = p->ncounters > 0 ? tg_xcalloc(1, sizeof(*p->upmemo)) : NULL;
    for (int i = 0; i < p->ncounters; i++) {
        struct pcounter *pc = &p->counters[i];
        pc->keylen = strlen(pc->key);
        /* The label is at most 120 bytes of JSON. A long name is cut before it is escaped, on a
         * UTF-8 character's first byte, so the label is always a whole JSON string (a cut of
         * the escaped form could end inside an escape or drop the closing quote). Two names
         * alike up to the cut would be one key twice in an audit line's counters (no strict
         * JSON, and one value hidden): a label another counter has is cut again with ~N after it,
         * N this counter's number (and ~N~T should that be taken too). */
        const char *name = pc->key + 2;
        size_t whole = pc->keylen - 2, n = whole, sl = 0;
        char *text = tg_xmalloc(whole + 32), suffix[32];
        struct tg_buf b;
        tg_buf_init(&b);
        for (int tries = 0;; tries++) {
            for (;;) {
                memcpy(text, name, n);
                memcpy(text + n, suffix, sl);
                b.len = 0;
                tg_json_write_string(&b, text, n + sl);
                if (b.len <= 120)
                    break;
                n = n > b.len - 120 ? n - (b.len - 120) : 0; /* each byte escapes to one byte or more */
                while (n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80)
                    n--;
            }
            if (!label_taken(p, i, b.base, b.len))
                break;
            if (tries == 0)
                sl = (size_t)snprintf(suffix, sizeof(suffix), "~%d", i);
            else
                sl = (size_t)snprintf(suffix, sizeof(suffix), "~%d~%d", i, tries);
            n = whole;
        }
        free(text);
        pc->jlabel_len = b.len;
        pc->jlabel = tg_xmalloc(pc->jlabel_len + 1);
        memcpy(pc->jlabel, b.base, pc->jlabel_len);
        pc->jlabel[pc->jlabel_len] = '\0';
        tg_buf_dispose(&b);
    }
}

int tg_policy_load(const char *path, struct tg_policy **out, struct tg_buf *err, struct tg_buf *warn)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        tg_buf_appendf(err, "%s: cannot open: %s\n", path, strerror(errno));
        return TG_EINVAL;
    }
    struct tg_buf b;
    tg_buf_init(&b);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (tg_buf_try_append(&b, chunk, n, POLICY_MAX_FILE) != 0) {
            fclose(f);
            tg_buf_dispose(&b);
            tg_buf_appendf(err, "%s: larger than %d bytes\n", path, POLICY_MAX_FILE);
            return TG_EINVAL;
        }
    }
    fclose(f);
    size_t i = 0;
    while (i < b.len && isspace((unsigned char)b.base[i]))
        i++;
    uint8_t h[32];
    char file_sha256[65];
    tg_sha256(b.base ? b.base : "", b.len, h); /* the file in force, as the audit log's checkpoints record it */
    tg_hex_encode(h, 32, file_sha256);
    cJSON *root = NULL;
    if (i < b.len && b.base[i] == '{') {
        struct tg_json_doc doc;
        const char *why = NULL;
        size_t off = 0;
        if (tg_json_parse(b.base, b.len, 64, 1, &doc, &why, &off) != 0) {
            size_t line = 1;
            for (size_t k = 0; k < off && k < b.len; k++)
                if (b.base[k] == '\n')
                    line++;
            tg_buf_appendf(err, "%s:%zu: %s\n", path, line, why);
            tg_buf_dispose(&b);
            return TG_EINVAL;
        }
        root = doc.root;
    } else {
        char why[300];
        if (tg_yaml_to_json(b.base ? b.base : "", b.len, &root, why, sizeof(why)) != 0) {
            tg_buf_appendf(err, "%s: %s\n", path, why);
            tg_buf_dispose(&b);
            return TG_EINVAL;
        }
    }
    tg_buf_dispose(&b);
    int r = tg_policy_compile(root, path, out, err, warn);
    cJSON_Delete(root);
    if (r == 0)
        memcpy((*out)->file_sha256, file_sha256, sizeof(file_sha256));
    return r;
}

struct tg_policy *tg_policy_deny_all(void)
{
    struct tg_policy *p = tg_xcalloc(1, sizeof(*p));
    p->refcnt = 1;
    p->name = tg_xstrdup("(no policy: everything denied)");
    p->default_deny = 1;
    p->hide_all = 1;
    return p;
}

struct tg_policy *tg_policy_ref(struct tg_policy *p)
{
    p->refcnt++;
    return p;
}

void tg_policy_unref(struct tg_policy *p)
{
    if (p != NULL && --p->refcnt == 0)
        policy_free(p);
}

const char *tg_policy_name(const struct tg_policy *p) { return p->name; }
const char *tg_policy_file_sha256(const struct tg_policy *p) { return p->file_sha256[0] ? p->file_sha256 : NULL; }

int tg_policy_session_counters(const struct tg_policy *p)
{
    int n = 0;
    for (int i = 0; p != NULL && i < p->ncounters; i++)
        n += p->counters[i].scope == SCOPE_SESSION;
    return n;
}
size_t tg_policy_tool_count(const struct tg_policy *p) { return (size_t)p->ntools; }
