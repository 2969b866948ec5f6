#!/usr/bin/env bash
# tollgate benchmark: MCP tools/call throughput and latency through tollgate,
# compared in the same run with the bare upstream and with nginx as a plain
# reverse proxy in front of the same upstream. Loopback only, bounded time.
#
#   test/bench/run.sh [TARGET...]        TARGET: direct nginx tollgate tollgate-policy tollgate-local
#                                                direct-2026 nginx-2026 tollgate-2026 tollgate-2026-policy
#   BENCH_ERA=both test/bench/run.sh     2025 and 2026 rows in alternation, in one run
#
# tollgate-policy is tollgate with the seed policy's shape (default deny, the called tool
# under a token bucket) and the audit log on: the cost of deciding every call.
#
# The -2026 targets send the same tools/call as a stateless MCP 2026-07-28 request: no
# initialize and no Mcp-Session-Id, headers MCP-Protocol-Version: 2026-07-28, Mcp-Method and
# Mcp-Name, and params._meta carrying the version and client capabilities (call.lua,
# MCP_ERA=2026). tollgate serves those only for an upstream with initialize = "local", so the
# tollgate-2026 targets run a tollgate whose upstream has it, and POST to /bench/mcp; the
# upstream answers a 2026-07-28 request with "resultType":"complete" (through nginx), and a
# reply without it counts as an error. BENCH_INIT_2026=forward gives the tollgate-2026 targets
# upstream initialize = "forward" instead (for builds that bridge 2026 clients to upstream
# sessions; older ones refuse with -32022 and the run stops there). tollgate-2026-policy adds
# the seed policy and audit as
# tollgate-policy does. tollgate-local is the 2025 control for them: 2025 session calls, like
# tollgate, on the same conf as tollgate-2026 (initialize = "local", /bench/mcp).
#
# Environment (all optional):
#   TOLLGATE_BIN         tollgate binary        (default build/tollgate)
#   UPSTREAM_BIN         tg-bench-upstream      (default build/test/bench/tg-bench-upstream)
#   NGINX_BIN            nginx                  (default: nginx on PATH, then /usr/sbin/nginx)
#   BENCH_TARGETS        targets to run         (default: per BENCH_ERA; args win)
#   BENCH_ERA            2025 | 2026 | both     (default 2025: direct nginx tollgate tollgate-policy;
#                                                2026: the same four as -2026 targets; both: all
#                                                nine, each 2025 target followed by its 2026 twin,
#                                                tollgate-local before tollgate-2026)
#   BENCH_SKIP_TOLLGATE  1 = drop the tollgate targets
#   BENCH_INIT_2026      local | forward        (default local: initialize of the -2026 targets' upstream)
#   BENCH_DURATION       seconds per target     (default 10; per round)
#   BENCH_ROUNDS         rounds                 (default 1: each round runs every target once, in
#                                                order, on the same servers; with more, each
#                                                figure is the median of the rounds and "range"
#                                                gives the lowest and highest requests/s)
#   BENCH_CONNS          wrk connections        (default 50)
#   BENCH_THREADS        wrk threads            (default 1)
#   BENCH_IDS            unique | fixed         (default unique; see call.lua)
#   BENCH_RESULTS        results file           (default test/bench/results/last.txt)
#   BENCH_KEEP_TMP       1 = keep the temp dir (configs, logs) after the run
#   BENCH_AUDIT_OPTS     directives added to the -policy targets' audit group, e.g. "chain = false;"
#
# Builds nothing: run `cmake --build build` first.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=run.sh
# shellcheck source=test/bench/lib.sh
. "$here/lib.sh"
root=$(cd "$here/../.." && pwd)

TOLLGATE_BIN=${TOLLGATE_BIN:-$root/build/tollgate}
UPSTREAM_BIN=${UPSTREAM_BIN:-$root/build/test/bench/tg-bench-upstream}
NGINX_BIN=${NGINX_BIN:-$(command -v nginx || echo /usr/sbin/nginx)}
DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-1}
CONNS=${BENCH_CONNS:-50}
THREADS=${BENCH_THREADS:-1}
RESULTS=${BENCH_RESULTS:-$here/results/last.txt}
PROTO=2025-06-18
PROTO_2026=2026-07-28
export BENCH_IDS=${BENCH_IDS:-unique}
ERA=${BENCH_ERA:-2025}
INIT_2026=${BENCH_INIT_2026:-local}
[[ $INIT_2026 == local || $INIT_2026 == forward ]] || die "BENCH_INIT_2026 must be local or forward"

