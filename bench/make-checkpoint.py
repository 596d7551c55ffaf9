#!/usr/bin/env python3
"""make-checkpoint.py - write a multi-GB Hugging Face checkpoint for benchmarking capy-convert.

    bench/make-checkpoint.py OUT_DIR [--layers 4] [--experts 128] [--vocab 248320] [--shards 3]

A qwen3_5_moe checkpoint in the real layout (model.language_model.*, per-expert BF16 experts
as save_pretrained writes them, sharded with model.safetensors.index.json, plus a tokenizer.json
copied from the fixtures), with random finite BF16 values. Standard library only; the data is
random bytes with the exponent's top bit cleared, so every value is finite and below 2.
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
a = ap.parse_args()

H, I, NQ, NKV, HD = 2048, 512, 16, 2, 256
NK, NV, DK, DV = 16, 32, 128, 128
cfg = {"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"],
       "text_config": {"model_type": "qwen3_5_moe_text", "vocab_size": a.vocab, "hidden_size": H,
                       "num_hidden_layers": a.layers, "num_experts": a.experts, "num_experts_per_tok": 8,
                       "moe_intermediate_size": I, "shared_expert_intermediate_size": I,
                       "eos_token_id": [248046, 248044], "rope_parameters": {"rope_theta": 1e7,
                       "partial_rotary_factor": 0.25, "rope_type": "default"}}}

tensors = []  # (name, shape)
p = "model.language_model."
tensors.append((p + "embed_tokens.weight", [a.vocab, H]))
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
        tensors += [(q + "mlp.experts.%d.gate_proj.weight" % e, [I, H]), (q + "mlp.experts.%d.up_proj.weight" % e, [I, H]),
                    (q + "mlp.experts.%d.down_proj.weight" % e, [H, I])]
    tensors += [(q + "mlp.shared_expert.gate_proj.weight", [I, H]), (q + "mlp.shared_expert.up_proj.weight", [I, H]),
                (q + "mlp.shared_expert.down_proj.weight", [H, I]), (q + "mlp.shared_expert_gate.weight", [1, H])]
tensors += [(p + "norm.weight", [H]), ("lm_head.weight", [a.vocab, H])]

pool = bytearray(os.urandom(64 << 20))
pool[1::2] = bytes(pool[1::2]).translate(bytes(b & 0xBF for b in range(256)))
pool = bytes(pool)

os.makedirs(a.out, exist_ok=True)
total = sum(2 * eval("*".join(map(str, s))) for _, s in tensors)
per_shard = total // a.shards + 1
weight_map, shard, cur, start = {}, [], 0, 0
shards = []
for name, shape in tensors:
    n = 2
    for d in shape:
        n *= d
    shard.append((name, shape, n))
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
    for name, shape, n in sh:
        hdr[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [pos, pos + n]}
        pos += n
        weight_map[name] = fname
    text = json.dumps(hdr).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(a.out, fname), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape, n in sh:
            while n:
                k = min(n, len(pool) - off)
                f.write(pool[off:off + k])
                off = (off + k) % (len(pool) - 4096)
                n -= k
json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, open(os.path.join(a.out, "model.safetensors.index.json"), "w"))
json.dump(cfg, open(os.path.join(a.out, "config.json"), "w"), indent=2)
fix = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "t", "fixtures", "qwen3_5_moe")
for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
    shutil.copy(os.path.join(fix, f), a.out)
print("%s: %d tensors, %.2f GB in %d shards" % (a.out, len(tensors), total / 1e9, len(shards)))
