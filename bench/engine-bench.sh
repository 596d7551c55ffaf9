#!/usr/bin/env bash
# bench/engine-bench.sh - CPU engine speed on a synthetic Flash-Next-shaped model.
#
#   bench/engine-bench.sh [DIR] [THREADS]
#
# Writes (once) DIR/flash.capy from bench/flash-synth.json: qwen4_exp, hidden 2048, 8 layers (6 Gated DeltaNet, 2 QSA),
# 512 experts top-10 with NVFP4 experts, hyper-connections (4 streams), one PLE layer, vocab
# 248320, BF16 elsewhere (10.5 GB). Then measures decode (32-token prompt, 64 tokens), prefill
# of 512 and 4096 tokens, and prints the weight bytes one decode step reads, so decode speed
# can be put against memory bandwidth (bench/linear-bench measures that).
set -euo pipefail
dir=${1:-/tmp/capy-engine-bench}
threads=${2:-0}
bin=${CAPY_BIN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin}
mkdir -p "$dir"
cp "$(dirname "$0")/flash-synth.json" "$dir/config.json"
[ -f "$dir/flash.capy" ] || "$bin/capy-convert" --synthetic "$dir/config.json" --quantize-experts nvfp4 -o "$dir/flash.capy"
python3 -c 'import random; random.seed(1); print(" ".join(str(random.randrange(1000, 200000)) for _ in range(4096)))' >"$dir/ids"
ids() { tr ' ' '\n' <"$dir/ids" | head -n "$1" | tr '\n' ' '; }

# Bytes of weights a decode step reads: every matrix once, k of the E experts of each layer,
# one embedding row and, of the PLE tables, the rows of one token.
"$bin/capy-convert" --inspect "$dir/flash.capy" --json | python3 -c '
import json, sys
d = json.load(sys.stdin); c = d["model"]["config"]
k, E = c["num_experts_per_tok"], c["num_experts"]
total = 0
for t in d["tensors"]:
    n = t["name"]
    if n == "embed_tokens.weight" or "ngram_embedding" in n:
        continue
    total += t["bytes"] * (k / E if ".mlp.experts." in n else 1)
lm = next(t["bytes"] for t in d["tensors"] if t["name"] == "lm_head.weight")
print("weights read per decode step: %.3f GB (lm_head %.3f GB)" % (total / 1e9, lm / 1e9))'

"$bin/capy-gen" "$dir/flash.capy" --prompt-ids "$(ids 32)" -n 64 --temp 0 --ignore-eos --ids -t "$threads" >/dev/null
for n in 512 4096; do
	"$bin/capy-gen" "$dir/flash.capy" --prompt-ids "$(ids $n)" -n 1 --temp 0 --ids -t "$threads" >/dev/null
done
