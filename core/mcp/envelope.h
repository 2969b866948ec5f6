/* The gateway's envelope around an upstream's requestState (MCP 2026-07-28 MRTR), so that a
 * retry cannot smuggle a call: the upstream's opaque state is sealed with AES-256-GCM under a
 * key of the gateway, bound (as associated data) to the grant, upstream, method, tool or URI and
 * a digest of the arguments, and carries the input keys the gateway issued and an expiry. A
 * retry whose envelope was tampered with, was made for another grant, upstream, tool or
 * arguments, was made under another key, or has expired, does not open.
 *
 * Pure functions (no I/O, no loop); not wired into the request path yet (issue 9 does that). */
#ifndef TG_MCP_STATE_H
#define TG_MCP_STATE_H

#include <stdint.h>

#include "core/base/buf.h"

#define TG_MCP_STATE_KEY_BYTES 32

/* What the envelope is bound to. Strings may not be NULL ("" for none). */
struct tg_mcp_state_binding {
    const char *grant;
    const char *upstream;
    const char *method;
    const char *name;          /* tool name, prompt name or resource URI */
    uint8_t args_sha256[32];   /* digest of the canonical arguments */
};

/* Seal state (the upstream's requestState, any bytes) for binding, with the input keys issued
 * (NUL-separated list in keys/keys_len, may be empty) and an expiry (wall-clock ms). out gets a
 * base64url token (no padding), NUL-terminated. 0, or a negative error. */
int tg_mcp_state_seal(const uint8_t key[TG_MCP_STATE_KEY_BYTES], const struct tg_mcp_state_binding *b,
                      const char *keys, size_t keys_len, int64_t expires_ms, const char *state, size_t n,
                      struct tg_buf *out);
/* Open a token for the binding the retry claims: 0 with the upstream's state in state_out and
 * the issued keys (NUL-separated) in keys_out; -1 with *why for a token that is malformed, does
 * not verify (tampered, another binding, another key) or has expired. */
int tg_mcp_state_open(const uint8_t key[TG_MCP_STATE_KEY_BYTES], const struct tg_mcp_state_binding *b,
                      int64_t now_ms, struct tg_slice token, struct tg_buf *state_out, struct tg_buf *keys_out,
                      const char **why);

#endif
