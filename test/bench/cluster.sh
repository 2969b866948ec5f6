#!/usr/bin/env bash
# tollgate cluster benchmark, in one run, loopback only, bounded in time:
#
#   1. its own redis-server (no persistence) and the fast upstream fixture;
#   2. tools/call through ONE tollgate with the seed-shaped policy (a token bucket too big ever to
#      limit, so every call is allowed and its counter taken), with local counters (`local`)
#      against the same conf with `cluster` (`shared`: the bucket lives in Redis);
#   3. THREE instances with `cluster`, same Redis, behind Debian's haproxy (roundrobin, keep-alive
#      to the backends; `haproxy-3`) against ONE of them behind the same haproxy (`haproxy-1`);
#   4. Redis round trips and commands per call, from the gateways' own metrics (deltas of
#      tollgate_cluster_* over each measurement) and from Redis's INFO commandstats;
#   5. the limit of one Redis primary for these decisions: redis-benchmark driving the gateway's
#      own bucket-take script (EVALSHA, the text printed by tg-bench-cluster-scripts), with and
#      without pipelining, for a policy of one counter and of three.
#
# Every wrk phase is a 2025 client: initialize (answered by the gateway: the upstream has
# initialize = "local") and notifications/initialized with curl, then wrk on that session
# (call.lua). Behind haproxy-3 the session is made on one instance and served by all three (its
# record is in Redis). Any reply that is not a tools/call result is an error and fails the run.
# Phases run in alternation (local, shared, haproxy-1, haproxy-3, then again with BENCH_ROUNDS > 1);
# each figure is then the median of the rounds.
#
# Environment (all optional):
#   TOLLGATE_BIN       tollgate                   (default build/tollgate; measure a Release build)
#   UPSTREAM_BIN       tg-bench-upstream          (default build/test/bench/tg-bench-upstream)
#   SCRIPTS_BIN        tg-bench-cluster-scripts   (default build/test/bench/tg-bench-cluster-scripts)
#   HAPROXY_BIN        haproxy                    (default: haproxy on PATH, then /usr/sbin/haproxy)
#   REDIS_SERVER, REDIS_CLI, REDIS_BENCHMARK      (default: on PATH)
#   BENCH_DURATION     seconds of wrk per phase   (default 10; per round)
#   BENCH_ROUNDS       rounds in alternation      (default 1; figures are medians)
#   BENCH_CONNS        wrk connections            (default 50)
#   BENCH_THREADS      wrk threads                (default 1)
#   BENCH_HAPROXY_THREADS  haproxy nbthread       (default 1, like run.sh's one nginx worker)
#   BENCH_PHASES       phases to run, in this order (default "local shared haproxy-1 haproxy-3";
#                      e.g. "local shared" for shared/local alone)
#   BENCH_REDIS_N      requests per redis-benchmark case (default 200000; 0: no redis-benchmark)
#   BENCH_REDIS_CONNS  redis-benchmark clients    (default 50)
#   BENCH_PIPELINE     the gateways' upstreams[].pool.pipeline (default 16, as bench.sh; 1: none)
#   BENCH_LEASE        the gateways' cluster.lease.tokens (default 0: no lease); BENCH_LEASE_MS
#                      its ms (default 1000)
#   BENCH_RESULTS      table                      (default test/bench/results/cluster.txt)
#   BENCH_JSON         JSON                       (default: BENCH_RESULTS with .json)
#   BENCH_KEEP_TMP     1 = keep the temp dir (configs, logs) after the run
#
# Builds nothing: cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH_NAME=cluster.sh
# shellcheck source=test/bench/lib.sh
. "$here/lib.sh"
root=$(cd "$here/../.." && pwd)

TOLLGATE_BIN=${TOLLGATE_BIN:-$root/build/tollgate}
UPSTREAM_BIN=${UPSTREAM_BIN:-$root/build/test/bench/tg-bench-upstream}
SCRIPTS_BIN=${SCRIPTS_BIN:-$root/build/test/bench/tg-bench-cluster-scripts}
HAPROXY_BIN=${HAPROXY_BIN:-$(command -v haproxy || echo /usr/sbin/haproxy)}
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
REDIS_BENCHMARK=${REDIS_BENCHMARK:-redis-benchmark}
DURATION=${BENCH_DURATION:-10}
ROUNDS=${BENCH_ROUNDS:-1}
CONNS=${BENCH_CONNS:-50}
THREADS=${BENCH_THREADS:-1}
HAPROXY_THREADS=${BENCH_HAPROXY_THREADS:-1}
REDIS_N=${BENCH_REDIS_N:-200000}
phases=${BENCH_PHASES:-local shared haproxy-1 haproxy-3}
REDIS_CONNS=${BENCH_REDIS_CONNS:-50}
RESULTS=${BENCH_RESULTS:-$here/results/cluster.txt}
JSON=${BENCH_JSON:-${RESULTS%.txt}.json}
PROTO=2025-06-18
export BENCH_IDS=unique

