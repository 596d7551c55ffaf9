#!/usr/bin/env bats
# capy-gen --grammar: on the random-weight fixtures (whose preferences are noise, so the
# grammar does all the work) every output, over seeds, temperatures and filters, is in the
# grammar's language, checked outside capy (Python's json and re); bad grammars are refused
# with file:line:column.

load lib

setup_file() {
	convert_fixtures qwen3_5_moe qwen3_5-dense
	# JSON two levels deep with short strings and arrays: a random walk through it ends soon.
	cat >"$ART/json2.gbnf" <<'EOF'
root   ::= obj1
obj1   ::= "{" ws ( pair1 ( "," ws pair1 ){0,3} )? "}"
pair1  ::= str ws ":" ws val1 ws
val1   ::= obj2 | arr2 | scalar
obj2   ::= "{" ws ( pair2 ( "," ws pair2 ){0,3} )? "}"
pair2  ::= str ws ":" ws scalar ws
arr2   ::= "[" ws ( scalar ws ( "," ws scalar ws ){0,3} )? "]"
scalar ::= str | num | "true" | "false" | "null"
str    ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) ){0,12} "\""
num    ::= "-"? ( "0" | [1-9] [0-9]{0,5} ) ( "." [0-9]{1,4} )? ( [eE] [-+]? [0-9]{1,2} )?
ws     ::= [ \t\n]{0,2}
EOF
	cat >"$ART/list.gbnf" <<'EOF'
# one to three items of lower-case words
root ::= item{1,3}
item ::= "- " [a-z ]{1,10} "\n"
EOF
}

# gen MODEL GRAMMAR OUT ARGS...: the text of one run (without capy-gen's closing newline) in
# OUT, its stderr in OUT.err.
gen() {
	local model=$1 grammar=$2 out=$3
	shift 3
	capy-gen "$ART/$model.capy" -p "Write it:" --grammar "$grammar" "$@" >"$out.raw" 2>"$out.err"
	head -c -1 "$out.raw" >"$out"
}

# is_json FILE: the whole file is one JSON document (surrounding whitespace aside).
is_json() {
	python3 -c 'import json, sys; json.loads(open(sys.argv[1], encoding="utf-8").read())' "$1"
}

# matches REGEX FILE: the whole file matches the regular expression.
matches() {
	python3 -c 'import re, sys; sys.exit(0 if re.fullmatch(sys.argv[1], open(sys.argv[2], encoding="utf-8").read()) else 1)' "$1" "$2"
}

@test "--grammar: every output of a bounded JSON grammar is valid JSON, over models, seeds and sampling settings" {
	n=0
	for model in qwen3_5_moe qwen3_5-dense; do
		for opts in "--temp 0" "--temp 0.8" "--temp 1.5" "--temp 1 --top-k 20" "--temp 1.2 --top-p 0.9 --min-p 0.05"; do
			for seed in 1 2 3; do
				out=$BATS_TEST_TMPDIR/out-$n
				# shellcheck disable=SC2086
				gen "$model" "$ART/json2.gbnf" "$out" -n 400 --seed "$seed" $opts
				grep -Eq 'stopped by (grammar|eos)' "$out.err" || { cat "$out.err"; false; }
				is_json "$out" || { echo "$model $opts seed $seed: not JSON:"; cat "$out"; false; }
				n=$((n + 1))
			done
		done
	done
	[ "$n" -eq 30 ]
}

@test "--grammar: every output of a list grammar matches its regular expression" {
	for seed in 1 2 3 4 5 6; do
		for t in 0 0.7 1.5; do
			out=$BATS_TEST_TMPDIR/list-$seed-$t
			gen qwen3_5_moe "$ART/list.gbnf" "$out" -n 200 --seed "$seed" --temp "$t"
			matches '(- [a-z ]{1,10}\n){1,3}' "$out" || { echo "seed $seed temp $t:"; cat -A "$out"; false; }
		done
	done
}

@test "--grammar with llama.cpp's json.gbnf: complete outputs are JSON, incomplete ones say so" {
	complete=0
	for seed in 1 2 3 4; do
		out=$BATS_TEST_TMPDIR/full-$seed
		gen qwen3_5_moe "$FIX/grammars/json.gbnf" "$out" -n 600 --seed "$seed" --temp 1
		if grep -Eq 'stopped by (grammar|eos)' "$out.err"; then
			is_json "$out" || { cat "$out"; false; }
			complete=$((complete + 1))
		else
			grep -q 'warning: the output is incomplete: stopped by length before the grammar was complete' "$out.err"
		fi
	done
	[ "$complete" -ge 1 ]
}

