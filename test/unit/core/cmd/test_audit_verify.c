/* `tollgate audit verify` (core/cmd/audit_verify.c, audit_chain.c) on chained files made here: a
 * small writer of its own (canonical lines, event_hash, previous_hash, seq, checkpoints signed with
 * a P-256 key made by mbedtls), three rotated files, then each way of tampering with them and each
 * thing a crash or a restart leaves, checked for the class, the file, the line and the seq. */
#include "test/unit/unit.h"

#include <inttypes.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mbedtls/base64.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>

#include "core/base/json.h"
#include "core/base/sha256.h"
#include "core/cmd/audit_cmd.h"
#include "core/cmd/audit_verify.h"

#define MAXL 64

static mbedtls_entropy_context entropy;
static mbedtls_ctr_drbg_context drbg;

/* The lines of a chain, as text, and the key that signs its checkpoints. */
struct fx {
    char dir[64];
    mbedtls_pk_context key, other; /* other: a key the verifier is not given */
    char pub[96], other_pub[96];
    char *l[MAXL];
    size_t n;
};

static void hex(const uint8_t h[32], char out[65])
{
    tg_hex_encode(h, 32, out);
}

/* obj, chained after prev (NULL: the first line) as line seq, signed with key when it is a
 * checkpoint and key is not NULL: its text, as the writer writes it (canonical, event_hash last). */
static char *finish(cJSON *obj, const char *prev, int64_t seq, mbedtls_pk_context *key)
{
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "event_hash");
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "previous_hash");
    cJSON_DeleteItemFromObjectCaseSensitive(obj, "seq");
    cJSON_AddItemToObject(obj, "previous_hash", prev ? cJSON_CreateString(prev) : cJSON_CreateNull());
    char s[24];
    snprintf(s, sizeof(s), "%" PRId64, seq);
    cJSON_AddItemToObject(obj, "seq", tg_json_number_raw(s, strlen(s)));
    cJSON *cp = tg_json_get(obj, "checkpoint");
    if (cp != NULL && key != NULL) {
        uint8_t id[32], h[32], sig[MBEDTLS_ECDSA_MAX_LEN];
        char idh[65];
        assert_int_equal(tg__audit_key_sha256(key, id), 0);
        hex(id, idh);
        cJSON_DeleteItemFromObjectCaseSensitive(cp, "key_sha256");
        cJSON_AddStringToObject(cp, "key_sha256", idh);
        cJSON_DeleteItemFromObjectCaseSensitive(obj, "signature");
        struct tg_buf b;
        tg_buf_init(&b);
        tg_json_canon_as_written(&b, obj);
        tg_sha256(b.base, b.len, h);
        tg_buf_dispose(&b);
        size_t sn = 0;
        assert_int_equal(mbedtls_pk_sign(key, MBEDTLS_MD_SHA256, h, 32, sig, &sn, mbedtls_ctr_drbg_random, &drbg), 0);
        unsigned char b64[200];
        size_t bn = 0;
        assert_int_equal(mbedtls_base64_encode(b64, sizeof(b64), &bn, sig, sn), 0);
        cJSON_AddStringToObject(obj, "signature", (const char *)b64);
    }
    struct tg_buf b;
    tg_buf_init(&b);
    tg_json_canon_as_written(&b, obj);
    uint8_t h[32];
    char hh[65];
    tg_sha256(b.base, b.len, h);
    hex(h, hh);
    b.len--; /* the closing brace: event_hash goes last */
    tg_buf_appendf(&b, ",\"event_hash\":\"%s\"}", hh);
    tg_buf_append(&b, "", 1);
    char *t = tg_xstrdup(b.base);
    tg_buf_dispose(&b);
    cJSON_Delete(obj);
    return t;
}

static cJSON *parse(const char *line)
{
    struct tg_json_doc d;
    const char *e;
    size_t off;
    assert_int_equal(tg_json_parse(line, strlen(line), 64, 1, &d, &e, &off), 0);
    return d.root;
}

/* A line's event_hash (hex) into out. */
static void hash_of(const char *line, char out[65])
{
    const char *p = strstr(line, "\"event_hash\":\"");
    assert_non_null(p);
    memcpy(out, p + 14, 64);
    out[64] = '\0';
}

