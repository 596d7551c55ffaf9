#!/usr/bin/env bats
# The official API clients (openai 7.59.0 and @anthropic-ai/sdk 1.14.0, pinned by
# t/sdk/package-lock.json; make test installs them) against capy-serve: chat, streams,
# automatic and forced tool choices (each API's), Responses and Anthropic tool round trips, and
# the SDKs' error classes for capy-serve's errors (t/sdk/clients.mjs; the model's side in
# t/sdk/script.json); and forced calls of a bounded tool on the real random-weight fixture,
# where the grammar alone makes the arguments valid.

load lib
load helper/serve

setup_file() {
	serve_fixture
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
}

@test "the OpenAI and Anthropic SDKs: every case of t/sdk/clients.mjs passes" {
	[ -d "$SRC/t/sdk/node_modules/openai" ] || { echo "run make test (it installs t/sdk)"; return 1; }
	CAPY_SCRIPT=$SRC/t/sdk/script.json serve_start capy-serve-scripted "$ART" --profile test --model-id capy-test \
		--api-key sk-test
	run timeout 120 env CAPY_URL="http://127.0.0.1:$PORT" CAPY_API_KEY=sk-test node "$SRC/t/sdk/clients.mjs"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^ok ' <<<"$output")" -ge 21 ]
	! grep -q '^FAIL' <<<"$output"
}

@test "the SDKs' forced tool calls on the random-weight fixture: the grammar holds the arguments to the schema" {
	[ -d "$SRC/t/sdk/node_modules/openai" ] || { echo "run make test (it installs t/sdk)"; return 1; }
	serve_start capy-serve "$ART" --threads 1 --cache-mib 0 --model-id capy-test --api-key sk-test
	run timeout 120 env CAPY_URL="http://127.0.0.1:$PORT" CAPY_API_KEY=sk-test node "$SRC/t/sdk/clients.mjs" \
		bounded-chat bounded-responses bounded-anthropic
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(grep -c '^ok ' <<<"$output")" -eq 3 ]
}
