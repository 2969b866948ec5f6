/* Canonical JSON: one text for every spelling of the same value, for what compares two values
 * by their meaning rather than by the bytes a peer chose (a tool definition against its pin, a
 * call against the calls before it). Members sorted, no whitespace, numbers in one decimal form.
 * The writer for the text as sent is core/base/json_write.c. */
#include "core/base/json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/sha256.h"
#include "core/base/siphash.h"

/* A JSON number's text (as the grammar allows it: -?digits[.digits][e[+-]digits]) in its normal
 * form: the exact decimal value, written without leading or trailing zeros, plainly when its
 * digits sit within 21 places of the point, else as d.ddde±N. No rounding: 1e400 and the
 * 25-digit integers stay what they are. Anything the grammar does not allow is copied. */
static void canon_number(struct tg_buf *b, const char *s, size_t n)
{
    size_t i = 0;
    int neg = 0;
    if (i < n && s[i] == '-') {
        neg = 1;
        i++;
    }
    char dig[64];
    size_t nd = 0, total = 0; /* significant digits kept (at most 64), all seen after the first non-zero */
    long long exp10 = 0;      /* the value is dig × 10^exp10 once every digit is read */
    int any = 0, overflow = 0;
    /* integer part */
    size_t start = i;
    while (i < n && s[i] >= '0' && s[i] <= '9') {
        if (nd > 0 || s[i] != '0') {
            if (nd < sizeof(dig))
                dig[nd++] = s[i];
            else
                exp10++; /* a digit past what we keep: the value's scale grows */
            total++;
        }
        any = 1;
        i++;
    }
    if (i == start) {
        tg_buf_append(b, s, n);
        return;
    }
    if (i < n && s[i] == '.') {
        i++;
        size_t fstart = i;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (nd > 0 || s[i] != '0') {
                if (nd < sizeof(dig)) {
                    dig[nd++] = s[i];
                    exp10--;
                } else {
                    overflow = 1; /* more than 64 significant digits: kept as written */
                }
                total++;
            } else {
                exp10--;
            }
            i++;
        }
        if (i == fstart) {
            tg_buf_append(b, s, n);
            return;
        }
    }
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            eneg = s[i++] == '-';
        size_t estart = i;
        long long e = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
            if (e < 1000000000LL)
                e = e * 10 + (s[i] - '0');
            i++;
        }
        if (i == estart) {
            tg_buf_append(b, s, n);
            return;
        }
        exp10 += eneg ? -e : e;
    }
    if (i != n || !any || overflow) {
        tg_buf_append(b, s, n);
        return;
    }
    /* drop trailing zeros of the kept digits */
    while (nd > 0 && dig[nd - 1] == '0') {
        nd--;
        exp10++;
    }
    if (nd == 0) { /* zero, whatever its sign or exponent */
        tg_buf_appends(b, "0");
        return;
    }
    if (neg)
        tg_buf_appends(b, "-");
    long long point = (long long)nd + exp10; /* digits before the decimal point */
    if (exp10 >= 0 && point <= 21) {
        tg_buf_append(b, dig, nd);
        for (long long k = 0; k < exp10; k++)
            tg_buf_appends(b, "0");
    } else if (exp10 < 0 && point > 0) {
        tg_buf_append(b, dig, (size_t)point);
        tg_buf_appends(b, ".");
        tg_buf_append(b, dig + point, nd - (size_t)point);
    } else if (exp10 < 0 && point > -6) {
        tg_buf_appends(b, "0.");
        for (long long k = point; k < 0; k++)
            tg_buf_appends(b, "0");
        tg_buf_append(b, dig, nd);
    } else {
        char e[32];
        tg_buf_append(b, dig, 1);
        if (nd > 1) {
            tg_buf_appends(b, ".");
            tg_buf_append(b, dig + 1, nd - 1);
        }
        int k = snprintf(e, sizeof(e), "e%lld", point - 1);
        tg_buf_append(b, e, (size_t)k);
    }
}

