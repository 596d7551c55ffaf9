#!/usr/bin/env bats
# capy-serve's API through curl: every endpoint and option of /v1/chat/completions,
# /v1/completions, /v1/responses, /v1/messages (and count_tokens), /v1/models, against the
# scripted engine (exact replies, t/serve/scripts/) and the real fixture model (sampling,
# logprobs); the errors and limits, each in the API's own shape, the server answering
# /health after each. Loopback only; every wait bounded.

load lib
load helper/serve

TOOLS='[{"type":"function","function":{"name":"get_weather","description":"The weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string"}},"required":["city"]}}},{"type":"function","function":{"name":"get_time","description":"The time in a zone","parameters":{"type":"object","properties":{"zone":{"type":"string"}}}}}]'
RTOOLS='[{"type":"function","name":"get_weather","description":"The weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}]'
ATOOLS='[{"name":"get_weather","description":"The weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]},"cache_control":{"type":"ephemeral"}}]'

setup_file() {
	serve_fixture
	# the scripted engine: exact replies through the real parsing path
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART" --log-prompts --max-context 2048 \
		--max-body 256K --max-messages 40 --max-tools 6
	export SPORT=$PORT SLOG=$SERVER_LOG
	# the real engine on the fixture; no prefix cache, so that equal requests give equal bits
	serve_start capy-serve "$ART" --threads 1 --cache-mib 0
	export RPORT=$PORT RLOG=$SERVER_LOG
}

teardown_file() {
	serve_kill_all "$BATS_FILE_TMPDIR"
}

setup() {
	PORT=$SPORT SERVER_LOG=$SLOG
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
	PORT=$SPORT SERVER_LOG=$SLOG
	health_ok
	PORT=$RPORT SERVER_LOG=$RLOG
	health_ok
}

use_real() {
	PORT=$RPORT SERVER_LOG=$RLOG
}

# PROMPT: the rendered prompt of the last request, from its log line (the server runs with
# --log-prompts); kept exactly, trailing newlines included.
logged_prompt() {
	PROMPT=$(log_line_for "$(header x-request-id)" | jq -j .prompt && printf .)
	PROMPT=${PROMPT%.}
}

# msgs JSON [EXTRA FIELDS]: a chat request of those messages.
msgs() {
	printf '{"messages":%s%s}' "$1" "${2:+,$2}"
}

# anth TEXT [EXTRA FIELDS]: an Anthropic request of one user message.
anth() {
	printf '{"model":"claude-sonnet-4-5","max_tokens":256,"messages":[{"role":"user","content":"%s"}]%s}' "$1" "${2:+,$2}"
}

# The error of the last answer: "STATUS TYPE CODE PARAM" (OpenAI shape).
oai_error() {
	echo "$CODE $(jq -r '[.error.type, .error.code, .error.param] | map(tostring) | join(" ")' "$R")"
}

# ... and in Anthropic's shape: "STATUS TYPE" (and the body's type must be "error").
anth_error() {
	[ "$(jv .type)" = error ] || { echo "not an Anthropic error body: $(cat "$R")" >&2; return 1; }
	echo "$CODE $(jv .error.type)"
}

# --- chat completions ------------------------------------------------------------------------

@test "chat: an answer with its id, object, model, finish_reason and usage" {
	# with the fields agents and SDKs send besides
	api POST /v1/chat/completions "$(chat_body 'say hello' '"model":"fixture","user":"u1","store":false,"metadata":{"a":"b"},"service_tier":"auto","prompt_cache_key":"k","parallel_tool_calls":false,"logit_bias":{"1":2},"stream_options":null')"
	[ "$CODE" = 200 ]
	[[ "$(header Content-Type)" == application/json* ]]
	[ "$(jv .object)" = chat.completion ]
	[[ "$(jv .id)" == chatcmpl-* ]]
	[ "$(jv .model)" = fixture ]
	[ "$(jq -c '.choices[0].message' "$R")" = '{"role":"assistant","content":"Hello from capy."}' ]
	[ "$(jv .choices[0].finish_reason)" = stop ]
	[ "$(jv '.usage.total_tokens == .usage.prompt_tokens + .usage.completion_tokens')" = true ]
	[ "$(jv '.usage.completion_tokens')" -gt 3 ]
	[ "$(jv '.usage.completion_tokens_details.reasoning_tokens')" = 0 ]
	[ "$(jv '.usage.prompt_tokens_details.cached_tokens')" -ge 0 ]
	logged_prompt
	[ "$PROMPT" = $'<|im_start|>user\nsay hello<|im_end|>\n<|im_start|>assistant\n' ]
}

@test "chat streaming: the body decides, not the Accept header; role first, text in deltas, finish, [DONE]" {
	api POST /v1/chat/completions "$(chat_body 'say hello' '"stream":true')" -H 'Accept: application/json'
	[ "$CODE" = 200 ]
	[[ "$(header Content-Type)" == text/event-stream* ]]
	sse chat
	[ "$(jq -c '[.role, .content, .finish, .usage]' "$R.sum")" = '["assistant","Hello from capy.","stop",null]' ]
	[ "$(jv .content_deltas "$R.sum")" -gt 1 ]
	[[ "$(jv .ids[0] "$R.sum")" == chatcmpl-* ]]
	api POST /v1/chat/completions "$(chat_body 'say hello' '"stream":false')" -H 'Accept: text/event-stream'
	[ "$CODE" = 200 ]
	[[ "$(header Content-Type)" == application/json* ]]
	[ "$(jv .choices[0].message.content)" = "Hello from capy." ]
}

@test "chat stream_options.include_usage: a last chunk with usage; a repeated prompt shows cached tokens" {
	body=$(chat_body 'say hello, cache me' '"stream":true,"stream_options":{"include_usage":true}')
	api POST /v1/chat/completions "$body"
	sse chat
	first=$(jq -c .usage "$R.sum")
	[ "$(jq '.usage.total_tokens == .usage.prompt_tokens + .usage.completion_tokens' "$R.sum")" = true ]
	# the usage chunk has no choices
	[ "$(grep -c '"choices":\[\],"usage"' "$R")" -eq 1 ]
	api POST /v1/chat/completions "$body"
	sse chat
	[ "$(jv .usage.prompt_tokens "$R.sum")" = "$(jq .prompt_tokens <<<"$first")" ]
	[ "$(jv .usage.prompt_tokens_details.cached_tokens "$R.sum")" -gt 0 ]
	[ "$(jv '.usage.prompt_tokens_details.cached_tokens < .usage.prompt_tokens' "$R.sum")" = true ]
	api POST /v1/chat/completions "$(chat_body 'say hello, cache me' '"stream":true')"
	sse chat
	[ "$(jv .usage "$R.sum")" = null ]
	run ! grep -q '"usage"' "$R"
}

@test "chat reasoning: reasoning_content in the message and the deltas; a history's reasoning_content is rendered" {
	api POST /v1/chat/completions "$(chat_body 'think first')"
	[ "$(jq -c '.choices[0].message | [.content, .reasoning_content]' "$R")" = '["The answer is 42.","Let me think about it."]' ]
	[ "$(jv '.usage | .completion_tokens_details.reasoning_tokens > 0 and .completion_tokens_details.reasoning_tokens < .completion_tokens')" = true ]
	api POST /v1/chat/completions "$(chat_body 'think first' '"stream":true')"
	sse chat
	[ "$(jq -c '[.reasoning, .content]' "$R.sum")" = '["Let me think about it.","The answer is 42."]' ]
	grep -q '"delta":{"reasoning_content":' "$R"
	history='[{"role":"user","content":"weather in Paris?"},
		{"role":"assistant","content":"","reasoning_content":"I should call the tool.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny, 21 C"}]'
	api POST /v1/chat/completions "$(msgs "$history" "\"tools\":$TOOLS")"
	[ "$CODE" = 200 ]
	[ "$(jv .choices[0].message.content)" = "It is sunny in Paris." ]
	logged_prompt
	prompt=$PROMPT
	[[ "$prompt" == *$'<|im_start|>assistant\n<think>\nI should call the tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>'* ]]
	[[ "$prompt" == *$'<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n' ]]
}

