/* `tollgate scan`: tools to a starting policy (policy/suggest.h). */
#include "policy/suggest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/suggest_int.h"
#include "policy/uri.h"

/* The words, by class. A word matches itself and its usual inflections (policy/suggest_words.c), in
 * the tool's name (split at non-letters and camelCase humps) or in its description. */
static const char *const approve_words[] = {"execute", "exec", "run", "eval", "shell", "command",
                                            "delete", "remove", "drop", "destroy", "pay", "transfer", NULL};
static const char *const limit_words[] = {"write", "send", "email", "post", "publish",
                                          "create", "update", "modify", NULL};
static const char *const read_words[] = {"get", "list", "read", "search", "fetch", "query",
                                         "describe", "show", "view", "find", NULL};

const char tg_suggest_heuristics_help[] =
    "How tools are classified (the most cautious class found wins):\n"
    "  deny         a word of: env environ environment getenv printenv dotenv secret token credential\n"
    "               creds password passwd passphrase key apikey cookie bearer auth -> action: deny,\n"
    "               whatever readOnlyHint says (it may read the environment, credentials or secrets;\n"
    "               allow it by hand if it does not)\n"
    "  approve      a word of: execute exec run eval shell command delete remove drop destroy pay\n"
    "               transfer, or the annotation destructiveHint: true -> action: approve (a human\n"
    "               approves each call)\n"
    "  rate limit   a word of: write send email post publish create update modify ->\n"
    "               at most 10 calls a minute per grant\n"
    "  allow        a word of: get list read search fetch query describe show view find, or the\n"
    "               annotation readOnlyHint: true (which never lifts a tool out of the classes above)\n"
    "  denied       nothing matched: the tool is left out, so default: deny refuses and hides it\n"
    "Words are looked for in the tool's name (split at every non-letter and at camelCase humps, an\n"
    "acronym's end too: getAWSSecret is get, aws, secret) and its description (split so too for the\n"
    "deny words: \"returns the clientSecret\"), case-insensitively, with plain inflections (deletes,\n"
    "deleted, deleting, deletion, running).\n"
    "Whole words only: \"keyboard\", \"monkey\" or \"tokenizer\" match nothing.\n"
    "Every tool's comment in the YAML says which word (or annotation) decided and where it was.\n"
    "Resources and prompts (when the server offers them) go into \"resources\" and \"prompts\" groups with\n"
    "default: deny: each listed resource URI, each resource template (an {expression} becomes * within\n"
    "one path segment, or ** when it may hold a /) and each prompt is allowed, unless a word of the\n"
    "deny list above is in its URI, name or description: then it is denied.\n"
    "The server wrote its names, descriptions and annotations: review the policy before use.\n";

/* What a keyword means, for the comment. */
static const char *risk_of(const char *kw)
{
    static const char *const money[] = {"pay", "transfer", NULL};
    static const char *const destroy[] = {"delete", "remove", "drop", "destroy", NULL};
    static const char *const sends[] = {"send", "email", "post", "publish", NULL};
    if (tg__suggest_in_list(kw, money))
        return "it may move money";
    if (tg__suggest_in_list(kw, destroy))
        return "it may destroy data";
    if (tg__suggest_in_list(kw, sends))
        return "it sends something out";
    if (tg__suggest_in_list(kw, limit_words))
        return "it changes data";
    return "it may run code or commands";
}

static int hint_true(const cJSON *tool, const char *hint)
{
    const cJSON *ann = tg_json_get(tool, "annotations");
    return cJSON_IsObject(ann) && cJSON_IsTrue(tg_json_get(ann, hint));
}

