#!/usr/bin/env bats
# --plan of capy-gen, capy-ppl and capy-serve (libcore/offload/plan.h): the CUDA backend's memory
# plan computed without a GPU, checked against the artifacts' tensor tables, on every fixture and
# on a full-size Flash-Next layout made from a config alone (capy-convert --layout-only); the
# refusals (--gpu-mem below the fixed parts, the RAM guard) and the page-locked fallback, on a
# machine played by CAPY_MEMINFO (a fake /proc/meminfo) and CAPY_MEMLOCK (the memlock limit).

load lib

setup_file() {
	for m in $FAMILIES; do
		capy-convert -q -m "$FIX/$m" -o "$BATS_FILE_TMPDIR/$m.capy"
		capy-convert --inspect "$BATS_FILE_TMPDIR/$m.capy" --json >"$BATS_FILE_TMPDIR/$m.json"
	done
	# a model without an MTP head: random weights from qwen4_exp's config, no mtp.* tensors
	capy-convert -q --synthetic "$FIX/qwen4_exp/config.json" -o "$BATS_FILE_TMPDIR/no-head.capy"
	# Flash-Next's shape at full size (48 layers of 512 NVFP4 experts, 60 GiB), as a layout.
	cat >"$BATS_FILE_TMPDIR/flash.json" <<'JSON'
{"model_type": "qwen4_exp", "text_config": {"vocab_size": 248320, "hidden_size": 2560, "num_hidden_layers": 48,
 "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
 "rope_parameters": {"rope_theta": 10000000, "partial_rotary_factor": 0.25, "rope_type": "default"},
 "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
 "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
 "hc_count": 4, "hc_lowrank": 320, "ple_layer_ids": [1, 13, 25, 37], "ngram_vocab_size_base": 100000,
 "heads_per_ngram": 8, "indexer_n_heads": 16, "indexer_kv_heads": 1, "indexer_head_dim": 128,
 "indexer_budget": 2048, "indexer_compress_ratio": 16, "eos_token_id": [248046, 248044]}}
JSON
	capy-convert -q --synthetic "$BATS_FILE_TMPDIR/flash.json" --quantize-experts nvfp4 --layout-only \
		-o "$BATS_FILE_TMPDIR/flash.capy"
	capy-convert --inspect "$BATS_FILE_TMPDIR/flash.capy" --json >"$BATS_FILE_TMPDIR/flash.capy.json"
	meminfo "$BATS_FILE_TMPDIR/meminfo" 67108864
}

# A /proc/meminfo with MemAvailable of $2 kB.
meminfo() {
	printf 'MemTotal:       %s kB\nMemFree:        %s kB\nMemAvailable:   %s kB\nBuffers:     0 kB\n' "$2" "$2" "$2" >"$1"
}

setup() {
	# A machine with 64 GiB available and no page-locking limit, whatever runs the tests.
	export CAPY_MEMINFO=$BATS_FILE_TMPDIR/meminfo CAPY_MEMLOCK=unlimited
}

# The bytes column (or with $3 = 1 the MiB column) of the row named $2 in section $1 (device
# or host) of the plan in $output.
row() {
	printf '%s\n' "$output" | awk -v sec="$1" -v name="$2" -v col="${3:-2}" '
		/^device memory/ { s = "device"; next }
		/^host memory/ { s = "host"; next }
		s == sec && substr($0, 1, 22) == sprintf("  %-20s", name) { split(substr($0, 23), f, " "); print f[col]; exit }'
}
row_mib() { row "$1" "$2" 1; }

# What the inspect JSON of $1 says: the non-expert device tensors' bytes (each range rounded
# up to 256 bytes, the PLE n-gram tables left on the host), the experts, their bytes, the
# largest expert record; the MTP head's tensors and stack (mtp.*) only with $2 = mtp.
nonexpert_bytes() {
	jq --arg mtp "${2:-}" '[.expert_stacks[].tensors[]] as $ex
	    | [.tensors[] | select(.name as $n | any($ex[]; . == $n) | not)
	       | select(.name | contains("ple_embedding.ngram_embedding") | not) | select(.bytes > 0)
	       | select($mtp == "mtp" or (.name | startswith("mtp.") | not))
	       | ((.bytes + 255) / 256 | floor) * 256] | add // 0' "$1"
}
stacks() { jq --arg mtp "${2:-}" '[.expert_stacks[] | select($mtp == "mtp" or (.name | startswith("mtp.") | not))]' "$1"; }
n_experts() { stacks "$@" | jq '[.[].count] | add // 0'; }
expert_bytes() { stacks "$@" | jq '[.[] | .count * .stride] | add // 0'; }
slot_bytes() { stacks "$@" | jq '[.[].stride] | max // 0'; }

