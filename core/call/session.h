/* Client sessions, owned by the gateway.
 *
 * A session id is 128 random bits (base64url, 22 characters), bound to the
 * grant and the upstream that created it, and a 2025 session to the subject (the user inside
 * the grant) that created it. The table owns every session;
 * work in flight holds a reference (tg_session_ref) so that a session removed
 * by DELETE or expiry stays valid until that work finishes. */
#ifndef TG_SESSION_H
#define TG_SESSION_H

#include <stdint.h>

#include "core/base/buf.h"

#define TG_SESSION_ID_LEN 22

struct tg_call;
struct tg_sink;
struct tg_server;
struct tg_uplink;
struct tg_bridge;

/* One client session. Owner: refcounted. tg_session_create() gives the table its reference,
 * which tg_session_remove() drops (DELETE, expiry, the client gone); calls, sinks, channels and
 * replay buffers hold their own, and the last tg_session_unref() frees it. */
struct tg_session {
    uint8_t id[16];
    char id_str[TG_SESSION_ID_LEN + 1];
    unsigned char up_modern; /* a 2025 session on a 2026-07-28-only upstream: the gateway answered
                              * initialize, requests go as 2026 (u.client_caps below) */
    const char *grant; /* grant name: a copy (grants can change on reload), kept in grant_name */
    char *subject;     /* who inside the grant made it (a 2025 session; copied by
                        * tg_session_set_subject: grant_name itself when it is the grant's name, as an
                        * anonymous or static-token grant's is), or NULL */
    char *issuer;      /* with subject: its JWT's issuer (copied), or NULL (none) */
    char *claims;      /* with subject: the claims of its maker's JWT that its policy's "set" names
                        * (a compact JSON object, policy/bind.h), for the requests of a channel, which
                        * carry no token; NULL: none (no JWT, or the policy names none) */
    uint8_t subject_sha256[32]; /* with subject: tg_principal_sha256() of its maker, which every
                                 * request naming the session must match (else 404) */
    uint64_t subject_tag;       /* tg_principal_tag() of its maker, 0 if not known */
    uint64_t subject_serial;    /* with subject_tag: the conf serial, and its maker's who->jwt */
    char *listen_uris; /* up_modern: the resources its client subscribed to (a JSON array, bounded by
                        * TG_LISTEN_URIS_MAX and _BYTES in core/bridge/listen.h),
                        * which every listen standing in for its GET stream asks for; owned */
    char *up_session;  /* upstream's Mcp-Session-Id, never shown to clients */
    char *up_auth;     /* the credential header lines its last call carried to the upstream (a
                        * grant's upstream_headers, an exchanged token), for the requests no call
                        * makes (DELETE, a reply, a legacy SSE stream's POSTs); owned, or NULL */
    char *up_who, *up_token; /* a channel's session on a token_exchange upstream: whose JWT opened the
                              * channel, and that JWT, for its calls (core/call/upauth.c); owned */
    const char *proto; /* negotiated protocol version: a version the gateway knows, as
                        * tg_mcp_version_known() gives it (a static string), or "" */
    uint64_t last_active_ms;
    uint64_t shared_touch_ms; /* when this gateway last renewed the record's expiry */
    struct tg_list calls;   /* in-flight calls of this session (struct tg_call, core/call/call.c) */
    struct tg_call *get_stream; /* the call carrying the session's stream of server messages, if any */
    struct tg_sink *channel;    /* the session's long-lived client stream (legacy SSE, WebSocket), if any */
    struct tg_server *srv;      /* the server (for callbacks that only have the session) */
    struct tg_uplink *uplink;   /* message-stream upstream (stdio child, legacy SSE stream), if any:
                                 * owned by the session, freed by release_link */
    void (*release_link)(struct tg_session *s); /* called when the session is removed */
    /* A session is one of these at most: stateless (bridge) or a 2025 one on a 2026-only upstream
     * (up_modern, client_caps). */
    union {
        struct tg_bridge *bridge; /* a stateless session's upstream-session state (core/bridge/stateless.c,
                                   * which owns and frees it) */
        char *client_caps;        /* up_modern: the capabilities its initialize declared (JSON),
                                   * sent as _meta with each request; owned, freed with the session */
    } u;
    struct tg_buf server_reqs; /* canonical ids of server-to-client requests awaiting the client's answer */
    struct tg_list streams; /* router's resumable client streams (replay buffers) */
    struct tg_session *hnext;
    struct tg_list link;    /* table's list, oldest activity first is not kept: sweep scans */
    /* The narrow members together, last (no holes between wider members). */
    int subject_jwt;        /* with subject_tag: under it (a request under the same conf is matched by index) */
    int upstream;           /* index into the server's upstreams */
    int refcnt;
    unsigned inflight;
    int stalled;            /* client connections still holding a big answer of this session */
    uint8_t nserver_reqs;   /* of server_reqs, at most TG_MCP_MAX_SERVER_REQUESTS (core/mcp/legacy.h) */
    unsigned char log_level; /* up_modern: the level logging/setLevel asked for (tg_mcp_log_level), 0 none */
    uint8_t initialized : 1;  /* the initialize exchange succeeded */
    uint8_t live : 1;         /* in the table (0 after DELETE or expiry) */
    uint8_t init_pending : 1; /* initialize sent upstream, answer not seen yet */
    uint8_t shared : 1;       /* its record is in the cluster's Redis (published or adopted) */
    char grant_name[];      /* in the session's own allocation: a separate copy would take a
                             * malloc chunk of its own (32 bytes for a short name) */
};

