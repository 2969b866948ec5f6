#!/usr/bin/env bash
# Instructions per proxied tools/call, and per relayed stream message, counted by callgrind: a
# figure that does not move with the machine's load, for comparing two builds. Runs
# test/bench/run.sh's tollgate and tollgate-policy targets, then test/bench/streams.sh's
# tollgate-post, tollgate-sse and tollgate-ws, with tollgate under valgrind --tool=callgrind,
# twice each (CG_SHORT and CG_LONG seconds), and reports the slope: (Ir_long - Ir_short) /
# (n_long - n_short), so start-up and shutdown cancel out.
#
#   test/bench/callgrind.sh [TOLLGATE_BIN...]     (default: build-rel/tollgate)
#
# Environment: UPSTREAM_BIN, STREAMS_BIN (default build-rel/test/bench/...), CG_SHORT (2),
# CG_LONG (6), CG_CONNS (4), CG_TARGETS (default: all five). Needs valgrind. Loopback only,
# bounded time.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
command -v valgrind >/dev/null || { echo "callgrind.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
UPSTREAM_BIN=${UPSTREAM_BIN:-$root/build-rel/test/bench/tg-bench-upstream}
STREAMS_BIN=${STREAMS_BIN:-$root/build-rel/test/bench/tg-bench-streams}
TARGETS=${CG_TARGETS:-tollgate tollgate-policy tollgate-post tollgate-sse tollgate-ws}
SHORT=${CG_SHORT:-2}
LONG=${CG_LONG:-6}
CONNS=${CG_CONNS:-4}
bins=("$@")
[[ ${#bins[@]} -gt 0 ]] || bins=("$root/build-rel/tollgate")
tmp=$(mktemp -d /tmp/tg-callgrind.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/wrap.sh" <<'WRAP'
#!/bin/bash
# tollgate -t (the config check) runs too: each process gets its own file.
exec valgrind --tool=callgrind --callgrind-out-file="$CG_DIR/cg.%p.out" "$CG_REAL" "$@"
WRAP
chmod +x "$tmp/wrap.sh"

# One run: prints "IR N" (N: calls, or stream messages) for target $2 of binary $1 over $3 s.
run_one() {
    local bin=$1 target=$2 secs=$3 dir n ir
    dir=$(mktemp -d "$tmp/run.XXXXXX")
    case $target in
    tollgate-post|tollgate-sse|tollgate-ws)
        CG_DIR=$dir CG_REAL=$bin STREAMS_DURATION=$secs STREAMS_WARMUP=1 STREAMS_CONNS=$CONNS STREAMS_EVENTS=200 \
            STREAMS_RESULTS=$dir/results.txt TOLLGATE_BIN=$tmp/wrap.sh UPSTREAM_BIN=$UPSTREAM_BIN \
            STREAMS_BIN=$STREAMS_BIN "$here/streams.sh" "$target" >"$dir/out.txt" 2>&1
        # every message the client received, warmup included (tollgate relayed them all)
        n=$(grep -o 'all_messages=[0-9]*' "$dir/out.txt" | head -n1 | cut -d= -f2);;
    *)
        CG_DIR=$dir CG_REAL=$bin BENCH_DURATION=$secs BENCH_CONNS=$CONNS BENCH_RESULTS=$dir/results.txt \
            TOLLGATE_BIN=$tmp/wrap.sh UPSTREAM_BIN=$UPSTREAM_BIN "$here/run.sh" "$target" >"$dir/out.txt" 2>&1
        n=$(grep -o 'BENCH_RESULT requests=[0-9]*' "$dir/out.txt" | head -n1 | cut -d= -f2);;
    esac
    # The gateway is the process that ran longest.
    ir=$(grep -h '^summary:' "$dir"/cg.*.out | awk '{print $2}' | sort -n | tail -n1)
    echo "$ir $n"
}

printf '%-40s %-16s %12s\n' binary target "Ir per unit"
for bin in "${bins[@]}"; do
    for target in $TARGETS; do
        read -r ir1 c1 < <(run_one "$bin" "$target" "$SHORT")
        read -r ir2 c2 < <(run_one "$bin" "$target" "$LONG")
        per=$(( (ir2 - ir1) / (c2 - c1) ))
        unit=call; [[ $target == tollgate-post || $target == tollgate-sse || $target == tollgate-ws ]] && unit=message
        printf '%-40s %-16s %12d per %-7s (%d: %d Ir; %d: %d Ir)\n' "$bin" "$target" "$per" "$unit" "$c1" "$ir1" "$c2" "$ir2"
    done
done
