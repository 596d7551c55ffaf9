#!/usr/bin/env bats
# capy-gen --spec mtp (the model's MTP head drafts) and --spec mtp+ngram: greedy ids bit for
# bit those without speculation on every family with an MTP head and on capy-tiny (whose head
# is trained, so drafts are accepted), 1 to 4 drafts, BF16 and F32 KV; a draft vocabulary
# (--draft-shortlist); a seed reproduces a sampled run; what is refused.

load lib

MTP_FAMILIES="qwen3_5-dense qwen3_5_moe qwen3_5_moe-nvfp4 qwen3_next qwen4_exp"

setup_file() {
	convert_fixtures $FAMILIES
	capy-convert -q -m "$SRC/share/models/capy-tiny" -o "$ART/capy-tiny.capy"
	# a model without a head: random weights from qwen4_exp's config, no mtp.* tensors
	capy-convert -q --synthetic "$FIX/qwen4_exp/config.json" -o "$ART/no-head.capy"
	printf 'Repeat this exactly: def add(a, b): return a + b. def sub(a, b): return a - b. def mul(a, b): return a * b.' |
		capy-gen --tokenize "$ART/capy-tiny.capy" >"$ART/repeat.ids"
	printf 'The model reads the cache and writes the value of the key to the file.' |
		capy-gen --tokenize "$ART/capy-tiny.capy" >"$ART/prose.ids"
}

# The numbers of the two "spec SPEC:" lines of stderr file $1, as shell assignments.
spec_numbers() {
	python3 - "$1" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r": spec \S+: (\d+) windows of up to (\d+) drafts, (\d+) drafted, (\d+) accepted \(([\d.]+)%\), "
              r"([\d.]+) tokens per window, ([\d.]+) ms per window \(cut back ([\d.]+) ms\); (\d+) one-token steps", text)
assert m, text
names = "windows k drafted accepted rate per_window ms cut_ms plain".split()
for n, v in zip(names, m.groups()):
    print("%s=%s" % (n, v))
m = re.search(r": spec \S+: (\d+) windows drafted by MTP, (\d+) by n-gram; MTP drafting ([\d.]+) ms per MTP window", text)
assert m, text
for n, v in zip("mtp_windows ngram_windows draft_ms".split(), m.groups()):
    print("%s=%s" % (n, v))
PY
}

@test "greedy ids with --spec mtp equal those without, on every family with an MTP head, 1 to 4 drafts" {
	prompt="5 6 7 8 9 5 6 7 8 9 5 6 7 8"
	for m in $MTP_FAMILIES; do
		want=$(capy-gen -q "$ART/$m.capy" --prompt-ids "$prompt" -n 40 --temp 0 --ids --ignore-eos)
		for k in 1 2 3 4; do
			capy-gen "$ART/$m.capy" --prompt-ids "$prompt" -n 40 --temp 0 --ids --ignore-eos --spec mtp \
				--draft-tokens "$k" >"$BATS_TEST_TMPDIR/got" 2>"$BATS_TEST_TMPDIR/err"
			got=$(cat "$BATS_TEST_TMPDIR/got")
			[ "$got" = "$want" ] || { echo "$m k=$k: got $got, want $want"; false; }
			eval "$(spec_numbers "$BATS_TEST_TMPDIR/err")"
			echo "$m k=$k: $windows windows, $drafted drafted, $accepted accepted"
			[ "$windows" -gt 0 ] && [ "$mtp_windows" -eq "$windows" ] && [ "$ngram_windows" -eq 0 ]
		done
	done
}

@test "capy-tiny: greedy ids equal with and without --spec mtp, drafts accepted (1 to 4 drafts; bf16 and f32 KV)" {
	for ids in repeat prose; do
		for kv in bf16 f32; do
			want=$(capy-gen -q "$ART/capy-tiny.capy" --prompt-ids "$(cat "$ART/$ids.ids")" -n 64 --temp 0 --ids \
				--ignore-eos --kv $kv)
			for k in 1 2 3 4; do
				capy-gen "$ART/capy-tiny.capy" --prompt-ids "$(cat "$ART/$ids.ids")" -n 64 --temp 0 --ids --ignore-eos \
					--kv $kv --spec mtp --draft-tokens "$k" >"$BATS_TEST_TMPDIR/got" 2>"$BATS_TEST_TMPDIR/err"
				[ "$(cat "$BATS_TEST_TMPDIR/got")" = "$want" ]
				eval "$(spec_numbers "$BATS_TEST_TMPDIR/err")"
				echo "$ids kv $kv k=$k: $windows windows, $drafted drafted, $accepted accepted ($rate %), $per_window per window"
				[ "$accepted" -gt 0 ]
				python3 -c "import sys; w, a, p = map(float, sys.argv[1:]); assert abs(p - (a + w) / w) < 0.006" \
					"$windows" "$accepted" "$per_window"
			done
		done
	done
}

