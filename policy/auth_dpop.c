/* DPoP on top of a credential tg_auth_grant() admitted: the issuer's jwt[].dpop, the scheme, the
 * token's binding and the proof (policy/dpop.c). The contract is in policy/auth.h. */
#include "policy/auth.h"

#include <string.h>

#include "policy/dpop.h"

static unsigned proof_algs(const struct tg_jwt_conf *j)
{
    return (j->algs != 0 ? j->algs : TG_JWT_ALGS_DEFAULT) & ~TG_JWT_ALG_HS256;
}

enum tg_dpop_verdict tg_auth_dpop(const struct tg_conf *c, const struct tg_principal *who,
                                  struct tg_slice authorization, const struct tg_dpop_request *rq,
                                  struct tg_dpop_replay *replay, unsigned *algs, const char **why)
{
    *why = NULL;
    *algs = 0;
    const struct tg_jwt_conf *j = who->jwt > 0 && (size_t)who->jwt <= c->njwt ? &c->jwt[who->jwt - 1] : NULL;
    if (j != NULL)
        *algs = proof_algs(j);
    else
        for (size_t i = 0; i < c->njwt; i++)
            if (c->jwt[i].dpop != TG_DPOP_OFF)
                *algs |= proof_algs(&c->jwt[i]);
    if (j == NULL)
        return TG_DPOP_PASS; /* a static token (never by the DPoP scheme), a certificate, anonymous */
    if (!who->dpop) {
        if (who->jkt[0] != '\0') {
            *why = j->dpop == TG_DPOP_OFF ? "the token is DPoP-bound (cnf.jkt) and this issuer does not accept DPoP"
                                          : "the token is DPoP-bound (cnf.jkt): send it with the DPoP scheme and a proof";
            return TG_DPOP_BAD_TOKEN;
        }
        if (j->dpop == TG_DPOP_REQUIRED) {
            *why = "this issuer's tokens must be DPoP-bound: send a bound token with the DPoP scheme and a proof";
            return TG_DPOP_BAD_TOKEN;
        }
        return TG_DPOP_PASS;
    }
    if (j->dpop == TG_DPOP_OFF) {
        *why = "this issuer does not accept DPoP";
        return TG_DPOP_BAD_TOKEN;
    }
    if (who->jkt[0] == '\0') {
        *why = "the token is not DPoP-bound (no cnf.jkt)";
        return TG_DPOP_BAD_TOKEN;
    }
    if (rq->nproofs != 1 || rq->proof.ptr == NULL) {
        *why = rq->nproofs == 0 ? "a DPoP proof is required" : "more than one DPoP header";
        return TG_DPOP_BAD_PROOF;
    }
    struct tg_slice token;
    int dpop = 0;
    if (tg_auth_token(authorization, &token, &dpop) != 0 || !dpop) {
        *why = "malformed Authorization header";
        return TG_DPOP_BAD_TOKEN;
    }
    struct tg_buf htu;
    tg_buf_init(&htu);
    enum tg_dpop_verdict v = TG_DPOP_BAD_PROOF;
    if (tg_dpop_htu_normalise(rq->url, &htu) != 0) {
        *why = "the request URL cannot be checked against the proof (public_url or Host)";
    } else {
        struct tg_dpop_check chk = {.proof = rq->proof,
                                    .method = rq->method,
                                    .htu = tg_slice_of(htu.base, htu.len),
                                    .token = token,
                                    .jkt = who->jkt,
                                    .algs = *algs,
                                    .window_s = j->dpop_window_s + (j->skew_s > 0 ? j->skew_s : 0),
                                    .now_s = rq->now_s};
        if (tg_dpop_verify(&chk, replay, why) == 0)
            v = TG_DPOP_PASS;
    }
    tg_buf_dispose(&htu);
    return v;
}
