/* What transports/http1/conn.c (the connection: reading, parsing, phase, deferred work) and
 * transports/http1/out.c (the write path: answers, streams, cork, output accounting) share.
 * Not for use outside transports/http1*.c. */
#ifndef TG_HTTP1_INT_H
#define TG_HTTP1_INT_H

#include "transports/http1/http1.h"

/* Bits of tg_conn.pend: work put off to tg_http_run_pending. */
#define TG_PEND_CLOSE 1u    /* tell its users, then uv_close */
#define TG_PEND_SHUTDOWN 2u /* tell its users, then shut down after the queued writes */
#define TG_PEND_INPUT 4u    /* parse pipelined input now that the previous answer is done */
#define TG_PEND_TLS 8u      /* encrypt more of the plaintext waiting in tls_plain */
#define TG_PEND_HANDSHAKE 16u /* feed the TLS handshake input kept in c->in (tls_io.c) */

/* timer.c */
/* Every phase transition passes here: it checks the edge and sets the one timer's deadline. */
void tg__http_set_phase(struct tg_conn *c, enum tg_conn_phase s);
/* The deadline of the phase c is in: ms from now. */
void tg__http_arm(struct tg_conn *c, uint64_t ms);
/* The env's deadline lists and timer (tg_http_env_init). */
void tg__http_timer_init(struct tg_http_env *env);

/* conn.c */
/* TLS: encrypt and write more of the plaintext queued in c->tls_plain (a slice per round, while
 * the connection is under its mark). */
void tg__http_tls_pump(struct tg_conn *c);
/* log.access: the line of the exchange that ends now, with this status (once per exchange). */
void tg__http_access_line_write(struct tg_conn *c, int status);
static inline void tg__http_access_line(struct tg_conn *c, int status)
{
    if (c->env->access_log) /* checked here: most gateways log no access lines */
        tg__http_access_line_write(c, status);
}
/* Queue work (TG_PEND_*) for the end of the loop iteration. */
void tg__http_pend(struct tg_conn *c, unsigned what);
/* The current request is answered: close, or get ready for the next one. */
void tg__http_finish_request(struct tg_conn *c);

/* What a connection may hold of input not parsed yet. */
size_t tg__http_input_ceiling(struct tg_conn *c);

/* tls_io.c */
/* n bytes of c's TLS input: fed now, or kept for a later round when this iteration's handshake
 * slice is spent (limits.tls_handshake_slice_ms). 0: c is established and c->in holds
 * plaintext to parse; 1: nothing to parse. */
int tg__http_tls_input(struct tg_conn *c, const char *p, size_t n);
/* TG_PEND_HANDSHAKE: feed the kept bytes, or keep waiting. Returns as tg__http_tls_input. */
int tg__http_tls_resume(struct tg_conn *c);

/* out.c */
/* Takes the storage of b (left empty): plaintext, corked on streams, encrypted on TLS. */
void tg__http_send_owned(struct tg_conn *c, struct tg_buf *b);
/* Takes the storage of wire: bytes that go to the socket as they are. */
void tg__http_send_wire(struct tg_conn *c, struct tg_buf *wire);
/* Write what the cork gathered; runs no callback. */
void tg__http_flush_cork(struct tg_conn *c);
/* Bytes left the output accounting (written, or dropped unwritten). */
void tg__http_out_sub(struct tg_conn *c, size_t n);
/* 1 when the connection's output, and the process's, are below their low-water marks. */
int tg__http_out_drained(const struct tg_conn *c);

/* TLS: the plaintext bytes waiting for encryption (out.c). */
static inline size_t tg__http_tls_waiting(const struct tg_conn *c)
{
    return c->tls_plain != NULL ? c->tls_plain->buf.len - c->tls_plain->off : 0;
}
/* Drop the waiting plaintext and its block. */
void tg__http_tls_backlog_free(struct tg_conn *c);

/* Bytes sent, for the access line of the exchange under way (none after an upgrade). */
static inline void tg__http_log_sent(struct tg_conn *c, size_t n)
{
    if (c->req != NULL)
        tg_http_scratch_of(c)->log_bytes += n;
}

/* The status sent for the exchange under way, else none. */
static inline int tg__http_status_sent(const struct tg_conn *c, int none)
{
    const struct tg_http_scratch *x = tg_http_scratch_of(c);
    return x != NULL && x->log_status != 0 ? x->log_status : none;
}

/* The request under way is forgotten (its buffers kept). */
void tg__http_req_reset(struct tg_http_req *r);
/* llhttp callbacks of every connection's parser (conn.c). */
extern const llhttp_settings_t tg__http_parser_settings;
/* A request begins: the connection takes a scratch from the pool (scratch.c). */
void tg__http_scratch_take(struct tg_conn *c);
/* The request is over: its scratch goes back, with storage of a usual size. */
void tg__http_scratch_give(struct tg_conn *c);

#endif
