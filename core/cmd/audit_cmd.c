/* `tollgate audit verify|pubkey|keygen` (core/cmd/audit_cmd.h): the command line, and the signing
 * key's two small jobs. The verifier is core/cmd/audit_verify.c and core/cmd/audit_chain.c. */
#include "core/cmd/audit_cmd.h"

#include <errno.h>
#include <fcntl.h>
#include <libconfig.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mbedtls/ctr_drbg.h>
#include <mbedtls/ecp.h>
#include <mbedtls/entropy.h>
#include <mbedtls/pk.h>

#include "core/base/buf.h"
#include "core/base/ecsign.h"
#include "core/cmd/audit_verify.h"

static const char usage_text[] =
    "usage:\n"
    "  tollgate audit verify [--key PUB.pem]... [--closed] FILE...\n"
    "      Check chained audit files (audit.log*, in any order): every line's event_hash, the\n"
    "      chain of previous_hash and seq across the files, and with --key every checkpoint's\n"
    "      signature (--key more than once: a checkpoint names its key by key_sha256). --closed:\n"
    "      the last file must end with a shutdown checkpoint (the gateway stopped cleanly).\n"
    "      Prints a line per file and notes, then OK: ... or FAIL: FILE:LINE (seq S): CLASS: ...\n"
    "      where CLASS is edited, removed, inserted, reordered, truncated, missing file or\n"
    "      bad signature. Exit 0 verified, 1 a problem found, 2 usage or I/O error.\n"
    "  tollgate audit pubkey (-c CONF | --key PRIV.pem)\n"
    "      Print the public key (PEM) of the conf's audit.signing_key, or of a private key file;\n"
    "      its key_sha256 (what checkpoints name) goes to stderr.\n"
    "  tollgate audit keygen FILE\n"
    "      Write a new EC P-256 private key (PEM, mode 0600) for audit.signing_key. Refuses to\n"
    "      overwrite a file.\n";

static int usage_error(const char *sub, const char *why)
{
    fprintf(stderr, "tollgate: audit%s%s: %s\n%s", sub ? " " : "", sub ? sub : "", why, usage_text);
    return 2;
}

static int verify_cli(int argc, char **argv)
{
    struct tg_audit_key *keys[TG_AUDIT_MAX_KEYS];
    const char **files = tg_xcalloc((size_t)argc, sizeof(*files));
    size_t nkeys = 0, nfiles = 0;
    int closed = 0, rc = 0, opts = 1;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        if (opts && strcmp(a, "--") == 0) {
            opts = 0;
        } else if (opts && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            fputs(usage_text, stdout);
            rc = -1;
        } else if (opts && strcmp(a, "--closed") == 0) {
            closed = 1;
        } else if (opts && (strcmp(a, "--key") == 0 || strncmp(a, "--key=", 6) == 0)) {
            const char *path = a[5] == '=' ? a + 6 : (i + 1 < argc ? argv[++i] : NULL);
            char e[300];
            if (path == NULL || path[0] == '\0') {
                rc = usage_error("verify", "--key needs a file");
            } else if (nkeys == TG_AUDIT_MAX_KEYS) {
                rc = usage_error("verify", "at most 8 keys");
            } else if (tg_audit_key_load(path, &keys[nkeys], e, sizeof(e)) != 0) {
                fprintf(stderr, "tollgate: audit verify: %s\n", e);
                rc = 2;
            } else {
                nkeys++;
            }
        } else if (opts && a[0] == '-' && a[1] != '\0') {
            char why[300];
            snprintf(why, sizeof(why), "unknown option %s", a);
            rc = usage_error("verify", why);
        } else {
            files[nfiles++] = a;
        }
    }
    if (rc == 0 && nfiles == 0)
        rc = usage_error("verify", "no FILE given");
    if (rc == 0) {
        struct tg_audit_verdict v;
        rc = tg_audit_verify(files, nfiles, keys, nkeys, closed, stdout, stderr, &v);
    }
    for (size_t i = 0; i < nkeys; i++)
        tg_audit_key_free(keys[i]);
    free(files);
    return rc < 0 ? 0 : rc;
}

/* audit.signing_key of the conf at path, joined to the conf's folder when relative (as the
 * loader takes paths): malloc'd, or NULL (printed). */
static char *conf_signing_key(const char *path)
{
    config_t cfg;
    config_init(&cfg);
    char *out = NULL;
    const char *s = NULL;
    if (config_read_file(&cfg, path) != CONFIG_TRUE) {
        fprintf(stderr, "tollgate: audit pubkey: %s:%d: %s\n", config_error_file(&cfg) ? config_error_file(&cfg) : path,
                config_error_line(&cfg), config_error_text(&cfg));
    } else if (config_lookup_string(&cfg, "audit.signing_key", &s) != CONFIG_TRUE || s[0] == '\0') {
        fprintf(stderr, "tollgate: audit pubkey: %s: no audit.signing_key\n", path);
    } else {
        const char *slash = strrchr(path, '/');
        struct tg_buf b;
        tg_buf_init(&b);
        if (s[0] != '/' && slash != NULL)
            tg_buf_append(&b, path, (size_t)(slash - path + 1));
        tg_buf_appends(&b, s);
        tg_buf_append(&b, "", 1);
        out = tg_xstrdup(b.base);
        tg_buf_dispose(&b);
    }
    config_destroy(&cfg);
    return out;
}

