/* Configuration: libconfig file -> immutable struct tg_conf.
 *
 * tg_conf_load() reads and validates the whole file; on error it returns NULL
 * and writes "file:line: directive: reason" lines into err. Scalar directives
 * are declared in tables (name, offset, range, default) in conf.c (limits) and
 * upstreams.c (upstream and pool). The loader is split by section: conf.c
 * (the file, log, listen, admin, limits, audit, refcount), upstreams.c
 * (upstreams), grants.c (grants, JWT issuers, policies, roots) and cluster.c
 * (the cluster group); they share core/conf/internal.h. A loaded conf is never modified; it is refcounted so that
 * work started under one conf can finish under it after a reload.
 *
 * Ownership: every struct below is part of one struct tg_conf (embedded in it
 * or in an array it holds), and every string, array, policy reference and
 * JWKS reachable from it belongs to that conf and is freed by the
 * tg_conf_unref() that drops its last reference. Pointers into a conf (a
 * grant, an upstream conf) are valid for as long as the holder keeps a
 * reference to that conf. */
#ifndef TG_CONF_H
#define TG_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"

/* One listen[] entry. Owner: the conf (listeners[]); freed by tg_conf_unref. */
struct tg_listener_conf {
    char *address;
    int port;
    int tls;
    char *cert, *key;
    char *client_ca; /* tls.client_ca: ask clients for certificates chaining to it (mTLS) */
    int client_auth; /* TG_TLS_CLIENT_* (core/wire/tls.h): none, optional, required */
    int session_timeout_s; /* tls.session_timeout_s: how long a session ticket resumes; 0: none */
    char **origins; /* extra allowed Origin values besides loopback ones */
    size_t norigins;
    int any_origin;
};

/* The admin listener. Embedded in struct tg_conf; address freed by tg_conf_unref. */
struct tg_admin_conf {
    int enabled;
    char *address;
    int port;
    int has_token;
    uint8_t token_sha256[32];
};

/* The cluster group (core/conf/cluster.c): several gateways sharing counters, sessions and
 * approvals through one Redis. Embedded in struct tg_conf; enabled 0 without the group. Strings
 * are owned by the conf (tg_conf_unref frees them). */
enum tg_cluster_unavailable { TG_CLUSTER_DENY = 0, TG_CLUSTER_LOCAL = 1 };
struct tg_cluster_conf {
    int enabled;
    char *redis;      /* "host:port" or "unix:/path" */
    char *password;   /* NULL: no AUTH */
    char *key_prefix; /* default "tollgate:" */
    char *secret_file;
    uint8_t secret[32]; /* the file's 32 bytes: seals session ids and MRTR envelopes */
    enum tg_cluster_unavailable on_unavailable;
    char *instance;   /* this gateway's name in the cluster (default "HOST:PID") */
    int timeout_ms;   /* deadline of every Redis operation */
    int backoff_ms, backoff_max_ms; /* reconnect */
    int session_ttl_ms; /* a 2025 session's record lives this long after its last use */
    /* cluster.lease (cluster/lease.c): tokens an instance may take ahead per bucket (0: off), how
     * long it may keep them, and how many buckets may hold a lease at once. */
    int lease_tokens, lease_ms, lease_keys;
};

/* The approvals group (core/conf/approvals.c). Embedded in struct tg_conf; owned strings and the
 * secret freed (and wiped) by tg_conf_unref. webhook_url NULL: no webhook. */
struct tg_approvals_conf {
    char *webhook_url;         /* https://, or http:// to a loopback address only */
    char *webhook_secret_file;
    uint8_t *webhook_secret;   /* the file's bytes (one trailing newline left out) */
    size_t webhook_secret_len;
    int webhook_queue;         /* events that may wait (approvals.webhook.queue), >= 2 */
};

/* The limits group (plain values). Embedded in struct tg_conf. */
struct tg_limits {
    int max_connections;
    int header_bytes;
    int body_bytes;
    int response_bytes;
    int json_depth;
    int header_timeout_ms;
    int ws_ping_ms;
    int tls_handshake_timeout_ms;
    int tls_handshake_slice_ms;
    int idle_timeout_ms;
    int session_idle_timeout_ms;
    int sessions_per_grant;
    int inflight_per_session;
    int output_high_water;
    int drain_timeout_ms;
    int approvals_max;
    int approvals_bytes;     /* parked requests and every copy of their arguments, all together */
    int approvals_per_grant; /* parked calls of one grant at once (0 in the file: approvals_max / 4) */
    int approval_hold_max_ms;  /* approval_mode hold: the longest a held call waits (its tool's
                                * approval_timeout is cut to this) */
    int approval_progress_ms;  /* hold: notifications/progress to a client that sent a token */
    int approval_ttl_ms;       /* retry: how long a decision waits for the call again */
    int replay_bytes;
    int sse_keepalive_ms;
    int listens_per_grant;
    int output_total_bytes;
    int stdio_evict_idle_ms; /* at max_children, another grant's session idle this long gives up its child */
    int dpop_replay_entries; /* DPoP proofs (key, jti) remembered against replay, one cache per process */
    int history_calls;       /* policy/history.h: entries per ring (per subject, per grant) */
    int history_bytes;       /* every ring of the local history together */
};

