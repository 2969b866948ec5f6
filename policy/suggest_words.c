/* `tollgate scan`'s words (policy/suggest_int.h): how a word of a list is found in a tool's name or
 * description, whole words with plain inflections, so "keyboard" never reads as "key"; and the
 * tags a tool gets from its words and annotations (policy/suggest.h). */
#include <stdio.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/suggest.h"
#include "policy/suggest_int.h"

/* Tools that read the environment, credentials or secrets: denied whatever their annotations say
 * (a read-only tool that hands out an API key is the worst kind). Whole words only, with the
 * same inflections, so "keyboard", "monkey" and "tokenizer" do not match; "getenv" and
 * "printenv" are listed because they are one word. */
const char *const tg__suggest_secret_words[] = {"env", "environ", "environment", "getenv", "printenv", "dotenv",
                                                "secret", "token", "credential", "creds", "password", "passwd",
                                                "passphrase", "key", "apikey", "cookie", "bearer", "auth", NULL};

int tg__suggest_in_list(const char *rest, const char *const *list)
{
    for (size_t i = 0; list[i] != NULL; i++)
        if (strcmp(rest, list[i]) == 0)
            return 1;
    return 0;
}

/* word (lowercase) is kw or an inflection of it: kw+s/es/ed/d/ing/er/ers/ion/ions, kw with a
 * doubled last letter + ing/ed/er (running, dropped), or kw without its final e + ing/ion/ions
 * (executing, deletion). */
static int word_matches(const char *word, const char *kw)
{
    static const char *const plain[] = {"", "s", "es", "ed", "d", "ing", "er", "ers", "ion", "ions", NULL};
    static const char *const doubled[] = {"ing", "ed", "er", "ers", NULL};
    static const char *const e_less[] = {"ing", "ion", "ions", NULL};
    size_t k = strlen(kw);
    if (strncmp(word, kw, k) == 0 && tg__suggest_in_list(word + k, plain))
        return 1;
    if (strncmp(word, kw, k) == 0 && word[k] == kw[k - 1] && word[k] != '\0' && tg__suggest_in_list(word + k + 1, doubled))
        return 1;
    if (kw[k - 1] == 'e' && strncmp(word, kw, k - 1) == 0 && tg__suggest_in_list(word + k - 1, e_less))
        return 1;
    return 0;
}

/* The first word of `text` (n bytes) that matches a word of `list`: copies the text's word to
 * found and the keyword to *kw. Words are runs of ASCII letters; with camel set, an upper-case
 * letter after a lower-case one starts a new word (getUser -> get, user), and so does the last
 * capital of an acronym before a lower-case letter (getAWSSecret -> get, aws, secret). */
int tg__suggest_find_word(const char *text, size_t n, int camel, const char *const *list, char *found, size_t cap,
                          const char **kw)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && !((text[i] | 0x20) >= 'a' && (text[i] | 0x20) <= 'z'))
            i++;
        char w[64];
        size_t wl = 0, start = i;
        while (i < n && ((text[i] | 0x20) >= 'a' && (text[i] | 0x20) <= 'z')) {
            if (camel && i > start && text[i] >= 'A' && text[i] <= 'Z' &&
                ((text[i - 1] >= 'a' && text[i - 1] <= 'z') ||
                 (text[i - 1] >= 'A' && text[i - 1] <= 'Z' && i + 1 < n && text[i + 1] >= 'a' && text[i + 1] <= 'z')))
                break;
            if (wl + 1 < sizeof(w))
                w[wl++] = (char)(text[i] | 0x20);
            i++;
        }
        w[wl] = '\0';
        if (wl == 0)
            continue;
        for (size_t j = 0; list[j] != NULL; j++) {
            if (word_matches(w, list[j])) {
                snprintf(found, cap, "%s", w);
                *kw = list[j];
                return 1;
            }
        }
    }
    return 0;
}

/* Looks for a word of `list` in the name, then in the description; writes "name says "x"" or
 * "description says "x"" (with the keyword when the word is an inflection) into why. For the
 * secret words a description is split at camelCase humps too ("returns the clientSecret"), as
 * names are: there a wrong match only denies more. */
