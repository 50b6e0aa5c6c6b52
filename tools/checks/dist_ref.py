#!/usr/bin/env python3
"""Independent reference for ratiocheck's whole-distribution agreement (docs/statistics.md "Distribution"):
KL(sampler || trainer), total variation and top-1 agreement of two next-token log-prob rows,
computed with PyTorch in float64.

  dist_ref.py check DUMP            the rows a `ratiocheck run --distribution` compared, dumped with
                                    RATIOCHECK_DIST_DUMP=DUMP: each record's kl / tv / top1 as
                                    ratiocheck computed them against PyTorch's on the same rows
                                    (KL and TV within 1e-12 relative, top-1 equal); exit 1 otherwise
  dist_ref.py make-fixture DIR      synthetic row pairs with the edge cases (masked vocabulary, zero
                                    trainer probability, argmax ties, bf16-rounded rows that do not sum
                                    to 1) into DIR/rows.bin, their reference values into DIR/ref.txt and
                                    the versions into DIR/versions.txt (tests/test_dist.c reads them)

The rule both sides follow: p = exp(sampler log-prob), q = exp(trainer log-prob) in float64 from
the float32 values as each side produced them (no renormalisation),
  KL = sum_v p_v (r_v - 1 - log r_v), r_v = q_v / p_v (q_v where p_v = 0; +inf when some p_v > 0 has
       q_v = 0): sum p log(p / q) for two rows that sum to 1, and never negative for rows as produced
       (the extended KL of two measures: sum p log(p/q) - sum p + sum q); each term as p_v phi(log r_v),
       phi(x) = e^x - 1 - x by its series where expm1(x) - x would cancel,
  TV = sum_v |p_v - q_v| / 2, each term as -max(p_v, q_v) expm1(-|log p_v - log q_v|) (the
       difference of two close exps would keep only the digits the cancellation leaves),
  top-1: torch.argmax of each row (the first index of the largest value) equal.
The terms are computed by PyTorch in float64; their sum is math.fsum's (exactly rounded), so the
reference's own summation error does not enter the comparison.

Record layout (little-endian): i64 L, sequence, position, V; f64 kl, tv; i64 top1;
f32 sampler row [V]; f32 trainer row [V]. rows.bin has the same records with L = case number.
"""
import math
import os
import platform
import struct
import sys

import numpy as np
import torch

HEAD = struct.Struct("<4q2dq")
RTOL = 1e-12


def phi(x):
    """e^x - 1 - x (float64 tensor): torch.expm1(x) - x where that keeps its digits (|x| >= 1/2), else
    the Taylor series x^2 (1/2! + x/3! + ... + x^16/18!) (expm1(x) - x would cancel)."""
    small = torch.abs(x) < 0.5
    xs = torch.where(small, x, torch.zeros_like(x))
    s = torch.zeros_like(x)
    for k in range(18, 1, -1):
        s = 1.0 / math.factorial(k) + xs * s
    return torch.where(small, xs * xs * s, torch.expm1(x) - x)


def reference(p_lp, q_lp):
    """(kl, tv, top1, p_argmax, q_argmax) of two float32 rows, PyTorch float64 terms, fsum."""
    a = torch.from_numpy(np.asarray(p_lp, dtype=np.float32)).to(torch.float64)
    b = torch.from_numpy(np.asarray(q_lp, dtype=np.float32)).to(torch.float64)
    p, q = torch.exp(a), torch.exp(b)
    pos = p > 0
    if bool((pos & (q == 0)).any()):
        kl = math.inf
    else:
        x = torch.where(pos, b - a, torch.zeros_like(a))  # the log-ratio log r = log q - log p, exact
        terms = torch.where(pos, p * phi(x), q)
        kl = math.fsum(terms.tolist())
    # |p - q| from the larger side, -max(p, q) expm1(-|a - b|): exp(a) - exp(b) of two close values
    # would lose its digits to cancellation (each exp is within an ulp, their difference is not)
    d = torch.where(a > b, -p * torch.expm1(b - a), -q * torch.expm1(a - b))
    d = torch.where(a == b, torch.zeros_like(d), d)
    tv = 0.5 * math.fsum(d.tolist())
    pa, qa = int(torch.argmax(a)), int(torch.argmax(b))
    return kl, tv, pa == qa, pa, qa


def read_records(path):
    with open(path, "rb") as f:
        data = f.read()
    off = 0
    while off < len(data):
        L, s, t, V, kl, tv, top1 = HEAD.unpack_from(data, off)
        off += HEAD.size
        rows = np.frombuffer(data, dtype="<f4", count=2 * V, offset=off).copy()
        off += 8 * V
        yield (L, s, t), kl, tv, top1, rows[:V], rows[V:]


