#!/usr/bin/env bash
# tollgate benchmark: MCP tools/call throughput and latency through tollgate,
# compared in the same run with the bare upstream and with nginx as a plain
# reverse proxy in front of the same upstream. Loopback only, bounded time.
#
#   test/bench/run.sh [TARGET...]        TARGET: direct nginx tollgate tollgate-policy
#
# tollgate-policy is tollgate with the seed policy's shape (default deny, the called tool
# under a token bucket) and the audit log on: the cost of deciding every call.
#
# Environment (all optional):
#   TOLLGATE_BIN         tollgate binary        (default build/tollgate)
#   UPSTREAM_BIN         tg-bench-upstream      (default build/test/bench/tg-bench-upstream)
#   NGINX_BIN            nginx                  (default: nginx on PATH, then /usr/sbin/nginx)
#   BENCH_TARGETS        targets to run         (default "direct nginx tollgate"; args win)
#   BENCH_SKIP_TOLLGATE  1 = drop the tollgate target
#   BENCH_DURATION       seconds per target     (default 10)
#   BENCH_CONNS          wrk connections        (default 50)
#   BENCH_THREADS        wrk threads            (default 1)
#   BENCH_IDS            unique | fixed         (default unique; see call.lua)
#   BENCH_RESULTS        results file           (default test/bench/results/last.txt)
#   BENCH_KEEP_TMP       1 = keep the temp dir (configs, logs) after the run
#
# Builds nothing: run `cmake --build build` first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

TOLLGATE_BIN=${TOLLGATE_BIN:-$root/build/tollgate}
UPSTREAM_BIN=${UPSTREAM_BIN:-$root/build/test/bench/tg-bench-upstream}
NGINX_BIN=${NGINX_BIN:-$(command -v nginx || echo /usr/sbin/nginx)}
DURATION=${BENCH_DURATION:-10}
CONNS=${BENCH_CONNS:-50}
THREADS=${BENCH_THREADS:-1}
RESULTS=${BENCH_RESULTS:-$here/results/last.txt}
PROTO=2025-06-18
export BENCH_IDS=${BENCH_IDS:-unique}

if [[ $# -gt 0 ]]; then
    targets="$*"
else
    targets=${BENCH_TARGETS:-direct nginx tollgate tollgate-policy}
fi
if [[ ${BENCH_SKIP_TOLLGATE:-0} == 1 ]]; then
    targets=$(tr ' ' '\n' <<<"$targets" | grep -vx 'tollgate\|tollgate-policy' | tr '\n' ' ' || true)
fi

die() { echo "run.sh: $*" >&2; exit 1; }

for t in $targets; do
    case $t in direct|nginx|tollgate|tollgate-policy) ;; *) die "unknown target '$t' (direct nginx tollgate tollgate-policy)";; esac