static int by_name(const void *a, const void *b)
{
    const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;
    int c = strcmp(x->string ? x->string : "", y->string ? y->string : "");
    if (c != 0)
        return c;
    return x < y ? -1 : x > y; /* never equal for two members: qsort is not stable, this is */
}

/* Deeper than any tree tg_json_parse() is asked to build (limits.json_depth is at most 1000;
 * readers add at most 16 levels): a value is never cut short here, or two deep values that differ
 * only below the cut would have one canonical form (one retry key, one audit line hash). */
#define CANON_DEPTH_MAX 1100

/* as_written: numbers as their text (tg_json_write), not by value. */
static void canon(struct tg_buf *b, const cJSON *v, int depth, int as_written)
{
    if (v == NULL || depth > CANON_DEPTH_MAX) {
        tg_buf_appends(b, "null");
        return;
    }
    if (cJSON_IsNumber(v) && !as_written) {
        if (v->valuestring != NULL) {
            canon_number(b, v->valuestring, strlen(v->valuestring));
        } else {
            char t[40];
            int k = snprintf(t, sizeof(t), "%.17g", v->valuedouble);
            canon_number(b, t, (size_t)k);
        }
        return;
    }
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v)) {
        tg_json_write(b, v);
        return;
    }
    int obj = cJSON_IsObject(v);
    size_t n = 0;
    for (const cJSON *c = v->child; c != NULL; c = c->next)
        n++;
    tg_buf_appends(b, obj ? "{" : "[");
    if (!obj) {
        size_t i = 0;
        for (const cJSON *c = v->child; c != NULL; c = c->next, i++) {
            if (i)
                tg_buf_appends(b, ",");
            canon(b, c, depth + 1, as_written);
        }
    } else if (n > 0) {
        const cJSON *small[16];
        const cJSON **m = n <= 16 ? small : tg_xcalloc(n, sizeof(*m));
        size_t i = 0;
        for (const cJSON *c = v->child; c != NULL; c = c->next)
            m[i++] = c;
        if (n > 1)
            qsort(m, n, sizeof(*m), by_name);
        for (i = 0; i < n; i++) {
            if (i)
                tg_buf_appends(b, ",");
            const char *k = m[i]->string ? m[i]->string : "";
            tg_json_write_string(b, k, strlen(k));
            tg_buf_appends(b, ":");
            canon(b, m[i], depth + 1, as_written);
        }
        if (m != small)
            free(m);
    }
    tg_buf_appends(b, obj ? "}" : "]");
}

void tg_json_canon(struct tg_buf *b, const cJSON *v)
{
    canon(b, v, 0, 0);
}

void tg_json_canon_as_written(struct tg_buf *b, const cJSON *v)
{
    canon(b, v, 0, 1);
}

void tg_json_canon_sha256(const cJSON *v, uint8_t out[32])
{
    struct tg_buf b;
    tg_buf_init(&b);
    canon(&b, v, 0, 0);
    tg_sha256(b.base, b.len, out);
    tg_buf_dispose(&b);
}

uint64_t tg_json_canon_hash(const cJSON *v, uint64_t seed)
{
    static const uint8_t key[16] = "tollgate-canon-1";
    /* A string (what most remembered arguments are) by its bytes, after an 's' no canonical
     * text starts with: no text to write, no allocation. */
    if (cJSON_IsString(v) && v->valuestring != NULL) {
        size_t n = strlen(v->valuestring);
        if (n <= 240) {
            uint8_t t[256];
            for (int i = 0; i < 8; i++)
                t[i] = (uint8_t)(seed >> (8 * i));
            t[8] = 's';
            memcpy(t + 9, v->valuestring, n);
            return tg_siphash(key, t, n + 9);
        }
    }
    char lead[8];
    struct tg_buf b;
    tg_buf_init(&b);
    for (int i = 0; i < 8; i++)
        lead[i] = (char)(seed >> (8 * i));
    tg_buf_append(&b, lead, 8);
    canon(&b, v, 0, 0);
    uint64_t h = tg_siphash(key, b.base, b.len);
    tg_buf_dispose(&b);
    return h;
}
