/* History: what a caller did before, for policies that judge a call by the calls before it
 * (history conditions, brakes). A store keeps one ring of entries per key (a subject, a grant),
 * newest last, bounded in entries per key and in bytes over all keys, the least recently used
 * key forgotten first.
 *
 * A history lives in a counter store (policy/counters.h: tg_hist_get, tg_hist_add), beside the
 * counters and with their lifetime, so a reload keeps it and a shared store (the cluster's
 * Redis) shares it with the counters in the same round trip. policy/history.c is the local
 * one, a table that the local counter store owns. Pure: no I/O, the clock is a parameter. */
#ifndef TG_HISTORY_H
#define TG_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#define TG_HIST_VALS 4       /* argument values an entry remembers (the recording policy's paths) */
#define TG_HIST_TAGS 8       /* tags an entry carries (a tool has at most TG_TAGS_PER_TOOL) */
#define TG_HIST_NAME 128     /* a tool, resource or prompt name, cut to this many bytes */
#define TG_HIST_UPSTREAM 63  /* an upstream's name, cut */
#define TG_HIST_MAX_AGE_MS ((int64_t)86400000) /* nothing older than a day is kept or asked for */

enum tg_hist_kind { TG_HIST_TOOL = 0, TG_HIST_RESOURCE = 1, TG_HIST_PROMPT = 2 };

/* One call as history remembers it. Value type: a store copies it in; a view lends it out.
 * Hashes are of the canonical form (core/base/json.h tg_json_canon_hash) and stable across
 * processes, so the members of a cluster read each other's entries. */
struct tg_hist_entry {
    int64_t at_ms;                 /* when it was let through (wall clock, ms since the epoch) */
    uint64_t call;                 /* the call's identity: upstream, kind, name, canonical arguments */
    uint64_t session;              /* its session (tg_hist_session_hash), 0 for none */
    uint64_t vals[TG_HIST_VALS];   /* per remembered path: hash of (path, canonical value); 0 none */
    uint64_t tags[TG_HIST_TAGS];   /* tg_hist_tag_hash of each tag; [0, ntags) */
    uint8_t kind;                  /* enum tg_hist_kind */
    uint8_t ntags;
    char upstream[TG_HIST_UPSTREAM + 1];
    char name[TG_HIST_NAME + 1];   /* NUL-terminated; a longer name is cut (and then `truncated`) */
    uint8_t truncated;
};

/* A store's answer to tg_hist_get: the entries of one key, oldest first, in two runs (a ring's
 * tail and head): a[0..na) then b[0..nb). Borrowed: valid until the store next changes (the local
 * store), or until the plan that answered is disposed. known_since_ms: the history is complete
 * for calls at or after this time only; before it, calls may have been made and forgotten (the
 * ring was full and dropped its oldest, or the key was dropped to make room). INT64_MIN when
 * nothing was ever forgotten. A question about a window that starts earlier cannot be answered
 * for sure: a condition that needs to know there were few calls must then deny. */
struct tg_hist_view {
    const struct tg_hist_entry *a, *b;
    size_t na, nb;
    int64_t known_since_ms;
};

static inline size_t tg_hist_view_len(const struct tg_hist_view *v) { return v->na + v->nb; }

/* The i-th newest entry (0: the newest), i < tg_hist_view_len(v). */
static inline const struct tg_hist_entry *tg_hist_view_newest(const struct tg_hist_view *v, size_t i)
{
    size_t n = v->na + v->nb;
    size_t k = n - 1 - i; /* index from the oldest */
    return k < v->na ? &v->a[k] : &v->b[k - v->na];
}

/* The hash of a tag (compared as bytes) and of a session id; neither is ever 0. */
uint64_t tg_hist_tag_hash(const char *tag, size_t n);
uint64_t tg_hist_session_hash(const char *id, size_t n);

/* ---- the local history (policy/history.c): the table the local counter store owns ------- */

struct tg_history;

/* An empty history: at most calls_per_key entries per key (1..TG_HIST_MAX_CALLS), and at most
 * max_bytes over every ring (the least recently used key is dropped to make room; at least one
 * ring always fits). */
#define TG_HIST_MAX_CALLS 4096
struct tg_history *tg_history_new(size_t calls_per_key, size_t max_bytes);
void tg_history_free(struct tg_history *h);
/* New bounds (a reload); rings longer than calls_per_key lose their oldest entries now. */
void tg_history_limits(struct tg_history *h, size_t calls_per_key, size_t max_bytes);
void tg_history_get(struct tg_history *h, uint64_t h1, uint64_t h2, struct tg_hist_view *out);
void tg_history_add(struct tg_history *h, uint64_t h1, uint64_t h2, const struct tg_hist_entry *e);
/* Drop rings whose newest entry is older than TG_HIST_MAX_AGE_MS; at most budget rings looked at. */
void tg_history_sweep(struct tg_history *h, int64_t now_ms, size_t budget);
size_t tg_history_keys(const struct tg_history *h);
size_t tg_history_memory(const struct tg_history *h);
/* Entries dropped so far because a ring was full, and rings dropped to stay under max_bytes. */
uint64_t tg_history_forgotten(const struct tg_history *h);
uint64_t tg_history_evicted(const struct tg_history *h);

#endif
