#!/usr/bin/env bats
# capy-serve, the program: options and profiles, --help, the startup line, a busy port,
# signals, API keys, the request log, /health and /metrics, an engine-wide failure. Every
# server listens on 127.0.0.1 with --port 0; every wait is bounded.

load lib
load helper/serve

setup_file() {
	serve_fixture
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
}

# Seconds since the epoch, with fractions.
now() {
	date +%s.%N
}

# elapsed_below T0 MAX: fail unless less than MAX seconds passed since T0.
elapsed_below() {
	awk -v t0="$1" -v t1="$(now)" -v max="$2" 'BEGIN { printf "%.2f s\n", t1 - t0; exit !(t1 - t0 < max) }'
}

# wait_for_stream FILE: until a streamed answer has its first text (5 s at most).
wait_for_stream() {
	local i
	for ((i = 0; i < 50; i++)); do
		grep -q '"content":"[^"]' "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "no text streamed into $1 within 5 s" >&2
	return 1
}

@test "--help lists every option and the profiles with their flags; exit 0, on stdout" {
	run --separate-stderr capy-serve --help
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	for o in --host --port --model-id --api-key --api-key-file --profile --max-context --max-concurrency \
		--max-queue --prefill-chunk --cache-mib --snapshot-interval --max-tokens --max-body \
		--max-connections --max-messages --max-tools --request-timeout --idle-timeout \
		--shutdown-timeout --chat-template --device --gpu-mem --expert-slots --expert-cpu-threads --threads --kv \
		--log-prompts; do
		[[ "$output" == *"    $o "* || "$output" == *", $o "* ]] || { echo "--help lacks $o"; return 1; }
	done
	for p in agent small throughput test; do
		grep -Eq "^    $p +--max-context [0-9]+ " <<<"$output" || { echo "--help lacks profile $p"; return 1; }
	done
	run capy-serve --version
	[ "$status" -eq 0 ]
	[[ "$output" == "capy-serve "* ]]
}

# The flags --help shows for a profile, one "--flag value" pair per line.
profile_flags() {
	capy-serve --help | awk -v p="$1" '
		$1 == p { on = 1; $1 = ""; print; next }
		on && /^ {20,}--/ { print; next }
		{ on = 0 }' | tr ' ' '\n' | grep . | paste -d' ' - -
}

# The prefix cache budget as the startup line prints it.
human_mib() {
	awk -v m="$1" 'BEGIN { if (m >= 1024) printf "%.2f GiB\n", m / 1024; else printf "%.2f MiB\n", m }'
}

@test "every profile starts a server with the flags --help lists for it" {
	for p in agent small throughput test; do
		flags=$(profile_flags "$p")
		[ -n "$flags" ]
		serve_start capy-serve "$ART" --profile "$p"
		banner=$(head -n 2 "$SERVER_LOG")
		[[ "$banner" == *", profile $p"* ]]
		while read -r flag value; do
			case $flag in
			--max-context) want="context $value tokens" ;;
			--max-concurrency) want="$value requests at once" ;;
			--prefill-chunk) want="prompt pieces of $value," ;;
			--cache-mib) want="prefix cache $(human_mib "$value")" ;;
			--snapshot-interval) want="every $value tokens" ;;
			--threads) want="with $value threads" ;;
			*) echo "unknown profile flag $flag"; return 1 ;;
			esac
			[[ "$banner" == *"$want"* ]] || { echo "profile $p: '$want' not in: $banner"; return 1; }
		done <<<"$flags"
		api GET /v1/models
		want=$(sed -n 's/^--max-context //p' <<<"$flags")
		[ "$(jv '.data[0].max_model_len')" = "$want" ]
		serve_stop
		[ "$SERVER_RC" -eq 0 ]
	done
}

