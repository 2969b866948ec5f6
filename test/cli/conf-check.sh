#!/usr/bin/env bash
# What `tollgate -t` refuses, start refuses too, with the same line: a listen address that is not
# an IP literal, a stdio program that is missing or not executable (looked up on the child's PATH),
# a policy or certificate that cannot be opened (the path tried and the OS reason). Relative paths
# in a conf are taken from the conf file's folder whatever the working directory, and no error
# has line 0. Usage: conf-check.sh TOLLGATE
set -uo pipefail
tg=$(realpath "${1:?usage: conf-check.sh path/to/tollgate}")
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
out=$d/out err=$d/err
fails=0 n=0
TG_RUN_TIMEOUT=20 # a conf that loads would start serving
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

no_line_zero() {
    if grep -q -- ':0:' "$err"; then
        echo "not ok - $last: an error with line 0"; sed 's/^/  stderr: /' "$err"; fails=$((fails + 1))
    fi
}
# refused NAME FRAGMENT: -t and start both exit 1 and print the fragment, never a line 0.
refused() {
    local c=$d/$1.conf
    run 1 -t -c "$c" && has err "$2" && has err "configuration $c is invalid"; no_line_zero
    run 1 -c "$c" && has err "$2"; no_line_zero
}

L='listen = ( { address = "127.0.0.1"; port = 0; } );'
G='grants = ( { name = "local"; anonymous = true; } );'
U='upstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "p.json"; } );'
echo '{"version":"1","default":"deny","tools":{}}' >"$d/p.json"
printf '#!/bin/sh\nexit 0\n' >"$d/not-exec" && chmod 644 "$d/not-exec"

printf 'listen = ( { address = "localhost"; port = 0; } );\n%s\n%s\n' "$G" "$U" >"$d/hostname.conf"
refused hostname "hostname.conf:1: address: \"localhost\" is not an IP address; host names are not looked up"

printf '%s\n%s\nupstreams = ( { name = "s"; policy = "p.json";\n  command = [ "tg-no-such-program-29" ]; } );\n' "$L" "$G" >"$d/nocmd.conf"
refused nocmd "nocmd.conf:4: command: \"tg-no-such-program-29\" is not found on the PATH the process gets"

# On the child's PATH: env sets it, so a program only there is found (and one only on the
# gateway's PATH is not).
mkdir -p "$d/bin" && printf '#!/bin/sh\nexit 0\n' >"$d/bin/tg-only-here" && chmod 755 "$d/bin/tg-only-here"
printf '%s\n%s\nupstreams = ( { name = "s"; policy = "p.json";\n  command = [ "tg-only-here" ]; env = { PATH = "%s"; }; } );\n' \
    "$L" "$G" "$d/bin" >"$d/childpath.conf"
run 0 -t -c "$d/childpath.conf" && has out "is ok"
printf '%s\n%s\nupstreams = ( { name = "s"; policy = "p.json";\n  command = [ "sh" ]; env = { PATH = "%s"; }; } );\n' \
    "$L" "$G" "$d/bin" >"$d/notonchildpath.conf"
refused notonchildpath "\"sh\" is not found on the PATH the process gets ($d/bin)"

printf '%s\n%s\nupstreams = ( { name = "s"; policy = "p.json";\n  command = [ "./not-exec" ]; } );\n' "$L" "$G" >"$d/noexec.conf"
refused noexec "noexec.conf:4: command: $d/./not-exec is not an executable file"

printf '%s\n%s\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp";\n  policy = "missing.json"; } );\n' "$L" "$G" >"$d/nopolicy.conf"
refused nopolicy "$d/missing.json: cannot open: No such file or directory"

cp "$d/p.json" "$d/unreadable.json" && chmod 000 "$d/unreadable.json"
if [[ $(id -u) != 0 ]]; then # root reads it anyway
    printf '%s\n%s\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp";\n  policy = "unreadable.json"; } );\n' "$L" "$G" >"$d/unreadable.conf"
    refused unreadable "$d/unreadable.json: cannot open: Permission denied"
fi

printf 'listen = ( { address = "127.0.0.1"; port = 0;\n  tls = { cert = "tls/server.crt"; key = "tls/server.key"; }; } );\n%s\n%s\n' "$G" "$U" >"$d/nocert.conf"
refused nocert "nocert.conf:2: cert: cannot open $d/tls/server.crt: No such file or directory"

