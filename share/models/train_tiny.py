#!/usr/bin/env python3
"""Train capy-tiny: a small qwen3_5_moe (hybrid GDN + gated attention, routed + shared experts, MTP head) from
scratch on the GPU machine, and write it in the real checkpoint layouts with transformers' reference outputs.

    python3 share/models/train_tiny.py --out DIR                 # everything (~9 min on one H200)
    python3 share/models/train_tiny.py --out DIR --phase train   # corpus, tokenizer, training -> DIR/capy-tiny
    python3 share/models/train_tiny.py --out DIR --phase ref     # references, NVFP4 export, measurements

DIR/capy-tiny and DIR/capy-tiny-nvfp4 become share/models/*; DIR/train.json and DIR/routing.json hold the log and
the measurements.  Deterministic seeds; the GPU's atomic adds (embedding and index backward) make training
reproducible to rounding only, so the committed weights, not a rerun, are the reference.  The reference outputs
are computed like the fixtures' (t/fixtures/make_fixtures.py, whose code this reuses): float32 on the CPU from
the stored BF16 bytes, eager attention and experts.
"""

import argparse
import copy
import json
import math
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "t" / "fixtures"))
sys.path.insert(0, str(HERE))

import make_fixtures as fx  # noqa: E402  (sets the offline environment, imports torch)
import corpus_tiny as corpus  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

fx.CHAT_TEMPLATE = HERE.parent / "chat_templates" / "qwen3_5.jinja"
NAME = "capy-tiny"
BPE_VOCAB = 4000  # + 13 added tokens = 4013 ids, vocab_size 4096 (padding rows as in Qwen)
VOCAB_SIZE = 4096
HIDDEN = 256


def text_config(ids):
    return {
        "vocab_size": VOCAB_SIZE,
        "hidden_size": HIDDEN,
        "num_hidden_layers": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "full_attention_interval": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "hidden_act": "silu",
        "max_position_embeddings": 32768,
        "initializer_range": 0.02,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_output_gate": True,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 64,
        "linear_value_head_dim": 64,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 128,
        "num_experts": 16,
        "num_experts_per_tok": 4,
        "router_aux_loss_coef": 0.01,
        "mtp_num_hidden_layers": 1,
        "mtp_use_dedicated_embeddings": False,
        "eos_token_id": ids["<|im_end|>"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [4, 2, 2], "mrope_interleaved": True},
    }


def make_spec(ids):
    import transformers.models.qwen3_5_moe.configuration_qwen3_5_moe as c35m
    import transformers.models.qwen3_5_moe.modeling_qwen3_5_moe as m35m

    vision = dict(fx.VISION, out_hidden_size=HIDDEN)
    top = dict(fx.vl_top(ids), tie_word_embeddings=True)
    cfg = c35m.Qwen3_5MoeConfig(text_config=text_config(ids), vision_config=vision, **top)
    return fx.Spec(NAME, 909, config=cfg, cls=m35m.Qwen3_5MoeForConditionalGeneration, multimodal=True, mrope=True,
                   mtp=True, layer_cls=m35m.Qwen3_5MoeDecoderLayer, norm_cls=m35m.Qwen3_5MoeRMSNorm, shard=None,
                   expert_layout="fused")


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------------------------------------------
# Corpus and tokenizer
# ---------------------------------------------------------------------------------------------------------------


def render_all(hf_tok, convs):
    out = []
    for msgs, tools, think in convs:
        out.append(hf_tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=False,
                                              enable_thinking=think))
    return out


def hf_tokenizer(d):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(d))


