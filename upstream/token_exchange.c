/* RFC 8693 token exchange and its cache (upstream/token_exchange.h). The HTTP exchange itself is
 * upstream/fetch.c's: one POST, on the loop, its TLS checked against token_exchange.ca or the
 * system CAs. */
#include "upstream/token_exchange.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/base/json.h"
#include "core/base/sha256.h"
#include "core/base/log.h"
#include "core/conf/conf.h"
#include "upstream/fetch.h"

#define NBUCKETS 1024
#define TX_BODY_MAX 65536    /* the endpoint's answer */
#define TX_TOKEN_MAX 8192    /* an exchanged token that goes into a header */
#define TX_TIMEOUT_MS 10000
#define TX_MARGIN_MAX_MS 30000

/* One key's token, or its exchange in flight. Owner: the cache (its bucket chain and its list);
 * freed by evict() or tg_tx_cache_free(). */
struct tg_tx_entry {
    uint8_t key[32];
    struct tg_tx_entry *hnext;
    struct tg_list node;    /* c->entries, oldest fill first */
    struct tg_tx_cache *c;
    char *token;            /* NULL: none (yet) */
    size_t token_len;
    uint64_t fresh_until;   /* loop ms: used until then */
    struct tg_fetch *fetch; /* the exchange in flight, or NULL */
    struct tg_list waiters; /* struct tg_tx_wait */
};

struct tg_tx_cache {
    uv_loop_t *loop;
    size_t max_entries, max_bytes;
    size_t count, bytes;
    uint64_t ok, failed, hits, evictions, refused;
    struct tg_list entries;
    struct tg_tx_entry *buckets[NBUCKETS];
    /* the HTTP client (a unit test puts a fake here) */
    struct tg_fetch *(*fetch_start)(uv_loop_t *loop, const struct tg_fetch_opts *o, tg_fetch_cb cb, void *ud,
                                    const char **why);
    void (*fetch_cancel)(struct tg_fetch *f);
};

struct tg_tx_cache *tg_tx_cache_new(uv_loop_t *loop, size_t max_entries, size_t max_bytes)
{
    struct tg_tx_cache *c = tg_xcalloc(1, sizeof(*c));
    c->loop = loop;
    c->max_entries = max_entries;
    c->max_bytes = max_bytes;
    tg_list_init(&c->entries);
    c->fetch_start = tg_fetch_start;
    c->fetch_cancel = tg_fetch_cancel;
    return c;
}

static struct tg_tx_entry **slot_of(struct tg_tx_cache *c, const uint8_t key[32])
{
    struct tg_tx_entry **p = &c->buckets[(key[0] | (unsigned)key[1] << 8) % NBUCKETS];
    while (*p != NULL && memcmp((*p)->key, key, 32) != 0)
        p = &(*p)->hnext;
    return p;
}

static void forget_token(struct tg_tx_entry *e)
{
    if (e->token == NULL)
        return;
    e->c->bytes -= e->token_len;
    memset(e->token, 0, e->token_len);
    free(e->token);
    e->token = NULL;
    e->token_len = 0;
}

/* Out of the cache and freed: nobody waits for it and no exchange runs for it. */
static void evict(struct tg_tx_entry *e)
{
    struct tg_tx_cache *c = e->c;
    struct tg_tx_entry **p = slot_of(c, e->key);
    if (*p == e)
        *p = e->hnext;
    tg_list_unlink(&e->node);
    forget_token(e);
    c->bytes -= sizeof(*e);
    c->count--;
    free(e);
}

/* Room for n more entries and more bytes: the oldest idle ones go (never keep, nor one with an
 * exchange in flight or a waiter: the bounds may be passed by those for a while). */
static void make_room(struct tg_tx_cache *c, size_t n, size_t more, const struct tg_tx_entry *keep)
{
    struct tg_list *l = c->entries.next;
    while (l != &c->entries && (c->count + n > c->max_entries || c->bytes + more > c->max_bytes)) {
        struct tg_tx_entry *e = tg_container_of(l, struct tg_tx_entry, node);
        l = l->next;
        if (e == keep || e->fetch != NULL || !tg_list_empty(&e->waiters))
            continue;
        evict(e);
        c->evictions++;
    }
}

