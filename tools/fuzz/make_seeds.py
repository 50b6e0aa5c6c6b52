#!/usr/bin/env python3
"""Seed corpora for the harnesses, from data/fixtures (stdlib only).

usage: make_seeds.py REPO_ROOT OUT      -> OUT/seeds/{safetensors,config,model,index}/
       make_seeds.py REPO_ROOT --corpus -> REPO_ROOT/tools/fuzz/corpus/{safetensors,st_index,config,model}/
                                           (the committed corpus: the same files, each folder < 1 MB)
"""
import json
import os
import struct
import sys

root, out = sys.argv[1], sys.argv[2]
fx = os.path.join(root, "data", "fixtures")
if out == "--corpus":
    base = os.path.join(root, "tools", "fuzz", "corpus")
    names = {"safetensors": "safetensors", "config": "config", "model": "model", "index": "st_index"}
else:
    base = os.path.join(out, "seeds")
    names = {k: k for k in ("safetensors", "config", "model", "index")}
dirs = {k: os.path.join(base, v) for k, v in names.items()}
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

# weights that are not finite (rc_st_read_weight refuses them): NaN, +-Inf in
# each float dtype, and an F64 beyond the fp32 range
put("safetensors", "synthetic-nonfinite", st_file(
    {"nan32": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "inf16": {"dtype": "F16", "shape": [2], "data_offsets": [8, 12]},
     "ninfbf": {"dtype": "BF16", "shape": [2], "data_offsets": [12, 16]},
     "huge64": {"dtype": "F64", "shape": [2], "data_offsets": [16, 32]}},
    struct.pack("<ff", float("nan"), 1.0) + struct.pack("<HH", 0x7C00, 0x3C00) +
    struct.pack("<HH", 0xFF80, 0x3F80) + struct.pack("<dd", 1e300, -2.5)))
