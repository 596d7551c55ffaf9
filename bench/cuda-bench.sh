#!/usr/bin/env bash
# bench/cuda-bench.sh - the CUDA backend's speed on the synthetic model shapes of docs/perf.md,
# each against the device's copy bandwidth measured in the same run (bench/step-bench.c).
#
#   bench/cuda-bench.sh [DIR] [SHAPE...]      SHAPE: qwen35moe-8l flash-next-16l (default both)
#
# Writes (once) DIR/SHAPE.capy from bench/SHAPE.json with `capy-convert --synthetic
# --quantize-experts nvfp4` (random weights in the real layout: NVFP4 routed experts, BF16
# elsewhere), then runs step-bench on the GPU: prefill (time to first token) at
# $PREFILL tokens and decode at batch $BATCH. CAPY_BIN names the build's bin/ and bench/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/dev/shm/capy-bench}
shift || true
shapes=${*:-qwen35moe-8l flash-next-16l}
bin=${CAPY_BIN:-$root/build/bin}
benchbin=${CAPY_BENCH_BIN:-$root/build/bench}
mkdir -p "$dir"
for s in $shapes; do
	[ -f "$dir/$s.capy" ] || { t=$(date +%s); "$bin/capy-convert" -q --synthetic "$root/bench/$s.json" \
		--quantize-experts nvfp4 -o "$dir/$s.capy"; echo "# $s: synthesized in $(( $(date +%s) - t )) s"; }
	"$benchbin/step-bench" "$dir/$s.capy" --device cuda --prefill "${PREFILL:-512,4096}" --batch "${BATCH:-1,8}" \
		--decode "${DECODE:-32}" --step-tokens "${STEP:-2048}"
done
