/* `tollgate audit verify` (core/cmd/audit_cmd.h): the chained audit log checked offline. The
 * line format (event_hash, previous_hash, seq, checkpoints and their signatures) is the one
 * core/call/audit.c writes; docs/operations.md describes it for operators.
 *
 * The files are read twice at most where it is cheap: their first chained line from the front
 * and their last from the back (to order them by their links), then each once, line by line,
 * in that order. Only the last two lines of the chain are remembered; when a line breaks it, the
 * lines after it are read into a small queue to tell what happened (a line inserted, lines
 * swapped, lines removed), and the first break is reported. */
#include "core/cmd/audit_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/base64.h>
#include <mbedtls/pk.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "core/base/sha256.h"
#include "core/cmd/audit_verify.h"

/* As deep as the writer's lines go (core/call/audit_chain.c): a client's arguments, one level
 * down, may nest as deep as a request may (limits.json_depth, at most 1000). */
#define JSON_DEPTH 1024
#define CHUNK (64u << 10)

struct tg_audit_key {
    mbedtls_pk_context pk;
    uint8_t sha[32]; /* SHA-256 of the public key's DER (SubjectPublicKeyInfo): key_sha256 */
    char *path;
};

const char *tg_audit_problem_str(enum tg_audit_problem p)
{
    static const char *const names[] = {"ok", "edited", "removed", "inserted", "reordered", "truncated",
                                        "missing file", "bad signature"};
    return (unsigned)p < sizeof(names) / sizeof(names[0]) ? names[p] : "?";
}

int tg_audit_key_load(const char *path, struct tg_audit_key **out, char *e, size_t elen)
{
    struct tg_audit_key *k = tg_xcalloc(1, sizeof(*k));
    mbedtls_pk_init(&k->pk);
    int r = mbedtls_pk_parse_public_keyfile(&k->pk, path);
    if (r != 0) {
        /* A private key will do: its public half is what verifies. */
        mbedtls_pk_free(&k->pk);
        mbedtls_pk_init(&k->pk);
        r = mbedtls_pk_parse_keyfile(&k->pk, path, NULL);
    }
    if (r != 0) {
        snprintf(e, elen, "%s: not a PEM public or private key (mbedtls -0x%04x)", path, (unsigned)-r);
        goto fail;
    }
    if (mbedtls_pk_get_type(&k->pk) != MBEDTLS_PK_ECKEY ||
        mbedtls_pk_ec(k->pk)->grp.id != MBEDTLS_ECP_DP_SECP256R1) {
        snprintf(e, elen, "%s: not an EC P-256 key", path);
        goto fail;
    }
    if (tg__audit_key_sha256(&k->pk, k->sha) != 0) {
        snprintf(e, elen, "%s: cannot encode the public key", path);
        goto fail;
    }
    k->path = tg_xstrdup(path);
    *out = k;
    return 0;
fail:
    mbedtls_pk_free(&k->pk);
    free(k);
    return -1;
}

void tg_audit_key_free(struct tg_audit_key *k)
{
    if (k == NULL)
        return;
    mbedtls_pk_free(&k->pk);
    free(k->path);
    free(k);
}

int tg__audit_key_sha256(mbedtls_pk_context *pk, uint8_t out[32])
{
    unsigned char der[256];
    int n = mbedtls_pk_write_pubkey_der(pk, der, sizeof(der));
    if (n <= 0)
        return -1;
    tg_sha256(der + sizeof(der) - n, (size_t)n, out);
    return 0;
}

/* ---- reading lines */

/* Lines of one file, at most TG_AUDIT_LINE_MAX bytes each. Owned by its tg__audit_rd (freed by
 * tg__audit_rd_close), or on head_line()'s stack. */
struct tg__audit_reader {
    FILE *f;
    char *chunk;
    size_t off, len;
    int eof;
    struct tg_buf line;
    uint64_t lineno;
};

/* The next line (without its newline) in r->line: 1, 0 at the end, -1 too long, -2 read error. */
static int rd_next(struct tg__audit_reader *r, int *nl)
{
    r->line.len = 0;
    *nl = 0;
    for (;;) {
        if (r->off == r->len) {
            if (r->eof)
                break;
            r->len = fread(r->chunk, 1, CHUNK, r->f);
            r->off = 0;
            if (r->len == 0) {
                if (ferror(r->f))
                    return -2;
                r->eof = 1;
                break;
            }
        }
        const char *s = r->chunk + r->off, *e = memchr(s, '\n', r->len - r->off);
        size_t take = e != NULL ? (size_t)(e - s) : r->len - r->off;
        if (r->line.len + take > TG_AUDIT_LINE_MAX) {
            r->lineno++;
            return -1;
        }
        tg_buf_append(&r->line, s, take);
        r->off += take + (e != NULL);
        if (e != NULL) {
            *nl = 1;
            break;
        }
    }
    if (!*nl && r->line.len == 0)
        return 0;
    r->lineno++;
    return 1;
}

