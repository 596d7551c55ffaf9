#!/usr/bin/env bash
# run-qwen.sh [openai|openai-responses|anthropic] - Qwen Code (`qwen -p`) through one tool round
# against CAPY_URL, in one of its modes (--auth-type): openai (/v1/chat/completions),
# openai-responses (/v1/responses), anthropic (/v1/messages). Its other modes, gemini and
# vertex-ai, speak Google's API, and qwen-oauth Qwen's own service. The model's side is
# scripts/qwen.json: it calls run_shell_command to cat hello.txt, then answers the tool result.
# See lib.sh for the environment.
. "$(dirname "$0")/lib.sh"
mode=${1:-openai}
case $mode in
openai | openai-responses | anthropic) ;;
*) echo "usage: $0 [openai|openai-responses|anthropic]" >&2; exit 2 ;;
esac
agent_start qwen "$mode" qwen "$@"
mkdir -p "$AGENT_HOME/.qwen"
cat >"$AGENT_HOME/.qwen/settings.json" <<JSON
{
  "general": { "enableAutoUpdate": false },
  "privacy": { "usageStatisticsEnabled": false },
  "telemetry": { "enabled": false },
  "memory": { "enableManagedAutoMemory": false, "enableManagedAutoDream": false }
}
JSON
agent_run OPENAI_API_KEY="$CAPY_API_KEY" OPENAI_BASE_URL="$CAPY_URL/v1" OPENAI_MODEL="$CAPY_MODEL" \
	ANTHROPIC_API_KEY="$CAPY_API_KEY" ANTHROPIC_BASE_URL="$CAPY_URL" ANTHROPIC_MODEL="$CAPY_MODEL" \
	QWEN_TELEMETRY_ENABLED=false QWEN_CODE_SUPPRESS_YOLO_WARNING=1 -- \
	"$AGENT_CLI" --auth-type "$mode" --yolo --output-format json "$AGENT_PROMPT"
agent_check $? qwen
