#!/usr/bin/env bats
# t2120: template errors name line:column; hostile templates stop at a limit.
bats_require_minimum_version 1.5.0

load helper/python-jinja

render() {
	printf '%s' "$1" >"$BATS_TEST_TMPDIR/t.jinja"
	run --separate-stderr "$TOOL" render-template "$BATS_TEST_TMPDIR/t.jinja"
}

@test "a syntax error names line and column" {
	render $'line one\n{{ 1 + }}'
	[ "$status" -eq 1 ]
	[ "$stderr" = "capy-test-tool: error: $BATS_TEST_TMPDIR/t.jinja:2:8: unexpected '}}'" ]
}

@test "an unclosed block names where it began" {
	render $'{% for x in y %}\nbody'
	[ "$status" -eq 1 ]
	[ "$stderr" = "capy-test-tool: error: $BATS_TEST_TMPDIR/t.jinja:1:4: unexpected end of template, expected 'endfor'" ]
}

@test "an unknown filter fails at compile time" {
	render $'\n\n   {{ x|nope }}'
	[ "$status" -eq 1 ]
	[ "$stderr" = "capy-test-tool: error: $BATS_TEST_TMPDIR/t.jinja:3:9: no filter named 'nope'" ]
}

@test "a runtime error names line and column" {
	render $'ok\n  {{ undefined_thing.attr }}'
	[ "$status" -eq 1 ]
	[ "$stderr" = "capy-test-tool: error: $BATS_TEST_TMPDIR/t.jinja:2:21: 'undefined_thing' is undefined" ]
}

@test "columns count characters, not bytes" {
	render $'{{ "ééé" ~ 1 + }}'
	[ "$status" -eq 1 ]
	[ "$stderr" = "capy-test-tool: error: $BATS_TEST_TMPDIR/t.jinja:1:16: unexpected '}}'" ]
}

@test "raise_exception reaches the caller verbatim" {
	render $'{{ raise_exception("Bad: " ~ 42 ~ " (x:1:2)") }}'
	[ "$status" -eq 1 ]
	[ "$stderr" = "capy-test-tool: error: Bad: 42 (x:1:2)" ]
	[ "$output" = "" ]
}

@test "an endless loop stops at the step limit" {
	render '{% set l = range(10000) %}{% for a in l %}{% for b in l %}{% endfor %}{% endfor %}'
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"template step limit exceeded"* ]]
}

@test "unbounded recursion stops at the depth limit" {
	render '{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}'
	[ "$status" -eq 1 ]
	[[ "$stderr" == *":1:20: macro calls nested deeper than 64"* ]]
}

@test "output growth stops at the output limit" {
	render '{% set s = namespace(v="x") %}{% for i in range(40) %}{% set s.v = s.v ~ s.v %}{% endfor %}{{ s.v }}'
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"string too large"* || "$stderr" == *"limit exceeded"* ]]
}

@test "deeply nested brackets fail instead of overflowing the stack" {
	render "{{ $(printf '(%.0s' {1..5000})1$(printf ')%.0s' {1..5000}) }}"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"nested too deeply"* ]]
}