void tg_suggest_classify(const cJSON *tool, struct tg_scan_verdict *v)
{
    const cJSON *jn = tg_json_get(tool, "name");
    const cJSON *jd = tg_json_get(tool, "description");
    const char *name = cJSON_IsString(jn) ? jn->valuestring : "";
    const char *desc = cJSON_IsString(jd) ? jd->valuestring : NULL;
    char why[128];
    const char *kw = "";
    int ro = hint_true(tool, "readOnlyHint");
    tg_suggest_tags(tool, v);
    if (strcmp(name, "*") == 0) {
        /* In a policy "*" is every tool: a server must not pick the rule for all of them. */
        v->cls = TG_SCAN_UNKNOWN;
        v->tags = 0;
        v->tags_why[0] = '\0';
        snprintf(v->why, sizeof(v->why), "a tool named \"*\" cannot be listed (in a policy \"*\" means every tool): "
                 "denied by default (default: deny)");
    } else if (tg__suggest_match(name, desc, tg__suggest_secret_words, why, sizeof(why), &kw)) {
        v->cls = TG_SCAN_SECRET;
        snprintf(v->why, sizeof(v->why), "%s: it may read the environment, credentials or secrets, so it is denied%s",
                 why, ro ? " (its readOnlyHint is not trusted over that)" : "");
    } else if (tg__suggest_match(name, desc, approve_words, why, sizeof(why), &kw)) {
        v->cls = TG_SCAN_APPROVE;
        snprintf(v->why, sizeof(v->why), "%s: %s, so a human approves each call%s",
                 why, risk_of(kw), ro ? " (its readOnlyHint is not trusted over that)" : "");
    } else if (hint_true(tool, "destructiveHint")) {
        v->cls = TG_SCAN_APPROVE;
        snprintf(v->why, sizeof(v->why), "annotation destructiveHint: true: a human approves each call");
    } else if (tg__suggest_match(name, desc, limit_words, why, sizeof(why), &kw)) {
        v->cls = TG_SCAN_LIMIT;
        snprintf(v->why, sizeof(v->why), "%s: %s, so it is allowed at most %d times a minute per grant%s",
                 why, risk_of(kw), TG_SCAN_LIMIT_PER_MINUTE, ro ? " (its readOnlyHint is not trusted over that)" : "");
    } else if (ro) {
        v->cls = TG_SCAN_READ;
        snprintf(v->why, sizeof(v->why), "annotation readOnlyHint: true: allowed");
    } else if (tg__suggest_match(name, desc, read_words, why, sizeof(why), &kw)) {
        v->cls = TG_SCAN_READ;
        snprintf(v->why, sizeof(v->why), "%s: it looks read-only, so it is allowed", why);
    } else {
        v->cls = TG_SCAN_UNKNOWN;
        snprintf(v->why, sizeof(v->why), "no word of the lists matched: denied by default (default: deny)");
    }
}

/* Peer text made safe for one comment line: control characters and the characters YAML counts
 * as line breaks (U+0085, U+2028, U+2029) become spaces; cut at max bytes on a UTF-8 boundary. */
static void append_comment_text(struct tg_buf *out, const char *s, size_t max)
{
    size_t n = strlen(s), i = 0;
    int cut = n > max;
    if (cut) {
        n = max;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f) {
            tg_buf_append(out, " ", 1);
            i++;
        } else if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85) {
            tg_buf_append(out, " ", 1);
            i += 2;
        } else if (c == 0xE2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
                   ((unsigned char)s[i + 2] == 0xA8 || (unsigned char)s[i + 2] == 0xA9)) {
            tg_buf_append(out, " ", 1);
            i += 3;
        } else {
            tg_buf_append(out, s + i, 1);
            i++;
        }
    }
    if (cut)
        tg_buf_appends(out, "...");
}

/* A YAML double-quoted scalar: JSON's escapes, plus \u escapes for DEL and the characters
 * libyaml would take as line breaks or a BOM inside the quotes. */
static void append_yaml_string(struct tg_buf *out, const char *s)
{
    tg_buf_append(out, "\"", 1);
    size_t n = strlen(s), run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        size_t skip = 0;
        char tmp[8];
        if (c < 0x20 || c == 0x7f) {
            snprintf(tmp, sizeof(tmp), "\\u%04x", c);
            esc = tmp;
        } else if (c == '"') {
            esc = "\\\"";
        } else if (c == '\\') {
            esc = "\\\\";
        } else if (c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85) {
            esc = "\\u0085", skip = 1;
        } else if (c == 0xE2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
                   ((unsigned char)s[i + 2] == 0xA8 || (unsigned char)s[i + 2] == 0xA9)) {
            esc = (unsigned char)s[i + 2] == 0xA8 ? "\\u2028" : "\\u2029", skip = 2;
        } else if (c == 0xEF && i + 2 < n && (unsigned char)s[i + 1] == 0xBB && (unsigned char)s[i + 2] == 0xBF) {
            esc = "\\ufeff", skip = 2;
        }
        if (esc == NULL)
            continue;
        tg_buf_append(out, s + run, i - run);
        tg_buf_appends(out, esc);
        i += skip;
        run = i + 1;
    }
    tg_buf_append(out, s + run, n - run);
    tg_buf_append(out, "\"", 1);
}

