#!/usr/bin/env bats
# capy-convert on every fixture family: convert, inspect, verify, and check the
# result byte for byte with an independent Python reader (t/helper/check-artifact.py).

load lib

@test "every fixture converts, verifies, and matches its checkpoint byte for byte" {
	for m in $FAMILIES; do
		run --separate-stderr capy-convert --model "$FIX/$m" --out "$BATS_TEST_TMPDIR/$m.capy"
		[ "$status" -eq 0 ]
		[ -z "$output" ]
		[[ "$stderr" == *"wrote '$BATS_TEST_TMPDIR/$m.capy'"* ]]
		run --separate-stderr capy-convert --verify "$BATS_TEST_TMPDIR/$m.capy"
		[ "$status" -eq 0 ]
		[[ "$output" == "$BATS_TEST_TMPDIR/$m.capy: ok ("* ]]
		run python3 "$SRC/t/helper/check-artifact.py" "$BATS_TEST_TMPDIR/$m.capy" "$FIX/$m"
		[ "$status" -eq 0 ]
		[[ "$output" == "ok: "* ]]
	done
}

@test "--quantize-experts nvfp4 gives ModelOpt's codes and scales bit for bit" {
	for m in qwen3_5_moe qwen3_next qwen4_exp; do
		capy-convert -q -m "$FIX/$m" -o "$BATS_TEST_TMPDIR/q.capy" --quantize-experts nvfp4
		run capy-convert --inspect "$BATS_TEST_TMPDIR/q.capy"
		[[ "$output" == *"layers.0.mlp.experts.gate_up_proj"*"NVFP4"*"parts 32+32"* ]]
		[[ "$output" == *"experts nvfp4-modelopt"* ]]
		run python3 "$SRC/t/helper/check-artifact.py" "$BATS_TEST_TMPDIR/q.capy" "$FIX/$m" --quantized-experts
		[ "$status" -eq 0 ]
	done
}

@test "the independent checker notices a single changed byte" {
	capy-convert -q -m "$FIX/qwen3_next" -o "$BATS_TEST_TMPDIR/a.capy"
	off=$(capy-convert --inspect "$BATS_TEST_TMPDIR/a.capy" --json |
		python3 -c 'import json,sys; d=json.load(sys.stdin); print([t for t in d["tensors"] if t["name"].endswith("in_proj_z.weight")][0]["offset"])')
	printf '\x55' | dd of="$BATS_TEST_TMPDIR/a.capy" bs=1 seek=$((off + 100)) conv=notrunc status=none
	run python3 "$SRC/t/helper/check-artifact.py" "$BATS_TEST_TMPDIR/a.capy" "$FIX/qwen3_next"
	[ "$status" -eq 1 ]
	[[ "$output" == *"in_proj_z.weight slice 0 differs"* ]]
	run --separate-stderr capy-convert --verify "$BATS_TEST_TMPDIR/a.capy"
	[ "$status" -eq 1 ]
	assert_one_error_line capy-convert
	[[ "$stderr" == *"tensor 'layers.0.linear_attn.in_proj_z.weight' at offset $off is damaged"* ]]
}

@test "--vision keeps the vision tower, without it is left out and counted" {
	run --separate-stderr capy-convert -m "$FIX/qwen3_5_moe" -o "$BATS_TEST_TMPDIR/a.capy"
	[[ "$stderr" == *"left out 21 vision tensors"* ]]
	run capy-convert --inspect "$BATS_TEST_TMPDIR/a.capy"
	[[ "$output" != *"visual."* ]]
	capy-convert -q -m "$FIX/qwen3_5_moe" --vision -o "$BATS_TEST_TMPDIR/v.capy"
	run capy-convert --inspect "$BATS_TEST_TMPDIR/v.capy"
	[[ "$output" == *"visual.patch_embed.proj.weight"* ]]
	run python3 "$SRC/t/helper/check-artifact.py" "$BATS_TEST_TMPDIR/v.capy" "$FIX/qwen3_5_moe" --vision
	[ "$status" -eq 0 ]
}

