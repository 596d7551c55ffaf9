#!/usr/bin/env bats
# Real coding agents end to end (pinned by t/agents/package-lock.json; make test installs
# them): Claude Code (claude -p), opencode (its chat, Anthropic and Responses adapters), Codex
# CLI (codex exec, a custom provider on the Responses API) and Qwen Code (its OpenAI, Responses
# and Anthropic modes), each inside a loopback-only network namespace, each completing a task
# that needs one tool round against capy-serve: the scripted model calls a tool, the CLI runs
# it and sends the result, the model answers (t/agents/run-*.sh; t/agents/scripts/*.json).

load lib
load helper/serve

setup_file() {
	serve_fixture
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
}

# agent NAME [MODE]: serve NAME's script, run the agent against it.
agent() {
	[ -d "$SRC/t/agents/node_modules" ] || { echo "run make test (it installs t/agents)"; return 1; }
	CAPY_SCRIPT=$SRC/t/agents/scripts/$1.json serve_start capy-serve-scripted "$ART" --profile test --model-id capy-test \
		--api-key sk-agent --max-context 131072
	run timeout 300 env CAPY_URL="http://127.0.0.1:$PORT" CAPY_API_KEY=sk-agent CAPY_MODEL=capy-test \
		"$SRC/t/agents/run-$1.sh" ${2:+"$2"}
	echo "$output"
	[ "$status" -eq 0 ]
	grep -q ': ok (' <<<"$output"
}

@test "Claude Code (claude -p) completes a tool round" {
	agent claude
}

@test "opencode through its OpenAI-compatible chat adapter" {
	agent opencode chat
}

@test "opencode through its Anthropic adapter" {
	agent opencode anthropic
}

@test "opencode through its Responses adapter" {
	agent opencode responses
}

@test "Codex CLI (codex exec, custom provider, Responses wire API)" {
	agent codex
}

@test "Qwen Code in its OpenAI mode" {
	agent qwen openai
}

@test "Qwen Code in its OpenAI Responses mode" {
	agent qwen openai-responses
}

@test "Qwen Code in its Anthropic mode" {
	agent qwen anthropic
}
