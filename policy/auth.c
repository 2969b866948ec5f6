#include "policy/auth.h"

#include <mbedtls/sha256.h>
#include <strings.h>

void tg_auth_sha256(const void *p, size_t n, uint8_t out[32])
{
    mbedtls_sha256_ret((const unsigned char *)p, n, out, 0);
}

int tg_auth_ct_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    volatile uint8_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (uint8_t)(a[i] ^ b[i]);
    return d == 0;
}

int tg_auth_bearer(struct tg_slice h, struct tg_slice *token)
{
    if (h.len < 7 || strncasecmp(h.ptr, "Bearer ", 7) != 0)
        return TG_EINVAL;
    size_t i = 7;
    while (i < h.len && h.ptr[i] == ' ')
        i++;
    size_t end = h.len;
    while (end > i && (h.ptr[end - 1] == ' ' || h.ptr[end - 1] == '\t'))
        end--;
    if (end == i)
        return TG_EINVAL;
    for (size_t k = i; k < end; k++) {
        unsigned char c = (unsigned char)h.ptr[k];
        if (c <= 0x20 || c >= 0x7f)
            return TG_EINVAL; /* RFC 6750 b64token charset is printable ASCII without spaces */
    }
    *token = tg_slice_of(h.ptr + i, end - i);
    return 0;
}

enum tg_auth_result tg_auth_grant(const struct tg_conf *c, struct tg_slice authorization,
                                  const struct tg_grant_conf **grant)
{
    *grant = NULL;
    if (authorization.ptr == NULL) {
        for (size_t i = 0; i < c->ngrants; i++)
            if (c->grants[i].anonymous) {
                *grant = &c->grants[i];
                return TG_AUTH_OK;
            }
        return TG_AUTH_MISSING;
    }
    struct tg_slice tok;
    if (tg_auth_bearer(authorization, &tok) != 0)
        return TG_AUTH_INVALID;
    uint8_t h[32];
    tg_auth_sha256(tok.ptr, tok.len, h);
    const struct tg_grant_conf *found = NULL;
    for (size_t i = 0; i < c->ngrants; i++) {
        int eq = tg_auth_ct_equal(h, c->grants[i].token_sha256, 32) & c->grants[i].has_token;
        if (eq && found == NULL)
            found = &c->grants[i];
    }
    if (found == NULL)
        return TG_AUTH_INVALID;
    *grant = found;
    return TG_AUTH_OK;
}
