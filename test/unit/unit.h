/* Shared scaffolding for the cmocka unit tests.
 *
 * Cases whose name starts with "bug_" demonstrate a known defect in the
 * gateway code (see the comment on each). They run as their own ctest entry
 * (unit.<module>.<file>.bugs, started with --bugs) so that they stay red until
 * the defect is fixed without hiding regressions in the other cases. */
#ifndef TG_TEST_UNIT_H
#define TG_TEST_UNIT_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A uniform pick in [0, n) from a xorshift64 state (any non-zero seed): generated inputs that
 * are the same on every run. */
static inline unsigned tg_unit_rnd(uint64_t *state, unsigned n)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (unsigned)(*state % n);
}

static inline int tg_unit_run(const char *group, const struct CMUnitTest *all, size_t n, int argc, char **argv)
{
    int bugs = argc > 1 && strcmp(argv[1], "--bugs") == 0;
    struct CMUnitTest *sel = calloc(n ? n : 1, sizeof(*sel));
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if ((strncmp(all[i].name, "bug_", 4) == 0) == bugs)
            sel[k++] = all[i];
    int r = 0;
    if (k > 0)
        r = _cmocka_run_group_tests(group, sel, k, NULL, NULL);
    else
        printf("[  PASSED  ] 0 test(s) in %s%s\n", group, bugs ? " (no known-bug cases)" : "");
    free(sel);
    return r;
}

#define TG_UNIT_RUN(tests, argc, argv) tg_unit_run(__FILE__, (tests), sizeof(tests) / sizeof((tests)[0]), (argc), (argv))

#endif
