/* Compiling the history features of a policy (policy/history_rules.h): a rule's "when", the
 * condition {history: {...}, op, value}, a tool entry's "brake", and the tags of resources and
 * prompts. Strict like the rest of the compiler: an unknown key, a window that is not from
 * 1 second to 1 day, an operator that does not compare a count, a seventh remembered path: each
 * is an error with its path in the file. */
#include "policy/history_rules.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "policy/compile_tool.h"

#define MAX_GLOBS 64
#define MAX_REPEATS 1000
#define MAX_CYCLE 8

/* ---- pieces ------------------------------------------------------------------------------ */

/* "30s", "10m", "1h", "1d", "90" (seconds) or a number of seconds: from 1 s to 1 day; -1 else. */
static int64_t parse_within(const cJSON *w)
{
    if (cJSON_IsNumber(w)) {
        double d = w->valuedouble;
        if (!isfinite(d) || d < 1 || d > 86400)
            return -1;
        return (int64_t)llround(d * 1000);
    }
    if (!cJSON_IsString(w))
        return -1;
    const char *s = w->valuestring;
    if (*s < '0' || *s > '9')
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || v <= 0 || v > 86400)
        return -1;
    long long mult = 1;
    if (*end == 's' || *end == '\0')
        mult = 1;
    else if (*end == 'm')
        mult = 60;
    else if (*end == 'h')
        mult = 3600;
    else if (*end == 'd')
        mult = 86400;
    else
        return -1;
    if (*end != '\0' && end[1] != '\0')
        return -1;
    if (v * mult > 86400)
        return -1;
    return v * mult * 1000;
}

static int64_t within_of(struct tg__cctx *cx, const cJSON *j, const char *path)
{
    char sub[700];
    snprintf(sub, sizeof(sub), "%s.within", path);
    if (j == NULL) {
        tg__perr(cx, sub, "is required: how far back to look (\"30s\", \"10m\", \"1h\", up to \"1d\")");
        return -1;
    }
    int64_t ms = parse_within(j);
    if (ms < 0)
        tg__perr(cx, sub, "must be a duration from 1 second to 1 day (\"30s\", \"10m\", \"1h\", \"1d\" or a number "
                          "of seconds)");
    return ms;
}

void tg__hist_duration(int64_t ms, char *out, size_t n)
{
    if (ms >= 3600000 && ms % 3600000 == 0)
        snprintf(out, n, "%lld h", (long long)(ms / 3600000));
    else if (ms > 60000 && ms % 60000 == 0)
        snprintf(out, n, "%lld min", (long long)(ms / 60000));
    else if (ms % 1000 == 0)
        snprintf(out, n, "%lld s", (long long)(ms / 1000));
    else
        snprintf(out, n, "%.3f s", (double)ms / 1000.0);
}

/* A list of non-empty glob strings. */
static void compile_globs(struct tg__cctx *cx, const cJSON *j, const char *path, char ***out, int *nout)
{
    *out = NULL;
    *nout = 0;
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) == 0) {
        tg__perr(cx, path, "must be a non-empty list of names (\"*\" matches any run of characters)");
        return;
    }
    int n = cJSON_GetArraySize(j);
    if (n > MAX_GLOBS) {
        tg__perr(cx, path, "at most %d names", MAX_GLOBS);
        return;
    }
    char **v = tg_xcalloc((size_t)n, sizeof(*v));
    int k = 0, i = 0;
    for (const cJSON *e = j->child; e != NULL; e = e->next, i++) {
        if (!cJSON_IsString(e) || e->valuestring[0] == '\0' || strlen(e->valuestring) > 256) {
            char sub[720];
            snprintf(sub, sizeof(sub), "%s[%d]", path, i);
            tg__perr(cx, sub, "must be a name or a glob of 1 to 256 bytes");
            continue;
        }
        v[k++] = tg_xstrdup(e->valuestring);
    }
    *out = v;
    *nout = k;
}

