#!/usr/bin/env bats
# capy-gen --regex: on the random-weight fixtures (their preferences are noise, so the regex's
# grammar does all the work) every complete output, over seeds and sampling settings, matches
# the regular expression whole (checked with Python's re.fullmatch); a regex outside the
# subset is refused in one line naming the construct and its offset, exit 1.

load lib

setup_file() {
	convert_fixtures qwen3_5_moe qwen3_5-dense
}

# fullmatch REGEX FILE: the whole file matches the regular expression.
fullmatch() {
	python3 -c 'import re, sys; sys.exit(0 if re.fullmatch(sys.argv[1], open(sys.argv[2], encoding="utf-8").read()) else 1)' "$1" "$2"
}

@test "--regex: every complete output matches the regex whole, over models, regexes, seeds and sampling settings" {
	local n=0 complete=0 model re seed opts out
	local regexes=(
		'\d{4}-\d{2}-\d{2}'
		'(yes|no)( [a-z]{1,5}){0,3}\.'
		'[A-Za-z0-9._%+-]{1,12}@[a-z]{1,8}\.(com|org)'
		'"[^"\\]{0,6}" \\ [\t ]?(x|é+)'
		'ID-[A-F0-9]{2,4}(,ID-[A-F0-9]{2,4})*;?'
	)
	for model in qwen3_5_moe qwen3_5-dense; do
		for re in "${regexes[@]}"; do
			for opts in "--temp 0" "--temp 1" "--temp 1.5 --top-k 50"; do
				for seed in 1 2; do
					out=$BATS_TEST_TMPDIR/out-$n
					# shellcheck disable=SC2086
					capy-gen "$ART/$model.capy" -p "Answer:" --regex "$re" -n 80 --seed "$seed" $opts \
						>"$out.raw" 2>"$out.err"
					head -c -1 "$out.raw" >"$out" # capy-gen's closing newline
					n=$((n + 1))
					grep -q 'incomplete' "$out.err" && continue
					complete=$((complete + 1))
					fullmatch "$re" "$out" || { echo "$model '$re' $opts seed $seed:"; cat -A "$out"; false; }
				done
			done
		done
	done
	echo "$complete of $n complete" >&3
	[ "$n" -eq 60 ]
	[ "$complete" -ge 40 ]
}

@test "--regex: -n too small warns that the output is incomplete; the text so far is a prefix of a match" {
	run --separate-stderr capy-gen "$ART/qwen3_5_moe.capy" -p x --regex 'abc[a-z]{20}' -n 3 --seed 1
	[ "$status" -eq 0 ]
	[[ "$output" == abc* ]]
	[[ "$stderr" == *"warning: the output is incomplete: stopped by length before the grammar was complete"* ]]
}

@test "--regex: a construct outside the subset is refused in one line naming it and its offset, exit 1" {
	local bad want
	while IFS='|' read -r bad want; do
		run --separate-stderr capy-gen "$ART/qwen3_5_moe.capy" -p x --regex "$bad"
		[ "$status" -eq 1 ]
		[ -z "$output" ]
		assert_one_error_line capy-gen
		[[ "$stderr" == "capy-gen: error: regex: $want" ]] || { echo "$bad: $stderr"; false; }
	done <<'EOF2'
ab(?=c)|lookahead is not supported at offset 2
(?<=a)b|lookbehind is not supported at offset 0
(a)\1|backreferences are not supported at offset 4
\bword|word boundaries (\b, \B) are not supported at offset 1
x\p{L}|Unicode property escapes (\p, \P) are not supported at offset 2
a^b|an anchor (^ or $) is supported only at the ends of the pattern at offset 1
x(a*)+|a repetition of something that can match the empty string is not supported at offset 1
ab(c|unclosed group at offset 4
*a|nothing to repeat at offset 0
EOF2
	run --separate-stderr capy-gen "$ART/qwen3_5_moe.capy" -p x --regex a --grammar "$FIX/grammars/list.gbnf"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"one constraint at a time"* ]]
}
