# shellcheck shell=bash disable=SC2034
# t/agents/lib.sh - what the run-*.sh agent runners share; sourced, not run.
#
# A runner drives one agent CLI through a task that needs one tool round against a server
# speaking the OpenAI/Anthropic APIs (capy-serve, or t/helper/fake-llm-server.py): a scratch
# HOME and work directory holding hello.txt, the CLI run non-interactively under a hard
# timeout with only loopback networking, then check-run.py on what it printed.
#
# Environment:
#   CAPY_URL       the server, e.g. http://127.0.0.1:18555 (a trailing /v1 is dropped)
#   CAPY_API_KEY   the key the CLI sends (default sk-capy-test)
#   CAPY_MODEL     the model name (default: the first id GET $CAPY_URL/v1/models lists)
#   AGENT_TIMEOUT  seconds the CLI may run (default 180)
#   AGENT_KEEP=1   keep the scratch directory (it is always kept when the run fails)
#   AGENT_BIN_DIR  where the CLIs are (default t/agents/node_modules/.bin: cd t/agents && npm ci)
#
# Network: when this process sees an interface other than lo (/proc/net/dev), the runner
# re-runs itself under `unshare -n` (`unshare -rn` when not root), so the CLI can reach
# nothing but loopback. The server stays reachable through t/helper/sock-relay.py: one relay
# outside listens on a unix socket in the scratch directory and connects to CAPY_URL, one
# inside listens on 127.0.0.1:PORT and connects to that socket. Already in a private
# namespace (a test that started the server inside one), the CLI talks to CAPY_URL directly.
#
# Exit status: 0 when the CLI exited 0 and its output shows the tool round done, 1 when not,
# 2 on bad usage or a CLI that is not installed.

AGENTS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
HELPER_DIR=$(cd "$AGENTS_DIR/../helper" && pwd)
: "${CAPY_URL:=http://127.0.0.1:18555}"
CAPY_URL=${CAPY_URL%/}
CAPY_URL=${CAPY_URL%/v1}
: "${CAPY_API_KEY:=sk-capy-test}"
: "${AGENT_TIMEOUT:=180}"
: "${AGENT_BIN_DIR:=$AGENTS_DIR/node_modules/.bin}"
# The prompt names the file; the file holds the marker, which only the tool result can carry
# back to the server (the scripts in scripts/ answer the tool result on it).
AGENT_PROMPT="Read the file hello.txt in the current directory and tell me the secret word in it."
AGENT_MARKER="capybara-7f3a"
AGENT_DONE="TOOL-ROUND-OK"

agent_say() { echo "$AGENT_NAME${AGENT_MODE:+ $AGENT_MODE}: $*" >&2; }

private_netns() {
	awk -F: 'NR > 2 { gsub(/ /, "", $1); if ($1 != "lo") other = 1 } END { exit other }' /proc/net/dev
}

