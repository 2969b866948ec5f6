/* Applying "set" and "forbid" (policy/bind.h): each call's arguments bound to its caller, and
 * the bound arguments hidden from tools/list. A policy without them pays one pointer test per
 * call (the entry's nebind). */
#include "policy/bind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "policy/explain.h"
#include "policy/policy_int.h"

/* The entry whose binding a call of tool applies: its own, else "*"; NULL when neither binds. */
static const struct ptool *binding(const struct tg_policy *p, const char *tool)
{
    const struct ptool *t = tg__find_tool(p, tool);
    if (t == NULL)
        t = p->wildcard;
    return t != NULL && t->nebind > 0 ? t : NULL;
}

int tg_policy_binds(const struct tg_policy *p, const char *tool) { return p->binds && binding(p, tool) != NULL; }

int tg_policy_binds_any(const struct tg_policy *p) { return p->binds; }

int tg_policy_binds_claims(const struct tg_policy *p, const char *tool)
{
    if (p->nbind_claims == 0)
        return 0;
    const struct ptool *t = binding(p, tool);
    for (int i = 0; t != NULL && i < t->nebind; i++)
        if (t->ebind[i]->templated == 2)
            return 1;
    return 0;
}

int tg_policy_bind_claims(const struct tg_policy *p, const char *const **names)
{
    *names = (const char *const *)p->bind_claims;
    return p->nbind_claims;
}

/* ---- expanding a template --------------------------------------------------------------- */

/* One string being expanded: on the stack while it is short (every call of a binding tool
 * expands its templates: no allocation for the usual tenant id), else in heap. */
struct expand {
    const struct tg_bind_ctx *cx;
    char stack[256];
    struct tg_buf heap;
    size_t len;
    int on_heap;
    const cJSON *whole;  /* the claim a one-template string names: its JSON value */
    int pieces;
    char missing[200];   /* what was missing, for the message */
};

/* Only what is read before it is written: the 256 bytes of stack are not cleared, each call. */
static void ex_init(struct expand *ex, const struct tg_bind_ctx *cx)
{
    ex->cx = cx;
    ex->len = 0;
    ex->on_heap = 0;
    ex->whole = NULL;
    ex->pieces = 0;
    ex->missing[0] = '\0';
}

static void put(struct expand *ex, const char *s, size_t n)
{
    if (!ex->on_heap && ex->len + n < sizeof(ex->stack)) {
        memcpy(ex->stack + ex->len, s, n);
        ex->len += n;
        return;
    }
    if (!ex->on_heap) {
        tg_buf_init(&ex->heap);
        tg_buf_append(&ex->heap, ex->stack, ex->len);
        ex->on_heap = 1;
    }
    tg_buf_append(&ex->heap, s, n);
    ex->len += n;
}

/* The text so far, NUL-terminated. */
static const char *text_of(struct expand *ex)
{
    if (!ex->on_heap) {
        ex->stack[ex->len] = '\0';
        return ex->stack;
    }
    tg_buf_append(&ex->heap, "", 1);
    ex->heap.len--;
    return ex->heap.base;
}

static const char *attr_of(const struct tg_bind_ctx *cx, const char *name, size_t n)
{
    for (size_t i = 0; i < cx->nattrs; i++) {
        const char *a = cx->attrs[2 * i];
        if (strlen(a) == n && memcmp(a, name, n) == 0)
            return cx->attrs[2 * i + 1];
    }
    return NULL;
}

static const cJSON *claim_of(const cJSON *claims, const char *name, size_t n)
{
    for (const cJSON *e = claims != NULL ? claims->child : NULL; e != NULL; e = e->next)
        if (e->string != NULL && strlen(e->string) == n && memcmp(e->string, name, n) == 0)
            return e;
    return NULL;
}

