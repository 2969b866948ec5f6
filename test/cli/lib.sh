# Shared by the cli tests (sourced): run the tollgate binary "$tg", keep its stdout and stderr in
# "$out" and "$err", and count failures in $fails, TAP-style lines on stdout. The caller sets tg,
# out, err, fails=0 and n=0 first; TG_RUN_TIMEOUT (seconds) bounds each run when set (a conf
# that loads would start serving).

# run WANT_STATUS ARGS...: run tollgate, capture stdout/stderr, check the status.
run() {
    local want=$1; shift
    n=$((n + 1))
    last="tollgate $*"
    if [[ -n ${TG_RUN_TIMEOUT:-} ]]; then
        timeout "$TG_RUN_TIMEOUT" "$tg" "$@" >"$out" 2>"$err"
    else
        "$tg" "$@" >"$out" 2>"$err"
    fi
    local rc=$?
    if [[ $rc != "$want" ]]; then
        echo "not ok $n - $last: exit $rc, want $want"; sed 's/^/  stdout: /' "$out"; sed 's/^/  stderr: /' "$err"
        fails=$((fails + 1))
        return 1
    fi
    echo "ok $n - $last: exit $rc"
}
# has FILE(out|err) FIXED-STRING: the last run printed this line fragment.
has() {
    local f=$out; [[ $1 == err ]] && f=$err
    if ! grep -qF -- "$2" "$f"; then
        echo "not ok - $last: no \"$2\" on std$1"; sed "s/^/  std$1: /" "$f"
        fails=$((fails + 1))
    fi
}
# hasnt FILE(out|err) FIXED-STRING: the last run did not print it.
hasnt() {
    local f=$out; [[ $1 == err ]] && f=$err
    if grep -qF -- "$2" "$f"; then
        echo "not ok - $last: \"$2\" on std$1"; fails=$((fails + 1))
    fi
}
