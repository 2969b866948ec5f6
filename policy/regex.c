/* Regex conditions: RE2 syntax on PCRE2. See policy/regex.h for the contract. */
#include "policy/regex.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

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
 * character), while plain ranges it gets right. Data only: the rows of the static const
 * re2_classes[] below. */
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

/* The state of one RE2-to-PCRE2 translation, on the stack of tg_regex_compile(), which frees
 * out, map and saved before it returns. */
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

/* The patterns of one policy share one match context (the limits) and one JIT stack. Matching
 * writes to both and to each pattern's match data, which is safe because decisions run on one
 * thread and never nest. Owner: the policy (tg_policy.rx), made with its first pattern
 * (policy_mctx) and freed by tg_regex_ctx_free() in policy_free(), after its patterns. */
struct tg_regex_ctx {
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack; /* NULL if it could not be made: the JIT's own 32 KiB then */
};

/* Owner: its condition (cond.re); freed by tg_regex_free() from tg__free_tool(). mctx is
 * borrowed from the policy's struct tg_regex_ctx. */
struct tg_regex {
    pcre2_code *re;            /* compiled (JIT where it can be) at load */
    pcre2_match_data *md;      /* this pattern's match data, reused by every match */
    pcre2_match_context *mctx; /* the policy's limits (its struct tg_regex_ctx owns it) */
};

/* The policy's match context, made with its first regex: limits on backtracking, so that no
 * pattern can spend more than a few milliseconds on one argument. */
static pcre2_match_context *policy_mctx(struct tg_regex_ctx **ctx)
{
    if (*ctx != NULL)
        return (*ctx)->mctx;
    struct tg_regex_ctx *c = tg_xcalloc(1, sizeof(*c));
    c->mctx = pcre2_match_context_create(NULL);
    if (c->mctx == NULL)
        abort();
    pcre2_set_match_limit(c->mctx, RX_MATCH_LIMIT);
    pcre2_set_depth_limit(c->mctx, RX_DEPTH_LIMIT);
    pcre2_set_heap_limit(c->mctx, RX_HEAP_LIMIT_KIB);
    /* Without a stack of its own the JIT has 32 KiB, about 1300 repeats of (?:a|b). The stack is
     * reserved up front but only the pages used are ever touched. */
    c->jit_stack = pcre2_jit_stack_create(32 * 1024, RX_JIT_STACK_MAX, NULL);
    if (c->jit_stack != NULL)
        pcre2_jit_stack_assign(c->mctx, NULL, c->jit_stack);
    *ctx = c;
    return c->mctx;
}

int tg_regex_compile(const char *pat, struct tg_regex_ctx **ctx, struct tg_regex **out, char *why, size_t whysz)
{
    struct rx x = {.pat = pat, .len = strlen(pat)};
    tg_buf_init(&x.out);
    int r = -1;
    pcre2_compile_context *cc = NULL;
    pcre2_code *re = NULL;
    *out = NULL;
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
    re = pcre2_compile((PCRE2_SPTR)(x.out.base ? x.out.base : ""), x.out.len, opts, &code, &off, cc);
    if (re == NULL) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof(msg));
        size_t at = off < x.out.len ? x.map[off] : x.len;
        snprintf(why, whysz, "invalid regex \"%s\": %s at offset %zu", pat, (const char *)msg, at);
        goto done;
    }
    uint32_t backrefs = 0;
    if (pcre2_pattern_info(re, PCRE2_INFO_BACKREFMAX, &backrefs) != 0 || backrefs > 0) {
        snprintf(why, whysz, "backreferences are not RE2 syntax (in \"%s\")", pat);
        pcre2_code_free(re);
        goto done;
    }
    /* JIT where this build and machine have it; the interpreter otherwise, with the same
     * answers under the match and depth limits. */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    struct tg_regex *rx = tg_xcalloc(1, sizeof(*rx));
    rx->re = re;
    rx->md = pcre2_match_data_create(1, NULL);
    if (rx->md == NULL)
        abort();
    rx->mctx = policy_mctx(ctx);
    *out = rx;
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
int tg_regex_match(const struct tg_regex *rx, const char *s)
{
    int rc = pcre2_match(rx->re, (PCRE2_SPTR)s, strlen(s), 0, 0, rx->md, rx->mctx);
    if (rc >= 0) /* 0: matched, with more groups than the one-pair match data holds */
        return 1;
    return rc == PCRE2_ERROR_NOMATCH ? 0 : -1;
}

void tg_regex_free(struct tg_regex *rx)
{
    if (rx == NULL)
        return;
    pcre2_code_free(rx->re);
    pcre2_match_data_free(rx->md);
    free(rx);
}

void tg_regex_ctx_free(struct tg_regex_ctx *ctx)
{
    if (ctx == NULL)
        return;
    pcre2_match_context_free(ctx->mctx);
    pcre2_jit_stack_free(ctx->jit_stack);
    free(ctx);
}