@test "--plan on every fixture: the table on stdout, nothing on stderr, weights = the artifact's non-expert tensors" {
	for m in $FAMILIES; do
		run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/$m.capy" --plan --max-context 4096 --max-concurrency 2
		[ "$status" -eq 0 ] || { echo "$m: $stderr"; return 1; }
		[ -z "$stderr" ]
		[[ "${lines[0]}" == "memory plan of '$BATS_FILE_TMPDIR/$m.capy' ("*") on one GPU (no --gpu-mem: everything resident)" ]]
		[ "$(row device "weights (non-expert)")" = "$(nonexpert_bytes "$BATS_FILE_TMPDIR/$m.json")" ] ||
			{ echo "$m: weights $(row device "weights (non-expert)"), tensors $(nonexpert_bytes "$BATS_FILE_TMPDIR/$m.json")"; return 1; }
		# The fixed parts and the total add up.
		local fixed=$(($(row device "weights (non-expert)") + $(row device "small vectors") + \
			$(row device "attention cache") + $(row device "recurrent states") + $(row device "step buffers") + \
			$(row device "attention workspace")))
		[ "$(row device "fixed parts")" = "$fixed" ]
		[ "$(row device total)" = "$((fixed + $(row device "routed experts")))" ]
		local n=$(n_experts "$BATS_FILE_TMPDIR/$m.json")
		if [ "$n" -eq 0 ]; then
			[[ "$output" == *"routed experts"*"none (a dense model)"* ]]
		else
			[[ "$output" == *"all $n experts resident"* ]]
			# All resident: the experts' ranges in one upload, their last record's padding left out.
			local eb=$(expert_bytes "$BATS_FILE_TMPDIR/$m.json") r=$(row device "routed experts")
			[ "$r" -le "$eb" ] && [ "$r" -gt $((eb - $(stacks "$BATS_FILE_TMPDIR/$m.json" | jq length) * $(slot_bytes "$BATS_FILE_TMPDIR/$m.json"))) ]
		fi
		[ "$(row host "routed experts")" = 0 ]
		# The MiB column is the bytes column in MiB, to a tenth.
		[ "$(row_mib device total)" = "$(awk -v b="$(row device total)" 'BEGIN { printf "%.1f", b / 1048576 }')" ]
	done
}

@test "the attention cache: --max-concurrency x --max-context tokens in pages of the layout, each sequence's last page partly used" {
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/qwen3_5_moe.capy" --plan --max-context 4096 --max-concurrency 8 \
		--prefill-chunk 64
	[ "$status" -eq 0 ]
	[[ "$output" == *"8 sequences of 4096 tokens, steps of 72 tokens, KV cache bf16"* ]]
	[[ "$output" =~ attention\ cache\ +[0-9.]+\ +([0-9]+)\ +([0-9]+)\ pages\ of\ ([0-9]+)\ tokens,\ ([0-9]+)\ bytes ]]
	local kv=${BASH_REMATCH[1]} pages=${BASH_REMATCH[2]} P=${BASH_REMATCH[3]} pb=${BASH_REMATCH[4]}
	[ "$P" -eq 64 ]
	[ "$pages" -eq $(((8 * 4096 + P - 1) / P + 8)) ]
	[ "$kv" -eq $((pages * pb)) ]
	[[ "$output" == *"recurrent states"*"8 x "* ]]
	# F32 pages are larger than BF16 ones, INT8 pages (one scale per 32 values) smaller.
	local bytes
	for kvt in f32 bf16 int8; do
		run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/qwen3_5_moe.capy" --plan --kv $kvt
		[ "$status" -eq 0 ]
		[[ "$output" =~ pages\ of\ 64\ tokens,\ ([0-9]+)\ bytes ]]
		bytes="$bytes ${BASH_REMATCH[1]}"
	done
	read -r f b i <<<"$bytes"
	[ "$f" -gt "$b" ] && [ "$b" -gt "$i" ]
	# qwen4_exp's pages hold whole QSA key blocks and the indexer's keys.
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/qwen4_exp.capy" --plan --profile test
	[ "$status" -eq 0 ]
	[[ "$output" == *"8 sequences of 4096 tokens, steps of 72 tokens"* ]]
	# With drafts (the agent profile's --spec auto) a request's item is a window of
	# --draft-tokens + 1 tokens: the step is the engine's, 256 + 4 x 5.
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/qwen4_exp.capy" --plan --profile agent --max-context 4096
	[ "$status" -eq 0 ]
	[[ "$output" == *"4 sequences of 4096 tokens, steps of 276 tokens"* ]]
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/qwen4_exp.capy" --plan --profile agent --max-context 4096 --spec off
	[[ "$output" == *"steps of 260 tokens"* ]]
}

