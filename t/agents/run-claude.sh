#!/usr/bin/env bash
# run-claude.sh [full|bare] - Claude Code (`claude -p`) through one tool round against CAPY_URL's
# Anthropic API (/v1/messages?beta=true). full: Claude Code's own system prompt and tools; bare:
# --bare (a short system prompt, three tools). The model's side is scripts/claude.json: it
# calls Read on hello.txt, then answers the tool result. See lib.sh for the environment.
. "$(dirname "$0")/lib.sh"
mode=${1:-full}
case $mode in
full) extra=() ;;
bare) extra=(--bare) ;;
*) echo "usage: $0 [full|bare]" >&2; exit 2 ;;
esac
agent_start claude "$mode" claude "$@"
agent_run ANTHROPIC_BASE_URL="$CAPY_URL" ANTHROPIC_API_KEY="$CAPY_API_KEY" \
	ANTHROPIC_MODEL="$CAPY_MODEL" ANTHROPIC_SMALL_FAST_MODEL="$CAPY_MODEL" \
	ANTHROPIC_DEFAULT_HAIKU_MODEL="$CAPY_MODEL" ANTHROPIC_DEFAULT_SONNET_MODEL="$CAPY_MODEL" \
	ANTHROPIC_DEFAULT_OPUS_MODEL="$CAPY_MODEL" \
	CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 \
	DISABLE_AUTOUPDATER=1 -- \
	"$AGENT_CLI" -p "$AGENT_PROMPT" "${extra[@]}" --allowedTools "Bash(cat:*)" Read \
	--output-format stream-json --verbose
agent_check $? claude