@test "chat tools, tool_choice auto: a call with JSON arguments, finish tool_calls; streamed as argument deltas" {
	api POST /v1/chat/completions "$(chat_body 'what is the weather?' "\"tools\":$TOOLS")"
	[ "$CODE" = 200 ]
	[ "$(jv .choices[0].finish_reason)" = tool_calls ]
	[ "$(jv .choices[0].message.content)" = null ]
	[ "$(jq -c '.choices[0].message.tool_calls[0] | [.type, .function.name, (.function.arguments | fromjson)]' "$R")" = \
		'["function","get_weather",{"city":"Paris","unit":"celsius"}]' ]
	[[ "$(jv .choices[0].message.tool_calls[0].id)" == call_* ]]
	logged_prompt
	[[ "$PROMPT" == *'"name": "get_time"'* ]] # the tools are in the prompt
	api POST /v1/chat/completions "$(chat_body 'what is the weather?' "\"tools\":$TOOLS,\"tool_choice\":\"auto\",\"stream\":true")"
	sse chat
	[ "$(jv .finish "$R.sum")" = tool_calls ]
	[ "$(jq -c '.tool_calls[0] | [.name, (.arguments | fromjson)]' "$R.sum")" = '["get_weather",{"city":"Paris","unit":"celsius"}]' ]
	[ "$(jv .args_deltas "$R.sum")" -gt 2 ] # the arguments stream as they become certain
	[ "$(jv .content "$R.sum")" = "" ]
}

@test "chat tool_choice none: the tools are rendered but the call comes back as text" {
	api POST /v1/chat/completions "$(chat_body 'what is the weather?' "\"tools\":$TOOLS,\"tool_choice\":\"none\"")"
	[ "$CODE" = 200 ]
	[ "$(jv .choices[0].finish_reason)" = stop ]
	[ "$(jv .choices[0].message.tool_calls)" = null ]
	[[ "$(jv .choices[0].message.content)" == *'"name": "get_weather"'* ]]
	logged_prompt
	[[ "$PROMPT" == *'"name": "get_weather"'* ]]
}

@test "chat tool_choice required: the answer is made to open a tool call (and is text without it)" {
	api POST /v1/chat/completions "$(chat_body 'forced call please' "\"tools\":$TOOLS,\"tool_choice\":\"required\"")"
	[ "$CODE" = 200 ]
	[ "$(jv .choices[0].finish_reason)" = tool_calls ]
	[ "$(jq -c '.choices[0].message.tool_calls[0].function | [.name, (.arguments | fromjson)]' "$R")" = '["get_weather",{"city":"Oslo"}]' ]
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n<tool_call>\n' ]]
	api POST /v1/chat/completions "$(chat_body 'forced call please' "\"tools\":$TOOLS,\"tool_choice\":\"required\",\"stream\":true")"
	sse chat
	[ "$(jq -c '[.finish, .tool_calls[0].name, (.tool_calls[0].arguments | fromjson)]' "$R.sum")" = '["tool_calls","get_weather",{"city":"Oslo"}]' ]
	# the same reply unforced is no call
	api POST /v1/chat/completions "$(chat_body 'forced call please' "\"tools\":$TOOLS")"
	[ "$(jv .choices[0].message.tool_calls)" = null ]
	[[ "$(jv .choices[0].message.content)" == *Oslo* ]]
	# required without tools
	api POST /v1/chat/completions "$(chat_body 'forced call please' '"tool_choice":"required"')"
	[ "$(oai_error)" = "400 invalid_request_error invalid_value tool_choice" ]
}

@test "chat tool_choice named: that function's call is forced; a name not among the tools is refused" {
	named='"tool_choice":{"type":"function","function":{"name":"get_weather"}}'
	api POST /v1/chat/completions "$(chat_body 'named call please' "\"tools\":$TOOLS,$named")"
	[ "$CODE" = 200 ]
	[ "$(jq -c '[.choices[0].finish_reason, .choices[0].message.tool_calls[0].function.name, (.choices[0].message.tool_calls[0].function.arguments | fromjson)]' "$R")" = \
		'["tool_calls","get_weather",{"city":"Rome"}]' ]
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": ' ]]
	# the name is the request's: the model only wrote the arguments, held to get_time's schema
	api POST /v1/chat/completions "$(chat_body 'named time call please' "\"tools\":$TOOLS,\"stream\":true,${named/get_weather/get_time}")"
	sse chat
	[ "$(jq -c '[.finish, .tool_calls[0].name, (.tool_calls[0].arguments | fromjson)]' "$R.sum")" = '["tool_calls","get_time",{"zone":"UTC"}]' ]
	api POST /v1/chat/completions "$(chat_body 'named call please' "\"tools\":$TOOLS,${named/get_weather/get_stock}")"
	[ "$(oai_error)" = "400 invalid_request_error invalid_value tool_choice" ]
	[[ "$(jv .error.message)" == *"'get_stock'"* ]]
}

@test "tool_choice with the XML template (--chat-template): the forced start is <function=NAME>, or reasoning first where thinking is on; other template variables reach the template" {
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART" --log-prompts \
		--chat-template "$SRC/share/chat_templates/qwen3_5.jinja"
	named='"tool_choice":{"type":"function","function":{"name":"get_weather"}}'
	api POST /v1/chat/completions "$(chat_body 'named xml please' "\"tools\":$TOOLS,$named,\"chat_template_kwargs\":{\"enable_thinking\":false}")"
	[ "$CODE" = 200 ]
	[ "$(jq -c '.choices[0].message.tool_calls[0].function | [.name, (.arguments | fromjson)]' "$R")" = '["get_weather",{"city":"Lima"}]' ]
	logged_prompt
	[[ "$PROMPT" == *$'<tool_call>\n<function=get_weather>\n' ]]
	# thinking on (the template's default): nothing forced, the grammar lets reasoning come first
	api POST /v1/chat/completions "$(chat_body 'named xml thinking please' "\"tools\":$TOOLS,$named")"
	[ "$CODE" = 200 ]
	[ "$(jq -c '.choices[0] | [.finish_reason, .message.reasoning_content, .message.tool_calls[0].function.name, (.message.tool_calls[0].function.arguments | fromjson)]' "$R")" = \
		'["tool_calls","The weather tool fits.","get_weather",{"city":"Lima"}]' ]
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n<think>\n' ]]
	# so may a response_format answer's; the JSON after it is held to the schema
	api POST /v1/chat/completions "$(chat_body 'json thinking please' '"response_format":{"type":"json_schema","json_schema":{"name":"a","strict":true,"schema":{"type":"object","properties":{"answer":{"type":"integer"}},"required":["answer"]}}}')"
	[ "$CODE" = 200 ]
	[ "$(jq -c '.choices[0] | [.finish_reason, .message.reasoning_content, (.message.content | fromjson)]' "$R")" = \
		'["stop","JSON it is.",{"answer":42}]' ]
	serve_stop
	# a template of our own with a variable of its own
	cat >"$BATS_TEST_TMPDIR/t.jinja" <<'EOF'
{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
[mood={{ mood | default('none') }}]{% endif %}
EOF
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART" --log-prompts \
		--chat-template "$BATS_TEST_TMPDIR/t.jinja"
	api POST /v1/chat/completions "$(chat_body 'say hello' '"chat_template_kwargs":{"mood":"cheerful"}')"
	[ "$CODE" = 200 ]
	logged_prompt
	[ "$PROMPT" = $'<|im_start|>user\nsay hello<|im_end|>\n<|im_start|>assistant\n[mood=cheerful]' ]
	api POST /v1/chat/completions "$(chat_body 'say hello')"
	logged_prompt
	[ "$PROMPT" = $'<|im_start|>user\nsay hello<|im_end|>\n<|im_start|>assistant\n[mood=none]' ]
}

@test "chat_template_kwargs enable_thinking false (and reasoning_effort none) render the closed think block" {
	api POST /v1/chat/completions "$(chat_body 'say hello')"
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n' ]]
	api POST /v1/chat/completions "$(chat_body 'say hello' '"chat_template_kwargs":{"enable_thinking":false}')"
	[ "$CODE" = 200 ]
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n<think>\n\n</think>\n\n' ]]
	api POST /v1/chat/completions "$(chat_body 'say hello' '"reasoning_effort":"none"')"
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n<think>\n\n</think>\n\n' ]]
	api POST /v1/chat/completions "$(chat_body 'say hello' '"chat_template_kwargs":{"enable_thinking":true}')"
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n' ]]
	api POST /v1/chat/completions "$(chat_body 'say hello' '"chat_template_kwargs":{"messages":[]}')"
	[ "$(oai_error)" = "400 invalid_request_error invalid_value chat_template_kwargs.messages" ]
	api POST /v1/chat/completions "$(chat_body 'say hello' '"chat_template_kwargs":"x"')"
	[ "$(oai_error)" = "400 invalid_request_error invalid_type chat_template_kwargs" ]
}