@test "--spec mtp counts the MTP head: its tensors and experts, one more layer's rows in every page; without it, none of them" {
	local j
	for m in qwen3_5-dense qwen3_5_moe qwen3_next qwen4_exp; do
		j=$BATS_FILE_TMPDIR/$m.json
		[ "$(jq '[.tensors[] | select(.name | startswith("mtp."))] | length' "$j")" -gt 0 ]
		run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/$m.capy" --plan --max-context 4096 --max-concurrency 2
		[ "$status" -eq 0 ]
		[[ "$output" == *"weights (non-expert)"*"without the MTP head (mtp.*: --spec mtp)"* ]]
		[[ "$output" =~ pages\ of\ 64\ tokens,\ ([0-9]+)\ bytes ]]
		local pb=${BASH_REMATCH[1]} w=$(row device "weights (non-expert)") total=$(row device total)
		for t in "capy-serve --max-context 4096 --max-concurrency 2 --spec mtp" \
			"capy-serve --max-context 4096 --max-concurrency 2 --spec mtp+ngram" \
			"capy-serve --max-context 4096 --max-concurrency 2 --spec auto" "capy-gen --max-context 4096 --spec mtp"; do
			run --separate-stderr $t "$BATS_FILE_TMPDIR/$m.capy" --plan
			[ "$status" -eq 0 ] && [ -z "$stderr" ] || { echo "$t: $stderr"; return 1; }
			[[ "$output" == *"weights (non-expert)"*"with the MTP head (mtp.*)"* ]]
			[ "$(row device "weights (non-expert)")" = "$(nonexpert_bytes "$j" mtp)" ]
			[ "$(row device "weights (non-expert)")" -gt "$w" ]
			[[ "$output" =~ pages\ of\ 64\ tokens,\ ([0-9]+)\ bytes ]]
			[ "${BASH_REMATCH[1]}" -gt "$pb" ]
			local n=$(n_experts "$j" mtp)
			[ "$n" -eq 0 ] || [[ "$output" == *"all $n experts resident"* ]]
			[[ $t != capy-serve* ]] || [ "$(row device total)" -gt "$total" ]
		done
		# ngram alone: no head, the plan without --spec of a step as large (drafts make the step
		# 256 + 2 x (4 + 1) tokens: --prefill-chunk 264 + 2 without them)
		run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/$m.capy" --plan --max-context 4096 --max-concurrency 2 --spec ngram
		local ngram=$output
		[ "$(row device "weights (non-expert)")" -eq "$w" ]
		run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/$m.capy" --plan --max-context 4096 --max-concurrency 2 --prefill-chunk 264
		# the same but for the states its windows keep (the next test)
		[ "$(printf '%s\n' "$output" | grep -v -e 'recurrent states' -e 'fixed parts' -e total -e slots -e 'all [0-9]* experts')" = \
		  "$(printf '%s\n' "$ngram" | grep -v -e 'recurrent states' -e 'fixed parts' -e total -e slots -e 'all [0-9]* experts')" ]
	done
	# a model without a head: auto is ngram
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/no-head.capy" --plan --spec ngram
	local plain=$output
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/no-head.capy" --plan --spec auto
	[ "$output" = "$plain" ]
	[[ "$output" != *MTP* ]]
}

@test "--spec counts the recurrent states a verification window keeps: --draft-tokens of them per sequence, in capy-serve and capy-gen" {
	local m=qwen3_next S
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/$m.capy" --plan --max-context 4096 --max-concurrency 2
	[[ "$output" =~ recurrent\ states\ +[0-9.]+\ +([0-9]+)\ +2\ x\ ([0-9]+)\ bytes ]]
	S=${BASH_REMATCH[2]}
	[ "$S" -gt 0 ] && [ "${BASH_REMATCH[1]}" -eq $((2 * S)) ]
	local fixed=$(row device "fixed parts")
	for k in 1 3 7; do
		run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/$m.capy" --plan --max-context 4096 --max-concurrency 2 \
			--spec ngram --draft-tokens $k
		[ "$status" -eq 0 ] && [ -z "$stderr" ]
		[[ "$output" == *"2 x (1 + $k kept for drafts) x $S bytes"* ]]
		[ "$(row device "recurrent states")" -eq $((2 * (1 + k) * S)) ]
		[ "$(row device "fixed parts")" -gt "$fixed" ]
	done
	run --separate-stderr capy-gen "$BATS_FILE_TMPDIR/$m.capy" --plan --max-context 4096 --spec ngram --draft-tokens 2
	[ "$status" -eq 0 ]
	[[ "$output" == *"1 x (1 + 2 kept for drafts) x $S bytes"* ]]
	[ "$(row device "recurrent states")" -eq $((3 * S)) ]
	run --separate-stderr capy-gen "$BATS_FILE_TMPDIR/$m.capy" --plan --max-context 4096
	[[ "$output" == *"recurrent states"*"1 x $S bytes"* ]]
}

