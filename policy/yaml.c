/* YAML policy files become the same cJSON tree a JSON file gives, so both
 * shapes load through one compiler. Plain scalars are resolved with the YAML
 * 1.2 core schema (null, booleans, integers, floats); quoted or !!str-tagged
 * scalars stay strings. Aliases are expanded with a node budget, so a
 * "billion laughs" file is refused instead of eating memory. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/base/json.h"
#include "policy/policy.h"

#define YAML_MAX_NODES 200000
#define YAML_MAX_DEPTH 64

/* An anchor seen so far. Value type in ybuild.anchors; its name and node (a copy) are freed at
 * the end of tg_yaml_to_json(). */
struct anchor {
    char *name;
    cJSON *node; /* a copy kept for aliases */
};

/* The state of one tg_yaml_to_json() call, on the stack of tg_yaml_to_json(), which frees the
 * anchors and the parser before it returns. */
struct ybuild {
    yaml_parser_t parser;
    size_t nodes;
    struct anchor *anchors;
    size_t nanchors;
    char *err;
    size_t errsz;
};

static int yerr(struct ybuild *b, const char *why, size_t line)
{
    snprintf(b->err, b->errsz, "line %zu: %s", line + 1, why);
    return -1;
}

/* A string of n bytes (a scalar's value is not NUL-terminated for cJSON). */
static cJSON *string_node(const char *v, size_t n)
{
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    memcpy(s, v, n);
    s[n] = '\0';
    cJSON *c = cJSON_CreateString(s);
    free(s);
    return c;
}