struct tg_policy;

/* A policy for one upstream, overriding the upstream's own for this grant. Owner: its grant
 * (policies[]); tg_conf_unref frees path and drops the conf's reference to policy (a call in
 * flight holds its own). */
struct tg_grant_policy {
    int upstream; /* index into upstreams */
    char *path;
    struct tg_policy *policy;
};

/* Roots the operator pins for a server (upstreams[].roots, grants[].roots): the gateway answers
 * the server's roots/list with exactly these and never asks a client. Owner: the upstream or
 * grant conf it is in; freed by tg_conf_unref. pinned: the directive is set (an empty list pins
 * no roots at all, which is not the same as not pinning). */
struct tg_roots {
    int pinned;
    char *result; /* {"roots":[{"uri":…,"name":…},…]}: the roots/list result, made at load */
};

/* An extra header sent to an upstream. Owner: its upstream conf (headers[]) or grant
 * (upstream_headers); freed by tg_conf_unref. */
struct tg_header {
    char *name;
    char *value;
};

/* grants[].upstream_headers: what this grant's requests carry to one upstream (core/conf/upcred.c).
 * Owner: its grant; freed by tg_conf_unref. */
struct tg_grant_upheaders {
    int upstream;   /* index into upstreams */
    struct tg_header *headers;
    size_t nheaders;
    char *lines;    /* the same as "Name: value\r\n" lines, made at load */
};

/* One grants[] entry. Owner: the conf (grants[]); freed by tg_conf_unref. */
struct tg_grant_conf {
    char *name;
    int has_token;
    uint8_t token_sha256[32];
    int anonymous;
    int max_sessions; /* 0 = limits.sessions_per_grant */
    int jwt_only;     /* reachable only with a JWT that names it */
    char **issuers;   /* the jwt[].issuer values whose tokens may name it (byte-exact); none: no JWT may */
    size_t nissuers;
    char *tls_subject; /* a verified client certificate whose subject (or CN) is this is this grant */
    char *scopes;      /* grants[].scopes as a scope set (policy/scopes.h): what a static token, a
                        * certificate or anonymous access to it may do; NULL: no scopes */
    struct tg_grant_policy *policies;
    size_t npolicies;
    struct tg_roots roots; /* pinned: overrides every upstream's roots for this grant */
    struct tg_grant_upheaders *upheaders; /* upstream_headers, one per upstream named */
    size_t nupheaders;
    char **attributes; /* attributes = { tenant = "acme"; }: name and value in turn, what a policy's
                        * ${grant.NAME} binds arguments to (policy/bind.h) */
    size_t nattributes; /* pairs */
};

/* The audit group. Embedded in struct tg_conf; its strings freed by tg_conf_unref. */
struct tg_audit_conf {
    char *file;   /* NULL = no audit log */
    int values;   /* log argument values (redacted) besides their SHA-256 */
    char **redact; /* argument keys whose values are replaced by "[redacted]" */
    size_t nredact;
    int max_pending; /* bytes buffered while the disk is slow; beyond, records are dropped and counted */
    int chain;       /* lines carry previous_hash, seq and event_hash, and checkpoints are written */
    char *signing_key;      /* PEM file of the EC P-256 key that signs checkpoints; NULL: unsigned */
    int checkpoint_lines;   /* a checkpoint after this many records */
    int checkpoint_seconds; /* or after this many seconds, when a record came since the last one */
};

/* upstreams[].token_exchange (core/conf/upcred.c; the exchange: upstream/token_exchange.c).
 * Owner: its upstream conf; freed by tg_conf_unref. */
struct tg_token_exchange_conf {
    char *token_endpoint, *client_id, *client_secret_file, *audience, *scope, *ca;
    char *headers;   /* the token request's header lines, client_secret_basic included (secret) */
    char *form_tail; /* "&audience=…&scope=…", form-encoded ("" for neither) */
};

enum { TG_UP_STREAMABLE = 0, TG_UP_SSE = 1, TG_UP_STDIO = 2 };

