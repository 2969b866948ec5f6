/* ECDSA P-256 signing keys for signed evidence (the audit log's checkpoints): load a PEM key,
 * sign a SHA-256 digest, describe the public half. mbedtls underneath; one key per owner. */
#ifndef TG_ECSIGN_H
#define TG_ECSIGN_H

#include <stddef.h>
#include <stdint.h>

struct tg_ecsign;

/* The private key in the PEM (or DER) file at path, which must be an EC key on P-256
 * (secp256r1): NULL with a reason in err (NUL-terminated) otherwise. */
struct tg_ecsign *tg_ecsign_load(const char *path, char *err, size_t errlen);
void tg_ecsign_free(struct tg_ecsign *k);
/* The signature of a SHA-256 digest, ASN.1 DER (at most 72 bytes) base64-encoded into out
 * (NUL-terminated; 100 bytes always suffice): 0, or -1. */
int tg_ecsign_sign(struct tg_ecsign *k, const uint8_t digest[32], char *out, size_t outlen);
/* Lowercase hex SHA-256 of the public key's DER (SubjectPublicKeyInfo): which key signed. */
const char *tg_ecsign_key_sha256(const struct tg_ecsign *k);
/* The public key as PEM ("-----BEGIN PUBLIC KEY-----…"), NUL-terminated: 0, or -1. */
int tg_ecsign_public_pem(const struct tg_ecsign *k, char *out, size_t outlen);

#endif
