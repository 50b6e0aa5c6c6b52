#!/usr/bin/env python3
"""Generate per-op bf16 / fp16 fixtures: inputs and PyTorch's CPU outputs.

Writes data/fixtures/ops/ops_bf16.safetensors, ops_f16.safetensors and README.md.
Each op's inputs (stored in the low-precision dtype `dt` unless noted) and what
PyTorch 2.x / HF transformers compute from them on the CPU, so the C emulation
of bf16 / fp16 arithmetic can be checked op by op without Python.

Usage:
    python3 tools/make_op_fixtures.py                  # writes data/fixtures/ops/
    python3 tools/make_op_fixtures.py --out /tmp/ops   # somewhere else (e.g. to diff)
    python3 tools/make_op_fixtures.py --keep-existing  # add new tensors, keep the stored ones

Everything is seeded (one torch.Generator per op, seeded from the op name) and
runs single-threaded on the CPU with deterministic algorithms, so two runs with
the same package versions give byte-identical files.  The safetensors header is
re-serialised with sorted metadata keys (the Rust writer's key order is random
per process).

The ops after the attention matmuls (`build_positions`: ALiBi slopes and scores of BLOOM,
Baichuan-13B and MPT, Baichuan2's NormHead, MPT's clip_qkv) come from transformers' own functions
(`_get_alibi_slopes`, `build_alibi_tensor`, `BloomAttention`, `build_mpt_alibi_tensor`,
`MptAttention`) and, for Baichuan-13B, which transformers lacks, from the few lines of its
`modeling_baichuan.py` re-written here; README.md gives them their own section.

`--keep-existing` keeps every tensor already stored in --out's files, and README.md's part about
the ops before that section, and only adds what is missing: for a CPU whose kernels round some
ops differently from the one that wrote the files (the fp16 GEMM, GELU and SiLU kernels do).

For every output the script also computes a "round-once" reference: the exact
value of the expression rounded ONCE (round to nearest even) to dt, or to
float32 for F32 outputs.  Rational ops (add, mul, scalar mul/div, dot products)
are evaluated in float64 and, wherever the float64 value lies exactly on a tie
of the target format, re-evaluated with fractions.Fraction (float64 rounding of
a*0.7 or a/0.6 often lands on a tie and would otherwise round the wrong way);
transcendental ops and norms are evaluated with mpmath at 320 bits (plain
float64 formulas such as 0.5*x*(1+erf(x/sqrt 2)) cancel for x << 0).  torch's
own float64 -> bf16/fp16 conversion is NOT used: on the CPU it goes through
float32 and so double-rounds (checked and reported).  The number of elements
where torch differs from the round-once reference is printed and written to the
README, plus diagnostics (alternative formulas, exhaustive runs over every
finite dt value for the scalar and unary ops).  Takes about a minute.
"""

import argparse
import hashlib
import math
import operator
import os
import platform
import sys
import warnings
import zlib
from fractions import Fraction

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU only, before torch is imported
warnings.filterwarnings("ignore", message=".*TF32 acceleration on top of oneDNN.*")

import mpmath  # noqa: E402  (ships with torch, via sympy)
import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
import transformers.models.bloom.modeling_bloom as bloom  # noqa: E402
import transformers.models.llama.modeling_llama as llama  # noqa: E402
import transformers.models.mpt.modeling_mpt as mpt  # noqa: E402
from safetensors import safe_open  # noqa: E402
from st_canonical import save_safetensors_canonical as save_canonical  # noqa: E402

SEED = 20260515
M_SQRT1_2 = 0.7071067811865476  # CUDA's M_SQRT1_2 (float64; rounded to fp32 in an fp32 tensor op)
N = 4096  # elementwise ops
M, K, NOUT = 7, 256, 96  # linear
H = 256  # norms
T_SM = 100  # softmax columns
T, D = 40, 64  # rope / attention
V = 1000  # log-softmax vocabulary
ROT_DIM = 16  # partial rotary (GPT-NeoX style)
NEOX_MAX_POS = 2048  # size of the 4.40-style cos/sin cache

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}
# (mantissa bits incl. implicit bit, min normal exponent, max finite)
FMT = {
    torch.bfloat16: (8, -126, float(torch.finfo(torch.bfloat16).max)),
    torch.float16: (11, -14, float(torch.finfo(torch.float16).max)),
    torch.float32: (24, -126, float(torch.finfo(torch.float32).max)),
}


# --------------------------------------------------------------------------
# correct rounding float64 -> dt, ulp distances
# --------------------------------------------------------------------------


def round_np(x, dt):
    """Round float64 array x to the nearest dt value (ties to even), IEEE overflow to inf.

    Returns (float64 array holding dt values exactly, bool mask of elements that were exactly
    half-way between two dt values, i.e. where a float64 value that is itself rounded may
    have been rounded onto the tie).
    """
    p, emin, vmax = FMT[dt]
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        _, e = np.frexp(x)
        E = np.maximum(e.astype(np.int64) - 1, emin)
        q = np.ldexp(1.0, (E - (p - 1)).astype(np.int32))
        s = x / q  # exact: scaling by a power of two
        fin = np.isfinite(s)
        ties = fin & (np.abs(s - np.trunc(s)) == 0.5)
        r = np.rint(s) * q
        r = np.where(np.isfinite(x) & (np.abs(r) > vmax), np.copysign(np.inf, x), r)
        r = np.where(np.isfinite(x), r, x)
    return r, ties


def rne_fraction(v, dt):
    """Correctly round an exact rational (fractions.Fraction) to dt; returns a float."""
    p, emin, vmax = FMT[dt]
    if v == 0:
        return 0.0
    sign = -1 if v < 0 else 1
    a = abs(v)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # 2^e <= a < 2^(e+2)
    if a >= Fraction(2) ** (e + 1):
        e += 1
    elif a < Fraction(2) ** e:
        e -= 1
    E = max(e, emin)
    q = Fraction(2) ** (E - p + 1)
    n = a / q
    fl = n.numerator // n.denominator
    rem = n - fl
    if rem > Fraction(1, 2) or (rem == Fraction(1, 2) and fl % 2 == 1):
        fl += 1
    r = fl * q
    if r > Fraction(vmax):
        return sign * math.inf
    return sign * float(r)


def round_t(x64, dt, exact=None):
    """Round a float64 tensor once to dt; returns (torch tensor of dtype dt, note).

    `exact`: None (float64 value not exact: ties are only counted and reported), "f64"
    (the float64 value is exact, ties are genuine) or a function flat_index -> Fraction
    giving the exact value, used to re-round the elements that sit on a tie in float64.
    """
    a = x64.detach().cpu().double().numpy() if torch.is_tensor(x64) else np.asarray(x64, np.float64)
    r, ties = round_np(a, dt)
    idx = np.flatnonzero(ties)
    note = ""
    if idx.size:
        if exact is None:
            note = f"{idx.size} UNRESOLVED float64 values exactly on a tie"
        elif exact == "f64":
            note = f"{idx.size} exact ties"
        else:
            flat = r.reshape(-1).copy()
            changed = 0
            for i in idx:
                v = rne_fraction(exact(int(i)), dt)
                changed += v != flat[i]
                flat[i] = v
            r = flat.reshape(r.shape)
            note = f"{idx.size} float64 ties re-rounded from the exact value ({changed} changed)"
    # values are exactly representable in dt (and float32), so these casts are exact
    return torch.from_numpy(np.ascontiguousarray(r)).to(torch.float32).to(dt), note


def frac_args(*ts, shape=None):
    """flat index -> [Fraction] of each tensor (broadcast to `shape`)."""
    shape = shape or ts[0].shape
    flats = [t.double().expand(shape).reshape(-1).numpy() for t in ts]
    return lambda i: [Fraction(float(f[i])) for f in flats]


def exact_elementwise(fn, *ts, shape=None):
    get = frac_args(*ts, shape=shape)
    return lambda i: fn(*get(i))


def exact_dot(A, B, bias=None, scale=None):
    """flat index of [m, n] -> exact sum_k A[i,k] B[k,j] (+ bias[j]) (* scale) as a Fraction."""
    A = A.double().numpy()
    B = B.double().numpy()
    bb = None if bias is None else bias.double().numpy()
    n = B.shape[1]

    def f(idx):
        i, j = divmod(idx, n)
        v = sum((Fraction(float(x)) * Fraction(float(y)) for x, y in zip(A[i], B[:, j])), Fraction(0))
        if bb is not None:
            v += Fraction(float(bb[j]))
        if scale is not None:
            v *= Fraction(scale)
        return v
    return f


# --------------------------------------------------------------------------
# high-precision (mpmath, 320 bits) references for transcendental ops
# --------------------------------------------------------------------------

MP = mpmath.mp
MP.prec = 320
MP_KAPPA = mpmath.mpf("0.044715")  # decimal constant of the tanh approximation


def rne_mp(v, dt, zero_sign=1.0):
    """Correctly round an mpf (320-bit, error far below any dt tie distance) to dt -> float.

    `zero_sign` gives the sign of an exactly-zero value (e.g. gelu(-0.0) = -0.0)."""
    p, emin, vmax = FMT[dt]
    if v == 0:
        return math.copysign(0.0, zero_sign)
    sign = -1.0 if v < 0 else 1.0
    man, exp = v.man_exp  # |v| = man * 2^exp (man_exp drops the sign)
    man = abs(man)
    top = exp + man.bit_length() - 1  # floor(log2 |v|)
    if top < emin - p - 2:  # below a quarter of the smallest subnormal
        return math.copysign(0.0, sign)
    if top > 200:
        return math.copysign(math.inf, sign)
    fr = Fraction(man) * (Fraction(2) ** exp)
    return math.copysign(rne_fraction(fr, dt), sign)


def mp_to_tensor(vals, shape, dt, zero_signs=None):
    zs = zero_signs if zero_signs is not None else [1.0] * len(vals)
    out = [rne_mp(v, dt, z) for v, z in zip(vals, zs)]
    return torch.tensor(out, dtype=torch.float64).reshape(shape).to(torch.float32).to(dt)


_UNARY_CACHE = {}


def mp_unary(name, xf):
    key = (name, xf)
    v = _UNARY_CACHE.get(key)
    if v is None:
        x = mpmath.mpf(xf)
        if name == "gelu":  # x * Phi(x), stable form
            v = x / 2 * mpmath.erfc(-x / mpmath.sqrt(2))
        elif name == "gelu_tanh":  # 0.5 x (1 + tanh(y)) = x / (1 + exp(-2y))
            y = mpmath.sqrt(2 / mpmath.pi) * (x + MP_KAPPA * x ** 3)
            v = x / (1 + mpmath.exp(-2 * y))
        elif name == "silu":
            v = x / (1 + mpmath.exp(-x))
        else:
            raise KeyError(name)
        _UNARY_CACHE[key] = v
    return v


def unary_ref(name, x, dt):
    """rne_dt(f(x)) for every element of x (dt or float tensor), f evaluated with mpmath."""
    xs = x.double().reshape(-1).tolist()
    vals = [mp_unary(name, v) for v in xs]
    return mp_to_tensor(vals, x.shape, dt, [math.copysign(1.0, v) for v in xs])


def mpf_frac(fr):
    return mpmath.mpf(fr.numerator) / fr.denominator


def row_frac(row):
    return [Fraction(v) for v in row]


def mp_layernorm(x, w, b, eps):
    out = []
    for row in x.double().tolist():
        fr = row_frac(row)
        mean = sum(fr, Fraction(0)) / len(fr)
        var = sum(((v - mean) ** 2 for v in fr), Fraction(0)) / len(fr)  # exact
        rstd = 1 / mpmath.sqrt(mpf_frac(var) + mpmath.mpf(eps))
        out.append([(mpf_frac(v - mean)) * rstd * mpmath.mpf(wj) + mpmath.mpf(bj)
                    for v, wj, bj in zip(fr, w.double().tolist(), b.double().tolist())])
    return out


def mp_rms_normed(x, eps):
    out = []
    for row in x.double().tolist():
        fr = row_frac(row)
        ms = sum((v * v for v in fr), Fraction(0)) / len(fr)
        rs = 1 / mpmath.sqrt(mpf_frac(ms) + mpmath.mpf(eps))
        out.append([mpmath.mpf(v) * rs for v in row])
    return out


def mp_softmax(x, log=False):
    out = []
    for row in x.double().tolist():
        m = max(row)
        e = [mpmath.exp(mpmath.mpf(v) - mpmath.mpf(m)) for v in row]  # differences exact at 320 bits
        ssum = mpmath.fsum(e)
        if log:
            ls = mpmath.log(ssum)
            out.append([mpmath.mpf(v) - mpmath.mpf(m) - ls for v in row])
        else:
            out.append([ei / ssum for ei in e])
    return out


def flat(rows):
    return [v for r in rows for v in r]


def ordered_int(t):
    """Monotone integer image of a float tensor's bits (+0 and -0 both map to 0)."""
    if t.dtype in (torch.bfloat16, torch.float16):
        b = t.contiguous().view(torch.int16).to(torch.int64) & 0xFFFF
        sign, mag = b >> 15, b & 0x7FFF
    elif t.dtype == torch.float32:
        b = t.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
        sign, mag = b >> 31, b & 0x7FFFFFFF
    else:
        raise TypeError(t.dtype)
    return torch.where(sign == 1, -mag, mag)


def bits_equal(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    ib = {torch.bfloat16: torch.int16, torch.float16: torch.int16, torch.float32: torch.int32}[a.dtype]
    return a.contiguous().view(ib) == b.contiguous().view(ib)


def ulp_stats(got, ref):
    """(#elements whose bits differ, max |ulp distance|); NaN equals NaN whatever its bits."""
    both_nan = torch.isnan(got) & torch.isnan(ref)
    nd = int((~bits_equal(got, ref) & ~both_nan).sum())
    dist = torch.where(both_nan, 0, (ordered_int(got) - ordered_int(ref)).abs())
    mu = int(dist.max()) if got.numel() else 0
    return nd, mu


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def gen_for(name):
    return torch.Generator().manual_seed(SEED ^ zlib.crc32(name.encode()))


def randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g, dtype=torch.float32) * scale


def dt_from_bits(bits, dt):
    return torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(dt)


def fsum_matmul(a, b):
    """Exact-as-possible a @ b in float64: exact products, math.fsum per dot product.

    a: [m, k], b: [k, n] holding dt values (their products are exact in float64).
    """
    a = a.double().numpy()
    b = b.double().numpy()
    m, k = a.shape
    n = b.shape[1]
    out = np.empty((m, n), dtype=np.float64)
    for i in range(m):
        prod = a[i][:, None] * b  # [k, n], exact
        for j in range(n):
            out[i, j] = math.fsum(prod[:, j])
    return torch.from_numpy(out)


