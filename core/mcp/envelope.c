#include "core/mcp/envelope.h"

#include <stdlib.h>
#include <string.h>

#include <mbedtls/base64.h>
#include <mbedtls/gcm.h>

#define VERSION 1
#define NONCE 12
#define TAG 16
#define HEAD 10 /* expiry (8, big-endian) and the keys' length (2) */

/* The associated data: what the envelope is bound to, each field NUL-terminated. */
static void binding_bytes(const struct tg_mcp_state_binding *b, struct tg_buf *ad)
{
    tg_buf_append(ad, "tollgate-requestState-v1", 25);
    const char *f[] = {b->grant, b->upstream, b->method, b->name};
    for (int i = 0; i < 4; i++)
        tg_buf_append(ad, f[i], strlen(f[i]) + 1);
    tg_buf_append(ad, b->args_sha256, sizeof(b->args_sha256));
}

static void b64url_encode(const uint8_t *p, size_t n, struct tg_buf *out)
{
    size_t olen = 0;
    mbedtls_base64_encode(NULL, 0, &olen, p, n);
    if (tg_buf_try_reserve(out, olen + 1, 0) != 0)
        abort();
    mbedtls_base64_encode((unsigned char *)out->base + out->len, olen, &olen, p, n);
    char *s = out->base + out->len;
    size_t k = olen;
    while (k > 0 && s[k - 1] == '=')
        k--;
    for (size_t i = 0; i < k; i++)
        s[i] = s[i] == '+' ? '-' : s[i] == '/' ? '_' : s[i];
    out->len += k;
    out->base[out->len] = '\0';
}

static int b64url_decode(struct tg_slice t, struct tg_buf *out)
{
    struct tg_buf std;
    tg_buf_init(&std);
    for (size_t i = 0; i < t.len; i++) {
        char c = t.ptr[i];
        if (c == '+' || c == '/' || c == '=')
            goto bad; /* only the url-safe alphabet, no padding */
        tg_buf_append(&std, c == '-' ? "+" : c == '_' ? "/" : &c, 1);
    }
    while (std.len % 4)
        tg_buf_append(&std, "=", 1);
    size_t olen = 0;
    if (mbedtls_base64_decode(NULL, 0, &olen, (const unsigned char *)std.base, std.len) ==
        MBEDTLS_ERR_BASE64_INVALID_CHARACTER)
        goto bad;
    if (tg_buf_try_reserve(out, olen + 1, 0) != 0 ||
        mbedtls_base64_decode((unsigned char *)out->base, olen + 1, &olen, (const unsigned char *)std.base, std.len) != 0)
        goto bad;
    out->len = olen;
    /* Only the canonical spelling: unused low bits in the last character would let one token
     * be written several ways. */
    struct tg_buf again;
    tg_buf_init(&again);
    b64url_encode((const uint8_t *)out->base, out->len, &again);
    int canonical = again.len == t.len && memcmp(again.base, t.ptr, t.len) == 0;
    tg_buf_dispose(&again);
    if (!canonical)
        goto bad;
    tg_buf_dispose(&std);
    return 0;
bad:
    tg_buf_dispose(&std);
    return -1;
}