posint() { [[ $2 =~ ^[0-9]+$ && $2 -gt 0 ]] || die "$1 must be a positive integer"; }
posint BENCH_DURATION "$DURATION"
posint BENCH_ROUNDS "$ROUNDS"
posint BENCH_CONNS "$CONNS"
posint BENCH_THREADS "$THREADS"
posint BENCH_HAPROXY_THREADS "$HAPROXY_THREADS"
[[ $REDIS_N =~ ^[0-9]+$ ]] || die "BENCH_REDIS_N must be a number"
LEASE=${BENCH_LEASE:-0}
[[ $LEASE =~ ^[0-9]+$ ]] || die "BENCH_LEASE must be a number"
lease_line=""
((LEASE == 0)) || lease_line=" lease = { tokens = $LEASE; ms = ${BENCH_LEASE_MS:-1000}; };"
for t in $phases; do
    [[ $t == local || $t == shared || $t == haproxy-1 || $t == haproxy-3 ]] || die "BENCH_PHASES: unknown phase $t"
done
posint BENCH_REDIS_CONNS "$REDIS_CONNS"
((THREADS <= CONNS)) || die "BENCH_THREADS must be at most BENCH_CONNS"

need wrk "apt-get install wrk"
need curl "apt-get install curl"
need python3 "apt-get install python3"
need "$REDIS_SERVER" "apt-get install redis-server"
need "$REDIS_CLI" "apt-get install redis-tools"
need "$REDIS_BENCHMARK" "apt-get install redis-tools"
[[ -x $HAPROXY_BIN ]] || die "haproxy not found (apt-get install haproxy)"
[[ -x $TOLLGATE_BIN ]] || die "$TOLLGATE_BIN not found: build first (see the header)"
[[ -x $UPSTREAM_BIN ]] || die "$UPSTREAM_BIN not found: build first"
[[ -x $SCRIPTS_BIN ]] || die "$SCRIPTS_BIN not found: build first"

bench_tmp cluster

# ---- redis and the upstream ------------------------------------------------------
redis_port=$(free_port)
"$REDIS_SERVER" --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" >"$tmp/redis.out" 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
rcli() { "$REDIS_CLI" -p "$redis_port" "$@"; }
redis_ready() { [[ $(rcli PING 2>/dev/null) == PONG ]]; }
wait_for redis-server "$redis_pid" 10 "$tmp/redis.log" redis_ready

"$UPSTREAM_BIN" 0 >"$tmp/upstream.out" 2>"$tmp/upstream.err" &
up_pid=$!
pids+=("$up_pid")
upstream_ready() { grep -q "^LISTENING [0-9]" "$tmp/upstream.out" 2>/dev/null; }
wait_for "fast upstream" "$up_pid" 5 "$tmp/upstream.err" upstream_ready
up_port=$(awk '/^LISTENING/ {print $2; exit}' "$tmp/upstream.out")

# ---- tollgate instances ------------------------------------------------------------
# The seed policy's shape (default deny, the called tool under a per-grant token bucket), with a
# bucket no benchmark can empty: every call is allowed and takes a token.
cat >"$tmp/policy.json" <<'EOF'
{"version":"1","default":"deny","tools":{"echo":{"limits":[{"counter":"echo_rate","window":"minute","max":100000000,"scope":"grant"}]}}}
EOF
head -c 32 /dev/urandom >"$tmp/cluster.key"
chmod 600 "$tmp/cluster.key"