def fsum_linear(x, w, b=None):
    """x @ w.T (+ b) as math.fsum of exact float64 products (and the bias)."""
    xs = x.double().numpy()
    ws = w.double().numpy()
    out = np.empty((xs.shape[0], ws.shape[0]), dtype=np.float64)
    for i in range(xs.shape[0]):
        prod = xs[i][None, :] * ws  # [n, k], exact
        for j in range(ws.shape[0]):
            terms = list(prod[j])
            if b is not None:
                terms.append(float(b[j]))
            out[i, j] = math.fsum(terms)
    return torch.from_numpy(out)


class Spec:
    """Tensors plus their documentation and the round-once comparison table."""

    def __init__(self, dt):
        self.dt = dt
        self.tensors = {}
        self.doc = {}  # name -> expression
        self.rows = []  # (output, reference description, n, n_diff, max_ulp, extra)
        self.notes = []
        self.exh = []  # exhaustive checks: (op, reference, n, n_diff, max_ulp)

    def mark(self):
        """Start the second group of ops (tensors, rows and notes after this go to their own README section)."""
        self.split = (len(self.tensors), len(self.rows), len(self.notes))

    def put(self, name, t, expr):
        assert name not in self.tensors, name
        self.tensors[name] = t.detach().contiguous().clone()
        self.doc[name] = expr

    def cmp(self, out_name, ref, ref_desc, extra=""):
        got = self.tensors[out_name]
        if isinstance(ref, tuple):
            ref, note = ref
            if note:
                extra = (extra + "; " if extra else "") + note
        nd, mu = ulp_stats(got, ref)
        self.rows.append((out_name, ref_desc, got.numel(), nd, mu, extra))
        return nd

    def cand(self, out_name, cand, cand_desc):
        """Diagnostic: does torch's result equal an alternative (fp32) computation?"""
        got = self.tensors[out_name]
        nd, mu = ulp_stats(got, cand)
        self.notes.append((out_name, cand_desc, got.numel(), nd, mu))
        return nd


# --------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------


def round_inputs():
    """float32 test vector for x.to(dt): edge cases for both bf16 and fp16 + random normals."""
    g = gen_for("round")
    vals = []
    for dt in (torch.bfloat16, torch.float16):
        p, emin, vmax = FMT[dt]
        nbits_max = {torch.bfloat16: 0x7F7F, torch.float16: 0x7BFF}[dt]
        sub_max = (1 << (p - 1)) - 1  # largest subnormal bit pattern
        # ties between two adjacent normal dt values, lower neighbour even and odd
        lo = torch.randint(1 << (p - 1), nbits_max, (64,), generator=g)
        lo[:32] &= ~1
        lo[32:] |= 1
        sign = torch.randint(0, 2, (64,), generator=g)
        v0 = dt_from_bits(lo.tolist(), dt).double()
        v1 = dt_from_bits((lo + 1).tolist(), dt).double()
        tie = ((v0 + v1) / 2 * torch.where(sign == 1, -1.0, 1.0).double()).float()
        assert ((tie.double() * 2).abs() == (v0 + v1)).all()
        vals += [tie, torch.nextafter(tie, torch.full_like(tie, math.inf)),
                 torch.nextafter(tie, torch.full_like(tie, -math.inf))]
        # subnormal values and ties between subnormals (and between 0 and the smallest)
        ls = torch.randint(0, sub_max, (32,), generator=g)
        ls[:16] &= ~1
        ls[16:] |= 1
        s0 = dt_from_bits(ls.tolist(), dt).double()
        s1 = dt_from_bits((ls + 1).tolist(), dt).double()
        st = ((s0 + s1) / 2).float()
        vals += [st, torch.nextafter(st, torch.full_like(st, math.inf)),
                 torch.nextafter(st, torch.full_like(st, -math.inf)), s1.float(), -s1.float()]
        tiny = 2.0 ** emin
        sub = 2.0 ** (emin - p + 1)
        ulp_max = 2.0 ** (math.frexp(vmax)[1] - 1 - p + 1)
        special = [
            vmax, -vmax,
            vmax + ulp_max / 2,  # tie between max (odd) and 2^(emax+1): -> inf
            -(vmax + ulp_max / 2),
            tiny, -tiny, tiny - sub, tiny - sub / 2,  # largest subnormal, tie to smallest normal
            sub, -sub, sub / 2, -sub / 2, 3 * sub / 2, 5 * sub / 2, sub / 4,
            1.0 + 2.0 ** -p, 1.0 + 3 * 2.0 ** -p, 1.0 - 2.0 ** -(p + 1), 1.5 + 2.0 ** -p,
        ]
        if dt == torch.float16:
            special += [65504.0, 65519.99, 65520.0, -65520.0, 65536.0, 1e5, -1e5, 65519.0,
                        2.0 ** -24, 2.0 ** -25, 2.0 ** -26, 6.1e-5]
        else:
            special += [3.39e38, -3.39e38, 3.3895314e38, 3.4e38, float(torch.finfo(torch.float32).max),
                        -float(torch.finfo(torch.float32).max), 2.0 ** -133, 2.0 ** -134,
                        2.0 ** -149, 1e-40, 1.1754942e-38]
        sp = torch.tensor(special, dtype=torch.float64).float()
        vals += [sp, torch.nextafter(sp, torch.full_like(sp, math.inf)),
                 torch.nextafter(sp, torch.full_like(sp, -math.inf))]
    vals.append(torch.tensor([0.0, -0.0, math.inf, -math.inf], dtype=torch.float32))
    edge = torch.cat(vals)
    edge = edge[torch.isfinite(edge) | torch.isinf(edge)]  # (no NaN by construction)
    nrand = N - edge.numel()
    assert nrand > 2000, nrand
    scales = torch.tensor([1e-42, 1e-39, 1e-30, 1e-7, 1e-5, 1e-3, 0.1, 1.0, 2.0, 10.0, 300.0,
                           1e4, 5e4, 1e20, 1e38], dtype=torch.float32)
    idx = torch.randint(0, scales.numel(), (nrand,), generator=g)
    rnd = randn(g, nrand) * scales[idx]
    return torch.cat([edge, rnd]).contiguous()


def edge_pairs(op, dt):
    """Hand-picked (a, b) pairs for add/sub/mul, in dt."""
    p, emin, vmax = FMT[dt]
    tiny = 2.0 ** emin
    sub = 2.0 ** (emin - p + 1)
    half_ulp_max = 2.0 ** (math.frexp(vmax)[1] - 1 - p)
    one_ulp = 2.0 ** -(p - 1)
    if op in ("add", "sub"):
        pr = [(vmax, vmax), (vmax, -vmax), (vmax, half_ulp_max), (vmax, half_ulp_max / 2),
              (-vmax, -half_ulp_max), (1.5, -1.5), (-0.0, -0.0), (0.0, -0.0), (-0.0, 0.0),
              (sub, sub), (tiny, -sub), (tiny, -tiny), (1.0, 2.0 ** -p), (1.0 + one_ulp, 2.0 ** -p),
              (1.0, -(2.0 ** -(p + 1))), (math.inf, 1.0), (-math.inf, 5.0), (3.0, 2.0 ** -40)]
        if op == "sub":  # the same sums, written as a - (-b)
            pr = [(a, -b) for a, b in pr]
    else:
        rs = math.sqrt(vmax)
        pr = [(vmax, 2.0), (rs, rs * 1.01), (sub, 0.5), (3 * sub, 0.5), (5 * sub, 0.5), (tiny, tiny),
              (tiny, 0.75), (tiny, -0.375), (-0.0, 5.0), (0.0, -5.0), (math.inf, -2.0),
              (1.0 + one_ulp, 1.0 + one_ulp), (vmax, 1.0 + one_ulp), (vmax, 0.5)]
        g = gen_for(f"{op}.edge.{p}")
        st = math.sqrt(tiny)  # products of these land in the subnormal range
        for _ in range(18):
            u = float(torch.rand((), generator=g)) * 0.9 + 0.05
            w = float(torch.rand((), generator=g)) * 0.9 + 0.05
            pr.append((st * u, -st * w if _ % 2 else st * w))
    a = torch.tensor([x for x, _ in pr], dtype=torch.float64).float().to(dt)
    b = torch.tensor([y for _, y in pr], dtype=torch.float64).float().to(dt)
    return a, b


NTAIL = 256


def all_finite(dt):
    """Every finite value of dt, in bit-pattern order (+0 ... max, -0 ... -max)."""
    v = torch.arange(0, 65536, dtype=torch.int32).to(torch.int16).view(dt)
    return v[torch.isfinite(v)]


UNARY = {
    "gelu": lambda z: F.gelu(z),
    "gelu_tanh": lambda z: F.gelu(z, approximate="tanh"),
    "silu": lambda z: F.silu(z),
}


def unary_tail_inputs(dt):
    p, emin, vmax = FMT[dt]
    tiny = 2.0 ** emin
    sub = 2.0 ** (emin - p + 1)
    fixed = [0.0, -0.0, sub, -sub, 3 * sub, -3 * sub, tiny / 2, -tiny / 2, tiny - sub, -(tiny - sub),
             tiny, -tiny, 1.5 * tiny, -1.5 * tiny, 4 * tiny, -4 * tiny, 1e-30, -1e-30]
    fixed += [-float(v) for v in np.arange(5.0, 20.5, 0.5)]  # cancellation in 1 + erf(x / sqrt 2)
    fixed += [-30.0, -100.0, 30.0, 100.0, 1000.0, 3e4, vmax / 4, vmax / 2, 0.75 * vmax, vmax, -vmax / 2, -vmax]
    if dt == torch.bfloat16:
        fixed += [1e37, 1e38, 1.7e38, 1.8e38, 2e38, -1e38]
    else:
        fixed += [4e4, 6e4, 65504.0, -6e4]
    fx = torch.tensor(fixed, dtype=torch.float64).float().to(dt)
    a = all_finite(dt)
    a = a[a.abs() < 20]
    bad = torch.zeros(a.numel(), dtype=torch.bool)
    for fname, f in UNARY.items():
        bad |= ~bits_equal(f(a), unary_ref(fname, a, dt))
    cand = a[bad]
    k = NTAIL - fx.numel()
    idx = torch.linspace(0, cand.numel() - 1, k).round().long() if cand.numel() > k else torch.arange(cand.numel())
    picked = cand[idx]
    out = torch.cat([fx, picked])
    if out.numel() < NTAIL:
        out = torch.cat([out, torch.zeros(NTAIL - out.numel(), dtype=dt)])
    return out


