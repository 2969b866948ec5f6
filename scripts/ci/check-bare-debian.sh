#!/usr/bin/env bash
# shellcheck disable=SC2317  # cleanup and check_* are called indirectly (trap, "check_$c")
# Runs the README's two commands, scripts/quickstart.sh and scripts/test.sh, on a bare Debian 12:
# a `debootstrap --variant=minbase bookworm` chroot that has nothing but Debian's packages (so
# Node 18 from apt), to catch what a developer machine with extra software installed hides.
#
# Usage (as root, on Debian with debootstrap):
#   scripts/ci/check-bare-debian.sh [-d DIR] [--reuse] [quickstart] [test]
#     -d DIR    the chroot (default /work/chroot-bookworm); it is made anew unless --reuse
#     --reuse   keep an existing chroot and what earlier runs installed in it (faster, less bare)
#     quickstart, test   which command(s) to check (default both, quickstart first, so that the
#               stand-in is seen to start on Debian's own Node before test.sh installs Node 22)
#
# The repository is the committed HEAD of the checkout this script is in, cloned to DIR/src.
# The machine's CA bundle, npm config, /etc/hosts and /etc/resolv.conf are copied in, so the
# package registries are reached as on the machine itself. /proc, /dev, /dev/pts and /sys are
# mounted inside while it runs and unmounted on exit. Logs: DIR/var/log/tollgate-check/.
# quickstart listens on 127.0.0.1:8080, 3333 and 9090 (its defaults; TOLLGATE_PORT, STANDIN_PORT and
# TOLLGATE_ADMIN_PORT are not set here), which must be free.
# Exit status 0 only if every command checked passed.
set -euo pipefail

chroot_dir=/work/chroot-bookworm
reuse=0
checks=()
while [ $# -gt 0 ]; do
  case $1 in
    -d) chroot_dir=$2; shift 2 ;;
    --reuse) reuse=1; shift ;;
    quickstart|test) checks+=("$1"); shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "check-bare-debian: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[ ${#checks[@]} -gt 0 ] || checks=(quickstart test)
[ "$(id -u)" -eq 0 ] || { echo "check-bare-debian: run as root (debootstrap, chroot, mount)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "check-bare-debian: apt-get install debootstrap" >&2; exit 2; }
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
chroot_dir=$(realpath -m "$chroot_dir")
case $chroot_dir in /|/usr|/etc|/work|/root|/home) echo "check-bare-debian: refusing -d $chroot_dir" >&2; exit 2 ;; esac