void tg_tx_wait_cancel(struct tg_tx_wait *w)
{
    if (w->_e == NULL)
        return;
    tg_list_unlink(&w->node);
    w->_e = NULL;
}

void tg_tx_cache_free(struct tg_tx_cache *c)
{
    if (c == NULL)
        return;
    while (!tg_list_empty(&c->entries)) {
        struct tg_tx_entry *e = tg_container_of(c->entries.next, struct tg_tx_entry, node);
        if (e->fetch != NULL)
            c->fetch_cancel(e->fetch);
        e->fetch = NULL;
        while (!tg_list_empty(&e->waiters)) {
            struct tg_tx_wait *w = tg_container_of(e->waiters.next, struct tg_tx_wait, node);
            tg_tx_wait_cancel(w);
            w->cb(w->ud, NULL, "token exchange failed: the gateway is shutting down");
        }
        evict(e);
    }
    free(c);
}

/* What the endpoint said, judged: the token (0) or why not (-1). RFC 8693 2.2.1: access_token,
 * issued_token_type, token_type; expires_in recommended. */
static int judge(const struct tg_fetch_result *res, const char **tok, size_t *tok_len, double *expires_in, char *why,
                 size_t whysz)
{
    if (res->err != 0) {
        snprintf(why, whysz, "token exchange failed: %s", res->why ? res->why : "the endpoint could not be reached");
        return -1;
    }
    struct tg_json_doc doc;
    int parsed = res->body != NULL && tg_json_parse(res->body, res->len, 16, 1, &doc, NULL, NULL) == 0;
    cJSON *root = parsed ? doc.root : NULL;
    int rc = -1;
    if (res->status != 200) {
        cJSON *err = tg_json_get(root, "error");
        const char *code = cJSON_IsString(err) ? err->valuestring : NULL;
        if (code != NULL && (strlen(code) > 64 || !tg_header_value_safe(code, strlen(code))))
            code = NULL; /* the endpoint's words, shown to the client: short and plain only */
        snprintf(why, whysz, "token exchange failed: the endpoint answered HTTP %d%s%s%s", res->status,
                 code ? " (" : "", code ? code : "", code ? ")" : "");
        goto out;
    }
    if (!cJSON_IsObject(root)) {
        snprintf(why, whysz, "token exchange failed: the endpoint's answer is not a JSON object");
        goto out;
    }
    cJSON *at = tg_json_get(root, "access_token");
    cJSON *tt = tg_json_get(root, "token_type");
    cJSON *ex = tg_json_get(root, "expires_in");
    if (!cJSON_IsString(at) || at->valuestring[0] == '\0') {
        snprintf(why, whysz, "token exchange failed: the endpoint's answer has no access_token");
        goto out;
    }
    if (strlen(at->valuestring) > TX_TOKEN_MAX || !tg_header_value_safe(at->valuestring, strlen(at->valuestring)) ||
        strchr(at->valuestring, ' ') != NULL) {
        snprintf(why, whysz, "token exchange failed: the endpoint's access_token cannot go in a header");
        goto out;
    }
    /* N_A: the token is not an OAuth access token as such (RFC 8693 2.2.1), but it is what the
     * upstream was meant to get, as a bearer credential. DPoP and others cannot be used here. */
    if (!cJSON_IsString(tt) || (strcasecmp(tt->valuestring, "Bearer") != 0 && strcmp(tt->valuestring, "N_A") != 0)) {
        snprintf(why, whysz, "token exchange failed: the endpoint's token_type is not Bearer or N_A");
        goto out;
    }
    if (ex != NULL && (!cJSON_IsNumber(ex) || ex->valuedouble < 0)) {
        snprintf(why, whysz, "token exchange failed: the endpoint's expires_in is not a number of seconds");
        goto out;
    }
    *expires_in = ex != NULL ? ex->valuedouble : -1;
    /* Copied out before the tree goes. */
    *tok_len = strlen(at->valuestring);
    char *t = malloc(*tok_len + 1);
    if (t == NULL)
        abort();
    memcpy(t, at->valuestring, *tok_len + 1);
    memset(at->valuestring, 0, *tok_len);
    *tok = t;
    rc = 0;
out:
    if (parsed)
        cJSON_Delete(doc.root);
    return rc;
}

