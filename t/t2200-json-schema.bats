#!/usr/bin/env bats
# t2200-json-schema.bats - JSON Schema compiled to grammars (libcore/constrain/json-schema.h):
# documents drawn at random from the grammar of every schema of t/fixtures/schemas validate
# with Python's jsonschema, and the tool's errors for schemas it refuses.

bats_require_minimum_version 1.5.0

setup_file() {
	export TOOL="${CAPY_BUILD:-$BATS_TEST_DIRNAME/../build}/t/helper/capy-test-tool"
	export SCHEMAS="$BATS_TEST_DIRNAME/fixtures/schemas"
	export VALIDATE="$BATS_TEST_DIRNAME/helper/schema-validate.py"
	# the first of $CAPY_PYTHON, python3 and /usr/bin/python3 that has jsonschema (`make deps`
	# installs Debian's python3-jsonschema); sys.executable skips slow wrappers (pyenv shims)
	local py
	for py in ${CAPY_PYTHON:-} python3 /usr/bin/python3; do
		if PYTHON_JSONSCHEMA=$("$py" -c 'import sys, jsonschema; print(sys.executable)' 2>/dev/null); then
			export PYTHON_JSONSCHEMA
			return 0
		fi
	done
	echo "no python3 with jsonschema found (run 'make deps' or set CAPY_PYTHON)" >&2
	return 1
}

@test "json-schema: documents drawn from every corpus schema's grammar validate with jsonschema" {
	local f name line mode drop seed out args=() n=0
	for f in "$SCHEMAS"/*.json; do
		name=${f##*/}
		mode=--strict
		drop=
		line=$(grep "^$name"$'\t' "$SCHEMAS/relaxed.txt" || true)
		if [ -n "$line" ]; then # validated without the keywords relaxed mode ignores
			mode=
			drop=":$(printf '%s' "${line#*$'\t'}" | tr ' ' ',')"
		fi
		for seed in 1 2 3 4 5; do
			out="$BATS_TEST_TMPDIR/$name.$seed"
			"$TOOL" schema-walk $mode --seed "$seed" --count 60 "$f" >"$out" || { echo "walk failed: $name seed $seed" >&2; return 1; }
			args+=("$f:$out$drop")
		done
		n=$((n + 1))
	done
	[ "$n" -ge 60 ]
	run --separate-stderr "$PYTHON_JSONSCHEMA" "$VALIDATE" "${args[@]}"
	[ "$status" -eq 0 ] || { echo "$output $stderr" >&2; return 1; }
	[ "$output" = "$((n * 300)) documents valid" ]
	echo "# $n schemas, $output" >&3
}

@test "json-schema: the walk draws the same documents from the same seed" {
	"$TOOL" schema-walk --seed 9 --count 20 "$SCHEMAS/own-nested.json" >"$BATS_TEST_TMPDIR/a"
	"$TOOL" schema-walk --seed 9 --count 20 "$SCHEMAS/own-nested.json" >"$BATS_TEST_TMPDIR/b"
	"$TOOL" schema-walk --seed 10 --count 20 "$SCHEMAS/own-nested.json" >"$BATS_TEST_TMPDIR/c"
	cmp "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/b"
	! cmp -s "$BATS_TEST_TMPDIR/a" "$BATS_TEST_TMPDIR/c"
}

@test "json-schema: strict mode refuses an unsupported keyword, naming it and its JSON pointer" {
	printf '%s' '{"type": "object", "properties": {"x": {"type": "string", "not": {"const": ""}}}}' >"$BATS_TEST_TMPDIR/s.json"
	run --separate-stderr "$TOOL" json-schema --strict "$BATS_TEST_TMPDIR/s.json"
	[ "$status" -eq 1 ]
	[ "$output" = "" ]
	[ "$stderr" = "capy-test-tool: error: $BATS_TEST_TMPDIR/s.json: schema: /properties/x/not: keyword \"not\" is not supported" ]
	run --separate-stderr "$TOOL" json-schema "$BATS_TEST_TMPDIR/s.json"
	[ "$status" -eq 0 ]
	[[ "$output" == "root ::= "* ]]
}

@test "json-schema: a schema that is not JSON is refused with its line and column" {
	printf '{\n  "type": }' >"$BATS_TEST_TMPDIR/bad.json"
	run --separate-stderr "$TOOL" json-schema "$BATS_TEST_TMPDIR/bad.json"
	[ "$status" -eq 1 ]
	[ "$stderr" = "capy-test-tool: error: $BATS_TEST_TMPDIR/bad.json: schema: invalid JSON at line 2, column 11 (byte 12)" ]
}
