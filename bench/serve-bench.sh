#!/usr/bin/env bash
# bench/serve-bench.sh - capy-serve against capy-gen and against itself (docs/perf.md, "Serving").
#
#   bench/serve-bench.sh [DIR] [THREADS] [REPEAT]
#
# Models: the qwen3_5_moe fixture (tiny) and the synthetic Flash-Next-shaped model of
# bench/flash-synth.json (10.5 GB, written once into DIR; it has no tokenizer, so the real
# Qwen3 tokenizer of t/text/qwen3 is given to the server). Measured:
#   1. the server's own overhead: time to the first streamed token of a /v1/completions request
#      with token ids, minus capy-gen's prompt time for the same ids (median of REPEAT each);
#      for the fixture also a chat request, whose overhead adds template rendering and
#      tokenization;
#   2. aggregate decode rate at 1, 2, 4 and 8 simultaneous streamed requests (64 tokens each,
#      greedy, different 8-token prompts), against the single-request rate;
#   3. the replayed agent session (t/serve/replay/session.jsonl): the share of prompt tokens
#      served from the prefix cache, and the total time with and without the cache.
# Everything runs on this machine, one server at a time, with THREADS engine threads.
# SERVE_BENCH_FLASH=0 leaves the Flash-shaped model out (a quick run on the fixture).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/tmp/capy-serve-bench}
threads=${2:-0}
repeat=${3:-15}
bin=${CAPY_BIN:-$src/build/bin}
client=$src/t/helper/serve-client.py
mkdir -p "$dir"

[ -f "$dir/fixture.capy" ] || "$bin/capy-convert" -q -m "$src/t/fixtures/qwen3_5_moe" -o "$dir/fixture.capy"
flash=${SERVE_BENCH_FLASH:-1}
cp "$src/bench/flash-synth.json" "$dir/flash-config.json"
[ "$flash" = 0 ] || [ -f "$dir/flash.capy" ] || "$bin/capy-convert" --synthetic "$dir/flash-config.json" --quantize-experts nvfp4 \
	-o "$dir/flash.capy"
[ -f "$dir/tokenizer.json" ] || zstd -q -d "$src/t/text/qwen3/tokenizer.json.zst" -o "$dir/tokenizer.json"

pid=
stop() {
	[ -n "$pid" ] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=
}
trap stop EXIT

# start MODEL ARGS...: a server on a free port; sets url.
start() {
	local log=$dir/serve.log port=
	"$bin/capy-serve" "$@" --port 0 --threads "$threads" 2>"$log" &
	pid=$!
	for _ in $(seq 200); do
		port=$(sed -n 's|^capy-serve: serving .* on http://.*:\([0-9][0-9]*\) on .*|\1|p' "$log" | head -n 1)
		[ -n "$port" ] && break
		sleep 0.1
	done
	[ -n "$port" ] || { cat "$log" >&2; exit 1; }
	url=http://127.0.0.1:$port
}

ids() { python3 -c 'import random, sys; random.seed(int(sys.argv[2])); print(" ".join(str(random.randrange(min(1000, int(sys.argv[3]) // 2), int(sys.argv[3]))) for _ in range(int(sys.argv[1]))))' "$@"; }
json_ids() { echo "[$(ids "$@" | tr ' ' ',')]"; }