@test "the normalized config keeps the rope parameters of the checkpoint" {
	capy-convert -q -m "$FIX/qwen3_5_moe" -o "$BATS_TEST_TMPDIR/a.capy"
	run python3 -c 'import json, sys; c = json.load(sys.stdin)["model"]["config"]["rope_parameters"]; print(c["mrope_section"], c["mrope_interleaved"], c["rope_theta"])' \
		< <(capy-convert --inspect "$BATS_TEST_TMPDIR/a.capy" --json)
	[ "$output" = "[2, 1, 1] True 10000000" ]
}

@test "MTP tensors are kept and counted in the config" {
	# qwen4_exp's config has no MTP field: the checkpoint's mtp.layers.0 says there is one layer
	for m in qwen3_5_moe-nvfp4 qwen4_exp; do
		capy-convert -q -m "$FIX/$m" -o "$BATS_TEST_TMPDIR/a.capy"
		run capy-convert --inspect "$BATS_TEST_TMPDIR/a.capy" --json
		[[ "$output" == *'"mtp_num_hidden_layers":	1'* ]]
		[[ "$output" == *'"name":	"mtp.fc.weight"'* ]]
		[[ "$output" == *'"name":	"mtp.layers.0.mlp.experts.gate_up_proj"'* ]]
		[[ "$output" == *'"mtp":	"checked"'* ]]
	done
}

@test "NVFP4 checkpoints keep their scales: ModelOpt quads become NVFP4 tensors with parts" {
	capy-convert -q -m "$FIX/qwen3_5_moe-nvfp4" -o "$BATS_TEST_TMPDIR/a.capy"
	run capy-convert --inspect "$BATS_TEST_TMPDIR/a.capy"
	[[ "$output" == *"tensors: 86 (37 NVFP4)"* ]]
	[[ "$output" == *"layers.3.self_attn.q_proj.weight"*"NVFP4"* ]]
	[[ "$output" == *"layers.0.mlp.shared_expert.gate_up_proj.weight"*"parts 32+32"* ]]
	[[ "$output" == *"hf_quant_config.json"* ]]
}

@test "conversion is deterministic: same input, same bytes, whatever the thread count" {
	capy-convert -q -m "$FIX/qwen4_exp" -o "$BATS_TEST_TMPDIR/a.capy" --threads 1
	capy-convert -q -m "$FIX/qwen4_exp" -o "$BATS_TEST_TMPDIR/b.capy" --threads 3
	cmp "$BATS_TEST_TMPDIR/a.capy" "$BATS_TEST_TMPDIR/b.capy"
}

@test "--inspect prints the model, provenance, files and tensor table" {
	capy-convert -q -m "$FIX/qwen4_exp" -o "$BATS_TEST_TMPDIR/a.capy"
	run --separate-stderr capy-convert --inspect "$BATS_TEST_TMPDIR/a.capy"
	[ "$status" -eq 0 ]
	[[ "$output" == *"family:     qwen4_exp"* ]]
	[[ "$output" == *"4 layers (3 linear_attention, 1 qwen_sparse_attention)"* ]]
	[[ "$output" == *"tokenizer.json"* ]]
	[[ "$output" == *"layers.0.ple.ple_embedding.ngram_embedding.weight"*"BF16"*"[4096, 8]"* ]]
	[[ "$output" == *"hyper_connection_mixer.input_mix_weight_up.weight"* ]]
	[[ "$output" == *"expert stacks: 5"* ]] # the four layers' and the MTP head's
	[[ "$output" == *"MTP 1"* ]]
	[[ "$output" == *"mtp.layers.0.self_attn.indexer.index_qk_proj.weight"* ]]
	[[ "$output" == *"mtp.hyper_connection_mixer.input_mix_weight_up.weight"* ]]
}

