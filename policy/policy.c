/* Policy compiler and decisions. See policy/policy.h for the format. */
#include "policy/policy.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json.h"
#include "policy/counters.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#define POLICY_MAX_FILE (4 * 1024 * 1024)
#define DEFAULT_APPROVAL_MS (300 * 1000)

enum cop { OP_EQ, OP_NEQ, OP_IN, OP_NOT_IN, OP_LT, OP_LTE, OP_GT, OP_GTE, OP_REGEX, OP_CONTAINS, OP_EXISTS };
static const char *const op_names[] = {"eq", "neq", "in", "not_in", "lt", "lte", "gt", "gte", "regex", "contains",
                                       "exists", NULL};

enum scope { SCOPE_GRANT, SCOPE_SESSION, SCOPE_GLOBAL };
enum ckind { CK_BUCKET = 1, CK_WINDOW = 2 };

struct pcounter {
    char *key;   /* identity within the policy: "L:name" (hosted) or "S:scope.name" (Intercept) */
    char *label; /* for messages */
    enum ckind kind;
    enum scope scope;
    double capacity;   /* bucket */
    int64_t window_ms; /* bucket: refills capacity in this time; window: its length */
};

struct cond {
    int is_state;
    char **path; /* args path segments */
    int npath;
    int counter; /* state: index into counters, or -1 if the policy never defines it */
    enum cop op;
    cJSON *value;
    double num;
    pcre2_code *re;            /* regex: compiled (JIT where it can be) at load */
    pcre2_match_data *md;      /* regex: this pattern's match data, reused by every match */
    pcre2_match_context *mctx; /* regex: the policy's limits (struct tg_policy owns it) */
};

struct rule {
    char *name;
    int deny;
    struct cond *conds;
    int nconds;
    char *on_deny;
    int counter; /* state counter, -1 if none */
    double increment;
    char *incr_from; /* "args.a.b" as written, for messages */
    char **incr_path;
    int nincr;
    double limit; /* the value after a reservation must be <= or < this (limit_op) */
    enum tg_limit_op limit_op;
};

enum taction { TA_ALLOW, TA_DENY, TA_APPROVE };

struct ptool {
    char *name;
    enum taction action;
    char *reason;
    int *limits;
    int nlimits;
    struct rule *rules;
    int nrules;
    int approval_ms;
    int unconditional_deny; /* some rule denies without conditions: hidden from tools/list */
};

struct globset {
    int present;
    int default_deny;
    char **allow, **deny;
    int nallow, ndeny;
    char *reason;
};

struct tg_policy {
    int refcnt;
    char *name;
    int default_deny;
    int hide_all;
    char **hide;
    int nhide;
    struct ptool *tools; /* sorted by name */
    int ntools;
    struct ptool *wildcard;
    struct pcounter *counters;
    int ncounters;
    char **methods;
    int nmethods;
    struct globset resources, prompts;
    /* Regex conditions: one match context (limits, JIT stack) for all of them, made with the
     * first. Matching writes to the match data and the JIT stack, which is safe because
     * decisions run on one thread and never nest. */
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
};

/* ---- errors ------------------------------------------------------------------ */

struct cctx {
    const char *name;
    struct tg_buf *err, *warn;
    int nerr;
    struct tg_policy *p;
};

static void perr(struct cctx *cx, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void perr(struct cctx *cx, const char *path, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tg_buf_appendf(cx->err, "%s: %s: %s\n", cx->name, path, msg);
    cx->nerr++;
}

static void pwarn(struct cctx *cx, const char *path, const char *what)
{
    if (cx->warn)
        tg_buf_appendf(cx->warn, "%s: %s: %s\n", cx->name, path, what);
}

static void check_keys(struct cctx *cx, const cJSON *obj, const char *path, const char *const *known)
{
    for (const cJSON *c = obj->child; c; c = c->next) {
        int ok = 0;
        for (int i = 0; known[i]; i++)
            if (strcmp(c->string, known[i]) == 0)
                ok = 1;
        if (!ok) {
            char p[600];
            snprintf(p, sizeof(p), "%s%s%s", path, path[0] ? "." : "", c->string);
            pwarn(cx, p, "unknown field, ignored");
        }
    }
}

static char *xstrdup(const char *s) { return tg_xstrdup(s); }

/* ---- windows ------------------------------------------------------------------- */

/* "second|minute|hour|day" or a positive number of seconds (number or numeric string). */
static int64_t parse_window(const cJSON *w, int allow_seconds, int allow_units)
{
    if (cJSON_IsString(w)) {
        const char *s = w->valuestring;
        if (allow_seconds && strcmp(s, "second") == 0)
            return 1000;
        if (strcmp(s, "minute") == 0)
            return 60000;
        if (strcmp(s, "hour") == 0)
            return 3600000;
        if (strcmp(s, "day") == 0)
            return 86400000;
        if (!allow_seconds)
            return -1;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (errno != 0 || end == s || v <= 0)
            return -1;
        long long mult = 1;
        if (!allow_units && *end != '\0')
            return -1;
        if (*end == 's' && end[1] == '\0')
            mult = 1;
        else if (*end == 'm' && end[1] == '\0')
            mult = 60;
        else if (*end == 'h' && end[1] == '\0')
            mult = 3600;
        else if (*end == 'd' && end[1] == '\0')
            mult = 86400;
        else if (*end != '\0')
            return -1;
        if (v > 31536000LL / mult)
            return -1;
        return v * mult * 1000;
    }
    if (allow_seconds && cJSON_IsNumber(w)) {
        double d = w->valuedouble;
        if (d > 0 && d <= 31536000.0)
            return (int64_t)(d * 1000);
    }
    return -1;
}

static void window_label(int64_t ms, char *out, size_t n)
{
    if (ms == 1000)
        snprintf(out, n, "second");
    else if (ms == 60000)
        snprintf(out, n, "minute");
    else if (ms == 3600000)
        snprintf(out, n, "hour");
    else if (ms == 86400000)
        snprintf(out, n, "day");
    else if (ms % 1000 == 0)
        snprintf(out, n, "%lld seconds", (long long)(ms / 1000));
    else
        snprintf(out, n, "%.3f seconds", (double)ms / 1000.0);
}

static const char *scope_label(enum scope s)
{
    return s == SCOPE_SESSION ? "for this session" : s == SCOPE_GLOBAL ? "across all callers" : "for this grant";
}

static int find_counter(struct tg_policy *p, const char *key)
{
    for (int i = 0; i < p->ncounters; i++)
        if (strcmp(p->counters[i].key, key) == 0)
            return i;
    return -1;
}

static int add_counter(struct tg_policy *p, struct pcounter *pc)
{
    p->counters = tg_xrealloc(p->counters, (size_t)(p->ncounters + 1) * sizeof(*p->counters));
    p->counters[p->ncounters] = *pc;
    return p->ncounters++;
}

/* ---- paths ------------------------------------------------------------------ */

static int split_path(const char *s, char ***out)
{
    int n = 0;
    char **v = NULL;
    const char *p = s;
    while (*p) {
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len == 0) {
            for (int i = 0; i < n; i++)
                free(v[i]);
            free(v);
            return -1;
        }
        v = tg_xrealloc(v, (size_t)(n + 1) * sizeof(*v));
        v[n++] = tg_slice_dup(tg_slice_of(p, len));
        p += len;
        if (*p == '.')
            p++;
        if (dot && *p == '\0') {
            for (int i = 0; i < n; i++)
                free(v[i]);
            free(v);
            return -1;
        }
    }
    *out = v;
    return n;
}

static const cJSON *resolve_args(const cJSON *args, char **path, int n)
{
    const cJSON *cur = args;
    for (int i = 0; i < n && cur != NULL; i++) {
        if (cJSON_IsObject(cur)) {
            cur = cJSON_GetObjectItemCaseSensitive(cur, path[i]);
        } else if (cJSON_IsArray(cur)) {
            char *end;
            long k = strtol(path[i], &end, 10);
            if (*end != '\0' || k < 0 || end == path[i])
                return NULL;
            cur = cJSON_GetArrayItem(cur, (int)k);
        } else {
            return NULL;
        }
    }
    return cur;
}

/* ---- regex: RE2 syntax on PCRE2 ------------------------------------------------------
 *
 * Intercept compiles `regex` values with Go's regexp, which is RE2 syntax. PCRE2 reads most of
 * it the same way, but not all, and it accepts much that RE2 refuses. re2_to_pcre2() walks the
 * pattern once: what RE2 refuses (backreferences, lookaround, atomic groups, possessive and
 * doubled repeats, recursion, conditionals, verbs, \Z, \K, \G, \C, ...) is refused with the
 * reason; what the two engines read differently is rewritten to PCRE2 that means what RE2 means:
 *   \s \S     RE2 [\t\n\f\r ], no vertical tab (PCRE2's \s has it); \d \w and [:name:]
 *             are written out as ranges too (see re2_classes)
 *   \v        the vertical tab character (PCRE2: any vertical space)
 *   \123      an octal escape (PCRE2: a backreference when there are that many groups)
 *   {         a literal unless it starts a valid {n}, {n,} or {n,m} (PCRE2 10.43 reads {,n})
 *   [ in [..] a literal unless it starts [:class:] (PCRE2 refuses [. and [=)
 * The rest is copied as it is: with PCRE2_UTF and without PCRE2_UCP, \b is an ASCII word
 * boundary, . is one character, (?i) folds Unicode case and \p{..} are Unicode properties, as
 * in RE2. PCRE2_DOLLAR_ENDONLY makes $ the end of the text (RE2 without (?m)), not also the
 * place before a final newline; PCRE2_ALT_CIRCUMFLEX lets (?m)^ match after a final newline,
 * as RE2's does. */

#define RE2_MAX_REPEAT 1000
#define RX_MATCH_LIMIT 1000000         /* backtracking steps per match (PCRE2's default is 10 million) */
#define RX_DEPTH_LIMIT 100000          /* interpreter backtracking depth (not used by the JIT) */
#define RX_HEAP_LIMIT_KIB (20 * 1024)  /* interpreter backtracking memory */
#define RX_JIT_STACK_MAX (1024 * 1024) /* JIT backtracking memory: a 40000-character (?:a|-)+ */

/* RE2's classes, all ASCII, as ranges for the inside of a PCRE2 class: what they hold, and
 * what their negation holds (up to U+10FFFF). Written out rather than left to PCRE2's own \d \w
 * and [:name:] for two reasons: RE2's \s is not PCRE2's (no vertical tab), and PCRE2 10.42 gets
 * some negated classes wrong in UTF mode ([^\W[:space:]] matches "α", which is not a word
 * character), while plain ranges it gets right. */