@test "--profile: later flags override it and it overrides earlier ones; --profile=NAME works" {
	serve_start capy-serve "$ART" --threads 1 --max-context 1000 --profile test
	[[ "$(head -n 2 "$SERVER_LOG")" == *"context 4096 tokens"* ]]
	[[ "$(head -n 2 "$SERVER_LOG")" == *"with 2 threads"* ]]
	serve_stop
	serve_start capy-serve "$ART" --profile=small --max-context 1000 --max-concurrency 3
	[[ "$(head -n 2 "$SERVER_LOG")" == *"context 1000 tokens, 3 requests at once"* ]]
	[[ "$(head -n 2 "$SERVER_LOG")" == *"prompt pieces of 128,"* ]]
	api GET /v1/models
	[ "$(jv '.data[0].max_model_len')" = 1000 ]
}

@test "bad usage exits 2 with one error line; an unreadable model exits 1" {
	run --separate-stderr capy-serve
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"capy-serve: error: no model given"* ]]
	run --separate-stderr capy-serve "$ART" --profile fast
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"--profile: 'fast' is not agent, small, throughput or test"* ]]
	run --separate-stderr capy-serve "$ART" --port 70000
	[ "$status" -eq 2 ]
	run --separate-stderr capy-serve "$ART" "$ART"
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"unexpected argument"* ]]
	run --separate-stderr capy-serve "$ART" --kv fp8
	[ "$status" -eq 2 ]
	[[ "$stderr" == *"--kv: 'fp8' is not bf16, f32 or int8"* ]]
	run --separate-stderr capy-serve "$ART" --max-concurrency 0
	[ "$status" -eq 2 ]
	run --separate-stderr capy-serve "$ART" --port 0 --host no-such-host.invalid
	[ "$status" -eq 1 ]
	assert_one_error_line capy-serve
	[[ "$stderr" == *"cannot resolve host 'no-such-host.invalid'"* ]]
	run --separate-stderr capy-serve "$BATS_TEST_TMPDIR/none.capy" --port 0
	[ "$status" -eq 1 ]
	assert_one_error_line capy-serve
	[[ "$stderr" == *"none.capy"* ]]
	echo "not a model" >"$BATS_TEST_TMPDIR/junk.capy"
	run --separate-stderr capy-serve "$BATS_TEST_TMPDIR/junk.capy" --port 0
	[ "$status" -eq 1 ]
	assert_one_error_line capy-serve
}

@test "the startup line names the model, the chosen port, the device and the threads; --model-id renames" {
	serve_start capy-serve "$ART" --threads 1
	line=$(head -n 1 "$SERVER_LOG")
	[[ "$line" == "capy-serve: serving 'fixture' (qwen3_5_moe, "*" on http://127.0.0.1:$PORT on cpu with 1 threads" ]]
	[[ "$(sed -n 2p "$SERVER_LOG")" == "capy-serve: context 32768 tokens, 8 requests at once (256 more queued), "*", no API key" ]]
	[ "$PORT" -gt 0 ]
	health_ok
	api GET /v1/models
	[ "$CODE" = 200 ]
	[ "$(jv '.data[0].id')" = fixture ]
	serve_stop
	serve_start capy-serve "$ART" --threads 1 --model-id qwen-local
	[[ "$(head -n 1 "$SERVER_LOG")" == "capy-serve: serving 'qwen-local' "* ]]
	api GET /v1/models/qwen-local
	[ "$CODE" = 200 ]
	[ "$(jv '.id')" = qwen-local ]
	api GET /health
	[ "$(jv '.model')" = qwen-local ]
}

@test "--max-tokens clamps what a request asks for, and what it leaves open" {
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART" --max-tokens 3
	for extra in '"max_tokens":100' '' '"max_completion_tokens":5000'; do
		api POST /v1/chat/completions "$(chat_body 'count to ten' "$extra")"
		[ "$CODE" = 200 ]
		[ "$(jq -c '[.choices[0].finish_reason, .usage.completion_tokens]' "$R")" = '["length",3]' ]
	done
	api POST /v1/chat/completions "$(chat_body 'count to ten' '"max_tokens":2')"
	[ "$(jq -c '[.choices[0].finish_reason, .usage.completion_tokens]' "$R")" = '["length",2]' ]
	api POST /v1/messages '{"max_tokens":64000,"messages":[{"role":"user","content":"count to ten"}]}'
	[ "$(jq -c '[.stop_reason, .usage.output_tokens]' "$R")" = '["max_tokens",3]' ]
}