static int64_t seq_of(const char *line)
{
    cJSON *o = parse(line);
    int64_t s = (int64_t)tg_json_get(o, "seq")->valuedouble;
    cJSON_Delete(o);
    return s;
}

static int64_t tshift; /* added to seq for a line's time: a later chain's lines are later */

static cJSON *record(int64_t seq)
{
    char t[40], tool[16];
    seq += tshift;
    snprintf(t, sizeof(t), "2026-12-05T07:%02d:%02d.000Z", (int)(seq / 60), (int)(seq % 60));
    seq -= tshift;
    snprintf(tool, sizeof(tool), "t%" PRId64, seq);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "time", t);
    cJSON_AddStringToObject(o, "decision", "allow");
    cJSON_AddStringToObject(o, "disposition", "allowed");
    cJSON_AddStringToObject(o, "method", "tools/call");
    cJSON_AddStringToObject(o, "tool", tool);
    cJSON_AddItemToObject(o, "upstream_latency_ms", tg_json_number_raw("0.410", 5)); /* as written */
    cJSON_AddItemToObject(o, "args", parse("{\"b\":[1.0,2e3],\"a\":\"x\\ny\"}"));
    return o;
}

static cJSON *checkpoint(int64_t seq, const char *reason, int records, int dropped)
{
    char t[40], body[300];
    snprintf(t, sizeof(t), "2026-12-05T07:%02d:%02d.000Z", (int)((seq + tshift) / 60), (int)((seq + tshift) % 60));
    snprintf(body, sizeof(body),
             "{\"conf\":{\"file\":\"/etc/tollgate/tollgate.conf\",\"sha256\":\"%064d\"},\"dropped\":%d,"
             "\"instance\":\"host:1\",\"policies\":{},\"reason\":\"%s\",\"records\":%d}",
             0, dropped, reason, records);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "time", t);
    cJSON_AddItemToObject(o, "checkpoint", parse(body));
    return o;
}

/* Appends to the chain: the next line after f->l[f->n - 1] (or after `after`, a line index). */
static void push(struct fx *f, cJSON *o, int sign)
{
    char prev[65];
    int64_t seq = 1;
    if (f->n > 0) {
        hash_of(f->l[f->n - 1], prev);
        seq = seq_of(f->l[f->n - 1]) + 1;
    }
    f->l[f->n] = finish(o, f->n > 0 ? prev : NULL, seq, sign ? &f->key : NULL);
    f->n++;
}

/* The standard chain: three files as rotation leaves them.
 *   a: l[0] start checkpoint, l[1..8] records, l[9] rotate checkpoint        (seq 1-10)
 *   b: l[10..17] records, l[18] lines checkpoint, l[19..20], l[21] rotate    (seq 11-22)
 *   c: l[22..29] records, l[30] shutdown checkpoint                          (seq 23-31) */
static void chain(struct fx *f, int sign)
{
    push(f, checkpoint(1, "start", 0, 0), sign);
    for (int i = 1; i <= 8; i++)
        push(f, record(i + 1), 0);
    push(f, checkpoint(10, "rotate", 8, 0), sign);
    for (int i = 10; i <= 17; i++)
        push(f, record(i + 1), 0);
    push(f, checkpoint(19, "lines", 8, 0), sign);
    push(f, record(20), 0);
    push(f, record(21), 0);
    push(f, checkpoint(22, "rotate", 2, 0), sign);
    for (int i = 22; i <= 29; i++)
        push(f, record(i + 1), 0);
    push(f, checkpoint(31, "shutdown", 8, 0), sign);
}

static char path_a[96], path_b[96], path_c[96];

static void write_file(const char *path, char *const *l, size_t from, size_t to, int torn_tail)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    for (size_t i = from; i < to; i++)
        fprintf(fp, "%s%s", l[i], torn_tail && i + 1 == to ? "" : "\n");
    fclose(fp);
}

/* The standard split into path_a, path_b, path_c, of lines as f holds them now, where each file
 * ends at the index given (the default: 10, 22, f->n). */
