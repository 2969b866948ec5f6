#!/usr/bin/env python3
"""The report of test/bench/bench.sh (stdlib only).

  bench_report.py build RECORDS JSON     medians of the rounds, ratios, goals; prints the table
  bench_report.py compare NEW [BASELINE] every figure present in both, its change; exit 1 when one
                                         got worse by more than 10 % (BASELINE: test/bench/baseline.json)
  bench_report.py self-test              checks compare on two files made here

RECORDS: one line per figure, "ROW TARGET KEY VALUE" (ROW "meta": VALUE is the rest of the line),
one line per round for measured figures.

Which way is worse, by the figure's name (the last key of its path):
  higher is better (worse when it falls): rps, events_per_s, and every key starting with "ratio"
                                          (but mem.ratio_over_nginx, memory over nginx's, is lower-better)
  lower is better (worse when it rises):  p50_ms, p99_ms, cpu_us_per_req, cpu_us_per_msg,
                                          bytes_per_session, ns_per_decision, p99_over_nginx,
                                          cpu_over_nginx (CPU per request or message, tollgate/nginx),
                                          hop_us (p50 through a proxy minus p50 direct, row hop),
                                          hop_over_nginx
  anything else (rss_kb, counts) is printed with its change and never flagged.
"""
import json
import os
import statistics
import sys
import tempfile

HIGHER = {"rps", "events_per_s"}
LOWER = {"p50_ms", "p99_ms", "cpu_us_per_req", "cpu_us_per_msg", "bytes_per_session",
         "ns_per_decision", "p99_over_nginx", "cpu_over_nginx", "hop_us", "hop_over_nginx"}
TOLERANCE = 0.10
# the committed run --compare reads when given no file; other runs go to test/bench/results/
BASELINE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline.json")

# row, what, the throughput compared, goal text, goal on the CPU ratio (tollgate's CPU per op over
# nginx's; the verdict), goal on the throughput ratio (used only where no CPU goal is set; None:
# reported only). A goal counts as met only when the CPU ratio meets it: CPU per op is the figure
# that moves least with the machine's load, throughput is reported beside it.
ROWS = [
    ("calls", "tools/call, JSON, seed policy + audit", "rps", "CPU <= 0.8x", 0.8, None),
    ("hop", "latency a hop adds, one call at a time (wrk -c1)", "rps", "hop <= nginx's, <= 25 us", None, None),
    ("sse", "SSE relay, 200 progress events per call", "events_per_s", "CPU <= 0.7x", 0.7, None),
    ("ws", "WebSocket relay (vs nginx relaying SSE)", "events_per_s", "CPU <= 0.7x", 0.7, None),
    ("tls", "tools/call, TLS 1.2 ECDHE-ECDSA-AES128-GCM", "rps", "CPU <= 0.9x", 0.9, None),
    ("mem", "idle session, own keep-alive connection", "bytes_per_session", "<= 1024 B plain, <= 8192 B TLS", None, None),
    ("policy", "a policy decision (tg-bench-policy)", "ns_per_decision", "<= 500 ns", None, None),
    ("2026", "2026-07-28 stateless tools/call, policy + audit", "rps", "throughput >= 1.0", None, 1.0),
    ("cluster", "shared counters through Redis", "rps", "reported (vs nginx, vs local)", None, None),
]
HOP_MAX_US = 25

def num(v):
    try:
        return float(v)
    except ValueError:
        return None


def paired_ratio(tg, ng, fig):
    """tollgate over nginx: the median of the rounds' ratios when both have one figure per round
    (a round's two targets ran one after the other, under the same load), else of the medians."""
    a, b = tg.get(fig + "_rounds"), ng.get(fig + "_rounds")
    if a and b and len(a) == len(b) and all(b):
        return round(statistics.median_low([x / y for x, y in zip(a, b)]), 3)
    return round(tg[fig] / ng[fig], 3)