static int on_piece(void *ud, enum tref kind, const char *s, size_t n)
{
    struct expand *ex = ud;
    const struct tg_bind_ctx *cx = ex->cx;
    ex->pieces++;
    const char *v = NULL;
    switch (kind) {
    case TREF_TEXT:
        put(ex, s, n);
        return 0;
    case TREF_SUBJECT: v = cx->subject; break;
    case TREF_GRANT: v = cx->grant; break;
    case TREF_ATTR:
        v = attr_of(cx, s, n);
        if (v == NULL) {
            snprintf(ex->missing, sizeof(ex->missing), "grant \"%s\" has no attribute \"%.*s\"",
                     cx->grant != NULL ? cx->grant : "", (int)(n > 64 ? 64 : n), s);
            return 1;
        }
        break;
    case TREF_CLAIM: {
        const cJSON *c = claim_of(cx->claims, s, n);
        if (c == NULL) {
            snprintf(ex->missing, sizeof(ex->missing), "the caller's token carries no claim \"%.*s\"",
                     (int)(n > 128 ? 128 : n), s);
            return 1;
        }
        ex->whole = c;
        if (cJSON_IsString(c)) {
            put(ex, c->valuestring, strlen(c->valuestring));
        } else { /* embedded in text: its JSON text (numbers as written) */
            struct tg_buf j;
            tg_buf_init(&j);
            tg_json_write(&j, c);
            put(ex, j.base, j.len);
            tg_buf_dispose(&j);
        }
        return 0;
    }
    }
    if (v == NULL) {
        snprintf(ex->missing, sizeof(ex->missing), "the call has no %s", kind == TREF_SUBJECT ? "subject" : "grant");
        return 1;
    }
    put(ex, v, strlen(v));
    return 0;
}

/* Expand template string tmpl into ex (which the caller disposes with ex_dispose): 0, or -1 with
 * why filled (something named is missing). Then ex->whole, when the string was one claim
 * template and nothing else, is the value; else text_of(ex). */
static int expand_string(const char *tmpl, struct expand *ex, char *why, size_t n)
{
    const char *err = NULL;
    int rc = tg__template_walk(tmpl, on_piece, ex, &err);
    if (rc != 0) {
        snprintf(why, n, "%s", rc > 0 ? ex->missing : err);
        return -1;
    }
    if (ex->pieces != 1)
        ex->whole = NULL;
    return 0;
}

static void ex_dispose(struct expand *ex)
{
    if (ex->on_heap)
        tg_buf_dispose(&ex->heap);
}

/* A copy of v with every string's templates expanded, or NULL with why filled (something named is
 * missing). A string that is one claim template and nothing else is the claim's JSON value. */
static cJSON *expand_value(const cJSON *v, const struct tg_bind_ctx *cx, char *why, size_t n)
{
    if (cJSON_IsString(v)) {
        struct expand ex;
        ex_init(&ex, cx);
        cJSON *out = NULL;
        if (expand_string(v->valuestring, &ex, why, n) == 0) {
            out = ex.whole != NULL ? cJSON_Duplicate(ex.whole, 1) : cJSON_CreateString(text_of(&ex));
            if (out != NULL && ex.whole != NULL) {
                free(out->string);
                out->string = NULL;
            }
        }
        ex_dispose(&ex);
        return out;
    }
    cJSON *out = cJSON_IsObject(v) ? cJSON_CreateObject() : cJSON_IsArray(v) ? cJSON_CreateArray() : NULL;
    if (out == NULL)
        return cJSON_Duplicate(v, 1);
    for (const cJSON *e = v->child; e != NULL; e = e->next) {
        cJSON *c = expand_value(e, cx, why, n);
        if (c == NULL) {
            cJSON_Delete(out);
            return NULL;
        }
        if (cJSON_IsObject(v))
            cJSON_AddItemToObject(out, e->string, c);
        else
            cJSON_AddItemToArray(out, c);
    }
    return out;
}

/* a and b are one value (canonical JSON: 1 and 1.0 are, member order does not count). */
static int same_value(const cJSON *a, const cJSON *b)
{
    if ((a->type & 0xFF) != (b->type & 0xFF))
        return 0;
    if (cJSON_IsString(a))
        return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsBool(a) || cJSON_IsNull(a))
        return 1;
    struct tg_buf x, y;
    tg_buf_init(&x);
    tg_buf_init(&y);
    tg_json_canon(&x, a);
    tg_json_canon(&y, b);
    int same = x.len == y.len && (x.len == 0 || memcmp(x.base, y.base, x.len) == 0);
    tg_buf_dispose(&x);
    tg_buf_dispose(&y);
    return same;
}

static int refuse(struct tg_decision *d, const char *rule, const char *fmt, const char *name, const char *what)
{
    memset(d, 0, sizeof(*d));
    d->verdict = TG_VERDICT_DENY;
    snprintf(d->rule, sizeof(d->rule), "%s", rule);
    snprintf(d->message, sizeof(d->message), fmt, name, what);
    return -1;
}

