/* Pinned tool definitions (policy/pins.h): the pin file, its strict loader and writer, and what
 * the gateway learnt of the pinned tools from the tools/list answers it relayed. */
#include "policy/pins.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/base/sha256.h"
#include "policy/compile_tool.h"
#include "policy/policy_int.h"

static const char *const DEF_FIELDS[] = {"name", "description", "inputSchema", "outputSchema", "annotations", NULL};

/* One pinned tool. Owned by its struct tg_pins. */
struct pin {
    char *name;
    uint8_t sha[32];
    cJSON *def;
};

/* A loaded pin file. Immutable and refcounted: the conf holds one reference. */
struct tg_pins {
    int refcnt;
    char *path;
    struct pin *v; /* sorted by name */
    size_t n;
    cJSON *root;
};

cJSON *tg_pins_definition_of(const cJSON *tool)
{
    const cJSON *name = tg_json_get(tool, "name");
    if (!cJSON_IsString(name))
        return NULL;
    cJSON *d = cJSON_CreateObject();
    for (int i = 0; DEF_FIELDS[i]; i++) {
        const cJSON *f = tg_json_get(tool, DEF_FIELDS[i]);
        if (f != NULL)
            cJSON_AddItemToObject(d, DEF_FIELDS[i], cJSON_Duplicate(f, 1));
    }
    return d;
}

/* The hash of a definition object (members other than DEF_FIELDS are not part of it). */
static void hash_def(const cJSON *tool, uint8_t out[32])
{
    /* References, not copies: a schema may be large, and this runs for every pinned tool of
     * every tools/list answer relayed. */
    cJSON *d = cJSON_CreateObject();
    for (int i = 0; DEF_FIELDS[i]; i++) {
        cJSON *f = tg_json_get(tool, DEF_FIELDS[i]);
        if (f != NULL)
            cJSON_AddItemReferenceToObject(d, DEF_FIELDS[i], f);
    }
    tg_json_canon_sha256(d, out);
    cJSON_Delete(d);
}

void tg_pins_hash(const cJSON *tool, uint8_t out[32]) { hash_def(tool, out); }

static int cmp_pin(const void *a, const void *b)
{
    return strcmp(((const struct pin *)a)->name, ((const struct pin *)b)->name);
}

/* "FILE: PATH: reason\n" */
static void perr(struct tg_buf *err, const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void perr(struct tg_buf *err, const char *file, const char *path, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tg_buf_appendf(err, "%s: %s%s%s\n", file, path, path[0] ? ": " : "", msg);
}

static int check_keys(struct tg_buf *err, const char *file, const cJSON *o, const char *path,
                      const char *const *known)
{
    int bad = 0;
    for (const cJSON *c = o->child; c != NULL; c = c->next) {
        int ok = 0;
        for (int i = 0; known[i]; i++)
            ok |= strcmp(c->string, known[i]) == 0;
        if (ok)
            continue;
        char p[600];
        snprintf(p, sizeof(p), "%s%s%s", path, path[0] ? "." : "", c->string);
        const char *near = tg__policy_suggest_key(c->string, known);
        if (near != NULL)
            perr(err, file, p, "unknown field; did you mean `%s`?", near);
        else
            perr(err, file, p, "unknown field");
        bad = 1;
    }
    return bad;
}

static int hex_decode(const char *s, uint8_t out[32])
{
    if (strlen(s) != 64)
        return -1;
    for (int i = 0; i < 64; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0)
            return -1;
        if (i % 2 == 0)
            out[i / 2] = (uint8_t)(v << 4);
        else
            out[i / 2] |= (uint8_t)v;
    }
    return 0;
}

static char *read_file(const char *path, size_t *n, struct tg_buf *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perr(err, path, "", "cannot open: %s", strerror(errno));
        return NULL;
    }
    struct tg_buf b;
    tg_buf_init(&b);
    char chunk[65536];
    size_t r;
    while ((r = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (b.len + r > TG_PINS_MAX_BYTES) {
            perr(err, path, "", "larger than %u bytes", TG_PINS_MAX_BYTES);
            fclose(f);
            tg_buf_dispose(&b);
            return NULL;
        }
        tg_buf_append(&b, chunk, r);
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        perr(err, path, "", "cannot read");
        tg_buf_dispose(&b);
        return NULL;
    }
    *n = b.len;
    tg_buf_append(&b, "", 1);
    return b.base;
}