struct re2_class {
    const char *name;
    const char *in;       /* the class */
    const char *out;      /* its negation */
    const char *out_fold; /* its negation under (?i), where that differs (see rx_set) */
};
static const struct re2_class re2_classes[] = {
    {"alnum", "\\x{30}-\\x{39}\\x{41}-\\x{5a}\\x{61}-\\x{7a}", "\\x{0}-\\x{2f}\\x{3a}-\\x{40}\\x{5b}-\\x{60}\\x{7b}-\\x{10ffff}",
     "\\x{0}-\\x{2f}\\x{3a}-\\x{40}\\x{5b}-\\x{60}\\x{7b}-\\x{17e}\\x{180}-\\x{2129}\\x{212b}-\\x{10ffff}"},
    {"alpha", "\\x{41}-\\x{5a}\\x{61}-\\x{7a}", "\\x{0}-\\x{40}\\x{5b}-\\x{60}\\x{7b}-\\x{10ffff}",
     "\\x{0}-\\x{40}\\x{5b}-\\x{60}\\x{7b}-\\x{17e}\\x{180}-\\x{2129}\\x{212b}-\\x{10ffff}"},
    {"ascii", "\\x{0}-\\x{7f}", "\\x{80}-\\x{10ffff}",
     "\\x{80}-\\x{17e}\\x{180}-\\x{2129}\\x{212b}-\\x{10ffff}"},
    {"blank", "\\x{9}\\x{20}", "\\x{0}-\\x{8}\\x{a}-\\x{1f}\\x{21}-\\x{10ffff}", NULL},
    {"cntrl", "\\x{0}-\\x{1f}\\x{7f}", "\\x{20}-\\x{7e}\\x{80}-\\x{10ffff}", NULL},
    {"digit", "\\x{30}-\\x{39}", "\\x{0}-\\x{2f}\\x{3a}-\\x{10ffff}", NULL},
    {"graph", "\\x{21}-\\x{7e}", "\\x{0}-\\x{20}\\x{7f}-\\x{10ffff}",
     "\\x{0}-\\x{20}\\x{7f}-\\x{17e}\\x{180}-\\x{2129}\\x{212b}-\\x{10ffff}"},
    {"lower", "\\x{61}-\\x{7a}", "\\x{0}-\\x{60}\\x{7b}-\\x{10ffff}",
     "\\x{0}-\\x{40}\\x{5b}-\\x{60}\\x{7b}-\\x{17e}\\x{180}-\\x{2129}\\x{212b}-\\x{10ffff}"},
    {"print", "\\x{20}-\\x{7e}", "\\x{0}-\\x{1f}\\x{7f}-\\x{10ffff}",
     "\\x{0}-\\x{1f}\\x{7f}-\\x{17e}\\x{180}-\\x{2129}\\x{212b}-\\x{10ffff}"},
    {"punct", "\\x{21}-\\x{2f}\\x{3a}-\\x{40}\\x{5b}-\\x{60}\\x{7b}-\\x{7e}",
     "\\x{0}-\\x{20}\\x{30}-\\x{39}\\x{41}-\\x{5a}\\x{61}-\\x{7a}\\x{7f}-\\x{10ffff}", NULL},
    {"space", "\\x{9}-\\x{d}\\x{20}", "\\x{0}-\\x{8}\\x{e}-\\x{1f}\\x{21}-\\x{10ffff}", NULL}, /* [[:space:]] has \v */
    {"upper", "\\x{41}-\\x{5a}", "\\x{0}-\\x{40}\\x{5b}-\\x{10ffff}",
     "\\x{0}-\\x{40}\\x{5b}-\\x{60}\\x{7b}-\\x{17e}\\x{180}-\\x{2129}\\x{212b}-\\x{10ffff}"},
    {"word", "\\x{30}-\\x{39}\\x{41}-\\x{5a}\\x{5f}\\x{61}-\\x{7a}", "\\x{0}-\\x{2f}\\x{3a}-\\x{40}\\x{5b}-\\x{5e}\\x{60}\\x{7b}-\\x{10ffff}",
     "\\x{0}-\\x{2f}\\x{3a}-\\x{40}\\x{5b}-\\x{5e}\\x{60}\\x{7b}-\\x{17e}\\x{180}-\\x{2129}\\x{212b}-\\x{10ffff}"},
    {"xdigit", "\\x{30}-\\x{39}\\x{41}-\\x{46}\\x{61}-\\x{66}", "\\x{0}-\\x{2f}\\x{3a}-\\x{40}\\x{47}-\\x{60}\\x{67}-\\x{10ffff}",
     "\\x{0}-\\x{2f}\\x{3a}-\\x{40}\\x{47}-\\x{60}\\x{67}-\\x{10ffff}"},
    /* \s: [\t\n\f\r ], no \v */
    {"\\s", "\\x{9}\\x{a}\\x{c}\\x{d}\\x{20}", "\\x{0}-\\x{8}\\x{b}\\x{e}-\\x{1f}\\x{21}-\\x{10ffff}", NULL},
};

/* The inside of a class for k or its negation. Under (?i) RE2 negates the case-folded class:
 * (?i)[\W] excludes not only the word characters but also U+017F (long s) and U+212A (Kelvin
 * sign), which fold to s and k. PCRE2 folds the written ranges instead, and would add s and k
 * back through those two: out_fold leaves them out. */
static const char *rx_set(const struct re2_class *k, int neg, int icase)
{
    if (!neg)
        return k->in;
    return icase && k->out_fold != NULL ? k->out_fold : k->out;
}

static const struct re2_class *re2_class(const char *name, size_t n)
{
    for (size_t i = 0; i < sizeof(re2_classes) / sizeof(re2_classes[0]); i++)
        if (strlen(re2_classes[i].name) == n && memcmp(re2_classes[i].name, name, n) == 0)
            return &re2_classes[i];
    return NULL;
}

struct rx {
    const char *pat; /* the RE2 pattern */
    size_t len;
    struct tg_buf out; /* the PCRE2 pattern */
    size_t *map;       /* map[i]: where in pat out.base[i] came from (for compile error offsets) */
    size_t mapcap;
    char why[160]; /* the refusal */
    size_t at;
    int icase;        /* (?i) in force here */
    int *saved;       /* icase of each open group, restored at its ) */
    size_t depth, savedcap;
};

static void rx_open(struct rx *x)
{
    if (x->depth == x->savedcap) {
        x->savedcap = x->savedcap * 2 + 8;
        x->saved = tg_xrealloc(x->saved, x->savedcap * sizeof(*x->saved));
    }
    x->saved[x->depth++] = x->icase;
}

static void rx_close(struct rx *x)
{
    if (x->depth > 0) /* an unmatched ) is PCRE2's to refuse */
        x->icase = x->saved[--x->depth];
}

static void rx_emit(struct rx *x, size_t from, const char *s, size_t n)
{
    tg_buf_append(&x->out, s, n);
    if (x->out.len > x->mapcap) {
        x->mapcap = x->out.len * 2 + 16;
        x->map = tg_xrealloc(x->map, x->mapcap * sizeof(*x->map));
    }
    for (size_t i = x->out.len - n; i < x->out.len; i++)
        x->map[i] = from;
}

static long rx_refuse(struct rx *x, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static long rx_refuse(struct rx *x, size_t at, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->why, sizeof(x->why), fmt, ap);
    va_end(ap);
    x->at = at;
    return -1;
}

static int is_octal(char c) { return c >= '0' && c <= '7'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* {n}, {n,} or {n,m} at pat[i]: its end (one past '}') and its counts, or 0 if it is not one
 * (then RE2 reads the brace as a literal). */
static size_t rx_repeat(const struct rx *x, size_t i, long *lo, long *hi)
{
    size_t j = i + 1;
    long a = 0, b;
    if (j >= x->len || !is_digit(x->pat[j]))
        return 0;
    for (; j < x->len && is_digit(x->pat[j]); j++)
        if (a <= RE2_MAX_REPEAT) /* past it the exact count no longer matters */
            a = a * 10 + (x->pat[j] - '0');
    b = a;
    if (j < x->len && x->pat[j] == ',') {
        j++;
        b = -1;
        if (j < x->len && is_digit(x->pat[j])) {
            b = 0;
            for (; j < x->len && is_digit(x->pat[j]); j++)
                if (b <= RE2_MAX_REPEAT)
                    b = b * 10 + (x->pat[j] - '0');
        }
    }
    if (j >= x->len || x->pat[j] != '}')
        return 0;
    *lo = a;
    *hi = b;
    return j + 1;
}

/* A backslash at pat[i]; returns the index after the escape or -1. */
static long rx_escape(struct rx *x, size_t i, int in_class)
{
    const char *p = x->pat;
    if (i + 1 >= x->len) {
        rx_emit(x, i, "\\", 1); /* PCRE2 refuses a trailing backslash, as RE2 does */
        return (long)(i + 1);
    }
    char c = p[i + 1];
    char tmp[32];
    switch (c) {
    case 'a': case 'f': case 't': case 'n': case 'r':
        rx_emit(x, i, p + i, 2);
        return (long)(i + 2);
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': {
        const struct re2_class *k = re2_class(c == 'd' || c == 'D' ? "digit" : c == 'w' || c == 'W' ? "word" : "\\s",
                                              c == 's' || c == 'S' ? 2 : c == 'd' || c == 'D' ? 5 : 4);
        int neg = c == 'D' || c == 'W' || c == 'S';
        if (in_class) {
            const char *r = rx_set(k, neg, x->icase);
            rx_emit(x, i, r, strlen(r));
        } else { /* [^...] of the class itself: PCRE2 folds, then negates, as RE2 does */
            rx_emit(x, i, neg ? "[^" : "[", neg ? 2 : 1);
            rx_emit(x, i, k->in, strlen(k->in));
            rx_emit(x, i, "]", 1);
        }
        return (long)(i + 2);
    }
    case 'v':
        rx_emit(x, i, "\\x0b", 4);
        return (long)(i + 2);
    case 'p':
    case 'P': {
        size_t j = i + 2;
        if (j < x->len && p[j] == '{') {
            while (j < x->len && p[j] != '}')
                j++;
            j = j < x->len ? j + 1 : j; /* unclosed: PCRE2 says so */
        } else if (j < x->len && is_alpha(p[j])) {
            j++;
        }
        rx_emit(x, i, p + i, j - i);
        return (long)j;
    }
    case 'x': {
        size_t j = i + 2;
        if (j < x->len && p[j] == '{') {
            while (j < x->len && p[j] != '}')
                j++;
            j = j < x->len ? j + 1 : j;
        } else if (j + 1 < x->len && is_hex(p[j]) && is_hex(p[j + 1])) {
            j += 2;
        } else {
            return rx_refuse(x, i, "\\x needs two hex digits or {hex} in RE2");
        }
        rx_emit(x, i, p + i, j - i);
        return (long)j;
    }
    case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7':
        /* RE2: \0 and \1..\7 followed by an octal digit start an octal escape of up to three
         * digits; a lone \1..\7 would be a backreference. */
        if (c != '0' && !(i + 2 < x->len && is_octal(p[i + 2])))
            return in_class ? rx_refuse(x, i, "\\%c is not RE2 syntax", c)
                            : rx_refuse(x, i, "backreferences are not RE2 syntax");
        {
            size_t j = i + 1;
            unsigned v = 0;
            while (j < x->len && j < i + 4 && is_octal(p[j]))
                v = v * 8 + (unsigned)(p[j++] - '0');
            snprintf(tmp, sizeof(tmp), "\\x{%x}", v);
            rx_emit(x, i, tmp, strlen(tmp));
            return (long)j;
        }
    case '8': case '9':
        return in_class ? rx_refuse(x, i, "\\%c is not RE2 syntax", c)
                        : rx_refuse(x, i, "backreferences are not RE2 syntax");
    case 'k':
        return in_class ? rx_refuse(x, i, "\\k is not RE2 syntax") : rx_refuse(x, i, "backreferences are not RE2 syntax");
    case 'g':
        if (in_class)
            return rx_refuse(x, i, "\\g is not RE2 syntax");
        if (i + 2 < x->len && (p[i + 2] == '<' || p[i + 2] == '\''))
            return rx_refuse(x, i, "recursion and subroutine calls are not RE2 syntax");
        return rx_refuse(x, i, "backreferences are not RE2 syntax");
    case 'b': case 'B': case 'A': case 'z':
        if (in_class)
            return rx_refuse(x, i, "\\%c inside a character class is not RE2 syntax", c);
        rx_emit(x, i, p + i, 2);
        return (long)(i + 2);
    case 'Q': {
        if (in_class)
            return rx_refuse(x, i, "\\Q inside a character class is not RE2 syntax");
        /* Literal up to \E or the end, in both engines. */
        size_t j = i + 2;
        while (j < x->len && !(p[j] == '\\' && j + 1 < x->len && p[j + 1] == 'E'))
            j++;
        j = j < x->len ? j + 2 : j;
        rx_emit(x, i, p + i, j - i);
        return (long)j;
    }
    case 'E': return rx_refuse(x, i, "\\E without \\Q is not RE2 syntax");
    case 'Z':
        return rx_refuse(x, i, "\\Z is not RE2 syntax (it would also match before a final newline; \\z is the end of text)");
    default: break;
    }
    if ((unsigned char)c >= 0x80)
        return rx_refuse(x, i, "a backslash before a non-ASCII character is not RE2 syntax");
    if (is_alpha(c))
        return rx_refuse(x, i, "\\%c is not RE2 syntax", c);
    rx_emit(x, i, p + i, 2); /* escaped punctuation: the character itself */
    return (long)(i + 2);
}

