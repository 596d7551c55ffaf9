#!/usr/bin/env bats
# capy-serve on capy-tiny (share/models), the model trained here, with no scripted engine: the
# official OpenAI and Anthropic SDKs give it its toy tools and the model itself calls them —
# the calculator through chat completions, the Responses API and Messages, list_files in a
# streamed chat — and answers the tools' results (t/sdk/clients.mjs, the tiny-* cases); and a
# real Claude Code session, given a short system prompt and only its Read tool, in which the
# model calls Read, Claude Code reads the file and the model answers with its contents.

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
	if [ -f "$BATS_TEST_TMPDIR/wrote-notes" ]; then rm -f /tmp/notes.txt; fi
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

@test "Claude Code (--bare, a short system prompt, only Read) with capy-tiny: the model reads a file and answers it" {
	claude=$SRC/t/agents/node_modules/.bin/claude
	[ -x "$claude" ] || { echo "run make test (it installs t/agents)"; return 1; }
	# capy-tiny copies only paths like those it was trained on (share/models/README.md): a
	# directory of its list and a file name of its list, here /tmp/notes.txt.
	[ ! -e /tmp/notes.txt ] || skip "/tmp/notes.txt exists and is not this test's"
	touch "$BATS_TEST_TMPDIR/wrote-notes"
	printf '# Capybara\n\nNotes about the river and the forest.\n' >/tmp/notes.txt
	serve_start capy-serve "$ART" --threads 2 --model-id capy-tiny
	mkdir -p "$BATS_TEST_TMPDIR/home"
	# Thinking off (MAX_THINKING_TOKENS=0: Claude Code then sends no thinking): with it on, the
	# model's reasoning after a tool result drifts into its calculator pattern.
	run --separate-stderr timeout 180 env HOME="$BATS_TEST_TMPDIR/home" MAX_THINKING_TOKENS=0 \
		ANTHROPIC_BASE_URL="http://127.0.0.1:$PORT" ANTHROPIC_API_KEY=none ANTHROPIC_MODEL=capy-tiny \
		ANTHROPIC_SMALL_FAST_MODEL=capy-tiny CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 \
		DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 \
		"$claude" -p "Read /tmp/notes.txt" --bare --system-prompt "You are capy-tiny." --tools Read \
		--allowedTools Read --max-turns 3 --output-format json
	echo "$output"
	[ "$status" -eq 0 ]
	python3 - "$output" <<'PY'
import json, sys
t = sys.argv[1]
r = json.loads(t[t.index("{"):])
assert r["num_turns"] == 2 and not r["is_error"], r
want = "/tmp/notes.txt says:\n\n# Capybara\n\nNotes about the river and the forest."
assert r["result"] == want, (r["result"], want)
print("ok:", repr(r["result"]))
PY
}
