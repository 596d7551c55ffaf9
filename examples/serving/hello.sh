#!/bin/sh
# hello.sh HOST PORT MODEL - what `make serve` prints before it starts capy-serve: a request
# to try and the settings of the coding agents (docs/serving.md has them in full).
host=$1 port=$2 model=$3
url=http://$host:$port
cat <<MSG
--- capy-serve on $url, model '$model' (a tiny bundled model with random weights:
    its answers are noise; point it at a real .capy for words) ---
Try it:
  curl -s $url/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model":"$model","messages":[{"role":"user","content":"Hello"}],"max_tokens":32}'
Clients:
  Claude Code   ANTHROPIC_BASE_URL=$url ANTHROPIC_API_KEY=none ANTHROPIC_MODEL=$model claude
  Qwen Code     OPENAI_BASE_URL=$url/v1 OPENAI_API_KEY=none OPENAI_MODEL=$model qwen
  Codex CLI     ~/.codex/config.toml: [model_providers.capy] base_url = "$url/v1", wire_api = "responses"
  OpenCode      opencode.json: provider "@ai-sdk/openai-compatible" with baseURL $url/v1
  OpenAI SDKs   base_url $url/v1, any api_key
Stop with Ctrl-C.
MSG
