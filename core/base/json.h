/* Strict JSON: one pass that validates and builds a cJSON tree, and a writer.
 *
 * cJSON's own parser accepts duplicate keys, invalid UTF-8 and lone
 * surrogates, and turns every number into a double (ids like
 * 12345678901234567890 would be rounded). tollgate must decide on exactly
 * what it forwards, so it parses with this module instead:
 *   - exactly one value, optional surrounding whitespace, nothing after it;
 *   - strings: valid UTF-8 (no overlongs, no encoded surrogates), escapes per
 *     RFC 8259, surrogate pairs joined, lone surrogates and U+0000 rejected;
 *   - numbers per the JSON grammar; the node keeps its original text in
 *     valuestring so tg_json_write() prints it unchanged;
 *   - duplicate object keys (compared after decoding) rejected;
 *   - nesting deeper than max_depth rejected.
 * The tree is made of ordinary cJSON nodes (free with cJSON_Delete). */
#ifndef TG_JSON_H
#define TG_JSON_H

#include <cjson/cJSON.h>

#include "core/base/buf.h"

/* cJSON_GetObjectItemCaseSensitive(), the same answer (the first member named name, stopping
 * at a member without a name, NULL for a NULL object), inline and with the first byte compared
 * before strcmp is called: a request is looked into a few dozen times on its way through. */
static inline cJSON *tg_json_get(const cJSON *obj, const char *name)
{
    const cJSON *e = obj != NULL ? obj->child : NULL;
    while (e != NULL && e->string != NULL && (e->string[0] != name[0] || strcmp(name, e->string) != 0))
        e = e->next;
    return e != NULL && e->string != NULL ? (cJSON *)e : NULL;
}

/* What tg_json_parse() found. Value type in caller storage (on the stack, or embedded as
 * tg_call.body_doc). The caller owns root (cJSON_Delete); the slices point into the input and
 * are valid only while it is. */
struct tg_json_doc {
    cJSON *root;            /* NULL when parsed with build = 0 */
    int case_twins;         /* with a tree: 1 if an object has keys that differ only in ASCII case
                             * ("name", "Name"), 0 if none has, -1 if one of over 12 keys was not
                             * looked at for them */
    struct tg_slice id_raw;     /* raw token of the root object's "id" member (points into the input), or empty */
    struct tg_slice method_raw; /* raw token of the root's "method" (with quotes), or empty */
    struct tg_slice error_raw;  /* raw value of the root's "error" when it is an object, or empty */
    struct tg_slice result_raw; /* raw value of the root's "result" when it is an object, or empty */
    struct tg_slice params_meta; /* parsed with a tree: the bytes whose removal removes the root's
                                  * params._meta member (with the comma before it, or after it when it
                                  * is the first member), or empty */
};

/* Returns 0, or TG_EINVAL with *err set to a static description and *err_off to the byte offset. */
int tg_json_parse(const char *p, size_t n, int max_depth, int build, struct tg_json_doc *doc, const char **err,
                  size_t *err_off);

/* 1 if no byte of p[0..n) is a backslash, a control byte (whitespace other than spaces
 * included) or over 0x7f: valid JSON made of such bytes reads the same before and after any
 * decoder, its strings being their own text. */
int tg_json_plain(const char *p, size_t n);

/* tg_json_parse()'s fast path without a tree (core/base/json_scan.c): 0 with doc filled when it
 * accepts, -1 when it leaves the input to the strict parser (it never rejects). */
int tg__json_scan_fast(const char *p, size_t n, int max_depth, struct tg_json_doc *doc);
/* Forgets the message tg__json_scan_fast() saw last (each thread keeps one, to resume the walk
 * of the next one where the two first differ): its next scan walks from the first byte. */
void tg__json_scan_forget(void);
/* This thread's count of walks resumed, of the bytes they did not walk again, and of messages
 * taken with no walk (the last one with one scalar swapped). */
void tg__json_scan_stats(size_t *resumed, size_t *skipped, size_t *swapped);

/* The raw token of the top-level "id" member of a JSON object cut short (the first bytes of a
 * message too long to keep): found by a lenient scan that tracks strings and nesting only.
 * Returns 1 with *id set, or 0 when the prefix does not show it. */
int tg_json_prefix_id(const char *p, size_t n, struct tg_slice *id);

/* Serialize compactly. Numbers with original text are printed from it. */
void tg_json_write(struct tg_buf *b, const cJSON *item);
void tg_json_write_string(struct tg_buf *b, const char *s, size_t n);
/* SHA-256 of v as tg_json_write() writes it ("null" for NULL): what the audit log's args hash and a
 * 2026 envelope's argument binding (core/mcp/mrtr.c) are made of. */
void tg_json_digest(const cJSON *v, uint8_t out[32]);

/* Canonical JSON (core/base/json_canon.c): one text for every spelling of a value. Object
 * members sorted by name (byte order; members of one name keep their order), no whitespace,
 * strings as tg_json_write_string() writes them, numbers by exact decimal value (1, 1.0, 1e0 and
 * 10e-1 are all 1; -0 is 0; no rounding, so two integers that a double cannot tell apart stay
 * apart). Deeper than 256 levels writes null. */
void tg_json_canon(struct tg_buf *b, const cJSON *v);
/* The same with every number as its client wrote it (1 and 1.0 differ): what a call made again
 * must repeat exactly (core/call/approvals_modes.c). */
void tg_json_canon_as_written(struct tg_buf *b, const cJSON *v);
void tg_json_canon_sha256(const cJSON *v, uint8_t out[32]);
/* A 64-bit hash of the canonical form (SipHash-2-4 under a fixed key, seed mixed in first; a
 * string of up to 240 bytes by its bytes, without writing its text): the same in every process
 * and release, for identities shared across a cluster. Not a secret. */
uint64_t tg_json_canon_hash(const cJSON *v, uint64_t seed);

/* A number node that prints exactly as `text` (which must be a valid JSON number). */
cJSON *tg_json_number_raw(const char *text, size_t n);

#endif