/* The value b binds for this call: *v a new node, or NULL when had (the model's) is that value
 * already. -1 with why when something named is missing. */
static int bound_value(const struct bitem *b, const struct tg_bind_ctx *cx, const cJSON *had, cJSON **v, char *why,
                       size_t n)
{
    *v = NULL;
    if (!b->templated) {
        if (had == NULL || !same_value(had, b->value))
            *v = cJSON_Duplicate(b->value, 1);
        return 0;
    }
    if (!cJSON_IsString(b->value)) { /* templates inside a list or a map */
        *v = expand_value(b->value, cx, why, n);
        if (*v == NULL)
            return -1;
        if (had != NULL && same_value(had, *v)) {
            cJSON_Delete(*v);
            *v = NULL;
        }
        return 0;
    }
    struct expand ex;
    ex_init(&ex, cx);
    if (expand_string(b->value->valuestring, &ex, why, n) != 0) {
        ex_dispose(&ex);
        return -1;
    }
    if (ex.whole != NULL) {
        if (had == NULL || !same_value(had, ex.whole)) {
            *v = cJSON_Duplicate(ex.whole, 1);
            free((*v)->string);
            (*v)->string = NULL;
        }
    } else {
        const char *text = text_of(&ex);
        if (!cJSON_IsString(had) || strcmp(had->valuestring, text) != 0)
            *v = cJSON_CreateString(text);
    }
    ex_dispose(&ex);
    return 0;
}

/* tg_policy_bind_args(), and the item that refused (*failed) when it refuses. */
static int bind_args(const struct tg_policy *p, const char *tool, const struct tg_bind_ctx *cx, cJSON *params,
                     struct tg_decision *d, const struct bitem **failed)
{
    const struct ptool *t = p->binds ? binding(p, tool) : NULL;
    if (t == NULL)
        return 0;
    cJSON *args = tg_json_get(params, "arguments");
    int changed = 0;
    for (int i = 0; i < t->nebind; i++) {
        const struct bitem *b = t->ebind[i];
        *failed = b;
        cJSON *had = tg_json_get(args, b->name);
        if (b->value == NULL) { /* forbidden */
            if (had == NULL)
                continue;
            if (t->ebind_strict)
                return refuse(d, "forbid", "argument \"%s\" may not be sent to this tool%s", b->name, "");
            cJSON_Delete(cJSON_DetachItemViaPointer(args, had));
            changed = 1;
            continue;
        }
        char why[300] = "";
        cJSON *v;
        if (bound_value(b, cx, had, &v, why, sizeof(why)) != 0)
            return refuse(d, "set", "argument \"%s\" is bound by the policy, but %s", b->name, why);
        if (v == NULL)
            continue; /* the model sent the bound value itself */
        if (had != NULL && t->ebind_strict) {
            cJSON_Delete(v);
            return refuse(d, "set", "argument \"%s\" is set by the policy%s; the call may not choose another value",
                          b->name, "");
        }
        if (args == NULL) {
            args = cJSON_CreateObject();
            cJSON_AddItemToObject(params, "arguments", args);
        }
        if (had != NULL)
            cJSON_ReplaceItemInObjectCaseSensitive(args, b->name, v);
        else
            cJSON_AddItemToObject(args, b->name, v);
        changed = 1;
    }
    return changed;
}

int tg_policy_bind_args(const struct tg_policy *p, const char *tool, const struct tg_bind_ctx *cx, cJSON *params,
                        struct tg_decision *d)
{
    const struct bitem *failed;
    return bind_args(p, tool, cx, params, d, &failed);
}

/* Drop name from the list required (strings). */
static int drop_required(cJSON *required, const char *name)
{
    for (cJSON *e = cJSON_IsArray(required) ? required->child : NULL; e != NULL; e = e->next)
        if (cJSON_IsString(e) && strcmp(e->valuestring, name) == 0) {
            cJSON_Delete(cJSON_DetachItemViaPointer(required, e));
            return 1;
        }
    return 0;
}

int tg_policy_bind_schema(const struct tg_policy *p, const char *tool, cJSON *input_schema)
{
    const struct ptool *t = p->binds ? binding(p, tool) : NULL;
    if (t == NULL || !cJSON_IsObject(input_schema))
        return 0;
    cJSON *props = tg_json_get(input_schema, "properties");
    cJSON *required = tg_json_get(input_schema, "required");
    int changed = 0;
    for (int i = 0; i < t->nebind; i++) {
        cJSON *had = cJSON_IsObject(props) ? tg_json_get(props, t->ebind[i]->name) : NULL;
        if (had != NULL) {
            cJSON_Delete(cJSON_DetachItemViaPointer(props, had));
            changed = 1;
        }
        while (drop_required(required, t->ebind[i]->name))
            changed = 1;
    }
    return changed;
}