mounted() { grep -q " $1 " /proc/mounts; }
mounts=()
cleanup() {
  local i
  [ -z "${qs_pgid:-}" ] || kill -KILL -- "-$qs_pgid" 2>/dev/null || true
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount "${mounts[i]}" 2>/dev/null || umount -l "${mounts[i]}" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Nothing may stay mounted under the chroot before it is removed or reused.
if grep -q " $chroot_dir/" /proc/mounts; then
  echo "check-bare-debian: something is still mounted under $chroot_dir:" >&2
  grep " $chroot_dir/" /proc/mounts >&2
  exit 1
fi

t0=$SECONDS
if [ $reuse -eq 0 ] || [ ! -x "$chroot_dir/usr/bin/apt-get" ]; then
  rm -rf --one-file-system "$chroot_dir"
  echo "== debootstrap --variant=minbase bookworm $chroot_dir"
  debootstrap --variant=minbase bookworm "$chroot_dir" http://deb.debian.org/debian \
    > "/tmp/check-bare-debian.debootstrap.log" 2>&1 ||
    { tail -20 /tmp/check-bare-debian.debootstrap.log >&2; exit 1; }
fi
echo "== chroot ready ($((SECONDS - t0)) s)"

# A Debian 12 install's apt sources (with updates and security, as the installer writes them).
cat > "$chroot_dir/etc/apt/sources.list" <<'EOF'
deb http://deb.debian.org/debian bookworm main
deb http://deb.debian.org/debian bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
# Packages must not start their daemons (nginx-light would) inside the chroot.
printf '#!/bin/sh\nexit 101\n' > "$chroot_dir/usr/sbin/policy-rc.d"
chmod 755 "$chroot_dir/usr/sbin/policy-rc.d"
# Reach the registries as the machine does.
install -D -m 644 /etc/ssl/certs/ca-certificates.crt "$chroot_dir/etc/ssl/certs/ca-certificates.crt"
if [ -d /usr/local/share/ca-certificates ]; then
  mkdir -p "$chroot_dir/usr/local/share/ca-certificates"
  cp -a /usr/local/share/ca-certificates/. "$chroot_dir/usr/local/share/ca-certificates/"
fi
for f in /etc/hosts /etc/resolv.conf /etc/npmrc; do
  [ ! -e "$f" ] || cp -L "$f" "$chroot_dir$f"
done
[ ! -f "$HOME/.npmrc" ] || install -D -m 600 "$HOME/.npmrc" "$chroot_dir/root/.npmrc"

mount_in() { # mount_in TARGET mount-args...
  local target=$chroot_dir$1; shift
  mkdir -p "$target"
  mounted "$target" || { mount "$@" "$target"; mounts+=("$target"); }
}
mount_in /proc -t proc proc
mount_in /sys -t sysfs sysfs
mount_in /dev --bind /dev
mount_in /dev/pts --bind /dev/pts

rm -rf --one-file-system "$chroot_dir/src"
git clone -q "$repo" "$chroot_dir/src"
echo "== cloned $(git -C "$chroot_dir/src" log -1 --format='%h %s' | cut -c1-100)"
logs=$chroot_dir/var/log/tollgate-check
mkdir -p "$logs"

# A clean environment like a fresh login, plus the machine's CA variables (CI has them too).
envs=(HOME=/root LANG=C.UTF-8 TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
for v in NODE_EXTRA_CA_CERTS SSL_CERT_FILE SSL_CERT_DIR CURL_CA_BUNDLE REQUESTS_CA_BUNDLE; do
  [ -z "${!v:-}" ] || envs+=("$v=${!v}")
done
in_chroot() { chroot "$chroot_dir" /usr/bin/env -i "${envs[@]}" "$@"; }

status=0
summary=()

check_quickstart() {
  local port busy
  for port in 8080 3333 9090; do
    busy=$(ss -Hltn "sport = :$port" 2>/dev/null || true)
    [ -z "$busy" ] || { summary+=("quickstart: NOT RUN, port $port is in use here"); status=1; return; }
  done
  local t=$SECONDS log=$logs/quickstart.log
  echo "== quickstart (log: $log)"
  setsid chroot "$chroot_dir" /usr/bin/env -i "${envs[@]}" bash -c 'cd /src && exec scripts/quickstart.sh' \
    > "$log" 2>&1 < /dev/null &
  qs_pgid=$!
  # A background job of a non-interactive shell is no group leader, so setsid did not fork:
  # the job is the leader of its own session and process group.
  sleep 1
  [ "$(ps -o pgid= -p "$qs_pgid" | tr -d ' ')" = "$qs_pgid" ] ||
    echo "   warning: quickstart is not in process group $qs_pgid; stopping it may miss children" >&2
  local body='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}'
  local answer="" deadline=$((SECONDS + 1800))
  while [ $SECONDS -lt $deadline ] && kill -0 "$qs_pgid" 2>/dev/null; do
    answer=$(curl -s --max-time 5 http://127.0.0.1:8080/mcp -H 'Content-Type: application/json' \
      -H 'Accept: application/json, text/event-stream' -d "$body" 2>/dev/null || true)
    case $answer in *'"protocolVersion"'*) break ;; esac
    answer=""
    sleep 2
  done
  local took=$((SECONDS - t))
  # The stand-in's node, as quickstart picked it (Debian's, unless test.sh ran before).
  local node_v="" pid exe
  pid=$(pgrep -s "$qs_pgid" -f standin.mjs | head -1 || true)
  if [ -n "$pid" ] && exe=$(readlink "/proc/$pid/exe"); then
    exe=${exe#"$chroot_dir"}
    node_v="$exe $(in_chroot "$exe" --version 2>/dev/null || true)"
  fi
  kill -TERM -- "-$qs_pgid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 -- "-$qs_pgid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL -- "-$qs_pgid" 2>/dev/null || true
  wait "$qs_pgid" 2>/dev/null || true
  qs_pgid=""
  if [ -n "$answer" ]; then
    summary+=("quickstart: PASS, 127.0.0.1:8080 answered initialize after ${took} s (install + build + start; stand-in node: ${node_v:-?})")
    echo "   initialize answer: $(printf '%s' "$answer" | head -c 300)"
  else
    summary+=("quickstart: FAIL after ${took} s, no initialize answer on 127.0.0.1:8080; last lines of $log:")
    summary+=("$(tail -15 "$log")")
    status=1
  fi
}

check_test() {
  local t=$SECONDS log=$logs/test.log rc=0
  echo "== scripts/test.sh (timeout 5400 s; log: $log)"
  in_chroot bash -c 'cd /src && timeout 5400 scripts/test.sh' > "$log" 2>&1 < /dev/null || rc=$?
  local took=$((SECONDS - t))
  if [ $rc -eq 0 ]; then
    summary+=("test.sh: PASS in ${took} s: $(grep -E 'tests passed' "$log" | tail -1)")
  else
    summary+=("test.sh: FAIL (exit $rc) after ${took} s:")
    summary+=("$(sed -n '/tests passed\|tests failed/,$p' "$log" | head -40)")
    grep -qE 'tests (passed|failed)' "$log" || summary+=("$(tail -20 "$log")")
    status=1
  fi
}

for c in "${checks[@]}"; do "check_$c"; done
echo
echo "== bare Debian 12 (bookworm minbase) results, $((SECONDS - t0)) s in all"
printf '%s\n' "${summary[@]}"
exit $status
