#!/usr/bin/env python3
"""Generate the ratiocheck test fixtures under data/fixtures/.

Each fixture is a tiny, randomly initialised Hugging Face causal LM built with
HF's own model classes and written with ``save_pretrained`` (config.json +
model.safetensors, or shards + model.safetensors.index.json), plus a
``reference.safetensors`` holding HF's reference outputs (full-forward
log-probs and greedy, KV-cached ``generate`` log-probs, in fp32 and fp64).
The C tests read these files without Python.

Usage:
    pip install -r tools/requirements-fixtures.txt
    python3 tools/make_fixtures.py                 # writes data/fixtures/
    python3 tools/make_fixtures.py --out /tmp/fx   # somewhere else (e.g. to diff)
    python3 tools/make_fixtures.py --only llama_gqa

Everything is seeded and runs single-threaded on the CPU, so two runs with the
same package versions produce byte-identical files.

fp64 references ("true fp64")
-----------------------------
HF's modelling code is not pure fp64 after ``model.double()``: the eager
attention softmax is computed with ``dtype=torch.float32``, RMSNorm upcasts to
(and so, for fp64 inputs, *downcasts* to) float32, the rotary inv_freq is
computed in float32 and cos/sin are evaluated in float32, and ``generate``
casts the next-token logits to float32.  To get a reference for the fp64
computation of the *same* model, the fp64 runs here use the HF modules with
those four float32 round trips removed (see ``true_fp64``): softmax stays in
the input dtype, RMSNorm uses the identical formula without the casts, RoPE
inv_freq is recomputed in float64 from the config by the same formulas HF uses
(default / linear / llama3; checked against HF's float32 values), cos/sin are
evaluated in float64, and the per-step logits are taken from a hook on the
lm_head (before generate's float32 cast).  A TorchDispatchMode checks that no
floating-point tensor other than float64 is produced inside the model's
forward during those runs.  The difference to plain ``model.double()`` is
measured and written to the README.
"""

import argparse
import collections
import contextlib
import copy
import hashlib
import json
import math
import os
import platform
import shutil
import types

os.environ["CUDA_VISIBLE_DEVICES"] = ""  # CPU only, before torch is imported
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from safetensors import safe_open  # noqa: E402
from st_canonical import save_safetensors_canonical  # noqa: E402
from torch.utils import _pytree as pytree  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from transformers import (  # noqa: E402
    GenerationConfig,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO_ROOT, "data", "fixtures")

N_GEN = 12                       # new tokens per greedy prompt
FWD_LENGTHS = [7, 24, 13, 1]     # full-forward sequences (one has length 1)
GEN_PROMPT_LENGTHS = [3, 9, 1, 6]
MIN_MARGIN = 1e-3                # required top1-top2 fp64 logit gap at every greedy step
SELF_CONSISTENCY_TOL_F64 = 1e-10 # cached decode vs no-cache forward, fp64
SELF_CONSISTENCY_TOL_F32 = 1e-4  # same, fp32 (sanity only)
NUMPY_SPEC_TOL = 1e-11           # independent numpy fp64 implementation vs fp64 references
PERTURB_STD = 0.1                # LN/RMSNorm weight = 1 + 0.1*randn, every bias = 0.1*randn
INIT_RANGE = 0.12               # std of HF's init: non-flat distributions with an fp32 noise floor (HF fp32 vs fp64) of at most 4e-6


# --------------------------------------------------------------------------
# Fixture definitions
# --------------------------------------------------------------------------

COMMON_TOKENS = dict(bos_token_id=1, eos_token_id=2, pad_token_id=None)

