#include "core/app/dpop_gate.h"

#include <llhttp.h>
#include <string.h>

#include "core/app/oauth_meta.h"
#include "core/base/log.h"
#include "core/call/call.h"
#include "core/call/gateway.h"
#include "core/wire/msg.h"
#include "policy/auth.h"
#include "core/conf/conf.h"
#include "policy/dpop.h"
#include "transports/http1/http1.h"
#include "transports/respond.h"

int tg_dpop_gate(struct tg_server *srv, struct tg_conn *c, struct tg_slice path, const struct tg_principal *who,
                 struct tg_slice authz)
{
    const struct tg_conf *conf = srv->conf;
    if (!who->dpop && who->jkt[0] == '\0' &&
        (who->jwt == 0 || (size_t)who->jwt > conf->njwt || conf->jwt[who->jwt - 1].dpop != TG_DPOP_REQUIRED))
        return 0; /* a bearer token that is not bound, where that is allowed: nothing to check */
    struct tg_http_req *req = c->req;
    size_t max = (size_t)srv->conf->limits.dpop_replay_entries;
    if (srv->dpop_replay == NULL && who->dpop)
        srv->dpop_replay = tg_dpop_replay_new(max); /* made by the first proof, kept across reloads */
    else if (srv->dpop_replay != NULL)
        tg_dpop_replay_set_max(srv->dpop_replay, max);
    struct tg_buf url;
    tg_buf_init(&url);
    tg_oauth_meta_base_url(srv, c, &url); /* the URL the client used: public_url, or Host and TLS */
    tg_buf_append(&url, path.ptr, path.len);
    struct tg_dpop_request rq = {.proof = tg_http_req_header(req, "dpop"),
                                 .nproofs = (unsigned)tg_http_req_header_count(req, "dpop"),
                                 .method = tg_slice_cstr(llhttp_method_name((llhttp_method_t)req->method)),
                                 .url = tg_slice_of(url.base, url.len),
                                 .now_s = wall_ms() / 1000};
    unsigned algs = 0;
    const char *why = NULL;
    enum tg_dpop_verdict v = tg_auth_dpop(srv->conf, who, authz, &rq, srv->dpop_replay, &algs, &why);
    tg_buf_dispose(&url);
    if (v == TG_DPOP_PASS)
        return 0;
    srv->metrics.dpop_refused++;
    struct tg_buf hdr;
    tg_buf_init(&hdr);
    tg_buf_appendf(&hdr, "WWW-Authenticate: DPoP error=\"%s\", error_description=\"%s\"",
                   v == TG_DPOP_BAD_PROOF ? "invalid_dpop_proof" : "invalid_token", why ? why : "refused");
    if (algs != 0) {
        tg_buf_appends(&hdr, ", algs=\"");
        tg_dpop_algs_names(algs, &hdr);
        tg_buf_appends(&hdr, "\"");
    }
    tg_buf_appends(&hdr, "\r\n");
    tg_buf_append(&hdr, "", 1);
    tg_log(TG_LOG_INFO, "unauthorized", "conn=%llu peer=%s reason=\"%s\"", (unsigned long long)c->id, tg_conn_peer(c),
           why ? why : "dpop");
    tg_respond_rpc(c, 401, hdr.base, NULL, 0, TG_RPC_INVALID_REQUEST,
                   v == TG_DPOP_BAD_PROOF ? "Unauthorized: a valid DPoP proof is required"
                                          : "Unauthorized: a valid bearer token is required",
                   NULL);
    tg_buf_dispose(&hdr);
    return 1;
}
