#include "core/mcp/mrtr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"

#define ENVELOPE_TTL_MS (10 * 60 * 1000) /* a person may take a while to answer an elicitation */
#define ID_CHARS 22                      /* of the token: the version and most of the random nonce */
#define PINNED_KEY "\x01"                /* in a sealed key list: the key's input is the pinned roots */
#define PINNED_MAX 8 /* roots/list requests of one result the pinned roots answer: each is a copy of
                      * them in the retry, so an upstream asking thousands cannot grow it past this */

unsigned tg_mcp_client_caps(const cJSON *caps)
{
    unsigned c = 0;
    if (cJSON_IsObject(tg_json_get(caps, "elicitation")))
        c |= TG_CAP_ELICITATION;
    if (cJSON_IsObject(tg_json_get(caps, "sampling")))
        c |= TG_CAP_SAMPLING;
    if (cJSON_IsObject(tg_json_get(caps, "roots")))
        c |= TG_CAP_ROOTS;
    if (cJSON_IsObject(tg_json_get(tg_json_get(caps, "extensions"), TG_MCP_TASKS_EXT)))
        c |= TG_CAP_TASKS;
    return c;
}

void tg_mcp_mrtr_init(struct tg_mcp_mrtr *t, size_t max)
{
    memset(t, 0, sizeof(*t));
    if (tg_random(t->key, sizeof(t->key)) != 0)
        abort(); /* no randomness, no unforgeable envelopes: refuse to run */
    t->max = max ? max : 1;
    t->ring = tg_xcalloc(t->max, sizeof(*t->ring));
}

void tg_mcp_mrtr_dispose(struct tg_mcp_mrtr *t)
{
    free(t->ring);
    t->ring = NULL;
}

static const char *name_member(const char *method)
{
    if (strcmp(method, "tools/call") == 0 || strcmp(method, "prompts/get") == 0)
        return "name";
    return strcmp(method, "resources/read") == 0 ? "uri" : NULL;
}

void tg_mcp_mrtr_bind_later(struct tg_mcp_mrtr_call *c, const char *grant, const char *upstream, const char *method,
                            const cJSON *params)
{
    c->b.grant = grant;
    c->b.upstream = upstream;
    c->b.method = method;
    const char *key = name_member(method);
    const cJSON *name = key ? tg_json_get(params, key) : NULL;
    c->b.name = cJSON_IsString(name) ? name->valuestring : "";
    c->args_state = TG_MRTR_ARGS_NONE;
    c->args = NULL;
}

void tg_mcp_mrtr_bind(struct tg_mcp_mrtr_call *c, const char *grant, const char *upstream, const char *method,
                      const cJSON *params)
{
    tg_mcp_mrtr_bind_later(c, grant, upstream, method, params);
    tg_mcp_mrtr_digest_from(c, params);
}

void tg_mcp_mrtr_digest_from(struct tg_mcp_mrtr_call *c, const cJSON *params)
{
    if (c->args_state == TG_MRTR_ARGS_DIGEST)
        return;
    tg_json_digest(tg_json_get(params, "arguments"), c->b.args_sha256);
    cJSON_Delete(c->args);
    c->args = NULL;
    c->args_state = TG_MRTR_ARGS_DIGEST;
}

void tg_mcp_mrtr_keep_args(struct tg_mcp_mrtr_call *c, cJSON *params)
{
    if (c->args_state != TG_MRTR_ARGS_NONE)
        return;
    cJSON *a = tg_json_get(params, "arguments"); /* the member tg_mcp_mrtr_digest_from reads */
    c->args = a != NULL ? cJSON_DetachItemViaPointer(params, a) : NULL;
    c->args_state = TG_MRTR_ARGS_KEPT;
}

int tg_mcp_mrtr_digest(struct tg_mcp_mrtr_call *c)
{
    if (c->args_state == TG_MRTR_ARGS_NONE)
        return -1;
    if (c->args_state == TG_MRTR_ARGS_KEPT) {
        tg_json_digest(c->args, c->b.args_sha256);
        cJSON_Delete(c->args);
        c->args = NULL;
        c->args_state = TG_MRTR_ARGS_DIGEST;
    }
    return 0;
}

void tg_mcp_mrtr_call_dispose(struct tg_mcp_mrtr_call *c)
{
    cJSON_Delete(c->args);
    c->args = NULL;
    c->args_state = TG_MRTR_ARGS_NONE;
}

