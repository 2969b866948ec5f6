/* JSON-RPC 2.0 messages as MCP uses them.
 *
 * tg_msg_decode() parses strictly (core/base/json.h) and classifies one message.
 * The tree and the copy of the raw id belong to the tg_msg and are released
 * by tg_msg_dispose(). */
#ifndef TG_MSG_H
#define TG_MSG_H

#include <cjson/cJSON.h>

#include "core/base/buf.h"

enum tg_msg_kind { TG_MSG_REQUEST, TG_MSG_NOTIFICATION, TG_MSG_RESPONSE };

/* JSON-RPC and tollgate error codes (ARCHITECTURE.md "Policy files"). */
enum {
    TG_RPC_PARSE_ERROR = -32700,
    TG_RPC_INVALID_REQUEST = -32600,
    TG_RPC_METHOD_NOT_FOUND = -32601,
    TG_RPC_INVALID_PARAMS = -32602,
    TG_RPC_INTERNAL = -32603,
    TG_RPC_DENIED = -32001,
    TG_RPC_LIMITED = -32002,
    TG_RPC_APPROVAL = -32003,
    TG_RPC_UPSTREAM = -32004,
};

/* The methods the gateway itself acts on, named once when a message is decoded (tg_msg.mid)
 * instead of compared as strings at every step of the dispatch. */
enum tg_method {
    TG_M_OTHER = 0, /* any other method, and a response */
    /* requests */
    TG_M_INITIALIZE,
    TG_M_PING,
    TG_M_TOOLS_CALL,
    TG_M_TOOLS_LIST,
    TG_M_RESOURCES_READ,
    TG_M_PROMPTS_GET,
    TG_M_RESOURCES_SUBSCRIBE,
    TG_M_RESOURCES_UNSUBSCRIBE,
    TG_M_LOGGING_SET_LEVEL,
    TG_M_LISTEN, /* subscriptions/listen (2026-07-28) */
    /* notifications */
    TG_M_INITIALIZED,
    TG_M_CANCELLED,
    TG_M_ROOTS_LIST_CHANGED,
};
/* The id of a method name (TG_M_OTHER for names not above). */
enum tg_method tg_msg_method_id(const char *method);

/* One decoded message. Value type in caller storage (usually the transport's stack). It owns
 * root and id_raw, freed by tg_msg_dispose(); a call that takes id_raw over leaves it NULL. */
struct tg_msg {
    cJSON *root;
    enum tg_msg_kind kind;
    const char *method; /* requests and notifications; points into root */
    enum tg_method mid; /* method's id */
    char *id_raw;       /* the id token exactly as the peer sent it (NUL-terminated), or NULL */
    size_t id_len;
    /* The bytes it was decoded from, while the decoder's caller holds them (NULL once the
     * message outlives that call), with where its id is in them; and whether the tree was
     * changed since (tg_msg_edited). An unchanged request goes upstream as those bytes with
     * the id replaced, instead of being written again from the tree. src_meta_len > 0: the bytes
     * at src_meta_off whose removal removes params._meta (tg_json_doc.params_meta). */
    const char *src;
    size_t src_len, src_id_off, src_meta_off, src_meta_len;
    int edited;
};

/* Say that m's tree no longer matches its bytes. */
static inline void tg_msg_edited(struct tg_msg *m) { m->edited = 1; }

/* Decode one message. On error returns TG_RPC_PARSE_ERROR or TG_RPC_INVALID_REQUEST and sets *why;
 * if the body was valid JSON with an id, that id is copied into m->id_raw so the error can carry it. */
int tg_msg_decode(const char *p, size_t n, int max_depth, struct tg_msg *m, const char **why);
void tg_msg_dispose(struct tg_msg *m);

/* Serialize m with its id replaced by the decimal gateway id `gid` (requests only). */
void tg_msg_write_with_id(struct tg_buf *out, struct tg_msg *m, uint64_t gid);

/* Is `method` defined by the MCP specification for a client to send as this kind of message
 * (a request method as a request, a notification as a notification)? */
int tg_msg_is_standard_client_method(const char *method, enum tg_msg_kind kind);
/* The same for m's method, answered from m->mid when it names one. */
int tg_msg_is_standard(const struct tg_msg *m, enum tg_msg_kind kind);

/* Append a JSON-RPC error object. id_raw NULL means "null". data_json may be NULL (raw JSON text). */
void tg_rpc_error(struct tg_buf *out, const char *id_raw, size_t id_len, int code, const char *message,
                  const char *data_json);

/* Replace the bytes of the id token span [id_off, id_off+id_old) in `in` with `id` into `out`. */
void tg_msg_splice_id(struct tg_buf *out, const char *in, size_t n, size_t id_off, size_t id_old, const char *id,
                      size_t id_len);
/* The same, with the bytes [cut_off, cut_off+cut_len) left out too. 0, or -1 (nothing written)
 * if the two spans overlap or do not fit in n. */
int tg_msg_splice_id_cut(struct tg_buf *out, const char *in, size_t n, size_t id_off, size_t id_old, const char *id,
                         size_t id_len, size_t cut_off, size_t cut_len);

#endif
