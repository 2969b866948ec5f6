#!/usr/bin/env bash
# The shape LAYOUT.md asks for, checked: no source file outside test/ over 800 lines, no circle
# in the include graph (x.c, x.h and x_int.h are one module), and no untyped state in a session.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
fail=0
while read -r n f; do
    [[ $f == total ]] && continue
    if (( n > 800 )); then
        echo "layout: $f has $n lines (limit 800)"
        fail=1
    fi
done < <(wc -l core/*.[ch] core/mcp/*.[ch] transports/*.[ch] policy/*.[ch] upstream/*.[ch] cluster/*.[ch])
if ! python3 scripts/include-cycles.py; then
    fail=1
fi
if grep -nE '^\s+void \*' core/call/session.h; then
    echo "layout: core/call/session.h holds untyped (void *) state"
    fail=1
fi
(( fail == 0 )) && echo "layout: ok"
exit $fail