@test "add_generation_prompt false and continue_final_message: the prompt ends where the request says" {
	api POST /v1/chat/completions "$(chat_body 'say hello' '"add_generation_prompt":false')"
	[ "$CODE" = 200 ]
	logged_prompt
	[ "$PROMPT" = $'<|im_start|>user\nsay hello<|im_end|>\n' ]
	m='[{"role":"user","content":"finish my sentence"},{"role":"assistant","content":"The quick brown fox"}]'
	api POST /v1/chat/completions "$(msgs "$m" '"add_generation_prompt":false,"continue_final_message":true')"
	[ "$CODE" = 200 ]
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n<think>\n\n</think>\n\nThe quick brown fox' ]]
	# the continuation as generated: its leading space joins it to the text it continues
	[ "$(jv .choices[0].message.content)" = " jumps over the lazy dog." ]
	api POST /v1/chat/completions "$(msgs "$m" '"add_generation_prompt":false,"continue_final_message":true,"stream":true')"
	sse chat
	[ "$(jv .content "$R.sum")" = " jumps over the lazy dog." ]
	api POST /v1/chat/completions "$(msgs "$m" '"continue_final_message":true')"
	[ "$(oai_error)" = "400 invalid_request_error invalid_value continue_final_message" ]
	api POST /v1/chat/completions "$(chat_body 'say hello' '"add_generation_prompt":false,"continue_final_message":true')"
	[ "$(oai_error)" = "400 invalid_request_error invalid_value continue_final_message" ]
}

@test "stop strings end the answer before them, streamed or not, in chat, completions and messages" {
	api POST /v1/chat/completions "$(chat_body 'stop here' '"stop":["STOP"]')"
	# (chat content is trimmed where it ends, as the output parser does)
	[ "$(jq -c '.choices[0] | [.message.content, .finish_reason]' "$R")" = '["one two","stop"]' ]
	api POST /v1/chat/completions "$(chat_body 'stop here' '"stop":"two S","stream":true')"
	sse chat
	[ "$(jq -c '[.content, .finish]' "$R.sum")" = '["one","stop"]' ]
	run ! grep -q '"content":"[^"]*tw' "$R" # held back, then cut: never sent
	api POST /v1/chat/completions "$(chat_body 'stop here' '"stop":["NOPE", "four"]')"
	[ "$(jv .choices[0].message.content)" = "one two STOP three" ]
	api POST /v1/chat/completions "$(chat_body 'stop here' '"stop":["absent"]')"
	[ "$(jv .choices[0].message.content)" = "one two STOP three four" ]
	api POST /v1/completions '{"prompt":"stop here","stop":["STOP"]}'
	[ "$(jq -c '.choices[0] | [.text, .finish_reason]' "$R")" = '["one two ","stop"]' ]
	api POST /v1/messages "$(anth 'stop here' '"stop_sequences":["STOP"]')"
	[ "$(jq -c '[.content[0].text, .stop_reason, .stop_sequence]' "$R")" = '["one two","stop_sequence","STOP"]' ]
	api POST /v1/messages "$(anth 'stop here' '"stop_sequences":["STOP"],"stream":true')"
	sse messages
	[ "$(jq -c '[.content, .stop_reason, .stop_sequence]' "$R.sum")" = '["one two","stop_sequence","STOP"]' ]
	api POST /v1/chat/completions "$(chat_body 'stop here' '"stop":[1]')"
	[ "$(oai_error)" = "400 invalid_request_error invalid_type stop[0]" ]
}

@test "max_tokens and max_completion_tokens cut the answer (finish length); the latter wins; Anthropic and Responses too" {
	api POST /v1/chat/completions "$(chat_body 'count to ten' '"max_tokens":3')"
	[ "$(jq -c '[.choices[0].finish_reason, .usage.completion_tokens]' "$R")" = '["length",3]' ]
	api POST /v1/chat/completions "$(chat_body 'count to ten' '"max_tokens":5,"max_completion_tokens":2')"
	[ "$(jq -c '[.choices[0].finish_reason, .usage.completion_tokens]' "$R")" = '["length",2]' ]
	api POST /v1/chat/completions "$(chat_body 'count to ten' '"max_completion_tokens":4,"stream":true,"stream_options":{"include_usage":true}')"
	sse chat
	[ "$(jq -c '[.finish, .usage.completion_tokens]' "$R.sum")" = '["length",4]' ]
	api POST /v1/chat/completions "$(chat_body 'count to ten' '"max_tokens":100')"
	[ "$(jq -c '[.choices[0].finish_reason, .choices[0].message.content]' "$R")" = '["stop","one two three four five six seven eight nine ten"]' ]
	api POST /v1/completions '{"prompt":"count to ten","max_tokens":2}'
	[ "$(jq -c '[.choices[0].finish_reason, .usage.completion_tokens]' "$R")" = '["length",2]' ]
	api POST /v1/messages "$(anth 'count to ten' | sed 's/"max_tokens":256/"max_tokens":3/')"
	[ "$(jq -c '[.stop_reason, .usage.output_tokens]' "$R")" = '["max_tokens",3]' ]
	api POST /v1/responses '{"input":"count to ten","max_output_tokens":3}'
	[ "$(jq -c '[.status, .incomplete_details.reason, .usage.output_tokens]' "$R")" = '["incomplete","max_output_tokens",3]' ]
	api POST /v1/chat/completions "$(chat_body 'count to ten' '"max_tokens":0')"
	[ "$(oai_error)" = "400 invalid_request_error invalid_value max_tokens" ]
	api POST /v1/chat/completions "$(chat_body 'count to ten' '"max_completion_tokens":"3"')"
	[ "$(oai_error)" = "400 invalid_request_error invalid_type max_completion_tokens" ]
	api POST /v1/messages '{"messages":[{"role":"user","content":"hi"}]}'
	[ "$(anth_error)" = "400 invalid_request_error" ]
	[[ "$(jv .error.message)" == "max_tokens is required" ]]
}

# --- sampling and logprobs on the real fixture ----------------------------------------------------

# gen FIELDS: the text of a 24-token chat answer of the real model with those sampling fields.
gen() {
	api POST /v1/chat/completions "$(chat_body 'Tell me a story.' "\"max_tokens\":24,$1")"
	[ "$CODE" = 200 ] || { cat "$R" >&2; return 1; }
	[ "$(jv .usage.completion_tokens)" = 24 ] || { echo "short answer: $(cat "$R")" >&2; return 1; }
	jv .choices[0].message.content
}

@test "sampling on the real model: a seed repeats its text, seeds differ; temperature 0, top_k 1, top_p and min_p at their edge are greedy" {
	use_real
	a=$(gen '"temperature":1.0,"seed":7')
	b=$(gen '"temperature":1.0,"seed":7')
	c=$(gen '"temperature":1.0,"seed":8')
	[ "$a" = "$b" ]
	[ "$a" != "$c" ]
	g1=$(gen '"temperature":0,"seed":1')
	g2=$(gen '"temperature":0,"seed":2')
	[ "$g1" = "$g2" ]
	[ "$g1" != "$a" ]
	[ "$g1" != "$c" ]
	[ "$(gen '"temperature":1.0,"seed":7,"top_k":1')" = "$g1" ]
	[ "$(gen '"temperature":1.0,"seed":7,"top_p":0.000001')" = "$g1" ]
	[ "$(gen '"temperature":1.0,"seed":7,"min_p":1.0')" = "$g1" ]
	# top_k 2 is no longer greedy for every seed
	d=$(gen '"temperature":1.5,"seed":7,"top_k":2')
	e=$(gen '"temperature":1.5,"seed":9,"top_k":2')
	[ "$d" != "$g1" ] || [ "$e" != "$g1" ]
	# the penalties are applied: greedy text changes under a strong one, and repeats itself
	p=$(gen '"temperature":0,"repetition_penalty":3.0')
	[ "$p" != "$g1" ]
	[ "$(gen '"temperature":0,"repetition_penalty":3.0')" = "$p" ]
	[ "$(gen '"temperature":0,"presence_penalty":2.0,"frequency_penalty":2.0')" != "$g1" ]
	# and through the other APIs
	api POST /v1/completions '{"prompt":"Tell me","max_tokens":12,"temperature":0.9,"seed":5,"top_p":0.9,"top_k":40,"min_p":0.01,"presence_penalty":0.5,"frequency_penalty":0.5,"repetition_penalty":1.1}'
	[ "$CODE" = 200 ]
	t=$(jv .choices[0].text)
	api POST /v1/completions '{"prompt":"Tell me","max_tokens":12,"temperature":0.9,"seed":5,"top_p":0.9,"top_k":40,"min_p":0.01,"presence_penalty":0.5,"frequency_penalty":0.5,"repetition_penalty":1.1}'
	[ "$(jv .choices[0].text)" = "$t" ]
	api POST /v1/messages "$(anth 'Tell me' '"temperature":0.5,"top_p":0.9,"top_k":10')"
	[ "$CODE" = 200 ]
	api POST /v1/responses '{"input":"Tell me","max_output_tokens":8,"temperature":0.5,"top_p":0.9}'
	[ "$CODE" = 200 ]
}

