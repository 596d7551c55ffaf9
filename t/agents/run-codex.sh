#!/usr/bin/env bash
# run-codex.sh - Codex CLI (`codex exec`) through one tool round against CAPY_URL's Responses API
# (/v1/responses, streamed), as a custom model provider. The model's side is
# scripts/codex.json: it calls exec_command to cat hello.txt, then answers the tool result.
# See lib.sh for the environment.
. "$(dirname "$0")/lib.sh"
[ $# = 0 ] || { echo "usage: $0" >&2; exit 2; }
agent_start codex responses codex "$@"
mkdir -p "$AGENT_HOME/.codex"
cat >"$AGENT_HOME/.codex/config.toml" <<TOML
model = "$CAPY_MODEL"
model_provider = "capy"
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false

[model_providers.capy]
name = "capy"
base_url = "$CAPY_URL/v1"
env_key = "CAPY_API_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
TOML
agent_run CODEX_HOME="$AGENT_HOME/.codex" CAPY_API_KEY="$CAPY_API_KEY" -- \
	"$AGENT_CLI" exec --strict-config --skip-git-repo-check --json "$AGENT_PROMPT"
agent_check $? codex