wait_file() {
	for _ in $(seq 100); do
		[ -e "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

# agent_start NAME MODE CLI "$@": checks, scratch directory, network namespace. Returns only
# in a namespace with nothing but loopback; the outer process waits for the inner one, cleans
# up and exits with its status.
agent_start() {
	AGENT_NAME=$1 AGENT_MODE=$2 AGENT_CLI=$AGENT_BIN_DIR/$3
	shift 3
	if [ ! -x "$AGENT_CLI" ]; then
		agent_say "$AGENT_CLI is not installed: (cd t/agents && npm ci)"
		exit 2
	fi
	if [[ ! $CAPY_URL =~ ^http://([^/:]+):([0-9]+)$ ]]; then
		agent_say "CAPY_URL must be http://HOST:PORT, not '$CAPY_URL'"
		exit 2
	fi
	local host=${BASH_REMATCH[1]} port=${BASH_REMATCH[2]} owner=
	if [ -z "${AGENT_SCRATCH:-}" ]; then
		AGENT_SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/capy-$AGENT_NAME.XXXXXX") || exit 1
		export AGENT_SCRATCH
		mkdir -p "$AGENT_SCRATCH/home" "$AGENT_SCRATCH/work"
		echo "The secret word is $AGENT_MARKER." >"$AGENT_SCRATCH/work/hello.txt"
		owner=1
	fi
	if ! private_netns; then
		if [ -n "${AGENT_RELAY_SOCK:-}" ]; then
			agent_say "unshare -n left other interfaces than lo"
			exit 1
		fi
		local sock=$AGENT_SCRATCH/relay.sock relay rc ns=(unshare -n)
		[ "$(id -u)" = 0 ] || ns=(unshare -rn)
		python3 "$HELPER_DIR/sock-relay.py" --ready "$sock.ready" --max-seconds $((AGENT_TIMEOUT + 120)) \
			"unix:$sock" "tcp:$host:$port" &
		relay=$!
		wait_file "$sock.ready" || { kill "$relay"; agent_say "the relay did not start"; exit 1; }
		AGENT_RELAY_SOCK=$sock "${ns[@]}" -- bash "$0" "$@"
		rc=$?
		kill "$relay" 2>/dev/null
		wait "$relay" 2>/dev/null
		agent_finish "$rc" "$owner"
	fi
	if [ -n "${AGENT_RELAY_SOCK:-}" ]; then
		ip link set lo up || exit 1
		python3 "$HELPER_DIR/sock-relay.py" --ready "$AGENT_SCRATCH/relay-in.ready" \
			--max-seconds $((AGENT_TIMEOUT + 60)) "tcp:127.0.0.1:$port" "unix:$AGENT_RELAY_SOCK" &
		AGENT_RELAY_PID=$!
		trap 'kill "$AGENT_RELAY_PID" 2>/dev/null' EXIT
		wait_file "$AGENT_SCRATCH/relay-in.ready" || exit 1
		CAPY_URL=http://127.0.0.1:$port
	elif [ -n "$owner" ]; then
		trap 'agent_cleanup $?' EXIT
	fi
	AGENT_HOME=$AGENT_SCRATCH/home AGENT_WORK=$AGENT_SCRATCH/work
	agent_model
}

agent_cleanup() {
	if [ "$1" = 0 ] && [ -z "${AGENT_KEEP:-}" ]; then
		rm -rf "$AGENT_SCRATCH"
	else
		agent_say "scratch directory kept: $AGENT_SCRATCH"
	fi
}

agent_finish() {
	[ -n "$2" ] && agent_cleanup "$1"
	exit "$1"
}

agent_model() {
	[ -n "${CAPY_MODEL:-}" ] && return 0
	CAPY_MODEL=$(python3 - "$CAPY_URL" "$CAPY_API_KEY" <<-'EOF'
		import json, sys, urllib.request
		opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
		req = urllib.request.Request(sys.argv[1] + "/v1/models", headers={"Authorization": "Bearer " + sys.argv[2]})
		print(json.load(opener.open(req, timeout=10))["data"][0]["id"])
	EOF
	) || { agent_say "cannot list the models at $CAPY_URL/v1/models"; exit 1; }
}

# agent_run VAR=VALUE... -- CLI ARGS...: the CLI in the work directory with only the listed
# environment (plus PATH, the scratch HOME and TMPDIR, LANG, TERM=dumb, USER, SHELL, NO_COLOR),
# stdin from /dev/null, under the timeout;
# stdout to $AGENT_SCRATCH/out, stderr to $AGENT_SCRATCH/err. Returns the CLI's status.
agent_run() {
	local envs=()
	while [ "$1" != -- ]; do
		envs+=("$1")
		shift
	done
	shift
	mkdir -p "$AGENT_SCRATCH/tmp"
	(cd "$AGENT_WORK" && exec env -i PATH="$PATH" HOME="$AGENT_HOME" LANG=C.UTF-8 TERM=dumb \
		USER="${USER:-root}" SHELL=/bin/bash TMPDIR="$AGENT_SCRATCH/tmp" NO_COLOR=1 "${envs[@]}" \
		timeout -k 10 "$AGENT_TIMEOUT" "$@" </dev/null >"$AGENT_SCRATCH/out" 2>"$AGENT_SCRATCH/err")
}

# agent_check STATUS KIND: the verdict on the run, from the CLI's status and check-run.py.
agent_check() {
	local why
	if [ "$1" = 0 ] && why=$(python3 "$AGENTS_DIR/check-run.py" "$2" "$AGENT_SCRATCH/out" "$AGENT_MARKER" "$AGENT_DONE"); then
		agent_say "ok ($why)"
		exit 0
	fi
	[ "$1" = 0 ] || why="the CLI exited $1$([ "$1" = 124 ] && echo " (timed out after $AGENT_TIMEOUT s)")"
	agent_say "FAIL: $why"
	echo "--- stdout (last 40 lines)" >&2
	tail -n 40 "$AGENT_SCRATCH/out" >&2
	echo "--- stderr (last 40 lines)" >&2
	tail -n 40 "$AGENT_SCRATCH/err" >&2
	exit 1
}