@test "sampling fields out of range or of the wrong type are refused, naming the field" {
	for f in '"temperature":-1' '"top_p":0' '"top_p":1.5' '"min_p":2' '"presence_penalty":3' \
		'"frequency_penalty":-2.5' '"repetition_penalty":0' '"top_k":-2' '"seed":1.5' '"temperature":"hot"' \
		'"top_k":"x"' '"seed":"1"' '"logprobs":1' '"top_logprobs":21'; do
		api POST /v1/chat/completions "$(chat_body hi "$f")"
		field=${f%%\":*}
		field=${field#\"}
		[ "$CODE" = 400 ] || { echo "$f: $CODE"; return 1; }
		[ "$(jv .error.param)" = "$field" ] || { echo "$f: $(cat "$R")"; return 1; }
		[ "$(jv .error.type)" = invalid_request_error ]
	done
	api POST /v1/messages "$(anth hi '"temperature":"hot"')"
	[ "$(anth_error)" = "400 invalid_request_error" ]
	[[ "$(jv .error.message)" == "temperature must be a number, not a string" ]]
}

@test "logprobs on the real model: log-probabilities <= 0, top_logprobs sorted, the greedy token first; chat, stream, completions, Responses" {
	use_real
	body=$(chat_body 'Tell me a story.' '"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":5')
	api POST /v1/chat/completions "$body"
	[ "$CODE" = 200 ]
	lp=$BATS_TEST_TMPDIR/lp.json
	jq -c '.choices[0].logprobs.content' "$R" >"$lp"
	check='length == 8 and all(.[]; .logprob <= 0 and (.top_logprobs | length) == 5
		and .token == .top_logprobs[0].token and .logprob == .top_logprobs[0].logprob
		and ([.top_logprobs[].logprob] | . == (sort | reverse))
		and ([.top_logprobs[].logprob | exp] | add) <= 1.000001)'
	[ "$(jq "$check" "$lp")" = true ]
	api POST /v1/chat/completions "$(chat_body 'Tell me a story.' '"max_tokens":8,"temperature":0,"logprobs":true,"top_logprobs":5,"stream":true')"
	sse chat
	[ "$(jq -c .logprobs "$R.sum")" = "$(cat "$lp")" ]
	api POST /v1/chat/completions "$(chat_body 'Tell me a story.' '"max_tokens":4,"logprobs":true')"
	[ "$(jq '.choices[0].logprobs.content | length == 4 and all(.[]; .logprob <= 0 and .top_logprobs == [])' "$R")" = true ]
	api POST /v1/chat/completions "$(chat_body 'Tell me a story.' '"max_tokens":4')"
	[ "$(jv .choices[0].logprobs)" = null ]
	api POST /v1/completions '{"prompt":"Tell me","max_tokens":6,"temperature":0,"logprobs":3}'
	[ "$(jq '.choices[0].logprobs | (.tokens | length) == 6 and all(.token_logprobs[]; . <= 0)
		and all(.top_logprobs[]; length <= 3 and all(.[]; . <= 0))
		and ([range(6) as $i | .token_logprobs[$i] >= ([.top_logprobs[$i][]] | max)] | all)' "$R")" = true ]
	api POST /v1/responses '{"input":"Tell me","max_output_tokens":5,"temperature":0,"top_logprobs":2,"include":["message.output_text.logprobs"]}'
	[ "$(jq '[.output[] | select(.type == "message") | .content[0].logprobs[]] | length == 5 and all(.[]; .logprob <= 0 and (.top_logprobs | length) == 2)' "$R")" = true ]
}

# --- completions ---------------------------------------------------------------------------------

@test "completions: a text prompt, token ids, echo and streaming; raw text, not parsed" {
	api POST /v1/completions '{"prompt":"Once upon","max_tokens":32}'
	[ "$CODE" = 200 ]
	logged_prompt
	[ "$PROMPT" = "Once upon" ]
	[ "$(jv .object)" = text_completion ]
	[[ "$(jv .id)" == cmpl-* ]]
	[ "$(jq -c '.choices[0] | [.text, .finish_reason]' "$R")" = '[" a time, the end.","stop"]' ]
	n=$(jv .usage.prompt_tokens)
	ids=$(printf 'Once upon' | capy-gen --tokenize "$ART" | tr -s ' \n' ',' | sed 's/,$//')
	[ "$(tr ',' '\n' <<<"$ids" | wc -l)" -eq "$n" ]
	api POST /v1/completions "{\"prompt\":[$ids],\"echo\":true}"
	[ "$(jq -c '.choices[0].text, .usage.prompt_tokens' "$R" | tr '\n' ' ')" = "\"Once upon a time, the end.\" $n " ]
	api POST /v1/completions "{\"prompt\":[[$ids]]}"
	[ "$(jv .choices[0].text)" = " a time, the end." ]
	api POST /v1/completions '{"prompt":["Once upon"],"echo":true,"stream":true,"stream_options":{"include_usage":true}}'
	sse completions
	[ "$(jq -c '[.content, .finish, .usage.prompt_tokens]' "$R.sum")" = "[\"Once upon a time, the end.\",\"stop\",$n]" ]
	# no output parsing: tags are text
	api POST /v1/completions '{"prompt":"think first"}'
	[ "$(jv .choices[0].text)" = $'<think>\nLet me think about it.\n</think>\n\nThe answer is 42.' ]
	api POST /v1/completions '{"prompt":[1, 99999]}'
	[ "$(oai_error)" = "400 invalid_request_error null null" ]
	[[ "$(jv .error.message)" == *"99999 is outside the vocabulary"* ]]
	api POST /v1/completions '{"prompt":[1, -1]}'
	[ "$(oai_error)" = "400 invalid_request_error invalid_value prompt[1]" ]
	api POST /v1/completions '{"prompt":["a","b"]}'
	[ "$(oai_error)" = "400 invalid_request_error unsupported_value prompt" ]
	api POST /v1/completions '{"prompt":""}'
	[ "$(oai_error)" = "400 invalid_request_error invalid_value prompt" ]
	api POST /v1/completions '{"max_tokens":3}'
	[ "$(oai_error)" = "400 invalid_request_error missing_required_parameter prompt" ]
}

# --- Responses -----------------------------------------------------------------------------------

@test "Responses: an answer with instructions, a reasoning item; streamed events numbered from 0, ending in response.completed" {
	api POST /v1/responses '{"model":"fixture","input":"say hello","instructions":"Be brief."}'
	[ "$CODE" = 200 ]
	[ "$(jq -c '[.object, .status, (.id | startswith("resp_")), .instructions]' "$R")" = '["response","completed",true,"Be brief."]' ]
	[ "$(jq -c '[.output[] | .type]' "$R")" = '["message"]' ]
	[ "$(jv .output[0].content[0].text)" = "Hello from capy." ]
	[ "$(jv '.usage.total_tokens == .usage.input_tokens + .usage.output_tokens')" = true ]
	logged_prompt
	[[ "$PROMPT" == $'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nsay hello<|im_end|>\n'* ]]
	api POST /v1/responses '{"input":[{"role":"developer","content":"Be brief."},{"role":"user","content":"say hello"}],"reasoning":{"effort":"none"}}'
	[ "$(jv .output[0].content[0].text)" = "Hello from capy." ]
	logged_prompt
	[ "$PROMPT" = $'<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nsay hello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n' ]
	api POST /v1/responses '{"input":[{"role":"user","content":[{"type":"input_text","text":"think first"}]}]}'
	[ "$(jq -c '[.output[] | .type]' "$R")" = '["reasoning","message"]' ]
	[ "$(jv .output[0].content[0].text)" = "Let me think about it." ]
	[ "$(jv .output[1].content[0].text)" = "The answer is 42." ]
	[ "$(jv '.usage.output_tokens_details.reasoning_tokens > 0')" = true ]
	api POST /v1/responses '{"input":"think first","stream":true}'
	sse responses
	[ "$(jq -c '.events[:2]' "$R.sum")" = '["response.created","response.in_progress"]' ]
	[ "$(jv '.events[-1]' "$R.sum")" = response.completed ]
	[ "$(jq -c '[.reasoning, .content, .response.status]' "$R.sum")" = '["Let me think about it.","The answer is 42.","completed"]' ]
	[ "$(jq -c '[.response.output[] | .type]' "$R.sum")" = '["reasoning","message"]' ]
	[ "$(jv '.events | index("response.output_text.done") != null' "$R.sum")" = true ]
	api POST /v1/responses '{"input":"say hello","stream":true,"max_output_tokens":2}'
	sse responses
	[ "$(jq -c '[.events[-1], .response.status, .response.incomplete_details.reason]' "$R.sum")" = '["response.incomplete","incomplete","max_output_tokens"]' ]
}

@test "Responses: a function_call answer streamed as argument deltas; function_call and function_call_output input items render a tool round" {
	api POST /v1/responses "{\"input\":\"what is the weather?\",\"tools\":$RTOOLS}"
	[ "$CODE" = 200 ]
	[ "$(jq -c '.output[0] | [.type, .name, (.arguments | fromjson), (.call_id | startswith("call_")), .status]' "$R")" = \
		'["function_call","get_weather",{"city":"Paris","unit":"celsius"},true,"completed"]' ]
	api POST /v1/responses "{\"input\":\"what is the weather?\",\"tools\":$RTOOLS,\"stream\":true}"
	sse responses
	[ "$(jq -c '.tool_calls[0] | [.name, (.arguments | fromjson)]' "$R.sum")" = '["get_weather",{"city":"Paris","unit":"celsius"}]' ]
	[ "$(jv .args_deltas "$R.sum")" -gt 2 ]
	[ "$(jv '.events | index("response.function_call_arguments.done") != null' "$R.sum")" = true ]
	input='[{"role":"user","content":"what is the weather in Paris?"},
		{"type":"function_call","call_id":"call_9","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
		{"type":"function_call_output","call_id":"call_9","output":"sunny, 21 C"}]'
	api POST /v1/responses "{\"input\":$input,\"tools\":$RTOOLS}"
	[ "$CODE" = 200 ]
	[ "$(jv .output[0].content[0].text)" = "It is sunny in Paris." ]
	logged_prompt
	[[ "$PROMPT" == *$'<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n' ]]
	api POST /v1/responses "{\"input\":\"forced call please\",\"tools\":$RTOOLS,\"tool_choice\":\"required\"}"
	[ "$(jq -c '.output[0] | [.type, .name, (.arguments | fromjson)]' "$R")" = '["function_call","get_weather",{"city":"Oslo"}]' ]
	api POST /v1/responses "{\"input\":\"named call please\",\"tools\":$RTOOLS,\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"}}"
	[ "$(jq -c '.output[0] | [.type, .name, (.arguments | fromjson)]' "$R")" = '["function_call","get_weather",{"city":"Rome"}]' ]
}

