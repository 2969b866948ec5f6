/* The binding of a call's arguments for `tollgate policy explain` and `policy test`
 * (core/cmd/policy_bind.h). */
#include "core/cmd/policy_bind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "policy/bind.h"

void tg__bind_opts_dispose(struct tg__bind_opts *b)
{
    for (size_t i = 0; i < 2 * b->nattrs; i++)
        free(b->attrs[i]);
    cJSON_Delete(b->claims);
}

int tg__bind_opt_add(struct tg__bind_opts *b, int claim, const char *name, size_t n, const cJSON *v)
{
    char *key = tg_slice_dup(tg_slice_of(name, n));
    if (claim) {
        if (b->claims == NULL)
            b->claims = cJSON_CreateObject();
        cJSON_DeleteItemFromObjectCaseSensitive(b->claims, key);
        cJSON_AddItemToObject(b->claims, key, cJSON_Duplicate(v, 1));
        free(key);
        return 0;
    }
    if (b->nattrs >= BIND_OPTS_MAX || !cJSON_IsString(v)) {
        free(key);
        return -1;
    }
    b->attrs[2 * b->nattrs] = key;
    b->attrs[2 * b->nattrs + 1] = tg_xstrdup(v->valuestring);
    b->nattrs++;
    return 0;
}

int tg__bind_option(int argc, char **argv, int *i, struct tg__bind_opts *b, int *bad)
{
    const char *a = argv[*i], *val = NULL;
    int claim = strncmp(a, "--claim", 7) == 0 && (a[7] == '\0' || a[7] == '=');
    if (!claim && !(strncmp(a, "--attribute", 11) == 0 && (a[11] == '\0' || a[11] == '=')))
        return 0;
    const char *rest = a + (claim ? 7 : 11);
    if (*rest == '=')
        val = rest + 1;
    else if (*i + 1 < argc)
        val = argv[++*i];
    const char *eq = val != NULL ? strchr(val, '=') : NULL;
    if (eq == NULL || eq == val) {
        *bad = 1;
        return 1;
    }
    cJSON *v = claim ? cJSON_Parse(eq + 1) : NULL;
    if (v == NULL)
        v = cJSON_CreateString(eq + 1);
    *bad = tg__bind_opt_add(b, claim, val, (size_t)(eq - val), v) != 0;
    cJSON_Delete(v);
    return 1;
}

/* Bind call ({name, arguments}) as the gateway would, for grant and subject: 0 it goes on to the
 * decision (the final arguments printed when print and the tool binds any), -1 refused (e). */
int tg__bind_call(const struct tg_policy *p, cJSON *call, const char *grant, const char *subject,
                     const struct tg__bind_opts *b, int print, struct tg_policy_explain *e)
{
    const char *tool = tg_json_get(call, "name")->valuestring;
    if (!tg_policy_binds(p, tool) || !tg_policy_tool_visible(p, tool))
        return 0; /* (a tool refused whatever its arguments is refused as such, as the gateway does) */
    struct tg_bind_ctx cx = {grant, subject ? subject : grant, (const char *const *)b->attrs, b->nattrs, b->claims};
    if (tg_policy_explain_bind(p, tool, &cx, call, e) < 0)
        return -1;
    if (print) {
        char *a = cJSON_PrintUnformatted(tg_json_get(call, "arguments"));
        printf("arguments: %s (after set and forbid)\n", a ? a : "{}");
        free(a);
    }
    return 0;
}

