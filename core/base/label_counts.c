/* Counters by a pair of label values (see core/base/label_counts.h). A few hundred pairs at
 * most, counted on refusals only: a list searched in order is enough. */
#include "core/base/label_counts.h"

#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"

struct pair {
    char a[TG_LABEL_VALUE_MAX + 1], b[TG_LABEL_VALUE_MAX + 1];
    uint64_t n;
};

struct tg_label_counts {
    struct pair *v;
    size_t n, cap;
};

static const char other[] = "(other)";

/* The value as the table keeps it: cut to TG_LABEL_VALUE_MAX bytes (never inside a UTF-8
 * sequence, so the text stays valid). */
static void keep(char *dst, const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n > TG_LABEL_VALUE_MAX) {
        n = TG_LABEL_VALUE_MAX;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--;
    }
    if (n > 0)
        memcpy(dst, s, n);
    dst[n] = '\0';
}

static struct pair *find(const struct tg_label_counts *t, const char *a, const char *b)
{
    for (size_t i = 0; t != NULL && i < t->n; i++)
        if (strcmp(t->v[i].a, a) == 0 && strcmp(t->v[i].b, b) == 0)
            return &t->v[i];
    return NULL;
}

void tg_label_counts_add(struct tg_label_counts **tp, const char *a, const char *b, uint64_t n)
{
    char ka[TG_LABEL_VALUE_MAX + 1], kb[TG_LABEL_VALUE_MAX + 1];
    keep(ka, a);
    keep(kb, b);
    if (*tp == NULL)
        *tp = tg_xcalloc(1, sizeof(**tp));
    struct tg_label_counts *t = *tp;
    struct pair *p = find(t, ka, kb);
    if (p == NULL && t->n >= TG_LABEL_COUNTS_MAX) {
        p = &t->v[t->n - 1]; /* the pair ("(other)", "(other)"), made with the last slot (below) */
    } else if (p == NULL) {
        if (t->n == t->cap) {
            size_t cap = t->cap ? t->cap * 2 : 8;
            if (cap > TG_LABEL_COUNTS_MAX)
                cap = TG_LABEL_COUNTS_MAX;
            t->v = tg_xrealloc(t->v, cap * sizeof(*t->v));
            t->cap = cap;
        }
        p = &t->v[t->n++];
        memset(p, 0, sizeof(*p));
        if (t->n == TG_LABEL_COUNTS_MAX) {
            /* The last pair the table takes is the one everything later is counted under. */
            memcpy(p->a, other, sizeof(other));
            memcpy(p->b, other, sizeof(other));
        } else {
            memcpy(p->a, ka, sizeof(ka));
            memcpy(p->b, kb, sizeof(kb));
        }
    }
    p->n += n;
}

uint64_t tg_label_counts_get(const struct tg_label_counts *t, const char *a, const char *b)
{
    char ka[TG_LABEL_VALUE_MAX + 1], kb[TG_LABEL_VALUE_MAX + 1];
    keep(ka, a);
    keep(kb, b);
    const struct pair *p = find(t, ka, kb);
    return p != NULL ? p->n : 0;
}

size_t tg_label_counts_size(const struct tg_label_counts *t) { return t != NULL ? t->n : 0; }

static void label_value(struct tg_buf *out, const char *s)
{
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\\' || c == '"')
            tg_buf_append(out, c == '\\' ? "\\\\" : "\\\"", 2);
        else if (c == '\n')
            tg_buf_append(out, "\\n", 2);
        else if (c < 0x20 || c == 0x7f)
            tg_buf_append(out, "?", 1);
        else
            tg_buf_append(out, s, 1);
    }
}

void tg_label_counts_render(const struct tg_label_counts *t, struct tg_buf *out, const char *name, const char *help,
                            const char *la, const char *lb)
{
    tg_buf_appendf(out, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; t != NULL && i < t->n; i++) {
        tg_buf_appendf(out, "%s{%s=\"", name, la);
        label_value(out, t->v[i].a);
        tg_buf_appendf(out, "\",%s=\"", lb);
        label_value(out, t->v[i].b);
        tg_buf_appendf(out, "\"} %llu\n", (unsigned long long)t->v[i].n);
    }
}

void tg_label_counts_free(struct tg_label_counts *t)
{
    if (t == NULL)
        return;
    tg_xfree(t->v);
    tg_xfree(t);
}
