#include "core/router_int.h"


static int admin_authorized(struct tg_server *srv, struct tg_conn *c);

static void admin_list_approvals(struct tg_server *srv, struct tg_conn *c);

static void admin_decide(struct tg_server *srv, struct tg_conn *c, struct tg_slice rest);

void tg_router_admin(struct tg_server *srv, struct tg_conn *c);

static int admin_authorized(struct tg_server *srv, struct tg_conn *c)
{
    if (!srv->conf->admin.has_token)
        return 0;
    struct tg_slice tok;
    uint8_t h[32];
    if (tg_auth_bearer(tg_http_req_header(&c->req, "authorization"), &tok) != 0)
        return 0;
    tg_auth_sha256(tok.ptr, tok.len, h);
    return tg_auth_ct_equal(h, srv->conf->admin.token_sha256, 32);
}

static void admin_list_approvals(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"approvals\":[");
    uint64_t now = now_ms(srv);
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        if (l != srv->approvals.next)
            tg_buf_append(&b, ",", 1);
        tg_buf_appendf(&b, "{\"id\":\"%s\",\"grant\":", k->approval_id);
        tg_json_write_string(&b, k->grant, strlen(k->grant));
        tg_buf_appendf(&b, ",\"session\":\"%s\",\"upstream\":", k->sess->id_str);
        tg_json_write_string(&b, up_name(k), strlen(up_name(k)));
        tg_buf_appends(&b, ",\"tool\":");
        tg_json_write_string(&b, k->tool, strlen(k->tool));
        tg_buf_appendf(&b, ",\"args_sha256\":\"%s\"", k->args_sha256);
        if (k->args_json) {
            tg_buf_appends(&b, ",\"args\":");
            tg_buf_appends(&b, k->args_json);
        }
        tg_buf_appendf(&b, ",\"parked_at_ms\":%llu,\"expires_in_ms\":%llu}", (unsigned long long)k->parked_at_wall,
                       (unsigned long long)(k->approval_deadline > now ? k->approval_deadline - now : 0));
    }
    tg_buf_appends(&b, "]}");
    tg_http_respond(c, 200, NULL, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

static void admin_decide(struct tg_server *srv, struct tg_conn *c, struct tg_slice rest)
{
    /* rest = "ID/approve" or "ID/deny" */
    const char *slash = memchr(rest.ptr, '/', rest.len);
    if (slash == NULL) {
        respond_json(c, 404, "{\"error\":\"use POST /admin/approvals/ID/approve or /deny\"}");
        return;
    }
    struct tg_slice id = tg_slice_of(rest.ptr, (size_t)(slash - rest.ptr));
    struct tg_slice verb = tg_slice_of(slash + 1, rest.len - id.len - 1);
    int approve = tg_slice_eq(verb, TG_SLICE("approve"));
    if (!approve && !tg_slice_eq(verb, TG_SLICE("deny"))) {
        respond_json(c, 404, "{\"error\":\"use POST /admin/approvals/ID/approve or /deny\"}");
        return;
    }
    for (struct tg_list *l = srv->approvals.next; l != &srv->approvals; l = l->next) {
        struct tg_call *k = tg_container_of(l, struct tg_call, alink);
        if (!tg_slice_eq(id, tg_slice_cstr(k->approval_id)))
            continue;
        /* Who decided: the approver's name if the caller gives one, for the audit log. */
        char by[96] = "admin";
        struct tg_slice who = tg_http_req_header(&c->req, "x-tollgate-approver");
        if (who.ptr != NULL && who.len > 0) {
            /* Recorded as given (JSON-escaped where it is written), printable ASCII only, bounded. */
            size_t o = strlen(by);
            by[o++] = ':';
            for (size_t i = 0; i < who.len && o < sizeof(by) - 1; i++) {
                unsigned char ch = (unsigned char)who.ptr[i];
                by[o++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
            }
            by[o] = '\0';
        }
        char idcopy[33];
        snprintf(idcopy, sizeof(idcopy), "%s", k->approval_id);
        approval_finish(k, approve, by, NULL);
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_appendf(&b, "{\"id\":\"%s\",\"decision\":\"%s\",\"by\":", idcopy, approve ? "approved" : "denied");
        tg_json_write_string(&b, by, strlen(by));
        tg_buf_appends(&b, "}");
        tg_http_respond(c, 200, NULL, "application/json", b.base, b.len);
        tg_buf_dispose(&b);
        return;
    }
    respond_json(c, 404, "{\"error\":\"no pending approval with this id (decided, expired or unknown)\"}");
}

void tg_router_admin(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_slice url = tg_http_req_url(&c->req);
    size_t q = 0;
    while (q < url.len && url.ptr[q] != '?')
        q++;
    struct tg_slice path = tg_slice_of(url.ptr, q);
    if (tg_slice_eq(path, TG_SLICE("/healthz"))) {
        respond_json(c, 200, "{\"status\":\"ok\"}");
        return;
    }
    if (tg_slice_eq(path, TG_SLICE("/readyz"))) {
        respond_json(c, readyz(srv) && !srv->draining ? 200 : 503,
                     readyz(srv) && !srv->draining ? "{\"status\":\"ready\"}" : "{\"status\":\"not ready\"}");
        return;
    }
    if (tg_slice_eq(path, TG_SLICE("/metrics"))) {
        if (srv->conf->admin.has_token && !admin_authorized(srv, c)) {
            tg_http_respond(c, 401, "WWW-Authenticate: Bearer realm=\"tollgate-admin\"\r\n", "text/plain",
                            "unauthorized\n", 13);
            return;
        }
        struct tg_buf b;
        tg_buf_init(&b);
        tg_metrics_render(srv, &b);
        tg_http_respond(c, 200, NULL, "text/plain; version=0.0.4", b.base, b.len);
        tg_buf_dispose(&b);
        return;
    }
    if (tg_slice_starts_with(path, "/admin/")) {
        if (!srv->conf->admin.has_token) {
            respond_json(c, 403, "{\"error\":\"the admin API needs admin.token_sha256 in the configuration\"}");
            return;
        }
        if (!admin_authorized(srv, c)) {
            tg_http_respond(c, 401, "WWW-Authenticate: Bearer realm=\"tollgate-admin\"\r\n", "application/json",
                            "{\"error\":\"unauthorized\"}", 24);
            return;
        }
        if (tg_slice_eq(path, TG_SLICE("/admin/approvals")) && c->req.method == HTTP_GET) {
            admin_list_approvals(srv, c);
            return;
        }
        if (tg_slice_starts_with(path, "/admin/approvals/") && c->req.method == HTTP_POST) {
            admin_decide(srv, c, tg_slice_of(path.ptr + 17, path.len - 17));
            return;
        }
        if (tg_slice_eq(path, TG_SLICE("/admin/reload")) && c->req.method == HTTP_POST) {
            struct tg_buf err, b;
            tg_buf_init(&err);
            tg_buf_init(&b);
            if (tg_server_reload(srv, &err) == 0) {
                respond_json(c, 200, "{\"status\":\"reloaded\"}");
            } else {
                tg_buf_appends(&b, "{\"status\":\"failed\",\"errors\":");
                tg_json_write_string(&b, err.base ? err.base : "", err.len);
                tg_buf_appends(&b, "}");
                tg_http_respond(c, 400, NULL, "application/json", b.base, b.len);
            }
            tg_buf_dispose(&err);
            tg_buf_dispose(&b);
            return;
        }
        respond_json(c, 404, "{\"error\":\"unknown admin endpoint\"}");
        return;
    }
    tg_http_respond(c, 404, NULL, "text/plain", "not found\n", 10);
}
