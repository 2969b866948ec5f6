/* Rewriting what an upstream says for the client of one call: our JSON-RPC id back to the
 * client's (one id key for duplicates, cancellation and progress), tools/list filtered by the
 * policy. Pure functions: no I/O. */
#ifndef TG_MCP_REWRITE_H
#define TG_MCP_REWRITE_H

#include "core/base/buf.h"
#include "core/base/json.h"

struct tg_policy;
struct tg_pins;
struct tg_pins_seen;

/* A canonical key of a request id: "n" + digits, or "s" + the decoded string. Malloc'd (the
 * caller frees), NULL for something that is not an id. */
char *tg_mcp_id_key(const char *raw, size_t n);
char *tg_mcp_id_key_string(const char *v);
char *tg_mcp_id_key_number(const cJSON *n);
/* error.data for -32004, NUL-terminated (it is passed on as a C string). */
void tg_mcp_upstream_data(struct tg_buf *b, const char *upstream);

/* The lists a policy filters: what each shows only if the grant may use it. */
enum tg_mcp_list {
    TG_MCP_LIST_TOOLS = 0,  /* tools/list: result.tools[].name, hidden or denied tools dropped */
    TG_MCP_LIST_RESOURCES,  /* resources/list: result.resources[].uri, by the resources rules */
    TG_MCP_LIST_TEMPLATES,  /* resources/templates/list: result.resourceTemplates[].uriTemplate */
    TG_MCP_LIST_PROMPTS,    /* prompts/list: result.prompts[].name, by the prompts rules */
};
/* The list method's kind, or -1 for another method. */
int tg_mcp_list_kind(const char *method);
/* A message's method token, raw JSON with its quotes: 1 if it is, or may spell with escapes,
 * "notifications/resources/updated" (a look at the token only, not the message). */
int tg_mcp_method_maybe_update(struct tg_slice method_raw);

/* The answer a call waits for. Value type: answer_of() in core/call/call.c fills one on its caller's
 * stack; every pointer is borrowed from the call. */
struct tg_mcp_answer {
    const char *gid;          /* our id, as sent upstream */
    size_t gid_len;
    const char *client_id;    /* the client's id, raw JSON */
    size_t client_id_len;
    int is_request;           /* 0: nothing is this call's answer (a notification, a stream) */
    const struct tg_policy *tools_filter; /* non-NULL: a list answer, filtered by this policy */
    const char *upstream;     /* for logs and error.data */
    struct tg_buf *own;       /* the buffer p is (or NULL): the id may be put right in it and the
                                 buffer moved into out, so that a big answer is not copied */
    size_t *result_at;        /* non-NULL: set to where the answer's result value is in out (offset,
                                 then length) when out is p with the id restored; length 0 else */
    int list_kind;            /* which list (enum tg_mcp_list; TG_MCP_LIST_TOOLS is 0) */
    int *maybe_update;        /* non-NULL: set to 1 for a server notification whose method is, or
                                 may spell with escapes, notifications/resources/updated */
    const struct tg_pins *pins;        /* a tools/list answer of an upstream with pins, or NULL */
    struct tg_pins_seen *pins_seen;    /* what the gateway learns of it (policy/pins.h) */
};

/* Rewrite message p for the client into out. Returns 1 if it was the awaited answer. *valid is
 * 0 for something that is not JSON (out is then empty); out is empty too for an answer that
 * is not this call's (nobody's to relay), and for a server request or notification, which goes
 * to the client as it is: *valid is then 2 (p is not copied); *is_error 1 for an error answer;
 * server_request_id (may be NULL) gets the id of a server-to-client request. pre: the spans of
 * p if the caller parsed it already, or NULL. An answer that cannot be filtered is replaced by
 * a -32004 error: hidden tools are never shown. */
int tg_mcp_restore_id(const struct tg_mcp_answer *a, const char *p, size_t n, const struct tg_json_doc *pre,
                      struct tg_buf *out, int *valid, int *is_error, struct tg_slice *server_request_id);
/* 1 if p[0..n) (JSON) is an object, not an array or a scalar: what an upstream sends is relayed
 * only as one message the gateway looked at, never as a batch. */
int tg_mcp_is_object(const char *p, size_t n);

#endif