@test "capy-gen and capy-ppl plan one sequence: capy-gen's --max-context or prompt + -n, capy-ppl's --ctx" {
	run --separate-stderr capy-gen "$BATS_FILE_TMPDIR/qwen3_5_moe.capy" --plan --max-context 1000
	[ "$status" -eq 0 ]
	[[ "$output" == *"1 sequence of 1000 tokens, steps of 512 tokens"* ]]
	[[ "$output" == *" $(((1000 + 63) / 64 + 1)) pages of 64 tokens"* ]]
	run --separate-stderr capy-gen "$BATS_FILE_TMPDIR/qwen3_5_moe.capy" --plan --prompt-ids "1 2 3" -n 5
	[ "$status" -eq 0 ]
	[[ "$output" == *"1 sequence of 8 tokens"* ]]
	run --separate-stderr capy-gen "$BATS_FILE_TMPDIR/qwen3_5_moe.capy" --plan
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"--plan needs --max-context (or a prompt)"* ]]
	run --separate-stderr capy-ppl "$BATS_FILE_TMPDIR/qwen3_5_moe.capy" --plan --ctx 2048
	[ "$status" -eq 0 ]
	[[ "$output" == *"1 sequence of 2048 tokens, steps of 512 tokens"* ]]
	[[ "$output" == *" 33 pages of 64 tokens"* ]]
}

@test "--plan touches no GPU: it works with --device cuda in any build, on a machine without one" {
	run --separate-stderr capy-gen "$BATS_FILE_TMPDIR/qwen4_exp.capy" --plan --max-context 512 --device cuda --gpu-mem 1G
	[ "$status" -eq 0 ]
	[[ "$output" == *"with --gpu-mem 1024.0 MiB"* ]]
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/qwen4_exp.capy" --plan --device cuda --gpu 3
	[ "$status" -eq 0 ]
	run --separate-stderr capy-ppl "$BATS_FILE_TMPDIR/qwen4_exp.capy" --plan --device cuda
	[ "$status" -eq 0 ]
}

@test "--gpu-mem below the fixed parts: exit 1, one error line with the numbers, the table still on stdout" {
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/qwen3_5_moe.capy" --plan --gpu-mem 1M --max-context 4096 \
		--max-concurrency 2
	[ "$status" -eq 1 ]
	assert_one_error_line capy-serve
	[[ "$stderr" == "capy-serve: error: --gpu-mem 1.0 MiB is too small: the fixed parts need $(row_mib device "fixed parts") MiB (weights "*", attention cache $(row_mib device "attention cache") for 2 x 4096 tokens, recurrent states "*", step buffers "*" for 258 tokens, attention workspace "*") before any routed expert" ]]
	[[ "$output" == *"with --gpu-mem 1.0 MiB"* ]]
}

@test "--gpu-mem between the fixed parts and everything: the offload buffers join the fixed parts, the rest in slots of the largest expert, no warning" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy j=$BATS_FILE_TMPDIR/qwen3_5_moe.json
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2
	local resident_fixed=$(row device "fixed parts") slot=$(slot_bytes "$j") n=$(n_experts "$j")
	local everything=$(row device total)
	[ -z "$(row device "offload buffers")" ]
	# A plan that offloads (a byte short of everything) has the offload buffers (the slot maps
	# and the step's slot ids) among its fixed parts: its own "fixed parts" row.
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2 --gpu-mem $((everything - 1))
	[ "$status" -eq 0 ]
	local fixed=$(row device "fixed parts") off=$(row device "offload buffers")
	[ "$off" -gt 0 ]
	[ "$fixed" -eq $((resident_fixed + off)) ]
	local gpu=$((fixed + 5 * slot + slot / 2))
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2 --gpu-mem $gpu
	[ "$status" -eq 0 ]
	[ "$(row device "fixed parts")" -eq "$fixed" ]
	[ "$(row device "offload buffers")" -eq "$off" ]
	[[ "$output" == *"routed-expert slots"*"5 slots of $slot bytes: 5 of $n experts resident"* ]]
	[ "$(row device "routed-expert slots")" -eq $((5 * slot)) ]
	[ "$(row device total)" -eq $((fixed + 5 * slot)) ]
	# Offload runs such a plan: nothing on stderr.
	[ -z "$stderr" ]
	# Every routed expert then lives in host RAM, in one page-locked allocation.
	[ "$(row host "routed experts")" -eq "$(expert_bytes "$j")" ]
	[[ "$output" == *"page-locked (RLIMIT_MEMLOCK unlimited)"* ]]
	[ "$(row host needed)" -eq $(($(row host "routed experts") + $(row host "staging buffers"))) ]
	# One byte less than 5 slots: 4.
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2 --gpu-mem $((fixed + 5 * slot - 1))
	[[ "$output" == *"4 slots of $slot bytes: 4 of $n experts resident"* ]]
	# The same from capy-gen and capy-ppl (their own step size: 512 tokens).
	run --separate-stderr capy-gen "$art" --plan --max-context 4096 --gpu-mem 1G
	[ "$status" -eq 0 ]
	[[ "$output" == *"all $n experts resident"* ]]
}

