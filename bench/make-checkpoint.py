#!/usr/bin/env python3
"""make-checkpoint.py - write a multi-GB Hugging Face checkpoint for benchmarks.

    bench/make-checkpoint.py OUT_DIR [--layers 4] [--experts 128] [--top-k 8] [--vocab 248320]
                             [--shards 3] [--nvfp4-experts]

A qwen3_5_moe checkpoint in the real layout (model.language_model.*, per-expert experts as
save_pretrained writes them, sharded with model.safetensors.index.json, plus a tokenizer.json
copied from the fixtures), with random finite BF16 values of magnitude 2^-7 .. 2^-4 (small enough
to run the model on them). Standard library only.

--nvfp4-experts writes the routed experts as NVIDIA ModelOpt exports NVFP4 (docs/artifact.md,
the layout capy-convert and other engines read without re-quantizing): per projection a U8
`weight` [N, K/2] of random E2M1 codes, an F8_E4M3 `weight_scale` [N, K/16] of random finite
block scales, and F32 scalars `weight_scale_2` and `input_scale`; hf_quant_config.json and
config.json's quantization_config name NVFP4 and exclude everything else (it stays BF16). The
shape of issue 8's llama.cpp comparison: --layers 8 --experts 256 --top-k 8 --nvfp4-experts.
"""
import argparse
import json
import os
import shutil
import struct

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--layers", type=int, default=4)
ap.add_argument("--experts", type=int, default=128)
ap.add_argument("--vocab", type=int, default=248320)
ap.add_argument("--shards", type=int, default=3)
ap.add_argument("--top-k", type=int, default=8)
ap.add_argument("--nvfp4-experts", action="store_true")
a = ap.parse_args()

H, I, NQ, NKV, HD = 2048, 512, 16, 2, 256
NK, NV, DK, DV = 16, 32, 128, 128
cfg = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
       "text_config": {"model_type": "qwen3_5_moe_text", "vocab_size": a.vocab, "hidden_size": H,
                       "num_hidden_layers": a.layers, "num_experts": a.experts, "num_experts_per_tok": a.top_k,
                       "moe_intermediate_size": I, "shared_expert_intermediate_size": I,
                       "eos_token_id": [248046, 248044], "rope_parameters": {"rope_theta": 1e7,
                       "partial_rotary_factor": 0.25, "rope_type": "default"}}}

tensors = []  # (name, shape, dtype): BF16 from the random pool, U8 codes, F8_E4M3 scales, F32 scalars

p = "model.language_model."
tensors.append((p + "embed_tokens.weight", [a.vocab, H]))


