#!/usr/bin/env bash
# Where a proxied operation's cost goes, nginx against tollgate (loopback only, bounded time):
# system calls per tools/call and per relayed stream message (strace -c on the proxy), and
# user and system CPU per operation (/proc/PID/stat, in a run without strace).
#
#   test/bench/syscalls.sh [TARGET...]     TARGET: calls-nginx calls-tollgate calls-tollgate-plain
#                                                  sse-nginx sse-tollgate ws-tollgate legacy-tollgate
#                                                  (default: all)
#
# Setup as bench.sh's rows "calls", "sse" and "ws" (same fixture, same nginx locations, same
# tollgate confs): tools/call with wrk + call.lua on SYS_CONNS connections (the seed-shaped
# policy and the audit log on, for calls-tollgate; the allow-all policy without audit for
# calls-tollgate-plain), and tg-bench-streams calling the stream tool
# (200 progress events + the result per call) on SYS_SCONNS sessions.
#
# Per target, three runs:
#   strace    strace -c -f -p PID over a wrk run of SYS_DURATION s (calls), or over exactly
#             SYS_STREAM_CALLS stream calls (streams, a fixed count): syscalls per operation, in
#             total and by name. strace slows the traced process by several times, so the
#             batching it sees is that of a loaded proxy; the counts still move little between runs.
#   perf      perf stat -e raw_syscalls:sys_enter (and per name) -p PID over the same kind of run
#             (streams: SYS_CPU_CALLS calls): syscalls per operation at full speed, when perf can
#             read tracepoints (root); the batching of an unslowed proxy, so lower than strace's.
#   cpu       the same without any tracer: user and system CPU of the proxy per operation (utime,
#             stime of /proc/PID/stat, ticks of 1/CLK_TCK s). On a shared 2-core machine these move
#             by 10 % or more between runs; only strace's counts are stable.
#
# SYS_PROFILE=1 adds a run under perf record -e cpu-clock (software clock: kernel and user symbols,
# no hardware counters needed) and writes the top symbols to RESULTS.TARGET.profile.txt.
# SYS_CALLGRIND=1 adds nginx's instructions per operation (Ir/op; tollgate's are
# test/perf/callgrind.sh's figures), see cg_nginx below.
#
# Environment: TOLLGATE_BIN, UPSTREAM_BIN, STREAMS_BIN (default BENCH_BUILD/..., BENCH_BUILD
# defaulting to build-rel, as bench.sh), NGINX_BIN,
# SYS_DURATION (3), SYS_CONNS (50), SYS_SCONNS (8), SYS_STREAM_CALLS (200, strace), SYS_CPU_CALLS (3000, perf and cpu), SYS_PERF (1), SYS_TOP (8 names per
# target), SYS_RESULTS (test/bench/results/syscalls.txt), BENCH_KEEP_TMP=1.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=syscalls.sh
# shellcheck source=test/bench/lib.sh
. "$here/lib.sh"
root=$(cd "$here/../.." && pwd)

B=${BENCH_BUILD:-$root/build-rel}
TOLLGATE_BIN=${TOLLGATE_BIN:-$B/tollgate}
UPSTREAM_BIN=${UPSTREAM_BIN:-$B/test/bench/tg-bench-upstream}
STREAMS_BIN=${STREAMS_BIN:-$B/test/bench/tg-bench-streams}
NGINX_BIN=${NGINX_BIN:-$(command -v nginx || echo /usr/sbin/nginx)}
DURATION=${SYS_DURATION:-3}
CONNS=${SYS_CONNS:-50}
SCONNS=${SYS_SCONNS:-8}
SCALLS=${SYS_STREAM_CALLS:-200}
CPU_CALLS=${SYS_CPU_CALLS:-3000}
TOP=${SYS_TOP:-8}
RESULTS=${SYS_RESULTS:-$here/results/syscalls.txt}
EVENTS=200
all_targets="calls-nginx calls-tollgate calls-tollgate-plain sse-nginx sse-tollgate ws-tollgate legacy-tollgate"
targets=${*:-$all_targets}
for t in $targets; do
    [[ " $all_targets " == *" $t "* ]] || die "unknown target '$t' ($all_targets)"
