#!/usr/bin/env bats
# --device, --gpu and --gpu-mem of capy-gen, capy-ppl and capy-serve on a machine without a
# GPU (CI): an unknown device is a usage error naming the ones this build has; cuda, where
# the build has it, fails cleanly with the reason when no GPU is there. The GPU itself is
# tested by make test-cuda on a machine with one (docs/testing.md).

load lib

setup_file() {
	export ART=$BATS_FILE_TMPDIR/m.capy
	capy-convert -q -m "$FIX/qwen3_5_moe" -o "$ART"
	echo "hello world, hello" >"$BATS_FILE_TMPDIR/text"
}

@test "--device tpu: usage error (exit 2) naming the devices of this build, for each tool" {
	run capy-gen "$ART" -p hi -n 2 --device tpu
	[ "$status" -eq 2 ]
	[[ "$output" == *"--device: 'tpu' is not available in this build (cpu"* ]]
	run capy-ppl "$ART" "$BATS_FILE_TMPDIR/text" --device tpu
	[ "$status" -eq 2 ]
	[[ "$output" == *"'tpu' is not available"* ]]
	run capy-serve "$ART" --device tpu --port 0
	[ "$status" -eq 2 ]
	[[ "$output" == *"'tpu' is not available"* ]]
}

@test "--device cuda without a GPU: one clear error line and exit 1 (or a usage error in a build without CUDA)" {
	if nvidia-smi -L >/dev/null 2>&1; then skip "this machine has a GPU: make test-cuda covers it"; fi
	run --separate-stderr capy-gen "$ART" -p hi -n 2 --device cuda
	if [[ "$stderr" == *"not available in this build"* ]]; then
		[ "$status" -eq 2 ]
		[[ "$stderr" == *"cuda needs a build with nvcc"* ]]
		return
	fi
	[ "$status" -eq 1 ]
	[[ "$stderr" == "capy-gen: error: cuda: no CUDA device"* ]]
	[ -z "$output" ]
	run --separate-stderr capy-ppl "$ART" "$BATS_FILE_TMPDIR/text" --device cuda --gpu 1
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"cuda: no CUDA device"* ]]
}

@test "--gpu and --gpu-mem take a number and a size; bad values are usage errors" {
	run capy-gen "$ART" -p hi -n 2 --gpu x
	[ "$status" -eq 2 ]
	run capy-gen "$ART" -p hi -n 2 --gpu-mem lots
	[ "$status" -eq 2 ]
	run capy-ppl "$ART" "$BATS_FILE_TMPDIR/text" --gpu -1
	[ "$status" -eq 2 ]
	# On the CPU they are accepted and change nothing.
	run capy-gen "$ART" -p hi -n 2 --ids --gpu 0 --gpu-mem 1G -q
	[ "$status" -eq 0 ]
}

@test "--expert-slots and --expert-cpu-threads on the CPU: accepted, the same tokens, no expert offload line" {
	run --separate-stderr capy-gen "$ART" --prompt-ids "1 2 3" -n 4 --ids --seed 1
	[ "$status" -eq 0 ]
	local want=$output
	[[ "$stderr" != *"expert offload"* ]]
	for o in "--expert-slots 0" "--expert-slots 3 --expert-cpu-threads 2" "--expert-cpu-threads auto --gpu-mem 1M"; do
		run --separate-stderr capy-gen "$ART" --prompt-ids "1 2 3" -n 4 --ids --seed 1 $o
		[ "$status" -eq 0 ] || { echo "$o: $stderr"; return 1; }
		[ "$output" = "$want" ]
		[[ "$stderr" == "capy-gen: prompt 3 tokens"* ]]
		[[ "$stderr" != *"expert offload"* ]]
	done
	run --separate-stderr capy-ppl "$ART" "$BATS_FILE_TMPDIR/text" -q --expert-slots 0 --expert-cpu-threads 1
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	run --separate-stderr capy-ppl "$ART" "$BATS_FILE_TMPDIR/text" --expert-slots 0
	[ "$status" -eq 0 ]
	[[ "$stderr" != *"expert offload"* ]]
}

@test "capy-gen after a run on an engine that offloads experts: one stats line of its counts (the scripted backend's)" {
	# t/serve/scripts/offload.json: 12 slots, 11 of 40 resident, 1000 hits (one more per step),
	# 250 misses, 77 streamed, 31 loads, 19 evictions, 6 threads.
	CAPY_SCRIPT=$SRC/t/serve/scripts/offload.json run --separate-stderr capy-gen-scripted "$ART" --prompt-ids "1 2 3" -n 8
	[ "$status" -eq 0 ]
	[[ "${stderr_lines[0]}" =~ generated\ ([0-9]+)\ tokens ]]
	local n=${BASH_REMATCH[1]}
	[ "$n" -gt 1 ]
	# A step per generated token: the prompt's gives the first, each token but the last runs.
	local hits=$((1000 + n))
	local want=$(awk -v h=$hits -v n="$n" 'BEGIN { printf "capy-gen-scripted: expert offload: 11 of 40 experts resident in 12 slots; %d hits, 250 misses (%.1f%% hits, %.2f misses per generated token), 77 streamed; 31 loads, 19 evictions; 6 CPU threads", h, 100 * h / (h + 250), 250 / n }')
	[ "$(grep -c 'expert offload' <<<"$stderr")" -eq 1 ]
	grep -qxF "$want" <<<"$stderr" || { echo "want: $want"; echo "$stderr"; return 1; }
	# -q: no statistics, that line neither; a script without counts: no such line.
	CAPY_SCRIPT=$SRC/t/serve/scripts/offload.json run --separate-stderr capy-gen-scripted "$ART" --prompt-ids "1 2 3" -n 8 -q
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	CAPY_SCRIPT=$SRC/t/serve/scripts/api.json run --separate-stderr capy-gen-scripted "$ART" --prompt-ids "1 2 3" -n 8
	[ "$status" -eq 0 ]
	[[ "$stderr" == *"generated "* ]]
	[[ "$stderr" != *"expert offload"* ]]
}