def expert_proj(name, n, k):
    if not a.nvfp4_experts:
        return [(name + ".weight", [n, k])]
    return [(name + ".weight", [n, k // 2], "U8"), (name + ".weight_scale", [n, k // 16], "F8_E4M3"),
            (name + ".weight_scale_2", [], "F32"), (name + ".input_scale", [], "F32")]


conv = 2 * NK * DK + NV * DV
for l in range(a.layers):
    q = "%slayers.%d." % (p, l)
    tensors += [(q + "input_layernorm.weight", [H]), (q + "post_attention_layernorm.weight", [H])]
    if (l + 1) % 4:
        tensors += [(q + "linear_attn.in_proj_qkv.weight", [conv, H]), (q + "linear_attn.in_proj_z.weight", [NV * DV, H]),
                    (q + "linear_attn.in_proj_b.weight", [NV, H]), (q + "linear_attn.in_proj_a.weight", [NV, H]),
                    (q + "linear_attn.conv1d.weight", [conv, 1, 4]), (q + "linear_attn.A_log", [NV]),
                    (q + "linear_attn.dt_bias", [NV]), (q + "linear_attn.norm.weight", [DV]),
                    (q + "linear_attn.out_proj.weight", [H, NV * DV])]
    else:
        tensors += [(q + "self_attn.q_proj.weight", [NQ * HD * 2, H]), (q + "self_attn.k_proj.weight", [NKV * HD, H]),
                    (q + "self_attn.v_proj.weight", [NKV * HD, H]), (q + "self_attn.o_proj.weight", [H, NQ * HD]),
                    (q + "self_attn.q_norm.weight", [HD]), (q + "self_attn.k_norm.weight", [HD])]
    tensors.append((q + "mlp.gate.weight", [a.experts, H]))
    for e in range(a.experts):
        x = q + "mlp.experts.%d." % e
        tensors += expert_proj(x + "gate_proj", I, H) + expert_proj(x + "up_proj", I, H) + expert_proj(x + "down_proj", H, I)
    tensors += [(q + "mlp.shared_expert.gate_proj.weight", [I, H]), (q + "mlp.shared_expert.up_proj.weight", [I, H]),
                (q + "mlp.shared_expert.down_proj.weight", [H, I]), (q + "mlp.shared_expert_gate.weight", [1, H])]
tensors += [(p + "norm.weight", [H]), ("lm_head.weight", [a.vocab, H])]

tensors = [t if len(t) == 3 else (t[0], t[1], "BF16") for t in tensors]
SIZE = {"BF16": 2, "U8": 1, "F8_E4M3": 1, "F32": 4}

# BF16 values with random signs and mantissas and exponents 120..123 (|v| in [2^-7, 2^-4)):
# small enough that a forward pass of this width stays finite, so the model can be run too.
pool = bytearray(os.urandom(64 << 20))
pool[1::2] = bytes(pool[1::2]).translate(bytes((b & 0x81) | 0x3C for b in range(256)))
pool = bytes(pool)
codes = os.urandom(16 << 20)  # any byte is two valid E2M1 codes
# E4M3 block scales of a realistic spread, 2^-3 .. 2^2 (exponent fields 4..9): never NaN
scales = bytes(0x20 + (b % 48) for b in os.urandom(4 << 20))
scalar = {"weight_scale_2": struct.pack("<f", 1.0 / 2688), "input_scale": struct.pack("<f", 0.002)}

os.makedirs(a.out, exist_ok=True)
def nbytes(shape, dt):
    n = SIZE[dt]
    for d in shape:
        n *= d
    return n


total = sum(nbytes(s, dt) for _, s, dt in tensors)
per_shard = total // a.shards + 1
weight_map, shard, cur, start = {}, [], 0, 0
shards = []
for name, shape, dt in tensors:
    n = nbytes(shape, dt)
    shard.append((name, shape, dt, n))
    cur += n
    if cur >= per_shard:
        shards.append(shard)
        shard, cur = [], 0
if shard:
    shards.append(shard)
off = 0
for i, sh in enumerate(shards):
    fname = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
    hdr, pos = {}, 0
    for name, shape, dt, n in sh:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
        weight_map[name] = fname
    text = json.dumps(hdr).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(a.out, fname), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape, dt, n in sh:
            if dt == "F32":
                f.write(scalar[name.rsplit(".", 1)[1]])
                continue
            src = pool if dt == "BF16" else codes if dt == "U8" else scales
            o = off % (len(src) - 4096)
            while n:
                k = min(n, len(src) - o)
                f.write(src[o:o + k])
                o = (o + k) % (len(src) - 4096)
                n -= k
            off = (off + 4100) % (1 << 20)  # even: a BF16 value's two bytes stay paired
json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, open(os.path.join(a.out, "model.safetensors.index.json"), "w"))
qc = os.path.join(a.out, "hf_quant_config.json")
if os.path.exists(qc):
    os.remove(qc)  # from an earlier run into the same directory
if a.nvfp4_experts:
    # Every module but the routed experts stays BF16 (fnmatch patterns, as ModelOpt writes them).
    exclude = ["lm_head", "model.language_model.embed_tokens", "*linear_attn*", "*self_attn*", "*mlp.gate",
               "*shared_expert*"]
    json.dump({"producer": {"name": "modelopt", "version": "0.39.0"},
               "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                                "exclude_modules": exclude}},
              open(os.path.join(a.out, "hf_quant_config.json"), "w"), indent=2)
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 16,
                                  "ignore": exclude}
json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
fix = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "t", "fixtures", "qwen3_5_moe")
for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
    shutil.copy(os.path.join(fix, f), a.out)
print("%s: %d tensors, %.2f GB in %d shards" % (a.out, len(tensors), total / 1e9, len(shards)))
