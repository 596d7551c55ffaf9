#!/usr/bin/env bash
# mask-ahead.sh - what constrained decoding's token masks cost per token and how much of it
# generation waits for: capy-gen with the next mask computed after the step (--mask-threads 0)
# and during it (1), on the qwen3_5_moe fixture (576 ids) and on a small random model with
# Qwen3's vocabulary (bench/mask-vocab151k.json: 151,936 ids, the real tokenizer of
# t/text/qwen3), with llama.cpp's json.gbnf and a captured tool schema (OpenCode's bash).
#
#   make -j2 CUDA=0 && bench/mask-ahead.sh [SEEDS]
#
# Prints capy-gen's decode rate and mask line per run, and whether the two runs of a pair gave
# the same text (they must). Results go in docs/perf.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seeds=${1:-"4 5"}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
G=build/bin/capy-gen
build/bin/capy-convert -q -m t/fixtures/qwen3_5_moe -o "$tmp/fixture.capy"
build/bin/capy-convert -q --synthetic bench/mask-vocab151k.json --out "$tmp/vocab151k.capy"
zstd -dqf t/text/qwen3/tokenizer.json.zst -o "$tmp/tokenizer.json"
json=t/fixtures/grammars/json.gbnf bash=t/fixtures/schemas/tool-opencode-bash.json

echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (modified)'), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
# pair NAME ARGS...: the run after the step and the run during it
pair() {
	local name=$1 mt
	shift
	for mt in 0 1; do
		"$G" "$@" --mask-threads "$mt" --threads 2 -n 400 >"$tmp/$name-$mt.out" 2>"$tmp/$name-$mt.err"
		echo "$name --mask-threads $mt: $(grep -o 'generated.*tok/s)' "$tmp/$name-$mt.err") | $(grep -o 'token masks.*' "$tmp/$name-$mt.err")"
	done
	cmp -s "$tmp/$name-0.out" "$tmp/$name-1.out" && echo "$name: the same text" || echo "$name: DIFFERENT TEXT"
}
for seed in $seeds; do
	pair "fixture json.gbnf seed $seed" "$tmp/fixture.capy" -p "Write:" --grammar "$json" --seed "$seed" --temp 1
	pair "fixture bash schema seed $seed" "$tmp/fixture.capy" -p "Write JSON:" --json-schema "$bash" --seed "$seed" --temp 1.2
	pair "151k json.gbnf seed $seed" "$tmp/vocab151k.capy" --tokenizer "$tmp/tokenizer.json" -p "Write JSON:" \
		--grammar "$json" --seed "$seed" --temp 1.2
	pair "151k bash schema seed $seed" "$tmp/vocab151k.capy" --tokenizer "$tmp/tokenizer.json" -p "Write JSON:" \
		--json-schema "$bash" --seed "$seed" --temp 1.2
done
echo "151k without a grammar: $("$G" "$tmp/vocab151k.capy" --tokenizer "$tmp/tokenizer.json" -p "Write JSON:" \
	--seed 4 --temp 1.2 --threads 2 -n 400 2>&1 >/dev/null | grep -o 'generated.*tok/s)')"