unsigned tg_mcp_input_kind(const char *method, const char **cap)
{
    static const struct {
        const char *method, *cap;
        unsigned bit;
    } kinds[] = {
        {"elicitation/create", "elicitation", TG_CAP_ELICITATION},
        {"sampling/createMessage", "sampling", TG_CAP_SAMPLING},
        {"roots/list", "roots", TG_CAP_ROOTS},
    };
    for (size_t i = 0; method != NULL && i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (strcmp(method, kinds[i].method) == 0) {
            if (cap != NULL)
                *cap = kinds[i].cap;
            return kinds[i].bit;
        }
    }
    return 0;
}

static int seal(struct tg_mcp_mrtr *t, cJSON *result, struct tg_mcp_mrtr_call *c, int64_t now_ms,
                const struct tg_buf *keys, char flag, const char *inner);

int tg_mcp_mrtr_result(struct tg_mcp_mrtr *t, cJSON *result, struct tg_mcp_mrtr_call *c, int64_t now_ms,
                       char *why, size_t whysz)
{
    cJSON *rt = tg_json_get(result, "resultType");
    if (rt == NULL || (cJSON_IsString(rt) && strcmp(rt->valuestring, "complete") == 0))
        return 0;
    if (!cJSON_IsString(rt) || strcmp(rt->valuestring, "input_required") != 0) {
        snprintf(why, whysz, "the upstream answered with a result type the gateway does not know");
        return -1;
    }
    if (name_member(c->b.method) == NULL) {
        snprintf(why, whysz, "the upstream asked for input on %.60s, which cannot take any", c->b.method);
        return -1;
    }
    cJSON *reqs = tg_json_get(result, "inputRequests");
    cJSON *state = tg_json_get(result, "requestState");
    if ((reqs != NULL && !cJSON_IsObject(reqs)) || (state != NULL && !cJSON_IsString(state)) ||
        (reqs == NULL && state == NULL)) {
        snprintf(why, whysz, "the upstream's input_required result is malformed");
        return -1;
    }
    struct tg_buf keys;
    tg_buf_init(&keys);
    int npinned = 0;
    for (cJSON *r = reqs ? reqs->child : NULL, *next; r != NULL; r = next) {
        next = r->next;
        cJSON *m = tg_json_get(r, "method");
        const char *kind = NULL;
        unsigned bit = tg_mcp_input_kind(cJSON_IsString(m) ? m->valuestring : NULL, &kind);
        if (r->string[0] == PINNED_KEY[0]) {
            snprintf(why, whysz, "the upstream's input_required result is malformed (a key starts with a control character)");
            tg_buf_dispose(&keys);
            return -1;
        }
        if (bit == TG_CAP_ROOTS && c->pinned_roots != NULL) {
            /* The operator's roots answer it at the retry: marked, and the client never sees it. */
            if (++npinned > PINNED_MAX) {
                snprintf(why, whysz, "the upstream asked for the roots more than %d times in one result", PINNED_MAX);
                tg_buf_dispose(&keys);
                return -1;
            }
            tg_buf_append(&keys, PINNED_KEY, 1);
            tg_buf_append(&keys, r->string, strlen(r->string) + 1);
            cJSON_Delete(cJSON_DetachItemViaPointer(reqs, r));
            continue;
        }
        if (!(bit & c->client_caps)) {
            /* "capability:" + its name, for the caller's -32021 */
            if (kind != NULL)
                snprintf(why, whysz, "capability:%s", kind);
            else
                snprintf(why, whysz, "the upstream asked for input of an unknown kind: %.60s",
                         cJSON_IsString(m) ? m->valuestring : "(no method)");
            tg_buf_dispose(&keys);
            return kind != NULL ? -2 : -1;
        }
        tg_buf_append(&keys, r->string, strlen(r->string) + 1);
    }
    if (reqs != NULL && reqs->child == NULL)
        cJSON_DeleteItemFromObjectCaseSensitive(result, "inputRequests"); /* all pinned: the retry needs only the state */
    int rc = seal(t, result, c, now_ms, &keys, state ? 'u' : 'm', state ? state->valuestring : NULL);
    if (rc != 0)
        snprintf(why, whysz, "the gateway could not seal the upstream's requestState");
    tg_buf_dispose(&keys);
    return rc;
}