def build_corpus(work, args):
    """Texts, tokenizer, token ids; everything the later phases need is written under work/."""
    train_docs, held_docs, src = corpus.text_documents()
    funcs = corpus.functions_with_docstrings([d for d in src if not corpus.held_out(d[0])])
    topics = [d for d in corpus.pydoc_topics() if not corpus.held_out(d[0])]
    log(f"corpus: {len(train_docs)} documents ({sum(len(t) for _, t in train_docs) / 1e6:.1f} MB) + "
        f"{len(held_docs)} held out; {len(funcs)} stdlib functions, {len(topics)} doc topics")
    convs = corpus.conversations(1, args.chats, funcs, topics)
    held_convs = corpus.conversations(2, 64, funcs, topics)

    # The tokenizer needs the chat template to render conversations, so: train it on the machine's text plus
    # conversations rendered by a plain-markup first pass, then render properly with the HF tokenizer.
    pre = [json.dumps(m, ensure_ascii=False) for m, _, _ in convs[:20000]]
    lines = [t for _, t in train_docs] + pre + [json.dumps(corpus.TOOLS)] * 200
    tok, tok_text, ids = fx.build_tokenizer(BPE_VOCAB, lines, probe="".join(t for _, t in held_docs[:3]))
    work.mkdir(parents=True, exist_ok=True)
    tokdir = work / "tokenizer"
    tokdir.mkdir(exist_ok=True)
    fx.write_tokenizer_files(tokdir, tok_text, ids)
    hf = hf_tokenizer(tokdir)
    rendered = render_all(hf, convs)
    held_rendered = render_all(hf, held_convs)
    # A second BPE pass that sees the rendered chats (the tool prompt, the think and call markup) in their
    # final form: that is what the model reads at run time.
    lines2 = [t for _, t in train_docs] + rendered[:30000]
    tok, tok_text, ids = fx.build_tokenizer(BPE_VOCAB, lines2, probe=held_rendered[0] + held_docs[0][1])
    fx.write_tokenizer_files(tokdir, tok_text, ids)
    hf = hf_tokenizer(tokdir)
    eot = ids["<|endoftext|>"]
    t0 = time.time()
    text_ids = [np.array(e.ids + [eot], dtype=np.int32)
                for e in tok.encode_batch([t for _, t in train_docs], add_special_tokens=False)]
    chat_ids = [np.array(e.ids + [eot], dtype=np.int32)
                for e in tok.encode_batch(rendered, add_special_tokens=False)]
    log(f"rendered {len(rendered)} conversations and tokenized in {time.time() - t0:.1f} s")
    log(f"tokenized in {time.time() - t0:.1f} s: text {sum(map(len, text_ids)) / 1e6:.2f} M tokens, "
        f"chats {sum(map(len, chat_ids)) / 1e6:.2f} M tokens ({len(chat_ids)} conversations)")
    held = {"text": [t for _, t in held_docs], "text_keys": [k for k, _ in held_docs], "chats": held_rendered,
            "chat_messages": [[m, t, th] for m, t, th in held_convs]}
    (work / "heldout.json").write_text(json.dumps(held, ensure_ascii=False) + "\n")
    return tok, tok_text, ids, text_ids, chat_ids


def pack(text_ids, chat_ids, seq, n_windows, seed):
    """n_windows rows of seq+1 ids: whole conversations where they fit, text chunks filling the rest, so that
    roughly half the tokens are conversations and a conversation is seen from its start."""
    rng = random.Random(seed)
    rows = np.empty((n_windows, seq + 1), dtype=np.int32)
    chats = list(range(len(chat_ids)))
    texts = list(range(len(text_ids)))
    rng.shuffle(chats)
    rng.shuffle(texts)
    ci = ti = text_pos = 0
    for r in range(n_windows):
        fill = 0
        while fill < seq + 1:
            room = seq + 1 - fill
            if rng.random() < 0.5:
                c = chat_ids[chats[ci % len(chats)]]
                if len(c) <= room:
                    rows[r, fill:fill + len(c)] = c
                    fill += len(c)
                    ci += 1
                    continue
            t = text_ids[texts[ti % len(texts)]]
            take = t[text_pos:text_pos + min(room, rng.randint(64, seq))]
            rows[r, fill:fill + len(take)] = take
            fill += len(take)
            text_pos += len(take)
            if text_pos >= len(t):
                ti += 1
                text_pos = 0
    return torch.from_numpy(rows), {"chats_used": ci, "text_documents_passed": ti}


# ---------------------------------------------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------------------------------------------