static void on_exchanged(void *ud, const struct tg_fetch_result *res)
{
    struct tg_tx_entry *e = ud;
    struct tg_tx_cache *c = e->c;
    e->fetch = NULL;
    char why[256];
    const char *tok = NULL;
    size_t tok_len = 0;
    double expires_in = -1;
    int rc = judge(res, &tok, &tok_len, &expires_in, why, sizeof(why));
    forget_token(e);
    if (rc == 0) {
        c->ok++;
        e->token = (char *)tok;
        e->token_len = tok_len;
        c->bytes += tok_len;
        uint64_t life = expires_in > 0 ? (uint64_t)(expires_in > 1e9 ? 1e12 : expires_in * 1000) : 0;
        uint64_t margin = life / 4 < TX_MARGIN_MAX_MS ? life / 4 : TX_MARGIN_MAX_MS;
        e->fresh_until = uv_now(c->loop) + life - margin;
        tg_list_unlink(&e->node); /* newest now */
        tg_list_insert_tail(&c->entries, &e->node);
        make_room(c, 0, 0, e); /* within max_bytes again */
    } else {
        c->failed++;
        tg_log(TG_LOG_WARN, "token exchange failed", "why=%s", why);
    }
    /* Every waiter hears it; each is unlinked before its callback, which may wait again. */
    struct tg_list ws;
    tg_list_init(&ws);
    while (!tg_list_empty(&e->waiters)) {
        struct tg_list *l = e->waiters.next;
        tg_list_unlink(l);
        tg_list_insert_tail(&ws, l);
    }
    char *copy = NULL; /* the token outlives evictions the callbacks may cause */
    if (rc == 0) {
        copy = malloc(e->token_len + 1);
        if (copy == NULL)
            abort();
        memcpy(copy, e->token, e->token_len + 1);
    }
    size_t copy_len = e->token_len;
    if (rc != 0 || e->fresh_until <= uv_now(c->loop))
        evict(e); /* a failure, or a token not to keep */
    while (!tg_list_empty(&ws)) {
        struct tg_tx_wait *w = tg_container_of(ws.next, struct tg_tx_wait, node);
        tg_list_unlink(&w->node);
        w->_e = NULL;
        w->cb(w->ud, copy, rc == 0 ? NULL : why);
    }
    if (copy != NULL) {
        memset(copy, 0, copy_len);
        free(copy);
    }
}

int tg_tx_get(struct tg_tx_cache *c, const struct tg_token_exchange_conf *x, const uint8_t key[32],
              struct tg_slice subject_token, struct tg_tx_wait *w, tg_tx_cb cb, void *ud, const char **token,
              char *why, size_t whysz)
{
    uint64_t now = uv_now(c->loop);
    struct tg_tx_entry **p = slot_of(c, key);
    struct tg_tx_entry *e = *p;
    if (e != NULL && e->token != NULL && now < e->fresh_until) {
        c->hits++;
        *token = e->token;
        return 0;
    }
    if (e == NULL) {
        make_room(c, 1, sizeof(*e), NULL);
        e = tg_xcalloc(1, sizeof(*e));
        memcpy(e->key, key, 32);
        e->c = c;
        tg_list_init(&e->waiters);
        tg_list_insert_tail(&c->entries, &e->node);
        p = slot_of(c, key); /* make_room may have changed the chain */
        e->hnext = *p;
        *p = e;
        c->count++;
        c->bytes += sizeof(*e);
    }
    if (e->fetch == NULL) {
        /* The request body: the subject token form-encoded (a JWT is base64url and dots: as is). */
        struct tg_buf b;
        tg_buf_init(&b);
        tg_buf_appends(&b, "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange"
                           "&subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token"
                           "&subject_token=");
        for (size_t i = 0; i < subject_token.len; i++) {
            unsigned char ch = (unsigned char)subject_token.ptr[i];
            if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-' ||
                ch == '.' || ch == '_' || ch == '~')
                tg_buf_append(&b, (const char *)&ch, 1);
            else
                tg_buf_appendf(&b, "%%%02X", ch);
        }
        tg_buf_appends(&b, x->form_tail ? x->form_tail : "");
        struct tg_fetch_opts o = {
            .method = "POST",
            .url = x->token_endpoint,
            .ca_file = x->ca,
            .headers = x->headers,
            .body = b.base,
            .body_len = b.len,
            .max_bytes = TX_BODY_MAX,
            .timeout_ms = TX_TIMEOUT_MS,
        };
        const char *fw = NULL;
        e->fetch = c->fetch_start(c->loop, &o, on_exchanged, e, &fw);
        memset(b.base, 0, b.len);
        tg_buf_dispose(&b);
        if (e->fetch == NULL) {
            snprintf(why, whysz, "token exchange failed: %s", fw ? fw : "cannot start");
            c->failed++;
            if (tg_list_empty(&e->waiters))
                evict(e);
            return -1;
        }
    }
    w->_e = e;
    w->cb = cb;
    w->ud = ud;
    tg_list_insert_tail(&e->waiters, &w->node);
    return 1;
}

