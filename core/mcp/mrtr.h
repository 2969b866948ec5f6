/* Multi-round-trip requests (MCP 2026-07-28) through the gateway, so that a retry cannot smuggle
 * a call.
 *
 * An upstream's input_required result is accepted only for tools/call, prompts/get and
 * resources/read, and only for input kinds the client declared (elicitation, sampling, roots).
 * Its requestState goes to the client sealed in a gateway envelope (core/mcp/envelope.c) bound to
 * the grant, upstream, method, name and a digest of the arguments, with the input keys issued
 * and an expiry; the gateway mints one when the upstream gave none. Each envelope is good for
 * one retry: the retry must carry it unchanged, for the same binding, with inputResponses only
 * for keys issued. The retry is then decided again as a new call; the upstream sees only its
 * own state (or none, if the gateway minted it). */
#ifndef TG_MCP_MRTR_H
#define TG_MCP_MRTR_H

#include <stdint.h>

#include <cjson/cJSON.h>

#include "core/mcp/envelope.h"

/* Input kinds a 2026 client declared in clientCapabilities (struct tg_exchange.client_caps). */
#define TG_CAP_ELICITATION 0x1u
#define TG_CAP_SAMPLING 0x2u
#define TG_CAP_ROOTS 0x4u
/* The tasks extension (SEP-2663): clientCapabilities.extensions["io.modelcontextprotocol/tasks"]. */
#define TG_CAP_TASKS 0x8u
#define TG_MCP_TASKS_EXT "io.modelcontextprotocol/tasks"

/* The TG_CAP_* an input request's method needs (elicitation/create, sampling/createMessage,
 * roots/list), with the capability's name in *cap; 0 for any other method. */
unsigned tg_mcp_input_kind(const char *method, const char **cap);
/* TG_CAP_* of a clientCapabilities object. */
unsigned tg_mcp_client_caps(const cJSON *caps);

/* The envelopes issued and not yet used: each retry takes its own out, so an envelope opens
 * once. Bounded: beyond max the oldest is forgotten (and can no longer be used). Owner: the
 * server (struct tg_server), freed by tg_mcp_mrtr_dispose. */
struct tg_mcp_mrtr {
    uint8_t key[TG_MCP_STATE_KEY_BYTES];
    struct issued {
        char id[24];
        int64_t expires_ms;
    } *ring;
    size_t max, next;
    int shared; /* a cluster (key shared by every member): the ring holds the envelopes used
                 * here instead of those issued here, so a retry may land on any member (each
                 * member takes an envelope once; see docs/cluster.md) */
};

void tg_mcp_mrtr_init(struct tg_mcp_mrtr *t, size_t max);
void tg_mcp_mrtr_dispose(struct tg_mcp_mrtr *t);

/* Where the binding's arguments digest (b.args_sha256) stands. It costs a serialization and a
 * SHA-256, and only an answer that asks for input (or a retry, or an audit reader) needs it, so
 * a call may keep its arguments instead and make the digest when first asked. */
enum tg_mcp_mrtr_args {
    TG_MRTR_ARGS_NONE,   /* neither: nothing can be sealed for the call (fail closed) */
    TG_MRTR_ARGS_DIGEST, /* b.args_sha256 is made */
    TG_MRTR_ARGS_KEPT,   /* args (owned; NULL: the request had none) are kept for it */
};

/* The call a result answers, or a retry claims to continue. Strings borrowed; args owned,
 * released by tg_mcp_mrtr_call_dispose. */
struct tg_mcp_mrtr_call {
    struct tg_mcp_state_binding b;
    unsigned client_caps;
    const char *pinned_roots; /* the roots/list result the operator pinned for the call's server
                               * ({"roots":[…]}), or NULL: set by the caller just before
                               * tg_mcp_mrtr_result or tg_mcp_mrtr_retry (borrowed for that call) */
    enum tg_mcp_mrtr_args args_state;
    cJSON *args;
};

/* Fill c's binding from a request body's params (method, name or uri, arguments digest). */
void tg_mcp_mrtr_bind(struct tg_mcp_mrtr_call *c, const char *grant, const char *upstream, const char *method,
                      const cJSON *params);
/* The same without the digest (TG_MRTR_ARGS_NONE): made later by tg_mcp_mrtr_digest_from (a
 * retry makes it from its params), or kept for by tg_mcp_mrtr_keep_args. */
void tg_mcp_mrtr_bind_later(struct tg_mcp_mrtr_call *c, const char *grant, const char *upstream, const char *method,
                            const cJSON *params);
/* Make c's digest now from params (the request's, as bound), unless it is made already. */
void tg_mcp_mrtr_digest_from(struct tg_mcp_mrtr_call *c, const cJSON *params);
/* A call whose digest is not made keeps params' arguments for it: they are detached from params
 * (which must not be needed whole any more: the request was written for the upstream). */
void tg_mcp_mrtr_keep_args(struct tg_mcp_mrtr_call *c, cJSON *params);
/* Make the digest from the kept arguments if it is not made: 0, or -1 if it cannot be
 * (TG_MRTR_ARGS_NONE). */
int tg_mcp_mrtr_digest(struct tg_mcp_mrtr_call *c);
/* Release what c owns (the kept arguments). */
void tg_mcp_mrtr_call_dispose(struct tg_mcp_mrtr_call *c);

/* An upstream's result for call c, in place: an input_required result gets its requestState
 * sealed; complete (or missing) is left. With roots pinned (c->pinned_roots), its roots/list
 * requests leave inputRequests (the client is never asked; the envelope marks their keys) and
 * the retry carries the pinned roots for them, whatever the client sends (tg_mcp_mrtr_retry). Returns 0; -1 with why (the client must get an
 * error instead): input on another method, a malformed result, an unknown resultType, more than
 * 8 roots/list requests while roots are pinned; -2 for an
 * input kind the client did not declare, why "capability:NAME" (-32021). */
int tg_mcp_mrtr_result(struct tg_mcp_mrtr *t, cJSON *result, struct tg_mcp_mrtr_call *c, int64_t now_ms,
                       char *why, size_t whysz);
/* A request's params: 0 if it is no retry (neither requestState nor inputResponses); 1 for a
 * retry whose envelope opened (requestState now the upstream's own, or removed); inputResponses
 * without any requestState answer nothing issued: they are removed and the request is a first
 * round (0); -1 with why
 * for one refused (-32602); 2 for the retry of a call held open (see below): MRTR fields on another method, a missing, tampered, foreign, used
 * or expired envelope, changed arguments, or input keys never issued. */
int tg_mcp_mrtr_retry(struct tg_mcp_mrtr *t, cJSON *params, struct tg_mcp_mrtr_call *c, int64_t now_ms,
                      char *parked, size_t psz, char *why, size_t whysz);
/* A 2025 upstream's server request during call c, as input_required for a 2026 client: seal
 * the id of the call the gateway holds open (parked) with result's inputRequests keys. 0 or -1.
 * A retry that opens it returns 2 from tg_mcp_mrtr_retry, with that id in parked. */
int tg_mcp_mrtr_seal_parked(struct tg_mcp_mrtr *t, cJSON *result, struct tg_mcp_mrtr_call *c, int64_t now_ms,
                            const char *parked);

#endif