static void write_split(struct fx *f, size_t ea, size_t eb)
{
    write_file(path_a, f->l, 0, ea, 0);
    write_file(path_b, f->l, ea, eb, 0);
    write_file(path_c, f->l, eb, f->n, 0);
}

static void write_key(mbedtls_pk_context *k, const char *path)
{
    unsigned char pem[512];
    assert_int_equal(mbedtls_pk_write_pubkey_pem(k, pem, sizeof(pem)), 0);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs((const char *)pem, fp);
    fclose(fp);
}

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof(*f));
    snprintf(f->dir, sizeof(f->dir), "/tmp/tg-audit-verify-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(path_a, sizeof(path_a), "%s/audit.log.2", f->dir);
    snprintf(path_b, sizeof(path_b), "%s/audit.log.1", f->dir);
    snprintf(path_c, sizeof(path_c), "%s/audit.log", f->dir);
    snprintf(f->pub, sizeof(f->pub), "%s/pub.pem", f->dir);
    snprintf(f->other_pub, sizeof(f->other_pub), "%s/other.pem", f->dir);
    mbedtls_pk_context *ks[] = {&f->key, &f->other};
    for (int i = 0; i < 2; i++) {
        mbedtls_pk_init(ks[i]);
        assert_int_equal(mbedtls_pk_setup(ks[i], mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)), 0);
        assert_int_equal(mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(*ks[i]), mbedtls_ctr_drbg_random,
                                             &drbg),
                         0);
    }
    write_key(&f->key, f->pub);
    write_key(&f->other, f->other_pub);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    tshift = 0;
    for (size_t i = 0; i < f->n; i++)
        free(f->l[i]);
    mbedtls_pk_free(&f->key);
    mbedtls_pk_free(&f->other);
    const char *names[] = {path_a, path_b, path_c, f->pub, f->other_pub};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        unlink(names[i]);
    rmdir(f->dir);
    free(f);
    return 0;
}

/* Runs the verifier on files[0..n) (with f's public key when key), keeps what it printed. */
struct run {
    int rc;
    struct tg_audit_verdict v;
    char *out;
    size_t outlen;
};

static void verify(struct fx *f, const char *const *files, size_t n, int key, int closed, struct run *r)
{
    struct tg_audit_key *k = NULL;
    char e[300];
    if (key)
        assert_int_equal(tg_audit_key_load(f->pub, &k, e, sizeof(e)), 0);
    FILE *out = open_memstream(&r->out, &r->outlen);
    char *eb = NULL;
    size_t en = 0;
    FILE *err = open_memstream(&eb, &en);
    r->rc = tg_audit_verify(files, n, &k, key ? 1 : 0, closed, out, err, &r->v);
    fclose(out);
    fclose(err);
    printf("%s%s", r->out, eb);
    free(eb);
    tg_audit_key_free(k);
}

static void verify3(struct fx *f, int key, struct run *r)
{
    const char *files[] = {path_a, path_b, path_c};
    verify(f, files, 3, key, 0, r);
}

/* The run failed with p at file:line (seq), and printed msg. */
static void expect_fail(struct run *r, enum tg_audit_problem p, const char *file, uint64_t line, int64_t seq,
                        const char *msg)
{
    assert_int_equal(r->rc, 1);
    assert_string_equal(tg_audit_problem_str(r->v.problem), tg_audit_problem_str(p));
    assert_string_equal(r->v.file, file);
    assert_int_equal(r->v.line, line);
    assert_int_equal(r->v.seq, seq);
    if (strstr(r->out, msg) == NULL)
        fail_msg("no \"%s\" in:\n%s", msg, r->out);
    free(r->out);
}

static void expect_ok(struct run *r, const char *msg)
{
    assert_int_equal(r->rc, 0);
    assert_int_equal(r->v.problem, TG_AUDIT_OK);
    if (strstr(r->out, msg) == NULL)
        fail_msg("no \"%s\" in:\n%s", msg, r->out);
    free(r->out);
}