# --- Anthropic Messages ------------------------------------------------------------------------

@test "messages: text, system as a string and as blocks, any model name, cache_control and ?beta=true accepted" {
	api POST /v1/messages "$(anth 'say hello' '"system":"You are terse."')" -H 'anthropic-version: 2023-06-01'
	[ "$CODE" = 200 ]
	[ "$(jq -c '[.type, .role, (.id | startswith("msg_")), .content, .stop_reason, .stop_sequence]' "$R")" = \
		'["message","assistant",true,[{"type":"text","text":"Hello from capy."}],"end_turn",null]' ]
	[ "$(jv '.usage.output_tokens > 0 and .usage.input_tokens > 0')" = true ]
	logged_prompt
	[[ "$PROMPT" == $'<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nsay hello<|im_end|>\n<|im_start|>assistant\n'* ]]
	sys='"system":[{"type":"text","text":"Part one."},{"type":"text","text":"Part two.","cache_control":{"type":"ephemeral"}}]'
	body='{"model":"some-other-model","max_tokens":32,"metadata":{"user_id":"u1"},'"$sys"',"messages":[{"role":"user","content":[{"type":"text","text":"say hello","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}'
	api POST '/v1/messages?beta=true' "$body" -H 'anthropic-beta: prompt-caching-2024-07-31'
	[ "$CODE" = 200 ]
	[ "$(jv .content[0].text)" = "Hello from capy." ]
	logged_prompt
	[[ "$PROMPT" == $'<|im_start|>system\nPart one.'*$'Part two.<|im_end|>\n<|im_start|>user\nsay hello<|im_end|>'* ]]
	run ! grep -q ephemeral <<<"$PROMPT"
	api POST /v1/messages "$(anth 'say hello' '"stream":true')"
	[[ "$(header Content-Type)" == text/event-stream* ]]
	sse messages
	[ "$(jq -c '[.events[0], .events[-2], .events[-1], .content, .stop_reason]' "$R.sum")" = \
		'["message_start","message_delta","message_stop","Hello from capy.","end_turn"]' ]
	[ "$(jq -c '.blocks' "$R.sum")" = '["text"]' ]
	[ "$(jv .usage.output_tokens "$R.sum")" -gt 0 ]
	grep -q '^event: content_block_delta$' "$R"
}

@test "messages: thinking blocks out and back in; tool_use out; tool_use and tool_result in; tool_choice any and tool" {
	api POST /v1/messages "$(anth 'think first' '"thinking":{"type":"enabled","budget_tokens":64}')"
	[ "$(jq -c '[.content[] | .type]' "$R")" = '["thinking","text"]' ]
	[ "$(jq -c '[.content[0].thinking, .content[1].text]' "$R")" = '["Let me think about it.","The answer is 42."]' ]
	[ "$(jv '.content[0].signature | length > 0')" = true ]
	api POST /v1/messages "$(anth 'think first' '"thinking":{"type":"enabled","budget_tokens":64},"stream":true')"
	sse messages
	[ "$(jq -c '[.blocks, .reasoning, .content]' "$R.sum")" = '[["thinking","text"],"Let me think about it.","The answer is 42."]' ]
	# no thinking asked: the template's closed think block
	api POST /v1/messages "$(anth 'say hello')"
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n<think>\n\n</think>\n\n' ]]
	api POST /v1/messages "$(anth 'what is the weather?' "\"tools\":$ATOOLS")"
	[ "$(jq -c '[.stop_reason, .content[0].type, .content[0].name, .content[0].input, (.content[0].id | startswith("toolu_"))]' "$R")" = \
		'["tool_use","tool_use","get_weather",{"city":"Paris","unit":"celsius"},true]' ]
	api POST /v1/messages "$(anth 'what is the weather?' "\"tools\":$ATOOLS,\"stream\":true")"
	sse messages
	[ "$(jq -c '[.stop_reason, .tool_calls[0].name, (.tool_calls[0].arguments | fromjson)]' "$R.sum")" = '["tool_use","get_weather",{"city":"Paris","unit":"celsius"}]' ]
	[ "$(jv .args_deltas "$R.sum")" -gt 2 ]
	m='[{"role":"user","content":"what is the weather in Paris?"},
		{"role":"assistant","content":[{"type":"thinking","thinking":"I should call the tool.","signature":"sig"},{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":[{"type":"text","text":"sunny, 21 C"}]}]}]'
	api POST /v1/messages "{\"model\":\"m\",\"max_tokens\":64,\"tools\":$ATOOLS,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":64},\"messages\":$m}"
	[ "$CODE" = 200 ]
	[ "$(jv .content[-1].text)" = "It is sunny in Paris." ]
	logged_prompt
	[[ "$PROMPT" == *$'<|im_start|>assistant\n<think>\nI should call the tool.\n</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n' ]]
	api POST /v1/messages "$(anth 'forced call please' "\"tools\":$ATOOLS,\"tool_choice\":{\"type\":\"any\"}")"
	[ "$(jq -c '[.stop_reason, .content[0].name, .content[0].input]' "$R")" = '["tool_use","get_weather",{"city":"Oslo"}]' ]
	api POST /v1/messages "$(anth 'named call please' "\"tools\":$ATOOLS,\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"}")"
	[ "$(jq -c '[.stop_reason, .content[0].name, .content[0].input]' "$R")" = '["tool_use","get_weather",{"city":"Rome"}]' ]
}