/* One entry of "tools": 0 and *p filled, or -1 (reported). */
static int load_one(struct tg_buf *err, const char *file, const cJSON *e, struct pin *p)
{
    char path[600];
    snprintf(path, sizeof(path), "tools.%s", e->string);
    static const char *const known[] = {"sha256", "definition", NULL};
    if (!cJSON_IsObject(e)) {
        perr(err, file, path, "must be an object {sha256, definition}");
        return -1;
    }
    int bad = check_keys(err, file, e, path, known);
    const cJSON *sha = tg_json_get(e, "sha256"), *def = tg_json_get(e, "definition");
    char sub[640];
    snprintf(sub, sizeof(sub), "%s.sha256", path);
    if (!cJSON_IsString(sha) || hex_decode(sha->valuestring, p->sha) != 0) {
        perr(err, file, sub, "must be 64 lowercase hex digits (a SHA-256)");
        bad = 1;
    }
    snprintf(sub, sizeof(sub), "%s.definition", path);
    if (!cJSON_IsObject(def)) {
        perr(err, file, sub, "must be the tool's definition (an object)");
        return -1;
    }
    bad |= check_keys(err, file, def, sub, DEF_FIELDS);
    const cJSON *name = tg_json_get(def, "name");
    if (!cJSON_IsString(name) || strcmp(name->valuestring, e->string) != 0) {
        snprintf(sub, sizeof(sub), "%s.definition.name", path);
        perr(err, file, sub, "must be the tool's name, \"%s\"", e->string);
        bad = 1;
    }
    if (bad)
        return -1;
    uint8_t h[32];
    hash_def(def, h);
    if (memcmp(h, p->sha, 32) != 0) {
        char hex[65];
        tg_hex_encode(h, 32, hex);
        snprintf(sub, sizeof(sub), "%s.sha256", path);
        perr(err, file, sub,
             "does not match its definition (whose sha256 is %s): the file was edited by hand; pin the tool again "
             "(tollgate pin UPSTREAM)",
             hex);
        return -1;
    }
    p->name = tg_xstrdup(e->string);
    p->def = (cJSON *)def;
    return 0;
}

int tg_pins_load(const char *path, const char *upstream, struct tg_pins **out, struct tg_buf *err,
                 struct tg_buf *warn)
{
    *out = NULL;
    size_t n = 0;
    char *text = read_file(path, &n, err);
    if (text == NULL)
        return -1;
    struct tg_json_doc doc;
    const char *jerr = NULL;
    size_t off = 0;
    if (tg_json_parse(text, n, 256, 1, &doc, &jerr, &off) != 0) {
        perr(err, path, "", "not JSON (%s at byte %zu)", jerr ? jerr : "invalid", off);
        free(text);
        return -1;
    }
    free(text);
    cJSON *root = doc.root;
    static const char *const known[] = {"version", "upstream", "tools", NULL};
    if (!cJSON_IsObject(root)) {
        perr(err, path, "", "must be an object {version, upstream, tools}");
        cJSON_Delete(root);
        return -1;
    }
    int bad = check_keys(err, path, root, "", known);
    const cJSON *ver = tg_json_get(root, "version"), *up = tg_json_get(root, "upstream"),
                *tools = tg_json_get(root, "tools");
    if (!cJSON_IsString(ver) || strcmp(ver->valuestring, "1") != 0) {
        perr(err, path, "version", "must be \"1\"");
        bad = 1;
    }
    if (!cJSON_IsString(up) || up->valuestring[0] == '\0') {
        perr(err, path, "upstream", "must be the upstream's name (a string)");
        bad = 1;
    } else if (upstream != NULL && strcmp(up->valuestring, upstream) != 0 && warn != NULL) {
        tg_buf_appendf(warn, "%s: upstream: the file pins upstream \"%s\", but the conf uses it for \"%s\"\n", path,
                       up->valuestring, upstream);
    }
    if (!cJSON_IsObject(tools)) {
        perr(err, path, "tools", "must be an object {TOOL: {sha256, definition}}");
        cJSON_Delete(root);
        return -1;
    }
    int count = cJSON_GetArraySize(tools);
    if (count > TG_PINS_MAX_TOOLS) {
        perr(err, path, "tools", "pins %d tools; at most %d", count, TG_PINS_MAX_TOOLS);
        cJSON_Delete(root);
        return -1;
    }
    struct tg_pins *p = tg_xcalloc(1, sizeof(*p));
    p->refcnt = 1;
    p->path = tg_xstrdup(path);
    p->root = root;
    p->v = tg_xcalloc(count > 0 ? (size_t)count : 1, sizeof(*p->v));
    for (const cJSON *e = tools->child; e != NULL; e = e->next) {
        if (load_one(err, path, e, &p->v[p->n]) == 0)
            p->n++;
        else
            bad = 1;
    }
    qsort(p->v, p->n, sizeof(*p->v), cmp_pin);
    if (bad) {
        tg_pins_unref(p);
        return -1;
    }
    *out = p;
    return 0;
}

