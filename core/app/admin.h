/* The admin listener: /metrics, health, and the admin API (core/app/admin.c). */
#ifndef TG_ADMIN_H
#define TG_ADMIN_H

struct tg_conn;
struct tg_server;

void tg_admin_handle(struct tg_server *srv, struct tg_conn *c);

#endif
