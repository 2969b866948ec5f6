/* Compiling "tags" (tollgate): what a tool does, in words the policy's own rules refer to
 * (reads_secrets, egress, write). A tool entry of either shape may carry them; history
 * conditions and brakes select the calls they look at by tag. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/compile_tool.h"
#include "policy/policy.h"

/* A tag: 1 to TG_TAG_MAX bytes of letters, digits, '_', '-', '.' and ':'. Anything else (a space,
 * a comma, a glob character) could be read two ways in a message or a query. */
static const char *tag_error(const char *s)
{
    size_t n = strlen(s);
    if (n == 0)
        return "a tag must not be empty";
    if (n > TG_TAG_MAX)
        return "a tag is at most 64 bytes";
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                 c == '-' || c == '.' || c == ':';
        if (!ok)
            return "a tag is made of letters, digits, _ - . and : only";
    }
    return NULL;
}

void tg__compile_tags(struct tg__cctx *cx, const cJSON *j, const char *path, char ***out, int *nout)
{
    *out = NULL;
    *nout = 0;
    if (!cJSON_IsArray(j)) {
        tg__perr(cx, path, "must be a list of tags");
        return;
    }
    int n = cJSON_GetArraySize(j);
    if (n > TG_TAGS_PER_TOOL) {
        tg__perr(cx, path, "at most %d tags", TG_TAGS_PER_TOOL);
        return;
    }
    char **v = tg_xcalloc((size_t)(n ? n : 1), sizeof(*v));
    int k = 0, i = 0;
    for (const cJSON *e = j->child; e != NULL; e = e->next, i++) {
        char sub[700];
        snprintf(sub, sizeof(sub), "%s[%d]", path, i);
        const char *why = cJSON_IsString(e) ? tag_error(e->valuestring) : "a tag must be a string";
        if (why != NULL) {
            tg__perr(cx, sub, "%s", why);
            continue;
        }
        int dup = 0;
        for (int m = 0; m < k; m++)
            dup |= strcmp(v[m], e->valuestring) == 0;
        if (dup) {
            tg__perr(cx, sub, "\"%s\" is listed twice", e->valuestring);
            continue;
        }
        v[k++] = tg_xstrdup(e->valuestring);
    }
    *out = v;
    *nout = k;
}

void tg__free_tags(char **tags, int n)
{
    for (int i = 0; i < n; i++)
        free(tags[i]);
    free(tags);
}

int tg__has_tag(char *const *tags, int n, const char *tag)
{
    for (int i = 0; i < n; i++)
        if (strcmp(tags[i], tag) == 0)
            return 1;
    return 0;
}
