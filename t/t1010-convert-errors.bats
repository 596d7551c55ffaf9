#!/usr/bin/env bats
# capy-convert on bad input: each case fails with exit 1 and one line on stderr that
# names the file, the tensor and the offset where that makes sense, and leaves
# nothing behind in the output directory.

load lib

setup() {
	OUT=$BATS_TEST_TMPDIR/out
	mkdir -p "$OUT"
}

edit() {
	python3 "$SRC/t/helper/st-edit.py" "$@"
}

# convert DIR: run capy-convert into $OUT and check the failure's shape.
convert_fails() {
	run --separate-stderr capy-convert -q --model "$1" --out "$OUT/m.capy"
	[ "$status" -eq 1 ] || { echo "status $status: $stderr" >&2; return 1; }
	[ -z "$output" ]
	assert_one_error_line capy-convert
	assert_no_leftovers "$OUT"
}

@test "a missing checkpoint directory" {
	convert_fails "$BATS_TEST_TMPDIR/nope"
	[[ "$stderr" == *"cannot open checkpoint directory '$BATS_TEST_TMPDIR/nope': No such file or directory" ]]
}

@test "a missing config.json" {
	d=$(copy_fixture qwen3_next)
	rm "$d/config.json"
	convert_fails "$d"
	[[ "$stderr" == *"cannot open '$d/config.json': No such file or directory" ]]
}

@test "a missing tokenizer.json" {
	d=$(copy_fixture qwen3_next)
	rm "$d/tokenizer.json"
	convert_fails "$d"
	[[ "$stderr" == *"'$d/tokenizer.json' is missing"* ]]
}

@test "an unreadable safetensors file (dangling link)" {
	d=$(copy_fixture qwen3_next)
	rm "$d/model.safetensors"
	ln -s "$d/gone.safetensors" "$d/model.safetensors"
	convert_fails "$d"
	[[ "$stderr" == *"cannot open '$d/model.safetensors': No such file or directory" ]]
}

@test "a shard named in the index is missing" {
	d=$(copy_fixture qwen3_5_moe)
	rm "$d/model-00002-of-00003.safetensors"
	convert_fails "$d"
	[[ "$stderr" == *"cannot open '$d/model-00002-of-00003.safetensors'"* ]]
}

@test "a truncated safetensors file names the offset where data is missing" {
	d=$(copy_fixture qwen3_next)
	size=$(stat -c %s "$d/model.safetensors")
	edit "$d/model.safetensors" truncate $((size - 100))
	convert_fails "$d"
	[[ "$stderr" == *"'$d/model.safetensors': tensor '"*"data_offsets end"*"is past the end of the file"* ]]
}

@test "a garbled header gives the JSON error position" {
	d=$(copy_fixture qwen3_next)
	edit "$d/model.safetensors" garble 30
	convert_fails "$d"
	[[ "$stderr" == *"'$d/model.safetensors': safetensors header: invalid JSON at line 1, column 31 (byte 30)" ]]
}

@test "a header length beyond the file" {
	d=$(copy_fixture qwen4_exp)
	edit "$d/model.safetensors" header-len 99999999
	convert_fails "$d"
	[[ "$stderr" == *"'$d/model.safetensors': header length 99999999 at offset 0 runs past the end of the file"* ]]
}

@test "a header length over the 100 MB limit" {
	d=$(copy_fixture qwen4_exp)
	edit "$d/model.safetensors" header-len 4000000000
	convert_fails "$d"
	[[ "$stderr" == *"header length 4000000000 at offset 0 exceeds the 100000000-byte limit"* ]]
}

@test "data offsets out of range" {
	d=$(copy_fixture qwen3_next)
	edit "$d/model.safetensors" offsets model.norm.weight 0 99999999
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.norm.weight'"* ]]
}

@test "overlapping tensors" {
	d=$(copy_fixture qwen3_next)
	edit "$d/model.safetensors" offsets model.norm.weight 0 128
	convert_fails "$d"
	[[ "$stderr" == *"'$d/model.safetensors': tensor '"*"at file offset "*" overlaps the previous tensor"* ]]
}

@test "a dtype that does not match the data size" {
	d=$(copy_fixture qwen3_next)
	edit "$d/model.safetensors" dtype model.norm.weight F32
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.norm.weight': 64 F32 elements need 256 bytes, data_offsets"* ]]
}