static void free_list(char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void filter_tags(struct tg__cctx *cx, const cJSON *j, const char *path, struct hfilter *f)
{
    tg__compile_tags(cx, j, path, &f->tags, &f->ntags);
    if (f->ntags == 0 && cJSON_IsArray(j) && cJSON_GetArraySize(j) == 0)
        tg__perr(cx, path, "must name at least one tag");
    f->tagh = tg_xcalloc((size_t)(f->ntags ? f->ntags : 1), sizeof(*f->tagh));
    for (int i = 0; i < f->ntags; i++)
        f->tagh[i] = tg_hist_tag_hash(f->tags[i], strlen(f->tags[i]));
}

static void free_filter(struct hfilter *f)
{
    free_list(f->tags, f->ntags);
    free(f->tagh);
    free_list(f->tools, f->ntools);
    free_list(f->resources, f->nresources);
    free_list(f->prompts, f->nprompts);
}

static struct hpolicy *hpolicy_of(struct tg_policy *p)
{
    if (p->hist == NULL)
        p->hist = tg_xcalloc(1, sizeof(*p->hist));
    return p->hist;
}

/* A path segment as a list index (all digits), or -1. */
static long list_index(const char *seg)
{
    char *end;
    errno = 0;
    long k = strtol(seg, &end, 10);
    return (*end != '\0' || end == seg || k < 0 || errno != 0 || seg[0] < '0' || seg[0] > '9') ? -1 : k;
}

/* "args.a.b": the index of its remembered path (added if new), or -1 with an error. */
static int remember_path(struct tg__cctx *cx, const cJSON *j, const char *path)
{
    if (!cJSON_IsString(j) || strncmp(j->valuestring, "args.", 5) != 0 || j->valuestring[5] == '\0' ||
        strlen(j->valuestring) > 200) {
        tg__perr(cx, path, "must be an argument path \"args.NAME\" (\"args.a.b\" for a nested one)");
        return -1;
    }
    const char *s = j->valuestring;
    for (const char *q = s + 5; *q; q++)
        if (*q == '.' && (q[1] == '.' || q[1] == '\0' || q[-1] == '.')) {
            tg__perr(cx, path, "\"%s\" has an empty segment", s);
            return -1;
        }
    struct hpolicy *h = hpolicy_of(cx->p);
    for (int i = 0; i < h->npaths; i++)
        if (strcmp(h->paths[i].text, s) == 0)
            return i;
    if (h->npaths >= TG_HIST_VALS) {
        tg__perr(cx, path, "a policy's history conditions compare at most %d different argument paths (same and "
                           "distinct together); \"%s\" would be the %dth",
                 TG_HIST_VALS, s, TG_HIST_VALS + 1);
        return -1;
    }
    struct hpath *hp = &h->paths[h->npaths];
    hp->text = tg_xstrdup(s);
    hp->seed = tg_hist_tag_hash(s, strlen(s));
    for (const char *q = s + 5;;) {
        const char *dot = strchr(q, '.');
        size_t len = dot ? (size_t)(dot - q) : strlen(q);
        hp->seg = tg_xrealloc(hp->seg, (size_t)(hp->n + 1) * sizeof(*hp->seg));
        hp->idx = tg_xrealloc(hp->idx, (size_t)(hp->n + 1) * sizeof(*hp->idx));
        hp->seg[hp->n] = tg_slice_dup(tg_slice_of(q, len));
        hp->idx[hp->n] = list_index(hp->seg[hp->n]);
        hp->n++;
        if (dot == NULL)
            break;
        q = dot + 1;
    }
    return h->npaths++;
}

/* ---- history conditions ----------------------------------------------------------------- */

void tg__compile_history_cond(struct tg__cctx *cx, const cJSON *c, const char *path, struct cond *out)
{
    static const char *const known[] = {"history", "op", "value", NULL};
    tg__check_keys(cx, c, path, known);
    char sub[700], s2[760];
    snprintf(sub, sizeof(sub), "%s.history", path);
    struct hcond *h = tg_xcalloc(1, sizeof(*h));
    out->hist = h;
    out->is_state = 1;
    out->counter = -1;
    h->same = h->distinct = -1;
    const cJSON *jh = tg_json_get(c, "history");
    if (!cJSON_IsObject(jh)) {
        tg__perr(cx, sub, "must be a map {tags, tools, resources, prompts, within, scope, same, distinct}");
        return;
    }
    static const char *const hknown[] = {"tags", "tools", "resources", "prompts", "within", "scope", "same",
                                         "distinct", NULL};
    tg__check_keys(cx, jh, sub, hknown);
    const cJSON *j;
    if ((j = tg_json_get(jh, "tags")) != NULL) {
        snprintf(s2, sizeof(s2), "%s.tags", sub);
        filter_tags(cx, j, s2, &h->f);
    }
    if ((j = tg_json_get(jh, "tools")) != NULL) {
        snprintf(s2, sizeof(s2), "%s.tools", sub);
        compile_globs(cx, j, s2, &h->f.tools, &h->f.ntools);
    }
    if ((j = tg_json_get(jh, "resources")) != NULL) {
        snprintf(s2, sizeof(s2), "%s.resources", sub);
        compile_globs(cx, j, s2, &h->f.resources, &h->f.nresources);
    }
    if ((j = tg_json_get(jh, "prompts")) != NULL) {
        snprintf(s2, sizeof(s2), "%s.prompts", sub);
        compile_globs(cx, j, s2, &h->f.prompts, &h->f.nprompts);
    }
    h->within_ms = within_of(cx, tg_json_get(jh, "within"), sub);
    if ((j = tg_json_get(jh, "scope")) != NULL) {
        snprintf(s2, sizeof(s2), "%s.scope", sub);
        if (cJSON_IsString(j) && strcmp(j->valuestring, "subject") == 0)
            h->scope = HS_SUBJECT;
        else if (cJSON_IsString(j) && strcmp(j->valuestring, "grant") == 0)
            h->scope = HS_GRANT;
        else if (cJSON_IsString(j) && strcmp(j->valuestring, "session") == 0)
            h->scope = HS_SESSION;
        else
            tg__perr(cx, s2, "must be subject, grant or session");
        if (h->scope == HS_GRANT)
            hpolicy_of(cx->p)->reads_grant = 1;
    }
    const cJSON *jsame = tg_json_get(jh, "same"), *jdist = tg_json_get(jh, "distinct");
    if (jsame != NULL) {
        snprintf(s2, sizeof(s2), "%s.same", sub);
        h->same = remember_path(cx, jsame, s2);
    }
    if (jdist != NULL) {
        snprintf(s2, sizeof(s2), "%s.distinct", sub);
        h->distinct = remember_path(cx, jdist, s2);
    }
    const cJSON *jo = tg_json_get(c, "op");
    static const struct {
        const char *name;
        enum cop op;
    } ops[] = {{"eq", OP_EQ}, {"neq", OP_NEQ}, {"lt", OP_LT}, {"lte", OP_LTE}, {"gt", OP_GT}, {"gte", OP_GTE}};
    int found = 0;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]) && cJSON_IsString(jo); i++)
        if (strcmp(jo->valuestring, ops[i].name) == 0) {
            out->op = ops[i].op;
            found = 1;
        }
    snprintf(sub, sizeof(sub), "%s.op", path);
    if (!found)
        tg__perr(cx, sub, "a history condition compares a count: eq, neq, lt, lte, gt or gte, not \"%s\"",
                 cJSON_IsString(jo) ? jo->valuestring : "?");
    const cJSON *jv = tg_json_get(c, "value");
    snprintf(sub, sizeof(sub), "%s.value", path);
    if (!cJSON_IsNumber(jv) || !isfinite(jv->valuedouble) || jv->valuedouble < 0 || jv->valuedouble > 1e9)
        tg__perr(cx, sub, "a history condition's value is a count: a number from 0 to 1000000000");
    else
        out->num = jv->valuedouble;
    out->value = jv != NULL ? cJSON_Duplicate(jv, 1) : NULL;
}