struct tg_pins *tg_pins_ref(struct tg_pins *p)
{
    if (p != NULL)
        p->refcnt++;
    return p;
}

void tg_pins_unref(struct tg_pins *p)
{
    if (p == NULL || --p->refcnt > 0)
        return;
    for (size_t i = 0; i < p->n; i++)
        free(p->v[i].name);
    free(p->v);
    free(p->path);
    cJSON_Delete(p->root);
    free(p);
}

const char *tg_pins_path(const struct tg_pins *p) { return p->path; }
size_t tg_pins_count(const struct tg_pins *p) { return p->n; }
const char *tg_pins_name(const struct tg_pins *p, size_t i) { return p->v[i].name; }
const cJSON *tg_pins_definition(const struct tg_pins *p, size_t i) { return p->v[i].def; }

const uint8_t *tg_pins_find(const struct tg_pins *p, const char *tool)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(tool, p->v[mid].name);
        if (c == 0)
            return p->v[mid].sha;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

static void newline(struct tg_buf *out, int depth)
{
    tg_buf_append(out, "\n", 1);
    for (int i = 0; i < depth; i++)
        tg_buf_append(out, "  ", 2);
}

/* Compact JSON p[0..n) (tg_json_write's) indented: strings copied as they are. */
static void indent(struct tg_buf *out, const char *p, size_t n)
{
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (in_str) {
            tg_buf_append(out, &c, 1);
            if (c == '\\' && i + 1 < n)
                tg_buf_append(out, &p[++i], 1);
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"') {
            in_str = 1;
            tg_buf_append(out, &c, 1);
        } else if (c == '{' || c == '[') {
            tg_buf_append(out, &c, 1);
            if (i + 1 < n && (p[i + 1] == '}' || p[i + 1] == ']')) {
                tg_buf_append(out, &p[++i], 1); /* {} and [] stay on one line */
                continue;
            }
            newline(out, ++depth);
        } else if (c == '}' || c == ']') {
            newline(out, --depth);
            tg_buf_append(out, &c, 1);
        } else if (c == ',') {
            tg_buf_append(out, &c, 1);
            newline(out, depth);
        } else if (c == ':') {
            tg_buf_append(out, ": ", 2);
        } else {
            tg_buf_append(out, &c, 1);
        }
    }
}

void tg_pins_write(struct tg_buf *out, const char *upstream, const cJSON *tools)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1");
    cJSON_AddStringToObject(root, "upstream", upstream);
    cJSON *map = cJSON_AddObjectToObject(root, "tools");
    for (const cJSON *t = cJSON_IsArray(tools) ? tools->child : NULL; t != NULL; t = t->next) {
        cJSON *def = tg_pins_definition_of(t);
        if (def == NULL || tg_json_get(map, tg_json_get(def, "name")->valuestring) != NULL) {
            cJSON_Delete(def); /* no name, or a name listed twice: the first one is pinned */
            continue;
        }
        uint8_t h[32];
        char hex[65];
        hash_def(def, h);
        tg_hex_encode(h, 32, hex);
        cJSON *e = cJSON_AddObjectToObject(map, tg_json_get(def, "name")->valuestring);
        cJSON_AddStringToObject(e, "sha256", hex);
        cJSON_AddItemToObject(e, "definition", def);
    }
    /* Written by tg_json_write (numbers as the server spelled them), then indented two spaces a
     * level: one member a line, so that a reviewer's diff of two pin files reads. */
    struct tg_buf flat;
    tg_buf_init(&flat);
    tg_json_write(&flat, root);
    cJSON_Delete(root);
    indent(out, flat.base, flat.len);
    tg_buf_dispose(&flat);
    tg_buf_append(out, "\n", 1);
}