def build(records_path, json_path):
    meta, raw = {}, {}
    with open(records_path) as f:
        for line in f:
            parts = line.rstrip("\n").split(" ", 3)
            if len(parts) < 4:
                continue
            row, target, key, value = parts
            if row == "meta":
                meta[key] = int(value) if value.isdigit() else value
                continue
            raw.setdefault(row, {}).setdefault(target, {}).setdefault(key, []).append(value)
    rows = {}
    for row, targets in raw.items():
        for target, keys in targets.items():
            out = rows.setdefault(row, {}).setdefault(target, {})
            for key, values in keys.items():
                nums = [num(v) for v in values]
                if all(n is not None for n in nums):
                    out[key] = round(statistics.median_low(nums), 3)
                    if (key in HIGHER or key == "p50_ms") and len(nums) > 1:
                        out[key + "_rounds"] = nums
                else:
                    out[key] = values[-1]
    verdicts = []
    for row, what, fig, goal, cpu_need, need in ROWS:
        r = rows.get(row)
        if r is None:
            verdicts.append((row, what, None, None, None, goal, "NOT RUN"))
            continue
        ng, tg = r.get("nginx", {}), r.get("tollgate", {})
        ratio, result = None, "-"
        if row == "mem":
            b, t = tg.get("bytes_per_session"), r.get("tollgate-tls", {}).get("bytes_per_session")
            result = "PASS" if b is not None and b <= 1024 and (t is None or t <= 8192) else "MISS"
            if ng.get("bytes_per_session") and b is not None:
                ratio = r["ratio_over_nginx"] = round(b / ng["bytes_per_session"], 2)
        elif row == "policy":
            ns = tg.get("ns_per_decision")
            result = "PASS" if ns is not None and ns <= 500 else "MISS"
        elif row == "hop":
            # The hop: p50 through the proxy minus p50 direct to the upstream, the median of the
            # rounds' differences (a round's three targets ran back to back).
            d = r.get("direct", {})
            for t in ("nginx", "tollgate"):
                v = r.get(t, {})
                if d.get("p50_ms") is not None and v.get("p50_ms") is not None:
                    a, b = v.get("p50_ms_rounds"), d.get("p50_ms_rounds")
                    if a and b and len(a) == len(b):
                        hop = statistics.median_low([x - y for x, y in zip(a, b)])
                    else:
                        hop = v["p50_ms"] - d["p50_ms"]
                    v["hop_us"] = round(hop * 1000, 1)
            th, nh = tg.get("hop_us"), ng.get("hop_us")
            if th is not None and nh is not None:
                if nh > 0:
                    ratio = r["hop_over_nginx"] = round(th / nh, 3)
                result = "PASS" if th <= nh and th <= HOP_MAX_US else "MISS"
            else:
                result = "MISS"
        elif row == "cluster":
            calls = rows.get("calls", {})
            base_ng, base_local = calls.get("nginx", {}).get("rps"), calls.get("tollgate", {}).get("rps")
            if tg.get("rps") and base_ng:
                ratio = r["ratio"] = paired_ratio(tg, calls["nginx"], "rps")
            if tg.get("rps") and base_local:
                r["ratio_over_local"] = paired_ratio(tg, calls["tollgate"], "rps")
            ng = calls.get("nginx", {})
            result = "report"
        elif ng.get(fig) and tg.get(fig) is not None:
            r["ratio"] = paired_ratio(tg, ng, fig)
            ok = need is None or r["ratio"] >= need
            cpu = "cpu_us_per_req" if fig == "rps" else "cpu_us_per_msg"
            if ng.get(cpu) and tg.get(cpu) is not None:
                r["cpu_over_nginx"] = round(tg[cpu] / ng[cpu], 3)
            if cpu_need is not None:
                ratio = r.get("cpu_over_nginx")
                ok = ratio is not None and ratio <= cpu_need
            else:
                ratio = r["ratio"]
            if row == "calls" and ng.get("p99_ms"):
                r["p99_over_nginx"] = round(tg["p99_ms"] / ng["p99_ms"], 3)
            if row == "tls" and r.get("-", {}).get("cipher_ok") != 1:
                ok = False
            result = "PASS" if ok else "MISS"
        elif row == "tls":
            result = "FAIL (cipher %s / %s)" % (ng.get("cipher"), tg.get("cipher"))
        r["goal"], r["result"] = goal, result
        verdicts.append((row, what, ng, tg, ratio, goal, result))
    doc = {"meta": meta, "rows": rows}
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    print_table(doc, verdicts)
    print("JSON written to %s" % json_path)
    return 0