static int pubkey_cli(int argc, char **argv)
{
    const char *conf = NULL, *keyfile = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if (strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
            conf = argv[++i];
        } else if (strcmp(argv[i], "--key") == 0 && i + 1 < argc) {
            keyfile = argv[++i];
        } else {
            return usage_error("pubkey", "takes -c CONF or --key PRIV.pem");
        }
    }
    if ((conf == NULL) == (keyfile == NULL))
        return usage_error("pubkey", "takes -c CONF or --key PRIV.pem (one of them)");
    char *path = keyfile != NULL ? tg_xstrdup(keyfile) : conf_signing_key(conf);
    if (path == NULL)
        return 1;
    char why[256], pem[1024];
    int rc = 1;
    struct tg_ecsign *k = tg_ecsign_load(path, why, sizeof(why)); /* as the gateway loads it */
    if (k == NULL)
        fprintf(stderr, "tollgate: audit pubkey: %s\n", why);
    else if (tg_ecsign_public_pem(k, pem, sizeof(pem)) != 0)
        fprintf(stderr, "tollgate: audit pubkey: %s: cannot write the public key\n", path);
    else
        rc = 0;
    if (rc == 0) {
        fputs(pem, stdout);
        fprintf(stderr, "tollgate: audit pubkey: key_sha256 %s\n", tg_ecsign_key_sha256(k));
    }
    tg_ecsign_free(k);
    free(path);
    return rc;
}

static int keygen_cli(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-')
        return usage_error("keygen", "takes one FILE");
    const char *path = argv[1];
    mbedtls_entropy_context ent;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_pk_context pk;
    mbedtls_entropy_init(&ent);
    mbedtls_ctr_drbg_init(&drbg);
    mbedtls_pk_init(&pk);
    unsigned char pem[1024];
    uint8_t sha[32];
    char hex[65];
    int rc = 1, fd = -1;
    if (mbedtls_ctr_drbg_seed(&drbg, mbedtls_entropy_func, &ent, (const unsigned char *)"tollgate-audit", 14) != 0 ||
        mbedtls_pk_setup(&pk, mbedtls_pk_info_from_type(MBEDTLS_PK_ECKEY)) != 0 ||
        mbedtls_ecp_gen_key(MBEDTLS_ECP_DP_SECP256R1, mbedtls_pk_ec(pk), mbedtls_ctr_drbg_random, &drbg) != 0 ||
        mbedtls_pk_write_key_pem(&pk, pem, sizeof(pem)) != 0 || tg__audit_key_sha256(&pk, sha) != 0) {
        fprintf(stderr, "tollgate: audit keygen: cannot make a key\n");
        goto out;
    }
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "tollgate: audit keygen: %s: %s%s\n", path, strerror(errno),
                errno == EEXIST ? " (not overwritten)" : "");
        goto out;
    }
    size_t n = strlen((const char *)pem);
    if (write(fd, pem, n) != (ssize_t)n || fsync(fd) != 0) {
        fprintf(stderr, "tollgate: audit keygen: %s: %s\n", path, strerror(errno));
        close(fd);
        unlink(path);
        goto out;
    }
    close(fd);
    tg_hex_encode(sha, 32, hex);
    fprintf(stderr,
            "tollgate: audit keygen: wrote %s (EC P-256, key_sha256 %s)\n"
            "tollgate: audit keygen: to sign checkpoints, set audit.signing_key = \"%s\"; the public key for\n"
            "tollgate: audit keygen: `audit verify --key` is printed by `tollgate audit pubkey --key %s`\n",
            path, hex, path, path);
    rc = 0;
out:
    mbedtls_platform_zeroize(pem, sizeof(pem));
    mbedtls_pk_free(&pk);
    mbedtls_ctr_drbg_free(&drbg);
    mbedtls_entropy_free(&ent);
    return rc;
}

int tg_audit_cli(int argc, char **argv)
{
    if (argc < 2)
        return usage_error(NULL, "needs verify, pubkey or keygen");
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(sub, "verify") == 0)
        return verify_cli(argc - 1, argv + 1);
    if (strcmp(sub, "pubkey") == 0)
        return pubkey_cli(argc - 1, argv + 1);
    if (strcmp(sub, "keygen") == 0)
        return keygen_cli(argc - 1, argv + 1);
    char why[200];
    snprintf(why, sizeof(why), "unknown subcommand %s", sub);
    return usage_error(NULL, why);
}
