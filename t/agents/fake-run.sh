#!/usr/bin/env bash
# fake-run.sh [AGENT [MODE]] - run the agent runners against t/helper/fake-llm-server.py, which
# plays scripts/AGENT.json: proves the runners and their scripts without capy-serve, and
# re-captures what the CLIs send (FAKE_CAPTURE=DIR: requests in DIR/AGENT-MODE/; the runner is
# then told the model, CAPY_MODEL=qwen3-fake, so that only the CLI's requests are there). With no
# AGENT, every runner in every mode. AGENT: claude, opencode, codex or qwen.
# Exit status: 0 when every run passed, 1 when one failed, 2 on bad usage.
set -u
dir=$(cd "$(dirname "$0")" && pwd)
scripts=${FAKE_SCRIPTS:-$dir/scripts}
all="claude:full claude:bare opencode:chat opencode:anthropic opencode:responses codex:responses
qwen:openai qwen:openai-responses qwen:anthropic"
if [ $# = 0 ]; then
	runs=$all
elif [ -f "$dir/scripts/$1.json" ]; then
	runs=$(for r in $all; do [ "${r%%:*}" = "$1" ] && { [ $# = 1 ] || [ "${r#*:}" = "$2" ]; } && echo "$r"; done)
	[ -n "$runs" ] || { echo "fake-run.sh: no mode '$2' for $1" >&2; exit 2; }
else
	echo "usage: $0 [claude|opencode|codex|qwen [MODE]]" >&2
	exit 2
fi
: "${CAPY_API_KEY:=sk-capy-test}"
export CAPY_API_KEY
failed=0 server='' tmp=''
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; [ -n "$tmp" ] && rm -rf "$tmp"' EXIT
for r in $runs; do
	agent=${r%%:*} mode=${r#*:}
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/capy-fake.XXXXXX")
	cap=()
	if [ -n "${FAKE_CAPTURE:-}" ]; then
		cap=(--capture-dir "$FAKE_CAPTURE/$agent-$mode")
		export CAPY_MODEL=qwen3-fake
	fi
	# shellcheck disable=SC2086 # FAKE_SERVER_ARGS: several words
	python3 "$dir/../helper/fake-llm-server.py" --port 0 --port-file "$tmp/port" \
		--script "$scripts/$agent.json" --api-key "$CAPY_API_KEY" "${cap[@]}" \
		${FAKE_SERVER_ARGS:-} --max-seconds $((${AGENT_TIMEOUT:-180} + 60)) 2>"$tmp/server.log" &
	server=$!
	for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
	if [ ! -s "$tmp/port" ]; then
		echo "fake-run.sh: the fake server did not start" >&2
		cat "$tmp/server.log" >&2
		exit 1
	fi
	[ "$agent" = codex ] && mode=
	# shellcheck disable=SC2086
	CAPY_URL=http://127.0.0.1:$(cat "$tmp/port") bash "$dir/run-$agent.sh" $mode
	rc=$?
	kill "$server" 2>/dev/null
	wait "$server" 2>/dev/null
	server=
	if [ $rc != 0 ]; then
		failed=1
		echo "--- fake server log" >&2
		cat "$tmp/server.log" >&2
	fi
	rm -rf "$tmp"
	tmp=
done
exit $failed
