#!/usr/bin/env bats
# capy-serve --spec ngram on capy-tiny (share/models): greedy chat completions, streamed and
# not, are those of --spec off exactly (text, reasoning, tool calls, finish, usage, the stream's
# deltas one per token) on the model's sample prompts and a second turn of a conversation;
# drafts hit where the answer repeats itself (the Python function: /metrics and the request
# log count them); max_tokens, stop strings and four requests at once are exact with drafts; the flags, the agent profile, and a backend that
# cannot verify drafts (the scripted one stands in for CUDA).

load lib
load helper/serve

setup_file() {
	export ART=$BATS_FILE_TMPDIR/capy-tiny.capy BODIES=$BATS_FILE_TMPDIR/bodies
	capy-convert -q -m "$SRC/share/models/capy-tiny" -o "$ART"
	mkdir -p "$BODIES"
	python3 - "$SRC/share/models" "$BODIES" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
import corpus_tiny
ref = json.load(open(sys.argv[1] + "/capy-tiny/ref.json"))
bodies = []
for s in ref["samples"]:
    b = {"messages": ([{"role": "system", "content": s["system"]}] if s.get("system") else [])
                     + [{"role": "user", "content": s["user"]}]}
    if s["tools"]:
        b["tools"] = {"toy": corpus_tiny.TOOLS, "claude": [corpus_tiny.CLAUDE_READ]}[s["tools"]]
    bodies.append(b)
# A second turn asking the same again: the answer repeats text the prompt holds.
first = "Write a Python function that returns the square of a number."
bodies.append({"messages": [{"role": "user", "content": first},
                            {"role": "assistant", "content": "Here is `square`:\n\n```python\ndef square(x):\n    \"\"\"Return the square of x.\"\"\"\n    return x * x\n```"},
                            {"role": "user", "content": first}]})
for i, b in enumerate(bodies):
    b.update(model="capy-tiny", temperature=0, max_tokens=160)
    json.dump(b, open("%s/b%d.json" % (sys.argv[2], i), "w"))
PY
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
}

# The answer of $R without what differs between two runs of the same request (ids, times).
answer() {
	jq -cS '{choices: [.choices[] | .message.tool_calls |= (if . then map(del(.id)) else . end)], usage}' "$R"
}

# start_pair ARGS...: a server with --spec ngram (SPEC_PORT, SPEC_LOG) and one with --spec off
# (OFF_PORT), both with ARGS.
start_pair() {
	serve_start capy-serve "$ART" --threads 1 --model-id capy-tiny --spec ngram "$@"
	SPEC_PORT=$PORT SPEC_LOG=$SERVER_LOG
	serve_start capy-serve "$ART" --threads 1 --model-id capy-tiny --spec off "$@"
	OFF_PORT=$PORT
}

# metric NAME: its value on the --spec ngram server.
metric() {
	API_PORT=$SPEC_PORT api GET /metrics
	sed -n "s/^$1 //p" "$R"
}

