#!/usr/bin/env bats
# Every request body real clients sent (t/serve/captured: Claude Code, Codex CLI, opencode,
# Qwen Code, the official SDKs; see its README) replayed against capy-serve: each is answered
# 200, and each streamed answer is a well-formed stream of its API. The scripted engine answers
# with reasoning and a tool call (or text after a tool result), so every part of each API's
# output is exercised. Qwen Code's gemini mode speaks Google's API, which capy-serve does not.

load lib
load helper/serve

setup_file() {
	serve_fixture
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
}

@test "every captured request is answered 200, streams well formed for their API" {
	CAPY_SCRIPT=$SCRIPTS/captured.json serve_start capy-serve-scripted "$ART" --profile test --model-id capy-test \
		--max-context 131072
	n=0
	for f in "$SRC"/t/serve/captured/*/[0-9]*_POST_*.json; do
		path=$(jq -r .path "$f")
		case $path in
		/v1/chat/completions) api=chat ;;
		/v1/completions) api=completions ;;
		/v1/responses) api=responses ;;
		/v1/messages*) api=messages ;;
		*) continue ;; # /v1beta/... (Gemini)
		esac
		# OpenAI endpoints check the model id; the bodies name the clients' models.
		jq -c '.body | if has("model") then .model = "capy-test" else . end' "$f" >"$BATS_TEST_TMPDIR/body.json"
		stream=$(jq -r '.body.stream // false' "$f")
		api POST "$path" "@$BATS_TEST_TMPDIR/body.json"
		[ "$CODE" = 200 ] || { echo "$f: status $CODE: $(head -c 300 "$R")"; return 1; }
		if [ "$stream" = true ]; then
			sse "$api" || { echo "$f: bad $api stream"; return 1; }
		else
			jq -e . "$R" >/dev/null || { echo "$f: the answer is not JSON"; return 1; }
		fi
		n=$((n + 1))
	done
	echo "# $n captured requests replayed" >&3
	[ "$n" -ge 50 ]
	health_ok
}
