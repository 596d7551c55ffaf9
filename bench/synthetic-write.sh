#!/usr/bin/env bash
# bench/synthetic-write.sh - how fast capy-convert --synthetic writes an artifact
# compared with dd writing the same number of bytes (conv=fsync) to the same disk.
#
#   bench/synthetic-write.sh [DIR] [ROUNDS]
#
# Writes an ~8.2 GiB artifact (qwen3_5_moe shape: hidden 2048, vocab 248320,
# 4 layers of 256 BF16 experts) into DIR (default /tmp) ROUNDS times (default 3),
# alternating with dd, and prints each pair, the ratios and their median. The
# artifact is fsynced before capy-convert exits, like dd's conv=fsync. Then it
# times opening the artifact (capy-convert --inspect, structure validation only).
set -euo pipefail
dir=${1:-/tmp}
rounds=${2:-3}
bin=${CAPY_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin}
work=$(mktemp -d "$dir/capy-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

cat >"$work/config.json" <<'JSON'
{"model_type": "qwen3_5_moe", "text_config": {"vocab_size": 248320, "hidden_size": 2048,
 "num_hidden_layers": 4, "num_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
 "shared_expert_intermediate_size": 512, "eos_token_id": [248046, 248044]}}
JSON

ratios=()
for r in $(seq "$rounds"); do
	t0=$(date +%s.%N)
	"$bin/capy-convert" -q --synthetic "$work/config.json" --out "$work/s.capy"
	t1=$(date +%s.%N)
	bytes=$(stat -c %s "$work/s.capy")
	rm -f "$work/s.capy"
	sync
	t2=$(date +%s.%N)
	dd if=/dev/zero of="$work/dd.bin" bs=1M count=$((bytes / 1048576)) conv=fsync status=none
	t3=$(date +%s.%N)
	rm -f "$work/dd.bin"
	sync
	capy=$(echo "$bytes / ($t1 - $t0) / 1000000" | bc -l)
	dd_rate=$(echo "$((bytes / 1048576 * 1048576)) / ($t3 - $t2) / 1000000" | bc -l)
	ratio=$(echo "$capy / $dd_rate" | bc -l)
	ratios+=("$ratio")
	printf 'round %d: %d bytes  capy %.0f MB/s  dd %.0f MB/s  ratio %.2f\n' "$r" "$bytes" "$capy" "$dd_rate" "$ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
printf 'median ratio capy/dd: %.2f\n' "$median"

"$bin/capy-convert" -q --synthetic "$work/config.json" --out "$work/s.capy"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
t0=$(date +%s.%N)
"$bin/capy-convert" --inspect "$work/s.capy" >/dev/null
t1=$(date +%s.%N)
printf 'open + validate + print (cold cache): %.3f s\n' "$(echo "$t1 - $t0" | bc -l)"