/* The tools to write: index of the first tool with each string name, or -1. */
static int first_of_name(const cJSON *tools, const cJSON *tool)
{
    const char *name = tg_json_get(tool, "name")->valuestring;
    for (const cJSON *t = tools->child; t != tool; t = t->next) {
        const cJSON *n = tg_json_get(t, "name");
        if (cJSON_IsString(n) && strcmp(n->valuestring, name) == 0)
            return 0;
    }
    return 1;
}

static int usable(const cJSON *tools, const cJSON *t)
{
    const cJSON *n = tg_json_get(t, "name");
    return cJSON_IsObject(t) && cJSON_IsString(n) && n->valuestring[0] != '\0' && first_of_name(tools, t);
}

/* ---- resources and prompts ----------------------------------------------------------------- */

/* One entry of a "resources" or "prompts" group, from one listed resource, template or prompt. */
struct gentry {
    char *glob;        /* what the policy names (NULL: it cannot be named safely: left out) */
    int deny;          /* a secret word: denied */
    const char *label; /* name, for the comment */
    const char *desc;  /* description, for the comment; may be NULL */
    char why[200];
};

/* A word of the deny list in the URI, the name or the description: writes why. */
static int secret_in(const char *uri, const char *name, const char *desc, char *why, size_t cap)
{
    const char *kw = NULL;
    char w[64];
    const char *where = NULL;
    if (uri != NULL && tg__suggest_find_word(uri, strlen(uri), 1, tg__suggest_secret_words, w, sizeof(w), &kw))
        where = "URI";
    else if (name != NULL && tg__suggest_find_word(name, strlen(name), 1, tg__suggest_secret_words, w, sizeof(w), &kw))
        where = "name";
    else if (desc != NULL && tg__suggest_find_word(desc, strlen(desc), 1, tg__suggest_secret_words, w, sizeof(w), &kw))
        where = "description";
    if (where == NULL)
        return 0;
    snprintf(why, cap, "%s says \"%s\": it may hold credentials or secrets, so it is denied", where, w);
    return 1;
}

/* An RFC 6570 URI template as a policy glob: a simple {var} expands within one path segment (its
 * value is percent-encoded, a / included), so it becomes *; an expression with an operator
 * ({+var}, {/var}, {?q}...), an explode (*) or several variables may hold a /, so it becomes **.
 * Adjacent wildcards merge (two * stay one segment; anything with ** crosses). NULL when the
 * template has a literal * (a policy would read it as a wildcard) or an unclosed brace. */
static char *template_glob(const char *t)
{
    struct tg_buf b;
    tg_buf_init(&b);
    for (const char *p = t; *p;) {
        if (*p == '*' || *p == '}')
            goto bad;
        if (*p != '{') {
            tg_buf_append(&b, p++, 1);
            continue;
        }
        const char *end = strchr(p, '}');
        if (end == NULL || end == p + 1)
            goto bad;
        int wide = strchr("+#./;?&", p[1]) != NULL;
        for (const char *q = p + 1; q < end; q++)
            wide |= *q == '*' || *q == ',' || *q == '{';
        size_t stars = 0;
        while (stars < b.len && b.base[b.len - 1 - stars] == '*')
            stars++;
        size_t want = wide || stars >= 2 ? 2 : 1;
        if (want > stars)
            tg_buf_append(&b, "**", want - stars);
        p = end + 1;
    }
    tg_buf_append(&b, "", 1);
    return tg_buf_release(&b);
bad:
    tg_buf_dispose(&b);
    return NULL;
}

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = tg_json_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A resource glob in the normal form the policy decides URIs in (policy/uri.h), which a policy
 * requires of a glob with a scheme: 0 (and e->why) for a URI that form refuses. */
