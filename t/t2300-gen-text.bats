#!/usr/bin/env bats
# capy-gen's text utilities and capy-shortlist: they work on an artifact or on loose files,
# before any weights are loaded, and agree with the tokenizer and template references.

load lib
load helper/python-jinja

setup_file() {
	export ART=$BATS_FILE_TMPDIR/m.capy
	capy-convert -q -m "$FIX/qwen3_5_moe" -o "$ART"
	PYTHON_JINJA=$(find_python_jinja)
	export PYTHON_JINJA
}

@test "--tokenize gives the same ids from the artifact and from tokenizer.json, added tokens included" {
	printf 'Hello <|im_start|>user\nCafé 東京 <think>x</think>' >"$BATS_TEST_TMPDIR/t.txt"
	a=$(capy-gen --tokenize "$ART" <"$BATS_TEST_TMPDIR/t.txt")
	b=$(capy-gen --tokenize "$FIX/qwen3_5_moe/tokenizer.json" <"$BATS_TEST_TMPDIR/t.txt")
	[ "$a" = "$b" ]
	[[ " $a " == *" 513 "* ]]   # <|im_start|>
	[[ " $a " == *" 523 "* ]]   # <think>
	# The tokenizer's own tests compare it with Hugging Face; here the tool must agree with it.
	c=$(capy-test-tool tokenize --whole "$FIX/qwen3_5_moe/tokenizer.json" <"$BATS_TEST_TMPDIR/t.txt")
	[ "$a" = "$c" ]
}

@test "--detokenize inverts --tokenize" {
	printf 'Some text with\ttabs and\r\nCRLF, Ünïcödé and <|im_end|>' >"$BATS_TEST_TMPDIR/t.txt"
	capy-gen --tokenize "$ART" <"$BATS_TEST_TMPDIR/t.txt" >"$BATS_TEST_TMPDIR/ids"
	capy-gen --detokenize "$ART" <"$BATS_TEST_TMPDIR/ids" >"$BATS_TEST_TMPDIR/back"
	cmp "$BATS_TEST_TMPDIR/t.txt" "$BATS_TEST_TMPDIR/back"
}

@test "--detokenize refuses a bad id list and --tokenize invalid UTF-8, naming the place" {
	run --separate-stderr capy-gen --detokenize "$ART" <<<"1 2 x3"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "capy-gen: error: standard input: token 2: 'x3' is not an integer" ]]
	run --separate-stderr bash -c "printf 'ab\\xffcd' | capy-gen --tokenize '$ART'"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"standard input: "*"byte 2"* ]] || [[ "$stderr" == *"standard input: "*"offset 2"* ]]
}

# render_ref TEMPLATE CASE: the reference rendering (Python jinja2 as transformers sets it up).
render_ref() {
	"$PYTHON_JINJA" "$SRC/t/helper/jinja-render.py" render "$1" "$2" "$FIX/qwen3_5_moe/tokenizer_config.json"
}

@test "--render equals transformers' rendering, from the artifact's template and from --template" {
	for c in 02-system-user 10-tool-call-dict-args 16-tool-results-three-in-a-row; do
		case=$SRC/t/chat/cases/$c.json
		python3 - "$case" "$BATS_TEST_TMPDIR/case.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["add_generation_prompt"] = True
c.pop("kwargs", None)
json.dump(c, open(sys.argv[2], "w"), ensure_ascii=False)
PY
		render_ref "$FIX/qwen3_5_moe/chat_template.jinja" "$BATS_TEST_TMPDIR/case.json" >"$BATS_TEST_TMPDIR/want"
		capy-gen --render "$ART" --messages "$BATS_TEST_TMPDIR/case.json" >"$BATS_TEST_TMPDIR/got"
		cmp "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/got"
		render_ref "$SRC/share/chat_templates/qwen3_5.jinja" "$BATS_TEST_TMPDIR/case.json" >"$BATS_TEST_TMPDIR/want"
		capy-gen --render --template "$SRC/share/chat_templates/qwen3_5.jinja" \
			--tokenizer-config "$FIX/qwen3_5_moe/tokenizer_config.json" --messages "$BATS_TEST_TMPDIR/case.json" \
			>"$BATS_TEST_TMPDIR/got"
		cmp "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/got"
	done
}