/* The era an upstream is told to speak (upstreams[].protocol). */
enum { TG_PROTOCOL_AUTO = 0, TG_PROTOCOL_2025 = 1, TG_PROTOCOL_2026 = 2 };

/* One upstreams[] entry. Owner: the conf (upstreams[]); freed by tg_conf_unref. The runtime
 * struct tg_upstream that serves it holds a reference to the conf (tg_upstream_new,
 * tg_upstream_set_conf), so a retired upstream keeps its conf until its last call ends. */
struct tg_upstream_conf {
    char *name;
    char *url;
    char *host;      /* connect host (literal or name) */
    int port;
    char *path;      /* request target, e.g. "/mcp" */
    char *authority; /* Host header value */
    int tls;         /* https:// */
    char *tls_ca, *tls_cert, *tls_key, *tls_server_name; /* tls = { … } (NULL: not set) */
    int tls_verify;
    struct tg_tls_client_ctx *tls_ctx; /* https://: made at load, freed with the conf */
    int backoff_ms;     /* after 3 failures to reach it, no attempt for this long, doubling */
    int backoff_max_ms;
    int is_default;
    int init_local;
    int protocol;    /* TG_PROTOCOL_AUTO (probe once), TG_PROTOCOL_2025 or TG_PROTOCOL_2026 */
    struct tg_header *headers;
    size_t nheaders;
    int connect_timeout_ms;
    int call_timeout_ms;
    int approval_mode; /* enum tg_approval_mode; TG_APPROVAL_AUTO when not set */
    int signals;       /* enum tg_signals: upstreams[].signals, else the conf's signals */
    int pool_size;
    int pool_idle_timeout_ms;
    int queue_max;
    int queue_timeout_ms;
    int pool_pipeline; /* requests in flight on one pooled connection; 1: no pipelining */
    char *policy_path;
    struct tg_policy *policy; /* the conf's reference; NULL: fails closed (everything denied and hidden) */
    char *pins_path;          /* pins = "FILE", or NULL */
    struct tg_pins *pins;     /* the conf's reference (policy/pins.h); NULL: no pins (or TG_CONF_NO_PINS) */
    int transport;   /* TG_UP_STREAMABLE, TG_UP_SSE (legacy HTTP+SSE) or TG_UP_STDIO */
    char **command;  /* stdio: argv, NULL-terminated */
    char **env;      /* stdio: the whole environment (env, env_pass, PATH HOME LANG LC_* TZ), NULL-terminated */
    char *cwd;       /* stdio: working directory, or NULL */
    int warm;        /* stdio: children started ahead of need */
    int max_children; /* stdio: live children at most (sessions, warm ones included) */
    int stderr_inherit; /* stdio: the child writes to this process's stderr, not the log (tollgate scan; no directive) */
    char **deny_server_requests; /* server-to-client methods never relayed to clients */
    size_t ndeny_server_requests;
    struct tg_roots roots; /* pinned: the server's roots/list gets these (a grant's override) */
    struct tg_token_exchange_conf *token_exchange; /* NULL: none */
};

struct tg_jwks;
struct tg_jwt_cache;
struct tg_keyring;
struct tg_tls_client_ctx;

/* A JWT issuer whose tokens name a grant in grant_claim. Owner: the conf (jwt[]); freed by
 * tg_conf_unref (jwks with tg_jwks_free, the keyring's reference with tg_keyring_unref). Its keys
 * come from exactly one of jwks_file (read at load into jwks), jwks_url or discovery (fetched at
 * run time into keyring, policy/keyring.h: the loader leaves keyring NULL; the app attaches the
 * holder once, before the conf serves a request, and keeps it across reloads). */
struct tg_jwt_conf {
    char *issuer;
    char *audience;
    char *jwks_file;
    char *jwks_url;      /* https:// (http:// to loopback only), or NULL */
    int discovery;       /* 1: jwks_uri from the issuer's discovery document */
    char *ca;            /* jwt[].ca: CA bundle for jwks_url and discovery (NULL: the system CAs) */
    int refresh_min_s;   /* a fetched set is kept at least this long; also the unknown-kid refetch spacing */
    int refresh_max_s;   /* and at most this long */
    int fetch_timeout_ms; /* one fetch, whole */
    struct tg_keyring *keyring; /* jwks_url, discovery: the fetched keys (attached by the app) */
    char *grant_claim;   /* NULL when grant is set */
    char *grant;         /* every token of this issuer names this grant (no grant claim), or NULL */
    char *subject_claim; /* who inside the grant (default "sub") */
    int skew_s;
    unsigned algs; /* TG_JWT_ALG_ bits of jwt[].algorithms (default RS256 and ES256) */
    int dpop;          /* enum tg_dpop_mode (policy/dpop.h) of jwt[].dpop */
    int dpop_window_s; /* a proof's iat within dpop_window_s + skew_s of now */
    struct tg_jwks *jwks;
    struct tg_jwt_cache *cache; /* verified tokens (policy/jwt_cache.h), jwt[].cache_entries slots; mutable
                                 * inside an immutable conf, like the keys' precomputations */
};