int tg__suggest_match(const char *name, const char *desc, const char *const *list, char *why, size_t cap,
                      const char **kwp)
{
    char w[64];
    const char *kw = NULL;
    const char *where = NULL;
    if (tg__suggest_find_word(name, strlen(name), 1, list, w, sizeof(w), &kw))
        where = "name";
    else if (desc != NULL && tg__suggest_find_word(desc, strlen(desc), list == tg__suggest_secret_words, list, w, sizeof(w), &kw))
        where = "description";
    if (where == NULL)
        return 0;
    *kwp = kw;
    if (strcmp(w, kw) == 0)
        snprintf(why, cap, "%s says \"%s\"", where, w);
    else
        snprintf(why, cap, "%s says \"%s\" (%s)", where, w, kw);
    return 1;
}


/* ---- tags ------------------------------------------------------------------------------------ */

const char *const tg_suggest_tag_names[TG_SCAN_NTAGS] = {"read",   "write",         "destructive", "execute",
                                                        "egress", "reads_secrets", "filesystem",  "network"};

/* The words of each tag, in tg_suggest_tags_help too. A delete word is a write word as well; the
 * read words are the classes' (suggest.c), repeated here so that the two lists can differ. */
static const char *const execute_words[] = {"execute", "exec", "run", "eval", "shell", "command",
                                            "script", "bash", "spawn", NULL};
static const char *const destructive_words[] = {"delete", "remove", "drop", "destroy", "wipe",
                                                "purge", "erase", "truncate", NULL};
static const char *const write_words[] = {"write", "create", "update", "modify", "edit", "insert", "upload",
                                          "save", "rename", "move", "patch", "append", "send", "publish", NULL};
static const char *const egress_words[] = {"send", "email", "mail", "post", "publish", "upload", "webhook",
                                           "http", "https", "url", "smtp", "sms", "notify", "share", NULL};
static const char *const network_words[] = {"http", "https", "url", "download", "upload", "socket", "network",
                                            "webhook", "dns", "curl", "wget", "web", "browse", "internet", NULL};
static const char *const filesystem_words[] = {"file", "filesystem", "fs", "directory", "dir", "folder",
                                               "path", "disk", "mkdir", NULL};
static const char *const read_words[] = {"get", "list", "read", "search", "fetch", "query",
                                         "describe", "show", "view", "find", NULL};

const char tg_suggest_tags_help[] =
    "Tags (written as tags: [...] on each tool's entry, for history conditions and brakes; a tool\n"
    "may get several, whatever its class; the comment says which word or annotation gave each):\n"
    "  reads_secrets  a word of the deny list above\n"
    "  execute        execute exec run eval shell command script bash spawn\n"
    "  destructive    delete remove drop destroy wipe purge erase truncate, or destructiveHint: true\n"
    "  write          write create update modify edit insert upload save rename move patch append\n"
    "                 send publish, a destructive word, destructiveHint: true, or (when readOnlyHint\n"
    "                 is not true) readOnlyHint: false, destructiveHint: false or an idempotentHint,\n"
    "                 which MCP says only of a tool that changes its environment\n"
    "  egress         send email mail post publish upload webhook http https url smtp sms notify\n"
    "                 share, or openWorldHint: true\n"
    "  network        http https url download upload socket network webhook dns curl wget web\n"
    "                 browse internet, or openWorldHint: true\n"
    "  filesystem     file filesystem fs directory dir folder path disk mkdir\n"
    "  read           get list read search fetch query describe show view find, or readOnlyHint:\n"
    "                 true, and neither write, destructive nor execute (a readOnlyHint never takes\n"
    "                 away a tag the words give)\n";

/* A boolean annotation: 1 true, 0 false, -1 absent or not a boolean. */
static int hint(const cJSON *tool, const char *name)
{
    const cJSON *ann = tg_json_get(tool, "annotations");
    const cJSON *h = cJSON_IsObject(ann) ? tg_json_get(ann, name) : NULL;
    return cJSON_IsBool(h) ? cJSON_IsTrue(h) : -1;
}

struct tagging {
    unsigned tags;
    char why[TG_SCAN_NTAGS][120];
};

