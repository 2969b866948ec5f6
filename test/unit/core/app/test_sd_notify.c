/* core/app/sd_notify.c: sd_notify's datagrams, received on AF_UNIX sockets made here (a path and an
 * abstract name), and the real binary's notifications over its life (start, SIGHUP reload,
 * a refused reload, SIGTERM drain) as systemd would receive them. */
#include "test/unit/unit.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/app/sd_notify.h"

/* A receiving socket, as the service manager holds it. */
struct sink {
    int fd;
    char name[108]; /* the NOTIFY_SOCKET value that reaches it */
    char dir[64];   /* for a path socket: its directory, removed at the end */
};

static void sink_abstract(struct sink *s)
{
    static unsigned seq;
    memset(s, 0, sizeof(*s));
    s->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(s->fd >= 0);
    snprintf(s->name, sizeof(s->name), "@tollgate-test-notify-%ld-%u-%ld", (long)getpid(), seq++, (long)time(NULL));
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t len = strlen(s->name);
    memcpy(a.sun_path, s->name, len);
    a.sun_path[0] = '\0';
    /* The exact length, no terminator: a sender that added a NUL would reach another name. */
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)), 0);
}

static void sink_path(struct sink *s)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->dir, sizeof(s->dir), "/tmp/tg-notify-XXXXXX");
    assert_non_null(mkdtemp(s->dir));
    snprintf(s->name, sizeof(s->name), "%s/notify", s->dir);
    s->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(s->fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", s->name);
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
}

static void sink_close(struct sink *s)
{
    close(s->fd);
    if (s->dir[0] != '\0') {
        unlink(s->name);
        rmdir(s->dir);
    }
}

/* The next datagram, waiting up to ms; fails the test on a timeout. */
static void sink_recv(struct sink *s, char *out, size_t outsz, int ms, const char *what)
{
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    int r;
    do
        r = poll(&p, 1, ms);
    while (r < 0 && errno == EINTR);
    if (r != 1)
        fail_msg("no notification within %d ms while waiting for %s", ms, what);
    ssize_t n = recv(s->fd, out, outsz - 1, 0);
    assert_true(n >= 0);
    out[n] = '\0';
}