static cJSON *scalar_node(const char *v, size_t n, int plain, const char *tag)
{
    if (tag && strcmp(tag, YAML_STR_TAG) == 0)
        plain = 0;
    if (!plain)
        return string_node(v, n);
    if (n == 0 || (n == 1 && v[0] == '~') || (n == 4 && (!memcmp(v, "null", 4) || !memcmp(v, "Null", 4) ||
                                                         !memcmp(v, "NULL", 4))))
        return cJSON_CreateNull();
    if ((n == 4 && (!memcmp(v, "true", 4) || !memcmp(v, "True", 4) || !memcmp(v, "TRUE", 4))))
        return cJSON_CreateTrue();
    if ((n == 5 && (!memcmp(v, "false", 5) || !memcmp(v, "False", 5) || !memcmp(v, "FALSE", 5))))
        return cJSON_CreateFalse();
    char buf[64];
    if (n < sizeof(buf)) {
        memcpy(buf, v, n);
        buf[n] = '\0';
        /* integers: [-+]?[0-9]+, 0x[0-9a-fA-F]+, 0o[0-7]+ */
        const char *p = buf;
        int neg = 0;
        if (*p == '-' || *p == '+') {
            neg = *p == '-';
            p++;
        }
        int base = 10;
        if (p[0] == '0' && p[1] == 'x' && !neg && buf[0] != '+') {
            base = 16;
            p += 2;
        } else if (p[0] == '0' && p[1] == 'o' && !neg && buf[0] != '+') {
            base = 8;
            p += 2;
        }
        int digits = *p != '\0';
        for (const char *q = p; *q; q++) {
            int ok = base == 16 ? ((*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f') || (*q >= 'A' && *q <= 'F'))
                     : base == 8 ? (*q >= '0' && *q <= '7')
                                 : (*q >= '0' && *q <= '9');
            if (!ok)
                digits = 0;
        }
        if (digits) {
            errno = 0;
            long long ll = strtoll(p, NULL, base);
            if (errno == 0) {
                char out[32];
                int k = snprintf(out, sizeof(out), "%lld", neg ? -ll : ll);
                return tg_json_number_raw(out, (size_t)k);
            }
        }
        /* floats: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)? ; .inf/.nan cannot be JSON */
        p = buf + ((buf[0] == '-' || buf[0] == '+') ? 1 : 0);
        const char *q = p;
        int d1 = 0, d2 = 0;
        while (*q >= '0' && *q <= '9')
            q++, d1++;
        if (*q == '.') {
            q++;
            while (*q >= '0' && *q <= '9')
                q++, d2++;
        }
        if ((d1 || d2) && (*q == 'e' || *q == 'E')) {
            q++;
            if (*q == '+' || *q == '-')
                q++;
            int d3 = 0;
            while (*q >= '0' && *q <= '9')
                q++, d3++;
            if (!d3)
                q = "x";
        }
        if ((d1 || d2) && *q == '\0') {
            double d = strtod(buf, NULL);
            if (isfinite(d)) {
                char out[40];
                int k = snprintf(out, sizeof(out), "%.17g", d);
                return tg_json_number_raw(out, (size_t)k);
            }
        }
    }
    return string_node(v, n);
}

static int remember(struct ybuild *b, const char *anchor, cJSON *node)
{
    if (anchor == NULL)
        return 0;
    struct anchor *a = realloc(b->anchors, (b->nanchors + 1) * sizeof(*a));
    if (!a)
        return -1;
    b->anchors = a;
    a[b->nanchors].name = strdup(anchor);
    a[b->nanchors].node = cJSON_Duplicate(node, 1);
    b->nanchors++;
    return 0;
}

static size_t count_nodes(const cJSON *n)
{
    size_t k = 1;
    for (const cJSON *c = n->child; c; c = c->next)
        k += count_nodes(c);
    return k;
}

/* The parser's own error, or a syntax error where it gives none. */
static int parser_err(struct ybuild *b)
{
    return yerr(b, b->parser.problem ? b->parser.problem : "syntax error", b->parser.problem_mark.line);
}

static int parse_node(struct ybuild *b, yaml_event_t *ev, int depth, cJSON **out);

/* The next node of the stream: its first event taken, parsed, released. */
static int parse_next(struct ybuild *b, int depth, cJSON **out)
{
    yaml_event_t ev;
    *out = NULL;
    if (!yaml_parser_parse(&b->parser, &ev))
        return parser_err(b);
    int r = parse_node(b, &ev, depth, out);
    yaml_event_delete(&ev);
    return r;
}

/* Add the members of the mapping(s) a merge key (<<: *base or <<: [*a, *b]) names to merged,
 * those it does not hold already: the mapping's own keys win over them, as yaml.v3 (Intercept's
 * loader) does. */
static int merge_into(struct ybuild *b, cJSON **merged, const cJSON *src, size_t line)
{
    const cJSON *one = cJSON_IsObject(src) ? src : NULL;
    if (one == NULL && !cJSON_IsArray(src))
        return yerr(b, "a merge key (<<) needs a mapping or a list of mappings", line);
    for (const cJSON *m = one ? one : src->child; m; m = one ? NULL : m->next)
        if (!cJSON_IsObject(m))
            return yerr(b, "a merge key (<<) needs a mapping or a list of mappings", line);
    if (*merged == NULL)
        *merged = cJSON_CreateObject();
    for (const cJSON *m = one ? one : src->child; m; m = one ? NULL : m->next)
        for (const cJSON *f = m->child; f; f = f->next)
            if (tg_json_get(*merged, f->string) == NULL)
                cJSON_AddItemToObject(*merged, f->string, cJSON_Duplicate(f, 1));
    return 0;
}

/* A mapping whose start event is ev: keys are plain scalars, unique; merge keys apply last. */
static int parse_mapping(struct ybuild *b, yaml_event_t *ev, int depth, cJSON **out)
{
    cJSON *obj = cJSON_CreateObject();
    cJSON *merged = NULL; /* members from "<<" merge keys; explicit keys win over them */
    *out = obj;
    char *anchor = ev->data.mapping_start.anchor ? strdup((const char *)ev->data.mapping_start.anchor) : NULL;
    char *key = NULL;
    int r = 0;
    for (;;) {
        yaml_event_t k;
        if (!yaml_parser_parse(&b->parser, &k)) {
            r = parser_err(b);
            goto out;
        }
        if (k.type == YAML_MAPPING_END_EVENT) {
            yaml_event_delete(&k);
            break;
        }
        if (k.type != YAML_SCALAR_EVENT) {
            size_t line = k.start_mark.line;
            yaml_event_delete(&k);
            r = yerr(b, "mapping keys must be scalars", line);
            goto out;
        }
        key = strndup((const char *)k.data.scalar.value, k.data.scalar.length);
        size_t kline = k.start_mark.line;
        size_t klen = k.data.scalar.length;
        /* Only a plain << is a merge key (YAML 1.1's merge type, as yaml.v3 resolves it); a
         * quoted '<<' or "<<", or one tagged !!str, is an ordinary key like any other. */
        int merge_key = k.data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                        (k.data.scalar.tag == NULL ||
                         strcmp((const char *)k.data.scalar.tag, "tag:yaml.org,2002:merge") == 0);
        yaml_event_delete(&k);
        if (key == NULL || strlen(key) != klen) {
            r = yerr(b, "invalid mapping key", kline);
            goto out;
        }
        int merging = merge_key && strcmp(key, "<<") == 0;
        if (!merging && tg_json_get(obj, key) != NULL) {
            char why[200];
            snprintf(why, sizeof(why), "duplicate key \"%.100s\"", key);
            r = yerr(b, why, kline);
            goto out;
        }
        cJSON *v;
        r = parse_next(b, depth + 1, &v);
        if (r == 0 && merging)
            r = merge_into(b, &merged, v, kline);
        if (r != 0 || merging) {
            cJSON_Delete(v);
            if (r != 0)
                goto out;
        } else {
            cJSON_AddItemToObject(obj, key, v);
        }
        free(key);
        key = NULL;
    }
    if (merged != NULL)
        for (cJSON *f = merged->child; f; f = f->next)
            if (tg_json_get(obj, f->string) == NULL)
                cJSON_AddItemToObject(obj, f->string, cJSON_Duplicate(f, 1));
    r = remember(b, anchor, obj);
out:
    free(key);
    cJSON_Delete(merged);
    free(anchor);
    return r;
}

/* Parse one node whose first event is ev (already taken). */
static int parse_node(struct ybuild *b, yaml_event_t *ev, int depth, cJSON **out)
{
    *out = NULL;
    if (depth > YAML_MAX_DEPTH)
        return yerr(b, "nesting too deep", ev->start_mark.line);
    if (++b->nodes > YAML_MAX_NODES)
        return yerr(b, "too many nodes", ev->start_mark.line);
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        *out = scalar_node((const char *)ev->data.scalar.value, ev->data.scalar.length,
                           ev->data.scalar.plain_implicit && ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE,
                           (const char *)ev->data.scalar.tag);
        if (*out == NULL)
            return yerr(b, "out of memory", ev->start_mark.line);
        return remember(b, (const char *)ev->data.scalar.anchor, *out);
    }
    case YAML_ALIAS_EVENT: {
        for (size_t i = b->nanchors; i-- > 0;)
            if (strcmp(b->anchors[i].name, (const char *)ev->data.alias.anchor) == 0) {
                b->nodes += count_nodes(b->anchors[i].node);
                if (b->nodes > YAML_MAX_NODES)
                    return yerr(b, "too many nodes (aliases)", ev->start_mark.line);
                *out = cJSON_Duplicate(b->anchors[i].node, 1);
                return *out ? 0 : yerr(b, "out of memory", ev->start_mark.line);
            }
        return yerr(b, "unknown alias", ev->start_mark.line);
    }
    case YAML_SEQUENCE_START_EVENT: {
        cJSON *arr = cJSON_CreateArray();
        *out = arr;
        char *anchor = ev->data.sequence_start.anchor ? strdup((const char *)ev->data.sequence_start.anchor) : NULL;
        for (;;) {
            yaml_event_t e;
            if (!yaml_parser_parse(&b->parser, &e)) {
                free(anchor);
                return parser_err(b);
            }
            if (e.type == YAML_SEQUENCE_END_EVENT) {
                yaml_event_delete(&e);
                break;
            }
            cJSON *child;
            int r = parse_node(b, &e, depth + 1, &child);
            yaml_event_delete(&e);
            if (r != 0) {
                free(anchor);
                cJSON_Delete(child);
                return r;
            }
            cJSON_AddItemToArray(arr, child);
        }
        int r = remember(b, anchor, arr);
        free(anchor);
        return r;
    }
    case YAML_MAPPING_START_EVENT: return parse_mapping(b, ev, depth, out);
    default: return yerr(b, "unexpected YAML event", ev->start_mark.line);
    }
}