# many empty tensors (the entry count is checked before the header is parsed)
put("safetensors", "synthetic-many-empty", st_file(
    {f"e{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(300)}))

# configs with norm epsilons at and past the limits
for name in sorted(os.listdir(fx)):
    cpath = os.path.join(fx, name, "config.json")
    if name not in ("neox_parallel", "llama_gqa") or not os.path.exists(cpath):
        continue
    cfg = json.load(open(cpath))
    key = "layer_norm_eps" if cfg.get("model_type") == "gpt_neox" else "rms_norm_eps"
    for tag, eps in (("zero", 0.0), ("tiny", 1e-50), ("one", 1.0), ("small", 1e-30)):
        c = dict(cfg)
        c[key] = eps
        data = json.dumps(c, indent=2).encode()
        put("config", f"{name}-eps-{tag}.json", data)
        put("model", f"{name}-eps-{tag}.json", data)

# shard paths: plain, in a subfolder, and the refused forms ("./", "..",
# "//", absolute, trailing "/"), over the qwen2_bias shards fuzz_st_index uses
qidx = os.path.join(fx, "qwen2_bias", "model.safetensors.index.json")
if os.path.exists(qidx):
    wm = json.load(open(qidx))["weight_map"]
    for tag, fn in (("dot", lambda p: "./" + p), ("dotdot", lambda p: "sub/../" + p),
                    ("slashes", lambda p: "sub//" + p),
                    ("absolute", lambda p: "/" + p), ("trailing", lambda p: p + "/"),
                    ("sub", lambda p: "sub/shard.safetensors" if p.endswith("3.safetensors") else p),
                    ("symlink", lambda p: "inside.safetensors" if p.endswith("3.safetensors") else p)):
        first = sorted(wm)[0]
        m = {k: (fn(v) if (tag in ("sub", "symlink") or k == first) else v) for k, v in wm.items()}
        put("index", f"qwen2_bias-{tag}.json", json.dumps({"metadata": {}, "weight_map": m}).encode())

print("seeds in", base)

# quantized weights (src/formats/quant.h): fuzz_safetensors also reads every
# input with an FP8 [16, 16] and an MXFP4 quantization_config; fuzz_model
# loads data/fixtures/quant/fp8 for a config with a quantization_config
fp8_n, fp8_s = 20 * 40, 2 * 3
fp8_hdr = {"w.weight": {"dtype": "F8_E4M3", "shape": [20, 40], "data_offsets": [0, fp8_n]},
           "w.weight_scale_inv": {"dtype": "F32", "shape": [2, 3], "data_offsets": [fp8_n, fp8_n + 4 * fp8_s]}}
fp8_q = bytes((i * 37) & 0x7E for i in range(fp8_n))
put("safetensors", "synthetic-fp8-blocks", st_file(fp8_hdr, fp8_q + struct.pack("<6f", *[0.01 * (k + 1) for k in range(6)])))
put("safetensors", "synthetic-fp8-hostile-scale",
    st_file(fp8_hdr, fp8_q + struct.pack("<6f", 0.01, float("nan"), 0.0, -1.0, float("inf"), 1e-3)))
put("safetensors", "synthetic-fp8-nan-code", st_file(fp8_hdr, bytes([0x7F]) + fp8_q[1:] + struct.pack("<6f", *[0.01] * 6)))
put("safetensors", "synthetic-fp8-bf16-scales", st_file(
    {"w.weight": fp8_hdr["w.weight"],
     "w.weight_scale_inv": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [fp8_n, fp8_n + 2 * fp8_s]}},
    fp8_q + struct.pack("<6H", *[0x3C23] * 6)))
put("safetensors", "synthetic-fp8-scale-grid", st_file(  # a [32, 16] grid under the [16, 16] config
    {"w.weight": fp8_hdr["w.weight"],
     "w.weight_scale_inv": {"dtype": "F32", "shape": [1, 3], "data_offsets": [fp8_n, fp8_n + 12]}},
    fp8_q + struct.pack("<3f", 0.01, 0.02, 0.03)))
put("safetensors", "synthetic-fp8-truncated", st_file(fp8_hdr, fp8_q + struct.pack("<6f", *[0.01] * 6))[:-9])
put("safetensors", "synthetic-mxfp4", st_file(
    {"e.down_proj_blocks": {"dtype": "U8", "shape": [1, 2, 1, 16], "data_offsets": [0, 32]},
     "e.down_proj_scales": {"dtype": "U8", "shape": [1, 2, 1], "data_offsets": [32, 34]}},
    bytes((i * 29) & 0xFF for i in range(32)) + bytes([127, 254])))
# gpt-oss's experts as published: gate_up / down blocks and scales with their bf16 biases, and the same
# with a scale of 255 (e8m0 NaN) and with 15-byte blocks (truncated)
for tag, sc, blk in (("", 127, 16), ("-nan-scale", 255, 16), ("-short-blocks", 127, 15)):
    hdr, data, off = {}, b"", 0
    for nm, (E, R, G) in (("gate_up_proj", (2, 4, 1)), ("down_proj", (2, 2, 1))):
        p = "model.layers.0.mlp.experts." + nm
        nb, ns, nbias = E * R * G * blk, E * R * G, 2 * E * R
        hdr[p + "_blocks"] = {"dtype": "U8", "shape": [E, R, G, blk], "data_offsets": [off, off + nb]}
        hdr[p + "_scales"] = {"dtype": "U8", "shape": [E, R, G], "data_offsets": [off + nb, off + nb + ns]}
        hdr[p + "_bias"] = {"dtype": "BF16", "shape": [E, R], "data_offsets": [off + nb + ns, off + nb + ns + nbias]}
        data += bytes((i * 29 + 7) & 0xFF for i in range(nb)) + bytes([127] * (ns - 1) + [sc]) + \
            struct.pack("<%dH" % (E * R), *([0x3DCD] * (E * R)))
        off += nb + ns + nbias
    put("safetensors", "synthetic-mxfp4-gptoss" + tag, st_file(hdr, data))
mcfg = os.path.join(fx, "gptoss_mxfp4", "config.json")
if os.path.exists(mcfg):
    with open(mcfg) as f:
        c = json.load(f)
    c["swiglu_limit"] = 0.5
    put("model", "gptoss_mxfp4-limit.json", json.dumps(c, indent=2, sort_keys=True).encode())
qcfg = os.path.join(fx, "quant", "fp8", "config.json")
with open(qcfg, "rb") as f:
    put("model", "quant-fp8.json", f.read())
with open(qcfg) as f:
    c = json.load(f)
c["quantization_config"]["weight_block_size"] = [16, 32]
put("model", "quant-fp8-bad-block.json", json.dumps(c, indent=2, sort_keys=True).encode())
