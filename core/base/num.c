#include "core/base/num.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int digit(char c) { return c >= '0' && c <= '9'; }

int tg_num_is_json(const char *p, size_t n)
{
    size_t i = 0;
    if (i < n && p[i] == '-')
        i++;
    if (i == n || !digit(p[i]))
        return 0;
    if (p[i] == '0')
        i++; /* no leading zeros: "01" is not a number */
    else
        while (i < n && digit(p[i]))
            i++;
    if (i < n && p[i] == '.') {
        i++;
        if (i == n || !digit(p[i]))
            return 0;
        while (i < n && digit(p[i]))
            i++;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        i++;
        if (i < n && (p[i] == '+' || p[i] == '-'))
            i++;
        if (i == n || !digit(p[i]))
            return 0;
        while (i < n && digit(p[i]))
            i++;
    }
    return i == n;
}

int tg_num_parse(const char *p, size_t n, double *out)
{
    if (n > TG_NUM_MAX_LEN || !tg_num_is_json(p, n))
        return -1;
    /* The grammar is checked: strtod only rounds the decimal to the nearest double (what it does
     * correctly), on a NUL-terminated copy since wire data has no NUL. */
    char buf[TG_NUM_MAX_LEN + 1];
    memcpy(buf, p, n);
    buf[n] = 0;
    double d = strtod(buf, NULL);
    if (!isfinite(d))
        return -1;
    *out = d;
    return 0;
}