@test "--max-context bounds prompt and answer together: the answer stops at the context, a prompt that fills it is refused" {
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART" --max-context 64
	body=$(chat_body 'count to ten, then eleven twelve thirteen fourteen fifteen sixteen')
	api POST /v1/chat/completions "$body"
	[ "$CODE" = 200 ]
	[ "$(jq -c '[.choices[0].finish_reason, .usage.total_tokens]' "$R")" = '["length",64]' ]
	api POST /v1/chat/completions "$(chat_body "count to ten $(printf 'and %.0s' {1..40})")"
	[ "$CODE" = 400 ]
	[ "$(jq -c '[.error.code, .error.type]' "$R")" = '["context_length_exceeded","invalid_request_error"]' ]
	[[ "$(jv .error.message)" == *"this server's context is 64 tokens (--max-context)"* ]]
}

@test "a second server on a busy port is refused with a clear message and exit 1; the first serves on" {
	serve_start capy-serve "$ART" --threads 1
	run --separate-stderr timeout 20 capy-serve "$ART" --threads 1 --port "$PORT"
	[ "$status" -eq 1 ]
	assert_one_error_line capy-serve
	[[ "$stderr" == "capy-serve: error: cannot listen on 127.0.0.1:$PORT: address already in use (is another capy-serve running?)" ]]
	health_ok
	api POST /v1/chat/completions "$(chat_body hi '"max_tokens":2')"
	[ "$CODE" = 200 ]
}

@test "SIGTERM and SIGINT stop an idle server at once: exit 0, the port closed" {
	for sig in TERM INT; do
		serve_start capy-serve "$ART" --threads 1
		t0=$(now)
		kill -"$sig" "$SERVER_PID"
		serve_stop
		[ "$SERVER_RC" -eq 0 ]
		elapsed_below "$t0" 3
		run curl -sS --max-time 2 -o /dev/null "http://127.0.0.1:$PORT/health"
		[ "$status" -eq 7 ] # connection refused
	done
}

@test "SIGTERM: an answer in flight finishes within --shutdown-timeout, new connections are refused, exit 0" {
	CAPY_SCRIPT=$SCRIPTS/slow.json serve_start capy-serve-scripted "$ART" --shutdown-timeout 10
	R=$BATS_TEST_TMPDIR/stream
	curl -sS -N --max-time 20 -o "$R" "http://127.0.0.1:$PORT/v1/chat/completions" \
		-d "$(chat_body 'a short one' '"stream":true')" &
	cpid=$!
	wait_for_stream "$R"
	run ! grep -q '\[DONE\]' "$R" # still in flight
	t0=$(now)
	kill -TERM "$SERVER_PID"
	sleep 0.2
	run curl -sS --max-time 2 -o /dev/null "http://127.0.0.1:$PORT/health"
	[ "$status" -eq 7 ]
	wait "$cpid"
	serve_stop
	[ "$SERVER_RC" -eq 0 ]
	elapsed_below "$t0" 5
	sse chat "$R"
	[ "$(jv '.finish' "$R.sum")" = stop ]
	[ "$(jv '.content' "$R.sum")" = "This answer has about twenty tokens in it, so it ends soon enough." ]
	grep -q '"finish":"stop"' "$SERVER_LOG"
}

@test "SIGTERM: answers longer than --shutdown-timeout end at the bound with the API's error; exit 0; the log says so" {
	CAPY_SCRIPT=$SCRIPTS/slow.json serve_start capy-serve-scripted "$ART" --shutdown-timeout 1
	R=$BATS_TEST_TMPDIR/stream
	curl -sS -N --max-time 20 -o "$R" "http://127.0.0.1:$PORT/v1/chat/completions" \
		-d "$(chat_body 'a long one' '"stream":true')" &
	cpid=$!
	curl -sS --max-time 20 -o "$R.m" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/messages" \
		-d '{"max_tokens":2000,"messages":[{"role":"user","content":"a long one too"}]}' >"$R.code" &
	mpid=$!
	wait_for_stream "$R"
	t0=$(now)
	kill -TERM "$SERVER_PID"
	serve_stop
	[ "$SERVER_RC" -eq 0 ]
	elapsed_below "$t0" 4 # 1 s of grace, then ended: not the 18 s the answers take
	wait "$cpid"
	wait "$mpid"
	# the stream ends in its own form: an error chunk, then [DONE]
	sse chat "$R"
	[ "$(jq -c '[.error.message, .error.type, .finish]' "$R.sum")" = '["the server is shutting down","server_error",null]' ]
	[[ "$(jv .content "$R.sum")" == "word0 word1 "* ]]
	# the whole answer: 503 in Anthropic's shape
	[ "$(cat "$R.code")" = 503 ]
	[ "$(jq -c '[.type, .error.type]' "$R.m")" = '["error","overloaded_error"]' ]
	[ "$(grep -c '"finish":"shutdown"' "$SERVER_LOG")" -eq 2 ]
}

