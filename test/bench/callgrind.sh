#!/usr/bin/env bash
# Instructions per proxied tools/call, and per relayed stream message, counted by callgrind: a
# figure that does not move with the machine's load, for comparing two builds. Runs
# test/bench/run.sh's tollgate and tollgate-policy targets (2025 session calls), its
# tollgate-2026 and tollgate-2026-policy targets (the same call as a stateless 2026-07-28
# request), then test/bench/streams.sh's tollgate-post, tollgate-sse and tollgate-ws, with
# tollgate under valgrind --tool=callgrind, twice each (CG_SHORT and CG_LONG seconds), and
# reports the slope: (Ir_long - Ir_short) / (n_long - n_short), so start-up and shutdown cancel
# out.
#
#   test/bench/callgrind.sh [TOLLGATE_BIN...]     (default: build-rel/tollgate)
#
# Environment: UPSTREAM_BIN, STREAMS_BIN (default build-rel/test/bench/...), CG_SHORT (2),
# CG_LONG (6), CG_CONNS (4), CG_TARGETS (default: all seven). Needs valgrind. Loopback only,
# bounded time.
#
# Where the difference between two targets goes: CG_DIFF="A:B ..." (default
# "tollgate:tollgate-2026 tollgate-policy:tollgate-2026-policy", the pairs whose both targets
# ran) prints, per binary, the CG_TOP (10) functions whose inclusive Ir per call grew most
# from A to B, each function's inclusive Ir per call taken by the same slope from
# callgrind_annotate --inclusive=yes. CG_DIFF= (empty) turns it off; CG_KEEP=DIR keeps the
# gateway's callgrind files there (TARGET.BIN-INDEX.{short,long}.out) for callgrind_annotate.
set -euo pipefail
export LC_ALL=C # one collation for sort and join
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
command -v valgrind >/dev/null || { echo "callgrind.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
UPSTREAM_BIN=${UPSTREAM_BIN:-$root/build-rel/test/bench/tg-bench-upstream}
STREAMS_BIN=${STREAMS_BIN:-$root/build-rel/test/bench/tg-bench-streams}
TARGETS=${CG_TARGETS:-tollgate tollgate-policy tollgate-2026 tollgate-2026-policy tollgate-post tollgate-sse tollgate-ws}
DIFF=${CG_DIFF-tollgate:tollgate-2026 tollgate-policy:tollgate-2026-policy}
TOP=${CG_TOP:-10}
KEEP=${CG_KEEP:-}
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

# One run: prints "IR N FILE" (N: calls, or stream messages; FILE: the gateway's callgrind
# output) for target $2 of binary $1 over $3 s.
run_one() {
    local bin=$1 target=$2 secs=$3 dir n ir file
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
    read -r ir file < <(grep -H '^summary:' "$dir"/cg.*.out | awk -F: '{split($3, v, " "); print v[1], $1}' |
        sort -n | tail -n1)
    [[ -n $n && -n $ir ]] || { echo "callgrind.sh: $target on $bin failed: $(tail -n 5 "$dir/out.txt")" >&2; exit 1; }
    echo "$ir $n $file"
}

# Ir per function of callgrind file $2, inclusive ($1 = yes) or self ($1 = no), as
# "IR<TAB>FUNCTION" (names without the file and object, so that two builds' files compare).
# Functions without a symbol (0x...) and the frames above main are left out: every call passes
# through them, so they only repeat the total.
by_function() {
    callgrind_annotate --inclusive="$1" --threshold=100 "$2" 2>/dev/null |
        awk '/^ *[0-9][0-9,]* +\(/ && !/PROGRAM TOTALS/ {
                ir = $1; gsub(",", "", ir)
                line = $0; sub(/^ *[0-9,]+ +\([^)]*\) +/, "", line); sub(/ \[[^]]*\]$/, "", line)
                n = split(line, part, ":"); fn = part[n]
                if (fn ~ /^0x[0-9a-f]+/ || fn == "(below main)" || fn ~ /^__libc_start/) next
                if (!(fn in seen)) { seen[fn] = 1; printf "%s\t%s\n", ir, fn }
             }'
}

# Ir per call per function (inclusive: $3 = yes, self: no) of target $1 (binary index $2): the
# slope of its two runs.
per_call() {
    local t=$1 i=$2 incl=$3
    join -t $'\t' -1 2 -2 2 -a 2 -e 0 -o 0,1.1,2.1 \
        <(by_function "$incl" "${cg_file[$t.$i.short]}" | sort -t $'\t' -k2,2) \
        <(by_function "$incl" "${cg_file[$t.$i.long]}" | sort -t $'\t' -k2,2) |
        awk -F'\t' -v d="${cg_calls[$t.$i]}" '{printf "%s\t%.1f\n", $1, ($3 - $2) / d}'
}
declare -A cg_file cg_calls

printf '%-40s %-21s %12s\n' binary target "Ir per unit"
for bi in "${!bins[@]}"; do
    bin=${bins[$bi]}
    for target in $TARGETS; do
        read -r ir1 c1 f1 < <(run_one "$bin" "$target" "$SHORT")
        read -r ir2 c2 f2 < <(run_one "$bin" "$target" "$LONG")
        [[ -n ${ir1:-} && -n ${ir2:-} ]] || exit 1
        per=$(( (ir2 - ir1) / (c2 - c1) ))
        cg_file[$target.$bi.short]=$f1
        cg_file[$target.$bi.long]=$f2
        cg_calls[$target.$bi]=$((c2 - c1))
        if [[ -n $KEEP ]]; then
            mkdir -p "$KEEP"
            cp "$f1" "$KEEP/$target.$bi.short.out"
            cp "$f2" "$KEEP/$target.$bi.long.out"
        fi
        unit=call; [[ $target == tollgate-post || $target == tollgate-sse || $target == tollgate-ws ]] && unit=message
        printf '%-40s %-21s %12d per %-7s (%d: %d Ir; %d: %d Ir)\n' "$bin" "$target" "$per" "$unit" "$c1" "$ir1" "$c2" "$ir2"
    done
done

# ---- where the difference goes -----------------------------------------------------------
for bi in "${!bins[@]}"; do
    for pair in $DIFF; do
        a=${pair%%:*} b=${pair#*:}
        [[ -n ${cg_calls[$a.$bi]:-} && -n ${cg_calls[$b.$bi]:-} ]] || continue
        for incl in yes no; do
            kind=inclusive; [[ $incl == no ]] && kind=self
            printf '\n%s: %s Ir per call, %s -> %s, top %d by growth\n' "${bins[$bi]}" "$kind" "$a" "$b" "$TOP"
            printf '%12s %12s %12s  %s\n' "$a" "$b" difference function
            join -t $'\t' -a 1 -a 2 -e 0 -o 0,1.2,2.2 <(per_call "$a" "$bi" "$incl" | sort -t $'\t' -k1,1) \
                <(per_call "$b" "$bi" "$incl" | sort -t $'\t' -k1,1) |
                awk -F'\t' '{printf "%12.0f %12.0f %12.0f  %s\n", $2, $3, $3 - $2, $1}' | sort -k3,3nr |
                awk -v n="$TOP" 'NR <= n' # reads all its input: head would end sort with SIGPIPE
        done
    done
done
