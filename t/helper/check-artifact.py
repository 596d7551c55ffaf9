#!/usr/bin/env python3
"""check-artifact.py - an independent check of a converted artifact against its checkpoint.

    check-artifact.py ARTIFACT CHECKPOINT_DIR [--vision] [--quantized-experts]

Re-derives, from the safetensors files alone and the rules of docs/artifact.md, the bytes
every artifact tensor must hold (plain copies, gate/up fusion, expert stacks, Qwen3-Next
de-interleaving, PLE shard concatenation, NVFP4 records with their parts) and compares them
with the artifact byte for byte. Also checks that every checkpoint tensor was used (vision
ones only with --vision) and that every embedded file is a byte-identical copy. Written
separately from the C converter on purpose: it shares no code with it. Standard library only.
"""
import json
import os
import struct
import sys

ST_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
            "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def align(x, a):
    return (x + a - 1) // a * a


class Checkpoint:
    def __init__(self, d):
        self.d = d
        self.tensors = {}
        for f in sorted(os.listdir(d)):
            if not f.endswith(".safetensors"):
                continue
            data = open(os.path.join(d, f), "rb").read()
            n = struct.unpack("<Q", data[:8])[0]
            hdr = json.loads(data[8:8 + n])
            for name, e in hdr.items():
                if name == "__metadata__":
                    continue
                b, end = e["data_offsets"]
                self.tensors[name] = (e["dtype"], e["shape"], data[8 + n + b:8 + n + end])
        self.used = set()

    def get(self, name):
        self.used.add(name)
        return self.tensors[name]

    def has(self, name):
        return name in self.tensors


class Matrix:
    """Rows of a source matrix: plain bytes per row, or NVFP4 (codes, scales) per row + scalars."""

    def __init__(self, ck, name, slice_=None):
        dt, shape, data = ck.get(name)
        self.name = name
        if dt == "U8" and name.endswith(".weight"):
            base = name[:-len(".weight")]
            _, _, sc = ck.get(base + ".weight_scale")
            _, _, s2 = ck.get(base + ".weight_scale_2")
            iname = base + ".input_scale"
            isc = ck.get(iname)[2] if ck.has(iname) else struct.pack("<f", 0.0)
            self.nvfp4 = True
            self.n, half = shape
            self.k = half * 2
            self.codes = [data[r * half:(r + 1) * half] for r in range(self.n)]
            q = self.k // 16
            self.scales = [sc[r * q:(r + 1) * q] for r in range(self.n)]
            self.s2, self.iscale = s2, isc
            self.dtype = "NVFP4"
            return
        self.nvfp4 = False
        self.dtype = dt
        es = ST_SIZES[dt]
        if slice_ is not None:  # a fused [E, N, K] tensor
            e, n, k = shape
            per = n * k * es
            data = data[slice_ * per:(slice_ + 1) * per]
            shape = [n, k]
        rows = shape[0] if shape else 1
        rb = len(data) // rows if rows else 0
        self.n = rows
        self.rows = [data[r * rb:(r + 1) * rb] for r in range(rows)]

    def band(self, r0, n):
        m = object.__new__(Matrix)
        m.__dict__.update(self.__dict__)
        m.n = n
        if self.nvfp4:
            m.codes = self.codes[r0:r0 + n]
            m.scales = self.scales[r0:r0 + n]
        else:
            m.rows = self.rows[r0:r0 + n]
        return m


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def e4m3(x):
    """float32 -> float8_e4m3fn byte, round to nearest even, as torch casts (>= 480 -> NaN)."""
    if x != x or abs(x) >= 480:
        return 0x7F
    sign = 0x80 if x < 0 else 0
    a = abs(x)
    best, bestv = 0, 0.0
    for code in range(0x7F):  # all finite magnitudes; pick the nearest, ties to even code
        e, m = code >> 3, code & 7
        v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        if abs(v - a) < abs(bestv - a) or (abs(v - a) == abs(bestv - a) and code % 2 == 0 and best % 2 == 1):
            best, bestv = code, v
    return sign | best


