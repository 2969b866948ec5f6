#include "core/base/json.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/slab.h"

/* The state of one tg_json_parse() call, on the stack of tg_json_parse(). The slices point into
 * the caller's input; the tree being built goes to the caller, or is deleted on error. */
struct parser {
    const unsigned char *p, *end, *start;
    int max_depth;
    int build;
    const char *err;
    const unsigned char *err_at;
    struct tg_slice id_raw;
    struct tg_slice method_raw;
    struct tg_slice error_raw;
    struct tg_slice result_raw;
    struct tg_slice params_raw;        /* the root's "params" value */
    int in_params;                     /* the root's "params" value is being parsed */
    const unsigned char *meta_from, *meta_to; /* params._meta, as bytes to cut */
    int case_twins; /* with a tree: 1 twins seen, -1 an object too big to have been checked */
};

static int fail(struct parser *ps, const char *why)
{
    if (ps->err == NULL) {
        ps->err = why;
        ps->err_at = ps->p;
    }
    return TG_EINVAL;
}

static inline void skip_ws(struct parser *ps)
{
    if (ps->p < ps->end && *ps->p > ' ')
        return; /* the common case: compact JSON */
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int parse_value(struct parser *ps, int depth, cJSON **out);

static int hex4(const unsigned char *p, unsigned *v)
{
    unsigned r = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        r = r << 4 | d;
    }
    *v = r;
    return 0;
}

static size_t put_utf8(unsigned char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of a valid UTF-8 sequence starting at p (RFC 3629 table), or 0. */
static size_t utf8_seq(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F; /* U+D800..DFFF encoded directly are not characters */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

/* The bytes from p on that need no look (printable ASCII other than '"' and '\\'), eight at a
 * time: a long text answer is mostly these, and a short key ends inside its first word. The
 * tests below can flag a byte above the first one that stops, never below it, so the lowest
 * flag is exact: on a little-endian machine it gives the length of the run inside the word. */
static size_t plain_run(const unsigned char *p, const unsigned char *end)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    const unsigned char *s = p;
    while (end - p >= 8) {
        uint64_t x;
        memcpy(&x, p, 8);
        uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
        uint64_t stop = (x & highs) | ((x - ones * 0x20) & ~x & highs) | ((q - ones) & ~q & highs) |
                        ((b - ones) & ~b & highs);
        if (stop != 0) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            p += (size_t)__builtin_ctzll(stop) >> 3;
#endif
            break;
        }
        p += 8;
    }
    return (size_t)(p - s);
}

/* Parses a string at ps->p (on the opening quote). When out != NULL, stores a
 * malloc'd decoded copy (NUL-terminated) and its length. *escaped (when not NULL) says whether
 * the raw text had an escape, that is whether it differs from its decoding. */
