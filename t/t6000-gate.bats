#!/usr/bin/env bats
# capy-gate: every fixture (and capy-tiny) against its committed reference in t/gate/, so a
# change that moves any bit of any family's output fails here unless the reference is
# re-recorded in the same commit; and the gate failing when the output moves (an id, a ppl
# digit, a served text), warning on timing, refusing another model's or a broken reference.

load lib

setup_file() {
	convert_fixtures $FAMILIES
	capy-convert -q -m "$SRC/share/models/capy-tiny" -o "$ART/capy-tiny.capy"
}

# gate_fixture NAME [ARGS...]: the gate of one model against its committed reference.
gate_fixture() {
	local m=$1
	shift
	run --separate-stderr capy-gate -q --model "$ART/$m.capy" --ref "$SRC/t/gate/$m" \
		--summary "$BATS_TEST_TMPDIR/summary.txt" "$@"
	echo "$output"
	echo "$stderr" >&2
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "golden PASS 3 prompts, 48 greedy ids equal" ]]
	[[ "${lines[1]}" == "ppl PASS "*": every digit equal" ]]
	[[ "${lines[2]}" == "greedy PASS 2 answers through capy-serve equal" ]]
	[[ "${lines[3]}" == "timing PASS "* || "${lines[3]}" == "timing WARN "* ]]
	[ "${#lines[@]}" -eq 4 ]
}

# A private copy of a committed reference, path in REF.
copy_ref() {
	REF=$BATS_TEST_TMPDIR/ref
	cp -r "$SRC/t/gate/$1" "$REF"
}

@test "qwen3_5-dense passes its committed reference" {
	gate_fixture qwen3_5-dense --threads 2
}

@test "qwen3_5_moe passes its committed reference" {
	gate_fixture qwen3_5_moe --threads 2
}

@test "qwen3_5_moe-nvfp4 passes its committed reference" {
	gate_fixture qwen3_5_moe-nvfp4 --threads 2
}

@test "qwen3_next passes its committed reference" {
	gate_fixture qwen3_next --threads 2
}

@test "qwen4_exp passes its committed reference" {
	gate_fixture qwen4_exp --threads 2
}

@test "capy-tiny passes its committed reference (a real calculator call and its answer)" {
	gate_fixture capy-tiny --threads 2
	grep -q '"content":	"128 \* 46 is 5888."' "$SRC/t/gate/capy-tiny/greedy.json"
}

@test "the results do not depend on the thread count: every fixture passes with 1 thread too (recorded with 2)" {
	for m in $FAMILIES capy-tiny; do
		for t in 1; do
			run --separate-stderr capy-gate -q --model "$ART/$m.capy" --ref "$SRC/t/gate/$m" --threads $t \
				--stages golden,ppl --summary "$BATS_TEST_TMPDIR/s.txt"
			echo "$m -t $t: $output"
			[ "$status" -eq 0 ]
		done
	done
}

@test "the summary file holds the stage lines and the verdict" {
	s=$BATS_TEST_TMPDIR/summary.txt
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5_moe.capy" --ref "$SRC/t/gate/qwen3_5_moe" --stages golden,ppl --summary "$s"
	[ "$status" -eq 0 ]
	grep -qx "model: $ART/qwen3_5_moe.capy (qwen3_5_moe, weights xxh3 $(jq -r .weights_xxh3 "$SRC/t/gate/qwen3_5_moe/model.json"))" "$s"
	grep -qx "golden PASS 3 prompts, 48 greedy ids equal" "$s"
	grep -qx "result: PASS (2 stages, 0 failed, 0 warned)" "$s"
}

@test "golden: one greedy id changed in the reference fails, naming the prompt, the position and both ids" {
	copy_ref qwen3_next
	python3 - "$REF/golden.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ids = d["prompts"][1]["ids"]
print(ids[5])
ids[5] = (ids[5] + 1) % 500
json.dump(d, open(sys.argv[1], "w"), indent=1)
PY
	want=$(jq -r '.prompts[1].ids[5]' "$REF/golden.json")
	got=$(jq -r '.prompts[1].ids[5]' "$SRC/t/gate/qwen3_next/golden.json")
	run --separate-stderr capy-gate -q --model "$ART/qwen3_next.capy" --ref "$REF" --stages golden --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 1 ]
	[ "$output" = "golden FAIL prompt 'chat-tool': greedy ids differ at position 5: $got, reference $want (16 and 16 ids)" ]
	grep -qx "result: FAIL (1 stages, 1 failed, 0 warned)" "$BATS_TEST_TMPDIR/s"
}

@test "golden: changed prompt ids (a tokenizer or template change) fail as such" {
	copy_ref qwen3_5-dense
	jq '.prompts[0].prompt_ids[3] += 1' "$SRC/t/gate/qwen3_5-dense/golden.json" >"$REF/golden.json"
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5-dense.capy" --ref "$REF" --stages golden --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 1 ]
	[[ "$output" == "golden FAIL prompt 'text': prompt ids differ at position 3: "* ]]
}

