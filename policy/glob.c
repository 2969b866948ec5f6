/* Glob patterns of resources, prompts and tool names (policy_int.h tg__glob_match): what the
 * "resources" and "prompts" groups, "scopes" patterns and history filters match names with. */
#include <stdlib.h>
#include <string.h>

#include "policy/policy_int.h"

enum { TOK_CHAR, TOK_STAR, TOK_ANY };

/* Does s match pat? "**" matches any run of characters; "*" a run without "/" when
 * star_stops (resource allow lists), any run otherwise; everything else itself. A set of
 * pattern positions is carried along s (no backtracking), so a long URI costs its length
 * times the pattern's, never more. */
int tg__glob_match(const char *pat, const char *s, int star_stops)
{
    size_t np = strlen(pat);
    unsigned char small_tok[128], small_cur[129], small_next[129];
    unsigned char *tok = small_tok, *cur = small_cur, *next = small_next;
    char small_lit[128], *lit = small_lit;
    if (np > sizeof(small_tok)) {
        tok = malloc(np);
        lit = malloc(np);
        cur = malloc(np + 1);
        next = malloc(np + 1);
        if (tok == NULL || lit == NULL || cur == NULL || next == NULL) {
            free(tok);
            free(lit);
            free(cur);
            free(next);
            return 0; /* matches nothing: an allow is not given, a deny falls to the default */
        }
    }
    size_t nt = 0;
    for (size_t i = 0; i < np; i++) {
        if (pat[i] == '*') {
            int two = pat[i + 1] == '*';
            while (pat[i + 1] == '*')
                i++;
            tok[nt++] = two || !star_stops ? TOK_ANY : TOK_STAR;
        } else {
            lit[nt] = pat[i];
            tok[nt++] = TOK_CHAR;
        }
    }
    memset(cur, 0, nt + 1);
    cur[0] = 1;
    for (size_t i = 0; i < nt; i++) /* a star matches nothing too */
        if (cur[i] && tok[i] != TOK_CHAR)
            cur[i + 1] = 1;
    int any = 1;
    for (; *s != '\0' && any; s++) {
        memset(next, 0, nt + 1);
        any = 0;
        for (size_t i = 0; i < nt; i++) {
            if (!cur[i])
                continue;
            if (tok[i] == TOK_CHAR ? lit[i] == *s : (tok[i] == TOK_ANY || *s != '/'))
                next[tok[i] == TOK_CHAR ? i + 1 : i] = 1;
        }
        for (size_t i = 0; i < nt; i++)
            if (next[i] && tok[i] != TOK_CHAR)
                next[i + 1] = 1;
        for (size_t i = 0; i <= nt; i++)
            any |= next[i];
        unsigned char *t = cur;
        cur = next;
        next = t;
    }
    int m = *s == '\0' && cur[nt];
    if (tok != small_tok) {
        free(tok);
        free(lit);
        free(cur);
        free(next);
    }
    return m;
}
