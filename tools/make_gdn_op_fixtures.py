#!/usr/bin/env python3
"""Op-level cases of the Gated DeltaNet layer (data/fixtures/gdn_ops/), from transformers' own functions.

Every output is computed by transformers' Qwen3-Next code (transformers/models/qwen3_next/
modeling_qwen3_next.py; Qwen3.5's copies are the same functions): torch_recurrent_gated_delta_rule,
torch_chunk_gated_delta_rule (use_qk_l2norm_in_kernel=True, as the layer calls them), causal_conv1d_fn,
causal_conv1d_update, l2norm, Qwen3NextRMSNormGated, and the layer's gates
g = -A_log.float().exp() * softplus(a.float() + dt_bias), beta = b.sigmoid(), on random inputs at odd
shapes: 3 key heads and 3 value heads (and 6 value heads, GQA), head dims k 12 / v 10, lengths
1, 7, 64, 70, 130, chunk 64 and 16, in fp32 and bf16.

Two runs, in two processes:

- "libm" (checked bit for bit by tests/test_gdn.c): ATEN_CPU_CAPABILITY=default, so that torch's
  sigmoid, SiLU and softplus call glibc's expf / log1pf as the C code does, and torch's tensor exp
  (MKL's VML vsExp on every CPU capability, `aten/src/ATen/cpu/vml.h`, which no open code reproduces)
  replaced by glibc's expf applied element by element (torch.Tensor.exp and torch.exp patched). Every
  other op is torch's own: the MKL GEMMs and triangular solves, cumsum, the sums, the casts.
- "native": the functions as they stand (native CPU capability, MKL's exp), the outputs that
  tests/test_gdn.c compares with the fp64 reference.

Layout (batch 1 everywhere): q, k [T, Hk, dk]; v [T, Hv, dv]; a, b, g, beta [T, Hv]; states [Hv, dk, dv];
outputs [T, Hv, dv]. Tensors in the dtype are stored in it (bf16 as bf16). The chunked form's outputs
for a length L are the first L rows of the 130-token run (the script checks this bit for bit against
HF's own run of length L and stores the final state of every length).

    python3 tools/make_gdn_op_fixtures.py            # writes data/fixtures/gdn_ops/
"""

import argparse
import ctypes
import json
import os
import platform
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers.cache_utils import DynamicCache
from transformers.models.qwen3_next import modeling_qwen3_next as M

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T_FULL, HK, HV, DK, DV = 130, 3, 3, 12, 10
LENGTHS = [1, 7, 64, 70, 130]
CHUNKS = [64, 16]
GQA_HV, GQA_T, GQA_CHUNK = 6, 20, 16
INIT_T = 20  # the cases that start from a given state
NATIVE_T = 70  # the native run's rows kept
PREFILL = 64  # the decode continuation: chunked prefill of 64 tokens, then recurrent steps
CONV_C, CONV_K, CONV_T, CONV_PREFILLS = 16, 4, 12, (3, 9)
NORM_N, NORM_EPS = 16, 1e-6
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
# torch's sum over rows of [n, m] (the delta rule's sums over dk, m = dv) and over n contiguous values
# (l2norm, the gated RMSNorm's mean) at sizes the fixture's heads do not reach
SUM_OUTER = [(128, 128), (128, 40), (300, 10), (64, 6)]
SUM_INNER = [5, 37, 128, 1000]


def gen_values(n):
    """fp32 values the test makes the same way: ((i * 7919) % 2003 - 1001) / 1000 in fp32"""
    i = np.arange(n, dtype=np.int64)
    return torch.from_numpy(((i * 7919) % 2003 - 1001).astype(np.float32) / np.float32(1000))

_libm = ctypes.CDLL("libm.so.6")
_libm.expf.restype = ctypes.c_float
_libm.expf.argtypes = [ctypes.c_float]


def glibc_exp(t):
    """torch's exp with glibc's expf element by element (fp32 tensors only, as the GDN code uses it)."""
    assert t.dtype == torch.float32, t.dtype
    x = t.detach().contiguous().numpy().reshape(-1)
    y = np.fromiter((_libm.expf(float(v)) for v in x), dtype=np.float32, count=x.size)
    return torch.from_numpy(y.reshape(t.shape))


def patch_exp():
    torch.Tensor.exp = glibc_exp
    torch.exp = glibc_exp


