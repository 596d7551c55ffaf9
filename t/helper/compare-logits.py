#!/usr/bin/env python3
"""compare-logits.py - compare two raw float32 logit files [n][vocab] (capy-test-tool logits --out).

    compare-logits.py A B VOCAB [--max-rel R] [--max-nll-diff D IDS_FILE] [--same-argmax]

Prints the norm-wise relative difference ||A - B|| / ||B|| (over everything, and the worst
position), and with IDS_FILE the largest difference of per-position NLL of the next id; exits 1
when a given bound is exceeded or, with --same-argmax, when any position's argmax differs.
Standard library only.
"""
import array
import math
import sys


def load(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


def nll(row, target):
    mx = max(row)
    z = sum(math.exp(v - mx) for v in row)
    return -(row[target] - mx - math.log(z))


def main():
    a, b, vocab = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
    args = sys.argv[4:]
    max_rel = float(args[args.index("--max-rel") + 1]) if "--max-rel" in args else None
    nll_bound, ids = None, None
    if "--max-nll-diff" in args:
        i = args.index("--max-nll-diff")
        nll_bound = float(args[i + 1])
        ids = [int(x) for x in open(args[i + 2]).read().split()]
    assert len(a) == len(b) and len(a) % vocab == 0, "sizes differ"
    n = len(a) // vocab
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    rel = math.sqrt(num / den) if den else math.sqrt(num)
    worst = 0.0
    argmax_diff = 0
    worst_nll = 0.0
    for t in range(n):
        ra, rb = a[t * vocab:(t + 1) * vocab], b[t * vocab:(t + 1) * vocab]
        d = math.sqrt(sum((x - y) ** 2 for x, y in zip(ra, rb)) / max(sum(y * y for y in rb), 1e-30))
        worst = max(worst, d)
        if max(range(vocab), key=lambda i: (ra[i], -i)) != max(range(vocab), key=lambda i: (rb[i], -i)):
            argmax_diff += 1
        if ids and t + 1 < len(ids):
            worst_nll = max(worst_nll, abs(nll(ra, ids[t + 1]) - nll(rb, ids[t + 1])))
    print("rel %.3g worst-position %.3g argmax-differs %d/%d max-nll-diff %.3g" % (rel, worst, argmax_diff, n, worst_nll))
    bad = (max_rel is not None and rel > max_rel) or (nll_bound is not None and worst_nll > nll_bound) or \
          ("--same-argmax" in args and argmax_diff)
    sys.exit(1 if bad else 0)


main()
