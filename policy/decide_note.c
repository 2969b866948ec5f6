/* counters_json, the counter values a decision reports for the audit log: written without
 * printf, as every reservation of every decision adds one. Part of policy/decide.c's work, on
 * its own here; declared in policy_int.h. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/policy.h"
#include "policy/policy_int.h"

/* "%lld" of v into out (26 bytes or more: one fixed-size copy), two digits a step; its length. */
static size_t format_ll(long long v, char *out)
{
    static const char pairs[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                "8081828384858687888990919293949596979899";
    char tmp[48];
    char *const end = tmp + 24; /* the digits end here; the 24 bytes after are room for the copy */
    char *q = end;
    size_t k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    while (u >= 100) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        q -= 2;
        memcpy(q, pairs + 2 * r, 2);
    }
    if (u >= 10) {
        q -= 2;
        memcpy(q, pairs + 2 * u, 2);
    } else {
        *--q = (char)('0' + u);
    }
    if (v < 0)
        out[k++] = '-';
    size_t n = (size_t)(end - q);
    memcpy(out + k, q, 24); /* n <= 20 of them count */
    k += n;
    out[k] = '\0';
    return k;
}

/* Append ",NAME:VALUE" (no comma first) to counters_json, where NAME is the counter's name as a
 * JSON string (made at compile time, pcounter.jlabel), without snprintf. An entry that does not
 * fit whole is left out, so counters_json always holds whole members. */
void tg__note_counter(struct tg_decision *d, const struct pcounter *pc, double value)
{
    size_t len = d->counters_json_len;
    if (len + 80 >= sizeof(d->counters_json))
        return;
    char *out = d->counters_json + len;
    size_t room = sizeof(d->counters_json) - len - 1; /* bytes before the NUL */
    /* value == floor(value) && fabs(value) < 9.2e18, without the call to floor: in that range
     * the conversion to long long is defined and gives back value exactly when it is whole. */
    int whole = fabs(value) < 9.2e18 && (double)(long long)value == value;
    if (whole && (len ? 1 : 0) + pc->jlabel_len + 1 + 26 <= room) {
        /* The common case, written in place: format_ll needs 26 bytes of room. */
        if (len)
            *out++ = ',';
        memcpy(out, pc->jlabel, pc->jlabel_len);
        out += pc->jlabel_len;
        *out++ = ':';
        out += format_ll((long long)value, out);
        d->counters_json_len = (size_t)(out - d->counters_json);
        return;
    }
    char num[40];
    size_t numlen;
    if (!isfinite(value)) {
        /* No store holds one (policy/counters.c refuses it, a Redis value is read strictly), but
         * an audit line stays JSON whatever: nan and inf are not JSON numbers. */
        memcpy(num, "null", 5);
        numlen = 4;
    } else if (whole) {
        numlen = format_ll((long long)value, num);
    } else {
        /* The shortest form that reads back as the same double: 0.3, not 0.29999999999999999. */
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(num, sizeof(num), "%.*g", prec, value);
            if (strtod(num, NULL) == value)
                break;
        }
        numlen = strlen(num);
    }
    const char *piece[4] = {",", pc->jlabel, ":", num};
    size_t plen[4] = {len ? 1 : 0, pc->jlabel_len, 1, numlen};
    if (plen[0] + plen[1] + plen[2] + plen[3] > room)
        return; /* a whole entry or none: a cut one would leave counters_json no JSON */
    out = tg__cat_cut(out, room, piece, plen, 4);
    d->counters_json_len = (size_t)(out - d->counters_json);
}

void tg__note_clear(struct tg_decision *d)
{
    d->counters_json[0] = '\0';
    d->counters_json_len = 0;
}

char *tg__cat_cut(char *out, size_t room, const char *const *piece, const size_t *len, int n)
{
    for (int k = 0; k < n; k++) {
        size_t m = len[k] < room ? len[k] : room;
        memcpy(out, piece[k], m);
        out += m;
        room -= m;
    }
    *out = '\0';
    return out;
}

/* Go's %v for a float64, so that eq between a string and a number behaves as in Intercept. */
void tg__go_float(double d, char *out, size_t n)
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

void tg__note_limit(struct tg_decision *d, uint64_t retry_ms, double limit, double left)
{
    d->retry_after_ms = retry_ms;
    d->limit = limit;
    d->remaining = isfinite(left) && left > 0 ? floor(left) : 0;
    d->limit_known = isfinite(limit) ? 1 : 0;
}

void tg__note_window_limit(struct tg_decision *d, uint64_t retry_ms, double limit, int limit_op, double now)
{
    /* Units a call could still add: limit - now under <=; under < the limit itself is out of
     * reach, so one unit less (a count of 10 under "< 10" has no call left at 9). */
    double left = limit - now;
    if (limit_op == TG_LIMIT_LT)
        left = ceil(left) - 1;
    tg__note_limit(d, retry_ms, limit, left);
}
