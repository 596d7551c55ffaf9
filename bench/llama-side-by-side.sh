#!/usr/bin/env bash
# bench/llama-side-by-side.sh - capy and llama.cpp on one checkpoint, on the same GPU in the
# same run, alternating (issue 8's comparison; docs/perf.md records the results).
#
#   LLAMA_SRC=DIR bench/llama-side-by-side.sh WORK prepare   # build llama.cpp, write and convert
#   LLAMA_SRC=DIR bench/llama-side-by-side.sh WORK run [N]   # N alternating rounds (default 2)
#
# LLAMA_SRC is a llama.cpp source tree from a fetched snapshot (never committed; the device
# machine gets it as a tarball under the ignored .peer/). `prepare` builds llama-bench and
# llama-batched-bench for sm_90 (CUDA on; server, UI, curl and OpenSSL off) in the background
# while bench/make-checkpoint.py writes the Qwen3.5-MoE shape (8 layers, hidden 2048, 256
# experts top-8 + shared expert, routed experts NVFP4 in ModelOpt's layout, the rest BF16),
# then both engines convert that one checkpoint without re-quantizing: capy-convert to
# WORK/m.capy, convert_hf_to_gguf.py --outtype bf16 --no-mtp to WORK/m.gguf (NVFP4 stays NVFP4; the checkpoint
# has no MTP head).
# `run` times, per round: capy step-bench (prefill 4096 and 16384, decode batch 1 and 8 after a
# 16-token prompt), llama-bench (pp4096, pp16384, tg128; flash attention, all layers on the
# GPU, micro-batches 512 and 2048) and llama-batched-bench (16-token prompts, 128 tokens, 1
# and 8 parallel sequences). CAPY_BIN / CAPY_BENCH_BIN name capy's bin/ and bench/.
# TOKENIZER_DIR: a directory with a real Qwen3 tokenizer.json and tokenizer_config.json, copied
# into the checkpoint before both conversions (convert_hf_to_gguf.py refuses tokenizers whose
# pre-tokenizer hash it does not know, as the fixtures' is; the vocabulary changes no timing).
# docs/perf.md's run: LLAMA_SRC=/dev/shm/llama.cpp TOKENIZER_DIR=.peer (the tarball and the
# tokenizer carried to the device under the ignored .peer/).
# LLAMA_BIN=DIR: llama-bench and llama-batched-bench already built (e.g. here, carried to the
# device: its 16 cores build them in minutes of device time); `prepare` then builds nothing and
# LLAMA_SRC needs only convert_hf_to_gguf.py with its gguf-py/ and conversion/.
# The device tool sends the working tree and the carried paths, at most 64 MiB a call; the
# repository's tracked files are about 40 MB and llama-bench for sm_90 about 40 MB under xz, so
# the binary goes over in two calls on one warm machine (half of the archive staged in
# /dev/shm by the first call, with capy's binaries and the converter; the other half joined
# to it by the second, which runs `offload` or `run`), or in one call whose working tree
# leaves out files it does not need (share/models and docs/records, ~23 MB, moved aside here
# for the call and back before any commit): docs/perf.md's 2026-12-06 night run.
# CAPY_ARGS: more step-bench arguments (e.g. --step-tokens 4096).
#
#   bench/llama-side-by-side.sh WORK offload [N] [LAYERS...]   # issue 10's comparison at equal VRAM
#
# `offload` times, per round and for each count of layers whose experts stay off the GPU
# (LAYERS, default 0 2 4 6 8): llama-bench with `-ncmoe L` (those layers' experts computed on the
# CPU, 16 threads; pp4096 and tg128) against step-bench with as many expert slots as llama.cpp
# keeps experts on the GPU ((8 - L) x 256; 0 slots for L = 8) and 15 CPU expert threads, once
# per CPU wake-up (WAKES, default "host arm": CAPY_CUDA_OFFLOAD_WAKE, docs/offload.md). Both engines hold
# the same experts' bytes in VRAM; capy's slots cache whichever experts route most.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:?WORK}
what=${2:?prepare or run}
src=${LLAMA_SRC:?LLAMA_SRC: a llama.cpp source tree}
bin=${CAPY_BIN:-$root/build/bin}
benchbin=${CAPY_BENCH_BIN:-$root/build/bench}
lb=${LLAMA_BIN:-$work/llama-build/bin}
mkdir -p "$work"
if [ "$what" = prepare ]; then
	if [ -n "${LLAMA_BIN:-}" ]; then echo 0 >"$work/llama-build.rc"; else (cmake -S "$src" -B "$work/llama-build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
		-DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_WEBUI=OFF \
		-DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
		>"$work/llama-cmake.log" 2>&1 &&
		cmake --build "$work/llama-build" -j"$(nproc)" --target llama-bench llama-batched-bench \
			>"$work/llama-build.log" 2>&1
	 echo $? >"$work/llama-build.rc") & fi
	t=$(date +%s)
	[ -f "$work/ck/config.json" ] || python3 "$root/bench/make-checkpoint.py" "$work/ck" --layers 8 --experts 256 \
		--top-k 8 --nvfp4-experts
	echo "# checkpoint: $(du -sh "$work/ck" | cut -f1) in $(($(date +%s) - t)) s"
	# convert_hf_to_gguf.py knows tokenizers by a hash of their output: give both engines a real
	# Qwen3 tokenizer.json (TOKENIZER_DIR) when the fixture's is not one it recognizes
	[ -z "${TOKENIZER_DIR:-}" ] || cp "$TOKENIZER_DIR"/tokenizer.json "$TOKENIZER_DIR"/tokenizer_config.json "$work/ck/"
	t=$(date +%s)
	[ -f "$work/m.capy" ] || "$bin/capy-convert" -q --model "$work/ck" --out "$work/m.capy"
	echo "# capy-convert: $(($(date +%s) - t)) s"
	t=$(date +%s)
	[ -f "$work/m.gguf" ] || python3 "$src/convert_hf_to_gguf.py" "$work/ck" --outfile "$work/m.gguf" --outtype bf16 --no-mtp \
		>"$work/llama-convert.log" 2>&1 || { tail -20 "$work/llama-convert.log"; exit 1; }
	echo "# convert_hf_to_gguf.py: $(($(date +%s) - t)) s"
	wait
	echo "# llama.cpp build: exit $(cat "$work/llama-build.rc")"
	[ "$(cat "$work/llama-build.rc")" = 0 ] || { tail -30 "$work/llama-build.log"; exit 1; }
	ls -la "$work"/m.* "$lb"/llama-bench "$lb"/llama-batched-bench
	exit 0
