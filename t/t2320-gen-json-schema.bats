#!/usr/bin/env bats
# capy-gen --json-schema: on a random-weight fixture (its preferences are noise, so the
# schema's grammar does all the work) every complete output, over seeds and sampling
# settings, parses as JSON and validates against the schema with python3-jsonschema; bad
# schemas are refused naming the place in the schema.

load lib

setup_file() {
	export ART=$BATS_FILE_TMPDIR
	capy-convert -q -m "$FIX/qwen3_5_moe" -o "$ART/m.capy"
	# bounded everywhere, so that a random walk through it ends within -n tokens
	cat >"$ART/call.json" <<'EOF2'
{ "type": "object",
  "properties": {
    "tool": { "enum": ["read", "write", "glob"] },
    "path": { "type": "string", "minLength": 1, "maxLength": 8 },
    "limit": { "type": "integer", "minimum": 0, "maximum": 999 },
    "force": { "type": "boolean" },
    "tags": { "type": "array", "items": { "enum": ["a", "b"] }, "maxItems": 3 }
  },
  "required": ["tool", "path"],
  "additionalProperties": false }
EOF2
}

@test "every complete output validates against the schema" {
	docs=$BATS_TEST_TMPDIR/docs
	: >"$docs"
	complete=0
	for seed in 1 2 3 4; do
		for s in "--temp 1" "--temp 0.7 --top-k 40" "--temp 1.3 --top-p 0.9" "--temp 0"; do
			# shellcheck disable=SC2086
			capy-gen "$ART/m.capy" -p "Call a tool:" --json-schema "$ART/call.json" -n 200 --seed "$seed" $s -q \
				>"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err"
			if ! grep -q incomplete "$BATS_TEST_TMPDIR/err"; then
				complete=$((complete + 1))
				head -c -1 "$BATS_TEST_TMPDIR/out" >>"$docs" # capy-gen's closing newline
				printf '\0' >>"$docs"
			fi
		done
	done
	echo "$complete complete outputs" >&3
	[ "$complete" -ge 8 ]
	run python3 "$SRC/t/helper/schema-validate.py" "$ART/call.json:$docs"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ "$output" == *"$complete documents valid"* ]]
}

@test "a bad schema is refused with its place, and --grammar with --json-schema is refused" {
	echo '{"type":"object","properties":{"x":{"type":"strang"}}}' >"$BATS_TEST_TMPDIR/bad.json"
	run capy-gen "$ART/m.capy" -p x --json-schema "$BATS_TEST_TMPDIR/bad.json"
	[ "$status" -ne 0 ]
	[[ "$output" == *"bad.json"*"/properties/x"* ]]
	run capy-gen "$ART/m.capy" -p x --json-schema "$ART/call.json" --grammar "$ART/call.json"
	[ "$status" -ne 0 ]
	[[ "$output" == *"one constraint at a time"* ]]
}
