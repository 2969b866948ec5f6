/* Pinned tool definitions: a pin file holds, per tool of one upstream, the SHA-256 of the
 * canonical JSON (core/base/json.h, tg_json_canon) of its definition as reviewed:
 *
 *   {"version": "1", "upstream": "NAME",
 *    "tools": {"T": {"sha256": "64 lowercase hex", "definition": {"name": "T", ...}}}}
 *
 * The definition is the tool object of a tools/list answer cut to {name, description,
 * inputSchema, outputSchema, annotations} (members it lacks stay absent). At run time the
 * gateway learns each pinned tool's definition from the tools/list answers it relays (a table
 * per upstream, struct tg_pins_seen) and refuses and hides a tool whose definition is not the
 * pinned one (core/gate/pins.c, core/mcp/rewrite.c). */
#ifndef TG_POLICY_PINS_H
#define TG_POLICY_PINS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/base/buf.h"

#define TG_PINS_MAX_TOOLS 4096               /* tools in one pin file */
#define TG_PINS_MAX_BYTES (16u * 1024 * 1024) /* one pin file */

struct tg_pins;
struct tg_policy;

/* Load a pin file, strictly: unknown keys, a version other than "1", a sha256 that is not 64
 * lowercase hex or does not match its definition, a definition whose name is not its key: each
 * an error appended to err as "FILE: PATH.IN.FILE: reason\n". upstream (may be NULL): the conf's
 * name for it; a file naming another upstream is a warning appended to warn. Returns 0 with *out
 * (one reference), or -1. */
int tg_pins_load(const char *path, const char *upstream, struct tg_pins **out, struct tg_buf *err,
                 struct tg_buf *warn);
struct tg_pins *tg_pins_ref(struct tg_pins *p);
void tg_pins_unref(struct tg_pins *p);
const char *tg_pins_path(const struct tg_pins *p);
size_t tg_pins_count(const struct tg_pins *p);
/* The i-th pinned tool (sorted by name): its name, hash and definition (borrowed from p). */
const char *tg_pins_name(const struct tg_pins *p, size_t i);
const cJSON *tg_pins_definition(const struct tg_pins *p, size_t i);
/* The pinned hash of tool, or NULL when the file does not pin it. */
const uint8_t *tg_pins_find(const struct tg_pins *p, const char *tool);

/* A tool object (as tools/list lists it) cut to its definition: a new object the caller frees,
 * members in the order of the definition's fields. NULL if tool has no string name. */
cJSON *tg_pins_definition_of(const cJSON *tool);
/* The SHA-256 of a tool's definition (tg_pins_definition_of, canonical). */
void tg_pins_hash(const cJSON *tool, uint8_t out[32]);
/* The pin file of these tools (a tools/list "tools" array), as written: pretty JSON + "\n". */
void tg_pins_write(struct tg_buf *out, const char *upstream, const cJSON *tools);
/* The same into the file path: a temporary file beside it renamed over it. 0, or -1 with the
 * reason in err (no newline). */
int tg_pins_write_file(const char *path, const char *upstream, const cJSON *tools, struct tg_buf *err);

/* What the gateway learnt of pinned tools, per upstream: the hash of each pinned tool's
 * definition as last listed, and whether it was listed since the upstream last said its tools
 * changed (notifications/tools/list_changed). Bounded: only tools the upstream's pin file names
 * are kept (TG_PINS_MAX_TOOLS per upstream), at most TG_PINS_SEEN_UPSTREAMS upstreams. Owner:
 * the server (core/call/gateway.h); it outlives reloads, so a reload forgets nothing. */
#define TG_PINS_SEEN_UPSTREAMS 256
struct tg_pins_seen;
struct tg_pins_seen *tg_pins_seen_new(void);
void tg_pins_seen_free(struct tg_pins_seen *s);
/* The upstream says its tools changed: what was learnt of it is stale until listed again. */
void tg_pins_seen_stale(struct tg_pins_seen *s, const char *upstream);
/* A server message p[0..n) (a notification) of an upstream with pins (NULL: nothing to do): one
 * that may be notifications/tools/list_changed makes what was learnt of it stale. */
void tg_pins_seen_note(struct tg_pins_seen *s, const struct tg_pins *pins, const char *upstream, const char *p,
                       size_t n);
/* Is this tool of a tools/list answer shown? Learns its definition when pins pin it; 0 (hide)
 * when its definition is not the pinned one (the first time a definition is seen so: logged as
 * a warning and counted), or when the file does not pin it and the policy denies by default. */
int tg_pins_admit_listed(struct tg_pins_seen *s, const struct tg_pins *pins, const char *upstream,
                         const struct tg_policy *pol, const cJSON *tool);
/* May a call of tool go on? 1, or 0 with why (what the model reads) written. */
int tg_pins_admit_call(const struct tg_pins_seen *s, const struct tg_pins *pins, const char *upstream,
                       const struct tg_policy *pol, const char *tool, char *why, size_t n);
/* For /metrics: each pinned tool seen with a definition other than its pin, with how many
 * distinct changes were seen. */
void tg_pins_seen_each(const struct tg_pins_seen *s,
                       void (*fn)(void *ud, const char *upstream, const char *tool, uint64_t mismatches), void *ud);

/* The pin status of a tool for `tollgate policy explain` (no run time: the file only) into out:
 * "pinned (sha256 HEX… in FILE): …", "not pinned in FILE…". Returns 1 when the pins alone refuse
 * the call whatever the upstream lists (not pinned, and the policy denies by default), else 0. */
int tg_pins_explain(const struct tg_pins *pins, const struct tg_policy *pol, const char *tool, char *out, size_t n);

#endif