# capy-gen's prompt time (s), median of REPEAT: from its "prompt N tokens in S s (R tok/s)".
gen_prompt_s() {
	local model=$1 prompt=$2
	for _ in $(seq "$repeat"); do
		"$bin/capy-gen" "$model" --prompt-ids "$prompt" -n 1 --temp 0 -t "$threads" --ids 2>&1 >/dev/null |
			sed -n 's/.*prompt \([0-9]*\) tokens in [0-9.]* s (\([0-9.]*\) tok\/s).*/\1 \2/p' |
			awk '{ printf "%.6f\n", $1 / $2 }'
	done | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

# The overhead, two ways: against capy-gen's prompt time for the same ids (medians of REPEAT
# runs each), and per request: the client's time to first token minus the engine's own prefill
# time of that request, from its log line (immune to the drift of a long prefill's duration).
overhead() {
	local name=$1 model=$2 vocab=$3; shift 3
	local prompt body gen
	prompt=$(ids 32 7 "$vocab")
	body=$dir/ttft.json
	printf '{"model":"m","prompt":%s,"max_tokens":1,"temperature":0,"stream":true}' "$(json_ids 32 7 "$vocab")" >"$body"
	gen=$(gen_prompt_s "$model" "$prompt")
	start "$model" --model-id m --cache-mib 0 "$@"
	python3 "$client" ttft "$url" "$body" 2 >/dev/null # warm up
	python3 "$client" ttft "$url" "$body" "$repeat" >"$dir/ttft.out"
	report_ttft "$name: 32-token completions prompt" "$gen"
	if [ "$name" = fixture ]; then
		printf '{"model":"m","messages":[{"role":"user","content":"Tell me about capybaras, briefly."}],"max_tokens":1,"temperature":0,"stream":true}' >"$dir/chat.json"
		python3 "$client" ttft "$url" "$dir/chat.json" "$repeat" >"$dir/ttft.out"
		report_ttft "$name: chat request (template + tokenizer)" ""
	fi
	stop
}

# report_ttft LABEL [CAPY_GEN_S]: from ttft.out (the client's times, in request order) and the
# last REPEAT log lines of the server.
report_ttft() {
	python3 - "$1" "$2" "$dir/ttft.out" "$dir/serve.log" "$repeat" <<'PY'
import json, statistics, sys
label, gen, out, log, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
t = json.load(open(out))["ttft_order"]
lines = [json.loads(l) for l in open(log) if l.startswith("{") and '"prefill_ms"' in l][-n:]
per = [ti - (l["queue_ms"] + l["prefill_ms"]) / 1000 for ti, l in zip(t, lines)]
msg = "%s: first token %.2f ms (median of %d); server overhead per request %.2f ms (median; min %.2f)" % (
    label, 1000 * statistics.median(t), n, 1000 * statistics.median(per), 1000 * min(per))
if gen:
    msg += "; capy-gen prompt %.2f ms, difference of medians %.2f ms" % (1000 * float(gen), 1000 * (statistics.median(t) - float(gen)))
print(msg)
PY
}

concurrency() {
	local name=$1 model=$2 vocab=$3; shift 3
	local bodies=() one=
	for i in 1 2 3 4 5 6 7 8; do
		printf '{"model":"m","prompt":%s,"max_tokens":64,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' "$(json_ids 8 "$i" "$vocab")" \
			>"$dir/c$i.json"
		bodies+=("$dir/c$i.json")
	done
	start "$model" --model-id m --cache-mib 0 --max-concurrency 8 "$@"
	python3 "$client" concurrent "$url" 1 "${bodies[0]}" >/dev/null # warm up
	for n in 1 2 4 8; do
		r=$(python3 "$client" concurrent "$url" "$n" "${bodies[@]:0:$n}" |
			python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["decode_tokens_per_second"], d["completion_tokens"], d["errors"])')
		set -- $r
		[ -z "$one" ] && one=$1
		awk -v n="$name" -v k="$n" -v r="$1" -v one="$one" -v t="$2" -v e="$3" \
			'BEGIN { printf "%s: %d at once: %s tok/s aggregate decode (%.2fx one request; %s tokens, %s errors)\n", n, k, r, r / one, t, e }'
	done
	stop
}

replay() {
	local with without
	start "$dir/fixture.capy" --model-id replay --profile test --max-context 8192
	with=$(python3 "$client" replay "$url" "$src/t/serve/replay/session.jsonl")
	stop
	start "$dir/fixture.capy" --model-id replay --profile test --max-context 8192 --cache-mib 0
	without=$(python3 "$client" replay "$url" "$src/t/serve/replay/session.jsonl")
	stop
	python3 - "$with" "$without" <<'PY'
import json, sys
w, wo = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("replay (%d requests, %d prompt tokens): %.1f %% served from the cache; %.2f s with the cache, %.2f s "
      "without (%.1fx); errors %d / %d" % (w["requests"], w["prompt_tokens"], 100 * w["cached_share"], w["seconds"],
      wo["seconds"], wo["seconds"] / w["seconds"], w["errors"], wo["errors"]))
PY
}

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git -C "$src" rev-parse --short HEAD)"
overhead fixture "$dir/fixture.capy" 520
[ "$flash" = 0 ] || overhead flash "$dir/flash.capy" 151000 --tokenizer "$dir/tokenizer.json" --chat-template "$src/share/chat_templates/qwen3_5.jinja"
concurrency fixture "$dir/fixture.capy" 520
[ "$flash" = 0 ] || concurrency flash "$dir/flash.capy" 151000 --tokenizer "$dir/tokenizer.json" --chat-template "$src/share/chat_templates/qwen3_5.jinja"
replay
