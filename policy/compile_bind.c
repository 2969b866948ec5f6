/* Compiling "set", "forbid" and "strict" (tollgate): arguments the model cannot choose. A tool
 * entry of either shape, "*" too, binds arguments to values (static, or from the caller: its
 * grant's attributes, its token's claims, its subject, its grant) and forbids others; policy/bind.c
 * applies them to each call. Everything wrong is a load error: a template that names nothing
 * the gateway knows would otherwise bind an argument to text the operator never meant. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/compile_tool.h"
#include "policy/policy.h"

#define BIND_MAX 64 /* arguments one entry may set or forbid */

/* An attribute's name as grants[].attributes has it: 1..64 of [A-Za-z0-9_-]. */
static int attr_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int tg__template_walk(const char *s, tg__tref_cb cb, void *ud, const char **err)
{
    const char *lit = s;
    const char *p = s;
    int rc;
    while (*p != '\0') {
        if (p[0] != '$' || (p[1] != '$' && p[1] != '{')) {
            p++;
            continue;
        }
        if (p > lit && (rc = cb(ud, TREF_TEXT, lit, (size_t)(p - lit))) != 0)
            return rc;
        if (p[1] == '$') { /* "$$": one literal '$' */
            if ((rc = cb(ud, TREF_TEXT, p, 1)) != 0)
                return rc;
            p += 2;
            lit = p;
            continue;
        }
        const char *name = p + 2;
        const char *end = strchr(name, '}');
        const char *open = strstr(name, "${");
        if (end == NULL || (open != NULL && open < end)) {
            *err = "\"${\" without its closing \"}\" (write \"$${\" for a literal \"${\")";
            return -1;
        }
        size_t n = (size_t)(end - name);
        enum tref kind;
        const char *arg = NULL;
        size_t alen = 0;
        if (n == 7 && memcmp(name, "subject", 7) == 0) {
            kind = TREF_SUBJECT;
        } else if (n == 5 && memcmp(name, "grant", 5) == 0) {
            kind = TREF_GRANT;
        } else if (n > 6 && memcmp(name, "grant.", 6) == 0) {
            kind = TREF_ATTR;
            arg = name + 6;
            alen = n - 6;
            if (!attr_name_ok(arg, alen)) {
                *err = "an attribute name is 1 to 64 letters, digits, _ and -";
                return -1;
            }
        } else if (n > 7 && memcmp(name, "claims.", 7) == 0) {
            kind = TREF_CLAIM;
            arg = name + 7;
            alen = n - 7;
            if (alen > 128 || memchr(arg, '$', alen) != NULL) {
                *err = "a claim name is 1 to 128 bytes without '$'";
                return -1;
            }
        } else {
            *err = "a template is ${grant.ATTRIBUTE}, ${claims.NAME}, ${subject} or ${grant}";
            return -1;
        }
        if ((rc = cb(ud, kind, arg, alen)) != 0)
            return rc;
        p = end + 1;
        lit = p;
    }
    if (p > lit && (rc = cb(ud, TREF_TEXT, lit, (size_t)(p - lit))) != 0)
        return rc;
    return 0;
}

/* What checking one value found: whether it holds a template, and the claims it names. */
struct scan {
    struct tg_policy *p;
    int templated;
};

static int note_ref(void *ud, enum tref kind, const char *s, size_t n)
{
    struct scan *sc = ud;
    if (kind == TREF_TEXT)
        return 0;
    if (kind != TREF_CLAIM) {
        sc->templated = sc->templated > 1 ? sc->templated : 1;
        return 0;
    }
    sc->templated = 2; /* names a claim */
    struct tg_policy *p = sc->p;
    for (int i = 0; i < p->nbind_claims; i++)
        if (strlen(p->bind_claims[i]) == n && memcmp(p->bind_claims[i], s, n) == 0)
            return 0;
    p->bind_claims = tg_xrealloc(p->bind_claims, (size_t)(p->nbind_claims + 1) * sizeof(char *));
    p->bind_claims[p->nbind_claims++] = tg_slice_dup(tg_slice_of(s, n));
    return 0;
}

/* Check every string in v (at any depth) as a template; errors name their path. */
static void scan_value(struct tg__cctx *cx, const cJSON *v, const char *path, struct scan *sc)
{
    if (cJSON_IsString(v)) {
        const char *err = NULL;
        if (tg__template_walk(v->valuestring, note_ref, sc, &err) != 0)
            tg__perr(cx, path, "%s", err);
        return;
    }
    int i = 0;
    for (const cJSON *e = v->child; e != NULL; e = e->next, i++) {
        char sub[700];
        if (cJSON_IsObject(v))
            snprintf(sub, sizeof(sub), "%s.%s", path, e->string);
        else
            snprintf(sub, sizeof(sub), "%s[%d]", path, i);
        scan_value(cx, e, sub, sc);
    }
}

