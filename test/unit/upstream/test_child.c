/* upstream/child.c: a real child process (/bin/cat, or a one-line /bin/sh script) started
 * through a struct tg_upstream_conf, on a real loop. What the test writes with
 * tg_child_send() comes back on the child's stdout, so the line framing, the JSON filter
 * and the line limit are seen from the outside. Each case waits by running the loop until
 * a condition holds (a watchdog bounds it) and ends with the child reaped, every handle
 * closed (uv_loop_close() succeeds) and nothing leaked. */
#include "test/unit/unit.h"

#include <signal.h>
#include <unistd.h>
#include <uv.h>

#include "core/base/buf.h"
#include "core/conf/conf.h"
#include "core/base/log.h"
#include "upstream/child.h"

struct fx {
    uv_loop_t loop;
    uv_timer_t watchdog;
    int timed_out;
    struct tg_upstream_conf uc;
    struct tg_child *ch;
    int nmsgs;
    struct tg_buf msgs; /* every message, each followed by '|' */
    int exits;
    int64_t status;
    int sig;
    struct tg_child_tally *tally; /* every fixture's child is counted in it */
    int nover;        /* lines over max_line */
    struct tg_buf over; /* their ids, "|"-separated */
};

static void on_watchdog(uv_timer_t *t) { ((struct fx *)t->data)->timed_out = 1; }

#define RUN_UNTIL(f, cond)                                                                                            \
    do {                                                                                                              \
        (f)->timed_out = 0;                                                                                           \
        uv_timer_start(&(f)->watchdog, on_watchdog, 5000, 0);                                                         \
        while (!(cond) && !(f)->timed_out)                                                                            \
            uv_run(&(f)->loop, UV_RUN_ONCE);                                                                          \
        uv_timer_stop(&(f)->watchdog);                                                                                \
        if (!(cond))                                                                                                  \
            fail_msg("%s:%d: timed out waiting for %s (%d messages: \"%.*s\", %d exits)", __FILE__, __LINE__, #cond, \
                     (f)->nmsgs, (int)(f)->msgs.len, (f)->msgs.base ? (f)->msgs.base : "", (f)->exits);             \
    } while (0)

static void on_message(void *ud, const char *p, size_t n, const struct tg_json_doc *doc, struct tg_buf *own)
{
    struct fx *f = ud;
    if (doc == NULL) { /* a line over max_line, dropped: p is its id as far as its start shows */
        f->nover++;
        tg_buf_append(&f->over, p, n);
        tg_buf_append(&f->over, "|", 1);
        return;
    }
    f->nmsgs++;
    tg_buf_append(&f->msgs, p, n);
    tg_buf_append(&f->msgs, "|", 1);
}

static void on_exit_cb(void *ud, int64_t status, int term_signal)
{
    struct fx *f = ud;
    f->exits++;
    f->status = status;
    f->sig = term_signal;
    f->ch = NULL; /* it frees itself once its handles are closed */
}

static char *cat_argv[] = {"/bin/cat", NULL};

/* uc: the upstream to start (its command, env, cwd), or NULL for argv with nothing else set. */
static struct fx *fx_new_conf(const struct tg_upstream_conf *uc, char **argv, size_t max_line)
{
    struct fx *f = tg_xcalloc(1, sizeof(*f));
    assert_int_equal(uv_loop_init(&f->loop), 0);
    uv_timer_init(&f->loop, &f->watchdog);
    f->watchdog.data = f;
    tg_buf_init(&f->msgs);
    if (uc != NULL)
        f->uc = *uc;
    f->uc.name = "test";
    f->uc.transport = TG_UP_STDIO;
    if (argv != NULL)
        f->uc.command = argv;
    f->tally = tg_child_tally_new();
    int err = 0;
    f->ch = tg_child_spawn(&f->loop, &f->uc, max_line, f->tally, on_message, on_exit_cb, f, &err);
    assert_int_equal(err, 0);
    assert_non_null(f->ch);
    assert_true(tg_child_alive(f->ch));
    assert_true(tg_child_pid(f->ch) > 0);
    return f;
}