@test "messages: a final assistant message is continued as a prefill" {
	m='[{"role":"user","content":"finish my sentence"},{"role":"assistant","content":"The quick brown fox"}]'
	api POST /v1/messages "{\"model\":\"m\",\"max_tokens\":32,\"messages\":$m}"
	[ "$CODE" = 200 ]
	[ "$(jq -c '[.content[0].text, .stop_reason]' "$R")" = '[" jumps over the lazy dog.","end_turn"]' ]
	logged_prompt
	[[ "$PROMPT" == *'The quick brown fox' ]]
	api POST /v1/messages "{\"model\":\"m\",\"max_tokens\":32,\"stream\":true,\"messages\":$m}"
	sse messages
	[ "$(jv .content "$R.sum")" = " jumps over the lazy dog." ]
	# an empty final assistant message asks for nothing: a normal turn
	m='[{"role":"user","content":"say hello"},{"role":"assistant","content":" "}]'
	api POST /v1/messages "{\"model\":\"m\",\"max_tokens\":32,\"messages\":$m}"
	[ "$(jv .content[0].text)" = "Hello from capy." ]
}

@test "messages: usage.cache_read_input_tokens on a repeated prompt; count_tokens counts the same prompt" {
	body=$(anth 'say hello, count me' "\"system\":\"You count.\",\"tools\":$ATOOLS")
	api POST /v1/messages "$body"
	[ "$CODE" = 200 ]
	api POST /v1/messages "$body"
	[ "$CODE" = 200 ]
	read -r input cached creation <<<"$(jq -r '.usage | "\(.input_tokens) \(.cache_read_input_tokens) \(.cache_creation_input_tokens)"' "$R")"
	[ "$cached" -gt 0 ]
	api POST /v1/messages "$(anth 'say hello, count me' "\"system\":\"You count.\",\"tools\":$ATOOLS,\"stream\":true")"
	sse messages
	[ "$(jv .start_usage.cache_read_input_tokens "$R.sum")" -gt 0 ]
	api POST /v1/messages/count_tokens "$body"
	[ "$CODE" = 200 ]
	[ "$(jq -c 'keys' "$R")" = '["input_tokens"]' ]
	[ "$(jv .input_tokens)" -eq $((input + cached + creation)) ]
	api POST /v1/messages/count_tokens '{"model":"m","messages":[{"role":"user","content":"say hello"}]}'
	small=$(jv .input_tokens)
	[ "$small" -gt 0 ]
	[ "$small" -lt "$((input + cached + creation))" ]
	api POST /v1/messages/count_tokens '{"model":"m"}'
	[ "$(anth_error)" = "400 invalid_request_error" ]
}

# --- models ----------------------------------------------------------------------------------------

@test "/v1/models lists the model for both SDKs; /v1/models/{id} gives it; an unknown id is 404 model_not_found" {
	api GET /v1/models
	[ "$CODE" = 200 ]
	[ "$(jq -c '[.object, (.data | length), .data[0].id, .data[0].object, .data[0].owned_by, .data[0].max_model_len, .data[0].type, .has_more, .first_id]' "$R")" = \
		'["list",1,"fixture","model","capy",2048,"model",false,"fixture"]' ]
	api GET /v1/models/fixture
	[ "$(jq -c '[.id, .object, .max_model_len]' "$R")" = '["fixture","model",2048]' ]
	api GET /v1/models/gpt-4o
	[ "$(oai_error)" = "404 invalid_request_error model_not_found null" ]
	api POST /v1/models ''
	[ "$CODE" = 405 ]
	[[ "$(header Allow)" == *GET* ]]
}

# --- UTF-8 -----------------------------------------------------------------------------------------

UNICODE='Grüße, 日本語, ✓ and 🐱🐶 — naïve café ∑ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 中文字符 ½ € ह'

@test "streamed text never splits a UTF-8 character: every SSE line is UTF-8 JSON, in every API, scripted and real" {
	api POST /v1/chat/completions "$(chat_body 'unicode please' '"stream":true')"
	sse chat
	[ "$(jv .content "$R.sum")" = "$UNICODE" ]
	[ "$(jv .content_deltas "$R.sum")" -gt 5 ]
	api POST /v1/completions '{"prompt":"unicode please","stream":true}'
	sse completions
	[ "$(jv .content "$R.sum")" = "$UNICODE" ]
	api POST /v1/responses '{"input":"unicode please","stream":true}'
	sse responses
	[ "$(jv .content "$R.sum")" = "$UNICODE" ]
	api POST /v1/messages "$(anth 'unicode please' '"stream":true')"
	sse messages
	[ "$(jv .content "$R.sum")" = "$UNICODE" ]
	api POST /v1/chat/completions "$(chat_body 'unicode please')"
	[ "$(jv .choices[0].message.content)" = "$UNICODE" ]
	# the random model writes stray bytes of multi-byte characters: they must come out whole
	# or as U+FFFD, never cut
	use_real
	api POST /v1/chat/completions "$(chat_body 'Tell me a story.' '"stream":true,"stream_options":{"include_usage":true},"max_tokens":200,"temperature":1.5,"seed":3,"logprobs":true,"top_logprobs":2')"
	sse chat
	# every token's logprob arrives, those that made no text yet included
	[ "$(jq '(.logprobs | length) == .usage.completion_tokens and .usage.completion_tokens > 50' "$R.sum")" = true ]
	api POST /v1/completions '{"prompt":"Tell","stream":true,"max_tokens":200,"temperature":1.5,"seed":4}'
	sse completions
	api POST /v1/messages '{"model":"m","max_tokens":150,"stream":true,"temperature":1.5,"messages":[{"role":"user","content":"Tell me."}]}'
	sse messages
	api POST /v1/responses '{"input":"Tell","stream":true,"max_output_tokens":150,"temperature":1.5}'
	sse responses
}

# --- errors and limits ---------------------------------------------------------------------------

@test "bad JSON and a body that is no object: 400 in each API's shape" {
	for path in /v1/chat/completions /v1/completions /v1/responses; do
		api POST "$path" '{"messages": [,]}'
		[ "$(oai_error)" = "400 invalid_request_error invalid_json null" ] || { echo "$path: $(cat "$R")"; return 1; }
		[[ "$(jv .error.message)" == "request body is not valid JSON (line 1, column "* ]]
		api POST "$path" '[1, 2]'
		[ "$(oai_error)" = "400 invalid_request_error invalid_type null" ]
		api POST "$path" ''
		[ "$CODE" = 400 ]
	done
	for path in /v1/messages /v1/messages/count_tokens '/v1/messages?beta=true'; do
		api POST "$path" '{"model": "m", "max_tokens": 5, "messages": [}'
		[ "$(anth_error)" = "400 invalid_request_error" ] || { echo "$path: $(cat "$R")"; return 1; }
		[[ "$(jv .error.message)" == "request body is not valid JSON"* ]]
		api POST "$path" '"text"'
		[ "$(anth_error)" = "400 invalid_request_error" ]
	done
	health_ok
}