static int normal_glob(struct gentry *e)
{
    size_t n = strlen(e->glob);
    char *norm = tg_xmalloc(n + 1);
    const char *why;
    if (tg_uri_normalize(e->glob, n, norm, &why) < 0) {
        tg_xfree(norm);
        free(e->glob);
        e->glob = NULL;
        snprintf(e->why, sizeof(e->why), "a URI that %s is refused by the gateway: left out (denied)", why);
        return 0;
    }
    free(e->glob);
    e->glob = norm;
    return 1;
}

/* kind: 0 a resource (uri), 1 a resource template (uriTemplate), 2 a prompt (name). */
static void group_entry(const cJSON *item, int kind, struct gentry *e)
{
    memset(e, 0, sizeof(*e));
    const char *key = kind == 0 ? str_of(item, "uri") : kind == 1 ? str_of(item, "uriTemplate") : str_of(item, "name");
    const char *name = str_of(item, "name");
    e->label = key != NULL ? key : "(no name)";
    e->desc = str_of(item, "description");
    if (key == NULL || key[0] == '\0') {
        snprintf(e->why, sizeof(e->why), "no %s: left out (denied)", kind == 0 ? "uri" : kind == 1 ? "uriTemplate" : "name");
        return;
    }
    if (kind != 2 && name != NULL && strcmp(name, key) != 0)
        e->desc = e->desc != NULL ? e->desc : name;
    if (kind == 1) {
        e->glob = template_glob(key);
        if (e->glob == NULL) {
            snprintf(e->why, sizeof(e->why), "a template with a literal * or a brace out of place cannot be a glob: left out (denied)");
            return;
        }
        /* A template whose scheme is itself a variable ({uri}, {scheme}://x) would allow every
         * resource of every scheme. */
        size_t lit = strcspn(e->glob, "*");
        if (memchr(e->glob, ':', lit) == NULL) {
            free(e->glob);
            e->glob = NULL;
            snprintf(e->why, sizeof(e->why), "a template without a fixed scheme would allow any URI: left out (denied)");
            return;
        }
    } else if (strchr(key, '*') != NULL) {
        snprintf(e->why, sizeof(e->why), "a %s with a * cannot be listed (a policy reads * as a wildcard): left out (denied)",
                 kind == 0 ? "URI" : "name");
        return;
    } else {
        e->glob = tg_xstrdup(key);
    }
    if (kind != 2 && !normal_glob(e))
        return;
    if (secret_in(kind != 2 ? key : NULL, kind != 2 ? name : key, str_of(item, "description"), e->why, sizeof(e->why)))
        e->deny = 1;
    else if (kind == 0)
        snprintf(e->why, sizeof(e->why), "listed by resources/list: allowed");
    else if (kind == 1)
        snprintf(e->why, sizeof(e->why), "a resource template: allowed as %s", e->glob);
    else
        snprintf(e->why, sizeof(e->why), "listed by prompts/list: allowed");
}

/* One group's entries: from up to two lists (resources and templates, or prompts). */
struct group {
    const char *key; /* "resources" or "prompts" */
    int offered;
    struct gentry *e;
    size_t n, nallow, ndeny;
};

static void group_build(struct group *g, const char *key, const cJSON *a, int ka, const cJSON *b, int kb)
{
    memset(g, 0, sizeof(*g));
    g->key = key;
    g->offered = a != NULL || b != NULL;
    size_t cap = (size_t)(a ? cJSON_GetArraySize(a) : 0) + (size_t)(b ? cJSON_GetArraySize(b) : 0);
    g->e = tg_xcalloc(cap ? cap : 1, sizeof(*g->e));
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *list = pass ? b : a;
        for (const cJSON *it = list ? list->child : NULL; it != NULL; it = it->next) {
            struct gentry *e = &g->e[g->n];
            group_entry(it, pass ? kb : ka, e);
            /* A policy list refuses a repeated entry: the first of a glob stays. */
            for (size_t k = 0; e->glob != NULL && k < g->n; k++)
                if (g->e[k].glob != NULL && g->e[k].deny == e->deny && strcmp(g->e[k].glob, e->glob) == 0) {
                    free(e->glob);
                    e->glob = NULL;
                    snprintf(e->why, sizeof(e->why), "the same entry as %s above", g->e[k].label);
                    break;
                }
            if (e->glob != NULL) {
                g->nallow += !e->deny;
                g->ndeny += e->deny;
            }
            g->n++;
        }
    }
}