static int parse_string(struct parser *ps, char **out, size_t *outlen, int *escaped)
{
    ps->p++; /* opening quote */
    const unsigned char *s = ps->p;
    /* First pass: validate and measure. */
    size_t dlen = 0;
    int has_escape = 0;
    while (1) {
        size_t run = plain_run(ps->p, ps->end);
        ps->p += run;
        dlen += run;
        if (ps->p >= ps->end)
            return fail(ps, "unterminated string");
        unsigned c = *ps->p;
        if (c == '"')
            break;
        if (c < 0x20)
            return fail(ps, "control character in string");
        if (c == '\\') {
            has_escape = 1;
            if (ps->end - ps->p < 2)
                return fail(ps, "unterminated string");
            unsigned e = ps->p[1];
            if (e == 'u') {
                unsigned cp = 0, lo = 0;
                if (ps->end - ps->p < 6 || hex4(ps->p + 2, &cp) != 0)
                    return fail(ps, "invalid \\u escape");
                ps->p += 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF)
                    return fail(ps, "lone low surrogate");
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || hex4(ps->p + 2, &lo) != 0 ||
                        lo < 0xDC00 || lo > 0xDFFF)
                        return fail(ps, "lone high surrogate");
                    ps->p += 6;
                    dlen += 4;
                } else if (cp == 0) {
                    return fail(ps, "NUL character in string");
                } else {
                    dlen += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
                }
                continue;
            }
            if (!(e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't'))
                return fail(ps, "invalid escape");
            ps->p += 2;
            dlen++;
            continue;
        }
        if (c < 0x80) {
            ps->p++;
            dlen++;
            continue;
        }
        size_t n = utf8_seq(ps->p, ps->end);
        if (n == 0)
            return fail(ps, "invalid UTF-8 in string");
        ps->p += n;
        dlen += n;
    }
    const unsigned char *e = ps->p;
    ps->p++; /* closing quote */
    if (escaped != NULL)
        *escaped = has_escape;
    if (out == NULL)
        return 0;
    unsigned char *d = tg_slab_alloc(dlen + 1);
    if (d == NULL)
        return fail(ps, "out of memory");
    if (!has_escape) {
        memcpy(d, s, dlen);
    } else {
        size_t o = 0;
        for (const unsigned char *q = s; q < e;) {
            if (*q != '\\') {
                d[o++] = *q++;
                continue;
            }
            unsigned x = q[1];
            if (x == 'u') {
                unsigned cp = 0, lo = 0;
                hex4(q + 2, &cp);
                q += 6;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    hex4(q + 2, &lo);
                    q += 6;
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                }
                o += put_utf8(d + o, cp);
                continue;
            }
            q += 2;
            switch (x) {
            case 'b': d[o++] = '\b'; break;
            case 'f': d[o++] = '\f'; break;
            case 'n': d[o++] = '\n'; break;
            case 'r': d[o++] = '\r'; break;
            case 't': d[o++] = '\t'; break;
            default: d[o++] = (unsigned char)x; break;
            }
        }
    }
    d[dlen] = '\0';
    *out = (char *)d;
    if (outlen)
        *outlen = dlen;
    return 0;
}

/* A string without a tree: the usual one (no escape, no control byte, nothing over 0x7f) ends
 * inside the words plain_run() skips, and is done here, inline; any other goes through
 * parse_string() from its start. */
static inline int scan_string(struct parser *ps, int *escaped)
{
    const unsigned char *q = ps->p + 1;
    q += plain_run(q, ps->end);
    if (q < ps->end && *q == '"') {
        ps->p = q + 1;
        *escaped = 0;
        return 0;
    }
    return parse_string(ps, NULL, NULL, escaped);
}

