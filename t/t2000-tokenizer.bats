#!/usr/bin/env bats
# t2000-tokenizer.bats - the tokenizer against recorded Hugging Face output (no Node needed):
# the reference golden files, the committed corpus, decoding, and errors.

bats_require_minimum_version 1.5.0

setup_file() {
	export TOOL="${CAPY_BUILD:-$BATS_TEST_DIRNAME/../build}/t/helper/capy-test-tool"
	export TEXT="$BATS_TEST_DIRNAME/text"
	export QWEN3="$TEXT/qwen3/tokenizer.json.zst"
	export QWEN35="$TEXT/qwen3/synthetic_qwen3vocab_qwen35regex.json.zst"
}

# For each corpus file: name, then the tool's "ids<TAB>decode<TAB>decode skipping specials".
corpus_output() {
	local f
	for f in "$TEXT"/corpus/*; do
		printf '%s\t' "${f##*/}"
		"$TOOL" tokenize --whole --decode "$1" <"$f" || return 1
	done
}

@test "tokenizer: Qwen3 encodes the 36 reference strings as HF does" {
	run --separate-stderr "$TOOL" check-golden "$QWEN3" "$TEXT/qwen3/golden_ids.json"
	[ "$status" -eq 0 ]
	[ "$output" = "36 cases, 0 mismatches" ]
}

@test "tokenizer: the Qwen3.5 regex (\\p{M}) encodes 3,000 mark-heavy strings as HF does" {
	run --separate-stderr "$TOOL" check-golden "$QWEN35" "$TEXT/qwen3/golden_synthetic_qwen35regex.jsonl"
	[ "$status" -eq 0 ]
	[ "$output" = "3000 cases, 0 mismatches" ]
}

@test "tokenizer: check-golden fails when the regex is not the one the ids came from" {
	run --separate-stderr "$TOOL" check-golden "$QWEN3" "$TEXT/qwen3/golden_synthetic_qwen35regex.jsonl"
	[ "$status" -eq 1 ]
	[[ "${lines[-1]}" =~ ^3000\ cases,\ [1-9][0-9]*\ mismatches$ ]]
}

@test "tokenizer: the corpus encodes and decodes as HF does (Qwen3)" {
	corpus_output "$QWEN3" >"$BATS_TEST_TMPDIR/actual"
	diff -u "$TEXT/corpus-qwen3.golden" "$BATS_TEST_TMPDIR/actual"
}

@test "tokenizer: the corpus encodes and decodes as HF does (Qwen3.5 regex)" {
	corpus_output "$QWEN35" >"$BATS_TEST_TMPDIR/actual"
	diff -u "$TEXT/corpus-qwen35.golden" "$BATS_TEST_TMPDIR/actual"
}

@test "tokenizer: added tokens are recognised unless told otherwise" {
	run --separate-stderr "$TOOL" tokenize "$QWEN3" <<<'<|im_start|>user<think>'
	[ "$status" -eq 0 ]
	[ "$output" = "151644 872 151667" ]
	run --separate-stderr "$TOOL" tokenize --parse plain "$QWEN3" <<<'<|im_start|>user<think>'
	[ "$status" -eq 0 ]
	[ "$output" = "27 91 318 4906 91 29 872 151667" ]
	run --separate-stderr "$TOOL" tokenize --parse none "$QWEN3" <<<'<|im_start|>user<think>'
	[ "$status" -eq 0 ]
	[ "$output" = "27 91 318 4906 91 29 872 13708 766 29" ]
}

@test "tokenizer: NEL is whitespace and BOM is not, as in Oniguruma" {
	run --separate-stderr "$TOOL" tokenize --hex "$QWEN3" <<<$'61c2852773\n61efbbbf2773'
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "64 126 227 594" ]
	[ "${lines[1]}" = "64 3225 6 82" ]
}

@test "tokenizer: invalid UTF-8 is an error, or U+FFFD with --lossy" {
	run --separate-stderr "$TOOL" tokenize --hex "$QWEN3" <<<'61ff62'
	[ "$status" -eq 0 ]
	[ "$output" = "error: text is not valid UTF-8 at byte offset 1" ]
	run --separate-stderr "$TOOL" tokenize --hex --lossy "$QWEN3" <<<'61ff62'
	[ "$status" -eq 0 ]
	[ "$output" = "64 5691 65" ]
}

@test "tokenizer: decoding skips special tokens only when asked, and not <think>" {
	run --separate-stderr "$TOOL" detokenize "$QWEN3" <<<'151667 9707 151645 151657'
	[ "$status" -eq 0 ]
	[ "$output" = "<think>Hello<|im_end|><tool_call>" ]
	run --separate-stderr "$TOOL" detokenize --skip-special "$QWEN3" <<<'151667 9707 151645 151657'
	[ "$status" -eq 0 ]
	[ "$output" = "<think>Hello<tool_call>" ]
}

@test "tokenizer: a partial character decodes to U+FFFD and unknown ids are skipped" {
	run --separate-stderr "$TOOL" detokenize "$QWEN3" <<<'9707 378 200000 0'
	[ "$status" -eq 0 ]
	[ "$output" = $'Hello\xef\xbf\xbd!' ]
}

@test "tokenizer: a megabyte of one character class encodes" {
	head -c 1000000 /dev/zero | tr '\0' ' ' >"$BATS_TEST_TMPDIR/spaces"
	head -c 1000000 /dev/zero | tr '\0' 'a' >"$BATS_TEST_TMPDIR/letters"
	run --separate-stderr "$TOOL" tokenize --whole "$QWEN3" <"$BATS_TEST_TMPDIR/spaces"
	[ "$status" -eq 0 ]
	[ "${#output}" -gt 1000 ]
	run --separate-stderr "$TOOL" tokenize --whole "$QWEN3" <"$BATS_TEST_TMPDIR/letters"
	[ "$status" -eq 0 ]
	[ "${#output}" -gt 1000 ]
}

@test "tokenizer: a broken tokenizer.json is refused with the reason" {
	printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}' >"$BATS_TEST_TMPDIR/bad.json"
	run --separate-stderr "$TOOL" tokenize "$BATS_TEST_TMPDIR/bad.json" </dev/null
	[ "$status" -eq 1 ]
	[ "$output" = "" ]
	[[ "$stderr" == *"tokenizer.json: model.merges[0]: 'b' is not in the vocabulary"* ]]
}
