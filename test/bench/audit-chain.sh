#!/usr/bin/env bash
# CPU per proxied tools/call of a tollgate with the seed-shaped policy and the audit log, with the
# audit log's hash chain on and off, in alternation (ROUNDS rounds, SECONDS each; loopback only).
# CPU is the gateway's utime + stime from /proc over the wrk run, divided by the calls answered.
#   test/bench/audit-chain.sh [BUILD_DIR]     (default build-perf; needs wrk)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
B=${1:-$here/../../build-perf}
ROUNDS=${ROUNDS:-3}
SECS=${SECONDS_PER_RUN:-6}
tmp=$(mktemp -d --suffix=.tg-audit-ab)
cd "$tmp"
$B/test/bench/tg-bench-upstream 0 > up.out 2>up.err & UP=$!
GW=
trap 'kill $UP 2>/dev/null; [[ -z $GW ]] || kill $GW 2>/dev/null; rm -rf "$tmp"' EXIT
for i in $(seq 50); do grep -q LISTENING up.out && break; sleep 0.1; done
UPP=$(awk '/LISTENING/{print $2}' up.out)
echo '{"version":"1","default":"deny","tools":{"echo":{"limits":[{"counter":"echo_rate","window":"second","max":100000000,"scope":"grant"}]}}}' > p.json
for round in $(seq "$ROUNDS"); do for mode in on off; do
  rm -f audit.log; ch=true; [[ $mode == off ]] && ch=false
  cat > gw.conf <<C
log = { level = "warn"; };
audit = { file = "$tmp/audit.log"; chain = $ch; };
listen = ( { address = "127.0.0.1"; port = 18099; } );
grants = ( { name = "b"; anonymous = true; } );
upstreams = ( { name = "bench"; url = "http://127.0.0.1:$UPP/mcp"; default = true; policy = "$tmp/p.json"; pool = { size = 64; }; } );
C
  $B/tollgate -c gw.conf > gw.log 2>&1 & GW=$!; sleep 0.5
  sid=$(curl -s -D - -o /dev/null -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' localhost:18099/mcp -d '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}' | tr -d '\r' | awk -F': ' 'tolower($1)=="mcp-session-id"{print $2}')
  t0=$(awk '{sub(/^.*\) /,""); print $12+$13}' /proc/$GW/stat)
  out=$(MCP_SESSION_ID=$sid wrk -t1 -c50 -d${SECS}s -s "$here/call.lua" http://127.0.0.1:18099/mcp 2>&1 | grep BENCH_RESULT)
  t1=$(awk '{sub(/^.*\) /,""); print $12+$13}' /proc/$GW/stat)
  req=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$out"); rps=$(sed 's/.* rps=\([0-9.]*\).*/\1/' <<<"$out")
  kill $GW; wait $GW 2>/dev/null || true; GW=
  echo "round $round chain=$mode requests=$req rps=$rps cpu_us_per_call=$(awk -v t=$((t1-t0)) -v r=$req 'BEGIN{printf "%.2f", t*10000/r}') audit_lines=$(wc -l < audit.log)"
done; done