def init_params_(model, mtp, seed, n_layers):
    """GPT-2-like initialisation: N(0, 0.02), output projections scaled by 1/sqrt(2 L), norms at identity,
    the GDN decay and step parameters as the model's own init."""
    g = torch.Generator().manual_seed(seed)
    std = 0.02
    out_std = std / math.sqrt(2 * (n_layers + 1))

    def normal(p, s):
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=g) * s)

    for root in (model, mtp):
        for mname, mod in root.named_modules():
            cname = type(mod).__name__
            for pname, p in mod.named_parameters(recurse=False):
                full = f"{mname}.{pname}"
                with torch.no_grad():
                    if "RMSNormGated" in cname:
                        p.fill_(1.0)
                    elif cname.endswith("RMSNorm"):
                        p.zero_()  # (1 + w)
                    elif isinstance(mod, torch.nn.LayerNorm):
                        p.fill_(1.0 if pname == "weight" else 0.0)
                    elif isinstance(mod, torch.nn.Conv1d):
                        k = mod.kernel_size[0]
                        p.copy_((torch.rand(p.shape, generator=g) * 2 - 1) / math.sqrt(k))
                    elif cname.endswith("GatedDeltaNet") and pname == "A_log":
                        p.copy_((torch.rand(p.shape, generator=g) * 15.99 + 0.01).log())
                    elif cname.endswith("GatedDeltaNet") and pname == "dt_bias":
                        p.fill_(1.0)
                    elif cname.endswith("Experts") and pname == "down_proj":
                        normal(p, out_std)
                    elif pname == "bias":
                        p.zero_()
                    elif any(s in full for s in ("o_proj", "out_proj", "down_proj")):
                        normal(p, out_std)
                    else:
                        normal(p, std)


class RouterStats:
    """Forward hooks on every router: the load-balancing loss of the step (Switch Transformer form,
    E * sum_e f_e * P_e per layer) and, when asked, the chosen experts per token."""

    def __init__(self, roots):
        self.aux = []
        self.trace = None
        self.handles = []
        for root in roots:
            for name, m in root.named_modules():
                if type(m).__name__.endswith("TopKRouter"):
                    self.handles.append(m.register_forward_hook(self._hook(name)))

    def _hook(self, name):
        def hook(mod, args, out):
            logits, _, idx = out
            if self.trace is not None:
                self.trace.setdefault(name, []).append(idx.detach().cpu())
            if torch.is_grad_enabled():
                probs = logits.float().softmax(-1)
                f = F.one_hot(idx, mod.num_experts).float().sum(1).mean(0) / mod.top_k
                self.aux.append(mod.num_experts * (f * probs.mean(0)).sum())
        return hook


def mtp_forward(model, mtp, x_ids, hidden, rotary, mrope):
    """MTP logits: row t = MTP(hidden_t, embed(x[t+1])), predicting x[t+2]; the glue of the fixtures'
    mtp_logits (vLLM's), batched, with causal SDPA."""
    emb = model.get_input_embeddings()(x_ids[:, 1:])
    u = torch.cat([mtp.pre_fc_norm_embedding(emb), mtp.pre_fc_norm_hidden(hidden[:, :-1])], dim=-1)
    u = mtp.fc(u)
    b, t = u.shape[:2]
    pos = torch.arange(t, device=u.device).view(1, -1).expand(b, -1)
    rope_pos = pos[None].expand(3, b, -1) if mrope else pos
    cos, sin = rotary(u, rope_pos)
    u = mtp.layers[0](u, position_embeddings=(cos, sin), attention_mask=None, position_ids=pos, past_key_values=None)
    if isinstance(u, tuple):
        u = u[0]
    return model.lm_head(mtp.norm(u))


def new_model(spec, impl):
    cfg = copy.deepcopy(spec.config)
    model = spec.cls._from_config(cfg, dtype=torch.float32, attn_implementation="sdpa",
                                  experts_implementation=impl)
    mtp = fx.MTPHead(spec, fx.text_config_of(model))
    init_params_(model, mtp, spec.seed, fx.text_config_of(model).num_hidden_layers)
    model.tie_weights()
    return model, mtp


