/* A handler's answer that comes later (struct tg_http_wait in http1.h): the connection is held
 * as its exchange until the answer comes, and forgotten if the client goes first. */
#include <assert.h>
#include <stddef.h>

#include "transports/http1/http1.h"

/* The connection closes while the answer is still to come: the wait lives on (its owner frees
 * it when the answer comes) and only forgets the connection, which is about to be freed. */
static void on_wait_abort(struct tg_conn *c, void *exchange)
{
    (void)c;
    struct tg_http_wait *w = exchange;
    w->_conn = NULL;
}

void tg_http_wait_start(struct tg_http_wait *w, struct tg_conn *c)
{
    assert(c->exchange == NULL);
    w->_conn = c;
    c->exchange = w;
    c->on_abort = on_wait_abort;
}

struct tg_conn *tg_http_wait_stop(struct tg_http_wait *w)
{
    struct tg_conn *c = w->_conn;
    w->_conn = NULL;
    if (c != NULL) {
        assert(c->exchange == w);
        c->exchange = NULL;
        c->on_abort = NULL;
    }
    return c;
}