/* Seal (flag, inner) for c with the keys issued, as result's requestState. The plaintext: 'u'
 * and the upstream's state, 'm' when the gateway minted it, 'p' and the id of a call the gateway
 * holds open upstream. */
static int seal(struct tg_mcp_mrtr *t, cJSON *result, struct tg_mcp_mrtr_call *c, int64_t now_ms,
                const struct tg_buf *keys, char flag, const char *inner)
{
    if (tg_mcp_mrtr_digest(c) != 0)
        return -1; /* nothing to bind the envelope to: no envelope */
    struct tg_buf plain, token;
    tg_buf_init(&plain);
    tg_buf_init(&token);
    tg_buf_append(&plain, &flag, 1);
    if (inner)
        tg_buf_appends(&plain, inner);
    int rc = tg_mcp_state_seal(t->key, &c->b, keys->base ? keys->base : "", keys->len, now_ms + ENVELOPE_TTL_MS,
                               plain.base, plain.len, &token);
    if (rc == 0 && token.len > ID_CHARS && t->shared) {
        /* A cluster: any member may take the retry; the ring holds the envelopes used here. */
        cJSON_DeleteItemFromObjectCaseSensitive(result, "requestState");
        cJSON_AddStringToObject(result, "requestState", token.base);
    } else if (rc == 0 && token.len > ID_CHARS) {
        struct issued *slot = &t->ring[t->next];
        t->next = (t->next + 1) % t->max; /* the oldest is forgotten: it can no longer be used */
        memcpy(slot->id, token.base, ID_CHARS);
        slot->id[ID_CHARS] = '\0';
        slot->expires_ms = now_ms + ENVELOPE_TTL_MS;
        cJSON_DeleteItemFromObjectCaseSensitive(result, "requestState");
        cJSON_AddStringToObject(result, "requestState", token.base);
    } else {
        rc = -1;
    }
    tg_buf_dispose(&plain);
    tg_buf_dispose(&token);
    return rc == 0 ? 0 : -1;
}

int tg_mcp_mrtr_seal_parked(struct tg_mcp_mrtr *t, cJSON *result, struct tg_mcp_mrtr_call *c, int64_t now_ms,
                            const char *parked)
{
    struct tg_buf keys;
    tg_buf_init(&keys);
    cJSON *reqs = tg_json_get(result, "inputRequests");
    for (cJSON *r = reqs ? reqs->child : NULL; r != NULL; r = r->next)
        tg_buf_append(&keys, r->string, strlen(r->string) + 1);
    int rc = seal(t, result, c, now_ms, &keys, 'p', parked);
    tg_buf_dispose(&keys);
    return rc;
}

/* Take an issued envelope out (single use): 1 if it was there. */
static int take_issued(struct tg_mcp_mrtr *t, const char *token, int64_t now_ms)
{
    if (strlen(token) <= ID_CHARS)
        return 0;
    if (t->shared) {
        /* Sealed by a member (the seal verified): good once here, so not in the used ring. */
        for (size_t i = 0; i < t->max; i++)
            if (t->ring[i].id[0] != '\0' && t->ring[i].expires_ms > now_ms && memcmp(t->ring[i].id, token, ID_CHARS) == 0)
                return 0;
        struct issued *slot = &t->ring[t->next];
        t->next = (t->next + 1) % t->max;
        memcpy(slot->id, token, ID_CHARS);
        slot->id[ID_CHARS] = '\0';
        slot->expires_ms = now_ms + ENVELOPE_TTL_MS;
        return 1;
    }
    for (size_t i = 0; i < t->max; i++) {
        struct issued *s = &t->ring[i];
        if (s->id[0] != '\0' && s->expires_ms > now_ms && memcmp(s->id, token, ID_CHARS) == 0) {
            s->id[0] = '\0';
            return 1;
        }
    }
    return 0;
}

/* k is a key issued to the client (never one the pinned roots answer: those are PINNED_KEY k). */
static int key_issued(const struct tg_buf *keys, const char *k)
{
    for (size_t off = 0; off < keys->len;) {
        const char *s = keys->base + off;
        if (s[0] != PINNED_KEY[0] && strcmp(s, k) == 0)
            return 1;
        off += strlen(s) + 1;
    }
    return 0;
}

/* The pinned roots, as the answer to each key the envelope marks (an empty list if the roots
 * were unpinned since: the client was never asked, and nothing is what fails closed). */