@test "a shape that does not match the config" {
	d=$(copy_fixture qwen3_next)
	edit "$d/model.safetensors" shape model.layers.0.linear_attn.out_proj.weight 128,64
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.layers.0.linear_attn.out_proj.weight' in '$d/model.safetensors' has shape [128, 64], expected [64, 128]" ]]
}

@test "a weight in a dtype that is not a float type" {
	d=$(copy_fixture qwen3_next)
	edit "$d/model.safetensors" dtype model.norm.weight I16
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.norm.weight' in '$d/model.safetensors' is I16; it must be BF16, F16 or F32" ]]
	d=$(copy_fixture qwen4_exp)
	edit "$d/model.safetensors" dtype model.language_model.layers.0.linear_attn.out_proj.weight U16
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.language_model.layers.0.linear_attn.out_proj.weight' in '$d/model.safetensors' is U16; weights must be BF16, F16, F32 or NVFP4" ]]
}

@test "a missing tensor is named" {
	d=$(copy_fixture qwen3_5-dense)
	edit "$d/model.safetensors" rename model.language_model.layers.3.self_attn.q_norm.weight q_norm_gone
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.language_model.layers.3.self_attn.q_norm.weight' is missing from '$d'"* ]]
}

@test "an extra tensor is named" {
	d=$(copy_fixture qwen3_5-dense)
	edit "$d/model.safetensors" add model.language_model.layers.1.extra.weight BF16 4,4
	convert_fails "$d"
	[[ "$stderr" == *"unexpected tensor 'model.language_model.layers.1.extra.weight' in '$d/model.safetensors'"* ]]
}

@test "an expert missing from a per-expert checkpoint" {
	d=$(copy_fixture qwen4_exp)
	edit "$d/model.safetensors" rename model.language_model.layers.2.mlp.experts.5.up_proj.weight x
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.language_model.layers.2.mlp.experts.5.up_proj.weight' is missing"* ]]
}

@test "qwen4_exp's MTP head is checked tensor by tensor: missing, misshapen and unknown mtp.* are named" {
	# capy's layout of the head (docs/spec.md): a QSA layer with its hc mixers, and the head's mixer
	for t in mtp.layers.0.self_attn.indexer.index_qk_proj.weight mtp.layers.0.mlp_hyper_connection.hc_norm.weight \
		mtp.layers.0.mlp.experts.7.down_proj.weight mtp.hyper_connection_mixer.input_mix_weight_down.weight; do
		rm -rf "$BATS_TEST_TMPDIR/qwen4_exp"
		d=$(copy_fixture qwen4_exp)
		edit "$d/model.safetensors" rename "$t" gone
		convert_fails "$d"
		[[ "$stderr" == *"tensor '$t' is missing from '$d' (a qwen4_exp model with this config.json needs it)" ]]
	done
	rm -rf "$BATS_TEST_TMPDIR/qwen4_exp"
	d=$(copy_fixture qwen4_exp)
	edit "$d/model.safetensors" shape mtp.hyper_connection_mixer.input_mix_weight_up.weight 16,256
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'mtp.hyper_connection_mixer.input_mix_weight_up.weight' in '$d/model.safetensors' has shape [16, 256], expected [256, 16]" ]]
	# the head's mixer has no block_inject_weight, as the model's final one; its layer no PLE
	for t in mtp.hyper_connection_mixer.block_inject_weight.weight mtp.layers.0.ple.norm_key.weight; do
		rm -rf "$BATS_TEST_TMPDIR/qwen4_exp"
		d=$(copy_fixture qwen4_exp)
		edit "$d/model.safetensors" add "$t" BF16 4,64
		convert_fails "$d"
		[[ "$stderr" == *"unexpected tensor '$t' in '$d/model.safetensors' (not part of a qwen4_exp model with this config.json)" ]]
	done
}

@test "an index that puts a tensor in the wrong shard" {
	d=$(copy_fixture qwen3_5_moe)
	python3 - "$d/model.safetensors.index.json" <<'PY'
import json, sys
p = sys.argv[1]; j = json.load(open(p))
k = "model.language_model.norm.weight"
j["weight_map"][k] = "model-00001-of-00003.safetensors" if j["weight_map"][k] != "model-00001-of-00003.safetensors" else "model-00002-of-00003.safetensors"
json.dump(j, open(p, "w"))
PY
	convert_fails "$d"
	[[ "$stderr" == *"lists tensor 'model.language_model.norm.weight' in 'model-0000"*"but it is in"* ]]
}

