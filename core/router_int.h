/* Internal interface of the request path while core/router.c is split up (issue 8). */
#ifndef TG_ROUTER_INT_H
#define TG_ROUTER_INT_H

#include "core/router.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/json.h"
#include "core/log.h"
#include "core/msg.h"
#include "core/audit.h"
#include "core/session.h"
#include "policy/auth.h"
#include "policy/policy.h"
#include "policy/counters.h"
#include "upstream/sse.h"
#include "transports/ws.h"
#include "upstream/stdio.h"
#include "upstream/upstream.h"


/* What a call is relaying, decided when the upstream's head arrives. */
enum call_mode {
    MODE_WAIT,     /* no upstream head yet */
    MODE_JSON,     /* application/json body being collected */
    MODE_SSE,      /* text/event-stream relayed event by event */
    MODE_ACCEPTED, /* 202 for a notification or response */
    MODE_GONE,     /* upstream says the session does not exist */
    MODE_ERROR,    /* any other status */
};

enum call_kind {
    KIND_REQUEST,   /* a client request; the answer goes back with the client's id */
    KIND_FORWARD,   /* a notification or a response from the client; answered 202 */
    KIND_GET,       /* the session's GET stream */
};

/* A client SSE stream of Streamable HTTP (a POST's answer or the GET stream): every event gets
 * an id "STREAM-SEQ", and the last limits.replay_bytes of events are kept so that a client that
 * lost the connection can GET with Last-Event-ID and carry on where it stopped. Owner: the
 * session (streams list); kept REPLAY_KEEP_MS after the stream ended, then freed by the tick. */
#define REPLAY_KEEP_MS 60000
#define REPLAY_MAX_PER_SESSION 16

struct tg_replay {
    struct tg_server *srv;
    struct tg_session *sess; /* reference */
    uint64_t id;
    uint64_t next_seq;
    /* The events, as written, in two generations: new ones go to gen[cur]; when it passes half
     * of limits.replay_bytes the older generation is dropped and the roles swap. No allocation
     * per event, and at most replay_bytes (plus one event) kept. */
    struct tg_buf gen[2];
    int cur;
    struct tg_call *live;    /* the call still producing events, or NULL once it ended */
    uint64_t last_write_ms;
    uint64_t ended_at;
    uint64_t detached_at;    /* the client went away while live */
    struct tg_list slink;    /* session's streams */
    struct tg_list glink;    /* srv->streams */
};

/* A JSON-RPC batch (protocol 2025-03-26 only): each element is decided and forwarded on its
 * own, and the answers are gathered into one JSON array. Owner: the router; freed when the
 * last element is done. */
/* A client transport that carries every message of one session on one long-lived stream:
 * legacy HTTP+SSE (replies as "message" events) or WebSocket (one text frame each).
 * Owner: refcounted; the client connection holds one reference until it goes, and every
 * message in flight (a batch) and the upstream GET stream hold one each. */
enum channel_kind { CH_SSE, CH_WS };

struct tg_channel {
    struct tg_server *srv;
    struct tg_session *sess; /* reference */
    enum channel_kind kind;
    struct tg_conn *conn;    /* NULL once the client has gone */
    struct tg_ws *ws;        /* CH_WS */
    int refcnt;
    int open;
    uint64_t last_write_ms;
    struct tg_list link;     /* srv->channels */
};

struct tg_batch {
    struct tg_server *srv;
    struct tg_conn *conn; /* NULL once the client has gone */
    int pending;          /* elements (and the dispatch loop itself) not done yet */
    struct tg_buf out;    /* "[a,b" so far */
    int nout;
    struct tg_channel *channel; /* answers go to this channel instead of conn */
    int single;                 /* a channel message that was not an array: answers go out one by one */
};

/* One client message in flight to the upstream. Owner: the router; freed by
 * call_free() after the upstream request is done or cancelled. Holds a
 * session reference. */
