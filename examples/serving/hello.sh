#!/bin/sh
# hello.sh HOST PORT MODEL - what `make serve` prints before it starts capy-serve: requests
# to try and the settings of the coding agents (docs/serving.md has them in full).
host=$1 port=$2 model=$3
url=http://$host:$port
cat <<MSG
--- capy-serve on $url, model '$model' (capy-tiny, share/models: 7M parameters trained
    here; it greets, calls its toy tools and writes Python-looking nonsense; point capy-serve
    at a real .capy for a real model) ---
Try it:
  curl -s $url/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model":"$model","messages":[{"role":"user","content":"Hello! Who are you?"}],"max_tokens":64}'
  curl -s $url/v1/chat/completions -H 'Content-Type: application/json' -d @- <<'JSON'
{"model":"$model","messages":[{"role":"user","content":"What is 128 * 46?"}],
 "tools":[{"type":"function","function":{"name":"calculator",
   "description":"Evaluate an arithmetic expression and return its value.",
   "parameters":{"type":"object","properties":{"expression":{"type":"string",
     "description":"The expression, for example 12 * (3 + 4)"}},"required":["expression"]}}}]}
JSON
Clients:
  Claude Code   ANTHROPIC_BASE_URL=$url ANTHROPIC_API_KEY=none ANTHROPIC_MODEL=$model claude
  Qwen Code     OPENAI_BASE_URL=$url/v1 OPENAI_API_KEY=none OPENAI_MODEL=$model qwen
  Codex CLI     ~/.codex/config.toml: [model_providers.capy] base_url = "$url/v1", wire_api = "responses"
  OpenCode      opencode.json: provider "@ai-sdk/openai-compatible" with baseURL $url/v1
  OpenAI SDKs   base_url $url/v1, any api_key
  (capy-tiny knows only its three toy tools; the agents' own system prompts are far beyond it)
Stop with Ctrl-C.
MSG
