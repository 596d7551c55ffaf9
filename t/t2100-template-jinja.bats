#!/usr/bin/env bats
# t2100: the template engine renders each feature case as Python jinja2 does.
bats_require_minimum_version 1.5.0

load helper/python-jinja

setup_file() {
	PYTHON_JINJA=$(find_python_jinja)
	export PYTHON_JINJA
}

@test "every feature case renders byte-identical to jinja2" {
	local f name bad=0 n=0
	for f in "$BATS_TEST_DIRNAME"/jinja/*.jinja; do
		queue_render "$BATS_TEST_TMPDIR" "$(basename "$f" .jinja)" render-template "$f" \
			"$BATS_TEST_DIRNAME/jinja/vars.json"
	done
	run_reference "$BATS_TEST_TMPDIR"
	for f in "$BATS_TEST_DIRNAME"/jinja/*.jinja; do
		name=$(basename "$f" .jinja)
		n=$((n + 1))
		compare_render "$BATS_TEST_TMPDIR" "$name" render-template "$f" \
			"$BATS_TEST_DIRNAME/jinja/vars.json" || bad=$((bad + 1))
		# a case is only useful if jinja2 renders it
		if [ -s "$BATS_TEST_TMPDIR/$name.py.err" ]; then
			echo "$name: jinja2 failed: $(cat "$BATS_TEST_TMPDIR/$name.py.err")"
			bad=$((bad + 1))
		fi
	done
	echo "$n cases, $bad differ"
	[ "$n" -ge 50 ]
	[ "$bad" -eq 0 ]
}

@test "a changed output is detected" {
	# The comparison must be able to fail: a template that prints different bytes.
	printf '{{ 1 }}' >"$BATS_TEST_TMPDIR/a.jinja"
	"$TOOL" render-template "$BATS_TEST_TMPDIR/a.jinja" >"$BATS_TEST_TMPDIR/a.out"
	printf '1 ' >"$BATS_TEST_TMPDIR/b.out"
	run ! cmp -s "$BATS_TEST_TMPDIR/a.out" "$BATS_TEST_TMPDIR/b.out"
}

@test "json round-trips numbers and key order as Python json.dumps" {
	printf '{"b": 1, "a": [1.50, 1e2, 12345678901234567890, -0.0, 1E-7, "\\u00e9\\n\\ud83d\\ude00"], "b": 2}' \
		>"$BATS_TEST_TMPDIR/in.json"
	"$TOOL" json "$BATS_TEST_TMPDIR/in.json" >"$BATS_TEST_TMPDIR/c.out"
	"$PYTHON_JINJA" -c 'import json,sys; sys.stdout.write(json.dumps(json.load(open(sys.argv[1])), ensure_ascii=False))' \
		"$BATS_TEST_TMPDIR/in.json" >"$BATS_TEST_TMPDIR/py.out"
	diff -u "$BATS_TEST_TMPDIR/py.out" "$BATS_TEST_TMPDIR/c.out"
}
