/* What the conf loader's unit tests share: a scratch folder (setup_dir/teardown_dir, with the
 * environment the ${VAR} tests read), confs written to it and loaded, and the check that a conf
 * is refused with one exact "path:line: directive: reason" line. Included by one test file each:
 * its functions are static. */
#ifndef TG_TEST_CONF_HARNESS_H
#define TG_TEST_CONF_HARNESS_H

#include "test/unit/unit.h"

#include <unistd.h>
#include <sys/stat.h>

#include "core/conf/conf.h"

static char tmpdir[256];
static int nfile;

static int setup_dir(void **state)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/tg-conf-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    unsetenv("TG_T_UNSET");
    unsetenv("TG_T_UNSET2");
    setenv("TG_T_SET", "val", 1);
    setenv("TG_T_EMPTY", "", 1);
    setenv("TG_T_PORT", "4444", 1);
    return 0;
}

static int teardown_dir(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* Writes text to a fresh file and returns its path (static storage, per call). */
static const char *write_conf(const char *text)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/c%d.conf", tmpdir, ++nfile);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
    return path;
}

/* 1-based number of the first line of text that contains marker. */
static int line_of(const char *text, const char *marker)
{
    const char *m = strstr(text, marker);
    assert_non_null(m);
    int line = 1;
    for (const char *p = text; p < m; p++)
        line += *p == '\n';
    return line;
}

struct loaded {
    struct tg_conf *c;
    struct tg_buf err;
    char path[512];
};

static void load(struct loaded *l, const char *text)
{
    snprintf(l->path, sizeof(l->path), "%s", write_conf(text));
    tg_buf_init(&l->err);
    l->c = tg_conf_load(l->path, &l->err);
    tg_buf_append(&l->err, "", 1);
    l->err.len--;
}

static void loaded_dispose(struct loaded *l)
{
    tg_conf_unref(l->c);
    tg_buf_dispose(&l->err);
}

static void load_ok(struct loaded *l, const char *text)
{
    load(l, text);
    if (l->c == NULL)
        fail_msg("config refused:\n%s\n--- errors:\n%s", text, l->err.base);
    assert_int_equal(l->err.len, 0);
}

/* Loads text, expects failure and an error line "path:line: directive: ...reason...". */
static void expect_error(const char *text, int line, const char *directive, const char *reason)
{
    struct loaded l;
    load(&l, text);
    if (l.c != NULL) {
        loaded_dispose(&l);
        fail_msg("config accepted but must fail with %s (%s):\n%s", directive, reason ? reason : "any reason", text);
    }
    char prefix[700];
    if (line > 0)
        snprintf(prefix, sizeof(prefix), "%s:%d: %s: ", l.path, line, directive);
    else /* no setting of the file to point at: no line number (never line 0) */
        snprintf(prefix, sizeof(prefix), "%s: %s: ", l.path, directive);
    int found = 0;
    for (const char *p = l.err.base; p && *p;) {
        const char *nl = strchr(p, '\n');
        assert_non_null(nl); /* every error is a complete line */
        if (strncmp(p, l.path, strlen(l.path)) == 0 && strncmp(p + strlen(l.path), ":0:", 3) == 0)
            fail_msg("an error with line 0: %.*s", (int)(nl - p), p);
        if (strncmp(p, prefix, strlen(prefix)) == 0) {
            const char *r = p + strlen(prefix);
            if (reason == NULL || (memmem(r, (size_t)(nl - r), reason, strlen(reason)) != NULL))
                found = 1;
        }
        p = nl + 1;
    }
    if (!found) {
        print_error("no error line \"%s...%s...\" in:\n%s", prefix, reason ? reason : "", l.err.base);
        loaded_dispose(&l);
        fail();
    }
    loaded_dispose(&l);
}

#define LISTEN "listen = ( { address = \"127.0.0.1\"; port = 8080; } );\n"

#endif
