#!/usr/bin/env python3
"""Reference fixtures for quantized checkpoints as published (FP8 blocks, MXFP4).

Writes under data/fixtures/quant/:

  fp8/       a one-layer Llama (the first decoder layer, embeddings and final norm of
             data/fixtures/llama_gqa, in bf16) whose seven linear weights are stored as
             F8_E4M3 with a <name>_scale_inv (F32) per 16 x 16 block, quantized by
             transformers' own Fp8Quantize (integrations/finegrained_fp8.py), and a
             config.json with quantization_config {quant_method: fp8,
             weight_block_size: [16, 16]}.
  fp8_bf16/  the same model with the fp8/ weights dequantized by transformers'
             Fp8Dequantize (the op from_pretrained runs on each weight / scale pair
             when it dequantizes, as on every CPU load) into bf16, saved as plain
             safetensors with the config less quantization_config.
  mxfp4_ops.safetensors  random MXFP4 blocks [E, R, G, 16] (U8) and scales [E, R, G]
             (U8, e8m0; the edges 0 and 254 included) and
             transformers.integrations.mxfp4.convert_moe_packed_tensors' output for them
             in bf16 (out_bf16) and fp32 (out_f32); and fp8_ops: an FP8 weight whose
             shape the block does not divide ([20, 40] in blocks of [16, 16]) with BF16
             scales, dequantized by the documented rule (fp32 product, one rounding to
             bf16) with explicit torch ops.

tests/test_quant.c: the fp8/ folder reads bitwise as fp8_bf16/, a run's log-probs
on both are bitwise equal, and the MXFP4 / FP8 op cases bitwise.

Usage:
    python3 tools/make_quant_fixtures.py                # writes data/fixtures/quant/
    python3 tools/make_quant_fixtures.py --out /tmp/fx  # somewhere else

Seeded, CPU: byte-identical reruns with tools/requirements-quant-fixtures.txt.
"""

import argparse
import json
import os
import shutil

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers.integrations.finegrained_fp8 import Fp8Dequantize, Fp8Quantize
from transformers.integrations.mxfp4 import convert_moe_packed_tensors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
BLOCK = [16, 16]


class _Cfg:
    weight_block_size = BLOCK
    scale_fmt = "e4m3"  # anything but "ue8m0": fp32 scales


class _Quantizer:
    quantization_config = _Cfg()


def write_fp8(out):
    src = os.path.join(ROOT, "data/fixtures/llama_gqa")
    cfg = json.load(open(os.path.join(src, "config.json")))
    sd = load_file(os.path.join(src, "model.safetensors"))
    keep = {k: v for k, v in sd.items() if not k.startswith("model.layers.") or k.startswith("model.layers.0.")}
    cfg["num_hidden_layers"] = 1
    cfg["dtype"] = "bfloat16"
    q = Fp8Quantize(_Quantizer())
    tensors = {}
    for k, v in sorted(keep.items()):
        v = v.to(torch.bfloat16)  # the published model's dtype
        if k.endswith(".weight") and k.split(".")[-2] in LINEARS:
            tensors.update(q._quantize_one(k, v))
        else:
            tensors[k] = v.contiguous()
    d8 = os.path.join(out, "fp8")
    os.makedirs(d8, exist_ok=True)
    qcfg = dict(cfg)
    qcfg["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": BLOCK}
    json.dump(qcfg, open(os.path.join(d8, "config.json"), "w"), indent=2, sort_keys=True)
    save_file(tensors, os.path.join(d8, "model.safetensors"), metadata={"format": "pt"})

    # transformers' dequantization of the FP8 weights: Fp8Dequantize, the op that
    # from_pretrained(..., quantization_config=FineGrainedFP8Config(dequantize=True))
    # (and every CPU load) runs on each (weight, weight_scale_inv) pair, into the
    # parameter's dtype (bf16)
    dq = Fp8Dequantize(_Quantizer())
    sd2 = {}
    for k, v in tensors.items():
        if k.endswith("_scale_inv"):
            continue
        if v.dtype == torch.float8_e4m3fn:
            v = dq._dequantize_one(v, tensors[k + "_scale_inv"], torch.bfloat16)
        assert v.dtype == torch.bfloat16, (k, v.dtype)
        sd2[k] = v.contiguous()
    db = os.path.join(out, "fp8_bf16")
    os.makedirs(db, exist_ok=True)
    json.dump(cfg, open(os.path.join(db, "config.json"), "w"), indent=2, sort_keys=True)
    save_file(sd2, os.path.join(db, "model.safetensors"), metadata={"format": "pt"})
    for f in ("generation_config.json",):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), d8)
            shutil.copy(os.path.join(src, f), db)


def write_ops(out):
    g = torch.Generator().manual_seed(30)
    E, R, G = 2, 3, 2
    blocks = torch.randint(0, 256, (E, R, G, 16), generator=g, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(110, 140, (E, R, G), generator=g, dtype=torch.int32).to(torch.uint8)
    scales[0, 0, 0] = 0  # 2^-127: fp32 / bf16 subnormals
    scales[1, 2, 1] = 254  # 2^127: 2, 3, 4, 6 times it overflow to Inf
    t = {
        "mxfp4_blocks": blocks,
        "mxfp4_scales": scales,
        "mxfp4_out_bf16": convert_moe_packed_tensors(blocks, scales, dtype=torch.bfloat16),
        "mxfp4_out_f32": convert_moe_packed_tensors(blocks, scales, dtype=torch.float32),
    }
    rows, cols, b0, b1 = 20, 40, 16, 16
    w = torch.randn(rows, cols, generator=g) * 3
    q8 = w.clamp(-448, 448).to(torch.float8_e4m3fn)
    s = (torch.rand(2, 3, generator=g) * 0.01 + 1e-3).to(torch.bfloat16)
    sf = s.float().repeat_interleave(b0, 0)[:rows].repeat_interleave(b1, 1)[:, :cols]
    t["fp8_q"] = q8.view(torch.uint8)
    t["fp8_scale_bf16"] = s
    t["fp8_out_bf16"] = (q8.float() * sf).to(torch.bfloat16)
    save_file(t, os.path.join(out, "ops.safetensors"), metadata={"format": "pt"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(ROOT, "data/fixtures/quant"))
    a = ap.parse_args()
    torch.manual_seed(0)
    os.makedirs(a.out, exist_ok=True)
    write_fp8(a.out)
    write_ops(a.out)
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write(
            "# Quantized checkpoint fixtures\n\n"
            "Written by `python3 tools/make_quant_fixtures.py` (its docstring says what each file holds) with "
            f"torch {torch.__version__}, transformers {transformers.__version__} "
            "(pins: tools/requirements-quant-fixtures.txt); tests/test_quant.c reads them. Check the files with "
            "`(cd data/fixtures/quant && sha256sum -c SHA256SUMS)`.\n"
        )
    import hashlib

    names = []
    for d, _, fs in os.walk(a.out):
        for n in fs:
            if n != "SHA256SUMS":
                names.append(os.path.relpath(os.path.join(d, n), a.out))
    with open(os.path.join(a.out, "SHA256SUMS"), "w") as f:
        for n in sorted(names):
            f.write(f"{hashlib.sha256(open(os.path.join(a.out, n), 'rb').read()).hexdigest()}  {n}\n")


if __name__ == "__main__":
    main()
