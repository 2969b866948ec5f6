/* `tollgate scan`'s words (policy/suggest_int.h): how a word of a list is found in a tool's name or
 * description, whole words with plain inflections, so "keyboard" never reads as "key". */
#include <stdio.h>
#include <string.h>

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

