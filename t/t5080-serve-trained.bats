#!/usr/bin/env bats
# capy-serve on capy-tiny (share/models), the model trained here, with no scripted engine: the
# official OpenAI and Anthropic SDKs give it its toy tools and the model itself calls them —
# the calculator through chat completions, the Responses API and Messages, list_files in a
# streamed chat — and answers the tools' results (t/sdk/clients.mjs, the tiny-* cases).

load lib
load helper/serve

setup_file() {
	export ART=$BATS_FILE_TMPDIR/capy-tiny.capy TOOLS=$BATS_FILE_TMPDIR/tools.json
	capy-convert -q -m "$SRC/share/models/capy-tiny" -o "$ART"
	python3 -c 'import json, sys; sys.path.insert(0, sys.argv[1]); import corpus_tiny; json.dump(corpus_tiny.TOOLS, open(sys.argv[2], "w"))' \
		"$SRC/share/models" "$TOOLS"
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
}

@test "the SDKs' tool rounds with capy-tiny: the right call, the right argument, the result in the answer" {
	[ -d "$SRC/t/sdk/node_modules/openai" ] || { echo "run make test (it installs t/sdk)"; return 1; }
	serve_start capy-serve "$ART" --threads 2 --model-id capy-tiny --api-key sk-test
	run timeout 240 env CAPY_URL="http://127.0.0.1:$PORT" CAPY_API_KEY=sk-test TINY_TOOLS="$TOOLS" CALL_TIMEOUT_MS=60000 \
		node "$SRC/t/sdk/clients.mjs" tiny-chat-calculator tiny-chat-stream-files tiny-responses-calculator \
		tiny-anthropic-calculator
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^ok ' <<<"$output")" -eq 4 ]
}

@test "without the tools capy-tiny answers in text: a greeting through all three APIs" {
	serve_start capy-serve "$ART" --threads 2 --model-id capy-tiny
	for api in chat responses messages; do
		case $api in
		chat) path=/v1/chat/completions body='{"model":"capy-tiny","messages":[{"role":"user","content":"Hello!"}],"temperature":0,"max_tokens":64}' ;;
		responses) path=/v1/responses body='{"model":"capy-tiny","input":"Hello!","temperature":0,"max_output_tokens":64}' ;;
		messages) path=/v1/messages body='{"model":"capy-tiny","messages":[{"role":"user","content":"Hello!"}],"temperature":0,"max_tokens":64}' ;;
		esac
		run curl -sS "http://127.0.0.1:$PORT$path" -H 'content-type: application/json' -d "$body"
		echo "$api: $output"
		[ "$status" -eq 0 ]
		[[ "$output" == *'Hello! How can I help you today?'* ]]
	done
}