@test "ppl: one printed digit changed in the table fails, naming the window and both values" {
	copy_ref qwen3_5_moe-nvfp4
	# the last digit of window 2's nll
	awk -F'\t' 'BEGIN { OFS = "\t" } $1 == "128" { d = substr($4, length($4)); $4 = substr($4, 1, length($4) - 1) ((d + 1) % 10) } { print }' \
		"$SRC/t/gate/qwen3_5_moe-nvfp4/ppl.tsv" >"$REF/ppl.tsv"
	! cmp -s "$REF/ppl.tsv" "$SRC/t/gate/qwen3_5_moe-nvfp4/ppl.tsv"
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5_moe-nvfp4.capy" --ref "$REF" --stages ppl --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 1 ]
	[[ "$output" == "ppl FAIL window 2 (tokens 128..192): nll "*", reference "* ]]
}

@test "ppl: the exact sum moved in its last digit fails too, though the printed nll is equal" {
	copy_ref qwen4_exp
	awk -F'\t' 'BEGIN { OFS = "\t" } $1 == "0" { d = substr($5, length($5)); $5 = substr($5, 1, length($5) - 1) ((d + 1) % 10) } { print }' \
		"$SRC/t/gate/qwen4_exp/ppl.tsv" >"$REF/ppl.tsv"
	run --separate-stderr capy-gate -q --model "$ART/qwen4_exp.capy" --ref "$REF" --stages ppl --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 1 ]
	[[ "$output" == "ppl FAIL window 0 (tokens 0..64): nll_sum "*" (the printed nll equal)" ]]
}

@test "ppl --paired: the same model passes with p 1; a reference 1 % better in every window fails" {
	copy_ref qwen3_5_moe
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5_moe.capy" --ref "$REF" --stages ppl --paired --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 0 ]
	[[ "$output" == "ppl PASS paired over 14 windows: mean NLL change +0 (se 0, t 0, p 1), ppl change +0 % (95 %: +0 .. +0 %), sign test 0 worse 0 better 14 equal p 1" ]]
	# the reference's sums lowered: the model now looks worse in every window
	awk -F'\t' 'BEGIN { OFS = "\t" } $1 ~ /^[0-9]+$/ { $5 = sprintf("%.17g", $5 * 0.99) } { print }' \
		"$SRC/t/gate/qwen3_5_moe/ppl.tsv" >"$REF/ppl.tsv"
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5_moe.capy" --ref "$REF" --stages ppl --paired --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 1 ]
	[[ "$output" == "ppl FAIL paired over 14 windows: mean NLL change +"*"sign test 14 worse 0 better 0 equal p 0.000122; worse at p < 0.05; |change| >= 0.5 %" ]]
}

@test "other CPU kernels (CAPY_ISA=scalar against the AVX2 references): the digits move, the paired test passes" {
	run --separate-stderr env CAPY_ISA=scalar capy-gate -q --model "$ART/qwen4_exp.capy" --ref "$SRC/t/gate/qwen4_exp" \
		--stages ppl --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 1 ]
	[[ "$output" == "ppl FAIL window "* ]]
	grep -q "^engine: cpu (scalar kernels), [0-9]* threads$" "$BATS_TEST_TMPDIR/s"
	run --separate-stderr env CAPY_ISA=scalar capy-gate -q --model "$ART/qwen4_exp.capy" --ref "$SRC/t/gate/qwen4_exp" \
		--stages ppl --paired --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 0 ]
	[[ "$output" == "ppl PASS paired over 14 windows: mean NLL change "* ]]
	[[ "$output" != *"+0 (se 0, t 0, p 1)"* ]]
}

@test "greedy: a changed text in the reference fails, naming the request, the field and the byte" {
	copy_ref capy-tiny
	jq '.requests[1].answer.content = "128 * 46 is 5889."' "$SRC/t/gate/capy-tiny/greedy.json" >"$REF/greedy.json"
	run --separate-stderr capy-gate -q --model "$ART/capy-tiny.capy" --ref "$REF" --stages greedy --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 1 ]
	[ "$output" = 'greedy FAIL request '"'"'chat-tool-result'"'"': content differs at byte 15: "128 * 46 is 5888.", reference "128 * 46 is 5889."' ]
}

@test "timing: a reference far faster than any machine warns and never fails" {
	copy_ref qwen3_5-dense
	echo '{"prefill_tok_s": 1e12, "decode_tok_s": 1e12, "ppl_tok_s": 1e12, "greedy_s": 1e-9}' >"$REF/timing.json"
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5-dense.capy" --ref "$REF" --stages golden,ppl,timing \
		--summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 0 ]
	[[ "${lines[2]}" == "timing WARN prefill_tok_s "*"slower"*"; 3 slower by more than 50 %" ]]
	grep -qx "result: PASS (3 stages, 0 failed, 1 warned)" "$BATS_TEST_TMPDIR/s"
}

