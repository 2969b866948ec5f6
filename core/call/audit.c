#include "core/call/audit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/call/audit_chain.h"
#include "policy/auth.h"

/* The audit log's writer. Owner: the server (srv->audit), made by tg_audit_open() at start or
 * when a reload names another file; tg_audit_close() marks it closing, and finish_close() frees
 * it once the write in flight, if any, has ended. */
struct tg_audit {
    uv_loop_t *loop;
    char *path;
    int fd;
    int old_fd; /* replaced by a reopen while a write held it: closed when that write ends */
    struct tg_buf pending;
    struct tg_buf writing;
    uv_fs_t req;
    uv_prepare_t flush; /* active while pending holds records: writes them before the loop polls (and,
                         * like a write in flight, keeps the loop alive until then) */
    int direct; /* fd is a regular file: the loop writes it itself (see audit.h) */
    int busy;   /* a uv_fs_write in flight (not direct) */
    int closing;
    size_t max_pending;
    size_t pending_n, writing_n; /* records in pending and in writing */
    int failing;                 /* the last write failed: logged once, until one succeeds */
    int torn;                    /* the file ends inside a record (a short write, then a failure):
                                  * the next batch starts with a newline, so that the torn record
                                  * is a line of its own and the next one is whole */
    uint64_t dropped, written;   /* records: lost, and on disk */
    time_t stamp_sec;
    char stamp[32];
    /* The hash chain (audit.chain; NULL without): checkpoints every checkpoint_lines records, or
     * at the timer's tick when a record came since the last one. */
    struct tg_audit_chain *chain;
    uv_timer_t tick;
    int handles; /* flush, and tick with a chain: open handles; freed when both closed */
    int started; /* the start checkpoint is written (tg_audit_set_conf) */
    int checkpoint_lines;
    uint64_t since_checkpoint, checkpoints;
};

static void start_write(struct tg_audit *a);

/* Records are written at the end of the loop iteration, or at once when this many bytes wait. */
#define FLUSH_AT 65536

static void finish_close(struct tg_audit *a)
{
    tg_audit_chain_free(a->chain);
    if (a->fd >= 0)
        close(a->fd);
    if (a->old_fd >= 0)
        close(a->old_fd);
    tg_buf_dispose(&a->pending);
    tg_buf_dispose(&a->writing);
    free(a->path);
    free(a);
}

/* The outcome of writing a->writing: r bytes written, or a libuv error (-errno). */
static void wrote(struct tg_audit *a, ssize_t r)
{
    if (r < 0) {
        /* A full or failing disk fails every write: said once, not once per batch; every record
         * of the batch is lost and counted. */
        if (!a->failing)
            tg_log(TG_LOG_ERROR, "audit write failed; records are dropped until a write succeeds", "file=%s error=\"%s\"",
                   a->path, uv_strerror((int)r));
        a->failing = 1;
        a->dropped += a->writing_n;
        a->writing_n = 0;
        a->writing.len = 0;
    } else if ((size_t)r < a->writing.len) {
        a->torn = a->writing.base[r - 1] != '\n';
        tg_buf_consume(&a->writing, (size_t)r); /* short write: the rest goes next */
    } else {
        a->torn = 0; /* a batch ends with its last record's newline */
        a->written += a->writing_n;
        a->writing_n = 0;
        a->writing.len = 0;
        if (a->failing)
            tg_log(TG_LOG_INFO, "audit writes succeed again", "file=%s dropped_total=%llu", a->path,
                   (unsigned long long)a->dropped);
        a->failing = 0;
    }
}

static void on_written(uv_fs_t *req)
{
    struct tg_audit *a = req->data;
    ssize_t r = req->result;
    uv_fs_req_cleanup(req);
    a->busy = 0;
    if (a->old_fd >= 0) {
        close(a->old_fd);
        a->old_fd = -1;
    }
    wrote(a, r);
    start_write(a);
    if (!a->busy && a->closing && a->handles == 0)
        finish_close(a);
}