done
for v in DURATION CONNS SCONNS SCALLS CPU_CALLS TOP; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done
need strace "apt-get install strace"
need wrk "apt-get install wrk"
need curl "apt-get install curl"
for b in TOLLGATE_BIN UPSTREAM_BIN STREAMS_BIN NGINX_BIN; do
    [[ -x ${!b} ]] || die "$b (${!b}) not found: build first"
done

# perf stat counts syscalls by tracepoint without slowing the process as strace does (root or
# perf_event_paranoid <= -1 and tracefs; SYS_PERF=0 skips it).
use_perf=0
if [[ ${SYS_PERF:-1} == 1 ]] && command -v perf >/dev/null &&
    perf stat -e raw_syscalls:sys_enter -x, -- true >/dev/null 2>&1; then
    use_perf=1
fi
bench_tmp syscalls
hz=$(getconf CLK_TCK)
ticks() { awk '{sub(/^.*\) /, ""); print $12, $13, $8}' "/proc/$1/stat"; } # utime stime minflt

# ---- upstream, nginx (bench.sh's locations), tollgates (bench.sh's tg-policy and tg-stream) ----
"$UPSTREAM_BIN" 0 --events "$EVENTS" >"$tmp/upstream.out" 2>"$tmp/upstream.err" &
up_pid=$!
pids+=("$up_pid")
upstream_ready() { grep -q '^LISTENING [0-9]' "$tmp/upstream.out"; }
wait_for "fast upstream" "$up_pid" 5 "$tmp/upstream.err" upstream_ready
up_port=$(awk '/^LISTENING/ {print $2; exit}' "$tmp/upstream.out")

ng=$tmp/nginx
mkdir -p "$ng/logs" "$ng/tmp"
ng_port=$(free_port)
loc() {
    printf '        location %s { proxy_pass http://mcp_upstream/mcp; proxy_http_version 1.1;\n' "$1"
    printf '            proxy_set_header Connection ""; %s }\n' "${2:-}"
}
cat >"$ng/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $ng/nginx.pid;
error_log $ng/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 600s;
$(nginx_temp_paths "$ng")
    upstream mcp_upstream {
        server 127.0.0.1:$up_port;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$ng_port;
$(loc /mcp)
$(loc /stream/mcp "proxy_buffering off; proxy_read_timeout 60s;")
    }
}
EOF
"$NGINX_BIN" -e "$ng/logs/error.log" -p "$ng/" -c "$ng/nginx.conf" >"$ng/logs/stdout.log" 2>&1 &
ng_pid=$!
pids+=("$ng_pid")
wait_for nginx "$ng_pid" 5 "$ng/logs/error.log" port_open "$ng_port"

cat >"$tmp/seed.json" <<'EOF'
{"version":"1","default":"deny","tools":{"echo":{"limits":[{"counter":"echo_rate","window":"second","max":100000000,"scope":"grant"}]}}}
EOF
echo '{"version":"1","default":"allow"}' >"$tmp/allow.json"
declare -A tg_pid tg_port
start_tg() { # NAME POLICY AUDIT(0|1)
    local name=$1 d=$tmp/$1 audit_line=""
    mkdir -p "$d"
    (($3)) && audit_line="audit = { file = \"$d/audit.log\"; };"
    cat >"$d/tollgate.conf" <<EOF
log = { level = "info"; format = "logfmt"; };
$audit_line
listen = ( { address = "127.0.0.1"; port = 0; } );
limits = { inflight_per_session = $((CONNS > 64 ? CONNS : 64)); };
grants = ( { name = "bench"; anonymous = true; } );
upstreams = (
  { name = "bench"; url = "http://127.0.0.1:$up_port/mcp"; default = true;
    policy = "$tmp/$2.json"; pool = { size = 64; pipeline = ${SYS_PIPELINE:-16}; }; }
);
EOF
    "$TOLLGATE_BIN" -c "$d/tollgate.conf" >"$d/stdout.log" 2>"$d/stderr.log" &
    tg_pid[$name]=$!
    pids+=("${tg_pid[$name]}")
    tg_ready() {
        tg_port[$name]=$(grep -m1 'msg="listening"' "$d/stderr.log" 2>/dev/null | grep -o ' port=[0-9]*' | cut -d= -f2)
        [[ -n ${tg_port[$name]} ]] && port_open "${tg_port[$name]}"
    }
    wait_for "tollgate $name" "${tg_pid[$name]}" 10 "$d/stderr.log" tg_ready
}
start_tg tg-policy seed 1
start_tg tg-stream allow 0

