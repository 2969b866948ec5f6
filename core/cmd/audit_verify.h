/* Inside `tollgate audit verify` (core/cmd/audit_cmd.h): what core/cmd/audit_verify.c (lines,
 * files, keys) hands core/cmd/audit_chain.c (the walk along the chain). Not for other modules. */
#ifndef TG_CMD_AUDIT_VERIFY_H
#define TG_CMD_AUDIT_VERIFY_H

#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <mbedtls/pk.h>

#include "core/cmd/audit_cmd.h"

enum { TG__AUDIT_TORN = 1, TG__AUDIT_PLAIN, TG__AUDIT_CHAINED };

/* What one line says, without its text: a value type (the lookahead queue holds a few dozen). */
struct tg__audit_line {
    int kind;         /* TORN: not JSON; PLAIN: JSON without event_hash; CHAINED */
    int hash_ok;      /* CHAINED: the fields are well formed and event_hash matches the line */
    int has_prev;     /* previous_hash is a hash (0: null) */
    int nl;           /* the line ended with a newline */
    uint64_t line;    /* 1-based */
    int64_t seq;      /* -1 when absent or not an integer */
    uint8_t hash[32]; /* event_hash as written */
    uint8_t prev[32];
    char time[40];
    int checkpoint;
    char reason[16];
    int64_t dropped;      /* checkpoint.dropped, -1 when absent */
    int has_key_sha;
    uint8_t key_sha[32];  /* checkpoint.key_sha256 */
    int sig_state;        /* 0 no signature, 1 decoded, 2 present but not base64 of at most 80 bytes */
    uint8_t sig[80];
    size_t siglen;
    uint8_t sig_hash[32]; /* SHA-256 of the canonical line without event_hash and signature */
    char why[96];         /* what is wrong with the line, when something is */
};

/* Analyse p[0..n) into *li (li->line and li->nl are kept). */
void tg__audit_line(const char *p, size_t n, struct tg__audit_line *li);

/* A file given to verify. */
struct tg__audit_file {
    const char *path;
    int chained;                  /* it has a chained line (else it is empty, or torn_only) */
    int torn_only;                /* nothing but torn lines (not JSON) */
    dev_t dev;
    ino_t ino;
    struct tg__audit_line head;   /* its first chained line */
    struct tg__audit_line tail;   /* its last chained line */
};
int tg__audit_ends(struct tg__audit_file *af, FILE *err);
int tg__audit_order(struct tg__audit_file *files, size_t nfiles, size_t *order, size_t *n, FILE *err);

/* One file's lines with a lookahead queue. */
struct tg__audit_rd {
    struct tg__audit_reader *r;
    struct tg__audit_line q[TG_AUDIT_LOOKAHEAD + 1];
    size_t head, n;
    int status; /* 0, or why the queue stopped filling: -1 a line too long, -2 a read error */
};
int tg__audit_rd_open(struct tg__audit_rd *q, const char *path);
void tg__audit_rd_close(struct tg__audit_rd *q);
struct tg__audit_line *tg__audit_peek(struct tg__audit_rd *q, size_t i);
void tg__audit_pop(struct tg__audit_rd *q);
/* The number of the last line read (the one over the limit, when q->status is -1). */
uint64_t tg__audit_rd_line(const struct tg__audit_rd *q);

int tg__audit_key_sha256(mbedtls_pk_context *pk, uint8_t out[32]);
int tg__audit_verify_sig(const struct tg_audit_key *k, const struct tg__audit_line *li);
const uint8_t *tg__audit_key_id(const struct tg_audit_key *k);
const char *tg__audit_key_path(const struct tg_audit_key *k);

#endif