static void on_flush(uv_prepare_t *h)
{
    struct tg_audit *a = h->data;
    uv_prepare_stop(h);
    start_write(a);
}

static void on_handle_closed(uv_handle_t *h)
{
    struct tg_audit *a = h->data;
    if (--a->handles == 0 && !a->busy)
        finish_close(a);
}

/* fd's kind decides how it is written (audit.h). */
static int is_regular(int fd)
{
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

static void start_write(struct tg_audit *a)
{
    if (a->busy)
        return;
    if (a->writing.len == 0) {
        if (a->pending.len == 0)
            return;
        struct tg_buf t = a->writing;
        a->writing = a->pending;
        a->pending = t;
        a->pending.len = 0;
        a->writing_n = a->pending_n;
        a->pending_n = 0;
        if (a->torn) {
            if (tg_buf_try_reserve(&a->writing, 1, 0) != 0)
                abort();
            memmove(a->writing.base + 1, a->writing.base, a->writing.len);
            a->writing.base[0] = '\n';
            a->writing.len++;
        }
    }
    if (a->direct) {
        while (a->writing.len > 0) {
            ssize_t r = write(a->fd, a->writing.base, a->writing.len);
            if (r < 0 && errno == EINTR)
                continue;
            /* 0 bytes for a non-empty buffer would loop here for ever: a failure like any other */
            wrote(a, r < 0 ? -errno : r == 0 ? -EIO : r);
        }
        return;
    }
    uv_buf_t b = uv_buf_init(a->writing.base, (unsigned)a->writing.len);
    a->req.data = a;
    a->busy = 1;
    if (uv_fs_write(a->loop, &a->req, a->fd, &b, 1, -1, on_written) != 0) {
        a->busy = 0;
        a->dropped += a->writing_n;
        a->writing_n = 0;
        a->writing.len = 0;
    }
}

static int open_file(const char *path) { return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640); }

static void checkpoint(struct tg_audit *a, const char *reason);

static void on_tick(uv_timer_t *t)
{
    struct tg_audit *a = t->data;
    if (a->since_checkpoint > 0)
        checkpoint(a, "interval");
}

struct tg_audit *tg_audit_open(uv_loop_t *loop, const struct tg_audit_conf *ac, struct tg_buf *err)
{
    if (ac->file == NULL)
        return NULL;
    int fd = open_file(ac->file);
    if (fd < 0) {
        tg_buf_appendf(err, "audit.file: cannot open %s\n", ac->file);
        return NULL;
    }
    struct tg_audit *a = tg_xcalloc(1, sizeof(*a));
    a->loop = loop;
    a->fd = fd;
    a->old_fd = -1;
    a->path = tg_xstrdup(ac->file);
    a->max_pending = (size_t)ac->max_pending;
    a->direct = is_regular(fd);
    uv_prepare_init(loop, &a->flush);
    a->flush.data = a;
    a->handles = 1;
    if (ac->chain) {
        a->chain = tg_audit_chain_new();
        a->torn = tg_audit_chain_resume(a->chain, fd, a->path);
        a->checkpoint_lines = ac->checkpoint_lines;
        uv_timer_init(loop, &a->tick);
        a->tick.data = a;
        uv_unref((uv_handle_t *)&a->tick);
        uint64_t ms = (uint64_t)ac->checkpoint_seconds * 1000;
        uv_timer_start(&a->tick, on_tick, ms, ms);
        a->handles = 2;
    }
    return a;
}

void tg_audit_set_conf(struct tg_audit *a, const struct tg_conf *conf)
{
    if (a == NULL || a->chain == NULL)
        return;
    tg_audit_chain_set_conf(a->chain, conf);
    a->checkpoint_lines = conf->audit.checkpoint_lines;
    uint64_t ms = (uint64_t)conf->audit.checkpoint_seconds * 1000;
    if (uv_timer_get_repeat(&a->tick) != ms)
        uv_timer_start(&a->tick, on_tick, ms, ms);
    checkpoint(a, a->started ? "reload" : "start");
    a->started = 1;
}