@test "--api-key: a missing or wrong key gets 401 in each API's error shape; Bearer and x-api-key pass; /health and /metrics stay open" {
	serve_start capy-serve "$ART" --threads 1 --api-key sk-right
	[[ "$(sed -n 2p "$SERVER_LOG")" == *", API key required" ]]
	body=$(chat_body hi '"max_tokens":2')
	for path in /v1/chat/completions /v1/completions /v1/responses; do
		api POST "$path" "$body"
		[ "$CODE" = 401 ]
		[ "$(jq -c '[.error.type, .error.code]' "$R")" = '["authentication_error","invalid_api_key"]' ]
		[[ "$(jv '.error.message')" == "missing API key"* ]]
		[ "$(header WWW-Authenticate)" = Bearer ]
	done
	api POST /v1/chat/completions "$body" -H 'Authorization: Bearer sk-wrong'
	[ "$CODE" = 401 ]
	[ "$(jv '.error.message')" = "invalid API key" ]
	api POST /v1/chat/completions "$body" -H 'Authorization: Bearer sk-righ'
	[ "$CODE" = 401 ]
	api POST /v1/chat/completions "$body" -H 'Authorization: Bearer sk-right2'
	[ "$CODE" = 401 ]
	api POST /v1/chat/completions "$body" -H 'Authorization: sk-right'
	[ "$CODE" = 401 ]
	mbody='{"model":"claude","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}'
	for h in '' 'x-api-key: nope' 'Authorization: Bearer nope'; do
		api POST /v1/messages "$mbody" ${h:+-H "$h"}
		[ "$CODE" = 401 ]
		[ "$(jq -c '[.type, .error.type, (.error | keys)]' "$R")" = '["error","authentication_error",["message","type"]]' ]
		api POST /v1/messages/count_tokens "$mbody" ${h:+-H "$h"}
		[ "$CODE" = 401 ]
		[ "$(jv '.type')" = error ]
	done
	api GET /v1/models
	[ "$CODE" = 401 ]
	api POST /v1/chat/completions "$body" -H 'Authorization: Bearer sk-right'
	[ "$CODE" = 200 ]
	api POST /v1/chat/completions "$body" -H 'authorization: bearer   sk-right  '
	[ "$CODE" = 200 ]
	api POST /v1/chat/completions "$body" -H 'x-api-key: sk-right'
	[ "$CODE" = 200 ]
	api POST /v1/messages "$mbody" -H 'x-api-key: sk-right'
	[ "$CODE" = 200 ]
	api POST /v1/messages "$mbody" -H 'Authorization: Bearer sk-right'
	[ "$CODE" = 200 ]
	api GET /v1/models '' -H 'x-api-key: sk-right'
	[ "$CODE" = 200 ]
	api GET /health
	[ "$CODE" = 200 ]
	api GET /metrics
	[ "$CODE" = 200 ]
	grep -q '^capy_requests_total{endpoint="/v1/chat/completions",status="401"} 5$' "$R"
}

