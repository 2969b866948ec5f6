/* core/base/num.c: only decimal JSON numbers are numbers; strtod's extensions (hex, inf, nan, blanks)
 * and values out of a double's range are refused. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "core/base/num.h"

static int parse(const char *s, double *d) { return tg_num_parse(s, strlen(s), d); }

static void accepted(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        double value;
    } ok[] = {
        {"0", 0},           {"-0", 0},        {"5", 5},           {"-12", -12},
        {"0.5", 0.5},       {"1.25e2", 125},  {"1E-2", 0.01},     {"1e+20", 1e20},
        {"0.30000000000000004", 0.30000000000000004}, {"1700000000000", 1700000000000.0},
        {"1.7976931348623157e308", 1.7976931348623157e308}, {"4.9e-324", 4.9e-324},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        double d = -1;
        if (parse(ok[i].text, &d) != 0)
            fail_msg("\"%s\" refused", ok[i].text);
        if (d != ok[i].value)
            fail_msg("\"%s\" read as %.17g, not %.17g", ok[i].text, d, ok[i].value);
        assert_true(tg_num_is_json(ok[i].text, strlen(ok[i].text)));
    }
}

static void refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",      "-",     "nan",   "-nan",  "NaN",    "inf",   "-inf",   "Infinity", "infinity", "0x10",
        "0X1A",  "0x1p3", "1e",    "1e+",   "1.",     ".5",    "+1",     "01",       "-01",      "00",
        " 1",    "1 ",    "\t1",   "1\n",   "1e999",  "-1e999", "1e400", "1,5",      "1_000",    "0.1.0",
        "127.0.0.1", "1ee5", "--1", "1e5.5", "0b101", "\xd9\xa1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        double d = 42;
        if (parse(bad[i], &d) == 0)
            fail_msg("\"%s\" accepted as %.17g", bad[i], d);
        assert_true(d == 42); /* untouched */
    }
    /* the grammar alone: 1e999 is a JSON number (too large to parse), the others are not */
    assert_true(tg_num_is_json("1e999", 5));
    assert_false(tg_num_is_json("0.1.0", 5));
    assert_false(tg_num_is_json("127.0.0.1", 9));
    assert_false(tg_num_is_json("0x10", 4));
    /* wire data is not NUL-terminated: the length bounds the read */
    double d = 0;
    assert_int_equal(tg_num_parse("12x", 2, &d), 0);
    assert_true(d == 12);
    /* longer than TG_NUM_MAX_LEN: refused, even though it is a number */
    char lng[TG_NUM_MAX_LEN + 2];
    memset(lng, '1', sizeof(lng));
    assert_int_equal(tg_num_parse(lng, TG_NUM_MAX_LEN + 1, &d), -1);
    assert_int_equal(tg_num_parse(lng, 15, &d), 0);
    assert_true(d == 111111111111111.0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accepted),
        cmocka_unit_test(refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
