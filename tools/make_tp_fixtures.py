#!/usr/bin/env python3
"""Tensor-parallel row-parallel linear: inputs and PyTorch's results, per reduce mode.

Writes data/fixtures/tp/tp_bf16.safetensors, tp_f16.safetensors and README.md for
tests/test_tp.c. On random inputs X [M, K], W [N, K], b [N] (stored in the dtype dt) and a
TP degree k, it computes with explicit torch ops on the CPU what the emulation rule of
README "Numerics" (docs/research/tp-allreduce.md, "Proposed emulation rule") says k ranks
compute:

  partials   P_r = x[:, sl_r] @ w[:, sl_r].T in dt (torch's CPU bf16 / fp16 matmul: fp32
             accumulation, one rounding), sl_r = [r K/k, (r+1) K/k); the sampler side
             (vLLM / SGLang) fuses the bias into rank 0's: F.linear(x[:, sl_0], w[:, sl_0], b)
  fp32       s = P_0.float(); s = s + P_r.float() for r = 1..k-1; Y = s.to(dt)
             (vLLM's custom all-reduce: upcast, fp32 adds in rank order, downcast once)
  seq        y = P_0; y = y + P_r for r = 1..k-1, each add a dt tensor add (one rounding)
  chain      y = P_{k-1}; y = y + P_r for r = k-2..0 (NCCL's tree on one node)
  ring       element e (row-major in [M, N]) is in chunk c = e k // (M N); its value is
             P_{c+1} + P_{c+2} + ... + P_c (indices mod k), a dt add each (NCCL's ring,
             one chunk per rank)
  trainer    (Megatron) the partials without bias, the reduce, then Y + b as a dt add

A dt + dt tensor add on the CPU computes the fp32 sum and rounds it once, as CUDA's
__hadd does; that is the per-add rounding of NCCL's FuncSum. Each (shape, k) stores the
trainer's partials `P` [k, M, N], the sampler's rank-0 partial `P0b`, and every mode's
output for both sides. The C test checks ratiocheck's K-slice GEMMs against P (the GEMM
policy of tests/test_ops.c: within 1 ulp) and its reduce, fed torch's partials, bitwise.

Usage:
    python3 tools/make_tp_fixtures.py                 # writes data/fixtures/tp/
    python3 tools/make_tp_fixtures.py --out /tmp/tp   # somewhere else (to diff)

Seeded and single-threaded: two runs with the same package versions write the same bytes
(tools/st_canonical.py). Pins: tools/requirements-tp-fixtures.txt. Takes a few seconds.
"""

import argparse
import os
import platform
import sys

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU only, before torch is imported

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from st_canonical import save_safetensors_canonical as save_canonical  # noqa: E402

SEED = 20260714
# (M, K, N, TP degrees): M <= 16 and 16 < M <= 256 are the engine kernels' two split-K classes
SHAPES = [(7, 384, 48, [2, 3, 4, 6, 8]), (20, 256, 40, [2, 4, 8])]
MODES = ["fp32", "ring", "chain", "seq"]
DTS = {"bf16": torch.bfloat16, "f16": torch.float16}


def reduce(parts, mode):
    """The all-reduce of the dt partials parts[r] ([M, N] each) in `mode`."""
    k = len(parts)
    if mode == "fp32":
        s = parts[0].float()
        for r in range(1, k):
            s = s + parts[r].float()
        return s.to(parts[0].dtype)
    if mode == "seq":
        y = parts[0]
        for r in range(1, k):
            y = y + parts[r]
        return y
    if mode == "chain":
        y = parts[k - 1]
        for r in range(k - 2, -1, -1):
            y = y + parts[r]
        return y
    assert mode == "ring"
    M, N = parts[0].shape
    numel = M * N
    owner = (torch.arange(numel, dtype=torch.int64) * k) // numel
    flat = [p.reshape(-1) for p in parts]
    out = torch.empty_like(flat[0])
    for c in range(k):
        sel = owner == c
        y = flat[(c + 1) % k][sel]
        for j in range(2, k + 1):
            y = y + flat[(c + j) % k][sel]
        out[sel] = y
    return out.reshape(M, N)