int tg_tx_refused(struct tg_tx_cache *c, const uint8_t key[32], const uint8_t token_sha256[32])
{
    if (c == NULL)
        return 0;
    struct tg_tx_entry *e = *slot_of(c, key);
    if (e == NULL || e->token == NULL || e->fetch != NULL)
        return 0;
    uint8_t d[32];
    tg_sha256(e->token, e->token_len, d);
    if (memcmp(d, token_sha256, 32) != 0)
        return 0;
    c->refused++;
    if (tg_list_empty(&e->waiters))
        evict(e);
    else
        forget_token(e);
    return 1;
}

void tg_tx_metrics(const struct tg_tx_cache *c, struct tg_buf *out)
{
    tg_buf_appendf(out,
                   "# HELP tollgate_token_exchange_cached Upstream tokens from RFC 8693 exchanges held in memory.\n"
                   "# TYPE tollgate_token_exchange_cached gauge\n"
                   "tollgate_token_exchange_cached %zu\n"
                   "# HELP tollgate_token_exchange_cached_bytes Memory of the exchanged-token cache.\n"
                   "# TYPE tollgate_token_exchange_cached_bytes gauge\n"
                   "tollgate_token_exchange_cached_bytes %zu\n"
                   "# HELP tollgate_token_exchanges_total RFC 8693 token exchanges by result.\n"
                   "# TYPE tollgate_token_exchanges_total counter\n"
                   "tollgate_token_exchanges_total{result=\"ok\"} %llu\n"
                   "tollgate_token_exchanges_total{result=\"failed\"} %llu\n"
                   "# HELP tollgate_token_exchange_hits_total Upstream calls that used a cached exchanged token.\n"
                   "# TYPE tollgate_token_exchange_hits_total counter\n"
                   "tollgate_token_exchange_hits_total %llu\n"
                   "# HELP tollgate_token_exchange_evictions_total Cached exchanged tokens evicted to stay within "
                   "bounds.\n"
                   "# TYPE tollgate_token_exchange_evictions_total counter\n"
                   "tollgate_token_exchange_evictions_total %llu\n"
                   "# HELP tollgate_token_exchange_refused_total Exchanged tokens an upstream refused (HTTP 401), "
                   "dropped from the cache.\n"
                   "# TYPE tollgate_token_exchange_refused_total counter\n"
                   "tollgate_token_exchange_refused_total %llu\n",
                   c ? c->count : 0, c ? c->bytes : 0, (unsigned long long)(c ? c->ok : 0),
                   (unsigned long long)(c ? c->failed : 0), (unsigned long long)(c ? c->hits : 0),
                   (unsigned long long)(c ? c->evictions : 0), (unsigned long long)(c ? c->refused : 0));
}
