/* Readiness for a service manager: systemd's sd_notify protocol, written here (it is one
 * datagram) instead of linking libsystemd.
 *
 * The manager passes an AF_UNIX socket in $NOTIFY_SOCKET: a path, or an abstract name written
 * with a leading '@'. Each notification is one datagram of newline-separated assignments
 * ("READY=1\nMAINPID=42"). Without the variable every call here does nothing.
 *
 * Sends never block the loop (a full queue drops the datagram) and their errors are ignored:
 * readiness is advice to the supervisor, never a reason to stop serving. The first failure is
 * logged at debug level, later ones are not logged. Loop thread only. */
#ifndef TG_SD_NOTIFY_H
#define TG_SD_NOTIFY_H

#include <sys/socket.h>
#include <sys/un.h>

/* Owner: whoever embeds it (main()); tg_sd_notify_dispose closes the socket. */
struct tg_sd_notify {
    int _fd;                   /* -1: notifications off */
    struct sockaddr_un _addr;
    socklen_t _addrlen;
    int _failed;               /* a send failed once (and was logged) */
};

/* Read $NOTIFY_SOCKET and remove it from the environment, so that child processes (stdio
 * upstreams) do not inherit it, as sd_notify(unset_environment = 1) does. Call before any
 * thread starts. Returns 0 (notifications on, or off because the variable is unset or empty)
 * or a negative errno when the variable names a socket that cannot be used (too long, not an
 * AF_UNIX one); notifications are off then. */
int tg_sd_notify_init(struct tg_sd_notify *n);
/* The same with the address given (NULL or "" = off); the environment is left alone. */
int tg_sd_notify_init_addr(struct tg_sd_notify *n, const char *addr);
int tg_sd_notify_enabled(const struct tg_sd_notify *n);
/* Send state (assignments separated by '\n'). Returns 0, 1 when off, or the negative errno of
 * a send that failed (the datagram is lost; callers ignore it). */
int tg_sd_notify_send(struct tg_sd_notify *n, const char *state);

/* The notifications of tollgate's life: after the listeners are up ("READY=1", "MAINPID=");
 * when a reload starts ("RELOADING=1" with "MONOTONIC_USEC=", which systemd >= 253 expects);
 * when it ended (ok 1: "READY=1"; ok 0, the old configuration kept: "READY=1" with a STATUS=
 * saying so); when a drain begins ("STOPPING=1"). */
int tg_sd_notify_ready(struct tg_sd_notify *n);
int tg_sd_notify_reloading(struct tg_sd_notify *n);
int tg_sd_notify_reloaded(struct tg_sd_notify *n, int ok);
int tg_sd_notify_stopping(struct tg_sd_notify *n);

void tg_sd_notify_dispose(struct tg_sd_notify *n);

#endif