def train(spec, text_ids, chat_ids, args):
    dev = torch.device("cuda")
    torch.manual_seed(spec.seed)
    model = mtp = impl = None
    for impl in [args.experts, "batched_mm", "eager"]:
        # The fastest experts implementation that runs forward and backward under autocast here.
        try:
            torch.manual_seed(spec.seed)
            model, mtp = new_model(spec, impl)
            model.to(dev).train()
            mtp.to(dev).train()
            lm = fx.text_model_of(model)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                h = lm(input_ids=torch.zeros((2, 64), dtype=torch.long, device=dev), use_cache=False).last_hidden_state
            model.lm_head(h).float().sum().backward()
            model.zero_grad(set_to_none=True)
            break
        except Exception as e:  # noqa: BLE001 - any failure means: try the next implementation
            log(f"experts implementation {impl} failed here: {type(e).__name__}: {str(e)[:200]}")
            model = None
    if model is None:
        raise RuntimeError("no experts implementation works")
    n_params = sum(p.numel() for p in {id(p): p for p in list(model.parameters()) + list(mtp.parameters())}.values())
    log(f"model: {n_params / 1e6:.2f} M parameters (vision tower included), experts via {impl}")
    t0 = time.time()
    data, use = pack(text_ids, chat_ids, args.seq, args.steps * args.batch, spec.seed)
    log(f"data: {data.shape[0]} windows of {args.seq + 1} ids = {data.numel() / 1e6:.1f} M tokens, "
        f"{use} ({time.time() - t0:.1f} s)")
    params = {id(p): p for p in list(model.parameters()) + list(mtp.parameters()) if p.requires_grad}.values()
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)
    router = RouterStats([model, mtp])
    warm = max(1, args.steps // 25)

    def lr_at(s):
        if s < warm:
            return args.lr * (s + 1) / warm
        q = (s - warm) / max(1, args.steps - warm)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * q)))

    hist = []
    t0 = time.time()
    for step in range(args.steps):
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step)
        batch = data[step * args.batch:(step + 1) * args.batch].to(dev, non_blocking=True).long()
        x, y = batch[:, :-1], batch[:, 1:]
        router.aux.clear()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = lm(input_ids=x, use_cache=False).last_hidden_state
            logits = model.lm_head(h)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
            ml = mtp_forward(model, mtp, x, h, lm.rotary_emb, spec.mrope)
            mloss = F.cross_entropy(ml.float().reshape(-1, ml.shape[-1]), y[:, 1:].reshape(-1))
            aux = torch.stack(router.aux).mean()
            total = loss + args.mtp_weight * mloss + 0.01 * aux
        opt.zero_grad(set_to_none=True)
        total.backward()
        gn = torch.nn.utils.clip_grad_norm_(list(params), 1.0)
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            el = time.time() - t0
            rec = {"step": step, "loss": float(loss), "mtp_loss": float(mloss), "aux": float(aux),
                   "grad_norm": float(gn), "lr": lr_at(step), "seconds": round(el, 1),
                   "tokens_per_s": round((step + 1) * x.numel() / max(el, 1e-9))}
            hist.append(rec)
            log(json.dumps(rec))
        if args.max_seconds and time.time() - t0 > args.max_seconds:
            log(f"!! stopped at step {step}: --max-seconds {args.max_seconds}")
            break
    for hd in router.handles:
        hd.remove()
    return model.cpu().float(), mtp.cpu().float(), {"history": hist, "steps_done": step + 1,
                                                     "train_seconds": round(time.time() - t0, 1),
                                                     "parameters": n_params, "experts_impl": impl, "data": use}


# ---------------------------------------------------------------------------------------------------------------
# Reference outputs and measurements
# ---------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def greedy_text(model, hf, prompt_ids, n, eos):
    """transformers' own greedy continuation (cache on), stopping at eos; the README's samples."""
    x = torch.tensor([prompt_ids])
    out = model(input_ids=x, use_cache=True)
    cache, got = out.past_key_values, []
    for _ in range(n):
        nxt = int(out.logits[0, -1].argmax())
        if nxt in eos:
            break
        got.append(nxt)
        out = model(input_ids=torch.tensor([[nxt]]), past_key_values=cache, use_cache=True)
    return got, hf.decode(got, skip_special_tokens=False)


@torch.no_grad()
def routing_measure(model, seqs, top_k, n_experts):
    """Per layer: entropy of expert use (bits; log2(E) is uniform), the share of the most used expert, and the
    reuse between consecutive tokens (fraction of a token's top-k experts the previous token also chose); plus
    the trace itself for the expert-cache simulation."""
    st = RouterStats([model])
    st.trace = {}
    for s in seqs:
        model(input_ids=torch.tensor([s]), use_cache=False)
    res, trace = {}, {}
    for name, parts in st.trace.items():
        idx = torch.cat(parts)  # [tokens, k]
        counts = torch.bincount(idx.reshape(-1), minlength=n_experts).float()
        p = counts / counts.sum()
        ent = float(-(p[p > 0] * p[p > 0].log2()).sum())
        prev, cur = idx[:-1], idx[1:]
        reuse = float((cur[:, :, None] == prev[:, None, :]).any(-1).float().mean())
        res[name] = {"entropy_bits": round(ent, 4), "uniform_bits": round(math.log2(n_experts), 4),
                     "top_expert_share": round(float(p.max()), 4), "consecutive_reuse": round(reuse, 4),
                     "reuse_if_independent": round(top_k / n_experts, 4), "tokens": idx.shape[0]}
        trace[name] = idx.tolist()
    for hd in st.handles:
        hd.remove()
    return res, trace


