#!/usr/bin/env python3
"""routing-trace.py - synthetic MoE routing traces for judging an expert cache (issue 10).

    bench/routing-trace.py OUT --layers 8 --experts 256 --top-k 8 [--requests 8] [--tokens 512]
                           [--skew 0] [--focus 0] [--reuse 0] [--seed 1]

Writes the experts every token is routed to, layer by layer, for --requests requests of
--tokens decode tokens each, one after the other (batch 1). The model of routing, one knob
per effect that published routing studies describe:

- --skew s: popularity over a layer's experts follows a Zipf law, p(rank r) ~ 1 / (r + 1)^s,
  ranks a seeded permutation per layer (s = 0: uniform, what random weights give).
- --focus f: each request draws a fraction f of its picks from its own Zipf ranking (another
  permutation, same s, or s = 1 when s = 0): within one request fewer experts carry most of
  the work than over a whole dataset (MoE-Infinity, Xue et al., arXiv:2401.14361: sparse,
  skewed expert reuse within a request at batch size 1).
- --reuse r: each of a token's k picks repeats, with probability r, one of the previous
  token's experts at that layer (the Mixtral report, Jiang et al., arXiv:2401.04088, Sec. 5:
  consecutive tokens are routed to the same experts more often than chance).

A token's k experts are distinct (top-k). Deterministic for a seed; standard library only.

    bench/routing-trace.py OUT --from-json share/models/train/routing-trace.json

converts a real model's recorded routing instead (capy-tiny's, written by share/models/
train_tiny.py: {"top_k", "experts", "layers": {router name: [[k ids] per token]}}, layers in
the order of their names' layer numbers); the knobs are then ignored.
Format (little-endian): "CAPYRTR1", u32 layers, u32 experts, u32 k, u32 0, u64 tokens, then
tokens x layers x k int32 expert ids.
"""
import argparse
import bisect
import random
import struct

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--layers", type=int, default=8)
ap.add_argument("--experts", type=int, default=256)
ap.add_argument("--top-k", type=int, default=8)
ap.add_argument("--requests", type=int, default=8)
ap.add_argument("--tokens", type=int, default=512)
ap.add_argument("--skew", type=float, default=0.0)
ap.add_argument("--focus", type=float, default=0.0)
ap.add_argument("--reuse", type=float, default=0.0)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--from-json", help="a recorded trace (JSON) to convert instead of drawing one")
a = ap.parse_args()


def from_json(path, out):
    import json
    import re

    j = json.load(open(path))
    names = sorted(j["layers"], key=lambda n: int(re.search(r"layers\.(\d+)\.", n).group(1)))
    layers = [j["layers"][n] for n in names]
    L, E, K, T = len(layers), j["experts"], j["top_k"], len(layers[0])
    with open(out, "wb") as f:
        f.write(b"CAPYRTR1" + struct.pack("<IIIIQ", L, E, K, 0, T))
        for t in range(T):
            f.write(struct.pack("<%di" % (L * K), *[e for lay in layers for e in lay[t]]))
    print("%s: %d tokens x %d layers x top-%d of %d experts (from %s)" % (out, T, L, K, E, path))
    raise SystemExit(0)


if a.from_json:
    from_json(a.from_json, a.out)
rng = random.Random(a.seed)
L, E, K = a.layers, a.experts, a.top_k
if K > E:
    raise SystemExit("routing-trace.py: --top-k %d > --experts %d" % (K, E))


def zipf_cdf(s, perm):
    """Cumulative weights over experts: expert perm[r] has weight 1 / (r + 1)^s."""
    w = [0.0] * E
    for r, e in enumerate(perm):
        w[e] = 1.0 / (r + 1) ** s
    acc, out = 0.0, []
    for x in w:
        acc += x
        out.append(acc)
    return out


def draw(cdf):
    return min(bisect.bisect_left(cdf, rng.random() * cdf[-1]), E - 1)


base = []
for _ in range(L):
    perm = list(range(E))
    rng.shuffle(perm)
    base.append(zipf_cdf(a.skew, perm))

n_tok = a.requests * a.tokens
with open(a.out, "wb") as f:
    f.write(b"CAPYRTR1" + struct.pack("<IIIIQ", L, E, K, 0, n_tok))
    for _ in range(a.requests):
        own = []
        for _ in range(L):
            perm = list(range(E))
            rng.shuffle(perm)
            own.append(zipf_cdf(a.skew if a.skew > 0 else 1.0, perm))
        prev = [None] * L
        for _ in range(a.tokens):
            row = []
            for l in range(L):
                picked = []
                while len(picked) < K:
                    if prev[l] and rng.random() < a.reuse:
                        e = rng.choice(prev[l])
                    elif rng.random() < a.focus:
                        e = draw(own[l])
                    else:
                        e = draw(base[l])
                    if e not in picked:
                        picked.append(e)
                prev[l] = picked
                row += picked
            f.write(struct.pack("<%di" % (L * K), *row))
print("%s: %d tokens x %d layers x top-%d of %d experts (skew %g, focus %g, reuse %g)"
      % (a.out, n_tok, L, K, E, a.skew, a.focus, a.reuse))
