#include "core/call/audit_chain.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/base/ecsign.h"
#include "core/base/json.h"
#include "core/base/log.h"
#include "core/base/sha256.h"
#include "policy/policy.h"

struct tg_audit_chain {
    int has_prev;
    char prev[65]; /* hex event_hash of the last line of the chain */
    uint64_t seq;  /* its seq (0: none yet) */
    cJSON *in_force; /* {conf:{file,sha256}, instance, policies:{path:sha256}} */
    struct tg_ecsign *key;
    char *key_path;
};

struct tg_audit_chain *tg_audit_chain_new(void) { return tg_xcalloc(1, sizeof(struct tg_audit_chain)); }

void tg_audit_chain_free(struct tg_audit_chain *c)
{
    if (c == NULL)
        return;
    cJSON_Delete(c->in_force);
    tg_ecsign_free(c->key);
    free(c->key_path);
    free(c);
}

/* How deep a line of ours can nest: a client's arguments sit one level down, and they can be as
 * deep as a request may be (limits.json_depth, at most 1000). */
#define LINE_DEPTH 1024

/* A line the chain can continue from: a JSON object with a 64-hex event_hash and a seq. */
static int take_line(struct tg_audit_chain *c, const char *p, size_t n)
{
    struct tg_json_doc doc = {0};
    const char *why;
    size_t off;
    if (tg_json_parse(p, n, LINE_DEPTH, 1, &doc, &why, &off) != 0)
        return -1;
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(doc.root, "event_hash");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(doc.root, "seq");
    int ok = cJSON_IsString(h) && strlen(h->valuestring) == 64 && strspn(h->valuestring, "0123456789abcdef") == 64 &&
             cJSON_IsNumber(s) && s->valuedouble >= 1 && s->valuedouble < 9007199254740992.0;
    if (ok) {
        memcpy(c->prev, h->valuestring, 65);
        c->has_prev = 1;
        c->seq = (uint64_t)s->valuedouble;
    }
    cJSON_Delete(doc.root);
    return ok ? 0 : -1;
}

/* How far back a last line is looked for: a line holds at most a request's arguments. */
#define TAIL_MAX (64u << 20)

int tg_audit_chain_resume(struct tg_audit_chain *c, int wfd, const char *path)
{
    struct stat st, wst;
    /* Read through a descriptor of its own: the writer's is write-only (and may be a pipe). */
    if (fstat(wfd, &wst) != 0 || !S_ISREG(wst.st_mode) || wst.st_size == 0)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return 0;
    if (fstat(fd, &st) != 0 || st.st_ino != wst.st_ino || st.st_dev != wst.st_dev || st.st_size == 0) {
        close(fd);
        return 0;
    }
    off_t size = st.st_size;
    char last;
    if (pread(fd, &last, 1, size - 1) != 1) {
        close(fd);
        return 0;
    }
    int torn = last != '\n';
    /* Read backwards until the line before the last newline is whole. */
    size_t want = 4096;
    struct tg_buf b;
    tg_buf_init(&b);
    for (;;) {
        size_t n = (off_t)want < size ? want : (size_t)size;
        b.len = 0;
        if (tg_buf_try_reserve(&b, n, 0) != 0)
            abort();
        ssize_t r = pread(fd, b.base, n, size - (off_t)n);
        if (r != (ssize_t)n)
            break;
        b.len = n;
        size_t end = n; /* just after the last newline */
        while (end > 0 && b.base[end - 1] != '\n')
            end--;
        if (end == 0 && (off_t)n < size && n < TAIL_MAX) {
            want *= 4;
            continue;
        }
        size_t start = end > 0 ? end - 1 : 0;
        while (start > 0 && b.base[start - 1] != '\n')
            start--;
        if (end > 0 && (start > 0 || (off_t)n == size)) {
            if (take_line(c, b.base + start, end - 1 - start) != 0)
                tg_log(TG_LOG_WARN, "the audit file's last line is not a chained line: a new chain starts", "file=%s",
                       path);
            break;
        }
        if (end == 0 && (off_t)n == size)
            break; /* not one whole line: only torn bytes */
        if ((off_t)n == size || n >= TAIL_MAX) {
            tg_log(TG_LOG_WARN, "the audit file's last line could not be read: a new chain starts", "file=%s", path);
            break;
        }
        want *= 4;
    }
    tg_buf_dispose(&b);
    close(fd);
    if (torn)
        tg_log(TG_LOG_WARN, "the audit file ends inside a line (a write cut short): it is left as it is", "file=%s",
               path);
    return torn;
}