struct tg_call {
    struct tg_server *srv;
    int closed;               /* call_free() ran: inert, memory released by tg_router_run_pending */
    struct tg_list dlink;     /* srv->dead_calls once closed */
    struct tg_session *sess;
    struct tg_conn *conn; /* NULL once the client has gone */
    struct tg_upreq *up;
    enum call_kind kind;
    enum call_mode mode;
    int is_init;
    int got_response;
    uint64_t gid;
    char gid_str[24];
    size_t gid_len;
    char *client_id;
    size_t client_id_len;
    struct tg_buf body;
    struct tg_sse_parser sse;
    struct tg_list slink;
    struct tg_upstream *uprt; /* the upstream runtime this call uses */
    struct tg_policy *policy; /* decided under this policy (a reload does not change it) */
    char *grant;
    char *method;
    char *tool;               /* tools/call */
    struct tg_decision *dec;  /* tools/call: the decision and its reservations */
    char args_sha256[65];
    char *args_json;
    int is_tools_list;
    char *id_key;             /* canonical client id: duplicates and cancellation */
    int forwarded;            /* the message reached the upstream */
    int refunded;
    /* approvals */
    int parked;
    char approval_id[33];
    uint64_t approval_deadline;
    uint64_t parked_at_wall;
    struct tg_list alink;
    struct tg_buf held;       /* the message, serialized, waiting for a decision */
    struct tg_batch *batch;   /* the batch this element belongs to, or NULL */
    struct tg_channel *channel; /* KIND_GET for a channel session: events go there (reference) */
    /* message-stream upstreams (stdio, legacy SSE): the answer arrives on the session's stream */
    int awaiting;             /* in srv->awaiting (uses alink), answer not here yet */
    uint64_t deadline;        /* loop time after which the call times out */
    uint64_t sent_at;
    char *progress_token;     /* canonical params._meta.progressToken, for routing progress */
    struct tg_replay *replay; /* the client SSE stream's ids and replay buffer */
    struct tg_json_doc body_doc; /* MODE_JSON: the answer's spans, parsed once */
    int body_doc_ok;
    /* SEP-1699: the upstream ended the answer stream early with an event id and a retry; the
     * call waits retry ms (resume), then GETs the stream again with Last-Event-ID. */
    struct resume_wait *resume;
    int resumes;       /* reconnects in a row without an event between them */
    int resumes_total; /* reconnects of this call */
    uint64_t first_sent_ns; /* the first upstream request: latency covers the whole call */
    int resuming;      /* the upstream request now is such a GET */
    int resume_failed; /* that GET was refused: what it says is not relayed */
};

/* The timer of a call waiting to reconnect. Owner: the call until it is cancelled; freed in
 * its close callback. */
struct resume_wait {
    uv_timer_t timer;
    struct tg_call *k; /* NULL once cancelled */
};

static inline uint64_t now_ms(struct tg_server *srv) { return uv_now(srv->loop); }

/* Counters are aligned to UTC, so decisions use the wall clock. */
static inline int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline const char *up_name(const struct tg_call *k) { return tg_upstream_conf(k->uprt)->name; }

/* ---- MCP endpoint --------------------------------------------------------------- */

struct route {
    int upstream;
    const struct tg_upstream_conf *uc;
};


/* core/approvals.c */

void approval_finish(struct tg_call *k, int approve, const char *by, const char *why);

/* core/call.c */

void audit_call(struct tg_call *k, const char *decision, double latency, const char *outcome, const char *by);

void call_free(struct tg_call *k);

void abandon(struct tg_call *k);

void on_client_abort(struct tg_conn *c, void *ex);

void on_client_drain(struct tg_conn *c, void *ex);

void answer_upstream_error(struct tg_call *k, const char *why);

void settle_call(struct tg_call *k, struct tg_upreq *r, int err);

void batch_finish_call(struct tg_call *k, struct tg_upreq *r, int err);

struct tg_call *call_new(struct tg_server *srv, struct tg_session *s, struct tg_conn *c, enum call_kind kind);

void session_backpressure(struct tg_server *srv, struct tg_session *s);

void stream_fail(struct tg_call *k, const char *why, int give_back);

void stream_server_message(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *p,
                                  size_t n);

void stream_upstream_gone(struct tg_session *s, const char *why);

void abort_waiting(struct tg_server *srv);

void end_get_stream(struct tg_session *s);

void end_session_calls(struct tg_session *s);

/* core/dispatch.c */

void respond_decision(struct tg_conn *c, struct tg_batch *b, const char *id, size_t idn, const char *tool,
                             const struct tg_decision *d, const char *approval_id);

void dispatch_message(struct tg_server *srv, struct tg_conn *c, struct tg_batch *b, struct route *rt,
                             const struct tg_grant_conf *g, struct tg_session *s, struct tg_msg *m);

/* core/mcp/legacy.c */

int tg_proto_supported(struct tg_slice v);

void note_init_result(struct tg_call *k, const char *p, size_t n);

void note_server_request(struct tg_session *s, struct tg_slice id);