def fmt(v, spec="%.0f"):
    return "-" if v is None else (spec % v if isinstance(v, (int, float)) else str(v))


def print_table(doc, verdicts):
    m = doc["meta"]
    print("# tollgate vs nginx (%s mode, %s round(s), %s s per target; gateway %s, tree %s; %s)" %
          (m.get("mode"), m.get("rounds"), m.get("duration_s"), m.get("gateway_commit"), m.get("commit"),
           m.get("when")))
    print("# CPU us/op: the proxy's CPU (user + system, /proc) per call or message; direct: the upstream's own,")
    print("# the limit. ratio: the figure the goal is on, tollgate/nginx (CPU per op; hop row: the hop), the")
    print("# median of the rounds' ratios (targets of a round run back to back); throughput ratio below the row")
    print("# load: start %s | end %s" % (m.get("uptime_start"), m.get("uptime_end")))
    head = "%-8s %-12s %9s %5s %12s %8s %8s %9s %8s  %-26s %s"
    print(head % ("row", "target", "CPU us/op", "sys", "throughput", "p50 ms", "p99 ms", "RSS kB", "ratio", "goal",
                  "result"))
    for row, what, ng, tg, ratio, goal, result in verdicts:
        if ng is None and tg is None:
            print("%-8s %s: %s" % (row, what, result))
            continue
        r = doc["rows"][row]
        others = [(t, v) for t, v in r.items() if isinstance(v, dict) and t not in ("direct", "nginx", "-", "redis")]
        targets = [(t, v) for t, v in [("direct", r.get("direct")), ("nginx", ng)] + others if v]
        # The verdict goes on tollgate's line (the figure is its ratio), else on the row's first.
        mark = "tollgate" if any(t == "tollgate" for t, _ in targets) else targets[0][0]
        first = True
        for name, v in targets:
            tput = v.get("rps", v.get("events_per_s"))
            if row == "mem":
                tput_s = fmt(v.get("bytes_per_session"), "%.0f B/sess")
            elif row == "policy":
                tput_s = fmt(v.get("ns_per_decision"), "%.1f ns")
            else:
                tput_s = fmt(tput)
            cpu = v.get("cpu_us_per_req", v.get("cpu_us_per_msg"))
            sys_us = v.get("cpu_sys_us_per_req", v.get("cpu_sys_us_per_msg"))
            sys_s = "%.0f%%" % (100 * sys_us / cpu) if cpu and sys_us is not None else "-"
            here = name == mark
            print(head % (row if first else "", name, fmt(cpu, "%.3f" if row in ("sse", "ws") else "%.2f"), sys_s,
                          tput_s, fmt(v.get("p50_ms"), "%.3f" if row == "hop" else "%.2f"),
                          fmt(v.get("p99_ms"), "%.2f"), fmt(v.get("rss_kb")),
                          fmt(ratio, "%.3f") if here else "", goal if here else "", result if here else ""))
            first = False
        extra = []
        if row == "hop":
            extra.append("hop (p50 minus direct's p50): nginx %s us, tollgate %s us" %
                         (fmt(ng.get("hop_us"), "%.1f"), fmt(r.get("tollgate", {}).get("hop_us"), "%.1f")))
        if "ratio" in r and row != "cluster":
            extra.append("throughput tollgate/nginx %.3f" % r["ratio"])
        if "cpu_over_nginx" in r:
            extra.append("CPU per op tollgate/nginx %.3f" % r["cpu_over_nginx"])
        if "p99_over_nginx" in r:
            extra.append("p99 tollgate/nginx %.2f" % r["p99_over_nginx"])
        if "ratio_over_local" in r:
            extra.append("shared/local counters %.3f (local = row calls' tollgate; nginx = row calls')" % r["ratio_over_local"])
        if row == "tls":
            extra.append("suite nginx %s, tollgate %s" % (ng.get("cipher"), r.get("tollgate", {}).get("cipher")))
        if row == "mem" and ng:
            extra.append("nginx: RSS growth %s B + connection slot %s B per idle connection" %
                         (ng.get("growth_bytes_per_session"), ng.get("slot_bytes")))
        if row == "cluster" and "redis" in r:
            extra.append("Redis EVALSHA per call %s" % r["redis"].get("evalsha_per_call"))
        if row == "ws":
            extra.append("nginx = the sse row's nginx of the same round")
        if extra:
            print("%-8s   # %s" % ("", "; ".join(extra)))