void tg_audit_chain_adopt(struct tg_audit_chain *to, const struct tg_audit_chain *from)
{
    if (to->has_prev || !from->has_prev)
        return; /* its file had a chain of its own, or there is nothing to continue */
    memcpy(to->prev, from->prev, sizeof(to->prev));
    to->has_prev = 1;
    to->seq = from->seq;
}

/* policies[PATH] = the file's SHA-256, each file once by its real path (./a/../p.json is p.json). */
static void add_policy(cJSON *pol, const char *path, const struct tg_policy *p)
{
    const char *h = p ? tg_policy_file_sha256(p) : NULL;
    if (path == NULL || h == NULL)
        return;
    char *real = realpath(path, NULL);
    const char *name = real ? real : path;
    if (!cJSON_GetObjectItemCaseSensitive(pol, name))
        cJSON_AddStringToObject(pol, name, h);
    free(real);
}

void tg_audit_chain_set_conf(struct tg_audit_chain *c, const struct tg_conf *conf)
{
    cJSON *f = cJSON_CreateObject();
    cJSON *cf = cJSON_AddObjectToObject(f, "conf");
    char *abs = conf->path ? realpath(conf->path, NULL) : NULL;
    cJSON_AddStringToObject(cf, "file", abs ? abs : conf->path ? conf->path : "");
    free(abs);
    cJSON_AddStringToObject(cf, "sha256", conf->sha256);
    char host[256] = "";
    if (conf->cluster.enabled && conf->cluster.instance)
        snprintf(host, sizeof(host), "%s", conf->cluster.instance);
    else if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "unknown");
    cJSON_AddStringToObject(f, "instance", host);
    cJSON *pol = cJSON_AddObjectToObject(f, "policies");
    for (size_t i = 0; i < conf->nupstreams; i++) {
        const struct tg_upstream_conf *u = &conf->upstreams[i];
        add_policy(pol, u->policy_path, u->policy);
    }
    for (size_t g = 0; g < conf->ngrants; g++)
        for (size_t i = 0; i < conf->grants[g].npolicies; i++)
            add_policy(pol, conf->grants[g].policies[i].path, conf->grants[g].policies[i].policy);
    cJSON_Delete(c->in_force);
    c->in_force = f;
    /* The key is read again at every start and reload, so that one replaced in its file signs from
     * the reload on (what `tollgate audit pubkey -c CONF` prints); if it cannot be read, the one
     * loaded before from the same file signs on. */
    const char *kp = conf->audit.signing_key;
    struct tg_ecsign *k = NULL;
    char why[512] = "";
    if (kp != NULL)
        k = tg_ecsign_load(kp, why, sizeof(why));
    int same = kp != NULL && c->key_path != NULL && strcmp(c->key_path, kp) == 0;
    if (k != NULL || !same) {
        tg_ecsign_free(c->key);
        c->key = k;
        free(c->key_path);
        c->key_path = kp ? tg_xstrdup(kp) : NULL;
    }
    if (kp != NULL && k == NULL)
        tg_log(TG_LOG_ERROR,
               c->key ? "the audit signing key cannot be read again: the one loaded before signs on"
                      : "audit checkpoints are written unsigned: the signing key cannot be loaded",
               "file=%s error=\"%s\"", kp, why);
}

void tg_audit_chain_put_prev(const struct tg_audit_chain *c, struct tg_buf *b)
{
    if (!c->has_prev) {
        tg_buf_appends(b, ",\"previous_hash\":null");
        return;
    }
    static const char key[] = ",\"previous_hash\":\"";
    tg_buf_append(b, key, sizeof(key) - 1);
    tg_buf_append(b, c->prev, 64);
    tg_buf_append(b, "\"", 1);
}

void tg_audit_chain_put_seq(const struct tg_audit_chain *c, struct tg_buf *b)
{
    tg_buf_append(b, ",\"seq\":", 7);
    tg_buf_append_u64(b, c->seq + 1);
}

