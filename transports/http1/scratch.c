/* The request scratches of HTTP/1.1 connections (struct tg_http_scratch in http1.h): what a
 * connection holds only while a request is under way, pooled in the env. */
#include <stdlib.h>

#include "transports/http1/http1.h"
#include "transports/http1/internal.h"

/* A request begins: the connection takes a scratch (a fresh parser, headers, who, head and body
 * storage). Nothing if it has one already (the parser is part way through a request). */
void tg__http_scratch_take(struct tg_conn *c)
{
    if (c->req != NULL)
        return;
    struct tg_http_env *env = c->env;
    struct tg_http_scratch *x = env->xpool;
    if (x != NULL) {
        env->xpool = x->next;
        env->nxpool--;
    } else {
        x = tg_xcalloc(1, sizeof(*x));
        x->req.headers = x->headers;
    }
    c->req = &x->req;
    llhttp_init(&x->parser, HTTP_REQUEST, &tg__http_parser_settings);
    x->parser.data = c;
    x->log_grant[0] = x->log_upstream[0] = x->log_session[0] = x->log_subject[0] = '\0';
    x->log_start_ms = x->log_bytes = 0; /* no line until a request begins (request_begin) */
    x->log_status = 0;
}

static void scratch_free(struct tg_http_scratch *x)
{
    tg_buf_dispose(&x->req.head);
    tg_buf_dispose(&x->req.body);
    free(x);
}

/* The request is over: its scratch goes back to the pool, with storage of a usual size. */
void tg__http_scratch_give(struct tg_conn *c)
{
    struct tg_http_scratch *x = tg_http_scratch_of(c);
    if (x == NULL)
        return;
    struct tg_http_env *env = c->env;
    c->req = NULL;
    tg__http_req_reset(&x->req);
    if (x->req.head.cap > 4096)
        tg_buf_dispose(&x->req.head);
    if (x->req.body.cap > 16384)
        tg_buf_dispose(&x->req.body);
    if (env->nxpool >= TG_HTTP_XPOOL) {
        scratch_free(x);
        return;
    }
    x->next = env->xpool;
    env->xpool = x;
    env->nxpool++;
}

void tg_http_env_dispose(struct tg_http_env *env)
{
    while (env->xpool != NULL) {
        struct tg_http_scratch *x = env->xpool;
        env->xpool = x->next;
        scratch_free(x);
    }
    env->nxpool = 0;
}