def flatten(d, prefix=""):
    out = {}
    for k, v in d.items():
        path = prefix + "." + k if prefix else k
        if isinstance(v, dict):
            out.update(flatten(v, path))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[path] = v
    return out


def direction(path):
    key = path.rsplit(".", 1)[-1]
    if path == "mem.ratio_over_nginx":
        return -1  # bytes per idle session over nginx's: lower is better
    if key in HIGHER or key.startswith("ratio"):
        return 1
    if key in LOWER:
        return -1
    return 0


def compare(new_path, base_path, out=sys.stdout):
    with open(new_path) as f:
        new = flatten(json.load(f).get("rows", {}))
    with open(base_path) as f:
        base = flatten(json.load(f).get("rows", {}))
    worse = []
    print("%-44s %12s %12s %8s" % ("figure", "baseline", "now", "change"), file=out)
    for path in sorted(set(new) & set(base)):
        a, b = base[path], new[path]
        d = direction(path)
        change = (b - a) / abs(a) if a else None
        flag = ""
        if d and change is not None and a > 0 and d * change < -TOLERANCE:
            flag = "  WORSE"
            worse.append(path)
        print("%-44s %12g %12g %8s%s" % (path, a, b, "-" if change is None else "%+.1f%%" % (100 * change), flag),
              file=out)
    if worse:
        print("compare: %d figure(s) worse by more than %d%%: %s" % (len(worse), 100 * TOLERANCE, ", ".join(worse)),
              file=out)
        return 1
    print("compare: no figure worse by more than %d%%" % (100 * TOLERANCE), file=out)
    return 0