int tg_mcp_state_seal(const uint8_t key[TG_MCP_STATE_KEY_BYTES], const struct tg_mcp_state_binding *b,
                      const char *keys, size_t keys_len, int64_t expires_ms, const char *state, size_t n,
                      struct tg_buf *out)
{
    if (keys_len > 65535)
        return TG_EINVAL;
    struct tg_buf ad, plain, sealed;
    tg_buf_init(&ad);
    tg_buf_init(&plain);
    tg_buf_init(&sealed);
    binding_bytes(b, &ad);
    uint8_t head[HEAD];
    uint64_t e = (uint64_t)expires_ms;
    for (int i = 0; i < 8; i++)
        head[i] = (uint8_t)(e >> (56 - 8 * i));
    head[8] = (uint8_t)(keys_len >> 8);
    head[9] = (uint8_t)keys_len;
    tg_buf_append(&plain, head, HEAD);
    tg_buf_append(&plain, keys, keys_len);
    tg_buf_append(&plain, state, n);
    if (tg_buf_try_reserve(&sealed, 1 + NONCE + plain.len + TAG, 0) != 0)
        abort();
    uint8_t *s = (uint8_t *)sealed.base;
    s[0] = VERSION;
    int rc = tg_random(s + 1, NONCE);
    mbedtls_gcm_context gcm;
    mbedtls_gcm_init(&gcm);
    if (rc == 0)
        rc = mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, key, 256);
    if (rc == 0)
        rc = mbedtls_gcm_crypt_and_tag(&gcm, MBEDTLS_GCM_ENCRYPT, plain.len, s + 1, NONCE, (const uint8_t *)ad.base,
                                       ad.len, (const uint8_t *)plain.base, s + 1 + NONCE, TAG,
                                       s + 1 + NONCE + plain.len);
    mbedtls_gcm_free(&gcm);
    if (rc == 0) {
        out->len = 0;
        b64url_encode(s, 1 + NONCE + plain.len + TAG, out);
    }
    memset(plain.base, 0, plain.len);
    tg_buf_dispose(&ad);
    tg_buf_dispose(&plain);
    tg_buf_dispose(&sealed);
    return rc == 0 ? 0 : TG_EINVAL;
}

int tg_mcp_state_open(const uint8_t key[TG_MCP_STATE_KEY_BYTES], const struct tg_mcp_state_binding *b,
                      int64_t now_ms, struct tg_slice token, struct tg_buf *state_out, struct tg_buf *keys_out,
                      const char **why)
{
    struct tg_buf raw, ad, plain;
    tg_buf_init(&raw);
    tg_buf_init(&ad);
    tg_buf_init(&plain);
    int rc = -1;
    *why = "requestState is not an envelope of this gateway";
    if (b64url_decode(token, &raw) != 0 || raw.len < 1 + NONCE + HEAD + TAG || (uint8_t)raw.base[0] != VERSION)
        goto out;
    binding_bytes(b, &ad);
    size_t n = raw.len - 1 - NONCE - TAG;
    if (tg_buf_try_reserve(&plain, n, 0) != 0)
        goto out;
    const uint8_t *r = (const uint8_t *)raw.base;
    mbedtls_gcm_context gcm;
    mbedtls_gcm_init(&gcm);
    int e = mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, key, 256);
    if (e == 0)
        e = mbedtls_gcm_auth_decrypt(&gcm, n, r + 1, NONCE, (const uint8_t *)ad.base, ad.len, r + 1 + NONCE + n, TAG,
                                     r + 1 + NONCE, (uint8_t *)plain.base);
    mbedtls_gcm_free(&gcm);
    if (e != 0) {
        *why = "requestState does not verify (changed, or made for another call)";
        goto out;
    }
    plain.len = n;
    const uint8_t *p = (const uint8_t *)plain.base;
    uint64_t exp = 0;
    for (int i = 0; i < 8; i++)
        exp = exp << 8 | p[i];
    size_t kl = (size_t)p[8] << 8 | p[9];
    if (kl > n - HEAD) {
        *why = "requestState is malformed";
        goto out;
    }
    if ((int64_t)exp <= now_ms) {
        *why = "requestState has expired";
        goto out;
    }
    keys_out->len = 0;
    tg_buf_append(keys_out, plain.base + HEAD, kl);
    state_out->len = 0;
    tg_buf_append(state_out, plain.base + HEAD + kl, n - HEAD - kl);
    *why = NULL;
    rc = 0;
out:
    if (plain.base != NULL)
        memset(plain.base, 0, plain.cap);
    tg_buf_dispose(&raw);
    tg_buf_dispose(&ad);
    tg_buf_dispose(&plain);
    return rc;
}