@test "--render -p/--system/--no-think builds the conversation" {
	run capy-gen --render "$ART" -p "hi" --system "be brief" --no-think
	[ "$status" -eq 0 ]
	[ "$output" = $'<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>' ]
}

@test "a template's raise_exception reaches the user" {
	printf '[{"role": "assistant", "content": "x"}]' >"$BATS_TEST_TMPDIR/m.json"
	run --separate-stderr capy-gen --render --template "$SRC/share/chat_templates/qwen3_5.jinja" --messages "$BATS_TEST_TMPDIR/m.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "capy-gen: error: There is no user query in the messages." ]]
}

@test "capy-shortlist: added tokens, the prefix, then the rankings, without repeats" {
	# 560 is a padding row of the model's vocabulary, beyond the tokenizer: skipped, counted.
	printf '# counts\n5 10\n7 30\n3 30\n560 20\n100 1\n' >"$BATS_TEST_TMPDIR/r1"
	printf '9\n8\n7\n' >"$BATS_TEST_TMPDIR/r2"
	run capy-shortlist --tokenizer "$ART" --prefix 4 --count-top 3 --ranking "$BATS_TEST_TMPDIR/r1" \
		--extra-ranking "$BATS_TEST_TMPDIR/r2" --extra-top 2 --out -
	[ "$status" -eq 0 ]
	ids=$(grep -v '^#' <<<"$output" | tr '\n' ' ')
	[ "$ids" = "512 513 514 515 516 517 518 519 520 521 522 523 524 0 1 2 3 7 5 100 9 8 " ]
	sha=$(sha256sum "$BATS_TEST_TMPDIR/r1" | cut -d' ' -f1)
	[[ "$output" == *"ranking: $BATS_TEST_TMPDIR/r1 sha256 $sha; count-top 3: 3; ids without a token skipped: 1"* ]]
}

@test "capy-shortlist is deterministic and writes its file atomically" {
	capy-ppl -q "$ART" "$SRC/README.md" --ctx 256 --argmax-counts "$BATS_TEST_TMPDIR/counts"
	grep -q '^# capy-ppl argmax counts' "$BATS_TEST_TMPDIR/counts"
	for i in 1 2; do
		capy-shortlist --tokenizer "$FIX/qwen3_5_moe/tokenizer.json" --prefix 256 --count-top 50 \
			--ranking "$BATS_TEST_TMPDIR/counts" --out "$BATS_TEST_TMPDIR/list$i"
	done
	cmp "$BATS_TEST_TMPDIR/list1" "$BATS_TEST_TMPDIR/list2"
	[ "$(grep -vc '^#' "$BATS_TEST_TMPDIR/list1")" -eq $((13 + 256 + 50)) ]
	[ -z "$(ls -A "$BATS_TEST_TMPDIR" | grep tmp)" ]
}

@test "capy-shortlist refuses bad rankings with the file and line" {
	printf '5 10\n-3 3\n' >"$BATS_TEST_TMPDIR/r"
	run --separate-stderr capy-shortlist --tokenizer "$ART" --prefix 4 --count-top 3 --ranking "$BATS_TEST_TMPDIR/r" --out "$BATS_TEST_TMPDIR/o"
	[ "$status" -eq 1 ]
	[[ "$stderr" == "capy-shortlist: error: '$BATS_TEST_TMPDIR/r' line 2: token id: '-3' is out of range [0, 2147483647]" ]]
	[ ! -e "$BATS_TEST_TMPDIR/o" ]
	printf '5 10\n6\n' >"$BATS_TEST_TMPDIR/r"
	run --separate-stderr capy-shortlist --tokenizer "$ART" --prefix 4 --count-top 3 --ranking "$BATS_TEST_TMPDIR/r" --out -
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"line 2: some lines have counts and some do not" ]]
	run --separate-stderr capy-shortlist --tokenizer "$ART" --prefix 4 --ranking "$BATS_TEST_TMPDIR/r" --out -
	[ "$status" -eq 2 ]
}