static void answer_pinned(const struct tg_buf *keys, cJSON *params, const char *pinned)
{
    for (size_t off = 0; off < keys->len;) {
        const char *s = keys->base + off;
        off += strlen(s) + 1;
        if (s[0] != PINNED_KEY[0])
            continue;
        cJSON *resp = tg_json_get(params, "inputResponses");
        if (resp == NULL)
            resp = cJSON_AddObjectToObject(params, "inputResponses");
        cJSON *roots = cJSON_Parse(pinned != NULL ? pinned : "{\"roots\":[]}"); /* the conf's: always parses */
        cJSON_DeleteItemFromObjectCaseSensitive(resp, s + 1);
        cJSON_AddItemToObject(resp, s + 1, roots != NULL ? roots : cJSON_CreateObject());
    }
}

int tg_mcp_mrtr_retry(struct tg_mcp_mrtr *t, cJSON *params, struct tg_mcp_mrtr_call *c, int64_t now_ms,
                      char *parked, size_t psz, char *why, size_t whysz)
{
    cJSON *state = tg_json_get(params, "requestState");
    cJSON *resp = tg_json_get(params, "inputResponses");
    if (state == NULL && resp == NULL)
        return 0;
    if (state == NULL && name_member(c->b.method) != NULL) {
        /* Answers to nothing the gateway asked: they never reach the upstream, and the request
         * goes as a first round (which may ask again). */
        cJSON_DeleteItemFromObjectCaseSensitive(params, "inputResponses");
        return 0;
    }
    if (name_member(c->b.method) == NULL) {
        snprintf(why, whysz, "Invalid params: requestState and inputResponses belong to tools/call, prompts/get and resources/read only");
        return -1;
    }
    if (!cJSON_IsString(state)) {
        snprintf(why, whysz, "Invalid params: a retry must carry the requestState the gateway gave");
        return -1;
    }
    if (resp != NULL && !cJSON_IsObject(resp)) {
        snprintf(why, whysz, "Invalid params: inputResponses must be an object");
        return -1;
    }
    struct tg_buf inner, keys;
    tg_buf_init(&inner);
    tg_buf_init(&keys);
    const char *bad = NULL;
    int rc = -1;
    tg_mcp_mrtr_digest_from(c, params); /* the arguments as the retry has them, before any change */
    if (tg_mcp_state_open(t->key, &c->b, now_ms, tg_slice_cstr(state->valuestring), &inner, &keys, &bad) != 0) {
        snprintf(why, whysz, "Invalid params: requestState does not verify for this call (%s)", bad ? bad : "refused");
        goto out;
    }
    for (cJSON *r = resp ? resp->child : NULL; r != NULL; r = r->next) {
        if (!key_issued(&keys, r->string)) {
            snprintf(why, whysz, "Invalid params: inputResponses answers %.60s, which was never asked", r->string);
            goto out;
        }
        if (!cJSON_IsObject(r)) {
            snprintf(why, whysz, "Invalid params: inputResponses.%.60s must be an object", r->string);
            goto out;
        }
    }
    if (inner.len < 1 || (inner.base[0] != 'u' && inner.base[0] != 'm' && inner.base[0] != 'p') ||
        (inner.base[0] == 'p' && (parked == NULL || inner.len >= psz + 1))) {
        snprintf(why, whysz, "Invalid params: requestState does not verify for this call");
        goto out;
    }
    if (!take_issued(t, state->valuestring, now_ms)) {
        snprintf(why, whysz, "Invalid params: this requestState was already used (each is good for one retry)");
        goto out;
    }
    if (inner.base[0] == 'p') {
        /* A call the gateway holds open upstream: the retry continues it. */
        memcpy(parked, inner.base + 1, inner.len - 1);
        parked[inner.len - 1] = '\0';
        cJSON_DeleteItemFromObjectCaseSensitive(params, "requestState");
        rc = 2;
        goto out;
    }
    answer_pinned(&keys, params, c->pinned_roots);
    if (inner.base[0] == 'm') {
        cJSON_DeleteItemFromObjectCaseSensitive(params, "requestState"); /* the gateway's own: the upstream never saw it */
    } else {
        char *s = tg_xmalloc(inner.len);
        memcpy(s, inner.base + 1, inner.len - 1);
        s[inner.len - 1] = '\0';
        cJSON_SetValuestring(state, s);
        free(s);
    }
    rc = 1;
out:
    tg_buf_dispose(&inner);
    tg_buf_dispose(&keys);
    return rc;
}
