/* `tollgate audit verify|pubkey|keygen`: the offline side of the chained audit log
 * (core/call/audit.c writes it).
 *
 * verify [--key PUB.pem]... [--closed] FILE...
 *   Orders the files by their links (a file's first chained line continues from another file's
 *   last line), then reads them line by line, once, in bounded memory (one line, at most
 *   TG_AUDIT_LINE_MAX bytes, plus a few hashes; when a line breaks the chain, up to
 *   TG_AUDIT_LOOKAHEAD lines after it are read to classify the break). Checks per line: it is
 *   JSON; its event_hash is the SHA-256 of its canonical form without event_hash;
 *   previous_hash is the previous line's event_hash; seq is the previous seq + 1; with --key,
 *   every checkpoint carries a signature that verifies under the key its key_sha256 names.
 *   Stops at the first problem and names it: edited, removed, inserted, reordered, truncated,
 *   missing file, bad signature. What a crash, a restart, rotation or a writer's counted loss
 *   leaves is a note, not a problem.
 *   Prints one line per file, notes, then "OK: ..." or "FAIL: FILE:LINE (seq S): CLASS: ...".
 *   Exit 0 verified, 1 a problem found, 2 usage or I/O error (a file that cannot be read, a
 *   line over the limit, a file without a chained line, a key that cannot be read).
 * pubkey (-c CONF | --key PRIV.pem)
 *   Prints the public key (PEM) of the conf's audit.signing_key or of the given private key.
 * keygen FILE
 *   Writes a new EC P-256 private key (PEM, mode 0600); refuses to overwrite a file. */
#ifndef TG_CMD_AUDIT_CMD_H
#define TG_CMD_AUDIT_CMD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TG_AUDIT_LINE_MAX (16u << 20) /* a longer line cannot be verified (exit 2) */
#define TG_AUDIT_LOOKAHEAD 64         /* lines read past a break to tell its kind */
#define TG_AUDIT_MAX_KEYS 8           /* --key given more than once: old and new signing keys */

/* argv[0] is "audit". */
int tg_audit_cli(int argc, char **argv);

enum tg_audit_problem {
    TG_AUDIT_OK = 0,
    TG_AUDIT_EDITED,
    TG_AUDIT_REMOVED,
    TG_AUDIT_INSERTED,
    TG_AUDIT_REORDERED,
    TG_AUDIT_TRUNCATED,
    TG_AUDIT_MISSING_FILE,
    TG_AUDIT_BAD_SIGNATURE,
};
/* "edited", "removed", ... ("ok" for TG_AUDIT_OK). */
const char *tg_audit_problem_str(enum tg_audit_problem p);

struct tg_audit_key; /* a public key and the SHA-256 of its DER (core/cmd/audit_verify.c) */

/* What tg_audit_verify() found. Value type in caller storage. */
struct tg_audit_verdict {
    enum tg_audit_problem problem;
    const char *file;  /* the problem's file (one of the paths given), or NULL */
    uint64_t line;     /* its line, 1-based; 0 when none */
    int64_t seq;       /* the seq the line carries (or should), -1 when unknown */
    uint64_t records, checkpoints, signed_checkpoints;
    unsigned notes;    /* notes printed (torn lines, earlier chain, unsigned tail, ...) */
};

/* Verify files[0..n) as described above, printing to out (the summary lines and notes, then the
 * OK or FAIL line) and errors to err. keys[0..nkeys): the public keys checkpoints must be signed
 * with (nkeys 0: signatures are not checked). closed: the last file must end with a shutdown
 * checkpoint. Returns 0, 1 or 2 (the exit status), with *v filled. */
int tg_audit_verify(const char *const *files, size_t n, struct tg_audit_key *const *keys, size_t nkeys, int closed,
                    FILE *out, FILE *err, struct tg_audit_verdict *v);

/* A public key from a PEM file (a public key, or a private key whose public half is taken):
 * 0 with *k set (free with tg_audit_key_free), or -1 with why in e. */
int tg_audit_key_load(const char *path, struct tg_audit_key **k, char *e, size_t elen);
void tg_audit_key_free(struct tg_audit_key *k);

#endif