static struct fx *fx_new(char **argv, size_t max_line) { return fx_new_conf(NULL, argv, max_line); }

static void fx_free(struct fx *f)
{
    if (f->ch != NULL)
        tg_child_kill(f->ch);
    f->ch = NULL;
    RUN_UNTIL(f, tg_child_live_count() == 0); /* reaped */
    assert_int_equal(f->tally->live, 0); /* counted out at exit */
    assert_int_equal(f->tally->leaving, 0);
    uv_close((uv_handle_t *)&f->watchdog, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    tg_buf_dispose(&f->msgs);
    tg_buf_dispose(&f->over);
    tg_child_tally_unref(f->tally); /* the child's reference went when it freed itself */
    free(f);
}

static void send_str(struct fx *f, const char *s) { assert_int_equal(tg_child_send(f->ch, s, strlen(s)), 0); }

static void assert_msgs(struct fx *f, const char *want)
{
    if (f->msgs.len != strlen(want) || memcmp(f->msgs.base, want, f->msgs.len) != 0)
        fail_msg("messages \"%.*s\", expected \"%s\"", (int)f->msgs.len, f->msgs.base ? f->msgs.base : "", want);
}

/* ---- cases ----------------------------------------------------------------------------- */

static void line_comes_back_as_a_message(void **state)
{
    struct fx *f = fx_new(cat_argv, 4096);
    assert_int_equal(f->tally->live, 1); /* counted in from spawn */
    send_str(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}");
    RUN_UNTIL(f, f->nmsgs == 1);
    assert_msgs(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}|"); /* without its newline */
    /* Several at once, in order. */
    send_str(f, "{\"id\":2}");
    send_str(f, "{\"id\":3}");
    send_str(f, "{\"id\":4}");
    RUN_UNTIL(f, f->nmsgs == 4);
    assert_msgs(f, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}|{\"id\":2}|{\"id\":3}|{\"id\":4}|");
    assert_int_equal(f->exits, 0);
    fx_free(f);
}

static void non_json_lines_skipped(void **state)
{
    struct fx *f = fx_new(cat_argv, 4096);
    send_str(f, "Server starting on stdio...");
    send_str(f, "[1,2,3]");        /* JSON, but not an object */
    send_str(f, "{\"broken\":");   /* not JSON */
    send_str(f, "");               /* empty */
    send_str(f, "  {\"id\":1}\r"); /* blanks and a CR around an object: trimmed, delivered */
    send_str(f, "{\"id\":2}");
    RUN_UNTIL(f, f->nmsgs == 2);
    assert_msgs(f, "{\"id\":1}|{\"id\":2}|");
    assert_int_equal(tg_child_skipped(f->ch), 3); /* the empty line is not counted */
    fx_free(f);
}

/* uc->stderr_inherit: the child writes to this process's stderr itself (tollgate scan passes a
 * server's stderr through), where it would otherwise be logged line by line. */
static void stderr_inherited(void **state)
{
    int p[2];
    assert_int_equal(pipe(p), 0);
    int saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(p[1], 2), 2);
    close(p[1]);
    static char *argv[] = {"/bin/sh", "-c", "echo 'to stderr' >&2", NULL};
    struct tg_upstream_conf uc = {.stderr_inherit = 1};
    struct fx *f = fx_new_conf(&uc, argv, 4096);
    RUN_UNTIL(f, f->exits == 1);
    fx_free(f);
    assert_int_equal(dup2(saved, 2), 2); /* the pipe's last writer closed: it reads to its end */
    close(saved);
    char got[4096];
    size_t n = 0;
    for (ssize_t r; n < sizeof(got) && (r = read(p[0], got + n, sizeof(got) - n)) > 0;)
        n += (size_t)r;
    close(p[0]);
    if (n < 10 || memcmp(got, "to stderr\n", 10) != 0)
        fail_msg("stderr: \"%.*s\"", (int)n, got);
}