done
[[ -n ${targets// /} ]] || die "no targets selected"
[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "BENCH_DURATION must be a positive integer"
[[ $CONNS =~ ^[0-9]+$ && $CONNS -gt 0 ]] || die "BENCH_CONNS must be a positive integer"
[[ $THREADS =~ ^[0-9]+$ && $THREADS -gt 0 && $THREADS -le $CONNS ]] || die "BENCH_THREADS must be 1..BENCH_CONNS"
[[ $BENCH_IDS == unique || $BENCH_IDS == fixed ]] || die "BENCH_IDS must be unique or fixed"

need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found ($2)"; }
need wrk "apt-get install wrk"
need curl "apt-get install curl"
[[ -x $UPSTREAM_BIN ]] || die "$UPSTREAM_BIN not found: run cmake --build build"
want() { [[ " $targets " == *" $1 "* ]]; }
if want nginx; then
    [[ -x $NGINX_BIN ]] || die "nginx not found (apt-get install nginx-light)"
fi
if want tollgate || want tollgate-policy; then
    [[ -x $TOLLGATE_BIN ]] || die "$TOLLGATE_BIN not found: run cmake --build build (or BENCH_SKIP_TOLLGATE=1)"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-bench.XXXXXX")
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
        echo "run.sh: logs and configs kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Drops a reaped pid from the cleanup list, so cleanup never signals a pid
# the kernel may have reused.
forget_pid() {
    local keep=() p
    for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    pids=("${keep[@]}")
}

# Waits (bounded) until "$@" succeeds; fails early if process $pid died,
# showing the end of its log.
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

# Asks the kernel for a free loopback port. The port is released before the
# server binds it, which is racy in theory and fine on a benchmark machine.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---- fast upstream -----------------------------------------------------------
"$UPSTREAM_BIN" 0 >"$tmp/upstream.out" 2>"$tmp/upstream.err" &
up_pid=$!
pids+=("$up_pid")
upstream_ready() { grep -q '^LISTENING [0-9]' "$tmp/upstream.out"; }
wait_for "fast upstream" "$up_pid" 5 "$tmp/upstream.err" upstream_ready
up_port=$(awk '/^LISTENING/ {print $2; exit}' "$tmp/upstream.out")

# ---- nginx -------------------------------------------------------------------
start_nginx() {
    local d=$tmp/nginx
    mkdir -p "$d/logs" "$d/tmp"
    nginx_port=$(free_port)
    cat >"$d/nginx.conf" <<EOF
# Generated by test/bench/run.sh: the reference proxy.
daemon off;
master_process off;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/logs/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
    upstream mcp_upstream {
        server 127.0.0.1:$up_port;
        keepalive 64;
    }
    server {
        listen 127.0.0.1:$nginx_port;
        location /mcp {
            proxy_pass http://mcp_upstream;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
    "$NGINX_BIN" -e "$d/logs/error.log" -p "$d/" -c "$d/nginx.conf" \
        >"$d/logs/stdout.log" 2>&1 &
    nginx_pid=$!
    pids+=("$nginx_pid")
    wait_for nginx "$nginx_pid" 5 "$d/logs/error.log" port_open "$nginx_port"
}

# ---- tollgate ----------------------------------------------------------------
tollgate_port_from_log() {
    # logfmt: ... msg="listening" ... port=NNNN
    grep -m1 'msg="listening"' "$tmp/$tg_name/stderr.log" 2>/dev/null |
        grep -o 'port=[0-9]*' | head -n1 | cut -d= -f2
}
tollgate_port_from_ss() {
    # Fallback when the listening line is below the configured log level.
    ss -Hltnp 2>/dev/null | grep "pid=$tg_pid," | awk '{print $4}' |
        sed -n 's/^127\.0\.0\.1:\([0-9]*\)$/\1/p' | head -n1
}
tollgate_ready() {
    tg_port=$(tollgate_port_from_log)
    if [[ -z $tg_port ]] && command -v ss >/dev/null; then
        tg_port=$(tollgate_port_from_ss)
    fi
    [[ -n $tg_port ]] && port_open "$tg_port"
}
write_tollgate_conf() {
    local d=$1 policy_line=$2 audit_line=${3:-}
    local inflight=$((CONNS > 64 ? CONNS : 64))
    cat >"$d/tollgate.conf" <<EOF
# Generated by test/bench/run.sh.
log = { level = "warn"; format = "logfmt"; };
$audit_line
listen = ( { address = "127.0.0.1"; port = 0; } );
limits = { inflight_per_session = $inflight; };
grants = ( { name = "bench"; anonymous = true; } );
upstreams = (
  { name = "bench"; url = "http://127.0.0.1:$up_port/mcp"; default = true;
    $policy_line
    pool = { size = 64; }; }
);
EOF
}
tg_note=""
start_tollgate() {
    tg_name=${1:-tollgate}
    local d=$tmp/$tg_name
    mkdir -p "$d"
    # Without a policy tollgate fails closed (every tool denied); the benchmark
    # wants the policy engine in the path, allowing the call.
    cat >"$d/allow.json" <<'EOF'
{"version":"1","default":"allow"}
EOF
    local audit_line=""
    if [[ $tg_name == tollgate-policy ]]; then
        # The seed policy's shape: default deny, the called tool under a token bucket
        # (large enough never to refuse the benchmark), and the audit log on.
        cat >"$d/allow.json" <<'EOF'
{"version":"1","default":"deny","tools":{"echo":{"limits":[{"counter":"echo_rate","window":"second","max":100000000,"scope":"grant"}]}}}
EOF
        audit_line="audit = { file = \"$d/audit.log\"; };"
    fi
    write_tollgate_conf "$d" "policy = \"$d/allow.json\";" "$audit_line"
    # A tollgate built before upstream policies exist rejects the directive;
    # measure it anyway, without a policy, and say so in the results.
    local check
    if ! check=$(timeout 10 "$TOLLGATE_BIN" -t -c "$d/tollgate.conf" 2>&1) &&
        grep -q '\.policy: unknown directive' <<<"$check"; then
        write_tollgate_conf "$d" ""
        tg_note="tollgate ran WITHOUT a policy: this build rejects upstreams.policy"
        echo "run.sh: warning: $tg_note" >&2
    fi
    "$TOLLGATE_BIN" -c "$d/tollgate.conf" >"$d/stdout.log" 2>"$d/stderr.log" &
    tg_pid=$!
    pids+=("$tg_pid")
    wait_for tollgate "$tg_pid" 10 "$d/stderr.log" tollgate_ready
}

# ---- one target ------------------------------------------------------------------
# MCP handshake (initialize + notifications/initialized), then wrk.
declare -A rps p50 p99 errs
run_target() {
    local name=$1 url=$2 d=$tmp/$1
    mkdir -p "$d"
    local code
    code=$(curl -sS -o "$d/init.body" -D "$d/init.headers" -w '%{http_code}' \
        --max-time 10 -X POST "$url" \
        -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' \
        --data-binary '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"'"$PROTO"'","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}') ||
        die "$name: initialize failed (curl)"
    [[ $code == 200 ]] || die "$name: initialize returned HTTP $code: $(head -c 300 "$d/init.body")"
    grep -q '"result"' "$d/init.body" ||
        die "$name: initialize did not succeed: $(head -c 300 "$d/init.body")"
    local sid
    sid=$(tr -d '\r' <"$d/init.headers" | awk -F': *' 'tolower($1)=="mcp-session-id" {print $2; exit}')
    [[ -n $sid ]] || die "$name: initialize reply has no Mcp-Session-Id header"

    code=$(curl -sS -o "$d/initialized.body" -w '%{http_code}' --max-time 10 -X POST "$url" \
        -H 'Content-Type: application/json' \
        -H 'Accept: application/json, text/event-stream' \
        -H "Mcp-Session-Id: $sid" -H "MCP-Protocol-Version: $PROTO" \
        --data-binary '{"jsonrpc":"2.0","method":"notifications/initialized"}') ||
        die "$name: notifications/initialized failed (curl)"
    [[ $code == 202 || $code == 200 ]] || die "$name: notifications/initialized returned HTTP $code"

    echo "== $name: $url  (session $sid, ${DURATION}s, $CONNS connections, $THREADS thread)" >&2
    # In the background so that a signal to this script runs the cleanup trap
    # at once instead of after wrk finishes.
    MCP_SESSION_ID=$sid MCP_PROTOCOL_VERSION=$PROTO \
        wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --timeout 5s --latency \
            -s "$here/call.lua" "$url" >"$d/wrk.out" 2>&1 &
    local wrk_pid=$! wrk_rc=0
    pids+=("$wrk_pid")
    wait "$wrk_pid" || wrk_rc=$?
    forget_pid "$wrk_pid"
    ((wrk_rc == 0)) || die "$name: wrk failed (exit $wrk_rc): $(cat "$d/wrk.out")"
    sed 's/^/   /' "$d/wrk.out" >&2

    local line
    line=$(grep '^BENCH_RESULT ' "$d/wrk.out") || die "$name: no BENCH_RESULT from call.lua"
    local -A r=()
    local kv
    for kv in ${line#BENCH_RESULT }; do r[${kv%%=*}]=${kv#*=}; done
    # wrk's own "Non-2xx" and socket error counts are folded in as well.
    local e=$((r[non200] + r[badbody] + r[connect] + r[read] + r[write] + r[timeout]))
    ((r[requests] > 0)) || die "$name: no requests completed"
    rps[$name]=${r[rps]}
    p50[$name]=$(awk -v u="${r[p50_us]}" 'BEGIN {printf "%.2fms", u / 1000}')
    p99[$name]=$(awk -v u="${r[p99_us]}" 'BEGIN {printf "%.2fms", u / 1000}')
    errs[$name]=$e
    if ((e > 0)); then
        failed+=("$name: $e errors (non200=${r[non200]} badbody=${r[badbody]} connect=${r[connect]} read=${r[read]} write=${r[write]} timeout=${r[timeout]}) $(grep '^BENCH_FIRST_BAD' "$d/wrk.out" | cut -c17- || true)")
    fi
}

failed=()
for t in $targets; do
    case $t in
    direct) run_target direct "http://127.0.0.1:$up_port/mcp" ;;
    nginx) start_nginx; run_target nginx "http://127.0.0.1:$nginx_port/mcp" ;;
    tollgate) start_tollgate tollgate; run_target tollgate "http://127.0.0.1:$tg_port/mcp" ;;
    tollgate-policy)
        start_tollgate tollgate-policy
        run_target tollgate-policy "http://127.0.0.1:$tg_port/mcp"
        sleep 0.5 # let the audit log drain
        audit_lines=$(wc -l <"$tmp/tollgate-policy/audit.log" 2>/dev/null || echo 0) ;;
    esac
done

# ---- report ----------------------------------------------------------------------
mkdir -p "$(dirname "$RESULTS")"
{
    echo "# tollgate bench $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -sr), $(nproc) cores"
    echo "# tools/call, ${DURATION}s per target, $CONNS connections, $THREADS wrk thread(s), ids=$BENCH_IDS"
    printf '%-16s %12s %10s %10s %8s\n' target 'requests/s' p50 p99 errors
    for t in $targets; do
        printf '%-16s %12s %10s %10s %8s\n' "$t" "${rps[$t]}" "${p50[$t]}" "${p99[$t]}" "${errs[$t]}"
    done
    if [[ -n $tg_note ]]; then
        echo "# note: $tg_note"
    fi
    if [[ -n ${rps[tollgate]:-} && -n ${rps[nginx]:-} ]]; then
        awk -v a="${rps[tollgate]}" -v b="${rps[nginx]}" \
            'BEGIN {printf "tollgate/nginx throughput ratio: %.2f\n", a / b}'
    fi
    if [[ -n ${rps[tollgate-policy]:-} && -n ${rps[nginx]:-} ]]; then
        awk -v a="${rps[tollgate-policy]}" -v b="${rps[nginx]}" \
            'BEGIN {printf "tollgate-policy/nginx ratio:     %.2f\n", a / b}'
    fi
    if [[ -n ${rps[tollgate-policy]:-} && -n ${rps[tollgate]:-} ]]; then
        awk -v a="${rps[tollgate-policy]}" -v b="${rps[tollgate]}" -v n="${audit_lines:-0}" \
            'BEGIN {printf "policy+audit / policy-off:       %.2f (audit lines written: %d)\n", a / b, n}'
    fi
    if [[ -n ${rps[nginx]:-} && -n ${rps[direct]:-} ]]; then
        awk -v a="${rps[nginx]}" -v b="${rps[direct]}" \
            'BEGIN {printf "nginx/direct throughput ratio:   %.2f\n", a / b}'
    fi
} | tee "$RESULTS"

if ((${#failed[@]} > 0)); then
    printf 'run.sh: FAILED, errors during measurement:\n' >&2
    printf '  %s\n' "${failed[@]}" >&2
    exit 1
fi
