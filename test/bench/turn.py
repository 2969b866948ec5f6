#!/usr/bin/env python3
"""The proxy's own part of a hop, from `perf script --ns -F time,event,trace` of the tracepoints
syscalls:sys_exit_read/recvfrom and sys_enter_write/writev on the proxy (syscalls.sh, SYS_TURN=1):
for each read that returned bytes, the time to the next write's start. A write of more than
250 bytes is a request on its way upstream (the benchmark's tools/call request is ~320 bytes
through tollgate), a shorter one the answer on its way to the client (~150 bytes); nginx's
writev has no byte count at entry: it is counted per descriptor (the client's is the one
written with the answer, whose p50 is the shorter). Writes not right after a read (the audit log's) are not counted."""
import re
import statistics
import sys

last, spans = None, {}
for line in sys.stdin:
    m = re.match(r"\s*([\d.]+):\s+(\S+):\s*(.*)", line)
    if not m:
        continue
    t, ev, rest = float(m.group(1)), m.group(2), m.group(3)
    if "sys_exit" in ev:
        r = re.search(r"0x([0-9a-f]+)", rest)
        ret = int(r.group(1), 16) if r else 0
        last = t if 0 < ret < 1 << 40 else last
    elif last is not None:
        c = re.search(r"(count|vlen): (0x[0-9a-f]+)", rest)
        n = int(c.group(2), 16) if c else -1
        if "writev" in ev:  # nginx: no byte count at entry, so per descriptor (one is the client's)
            f = re.search(r"fd: (0x[0-9a-f]+)", rest)
            key = "writev to fd %d" % int(f.group(1), 16) if f else "writev"
        else:
            key = "request, to the upstream" if n > 250 else "answer, to the client"
        spans.setdefault(key, []).append((t - last) * 1e6)
        last = None
if not spans:
    sys.exit(1)
for key, v in sorted(spans.items()):
    if len(v) < 100:
        continue
    q = statistics.quantiles(v, n=4)
    print("read -> write, %s: %d, p25 %.2f p50 %.2f p75 %.2f us" % (key, len(v), q[0], q[1], q[2]))
