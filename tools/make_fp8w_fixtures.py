#!/usr/bin/env python3
"""Reference fixtures for the fp8 e4m3 weight quantization (--sampler weights=fp8).

Writes data/fixtures/fp8w/fp8w.safetensors and README.md: small random bf16 / fp16
linear layers (x [M, K], W [N, K], bias [N]) and what the fp8 linear computes from
them, written with explicit torch ops (CPU) after vLLM's kernels
(docs/research/fp8-weights.md has the sources):

  weights   per tensor   s = amax / 448, q = e4m3(clamp(w * (1 / s)))        (scaled_fp8_quant, dynamic)
            per channel  s = max(amax_row / 448, 1 / (448 * 512)), q = e4m3(clamp(w / s))
                                                                              (per-token kernel over W's rows)
            128 x 128    t = 448 / amax (1 if amax is 0 or inf), q = e4m3(clamp(w * t)), s = 1 / t,
                         the weight padded with its last element              (the rollout sync's block cast)
  activations  token     as per channel over x's rows; tensor: as per tensor; 1 x 128 groups:
                         s = max(amax, 1e-10) / 448, q = e4m3(clamp(x / s))   (per_token_group_quant_fp8)
  GEMM      tensor / channel   acc = fp32 matmul of the fp8 values, y = R(s_x * (s_w * acc) + b)
                               (the multiply-add fused: evaluated in float64, then fp32)   (cutlass_scaled_mm)
            block              acc = sum_k (P_k * s_x) * s_w from 0, y = R(R(acc) + b)     (triton block kernel)
            W8A16 (act none)   W' = R(q * R(s)), y = F.linear(x, W', b) in the dtype        (bf16 dequant path)

e4m3(v) is torch's .to(torch.float8_e4m3fn) (round to nearest even); clamp to +-448
first, as vLLM's kernels do. Shapes: K = 256 (a multiple of 128) and K = 200 (not:
per tensor and per channel only), N = 136 (not a multiple of 128: the block
padding). tests/test_fp8w.c compares: the fp8 values and scales bitwise, the outputs
within 1 ulp of the dtype (the fp32 sum of the products is ordered differently by
torch's CPU matmul and by ratiocheck's kernels).

Usage:
    python3 tools/make_fp8w_fixtures.py                # writes data/fixtures/fp8w/
    python3 tools/make_fp8w_fixtures.py --out /tmp/fx  # somewhere else (e.g. to diff)

Seeded, CPU, one thread, deterministic algorithms: byte-identical reruns with the
versions in tools/requirements-fp8w-fixtures.txt.
"""

import argparse
import hashlib
import os
import platform
import sys

os.environ["CUDA_VISIBLE_DEVICES"] = ""

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_canonical import save_safetensors_canonical as save_canonical  # noqa: E402

SEED = 20260601
F8 = torch.float8_e4m3fn
MAX = 448.0
MIN_SCALE = 1.0 / (MAX * 512.0)
EPS_GROUP = 1e-10
B = 128
SHAPES = {"k256": (5, 256, 96), "k200": (4, 200, 72), "n136": (6, 256, 136)}  # M, K, N
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def e4m3(v):
    return v.clamp(-MAX, MAX).to(F8).to(torch.float32)


def quant_tensor(w):
    s = w.abs().max() / MAX
    inv = 1.0 / s
    return e4m3(w * inv), s.reshape(1)


def quant_rows(w):
    s = torch.clamp(w.abs().amax(dim=1) / MAX, min=MIN_SCALE)
    return e4m3(w / s[:, None]), s


def quant_block_weight(w):
    """the rollout sync's 128 x 128 cast: pad with the last element, t = 448 / amax"""
    n, k = w.shape
    pn, pk = (-n) % B, (-k) % B
    wp = F.pad(w, (0, pk, 0, pn), mode="constant", value=float(w[-1, -1])) if pn or pk else w
    bn, bk = wp.shape[0] // B, wp.shape[1] // B
    blocks = wp.reshape(bn, B, bk, B).permute(0, 2, 1, 3).reshape(bn, bk, B * B)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    t = MAX / amax
    t = torch.where(amax == 0, torch.ones_like(t), t)
    t = torch.where(amax == torch.inf, torch.ones_like(t), t)
    q = e4m3(blocks * t).reshape(bn, bk, B, B).permute(0, 2, 1, 3).reshape(bn * B, bk * B)[:n, :k]
    return q.contiguous(), torch.reciprocal(t).reshape(bn, bk)


