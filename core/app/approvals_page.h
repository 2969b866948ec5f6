/* The approvals page on the admin listener (core/app/approvals_page.c): /admin/ui/ and what it loads.
 *
 * Without a page session it shows a login form; POST /admin/ui/login with the admin token opens
 * a session (cookie tollgate_admin, HttpOnly, SameSite=Strict, Path=/admin). The page lists the
 * approval queue (core/call/approvals.h, polled every second) and decides with POSTs that carry the
 * session's CSRF token; a POST without it is answered 403 and changes nothing.
 *
 *   GET  /admin/ui/                          the page, or the login form
 *   GET  /admin/ui/app.js, /admin/ui/app.css  its script and style (compiled in from core/app/ui/)
 *   POST /admin/ui/login                     form field token: 303 to the page, or 401 and the form
 *   POST /admin/ui/logout                    form field csrf: ends the session
 *   GET  /admin/ui/queue                     {"approvals":[...]} with redacted arguments
 *   POST /admin/ui/approvals/ID/approve|deny  header X-CSRF-Token; form field reason (deny)
 *
 * Sessions: at most TG_ADMIN_UI_SESSIONS at once (a new login beyond that replaces the least
 * recently used one), each ending after TG_ADMIN_UI_IDLE_MS unused or TG_ADMIN_UI_LIFE_MS in all,
 * or at logout. Only the SHA-256 of a session id is kept.
 *
 * Wrong tokens on the login are limited by the admin throttle (core/app/throttle.h), the same
 * buckets the bearer-token admin API fills. */
#ifndef TG_ADMIN_UI_H
#define TG_ADMIN_UI_H

#include "core/base/buf.h"

#define TG_ADMIN_UI_SESSIONS 32
#define TG_ADMIN_UI_IDLE_MS (30 * 60 * 1000ULL)
#define TG_ADMIN_UI_LIFE_MS (12 * 60 * 60 * 1000ULL)

struct tg_conn;
struct tg_server;

/* A request on the admin listener whose path (query cut off) is /admin/ui or under it: answers
 * it. The admin token must be configured (the caller checks). */
void tg_approvals_page_handle(struct tg_server *srv, struct tg_conn *c, struct tg_slice path);

#endif
