#!/usr/bin/env python3
"""gen-mini.py - write the small tokenizer.json files in this directory.

Each exercises tokenizer.json features the Qwen files do not use, so that capy's tokenizer can be
compared with the Hugging Face library on them (t/t2001-tokenizer-hf.bats). The vocabularies are
tiny and made up; what matters is that every feature is reached. Run: python3 gen-mini.py
"""
import json
import os
import string

HERE = os.path.dirname(os.path.abspath(__file__))


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def bpe(vocab_tokens, merges, legacy=False, **opts):
    vocab = {}
    for t in vocab_tokens:
        vocab.setdefault(t, len(vocab))
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": False}
    model.update(opts)
    prefix = model["continuing_subword_prefix"] or ""
    for a, b in merges:
        new = a + b[len(prefix):]
        vocab.setdefault(new, len(vocab))
    model["vocab"] = vocab
    model["merges"] = [f"{a} {b}" for a, b in merges] if legacy else [[a, b] for a, b in merges]
    return model


def added(content, id_, special=False, lstrip=False, rstrip=False, single_word=False,
          normalized=None):
    return {"id": id_, "content": content, "single_word": single_word, "lstrip": lstrip,
            "rstrip": rstrip, "normalized": (not special) if normalized is None else normalized,
            "special": special}


def write(name, model, normalizer=None, pre_tokenizer=None, decoder=None, added_tokens=()):
    doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": list(added_tokens),
           "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": None,
           "decoder": decoder, "model": model}
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")


letters = list(string.ascii_letters) + list(string.digits) + list(" .,'!?-")
words = ["the", "and", "ing", "tion", "er", "in", "on", "re"]


def word_merges(prefix_space=""):
    out = []
    for w in words:
        cur = prefix_space + w[0] if prefix_space else w[0]
        if prefix_space:
            out.append((prefix_space, w[0]))
        for ch in w[1:]:
            out.append((cur, ch))
            cur += ch
    return list(dict.fromkeys(out))


# 1. byte fallback, no fuse; NFD; split on a literal space merged with the next piece, digits
#    isolated; no decoder (HF joins tokens with spaces); added tokens with lstrip/rstrip.
fallback = bpe(["<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + letters + ["\u0301", "e\u0301"],
               word_merges(" ") + [("e", "\u0301")], unk_token="<unk>", byte_fallback=True)
write("fallback.json", fallback,
      normalizer={"type": "Sequence", "normalizers": [{"type": "NFD"}]},
      pre_tokenizer={"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithNext", "invert": False},
          {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False}]},
      added_tokens=[added("<unk>", 0, special=True), added("[MASK]", 999, special=True, lstrip=True),
                    added("xyz", 1000, rstrip=True), added("é", 1001, normalized=True)])

# 2. unknown tokens fused; continuing_subword_prefix and end_of_word_suffix; NFKC; whitespace
#    removed, punctuation merged with the previous piece; single_word added tokens.
pre = "##"
vocab2 = ["<unk>"] + list(string.ascii_lowercase)
vocab2 += [pre + c for c in string.ascii_lowercase]
vocab2 += [c + "</w>" for c in string.ascii_lowercase] + [pre + c + "</w>" for c in string.ascii_lowercase]
merges2 = [("t", "##h"), ("th", "##e</w>"), ("a", "##n"), ("an", "##d</w>"), ("i", "##n"),
           ("in", "##g</w>"), ("##i", "##n"), ("##in", "##g</w>"), ("e", "##r</w>")]
unk = bpe(vocab2, merges2, unk_token="<unk>", fuse_unk=True, continuing_subword_prefix=pre,
          end_of_word_suffix="</w>")
write("unk.json", unk, normalizer={"type": "NFKC"},
      pre_tokenizer={"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Removed", "invert": False},
          {"type": "Split", "pattern": {"Regex": "\\p{P}+"}, "behavior": "MergedWithPrevious", "invert": False}]},
      added_tokens=[added("<unk>", 0, special=True), added("[CLS]", 500, special=True, single_word=True),
                    added("foo", 501, single_word=True, lstrip=True)])

# 3. legacy "a b" merges with a #version line, ignore_merges, unknown tokens not fused,
#    Contiguous and inverted splits, no normalizer.
merges3 = word_merges()
m3 = bpe(["<unk>"] + letters, merges3, legacy=True, unk_token="<unk>", ignore_merges=True)
m3["merges"] = ["#version: 0.2"] + m3["merges"]
m3["vocab"]["then"] = len(m3["vocab"])  # in the vocabulary, but no merge reaches it
write("merges.json", m3,
      pre_tokenizer={"type": "Sequence", "pretokenizers": [
          {"type": "Split", "pattern": {"Regex": "[a-z]+|[0-9]+"}, "behavior": "Contiguous", "invert": False},
          {"type": "Split", "pattern": {"Regex": "\\s"}, "behavior": "MergedWithPrevious", "invert": True},
          {"type": "Split", "pattern": {"Regex": "\\d"}, "behavior": "MergedWithNext", "invert": True}]})

# 4. ByteLevel with add_prefix_space and the GPT-2 regex; NFKD then NFC; ByteLevel decoder;
#    added tokens of every kind, one of them already in the vocabulary.
b2u = bytes_to_unicode()
alphabet = [b2u[b] for b in range(256)]
G = b2u[ord(" ")]
merges4 = []
for w in words:
    cur = G
    for ch in w:
        merges4.append((cur, ch))
        cur += ch
merges4 += [("h", "e"), ("he", "l"), ("hel", "l"), ("hell", "o"), (G, "<"), ("t", "h")]
bl = bpe(alphabet, list(dict.fromkeys(merges4)))
bl_added = [added("<s>", 300, special=True), added("</s>", 301, special=True),
            added("<mask>", 302, special=True, lstrip=True, normalized=True),
            added("hello", 303), added("é", 304), added("ab", 305, single_word=True),
            added(G + "the", 306, special=True), added("<pad>", 307, special=True, rstrip=True)]
write("bytelevel.json", bl,
      normalizer={"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "NFC"}]},
      pre_tokenizer={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
      decoder={"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
      added_tokens=bl_added)

# 5. ByteLevel alone without its regex or prefix space; dropout 0; no added tokens.
bl5 = dict(bl)
bl5["dropout"] = 0.0
write("bytelevel-plain.json", bl5,
      pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
      decoder={"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False})
