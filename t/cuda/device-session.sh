#!/bin/bash
# device-session.sh - one call's worth of GPU work on the device machine (docs/testing.md):
# here, `pack` builds for sm_90 and packs what travels into the ignored .devlibs/ and .peer/;
# there, `run COMMIT` runs make test-cuda (u-cuda-offload first, under a timeout, since a
# hang there would eat the call) while llama.cpp builds and the side-by-side checkpoint is
# written in the background at nice 19, then, with what time is left, the offload wake-ups
# (host against kick) and the token-mask cost (--mask none against all) in step-bench.
# Everything is logged per command into $OUT (never piped through tail: a timeout loses it).
#
#	t/cuda/device-session.sh pack [LLAMA_SRC_DIR]     # here (2 cores: ~10 min when built)
#	device: t/cuda/device-session.sh run COMMIT       # carry [".devlibs", ".peer"]
#	device, a second call while it is warm (30 s):  bench/llama-side-by-side.sh /dev/shm/lw offload 1
#	    with LLAMA_SRC=/dev/shm/llama.cpp CAPY_BIN=build/dev/bin CAPY_BENCH_BIN=build/dev/bench
#
# The llama.cpp binaries (~40 MB compressed with their CUDA kernels) do not fit the 64 MiB a
# call carries beside the tree, so llama.cpp is built there from its source (7 MB).
set -u
cd "$(dirname "$0")/../.." || exit 2
what=${1:?pack or run}
if [ "$what" = pack ]; then
	set -e
	make -j"$(nproc)" O=build/dev CFLAGS=-O2 NVCC_ARCHS="-gencode arch=compute_90,code=sm_90" all bench \
		build/dev/t/helper/capy-serve-scripted build/dev/t/helper/capy-test-tool
	t/cuda/pack-libs.sh >/dev/null
	# one xz stream: the binaries share most of libcore, which xz's window finds again
	tar cf - --exclude='*.o' --exclude='*.d' build/dev/bin build/dev/bench build/dev/t/cuda build/dev/t/helper |
		xz -9 -T1 >.devlibs/dev.tar.xz
	mkdir -p .peer
	if [ -n "${2:-}" ]; then
		(cd "$(dirname "$2")" && tar cf - --exclude="*/.git" --exclude="*/tools/server/public" \
			--exclude="*/tools/server/webui" --exclude="*/media" --exclude="*/benches" \
			--exclude="*/ggml/src/ggml-"{vulkan,sycl,metal,opencl,cann,hexagon,webgpu} "$(basename "$2")") |
			xz -T2 -6 >.peer/llama-src.tar.xz
	fi
	# convert_hf_to_gguf.py needs a tokenizer it knows: the real Qwen3 one (TOKENIZER_DIR)
	q=${TOKENIZER_DIR:-../shared/reference/qwen3}
	[ -f "$q/tokenizer.json" ] && tar cf - -C "$q" tokenizer.json tokenizer_config.json | xz -9 >.peer/tok.tar.xz
	ls -la .devlibs .peer
	exit 0
fi
[ "$what" = run ] || { echo "device-session.sh: pack or run" >&2; exit 2; }
commit=${2:?COMMIT}
out=${OUT:-/tmp}
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
log() { echo "$* at $(el) s" >>"$out/session.log"; }
python3 -c "import tarfile; tarfile.open('.devlibs/dev.tar.xz').extractall('.')"
export LD_LIBRARY_PATH=$PWD/.devlibs CAPY_SRCDIR=$PWD
W=/dev/shm/lw
mkdir -p "$W"
if [ -f .peer/llama-src.tar.xz ]; then
	python3 -c "import tarfile; tarfile.open('.peer/llama-src.tar.xz').extractall('/dev/shm')"
	src=$(ls -d /dev/shm/llama* | head -1)
	mkdir -p "$W/tok"
	[ -f .peer/tok.tar.xz ] && python3 -c "import tarfile; tarfile.open('.peer/tok.tar.xz').extractall('$W/tok')"
	( LLAMA_SRC=$src TOKENIZER_DIR=$W/tok CAPY_BIN=$PWD/build/dev/bin nice -n 19 bench/llama-side-by-side.sh "$W" prepare \
		>"$out/prepare.log" 2>&1; log "prepare rc=$?" ) &
fi
log extracted
timeout 200 stdbuf -oL build/dev/t/cuda/u-cuda-offload >"$out/offload.log" 2>&1
log "u-cuda-offload rc=$?"
bins=
grep -q ' 0 failed' "$out/offload.log" ||
	bins="CUDA_TEST_BINS=$(echo build/dev/t/cuda/u-cuda-{model,gdn,linear,attention,sample,kvstore})"
CAPY_COMMIT=$commit timeout $((480 - $(el))) t/cuda/device-run.sh O=build/dev $bins >/dev/null 2>&1
log "test-cuda rc=$?"
while [ -n "$(jobs -r)" ] && [ "$(el)" -lt 520 ]; do sleep 2; done
[ -f /dev/shm/q.capy ] || build/dev/bin/capy-convert -q --synthetic bench/qwen35moe-8l.json --quantize-experts nvfp4 \
	-o /dev/shm/q.capy
S="stdbuf -oL build/dev/bench/step-bench /dev/shm/q.capy --device cuda --prefill 64 --decode 48 --batch 1,8"
for r in host kick; do
	[ "$(el)" -lt 560 ] || break
	CAPY_CUDA_OFFLOAD_WAKE=$r timeout 30 $S --sample greedy --expert-slots 0 --expert-threads 15 >"$out/wake-$r.log" 2>&1
	log "wake $r rc=$?"
done
for m in none all; do
	[ "$(el)" -lt 580 ] || break
	timeout 20 $S --sample greedy --mask $m >"$out/mask-$m.log" 2>&1
	log "mask $m rc=$?"
done
cat "$out/session.log"
tail -3 "$out/test-cuda.log" 2>/dev/null
grep -h -E '^decode' "$out"/wake-*.log "$out"/mask-*.log 2>/dev/null