void tg_audit_chain_seal(struct tg_audit_chain *c, struct tg_buf *b, size_t mark, int canonical)
{
    uint8_t h[32];
    struct tg_json_doc doc = {0};
    const char *why;
    size_t off;
    if (canonical) {
        tg_sha256(b->base + mark, b->len - mark, h);
    } else if (tg_json_parse(b->base + mark, b->len - mark, LINE_DEPTH, 1, &doc, &why, &off) == 0) {
        struct tg_buf cf;
        tg_buf_init(&cf);
        tg_json_canon_as_written(&cf, doc.root);
        tg_sha256(cf.base, cf.len, h);
        tg_buf_dispose(&cf);
        cJSON_Delete(doc.root);
    } else {
        /* Not JSON: cannot happen for lines of ours; hashed as bytes, verify will say so. */
        tg_log(TG_LOG_ERROR, "an audit line is not JSON: hashed as it is", "why=\"%s\" offset=%zu", why, off);
        tg_sha256(b->base + mark, b->len - mark, h);
    }
    tg_hex_encode(h, 32, c->prev);
    c->has_prev = 1;
    c->seq++;
    b->len--; /* the closing brace: event_hash comes last */
    static const char key[] = ",\"event_hash\":\"";
    tg_buf_append(b, key, sizeof(key) - 1);
    tg_buf_append(b, c->prev, 64);
    tg_buf_append(b, "\"}\n", 3);
}

/* {"checkpoint":{…},"previous_hash":…,"seq":…[,"signature":…],"time":…} without event_hash. */
static void checkpoint_body(const struct tg_audit_chain *c, struct tg_buf *b, const char *body, const char *sig,
                            const char *stamp)
{
    tg_buf_appends(b, "{\"checkpoint\":");
    tg_buf_appends(b, body);
    tg_audit_chain_put_prev(c, b);
    tg_audit_chain_put_seq(c, b);
    if (sig != NULL) {
        tg_buf_appends(b, ",\"signature\":\"");
        tg_buf_appends(b, sig);
        tg_buf_append(b, "\"", 1);
    }
    tg_buf_appends(b, ",\"time\":");
    tg_json_write_string(b, stamp, strlen(stamp));
    tg_buf_append(b, "}", 1);
}

void tg_audit_chain_checkpoint(struct tg_audit_chain *c, struct tg_buf *b, const char *reason, uint64_t records,
                               uint64_t dropped, const char *stamp)
{
    cJSON *cp = c->in_force ? cJSON_Duplicate(c->in_force, 1) : cJSON_CreateObject();
    char num[24];
    /* Counts as integer text (a double prints 1e+20 past 2^53; these never get there). */
    snprintf(num, sizeof(num), "%" PRIu64, dropped);
    cJSON_AddRawToObject(cp, "dropped", num);
    if (c->key)
        cJSON_AddStringToObject(cp, "key_sha256", tg_ecsign_key_sha256(c->key));
    cJSON_AddStringToObject(cp, "reason", reason);
    snprintf(num, sizeof(num), "%" PRIu64, records);
    cJSON_AddRawToObject(cp, "records", num);
    struct tg_buf body;
    tg_buf_init(&body);
    tg_json_canon_as_written(&body, cp);
    tg_buf_append(&body, "", 1);
    cJSON_Delete(cp);
    char sig[128];
    const char *s = NULL;
    if (c->key != NULL) {
        struct tg_buf pre;
        tg_buf_init(&pre);
        checkpoint_body(c, &pre, body.base, NULL, stamp);
        uint8_t h[32];
        tg_sha256(pre.base, pre.len, h);
        tg_buf_dispose(&pre);
        if (tg_ecsign_sign(c->key, h, sig, sizeof(sig)) == 0)
            s = sig;
        else
            tg_log(TG_LOG_ERROR, "an audit checkpoint could not be signed: written unsigned", "file=%s", c->key_path);
    }
    size_t mark = b->len;
    checkpoint_body(c, b, body.base, s, stamp);
    tg_buf_dispose(&body);
    tg_audit_chain_seal(c, b, mark, 1);
}

const char *tg_audit_disposition(const char *d)
{
    /* by the first letters: allow approve approved cancelled deny expired limited rejected refused unavailable */
    if (d == NULL)
        return "error";
    if (d[0] == 'a')
        return strcmp(d, "approve") == 0 ? "deferred" : "allowed"; /* allow, approved */
    if (d[0] == 'u')
        return "error";
    return "denied";
}