def binary_inputs(op, dt):
    g = gen_for(op)
    ne = 32
    n = N - ne
    a = randn(g, n, scale=2.0)
    b = randn(g, n, scale=2.0)
    # half of b at other magnitudes (alignment shifts, cancellation)
    mag = torch.pow(10.0, torch.rand(n // 2, generator=g) * 4 - 3)
    b[: n // 2] *= mag
    a, b = a.to(dt), b.to(dt)
    ea, eb = edge_pairs(op, dt)
    assert ea.numel() <= ne
    pad = ne - ea.numel()
    fa = randn(g, pad, scale=2.0).to(dt)
    fb = randn(g, pad, scale=2.0).to(dt)
    return torch.cat([a, ea, fa]), torch.cat([b, eb, fb])


# --------------------------------------------------------------------------
# ops
# --------------------------------------------------------------------------


def build(dt):
    S = Spec(dt)
    f32 = torch.float32

    def r(x64, exact=None):
        return round_t(x64, dt, exact)

    def r32(x64, exact=None):
        return round_t(x64, f32, exact)

    # ---- round -------------------------------------------------------------
    x = round_inputs()
    S.put("round.x", x, "F32 test values (edge cases for bf16 and fp16, then random normals at many scales)")
    S.put("round.out", x.to(dt), "round.x.to(dt)")
    S.cmp("round.out", r(x.double(), "f64"), "rne(x)")
    # torch's own float64 -> dt conversion: does it double-round via float32?
    xs = torch.tensor([1 + 2.0 ** -8 + 2.0 ** -40, 1 + 2.0 ** -11 + 2.0 ** -40, -(1 + 2.0 ** -8 + 2.0 ** -40)],
                      dtype=torch.float64)
    direct, _ = r(xs)
    S.notes.append(("(float64 tensor).to(dt)", "torch converts [1+2^-8+2^-40, 1+2^-11+2^-40, -(1+2^-8+2^-40)] -> "
                    + str(xs.to(dt).double().tolist()) + "; correctly rounded: " + str(direct.double().tolist()),
                    3, ulp_stats(xs.to(dt), direct)[0], ulp_stats(xs.to(dt), direct)[1]))

    # ---- add / sub / mul ---------------------------------------------------
    for op, fn, sym, pyop in (("add", torch.add, "+", operator.add), ("sub", torch.sub, "-", operator.sub),
                              ("mul", torch.mul, "*", operator.mul)):
        a, b = binary_inputs(op, dt)
        S.put(f"{op}.a", a, f"dt; N(0,2) draws, half of {op}.b scaled by 10^U(-3,1), then {32} hand-picked edge pairs (overflow, ties, signed zeros, subnormals) and fillers")
        S.put(f"{op}.b", b, f"dt; see {op}.a")
        S.put(f"{op}.out", fn(a, b), f"{op}.a {sym} {op}.b  (dt tensors, dt result)")
        S.cmp(f"{op}.out", r(fn(a.double(), b.double()), exact_elementwise(pyop, a, b)), f"rne(a {sym} b)")
        S.cand(f"{op}.out", fn(a.float(), b.float()).to(dt), f"(a.float() {sym} b.float()).to(dt)")

    # ---- scalar mul / div --------------------------------------------------
    for op, s, kind in (("mul_scalar", 64 ** -0.5, "mul"), ("mul_scalar2", 80 ** -0.5, "mul"),
                        ("mul_scalar3", 0.7, "mul"), ("div_scalar", 0.7, "div"), ("div_scalar2", 0.6, "div")):
        g = gen_for(op)
        a = randn(g, N, scale=2.0)
        a[: N // 4] *= 1000.0
        a[N // 4: N // 2] *= 1e-3
        a = a.to(dt)
        if dt == torch.float16:
            a[-4:] = torch.tensor([65504.0, -65504.0, 6e-8, 2.0 ** -14], dtype=torch.float32).to(dt)
        else:
            a[-4:] = torch.tensor([3.38e38, -3.38e38, 2.0 ** -133, 2.0 ** -126], dtype=torch.float32).to(dt)
        adesc = "dt; N(0,2) draws, a quarter x1000 and a quarter x1e-3, last 4 = +-max, smallest subnormal, smallest normal"
        if op == "mul_scalar3":
            # every finite dt value where rne(a * s) != (a.float() * float32(s)).to(dt)
            af = all_finite(dt)
            ref_all = round_t(af.double() * s, dt, exact_elementwise(lambda v: v * Fraction(s), af))[0]
            disc = af[~bits_equal(ref_all, (af.float() * torch.tensor(s, dtype=f32)).to(dt))]
            ndisc = disc.numel()
            if ndisc > 512:
                disc = disc[torch.linspace(0, ndisc - 1, 512).round().long()]
            a[N // 2: N // 2 + disc.numel()] = disc
            adesc += (f"; elements {N // 2}..{N // 2 + disc.numel() - 1} are {disc.numel()} (evenly spaced picks of the "
                      f"{ndisc}) finite dt values a for which rne(a * s) != (a.float() * float32(s)).to(dt)")
        if op == "div_scalar2":
            # finite dt values where rne(a / s), (a.float() / float32(s)).to(dt) and
            # (a.float() * (1 / float32(s))).to(dt) do not all agree (evenly spaced, at most 512)
            af = all_finite(dt)
            s32 = torch.tensor(s, dtype=f32)
            c1 = round_t(af.double() / s, dt, exact_elementwise(lambda v: v / Fraction(s), af))[0]
            c2 = (af.float() / s32).to(dt)
            c3 = (af.float() * (1 / s32)).to(dt)
            disc = af[~(bits_equal(c1, c2) & bits_equal(c2, c3))]
            if disc.numel() > 512:
                disc = disc[torch.linspace(0, disc.numel() - 1, 512).round().long()]
            a[N // 2: N // 2 + disc.numel()] = disc
            adesc += (f"; elements {N // 2}..{N // 2 + disc.numel() - 1} are {disc.numel()} finite dt values (evenly spaced "
                      "picks) where rne(a / s), (a.float() / float32(s)).to(dt) and (a.float() * (1 / float32(s))).to(dt) "
                      "do not all agree")
        S.put(f"{op}.a", a, adesc)
        sexpr = {"mul_scalar": "64**-0.5", "mul_scalar2": "80**-0.5", "mul_scalar3": "0.7", "div_scalar": "0.7",
                 "div_scalar2": "0.6"}[op]
        S.put(f"{op}.s", torch.tensor([s], dtype=torch.float64), f"F64; the Python float {sexpr} = {s!r}")
        if kind == "mul":
            out = a * s
            S.put(f"{op}.out", out, f"{op}.a * {sexpr}  (Python float scalar, dt result)")
            S.cmp(f"{op}.out", r(a.double() * s, exact_elementwise(lambda v: v * Fraction(s), a)), "rne(a * s)  (s as float64)")
            s32 = torch.tensor(s, dtype=f32)
            S.cand(f"{op}.out", (a.float() * s32).to(dt), "(a.float() * float32(s)).to(dt)")
        else:
            out = a / s
            S.put(f"{op}.out", out, f"{op}.a / {sexpr}  (Python float scalar, dt result)")
            S.cmp(f"{op}.out", r(a.double() / s, exact_elementwise(lambda v: v / Fraction(s), a)), "rne(a / s)  (s as float64)")
            s32 = torch.tensor(s, dtype=f32)
            S.cand(f"{op}.out", (a.float() / s32).to(dt), "(a.float() / float32(s)).to(dt)")
            S.cand(f"{op}.out", (a.float() * (1.0 / s32)).to(dt), "(a.float() * (1 / float32(s))).to(dt)  [reciprocal in fp32]")
            S.cand(f"{op}.out", (a.float() * torch.tensor(1.0 / s, dtype=f32)).to(dt),
                   "(a.float() * float32(1.0 / s)).to(dt)  [reciprocal in float64, then fp32]")

    # ---- linear ------------------------------------------------------------
    g = gen_for("linear")
    x = randn(g, M, K, scale=2.0).to(dt)
    w = randn(g, NOUT, K, scale=0.05).to(dt)
    b = randn(g, NOUT, scale=0.05).to(dt)
    S.put("linear.x", x, "dt; N(0,2)")
    S.put("linear.w", w, "dt; N(0,0.05)")
    S.put("linear.b", b, "dt; N(0,0.05)")
    S.put("linear.out", F.linear(x, w, b), "F.linear(linear.x, linear.w, linear.b)  (dt)")
    S.put("linear_nobias.out", F.linear(x, w), "F.linear(linear.x, linear.w)  (dt)")
    exact_b = fsum_linear(x, w, b)
    exact_nb = fsum_linear(x, w)
    S.put("linear.out_f64", exact_b, "F64; x @ w.T + b with exact products summed by math.fsum "
          "(= the correctly rounded float64 of the exact value)")
    S.cmp("linear.out", r(exact_b, exact_dot(x, w.T, b)), "rne(exact x@w.T + b)")
    S.cmp("linear_nobias.out", r(exact_nb, exact_dot(x, w.T)), "rne(exact x@w.T)")
    S.cand("linear.out", (x.float() @ w.float().T + b.float()).to(dt), "(x.float() @ w.float().T + b.float()).to(dt)")
    S.cand("linear.out", F.linear(x.float(), w.float(), b.float()).to(dt), "F.linear(x.float(), w.float(), b.float()).to(dt)")
    S.cand("linear.out", r32(exact_b, exact_dot(x, w.T, b))[0].to(dt), "rne_fp32(exact).to(dt)  [round to fp32, then to dt]")
    S.cand("linear_nobias.out", (x.float() @ w.float().T).to(dt), "(x.float() @ w.float().T).to(dt)")

    # ---- layernorm ---------------------------------------------------------
    g = gen_for("layernorm")
    rows = [randn(g, H, scale=2.0),
            randn(g, H, scale=0.01),
            300.0 + randn(g, H, scale=2.0),  # large mean offset
            -50.0 + randn(g, H, scale=10.0),
            randn(g, H, scale=2.0) * torch.where(torch.rand(H, generator=g) < 0.03, 50.0, 1.0),
            torch.full((H,), 1.5),  # constant row: variance 0, output = b
            randn(g, H, scale=1.0) + 3.0]
    x = torch.stack(rows).to(dt)
    w = (1.0 + randn(g, H, scale=0.1)).to(dt)
    b = randn(g, H, scale=0.05).to(dt)
    eps = 1e-5
    S.put("layernorm.x", x, "dt [M,H]; rows: N(0,2); N(0,0.01); 300+N(0,2); -50+N(0,10); N(0,2) with 3% x50 outliers; constant 1.5; 3+N(0,1)")
    S.put("layernorm.w", w, "dt; 1 + N(0,0.1)")
    S.put("layernorm.b", b, "dt; N(0,0.05)")
    S.put("layernorm.eps", torch.tensor([eps], dtype=torch.float64), "F64; 1e-5")
    S.put("layernorm.out", F.layer_norm(x, (H,), w, b, eps), "F.layer_norm(x, (H,), w, b, eps)  (dt)")
    ref = flat(mp_layernorm(x, w, b, eps))
    S.cmp("layernorm.out", mp_to_tensor(ref, x.shape, dt), "rne(exact layer_norm)")
    xf = x.float()
    mu = xf.mean(-1, keepdim=True)
    var = ((xf - mu) ** 2).mean(-1, keepdim=True)
    S.cand("layernorm.out", ((xf - mu) * torch.rsqrt(var + eps) * w.float() + b.float()).to(dt),
           "fp32 two-pass: ((x-mean)*rsqrt(var+eps)*w + b).to(dt)")
    S.cand("layernorm.out", F.layer_norm(xf, (H,), w.float(), b.float(), eps).to(dt),
           "F.layer_norm(x.float(), ..., w.float(), b.float()).to(dt)")

    # ---- rmsnorm (LlamaRMSNorm) --------------------------------------------
    g = gen_for("rmsnorm")
    rows = [randn(g, H, scale=2.0), randn(g, H, scale=0.01), 300.0 + randn(g, H, scale=2.0),
            randn(g, H, scale=30.0),
            randn(g, H, scale=2.0) * torch.where(torch.rand(H, generator=g) < 0.03, 50.0, 1.0),
            torch.full((H,), 1.5), randn(g, H, scale=1.0)]
    x = torch.stack(rows).to(dt)
    w = (1.0 + randn(g, H, scale=0.1)).to(dt)
    eps = 1e-6
    mod = llama.LlamaRMSNorm(H, eps=eps).to(dt)
    with torch.no_grad():
        mod.weight.copy_(w)
    out = mod(x)
    assert out.dtype == dt
    normed = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(dt)
    assert bool(bits_equal(out, w * normed).all()), "LlamaRMSNorm != w * normed"
    S.put("rmsnorm.x", x, "dt [M,H]; rows: N(0,2); N(0,0.01); 300+N(0,2); N(0,30); N(0,2) with 3% x50 outliers; constant 1.5; N(0,1)")
    S.put("rmsnorm.w", w, "dt; 1 + N(0,0.1)")
    S.put("rmsnorm.eps", torch.tensor([eps], dtype=torch.float64), "F64; 1e-6")
    S.put("rmsnorm.out", out, "transformers LlamaRMSNorm(H, eps).to(dt) with weight=w, applied to x  "
          "(= w * normed, dt * dt)")
    S.put("rmsnorm.normed", normed, "(x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(dt)")
    xd = x.double()
    nref = flat(mp_rms_normed(x, eps))
    zs = [math.copysign(1.0, v) for v in xd.reshape(-1).tolist()]
    normed_rne = mp_to_tensor(nref, x.shape, dt, zs)
    S.cmp("rmsnorm.normed", normed_rne, "rne(exact x / sqrt(mean(x^2)+eps))")
    S.cmp("rmsnorm.out", r(w.double() * normed.double(), "f64"), "rne(w * rmsnorm.normed)  [2nd rounding only]")
    S.cmp("rmsnorm.out", r(w.double() * normed_rne.double(), "f64"),
          "rne(w * rne(exact normed))  [both roundings from the exact value]")
    S.cand("rmsnorm.normed", (x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(dt),
           "(x.float() / torch.sqrt(mean(x^2)+eps)).to(dt)  [division instead of * rsqrt]")
    ms = torch.tensor([[math.fsum(v * v for v in row) / H] for row in x.double().tolist()], dtype=torch.float64).float()
    S.cand("rmsnorm.normed", (x.float() * torch.rsqrt(ms + eps)).to(dt),
           "(x.float() * rsqrt(rne_fp32(exact mean(x^2)) + eps)).to(dt)  [exact mean of squares]")
    rs = torch.from_numpy(round_np((1.0 / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True).double() + np.float32(eps).item())).numpy(), f32)[0]).float()
    S.cand("rmsnorm.normed", (x.float() * rs).to(dt),
           "(x.float() * rne_fp32(1/sqrt(fp32 var + eps))).to(dt)  [correctly rounded rsqrt]")

    # ---- softmax -----------------------------------------------------------
    g = gen_for("softmax")
    fmin = float(torch.finfo(dt).min)
    rows = [randn(g, T_SM, scale=2.0),
            torch.where(torch.arange(T_SM) > 40, torch.tensor(fmin), randn(g, T_SM, scale=2.0)),  # causal-mask-like
            500.0 + randn(g, T_SM, scale=20.0),  # large values
            torch.where(torch.arange(T_SM) > 0, torch.tensor(fmin), torch.tensor(0.3)),  # only col 0 visible
            randn(g, T_SM, scale=0.1),
            randn(g, T_SM, scale=8.0),
            torch.full((T_SM,), 3.0)]
    x = torch.stack(rows).to(dt)
    S.put("softmax.x", x, "dt [M,T]; rows: N(0,2); N(0,2) with cols>40 = finfo(dt).min (causal mask); 500+N(0,20); "
          "0.3 then finfo(dt).min; N(0,0.1); N(0,8); constant 3")
    o32 = F.softmax(x, dim=-1, dtype=torch.float32)
    S.put("softmax.out_f32", o32, "F32; F.softmax(x, dim=-1, dtype=torch.float32)")
    S.put("softmax.out", o32.to(dt), "F.softmax(x, dim=-1, dtype=torch.float32).to(dt)  (eager attention)")
    S.put("softmax_native.out", F.softmax(x, dim=-1), "F.softmax(x, dim=-1) with x in dt (dt result)")
    sref = flat(mp_softmax(x))
    S.put("softmax.exact_f32", mp_to_tensor(sref, x.shape, f32),
          "F32; rne_fp32(exact softmax of softmax.x) (mpmath): the yardstick of the fp32 outputs")
    S.cmp("softmax.out_f32", mp_to_tensor(sref, x.shape, f32), "rne_fp32(exact softmax)")
    S.cmp("softmax.out", mp_to_tensor(sref, x.shape, dt), "rne(exact softmax)  [torch rounds twice: fp32 then dt]")
    S.cmp("softmax.out", r(o32.double(), "f64"), "rne(softmax.out_f32)  [the final cast only]")
    S.cmp("softmax_native.out", mp_to_tensor(sref, x.shape, dt), "rne(exact softmax)")
    S.cand("softmax_native.out", o32.to(dt), "F.softmax(x, dtype=float32).to(dt)")
    xf = x.float()
    e = torch.exp(xf - xf.max(-1, keepdim=True).values)
    S.cand("softmax.out_f32", e / e.sum(-1, keepdim=True), "fp32 exp(x-max) / sum  (torch.sum order)")
    S.cand("softmax.out_f32", e * (1.0 / e.sum(-1, keepdim=True)), "fp32 exp(x-max) * (1/sum)")

    # ---- gelu / silu -------------------------------------------------------
    g = gen_for("gelu")
    x = randn(g, N, scale=2.0)
    x[: N // 4] *= 3.0
    x[N // 4: N // 2] *= 0.01
    x = x.to(dt)
    tail = unary_tail_inputs(dt)
    x[N - tail.numel():] = tail
    S.put("gelu.x", x, f"dt; N(0,2), a quarter x3, a quarter x0.01; the last {NTAIL} are dtype-specific: "
          "+-0, subnormals, +-smallest normal, x in [-20,-5], large and max finite values, then values "
          "picked (evenly spaced) from the finite dt inputs |x| < 20 where torch's gelu/gelu_tanh/silu are not correctly rounded")
    S.put("gelu.out", F.gelu(x), "F.gelu(gelu.x)  (exact erf, dt)")
    S.put("gelu_tanh.out", F.gelu(x, approximate="tanh"), "F.gelu(gelu.x, approximate='tanh')  (dt)")
    S.put("silu.out", F.silu(x), "F.silu(gelu.x)  (dt)")
    for name, (t, expr) in gelu_cuda_formula(x).items():
        S.put(name, t, expr)
    xd = x.double()
    S.cmp("gelu.out", unary_ref("gelu", x, dt), "rne(exact x * Phi(x))")
    S.cmp("gelu_tanh.out", unary_ref("gelu_tanh", x, dt), "rne(exact 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))))")
    S.cmp("silu.out", unary_ref("silu", x, dt), "rne(exact x / (1 + exp(-x)))")
    S.cand("gelu.out", F.gelu(x.float()).to(dt), "F.gelu(x.float()).to(dt)")
    S.cand("gelu_tanh.out", F.gelu(x.float(), approximate="tanh").to(dt), "F.gelu(x.float(), 'tanh').to(dt)")
    S.cand("silu.out", F.silu(x.float()).to(dt), "F.silu(x.float()).to(dt)")
    S.cand("gelu.out", unary_ref("gelu", x, f32).to(dt), "rne_fp32(exact gelu).to(dt)  [double rounding of the exact value]")
    S.cand("silu.out", unary_ref("silu", x, f32).to(dt), "rne_fp32(exact silu).to(dt)  [double rounding of the exact value]")

    # ---- silu(g) * u -------------------------------------------------------
    g_ = gen_for("silu_mul")
    gg = randn(g_, N, scale=2.0).to(dt)
    uu = randn(g_, N, scale=2.0).to(dt)
    S.put("silu_mul.g", gg, "dt; N(0,2)")
    S.put("silu_mul.u", uu, "dt; N(0,2)")
    sg = F.silu(gg)
    S.put("silu_mul.out", sg * uu, "F.silu(g) * u  (two dt roundings, as LlamaMLP)")
    S.cmp("silu_mul.out", r(sg.double() * uu.double(), "f64"), "rne(F.silu(g) * u)  [2nd rounding only]")
    S.cmp("silu_mul.out", r(unary_ref("silu", gg, dt).double() * uu.double(), "f64"),
          "rne(rne(exact silu(g)) * u)  [both roundings from the exact value]")

    # ---- rope (Llama, transformers) ----------------------------------------
    g = gen_for("rope")
    q = randn(g, T, D, scale=2.0).to(dt)
    pos = (100 + torch.randperm(T, generator=g)).to(torch.int32)
    cfg = transformers.LlamaConfig(hidden_size=D, num_attention_heads=1, num_key_value_heads=1, head_dim=D,
                                   intermediate_size=2 * D, num_hidden_layers=1, vocab_size=16,
                                   max_position_embeddings=256,
                                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    remb = llama.LlamaRotaryEmbedding(cfg)
    base = 10000.0
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
    assert bool(bits_equal(remb.inv_freq, inv_freq).all()), "LlamaRotaryEmbedding.inv_freq differs"
    cos_t, sin_t = remb(q[None], pos[None].long())  # [1, T, D] in dt
    freqs = (inv_freq[None, :, None].float() @ pos[None, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(dt), emb.sin().to(dt)
    assert bool(bits_equal(cos_t, cos).all()) and bool(bits_equal(sin_t, sin).all()), "RoPE cos/sin mismatch"
    out_t = llama.apply_rotary_pos_emb(q[None, None], q[None, None], cos_t, sin_t)[0][0, 0]
    assert out_t.dtype == dt
    manual = q * cos[0] + llama.rotate_half(q) * sin[0]
    assert bool(bits_equal(out_t, manual).all())
    S.put("rope.q", q, "dt [T,d]; N(0,2)")
    S.put("rope.pos", pos, "I32 [T]; a permutation of 100..139")
    S.put("rope.inv_freq", inv_freq, "F32 [d/2]; 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d)) "
          "(== LlamaRotaryEmbedding(cfg).inv_freq, checked)")
    S.put("rope.cos", cos[0], "dt [T,d]; emb = cat(f, f), f = (inv_freq[None,:,None] @ pos[None,None,:].float()).transpose(1,2) "
          "(fp32); emb.cos().to(dt)  (== LlamaRotaryEmbedding(cfg)(q, pos) [0], checked)")
    S.put("rope.sin", sin[0], "dt [T,d]; emb.sin().to(dt), as rope.cos")
    S.put("rope.out", out_t, "transformers.models.llama.modeling_llama.apply_rotary_pos_emb(q, q, cos, sin)[0] "
          "= (q * cos) + (rotate_half(q) * sin), all dt (three dt roundings)")
    emb32 = emb[0].double()  # torch's fp32 arguments, exactly
    args32 = [mpmath.mpf(v) for v in emb32.reshape(-1).tolist()]
    cos_mp = [mpmath.cos(v) for v in args32]
    sin_mp = [mpmath.sin(v) for v in args32]
    S.cmp("rope.cos", mp_to_tensor(cos_mp, emb32.shape, dt), "rne(cos(fp32 argument pos*inv_freq))")
    S.cmp("rope.sin", mp_to_tensor(sin_mp, emb32.shape, dt), "rne(sin(fp32 argument pos*inv_freq))")
    exact_arg = pos.double()[:, None] * torch.cat([inv_freq, inv_freq]).double()[None, :]
    S.cmp("rope.cos", mp_to_tensor([mpmath.cos(mpmath.mpf(v)) for v in exact_arg.reshape(-1).tolist()], emb32.shape, dt),
          "rne(cos(pos * inv_freq, exact product))  [argument not rounded to fp32]")
    S.cand("rope.cos", mp_to_tensor(cos_mp, emb32.shape, f32).to(dt), "rne_fp32(cos(fp32 arg)).to(dt)  [correctly rounded fp32 cos, then dt]")
    S.cand("rope.sin", mp_to_tensor(sin_mp, emb32.shape, f32).to(dt), "rne_fp32(sin(fp32 arg)).to(dt)  [correctly rounded fp32 sin, then dt]")
    qd, cd, sd = q.double(), cos[0].double(), sin[0].double()
    rhd = llama.rotate_half(q).double()
    p1, p2 = r(qd * cd, "f64")[0], r(rhd * sd, "f64")[0]
    S.cmp("rope.out", r(p1.double() + p2.double(), exact_elementwise(operator.add, p1, p2)),
          "rne(rne(q*cos) + rne(rot(q)*sin))  [the three roundings torch does]")
    S.cmp("rope.out", r(qd * cd + rhd * sd, exact_elementwise(lambda a_, b_, c_, d_: a_ * b_ + c_ * d_, qd, cd, rhd, sd)),
          "rne(q*cos + rot(q)*sin)  [one rounding: NOT what torch computes]")
    cos32 = torch.cos(emb[0])
    S.cand("rope.cos", cos32.to(dt), "emb[0].cos().to(dt) on the [T,d] tensor")

    # ---- rope_f32 (GPT-NeoX, transformers 4.40 style, partial rotary) -----
    inv16 = 1.0 / (base ** (torch.arange(0, ROT_DIM, 2, dtype=torch.int64).float() / ROT_DIM))
    tt = torch.arange(NEOX_MAX_POS, dtype=torch.int64).type_as(inv16)
    fr = torch.outer(tt, inv16)
    embn = torch.cat((fr, fr), dim=-1)
    cos_cache, sin_cache = embn.cos(), embn.sin()  # fp32, not cast (4.40 GPTNeoXRotaryEmbedding)
    cn, sn = cos_cache[pos.long()], sin_cache[pos.long()]  # [T, 16] fp32
    q_rot, q_pass = q[..., :ROT_DIM], q[..., ROT_DIM:]
    q_emb = llama.apply_rotary_pos_emb(q_rot[None, None], q_rot[None, None], cn[None], sn[None])[0][0, 0]
    assert q_emb.dtype == torch.float32
    out_f32 = torch.cat((q_emb, q_pass), dim=-1)
    assert out_f32.dtype == torch.float32
    S.put("rope_f32.inv_freq", inv16, "F32 [rotary_dim/2=8]; 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.int64).float() / 16))")
    S.put("rope_f32.cos", cn, "F32 [T,16]; cos_cached[pos] with cos_cached = cat(f,f).cos(), f = torch.outer(torch.arange(2048).float(), inv_freq) "
          "(GPTNeoXRotaryEmbedding of transformers 4.40, not cast to dt)")
    S.put("rope_f32.sin", sn, "F32 [T,16]; sin_cached[pos], as rope_f32.cos")
    S.put("rope_f32.out", out_f32, "F32 [T,d]; cat(q_rot * cos + rotate_half(q_rot) * sin, q_pass) with q = rope.q (dt), "
          "q_rot = q[:, :16], q_pass = q[:, 16:], cos/sin fp32 -> type promotion gives fp32")
    cnd, snd = cn.double(), sn.double()
    qrd, rrd = q_rot.double(), llama.rotate_half(q_rot).double()
    p1, p2 = r32(qrd * cnd, "f64")[0], r32(rrd * snd, "f64")[0]
    stage = r32(p1.double() + p2.double(), exact_elementwise(operator.add, p1, p2))[0]
    S.cmp("rope_f32.out", (torch.cat((stage, q_pass.float()), -1), ""),
          "rne32(rne32(q*cos) + rne32(rot(q)*sin))  [the three fp32 roundings torch does]")
    one = r32(qrd * cnd + rrd * snd, exact_elementwise(lambda a_, b_, c_, d_: a_ * b_ + c_ * d_, qrd, cnd, rrd, snd))[0]
    S.cmp("rope_f32.out", (torch.cat((one, q_pass.float()), -1), ""),
          "rne32(q*cos + rot(q)*sin)  [one rounding]")
    S.cand("rope_f32.cos", torch.cos(embn[pos.long()]), "cos of the gathered [T,16] arguments (vs cos over the [2048,16] cache)")
    an = [mpmath.mpf(v) for v in embn[pos.long()].reshape(-1).tolist()]
    S.cand("rope_f32.cos", mp_to_tensor([mpmath.cos(v) for v in an], cn.shape, f32), "rne_fp32(cos(fp32 arg))  [correctly rounded fp32 cos]")
    S.cand("rope_f32.sin", mp_to_tensor([mpmath.sin(v) for v in an], sn.shape, f32), "rne_fp32(sin(fp32 arg))  [correctly rounded fp32 sin]")

    # ---- log-softmax ------------------------------------------------------
    g = gen_for("logsoftmax")
    x = randn(g, M, V, scale=3.0)
    hot = torch.randint(0, V, (M, 3), generator=g)
    x.scatter_(1, hot, 15.0 + randn(g, M, 3, scale=3.0))
    x = x.to(dt)
    S.put("logsoftmax.x", x, "dt [M,V]; N(0,3) with 3 entries per row set to 15+N(0,3)")
    ls32 = F.log_softmax(x.float(), -1)
    S.put("logsoftmax.out_f32", ls32, "F32; F.log_softmax(x.float(), -1)")
    S.put("logsoftmax.out", F.log_softmax(x, -1), "F.log_softmax(x, -1) with x in dt (dt result)")
    lref = flat(mp_softmax(x, log=True))
    S.cmp("logsoftmax.out_f32", mp_to_tensor(lref, x.shape, f32), "rne_fp32(exact log_softmax)")
    S.cmp("logsoftmax.out", mp_to_tensor(lref, x.shape, dt), "rne(exact log_softmax)")
    S.cand("logsoftmax.out", ls32.to(dt), "F.log_softmax(x.float(), -1).to(dt)")
    xf = x.float()
    mx = xf.max(-1, keepdim=True).values
    S.cand("logsoftmax.out_f32", (xf - mx) - torch.log(torch.exp(xf - mx).sum(-1, keepdim=True)),
           "fp32 (x - max) - log(sum(exp(x - max)))  (torch.sum order)")

    # ---- matmul * scale ---------------------------------------------------
    g = gen_for("matmul_scale")
    q = randn(g, T, D, scale=2.0).to(dt)
    k = randn(g, T, D, scale=2.0).to(dt)
    scale = D ** -0.5
    S.put("matmul_scale.q", q, "dt [T,d]; N(0,2)")
    S.put("matmul_scale.k", k, "dt [T,d]; N(0,2)")
    S.put("matmul_scale.out", (q @ k.T) * scale, "(q @ k.T) * d**-0.5  (dt matmul, then dt * Python float; two roundings)")
    S.put("matmul_scale.out_f32", (q.float() @ k.float().T) * scale, "F32; (q.float() @ k.float().T) * d**-0.5")
    qk = fsum_matmul(q, k.T)
    qk_r = r(qk, exact_dot(q, k.T))[0]
    S.cmp("matmul_scale.out", r(qk_r.double() * scale, exact_elementwise(lambda v: v * Fraction(scale), qk_r)),
          "rne(rne(exact q@k.T) * scale)")
    S.cmp("matmul_scale.out_f32", r32(qk * scale, exact_dot(q, k.T, scale=scale)), "rne_fp32(exact q@k.T * scale)")
    S.cand("matmul_scale.out", ((q.float() @ k.float().T).to(dt).float() * scale).to(dt), "((q.float() @ k.float().T).to(dt) * scale).to(dt)")

    # ---- p @ v -------------------------------------------------------------
    g = gen_for("pv")
    logits = randn(g, T, T, scale=2.0)
    logits = logits.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), -math.inf)
    p = F.softmax(logits, -1).to(dt)
    v = randn(g, T, D, scale=2.0).to(dt)
    S.put("pv.p", p, "dt [T,T]; softmax(N(0,2) logits, causal) rounded to dt; exact zeros above the diagonal")
    S.put("pv.v", v, "dt [T,d]; N(0,2)")
    S.put("pv.out", p @ v, "pv.p @ pv.v  (dt)")
    S.cmp("pv.out", r(fsum_matmul(p, v), exact_dot(p, v)), "rne(exact p@v)")
    S.cand("pv.out", (p.float() @ v.float()).to(dt), "(p.float() @ v.float()).to(dt)")

    exhaustive(S)
    S.mark()  # everything below: ALiBi, NormHead, clip_qkv (README section of their own)
    build_positions(S)
    return S


# --------------------------------------------------------------------------
# ALiBi (BLOOM, Baichuan-13B, MPT), NormHead (Baichuan2), clip_qkv (MPT)
# --------------------------------------------------------------------------

ALIBI_HEADS = (4, 6, 12, 32, 40, 64, 112)  # slope tables (32: bloom-7b1, 112: bloom)
MPT_BIAS_MAX = (8, 12)
SC_H, SC_TQ, SC_TK = 12, 8, 40  # scores: heads, query rows, keys
SC_KV_OFF = 3000  # the far case: keys 3000.. of a 3040-key context (MPT: keys 0.. of it)
MPT_MAX_SEQ_LEN = 4096  # config.max_seq_len: length of MPT's position-bias table
SC_CASES = (("exact", 16), ("exact", 128), ("randn", 128), ("split", 128))  # (q/k kind, head_dim)
SPLIT_POOL = 100000  # candidate q rows for the "split" case
NH_EPS = 1e-12  # F.normalize's default eps


def baichuan_slopes(n):
    """Baichuan-13B's `_get_interleave(n)` (modeling_baichuan.py of baichuan-inc/Baichuan-13B-Base),
    re-written here (transformers has no Baichuan class): Python floats, start * ratio**i with
    start = ratio = 2**-(8/p) for the largest power of two p <= n, then every other value of the
    list for 2p (start = ratio = 2**-(4/p)) for the remaining n - p heads."""
    def pow2_list(m):
        start = 2 ** (-(2 ** -(math.log2(m) - 3)))
        return [start * start ** i for i in range(m)]
    if math.log2(n).is_integer():
        return pow2_list(n)
    p = 2 ** math.floor(math.log2(n))
    return pow2_list(p) + baichuan_slopes(2 * p)[0::2][: n - p]


def baichuan_alibi_mask(n_head, rows, cols, dt):
    """Rows `rows` x columns `cols` (int64 positions) of Baichuan-13B's future mask as its
    BaichuanModel.get_alibi_mask hands it to the layers in eval mode: `_gen_alibi_mask(n_head,
    max_pos)` = triu(-inf, diagonal 1) (fp32) + slopes[h] * arange(max_pos) (fp32 slopes from
    `torch.Tensor(_get_interleave(n_head))` times the int64 positions), then `.to(tensor)` (the
    model dtype) and sliced. Each element only depends on (h, row, col), so the [n_head, max_pos,
    max_pos] tensor (max_pos = model_max_length = 4096 upstream) is not built here."""
    slopes = torch.tensor(baichuan_slopes(n_head), dtype=torch.float32)  # torch.Tensor(list): fp32
    alibi = slopes[:, None, None] * cols[None, None, :]  # fp32 * int64 -> fp32, [H, 1, C]
    future = torch.zeros(len(rows), len(cols)).masked_fill(cols[None, :] > rows[:, None], float("-inf"))
    return (future[None] + alibi).to(dt)


def exact_dot_inputs(g, *shape):
    """N(0,1) draws rounded to 3 significant bits, |x| < 1/4 set to 0, clamped to +-3.5: products
    are multiples of 2^-8 below 2^4, so any sum of up to 128 of them (< 2^11, 19 bits) is exact in
    fp32 and the fp32 q.k does not depend on the summation order of the GEMM."""
    x = torch.randn(*shape, generator=g, dtype=torch.float64)
    m, e = torch.frexp(x)
    x = torch.ldexp(torch.round(m * 8) / 8, e)
    x = torch.where(x.abs() < 0.25, torch.zeros_like(x), x).clamp(-3.5, 3.5)
    return x.float()


def split_inputs(g, dt, d):
    """BLOOM only: q, k of exact_dot_inputs with the q rows of each head picked from SPLIT_POOL draws
    so that, with BLOOM's biases of keys 0..39, as many scores as possible differ between
    R(R32(R32(q.k * alpha) + bias)) (two fp32 roundings) and R(R32(q.k * alpha + bias)) (an fp32
    FMA): which of the two baddbmm computes is then visible. q.k * f32(alpha) and its sum with a
    bias are exact in float64 (19 + 24 bits, then < 2^7 with lsb 2^-35)."""
    k = exact_dot_inputs(g, SC_TK, d)
    pool = exact_dot_inputs(g, SPLIT_POOL, d).double()
    a32 = float(torch.tensor(1.0 / math.sqrt(d), dtype=torch.float32))
    x = (pool @ k.double().T) * a32  # exact
    slopes = bloom._get_alibi_slopes(SC_H, torch.device("cpu"))
    bias = (slopes[:, None] * torch.arange(SC_TK)).to(dt).double()  # [H, TK], BLOOM's off0 biases
    rows = []
    for h in range(SC_H):
        two = (x.float().double() + bias[h]).float().to(dt)
        fma = (x + bias[h]).float().to(dt)
        disc = (~bits_equal(two, fma)).sum(1)
        idx = torch.sort(disc, descending=True, stable=True).indices[:SC_TQ]
        rows.append(pool[idx])
    return torch.stack(rows).float().to(dt), k.to(dt)


def score_layout(fam, off):
    """(query positions, key positions, kv length, the integer each key's slope is multiplied by)."""
    if off == 0:
        kv = SC_TK
        keys = torch.arange(SC_TK)
    else:
        kv = SC_KV_OFF + SC_TK
        keys = torch.arange(SC_TK) if fam == "mpt" else torch.arange(SC_KV_OFF, kv)
    queries = torch.arange(kv - SC_TQ, kv)
    dist = keys - (kv - 1) if fam == "mpt" else keys  # MPT: distance to the last key; else the key position
    return queries, keys, kv, dist


def build_positions(S):
    dt = S.dt
    f32 = torch.float32

    def r(x64, exact=None):
        return round_t(x64, dt, exact)

    def r32(x64, exact=None):
        return round_t(x64, f32, exact)

    # ---- ALiBi slopes -------------------------------------------------------
    try:  # the Baichuan reference model of tools/, when present: the same slopes
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import baichuan_ref  # noqa: PLC0415
        ref_slopes = getattr(baichuan_ref, "alibi_slopes", None)
    except ImportError:
        ref_slopes = None
    for n in ALIBI_HEADS:
        n2 = 2 ** math.floor(math.log2(n))
        exps = [-(8.0 / n2) * (h + 1) if h < n2 else -(4.0 / n2) * (2 * (h - n2) + 1) for h in range(n)]
        exact = mp_to_tensor([mpmath.mpf(2) ** mpmath.mpf(e) for e in exps], (n,), f32)
        s_b = bloom._get_alibi_slopes(n, torch.device("cpu"))
        assert s_b.dtype == f32
        S.put(f"alibi_slopes.bloom.h{n}", s_b, f"F32 [{n}]; transformers.models.bloom.modeling_bloom._get_alibi_slopes({n}) "
              "(torch.pow(fp32 base, int32 powers))")
        bases = [float(torch.tensor(2.0 ** e0, dtype=f32)) for e0 in (-8.0 / n2, -4.0 / n2)]
        pw = [(bases[0], h + 1) if h < n2 else (bases[1], 2 * (h - n2) + 1) for h in range(n)]
        S.cmp(f"alibi_slopes.bloom.h{n}", mp_to_tensor([mpmath.mpf(b0) ** k0 for b0, k0 in pw], (n,), f32),
              "rne_fp32(f32(base)^k)  [torch.pow correctly rounded]")
        S.cand(f"alibi_slopes.bloom.h{n}", exact, "rne_fp32(2^(-8k/n2)), extra heads 2^(-4k/n2), k odd  [exact slopes]")
        one_by_one = torch.stack([torch.pow(torch.full((), b0, dtype=f32), torch.tensor([k0], dtype=torch.int32))[0]
                                  for b0, k0 in pw])
        S.cand(f"alibi_slopes.bloom.h{n}", one_by_one, "torch.pow one power at a time  [ATen's scalar path, std::pow]")
        S.put(f"alibi_slopes.bloom.h{n}.scalar", one_by_one,
              f"F32 [{n}]; torch.pow(fp32 base, int32 power) one power at a time (ATen's scalar path, std::pow)")
        py = baichuan_slopes(n)
        if ref_slopes is not None:
            assert ref_slopes(n) == py, f"tools/baichuan_ref.alibi_slopes({n}) differs"
        s_c = torch.tensor(py, dtype=f32)
        S.put(f"alibi_slopes.baichuan.h{n}", s_c, f"F32 [{n}]; Baichuan-13B: torch.Tensor(_get_interleave({n})) "
              "(Python floats start * ratio**i, rounded once to fp32)")
        S.cmp(f"alibi_slopes.baichuan.h{n}", exact, "rne_fp32(2^(-8k/n2)), extra heads 2^(-4k/n2), k odd  [exact slopes]")
        S.cand(f"alibi_slopes.bloom.h{n}", s_c, "Baichuan-13B's slopes (alibi_slopes.baichuan)")
        for bmax in MPT_BIAS_MAX:
            tab = mpt.build_mpt_alibi_tensor(n, 2, bmax)  # [n, 1, 2]: slope * (-1), slope * 0
            assert tab.dtype == f32 and tab.shape == (n, 1, 2) and bool((tab[:, 0, 1] == 0).all())
            s_m = -tab[:, 0, 0]  # exact
            S.put(f"alibi_slopes.mpt.h{n}.max{bmax}", s_m,
                  f"F32 [{n}]; -build_mpt_alibi_tensor({n}, 2, alibi_bias_max={bmax})[:, 0, 0] "
                  "(transformers.models.mpt.modeling_mpt: 1.0 / torch.pow(2, arange(1, n2+1).float() * (max / n2)), "
                  "odd-then-even heads when n is not a power of two)")
            n2m = 2 ** math.ceil(math.log2(n))
            ks = list(range(1, n2m + 1))
            if n2m != n:
                ks = (ks[1::2] + ks[0::2])[:n]
            basef = [float(torch.tensor(k, dtype=f32) * torch.tensor(bmax / n2m, dtype=f32)) for k in ks]
            p2 = [rne_mp(mpmath.mpf(2) ** mpmath.mpf(b0), f32) for b0 in basef]  # correctly rounded torch.pow
            S.cmp(f"alibi_slopes.mpt.h{n}.max{bmax}", mp_to_tensor([1 / mpmath.mpf(v) for v in p2], (n,), f32),
                  "rne_fp32(1 / rne_fp32(2^base)), base = f32(k) * f32(max/n2)  [torch.pow correctly rounded]")
            S.cand(f"alibi_slopes.mpt.h{n}.max{bmax}",
                   mp_to_tensor([1 / mpmath.mpf(2) ** mpmath.mpf(b0) for b0 in basef], (n,), f32),
                   "rne_fp32(2^-base)  [one rounding]")
            p1 = torch.stack([torch.pow(2, torch.tensor([b0], dtype=f32))[0] for b0 in basef])
            S.cand(f"alibi_slopes.mpt.h{n}.max{bmax}", 1.0 / p1,
                   "1.0 / torch.pow(2, base) one power at a time  [ATen's scalar path, std::pow]")
            S.put(f"alibi_slopes.mpt.h{n}.max{bmax}.scalar", 1.0 / p1,
                  f"F32 [{n}]; 1.0 / torch.pow(2, base) one power at a time (ATen's scalar path, std::pow)")

    # ---- attention scores with ALiBi, as each family's code forms them ---------
    H = SC_H
    for kind, d in SC_CASES:
        g = gen_for(f"alibi_scores.{kind}.d{d}")
        if kind == "exact":
            q, k = exact_dot_inputs(g, H, SC_TQ, d).to(dt), exact_dot_inputs(g, SC_TK, d).to(dt)
        elif kind == "split":
            q, k = split_inputs(g, dt, d)
        else:
            q, k = randn(g, H, SC_TQ, d).to(dt), randn(g, SC_TK, d).to(dt)
        pre = f"alibi_scores.{kind}.d{d}"
        kdesc = {"exact": "N(0,1) rounded to 3 significant bits, |x| < 1/4 -> 0, clamped to +-3.5 (every fp32 q.k is "
                          "exact, whatever the GEMM's summation order)",
                 "randn": "N(0,1)",
                 "split": f"as the exact case; the q rows of each head are the {SC_TQ} of {SPLIT_POOL} draws on whose "
                          "scores with BLOOM's biases (keys 0..39) R(R32(R32(q.k * alpha) + bias)) and "
                          "R(R32(q.k * alpha + bias)) differ most often (picked per dtype)"}[kind]
        S.put(f"{pre}.q", q, f"dt [{H},{SC_TQ},{d}] (heads, query rows, head_dim); {kdesc}")
        S.put(f"{pre}.k", k, f"dt [{SC_TK},{d}] (keys, head_dim), the same keys for every head; {kdesc}")
        kh = k[None].expand(H, SC_TK, d).contiguous()
        qk_ex = torch.stack([fsum_matmul(q[h], k.T) for h in range(H)])  # exact for "exact", else correctly rounded f64
        exd = [exact_dot(q[h], k.T) for h in range(H)]
        per = SC_TQ * SC_TK

        def ex_dot(i, exd=exd, per=per):
            return exd[i // per](i % per)

        if kind != "randn":
            assert bool((torch.matmul(q.float(), kh.float().transpose(1, 2)).double() == qk_ex).all())
        else:  # torch's q.k in dt (Baichuan's and MPT's first rounding), to check the rest of the rule alone
            S.put(f"{pre}.qk", torch.matmul(q, kh.transpose(-1, -2)), f"dt [{H},{SC_TQ},{SC_TK}]; torch.matmul(q, k^T)")
            S.cmp(f"{pre}.qk", r(qk_ex, ex_dot), "rne(exact q.k)")
        qk32 = r32(qk_ex, ex_dot)[0]  # rne_fp32(exact q.k): what an fp32 accumulation gives when exact
        qk_dt = r(qk_ex, ex_dot)[0]
        for fam in ("bloom",) if kind == "split" else ("bloom", "baichuan", "mpt"):
            for off in (0,) if kind == "split" else (0, SC_KV_OFF):
                queries, keys, kv, dist = score_layout(fam, off)
                name = f"alibi_scores.{fam}.{kind}.d{d}.off{off}"
                dn = f"alibi_scores.{fam}.off{off}.dist"
                if dn not in S.tensors:
                    S.put(dn, dist.to(torch.int32), f"I32 [{SC_TK}]; the integer the slope of key j is multiplied by: "
                          + ("the key's distance to the last of the kv = %d keys (keys are cache positions %d..%d)"
                             % (kv, int(keys[0]), int(keys[-1])) if fam == "mpt" else
                             "the key's position %d..%d (kv = %d keys)" % (int(keys[0]), int(keys[-1]), kv)))
                if fam == "bloom":
                    cfg = transformers.BloomConfig(hidden_size=H * d, n_head=H)
                    att = bloom.BloomAttention(cfg, layer_idx=0)
                    slopes = bloom._get_alibi_slopes(H, torch.device("cpu"))
                    alibi = bloom.build_alibi_tensor(torch.ones(1, kv, dtype=torch.long), H, dt)  # [H, 1, kv]
                    direct = (slopes[:, None, None] * torch.arange(kv)).to(dt)  # BloomModel without a mask
                    assert bool(bits_equal(alibi, direct).all())
                    bias = alibi[:, :, keys]
                    out = bias.baddbmm(batch1=q, batch2=kh.transpose(-1, -2), beta=att.beta, alpha=att.inv_norm_factor)
                    assert out.dtype == dt
                    S.put(name, out, f"dt [{H},{SC_TQ},{SC_TK}]; BLOOM: build_alibi_tensor(ones(1, {kv}), {H}, dt)"
                          f"[..., keys].baddbmm(batch1=q, batch2=k^T, beta=1.0, alpha=BloomAttention.inv_norm_factor "
                          f"= 1/math.sqrt({d})); bias = R(fp32 slope * position)")
                    if f"alibi_scores.bloom.d{d}.alpha" not in S.tensors:
                        S.put(f"alibi_scores.bloom.d{d}.alpha", torch.tensor([att.inv_norm_factor], dtype=torch.float64),
                              f"F64; BloomAttention.inv_norm_factor = 1.0 / math.sqrt({d})")
                    a32 = torch.tensor(att.inv_norm_factor, dtype=f32)
                    rule = ((qk32 * a32) + bias.float()).to(dt)
                    S.cmp(name, (rule, ""), "rne(rne32(rne32(q.k) * f32(alpha)) + bias)  [the C rule, fp32 q.k correctly rounded]")
                    fb = bias.double().expand(H, SC_TQ, SC_TK)
                    one = r(qk_ex * float(a32) + fb, (lambda i, fb=fb.reshape(-1).tolist(), a=Fraction(float(a32)):
                                                       ex_dot(i) * a + Fraction(fb[i])))
                    S.cand(name, one[0], "rne(exact q.k * f32(alpha) + bias)  [one rounding]")
                    S.cand(name, r32(qk_ex * float(a32) + fb)[0].to(dt), "rne(rne32(q.k * f32(alpha) + bias))  [fp32 FMA]")
                elif fam == "baichuan":
                    mask = baichuan_alibi_mask(H, queries, keys, dt)  # [H, TQ, TK] in dt
                    div = math.sqrt(d)  # "/ math.sqrt(self.head_dim)"
                    sc = torch.matmul(q, kh.transpose(-1, -2)) / div
                    sc = sc + mask
                    out = torch.max(sc, torch.tensor(torch.finfo(sc.dtype).min))
                    assert out.dtype == dt
                    S.put(name, out, f"dt [{H},{SC_TQ},{SC_TK}]; Baichuan-13B: attn = torch.matmul(q, k^T) / "
                          f"math.sqrt({d}); attn = attn + mask; torch.max(attn, torch.tensor(torch.finfo(dt).min)) "
                          f"with mask = rows {int(queries[0])}..{int(queries[-1])}, columns {int(keys[0])}..{int(keys[-1])} "
                          "of (triu(-inf, 1) + fp32 slope * position).to(dt); keys after the query: finfo(dt).min")
                    if f"alibi_scores.baichuan.d{d}.div" not in S.tensors:
                        S.put(f"alibi_scores.baichuan.d{d}.div", torch.tensor([div], dtype=torch.float64),
                              f"F64; math.sqrt({d})")
                    d32 = torch.tensor(div, dtype=f32)
                    bias = (torch.tensor(baichuan_slopes(H), dtype=f32)[:, None, None] * keys).to(dt)
                    rule = (qk_dt.float() / d32).to(dt) + bias  # dt + dt: one rounding
                    rule = torch.where(keys[None, None, :] > queries[None, :, None],
                                       torch.tensor(torch.finfo(dt).min, dtype=dt), rule)
                    S.cmp(name, (rule, ""), "rne(rne(rne(q.k) / f32(sqrt d)) + rne(rne32(slope * pos)))  [the C rule]")
                    S.cand(name, torch.where(keys[None, None, :] > queries[None, :, None],
                                             torch.tensor(torch.finfo(dt).min, dtype=dt),
                                             ((qk_dt.float() * torch.tensor(1 / div, dtype=f32)).to(dt) + bias)),
                           "the same with * f32(1/sqrt d) instead of / f32(sqrt d)")
                else:
                    cfg = transformers.MptConfig(d_model=H * d, n_heads=H, max_seq_len=MPT_MAX_SEQ_LEN)
                    att = mpt.MptAttention(cfg, layer_idx=0)
                    tab = mpt.build_mpt_alibi_tensor(H, MPT_MAX_SEQ_LEN, 8)  # MptModel: default alibi_bias_max
                    qi = max(0, tab.size(1) - SC_TQ)
                    ki = max(0, tab.size(2) - kv)  # MptAttention's slicing for key_length = kv
                    pb = tab[:, qi:, ki:][:, :, keys]
                    sc = torch.matmul(q, kh.transpose(-1, -2)) * att.softmax_scale
                    out = sc + pb
                    assert out.dtype == f32 and sc.dtype == dt
                    S.put(name, out, f"F32 [{H},{SC_TQ},{SC_TK}]; MPT: torch.matmul(q, k^T) * MptAttention.softmax_scale "
                          f"(dt) + position_bias, position_bias = build_mpt_alibi_tensor({H}, max_seq_len={MPT_MAX_SEQ_LEN}) "
                          f"sliced as MptAttention does for key_length {kv} (fp32 table: the sum is fp32)")
                    if f"alibi_scores.mpt.d{d}.scale" not in S.tensors:
                        S.put(f"alibi_scores.mpt.d{d}.scale", torch.tensor([att.softmax_scale], dtype=torch.float64),
                              f"F64; MptAttention.softmax_scale = 1 / math.sqrt(d_model / n_heads) = 1/math.sqrt({d})")
                    s32 = torch.tensor(att.softmax_scale, dtype=f32)
                    slopes = -mpt.build_mpt_alibi_tensor(H, 2, 8)[:, 0, 0]
                    bias = slopes[:, None, None] * dist.float()
                    assert bool(bits_equal(bias.expand(H, 1, SC_TK), pb).all())
                    rule = (qk_dt.float() * s32).to(dt).float() + bias
                    S.cmp(name, (rule, ""), "rne32(rne(rne(q.k) * f32(scale)) + rne32(slope * dist))  [the C rule]")

    # ---- NormHead: F.normalize(weight) in the weight dtype -----------------
    g = gen_for("normhead")
    p, emin, _ = FMT[dt]
    tiny = 1e-14 if dt == torch.bfloat16 else 2.0 ** (emin - p + 1)  # bf16: norm below eps; fp16: subnormals
    rows = [torch.zeros(128),  # norm 0: clamp_min(eps) with eps cast to dt (fp16: 0, so 0/0)
            torch.full((128,), tiny) * torch.where(torch.rand(128, generator=g) < 0.5, -1.0, 1.0),
            randn(g, 128, scale=30.0),
            torch.full((128,), 0.02)]
    rows += [randn(g, 128, scale=0.02) for _ in range(28)]
    w = torch.stack(rows).to(dt)
    wbig = randn(g, 3, 5120, scale=0.02).to(dt)
    eps_dt = torch.tensor(NH_EPS, dtype=f32).to(dt)  # clamp_min's scalar, cast to the tensor's dtype

    def quot(a, b):
        return a / b if b else (Fraction(0) if a == 0 else None)

    for nm, ww, desc in (("normhead", w, "dt [32,128]; rows: 0; +-%g (random signs); N(0,30); constant 0.02; "
                          "then N(0,0.02)" % tiny),
                         ("normhead_big", wbig, "dt [3,5120]; N(0,0.02) (Baichuan2-13B: hidden 5120)")):
        S.put(f"{nm}.w", ww, desc)
        out = F.normalize(ww)  # NormHead: nn.functional.normalize(self.weight): dim=1, eps=1e-12
        assert out.dtype == dt
        S.put(f"{nm}.out", out, "F.normalize(w) = w / w.norm(2, dim=1, keepdim=True).clamp_min(1e-12)  (dt, as "
              "Baichuan2's NormHead; the eps is cast to dt: bf16 1.0019e-12, fp16 0)")
        nrm = ww.norm(2, dim=1, keepdim=True)
        S.put(f"{nm}.norm", nrm, "w.norm(2, dim=1, keepdim=True)  (dt; F.normalize's denominator before clamp_min)")
        n_ex = [mpmath.sqrt(mpf_frac(sum((Fraction(v) ** 2 for v in row), Fraction(0)))) for row in ww.double().tolist()]
        n_rne = mp_to_tensor(n_ex, (ww.shape[0], 1), dt)
        S.cmp(f"{nm}.norm", n_rne, "rne(exact sqrt(sum w^2))")
        for den, what in ((torch.maximum(nrm, eps_dt), "torch's norm"), (torch.maximum(n_rne, eps_dt), "rne(exact norm)")):
            ex = exact_elementwise(quot, ww, den, shape=ww.shape)
            ref64 = ww.double() / den.double()  # 0/0 -> nan, as torch
            S.cmp(f"{nm}.out", r(ref64, ex),
                  f"rne(w / max({what}, rne(f32(1e-12))))" + ("  [the division only]" if what == "torch's norm"
                                                              else "  [the C rule: two roundings]"))
        S.cand(f"{nm}.out", (ww.float() / torch.clamp_min(nrm.float(), torch.tensor(NH_EPS, dtype=f32))).to(dt),
               "(w.float() / max(norm, f32(1e-12))).to(dt)  [eps not cast to dt]")

    # ---- clip_qkv: mixed_qkv.clamp(min=-c, max=c) -----------------------------
    g = gen_for("clip_qkv")
    x = randn(g, N, scale=2.0)
    x[: N // 4] *= 0.15  # many values near +-0.3
    x[N // 4: N // 2] *= 5.0
    if dt == torch.bfloat16:
        near = [0.298828125, 0.30078125, 0.302734375]  # bf16 neighbours of 0.3 (0.30078125 = bf16(0.3))
    else:
        near = [0.2998046875, 0.300048828125, 0.30029296875]  # fp16 0.3 and its neighbours
    edge = near + [-v for v in near] + [5.96875, 6.0, 6.03125, -6.0, -6.03125, math.inf, -math.inf, 0.0, -0.0]
    x[-len(edge):] = torch.tensor(edge, dtype=torch.float64).float()
    x = x.to(dt)
    S.put("clip_qkv.x", x, f"dt [{N}]; N(0,2), a quarter x0.15, a quarter x5; the last {len(edge)}: dt values "
          "around +-0.3 and +-6, +-inf, +-0")
    for tag, c in (("a", 6.0), ("b", 0.3)):
        S.put(f"clip_qkv.c_{tag}", torch.tensor([c], dtype=torch.float64), f"F64; the Python float clip_qkv = {c!r}")
        out = x.clamp(min=-c, max=c)
        assert out.dtype == dt
        S.put(f"clip_qkv.out_{tag}", out, f"clip_qkv.x.clamp(min=-{c!r}, max={c!r})  (MptAttention.forward, dt)")
        cd = float(torch.tensor(c, dtype=f32).to(dt))
        S.cmp(f"clip_qkv.out_{tag}", (x.clamp(min=-cd, max=cd), ""), "clamp to +-rne(f32(c))  [the bound cast to dt]")
        c32 = float(torch.tensor(c, dtype=f32))
        got32 = x.float().clamp(min=-c32, max=c32)  # not rounded: what a bound kept in fp32 gives
        S.notes.append((f"clip_qkv.out_{tag}", "x.float().clamp(+-f32(c)), no cast to dt  [bound not rounded; "
                        "compared in fp32, max in fp32 ulp]", out.numel(), *ulp_stats(out.float(), got32)))


def exhaustive(S):
    """Scalar and unary ops over every finite dt value (65536 bit patterns, minus NaN/inf)."""
    dt = S.dt
    a = all_finite(dt)
    f32 = torch.float32
    for s, sexpr in ((64 ** -0.5, "64**-0.5"), (80 ** -0.5, "80**-0.5"), (0.7, "0.7")):
        got = a * s
        s32 = torch.tensor(s, dtype=f32)
        ref = round_t(a.double() * s, dt, exact_elementwise(lambda v: v * Fraction(s), a))[0]
        S.exh.append((f"a * {sexpr}", "rne(a * s)  (s float64)", a.numel(), *ulp_stats(got, ref)))
        S.exh.append((f"a * {sexpr}", "(a.float() * float32(s)).to(dt)", a.numel(), *ulp_stats(got, (a.float() * s32).to(dt))))
    for s, sexpr in ((0.7, "0.7"), (0.6, "0.6"), (1.3, "1.3")):
        got = a / s
        s32 = torch.tensor(s, dtype=f32)
        ref = round_t(a.double() / s, dt, exact_elementwise(lambda v: v / Fraction(s), a))[0]
        S.exh.append((f"a / {sexpr}", "rne(a / s)  (s float64)", a.numel(), *ulp_stats(got, ref)))
        S.exh.append((f"a / {sexpr}", "(a.float() / float32(s)).to(dt)", a.numel(), *ulp_stats(got, (a.float() / s32).to(dt))))
        S.exh.append((f"a / {sexpr}", "(a.float() * (1 / float32(s))).to(dt)", a.numel(), *ulp_stats(got, (a.float() * (1 / s32)).to(dt))))
    for name, f in UNARY.items():
        got = f(a)
        ref = unary_ref(name, a, dt)
        S.exh.append((name, "rne(exact)", a.numel(), *ulp_stats(got, ref)))
        S.exh.append((name, "F.<op>(a.float()).to(dt)", a.numel(), *ulp_stats(got, f(a.float()).to(dt))))
        with torch.backends.mkldnn.flags(enabled=False):
            nat_dt = f(a)
            nat32 = f(a.float()).to(dt)
        S.exh.append((name, "F.<op>(a.float()).to(dt) with oneDNN disabled", a.numel(), *ulp_stats(got, nat32)))
        S.exh.append((name, "F.<op>(a) with oneDNN disabled", a.numel(), *ulp_stats(got, nat_dt)))
        small = a.abs() < 20
        S.exh.append((name + " (abs(a) < 20)", "rne(exact)", int(small.sum()),
                      *ulp_stats(got[small], ref[small])))


# --------------------------------------------------------------------------
# output
# --------------------------------------------------------------------------


def versions():
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
    }


def cpu_info():
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"{model}, torch CPU capability {torch.backends.cpu.get_cpu_capability()}, "
            f"oneDNN (mkldnn) available: {torch.backends.mkldnn.is_available()}, {platform.machine()}")


ST_DTYPE = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64",
            torch.int32: "I32"}


def same_bytes(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and \
        a.contiguous().view(torch.uint8).equal(b.contiguous().view(torch.uint8))


def gelu_cuda_formula(x):
    """The erf GELU as PyTorch's CUDA kernel computes it, run by torch on the CPU in fp32 on gelu.x
    (the reference where 1 + erf cancels, x < -2), and its erf: name -> (tensor, expression)."""
    xf = x.float()
    erf32 = torch.erf(xf * M_SQRT1_2)
    return {
        "gelu.erf_f32": (erf32, "F32; torch.erf(gelu.x.float() * M_SQRT1_2)  (the fp32 erf of the CUDA formula)"),
        "gelu.cuda_f32": (xf * 0.5 * (1.0 + erf32),
                          "F32; x * 0.5 * (1 + erf(x * M_SQRT1_2)) in fp32 (PyTorch's CUDA erf GELU before its final "
                          "cast), torch on the CPU"),
    }


def keep_existing(S, path):
    """--keep-existing: replace S's tensors by those already stored in `path` (same names), so that
    a file written on another CPU keeps its bytes and only gains the tensors it lacks. Tensors of
    the ops before Spec.mark() may differ from this run (their README part is kept too); those after
    it must not (their README section is written from this run). Returns the names that differ."""
    differ = []
    with safe_open(path, "pt") as f:
        stored = set(f.keys())
        for name in f.keys():
            t = f.get_tensor(name).clone()  # not a view of the file, which is rewritten
            assert name in S.tensors, f"{path}: {name} is not made by this script"
            ref = S.tensors[name]
            assert t.dtype == ref.dtype and t.shape == ref.shape, f"{path}: {name} has another dtype or shape"
            if not same_bytes(t, ref):
                assert list(S.tensors).index(name) < S.split[0], \
                    f"{path}: kept {name} differs from this run, and the README section describing it is rewritten"
                differ.append(name)
            S.tensors[name] = t
    # tensors new to the file that are computed from a kept input: from the kept input
    for name, (t, _) in gelu_cuda_formula(S.tensors["gelu.x"]).items():
        if name not in stored:
            S.tensors[name] = t.detach().contiguous().clone()
    return differ


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "fixtures", "ops"))
    ap.add_argument("--keep-existing", action="store_true",
                    help="keep every tensor already in --out's files (and README.md's part describing the ops before "
                         "the ALiBi section) and only add the missing ones: for a CPU whose kernels round differently "
                         "from the one that wrote the files")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    ver = versions()
    kept_readme = None
    if args.keep_existing:
        with open(os.path.join(args.out, "README.md")) as f:
            kept_readme = f.read()

    specs = {}
    for tag, dt in DTYPES.items():
        S = build(dt)
        specs[tag] = S
        meta = {"dtype": tag, "generator": "tools/make_op_fixtures.py", "seed": str(SEED)}
        meta.update({f"version.{k}": v for k, v in ver.items()})
        path = os.path.join(args.out, f"ops_{tag}.safetensors")
        if args.keep_existing:
            with safe_open(path, "pt") as f:
                assert f.metadata() == meta, f"{path}: other metadata (versions) than this run"
            n_old = len(S.tensors)
            differ = keep_existing(S, path)
            print(f"== {tag}: --keep-existing: kept the stored tensors; {len(differ)} of them differ from this "
                  f"run's ({', '.join(differ) if differ else 'none'}); {n_old} tensors in all")
        save_canonical(S.tensors, path, meta)
        with safe_open(path, "pt") as f:
            assert f.metadata() == meta
            assert sorted(f.keys()) == sorted(S.tensors)
            for name in f.keys():
                assert same_bytes(f.get_tensor(name), S.tensors[name]), name
        print(f"== {tag}: {path} ({os.path.getsize(path)} bytes)")
        for (name, desc, n, nd, mu, extra) in S.rows:
            print(f"  {name:22s} {nd:5d}/{n:<5d} max {mu} ulp  vs {desc}{'  (' + extra + ')' if extra else ''}")
        for (name, desc, n, nd, mu) in S.notes:
            print(f"  [diag] {name:22s} {nd:5d}/{n:<5d} max {mu} ulp  vs {desc}")
        for (name, desc, n, nd, mu) in S.exh:
            print(f"  [all finite] {name:18s} {nd:5d}/{n:<5d} max {mu} ulp  vs {desc}")

    write_readme_all(args.out, specs, ver, kept_readme)


NOTES = """## Notes for the C emulation (observed with the versions and CPU above)

These notes summarise the tables; they are written by hand and are not re-derived on regeneration.

- **Rounding** `x.to(dt)` from float32 is correctly rounded (ties to even, subnormals, overflow to
  inf at max + half ulp, e.g. 65520 -> inf in fp16, 65519.99 -> 65504). But torch's float64 -> dt
  cast double-rounds through float32, so don't use it to build references.
- **Elementwise** `a + b`, `a - b`, `a * b` on dt tensors equal `(a.float() op b.float()).to(dt)`
  and are correctly rounded, including the edge pairs (overflow, signed zeros, subnormal products).
  Computing in float32 and rounding once more is exact enough here (24 >= 2*11+2 bits).
- **Python-float scalars** are rounded to float32 first: `a * s == (a.float() * float32(s)).to(dt)`
  and `a / s == (a.float() / float32(s)).to(dt)`, a true division, not a multiply by the
  reciprocal. This is *not* the correctly rounded `a * s` when s is not a float32 value: for s = 0.7,
  2050 of the 65280 finite bf16 values (1946 fp16) are off by 1 ulp, and so are 5566 bf16 / 4930
  fp16 values for `a / 0.6`. It makes no difference for 64**-0.5, 80**-0.5, `/ 0.7` and `/ 1.3`.
  `mul_scalar3` and `div_scalar2` contain such inputs.
- **GEMM** (`linear`, `q @ k.T`, `p @ v`): bf16 results are correctly rounded on these inputs.
  fp16 has a few 1-ulp differences and is not always bit-identical to `(fp32 GEMM).to(fp16)`, which
  points to a different accumulation order in the fp16 kernel. `matmul_scale.out` is (dt GEMM) then
  `* d**-0.5` (exact for d = 64).
- **LayerNorm**: 1-ulp differences, all in the row with the large mean (300 + N(0,2)). None of the
  simple fp32 formulas tried (two-pass, exact moments, with or without FMA) reproduces them
  exactly, so torch's row moments (Welford-style) differ in the last bits.
- **LlamaRMSNorm**: `normed` is correctly rounded except for 1 fp16 element, and `w * normed` is
  exact. `rmsnorm.out == w * rmsnorm.normed` (checked).
- **Softmax** (fp32 accumulation): the float32 result is up to 2-3 ulp from correctly rounded
  (vectorised exp, sum order). After the cast to dt there are no differences on these inputs, and
  `F.softmax(x_dt)` is bit-identical to `F.softmax(x, dtype=float32).to(dt)`.
- **log_softmax**: `F.log_softmax(x_dt)` equals `F.log_softmax(x.float()).to(dt)` bit for bit, but
  the float32 result is hundreds of ulp off near 0 (the largest logits), because
  `(x - max) - log(sum)` cancels. In dt this gives up to 91 (bf16) / 60 (fp16) ulp against the
  correctly rounded value. A bit-exact emulation has to follow torch's order of operations.
- **GELU (erf)**: CPU backends differ by dtype. float32 and bf16 go through oneDNN; fp16 goes through
  ATen's own kernel (bit-identical to the native float32 kernel, then cast). bf16 has three kinds of
  error. Subnormal results are flushed to +-0 (up to 128 ulp). x >= 2^127 (1.70e38) gives inf. For
  x < 0 the float32 `0.5*x*(1+erf(x/sqrt 2))` cancels: up to 14 ulp on [-5, -3], and below -5
  results are -0 or up to 13215 ulp off. Otherwise it is correctly rounded. fp16 is within 2 ulp
  everywhere.
- **GELU (tanh)** is bit-identical to the float32 computation then cast in both dtypes. It has the
  same cancellation in bf16: up to 29 ulp on [-5, -4.5] and up to 13345 ulp below -5. Subnormal
  results are up to 1 ulp off. fp16 stays within 3 ulp.
- **SiLU** is bit-identical to float32 then cast. It is correctly rounded except for 1-ulp misses at
  subnormal results and, in bf16, x <= -89, where float32 exp(-x) overflows and the result is
  -0 (up to 647 ulp). `silu(g) * u` is two roundings, as in LlamaMLP, and the second one is exact.
- **RoPE**: transformers 5.24's `LlamaRotaryEmbedding` computes the angles as
  `pos[..., None].float() * inv_freq` (broadcast), not the matmul form; the results are
  bit-identical (asserted), as are `inv_freq` from `arange(..., dtype=float)` and
  `arange(..., dtype=int64).float()`. The fp32 cos/sin are up to 1 ulp off correctly rounded
  (`rope_f32.cos`), but the dt `rope.cos`/`rope.sin` are correctly rounded from the float32
  argument on these inputs. `rope.out` is exactly three dt roundings: `q*cos`, `rot(q)*sin`, and
  their sum. The GPT-NeoX upcast variant is three float32 roundings. Whether cos is evaluated on the
  [2048,16] cache or on the gathered [40,16] arguments makes no difference here.
"""


NOTES_POSITIONS = """### Notes (ALiBi, NormHead, clip_qkv)

Written by hand from the tables above and from `tests/test_ops.c` (test_alibi_slopes,
test_alibi_scores, test_normhead, test_clip_qkv), which runs the C rules of `src/engine` on these
files; not re-derived on regeneration.

- **Scores: each family's rule is bitwise.** On the `exact` and `split` inputs (fp32 q.k exact, so no
  GEMM order is involved) `rco_score` (16 lanes) gives every stored score bit for bit, bf16 and fp16,
  head_dim 16 and 128, keys at 0..39 and 3000 positions further:
  - BLOOM: `baddbmm` is R(R32(R32(q.k * f32(alpha)) + bias)) with bias = R(R32(slope * position)):
    two fp32 roundings, then one to the dtype. Not an fp32 FMA and not one rounding: the `split`
    case has 97 (bf16) / 89 (fp16) scores where those give another value, and torch agrees with the
    two roundings in all of them (RCO_ALIBI_FUSED).
  - Baichuan-13B: R(R(R(q.k) / f32(sqrt d)) + R(R32(slope * position))), every step in the dtype
    (RCO_ALIBI_ADD, bias and sum in the dtype). Division and multiplication by f32(1/sqrt 128) agree
    on every finite bf16 value and differ on 52 of the 63488 finite fp16 values; the rule divides,
    as torch. Keys after the query hold finfo(dt).min (-inf from the mask, then `torch.max`).
  - MPT: R32(R(R(q.k) * f32(softmax_scale)) + R32(slope * (position - last key))), an fp32 result
    (RCO_ALIBI_ADD with fp32 bias and sum).
- **`randn` inputs**: bf16 is bitwise everywhere. In fp16 our 16-lane R(q.k) differs from torch's GEMM
  in 4 of 3840 values, up to 8 ulp where q.k cancels (|q.k| = 1.8e-5 against sum |q_i k_i| = 92; the
  difference is within what two fp32 summation orders allow). The scores differ exactly there: BLOOM
  3/3840 by 1 ulp, Baichuan 1/3504 by 2 ulp, MPT 2/3840 (one fp16 ulp of the scaled score = 4096
  fp32 ulp) and 1/3840 (32 fp32 ulp, next to a large bias). From torch's own R(q.k)
  (`alibi_scores.randn.d128.qk`) the Baichuan and MPT rules are bitwise.
- **Slopes.** Baichuan-13B's are the Python-float slopes rounded once: correctly rounded, and ours
  (`rc_alibi_slopes_compute`) are bitwise. BLOOM's `torch.pow(fp32 base, k)` equals the correctly
  rounded power of the fp32 base (so up to 6 ulp from 2^(-8k/n2) for 32 or 40 heads), except where
  ATen's vectorised pow runs: each block of 32 powers goes through SLEEF's powf_u10 (AVX512 here),
  only the rest through std::pow (glibc powf, which ours calls too). The one value where they
  differ here is (2^-0.25)^15, 1 ulp (head 14 of 32 to 63 heads, e.g. bloom-3b and bloom-7b1 with
  32); the "one power at a time" row shows it. MPT's `1 / torch.pow(2, base)` is the correctly
  rounded power, then the reciprocal, except 3 values of the 112-head table with alibi_bias_max 12
  (vectorised 2^0.09375 times powers of two); MptModel always passes alibi_bias_max 8, where all
  tables agree. The test expects exactly these 1-ulp differences.
- **NormHead**: `F.normalize` casts its eps to the weight dtype (`clamp_min(1e-12)` on a bf16/fp16
  tensor): bf16 1.0019e-12, fp16 0. So a row whose norm is below that is divided by 1.0019e-12
  rather than 1e-12 in bf16 (128 of 4096 elements 1 ulp apart otherwise), and an all-zero row is
  0/0 = NaN in fp16. The norm itself is correctly rounded on these rows, the division too;
  `rco_normalize_row` casts the eps and matches bitwise.
- **clip_qkv**: `clamp(min=-c, max=c)` on a dtype tensor converts c to the dtype first: 0.3 clamps
  bf16 to 0.30078125 (and leaves 0.30078125 itself alone). With the bound cast, the clamp is
  bitwise; with c = 0.3 as a plain fp32 bound 3117 of 4096 results differ (they are not even dtype
  values). c = 6.0 is exact in both dtypes. (torch refuses a c beyond the dtype's range, e.g. fp16
  clip_qkv > 65504: "value cannot be converted to type c10::Half without overflow".)
"""


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def write_readme(out, specs, ver):
    L = []
    a = L.append
    a("# Per-op bf16 / fp16 fixtures (`ops_bf16.safetensors`, `ops_f16.safetensors`)")
    a("")
    a("Inputs and PyTorch's **CPU** outputs for the individual operations the ratiocheck bf16/fp16")
    a("emulation has to reproduce (rounding, elementwise ops, scalar ops, linear, LayerNorm, LlamaRMSNorm,")
    a("softmax, GELU/SiLU, Llama and GPT-NeoX RoPE, log-softmax, attention matmuls).")
    a("Generated by `tools/make_op_fixtures.py`; do not edit by hand.")
    a("")
    a("Regenerate (writes this folder; `--out DIR` writes elsewhere, e.g. to compare bytes):")
    a("")
    a("    python3 tools/make_op_fixtures.py")
    a("")
    a("CPU only, `torch.set_num_threads(1)`, `torch.use_deterministic_algorithms(True)`, one")
    a(f"`torch.Generator` per op seeded with `{SEED} ^ crc32(op name)` (the same seeds for both dtypes:")
    a("random inputs are the same float32 draws rounded to bf16 resp. fp16). The safetensors header is")
    a("rewritten with sorted `__metadata__` keys, so two runs give byte-identical files.")
    a("")
    a("Versions used:")
    a("")
    for k, v in ver.items():
        a(f"- {k} {v}")
    a("")
    a(f"Generated on: {cpu_info()}. Several CPU kernels (oneDNN GELU/GEMM, vectorised exp/log/erf)")
    a("are ISA-dependent, so the torch outputs may differ in the last bit on another CPU; the")
    a("regeneration check is byte-identity on the same machine.")
    a("")
    a("| file | bytes | sha256 |")
    a("|---|---|---|")
    L += file_table(out, specs)
    a("")
    a("`__metadata__`: dtype, generator, seed, version.{python,torch,transformers,safetensors,numpy}.")
    a("")
    a("## Tensors")
    a("")
    a("`dt` is BF16 in `ops_bf16.safetensors` and F16 in `ops_f16.safetensors`; shapes are the same in")
    a("both files. Scalars (`*.s`, `*.eps`) are F64 [1] holding the Python float that was passed to torch.")
    a("Sizes: N = 4096, M = 7, K = 256, linear N = 96, H = 256, T(softmax) = 100, T = 40, d = 64, V = 1000.")
    a("Hand-picked edge inputs differ between the two files where they are dtype-specific (max finite,")
    a("subnormals).")
    a("")
    a("| name | shape | dtype | contents / exact PyTorch expression |")
    a("|---|---|---|---|")
    S0 = specs["bf16"]
    for name, t in list(S0.tensors.items())[: S0.split[0]]:
        dts = {ST_DTYPE[s.tensors[name].dtype] for s in specs.values()}
        dtype = "dt" if dts == {"BF16", "F16"} else "/".join(sorted(dts))
        doc = S0.doc[name].replace("|", "\\|")
        a(f"| `{name}` | {list(t.shape)} | {dtype} | {doc} |")
    a("")
    a("## torch CPU vs. \"compute exactly, round once\"")
    a("")
    a("For every output, the number of elements whose bits differ from the exact result rounded once to")
    a("the output dtype (`rne` = round to nearest, ties to even, overflow to inf; done in the script, not")
    a("with torch's float64 -> dt cast, which double-rounds, see below). This is \"compute in float64,")
    a("round once\" made exact: rational ops are computed in float64 and elements that land exactly on a")
    a("tie in float64 are re-rounded from `fractions.Fraction` values (the note column says how many);")
    a("transcendental ops and norms use mpmath at 320 bits. For ops whose definition contains several")
    a("roundings (RMSNorm, silu*u, RoPE, scores*scale) the reference applies the same roundings; rows")
    a("marked *[... only]* start from torch's own intermediate so that only the last step is compared.")
    a("ulp = distance in representable values of the output dtype (+0 and -0 count as 0 ulp apart but as")
    a("a bit difference).")
    a("")
    a("| output | reference | bf16: differ / n | bf16 max ulp | fp16: differ / n | fp16 max ulp | notes |")
    a("|---|---|---|---|---|---|---|")
    rb, rf = specs["bf16"].rows[: S0.split[1]], specs["f16"].rows[: S0.split[1]]
    for x, y in zip(rb, rf):
        assert x[0] == y[0] and x[1] == y[1]
        notes = "; ".join(s for s in (("bf16: " + x[5]) if x[5] else "", ("fp16: " + y[5]) if y[5] else "") if s)
        a(f"| `{x[0]}` | {x[1]} | {x[3]} / {x[2]} | {x[4]} | {y[3]} / {y[2]} | {y[4]} | {notes} |")
    a("")
    a("### Diagnostics: torch's result vs. alternative computations")
    a("")
    a("Same counts, comparing torch's stored output with other plausible ways of computing it (mostly")
    a("\"do it in fp32 with torch, then cast\"); 0 means bit-identical on these inputs.")
    a("")
    a("| output | alternative | bf16: differ / n | bf16 max ulp | fp16: differ / n | fp16 max ulp |")
    a("|---|---|---|---|---|---|")
    for x, y in zip(specs["bf16"].notes[: S0.split[2]], specs["f16"].notes[: S0.split[2]]):
        if x[0].startswith("(float64"):
            continue
        assert x[0] == y[0] and x[1] == y[1]
        a(f"| `{x[0]}` | {x[1]} | {x[3]} / {x[2]} | {x[4]} | {y[3]} / {y[2]} | {y[4]} |")
    a("")
    a("### Exhaustive: every finite dt input")
    a("")
    a("Scalar and unary ops evaluated by torch on all finite bf16 resp. fp16 values (bit patterns")
    a("0x0000..0xFFFF without inf/NaN), compared with the round-once reference and with alternatives.")
    a("")
    a("| op | compared with | bf16: differ / n | bf16 max ulp | fp16: differ / n | fp16 max ulp |")
    a("|---|---|---|---|---|---|")
    for x, y in zip(specs["bf16"].exh, specs["f16"].exh):
        assert x[0] == y[0] and x[1] == y[1]
        a(f"| `{x[0]}` | {x[1]} | {x[3]} / {x[2]} | {x[4]} | {y[3]} / {y[2]} | {y[4]} |")
    a("")
    a("### torch's float64 -> dt cast")
    a("")
    for tag, S in specs.items():
        for x in S.notes:
            if x[0].startswith("(float64"):
                a(f"- {tag}: {x[1]}")
    a("")
    a("i.e. on the CPU `float64_tensor.to(bfloat16/float16)` converts to float32 first and so double-rounds;")
    a("the references here never use it.")
    a("")
    a(NOTES)
    return "\n".join(L)


NEW_SECTION = "## ALiBi (BLOOM, Baichuan-13B, MPT), NormHead, clip_qkv"


def tensor_rows(specs, lo, hi):
    S0 = specs["bf16"]
    out = []
    for name, t in list(S0.tensors.items())[lo:hi]:
        dts = {ST_DTYPE[s.tensors[name].dtype] for s in specs.values()}
        dtype = "dt" if dts == {"BF16", "F16"} else "/".join(sorted(dts))
        doc = S0.doc[name].replace("|", "\\|")
        out.append(f"| `{name}` | {list(t.shape)} | {dtype} | {doc} |")
    return out


def readme_positions(specs):
    """The README section of the ops after Spec.mark(): ALiBi slopes and scores, NormHead, clip_qkv."""
    S0 = specs["bf16"]
    L = []
    a = L.append
    a(NEW_SECTION)
    a("")
    a(f"Generated on: {cpu_info()} (torch {torch.__version__}, transformers {transformers.__version__}).")
    a("Same files, same conventions as above; these tensors come after the ops above in the script")
    a("(`build_positions`), each op with its own seeded generator.")
    a("")
    a("What each family computes (the code the tensors come from):")
    a("")
    a("- **BLOOM** (`transformers.models.bloom.modeling_bloom`): slopes `_get_alibi_slopes(n)`: an fp32 base")
    a("  `2**-(8/n2)` (n2 = largest power of two <= n) raised with `torch.pow` to int32 powers 1..n2, extra heads")
    a("  base `2**-(4/n2)` to the odd powers; `build_alibi_tensor(mask, n, dtype)`: `slopes[..., None] *")
    a("  arange` (fp32) `.to(dtype)`; scores `alibi.baddbmm(batch1=q, batch2=k^T, beta=1.0,")
    a("  alpha=1/math.sqrt(head_dim))` in the model dtype.")
    a("- **Baichuan-13B** (its own `modeling_baichuan.py`, not in transformers; the lines are re-written in the")
    a("  script): slopes `torch.Tensor(_get_interleave(n))` (Python floats `start * ratio**i`, rounded once to")
    a("  fp32); the mask `triu(-inf, 1) + slopes * arange(max_pos)` in fp32, `.to(model dtype)`; `attn =")
    a("  torch.matmul(q, k^T) / math.sqrt(head_dim)`, `attn = attn + mask` (model dtype), `torch.max(attn,")
    a("  torch.tensor(torch.finfo(dtype).min))`.")
    a("- **MPT** (`transformers.models.mpt.modeling_mpt`): `build_mpt_alibi_tensor(n, max_seq_len,")
    a("  alibi_bias_max)`: slopes `1.0 / torch.pow(2, arange(1, n2+1).float() * (alibi_bias_max / n2))` (n2 =")
    a("  power of two >= n, odd-then-even heads when n is not one) times `arange(1 - max_seq_len, 1)`, an fp32")
    a("  table; `MptAttention`: `torch.matmul(q, k^T) * softmax_scale` (model dtype) `+ position_bias[:, -q:,")
    a("  -kv:]`: the table is fp32, so the sum is fp32.")
    a("- **NormHead** (Baichuan2): `F.linear(h, F.normalize(weight))`, `F.normalize(w) = w / w.norm(2, dim=1,")
    a("  keepdim=True).clamp_min(1e-12)` in the weight dtype.")
    a("- **clip_qkv** (MPT): `mixed_qkv.clamp(min=-clip_qkv, max=clip_qkv)` on the model-dtype projection.")
    a("")
    a(f"Score layout: {SC_H} heads, {SC_TQ} query rows, {SC_TK} keys, head_dim 16 or 128. `off0`: kv = {SC_TK} keys")
    a(f"at positions 0..{SC_TK - 1}, queries at {SC_TK - SC_TQ}..{SC_TK - 1}. `off{SC_KV_OFF}`: kv = {SC_KV_OFF + SC_TK} keys,")
    a(f"queries at {SC_KV_OFF + SC_TK - SC_TQ}..{SC_KV_OFF + SC_TK - 1}; the {SC_TK} keys are positions")
    a(f"{SC_KV_OFF}..{SC_KV_OFF + SC_TK - 1} for BLOOM and Baichuan (bias = slope * position) and positions")
    a(f"0..{SC_TK - 1} for MPT (bias = slope * (position - (kv - 1)), so the far case has distances")
    a(f"-{SC_KV_OFF + SC_TK - 1}..-{SC_KV_OFF}). `alibi_scores.<family>.off*.dist` holds the integer each key's slope")
    a("is multiplied by. BLOOM and MPT scores are stored before the causal mask (every query/key pair);")
    a("Baichuan's include it (its mask is the ALiBi tensor): keys after the query hold finfo(dt).min. `exact`")
    a("inputs make every fp32 q.k exact, so the scores do not depend on the GEMM's summation order and")
    a("test only the scaling and bias rule; `randn` inputs are N(0,1).")
    a("")
    a("| name | shape | dtype | contents / exact PyTorch expression |")
    a("|---|---|---|---|")
    L += tensor_rows(specs, S0.split[0], len(S0.tensors))
    a("")
    a("### torch vs. the rule (and round-once references)")
    a("")
    a("As above: elements whose bits differ (NaN counts equal to NaN). \"the C rule\" rows apply the rounding")
    a("sequence `src/engine/ops_inline.h` implements, from the exact (or correctly rounded fp32) q.k.")
    a("")
    a("| output | reference | bf16: differ / n | bf16 max ulp | fp16: differ / n | fp16 max ulp | notes |")
    a("|---|---|---|---|---|---|---|")
    for x, y in zip(S0.rows[S0.split[1]:], specs["f16"].rows[S0.split[1]:]):
        assert x[0] == y[0] and x[1] == y[1]
        notes = "; ".join(s for s in (("bf16: " + x[5]) if x[5] else "", ("fp16: " + y[5]) if y[5] else "") if s)
        a(f"| `{x[0]}` | {x[1]} | {x[3]} / {x[2]} | {x[4]} | {y[3]} / {y[2]} | {y[4]} | {notes} |")
    a("")
    a("| output | alternative | bf16: differ / n | bf16 max ulp | fp16: differ / n | fp16 max ulp |")
    a("|---|---|---|---|---|---|")
    for x, y in zip(S0.notes[S0.split[2]:], specs["f16"].notes[S0.split[2]:]):
        assert x[0] == y[0] and x[1] == y[1]
        a(f"| `{x[0]}` | {x[1]} | {x[3]} / {x[2]} | {x[4]} | {y[3]} / {y[2]} | {y[4]} |")
    a("")
    a(NOTES_POSITIONS)
    return "\n".join(L)


def file_table(out, specs):
    rows = []
    for tag in specs:
        p = os.path.join(out, f"ops_{tag}.safetensors")
        rows.append(f"| ops_{tag}.safetensors | {os.path.getsize(p)} | `{sha256(p)}` |")
    return rows


def write_readme_all(out, specs, ver, kept_readme=None):
    """README.md: the first part (write_readme) and the positions section. kept_readme: the text of
    an existing README whose first part is kept (--keep-existing), with its file table updated."""
    if kept_readme is None:
        head = write_readme(out, specs, ver)
    else:
        i = kept_readme.find("\n" + NEW_SECTION)
        head = kept_readme[:i] if i >= 0 else kept_readme.rstrip("\n") + "\n"
        new_rows = dict(zip(specs, file_table(out, specs)))
        lines = head.split("\n")
        for j, line in enumerate(lines):
            for tag, row in new_rows.items():
                if line.startswith(f"| ops_{tag}.safetensors |"):
                    lines[j] = row
        # tensors of the first part that the kept table lacks: a row after their predecessor's
        S0 = specs["bf16"]
        names = list(S0.tensors)[: S0.split[0]]
        for k, name in enumerate(names):
            if any(line.startswith(f"| `{name}` |") for line in lines):
                continue
            row = tensor_rows(specs, k, k + 1)[0]
            at = next((j for j, line in enumerate(lines) if k > 0 and line.startswith(f"| `{names[k - 1]}` |")), None)
            assert at is not None, f"README.md: no row for {names[k - 1]} to put {name} after"
            lines.insert(at + 1, row)
        head = "\n".join(lines)
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(head + "\n" + readme_positions(specs))


if __name__ == "__main__":
    sys.exit(main())
