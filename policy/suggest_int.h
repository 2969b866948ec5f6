/* `tollgate scan`'s words, shared by policy/suggest.c (the classes, the policy) and
 * policy/suggest_words.c (how a word is found, and the tags). Not for other modules. */
#ifndef TG_SUGGEST_INT_H
#define TG_SUGGEST_INT_H

#include <stddef.h>

/* Words that speak of the environment, credentials or secrets (NULL-terminated). */
extern const char *const tg__suggest_secret_words[];

/* Is s one of list (a NULL-terminated list of strings)? */
int tg__suggest_in_list(const char *s, const char *const *list);

/* The first word of text (n bytes) that is a word of list or one of its plain inflections: the
 * text's word (lowercase) into found, the list's word into *kw; 1 if found. camel: an upper-case
 * letter after a lower-case one (and the last capital of an acronym) starts a word too. */
int tg__suggest_find_word(const char *text, size_t n, int camel, const char *const *list, char *found, size_t cap,
                          const char **kw);

/* A word of list in name (camelCase split), else in desc (split so too for the secret words):
 * "name says "x"" or "description says "x" (kw)" into why, the list's word into *kwp; 1 if found. */
int tg__suggest_match(const char *name, const char *desc, const char *const *list, char *why, size_t cap,
                      const char **kwp);

#endif
