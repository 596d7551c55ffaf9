#!/usr/bin/env bats
# t2001-tokenizer-hf.bats - the tokenizer against the Hugging Face tokenizers library itself
# (Rust 0.22.2 through the Node binding @anush008/tokenizers, pinned in t/ext/package-lock.json)
# on seeded random strings: ids, decode, and decode skipping special tokens must all agree.
#
# Needs node and `(cd t/ext && npm ci)`; without them the tests are skipped, unless
# CAPY_REQUIRE_HF=1 (CI sets it). The seed is printed; CAPY_TOKENIZER_SEED=N repeats a run.

bats_require_minimum_version 1.5.0

setup_file() {
	export TOOL="${CAPY_BUILD:-$BATS_TEST_DIRNAME/../build}/t/helper/capy-test-tool"
	export TEXT="$BATS_TEST_DIRNAME/text"
	export EXT="$BATS_TEST_DIRNAME/ext"
	if ! command -v node >/dev/null || ! command -v zstd >/dev/null ||
		[ ! -d "$EXT/node_modules/@anush008/tokenizers" ]; then
		if [ -n "${CAPY_REQUIRE_HF:-}" ]; then
			echo "CAPY_REQUIRE_HF is set, but node, zstd or t/ext/node_modules is missing" >&2
			return 1
		fi
		export HF_SKIP="no HF oracle (needs node, zstd and: cd t/ext && npm ci)"
		return 0
	fi
	export SEED="${CAPY_TOKENIZER_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
	echo "# random strings from seed $SEED (repeat with CAPY_TOKENIZER_SEED=$SEED)" >&3
	node "$EXT/hf-tokenizer.js" gen "$SEED" 10000 --invalid >"$BATS_FILE_TMPDIR/strings.hex"
	head -n 3000 "$BATS_FILE_TMPDIR/strings.hex" >"$BATS_FILE_TMPDIR/strings-3k.hex"
	head -n 2000 "$BATS_FILE_TMPDIR/strings.hex" >"$BATS_FILE_TMPDIR/strings-2k.hex"
	zstd -dqf "$TEXT/qwen3/tokenizer.json.zst" -o "$BATS_FILE_TMPDIR/qwen3.json"
	zstd -dqf "$TEXT/qwen3/synthetic_qwen3vocab_qwen35regex.json.zst" -o "$BATS_FILE_TMPDIR/qwen35.json"
}

setup() {
	[ -z "${HF_SKIP:-}" ] || skip "$HF_SKIP"
}

# compare TOKENIZER INPUT LOSSY MODE...: run capy-test-tool in each --parse mode, then check
# every line against HF. LOSSY is --lossy or "".
compare() {
	local tok=$1 input=$2 lossy=$3 m specs=()
	shift 3
	for m in "$@"; do
		"$TOOL" tokenize --hex --decode $lossy --parse "$m" "$tok" <"$input" >"$BATS_TEST_TMPDIR/$m.out" ||
			return 1
		specs+=("$m=$BATS_TEST_TMPDIR/$m.out")
	done
	node "$EXT/hf-tokenizer.js" check "$tok" "$input" "${specs[@]}" $lossy
}

# the last line of the check says "<file>: N comparisons, M mismatches"
agree() {
	echo "seed $SEED"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "${lines[-1]}" == *": $1 comparisons, 0 mismatches" ]]
}

@test "tokenizer vs HF: Qwen3, 10,000 random strings, added tokens recognised" {
	run --separate-stderr compare "$BATS_FILE_TMPDIR/qwen3.json" "$BATS_FILE_TMPDIR/strings.hex" --lossy all
	agree 10000
}

@test "tokenizer vs HF: Qwen3, 10,000 random strings, some or no added tokens recognised" {
	run --separate-stderr compare "$BATS_FILE_TMPDIR/qwen3.json" "$BATS_FILE_TMPDIR/strings.hex" --lossy plain special none
	agree 30000
}

@test "tokenizer vs HF: Qwen3, without --lossy exactly the strings HF cannot see are refused" {
	run --separate-stderr compare "$BATS_FILE_TMPDIR/qwen3.json" "$BATS_FILE_TMPDIR/strings.hex" "" all
	agree 10000
}

@test "tokenizer vs HF: Qwen3.5 regex, 10,000 random strings" {
	run --separate-stderr compare "$BATS_FILE_TMPDIR/qwen35.json" "$BATS_FILE_TMPDIR/strings.hex" --lossy all
	agree 10000
}

@test "tokenizer vs HF: Qwen3 with lstrip, rstrip, single_word and normalized added tokens" {
	node "$EXT/hf-tokenizer.js" variant-added "$BATS_FILE_TMPDIR/qwen3.json" "$BATS_TEST_TMPDIR/variant.json"
	run --separate-stderr compare "$BATS_TEST_TMPDIR/variant.json" "$BATS_FILE_TMPDIR/strings-3k.hex" --lossy all plain special none
	agree 12000
}

@test "tokenizer vs HF: small tokenizers with byte fallback, unk, prefixes, legacy merges, split behaviours" {
	local f
	for f in "$TEXT"/mini/*.json; do
		run --separate-stderr compare "$f" "$BATS_FILE_TMPDIR/strings-2k.hex" --lossy all plain special none
		agree 8000
	done
}

@test "tokenizer vs HF: the committed corpus goldens are HF's output" {
	local files=("$TEXT"/corpus/*)
	node "$EXT/hf-tokenizer.js" golden "$BATS_FILE_TMPDIR/qwen3.json" "${files[@]}" >"$BATS_TEST_TMPDIR/qwen3"
	diff -u "$TEXT/corpus-qwen3.golden" "$BATS_TEST_TMPDIR/qwen3"
	node "$EXT/hf-tokenizer.js" golden "$BATS_FILE_TMPDIR/qwen35.json" "${files[@]}" >"$BATS_TEST_TMPDIR/qwen35"
	diff -u "$TEXT/corpus-qwen35.golden" "$BATS_TEST_TMPDIR/qwen35"
}