@test "wrong types and missing fields: 400 naming the field, in each API's shape" {
	while IFS='|' read -r path body want; do
		api POST "$path" "$body"
		[ "$(oai_error)" = "400 invalid_request_error $want" ] || { echo "$path $body: $(cat "$R")"; return 1; }
	done <<'EOF2'
/v1/chat/completions|{"messages":"hi"}|invalid_type messages
/v1/chat/completions|{}|missing_required_parameter messages
/v1/chat/completions|{"messages":[]}|invalid_value messages
/v1/chat/completions|{"messages":[5]}|invalid_type messages[0]
/v1/chat/completions|{"messages":[{"content":"x"}]}|missing_required_parameter messages[0].role
/v1/chat/completions|{"messages":[{"role":"wizard","content":"x"}]}|invalid_value messages[0].role
/v1/chat/completions|{"messages":[{"role":"user","content":5}]}|invalid_type messages[0].content
/v1/chat/completions|{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}|unsupported_content messages[0].content[0]
/v1/chat/completions|{"messages":[{"role":"user","content":"x"}],"stream":"yes"}|invalid_type stream
/v1/chat/completions|{"messages":[{"role":"user","content":"x"}],"tools":{}}|invalid_type tools
/v1/chat/completions|{"messages":[{"role":"user","content":"x"}],"tool_choice":"always"}|invalid_value tool_choice
/v1/chat/completions|{"messages":[{"role":"user","content":"x"}],"n":2}|unsupported_value n
/v1/chat/completions|{"messages":[{"role":"user","content":"x"}],"model":5}|invalid_type model
/v1/chat/completions|{"messages":[{"role":"assistant","content":"","tool_calls":[{"function":{"name":"f","arguments":"{bad"}}]}]}|invalid_value messages[0].tool_calls[0].function.arguments
/v1/completions|{"prompt":5}|invalid_type prompt
/v1/completions|{"prompt":"x","echo":1}|invalid_type echo
/v1/responses|{"input":5}|invalid_type input
/v1/responses|{}|missing_required_parameter input
EOF2
	while IFS='|' read -r path body want; do
		api POST "$path" "$body"
		[ "$(anth_error)" = "400 invalid_request_error" ] || { echo "$path $body: $(cat "$R")"; return 1; }
		[[ "$(jv .error.message)" == *"$want"* ]] || { echo "$path $body: $(cat "$R")"; return 1; }
	done <<'EOF2'
/v1/messages|{"max_tokens":5,"messages":"hi"}|messages must be a list
/v1/messages|{"max_tokens":5,"messages":[{"role":"wizard","content":"x"}]}|messages[0].role must be user or assistant
/v1/messages|{"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}|not supported
/v1/messages|{"max_tokens":"5","messages":[{"role":"user","content":"x"}]}|max_tokens must be an integer
/v1/messages|{"max_tokens":5,"messages":[{"role":"user","content":"x"}],"thinking":{"type":"maybe"}}|thinking.type
/v1/messages/count_tokens|{"messages":[{"role":"user"}]}|messages[0].content
EOF2
	health_ok
}

@test "an unknown model is 404 model_not_found on the OpenAI endpoints; /v1/messages takes any name" {
	for path in /v1/chat/completions /v1/responses; do
		api POST "$path" '{"model":"gpt-5","messages":[{"role":"user","content":"say hello"}],"input":"say hello"}'
		[ "$(oai_error)" = "404 invalid_request_error model_not_found null" ] || { echo "$path: $(cat "$R")"; return 1; }
		[[ "$(jv .error.message)" == *"'gpt-5'"*"'fixture'"* ]]
	done
	api POST /v1/completions '{"model":"gpt-5","prompt":"x"}'
	[ "$(oai_error)" = "404 invalid_request_error model_not_found null" ]
	api POST /v1/chat/completions '{"model":"fixture","messages":[{"role":"user","content":"say hello"}]}'
	[ "$CODE" = 200 ]
	for model in claude-opus-4-1 gpt-5 ""; do
		api POST /v1/messages "{\"model\":\"$model\",\"max_tokens\":32,\"messages\":[{\"role\":\"user\",\"content\":\"say hello\"}]}"
		[ "$CODE" = 200 ]
		api POST /v1/messages/count_tokens "{\"model\":\"$model\",\"messages\":[{\"role\":\"user\",\"content\":\"say hello\"}]}"
		[ "$CODE" = 200 ]
	done
}

@test "invalid UTF-8 in the body is refused with 400 in each API's shape" {
	printf '{"messages":[{"role":"user","content":"ab\xff\xfecd"}]}' >"$BATS_TEST_TMPDIR/bad.json"
	api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/bad.json"
	[ "$(oai_error)" = "400 invalid_request_error invalid_json null" ]
	[[ "$(jv .error.message)" == *"invalid UTF-8"* ]]
	printf '{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"\xe6\x97"}]}' >"$BATS_TEST_TMPDIR/bad.json"
	api POST /v1/messages "@$BATS_TEST_TMPDIR/bad.json"
	[ "$(anth_error)" = "400 invalid_request_error" ]
	printf '{"prompt":"x\xc0\xafy"}' >"$BATS_TEST_TMPDIR/bad.json"
	api POST /v1/completions "@$BATS_TEST_TMPDIR/bad.json"
	[ "$CODE" = 400 ]
	health_ok
}

@test "a prompt over --max-context is 400 context_length_exceeded; max_tokens beyond it is clamped" {
	long=$(printf 'lorem ipsum %.0s' {1..1200})
	api POST /v1/chat/completions "$(chat_body "$long")"
	[ "$(oai_error)" = "400 invalid_request_error context_length_exceeded null" ]
	[[ "$(jv .error.message)" == *"this server's context is 2048 tokens"* ]]
	api POST /v1/messages "$(anth "$long")"
	[ "$(anth_error)" = "400 invalid_request_error" ]
	[[ "$(jv .error.message)" == *"--max-context"* ]]
	api POST /v1/responses "{\"input\":\"$long\"}"
	[ "$(oai_error)" = "400 invalid_request_error context_length_exceeded null" ]
	ids=$(printf '1,%.0s' {1..2048})
	api POST /v1/completions "{\"prompt\":[${ids%,}]}"
	[ "$(oai_error)" = "400 invalid_request_error context_length_exceeded null" ]
	# count_tokens still counts it
	api POST /v1/messages/count_tokens "$(anth "$long")"
	[ "$CODE" = 200 ]
	[ "$(jv .input_tokens)" -gt 2048 ]
	api POST /v1/chat/completions "$(chat_body 'say hello' '"max_tokens":100000')"
	[ "$CODE" = 200 ]
	health_ok
}

@test "a body over --max-body is 413 in each API's shape, by Content-Length or chunked" {
	head -c 300000 /dev/zero | tr '\0' 'a' | sed 's/.*/{"messages":[{"role":"user","content":"&"}]}/' >"$BATS_TEST_TMPDIR/big.json"
	api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/big.json"
	[ "$(oai_error)" = "413 invalid_request_error null null" ]
	[[ "$(jv .error.message)" == *"request body too large"* ]]
	api POST /v1/messages "@$BATS_TEST_TMPDIR/big.json"
	[ "$(anth_error)" = "413 request_too_large" ]
	api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/big.json" -H 'Transfer-Encoding: chunked'
	[ "$CODE" = 413 ]
	api POST /v1/responses "@$BATS_TEST_TMPDIR/big.json" -H 'Transfer-Encoding: chunked'
	[ "$CODE" = 413 ]
	health_ok
	api POST /v1/chat/completions "$(chat_body 'say hello')" -H 'Transfer-Encoding: chunked'
	[ "$CODE" = 200 ]
	[ "$(jv .choices[0].message.content)" = "Hello from capy." ]
}

@test "request headers over 64 KiB are 431 in each API's shape" {
	big=$(head -c 70000 /dev/zero | tr '\0' a)
	api POST /v1/chat/completions "$(chat_body 'say hello')" -H "X-Padding: $big"
	[ "$(oai_error)" = "431 invalid_request_error null null" ]
	[[ "$(jv .error.message)" == "request headers too large ("*" bytes, limit 65536)" ]]
	api POST /v1/messages "$(anth 'say hello')" -H "X-Padding: $big"
	[ "$(anth_error)" = "431 invalid_request_error" ]
	api POST /v1/chat/completions "$(chat_body 'say hello')" -H "X-Padding: ${big:0:60000}"
	[ "$CODE" = 200 ]
	health_ok
}

@test "--max-messages and --max-tools refuse longer lists with 400, in each API's shape" {
	m=$(printf '{"role":"user","content":"x"},%.0s' {1..41})
	api POST /v1/chat/completions "{\"messages\":[${m%,}]}"
	[ "$(oai_error)" = "400 invalid_request_error array_above_max_length messages" ]
	[[ "$(jv .error.message)" == "messages has 41 entries, more than the limit of 40" ]]
	api POST /v1/messages "{\"max_tokens\":5,\"messages\":[${m%,}]}"
	[ "$(anth_error)" = "400 invalid_request_error" ]
	api POST /v1/responses "{\"input\":[${m%,}]}"
	[ "$(oai_error)" = "400 invalid_request_error array_above_max_length input" ]
	m=$(printf '{"role":"user","content":"x"},%.0s' {1..40})
	api POST /v1/chat/completions "{\"messages\":[${m%,}],\"max_tokens\":2}"
	[ "$CODE" = 200 ]
	t=$(printf '{"type":"function","function":{"name":"f%s","parameters":{}}},' 1 2 3 4 5 6 7)
	api POST /v1/chat/completions "$(chat_body hi "\"tools\":[${t%,}]")"
	[ "$(oai_error)" = "400 invalid_request_error array_above_max_length tools" ]
	t=$(printf '{"name":"f%s","input_schema":{}},' 1 2 3 4 5 6 7)
	api POST /v1/messages "$(anth hi "\"tools\":[${t%,}]")"
	[ "$(anth_error)" = "400 invalid_request_error" ]
	[[ "$(jv .error.message)" == *"7 tools, more than the limit of 6"* ]]
	t=$(printf '{"type":"function","function":{"name":"f%s","parameters":{}}},' 1 2 3 4 5 6)
	api POST /v1/chat/completions "$(chat_body hi "\"tools\":[${t%,}],\"max_tokens\":2")"
	[ "$CODE" = 200 ]
}