static void group_free(struct group *g)
{
    for (size_t i = 0; i < g->n; i++)
        free(g->e[i].glob);
    free(g->e);
}

static void group_json(cJSON *root, const struct group *g)
{
    cJSON *o = cJSON_AddObjectToObject(root, g->key);
    cJSON_AddStringToObject(o, "default", "deny");
    for (int deny = 0; deny < 2; deny++) {
        if ((deny ? g->ndeny : g->nallow) == 0)
            continue;
        cJSON *l = cJSON_AddArrayToObject(o, deny ? "deny" : "allow");
        for (size_t i = 0; i < g->n; i++)
            if (g->e[i].glob != NULL && g->e[i].deny == deny)
                cJSON_AddItemToArray(l, cJSON_CreateString(g->e[i].glob));
    }
}

static void gentry_comment(struct tg_buf *out, const struct gentry *e, const char *indent)
{
    tg_buf_appends(out, indent);
    tg_buf_appends(out, "# ");
    append_comment_text(out, e->label, 120);
    if (e->desc != NULL && e->desc[0] != '\0') {
        tg_buf_appends(out, ": ");
        append_comment_text(out, e->desc, 100);
    }
    tg_buf_appends(out, "\n");
    tg_buf_appends(out, indent);
    tg_buf_appends(out, "#   ");
    append_comment_text(out, e->why, sizeof(e->why));
    tg_buf_appends(out, "\n");
}

static void group_yaml(struct tg_buf *out, const struct group *g)
{
    int res = strcmp(g->key, "resources") == 0;
    tg_buf_appends(out, res ? "# resources/read and resources/subscribe are decided by these URI globs (* stays within one\n"
                              "# path segment, ** crosses /), and resources/list shows only what they allow.\n"
                            : "# prompts/get is decided by these names, and prompts/list shows only what they allow.\n");
    if (!g->offered)
        tg_buf_appendf(out, "# The server offers no %s: every one is denied.\n", g->key);
    tg_buf_appendf(out, "%s:\n  default: deny\n", g->key);
    for (int deny = 0; deny < 2; deny++) {
        if ((deny ? g->ndeny : g->nallow) == 0)
            continue;
        tg_buf_appends(out, deny ? "  deny:\n" : "  allow:\n");
        for (size_t i = 0; i < g->n; i++) {
            if (g->e[i].glob == NULL || g->e[i].deny != deny)
                continue;
            gentry_comment(out, &g->e[i], "    ");
            tg_buf_appends(out, "    - ");
            append_yaml_string(out, g->e[i].glob);
            tg_buf_appends(out, "\n");
        }
    }
    int left = 0;
    for (size_t i = 0; i < g->n; i++)
        if (g->e[i].glob == NULL) {
            if (!left++)
                tg_buf_appends(out, "  # Left out, so denied:\n");
            gentry_comment(out, &g->e[i], "  ");
        }
}

/* ---- the policy ------------------------------------------------------------------------------ */

/* The brake proposed under "*" for the tools tagged execute or write: more than REPEATS calls of
 * one tool with the same arguments within WITHIN, or a cycle of up to CYCLE calls repeated so, is
 * refused. SCAN_BRAKE_LIVE 0 would write it as a comment and leave it out of --json (for a
 * compiler that does not read `brake`). */
#define SCAN_BRAKE_LIVE 1
#define SCAN_BRAKE_REPEATS 5
#define SCAN_BRAKE_WITHIN "60s"
#define SCAN_BRAKE_CYCLE 4
#define SCAN_STR_(x) #x
#define SCAN_STR(x) SCAN_STR_(x)

