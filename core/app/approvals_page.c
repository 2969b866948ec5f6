/* The approvals page: an applet on the admin listener beside the admin API (core/app/admin.c).
 * The contract is in core/app/approvals_page.h; the page's files are core/app/ui/, compiled in by
 * core/app/ui/embed.cmake, so nothing is read from disk and nothing is fetched from elsewhere. */
#include "core/app/approvals_page.h"
#include "core/app/throttle.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/call/approvals.h"
#include "core/call/gateway.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "policy/auth.h"
#include "transports/http1/http1.h"
#include "transports/respond.h"

/* Generated from core/app/ui/ at build time (ui_assets.c in the build directory). */
extern const unsigned char tg_ui_login_html[], tg_ui_index_html[], tg_ui_app_css[], tg_ui_app_js[];
extern const size_t tg_ui_login_html_len, tg_ui_index_html_len, tg_ui_app_css_len, tg_ui_app_js_len;

#define COOKIE "tollgate_admin"
#define ID_HEX 64 /* a session id and a CSRF token: 32 random bytes, hex */
#define TOKEN_MAX 1024
#define REASON_MAX 600 /* bytes: the page's field takes 200 characters, 3 bytes each at most in UTF-8 */

/* One signed-in approver. The table is fixed storage, so a peer cannot grow it: only a right
 * admin token opens a session, and the least recently used one makes room. It is the one piece
 * of process state of the page (the admin listener is one per process); nothing in it is on the
 * heap, so nothing is left to free at exit. */
struct ui_session {
    int used;
    uint8_t id_sha256[32]; /* the cookie's value is not kept, only its digest */
    char csrf[ID_HEX + 1];
    char approver[65]; /* the name given at sign-in (printable ASCII), or "page" */
    uint64_t created_ms, used_ms; /* loop time */
};
static struct ui_session sessions[TG_ADMIN_UI_SESSIONS];

/* What every answer of the page carries: nothing cached, nothing framed, nothing loaded from
 * anywhere but here, and no script but app.js. */
#define PAGE_HEADERS                                                                                           \
    "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n"                \
    "Referrer-Policy: no-referrer\r\nContent-Security-Policy: default-src 'none'; script-src 'self'; "        \
    "style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; "      \
    "base-uri 'none'\r\n"

static void respond(struct tg_conn *c, int status, const char *extra, const char *type, const char *body, size_t n)
{
    char h[1024];
    snprintf(h, sizeof(h), "%s%s", PAGE_HEADERS, extra ? extra : "");
    tg_http_respond(c, status, h, type, body, n);
}

static void respond_json(struct tg_conn *c, int status, const char *json)
{
    respond(c, status, NULL, "application/json", json, strlen(json));
}

/* ------------------------------------------------------------------------------------------ */
/* Request pieces: cookie, form fields */

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static int is_id(struct tg_slice s)
{
    if (s.len != ID_HEX)
        return 0;
    for (size_t i = 0; i < s.len; i++)
        if (!((s.ptr[i] >= '0' && s.ptr[i] <= '9') || (s.ptr[i] >= 'a' && s.ptr[i] <= 'f')))
            return 0;
    return 1;
}

/* The value of cookie `name` in the Cookie header, or an empty slice. */
static struct tg_slice cookie_value(struct tg_conn *c, const char *name)
{
    struct tg_slice h = tg_http_req_header(c->req, "cookie");
    size_t nl = strlen(name), i = 0;
    while (h.ptr != NULL && i < h.len) {
        while (i < h.len && (h.ptr[i] == ' ' || h.ptr[i] == ';'))
            i++;
        size_t start = i;
        while (i < h.len && h.ptr[i] != ';')
            i++;
        struct tg_slice pair = tg_slice_of(h.ptr + start, i - start);
        if (pair.len > nl && memcmp(pair.ptr, name, nl) == 0 && pair.ptr[nl] == '=')
            return tg_slice_of(pair.ptr + nl + 1, pair.len - nl - 1);
    }
    return tg_slice_of(NULL, 0);
}

/* Field `key` of an application/x-www-form-urlencoded body, decoded into out (NUL-terminated).
 * Returns its length; -1 when it is absent or malformed, -2 when longer than cap - 1. */