static int parse_number(struct parser *ps, cJSON **out)
{
    const unsigned char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-')
        ps->p++;
    if (ps->p >= ps->end)
        return fail(ps, "invalid number");
    if (*ps->p == '0') {
        ps->p++;
    } else if (*ps->p >= '1' && *ps->p <= '9') {
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    } else {
        return fail(ps, "invalid number");
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (ps->p >= ps->end || !(*ps->p >= '0' && *ps->p <= '9'))
            return fail(ps, "invalid number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-'))
            ps->p++;
        if (ps->p >= ps->end || !(*ps->p >= '0' && *ps->p <= '9'))
            return fail(ps, "invalid number");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (out != NULL) {
        *out = tg_json_number_raw((const char *)s, (size_t)(ps->p - s));
        if (*out == NULL)
            return fail(ps, "out of memory");
    }
    return 0;
}

cJSON *tg_json_number_raw(const char *text, size_t n)
{
    cJSON *item = cJSON_CreateNumber(0);
    if (item == NULL)
        return NULL;
    char *raw = tg_slab_alloc(n + 1);
    if (raw == NULL) {
        cJSON_Delete(item);
        return NULL;
    }
    memcpy(raw, text, n);
    raw[n] = '\0';
    /* An integer of up to 15 digits is exact in a double: no strtod for ids and counts. */
    size_t neg = n > 0 && text[0] == '-', i = neg;
    uint64_t v = 0;
    while (i < n && i - neg < 15 && text[i] >= '0' && text[i] <= '9')
        v = v * 10 + (uint64_t)(text[i++] - '0');
    double d = i == n && n > neg ? (neg ? -(double)v : (double)v) : strtod(raw, NULL);
    cJSON_SetNumberValue(item, d);
    item->valuestring = raw;
    return item;
}

static int cmp_keys(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    return strcmp(x->string, y->string);
}

static int check_dup_keys(struct parser *ps, cJSON *obj, size_t count)
{
    if (count < 2)
        return 0;
    if (count <= 12) {
        /* Pairs whose first bytes differ in more than ASCII case are neither duplicates nor case
         * twins (tg_json_doc.case_twins); the others are compared whole, both ways at once. */
        for (cJSON *a = obj->child; a; a = a->next)
            for (cJSON *b = a->next; b; b = b->next)
                if (((a->string[0] ^ b->string[0]) & ~0x20) == 0 && strcasecmp(a->string, b->string) == 0) {
                    if (strcmp(a->string, b->string) == 0)
                        return fail(ps, "duplicate object key");
                    ps->case_twins = 1;
                }
        return 0;
    }
    if (ps->case_twins == 0)
        ps->case_twins = -1;
    cJSON **v = malloc(count * sizeof(*v));
    if (v == NULL)
        return fail(ps, "out of memory");
    size_t i = 0;
    for (cJSON *a = obj->child; a; a = a->next)
        v[i++] = a;
    qsort(v, count, sizeof(*v), cmp_keys);
    int r = 0;
    for (i = 1; i < count; i++)
        if (strcmp(v[i - 1]->string, v[i]->string) == 0) {
            r = fail(ps, "duplicate object key");
            break;
        }
    free(v);
    return r;
}

static void append_child(cJSON *parent, cJSON **last, cJSON *item)
{
    if (*last == NULL) {
        parent->child = item;
        item->prev = item; /* cJSON keeps the tail in child->prev */
    } else {
        (*last)->next = item;
        item->prev = *last;
        parent->child->prev = item;
    }
    *last = item;
}

/* A key seen in an object parsed without a tree: its raw bytes, or a decoded copy if it had
 * escapes. Value type in parse_object()'s key array (on its stack, or malloc'd past 16 keys);
 * the decoded copy is owned and freed, with the array, before parse_object() returns. */
struct rawkey {
    const char *p;
    size_t n;
    char *owned;
};

static int cmp_rawkeys(const void *a, const void *b)
{
    const struct rawkey *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    return memcmp(x->p, y->p, x->n);
}

/* Duplicate keys are refused without a tree too: what a JSON-RPC peer reads must not depend
 * on which of two "id"s it keeps. Keys without escapes are compared in place (no allocation). */
static int check_dup_rawkeys(struct parser *ps, struct rawkey *k, size_t count)
{
    if (count <= 12) {
        for (size_t i = 0; i < count; i++)
            for (size_t j = i + 1; j < count; j++)
                if (k[i].n == k[j].n && memcmp(k[i].p, k[j].p, k[i].n) == 0)
                    return fail(ps, "duplicate object key");
        return 0;
    }
    qsort(k, count, sizeof(*k), cmp_rawkeys);
    for (size_t i = 1; i < count; i++)
        if (cmp_rawkeys(&k[i - 1], &k[i]) == 0)
            return fail(ps, "duplicate object key");
    return 0;
}

static int parse_object(struct parser *ps, int depth, cJSON **out)
{
    ps->p++;
    cJSON *obj = NULL, *last = NULL;
    size_t count = 0;
    struct rawkey kstack[16], *keys = kstack;
    size_t kcap = 16;
    int r = 0;
    const unsigned char *prev_end = NULL; /* where the member before ended (its value's last byte + 1) */
    if (out) {
        obj = cJSON_CreateObject();
        if (obj == NULL)
            return fail(ps, "out of memory");
        *out = obj;
    }
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        return 0;
    }
    while (1) {
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != '"') {
            r = fail(ps, "expected object key");
            goto out;
        }
        char *key = NULL;
        size_t klen = 0;
        const unsigned char *kstart = ps->p;
        if (out) {
            if (parse_string(ps, &key, &klen, NULL) != 0) {
                r = TG_EINVAL;
                goto out;
            }
        } else {
            int escaped = 0;
            if (scan_string(ps, &escaped) != 0) {
                r = TG_EINVAL;
                goto out;
            }
            const char *raw = (const char *)kstart + 1;
            size_t rawn = (size_t)(ps->p - kstart) - 2;
            struct rawkey rk = {raw, rawn, NULL};
            if (escaped) {
                const unsigned char *after = ps->p;
                ps->p = kstart;
                if (parse_string(ps, &rk.owned, &rk.n, NULL) != 0) {
                    r = TG_EINVAL;
                    goto out;
                }
                ps->p = after;
                rk.p = rk.owned;
            }
            if (count == kcap) {
                struct rawkey *nk = malloc(kcap * 2 * sizeof(*nk));
                if (nk == NULL) {
                    free(rk.owned);
                    r = fail(ps, "out of memory");
                    goto out;
                }
                memcpy(nk, keys, count * sizeof(*nk));
                if (keys != kstack)
                    free(keys);
                keys = nk;
                kcap *= 2;
            }
            keys[count] = rk;
            key = (char *)rk.p;
            klen = rk.n;
        }
        skip_ws(ps);
        if (ps->p >= ps->end || *ps->p != ':') {
            if (out)
                free(key);
            else
                count++;
            r = fail(ps, "expected ':'");
            goto out;
        }
        ps->p++;
        skip_ws(ps);
        const unsigned char *vstart = ps->p;
        cJSON *val = NULL;
        int is_params = depth == 1 && out != NULL && klen == 6 && memcmp(key, "params", 6) == 0;
        ps->in_params |= is_params;
        int vr = parse_value(ps, depth + 1, out ? &val : NULL);
        if (is_params)
            ps->in_params = 0;
        if (vr != 0) {
            if (out)
                free(key);
            else
                count++;
            cJSON_Delete(val);
            r = TG_EINVAL;
            goto out;
        }
        if (depth == 1 && klen == 2 && memcmp(key, "id", 2) == 0)
            ps->id_raw = tg_slice_of((const char *)vstart, (size_t)(ps->p - vstart));
        else if (depth == 1 && klen == 6 && memcmp(key, "method", 6) == 0)
            ps->method_raw = tg_slice_of((const char *)vstart, (size_t)(ps->p - vstart));
        else if (depth == 1 && klen == 5 && memcmp(key, "error", 5) == 0 && *vstart == '{')
            /* Only an object is an error: "error": null beside "result" (JSON-RPC 1.0 style) is not. */
            ps->error_raw = tg_slice_of((const char *)vstart, (size_t)(ps->p - vstart));
        else if (depth == 1 && klen == 6 && memcmp(key, "result", 6) == 0 && *vstart == '{')
            ps->result_raw = tg_slice_of((const char *)vstart, (size_t)(ps->p - vstart));
        else if (is_params)
            ps->params_raw = tg_slice_of((const char *)vstart, (size_t)(ps->p - vstart));
        int cut_first = 0;
        if (ps->in_params && depth == 2 && klen == 5 && memcmp(key, "_meta", 5) == 0) {
            /* The member with the comma before it; the first one with the comma after it. */
            ps->meta_from = prev_end != NULL ? prev_end : kstart;
            ps->meta_to = ps->p;
            cut_first = prev_end == NULL;
        }
        prev_end = ps->p;
        if (out) {
            val->string = key;
            append_child(obj, &last, val);
        }
        count++;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            if (cut_first)
                ps->meta_to = ps->p;
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            break;
        }
        r = fail(ps, "expected ',' or '}'");
        goto out;
    }
    r = out ? check_dup_keys(ps, obj, count) : check_dup_rawkeys(ps, keys, count);