static int sink_empty(struct sink *s)
{
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

static void off_without_address(void **state)
{
    struct tg_sd_notify n;
    assert_int_equal(tg_sd_notify_init_addr(&n, NULL), 0);
    assert_false(tg_sd_notify_enabled(&n));
    assert_int_equal(tg_sd_notify_send(&n, "READY=1"), 1);
    assert_int_equal(tg_sd_notify_ready(&n), 1);
    tg_sd_notify_dispose(&n);
    assert_int_equal(tg_sd_notify_init_addr(&n, ""), 0);
    assert_false(tg_sd_notify_enabled(&n));
    tg_sd_notify_dispose(&n);
    unsetenv("NOTIFY_SOCKET");
    assert_int_equal(tg_sd_notify_init(&n), 0);
    assert_false(tg_sd_notify_enabled(&n));
    tg_sd_notify_dispose(&n);
}

static void refuses_unusable_addresses(void **state)
{
    struct tg_sd_notify n;
    char longpath[200];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[0] = '/';
    longpath[sizeof(longpath) - 1] = '\0';
    assert_int_equal(tg_sd_notify_init_addr(&n, "relative/path"), -EAFNOSUPPORT);
    assert_false(tg_sd_notify_enabled(&n));
    assert_int_equal(tg_sd_notify_init_addr(&n, "vsock:2:1234"), -EAFNOSUPPORT);
    assert_int_equal(tg_sd_notify_init_addr(&n, longpath), -ENAMETOOLONG);
    assert_false(tg_sd_notify_enabled(&n));
    longpath[108] = '\0'; /* 108 bytes: an abstract name may fill sun_path, a path may not (its NUL) */
    assert_int_equal(tg_sd_notify_init_addr(&n, longpath), -ENAMETOOLONG);
    longpath[0] = '@';
    assert_int_equal(tg_sd_notify_init_addr(&n, longpath), 0);
    assert_true(tg_sd_notify_enabled(&n));
    tg_sd_notify_dispose(&n);
    assert_int_equal(tg_sd_notify_init_addr(&n, "@"), -EINVAL);
    assert_int_equal(tg_sd_notify_send(&n, "READY=1"), 1);
}

static void path_socket_gets_ready_with_pid(void **state)
{
    struct sink s;
    sink_path(&s);
    struct tg_sd_notify n;
    assert_int_equal(tg_sd_notify_init_addr(&n, s.name), 0);
    assert_true(tg_sd_notify_enabled(&n));
    assert_int_equal(tg_sd_notify_ready(&n), 0);
    char got[256], want[64];
    sink_recv(&s, got, sizeof(got), 2000, "READY=1");
    snprintf(want, sizeof(want), "READY=1\nMAINPID=%ld", (long)getpid());
    assert_string_equal(got, want);
    tg_sd_notify_dispose(&n);
    assert_false(tg_sd_notify_enabled(&n));
    sink_close(&s);
}

static void abstract_socket_gets_each_state(void **state)
{
    struct sink s;
    sink_abstract(&s);
    struct tg_sd_notify n;
    assert_int_equal(tg_sd_notify_init_addr(&n, s.name), 0);
    char got[256];

    assert_int_equal(tg_sd_notify_reloading(&n), 0);
    sink_recv(&s, got, sizeof(got), 2000, "RELOADING=1");
    const char pre[] = "RELOADING=1\nMONOTONIC_USEC=";
    assert_memory_equal(got, pre, sizeof(pre) - 1);
    char *end;
    unsigned long long us = strtoull(got + sizeof(pre) - 1, &end, 10);
    assert_int_equal(*end, '\0');
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    unsigned long long now = (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
    assert_true(us > 0 && us <= now && now - us < 10000000ULL); /* CLOCK_MONOTONIC, microseconds */

    assert_int_equal(tg_sd_notify_reloaded(&n, 1), 0);
    sink_recv(&s, got, sizeof(got), 2000, "READY=1 after a reload");
    assert_string_equal(got, "READY=1\nSTATUS=");
    assert_int_equal(tg_sd_notify_reloaded(&n, 0), 0);
    sink_recv(&s, got, sizeof(got), 2000, "READY=1 after a refused reload");
    assert_string_equal(got, "READY=1\nSTATUS=reload failed, previous configuration kept (see the log)");
    assert_int_equal(tg_sd_notify_stopping(&n), 0);
    sink_recv(&s, got, sizeof(got), 2000, "STOPPING=1");
    assert_string_equal(got, "STOPPING=1");
    assert_true(sink_empty(&s));
    tg_sd_notify_dispose(&n);
    sink_close(&s);
}

static void init_takes_the_variable_out_of_the_environment(void **state)
{
    struct sink s;
    sink_abstract(&s);
    assert_int_equal(setenv("NOTIFY_SOCKET", s.name, 1), 0);
    struct tg_sd_notify n;
    assert_int_equal(tg_sd_notify_init(&n), 0);
    assert_null(getenv("NOTIFY_SOCKET")); /* children (stdio upstreams) must not inherit it */
    assert_true(tg_sd_notify_enabled(&n));
    assert_int_equal(tg_sd_notify_stopping(&n), 0);
    char got[64];
    sink_recv(&s, got, sizeof(got), 2000, "STOPPING=1");
    assert_string_equal(got, "STOPPING=1");
    tg_sd_notify_dispose(&n);
    /* An unusable value is taken out too, and leaves notifications off. */
    assert_int_equal(setenv("NOTIFY_SOCKET", "vsock:2:99", 1), 0);
    assert_int_equal(tg_sd_notify_init(&n), -EAFNOSUPPORT);
    assert_null(getenv("NOTIFY_SOCKET"));
    assert_false(tg_sd_notify_enabled(&n));
    sink_close(&s);
}

/* Nobody listens: each send fails, none blocks or raises a signal, and only the first is logged. */
static void missing_listener_is_ignored(void **state)
{
    struct tg_sd_notify n;
    assert_int_equal(tg_sd_notify_init_addr(&n, "/nonexistent-tollgate-dir/notify"), 0);
    assert_true(tg_sd_notify_enabled(&n));
    assert_int_equal(tg_sd_notify_ready(&n), -ENOENT);
    assert_int_equal(n._failed, 1);
    assert_int_equal(tg_sd_notify_stopping(&n), -ENOENT);
    tg_sd_notify_dispose(&n);
    struct sink s;
    sink_abstract(&s);
    char name[108];
    snprintf(name, sizeof(name), "%s", s.name);
    sink_close(&s); /* the name is free again: nobody behind it */
    assert_int_equal(tg_sd_notify_init_addr(&n, name), 0);
    assert_int_equal(tg_sd_notify_ready(&n), -ECONNREFUSED);
    tg_sd_notify_dispose(&n);
}

/* A manager that does not read: the receive queue fills, and a send then fails at once with
 * EAGAIN instead of blocking the loop (a blocking socket would hang here until the timeout). */
static void full_queue_does_not_block(void **state)
{
    struct sink s;
    sink_abstract(&s);
    struct tg_sd_notify n;
    assert_int_equal(tg_sd_notify_init_addr(&n, s.name), 0);
    int sent = 0, again = 0;
    for (int i = 0; i < 5000 && again == 0; i++) {
        int r = tg_sd_notify_send(&n, "STATUS=filling the queue of a manager that does not read");
        if (r == 0)
            sent++;
        else if (r == -EAGAIN)
            again++;
        else
            fail_msg("send %d: %d (%s)", i, r, strerror(-r));
    }
    assert_true(sent > 0);
    assert_int_equal(again, 1);
    assert_int_equal(n._failed, 1);
    /* Once the manager reads, notifications get through again. */
    char got[128];
    while (!sink_empty(&s))
        sink_recv(&s, got, sizeof(got), 0, "the queued datagrams");
    assert_int_equal(tg_sd_notify_stopping(&n), 0);
    sink_recv(&s, got, sizeof(got), 2000, "STOPPING=1");
    assert_string_equal(got, "STOPPING=1");
    tg_sd_notify_dispose(&n);
    sink_close(&s);
}

/* ---- the real binary ---- */

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* The gateway a case started, ended by the teardown when the case failed midway. */
static pid_t child = -1;
static char child_dir[64];

static int end_child(void **state)
{
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        child = -1;
    }
    if (child_dir[0] != '\0') {
        char cmd[96];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", child_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", child_dir);
        child_dir[0] = '\0';
    }
    return 0;
}