FIXTURES = [
    dict(
        name="neox_parallel",
        seed=1001,
        model_cls=GPTNeoXForCausalLM,
        config_cls=GPTNeoXConfig,
        config=dict(
            vocab_size=320,  # treated as "padded beyond the tokenizer"
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=128,
            hidden_act="gelu",
            max_position_embeddings=64,
            initializer_range=INIT_RANGE,
            layer_norm_eps=1e-5,
            use_parallel_residual=True,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="GPT-NeoX, parallel residual, rotary_pct 0.25, gelu, untied embed_out, vocab 320, fp32",
    ),
    dict(
        name="neox_sequential",
        seed=2004,
        model_cls=GPTNeoXForCausalLM,
        config_cls=GPTNeoXConfig,
        config=dict(
            vocab_size=288,
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            intermediate_size=128,
            hidden_act="gelu",
            max_position_embeddings=64,
            initializer_range=INIT_RANGE,
            layer_norm_eps=1e-6,
            use_parallel_residual=False,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000.0, partial_rotary_factor=0.5),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="GPT-NeoX, sequential residual, rotary_pct 0.5, rope base 1000, gelu, untied, vocab 288, fp32",
    ),
    dict(
        name="llama_gqa",
        seed=3003,
        model_cls=LlamaForCausalLM,
        config_cls=LlamaConfig,
        config=dict(
            vocab_size=256,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            intermediate_size=128,
            hidden_act="silu",
            max_position_embeddings=512,
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-5,
            tie_word_embeddings=True,
            attention_bias=False,
            mlp_bias=False,
            rope_parameters=dict(
                rope_type="llama3",
                rope_theta=10000.0,
                factor=8.0,
                low_freq_factor=1.0,
                high_freq_factor=4.0,
                original_max_position_embeddings=64,
            ),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Llama, GQA 4q/2kv, head_dim 16, tied embeddings, llama3 rope scaling (factor 8, orig ctx 64), fp32",
    ),
    dict(
        name="qwen2_bias",
        seed=4004,
        model_cls=Qwen2ForCausalLM,
        config_cls=Qwen2Config,
        config=dict(
            vocab_size=300,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=128,
            hidden_act="silu",
            max_position_embeddings=512,
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-6,
            tie_word_embeddings=True,
            use_sliding_window=False,
            sliding_window=None,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=200_000,  # bytes -> 3 shards + model.safetensors.index.json
        description="Qwen2, q/k/v bias, GQA 4q/2kv, tied embeddings, rope_theta 1e6, fp32, saved sharded",
    ),
    dict(
        name="mistral_headdim",
        seed=5005,
        model_cls=MistralForCausalLM,
        config_cls=MistralConfig,
        config=dict(
            vocab_size=264,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,  # != hidden_size / num_attention_heads (16)
            intermediate_size=128,
            hidden_act="silu",
            max_position_embeddings=512,
            initializer_range=INIT_RANGE,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            sliding_window=None,
            rope_parameters=dict(rope_type="linear", rope_theta=10000.0, factor=2.0),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.float32,
        max_shard_size=None,
        description="Mistral, explicit head_dim 32 (hidden 64, 4 heads), GQA 4q/2kv, linear rope x2, untied lm_head, fp32",
    ),
    dict(
        name="neox_bf16",
        seed=6011,
        model_cls=GPTNeoXForCausalLM,
        config_cls=GPTNeoXConfig,
        config=dict(
            vocab_size=320,
            hidden_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=128,
            hidden_act="gelu",
            max_position_embeddings=64,
            initializer_range=INIT_RANGE,
            layer_norm_eps=1e-5,
            use_parallel_residual=True,
            attention_bias=True,
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.25),
            **COMMON_TOKENS,
        ),
        save_dtype=torch.bfloat16,
        max_shard_size=None,
        description="GPT-NeoX, parallel residual, weights stored in bf16; references are fp32/fp64 on the bf16-rounded weights",
    ),
]


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------

def set_determinism():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    try:
        import huggingface_hub.utils as hub_utils

        hub_utils.disable_progress_bars()
    except Exception:
        pass


def is_norm_module(m):
    name = type(m).__name__
    return isinstance(m, torch.nn.LayerNorm) or "LayerNorm" in name or "RMSNorm" in name


def perturb_norms_and_biases(model, seed):
    """HF inits norm weights to 1 and all biases to 0; make them non-trivial."""
    g = torch.Generator().manual_seed(seed)
    counts = collections.Counter()
    with torch.no_grad():
        for mname, m in model.named_modules():
            norm = is_norm_module(m)
            for pname, p in m.named_parameters(recurse=False):
                if norm and pname == "weight":
                    p.copy_(1.0 + PERTURB_STD * torch.randn(p.shape, generator=g, dtype=torch.float32))
                    counts["norm_weight"] += 1
                elif pname == "bias":
                    p.copy_(PERTURB_STD * torch.randn(p.shape, generator=g, dtype=torch.float32))
                    counts["norm_bias" if norm else "bias"] += 1
    return counts


def rope_inv_freq_f64(config):
    """RoPE inverse frequencies in float64, same formulas as transformers' rope init functions."""
    rp = config.rope_parameters
    base = float(rp["rope_theta"])
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    rtype = rp.get("rope_type", "default")
    if rtype == "default":
        return inv
    if rtype == "linear":
        return inv / float(rp["factor"])
    if rtype == "llama3":
        factor = float(rp["factor"])
        lff = float(rp["low_freq_factor"])
        hff = float(rp["high_freq_factor"])
        old = float(rp["original_max_position_embeddings"])
        low_wl = old / lff
        high_wl = old / hff
        wl = 2 * math.pi / inv
        inv_l = torch.where(wl > low_wl, inv / factor, inv)
        smooth = (old / wl - lff) / (hff - lff)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wl < high_wl) * ~(wl > low_wl)
        return torch.where(medium, smoothed, inv_l)
    raise NotImplementedError(rtype)


def llama3_regimes(config):
    rp = config.rope_parameters
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    inv = 1.0 / (float(rp["rope_theta"]) ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    wl = 2 * math.pi / inv
    old = float(rp["original_max_position_embeddings"])
    low_wl = old / float(rp["low_freq_factor"])
    high_wl = old / float(rp["high_freq_factor"])
    out = []
    for w in wl.tolist():
        out.append("high(unscaled)" if w < high_wl else ("low(/factor)" if w > low_wl else "medium(smoothed)"))
    return out, wl.tolist()


class LowPrecisionDetector(TorchDispatchMode):
    """Records every op that produces a floating tensor that is not float64."""

    def __init__(self):
        super().__init__()
        self.hits = collections.Counter()

    def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64:
                self.hits[f"{func}->{t.dtype}"] += 1
        return out


def _rms_forward_f64(self, hidden_states):
    # Identical to HF's *RMSNorm.forward minus the float32 round trip.
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
    return self.weight * hidden_states


def _rope_forward_f64(self, x, position_ids):
    # Identical to HF's *RotaryEmbedding.forward, evaluated in float64.
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(device=x.device, dtype=torch.float64)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * self.attention_scaling
    sin = emb.sin() * self.attention_scaling
    return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def make_true_fp64(model64, hf_inv_freq_f32):
    """Patch an fp64 model instance so that its forward is float64 throughout (see module doc)."""
    inv64 = rope_inv_freq_f64(model64.config)
    n_rope = n_rms = 0
    for m in model64.modules():
        cname = type(m).__name__
        if "RMSNorm" in cname:
            m.forward = types.MethodType(_rms_forward_f64, m)
            n_rms += 1
        elif "RotaryEmbedding" in cname:
            assert getattr(m, "rope_type", "default") in ("default", "linear", "llama3"), m.rope_type
            assert m.attention_scaling == 1.0
            rel = ((hf_inv_freq_f32.double() - inv64).abs() / inv64).max().item()
            assert rel < 1e-6, f"fp64 inv_freq does not match HF's fp32 inv_freq (rel {rel})"
            m.inv_freq = inv64.clone()
            m.original_inv_freq = inv64.clone()
            m.forward = types.MethodType(_rope_forward_f64, m)
            n_rope += 1
    assert n_rope >= 1
    return dict(rms_patched=n_rms, rope_patched=n_rope)


@contextlib.contextmanager
def fp64_softmax():
    """HF's eager attention calls softmax(..., dtype=torch.float32); keep fp64 inputs in fp64."""
    orig = torch.nn.functional.softmax

    def softmax(input, dim=None, _stacklevel=3, dtype=None):
        if dtype == torch.float32 and input.dtype == torch.float64:
            dtype = torch.float64
        return orig(input, dim=dim, _stacklevel=_stacklevel, dtype=dtype)

    torch.nn.functional.softmax = softmax
    try:
        yield
    finally:
        torch.nn.functional.softmax = orig


@contextlib.contextmanager
def checked_fp64_forward(model):
    """Softmax patch + assert that nothing inside model.forward produces a non-fp64 float tensor."""
    det = LowPrecisionDetector()

    def pre(mod, args, kwargs):
        det.__enter__()

    def post(mod, args, kwargs, out):
        det.__exit__(None, None, None)

    h1 = model.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = model.register_forward_hook(post, with_kwargs=True)
    try:
        with fp64_softmax():
            yield det
    finally:
        h1.remove()
        h2.remove()
    assert not det.hits, f"low-precision ops inside fp64 forward: {dict(det.hits)}"


def count_low_precision_ops(model, ids):
    det = LowPrecisionDetector()
    with torch.no_grad(), det:
        model(ids)
    return sum(det.hits.values()), sorted(det.hits)


def forward_logprobs(model, ids_list, dtype):
    out = []
    with torch.no_grad():
        for ids in ids_list:
            logits = model(torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0]
            assert logits.dtype == dtype, logits.dtype
            out.append(F.log_softmax(logits.to(dtype), dim=-1))
    return out


def greedy_generate(model, prompt, dtype):
    """HF generate (greedy, KV cache). Returns tokens, per-step logits in `dtype`, and checks."""
    captured = []
    head = model.get_output_embeddings()

    def hook(mod, args, out):
        captured.append(out[:, -1, :].detach().clone())

    h = head.register_forward_hook(hook)
    gc = GenerationConfig(
        do_sample=False,
        num_beams=1,
        use_cache=True,
        max_new_tokens=N_GEN,
        min_new_tokens=N_GEN,
        output_scores=True,
        output_logits=True,
        return_dict_in_generate=True,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    saved_gc = model.generation_config
    model.generation_config = gc  # no model-level defaults (eos etc.) can sneak in
    try:
        input_ids = torch.tensor([prompt], dtype=torch.long)
        with torch.no_grad():
            out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), generation_config=gc)
    finally:
        h.remove()
        model.generation_config = saved_gc
    seq = out.sequences[0]
    assert seq.shape[0] == len(prompt) + N_GEN, seq.shape
    assert seq[: len(prompt)].tolist() == prompt
    new = seq[len(prompt):]
    assert len(out.scores) == N_GEN and len(out.logits) == N_GEN
    assert len(captured) >= N_GEN, len(captured)
    logits = torch.stack([c[0] for c in captured[:N_GEN]])  # [N, V], model dtype
    for i in range(N_GEN):
        # no logits processor changed anything
        assert torch.equal(out.scores[i], out.logits[i]), "logits processor altered scores"
        # hooked logits are what generate saw (after its float32 cast)
        assert torch.equal(logits[i].to(torch.float32), out.logits[i][0]), "hooked logits != generate logits"
        assert int(torch.argmax(logits[i])) == int(new[i]), "greedy token != argmax of logits"
    assert logits.dtype == dtype
    return new.to(torch.int32), logits


def pad_tokens(seqs):
    tmax = max(len(s) for s in seqs)
    t = torch.full((len(seqs), tmax), -1, dtype=torch.int32)
    for b, s in enumerate(seqs):
        t[b, : len(s)] = torch.tensor(s, dtype=torch.int32)
    return t


def pad_logprobs(lps, dtype):
    tmax = max(lp.shape[0] for lp in lps)
    V = lps[0].shape[1]
    t = torch.full((len(lps), tmax, V), float("nan"), dtype=dtype)
    for b, lp in enumerate(lps):
        t[b, : lp.shape[0]] = lp.to(dtype)
    return t


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def versions():
    return dict(
        python=platform.python_version(),
        torch=torch.__version__,
        transformers=transformers.__version__,
        safetensors=safetensors.__version__,
        numpy=np.__version__,
    )


# --------------------------------------------------------------------------
# Independent check: plain-numpy fp64 implementation that reads only the files
# in the fixture folder (config.json + *.safetensors), like the C code will.
# It doubles as an executable statement of the math the references encode.
# --------------------------------------------------------------------------

_verf = np.vectorize(math.erf)


def _np_load_weights(d):
    W = {}
    for fn in sorted(os.listdir(d)):
        if fn.startswith("model") and fn.endswith(".safetensors"):
            with safe_open(os.path.join(d, fn), framework="pt") as f:
                for k in f.keys():
                    W[k] = f.get_tensor(k).to(torch.float64).numpy()  # bf16/fp32 -> fp64 exactly
    return W


def _np_inv_freq(cfg, head_dim):
    rp = cfg["rope_parameters"]
    dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
    inv = 1.0 / float(rp["rope_theta"]) ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    if rp["rope_type"] == "linear":
        inv = inv / rp["factor"]
    elif rp["rope_type"] == "llama3":
        f, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
        old = rp["original_max_position_embeddings"]
        out = []
        for x in inv:
            wl = 2 * math.pi / x
            if wl < old / hi:
                out.append(x)
            elif wl > old / lo:
                out.append(x / f)
            else:
                sm = (old / wl - lo) / (hi - lo)
                out.append((1 - sm) * x / f + sm * x)
        inv = np.array(out)
    else:
        assert rp["rope_type"] == "default"
    return inv


def _np_rope(x, inv):  # x [T, H, D]; rotate the first 2*len(inv) dims, "rotate_half" layout
    T, r = x.shape[0], 2 * len(inv)
    ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    xr, xp = x[..., :r], x[..., r:]
    rot = np.concatenate([-xr[..., r // 2:], xr[..., : r // 2]], -1)
    return np.concatenate([xr * cos + rot * sin, xp], -1)


def _np_attn(q, k, v, scale):  # q [T,H,D], k/v [T,KV,D] -> [T, H*D]
    T, H, _ = q.shape
    rep = H // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)
    s = np.einsum("thd,shd->hts", q, k) * scale + np.triu(np.full((T, T), -np.inf), 1)[None]
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v).reshape(T, -1)


def _np_ln(x, w, b, eps):
    m = x.mean(-1, keepdims=True)
    var = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(var + eps) * w + b


def _np_rms(x, w, eps):
    return w * (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps))


def _np_lin(x, W, k):
    y = x @ W[k + ".weight"].T
    return y + W[k + ".bias"] if (k + ".bias") in W else y


def _np_log_softmax(z):
    m = z.max(-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(-1, keepdims=True))


def np_forward_logprobs(cfg, W, ids):
    T = len(ids)
    if cfg["model_type"] == "gpt_neox":
        H = cfg["num_attention_heads"]
        D = cfg["hidden_size"] // H
        eps = cfg["layer_norm_eps"]
        assert cfg["hidden_act"] == "gelu"  # exact (erf) GELU
        inv = _np_inv_freq(cfg, D)
        x = W["gpt_neox.embed_in.weight"][ids]
        for layer in range(cfg["num_hidden_layers"]):
            p = f"gpt_neox.layers.{layer}."

            def ln1(z):
                return _np_ln(z, W[p + "input_layernorm.weight"], W[p + "input_layernorm.bias"], eps)

            def ln2(z):
                return _np_ln(z, W[p + "post_attention_layernorm.weight"], W[p + "post_attention_layernorm.bias"], eps)

            def mlp(z):
                h = _np_lin(z, W, p + "mlp.dense_h_to_4h")
                return _np_lin(0.5 * h * (1 + _verf(h / math.sqrt(2))), W, p + "mlp.dense_4h_to_h")

            # fused QKV, per-head interleaved: row blocks [q_h | k_h | v_h] for h = 0..H-1
            qkv = _np_lin(ln1(x), W, p + "attention.query_key_value").reshape(T, H, 3 * D)
            q, k, v = _np_rope(qkv[..., :D], inv), _np_rope(qkv[..., D:2 * D], inv), qkv[..., 2 * D:]
            a = _np_lin(_np_attn(q, k, v, D ** -0.5), W, p + "attention.dense")
            if cfg["use_parallel_residual"]:
                x = x + a + mlp(ln2(x))
            else:
                x = x + a
                x = x + mlp(ln2(x))
        x = _np_ln(x, W["gpt_neox.final_layer_norm.weight"], W["gpt_neox.final_layer_norm.bias"], eps)
        return _np_log_softmax(x @ W["embed_out.weight"].T)
    # llama / qwen2 / mistral
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = cfg.get("head_dim") or cfg["hidden_size"] // H
    eps = cfg["rms_norm_eps"]
    assert cfg["hidden_act"] == "silu"
    inv = _np_inv_freq(cfg, D)
    x = W["model.embed_tokens.weight"][ids]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = _np_rms(x, W[p + "input_layernorm.weight"], eps)
        q = _np_rope(_np_lin(h, W, p + "self_attn.q_proj").reshape(T, H, D), inv)
        k = _np_rope(_np_lin(h, W, p + "self_attn.k_proj").reshape(T, KV, D), inv)
        v = _np_lin(h, W, p + "self_attn.v_proj").reshape(T, KV, D)
        x = x + _np_lin(_np_attn(q, k, v, D ** -0.5), W, p + "self_attn.o_proj")
        h = _np_rms(x, W[p + "post_attention_layernorm.weight"], eps)
        g = _np_lin(h, W, p + "mlp.gate_proj")
        x = x + _np_lin(g / (1 + np.exp(-g)) * _np_lin(h, W, p + "mlp.up_proj"), W, p + "mlp.down_proj")
    x = _np_rms(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    if cfg["tie_word_embeddings"]:
        assert "lm_head.weight" not in W
    return _np_log_softmax(x @ head.T)


def numpy_spec_check(out_dir):
    """Max |numpy fp64 - stored fp64 reference| over forward and generated log-probs."""
    with open(os.path.join(out_dir, "config.json")) as f:
        cfg = json.load(f)
    W = _np_load_weights(out_dir)
    R = {}
    with safe_open(os.path.join(out_dir, "reference.safetensors"), framework="pt") as f:
        for k in f.keys():
            R[k] = f.get_tensor(k).numpy()
    err = 0.0
    for b, L in enumerate(R["lengths"]):
        lp = np_forward_logprobs(cfg, W, R["tokens"][b, :L])
        err = max(err, float(np.abs(lp - R["forward_logprobs_f64"][b, :L]).max()))
        assert np.isnan(R["forward_logprobs_f64"][b, L:]).all() and np.isnan(R["forward_logprobs_f32"][b, L:]).all()
        assert (R["tokens"][b, L:] == -1).all()
    for b, P in enumerate(R["gen_prompt_lengths"]):
        seq = np.concatenate([R["gen_prompts"][b, :P], R["gen_tokens_f64"][b, :-1]])
        lp = np_forward_logprobs(cfg, W, seq)[P - 1:]
        err = max(err, float(np.abs(lp - R["gen_logprobs_f64"][b]).max()))
        assert (lp.argmax(-1) == R["gen_tokens_f64"][b]).all()
    return err


# --------------------------------------------------------------------------
# One fixture
# --------------------------------------------------------------------------

def build_fixture(spec, out_root):
    name, seed = spec["name"], spec["seed"]
    out_dir = os.path.join(out_root, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)

    # ---- build + perturb + save ------------------------------------------------
    torch.manual_seed(seed)
    config = spec["config_cls"](**copy.deepcopy(spec["config"]), attn_implementation="eager")
    model = spec["model_cls"](config).eval()
    assert model.config._attn_implementation == "eager"
    perturb_counts = perturb_norms_and_biases(model, seed + 1)

    save_model = model if spec["save_dtype"] == torch.float32 else copy.deepcopy(model).to(spec["save_dtype"])
    kw = {} if spec["max_shard_size"] is None else dict(max_shard_size=spec["max_shard_size"])
    save_model.save_pretrained(out_dir, **kw)

    # ---- reload from disk in fp32 (bf16 -> fp32 is exact widening) -------------
    ref32 = spec["model_cls"].from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager").eval()
    assert ref32.config._attn_implementation == "eager"
    mem = dict(model.named_parameters())
    for pname, p in ref32.named_parameters():
        expect = mem[pname].detach().to(spec["save_dtype"]).to(torch.float32)
        assert torch.equal(p.detach(), expect), f"reloaded {pname} differs"
    if config.tie_word_embeddings:
        assert ref32.get_output_embeddings().weight is ref32.get_input_embeddings().weight
    else:
        assert ref32.get_output_embeddings().weight is not ref32.get_input_embeddings().weight

    # Biases really non-zero?
    for pname, p in ref32.named_parameters():
        if pname.endswith("bias"):
            assert p.abs().min().item() > 0 and p.abs().max().item() > 1e-2, pname

    rope_mod = [m for m in ref32.modules() if "RotaryEmbedding" in type(m).__name__]
    assert len(rope_mod) == 1
    hf_inv_freq = rope_mod[0].inv_freq.detach().clone()

    ref64 = copy.deepcopy(ref32).double().eval()
    native64 = copy.deepcopy(ref32).double().eval()  # plain model.double(), for comparison only
    patch_info = make_true_fp64(ref64, hf_inv_freq)

    V = config.vocab_size
    g = torch.Generator().manual_seed(seed + 2)
    fwd_seqs = [torch.randint(0, V, (L,), generator=g).tolist() for L in FWD_LENGTHS]
    gen_prompts = [torch.randint(0, V, (L,), generator=g).tolist() for L in GEN_PROMPT_LENGTHS]

    # ---- full forward ----------------------------------------------------------
    fwd32 = forward_logprobs(ref32, fwd_seqs, torch.float32)
    with checked_fp64_forward(ref64):
        fwd64 = forward_logprobs(ref64, fwd_seqs, torch.float64)
    fwd64_native = forward_logprobs(native64, fwd_seqs, torch.float64)
    n_lowp_native, lowp_ops_native = count_low_precision_ops(native64, torch.tensor([fwd_seqs[1]]))

    # ---- greedy generate -------------------------------------------------------
    gen_tok32, gen_lp32, gen_tok64, gen_lp64, margins = [], [], [], [], []
    sc64 = sc32 = 0.0
    for prompt in gen_prompts:
        t32, l32 = greedy_generate(ref32, prompt, torch.float32)
        with checked_fp64_forward(ref64):
            t64, l64 = greedy_generate(ref64, prompt, torch.float64)
        top2 = torch.topk(l64, 2, dim=-1).values
        margins.append(top2[:, 0] - top2[:, 1])
        lp32 = F.log_softmax(l32, dim=-1)
        lp64 = F.log_softmax(l64, dim=-1)
        gen_tok32.append(t32)
        gen_tok64.append(t64)
        gen_lp32.append(lp32)
        gen_lp64.append(lp64)

        # self-consistency: no-cache forward over prompt + generated tokens
        full = prompt + t64.tolist()[:-1]
        P = len(prompt)
        with checked_fp64_forward(ref64):
            (f64,) = forward_logprobs(ref64, [full], torch.float64)
        sc64 = max(sc64, (f64[P - 1:] - lp64).abs().max().item())
        (f32,) = forward_logprobs(ref32, [prompt + t32.tolist()[:-1]], torch.float32)
        sc32 = max(sc32, (f32[P - 1:] - lp32).abs().max().item())

    margins = torch.stack(margins)  # [B, N] float64
    min_margin = margins.min().item()
    tokens_agree = all(torch.equal(a, b) for a, b in zip(gen_tok32, gen_tok64))

    assert min_margin > MIN_MARGIN, f"{name}: min greedy margin {min_margin:.3g} <= {MIN_MARGIN}; change seed"
    assert sc64 < SELF_CONSISTENCY_TOL_F64, f"{name}: fp64 cached vs forward {sc64:.3g}"
    assert sc32 < SELF_CONSISTENCY_TOL_F32, f"{name}: fp32 cached vs forward {sc32:.3g}"
    assert tokens_agree, f"{name}: fp32 and fp64 greedy tokens differ"
    for lp in fwd32 + fwd64 + gen_lp32 + gen_lp64:
        assert torch.isfinite(lp).all()

    # ---- statistics for the README ---------------------------------------------
    fwd_diff_32_64 = max((a.double() - b).abs().max().item() for a, b in zip(fwd32, fwd64))
    fwd_diff_native = max((a - b).abs().max().item() for a, b in zip(fwd64_native, fwd64))
    all_lp64 = torch.cat(fwd64 + gen_lp64)
    top_p = all_lp64.max(-1).values.exp()
    logit_std = torch.cat([l.std(-1) for l in gen_lp64]).mean().item()

    # ---- reference.safetensors ----------------------------------------------
    tensors = {
        "tokens": pad_tokens(fwd_seqs),
        "lengths": torch.tensor(FWD_LENGTHS, dtype=torch.int32),
        "forward_logprobs_f32": pad_logprobs(fwd32, torch.float32),
        "forward_logprobs_f64": pad_logprobs(fwd64, torch.float64),
        "gen_prompts": pad_tokens(gen_prompts),
        "gen_prompt_lengths": torch.tensor(GEN_PROMPT_LENGTHS, dtype=torch.int32),
        "gen_tokens_f32": torch.stack(gen_tok32).to(torch.int32),
        "gen_logprobs_f32": torch.stack(gen_lp32).to(torch.float32).contiguous(),
        "gen_tokens_f64": torch.stack(gen_tok64).to(torch.int32),
        "gen_logprobs_f64": torch.stack(gen_lp64).to(torch.float64).contiguous(),
        "gen_margin_f64": margins.to(torch.float64).contiguous(),
    }
    v = versions()
    metadata = {
        "fixture": name,
        "description": spec["description"],
        "seed": str(seed),
        "n_gen": str(N_GEN),
        "python_version": v["python"],
        "torch_version": v["torch"],
        "transformers_version": v["transformers"],
        "safetensors_version": v["safetensors"],
        "numpy_version": v["numpy"],
        "weights_dtype": str(spec["save_dtype"]).replace("torch.", ""),
        "fp64_mode": "true fp64: HF modules with fp32 softmax/RMSNorm/RoPE round trips removed",
        "min_margin_f64": repr(min_margin),
        "selfcheck_cached_vs_forward_f64": repr(sc64),
        "selfcheck_cached_vs_forward_f32": repr(sc32),
    }
    ref_path = os.path.join(out_dir, "reference.safetensors")
    save_safetensors_canonical(tensors, ref_path, metadata)

    # read back
    with safe_open(ref_path, framework="pt") as f:
        assert f.metadata() == metadata
        for k, t in tensors.items():
            assert torch.equal(f.get_tensor(k).nan_to_num(7.0), t.nan_to_num(7.0)), k

    np_err = numpy_spec_check(out_dir)
    assert np_err < NUMPY_SPEC_TOL, f"{name}: numpy fp64 re-implementation differs by {np_err:.3g}"

    with open(os.path.join(out_dir, "config.json")) as f:
        written_cfg = json.load(f)

    files = {}
    for fn in sorted(os.listdir(out_dir)):
        files[fn] = os.path.getsize(os.path.join(out_dir, fn))

    summary = dict(
        name=name,
        seed=seed,
        description=spec["description"],
        arch=written_cfg.get("architectures", ["?"])[0],
        model_type=written_cfg["model_type"],
        layers=config.num_hidden_layers,
        hidden=config.hidden_size,
        heads=config.num_attention_heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        intermediate=config.intermediate_size,
        vocab=V,
        act=config.hidden_act,
        tied=bool(config.tie_word_embeddings),
        rope=written_cfg.get("rope_parameters"),
        rotary_dims=2 * hf_inv_freq.numel(),
        weights_dtype=metadata["weights_dtype"],
        sharded=spec["max_shard_size"] is not None,
        files=files,
        n_params=sum(p.numel() for p in ref32.parameters()),
        min_margin=min_margin,
        sc64=sc64,
        sc32=sc32,
        np_err=np_err,
        fwd_diff_32_64=fwd_diff_32_64,
        fwd_diff_native=fwd_diff_native,
        n_lowp_native=n_lowp_native,
        lowp_ops_native=lowp_ops_native,
        patch_info=patch_info,
        perturb=dict(perturb_counts),
        top_p_median=top_p.median().item(),
        top_p_max=top_p.max().item(),
        logprob_std=logit_std,
        written_cfg=written_cfg,
    )
    if written_cfg.get("rope_parameters", {}).get("rope_type") == "llama3":
        summary["llama3_regimes"] = llama3_regimes(config)
    return summary


# --------------------------------------------------------------------------
# README
# --------------------------------------------------------------------------

def fmt_size(n):
    return f"{n:,} B"


def write_readme(out_root, summaries):
    v = versions()
    L = []
    a = L.append
    a("# ratiocheck test fixtures")
    a("")
    a("Tiny randomly initialised Hugging Face causal LMs plus HF's reference outputs.")
    a("Everything here is generated by `tools/make_fixtures.py`; do not edit by hand")
    a("(this README is generated too).")
    a("")
    a("## Regenerating")
    a("")
    a("```sh")
    a("pip install -r tools/requirements-fixtures.txt")
    a("python3 tools/make_fixtures.py            # rewrites data/fixtures/")
    a("python3 tools/make_fixtures.py --out /tmp/fx && diff -r /tmp/fx data/fixtures   # determinism check")
    a("(cd data/fixtures && sha256sum -c SHA256SUMS)                                  # checksums")
    a("```")
    a("")
    a("The script is seeded, runs on the CPU with one thread and deterministic torch")
    a("algorithms; with the versions below two runs give byte-identical files. It asserts")
    a("its own checks (see below) and fails rather than writing questionable references.")
    a("")
    a("Versions used:")
    a("")
    for k in ("python", "torch", "transformers", "safetensors", "numpy"):
        a(f"- {k} {v[k]}")
    a("")
    a("## Layout")
    a("")
    a("Each `data/fixtures/<name>/` is exactly what `save_pretrained` wrote (`config.json`,")
    a("`generation_config.json`, `model.safetensors` or shards + `model.safetensors.index.json`),")
    a("plus `reference.safetensors`. `config.json` is left exactly as this transformers")
    a("version wrote it: rope settings live in a `rope_parameters` object")
    a("(`rope_type`, `rope_theta`, `partial_rotary_factor` for gpt_neox, `factor`, ...);")
    a("there is no top-level `rope_theta`, `rope_scaling`, `rotary_pct` or `rotary_emb_base`.")
    a("Tied models (`tie_word_embeddings: true`) store no lm_head weight.")
    a("")
    irs = sorted({str(sp["config"]["initializer_range"]) for sp in FIXTURES})
    a(f"All models: attn_implementation \"eager\", initializer_range {'/'.join(irs)} (peaked but finite")
    a(f"distributions), every LayerNorm/RMSNorm weight = 1 + {PERTURB_STD}·N(0,1) and every bias")
    a(f"(including LayerNorm biases and Qwen2 q/k/v biases) = {PERTURB_STD}·N(0,1), drawn under the seed")
    a("after HF's own init (which sets norms to 1 and biases to 0).")
    a("")
    a("## Fixtures")
    a("")
    a("| fixture | class | layers | hidden | heads | kv heads | head_dim | inter | vocab | act | tied | rope | rotary dims | weights | sharded | params |")
    a("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        rope = ", ".join(f"{k}={vv}" for k, vv in s["rope"].items())
        a(f"| `{s['name']}` | {s['arch']} | {s['layers']} | {s['hidden']} | {s['heads']} | {s['kv_heads']} "
          f"| {s['head_dim']} | {s['intermediate']} | {s['vocab']} | {s['act']} | {s['tied']} | {rope} "
          f"| {s['rotary_dims']} | {s['weights_dtype']} | {s['sharded']} | {s['n_params']:,} |")
    a("")
    for s in summaries:
        cfg = s["written_cfg"]
        a(f"### `{s['name']}`")
        a("")
        a(f"{s['description']}. Seed {s['seed']}.")
        extra = []
        if s["model_type"] == "gpt_neox":
            extra.append(f"use_parallel_residual={cfg.get('use_parallel_residual')}")
            extra.append(f"attention_bias={cfg.get('attention_bias')}")
            extra.append(f"layer_norm_eps={cfg.get('layer_norm_eps')}")
        else:
            extra.append(f"rms_norm_eps={cfg.get('rms_norm_eps')}")
        if "sliding_window" in cfg:
            extra.append(f"sliding_window={cfg.get('sliding_window')}")
        extra.append(f"max_position_embeddings={cfg.get('max_position_embeddings')}")
        a("Other config: " + ", ".join(extra) + ".")
        if "llama3_regimes" in s:
            regs, wls = s["llama3_regimes"]
            parts = [f"i={i}: wavelen {w:.1f} → {r}" for i, (r, w) in enumerate(zip(regs, wls))]
            a("")
            a("llama3 rope frequency regimes (high_freq_wavelen = orig/high_freq_factor, "
              "low_freq_wavelen = orig/low_freq_factor): " + "; ".join(parts) + ".")
        a("")
        a("| file | bytes |")
        a("|---|---|")
        for fn, n in s["files"].items():
            a(f"| {fn} | {n:,} |")
        a(f"| **total** | {sum(s['files'].values()):,} |")
        a("")
    a("## reference.safetensors")
    a("")
    a(f"B = 4 sequences/prompts, Tmax = {max(FWD_LENGTHS)}, Pmax = {max(GEN_PROMPT_LENGTHS)}, N = {N_GEN} generated")
    a("tokens, V = vocab_size (the whole padded vocab). Row-major, little-endian.")
    a("")
    a("| tensor | dtype | shape | meaning |")
    a("|---|---|---|---|")
    a(f"| `tokens` | I32 | [B, Tmax] | full-forward sequences, lengths {FWD_LENGTHS}; ids uniform in [0, V) from the seed; padding = -1 |")
    a("| `lengths` | I32 | [B] | lengths of `tokens` rows |")
    a("| `forward_logprobs_f32` | F32 | [B, Tmax, V] | fp32 model, each sequence run alone (batch 1, no padding, no cache): `log_softmax(logits, -1)` at every position; position t = distribution of the token after tokens[0..t]. Padding cells NaN |")
    a("| `forward_logprobs_f64` | F64 | [B, Tmax, V] | same, fp64 model (\"true fp64\", below) |")
    a(f"| `gen_prompts` | I32 | [B, Pmax] | greedy prompts, lengths {GEN_PROMPT_LENGTHS}; padding = -1 |")
    a("| `gen_prompt_lengths` | I32 | [B] | prompt lengths |")
    a(f"| `gen_tokens_f32` | I32 | [B, N] | `model.generate(do_sample=False, use_cache=True, min_new_tokens=max_new_tokens={N_GEN})`, fp32 model, each prompt alone; EOS disabled |")
    a("| `gen_logprobs_f32` | F32 | [B, N, V] | log_softmax of the per-step fp32 logits; step i = the distribution that produced new token i |")
    a("| `gen_tokens_f64` | I32 | [B, N] | same with the fp64 model (identical to `gen_tokens_f32` in every fixture; asserted) |")
    a("| `gen_logprobs_f64` | F64 | [B, N, V] | log_softmax of the per-step fp64 logits |")
    a("| `gen_margin_f64` | F64 | [B, N] | top1 − top2 fp64 logit gap at each greedy step |")
    a("")
    a("`__metadata__` holds fixture, description, seed, n_gen, the python/torch/transformers/")
    a("safetensors/numpy versions, weights_dtype, fp64_mode and the check numbers below.")
    a("")
    a("For `neox_bf16` the references are for the fp32 (resp. fp64) computation on the")
    a("bf16-rounded weights: the bf16 checkpoint is loaded back with `dtype=torch.float32`")
    a("(exact widening). For every fixture the references are computed from the model")
    a("reloaded from the files in this folder, after checking it equals the in-memory model.")
    a("")
    a("### fp64 references (\"true fp64\")")
    a("")
    a("Plain `model.double()` in this transformers version is *not* fp64 throughout: eager")
    a("attention does `softmax(..., dtype=torch.float32)`, RMSNorm casts to float32, RoPE")
    a("inv_freq is computed and cos/sin evaluated in float32, and `generate` casts the step")
    a("logits to float32. The fp64 references therefore use the same HF modules with those")
    a("round trips removed: softmax stays fp64, RMSNorm is the same formula without the")
    a("casts, RoPE inv_freq is recomputed in fp64 by HF's formulas (default/linear/llama3;")
    a("checked to match HF's fp32 values to < 1e-6 relative) and cos/sin are fp64; step logits")
    a("are read from a hook on the lm_head. A TorchDispatchMode asserts that no non-fp64")
    a("floating tensor is created inside the model's forward in those runs. Everything else")
    a("(LayerNorm, GELU/SiLU, matmuls, causal mask) is HF's code unchanged. In fp32 the")
    a("HF code is used as is.")
    a("")
    a("## Checks (asserted by the script) and measured numbers")
    a("")
    a(f"- min greedy margin (fp64 top1 − top2 logit, over all B×N steps) > {MIN_MARGIN}")
    a(f"- fp64 self-consistency: max |cached `generate` step log-probs − no-cache forward over prompt+generated| < {SELF_CONSISTENCY_TOL_F64}")
    a(f"- same in fp32 < {SELF_CONSISTENCY_TOL_F32}")
    a("- `scores` == raw `logits` at every step (no logits processor active), greedy token = argmax")
    a("- fp32 and fp64 greedy tokens identical; all stored log-probs finite")
    a("- the reloaded model's parameters equal the in-memory model's (rounded to the stored dtype)")
    a("- an independent plain-numpy fp64 implementation (`np_forward_logprobs` in the script), reading")
    a("  only `config.json` + `*.safetensors` from the fixture folder, reproduces `forward_logprobs_f64`")
    a(f"  and `gen_logprobs_f64` to < {NUMPY_SPEC_TOL} and the greedy tokens exactly")
    a("")
    a("| fixture | min margin (fp64) | cached vs forward fp64 | cached vs forward fp32 | numpy fp64 vs ref fp64 | fwd fp32 vs fp64 | plain `.double()` vs true fp64 | median / max top-1 prob |")
    a("|---|---|---|---|---|---|---|---|")
    for s in summaries:
        a(f"| `{s['name']}` | {s['min_margin']:.4g} | {s['sc64']:.3g} | {s['sc32']:.3g} | {s['np_err']:.3g} "
          f"| {s['fwd_diff_32_64']:.3g} | {s['fwd_diff_native']:.3g} | {s['top_p_median']:.3f} / {s['top_p_max']:.4f} |")
    a("")
    a("All differences are max absolute differences of log-probs. \"fwd fp32 vs fp64\" is how far")
    a("HF's own fp32 computation is from the fp64 reference (a guide for fp32 tolerances).")
    a("\"plain `.double()` vs true fp64\" is how far unpatched `model.double()` would have been.")
    a("")
    a("## Notes for implementers (all verified by the numpy check)")
    a("")
    a("- gpt_neox: `attention.query_key_value` is fused and per-head interleaved: output rows")
    a("  `[h*3*D, h*3*D+D)` are q of head h, the next D rows k, the next D rows v. RoPE rotates")
    a("  the first `rotary_dims = int(head_dim * partial_rotary_factor)` dims of each head in the")
    a("  \"rotate_half\" layout (pairs (i, i + rotary_dims/2)); the rest pass through.")
    a("  Parallel residual: `x + attn(ln1(x)) + mlp(ln2(x))`; sequential: `x = x + attn(ln1(x));")
    a("  x = x + mlp(ln2(x))`. `hidden_act: gelu` is the exact erf GELU. LayerNorm has weight and bias.")
    a("- llama/qwen2/mistral: RoPE in the rotate_half layout over the full head_dim; query head h")
    a("  uses kv head `h // (num_attention_heads / num_key_value_heads)`; attention scale")
    a("  `head_dim**-0.5` with `head_dim` from config (mistral_headdim: 32, so q_proj is [128, 64]")
    a("  and o_proj is [64, 128]). qwen2 has q/k/v biases, no o_proj bias. RMSNorm:")
    a("  `w * x / sqrt(mean(x^2) + eps)`. MLP: `down(silu(gate(x)) * up(x))`.")
    a("- RoPE inv_freq: default `theta^(-2i/d)`; linear divides by `factor`; llama3 per")
    a("  `_np_inv_freq` in the script. Positions start at 0 for every sequence.")
    a("- Tied models have no `lm_head.weight` tensor; the head is `model.embed_tokens.weight`.")
    a("")
    L.append("")
    with open(os.path.join(out_root, "README.md"), "w") as f:
        f.write("\n".join(L))


def write_sums(out_root):
    lines = []
    for root, _, fns in sorted(os.walk(out_root)):
        for fn in sorted(fns):
            if fn in ("SHA256SUMS", "README.md"):
                continue
            p = os.path.join(root, fn)
            os.chmod(p, 0o644)  # safetensors writes 0600
            lines.append(f"{file_sha256(p)}  {os.path.relpath(p, out_root)}")
    lines.sort(key=lambda s: s.split("  ", 1)[1])
    with open(os.path.join(out_root, "SHA256SUMS"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=DEFAULT_OUT, help="output folder (default: data/fixtures)")
    ap.add_argument("--only", action="append", help="only this fixture (repeatable); README/SHA256SUMS not rewritten")
    ap.add_argument("--summary-json", help="also dump the per-fixture summaries here")
    args = ap.parse_args()

    set_determinism()
    os.makedirs(args.out, exist_ok=True)
    specs = [s for s in FIXTURES if not args.only or s["name"] in args.only]
    if args.only:
        missing = set(args.only) - {s["name"] for s in specs}
        assert not missing, f"unknown fixtures {missing}"
    summaries = []
    for spec in specs:
        s = build_fixture(spec, args.out)
        summaries.append(s)
        print(f"{s['name']:16s} params={s['n_params']:7d} files={sum(s['files'].values()):9,d} B "
              f"min_margin={s['min_margin']:.4g} sc64={s['sc64']:.3g} sc32={s['sc32']:.3g} np={s['np_err']:.3g} "
              f"f32vs64={s['fwd_diff_32_64']:.3g} native64={s['fwd_diff_native']:.3g} "
              f"top1p med={s['top_p_median']:.3f} max={s['top_p_max']:.4f}", flush=True)
    if not args.only:
        write_readme(args.out, summaries)
        write_sums(args.out)
    if args.summary_json:
        with open(args.summary_json, "w") as f:
            json.dump(summaries, f, indent=1, default=str)


if __name__ == "__main__":
    main()