@test "an elastic attention cache: past 4096 tokens a sequence's pages share the slots' memory; the budget must hold every context with no slots" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy j=$BATS_FILE_TMPDIR/qwen3_5_moe.json
	local slot=$(slot_bytes "$j") n=$(n_experts "$j")
	# The fixed parts with every page of 2 x 16384 tokens, from a plan with no budget.
	run --separate-stderr capy-serve "$art" --plan --max-context 16384 --max-concurrency 2 --expert-slots 1
	[ "$status" -eq 0 ]
	[[ "$output" =~ attention\ cache\ +[0-9.]+\ +([0-9]+)\ +([0-9]+)\ pages\ of\ 64\ tokens,\ ([0-9]+)\ bytes\ each\;\ elastic:\ ([0-9]+)\ held ]]
	local kv=${BASH_REMATCH[1]} pages=${BASH_REMATCH[2]} pb=${BASH_REMATCH[3]} held=${BASH_REMATCH[4]}
	[ "$pages" -eq $((2 * 16384 / 64 + 2)) ]
	[ "$held" -eq $((2 * 4096 / 64 + 2)) ]
	local fixed=$(row device "fixed parts") shared=$(((pages - held) * pb))
	[ "$(row device "KV shared with slots")" -eq "$shared" ]
	# One slot is less than the pages beyond the held ones: the pool is as large as those pages.
	[ "$slot" -lt "$shared" ]
	[ "$(row device total)" -eq "$fixed" ]
	# A budget of the fixed parts and 5 slots: the slots count as if the cache held only its
	# held pages, and the total stays within the budget.
	local gpu=$((fixed + 5 * slot))
	run --separate-stderr capy-serve "$art" --plan --max-context 16384 --max-concurrency 2 --gpu-mem $gpu
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	# (the fixture's experts are small against its pages: all 40 get a slot, and the pool is
	# as large as the pages beyond the held ones)
	local slots=$(((gpu - fixed + shared) / slot)) pool
	[ "$slots" -gt 5 ]
	[ "$slots" -le "$n" ] || slots=$n
	[[ "$output" == *"routed-expert slots"*"$(slots_note "$slots" "$n" "$slot")"* ]]
	pool=$((slots * slot > shared ? slots * slot : shared))
	[ "$(row device total)" -eq $((fixed - shared + pool)) ]
	[ "$(row device total)" -le "$gpu" ]
	# The budget must still hold both contexts at 16384 tokens with no slots at all.
	run --separate-stderr capy-serve "$art" --plan --max-context 16384 --max-concurrency 2 --gpu-mem $((fixed - 1))
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"is too small: the fixed parts need "*"attention cache "*" for 2 x 16384 tokens"* ]]
	# 4096 tokens or fewer a sequence: nothing to share, as before.
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2 --gpu-mem $gpu
	[[ "$output" != *elastic* ]]
	[[ "$output" != *"KV shared with slots"* ]]
	# capy-gen's one sequence likewise.
	run --separate-stderr capy-gen "$art" --plan --max-context 16384 --expert-slots 1
	[ "$status" -eq 0 ]
	[[ "$output" == *"elastic: $((4096 / 64 + 1)) held"* ]]
}

# slots_note N EXPERTS SLOT_BYTES: the routed-expert slots row's note for N slots.
slots_note() {
	echo "$1 slots of $3 bytes: $1 of $2 experts resident"
}

