# t/lib.bash - shared setup for the BATS tests: paths to the built tools and the
# fixtures, and small helpers. Load with `load lib` from a t/*.bats file.

bats_require_minimum_version 1.5.0

SRC=$(cd "$BATS_TEST_DIRNAME/.." && pwd)
BUILD=${CAPY_BUILD:-$SRC/build}
FIX=$SRC/t/fixtures
export PATH="$BUILD/bin:$BUILD/t/helper:$PATH"
export CAPY_PROGRESS=0
FAMILIES="qwen3_5-dense qwen3_5_moe qwen3_5_moe-nvfp4 qwen3_next qwen4_exp"

# A private copy of a fixture checkpoint in the test's temporary directory.
copy_fixture() {
	cp -r "$FIX/$1" "$BATS_TEST_TMPDIR/$1"
	echo "$BATS_TEST_TMPDIR/$1"
}

# convert_fixtures MODEL...: each fixture converted to $ART/MODEL.capy, ART being the file's
# temporary directory (for setup_file).
convert_fixtures() {
	export ART=$BATS_FILE_TMPDIR
	local m
	for m in "$@"; do
		capy-convert -q -m "$FIX/$m" -o "$ART/$m.capy"
	done
}

# The output directory must hold nothing but what the test put there.
assert_no_leftovers() {
	local dir=$1
	local left
	left=$(find "$dir" -maxdepth 1 \( -name '*.capy' -o -name '.*.tmp.*' \) -print)
	if [ -n "$left" ]; then
		echo "left behind: $left" >&2
		return 1
	fi
}

# Exactly one line on stderr, starting with the tool's name.
assert_one_error_line() {
	local tool=$1
	[ "${#stderr_lines[@]}" -eq 1 ] || { printf 'stderr has %d lines:\n%s\n' "${#stderr_lines[@]}" "$stderr" >&2; return 1; }
	[[ "$stderr" == "$tool: error: "* ]] || { echo "stderr: $stderr" >&2; return 1; }
}

# ppl_check ARTIFACT IDS REF_JSON KV PPL_REL NLL_ABS: capy-ppl over the ids against a ref.json's
# perplexity (relative bound) and per-position NLL (absolute bound); t3000 on the fixtures,
# t3020 on capy-tiny.
ppl_check() {
	capy-ppl -q "$1" "$2" --ids --json --per-token --ctx 4096 --kv "$4" >"$BATS_TEST_TMPDIR/p.json"
	python3 - "$BATS_TEST_TMPDIR/p.json" "$3" "$5" "$6" <<'PY'
import json, sys
got, ref = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert len(got["token_nll"]) == len(ref["nll"]), (len(got["token_nll"]), len(ref["nll"]))
rel = abs(got["ppl"] - ref["ppl"]) / ref["ppl"]
worst = max(abs(a - b) for a, b in zip(got["token_nll"], ref["nll"]))
print("ppl %.6g ref %.6g rel %.2g, worst NLL error %.2g" % (got["ppl"], ref["ppl"], rel, worst))
sys.exit(0 if rel < float(sys.argv[3]) and worst < float(sys.argv[4]) else 1)
PY
}

# spec_seeds_check SPEC IDS_FILE N: capy-tiny sampled with --spec SPEC for seeds 7, 7 and 8
# (N tokens each): the same seed reproduces the run, another seed gives another (t2340, t2345).
spec_seeds_check() {
	local seed
	for seed in 7 7 8; do
		capy-gen -q "$ART/capy-tiny.capy" --prompt-ids "$(cat "$2")" -n "$3" --temp 0.9 --top-p 0.95 \
			--seed $seed --ids --ignore-eos --spec "$1" >>"$BATS_TEST_TMPDIR/runs"
	done
	run -0 python3 - "$BATS_TEST_TMPDIR/runs" "$3" <<'PY'
import sys
a, b, c = open(sys.argv[1]).read().split("\n")[:3]
assert a == b, "seed 7 twice differs"
assert a != c, "seeds 7 and 8 agree"
assert len(a.split()) == int(sys.argv[2])
PY
}