@test "greedy chat completions with --spec ngram equal --spec off, streamed and not; drafts accepted where the answer repeats" {
	start_pair
	for f in "$BODIES"/b*.json; do
		API_PORT=$OFF_PORT api POST /v1/chat/completions "@$f"
		[ "$CODE" = 200 ]
		answer >"$BATS_TEST_TMPDIR/off"
		API_PORT=$SPEC_PORT api POST /v1/chat/completions "@$f"
		[ "$CODE" = 200 ]
		answer >"$BATS_TEST_TMPDIR/spec"
		echo "$(basename "$f"): $(cat "$BATS_TEST_TMPDIR/spec")"
		cmp "$BATS_TEST_TMPDIR/off" "$BATS_TEST_TMPDIR/spec"
		jq '.stream = true | .stream_options = {include_usage: true}' "$f" >"$BATS_TEST_TMPDIR/s.json"
		API_PORT=$OFF_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/s.json"
		sse chat
		jq -cS 'del(.ids)' "$R.sum" | sed 's/call_[0-9a-f_]*/call/g' >"$BATS_TEST_TMPDIR/off.sum"
		API_PORT=$SPEC_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/s.json"
		sse chat
		jq -cS 'del(.ids)' "$R.sum" | sed 's/call_[0-9a-f_]*/call/g' >"$BATS_TEST_TMPDIR/spec.sum"
		cmp "$BATS_TEST_TMPDIR/off.sum" "$BATS_TEST_TMPDIR/spec.sum"
	done
	drafted=$(metric capy_spec_drafted_tokens_total)
	accepted=$(metric capy_spec_accepted_tokens_total)
	windows=$(metric capy_spec_windows_total)
	echo "windows $windows drafted $drafted accepted $accepted"
	[ "$accepted" -gt 0 ] && [ "$accepted" -le "$drafted" ] && [ "$windows" -gt 0 ]
	# The request log counts each answer's windows; they add up to the counters.
	SERVER_LOG=$SPEC_LOG
	[ "$(grep -c '"spec_windows"' "$SPEC_LOG")" -gt 0 ]
	[ "$(jq -s 'map(.spec_accepted // 0) | add' <(grep '"path":"/v1/chat' "$SPEC_LOG"))" = "$accepted" ]
	[ "$(jq -s 'map(.spec_drafted // 0) | add' <(grep '"path":"/v1/chat' "$SPEC_LOG"))" = "$drafted" ]
	# The Python function (the first body) repeats its docstring: drafts hit there.
	[ "$(grep '"path":"/v1/chat' "$SPEC_LOG" | head -n 1 | jq '.spec_accepted')" -ge 20 ]
}

@test "max_tokens is exact with drafts: 1 to 127 tokens, the same text as without" {
	start_pair
	# From 40 tokens on the answer repeats its docstring: the limit falls inside windows.
	for n in 1 2 3 4 5 8 13 40 57 61 62 63 77 101 127; do
		jq ".max_tokens = $n" "$BODIES/b0.json" >"$BATS_TEST_TMPDIR/n.json"
		API_PORT=$OFF_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/n.json"
		answer >"$BATS_TEST_TMPDIR/off"
		API_PORT=$SPEC_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/n.json"
		answer >"$BATS_TEST_TMPDIR/spec"
		echo "$n: $(cat "$BATS_TEST_TMPDIR/spec")"
		[ "$(jv .usage.completion_tokens)" = "$n" ]
		[ "$(jv '.choices[0].finish_reason')" = length ]
		cmp "$BATS_TEST_TMPDIR/off" "$BATS_TEST_TMPDIR/spec"
	done
	[ "$(metric capy_spec_accepted_tokens_total)" -gt 0 ]
}

@test "stop strings end the answer where they would without drafts, streamed and not" {
	start_pair
	for stop in 'square' 'returns' '```' 'None'; do
		jq --arg s "$stop" '.stop = [$s]' "$BODIES/b0.json" >"$BATS_TEST_TMPDIR/st.json"
		API_PORT=$OFF_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/st.json"
		answer >"$BATS_TEST_TMPDIR/off"
		API_PORT=$SPEC_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/st.json"
		answer >"$BATS_TEST_TMPDIR/spec"
		echo "'$stop': $(cat "$BATS_TEST_TMPDIR/spec")"
		[ "$(jv '.choices[0].finish_reason')" = stop ]
		[[ "$(jv '.choices[0].message.content')" != *"$stop"* ]]
		cmp "$BATS_TEST_TMPDIR/off" "$BATS_TEST_TMPDIR/spec"
		jq '.stream = true' "$BATS_TEST_TMPDIR/st.json" >"$BATS_TEST_TMPDIR/s.json"
		API_PORT=$OFF_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/s.json"
		sse chat
		jq -cS 'del(.ids)' "$R.sum" | sed 's/call_[0-9a-f_]*/call/g' >"$BATS_TEST_TMPDIR/off.sum"
		API_PORT=$SPEC_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/s.json"
		sse chat
		jq -cS 'del(.ids)' "$R.sum" | sed 's/call_[0-9a-f_]*/call/g' >"$BATS_TEST_TMPDIR/spec.sum"
		cmp "$BATS_TEST_TMPDIR/off.sum" "$BATS_TEST_TMPDIR/spec.sum"
	done
}

@test "four requests at once with drafts give what each gives alone" {
	serve_start capy-serve "$ART" --threads 1 --model-id capy-tiny --spec ngram --max-concurrency 4 --cache-mib 0
	for i in 0 2 4 6; do
		api POST /v1/chat/completions "@$BODIES/b$i.json"
		answer >"$BATS_TEST_TMPDIR/alone$i"
	done
	pids=()
	for i in 0 2 4 6; do
		curl -sS --max-time 60 -H 'Content-Type: application/json' --data-binary "@$BODIES/b$i.json" \
			"http://127.0.0.1:$PORT/v1/chat/completions" >"$BATS_TEST_TMPDIR/r$i" &
		pids+=($!)
	done
	wait "${pids[@]}"
	for i in 0 2 4 6; do
		R=$BATS_TEST_TMPDIR/r$i
		answer >"$BATS_TEST_TMPDIR/together$i"
		cmp "$BATS_TEST_TMPDIR/alone$i" "$BATS_TEST_TMPDIR/together$i"
	done
	[ "$(curl -sS "http://127.0.0.1:$PORT/metrics" | sed -n 's/^capy_spec_accepted_tokens_total //p')" -gt 0 ]
}

@test "--spec, --draft-tokens and --ngram-min: bad values refused; the agent profile turns drafts on; a backend that cannot verify them" {
	run -2 --separate-stderr capy-serve "$ART" --spec mpt
	[ "${stderr_lines[0]}" = "capy-serve: error: --spec: 'mpt' is not mtp, mtp+ngram, ngram, auto or off" ]
	run -2 --separate-stderr capy-serve "$ART" --spec ngram --draft-tokens 0
	[[ "${stderr_lines[0]}" == "capy-serve: error: option '--draft-tokens': '0' is out of range"* ]]
	run -2 --separate-stderr capy-serve "$ART" --spec ngram --ngram-min 0
	[[ "${stderr_lines[0]}" == "capy-serve: error: option '--ngram-min': '0' is out of range"* ]]
	# capy-tiny has an MTP head: the profile's auto drafts with it and n-grams (t5096).
	serve_start capy-serve "$ART" --profile agent --threads 1
	grep -q "^capy-serve: speculative decoding: MTP and n-gram drafts of up to 4 tokens" "$SERVER_LOG"
	serve_start capy-serve "$ART" --profile agent --threads 1 --spec off --draft-tokens 6
	! grep -q "speculative decoding" "$SERVER_LOG"
	serve_start capy-serve "$ART" --profile agent --threads 1 --spec ngram --draft-tokens 6 --ngram-min 3
	grep -q "^capy-serve: speculative decoding: n-gram drafts of up to 6 tokens .*matches of 3 tokens" "$SERVER_LOG"
	# The scripted backend keeps no states, as the CUDA one: asked for, drafts are an error;
	# from the profile the server starts without them and says so in one line.
	CAPY_SCRIPT=$SRC/t/serve/scripts/api.json run -1 --separate-stderr capy-serve-scripted "$ART" --spec ngram
	[ "${#stderr_lines[@]}" = 1 ]
	[ "${stderr_lines[0]}" = "capy-serve-scripted: error: --spec ngram: the script backend cannot verify drafts yet (use --device cpu, or --spec off)" ]
	CAPY_SCRIPT=$SRC/t/serve/scripts/api.json serve_start capy-serve-scripted "$ART" --profile agent
	[ "$(grep -c "speculative decoding" "$SERVER_LOG")" = 1 ]
	grep -q "^capy-serve-scripted: speculative decoding off: the script backend cannot verify drafts yet$" "$SERVER_LOG"
	api POST /v1/chat/completions "$(chat_body hi)"
	[ "$CODE" = 200 ]
}
