/* `tollgate scan [--ca FILE | --insecure] URL | -- COMMAND ARG...`: connect to an MCP server as a client (MCP 2025-06-18:
 * initialize, notifications/initialized, tools/list following nextCursor), and print a starting
 * policy for its tools (policy/suggest.h) on stdout.
 *
 * A command-line tool, not part of the gateway, though it talks to the server with the gateway's
 * upstream runtime (core/cmd/scan_client.h): each exchange runs a loop of its own until the answer,
 * bounded by --timeout. Over HTTP each message is one POST through the upstream pool, on one
 * keep-alive connection (Streamable HTTP: Accept: application/json, text/event-stream; a JSON or
 * an SSE answer; the Mcp-Session-Id the server gave is sent back); https:// is the pool's TLS
 * client: the certificate is checked (--ca FILE, else the system bundle; --insecure: not at all)
 * before the request is sent. A command is started as the gateway starts a stdio upstream
 * (upstream/child.c), with the whole environment and its stderr passed through. Answers are read
 * with the strict parser (core/base/json.h).
 *
 * Exit status: 0 the policy was printed, 1 the server could not be scanned, 2 bad arguments. */
#ifndef TG_SCAN_H
#define TG_SCAN_H

#include <cjson/cJSON.h>

/* argv[0] is "scan". */
int tg_scan_cli(int argc, char **argv);

struct tg_scan_client;
/* initialize, notifications/initialized and tools/list page by page (at most 10000 tools) into
 * `into` (a cJSON array), with a started client (core/cmd/scan_client.h); `tollgate pin` lists
 * this way. *server (may be NULL) gets serverInfo.name (malloc'd) or NULL. 0, or -1 (printed). */
int tg_scan_list_tools(struct tg_scan_client *c, cJSON *into, char **server);

#endif
