#!/usr/bin/env bats
# capy-gen --spec ngram: greedy ids bit for bit those without it on every fixture family and
# on capy-tiny (a trained model where drafts are accepted) for several draft counts; the
# statistics line adds up; a seed reproduces a sampled run; bad flags are refused.

load lib

setup_file() {
	convert_fixtures $FAMILIES
	capy-convert -q -m "$SRC/share/models/capy-tiny" -o "$ART/capy-tiny.capy"
	# A prompt capy-tiny continues by repeating what it was given (drafts hit), as ids.
	printf 'Repeat this exactly: def add(a, b): return a + b. def sub(a, b): return a - b. def mul(a, b): return a * b.' |
		capy-gen --tokenize "$ART/capy-tiny.capy" >"$ART/repeat.ids"
}

# The numbers of the "spec ngram:" line of stderr file $1, as shell assignments.
spec_numbers() {
	python3 - "$1" <<'PY'
import re, sys
line = [l for l in open(sys.argv[1]) if ": spec ngram: " in l]
assert len(line) == 1, line
m = re.search(r"(\d+) windows of up to (\d+) drafts, (\d+) drafted, (\d+) accepted \(([\d.]+)%\), ([\d.]+) tokens per window, "
              r"([\d.]+) ms per window \(cut back ([\d.]+) ms\); (\d+) one-token steps", line[0])
assert m, line[0]
names = "windows k drafted accepted rate per_window ms cut_ms plain".split()
for n, v in zip(names, m.groups()):
    print("%s=%s" % (n, v))
PY
}

@test "greedy ids with --spec ngram equal those without, on every fixture family, 1, 3 and 8 drafts" {
	# Random weights rarely repeat, so every match drafts (--ngram-min 1) and the prompt
	# repeats itself: windows run, are rejected and cut back.
	prompt="5 6 7 8 9 5 6 7 8 9 5 6 7 8"
	for m in $FAMILIES; do
		want=$(capy-gen -q "$ART/$m.capy" --prompt-ids "$prompt" -n 40 --temp 0 --ids --ignore-eos)
		for k in 1 3 8; do
			capy-gen "$ART/$m.capy" --prompt-ids "$prompt" -n 40 --temp 0 --ids --ignore-eos --spec ngram \
				--draft-tokens "$k" --ngram-min 1 >"$BATS_TEST_TMPDIR/got" 2>"$BATS_TEST_TMPDIR/err"
			got=$(cat "$BATS_TEST_TMPDIR/got")
			[ "$got" = "$want" ] || { echo "$m k=$k: got $got, want $want"; false; }
			eval "$(spec_numbers "$BATS_TEST_TMPDIR/err")"
			echo "$m k=$k: $windows windows, $drafted drafted, $accepted accepted"
			[ "$windows" -gt 0 ]
		done
	done
}

@test "capy-tiny: greedy ids equal with and without --spec ngram, drafts accepted (1, 3 and 8 drafts; f32 and bf16 KV)" {
	for kv in bf16 f32; do
		want=$(capy-gen -q "$ART/capy-tiny.capy" --prompt-ids "$(cat "$ART/repeat.ids")" -n 96 --temp 0 --ids \
			--ignore-eos --kv $kv)
		for k in 1 3 8; do
			capy-gen "$ART/capy-tiny.capy" --prompt-ids "$(cat "$ART/repeat.ids")" -n 96 --temp 0 --ids --ignore-eos \
				--kv $kv --spec ngram --draft-tokens "$k" >"$BATS_TEST_TMPDIR/got" 2>"$BATS_TEST_TMPDIR/err"
			[ "$(cat "$BATS_TEST_TMPDIR/got")" = "$want" ]
			eval "$(spec_numbers "$BATS_TEST_TMPDIR/err")"
			echo "kv $kv k=$k: $windows windows, $drafted drafted, $accepted accepted, $per_window per window"
			[ "$accepted" -gt 0 ]
		done
	done
}

@test "capy-tiny: the chat answer's text is the same with --spec ngram" {
	want=$(capy-gen -q "$ART/capy-tiny.capy" --chat -p "Say hello twice, then say hello twice again." -n 64 --temp 0)
	got=$(capy-gen -q "$ART/capy-tiny.capy" --chat -p "Say hello twice, then say hello twice again." -n 64 --temp 0 \
		--spec ngram --ngram-min 1)
	[ "$got" = "$want" ]
}

@test "the statistics line adds up: tokens = 1 + window tokens + one-token steps" {
	capy-gen "$ART/capy-tiny.capy" --prompt-ids "$(cat "$ART/repeat.ids")" -n 80 --temp 0 --ids --ignore-eos \
		--spec ngram --draft-tokens 4 >"$BATS_TEST_TMPDIR/got" 2>"$BATS_TEST_TMPDIR/err"
	cat "$BATS_TEST_TMPDIR/err"
	eval "$(spec_numbers "$BATS_TEST_TMPDIR/err")"
	[ "$k" -eq 4 ]
	[ "$accepted" -le "$drafted" ]
	[ "$drafted" -le $((windows * 4)) ]
	[ "$drafted" -ge "$windows" ]
	python3 - "$windows" "$drafted" "$accepted" "$rate" "$per_window" "$plain" "$ms" "$cut_ms" <<'PY'
import sys
w, d, a, rate, per, plain, ms, cut = (float(x) for x in sys.argv[1:])
assert abs(rate - 100 * a / d) < 0.06, rate
assert abs(per - (a + w) / w) < 0.006, per
assert 1 + (a + w) + plain == 80, (a, w, plain)  # every token printed came from somewhere
assert 0 < cut < ms, (cut, ms)
PY
	run -0 --separate-stderr capy-gen -q "$ART/capy-tiny.capy" --prompt-ids "1 2 3 1 2 3" -n 8 --spec ngram --temp 0
	[ -z "$stderr" ]
}

@test "sampling with --spec ngram: a seed reproduces the run, and another seed gives another" {
	spec_seeds_check ngram "$ART/repeat.ids" 64
}

@test "bad --spec, --draft-tokens and --ngram-min are refused as usage errors naming the flag" {
	run -2 --separate-stderr capy-gen "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec mtpx
	[ "${stderr_lines[0]}" = "capy-gen: error: --spec: 'mtpx' is not mtp, ngram, mtp+ngram or off" ]
	run -2 --separate-stderr capy-gen "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec ngram --draft-tokens 0
	[ "${stderr_lines[0]}" = "capy-gen: error: option '--draft-tokens': '0' is out of range [1, 64]" ]
	run -2 --separate-stderr capy-gen "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec ngram --draft-tokens 65
	[[ "${stderr_lines[0]}" == "capy-gen: error: option '--draft-tokens': '65' is out of range"* ]]
	run -2 --separate-stderr capy-gen "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec ngram --ngram-min 0
	[[ "${stderr_lines[0]}" == "capy-gen: error: option '--ngram-min': '0' is out of range"* ]]
	run -2 --separate-stderr capy-gen "$ART/capy-tiny.capy" --prompt-ids "1 2" --spec ngram --regex 'a+'
	[ "${stderr_lines[0]}" = "capy-gen: error: --spec ngram does not go with --grammar, --json-schema or --regex yet" ]
	[ -z "$output" ]
}
