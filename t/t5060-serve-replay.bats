#!/usr/bin/env bats
# The prefix cache on a replayed coding-agent session (t/serve/replay/session.jsonl, written by
# make-session.py): three conversations with the same system prompt and tools, interleaved,
# each turn sending the whole conversation so far with one more tool call and its result
# (about 90 % of each prompt was in the previous one). Target: at least 80 % of all prompt
# tokens served from the cache, as usage.prompt_tokens_details.cached_tokens reports them, on
# the real engine.

load lib
load helper/serve

setup_file() {
	serve_fixture
}

teardown() {
	serve_kill_all "$BATS_TEST_TMPDIR"
}

@test "the replayed agent session takes at least 80 % of its prompt tokens from the prefix cache" {
	serve_start capy-serve "$ART" --profile test --model-id replay --max-context 8192
	python3 "$SRC/t/helper/serve-client.py" replay "http://127.0.0.1:$PORT" "$SRC/t/serve/replay/session.jsonl" \
		>"$BATS_TEST_TMPDIR/r.json"
	jq -c 'del(.turns)' "$BATS_TEST_TMPDIR/r.json"
	jq -e '.errors == 0 and .requests == 24' "$BATS_TEST_TMPDIR/r.json"
	echo "# replay: $(jq -r '"\(.cached_tokens) of \(.prompt_tokens) prompt tokens from the cache (\(.cached_share * 100 | floor) %) in \(.seconds) s"' "$BATS_TEST_TMPDIR/r.json")" >&3
	jq -e '.cached_share >= 0.80' "$BATS_TEST_TMPDIR/r.json"
	# Every turn after a conversation's first resumes at least where its previous prompt ended.
	jq -e '[.turns as $t | range(3; $t | length) | $t[.][3] >= $t[. - 3][2]] | all' "$BATS_TEST_TMPDIR/r.json"
	# /metrics agrees.
	api GET /metrics
	grep -q '^capy_cache_hits_total [1-9]' "$R"
}