/* The whole configuration. Refcounted and immutable once loaded: tg_conf_load returns it with one
 * reference, owned by the caller; each further holder (the server, each struct tg_upstream) takes
 * one with tg_conf_ref, and the tg_conf_unref that drops the last frees the conf and everything in
 * it. */
/* signals: the shapes of the gateway's own refusals (core/conf/signals.c). TOLLGATE: its own
 * codes (-32002 for a limited call); MCP_DRAFTS: the MCP drafts' (-32023 and HTTP 429). */
enum tg_signals { TG_SIGNALS_TOLLGATE = 0, TG_SIGNALS_MCP_DRAFTS = 1 };

struct tg_conf {
    int refcnt;
    int signals; /* enum tg_signals: the top-level signals directive */
    uint64_t serial; /* unique per load: what remembers something of one conf checks it is still this one */
    char *path;
    char sha256[65]; /* of the file as read (hex): what the audit log's checkpoints record */
    int has_pins;    /* an upstream has pins: what the relay looks at only then (policy/pins.h) */
    int log_level;
    int log_format;
    char *log_file;
    int log_access; /* log.access: one line per HTTP request */
    struct tg_listener_conf *listeners;
    size_t nlisteners;
    struct tg_admin_conf admin;
    struct tg_limits limits;
    struct tg_grant_conf *grants;
    size_t ngrants;
    int grant_roots; /* some grant pins roots: a session must look its grant up (core/call/roots.c) */
    struct tg_upstream_conf *upstreams;
    size_t nupstreams;
    int default_upstream; /* index or -1 */
    struct tg_audit_conf audit;
    struct tg_approvals_conf approvals;
    struct tg_cluster_conf cluster;
    struct tg_jwt_conf *jwt;
    size_t njwt;
    char *public_url; /* base URL clients use, for RFC 9728 metadata (default: from Host) */
    struct tg_policy *deny_all; /* used for upstreams without a policy (the conf's reference) */
    struct tg_buf warnings;     /* "file:line: directive: warning" lines, for -t and the log */
};

/* The policy that governs this grant's calls to upstream index u (never NULL). */
struct tg_policy *tg_conf_policy_for(const struct tg_conf *c, const struct tg_grant_conf *g, int u);
const struct tg_grant_conf *tg_conf_find_grant(const struct tg_conf *c, const char *name);
/* The roots pinned for grant g (may be NULL) on upstream u: the grant's if it pins any, else the
 * upstream's; NULL if neither does (roots/list goes to the client as before). */
const struct tg_roots *tg_conf_roots_for(const struct tg_grant_conf *g, const struct tg_upstream_conf *u);

struct tg_conf *tg_conf_load(const char *path, struct tg_buf *err);
/* The same, with TG_CONF_* flags. TG_CONF_NO_PINS: upstreams' pins files are named (pins_path)
 * but not read (`tollgate pin`, which writes them). */
#define TG_CONF_NO_PINS 0x1u
struct tg_conf *tg_conf_load_flags(const char *path, struct tg_buf *err, unsigned flags);
struct tg_conf *tg_conf_ref(struct tg_conf *c);
void tg_conf_unref(struct tg_conf *c);

/* Expand ${VAR} and ${VAR:-default} from the environment. Returns a malloc'd string or NULL with *why set. */
char *tg_conf_expand_env(const char *in, const char **why, char *varname, size_t varname_sz);

/* u->url (http://host[:port]/path or https://…) into u's tls, host, port, path and authority
 * (malloc'd, freed like the rest of u). -1 and *why on a URL it cannot use. */
int tg_conf_parse_url(struct tg_upstream_conf *u, const char **why);

const struct tg_upstream_conf *tg_conf_find_upstream(const struct tg_conf *c, struct tg_slice name, int *index);
/* Grant g's upstream_headers for the upstream named upstream in c, or NULL. */
const struct tg_grant_upheaders *tg_conf_grant_upheaders(const struct tg_grant_conf *g, const char *upstream,
                                                         const struct tg_conf *c);

#endif
