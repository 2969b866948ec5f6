/* The process (core/app/server.c): starting the listeners and the loop's hooks, reloading the
 * configuration (a removed upstream lives until its calls end), draining and shutting down.
 * struct tg_server itself is in core/call/gateway.h. */
#ifndef TG_SERVER_H
#define TG_SERVER_H

#include "core/call/gateway.h"

int tg_server_init(struct tg_server *srv, uv_loop_t *loop, struct tg_conf *conf);
int tg_server_start(struct tg_server *srv);
/* Stop accepting, let in-flight work finish (up to drain_timeout_ms), then stop the loop. */
void tg_server_drain(struct tg_server *srv);
void tg_server_dispose(struct tg_server *srv);
/* Load the configuration file again and swap it in; on error keep the old one and say why. The
 * files are read off the loop (policies, JWKS, CA bundles and certificates are read and parsed in
 * libuv's thread pool), then swapped in on the loop; done (may be NULL) runs from the loop
 * afterwards. Reloads asked for while one runs are served by one more read. */
void tg_server_reload_start(struct tg_server *srv, tg_reload_done_cb done, void *ud);

#endif
