/* "scopes" in a policy (either shape): what a tool entry, a resource glob or a prompt glob
 * requires of the caller's credential, compiled into scope sets (policy/scopes.h). What a call
 * needs is decided in decide_resource.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/compile_tool.h"
#include "policy/policy.h"
#include "policy/scopes.h"

void tg__compile_scopes(struct tg__cctx *cx, const cJSON *j, const char *path, char **out)
{
    *out = NULL;
    if (!cJSON_IsArray(j) || cJSON_GetArraySize(j) == 0 || cJSON_GetArraySize(j) > TG_SCOPES_MAX_COUNT) {
        tg__perr(cx, path, "must be a non-empty list of at most %d scopes, e.g. [\"deploy\"]", TG_SCOPES_MAX_COUNT);
        return;
    }
    char set[TG_SCOPES_MAX] = "";
    int i = 0, bad = 0;
    for (const cJSON *e = j->child; e != NULL; e = e->next, i++) {
        char sub[640];
        snprintf(sub, sizeof(sub), "%s[%d]", path, i);
        if (!cJSON_IsString(e)) {
            tg__perr(cx, sub, "a scope must be a string");
            bad = 1;
        } else if (!tg_scope_token_ok(e->valuestring, strlen(e->valuestring))) {
            /* What a token's scope claim could never hold: a requirement no caller could meet. */
            tg__perr(cx, sub, "\"%.100s\" is not a scope: 1 to %d bytes of printable ASCII without spaces, '\"' or '\\'",
                     e->valuestring, TG_SCOPE_MAX - 1);
            bad = 1;
        } else if (tg_scopes_has(set, e->valuestring)) {
            tg__perr(cx, sub, "\"%s\" is listed twice", e->valuestring);
            bad = 1;
        } else if (tg_scopes_add(set, sizeof(set), e->valuestring) != 0) {
            tg__perr(cx, path, "longer than %d bytes", TG_SCOPES_MAX - 1);
            bad = 1;
            break;
        }
    }
    if (!bad)
        *out = tg_xstrdup(set);
}

void tg__compile_scoped_globs(struct tg__cctx *cx, const cJSON *j, const char *path, struct globset *g)
{
    if (!cJSON_IsObject(j)) {
        tg__perr(cx, path, "must be a map of patterns to scope lists, e.g. {\"db://prod/*\": [\"db.read\"]}");
        return;
    }
    int n = cJSON_GetArraySize(j);
    g->scoped = tg_xcalloc((size_t)(n ? n : 1), sizeof(*g->scoped));
    for (const cJSON *e = j->child; e != NULL; e = e->next) {
        char sub[700];
        snprintf(sub, sizeof(sub), "%s.%s", path, e->string);
        if (e->string[0] == '\0') {
            tg__perr(cx, path, "a pattern must not be empty");
            continue;
        }
        struct scoped_glob *sg = &g->scoped[g->nscoped];
        tg__compile_scopes(cx, e, sub, &sg->scopes);
        if (sg->scopes == NULL)
            continue;
        sg->glob = tg_xstrdup(e->string);
        g->nscoped++;
        if (strncmp(path, "resources", 9) == 0)
            tg__check_uri_globs(cx, sub, &sg->glob, 1);
    }
}

void tg__free_scoped_globs(struct globset *g)
{
    for (int i = 0; i < g->nscoped; i++) {
        free(g->scoped[i].glob);
        free(g->scoped[i].scopes);
    }
    free(g->scoped);
    g->scoped = NULL;
    g->nscoped = 0;
}

/* Add each scope of set to need; 1 if have lacks one of them. */
static int need_all(const char *set, const char *have, char *need, size_t n)
{
    int lacks = 0;
    for (const char *p = set; p != NULL && *p != '\0';) {
        const char *sp = strchr(p, ' ');
        size_t len = sp ? (size_t)(sp - p) : strlen(p);
        char one[TG_SCOPE_MAX];
        memcpy(one, p, len);
        one[len] = '\0';
        (void)tg_scopes_add(need, n, one); /* need is as large as a policy's sets (TG_SCOPES_MAX) */
        lacks |= !tg_scopes_has(have, one);
        p += len + (sp != NULL);
    }
    return lacks;
}

int tg__scopes_need(const char *set, const char *have, char *need, size_t n) { return need_all(set, have, need, n); }