int tg_yaml_to_json(const char *text, size_t len, cJSON **out, char *err, size_t errsz)
{
    struct ybuild b;
    memset(&b, 0, sizeof(b));
    b.err = err;
    b.errsz = errsz;
    *out = NULL;
    if (!yaml_parser_initialize(&b.parser)) {
        snprintf(err, errsz, "cannot initialise the YAML parser");
        return -1;
    }
    yaml_parser_set_input_string(&b.parser, (const unsigned char *)text, len);
    int rc = -1;
    cJSON *root = NULL;
    int docs = 0;
    for (;;) {
        yaml_event_t e;
        if (!yaml_parser_parse(&b.parser, &e)) {
            parser_err(&b);
            goto done;
        }
        yaml_event_type_t t = e.type;
        if (t == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&e);
            break;
        }
        if (t == YAML_STREAM_START_EVENT || t == YAML_DOCUMENT_START_EVENT || t == YAML_DOCUMENT_END_EVENT) {
            if (t == YAML_DOCUMENT_START_EVENT && ++docs > 1) {
                yerr(&b, "a policy file holds one YAML document", e.start_mark.line);
                yaml_event_delete(&e);
                goto done;
            }
            yaml_event_delete(&e);
            continue;
        }
        int r = parse_node(&b, &e, 1, &root);
        yaml_event_delete(&e);
        if (r != 0)
            goto done;
    }
    if (root == NULL) {
        snprintf(err, errsz, "empty document");
        goto done;
    }
    *out = root;
    root = NULL;
    rc = 0;
done:
    cJSON_Delete(root);
    for (size_t i = 0; i < b.nanchors; i++) {
        free(b.anchors[i].name);
        cJSON_Delete(b.anchors[i].node);
    }
    free(b.anchors);
    yaml_parser_delete(&b.parser);
    return rc;
}