# shellcheck source=test/bench/bench_drive.sh
. "$here/bench_drive.sh" # mcp_session

# ---- drivers -------------------------------------------------------------------------------
# ops_wrk URL DIR: one wrk run on a fresh session; prints the requests completed.
ops_wrk() {
    local url=$1 d=$2 sid line wrc=0
    mkdir -p "$d"
    sid=$(mcp_session "$url" "$d")
    MCP_ERA=2025 MCP_SESSION_ID=$sid MCP_PROTOCOL_VERSION=$PROTO \
        wrk -t1 -c"$CONNS" -d"${DURATION}s" --timeout 5s -s "$here/call.lua" "$url" >"$d/wrk.out" 2>&1 &
    local w=$!
    pids+=("$w")
    wait "$w" || wrc=$?
    forget_pid "$w"
    ((wrc == 0)) || die "wrk failed: $(tail -n 5 "$d/wrk.out")"
    line=$(grep '^BENCH_RESULT ' "$d/wrk.out") || die "no BENCH_RESULT: $(tail -n 5 "$d/wrk.out")"
    local -A r=()
    local kv
    for kv in ${line#BENCH_RESULT }; do r[${kv%%=*}]=${kv#*=}; done
    local e=$((r[non200] + r[badbody] + r[connect] + r[read] + r[write] + r[timeout]))
    ((e == 0)) || die "$url: $e errors during the run"
    echo "${r[requests]}"
}
# ops_stream MODE URL DIR CALLS: exactly CALLS stream calls; prints the messages received.
ops_stream() {
    local d=$3 crc=0
    mkdir -p "$d"
    "$STREAMS_BIN" --mode "$1" --url "$2" --conns "$SCONNS" --events "$EVENTS" --calls "$4" \
        >"$d/streams.out" 2>&1 &
    local c=$!
    pids+=("$c")
    wait "$c" || crc=$?
    forget_pid "$c"
    ((crc == 0)) || die "tg-bench-streams failed: $(tail -n 3 "$d/streams.out")"
    grep '^RESULT ' "$d/streams.out" | grep -o ' all_messages=[0-9]*' | cut -d= -f2
}
ops() { # KIND URL DIR STREAM_CALLS
    case $1 in
    calls) ops_wrk "$2" "$3" ;;
    post) ops_stream post "$2" "$3" "$4" ;;
    ws) ops_stream ws "$2" "$3" "$4" ;;
    sse) ops_stream sse "$2" "$3" "$4" ;;
    esac
}

