#!/usr/bin/env bats
# The context cache's host-RAM and disk tiers (--host-cache-mib, --disk-cache-dir): a
# conversation pushed out of the device tier (a prefix cache smaller than one snapshot, so
# every entry is evicted as soon as it is made) by other conversations comes back from host
# RAM and from disk with the same answer as a cold prefill and as a device-tier hit; usage,
# the request log and /metrics say which tier; a restarted server resumes from the disk; and
# capy-kvdump lists, verifies and decodes the entries.

load lib
load helper/serve

setup_file() {
	serve_fixture
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
}

SYS='you are a helpful assistant that likes foxes and dogs very much'

# chat_body FILE [ANSWER]: the conversation's first turn, or with ANSWER its second.
chat_body() {
	if [ $# -eq 1 ]; then
		jq -nc --arg s "$SYS" '{model: "m", max_tokens: 12, temperature: 0, messages: [{role: "system", content: $s},
			{role: "user", content: "tell me about the quick brown fox"}]}' >"$1"
	else
		jq -nc --arg s "$SYS" --arg a "$2" '{model: "m", max_tokens: 12, temperature: 0, messages: [
			{role: "system", content: $s}, {role: "user", content: "tell me about the quick brown fox"},
			{role: "assistant", content: $a}, {role: "user", content: "and what about the lazy dog?"}]}' >"$1"
	fi
}

others() {
	local i
	for i in 1 2 3; do
		api POST /v1/chat/completions "{\"model\":\"m\",\"max_tokens\":4,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"something else entirely, number $i of them\"}]}"
		[ "$CODE" = 200 ]
	done
}

# second_turn [EXPECTED TIER]: the conversation's two turns with others in between; the
# second turn's answer into $BATS_TEST_TMPDIR/answer, its usage into usage.json.
second_turn() {
	chat_body "$BATS_TEST_TMPDIR/t1.json"
	api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/t1.json"
	[ "$CODE" = 200 ]
	chat_body "$BATS_TEST_TMPDIR/t2.json" "$(jq -r '.choices[0].message.content' "$R")"
	others
	api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/t2.json"
	[ "$CODE" = 200 ]
	jq -r '.choices[0].message.content' "$R" >"$BATS_TEST_TMPDIR/answer"
	jq -c .usage "$R" >"$BATS_TEST_TMPDIR/usage.json"
}

cold_answer() {
	chat_body "$BATS_TEST_TMPDIR/t1.json"
	serve_start capy-serve "$ART" --profile test --model-id m --cache-mib 0
	api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/t1.json"
	chat_body "$BATS_TEST_TMPDIR/t2.json" "$(jq -r '.choices[0].message.content' "$R")"
	api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/t2.json"
	jq -r '.choices[0].message.content' "$R" >"$BATS_TEST_TMPDIR/cold"
	jq -e '.usage.prompt_tokens_details.cached_tokens == 0' "$R"
	serve_stop
}

@test "a conversation evicted from the device tier comes back from host RAM with the cold prefill's answer" {
	cold_answer
	# the device tier (a cache that keeps it) gives the same answer
	serve_start capy-serve "$ART" --profile test --model-id m --cache-mib 64
	second_turn
	jq -e '.prompt_tokens_details.cached_tokens > 0 and .prompt_tokens_details.cache_tier == "device"' "$BATS_TEST_TMPDIR/usage.json"
	cmp "$BATS_TEST_TMPDIR/cold" "$BATS_TEST_TMPDIR/answer"
	serve_stop
	serve_start capy-serve "$ART" --profile test --model-id m --cache-mib 0.05 --host-cache-mib 64
	second_turn
	jq -e '.prompt_tokens_details.cached_tokens > 0 and .prompt_tokens_details.cache_tier == "host"' "$BATS_TEST_TMPDIR/usage.json"
	cmp "$BATS_TEST_TMPDIR/cold" "$BATS_TEST_TMPDIR/answer"
	grep -q '"cache_tier":"host"' "$SERVER_LOG"
	api GET /metrics
	grep -q '^capy_cache_tier_hits_total{tier="host"} [1-9]' "$R"
	grep -q '^capy_cache_demotions_total{tier="host"} [1-9]' "$R"
	grep -q '^capy_cache_tier_hits_total{tier="disk"} 0' "$R"
}

