/* OAuth scope sets (policy/scopes.h). */
#include "policy/scopes.h"

#include <string.h>

#include "core/base/json.h"

int tg_scope_token_ok(const char *s, size_t n)
{
    if (n == 0 || n >= TG_SCOPE_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x21 || c > 0x7e || c == '"' || c == '\\')
            return 0;
    }
    return 1;
}

int tg_scopes_has(const char *set, const char *scope)
{
    size_t n = strlen(scope);
    for (const char *p = set; p != NULL && *p != '\0';) {
        const char *sp = strchr(p, ' ');
        size_t len = sp ? (size_t)(sp - p) : strlen(p);
        if (len == n && memcmp(p, scope, n) == 0)
            return 1;
        p += len + (sp != NULL);
    }
    return 0;
}

int tg_scopes_add(char *out, size_t n, const char *scope)
{
    if (tg_scopes_has(out, scope))
        return 0;
    size_t have = strlen(out), len = strlen(scope);
    if (have + (have > 0) + len + 1 > n)
        return -1;
    if (have > 0)
        out[have++] = ' ';
    memcpy(out + have, scope, len + 1);
    return 0;
}

/* Add each scope of a space-separated claim value. A run of spaces, or one at either end, is
 * an empty entry: refused, since RFC 6749 §3.3 separates scope-tokens by exactly one space. */
static int add_spaced(const char *v, char *out, size_t n, int *count, const char **why)
{
    if (v[0] == '\0')
        return 0; /* "scope": "" is a token without scopes */
    for (const char *p = v;;) {
        const char *sp = strchr(p, ' ');
        size_t len = sp ? (size_t)(sp - p) : strlen(p);
        char one[TG_SCOPE_MAX];
        if (!tg_scope_token_ok(p, len)) {
            *why = "malformed scope claim";
            return -1;
        }
        memcpy(one, p, len);
        one[len] = '\0';
        if (++*count > TG_SCOPES_MAX_COUNT || tg_scopes_add(out, n, one) != 0) {
            *why = "too many scopes";
            return -1;
        }
        if (sp == NULL)
            return 0;
        p = sp + 1;
    }
}

int tg_scopes_of_claims(const cJSON *claims, char *out, size_t n, const char **why)
{
    out[0] = '\0';
    int count = 0;
    const cJSON *scope = tg_json_get(claims, "scope");
    const cJSON *scp = tg_json_get(claims, "scp");
    if (scope != NULL) {
        if (!cJSON_IsString(scope)) {
            *why = "malformed scope claim";
            return -1;
        }
        if (add_spaced(scope->valuestring, out, n, &count, why) != 0)
            return -1;
    }
    if (scp != NULL) {
        if (cJSON_IsString(scp))
            return add_spaced(scp->valuestring, out, n, &count, why);
        if (!cJSON_IsArray(scp)) {
            *why = "malformed scope claim";
            return -1;
        }
        for (const cJSON *e = scp->child; e != NULL; e = e->next) {
            if (!cJSON_IsString(e) || !tg_scope_token_ok(e->valuestring, strlen(e->valuestring))) {
                *why = "malformed scope claim";
                return -1;
            }
            if (++count > TG_SCOPES_MAX_COUNT || tg_scopes_add(out, n, e->valuestring) != 0) {
                *why = "too many scopes";
                return -1;
            }
        }
    }
    return 0;
}
