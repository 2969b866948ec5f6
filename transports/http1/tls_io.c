/* A client's TLS input: the handshake, then records turned to plaintext in c->in.
 *
 * A handshake costs the loop a few milliseconds of public-key work with mbedtls (the ECDHE key
 * and the ECDSA signature for the ServerKeyExchange, the shared secret for the
 * ClientKeyExchange: 2.7 ms in all for P-256 here), and the loop does nothing else meanwhile.
 * Fifty clients connecting at once held every established connection for 130 ms, a thousand
 * would hold it for seconds. So handshake work is sliced: once limits.tls_handshake_slice_ms
 * of it is spent in a loop iteration, the input of further handshakes is kept (in c->in, which
 * holds no plaintext before the handshake ends; 64 KiB at most) and fed in the next
 * iterations, first come first served, while the established connections' requests go on in
 * between. A handshake under way always gets at least one step per iteration. */
#include "transports/http1/internal.h"

#include "core/base/log.h"
#include "core/base/metrics.h"
#include "core/wire/tls.h"

/* Has this loop iteration's handshake time run out? */
static int slice_spent(struct tg_http_env *env)
{
    if (env->handshake_iter != env->metrics->loop_iterations) {
        env->handshake_iter = env->metrics->loop_iterations;
        env->handshake_ns = 0;
    }
    int ms = env->limits->tls_handshake_slice_ms;
    return ms > 0 && env->handshake_ns >= (uint64_t)ms * 1000000u;
}

/* What a handshake put off may keep: a client sends a few KiB before the server's next flight (a
 * certificate chain, then the key exchange and Finished), never more than a few records. */
#define HANDSHAKE_KEEP_MAX 65536

/* Keep the handshake bytes for tg__http_tls_resume(), in a later round. Returns 1 (nothing to
 * parse). */
static int put_off(struct tg_conn *c, const char *p, size_t n)
{
    if (tg_buf_try_append(&c->in, p, n, HANDSHAKE_KEEP_MAX) != 0) {
        c->env->metrics->limit_body_bytes++;
        tg_conn_close(c, "input limit");
        return 1;
    }
    if (!(c->pend & TG_PEND_HANDSHAKE)) {
        c->env->handshakes_waiting++;
        c->env->metrics->tls_handshakes_put_off++;
        tg__http_pend(c, TG_PEND_HANDSHAKE);
    }
    return 1;
}

/* Feed n bytes of c's TLS input now. 0: c is established and the plaintext is in c->in for the
 * caller to parse; 1: nothing to parse (the handshake goes on, or c is closing). */
static int feed(struct tg_conn *c, const char *p, size_t n)
{
    struct tg_http_env *env = c->env;
    int handshake = c->phase == TG_CONN_HANDSHAKE;
    uint64_t t0 = handshake ? uv_hrtime() : 0;
    struct tg_buf out;
    tg_buf_init(&out);
    int r = tg_tls_feed(c->tls, p, n, &c->in, tg__http_input_ceiling(c), &out);
    if (handshake)
        env->handshake_ns += uv_hrtime() - t0;
    if (out.len)
        tg__http_send_wire(c, &out);
    tg_buf_dispose(&out);
    if (r == TG_ECLOSED) {
        tg_conn_close(c, "TLS close_notify");
        return 1;
    }
    if (r != 0) {
        if (handshake) {
            env->metrics->tls_handshake_failures++;
            char esc[128];
            tg_log(TG_LOG_INFO, "TLS handshake failed", "conn=%llu peer=%s error=%s", (unsigned long long)c->id, tg_conn_peer(c),
                   tg_log_esc(esc, sizeof(esc), tg_slice_cstr(tg_tls_last_error(c->tls))));
        }
        tg_conn_close(c, r == TG_ELIMIT ? "input limit" : "TLS error");
        return 1;
    }
    if (handshake) {
        if (!tg_tls_established(c->tls))
            return 1;
        tg__http_set_phase(c, TG_CONN_IDLE);
        char dn[512], cn[256];
        if (tg_tls_peer_subject(c->tls, dn, sizeof(dn), cn, sizeof(cn))) {
            char esc[600];
            tg_log(TG_LOG_DEBUG, "TLS client certificate", "conn=%llu peer=%s subject=%s", (unsigned long long)c->id,
                   tg_conn_peer(c), tg_log_esc(esc, sizeof(esc), tg_slice_cstr(dn)));
        }
        /* The first request must still arrive within the header timeout. */
        tg__http_arm(c, (uint64_t)env->limits->header_timeout_ms);
    }
    return 0;
}

int tg__http_tls_input(struct tg_conn *c, const char *p, size_t n)
{
    /* behind the handshakes already waiting, or past this iteration's slice: later */
    if (c->phase == TG_CONN_HANDSHAKE &&
        ((c->pend & TG_PEND_HANDSHAKE) || c->env->handshakes_waiting > 0 || slice_spent(c->env)))
        return put_off(c, p, n);
    return feed(c, p, n);
}

int tg__http_tls_resume(struct tg_conn *c)
{
    if (slice_spent(c->env)) { /* this iteration's slice is gone: the next round */
        c->env->handshakes_waiting++;
        tg__http_pend(c, TG_PEND_HANDSHAKE);
        return 1;
    }
    struct tg_buf held = c->in; /* the kept handshake bytes: c->in is for plaintext again */
    tg_buf_init(&c->in);
    int r = feed(c, held.base, held.len);
    tg_buf_dispose(&held);
    return r;
}