static void line_over_max_line_dropped(void **state)
{
    struct fx *f = fx_new(cat_argv, 64);
    struct tg_buf big;
    tg_buf_init(&big);
    tg_buf_appends(&big, "{\"pad\":\"");
    for (int i = 0; i < 100; i++)
        tg_buf_appends(&big, "x");
    tg_buf_appends(&big, "\"}");
    assert_int_equal(tg_child_send(f->ch, big.base, big.len), 0);
    send_str(f, "{\"id\":1}");
    RUN_UNTIL(f, f->nmsgs == 1);
    assert_msgs(f, "{\"id\":1}|");
    /* Longer than one read (64 KiB): dropped up to its newline across reads. */
    big.len = 0;
    tg_buf_appends(&big, "{\"pad\":\"");
    for (int i = 0; i < 200000; i++)
        tg_buf_appends(&big, "y");
    tg_buf_appends(&big, "\"}");
    assert_int_equal(tg_child_send(f->ch, big.base, big.len), 0);
    send_str(f, "{\"id\":2}");
    RUN_UNTIL(f, f->nmsgs == 2);
    assert_msgs(f, "{\"id\":1}|{\"id\":2}|");
    /* Each dropped line is reported, with its top-level id when its start shows one (the call
     * waiting for it fails then, not at its timeout); a nested "id" is not taken for it. */
    assert_int_equal(f->nover, 2);
    big.len = 0;
    tg_buf_appends(&big, "{\"jsonrpc\":\"2.0\",\"result\":{\"id\":99,\"t\":\"");
    while (big.len < 300)
        tg_buf_appends(&big, "w");
    tg_buf_appends(&big, "\"},\"id\":\"g-7\"}");
    assert_int_equal(tg_child_send(f->ch, big.base, big.len), 0);
    big.len = 0;
    tg_buf_appends(&big, "{\"jsonrpc\":\"2.0\",\"id\":42,\"result\":{\"t\":\"");
    while (big.len < 300)
        tg_buf_appends(&big, "v");
    tg_buf_appends(&big, "\"}}");
    assert_int_equal(tg_child_send(f->ch, big.base, big.len), 0);
    RUN_UNTIL(f, f->nover == 4);
    tg_buf_append(&f->over, "", 1);
    assert_string_equal(f->over.base + f->over.len - 4, "42|");
    assert_null(strstr(f->over.base, "99"));
    /* Exactly max_line: delivered. */
    big.len = 0;
    tg_buf_appends(&big, "{\"p\":\"");
    while (big.len < 62)
        tg_buf_appends(&big, "z");
    tg_buf_appends(&big, "\"}");
    assert_int_equal(big.len, 64);
    assert_int_equal(tg_child_send(f->ch, big.base, big.len), 0);
    RUN_UNTIL(f, f->nmsgs == 3);
    tg_buf_dispose(&big);
    fx_free(f);
}

