/* sd_notify's socket protocol (see core/app/sd_notify.h). */
#include "core/app/sd_notify.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/base/log.h"

static void set_off(struct tg_sd_notify *n)
{
    memset(n, 0, sizeof(*n));
    n->_fd = -1;
}

int tg_sd_notify_init_addr(struct tg_sd_notify *n, const char *addr)
{
    set_off(n);
    if (addr == NULL || addr[0] == '\0')
        return 0;
    size_t len = strlen(addr);
    /* Only AF_UNIX addresses: an absolute path or '@' + an abstract name. systemd also knows
     * "vsock:" for virtual machines, which a gateway has no use for. */
    if (addr[0] != '/' && addr[0] != '@')
        return -EAFNOSUPPORT;
    if (len > sizeof(n->_addr.sun_path) - (addr[0] == '/')) /* a path needs its NUL */
        return -ENAMETOOLONG;
    if (addr[0] == '@' && len < 2)
        return -EINVAL;
    n->_addr.sun_family = AF_UNIX;
    memcpy(n->_addr.sun_path, addr, len);
    if (addr[0] == '@')
        n->_addr.sun_path[0] = '\0'; /* abstract: the name is the bytes after the NUL, no terminator */
    n->_addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (addr[0] == '/'));
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        int e = -errno;
        set_off(n);
        return e;
    }
    n->_fd = fd;
    return 0;
}

int tg_sd_notify_init(struct tg_sd_notify *n)
{
    const char *v = getenv("NOTIFY_SOCKET");
    char addr[sizeof(n->_addr.sun_path) + 1];
    int rc = 0;
    if (v != NULL && strlen(v) >= sizeof(addr)) {
        set_off(n);
        rc = -ENAMETOOLONG;
    } else {
        snprintf(addr, sizeof(addr), "%s", v != NULL ? v : "");
        rc = tg_sd_notify_init_addr(n, addr);
    }
    unsetenv("NOTIFY_SOCKET");
    return rc;
}

int tg_sd_notify_enabled(const struct tg_sd_notify *n)
{
    return n->_fd >= 0;
}

int tg_sd_notify_send(struct tg_sd_notify *n, const char *state)
{
    if (n->_fd < 0)
        return 1;
    ssize_t w = sendto(n->_fd, state, strlen(state), MSG_NOSIGNAL | MSG_DONTWAIT, (const struct sockaddr *)&n->_addr,
                       n->_addrlen);
    if (w >= 0)
        return 0;
    int e = errno;
    if (!n->_failed) {
        n->_failed = 1;
        char what[64];
        size_t wl = strcspn(state, "=\n");
        snprintf(what, sizeof(what), "%.*s", (int)(wl < 32 ? wl : 32), state);
        tg_log(TG_LOG_DEBUG, "service manager notification not sent (later failures are not logged)",
               "state=%s errno=%d error=\"%s\"", what, e, strerror(e));
    }
    return -e;
}

int tg_sd_notify_ready(struct tg_sd_notify *n)
{
    char s[64];
    snprintf(s, sizeof(s), "READY=1\nMAINPID=%ld", (long)getpid());
    return tg_sd_notify_send(n, s);
}

int tg_sd_notify_reloading(struct tg_sd_notify *n)
{
    /* MONOTONIC_USEC tells systemd (253 and later) which reload this is; older ones ignore it. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char s[80];
    snprintf(s, sizeof(s), "RELOADING=1\nMONOTONIC_USEC=%llu",
             (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL);
    return tg_sd_notify_send(n, s);
}

int tg_sd_notify_reloaded(struct tg_sd_notify *n, int ok)
{
    /* A refused configuration leaves the old one serving: still ready, and systemctl status
     * says why in STATUS (the details are in the log). */
    return tg_sd_notify_send(n, ok ? "READY=1\nSTATUS=" : "READY=1\nSTATUS=reload failed, previous configuration kept "
                                                       "(see the log)");
}

int tg_sd_notify_stopping(struct tg_sd_notify *n)
{
    return tg_sd_notify_send(n, "STOPPING=1");
}

void tg_sd_notify_dispose(struct tg_sd_notify *n)
{
    if (n->_fd >= 0)
        close(n->_fd);
    set_off(n);
}