def reference_phase(out, args):
    work = out / "work"
    d = out / NAME
    tokdir = work / "tokenizer"
    tok_text = (tokdir / "tokenizer.json").read_text(encoding="utf-8")
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tok_text)
    ids = {c: tok.token_to_id(c) for c, _ in fx.ADDED_TOKENS}
    hf = hf_tokenizer(d)
    held = json.loads((work / "heldout.json").read_text())
    spec = make_spec(ids)
    enc = lambda s: tok.encode(s, add_special_tokens=False).ids  # noqa: E731
    torch.set_num_threads(args.threads)

    # Held-out reference sequence: a held-out stdlib file's start, then a held-out tool conversation.
    code = enc(held["text"][0])[:300]
    chat = next(c for c, m in zip(held["chats"], held["chat_messages"]) if "<tool_call>" in c)
    seq = code + [ids["<|endoftext|>"]] + enc(chat)[:700]
    call = [m for m in held["chat_messages"] if m[1] and m[0][-1]["role"] != "system"]
    # The greedy prompt: a held-out calculator question with the tools, thinking on.
    q = corpus.ask_arith(random.Random(5), "37 * (12 + 5)")
    prompt_text = hf.apply_chat_template([{"role": "user", "content": q}], tools=corpus.TOOLS, tokenize=False,
                                         add_generation_prompt=True, enable_thinking=True)
    prompt = enc(prompt_text)
    calib = enc("".join(held["chats"][1:4]) + held["text"][1])[:1024]
    fx.N_GREEDY = 48
    log(f"reference: seq {len(seq)} ids, prompt {len(prompt)} ids, calibration {len(calib)} ids; "
        f"{len(call)} held-out tool conversations")

    manifest = {"models": {}}
    loaded, mtp_ref = reference_bf16(spec, d, seq, prompt, manifest)
    ref = json.loads((d / "ref.json").read_text())
    ref["greedy"]["prompt_text"] = prompt_text
    ref["greedy"]["text_cache"] = hf.decode(ref["greedy"]["ids_cache"], skip_special_tokens=False)

    # Held-out perplexity over more text than ref.json carries (transformers, float32 CPU).
    with torch.no_grad():
        nll, n = 0.0, 0
        for s in [enc(t)[:1024] for t in held["text"][:8]] + [enc(c)[:1024] for c in held["chats"][:24]]:
            lg = loaded(input_ids=torch.tensor([s]), use_cache=False).logits[0].float()
            nll += float(F.cross_entropy(lg[:-1], torch.tensor(s[1:]), reduction="sum"))
            n += len(s) - 1
    ref["heldout"] = {"tokens": n, "ppl": math.exp(nll / n),
                      "what": "first 1024 ids of 8 held-out text documents and 24 held-out conversations"}

    # Samples for the README and the end-to-end tests: greedy, transformers, cache on.
    eos = {ids["<|im_end|>"], ids["<|endoftext|>"]}
    samples = []
    claude_system = corpus.CLAUDE_SYSTEM_PREFIX + "\nYou are capy-tiny."
    asks = [("Write a Python function that returns the square of a number.", None, None, False),
            ("What is 37 * (12 + 5)?", "toy", None, True),
            ("What files are in /home/user/project?", "toy", None, False),
            ("Hello! Who are you?", None, None, False),
            ("Explain the for statement in Python.", None, None, True),
            ("Read /tmp/capy/notes.txt", "claude", claude_system, True)]
    for q, tools, system, think in asks:
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": q}]
        tl = {"toy": corpus.TOOLS, "claude": [corpus.CLAUDE_READ]}.get(tools)
        p = hf.apply_chat_template(msgs, tools=tl, tokenize=False, add_generation_prompt=True, enable_thinking=think)
        got, text = greedy_text(loaded, hf, enc(p), 160, eos)
        samples.append({"user": q, "system": system, "tools": tools, "thinking": think, "ids": got, "text": text})
        log(f"sample {q!r}:\n{text}\n")
    ref["samples"] = samples

    # Tool-call accuracy on held-out task prompts: does greedy decoding write a call that parses, names the
    # right tool and carries the asked expression / path?
    hits, tried = 0, 0
    for msgs, tools, think in [m for m in held["chat_messages"] if m[1]][:24]:
        first = msgs[:next(i for i, m in enumerate(msgs) if m["role"] == "user") + 1]
        want = next((m for m in msgs if m["role"] == "assistant"), None)
        if not want or not want.get("tool_calls"):
            continue
        p = hf.apply_chat_template(first, tools=tools, tokenize=False, add_generation_prompt=True,
                                   enable_thinking=think)
        _, text = greedy_text(loaded, hf, enc(p), 96, eos)
        fn = want["tool_calls"][0]["function"]
        ok = f"<function={fn['name']}>" in text and all(f"\n{v}\n" in text for v in fn["arguments"].values())
        hits += ok
        tried += 1
    ref["tool_calls_on_heldout_prompts"] = {"correct": hits, "tried": tried}
    log(f"tool calls on held-out prompts: {hits}/{tried} correct")
    (d / "ref.json").write_text(json.dumps(ref, indent=1) + "\n")

    # Routing skew on held-out text and chats, and the traces.
    seqs = [enc(t)[:512] for t in held["text"][:6]] + [enc(c)[:512] for c in held["chats"][:10]]
    tc = fx.text_config_of(loaded)
    rstats, trace = routing_measure(loaded, seqs, tc.num_experts_per_tok, tc.num_experts)
    (out / "routing.json").write_text(json.dumps({"per_layer": rstats, "note": "held-out text and chats, "
                                                  "transformers float32 CPU"}, indent=1) + "\n")
    (out / "routing-trace.json").write_text(json.dumps({"top_k": tc.num_experts_per_tok, "experts": tc.num_experts,
                                                        "layers": trace}) + "\n")
    log(json.dumps(rstats, indent=1))

    # NVFP4 (ModelOpt layout) from the same BF16 bytes, with its own W4A4 reference.
    fx.make_nvfp4_fixture(spec, d, out, tok_text, ids, seq, prompt, calib, manifest, name=NAME + "-nvfp4")
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=1, default=str) + "\n")
    if fx.PROBLEMS:
        log(f"!! problems: {fx.PROBLEMS}")
    return 1 if fx.PROBLEMS else 0


