#!/usr/bin/env bash
# Install dependencies, build with ASan+UBSan, and run every test through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
(cd test && npm ci --no-audit --no-fund --loglevel=error)
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTOLLGATE_SANITIZE=ON -DTOLLGATE_WERROR=ON >/dev/null
cmake --build build-asan -j"$(nproc)"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
cd build-asan
ctest --output-on-failure -j2 --timeout 300