/* Replace the first `from` in line i with `to` (same length or not), the hash left as it was. */
static void edit(struct fx *f, size_t i, const char *from, const char *to)
{
    char *p = strstr(f->l[i], from);
    assert_non_null(p);
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_append(&b, f->l[i], (size_t)(p - f->l[i]));
    tg_buf_appends(&b, to);
    tg_buf_appends(&b, p + strlen(from));
    tg_buf_append(&b, "", 1);
    free(f->l[i]);
    f->l[i] = tg_xstrdup(b.base);
    tg_buf_dispose(&b);
}

static void drop(struct fx *f, size_t i)
{
    free(f->l[i]);
    memmove(&f->l[i], &f->l[i + 1], (f->n - i - 1) * sizeof(char *));
    f->n--;
}

static void insert(struct fx *f, size_t i, char *line)
{
    memmove(&f->l[i + 1], &f->l[i], (f->n - i) * sizeof(char *));
    f->l[i] = line;
    f->n++;
}

/* Each line from i on chained again after the line before it (as one who rewrites the file
 * would), its checkpoints signed again with key, or left with their old signatures (NULL). */
static void rechain(struct fx *f, size_t i, mbedtls_pk_context *key)
{
    for (; i < f->n; i++) {
        char prev[65];
        hash_of(f->l[i - 1], prev);
        cJSON *o = parse(f->l[i]);
        int64_t seq = seq_of(f->l[i]);
        char *t = finish(o, prev, seq, key);
        free(f->l[i]);
        f->l[i] = t;
    }
}

/* ---- the cases */

static void clean_chain_verifies(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    write_split(f, 10, 22);
    struct run r;
    verify3(f, 1, &r);
    assert_int_equal(r.v.records, 26);
    assert_int_equal(r.v.checkpoints, 5);
    assert_int_equal(r.v.signed_checkpoints, 5);
    assert_non_null(strstr(r.out, "audit.log.2: lines 1-10, seq 1-10: 8 records, 2 checkpoints (2 signed)\n"));
    expect_ok(&r, "OK: 26 records, 5 checkpoints (5 signed), files ");
    /* --closed: it ends with a shutdown checkpoint. */
    const char *files[] = {path_a, path_b, path_c};
    verify(f, files, 3, 1, 1, &r);
    expect_ok(&r, "OK: 26 records");
}

static void files_in_any_order(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    write_split(f, 10, 22);
    const char *files[] = {path_c, path_a, path_b};
    struct run r;
    verify(f, files, 3, 1, 0, &r);
    char want[400];
    snprintf(want, sizeof(want), "files %s %s %s\n", path_a, path_b, path_c);
    expect_ok(&r, want);
    const char *rev[] = {path_c, path_b, path_a};
    verify(f, rev, 3, 1, 0, &r);
    expect_ok(&r, want);
}

static void value_changed_is_edited(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    edit(f, 5, "\"tool\":\"t6\"", "\"tool\":\"t7\"");
    write_split(f, 10, 22);
    struct run r;
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_EDITED, path_a, 6, 6, ":6 (seq 6): edited: the line does not match its event_hash");
    /* Its own hash made again: the next line does not continue from it. */
    char prev[65];
    hash_of(f->l[4], prev);
    char *t = finish(parse(f->l[5]), prev, 6, NULL);
    free(f->l[5]);
    f->l[5] = t;
    write_split(f, 10, 22);
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_EDITED, path_a, 6, 6,
                ":6 (seq 6): edited: line 6 was changed and its event_hash made again: line 7 (seq 7) does not continue "
                "from it");
}

static void line_removed(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    drop(f, 13); /* seq 14, audit.log.1:4 */
    write_split(f, 10, 21);
    struct run r;
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_REMOVED, path_b, 4, 15,
                ":4 (seq 15): removed: 1 line(s) missing before line 4 (seq jumps from 13 to 15), more than the next "
                "checkpoint counts as dropped");
}

static void lines_swapped(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    char *t = f->l[13];
    f->l[13] = f->l[14];
    f->l[14] = t;
    write_split(f, 10, 22);
    struct run r;
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_REORDERED, path_b, 4, 15,
                ":4 (seq 15): reordered: line 4 (seq 15) continues from line 5 (seq 14), which comes after it");
}

