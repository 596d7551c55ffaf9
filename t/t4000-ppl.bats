#!/usr/bin/env bats
# capy-ppl: windows, output forms and bad input. (Its numbers are checked against the
# transformers references in t3000.)

load lib

setup_file() {
	export ART=$BATS_FILE_TMPDIR/m.capy
	capy-convert -q -m "$FIX/qwen4_exp" -o "$ART"
	python3 -c 'import json, sys; print(" ".join(map(str, json.load(open(sys.argv[1]))["ids"][:80])))' \
		"$FIX/qwen4_exp/ref.json" >"$BATS_FILE_TMPDIR/ids"
}

@test "windows cover the text once: every token after the first is scored exactly once" {
	run capy-ppl -q "$ART" "$BATS_FILE_TMPDIR/ids" --ids --json --ctx 32 --stride 24
	[ "$status" -eq 0 ]
	python3 - <<PY
import json
d = json.loads('''$output''')
assert d["tokens"] == 80 and d["scored"] == 79, d
ws = d["windows"]
assert [(w["begin"], w["end"]) for w in ws] == [(0, 32), (24, 56), (48, 80)], ws
assert sum(w["scored"] for w in ws) == 79
PY
}

@test "one window over everything equals the mean of the per-token NLL" {
	run capy-ppl -q "$ART" "$BATS_FILE_TMPDIR/ids" --ids --json --per-token --ctx 4096
	python3 - <<PY
import json, math
d = json.loads('''$output''')
t = d["token_nll"]
assert len(t) == 79
assert abs(sum(t) / len(t) - d["nll"]) < 1e-9 and abs(math.exp(d["nll"]) - d["ppl"]) < 1e-6 * d["ppl"]
PY
}

@test "text input is tokenized; the plain output is one line" {
	run --separate-stderr capy-ppl "$ART" "$SRC/t/fixtures/README.md" --ctx 128 -t 1
	[ "$status" -eq 0 ]
	[[ "$output" =~ ^ppl\ [0-9]+\.[0-9]{6}\ over\ [0-9]+\ tokens\ \(ctx\ 128,\ stride\ 128\)$ ]]
	[[ "$stderr" == *"tokens in"*"tok/s), 1 threads"* ]]
}

@test "bad input: too few tokens, an id beyond the vocabulary, a non-number, bad options" {
	echo 5 >"$BATS_TEST_TMPDIR/one"
	run --separate-stderr capy-ppl -q "$ART" "$BATS_TEST_TMPDIR/one" --ids
	[ "$status" -eq 1 ]
	[[ "$stderr" == "capy-ppl: error: '$BATS_TEST_TMPDIR/one' holds 1 tokens; at least 2 are needed" ]]
	echo "5 6 99999" >"$BATS_TEST_TMPDIR/big"
	run --separate-stderr capy-ppl -q "$ART" "$BATS_TEST_TMPDIR/big" --ids
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"token id 99999 at position 2 is outside the vocabulary [0, 576)" ]]
	echo "5 six" >"$BATS_TEST_TMPDIR/word"
	run --separate-stderr capy-ppl -q "$ART" "$BATS_TEST_TMPDIR/word" --ids
	[ "$status" -eq 1 ]
	[[ "$stderr" == "capy-ppl: error: '$BATS_TEST_TMPDIR/word': token 1: 'six' is not an integer" ]]
	run --separate-stderr capy-ppl "$ART" "$BATS_FILE_TMPDIR/ids" --ids --ctx 16 --stride 32
	[ "$status" -eq 2 ]
	run --separate-stderr capy-ppl "$ART"
	[ "$status" -eq 2 ]
	run --separate-stderr capy-ppl "$BATS_TEST_TMPDIR/word" "$BATS_FILE_TMPDIR/ids"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"is not a capy artifact"* ]]
}
