#!/usr/bin/env bash
# perf.callgrind: instructions per proxied tools/call and per relayed stream message, counted by
# valgrind --tool=callgrind on a fixed workload, checked against the committed budget
# (test/perf/budget.json). Instructions do not move with the machine's load, so a change of a few
# per cent is a change in the code, not noise.
#
#   test/perf/callgrind.sh [--update] [--budget FILE] [--tollgate BIN] [--upstream BIN] [--client BIN] [--insns BIN]
#
# Defaults: build-perf/tollgate, build-perf/test/bench/tg-bench-upstream and tg-bench-streams (a
# Release tree: cmake -S . -B build-perf -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_PERF_TESTS=ON).
# --update rewrites the budget file with this run's figures instead of checking them.
#
# How a figure is made. The gateway runs under callgrind, the fast upstream and the client
# (tg-bench-streams --calls N) natively. The client sets its sessions up, then makes exactly N
# calls one at a time, in turn on CG_CONNS keep-alive connections, checking every answer, and
# exits: no clock is involved. Each gateway process serves several workloads in a row (one per
# figure), and is stopped with SIGTERM; callgrind's total is the process's instructions, all
# threads included. Run 0 gives every workload its short count; run k gives workload k its long
# count and the others their short one. So figure k = (Ir of run k - Ir of run 0) / (units of
# workload k in run k - in run 0): start-up, connection set-up, initialize and shutdown cancel out.
# A unit is a call, or for the stream figures a message the client received (200
# notifications/progress and the result per call).
#
# Figures (test/bench/run.sh and streams.sh's targets):
#   call_2025         tools/call "echo" on a 2025 session, allow-all policy     (run.sh tollgate)
#   call_2026         the same as a stateless 2026-07-28 request                 (run.sh tollgate-2026)
#   call_2025_policy  the seed-shaped policy (default deny, echo under a token bucket) + audit log
#   call_2026_policy  the same, stateless 2026-07-28                             (run.sh tollgate-2026-policy)
#   event_post        per message, Streamable HTTP POST answered with SSE        (streams.sh tollgate-post)
#   event_sse         per message, legacy HTTP+SSE                               (streams.sh tollgate-sse)
#   event_ws          per message, WebSocket                                     (streams.sh tollgate-ws)
#   audit_chain       what the audit log's hash chain adds to one record, counted natively by
#                     single-stepping (tg-bench-insns), not under callgrind: the policy figures run
#                     with audit.chain = false, since valgrind hides the CPU's SHA extensions
#
# The check: a figure more than CG_TOLERANCE (10) per cent over its budget fails the test; one
# more than that under it passes, with "lower the budget". No valgrind: the test fails.
#
# Environment: CG_CONNS (4), CG_CALLS_SHORT/CG_CALLS_LONG (200/2200 echo calls),
# CG_STREAMS_SHORT/CG_STREAMS_LONG (4/44 stream calls of 200 events), CG_TOLERANCE (10),
# CG_FIGURES="NAME ..." measures only those (not with --update),
# CG_KEEP=DIR keeps every run's callgrind file and logs there (for callgrind_annotate),
# CG_AUDIT_OPTS="chain = false;" adds directives to the policy figures' audit group (to measure
# what a setting costs; not with --update).
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

TOLLGATE_BIN=$root/build-perf/tollgate
UPSTREAM_BIN=$root/build-perf/test/bench/tg-bench-upstream
CLIENT_BIN=$root/build-perf/test/bench/tg-bench-streams
INSNS_BIN=$root/build-perf/test/bench/tg-bench-insns
BUDGET=$here/budget.json
UPDATE=0
while [[ $# -gt 0 ]]; do
    case $1 in
    --update) UPDATE=1; shift ;;
    --budget) BUDGET=$2; shift 2 ;;
    --tollgate) TOLLGATE_BIN=$2; shift 2 ;;
    --upstream) UPSTREAM_BIN=$2; shift 2 ;;
    --client) CLIENT_BIN=$2; shift 2 ;;
    --insns) INSNS_BIN=$2; shift 2 ;;
    *) echo "usage: $0 [--update] [--budget FILE] [--tollgate BIN] [--upstream BIN] [--client BIN] [--insns BIN]" >&2; exit 2 ;;
    esac
done
CONNS=${CG_CONNS:-4}
CALLS_SHORT=${CG_CALLS_SHORT:-200}
CALLS_LONG=${CG_CALLS_LONG:-2200}
STREAMS_SHORT=${CG_STREAMS_SHORT:-4}
STREAMS_LONG=${CG_STREAMS_LONG:-44}
EVENTS=200
TOLERANCE=${CG_TOLERANCE:-10}
KEEP=${CG_KEEP:-}

