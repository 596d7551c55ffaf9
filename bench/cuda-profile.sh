#!/usr/bin/env bash
# bench/cuda-profile.sh - where a CUDA step's time goes: every kernel of a step-bench run timed
# by Nsight Compute (gpu__time_duration only, clocks left alone), summed per kernel name.
#
#   bench/cuda-profile.sh MODEL.capy [step-bench arguments...]
#
# e.g. `bench/cuda-profile.sh m.capy --prefill 4096 --batch 1 --decode 1 --step-tokens 4096`.
# ncu serialises the kernels, so the sum is kernel time without the overlap of programmatic
# dependent launch and without launch gaps; the step's wall time (step-bench's own line, run
# under the profiler, is slower) is what the tables of docs/perf.md report. NCU names the
# profiler (default: ncu on PATH); CAPY_BENCH_BIN the directory holding step-bench; CSV=FILE
# keeps ncu's raw table.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model=$1
shift
benchbin=${CAPY_BENCH_BIN:-$root/build/bench}
csv=${CSV:-$(mktemp)}
[ -n "${CSV:-}" ] || trap 'rm -f "$csv"' EXIT
"${NCU:-ncu}" --clock-control none --metrics gpu__time_duration.sum --csv --log-file "$csv" \
	"$benchbin/step-bench" "$model" --device cuda "$@"
python3 - "$csv" <<'EOF'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
head = next(i for i, r in enumerate(rows) if "Kernel Name" in r)
cols = rows[head]
name, unit, value = cols.index("Kernel Name"), cols.index("Metric Unit"), cols.index("Metric Value")
scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3, "second": 1e6, "s": 1e6}
tot, cnt = collections.Counter(), collections.Counter()
for r in rows[head + 1:]:
    if len(r) <= value:
        continue
    # the name with its template arguments, without the parameter list
    k = r[name].replace("(anonymous namespace)::", "").replace("void ", "")
    depth, cut = 0, len(k)
    for i, ch in enumerate(k):
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            cut = i
            break
    k = k[:cut].strip()
    tot[k] += float(r[value].replace(",", "")) * scale.get(r[unit], 1.0)
    cnt[k] += 1
all_us = sum(tot.values())
print(f"# {sum(cnt.values())} kernels, {all_us / 1e3:.3f} ms of kernel time")
print(f"{'kernel':<48} {'calls':>6} {'total ms':>9} {'share':>6} {'avg us':>8}")
for k, t in tot.most_common():
    print(f"{k[:48]:<48} {cnt[k]:>6} {t / 1e3:>9.3f} {100 * t / all_us:>5.1f}% {t / cnt[k]:>8.1f}")
EOF