static pid_t start_tollgate(const char *conf, const char *notify, const char *log)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setenv("NOTIFY_SOCKET", notify, 1);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(TG_TOLLGATE_BIN, TG_TOLLGATE_BIN, "-c", conf, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static const char good_conf[] = "log = { level = \"debug\"; };\n"
                                "listen = ( { address = \"127.0.0.1\"; port = 0; } );\n"
                                "grants = ( { name = \"local\"; anonymous = true; } );\n"
                                "upstreams = ( { name = \"u\"; url = \"http://127.0.0.1:9/mcp\"; } );\n";

static void binary_notifies_over_its_life(void **state)
{
    char dir[] = "/tmp/tg-notify-bin-XXXXXX", conf[96], log[96], got[256], want[64];
    assert_non_null(mkdtemp(dir));
    snprintf(child_dir, sizeof(child_dir), "%s", dir);
    snprintf(conf, sizeof(conf), "%s/t.conf", dir);
    snprintf(log, sizeof(log), "%s/t.log", dir);
    write_file(conf, good_conf);
    struct sink s;
    sink_abstract(&s);
    pid_t pid = child = start_tollgate(conf, s.name, log);
    /* ASan start-up on a loaded machine: be generous, the event itself ends the wait. */
    sink_recv(&s, got, sizeof(got), 30000, "READY=1 after start");
    snprintf(want, sizeof(want), "READY=1\nMAINPID=%ld", (long)pid);
    assert_string_equal(got, want);

    assert_int_equal(kill(pid, SIGHUP), 0);
    sink_recv(&s, got, sizeof(got), 30000, "RELOADING=1 on SIGHUP");
    assert_memory_equal(got, "RELOADING=1\nMONOTONIC_USEC=", 27);
    sink_recv(&s, got, sizeof(got), 30000, "READY=1 after the reload");
    assert_string_equal(got, "READY=1\nSTATUS=");

    write_file(conf, "listen = ( { address = \"127.0.0.1\"; port = 0; } );\nthis is not libconfig\n");
    assert_int_equal(kill(pid, SIGHUP), 0);
    sink_recv(&s, got, sizeof(got), 30000, "RELOADING=1 on the second SIGHUP");
    assert_memory_equal(got, "RELOADING=1\n", 12);
    sink_recv(&s, got, sizeof(got), 30000, "READY=1 after the refused reload");
    assert_string_equal(got, "READY=1\nSTATUS=reload failed, previous configuration kept (see the log)");

    assert_int_equal(kill(pid, SIGTERM), 0);
    sink_recv(&s, got, sizeof(got), 30000, "STOPPING=1 on SIGTERM");
    assert_string_equal(got, "STOPPING=1");
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    child = -1;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        char cmd[160];
        snprintf(cmd, sizeof(cmd), "cat %s >&2", log);
        if (system(cmd) != 0)
            fprintf(stderr, "(no log)\n");
        fail_msg("tollgate ended with status 0x%x", st);
    }
    assert_true(sink_empty(&s)); /* nothing after STOPPING=1 */
    sink_close(&s);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* a send raising SIGPIPE would end the test: MSG_NOSIGNAL must prevent it */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(off_without_address),
        cmocka_unit_test(refuses_unusable_addresses),
        cmocka_unit_test(path_socket_gets_ready_with_pid),
        cmocka_unit_test(abstract_socket_gets_each_state),
        cmocka_unit_test(init_takes_the_variable_out_of_the_environment),
        cmocka_unit_test(missing_listener_is_ignored),
        cmocka_unit_test(full_queue_does_not_block),
        cmocka_unit_test_teardown(binary_notifies_over_its_life, end_child),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