void tg_audit_hand_over(struct tg_audit *from, struct tg_audit *to)
{
    if (from != NULL && to != NULL && from->chain != NULL && to->chain != NULL && !to->started)
        tg_audit_chain_adopt(to->chain, from->chain);
}

void tg_audit_close(struct tg_audit *a)
{
    if (a == NULL)
        return;
    if (a->chain != NULL) {
        if (a->started)
            checkpoint(a, "shutdown");
        uv_close((uv_handle_t *)&a->tick, on_handle_closed);
    }
    a->closing = 1;
    start_write(a);
    uv_close((uv_handle_t *)&a->flush, on_handle_closed); /* frees a once no write is in flight */
}

void tg_audit_reopen(struct tg_audit *a)
{
    if (a == NULL)
        return;
    if (a->chain != NULL && a->started) {
        /* The old file ends with a checkpoint, which the new one continues from: written now,
         * to the old descriptor, before the new file is opened. */
        checkpoint(a, "rotate");
        if (a->direct)
            start_write(a);
    }
    int fd = open_file(a->path);
    if (fd < 0) {
        tg_log(TG_LOG_ERROR, "cannot reopen audit file", "file=%s", a->path);
        return;
    }
    /* A write in flight still holds the old descriptor: it is closed when that write ends. */
    if (a->busy) {
        if (a->old_fd >= 0)
            close(a->old_fd); /* a reopen before the previous one's write ended: not in use */
        a->old_fd = a->fd;
    } else {
        close(a->fd);
    }
    a->fd = fd;
    a->direct = is_regular(fd);
    if (a->chain != NULL && tg_audit_chain_resume(a->chain, fd, a->path))
        a->torn = 1;
}

uint64_t tg_audit_dropped(const struct tg_audit *a) { return a ? a->dropped : 0; }
uint64_t tg_audit_written(const struct tg_audit *a) { return a ? a->written : 0; }

void tg_audit_args_hash(const cJSON *args, char out[65])
{
    uint8_t h[32];
    tg_json_digest(args, h);
    tg_hex_encode(h, 32, out);
}

static int redacted(const struct tg_audit_conf *ac, const char *key)
{
    for (size_t i = 0; i < ac->nredact; i++)
        if (strcasecmp(ac->redact[i], key) == 0)
            return 1;
    return 0;
}

static void write_redacted(struct tg_buf *b, const struct tg_audit_conf *ac, const cJSON *v)
{
    if (cJSON_IsObject(v)) {
        tg_buf_append(b, "{", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            tg_json_write_string(b, c->string, strlen(c->string));
            tg_buf_append(b, ":", 1);
            if (redacted(ac, c->string))
                tg_buf_appends(b, "\"[redacted]\"");
            else
                write_redacted(b, ac, c);
            if (c->next)
                tg_buf_append(b, ",", 1);
        }
        tg_buf_append(b, "}", 1);
    } else if (cJSON_IsArray(v)) {
        tg_buf_append(b, "[", 1);
        for (const cJSON *c = v->child; c; c = c->next) {
            write_redacted(b, ac, c);
            if (c->next)
                tg_buf_append(b, ",", 1);
        }
        tg_buf_append(b, "]", 1);
    } else {
        tg_json_write(b, v);
    }
}

char *tg_audit_args_values(const struct tg_audit_conf *ac, const cJSON *args)
{
    if (!ac->values || args == NULL)
        return NULL;
    struct tg_buf b;
    tg_buf_init(&b);
    write_redacted(&b, ac, args);
    tg_buf_append(&b, "", 1);
    return tg_buf_release(&b);
}