@test "--api-key-file: every key of the file works, comments and blank lines are not keys; CAPY_API_KEY adds one" {
	printf '# keys of the team\n\nsk-alice\r\n  \nsk-bob\n' >"$BATS_TEST_TMPDIR/keys"
	sed -i 's/^  $//' "$BATS_TEST_TMPDIR/keys"
	CAPY_API_KEY=sk-env serve_start capy-serve "$ART" --threads 1 --api-key-file "$BATS_TEST_TMPDIR/keys"
	body=$(chat_body hi '"max_tokens":2')
	for k in sk-alice sk-bob sk-env; do
		api POST /v1/chat/completions "$body" -H "Authorization: Bearer $k"
		[ "$CODE" = 200 ] || { echo "key $k: $CODE"; return 1; }
	done
	for k in '#' '# keys of the team' sk-carol sk-alice- ''; do
		api POST /v1/chat/completions "$body" -H "x-api-key: $k"
		[ "$CODE" = 401 ] || { echo "key '$k': $CODE"; return 1; }
	done
	serve_stop
	CAPY_API_KEY=sk-env serve_start capy-serve "$ART" --threads 1
	[[ "$(sed -n 2p "$SERVER_LOG")" == *", API key required" ]]
	api GET /v1/models
	[ "$CODE" = 401 ]
	api GET /v1/models '' -H 'x-api-key: sk-env'
	[ "$CODE" = 200 ]
	serve_stop
	printf '# nothing here\n\n' >"$BATS_TEST_TMPDIR/empty"
	run --separate-stderr capy-serve "$ART" --port 0 --api-key-file "$BATS_TEST_TMPDIR/empty"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"no API key in the file"* ]]
	run --separate-stderr capy-serve "$ART" --port 0 --api-key-file "$BATS_TEST_TMPDIR/missing"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"missing"* ]]
}

@test "the log has one JSON line per request, with the request id, timings and tokens, and no prompt text" {
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART"
	api POST /v1/chat/completions "$(chat_body 'zebra-7731 say hello')"
	[ "$CODE" = 200 ]
	id=$(header x-request-id)
	[[ "$id" == req_* ]]
	api POST /v1/chat/completions "$(chat_body 'zebra-7731 again' '"model":"other"')"
	[ "$CODE" = 404 ]
	api GET /nowhere
	[ "$CODE" = 404 ]
	wait_for_log '"path":"/nowhere"'
	[ "$(grep -c '^{' "$SERVER_LOG")" -eq 3 ]
	log_line_for "$id" >"$BATS_TEST_TMPDIR/line"
	keys='["ts","id","method","path","status","bytes","ms","remote","prompt_tokens","cached_tokens",
		"completion_tokens","finish","queue_ms","prefill_ms","decode_ms"]'
	[ "$(jq -c --argjson k "$keys" '$k - keys' "$BATS_TEST_TMPDIR/line")" = '[]' ]
	[ "$(jq -c '[.method, .path, .status, .finish, .aborted]' "$BATS_TEST_TMPDIR/line")" = \
		'["POST","/v1/chat/completions",200,"stop",false]' ]
	[ "$(jv '.completion_tokens > 0 and .prompt_tokens > 0' "$BATS_TEST_TMPDIR/line")" = true ]
	run ! grep -q zebra "$SERVER_LOG"
	run ! grep -q '"prompt"' "$SERVER_LOG"
	grep '"path":"/v1/chat/completions"' "$SERVER_LOG" | grep -q '"status":404'
}

@test "--log-prompts puts the rendered prompt into the log line: the chat template's rendering" {
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART" --log-prompts
	msgs='[{"role":"system","content":"Be brief."},{"role":"user","content":"zebra-7731 say hello"}]'
	api POST /v1/chat/completions "{\"messages\":$msgs}"
	[ "$CODE" = 200 ]
	log_line_for "$(header x-request-id)" >"$BATS_TEST_TMPDIR/line"
	jv '.prompt' "$BATS_TEST_TMPDIR/line" >"$BATS_TEST_TMPDIR/got"
	echo "{\"messages\":$msgs}" >"$BATS_TEST_TMPDIR/m.json"
	capy-gen --render "$ART" --messages "$BATS_TEST_TMPDIR/m.json" >"$BATS_TEST_TMPDIR/want"
	echo >>"$BATS_TEST_TMPDIR/want" # jq -r ends its output with a newline
	cmp "$BATS_TEST_TMPDIR/want" "$BATS_TEST_TMPDIR/got"
}