int take_server_request(struct tg_session *s, const char *raw, size_t n);

void local_init_result(struct tg_session *s, struct tg_msg *m, const struct tg_upstream_conf *uc,
                              struct tg_buf *out);

/* core/mcp/rewrite.c */

char *id_key_of(const char *raw, size_t n);

void upstream_data(struct tg_buf *b, const char *upstream);

int restore_id(struct tg_call *k, const char *p, size_t n, struct tg_buf *out, int *valid, int *is_error,
                      struct tg_slice *server_request_id);


char *id_key_of_string(const char *v);

char *id_key_of_number(const cJSON *n);

int rewrite_cancel(struct tg_session *s, struct tg_msg *m, int depth);

/* core/resource_meta.c */

void protected_resource_metadata(struct tg_server *srv, struct tg_conn *c, struct tg_slice rest);

/* core/route.c */


void respond_json(struct tg_conn *c, int status, const char *json);

int readyz(struct tg_server *srv);

void base_url(struct tg_server *srv, struct tg_conn *c, struct tg_buf *out);

/* transports/batch.c */


void respond_rpc(struct tg_conn *c, int status, const char *extra, const char *id, size_t id_len, int code,
                        const char *msg, const char *data);

void batch_add(struct tg_batch *b, const char *p, size_t n);

void batch_add_error(struct tg_batch *b, const char *id, size_t idn, int code, const char *msg,
                            const char *data);

void on_batch_abort(struct tg_conn *c, void *ex);

void batch_done_one(struct tg_batch *b);

void reply_rpc(struct tg_conn *c, struct tg_batch *b, int status, const char *id, size_t idn, int code,
                      const char *msg, const char *data);

void reply_json(struct tg_conn *c, struct tg_batch *b, const char *p, size_t n);

void reply_accepted(struct tg_conn *c, struct tg_batch *b);

/* transports/channel.c */

void channel_send(struct tg_channel *ch, const char *p, size_t n);

size_t channel_pending(const struct tg_channel *ch);


struct tg_slice query_param(struct tg_slice q, const char *name);

void channel_unref(struct tg_channel *ch);

struct tg_channel *channel_new(struct tg_server *srv, struct tg_session *s, enum channel_kind kind,
                                      struct tg_conn *c);

void channel_gone(struct tg_channel *ch);

void on_channel_conn_abort(struct tg_conn *c, void *ex);

void channel_end(struct tg_channel *ch, uint16_t ws_code, const char *why);

void on_channel_drain(struct tg_conn *c, void *ex);

int channel_message(struct tg_server *srv, struct tg_channel *ch, const char *body, size_t blen);

struct tg_session *new_channel_session(struct tg_server *srv, struct tg_conn *c, struct route *rt,
                                              const struct tg_grant_conf *g);

void channels_keepalive(struct tg_server *srv);

/* transports/legacy_sse.c */

void open_sse_channel(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g);

void handle_messages(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g,
                            struct tg_slice query);

/* transports/replay.c */

void stream_open(struct tg_call *k);

void sse_write_message(struct tg_call *k, const char *p, size_t n);

void attach_stream(struct tg_call *k, struct tg_conn *c, uint64_t after_seq);

void resume_stream(struct tg_server *srv, struct tg_conn *c, struct tg_session *s, struct tg_slice last);

void streams_tick(struct tg_server *srv);

/* transports/streamable.c */

int accepts_sse(struct tg_conn *c);

void handle_post(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g);

void handle_get(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g);

void handle_delete(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g);

/* transports/ws_channel.c */

void open_ws_channel(struct tg_server *srv, struct tg_conn *c, struct route *rt, const struct tg_grant_conf *g);

/* upstream/sse_link.c */

void link_pause(struct tg_session *s, int pause);

int sse_link_send(struct tg_server *srv, struct tg_session *s, struct tg_upstream *u, const char *body,
                         size_t len, uint64_t gid);

/* upstream/stdio_link.c */

int refuse_stream_request(struct tg_call *probe, const char *p, size_t n);

void stream_send(struct tg_call *k, const char *body, size_t len, uint64_t timeout);

/* upstream/streamable.c */

void resume_cancel(struct tg_call *k);

void session_header(struct tg_call *k, char *hdr, size_t sz);

void call_send(struct tg_call *k, const char *method, const char *body, size_t len, int dedicated,
                      uint64_t timeout);

void delete_upstream_session(struct tg_server *srv, struct tg_session *s);

#endif