@test "unknown paths are 404, other methods 405 with Allow, in the shape of the path's API" {
	api GET /v1/chat/completions
	[ "$(oai_error)" = "405 invalid_request_error null null" ]
	[ "$(header Allow)" = POST ]
	api GET /v1/messages
	[ "$(anth_error)" = "405 invalid_request_error" ]
	api POST /v1/embeddings '{"input":"x"}'
	[ "$(oai_error)" = "404 not_found_error null null" ]
	api POST /health ''
	[ "$CODE" = 405 ]
	api GET /v2/models
	[ "$CODE" = 404 ]
	health_ok
}

@test "too many connections: past --max-connections each request gets 503 in its API's shape, then service resumes" {
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART" --max-connections 2
	"$SERVE_PYTHON" "$SERVE_CHECK" occupy "$PORT" 2 30 >"$BATS_TEST_TMPDIR/occupy" &
	opid=$!
	for ((i = 0; i < 50; i++)); do
		[ -s "$BATS_TEST_TMPDIR/occupy" ] && break
		sleep 0.1
	done
	api POST /v1/chat/completions "$(chat_body 'say hello')"
	[ "$(oai_error)" = "503 server_error null null" ]
	[ "$(jv .error.message)" = "too many connections" ]
	[ "$(header Connection)" = close ]
	api POST /v1/messages "$(anth 'say hello')"
	[ "$(anth_error)" = "503 overloaded_error" ]
	kill "$opid"
	wait "$opid" || true
	for ((i = 0; i < 50; i++)); do
		api POST /v1/chat/completions "$(chat_body 'say hello')"
		[ "$CODE" = 200 ] && break
		sleep 0.1
	done
	[ "$CODE" = 200 ]
}

@test "slow clients are dropped: headers or body not in within --request-timeout, idle past --idle-timeout" {
	CAPY_SCRIPT=$SCRIPTS/api.json serve_start capy-serve-scripted "$ART" --request-timeout 0.5 --idle-timeout 1
	out=$(check partial "$PORT" 8)
	[[ "$out" =~ ^"closed after "(0\.[4-9]|1\.[0-9]|2\.[0-4])" s"$ ]] || { echo "$out"; return 1; }
	wait_for_log '"error":"request timeout"'
	out=$(check slowbody "$PORT" 8)
	[[ "$out" =~ ^"closed after "(0\.[4-9]|1\.[0-9]|2\.[0-4])" s"$ ]] || { echo "$out"; return 1; }
	out=$(check hold "$PORT" 8)
	[[ "$out" =~ ^"closed after "(0\.9|[12]\.[0-9])" s"$ ]] || { echo "$out"; return 1; }
	health_ok
	api POST /v1/chat/completions "$(chat_body 'say hello')"
	[ "$CODE" = 200 ]
}

@test "--max-queue: requests beyond the batch and the queue get 503 in their API's shape; /health shows both" {
	CAPY_SCRIPT=$SCRIPTS/slow.json serve_start capy-serve-scripted "$ART" --max-concurrency 1 --max-queue 1
	pids=()
	for i in 1 2; do
		curl -sS --max-time 1.5 -o /dev/null "http://127.0.0.1:$PORT/v1/chat/completions" -d "$(chat_body 'a long one')" 2>/dev/null &
		pids+=($!)
		for ((k = 0; k < 50; k++)); do
			api GET /health
			[ "$(jv '.active + .queued')" -ge "$i" ] && break
			sleep 0.1
		done
	done
	[ "$(jq -c '[.active, .queued]' "$R")" = '[1,1]' ]
	api POST /v1/chat/completions "$(chat_body 'a short one')"
	[ "$(oai_error)" = "503 server_error null null" ]
	[[ "$(jv .error.message)" == *"the queue is full"* ]]
	api POST /v1/messages "$(anth 'a short one')"
	[ "$(anth_error)" = "503 overloaded_error" ]
	wait "${pids[@]}" || true # cut by --max-time: they leave, and are cancelled
	wait_metric capy_active_sequences 0
	api POST /v1/chat/completions "$(chat_body 'a short one')"
	[ "$CODE" = 200 ]
}

# wait_metric NAME VALUE: until /metrics shows it (5 s at most).
wait_metric() {
	local i
	for ((i = 0; i < 50; i++)); do
		curl -sS --max-time 2 "http://127.0.0.1:$PORT/metrics" | grep -qx "$1 $2" && return 0
		sleep 0.1
	done
	echo "/metrics never showed $1 $2" >&2
	return 1
}

@test "a client that leaves mid-answer gets its generation cancelled (log line, metrics); the server serves on" {
	CAPY_SCRIPT=$SCRIPTS/slow.json serve_start capy-serve-scripted "$ART"
	run curl -sS -N --max-time 0.6 "http://127.0.0.1:$PORT/v1/chat/completions" -d "$(chat_body 'a long one' '"stream":true')"
	[ "$status" -eq 28 ]
	[[ "$output" == *'"delta":{"role":"assistant"'* ]]
	wait_for_log '"finish":"cancelled"'
	line=$(grep '"finish":"cancelled"' "$SERVER_LOG")
	[[ "$line" == *'"aborted":true'* ]]
	n=$(jq .completion_tokens <<<"$line")
	[ "$n" -lt 200 ] # of the ~900 tokens of the whole answer
	wait_metric capy_active_sequences 0
	gen=$(curl -sS --max-time 2 "http://127.0.0.1:$PORT/metrics" | sed -n 's/^capy_generated_tokens_total //p')
	# nothing more is generated for it
	sleep 0.5
	[ "$(curl -sS --max-time 2 "http://127.0.0.1:$PORT/metrics" | sed -n 's/^capy_generated_tokens_total //p')" = "$gen" ]
	# not streamed: the same
	run curl -sS --max-time 0.6 "http://127.0.0.1:$PORT/v1/chat/completions" -d "$(chat_body 'a long one')"
	[ "$status" -eq 28 ]
	for ((i = 0; i < 50; i++)); do
		[ "$(grep -c '"finish":"cancelled"' "$SERVER_LOG")" -eq 2 ] && break
		sleep 0.1
	done
	[ "$(grep -c '"finish":"cancelled"' "$SERVER_LOG")" -eq 2 ]
	wait_metric capy_active_sequences 0
	api POST /v1/chat/completions "$(chat_body 'a short one')"
	[ "$CODE" = 200 ]
	[ "$(jv .choices[0].finish_reason)" = stop ]
}

@test "a half-closed client is answered or dropped, never a crash; its generation does not run on" {
	out=$(check halfclose "$PORT" "$(chat_body 'say hello')")
	[[ "$out" == "HTTP/1.1 200 OK" || "$out" == "closed without an answer" ]] || { echo "$out"; return 1; }
	health_ok
	CAPY_SCRIPT=$SCRIPTS/slow.json serve_start capy-serve-scripted "$ART"
	out=$(check halfclose "$PORT" "$(chat_body 'a long one')")
	[[ "$out" == "closed without an answer" || "$out" == "HTTP/1.1 200 OK" ]] || { echo "$out"; return 1; }
	wait_for_log '"path":"/v1/chat/completions"'
	line=$(grep '"path":"/v1/chat/completions"' "$SERVER_LOG")
	[[ "$line" == *'"aborted":true'* ]]
	[[ "$line" == *'"finish":"cancelled"'* ]]
	wait_metric capy_active_sequences 0
	health_ok
}
