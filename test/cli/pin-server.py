#!/usr/bin/env python3
"""A stdio MCP server for test/cli/pin-cli.sh: newline-delimited JSON-RPC, MCP 2025-06-18.
tools/list answers with the tools in the JSON file named by argv[1], read again on every list, so
the test changes what the server lists by rewriting the file."""
import json
import sys


def answer(mid, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": mid, "result": result}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        answer(msg["id"], {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                           "serverInfo": {"name": "pin-server", "version": "1"}})
    elif method == "tools/list":
        with open(sys.argv[1], encoding="utf-8") as f:
            answer(msg["id"], {"tools": json.load(f)})
    else:
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                                     "error": {"code": -32601, "message": "Method not found"}}) + "\n")
        sys.stdout.flush()
