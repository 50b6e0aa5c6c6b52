#!/usr/bin/env python3
"""Reference data for the fp8 KV cache (kv-cache=fp8_e4m3 / fp8_e5m2; README
"Numerics", docs/research/fp8-kv-cache.md), checked by tests/test_fp8.c.

Writes data/fixtures/fp8/fp8.safetensors and its README.md:

  convert.extra_x   F32 [N - 65536]: the inputs after the 65536 bf16 bit
                    patterns (input i < 65536 is the float32 with bits i << 16,
                    not stored): every fp8 midpoint of both formats and the
                    float32 values next to it, the overflow thresholds,
                    subnormals, +-0, +-inf, NaNs of both signs, and random
                    float32 bit patterns
  convert.codes     I32 [N]: four fp8 codes per input, bytes 0..3 =
                    torch x.to(float8_e4m3fn), torch x.to(float8_e5m2),
                    CUDA __nv_cvt_float_to_fp8(x, __NV_SATFINITE, E4M3), the
                    same for E5M2 (tools/fp8_cuda_ref.cu on the host, nvcc)
  decode.e4m3/e5m2  F32 [256]: torch's float32 value of each code
  attn.cK.*         one causal prefill of T tokens (GQA) with an fp8 cache,
                    PyTorch eager ops in bf16 (see attention_case)

Run: pip install -r tools/requirements-fp8-fixtures.txt; python3 tools/make_fp8_fixtures.py
(needs nvcc for the CUDA column; CPU only otherwise). Deterministic: seeded.
"""
import argparse
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FMTS = {"e4m3": (torch.float8_e4m3fn, 3, 7), "e5m2": (torch.float8_e5m2, 2, 15)}

# the attention cases: (format, k/v scale); the small scales push |x / s|
# past the format's largest value, so SATFINITE's clamp is exercised
ATTN_CASES = [("e4m3", 1.0), ("e4m3", 0.0125), ("e5m2", 1.0), ("e5m2", 1e-4)]
T, NH, NKV, D = 24, 4, 2, 64