int tg_pins_write_file(const char *path, const char *upstream, const cJSON *tools, struct tg_buf *err)
{
    struct tg_buf b, tmp;
    tg_buf_init(&b);
    tg_buf_init(&tmp);
    tg_pins_write(&b, upstream, tools);
    tg_buf_appendf(&tmp, "%s.tmp.%ld", path, (long)getpid());
    tg_buf_append(&tmp, "", 1);
    int rc = -1;
    FILE *f = fopen(tmp.base, "w");
    int wrote = f != NULL && fwrite(b.base, 1, b.len, f) == b.len;
    if (f != NULL && fclose(f) != 0)
        wrote = 0;
    if (f == NULL) {
        tg_buf_appendf(err, "cannot write %s: %s", tmp.base, strerror(errno));
    } else if (!wrote) {
        tg_buf_appendf(err, "cannot write %s: %s", tmp.base, strerror(errno));
        unlink(tmp.base);
    } else if (rename(tmp.base, path) != 0) {
        tg_buf_appendf(err, "cannot rename %s to %s: %s", tmp.base, path, strerror(errno));
        unlink(tmp.base);
    } else {
        rc = 0;
    }
    tg_buf_dispose(&b);
    tg_buf_dispose(&tmp);
    return rc;
}

/* ---- what the gateway learnt ------------------------------------------------------------- */

/* One pinned tool as last listed. */
struct seen_tool {
    char *name;
    uint8_t sha[32];   /* its definition's hash as last listed */
    uint64_t gen;      /* the upstream's generation when it was listed */
    uint64_t mismatches; /* distinct definitions seen that were not the pinned one */
};

struct seen_upstream {
    char *name;
    uint64_t gen; /* bumped by notifications/tools/list_changed */
    struct seen_tool *v; /* sorted by name */
    size_t n, cap;
};

struct tg_pins_seen {
    struct seen_upstream *u;
    size_t n;
};

struct tg_pins_seen *tg_pins_seen_new(void) { return tg_xcalloc(1, sizeof(struct tg_pins_seen)); }

void tg_pins_seen_free(struct tg_pins_seen *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->n; i++) {
        for (size_t j = 0; j < s->u[i].n; j++)
            free(s->u[i].v[j].name);
        free(s->u[i].v);
        free(s->u[i].name);
    }
    free(s->u);
    free(s);
}

static struct seen_upstream *seen_up(const struct tg_pins_seen *s, const char *upstream, int add)
{
    if (s == NULL)
        return NULL; /* nothing learnt: every pinned tool is "not seen" */
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->u[i].name, upstream) == 0)
            return &s->u[i];
    if (!add || s->n >= TG_PINS_SEEN_UPSTREAMS)
        return NULL;
    struct tg_pins_seen *m = (struct tg_pins_seen *)s;
    m->u = tg_xrealloc(m->u, (m->n + 1) * sizeof(*m->u));
    struct seen_upstream *u = &m->u[m->n++];
    memset(u, 0, sizeof(*u));
    u->name = tg_xstrdup(upstream);
    u->gen = 1;
    return u;
}