@test "from disk too, and after a restart with the same --disk-cache-dir; capy-kvdump reads the entries" {
	cold_answer
	local dir=$BATS_TEST_TMPDIR/kv
	serve_start capy-serve "$ART" --profile test --model-id m --cache-mib 0.05 --disk-cache-dir "$dir" --disk-cache-gib 1
	second_turn
	jq -e '.prompt_tokens_details.cached_tokens > 0 and .prompt_tokens_details.cache_tier == "disk"' "$BATS_TEST_TMPDIR/usage.json"
	cmp "$BATS_TEST_TMPDIR/cold" "$BATS_TEST_TMPDIR/answer"
	api GET /metrics
	grep -q '^capy_cache_tier_hits_total{tier="disk"} [1-9]' "$R"
	grep -q '^capy_cache_disk_entries [1-9]' "$R"
	serve_stop
	[ "$SERVER_RC" = 0 ]
	ls "$dir"/*.capykv

	# a new server finds the conversation on disk: the second turn alone resumes it
	serve_start capy-serve "$ART" --profile test --model-id m --cache-mib 0.05 --disk-cache-dir "$dir"
	grep -q 'context cache tiers: host RAM off, disk .* ([1-9][0-9]* entries' "$SERVER_LOG"
	api POST /v1/chat/completions "@$BATS_TEST_TMPDIR/t2.json"
	jq -e '.usage.prompt_tokens_details.cached_tokens > 0 and .usage.prompt_tokens_details.cache_tier == "disk"' "$R"
	[ "$(jq -r '.choices[0].message.content' "$R")" = "$(cat "$BATS_TEST_TMPDIR/cold")" ]
	serve_stop

	# capy-kvdump: listing, JSON, tokens, verify
	run capy-kvdump "$dir"
	[ "$status" = 0 ]
	[[ "$output" == *"qwen3_5_moe"*"KV bf16"*"section 2  pages"* ]]
	capy-kvdump --json --verify --model "$ART" "$dir" >"$BATS_TEST_TMPDIR/dump.json"
	jq -e 'length > 0 and all(.ok and .this_model and .family == "qwen3_5_moe" and .kv_dtype == "bf16"
		and (.sections | length) == 4 and .raw_bytes > 0 and .file_bytes > 0)' "$BATS_TEST_TMPDIR/dump.json"
	run capy-kvdump --tokens "$dir"
	[ "$status" = 2 ]
	# the cached prompt decodes to the conversation's text
	capy-kvdump --tokens --model "$ART" --json "$dir" >"$BATS_TEST_TMPDIR/tok.json"
	jq -e 'any(.text | contains("the quick brown fox"))' "$BATS_TEST_TMPDIR/tok.json"

	# a corrupted copy: --verify names it and the section, exit 1; a server refuses and removes it
	local one bad=$BATS_TEST_TMPDIR/bad
	mkdir "$bad"
	one=$(ls "$dir"/*.capykv | head -n 1)
	cp "$one" "$bad/x.capykv"
	off=$(capy-kvdump --json "$bad/x.capykv" | jq '.[0].sections[2] | .offset + (.stored_bytes / 2 | floor)')
	printf '\xff' | dd of="$bad/x.capykv" bs=1 seek="$off" conv=notrunc status=none
	cmp -s "$one" "$bad/x.capykv" && printf '\x00' | dd of="$bad/x.capykv" bs=1 seek="$off" conv=notrunc status=none
	run capy-kvdump "$bad/x.capykv"
	[ "$status" = 0 ] # the listing reads the header and ids only
	run capy-kvdump --verify "$bad"
	[ "$status" = 1 ]
	[[ "$output" == *"x.capykv"*"section 2 (pages)"* ]]
	printf 'not an entry' >"$bad/y.capykv"
	run capy-kvdump --verify "$bad/y.capykv"
	[ "$status" = 1 ]
	[[ "$output" == *"truncated"* ]]
	serve_start capy-serve "$ART" --profile test --model-id m --disk-cache-dir "$bad"
	grep -q "refused and removed: .*y.capykv.*truncated" "$SERVER_LOG"
	[ ! -e "$bad/y.capykv" ]
}