def inputs(dt, seed):
    """Random layer-like inputs: q, k, v as the conv's SiLU outputs would be (any scale), a, b from a
    projection, A_log from Qwen3-Next's initial range (log U(0.01, 16)): per-token decays g from about
    -0.05 (a slow head, whose chunk's cumulative decay stays far from fp32's exp underflow) to about -30
    (a fast one, whose cumulative decay passes exp's fp32 range, -103, within a chunk); dt_bias near 1."""
    rng = np.random.default_rng(seed)  # numpy's generator: torch's randn differs between CPU capabilities
    r = lambda *s: torch.from_numpy(rng.standard_normal(s).astype(np.float32))  # noqa: E731
    t = {
        "q": r(T_FULL, HK, DK), "k": r(T_FULL, HK, DK), "v": r(T_FULL, HV, DV),
        "a": r(T_FULL, HV) * 2.0, "b": r(T_FULL, HV) * 2.0,
        # A in Qwen3-Next's initial range U(0.01, 16): a slow, a middle and a fast head
        "A_log": torch.log(torch.tensor([0.05, 1.5, 12.0])),
        "dt_bias": torch.ones(HV) + 0.5 * r(HV),
        "init": r(HV, DK, DV) * 0.5,
        "gqa_q": r(GQA_T, HK, DK), "gqa_k": r(GQA_T, HK, DK), "gqa_v": r(GQA_T, GQA_HV, DV),
        "gqa_a": r(GQA_T, GQA_HV) * 2.0, "gqa_b": r(GQA_T, GQA_HV) * 2.0,
        "conv_x": r(CONV_T, CONV_C), "conv_w": r(CONV_C, CONV_K) * 0.5,
        "norm_x": r(NORM_N, DV), "norm_z": r(NORM_N, DV) * 2.0, "norm_w": 1.0 + 0.3 * r(DV),
        "l2_x": r(16, DK), "l2_x128": r(2, 128),
    }
    return {k: v.to(dt) if k != "init" else v for k, v in t.items()}


def gates(a, b, A_log, dt_bias):
    """Qwen3NextGatedDeltaNet.forward's two lines."""
    beta = b.sigmoid()
    g = -A_log.float().exp() * F.softplus(a.float() + dt_bias)
    return g, beta


LAYER = {"hk": 2, "hv": 4, "dk": 8, "dv": 6, "K": 4, "T": 20, "hidden": 16}
LAYER_PREFILL = 12


def layer_case(dt, seed):
    L = LAYER
    cfg = M.Qwen3NextConfig(hidden_size=L["hidden"], linear_num_key_heads=L["hk"], linear_num_value_heads=L["hv"],
                            linear_key_head_dim=L["dk"], linear_value_head_dim=L["dv"],
                            linear_conv_kernel_dim=L["K"], num_hidden_layers=1, layer_types=["linear_attention"],
                            rms_norm_eps=1e-6, hidden_act="silu")
    mod = M.Qwen3NextGatedDeltaNet(cfg, 0)
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, prm in mod.named_parameters():
            prm.copy_(torch.from_numpy(rng.standard_normal(tuple(prm.shape)).astype(np.float32)) * 0.4)
        mod.A_log.copy_(torch.log(torch.tensor([0.05, 1.5, 12.0, 3.0])))
        mod.dt_bias.copy_(mod.dt_bias * 0.5 + 1.0)
        mod.norm.weight.copy_(mod.norm.weight * 0.5 + 1.0)
        # the projections exact in fp32 (multiples of 2^-7 from small integers): their GEMMs give the same bits
        # for one token and for the whole sequence, so the cached run's projections are the full run's
        for lin in (mod.in_proj_qkvz, mod.in_proj_ba):
            lin.weight.copy_(torch.round(lin.weight * 80).clamp(-8, 8) / 32)
    mod = mod.to(dt).eval()
    rec = {}
    mod.in_proj_qkvz.register_forward_hook(lambda m, i, o: rec.__setitem__("qkvz", o))
    mod.in_proj_ba.register_forward_hook(lambda m, i, o: rec.__setitem__("ba", o))
    mod.out_proj.register_forward_pre_hook(lambda m, i: rec.__setitem__("out", i[0]))
    x = (torch.round(torch.from_numpy(rng.standard_normal((1, L["T"], L["hidden"])).astype(np.float32)) * 2)
         .clamp(-4, 4) / 4).to(dt)
    with torch.no_grad():
        mod(x)
        full = rec["out"][0]
        # with transformers' cache: a prefill of the first LAYER_PREFILL tokens, then one call per token
        # (causal_conv1d_update and the recurrent form from the cached states)
        cache = DynamicCache(config=cfg)
        outs = []
        qkvz_all, ba_all = rec_all(mod, x)
        for a, b in [(0, LAYER_PREFILL)] + [(t, t + 1) for t in range(LAYER_PREFILL, L["T"])]:
            mod(x[:, a:b], cache=cache)
            outs.append(rec["out"][0])
            assert torch.equal(rec["qkvz"][0], qkvz_all[a:b]) and torch.equal(rec["ba"][0], ba_all[a:b])
        cached = torch.cat(outs)
    return {"qkvz": rec_all(mod, x)[0], "ba": rec_all(mod, x)[1], "out": full, "out_cached": cached,
            "conv_w": mod.conv1d.weight[:, 0], "A_log": mod.A_log.detach(), "dt_bias": mod.dt_bias.detach(),
            "norm_w": mod.norm.weight.detach()}