def e4m3_value(b):
    e, m = (b >> 3) & 15, b & 7
    v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
    return -v if b & 0x80 else v


def e2m1(x):
    bounds = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    a = abs(x)
    o = sum(1 for b in bounds if b < a)
    if a in (0.75, 1.75, 3.5):
        o += 1
    return (8 if x < 0 else 0) | o


def to_floats(dt, row):
    if dt == "BF16":
        return [struct.unpack("<f", b"\0\0" + row[i:i + 2])[0] for i in range(0, len(row), 2)]
    if dt == "F32":
        return list(struct.unpack("<%df" % (len(row) // 4), row))
    return list(struct.unpack("<%de" % (len(row) // 2), row))


def quantize(bands):
    """ModelOpt's NVFP4 rule on one part (float32 arithmetic emulated exactly)."""
    rows = [to_floats(b.dtype, r) for b in bands for r in b.rows]
    amax = max(abs(v) for r in rows for v in r)
    s2 = f32(amax / 2688.0) or 1.0
    codes, scales = bytearray(), bytearray()
    for r in rows:
        for b0 in range(0, len(r), 16):
            blk = r[b0:b0 + 16]
            ps = f32(max(abs(v) for v in blk) / f32(6.0 * s2)) or 1.0
            sc = e4m3(ps)
            scales.append(sc)
            d = f32(e4m3_value(sc) * s2)
            for i in range(0, 16, 2):
                codes.append(e2m1(f32(blk[i] / d)) | e2m1(f32(blk[i + 1] / d)) << 4)
    m = object.__new__(Matrix)
    m.nvfp4, m.n, m.k = True, len(rows), len(rows[0])
    m.codes = [bytes(codes[i * m.k // 2:(i + 1) * m.k // 2]) for i in range(m.n)]
    m.scales = [bytes(scales[i * m.k // 16:(i + 1) * m.k // 16]) for i in range(m.n)]
    m.s2, m.iscale = struct.pack("<f", s2), struct.pack("<f", 0.0)
    return [m]


def record(parts, quant=False):
    """The artifact bytes of one slice made of parts (each a list of Matrix bands of one source);
    quant: the parts are BF16 and the artifact holds them quantized to NVFP4 (ModelOpt's rule)."""
    if quant and not parts[0][0].nvfp4:
        parts = [quantize(p) for p in parts]
    bands = [b for p in parts for b in p]
    if not bands[0].nvfp4:
        return b"".join(r for b in bands for r in b.rows)
    n = sum(b.n for b in bands)
    k = bands[0].k
    codes = b"".join(c for b in bands for c in b.codes)
    scales = b"".join(s for b in bands for s in b.scales)
    a = align(n * k // 2, 64)
    g = align(a + n * k // 16, 64)
    out = bytearray(align(g + 8 * len(parts), 64))
    out[0:len(codes)] = codes
    out[a:a + len(scales)] = scales
    for i, p in enumerate(parts):
        out[g + 4 * i:g + 4 * i + 4] = p[0].s2
        out[g + 4 * (len(parts) + i):g + 4 * (len(parts) + i) + 4] = p[0].iscale
    return bytes(out)


def main():
    art, ckdir = sys.argv[1], sys.argv[2]
    vision = "--vision" in sys.argv
    quant = "--quantized-experts" in sys.argv
    ck = Checkpoint(ckdir)
    blob = open(art, "rb").read()
    magic, ver, hb, doff, dlen, data_off, fbytes = struct.unpack("<8sIIQQQQ", blob[:48])
    assert magic == b"CAPYART\0" and ver == 1 and fbytes == len(blob), "bad header"
    d = json.loads(blob[doff:doff + dlen])
    fam = d["model"]["family"]
    cfg = d["model"]["config"]
    sp = "model.language_model." if ck.has("model.language_model.embed_tokens.weight") else "model."
    problems = []

    for f in d["files"]:
        src = open(os.path.join(ckdir, f["name"]), "rb").read()
        if blob[f["offset"]:f["offset"] + f["bytes"]] != src:
            problems.append("file %s differs" % f["name"])

    def src_name(n):
        if n.startswith("visual."):
            return "model." + n
        if n.startswith("mtp.") or n.startswith("lm_head."):
            return n
        return sp + n

    for t in d["tensors"]:
        name, shape = t["name"], t["shape"]
        s = src_name(name)
        slices = []
        if name.endswith("mlp.experts.gate_up_proj") or name.endswith("mlp.experts.down_proj"):
            e = shape[0]
            fused = ck.has(s)
            for x in range(e):
                if name.endswith("gate_up_proj"):
                    half = shape[1] // 2
                    if fused:
                        m = Matrix(ck, s, x)
                        slices.append(record([[m.band(0, half)], [m.band(half, half)]], quant))
                    else:
                        base = s[:-len("gate_up_proj")]
                        slices.append(record([[Matrix(ck, "%s%d.gate_proj.weight" % (base, x))],
                                              [Matrix(ck, "%s%d.up_proj.weight" % (base, x))]], quant))
                else:
                    if fused:
                        slices.append(record([[Matrix(ck, s, x)]], quant))
                    else:
                        base = s[:-len("down_proj")]
                        slices.append(record([[Matrix(ck, "%s%d.down_proj.weight" % (base, x))]], quant))
        elif name.endswith("gate_up_proj.weight"):
            base = s[:-len("gate_up_proj.weight")]
            slices.append(record([[Matrix(ck, base + "gate_proj.weight")], [Matrix(ck, base + "up_proj.weight")]]))
        elif fam == "qwen3_next" and ".linear_attn.in_proj_" in name:
            base = s[:s.index("in_proj_")]
            nk, dk = cfg["linear_num_key_heads"], cfg["linear_key_head_dim"]
            nv, dv = cfg["linear_num_value_heads"], cfg["linear_value_head_dim"]
            r = nv // nk
            grp = 2 * dk + 2 * r * dv
            which = name.split("in_proj_")[1].split(".")[0]
            if which in ("qkv", "z"):
                m = Matrix(ck, base + "in_proj_qkvz.weight")
                if which == "qkv":
                    bands = [m.band(g * grp, dk) for g in range(nk)] + [m.band(g * grp + dk, dk) for g in range(nk)] + \
                            [m.band(g * grp + 2 * dk, r * dv) for g in range(nk)]
                else:
                    bands = [m.band(g * grp + 2 * dk + r * dv, r * dv) for g in range(nk)]
            else:
                m = Matrix(ck, base + "in_proj_ba.weight")
                off = 0 if which == "b" else r
                bands = [m.band(g * 2 * r + off, r) for g in range(nk)]
            slices.append(record([bands]))
        elif name.endswith("ngram_embedding.weight") and not ck.has(s):
            base = s[:-len("weight")]
            i, bands = 0, []
            while ck.has("%sshard_%d.weight" % (base, i)):
                bands.append(Matrix(ck, "%sshard_%d.weight" % (base, i)))
                i += 1
            slices.append(record([bands]))
        else:
            slices.append(record([[Matrix(ck, s)]]))
        stride = t.get("stride", 0)
        per = t["bytes"] // len(slices)
        for i, want in enumerate(slices):
            off = t["offset"] + i * (stride or per)
            if len(want) != per or blob[off:off + per] != want:
                problems.append("tensor %s slice %d differs (%d vs %d bytes)" % (name, i, per, len(want)))
                break

    for name in ck.tensors:
        if name in ck.used or (not vision and name.startswith("model.visual.")):
            continue
        problems.append("checkpoint tensor %s not in the artifact" % name)
    for p in problems[:20]:
        print(p)
    if problems:
        print("%d problems" % len(problems))
        sys.exit(1)
    print("ok: %d tensors, %d files match %s" % (len(d["tensors"]), len(d["files"]), ckdir))


main()