/* "(?" at pat[i]: RE2 has (?:re), (?P<name>re), (?<name>re) and flags (?imsU-imsU) and
 * (?flags:re). Returns the index after what it copied, or -1. */
static long rx_group(struct rx *x, size_t i)
{
    const char *p = x->pat;
    size_t j = i + 2;
    char c = j < x->len ? p[j] : '\0';
    switch (c) {
    case ':':
        rx_open(x);
        rx_emit(x, i, "(?:", 3);
        return (long)(i + 3);
    case 'P':
        if (j + 1 < x->len && p[j + 1] == '<') {
            rx_open(x);
            rx_emit(x, i, "(?P<", 4);
            return (long)(i + 4);
        }
        if (j + 1 < x->len && p[j + 1] == '=')
            return rx_refuse(x, i, "backreferences are not RE2 syntax");
        if (j + 1 < x->len && p[j + 1] == '>')
            return rx_refuse(x, i, "recursion and subroutine calls are not RE2 syntax");
        return rx_refuse(x, i, "(?P must be followed by <name> in RE2");
    case '<':
        if (j + 1 < x->len && (p[j + 1] == '=' || p[j + 1] == '!'))
            return rx_refuse(x, i, "lookaround assertions are not RE2 syntax");
        rx_open(x);
        rx_emit(x, i, "(?<", 3);
        return (long)(i + 3);
    case '=':
    case '!': return rx_refuse(x, i, "lookaround assertions are not RE2 syntax");
    case '>': return rx_refuse(x, i, "atomic groups are not RE2 syntax");
    case '|': return rx_refuse(x, i, "branch reset groups are not RE2 syntax");
    case '#': return rx_refuse(x, i, "comments are not RE2 syntax");
    case '(': return rx_refuse(x, i, "conditional groups are not RE2 syntax");
    case 'C': return rx_refuse(x, i, "callouts are not RE2 syntax");
    case '\'': return rx_refuse(x, i, "(?'name'...) is not RE2 syntax; write (?P<name>...)");
    case 'R': case '&': case '+':
        return rx_refuse(x, i, "recursion and subroutine calls are not RE2 syntax");
    default: break;
    }
    if (is_digit(c) || (c == '-' && j + 1 < x->len && is_digit(p[j + 1])))
        return rx_refuse(x, i, "recursion and subroutine calls are not RE2 syntax");
    /* Flags. */
    int before = 0, after = 0, neg = 0, icase = x->icase;
    for (; j < x->len && p[j] != ')' && p[j] != ':'; j++) {
        char f = p[j];
        if (f == '-') {
            if (neg++)
                return rx_refuse(x, i, "(?flags) must name at least one flag on each side of -");
        } else if (f == 'i' || f == 'm' || f == 's' || f == 'U') {
            *(neg ? &after : &before) += 1;
            if (f == 'i')
                icase = !neg;
        } else if (is_alpha(f)) {
            return rx_refuse(x, j, "flag \"%c\" is not RE2 syntax (RE2 has i, m, s and U)", f);
        } else {
            return rx_refuse(x, i, "(?%c is not RE2 syntax", f);
        }
    }
    if (j >= x->len)
        return rx_refuse(x, i, "missing ) after (?");
    if (before + after == 0 || (neg && (after == 0)))
        return rx_refuse(x, i, "(?flags) must name at least one flag on each side of -");
    if (p[j] == ':') /* (?i:re): for re only */
        rx_open(x);
    x->icase = icase; /* (?i): to the end of the enclosing group */
    rx_emit(x, i, p + i, j + 1 - i);
    return (long)(j + 1);
}

/* After a repeat that ended at pat[j]: RE2 allows one lazy '?', nothing else. */
static long rx_after_repeat(struct rx *x, size_t j)
{
    long lo, hi;
    if (j < x->len && x->pat[j] == '+')
        return rx_refuse(x, j, "possessive quantifiers are not RE2 syntax");
    if (j < x->len && x->pat[j] == '?') {
        rx_emit(x, j, "?", 1);
        j++;
    }
    if (j < x->len && (x->pat[j] == '*' || x->pat[j] == '+' || x->pat[j] == '?' ||
                       (x->pat[j] == '{' && rx_repeat(x, j, &lo, &hi) != 0)))
        return rx_refuse(x, j, "a repetition of a repetition is not RE2 syntax (group it: (?:a*)*)");
    return (long)j;
}

/* Translate x->pat into x->out; 0, or -1 with x->why and x->at. */
static int re2_to_pcre2(struct rx *x)
{
    const char *p = x->pat;
    size_t i = 0;
    while (i < x->len) {
        char c = p[i];
        long next;
        switch (c) {
        case '\\':
            next = rx_escape(x, i, 0);
            break;
        case '(':
            if (i + 1 < x->len && p[i + 1] == '*')
                return (int)rx_refuse(x, i, "backtracking verbs and (*...) options are not RE2 syntax");
            if (i + 1 < x->len && p[i + 1] == '?') {
                next = rx_group(x, i);
            } else {
                rx_open(x);
                rx_emit(x, i, "(", 1);
                next = (long)(i + 1);
            }
            break;
        case ')':
            rx_close(x);
            rx_emit(x, i, ")", 1);
            next = (long)(i + 1);
            break;
        case '*':
        case '+':
        case '?':
            rx_emit(x, i, p + i, 1);
            next = rx_after_repeat(x, i + 1);
            break;
        case '{': {
            long lo, hi;
            size_t end = rx_repeat(x, i, &lo, &hi);
            if (end == 0) {
                rx_emit(x, i, "\\{", 2); /* a literal brace, as RE2 reads it */
                next = (long)(i + 1);
                break;
            }
            if (lo > RE2_MAX_REPEAT || hi > RE2_MAX_REPEAT)
                return (int)rx_refuse(x, i, "repetition counts above %d are not RE2 syntax", RE2_MAX_REPEAT);
            rx_emit(x, i, p + i, end - i);
            next = rx_after_repeat(x, end);
            break;
        }
        case '[': {
            /* A character class: [, an optional ^, a leading ] as a literal, then up to ]. */
            size_t j = i + 1;
            rx_emit(x, i, "[", 1);
            if (j < x->len && p[j] == '^')
                rx_emit(x, j++, "^", 1);
            if (j < x->len && p[j] == ']') {
                rx_emit(x, j++, "\\]", 2);
            } else if (j < x->len && (p[j] == ':' || p[j] == '.' || p[j] == '=')) {
                /* RE2 reads [:a:] as a class of ':' and 'a'; PCRE2 would take it for a
                 * misplaced [:name:] and refuse it. */
                char esc[2] = {'\\', p[j]};
                rx_emit(x, j++, esc, 2);
            }
            while (j < x->len && p[j] != ']') {
                if (p[j] == '\\') {
                    long k = rx_escape(x, j, 1);
                    if (k < 0)
                        return -1;
                    j = (size_t)k;
                } else if (p[j] == '[' && j + 1 < x->len && p[j + 1] == ':') {
                    size_t k = j + 2;
                    while (k + 1 < x->len && !(p[k] == ':' && p[k + 1] == ']') && p[k] != ']')
                        k++;
                    if (k + 1 < x->len && p[k] == ':' && p[k + 1] == ']') {
                        int neg = p[j + 2] == '^';
                        const char *name = p + j + 2 + neg;
                        const struct re2_class *rc = re2_class(name, (size_t)(p + k - name));
                        if (rc == NULL || rc->name[0] == '\\')
                            return (int)rx_refuse(x, j, "[:%.*s:] is not an RE2 class", (int)(p + k - name), name);
                        const char *r = rx_set(rc, neg, x->icase);
                        rx_emit(x, j, r, strlen(r));
                        j = k + 2;
                    } else {
                        rx_emit(x, j++, "\\[", 2);
                    }
                } else if (p[j] == '[') {
                    rx_emit(x, j++, "\\[", 2);
                } else {
                    rx_emit(x, j, p + j, 1);
                    j++;
                }
            }
            if (j < x->len) {
                rx_emit(x, j, "]", 1);
                j++;
            }
            next = (long)j;
            break;
        }
        default:
            rx_emit(x, i, p + i, 1);
            next = (long)(i + 1);
            break;
        }
        if (next < 0)
            return -1;
        i = (size_t)next;
    }
    return 0;
}

/* The policy's match context, made with its first regex: limits on backtracking, so that no
 * pattern can spend more than a few milliseconds on one argument. */
static pcre2_match_context *policy_mctx(struct tg_policy *p)
{
    if (p->mctx != NULL)
        return p->mctx;
    p->mctx = pcre2_match_context_create(NULL);
    if (p->mctx == NULL)
        abort();
    pcre2_set_match_limit(p->mctx, RX_MATCH_LIMIT);
    pcre2_set_depth_limit(p->mctx, RX_DEPTH_LIMIT);
    pcre2_set_heap_limit(p->mctx, RX_HEAP_LIMIT_KIB);
    /* Without a stack of its own the JIT has 32 KiB, about 1300 repeats of (?:a|b). The stack is
     * reserved up front but only the pages used are ever touched. */
    p->jit_stack = pcre2_jit_stack_create(32 * 1024, RX_JIT_STACK_MAX, NULL);
    if (p->jit_stack != NULL)
        pcre2_jit_stack_assign(p->mctx, NULL, p->jit_stack);
    return p->mctx;
}

static int compile_regex(struct tg_policy *p, const char *pat, struct cond *out, char *why, size_t whysz)
{
    struct rx x = {.pat = pat, .len = strlen(pat)};
    tg_buf_init(&x.out);
    int r = -1;
    pcre2_compile_context *cc = NULL;
    if (re2_to_pcre2(&x) != 0) {
        snprintf(why, whysz, "%s (at offset %zu of \"%s\")", x.why, x.at, pat);
        goto done;
    }
    cc = pcre2_compile_context_create(NULL);
    if (cc == NULL)
        abort();
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF); /* RE2's . and (?m) know only \n */
    int code;
    PCRE2_SIZE off;
    /* UTF: patterns and arguments are UTF-8 (the JSON decoder and libyaml refuse anything
     * else; pcre2_match still checks each argument and a check that fails denies). No UCP:
     * \b stays ASCII, as in RE2. */
    uint32_t opts = PCRE2_UTF | PCRE2_NEVER_UCP | PCRE2_NEVER_BACKSLASH_C | PCRE2_DOLLAR_ENDONLY | PCRE2_ALT_CIRCUMFLEX;
    out->re = pcre2_compile((PCRE2_SPTR)(x.out.base ? x.out.base : ""), x.out.len, opts, &code, &off, cc);
    if (out->re == NULL) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof(msg));
        size_t at = off < x.out.len ? x.map[off] : x.len;
        snprintf(why, whysz, "invalid regex \"%s\": %s at offset %zu", pat, (const char *)msg, at);
        goto done;
    }
    uint32_t backrefs = 0;
    if (pcre2_pattern_info(out->re, PCRE2_INFO_BACKREFMAX, &backrefs) != 0 || backrefs > 0) {
        snprintf(why, whysz, "backreferences are not RE2 syntax (in \"%s\")", pat);
        pcre2_code_free(out->re);
        out->re = NULL;
        goto done;
    }
    /* JIT where this build and machine have it; the interpreter otherwise, with the same
     * answers under the match and depth limits. */
    (void)pcre2_jit_compile(out->re, PCRE2_JIT_COMPLETE);
    out->md = pcre2_match_data_create(1, NULL);
    if (out->md == NULL)
        abort();
    out->mctx = policy_mctx(p);
    r = 0;