def versions():
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "safetensors": safetensors.__version__,
        "cpu": platform.machine(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data", "fixtures", "tp"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    ver = versions()
    lines = []
    for dname, dt in DTS.items():
        tensors = {}
        stats = []
        for si, (M, K, N, tps) in enumerate(SHAPES):
            g = torch.Generator().manual_seed(SEED + 100 * si + (0 if dname == "bf16" else 7))
            x = torch.randn(M, K, generator=g).to(dt)
            w = (torch.randn(N, K, generator=g) * 0.05).to(dt)
            b = (torch.randn(N, generator=g) * 0.05).to(dt)
            pre = f"s{si}"
            tensors[f"{pre}.x"] = x
            tensors[f"{pre}.w"] = w
            tensors[f"{pre}.b"] = b
            for k in tps:
                ks = K // k
                sl = [slice(r * ks, (r + 1) * ks) for r in range(k)]
                parts = [x[:, s] @ w[:, s].T for s in sl]  # trainer: no bias in the partials
                p0b = F.linear(x[:, sl[0]], w[:, sl[0]], b)  # sampler: rank 0 fuses the bias
                t = f"{pre}.tp{k}"
                tensors[f"{t}.P"] = torch.stack(parts)
                tensors[f"{t}.P0b"] = p0b
                for mode in MODES:
                    ys = reduce([p0b] + parts[1:], mode)
                    yt = reduce(parts, mode) + b
                    tensors[f"{t}.{mode}.sampler"] = ys
                    tensors[f"{t}.{mode}.trainer"] = yt
                # how much the modes differ, for the README
                ref = tensors[f"{t}.fp32.sampler"].float()
                diffs = {m: int((tensors[f"{t}.{m}.sampler"].float() != ref).sum()) for m in MODES[1:]}
                unsliced = F.linear(x, w, b).float()
                stats.append((M, K, N, k, diffs, int((ref != unsliced).sum()), M * N))
        meta = {"generator": "tools/make_tp_fixtures.py", "dtype": dname, "seed": str(SEED)}
        meta.update({f"version.{k}": v for k, v in ver.items()})
        path = os.path.join(args.out, f"tp_{dname}.safetensors")
        save_canonical({k: v.contiguous() for k, v in tensors.items()}, path, meta)
        lines.append(f"### {dname}\n")
        lines.append("| M | K | N | tp | ring / chain / seq differ from fp32 (sampler) | fp32 differs from one GEMM | elements |")
        lines.append("|---:|---:|---:|---:|---|---:|---:|")
        for M, K, N, k, diffs, vs1, n in stats:
            d = " / ".join(str(diffs[m]) for m in MODES[1:])
            lines.append(f"| {M} | {K} | {N} | {k} | {d} | {vs1} | {n} |")
        lines.append("")
    readme = [
        "# Tensor-parallel fixtures",
        "",
        "Written by `tools/make_tp_fixtures.py` (its docstring has the rule and the torch ops);",
        "read by `tests/test_tp.c`. Versions: "
        + ", ".join(f"{k} {v}" for k, v in ver.items())
        + " (also in each file's `__metadata__`).",
        "",
        "Per shape `s<i>`: `x` [M, K], `w` [N, K], `b` [N] (N(0,1), N(0,0.05), N(0,0.05), then cast);",
        "per TP degree `tp<k>`: `P` [k, M, N] (the partials without bias), `P0b` (rank 0's with the",
        "bias), and `<mode>.sampler` / `<mode>.trainer` for the modes fp32, ring, chain, seq.",
        "At tp 2 every mode gives RN(P0 + P1). Counts of elements where torch's results differ:",
        "",
    ] + lines
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("\n".join(readme))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
