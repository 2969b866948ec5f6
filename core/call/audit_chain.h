/* The audit log's hash chain (core/call/audit.h). Each line the writer makes is canonical JSON
 * (members in byte order, no whitespace, numbers as written): the chain adds the line's place
 * (seq), the hash of the line before it (previous_hash), and the SHA-256 of the line itself
 * without that last member (event_hash). Every checkpoint_lines records or checkpoint_seconds,
 * at reload, rotation and shutdown, a checkpoint line records the conf and policy files in force
 * and, with a key, is signed with ECDSA P-256, so that a line edited, removed, swapped or
 * inserted anywhere before it is found by `tollgate audit verify`. Owner: the writer
 * (struct tg_audit); not shared. */
#ifndef TG_AUDIT_CHAIN_H
#define TG_AUDIT_CHAIN_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"
#include "core/conf/conf.h"

struct tg_audit_chain;

struct tg_audit_chain *tg_audit_chain_new(void);
void tg_audit_chain_free(struct tg_audit_chain *c);
/* Continue from the last whole line of the file open at fd, when there is one and it is a chained
 * line; an empty file keeps the chain where it is (a rotated file continues the old one).
 * Returns 1 when the file ends inside a line (a write cut short by a crash): the writer then
 * starts with a newline. */
int tg_audit_chain_resume(struct tg_audit_chain *c, int wfd, const char *path);
/* to, whose file was empty, continues from's chain (a reload that names another file). */
void tg_audit_chain_adopt(struct tg_audit_chain *to, const struct tg_audit_chain *from);
/* What checkpoints record: the conf file and the policy files of c, this instance's name, and the
 * key that signs (audit.signing_key, loaded again when it changed). */
void tg_audit_chain_set_conf(struct tg_audit_chain *c, const struct tg_conf *conf);
/* ,"previous_hash":… and ,"seq":… for the line being written. */
void tg_audit_chain_put_prev(const struct tg_audit_chain *c, struct tg_buf *b);
void tg_audit_chain_put_seq(const struct tg_audit_chain *c, struct tg_buf *b);
/* b[mark..) is the whole line so far, ending with its '}': its event_hash and newline are
 * appended, and the chain moves on to it. canonical: the bytes are the line's canonical form
 * already (members in byte order, no whitespace, at every depth); otherwise the line is parsed
 * and its canonical form hashed (a line with a client's arguments, or several counters). */
void tg_audit_chain_seal(struct tg_audit_chain *c, struct tg_buf *b, size_t mark, int canonical);
/* Append a checkpoint line (reason: start lines interval reload rotate shutdown) to b. records:
 * since the last checkpoint; dropped: records lost since start. stamp: the line's time. */
void tg_audit_chain_checkpoint(struct tg_audit_chain *c, struct tg_buf *b, const char *reason, uint64_t records,
                               uint64_t dropped, const char *stamp);
/* SEP-3004's disposition of a decision word (allow deny limited approve approved …). */
const char *tg_audit_disposition(const char *decision);

#endif