declare -A total user sys top ptotal ptop segs faults
# TCP segments sent by the whole machine (/proc/net/snmp OutSegs): client, proxy and upstream on
# loopback, and whatever else runs, so only a rough figure on a shared machine.
out_segs() { awk '$1 == "Tcp:" && $2 ~ /^[0-9]+$/ {print $12; exit}' /proc/net/snmp; }
# perf_names: the syscalls perf counts by name (tracepoints; the total is raw_syscalls:sys_enter).
perf_names="read write readv writev recvfrom sendto recvmsg sendmsg epoll_wait epoll_pwait epoll_ctl getsockopt setsockopt ioctl accept4 close brk timerfd_settime"
measure() { # TARGET KIND URL PID
    local t=$1 d=$tmp/$1 n st_pid
    mkdir -p "$d"
    echo "== $t: strace -c -f -p $4" >&2
    strace -c -f -q -p "$4" -o "$d/strace.txt" 2>"$d/strace.err" &
    st_pid=$!
    pids+=("$st_pid")
    sleep 0.5 # attached: strace prints nothing when it is, so give it a moment
    n=$(ops "$2" "$3" "$d/strace-run" "$SCALLS")
    kill -INT "$st_pid"
    wait "$st_pid" 2>/dev/null || true
    forget_pid "$st_pid"
    [[ -s $d/strace.txt ]] || die "$t: strace wrote nothing: $(cat "$d/strace.err")"
    # Rows: % time, seconds, usecs/call, calls, [errors], syscall.
    total[$t]=$(awk -v n="$n" '/^ *[0-9.]+ / && $NF != "total" {c += $4} END {printf "%.3f", c / n}' "$d/strace.txt")
    top[$t]=$(awk -v n="$n" '/^ *[0-9.]+ / && $NF != "total" {printf "%s %.3f\n", $NF, $4 / n}' "$d/strace.txt" |
        sort -k2,2gr | head -n "$TOP" | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}')
    echo "   $n operations, ${total[$t]} syscalls each: ${top[$t]}" >&2
    if ((use_perf)); then
        echo "== $t: perf stat -e raw_syscalls:sys_enter -p $4" >&2
        local ev="-e raw_syscalls:sys_enter" s p_pid
        for s in $perf_names; do ev+=" -e syscalls:sys_enter_$s"; done
        # shellcheck disable=SC2086
        perf stat -x, $ev -p "$4" -o "$d/perf.txt" 2>"$d/perf.err" &
        p_pid=$!
        pids+=("$p_pid")
        sleep 0.5
        n=$(ops "$2" "$3" "$d/perf-run" "$CPU_CALLS")
        kill -INT "$p_pid"
        wait "$p_pid" 2>/dev/null || true
        forget_pid "$p_pid"
        ptotal[$t]=$(awk -F, -v n="$n" '$3 == "raw_syscalls:sys_enter" {printf "%.3f", $1 / n}' "$d/perf.txt")
        ptop[$t]=$(awk -F, -v n="$n" '$3 ~ /^syscalls:sys_enter_/ && $1 > 0 {sub(/^syscalls:sys_enter_/, "", $3); printf "%s %.3f\n", $3, $1 / n}' "$d/perf.txt" |
            sort -k2,2gr | head -n "$TOP" | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}')
        echo "   $n operations, ${ptotal[$t]} syscalls each: ${ptop[$t]}" >&2
    fi
    if [[ ${SYS_TRACE:-0} == 1 ]]; then
        # Every syscall of a few operations, with sizes: which ones repeat per operation.
        echo "== $t: strace -f -tt -p $4 (SYS_TRACE)" >&2
        local tr_pid
        strace -f -q -tt -e trace=read,write,writev,readv,recvfrom,sendto,epoll_wait,epoll_ctl,getsockopt,setsockopt \
            -e abbrev=all -s 0 -p "$4" -o "$d/trace.txt" 2>"$d/trace.err" &
        tr_pid=$!
        pids+=("$tr_pid")
        sleep 0.5
        if [[ $2 == calls ]]; then
            curl -sS -o /dev/null --max-time 5 -X POST "$3" -H 'Content-Type: application/json' \
                -H 'Accept: application/json, text/event-stream' \
                --data-binary '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"'"$PROTO"'","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}' || true
        else
            ops_stream "${2/post/post}" "$3" "$d/trace-run" 3 >/dev/null
        fi
        kill -INT "$tr_pid"
        wait "$tr_pid" 2>/dev/null || true
        forget_pid "$tr_pid"
        mkdir -p "$(dirname "$RESULTS")"
        cp "$d/trace.txt" "${RESULTS%.txt}.$t.trace.txt"
        echo "   trace: ${RESULTS%.txt}.$t.trace.txt" >&2
    fi
    if [[ ${SYS_PROFILE:-0} == 1 ]]; then
        # Where the CPU goes, kernel included: perf's software clock (no hardware counters needed).
        echo "== $t: perf record -e cpu-clock -p $4" >&2
        local r_pid
        perf record -q -e cpu-clock -F 2999 -p "$4" -o "$d/perf.data" >/dev/null 2>"$d/record.err" &
        r_pid=$!
        pids+=("$r_pid")
        sleep 0.5
        n=$(ops "$2" "$3" "$d/profile-run" "$CPU_CALLS")
        kill -INT "$r_pid"
        wait "$r_pid" 2>/dev/null || true
        forget_pid "$r_pid"
        perf report -i "$d/perf.data" --no-children --sort dso,sym --stdio 2>/dev/null |
            grep -v '^#' | grep . | head -n 25 >"$d/profile.txt" || true
        mkdir -p "$(dirname "$RESULTS")"
        cp "$d/profile.txt" "${RESULTS%.txt}.$t.profile.txt"
        echo "   profile: ${RESULTS%.txt}.$t.profile.txt" >&2
    fi
    echo "== $t: CPU from /proc/$4/stat" >&2
    local a b s0 s1
    s0=$(out_segs)
    a=$(ticks "$4")
    n=$(ops "$2" "$3" "$d/cpu-run" "$CPU_CALLS")
    b=$(ticks "$4")
    s1=$(out_segs)

    segs[$t]=$(awk -v a="$s0" -v b="$s1" -v n="$n" 'BEGIN {printf "%.2f", (b - a) / n}')
    faults[$t]=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN {split(a, x); split(b, y); printf "%.3f", (y[3] - x[3]) / n}')
    user[$t]=$(awk -v a="$a" -v b="$b" -v n="$n" -v h="$hz" 'BEGIN {split(a, x); split(b, y); printf "%.3f", (y[1] - x[1]) / h * 1e6 / n}')
    sys[$t]=$(awk -v a="$a" -v b="$b" -v n="$n" -v h="$hz" 'BEGIN {split(a, x); split(b, y); printf "%.3f", (y[2] - x[2]) / h * 1e6 / n}')
    echo "   $n operations, user ${user[$t]} us, system ${sys[$t]} us each" >&2
}

