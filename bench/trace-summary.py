#!/usr/bin/env python3
"""trace-summary.py - where a CUDA step's time goes, from the kernel trace (CAPY_CUDA_TRACE).

    CAPY_CUDA_TRACE=/tmp/t.tsv step-bench MODEL --device cuda ...
    bench/trace-summary.py /tmp/t.tsv [--top N] [--order]

The trace has one record per kernel run (kernels/ck-common.cuh): when its first block
started and when that block's wait for the kernel before it returned (the device's global
timer). On one stream (CAPY_CUDA_FORK=0) a kernel's share of the critical path is the time
from its own 'ready' to the next kernel's: its work, its tail and the next one's wake-up. The
SM clock (clock64 against the global timer while block 0 waited) says whether the GPU ran
at its boost clock. A
step starts at its embedding kernel; steps with the same sequence of kernels are one shape
(a batch size of decode, say), and each shape with at least 4 steps gets a table: per kernel
name, how many run a step and their median time a step (the median over the steps of the
sum). 'lead' is the median time a kernel's first block waited for the one before it (how
far programmatic dependent launch started it ahead); 'block0' how long that block ran after
its wait (its own work; the rest of a kernel's time is the other blocks and the grid's
completion). --order prints one step of each shape
kernel by kernel.
"""
import argparse
import bisect
import statistics
import sys


def load(path):
    recs = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or line.startswith("name\t"):
                continue
            p = line.rstrip("\n").split("\t")
            if len(p) < 5:
                continue
            clk = (int(p[5]), int(p[6])) if len(p) >= 7 else (0, 0)
            recs.append((p[0], int(p[1]), int(p[2]), int(p[3]), int(p[4])) + clk)
    recs.sort(key=lambda r: r[4])
    return recs


def split_leaves(recs):
    """The kernels' records, and per name the sorted times block 0 left (records of grid 0)."""
    kernels, leaves = [], {}
    for r in recs:
        if r[1] == 0:
            leaves.setdefault(r[0], []).append(r[4])
        else:
            kernels.append(r)
    for v in leaves.values():
        v.sort()
    return kernels, leaves


def body(leaves, r):
    """How long block 0 of kernel record r ran after its wait (None without a leave record)."""
    v = leaves.get(r[0])
    if not v:
        return None
    i = bisect.bisect_left(v, r[4])
    return v[i] - r[4] if i < len(v) else None


def steps_of(recs):
    steps, cur = [], []
    for r in recs:
        if r[0] == "embed_kernel" and cur:
            steps.append(cur)
            cur = []
        cur.append(r)
    if cur:
        steps.append(cur)
    return steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--order", action="store_true")
    a = ap.parse_args()
    recs, leaves = split_leaves(load(a.trace))
    if not recs:
        sys.exit("trace-summary: no records in " + a.trace)
    steps = steps_of(recs)
    shapes = {}
    for i, s in enumerate(steps[:-1]):  # the last has no next step to end it
        key = tuple((r[0], r[1]) for r in s)
        nxt = steps[i + 1][0][4]
        shapes.setdefault(key, []).append((s, nxt))
    for key, runs in sorted(shapes.items(), key=lambda kv: -len(kv[1])):
        if len(runs) < 4:
            continue
        walls = [nxt - s[0][4] for s, nxt in runs]
        # the SM clock where a kernel's block 0 waited long enough to tell (clock64 / globaltimer)
        mhz = [1e3 * (r[6] - r[5]) / (r[4] - r[3]) for s, _ in runs for r in s if len(r) > 5 and r[5] and r[4] - r[3] > 2000]
        ends = [s[-1][4] - s[0][4] for s, nxt in runs]
        print("# shape: %d kernels a step, %d steps; step %.1f us (median; ready of the first to the next "
              "step's first), last kernel ready at %.1f us" % (len(key), len(runs), statistics.median(walls) / 1e3,
                                                            statistics.median(ends) / 1e3))
        if mhz:
            print("# SM clock while waiting: median %.0f MHz (%.0f-%.0f)" % (statistics.median(mhz), min(mhz), max(mhz)))
        per = {}
        for s, nxt in runs:
            sums, leads, bodies = {}, {}, {}
            for j, r in enumerate(s):
                t = (s[j + 1][4] if j + 1 < len(s) else nxt) - r[4]
                name = r[0] if j + 1 < len(s) else r[0] + " (+ host until next step)"
                sums[name] = sums.get(name, 0) + t
                leads.setdefault(name, []).append(r[4] - r[3])
                b = body(leaves, r)
                if b is not None:
                    bodies.setdefault(name, []).append(b)
            for n in sums:
                d = per.setdefault(n, {"t": [], "lead": [], "body": [], "count": 0})
                d["t"].append(sums[n])
                d["lead"].extend(leads[n])
                d["body"].extend(bodies.get(n, []))
                d["count"] = len(leads[n])
        rows = sorted(per.items(), key=lambda kv: -statistics.median(kv[1]["t"]))
        total = sum(statistics.median(d["t"]) for _, d in rows)
        print("%-44s %5s %10s %8s %6s %9s %9s" % ("kernel", "a step", "us a step", "us each", "share", "lead us",
                                                   "block0 us"))
        for n, d in rows[: a.top]:
            t = statistics.median(d["t"]) / 1e3
            b = "%9.2f" % (statistics.median(d["body"]) / 1e3) if d["body"] else "%9s" % "-"
            print("%-44s %5d %10.1f %8.2f %5.1f%% %9.2f %s" % (n[:44], d["count"], t, t / d["count"],
                                                             100 * t * 1e3 / total, statistics.median(d["lead"]) / 1e3, b))
        if len(rows) > a.top:
            rest = sum(statistics.median(d["t"]) for _, d in rows[a.top:]) / 1e3
            print("%-44s %5s %10.1f" % ("(the other %d names)" % (len(rows) - a.top), "", rest))
        if a.order:
            s, nxt = runs[len(runs) // 2]
            for j, r in enumerate(s):
                t = (s[j + 1][4] if j + 1 < len(s) else nxt) - r[4]
                b = body(leaves, r)
                print("  %3d %-40s grid %6d x %4d  %7.2f us  lead %6.2f  block0 %s" % (
                    j, r[0][:40], r[1], r[2], t / 1e3, (r[4] - r[3]) / 1e3, "%.2f" % (b / 1e3) if b is not None else "-"))
        print()


if __name__ == "__main__":
    main()