static void on_exit_once_when_killed_from_outside(void **state)
{
    struct fx *f = fx_new(cat_argv, 4096);
    size_t live = tg_child_live_count();
    assert_int_equal(live, 1);
    assert_int_equal(uv_kill(tg_child_pid(f->ch), SIGTERM), 0);
    RUN_UNTIL(f, f->exits == 1);
    assert_int_equal(f->sig, SIGTERM);
    assert_null(f->ch);
    assert_int_equal(tg_child_live_count(), 0);
    for (int i = 0; i < 10; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(f->exits, 1); /* once */
    fx_free(f);
}

static void on_exit_once_when_the_child_exits(void **state)
{
    static char *argv[] = {"/bin/sh", "-c", "echo '{\"id\":\"bye\"}'; exit 3", NULL};
    struct fx *f = fx_new(argv, 4096);
    RUN_UNTIL(f, f->exits == 1);
    assert_int_equal(f->status, 3);
    assert_int_equal(f->sig, 0);
    fx_free(f);
}

static void no_callback_after_tg_child_kill(void **state)
{
    struct fx *f = fx_new(cat_argv, 4096);
    send_str(f, "{\"id\":1}");
    RUN_UNTIL(f, f->nmsgs == 1);
    send_str(f, "{\"id\":2}"); /* may be echoed, but must not be delivered */
    struct tg_child *ch = f->ch;
    tg_child_kill(ch);
    assert_false(tg_child_alive(ch));
    tg_child_kill(ch); /* idempotent */
    f->ch = NULL;
    RUN_UNTIL(f, tg_child_live_count() == 0); /* stdin closed and SIGTERM: reaped */
    assert_int_equal(f->exits, 0);
    assert_int_equal(f->nmsgs, 1);
    fx_free(f);
}

/* A child asked to leave stops counting toward max_children at once (a new session may take its
 * place while it exits), and is counted as leaving until it is reaped. */
static void killed_child_stops_counting_at_once(void **state)
{
    struct fx *f = fx_new(cat_argv, 4096);
    assert_int_equal(f->tally->live, 1);
    tg_child_kill(f->ch);
    f->ch = NULL;
    assert_int_equal(f->tally->live, 0);
    assert_int_equal(f->tally->leaving, 1);
    RUN_UNTIL(f, f->tally->leaving == 0); /* reaped */
    assert_int_equal(tg_child_live_count(), 0);
    fx_free(f);
}

/* ---- the environment upstreams[].env and env_pass make ---------------------------------- */

static char tmpdir[256];

static struct tg_conf *load_text(const char *text, struct tg_buf *err)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/c.conf", tmpdir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    assert_int_equal(fwrite(text, 1, strlen(text), fp), strlen(text));
    assert_int_equal(fclose(fp), 0);
    tg_buf_init(err);
    struct tg_conf *c = tg_conf_load(path, err);
    tg_buf_append(err, "", 1);
    return c;
}

static int env_setup(void **state)
{
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/tg-stdio-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL)
        return -1;
    setenv("TG_T_SECRET", "gateway-secret", 1);
    setenv("COWORK_TOKEN", "cowork-secret", 1);
    setenv("TG_T_PASS", "passed", 1);
    setenv("LC_TIME", "C", 1);
    setenv("TZ", "UTC", 1);
    unsetenv("TG_T_ABSENT");
    return 0;
}

static int env_teardown(void **state)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

#define ENV_CONF_HEAD                                                                                                 \
    "listen = ( { address = \"127.0.0.1\"; port = 0; } );\n"                                                          \
    "grants = ( { name = \"local\"; anonymous = true; } );\n"

/* 1 if env holds exactly "NAME=value" for name (value NULL: any value). */
static int env_holds(char **env, const char *name, const char *value)
{
    size_t nl = strlen(name);
    for (char **e = env; *e; e++)
        if (strncmp(*e, name, nl) == 0 && (*e)[nl] == '=')
            return value == NULL || strcmp(*e + nl + 1, value) == 0;
    return 0;
}