def rec_all(mod, x):
    """the projections' outputs over the whole sequence"""
    with torch.no_grad():
        return mod.in_proj_qkvz(x)[0], mod.in_proj_ba(x)[0]


def _fma(a, b, c):
    """fp32 fused multiply-add: the product of two fp32 values is exact in fp64, the sum rounds once to fp64
    and then to fp32 (a double rounding that could only matter on an exact fp32 midpoint)"""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)


def mkl_orders():
    """The orders src/engine/gdn.c writes for the chunked form's GEMMs and triangular solves, against
    torch's CPU (MKL) on random fp32 inputs at the fixture's and a real model's sizes: the number of
    outputs that differ (0: the order is MKL's here)."""
    rng = np.random.default_rng(11)
    rows = []
    for M_, K_, N_, tr in [(64, 12, 64, False), (64, 64, 10, False), (12, 64, 10, True), (16, 12, 16, False),
                           (64, 128, 64, False), (64, 128, 128, False), (128, 64, 128, True), (64, 64, 128, False)]:
        A = rng.standard_normal((M_, K_)).astype(np.float32)
        B = rng.standard_normal((K_, N_)).astype(np.float32)
        tA = torch.from_numpy(np.ascontiguousarray(A.T)).t() if tr else torch.from_numpy(A)
        want = (tA @ torch.from_numpy(B)).numpy()
        got = np.zeros((M_, N_), np.float32)
        for kk in range(K_):
            got = _fma(A[:, kk:kk + 1], B[kk:kk + 1, :], got)
        rows.append((f"GEMM {M_} x {K_} x {N_}{' (A transposed)' if tr else ''}", int((got != want).sum()),
                     M_ * N_))
    for M_, N_ in [(16, 10), (64, 10), (64, 12), (64, 128), (100, 12), (128, 10)]:
        L_ = np.tril(rng.standard_normal((M_, M_)).astype(np.float32) * 0.2)
        B = rng.standard_normal((M_, N_)).astype(np.float32)
        want = torch.linalg.solve_triangular(torch.from_numpy(L_), torch.from_numpy(B), upper=False,
                                             unitriangular=True).numpy()
        X = B.copy()
        for s0 in range(0, M_, 48):
            e0 = min(M_, s0 + 48)
            if s0 > 0:
                acc = np.zeros((e0 - s0, N_), np.float32)
                for c in range(s0):
                    acc = _fma(L_[s0:e0, c:c + 1], X[c:c + 1], acc)
                X[s0:e0] = X[s0:e0] - acc
            for c in range(s0, e0):
                X[c + 1:e0] = _fma(-L_[c + 1:e0, c:c + 1], X[c:c + 1], X[c + 1:e0])
        rows.append((f"unit lower triangular solve {M_} x {M_}, {N_} right-hand sides", int((X != want).sum()),
                     M_ * N_))
    return rows


def chunk(q, k, v, g, beta, cs, init=None):
    o, s = M.torch_chunk_gated_delta_rule(q[None], k[None], v[None], g=g[None], beta=beta[None], chunk_size=cs,
                                          initial_state=None if init is None else init[None],
                                          output_final_state=True, use_qk_l2norm_in_kernel=True)
    return o[0], s[0]


