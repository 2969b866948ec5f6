#!/usr/bin/env python3
"""Chained audit files as the gateway writes them, made independently of its C code (for
test/cli/audit-cli.sh): canonical lines (keys sorted, no whitespace), event_hash = SHA-256 of the
line without it, previous_hash and seq, checkpoints signed by `openssl dgst -sha256 -sign` over the
line without event_hash and signature.

usage: audit-gen.py PRIV.pem DIR
writes DIR/audit.log.2 (seq 1-10: a start checkpoint, 8 records, a rotate checkpoint),
DIR/audit.log.1 (seq 11-22: 8 records, a lines checkpoint, 2 records, a rotate checkpoint) and
DIR/audit.log (seq 23-31: 8 records, a shutdown checkpoint)."""
import base64
import hashlib
import json
import os
import subprocess
import sys

key, out = sys.argv[1], sys.argv[2]
der = subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-outform", "DER"], check=True,
                     capture_output=True).stdout
key_sha = hashlib.sha256(der).hexdigest()


def canon(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


lines, prev = [], None


def push(obj):
    global prev
    seq = len(lines) + 1
    obj.update({"previous_hash": prev, "seq": seq, "time": "2026-12-05T07:%02d:%02d.000Z" % (seq // 60, seq % 60)})
    if "checkpoint" in obj:
        obj["checkpoint"]["key_sha256"] = key_sha
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key, "-binary"], input=canon(obj).encode(),
                             check=True, capture_output=True).stdout
        obj["signature"] = base64.b64encode(sig).decode()
    text = canon(obj)
    prev = hashlib.sha256(text.encode()).hexdigest()
    lines.append(text[:-1] + ',"event_hash":"%s"}' % prev)


def record(tool):
    push({"decision": "allow", "disposition": "allowed", "method": "tools/call", "tool": tool,
          "upstream": "files", "upstream_latency_ms": 0.412, "args": {"path": "/tmp/a b", "n": 3}})


def checkpoint(reason, records):
    push({"checkpoint": {"conf": {"file": "/etc/tollgate/tollgate.conf", "sha256": "0" * 64}, "dropped": 0,
                         "instance": "host:1", "policies": {}, "reason": reason, "records": records}})


checkpoint("start", 0)
for i in range(8):
    record("read_%d" % i)
checkpoint("rotate", 8)
for i in range(8):
    record("read_%d" % i)
checkpoint("lines", 8)
record("write")
record("write")
checkpoint("rotate", 2)
for i in range(8):
    record("list")
checkpoint("shutdown", 8)
for name, a, b in (("audit.log.2", 0, 10), ("audit.log.1", 10, 22), ("audit.log", 22, 31)):
    with open(os.path.join(out, name), "w") as f:
        f.write("".join(l + "\n" for l in lines[a:b]))
