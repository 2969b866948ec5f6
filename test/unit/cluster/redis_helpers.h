/* Helpers for the Redis client tests and benchmark: a redis-server of our own on a free loopback
 * port, and running the loop until an event (never a sleep standing for one). */
#ifndef TG_TEST_REDIS_HELPERS_H
#define TG_TEST_REDIS_HELPERS_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include <hiredis/hiredis.h>

struct th_server {
    int port;
    pid_t pid;
    char pass[32];
};

static int th_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t n = sizeof(a);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || getsockname(fd, (struct sockaddr *)&a, &n) < 0)
        abort();
    close(fd);
    return ntohs(a.sin_port);
}

/* 1 once the redis-server at port answers PING and says it is process pid (not another test's
 * server that took the same free port first); 0 while it does not answer; -1 if another answers. */
static int th_answers(int port, pid_t pid)
{
    struct timeval tv = {1, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c == NULL || c->err) {
        if (c)
            redisFree(c);
        return 0;
    }
    int r = 0;
    redisReply *y = redisCommand(c, "INFO server");
    if (y != NULL && y->type == REDIS_REPLY_STRING) {
        const char *p = strstr(y->str, "process_id:");
        r = p != NULL && atol(p + 11) == (long)pid ? 1 : -1;
    } else if (y != NULL) {
        r = -1; /* NOAUTH: a server with a password, so not ours (ours has none here) */
    }
    freeReplyObject(y);
    redisFree(c);
    return r;
}

/* Start (or restart on the same port) and wait until it answers: startup only. A port picked here
 * that another process takes first (two tests in parallel) is given up for another one. */
static void th_start(struct th_server *s)
{
    int picked = s->port == 0;
    for (int attempt = 0; attempt < 20; attempt++) {
        if (s->port == 0)
            s->port = th_free_port();
        char port[16];
        snprintf(port, sizeof(port), "%d", s->port);
        pid_t pid = fork();
        if (pid < 0)
            abort();
        if (pid == 0) {
            int fd = open("/dev/null", 1);
            dup2(fd, 1);
            dup2(fd, 2);
            if (s->pass[0])
                execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                       "--appendonly", "no", "--requirepass", s->pass, (char *)NULL);
            else
                execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
                       "--appendonly", "no", (char *)NULL);
            _exit(127);
        }
        s->pid = pid;
        int gone = 0;
        for (int i = 0; i < 500 && !gone; i++) {
            int a = s->pass[0] ? 0 : th_answers(s->port, pid);
            if (s->pass[0]) { /* with a password INFO needs AUTH: ours answers AUTH with OK */
                struct timeval tv = {1, 0};
                redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
                if (c && !c->err) {
                    redisReply *y = redisCommand(c, "AUTH %s", s->pass);
                    int authed = y != NULL && y->type == REDIS_REPLY_STATUS;
                    freeReplyObject(y);
                    if (authed) {
                        y = redisCommand(c, "INFO server");
                        const char *p = y && y->type == REDIS_REPLY_STRING ? strstr(y->str, "process_id:") : NULL;
                        a = p != NULL && atol(p + 11) == (long)pid ? 1 : -1;
                        freeReplyObject(y);
                    } else {
                        a = y == NULL ? 0 : -1;
                    }
                }
                if (c)
                    redisFree(c);
            }
            if (a == 1)
                return;
            int st;
            if (waitpid(pid, &st, WNOHANG) == pid) {
                gone = 1; /* it could not listen (the port was taken), or is not installed */
                s->pid = 0;
            } else if (a < 0) {
                kill(pid, SIGKILL); /* another server answers on that port */
                waitpid(pid, NULL, 0);
                s->pid = 0;
                gone = 1;
            } else {
                usleep(10000);
            }
        }
        if (!gone || !picked) {
            fprintf(stderr, "redis-server did not start on port %d (is it installed?)\n", s->port);
            abort();
        }
        s->port = 0; /* another free port */
    }
    fprintf(stderr, "redis-server: no free port after 20 tries\n");
    abort();
}

static void th_kill(struct th_server *s)
{
    if (s->pid <= 0)
        return;
    kill(s->pid, SIGCONT);
    kill(s->pid, SIGKILL);
    waitpid(s->pid, NULL, 0);
    s->pid = 0;
}

static void th_on_wake(uv_timer_t *t) { *(int *)t->data = 1; }
static void th_on_close(uv_handle_t *h) { (void)h; }

/* Run the loop until *flag is set or ms pass; returns *flag. */
static int th_run_until(uv_loop_t *loop, volatile int *flag, uint64_t ms)
{
    int expired = 0;
    uv_timer_t t;
    uv_timer_init(loop, &t);
    t.data = &expired;
    uv_timer_start(&t, th_on_wake, ms, 0);
    while (!*flag && !expired)
        uv_run(loop, UV_RUN_ONCE);
    uv_close((uv_handle_t *)&t, th_on_close);
    uv_run(loop, UV_RUN_NOWAIT);
    return *flag;
}

static uint64_t th_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#endif
