#include "core/base/ecsign.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mbedtls/base64.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecdsa.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/pk.h>

#include "core/base/buf.h"
#include "core/base/sha256.h"

/* Owner: whoever loaded it (the audit writer, a command). The generator only blinds the
 * signature's arithmetic: mbedtls derives the nonce from the key and digest (RFC 6979). */
struct tg_ecsign {
    mbedtls_pk_context pk;
    mbedtls_entropy_context entropy;
    mbedtls_ctr_drbg_context drbg;
    char key_sha256[65];
};

void tg_ecsign_free(struct tg_ecsign *k)
{
    if (k == NULL)
        return;
    mbedtls_pk_free(&k->pk);
    mbedtls_ctr_drbg_free(&k->drbg);
    mbedtls_entropy_free(&k->entropy);
    free(k);
}

struct tg_ecsign *tg_ecsign_load(const char *path, char *err, size_t errlen)
{
    struct tg_ecsign *k = tg_xcalloc(1, sizeof(*k));
    mbedtls_pk_init(&k->pk);
    mbedtls_entropy_init(&k->entropy);
    mbedtls_ctr_drbg_init(&k->drbg);
    int r = mbedtls_ctr_drbg_seed(&k->drbg, mbedtls_entropy_func, &k->entropy, (const unsigned char *)"tollgate-audit",
                                  14);
    if (r != 0) {
        snprintf(err, errlen, "cannot seed the random generator (mbedtls -0x%04x)", (unsigned)-r);
        goto fail;
    }
    if ((r = mbedtls_pk_parse_keyfile(&k->pk, path, NULL)) != 0) {
        char why[128];
        mbedtls_strerror(r, why, sizeof(why));
        snprintf(err, errlen, "%s: not a private key in PEM or DER (%s)", path, why);
        goto fail;
    }
    if (mbedtls_pk_get_type(&k->pk) != MBEDTLS_PK_ECKEY ||
        mbedtls_pk_ec(k->pk)->grp.id != MBEDTLS_ECP_DP_SECP256R1) {
        snprintf(err, errlen,
                 "%s: must be an EC key on P-256 (make one with: tollgate audit keygen FILE, or openssl ecparam "
                 "-name prime256v1 -genkey -noout -out FILE)",
                 path);
        goto fail;
    }
    unsigned char der[200];
    int n = mbedtls_pk_write_pubkey_der(&k->pk, der, sizeof(der));
    if (n <= 0) {
        snprintf(err, errlen, "%s: cannot write its public key", path);
        goto fail;
    }
    uint8_t h[32];
    tg_sha256(der + sizeof(der) - n, (size_t)n, h); /* mbedtls writes DER at the end of the buffer */
    tg_hex_encode(h, 32, k->key_sha256);
    return k;
fail:
    tg_ecsign_free(k);
    return NULL;
}

int tg_ecsign_sign(struct tg_ecsign *k, const uint8_t digest[32], char *out, size_t outlen)
{
    unsigned char sig[MBEDTLS_ECDSA_MAX_LEN];
    size_t slen = 0, olen = 0;
    if (mbedtls_pk_sign(&k->pk, MBEDTLS_MD_SHA256, digest, 32, sig, &slen, mbedtls_ctr_drbg_random, &k->drbg) != 0)
        return -1;
    if (mbedtls_base64_encode((unsigned char *)out, outlen, &olen, sig, slen) != 0)
        return -1;
    return 0;
}

const char *tg_ecsign_key_sha256(const struct tg_ecsign *k) { return k->key_sha256; }

int tg_ecsign_public_pem(const struct tg_ecsign *k, char *out, size_t outlen)
{
    return mbedtls_pk_write_pubkey_pem((mbedtls_pk_context *)&k->pk, (unsigned char *)out, outlen) == 0 ? 0 : -1;
}