struct tg_session_table;

struct tg_session_table *tg_session_table_new(void);
void tg_session_table_free(struct tg_session_table *t);
size_t tg_session_table_count(const struct tg_session_table *t);
size_t tg_session_count_for_grant(const struct tg_session_table *t, const char *grant);

/* New live session (refcnt 1, owned by the table). */
struct tg_session *tg_session_create(struct tg_session_table *t, const char *grant, int upstream);
/* Look up by the base64url id sent by a client; NULL if unknown or not live. */
struct tg_session *tg_session_find(struct tg_session_table *t, struct tg_slice id);
/* A cluster: ids made from now on are sealed with secret (8 random bytes and 8 of MAC). */
void tg_session_table_seal(struct tg_session_table *t, const uint8_t secret[32]);
/* 1 if id is a well-formed id sealed with the table's secret (made by a member of the cluster). */
int tg_session_id_sealed(const struct tg_session_table *t, struct tg_slice id);
/* A session another member made, with that id: NULL if the id is not sealed or already here. The
 * caller fills in what the shared record says (upstream session, protocol). */
struct tg_session *tg_session_adopt(struct tg_session_table *t, struct tg_slice id, const char *grant, int upstream);
/* Remove from the table and drop the table's reference. */
void tg_session_remove(struct tg_session_table *t, struct tg_session *s);
/* s->subject = a copy of subject (once). */
void tg_session_set_subject(struct tg_session *s, const char *subject);
struct tg_session *tg_session_ref(struct tg_session *s);
void tg_session_unref(struct tg_session *s);

/* At a stdio upstream's max_children: a live session of upstream that holds a link (a stdio
 * child) and may give it up to a new session of grant. Never one with work under way (a call in
 * flight or parked, an initialize pending). First the grant's session idle longest (since its
 * client's last request or its last call's end) whose client is gone (connected(s) 0: no GET
 * stream, legacy SSE stream or WebSocket held by a connection), at any idleness; else the grant's, then another
 * grant's, session idle longest if idle at least idle_ms. A stream alone is not use (clients keep
 * one open while they do nothing), but it says the client is still there, so it gets idle_ms; and
 * two clients of one grant that initialise again the moment their stream ends cannot take a child
 * back and forth. NULL if none. *same: 1 if of grant. */
struct tg_session *tg_session_pick_evictable(struct tg_session_table *t, int upstream, const char *grant,
                                             uint64_t now_ms, uint64_t idle_ms, int (*connected)(const struct tg_session *),
                                             int *same);

typedef int (*tg_session_visit_cb)(struct tg_session *s, void *arg); /* return 1 to remove s */
void tg_session_sweep(struct tg_session_table *t, tg_session_visit_cb cb, void *arg);

#endif