const char tg_suggest_brake_help[] =
    "Under \"*\" a brake is proposed for the tools tagged execute or write: a call that repeats one\n"
    "with the same arguments more than " SCAN_STR(SCAN_BRAKE_REPEATS) " times within " SCAN_BRAKE_WITHIN
    " (or ends a cycle of up to " SCAN_STR(SCAN_BRAKE_CYCLE) " calls\n"
    "repeated so) is refused"
#if SCAN_BRAKE_LIVE
    ".\n";
#else
    "; it is written as a comment (and left out of --json) until the policy\n"
    "compiler reads brake.\n";
#endif

static void tags_json(cJSON *e, unsigned tags)
{
    if (tags == 0)
        return;
    cJSON *a = cJSON_AddArrayToObject(e, "tags");
    for (int t = 0; t < TG_SCAN_NTAGS; t++)
        if (tags & (1u << t))
            cJSON_AddItemToArray(a, cJSON_CreateString(tg_suggest_tag_names[t]));
}

/* "[read, filesystem]": the names are plain words, safe unquoted in a flow sequence. */
static void tags_flow(struct tg_buf *out, unsigned tags)
{
    const char *sep = "[";
    for (int t = 0; t < TG_SCAN_NTAGS; t++)
        if (tags & (1u << t)) {
            tg_buf_appendf(out, "%s%s", sep, tg_suggest_tag_names[t]);
            sep = ", ";
        }
    tg_buf_appends(out, "]");
}

static void brake_json(cJSON *tools)
{
    cJSON *b = cJSON_AddObjectToObject(cJSON_AddObjectToObject(tools, "*"), "brake");
    cJSON_AddNumberToObject(b, "repeats", SCAN_BRAKE_REPEATS);
    cJSON_AddStringToObject(b, "within", SCAN_BRAKE_WITHIN);
    cJSON_AddNumberToObject(b, "cycle", SCAN_BRAKE_CYCLE);
    cJSON *t = cJSON_AddArrayToObject(b, "tags");
    cJSON_AddItemToArray(t, cJSON_CreateString(tg_suggest_tag_names[TG_SCAN_TAG_EXECUTE]));
    cJSON_AddItemToArray(t, cJSON_CreateString(tg_suggest_tag_names[TG_SCAN_TAG_WRITE]));
}

/* The "*" entry with the brake, live or (SCAN_BRAKE_LIVE 0) as a comment; nbraked tools above are
 * tagged execute or write. */
static void brake_yaml(struct tg_buf *out, size_t nbraked)
{
    const char *c = SCAN_BRAKE_LIVE ? "" : "# ";
    if (nbraked == 0)
        tg_buf_appends(out, "  # A brake for the tools tagged execute or write (none above):");
    else
        tg_buf_appendf(out, "  # A brake for the %zu tool%s above tagged execute or write:", nbraked, nbraked == 1 ? "" : "s");
    tg_buf_appendf(out, " a call that repeats one with the\n"
                        "  # same arguments more than %d times within %s (or ends a cycle of up to %d calls repeated\n"
                        "  # so) is refused, with a message telling the model to stop and report to the user.\n",
                   SCAN_BRAKE_REPEATS, SCAN_BRAKE_WITHIN, SCAN_BRAKE_CYCLE);
    if (!SCAN_BRAKE_LIVE)
        tg_buf_appends(out, "  # This tollgate's policy compiler does not read `brake` yet: uncomment it once it does.\n");
    tg_buf_appendf(out, "  %s\"*\":\n  %s  brake: {repeats: %d, within: \"%s\", cycle: %d, tags: [%s, %s]}\n", c, c,
                   SCAN_BRAKE_REPEATS, SCAN_BRAKE_WITHIN, SCAN_BRAKE_CYCLE, tg_suggest_tag_names[TG_SCAN_TAG_EXECUTE],
                   tg_suggest_tag_names[TG_SCAN_TAG_WRITE]);
}

/* A usable tool (named, the first of its name) and its class: made once, read by each writer. */
struct scanned {
    const cJSON *t;
    struct tg_scan_verdict v;
};

