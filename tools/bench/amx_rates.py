#!/usr/bin/env python3
"""bf16 GEMM rates side by side: a plain AMX GEMM and ratiocheck's engine bf16 GEMM in the pair order
(`build/amx_probe --bench --engine`: the two alternate in one process, the engine called as gemm_bench
--bf16 calls it) and torch's bf16 linear (torch.nn.functional.linear on bf16 tensors, the layout of HF's
layers, a fresh output each call; and torch.matmul into one preallocated output, `out=`; both oneDNN,
whose kernel name is printed), each round the probe and torch as fresh processes in alternating order
(docs/bench.md, "AMX").

    python3 tools/bench/amx_rates.py [--rounds 3] [--threads 2] [--cpu-time] [--reps 3]
                                     [--probe build/amx_probe] [SHAPE ...]

--torch-order SHAPE ...: instead, torch's bf16 linear (bf16 out, 1 thread) against the TDPBF16PS twin chained
over K 32 at a time from 0 and rounded to bf16 (amx_probe --raw runs the instruction itself).

SHAPE is M:K:N (Y[M,N] = X[M,K] W[N,K]^T); the default is the pythia-160m re-score's GEMMs at
64 sequences x 144 positions: 9216:768:3072, 9216:768:768, 9216:768:50304 (the LM head). --cpu-time:
one thread each, timed by the process's CPU clock (on a loaded machine other jobs take cores, not this
clock). Prints every round's GFLOP/s, then per shape the medians over rounds and the median (range) of
the per-round ratios. Exit 77 where the probe says the CPU has no AMX.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

DEFAULT_SHAPES = ["9216:768:3072", "9216:768:768", "9216:768:50304"]


def torch_worker(shapes, threads, reps, cpu_time):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    clock = time.process_time if cpu_time else time.perf_counter
    with torch.backends.mkldnn.verbose(torch.backends.mkldnn.VERBOSE_ON):  # oneDNN names its kernel on stdout
        F.linear(torch.ones(64, 64, dtype=torch.bfloat16), torch.ones(64, 64, dtype=torch.bfloat16))
    sys.stdout.flush()
    for s in shapes:
        M, K, N = (int(v) for v in s.split(":"))
        # the same values as gemm_bench and amx_probe, rounded to bf16
        x = ((torch.arange(M * K, dtype=torch.int64) * 7919 % 1000).float() / 1000 - 0.5).to(torch.bfloat16)
        w = ((torch.arange(N * K, dtype=torch.int64) * 104729 % 1000).float() / 1000 - 0.5).to(torch.bfloat16)
        x, w = x.reshape(M, K), w.reshape(N, K)
        y = torch.empty(M, N, dtype=torch.bfloat16)
        with torch.inference_mode():
            F.linear(x, w)
            torch.matmul(x, w.t(), out=y)
            t, t_out = [], []
            for r in range(reps):  # a fresh output (HF's layers), then into the same output (the GEMM alone)
                t0 = clock()
                z = F.linear(x, w)
                t1 = clock()
                torch.matmul(x, w.t(), out=y)
                t2 = clock()
                t.append(t1 - t0)
                t_out.append(t2 - t1)
                del z
        f = 2.0 * M * K * N / 1e9
        print(f"torch {s} {f / statistics.median(t):.1f} {f / statistics.median(t_out):.1f}", flush=True)


def torch_order(shape, probe, samples=2048):
    """torch's bf16 linear (bf16 out) against the TDPBF16PS twin chained over K from 0, 32 at a time
    (amx_probe --raw, the instruction itself), then rounded to bf16: on how many sampled outputs equal"""
    import random

    import torch
    import torch.nn.functional as F

    M, K, N = (int(v) for v in shape.split(":"))
    if K % 32:
        sys.exit("amx_rates: --torch-order needs K a multiple of 32")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x, w = torch.randn(M, K).bfloat16(), (torch.randn(N, K) * 0.05).bfloat16()
    with torch.inference_mode():
        y = F.linear(x, w)
    xb, wb, yb = (t.view(torch.int16).numpy().astype("uint16") for t in (x, w, y))
    random.seed(1)
    pick = [(random.randrange(M), random.randrange(N)) for _ in range(samples)]
    acc = [0] * samples
    for k0 in range(0, K, 32):
        lines = [f"16 {a:08x} " + " ".join(f"{v:04x}" for v in xb[m, k0:k0 + 32]) + " "
                 + " ".join(f"{v:04x}" for v in wb[n, k0:k0 + 32]) for (m, n), a in zip(pick, acc)]
        acc = [int(v, 16) for v in run([probe, "--raw"], input="\n".join(lines) + "\n").split()]

    def bf16(u):  # round to nearest even (a NaN stays a NaN)
        if (u & 0x7F800000) == 0x7F800000 and u & 0x7FFFFF:
            return (u >> 16) | 0x40
        return (u + 0x7FFF + ((u >> 16) & 1)) >> 16

    same = sum(bf16(a) == int(yb[m, n]) for (m, n), a in zip(pick, acc))
    print(f"{shape}: torch {torch.__version__} bf16 linear equal to bf16(TDPBF16PS chained over K from 0) on {same} "
          f"of {samples} sampled outputs (randn inputs, weights x 0.05)")


def run(cmd, env=None, input=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, input=input)
    if r.returncode == 77:
        print(r.stdout.strip())
        sys.exit(77)
    if r.returncode != 0:
        sys.exit(f"amx_rates: {' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("shapes", nargs="*", default=DEFAULT_SHAPES)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3, help="timed calls per shape and tool in each round")
    ap.add_argument("--cpu-time", action="store_true")
    ap.add_argument("--probe", default="build/amx_probe")
    ap.add_argument("--torch-order", action="store_true",
                    help="instead of rates: torch's bf16 outputs against the instruction's twin chained over K")
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_order:
        for s in a.shapes:
            torch_order(s, a.probe)
        return
    if a.cpu_time:
        a.threads = 1
    if a.torch_worker:
        torch_worker(a.shapes, a.threads, a.reps, a.cpu_time)
        return
    for s in a.shapes:
        if not re.fullmatch(r"\d+:\d+:\d+", s):
            sys.exit(f"amx_rates: bad shape '{s}' (M:K:N)")
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    ct = ["--cpu-time"] if a.cpu_time else []
    tools = {
        "amx+engine": lambda: run([a.probe, "--bench", "--engine", "--threads", str(a.threads), "--reps",
                                   str(a.reps)] + ct + a.shapes, env),
        "torch": lambda: run([sys.executable, os.path.abspath(__file__), "--torch-worker", "--threads",
                              str(a.threads), "--reps", str(a.reps)] + ct + a.shapes, env),
    }
    names = list(tools)
    rates = {n: {s: [] for s in a.shapes} for n in ("amx", "engine", "torch", "torch-out")}
    amx_twin, onednn = {}, set()
    for r in range(a.rounds):
        order = names if r % 2 == 0 else names[::-1]
        print(f"round {r + 1}: {', '.join(order)}; load {os.getloadavg()[0]:.2f}", flush=True)
        for n in order:
            out = tools[n]()
            for line in out.splitlines():
                f = line.split()
                if n == "torch" and f and f[0] == "torch":
                    rates["torch"][f[1]].append(float(f[2]))
                    rates["torch-out"][f[1]].append(float(f[3]))
                elif n == "torch" and line.startswith("onednn_verbose") and ",exec,cpu,matmul," in line:
                    onednn.add(line.split(",exec,cpu,matmul,", 1)[1].split(",")[0])
                elif f and f[0] == "amx":
                    m = re.search(r"^amx (\S+) +([\d.]+) GFLOP/s.*; engine ([\d.]+) GFLOP/s", line)
                    if not m:
                        sys.exit(f"amx_rates: unexpected probe line: {line}")
                    rates["amx"][m[1]].append(float(m[2]))
                    rates["engine"][m[1]].append(float(m[3]))
                    amx_twin[m[1]] = line.split("equal to:", 1)[-1].strip()
            for k in (("amx", "engine") if n != "torch" else ("torch", "torch-out")):
                print(f"  {k}: " + ", ".join(f"{s} {rates[k][s][-1]:.1f}" for s in a.shapes if rates[k][s]),
                      flush=True)
    clock = "1 thread, CPU time" if a.cpu_time else f"{a.threads} threads, wall clock"
    print(f"\nGFLOP/s, median of {a.rounds} rounds ({clock}); ratios: median (range) of the rounds'")
    print(f"{'M:K:N':<16} {'AMX':>8} {'engine':>8} {'torch':>8} {'out=':>8}  {'AMX/engine':<18} "
          f"{'torch/engine':<18} {'out=/engine':<18} {'AMX/torch':<18}")

    def ratio(s, p, q):
        v = [x / y for x, y in zip(rates[p][s], rates[q][s])]
        return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" if v else "-"

    for s in a.shapes:
        med = [f"{statistics.median(rates[n][s]):8.1f}" if rates[n][s] else f"{'-':>8}"
               for n in ("amx", "engine", "torch", "torch-out")]
        print(f"{s:<16} {' '.join(med)}  {ratio(s, 'amx', 'engine'):<18} {ratio(s, 'torch', 'engine'):<18} "
              f"{ratio(s, 'torch-out', 'engine'):<18} {ratio(s, 'amx', 'torch'):<18}")
    print(f"torch: oneDNN matmul {', '.join(sorted(onednn)) or '(not reported)'}")
    for s in a.shapes:
        print(f"AMX GEMM {s}: sampled outputs equal to {amx_twin.get(s, '-')}")


if __name__ == "__main__":
    main()
