#!/usr/bin/env bash
# tollgate stream relay benchmark: streamed MCP messages per second reaching a
# client, through tollgate's three client transports, compared in the same run
# with nginx proxying the same upstream SSE stream. Loopback only, bounded time.
#
#   test/bench/streams.sh [TARGET...]
#
# TARGET (default: all, in this order):
#   direct         tg-bench-streams → tg-bench-upstream (the ceiling of client + upstream)
#   nginx          → nginx (proxy_buffering off, keepalive pool) → upstream, POST answered with SSE
#   tollgate-post  → tollgate /bench/mcp, Streamable HTTP: POST answered with SSE
#   tollgate-sse   → tollgate /bench/sse, legacy HTTP+SSE: answers are "message" events on the GET stream
#   tollgate-ws    → tollgate /bench/ws, WebSocket: one text frame per message
#
# Every session calls the upstream's tool "stream" in a loop, one call at a time;
# each call is answered with STREAMS_EVENTS notifications/progress and the result.
# The WebSocket figure is compared with nginx proxying the same SSE stream: nginx
# has no MCP-over-WebSocket to offer, and once upgraded it would tunnel bytes
# exactly as it does here with proxy_buffering off.
#
# Environment (all optional):
#   TOLLGATE_BIN        (default build/tollgate)
#   UPSTREAM_BIN        (default build/test/bench/tg-bench-upstream)
#   STREAMS_BIN         (default build/test/bench/tg-bench-streams)
#   NGINX_BIN           (default nginx on PATH, then /usr/sbin/nginx)
#   STREAMS_DURATION    measured seconds per target (default 10)
#   STREAMS_WARMUP      seconds before measuring (default 2)
#   STREAMS_CONNS       concurrent sessions/streams (default 8)
#   STREAMS_EVENTS      progress notifications per call (default 1000)
#   STREAMS_PAD         extra bytes in each progress notification (default 0: ~130-byte events)
#   STREAMS_RESULTS     results file (default test/bench/results/streams.txt)
#   BENCH_KEEP_TMP      1 = keep the temp dir (configs, logs) after the run
#
# Builds nothing: run `cmake --build build` first (a Release build is what to measure).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

TOLLGATE_BIN=${TOLLGATE_BIN:-$root/build/tollgate}
UPSTREAM_BIN=${UPSTREAM_BIN:-$root/build/test/bench/tg-bench-upstream}
STREAMS_BIN=${STREAMS_BIN:-$root/build/test/bench/tg-bench-streams}
NGINX_BIN=${NGINX_BIN:-$(command -v nginx || echo /usr/sbin/nginx)}
DURATION=${STREAMS_DURATION:-10}
WARMUP=${STREAMS_WARMUP:-2}
CONNS=${STREAMS_CONNS:-8}
EVENTS=${STREAMS_EVENTS:-1000}
PAD=${STREAMS_PAD:-0}
RESULTS=${STREAMS_RESULTS:-$here/results/streams.txt}
all_targets="direct nginx tollgate-post tollgate-sse tollgate-ws"
targets=${*:-$all_targets}

die() { echo "streams.sh: $*" >&2; exit 1; }

for t in $targets; do
    [[ " $all_targets " == *" $t "* ]] || die "unknown target '$t' ($all_targets)"
done
for v in DURATION CONNS EVENTS; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "STREAMS_$v must be a positive integer"
done
[[ $WARMUP =~ ^[0-9]+$ ]] || die "STREAMS_WARMUP must be an integer"
[[ $PAD =~ ^[0-9]+$ ]] || die "STREAMS_PAD must be an integer"
[[ -x $UPSTREAM_BIN ]] || die "$UPSTREAM_BIN not found: run cmake --build build"
[[ -x $STREAMS_BIN ]] || die "$STREAMS_BIN not found: run cmake --build build"
want() { [[ " $targets " == *" $1 "* ]]; }
if want nginx; then
    [[ -x $NGINX_BIN ]] || die "nginx not found (apt-get install nginx-light)"
fi
if want tollgate-post || want tollgate-sse || want tollgate-ws; then
    [[ -x $TOLLGATE_BIN ]] || die "$TOLLGATE_BIN not found: run cmake --build build"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-streams.XXXXXX")
pids=()

# Stops every process this script started (by pid, never by name), then
# removes the temp dir. Runs on any exit, including failures and ^C.
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local p
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        local tries=40
        while ((tries-- > 0)) && kill -0 "$p" 2>/dev/null; do
            sleep 0.05
        done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [[ $rc -ne 0 || ${BENCH_KEEP_TMP:-0} == 1 ]]; then
        echo "streams.sh: logs and configs kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

forget_pid() {
    local keep=() p
    for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    pids=("${keep[@]}")
}