def recurrent(q, k, v, g, beta, init=None):
    o, s = M.torch_recurrent_gated_delta_rule(q[None], k[None], v[None], g=g[None], beta=beta[None],
                                              initial_state=None if init is None else init[None],
                                              output_final_state=True, use_qk_l2norm_in_kernel=True)
    return o[0], s[0]


def run(mode):
    torch.set_num_threads(1)
    if mode == "libm":
        patch_exp()
    out = {}
    for dn, dt in DTYPES.items():
        x = inputs(dt, 7 if dn == "f32" else 8)
        p = lambda name, t: out.__setitem__(f"{dn}.{name}", t)  # noqa: E731
        with torch.no_grad():
            g, beta = gates(x["a"], x["b"], x["A_log"], x["dt_bias"])
            q, k, v = x["q"], x["k"], x["v"]
            if mode == "libm":
                for name in ("q", "k", "v", "a", "b", "A_log", "dt_bias", "init"):
                    p(name, x[name])
                p("g", g)
                p("beta", beta)
            # the chunked form: every length, every chunk size; the recurrent form over the whole length
            for cs in CHUNKS:
                o_full, _ = chunk(q, k, v, g, beta, cs)
                p(f"chunk{cs}.out", o_full)
                for L in LENGTHS:
                    o, s = chunk(q[:L], k[:L], v[:L], g[:L], beta[:L], cs)
                    assert torch.equal(o, o_full[:L]), f"{mode} {dn} chunk {cs} length {L}: not a prefix"
                    if L >= 7 and (cs == 64 or L >= 64):  # final states: lengths 7+ with chunk 64, 64+ with 16
                        p(f"chunk{cs}.state{L}", s)
                if cs == 16:  # from a given state: two chunks, the second padded
                    n = INIT_T
                    o, s = chunk(q[:n], k[:n], v[:n], g[:n], beta[:n], cs, init=x["init"])
                    p(f"chunk{cs}.init.out", o)
                    p(f"chunk{cs}.init.state", s)
            o, s = recurrent(q, k, v, g, beta)
            p("rec.out", o)
            n = INIT_T
            o, s = recurrent(q[:n], k[:n], v[:n], g[:n], beta[:n], init=x["init"])
            p("rec.init.out", o)
            p("rec.init.state", s)
            if mode == "native":
                continue
            # the sampler's path: a chunked prefill (chunk 64) of 64 tokens, then one recurrent call per
            # token, the state kept in fp32 between calls, and (bf16) kept in bf16 between calls
            _, s0 = chunk(q[:PREFILL], k[:PREFILL], v[:PREFILL], g[:PREFILL], beta[:PREFILL], 64)
            for sdn, sdt in ([("f32", torch.float32)] + ([("bf16", torch.bfloat16)] if dn == "bf16" else [])):
                s = s0.to(sdt)
                outs = []
                for t in range(PREFILL, T_FULL):
                    sl = slice(t, t + 1)
                    o, s = recurrent(q[sl], k[sl], v[sl], g[sl], beta[sl], init=s)
                    s = s.to(sdt)
                    outs.append(o)
                p(f"decode.state_{sdn}.out", torch.cat(outs))
                p(f"decode.state_{sdn}.state", s)
            # GQA: 3 key heads, 6 value heads (fp32 only)
            if dn == "f32":
                gg, gb = gates(x["gqa_a"], x["gqa_b"], x["A_log"].repeat(2), x["dt_bias"].repeat(2))
                for name in ("gqa_q", "gqa_k", "gqa_v"):
                    p(name, x[name])
                p("gqa_g", gg)
                p("gqa_beta", gb)
                o, s = chunk(x["gqa_q"], x["gqa_k"], x["gqa_v"], gg, gb, GQA_CHUNK)
                p("gqa.chunk.out", o)
                p("gqa.chunk.state", s)
                o, s = recurrent(x["gqa_q"], x["gqa_k"], x["gqa_v"], gg, gb)
                p("gqa.rec.out", o)
                p("gqa.rec.state", s)
            # the causal depthwise conv + SiLU: the full sequence, and a cached prefill then steps
            cx, cw = x["conv_x"], x["conv_w"]
            p("conv.x", cx)
            p("conv.w", cw)
            p("conv.full", M.causal_conv1d_fn(cx.t()[None], cw, None, activation="silu")[0].t())
            for P in CONV_PREFILLS:
                xs = cx[:P].t()[None]
                full = F.pad(xs, (CONV_K - P, 0)) if P < CONV_K else xs  # DynamicCache.update_conv_state
                state = full[..., -CONV_K:].clone()
                o_pre = M.causal_conv1d_fn(full, cw, None, activation="silu")[..., -P:]
                steps = [M.causal_conv1d_update(cx[t:t + 1].t()[None], state, cw, None, "silu")
                         for t in range(P, CONV_T)]
                p(f"conv.prefill{P}", torch.cat([o_pre] + steps, dim=-1)[0].t())
                p(f"conv.state{P}", state[0])
            # the gated RMSNorm, and l2norm
            norm = M.Qwen3NextRMSNormGated(DV, eps=NORM_EPS)
            norm.weight.data = x["norm_w"].clone()
            for name in ("norm_x", "norm_z", "norm_w"):
                p(name, x[name])
            p("norm.out", norm(x["norm_x"], x["norm_z"]))
            # the layer's mixer: Qwen3NextGatedDeltaNet.forward without a cache, from in_proj_qkvz / in_proj_ba's
            # outputs to out_proj's input (module hooks), 2 key heads, 4 value heads
            for name, t in layer_case(dt, 9 if dn == "f32" else 10).items():
                p("layer." + name, t)
            if dn == "f32":  # torch's fp32 sums at the layer's real sizes, on generated values
                for (n, m) in SUM_OUTER:
                    p(f"sum.outer{n}x{m}", gen_values(n * m).view(n, m).sum(0))
                for n in SUM_INNER:
                    p(f"sum.inner{n}", gen_values(n).sum(0, keepdim=True))
            if dn == "f32":  # l2norm runs in fp32 whatever the dtype
                p("l2.x", x["l2_x"].float())
                p("l2.out", M.l2norm(x["l2_x"].float(), dim=-1, eps=1e-6))
                p("l2.x128", x["l2_x128"].float())
                p("l2.out128", M.l2norm(x["l2_x128"].float(), dim=-1, eps=1e-6))
    return {k: v.contiguous() for k, v in out.items()}