def reference_bf16(spec, d, seq, prompt, manifest):
    """ref.json for the trained BF16 checkpoint (written by the train phase), as the fixtures' make_bf16_fixture
    does after building: read back, MTP read back, reference, manifest."""
    loaded = fx.load_model(spec, d)
    ckpt = fx.read_checkpoint(d)
    mtp_ref = fx.MTPHead(spec, fx.text_config_of(loaded))
    fx.load_mtp_from_checkpoint(mtp_ref, ckpt)
    mtp_ref.eval()
    ref = fx.reference(spec, loaded, seq, prompt, mtp_ref)
    fx.finish_ref(ref, d)
    manifest["models"][spec.name] = fx.model_manifest(spec, d, ckpt, ref, None)
    fx.log_summary(spec.name, ref)
    return loaded, mtp_ref


def train_phase(out, args):
    work = out / "work"
    t0 = time.time()
    tok, tok_text, ids, text_ids, chat_ids = build_corpus(work, args)
    log(f"corpus and tokenizer: {time.time() - t0:.1f} s")
    spec = make_spec(ids)
    model, mtp, info = train(spec, text_ids, chat_ids, args)
    d = out / NAME
    model.eval()
    mtp.eval()
    fx.save_bf16(spec, model, mtp, d, tok_text, ids)
    info.update({"seq": args.seq, "batch": args.batch, "steps": args.steps, "lr": args.lr,
                 "mtp_weight": args.mtp_weight, "chats": args.chats,
                 "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)})
    (out / "train.json").write_text(json.dumps(info, indent=1) + "\n")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--phase", choices=["all", "train", "ref"], default="all")
    ap.add_argument("--steps", type=int, default=2400)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--chats", type=int, default=40000)
    ap.add_argument("--experts", default="grouped_mm", help="transformers experts_implementation for training")
    ap.add_argument("--max-seconds", type=float, default=0, help="stop training early (a safety net, not a plan)")
    ap.add_argument("--threads", type=int, default=8, help="CPU threads of the reference phase")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rc = 0
    if args.phase in ("all", "train"):
        rc |= train_phase(out, args)
    if args.phase in ("all", "ref"):
        rc |= reference_phase(out, args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