void tg__describe_history_cond(const struct cond *c, char *out, size_t n)
{
    static const char *const opn[] = {"eq", "neq", "in", "not_in", "lt", "lte", "gt", "gte", "regex", "contains",
                                      "exists"};
    const struct hcond *h = c->hist;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appendf(&b, "history{");
    const char *sep = "";
    struct {
        const char *what;
        char **v;
        int n;
    } lists[] = {{"tags", h->f.tags, h->f.ntags},
                 {"tools", h->f.tools, h->f.ntools},
                 {"resources", h->f.resources, h->f.nresources},
                 {"prompts", h->f.prompts, h->f.nprompts}};
    for (size_t l = 0; l < sizeof(lists) / sizeof(lists[0]); l++) {
        if (lists[l].n == 0)
            continue;
        tg_buf_appendf(&b, "%s%s [", sep, lists[l].what);
        for (int i = 0; i < lists[l].n; i++)
            tg_buf_appendf(&b, "%s%s", i ? " " : "", lists[l].v[i]);
        tg_buf_appendf(&b, "]");
        sep = ", ";
    }
    char w[32];
    tg__hist_duration(h->within_ms, w, sizeof(w));
    tg_buf_appendf(&b, "%swithin %s, scope %s", sep, w,
                   h->scope == HS_GRANT ? "grant" : h->scope == HS_SESSION ? "session" : "subject");
    (void)0;
    tg_buf_appendf(&b, "}%s %s %g", h->distinct >= 0 ? " distinct" : " count", opn[c->op], c->num);
    snprintf(out, n, "%.*s", (int)b.len, b.base ? b.base : "");
    tg_buf_dispose(&b);
}

