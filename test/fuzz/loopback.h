/* The client side of the network fuzz targets (net.h for fuzz_http1 and fuzz_ws, and fuzz_e2e):
 * one blocking TCP connection to 127.0.0.1, made so that a run of millions of them does not fail
 * for reasons of the harness rather than of the gateway.
 *
 * Two such reasons showed in a 10-minute fuzz_http1 run (connect() failed once after 94K runs):
 * libFuzzer's -timeout alarm (SIGALRM, installed without SA_RESTART) can interrupt connect(),
 * which then fails with EINTR while the kernel goes on connecting, so the socket is awaited
 * with poll() and its SO_ERROR read; and the ephemeral ports can run short for a moment (the
 * server side keeps TIME_WAIT for connections it closed first), EADDRNOTAVAIL, which is tried
 * again after a millisecond. Any other failure is returned to the caller, who says which. */
#ifndef TG_TEST_FUZZ_LOOPBACK_H
#define TG_TEST_FUZZ_LOOPBACK_H

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

/* A connected socket in *fd (no Nagle, a reset on close) and 0, or an errno value. */
static inline int floop_connect(int *fd, int port)
{
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", port, &a);
    int e = EADDRNOTAVAIL;
    for (int attempt = 0; attempt < 1000; attempt++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0)
            return errno;
        /* A reset at the end: no TIME_WAIT on the client's side. */
        struct linger lg = {1, 0};
        setsockopt(s, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
        int one = 1; /* no Nagle: a small chunk must not wait for the server's delayed ACK */
        setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(s, (const struct sockaddr *)&a, sizeof(a)) == 0) {
            *fd = s;
            return 0;
        }
        e = errno;
        if (e == EINTR) {
            struct pollfd p = {.fd = s, .events = POLLOUT};
            int r;
            do
                r = poll(&p, 1, 10000);
            while (r < 0 && errno == EINTR);
            socklen_t len = sizeof(e);
            if (r == 0)
                e = ETIMEDOUT;
            else if (r < 0 || getsockopt(s, SOL_SOCKET, SO_ERROR, &e, &len) != 0)
                e = errno;
            if (e == 0) {
                *fd = s;
                return 0;
            }
        }
        close(s);
        if (e != EADDRNOTAVAIL && e != EAGAIN)
            return e;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    return e;
}

#endif