@test "a reference of another model is refused (exit 2), naming both models" {
	run --separate-stderr capy-gate -q --model "$ART/qwen3_next.capy" --ref "$SRC/t/gate/qwen3_5_moe" --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 2 ]
	[ -z "$output" ]
	assert_one_error_line capy-gate
	[[ "$stderr" == *"t/gate/qwen3_5_moe/model.json': field 'family': the reference is of another model ('qwen3_5_moe.capy', qwen3_5_moe, weights "*"), not of '$ART/qwen3_next.capy' (qwen3_next, weights "* ]]
	# the same family, other weights: the NVFP4 export of the same model
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5_moe-nvfp4.capy" --ref "$SRC/t/gate/qwen3_5_moe" --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"model.json': field 'weights_xxh3': the reference is of another model"* ]]
}

@test "a broken reference is refused (exit 2) with the file and the field" {
	copy_ref qwen3_5-dense
	jq '.prompts[2].ids[0] = "x"' "$SRC/t/gate/qwen3_5-dense/golden.json" >"$REF/golden.json"
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5-dense.capy" --ref "$REF" --stages golden --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 2 ]
	assert_one_error_line capy-gate
	[ "$stderr" = "capy-gate: error: golden: '$REF/golden.json': field 'prompts[2].ids': item 0 is not a token id" ]
	rm "$REF/ppl.tsv"
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5-dense.capy" --ref "$REF" --stages ppl --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 2 ]
	[[ "$stderr" == "capy-gate: error: ppl: cannot open '$REF/ppl.tsv': No such file or directory (record the reference with --record)" ]]
	printf '{"family": "qwen3_5"' >"$REF/model.json"
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5-dense.capy" --ref "$REF" --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 2 ]
	[ "$stderr" = "capy-gate: error: '$REF/model.json': invalid JSON at line 1, column 20 (byte 19)" ]
}

@test "--record writes the committed reference again, bit for bit, leaving no temporary files" {
	REF=$BATS_TEST_TMPDIR/new
	# recorded with the committed reference's kernels: each ISA sums the float kernels in its own
	# order, so a reference holds one ISA's digits (and names it), and the CI machines differ
	isa=$(jq -r .cpu_isa "$SRC/t/gate/qwen3_5_moe/model.json")
	CAPY_ISA=$isa run --separate-stderr capy-gate -q --model "$ART/qwen3_5_moe.capy" --ref "$REF" --record \
		--ppl-text "$SRC/t/gate/ppl.txt" --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == "golden RECORDED 3 prompts, 48 greedy ids recorded" ]]
	[ "$(ls "$REF" | tr '\n' ' ')" = "golden.json greedy.json model.json ppl-text.txt ppl.tsv timing.json " ]
	[ -z "$(find "$REF" -name '.*')" ]
	# the same bits as the committed reference, which the gate passes (timing apart)
	for f in golden.json greedy.json model.json ppl-text.txt ppl.tsv; do
		diff -u "$SRC/t/gate/qwen3_5_moe/$f" "$REF/$f"
	done
	jq -e '.prefill_tok_s > 0 and .decode_tok_s > 0 and .ppl_tok_s > 0 and .greedy_s > 0' "$REF/timing.json"
}

@test "bad usage exits 2: no model, an unknown stage, --paired with --record, --ppl-text without it" {
	run --separate-stderr capy-gate --ref "$SRC/t/gate/qwen3_5_moe"
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"--model and --ref are needed"* ]]
	run --separate-stderr capy-gate --model "$ART/qwen3_5_moe.capy" --ref "$SRC/t/gate/qwen3_5_moe" --stages golden,speed
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"--stages: 'speed' is not golden, ppl, greedy or timing"* ]]
	run --separate-stderr capy-gate --model "$ART/qwen3_5_moe.capy" --ref "$BATS_TEST_TMPDIR/r" --record --paired
	[ "$status" -eq 2 ]
	run --separate-stderr capy-gate --model "$ART/qwen3_5_moe.capy" --ref "$SRC/t/gate/qwen3_5_moe" --ppl-text "$SRC/t/gate/ppl.txt"
	[ "$status" -eq 2 ]
	run --separate-stderr capy-gate --model "$ART/qwen3_5_moe.capy" --ref "$BATS_TEST_TMPDIR/r" --record --stages ppl
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"--record of the ppl stage needs --ppl-text"* ]]
}

@test "the greedy stage finds capy-serve beside capy-gate, or in --bin-dir" {
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5-dense.capy" --ref "$SRC/t/gate/qwen3_5-dense" --stages greedy \
		--bin-dir "$BATS_TEST_TMPDIR/none" --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 1 ]
	[ "$stderr" = "capy-gate: error: cannot run '$BATS_TEST_TMPDIR/none/capy-serve': No such file or directory (--bin-dir names its directory)" ]
	run --separate-stderr capy-gate -q --model "$ART/qwen3_5-dense.capy" --ref "$SRC/t/gate/qwen3_5-dense" --stages greedy \
		--bin-dir "$(dirname "$(command -v capy-serve)")" --summary "$BATS_TEST_TMPDIR/s"
	[ "$status" -eq 0 ]
}