declare -A tg_port admin_port tg_pid
# start_instance NAME CLUSTER(0|1)
start_instance() {
    local name=$1 shared=$2 d=$tmp/tg-$1
    mkdir -p "$d"
    tg_port[$name]=$(free_port)
    admin_port[$name]=$(free_port)
    local inflight=$((CONNS > 64 ? CONNS : 64)) cluster_line=""
    ((shared == 0)) ||
        cluster_line="cluster = { redis = \"127.0.0.1:$redis_port\"; secret_file = \"$tmp/cluster.key\"; instance = \"$name\";$lease_line };"
    cat >"$d/tollgate.conf" <<EOF
# Generated by test/bench/cluster.sh.
log = { level = "warn"; format = "logfmt"; };
listen = ( { address = "127.0.0.1"; port = ${tg_port[$name]}; } );
admin = { address = "127.0.0.1"; port = ${admin_port[$name]}; };
limits = { inflight_per_session = $inflight; };
grants = ( { name = "bench"; anonymous = true; } );
$cluster_line
upstreams = (
  { name = "bench"; url = "http://127.0.0.1:$up_port/mcp"; default = true;
    initialize = "local";
    policy = "$tmp/policy.json";
    pool = { size = 64; pipeline = ${BENCH_PIPELINE:-16}; }; }
);
EOF
    timeout 10 "$TOLLGATE_BIN" -t -c "$d/tollgate.conf" >"$d/check.log" 2>&1 ||
        die "tollgate -t rejects $d/tollgate.conf: $(cat "$d/check.log")"
    "$TOLLGATE_BIN" -c "$d/tollgate.conf" >"$d/stdout.log" 2>"$d/stderr.log" &
    local pid=$!
    pids+=("$pid")
    tg_pid[$name]=$pid
    instance_ready() { port_open "${tg_port[$1]}" && port_open "${admin_port[$1]}"; }
    wait_for "tollgate $name" "$pid" 10 "$d/stderr.log" instance_ready "$name"
    if ((shared)); then
        # Ready for this benchmark means connected to Redis with its scripts loaded.
        cluster_up() { [[ $(metric "$1" tollgate_cluster_redis_up) == 1 ]]; }
        wait_for "tollgate $name (redis up)" "$pid" 10 "$d/stderr.log" cluster_up "$name"
    fi
}

# metric INSTANCE NAME: the value of an unlabelled metric on the instance's admin /metrics.
metric() {
    curl -sS --max-time 5 "http://127.0.0.1:${admin_port[$1]}/metrics" 2>/dev/null |
        awk -v n="$2" '$1 == n {print $2; found = 1; exit} END {if (!found) print ""}'
}

start_instance local 0
start_instance a 1
start_instance b 1
start_instance c 1
shared_instances="a b c"

# ---- haproxy -----------------------------------------------------------------------
hp_one=$(free_port)
hp_three=$(free_port)
cat >"$tmp/haproxy.cfg" <<EOF
# Generated by test/bench/cluster.sh: roundrobin per request, keep-alive to the backends.
global
    nbthread $HAPROXY_THREADS
    maxconn 4096
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend one
    bind 127.0.0.1:$hp_one
    default_backend one
frontend three
    bind 127.0.0.1:$hp_three
    default_backend three
backend one
    balance roundrobin
    server a 127.0.0.1:${tg_port[a]} maxconn 1000
backend three
    balance roundrobin
    server a 127.0.0.1:${tg_port[a]} maxconn 1000
    server b 127.0.0.1:${tg_port[b]} maxconn 1000
    server c 127.0.0.1:${tg_port[c]} maxconn 1000
EOF
"$HAPROXY_BIN" -c -q -f "$tmp/haproxy.cfg" >"$tmp/haproxy-check.log" 2>&1 ||
    die "haproxy rejects its config: $(cat "$tmp/haproxy-check.log")"
"$HAPROXY_BIN" -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
hp_pid=$!
pids+=("$hp_pid")
haproxy_ready() { port_open "$hp_one" && port_open "$hp_three"; }
wait_for haproxy "$hp_pid" 10 "$tmp/haproxy.log" haproxy_ready