def f32(bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def fp8_values(fmt):
    """every finite fp8 value >= 0 of the format, ascending"""
    codes = torch.arange(0, 128, dtype=torch.uint8).view(FMTS[fmt][0]).float()
    v = codes[torch.isfinite(codes)]
    return sorted(set(v.tolist()))


def extra_inputs(rng):
    vals = []
    for fmt in FMTS:
        v = fp8_values(fmt)
        top = v[-1]
        nxt = top + (top - v[-2])  # the first value past the max (480, 65536)
        pts = v + [nxt, 2 * nxt]
        mids = [(a + b) / 2 for a, b in zip(pts, pts[1:])] + [v[1] / 2]  # incl. half the smallest subnormal
        for m in mids + v:
            b = int(np.array([m], dtype=np.float32).view(np.uint32)[0])
            for d in (-1, 0, 1):
                vals.append(b + d)
    vals += [0x00000000, 0x00000001, 0x007FFFFF, 0x00800000, 0x7F7FFFFF, 0x7F800000, 0x7FC00000,
             0x7F800001, 0x7FFFFFFF]
    vals += [v | 0x80000000 for v in vals]
    vals += rng.integers(0, 2**32, size=20000, dtype=np.uint64).tolist()
    x = f32([int(v) & 0xFFFFFFFF for v in vals])
    return x


def torch_codes(x):
    t = torch.from_numpy(x)
    return [t.to(FMTS[f][0]).view(torch.uint8).numpy() for f in FMTS]


def cuda_codes(x, nvcc):
    with tempfile.TemporaryDirectory() as d:
        exe, fin, fout = os.path.join(d, "ref"), os.path.join(d, "in"), os.path.join(d, "out")
        subprocess.run([nvcc, "-o", exe, os.path.join(HERE, "fp8_cuda_ref.cu")], check=True)
        x.astype("<f4").tofile(fin)
        subprocess.run([exe, fin, fout], check=True)
        c = np.fromfile(fout, dtype=np.uint8).reshape(-1, 2)
    return c[:, 0].copy(), c[:, 1].copy()


def quant_dequant(x, fmt, scale):
    """vLLM's fp8 cache for a bf16 tensor x: stored as
    __nv_cvt_float_to_fp8(float(x) / s, __NV_SATFINITE) -- for finite values
    torch's x.to(fp8) of the quotient clamped to +-max, which the conversion
    column of this fixture checks against NVIDIA's function -- read back as
    (fp8.to(float32) * s).to(bfloat16) (Triton's unified attention)."""
    dt = FMTS[fmt][0]
    s = torch.tensor(scale, dtype=torch.float32)
    fmax = torch.finfo(dt).max
    q = (x.float() / s).clamp(-fmax, fmax).to(dt)
    return (q.float() * s).to(torch.bfloat16)


def attention_case(g, fmt, scale):
    """One sequence's prefill of T tokens, as transformers' eager attention
    computes it in bf16 (README "Numerics": scores R(R(q.k) * d^-0.5), fp32
    softmax rounded once, P.V rounded once), on keys and values that went
    through the fp8 cache."""
    q = (torch.randn(T, NH, D, generator=g) * 2.0).to(torch.bfloat16)
    k = (torch.randn(T, NKV, D, generator=g) * 2.0).to(torch.bfloat16)
    v = (torch.randn(T, NKV, D, generator=g) * 2.0).to(torch.bfloat16)
    kd, vd = quant_dequant(k, fmt, scale), quant_dequant(v, fmt, scale)
    group = NH // NKV
    qh = q.transpose(0, 1)                                        # [NH, T, D]
    kh = kd.transpose(0, 1).repeat_interleave(group, dim=0)       # repeat_kv
    vh = vd.transpose(0, 1).repeat_interleave(group, dim=0)
    s = torch.matmul(qh, kh.transpose(1, 2)) * D**-0.5
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    s = s.masked_fill(mask, float("-inf"))
    p = torch.softmax(s, dim=-1, dtype=torch.float32).to(torch.bfloat16)
    o = torch.matmul(p, vh).transpose(0, 1).reshape(T, NH * D)
    return q, k, v, kd, vd, o


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "data", "fixtures", "fp8"))
    ap.add_argument("--nvcc", default=shutil.which("nvcc"))
    a = ap.parse_args()
    if not a.nvcc:
        sys.exit("make_fp8_fixtures: nvcc not found (the CUDA column needs it; --nvcc PATH)")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    bf16 = f32([i << 16 for i in range(65536)])
    extra = extra_inputs(rng)
    x = np.concatenate([bf16, extra])
    t4, t5 = torch_codes(x)
    c4, c5 = cuda_codes(x, a.nvcc)
    # self-checks: SATFINITE is torch's conversion of the clamped value for
    # every non-NaN input, and NVIDIA's canonical NaN 0x7F for NaN
    nan = np.isnan(x)
    for fmt, c in (("e4m3", c4), ("e5m2", c5)):
        fmax = torch.finfo(FMTS[fmt][0]).max
        clamped = torch.from_numpy(x[~nan]).clamp(-fmax, fmax).to(FMTS[fmt][0]).view(torch.uint8).numpy()
        assert (clamped == c[~nan]).all(), fmt
        assert (c[nan] == 0x7F).all(), fmt
    n_sat_e5m2 = int((t5 != c5)[~nan].sum())
    codes = (t4.astype(np.uint32) | (t5.astype(np.uint32) << 8) | (c4.astype(np.uint32) << 16)
             | (c5.astype(np.uint32) << 24)).view(np.int32)
    tensors = {
        "convert.extra_x": torch.from_numpy(extra.copy()),
        "convert.codes": torch.from_numpy(codes.copy()),
    }
    for fmt in FMTS:
        tensors["decode." + fmt] = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(FMTS[fmt][0]).float()
    g = torch.Generator().manual_seed(1)
    for i, (fmt, scale) in enumerate(ATTN_CASES):
        q, k, v, kd, vd, o = attention_case(g, fmt, scale)
        p = "attn.c%d." % i
        for name, t in (("q", q), ("k", k), ("v", v), ("kd", kd), ("vd", vd), ("out", o)):
            tensors[p + name] = t.contiguous()
        tensors[p + "scale"] = torch.tensor([scale], dtype=torch.float64)
        tensors[p + "e5m2"] = torch.tensor([1 if fmt == "e5m2" else 0], dtype=torch.int32)
    os.makedirs(a.out, exist_ok=True)
    save_file(tensors, os.path.join(a.out, "fp8.safetensors"),
              metadata={"generator": "tools/make_fp8_fixtures.py, torch " + torch.__version__})  # one key: a stable header
    nvcc_ver = subprocess.run([a.nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write(f"""# fp8 fixtures

Generated by `tools/make_fp8_fixtures.py` (do not edit; its docstring describes every tensor).
Checked by `tests/test_fp8.c`.

- python {platform.python_version()}
- torch {torch.__version__}
- numpy {np.__version__}
- nvcc: {nvcc_ver} (the `__NV_SATFINITE` column: `tools/fp8_cuda_ref.cu`, cuda_fp8.hpp's host path)

{len(x)} conversion inputs ({len(extra)} besides the 65536 bf16 bit patterns). torch's and
CUDA's SATFINITE codes agree on every non-NaN input in E4M3 (torch {torch.__version__}
saturates finite overflow and inf to +-448); in E5M2 they differ on the {n_sat_e5m2} inputs
past 57344 + half an ulp (torch gives +-inf, SATFINITE +-57344). NaN: torch keeps the
sign (0x7F | sign), CUDA returns 0x7F. Attention cases (format, k/v scale): {ATTN_CASES},
T = {T}, {NH} query heads, {NKV} KV heads, head_dim {D}.
""")
    print("wrote", a.out, len(x), "conversion inputs;", n_sat_e5m2, "E5M2 overflow differences")


if __name__ == "__main__":
    main()
