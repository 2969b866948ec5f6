#include "core/call/roots.h"

#include <cjson/cJSON.h>
#include <string.h>

#include "core/conf/conf.h"
#include "core/base/json.h"
#include "core/call/gateway.h"
#include "core/wire/msg.h"
#include "core/call/session.h"
#include "upstream/pool/pool.h"

/* What a session whose grant a reload removed gets: no roots (its grant's pins, if it had any,
 * are gone with it, and the client's must not take their place). */
static char no_roots_result[] = "{\"roots\":[]}";
static const struct tg_roots no_roots = {1, no_roots_result};

static const struct tg_roots *pins_in(const struct tg_conf *c, const struct tg_session *s,
                                      const struct tg_upstream_conf *uc)
{
    /* Asked for every 2026 answer and every server request: without a grant that pins roots,
     * the upstream's decide, and no grant is looked up. */
    if (!c->grant_roots)
        return uc != NULL && uc->roots.pinned ? &uc->roots : NULL;
    const struct tg_grant_conf *g = s != NULL && s->grant != NULL ? tg_conf_find_grant(c, s->grant) : NULL;
    if (s != NULL && s->grant != NULL && g == NULL)
        return &no_roots;
    return tg_conf_roots_for(g, uc);
}

const struct tg_roots *tg_roots_of_session(struct tg_server *srv, const struct tg_session *s,
                                           const struct tg_upstream_conf *uc)
{
    return pins_in(srv->conf, s, uc);
}

int tg_roots_changed(struct tg_server *srv, const struct tg_conf *old, const struct tg_session *s)
{
    if (!s->live || !s->initialized || s->up_modern || s->u.bridge != NULL || (size_t)s->upstream >= srv->nupstreams)
        return 0; /* 2026-07-28 requests carry no roots the server keeps: each asks again */
    const struct tg_upstream_conf *uc = tg_upstream_conf(srv->upstreams[s->upstream]);
    const struct tg_roots *now = pins_in(srv->conf, s, uc);
    const struct tg_roots *was = pins_in(old, s, tg_conf_find_upstream(old, tg_slice_cstr(uc->name), NULL));
    return now != NULL && (was == NULL || strcmp(was->result, now->result) != 0);
}

void tg_roots_answer(struct tg_buf *b, struct tg_slice id, const struct tg_roots *r)
{
    tg_buf_init(b);
    tg_buf_appends(b, "{\"jsonrpc\":\"2.0\",\"id\":");
    tg_buf_append(b, id.ptr, id.len);
    tg_buf_appends(b, ",\"result\":");
    tg_buf_appends(b, r->result);
    tg_buf_appends(b, "}");
}

void tg_roots_advertise(const struct tg_roots *r, struct tg_msg *m)
{
    if (r == NULL || m->mid != TG_M_INITIALIZE || m->kind != TG_MSG_REQUEST)
        return;
    cJSON *params = tg_json_get(m->root, "params");
    if (!cJSON_IsObject(params))
        return; /* not an initialize the server will take anyway */
    cJSON *caps = tg_json_get(params, "capabilities");
    if (!cJSON_IsObject(caps)) {
        cJSON_DeleteItemFromObjectCaseSensitive(params, "capabilities");
        caps = cJSON_AddObjectToObject(params, "capabilities");
    }
    cJSON_DeleteItemFromObjectCaseSensitive(caps, "roots");
    cJSON_AddObjectToObject(caps, "roots");
    tg_msg_edited(m);
}

int tg_roots_drop(const struct tg_roots *r, const struct tg_msg *m)
{
    return r != NULL && m->kind == TG_MSG_NOTIFICATION && m->mid == TG_M_ROOTS_LIST_CHANGED;
}
