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
 * Resources, resource templates and prompts go into "resources" and "prompts" groups, both with
 * default: deny (a group the server does not offer is written that way too): each is allowed by
 * its exact URI, name or template glob, or denied when a SECRET word is in it. */
#ifndef TG_SCAN_POLICY_H
#define TG_SCAN_POLICY_H

#include <cjson/cJSON.h>

#include "core/base/buf.h"

enum tg_scan_class { TG_SCAN_UNKNOWN, TG_SCAN_READ, TG_SCAN_LIMIT, TG_SCAN_APPROVE, TG_SCAN_SECRET };

/* Why a tool got its class: one sentence for the policy's comment. Value type, caller storage. */
struct tg_scan_verdict {
    enum tg_scan_class cls;
    char why[320];
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

/* Classify one tool object ({name, description?, annotations?}). */
void tg_suggest_classify(const cJSON *tool, struct tg_scan_verdict *v);

/* Append the policy for `tools` (a cJSON array of tool objects; entries without a string name
 * are skipped, a repeated name is written once) and for what `offer` lists to out: YAML with a
 * comment per tool, resource and prompt, or JSON when json is set (the comments' gist goes to
 * "description"). */
void tg_suggest_write_policy(struct tg_buf *out, const cJSON *tools, const struct tg_scan_offer *offer,
                          const struct tg_scan_source *src, int json);

#endif
