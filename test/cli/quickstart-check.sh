#!/usr/bin/env bash
# scripts/quickstart.sh with the built binary (TOLLGATE_BIN: no install, no build): on ports from
# the environment it serves initialize on TOLLGATE_PORT and /healthz on TOLLGATE_ADMIN_PORT; with
# STANDIN_PORT taken it exits non-zero at once, naming the stand-in, its log and the port.
# Every wait is bounded. Usage: quickstart-check.sh TOLLGATE
set -uo pipefail
tg=$(realpath "${1:?usage: quickstart-check.sh path/to/tollgate}")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
d=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$d"' EXIT
fails=0
ok() { echo "ok - $*"; }
notok() { echo "not ok - $*"; fails=$((fails + 1)); }

# Three free ports, none of them the defaults.
read -r tp ap sp < <(python3 -c '
import socket
s = [socket.socket() for _ in range(3)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')

# until SECONDS CMD...: CMD succeeds within SECONDS (polled; the condition, not the time, decides).
until_ok() {
    local t=$1; shift
    local end=$((SECONDS + t))
    while ! "$@" 2>/dev/null; do
        ((SECONDS < end)) || return 1
        sleep 0.1
    done
}

# ---- custom ports: it serves
log=$d/quickstart.log
TOLLGATE_BIN=$tg TOLLGATE_PORT=$tp TOLLGATE_ADMIN_PORT=$ap STANDIN_PORT=$sp TMPDIR=$d \
    setsid bash "$root/scripts/quickstart.sh" >"$log" 2>&1 &
qs=$!
pids+=("$qs")
if until_ok 60 grep -q "msg=\"listening\".*port=$tp" "$log"; then
    ok "quickstart: tollgate listening on TOLLGATE_PORT=$tp"
else
    notok "quickstart: tollgate not listening on $tp within 60 s"; sed 's/^/  /' "$log"
fi
grep -q "http://127.0.0.1:$tp/mcp" "$log" && grep -q "stand-in on 127.0.0.1:$sp" "$log" &&
    ok "the message names the ports" || notok "the message does not name ports $tp and $sp"
body='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"qs","version":"1"}}}'
r=$(curl -s -m 10 -i "http://127.0.0.1:$tp/mcp" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' -d "$body")
if grep -q '^HTTP/1.1 200' <<<"$r" && grep -qi '^mcp-session-id:' <<<"$r" && grep -q '"serverInfo"' <<<"$r"; then
    ok "initialize through the gateway on $tp"
else
    notok "initialize on $tp: $r"
fi
curl -sf -m 10 "http://127.0.0.1:$ap/healthz" >/dev/null && ok "/healthz on TOLLGATE_ADMIN_PORT=$ap" ||
    notok "no /healthz on $ap"
# The stand-in listens on STANDIN_PORT (the gateway's upstream).
curl -s -m 10 "http://127.0.0.1:$sp/health" >/dev/null && ok "the stand-in on STANDIN_PORT=$sp" ||
    notok "no stand-in on $sp"
kill -TERM -- "-$qs" 2>/dev/null
if until_ok 30 bash -c "! kill -0 $qs"; then ok "quickstart stopped on SIGTERM"; else notok "quickstart still running"; fi

# ---- STANDIN_PORT taken: a loud failure, quickly
python3 -c '
import socket, signal, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen()
print("bound", flush=True); signal.pause()' "$sp" >"$d/blocker.out" &
pids+=($!)
until_ok 10 grep -q bound "$d/blocker.out" || notok "the blocker did not bind $sp"
log=$d/taken.log
TOLLGATE_BIN=$tg TOLLGATE_PORT=$tp TOLLGATE_ADMIN_PORT=$ap STANDIN_PORT=$sp TMPDIR=$d \
    timeout 60 bash "$root/scripts/quickstart.sh" >"$log" 2>&1
rc=$?
if [[ $rc != 0 && $rc != 124 ]]; then ok "STANDIN_PORT taken: exit $rc"; else notok "STANDIN_PORT taken: exit $rc"; fi
for want in "the CoWork OS stand-in could not start on 127.0.0.1:$sp" "EADDRINUSE" "standin.log" "STANDIN_PORT"; do
    grep -qF -- "$want" "$log" && ok "the message has \"$want\"" || { notok "no \"$want\" in:"; sed 's/^/  /' "$log"; }
done
grep -q "tollgate is starting" "$log" && notok "tollgate was started anyway" || ok "tollgate was not started"

# ---- a bad port value
TOLLGATE_BIN=$tg TOLLGATE_PORT=http STANDIN_PORT=$sp TMPDIR=$d bash "$root/scripts/quickstart.sh" >"$log" 2>&1
rc=$?
[[ $rc != 0 ]] && grep -qF "TOLLGATE_PORT=http is not a port" "$log" && ok "TOLLGATE_PORT=http refused" ||
    { notok "TOLLGATE_PORT=http: exit $rc"; sed 's/^/  /' "$log"; }

echo "$fails failures"
((fails == 0))