@test "--grammar with --ids: the ids decode to text of the grammar, and greedy runs repeat" {
	capy-gen "$ART/qwen3_5_moe.capy" -p "x" --grammar "$ART/list.gbnf" -n 200 --seed 9 --temp 1 --ids -q \
		>"$BATS_TEST_TMPDIR/ids"
	capy-gen --detokenize "$ART/qwen3_5_moe.capy" <"$BATS_TEST_TMPDIR/ids" >"$BATS_TEST_TMPDIR/text"
	matches '(- [a-z ]{1,10}\n){1,3}' "$BATS_TEST_TMPDIR/text"
	a=$(capy-gen -q "$ART/qwen3_5-dense.capy" -p "x" --grammar "$ART/json2.gbnf" -n 300 --temp 0)
	b=$(capy-gen -q "$ART/qwen3_5-dense.capy" -p "x" --grammar "$ART/json2.gbnf" -n 300 --temp 0)
	[ "$a" = "$b" ]
}

@test "--grammar: a bad grammar is refused in one line naming file:line:column, exit 1" {
	printf 'root ::= "a" item\nitem ::= [bc' >"$BATS_TEST_TMPDIR/bad.gbnf"
	run --separate-stderr capy-gen "$ART/qwen3_5_moe.capy" -p x --grammar "$BATS_TEST_TMPDIR/bad.gbnf"
	[ "$status" -eq 1 ]
	[ -z "$output" ]
	assert_one_error_line capy-gen
	[[ "$stderr" == "capy-gen: error: $BATS_TEST_TMPDIR/bad.gbnf:2:10: unterminated character class" ]]
	printf 'root ::= x\n' >"$BATS_TEST_TMPDIR/undef.gbnf"
	run --separate-stderr capy-gen "$ART/qwen3_5_moe.capy" -p x --grammar "$BATS_TEST_TMPDIR/undef.gbnf"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "capy-gen: error: $BATS_TEST_TMPDIR/undef.gbnf:1:10: rule 'x' is used but never defined" ]]
	run --separate-stderr capy-gen "$ART/qwen3_5_moe.capy" -p x --grammar "$BATS_TEST_TMPDIR/none.gbnf"
	[ "$status" -eq 1 ]
	assert_one_error_line capy-gen
	[[ "$stderr" == *"none.gbnf"* ]]
}

@test "--grammar: -n too small for the grammar warns that the output is incomplete" {
	printf 'root ::= "abc" [a-z]{20}\n' >"$BATS_TEST_TMPDIR/long.gbnf"
	run --separate-stderr capy-gen "$ART/qwen3_5_moe.capy" -p x --grammar "$BATS_TEST_TMPDIR/long.gbnf" -n 3 --seed 1
	[ "$status" -eq 0 ]
	[[ "$output" == abc* ]]
	[[ "$stderr" == *"warning: the output is incomplete: stopped by length before the grammar was complete"* ]]
}

@test "--grammar: the same tokens with the next mask computed during the step (--mask-threads 1, 3) as after it (0), and the masks' times on stderr" {
	for seed in 1 2 3; do
		for t in 0.8 1.5; do
			for mt in 0 1 3; do
				capy-gen "$ART/qwen3_5_moe.capy" -p "Write it:" --grammar "$FIX/grammars/json.gbnf" -n 120 \
					--seed "$seed" --temp "$t" --ids --mask-threads "$mt" >"$BATS_TEST_TMPDIR/ids-$mt" \
					2>"$BATS_TEST_TMPDIR/err-$mt"
			done
			cmp "$BATS_TEST_TMPDIR/ids-0" "$BATS_TEST_TMPDIR/ids-1"
			cmp "$BATS_TEST_TMPDIR/ids-0" "$BATS_TEST_TMPDIR/ids-3"
		done
	done
	grep -Eq '^capy-gen: token masks: [0-9]+, computed in median [0-9.]+ us, p99 [0-9.]+, max [0-9.]+; waited for median [0-9.]+ us, p99 [0-9.]+, max [0-9.]+ \([0-9.]+ us in all\); 3 mask threads$' "$BATS_TEST_TMPDIR/err-3" ||
		{ cat "$BATS_TEST_TMPDIR/err-3"; false; }
	# without a grammar there are no masks to report
	capy-gen "$ART/qwen3_5_moe.capy" -p x -n 4 --seed 1 2>"$BATS_TEST_TMPDIR/plain.err" >/dev/null
	! grep -q 'token masks' "$BATS_TEST_TMPDIR/plain.err"
}