@test "--expert-slots N caps the slots, with or without --gpu-mem, in capy-gen, capy-ppl and capy-serve" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy j=$BATS_FILE_TMPDIR/qwen3_5_moe.json
	local slot=$(slot_bytes "$j") n=$(n_experts "$j") t
	for t in "capy-gen --max-context 4096" "capy-ppl --ctx 4096" "capy-serve --max-context 4096"; do
		# Without --gpu-mem: 3 slots anyway, every expert in host RAM.
		run --separate-stderr $t "$art" --plan --expert-slots 3
		[ "$status" -eq 0 ] || { echo "$t: $stderr"; return 1; }
		[ -z "$stderr" ]
		[[ "$output" == *"routed-expert slots"*"$(slots_note 3 "$n" "$slot")"* ]] || { echo "$t: $output"; return 1; }
		[ "$(row device "routed-expert slots")" -eq $((3 * slot)) ]
		[ "$(row device total)" -eq $(($(row device "fixed parts") + 3 * slot)) ]
		[ "$(row host "routed experts")" -eq "$(expert_bytes "$j")" ]
	done
	# With --gpu-mem: the smaller of the two.
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --expert-slots 0
	local fixed=$(row device "fixed parts")
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --gpu-mem $((fixed + 5 * slot)) --expert-slots 3
	[ "$status" -eq 0 ]
	[[ "$output" == *"$(slots_note 3 "$n" "$slot")"* ]]
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --gpu-mem $((fixed + 5 * slot)) --expert-slots 7
	[ "$status" -eq 0 ]
	[[ "$output" == *"$(slots_note 5 "$n" "$slot")"* ]]
	# As many as the experts, or more: every expert resident, as without the option.
	run --separate-stderr capy-serve "$art" --plan --max-context 4096
	local all=$output
	for k in "$n" 1000000000; do
		run --separate-stderr capy-serve "$art" --plan --max-context 4096 --expert-slots "$k"
		[ "$status" -eq 0 ]
		[ "$output" = "$all" ]
	done
}

@test "--expert-slots 0: no slots, every routed expert in host RAM, in each tool" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy j=$BATS_FILE_TMPDIR/qwen3_5_moe.json
	local slot=$(slot_bytes "$j") n=$(n_experts "$j") t
	for t in "capy-gen --max-context 4096" "capy-ppl --ctx 4096" "capy-serve --max-context 4096"; do
		run --separate-stderr $t "$art" --plan --expert-slots 0 --gpu-mem 1G
		[ "$status" -eq 0 ] || { echo "$t: $stderr"; return 1; }
		[ -z "$stderr" ]
		[[ "$output" == *"routed-expert slots"*"$(slots_note 0 "$n" "$slot")"* ]]
		[ "$(row device "routed-expert slots")" -eq 0 ]
		[ "$(row device "offload buffers")" -gt 0 ]
		[ "$(row device total)" -eq "$(row device "fixed parts")" ]
		[ "$(row host "routed experts")" -eq "$(expert_bytes "$j")" ]
		[ "$(row host needed)" -eq $(($(row host "routed experts") + $(row host "staging buffers"))) ]
	done
	# A dense model has no experts to move: the option changes nothing there.
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/qwen3_5-dense.capy" --plan
	local dense=$output
	run --separate-stderr capy-serve "$BATS_FILE_TMPDIR/qwen3_5-dense.capy" --plan --expert-slots 0
	[ "$status" -eq 0 ]
	[ "$output" = "$dense" ]
}

@test "--expert-slots and --expert-cpu-threads: bad values (-1, x, 1e99) are usage errors with one error line naming the option, in each tool" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy t v o
	echo "hello" >"$BATS_TEST_TMPDIR/text"
	for t in "capy-gen --max-context 64 --plan" "capy-ppl --plan" "capy-serve --plan" \
		"capy-gen --prompt-ids 1 -n 1" "capy-ppl $BATS_TEST_TMPDIR/text" "capy-serve --port 0"; do
		for o in --expert-slots --expert-cpu-threads; do
			for v in -1 x 1e99 ""; do
				run --separate-stderr $t "$art" "$o" "$v"
				[ "$status" -eq 2 ] || { echo "$t $o '$v': exit $status"; return 1; }
				[ -z "$output" ]
				[ "$(grep -c ': error: ' <<<"$stderr")" -eq 1 ]
				[[ "${stderr_lines[0]}" == "${t%% *}: error: "*"$o"*"'$v'"* ]] || { echo "$t $o '$v': ${stderr_lines[0]}"; return 1; }
			done
		done
	done
	# 257 threads are more than the pool takes.
	run --separate-stderr capy-gen "$art" --plan --max-context 64 --expert-cpu-threads 257
	[ "$status" -eq 2 ]
	[[ "${stderr_lines[0]}" == "capy-gen: error: --expert-cpu-threads: '257' is not 'auto' or a count 0..256" ]]
}