static void line_moved_later(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    char *t = f->l[12]; /* seq 13 to after seq 16 */
    memmove(&f->l[12], &f->l[13], 3 * sizeof(char *));
    f->l[15] = t;
    write_split(f, 10, 22);
    struct run r;
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_REORDERED, path_b, 3, 14,
                ":3 (seq 14): reordered: line 3 (seq 14) continues from line 6 (seq 13), which comes after it");
}

static void line_inserted_with_its_own_hash(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    /* Made to fit: it continues from seq 13 as seq 14 does. */
    char prev[65];
    hash_of(f->l[12], prev);
    insert(f, 13, finish(record(77), prev, 14, NULL));
    write_split(f, 10, 23);
    struct run r;
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_INSERTED, path_b, 4, 14,
                ":4 (seq 14): inserted: line 4 is not part of the chain: line 5 continues from line 3");
    /* Not made to fit: any previous_hash, any seq. */
    drop(f, 13);
    insert(f, 13, finish(record(14), "00000000000000000000000000000000000000000000000000000000000000aa", 99, NULL));
    write_split(f, 10, 23);
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_INSERTED, path_b, 4, 99,
                ":4 (seq 99): inserted: line 4 is not part of the chain: line 5 continues from line 3");
    /* A copy of a line. */
    drop(f, 13);
    insert(f, 14, tg_xstrdup(f->l[13]));
    write_split(f, 10, 23);
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_INSERTED, path_b, 5, 14,
                ":5 (seq 14): inserted: line 5 is not part of the chain: it continues from line 3, as line 4 does (a copy of it)");
    /* Without a hash that fits, inserted all the same. */
    drop(f, 14);
    insert(f, 13, tg_xstrdup("{\"decision\":\"allow\",\"previous_hash\":null,\"seq\":14,\"event_hash\":\"" 
                             "00000000000000000000000000000000000000000000000000000000000000aa\"}"));
    write_split(f, 10, 23);
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_INSERTED, path_b, 4, 14,
                ":4 (seq 14): inserted: line 4 (which does not match its event_hash) is not part of the chain: line 5 "
                "continues from line 3");
}

static void rotated_file_truncated(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    write_file(path_a, f->l, 0, 8, 0); /* seq 9 and the rotate checkpoint cut */
    write_file(path_b, f->l, 10, 22, 0);
    write_file(path_c, f->l, 22, f->n, 0);
    struct run r;
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_TRUNCATED, path_a, 8, 8,
                ":8 (seq 8): truncated: the file ends at seq 8 without a rotate checkpoint, and");
    assert_int_equal(r.rc, 1);
}

static void rotated_file_removed(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    write_split(f, 10, 22);
    const char *files[] = {path_c, path_a};
    struct run r;
    verify(f, files, 2, 1, 0, &r);
    char want[300];
    snprintf(want, sizeof(want), ":1 (seq 23): missing file: seq 11 to 22 (12 line(s)) between %s and %s are in no file given",
             path_a, path_c);
    expect_fail(&r, TG_AUDIT_MISSING_FILE, path_c, 1, 23, want);
    /* The first files rotated away: a note. */
    const char *later[] = {path_c, path_b};
    verify(f, later, 2, 1, 0, &r);
    expect_ok(&r, "audit.log.1:1: note: continues an earlier chain (seq 10 and before are in no file given)");
}

static void signature_changed(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    /* The signature's bytes alone: the line no longer matches its event_hash. */
    char *p = strstr(f->l[18], "\"signature\":\"") + 13;
    p[4] = p[4] == 'A' ? 'B' : 'A';
    write_split(f, 10, 22);
    struct run r;
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_EDITED, path_b, 9, 19, ":9 (seq 19): edited: the line does not match its event_hash");
    /* Rewritten with every hash made again (a record changed at seq 13): the old signature no
     * longer verifies. Without --key nothing tells. */
    for (size_t i = 0; i < f->n; i++)
        free(f->l[i]);
    f->n = 0;
    chain(f, 1);
    edit(f, 12, "\"tool\":\"t13\"", "\"tool\":\"t99\"");
    rechain(f, 12, NULL);
    write_split(f, 10, 22);
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_BAD_SIGNATURE, path_b, 9, 19,
                ":9 (seq 19): bad signature: the checkpoint's signature does not verify with");
    verify3(f, 0, &r);
    expect_ok(&r, "note: signatures not checked (no --key)");
    /* Signed again with a key of the rewriter's own: named by its key_sha256, not the one given. */
    rechain(f, 12, &f->other);
    write_split(f, 10, 22);
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_BAD_SIGNATURE, path_b, 9, 19, "which is not the SHA-256 of a key given");
}

