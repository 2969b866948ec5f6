/* JSON-RPC answers on an HTTP connection, for refusals made before any call exists. */
#ifndef TG_RESPOND_H
#define TG_RESPOND_H

#include <stddef.h>

struct tg_conn;

/* {"jsonrpc":"2.0","id":ID,"error":{code,message[,data]}} with this status. id: raw JSON or
 * NULL (null); data: raw JSON or NULL. */
void tg_respond_rpc(struct tg_conn *c, int status, const char *extra, const char *id, size_t id_len, int code,
                         const char *msg, const char *data);
void tg_respond_json(struct tg_conn *c, int status, const char *json);

#endif