@test "--expert-cpu-threads auto, 0 or a count: accepted by each tool, the plan unchanged" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy t v
	for t in "capy-gen --max-context 4096" "capy-ppl --ctx 4096" "capy-serve --max-context 4096"; do
		run --separate-stderr $t "$art" --plan --expert-slots 2
		local want=$output
		for v in auto 0 1 16 256; do
			run --separate-stderr $t "$art" --plan --expert-slots 2 --expert-cpu-threads "$v"
			[ "$status" -eq 0 ] || { echo "$t --expert-cpu-threads $v: $stderr"; return 1; }
			[ -z "$stderr" ]
			[ "$output" = "$want" ]
		done
	done
}

@test "RLIMIT_MEMLOCK below the experts' bytes: the mapped artifact (not page-locked, slower), said so" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy j=$BATS_FILE_TMPDIR/qwen3_5_moe.json
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2
	local gpu=$(($(row device "fixed parts") + 3 * $(slot_bytes "$j")))
	CAPY_MEMLOCK=64K run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2 --gpu-mem $gpu
	[ "$status" -eq 0 ]
	[[ "$output" == *"routed experts"*"mapped artifact (not page-locked, slower): RLIMIT_MEMLOCK 0.1 MiB is below that"* ]]
	CAPY_MEMLOCK=1G run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2 --gpu-mem $gpu
	[[ "$output" == *"page-locked (RLIMIT_MEMLOCK 1024.0 MiB)"* ]]
	# Without CAPY_MEMLOCK the process's own limit (ulimit -l, in KiB) is read.
	local lim
	lim=$(ulimit -l)
	unset CAPY_MEMLOCK
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2 --gpu-mem $gpu
	[ "$status" -eq 0 ]
	if [ "$lim" = unlimited ]; then
		[[ "$output" == *"(RLIMIT_MEMLOCK unlimited)"* ]]
	else
		[[ "$output" == *"RLIMIT_MEMLOCK $(awk -v k="$lim" 'BEGIN { printf "%.1f", k / 1024 }') MiB"* ]]
	fi
}

@test "the RAM guard: more host RAM needed than MemAvailable is refused, naming needed, free and the page-locked limit" {
	local art=$BATS_FILE_TMPDIR/qwen3_5_moe.capy j=$BATS_FILE_TMPDIR/qwen3_5_moe.json
	run --separate-stderr capy-serve "$art" --plan --max-context 4096 --max-concurrency 2
	local gpu=$(($(row device "fixed parts") + 3 * $(slot_bytes "$j")))
	meminfo "$BATS_TEST_TMPDIR/small" 100
	CAPY_MEMINFO=$BATS_TEST_TMPDIR/small CAPY_MEMLOCK=4M run --separate-stderr capy-serve "$art" --plan \
		--max-context 4096 --max-concurrency 2 --gpu-mem $gpu
	[ "$status" -eq 1 ]
	assert_one_error_line capy-serve
	[[ "$stderr" == "capy-serve: error: not enough host RAM: $(row_mib host needed) MiB needed (routed experts $(row_mib host "routed experts"), staging buffers $(row_mib host "staging buffers")), 0.1 MiB free (MemAvailable in '$BATS_TEST_TMPDIR/small'), page-locked limit 4.0 MiB (RLIMIT_MEMLOCK)" ]]
	[[ "$output" == *"needed"*"of 0.1 MiB available (MemAvailable in $BATS_TEST_TMPDIR/small)"* ]]
	# The real /proc/meminfo is read when CAPY_MEMINFO is not set; a missing file leaves the RAM unknown.
	unset CAPY_MEMINFO
	run --separate-stderr capy-serve "$art" --plan
	[ "$status" -eq 0 ]
	[[ "$output" == *"available (MemAvailable in /proc/meminfo)"* ]]
	CAPY_MEMINFO=$BATS_TEST_TMPDIR/absent run --separate-stderr capy-serve "$art" --plan
	[ "$status" -eq 0 ]
	[[ "$output" == *"(available RAM unknown: no $BATS_TEST_TMPDIR/absent)"* ]]
}

@test "a meminfo without MemAvailable or a bad CAPY_MEMLOCK: one error line naming it" {
	printf 'MemTotal: 100 kB\n' >"$BATS_TEST_TMPDIR/bad"
	CAPY_MEMINFO=$BATS_TEST_TMPDIR/bad run --separate-stderr capy-gen "$BATS_FILE_TMPDIR/qwen4_exp.capy" --plan --max-context 64
	[ "$status" -eq 1 ]
	assert_one_error_line capy-gen
	[[ "$stderr" == *"'$BATS_TEST_TMPDIR/bad': no MemAvailable line in kB"* ]]
	CAPY_MEMLOCK=lots run --separate-stderr capy-ppl "$BATS_FILE_TMPDIR/qwen4_exp.capy" --plan
	[ "$status" -eq 1 ]
	assert_one_error_line capy-ppl
	[[ "$stderr" == *"CAPY_MEMLOCK: "*"lots"* ]]
}