static void key_with_unsigned_checkpoint(void **state)
{
    struct fx *f = *state;
    chain(f, 0);
    write_split(f, 10, 22);
    struct run r;
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_BAD_SIGNATURE, path_a, 1, 1, ":1 (seq 1): bad signature: the checkpoint has no signature");
    verify3(f, 0, &r);
    expect_ok(&r, "OK: 26 records, 5 checkpoints (0 signed)");
}

static void torn_last_line(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    push(f, record(32), 0);
    push(f, record(33), 0);
    write_file(path_a, f->l, 0, 10, 0);
    write_file(path_b, f->l, 10, 22, 0);
    /* The last record cut in the middle of a write: no newline, not JSON. */
    f->l[f->n - 1][40] = '\0';
    write_file(path_c, f->l, 22, f->n, 1);
    struct run r;
    verify3(f, 1, &r);
    assert_non_null(strstr(r.out, "audit.log:11: note: torn last line (not JSON"));
    expect_ok(&r, "audit.log: note: 1 record(s) after the last signed checkpoint (");
    /* --closed: the last line of the chain is not a shutdown checkpoint. */
    const char *files[] = {path_a, path_b, path_c};
    verify(f, files, 3, 1, 1, &r);
    expect_fail(&r, TG_AUDIT_TRUNCATED, path_c, 10, 32,
                ":10 (seq 32): truncated: the last line of the chain is not a shutdown checkpoint (--closed)");
    /* A torn line after the shutdown checkpoint: started again, and crashed. */
    write_file(path_c, f->l, 22, 31, 0);
    FILE *fp = fopen(path_c, "a");
    fputs("{\"checkpoint\":{\"con", fp);
    fclose(fp);
    verify(f, files, 3, 1, 1, &r);
    expect_fail(&r, TG_AUDIT_TRUNCATED, path_c, 9, 31,
                ":9 (seq 31): truncated: a torn line follows the shutdown checkpoint: the gateway started again and "
                "crashed (--closed)");
    verify(f, files, 3, 1, 0, &r);
    expect_ok(&r, "audit.log:10: note: torn last line");
}

static void torn_line_then_restart(void **state)
{
    struct fx *f = *state;
    for (int i = 0; i < 5; i++)
        push(f, i == 0 ? checkpoint(1, "start", 0, 0) : record(i + 1), 1);
    push(f, record(6), 0);
    char torn[40];
    snprintf(torn, sizeof(torn), "%.30s", f->l[5]);
    drop(f, 5); /* the crash: seq 6 never finished; the restart continues from seq 5 */
    push(f, checkpoint(6, "start", 0, 0), 1);
    push(f, record(7), 0);
    push(f, checkpoint(8, "shutdown", 1, 0), 1);
    insert(f, 5, tg_xstrdup(torn));
    write_file(path_a, f->l, 0, f->n, 0);
    const char *files[] = {path_a};
    struct run r;
    verify(f, files, 1, 1, 1, &r);
    assert_non_null(strstr(r.out, "audit.log.2:6: note: torn line (not JSON"));
    assert_non_null(strstr(r.out, "a crash?); line 7 continues the chain from line 5 (a restart)\n"));
    expect_ok(&r, "OK: 5 records, 3 checkpoints (3 signed)");
}