@test "an unknown model_type" {
	d=$(copy_fixture qwen3_next)
	sed -i 's/"model_type": "qwen3_next"/"model_type": "llama"/' "$d/config.json"
	convert_fails "$d"
	[[ "$stderr" == *"'$d/config.json': model_type 'llama' is not supported"* ]]
}

@test "an inconsistent config names the field" {
	d=$(copy_fixture qwen3_next)
	sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": 3/' "$d/config.json"
	convert_fails "$d"
	[[ "$stderr" == *"'$d/config.json': num_attention_heads 4 is not a multiple of num_key_value_heads 3" ]]
}

@test "a NaN global scale in an NVFP4 tensor" {
	d=$(copy_fixture qwen3_5_moe-nvfp4)
	f=$(grep -l 'model.language_model.layers.1.mlp.experts.3.down_proj.weight_scale_2' "$d"/*.safetensors)
	edit "$f" f32 model.language_model.layers.1.mlp.experts.3.down_proj.weight_scale_2 nan
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.language_model.layers.1.mlp.experts.3.down_proj.weight_scale_2' in '$f' at offset "*" is nan; an NVFP4 scale must be finite and > 0" ]]
}

@test "an infinite input scale in an NVFP4 tensor" {
	d=$(copy_fixture qwen3_5_moe-nvfp4)
	f=$(grep -l 'model.language_model.layers.3.self_attn.o_proj.input_scale' "$d"/*.safetensors)
	edit "$f" f32 model.language_model.layers.3.self_attn.o_proj.input_scale inf
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.language_model.layers.3.self_attn.o_proj.input_scale' in '$f' at offset "*" is inf"* ]]
}

@test "a NaN block scale names its file offset" {
	d=$(copy_fixture qwen3_5_moe-nvfp4)
	f=$(grep -l 'model.language_model.layers.0.mlp.experts.6.gate_proj.weight_scale"' "$d"/*.safetensors)
	edit "$f" byte model.language_model.layers.0.mlp.experts.6.gate_proj.weight_scale 5 0x7f
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.language_model.layers.0.mlp.experts.6.gate_proj.weight_scale' in '$f' has a NaN block scale at file offset "* ]]
}

@test "an NVFP4 weight without its block scales" {
	d=$(copy_fixture qwen3_5_moe-nvfp4)
	f=$(grep -l 'model.language_model.layers.2.mlp.shared_expert.up_proj.weight_scale"' "$d"/*.safetensors)
	edit "$f" rename model.language_model.layers.2.mlp.shared_expert.up_proj.weight_scale x.weight_scale
	sed -i 's/"model.language_model.layers.2.mlp.shared_expert.up_proj.weight_scale"/"x.weight_scale"/' \
		"$d/model.safetensors.index.json"
	convert_fails "$d"
	[[ "$stderr" == *"'model.language_model.layers.2.mlp.shared_expert.up_proj.weight_scale' is missing"* ]]
}

@test "an NVFP4 tensor that the quantization config excludes" {
	d=$(copy_fixture qwen3_5_moe-nvfp4)
	python3 - "$d/hf_quant_config.json" <<'PY'
import json, sys
p = sys.argv[1]; j = json.load(open(p))
j["quantization"]["exclude_modules"].append("model.language_model.layers.3.self_attn*")
json.dump(j, open(p, "w"))
PY
	convert_fails "$d"
	[[ "$stderr" == *"tensor 'model.language_model.layers.3.self_attn."*"is NVFP4, but hf_quant_config.json excludes"* ]]
}

@test "NVFP4 tensors without any quantization config" {
	d=$(copy_fixture qwen3_5_moe-nvfp4)
	rm "$d/hf_quant_config.json"
	python3 - "$d/config.json" <<'PY'
import json, sys
p = sys.argv[1]; j = json.load(open(p)); j.pop("quantization_config", None); json.dump(j, open(p, "w"))
PY
	convert_fails "$d"
	[[ "$stderr" == *"is NVFP4 but '$d' has no hf_quant_config.json or quantization_config" ]]
}

@test "a full disk: a file-size limit stops the write and removes the temporary file" {
	run --separate-stderr bash -c "ulimit -f 64; capy-convert -q -m '$FIX/qwen3_5_moe' -o '$OUT/m.capy'"
	[ "$status" -eq 1 ]
	assert_one_error_line capy-convert
	[[ "$stderr" == *"'$OUT/m.capy'"*"File too large" ]] || [[ "$stderr" == *"File too large" ]]
	assert_no_leftovers "$OUT"
}

@test "a full disk: a small file system is refused before writing" {
	if ! unshare -m true 2>/dev/null; then skip "needs mount namespaces (root)"; fi
	run --separate-stderr unshare -m bash -c "mount -t tmpfs -o size=256k tmpfs '$OUT' &&
		capy-convert -q -m '$FIX/qwen3_5_moe' -o '$OUT/m.capy'; rc=\$?; ls -A '$OUT' >&2; exit \$rc"
	[ "$status" -eq 1 ]
	assert_one_error_line capy-convert
	[[ "$stderr" == *"'$OUT/m.capy' needs "*" bytes, the file system has "*"free: No space left on device" ]]
}

@test "an interrupted conversion leaves nothing behind" {
	cat >"$BATS_TEST_TMPDIR/config.json" <<'JSON'
{"model_type": "qwen3_5", "text_config": {"vocab_size": 248320, "hidden_size": 4096, "num_hidden_layers": 8,
 "intermediate_size": 12288, "eos_token_id": 1}}
JSON
	capy-convert -q --synthetic "$BATS_TEST_TMPDIR/config.json" --out "$OUT/m.capy" -t 1 &
	pid=$!
	for i in $(seq 100); do
		ls -A "$OUT" | grep -q tmp && break
		sleep 0.05
	done
	ls -A "$OUT" | grep -q tmp
	kill -TERM "$pid"
	rc=0
	wait "$pid" || rc=$?
	[ "$rc" -eq 143 ]
	assert_no_leftovers "$OUT"
	[ -z "$(ls -A "$OUT")" ]
}

@test "bad usage exits 2" {
	run --separate-stderr capy-convert
	[ "$status" -eq 2 ]
	[[ "${stderr_lines[0]}" == "capy-convert: error: give exactly one of --model, --synthetic, --inspect, --verify" ]]
	run --separate-stderr capy-convert -m "$FIX/qwen3_next"
	[ "$status" -eq 2 ]
	[[ "${stderr_lines[0]}" == *"--out is required" ]]
	run --separate-stderr capy-convert -m "$FIX/qwen3_next" -o x --quantize-experts int4
	[ "$status" -eq 2 ]
	[[ "${stderr_lines[0]}" == *"unknown format 'int4' (nvfp4 is)" ]]
	run --separate-stderr capy-convert --inspect a --verify b
	[ "$status" -eq 2 ]
	run --separate-stderr capy-convert --threads x --inspect a
	[ "$status" -eq 2 ]
	[[ "${stderr_lines[0]}" == *"option '--threads': 'x' is not an integer" ]]
	run --separate-stderr capy-convert -m "$FIX/qwen3_5-dense" -o "$OUT/x.capy" --quantize-experts nvfp4
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"is a dense model without routed experts" ]]
}

@test "damaged artifacts: inspect and verify say what is wrong and where" {
	capy-convert -q -m "$FIX/qwen3_next" -o "$OUT/a.capy"
	cp "$OUT/a.capy" "$OUT/t.capy"
	truncate -s -4096 "$OUT/t.capy"
	run --separate-stderr capy-convert --inspect "$OUT/t.capy"
	[ "$status" -eq 1 ]
	assert_one_error_line capy-convert
	[[ "$stderr" == *"'$OUT/t.capy' is truncated: "*" bytes, the header says "* ]]
	printf 'XXXX' | dd of="$OUT/a.capy" bs=1 seek=0 conv=notrunc status=none
	run --separate-stderr capy-convert --verify "$OUT/a.capy"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"is not a capy artifact (bad magic at offset 0)" ]]
	run --separate-stderr capy-convert --inspect "$FIX/qwen3_next/config.json"
	[ "$status" -eq 1 ]
	[[ "$stderr" == *"is not a capy artifact"* ]]
}