def child(mode, path):
    t = run(mode)
    torch.save(t, path)
    print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability()}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(REPO, "data", "fixtures", "gdn_ops"))
    ap.add_argument("--child", choices=["libm", "native"])
    ap.add_argument("--child-out")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.child_out)
        return
    from st_canonical import save_safetensors_canonical

    os.makedirs(args.out, exist_ok=True)
    tensors, caps = {}, {}
    for mode in ("libm", "native"):
        env = dict(os.environ)
        env.pop("ATEN_CPU_CAPABILITY", None)
        if mode == "libm":
            env["ATEN_CPU_CAPABILITY"] = "default"
        tmp = os.path.join(args.out, f".{mode}.pt")
        r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode, "--child-out", tmp],
                           env=env, check=True, capture_output=True, text=True)
        caps[mode] = json.loads(r.stdout.strip().splitlines()[-1])["capability"]
        t = torch.load(tmp)
        os.remove(tmp)
        for k, v in t.items():
            if mode == "libm":
                tensors[k] = v
            elif k in ("f32.rec.out", "f32.chunk64.out"):
                tensors["native." + k] = v[:NATIVE_T].contiguous()  # the native run: fp32, the first rows
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    meta = {
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        "numpy_version": np.__version__, "glibc": " ".join(platform.libc_ver()),
        "capability_libm": caps["libm"], "capability_native": caps["native"], "cpu": cpu,
        "shape": json.dumps({"T": T_FULL, "Hk": HK, "Hv": HV, "dk": DK, "dv": DV, "lengths": LENGTHS,
                             "chunks": CHUNKS, "gqa": [GQA_T, GQA_HV, GQA_CHUNK], "prefill": PREFILL,
                             "conv": [CONV_C, CONV_K, CONV_T, list(CONV_PREFILLS)], "norm": [NORM_N, NORM_EPS],
                             "layer": LAYER}),
    }
    path = os.path.join(args.out, "gdn_ops.safetensors")
    save_safetensors_canonical(tensors, path, meta)
    with open(os.path.join(args.out, "VERSIONS"), "w") as f:
        for k in sorted(meta):
            f.write(f"{k}: {meta[k]}\n")
    g = tensors["f32.g"]
    orders = mkl_orders()
    # torch's exp (MKL) against glibc's expf on 20000 fp32 values, N(0, 5^2)
    xs = torch.from_numpy((np.random.default_rng(0).standard_normal(20000) * 5).astype(np.float32))
    e_t, e_g = torch.exp(xs), glibc_exp(xs)
    exp_diff = int((e_t != e_g).sum())
    exp_ulp = int((e_t.view(torch.int32).long() - e_g.view(torch.int32).long()).abs().max())
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("# Gated DeltaNet op cases (fp32, bf16)\n\n")
        f.write("Written by `python3 tools/make_gdn_op_fixtures.py` (its docstring says what each tensor is and why "
                "there are two runs) with torch {}, transformers {}, numpy {}, {} (pins: "
                "`tools/requirements-fixtures.txt`; all versions, the CPU and the capabilities in `VERSIONS`), on "
                "the CPU, one thread. Checked by `tests/test_gdn.c`; the rules are in "
                "[docs/numerics.md](../../../docs/numerics.md#gated-deltanet).\n\n".format(
                    torch.__version__, transformers.__version__, np.__version__, " ".join(platform.libc_ver())))
        f.write("| case | heads k / v | head dims k / v | lengths | chunk | dtypes |\n|---|---|---|---|---|---|\n")
        f.write(f"| chunked form, from zeros | {HK} / {HV} | {DK} / {DV} | {', '.join(map(str, LENGTHS))} | "
                f"{', '.join(map(str, CHUNKS))} | fp32, bf16 |\n")
        f.write(f"| recurrent form, from zeros | {HK} / {HV} | {DK} / {DV} | {T_FULL} | - | fp32, bf16 |\n")
        f.write(f"| both forms from a given state | {HK} / {HV} | {DK} / {DV} | {INIT_T} | 16 | fp32, bf16 |\n")
        f.write(f"| chunked prefill then one recurrent call per token (state fp32, and bf16) | {HK} / {HV} | "
                f"{DK} / {DV} | {PREFILL} + {T_FULL - PREFILL} | 64 | fp32, bf16 |\n")
        f.write(f"| GQA, both forms | {HK} / {GQA_HV} | {DK} / {DV} | {GQA_T} | {GQA_CHUNK} | fp32 |\n")
        f.write(f"| causal depthwise conv + SiLU: whole sequence; prefill of {CONV_PREFILLS} then steps | "
                f"{CONV_C} channels, kernel {CONV_K} | - | {CONV_T} | - | fp32, bf16 |\n")
        f.write(f"| the layer's mixer (Qwen3NextGatedDeltaNet, projections' outputs to out_proj's input), without and "
                f"with transformers' cache (a prefill of {LAYER_PREFILL}, then one call per token) | "
                f"{LAYER['hk']} / {LAYER['hv']} | {LAYER['dk']} / {LAYER['dv']} | {LAYER['T']} | 64 | fp32, bf16 |\n")
        f.write(f"| gated RMSNorm | - | - / {DV} | {NORM_N} rows | - | fp32, bf16 |\n")
        f.write(f"| l2norm | - | {DK}, 128 / - | 16, 2 rows | - | fp32 |\n")
        f.write("| torch's fp32 sums (generated values) | - | rows of " +
                ", ".join(f"{n} x {m}" for n, m in SUM_OUTER) + "; " + ", ".join(map(str, SUM_INNER)) +
                " contiguous | - | - | fp32 |\n\n")
        f.write("Mean decay g per head (fp32 case): " + ", ".join(f"{float(g[:, h].mean()):.3g}" for h in range(HV)) +
                ". `native.*`: the fp32 outputs of transformers' unchanged functions (MKL's exp, the CPU's own "
                f"capability), their first {NATIVE_T} tokens.\n\n")
        f.write("MKL's orders on this CPU (the fused multiply-add chains and the 48-row blocks that "
                "`src/engine/gdn.c` writes, against torch's `@` and `solve_triangular`, random fp32 inputs):\n\n"
                "| product | outputs that differ |\n|---|---|\n")
        f.write("".join(f"| {name} | {d} of {n} |\n" for name, d, n in orders) + "\n")
        f.write(f"torch.exp and glibc's expf differ on {exp_diff} of {xs.numel()} fp32 values drawn from N(0, 25) "
                f"(by at most {exp_ulp} ulp), on this CPU ({caps['native']}).\n")
    print(f"{path}: {len(tensors)} tensors, {os.path.getsize(path)} bytes; capabilities {caps}")


if __name__ == "__main__":
    main()
