/* `tollgate audit verify`'s walk along the chain (core/cmd/audit_cmd.h): the files in the order of
 * their links, each line against the one before it, and the first break named. The lines, the
 * files' order and the keys come from core/cmd/audit_verify.c.
 *
 * What is not tampering, and why:
 *  - a torn line (not JSON): a crash in the middle of a write. The writer, opening the file again,
 *    ends the torn bytes with a newline and continues from the last whole line, so the next line
 *    continues from the line before the torn one; at the end of a file nothing follows it.
 *  - the first file continuing from a line no file holds: older files were rotated away.
 *  - a file starting a new chain (previous_hash null): a restart into an empty file.
 *  - lines missing where the writer says it lost them: a write that failed (a full disk) loses
 *    records already chained; the next checkpoint's `dropped` counts them, and, signed, is the
 *    writer's word for it. Such a gap waits for that checkpoint; any other problem first, or the
 *    end of the chain, or a restart, makes it `removed`.
 *  - records after the last checkpoint: not signed yet (the live file's tail). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/buf.h"
#include "core/cmd/audit_verify.h"

/* A line of the chain, remembered. */
struct pos {
    int valid;
    size_t file; /* index into the files */
    uint64_t line;
    int64_t seq;
    uint8_t hash[32];
    int rotate, shutdown; /* a checkpoint with that reason */
};

struct walk {
    struct tg__audit_file *files;
    struct tg_audit_key *const *keys;
    size_t nkeys;
    FILE *out, *err;
    struct tg_audit_verdict *v;
    struct tg__audit_rd *q; /* the current file's lines */
    size_t cur;             /* the current file */
    struct pos a, a2;       /* the last line of the chain and the one before it */
    struct pos last_cp;     /* the last checkpoint */
    uint64_t after_cp;      /* records after it */
    int any_signed;
    int64_t dropped_base;   /* `dropped` of the last checkpoint */
    struct {
        int on;
        unsigned n; /* gaps waiting */
        size_t file;
        uint64_t line, k;
        int64_t seq, from;
    } gap; /* lines missing, waiting for a checkpoint to count them as dropped */
    uint64_t unchained;    /* lines before the chain starts */
    int torn_tail;         /* a torn line came after the last line of the chain */
    /* the current file's figures */
    uint64_t f_records, f_cps, f_signed, f_first, f_last;
    int64_t f_lo, f_hi;
};

struct ref {
    char s[320];
};

/* "line N" in the file the message is about, else "FILE:N". */
static struct ref at(const struct walk *w, size_t file, uint64_t line, size_t about)
{
    struct ref r;
    if (file == about)
        snprintf(r.s, sizeof(r.s), "line %" PRIu64, line);
    else
        snprintf(r.s, sizeof(r.s), "%s:%" PRIu64, w->files[file].path, line);
    return r;
}

