/* The replay buffer of a client SSE stream of Streamable HTTP (a POST's answer or the GET
 * stream): every event gets an id "STREAM-SEQ", and the last limits.replay_bytes of events are
 * kept so that a client that lost the connection can GET with Last-Event-ID and carry on where
 * it stopped.
 *
 * Owner: the server's list (srv->streams), the session's list (s->streams) linking it too; kept
 * TG_REPLAY_KEEP_MS after the stream ended, then freed by the tick (tg_replay_free). */
#ifndef TG_REPLAY_H
#define TG_REPLAY_H

#include <stdint.h>

#include "core/base/buf.h"

struct tg_conn;
struct tg_server;
struct tg_session;
struct tg_http_sink;

#define TG_REPLAY_KEEP_MS 60000
#define TG_REPLAY_MAX_PER_SESSION 16

/* A piece of a generation: whole events back to back in b (an event never spans two). Owned by
 * its generation's list. */
struct tg_replay_chunk {
    struct tg_replay_chunk *next;
    struct tg_buf b;
};

/* One generation of kept events: its chunks, oldest first. A new chunk is four times the last
 * one's size (1 KiB, 4, 16, then 64 KiB each) or one event's, if larger: a stream grows without
 * copying what it holds, and a call in flight with one event holds about a kilobyte. */
struct tg_replay_gen {
    struct tg_replay_chunk *head, *tail;
    size_t len; /* bytes of events in all its chunks */
};

/* Owner: the server's list (srv->streams, gnode); the session's list holds it too (snode), and
 * it holds a session reference. tg_replay_free() frees it: from the tick TG_REPLAY_KEEP_MS after
 * it ended, in tg_replay_new() past TG_REPLAY_MAX_PER_SESSION, or at shutdown. */
struct tg_replay {
    struct tg_server *srv;
    struct tg_session *sess; /* reference */
    uint64_t id;
    uint64_t next_seq;
    char id_head[18]; /* "HEX-" of id, made for the stream's first event */
    unsigned char id_head_len;
    char seq_txt[20]; /* next_seq + 1 in decimal, once an event is written (its seq_len bytes; the rest is padding) */
    unsigned char seq_len;
    /* The events, as written, in two generations: new ones go to gen[cur]; when it passes half
     * of limits.replay_bytes the older generation is dropped and the roles swap. No allocation
     * per event, and at most replay_bytes (plus one event per generation) kept. */
    struct tg_replay_gen gen[2];
    int cur;
    struct tg_http_sink *live; /* the exchange still producing events, or NULL once it ended */
    uint64_t last_write_ms;
    uint64_t ended_at;
    uint64_t detached_at;    /* the client went away while live */
    struct tg_list snode;    /* session's streams */
    struct tg_list gnode;    /* srv->streams */
};

/* A new stream of session s (the oldest ended streams beyond TG_REPLAY_MAX_PER_SESSION go). */
struct tg_replay *tg_replay_new(struct tg_server *srv, struct tg_session *s, struct tg_http_sink *live);
void tg_replay_free(struct tg_replay *r);
/* Frame message p[0..n) as the stream's next event (its id, "event: message", its data lines)
 * straight into the replay buffer (the oldest events go when it is full), and return where it
 * is, valid until the next call. With limits.replay_bytes 0 nothing is kept and the event is
 * framed in scratch instead. No copy or allocation per event besides that. */
struct tg_slice tg_replay_message(struct tg_replay *r, const char *p, size_t n, struct tg_buf *scratch);
/* Free a generation's chunks (it is then empty). */
void tg_replay_gen_clear(struct tg_replay_gen *g);
/* Write the kept events whose sequence number is above after_seq to c. */
void tg_replay_write(struct tg_replay *r, struct tg_conn *c, uint64_t after_seq);
/* Parse a Last-Event-ID of ours: 0 and the stream id and sequence, or -1. */
int tg_replay_parse_id(struct tg_slice last, uint64_t *stream, uint64_t *seq);
/* The stream ended: keep it a while for a client that comes back. */
void tg_replay_end(struct tg_replay *r);
/* Free the streams that ended TG_REPLAY_KEEP_MS ago (the tick). */
void tg_replay_expire(struct tg_server *srv);
/* Shutdown: every replay buffer goes. */
void tg_replay_free_all(struct tg_server *srv);

#endif