# ---- one measurement ---------------------------------------------------------------
# What is read before and after each wrk run: the cluster counters of every shared instance and
# Redis's commandstats.
cluster_metrics="decisions_total decisions_without_counters_total decision_rounds_total redis_requests_total redis_commands_total redis_round_trips_total fallback_decisions_total unavailable_denials_total"
# snapshot FILE: "INSTANCE.METRIC VALUE" lines, "redis.COMMAND CALLS" / "redisfail.COMMAND N",
# "cpu.PROCESS TICKS" (user + system clock ticks of the processes started here) and "cpu.idle" /
# "cpu.all" (the whole machine's, from /proc/stat).
snapshot() {
    local i m
    {
        for i in local a b c; do echo "cpu.tg-$i $(ticks "${tg_pid[$i]}")"; done
        echo "cpu.haproxy $(ticks "$hp_pid")"
        echo "cpu.redis $(ticks "$redis_pid")"
        echo "cpu.upstream $(ticks "$up_pid")"
        awk '$1 == "cpu" {t = 0; for (k = 2; k <= NF; k++) t += $k; print "cpu.idle", $5 + $6; print "cpu.all", t}' /proc/stat
        for i in $shared_instances; do
            local all
            all=$(curl -sS --max-time 5 "http://127.0.0.1:${admin_port[$i]}/metrics") ||
                die "metrics of $i: curl failed"
            for m in $cluster_metrics; do
                awk -v n="tollgate_cluster_$m" -v i="$i" -v m="$m" \
                    '$1 == n {print i "." m, $2; f = 1} END {if (!f) print i "." m, 0}' <<<"$all"
            done
        done
        rcli INFO commandstats | tr -d '\r' |
            sed -n 's/^cmdstat_\([^:]*\):calls=\([0-9]*\),.*failed_calls=\([0-9]*\).*/redis.\1 \2\nredisfail.\1 \3/p'
    } >"$1"
}
# ticks PID: user + system clock ticks used so far (fields 14 and 15 of /proc/PID/stat, counted
# after the ")" that ends the command name).
ticks() { awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# delta A B KEY: B's value less A's (0 when absent).
delta() {
    awk -v k="$3" 'FNR == NR {if ($1 == k) a = $2; next} $1 == k {b = $2} END {print b - a}' "$1" "$2"
}

declare -A rps_all p50_all p99_all errs req_all rt_all cmd_all dec_all rcmd_all reval_all split_all rdetail cpu_all tgus_all rdus_all hpus_all
run_phase() {
    local name=$1 url=$2 round=$3 d=$tmp/$1/round$3
    mkdir -p "$d"
    local code sid
    code=$(curl -sS -o "$d/init.body" -D "$d/init.headers" -w '%{http_code}' --max-time 10 -X POST "$url" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        --data-binary '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"'"$PROTO"'","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}') ||
        die "$name: initialize failed (curl)"
    [[ $code == 200 ]] || die "$name: initialize returned HTTP $code: $(head -c 300 "$d/init.body")"
    grep -q '"result"' "$d/init.body" || die "$name: initialize did not succeed: $(head -c 300 "$d/init.body")"
    sid=$(tr -d '\r' <"$d/init.headers" | awk -F': *' 'tolower($1)=="mcp-session-id" {print $2; exit}')
    [[ -n $sid ]] || die "$name: initialize reply has no Mcp-Session-Id header"
    code=$(curl -sS -o "$d/initialized.body" -w '%{http_code}' --max-time 10 -X POST "$url" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H "Mcp-Session-Id: $sid" -H "MCP-Protocol-Version: $PROTO" \
        --data-binary '{"jsonrpc":"2.0","method":"notifications/initialized"}') ||
        die "$name: notifications/initialized failed (curl)"
    [[ $code == 202 || $code == 200 ]] || die "$name: notifications/initialized returned HTTP $code"
    echo "== $name (round $round): $url  (session $sid, ${DURATION}s, $CONNS connections)" >&2

    snapshot "$d/before"
    MCP_SESSION_ID=$sid MCP_PROTOCOL_VERSION=$PROTO \
        wrk -t"$THREADS" -c"$CONNS" -d"${DURATION}s" --timeout 5s --latency \
            -s "$here/call.lua" "$url" >"$d/wrk.out" 2>&1 &
    local wrk_pid=$! wrk_rc=0
    pids+=("$wrk_pid")
    wait "$wrk_pid" || wrk_rc=$?
    forget_pid "$wrk_pid"
    ((wrk_rc == 0)) || die "$name: wrk failed (exit $wrk_rc): $(cat "$d/wrk.out")"
    # Calls still in flight when wrk stopped (at most BENCH_CONNS) settle before the second
    # snapshot; wait for the gateways to have none pending in Redis.
    sleep 0.2
    snapshot "$d/after"

    local line
    line=$(grep '^BENCH_RESULT ' "$d/wrk.out") || die "$name: no BENCH_RESULT from call.lua"
    local -A r=()
    local kv
    for kv in ${line#BENCH_RESULT }; do r[${kv%%=*}]=${kv#*=}; done
    local e=$((r[non200] + r[badbody] + r[connect] + r[read] + r[write] + r[timeout]))
    ((r[requests] > 0)) || die "$name: no requests completed"
    rps_all[$name]+=" ${r[rps]}"
    p50_all[$name]+=" ${r[p50_us]}"
    p99_all[$name]+=" ${r[p99_us]}"
    errs[$name]=$((${errs[$name]:-0} + e))
    ((e == 0)) || failed+=("$name round $round: $e errors (non200=${r[non200]} badbody=${r[badbody]} connect=${r[connect]} read=${r[read]} write=${r[write]} timeout=${r[timeout]}) $(grep '^BENCH_FIRST_BAD' "$d/wrk.out" | cut -c17- || true)")

    # Per call: the gateways' own counters and Redis's, over the calls answered (responses
    # include the calls that completed after wrk's clock stopped, as the counters do).
    local calls=${r[responses]} i dec=0 rt=0 cmd=0 fb=0 un=0 split=""
    for i in $shared_instances; do
        local di
        di=$(delta "$d/before" "$d/after" "$i.decisions_total")
        dec=$((dec + di))
        rt=$((rt + $(delta "$d/before" "$d/after" "$i.redis_round_trips_total")))
        cmd=$((cmd + $(delta "$d/before" "$d/after" "$i.redis_commands_total")))
        fb=$((fb + $(delta "$d/before" "$d/after" "$i.fallback_decisions_total")))
        un=$((un + $(delta "$d/before" "$d/after" "$i.unavailable_denials_total")))
        split+="${split:+/}$di"
    done
    ((fb + un == 0)) || failed+=("$name round $round: $fb fallback decisions and $un -32004 denials: Redis failed during the run")
    local c rtot=0 reval detail=""
    reval=$(delta "$d/before" "$d/after" redis.evalsha)
    for c in $(awk '$1 ~ /^redis\./ {sub(/^redis\./, "", $1); print $1}' "$d/after" | sort -u); do
        [[ $c == info || $c == config* || $c == ping ]] && continue
        local n f
        n=$(delta "$d/before" "$d/after" "redis.$c")
        f=$(delta "$d/before" "$d/after" "redisfail.$c")
        ((f == 0)) || failed+=("$name round $round: Redis counted $f failed $c calls")
        ((n > 0)) || continue
        rtot=$((rtot + n))
        detail+=" $c=$(awk -v n="$n" -v c="$calls" 'BEGIN {printf "%.3f", n / c}')"
    done
    per() { awk -v n="$1" -v c="$calls" 'BEGIN {printf "%.3f", n / c}'; }
    req_all[$name]+=" $calls"
    dec_all[$name]+=" $(per "$dec")"
    rt_all[$name]+=" $(per "$rt")"
    cmd_all[$name]+=" $(per "$cmd")"
    rcmd_all[$name]+=" $(per "$rtot")"
    reval_all[$name]+=" $(per "$reval")"
    split_all[$name]="$split"
    # CPU, in % of one core, over the measurement (clock ticks over elapsed ticks of one core).
    local hz all idle cpu="" p
    hz=$(getconf CLK_TCK)
    all=$(delta "$d/before" "$d/after" cpu.all)
    idle=$(delta "$d/before" "$d/after" cpu.idle)
    local ncpu
    ncpu=$(nproc)
    pct() { awk -v t="$1" -v a="$all" -v n="$ncpu" 'BEGIN {printf "%.0f", (a > 0 ? 100 * t * n / a : 0)}'; }
    local tgt=0
    for p in local a b c; do tgt=$((tgt + $(delta "$d/before" "$d/after" "cpu.tg-$p"))); done
    cpu="tollgate $(pct "$tgt")%"
    [[ $name == haproxy-3 ]] && cpu="tollgate a+b+c $(pct "$tgt")% ($(for p in a b c; do pct "$(delta "$d/before" "$d/after" "cpu.tg-$p")"; printf '%% '; done | sed 's/ $//'))"
    cpu+=", haproxy $(pct "$(delta "$d/before" "$d/after" cpu.haproxy)")%"
    cpu+=", redis $(pct "$(delta "$d/before" "$d/after" cpu.redis)")%"
    cpu+=", upstream $(pct "$(delta "$d/before" "$d/after" cpu.upstream)")%"
    cpu+=", machine idle $(pct "$idle")% of $((ncpu * 100))%"
    cpu_all[$name]="$cpu"
    # CPU time per call (microseconds): steadier than calls/s on a loaded machine, since it does
    # not count the time a process waits for a core.
    usc() { awk -v t="$1" -v h="$hz" -v c="$calls" 'BEGIN {printf "%.1f", t / h * 1e6 / c}'; }
    tgus_all[$name]+=" $(usc "$tgt")"
    rdus_all[$name]+=" $(usc "$(delta "$d/before" "$d/after" cpu.redis)")"
    hpus_all[$name]+=" $(usc "$(delta "$d/before" "$d/after" cpu.haproxy)")"
    rdetail[$name]="${detail# }"
    echo "   ${r[rps]} calls/s, p50 ${r[p50_us]} us, p99 ${r[p99_us]} us, $e errors; per call: decisions $(per "$dec"), round trips $(per "$rt"), commands $(per "$cmd"); Redis:${detail:- none}; decisions a/b/c $split; CPU: $cpu; CPU per call: tollgate $(usc "$tgt") us, redis $(usc "$(delta "$d/before" "$d/after" cpu.redis)") us" >&2
}

median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
range() { tr ' ' '\n' <<<"$1" | grep . | sort -g | sed -n '1p;$p' | paste -sd-; }

failed=()
declare -A url_of=(
    [local]="http://127.0.0.1:${tg_port[local]}/mcp"
    [shared]="http://127.0.0.1:${tg_port[a]}/mcp"
    [haproxy-1]="http://127.0.0.1:$hp_one/mcp"
    [haproxy-3]="http://127.0.0.1:$hp_three/mcp"
)
for ((round = 1; round <= ROUNDS; round++)); do
    for t in $phases; do
        run_phase "$t" "${url_of[$t]}" "$round"
    done
done

# ---- one Redis primary: the bucket-take script under redis-benchmark ------------------------
# rb_setup: load the scripts the cases drive (only when redis-benchmark runs).
rb_setup() {
    "$SCRIPTS_BIN" take >"$tmp/take.lua" || die "$SCRIPTS_BIN take failed"
    sha=$(sha1sum "$tmp/take.lua" | cut -d' ' -f1)
    # The gateways loaded their scripts at connect: the text printed must be the one they run.
    [[ $(rcli SCRIPT EXISTS "$sha" | tr -d '\r') == 1 ]] ||
        die "the take script printed by $SCRIPTS_BIN (sha1 $sha) is not the one tollgate loaded"
    [[ $(rcli -x SCRIPT LOAD <"$tmp/take.lua" | tr -d '\r') == "$sha" ]] || die "SCRIPT LOAD gave another sha"
    "$SCRIPTS_BIN" batch >"$tmp/batch.lua" || die "$SCRIPTS_BIN batch failed"
    batch_sha=$(sha1sum "$tmp/batch.lua" | cut -d' ' -f1)
    [[ $(rcli SCRIPT EXISTS "$batch_sha" | tr -d '\r') == 1 ]] ||
        die "the batch script printed by $SCRIPTS_BIN (sha1 $batch_sha) is not the one tollgate loaded"
}
# ARGV as the gateway sends them for the bench policy: capacity, window_ms, amount, now_ms. now_ms
# is fixed for a case (redis-benchmark repeats one command), which changes nothing in the cost:
# every take reads the key, finds tokens and writes it back.
now_ms=$(($(date +%s) * 1000))
declare -a rb_name rb_counters rb_rps rb_p50 rb_p99 rb_dps
# rb_case LABEL COUNTERS PIPELINE RANDOM_KEYS(0: one key) [DECISIONS_PER_CALL: the batch script]
rb_case() {
    local label=$1 counters=$2 pipe=$3 keys=$4 batch=${5:-0} key="tollgate-bench:c:hot" rflag=()
    if ((keys > 0)); then
        key="tollgate-bench:c:__rand_int__"
        rflag=(-r "$keys")
    fi
    rcli CONFIG RESETSTAT >/dev/null
    local out cmd=(EVALSHA "$sha" 1 "$key" 100000000 60000 1 "$now_ms") n=$REDIS_N k
    if ((batch > 0)); then
        # the gateway's batch call for `batch` decisions of one take each on one key: kind 0, key 1
        cmd=(EVALSHA "$batch_sha" 1 "$key")
        for ((k = 0; k < batch; k++)); do cmd+=(0 1 100000000 60000 1 "$now_ms"); done
        n=$((REDIS_N / batch))
    fi
    out=$(timeout 300 "$REDIS_BENCHMARK" -p "$redis_port" -n "$n" -c "$REDIS_CONNS" -P "$pipe" "${rflag[@]}" --csv \
        "${cmd[@]}" 2>"$tmp/rb.err") ||
        die "redis-benchmark ($label) failed: $(cat "$tmp/rb.err")"
    local stats calls failed_n sets
    stats=$(rcli INFO commandstats | tr -d '\r')
    calls=$(sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p' <<<"$stats")
    failed_n=$(sed -n 's/^cmdstat_evalsha:.*failed_calls=\([0-9]*\).*/\1/p' <<<"$stats")
    sets=$(sed -n 's/^cmdstat_set:calls=\([0-9]*\),.*/\1/p' <<<"$stats")
    # Each take must have run and taken a token (SET): a benchmark of errors is worthless.
    [[ ${calls:-0} -ge $n && ${failed_n:-1} == 0 && ${sets:-0} == "$calls" ]] ||
        die "redis-benchmark ($label): evalsha calls=${calls:-0} failed=${failed_n:-?} sets=${sets:-0}, expected $n calls"
    local row
    row=$(tail -n 1 <<<"$out" | tr -d '"')
    IFS=, read -r _ rps _ _ p50 _ p99 _ <<<"$row"
    rb_name+=("$label")
    rb_counters+=("$counters")
    rb_rps+=("$rps")
    rb_p50+=("$p50")
    rb_p99+=("$p99")
    rb_dps+=("$(awk -v r="$rps" -v c="$counters" -v b="$batch" 'BEGIN {printf "%.0f", (b > 0 ? r * b : r / c)}')")
    echo "== redis-benchmark $label: $rps takes/s (p50 $p50 ms, p99 $p99 ms)" >&2
}
if ((REDIS_N > 0)); then
    rb_setup
    echo "== redis-benchmark: EVALSHA take, $REDIS_N requests, $REDIS_CONNS clients" >&2
    rb_case "1 counter, one key, -P 1" 1 1 0
    rb_case "1 counter, 100000 keys, -P 1" 1 1 100000
    rb_case "1 counter, one key, -P 16" 1 16 0
    rb_case "3 counters, 100000 keys, -P 3" 3 3 100000
    rb_case "3 counters, 100000 keys, -P 48" 3 48 100000
    rb_case "batch of 16 decisions, one key" 1 1 0 16
    rb_case "batch of 64 decisions, one key" 1 1 0 64
fi

# ---- report ------------------------------------------------------------------------
declare -A rps p50 p99
for t in $phases; do
    rps[$t]=$(median "${rps_all[$t]}")
    p50[$t]=$(awk -v u="$(median "${p50_all[$t]}")" 'BEGIN {printf "%.2f", u / 1000}')
    p99[$t]=$(awk -v u="$(median "${p99_all[$t]}")" 'BEGIN {printf "%.2f", u / 1000}')
done
# ratio A B: A's calls/s over B's, or null when either phase was not run.
ratio() { awk -v a="${rps[$1]:-}" -v b="${rps[$2]:-}" 'BEGIN {if (a == "" || b == "" || b == 0) print "null"; else printf "%.2f", a / b}'; }
what() {
    case $1 in
    local) echo "1 tollgate, local counters" ;;
    shared) echo "1 tollgate, cluster (Redis)" ;;
    haproxy-1) echo "haproxy -> 1 tollgate, cluster" ;;
    haproxy-3) echo "haproxy -> 3 tollgates, cluster" ;;
    esac
}
mkdir -p "$(dirname "$RESULTS")"
{
    echo "# tollgate cluster bench $(date -u +%Y-%m-%dT%H:%M:%SZ)  $(uname -sr), $(nproc) cores, $($REDIS_SERVER --version | awk '{print $3}'), $($HAPROXY_BIN -v | awk 'NR == 1 {print $1, $3}')"
    echo "# tools/call (2025 session, seed-shaped policy: one token bucket), ${DURATION}s per phase, $CONNS connections, $THREADS wrk thread(s), haproxy nbthread $HAPROXY_THREADS; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
    ((ROUNDS == 1)) || echo "# $ROUNDS rounds in alternation; medians of the rounds; range = lowest-highest calls/s"
    printf '%-10s %-32s %10s %7s %7s %6s %6s %6s %6s %6s %6s %6s %6s  %s\n' phase what 'calls/s' 'p50 ms' 'p99 ms' errors 'rt/c' 'cmd/c' 'dec/c' 'R cmd' 'tg us' 'R us' 'hp us' 'range / decisions per instance'
    for t in $phases; do
        local_note=""
        ((ROUNDS == 1)) || local_note="$(range "${rps_all[$t]}")"
        [[ $t == local ]] || local_note+="${local_note:+ }a/b/c ${split_all[$t]}"
        printf '%-10s %-32s %10s %7s %7s %6s %6s %6s %6s %6s %6s %6s %6s  %s\n' "$t" "$(what "$t")" "${rps[$t]}" "${p50[$t]}" "${p99[$t]}" \
            "${errs[$t]}" "$(median "${rt_all[$t]}")" "$(median "${cmd_all[$t]}")" "$(median "${dec_all[$t]}")" \
            "$(median "${rcmd_all[$t]}")" "$(median "${tgus_all[$t]}")" "$(median "${rdus_all[$t]}")" \
            "$(median "${hpus_all[$t]}")" "$local_note"
    done
    echo "# rt/c, cmd/c, dec/c: tollgate_cluster_redis_round_trips_total, _redis_commands_total, _decisions_total"
    echo "#   (sums over instances a, b, c) per call answered; R cmd: Redis INFO commandstats calls per call"
    echo "# tg us, R us, hp us: CPU time (user + system) of tollgate (all instances), redis-server, haproxy per call"
    for t in $phases; do [[ $t == local ]] || echo "#   Redis commands per call, $t: ${rdetail[$t]:-}"; done
    echo "# CPU in % of one core during the last round's measurement (wrk and other load take the rest):"
    for t in $phases; do printf '#   %-10s %s\n' "$t" "${cpu_all[$t]}"; done
    echo "shared/local throughput:       $(ratio shared local)"
    echo "haproxy-3/haproxy-1:           $(ratio haproxy-3 haproxy-1)"
    echo "haproxy-1/shared (haproxy hop): $(ratio haproxy-1 shared)"
    ((REDIS_N == 0)) || echo "# one Redis primary, the gateway's bucket-take script (EVALSHA), $REDIS_N requests, $REDIS_CONNS clients:"
    ((REDIS_N == 0)) || printf '%-32s %12s %12s %8s %8s\n' case 'calls/s' 'decisions/s' 'p50 ms' 'p99 ms'
    for i in "${!rb_name[@]}"; do
        printf '%-32s %12s %12s %8s %8s\n' "${rb_name[$i]}" "${rb_rps[$i]}" "${rb_dps[$i]}" "${rb_p50[$i]}" "${rb_p99[$i]}"
    done
} | tee "$RESULTS"

