#!/usr/bin/env python3
"""Seed corpora for the harnesses, from data/fixtures (stdlib only).

usage: make_seeds.py REPO_ROOT OUT  -> OUT/seeds/{safetensors,config,model,index}/
"""
import json
import os
import struct
import sys

root, out = sys.argv[1], sys.argv[2]
fx = os.path.join(root, "data", "fixtures")
dirs = {k: os.path.join(out, "seeds", k) for k in ("safetensors", "config", "model", "index")}
for d in dirs.values():
    os.makedirs(d, exist_ok=True)


def put(kind, name, data):
    with open(os.path.join(dirs[kind], name), "wb") as f:
        f.write(data)


def st_file(header, data=b""):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


for name in sorted(os.listdir(fx)):
    d = os.path.join(fx, name)
    if not os.path.isdir(d):
        continue
    if os.path.exists(os.path.join(d, "config.json")):
        cfg = open(os.path.join(d, "config.json"), "rb").read()
        put("config", name + ".json", cfg)
        put("model", name + ".json", cfg)
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        put("index", name + ".json", open(idx, "rb").read())
    for fn in sorted(os.listdir(d)):
        if not fn.endswith(".safetensors"):
            continue
        raw = open(os.path.join(d, fn), "rb").read()
        try:
            n = struct.unpack("<Q", raw[:8])[0]
            hdr = json.loads(raw[8:8 + n])
        except (struct.error, ValueError):
            continue
        # the real header with its data cut off (fails the size check), and a
        # shrunken valid file: the first three tensors only, shapes cut to 2x2
        put("safetensors", f"{name}-{fn}-header", raw[:8 + n])
        small, off, data = {"__metadata__": hdr.get("__metadata__", {"format": "pt"})}, 0, b""
        if len(raw) > 8 + n + (1 << 20):
            continue  # keep the seeds small
        for k, v in list((k, v) for k, v in hdr.items() if k != "__metadata__")[:3]:
            shape = [min(s, 2) for s in v["shape"]]
            size = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I32": 4, "I64": 8}.get(v["dtype"], 1)
            cnt = 1
            for s in shape:
                cnt *= s
            small[k] = {"dtype": v["dtype"], "shape": shape, "data_offsets": [off, off + cnt * size]}
            data += raw[8 + n + v["data_offsets"][0]: 8 + n + v["data_offsets"][0] + cnt * size]
            off += cnt * size
        put("safetensors", f"{name}-{fn}-small", st_file(small, data))

# hand-made safetensors covering the dtype table, empty tensors and metadata
cases = {
    "dtypes": [("F32", [2]), ("F16", [3]), ("BF16", [1, 2]), ("F64", [1]), ("I32", [2]), ("I64", [1]),
               ("BOOL", [3]), ("U8", [1]), ("F4", [2]), ("F6_E2M3", [4]), ("F8_E4M3", [2]), ("C64", [1])],
    "empty": [("F32", [0]), ("F32", [2, 0, 3]), ("F16", [])],
    "scalar": [("F32", [])],
    "high_rank": [("F32", [1, 1, 1, 1, 1, 1, 1, 2])],
}
bits = {"BOOL": 8, "U8": 8, "F4": 4, "F6_E2M3": 6, "F8_E4M3": 8, "F16": 16, "BF16": 16, "F32": 32,
        "F64": 64, "I32": 32, "I64": 64, "C64": 64}
for cname, tensors in cases.items():
    hdr, off = {}, 0
    for i, (dt, shape) in enumerate(tensors):
        cnt = 1
        for s in shape:
            cnt *= s
        nb = cnt * bits[dt] // 8
        hdr[f"t{i}"] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    put("safetensors", "synthetic-" + cname, st_file(hdr, bytes((i * 37) & 0xFF for i in range(off))))
put("safetensors", "synthetic-meta", st_file({"__metadata__": {"format": "pt", "k": "v"}}))
put("safetensors", "synthetic-meta-null", st_file({"__metadata__": None}))
put("safetensors", "synthetic-utf8", st_file({"caf\u00e9\U0001F600": {"dtype": "U8", "shape": [1],
                                                                     "data_offsets": [0, 1]}}, b"x"))
print("seeds in", os.path.join(out, "seeds"))