done:
    pcre2_compile_context_free(cc);
    free(x.map);
    free(x.saved);
    tg_buf_dispose(&x.out);
    return r;
}

/* 1 match, 0 no match, -1 no answer (a limit was hit, or the argument is not valid UTF-8).
 * A regex condition is a requirement, so -1 fails it like 0 and the call is denied. */
static int regex_match(const struct cond *c, const char *s)
{
    int rc = pcre2_match(c->re, (PCRE2_SPTR)s, strlen(s), 0, 0, c->md, c->mctx);
    if (rc >= 0) /* 0: matched, with more groups than the one-pair match data holds */
        return 1;
    return rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

/* ---- compile ------------------------------------------------------------------ */

static int op_of(const char *s)
{
    for (int i = 0; op_names[i]; i++)
        if (strcmp(s, op_names[i]) == 0)
            return i;
    return -1;
}

static void compile_cond(struct cctx *cx, const cJSON *c, const char *path, const char *scope, struct cond *out)
{
    memset(out, 0, sizeof(*out));
    out->counter = -1;
    if (!cJSON_IsObject(c)) {
        perr(cx, path, "a condition must be an object {path, op, value}");
        return;
    }
    static const char *const known[] = {"path", "op", "value", NULL};
    check_keys(cx, c, path, known);
    const cJSON *jp = cJSON_GetObjectItemCaseSensitive(c, "path");
    const cJSON *jo = cJSON_GetObjectItemCaseSensitive(c, "op");
    const cJSON *jv = cJSON_GetObjectItemCaseSensitive(c, "value");
    char sub[600];
    snprintf(sub, sizeof(sub), "%s.path", path);
    if (!cJSON_IsString(jp)) {
        perr(cx, sub, "must be a string");
        return;
    }
    const char *ps = jp->valuestring;
    if (strncmp(ps, "args.", 5) == 0) {
        out->npath = split_path(ps + 5, &out->path);
        if (out->npath <= 0) {
            perr(cx, sub, "\"%s\" is not a valid args path", ps);
            out->npath = 0;
        }
    } else if (strncmp(ps, "state.", 6) == 0) {
        out->is_state = 1;
        const char *rest = ps + 6;
        const char *dot = strrchr(rest, '.');
        if (dot == NULL || dot == rest || dot[1] == '\0') {
            perr(cx, sub, "\"%s\" must be state.<tool or _global>.<counter>", ps);
        } else {
            char key[300];
            snprintf(key, sizeof(key), "S:%s", rest);
            out->counter = find_counter(cx->p, key); /* resolved again after all rules are compiled */
            out->path = tg_xcalloc(1, sizeof(char *));
            out->path[0] = xstrdup(key);
            out->npath = 1;
        }
    } else {
        perr(cx, sub, "path must start with \"args.\" or \"state.\", got \"%s\"", ps);
    }
    snprintf(sub, sizeof(sub), "%s.op", path);
    int op = cJSON_IsString(jo) ? op_of(jo->valuestring) : -1;
    if (op < 0) {
        perr(cx, sub, "unknown operator \"%s\" (eq neq in not_in lt lte gt gte regex contains exists)",
             cJSON_IsString(jo) ? jo->valuestring : "?");
        return;
    }
    out->op = (enum cop)op;
    snprintf(sub, sizeof(sub), "%s.value", path);
    if (jv == NULL) {
        perr(cx, sub, "is required");
        return;
    }
    switch (out->op) {
    case OP_NEQ:
        /* neq holds only for a scalar that differs (see eval_op): a list or a map as the value
         * would make the rule deny every list and map and let every scalar through. */
        if (cJSON_IsArray(jv) || cJSON_IsObject(jv))
            perr(cx, sub, "operator \"neq\" compares a string, number, boolean or null; a list or map cannot be its value");
        break;
    case OP_IN:
    case OP_NOT_IN:
        if (!cJSON_IsArray(jv)) {
            perr(cx, sub, "operator \"%s\" requires a list value", op_names[op]);
            break;
        }
        if (out->op == OP_NOT_IN) {
            int k = 0;
            for (const cJSON *e = jv->child; e; e = e->next, k++)
                if (cJSON_IsArray(e) || cJSON_IsObject(e)) {
                    char ep[640];
                    snprintf(ep, sizeof(ep), "%s[%d]", sub, k);
                    perr(cx, ep, "operator \"not_in\" compares a string, number, boolean or null; a list or map cannot be in its list");
                }
        }
        break;
    case OP_LT:
    case OP_LTE:
    case OP_GT:
    case OP_GTE:
        if (!cJSON_IsNumber(jv))
            perr(cx, sub, "operator \"%s\" requires a numeric value", op_names[op]);
        else
            out->num = jv->valuedouble;
        break;
    case OP_EXISTS:
        if (!cJSON_IsBool(jv))
            perr(cx, sub, "operator \"exists\" requires a boolean value");
        break;
    case OP_REGEX:
        if (!cJSON_IsString(jv)) {
            perr(cx, sub, "regex value must be a string");
        } else {
            char why[360];
            if (compile_regex(cx->p, jv->valuestring, out, why, sizeof(why)) != 0)
                perr(cx, sub, "%s", why);
        }
        break;
    default: break;
    }
    out->value = cJSON_Duplicate(jv, 1);
    (void)scope;
}

static void compile_rule(struct cctx *cx, const cJSON *r, const char *path, const char *tool, struct rule *out)
{
    memset(out, 0, sizeof(*out));
    out->counter = -1;
    if (!cJSON_IsObject(r)) {
        perr(cx, path, "a rule must be an object");
        return;
    }
    static const char *const known[] = {"name", "action", "conditions", "on_deny", "state", "rate_limit", NULL};
    check_keys(cx, r, path, known);
    char sub[600];
    const cJSON *jn = cJSON_GetObjectItemCaseSensitive(r, "name");
    if (!cJSON_IsString(jn) || jn->valuestring[0] == '\0') {
        snprintf(sub, sizeof(sub), "%s.name", path);
        perr(cx, sub, "rule must have a name");
        out->name = xstrdup("?");
    } else {
        out->name = xstrdup(jn->valuestring);
    }
    const cJSON *ja = cJSON_GetObjectItemCaseSensitive(r, "action");
    const char *action = "evaluate";
    if (ja != NULL) {
        if (!cJSON_IsString(ja) || (strcmp(ja->valuestring, "evaluate") && strcmp(ja->valuestring, "deny"))) {
            snprintf(sub, sizeof(sub), "%s.action", path);
            perr(cx, sub, "action must be \"evaluate\" or \"deny\", got \"%s\"",
                 cJSON_IsString(ja) ? ja->valuestring : "?");
        } else {
            action = ja->valuestring;
        }
    }
    out->deny = strcmp(action, "deny") == 0;
    const cJSON *jd = cJSON_GetObjectItemCaseSensitive(r, "on_deny");
    if (jd != NULL) {
        if (!cJSON_IsString(jd)) {
            snprintf(sub, sizeof(sub), "%s.on_deny", path);
            perr(cx, sub, "must be a string");
        } else {
            out->on_deny = xstrdup(jd->valuestring);
        }
    }
    const char *scope = strcmp(tool, "*") == 0 ? "_global" : tool;
    const cJSON *jc = cJSON_GetObjectItemCaseSensitive(r, "conditions");
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(r, "state");
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(r, "rate_limit");
    if (jr != NULL) {
        snprintf(sub, sizeof(sub), "%s.rate_limit", path);
        if (jc != NULL || js != NULL) {
            perr(cx, sub, "rate_limit cannot be combined with conditions or state");
            return;
        }
        if (out->deny) {
            perr(cx, sub, "rate_limit cannot be used with action \"deny\"");
            return;
        }
        const char *s = cJSON_IsString(jr) ? jr->valuestring : "";
        const char *slash = strchr(s, '/');
        char *end = NULL;
        long count = slash ? strtol(s, &end, 10) : 0;
        if (!slash || end != slash || count <= 0 || s == slash) {
            perr(cx, sub, "rate_limit must be \"N/window\" with a positive integer N, got \"%s\"", s);
            return;
        }
        cJSON *w = cJSON_CreateString(slash + 1);
        int64_t wms = parse_window(w, 0, 0);
        cJSON_Delete(w);
        if (wms < 0) {
            perr(cx, sub, "rate_limit window must be \"minute\", \"hour\", or \"day\", got \"%s\"", slash + 1);
            return;
        }
        char key[300];
        snprintf(key, sizeof(key), "S:%s._rate_%s", scope, slash + 1);
        if (find_counter(cx->p, key) >= 0) {
            perr(cx, sub, "duplicate state counter \"_rate_%s\"", slash + 1);
            return;
        }
        char label[160];
        snprintf(label, sizeof(label), "%ld calls per %s", count, slash + 1);
        struct pcounter pc = {xstrdup(key), xstrdup(label), CK_WINDOW, SCOPE_GRANT, 0, wms};
        out->counter = add_counter(cx->p, &pc);
        out->increment = 1;
        out->limit = (double)count;
        out->limit_op = TG_LIMIT_LTE;
        out->conds = tg_xcalloc(1, sizeof(*out->conds));
        out->nconds = 1;
        out->conds[0].is_state = 1;
        out->conds[0].counter = out->counter;
        out->conds[0].op = OP_LTE;
        out->conds[0].num = (double)count;
        out->conds[0].value = cJSON_CreateNumber((double)count);
        out->conds[0].path = tg_xcalloc(1, sizeof(char *));
        out->conds[0].path[0] = xstrdup(key);
        out->conds[0].npath = 1;
        if (out->on_deny == NULL) {
            char m[200];
            snprintf(m, sizeof(m), "Rate limit of %ld per %s reached. Try again later.", count, slash + 1);
            out->on_deny = xstrdup(m);
        }
        return;
    }
    if (js != NULL) {
        snprintf(sub, sizeof(sub), "%s.state", path);
        if (!cJSON_IsObject(js)) {
            perr(cx, sub, "must be an object {counter, window, increment, increment_from}");
        } else {
            static const char *const sknown[] = {"counter", "window", "increment", "increment_from", "scope", NULL};
            check_keys(cx, js, sub, sknown);
            const cJSON *cn = cJSON_GetObjectItemCaseSensitive(js, "counter");
            const cJSON *cw = cJSON_GetObjectItemCaseSensitive(js, "window");
            const cJSON *ci = cJSON_GetObjectItemCaseSensitive(js, "increment");
            const cJSON *cf = cJSON_GetObjectItemCaseSensitive(js, "increment_from");
            const cJSON *cs = cJSON_GetObjectItemCaseSensitive(js, "scope");
            char s2[600];
            int64_t wms = parse_window(cw, 0, 0);
            snprintf(s2, sizeof(s2), "%s.counter", sub);
            if (!cJSON_IsString(cn) || cn->valuestring[0] == '\0')
                perr(cx, s2, "counter must not be empty");
            snprintf(s2, sizeof(s2), "%s.window", sub);
            if (wms < 0)
                perr(cx, s2, "window must be \"minute\", \"hour\", or \"day\", got \"%s\"",
                     cJSON_IsString(cw) ? cw->valuestring : "?");
            out->increment = 1;
            if (ci != NULL) {
                snprintf(s2, sizeof(s2), "%s.increment", sub);
                if (!cJSON_IsNumber(ci) || !(ci->valuedouble >= 0) || !isfinite(ci->valuedouble))
                    perr(cx, s2, "must be a non-negative number");
                else if (ci->valuedouble != 0)
                    out->increment = ci->valuedouble;
            }
            if (cf != NULL) {
                snprintf(s2, sizeof(s2), "%s.increment_from", sub);
                if (!cJSON_IsString(cf) || strncmp(cf->valuestring, "args.", 5) != 0 ||
                    (out->nincr = split_path(cf->valuestring + 5, &out->incr_path)) <= 0) {
                    perr(cx, s2, "increment_from must start with \"args.\", got \"%s\"",
                         cJSON_IsString(cf) ? cf->valuestring : "?");
                    out->nincr = 0;
                } else {
                    out->incr_from = xstrdup(cf->valuestring);
                }
            }
            enum scope sc = SCOPE_GRANT;
            if (cs != NULL) {
                snprintf(s2, sizeof(s2), "%s.scope", sub);
                if (cJSON_IsString(cs) && strcmp(cs->valuestring, "grant") == 0)
                    sc = SCOPE_GRANT;
                else if (cJSON_IsString(cs) && strcmp(cs->valuestring, "session") == 0)
                    sc = SCOPE_SESSION;
                else if (cJSON_IsString(cs) && strcmp(cs->valuestring, "global") == 0)
                    sc = SCOPE_GLOBAL;
                else
                    perr(cx, s2, "must be grant, session or global");
            }
            if (cJSON_IsString(cn) && cn->valuestring[0] && wms > 0) {
                char key[300];
                snprintf(key, sizeof(key), "S:%s.%s", scope, cn->valuestring);
                if (find_counter(cx->p, key) >= 0) {
                    snprintf(s2, sizeof(s2), "%s.counter", sub);
                    perr(cx, s2, "duplicate state counter \"%s\"", cn->valuestring);
                } else {
                    char label[160];
                    window_label(wms, label, sizeof(label));
                    char lab2[200];
                    snprintf(lab2, sizeof(lab2), "%s per %s", cn->valuestring, label);
                    struct pcounter pc = {xstrdup(key), xstrdup(lab2), CK_WINDOW, sc, 0, wms};
                    out->counter = add_counter(cx->p, &pc);
                }
            }
        }
    }
    if (jc != NULL) {
        snprintf(sub, sizeof(sub), "%s.conditions", path);
        if (!cJSON_IsArray(jc)) {
            perr(cx, sub, "must be a list");
        } else {
            if (out->deny && cJSON_GetArraySize(jc) > 0)
                perr(cx, sub, "deny rules must not have conditions");
            out->nconds = cJSON_GetArraySize(jc);
            out->conds = tg_xcalloc((size_t)(out->nconds ? out->nconds : 1), sizeof(*out->conds));
            int i = 0;
            for (const cJSON *c = jc->child; c; c = c->next, i++) {
                char cp[600];
                snprintf(cp, sizeof(cp), "%s[%d]", sub, i);
                compile_cond(cx, c, cp, scope, &out->conds[i]);
            }
        }
    }
    if (!out->deny && out->nconds == 0) {
        snprintf(sub, sizeof(sub), "%s.conditions", path);
        perr(cx, sub, "evaluate rules must have at least one condition");
    }
    /* The limit that a reservation enforces: an lt/lte condition on the rule's own counter, taken
     * as written: the value after the call must satisfy it (lte 5 takes the total to 5, lt 1 to
     * anything below 1). With whole amounts that is Intercept's int64(v) and int64(v) - 1; with
     * fractional ones nothing is rounded. Of several such conditions the tightest holds. */
    if (out->counter >= 0) {
        const char *own = cx->p->counters[out->counter].key;
        for (int i = 0; i < out->nconds; i++) {
            struct cond *c = &out->conds[i];
            if (!c->is_state || c->npath != 1 || strcmp(c->path[0], own) != 0 || !cJSON_IsNumber(c->value) ||
                (c->op != OP_LTE && c->op != OP_LT))
                continue;
            double v = c->value->valuedouble;
            enum tg_limit_op op = c->op == OP_LT ? TG_LIMIT_LT : TG_LIMIT_LTE;
            if (out->limit_op == TG_LIMIT_NONE || v < out->limit || (v == out->limit && op == TG_LIMIT_LT)) {
                out->limit = v;
                out->limit_op = op;
            }
        }
    }
}

static void compile_limits(struct cctx *cx, const cJSON *jl, const char *path, const char *tool, struct ptool *t)
{
    if (!cJSON_IsArray(jl)) {
        perr(cx, path, "must be a list of {counter, window, max, scope}");
        return;
    }
    t->nlimits = cJSON_GetArraySize(jl);
    t->limits = tg_xcalloc((size_t)(t->nlimits ? t->nlimits : 1), sizeof(int));
    int i = 0;
    for (const cJSON *l = jl->child; l; l = l->next, i++) {
        char lp[600], sub[360];
        snprintf(lp, sizeof(lp), "%s[%d]", path, i);
        t->limits[i] = -1;
        if (!cJSON_IsObject(l)) {
            perr(cx, lp, "must be an object {counter, window, max, scope}");
            continue;
        }
        static const char *const known[] = {"counter", "window", "max", "scope", NULL};
        check_keys(cx, l, lp, known);
        const cJSON *cn = cJSON_GetObjectItemCaseSensitive(l, "counter");
        const cJSON *cw = cJSON_GetObjectItemCaseSensitive(l, "window");
        const cJSON *cm = cJSON_GetObjectItemCaseSensitive(l, "max");
        const cJSON *cs = cJSON_GetObjectItemCaseSensitive(l, "scope");
        int ok = 1;
        char cname[200];
        if (cn == NULL) {
            snprintf(cname, sizeof(cname), "%s_limit_%d", tool, i);
        } else if (!cJSON_IsString(cn) || cn->valuestring[0] == '\0' || strlen(cn->valuestring) >= 150) {
            snprintf(sub, sizeof(sub), "%s.counter", lp);
            perr(cx, sub, "must be a non-empty string");
            ok = 0;
        } else {
            snprintf(cname, sizeof(cname), "%s", cn->valuestring);
        }
        int64_t wms = parse_window(cw, 1, 0);
        if (wms < 0) {
            snprintf(sub, sizeof(sub), "%s.window", lp);
            perr(cx, sub, "must be second, minute, hour, day or a number of seconds (1..31536000)");
            ok = 0;
        }
        if (!cJSON_IsNumber(cm) || cm->valuedouble < 1 || cm->valuedouble > 1e12 ||
            cm->valuedouble != floor(cm->valuedouble)) {
            snprintf(sub, sizeof(sub), "%s.max", lp);
            perr(cx, sub, "must be a positive integer");
            ok = 0;
        }
        enum scope sc = SCOPE_GRANT;
        if (cs != NULL) {
            if (cJSON_IsString(cs) && strcmp(cs->valuestring, "grant") == 0)
                sc = SCOPE_GRANT;
            else if (cJSON_IsString(cs) && strcmp(cs->valuestring, "session") == 0)
                sc = SCOPE_SESSION;
            else if (cJSON_IsString(cs) && strcmp(cs->valuestring, "global") == 0)
                sc = SCOPE_GLOBAL;
            else {
                snprintf(sub, sizeof(sub), "%s.scope", lp);
                perr(cx, sub, "must be grant, session or global");
                ok = 0;
            }
        }
        if (!ok)
            continue;
        char key[220];
        snprintf(key, sizeof(key), "L:%s", cname);
        int existing = find_counter(cx->p, key);
        double max = cm->valuedouble;
        if (existing >= 0) {
            struct pcounter *pc = &cx->p->counters[existing];
            if (pc->capacity != max || pc->window_ms != wms || pc->scope != sc) {
                snprintf(sub, sizeof(sub), "%s.counter", lp);
                perr(cx, sub, "counter \"%s\" is defined elsewhere with a different max, window or scope", cname);
                continue;
            }
            t->limits[i] = existing;
            continue;
        }
        char wl[64], label[200];
        window_label(wms, wl, sizeof(wl));
        snprintf(label, sizeof(label), "%.0f calls per %s", max, wl);
        struct pcounter pc = {xstrdup(key), xstrdup(label), CK_BUCKET, sc, max, wms};
        t->limits[i] = add_counter(cx->p, &pc);
    }
}

static void compile_tool(struct cctx *cx, const char *name, const cJSON *jt, struct ptool *t)
{
    memset(t, 0, sizeof(*t));
    t->name = xstrdup(name);
    t->approval_ms = DEFAULT_APPROVAL_MS;
    char path[600];
    snprintf(path, sizeof(path), "tools.%s", name);
    if (!cJSON_IsObject(jt)) {
        perr(cx, path, "must be an object");
        return;
    }
    static const char *const known[] = {"rules", "action", "reason", "limits", "approval_timeout", NULL};
    check_keys(cx, jt, path, known);
    char sub[600];
    const cJSON *ja = cJSON_GetObjectItemCaseSensitive(jt, "action");
    if (ja != NULL) {
        snprintf(sub, sizeof(sub), "%s.action", path);
        if (cJSON_IsString(ja) && strcmp(ja->valuestring, "allow") == 0)
            t->action = TA_ALLOW;
        else if (cJSON_IsString(ja) && strcmp(ja->valuestring, "deny") == 0)
            t->action = TA_DENY;
        else if (cJSON_IsString(ja) && strcmp(ja->valuestring, "approve") == 0)
            t->action = TA_APPROVE;
        else
            perr(cx, sub, "must be allow, deny or approve");
        if (strcmp(name, "*") == 0 && t->action == TA_APPROVE)
            perr(cx, sub, "approve is per tool; \"*\" cannot require approval");
    }
    const cJSON *jr = cJSON_GetObjectItemCaseSensitive(jt, "reason");
    if (jr != NULL) {
        if (cJSON_IsString(jr))
            t->reason = xstrdup(jr->valuestring);
        else {
            snprintf(sub, sizeof(sub), "%s.reason", path);
            perr(cx, sub, "must be a string");
        }
    }
    const cJSON *jat = cJSON_GetObjectItemCaseSensitive(jt, "approval_timeout");
    if (jat != NULL) {
        snprintf(sub, sizeof(sub), "%s.approval_timeout", path);
        int64_t ms = parse_window(jat, 1, 1);
        if (ms <= 0)
            perr(cx, sub, "must be a number of seconds or second|minute|hour|day");
        else
            t->approval_ms = (int)(ms > 86400000 ? 86400000 : ms);
    }
    const cJSON *jl = cJSON_GetObjectItemCaseSensitive(jt, "limits");
    if (jl != NULL) {
        snprintf(sub, sizeof(sub), "%s.limits", path);
        compile_limits(cx, jl, sub, name, t);
    }
    const cJSON *jrules = cJSON_GetObjectItemCaseSensitive(jt, "rules");
    if (jrules != NULL) {
        snprintf(sub, sizeof(sub), "%s.rules", path);
        if (!cJSON_IsArray(jrules) && !cJSON_IsNull(jrules)) {
            perr(cx, sub, "must be a list");
        } else if (cJSON_IsArray(jrules)) {
            t->nrules = cJSON_GetArraySize(jrules);
            t->rules = tg_xcalloc((size_t)(t->nrules ? t->nrules : 1), sizeof(*t->rules));
            int i = 0;
            for (const cJSON *r = jrules->child; r; r = r->next, i++) {
                char rp[600];
                snprintf(rp, sizeof(rp), "%s[%d]", sub, i);
                compile_rule(cx, r, rp, name, &t->rules[i]);
                if (t->rules[i].deny)
                    t->unconditional_deny = 1;
            }
        }
    }
}

static void compile_list(struct cctx *cx, const cJSON *j, const char *path, char ***out, int *n)
{
    if (!cJSON_IsArray(j)) {
        perr(cx, path, "must be a list of strings");
        return;
    }
    *n = cJSON_GetArraySize(j);
    *out = tg_xcalloc((size_t)(*n ? *n : 1), sizeof(char *));
    int i = 0;
    for (const cJSON *c = j->child; c; c = c->next, i++) {
        char p[600];
        snprintf(p, sizeof(p), "%s[%d]", path, i);
        if (!cJSON_IsString(c) || c->valuestring[0] == '\0') {
            perr(cx, p, "entry must not be empty");
            (*out)[i] = xstrdup("");
            continue;
        }
        for (int k = 0; k < i; k++)
            if (strcmp((*out)[k], c->valuestring) == 0)
                perr(cx, path, "duplicate entry \"%s\"", c->valuestring);
        (*out)[i] = xstrdup(c->valuestring);
    }
}

static void compile_globset(struct cctx *cx, const cJSON *j, const char *path, struct globset *g)
{
    if (!cJSON_IsObject(j)) {
        perr(cx, path, "must be an object {default, allow, deny, reason}");
        return;
    }
    static const char *const known[] = {"default", "allow", "deny", "reason", NULL};
    check_keys(cx, j, path, known);
    g->present = 1;
    char sub[600];
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "default");
    if (d != NULL) {
        snprintf(sub, sizeof(sub), "%s.default", path);
        if (cJSON_IsString(d) && strcmp(d->valuestring, "deny") == 0)
            g->default_deny = 1;
        else if (!(cJSON_IsString(d) && strcmp(d->valuestring, "allow") == 0))
            perr(cx, sub, "must be \"allow\" or \"deny\"");
    }
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "allow");
    if (a) {
        snprintf(sub, sizeof(sub), "%s.allow", path);
        compile_list(cx, a, sub, &g->allow, &g->nallow);
    }
    const cJSON *dn = cJSON_GetObjectItemCaseSensitive(j, "deny");
    if (dn) {
        snprintf(sub, sizeof(sub), "%s.deny", path);
        compile_list(cx, dn, sub, &g->deny, &g->ndeny);
    }
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "reason");
    if (cJSON_IsString(r))
        g->reason = xstrdup(r->valuestring);
}

