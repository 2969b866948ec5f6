/* Audit log: one JSON line per policy decision.
 *
 * Lines are appended to a buffer, written once per loop iteration (just before the loop polls,
 * or as soon as 64 KiB wait). To a regular file the loop writes them itself, with write(2), as
 * nginx writes its access log: a write to the page cache costs a few microseconds, where a
 * hand-off to libuv's thread pool cost a futex wake, a thread's write and an eventfd back, about
 * a twentieth of a proxied call's CPU. To anything else (a pipe, a terminal, a FIFO: a reader
 * that can stall) they go through uv_fs_write, one write in flight at a time. If the disk falls
 * behind by more than
 * audit.max_pending_bytes, new records are dropped and counted (the metric
 * tollgate_audit_dropped_total), never buffered without bound. A write that fails (a full
 * disk: ENOSPC) loses its records, counted the same way; the error is logged once, until a
 * write succeeds again. Calls are answered either way: the audit log does not fail closed. */
#ifndef TG_AUDIT_H
#define TG_AUDIT_H

#include <cjson/cJSON.h>
#include <uv.h>

#include "core/base/buf.h"
#include "core/conf/conf.h"

struct tg_audit;

struct tg_audit *tg_audit_open(uv_loop_t *loop, const struct tg_audit_conf *ac, struct tg_buf *err);
/* A reload that names another file: to (opened, before its tg_audit_set_conf) continues the chain
 * of from (after its tg_audit_close wrote its last checkpoint) when to's file was empty, so that
 * the operator's files stay one chain. */
void tg_audit_hand_over(struct tg_audit *from, struct tg_audit *to);
/* Flush what is buffered, then free (async: a stays readable until the loop runs; safe to call once). */
void tg_audit_close(struct tg_audit *a);
/* What the chain's checkpoints record (the conf and policy files in force, the signing key):
 * called once after tg_audit_open (writes the "start" checkpoint) and after each reload that
 * keeps the writer ("reload"). No-op without audit.chain. */
void tg_audit_set_conf(struct tg_audit *a, const struct tg_conf *conf);
/* Reopen the file (SIGUSR1); with a chain, the old file ends with a "rotate" checkpoint. */
void tg_audit_reopen(struct tg_audit *a);
uint64_t tg_audit_dropped(const struct tg_audit *a);
uint64_t tg_audit_written(const struct tg_audit *a);

/* The fields of one audit line. Value type: its writer (tg_call_audit() in core/call/call.c,
 * refuse_nonstandard() in core/gate/dispatch.c) fills one on its stack; the strings are borrowed and
 * read only during tg_audit_log(). */
struct tg_audit_record {
    const char *grant, *session, *upstream, *method, *tool;
    const char *subject; /* who inside the grant (the credential's subject; the grant for a static token) */
    const char *decision; /* allow deny limited approve approved rejected expired refused */
    const char *rule;
    const char *history_json;  /* the earlier call a history condition refused for (a JSON object), or NULL/"" */
    const char *counters_json; /* object members, may be "" */
    const char *args_sha256;   /* tools/call: SHA-256 of the canonical arguments */
    const char *args_json;     /* redacted argument values, only when audit.args = "values" */
    const char *approval_id;
    const char *decided_by;
    double latency_ms; /* < 0: not forwarded */
    const char *outcome; /* ok error timeout unavailable, or NULL */
    const char *correlation_id; /* of a refusal the client was told of (its toolFailure), or NULL */
};

void tg_audit_log(struct tg_audit *a, const struct tg_audit_conf *ac, const struct tg_audit_record *r);

/* SHA-256 (hex) of the canonical serialization of args ("null" when absent): tg_json_digest in hex. */
void tg_audit_args_hash(const cJSON *args, char out[65]);
/* Redacted JSON of args (malloc'd) when audit.args = "values", else NULL. */
char *tg_audit_args_values(const struct tg_audit_conf *ac, const cJSON *args);
/* Where params.arguments is in a message's JSON text (written by the gateway, or parsed strictly
 * before): 0 with its span, -1 when it has none. */
int tg_audit_args_span(const char *msg, size_t n, size_t *off, size_t *len);
/* The JSON text p[0..n) as it is, but the values of audit.redact keys replaced by "[redacted]"
 * (malloc'd, NUL-terminated): every other byte is copied, so numbers, escapes and spacing are
 * the sender's (1e400 stays 1e400), which a tree written again would not keep. */
char *tg_audit_args_text(const struct tg_audit_conf *ac, const char *p, size_t n);

#endif
