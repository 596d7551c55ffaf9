#!/usr/bin/env bats
# --tp and --tp-payload of capy-gen, capy-ppl and capy-serve (docs/tp.md): on the CPU the engine simulates
# N ranks in one process; with the default fp32 payload every fixture's greedy ids and
# perplexity are those of one rank; the bf16 and fp16-shift payloads run; bad counts and
# payloads are refused naming the option or the dimension; other backends refuse --tp.
# (t/unit/u-tp-sim.c compares the logits themselves.)

load lib
load helper/serve

setup_file() {
	for m in $FAMILIES; do
		capy-convert -q -m "$FIX/$m" -o "$BATS_FILE_TMPDIR/$m.capy"
	done
	printf 'the quick brown fox jumps over the lazy dog, and the dog sleeps on.\n%.0s' {1..6} >"$BATS_FILE_TMPDIR/text"
}

@test "capy-gen --tp 2: the greedy ids of one rank on every fixture, with the default payload and --tp-payload fp32" {
	for m in $FAMILIES; do
		local art=$BATS_FILE_TMPDIR/$m.capy ids="3 14 15 92 65 35 89 79 32 38 46 26 43 38 32 79 50 28"
		one=$(capy-gen "$art" --prompt-ids "$ids" -n 32 --temp 0 --ignore-eos --ids 2>/dev/null)
		[ "$(wc -w <<<"$one")" -eq 32 ]
		two=$(capy-gen "$art" --prompt-ids "$ids" -n 32 --temp 0 --ignore-eos --ids --tp 2 2>/dev/null)
		[ "$one" = "$two" ] || { echo "$m: tp 1: $one"; echo "$m: tp 2: $two"; return 1; }
		two=$(capy-gen "$art" --prompt-ids "$ids" -n 32 --temp 0 --ignore-eos --ids --tp 2 --tp-payload fp32 2>/dev/null)
		[ "$one" = "$two" ]
		# the start-up report says what runs
		run --separate-stderr capy-gen "$art" --prompt-ids "$ids" -n 2 --temp 0 --tp 2
		[[ "$stderr" == *"capy-gen: cpu, "*" threads, 2 tensor-parallel ranks simulated (fp32 payloads)"* ]]
		# the other payloads run (their ids may part: docs/tp.md)
		for p in fp16-shift bf16; do
			run --separate-stderr capy-gen "$art" --prompt-ids "$ids" -n 32 --temp 0 --ignore-eos --ids --tp 2 --tp-payload $p
			[ "$status" -eq 0 ]
			[ "$(wc -w <<<"$output")" -eq 32 ]
		done
	done
}

@test "capy-ppl --tp 2: the perplexity of one rank within 1e-5 (fp32 sums in another order), bf16 payloads further off" {
	for m in $FAMILIES; do
		local one two b16
		one=$(capy-ppl "$BATS_FILE_TMPDIR/$m.capy" "$BATS_FILE_TMPDIR/text" --ctx 32 2>/dev/null | awk '{ print $2 }')
		two=$(capy-ppl "$BATS_FILE_TMPDIR/$m.capy" "$BATS_FILE_TMPDIR/text" --ctx 32 --tp 2 2>/dev/null | awk '{ print $2 }')
		b16=$(capy-ppl "$BATS_FILE_TMPDIR/$m.capy" "$BATS_FILE_TMPDIR/text" --ctx 32 --tp 2 --tp-payload bf16 2>/dev/null |
			awk '{ print $2 }')
		echo "$m: ppl $one, 2 ranks $two, bf16 payload $b16"
		awk -v a="$one" -v b="$two" 'BEGIN { d = (a - b) / a; exit !(a > 0 && d < 1e-5 && d > -1e-5) }'
		awk -v a="$b16" 'BEGIN { exit !(a > 0) }'
	done
}

teardown() {
	serve_kill_all "$(serve_dir)"
}

@test "capy-serve --tp 2: the greedy answer of one rank, through chat completions" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy body='{"max_tokens":24,"temperature":0,"messages":[{"role":"user","content":"count the brown foxes"}]}'
	serve_start capy-serve "$art" --threads 1 --tp 2
	api POST /v1/chat/completions "$body"
	[ "$CODE" = 200 ]
	local two=$(jv '.choices[0].message.content')
	[ "$(jv '.usage.completion_tokens')" -gt 0 ]
	grep -q 'tensor-parallel ranks simulated (fp32 payloads)' "$SERVER_LOG"
	serve_stop
	serve_start capy-serve "$art" --threads 1
	api POST /v1/chat/completions "$body"
	[ "$CODE" = 200 ]
	[ "$(jv '.choices[0].message.content')" = "$two" ]
	serve_stop
}

@test "--tp refusals: a count that does not divide a dimension (exit 1, naming it), out of range or a bad payload (usage, exit 2)" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy
	run --separate-stderr capy-gen "$art" --prompt-ids "1 2" -n 2 --tp 3
	[ "$status" -eq 1 ]
	assert_one_error_line capy-gen
	[[ "$stderr" == *"tensor parallel over 3 ranks: "*" is not a multiple of 3"* ]]
	run --separate-stderr capy-gen "$art" --prompt-ids "1 2" -n 2 --tp 9
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"--tp"* ]]
	run --separate-stderr capy-ppl "$art" "$BATS_FILE_TMPDIR/text" --tp 2 --tp-payload fp8
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"--tp-payload: 'fp8' is not fp32, fp16-shift or bf16"* ]]
}

@test "--tp with --device cuda: refused before any GPU is touched (not built yet)" {
	run --separate-stderr capy-gen "$BATS_FILE_TMPDIR/qwen3_5_moe.capy" --prompt-ids "1 2" -n 2 --tp 2 --device cuda
	if [[ "$stderr" == *"not available in this build"* ]]; then
		[ "$status" -eq 2 ]
		return
	fi
	[ "$status" -eq 1 ]
	assert_one_error_line capy-gen
	[[ "$stderr" == *"--tp 2: tensor parallelism on the cuda backend is not built yet"* ]]
}