/* ---- claims ------------------------------------------------------------------------------ */

cJSON *tg_bind_token_claims(const char *token, size_t len)
{
    const char *a = memchr(token, '.', len);
    const char *b = a != NULL ? memchr(a + 1, '.', len - (size_t)(a + 1 - token)) : NULL;
    if (b == NULL)
        return NULL;
    size_t plen = (size_t)(b - a - 1);
    uint8_t *raw = tg_xmalloc(plen * 3 / 4 + 4);
    size_t rlen = 0;
    struct tg_json_doc doc = {0};
    if (tg_b64url_decode(a + 1, plen, raw, &rlen) != 0 || tg_json_parse((const char *)raw, rlen, 32, 1, &doc, NULL, NULL) != 0 ||
        !cJSON_IsObject(doc.root)) {
        cJSON_Delete(doc.root);
        doc.root = NULL;
    }
    free(raw);
    return doc.root;
}

/* Tokens' claims read lately (tg_bind_token_claims_memo): a direct-mapped table by a hash of the
 * token's last bytes (its signature, which no two tokens share), each slot its token's bytes and
 * claims. Reachable until exit; at most MEMO_SLOTS tokens of up to 8 KiB and their trees. */
#define MEMO_SLOTS 256
static struct memo_slot {
    char *token;
    size_t len;
    cJSON *claims;
} memo[MEMO_SLOTS];

const cJSON *tg_bind_token_claims_memo(const char *token, size_t len)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ len;
    for (size_t i = len > 16 ? len - 16 : 0; i < len; i++)
        h = (h ^ (unsigned char)token[i]) * 0x100000001b3ULL;
    struct memo_slot *m = &memo[(h ^ (h >> 29)) % MEMO_SLOTS];
    if (m->token != NULL && m->len == len && memcmp(m->token, token, len) == 0)
        return m->claims;
    cJSON_Delete(m->claims);
    m->claims = tg_bind_token_claims(token, len);
    free(m->token);
    m->token = NULL;
    m->len = 0;
    if (len <= 8192) { /* a longer one is read each time */
        m->token = tg_xmalloc(len ? len : 1);
        memcpy(m->token, token, len);
        m->len = len;
    }
    return m->claims;
}

char *tg_bind_claims_of_token(const char *token, size_t len, const char *const *names, int n)
{
    cJSON *claims = n > 0 ? tg_bind_token_claims(token, len) : NULL;
    if (claims == NULL)
        return NULL;
    struct tg_buf o;
    tg_buf_init(&o);
    tg_buf_appends(&o, "{");
    int k = 0;
    for (int i = 0; i < n; i++) {
        const cJSON *c = tg_json_get(claims, names[i]);
        if (c == NULL)
            continue;
        if (k++ > 0)
            tg_buf_appends(&o, ",");
        tg_json_write_string(&o, names[i], strlen(names[i]));
        tg_buf_appends(&o, ":");
        tg_json_write(&o, c);
    }
    tg_buf_append(&o, "}", 2);
    cJSON_Delete(claims);
    if (k > 0)
        return o.base;
    tg_buf_dispose(&o);
    return NULL;
}

/* ---- explain ----------------------------------------------------------------------------- */

int tg_policy_explain_bind(const struct tg_policy *p, const char *tool, const struct tg_bind_ctx *cx, cJSON *params,
                           struct tg_policy_explain *e)
{
    struct tg_decision d;
    const struct bitem *failed = NULL;
    int rc = bind_args(p, tool, cx, params, &d, &failed);
    if (rc >= 0)
        return rc;
    memset(e, 0, sizeof(*e));
    e->d = d;
    e->cond = -1;
    e->hidden = !tg_policy_tool_visible(p, tool);
    const struct ptool *t = tg__find_tool(p, tool);
    int own = 0; /* the tool's own entry's item, else "*"'s */
    for (int i = 0; t != NULL && i < t->nbind; i++)
        own |= failed == &t->bind[i];
    snprintf(e->where, sizeof(e->where), "tools.%s.%s", own ? t->name : "*", d.rule);
    return -1;
}
