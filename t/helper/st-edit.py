#!/usr/bin/env python3
"""st-edit.py - damage a safetensors file in one precise way, for the bad-input tests.

    st-edit.py FILE rename OLD NEW          rename a tensor
    st-edit.py FILE shape NAME D0,D1,...    change a tensor's shape (same byte size or not)
    st-edit.py FILE dtype NAME DTYPE        change a tensor's dtype string
    st-edit.py FILE offsets NAME BEGIN END  change a tensor's data_offsets
    st-edit.py FILE add NAME DTYPE D0,...   append a new tensor (zero bytes)
    st-edit.py FILE f32 NAME VALUE          overwrite a tensor's first float32 value (nan, inf ok)
    st-edit.py FILE byte NAME INDEX VALUE   overwrite one byte of a tensor's data
    st-edit.py FILE header-len N            overwrite the 8-byte header length
    st-edit.py FILE garble OFFSET           overwrite the header byte at OFFSET (from 8) with '#'
    st-edit.py FILE truncate N              cut the file to N bytes (negative: remove -N bytes)

The header is rewritten in place with the same key order; data offsets of other
tensors are kept (edits that change sizes are meant to be caught by the reader).
"""
import json
import struct
import sys

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2,
         "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def load(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def save(path, hdr, body):
    text = json.dumps(hdr, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + body)


def main():
    path, op, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if op == "header-len":
        data = bytearray(open(path, "rb").read())
        data[:8] = struct.pack("<Q", int(args[0]))
        open(path, "wb").write(data)
        return
    if op == "garble":
        data = bytearray(open(path, "rb").read())
        data[8 + int(args[0])] = ord("#")
        open(path, "wb").write(data)
        return
    if op == "truncate":
        data = open(path, "rb").read()
        n = int(args[0])
        open(path, "wb").write(data[:n] if n >= 0 else data[:n])
        return
    hdr, body = load(path)
    if op == "rename":
        hdr = {(args[1] if k == args[0] else k): v for k, v in hdr.items()}
    elif op == "shape":
        hdr[args[0]]["shape"] = [int(x) for x in args[1].split(",") if x != ""]
    elif op == "dtype":
        hdr[args[0]]["dtype"] = args[1]
    elif op == "offsets":
        hdr[args[0]]["data_offsets"] = [int(args[1]), int(args[2])]
    elif op == "add":
        shape = [int(x) for x in args[2].split(",") if x != ""]
        n = SIZES[args[1]]
        for d in shape:
            n *= d
        hdr[args[0]] = {"dtype": args[1], "shape": shape, "data_offsets": [len(body), len(body) + n]}
        body += bytes(n)
    elif op in ("f32", "byte"):
        b, _ = hdr[args[0]]["data_offsets"]
        body = bytearray(body)
        if op == "f32":
            body[b:b + 4] = struct.pack("<f", float(args[1]))
        else:
            body[b + int(args[1])] = int(args[2], 0)
        body = bytes(body)
    else:
        sys.exit("unknown op " + op)
    save(path, hdr, body)


main()
