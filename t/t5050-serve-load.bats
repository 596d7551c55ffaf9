#!/usr/bin/env bats
# capy-serve under load, on the real engine (the qwen3_5_moe fixture): eight simultaneous
# streamed requests each give the bytes they give alone (greedy; the engine's step is
# batch-invariant and prompt pieces are cut by each request alone), and sixteen streaming
# clients for 30 s get no error while the server's memory stays put.

load lib
load helper/serve

CLIENT=$SRC/t/helper/serve-client.py

setup_file() {
	serve_fixture
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
}

# Eight different conversations (the first user words differ), greedy, 24 tokens each.
bodies() {
	for i in 1 2 3 4 5 6 7 8; do
		printf '{"model":"m","messages":[{"role":"user","content":"%s question number %d: how do pages get shared?"}],"max_tokens":24,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' \
			"$(printf 'alpha\nbravo\ncharlie\ndelta\necho\nfoxtrot\ngolf\nhotel' | sed -n "${i}p")" "$i" >"$BATS_TEST_TMPDIR/b$i.json"
		echo "$BATS_TEST_TMPDIR/b$i.json"
	done
}

@test "8 simultaneous streaming requests give, each, the bytes they give alone (greedy)" {
	mapfile -t files < <(bodies)
	# Alone: one after the other, on a fresh server (the prefix cache would make a repeated
	# prompt start from a snapshot, which may change the last bits).
	serve_start capy-serve "$ART" --profile test --model-id m
	for i in 0 1 2 3 4 5 6 7; do
		python3 "$CLIENT" concurrent "http://127.0.0.1:$PORT" 1 "${files[$i]}" >"$BATS_TEST_TMPDIR/alone$i.json"
	done
	serve_stop
	serve_start capy-serve "$ART" --profile test --model-id m
	python3 "$CLIENT" concurrent "http://127.0.0.1:$PORT" 8 "${files[@]}" >"$BATS_TEST_TMPDIR/together.json"
	python3 - "$BATS_TEST_TMPDIR" >&3 <<'PY'
import json, sys
d = sys.argv[1]
together = json.load(open(d + "/together.json"))
assert together["errors"] == 0, together["error_examples"]
for i in range(8):
    alone = json.load(open("%s/alone%d.json" % (d, i)))["results"][0]
    got = together["results"][i]
    assert alone["text"] == got["text"], (i, alone["text"], got["text"])
    assert alone["completion_tokens"] == got["completion_tokens"] == 24, (alone, got)
print("# 8 at once: %.1f tok/s aggregate decode, %.1f tok/s all in" %
      (together["decode_tokens_per_second"], together["tokens_per_second"]))
PY
	serve_stop
}

rss_kib() {
	awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"
}

@test "16 streaming clients for 30 s: no errors, resident memory grows less than 5 %" {
	# A prefix cache that its budget holds after the warm-up (every answer adds a snapshot), so
	# that growth after it would be a leak, not the cache filling up.
	serve_start capy-serve "$ART" --profile test --model-id m --max-concurrency 8 --max-connections 64 --cache-mib 2
	printf '{"model":"m","messages":[{"role":"user","content":"Write about capybaras."}],"max_tokens":16,"temperature":0.8,"stream":true,"stream_options":{"include_usage":true}}' \
		>"$BATS_TEST_TMPDIR/load.json"
	# Warm up: threads, arenas and the prefix cache reach their working size.
	python3 "$CLIENT" load "http://127.0.0.1:$PORT" 16 20 "$BATS_TEST_TMPDIR/load.json" >"$BATS_TEST_TMPDIR/warm.json"
	before=$(rss_kib "$SERVER_PID")
	python3 "$CLIENT" load "http://127.0.0.1:$PORT" 16 30 "$BATS_TEST_TMPDIR/load.json" >"$BATS_TEST_TMPDIR/load.out"
	after=$(rss_kib "$SERVER_PID")
	cat "$BATS_TEST_TMPDIR/load.out"
	jq -e '.errors == 0 and .requests > 16' "$BATS_TEST_TMPDIR/load.out"
	echo "# load: $(jq -r '"\(.requests) requests, \(.completion_tokens) tokens in \(.seconds) s"' "$BATS_TEST_TMPDIR/load.out"); RSS $before -> $after KiB" >&3
	echo "RSS before $before KiB, after $after KiB"
	# Under AddressSanitizer freed memory waits in its quarantine (256 MB), so RSS says nothing
	# there; LeakSanitizer checks for leaks when the server exits instead.
	[ "${CAPY_SAN:-0}" = 1 ] || [ "$after" -lt $((before * 105 / 100)) ]
	health_ok
}
