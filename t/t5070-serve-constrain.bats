#!/usr/bin/env bats
# Structured output in capy-serve (issue 11): response_format / text.format /
# output_config.format and forced tool calls (tool_choice required / named, Anthropic any /
# tool) held to grammars, on the random-weight fixture, where the grammar does all the work:
# every answer that completes is validated with python3-jsonschema (t/helper/schema-validate.py)
# against its schema (a response format's, or the called tool's from the captured real tool
# definitions in t/fixtures/schemas), through the OpenAI chat, Responses and Anthropic APIs,
# over seeds and temperatures; the fixture's hermes template and the Qwen3.5 XML template
# (t/fixtures' template writes JSON calls, share/chat_templates/qwen3_5.jinja XML ones). Random
# models write long strings, so an answer may hit max_tokens (finish length: not validated);
# most must complete. Bad schemas are refused with 400 in each API's shape and the servers
# live on; tool_choice auto stays unconstrained.

load lib
load helper/serve

VALIDATE=$SRC/t/helper/schema-validate.py
# the captured tools make prompts of thousands of tokens: room for a sanitizer build
if [ "${CAPY_SAN:-0}" = 1 ]; then API_TIME=120; else API_TIME=30; fi

# seeds N: the seeds of a loop, 1..N; two under the sanitizers (masked sampling there is slow
# enough that the full loops took most of CI's time; the checks are ratios and validity).
seeds() {
	if [ "${CAPY_SAN:-0}" = 1 ] && [ "$1" -gt 2 ]; then seq 2; else seq "$1"; fi
}
SCH=$SRC/t/fixtures/schemas
# captured tool definitions: OpenCode's, Claude Code's and Codex's (name = the file's tool name)
TOOL_FILES="tool-opencode-bash tool-opencode-read tool-opencode-glob tool-claude-Read tool-codex-view_image"