# ---- nginx's instructions per operation (SYS_CALLGRIND=1): the figure test/perf/callgrind.sh gives
# for tollgate, taken the same way: a fresh nginx (this conf) under valgrind --tool=callgrind,
# tg-bench-streams making a fixed number of calls one at a time on 4 sessions, twice (CG_N and
# 3 x CG_N calls), the slope (Ir_long - Ir_short) / (ops_long - ops_short).
declare -A cg_ir
cg_nginx_run() { # MODE PATH CALLS -> "Ir ops"
    local d=$tmp/cg-$1-$3 port
    mkdir -p "$d/logs" "$d/tmp"
    port=$(free_port)
    sed -e "s|listen 127.0.0.1:$ng_port;|listen 127.0.0.1:$port;|" -e "s|$ng/|$d/|g" "$ng/nginx.conf" >"$d/nginx.conf"
    valgrind --tool=callgrind --callgrind-out-file="$d/callgrind.out" \
        "$NGINX_BIN" -e "$d/logs/error.log" -p "$d/" -c "$d/nginx.conf" >"$d/valgrind.log" 2>&1 &
    local p=$!
    pids+=("$p")
    wait_for "nginx under callgrind" "$p" 60 "$d/valgrind.log" port_open "$port"
    local ev=() mode=$1
    [[ $mode == call ]] || ev=(--events "$EVENTS")
    timeout 300 "$STREAMS_BIN" --mode "$mode" --url "http://127.0.0.1:$port$2" --conns 4 --calls "$3" "${ev[@]}" \
        >"$d/client.out" 2>&1 || die "callgrind client failed: $(tail -n 3 "$d/client.out")"
    kill -QUIT "$p"
    wait "$p" 2>/dev/null || true
    forget_pid "$p"
    local n
    if [[ $mode == call ]]; then n=$3; else n=$(grep -o 'all_messages=[0-9]*' "$d/client.out" | cut -d= -f2); fi
    echo "$(awk '/^summary:/ {print $2; exit}' "$d/callgrind.out") $n"
}
cg_nginx() { # TARGET MODE PATH
    local n=${CG_N:-300} a b
    [[ $2 == call ]] || n=$((n / 10))
    a=$(cg_nginx_run "$2" "$3" "$n")
    b=$(cg_nginx_run "$2" "$3" $((3 * n)))
    cg_ir[$1]=$(awk -v a="$a" -v b="$b" 'BEGIN {split(a, x); split(b, y); printf "%.0f", (y[1] - x[1]) / (y[2] - x[2])}')
    echo "== $1: callgrind ${cg_ir[$1]} Ir per operation" >&2
}
if [[ ${SYS_CALLGRIND:-0} == 1 ]]; then
    need valgrind "apt-get install valgrind"
    [[ " $targets " != *" calls-nginx "* ]] || cg_nginx calls-nginx call /mcp
    [[ " $targets " != *" sse-nginx "* ]] || cg_nginx sse-nginx post /stream/mcp