out:
    if (!out) {
        for (size_t i = 0; i < count; i++)
            free(keys[i].owned);
        if (keys != kstack)
            free(keys);
    }
    return r;
}

static int parse_array(struct parser *ps, int depth, cJSON **out)
{
    ps->p++;
    cJSON *arr = NULL, *last = NULL;
    if (out) {
        arr = cJSON_CreateArray();
        if (arr == NULL)
            return fail(ps, "out of memory");
        *out = arr;
    }
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        return 0;
    }
    while (1) {
        skip_ws(ps);
        cJSON *val = NULL;
        if (parse_value(ps, depth + 1, out ? &val : NULL) != 0) {
            cJSON_Delete(val);
            return TG_EINVAL;
        }
        if (out)
            append_child(arr, &last, val);
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            return 0;
        }
        return fail(ps, "expected ',' or ']'");
    }
}

static int literal(struct parser *ps, const char *lit, size_t n)
{
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, lit, n) != 0)
        return fail(ps, "invalid literal");
    ps->p += n;
    return 0;
}

static int parse_value(struct parser *ps, int depth, cJSON **out)
{
    if (ps->p >= ps->end)
        return fail(ps, "unexpected end of input");
    switch (*ps->p) {
    case '{':
    case '[':
        if (depth > ps->max_depth)
            return fail(ps, "nesting too deep");
        return *ps->p == '{' ? parse_object(ps, depth, out) : parse_array(ps, depth, out);
    case '"': {
        char *s = NULL;
        int escaped;
        if (out == NULL)
            return scan_string(ps, &escaped);
        if (parse_string(ps, &s, NULL, NULL) != 0)
            return TG_EINVAL;
        if (out) {
            /* a string node made around the decoded copy: cJSON_CreateString would copy it */
            cJSON *item = cJSON_CreateNull();
            if (item == NULL) {
                free(s);
                return fail(ps, "out of memory");
            }
            item->type = cJSON_String;
            item->valuestring = s;
            *out = item;
        }
        return 0;
    }
    case 't':
        if (literal(ps, "true", 4) != 0)
            return TG_EINVAL;
        if (out && (*out = cJSON_CreateTrue()) == NULL)
            return fail(ps, "out of memory");
        return 0;
    case 'f':
        if (literal(ps, "false", 5) != 0)
            return TG_EINVAL;
        if (out && (*out = cJSON_CreateFalse()) == NULL)
            return fail(ps, "out of memory");
        return 0;
    case 'n':
        if (literal(ps, "null", 4) != 0)
            return TG_EINVAL;
        if (out && (*out = cJSON_CreateNull()) == NULL)
            return fail(ps, "out of memory");
        return 0;
    default:
        if (*ps->p == '-' || (*ps->p >= '0' && *ps->p <= '9'))
            return parse_number(ps, out);
        return fail(ps, "unexpected character");
    }
}