def rel(got, want):
    if math.isinf(want) or math.isinf(got):
        return 0.0 if got == want else math.inf
    if want == got:
        return 0.0
    return abs(got - want) / max(abs(want), 1e-300)


def check(path):
    n, worst_kl, worst_tv, bad = 0, 0.0, 0.0, []
    for key, kl, tv, top1, p, q in read_records(path):
        rk, rt, r1, _, _ = reference(p, q)
        ek, et = rel(kl, rk), rel(tv, rt)
        worst_kl, worst_tv = max(worst_kl, ek), max(worst_tv, et)
        if not (ek <= RTOL and et <= RTOL and bool(top1) == r1):
            bad.append(f"L={key[0]} seq {key[1]} pos {key[2]}: kl {kl!r} vs {rk!r}, tv {tv!r} vs {rt!r}, "
                       f"top1 {top1} vs {int(r1)}")
        n += 1
    print(f"torch {torch.__version__}, numpy {np.__version__}, python {platform.python_version()}")
    print(f"{n} positions: largest relative difference KL {worst_kl:.3g}, TV {worst_tv:.3g} (limit {RTOL:g})")
    for b in bad[:10]:
        print("MISMATCH", b)
    if n == 0:
        print("no records")
        return 1
    return 1 if bad else 0


def fixture_cases():
    """(name, sampler row, trainer row) float32 pairs, V = 1000, from a fixed seed."""
    V = 1000
    g = torch.Generator().manual_seed(20261205)
    logits = torch.randn(V, generator=g, dtype=torch.float64) * 3
    noise = torch.randn(V, generator=g, dtype=torch.float64) * 1e-3

    def lsm(x):
        return torch.log_softmax(x, dim=-1).to(torch.float32)

    base = lsm(logits)
    cases = [("close: fp32 log-softmax, logits + 1e-3 noise", base, lsm(logits + noise)),
             ("identical rows", base, base.clone()),
             ("temperature 0.7 against 1", lsm(logits / 0.7), base)]
    masked = logits.clone()
    masked[V // 2:] = -math.inf  # top-k style mask on both sides
    cases.append(("masked vocabulary on both sides", lsm(masked), lsm(masked + noise)))
    smask = logits.clone()
    smask[::3] = -math.inf  # the sampler gives these zero probability, the trainer does not
    cases.append(("sampler zero where the trainer is not", lsm(smask), base))
    cases.append(("trainer zero where the sampler is not: KL +inf", base, lsm(smask)))
    bf = torch.log_softmax(logits, dim=-1).to(torch.bfloat16).to(torch.float32)  # does not sum to 1
    cases.append(("bf16-rounded sampler row against fp32", bf, base))
    tie = logits.clone()
    top = int(torch.argmax(tie))
    tie[top + 1 if top + 1 < V else top - 1] = tie[top]  # two equal largest values
    cases.append(("argmax tie on the sampler side", lsm(tie), lsm(logits + noise)))
    flat = torch.zeros(V, dtype=torch.float64)
    cases.append(("uniform against peaked", lsm(flat), lsm(logits * 4)))
    return [(name, p.numpy(), q.numpy()) for name, p, q in cases]


def make_fixture(out):
    os.makedirs(out, exist_ok=True)
    cases = fixture_cases()
    with open(os.path.join(out, "rows.bin"), "wb") as f, open(os.path.join(out, "ref.txt"), "w") as r:
        r.write("# case kl tv top1 p_argmax q_argmax: tools/checks/dist_ref.py make-fixture (PyTorch float64 terms, "
                "math.fsum)\n")
        for i, (name, p, q) in enumerate(cases):
            kl, tv, top1, pa, qa = reference(p, q)
            f.write(HEAD.pack(i, 0, 0, len(p), kl, tv, int(top1)))
            f.write(np.asarray(p, dtype="<f4").tobytes())
            f.write(np.asarray(q, dtype="<f4").tobytes())
            r.write(f"{i} {kl!r} {tv!r} {int(top1)} {pa} {qa}  # {name}\n")
    with open(os.path.join(out, "versions.txt"), "w") as v:
        v.write(f"torch {torch.__version__}\nnumpy {np.__version__}\npython {platform.python_version()}\n"
                "command: python3 tools/checks/dist_ref.py make-fixture data/fixtures/dist\n")
    print(f"{len(cases)} cases into {out}")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    if len(sys.argv) == 3 and sys.argv[1] == "make-fixture":
        make_fixture(sys.argv[2])
        sys.exit(0)
    sys.exit(__doc__)