static void tag(struct tagging *g, enum tg_scan_tag t, const char *why)
{
    if (g->tags & (1u << t))
        return;
    g->tags |= 1u << t;
    snprintf(g->why[t], sizeof(g->why[t]), "%s", why);
}

static void tag_by_words(struct tagging *g, enum tg_scan_tag t, const char *name, const char *desc,
                         const char *const *list)
{
    char why[120];
    const char *kw;
    if (!(g->tags & (1u << t)) && tg__suggest_match(name, desc, list, why, sizeof(why), &kw))
        tag(g, t, why);
}

void tg_suggest_tags(const cJSON *tool, struct tg_scan_verdict *v)
{
    const cJSON *jn = tg_json_get(tool, "name");
    const cJSON *jd = tg_json_get(tool, "description");
    const char *name = cJSON_IsString(jn) ? jn->valuestring : "";
    const char *desc = cJSON_IsString(jd) ? jd->valuestring : NULL;
    int ro = hint(tool, "readOnlyHint"), destructive = hint(tool, "destructiveHint");
    int idem = hint(tool, "idempotentHint"), open = hint(tool, "openWorldHint");
    struct tagging g;
    memset(&g, 0, sizeof(g));
    tag_by_words(&g, TG_SCAN_TAG_READS_SECRETS, name, desc, tg__suggest_secret_words);
    tag_by_words(&g, TG_SCAN_TAG_EXECUTE, name, desc, execute_words);
    tag_by_words(&g, TG_SCAN_TAG_DESTRUCTIVE, name, desc, destructive_words);
    if (destructive == 1)
        tag(&g, TG_SCAN_TAG_DESTRUCTIVE, "annotation destructiveHint: true");
    tag_by_words(&g, TG_SCAN_TAG_WRITE, name, desc, write_words);
    if (g.tags & (1u << TG_SCAN_TAG_DESTRUCTIVE))
        tag(&g, TG_SCAN_TAG_WRITE, g.why[TG_SCAN_TAG_DESTRUCTIVE]);
    /* MCP: destructiveHint and idempotentHint are "meaningful only when readOnlyHint == false":
     * a server that states one (or readOnlyHint: false) describes a tool that changes things. */
    if (ro != 1 && (ro == 0 || destructive == 0 || idem != -1))
        tag(&g, TG_SCAN_TAG_WRITE, ro == 0 ? "annotation readOnlyHint: false"
                                   : destructive == 0 ? "annotation destructiveHint: false (a tool that changes things)"
                                                      : "annotation idempotentHint (a tool that changes things)");
    tag_by_words(&g, TG_SCAN_TAG_EGRESS, name, desc, egress_words);
    tag_by_words(&g, TG_SCAN_TAG_NETWORK, name, desc, network_words);
    if (open == 1) {
        tag(&g, TG_SCAN_TAG_EGRESS, "annotation openWorldHint: true");
        tag(&g, TG_SCAN_TAG_NETWORK, "annotation openWorldHint: true");
    }
    tag_by_words(&g, TG_SCAN_TAG_FILESYSTEM, name, desc, filesystem_words);
    /* read: only what looks read-only; a readOnlyHint lifts no write or execute word. */
    if (!(g.tags & (1u << TG_SCAN_TAG_WRITE | 1u << TG_SCAN_TAG_DESTRUCTIVE | 1u << TG_SCAN_TAG_EXECUTE))) {
        if (ro == 1)
            tag(&g, TG_SCAN_TAG_READ, "annotation readOnlyHint: true");
        else
            tag_by_words(&g, TG_SCAN_TAG_READ, name, desc, read_words);
    }
    v->tags = g.tags;
    v->tags_why[0] = '\0';
    size_t k = 0;
    for (int t = 0; t < TG_SCAN_NTAGS; t++) {
        if (!(g.tags & (1u << t)))
            continue;
        int w = snprintf(v->tags_why + k, sizeof(v->tags_why) - k, "%s%s (%s)", k ? "; " : "", tg_suggest_tag_names[t],
                         g.why[t]);
        if (w < 0 || (size_t)w >= sizeof(v->tags_why) - k)
            break;
        k += (size_t)w;
    }
}
