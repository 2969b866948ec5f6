#include "core/router_int.h"


static const char *const supported_versions[] = {"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", NULL};

int tg_proto_supported(struct tg_slice v)
{
    for (int i = 0; supported_versions[i]; i++)
        if (tg_slice_eq(v, tg_slice_cstr(supported_versions[i])))
            return 1;
    return 0;
}

/* Learn the negotiated protocol version from an initialize result. */
void note_init_result(struct tg_call *k, const char *p, size_t n)
{
    struct tg_json_doc doc;
    if (tg_json_parse(p, n, k->srv->conf->limits.json_depth + 16, 1, &doc, NULL, NULL) != 0)
        return;
    cJSON *res = cJSON_GetObjectItemCaseSensitive(doc.root, "result");
    cJSON *pv = cJSON_GetObjectItemCaseSensitive(res, "protocolVersion");
    if (cJSON_IsString(pv) && strlen(pv->valuestring) < sizeof(k->sess->proto)) {
        strcpy(k->sess->proto, pv->valuestring);
        k->sess->initialized = 1;
    }
    cJSON_Delete(doc.root);
}

/* Server-to-client requests relayed to the client: only answers to these may go back up. */
#define MAX_PENDING_SERVER_REQUESTS 64

void note_server_request(struct tg_session *s, struct tg_slice id)
{
    char *key = id_key_of(id.ptr, id.len);
    if (key == NULL)
        return;
    if (s->nserver_reqs >= MAX_PENDING_SERVER_REQUESTS) {
        /* Forget the oldest: a client that never answers cannot grow this without bound. */
        size_t first = strlen(s->server_reqs.base) + 1;
        tg_buf_consume(&s->server_reqs, first);
        s->nserver_reqs--;
    }
    tg_buf_append(&s->server_reqs, key, strlen(key) + 1);
    s->nserver_reqs++;
    free(key);
}

/* 1 if the id answers a pending server request (which is then no longer pending). */
int take_server_request(struct tg_session *s, const char *raw, size_t n)
{
    char *key = id_key_of(raw, n);
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

/* The gateway's own answer to initialize, for upstreams that cannot take it (CoWork OS). */
void local_init_result(struct tg_session *s, struct tg_msg *m, const struct tg_upstream_conf *uc,
                              struct tg_buf *out)
{
    cJSON *params = cJSON_GetObjectItemCaseSensitive(m->root, "params");
    cJSON *pv = cJSON_GetObjectItemCaseSensitive(params, "protocolVersion");
    const char *ver = TG_PROTO_LATEST;
    if (cJSON_IsString(pv) && tg_proto_supported(tg_slice_cstr(pv->valuestring)))
        ver = pv->valuestring;
    snprintf(s->proto, sizeof(s->proto), "%s", ver);
    s->initialized = 1;
    struct tg_buf *bp = out;
#define b (*bp)
    tg_buf_appends(&b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(&b, m->id_raw, m->id_len);
    tg_buf_appendf(&b,
                   ",\"result\":{\"protocolVersion\":\"%s\",\"capabilities\":{\"tools\":{\"listChanged\":false},"
                   "\"resources\":{\"subscribe\":false,\"listChanged\":false}},\"serverInfo\":{\"name\":",
                   ver);
    char name[96];
    snprintf(name, sizeof(name), "tollgate/%s", uc->name);
    tg_json_write_string(&b, name, strlen(name));
    tg_buf_appends(&b, ",\"version\":\"" TG_VERSION "\"}}}");
#undef b
}