static void write_json(struct tg_buf *out, const struct scanned *sc, size_t n, const char *summary,
                       const struct group *gs)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1");
    cJSON_AddStringToObject(root, "description", summary);
    cJSON_AddStringToObject(root, "default", "deny");
    cJSON *jt = cJSON_AddObjectToObject(root, "tools");
    for (size_t i = 0; i < n; i++) {
        enum tg_scan_class cls = sc[i].v.cls;
        if (cls == TG_SCAN_UNKNOWN)
            continue;
        cJSON *e = cJSON_AddObjectToObject(jt, tg_json_get(sc[i].t, "name")->valuestring);
        if (cls == TG_SCAN_READ) {
            cJSON_AddStringToObject(e, "action", "allow");
        } else if (cls == TG_SCAN_APPROVE) {
            cJSON_AddStringToObject(e, "action", "approve");
        } else if (cls == TG_SCAN_SECRET) {
            cJSON_AddStringToObject(e, "action", "deny");
            cJSON_AddStringToObject(e, "reason", TG_SCAN_SECRET_REASON);
        } else {
            char rl[32], rn[64];
            snprintf(rl, sizeof(rl), "%d/minute", TG_SCAN_LIMIT_PER_MINUTE);
            snprintf(rn, sizeof(rn), "scan: at most %d calls a minute", TG_SCAN_LIMIT_PER_MINUTE);
            cJSON *rules = cJSON_AddArrayToObject(e, "rules");
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "name", rn);
            cJSON_AddStringToObject(r, "rate_limit", rl);
            cJSON_AddItemToArray(rules, r);
        }
        tags_json(e, sc[i].v.tags);
    }
    if (SCAN_BRAKE_LIVE)
        brake_json(jt);
    group_json(root, &gs[0]);
    group_json(root, &gs[1]);
    char *s = cJSON_Print(root);
    tg_buf_appends(out, s);
    tg_buf_appends(out, "\n");
    cJSON_free(s);
    cJSON_Delete(root);
}

static void write_tool_comment(struct tg_buf *out, const cJSON *t, const struct tg_scan_verdict *v)
{
    const cJSON *jd = tg_json_get(t, "description");
    tg_buf_appends(out, "  # ");
    append_comment_text(out, tg_json_get(t, "name")->valuestring, 80);
    if (cJSON_IsString(jd) && jd->valuestring[0] != '\0') {
        tg_buf_appends(out, ": ");
        append_comment_text(out, jd->valuestring, 100);
    }
    tg_buf_appends(out, "\n  #   ");
    append_comment_text(out, v->why, sizeof(v->why));
    if (v->tags != 0) {
        tg_buf_appends(out, v->cls == TG_SCAN_UNKNOWN ? "\n  #   tags if you allow it: " : "\n  #   tags: ");
        append_comment_text(out, v->tags_why, sizeof(v->tags_why));
    }
    tg_buf_appends(out, "\n");
}