@test "/health reports the engine; /metrics counts requests by endpoint and status, tokens and cache hits" {
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART"
	api GET /health
	[ "$CODE" = 200 ]
	[ "$(cat "$R")" = '{"status":"ok","model":"fixture","active":0,"queued":0}' ]
	api HEAD /health
	[ "$CODE" = 200 ]
	prompt=0 gen=0
	for i in 1 2; do
		api POST /v1/chat/completions "$(chat_body 'say hello to the counters')"
		[ "$CODE" = 200 ]
		prompt=$((prompt + $(jv '.usage.prompt_tokens')))
		gen=$((gen + $(jv '.usage.completion_tokens')))
	done
	cached=$(jv '.usage.prompt_tokens_details.cached_tokens')
	[ "$cached" -gt 0 ]
	api POST /v1/chat/completions '{"messages": 3}'
	[ "$CODE" = 400 ]
	api POST /v1/messages '{"max_tokens":3,"messages":[{"role":"user","content":"say hello"}]}'
	[ "$CODE" = 200 ]
	prompt=$((prompt + $(jv '.usage.input_tokens')))
	gen=$((gen + $(jv '.usage.output_tokens')))
	api GET /v1/models/nope
	[ "$CODE" = 404 ]
	wait_for_log '"path":"/v1/models/nope"'
	api GET /metrics
	[ "$CODE" = 200 ]
	[[ "$(header Content-Type)" == "text/plain; version=0.0.4"* ]]
	m=$R
	grep -qx 'capy_requests_total{endpoint="/v1/chat/completions",status="200"} 2' "$m"
	grep -qx 'capy_requests_total{endpoint="/v1/chat/completions",status="400"} 1' "$m"
	grep -qx 'capy_requests_total{endpoint="/v1/messages",status="200"} 1' "$m"
	grep -qx 'capy_requests_total{endpoint="/v1/models/{id}",status="404"} 1' "$m"
	grep -qx 'capy_requests_total{endpoint="/health",status="200"} 2' "$m"
	grep -qx "capy_prompt_tokens_total $prompt" "$m"
	grep -qx "capy_generated_tokens_total $gen" "$m"
	grep -qx "capy_cached_prompt_tokens_total $cached" "$m"
	grep -qx 'capy_cache_hits_total 1' "$m"
	grep -qx 'capy_active_sequences 0' "$m"
	grep -qx 'capy_queue_depth 0' "$m"
	grep -qx 'capy_engine_failed 0' "$m"
	for name in capy_prefill_tokens_per_second capy_decode_tokens_per_second capy_cache_bytes \
		capy_cache_hit_ratio capy_kv_pages capy_kv_pages_held; do
		grep -q "^$name [0-9.e+-]*$" "$m" || { echo "no $name"; return 1; }
	done
	# the text format: HELP and TYPE before each family, then samples "name{labels} value"
	"$SERVE_PYTHON" - "$m" <<'PY'
import re, sys
seen = {}
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    m = re.match(r"# (HELP|TYPE) ([a-z_]+) (.+)$", line)
    if m:
        seen.setdefault(m.group(2), set()).add(m.group(1))
        continue
    m = re.match(r'([a-z_]+)(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? ([-+]?[0-9.]+([eE][-+]?[0-9]+)?|NaN|[-+]Inf)$', line)
    assert m, "not a sample line: %r" % line
    assert seen.get(m.group(1)) == {"HELP", "TYPE"}, "no HELP/TYPE before %s" % m.group(1)
PY
}

# metric NAME FILE: the value of the sample NAME (no labels) in a /metrics body.
metric() {
	sed -n "s/^$1 //p" "$2"
}

