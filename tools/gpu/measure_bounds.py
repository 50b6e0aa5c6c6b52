#!/usr/bin/env python3
"""Measure the GPU's memory bandwidth and GEMM throughput, the bounds the
GPU script (tools/gpu/gpu_check.sh) compares ratiocheck's and HF's decode and
forward times against.

    python3 tools/gpu/measure_bounds.py --model DIR --json OUT.json

Writes {"gpu", "hbm_gbps", "bf16_tflops", "fp16_tflops", "fp32_tflops",
"params", "weight_bytes": {"fp32", "fp16", "bf16"}} where
  hbm_gbps     device-to-device copy of 2 GiB, bytes read + written per second
               (the mean of 10 copies after 3 warm-ups)
  *_tflops     8192^3 matrix product in that dtype (fp32 without TF32, as
               PyTorch's default allow_tf32=False), mean of 10 after 3 warm-ups
  params       parameters of the model in DIR (from its safetensors headers)
A decode step cannot beat weight_bytes / hbm; a forward over N tokens cannot
beat 2 * params * N / tflops.

Needs: torch with CUDA (tested with the GPU image's torch 2.11), safetensors.
"""
import argparse
import json
import os
import struct

import torch


def timed(fn, reps=10, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / 1000.0 / reps


def count_params(model_dir):
    n = 0
    for f in sorted(os.listdir(model_dir)):
        if not f.endswith(".safetensors"):
            continue
        with open(os.path.join(model_dir, f), "rb") as fh:
            (hlen,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(hlen))
        for k, v in header.items():
            if k == "__metadata__":
                continue
            c = 1
            for d in v["shape"]:
                c *= d
            n += c
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    dev = torch.device("cuda")
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    torch.backends.cuda.matmul.allow_tf32 = False
    n = 1 << 29  # 2 GiB of fp32
    src = torch.empty(n, dtype=torch.float32, device=dev).fill_(1.0)
    dst = torch.empty_like(src)
    t = timed(lambda: dst.copy_(src))
    out["hbm_gbps"] = 2 * n * 4 / t / 1e9
    del src, dst
    for name, dt in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32)):
        m = 8192
        a = torch.randn(m, m, device=dev, dtype=dt)
        b = torch.randn(m, m, device=dev, dtype=dt)
        t = timed(lambda: a @ b)
        out[name + "_tflops"] = 2 * m ** 3 / t / 1e12
        del a, b
    p = count_params(args.model)
    out["params"] = p
    out["weight_bytes"] = {"fp32": 4 * p, "fp16": 2 * p, "bf16": 2 * p}
    with open(args.json, "w") as fh:
        json.dump(out, fh, indent=1)
    print("bounds: %s  copy %.0f GB/s  bf16 %.0f  fp16 %.0f  fp32 %.1f TFLOP/s  model %.1fM params" %
          (out["gpu"], out["hbm_gbps"], out["bf16_tflops"], out["fp16_tflops"], out["fp32_tflops"], p / 1e6))


if __name__ == "__main__":
    main()