fi

ngu=http://127.0.0.1:$ng_port
for t in $targets; do
    case $t in
    calls-nginx) measure "$t" calls "$ngu/mcp" "$ng_pid" ;;
    calls-tollgate) measure "$t" calls "http://127.0.0.1:${tg_port[tg-policy]}/mcp" "${tg_pid[tg-policy]}" ;;
    calls-tollgate-plain) measure "$t" calls "http://127.0.0.1:${tg_port[tg-stream]}/mcp" "${tg_pid[tg-stream]}" ;;
    sse-nginx) measure "$t" post "$ngu/stream/mcp" "$ng_pid" ;;
    sse-tollgate) measure "$t" post "http://127.0.0.1:${tg_port[tg-stream]}/bench/mcp" "${tg_pid[tg-stream]}" ;;
    ws-tollgate) measure "$t" ws "http://127.0.0.1:${tg_port[tg-stream]}/bench/ws" "${tg_pid[tg-stream]}" ;;
    legacy-tollgate) measure "$t" sse "http://127.0.0.1:${tg_port[tg-stream]}/bench/sse" "${tg_pid[tg-stream]}" ;;
    esac
done

mkdir -p "$(dirname "$RESULTS")"
{
    echo "# syscalls and CPU per operation $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -sr), $(nproc) cores, tree $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "# calls: wrk -c$CONNS ${DURATION}s, tools/call; streams: $SCALLS calls x ($EVENTS events + result) on $SCONNS sessions"
    echo "# operation = a tools/call (calls-*) or a message the client received (streams)"
    printf '%-21s %9s %9s %9s %9s %9s %10s %8s %9s\n' target 'strace/op' 'perf/op' 'user us' 'sys us' 'CPU us' 'Ir/op' \
        'segs/op' 'faults/op'
    for t in $targets; do
        printf '%-21s %9s %9s %9s %9s %9s %10s %8s %9s\n' "$t" "${total[$t]}" "${ptotal[$t]:--}" "${user[$t]}" "${sys[$t]}" \
            "$(awk -v u="${user[$t]}" -v s="${sys[$t]}" 'BEGIN {printf "%.3f", u + s}')" "${cg_ir[$t]:--}" "${segs[$t]}" \
            "${faults[$t]}"
    done
    echo "# syscalls per op by name, strace -c (the process slowed by tracing):"
    for t in $targets; do printf '#   %-21s %s\n' "$t" "${top[$t]}"; done
    if ((use_perf)); then
        echo "# syscalls per op by name, perf stat (not slowed; only the names counted: $perf_names):"
        for t in $targets; do printf '#   %-21s %s\n' "$t" "${ptop[$t]}"; done
    fi
    echo "# faults/op: minor page faults of the proxy per op (minflt of /proc/PID/stat), in the cpu run"
    echo "# segs/op: TCP segments the whole machine sent per op during the cpu run (client, proxy, upstream)"
    echo "# CPU columns: one run each, without strace, on a shared machine: +-10 % or more between runs"
} | tee "$RESULTS"
