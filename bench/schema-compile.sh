#!/usr/bin/env bash
# schema-compile.sh - what a new constrained request pays before its first token: each JSON
# Schema of the captured tool corpus (t/fixtures/schemas/tool-*.json), one large schema made of
# all of them (an object with each as a required property), and the XML tool-call grammars of
# the whole tools lists of captured Claude Code, Codex and Qwen Code requests, each compiled to
# GBNF text, to the automaton, and masked once from its start over the Qwen3 vocabulary
# (build/bench/mask-bench --compile).
#
#   make bench && bench/schema-compile.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
zstd -dqf t/text/qwen3/tokenizer.json.zst -o "$tmp/tokenizer.json"
jq -s 'to_entries | {type: "object", properties: (map({key: "t\(.key)", value: .value}) | from_entries),
	required: [range(length) | "t\(.)"], additionalProperties: false}' t/fixtures/schemas/tool-*.json \
	>"$tmp/all-56-tools-schema.json"
C=t/serve/captured
jq '.body.tools | map({type: "function", function: {name, parameters: .input_schema}})' \
	"$C/claude-code/001_POST_v1_messages.json" >"$tmp/claude-code-tools.json"
jq '.body.tools | map(select(.type == "function") | {type: "function", function: {name, parameters}})' \
	"$C/codex/001_POST_v1_responses.json" >"$tmp/codex-tools.json"
jq '.body.tools' "$C/qwen-code/001_POST_v1_chat_completions.json" >"$tmp/qwen-code-tools.json"
echo "commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (modified)'), $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), taskset -c 0"
taskset -c 0 build/bench/mask-bench "$tmp/tokenizer.json" --compile --rounds "$rounds" t/fixtures/schemas/tool-*.json \
	"$tmp/all-56-tools-schema.json" "$tmp/claude-code-tools.json" "$tmp/codex-tools.json" "$tmp/qwen-code-tools.json"