fail() { echo "perf.callgrind: FAIL: $*" >&2; exit 1; }
command -v valgrind >/dev/null ||
    fail "valgrind not found: the instruction budget cannot be checked (scripts/install-deps.sh --test installs it)"
for b in "$TOLLGATE_BIN" "$UPSTREAM_BIN" "$CLIENT_BIN" "$INSNS_BIN"; do
    [[ -x $b ]] || fail "$b not found (cmake --build build-perf)"
done
[[ $UPDATE == 1 || -r $BUDGET ]] || fail "no budget file $BUDGET (make one with --update)"
# The budget is for an optimized build without sanitizers: refuse another tree when its cache says so.
cache=$(dirname "$TOLLGATE_BIN")/CMakeCache.txt
if [[ -r $cache ]]; then
    btype=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$cache")
    [[ $btype == Release ]] || fail "$TOLLGATE_BIN is a '$btype' build; the budget is for -DCMAKE_BUILD_TYPE=Release"
    ! grep -Eq '^TOLLGATE_(SANITIZE|FUZZ):BOOL=ON' "$cache" || fail "$TOLLGATE_BIN is sanitized; the budget is for a build without"
fi

tmp=$(mktemp -d --suffix=.tg-perf)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
forget() { local p keep=(); for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done; pids=("${keep[@]}"); }

