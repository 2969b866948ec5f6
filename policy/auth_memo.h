#ifndef TG_AUTH_MEMO_H
#define TG_AUTH_MEMO_H

#include <stddef.h>
#include <stdint.h>

struct tg_grant_conf;

/* What a connection remembers of the last static bearer token it authenticated (see
 * tg_auth_grant_memo() in policy/auth.h): a keep-alive client sends the same header with every
 * request, and the SHA-256 that checks it costs a tenth of a proxied call.
 *
 * The tag is SipHash-2-4, under a per-process random key, of the whole header value, and its
 * length must match too: without the key no other value can be made to match. A connection a
 * proxy shares between clients holds only the last client's token; a different one is checked
 * in full. JWTs are never remembered (they expire), and a reload (another conf serial) forgets
 * it. Value type, embedded in the connection; zeroed = empty. */
struct tg_auth_memo {
    uint64_t tag;
    uint64_t conf_serial; /* the conf's serial: a conf loaded later at the same address is not it */
    size_t len;
    const struct tg_grant_conf *grant;
};

#endif
