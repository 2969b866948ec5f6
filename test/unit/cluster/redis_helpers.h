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

/* Start (or restart on the same port) and wait until it answers PING: startup only. */
static void th_start(struct th_server *s)
{
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
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly",
                   "no", "--requirepass", s->pass, (char *)NULL);
        else
            execlp("redis-server", "redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly",
                   "no", (char *)NULL);
        _exit(127);
    }
    s->pid = pid;
    for (int i = 0; i < 500; i++) {
        struct timeval tv = {1, 0};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", s->port, tv);
        if (c && !c->err) {
            redisReply *y = redisCommand(c, "PING");
            int ok = y != NULL;
            freeReplyObject(y);
            redisFree(c);
            if (ok)
                return;
        } else if (c) {
            redisFree(c);
        }
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            fprintf(stderr, "redis-server exited (is it installed?)\n");
            abort();
        }
        usleep(10000);
    }
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