static long form_value(struct tg_slice body, const char *key, char *out, size_t cap)
{
    size_t kl = strlen(key), i = 0;
    while (i < body.len) {
        size_t start = i;
        while (i < body.len && body.ptr[i] != '&')
            i++;
        struct tg_slice f = tg_slice_of(body.ptr + start, i - start);
        i++;
        if (f.len < kl + 1 || memcmp(f.ptr, key, kl) != 0 || f.ptr[kl] != '=')
            continue;
        size_t o = 0;
        for (size_t j = kl + 1; j < f.len; j++) {
            int ch = (unsigned char)f.ptr[j];
            if (ch == '+') {
                ch = ' ';
            } else if (ch == '%') {
                if (j + 2 >= f.len || hexval(f.ptr[j + 1]) < 0 || hexval(f.ptr[j + 2]) < 0)
                    return -1;
                ch = hexval(f.ptr[j + 1]) * 16 + hexval(f.ptr[j + 2]);
                j += 2;
            }
            if (o + 1 >= cap)
                return -2;
            out[o++] = (char)ch;
        }
        out[o] = '\0';
        return (long)o;
    }
    return -1;
}

/* A reason as it goes to the client and the log: valid UTF-8 (a bad byte becomes '?') with no
 * control characters. */
static void clean_text(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        size_t n = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 ? 4 : 0;
        unsigned cp = n == 1 ? *p : n == 2 ? *p & 0x1fu : n == 3 ? *p & 0x0fu : *p & 0x07u;
        size_t k = 1;
        for (; n > 1 && k < n && (p[k] & 0xc0) == 0x80; k++)
            cp = (cp << 6) | (p[k] & 0x3fu);
        int ok = n != 0 && k == n && !(n == 2 && cp < 0x80) && !(n == 3 && cp < 0x800) &&
                 !(n == 4 && (cp < 0x10000 || cp > 0x10ffff)) && !(cp >= 0xd800 && cp <= 0xdfff);
        if (!ok) {
            *p++ = '?';
            continue;
        }
        if (cp < 0x20 || cp == 0x7f)
            *p = ' ';
        p += n;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Sessions */

static int expired(const struct ui_session *s, uint64_t now)
{
    return now - s->used_ms >= TG_ADMIN_UI_IDLE_MS || now - s->created_ms >= TG_ADMIN_UI_LIFE_MS;
}

/* The request's page session, or NULL (none, unknown, expired: an expired one is dropped). */
static struct ui_session *session_of(struct tg_server *srv, struct tg_conn *c)
{
    struct tg_slice v = cookie_value(c, COOKIE);
    if (!is_id(v))
        return NULL;
    uint8_t h[32];
    tg_sha256(v.ptr, v.len, h);
    uint64_t now = uv_now(srv->loop);
    struct ui_session *found = NULL;
    for (size_t i = 0; i < TG_ADMIN_UI_SESSIONS; i++) {
        struct ui_session *s = &sessions[i];
        if (s->used && tg_ct_equal(s->id_sha256, h, 32))
            found = s;
    }
    if (found != NULL && expired(found, now)) {
        memset(found, 0, sizeof(*found));
        found = NULL;
    }
    if (found != NULL)
        found->used_ms = now;
    return found;
}

/* Opens a session for approver (a name, or ""); id gets the cookie's value. -1 when no
 * randomness could be had. */
static int session_open(struct tg_server *srv, char id[ID_HEX + 1], const char *approver)
{
    uint64_t now = uv_now(srv->loop);
    struct ui_session *slot = NULL;
    for (size_t i = 0; i < TG_ADMIN_UI_SESSIONS; i++) {
        struct ui_session *s = &sessions[i];
        if (s->used && expired(s, now))
            memset(s, 0, sizeof(*s));
        if (!s->used) {
            if (slot == NULL || slot->used)
                slot = s;
        } else if (slot == NULL || (slot->used && s->used_ms < slot->used_ms)) {
            slot = s;
        }
    }
    uint8_t rnd[64];
    if (tg_random(rnd, sizeof(rnd)) != 0)
        return -1;
    if (slot->used)
        tg_log(TG_LOG_INFO, "admin page session replaced", "sessions=%d", TG_ADMIN_UI_SESSIONS);
    memset(slot, 0, sizeof(*slot));
    tg_hex_encode(rnd, 32, id);
    tg_hex_encode(rnd + 32, 32, slot->csrf);
    tg_sha256(id, ID_HEX, slot->id_sha256);
    slot->used = 1;
    slot->created_ms = slot->used_ms = now;
    /* Printable ASCII only, as X-Tollgate-Approver on the API: it goes to the audit log and the
     * page, escaped where it is written. */
    size_t o = 0;
    for (const char *p = approver; *p && o < sizeof(slot->approver) - 1; p++)
        slot->approver[o++] = (*p >= 0x20 && *p < 0x7f) ? *p : '?';
    slot->approver[o] = '\0';
    if (o == 0)
        snprintf(slot->approver, sizeof(slot->approver), "page");
    return 0;
}

/* Does the request carry this session's CSRF token (header X-CSRF-Token, or form field csrf)? */
static int csrf_ok(struct tg_conn *c, const struct ui_session *s)
{
    struct tg_slice t = tg_http_req_header(c->req, "x-csrf-token");
    char field[ID_HEX + 2];
    if (t.ptr == NULL) {
        long n = form_value(tg_slice_of(c->req->body.base, c->req->body.len), "csrf", field, sizeof(field));
        if (n < 0)
            return 0;
        t = tg_slice_of(field, (size_t)n);
    }
    return t.len == ID_HEX && tg_ct_equal((const uint8_t *)t.ptr, (const uint8_t *)s->csrf, ID_HEX);
}

/* ------------------------------------------------------------------------------------------ */
/* Answers */

/* A template with every "{{NAME}}" replaced by value. */
static void render(struct tg_buf *out, const unsigned char *tpl, size_t n, const char *name, const char *value)
{
    const char *p = (const char *)tpl, *end = p + n;
    size_t nl = strlen(name);
    while (p < end) {
        const char *m = memmem(p, (size_t)(end - p), "{{", 2);
        if (m == NULL || (size_t)(end - m) < nl + 4 || memcmp(m + 2, name, nl) != 0 || memcmp(m + 2 + nl, "}}", 2) != 0) {
            const char *stop = m ? m + 2 : end;
            tg_buf_append(out, p, (size_t)(stop - p));
            p = stop;
            continue;
        }
        tg_buf_append(out, p, (size_t)(m - p));
        tg_buf_appends(out, value);
        p = m + nl + 4;
    }
}

static void login_page(struct tg_conn *c, int status, const char *error_html, const char *extra)
{
    struct tg_buf b;
    tg_buf_init(&b);
    render(&b, tg_ui_login_html, tg_ui_login_html_len, "ERROR", error_html);
    respond(c, status, extra, "text/html; charset=utf-8", b.base, b.len);
    tg_buf_dispose(&b);
}

static void main_page(struct tg_conn *c, const struct ui_session *s)
{
    struct tg_buf b;
    tg_buf_init(&b);
    render(&b, tg_ui_index_html, tg_ui_index_html_len, "CSRF", s->csrf);
    respond(c, 200, NULL, "text/html; charset=utf-8", b.base, b.len);
    tg_buf_dispose(&b);
}

static void on_login(struct tg_server *srv, struct tg_conn *c)
{
    unsigned wait = tg_admin_throttle_check(srv, c, TG_ADMIN_DOOR_PAGE);
    if (wait > 0) {
        char h429[64];
        snprintf(h429, sizeof(h429), "Retry-After: %u\r\n", wait);
        login_page(c, 429, "<p class=\"error\" role=\"alert\">Too many wrong tokens; try again later.</p>", h429);
        return;
    }
    char tok[TOKEN_MAX];
    long n = form_value(tg_slice_of(c->req->body.base, c->req->body.len), "token", tok, sizeof(tok));
    uint8_t h[32];
    int ok = 0;
    if (n > 0) {
        tg_sha256(tok, (size_t)n, h);
        ok = tg_ct_equal(h, srv->conf->admin.token_sha256, 32);
    }
    memset(tok, 0, sizeof(tok));
    char id[ID_HEX + 1], approver[sizeof(sessions[0].approver)];
    if (form_value(tg_slice_of(c->req->body.base, c->req->body.len), "approver", approver, sizeof(approver)) < 0)
        approver[0] = '\0'; /* none, or longer than the form's field takes */
    if (!ok)
        tg_admin_throttle_failed(srv, c, TG_ADMIN_DOOR_PAGE);
    if (!ok || session_open(srv, id, approver) != 0) {
        tg_log(TG_LOG_WARN, "admin page login refused", "conn=%llu", (unsigned long long)c->id);
        login_page(c, ok ? 503 : 401,
                   ok ? "<p class=\"error\" role=\"alert\">No session could be opened; try again.</p>"
                      : "<p class=\"error\" role=\"alert\">Wrong token.</p>",
                   NULL);
        return;
    }
    char h2[256];
    snprintf(h2, sizeof(h2), "Set-Cookie: " COOKIE "=%s; Path=/admin; Max-Age=%llu; HttpOnly; SameSite=Strict%s\r\n"
             "Location: /admin/ui/\r\n", id, (unsigned long long)(TG_ADMIN_UI_LIFE_MS / 1000),
             c->listener->tls ? "; Secure" : "");
    tg_log(TG_LOG_INFO, "admin page login", "conn=%llu", (unsigned long long)c->id);
    respond(c, 303, h2, "text/plain", "signed in\n", 10);
}

/* A queue operation in flight. Owner: the operation (its callback frees it). */
struct ui_wait {
    struct tg_http_wait w;
    int approve;
};

static struct ui_wait *wait_new(struct tg_conn *c)
{
    struct ui_wait *w = tg_xcalloc(1, sizeof(*w));
    tg_http_wait_start(&w->w, c);
    return w;
}

/* The page shows the arguments (redacted) whatever audit.args says. */
static void on_listed(void *ud, const struct tg_approval_item *items, size_t n)
{
    struct ui_wait *w = ud;
    struct tg_conn *c = tg_http_wait_stop(&w->w);
    free(w);
    if (c == NULL)
        return;
    struct tg_buf b;
    tg_buf_init(&b);
    tg_approvals_write(&b, items, n, 1);
    respond(c, 200, NULL, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

static void on_decided(void *ud, int rc, const char *why)
{
    struct ui_wait *w = ud;
    int approve = w->approve;
    struct tg_conn *c = tg_http_wait_stop(&w->w);
    free(w);
    if (c == NULL)
        return;
    if (rc == TG_APPROVAL_STALE) {
        respond_json(c, 409, "{\"error\":\"this call is not the one shown (its digest differs); nothing was run\"}");
        return;
    }
    if (rc == TG_APPROVAL_NOT_ALLOWED) {
        struct tg_buf b;
        tg_buf_init(&b);
        char msg[700];
        snprintf(msg, sizeof(msg), "no longer allowed: %s", why ? why : "the configuration changed");
        tg_buf_appends(&b, "{\"error\":");
        tg_json_write_string(&b, msg, strlen(msg));
        tg_buf_appends(&b, "}");
        respond(c, 409, NULL, "application/json", b.base, b.len);
        tg_buf_dispose(&b);
        return;
    }
    if (rc != 0) {
        respond_json(c, 404, "{\"error\":\"no pending approval with this id (decided, expired or unknown)\"}");
        return;
    }
    respond_json(c, 200, approve ? "{\"decision\":\"approved\"}" : "{\"decision\":\"denied\"}");
}

/* POST /admin/ui/approvals/ID/approve|deny; rest = "ID/verb". An approve carries the digest of
 * the row the approver saw (form field digest). */
static void on_decide(struct tg_server *srv, struct tg_conn *c, const struct ui_session *s, struct tg_slice rest)
{
    const char *slash = memchr(rest.ptr, '/', rest.len);
    struct tg_slice id = tg_slice_of(rest.ptr, slash ? (size_t)(slash - rest.ptr) : rest.len);
    struct tg_slice verb = slash ? tg_slice_of(slash + 1, rest.len - id.len - 1) : tg_slice_of(NULL, 0);
    int approve = tg_slice_eq(verb, TG_SLICE("approve"));
    if ((!approve && !tg_slice_eq(verb, TG_SLICE("deny"))) || id.len == 0 || id.len > 64) {
        respond_json(c, 404, "{\"error\":\"use POST /admin/ui/approvals/ID/approve or /deny\"}");
        return;
    }
    char reason[REASON_MAX + 1] = "";
    long rn = approve ? -1 : form_value(tg_slice_of(c->req->body.base, c->req->body.len), "reason", reason, sizeof(reason));
    if (rn == -2) { /* refused rather than cut: the approver's words reach the client whole or not at all */
        respond_json(c, 400, "{\"error\":\"the reason is longer than 600 bytes\"}");
        return;
    }
    if (rn < 0)
        reason[0] = '\0';
    clean_text(reason);
    char digest[ID_HEX + 1] = "";
    if (approve && form_value(tg_slice_of(c->req->body.base, c->req->body.len), "digest", digest, sizeof(digest)) < 0)
        digest[0] = '\0'; /* none: refused as any digest but the call's */
    struct ui_wait *w = wait_new(c);
    w->approve = approve;
    srv->store.ops->approval_decide(srv->store.ud, id, approve, digest, s->approver, reason, on_decided, w);
}

void tg_approvals_page_handle(struct tg_server *srv, struct tg_conn *c, struct tg_slice path)
{
    int get = c->req->method == HTTP_GET, post = c->req->method == HTTP_POST;
    if (tg_slice_eq(path, TG_SLICE("/admin/ui"))) {
        respond(c, 308, "Location: /admin/ui/\r\n", "text/plain", "see /admin/ui/\n", 15);
        return;
    }
    if (get && tg_slice_eq(path, TG_SLICE("/admin/ui/app.js"))) {
        respond(c, 200, NULL, "text/javascript; charset=utf-8", (const char *)tg_ui_app_js, tg_ui_app_js_len);
        return;
    }
    if (get && tg_slice_eq(path, TG_SLICE("/admin/ui/app.css"))) {
        respond(c, 200, NULL, "text/css; charset=utf-8", (const char *)tg_ui_app_css, tg_ui_app_css_len);
        return;
    }
    if (post && tg_slice_eq(path, TG_SLICE("/admin/ui/login"))) {
        on_login(srv, c);
        return;
    }
    struct ui_session *s = session_of(srv, c);
    if (tg_slice_eq(path, TG_SLICE("/admin/ui/")) && get) {
        if (s != NULL)
            main_page(c, s);
        else
            login_page(c, 200, "", NULL);
        return;
    }
    int queue = tg_slice_eq(path, TG_SLICE("/admin/ui/queue")) && get;
    int decide = tg_slice_starts_with(path, "/admin/ui/approvals/") && post;
    int logout = tg_slice_eq(path, TG_SLICE("/admin/ui/logout")) && post;
    if (!queue && !decide && !logout) {
        respond_json(c, 404, "{\"error\":\"unknown page\"}");
        return;
    }
    if (s == NULL) {
        respond_json(c, 401, "{\"error\":\"sign in at /admin/ui/\"}");
        return;
    }
    if (queue) {
        srv->store.ops->approvals_list(srv->store.ud, on_listed, wait_new(c));
        return;
    }
    /* Every state-changing POST: the session's CSRF token, or nothing happens. */
    if (!csrf_ok(c, s)) {
        tg_log(TG_LOG_WARN, "admin page POST without its CSRF token refused", "conn=%llu", (unsigned long long)c->id);
        respond_json(c, 403, "{\"error\":\"missing or wrong CSRF token\"}");
        return;
    }
    if (logout) {
        memset(s, 0, sizeof(*s));
        respond(c, 303,
                "Set-Cookie: " COOKIE "=; Path=/admin; Max-Age=0; HttpOnly; SameSite=Strict\r\nLocation: /admin/ui/\r\n",
                "text/plain", "signed out\n", 11);
        return;
    }
    on_decide(srv, c, s, tg_slice_of(path.ptr + 20, path.len - 20));
}