def self_test():
    base = {"rows": {
        "calls": {"nginx": {"rps": 40000, "p99_ms": 3.0}, "tollgate": {"rps": 30000, "p99_ms": 4.0,
                                                                     "cpu_us_per_req": 20.0, "rss_kb": 9000},
                  "ratio": 0.75, "p99_over_nginx": 1.33, "goal": ">= 1.0", "result": "MISS"},
        "mem": {"tollgate": {"bytes_per_session": 3400}},
        "policy": {"tollgate": {"ns_per_decision": 1500.0}},
        "only_in_base": {"tollgate": {"rps": 1}}}}
    new = json.loads(json.dumps(base))
    del new["rows"]["only_in_base"]
    c, t = new["rows"]["calls"], new["rows"]["calls"]["tollgate"]
    t["rps"] = 26000            # -13.3 %: worse
    t["p99_ms"] = 4.3           # +7.5 %: within 10 %
    t["cpu_us_per_req"] = 23.0  # +15 %: worse
    t["rss_kb"] = 20000         # not a flagged figure
    c["ratio"] = 0.70           # -6.7 %: within
    c["p99_over_nginx"] = 1.50  # +12.8 %: worse
    new["rows"]["calls"]["nginx"]["rps"] = 50000   # better: never flagged
    new["rows"]["mem"]["tollgate"]["bytes_per_session"] = 2000   # better
    new["rows"]["policy"]["tollgate"]["ns_per_decision"] = 1700.0  # +13.3 %: worse
    expect = {"calls.tollgate.rps", "calls.tollgate.cpu_us_per_req", "calls.p99_over_nginx",
              "policy.tollgate.ns_per_decision"}
    failures = []
    with tempfile.TemporaryDirectory() as d:
        pa, pb = os.path.join(d, "base.json"), os.path.join(d, "new.json")
        for p, doc in ((pa, base), (pb, new)):
            with open(p, "w") as f:
                json.dump(doc, f)

        class Buf(list):
            def write(self, s):
                self.append(s)
        buf = Buf()
        rc = compare(pb, pa, out=buf)
        text = "".join(buf)
        flagged = {line.split()[0] for line in text.splitlines() if line.endswith("WORSE")}
        if rc != 1:
            failures.append("compare returned %d, expected 1" % rc)
        if flagged != expect:
            failures.append("flagged %s, expected %s" % (sorted(flagged), sorted(expect)))
        if "only_in_base" in text:
            failures.append("a figure present in one file only was compared")
        buf2 = Buf()
        if compare(pa, pa, out=buf2) != 0:
            failures.append("a file compared with itself is flagged")
        # build: two rounds of records give medians, ratios and verdicts
        rec = os.path.join(d, "rec.txt")
        with open(rec, "w") as f:
            f.write("meta - mode self-test\n")
            for v in ("100", "300", "200"):
                f.write("calls nginx rps %s\ncalls nginx p99_ms 1.0\ncalls nginx cpu_us_per_req 10\n" % v)
            for v in ("210", "330", "190"):
                f.write("calls tollgate rps %s\ncalls tollgate p99_ms 1.1\ncalls tollgate cpu_us_per_req 7.5\n" % v)
            # the same throughput, but CPU per op over the goal: a MISS
            f.write("sse nginx events_per_s 100\nsse nginx cpu_us_per_msg 1.0\n"
                    "sse tollgate events_per_s 200\nsse tollgate cpu_us_per_msg 0.8\n")
            # hop: p50 direct 0.040 / 0.050 ms, nginx +20 / +22 us, tollgate +15 / +30 us
            for dp, np_, tp in (("0.040", "0.060", "0.055"), ("0.050", "0.072", "0.080")):
                f.write("hop direct p50_ms %s\nhop nginx p50_ms %s\nhop tollgate p50_ms %s\n" % (dp, np_, tp))
            f.write("policy tollgate ns_per_decision 400\n")
            # a TLS suite that differs: the row was not driven and must fail, not pass or vanish
            f.write("tls nginx cipher ECDHE-ECDSA-AES128-GCM-SHA256\ntls tollgate cipher "
                    "ECDHE-ECDSA-CHACHA20-POLY1305\ntls - cipher_ok 0\n")
        sys.stdout, saved = Buf(), sys.stdout
        try:
            build(rec, os.path.join(d, "b.json"))
        finally:
            sys.stdout = saved
        with open(os.path.join(d, "b.json")) as f:
            b = json.load(f)["rows"]
        if b["calls"]["nginx"]["rps"] != 200 or b["calls"]["tollgate"]["rps"] != 210:
            failures.append("medians wrong: %s" % b["calls"])
        # the median of the rounds' ratios (2.1, 1.1, 0.95), not of the medians (210 / 200)
        if b["calls"]["ratio"] != 1.1 or b["calls"]["cpu_over_nginx"] != 0.75 or b["calls"]["result"] != "PASS":
            failures.append("ratio/verdict wrong: %s" % b["calls"])
        if b["sse"]["result"] != "MISS":
            failures.append("a throughput over nginx's with CPU per op over the goal passed: %s" % b["sse"])
        # the median of the rounds' hops: nginx 20 / 22 -> 20, tollgate 15 / 30 -> 15
        h = b["hop"]
        if h["nginx"].get("hop_us") != 20.0 or h["tollgate"].get("hop_us") != 15.0 or h["result"] != "PASS":
            failures.append("hop wrong: %s" % h)
        if not b["tls"]["result"].startswith("FAIL"):
            failures.append("TLS row with a different suite: %s" % b["tls"])
        if b["policy"]["result"] != "PASS":
            failures.append("policy verdict wrong: %s" % b["policy"])
    if failures:
        print("self-test FAILED:\n  " + "\n  ".join(failures))
        print(text)
        return 1
    print("self-test passed: compare flags exactly %d figures (%s), ignores better ones, unflagged kinds "
          "and figures in one file only; build takes medians, paired ratios, hops and verdicts on CPU per op, "
          "and fails a TLS row whose suites differ" % (len(expect), ", ".join(sorted(expect))))
    return 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "build" and len(sys.argv) == 4:
        sys.exit(build(sys.argv[2], sys.argv[3]))
    if cmd == "compare" and len(sys.argv) in (3, 4):
        sys.exit(compare(sys.argv[2], sys.argv[3] if len(sys.argv) == 4 else BASELINE))
    if cmd == "self-test":
        sys.exit(self_test())
    print(__doc__, file=sys.stderr)
    sys.exit(2)