/* The strict parser, out of line: the fast path's caller does not pay for its frame. */
static __attribute__((noinline)) int parse_strict(const char *p, size_t n, int max_depth, int build,
                                                  struct tg_json_doc *doc, const char **err, size_t *err_off)
{
    struct parser ps = {(const unsigned char *)p, (const unsigned char *)p + n, (const unsigned char *)p,
                        max_depth, build, NULL, NULL, TG_SLICE_NULL, TG_SLICE_NULL, TG_SLICE_NULL, TG_SLICE_NULL,
                        TG_SLICE_NULL, 0, NULL, NULL, 0};
    doc->root = NULL;
    doc->id_raw = TG_SLICE_NULL;
    doc->method_raw = TG_SLICE_NULL;
    doc->error_raw = TG_SLICE_NULL;
    doc->result_raw = TG_SLICE_NULL;
    cJSON *root = NULL;
    skip_ws(&ps);
    int r = parse_value(&ps, 1, build ? &root : NULL);
    if (r == 0) {
        skip_ws(&ps);
        if (ps.p != ps.end)
            r = fail(&ps, "trailing data after JSON value");
    }
    if (r != 0) {
        cJSON_Delete(root);
        if (err)
            *err = ps.err ? ps.err : "invalid JSON";
        if (err_off)
            *err_off = ps.err_at ? (size_t)(ps.err_at - ps.start) : 0;
        return TG_EINVAL;
    }
    doc->root = root;
    doc->case_twins = ps.case_twins;
    doc->id_raw = ps.id_raw;
    doc->method_raw = ps.method_raw;
    doc->error_raw = ps.error_raw;
    doc->result_raw = ps.result_raw;
    /* (A member of the root's params at depth 2 lies within it: checked all the same.) */
    const char *pf = ps.params_raw.ptr, *mf = (const char *)ps.meta_from, *mt = (const char *)ps.meta_to;
    if (build && pf != NULL && mf != NULL && mf > pf && mt < pf + ps.params_raw.len)
        doc->params_meta = tg_slice_of(mf, (size_t)(mt - mf));
    return 0;
}

int tg_json_parse(const char *p, size_t n, int max_depth, int build, struct tg_json_doc *doc, const char **err,
                  size_t *err_off)
{
    doc->params_meta = TG_SLICE_NULL;
    if (!build && tg__json_scan_fast(p, n, max_depth, doc) == 0)
        return 0;
    return parse_strict(p, n, max_depth, build, doc, err, err_off);
}