static void reformatted_line_verifies(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    /* Line 4 with its keys in another order and spaces: the same object. */
    cJSON *o = parse(f->l[3]);
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{ ");
    cJSON *items[32];
    int k = 0;
    for (cJSON *c = o->child; c != NULL; c = c->next)
        items[k++] = c;
    for (int i = k - 1; i >= 0; i--) {
        tg_json_write_string(&b, items[i]->string, strlen(items[i]->string));
        tg_buf_appends(&b, " : ");
        tg_json_write(&b, items[i]);
        tg_buf_appends(&b, i ? " ,\t" : " }");
    }
    tg_buf_append(&b, "", 1);
    cJSON_Delete(o);
    free(f->l[3]);
    f->l[3] = tg_xstrdup(b.base);
    tg_buf_dispose(&b);
    assert_non_null(strstr(f->l[3], "\"upstream_latency_ms\" : 0.410"));
    write_split(f, 10, 22);
    struct run r;
    verify3(f, 1, &r);
    expect_ok(&r, "OK: 26 records");
    /* The same number written otherwise is another line: 0.41 is not 0.410 as written. */
    edit(f, 3, "0.410", "0.41");
    write_split(f, 10, 22);
    verify3(f, 1, &r);
    expect_fail(&r, TG_AUDIT_EDITED, path_a, 4, 4, "edited: the line does not match its event_hash");
}

static void gap_counted_as_dropped(void **state)
{
    struct fx *f = *state;
    push(f, checkpoint(1, "start", 0, 0), 1);
    for (int i = 2; i <= 8; i++)
        push(f, record(i), 0);
    push(f, checkpoint(9, "lines", 7, 2), 1);
    push(f, record(10), 0);
    /* seq 5 and 6 lost in a failed write (chained, never written); the checkpoint counts 2. */
    drop(f, 4);
    drop(f, 4);
    write_file(path_a, f->l, 0, f->n, 0);
    const char *files[] = {path_a};
    struct run r;
    verify(f, files, 1, 1, 0, &r);
    expect_ok(&r, "audit.log.2:7: note: 2 line(s) missing before line 5 (seq 5 to 6) are counted as dropped by the "
                  "writer in this checkpoint\n");
    /* Counted as 1 only: removed. */
    edit(f, 6, "\"dropped\":2", "\"dropped\":1");
    rechain(f, 6, &f->key);
    write_file(path_a, f->l, 0, f->n, 0);
    verify(f, files, 1, 1, 0, &r);
    expect_fail(&r, TG_AUDIT_REMOVED, path_a, 5, 7,
                ":5 (seq 7): removed: 2 line(s) missing before line 5 (seq jumps from 4 to 7), more than the next "
                "checkpoint counts as dropped");
    /* Two gaps before one checkpoint, counted together. */
    for (size_t i = 0; i < f->n; i++)
        free(f->l[i]);
    f->n = 0;
    push(f, checkpoint(1, "start", 0, 0), 1);
    for (int i = 2; i <= 8; i++)
        push(f, record(i), 0);
    push(f, checkpoint(9, "lines", 7, 2), 1);
    drop(f, 5); /* seq 6 */
    drop(f, 2); /* seq 3 */
    write_file(path_a, f->l, 0, f->n, 0);
    verify(f, files, 1, 1, 0, &r);
    expect_ok(&r, "audit.log.2:7: note: 2 line(s) missing in 2 gaps from line 3 on are counted as dropped by the writer "
                  "in this checkpoint\n");
    edit(f, 6, "\"dropped\":2", "\"dropped\":1");
    rechain(f, 6, &f->key);
    write_file(path_a, f->l, 0, f->n, 0);
    verify(f, files, 1, 1, 0, &r);
    expect_fail(&r, TG_AUDIT_REMOVED, path_a, 3, 4,
                ":3 (seq 4): removed: 1 line(s) missing before line 3 (seq jumps from 2 to 4) (1 more in 1 later gap(s)), "
                "more than the next checkpoint counts as dropped");
}

static void copy_of_a_file(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    write_split(f, 10, 22);
    char copy[128];
    snprintf(copy, sizeof(copy), "%s/copy", f->dir);
    write_file(copy, f->l, 10, 22, 0);
    const char *files[] = {path_a, path_b, path_c, copy};
    struct run r;
    verify(f, files, 4, 1, 0, &r);
    unlink(copy);
    char want[400];
    snprintf(want, sizeof(want), ":1 (seq 11): reordered: %s starts at seq 11, which the chain has passed (%s ends at seq 31)",
             copy, path_c);
    expect_fail(&r, TG_AUDIT_REORDERED, copy, 1, 11, want);
}

static void restart_into_an_empty_file(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    /* A crash in the middle of seq 9; the files rotated; the restart begins a chain of its own. */
    write_file(path_a, f->l, 0, 8, 0);
    FILE *fp = fopen(path_a, "a");
    fprintf(fp, "%.50s", f->l[8]);
    fclose(fp);
    for (size_t i = 0; i < f->n; i++)
        free(f->l[i]);
    f->n = 0;
    tshift = 100;
    push(f, checkpoint(1, "start", 0, 0), 1);
    push(f, record(2), 0);
    push(f, checkpoint(3, "shutdown", 1, 0), 1);
    write_file(path_b, f->l, 0, f->n, 0);
    write_file(path_c, f->l, 0, 0, 0); /* empty: just rotated in */
    const char *files[] = {path_c, path_b, path_a};
    struct run r;
    verify(f, files, 3, 1, 1, &r);
    assert_non_null(strstr(r.out, "audit.log.2:9: note: torn last line"));
    assert_non_null(strstr(r.out, "audit.log: empty\n"));
    expect_ok(&r, "audit.log.1:1: note: starts a new chain (previous_hash null) after ");
    /* Only a torn line: said so. */
    fp = fopen(path_c, "w");
    fputs("{\"decis", fp);
    fclose(fp);
    verify(f, files, 3, 1, 1, &r);
    expect_ok(&r, "audit.log: note: no whole line, only torn ones (a crash while writing?)");
}

static void line_too_long_is_an_error(void **state)
{
    struct fx *f = *state;
    chain(f, 1);
    write_split(f, 10, 22);
    FILE *fp = fopen(path_c, "a");
    assert_non_null(fp);
    static char blk[1 << 16];
    memset(blk, 'x', sizeof(blk));
    for (size_t i = 0; i <= TG_AUDIT_LINE_MAX / sizeof(blk); i++)
        fwrite(blk, 1, sizeof(blk), fp);
    fputs("\n", fp);
    fclose(fp);
    struct run r;
    verify3(f, 1, &r);
    assert_int_equal(r.rc, 2);
    free(r.out);
}

static void keys_load(void **state)
{
    struct fx *f = *state;
    struct tg_audit_key *k = NULL;
    char e[300];
    assert_int_equal(tg_audit_key_load(f->pub, &k, e, sizeof(e)), 0);
    tg_audit_key_free(k);
    assert_int_equal(tg_audit_key_load("/nonexistent/key.pem", &k, e, sizeof(e)), -1);
    assert_non_null(strstr(e, "not a PEM public or private key"));
}

int main(int argc, char **argv)
{
    mbedtls_entropy_init(&entropy);
    mbedtls_ctr_drbg_init(&drbg);
    if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &entropy, (const uint8_t *)"audit", 5) != 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(clean_chain_verifies, setup, teardown),
        cmocka_unit_test_setup_teardown(files_in_any_order, setup, teardown),
        cmocka_unit_test_setup_teardown(value_changed_is_edited, setup, teardown),
        cmocka_unit_test_setup_teardown(line_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(lines_swapped, setup, teardown),
        cmocka_unit_test_setup_teardown(line_moved_later, setup, teardown),
        cmocka_unit_test_setup_teardown(line_inserted_with_its_own_hash, setup, teardown),
        cmocka_unit_test_setup_teardown(rotated_file_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(rotated_file_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(signature_changed, setup, teardown),
        cmocka_unit_test_setup_teardown(key_with_unsigned_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(torn_last_line, setup, teardown),
        cmocka_unit_test_setup_teardown(torn_line_then_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(reformatted_line_verifies, setup, teardown),
        cmocka_unit_test_setup_teardown(gap_counted_as_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(copy_of_a_file, setup, teardown),
        cmocka_unit_test_setup_teardown(restart_into_an_empty_file, setup, teardown),
        cmocka_unit_test_setup_teardown(line_too_long_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(keys_load, setup, teardown),
    };
    int rc = tg_unit_run("audit_verify", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&entropy);
    return rc;
}