wait_for() {
    local what=$1 pid=$2 secs=$3 log=$4
    shift 4
    local deadline=$((SECONDS + secs))
    until "$@"; do
        kill -0 "$pid" 2>/dev/null || die "$what exited during startup; $log says:
$(tail -n 20 "$log" 2>/dev/null)"
        ((SECONDS < deadline)) || die "$what not ready after ${secs}s; $log says:
$(tail -n 20 "$log" 2>/dev/null)"
        sleep 0.05
    done
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# CPU seconds (user, system) a process has used, from /proc/PID/stat.
cpu_of() {
    local tck
    tck=$(getconf CLK_TCK)
    awk -v t="$tck" '{sub(/^.*\) /, ""); printf "%.2f %.2f\n", $12 / t, $13 / t}' "/proc/$1/stat"
}

# write(2)-family calls a process has made (syscw of /proc/PID/io).
writes_of() { awk '/^syscw:/ {print $2}' "/proc/$1/io"; }

# ---- fast upstream ---------------------------------------------------------------
"$UPSTREAM_BIN" 0 --events "$EVENTS" >"$tmp/upstream.out" 2>"$tmp/upstream.err" &
up_pid=$!
pids+=("$up_pid")
upstream_ready() { grep -q '^LISTENING [0-9]' "$tmp/upstream.out"; }
wait_for "fast upstream" "$up_pid" 5 "$tmp/upstream.err" upstream_ready
up_port=$(awk '/^LISTENING/ {print $2; exit}' "$tmp/upstream.out")

# ---- nginx -------------------------------------------------------------------------
nginx_pid=""
start_nginx() {
    local d=$tmp/nginx
    mkdir -p "$d/logs" "$d/tmp"
    nginx_port=$(free_port)
    cat >"$d/nginx.conf" <<EOF
# Generated by test/bench/streams.sh: the reference proxy for SSE answers.
daemon off;
master_process off;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    upstream mcp_upstream {
        server 127.0.0.1:$up_port;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$nginx_port;
        location /mcp {
            proxy_pass http://mcp_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            # Relay each event as it arrives, as an SSE-aware setup must.
            proxy_buffering off;
            proxy_read_timeout 60s;
        }
    }
}
EOF
    "$NGINX_BIN" -e "$d/logs/error.log" -p "$d/" -c "$d/nginx.conf" >"$d/logs/stdout.log" 2>&1 &
    nginx_pid=$!
    pids+=("$nginx_pid")
    wait_for nginx "$nginx_pid" 5 "$d/logs/error.log" port_open "$nginx_port"
}

# ---- tollgate ------------------------------------------------------------------------
tg_pid=""
start_tollgate() {
    local d=$tmp/tollgate
    mkdir -p "$d"
    echo '{"version":"1","default":"allow"}' >"$d/allow.json"
    cat >"$d/tollgate.conf" <<EOF
# Generated by test/bench/streams.sh.
log = { level = "info"; format = "logfmt"; };
listen = ( { address = "127.0.0.1"; port = 0; } );
limits = { inflight_per_session = 64; };
grants = ( { name = "bench"; anonymous = true; } );
upstreams = (
  { name = "bench"; url = "http://127.0.0.1:$up_port/mcp"; default = true;
    policy = "$d/allow.json";
    pool = { size = 64; }; }
);
EOF
    "$TOLLGATE_BIN" -c "$d/tollgate.conf" >"$d/stdout.log" 2>"$d/stderr.log" &
    tg_pid=$!
    pids+=("$tg_pid")
    tg_ready() {
        tg_port=$(grep -m1 'msg="listening"' "$d/stderr.log" 2>/dev/null | grep -o 'port=[0-9]*' | head -n1 | cut -d= -f2)
        [[ -n $tg_port ]] && port_open "$tg_port"
    }
    wait_for tollgate "$tg_pid" 10 "$d/stderr.log" tg_ready
}

