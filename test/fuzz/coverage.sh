#!/usr/bin/env bash
# Source coverage of the gateway reached by the fuzz corpora: builds the replay drivers
# (fuzz_NAME_replay) with clang's source-based coverage in their own build directory, replays each
# target's corpus and regression inputs, and prints a per-file table of line and function coverage
# for the gateway's own files (core/, transports/, upstream/, policy/), then a summary per folder.
#
#   test/fuzz/coverage.sh [CORPUS_ROOT]
#
# CORPUS_ROOT holds one folder per target (default test/fuzz/corpus); test/fuzz/regress/NAME is
# always replayed too. Environment: BUILD (default build-cov), TARGETS (default: all eight),
# LLVM_SUFFIX (default -14: llvm-profdata-14, llvm-cov-14; Debian packages clang-14 and llvm-14).
# A gateway file linked into no replay driver has no coverage mapping: it is listed as "not
# linked" with its wc -l line count, and left out of its folder's percentages (the summary says
# how many such files and lines each folder has).
# The merged profile and the llvm-cov report stay in $BUILD/coverage/ (llvm-cov show for lines).
set -euo pipefail
cd "$(dirname "$0")/../.."
SRC=$PWD
BUILD=${BUILD:-build-cov}
ROOT=${1:-test/fuzz/corpus}
SUFFIX=${LLVM_SUFFIX--14}
TARGETS=${TARGETS:-json http1 ws e2e headers2026 policy conf upstream}
PROFDATA=llvm-profdata$SUFFIX
COV=llvm-cov$SUFFIX
for tool in clang "$PROFDATA" "$COV"; do
    command -v "$tool" >/dev/null || { echo "coverage.sh: $tool not found" >&2; exit 1; }
done

if [ ! -f "$BUILD/CMakeCache.txt" ]; then
    CC=clang cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_C_FLAGS='-fprofile-instr-generate -fcoverage-mapping' \
        -DCMAKE_EXE_LINKER_FLAGS='-fprofile-instr-generate' >/dev/null
fi
bins=()
for t in $TARGETS; do bins+=("fuzz_${t}_replay"); done
cmake --build "$BUILD" -j"${JOBS:-1}" --target "${bins[@]}" >/dev/null

OUT=$BUILD/coverage
rm -rf "$OUT"
mkdir -p "$OUT"
objects=()
for t in $TARGETS; do
    bin=$BUILD/test/fuzz/fuzz_${t}_replay
    [ -d "$ROOT/$t" ] || { echo "coverage.sh: no corpus $ROOT/$t" >&2; exit 1; }
    # The replay driver aborts on a crash; a failed property is a failure here too.
    LLVM_PROFILE_FILE="$OUT/$t.profraw" "$bin" "$ROOT/$t" "test/fuzz/regress/$t" >"$OUT/$t.log" 2>&1 ||
        { echo "coverage.sh: $t replay failed, see $OUT/$t.log" >&2; exit 1; }
    printf '%-12s %s\n' "$t" "$(tail -n 1 "$OUT/$t.log")"
    if [ ${#objects[@]} -eq 0 ]; then objects+=("$bin"); else objects+=(-object "$bin"); fi
done
"$PROFDATA" merge -sparse -o "$OUT/all.profdata" "$OUT"/*.profraw
"$COV" report "${objects[@]}" -instr-profile="$OUT/all.profdata" \
    --show-region-summary=false --show-branch-summary=false >"$OUT/report.txt"

# report.txt rows: Filename Functions Missed Executed% Lines Missed Cover%. Keep the gateway's
# files (paths made relative to the source tree), add the unlinked ones, and sum per folder.
echo
find core transports upstream policy -name '*.c' | sort >"$OUT/sources.txt"
awk -v src="$SRC/" -v srclist="$OUT/sources.txt" '
    function pct(a, b) { return b ? sprintf("%6.1f%%", 100 * a / b) : "     -" }
    function dir(f) { sub(/\/[^\/]*$/, "", f); sub(/\/.*/, "", f); return f }
    BEGIN {
        while ((getline f < srclist) > 0) { want[f] = 1; order[++n] = f }
        printf "%-32s %15s %8s %13s %8s\n", "file", "lines", "", "functions", ""
    }
    {
        f = $1
        if (index(f, src) == 1) f = substr(f, length(src) + 1)
        else if (index("/" f, src) == 1) f = substr("/" f, length(src) + 1)
        if (!(f in want) && !(f ~ /^(core|transports|upstream|policy)\/.*\.h$/)) next
        if ($5 == 0) next
        fn[f] = $2; fnhit[f] = $2 - $3; ln[f] = $5; lnhit[f] = $5 - $6
        if (!(f in want)) order[++n] = f
    }
    END {
        for (i = 1; i <= n; i++) {
            f = order[i]
            if (f in ln) {
                printf "%-32s %7d/%-7d %s %6d/%-6d %s\n", f, lnhit[f], ln[f], pct(lnhit[f], ln[f]),
                       fnhit[f], fn[f], pct(fnhit[f], fn[f])
                d = dir(f); L[d] += ln[f]; LH[d] += lnhit[f]; F[d] += fn[f]; FH[d] += fnhit[f]
            } else {
                cmd = "wc -l < " f; cmd | getline lines; close(cmd)
                printf "%-32s %15s  not linked (%d lines)\n", f, "", lines
                d = dir(f); U[d]++; UL[d] += lines
            }
        }
        printf "\n%-12s %15s %8s %13s %8s  %s\n", "folder", "lines", "", "functions", "", "not linked"
        split("core transports upstream policy", ds, " ")
        for (i = 1; i <= 4; i++) {
            d = ds[i]
            printf "%-12s %7d/%-7d %s %6d/%-6d %s  %d file(s), %d lines\n", d, LH[d], L[d],
                   pct(LH[d], L[d]), FH[d], F[d], pct(FH[d], F[d]), U[d], UL[d]
            tl += L[d]; th += LH[d]; tf += F[d]; tfh += FH[d]
        }
        printf "%-12s %7d/%-7d %s %6d/%-6d %s\n", "all", th, tl, pct(th, tl), tfh, tf, pct(tfh, tf)
    }' "$OUT/report.txt"
