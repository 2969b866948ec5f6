/* core/wire/tls_gcm.c: the AES-GCM that takes mbedtls_gcm_crypt_and_tag()'s place, against
 * mbedtls's own function (the same call with the fast path turned off) on random keys of every
 * AES size, IVs, additional data and lengths from 0 to a few blocks past 64 (every tail), in place
 * and not, sealing and opening; a forged tag is refused through mbedtls_gcm_auth_decrypt(), and
 * mbedtls's record path (mbedtls_cipher_auth_encrypt_ext) does reach the fast path. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <mbedtls/cipher.h>
#include <mbedtls/gcm.h>

#include "core/wire/tls.h"

static uint64_t rnd_state = 0x9e3779b97f4a7c15ULL;

static void rnd(unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rnd_state ^= rnd_state << 13;
        rnd_state ^= rnd_state >> 7;
        rnd_state ^= rnd_state << 17;
        p[i] = (unsigned char)rnd_state;
    }
}

/* One sealing (or opening) both ways: the fast path's output and tag equal mbedtls's. */
static void one(mbedtls_gcm_context *g, int mode, size_t len, size_t add_len, size_t tag_len, int in_place)
{
    unsigned char iv[12], add[48], in[300], out_fast[300], out_lib[300], tag_fast[16], tag_lib[16];
    rnd(iv, sizeof(iv));
    rnd(add, add_len);
    rnd(in, len);
    unsigned long calls = tg__tls_gcm_fast_calls();
    tg__tls_gcm_set_fast(1);
    if (in_place) {
        memcpy(out_fast, in, len);
        assert_int_equal(mbedtls_gcm_crypt_and_tag(g, mode, len, iv, 12, add, add_len, out_fast, out_fast, tag_len, tag_fast), 0);
    } else {
        assert_int_equal(mbedtls_gcm_crypt_and_tag(g, mode, len, iv, 12, add, add_len, in, out_fast, tag_len, tag_fast), 0);
    }
    assert_int_equal(tg__tls_gcm_fast_calls(), calls + 1);
    tg__tls_gcm_set_fast(0);
    assert_int_equal(mbedtls_gcm_crypt_and_tag(g, mode, len, iv, 12, add, add_len, in, out_lib, tag_len, tag_lib), 0);
    tg__tls_gcm_set_fast(1);
    assert_int_equal(tg__tls_gcm_fast_calls(), calls + 1);
    assert_memory_equal(out_fast, out_lib, len);
    assert_memory_equal(tag_fast, tag_lib, tag_len);
}

static void matches_mbedtls(void **state)
{
    (void)state;
    if (!tg__tls_gcm_fast())
        skip(); /* no AES-NI or PCLMULQDQ: every record is mbedtls's own */
    static const unsigned bits[] = {128, 192, 256};
    static const size_t adds[] = {0, 5, 13, 16, 17, 33};
    for (size_t b = 0; b < 3; b++) {
        for (int k = 0; k < 4; k++) {
            unsigned char key[32];
            rnd(key, sizeof(key));
            mbedtls_gcm_context g;
            mbedtls_gcm_init(&g);
            assert_int_equal(mbedtls_gcm_setkey(&g, MBEDTLS_CIPHER_ID_AES, key, bits[b]), 0);
            for (size_t len = 0; len <= 300; len += (len < 140 ? 1 : 37))
                for (size_t a = 0; a < sizeof(adds) / sizeof(adds[0]); a++) {
                    one(&g, MBEDTLS_GCM_ENCRYPT, len, adds[a], 16, (int)(len & 1));
                    one(&g, MBEDTLS_GCM_DECRYPT, len, adds[a], len % 2 ? 16 : 12, (int)(a & 1));
                }
            mbedtls_gcm_free(&g);
        }
    }
}

/* What TLS does: mbedtls's cipher layer seals a record (through the fast path), and
 * mbedtls_gcm_auth_decrypt opens it, or refuses it with one bit of the tag changed. */
static void records_through_mbedtls(void **state)
{
    (void)state;
    if (!tg__tls_gcm_fast())
        skip();
    unsigned char key[16], iv[12], add[13], text[200], rec[200 + 16], back[200];
    rnd(key, sizeof(key));
    rnd(iv, sizeof(iv));
    rnd(add, sizeof(add));
    rnd(text, sizeof(text));
    mbedtls_cipher_context_t c;
    mbedtls_cipher_init(&c);
    assert_int_equal(mbedtls_cipher_setup(&c, mbedtls_cipher_info_from_type(MBEDTLS_CIPHER_AES_128_GCM)), 0);
    assert_int_equal(mbedtls_cipher_setkey(&c, key, 128, MBEDTLS_ENCRYPT), 0);
    unsigned long calls = tg__tls_gcm_fast_calls();
    size_t olen = 0;
    assert_int_equal(mbedtls_cipher_auth_encrypt_ext(&c, iv, sizeof(iv), add, sizeof(add), text, sizeof(text), rec,
                                                     sizeof(rec), &olen, 16),
                     0);
    assert_int_equal(olen, sizeof(rec));
    assert_int_equal(tg__tls_gcm_fast_calls(), calls + 1);
    mbedtls_cipher_free(&c);
    mbedtls_gcm_context g;
    mbedtls_gcm_init(&g);
    assert_int_equal(mbedtls_gcm_setkey(&g, MBEDTLS_CIPHER_ID_AES, key, 128), 0);
    assert_int_equal(mbedtls_gcm_auth_decrypt(&g, sizeof(text), iv, sizeof(iv), add, sizeof(add), rec + sizeof(text), 16,
                                              rec, back),
                     0);
    assert_memory_equal(back, text, sizeof(text));
    assert_int_equal(tg__tls_gcm_fast_calls(), calls + 2);
    rec[sizeof(text) + 3] ^= 0x10;
    assert_int_equal(mbedtls_gcm_auth_decrypt(&g, sizeof(text), iv, sizeof(iv), add, sizeof(add), rec + sizeof(text), 16,
                                              rec, back),
                     MBEDTLS_ERR_GCM_AUTH_FAILED);
    mbedtls_gcm_free(&g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(matches_mbedtls),
        cmocka_unit_test(records_through_mbedtls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
