#include "core/mcp/legacy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conf/conf.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/mcp/rewrite.h"
#include "core/wire/msg.h"
#include "core/call/session.h"

static const char *const supported_versions[] = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", NULL};

const char *tg_mcp_version_known(struct tg_slice v)
{
    for (int i = 0; supported_versions[i]; i++)
        if (tg_slice_eq(v, tg_slice_cstr(supported_versions[i])))
            return supported_versions[i];
    return NULL;
}

int tg_mcp_version_supported(struct tg_slice v) { return tg_mcp_version_known(v) != NULL; }

int tg_mcp_batch_allowed(const char *proto) { return strcmp(proto, "2025-03-26") == 0; }

void tg_mcp_note_init_result(struct tg_session *s, const char *p, size_t n, int depth)
{
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, depth, 1, &doc, NULL, NULL) != 0)
        return;
    cJSON *res = tg_json_get(doc.root, "result");
    cJSON *pv = tg_json_get(res, "protocolVersion");
    /* It goes into every later MCP-Protocol-Version header: only a version the gateway knows
     * (an upstream's JSON string may carry CR/LF). */
    const char *known = cJSON_IsString(pv) ? tg_mcp_version_known(tg_slice_cstr(pv->valuestring)) : NULL;
    if (known != NULL) {
        s->proto = known;
        s->initialized = 1;
    } else if (cJSON_IsObject(res)) {
        char esc[64];
        tg_log(TG_LOG_WARN, "upstream agreed to a protocol version the gateway does not know; not used in headers",
               "session=%s version=%s", s->id_str,
               tg_log_esc(esc, sizeof(esc), tg_slice_cstr(cJSON_IsString(pv) ? pv->valuestring : "(none)")));
    }
    cJSON_Delete(doc.root);
}

_Static_assert(TG_MCP_MAX_SERVER_REQUESTS <= UINT8_MAX, "tg_session.nserver_reqs is a uint8_t");

void tg_mcp_note_server_request(struct tg_session *s, struct tg_slice id)
{
    char *key = tg_mcp_id_key(id.ptr, id.len);
    if (key == NULL)
        return;
    if (s->nserver_reqs >= TG_MCP_MAX_SERVER_REQUESTS) {
        /* Forget the oldest: a client that never answers cannot grow this without bound. */
        size_t first = strlen(s->server_reqs.base) + 1;
        tg_buf_consume(&s->server_reqs, first);
        s->nserver_reqs--;
    }
    tg_buf_append(&s->server_reqs, key, strlen(key) + 1);
    s->nserver_reqs++;
    free(key);
}

int tg_mcp_take_server_request(struct tg_session *s, const char *raw, size_t n)
{
    char *key = tg_mcp_id_key(raw, n);
    if (key == NULL)
        return 0;
    size_t off = 0;
    int found = 0;
    while (off < s->server_reqs.len) {
        const char *e = s->server_reqs.base + off;
        size_t el = strlen(e) + 1;
        if (strcmp(e, key) == 0) {
            memmove(s->server_reqs.base + off, s->server_reqs.base + off + el, s->server_reqs.len - off - el);
            s->server_reqs.len -= el;
            s->nserver_reqs--;
            found = 1;
            break;
        }
        off += el;
    }
    free(key);
    return found;
}

/* The version of a client's initialize the gateway answers with. */
static const char *agreed_version(struct tg_session *s, struct tg_msg *m)
{
    cJSON *params = tg_json_get(m->root, "params");
    cJSON *pv = tg_json_get(params, "protocolVersion");
    const char *ver = cJSON_IsString(pv) ? tg_mcp_version_known(tg_slice_cstr(pv->valuestring)) : NULL;
    s->proto = ver != NULL ? ver : TG_PROTO_LATEST;
    s->initialized = 1;
    return s->proto;
}

void tg_mcp_bridged_init(struct tg_session *s, struct tg_msg *m, const struct tg_upstream_conf *uc, const char *caps,
                         struct tg_buf *out)
{
    const char *ver = agreed_version(s, m);
    cJSON *c = caps != NULL ? cJSON_Parse(caps) : NULL;
    tg_buf_appends(out, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(out, m->id_raw, m->id_len);
    tg_buf_appendf(out, ",\"result\":{\"protocolVersion\":\"%s\",\"capabilities\":{\"logging\":{}", ver);
    static const char *const relayed[] = {"tools", "resources", "prompts", NULL};
    for (int i = 0; relayed[i]; i++) {
        const cJSON *f = tg_json_get(c, relayed[i]);
        if (f == NULL)
            continue;
        tg_buf_appendf(out, ",\"%s\":{\"listChanged\":%s%s}", relayed[i],
                       cJSON_IsTrue(tg_json_get(f, "listChanged")) ? "true" : "false",
                       i != 1                                                             ? ""
                       : cJSON_IsTrue(tg_json_get(f, "subscribe")) ? ",\"subscribe\":true"
                                                                                          : ",\"subscribe\":false");
    }
    if (tg_json_get(c, "completions") != NULL)
        tg_buf_appends(out, ",\"completions\":{}");
    cJSON_Delete(c);
    tg_buf_appends(out, "},\"serverInfo\":{\"name\":");
    char name[96];
    snprintf(name, sizeof(name), "tollgate/%s", uc->name);
    tg_json_write_string(out, name, strlen(name));
    tg_buf_appends(out, ",\"version\":\"" TG_VERSION "\"}}}");
}

void tg_mcp_local_init(struct tg_session *s, struct tg_msg *m, const struct tg_upstream_conf *uc, struct tg_buf *out)
{
    const char *ver = agreed_version(s, m);
    tg_buf_appends(out, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(out, m->id_raw, m->id_len);
    tg_buf_appendf(out,
                   ",\"result\":{\"protocolVersion\":\"%s\",\"capabilities\":{\"tools\":{\"listChanged\":false},"
                   "\"resources\":{\"subscribe\":false,\"listChanged\":false}},\"serverInfo\":{\"name\":",
                   ver);
    char name[96];
    snprintf(name, sizeof(name), "tollgate/%s", uc->name);
    tg_json_write_string(out, name, strlen(name));
    tg_buf_appends(out, ",\"version\":\"" TG_VERSION "\"}}}");
}