/* ---- one line */

static int hex32(const cJSON *v, uint8_t out[32])
{
    if (!cJSON_IsString(v) || v->valuestring == NULL || strlen(v->valuestring) != 64)
        return -1;
    for (const char *c = v->valuestring; *c; c++)
        if (!((*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f')))
            return -1; /* lowercase only: one spelling per hash */
    return tg_hex_decode(v->valuestring, 64, out) == 0 ? 0 : -1;
}

/* A non-negative integer as written (the parser keeps a number's text): its value, or -1. */
static int64_t int_of(const cJSON *v)
{
    if (!cJSON_IsNumber(v) || v->valuestring == NULL)
        return -1;
    const char *s = v->valuestring;
    size_t n = strlen(s);
    if (n == 0 || n > 18 || (n > 1 && s[0] == '0'))
        return -1;
    int64_t x = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        x = x * 10 + (s[i] - '0');
    }
    return x;
}

static void sha_canon(const cJSON *root, uint8_t out[32])
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_json_canon_as_written(&b, root);
    tg_sha256(b.base, b.len, out);
    tg_buf_dispose(&b);
}

void tg__audit_line(const char *p, size_t n, struct tg__audit_line *li)
{
    uint64_t lineno = li->line;
    int nl = li->nl;
    memset(li, 0, sizeof(*li));
    li->line = lineno;
    li->nl = nl;
    li->seq = -1;
    li->dropped = -1;
    struct tg_json_doc doc;
    const char *err = NULL;
    size_t off = 0;
    if (tg_json_parse(p, n, JSON_DEPTH, 1, &doc, &err, &off) != 0) {
        li->kind = TG__AUDIT_TORN;
        snprintf(li->why, sizeof(li->why), "not JSON (%s at byte %zu)", err ? err : "invalid", off);
        return;
    }
    cJSON *root = doc.root;
    cJSON *eh = cJSON_IsObject(root) ? cJSON_DetachItemFromObjectCaseSensitive(root, "event_hash") : NULL;
    if (eh == NULL) {
        li->kind = TG__AUDIT_PLAIN;
        snprintf(li->why, sizeof(li->why), "no event_hash");
        cJSON_Delete(root);
        return;
    }
    li->kind = TG__AUDIT_CHAINED;
    const cJSON *prev = tg_json_get(root, "previous_hash"), *t = tg_json_get(root, "time");
    li->seq = int_of(tg_json_get(root, "seq"));
    if (cJSON_IsString(t))
        snprintf(li->time, sizeof(li->time), "%s", t->valuestring);
    if (hex32(eh, li->hash) != 0) {
        snprintf(li->why, sizeof(li->why), "event_hash is not 64 lowercase hex digits");
    } else if (prev == NULL || (!cJSON_IsNull(prev) && hex32(prev, li->prev) != 0)) {
        snprintf(li->why, sizeof(li->why), "previous_hash is not null or 64 lowercase hex digits");
    } else if (li->seq < 0) {
        snprintf(li->why, sizeof(li->why), "seq is not a non-negative integer");
    } else {
        uint8_t h[32];
        sha_canon(root, h);
        li->has_prev = !cJSON_IsNull(prev);
        li->hash_ok = memcmp(h, li->hash, 32) == 0;
        if (!li->hash_ok)
            snprintf(li->why, sizeof(li->why), "the line does not match its event_hash");
    }
    const cJSON *cp = tg_json_get(root, "checkpoint");
    if (cJSON_IsObject(cp)) {
        li->checkpoint = 1;
        const cJSON *reason = tg_json_get(cp, "reason");
        if (cJSON_IsString(reason))
            snprintf(li->reason, sizeof(li->reason), "%s", reason->valuestring);
        li->dropped = int_of(tg_json_get(cp, "dropped"));
        li->has_key_sha = hex32(tg_json_get(cp, "key_sha256"), li->key_sha) == 0;
        cJSON *sig = cJSON_DetachItemFromObjectCaseSensitive(root, "signature");
        if (sig != NULL) {
            li->sig_state = 1;
            size_t sn = 0;
            if (!cJSON_IsString(sig) ||
                mbedtls_base64_decode(li->sig, sizeof(li->sig), &sn, (const unsigned char *)sig->valuestring,
                                      strlen(sig->valuestring)) != 0 ||
                sn == 0)
                li->sig_state = 2; /* present but not base64 of a DER signature's size */
            li->siglen = sn;
            sha_canon(root, li->sig_hash);
            cJSON_Delete(sig);
        }
    }
    cJSON_Delete(eh);
    cJSON_Delete(root);
}

/* ---- the files' order */

/* The first or last chained line of the file at fd (size bytes): 1 with *li, 0 none, -1 a line
 * over the limit, -2 a read error. From the back: lines are found by their newlines, read a
 * chunk at a time, and analysed from the last one on. */
static int tail_line(int fd, off_t size, struct tg__audit_line *li)
{
    char *chunk = tg_xmalloc(CHUNK);
    struct tg_buf b;
    tg_buf_init(&b);
    int rc = 0;
    off_t end = size; /* the current line is [start, end), its newline not counted */
    while (end > 0 && rc == 0) {
        char last;
        if (pread(fd, &last, 1, end - 1) != 1) {
            rc = -2;
            break;
        }
        int nl = last == '\n';
        if (nl)
            end--;
        off_t start = end, pos = end;
        int found = 0;
        while (pos > 0 && !found) {
            size_t want = pos >= (off_t)CHUNK ? CHUNK : (size_t)pos;
            if (pread(fd, chunk, want, pos - (off_t)want) != (ssize_t)want) {
                rc = -2;
                break;
            }
            const char *nlp = memrchr(chunk, '\n', want);
            start = nlp != NULL ? pos - (off_t)want + (nlp - chunk) + 1 : pos - (off_t)want;
            found = nlp != NULL;
            pos -= (off_t)want;
            if (end - start > (off_t)TG_AUDIT_LINE_MAX) {
                rc = -1;
                break;
            }
        }
        if (rc != 0)
            break;
        b.len = 0;
        if (tg_buf_try_reserve(&b, (size_t)(end - start) + 1, 0) != 0 ||
            pread(fd, b.base, (size_t)(end - start), start) != (ssize_t)(end - start)) {
            rc = -2;
            break;
        }
        li->nl = nl;
        tg__audit_line(b.base, (size_t)(end - start), li);
        if (li->kind == TG__AUDIT_CHAINED)
            rc = 1;
        end = start;
    }
    tg_buf_dispose(&b);
    free(chunk);
    return rc;
}

static int head_line(FILE *f, struct tg__audit_line *li, int *plain)
{
    struct tg__audit_reader r = {.f = f, .chunk = tg_xmalloc(CHUNK)};
    tg_buf_init(&r.line);
    int rc, nl;
    while ((rc = rd_next(&r, &nl)) == 1) {
        li->line = r.lineno;
        li->nl = nl;
        tg__audit_line(r.line.base, r.line.len, li);
        if (li->kind == TG__AUDIT_CHAINED)
            break;
        *plain |= li->kind == TG__AUDIT_PLAIN;
    }
    tg_buf_dispose(&r.line);
    free(r.chunk);
    return rc;
}

/* Each file's first and last chained line, to order them. 0, or 2 (printed). */
int tg__audit_ends(struct tg__audit_file *af, FILE *err)
{
    int fd = open(af->path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        fprintf(err, "tollgate: audit verify: %s: %s\n", af->path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 2;
    }
    if (!S_ISREG(st.st_mode)) {
        fprintf(err, "tollgate: audit verify: %s: not a regular file (decompress rotated files first)\n", af->path);
        close(fd);
        return 2;
    }
    af->dev = st.st_dev;
    af->ino = st.st_ino;
    FILE *f = fdopen(dup(fd), "r");
    int plain = 0;
    int h = f != NULL ? head_line(f, &af->head, &plain) : -2;
    if (f != NULL)
        fclose(f);
    int t = h == 1 ? tail_line(fd, st.st_size, &af->tail) : h;
    close(fd);
    if (h == 1 && t == 1) {
        af->chained = 1;
        return 0;
    }
    if (h == 0 && !plain) {
        af->torn_only = st.st_size > 0;
        return 0; /* empty (a file just rotated in), or a crash in its first line: said so, skipped */
    }
    if (h == 0) {
        fprintf(err, "tollgate: audit verify: %s: no chained line (written with audit.chain = false?)\n", af->path);
        return 2;
    }
    if (h == -1 || t == -1)
        fprintf(err, "tollgate: audit verify: %s: a line longer than %u bytes\n", af->path, TG_AUDIT_LINE_MAX);
    else
        fprintf(err, "tollgate: audit verify: %s: read error\n", af->path);
    return 2;
}

/* Later than: by the first chained line's time (ISO 8601 UTC sorts as text), then seq. */
static int after(const struct tg__audit_file *a, const struct tg__audit_file *b)
{
    int c = strcmp(a->head.time, b->head.time);
    return c != 0 ? c > 0 : a->head.seq > b->head.seq;
}

/* order[0..*n): the chained files, each one's successor after it where a file's first line
 * continues from another's last; runs that do not link follow one another by time. 0, or 2. */
int tg__audit_order(struct tg__audit_file *files, size_t nfiles, size_t *order, size_t *n, FILE *err)
{
    size_t *next = tg_xcalloc(nfiles ? nfiles : 1, sizeof(*next)), *starts = tg_xcalloc(nfiles ? nfiles : 1, sizeof(*starts));
    unsigned char *has_pred = tg_xcalloc(nfiles ? nfiles : 1, 1);
    size_t ns = 0, k = 0;
    for (size_t i = 0; i < nfiles; i++) {
        next[i] = SIZE_MAX;
        if (!files[i].chained)
            continue;
        for (size_t j = 0; j < nfiles; j++)
            if (j != i && files[j].chained && !has_pred[j] && files[j].head.has_prev &&
                memcmp(files[j].head.prev, files[i].tail.hash, 32) == 0) {
                next[i] = j;
                has_pred[j] = 1;
                break;
            }
    }
    for (size_t i = 0; i < nfiles; i++)
        if (files[i].chained && !has_pred[i])
            starts[ns++] = i;
    for (size_t i = 1; i < ns; i++) /* insertion sort: a handful of runs */
        for (size_t j = i; j > 0 && after(&files[starts[j - 1]], &files[starts[j]]); j--) {
            size_t t = starts[j];
            starts[j] = starts[j - 1];
            starts[j - 1] = t;
        }
    for (size_t s = 0; s < ns; s++)
        for (size_t i = starts[s]; i != SIZE_MAX && k < nfiles; i = next[i])
            order[k++] = i;
    size_t chained = 0;
    for (size_t i = 0; i < nfiles; i++)
        chained += files[i].chained;
    int rc = 0;
    if (k != chained) {
        fprintf(err, "tollgate: audit verify: the files' links form a circle\n");
        rc = 2;
    }
    *n = k;
    free(next);
    free(starts);
    free(has_pred);
    return rc;
}

/* A file's lines for the walk along the chain (core/cmd/audit_chain.c). */
int tg__audit_rd_open(struct tg__audit_rd *q, const char *path)
{
    memset(q, 0, sizeof(*q));
    struct tg__audit_reader *r = tg_xcalloc(1, sizeof(*r));
    r->f = fopen(path, "r");
    if (r->f == NULL) {
        free(r);
        return -1;
    }
    r->chunk = tg_xmalloc(CHUNK);
    tg_buf_init(&r->line);
    q->r = r;
    return 0;
}

void tg__audit_rd_close(struct tg__audit_rd *q)
{
    struct tg__audit_reader *r = q->r;
    if (r == NULL)
        return;
    fclose(r->f);
    free(r->chunk);
    tg_buf_dispose(&r->line);
    free(r);
    q->r = NULL;
}

/* The i-th line from the current one (0: the current one), read into the queue as needed: a
 * pointer into the queue, or NULL at the end of the file (q->status says why: 0 the end, -1 a
 * line too long, -2 a read error). */
struct tg__audit_line *tg__audit_peek(struct tg__audit_rd *q, size_t i)
{
    while (q->n <= i) {
        if (q->status != 0 || q->n == TG_AUDIT_LOOKAHEAD + 1)
            return NULL;
        int nl;
        int rc = rd_next(q->r, &nl);
        if (rc != 1) {
            q->status = rc;
            return NULL;
        }
        struct tg__audit_line *li = &q->q[(q->head + q->n) % (TG_AUDIT_LOOKAHEAD + 1)];
        li->line = q->r->lineno;
        li->nl = nl;
        tg__audit_line(q->r->line.base, q->r->line.len, li);
        q->n++;
    }
    return &q->q[(q->head + i) % (TG_AUDIT_LOOKAHEAD + 1)];
}

void tg__audit_pop(struct tg__audit_rd *q)
{
    if (q->n > 0) {
        q->head = (q->head + 1) % (TG_AUDIT_LOOKAHEAD + 1);
        q->n--;
    }
}

uint64_t tg__audit_rd_line(const struct tg__audit_rd *q)
{
    return q->r != NULL ? q->r->lineno : 0;
}

int tg__audit_verify_sig(const struct tg_audit_key *k, const struct tg__audit_line *li)
{
    return mbedtls_pk_verify((mbedtls_pk_context *)&k->pk, MBEDTLS_MD_SHA256, li->sig_hash, 32, li->sig,
                             li->siglen) == 0
               ? 0
               : -1;
}

const uint8_t *tg__audit_key_id(const struct tg_audit_key *k)
{
    return k->sha;
}

const char *tg__audit_key_path(const struct tg_audit_key *k)
{
    return k->path;
}