# A certificate that opens but is not one: -t parses it as start does.
mkdir -p "$d/tls" && echo 'not a certificate' >"$d/tls/server.crt" && echo 'not a key' >"$d/tls/server.key"
printf 'listen = ( { address = "127.0.0.1"; port = 0;\n  tls = { cert = "tls/server.crt"; key = "tls/server.key"; }; } );\n%s\n%s\n' "$G" "$U" >"$d/badcert.conf"
run 1 -t -c "$d/badcert.conf" && has err "listen[0].tls: " && has err "is invalid"
run 1 -c "$d/badcert.conf" && has err "TLS setup failed"

# Two sockets on one port (listen[] and admin): start fails on the second bind ("address already
# in use"); -t says so first. The same address, a wildcard of its family, or :: (which takes IPv4
# too). Port 0 is any free port, never a clash.
port=$((20000 + $$ % 20000))
printf 'listen = ( { address = "127.0.0.1"; port = %d; },
  { address = "127.0.0.1"; port = %d; } );
%s
%s
' "$port" "$port" "$G" "$U" >"$d/twice.conf"
refused twice "twice.conf:2: listen[1]: 127.0.0.1 port $port is listen[0]'s too (127.0.0.1)"
printf 'listen = ( { address = "::"; port = %d; } );
admin = { address = "127.0.0.1"; port = %d; };
%s
%s
' "$port" "$port" "$G" "$U" >"$d/adminport.conf"
refused adminport "adminport.conf:2: admin: 127.0.0.1 port $port is listen[0]'s too (::)"
printf 'listen = ( { address = "0.0.0.0"; port = %d; }, { address = "::1"; port = %d; },
  { address = "127.0.0.1"; port = 0; }, { address = "127.0.0.1"; port = 0; } );
%s
%s
' "$port" "$port" "$G" "$U" >"$d/nottwice.conf"
run 0 -t -c "$d/nottwice.conf" && has out "is ok"

# Approvals: holding a call past what clients wait for is allowed, with a warning saying why; a
# mode that does not exist is an error on its line.
printf '%s\n%s\n%s\nlimits = { approval_hold_max_ms = 120000; };\n' "$L" "$G" "$U" >"$d/holdmax.conf"
run 0 -t -c "$d/holdmax.conf" && has out "limits.approval_hold_max_ms: above 60 s, a held call outlives its client"
printf '%s\n%s\n%s\nlimits = { approval_hold_max_ms = 55000; };\n' "$L" "$G" "$U" >"$d/holdok.conf"
run 0 -t -c "$d/holdok.conf" && hasnt out "approval_hold_max_ms"
printf '%s\n%s\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "p.json";\n  approval_mode = "wait"; } );\n' "$L" "$G" >"$d/mode.conf"
refused mode 'mode.conf:4: approval_mode: must be "hold", "retry" or "task"'
# The webhook's queue: 2 at least (the event in flight stays while one more waits).
head -c 32 /dev/urandom | base64 >"$d/hook.key" && chmod 600 "$d/hook.key"
H='approvals = { webhook = { url = "http://127.0.0.1:1/hook"; secret_file = "hook.key";'
printf '%s\n%s\n%s\n%s\n  queue = 1; }; };\n' "$L" "$G" "$U" "$H" >"$d/hookq.conf"
refused hookq 'hookq.conf:5: approvals.webhook.queue: must be an integer in 2..1000000'
printf '%s\n%s\n%s\n%s\n  queue = 2; }; };\n' "$L" "$G" "$U" "$H" >"$d/hookq2.conf"
run 0 -t -c "$d/hookq2.conf" && has out "is ok"

# Broken in ways libconfig gives no line for: each error names a line of the file, or none.
printf 'listen = ( 1 );\ngrants = ( 2 );\nupstreams = ( );\n' >"$d/shapes.conf"
run 1 -t -c "$d/shapes.conf"; no_line_zero
run 1 -t -c "$d/does-not-exist.conf" && has err "$d/does-not-exist.conf: cannot open: No such file or directory"; no_line_zero

# Relative paths: from the conf's folder, whatever the working directory.
printf '%s\n%s\n%s\n' "$L" "$G" "$U" >"$d/rel.conf"
cd / && run 0 -t -c "$d/rel.conf" && has out "is ok"
cd "$d/bin" && run 0 -t -c ../rel.conf && has out "is ok"
# The shipped conf, from the source root as the quick start runs it and from elsewhere.
cd "$root" && run 0 -t -c conf/tollgate.conf && has out "is ok"
cd / && run 0 -t -c "$root/conf/tollgate.conf" && has out "is ok"

echo "$n runs, $fails failures"
(( fails == 0 ))
