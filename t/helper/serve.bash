# t/helper/serve.bash - starting, talking to and stopping capy-serve in the BATS tests.
# Load after lib: `load lib; load helper/serve`.
#
#	CAPY_SCRIPT=$SCRIPTS/chat.json serve_start capy-serve-scripted "$ART" --log-prompts
#	api POST /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}]}'
#	[ "$CODE" = 200 ]; [ "$(jv '.choices[0].message.content')" = "Hello." ]
#	sse chat          (the stream in $R checked; its summary in $R.sum: jv FILTER "$R.sum")
#	serve_stop
#
# Every server listens on 127.0.0.1 with --port 0 and is killed by serve_kill_all (teardown,
# teardown_file); every wait is bounded (curl --max-time, loops with a count).

SERVE_CHECK=$SRC/t/helper/serve-check.py
SCRIPTS=$SRC/t/serve/scripts
# The interpreter itself, found once per file and inherited by its tests: a version manager's
# python3 shim costs more to start than the checks take.
: "${SERVE_PYTHON:=$(python3 -c 'import sys; print(sys.executable)')}"
export SERVE_PYTHON

# check ARGS...: t/helper/serve-check.py (raw-socket clients; see its header). In the
# background, run "$SERVE_PYTHON" "$SERVE_CHECK" itself, so that $! is the client's pid.
check() {
	"$SERVE_PYTHON" "$SERVE_CHECK" "$@"
}

# Where this scope keeps its servers: the test's directory inside a test, the file's in
# setup_file.
serve_dir() {
	if [ -n "${BATS_TEST_NUMBER:-}" ] && [ -n "${BATS_TEST_TMPDIR:-}" ]; then
		echo "$BATS_TEST_TMPDIR"
	else
		echo "$BATS_FILE_TMPDIR"
	fi
}

# serve_start PROGRAM ARGS...: start a server in the background (adding --port 0 unless the
# arguments give a port), wait up to 20 s for its startup line and set PORT, SERVER_PID and
# SERVER_LOG (its stderr: the banner, then one JSON line per request). Fails, showing the
# log, if the server exits first.
serve_start() {
	local dir n log port="" i args=("$@")
	dir=$(serve_dir)
	n=$(find "$dir" -maxdepth 1 -name 'serve-*.log' | wc -l)
	log=$dir/serve-$n.log
	[[ " $* " == *" --port "* || " $* " == *" --port="* ]] || args+=(--port 0)
	"${args[@]}" </dev/null >"$dir/serve-$n.out" 2>"$log" 3>&- &
	SERVER_PID=$!
	echo "$SERVER_PID" >>"$dir/serve.pids"
	SERVER_LOG=$log
	for ((i = 0; i < 200; i++)); do
		port=$(sed -n 's|^[a-z-]*: serving .* on http://.*:\([0-9][0-9]*\) on .*|\1|p' "$log" | head -n 1)
		[ -n "$port" ] && break
		if ! kill -0 "$SERVER_PID" 2>/dev/null; then
			echo "the server exited before listening:" >&2
			cat "$log" >&2
			return 1
		fi
		sleep 0.1
	done
	if [ -z "$port" ]; then
		echo "no startup line within 20 s:" >&2
		cat "$log" >&2
		return 1
	fi
	PORT=$port
	export PORT SERVER_PID SERVER_LOG
}

# serve_stop [PID]: SIGTERM, wait up to 15 s, then SIGKILL (a failure). Sets SERVER_RC.
serve_stop() {
	local pid=${1:-$SERVER_PID} i
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 150; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		kill -KILL "$pid" 2>/dev/null || true
		echo "server $pid did not stop within 15 s of SIGTERM" >&2
		return 1
	fi
	SERVER_RC=0
	wait "$pid" 2>/dev/null || SERVER_RC=$?
}

# serve_fixture: (in setup_file) the qwen3_5_moe fixture converted to an artifact, path in ART.
serve_fixture() {
	export ART=$BATS_FILE_TMPDIR/fixture.capy
	capy-convert -q -m "$FIX/qwen3_5_moe" -o "$ART"
}

# serve_kill_all DIR: kill every server started in that scope (teardown).
serve_kill_all() {
	local pids=$1/serve.pids pid
	[ -f "$pids" ] || return 0
	while read -r pid; do
		kill -KILL "$pid" 2>/dev/null || continue
		wait "$pid" 2>/dev/null || true # reaped here: bash reports no "Killed" job
	done <"$pids"
	rm -f "$pids"
}

# api METHOD PATH [BODY|@FILE|''] [CURL ARGS...]: one request to 127.0.0.1:$PORT (or
# $API_PORT). The body goes to $R, the headers to $R.h, the status to CODE. Bounded by
# --max-time (10 s, or $API_TIME).
api() {
	local method=$1 path=$2 body=${3-} data=()
	shift 2
	[ $# -gt 0 ] && shift
	R=$BATS_TEST_TMPDIR/resp
	if [ -n "$body" ]; then
		if [[ "$body" == @* ]]; then
			data=(--data-binary "$body")
		else
			printf '%s' "$body" >"$R.req"
			data=(--data-binary "@$R.req")
		fi
		data+=(-H 'Content-Type: application/json')
	fi
	if [ "$method" = HEAD ]; then
		data+=(-I)
	else
		data+=(-X "$method")
	fi
	CODE=$(curl -sS --max-time "${API_TIME:-10}" -o "$R" -D "$R.h" -w '%{http_code}' \
		"${data[@]}" "$@" "http://127.0.0.1:${API_PORT:-$PORT}$path")
}

# jv FILTER [FILE]: jq -r FILTER of the JSON document in FILE ($R); fails on a body that is
# not JSON.
jv() {
	jq -r "$1" "${2:-$R}"
}

# sse API [FILE]: check the stream in FILE ($R) as the API's SSE (chat, completions,
# responses, messages): every data line valid UTF-8 and JSON, framing, the API's order and
# numbering; its summary (text, reasoning, tool calls, finish, usage, event types) to $R.sum.
sse() {
	"$SERVE_PYTHON" "$SERVE_CHECK" sse "$1" "${2:-$R}" >"$R.sum"
}

# header NAME: a response header of the last api call ($R.h), without CR.
header() {
	sed -n "s/^$1: *//Ip" "$R.h" | tr -d '\r' | tail -n 1
}

# health_ok: the server still answers /health 200.
health_ok() {
	local c
	c=$(curl -sS --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:${API_PORT:-$PORT}/health")
	[ "$c" = 200 ] || { echo "/health answered $c" >&2; return 1; }
}

# log_line_for ID: the server log's JSON line of the request with that id (x-request-id).
log_line_for() {
	local i
	for ((i = 0; i < 50; i++)); do
		grep -F "\"id\":\"$1\"" "${SERVER_LOG}" && return 0
		sleep 0.1
	done
	echo "no log line for $1 in $SERVER_LOG" >&2
	return 1
}

# wait_for_log PATTERN [TRIES]: wait (0.1 s a try, 50 by default) for a line of the log.
wait_for_log() {
	local i
	for ((i = 0; i < ${2:-50}; i++)); do
		grep -q -- "$1" "$SERVER_LOG" && return 0
		sleep 0.1
	done
	echo "no '$1' in $SERVER_LOG:" >&2
	tail -n 5 "$SERVER_LOG" >&2
	return 1
}

# chat_body TEXT [EXTRA JSON FIELDS]: a one-message chat request.
chat_body() {
	printf '{"messages":[{"role":"user","content":"%s"}]%s}' "$1" "${2:+,$2}"
}