static int cmp_tools(const void *a, const void *b)
{
    return strcmp(((const struct ptool *)a)->name, ((const struct ptool *)b)->name);
}

static void free_globset(struct globset *g)
{
    for (int i = 0; i < g->nallow; i++)
        free(g->allow[i]);
    for (int i = 0; i < g->ndeny; i++)
        free(g->deny[i]);
    free(g->allow);
    free(g->deny);
    free(g->reason);
}

static void free_tool(struct ptool *t)
{
    free(t->name);
    free(t->reason);
    free(t->limits);
    for (int i = 0; i < t->nrules; i++) {
        struct rule *r = &t->rules[i];
        for (int k = 0; k < r->nconds; k++) {
            struct cond *c = &r->conds[k];
            for (int m = 0; m < c->npath; m++)
                free(c->path[m]);
            free(c->path);
            cJSON_Delete(c->value);
            pcre2_code_free(c->re);
            pcre2_match_data_free(c->md);
        }
        free(r->conds);
        for (int k = 0; k < r->nincr; k++)
            free(r->incr_path[k]);
        free(r->incr_path);
        free(r->incr_from);
        free(r->name);
        free(r->on_deny);
    }
    free(t->rules);
}

static void policy_free(struct tg_policy *p)
{
    for (int i = 0; i < p->ntools; i++)
        free_tool(&p->tools[i]);
    free(p->tools);
    if (p->wildcard) {
        free_tool(p->wildcard);
        free(p->wildcard);
    }
    for (int i = 0; i < p->nhide; i++)
        free(p->hide[i]);
    free(p->hide);
    for (int i = 0; i < p->ncounters; i++) {
        free(p->counters[i].key);
        free(p->counters[i].label);
    }
    free(p->counters);
    for (int i = 0; i < p->nmethods; i++)
        free(p->methods[i]);
    free(p->methods);
    free_globset(&p->resources);
    free_globset(&p->prompts);
    pcre2_match_context_free(p->mctx);
    pcre2_jit_stack_free(p->jit_stack);
    free(p->name);
    free(p);
}

