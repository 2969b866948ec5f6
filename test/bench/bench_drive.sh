# shellcheck shell=bash disable=SC2154  # sourced by bench.sh, whose variables these are
# The drivers of test/bench/bench.sh, sourced by it (they use its variables: tmp, here, pids,
# CONNS, SCONNS, DURATION, EVENTS, MEM_SESSIONS, hz, round, and record/cpu_ticks/sys_ticks/rss_kb).
# Each measures one target once and appends its figures with record ROW TARGET KEY VALUE;
# bench_report.py takes the medians of the rounds.

PROTO=2025-06-18
PROTO_2026=2026-07-28

# mcp_session URL: initialize + notifications/initialized with curl (as run.sh); prints the
# session id. Any failure stops the run with the reply.
mcp_session() {
    local url=$1 d=$2 code sid
    local -a k=()
    [[ $url == https:* ]] && k=(-k)
    code=$(curl -sS "${k[@]}" -o "$d/init.body" -D "$d/init.headers" -w '%{http_code}' --max-time 10 -X POST "$url" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        --data-binary '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"'"$PROTO"'","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}') ||
        die "$url: initialize failed (curl)"
    [[ $code == 200 ]] && grep -q '"result"' "$d/init.body" ||
        die "$url: initialize returned HTTP $code: $(head -c 300 "$d/init.body")"
    sid=$(tr -d '\r' <"$d/init.headers" | awk -F': *' 'tolower($1)=="mcp-session-id" {print $2; exit}')
    [[ -n $sid ]] || die "$url: initialize reply has no Mcp-Session-Id header"
    code=$(curl -sS "${k[@]}" -o /dev/null -w '%{http_code}' --max-time 10 -X POST "$url" \
        -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
        -H "Mcp-Session-Id: $sid" -H "MCP-Protocol-Version: $PROTO" \
        --data-binary '{"jsonrpc":"2.0","method":"notifications/initialized"}') ||
        die "$url: notifications/initialized failed (curl)"
    [[ $code == 202 || $code == 200 ]] || die "$url: notifications/initialized returned HTTP $code"
    echo "$sid"
}