@test "/metrics of an engine that offloads experts: slots, resident, hits, misses, streamed, loads, evictions, CPU threads, policy switches; none without offload" {
	# The scripted backend's counts (t/serve/scripts/offload.json), each step adding a hit.
	CAPY_SCRIPT=$SCRIPTS/offload.json serve_start capy-serve-scripted "$ART"
	api GET /metrics
	[ "$CODE" = 200 ]
	m=$BATS_TEST_TMPDIR/start
	cp "$R" "$m"
	# Before any step, from the start: the counts as the engine gives them.
	[ "$(metric capy_engine_steps_total "$m")" = 0 ]
	for nv in "slots gauge 12" "resident gauge 11" "hits_total counter 1000" "misses_total counter 250" \
		"streamed_total counter 77" "loads_total counter 31" "evictions_total counter 19" "cpu_threads gauge 6" \
		"policy_switches_total counter 2"; do
		read -r n type v <<<"$nv"
		grep -qx "# TYPE capy_expert_$n $type" "$m" || { echo "no TYPE line for capy_expert_$n $type"; return 1; }
		grep -q "^# HELP capy_expert_$n [A-Z]" "$m" || { echo "no HELP line for capy_expert_$n"; return 1; }
		[ "$(metric "capy_expert_$n" "$m")" = "$v" ] || { echo "capy_expert_$n: $(metric "capy_expert_$n" "$m"), not $v"; return 1; }
	done
	api POST /v1/chat/completions "$(chat_body 'count the steps')"
	[ "$CODE" = 200 ]
	[ "$(jv '.choices[0].message.content')" = Counted. ]
	# Read again after the steps (the engine thread copies them after each step: wait for the last).
	for ((i = 0; i < 50; i++)); do
		api GET /metrics
		steps=$(metric capy_engine_steps_total "$R")
		[ "$steps" -gt 0 ] && [ "$(metric capy_expert_hits_total "$R")" = $((1000 + steps)) ] && break
		sleep 0.1
	done
	[ "$steps" -gt 1 ]
	[ "$(metric capy_expert_hits_total "$R")" = $((1000 + steps)) ]
	[ "$(metric capy_expert_misses_total "$R")" = 250 ]
	serve_stop
	# Engines that do not offload have none of them: the CPU backend, the script without counts.
	serve_start capy-serve "$ART" --threads 1
	api GET /metrics
	[ "$CODE" = 200 ]
	grep -q '^capy_engine_steps_total ' "$R"
	run ! grep -q 'capy_expert_' "$R"
	serve_stop
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART"
	api GET /metrics
	[ "$CODE" = 200 ]
	run ! grep -q 'capy_expert_' "$R"
}

@test "an engine-wide failure: the requests get an error, /health answers 503, the server exits 2" {
	CAPY_SCRIPT=$SCRIPTS/fail.json serve_start capy-serve-scripted "$ART" --shutdown-timeout 2
	api POST /v1/chat/completions "$(chat_body 'are you well')"
	[ "$CODE" = 200 ]
	# watch /health from before the failure until the server goes away
	"$SERVE_PYTHON" "$SERVE_CHECK" healthwatch "$PORT" 10 >"$BATS_TEST_TMPDIR/health" &
	hpid=$!
	for ((i = 0; i < 50; i++)); do
		[ -s "$BATS_TEST_TMPDIR/health" ] && break
		sleep 0.1
	done
	R=$BATS_TEST_TMPDIR/stream
	curl -sS -N --max-time 10 -o "$R" "http://127.0.0.1:$PORT/v1/chat/completions" \
		-d "$(chat_body 'please break the engine' '"stream":true')"
	sse chat "$R"
	[ "$(jv '.error.type' "$R.sum")" = server_error ]
	[[ "$(jv '.error.message' "$R.sum")" == *"simulated device failure"* ]]
	[ "$(jv '.finish' "$R.sum")" = null ]
	t0=$(now)
	for ((i = 0; i < 50; i++)); do
		kill -0 "$SERVER_PID" 2>/dev/null || break
		sleep 0.1
	done
	SERVER_RC=0
	wait "$SERVER_PID" || SERVER_RC=$?
	[ "$SERVER_RC" -eq 2 ]
	elapsed_below "$t0" 5
	timeout 12 tail --pid="$hpid" -f /dev/null
	[[ "$(tr '\n' ' ' <"$BATS_TEST_TMPDIR/health")" =~ ^"200 503 "("none ")?"refused "$ ]]
	grep -q 'capy-serve-scripted: error: the engine failed: simulated device failure' "$SERVER_LOG"
	grep -q 'capy-serve-scripted: error: the engine failed; stopping (exit 2)' "$SERVER_LOG"
}
