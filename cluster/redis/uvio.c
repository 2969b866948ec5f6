/* hiredis's event hooks on the loop, written for this client (in place of hiredis's libuv
 * adapter). Three things differ:
 *
 *  - The poll handle is told only what changes. hiredis calls addWrite for every command it
 *    buffers and addRead after every read; the adapter answered each with uv_poll_start, which
 *    libuv turns into an epoll_ctl(DEL) at once and an epoll_ctl(ADD) at the next poll: about one
 *    wasted system call per decision. Here a hook that asks for the events already asked for does
 *    nothing.
 *  - On the command connection, once it is up, commands are not written when hiredis buffers them
 *    but by tg_redis_flush(): once per loop iteration, every request the iteration made in one
 *    write (redis.c runs it from a prepare handle of its own, and the server also runs it after
 *    its I/O callbacks). Writability is polled for only when a write did not take everything.
 *  - A socket error on the poll handle (a refused connect shows as POLLERR, for which libuv stops
 *    the handle) reaches hiredis: the adapter dropped it, and only a deadline found the failure.
 *
 * Owner: the hiredis context (ev.data); freed after hiredis's cleanup hook, once libuv has closed
 * the handle. */
#include <stdlib.h>

#include <hiredis/async.h>
#include <uv.h>

#include "cluster/redis/internal.h"

struct io {
    uv_poll_t poll;
    redisAsyncContext *ac; /* NULL once hiredis let go of it (cleanup) */
    struct conn *c;
    int want;   /* UV_READABLE | UV_WRITABLE, what hiredis (or a partial flush) asked for */
    int polled; /* what the poll handle watches now */
};

static void on_poll(uv_poll_t *h, int status, int events);

static void update(struct io *io)
{
    if (io->ac == NULL || io->want == io->polled)
        return;
    io->polled = io->want;
    if (io->want)
        uv_poll_start(&io->poll, io->want, on_poll);
    else
        uv_poll_stop(&io->poll);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    struct io *io = h->data;
    if (status < 0) {
        /* libuv stopped the handle (POLLERR): let hiredis find the error with a read, or with
         * its connect check while it waits for the connect (it asked for writability then). */
        io->polled = 0;
        events = io->want & UV_WRITABLE ? UV_WRITABLE : UV_READABLE;
    }
    if (io->ac != NULL && (events & UV_READABLE))
        redisAsyncHandleRead(io->ac);
    if (io->ac != NULL && (events & UV_WRITABLE))
        redisAsyncHandleWrite(io->ac);
    if (io->ac != NULL)
        update(io);
}

static void add_read(void *p)
{
    struct io *io = p;
    io->want |= UV_READABLE;
    update(io);
}

static void del_read(void *p)
{
    struct io *io = p;
    io->want &= ~UV_READABLE;
    update(io);
}

static void add_write(void *p)
{
    struct io *io = p;
    const struct conn *c = io->c;
    if (!c->is_sub && c->state == CONN_UP && c->ac == io->ac)
        return; /* tg_redis_flush writes it, in this loop iteration */
    io->want |= UV_WRITABLE;
    update(io);
}

static void del_write(void *p)
{
    struct io *io = p;
    io->want &= ~UV_WRITABLE;
    update(io);
}

static void on_closed(uv_handle_t *h) { free(h->data); }

static void cleanup(void *p)
{
    struct io *io = p;
    io->ac = NULL;
    uv_close((uv_handle_t *)&io->poll, on_closed);
}

int tg__redis_attach(redisAsyncContext *ac, uv_loop_t *loop, struct conn *c)
{
    if (ac->ev.data != NULL)
        return -1;
    struct io *io = calloc(1, sizeof(*io));
    if (io == NULL)
        abort();
    if (uv_poll_init_socket(loop, &io->poll, ac->c.fd) != 0) {
        free(io);
        return -1;
    }
    io->poll.data = io;
    io->ac = ac;
    io->c = c;
    ac->ev.data = io;
    ac->ev.addRead = add_read;
    ac->ev.delRead = del_read;
    ac->ev.addWrite = add_write;
    ac->ev.delWrite = del_write;
    ac->ev.cleanup = cleanup;
    return 0;
}

void tg__redis_want_write(redisAsyncContext *ac)
{
    struct io *io = ac->ev.data;
    if (io == NULL)
        return;
    io->want |= UV_WRITABLE;
    update(io);
}