@test "capy-convert --layout-only: a sparse artifact with the same plan, which engines refuse and --verify fails" {
	for m in qwen3_5_moe-nvfp4 qwen4_exp; do
		capy-convert -q -m "$FIX/$m" --layout-only -o "$BATS_TEST_TMPDIR/$m.capy"
		run capy-serve "$BATS_FILE_TMPDIR/$m.capy" --plan --gpu-mem 1G
		printf '%s\n' "$output" | sed 1d >"$BATS_TEST_TMPDIR/full"
		run capy-serve "$BATS_TEST_TMPDIR/$m.capy" --plan --gpu-mem 1G
		printf '%s\n' "$output" | sed 1d >"$BATS_TEST_TMPDIR/layout"
		diff -u "$BATS_TEST_TMPDIR/full" "$BATS_TEST_TMPDIR/layout"
	done
	run --separate-stderr capy-gen "$BATS_TEST_TMPDIR/qwen4_exp.capy" --prompt-ids "1 2" -n 1
	[ "$status" -eq 1 ]
	assert_one_error_line capy-gen
	[[ "$stderr" == *"'$BATS_TEST_TMPDIR/qwen4_exp.capy' holds no weights (capy-convert --layout-only): only --plan reads it" ]]
	run capy-convert --verify "$BATS_TEST_TMPDIR/qwen4_exp.capy"
	[ "$status" -eq 1 ]
	run capy-convert --inspect "$BATS_TEST_TMPDIR/qwen4_exp.capy"
	[[ "$output" == *"layout only (no tensor data)"* ]]
}

@test "full-size Flash-Next from its config alone: 60 GiB in a few hundred KiB of disk, planned for 16 and 80 GiB GPUs" {
	local art=$BATS_FILE_TMPDIR/flash.capy j=$BATS_FILE_TMPDIR/flash.capy.json
	[ "$(stat -c %s "$art")" -gt $((60 * 1024 * 1024 * 1024)) ]
	[ "$(du -k "$art" | cut -f1)" -lt 4096 ]
	[ "$(n_experts "$j")" -eq $((48 * 512)) ]
	# The agent profile (4 x 65536 tokens) does not fit 16 GiB before any expert...
	run --separate-stderr capy-serve "$art" --plan --profile agent --gpu-mem 16G
	[ "$status" -eq 1 ]
	[[ "$stderr" == "capy-serve: error: --gpu-mem 16384.0 MiB is too small: the fixed parts need "*" MiB ("*"attention cache "*" for 4 x 65536 tokens"* ]]
	[ "$(row device "weights (non-expert)")" = "$(nonexpert_bytes "$j")" ]
	# ... the small one does, with the rest in expert slots of the largest expert record ...
	run --separate-stderr capy-serve "$art" --plan --profile small --gpu-mem 16G
	[ "$status" -eq 0 ]
	# (its 2 x 8192 tokens are an elastic cache: the slots count without the pages beyond the
	# 2 x 4096 tokens held, which share the slots' memory)
	local fixed=$(row device "fixed parts") slot=$(slot_bytes "$j") shared=$(row device "KV shared with slots")
	[ "$shared" -gt 0 ]
	local slots=$(((16 * 1024 * 1024 * 1024 - fixed + shared) / slot))
	[[ "$output" == *"$slots slots of $slot bytes: $slots of 24576 experts resident"* ]]
	[ "$(row host "routed experts")" -eq "$(expert_bytes "$j")" ]
	[ -z "$stderr" ]
	# ... and on a 32 GiB machine the RAM guard stops it (the experts alone are 50.7 GiB).
	meminfo "$BATS_TEST_TMPDIR/m32" $((32 * 1024 * 1024))
	CAPY_MEMINFO=$BATS_TEST_TMPDIR/m32 run --separate-stderr capy-serve "$art" --plan --profile small --gpu-mem 16G
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"not enough host RAM: "*" MiB needed (routed experts 51936.0, "*"32768.0 MiB free"* ]]
	# An 80 GiB GPU holds it all.
	run --separate-stderr capy-serve "$art" --plan --profile agent --gpu-mem 80G
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	[[ "$output" == *"all 24576 experts resident"* ]]
	[ "$(row host needed)" -eq "$(row host "staging buffers")" ]
}