/* ---- arguments as text ----------------------------------------------------------------- */
/* A walk over JSON text the gateway already parsed strictly (or wrote itself): tokens are found,
 * never interpreted, so every byte that is not replaced is copied as it came. */

static size_t skip_ws(const char *p, size_t n, size_t i)
{
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r'))
        i++;
    return i;
}

/* i at a string's opening quote: the index after its closing one. */
static size_t string_end(const char *p, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (p[i] == '\\')
            i++;
        else if (p[i] == '"')
            return i + 1;
    }
    return n;
}

static size_t value_end(const char *p, size_t n, size_t i)
{
    if (i >= n)
        return n;
    if (p[i] == '"')
        return string_end(p, n, i);
    if (p[i] == '{' || p[i] == '[') {
        int depth = 0;
        for (; i < n; i++) {
            if (p[i] == '"')
                i = string_end(p, n, i) - 1;
            else if (p[i] == '{' || p[i] == '[')
                depth++;
            else if ((p[i] == '}' || p[i] == ']') && --depth == 0)
                return i + 1;
        }
        return n;
    }
    while (i < n && p[i] != ',' && p[i] != '}' && p[i] != ']' && p[i] != ' ' && p[i] != '\t' && p[i] != '\n' &&
           p[i] != '\r')
        i++;
    return i;
}

/* The value of member `key` (written without escapes) of the object at p[i]: 0 with its span. */
static int member_span(const char *p, size_t n, size_t i, const char *key, size_t *off, size_t *len)
{
    size_t kl = strlen(key);
    i = skip_ws(p, n, i);
    if (i >= n || p[i] != '{')
        return -1;
    i = skip_ws(p, n, i + 1);
    while (i < n && p[i] == '"') {
        size_t ke = string_end(p, n, i);
        int match = ke - i == kl + 2 && memcmp(p + i + 1, key, kl) == 0;
        i = skip_ws(p, n, ke);
        if (i >= n || p[i] != ':')
            return -1;
        i = skip_ws(p, n, i + 1);
        size_t ve = value_end(p, n, i);
        if (match) {
            *off = i;
            *len = ve - i;
            return 0;
        }
        i = skip_ws(p, n, ve);
        if (i >= n || p[i] != ',')
            break;
        i = skip_ws(p, n, i + 1);
    }
    return -1;
}

int tg_audit_args_span(const char *msg, size_t n, size_t *off, size_t *len)
{
    size_t po, pl;
    if (member_span(msg, n, 0, "params", &po, &pl) != 0 || member_span(msg, n, po, "arguments", off, len) != 0)
        return -1;
    return 0;
}

/* Is the key token p[0..n) (with its quotes) one audit.redact names? Decoded first when it has
 * escapes, so that "\u0074oken" is "token". */
static int key_redacted(const struct tg_audit_conf *ac, const char *p, size_t n)
{
    if (ac->nredact == 0 || n < 2)
        return 0;
    if (memchr(p, '\\', n) == NULL) {
        char key[256];
        if (n - 2 >= sizeof(key))
            return 0; /* longer than any name audit.redact can hold */
        memcpy(key, p + 1, n - 2);
        key[n - 2] = '\0';
        return redacted(ac, key);
    }
    struct tg_json_doc doc = {0};
    const char *err;
    size_t eoff;
    int hit = tg_json_parse(p, n, 1, 1, &doc, &err, &eoff) == 0 && cJSON_IsString(doc.root) &&
              redacted(ac, doc.root->valuestring);
    cJSON_Delete(doc.root);
    return hit;
}