@test "--inspect --json prints the directory as valid JSON with the header facts" {
	capy-convert -q -m "$FIX/qwen3_next" -o "$BATS_TEST_TMPDIR/a.capy"
	capy-convert --inspect "$BATS_TEST_TMPDIR/a.capy" --json >"$BATS_TEST_TMPDIR/d.json"
	run python3 - "$BATS_TEST_TMPDIR/d.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "capy" and d["version"] == 1 and d["model"]["family"] == "qwen3_next"
assert d["header"]["data_offset"] % 4096 == 0
c = d["model"]["config"]
assert c["layer_types"] == ["linear_attention"] * 3 + ["full_attention"]
assert c["rope_parameters"]["partial_rotary_factor"] == 0.25 and c["eos_token_id"] == [514]
names = {t["name"] for t in d["tensors"]}
assert "layers.0.linear_attn.in_proj_qkv.weight" in names and "layers.0.linear_attn.in_proj_ba.weight" not in names
rec = d["provenance"]["recipe"]
assert any("de-interleaved" in x for x in rec["transforms"])
print("ok")
PY
	[ "$status" -eq 0 ]
	[ "$output" = ok ]
}

@test "--synthetic writes a verifiable artifact of the config, reproducible by seed" {
	cat >"$BATS_TEST_TMPDIR/config.json" <<'JSON'
{"model_type": "qwen4_exp", "text_config": {"vocab_size": 1024, "hidden_size": 128, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 2,
 "linear_num_value_heads": 4, "linear_key_head_dim": 32, "linear_value_head_dim": 32, "num_experts": 16,
 "num_experts_per_tok": 4, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "hc_lowrank": 16,
 "ple_layer_ids": [1], "ngram_vocab_size_base": 500, "heads_per_ngram": 2, "ple_embed_dim": 64,
 "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 32, "indexer_budget": 8,
 "indexer_compress_ratio": 4, "eos_token_id": 3}}
JSON
	cp "$FIX/qwen4_exp/tokenizer.json" "$BATS_TEST_TMPDIR/"
	capy-convert -q --synthetic "$BATS_TEST_TMPDIR/config.json" --out "$BATS_TEST_TMPDIR/a.capy" --quantize-experts nvfp4
	capy-convert -q --synthetic "$BATS_TEST_TMPDIR/config.json" --out "$BATS_TEST_TMPDIR/b.capy" --quantize-experts nvfp4 -t 1
	capy-convert -q --synthetic "$BATS_TEST_TMPDIR/config.json" --out "$BATS_TEST_TMPDIR/c.capy" --quantize-experts nvfp4 --seed 2
	cmp "$BATS_TEST_TMPDIR/a.capy" "$BATS_TEST_TMPDIR/b.capy"
	! cmp -s "$BATS_TEST_TMPDIR/a.capy" "$BATS_TEST_TMPDIR/c.capy"
	run capy-convert --verify "$BATS_TEST_TMPDIR/a.capy"
	[ "$status" -eq 0 ]
	run capy-convert --inspect "$BATS_TEST_TMPDIR/a.capy"
	[[ "$output" == *"synthetic (random weights)"* ]]
	[[ "$output" == *"tokenizer.json"* ]]
	[[ "$output" == *"layers.3.mlp.experts.gate_up_proj"*"NVFP4"* ]]
	[[ "$output" == *"layers.3.self_attn.indexer.index_qk_proj.weight"* ]]
}

@test "an existing artifact is replaced only when the new one is complete" {
	capy-convert -q -m "$FIX/qwen3_next" -o "$BATS_TEST_TMPDIR/a.capy"
	cp "$BATS_TEST_TMPDIR/a.capy" "$BATS_TEST_TMPDIR/before"
	d=$(copy_fixture qwen3_next)
	python3 "$SRC/t/helper/st-edit.py" "$d/model.safetensors" truncate -10
	run capy-convert -q -m "$d" -o "$BATS_TEST_TMPDIR/a.capy"
	[ "$status" -eq 1 ]
	cmp "$BATS_TEST_TMPDIR/a.capy" "$BATS_TEST_TMPDIR/before"
}
