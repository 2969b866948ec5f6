/* `tollgate scan [--ca FILE | --insecure] URL | -- COMMAND ARG...`: connect to an MCP server as a client (MCP 2025-06-18:
 * initialize, notifications/initialized, tools/list following nextCursor), and print a starting
 * policy for its tools (policy/suggest.h) on stdout.
 *
 * A command-line tool, not part of the gateway: it blocks on its socket or pipes, each answer
 * bounded by --timeout. Over HTTP each message is one POST on a fresh connection (Streamable
 * HTTP: Accept: application/json, text/event-stream; a JSON or an SSE answer; the Mcp-Session-Id
 * the server gave is sent back). Answers are read with the strict parser (core/base/json.h).
 * https:// goes through core/wire/tls.c (buffers in, buffers out), driven over the blocking socket:
 * the certificate is checked (--ca FILE, else the system bundle; --insecure: not at all) before
 * the request is sent.
 *
 * Exit status: 0 the policy was printed, 1 the server could not be scanned, 2 bad arguments. */
#ifndef TG_SCAN_H
#define TG_SCAN_H

/* argv[0] is "scan". */
int tg_scan_cli(int argc, char **argv);

#endif
