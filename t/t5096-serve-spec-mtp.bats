#!/usr/bin/env bats
# capy-serve --spec mtp and mtp+ngram (the model's MTP head drafts inside the scheduler): greedy
# chat completions, streamed and not, are those of --spec off exactly on capy-tiny (its trained
# head: drafts accepted, counted by source in /metrics and the request log) and on the fixtures
# with a random head (nothing accepted, every window cut back); max_tokens and stop strings end
# inside windows exactly; four requests at once as alone; a draft vocabulary; requests that
# resume from the prefix cache draft with the head too, those from its host tier do not, the
# same answers; the flags, the agent profile's
# choice (mtp+ngram with a head, ngram without) and a backend without the head or kept states
# (the scripted one; CUDA has both now: t/cuda/tools.sh checks it).

load lib
load helper/serve

MTP_FIXTURES="qwen3_5-dense qwen3_5_moe qwen3_next qwen4_exp"

setup_file() {
	convert_fixtures $MTP_FIXTURES
	# a model without a head: random weights from qwen4_exp's config, no mtp.* tensors
	capy-convert -q --synthetic "$FIX/qwen4_exp/config.json" -o "$ART/no-head.capy"
	export BODIES=$BATS_FILE_TMPDIR/bodies TINY=$BATS_FILE_TMPDIR/capy-tiny.capy
	capy-convert -q -m "$SRC/share/models/capy-tiny" -o "$TINY"
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
for i, b in enumerate(bodies):
    b.update(model="m", temperature=0, max_tokens=160)
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

# start_pair MODEL SPEC ARGS...: a server with --spec SPEC (SPEC_PORT, SPEC_LOG) and one with
# --spec off (OFF_PORT), both on MODEL with ARGS.
start_pair() {
	local model=$1 spec=$2
	shift 2
	serve_start capy-serve "$model" --threads 1 --model-id m --spec "$spec" "$@"
	SPEC_PORT=$PORT SPEC_LOG=$SERVER_LOG
	serve_start capy-serve "$model" --threads 1 --model-id m --spec off "$@"
	OFF_PORT=$PORT
}

# metric NAME: its value on the SPEC server (NAME may carry its labels).
metric() {
	API_PORT=$SPEC_PORT api GET /metrics
	grep -F "$1 " "$R" | sed -n '$s/.* //p'
}

# same BODY: the answer to BODY (a file), and its stream's summary, equal on both servers.
same() {
	API_PORT=$OFF_PORT api POST /v1/chat/completions "@$1"
	[ "$CODE" = 200 ]
	answer >"$BATS_TEST_TMPDIR/off"
	API_PORT=$SPEC_PORT api POST /v1/chat/completions "@$1"
	[ "$CODE" = 200 ]
	answer >"$BATS_TEST_TMPDIR/spec"
	echo "$(basename "$1"): $(cat "$BATS_TEST_TMPDIR/spec")"
	cmp "$BATS_TEST_TMPDIR/off" "$BATS_TEST_TMPDIR/spec"
	jq '.stream = true | .stream_options = {include_usage: true}' "$1" >"$BATS_TEST_TMPDIR/s.json"
	API_PORT=$OFF_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/s.json"
	sse chat
	jq -cS 'del(.ids)' "$R.sum" | sed 's/call_[0-9a-f_]*/call/g' >"$BATS_TEST_TMPDIR/off.sum"
	API_PORT=$SPEC_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/s.json"
	sse chat
	jq -cS 'del(.ids)' "$R.sum" | sed 's/call_[0-9a-f_]*/call/g' >"$BATS_TEST_TMPDIR/spec.sum"
	cmp "$BATS_TEST_TMPDIR/off.sum" "$BATS_TEST_TMPDIR/spec.sum"
}

@test "capy-tiny: greedy chat completions with --spec mtp equal --spec off, streamed and not; MTP drafts accepted and counted" {
	# No prefix cache: every request drafts with the head from its first token.
	start_pair "$TINY" mtp --cache-mib 0
	grep -q "^capy-serve: speculative decoding: MTP drafts of up to 4 tokens per request and step (the model's head;" "$SPEC_LOG"
	for f in "$BODIES"/b*.json; do
		same "$f"
	done
	windows=$(metric capy_spec_windows_total)
	drafted=$(metric capy_spec_drafted_tokens_total)
	accepted=$(metric capy_spec_accepted_tokens_total)
	mtp_windows=$(metric 'capy_spec_source_windows_total{source="mtp"}')
	mtp_accepted=$(metric 'capy_spec_source_accepted_tokens_total{source="mtp"}')
	echo "windows $windows drafted $drafted accepted $accepted (MTP: $mtp_windows windows, $mtp_accepted accepted)"
	[ "$accepted" -gt 0 ] && [ "$accepted" -le "$drafted" ]
	[ "$mtp_windows" = "$windows" ] && [ "$mtp_accepted" = "$accepted" ]
	[ "$(metric 'capy_spec_source_windows_total{source="ngram"}')" = 0 ]
	[ "$(metric capy_spec_mtp_seconds_total | cut -d. -f1)" -ge 0 ]
	# The request log counts each answer's MTP windows; they add up to the counters.
	[ "$(jq -s 'map(.spec_mtp_accepted // 0) | add' <(grep '"path":"/v1/chat' "$SPEC_LOG"))" = "$accepted" ]
	[ "$(jq -s 'map(.spec_mtp_drafted // 0) | add' <(grep '"path":"/v1/chat' "$SPEC_LOG"))" = "$drafted" ]
	[ "$(jq -s 'map(.spec_mtp_windows // 0) | add' <(grep '"path":"/v1/chat' "$SPEC_LOG"))" = "$windows" ]
}

@test "the fixtures' random heads: --spec mtp and mtp+ngram equal --spec off (with the prefix cache)" {
	for m in $MTP_FIXTURES; do
		for spec in mtp mtp+ngram; do
			start_pair "$ART/$m.capy" "$spec"
			for i in 0 1 2; do
				jq '.max_tokens = 40' "$BODIES/b$i.json" >"$BATS_TEST_TMPDIR/f.json"
				same "$BATS_TEST_TMPDIR/f.json"
			done
			windows=$(metric 'capy_spec_source_windows_total{source="mtp"}')
			echo "$m $spec: $windows MTP windows"
			[ "$windows" -gt 0 ]
			serve_kill_all "$BATS_TEST_TMPDIR"
		done
	done
}

@test "capy-tiny with the prefix cache: requests resumed from it draft with the head too, the same answers" {
	start_pair "$TINY" mtp
	for i in 0 1 2; do
		same "$BODIES/b$i.json"
	done
	# A second turn: the first's answer and a new message, resumed at the answer's snapshot.
	API_PORT=$OFF_PORT api POST /v1/chat/completions "@$BODIES/b0.json"
	jq --arg a "$(jv '.choices[0].message.content')" \
		'.messages += [{role: "assistant", content: $a}, {role: "user", content: "Now the cube."}]' \
		"$BODIES/b0.json" >"$BATS_TEST_TMPDIR/turn2.json"
	same "$BATS_TEST_TMPDIR/turn2.json"
	grep '"path":"/v1/chat' "$SPEC_LOG" | jq -c '{cached_tokens, spec_mtp_windows, spec_mtp_accepted}'
	resumed=$(grep '"path":"/v1/chat' "$SPEC_LOG" | jq -s 'map(select(.cached_tokens > 0)) | length')
	drafted=$(grep '"path":"/v1/chat' "$SPEC_LOG" | jq -s 'map(select(.cached_tokens > 0 and .spec_mtp_windows > 0)) | length')
	[ "$resumed" -ge 4 ] && [ "$drafted" = "$resumed" ]
	[ "$(grep '"path":"/v1/chat' "$SPEC_LOG" | jq -s 'map(select(.cached_tokens > 0) | .spec_mtp_accepted // 0) | add')" -gt 0 ]
}

@test "from the context cache's host tier: no MTP drafts there (n-gram ones still), the same answers" {
	# A prefix cache smaller than one snapshot: every entry goes down to host RAM at once.
	start_pair "$TINY" mtp+ngram --cache-mib 0.05 --host-cache-mib 64
	same "$BODIES/b0.json"
	API_PORT=$OFF_PORT api POST /v1/chat/completions "@$BODIES/b0.json"
	jq --arg a "$(jv '.choices[0].message.content')" \
		'.messages += [{role: "assistant", content: $a}, {role: "user", content: "Now the cube."}]' \
		"$BODIES/b0.json" >"$BATS_TEST_TMPDIR/turn2.json"
	same "$BATS_TEST_TMPDIR/turn2.json"
	grep '"path":"/v1/chat' "$SPEC_LOG" | jq -c '{cached_tokens, cache_tier, spec_windows, spec_mtp_windows}'
	[ "$(grep '"path":"/v1/chat' "$SPEC_LOG" | jq -s 'map(select(.cache_tier == "host")) | length')" -ge 2 ]
	[ "$(grep '"path":"/v1/chat' "$SPEC_LOG" | jq -s 'map(select(.cache_tier == "host") | .spec_mtp_windows // 0) | add')" = 0 ]
	[ "$(grep '"path":"/v1/chat' "$SPEC_LOG" | head -n 1 | jq '.spec_mtp_windows')" -gt 0 ]
}

@test "max_tokens is exact with MTP drafts: 1 to 127 tokens, the same text as without" {
	start_pair "$TINY" mtp --cache-mib 0
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
	[ "$(metric 'capy_spec_source_accepted_tokens_total{source="mtp"}')" -gt 0 ]
}

@test "stop strings end the answer where they would without MTP drafts, streamed and not" {
	start_pair "$TINY" mtp --cache-mib 0
	for stop in 'square' 'returns' '```' 'None'; do
		jq --arg s "$stop" '.stop = [$s]' "$BODIES/b0.json" >"$BATS_TEST_TMPDIR/st.json"
		same "$BATS_TEST_TMPDIR/st.json"
		API_PORT=$SPEC_PORT api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/st.json"
		[ "$(jv '.choices[0].finish_reason')" = stop ]
		[[ "$(jv '.choices[0].message.content')" != *"$stop"* ]]
	done
}

@test "four requests at once with MTP (and n-gram) drafts give what each gives alone" {
	serve_start capy-serve "$TINY" --threads 1 --model-id m --spec mtp+ngram --max-concurrency 4 --cache-mib 0
	for i in 0 1 3 5; do
		api POST /v1/chat/completions "@$BODIES/b$i.json"
		answer >"$BATS_TEST_TMPDIR/alone$i"
	done
	pids=()
	for i in 0 1 3 5; do
		curl -sS --max-time 60 -H 'Content-Type: application/json' --data-binary "@$BODIES/b$i.json" \
			"http://127.0.0.1:$PORT/v1/chat/completions" >"$BATS_TEST_TMPDIR/r$i" &
		pids+=($!)
	done
	wait "${pids[@]}"
	for i in 0 1 3 5; do
		R=$BATS_TEST_TMPDIR/r$i
		answer >"$BATS_TEST_TMPDIR/together$i"
		cmp "$BATS_TEST_TMPDIR/alone$i" "$BATS_TEST_TMPDIR/together$i"
	done
	[ "$(curl -sS "http://127.0.0.1:$PORT/metrics" | sed -n 's/^capy_spec_source_accepted_tokens_total{source="mtp"} //p')" -gt 0 ]
}

@test "--draft-shortlist: MTP drafts from a smaller vocabulary, the same answers; a bad list is refused" {
	{ echo "# a hand-made draft vocabulary"; seq 0 1999; } >"$BATS_TEST_TMPDIR/short"
	serve_start capy-serve "$TINY" --threads 1 --model-id m --spec mtp --cache-mib 0 --draft-shortlist "$BATS_TEST_TMPDIR/short"
	SPEC_PORT=$PORT SPEC_LOG=$SERVER_LOG
	serve_start capy-serve "$TINY" --threads 1 --model-id m --spec off --cache-mib 0
	OFF_PORT=$PORT
	grep -q "(the model's head over 2000 draft ids;" "$SPEC_LOG"
	same "$BODIES/b0.json"
	[ "$(metric 'capy_spec_source_windows_total{source="mtp"}')" -gt 0 ]
	printf '1\n2\nfoo\n' >"$BATS_TEST_TMPDIR/bad"
	run -1 --separate-stderr capy-serve "$TINY" --port 0 --spec mtp --draft-shortlist "$BATS_TEST_TMPDIR/bad"
	[ "${#stderr_lines[@]}" = 1 ]
	[ "${stderr_lines[0]}" = "capy-serve: error: --draft-shortlist: '$BATS_TEST_TMPDIR/bad' line 3: not a token id below 4096" ]
	run -2 --separate-stderr capy-serve "$TINY" --spec ngram --draft-shortlist "$BATS_TEST_TMPDIR/short"
	[ "${stderr_lines[0]}" = "capy-serve: error: --draft-shortlist goes with --spec mtp, mtp+ngram or auto" ]
}

@test "--spec values, the agent profile (mtp+ngram with a head, ngram without), a model or backend without the head" {
	run -2 --separate-stderr capy-serve "$TINY" --spec eagle
	[ "${stderr_lines[0]}" = "capy-serve: error: --spec: 'eagle' is not mtp, mtp+ngram, ngram, auto or off" ]
	run -1 --separate-stderr capy-serve "$ART/no-head.capy" --port 0 --spec mtp
	[ "${#stderr_lines[@]}" = 1 ]
	[ "${stderr_lines[0]}" = "capy-serve: error: --spec mtp: '$ART/no-head.capy' has no MTP head (no mtp.* tensors)" ]
	serve_start capy-serve "$TINY" --profile agent --threads 1
	grep -q "^capy-serve: speculative decoding: MTP and n-gram drafts of up to 4 tokens per request and step (n-gram where a match of 2 tokens or more fills the window, else the model's head;" "$SERVER_LOG"
	serve_start capy-serve "$ART/no-head.capy" --profile agent --threads 1
	grep -q "^capy-serve: speculative decoding: n-gram drafts of up to 4 tokens" "$SERVER_LOG"
	! grep -q "MTP" "$SERVER_LOG"
	serve_start capy-serve "$TINY" --profile agent --threads 1 --spec ngram
	grep -q "^capy-serve: speculative decoding: n-gram drafts of up to 4 tokens" "$SERVER_LOG"
	# The scripted backend has no MTP head and keeps no states: asked for, MTP is an error in
	# one line; from the profile it is dropped, and so are the drafts.
	CAPY_SCRIPT=$SRC/t/serve/scripts/api.json run -1 --separate-stderr capy-serve-scripted "$TINY" --spec mtp
	[ "${#stderr_lines[@]}" = 1 ]
	[[ "${stderr_lines[0]}" == "capy-serve-scripted: error: the script backend has no MTP head yet"* ]]
	CAPY_SCRIPT=$SRC/t/serve/scripts/api.json serve_start capy-serve-scripted "$TINY" --profile agent
	grep -q "^capy-serve-scripted: MTP drafts off: the script backend has no MTP head yet" "$SERVER_LOG"
	grep -q "^capy-serve-scripted: speculative decoding off: the script backend cannot verify drafts yet$" "$SERVER_LOG"
	api POST /v1/chat/completions "$(chat_body hi)"
	[ "$CODE" = 200 ]
}