/* ---- when -------------------------------------------------------------------------------- */

void tg__compile_when(struct tg__cctx *cx, const cJSON *j, const char *path, struct hwhen **out)
{
    char sub[700], s2[760];
    snprintf(sub, sizeof(sub), "%s.when", path);
    struct hwhen *w = tg_xcalloc(1, sizeof(*w));
    *out = w;
    if (!cJSON_IsObject(j)) {
        tg__perr(cx, sub, "must be a map {tags: [..], tools: [..]}");
        return;
    }
    static const char *const known[] = {"tags", "tools", NULL};
    tg__check_keys(cx, j, sub, known);
    const cJSON *jt = tg_json_get(j, "tags"), *jn = tg_json_get(j, "tools");
    if (jt == NULL && jn == NULL)
        tg__perr(cx, sub, "must name tags or tools (the rule applies to calls of a tool with one of the tags or "
                          "a name one of the tools matches)");
    if (jt != NULL) {
        snprintf(s2, sizeof(s2), "%s.tags", sub);
        filter_tags(cx, jt, s2, &w->f);
    }
    if (jn != NULL) {
        snprintf(s2, sizeof(s2), "%s.tools", sub);
        compile_globs(cx, jn, s2, &w->f.tools, &w->f.ntools);
    }
}

/* ---- brakes ------------------------------------------------------------------------------ */

static int whole_in(const cJSON *j, int lo, int hi)
{
    return cJSON_IsNumber(j) && j->valuedouble >= lo && j->valuedouble <= hi && j->valuedouble == floor(j->valuedouble);
}

void tg__compile_brake(struct tg__cctx *cx, const cJSON *j, const char *path, const char *tool, struct brake **out)
{
    char sub[700], s2[760];
    snprintf(sub, sizeof(sub), "%s.brake", path);
    struct brake *b = tg_xcalloc(1, sizeof(*b));
    *out = b;
    if (!cJSON_IsObject(j)) {
        tg__perr(cx, sub, "must be a map {repeats, within, cycle, tags, message}");
        return;
    }
    static const char *const known[] = {"repeats", "within", "cycle", "tags", "message", NULL};
    tg__check_keys(cx, j, sub, known);
    const cJSON *jr = tg_json_get(j, "repeats");
    snprintf(s2, sizeof(s2), "%s.repeats", sub);
    if (jr == NULL)
        tg__perr(cx, s2, "is required: how many identical calls are let through within the window");
    else if (!whole_in(jr, 1, MAX_REPEATS))
        tg__perr(cx, s2, "must be a whole number from 1 to %d", MAX_REPEATS);
    else
        b->repeats = (int)jr->valuedouble;
    b->within_ms = within_of(cx, tg_json_get(j, "within"), sub);
    const cJSON *jc = tg_json_get(j, "cycle");
    if (jc != NULL) {
        snprintf(s2, sizeof(s2), "%s.cycle", sub);
        if (!whole_in(jc, 2, MAX_CYCLE))
            tg__perr(cx, s2, "must be a whole number from 2 to %d: the longest sequence of calls to look for", MAX_CYCLE);
        else
            hpolicy_of(cx->p)->cycles = b->cycle = (int)jc->valuedouble;
    }
    const cJSON *jt = tg_json_get(j, "tags");
    if (jt != NULL) {
        snprintf(s2, sizeof(s2), "%s.tags", sub);
        if (strcmp(tool, "*") != 0)
            tg__perr(cx, s2, "only the brake of \"*\" selects tools by tag; this one applies to %s", tool);
        else
            tg__compile_tags(cx, jt, s2, &b->tags, &b->ntags);
    }
    const cJSON *jm = tg_json_get(j, "message");
    if (jm != NULL) {
        snprintf(s2, sizeof(s2), "%s.message", sub);
        if (!cJSON_IsString(jm) || jm->valuestring[0] == '\0' || strlen(jm->valuestring) > 400)
            tg__perr(cx, s2, "must be a string of 1 to 400 bytes");
        else
            b->message = tg_xstrdup(jm->valuestring);
    }
}