int tg_policy_compile(const cJSON *root, const char *name, struct tg_policy **out, struct tg_buf *err,
                      struct tg_buf *warn)
{
    struct tg_policy *p = tg_xcalloc(1, sizeof(*p));
    p->refcnt = 1;
    p->name = xstrdup(name);
    struct cctx cx = {name, err, warn, 0, p};
    *out = NULL;
    if (!cJSON_IsObject(root)) {
        perr(&cx, "(root)", "a policy must be an object");
        policy_free(p);
        return TG_EINVAL;
    }
    static const char *const known[] = {"version", "description", "default", "hide", "tools",
                                        "methods", "resources", "prompts", NULL};
    check_keys(&cx, root, "", known);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsString(v) || strcmp(v->valuestring, "1") != 0)
        perr(&cx, "version", "version must be \"1\", got \"%s\"",
             cJSON_IsString(v) ? v->valuestring : (cJSON_IsNumber(v) ? "(a number; write \"1\")" : "(missing)"));
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "default");
    if (d != NULL) {
        if (cJSON_IsString(d) && strcmp(d->valuestring, "deny") == 0)
            p->default_deny = 1;
        else if (!(cJSON_IsString(d) && strcmp(d->valuestring, "allow") == 0))
            perr(&cx, "default", "default must be \"allow\" or \"deny\", got \"%s\"",
                 cJSON_IsString(d) ? d->valuestring : "?");
    }
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "hide");
    if (h != NULL && !cJSON_IsNull(h)) {
        compile_list(&cx, h, "hide", &p->hide, &p->nhide);
        for (int i = 0; i < p->nhide; i++)
            if (strcmp(p->hide[i], "*") == 0)
                p->hide_all = 1;
    }
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tools");
    if (t == NULL || cJSON_IsNull(t)) {
        if (p->default_deny)
            pwarn(&cx, "tools", "no tools listed under default deny: every tool is denied");
    } else if (!cJSON_IsObject(t)) {
        perr(&cx, "tools", "must be an object of tool names");
    } else {
        int n = cJSON_GetArraySize(t);
        p->tools = tg_xcalloc((size_t)(n ? n : 1), sizeof(*p->tools));
        for (const cJSON *c = t->child; c; c = c->next) {
            if (strcmp(c->string, "*") == 0) {
                p->wildcard = tg_xcalloc(1, sizeof(*p->wildcard));
                compile_tool(&cx, "*", c, p->wildcard);
            } else {
                compile_tool(&cx, c->string, c, &p->tools[p->ntools++]);
            }
        }
        qsort(p->tools, (size_t)p->ntools, sizeof(*p->tools), cmp_tools);
    }
    /* State conditions may name counters defined by later rules: resolve them now. */
    struct ptool *all[2] = {NULL, p->wildcard};
    for (int ti = -1; ti < p->ntools; ti++) {
        struct ptool *tool = ti < 0 ? all[1] : &p->tools[ti];
        if (tool == NULL)
            continue;
        for (int r = 0; r < tool->nrules; r++)
            for (int k = 0; k < tool->rules[r].nconds; k++) {
                struct cond *c = &tool->rules[r].conds[k];
                if (!c->is_state || c->npath != 1)
                    continue;
                c->counter = find_counter(p, c->path[0]);
                if (c->counter < 0) {
                    char path[600];
                    snprintf(path, sizeof(path), "tools.%s.rules[%d].conditions[%d].path", tool->name, r, k);
                    perr(&cx, path, "condition references state.%s but no matching state block found",
                         c->path[0] + 2);
                }
            }
    }
    /* A call's reservations are kept in a fixed array so that they can be given back: refuse
     * a policy that would put more counters than that on one call. */
    int wild_counters = 0;
    if (p->wildcard) {
        wild_counters += p->wildcard->nlimits;
        for (int r = 0; r < p->wildcard->nrules; r++)
            wild_counters += p->wildcard->rules[r].counter >= 0;
    }
    for (int ti = 0; ti < p->ntools; ti++) {
        int n = wild_counters + p->tools[ti].nlimits;
        for (int r = 0; r < p->tools[ti].nrules; r++)
            n += p->tools[ti].rules[r].counter >= 0;
        if (n > TG_MAX_RESERVATIONS) {
            char path[600];
            snprintf(path, sizeof(path), "tools.%s", p->tools[ti].name);
            perr(&cx, path, "%d counters apply to one call (with \"*\"); at most %d are supported", n,
                 TG_MAX_RESERVATIONS);
        }
    }
    if (wild_counters > TG_MAX_RESERVATIONS)
        perr(&cx, "tools.*", "%d counters apply to one call; at most %d are supported", wild_counters,
             TG_MAX_RESERVATIONS);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "methods");
    if (m != NULL)
        compile_list(&cx, m, "methods", &p->methods, &p->nmethods);
    const cJSON *res = cJSON_GetObjectItemCaseSensitive(root, "resources");
    if (res != NULL)
        compile_globset(&cx, res, "resources", &p->resources);
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "prompts");
    if (pr != NULL)
        compile_globset(&cx, pr, "prompts", &p->prompts);
    if (cx.nerr > 0) {
        policy_free(p);
        return TG_EINVAL;
    }
    *out = p;
    return 0;
}

int tg_policy_load(const char *path, struct tg_policy **out, struct tg_buf *err, struct tg_buf *warn)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        tg_buf_appendf(err, "%s: cannot open: %s\n", path, strerror(errno));
        return TG_EINVAL;
    }
    struct tg_buf b;
    tg_buf_init(&b);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (tg_buf_try_append(&b, chunk, n, POLICY_MAX_FILE) != 0) {
            fclose(f);
            tg_buf_dispose(&b);
            tg_buf_appendf(err, "%s: larger than %d bytes\n", path, POLICY_MAX_FILE);
            return TG_EINVAL;
        }
    }
    fclose(f);
    size_t i = 0;
    while (i < b.len && isspace((unsigned char)b.base[i]))
        i++;
    cJSON *root = NULL;
    if (i < b.len && b.base[i] == '{') {
        struct tg_json_doc doc;
        const char *why = NULL;
        size_t off = 0;
        if (tg_json_parse(b.base, b.len, 64, 1, &doc, &why, &off) != 0) {
            size_t line = 1;
            for (size_t k = 0; k < off && k < b.len; k++)
                if (b.base[k] == '\n')
                    line++;
            tg_buf_appendf(err, "%s:%zu: %s\n", path, line, why);
            tg_buf_dispose(&b);
            return TG_EINVAL;
        }
        root = doc.root;
    } else {
        char why[300];
        if (tg_yaml_to_json(b.base ? b.base : "", b.len, &root, why, sizeof(why)) != 0) {
            tg_buf_appendf(err, "%s: %s\n", path, why);
            tg_buf_dispose(&b);
            return TG_EINVAL;
        }
    }
    tg_buf_dispose(&b);
    int r = tg_policy_compile(root, path, out, err, warn);
    cJSON_Delete(root);
    return r;
}