case $ERA in
2025) era_targets="direct nginx tollgate tollgate-policy" ;;
2026) era_targets="direct-2026 nginx-2026 tollgate-2026 tollgate-2026-policy" ;;
both) era_targets="direct direct-2026 nginx nginx-2026 tollgate tollgate-local tollgate-2026 tollgate-policy tollgate-2026-policy" ;;
*) die "BENCH_ERA must be 2025, 2026 or both" ;;
esac
if [[ $# -gt 0 ]]; then
    targets="$*"
else
    targets=${BENCH_TARGETS:-$era_targets}
fi
if [[ ${BENCH_SKIP_TOLLGATE:-0} == 1 ]]; then
    targets=$(tr ' ' '\n' <<<"$targets" | grep -v '^tollgate' | tr '\n' ' ' || true)
fi

all_targets="direct nginx tollgate tollgate-policy tollgate-local direct-2026 nginx-2026 tollgate-2026 tollgate-2026-policy"
for t in $targets; do
    [[ " $all_targets " == *" $t "* ]] || die "unknown target '$t' ($all_targets)"
done
[[ -n ${targets// /} ]] || die "no targets selected"
[[ $DURATION =~ ^[0-9]+$ && $DURATION -gt 0 ]] || die "BENCH_DURATION must be a positive integer"
[[ $ROUNDS =~ ^[0-9]+$ && $ROUNDS -gt 0 ]] || die "BENCH_ROUNDS must be a positive integer"
[[ $CONNS =~ ^[0-9]+$ && $CONNS -gt 0 ]] || die "BENCH_CONNS must be a positive integer"
[[ $THREADS =~ ^[0-9]+$ && $THREADS -gt 0 && $THREADS -le $CONNS ]] || die "BENCH_THREADS must be 1..BENCH_CONNS"
[[ $BENCH_IDS == unique || $BENCH_IDS == fixed ]] || die "BENCH_IDS must be unique or fixed"

need wrk "apt-get install wrk"
need curl "apt-get install curl"
[[ -x $UPSTREAM_BIN ]] || die "$UPSTREAM_BIN not found: run cmake --build build"
want() { [[ " $targets " == *" $1 "* ]]; }
if want nginx || want nginx-2026; then
    [[ -x $NGINX_BIN ]] || die "nginx not found (apt-get install nginx-light)"
fi
if [[ " $targets " == *" tollgate"* ]]; then
    [[ -x $TOLLGATE_BIN ]] || die "$TOLLGATE_BIN not found: run cmake --build build (or BENCH_SKIP_TOLLGATE=1)"
fi

bench_tmp bench

# ---- fast upstream -----------------------------------------------------------
"$UPSTREAM_BIN" 0 >"$tmp/upstream.out" 2>"$tmp/upstream.err" &
up_pid=$!
pids+=("$up_pid")
upstream_ready() { grep -q "^LISTENING [0-9]" "$tmp/upstream.out" 2>/dev/null; }
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
$(nginx_temp_paths "$d")
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
        # The -2026 targets' path (tollgate's /NAME/mcp), passed on as it is.
        location /bench/mcp {
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
    local d=$1 policy_line=$2 audit_line=${3:-} init_line=${4:-}
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
    $init_line
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
    local audit_line="" init_line=""
    # tollgate serves 2026-07-28 requests only for an upstream whose initialize it answers.
    [[ $tg_name == tollgate-local ]] && init_line='initialize = "local";'
    [[ $tg_name == tollgate-2026* ]] && init_line="initialize = \"$INIT_2026\";"
    if [[ $tg_name == tollgate-policy || $tg_name == tollgate-2026-policy ]]; then
        # The seed policy's shape: default deny, the called tool under a token bucket
        # (large enough never to refuse the benchmark), and the audit log on.
        cat >"$d/allow.json" <<'EOF'
{"version":"1","default":"deny","tools":{"echo":{"limits":[{"counter":"echo_rate","window":"second","max":100000000,"scope":"grant"}]}}}
EOF
        audit_line="audit = { file = \"$d/audit.log\"; ${BENCH_AUDIT_OPTS:-} };"
    fi
    write_tollgate_conf "$d" "policy = \"$d/allow.json\";" "$audit_line" "$init_line"
    # A tollgate built before upstream policies exist rejects the directive;
    # measure it anyway, without a policy, and say so in the results.
    local check
    if ! check=$(timeout 10 "$TOLLGATE_BIN" -t -c "$d/tollgate.conf" 2>&1) &&
        grep -q '\.policy: unknown directive' <<<"$check"; then
        write_tollgate_conf "$d" "" "" "$init_line"
        tg_note="tollgate ran WITHOUT a policy: this build rejects upstreams.policy"
        echo "run.sh: warning: $tg_note" >&2
    fi
    "$TOLLGATE_BIN" -c "$d/tollgate.conf" >"$d/stdout.log" 2>"$d/stderr.log" &
    tg_pid=$!
    pids+=("$tg_pid")
    wait_for tollgate "$tg_pid" 10 "$d/stderr.log" tollgate_ready
}

# ---- one target ------------------------------------------------------------------
# 2025: the MCP handshake (initialize + notifications/initialized), then wrk on that session.
# 2026: one stateless call with curl (it must succeed as a 2026 result), then wrk.
declare -A rps p50 p99 errs audit_lines rps_all p50_all p99_all
run_target() {
    local name=$1 url=$2 d=$tmp/$1/round$3 era=2025
    [[ $name == *-2026* ]] && era=2026
    mkdir -p "$d"
    local code sid=""
    if [[ $era == 2026 ]]; then
        code=$(curl -sS -o "$d/probe.body" -w '%{http_code}' --max-time 10 -X POST "$url" \
            -H 'Content-Type: application/json' \
            -H 'Accept: application/json, text/event-stream' \
            -H "MCP-Protocol-Version: $PROTO_2026" -H 'Mcp-Method: tools/call' -H 'Mcp-Name: echo' \
            --data-binary '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"io.modelcontextprotocol/protocolVersion":"'"$PROTO_2026"'","io.modelcontextprotocol/clientCapabilities":{}}}}') ||
            die "$name: 2026-07-28 tools/call failed (curl)"
        [[ $code == 200 ]] || die "$name: 2026-07-28 tools/call returned HTTP $code: $(head -c 300 "$d/probe.body")"
        grep -q '"resultType":"complete"' "$d/probe.body" ||
            die "$name: 2026-07-28 tools/call is not a complete result: $(head -c 300 "$d/probe.body")"
        echo "== $name: $url  (stateless $PROTO_2026, ${DURATION}s, $CONNS connections, $THREADS thread)" >&2
    else
        code=$(curl -sS -o "$d/init.body" -D "$d/init.headers" -w '%{http_code}' \
            --max-time 10 -X POST "$url" \
            -H 'Content-Type: application/json' \
            -H 'Accept: application/json, text/event-stream' \
            --data-binary '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"'"$PROTO"'","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}') ||
            die "$name: initialize failed (curl)"
        [[ $code == 200 ]] || die "$name: initialize returned HTTP $code: $(head -c 300 "$d/init.body")"
        grep -q '"result"' "$d/init.body" ||
            die "$name: initialize did not succeed: $(head -c 300 "$d/init.body")"
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
    fi

    # In the background so that a signal to this script runs the cleanup trap
    # at once instead of after wrk finishes.
    local proto=$PROTO
    [[ $era == 2026 ]] && proto=$PROTO_2026
    MCP_ERA=$era MCP_SESSION_ID=$sid MCP_PROTOCOL_VERSION=$proto \
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
    rps_all[$name]+=" ${r[rps]}"
    p50_all[$name]+=" ${r[p50_us]}"
    p99_all[$name]+=" ${r[p99_us]}"
    errs[$name]=$((${errs[$name]:-0} + e))
    if ((e > 0)); then
        failed+=("$name: $e errors (non200=${r[non200]} badbody=${r[badbody]} connect=${r[connect]} read=${r[read]} write=${r[write]} timeout=${r[timeout]}) $(grep '^BENCH_FIRST_BAD' "$d/wrk.out" | cut -c17- || true)")
    fi
}

# The median of the numbers in $1 (the lower middle one of an even count).
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

failed=()
nginx_port=""
declare -A tg_port_of url_of
for ((round = 1; round <= ROUNDS; round++)); do
    ((ROUNDS == 1)) || echo "== round $round of $ROUNDS" >&2
    for t in $targets; do
        # Servers start on a target's first round and serve all its rounds.
        if [[ -z ${url_of[$t]:-} ]]; then
            case $t in
            direct|direct-2026) url_of[$t]="http://127.0.0.1:$up_port/mcp" ;;
            nginx) [[ -n $nginx_port ]] || start_nginx; url_of[$t]="http://127.0.0.1:$nginx_port/mcp" ;;
            nginx-2026) [[ -n $nginx_port ]] || start_nginx; url_of[$t]="http://127.0.0.1:$nginx_port/bench/mcp" ;;
            tollgate|tollgate-policy) start_tollgate "$t"; url_of[$t]="http://127.0.0.1:$tg_port/mcp" ;;
            tollgate-local|tollgate-2026|tollgate-2026-policy)
                start_tollgate "$t"; url_of[$t]="http://127.0.0.1:$tg_port/bench/mcp" ;;
            esac
        fi
        run_target "$t" "${url_of[$t]}" "$round"
    done