/* ---- tags of resources and prompts --------------------------------------------------------- */

void tg__compile_glob_tags(struct tg__cctx *cx, const cJSON *j, const char *path, int prompts)
{
    if (!cJSON_IsObject(j)) {
        tg__perr(cx, path, "must be a map {GLOB: [tags]}");
        return;
    }
    struct hpolicy *h = hpolicy_of(cx->p);
    struct tagged_glob **v = prompts ? &h->ptags : &h->rtags;
    int *n = prompts ? &h->nptags : &h->nrtags;
    for (const cJSON *e = j->child; e != NULL; e = e->next) {
        char sub[800];
        snprintf(sub, sizeof(sub), "%s.%s", path, e->string);
        if (e->string[0] == '\0') {
            tg__perr(cx, sub, "a pattern must not be empty");
            continue;
        }
        *v = tg_xrealloc(*v, (size_t)(*n + 1) * sizeof(**v));
        struct tagged_glob *g = &(*v)[*n];
        g->glob = tg_xstrdup(e->string);
        tg__compile_tags(cx, e, sub, &g->tags, &g->ntags);
        (*n)++;
    }
}

/* ---- the whole policy ------------------------------------------------------------------------ */

static int tool_records(struct ptool *t)
{
    for (int r = 0; r < t->nrules; r++)
        t->rules[r].gate = t->rules[r].deny || t->rules[r].when != NULL;
    if (t->ntags > 0 || t->brake != NULL)
        return 1;
    for (int r = 0; r < t->nrules; r++)
        for (int k = 0; k < t->rules[r].nconds; k++)
            if (t->rules[r].conds[k].hist != NULL)
                return 1;
    return 0;
}

static void hash_tags(struct ptool *t)
{
    if (t->ntags == 0)
        return;
    t->tagh = tg_xcalloc((size_t)t->ntags, sizeof(*t->tagh));
    for (int i = 0; i < t->ntags; i++)
        t->tagh[i] = tg_hist_tag_hash(t->tags[i], strlen(t->tags[i]));
}

void tg__finish_history(struct tg_policy *p)
{
    for (int i = 0; i < p->ntools; i++)
        hash_tags(&p->tools[i]);
    int rec = p->hist != NULL && (p->hist->nrtags > 0 || p->hist->nptags > 0);
    for (int i = 0; i < p->ntools; i++)
        rec |= tool_records(&p->tools[i]);
    if (p->wildcard != NULL)
        rec |= tool_records(p->wildcard);
    p->records = rec;
    if (rec)
        hpolicy_of(p);
}

void tg__free_hcond(struct hcond *h)
{
    if (h == NULL)
        return;
    free_filter(&h->f);
    free(h);
}

void tg__free_hwhen(struct hwhen *w)
{
    if (w == NULL)
        return;
    free_filter(&w->f);
    free(w);
}

void tg__free_brake(struct brake *b)
{
    if (b == NULL)
        return;
    tg__free_tags(b->tags, b->ntags);
    free(b->message);
    free(b);
}

void tg__free_hpolicy(struct hpolicy *h)
{
    if (h == NULL)
        return;
    for (int i = 0; i < h->npaths; i++) {
        free(h->paths[i].text);
        free_list(h->paths[i].seg, h->paths[i].n);
        free(h->paths[i].idx);
    }
    struct tagged_glob *gs[2] = {h->rtags, h->ptags};
    int ns[2] = {h->nrtags, h->nptags};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < ns[k]; i++) {
            free(gs[k][i].glob);
            tg__free_tags(gs[k][i].tags, gs[k][i].ntags);
        }
        free(gs[k]);
    }
    free(h);
}
