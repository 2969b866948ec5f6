#!/usr/bin/env bash
# Checks conf/tollgate.service with systemd's own tools (ctest: lint.systemd):
#  - systemd-analyze verify: the unit parses, every directive is known, its commands exist; any
#    message it prints (a warning too) fails the check;
#  - systemd-analyze security --offline: the sandbox's exposure score (printed), which must stay
#    at or below MAX_EXPOSURE (0-100 scale; 11 is "1.1 OK" in systemctl's display).
# verify needs ExecStart's binary to exist, so the unit is checked as a copy whose
# /usr/local/bin/tollgate is the built binary (argument 1; default build-asan/tollgate); nothing
# else is changed. Needs systemd-analyze (Debian package systemd; scripts/install-deps.sh --test)
# but no running systemd: it works in a chroot.
# Usage: scripts/ci/check-systemd.sh [TOLLGATE_BINARY]
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${1:-$repo/build-asan/tollgate}
unit=$repo/conf/tollgate.service
MAX_EXPOSURE=${MAX_EXPOSURE:-15}

if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "check-systemd: FAIL: systemd-analyze is not installed, so conf/tollgate.service cannot be checked;" >&2
  echo "check-systemd: install Debian's systemd package (scripts/install-deps.sh --test does)" >&2
  exit 1
fi
[ -x "$bin" ] || { echo "check-systemd: FAIL: no tollgate binary at $bin (build it first)" >&2; exit 1; }
grep -q '^ExecStart=/usr/local/bin/tollgate ' "$unit" ||
  { echo "check-systemd: FAIL: $unit: ExecStart no longer starts /usr/local/bin/tollgate (update this script)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s#/usr/local/bin/tollgate#$bin#g" "$unit" > "$tmp/tollgate.service"

echo "== systemd-analyze verify conf/tollgate.service ($(systemd-analyze --version | head -1))"
rc=0
out=$(systemd-analyze verify "$tmp/tollgate.service" 2>&1) || rc=$?
if [ $rc -ne 0 ] || [ -n "$out" ]; then
  printf '%s\n' "$out" >&2
  echo "check-systemd: FAIL: systemd-analyze verify exited $rc and/or printed the messages above" >&2
  exit 1
fi
echo "verify: ok"

echo "== systemd-analyze security --offline=yes conf/tollgate.service"
rc=0
out=$(systemd-analyze security --offline=yes --threshold="$MAX_EXPOSURE" "$tmp/tollgate.service" 2>&1) || rc=$?
printf '%s\n' "$out" | grep -E '^✗|Overall exposure' || true
if [ $rc -ne 0 ]; then
  printf '%s\n' "$out" | tail -5 >&2
  echo "check-systemd: FAIL: exposure above $MAX_EXPOSURE/100 (a hardening directive was lost?) or security failed (exit $rc)" >&2
  exit 1
fi
echo "check-systemd: ok"