setup_file() {
	serve_fixture
	serve_start capy-serve "$ART" --threads 1 --cache-mib 0
	export HPORT=$PORT HLOG=$SERVER_LOG
	serve_start capy-serve "$ART" --threads 1 --cache-mib 0 --chat-template "$SRC/share/chat_templates/qwen3_5.jinja"
	export XPORT=$PORT XLOG=$SERVER_LOG
	# the tools as each API takes them, and name -> schema file
	local f name chat=() resp=() ant=()
	: >"$BATS_FILE_TMPDIR/toolmap"
	for f in $TOOL_FILES; do
		name=${f##*-}
		echo "$name $SCH/$f.json" >>"$BATS_FILE_TMPDIR/toolmap"
		chat+=("$(jq -c --arg n "$name" '{type: "function", function: {name: $n, description: "a tool", parameters: .}}' "$SCH/$f.json")")
		resp+=("$(jq -c --arg n "$name" '{type: "function", name: $n, description: "a tool", parameters: .}' "$SCH/$f.json")")
		ant+=("$(jq -c --arg n "$name" '{name: $n, description: "a tool", input_schema: .}' "$SCH/$f.json")")
	done
	(IFS=,; echo "[${chat[*]}]") >"$BATS_FILE_TMPDIR/chat-tools.json"
	(IFS=,; echo "[${resp[*]}]") >"$BATS_FILE_TMPDIR/resp-tools.json"
	(IFS=,; echo "[${ant[*]}]") >"$BATS_FILE_TMPDIR/ant-tools.json"
}

teardown_file() {
	serve_kill_all "$BATS_FILE_TMPDIR"
}

setup() {
	PORT=$HPORT SERVER_LOG=$HLOG
	DOCS=$BATS_TEST_TMPDIR/docs
	TOOLMAP=$BATS_FILE_TMPDIR/toolmap
	mkdir -p "$DOCS"
	COMPLETE=0 TOTAL=0
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
	PORT=$HPORT
	health_ok
	PORT=$XPORT
	health_ok
}

# keep FILE TEXT: TEXT as one document of FILE (NUL-terminated, as schema-validate.py reads).
keep() {
	printf '%s\0' "$2" >>"$1"
}

# validate_all: every DOCS/<name>.docs against its schema (DOCS/<name>.schema), one Python.
validate_all() {
	local args=() f n
	for f in "$DOCS"/*.docs; do
		[ -e "$f" ] || continue
		n=${f%.docs}
		args+=("$(cat "$n.schema"):$f")
	done
	[ ${#args[@]} -gt 0 ]
	run python3 "$VALIDATE" "${args[@]}"
	echo "$output"
	[ "$status" -eq 0 ]
}

# most_complete: at least 2 in 3 of the answers completed (Anthropic's API has no seed: its
# answers differ from run to run).
most_complete() {
	echo "$COMPLETE of $TOTAL complete" >&3
	[ "$TOTAL" -gt 0 ]
	[ $((COMPLETE * 3)) -ge $((TOTAL * 2)) ]
}

# ask_json PATH BODY DONE_FILTER DONE_VALUE TEXT_FILTER FILE: one request; the text of an
# answer that completed (DONE_FILTER gives DONE_VALUE) kept in FILE for validation, one cut by
# the limit counted only.
ask_json() {
	api POST "$1" "$2"
	[ "$CODE" = 200 ]
	TOTAL=$((TOTAL + 1))
	[ "$(jv "$3")" = "$4" ] || return 0
	COMPLETE=$((COMPLETE + 1))
	keep "$6" "$(jv "$5")"
}

# A JSON schema file of our own, small and bounded (random models write long strings).
own_schemas() {
	cat >"$BATS_TEST_TMPDIR/s-enum.json" <<'EOF'
{"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "n": {"type": "integer", "minimum": -5, "maximum": 5}, "ok": {"type": "boolean"}}, "required": ["color", "n", "ok"], "additionalProperties": false}
EOF
	cat >"$BATS_TEST_TMPDIR/s-short.json" <<'EOF'
{"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}, "score": {"type": "number", "minimum": 0, "maximum": 1}}, "required": ["name", "tags"], "additionalProperties": false}
EOF
	cat >"$BATS_TEST_TMPDIR/s-array.json" <<'EOF'
{"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 1, "maxItems": 5}
EOF
	echo "$BATS_TEST_TMPDIR/s-enum.json $BATS_TEST_TMPDIR/s-short.json $BATS_TEST_TMPDIR/s-array.json $SCH/own-discriminated.json $SCH/tool-sdk-get_weather.json $SCH/own-formats.json"
}

@test "response_format json_schema (chat), text.format (Responses), output_config.format (messages): every completed answer validates" {
	local s k seed temp body
	for s in $(own_schemas); do
		k=$(basename "$s" .json)
		echo "$s" >"$DOCS/$k.schema"
		for seed in $(seeds 3); do
			for temp in 0.7 1.0; do
				body=$(jq -nc --slurpfile sc "$s" --argjson seed "$seed" --argjson t "$temp" \
					'{messages: [{role: "user", content: "answer in JSON"}], max_tokens: 300, seed: $seed, temperature: $t,
					  response_format: {type: "json_schema", json_schema: {name: "out", strict: true, schema: $sc[0]}}}')
				ask_json /v1/chat/completions "$body" '.choices[0].finish_reason' stop '.choices[0].message.content' \
					"$DOCS/$k.docs"
			done
			# the Responses API's text.format
			body=$(jq -nc --slurpfile sc "$s" --argjson seed "$seed" \
				'{input: "answer in JSON", max_output_tokens: 300, seed: $seed,
				  text: {format: {type: "json_schema", name: "out", strict: true, schema: $sc[0]}}}')
			ask_json /v1/responses "$body" .status completed \
				'[.output[] | select(.type == "message") | .content[] | .text] | join("")' "$DOCS/$k.docs"
			# Anthropic's output_config.format
			body=$(jq -nc --slurpfile sc "$s" \
				'{model: "claude-sonnet-4-5", max_tokens: 300, messages: [{role: "user", content: "answer in JSON"}],
				  output_config: {format: {type: "json_schema", schema: $sc[0]}}}')
			ask_json /v1/messages "$body" .stop_reason end_turn \
				'[.content[] | select(.type == "text") | .text] | join("")' "$DOCS/$k.docs"
		done
	done
	most_complete
	validate_all
	# finished by the grammar: the log says so
	[ "$(grep -c '"finish":"grammar"' "$HLOG")" -ge 1 ]
}

@test "response_format json_object: any JSON object, streamed or not" {
	local seed content
	for seed in $(seeds 6); do
		api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"json please\"}],\"max_tokens\":2000,\"seed\":$seed,\"response_format\":{\"type\":\"json_object\"}}"
		[ "$CODE" = 200 ]
		TOTAL=$((TOTAL + 1))
		content=$(jv '.choices[0].message.content')
		[[ "$content" == '{'* ]]
		if [ "$(jv '.choices[0].finish_reason')" = stop ]; then
			COMPLETE=$((COMPLETE + 1))
			python3 -c 'import json, sys; d = json.loads(sys.argv[1]); assert isinstance(d, dict)' "$content"
		fi
	done
	# json_object on a random model: objects nest and strings run long, hence the room
	most_complete
	api POST /v1/chat/completions '{"messages":[{"role":"user","content":"json please"}],"max_tokens":64,"seed":1,"stream":true,"response_format":{"type":"json_object"}}'
	sse chat
	[[ "$(jv .content "$R.sum")" == '{'* ]]
}

# tool_call_ok API NAMED: the last answer ($R) is one call of a known tool (NAMED when given),
# kept with its arguments for validation; or it hit max_tokens.
tool_call_ok() {
	local api=$1 named=$2 name args fin schema
	case $api in
	chat)
		fin=$(jv '.choices[0].finish_reason')
		[ "$fin" = length ] && return 0
		[ "$fin" = tool_calls ]
		[ "$(jv '.choices[0].message.tool_calls | length')" = 1 ]
		name=$(jv '.choices[0].message.tool_calls[0].function.name')
		args=$(jv '.choices[0].message.tool_calls[0].function.arguments')
		;;
	responses)
		[ "$(jv .status)" = incomplete ] && return 0
		[ "$(jv .status)" = completed ]
		[ "$(jv '[.output[] | select(.type == "function_call")] | length')" = 1 ]
		name=$(jv '.output[] | select(.type == "function_call") | .name')
		args=$(jv '.output[] | select(.type == "function_call") | .arguments')
		;;
	messages)
		fin=$(jv .stop_reason)
		[ "$fin" = max_tokens ] && return 0
		[ "$fin" = tool_use ]
		[ "$(jv '[.content[] | select(.type == "tool_use")] | length')" = 1 ]
		name=$(jv '.content[] | select(.type == "tool_use") | .name')
		args=$(jq -c '.content[] | select(.type == "tool_use") | .input' "$R")
		;;
	esac
	schema=$(awk -v n="$name" '$1 == n { print $2 }' "$TOOLMAP")
	[ -n "$schema" ] || { echo "called an unknown tool '$name'"; return 1; }
	[ -z "$named" ] || [ "$name" = "$named" ] || { echo "called $name, not $named"; return 1; }
	echo "$schema" >"$DOCS/$name.schema"
	keep "$DOCS/$name.docs" "$args"
	COMPLETE=$((COMPLETE + 1))
}

@test "tool_choice required and named with captured tools: chat, Responses and messages calls validate against the tool's schema (JSON calls)" {
	local seed temp i=0 names=(bash read glob Read view_image) named choice body
	for seed in $(seeds 5); do
		for temp in 0.6 1.0; do
			named=${names[$((i % 5))]}
			i=$((i + 1))
			for choice in required named; do
				local oc='"required"' rc='"required"' ac='{"type":"any","disable_parallel_tool_use":true}' want=""
				if [ $choice = named ]; then
					oc="{\"type\":\"function\",\"function\":{\"name\":\"$named\"}}"
					rc="{\"type\":\"function\",\"name\":\"$named\"}"
					ac="{\"type\":\"tool\",\"name\":\"$named\",\"disable_parallel_tool_use\":true}"
					want=$named
				fi
				body="{\"messages\":[{\"role\":\"user\",\"content\":\"use a tool\"}],\"max_tokens\":800,\"seed\":$seed,\"temperature\":$temp,\"parallel_tool_calls\":false,\"tools\":$(cat "$BATS_FILE_TMPDIR/chat-tools.json"),\"tool_choice\":$oc}"
				api POST /v1/chat/completions "$body"
				[ "$CODE" = 200 ]
				TOTAL=$((TOTAL + 1))
				tool_call_ok chat "$want"
				body="{\"input\":\"use a tool\",\"max_output_tokens\":800,\"seed\":$seed,\"temperature\":$temp,\"parallel_tool_calls\":false,\"tools\":$(cat "$BATS_FILE_TMPDIR/resp-tools.json"),\"tool_choice\":$rc}"
				api POST /v1/responses "$body"
				[ "$CODE" = 200 ]
				TOTAL=$((TOTAL + 1))
				tool_call_ok responses "$want"
				body="{\"model\":\"claude-sonnet-4-5\",\"max_tokens\":800,\"temperature\":$temp,\"messages\":[{\"role\":\"user\",\"content\":\"use a tool\"}],\"tools\":$(cat "$BATS_FILE_TMPDIR/ant-tools.json"),\"tool_choice\":$ac}"
				api POST /v1/messages "$body"
				[ "$CODE" = 200 ]
				TOTAL=$((TOTAL + 1))
				tool_call_ok messages "$want"
			done
		done
	done
	most_complete
	validate_all
}

@test "tool_choice required and named with the XML template: calls in <function=...> syntax validate (bounded parameters; raw string values held to pattern, format, enum and lengths), streamed too" {
	PORT=$XPORT SERVER_LOG=$XLOG
	cat >"$BATS_TEST_TMPDIR/x-set.json" <<'EOF'
{"type": "object", "properties": {"mode": {"type": "string", "enum": ["fast", "slow"]}, "level": {"type": "integer", "minimum": 0, "maximum": 3}, "label": {"type": "string", "maxLength": 6}, "flags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}, "dry": {"type": "boolean"}}, "required": ["mode", "level"]}
EOF
	cat >"$BATS_TEST_TMPDIR/x-pick.json" <<'EOF'
{"type": "object", "properties": {"id": {"type": "integer", "minimum": 1, "maximum": 9}, "opt": {"anyOf": [{"type": "integer"}, {"type": "null"}]}}, "required": ["id"]}
EOF
	# string parameters whose keywords the raw XML value must hold
	cat >"$BATS_TEST_TMPDIR/x-book.json" <<'EOF'
{"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{2}$"}, "day": {"type": "string", "format": "date"}, "id": {"type": "string", "format": "uuid"}, "kind": {"type": "string", "enum": ["a<b>", "x y"]}, "note": {"type": "string", "minLength": 1, "maxLength": 5}}, "required": ["code", "day", "kind", "note"]}
EOF
	TOOLMAP=$BATS_TEST_TMPDIR/toolmap
	printf 'set %s\npick %s\nbook %s\n' "$BATS_TEST_TMPDIR/x-set.json" "$BATS_TEST_TMPDIR/x-pick.json" \
		"$BATS_TEST_TMPDIR/x-book.json" >"$TOOLMAP"
	local tools seed temp named choice
	tools=$(jq -nc --slurpfile a "$BATS_TEST_TMPDIR/x-set.json" --slurpfile b "$BATS_TEST_TMPDIR/x-pick.json" \
		--slurpfile c "$BATS_TEST_TMPDIR/x-book.json" \
		'[{type: "function", function: {name: "set", parameters: $a[0]}}, {type: "function", function: {name: "pick", parameters: $b[0]}}, {type: "function", function: {name: "book", parameters: $c[0]}}]')
	for seed in $(seeds 6); do
		for temp in 0.6 1.0; do
			for choice in required set pick book; do
				local oc='"required"' want=""
				[ $choice = required ] || { oc="{\"type\":\"function\",\"function\":{\"name\":\"$choice\"}}"; want=$choice; }
				api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"use a tool\"}],\"max_tokens\":300,\"seed\":$seed,\"temperature\":$temp,\"parallel_tool_calls\":false,\"chat_template_kwargs\":{\"enable_thinking\":false},\"tools\":$tools,\"tool_choice\":$oc}"
				[ "$CODE" = 200 ]
				TOTAL=$((TOTAL + 1))
				tool_call_ok chat "$want"
			done
		done
	done
	most_complete
	validate_all
	# streamed: the call's argument deltas add up to the same kind of call
	api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"use a tool\"}],\"max_tokens\":300,\"seed\":2,\"stream\":true,\"parallel_tool_calls\":false,\"chat_template_kwargs\":{\"enable_thinking\":false},\"tools\":$tools,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"pick\"}}}"
	sse chat
	[ "$(jv .finish "$R.sum")" = tool_calls ]
	[ "$(jv '.tool_calls[0].name' "$R.sum")" = pick ]
	jv '.tool_calls[0].arguments' "$R.sum" | python3 -c 'import json, sys; a = json.load(sys.stdin); assert 1 <= a["id"] <= 9, a'
}

@test "token masks computed during the steps (--mask-threads 2, the default) give the answers computed after them give (--mask-threads 0); /metrics and the log count and time them" {
	local s=$SCH/own-discriminated.json seed body a b
	serve_start capy-serve "$ART" --threads 1 --cache-mib 0 --mask-threads 0
	local SPORT=$PORT SLOG=$SERVER_LOG
	for seed in $(seeds 3); do
		body=$(jq -nc --slurpfile sc "$s" --argjson seed "$seed" \
			'{messages: [{role: "user", content: "answer in JSON"}], max_tokens: 200, seed: $seed, temperature: 1.0,
			  response_format: {type: "json_schema", json_schema: {name: "out", strict: true, schema: $sc[0]}}}')
		PORT=$HPORT api POST /v1/chat/completions "$body"
		[ "$CODE" = 200 ]
		a=$(jq -c '.choices[0] | [.message.content, .finish_reason]' "$R")
		PORT=$SPORT api POST /v1/chat/completions "$body"
		[ "$CODE" = 200 ]
		b=$(jq -c '.choices[0] | [.message.content, .finish_reason]' "$R")
		[ "$a" = "$b" ] || { echo "ahead: $a"; echo "after: $b"; false; }
	done
	PORT=$HPORT api GET /metrics
	[ "$CODE" = 200 ]
	[ "$(awk '$1 == "capy_token_masks_total" { print ($2 > 0) }' "$R")" = 1 ]
	grep -q '^capy_token_mask_wait_seconds_total ' "$R"
	grep -q '"mask_us":[0-9]*,"mask_wait_us":[0-9]*,"mask_wait_max_us":[0-9]*' "$HLOG"
	grep -q '"mask_wait_us"' "$SLOG"
}

@test "tool_choice allowed_tools (Responses and chat): required calls only listed tools, auto answers freely or calls a listed one; bad lists get 400" {
	local seed temp body n_auto_calls=0
	# required: Responses' flat form, two of the five tools; every call one of them, valid
	TOOLMAP=$BATS_TEST_TMPDIR/toolmap
	grep -E '^(bash|glob|Read) ' "$BATS_FILE_TMPDIR/toolmap" >"$TOOLMAP"
	for seed in $(seeds 4); do
		for temp in 0.6 1.0; do
			body="{\"input\":\"use a tool\",\"max_output_tokens\":800,\"seed\":$seed,\"temperature\":$temp,\"parallel_tool_calls\":false,\"tools\":$(cat "$BATS_FILE_TMPDIR/resp-tools.json"),\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"required\",\"tools\":[{\"type\":\"function\",\"name\":\"bash\"},{\"type\":\"function\",\"name\":\"glob\"},{\"type\":\"web_search\"}]}}"
			api POST /v1/responses "$body"
			[ "$CODE" = 200 ]
			TOTAL=$((TOTAL + 1))
			tool_call_ok responses
			[ "$(jv .status)" = incomplete ] || [[ "$(jv '.output[] | select(.type == "function_call") | .name')" =~ ^(bash|glob)$ ]]
			# chat's nested form, one tool
			body="{\"messages\":[{\"role\":\"user\",\"content\":\"use a tool\"}],\"max_tokens\":800,\"seed\":$seed,\"temperature\":$temp,\"parallel_tool_calls\":false,\"tools\":$(cat "$BATS_FILE_TMPDIR/chat-tools.json"),\"tool_choice\":{\"type\":\"allowed_tools\",\"allowed_tools\":{\"mode\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"Read\"}}]}}}"
			api POST /v1/chat/completions "$body"
			[ "$CODE" = 200 ]
			TOTAL=$((TOTAL + 1))
			tool_call_ok chat Read
		done
	done
	most_complete
	validate_all
	# auto: a free answer or a call of glob only, and the answer was held by a grammar
	for seed in $(seeds 6); do
		body="{\"input\":\"list the files\",\"max_output_tokens\":120,\"seed\":$seed,\"temperature\":1.0,\"tools\":$(cat "$BATS_FILE_TMPDIR/resp-tools.json"),\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"auto\",\"tools\":[{\"type\":\"function\",\"name\":\"glob\"}]}}"
		api POST /v1/responses "$body"
		[ "$CODE" = 200 ]
		[ "$(jv '[.output[] | select(.type == "function_call") | .name | select(. != "glob")] | length')" = 0 ]
		n_auto_calls=$((n_auto_calls + $(jv '[.output[] | select(.type == "function_call")] | length')))
	done
	echo "auto: $n_auto_calls calls of glob" >&3
	[ "$(grep -c '"path":"/v1/responses".*"mask_us"' "$HLOG")" -ge 6 ]
	# bad lists: 400 in the API's shape, naming the place
	local tools
	tools=$(cat "$BATS_FILE_TMPDIR/resp-tools.json")
	api POST /v1/responses "{\"input\":\"x\",\"tools\":$tools,\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"maybe\",\"tools\":[{\"type\":\"function\",\"name\":\"glob\"}]}}"
	[ "$CODE" = 400 ]
	[ "$(jq -r '[.error.type, .error.param, .error.message] | join("|")' "$R")" = "invalid_request_error|tool_choice.mode|tool_choice.mode must be auto or required, not 'maybe'" ]
	api POST /v1/responses "{\"input\":\"x\",\"tools\":$tools,\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"auto\",\"tools\":[]}}"
	[ "$CODE" = 400 ]
	[ "$(jv .error.param)" = tool_choice.tools ]
	api POST /v1/responses "{\"input\":\"x\",\"tools\":$tools,\"tool_choice\":{\"type\":\"allowed_tools\",\"mode\":\"required\",\"tools\":[{\"type\":\"function\",\"name\":\"glob\"},{\"type\":\"function\",\"name\":\"nope\"}]}}"
	[ "$CODE" = 400 ]
	[ "$(jq -r '[.error.param, .error.message] | join("|")' "$R")" = "tool_choice.tools[1]|tool_choice.tools[1] names 'nope', which is not among the tools" ]
	api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":$(cat "$BATS_FILE_TMPDIR/chat-tools.json"),\"tool_choice\":{\"type\":\"allowed_tools\",\"allowed_tools\":{\"mode\":\"required\"}}}"
	[ "$CODE" = 400 ]
	[ "$(jq -r '[.error.type, .error.param] | join(" ")' "$R")" = "invalid_request_error tool_choice.allowed_tools.tools" ]
}

@test "bad schemas are refused with 400 in each API's shape, naming the place; the server serves on" {
	local bad='{"type":"object","properties":{"a":{"type":"integer","not":{"const":1}}}}'
	local malformed='{"type":"object","properties":{"a":{"type":"integer","minimum":"x"}}}'
	# chat: strict refuses what it cannot hold; relaxed ignores it, but never a malformed schema
	api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"o\",\"strict\":true,\"schema\":$bad}}}"
	[ "$CODE" = 400 ]
	[ "$(jq -r '[.error.type, .error.param] | join(" ")' "$R")" = "invalid_request_error response_format.json_schema.schema" ]
	[[ "$(jv .error.message)" == *"/properties/a/not"* ]]
	api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":8,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"o\",\"schema\":$bad}}}"
	[ "$CODE" = 200 ]
	api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"o\",\"schema\":$malformed}}}"
	[ "$CODE" = 400 ]
	[[ "$(jv .error.message)" == *"/properties/a"* ]]
	# a strict tool, forced
	api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,\"parameters\":$bad}}],\"tool_choice\":\"required\"}"
	[ "$CODE" = 400 ]
	[ "$(jq -r '[.error.type, .error.param] | join(" ")' "$R")" = "invalid_request_error tools" ]
	[[ "$(jv .error.message)" == *"tool 'f': schema: /properties/a/not"* ]]
	# Responses
	api POST /v1/responses "{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"o\",\"strict\":true,\"schema\":$bad}}}"
	[ "$CODE" = 400 ]
	[ "$(jq -r '[.error.type, .error.param] | join(" ")' "$R")" = "invalid_request_error text.format.schema" ]
	api POST /v1/responses "{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"strict\":true,\"parameters\":$bad}],\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}}"
	[ "$CODE" = 400 ]
	[[ "$(jv .error.message)" == *"/properties/a/not"* ]]
	# Anthropic: output formats are always strict; so is a strict tool
	api POST /v1/messages "{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"output_config\":{\"format\":{\"type\":\"json_schema\",\"schema\":$bad}}}"
	[ "$CODE" = 400 ]
	[ "$(jq -r '[.type, .error.type] | join(" ")' "$R")" = "error invalid_request_error" ]
	[[ "$(jv .error.message)" == *"output_config.format.schema"*"/properties/a/not"* ]]
	api POST /v1/messages "{\"model\":\"m\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"name\":\"f\",\"strict\":true,\"input_schema\":$bad}],\"tool_choice\":{\"type\":\"any\"}}"
	[ "$CODE" = 400 ]
	[ "$(jq -r '[.type, .error.type] | join(" ")' "$R")" = "error invalid_request_error" ]
	# a name the XML syntax cannot write
	PORT=$XPORT
	api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a=b\",\"parameters\":{\"type\":\"object\"}}}],\"tool_choice\":\"required\"}"
	[ "$CODE" = 400 ]
	[[ "$(jv .error.message)" == *"tool 'a=b': the name cannot be written"* ]]
}

@test "tool_choice auto and no response_format stay unconstrained: nothing forced, no grammar end" {
	local before
	before=$(grep -c '"finish":"grammar"' "$HLOG" || true)
	for seed in $(seeds 3); do
		api POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"use a tool\"}],\"max_tokens\":40,\"seed\":$seed,\"tools\":$(cat "$BATS_FILE_TMPDIR/chat-tools.json"),\"tool_choice\":\"auto\"}"
		[ "$CODE" = 200 ]
		[ "$(jv '.choices[0].message.tool_calls')" = null ]
	done
	[ "$(grep -c '"finish":"grammar"' "$HLOG" || true)" = "$before" ]
}
