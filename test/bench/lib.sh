# Shared by test/bench/run.sh, streams.sh and memory.sh: process bookkeeping that stops
# exactly what a benchmark started (by pid, never by name) on any exit, bounded waits,
# and loopback ports. Source it with BENCH_NAME set (the script's name, for messages).
# Optional: BENCH_STOP_TRIES (x 50 ms grace before SIGKILL, default 40) and a function
# bench_on_cleanup, run first by cleanup.

die() { echo "$BENCH_NAME: $*" >&2; exit 1; }
need() { command -v "$1" >/dev/null 2>&1 || die "$1 not found ($2)"; }

# Makes the temp dir ($tmp) and arms cleanup. $1 names it: /tmp/tg-$1.RANDOM.
bench_tmp() {
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/tg-$1.XXXXXX")
    pids=()
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Stops every process this script started, then removes the temp dir (kept on failure or
# with BENCH_KEEP_TMP=1). Runs on any exit, including failures and ^C.
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if declare -F bench_on_cleanup >/dev/null; then bench_on_cleanup; fi
    local p
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null || true
    done
    for p in "${pids[@]}"; do
        local tries=${BENCH_STOP_TRIES:-40}
        while ((tries-- > 0)) && kill -0 "$p" 2>/dev/null; do
            sleep 0.05
        done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    if [[ $rc -ne 0 || ${BENCH_KEEP_TMP:-0} == 1 ]]; then
        echo "$BENCH_NAME: logs and configs kept in $tmp" >&2
    else
        rm -rf "$tmp"
    fi
    exit "$rc"
}

# Drops a reaped pid from the cleanup list, so cleanup never signals a pid
# the kernel may have reused.
forget_pid() {
    local keep=() p
    for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    pids=("${keep[@]}")
}

# Waits (bounded) until "$@" succeeds; fails early if process $pid died,
# showing the end of its log.
wait_for() {
    local what=$1 pid=$2 secs=$3 log=$4
    shift 4
    local deadline=$((SECONDS + secs))
    until "$@"; do
        kill -0 "$pid" 2>/dev/null || die "$what exited; $log says:
$(tail -n 20 "$log" 2>/dev/null)"
        ((SECONDS < deadline)) || die "$what not ready after ${secs}s; $log says:
$(tail -n 20 "$log" 2>/dev/null)"
        sleep 0.05
    done
}

# Asks the kernel for a free loopback port. The port is released before the
# server binds it, which is racy in theory and fine on a benchmark machine.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The temp-file directives of an nginx.conf http block under DIR (nginx must not write outside
# the run's directory): run.sh, streams.sh and bench.sh write their own confs around them.
nginx_temp_paths() {
    local t
    for t in client_body proxy fastcgi uwsgi scgi; do
        printf '    %s_temp_path %s/tmp/%s;\n' "$t" "$1" "${t#client_}"
    done
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