void tg_suggest_write_policy(struct tg_buf *out, const cJSON *tools, const struct tg_scan_offer *offer,
                          const struct tg_scan_source *src, int json)
{
    size_t count[5] = {0, 0, 0, 0, 0}, n = 0;
    struct scanned *sc = tg_xcalloc((size_t)cJSON_GetArraySize(tools) + 1, sizeof(*sc));
    for (const cJSON *t = tools->child; t != NULL; t = t->next) {
        if (!usable(tools, t))
            continue;
        sc[n].t = t;
        tg_suggest_classify(t, &sc[n].v);
        count[sc[n++].v.cls]++;
    }
    struct group gs[2];
    group_build(&gs[0], "resources", offer->resources, 0, offer->templates, 1);
    group_build(&gs[1], "prompts", offer->prompts, 2, NULL, 2);
    char summary[400];
    int k = snprintf(summary, sizeof(summary),
             "written by tollgate scan: %zu tools, %zu allowed, %zu rate-limited, %zu need approval, %zu denied as "
             "reading secrets, %zu denied by default",
             count[0] + count[1] + count[2] + count[3] + count[4], count[TG_SCAN_READ], count[TG_SCAN_LIMIT],
             count[TG_SCAN_APPROVE], count[TG_SCAN_SECRET], count[TG_SCAN_UNKNOWN]);
    for (int i = 0; i < 2 && k > 0 && (size_t)k < sizeof(summary); i++)
        k += snprintf(summary + k, sizeof(summary) - (size_t)k, "; %s: %zu allowed, %zu denied", gs[i].key,
                      gs[i].nallow, gs[i].ndeny);
    if (json) {
        write_json(out, sc, n, summary, gs);
        goto done;
    }
    tg_buf_appends(out, "# A starting policy, ");
    tg_buf_appends(out, summary);
    tg_buf_appends(out, ".\n");
    if (src->target != NULL) {
        tg_buf_appends(out, "# Scanned: ");
        append_comment_text(out, src->target, 200);
        tg_buf_appends(out, "\n");
    }
    if (src->server != NULL) {
        tg_buf_appends(out, "# Server: ");
        append_comment_text(out, src->server, 80);
        if (src->version != NULL) {
            tg_buf_appends(out, " ");
            append_comment_text(out, src->version, 40);
        }
        if (src->protocol != NULL) {
            tg_buf_appends(out, ", protocol ");
            append_comment_text(out, src->protocol, 40);
        }
        tg_buf_appends(out, "\n");
    }
    tg_buf_appends(out, "# Each choice comes from words in the tool's name or description, or from its annotations,\n"
                        "# all written by the server (`tollgate scan --help` lists the words): review before use, and\n"
                        "# check it with `tollgate policy check FILE`.\n"
                        "version: \"1\"\n"
                        "default: deny\n");
    size_t listed = count[TG_SCAN_READ] + count[TG_SCAN_LIMIT] + count[TG_SCAN_APPROVE] + count[TG_SCAN_SECRET];
    tg_buf_appends(out, listed == 0 && SCAN_BRAKE_LIVE == 0 ? "tools: {}\n" : "tools:\n");
    size_t nbraked = 0;
    for (size_t i = 0; i < n; i++) {
        const struct tg_scan_verdict *v = &sc[i].v;
        if (v->cls == TG_SCAN_UNKNOWN)
            continue;
        write_tool_comment(out, sc[i].t, v);
        tg_buf_appends(out, "  ");
        append_yaml_string(out, tg_json_get(sc[i].t, "name")->valuestring);
        if (v->cls == TG_SCAN_READ)
            tg_buf_appends(out, ":\n    action: allow\n");
        else if (v->cls == TG_SCAN_APPROVE)
            tg_buf_appends(out, ":\n    action: approve\n");
        else if (v->cls == TG_SCAN_SECRET)
            tg_buf_appends(out, ":\n    action: deny\n    reason: \"" TG_SCAN_SECRET_REASON "\"\n");
        else
            tg_buf_appendf(out, ":\n    rules:\n      - name: \"scan: at most %d calls a minute\"\n        rate_limit: %d/minute\n",
                           TG_SCAN_LIMIT_PER_MINUTE, TG_SCAN_LIMIT_PER_MINUTE);
        if (v->tags != 0) {
            tg_buf_appends(out, "    tags: ");
            tags_flow(out, v->tags);
            tg_buf_appends(out, "\n");
        }
        nbraked += (v->tags & (1u << TG_SCAN_TAG_EXECUTE | 1u << TG_SCAN_TAG_WRITE)) != 0;
    }
    brake_yaml(out, nbraked);
    if (count[TG_SCAN_UNKNOWN] > 0) {
        tg_buf_appends(out, "  # Denied by default (no word matched); to allow one, list it under tools, e.g.\n"
                            "  #   \"NAME\": {action: allow, tags: [...]}\n");
        for (size_t i = 0; i < n; i++)
            if (sc[i].v.cls == TG_SCAN_UNKNOWN)
                write_tool_comment(out, sc[i].t, &sc[i].v);
    }
    group_yaml(out, &gs[0]);
    group_yaml(out, &gs[1]);
done:
    group_free(&gs[0]);
    group_free(&gs[1]);
    free(sc);
}
