#!/usr/bin/env bats
# t2110: chat prompts from the real Qwen3 template and capy's qwen3_5 template equal
# transformers' rendering (jinja2 with transformers' settings), conversation by conversation.
bats_require_minimum_version 1.5.0

load helper/python-jinja

setup_file() {
	PYTHON_JINJA=$(find_python_jinja)
	export PYTHON_JINJA
}

CONFIG="$BATS_TEST_DIRNAME/chat/qwen3-tokenizer_config.json"

compare_all() {
	local tmpl=$1 f name bad=0 n=0 ok=0
	for f in "$BATS_TEST_DIRNAME"/chat/cases/*.json; do
		queue_render "$BATS_TEST_TMPDIR" "$(basename "$f" .json)" render "$tmpl" "$f" "$CONFIG"
	done
	run_reference "$BATS_TEST_TMPDIR"
	for f in "$BATS_TEST_DIRNAME"/chat/cases/*.json; do
		name=$(basename "$f" .json)
		n=$((n + 1))
		if compare_render "$BATS_TEST_TMPDIR" "$name" render "$tmpl" "$f" "$CONFIG"; then
			[ -s "$BATS_TEST_TMPDIR/$name.c.err" ] || ok=$((ok + 1))
		else
			bad=$((bad + 1))
		fi
	done
	echo "$n conversations: $ok identical, $((n - ok - bad)) rejected by both, $bad differ"
	[ "$n" -ge 40 ]
	[ "$bad" -eq 0 ]
	[ "$ok" -ge "$2" ]
}

@test "qwen3 template: every conversation renders as transformers does" {
	# The Qwen3 template cannot render list or null content: 6 cases fail in both.
	compare_all "$BATS_TEST_DIRNAME/chat/qwen3.jinja" 41
}

@test "qwen3_5 template: every conversation renders as transformers does" {
	compare_all "$BATS_TEST_DIRNAME/../share/chat_templates/qwen3_5.jinja" 46
}

@test "qwen3_5: tool calls render as XML with tojson for non-strings" {
	"$TOOL" render "$BATS_TEST_DIRNAME/../share/chat_templates/qwen3_5.jinja" \
		"$BATS_TEST_DIRNAME/chat/cases/17-tool-args-nested.json" >"$BATS_TEST_TMPDIR/out"
	grep -F -x '<function=search_files>' "$BATS_TEST_TMPDIR/out"
	grep -F -x '{"ext": [".c", ".h"], "size": {"min": 0.5, "max": 1e+16}}' "$BATS_TEST_TMPDIR/out"
	grep -F -x '9007199254740991' "$BATS_TEST_TMPDIR/out"
}

@test "qwen3_5: the generation prompt follows enable_thinking" {
	"$TOOL" render "$BATS_TEST_DIRNAME/../share/chat_templates/qwen3_5.jinja" \
		"$BATS_TEST_DIRNAME/chat/cases/03-system-user-nothink.json" >"$BATS_TEST_TMPDIR/off"
	"$TOOL" render "$BATS_TEST_DIRNAME/../share/chat_templates/qwen3_5.jinja" \
		"$BATS_TEST_DIRNAME/chat/cases/02-system-user.json" >"$BATS_TEST_TMPDIR/on"
	printf '<|im_start|>assistant\n<think>\n\n</think>\n\n' >"$BATS_TEST_TMPDIR/off.want"
	printf '<|im_start|>assistant\n<think>\n' >"$BATS_TEST_TMPDIR/on.want"
	tail -c "$(wc -c <"$BATS_TEST_TMPDIR/off.want")" "$BATS_TEST_TMPDIR/off" | cmp - "$BATS_TEST_TMPDIR/off.want"
	tail -c "$(wc -c <"$BATS_TEST_TMPDIR/on.want")" "$BATS_TEST_TMPDIR/on" | cmp - "$BATS_TEST_TMPDIR/on.want"
}

@test "string tool arguments are parsed unless the case keeps them" {
	"$TOOL" render "$BATS_TEST_DIRNAME/chat/qwen3.jinja" \
		"$BATS_TEST_DIRNAME/chat/cases/11-tool-call-string-args.json" >"$BATS_TEST_TMPDIR/parsed"
	"$TOOL" render "$BATS_TEST_DIRNAME/chat/qwen3.jinja" \
		"$BATS_TEST_DIRNAME/chat/cases/12-tool-call-string-args-kept.json" >"$BATS_TEST_TMPDIR/kept"
	grep -F '"arguments": {"city": "Paris", "days": 3}}' "$BATS_TEST_TMPDIR/parsed"
	grep -F '"arguments": {"city":"Paris","days":3}}' "$BATS_TEST_TMPDIR/kept"
}

@test "special tokens from tokenizer_config.json reach the template" {
	printf '[{{ eos_token }}][{{ pad_token }}][{{ bos_token is defined }}][{{ additional_special_tokens[0] }}][{{ enable_thinking }}]' \
		>"$BATS_TEST_TMPDIR/t.jinja"
	printf '{"messages": [], "kwargs": {"enable_thinking": false, "eos_token": "<override>"}}' \
		>"$BATS_TEST_TMPDIR/case.json"
	queue_render "$BATS_TEST_TMPDIR" special render "$BATS_TEST_TMPDIR/t.jinja" \
		"$BATS_TEST_TMPDIR/case.json" "$CONFIG"
	run_reference "$BATS_TEST_TMPDIR"
	compare_render "$BATS_TEST_TMPDIR" special render "$BATS_TEST_TMPDIR/t.jinja" \
		"$BATS_TEST_TMPDIR/case.json" "$CONFIG"
	printf '[<override>][<|endoftext|>][False][<|im_start|>][False]' >"$BATS_TEST_TMPDIR/want"
	cmp "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/special.c.out"
}

@test "raise_exception's message reaches the caller verbatim" {
	run -1 --separate-stderr "$TOOL" render "$BATS_TEST_DIRNAME/../share/chat_templates/qwen3_5.jinja" \
		"$BATS_TEST_DIRNAME/chat/cases/47-no-user-query.json"
	[ "$stderr" = "capy-test-tool: error: There is no user query in the messages." ]
	[ -z "$output" ]
}