def quant_groups(x):
    m, k = x.shape
    g = x.reshape(m, k // B, B)
    s = torch.clamp(g.abs().amax(dim=-1), min=EPS_GROUP) / MAX
    return e4m3(g / s[..., None]).reshape(m, k), s


def expand_block_scales(s, n, k):
    return s.repeat_interleave(B, 0).repeat_interleave(B, 1)[:n, :k]


def gemm_scaled(xq, sa, wq, sw, bias):
    acc = xq @ wq.T  # fp32
    t = sw * acc  # s_w * acc (sw: [1] or [N])
    a = sa if sa.numel() == 1 else sa[:, None]
    if bias is None:
        return a * t
    return (a.double() * t.double() + bias.double()).float()  # the fused multiply-add: one rounding (to fp32)


def gemm_block(xq, sa, wq, sw, bias, dt):
    m, k = xq.shape
    acc = torch.zeros(m, wq.shape[0], dtype=torch.float32)
    swn = sw.repeat_interleave(B, 0)[: wq.shape[0]]  # [N, K/128]
    for kb in range(k // B):
        part = xq[:, kb * B : (kb + 1) * B] @ wq[:, kb * B : (kb + 1) * B].T
        acc = acc + (part * sa[:, kb : kb + 1]) * swn[:, kb][None, :]
    y = acc.to(dt)
    return y if bias is None else y + bias


def make(out):
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    tensors, lines = {}, []
    # the scalar conversion: every finite e4m3 value, the midpoints between neighbours (ties to
    # even), values just off them, beyond 448 (clamped) and in the subnormal range
    vals = torch.arange(256, dtype=torch.uint8).view(F8).float()
    vals = torch.unique(vals[torch.isfinite(vals)])
    mids = (vals[1:].double() + vals[:-1].double()) / 2
    probe = torch.cat([vals.double(), mids, mids * (1 + 2**-20), mids * (1 - 2**-20),
                       torch.tensor([448.5, 463.9, 464.0, 500.0, -1e6, 2.0**-10, 2.0**-11, 3 * 2.0**-11, -0.0]).double(),
                       torch.randn(2000, generator=torch.Generator().manual_seed(SEED)).double() * 30]).float()
    tensors["e4m3.in"], tensors["e4m3.out"] = probe, e4m3(probe)
    for dname, dt in DTYPES.items():
        for sname, (m, k, n) in SHAPES.items():
            gen = torch.Generator().manual_seed(SEED + hash_name(dname + sname))
            x = torch.randn(m, k, generator=gen) * 1.5
            x[1] *= 1e-4  # a row of small values: subnormal fp8 codes, a small per-token scale
            x[2, 3] = 40.0  # an outlier
            w = torch.randn(n, k, generator=gen) * 0.05
            w[5, 7] = 1.3  # an outlier: one block / row / the tensor scale set by it
            w[n - 1, :] *= 1e-3  # a row of small values
            b = torch.randn(n, generator=gen) * 0.1
            x, w, b = x.to(dt), w.to(dt), b.to(dt)
            p = f"{dname}.{sname}."
            tensors[p + "x"], tensors[p + "w"], tensors[p + "b"] = x, w, b
            xf, wf = x.float(), w.float()
            acts = {"token": quant_rows(xf), "tensor": quant_tensor(xf)}
            if k % B == 0:
                acts["group"] = quant_groups(xf)
            for a, (q, s) in acts.items():
                tensors[p + f"x.{a}.q"], tensors[p + f"x.{a}.s"] = q.to(torch.bfloat16), s.contiguous()  # fp8 values: exact in bf16
            scales = {"tensor": quant_tensor(wf), "channel": quant_rows(wf)}
            if k % B == 0:
                scales["block"] = quant_block_weight(wf)
            for sc, (wq, sw) in scales.items():
                tensors[p + f"w.{sc}.q"], tensors[p + f"w.{sc}.s"] = wq.to(torch.bfloat16), sw.contiguous()
                for act in ("token", "tensor", "none"):
                    if sc == "block" and act == "tensor":
                        continue  # vLLM's block path quantizes activations in 1 x 128 groups only
                    for with_bias in (True, False):
                        bias = b if with_bias else None
                        if act == "none":
                            swe = (
                                expand_block_scales(sw, n, k)
                                if sc == "block"
                                else (sw[:, None] if sc == "channel" else sw)
                            )
                            wd = wq.to(dt) * swe.to(dt)
                            y = F.linear(x, wd, bias)
                        elif sc == "block":
                            xq, sa = acts["group"]
                            y = gemm_block(xq, sa, wq, sw, bias, dt)
                        else:
                            xq, sa = acts[act]
                            y = gemm_scaled(xq, sa, wq, sw, bias.float() if with_bias else None).to(dt)
                        key = p + f"{sc}.{act}." + ("out" if with_bias else "out_nobias")
                        tensors[key] = y.contiguous()
            lines.append(f"| {dname} | {sname} | {m} x {k} x {n} | {', '.join(scales)} | {', '.join(acts)} |")
    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "safetensors": safetensors.__version__,
        "generator": "tools/make_fp8w_fixtures.py",
        "seed": str(SEED),
    }
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "fp8w.safetensors")
    save_canonical(tensors, path, versions)
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    readme = [
        "# fp8 weight quantization fixtures",
        "",
        "Written by `tools/make_fp8w_fixtures.py` (do not edit; its docstring has the rules); read by",
        "`tests/test_fp8w.c`. Inputs `DT.SHAPE.{x,w,b}` in the dtype; `DT.SHAPE.w.SCALE.{q,s}` the fp8",
        "values (stored as bf16, which holds them exactly) and scales of W, `DT.SHAPE.x.ACT.{q,s}` those of x (token, tensor, group = 1 x 128),",
        "`DT.SHAPE.SCALE.ACT.{out,out_nobias}` the linear's output in the dtype (act none: W8A16).",
        "",
        "| dtype | shape | M x K x N | weight scales | activation scales |",
        "|---|---|---|---|---|",
        *lines,
        "",
        "Versions used: " + ", ".join(f"{k} {v}" for k, v in versions.items() if k not in ("generator", "seed")),
        "",
        f"sha256 of fp8w.safetensors: `{digest}`",
        "",
    ]
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write("\n".join(readme))
    print(f"wrote {path} ({len(tensors)} tensors), sha256 {digest}")


def hash_name(s):
    return int(hashlib.sha256(s.encode()).hexdigest()[:8], 16)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--out", default=os.path.join(here, "data", "fixtures", "fp8w"))
    make(ap.parse_args().out)