static void redact_text(struct tg_buf *b, const struct tg_audit_conf *ac, const char *p, size_t n, size_t *pi)
{
    size_t i = *pi;
    if (i < n && (p[i] == '{' || p[i] == '[')) {
        int obj = p[i] == '{';
        char close = obj ? '}' : ']';
        tg_buf_append(b, p + i, 1);
        i++;
        while (i < n) {
            size_t j = skip_ws(p, n, i);
            tg_buf_append(b, p + i, j - i);
            i = j;
            if (i >= n)
                break;
            if (p[i] == close || p[i] == ',') {
                tg_buf_append(b, p + i, 1);
                if (p[i++] == close)
                    break;
                continue;
            }
            int hide = 0;
            if (obj) {
                size_t ke = string_end(p, n, i);
                hide = key_redacted(ac, p + i, ke - i);
                j = skip_ws(p, n, ke);
                if (j < n && p[j] == ':')
                    j = skip_ws(p, n, j + 1);
                tg_buf_append(b, p + i, j - i); /* the key, the colon and the spaces around it */
                i = j;
            }
            if (hide) {
                tg_buf_appends(b, "\"[redacted]\"");
                i = value_end(p, n, i);
            } else {
                redact_text(b, ac, p, n, &i);
            }
        }
    } else {
        size_t e = value_end(p, n, i);
        tg_buf_append(b, p + i, e - i);
        i = e;
    }
    *pi = i;
}

char *tg_audit_args_text(const struct tg_audit_conf *ac, const char *p, size_t n)
{
    struct tg_buf b;
    tg_buf_init(&b);
    size_t i = skip_ws(p, n, 0);
    redact_text(&b, ac, p, n, &i);
    tg_buf_append(&b, "", 1);
    return tg_buf_release(&b);
}

/* ,"k": with k a literal of ours (no escaping needed). */
#define KEY(b, k) tg_buf_append((b), ",\"" k "\":", sizeof(k) + 3)

static void field_value(struct tg_buf *b, const char *v) { tg_json_write_string(b, v, strlen(v)); }
#define FIELD(b, k, v)                                                                                                 \
    do {                                                                                                               \
        const char *v_ = (v);                                                                                          \
        if (v_ != NULL) {                                                                                              \
            KEY(b, k);                                                                                                 \
            field_value(b, v_);                                                                                        \
        }                                                                                                              \
    } while (0)

/* ms with three decimals, as %.3f prints it for the latencies we see, without printf. */
static void append_ms(struct tg_buf *b, double ms)
{
    if (!(ms < 1e12)) {
        tg_buf_appendf(b, "%.3f", ms);
        return;
    }
    uint64_t v = (uint64_t)(ms * 1000 + 0.5);
    char frac[4] = {(char)('0' + v / 100 % 10), (char)('0' + v / 10 % 10), (char)('0' + v % 10), 0};
    tg_buf_append_u64(b, v / 1000);
    tg_buf_append(b, ".", 1);
    tg_buf_append(b, frac, 3);
}

/* The time of a line, "2026-12-05T07:02:08.123Z" (24 bytes and a NUL). */
static void stamp_now(struct tg_audit *a, char out[32])
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    if (tv.tv_sec != a->stamp_sec) {
        /* The date part changes once a second: format it then, not for every record. */
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        snprintf(a->stamp, sizeof(a->stamp), "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
        a->stamp_sec = tv.tv_sec;
    }
    memcpy(out, a->stamp, 19);
    out[19] = '.';
    out[20] = (char)('0' + tv.tv_usec / 100000);
    out[21] = (char)('0' + tv.tv_usec / 10000 % 10);
    out[22] = (char)('0' + tv.tv_usec / 1000 % 10);
    out[23] = 'Z';
    out[24] = '\0';
}

/* Is this JSON text of ours (an object) canonical as it is: one member, no whitespace, nothing
 * nested? The usual counters are. Lines with anything else are hashed through their canonical
 * form (audit_chain.h), and written as they came (a client's arguments keep its order). */
static int plainly_canonical(const char *text)
{
    return text[0] == '{' && strpbrk(text, ", \t\n\r[") == NULL && strchr(text + 1, '{') == NULL;
}

static void queued(struct tg_audit *a)
{
    if (a->pending.len >= FLUSH_AT)
        start_write(a);
    else
        uv_prepare_start(&a->flush, on_flush); /* this iteration's records, in one write */
}