static void note(struct walk *w, size_t file, uint64_t line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void note(struct walk *w, size_t file, uint64_t line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (line > 0)
        fprintf(w->out, "%s:%" PRIu64 ": note: ", w->files[file].path, line);
    else
        fprintf(w->out, "%s: note: ", w->files[file].path);
    vfprintf(w->out, fmt, ap);
    fputc('\n', w->out);
    va_end(ap);
    w->v->notes++;
}

static int report(struct walk *w, enum tg_audit_problem p, size_t file, uint64_t line, int64_t seq, const char *fmt,
                  va_list ap)
{
    if (seq >= 0)
        fprintf(w->out, "FAIL: %s:%" PRIu64 " (seq %" PRId64 "): %s: ", w->files[file].path, line, seq,
                tg_audit_problem_str(p));
    else
        fprintf(w->out, "FAIL: %s:%" PRIu64 " (seq ?): %s: ", w->files[file].path, line, tg_audit_problem_str(p));
    vfprintf(w->out, fmt, ap);
    fputc('\n', w->out);
    w->v->problem = p;
    w->v->file = w->files[file].path;
    w->v->line = line;
    w->v->seq = seq;
    return 1;
}

static int report_f(struct walk *w, enum tg_audit_problem p, size_t file, uint64_t line, int64_t seq, const char *fmt,
                    ...) __attribute__((format(printf, 6, 7)));
static int report_f(struct walk *w, enum tg_audit_problem p, size_t file, uint64_t line, int64_t seq, const char *fmt,
                    ...)
{
    va_list ap;
    va_start(ap, fmt);
    report(w, p, file, line, seq, fmt, ap);
    va_end(ap);
    return 1;
}

/* The gap waiting for a checkpoint, as the problem it now is. */
static int gap_fail(struct walk *w, const char *why)
{
    uint64_t first = (uint64_t)(w->gap.seq - w->gap.from - 1);
    char more[64] = "";
    if (w->gap.n > 1)
        snprintf(more, sizeof(more), " (%" PRIu64 " more in %u later gap(s))", w->gap.k - first, w->gap.n - 1);
    return report_f(w, TG_AUDIT_REMOVED, w->gap.file, w->gap.line, w->gap.seq,
                    "%" PRIu64 " line(s) missing before line %" PRIu64 " (seq jumps from %" PRId64 " to %" PRId64
                    ")%s%s",
                    first, w->gap.line, w->gap.from, w->gap.seq, more, why);
}

/* The first problem: a gap still waiting comes before it. */
static int fail(struct walk *w, enum tg_audit_problem p, size_t file, uint64_t line, int64_t seq, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int fail(struct walk *w, enum tg_audit_problem p, size_t file, uint64_t line, int64_t seq, const char *fmt, ...)
{
    if (w->gap.on)
        return gap_fail(w, ", and no checkpoint counts them as dropped before the next problem");
    va_list ap;
    va_start(ap, fmt);
    report(w, p, file, line, seq, fmt, ap);
    va_end(ap);
    return 1;
}

static int continues(const struct tg__audit_line *m, const struct pos *p)
{
    return m != NULL && m->kind == TG__AUDIT_CHAINED && m->hash_ok && p->valid && m->has_prev &&
           memcmp(m->prev, p->hash, 32) == 0;
}

static const struct tg_audit_key *key_for(const struct walk *w, const struct tg__audit_line *l)
{
    for (size_t i = 0; l->has_key_sha && i < w->nkeys; i++)
        if (memcmp(tg__audit_key_id(w->keys[i]), l->key_sha, 32) == 0)
            return w->keys[i];
    return NULL;
}

/* l is the next line of the chain. */
static int accept(struct walk *w, const struct tg__audit_line *l)
{
    w->a2 = w->a;
    w->a = (struct pos){1, w->cur, l->line, l->seq, {0}, 0, 0};
    w->torn_tail = 0;
    memcpy(w->a.hash, l->hash, 32);
    if (w->f_first == 0)
        w->f_first = l->line, w->f_lo = l->seq;
    w->f_last = l->line;
    w->f_hi = l->seq;
    if (!l->checkpoint) {
        w->f_records++;
        w->after_cp++;
        return 0;
    }
    w->a.rotate = strcmp(l->reason, "rotate") == 0;
    w->a.shutdown = strcmp(l->reason, "shutdown") == 0;
    w->f_cps++;
    if (l->sig_state != 0) {
        w->f_signed++;
        w->any_signed = 1;
    }
    if (w->nkeys > 0) {
        const struct tg_audit_key *k = key_for(w, l);
        char id[65] = "";
        if (l->has_key_sha)
            tg_hex_encode(l->key_sha, 32, id);
        if (l->sig_state == 0)
            return fail(w, TG_AUDIT_BAD_SIGNATURE, w->cur, l->line, l->seq, "the checkpoint has no signature");
        if (!l->has_key_sha)
            return fail(w, TG_AUDIT_BAD_SIGNATURE, w->cur, l->line, l->seq,
                        "the checkpoint has no key_sha256 (64 lowercase hex digits) to name its key");
        if (k == NULL)
            return fail(w, TG_AUDIT_BAD_SIGNATURE, w->cur, l->line, l->seq,
                        "the checkpoint names key_sha256 %.16s..., which is not the SHA-256 of a key given", id);
        if (l->sig_state != 1 || tg__audit_verify_sig(k, l) != 0)
            return fail(w, TG_AUDIT_BAD_SIGNATURE, w->cur, l->line, l->seq,
                        "the checkpoint's signature does not verify with %s", tg__audit_key_path(k));
    }
    int start = strcmp(l->reason, "start") == 0;
    if (w->gap.on) {
        if (!start && l->dropped >= w->dropped_base && (uint64_t)(l->dropped - w->dropped_base) >= w->gap.k) {
            if (w->gap.n == 1)
                note(w, w->cur, l->line,
                     "%" PRIu64 " line(s) missing before %s (seq %" PRId64 " to %" PRId64
                     ") are counted as dropped by the writer in this checkpoint",
                     w->gap.k, at(w, w->gap.file, w->gap.line, w->cur).s, w->gap.from + 1, w->gap.seq - 1);
            else
                note(w, w->cur, l->line,
                     "%" PRIu64 " line(s) missing in %u gaps from %s on are counted as dropped by the writer in this "
                     "checkpoint",
                     w->gap.k, w->gap.n, at(w, w->gap.file, w->gap.line, w->cur).s);
            w->gap.on = 0;
        } else {
            return gap_fail(w, start ? ", and the writer restarted without counting them as dropped"
                                     : ", more than the next checkpoint counts as dropped");
        }
    } else if (!start && l->dropped > w->dropped_base) {
        note(w, w->cur, l->line, "the writer dropped %" PRId64 " record(s) since the checkpoint before (queue full or a failed write)",
             l->dropped - w->dropped_base);
    }
    if (l->dropped >= 0)
        w->dropped_base = l->dropped;
    w->last_cp = w->a;
    w->after_cp = 0;
    return 0;
}

/* l, whose own hash is right, does not continue from the last line of the chain (w->a), in the
 * same file: tell how, from the lines around it. */
static int classify(struct walk *w, const struct tg__audit_line *l)
{
    struct tg__audit_rd *q = w->q;
    size_t f = w->cur;
    /* Continues from the line before the last one: the last one, or this one, is not part of
     * the chain (inserted with a hash of its own made to fit). The line after decides which. */
    if (w->a2.valid && l->has_prev && memcmp(l->prev, w->a2.hash, 32) == 0) {
        const struct tg__audit_line *m = tg__audit_peek(q, 1);
        if (m != NULL && m->kind == TG__AUDIT_CHAINED && m->hash_ok && m->has_prev &&
            memcmp(m->prev, l->hash, 32) == 0 && memcmp(l->hash, w->a.hash, 32) != 0)
            return fail(w, TG_AUDIT_INSERTED, w->a.file, w->a.line, w->a.seq,
                        "%s is not part of the chain: %s continues from %s", at(w, w->a.file, w->a.line, w->a.file).s,
                        at(w, f, l->line, w->a.file).s, at(w, w->a2.file, w->a2.line, w->a.file).s);
        return fail(w, TG_AUDIT_INSERTED, f, l->line, l->seq, "line %" PRIu64 " is not part of the chain: it continues from %s, as %s does%s",
                    l->line, at(w, w->a2.file, w->a2.line, f).s, at(w, w->a.file, w->a.line, f).s,
                    memcmp(l->hash, w->a.hash, 32) == 0 ? " (a copy of it)" : "");
    }
    size_t k = 0;
    for (size_t i = 1; i <= TG_AUDIT_LOOKAHEAD; i++) {
        const struct tg__audit_line *p = tg__audit_peek(q, i);
        if (p == NULL)
            break;
        if (p->kind != TG__AUDIT_CHAINED || !p->hash_ok)
            continue;
        if (l->has_prev && memcmp(p->hash, l->prev, 32) == 0)
            return fail(w, TG_AUDIT_REORDERED, f, l->line, l->seq,
                        "line %" PRIu64 " (seq %" PRId64 ") continues from line %" PRIu64 " (seq %" PRId64
                        "), which comes after it",
                        l->line, l->seq, p->line, p->seq);
        if (k == 0 && continues(p, &w->a)) {
            k = i;
            if (i == 1)
                return fail(w, TG_AUDIT_INSERTED, f, l->line, l->seq,
                            "line %" PRIu64 " is not part of the chain: line %" PRIu64 " continues from %s", l->line,
                            p->line, at(w, w->a.file, w->a.line, f).s);
            return fail(w, TG_AUDIT_REORDERED, f, l->line, l->seq,
                        "lines %" PRIu64 " to %" PRIu64 " are out of place: line %" PRIu64 " (seq %" PRId64
                        ") continues from %s (seq %" PRId64 ")",
                        l->line, p->line - 1, p->line, p->seq, at(w, w->a.file, w->a.line, f).s, w->a.seq);
        }
    }
    if (l->seq > w->a.seq + 1) {
        /* Lines missing: the writer may have lost them (a failed write) and say so at its next
         * checkpoint. Wait for it. */
        if (w->gap.on) {
            w->gap.k += (uint64_t)(l->seq - w->a.seq - 1);
            w->gap.n++;
        } else {
            w->gap.on = 1;
            w->gap.n = 1;
            w->gap.file = f;
            w->gap.line = l->line;
            w->gap.seq = l->seq;
            w->gap.from = w->a.seq;
            w->gap.k = (uint64_t)(l->seq - w->a.seq - 1);
        }
        return accept(w, l);
    }
    if (l->seq <= w->a.seq)
        return fail(w, TG_AUDIT_REORDERED, f, l->line, l->seq, "seq goes back from %" PRId64 " (%s) to %" PRId64, w->a.seq,
                    at(w, w->a.file, w->a.line, f).s, l->seq);
    return fail(w, TG_AUDIT_EDITED, w->a.file, w->a.line, w->a.seq,
                "%s was changed and its event_hash made again: %s (seq %" PRId64 ") does not continue from it",
                at(w, w->a.file, w->a.line, w->a.file).s, at(w, f, l->line, w->a.file).s, l->seq);
}

/* l is the first chained line of a file after the first: it continues from the last file's end,
 * or the files have a gap between them. */
static int boundary(struct walk *w, const struct tg__audit_line *l)
{
    const struct pos *a = &w->a;
    const char *pf = w->files[a->file].path, *cf = w->files[w->cur].path;
    if (!l->has_prev) {
        if (w->gap.on)
            return gap_fail(w, ", and the writer restarted without counting them as dropped");
        note(w, w->cur, l->line, "starts a new chain (previous_hash null) after %s ends at seq %" PRId64, pf, a->seq);
        w->a.valid = w->a2.valid = 0;
        w->dropped_base = 0;
        return accept(w, l);
    }
    if (l->seq <= a->seq)
        return fail(w, TG_AUDIT_REORDERED, w->cur, l->line, l->seq,
                    "%s starts at seq %" PRId64 ", which the chain has passed (%s ends at seq %" PRId64
                    "): a copy of a file, or a file of another chain?",
                    cf, l->seq, pf, a->seq);
    if (!a->rotate)
        return fail(w, TG_AUDIT_TRUNCATED, a->file, a->line, a->seq,
                    "the file ends at seq %" PRId64 " without a rotate checkpoint, and %s continues from seq %" PRId64
                    " (%" PRId64 " line(s) cut from its end)",
                    a->seq, cf, l->seq - 1, l->seq - 1 - a->seq);
    if (l->seq > a->seq + 1)
        return fail(w, TG_AUDIT_MISSING_FILE, w->cur, l->line, l->seq,
                    "seq %" PRId64 " to %" PRId64 " (%" PRId64 " line(s)) between %s and %s are in no file given",
                    a->seq + 1, l->seq - 1, l->seq - 1 - a->seq, pf, cf);
    return fail(w, TG_AUDIT_EDITED, w->cur, l->line, l->seq,
                "line %" PRIu64 " does not continue from the last line of %s (seq %" PRId64 ")", l->line, pf, a->seq);
}

/* One line, l = the queue's first. 0 to go on, 1 a problem (printed). */
static int step(struct walk *w, const struct tg__audit_line *l, int first_in_file)
{
    struct tg__audit_rd *q = w->q;
    size_t f = w->cur;
    const struct tg__audit_line *m;
    switch (l->kind) {
    case TG__AUDIT_TORN:
        if (!w->a.valid) {
            w->unchained++;
            return 0;
        }
        m = tg__audit_peek(q, 1);
        if (m == NULL) { /* the end of the file, or a line past the limit (walk_file says so) */
            if (q->status == 0)
                note(w, f, l->line, "torn last line (%s; a crash while writing?): not part of the chain", l->why);
            w->torn_tail = 1;
            return 0;
        }
        if (continues(m, &w->a)) {
            note(w, f, l->line, "torn line (%s; a crash?); line %" PRIu64 " continues the chain from %s (a restart)",
                 l->why, m->line, at(w, w->a.file, w->a.line, f).s);
            return 0;
        }
        if (m != NULL && m->kind == TG__AUDIT_CHAINED && m->hash_ok && m->seq > w->a.seq + 1) {
            note(w, f, l->line, "torn line (%s; a write cut short?)", l->why);
            return 0;
        }
        return fail(w, TG_AUDIT_EDITED, f, l->line, w->a.seq + 1, "%s", l->why);
    case TG__AUDIT_PLAIN:
        if (!w->a.valid) {
            w->unchained++;
            return 0;
        }
        m = tg__audit_peek(q, 1);
        if (continues(m, &w->a))
            return fail(w, TG_AUDIT_INSERTED, f, l->line, w->a.seq + 1,
                        "line %" PRIu64 " (no event_hash) is not part of the chain: line %" PRIu64 " continues from %s",
                        l->line, m->line, at(w, w->a.file, w->a.line, f).s);
        return fail(w, TG_AUDIT_EDITED, f, l->line, w->a.seq + 1, "%s", l->why);
    default:
        break;
    }
    if (!l->hash_ok) {
        m = tg__audit_peek(q, 1);
        if (continues(m, &w->a) && m->seq == w->a.seq + 1)
            return fail(w, TG_AUDIT_INSERTED, f, l->line, l->seq,
                        "line %" PRIu64 " (which does not match its event_hash) is not part of the chain: line %" PRIu64
                        " continues from %s",
                        l->line, m->line, at(w, w->a.file, w->a.line, f).s);
        return fail(w, TG_AUDIT_EDITED, f, l->line, l->seq >= 0 ? l->seq : w->a.seq + 1, "%s", l->why);
    }
    if (!w->a.valid) { /* the chain's first line */
        if (w->unchained > 0)
            note(w, f, l->line, "%" PRIu64 " line(s) before this one are not chained (written before the chain began)",
                 w->unchained);
        if (l->has_prev)
            note(w, f, l->line, "continues an earlier chain (seq %" PRId64 " and before are in no file given)",
                 l->seq - 1);
        return accept(w, l);
    }
    if (first_in_file && w->a.file != f && !(l->has_prev && memcmp(l->prev, w->a.hash, 32) == 0))
        return boundary(w, l);
    if (l->has_prev && memcmp(l->prev, w->a.hash, 32) == 0) {
        if (l->seq == w->a.seq + 1)
            return accept(w, l);
        return fail(w, TG_AUDIT_EDITED, f, l->line, l->seq,
                    "seq %" PRId64 " does not follow seq %" PRId64 " of %s (changed, its event_hash made again)", l->seq,
                    w->a.seq, at(w, w->a.file, w->a.line, f).s);
    }
    return classify(w, l);
}

/* The lines of file f, in order. 0, 1 (a problem, printed) or 2. */
static int walk_file(struct walk *w, size_t f)
{
    struct tg__audit_rd *q = tg_xcalloc(1, sizeof(*q));
    if (tg__audit_rd_open(q, w->files[f].path) != 0) {
        fprintf(w->err, "tollgate: audit verify: %s: cannot open\n", w->files[f].path);
        free(q);
        return 2;
    }
    w->q = q;
    w->cur = f;
    w->f_records = w->f_cps = w->f_signed = w->f_first = w->f_last = 0;
    int rc = 0, first = 1;
    const struct tg__audit_line *l;
    while ((l = tg__audit_peek(q, 0)) != NULL) {
        int chained = l->kind == TG__AUDIT_CHAINED;
        if ((rc = step(w, l, first)) != 0)
            break;
        if (chained)
            first = 0;
        tg__audit_pop(q);
    }
    if (rc == 0 && q->status != 0) {
        fprintf(w->err, "tollgate: audit verify: %s:%" PRIu64 ": %s\n", w->files[f].path, tg__audit_rd_line(q),
                q->status == -1 ? "a line longer than the limit (16 MiB); cannot verify" : "read error");
        rc = 2;
    }
    if (rc == 0)
        fprintf(w->out, "%s: lines %" PRIu64 "-%" PRIu64 ", seq %" PRId64 "-%" PRId64 ": %" PRIu64
                        " records, %" PRIu64 " checkpoints (%" PRIu64 " signed)\n",
                w->files[f].path, w->f_first, w->f_last, w->f_lo, w->f_hi, w->f_records, w->f_cps, w->f_signed);
    w->v->records += w->f_records;
    w->v->checkpoints += w->f_cps;
    w->v->signed_checkpoints += w->f_signed;
    tg__audit_rd_close(q);
    free(q);
    w->q = NULL;
    return rc;
}

int tg_audit_verify(const char *const *paths, size_t n, struct tg_audit_key *const *keys, size_t nkeys, int closed,
                    FILE *out, FILE *err, struct tg_audit_verdict *v)
{
    memset(v, 0, sizeof(*v));
    v->seq = -1;
    struct tg__audit_file *files = tg_xcalloc(n ? n : 1, sizeof(*files));
    size_t *order = tg_xcalloc(n ? n : 1, sizeof(*order)), norder = 0;
    struct walk w = {.files = files, .keys = keys, .nkeys = nkeys, .out = out, .err = err, .v = v};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        files[i].path = paths[i];
        rc = tg__audit_ends(&files[i], err);
        for (size_t j = 0; j < i && rc == 0; j++)
            if (files[j].dev == files[i].dev && files[j].ino == files[i].ino) {
                fprintf(err, "tollgate: audit verify: %s: the same file as %s\n", paths[i], paths[j]);
                rc = 2;
            }
    }
    if (rc == 0)
        rc = tg__audit_order(files, n, order, &norder, err);
    if (rc == 0 && norder == 0) {
        fprintf(err, "tollgate: audit verify: no chained line in the files given\n");
        rc = 2;
    }
    for (size_t i = 0; i < n && rc == 0; i++)
        if (files[i].torn_only)
            note(&w, i, 0, "no whole line, only torn ones (a crash while writing?)");
        else if (!files[i].chained)
            fprintf(out, "%s: empty\n", paths[i]);
    for (size_t i = 0; i < norder && rc == 0; i++)
        rc = walk_file(&w, order[i]);
    if (rc == 0 && w.gap.on)
        rc = gap_fail(&w, ", and no checkpoint after them counts them as dropped");
    if (rc == 0 && closed && !w.a.shutdown)
        rc = fail(&w, TG_AUDIT_TRUNCATED, w.a.file, w.a.line, w.a.seq,
                  "the last line of the chain is not a shutdown checkpoint (--closed)");
    else if (rc == 0 && closed && w.torn_tail)
        rc = fail(&w, TG_AUDIT_TRUNCATED, w.a.file, w.a.line, w.a.seq,
                  "a torn line follows the shutdown checkpoint: the gateway started again and crashed (--closed)");
    if (rc == 0) {
        size_t last = order[norder - 1];
        if (w.after_cp > 0 && (w.any_signed || nkeys > 0) && w.last_cp.valid)
            note(&w, last, 0, "%" PRIu64 " record(s) after the last signed checkpoint (%s, seq %" PRId64 ") are not signed yet",
                 w.after_cp, at(&w, w.last_cp.file, w.last_cp.line, SIZE_MAX).s, w.last_cp.seq);
        else if (nkeys > 0 && !w.last_cp.valid)
            note(&w, last, 0, "no checkpoint: nothing is signed");
        if (w.any_signed && nkeys == 0)
            note(&w, last, 0, "signatures not checked (no --key)");
        fprintf(out, "OK: %" PRIu64 " records, %" PRIu64 " checkpoints (%" PRIu64 " signed), files", v->records,
                v->checkpoints, v->signed_checkpoints);
        for (size_t i = 0; i < norder; i++)
            fprintf(out, " %s", paths[order[i]]);
        fputc('\n', out);
    }
    free(files);
    free(order);
    return rc;
}