done
for t in $targets; do
    rps[$t]=$(median "${rps_all[$t]}")
    p50[$t]=$(awk -v u="$(median "${p50_all[$t]}")" 'BEGIN {printf "%.2fms", u / 1000}')
    p99[$t]=$(awk -v u="$(median "${p99_all[$t]}")" 'BEGIN {printf "%.2fms", u / 1000}')
    if [[ $t == tollgate-policy || $t == tollgate-2026-policy ]]; then
        sleep 0.5 # let the audit log drain
        audit_lines[$t]=$(wc -l <"$tmp/$t/audit.log" 2>/dev/null || echo 0)
    fi
done

# ---- report ----------------------------------------------------------------------
mkdir -p "$(dirname "$RESULTS")"
{
    echo "# tollgate bench $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -sr), $(nproc) cores"
    [[ " $targets " != *" tollgate-2026"* ]] || echo "# tollgate-2026 targets: upstream initialize = \"$INIT_2026\""
    echo "# tools/call, ${DURATION}s per target, $CONNS connections, $THREADS wrk thread(s), ids=$BENCH_IDS, load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
    if ((ROUNDS == 1)); then
        printf '%-21s %12s %10s %10s %8s\n' target 'requests/s' p50 p99 errors
        for t in $targets; do
            printf '%-21s %12s %10s %10s %8s\n' "$t" "${rps[$t]}" "${p50[$t]}" "${p99[$t]}" "${errs[$t]}"
        done
    else
        echo "# $ROUNDS rounds, targets in alternation; medians of the rounds, range = lowest-highest requests/s"
        printf '%-21s %12s %10s %10s %8s  %s\n' target 'requests/s' p50 p99 errors range
        for t in $targets; do
            printf '%-21s %12s %10s %10s %8s  %s\n' "$t" "${rps[$t]}" "${p50[$t]}" "${p99[$t]}" "${errs[$t]}" \
                "$(tr ' ' '\n' <<<"${rps_all[$t]}" | grep . | sort -g | sed -n '1p;$p' | paste -sd-)"
        done
    fi
    if [[ -n $tg_note ]]; then
        echo "# note: $tg_note"
    fi
    # ratio LABEL A B [AUDIT]: A's throughput over B's, when both ran.
    ratio() {
        [[ -n ${rps[$2]:-} && -n ${rps[$3]:-} ]] || return 0
        local extra=""
        [[ -n ${4:-} ]] && extra=" (audit lines written: ${audit_lines[$4]:-0})"
        awk -v l="$1" -v a="${rps[$2]}" -v b="${rps[$3]}" -v x="$extra" \
            'BEGIN {printf "%-38s %.2f%s\n", l, a / b, x}'
    }
    ratio "tollgate/nginx throughput ratio:" tollgate nginx
    ratio "tollgate-policy/nginx ratio:" tollgate-policy nginx
    ratio "policy+audit / policy-off:" tollgate-policy tollgate tollgate-policy
    ratio "nginx/direct throughput ratio:" nginx direct
    ratio "tollgate-2026/nginx-2026 ratio:" tollgate-2026 nginx-2026
    ratio "tollgate-2026-policy/nginx-2026:" tollgate-2026-policy nginx-2026
    ratio "2026 policy+audit / policy-off:" tollgate-2026-policy tollgate-2026 tollgate-2026-policy
    ratio "nginx-2026/direct-2026 ratio:" nginx-2026 direct-2026
    ratio "tollgate-2026/tollgate (2025):" tollgate-2026 tollgate
    ratio "tollgate-2026/tollgate-local (2025):" tollgate-2026 tollgate-local
    ratio "tollgate-2026-policy/tollgate-policy:" tollgate-2026-policy tollgate-policy
    ratio "nginx-2026/nginx (2025):" nginx-2026 nginx
} | tee "$RESULTS"

if ((${#failed[@]} > 0)); then
    printf 'run.sh: FAILED, errors during measurement:\n' >&2
    printf '  %s\n' "${failed[@]}" >&2
    exit 1
fi