# wait_line FILE PATTERN PID SECONDS: waits until FILE holds PATTERN; fails if PID dies first.
wait_line() {
    local i
    for ((i = 0; i < $4 * 20; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || fail "$(basename "$1"): the process exited early: $(tail -n 5 "$1")"
        sleep 0.05
    done
    fail "$(basename "$1"): nothing matching '$2' after $4 s: $(tail -n 5 "$1")"
}

# ---- the fast upstream (native) ----------------------------------------------------------
"$UPSTREAM_BIN" 0 --events "$EVENTS" >"$tmp/upstream.out" 2>"$tmp/upstream.err" &
up_pid=$!
pids+=("$up_pid")
wait_line "$tmp/upstream.out" '^LISTENING [0-9]' "$up_pid" 10
up_port=$(awk '/^LISTENING/ {print $2; exit}' "$tmp/upstream.out")

# ---- gateway configurations ----------------------------------------------------------------
# plain: run.sh's tollgate and streams.sh's (allow-all policy, no audit), plus an upstream with
# initialize = "local" at /local/mcp for the stateless 2026 calls (run.sh's tollgate-2026).
# policy: run.sh's tollgate-policy (the seed policy's shape and the audit log), both eras.
write_conf() {
    local name=$1 d=$tmp/$1 policy audit=""
    mkdir -p "$d"
    if [[ $name == policy ]]; then
        echo '{"version":"1","default":"deny","tools":{"echo":{"limits":[{"counter":"echo_rate","window":"second","max":100000000,"scope":"grant"}]}}}' >"$d/policy.json"
        # chain = false: valgrind hides the CPU's SHA extensions, so under callgrind the chain's
        # SHA-256 of each line would be counted in portable code (about 30,000 Ir, where the CPU
        # takes about 1,500): the chain is the audit_chain figure, counted natively.
        audit="audit = { file = \"$d/audit.log\"; chain = false; ${CG_AUDIT_OPTS:-} };"
    else
        echo '{"version":"1","default":"allow"}' >"$d/policy.json"
    fi
    cat >"$d/tollgate.conf" <<EOF
# Generated by test/perf/callgrind.sh ($name).
log = { level = "info"; format = "logfmt"; };
$audit
listen = ( { address = "127.0.0.1"; port = 0; } );
limits = { inflight_per_session = 64; };
grants = ( { name = "bench"; anonymous = true; } );
upstreams = (
  { name = "bench"; url = "http://127.0.0.1:$up_port/mcp"; default = true;
    policy = "$d/policy.json"; pool = { size = 64; }; },
  { name = "local"; url = "http://127.0.0.1:$up_port/mcp"; initialize = "local";
    policy = "$d/policy.json"; pool = { size = 64; }; }
);
EOF
}
write_conf plain
write_conf policy

# Workloads: figure -> "conf mode path proto unit".
declare -A wl=(
    [call_2025]="plain call /mcp 2025-06-18 call"
    [call_2026]="plain call /local/mcp 2026-07-28 call"
    [event_post]="plain post /bench/mcp 2025-06-18 message"
    [event_sse]="plain sse /bench/sse 2025-06-18 message"
    [event_ws]="plain ws /bench/ws 2025-06-18 message"
    [call_2025_policy]="policy call /mcp 2025-06-18 call"
    [call_2026_policy]="policy call /local/mcp 2026-07-28 call"
    [audit_chain]="native - - - record"
)
all_figures=(call_2025 call_2026 call_2025_policy call_2026_policy event_post event_sse event_ws audit_chain)
read -r -a figures <<<"${CG_FIGURES:-${all_figures[*]}}"
for f in "${figures[@]}"; do [[ -n ${wl[$f]:-} ]] || fail "unknown figure '$f' (${all_figures[*]})"; done
((UPDATE == 0 || ${#figures[@]} == ${#all_figures[@]})) || fail "--update writes every figure: leave CG_FIGURES unset"
conf_figures() { local f; for f in "${figures[@]}"; do [[ ${wl[$f]%% *} == "$1" ]] && echo "$f"; done; }

declare -A units_of # "RUN.FIGURE" -> units the client counted
# run_gateway CONF RUN LONG_FIGURE: one gateway under callgrind serving every workload of CONF
# (LONG_FIGURE's with the long count, the others with the short one); sets gw_ir to its total Ir
# and units_of[RUN.FIGURE]. Not in a subshell: those are globals, and fail must end the script.
run_gateway() {
    local conf=$1 run=$2 long=$3 d=$tmp/$1/run.$2 f
    mkdir -p "$d"
    rm -f "$tmp/$conf/audit.log"
    valgrind --tool=callgrind ${CG_VALGRIND_OPTS:-} --callgrind-out-file="$d/callgrind.out" \
        "$TOLLGATE_BIN" -c "$tmp/$conf/tollgate.conf" >"$d/stdout.log" 2>"$d/stderr.log" &
    local pid=$!
    pids+=("$pid")
    wait_line "$d/stderr.log" 'msg="listening"' "$pid" 60
    local port
    port=$(grep -m1 'msg="listening"' "$d/stderr.log" | grep -o 'port=[0-9]*' | head -n1 | cut -d= -f2)
    local calls_total=0
    for f in $(conf_figures "$conf"); do
        local mode path proto unit n ev=() out=$d/$f.client
        read -r _ mode path proto unit <<<"${wl[$f]}"
        if [[ $unit == call ]]; then
            n=$CALLS_SHORT; [[ $f == "$long" ]] && n=$CALLS_LONG
            calls_total=$((calls_total + n))
        else
            n=$STREAMS_SHORT; [[ $f == "$long" ]] && n=$STREAMS_LONG
            ev=(--events "$EVENTS")
        fi
        timeout 120 "$CLIENT_BIN" --mode "$mode" --url "http://127.0.0.1:$port$path" --proto "$proto" \
            --conns "$CONNS" --calls "$n" "${ev[@]}" >"$out" 2>&1 ||
            fail "$f ($conf, run $run): the client failed: $(tail -n 3 "$out")"
        local line
        line=$(grep '^RESULT ' "$out") || fail "$f: no RESULT line: $(tail -n 3 "$out")"
        [[ $line == *" calls=$n "* ]] || fail "$f: $n calls asked, the client says: $line"
        if [[ $unit == call ]]; then
            units_of[$run.$f]=$n
        else
            units_of[$run.$f]=$(grep -o 'all_messages=[0-9]*' <<<"$line" | cut -d= -f2)
        fi
    done
    kill -TERM "$pid"
    local rc=0
    wait "$pid" || rc=$?
    forget "$pid"
    ((rc == 0)) || fail "$conf run $run: tollgate exited with status $rc: $(tail -n 5 "$d/stderr.log")"
    # Under callgrind the gateway runs some 30 times slower, so an iteration of its loop may pass
    # the 100 ms that it reports as a stall: that warning is expected here, any other is not.
    local warns
    warns=$(grep 'level=\(warn\|error\)' "$d/stderr.log" | grep -v 'msg="event loop stalled"' || true)
    [[ -z $warns ]] || fail "$conf run $run: tollgate logged a warning or an error: $(head -n 3 <<<"$warns")"
    if [[ $conf == policy ]]; then
        # Every call was decided and audited (the audit log is complete once tollgate has exited).
        local lines
        lines=$(wc -l <"$tmp/$conf/audit.log" 2>/dev/null || echo 0)
        ((lines >= calls_total)) || fail "policy run $run: $lines audit lines for $calls_total calls"
    fi
    local ir
    ir=$(awk '/^summary:/ {print $2; exit}' "$d/callgrind.out")
    [[ -n $ir ]] || fail "$conf run $run: no summary in the callgrind output"
    if [[ -n $KEEP ]]; then
        mkdir -p "$KEEP"
        cp "$d/callgrind.out" "$KEEP/$conf.$run.callgrind.out"
        cp "$d/stderr.log" "$KEEP/$conf.$run.stderr.log"
    fi
    gw_ir=$ir
}

declare -A value
start=$(date +%s)
for conf in plain policy; do
    [[ -n $(conf_figures "$conf") ]] || continue
    run_gateway "$conf" 0 ""
    base=$gw_ir
    for f in $(conf_figures "$conf"); do
        run_gateway "$conf" "$f" "$f"
        ir=$gw_ir
        du=$((units_of[$f.$f] - units_of[0.$f]))
        ((du > 0)) || fail "$f: no more units in the long run than in the short one"
        value[$f]=$(( (ir - base + du / 2) / du ))
        printf 'perf.callgrind: %-17s %9d Ir per %-7s (run 0: %d Ir; long: %d Ir, +%d %ss)\n' \
            "$f" "${value[$f]}" "$(awk '{print $5}' <<<"${wl[$f]}")" "$base" "$ir" "$du" \
            "$(awk '{print $5}' <<<"${wl[$f]}")"
    done
done
# audit_chain: what the hash chain adds to one audit record (a chained record minus a plain one),
# counted natively by single-stepping (tg-bench-insns): the SHA-256 as this CPU runs it.
if [[ " ${figures[*]} " == *" audit_chain "* ]]; then
    out=$("$INSNS_BIN") || fail "tg-bench-insns failed: $out"
    value[audit_chain]=$(sed -n 's/^audit record, chained: [0-9]* instructions (+\([0-9]*\)).*/\1/p' <<<"$out")
    [[ -n ${value[audit_chain]} ]] || fail "tg-bench-insns: no figure in: $out"
    printf 'perf.callgrind: %-17s %9d instructions per record, natively (%s)\n' audit_chain "${value[audit_chain]}" \
        "$(sed -n 's/^sha256 of \(.*\)/SHA-256 of \1/p' <<<"$out")"
fi
echo "perf.callgrind: measured in $(( $(date +%s) - start )) s"

# ---- the budget ------------------------------------------------------------------------------
if [[ $UPDATE == 1 ]]; then
    # The compiler and build type of the tree the gateway was built in, when its cache is there.
    compiler="" btype=${btype:-unknown}
    [[ ! -r $cache ]] || compiler=$(sed -n 's/^CMAKE_C_COMPILER:[A-Z]*=//p' "$cache")
    compiler=$("${compiler:-cc}" --version 2>/dev/null | head -n1 || echo unknown)
    {
        echo "{"
        echo "  \"_comment\": \"Instructions (callgrind Ir) per unit; written by test/perf/callgrind.sh --update on $(date -u +%Y-%m-%d), $(uname -sr), $compiler, tollgate $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown), CMAKE_BUILD_TYPE=$btype. perf.callgrind fails when a figure exceeds its budget by more than 10 per cent. See docs/benchmarks.md, Instruction budget.\","
        n=${#figures[@]}
        for i in "${!figures[@]}"; do
            sep=","; ((i == n - 1)) && sep=""
            echo "  \"${figures[$i]}\": ${value[${figures[$i]}]}$sep"
        done
        echo "}"
    } >"$BUDGET"
    echo "perf.callgrind: wrote $BUDGET"
    exit 0
fi

over=0 under=0
printf '%-17s %10s %10s %8s\n' figure measured budget change
for f in "${figures[@]}"; do
    b=$(sed -n "s/^ *\"$f\": *\([0-9]*\).*/\1/p" "$BUDGET")
    [[ -n $b ]] || fail "$BUDGET has no budget for $f (make one with --update)"
    change=$(awk -v v="${value[$f]}" -v b="$b" 'BEGIN {printf "%+.1f%%", 100 * (v - b) / b}')
    verdict=""
    if ((value[$f] * 100 > b * (100 + TOLERANCE))); then
        verdict="  OVER BUDGET (more than +$TOLERANCE%)"
        over=$((over + 1))
    elif ((value[$f] * 100 < b * (100 - TOLERANCE))); then
        verdict="  more than $TOLERANCE% under: lower the budget (test/perf/callgrind.sh --update)"
        under=$((under + 1))
    fi
    printf '%-17s %10d %10d %8s%s\n' "$f" "${value[$f]}" "$b" "$change" "$verdict"
done
((over == 0)) || fail "$over figure(s) over budget"
if ((under > 0)); then
    echo "perf.callgrind: no figure over budget; $under more than $TOLERANCE% under it: lower the budget with test/perf/callgrind.sh --update"
else
    echo "perf.callgrind: every figure within $TOLERANCE% of $BUDGET"
fi