struct tg_policy *tg_policy_deny_all(void)
{
    struct tg_policy *p = tg_xcalloc(1, sizeof(*p));
    p->refcnt = 1;
    p->name = xstrdup("(no policy: everything denied)");
    p->default_deny = 1;
    p->hide_all = 1;
    return p;
}

struct tg_policy *tg_policy_ref(struct tg_policy *p)
{
    p->refcnt++;
    return p;
}

void tg_policy_unref(struct tg_policy *p)
{
    if (p != NULL && --p->refcnt == 0)
        policy_free(p);
}

const char *tg_policy_name(const struct tg_policy *p) { return p->name; }
size_t tg_policy_tool_count(const struct tg_policy *p) { return (size_t)p->ntools; }

/* ---- decisions ----------------------------------------------------------------- */

static const struct ptool *find_tool(const struct tg_policy *p, const char *name)
{
    int lo = 0, hi = p->ntools - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(name, p->tools[mid].name);
        if (c == 0)
            return &p->tools[mid];
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return NULL;
}

static int is_hidden(const struct tg_policy *p, const char *tool)
{
    if (p->hide_all)
        return 1;
    for (int i = 0; i < p->nhide; i++)
        if (strcmp(p->hide[i], tool) == 0)
            return 1;
    return 0;
}

int tg_policy_tool_visible(const struct tg_policy *p, const char *tool)
{
    if (is_hidden(p, tool))
        return 0;
    const struct ptool *t = find_tool(p, tool);
    if (t == NULL && p->default_deny)
        return 0;
    if (t != NULL && (t->action == TA_DENY || t->unconditional_deny))
        return 0;
    if (p->wildcard && (p->wildcard->action == TA_DENY || p->wildcard->unconditional_deny))
        return 0;
    return 1;
}

int tg_policy_method_allowed(const struct tg_policy *p, const char *method)
{
    for (int i = 0; i < p->nmethods; i++)
        if (strcmp(p->methods[i], method) == 0)
            return 1;
    return 0;
}

/* Go's %v for a float64, so that eq between a string and a number behaves as in Intercept. */
static void go_float(double d, char *out, size_t n)
{
    if (d == 0) {
        snprintf(out, n, "0");
        return;
    }
    int prec;
    char tmp[64];
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    const char *e = strchr(tmp, 'e');
    int exp = e ? atoi(e + 1) : 0;
    /* strconv's 'g' with the shortest precision switches to an exponent from 1e+06 on. */
    if (exp < -4 || exp >= 6)
        snprintf(out, n, "%.*e", prec - 1, d);
    else
        snprintf(out, n, "%.*f", prec - 1 - exp > 0 ? prec - 1 - exp : 0, d);
}

/* policy_side: a number written in the policy prints every digit when it is an integer, as
 * Intercept's YAML loader reads it as an int; an argument is a float64 as JSON decodes it. */
static int scalar_str(const cJSON *v, char *buf, size_t n, const char **out, int policy_side)
{
    if (cJSON_IsString(v)) {
        *out = v->valuestring;
        return 1;
    }
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v) ? "true" : "false";
        return 1;
    }
    if (cJSON_IsNull(v)) {
        *out = "<nil>";
        return 1;
    }
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (policy_side && d == floor(d) && fabs(d) < 9.2e18)
            snprintf(buf, n, "%lld", (long long)d);
        else
            go_float(d, buf, n);
        *out = buf;
        return 1;
    }
    return 0;
}

static int val_eq(const cJSON *a, const cJSON *b)
{
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        return a->valuedouble == b->valuedouble;
    char ba[64], bb[64];
    const char *sa, *sb;
    if (scalar_str(a, ba, sizeof(ba), &sa, 0) && scalar_str(b, bb, sizeof(bb), &sb, 1))
        return strcmp(sa, sb) == 0;
    return cJSON_Compare(a, b, 1); /* lists and maps: structural equality */
}

/* What the deny-list operators (neq, not_in) can say "differs" about. A list or a map is not
 * "some other value": ["production"] or {"env": "production"} must not pass env not_in
 * ["production"], and null is an absent value (exists treats it so). */
static int is_scalar(const cJSON *v) { return cJSON_IsString(v) || cJSON_IsNumber(v) || cJSON_IsBool(v); }

/* 1 the condition holds, 0 it does not, -1 no answer (a regex that hit a limit). Every operator
 * fails closed: a value of a type it does not compare makes the condition false, and anything
 * but 1 denies the call (conditions are requirements; there is no operator that lets a call
 * through because a condition failed, so "no answer" can only deny). */
static int eval_op(const struct cond *c, const cJSON *actual, double state_value, int is_state)
{
    cJSON tmp;
    if (is_state) {
        memset(&tmp, 0, sizeof(tmp));
        tmp.type = cJSON_Number;
        tmp.valuedouble = state_value;
        actual = &tmp;
    }
    switch (c->op) {
    case OP_EQ: return val_eq(actual, c->value);
    case OP_NEQ: return is_scalar(actual) && !val_eq(actual, c->value);
    case OP_IN:
    case OP_NOT_IN: {
        if (c->op == OP_NOT_IN && !is_scalar(actual))
            return 0;
        int found = 0;
        for (const cJSON *e = c->value->child; e && !found; e = e->next)
            found = val_eq(actual, e);
        return c->op == OP_IN ? found : !found;
    }
    case OP_LT: return cJSON_IsNumber(actual) && actual->valuedouble < c->num;
    case OP_LTE: return cJSON_IsNumber(actual) && actual->valuedouble <= c->num;
    case OP_GT: return cJSON_IsNumber(actual) && actual->valuedouble > c->num;
    case OP_GTE: return cJSON_IsNumber(actual) && actual->valuedouble >= c->num;
    case OP_REGEX: return (cJSON_IsString(actual) && c->re != NULL) ? regex_match(c, actual->valuestring) : 0;
    case OP_CONTAINS:
        if (cJSON_IsString(actual))
            return cJSON_IsString(c->value) && strstr(actual->valuestring, c->value->valuestring) != NULL;
        if (cJSON_IsArray(actual)) {
            for (const cJSON *e = actual->child; e; e = e->next)
                if (val_eq(e, c->value))
                    return 1;
        }
        return 0;
    case OP_EXISTS: return 0; /* handled by the caller */
    }
    return 0;
}

/* The key of a counter for this caller: upstream, counter, and the scope's identity. */
static void counter_hash(const struct pcounter *pc, const struct tg_caller *who, uint64_t *h1, uint64_t *h2)
{
    char key[640];
    const char *id = pc->scope == SCOPE_SESSION ? who->session : pc->scope == SCOPE_GLOBAL ? "" : who->grant;
    int n = snprintf(key, sizeof(key), "%s\x1f%s\x1f%c\x1f%s", who->upstream ? who->upstream : "", pc->key,
                     pc->scope == SCOPE_SESSION ? 's' : pc->scope == SCOPE_GLOBAL ? '*' : 'g', id ? id : "");
    if (n < 0)
        n = 0;
    if ((size_t)n < sizeof(key)) {
        tg_counters_hash(key, (size_t)n, h1, h2);
        return;
    }
    /* Long names: the whole key, never a truncated one (two grants must not share counters). */
    char *big = tg_xmalloc((size_t)n + 1);
    snprintf(big, (size_t)n + 1, "%s\x1f%s\x1f%c\x1f%s", who->upstream ? who->upstream : "", pc->key,
             pc->scope == SCOPE_SESSION ? 's' : pc->scope == SCOPE_GLOBAL ? '*' : 'g', id ? id : "");
    tg_counters_hash(big, (size_t)n, h1, h2);
    free(big);
}

static int64_t window_start(int64_t now_ms, int64_t window_ms) { return now_ms - (now_ms % window_ms); }

static double state_value(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who, int idx,
                          int64_t now_ms)
{
    const struct pcounter *pc = &p->counters[idx];
    uint64_t h1, h2;
    counter_hash(pc, who, &h1, &h2);
    return tg_window_get(cs, h1, h2, window_start(now_ms, pc->window_ms));
}

static void set_decision(struct tg_decision *d, enum tg_verdict v, const char *rule, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void set_decision(struct tg_decision *d, enum tg_verdict v, const char *rule, const char *fmt, ...)
{
    d->verdict = v;
    snprintf(d->rule, sizeof(d->rule), "%s", rule);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->message, sizeof(d->message), fmt, ap);
    va_end(ap);
}

/* Evaluate the conditions of one rule; returns the failing condition index or -1. Only a
 * condition that evaluated to true holds: eval_op's -1 (a regex that hit a limit) fails it like
 * a plain false, and *unanswered says which it was. */
static int eval_rule(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                     const struct rule *r, const cJSON *args, int64_t now_ms, int *unanswered)
{
    *unanswered = 0;
    for (int i = 0; i < r->nconds; i++) {
        const struct cond *c = &r->conds[i];
        int ok;
        if (c->is_state) {
            if (c->counter < 0)
                return i;
            double v = state_value(p, cs, who, c->counter, now_ms);
            ok = c->op == OP_EXISTS ? cJSON_IsTrue(c->value) : eval_op(c, NULL, v, 1);
        } else {
            const cJSON *a = resolve_args(args, c->path, c->npath);
            if (c->op == OP_EXISTS)
                ok = (a != NULL && !cJSON_IsNull(a)) == cJSON_IsTrue(c->value);
            else
                ok = a != NULL ? eval_op(c, a, 0, 0) : 0;
        }
        if (ok != 1) {
            *unanswered = ok < 0;
            return i;
        }
    }
    return -1;
}

static void refund_all(struct tg_counters *c, struct tg_decision *d)
{
    for (int i = d->nres - 1; i >= 0; i--) {
        struct tg_reservation *r = &d->res[i];
        if (r->kind == CK_BUCKET)
            tg_bucket_give(c, r->h1, r->h2, r->capacity, r->amount);
        else
            tg_window_sub(c, r->h1, r->h2, r->window_start, r->amount);
    }
    d->nres = 0;
}

void tg_policy_refund(struct tg_counters *c, const struct tg_decision *d, int64_t now_ms)
{
    (void)now_ms;
    struct tg_decision copy = *d;
    refund_all(c, &copy);
}

static void note_counter(struct tg_decision *d, const char *label, double value)
{
    size_t len = strlen(d->counters_json);
    if (len + 80 >= sizeof(d->counters_json))
        return;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_json_write_string(&b, label, strlen(label));
    char num[40];
    if (value == floor(value) && fabs(value) < 9.2e18) {
        snprintf(num, sizeof(num), "%lld", (long long)value);
    } else {
        /* The shortest form that reads back as the same double: 0.3, not 0.29999999999999999. */
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(num, sizeof(num), "%.*g", prec, value);
            if (strtod(num, NULL) == value)
                break;
        }
    }
    snprintf(d->counters_json + len, sizeof(d->counters_json) - len, "%s%.*s:%s", len ? "," : "",
             (int)(b.len < 120 ? b.len : 120), b.base, num);
    tg_buf_dispose(&b);
}

