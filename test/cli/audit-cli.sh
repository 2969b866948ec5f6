#!/usr/bin/env bash
# `tollgate audit keygen|pubkey|verify`: a key made, its public half printed (from the key and from
# a conf), chained files written by a generator of the test's own (test/cli/audit-gen.py: python3
# and openssl, not the gateway's code) verified, a checkpoint checked with jq and openssl as
# docs/operations.md shows, then the files tampered with; exit statuses and the lines printed.
# Usage: audit-cli.sh TOLLGATE
set -uo pipefail
tg=${1:?usage: audit-cli.sh path/to/tollgate}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
T=$(mktemp -d)
out=$T/out err=$T/err
trap 'rm -rf "$T"' EXIT
fails=0 n=0
# shellcheck source=lib.sh
source "$here/lib.sh"

# ---- keygen
run 0 audit keygen "$T/audit.key" && has err "wrote $T/audit.key (EC P-256, key_sha256 "
[[ $(stat -c %a "$T/audit.key") == 600 ]] || { echo "not ok - key mode $(stat -c %a "$T/audit.key"), want 600"; fails=$((fails + 1)); }
grep -q "BEGIN EC PRIVATE KEY" "$T/audit.key" || { echo "not ok - no PEM private key written"; fails=$((fails + 1)); }
run 1 audit keygen "$T/audit.key" && has err "File exists (not overwritten)"
run 2 audit keygen
run 2 audit keygen a b

# ---- pubkey: from the key, and from a conf's audit.signing_key (relative: from the conf's folder)
run 0 audit pubkey --key "$T/audit.key" && has out "-----BEGIN PUBLIC KEY-----" && has err "key_sha256 "
cp "$out" "$T/pub.pem"
keysha=$(sed -n 's/.*key_sha256 //p' "$err")
want=$(openssl pkey -in "$T/audit.key" -pubout -outform DER | sha256sum | cut -d' ' -f1)
[[ $keysha == "$want" ]] || { echo "not ok - key_sha256 $keysha, openssl says $want"; fails=$((fails + 1)); }
cmp -s "$T/pub.pem" <(openssl pkey -in "$T/audit.key" -pubout) || { echo "not ok - pubkey differs from openssl's"; fails=$((fails + 1)); }
printf 'audit = { file = "%s/audit.log"; signing_key = "audit.key"; };\n' "$T" >"$T/tollgate.conf"
run 0 audit pubkey -c "$T/tollgate.conf"
cmp -s "$out" "$T/pub.pem" || { echo "not ok - pubkey -c differs from pubkey --key"; fails=$((fails + 1)); }
printf 'audit = { file = "%s/audit.log"; };\n' "$T" >"$T/nokey.conf"
run 1 audit pubkey -c "$T/nokey.conf" && has err "no audit.signing_key"
run 2 audit pubkey
run 1 audit pubkey --key "$T/nokey.conf" && has err "not a private key in PEM or DER"

# ---- verify
python3 "$here/audit-gen.py" "$T/audit.key" "$T" || { echo "not ok - audit-gen.py failed"; exit 1; }
run 0 audit verify --key "$T/pub.pem" "$T"/audit.log*
has out "$T/audit.log.2: lines 1-10, seq 1-10: 8 records, 2 checkpoints (2 signed)"
has out "OK: 26 records, 5 checkpoints (5 signed), files $T/audit.log.2 $T/audit.log.1 $T/audit.log"
run 0 audit verify --closed --key "$T/pub.pem" "$T/audit.log" "$T/audit.log.1" "$T/audit.log.2" && has out "OK: 26 records"
run 0 audit verify "$T"/audit.log* && has out "note: signatures not checked (no --key)"
# The checkpoint's signature with jq and openssl alone (docs/operations.md).
command -v jq >/dev/null || { echo "not ok - jq is not installed (scripts/install-deps.sh --test installs it)"; exit 1; }
line=$(grep '"checkpoint"' "$T/audit.log.1" | head -1)
if printf '%s' "$line" | jq -cSj 'del(.event_hash,.signature)' |
    openssl dgst -sha256 -verify "$T/pub.pem" -signature <(printf '%s' "$line" | jq -r .signature | base64 -d) | grep -q "Verified OK"; then
    echo "ok - jq + openssl verify a checkpoint"
else
    echo "not ok - jq + openssl do not verify a checkpoint"; fails=$((fails + 1))
fi
ehash=$(printf '%s' "$line" | jq -cSj 'del(.event_hash)' | sha256sum | cut -d' ' -f1)
[[ $ehash == $(printf '%s' "$line" | jq -r .event_hash) ]] || { echo "not ok - jq + sha256sum: event_hash differs"; fails=$((fails + 1)); }

# Usage and I/O errors: 2.
run 2 audit verify
run 2 audit verify --bogus "$T/audit.log"
run 2 audit verify "$T/none.log" && has err "$T/none.log: No such file or directory"
run 2 audit verify --key "$T/none.pem" "$T/audit.log" && has err "not a PEM public or private key"
run 2 audit frobnicate
run 0 audit --help && has out "tollgate audit verify"
run 0 --help && has out "tollgate audit verify"

# Tampered with: 1, at the line.
cp "$T/audit.log.1" "$T/keep"
sed -i '4s/"tool":"read_3"/"tool":"read_9"/' "$T/audit.log.1"
run 1 audit verify --key "$T/pub.pem" "$T"/audit.log*
has out "FAIL: $T/audit.log.1:4 (seq 14): edited: the line does not match its event_hash"
cp "$T/keep" "$T/audit.log.1"
sed -i '4d' "$T/audit.log.1"
run 1 audit verify "$T"/audit.log* && has out "FAIL: $T/audit.log.1:4 (seq 15): removed: 1 line(s) missing before line 4 (seq jumps from 13 to 15)"
cp "$T/keep" "$T/audit.log.1"
sed -i '4{h;d};5G' "$T/audit.log.1" # swap lines 4 and 5
run 1 audit verify "$T"/audit.log* && has out "FAIL: $T/audit.log.1:4 (seq 15): reordered: line 4 (seq 15) continues from line 5 (seq 14), which comes after it"
cp "$T/keep" "$T/audit.log.1"
run 1 audit verify "$T/audit.log" "$T/audit.log.2"
has out "FAIL: $T/audit.log:1 (seq 23): missing file: seq 11 to 22 (12 line(s)) between $T/audit.log.2 and $T/audit.log are in no file given"
head -n 8 "$T/audit.log.1" >"$T/cut" && cp "$T/cut" "$T/audit.log.1"
run 1 audit verify "$T"/audit.log* && has out "FAIL: $T/audit.log.1:8 (seq 18): truncated: the file ends at seq 18 without a rotate checkpoint"
cp "$T/keep" "$T/audit.log.1"
openssl ecparam -name prime256v1 -genkey -noout 2>/dev/null | openssl pkey -pubout >"$T/other.pem"
run 1 audit verify --key "$T/other.pem" "$T"/audit.log*
has out "FAIL: $T/audit.log.2:1 (seq 1): bad signature: the checkpoint names key_sha256 "
# A crash: a torn last line is a note; with --closed, the chain does not end with a shutdown checkpoint.
printf '{"decision":"allow","tool":"wri' >>"$T/audit.log"
run 0 audit verify --key "$T/pub.pem" "$T"/audit.log* && has out "$T/audit.log:10: note: torn last line (not JSON"

echo "1..$n"
if ((fails > 0)); then
    echo "# $fails failure(s)"
    exit 1
fi