# JSON, the same figures.
{
    printf '{"when":"%s","cores":%s,"duration_s":%s,"rounds":%s,"connections":%s,"wrk_threads":%s,"haproxy_threads":%s,\n' \
        "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(nproc)" "$DURATION" "$ROUNDS" "$CONNS" "$THREADS" "$HAPROXY_THREADS"
    printf ' "load_average":"%s",\n "phases":{' "$(cut -d' ' -f1-3 /proc/loadavg)"
    sep=""
    for t in $phases; do
        list() { tr ' ' '\n' <<<"$1" | grep . | paste -sd, ; }
        printf '%s\n  "%s":{"calls_per_s":%s,"p50_ms":%s,"p99_ms":%s,"errors":%s,"calls_per_s_rounds":[%s],"round_trips_per_call":%s,"commands_per_call":%s,"decisions_per_call":%s,"redis_commands_per_call":%s,"redis_evalsha_per_call":%s,"decisions_a_b_c":"%s","redis_commandstats_per_call":"%s","cpu_last_round":"%s","tollgate_cpu_us_per_call":%s,"redis_cpu_us_per_call":%s,"haproxy_cpu_us_per_call":%s}' \
            "$sep" "$t" "${rps[$t]}" "${p50[$t]}" "${p99[$t]}" "${errs[$t]}" "$(list "${rps_all[$t]}")" \
            "$(median "${rt_all[$t]}")" "$(median "${cmd_all[$t]}")" "$(median "${dec_all[$t]}")" \
            "$(median "${rcmd_all[$t]}")" "$(median "${reval_all[$t]}")" "${split_all[$t]:-}" "${rdetail[$t]:-}" "${cpu_all[$t]}" \
            "$(median "${tgus_all[$t]}")" "$(median "${rdus_all[$t]}")" "$(median "${hpus_all[$t]}")"
        sep=","
    done
    printf '},\n "ratios":{"shared_over_local":%s,"haproxy3_over_haproxy1":%s,"haproxy1_over_shared":%s},\n' \
        "$(ratio shared local)" "$(ratio haproxy-3 haproxy-1)" "$(ratio haproxy-1 shared)"
    printf ' "redis_benchmark":{"requests":%s,"clients":%s,"cases":[' "$REDIS_N" "$REDIS_CONNS"
    sep=""
    for i in "${!rb_name[@]}"; do
        printf '%s\n  {"case":"%s","counters_per_decision":%s,"takes_per_s":%s,"decisions_per_s":%s,"p50_ms":%s,"p99_ms":%s}' \
            "$sep" "${rb_name[$i]}" "${rb_counters[$i]}" "${rb_rps[$i]}" "${rb_dps[$i]}" "${rb_p50[$i]}" "${rb_p99[$i]}"
        sep=","
    done
    printf ']}}\n'
} >"$JSON"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$JSON" || die "wrote invalid JSON to $JSON"
echo "cluster.sh: table in $RESULTS, JSON in $JSON" >&2

if ((${#failed[@]} > 0)); then
    printf 'cluster.sh: FAILED, errors during measurement:\n' >&2
    printf '  %s\n' "${failed[@]}" >&2
    exit 1
fi