static int named(const struct ptool *t, const char *name)
{
    for (int i = 0; i < t->nbind; i++)
        if (strcmp(t->bind[i].name, name) == 0)
            return 1;
    return 0;
}

void tg__compile_bind(struct tg__cctx *cx, const cJSON *jt, const char *path, struct ptool *t)
{
    t->strict = -1;
    const cJSON *js = tg_json_get(jt, "set");
    const cJSON *jf = tg_json_get(jt, "forbid");
    const cJSON *jst = tg_json_get(jt, "strict");
    char sub[700];
    if (jst != NULL) {
        snprintf(sub, sizeof(sub), "%s.strict", path);
        if (!cJSON_IsBool(jst))
            tg__perr(cx, sub, "must be true or false");
        else
            t->strict = cJSON_IsTrue(jst);
    }
    int cap = (cJSON_IsObject(js) ? cJSON_GetArraySize(js) : 0) + (cJSON_IsArray(jf) ? cJSON_GetArraySize(jf) : 0);
    if (cap > BIND_MAX) {
        tg__perr(cx, path, "at most %d arguments set and forbidden", BIND_MAX);
        return;
    }
    if (cap > 0)
        t->bind = tg_xcalloc((size_t)cap, sizeof(*t->bind));
    if (js != NULL) {
        snprintf(sub, sizeof(sub), "%s.set", path);
        if (!cJSON_IsObject(js))
            tg__perr(cx, sub, "must be a map {ARGUMENT: VALUE}");
        for (const cJSON *e = cJSON_IsObject(js) ? js->child : NULL; e != NULL; e = e->next) {
            char ep[760];
            snprintf(ep, sizeof(ep), "%s.%s", sub, e->string);
            if (e->string[0] == '\0') {
                tg__perr(cx, ep, "an argument name must not be empty");
                continue;
            }
            struct scan sc = {cx->p, 0};
            scan_value(cx, e, ep, &sc);
            struct bitem *b = &t->bind[t->nbind++];
            b->name = tg_xstrdup(e->string);
            b->value = cJSON_Duplicate(e, 1);
            b->templated = sc.templated;
        }
    }
    if (jf != NULL) {
        snprintf(sub, sizeof(sub), "%s.forbid", path);
        if (!cJSON_IsArray(jf))
            tg__perr(cx, sub, "must be a list of argument names");
        int i = 0;
        for (const cJSON *e = cJSON_IsArray(jf) ? jf->child : NULL; e != NULL; e = e->next, i++) {
            char ep[760];
            snprintf(ep, sizeof(ep), "%s[%d]", sub, i);
            if (!cJSON_IsString(e) || e->valuestring[0] == '\0') {
                tg__perr(cx, ep, "an argument name must be a non-empty string");
                continue;
            }
            if (named(t, e->valuestring)) {
                int set = cJSON_IsObject(js) && tg_json_get(js, e->valuestring) != NULL;
                tg__perr(cx, ep, "\"%s\" is %s", e->valuestring,
                         set ? "both set and forbidden: an argument is one or the other" : "listed twice");
                continue;
            }
            struct bitem *b = &t->bind[t->nbind++];
            b->name = tg_xstrdup(e->valuestring);
        }
    }
}

/* An entry's ebind: its own items, then those of w ("*", or NULL) it does not name. */
static void finish_one(struct tg_policy *p, struct ptool *t, const struct ptool *w)
{
    int n = t->nbind + (w != NULL ? w->nbind : 0);
    p->binds |= n > 0;
    t->ebind_strict = t->strict >= 0 ? t->strict : w != NULL && w->strict > 0;
    if (n == 0)
        return;
    t->ebind = tg_xcalloc((size_t)n, sizeof(*t->ebind));
    for (int i = 0; i < t->nbind; i++)
        t->ebind[t->nebind++] = &t->bind[i];
    for (int i = 0; w != NULL && w != t && i < w->nbind; i++)
        if (!named(t, w->bind[i].name))
            t->ebind[t->nebind++] = &w->bind[i];
}

void tg__finish_bind(struct tg_policy *p)
{
    for (int i = 0; i < p->ntools; i++)
        finish_one(p, &p->tools[i], p->wildcard);
    if (p->wildcard != NULL)
        finish_one(p, p->wildcard, p->wildcard);
}

void tg__free_bind(struct ptool *t)
{
    for (int i = 0; i < t->nbind; i++) {
        free(t->bind[i].name);
        cJSON_Delete(t->bind[i].value);
    }
    free(t->bind);
    free(t->ebind);
}
