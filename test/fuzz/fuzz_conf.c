/* Configuration loading (core/conf/conf.c, conf_upstream.c, conf_grant.c, and through them
 * libconfig, policy files and JWKS files): the input is a tollgate.conf, written to a file and
 * given to tg_conf_load as the gateway is at start and on reload.
 *
 * The harness makes one directory in /tmp (mkdtemp, once) holding the input's file, two policies
 * (p.json, p.yaml) and a JWKS (jwks.json); "$DIR" in the input stands for that directory, so a
 * seed can name them (policy = "$DIR/p.json"). Inputs that could leave that sandbox or block are
 * skipped: "@include" (libconfig reads the named file), and "/dev/", "/proc/" or "/sys/" anywhere.
 * Properties:
 *   the loader returns a conf with nothing in err, or NULL with a reason in err; never both;
 *   every reason line has the shape "FILE:LINE: ..." and names the input's file (see below),
 *   and holds no control byte;
 *   a conf has at least one listener and one upstream, and a second reference outlives the
 *   first unref (refcount);
 * and no crash, no leak, no undefined behaviour (the conf is freed with tg_conf_unref).
 *
 * One leak is libconfig's, not ours, and is suppressed below: libconfig 1.5 (Debian's libconfig9
 * 1.5-0.4) loses the scanner's string buffer when a syntax error follows a string; the input
 * `""` alone shows it with nothing but config_read_file and config_destroy
 * (regress/conf/libconfig-leak-string-then-syntax-error).
 *
 * Its finding, fixed: tg__conf_errf (core/conf/conf.c) printed the values it quotes as they were, so a
 * string with a newline in it (libconfig takes one inside quotes), e.g. an upstream name, split
 * one reason into several lines (regress/conf/newline-in-a-quoted-value.conf). Every line of a
 * reason is checked, and none may hold a control byte.
 *
 * Its second, fixed too (regress/conf/ ...-in-upstream-name...): tg__conf_errf made the message safe
 * but printed its directive argument as it was, which conf_upstream.c builds from the
 * upstream's name ("upstreams.%s"), so an upstream named "a\nb" split a reason line; the
 * directive is made safe the same way now. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libconfig.h>

#include "core/conf/conf.h"
#include "core/base/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
const char *__lsan_default_suppressions(void);

/* Read by LeakSanitizer at start (libFuzzer or replay): only allocations made by libconfig's
 * scanner, so a conf or a policy the loader fails to free is still caught. */
const char *__lsan_default_suppressions(void) { return "leak:libconfig_yylex\nleak:strbuf_append\n"; }

static char dir[64];
static char conf_path[96];

static const char POLICY_JSON[] =
    "{\"version\":\"1\",\"default\":\"deny\",\"tools\":{\"echo\":{\"action\":\"allow\","
    "\"limits\":[{\"counter\":\"c\",\"window\":\"minute\",\"max\":3,\"scope\":\"session\"}]}}}\n";
static const char POLICY_YAML[] = "version: \"1\"\ndefault: allow\nhide: [secret]\n"
                                  "tools:\n  rm: {rules: [{name: no, action: deny}]}\n";
static const char JWKS[] = "{\"keys\":[{\"kty\":\"oct\",\"kid\":\"k1\",\"alg\":\"HS256\","
                           "\"k\":\"MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY\"}]}\n";

static void put(const char *name, const char *text, size_t n)
{
    char path[128];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(text, 1, n, f) != n || fclose(f) != 0)
        abort();
}

static void setup(void)
{
    if (dir[0] != '\0')
        return;
    snprintf(dir, sizeof(dir), "/tmp/tg-fuzz-conf-XXXXXX");
    if (mkdtemp(dir) == NULL)
        abort();
    snprintf(conf_path, sizeof(conf_path), "%s/tollgate.conf", dir);
    put("p.json", POLICY_JSON, sizeof(POLICY_JSON) - 1);
    put("p.yaml", POLICY_YAML, sizeof(POLICY_YAML) - 1);
    put("jwks.json", JWKS, sizeof(JWKS) - 1);
}

static void cleanup(void)
{
    static const char *const names[] = {"tollgate.conf", "p.json", "p.yaml", "jwks.json"};
    char path[128];
    for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}


static int has(const uint8_t *d, size_t n, const char *s)
{
    size_t k = strlen(s);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(d + i, s, k) == 0)
            return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (dir[0] == '\0') {
        tg_log_setup(TG_LOG_ERROR, 0, NULL); /* the loader's warnings are not findings */
        setup();
        atexit(cleanup);
    }
    if (has(data, size, "@include") || has(data, size, "/dev/") || has(data, size, "/proc/") ||
        has(data, size, "/sys/"))
        return 0;
    FILE *f = fopen(conf_path, "wb");
    if (f == NULL)
        abort();
    size_t dl = strlen(dir);
    for (size_t i = 0; i < size; i++) {
        if (i + 4 <= size && memcmp(data + i, "$DIR", 4) == 0) {
            fwrite(dir, 1, dl, f);
            i += 3;
        } else {
            fputc(data[i], f);
        }
    }
    if (fclose(f) != 0)
        abort();

    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_conf *c = tg_conf_load(conf_path, &err);
    if (getenv("TG_FUZZ_VERBOSE") != NULL) /* seed triage: what each input came to */
        fprintf(stderr, "%s\n", c != NULL ? "loaded" : err.base);
    if (c == NULL) {
        if (err.len == 0)
            abort(); /* a refusal says why */
        /* Each reason line names the file and a line: "PATH:N: ...", N never 0, or "PATH: ..."
         * when no setting holds a line (a nested file, such as a policy, may follow with its own
         * name after the directive). */
        size_t pl = strlen(conf_path);
        for (size_t i = 0; i < err.len;) {
            const char *line = err.base + i;
            const char *nl = memchr(line, '\n', err.len - i);
            size_t len = nl ? (size_t)(nl - line) : err.len - i;
            if (len < pl + 3 || memcmp(line, conf_path, pl) != 0 || line[pl] != ':')
                abort();
            size_t k = pl + 1;
            while (k < len && line[k] >= '0' && line[k] <= '9')
                k++;
            if (k == pl + 1 ? line[k] != ' ' : k >= len || line[k] != ':' || line[pl + 1] == '0')
                abort();
            for (size_t j = 0; j < len; j++) /* no control byte reaches a terminal or a log */
                if ((unsigned char)line[j] < 0x20 || line[j] == 0x7f)
                    abort();
            i += len + 1;
        }
    } else {
        if (err.len != 0)
            abort(); /* loaded, yet an error was reported */
        if (c->nlisteners == 0 || c->nupstreams == 0)
            abort();
        struct tg_conf *again = tg_conf_ref(c);
        tg_conf_unref(c);
        if (again->nupstreams == 0 || again->upstreams[0].name == NULL)
            abort();
        tg_conf_unref(again);
    }
    tg_buf_dispose(&err);
    return 0;
}
