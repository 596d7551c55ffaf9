#!/usr/bin/env bash
# run-opencode.sh [chat|anthropic|responses] - opencode (`opencode run`) through one tool round
# against CAPY_URL, with one of its three provider adapters: chat (@ai-sdk/openai-compatible,
# /v1/chat/completions), anthropic (@ai-sdk/anthropic, /v1/messages), responses (@ai-sdk/openai,
# /v1/responses). The title request goes to the same provider. The model's side is
# scripts/opencode.json: it calls read on hello.txt, then answers the tool result. See lib.sh.
. "$(dirname "$0")/lib.sh"
mode=${1:-chat}
case $mode in
chat) npm=@ai-sdk/openai-compatible ;;
anthropic) npm=@ai-sdk/anthropic ;;
responses) npm=@ai-sdk/openai ;;
*) echo "usage: $0 [chat|anthropic|responses]" >&2; exit 2 ;;
esac
agent_start opencode "$mode" opencode "$@"
mkdir -p "$AGENT_HOME/.config/opencode"
cat >"$AGENT_HOME/.config/opencode/opencode.json" <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "provider": {
    "capy": {
      "npm": "$npm",
      "name": "capy",
      "options": { "baseURL": "$CAPY_URL/v1", "apiKey": "$CAPY_API_KEY" },
      "models": { "$CAPY_MODEL": { "name": "$CAPY_MODEL", "tool_call": true, "limit": { "context": 65536, "output": 4096 } } }
    }
  },
  "model": "capy/$CAPY_MODEL",
  "small_model": "capy/$CAPY_MODEL"
}
JSON
agent_run XDG_CONFIG_HOME="$AGENT_HOME/.config" XDG_DATA_HOME="$AGENT_HOME/.local/share" \
	XDG_CACHE_HOME="$AGENT_HOME/.cache" XDG_STATE_HOME="$AGENT_HOME/.local/state" \
	OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_LSP_DOWNLOAD=true OPENCODE_DISABLE_MODELS_FETCH=1 \
	OPENCODE_DISABLE_SHARE=1 -- \
	"$AGENT_CLI" run -m "capy/$CAPY_MODEL" --format json "$AGENT_PROMPT"
agent_check $? opencode
