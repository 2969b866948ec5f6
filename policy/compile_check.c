/* What the policy compiler checks and how it says so (policy/compile_tool.h): errors and
 * warnings with the path in the file, unknown keys with the known one they are close to, and
 * resource patterns written so that no URI in normal form could match them. Shared by
 * compile.c, compile_tool.c and compile_scopes.c. */
#include <ctype.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/base/buf.h"
#include "policy/compile_tool.h"
#include "policy/uri.h"

/* ---- errors ------------------------------------------------------------------ */

void tg__perr(struct tg__cctx *cx, const char *path, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tg_buf_appendf(cx->err, "%s: %s: %s\n", cx->name, path, msg);
    cx->nerr++;
}

void tg__pwarn(struct tg__cctx *cx, const char *path, const char *what)
{
    if (cx->warn)
        tg_buf_appendf(cx->warn, "%s: %s: %s\n", cx->name, path, what);
}

/* How far apart a key someone wrote is from a known one: the optimal string alignment distance
 * (Damerau-Levenshtein where no part is edited twice), ignoring ASCII case. Inserting, deleting
 * or changing one character costs 1, and so does swapping two neighbours ("defualt"). Keys
 * longer than KEY_DIST_MAX are never close to a known one. */
#define KEY_DIST_MAX 40
static size_t key_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > KEY_DIST_MAX || m > KEY_DIST_MAX)
        return SIZE_MAX;
    size_t d[KEY_DIST_MAX + 1][KEY_DIST_MAX + 1];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++)
        for (size_t j = 1; j <= m; j++) {
            int ai = tolower((unsigned char)a[i - 1]), bj = tolower((unsigned char)b[j - 1]);
            size_t best = d[i - 1][j - 1] + (ai != bj);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == bj && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[n][m];
}

const char *tg__policy_suggest_key(const char *key, const char *const *known)
{
    const char *best = NULL;
    size_t bestd = SIZE_MAX;
    for (int i = 0; known[i]; i++) {
        size_t dist = key_distance(key, known[i]);
        /* One edit for a known key of up to four characters ("op", "max"), two for longer ones:
         * close enough to be a slip, not so loose that "note" becomes "name". */
        size_t allowed = strlen(known[i]) <= 4 ? 1 : 2;
        if (dist <= allowed && dist < bestd) {
            best = known[i];
            bestd = dist;
        }
    }
    return best;
}

/* A key the format does not define is an error: a misspelt "action" or "default" would
 * otherwise be dropped in silence and the policy would decide something its author never wrote. */
void tg__check_keys(struct tg__cctx *cx, const cJSON *obj, const char *path, const char *const *known)
{
    for (const cJSON *c = obj->child; c; c = c->next) {
        int ok = 0;
        for (int i = 0; known[i]; i++)
            if (strcmp(c->string, known[i]) == 0)
                ok = 1;
        if (ok)
            continue;
        char p[600];
        snprintf(p, sizeof(p), "%s%s%s", path, path[0] ? "." : "", c->string);
        const char *near = tg__policy_suggest_key(c->string, known);
        if (near != NULL) {
            tg__perr(cx, p, "unknown field; did you mean `%s`?", near);
            continue;
        }
        char list[300];
        size_t k = 0;
        list[0] = '\0';
        for (int i = 0; known[i] && k < sizeof(list); i++)
            k += (size_t)snprintf(list + k, sizeof(list) - k, "%s%s", i ? ", " : "", known[i]);
        tg__perr(cx, p, "unknown field (this object takes %s)", list);
    }
}

/* A resource glob is matched against URIs in their normal form (policy/uri.h). One that starts
 * with a scheme must be written in it, or it matches no URI at all: a deny that never denies.
 * One that starts with a wildcard (a "*.key" or "*" + "/secret" pattern) is matched as written. */
void tg__check_uri_globs(struct tg__cctx *cx, const char *path, char **globs, int n)
{
    for (int i = 0; i < n; i++) {
        const char *glob = globs[i];
        size_t len = strlen(glob), k = 0;
        while (k < len && (isalpha((unsigned char)glob[k]) ||
                           (k > 0 && (isdigit((unsigned char)glob[k]) || strchr("+-.", glob[k]) != NULL))))
            k++;
        if (k == 0 || glob[k] != ':' || len > TG_URI_MAX)
            continue;
        char *norm = tg_xmalloc(len + 1), sub[600];
        const char *why;
        long w = tg_uri_normalize(glob, len, norm, &why);
        snprintf(sub, sizeof(sub), "%s[%d]", path, i);
        if (w < 0)
            tg__perr(cx, sub, "\"%s\" matches no resource: a URI written so %s", glob, why);
        else if ((size_t)w != len || memcmp(norm, glob, len) != 0)
            tg__perr(cx, sub, "\"%s\" matches no resource: URIs are decided in their normal form; write \"%s\"", glob,
                     norm);
        tg_xfree(norm);
    }
}
