#include "transports/respond.h"

#include <string.h>

#include "core/wire/msg.h"
#include "transports/http1/http1.h"

void tg_respond_rpc(struct tg_conn *c, int status, const char *extra, const char *id, size_t id_len, int code,
                         const char *msg, const char *data)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_rpc_error(&b, id, id_len, code, msg, data);
    tg_http_respond(c, status, extra, "application/json", b.base, b.len);
    tg_buf_dispose(&b);
}

void tg_respond_json(struct tg_conn *c, int status, const char *json)
{
    tg_http_respond(c, status, NULL, "application/json", json, strlen(json));
}