# ---- one target ----------------------------------------------------------------------
declare -A rate mibs calls cpu what wpm
run_target() {
    local name=$1 mode=$2 url=$3 proxy_pid=$4
    local out=$tmp/$name.out
    echo "== $name: $mode $url (${CONNS} streams, ${WARMUP}s warmup + ${DURATION}s, $EVENTS events per call)" >&2
    local before after w0 w1
    before=$(cpu_of "$proxy_pid")
    w0=$(writes_of "$proxy_pid")
    "$STREAMS_BIN" --mode "$mode" --url "$url" --conns "$CONNS" --duration "$DURATION" \
        --warmup "$WARMUP" --events "$EVENTS" --pad "$PAD" >"$out" 2>&1 &
    local cpid=$! crc=0
    pids+=("$cpid")
    wait "$cpid" || crc=$?
    forget_pid "$cpid"
    after=$(cpu_of "$proxy_pid")
    w1=$(writes_of "$proxy_pid")
    sed 's/^/   /' "$out" >&2
    ((crc == 0)) || die "$name: tg-bench-streams failed (exit $crc): $(tail -n 3 "$out")"
    local line
    line=$(grep '^RESULT ' "$out") || die "$name: no RESULT line"
    local -A r=()
    local kv
    for kv in ${line#RESULT }; do r[${kv%%=*}]=${kv#*=}; done
    rate[$name]=${r[messages_per_s]}
    mibs[$name]=${r[mib_per_s]}
    calls[$name]=${r[calls]}
    # Writes by the proxy (the upstream for direct) per message the client received.
    wpm[$name]=$(awk -v w=$((w1 - w0)) -v m="${r[all_messages]}" 'BEGIN {printf "%.3f", (m > 0 ? w / m : 0)}')
    # CPU of the proxy (or, for direct, the upstream) over warmup + measurement.
    cpu[$name]=$(awk -v b="$before" -v a="$after" -v s="$((DURATION + WARMUP))" 'BEGIN {
        split(b, x, " "); split(a, y, " ");
        printf "%3.0f%% (%2.0f%% sys)", 100 * (y[1] + y[2] - x[1] - x[2]) / s, 100 * (y[2] - x[2]) / s }')
}

what[direct]="SSE answer to POST, no proxy"
what[nginx]="SSE answer to POST via nginx"
what[tollgate-post]="Streamable HTTP (POST -> SSE)"
what[tollgate-sse]="legacy SSE (message events)"
what[tollgate-ws]="WebSocket (text frames)"

for t in $targets; do
    case $t in
    direct) run_target direct post "http://127.0.0.1:$up_port/mcp" "$up_pid" ;;
    nginx)
        [[ -n $nginx_pid ]] || start_nginx
        run_target nginx post "http://127.0.0.1:$nginx_port/mcp" "$nginx_pid" ;;
    tollgate-post)
        [[ -n $tg_pid ]] || start_tollgate
        run_target tollgate-post post "http://127.0.0.1:$tg_port/bench/mcp" "$tg_pid" ;;
    tollgate-sse)
        [[ -n $tg_pid ]] || start_tollgate
        run_target tollgate-sse sse "http://127.0.0.1:$tg_port/bench/sse" "$tg_pid" ;;
    tollgate-ws)
        [[ -n $tg_pid ]] || start_tollgate
        run_target tollgate-ws ws "http://127.0.0.1:$tg_port/bench/ws" "$tg_pid" ;;
    esac
done
if [[ -n $tg_pid ]] && grep -q 'level=\(warn\|error\)' "$tmp/tollgate/stderr.log"; then
    echo "streams.sh: tollgate logged warnings:" >&2
    grep 'level=\(warn\|error\)' "$tmp/tollgate/stderr.log" | head -n 5 >&2
fi

# ---- report ----------------------------------------------------------------------------
# The size of a typical progress event as the upstream writes it.
pad_json=""
((PAD == 0)) || pad_json=",\"message\":\"$(head -c "$PAD" /dev/zero | tr '\0' x)\""
sample="event: message
data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":\"s3-42\",\"progress\":$((EVENTS / 2)),\"total\":$EVENTS$pad_json}}

"
event_bytes=${#sample}
mkdir -p "$(dirname "$RESULTS")"
{
    echo "# tollgate stream relay $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -sr), $(nproc) cores"
    echo "# $CONNS concurrent streams, ${DURATION}s measured after ${WARMUP}s warmup per target;"
    echo "# each call: $EVENTS notifications/progress + the result (~$event_bytes-byte events upstream)"
    printf '%-14s %-30s %12s %9s %7s %16s %10s %9s\n' target transport 'messages/s' 'MiB/s' calls 'proxy CPU' \
        'writes/msg' 'vs nginx'
    for t in $targets; do
        ratio="-"
        if [[ -n ${rate[nginx]:-} ]]; then
            ratio=$(awk -v a="${rate[$t]}" -v b="${rate[nginx]}" 'BEGIN {printf "%.3f", a / b}')
        fi
        printf '%-14s %-30s %12.0f %9s %7s %16s %10s %9s\n' "$t" "${what[$t]}" "${rate[$t]}" "${mibs[$t]}" \
            "${calls[$t]}" "${cpu[$t]}" "${wpm[$t]}" "$ratio"
    done
    if [[ -n ${rate[nginx]:-} ]]; then
        for t in tollgate-post tollgate-sse tollgate-ws; do
            [[ -n ${rate[$t]:-} ]] || continue
            awk -v a="${rate[$t]}" -v b="${rate[nginx]}" -v t="$t" \
                'BEGIN {printf "%s/nginx messages/s ratio: %.3f\n", t, a / b}'
        done
    fi
    echo "# proxy CPU: share of one core used by the proxy (the upstream for direct) over warmup + measurement;"
    echo "# writes/msg: write(2)-family calls of that process per message the client received"
    echo "# tollgate-ws is compared with nginx relaying the same messages as an SSE stream"
} | tee "$RESULTS"