static const char *type_name(const cJSON *v)
{
    return cJSON_IsString(v) ? "a string" : cJSON_IsBool(v) ? "a boolean" : cJSON_IsNull(v) ? "null"
         : cJSON_IsArray(v)  ? "a list" : cJSON_IsObject(v) ? "a map" : "not a value";
}

/* The amount an increment_from argument counts, as the call carries it: no rounding to an integer
 * (Intercept's int64() counts 0.9 as 0, so eight charges of 0.9 pass a cap of 5, and -0.5 as 0,
 * so it passes a negative check). Fails closed, with the reason in why, on anything that is not
 * a finite number >= 0: a negative amount would give budget back, and 1e400 (which the JSON
 * decoder turns into infinity) cannot be counted. The value is judged as sent; the message
 * quotes the number's own digits when the decoder kept them. */
static int amount_of(const cJSON *a, double *amount, char *why, size_t n)
{
    if (a == NULL) {
        snprintf(why, n, "is missing");
        return 0;
    }
    if (!cJSON_IsNumber(a)) {
        snprintf(why, n, "is %s, not a number", type_name(a));
        return 0;
    }
    double v = a->valuedouble;
    char num[48];
    if (a->valuestring != NULL)
        snprintf(num, sizeof(num), "%.40s", a->valuestring);
    else
        snprintf(num, sizeof(num), "%.17g", v);
    if (!isfinite(v)) {
        snprintf(why, n, "is %s, not a finite number", num);
        return 0;
    }
    if (v < 0) {
        snprintf(why, n, "is %s: a negative amount cannot count", num);
        return 0;
    }
    *amount = v == 0 ? 0 : v; /* -0 counts as 0 */
    return 1;
}

/* Intercept stateful rules: reserve each counter within its limit (all or nothing). */
static int reserve_rules(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                         const char *tool, const struct ptool *t, const cJSON *args, int64_t now_ms,
                         struct tg_decision *d)
{
    const struct ptool *sets[2] = {t, p->wildcard};
    for (int s = 0; s < 2; s++) {
        const struct ptool *pt = sets[s];
        if (pt == NULL)
            continue;
        for (int i = 0; i < pt->nrules; i++) {
            const struct rule *r = &pt->rules[i];
            if (r->counter < 0)
                continue;
            double amount = r->increment;
            if (r->nincr > 0) {
                const cJSON *a = resolve_args(args, r->incr_path, r->nincr);
                char why[120];
                if (!amount_of(a, &amount, why, sizeof(why))) {
                    refund_all(cs, d);
                    set_decision(d, TG_VERDICT_DENY, r->name, "%s: %s, which counts toward \"%s\", %s", tool,
                                 r->incr_from, r->name, why);
                    return -1;
                }
            }
            if (r->limit_op == TG_LIMIT_NONE)
                continue; /* a counter without a limit is only read by other rules' conditions */
            const struct pcounter *pc = &p->counters[r->counter];
            uint64_t h1, h2;
            counter_hash(pc, who, &h1, &h2);
            int64_t ws = window_start(now_ms, pc->window_ms);
            double nowv;
            if (!tg_window_add(cs, h1, h2, ws, pc->window_ms, amount, r->limit, r->limit_op, &nowv)) {
                refund_all(cs, d);
                d->counters_json[0] = '\0';
                note_counter(d, pc->key + 2, nowv);
                uint64_t retry = (uint64_t)(ws + pc->window_ms - now_ms);
                d->retry_after_ms = retry;
                snprintf(d->counter, sizeof(d->counter), "%s", pc->key + 2);
                set_decision(d, TG_VERDICT_LIMITED, r->name, "%s; retry in %llu s", r->on_deny ? r->on_deny : r->name,
                             (unsigned long long)((retry + 999) / 1000));
                return -1;
            }
            if (d->nres < TG_MAX_RESERVATIONS) {
                struct tg_reservation *rv = &d->res[d->nres++];
                rv->h1 = h1;
                rv->h2 = h2;
                rv->kind = CK_WINDOW;
                rv->amount = amount;
                rv->window_start = ws;
            }
            note_counter(d, pc->key + 2, nowv);
        }
    }
    return 0;
}

static int reserve_limits(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                          const char *tool, const struct ptool *t, int64_t now_ms, struct tg_decision *d)
{
    const struct ptool *sets[2] = {t, p->wildcard};
    for (int s = 0; s < 2; s++) {
        const struct ptool *pt = sets[s];
        if (pt == NULL)
            continue;
        for (int i = 0; i < pt->nlimits; i++) {
            if (pt->limits[i] < 0)
                continue;
            const struct pcounter *pc = &p->counters[pt->limits[i]];
            uint64_t h1, h2, retry;
            double left;
            counter_hash(pc, who, &h1, &h2);
            /* The audit record shows the calls the bucket allows now: its whole tokens. A bucket
             * just emptied reports 0, not the 5.6e-7 of a token that 2 ms of refill bring back. */
            if (!tg_bucket_take(cs, h1, h2, pc->capacity, pc->window_ms, 1, now_ms, &left, &retry)) {
                refund_all(cs, d);
                d->counters_json[0] = '\0';
                note_counter(d, pc->key + 2, floor(left));
                d->retry_after_ms = retry;
                snprintf(d->counter, sizeof(d->counter), "%s", pc->key + 2);
                set_decision(d, TG_VERDICT_LIMITED, pc->key + 2, "%s is limited to %s %s; retry in %llu s", tool,
                             pc->label, scope_label(pc->scope), (unsigned long long)((retry + 999) / 1000));
                return -1;
            }
            if (d->nres < TG_MAX_RESERVATIONS) {
                struct tg_reservation *rv = &d->res[d->nres++];
                rv->h1 = h1;
                rv->h2 = h2;
                rv->kind = CK_BUCKET;
                rv->amount = 1;
                rv->capacity = pc->capacity;
            }
            note_counter(d, pc->key + 2, floor(left));
        }
    }
    return 0;
}

void tg_policy_decide_call(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                           const char *tool, const cJSON *args, int64_t now_ms, struct tg_decision *d)
{
    /* Field by field: the reservation array is large and only its first nres entries are read. */
    d->verdict = TG_VERDICT_ALLOW;
    d->rule[0] = d->message[0] = d->counter[0] = d->counters_json[0] = '\0';
    d->retry_after_ms = 0;
    d->approval_timeout_ms = 0;
    d->nres = 0;
    if (is_hidden(p, tool)) {
        set_decision(d, TG_VERDICT_DENY, "(hidden)", "Tool \"%s\" is hidden by policy", tool);
        return;
    }
    const struct ptool *t = find_tool(p, tool);
    if (t == NULL && p->default_deny) {
        set_decision(d, TG_VERDICT_DENY, "(default deny)", "Tool \"%s\" is not permitted by policy", tool);
        return;
    }
    const struct ptool *sets[2] = {t, p->wildcard};
    for (int s = 0; s < 2; s++) {
        const struct ptool *pt = sets[s];
        if (pt == NULL)
            continue;
        if (pt->action == TA_DENY) {
            if (pt->reason)
                set_decision(d, TG_VERDICT_DENY, pt->name, "%s", pt->reason);
            else
                set_decision(d, TG_VERDICT_DENY, pt->name, "Tool \"%s\" is denied by policy", tool);
            return;
        }
        for (int i = 0; i < pt->nrules; i++) {
            const struct rule *r = &pt->rules[i];
            if (r->deny) {
                if (r->on_deny)
                    set_decision(d, TG_VERDICT_DENY, r->name, "%s", r->on_deny);
                else
                    set_decision(d, TG_VERDICT_DENY, r->name, "Denied by rule \"%s\"", r->name);
                return;
            }
            int unanswered;
            int failed = eval_rule(p, cs, who, r, args, now_ms, &unanswered);
            if (failed >= 0 && unanswered) {
                /* Fail closed, and say why: the operator reading the audit log can tell a
                 * pattern that gave up from one that did not match. */
                if (r->on_deny)
                    set_decision(d, TG_VERDICT_DENY, r->name, "%s (conditions[%d]: the regex gave no answer within its match limits)",
                                 r->on_deny, failed);
                else
                    set_decision(d, TG_VERDICT_DENY, r->name,
                                 "Denied by rule \"%s\" (conditions[%d]: the regex gave no answer within its match limits)",
                                 r->name, failed);
                return;
            }
            if (failed >= 0) {
                const struct cond *c = &r->conds[failed];
                if (c->is_state && c->counter >= 0) {
                    const struct pcounter *pc = &p->counters[c->counter];
                    int64_t ws = window_start(now_ms, pc->window_ms);
                    note_counter(d, pc->key + 2, state_value(p, cs, who, c->counter, now_ms));
                    d->retry_after_ms = (uint64_t)(ws + pc->window_ms - now_ms);
                    snprintf(d->counter, sizeof(d->counter), "%s", pc->key + 2);
                    set_decision(d, TG_VERDICT_LIMITED, r->name, "%s; retry in %llu s",
                                 r->on_deny ? r->on_deny : r->name,
                                 (unsigned long long)((d->retry_after_ms + 999) / 1000));
                } else if (r->on_deny) {
                    set_decision(d, TG_VERDICT_DENY, r->name, "%s", r->on_deny);
                } else {
                    set_decision(d, TG_VERDICT_DENY, r->name, "Denied by rule \"%s\"", r->name);
                }
                return;
            }
        }
    }
    if (reserve_rules(p, cs, who, tool, t, args, now_ms, d) != 0)
        return;
    if (reserve_limits(p, cs, who, tool, t, now_ms, d) != 0)
        return;
    if (t != NULL && t->action == TA_APPROVE) {
        d->verdict = TG_VERDICT_APPROVE;
        d->approval_timeout_ms = t->approval_ms;
        snprintf(d->rule, sizeof(d->rule), "%s", t->name);
        snprintf(d->message, sizeof(d->message), "%s needs a human's approval", tool);
        return;
    }
    d->verdict = TG_VERDICT_ALLOW;
}

/* '*' matches any run of characters; everything else literally. */
static int glob_match(const char *pat, const char *s)
{
    const char *star = NULL, *ss = NULL;
    while (*s) {
        if (*pat == '*') {
            star = pat++;
            ss = s;
        } else if (*pat == *s) {
            pat++;
            s++;
        } else if (star) {
            pat = star + 1;
            s = ++ss;
        } else {
            return 0;
        }
    }
    while (*pat == '*')
        pat++;
    return *pat == '\0';
}

static void decide_glob(const struct globset *g, const char *what, const char *kind, struct tg_decision *d)
{
    memset(d, 0, sizeof(*d));
    d->verdict = TG_VERDICT_ALLOW;
    if (!g->present)
        return;
    for (int i = 0; i < g->ndeny; i++)
        if (glob_match(g->deny[i], what)) {
            set_decision(d, TG_VERDICT_DENY, g->deny[i], "%s", g->reason ? g->reason : "");
            if (!g->reason)
                snprintf(d->message, sizeof(d->message), "%s \"%s\" is denied by policy", kind, what);
            return;
        }
    for (int i = 0; i < g->nallow; i++)
        if (glob_match(g->allow[i], what))
            return;
    if (g->default_deny) {
        set_decision(d, TG_VERDICT_DENY, "(default deny)", "%s \"%s\" is not permitted by policy", kind, what);
        if (g->reason)
            snprintf(d->message, sizeof(d->message), "%s", g->reason);
    }
}

void tg_policy_decide_resource(const struct tg_policy *p, const char *uri, struct tg_decision *d)
{
    decide_glob(&p->resources, uri, "Resource", d);
}

void tg_policy_decide_prompt(const struct tg_policy *p, const char *name, struct tg_decision *d)
{
    decide_glob(&p->prompts, name, "Prompt", d);
}
