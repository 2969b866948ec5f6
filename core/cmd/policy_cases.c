/* Reading a `tollgate policy test` cases file (core/cmd/policy_cases.h). */
#include "core/cmd/policy_cases.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/base/buf.h"
#include "policy/policy.h"

#define CASES_MAX_FILE (4 * 1024 * 1024)

cJSON *tg__policy_load_cases(const char *file)
{
    FILE *f = fopen(file, "rb");
    if (f == NULL) {
        fprintf(stderr, "%s: cannot open: %s\n", file, strerror(errno));
        return NULL;
    }
    struct tg_buf b;
    tg_buf_init(&b);
    char chunk[65536];
    size_t n;
    int big = 0;
    while (!big && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        big = tg_buf_try_append(&b, chunk, n, CASES_MAX_FILE) != 0;
    fclose(f);
    if (big) {
        fprintf(stderr, "%s: larger than %d bytes\n", file, CASES_MAX_FILE);
        tg_buf_dispose(&b);
        return NULL;
    }
    cJSON *root = NULL;
    char why[300];
    /* YAML's flow style reads JSON too. */
    if (tg_yaml_to_json(b.base ? b.base : "", b.len, &root, why, sizeof(why)) != 0) {
        fprintf(stderr, "%s: %s\n", file, why);
        root = NULL;
    }
    tg_buf_dispose(&b);
    return root;
}
