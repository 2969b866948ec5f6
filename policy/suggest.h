/* `tollgate scan`, the pure half: from a server's tools (the objects of its tools/list answers)
 * to a starting policy in PolicyLayer's format. No I/O; core/cmd/scan.c does the talking.
 *
 * Each tool is put in one class by words in its name and description and by its MCP annotations
 * (the words and the order are listed in tg_suggest_heuristics_help, which `tollgate scan --help`
 * prints):
 *   SECRET   a word such as env, secret, token, password or key    -> action: deny, with a reason
 *   APPROVE  a word such as execute, delete or pay, or destructiveHint: true  -> action: approve
 *   LIMIT    a word such as write, send or create                            -> 10 calls a minute
 *   READ     a word such as get, list or read, or readOnlyHint: true         -> action: allow
 *   UNKNOWN  nothing matched                       -> left out: denied by default (default: deny)
 * The most cautious class found anywhere wins, so a read tool whose description says "delete"
 * needs approval; a readOnlyHint does not lift a tool whose words say write or execute, and
 * nothing lifts a SECRET tool. Words are whole words (split at non-letters and camelCase humps)
 * with plain inflections, so "keyboard" or "monkey" never reads as "key".
 *
 * Each tool also gets tags (enum tg_scan_tag) from the same kind of words and from all four
 * annotations, independent of its class; the YAML comment says which word or annotation gave each.
 * A brake for the tools tagged execute or write is written under "*" (SCAN_BRAKE_LIVE in
 * suggest.c).
 *
 * Resources, resource templates and prompts go into "resources" and "prompts" groups, both with
 * default: deny (a group the server does not offer is written that way too): each is allowed by
 * its exact URI, name or template glob, or denied when a SECRET word is in it. */
#ifndef TG_SCAN_POLICY_H
#define TG_SCAN_POLICY_H

#include <cjson/cJSON.h>

#include "core/base/buf.h"

enum tg_scan_class { TG_SCAN_UNKNOWN, TG_SCAN_READ, TG_SCAN_LIMIT, TG_SCAN_APPROVE, TG_SCAN_SECRET };

/* The tags scan proposes for a tool (a policy accepts any tag: policy/compile_tags.c; these are
 * the words scan uses, listed in tg_suggest_tags_help). A tool may get several. */
enum tg_scan_tag {
    TG_SCAN_TAG_READ,          /* looks read-only: a read word or readOnlyHint, and no write/execute word */
    TG_SCAN_TAG_WRITE,         /* changes something: a write or delete word, or an annotation of a changing tool */
    TG_SCAN_TAG_DESTRUCTIVE,   /* may destroy data: a delete word or destructiveHint: true */
    TG_SCAN_TAG_EXECUTE,       /* runs code or commands */
    TG_SCAN_TAG_EGRESS,        /* sends data out: email, http, post, upload, webhook, openWorldHint: true */
    TG_SCAN_TAG_READS_SECRETS, /* the environment, credentials, keys, tokens, passwords */
    TG_SCAN_TAG_FILESYSTEM,    /* files, directories, paths */
    TG_SCAN_TAG_NETWORK,       /* http, URLs, sockets, downloads, openWorldHint: true */
    TG_SCAN_NTAGS
};

/* Why a tool got its class: one sentence for the policy's comment; its tags (bit 1 << tag) and
 * why each (one line: "execute (name says "execute"); write (...)"). Value type, caller storage. */
struct tg_scan_verdict {
    enum tg_scan_class cls;
    char why[320];
    unsigned tags;
    char tags_why[1152];
};

/* What the header comment says about where the tools came from; every field may be NULL. */
struct tg_scan_source {
    const char *target;   /* the URL or the command line */
    const char *server;   /* serverInfo.name */
    const char *version;  /* serverInfo.version */
    const char *protocol; /* the protocolVersion the server chose */
};

/* What the server lists besides tools: the objects of resources/list, resources/templates/list and
 * prompts/list; NULL for what it does not offer (or refused to list). */
struct tg_scan_offer {
    const cJSON *resources;
    const cJSON *templates;
    const cJSON *prompts;
};

/* The reason a SECRET tool's deny gives the client. */
#define TG_SCAN_SECRET_REASON "tollgate scan: it may read the environment, credentials or secrets"

/* The rate limit given to LIMIT tools. */
#define TG_SCAN_LIMIT_PER_MINUTE 10

extern const char tg_suggest_heuristics_help[];

/* The tags' names, by enum tg_scan_tag ("read", "write", ..., "reads_secrets"). */
extern const char *const tg_suggest_tag_names[TG_SCAN_NTAGS];

/* How tags are proposed, for `tollgate scan --help` (after tg_suggest_heuristics_help). */
extern const char tg_suggest_tags_help[];

/* What the brake under "*" does, for `tollgate scan --help` (after tg_suggest_tags_help). */
extern const char tg_suggest_brake_help[];

/* Classify one tool object ({name, description?, annotations?}): v->cls and v->why, and its tags
 * (tg_suggest_tags). */
void tg_suggest_classify(const cJSON *tool, struct tg_scan_verdict *v);

/* The tags of one tool object: v->tags and v->tags_why (policy/suggest_words.c). */
void tg_suggest_tags(const cJSON *tool, struct tg_scan_verdict *v);

/* Append the policy for `tools` (a cJSON array of tool objects; entries without a string name
 * are skipped, a repeated name is written once) and for what `offer` lists to out: YAML with a
 * comment per tool, resource and prompt, or JSON when json is set (the comments' gist goes to
 * "description"). */
void tg_suggest_write_policy(struct tg_buf *out, const cJSON *tools, const struct tg_scan_offer *offer,
                          const struct tg_scan_source *src, int json);

#endif