static void checkpoint(struct tg_audit *a, const char *reason)
{
    char stamp[32];
    stamp_now(a, stamp);
    tg_audit_chain_checkpoint(a->chain, &a->pending, reason, a->since_checkpoint, a->dropped, stamp);
    a->since_checkpoint = 0;
    a->checkpoints++;
    queued(a);
}

void tg_audit_log(struct tg_audit *a, const struct tg_audit_conf *ac, const struct tg_audit_record *r)
{
    if (a == NULL)
        return;
    (void)ac;
    char stamp[32];
    stamp_now(a, stamp);
    /* Formatted straight into the queue, members in byte order (a chained line is canonical JSON),
     * and taken back if the queue is over its bound. The first member's comma becomes the brace. */
    struct tg_buf *b = &a->pending;
    size_t mark = b->len;
    if (tg_buf_try_reserve(b, 640, 0) != 0)
        abort();
    int canonical = r->args_json == NULL && !(r->history_json && r->history_json[0]);
    FIELD(b, "approval_id", r->approval_id);
    if (r->args_json) {
        KEY(b, "args");
        tg_buf_appends(b, r->args_json);
    }
    if (r->args_sha256) {
        KEY(b, "args_sha256");
        tg_buf_append(b, "\"", 1);
        tg_buf_appends(b, r->args_sha256);
        tg_buf_append(b, "\"", 1);
    }
    FIELD(b, "correlation_id", r->correlation_id);
    if (r->counters_json && r->counters_json[0]) {
        KEY(b, "counters");
        size_t at = b->len;
        tg_buf_append(b, "{", 1);
        tg_buf_appends(b, r->counters_json);
        tg_buf_append(b, "}", 1);
        tg_buf_append(b, "", 1); /* a NUL to read it as a string, taken back */
        b->len--;
        canonical = canonical && plainly_canonical(b->base + at);
    }
    FIELD(b, "decided_by", r->decided_by);
    FIELD(b, "decision", r->decision);
    KEY(b, "disposition");
    const char *disp = tg_audit_disposition(r->decision); /* a word of ours: no escaping */
    tg_buf_append(b, "\"", 1);
    tg_buf_appends(b, disp);
    tg_buf_append(b, "\"", 1);
    FIELD(b, "grant", r->grant);
    if (r->history_json && r->history_json[0]) {
        KEY(b, "history");
        tg_buf_appends(b, r->history_json);
    }
    FIELD(b, "method", r->method);
    FIELD(b, "outcome", r->outcome);
    if (a->chain)
        tg_audit_chain_put_prev(a->chain, b);
    FIELD(b, "rule", r->rule && r->rule[0] ? r->rule : NULL);
    if (a->chain)
        tg_audit_chain_put_seq(a->chain, b);
    FIELD(b, "session", r->session);
    FIELD(b, "subject", r->subject);
    KEY(b, "time");
    tg_buf_append(b, "\"", 1);
    tg_buf_append(b, stamp, 24);
    tg_buf_append(b, "\"", 1);
    FIELD(b, "tool", r->tool);
    FIELD(b, "upstream", r->upstream);
    if (r->latency_ms >= 0) {
        KEY(b, "upstream_latency_ms");
        append_ms(b, r->latency_ms);
    }
    b->base[mark] = '{';
    if (b->len + 82 > a->max_pending) { /* 82: the event_hash member and the newline */
        b->len = mark;
        a->dropped++;
        return;
    }
    if (a->chain) {
        tg_buf_append(b, "}", 1);
        tg_audit_chain_seal(a->chain, b, mark, canonical);
    } else {
        tg_buf_append(b, "}\n", 2);
    }
    a->pending_n++;
    if (a->chain && ++a->since_checkpoint >= (uint64_t)a->checkpoint_lines)
        checkpoint(a, "lines");
    else
        queued(a);
}
