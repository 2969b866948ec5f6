#!/usr/bin/env bash
# The shape docs/architecture.md describes, checked:
#  - core/ keeps at most two .c files at its top level: the rest lives in floors (core/base ...);
#  - no gateway source file over 800 lines;
#  - no circle between modules, nor between rooms, and no room using a room above it, as the
#    linker sees them (link-graph.py reads
#    the built objects of BUILD_DIR with nm: a module uses a symbol another module defines);
#  - no untyped state in a session.
# scripts/lint/layout.sh [BUILD_DIR]   (default: build-asan)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
build=${1:-$root/build-asan}
fail=0
top=$(find core -maxdepth 1 -name '*.c' | wc -l)
if (( top > 2 )); then
    echo "layout: core/ has $top .c files at its top level (limit 2): put them in a floor"
    fail=1
fi
while read -r n f; do
    if (( n > 800 )); then
        echo "layout: $f has $n lines (limit 800)"
        fail=1
    fi
done < <(find core transports policy upstream cluster -name '*.[ch]' -exec wc -l {} + | grep -v ' total$')
if ! python3 scripts/lint/link-graph.py "$build"; then
    fail=1
fi
if grep -nE '^\s+void \*' core/call/session.h; then
    echo "layout: core/call/session.h holds untyped (void *) state"
    fail=1
fi
(( fail == 0 )) && echo "layout: ok"
exit $fail