# drive_wrk ROW TARGET URL ERA PROXY_PID [CONNECTIONS]: wrk + call.lua for DURATION s on CONNS
# connections (or CONNECTIONS; the hop row runs one call at a time).
drive_wrk() {
    local row=$1 target=$2 url=$3 era=$4 pid=$5 conns=${6:-$CONNS} d=$tmp/run/$1-$2-$round sid="" proto=$PROTO
    mkdir -p "$d"
    if [[ $era == 2025 ]]; then
        sid=$(mcp_session "$url" "$d")
    else
        proto=$PROTO_2026
    fi
    echo "== $row/$target: $url (${DURATION}s, $conns connections, $era)" >&2
    local c0 c1 s0 s1 wrc=0
    c0=$(cpu_ticks "$pid")
    s0=$(sys_ticks "$pid")
    MCP_ERA=$era MCP_SESSION_ID=$sid MCP_PROTOCOL_VERSION=$proto \
        wrk -t1 -c"$conns" -d"${DURATION}s" --timeout 5s --latency -s "$here/call.lua" "$url" \
        >"$d/wrk.out" 2>&1 &
    local wpid=$!
    pids+=("$wpid")
    wait "$wpid" || wrc=$?
    forget_pid "$wpid"
    c1=$(cpu_ticks "$pid")
    s1=$(sys_ticks "$pid")
    ((wrc == 0)) || die "$row/$target: wrk failed (exit $wrc): $(tail -n 5 "$d/wrk.out")"
    local line kv
    line=$(grep '^BENCH_RESULT ' "$d/wrk.out") || die "$row/$target: no BENCH_RESULT from call.lua: $(tail -n 5 "$d/wrk.out")"
    local -A r=()
    for kv in ${line#BENCH_RESULT }; do r[${kv%%=*}]=${kv#*=}; done
    local e=$((r[non200] + r[badbody] + r[connect] + r[read] + r[write] + r[timeout]))
    ((r[requests] > 0)) || die "$row/$target: no requests completed"
    ((e == 0)) || die "$row/$target: $e errors (non200=${r[non200]} badbody=${r[badbody]} connect=${r[connect]} read=${r[read]} write=${r[write]} timeout=${r[timeout]}) $(grep '^BENCH_FIRST_BAD' "$d/wrk.out" | cut -c17- || true)"
    record "$row" "$target" rps "${r[rps]}"
    [[ $row != cluster ]] || cluster_calls=$((cluster_calls + r[requests]))
    record "$row" "$target" p50_ms "$(awk -v u="${r[p50_us]}" 'BEGIN {printf "%.3f", u / 1000}')"
    record "$row" "$target" p99_ms "$(awk -v u="${r[p99_us]}" 'BEGIN {printf "%.3f", u / 1000}')"
    record "$row" "$target" cpu_us_per_req "$(awk -v t=$((c1 - c0)) -v h="$hz" -v n="${r[requests]}" 'BEGIN {printf "%.2f", t / h * 1e6 / n}')"
    record "$row" "$target" cpu_sys_us_per_req "$(awk -v t=$((s1 - s0)) -v h="$hz" -v n="${r[requests]}" 'BEGIN {printf "%.2f", t / h * 1e6 / n}')"
    record "$row" "$target" rss_kb "$(rss_kb "$pid")"
    echo "   $(printf '%s/s  p50 %s us  p99 %s us' "${r[rps]}" "${r[p50_us]}" "${r[p99_us]}")" >&2
}

# drive_stream ROW TARGET MODE URL PROXY_PID: tg-bench-streams, SCONNS sessions each calling the
# stream tool (EVENTS progress notifications + the result) in a loop; 1 s warmup + DURATION s.
drive_stream() {
    local row=$1 target=$2 smode=$3 url=$4 pid=$5 out=$tmp/run/$1-$2-$round.streams
    mkdir -p "$tmp/run"
    echo "== $row/$target: $smode $url ($SCONNS streams, 1+${DURATION}s, $EVENTS events per call)" >&2
    local c0 c1 s0 s1 crc=0
    c0=$(cpu_ticks "$pid")
    s0=$(sys_ticks "$pid")
    "$STREAMS_BIN" --mode "$smode" --url "$url" --conns "$SCONNS" --duration "$DURATION" --warmup 1 \
        --events "$EVENTS" >"$out" 2>&1 &
    local cpid=$!
    pids+=("$cpid")
    wait "$cpid" || crc=$?
    forget_pid "$cpid"
    c1=$(cpu_ticks "$pid")
    s1=$(sys_ticks "$pid")
    ((crc == 0)) || die "$row/$target: tg-bench-streams failed (exit $crc): $(tail -n 3 "$out")"
    local line kv
    line=$(grep '^RESULT ' "$out") || die "$row/$target: no RESULT line: $(tail -n 3 "$out")"
    local -A r=()
    for kv in ${line#RESULT }; do r[${kv%%=*}]=${kv#*=}; done
    record "$row" "$target" events_per_s "${r[messages_per_s]}"
    # CPU over warmup + measurement, per message at the measured rate.
    record "$row" "$target" cpu_us_per_msg "$(awk -v t=$((c1 - c0)) -v h="$hz" -v s=$((DURATION + 1)) -v m="${r[messages_per_s]}" \
        'BEGIN {printf "%.3f", (m > 0 ? t / h / s / m * 1e6 : 0)}')"
    record "$row" "$target" cpu_sys_us_per_msg "$(awk -v t=$((s1 - s0)) -v h="$hz" -v s=$((DURATION + 1)) -v m="${r[messages_per_s]}" \
        'BEGIN {printf "%.3f", (m > 0 ? t / h / s / m * 1e6 : 0)}')"
    record "$row" "$target" rss_kb "$(rss_kb "$pid")"
    echo "   ${r[messages_per_s]} messages/s" >&2
    # The WebSocket row is compared with nginx relaying the same stream as SSE, in this round, and
    # shows the same direct figure (the upstream serving the stream itself).
    if [[ $row == sse && ($target == nginx || $target == direct) ]]; then
        local k
        for k in events_per_s cpu_us_per_msg cpu_sys_us_per_msg rss_kb; do
            record ws "$target" "$k" "$(awk -v r=sse -v t="$target" -v k="$k" '$1 == r && $2 == t && $3 == k {v = $4} END {print v}' "$rec")"
        done
    fi
}

# drive_idle_nginx BASE: nginx's RSS growth per idle keep-alive connection, measured as
# memory.sh measures tollgate's (idle_sessions.mjs --transport http: initialize and
# notifications/initialized on each connection, then left open), MEM_SESSIONS of them.
drive_idle_nginx() {
    local base=$1 d=$tmp/idle-nginx
    mkdir -p "$d"
    echo "== mem/nginx: $MEM_SESSIONS idle keep-alive connections at $base" >&2
    local r0 r1
    r0=$(rss_kb "$nginx_pid")
    mkfifo "$d/ctl"
    "$NODE_BIN" "$here/idle_sessions.mjs" --transport http --base "$base" --count "$MEM_SESSIONS" --batch 200 \
        <"$d/ctl" >"$d/client.out" 2>"$d/client.err" &
    local cl=$!
    pids+=("$cl")
    exec 7>"$d/ctl"
    client_ready() { grep -q '^READY\|^ERROR' "$d/client.out"; }
    wait_for "idle client (nginx)" "$cl" 300 "$d/client.err" client_ready
    grep -q '^READY' "$d/client.out" || die "mem/nginx: $(grep '^ERROR' "$d/client.out")"
    sleep 2
    r1=$(rss_kb "$nginx_pid")
    echo close >&7
    exec 7>&-
    local tries=100
    while ((tries-- > 0)) && kill -0 "$cl" 2>/dev/null; do sleep 0.1; done
    kill -TERM "$cl" 2>/dev/null || true
    wait "$cl" 2>/dev/null || true
    forget_pid "$cl"
    # What an idle connection costs nginx: its RSS growth plus the connection slot it occupies.
    local growth=$(((r1 - r0) * 1024 / MEM_SESSIONS)) slot
    slot=$(awk '$1 == "mem" && $2 == "nginx" && $3 == "slot_bytes" {print $4; exit}' "$rec")
    record mem nginx growth_bytes_per_session "$growth"
    record mem nginx bytes_per_session "$((growth + slot))"
    record mem nginx rss_kb "$r1"
    echo "   VmRSS $r0 -> $r1 kB" >&2
}

# drive_memory_sh: memory.sh's http and http/tls cases (a fresh tollgate each) with MEM_SESSIONS.
drive_memory_sh() {
    echo "== mem/tollgate: memory.sh http http/tls, $MEM_SESSIONS sessions" >&2
    local out=$tmp/memory.txt mrc=0
    MEM_SESSIONS=$MEM_SESSIONS MEM_RESULTS=$out TOLLGATE_BIN=$TOLLGATE_BIN UPSTREAM_BIN=$UPSTREAM_BIN \
        NODE_BIN=$NODE_BIN "$here/memory.sh" http http/tls >"$tmp/memory.log" 2>&1 &
    local mpid=$!
    pids+=("$mpid")
    wait "$mpid" || mrc=$?
    forget_pid "$mpid"
    ((mrc == 0)) || die "memory.sh failed (exit $mrc): $(tail -n 8 "$tmp/memory.log")"
    sed 's/^/   /' "$out" >&2
    local c target
    for c in http http/tls; do
        target=tollgate
        [[ $c == http/tls ]] && target=tollgate-tls
        # columns: case sessions conns open_s RSS0 RSS1 B/sess-RSS ...
        record mem "$target" bytes_per_session "$(awk -v c="$c" '$1 == c {print $7; exit}' "$out")"
        record mem "$target" rss_kb "$(awk -v c="$c" '$1 == c {print $6; exit}' "$out")"
    done
}