static void child_gets_only_what_it_is_given(void **state)
{
    struct tg_buf err;
    struct tg_conf *c = load_text(ENV_CONF_HEAD "upstreams = ( { name = \"s\"; command = [ \"/bin/sh\", \"-c\",\n"
                                  "  \"printf '{\\\"id\\\":\\\"%s|%s|%s|%s|%s|%s\\\"}\\\\n' \\\"$A\\\" \\\"$TG_T_PASS\\\" "
                                  "\\\"$TG_T_SECRET\\\" \\\"$COWORK_TOKEN\\\" \\\"$TZ\\\" \\\"$LC_TIME\\\"; cat\" ];\n"
                                  "  env = { A = \"from-conf\"; TZ = \"Europe/Paris\"; };\n"
                                  "  env_pass = [ \"TG_T_PASS\", \"TG_T_ABSENT\" ]; } );\n",
                                  &err);
    if (c == NULL)
        fail_msg("load: %s", err.base);
    tg_buf_dispose(&err);
    char **env = c->upstreams[0].env;
    assert_true(env_holds(env, "A", "from-conf"));
    assert_true(env_holds(env, "TZ", "Europe/Paris")); /* env wins over the gateway's */
    assert_true(env_holds(env, "TG_T_PASS", "passed"));
    assert_true(env_holds(env, "LC_TIME", "C"));
    assert_int_equal(env_holds(env, "PATH", getenv("PATH")), getenv("PATH") != NULL);
    assert_false(env_holds(env, "TG_T_ABSENT", NULL)); /* named but not set: absent */
    assert_false(env_holds(env, "TG_T_SECRET", NULL));
    assert_false(env_holds(env, "COWORK_TOKEN", NULL));
    for (char **e = env; *e; e++) { /* nothing else */
        int known = strncmp(*e, "LC_", 3) == 0;
        static const char *const names[] = {"PATH", "HOME", "LANG", "TZ", "A", "TG_T_PASS", NULL};
        for (int i = 0; names[i] && !known; i++)
            known = strncmp(*e, names[i], strlen(names[i])) == 0 && (*e)[strlen(names[i])] == '=';
        if (!known)
            fail_msg("the child would get %s", *e);
    }
    /* and the child sees exactly that */
    struct fx *f = fx_new_conf(&c->upstreams[0], NULL, 4096);
    RUN_UNTIL(f, f->nmsgs == 1);
    assert_msgs(f, "{\"id\":\"from-conf|passed|||Europe/Paris|C\"}|");
    fx_free(f);
    tg_conf_unref(c);
}

static void env_pass_takes_names_only(void **state)
{
    struct tg_buf err;
    struct tg_conf *c = load_text(ENV_CONF_HEAD "upstreams = ( { name = \"s\"; command = [ \"cat\" ];\n"
                                  "  env_pass = [ \"OK\", \"A=B\" ]; } );\n",
                                  &err);
    assert_null(c);
    if (strstr(err.base, "c.conf:4: env_pass: element 1 must be a variable name") == NULL)
        fail_msg("error: %s", err.base);
    tg_buf_dispose(&err);
    c = load_text(ENV_CONF_HEAD "upstreams = ( { name = \"s\"; command = [ \"cat\" ]; env_pass = \"PATH\"; } );\n", &err);
    assert_null(c);
    if (strstr(err.base, "env_pass: must be an array of variable names") == NULL)
        fail_msg("error: %s", err.base);
    tg_buf_dispose(&err);
    c = load_text(ENV_CONF_HEAD "upstreams = ( { name = \"s\"; url = \"http://127.0.0.1:1/mcp\"; env_pass = [ \"A\" ]; } );\n",
                  &err);
    assert_null(c);
    if (strstr(err.base, "are for stdio upstreams") == NULL)
        fail_msg("error: %s", err.base);
    tg_buf_dispose(&err);
}

int main(int argc, char **argv)
{
    tg_log_setup(TG_LOG_ERROR, TG_LOG_LOGFMT, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(line_comes_back_as_a_message),
        cmocka_unit_test(non_json_lines_skipped),
        cmocka_unit_test(stderr_inherited),
        cmocka_unit_test(line_over_max_line_dropped),
        cmocka_unit_test(on_exit_once_when_killed_from_outside),
        cmocka_unit_test(on_exit_once_when_the_child_exits),
        cmocka_unit_test(no_callback_after_tg_child_kill),
        cmocka_unit_test(killed_child_stops_counting_at_once),
        cmocka_unit_test_setup_teardown(child_gets_only_what_it_is_given, env_setup, env_teardown),
        cmocka_unit_test_setup_teardown(env_pass_takes_names_only, env_setup, env_teardown),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