fi
rounds=${3:-2}
if [ "$what" = offload ]; then
	layers=${*:4}
	for r in $(seq "$rounds"); do
		for l in ${layers:-0 2 4 6 8}; do
			slots=$(((8 - l) * 256))
			for w in ${WAKES:-host arm}; do
				echo "### round $r: capy, experts of $l layers off the GPU ($slots slots), wake-up $w"
				CAPY_CUDA_OFFLOAD_WAKE=$w "$benchbin/step-bench" "$work/m.capy" --device cuda --prefill 4096 \
					--batch 1,8 --decode 64 --expert-slots "$slots" --expert-threads 15 ${CAPY_ARGS:-} |
					grep -E "^(prefill|decode|  offload|  hand-off)" || true
			done
			echo "### round $r: llama.cpp llama-bench -ncmoe $l"
			"$lb/llama-bench" -m "$work/m.gguf" -ngl 99 -fa 1 -ncmoe "$l" -t 16 -p 4096 -n 128 -r 2 2>&1 |
				grep -E "^\|" || true
		done
	done
	exit 0
fi
for r in $(seq "$rounds"); do
	echo "### round $r: capy"
	"$benchbin/step-bench" "$work/m.capy" --device cuda --prefill 4096,16384 --batch 1,8 --decode 128 ${CAPY_ARGS:-}
	echo "### round $r: llama.cpp llama-bench"
	"$lb/llama-bench" -m "$work/m.gguf" -ngl 99 -fa 1 -ub 512,2048 -b 2048 -p 4096,16384 -n 128 -r 3
	echo "### round $r: llama.cpp llama-batched-bench"
	"$lb/llama-batched-bench" -m "$work/m.gguf" -ngl 99 -fa on -c 4096 -npp 16 -ntg 128 -npl 1,8 2>&1 |
		grep -E "^\|" || true
done