/* The entry of tool, or where it goes (*at) when absent. */
static struct seen_tool *seen_tool(const struct seen_upstream *u, const char *tool, size_t *at)
{
    size_t lo = 0, hi = u->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(tool, u->v[mid].name);
        if (c == 0)
            return &u->v[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (at != NULL)
        *at = lo;
    return NULL;
}

void tg_pins_seen_stale(struct tg_pins_seen *s, const char *upstream)
{
    struct seen_upstream *u = seen_up(s, upstream, 0);
    if (u != NULL) {
        u->gen++;
        tg_log(TG_LOG_DEBUG, "upstream's tools changed; pinned tools must be listed again", "upstream=%s", upstream);
    }
}

/* noinline (here and below): with link-time optimisation they would be inlined into the relay
 * and the list rewrite, whose every message then pays for the registers they need. */
__attribute__((noinline, cold)) void tg_pins_seen_note(struct tg_pins_seen *s, const struct tg_pins *pins,
                                                     const char *upstream, const char *p, size_t n)
{
    /* Looked for in the bytes, not the tree: a notification is relayed as it came, unparsed. One
     * that only mentions the name (in a log message's text) makes the tools stale too, which
     * costs a tools/list and never lets a changed tool through. */
    static const char lc[] = "tools/list_changed";
    if (pins != NULL && s != NULL && memmem(p, n, lc, sizeof(lc) - 1) != NULL)
        tg_pins_seen_stale(s, upstream);
}

__attribute__((noinline)) int tg_pins_admit_listed(struct tg_pins_seen *s, const struct tg_pins *pins,
                                                   const char *upstream, const struct tg_policy *pol, const cJSON *tool)
{
    const cJSON *name = tg_json_get(tool, "name");
    if (!cJSON_IsString(name))
        return 0;
    const uint8_t *pin = tg_pins_find(pins, name->valuestring);
    if (pin == NULL)
        return !pol->default_deny;
    uint8_t h[32];
    hash_def(tool, h);
    struct seen_upstream *u = seen_up(s, upstream, 1);
    if (u == NULL)
        return memcmp(h, pin, 32) == 0; /* past the bound: shown if it matches, never callable */
    size_t at = 0;
    struct seen_tool *t = seen_tool(u, name->valuestring, &at);
    int changed = t == NULL || memcmp(t->sha, h, 32) != 0;
    if (t == NULL && u->n < TG_PINS_MAX_TOOLS) {
        if (u->n == u->cap) {
            u->cap = u->cap ? u->cap * 2 : 16;
            u->v = tg_xrealloc(u->v, u->cap * sizeof(*u->v));
        }
        memmove(&u->v[at + 1], &u->v[at], (u->n - at) * sizeof(*u->v));
        t = &u->v[at];
        memset(t, 0, sizeof(*t));
        t->name = tg_xstrdup(name->valuestring);
        u->n++;
    }
    if (t != NULL) {
        memcpy(t->sha, h, 32);
        t->gen = u->gen;
    }
    if (memcmp(h, pin, 32) == 0)
        return 1;
    if (changed) {
        /* Once per definition: the next lists that show the same change say nothing more. */
        char hex[65], was[65];
        tg_hex_encode(h, 32, hex);
        tg_hex_encode(pin, 32, was);
        tg_log(TG_LOG_WARN, "tool definition differs from its pin; tool hidden and its calls denied",
               "upstream=%s tool=%s pinned=%.16s listed=%.16s pins=%s", upstream, name->valuestring, was, hex,
               pins->path);
        if (t != NULL)
            t->mismatches++;
    }
    return 0;
}

int tg_pins_admit_call(const struct tg_pins_seen *s, const struct tg_pins *pins, const char *upstream,
                       const struct tg_policy *pol, const char *tool, char *why, size_t n)
{
    const uint8_t *pin = tg_pins_find(pins, tool);
    if (pin == NULL) {
        if (!pol->default_deny)
            return 1;
        snprintf(why, n, "tool \"%s\" of upstream \"%s\" is not pinned, and the policy denies by default", tool,
                 upstream);
        return 0;
    }
    const struct seen_upstream *u = seen_up(s, upstream, 0);
    const struct seen_tool *t = u != NULL ? seen_tool(u, tool, NULL) : NULL;
    if (t == NULL || t->gen != u->gen) {
        snprintf(why, n,
                 "tool \"%s\" is pinned, and the gateway has not seen its definition from upstream \"%s\" since %s; "
                 "list the tools (tools/list) and call it again",
                 tool, upstream, t == NULL ? "it started" : "the upstream said its tools changed");
        return 0;
    }
    if (memcmp(t->sha, pin, 32) != 0) {
        snprintf(why, n,
                 "the definition of tool \"%s\" changed since it was pinned; an operator must review it "
                 "(tollgate pin --diff %s)",
                 tool, upstream);
        return 0;
    }
    return 1;
}

void tg_pins_seen_each(const struct tg_pins_seen *s,
                       void (*fn)(void *ud, const char *upstream, const char *tool, uint64_t mismatches), void *ud)
{
    for (size_t i = 0; s != NULL && i < s->n; i++)
        for (size_t j = 0; j < s->u[i].n; j++)
            if (s->u[i].v[j].mismatches > 0)
                fn(ud, s->u[i].name, s->u[i].v[j].name, s->u[i].v[j].mismatches);
}

int tg_pins_explain(const struct tg_pins *pins, const struct tg_policy *pol, const char *tool, char *out, size_t n)
{
    const uint8_t *pin = tg_pins_find(pins, tool);
    if (pin != NULL) {
        char hex[65];
        tg_hex_encode(pin, 32, hex);
        snprintf(out, n,
                 "pinned (sha256 %.16s… in %s): shown and callable only while the upstream lists this definition",
                 hex, pins->path);
    } else if (pol->default_deny) {
        snprintf(out, n, "not pinned in %s, and the policy denies by default: hidden and denied (rule \"pin\")",
                 pins->path);
        return 1;
    } else {
        snprintf(out, n, "not pinned in %s; the policy allows by default, so the policy alone decides", pins->path);
    }
    return 0;
}