@test "--spec mtp+ngram: the same ids, windows from both drafters" {
	want=$(capy-gen -q "$ART/capy-tiny.capy" --prompt-ids "$(cat "$ART/repeat.ids")" -n 96 --temp 0 --ids --ignore-eos)
	capy-gen "$ART/capy-tiny.capy" --prompt-ids "$(cat "$ART/repeat.ids")" -n 96 --temp 0 --ids --ignore-eos \
		--spec mtp+ngram --draft-tokens 3 >"$BATS_TEST_TMPDIR/got" 2>"$BATS_TEST_TMPDIR/err"
	[ "$(cat "$BATS_TEST_TMPDIR/got")" = "$want" ]
	eval "$(spec_numbers "$BATS_TEST_TMPDIR/err")"
	cat "$BATS_TEST_TMPDIR/err"
	[ "$mtp_windows" -gt 0 ] && [ "$ngram_windows" -gt 0 ] && [ $((mtp_windows + ngram_windows)) -eq "$windows" ]
}

@test "--draft-shortlist: drafts from a smaller vocabulary, the same ids; a bad list is refused naming its line" {
	{ echo "# a hand-made draft vocabulary"; seq 0 1999; } >"$BATS_TEST_TMPDIR/short"
	want=$(capy-gen -q "$ART/capy-tiny.capy" --prompt-ids "$(cat "$ART/prose.ids")" -n 48 --temp 0 --ids --ignore-eos)
	got=$(capy-gen -q "$ART/capy-tiny.capy" --prompt-ids "$(cat "$ART/prose.ids")" -n 48 --temp 0 --ids --ignore-eos \
		--spec mtp --draft-shortlist "$BATS_TEST_TMPDIR/short")
	[ "$got" = "$want" ]
	printf '1\n2\nfoo\n' >"$BATS_TEST_TMPDIR/bad"
	run -1 --separate-stderr capy-gen -q "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec mtp --draft-shortlist "$BATS_TEST_TMPDIR/bad"
	[ "${stderr_lines[0]}" = "capy-gen: error: --draft-shortlist: '$BATS_TEST_TMPDIR/bad' line 3: not a token id below 4096" ]
	printf '1\n2\n1\n' >"$BATS_TEST_TMPDIR/bad"
	run -1 --separate-stderr capy-gen -q "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec mtp --draft-shortlist "$BATS_TEST_TMPDIR/bad"
	[ "${stderr_lines[0]}" = "capy-gen: error: --draft-shortlist: '$BATS_TEST_TMPDIR/bad' line 3: id 1 is listed twice" ]
}

@test "sampling with --spec mtp: a seed reproduces the run, and another seed gives another" {
	spec_seeds_check mtp "$ART/prose.ids" 48
}

@test "refused: --spec mtp on a model without a head, --draft-shortlist without mtp, a bad --spec" {
	run -1 --separate-stderr capy-gen -q "$ART/no-head.capy" --prompt-ids "1 2" --spec mtp
	[ "${stderr_lines[0]}" = "capy-gen: error: '$ART/no-head.capy' has no MTP head (no mtp.* tensors)" ]
	run -2 --separate-stderr capy-gen "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec ngram --draft-shortlist x
	[ "${stderr_lines[0]}" = "capy-gen: error: --draft-shortlist goes with --spec mtp or mtp+ngram" ]
	run -2 --separate-stderr capy-gen "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec eagle
	[ "${stderr_lines[0]}" = "capy-gen: error: --spec: 'eagle' is not mtp, ngram, mtp+ngram or off" ]
	run -2 --separate-stderr capy-gen "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec mtp --json-schema x
	[ "${stderr_lines[0]}" = "capy-gen: error: --spec mtp does not go with --grammar, --json-schema or --regex yet" ]
}
